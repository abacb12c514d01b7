"""Candidate pairs and constrained single linkage (docs/method.md §2.3, §2.5): pure functions
over vectors and edges, called by :class:`~factutil.cluster.SemanticClusterer` per batch."""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

import numpy as np


def constrained_linkage(
    n: int,
    edges: np.ndarray,
    similarity: np.ndarray,
    veto: Callable[[int, int], str | None],
    starts: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Single linkage under cannot-link constraints, with no transitive leak (docs/method.md §2.5).
    Edges (int64 (E, 2), i < j, with float ``similarity`` (E,)) are taken from the most to the
    least similar, ties by (i, j); an edge joins two clusters unless ``veto(i, j)`` (i < j)
    separates a member of one from a member of the other. Unlike connected components it never
    leaks through a chain A~B~C; unlike complete linkage it keeps chains of paraphrases
    (docs/decisions.md). ``starts``: int64 (G,), each group's first fact, rising from 0 (None:
    one group); edges never cross groups, so each group gets what it would get alone. Returns
    (canonical labels int64 (n,), counts ``merges``, ``refused`` and ``veto_checks``)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    similarity = np.asarray(similarity, dtype=np.float64)
    if starts is None or len(starts) == 0:
        starts = np.zeros(1, dtype=np.int64)
    group_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n).astype(np.int64)))
    merges = refused = checks = 0
    root = list(range(n))  # each fact's set, named by one member
    # Member lists of the sets with more than one fact (a singleton's is [root]); a merge appends
    # the smaller set's list to the larger one's, and veto checks scan the lists in this order.
    members: dict[int, list[int]] = {}
    order = np.lexsort((edges[:, 1], edges[:, 0], -similarity, group_of[edges[:, 0]]))
    for first, second in edges[order].tolist():
        a, b = root[first], root[second]
        if a == b:
            continue
        members_a = members.get(a) or [a]
        members_b = members.get(b) or [b]
        for i, j in product(members_a, members_b):
            checks += 1
            if (veto(i, j) if i < j else veto(j, i)) is not None:
                refused += 1
                break
        else:  # no veto: the smaller set joins the larger
            if len(members_a) < len(members_b):
                a, b, members_a, members_b = b, a, members_b, members_a
            for member in members_b:
                root[member] = a
            members_a.extend(members_b)
            members[a] = members_a
            members.pop(b, None)
            merges += 1
    labels = canonical_labels(np.array(root, dtype=np.int64), starts)
    return labels, {"merges": merges, "refused": refused, "veto_checks": checks}


