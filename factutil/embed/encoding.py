"""Fixed-shape batching and normalisation shared by the embedders.

A text's vector must not depend on the texts embedded with it (padding a text to a longer
neighbour's length, or a matrix product whose shape changes with the batch, moves a vector by
~1e-7, enough to flip an edge at a rounding boundary of ``sim_decimals``). The embedders that run
a model therefore pass texts of one token length together, in passes of one fixed shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
    the default 32, else ``" [rows N]"``. Vectors are only guaranteed bit-equal for equal pass
    shapes, so an embedding cache or shipped per-fact work (matched by the embedder's name) never
    mixes two of them."""
    return "" if rows == default else f" [rows {rows}]"


def readable(texts: Sequence[str]) -> list[str]:
    """``texts`` as a tokenizer takes them: tokenizers take only valid Unicode, so a lone
    surrogate (legal in JSON as ``"\\ud800"``) becomes ``"?"``."""
    return [text.encode("utf-8", "replace").decode("utf-8") for text in texts]


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero), float32 (n, d)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
