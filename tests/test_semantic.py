"""Semantic clustering with the real bundled MiniLM (docs/method.md §2.2–§2.5, §6).

All tests share one loaded model (the session fixture ``minilm``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from factutil import FactUtilConfig, Triple, compute_process_advantages
from factutil.cluster import SemanticClusterer, cluster_triples, triple_text

pytestmark = pytest.mark.slow


def T(subject, relation, obj):
    return Triple(subject=subject, relation=relation, object=obj)


# Real 2Wiki facts, each with paraphrases (same cluster) and look-alikes (other clusters).
FAMILIES = [
    (
        [T("David Lynch", "place of birth", "Missoula, Montana"),
         T("David Lynch", "was born in", "Missoula, Montana"),
         T("david lynch", "birthplace", "Missoula, Montana")],
        [T("David Lynch", "place of death", "Missoula, Montana"),
         T("David Lynch", "was not born in", "Missoula, Montana"),
         T("David Lynch", "place of birth", "Brooklyn")],
    ),
    (
        [T("Ernest I, Prince of Anhalt-Dessau", "date of death", "12 June 1516"),
         T("Ernest I, Prince of Anhalt-Dessau", "died on", "1516-06-12")],
        [T("Ernest I, Prince of Anhalt-Dessau", "date of death", "12 June 1517"),
         T("Ernest I, Prince of Anhalt-Dessau", "date of birth", "12 June 1516")],
    ),
    (
        [T("Ronnie Rocket", "director", "David Lynch"),
         T("Ronnie Rocket", "directed by", "David Lynch"),
         T("David Lynch", "director of", "Ronnie Rocket")],
        [T("Ronnie Rocket", "cast member", "David Lynch"),
         T("David Lynch", "director", "Ronnie Rocket")],
    ),
    (
        [T("La Leona", "director", "Armando Bó"), T("La Leona", "director", "Armando Bo")],
        [T("La Leona", "director", "Leopoldo Torre Nilsson")],
    ),
]


def _family_triples():
    triples, family, lookalike = [], [], []
    for index, (paraphrases, lookalikes) in enumerate(FAMILIES):
        for triple in paraphrases:
            triples.append(triple)
            family.append(index)
            lookalike.append(False)
        for triple in lookalikes:
            triples.append(triple)
            family.append(index)
            lookalike.append(True)
    return triples, family, lookalike


def test_paraphrases_share_a_cluster_and_lookalikes_do_not(minilm):
    triples, family, lookalike = _family_triples()
    clusterer = SemanticClusterer(FactUtilConfig(), embedder=minilm)
    labels = cluster_triples(clusterer, [triples])[0]
    for index, (paraphrases, lookalikes) in enumerate(FAMILIES):
        members = [k for k, f in enumerate(family) if f == index]
        base = labels[members[0]]
        for k in members:
            text = triple_text(triples[k])
            if lookalike[k]:
                assert labels[k] != base, f"look-alike merged: {text}"
            else:
                assert labels[k] == base, f"paraphrase split: {text}"
    # Every look-alike is a cluster of its own: 4 families + 8 look-alikes.
    assert len(set(labels.tolist())) == len(FAMILIES) + sum(len(f[1]) for f in FAMILIES) == 12


def test_embedding_only_would_merge_the_lookalikes(minilm):
    """The filters do the work: with none, a changed year and a negation join their base."""
    config = FactUtilConfig(filters=(), key_edges=False, sim_threshold=0.9)
    triples = FAMILIES[1][0][:1] + FAMILIES[1][1][:1] + [T("David Lynch", "place of birth", "Missoula, Montana"),
                                                         T("David Lynch", "was not born in", "Missoula, Montana")]
    labels = cluster_triples(SemanticClusterer(config, embedder=minilm), [triples])[0]
    assert labels[0] == labels[1] and labels[2] == labels[3]


def test_chain_through_a_partial_date_does_not_leak(minilm):
    # cos(A, C) = 0.99, cos(B, C) = 0.94, cos(A, B) = 0.94: all above 0.9. The numeric filter
    # separates A (1516) and C (1517); B (no year) agrees with both, so it may join only one.
    a = T("Ernest I, Prince of Anhalt-Dessau", "date of death", "12 June 1516")
    b = T("Ernest I, Prince of Anhalt-Dessau", "date of death", "12 June")
    c = T("Ernest I, Prince of Anhalt-Dessau", "date of death", "12 June 1517")
    clusterer = SemanticClusterer(FactUtilConfig(), embedder=minilm)
    labels = cluster_triples(clusterer, [[a, b, c]])[0]
    assert labels[0] != labels[2]
    assert labels[1] in (labels[0], labels[2])
    assert clusterer.metrics["refused"] >= 1 and clusterer.metrics["vetoes_numeric"] >= 1


def test_deterministic_across_runs_input_orders_and_cache_state(minilm):
    triples, _, _ = _family_triples()
    first = cluster_triples(SemanticClusterer(FactUtilConfig(), embedder=minilm), [triples])[0]
    shared = SemanticClusterer(FactUtilConfig(), embedder=minilm)
    rng = random.Random(7)
    for _ in range(3):
        order = list(range(len(triples)))
        rng.shuffle(order)
        labels = cluster_triples(shared, [[triples[k] for k in order]])[0]
        assert np.array_equal(labels[np.argsort(order)], first)
    assert shared.metrics["cache_hits"] == len({triple_text(t) for t in triples})
    assert shared.metrics["cache_misses"] == 0


def test_paraphrase_of_a_stored_fact_earns_zero_and_a_changed_fact_does_not(minilm):
    gold = ["Missoula, Montana"]

    def rollout(rid, actions, answer):
        return {"uid": "q", "question": "Where was the director of Ronnie Rocket born?",
                "golden_answers": gold, "rollout_id": rid,
                "actions": actions + [{"action": "answer", "answer": answer}]}

    born = ["David Lynch", "place of birth", "Missoula, Montana"]
    rows = [
        rollout("a", [{"action": "assert", "triples": [born]},
                      {"action": "assert", "triples": [["David Lynch", "was born in", "Missoula, Montana"]]},
                      {"action": "assert", "triples": [["David Lynch", "place of death", "Missoula, Montana"]]}],
                "Missoula, Montana"),
        rollout("b", [{"action": "assert", "triples": [["David Lynch", "birthplace", "Brooklyn"]]}], "Brooklyn"),
    ]
    clusterer = SemanticClusterer(FactUtilConfig(), embedder=minilm)
    result = compute_process_advantages(rows, FactUtilConfig(), clusterer=clusterer)
    a = [r for r in result.actions if r.rollout_id == "a"]
    assert a[1].shaping == 0.0 and a[1].new_clusters == []  # paraphrase of a stored fact
    assert a[2].new_clusters != [] and a[2].shaping != 0.0  # died there: another fact
    clusters = {c.cluster_id: c for c in result.clusters}
    assert len(clusters[a[0].new_clusters[0]].members) == 2  # both wordings kept for display
    assert len(result.clusters) == 3
    assert result.metrics["cluster_cache_misses"] == 4.0
    again = compute_process_advantages(rows, FactUtilConfig(), clusterer=clusterer)
    assert again.metrics["cluster_cache_hits"] == 4.0
    assert again.advantages.tobytes() == result.advantages.tobytes()
