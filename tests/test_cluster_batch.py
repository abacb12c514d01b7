"""The batched semantic clusterer (docs/method.md §2): one call for the whole batch gives each group exactly
what it would get alone, in any group order, on the dense and the k-NN path alike."""

from __future__ import annotations

import random
from itertools import permutations

import numpy as np
import pytest

from factutil.cluster import (
    Fact,
    SemanticClusterer,
    candidate_pairs,
    constrained_linkage,
    triple_text,
)
from factutil.cluster.keys import add_key_edges
from factutil.embed import EmbeddingCache, embed_unique
from factutil.filters import FILTERS, analyze
from factutil.linkage import _exact_similarity, dense_pairs
from factutil.schema import FactUtilConfig, Triple

from .conftest import CharGramEmbedder

COUNTS = ("facts", "texts_embedded", "edges", "key_edges", "merges", "refused", "veto_checks",
          "vetoes_negation", "vetoes_numeric", "vetoes_relation", "vetoes_entity")
ADDITIVE = ("facts", "edges", "key_edges", "merges", "refused", "veto_checks", "vetoes_negation",
            "vetoes_numeric", "vetoes_relation", "vetoes_entity")

ERNEST = "Ernest I, Prince of Anhalt-Dessau"
# A chain: A (1516) ~ B (no year) ~ C (1517); the numeric filter separates A and C only.
CHAIN = [Fact(ERNEST, "date of death", "12 June 1516"), Fact(ERNEST, "date of death", "12 June"),
         Fact(ERNEST, "date of death", "12 June 1517")]
LYNCH = [Fact("David Lynch", "place of birth", "Missoula, Montana"),
         Fact("david lynch", "was born in", "Missoula, Montana"),
         Fact("Missoula, Montana", "birthplace of", "David Lynch"),
         Fact("David Lynch", "was not born in", "Missoula, Montana"),
         Fact("David Lynch", "place of death", "Missoula, Montana")]

# One text, two groups, parts that differ in letter case: "May 1990" is a date (vetoed against
# June 1990), "may 1990" is not read as one. Each group's analysis must come from its own parts.
SAME_TEXT_LOWER = [Fact("Event", "date", "June 1990"), Fact("Event", "date", "may 1990")]
SAME_TEXT_UPPER = [Fact("Event", "date", "June 1990"), Fact("Event", "date", "May 1990")]


class TableEmbedder:
    """Chosen vectors for chosen texts (cosines set exactly), char-gram vectors for the rest."""

    name = "test:table"

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table
        self.fallback = CharGramEmbedder()

    def encode(self, texts: list[str]) -> np.ndarray:
        out = self.fallback.encode(texts)
        for row, text in enumerate(texts):
            if text in self.table:
                out[row] = 0.0
                out[row, : len(self.table[text])] = self.table[text]
        return out


def _unit_vectors(gram: list[list[float]]) -> np.ndarray:
    """Unit vectors (rows, float32) whose pairwise cosines are ``gram`` (positive definite)."""
    return np.linalg.cholesky(np.array(gram, dtype=np.float64)).astype(np.float32)


def _sorted(facts):
    return sorted(facts, key=triple_text)


def _chain_and_tie_embedder() -> TableEmbedder:
    # In sorted text order ("12 june" < "12 june 1516" < "12 june 1517") the chain is B, A, C.
    b, a, c = (triple_text(f) for f in _sorted(CHAIN))
    # cos(A, C) = 0.99 (vetoed), cos(A, B) = 0.95, cos(B, C) = 0.95: a tie between the two links
    # of B, broken by (i, j) = (B, A) before (B, C).
    vectors = _unit_vectors([[1.0, 0.95, 0.95], [0.95, 1.0, 0.99], [0.95, 0.99, 1.0]])
    june, may = _unit_vectors([[1.0, 0.95], [0.95, 1.0]])
    return TableEmbedder({b: vectors[0], a: vectors[1], c: vectors[2],
                          "event | date | june 1990": june, "event | date | may 1990": may})


