"""Shared fixtures: one real MiniLM embedder per test session, the default static vectors, and a
cheap algebra-only embedder."""

from __future__ import annotations

import os

import numpy as np
import pytest
from sklearn.feature_extraction.text import HashingVectorizer

from factutil.embed import SentenceTransformerEmbedder, default_static_dir, l2_normalize
from factutil.tools.static_vectors import distill_static


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


@pytest.fixture(scope="session")
def static_vectors() -> str:
    """The default static vectors' folder (what ``embedding_backend="static"`` reads), distilled
    there once (about a minute) when missing, as ``python -m factutil.tools.static_vectors``."""
    path = default_static_dir()
    if not os.path.exists(os.path.join(path, "vectors.npy")):
        distill_static(path, progress=False)
    return path


@pytest.fixture
def char_grams() -> CharGramEmbedder:
    return CharGramEmbedder()
