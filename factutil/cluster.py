"""Facts -> clusters (docs/method.md §2).

A triple becomes text through the configured template and is normalised (NFKC, case-folded,
whitespace collapsed, stripped; :mod:`factutil.facts`, whose names this module re-exports);
identical normalised texts are one item before anything else happens. A :class:`Clusterer` then
assigns every distinct fact of a group to a cluster:
:class:`ExactClusterer` (one cluster per text, the paper's ablation) or
:class:`SemanticClusterer` (embeddings, filters, constrained single linkage; the default).

Clusterers work on a whole batch at once (``cluster_batch``), so the semantic clusterer
deduplicates and embeds the texts of every group in one call. Cluster ids are canonical: within a
group, clusters are numbered by their smallest member text in sorted order, so the ids do not
depend on the order of rollouts, actions or triples.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from itertools import chain, count, islice
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from factutil.config import FactUtilConfig
from factutil.embed import Embedder, EmbeddingCache, config_embedder, device_type, embed_unique
from factutil.facts import (  # noqa: F401  (the fact forms, re-exported where they were)
    _PARTS,
    DEFAULT_TEMPLATE,
    Fact,
    distinct_facts,
    fact_text,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.linkage import (  # noqa: F401  (_exact_similarity: re-exported for its tests)
    _dense_pairs,
    _exact_similarity,
    _linkage,
    candidate_pairs,
    canonical_labels,
    constrained_linkage,
)
from factutil.schema import Triple

_logger = logging.getLogger("factutil")



@runtime_checkable
class Clusterer(Protocol):
    """Assigns the distinct facts of each group to clusters (docs/method.md §2.2–§2.5).

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


def cluster_triples(
    clusterer: Clusterer,
    triples_per_group: Sequence[Sequence[Triple]],
    template: str = DEFAULT_TEMPLATE,
) -> list[np.ndarray]:
    """Cluster labels for arbitrary triples (duplicates allowed, any order), one array per group.

    Args:
        clusterer: any :class:`Clusterer`.
        triples_per_group: per group, n_g triples.
        template: the triple text template (docs/method.md §2.1).

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
    """Exact-match clusters: one cluster per distinct normalised text (docs/method.md §2.1, ``mode="exact"``).

    The paper's ablation baseline: paraphrases in other words are different clusters, letter case
    and spacing are not.
    """

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self._prepared: set[tuple[str, str, str]] = set()

    def add_prepared(self, prepared: Any, warn: Callable[[str], None] | None = None) -> None:
        """Take per-fact work done elsewhere (see :meth:`SemanticClusterer.add_prepared`). Exact
        clusters use no vector and no analysis, so nothing of the work can change a result: its
        facts are only counted in the next call's ``metrics["prepared_facts"]`` (``warn`` is
        never called; ``prepared_ignored`` stays 0).

        Raises:
            TypeError: an item is not a PreparedFacts.
        """
        for item in _prepared_list(prepared):
            self._prepared.update(item.parts)

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]]) -> list[np.ndarray]:
        """One label per fact: ``arange(n)``, since the facts' texts are distinct and sorted."""
        prepared, self._prepared = self._prepared, set()
        self.metrics = {
            "facts": float(sum(len(facts) for facts in facts_per_group)),
            "prepared_facts": float(sum(_PARTS(fact) in prepared
                                        for facts in facts_per_group for fact in facts))
            if prepared else 0.0,  # no per-fact look-up in a step that was given nothing
            "prepared_ignored": 0.0,
            "prepared_other_device": 0.0,  # no vectors
        }
        return [np.arange(len(facts), dtype=np.int64) for facts in facts_per_group]


def make_clusterer(config: FactUtilConfig, embedder: Embedder | None = None) -> Clusterer:
    """The clusterer that ``config.mode`` names: :class:`ExactClusterer` or
    :class:`SemanticClusterer` (with ``embedder``, default the bundled MiniLM)."""
    if config.mode == "exact":
        return ExactClusterer()
    return SemanticClusterer(config, embedder=embedder)


