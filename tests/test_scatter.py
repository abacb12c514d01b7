"""Span scatter: per-action advantages onto token spans (shared by the verl and OpenRLHF adapters)."""

from __future__ import annotations

import numpy as np
import pytest

from factutil.advantages import scatter_rows_to_turns, scatter_to_spans, turns_problem


def test_truncated_row_with_fewer_turns_than_actions_is_an_error_not_a_guess():
    # Three actions, but the sequence was cut inside the second turn: two runs remain, and the
    # mask cannot tell a cut row from two actions sharing a run.
    _, turns = scatter_rows_to_turns([np.array([0.25, -0.75, 9.0])], np.array([[1, 1, 0, 0, 1]]))
    assert turns.tolist() == [2]
    assert "2 turns for 3 actions: the turn boundaries cannot" in turns_problem(2, 3)
    # With explicit spans the cut is known: the second action keeps its one remaining token.
    out = scatter_to_spans(np.array([0.25, -0.75, 9.0]), np.array([[0, 2], [4, 7], [9, 11]]), 5)
    assert out.tolist() == [0.25, 0.25, 0, 0, -0.75]


def test_more_turns_than_actions_is_an_error():
    assert turns_problem(2, 1) == "response_mask has 2 turns but only 1 actions are listed"
    assert turns_problem(3, 3) is None


def test_scatter_to_spans_clips_and_masks():
    spans = np.array([[0, 3], [5, 9], [12, 15]])
    mask = np.array([1, 1, 1, 0, 0, 1, 1, 0, 1, 0])  # a 0 inside the second span
    out = scatter_to_spans(np.array([1.0, 2.0, 3.0]), spans, 10, response_mask=mask)
    assert out.tolist() == [1, 1, 1, 0, 0, 2, 2, 0, 2, 0]
    with pytest.raises(ValueError, match="overlap"):
        scatter_to_spans(np.array([1.0, 2.0]), np.array([[0, 4], [3, 6]]), 8)
    with pytest.raises(ValueError, match="one per action"):
        scatter_to_spans(np.array([1.0]), np.array([[0, 4], [5, 6]]), 8)


def test_scatter_rows_to_turns_fills_each_row_and_reports_its_turns():
    mask = np.array([[1, 1, 0, 1, 0, 1], [0, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 1]])
    values = [np.array([0.5, -1.0, 2.0]), np.array([3.0, 4.0]), np.array([7.0])]
    tokens, turns = scatter_rows_to_turns(values, mask)
    assert turns.tolist() == [3, 1, 3]
    assert tokens.dtype == np.float32
    assert tokens.tolist() == [
        [0.5, 0.5, 0.0, -1.0, 0.0, 2.0],
        [0.0, 3.0, 3.0, 0.0, 0.0, 0.0],  # the second value has no turn: dropped
        [7.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # two turns beyond its one value get 0
    ]
    assert turns_problem(int(turns[2]), len(values[2])) == (
        "response_mask has 3 turns but only 1 actions are listed")
    with pytest.raises(ValueError, match=r"must be \(R, T\) with R = 2"):
        scatter_rows_to_turns(values[:2], mask)
