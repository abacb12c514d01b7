"""Semantic clusters: embeddings, filters, constrained single linkage (docs/method.md §2)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from factutil.cluster.keys import LazyKeys, add_key_edges
from factutil.cluster.memo import FactMemo
from factutil.config import FactUtilConfig
from factutil.embed import Embedder, EmbeddingCache, config_embedder, embed_unique, truncated_texts
from factutil.facts import Fact, fact_parts, fact_text
from factutil.filters import FILTERS, FilterCache, alike, analyze
from factutil.linkage import candidate_pairs, constrained_linkage, dense_pairs

__all__ = ["Given", "SemanticClusterer"]

_logger = logging.getLogger("factutil")


class Given(NamedTuple):
    """Facts whose vectors were made elsewhere, checked (factutil.workers.read_work): m
    ``(subject, relation, object)``, float32 (m, d) unit vectors, bool (m,) truncation flags."""

    parts: list[tuple[str, str, str]]
    vectors: np.ndarray
    truncated: np.ndarray


class SemanticClusterer:
    """Embedding clusters with filter vetoes and constrained single linkage (docs/method.md §2).

    A batch is worked at once, yet each group gets exactly the labels and counts it would get
    alone: a pair's similarity depends only on its two vectors, its vetoes only on its two facts,
    and the linkage never joins groups. State kept across calls, bounded and owned here:
    ``cache`` (vectors), ``memo`` (each fact's text and analysis, each checked pair's veto) and
    ``filter_cache``. Threads may share one: calls run one at a time, the model loads once, each
    :meth:`cluster` returns its own metrics (as if nothing were kept) and ``metrics`` holds the
    last call's.

    ``embedder`` None is :func:`~factutil.embed.config_embedder` of ``config``; ``cache`` None
    creates an :class:`~factutil.embed.EmbeddingCache` bounded by the config's cache fields. The
    config and the embedder are fixed for the clusterer's life.
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
        self.metrics: dict[str, float] = {}
        self._lock = threading.RLock()
        self._dims: int | None = None

    @property
    def dims(self) -> int:
        """The width of the embedder's vectors (one text embedded once to learn it)."""
        with self._lock:
            if self._dims is None:
                self._dims = int(np.asarray(self.embedder.encode(["width"])).shape[1])
            return self._dims

    def warmup(self) -> None:
        """Load the model and the filters' constant tables now rather than in the first step."""
        with self._lock:
            self.embedder.encode(["warm up"])
        if self.config.filters or self.config.key_edges:
            analyze("warm up", "length", "5 km")  # no cache: loads the tables, memoises nothing

    def embed_facts(self, parts: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """Float32 (n, d) vectors and bool (n,) truncation flags of the facts ``parts`` (docs/method.md
        §2.2), through this clusterer's cache: what its :meth:`cluster_batch` would use."""
        texts = [fact_text(*key, self.config.triple_template) for key in parts]
        with self._lock:
            vectors = embed_unique(texts, self.embedder, self.cache) if texts \
                else np.zeros((0, self.dims), np.float32)
            return vectors, truncated_texts(texts, self.embedder)

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Fact]],
                      warn: Callable[[str], None] | None = None,
                      given: Given | None = None) -> list[np.ndarray]:
        """:meth:`cluster`'s labels (the :class:`~factutil.cluster.Clusterer` protocol)."""
        return self.cluster(facts_per_group, warn, given)[0]

    def cluster(self, facts_per_group: Sequence[Sequence[Fact]],
                warn: Callable[[str], None] | None = None, given: Given | None = None,
                texts_per_group: Sequence[Sequence[str]] | None = None,
                ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Per group, int64 (n_g,) canonical labels of its n_g distinct facts (:class:`Fact`
        or anything with ``subject``, ``relation``, ``object``, in sorted text order), as views of
        one array, and the call's counts and stage seconds. ``given``: facts whose vectors and
        truncation flags were made elsewhere (kept in the cache; their analyses are made here);
        ``texts_per_group``: the facts' normalised texts, when the caller has them.
        A fact whose text the embedder reads only in part shares a cluster with no fact of
        another text (docs/method.md §2.4); ``warn`` (None = the ``factutil`` logger) gets one
        warning per call naming how many."""
        with self._lock:
            labels, self.metrics = self._cluster(facts_per_group, warn or _logger.warning, given,
                                                 texts_per_group)
            return labels, self.metrics

    def _cluster(self, facts_per_group: Sequence[Sequence[Fact]], warn: Callable[[str], None],
                 given: Given | None, texts_per_group: Sequence[Sequence[str]] | None,
                 ) -> tuple[list[np.ndarray], dict[str, float]]:
        config = self.config
        timings = dict.fromkeys(("embed", "candidates", "filters", "linkage"), 0.0)
        hits, misses = self.cache.hits, self.cache.misses

        # 1-2. Texts, analyses and vectors (docs/method.md §2.1-§2.2, 4). Facts are numbered
        # 0..n-1, the groups contiguous; rows[i] is fact i's row in the distinct texts' vectors.
        clock = time.perf_counter()
        parts = list(map(fact_parts, chain.from_iterable(facts_per_group)))
        n = len(parts)
        analyse = bool(config.filters) or config.key_edges
        records = self.memo.records_of(
            parts, config.triple_template, analyse, self.filter_cache if analyse else None,
            None if texts_per_group is None else list(chain.from_iterable(texts_per_group)))
        texts, features, key_hashes, serials, cut = zip(*records) if n else ((),) * 5
        timings["filters"] = time.perf_counter() - clock

        clock = time.perf_counter()
        row_of = {text: row for row, text in enumerate(dict.fromkeys(texts))}
        given_cut: dict[str, bool] = {}
        used = 0
        if given is not None and given.parts:
            first = dict(zip(reversed(given.parts), range(len(given.parts) - 1, -1, -1)))
            position: dict[str, int] = {}  # text -> the given row of its first fact here
            for key, text in zip(parts, texts):
                if (row := first.get(key)) is not None:
                    used += 1
                    position.setdefault(text, row)
            name = self.embedder.name
            new = [text for text in position if (name, text) not in self.cache]  # own bits first
            if new:
                self.cache.put_many(name, new, given.vectors[[position[text] for text in new]])
            given_cut = {text: bool(given.truncated[row]) for text, row in position.items()}
        vectors = embed_unique(list(row_of), self.embedder, self.cache)
        rows = np.fromiter(map(row_of.__getitem__, texts), dtype=np.int64, count=n)
        if None in cut:  # facts not asked yet: each distinct text once, the answers kept
            unknown = sorted({text for text, flag in zip(texts, cut)
                              if flag is None and text not in given_cut})
            answer = dict(zip(unknown, truncated_texts(unknown, self.embedder).tolist()))
            answer.update(given_cut)
            cut = [answer[text] if flag is None else flag for text, flag in zip(texts, cut)]
            self.memo.set_truncated(parts, records, cut)
        truncated = {text for text, flag in zip(texts, cut) if flag} if any(cut) else set()
        timings["embed"] = time.perf_counter() - clock
        if truncated:
            warn(f"{len(truncated)} fact text(s) longer than the embedding model reads "
                 f"({getattr(self.embedder, 'max_tokens', None)} tokens, {self.embedder.name}): "
                 f"each is its own cluster, merged only with facts of the same full text")

        per_group, counts = self._link(facts_per_group, vectors, rows, features, key_hashes,
                                       serials, timings, texts if truncated else None, cut)
        return per_group, {
            "facts": float(n),
            "work_facts": float(used),
            "texts_embedded": float(len(row_of)),
            "texts_truncated": float(len(truncated)),
            "cache_hits": float(self.cache.hits - hits),
            "cache_misses": float(self.cache.misses - misses),
            "cache_entries": float(len(self.cache)),
            **counts,
        }

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
        labels, linkage = constrained_linkage(n, edges, sims, veto, starts)
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
                outcome = "truncated"
            else:
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
