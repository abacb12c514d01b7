"""Tests for factutil.metrics: answer normalisation, EM and token F1 (docs/method.md §1 outcome reward).

Expected values are worked by hand in the comments. The reference functions below are an
independent oracle: SQuAD v1.1 and HotpotQA's own code, against which the library must agree
byte for byte (normalisation) and exactly (scores) outside the documented departures.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from factutil.metrics import UNICODE_FOLDS, normalize_answer, qa_scores


# --- Reference code -------------------------------------------------------------------------
# Copied verbatim (formatter off, to keep it so) except for the names, which get a _squad or
# _hotpot suffix so they cannot be mistaken for the library's. From the official SQuAD v1.1
# evaluation script, evaluate-v1.1.py (https://rajpurkar.github.io/SQuAD-explorer/).
# fmt: off
def normalize_answer_squad(s):
    """Lower text and remove punctuation, articles and extra whitespace."""
    def remove_articles(text):
        return re.sub(r'\b(a|an|the)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def f1_score_squad(prediction, ground_truth):
    prediction_tokens = normalize_answer_squad(prediction).split()
    ground_truth_tokens = normalize_answer_squad(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def exact_match_score_squad(prediction, ground_truth):
    return (normalize_answer_squad(prediction) == normalize_answer_squad(ground_truth))


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


# From HotpotQA's hotpot_evaluate_v1.py (https://github.com/hotpotqa/hotpot, Apache-2.0); its
# normalize_answer is the SQuAD one above.
def f1_score_hotpot(prediction, ground_truth):
    normalized_prediction = normalize_answer_squad(prediction)
    normalized_ground_truth = normalize_answer_squad(ground_truth)

    ZERO_METRIC = (0, 0, 0)

    if normalized_prediction in ['yes', 'no', 'noanswer'] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC
    if normalized_ground_truth in ['yes', 'no', 'noanswer'] and normalized_prediction != normalized_ground_truth:
        return ZERO_METRIC

    prediction_tokens = normalized_prediction.split()
    ground_truth_tokens = normalized_ground_truth.split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return ZERO_METRIC
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1, precision, recall
# fmt: on
# --- End of reference code ------------------------------------------------------------------


def _reference_scores(prediction: str, golds: list[str]) -> tuple[float, float]:
    """(EM, F1) by the references, with this library's one departure: empty prediction -> 0."""
    if not normalize_answer_squad(prediction):
        return 0.0, 0.0
    em = metric_max_over_ground_truths(exact_match_score_squad, prediction, golds)
    hotpot_f1 = max(f1_score_hotpot(prediction, gold)[0] for gold in golds)
    return float(em), float(hotpot_f1)


# --- Normalisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("U.S.", "us"),
        ("The  Beatles!", "beatles"),
        ("A Tale of Two Cities", "tale of two cities"),
        ("an apple a day", "apple day"),
        # Articles only as whole words.
        ("Theatre Anatomy", "theatre anatomy"),
        # Punctuation goes before articles: "T.H.E." becomes "the" and is then dropped ...
        ("T.H.E. Cat", "cat"),
        # ... and a hyphen glues the article to the word, so nothing is dropped.
        ("the-cat", "thecat"),
        ("Château d'Hérouville", "château dhérouville"),
        ("  \t Peter\nParker  ", "peter parker"),
        ("", ""),
        ("!!!", ""),
        ("The", ""),
        # Unicode dashes are not ASCII punctuation: kept by default.
        ("Jean–Pierre", "jean–pierre"),
    ],
)
def test_normalize_answer_default_is_squad(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected
    assert normalize_answer_squad(text) == expected


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("Jean–Pierre", "jeanpierre"),  # U+2013 en dash
        ("Jean—Pierre", "jeanpierre"),  # U+2014 em dash
        ("Jean‑Pierre", "jeanpierre"),  # U+2011 non-breaking hyphen
        ("Jean-Pierre", "jeanpierre"),
        ("−5", "5"),  # U+2212 minus sign
        ("“Dr. Gräsler, Badearzt”", "dr gräsler badearzt"),
        ("Château d’Hérouville", "château dhérouville"),  # U+2019
        ("Ｕ．Ｓ．", "us"),  # fullwidth, via NFKC
        ("ﬁve″", "five"),  # ligature and double prime, via NFKC
        ("Ramírez", "ramírez"),  # accents are not folded
    ],
)
def test_normalize_answer_fold_unicode(text: str, folded: str) -> None:
    assert normalize_answer(text, fold_unicode=True) == folded


