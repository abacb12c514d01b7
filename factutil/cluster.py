"""Facts -> clusters (SPEC.md §2).

A triple becomes text through the configured template and is normalised (NFKC, case-folded,
whitespace collapsed, stripped); identical normalised texts are one item before anything else
happens. A :class:`Clusterer` then assigns every distinct fact of a group to a cluster:
:class:`ExactClusterer` (one cluster per text, the paper's ablation) or
:class:`SemanticClusterer` (embeddings, filters, constrained single linkage; the default).

Clusterers work on a whole batch at once (``cluster_batch``), so the semantic clusterer
deduplicates and embeds the texts of every group in one call. Cluster ids are canonical: within a
group, clusters are numbered by their smallest member text in sorted order, so the ids do not
depend on the order of rollouts, actions or triples.
"""

from __future__ import annotations

import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from factutil.embed import Embedder, EmbeddingCache, embed_unique, make_embedder
from factutil.schema import FactUtilConfig, Triple

DEFAULT_TEMPLATE = "{subject} | {relation} | {object}"



def normalize_fact_text(text: str) -> str:
    """Normalise text as SPEC §2.1 says: Unicode NFKC, case-fold, collapse whitespace, strip.

    Also used for search queries when detecting a repeated search (SPEC §5).
    """
    # str.split() splits on exactly the characters re's \s matches (str.isspace), and is faster.
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


class Fact(NamedTuple):
    """A triple's three parts as a plain tuple: what the pipeline passes to a :class:`Clusterer`.

    Has the same ``subject`` / ``relation`` / ``object`` attributes as :class:`Triple` (whose
    validation it has already passed) at a fraction of the cost, and compares as a tuple.
    """

    subject: str
    relation: str
    object: str


@lru_cache(maxsize=1 << 16)
def fact_text(subject: str, relation: str, object: str, template: str = DEFAULT_TEMPLATE) -> str:  # noqa: A002
    """The normalised text of the triple ``(subject, relation, object)`` under ``template``
    (SPEC §2.1). Memoised (65,536 most recent triples): rollouts repeat facts, and a training run
    meets the same facts step after step."""
    return normalize_fact_text(template.format(subject=subject, relation=relation, object=object))


def triple_text(triple: Triple | Fact, template: str = DEFAULT_TEMPLATE) -> str:
    """The normalised text of a triple under ``template`` (SPEC §2.1)."""
    return fact_text(triple.subject, triple.relation, triple.object, template)


def canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Renumber cluster labels by first appearance.

    Args:
        labels: int array (n,), any cluster labels of texts given in sorted order.

    Returns:
        int64 array (n,): cluster ``k`` is the k-th cluster met scanning the sorted texts, i.e.
        clusters are ordered by their smallest member text.
    """
    labels = np.asarray(labels)
    _, first_index, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first_index), dtype=np.int64)
    rank[np.argsort(first_index, kind="stable")] = np.arange(len(first_index), dtype=np.int64)
    return rank[inverse.reshape(-1)]


@runtime_checkable
class Clusterer(Protocol):
    """Assigns the distinct facts of each group to clusters (SPEC §2 steps 2–5).

    ``cluster_batch(facts_per_group)`` takes, per group, one representative :class:`Triple` per
    distinct normalised text, ordered by that text (see :func:`representatives`), and returns, per
    group, an int64 array of the same length with canonical cluster labels (see
    :func:`canonical_labels`). Groups never share clusters; ``metrics`` (a dict of floats) reports
    what the last call did.
    """

    metrics: dict[str, float]

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]]) -> list[np.ndarray]:
        """Cluster labels (int64, one array per group) for each group's distinct facts."""
        ...


def representatives(
    triples: Sequence[Triple], template: str = DEFAULT_TEMPLATE
) -> tuple[list[str], list[Triple]]:
    """Distinct normalised texts of ``triples`` in sorted order, each with one representative.

    The representative of a text is the smallest ``(subject, relation, object)`` among the triples
    that share it, so the choice does not depend on input order.

    Returns:
        (texts, triples), both of length k = number of distinct texts.
    """
    best: dict[str, Triple] = {}
    for triple in triples:
        text = triple_text(triple, template)
        current = best.get(text)
        if current is None or _parts(triple) < _parts(current):
            best[text] = triple
    texts = sorted(best)
    return texts, [best[text] for text in texts]


def _parts(triple: Triple) -> tuple[str, str, str]:
    return (triple.subject, triple.relation, triple.object)


