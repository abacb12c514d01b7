"""The cluster-quality benchmark (benchmarks/cluster_quality.py): its metrics, worked by hand,
its labelled set (deterministic, consistent, the committed bytes) and a quick run with the real
model."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import pair_confusion_matrix

from factutil.cluster import triple_text
from factutil.schema import Triple

ROOT = Path(__file__).resolve().parents[1]


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "cluster_quality", ROOT / "benchmarks" / "cluster_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_quality"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


cq = _load_benchmark()


# --- metrics, worked by hand -------------------------------------------------------------------


def test_pair_counts_and_pairwise_four_items():
    """true = [a, a, b, b], pred = [x, x, x, y].

    Pairs the prediction joins: (0,1), (0,2), (1,2) -> 3. Pairs the truth joins: (0,1), (2,3) -> 2.
    Joined by both: (0,1) -> 1. Pairwise precision 1/3, recall 1/2, F1 = 2·(1/3)(1/2)/(5/6) = 0.4.
    """
    true, pred = ["a", "a", "b", "b"], ["x", "x", "x", "y"]
    assert cq.pair_counts(true, pred) == (1, 3, 2)
    prf = cq.pairwise_prf([(true, pred)])
    assert prf.precision == pytest.approx(1 / 3)
    assert prf.recall == pytest.approx(1 / 2)
    assert prf.f1 == pytest.approx(0.4)


def test_bcubed_four_items():
    """true clusters {0,1} {2,3}; predicted {0,1,2} {3}.

    item | P(i)    | T(i)  | P∩T   | precision | recall
    0    | {0,1,2} | {0,1} | {0,1} | 2/3       | 2/2
    1    | {0,1,2} | {0,1} | {0,1} | 2/3       | 2/2
    2    | {0,1,2} | {2,3} | {2}   | 1/3       | 1/2
    3    | {3}     | {2,3} | {3}   | 1/1       | 1/2
    precision = (2/3 + 2/3 + 1/3 + 1) / 4 = 2/3; recall = (1 + 1 + 1/2 + 1/2) / 4 = 3/4;
    F1 = 2·(2/3)(3/4) / (2/3 + 3/4) = 12/17.
    """
    prf = cq.bcubed_prf([(["a", "a", "b", "b"], [0, 0, 0, 1])])
    assert prf.precision == pytest.approx(2 / 3)
    assert prf.recall == pytest.approx(3 / 4)
    assert prf.f1 == pytest.approx(12 / 17)


def test_metrics_at_the_extremes():
    true = ["a", "a", "a", "b", "c"]
    for metric in (cq.pairwise_prf, cq.bcubed_prf):
        perfect = metric([(true, [7, 7, 7, 1, 2])])
        assert (perfect.precision, perfect.recall, perfect.f1) == (1.0, 1.0, 1.0)
    singletons = cq.bcubed_prf([(true, [0, 1, 2, 3, 4])])
    assert singletons.precision == 1.0
    assert singletons.recall == pytest.approx((1 / 3 * 3 + 1 + 1) / 5)
    assert cq.pairwise_prf([(true, [0, 1, 2, 3, 4])]).recall == 0.0
    one = cq.bcubed_prf([(true, [0] * 5)])
    assert one.recall == 1.0
    assert one.precision == pytest.approx((3 * 3 / 5 + 2 * 1 / 5) / 5)


def test_pairs_never_cross_groups():
    """Two groups of two items, each predicted as one cluster, truth one cluster per group: the
    same label values in both groups do not join items across groups."""
    groups = [(["a", "a"], [0, 0]), (["a", "a"], [0, 0])]
    assert cq.pairwise_prf(groups) == cq.PRF(1.0, 1.0, 1.0)
    assert cq.bcubed_prf(groups) == cq.PRF(1.0, 1.0, 1.0)
    prf = cq.pairwise_prf([(["a", "b"], [0, 0]), (["a", "a"], [0, 1])])
    assert (prf.precision, prf.recall) == (0.0, 0.0)


def test_pair_counts_agree_with_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        true = rng.integers(0, 5, n).tolist()
        pred = rng.integers(0, 5, n).tolist()
        both, in_pred, in_true = cq.pair_counts(true, pred)
        matrix = pair_confusion_matrix(true, pred) // 2  # sklearn counts ordered pairs
        assert both == matrix[1, 1]
        assert in_pred == matrix[1, 1] + matrix[0, 1]
        assert in_true == matrix[1, 1] + matrix[1, 0]


def _item(item_id, label, kind, forbidden=()):
    return cq.Item(item_id, "g", "s", item_id, "o", label, kind, "test", False, list(forbidden))


def test_score_counts_forbidden_merges_and_recall_per_kind():
    """Fact F = {F (base), F/p1 (verbalisation), F/p2 (case)}; look-alikes N (negation) and Y (year)
    forbidden with all three. Predicted: {F, F/p1, N} {F/p2} {Y}.

    Forbidden merges: N with F and with F/p1 -> 2; Y none. Paraphrase recall: verbalisation 1/1,
    case 0/1.
    """
    items = [
        _item("F", "F", "base"),
        _item("F/p1", "F", "paraphrase:verbalisation"),
        _item("F/p2", "F", "paraphrase:case"),
        _item("N", "N", "lookalike:negation", ["F", "F/p1", "F/p2"]),
        _item("Y", "Y", "lookalike:year", ["F", "F/p1", "F/p2"]),
    ]
    scores = cq.score([items], [[0, 0, 1, 0, 2]], "test")
    assert scores.forbidden_merges == 2
    assert scores.lookalikes["negation"] == {
        "items": 1, "pairs": 3, "forbidden_merges": 2, "merged_items": 1}
    assert scores.lookalikes["year"]["forbidden_merges"] == 0
    assert scores.paraphrases["verbalisation"]["recall"] == 1.0
    assert scores.paraphrases["case"]["recall"] == 0.0
    assert scores.clusters == 3
    assert scores.merged == [("N", "F"), ("N", "F/p1")]
    assert scores.missed == ["F/p2"]


def _row(method, threshold, f1, forbidden):
    prf = cq.PRF(f1, f1, f1)
    return cq.Scores(method, threshold, prf, prf, forbidden, {}, {}, 0, 0.0)


def test_default_threshold_rule():
    rows = [
        _row("exact", None, 0.9, 0),
        _row("embedding+filters", 0.75, 0.95, 3),  # best F1 but merges look-alikes
        _row("embedding+filters", 0.80, 0.90, 0),
        _row("embedding+filters", 0.85, 0.90, 0),  # tie on F1 -> the higher threshold
        _row("embedding+filters", 0.90, 0.80, 0),
        _row("embedding-only", 0.85, 0.99, 0),
    ]
    best, rule = cq.choose_threshold(rows)
    assert best.threshold == 0.85 and "0 forbidden" in rule
    best, rule = cq.choose_threshold([_row("embedding+filters", t, 0.9, 2) for t in (0.8, 0.9)])
    assert best.threshold == 0.9 and rule.startswith("NO threshold")


# --- text variants -------------------------------------------------------------------------


def test_variant_helpers():
    assert cq.drop_accents("Armando Bó") == "Armando Bo"
    assert cq.drop_accents("Xawery Żuławski") == "Xawery Zulawski"
    assert cq.drop_punctuation("Xi'an") == "Xian"
    assert cq.name_variants("Tornado outbreak of March 2–3, 2012") == []  # digits: no punctuation
    assert cq.parse_date("12 June 1516") == (1516, 6, 12, "dmy")
    assert cq.parse_date("June 12, 1516") == (1516, 6, 12, "mdy")
    assert cq.parse_date("1983") is None
    assert cq.format_date(1516, 6, 12, "iso") == "1516-06-12"
    assert cq.format_date(1516, 6, 12, "mdy") == "June 12, 1516"
    assert cq.format_date(1970, 7, 30, "ordinal") == "the 30th of July 1970"
    assert cq.number_words(6960) == "six thousand nine hundred sixty"
    assert cq.number_words(41) == "forty-one"
    assert cq.number_words(552_700) == "five hundred fifty-two thousand seven hundred"
    q = cq.parse_quantity("more than 150 million")
    assert q.value == 150e6 and q.prefix == "more than "
    assert "more than 150,000,000" in cq.number_paraphrases(q)
    assert cq.parse_quantity("5 mi").unit == "mi"
    assert cq.parse_quantity("1961") is None


# --- the labelled set ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def built():
    return cq.build_set()


@pytest.fixture(scope="module")
def heldout():
    return cq.build_set(split="heldout")


@pytest.fixture(scope="module", params=sorted(cq.SETS))
def any_set(request, built, heldout):
    return {"dev": built, "heldout": heldout}[request.param]


@pytest.mark.parametrize("split", sorted(cq.SETS))
def test_builder_is_deterministic_and_matches_the_committed_file(split, built, heldout):
    first = cq.set_bytes({"dev": built, "heldout": heldout}[split])
    assert cq.set_bytes(cq.build_set(split=split)) == first
    path, seed = cq.SETS[split]
    assert cq.set_bytes(cq.build_set(seed=seed, split=split)) == first
    assert path.read_bytes() == first, (
        f"{path.relative_to(ROOT)} is stale: run `python benchmarks/cluster_quality.py --build`")


def test_heldout_is_disjoint_from_dev(built, heldout):
    """No base fact of the held-out set (own or distractor, by normalised text) is a base fact of
    the dev set, no question (group) or source record is shared, and the seeds differ."""
    def bases(items):
        return {cq._norm(i.subject, i.relation, i.object) for i in items if i.kind == "base"}

    def records(items):
        return {i.source.split("/")[0] for i in items}  # "<file>#<record id>"

    assert bases(heldout) and not bases(heldout) & bases(built)
    assert not {i.group for i in heldout} & {i.group for i in built}
    assert not records(heldout) & records(built)
    assert cq.SETS["dev"][1] != cq.SETS["heldout"][1]
    # Nothing at all of one set's text is a base fact of the other.
    texts = {cq._norm(i.subject, i.relation, i.object) for i in heldout}
    assert not texts & bases(built)
    # Every usable MuSiQue and HotpotQA question is in exactly one of the two sets.
    usable = [q.group for q in cq.load_musique(cq.DATA_DIR, limit=None)
              + cq.load_hotpotqa(cq.DATA_DIR, limit=None)]
    dev_groups = {i.group for i in built if not i.group.startswith("2wiki:")}
    assert len(dev_groups) == cq.MUSIQUE_QUESTIONS + cq.HOTPOTQA_QUESTIONS
    assert sorted(dev_groups | {i.group for i in heldout}) == sorted(usable)


def test_heldout_composition(heldout):
    info = cq.composition(heldout)
    assert info["items"] >= 200
    assert set(info["by_source"]) == {"musique", "hotpotqa"}  # every 2Wiki triple is in dev
    kinds = {item.kind for item in heldout}
    for kind in ("verbalisation", "inverse", "date", "name", "case"):
        assert f"paraphrase:{kind}" in kinds
    for kind in ("negation", "relation", "swap", "entity", "year", "day"):
        assert f"lookalike:{kind}" in kinds


def test_set_composition(built):
    info = cq.composition(built)
    assert 300 <= info["items"] <= 700
    assert set(info["by_source"]) == {"2wiki", "musique", "hotpotqa"}
    kinds = {item.kind for item in built}
    for kind in cq.PARAPHRASE_KINDS:
        assert f"paraphrase:{kind}" in kinds
    for kind in cq.LOOKALIKE_KINDS:
        assert f"lookalike:{kind}" in kinds


def test_set_is_consistent(any_set):
    """Per group: one label per normalised text (the builder's normalisation is triple_text's);
    paraphrases share their base's label; every look-alike has a label of its own and forbidden
    partners that are its fact's base and paraphrases."""
    for items in cq.group_items(any_set):
        ids = {item.item_id: item for item in items}
        label_of_text: dict[str, str] = {}
        for item in items:
            text = triple_text(Triple(subject=item.subject, relation=item.relation,
                                      object=item.object))
            assert text == cq._norm(item.subject, item.relation, item.object)
            assert label_of_text.setdefault(text, item.label) == item.label, item.item_id
            if item.kind.startswith("paraphrase:"):
                assert ids[item.label].kind == "base"
            if item.kind.startswith("lookalike:"):
                assert sum(other.label == item.label for other in items) == 1
                assert item.forbidden_with and item.label not in item.forbidden_with
                base = ids[item.forbidden_with[0]]
                assert base.kind == "base" and not base.distractor
                for other in item.forbidden_with:
                    assert ids[other].label == base.label
            else:
                assert item.forbidden_with == []
        case = [i for i in items if i.kind == "paraphrase:case"]
        for item in case:
            base = ids[item.label]
            assert cq._norm(item.subject, item.relation, item.object) == cq._norm(
                base.subject, base.relation, base.object)


