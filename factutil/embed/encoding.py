"""Fixed-shape batching and normalisation shared by the embedders (docs/method.md §2.2).

A text's vector must not depend on the texts embedded with it: padding, or a matrix product
whose shape changes with the batch, moves a vector by ~1e-7, enough to flip an edge at a
rounding boundary of ``sim_decimals``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def fixed_shape_batches(lengths: Sequence[int], rows: int) -> list[np.ndarray]:
    """Batches of at most ``rows`` texts of one token length (``lengths``: n counts as the model
    sees them), int64 indices; the caller fills a short one with copies of its first text, so
    every pass of a length has one shape and no text is padded."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1
    return [
        same[start : start + rows]
        for same in np.split(order, cuts)
        for start in range(0, len(same), rows)
    ]


def rows_suffix(rows: int, default: int = 32) -> str:
    """The suffix of a fixed-shape embedder's ``name`` for ``rows`` rows per pass (``""`` for the
    default): vectors are bit-equal only for equal pass shapes, so caches keyed by name never
    mix two."""
    return "" if rows == default else f" [rows {rows}]"


def readable(texts: Sequence[str]) -> list[str]:
    """``texts`` as a tokenizer takes them: a lone surrogate (legal in JSON) becomes ``"?"``."""
    return [text.encode("utf-8", "replace").decode("utf-8") for text in texts]


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero), float32 (n, d)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
