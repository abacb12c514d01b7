"""Facts -> clusters (docs/method.md §2): the clusterer protocol and exact clusters
(:mod:`~factutil.cluster.base`), the semantic clusterer (:mod:`~factutil.cluster.semantic`), its
memos (:mod:`~factutil.cluster.memo`) and key edges (:mod:`~factutil.cluster.keys`).

A :class:`Clusterer` assigns every distinct fact of a group to a cluster:
:class:`ExactClusterer` (one cluster per normalised text, the paper's ablation) or
:class:`SemanticClusterer` (embeddings, filters, constrained single linkage; the default).
The fact forms of :mod:`factutil.facts` and the linkage's public functions are re-exported.
"""

from factutil.cluster.base import Clusterer, ExactClusterer, cluster_triples, make_clusterer
from factutil.cluster.semantic import SemanticClusterer
from factutil.facts import (
    DEFAULT_TEMPLATE,
    Fact,
    distinct_facts,
    fact_text,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.linkage import candidate_pairs, canonical_labels, constrained_linkage

__all__ = [
    "DEFAULT_TEMPLATE", "Clusterer", "ExactClusterer", "Fact", "SemanticClusterer",
    "candidate_pairs", "canonical_labels", "cluster_triples", "constrained_linkage",
    "distinct_facts", "fact_text", "make_clusterer", "normalize_fact_text", "representatives",
    "triple_text",
]
