"""Key edges (docs/method.md §2.3): facts of one group whose filter analyses give them one
canonical key (e.g. an inverse relation with subject and object swapped) are candidate pairs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["LazyKeys", "add_key_edges"]


class LazyKeys(Sequence):
    """``features[i].key`` read on demand (key edges need the keys of a few facts only)."""

    def __init__(self, features: Sequence[Any]):
        self._features = features

    def __len__(self) -> int:
        return len(self._features)

    def __getitem__(self, index: Any) -> Any:
        return self._features[index].key


def add_key_edges(
    edges: np.ndarray,
    sims: np.ndarray,
    keys: Sequence[Any],
    starts: np.ndarray | None = None,
    hashes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Add an edge of similarity 1.0 from the first fact of a group with a key to each later one
    with an equal key, unless already a candidate (docs/method.md §2.3). ``edges``: int64 (E, 2),
    i < j; ``sims``: float64 (E,); ``keys``: n hashable keys of contiguous groups (``starts`` as
    :func:`~factutil.linkage.constrained_linkage`), ``hashes`` theirs if known. Returns (edges, sims,
    number added), the added edges last."""
    n = len(keys)
    if n < 2:
        return edges, sims, 0
    if hashes is None:
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=n)
    group_of = np.zeros(n, dtype=np.int64)
    if starts is not None and len(starts) > 1:
        group_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    # Facts of one group with one hash are the only candidates: sorted by (group, hash, index),
    # each run of two or more is read, and a fact is linked to the run's first with its key (the
    # keys are compared: equal hashes almost always, not always, mean equal keys).
    order = np.lexsort((np.arange(n), hashes, group_of))
    same = (hashes[order][1:] == hashes[order][:-1]) & (group_of[order][1:] == group_of[order][:-1])
    if not same.any():
        return edges, sims, 0
    bounds = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
    extra = []
    for start, end in zip(bounds[::2].tolist(), bounds[1::2].tolist()):
        first_of: dict[Any, int] = {}
        for index in order[start : end + 1].tolist():  # ascending within a run
            first = first_of.setdefault(keys[index], index)
            if first != index:
                extra.append((first, index))
    if not extra:
        return edges, sims, 0
    extra_edges = np.array(extra, dtype=np.int64)
    if len(edges):
        known = np.isin(
            extra_edges[:, 0] * n + extra_edges[:, 1],
            np.asarray(edges[:, 0], dtype=np.int64) * n + edges[:, 1],
        )
        extra_edges = extra_edges[~known]
    if not len(extra_edges):
        return edges, sims, 0
    return (
        np.concatenate([np.asarray(edges, dtype=np.int64).reshape(-1, 2), extra_edges]),
        np.concatenate([sims, np.ones(len(extra_edges), dtype=np.float64)]),
        len(extra_edges),
    )