def _groups():
    """Hand-made groups: empty, one fact, the vetoed chain, paraphrases with inverse and negated
    look-alikes (key edges and vetoes), a case variant of another group's text, char-gram noise."""
    return [
        [],
        [Fact("Paris", "capital of", "France")],
        _sorted(CHAIN),
        _sorted(LYNCH),
        _sorted([Fact("DAVID LYNCH", "place of birth", "Missoula, Montana"),
                 Fact("David Lynch", "birthplace", "Missoula, Montana")]),
        [],
        SAME_TEXT_LOWER,
        _sorted([Fact("Ronnie Rocket", "director", "David Lynch"),
                 Fact("Ronnie Rocket", "directed by", "David Lynch"),
                 Fact("David Lynch", "director of", "Ronnie Rocket"),
                 Fact("Ronnie Rocket", "cast member", "David Lynch")]),
        SAME_TEXT_UPPER,
    ]


def _counts(metrics):
    return {name: metrics[name] for name in COUNTS if name in metrics}


def _cluster(config, embedder, groups):
    clusterer = SemanticClusterer(config, embedder=embedder)
    labels = clusterer.cluster_batch(groups)
    return labels, clusterer.metrics


def test_the_chain_premise_holds():
    a, b, c = (analyze(*fact) for fact in CHAIN)
    assert FILTERS["numeric"](a, c) is not None
    for x, y in ((a, b), (b, c)):
        assert all(check(x, y) is None for check in FILTERS.values())


def test_vetoed_chain_and_a_tie_give_the_order_defined_result():
    config = FactUtilConfig(mode="semantic", sim_threshold=0.9)
    labels, metrics = _cluster(config, _chain_and_tie_embedder(), [_sorted(CHAIN)])
    # Sorted B, A, C. A~C (0.99) is checked and vetoed first; B~A and B~C tie at 0.95: (B, A)
    # comes first and merges, then (B, C) checks B-C (fine) and A-C (vetoed) and is refused.
    assert labels[0].tolist() == [0, 0, 1]
    assert (metrics["merges"], metrics["refused"], metrics["veto_checks"]) == (1, 2, 4)
    assert metrics["vetoes_numeric"] == 1 and metrics["edges"] == 3


@pytest.mark.parametrize("knn_min_size", [4000, 2])
def test_batch_equals_each_group_alone(knn_min_size):
    config = FactUtilConfig(mode="semantic", sim_threshold=0.8, knn_min_size=knn_min_size)
    groups = _groups()
    embedder = _chain_and_tie_embedder()
    labels, metrics = _cluster(config, embedder, groups)
    alone = [_cluster(config, embedder, [group]) for group in groups]
    assert [g.tolist() for g in labels] == [a[0][0].tolist() for a in alone]
    assert all(g.dtype == np.int64 for g in labels)
    for name in ADDITIVE:
        assert metrics[name] == sum(a[1][name] for a in alone), name
    # Not a vacuous batch: merges, refusals, key edges and vetoes of two filters all happen.
    assert metrics["merges"] > 0 and metrics["refused"] > 0 and metrics["key_edges"] > 0
    assert metrics["vetoes_numeric"] > 0 and metrics["vetoes_negation"] > 0
    assert [len(g) for g in labels] == [len(g) for g in groups]


def test_each_group_is_analysed_from_its_own_parts():
    config = FactUtilConfig(mode="semantic", sim_threshold=0.8)
    assert triple_text(SAME_TEXT_LOWER[1]) == triple_text(SAME_TEXT_UPPER[1])
    for groups in ([SAME_TEXT_LOWER, SAME_TEXT_UPPER], [SAME_TEXT_UPPER, SAME_TEXT_LOWER]):
        labels, metrics = _cluster(config, _chain_and_tie_embedder(), groups)
        by_group = {id(group): g.tolist() for group, g in zip(groups, labels)}
        assert by_group[id(SAME_TEXT_LOWER)] == [0, 0]  # no date: merges
        assert by_group[id(SAME_TEXT_UPPER)] == [0, 1]  # May vs June: vetoed
        assert metrics["vetoes_numeric"] == 1 and metrics["merges"] == 1