def test_fold_unicode_changes_where_articles_stand() -> None:
    # Default: ‘ ’ “ ” – — are no punctuation for SQuAD but are word boundaries, so the articles
    # go and the marks stay. Folded: the marks become ASCII and are dropped, then the articles.
    text = "‘a’ – “the” — b"
    assert normalize_answer(text) == "‘ ’ – “ ” — b"
    assert normalize_answer(text, fold_unicode=True) == "b"


def test_unicode_folds_table_is_the_documented_one() -> None:
    assert UNICODE_FOLDS == {
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\u2e3a": "-",
        "\u2e3b": "-",
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u2035": "'",
        "\u02bc": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
    }


def test_normalize_answer_rejects_non_str() -> None:
    with pytest.raises(TypeError, match="text"):
        normalize_answer(None)  # type: ignore[arg-type]


# --- Exact match and F1, worked by hand -----------------------------------------------------


def test_f1_partial_overlap() -> None:
    # pred [cat, sat], gold [cat, sat, down]: P = 2/2, R = 2/3, F1 = 2*(2/3)/(5/3) = 4/5.
    assert qa_scores("the cat sat", ["cat sat down"]) == (0.0, pytest.approx(0.8))


def test_f1_counts_repeated_tokens_once_per_match() -> None:
    # pred [new, new, york], gold [new, york]: overlap min(2,1)+1 = 2, P = 2/3, R = 1, F1 = 0.8.
    assert qa_scores("New New York", "New York")[1] == pytest.approx(0.8)


def test_scores_take_the_best_gold_answer() -> None:
    golds = ["Obama", "President Barack Obama", "Michelle Obama"]
    # vs "obama": P 1/2, R 1 -> 2/3; vs "president barack obama": P 1, R 2/3 -> 0.8;
    # vs "michelle obama": P 1/2, R 1/2 -> 0.5. Best 0.8; no exact match.
    assert qa_scores("Barack Obama", golds) == (0.0, pytest.approx(0.8))
    assert qa_scores("Barack Obama", [*golds, "barack obama."]) == (1.0, 1.0)


def test_exact_match_after_normalisation() -> None:
    assert qa_scores("U.S.", ["us"]) == (1.0, 1.0)
    assert qa_scores("The Beatles", "beatles!")[0] == 1.0
    assert qa_scores("Beatles", ["Rolling Stones", "the  beatles"])[0] == 1.0
    assert qa_scores("Beetles", ["the beatles"])[0] == 0.0


def test_scores_are_python_floats() -> None:
    em, token_f1 = qa_scores("cat", ["dog"])
    assert (em, token_f1) == (0.0, 0.0)
    assert type(em) is float and type(token_f1) is float


@pytest.mark.parametrize(
    ("prediction", "golds", "expected_f1", "squad_f1"),
    [
        ("yes", ["yes"], 1.0, 1.0),
        ("Yes.", ["yes"], 1.0, 1.0),
        ("no", ["yes"], 0.0, 0.0),
        # Gold is "yes", prediction differs: 0 (SQuAD: P 1/2, R 1 -> 2/3).
        ("yes sir", ["yes"], 0.0, 2 / 3),
        # Prediction is "no", gold differs: 0 (SQuAD: P 1, R 1/2 -> 2/3).
        ("No!", ["no way"], 0.0, 2 / 3),
        # "no answer" normalises to two tokens, "noanswer" to one: no overlap either way.
        ("noanswer", ["no answer"], 0.0, 0.0),
        # Rule per gold, then the maximum: "No" matches the second gold.
        ("no", ["no way", "No"], 1.0, 1.0),
        ("yes", ["yes sir", "yes indeed"], 0.0, 2 / 3),
        # Neither side is exactly yes/no/noanswer: ordinary F1 (P 1/2, R 1/2 -> 1/2).
        ("yes sir", ["yes madam"], 0.5, 0.5),
    ],
)
def test_yes_no_noanswer_rule(
    prediction: str, golds: list[str], expected_f1: float, squad_f1: float
) -> None:
    em, token_f1 = qa_scores(prediction, golds)
    assert token_f1 == pytest.approx(expected_f1)
    squad = metric_max_over_ground_truths(f1_score_squad, prediction, golds)
    assert squad == pytest.approx(squad_f1)
    # EM is the same under both rules.
    assert em == float(expected_f1 == 1.0)