def test_exact_clusters_on_the_set(any_set):
    """Exact clusters (no model): never a forbidden merge, perfect pairwise precision, and of the
    paraphrases only letter case and spacing join their base."""
    groups = cq.group_items(any_set)
    scores = cq.run_exact(groups)
    assert scores.forbidden_merges == 0
    assert scores.pairwise.precision == 1.0
    assert scores.paraphrases["case"]["recall"] == 1.0
    assert all(row["recall"] == 0.0 for kind, row in scores.paraphrases.items() if kind != "case")


class _SubjectObjectClusterer:
    """A stand-in rule, no model: facts with the same folded {subject, object} share a cluster."""

    def cluster_triples(self, triples_per_group):
        out = []
        for triples in triples_per_group:
            keys = [frozenset((cq.fold_key(t.subject), cq.fold_key(t.object))) for t in triples]
            index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
            out.append(np.array([index[key] for key in keys], dtype=np.int64))
        return out


def test_scoring_pipeline_with_a_stand_in_clusterer(built):
    groups = cq.group_items(built)
    labels = cq.cluster_labels(_SubjectObjectClusterer(), cq.to_triples(groups))
    scores = cq.score(groups, labels, "stand-in")
    # The rule joins inverse forms and name variants, and every negation and swap (same parts).
    assert scores.paraphrases["inverse"]["recall"] == 1.0
    assert scores.paraphrases["name"]["recall"] == 1.0
    negation = scores.lookalikes["negation"]
    assert negation["merged_items"] == negation["items"]
    assert scores.lookalikes["entity"]["forbidden_merges"] == 0
    assert 0 < scores.bcubed.f1 < 1 and scores.forbidden_merges > 0


# --- the real model ------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_benchmark_runs(minilm, tmp_path, monkeypatch, capsys):
    """``--quick`` end to end with the real MiniLM and factutil's semantic clusterer."""
    monkeypatch.setattr(cq, "default_embedder", lambda device=None, backend="minilm": cq.MemoEmbedder(minilm))
    out = tmp_path / "cq.json"
    assert cq.main(["--quick", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    methods = [(r["method"], r["threshold"]) for r in payload["results"]]
    assert methods == [("exact", None)] + [
        (m, t) for t in cq.QUICK_THRESHOLDS for m in ("embedding-only", "embedding+filters")]
    for row in payload["results"]:
        assert 0.0 <= row["bcubed"]["f1"] <= 1.0 and math.isfinite(row["pairwise"]["f1"])
    assert payload["default_threshold"] in cq.QUICK_THRESHOLDS
    assert "default threshold" in capsys.readouterr().out
