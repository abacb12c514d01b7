"""Semantic clusters: embeddings, filters, constrained single linkage (docs/method.md §2)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from factutil.cluster.keys import LazyKeys, add_key_edges
from factutil.cluster.memo import FactMemo
from factutil.config import FactUtilConfig
from factutil.embed import (
    Embedder,
    EmbeddingCache,
    config_embedder,
    device_type,
    embed_unique,
    truncated_texts,
)
from factutil.facts import fact_text
from factutil.filters import FILTERS, FilterCache, alike, analyze
from factutil.linkage import batch_linkage, candidate_pairs, dense_pairs
from factutil.schema import Triple
from factutil.workers import FactWork, check_unit, clustering_fit, features_from, fit_key

__all__ = ["SemanticClusterer"]

_logger = logging.getLogger("factutil")
_PARTS = attrgetter("subject", "relation", "object")  # of a Triple or a Fact
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
               MemoryError, OverflowError)


class SemanticClusterer:
    """Embedding clusters with filter vetoes and constrained single linkage (docs/method.md §2).

    A batch is worked at once, yet each group gets exactly the labels and counts it would get
    alone: a pair's similarity depends only on its two vectors, its vetoes only on its two facts,
    and the linkage never joins groups. State kept across calls, bounded and owned here:
    ``cache`` (vectors), ``memo`` (each fact's text and analysis, each checked pair's veto) and
    ``filter_cache``; ``metrics`` count the work of the last call as if nothing were kept.

    ``embedder`` None is :func:`~factutil.embed.config_embedder` of ``config``; ``cache`` None
    creates an :class:`~factutil.embed.EmbeddingCache` bounded by the config's cache fields.
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
        self.memo = FactMemo(self.config.cache_max_entries)
        self.filter_cache = FilterCache()
        # What add_work gave for the next call: the facts' parts, the items ignored or
        # unreadable, and the parts whose vectors came from another kind of device.
        self._given: set[tuple[str, str, str]] = set()
        self._ignored = self._unreadable = 0
        self._other: set[tuple[str, str, str]] = set()
        self.metrics: dict[str, float] = {}

    @property
    def fit(self) -> str:
        """The :func:`~factutil.workers.fit_key` of the work this clusterer takes."""
        return fit_key(clustering_fit(self.config, self.embedder.name))

    def warmup(self) -> None:
        """Load the model and the filters' constant tables now rather than in the first step."""
        self.embedder.encode(["warm up"])
        if self.config.filters or self.config.key_edges:
            analyze("warm up", "length", "5 km")  # no cache: loads the tables, memoises nothing

    def add_work(self, work: Any, warn: Callable[[str], None] | None = None) -> None:
        """Take per-fact work made elsewhere (:func:`factutil.workers.make_work`) for the next
        :meth:`cluster_batch`, which then computes only what is missing, same result bit for bit.
        ``work``: a :class:`~factutil.workers.FactWork`, its bytes, or a sequence of them or of
        their field mappings (None items skipped). An item of another :attr:`fit`, of another
        kind of device under ``prepared_device="same"``, or unreadable is ignored, counted and
        reported through ``warn`` (None = the ``factutil`` logger); nothing raises."""
        warn = warn or _logger.warning
        items = FactWork.items_of(work)
        fit, device = self.fit, device_type(self.embedder)
        ignored: Counter[str] = Counter()
        other: Counter[str] = Counter()
        unreadable: list[str] = []
        kept = []
        for item in items:
            if item is None:
                continue
            try:
                item = FactWork.of(item)
            except ValueError as error:
                unreadable.append(str(error))
                continue
            if item.fit != fit:
                ignored[f"fit {item.fit!r:.40}, not {fit!r}"] += 1
            elif item.device != device and self.config.prepared_device == "same":
                ignored[f"device {item.device!r:.20}, not {device!r}"] += 1
            elif len(item):
                kept.append(item)
        self.memo.check(clustering_fit(self.config, self.embedder.name))
        try:  # the items together; when that fails, each alone, to leave out the bad ones only
            if kept:
                self._take(kept)
        except _UNREADABLE:
            for item in kept:
                try:
                    self._take([item])
                except _UNREADABLE as error:
                    unreadable.append(f"{type(error).__name__}: {error!s:.120}")
        for item in kept:
            if item.device != device:
                other[item.device] += 1
                self._other.update(item.parts)
        self._ignored += ignored.total()
        self._unreadable += len(unreadable)
        if ignored:
            warn(f"{ignored.total()} work item(s) ignored, made for another clustering config, "
                 f"embedder, factutil version or device (their facts are computed here): "
                 + "; ".join(f"{n} with {reason}" for reason, n in sorted(ignored.items())))
        if unreadable:
            warn(f"{len(unreadable)} work item(s) ignored, unreadable (their facts are computed "
                 f"here): {unreadable[0]}")
        if other:
            warn(f"{other.total()} work item(s) embedded on another kind of device than this "
                 f"step's embedder ({device}): "
                 + "; ".join(f"{n} on {kind}" for kind, n in sorted(other.items()))
                 + "; their vectors are used and differ from this device's by float rounding "
                 "(config prepared_device='same' ignores them)")

    def _take(self, items: Sequence[FactWork]) -> None:
        """Put the facts of ``items`` into the caches (the first vector of each distinct fact),
        checking everything before storing anything; raises on a malformed item."""
        analyse = bool(self.config.filters) or self.config.key_edges
        parts: list[tuple[str, str, str]] = []
        analyses: list[Any] = []
        truncated: list[bool | None] = []
        for item in items:
            if item.vectors is None or (analyse and item.analyses is None):
                raise ValueError("work without vectors or analyses")
            parts += zip(item.subjects, item.relations, item.objects)
            if analyse:
                analyses += item.analyses
            truncated += item.truncated if item.truncated is not None else [None] * len(item)
        vectors = np.concatenate([item.vectors for item in items]) if len(items) > 1 \
            else items[0].vectors
        first = dict(zip(reversed(parts), range(len(parts) - 1, -1, -1)))  # each key's first row
        rows = list(first.values())
        check_unit(vectors[rows])
        template = self.config.triple_template
        texts = [fact_text(*parts[row], template) for row in rows]
        records = self.memo.records
        new = [k for k, row in enumerate(rows) if (record := records.get(parts[row])) is None
               or (analyse and record.features is None)]
        features = [features_from(parts[rows[k]], analyses[rows[k]]) for k in new] \
            if analyse else None
        self.memo.add([parts[rows[k]] for k in new], [texts[k] for k in new], features,
                      [truncated[rows[k]] for k in new])
        self.cache.put_many(self.embedder.name, texts, vectors[rows])
        self._given.update(first)

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Triple]],
                      warn: Callable[[str], None] | None = None) -> list[np.ndarray]:
        """Per group, int64 (n_g,) canonical labels of its n_g distinct facts (:class:`Triple`
        or :class:`~factutil.facts.Fact`, in sorted text order), as views of one array.
        A fact whose text the embedder reads only in part shares a cluster with no fact of
        another text (docs/method.md §2.4); ``warn`` (None = the ``factutil`` logger) gets one
        warning per call naming how many."""
        config = self.config
        timings = dict.fromkeys(("embed", "candidates", "filters", "linkage"), 0.0)
        hits, misses = self.cache.hits, self.cache.misses

        # 1-2. Texts, analyses and vectors (docs/method.md §2.1-§2.2, 4). Facts are numbered
        # 0..n-1, the groups contiguous; rows[i] is fact i's row in the distinct texts' vectors.
        clock = time.perf_counter()
        parts = list(map(_PARTS, chain.from_iterable(facts_per_group)))
        n = len(parts)
        analyse = bool(config.filters) or config.key_edges
        self.memo.check(clustering_fit(config, self.embedder.name))
        records = self.memo.records_of(parts, config.triple_template, analyse,
                                       self.filter_cache if analyse else None)
        texts, features, key_hashes, serials, cut = zip(*records) if n else ((),) * 5
        timings["filters"] = time.perf_counter() - clock

        clock = time.perf_counter()
        row_of = {text: row for row, text in enumerate(dict.fromkeys(texts))}
        vectors = embed_unique(list(row_of), self.embedder, self.cache)
        rows = np.fromiter(map(row_of.__getitem__, texts), dtype=np.int64, count=n)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if None in cut:  # facts not asked yet: each distinct text once, the answers kept
            unknown = sorted({text for text, flag in zip(texts, cut) if flag is None})
            answer = dict(zip(unknown, truncated_texts(unknown, self.embedder).tolist()))
            cut = [answer[text] if flag is None else flag for text, flag in zip(texts, cut)]
            self.memo.set_truncated(parts, records, cut)
        truncated = {text for text, flag in zip(texts, cut) if flag} if any(cut) else set()
        timings["embed"] = time.perf_counter() - clock
        if truncated:
            (warn or _logger.warning)(
                f"{len(truncated)} fact text(s) longer than the embedding model reads "
                f"({getattr(self.embedder, 'max_tokens', None)} tokens, {self.embedder.name}): "
                f"each is its own cluster, merged only with facts of the same full text")

        per_group, counts = self._link(facts_per_group, vectors, rows, features, key_hashes,
                                       serials, timings, texts if truncated else None, cut)
        given, self._given = self._given, set()
        other, self._other = self._other, set()
        self.metrics = {
            "facts": float(n),
            "work_facts": float(sum(key in given for key in parts)) if given else 0.0,
            "work_ignored": float(self._ignored),
            "work_unreadable": float(self._unreadable),
            "work_other_device": float(sum(key in other for key in parts)) if other else 0.0,
            "texts_embedded": float(len(row_of)),
            "texts_truncated": float(len(truncated)),
            "cache_hits": float(self.cache.hits - hits),
            "cache_misses": float(self.cache.misses - misses),
            "cache_entries": float(len(self.cache)),
            **counts,
        }
        self._ignored = self._unreadable = 0
        return per_group

    def _link(
        self, facts_per_group: Sequence[Sequence[Any]], vectors: np.ndarray, rows: np.ndarray,
        features: Sequence[Any], key_hashes: Sequence[Any], serials: Sequence[int],
        timings: dict[str, float], texts: Sequence[str] | None = None,
        truncated: Sequence[bool] = (),
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Candidate edges, vetoes and linkage of every group (docs/method.md §2.3–§2.5): per
        group its labels, and the counts and stage seconds for ``metrics``."""
        config = self.config
        n = len(rows)
        sizes = np.array([len(facts) for facts in facts_per_group], dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        # 3. Candidate edges (docs/method.md §2.3), in fact numbers.
        clock = time.perf_counter()
        dense = sizes <= config.knn_min_size
        edges, sims = dense_pairs(
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
            edges, sims, added = add_key_edges(
                edges, sims, LazyKeys(features), starts,
                hashes=np.fromiter(key_hashes, dtype=np.int64, count=n),
            )
        timings["candidates"] = time.perf_counter() - clock

        # 4-5. Vetoes on demand and constrained linkage (docs/method.md §2.4–§2.5).
        clock = time.perf_counter()
        veto, vetoes = self._veto(features, serials, texts, truncated)
        labels, linkage = batch_linkage(n, edges, sims, veto, starts)
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
        self, features: Sequence[Any], serials: Sequence[int], texts: Sequence[str] | None = None,
        truncated: Sequence[bool] = (),
    ) -> tuple[Callable[[int, int], str | None], dict[str, int]]:
        """The veto of one call (docs/method.md §2.4) and its per-filter counts: ``veto(i, j)``
        (i < j) returns ``"truncated"``, the name of the first filter of ``config.filters`` that
        separates facts i and j, or None. Each pair counts once per call; the pair memo keeps
        the name only across calls (not a long reason text)."""
        names = tuple(self.config.filters)
        filter_cache = self.filter_cache
        enabled = [(name, FILTERS[name]) for name in names]
        pairs = self.memo.pairs
        known = pairs.get
        keep = self.memo.keep
        vetoes = dict.fromkeys((*names, "truncated"), 0)
        memo: dict[tuple[int, int], str | None] = {}

        def veto(i: int, j: int) -> str | None:
            if (i, j) in memo:
                return memo[(i, j)]
            if texts is not None and (truncated[i] or truncated[j]) and texts[i] != texts[j]:
                vetoes["truncated"] += 1
                memo[(i, j)] = "truncated"
                return "truncated"
            key = (serials[i] << 40) | serials[j]
            outcome = known(key)  # a filter's name, "" when none vetoes, None when not known
            if outcome is None:
                outcome = ""
                a, b = features[i], features[j]
                if enabled and not alike(a, b, filter_cache):  # else no filter can veto
                    for name, check in enabled:
                        if check(a, b, filter_cache) is not None:
                            outcome = name
                            break
                if keep:
                    pairs[key] = outcome
            if outcome:
                vetoes[outcome] += 1
            memo[(i, j)] = outcome or None
            return outcome or None

        return veto, vetoes
