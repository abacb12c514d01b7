"""Facts -> clusters (docs/method.md §2): :class:`ExactClusterer` (the paper's ablation) or
:class:`SemanticClusterer` (the default); re-exports the fact forms and the linkage's functions."""

from factutil.cluster.base import Clusterer, ExactClusterer, cluster_triples, make_clusterer
from factutil.cluster.semantic import Given, SemanticClusterer
from factutil.facts import (
    DEFAULT_TEMPLATE,
    Fact,
    fact_text,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.linkage import candidate_pairs, canonical_labels, constrained_linkage

__all__ = [
    "DEFAULT_TEMPLATE", "Clusterer", "ExactClusterer", "Fact", "Given", "SemanticClusterer",
    "candidate_pairs", "canonical_labels", "cluster_triples", "constrained_linkage",
    "fact_text", "make_clusterer", "normalize_fact_text", "representatives", "triple_text",
]
