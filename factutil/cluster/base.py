"""The clusterer protocol, exact clusters and the clusterer a config names (docs/method.md §2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from factutil.cluster.semantic import SemanticClusterer
from factutil.config import FactUtilConfig
from factutil.embed import Embedder
from factutil.facts import DEFAULT_TEMPLATE, Fact, representatives, triple_text

__all__ = ["Clusterer", "ExactClusterer", "cluster_triples", "make_clusterer"]


@runtime_checkable
class Clusterer(Protocol):
    """Assigns the distinct facts of each group to clusters (docs/method.md §2.2–§2.5).
    ``cluster_batch`` takes per group one :class:`~factutil.facts.Fact` (or anything with its
    ``subject``, ``relation``, ``object``) per distinct normalised text, in text order
    (:func:`representatives`), and returns per group int64 canonical labels
    (:func:`~factutil.linkage.canonical_labels`); ``metrics`` reports the last call."""

    metrics: dict[str, float]

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Fact]]) -> list[np.ndarray]:
        """Cluster labels (int64, one array per group) for each group's distinct facts."""
        ...


def cluster_triples(
    clusterer: Clusterer,
    triples_per_group: Sequence[Sequence[Fact]],
    template: str = DEFAULT_TEMPLATE,
) -> list[np.ndarray]:
    """Per group, int64 (n_g,): the canonical cluster of each of its n_g triples (duplicates
    allowed, any order), ``template`` the triple text template (docs/method.md §2.1)."""
    found = [representatives(triples, template) for triples in triples_per_group]
    labels = clusterer.cluster_batch([facts for _, facts in found])
    result = []
    for triples, (texts, _), group_labels in zip(triples_per_group, found, labels):
        label_of = dict(zip(texts, group_labels.tolist()))
        result.append(
            np.array([label_of[triple_text(t, template)] for t in triples], dtype=np.int64)
        )
    return result


class ExactClusterer:
    """One cluster per distinct normalised text (docs/method.md §2.1, ``mode="exact"``)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def cluster_batch(self, facts_per_group: Sequence[Sequence[Fact]]) -> list[np.ndarray]:
        """:meth:`cluster`'s labels (the :class:`Clusterer` protocol)."""
        return self.cluster(facts_per_group)[0]

    def cluster(self, facts_per_group: Sequence[Sequence[Fact]],
                ) -> tuple[list[np.ndarray], dict[str, float]]:
        """One label per fact, ``arange(n)`` (the facts' texts are distinct and sorted), and the
        call's own metrics (``metrics`` holds the last call's)."""
        self.metrics = {"facts": float(sum(len(facts) for facts in facts_per_group))}
        return [np.arange(len(facts), dtype=np.int64) for facts in facts_per_group], self.metrics


def make_clusterer(config: FactUtilConfig, embedder: Embedder | None = None) -> Clusterer:
    """The clusterer that ``config.mode`` names (``embedder``: None = the config's)."""
    if config.mode == "exact":
        return ExactClusterer()
    return SemanticClusterer(config, embedder=embedder)