def test_group_order_does_not_change_any_group():
    config = FactUtilConfig(mode="semantic", sim_threshold=0.8)
    groups = _groups()
    embedder = _chain_and_tie_embedder()
    reference, reference_metrics = _cluster(config, embedder, groups)
    for order in random.Random(3).sample(list(permutations(range(len(groups)))), 6):
        labels, metrics = _cluster(config, embedder, [groups[k] for k in order])
        for position, k in enumerate(order):
            assert labels[position].tolist() == reference[k].tolist()
        assert _counts(metrics) == _counts(reference_metrics)


def test_triples_and_facts_give_the_same_result():
    config = FactUtilConfig(mode="semantic", sim_threshold=0.8)
    groups = _groups()
    as_triples = [[Triple(subject=f.subject, relation=f.relation, object=f.object) for f in g]
                  for g in groups]
    facts, facts_metrics = _cluster(config, _chain_and_tie_embedder(), groups)
    triples, triples_metrics = _cluster(config, _chain_and_tie_embedder(), as_triples)
    assert [g.tolist() for g in facts] == [g.tolist() for g in triples]
    assert _counts(facts_metrics) == _counts(triples_metrics)


@pytest.mark.parametrize("overrides", [
    {"filters": []},
    {"key_edges": False},
    {"filters": [], "key_edges": False},
    {"cache_max_entries": 2},
])
def test_repeated_calls_and_other_configs_keep_the_batch_equal_to_alone(overrides):
    config = FactUtilConfig(mode="semantic", sim_threshold=0.8, knn_min_size=3, **overrides)
    groups = _groups()
    embedder = _chain_and_tie_embedder()
    clusterer = SemanticClusterer(config, embedder=embedder)
    first = clusterer.cluster_batch(groups)
    first_metrics = dict(clusterer.metrics)
    again = clusterer.cluster_batch(groups)  # warm: texts, analyses and pair results are kept
    assert [g.tolist() for g in again] == [g.tolist() for g in first]
    assert _counts(clusterer.metrics) == _counts(first_metrics)
    for group, labels in zip(groups, first):
        assert clusterer.cluster_batch([group])[0].tolist() == labels.tolist()
    if not config.filters:
        # no filter counts; the truncation veto holds whatever the filters (nothing is cut here)
        vetoes = [name for name in first_metrics if name.startswith("vetoes_")]
        assert vetoes == ["vetoes_truncated"]
        assert first_metrics["vetoes_truncated"] == 0
        assert first_metrics["refused"] == 0 and first_metrics["veto_checks"] > 0
    if not config.key_edges:
        assert first_metrics["key_edges"] == 0


def test_mixed_dense_and_knn_groups_in_one_batch():
    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "theta", "kappa"]
    groups = []
    for size in (0, 1, 3, 4, 5, 9, 2, 12):
        facts = {Fact(f"{rng.choice(words)} {rng.choice(words)}", "related to",
                      f"{rng.choice(words)} {int(rng.integers(3))}") for _ in range(size)}
        groups.append(_sorted(facts))
    # Groups above 4 facts take hnswlib; with k = 10 >= n - 1 it returns every pair, so the
    # labels equal the all-dense ones, and each group equals itself alone.
    mixed = FactUtilConfig(mode="semantic", sim_threshold=0.5, knn_min_size=4)
    dense = FactUtilConfig(mode="semantic", sim_threshold=0.5)
    embedder = CharGramEmbedder()
    mixed_labels, mixed_metrics = _cluster(mixed, embedder, groups)
    dense_labels, dense_metrics = _cluster(dense, embedder, groups)
    assert [g.tolist() for g in mixed_labels] == [g.tolist() for g in dense_labels]
    assert _counts(mixed_metrics) == _counts(dense_metrics)
    assert mixed_metrics["merges"] > 0
    for group, labels in zip(groups, mixed_labels):
        assert _cluster(mixed, embedder, [group])[0][0].tolist() == labels.tolist()


