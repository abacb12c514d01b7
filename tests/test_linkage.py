"""Candidate pairs and constrained single linkage (docs/method.md §2.3 and 5)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from factutil.cluster import candidate_pairs, constrained_linkage
from factutil.embed import l2_normalize
from factutil.linkage import canonical_labels


def test_chain_does_not_leak_through_a_vetoed_pair():
    # A~B (0.95) and B~C (0.90) are both above threshold, but a filter separates A and C.
    edges = np.array([[0, 1], [1, 2]])
    sims = np.array([0.95, 0.90])
    labels, counts = constrained_linkage(3, edges, sims, lambda i, j: "numeric" if (i, j) == (0, 2) else None)
    assert labels.tolist() == [0, 0, 1]  # A-B joined first (higher similarity), B-C refused
    assert counts == {"merges": 1, "refused": 1, "veto_checks": 2}
    # Plain connected components would give one cluster:
    labels, _ = constrained_linkage(3, edges, sims, lambda i, j: None)
    assert labels.tolist() == [0, 0, 0]


def test_canonical_labels_number_each_groups_clusters_by_their_smallest_member():
    # Group 0 = facts 0-2 with labels (5, 5, 2): clusters {0, 1}, {2} -> 0, 0, 1. Group 1 = facts
    # 3-5 with (9, 2, 1): three clusters in order -> 0, 1, 2. Label 2 in both groups is two
    # clusters; an empty group in the middle changes nothing.
    labels = np.array([5, 5, 2, 9, 2, 1])
    assert canonical_labels(labels, np.array([0, 3])).tolist() == [0, 0, 1, 0, 1, 2]
    assert canonical_labels(labels, np.array([0, 3, 3])).tolist() == [0, 0, 1, 0, 1, 2]
    # One group: 5 first, then 2, 9, 1 -> 0 0 1 2 1 3.
    assert canonical_labels(labels).tolist() == [0, 0, 1, 2, 1, 3]
    assert canonical_labels(np.array([1, 1]), np.array([0, 1])).tolist() == [0, 0]
    assert canonical_labels(np.zeros(0, dtype=np.int64)).tolist() == []


def test_most_similar_edge_wins_and_labels_are_canonical():
    edges = np.array([[0, 1], [1, 2]])
    labels, _ = constrained_linkage(3, edges, np.array([0.86, 0.99]), lambda i, j: "x" if (i, j) == (0, 2) else None)
    assert labels.tolist() == [0, 1, 1]  # B-C (0.99) first, then A-B is refused
    labels, _ = constrained_linkage(4, np.zeros((0, 2), dtype=np.int64), np.zeros(0), lambda i, j: None)
    assert labels.tolist() == [0, 1, 2, 3]


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 12), st.data())
def test_no_cluster_ever_holds_a_vetoed_pair(n, data):
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs)))
    vetoed = set(data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))))
    edges = np.array(chosen, dtype=np.int64).reshape(-1, 2)
    sims = np.array(data.draw(st.lists(st.floats(0.8, 1.0), min_size=len(chosen), max_size=len(chosen))))
    labels, _ = constrained_linkage(n, edges, sims, lambda i, j: "v" if (i, j) in vetoed else None)
    for i, j in vetoed:
        assert labels[i] != labels[j]
    for (i, j) in chosen:
        if (i, j) not in vetoed and labels[i] != labels[j]:
            # A surviving edge is only left unmerged when some veto blocks the two clusters.
            a, b = np.flatnonzero(labels == labels[i]), np.flatnonzero(labels == labels[j])
            assert any((min(x, y), max(x, y)) in vetoed for x in a for y in b)


def test_candidate_pairs_threshold_is_inclusive_and_rounded():
    vectors = l2_normalize(np.array([[1.0, 0.0], [0.85, np.sqrt(1 - 0.85**2)], [0.0, 1.0]]))
    edges, sims = candidate_pairs(vectors, 0.85)
    assert edges.tolist() == [[0, 1]] and sims.tolist() == [0.85]
    edges, _ = candidate_pairs(vectors, 0.8501)
    assert edges.tolist() == []


def test_hnsw_candidates_match_dense_on_real_sized_input():
    rng = np.random.default_rng(0)
    centres = l2_normalize(rng.normal(size=(300, 64)))
    vectors = l2_normalize(np.repeat(centres, 3, axis=0) + 0.03 * rng.normal(size=(900, 64)))
    dense_edges, _ = candidate_pairs(vectors, 0.9, dense_max=2000)
    knn_edges, _ = candidate_pairs(vectors, 0.9, dense_max=10, k=10)
    assert len(dense_edges) > 500
    dense = {tuple(e) for e in dense_edges.tolist()}
    knn = {tuple(e) for e in knn_edges.tolist()}
    assert knn <= dense
    assert len(knn) / len(dense) > 0.98
    again, _ = candidate_pairs(vectors, 0.9, dense_max=10, k=10)
    assert np.array_equal(again, knn_edges)
