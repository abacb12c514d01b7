"""Facts -> clusters (SPEC.md §2).

A triple becomes text through the configured template and is normalised (NFKC, case-folded,
whitespace collapsed, stripped); identical normalised texts are one item before anything else
happens. A :class:`Clusterer` then assigns every unique text of a group to a cluster.

Clusterers work on a whole batch at once (``cluster_batch``), so a semantic clusterer can
deduplicate and embed the texts of every group in one call. Cluster ids are canonical: within a
group, clusters are numbered by their smallest member text in sorted order, so the ids do not
depend on the order of rollouts, actions or triples.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from factutil.schema import FactUtilConfig, Triple

_WHITESPACE = re.compile(r"\s+")


def normalize_fact_text(text: str) -> str:
    """Normalise text as SPEC §2.1 says: Unicode NFKC, case-fold, collapse whitespace, strip.

    Also used for search queries when detecting a repeated search (SPEC §5).
    """
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def triple_text(triple: Triple, template: str = "{subject} | {relation} | {object}") -> str:
    """The normalised text of a triple under ``template`` (SPEC §2.1)."""
    return normalize_fact_text(
        template.format(subject=triple.subject, relation=triple.relation, object=triple.object)
    )


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
    """Assigns the unique fact texts of each group to clusters (SPEC §2 steps 2–5).

    ``cluster_batch(texts_per_group)`` takes, per group, a list of distinct normalised texts in
    sorted order and returns, per group, an int64 array of the same length with canonical
    cluster labels (see :func:`canonical_labels`). Groups never share clusters.
    """

    def cluster_batch(self, texts_per_group: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Cluster labels (int64, one array per group) for each group's unique texts."""
        ...


class ExactClusterer:
    """Exact-match clusters: one cluster per distinct normalised text (SPEC §2.1, ``mode="exact"``).

    The paper's ablation baseline: paraphrases in other words are different clusters, letter case
    and spacing are not.
    """

    def cluster_batch(self, texts_per_group: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One label per text: ``arange(n)`` since the texts are distinct and sorted."""
        labels = []
        for texts in texts_per_group:
            _check_sorted_unique(texts)
            labels.append(np.arange(len(texts), dtype=np.int64))
        return labels


def _check_sorted_unique(texts: Sequence[str]) -> None:
    for before, after in itertools.pairwise(texts):
        if not before < after:
            raise ValueError(
                f"texts_per_group must hold distinct texts in sorted order; {before!r} precedes "
                f"{after!r}"
            )


def make_clusterer(config: FactUtilConfig) -> Clusterer:
    """The clusterer that ``config.mode`` names.

    Raises:
        NotImplementedError: for ``mode="semantic"`` until semantic clustering lands (issue #3).
    """
    if config.mode == "exact":
        return ExactClusterer()
    raise NotImplementedError(
        "mode='semantic' (embedding clusters with negation/numeric/relation filters) is not "
        "implemented yet; use mode='exact'"
    )