@pytest.mark.parametrize("prediction", ["", "   ", "\n\t", "The", "a an the", "!!!", "..."])
@pytest.mark.parametrize("golds", [["the"], ["cat"], ["!!!", "cat"], "The"])
def test_empty_prediction_scores_zero(prediction: str, golds: list[str] | str) -> None:
    assert qa_scores(prediction, golds) == (0.0, 0.0)


def test_empty_prediction_departs_from_squad_em() -> None:
    # SQuAD scores "" against gold "the" as an exact match (both normalise to ""); we do not.
    assert exact_match_score_squad("", "the") is True
    assert qa_scores("", ["the"])[0] == 0.0


def test_gold_without_tokens_never_matches() -> None:
    assert qa_scores("cat", ["The"]) == (0.0, 0.0)
    assert qa_scores("the end", ["!!!"]) == (0.0, 0.0)
    # The other gold answers still count.
    assert qa_scores("cat", ["!!!", "the cat"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    "golds",
    ["", "   ", "\t\n", [], (), ["cat", " "], ["", "cat"], np.array([], dtype=str)],
)
def test_blank_or_missing_gold_raises(golds: object) -> None:
    with pytest.raises(ValueError, match="golden_answers") as info:
        qa_scores("cat", golds)  # type: ignore[arg-type]
    if isinstance(golds, str):
        assert repr(golds) in str(info.value)


def test_blank_gold_raises_even_for_empty_prediction() -> None:
    with pytest.raises(ValueError, match=re.escape("golden_answers[1] is blank")):
        qa_scores("", ["cat", "  "])


@pytest.mark.parametrize(
    ("prediction", "golds", "name"),
    [
        (None, ["cat"], "prediction"),
        (1, ["cat"], "prediction"),
        ("cat", [1], "golden_answers"),
        ("cat", ["dog", None], "golden_answers"),
        ("cat", b"cat", "golden_answers"),
        ("cat", {"cat": 1}, "golden_answers"),
        ("cat", 3, "golden_answers"),
    ],
)
def test_wrong_types_raise(prediction: object, golds: object, name: str) -> None:
    with pytest.raises(TypeError, match=name):
        qa_scores(prediction, golds)  # type: ignore[arg-type]


def test_gold_containers() -> None:
    assert qa_scores("cat", "the cat") == (1.0, 1.0)
    assert qa_scores("cat", ("dog", "cat")) == (1.0, 1.0)
    # verl batches hold gold answers as NumPy string arrays.
    assert qa_scores("cat", np.array(["dog", "cat"])) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("prediction", "gold", "off", "on"),
    [
        # Off: tokens ["jean–pierre"] vs ["jeanpierre"], no overlap. On: both "jeanpierre".
        ("Jean–Pierre", "Jean-Pierre", (0.0, 0.0), (1.0, 1.0)),
        # Off: ["“dr", "gräsler", "badearzt”"] vs ["dr", "gräsler", "badearzt"]: 1 of 3 shared,
        # P = R = 1/3, F1 = 1/3.
        ("“Dr. Gräsler, Badearzt”", '"Dr. Gräsler, Badearzt"', (0.0, 1 / 3), (1.0, 1.0)),
        # Off: ["château", "d’hérouville"] vs ["château", "dhérouville"]: P = R = 1/2.
        ("Château d’Hérouville", "Château d'Hérouville", (0.0, 0.5), (1.0, 1.0)),
        ("Ramírez", "Ramirez", (0.0, 0.0), (0.0, 0.0)),
    ],
)
def test_fold_unicode_scores(
    prediction: str, gold: str, off: tuple[float, float], on: tuple[float, float]
) -> None:
    assert qa_scores(prediction, [gold]) == pytest.approx(off)
    assert qa_scores(prediction, [gold], fold_unicode=True) == pytest.approx(on)


# --- Real answers from a search-agent run ----------------------------------------------------

QA_PAIRS_PATH = Path(__file__).parent / "data" / "qa_pairs.jsonl"
QA_PAIRS = [json.loads(line) for line in QA_PAIRS_PATH.read_text(encoding="utf-8").splitlines()]


def test_qa_pairs_fixture_covers_the_cases() -> None:
    assert len(QA_PAIRS) >= 100
    normalized_golds = {normalize_answer(pair["gold"]) for pair in QA_PAIRS}
    assert {"yes", "no"} <= normalized_golds
    assert any(not pair["prediction"].isascii() for pair in QA_PAIRS)


