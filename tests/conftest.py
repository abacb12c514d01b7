"""Shared fixtures: one real MiniLM embedder per test session, and a cheap algebra-only embedder."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import HashingVectorizer

from factutil.embed import SentenceTransformerEmbedder, l2_normalize


class CharGramEmbedder:
    """Character 2–4-gram hashing vectors: a deterministic stand-in for tests about the algebra
    (potentials, order independence), never for tests about clustering quality."""

    name = "test:char-grams"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._vectorizer = HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=512,
                                             alternate_sign=False, norm=None)

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return l2_normalize(self._vectorizer.transform(texts).toarray().astype(np.float32))


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    """The real default embedder (bundled all-MiniLM-L6-v2 on CPU), loaded once per session."""
    embedder = SentenceTransformerEmbedder(device="cpu")
    embedder.encode(["warm up"])
    return embedder


@pytest.fixture
def char_grams() -> CharGramEmbedder:
    return CharGramEmbedder()