def cluster_triples(
    clusterer: Clusterer,
    triples_per_group: Sequence[Sequence[Triple]],
    template: str = DEFAULT_TEMPLATE,
) -> list[np.ndarray]:
    """Cluster labels for arbitrary triples (duplicates allowed, any order), one array per group.

    Args:
        clusterer: any :class:`Clusterer`.
        triples_per_group: per group, n_g triples.
        template: the triple text template (SPEC §2.1).

    Returns:
        per group, int64 (n_g,): the canonical cluster of each triple, in the given order.
    """
    texts_per_group, facts_per_group = [], []
    for triples in triples_per_group:
        texts, facts = representatives(triples, template)
        texts_per_group.append(texts)
        facts_per_group.append(facts)
    labels = clusterer.cluster_batch(facts_per_group)
    result = []
    for triples, texts, group_labels in zip(triples_per_group, texts_per_group, labels):
        label_of = dict(zip(texts, group_labels.tolist()))
        result.append(
            np.array([label_of[triple_text(t, template)] for t in triples], dtype=np.int64)
        )
    return result


class ExactClusterer:
    """Exact-match clusters: one cluster per distinct normalised text (SPEC §2.1, ``mode="exact"``).

    The paper's ablation baseline: paraphrases in other words are different clusters, letter case
    and spacing are not.
    """

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]]) -> list[np.ndarray]:
        """One label per fact: ``arange(n)``, since the facts' texts are distinct and sorted."""
        self.metrics = {"facts": float(sum(len(facts) for facts in facts_per_group))}
        return [np.arange(len(facts), dtype=np.int64) for facts in facts_per_group]


def make_clusterer(config: FactUtilConfig, embedder: Embedder | None = None) -> Clusterer:
    """The clusterer that ``config.mode`` names: :class:`ExactClusterer` or
    :class:`SemanticClusterer` (with ``embedder``, default the bundled MiniLM)."""
    if config.mode == "exact":
        return ExactClusterer()
    return SemanticClusterer(config, embedder=embedder)