@pytest.mark.parametrize("pair", QA_PAIRS, ids=[f"line{pair['line']}" for pair in QA_PAIRS])
def test_real_pairs_match_reference(pair: dict[str, object]) -> None:
    prediction, gold = pair["prediction"], pair["gold"]
    assert isinstance(prediction, str) and isinstance(gold, str)
    assert normalize_answer(prediction) == normalize_answer_squad(prediction)
    assert normalize_answer(gold) == normalize_answer_squad(gold)
    # Every prediction here is non-empty and the yes/no rule never changes an F1, so SQuAD's
    # own scores apply unchanged.
    squad_em = float(exact_match_score_squad(prediction, gold))
    squad_f1 = float(f1_score_squad(prediction, gold))
    assert qa_scores(prediction, [gold]) == (squad_em, squad_f1)
    assert qa_scores(prediction, gold) == _reference_scores(prediction, [gold])


@pytest.mark.parametrize(
    ("line", "prediction", "gold", "em", "expected_f1"),
    [
        (2, " Designated Hitter ", "the designated hitter rule", 0.0, 0.8),  # P 1, R 2/3
        (3, " United States ", "United States", 1.0, 1.0),
        (54, " No ", "yes", 0.0, 0.0),
        (62, " Dr. Gräsler, Badearzt ", '"Dr. Gräsler, Badearzt"', 1.0, 1.0),
        (201, " Trenton–Mercer Airport ", "Trenton–Mercer Airport", 1.0, 1.0),
        (233, " False ", "no", 0.0, 0.0),
        # "1861–1865" vs "1861–65": one token each, different.
        (322, " 1861–1865 ", "1861–65", 0.0, 0.0),
    ],
)
def test_real_pairs_worked_by_hand(
    line: int, prediction: str, gold: str, em: float, expected_f1: float
) -> None:
    pair = next(pair for pair in QA_PAIRS if pair["line"] == line)
    assert (pair["prediction"], pair["gold"]) == (prediction, gold)
    assert qa_scores(prediction, [gold]) == (em, pytest.approx(expected_f1))


# --- Properties ---------------------------------------------------------------------------------

_PIECES = [
    "the", "The", "a", "A.", "an", "yes", "Yes!", "no", "No.", "noanswer", "no answer", "cat",
    "sat", "U.S.", "us", "Jean–Pierre", "Jean-Pierre", "“quoted”", "d’Arc", "İstanbul", "ﬁ",
    "Ｕ", "−", "″", "ß", "\u00a0", " ", "  ", "\t", "\n", "-", "'", "!!!",
]  # fmt: skip
_texts = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=8).map(" ".join),
    st.lists(st.sampled_from(_PIECES), max_size=8).map("".join),
)
_golds = st.lists(_texts.filter(lambda text: text.strip() != ""), min_size=1, max_size=4)


@given(_texts)
def test_normalize_answer_equals_reference(text: str) -> None:
    assert normalize_answer(text) == normalize_answer_squad(text)


@given(_texts)
def test_folded_text_has_no_folded_or_ascii_punctuation(text: str) -> None:
    folded = normalize_answer(text, fold_unicode=True)
    assert not any(ch in UNICODE_FOLDS or ch in string.punctuation for ch in folded)
    assert folded == " ".join(folded.split())


@given(_texts, _golds, st.booleans())
def test_score_ranges(prediction: str, golds: list[str], fold_unicode: bool) -> None:
    em, token_f1 = qa_scores(prediction, golds, fold_unicode=fold_unicode)
    assert em in (0.0, 1.0)
    assert 0.0 <= token_f1 <= 1.0
    if not normalize_answer(prediction, fold_unicode=fold_unicode):
        assert (em, token_f1) == (0.0, 0.0)
    elif em == 1.0:
        assert token_f1 == 1.0


@given(_texts, _golds)
def test_scores_equal_reference(prediction: str, golds: list[str]) -> None:
    assert qa_scores(prediction, golds) == _reference_scores(prediction, golds)


@pytest.mark.parametrize("repeat", [1, 3, 20])  # 20: past the token-by-token matching's bound
def test_token_overlap_of_short_and_long_answers_equals_reference(repeat: int) -> None:
    """Repeated tokens count as often as both sides hold them, for short and long answers."""
    prediction = " ".join(["the cat sat on the mat mat", "a dog"] * repeat)
    golds = [" ".join(["cat cat mat", "on a log dog dog"] * repeat), "mat " * (2 * repeat)]
    if repeat == 20:  # both ways of counting the overlap are checked
        assert len(prediction.split()) * len(golds[0].split()) > 256
    assert qa_scores(prediction, golds) == _reference_scores(prediction, golds)
