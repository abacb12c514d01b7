"""``factutil_verl.reward:compute_score``: F1, the empty-store rule, the same keys every time."""

from __future__ import annotations

import numpy as np
import pytest

from factutil_verl.reward import SCORE_KEYS, compute_score, golden_answers_of

STORE = {"factutil": {"store_size": 2}}
EMPTY = {"factutil": {"store_size": 0}}


def test_answer_f1_and_em():
    result = compute_score(
        "nq", '{"action": "answer", "answer": "the Eiffel tower"}', ["Eiffel Tower"], STORE
    )
    assert result == {"score": 1.0, "em": 1.0, "f1": 1.0, "format_ok": 1.0, "empty_store": 0.0}
    partial = compute_score("nq", "<answer>Paris France</answer>", {"target": ["Paris"]}, STORE)
    assert partial["score"] == pytest.approx(2 / 3) and partial["em"] == 0.0


def test_an_answer_from_an_empty_store_scores_zero():
    result = compute_score("nq", '{"action": "answer", "answer": "Paris"}', ["Paris"], EMPTY)
    assert result == {"score": 0.0, "em": 1.0, "f1": 1.0, "format_ok": 1.0, "empty_store": 1.0}


@pytest.mark.parametrize(
    "text",
    ['{"action": "search", "query": "x"}', "I think it is Paris", '{"action": "answer"'],
)
def test_no_answer_scores_zero_with_the_same_keys(text):
    result = compute_score("nq", text, ["Paris"], STORE)
    assert tuple(result) == SCORE_KEYS
    assert result["score"] == 0.0 and result["format_ok"] == 0.0


def test_without_store_information_the_answer_is_scored_as_given():
    assert compute_score("nq", "<answer>Paris</answer>", "Paris")["score"] == 1.0


def test_ground_truth_shapes():
    assert golden_answers_of({"target": np.array(["a", "b"])}) == ["a", "b"]
    assert golden_answers_of(["x", " ", "y"]) == ["x", "y"]
    assert golden_answers_of("z") == ["z"]
    assert golden_answers_of({"golden_answers": ["g"]}) == ["g"]
    assert golden_answers_of(1990) == ["1990"]
    assert golden_answers_of(None) == []
    with pytest.raises(ValueError, match="no gold answer"):
        compute_score("nq", "<answer>x</answer>", {"target": []})
