"""Embedders (``backends``), fixed-shape batching (``encoding``) and the embedding cache
(``cache``) (docs/method.md §2.2)."""

from factutil.embed.backends import (
    BACKENDS,
    Embedder,
    OnnxMiniLMEmbedder,
    SentenceTransformerEmbedder,
    StaticEmbedder,
    auto_device,
    config_embedder,
    default_model_path,
    default_static_dir,
    device_type,
    make_embedder,
    minilm_tokenizer,
    truncated_texts,
)
from factutil.embed.cache import EmbeddingCache, embed_unique
from factutil.embed.encoding import fixed_shape_batches, l2_normalize, readable, rows_suffix

__all__ = [
    "BACKENDS", "Embedder", "EmbeddingCache", "OnnxMiniLMEmbedder", "SentenceTransformerEmbedder",
    "StaticEmbedder", "auto_device", "config_embedder", "default_model_path", "default_static_dir",
    "device_type", "embed_unique", "fixed_shape_batches", "l2_normalize", "make_embedder",
    "minilm_tokenizer", "readable", "rows_suffix", "truncated_texts",
]