def test_empty_batches():
    clusterer = SemanticClusterer(FactUtilConfig(mode="semantic"), embedder=CharGramEmbedder())
    assert clusterer.cluster_batch([]) == []
    assert clusterer.metrics["facts"] == 0
    labels = clusterer.cluster_batch([[], []])
    assert [(g.dtype, g.shape) for g in labels] == [(np.int64, (0,)), (np.int64, (0,))]


def _reference_linkage(n, edges, sims, veto):
    """The per-group constrained linkage as first written (union-find with member lists)."""
    parent, members = list(range(n)), [[i] for i in range(n)]

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    counts = {"merges": 0, "refused": 0, "veto_checks": 0}
    order = np.lexsort((edges[:, 1], edges[:, 0], -sims)) if len(edges) else []
    for e in order:
        a, b = find(int(edges[e, 0])), find(int(edges[e, 1]))
        if a == b:
            continue
        blocked = False
        for i in members[a]:
            for j in members[b]:
                counts["veto_checks"] += 1
                if veto(min(i, j), max(i, j)) is not None:
                    blocked = True
                    break
            if blocked:
                break
        if blocked:
            counts["refused"] += 1
            continue
        if len(members[a]) < len(members[b]):
            a, b = b, a
        parent[b] = a
        members[a].extend(members[b])
        members[b] = []
        counts["merges"] += 1
    roots = [find(i) for i in range(n)]
    first = {}
    labels = [first.setdefault(root, len(first)) for root in roots]
    return np.array(labels, dtype=np.int64), counts


def test_batched_linkage_equals_the_reference_per_group():
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 9, size=40)
    starts = np.cumsum(sizes) - sizes
    n = int(sizes.sum())
    vetoed = set()
    all_edges, all_sims = [], []
    for start, size in zip(starts.tolist(), sizes.tolist()):
        pairs = [(i, j) for i in range(size) for j in range(i + 1, size) if rng.random() < 0.6]
        for i, j in pairs:
            all_edges.append((start + i, start + j))
            all_sims.append(rng.choice([0.9, 0.95, 0.97]))  # many ties
            if rng.random() < 0.3:
                vetoed.add((start + i, start + j))
    edges = np.array(all_edges, dtype=np.int64).reshape(-1, 2)
    sims = np.array(all_sims, dtype=np.float64)
    shuffle = rng.permutation(len(edges))

    def veto(i, j):
        return "x" if (i, j) in vetoed else None

    labels, counts = constrained_linkage(n, edges[shuffle], sims[shuffle], veto, starts)
    expected_counts = {"merges": 0, "refused": 0, "veto_checks": 0}
    for start, size in zip(starts.tolist(), sizes.tolist()):
        inside = (edges[:, 0] >= start) & (edges[:, 0] < start + size)
        expected, group_counts = _reference_linkage(
            size, edges[inside] - start, sims[inside], lambda i, j, s=start: veto(i + s, j + s))
        assert labels[start : start + size].tolist() == expected.tolist()
        alone, alone_counts = constrained_linkage(
            size, edges[inside] - start, sims[inside], lambda i, j, s=start: veto(i + s, j + s))
        assert alone.tolist() == expected.tolist() and alone_counts == group_counts
        for name in expected_counts:
            expected_counts[name] += group_counts[name]
    assert counts == expected_counts
    assert counts["refused"] > 0 and counts["merges"] > 0


def test_key_edges_are_exact_under_hash_collisions():
    keys = ["k1", "k2", "k1", "k3", "k2", "k1", "k1", "k4", "k4"]
    starts = np.array([0, 5])
    edges = np.array([[0, 2]], dtype=np.int64)  # already a candidate: not added again
    sims = np.array([0.93])
    honest = add_key_edges(edges, sims, keys, starts)
    colliding = add_key_edges(edges, sims, keys, starts, hashes=np.zeros(len(keys), dtype=np.int64))
    for result in (honest, colliding):
        assert result[0][0].tolist() == [0, 2] and result[1].tolist() == [0.93, 1.0, 1.0, 1.0]
        assert sorted(result[0][1:].tolist()) == [[1, 4], [5, 6], [7, 8]] and result[2] == 3
    # Groups never share key edges: as one group, 0 (the first "k1") links 5 and 6 instead.
    one_group = add_key_edges(edges, sims, keys)
    assert sorted(one_group[0][1:].tolist()) == [[0, 5], [0, 6], [1, 4], [7, 8]]


