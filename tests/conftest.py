"""A cheap algebra-only embedder (MiniLM and the static vectors: the root conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import HashingVectorizer

from factutil.embed import l2_normalize


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


@pytest.fixture
def char_grams() -> CharGramEmbedder:
    return CharGramEmbedder()