class _FactRecord(NamedTuple):
    """What the clusterer keeps per distinct fact (parts) across calls."""

    text: str  # normalised text (docs/method.md §2.1)
    features: Any  # filter analysis (factutil.filters.FactFeatures), None when not needed
    key_hash: int  # hash(features.key), 0 without features
    serial: int  # unique per record for the clusterer's life: names the fact in the pair memo


class SemanticClusterer:
    """Embedding clusters with negation / numeric / relation vetoes (docs/method.md §2.2–§2.5).

    Per call: every distinct fact text of the batch is embedded once (through the cache); per
    group, candidate pairs are those with cosine >= ``config.sim_threshold`` (plus pairs whose
    filter analysis says they are the same fact: equal canonical keys, e.g. an inverse relation
    with subject and object swapped); the filters in ``config.filters`` are evaluated on demand and
    memoised per pair; :func:`constrained_linkage` forms the clusters.

    The whole batch is worked at once: the groups of at most ``config.knn_min_size`` facts share
    one exact pair search (:func:`_dense_pairs`), larger ones take :func:`candidate_pairs`' k-NN
    path, and one linkage runs over all groups. Each group still gets exactly the labels and counts
    it would get alone, whatever else is in the batch and in whatever order: a pair's similarity
    depends only on its two vectors, its vetoes only on its two facts (each fact is analysed from
    its own parts), and the linkage never joins groups.

    Across calls the clusterer keeps, besides the embedding cache, each fact's text and filter
    analysis and each checked pair's filter result (LRU, ``config.cache_max_entries`` facts and
    as many pairs), and the filters' memo of parts and entity keys (``filter_cache``, a
    :class:`~factutil.filters.FilterCache`): the filters are pure functions of the two facts, and
    training steps meet the same facts and pairs again. A new clusterer starts with all of them
    empty. ``metrics`` count the work of the call as if nothing were kept
    (every pair checked in the call is counted, under the filter that vetoed it).

    Args:
        config: a :class:`FactUtilConfig` (``sim_threshold``, ``filters``, embedding and index
            fields).
        embedder: any :class:`~factutil.embed.Embedder`; None = the one ``config.embedding_backend``
            names (:func:`~factutil.embed.config_embedder`).
        cache: an :class:`~factutil.embed.EmbeddingCache` to reuse; None creates one bounded by
            ``config.cache_max_entries`` / ``config.cache_max_bytes``.

    ``metrics`` after each call: facts, texts embedded, cache hits and misses, candidate edges,
    vetoed pairs per filter, refused merges, and seconds per stage: ``time_filters_s`` (texts and
    filter analyses), ``time_embed_s`` (cache look-ups and the model), ``time_candidates_s``
    (pair search and key edges), ``time_linkage_s`` (vetoes and linkage).
    """

    def __init__(
        self,
        config: FactUtilConfig | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
    ):
        self.config = config if config is not None else FactUtilConfig(mode="semantic")
        self.embedder = embedder if embedder is not None else config_embedder(self.config)
        self.cache = cache if cache is not None else EmbeddingCache(
            self.config.cache_max_entries, self.config.cache_max_bytes
        )
        # Per fact (keyed by its exact parts: the analysis reads letter case) and per checked pair
        # (keyed by the two records' serials), LRU-bounded; valid for one (template, filters).
        self._records: OrderedDict[tuple[str, str, str], _FactRecord] = OrderedDict()
        self._pairs: OrderedDict[int, str] = OrderedDict()
        self._memo_for: tuple[str, tuple[str, ...]] | None = None
        self._serials = count()
        self._filter_cache: Any = None
        # What add_prepared gave for the next call: the facts' parts, the items ignored, and the
        # parts whose vectors came from another kind of device (prepared_device="any").
        self._prepared: set[tuple[str, str, str]] = set()
        self._prepared_ignored = 0
        self._prepared_other: set[tuple[str, str, str]] = set()
        self.metrics: dict[str, float] = {}

    @property
    def filter_cache(self) -> Any:
        """The :class:`~factutil.filters.FilterCache` this clusterer's analyses and vetoes read
        through (created on first use; ``filter_cache.clear()`` empties it)."""
        if self._filter_cache is None:
            from factutil.filters import FilterCache

            self._filter_cache = FilterCache()
        return self._filter_cache

    def warmup(self) -> None:
        """Load the embedding model and the filters' constant tables (pint's unit registry) now
        rather than in the first step; no memo is filled."""
        self.embedder.encode(["warm up"])
        if self.config.filters or self.config.key_edges:
            from factutil.filters import analyze

            analyze("warm up", "length", "5 km")  # no cache: loads the tables, memoises nothing

    def _check_memo(self) -> None:
        """Empty the fact and pair memos when the template or the filters changed."""
        config = self.config
        if self._memo_for != (config.triple_template, tuple(config.filters)):
            self._records.clear()
            self._pairs.clear()
            self._memo_for = (config.triple_template, tuple(config.filters))

    def add_prepared(
        self, prepared: Any, warn: Callable[[str], None] | None = None
    ) -> None:
        """Take per-fact work done elsewhere (:func:`factutil.prepare.prepare_facts`) for the next
        :meth:`cluster_batch` call.

        Each fact's text and analysis enter the fact memo and its vector the embedding cache
        (under the embedder's name); the next call then computes only what is missing, with the
        same result bit for bit. Its ``metrics`` count ``prepared_facts`` (facts of the call
        found in the work given), ``prepared_ignored`` (items made for another embedder,
        template, filters or key edges, or, with ``config.prepared_device="same"``, on another
        kind of device than this clusterer's embedder: see
        :meth:`~factutil.prepare.PreparedFacts.mismatch`; a merged item counts its ``sources``)
        and ``prepared_other_device`` (facts of the call whose vector was taken from work made
        on another kind of device, ``prepared_device="any"``: equal to this device's up to float
        rounding, so not bit for bit); ``cache_misses`` counts the texts the model still
        embedded. Vectors beyond the cache's bounds are dropped (and embedded again) as any
        other entry would be.

        Args:
            prepared: a :class:`~factutil.prepare.PreparedFacts` or a sequence of them.
            warn: called once with a message when some item is ignored, and once when some
                item's vectors come from another kind of device; None = the ``factutil``
                logger's warning.

        Raises:
            TypeError: an item is not a PreparedFacts.
        """
        items, ignored = [], Counter()
        given = _prepared_list(prepared)
        device = device_type(self.embedder) if given else "cpu"
        for item in given:
            reason = item.mismatch(self.config, self.embedder.name, device)
            if reason is None:
                items.append(item)
            else:
                ignored[reason] += getattr(item, "sources", 1)
        self._prepared_ignored += ignored.total()
        if ignored:
            (warn or _logger.warning)(
                f"{ignored.total()} prepared fact set(s) ignored, made for another config, "
                f"embedder or device (their facts are computed here): "
                + "; ".join(f"{count} with {reason}" for reason, count in sorted(ignored.items()))
            )
        other = Counter()
        for item in items:
            made_on = getattr(item, "device", "cpu")
            if made_on != device and item.vectors is not None:
                other[made_on] += getattr(item, "sources", 1)
                self._prepared_other.update(item.parts)
        if other:
            (warn or _logger.warning)(
                f"{other.total()} prepared fact set(s) embedded on another kind of device than "
                f"this step's embedder ({device}): "
                + "; ".join(f"{count} on {kind}" for kind, count in sorted(other.items()))
                + "; their vectors are used and differ from this device's by float rounding "
                "(config prepared_device='same' ignores them)"
            )
        if not items:
            return
        self._check_memo()
        analyse = bool(self.config.filters) or self.config.key_edges
        name = self.embedder.name
        store = self._records
        limit = self.config.cache_max_entries
        for item in items:
            analyses = item.analyses if analyse else None
            parts, texts = item.parts, item.texts
            self._prepared.update(parts)
            if analyses is not None or not analyse:  # without analyses: computed here
                if len(store) + len(parts) <= limit:
                    self._add_records(parts, texts, analyses)
                else:  # evictions interleave with the look-ups: one fact at a time
                    for row, key in enumerate(parts):
                        record = store.get(key)
                        if record is None or (analyse and record.features is None):
                            features = analyses[row] if analyse else None
                            store[key] = _FactRecord(
                                texts[row], features, hash(features.key) if analyse else 0,
                                next(self._serials),
                            )
                            if len(store) > limit:
                                store.popitem(last=False)
            if item.vectors is not None:
                self.cache.put_many(name, texts, item.vectors)

    def _add_records(self, parts: Sequence[tuple[str, str, str]], texts: Sequence[str],
                     analyses: Sequence[Any] | None) -> None:
        """Records of the facts that have none (or none with an analysis, given analyses), in
        order, each with the next serial: what one insert per fact gives when nothing is evicted."""
        store = self._records
        get = store.get
        if analyses is None:
            rows = [row for row, key in enumerate(parts) if key not in store]
            features = [None] * len(rows)
            hashes = [0] * len(rows)
        else:
            rows = [row for row, key in enumerate(parts)
                    if (record := get(key)) is None or record.features is None]
            features = [analyses[row] for row in rows]
            hashes = [hash(f.key) for f in features]
        store.update(zip([parts[row] for row in rows],
                         map(_FactRecord, [texts[row] for row in rows], features, hashes,
                             islice(self._serials, len(rows)))))

    def _fact_records(
        self, parts: Sequence[tuple[str, str, str]], analyse: bool
    ) -> list[_FactRecord]:
        """The record of each ``(subject, relation, object)``, through the LRU memo; with
        ``analyse``, records carry the filter analysis."""
        from factutil.filters import analyze

        config = self.config
        self._check_memo()
        template = config.triple_template
        limit = config.cache_max_entries
        store = self._records
        known = store.get
        touch = store.move_to_end
        filter_cache = self.filter_cache if analyse else None
        records = []
        for key in parts:
            record = known(key)
            if record is None or (analyse and record.features is None):
                features = analyze(*key, cache=filter_cache) if analyse else None
                record = _FactRecord(
                    fact_text(*key, template),
                    features,
                    hash(features.key) if analyse else 0,
                    next(self._serials),
                )
                store[key] = record
                if len(store) > limit:
                    store.popitem(last=False)
            else:
                touch(key)
            records.append(record)
        return records

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]]) -> list[np.ndarray]:
        """Canonical labels per group (see :class:`Clusterer`).

        Args:
            facts_per_group: per group g, n_g distinct facts (:class:`Triple` or :class:`Fact`)
                in sorted text order (:func:`representatives`).

        Returns:
            per group, int64 (n_g,) canonical labels (views of one array).
        """
        config = self.config
        timings = dict.fromkeys(("embed", "candidates", "filters", "linkage"), 0.0)
        hits, misses = self.cache.hits, self.cache.misses

        # 1-2. Texts, analyses and vectors (docs/method.md §2.1–§2.2, 4). Facts are numbered 0..n-1,
        # the groups contiguous; rows[i] is fact i's row in the distinct texts' vectors.
        clock = time.perf_counter()
        parts = list(map(_PARTS, chain.from_iterable(facts_per_group)))
        n = len(parts)
        analyse = bool(config.filters) or config.key_edges
        records = self._fact_records(parts, analyse)
        texts, features, key_hashes, serials = zip(*records) if n else ((), (), (), ())
        timings["filters"] = time.perf_counter() - clock

        clock = time.perf_counter()
        row_of = dict.fromkeys(texts)
        for row, text in enumerate(row_of):
            row_of[text] = row
        vectors = embed_unique(list(row_of), self.embedder, self.cache)
        rows = np.fromiter(map(row_of.__getitem__, texts), dtype=np.int64, count=n)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        timings["embed"] = time.perf_counter() - clock

        per_group, counts = self._link(facts_per_group, vectors, rows, features, key_hashes,
                                       serials, timings)
        prepared, self._prepared = self._prepared, set()
        ignored, self._prepared_ignored = self._prepared_ignored, 0
        other, self._prepared_other = self._prepared_other, set()
        self.metrics = {
            "facts": float(n),
            "prepared_facts": float(sum(key in prepared for key in parts)) if prepared else 0.0,
            "prepared_ignored": float(ignored),
            "prepared_other_device": float(sum(key in other for key in parts)) if other else 0.0,
            "texts_embedded": float(len(row_of)),
            "cache_hits": float(self.cache.hits - hits),
            "cache_misses": float(self.cache.misses - misses),
            "cache_entries": float(len(self.cache)),
            **counts,
        }
        return per_group

    def fits(self, prepared: Any) -> bool:
        """Whether :meth:`cluster_given` can take ``prepared`` (a
        :class:`~factutil.prepare.PreparedFacts`): made for this clusterer's config and embedder
        (:meth:`~factutil.prepare.PreparedFacts.mismatch`) on its kind of device, with vectors
        and, when the filters or key edges need them, analyses. (Work from another kind of
        device goes through :meth:`add_prepared`, which counts and reports it.)"""
        config = self.config
        device = device_type(self.embedder)
        return (prepared.vectors is not None and prepared.device == device
                and (prepared.analyses is not None or not (config.filters or config.key_edges))
                and prepared.mismatch(config, self.embedder.name, device) is None)

    def cluster_given(
        self, facts_per_group: Sequence[Sequence[Triple]], prepared: Any, rows: np.ndarray
    ) -> list[np.ndarray]:
        """:meth:`cluster_batch` with every fact's work given: fact i (numbered across the
        groups) is row ``rows[i]`` of ``prepared`` (a :class:`~factutil.prepare.PreparedFacts`
        that :meth:`fits`, e.g. the shipped rows' work, :mod:`factutil.rollout_work`), its vector
        and analysis read from there. The labels are :meth:`cluster_batch`'s, bit for bit (a
        fact's work depends on the fact alone); nothing enters the caches, and pairs are not
        looked up in or added to the memo of checked pairs (the step's facts are new).

        Args:
            facts_per_group: as :meth:`cluster_batch` takes them.
            prepared: the facts' work.
            rows: int64 (n,), each fact's row in ``prepared``.

        Returns:
            per group, int64 (n_g,) canonical labels (views of one array).

        Raises:
            ValueError: ``prepared`` does not fit, or ``rows`` is not one row per fact.
        """
        n = sum(map(len, facts_per_group))
        rows = np.asarray(rows, dtype=np.int64)
        if not self.fits(prepared):
            raise ValueError(f"cluster_given: {prepared!r} does not fit this clusterer "
                             f"({self.embedder.name!r}, its config)")
        if rows.shape != (n,) or (n and not 0 <= int(rows.min()) <= int(rows.max()) < len(prepared)):
            raise ValueError(f"cluster_given: rows must be {n} rows of the prepared facts, got "
                             f"shape {rows.shape}")
        config = self.config
        timings = dict.fromkeys(("embed", "candidates", "filters", "linkage"), 0.0)
        clock = time.perf_counter()
        analyses = prepared.analyses
        if config.filters or config.key_edges:
            features = [analyses[row] for row in rows.tolist()]
            key_hashes = [hash(feature.key) for feature in features]
        else:
            features = key_hashes = [None] * n
        timings["filters"] = time.perf_counter() - clock
        per_group, counts = self._link(facts_per_group, prepared.vectors, rows, features,
                                       key_hashes, None, timings)
        self.metrics = {
            "facts": float(n), "prepared_facts": float(n), "prepared_ignored": 0.0,
            "prepared_other_device": 0.0,
            "texts_embedded": 0.0, "cache_hits": 0.0, "cache_misses": 0.0,
            "cache_entries": float(len(self.cache)), **counts,
        }
        return per_group

    def _link(
        self, facts_per_group: Sequence[Sequence[Any]], vectors: np.ndarray, rows: np.ndarray,
        features: Sequence[Any], key_hashes: Sequence[Any], serials: Sequence[int] | None,
        timings: dict[str, float],
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Candidate edges, vetoes and linkage of every group (docs/method.md §2.3–§2.5) from each
        fact's vector (row ``rows[i]`` of ``vectors``), analysis and key hash; per group its
        labels, and the counts and stage seconds for ``metrics``."""
        config = self.config
        n = len(rows)
        sizes = np.array([len(facts) for facts in facts_per_group], dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        # 3. Candidate edges (docs/method.md §2.3), in fact numbers.
        clock = time.perf_counter()
        dense = sizes <= config.knn_min_size
        edges, sims = _dense_pairs(
            vectors, starts[dense], sizes[dense], config.sim_threshold, config.sim_decimals,
            rows=rows,
        )
        found_edges, found_sims = [edges], [sims]
        for start, size in zip(starts[~dense].tolist(), sizes[~dense].tolist()):
            group_edges, group_sims = candidate_pairs(
                vectors[rows[start : start + size]], config.sim_threshold,
                decimals=config.sim_decimals, dense_max=config.knn_min_size, k=config.knn_k,
                hnsw_m=config.hnsw_m, hnsw_ef=config.hnsw_ef, seed=config.hnsw_seed,
            )
            found_edges.append(group_edges + start)
            found_sims.append(group_sims)
        if len(found_edges) > 1:
            edges, sims = np.concatenate(found_edges), np.concatenate(found_sims)
        added = 0
        if config.key_edges and n:
            edges, sims, added = _add_key_edges(
                edges, sims, _LazyKeys(features), starts,
                hashes=np.fromiter(key_hashes, dtype=np.int64, count=n),
            )
        timings["candidates"] = time.perf_counter() - clock

        # 4-5. Vetoes on demand and constrained linkage (docs/method.md §2.4–§2.5).
        clock = time.perf_counter()
        veto, vetoes = self._veto(features, serials)
        labels, linkage = _linkage(n, edges, sims, veto, starts)
        ends = (starts + sizes).tolist()
        per_group = [labels[start:end] for start, end in zip(starts.tolist(), ends)]
        timings["linkage"] = time.perf_counter() - clock
        return per_group, {
            "edges": float(len(edges)),
            "key_edges": float(added),
            **{name: float(value) for name, value in linkage.items()},
            **{f"vetoes_{name}": float(value) for name, value in vetoes.items()},
            **{f"time_{name}_s": value for name, value in timings.items()},
        }

    def _veto(
        self, features: Sequence[Any], serials: Sequence[int] | None
    ) -> tuple[Callable[[int, int], str | None], dict[str, int]]:
        """The veto of one call (docs/method.md §2.4) and its per-filter counts.

        ``veto(i, j)`` (i < j, fact numbers) runs the filters of ``config.filters`` in order and
        returns the name of the first that separates facts i and j, or None. ``serials`` None:
        no memo across calls. Within the call each
        pair is evaluated once and, when vetoed, counted once under that filter; across calls the
        outcome (the name only, so a long fact's reason text is not kept) stays in the pair memo.
        """
        from factutil.filters import FILTERS, alike

        names = tuple(self.config.filters)
        filter_cache = self.filter_cache
        enabled = [(name, FILTERS[name]) for name in names]
        limit = self.config.cache_max_entries
        pairs = self._pairs
        known = pairs.get
        touch = pairs.move_to_end
        vetoes = dict.fromkeys(names, 0)
        memo: dict[tuple[int, int], str | None] = {}

        def veto(i: int, j: int) -> str | None:
            if (i, j) in memo:
                return memo[(i, j)]
            key = (serials[i] << 40) | serials[j] if serials is not None else None
            outcome = known(key) if key is not None else None  # a filter's name, "" when none
            if outcome is None:                                 # vetoes, None when not known
                outcome = ""
                a, b = features[i], features[j]
                if enabled and not alike(a, b, filter_cache):  # else no filter can veto
                    for name, check in enabled:
                        if check(a, b, filter_cache) is not None:
                            outcome = name
                            break
                if key is not None:
                    pairs[key] = outcome
                    if len(pairs) > limit:
                        pairs.popitem(last=False)
            else:
                touch(key)
            if outcome:
                vetoes[outcome] += 1
                memo[(i, j)] = outcome
                return outcome
            memo[(i, j)] = None
            return None

        return veto, vetoes


def _prepared_list(prepared: Any) -> list[Any]:
    """``prepared`` as a list of :class:`~factutil.prepare.PreparedFacts` (one or a sequence).

    Raises:
        TypeError: an item is not a PreparedFacts.
    """
    # Known by its fields, not its class: factutil.prepare builds on this module.
    def is_prepared(item: Any) -> bool:
        return all(hasattr(item, name) for name in ("parts", "texts", "vectors", "mismatch"))

    items = [prepared] if is_prepared(prepared) else list(prepared)
    for index, item in enumerate(items):
        if not is_prepared(item):
            raise TypeError(f"prepared[{index}] must be a PreparedFacts, got "
                            f"{type(item).__name__}")
    return items


class _LazyKeys(Sequence):
    """``features[i].key`` read on demand (key edges need the keys of a few facts only)."""

    def __init__(self, features: Sequence[Any]):
        self._features = features

    def __len__(self) -> int:
        return len(self._features)

    def __getitem__(self, index: Any) -> Any:
        return self._features[index].key


def _add_key_edges(
    edges: np.ndarray,
    sims: np.ndarray,
    keys: Sequence[Any],
    starts: np.ndarray | None = None,
    hashes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Add an edge of similarity 1.0 between facts of one group whose canonical filter keys are
    equal (docs/method.md §2.3): from the group's first fact with a key to each later one, unless that
    pair is already a candidate edge.

    Args:
        edges: int64 (E, 2), i < j; sims: float64 (E,).
        keys: n hashable keys, one per fact, the groups contiguous.
        starts: int64 (G,), each group's first fact; None = one group.
        hashes: int64 (n,), ``hash(key)`` of each key if known (saves hashing them again).

    Returns:
        (edges, sims, number of edges added); the added edges come after the given ones.
    """
    n = len(keys)
    if n < 2:
        return edges, sims, 0
    if hashes is None:
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=n)
    group_of = np.zeros(n, dtype=np.int64)
    if starts is not None and len(starts) > 1:
        group_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    # Facts of one group with one hash are the only candidates: sorted by (group, hash, index),
    # each run's first fact is linked to the others. Equal hashes almost always mean equal keys;
    # the keys are compared to be sure, and a run with a collision is grouped exactly.
    order = np.lexsort((np.arange(n), hashes, group_of))
    same = (hashes[order][1:] == hashes[order][:-1]) & (group_of[order][1:] == group_of[order][:-1])
    if not same.any():
        return edges, sims, 0
    opens = np.append(True, ~same)
    run_first = order[np.maximum.accumulate(np.where(opens, np.arange(n), 0))]
    later = np.flatnonzero(~opens)
    pairs = list(zip(run_first[later].tolist(), order[later].tolist()))
    if all(keys[first] == keys[other] for first, other in pairs):
        extra = pairs
    else:
        run_start = np.flatnonzero(opens)
        run_length = np.diff(np.append(run_start, n))
        extra = []
        for start, length in zip(run_start.tolist(), run_length.tolist()):
            first_of: dict[Any, int] = {}
            for index in order[start : start + length].tolist():  # ascending within a run
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