class _UnionFind:
    """Disjoint sets over 0..n-1 that also keep each set's member list (for veto checks)."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.members = [[i] for i in range(n)]

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        if len(self.members[a]) < len(self.members[b]):
            a, b = b, a
        self.parent[b] = a
        self.members[a].extend(self.members[b])
        self.members[b] = []


def constrained_linkage(
    n: int,
    edges: np.ndarray,
    similarity: np.ndarray,
    veto: Callable[[int, int], str | None],
) -> tuple[np.ndarray, dict[str, int]]:
    """Single-linkage clustering under cannot-link constraints, with no transitive leak.

    Edges are taken from the most to the least similar (ties by (i, j)); an edge joins the clusters
    of its two ends unless ``veto`` separates *any* member of one cluster from *any* member of the
    other. So no final cluster holds two members that a filter separates, even through a chain
    A~B~C where A and C are vetoed: whichever link comes second is refused.

    Why not plain connected components over the surviving edges: components are transitive, so
    A~B and B~C merge A and C even when the negation or numeric filter splits them — the leak SPEC
    §2 step 5 forbids. Why not complete linkage: it needs every pair of a cluster above the
    threshold, which breaks the chains of paraphrases (born in ~ was born in ~ place of birth) that
    single linkage keeps. Constrained single linkage keeps those chains and enforces every veto;
    with a fixed edge order it is deterministic, and since facts are indexed in sorted text order,
    independent of input order.

    Args:
        n: number of facts.
        edges: int64 (E, 2), candidate pairs (i < j).
        similarity: float (E,), the (quantised) similarity of each edge.
        veto: ``veto(i, j)`` returns a reason when facts i and j must not share a cluster.

    Returns:
        (labels int64 (n,) canonical, counts) where counts has ``merges``, ``refused`` (edges
        whose clusters a veto kept apart) and ``veto_checks`` (pairs checked).
    """
    sets = _UnionFind(n)
    order = np.lexsort((edges[:, 1], edges[:, 0], -similarity)) if len(edges) else []
    merges = refused = checks = 0
    for e in order:
        a, b = sets.find(int(edges[e, 0])), sets.find(int(edges[e, 1]))
        if a == b:
            continue
        blocked = False
        for i in sets.members[a]:
            for j in sets.members[b]:
                checks += 1
                if veto(min(i, j), max(i, j)) is not None:
                    blocked = True
                    break
            if blocked:
                break
        if blocked:
            refused += 1
            continue
        sets.union(a, b)
        merges += 1
    labels = np.array([sets.find(i) for i in range(n)], dtype=np.int64)
    return canonical_labels(labels), {"merges": merges, "refused": refused, "veto_checks": checks}


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
    """Pairs of facts whose cosine similarity is at least ``threshold`` (inclusive).

    Up to ``dense_max`` vectors the full similarity matrix is exact; above it an hnswlib
    inner-product index (M = ``hnsw_m``, ef_construction = ef = ``hnsw_ef``, fixed ``seed``, one
    thread so the graph is deterministic) gives each vector's ``k`` nearest neighbours, whose exact
    similarity is then recomputed. Similarities are rounded to ``decimals`` so that float noise
    from batching cannot reorder or flip edges (except exactly at a rounding boundary).

    Args:
        vectors: float32 (n, d), L2-normalised.
        threshold: cosine in [-1, 1].

    Returns:
        (edges int64 (E, 2) with i < j, similarity float64 (E,)), sorted by (i, j).
    """
    n = len(vectors)
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.float64)
    vectors = np.asarray(vectors, dtype=np.float32)
    if n <= dense_max:
        sims = vectors @ vectors.T
        # Threshold loosely in float32 first, then round only the survivors.
        i, j = np.nonzero(np.triu(sims >= threshold - 10.0**-decimals, k=1))
        rounded = np.round(sims[i, j].astype(np.float64), decimals)
        keep = rounded >= threshold
        return np.stack([i[keep], j[keep]], axis=1).astype(np.int64), rounded[keep]
    import hnswlib

    index = hnswlib.Index(space="ip", dim=vectors.shape[1])
    index.init_index(max_elements=n, ef_construction=hnsw_ef, M=hnsw_m, random_seed=seed)
    index.set_num_threads(1)
    index.add_items(vectors, np.arange(n))
    index.set_ef(max(hnsw_ef, k + 1))
    neighbours, _ = index.knn_query(vectors, k=min(k + 1, n))
    rows = np.repeat(np.arange(n), neighbours.shape[1])
    cols = neighbours.reshape(-1).astype(np.int64)
    keep = rows != cols
    pairs = np.unique(np.sort(np.stack([rows[keep], cols[keep]], axis=1), axis=1), axis=0)
    sims = np.round(
        np.einsum("ij,ij->i", vectors[pairs[:, 0]], vectors[pairs[:, 1]]).astype(np.float64),
        decimals,
    )
    keep = sims >= threshold
    return pairs[keep], sims[keep]


class SemanticClusterer:
    """Embedding clusters with negation / numeric / relation vetoes (SPEC §2 steps 2–5).

    Per call: every distinct fact text of the batch is embedded once (through the cache); per
    group, candidate pairs are those with cosine >= ``config.sim_threshold`` (plus pairs whose
    filter analysis says they are the same fact: equal canonical keys, e.g. an inverse relation
    with subject and object swapped); the filters in ``config.filters`` are evaluated on demand and
    memoised per pair; :func:`constrained_linkage` forms the clusters.

    Args:
        config: a :class:`FactUtilConfig` (``sim_threshold``, ``filters``, embedding and index
            fields).
        embedder: any :class:`~factutil.embed.Embedder`; None = the one ``config.embedding_backend``
            names (:func:`~factutil.embed.make_embedder`).
        cache: an :class:`~factutil.embed.EmbeddingCache` to reuse; None creates one bounded by
            ``config.cache_max_entries`` / ``config.cache_max_bytes``.

    ``metrics`` after each call: facts, texts embedded, cache hits and misses, candidate edges,
    vetoed pairs per filter, refused merges, and seconds per stage.
    """

    def __init__(
        self,
        config: FactUtilConfig | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
    ):
        self.config = config if config is not None else FactUtilConfig(mode="semantic")
        self.embedder = embedder if embedder is not None else make_embedder(
            self.config.embedding_backend,
            self.config.embedding_model,
            device=self.config.embedding_device,
            batch_size=self.config.embedding_batch_size,
        )
        self.cache = cache if cache is not None else EmbeddingCache(
            self.config.cache_max_entries, self.config.cache_max_bytes
        )
        # Filter analyses keyed by the exact parts (analysis reads letter case), LRU-bounded.
        self._features: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self.metrics: dict[str, float] = {}

    def warmup(self) -> None:
        """Load the embedding model and the filters' unit tables now rather than in the first step."""
        self.embedder.encode(["warm up"])
        if self.config.filters or self.config.key_edges:
            from factutil.filters import analyze

            analyze("warm up", "length", "5 km")

    def _analysis(self, fact: Triple) -> Any:
        from factutil.filters import analyze

        key = (fact.subject, fact.relation, fact.object)
        found = self._features.get(key)
        if found is None:
            found = analyze(*key)
            self._features[key] = found
            if len(self._features) > self.config.cache_max_entries:
                self._features.popitem(last=False)
        else:
            self._features.move_to_end(key)
        return found

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]]) -> list[np.ndarray]:
        """Canonical labels per group (see :class:`Clusterer`)."""
        config = self.config
        timings = dict.fromkeys(("embed", "candidates", "filters", "linkage"), 0.0)
        hits, misses = self.cache.hits, self.cache.misses
        clock = time.perf_counter()
        texts_per_group = [
            [triple_text(fact, config.triple_template) for fact in facts] for facts in facts_per_group
        ]
        batch_texts = sorted({text for texts in texts_per_group for text in texts})
        row_of = {text: row for row, text in enumerate(batch_texts)}
        vectors = embed_unique(batch_texts, self.embedder, self.cache)
        timings["embed"] = time.perf_counter() - clock

        clock = time.perf_counter()
        analyse = bool(config.filters) or config.key_edges
        features: dict[str, Any] = {}
        enabled: list[tuple[str, Callable[[Any, Any], str | None]]] = []
        if analyse:
            from factutil.filters import FILTERS

            enabled = [(name, FILTERS[name]) for name in config.filters]
            for facts, texts in zip(facts_per_group, texts_per_group):
                for fact, text in zip(facts, texts):
                    if text not in features:
                        features[text] = self._analysis(fact)
        timings["filters"] += time.perf_counter() - clock

        vetoes = dict.fromkeys(config.filters, 0)
        counts = {"edges": 0, "key_edges": 0, "merges": 0, "refused": 0, "veto_checks": 0}
        labels = []
        for texts in texts_per_group:
            clock = time.perf_counter()
            group_vectors = vectors[[row_of[text] for text in texts]] if texts else vectors[:0]
            edges, sims = candidate_pairs(
                group_vectors, config.sim_threshold, decimals=config.sim_decimals,
                dense_max=config.knn_min_size, k=config.knn_k, hnsw_m=config.hnsw_m,
                hnsw_ef=config.hnsw_ef, seed=config.hnsw_seed,
            )
            if config.key_edges:
                edges, sims, added = _add_key_edges(edges, sims, [features[t].key for t in texts])
                counts["key_edges"] += added
            counts["edges"] += len(edges)
            timings["candidates"] += time.perf_counter() - clock

            clock = time.perf_counter()
            feats = [features.get(text) for text in texts]
            memo: dict[tuple[int, int], str | None] = {}

            def veto(i: int, j: int, feats=feats, memo=memo) -> str | None:
                if (i, j) not in memo:
                    reason = None
                    for name, check in enabled:
                        reason = check(feats[i], feats[j])
                        if reason is not None:
                            vetoes[name] += 1
                            reason = f"{name}: {reason}"
                            break
                    memo[(i, j)] = reason
                return memo[(i, j)]

            group_labels, linkage = constrained_linkage(len(texts), edges, sims, veto)
            for name in ("merges", "refused", "veto_checks"):
                counts[name] += linkage[name]
            labels.append(group_labels)
            timings["linkage"] += time.perf_counter() - clock
        self.metrics = {
            "facts": float(sum(len(texts) for texts in texts_per_group)),
            "texts_embedded": float(len(batch_texts)),
            "cache_hits": float(self.cache.hits - hits),
            "cache_misses": float(self.cache.misses - misses),
            "cache_entries": float(len(self.cache)),
            **{name: float(value) for name, value in counts.items()},
            **{f"vetoes_{name}": float(value) for name, value in vetoes.items()},
            **{f"time_{name}_s": value for name, value in timings.items()},
        }
        return labels


def _add_key_edges(
    edges: np.ndarray, sims: np.ndarray, keys: list[Any]
) -> tuple[np.ndarray, np.ndarray, int]:
    """Add an edge of similarity 1.0 between facts whose canonical filter keys are equal."""
    by_key: dict[Any, list[int]] = {}
    for index, key in enumerate(keys):
        by_key.setdefault(key, []).append(index)
    existing = {(int(i), int(j)) for i, j in edges}
    extra = [
        (members[0], other)
        for members in by_key.values()
        for other in members[1:]
        if (members[0], other) not in existing
    ]
    if not extra:
        return edges, sims, 0
    extra_edges = np.array(extra, dtype=np.int64)
    return (
        np.concatenate([edges, extra_edges]),
        np.concatenate([sims, np.ones(len(extra), dtype=np.float64)]),
        len(extra),
    )
