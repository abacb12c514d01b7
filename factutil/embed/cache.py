"""The embedding cache, an object its owner passes across steps, and the one path that fills it
(docs/method.md §2.2)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from cachetools import LRUCache

from factutil.embed.backends import Embedder
from factutil.embed.encoding import readable


class EmbeddingCache:
    """Thread-safe LRU cache of vectors keyed by (embedder name, text), bounded by entries and
    bytes (``max_entries`` 0 disables it); ``hits`` and ``misses`` count lookups."""

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 256 * 2**20):
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(
                f"max_entries and max_bytes must be >= 0, got {max_entries} and {max_bytes}"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        # The LRUCache bounds the bytes; the entry bound is applied after each insert.
        self._store: LRUCache[tuple[str, str], np.ndarray] = LRUCache(
            max_bytes, getsizeof=lambda vector: vector.nbytes)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: tuple[str, str]) -> bool:
        """Whether ``(name, text)`` is held (not counted, not made recent)."""
        return key in self._store

    @property
    def nbytes(self) -> int:
        """Bytes of vector data held."""
        return int(self._store.currsize)

    def get_many(self, name: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached float32 (d,) vector of each text, or None, in order, under one lock."""
        with self._lock:
            found = self._store.get
            vectors = [found((name, text)) for text in texts]
            hits = sum(vector is not None for vector in vectors)
            self.hits += hits
            self.misses += len(vectors) - hits
            return vectors

    def put_many(self, name: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store read-only copies of the rows of ``vectors`` (float32 (len(texts), d)), in order,
        under one lock; a vector over ``max_bytes`` is not stored. ValueError: not one row per text.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"put_many: vectors {vectors.shape} for {len(texts)} texts "
                             f"(one row per text)")
        if not (self.max_entries and len(texts) and vectors[0].nbytes <= self.max_bytes):
            return
        rows = [vector.copy() for vector in vectors]  # each its own buffer, freed on eviction
        for row in rows:
            row.setflags(write=False)
        with self._lock:
            store = self._store
            for text, row in zip(texts, rows):
                store[(name, text)] = row
                if len(store) > self.max_entries:
                    store.popitem()


def embed_unique(
    texts: Sequence[str], embedder: Embedder, cache: EmbeddingCache | None = None
) -> np.ndarray:
    """Embed texts, each distinct text once, reusing and filling ``cache`` (docs/method.md §2.2):
    float32 (n, d), row i for texts[i], (0, 0) for none; ValueError for an embedder's wrong shape.
    The missing texts go to one ``encode`` in sorted order, whatever the order of ``texts``."""
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
        # The cache keys the original text; the model reads it as a tokenizer takes it.
        encoded = np.asarray(embedder.encode(readable(missing_texts)), dtype=np.float32)
        if encoded.ndim != 2 or encoded.shape[0] != len(missing):
            raise ValueError(
                f"embedder {embedder.name!r} returned shape {encoded.shape} for {len(missing)} "
                f"texts"
            )
        for position, vector in zip(missing, encoded):
            vectors[position] = vector
        if cache is not None:
            cache.put_many(embedder.name, missing_texts, encoded)
    if len(unique) == len(texts):
        rows = vectors
    else:
        row_of = dict(zip(unique, vectors))
        rows = [row_of[text] for text in texts]
    # One C-level copy of the rows (np.stack costs ~0.4 us more per row); a ragged result raises.
    return np.array(rows, dtype=np.float32)
