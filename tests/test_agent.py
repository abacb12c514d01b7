"""The outcome rule every trainer adapter applies (factutil.metrics) and the FactAgent prompt and
store (factutil.tools.agent)."""

from __future__ import annotations

import pytest

from factutil.metrics import golden_answers_from, outcome_reward
from factutil.schema import Triple
from factutil.tools.agent import (
    EMPTY_STORE,
    NO_OBSERVATION,
    add_to_store,
    build_messages,
    render_store,
)


def test_an_answer_scores_its_f1():
    # "the paris" vs gold "Paris, France": normalised "paris" vs "paris france": P = 1, R = 1/2.
    outcome = outcome_reward("the Paris", ["Paris, France"], store_size=2)
    assert outcome.score == pytest.approx(2 / 3)
    assert (outcome.em, outcome.f1) == (0.0, pytest.approx(2 / 3))
    assert outcome.answered and not outcome.empty_store
    exact = outcome_reward("Paris", ["Lyon", "paris"], store_size=1)
    assert (exact.score, exact.em, exact.f1) == (1.0, 1.0, 1.0)


def test_an_answer_from_an_empty_store_scores_zero_but_keeps_its_em_and_f1():
    outcome = outcome_reward("Paris", ["Paris"], store_size=0)
    assert outcome.score == 0.0 and outcome.empty_store
    assert (outcome.em, outcome.f1) == (1.0, 1.0)


def test_no_answer_scores_zero_and_an_unknown_store_is_scored_as_given():
    none = outcome_reward(None, ["Paris"], store_size=3)
    assert (none.score, none.em, none.f1, none.answered, none.empty_store) == (
        0.0,
        0.0,
        0.0,
        False,
        False,
    )
    assert outcome_reward("Paris", ["Paris"], store_size=None).score == 1.0


@pytest.mark.parametrize("golds", [[], [" "]])
def test_bad_gold_answers_raise_even_without_an_answer(golds):
    with pytest.raises(ValueError):
        outcome_reward(None, golds, store_size=0)
    with pytest.raises(ValueError):
        outcome_reward("x", golds, store_size=1)


def test_the_store_keeps_one_copy_per_normalised_fact_and_renders_in_order():
    template = "{subject} | {relation} | {object}"
    store: list[Triple] = []
    first = [Triple.model_validate(["Paris", "capital of", "France"])]
    assert add_to_store(store, first, template) == 1
    again = [
        Triple.model_validate(["paris ", "Capital  of", "france"]),
        Triple.model_validate(["Lyon", "in", "France"]),
    ]
    assert add_to_store(store, again, template) == 1
    assert render_store(store) == "- Paris | capital of | France\n- Lyon | in | France"
    assert render_store([]) == EMPTY_STORE


def test_a_turn_shows_the_question_the_store_and_the_latest_result_only():
    messages = build_messages("Q?", [], None, instructions="Act.")
    assert messages == [
        {"role": "system", "content": "Act."},
        {
            "role": "user",
            "content": f"Question: Q?\n\nFact store:\n{EMPTY_STORE}\n\n"
            f"Latest search result:\n{NO_OBSERVATION}",
        },
    ]


def test_gold_answers_from_any_trainer_value():
    """One rule for verl's ground_truth, OpenRLHF's label and a dataset column: strings, JSON-list
    strings, lists/arrays (flattened), mappings by key order, numbers; blanks, None, NaN, bools dropped."""
    import numpy as np

    assert golden_answers_from("Paris") == ["Paris"]
    assert golden_answers_from('["Paris", "paris"]') == ["Paris", "paris"]
    assert golden_answers_from("[not json") == ["[not json"]
    assert golden_answers_from(["a", " ", None, True, ["b", 7]]) == ["a", "b", "7"]
    assert golden_answers_from(np.array(["x", "y"])) == ["x", "y"]
    assert golden_answers_from({"target": np.array(["t"])}) == ["t"]
    assert golden_answers_from({"target": ["t"], "golden_answers": ["g"]}) == ["g"]
    assert golden_answers_from({"answer": "a"}) == ["a"]
    assert golden_answers_from({"other": "a"}) == []
    # the first key whose value is not None: a merged dataset's None column is no gold
    assert golden_answers_from({"golden_answers": None, "answer": "a"}) == ["a"]
    assert golden_answers_from({"golden_answers": None}) == []
    assert golden_answers_from(1990) == ["1990"]
    assert golden_answers_from(None) == golden_answers_from(False) == golden_answers_from("  ") == []
    # pandas writes a missing value as NaN (numpy's float64 too): no gold, never the answer "nan"
    assert golden_answers_from(float("nan")) == golden_answers_from(np.float64("nan")) == []
    assert golden_answers_from({"golden_answers": float("nan"), "answer": "a"}) == ["a"]
    assert golden_answers_from(["b", float("nan")]) == ["b"]
    assert golden_answers_from(2.5) == ["2.5"]
