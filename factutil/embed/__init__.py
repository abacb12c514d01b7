"""Embedders and the embedding cache (docs/method.md §2.2).

- :mod:`~factutil.embed.backends`: the :class:`Embedder` protocol, the MiniLM
  (sentence-transformers), int8 ONNX and static embedders, the config's choice of one, devices,
  which texts an embedder reads only in part (:func:`truncated_texts`);
- :mod:`~factutil.embed.encoding`: fixed-shape batching (a text's vector never depends on the
  texts embedded with it), texts as a tokenizer takes them, and L2 normalisation;
- :mod:`~factutil.embed.cache`: :class:`EmbeddingCache` (LRU, bounded by entries and bytes) and
  :func:`embed_unique`, the one path from texts to cached vectors.

Static vectors are made by ``python -m factutil.tools.static_vectors``.
"""

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