def test_pair_similarity_depends_only_on_the_pair():
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(60, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    edges, sims = candidate_pairs(vectors, 0.0)
    sub = [3, 17, 18, 40, 41, 59]
    sub_edges, sub_sims = candidate_pairs(vectors[sub], 0.0)
    lookup = {(int(i), int(j)): s for (i, j), s in zip(edges, sims)}
    assert len(sub_edges) > 0
    for (i, j), s in zip(sub_edges, sub_sims):
        assert lookup[(sub[i], sub[j])] == s
    knn_edges, knn_sims = candidate_pairs(vectors, 0.0, dense_max=10, k=59)
    assert knn_edges.tolist() == edges.tolist() and knn_sims.tolist() == sims.tolist()
    exact = np.array([round(float(np.dot(vectors[i].astype(np.float64), vectors[j])), 4)
                      for i, j in edges])
    assert np.abs(exact - sims).max() <= 1e-12


def test_dense_pairs_in_small_blocks_equal_one_block():
    rng = np.random.default_rng(4)
    centres = rng.normal(size=(12, 16))
    vectors = (np.repeat(centres, 10, axis=0) + 0.3 * rng.normal(size=(120, 16))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    starts, sizes = np.array([0, 7, 7, 50]), np.array([7, 0, 43, 70])
    whole = dense_pairs(vectors, starts, sizes, 0.8, 4)
    for max_block in (1, 100, 2000):  # bands of rows, and several groups per block
        blocked = dense_pairs(vectors, starts, sizes, 0.8, 4, max_block=max_block)
        order_a = np.lexsort((whole[0][:, 1], whole[0][:, 0]))
        order_b = np.lexsort((blocked[0][:, 1], blocked[0][:, 0]))
        assert blocked[0][order_b].tolist() == whole[0][order_a].tolist()
        assert blocked[1][order_b].tolist() == whole[1][order_a].tolist()
    edges = whole[0]
    assert len(edges) > 50
    group = np.searchsorted(starts + sizes, edges[:, 0], side="right")
    assert np.array_equal(group, np.searchsorted(starts + sizes, edges[:, 1], side="right"))
    assert np.array_equal(
        whole[1], _exact_similarity(vectors, edges[:, 0], edges[:, 1], 4))


def test_get_many_keeps_lru_order_and_counts_each_text():
    one, many = EmbeddingCache(max_entries=3), EmbeddingCache(max_entries=3)
    for cache in (one, many):
        for text in "abc":
            cache.put_many("m", [text], np.full((1, 2), ord(text), dtype=np.float32))
    expected = [one.get_many("m", [text])[0] for text in "axb"]
    got = many.get_many("m", list("axb"))
    assert [v is None for v in got] == [v is None for v in expected] == [False, True, False]
    assert (many.hits, many.misses) == (one.hits, one.misses) == (2, 1)
    for cache in (one, many):  # "d" evicts "c", the least recently used
        cache.put_many("m", ["d"], np.zeros((1, 2), dtype=np.float32))
    c, a = many.get_many("m", ["c", "a"])
    assert c is None and a is not None
    assert one.get_many("m", ["c"])[0] is None


def test_embed_unique_embeds_the_missing_texts_sorted():
    embedder = CharGramEmbedder()
    cache = EmbeddingCache()
    out = embed_unique(["z y", "b", "z y", "a"], embedder, cache)
    assert embedder.calls == [["a", "b", "z y"]]
    assert out.shape == (4, 512) and np.array_equal(out[0], out[2])
    assert np.array_equal(out[3], embedder.encode(["a"])[0])
    again = embed_unique(["q", "b", "c"], embedder, cache)
    assert embedder.calls[-1] == ["c", "q"] and np.array_equal(again[1], out[1])
    assert (cache.hits, cache.misses) == (1, 5)