def canonical_labels(labels: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """Renumber int ``labels`` (n,) within each contiguous group (``starts`` as
    :func:`constrained_linkage`) by first appearance, int64 (n,): with facts in sorted text order,
    clusters are numbered by their smallest member text, every clusterer's rule (§2)."""
    labels = np.asarray(labels).reshape(-1)
    n = len(labels)
    if starts is None or not len(starts):
        starts = np.zeros(1, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    group_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    # Sort by (group, label, position): the first of each run is its cluster's smallest member.
    order = np.lexsort((index, labels, group_of))
    opens = np.ones(n, dtype=bool)
    sorted_group, sorted_label = group_of[order], labels[order]
    opens[1:] = (sorted_group[1:] != sorted_group[:-1]) | (sorted_label[1:] != sorted_label[:-1])
    smallest = np.empty(n, dtype=np.int64)
    smallest[order] = order[opens][np.cumsum(opens) - 1]
    opened = np.cumsum(smallest == index) - 1
    return (opened[smallest] - opened[starts[group_of]]).astype(np.int64)


def _exact_similarity(
    vectors: np.ndarray, first: np.ndarray, second: np.ndarray, decimals: int, chunk: int = 8192
) -> np.ndarray:
    """Cosines (float64 (E,), rounded to ``decimals``) of the rows ``first[e]``, ``second[e]``:
    float32 products are exact in float64 and each row is summed alone, so a pair's similarity
    depends only on its two vectors, never on the batch or the path that found it."""
    out = np.empty(len(first), dtype=np.float64)
    for start in range(0, len(first), chunk):
        a = vectors[first[start : start + chunk]].astype(np.float64)
        a *= vectors[second[start : start + chunk]]
        np.sum(a, axis=1, out=out[start : start + chunk])
    return np.round(out, decimals, out=out)


def dense_pairs(
    vectors: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    threshold: float,
    decimals: int,
    max_block: int = 1 << 22,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every intra-group pair with cosine >= ``threshold``, exactly, for many groups at once.
    ``vectors``: float32 (m, d), unit rows; ``starts``, ``sizes``: int64 (G,) of contiguous
    groups; ``rows``: int64 (n,), fact i's row (None = i). Groups of one size are multiplied
    stacked in float32, ``max_block`` similarities at a time, and the pairs near the threshold
    recomputed by :func:`_exact_similarity`. Returns unordered (edges int64 (E, 2), i < j,
    similarity float64 (E,))."""
    # A float32 cosine this far below the threshold may still round to it in float64: one unit
    # of the last decimal plus four times the float32 dot-product error bound (dims * 2**-24).
    loose = threshold - (10.0**-decimals + vectors.shape[1] * 2.0**-22)
    if rows is None:
        rows = np.arange(len(vectors), dtype=np.int64)
    found_i: list[np.ndarray] = []
    found_j: list[np.ndarray] = []
    for size in sorted(set(sizes[sizes >= 2].tolist())):
        group_starts = starts[sizes == size]
        if size * size <= max_block:
            upper_i, upper_j = np.triu_indices(size, k=1)
            step = max(1, max_block // (size * size))
            for at in range(0, len(group_starts), step):
                chunk_starts = group_starts[at : at + step]
                stacked = vectors[rows[chunk_starts[:, None] + np.arange(size)]]
                sims = np.matmul(stacked, stacked.transpose(0, 2, 1))[:, upper_i, upper_j]
                group, pair = np.nonzero(sims >= loose)
                found_i.append(chunk_starts[group] + upper_i[pair])
                found_j.append(chunk_starts[group] + upper_j[pair])
            continue
        # One group too big for a block: a band of rows against the whole group at a time.
        band = max(1, max_block // size)
        for start in group_starts.tolist():
            block = vectors[rows[start : start + size]]
            for top in range(0, size, band):
                sims = block[top : top + band] @ block.T
                upper = np.arange(top, top + len(sims))[:, None] < np.arange(size)
                i, j = np.nonzero((sims >= loose) & upper)
                found_i.append(start + top + i)
                found_j.append(start + j)
    if not found_i:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.float64)
    first = np.concatenate(found_i).astype(np.int64)
    second = np.concatenate(found_j).astype(np.int64)
    sims = _exact_similarity(vectors, rows[first], rows[second], decimals)
    keep = sims >= threshold
    return np.stack([first[keep], second[keep]], axis=1), sims[keep]


def candidate_pairs(
    vectors: np.ndarray,
    threshold: float,
    *,
    decimals: int = 4,
    dense_max: int = 4000,
    k: int = 10,
    hnsw_m: int = 16,
    hnsw_ef: int = 64,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of ``vectors`` (float32 (n, d), unit rows) with cosine >= ``threshold`` (§2.3).
    Up to ``dense_max`` vectors, or when ``k`` >= n - 1, every pair (:func:`dense_pairs`); above
    it each vector's ``k`` nearest neighbours from an hnswlib index (ef = max(``hnsw_ef``, k + 1),
    fixed ``seed``, one thread so the graph is deterministic), similarities by
    :func:`_exact_similarity`. Returns (edges int64 (E, 2), i < j, similarity float64 (E,)),
    sorted by (i, j); docs/method.md §2.3."""
    n = len(vectors)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if n > dense_max and k < n - 1:
        import hnswlib

        ef = max(hnsw_ef, k + 1)
        index = hnswlib.Index(space="ip", dim=vectors.shape[1])
        index.init_index(max_elements=n, ef_construction=ef, M=hnsw_m, random_seed=seed)
        index.set_num_threads(1)
        index.add_items(vectors, np.arange(n))
        index.set_ef(ef)
        try:
            neighbours, _ = index.knn_query(vectors, k=k + 1)
        except RuntimeError:  # too few results: a graph over many duplicates can fall short
            pass
        else:
            rows = np.repeat(np.arange(n), neighbours.shape[1])
            cols = neighbours.reshape(-1).astype(np.int64)
            keep = rows != cols
            pairs = np.unique(np.sort(np.stack([rows[keep], cols[keep]], axis=1), axis=1), axis=0)
            sims = _exact_similarity(vectors, pairs[:, 0], pairs[:, 1], decimals)
            keep = sims >= threshold
            return pairs[keep], sims[keep]
    edges, sims = dense_pairs(vectors, np.zeros(1, dtype=np.int64), np.array([n]), threshold,
                              decimals)
    order = np.lexsort((edges[:, 1], edges[:, 0]))
    return edges[order], sims[order]
