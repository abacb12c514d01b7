"""A worked example with every number written out (docs/method.md §1–§5, §8).

The first tables are the published method (``preset="paper"``: the Beta(1/2, 1/2) prior); the
library's default (``prior="group"``) and the leave-one-out option follow at the end.

Group q1 (gold "Paris", G = 3):
  r1: search "capital of France"; assert (France, capital, Paris); search "Capital of  FRANCE"
      (a repeat after normalisation); assert (france, CAPITAL, paris) (same fact, other case);
      answer "Paris"                                          -> EM 1, F1 1, R 1
  r2: a truncated JSON action (invalid); answer "Paris" with an empty store -> R zeroed to 0
  r3: search "France capital"; assert (France, capital, Lyon) and (Lyon, located in, France);
      search "Lyon"; never answers                            -> R 0
Group q2 (gold "Tokyo", one rollout): search; assert (Japan, capital, Tokyo); answer "Tokyo".

By hand, q1 (success y = EM: r1 1, r2 0 (zeroed), r3 0; p-bar = 1/3):
  clusters in sorted text order: c0 "france | capital | lyon" (r3), c1 "france | capital | paris"
  (r1), c2 "lyon | located in | france" (r3).
  c0: n 1, s 0, m = 0.5 / 2 = 0.25, u = 0.25 - 1/3 = -1/12;  c1: n 1, s 1, m = 0.75, u = 5/12;
  c2 like c0, u = -1/12.
  r1: F = [0, tanh(5/12), 0, 0, 0]; the assert keeps 0.8 F and sends 0.2 F to search 0; the repeat
      costs -0.01 -> r = [0.2 T1, 0.8 T1, -0.01, 0, 0] with T1 = tanh(5/12).
  r2: r = [-0.1 (invalid), -0.1 (empty-store answer)].
  r3: Phi after the assert = tanh(-1/12 - 1/12) = tanh(-1/6) = T3 -> r = [0.2 T3, 0.8 T3, 0].
  A_out: R = [1, 0, 0], mean 1/3, sample std sqrt(1/3) -> [(2/3), -(1/3), -(1/3)] / (sqrt(1/3) + 1e-6).
  A_proc (process_norm "none", the paper's): the 10 process rewards above, as they are; with
  process_norm "group" (the default): normalised with their mean and sample std (+1e-6).
q2: y = [1], p-bar = 1, u = (1 + 0.5) / (1 + 1) - 1 = -0.25; F on the assert = tanh(-0.25) = T4;
  r = [0.2 T4, 0.8 T4, 0]; A_out = 0 (one rollout, with a warning).

The default, prior "group" (m_c = (s_c + 2 eps p-bar) / (n_c + 2 eps),
u_c = (s_c - n_c p-bar) / (n_c + 1)), every other number as above:
  q1: c0 u = (0 - 1/3) / 2 = -1/6, m = 1/6; c1 u = (1 - 1/3) / 2 = 1/3, m = 2/3; c2 like c0.
  q2: every rollout succeeds: u = (1 - 1) / 2 = 0, m = 1, so no shaping at all.
  r1: F on the first assert = tanh(1/3) = t1 -> r = [0.2 t1, 0.8 t1, -0.01, 0, 0];
  r2: [-0.1, -0.1] as before; r3: Phi = tanh(-1/6 - 1/6) = tanh(-1/3) = t3 -> r = [0.2 t3, 0.8 t3, 0];
  q2: r = [0, 0, 0]. A = A_out (as above; 0 for q2) + 0.5 r.

Leave-one-out (utility "loo", prior "group"), group L (gold "Paris", G = 4), each rollout
searches once, asserts, answers: a1 and a2 assert P = (France, capital, Paris) and answer
"Paris" (y = R = 1); a3 asserts Y = (France, capital, Lyon), a4 asserts P and Y in one assert,
both answer "Lyon" (y = R = 0). Clusters: c0 = Y (a3, a4), c1 = P (a1, a2, a4).
  a1: mates a2, a3, a4, mean 1/3; P's mates a2, a4: ((1 - 1/3) + (0 - 1/3)) / (2 + 1) = 1/9.
  a2: the same, 1/9.
  a3: mates mean 2/3; Y's mate a4: (0 - 2/3) / (1 + 1) = -1/3.
  a4: mates mean 2/3; P's mates a1, a2: 2 (1 - 2/3) / 3 = 2/9; Y's mate a3: -1/3;
      Phi = tanh(2/9 - 1/3) = tanh(-1/9).
  (Without leave-one-out: p-bar 1/2, u_P = (2 - 3/2) / 4 = 1/8, u_Y = (0 - 1) / 3 = -1/3.)
  A_out = (+-1/2) / (sqrt(1/3) + 1e-6); r = [0.2 F, 0.8 F, 0] with F = tanh of the above.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest

from factutil import FactUtilConfig, compute_process_advantages

EPS = 1e-6
GOLD_Q1 = ["Paris"]
PAPER = FactUtilConfig(mode="exact", preset="paper")


def _rollout(uid, rollout_id, actions, gold, question="What is the capital?"):
    return {
        "uid": uid,
        "question": question,
        "golden_answers": gold,
        "rollout_id": rollout_id,
        "actions": actions,
    }


WORKED = [
    _rollout("q1", "r1", [
        {"action": "search", "query": "capital of France", "observation": "Paris is the capital."},
        {"action": "assert", "triples": [["France", "capital", "Paris"]]},
        {"action": "search", "query": "Capital of  FRANCE", "observation": "Paris is the capital."},
        {"action": "assert", "triples": [["france", "CAPITAL", "paris"]]},
        {"action": "answer", "answer": "Paris"},
    ], GOLD_Q1),
    _rollout("q1", "r2", [
        {"raw": '{"action": "search", "query": "capital of Fr'},
        {"action": "answer", "answer": "Paris"},
    ], GOLD_Q1),
    _rollout("q1", "r3", [
        {"action": "search", "query": "France capital", "observation": "Lyon is a city in France."},
        {"action": "assert", "triples": [["France", "capital", "Lyon"], ["Lyon", "located in", "France"]]},
        {"action": "search", "query": "Lyon", "observation": "Lyon is in France."},
    ], GOLD_Q1),
    _rollout("q2", "s1", [
        {"action": "search", "query": "capital of Japan", "observation": "Tokyo is the capital."},
        {"action": "assert", "triples": [["Japan", "capital", "Tokyo"]]},
        {"action": "answer", "answer": "Tokyo"},
    ], ["Tokyo"], question="What is the capital of Japan?"),
]

T1 = math.tanh(5 / 12)
T3 = math.tanh(-1 / 6)
T4 = math.tanh(-0.25)
Q1_PROCESS = [0.2 * T1, 0.8 * T1, -0.01, 0.0, 0.0, -0.1, -0.1, 0.2 * T3, 0.8 * T3, 0.0]
Q1_STD_R = math.sqrt(1 / 3)
Q1_OUTCOME_ADV = [(2 / 3) / (Q1_STD_R + EPS), (-1 / 3) / (Q1_STD_R + EPS), (-1 / 3) / (Q1_STD_R + EPS)]
Q2_PROCESS = [0.2 * T4, 0.8 * T4, 0.0]


def _normalised(values):
    mean = statistics.fmean(values)
    std = statistics.stdev(values)
    return [(value - mean) / (std + EPS) for value in values]


# process_norm "none" (the paper's Eq. 14, preset "paper"): A_proc = r.
Q1_PROCESS_ADV = list(Q1_PROCESS)
Q2_PROCESS_ADV = list(Q2_PROCESS)
ROLLOUT_OF = [0] * 5 + [1] * 2 + [2] * 3

# Every output field of docs/method.md §8, per action in input order.
EXPECTED = []
for k, (rid, step, kind) in enumerate(
    [("r1", 0, "search"), ("r1", 1, "assert"), ("r1", 2, "search"), ("r1", 3, "assert"),
     ("r1", 4, "answer"), ("r2", 0, "invalid"), ("r2", 1, "answer"), ("r3", 0, "search"),
     ("r3", 1, "assert"), ("r3", 2, "search")]
):
    shaping = {1: T1, 8: T3}.get(k, 0.0)
    back = {0: 0.2 * T1, 1: -0.2 * T1, 7: 0.2 * T3, 8: -0.2 * T3}.get(k, 0.0)
    penalty = {2: -0.01, 5: -0.1, 6: -0.1}.get(k, 0.0)
    a_out = Q1_OUTCOME_ADV[ROLLOUT_OF[k]]
    EXPECTED.append({
        "uid": "q1", "rollout_id": rid, "step": step, "action": kind,
        "shaping": shaping, "back_credit": back, "penalty": penalty,
        "process_reward": Q1_PROCESS[k], "outcome_reward": [1.0, 0.0, 0.0][ROLLOUT_OF[k]],
        "outcome_advantage": a_out, "process_advantage": Q1_PROCESS_ADV[k],
        "advantage": a_out + 0.5 * Q1_PROCESS_ADV[k],
        "new_clusters": {1: [1], 8: [0, 2]}.get(k, []),
    })
for step, kind in enumerate(["search", "assert", "answer"]):
    EXPECTED.append({
        "uid": "q2", "rollout_id": "s1", "step": step, "action": kind,
        "shaping": [0.0, T4, 0.0][step], "back_credit": [0.2 * T4, -0.2 * T4, 0.0][step],
        "penalty": 0.0, "process_reward": Q2_PROCESS[step], "outcome_reward": 1.0,
        "outcome_advantage": 0.0, "process_advantage": Q2_PROCESS_ADV[step],
        "advantage": 0.5 * Q2_PROCESS_ADV[step], "new_clusters": [[], [0], []][step],
    })

EXPECTED_CLUSTERS = [
    {"uid": "q1", "cluster_id": 0, "members": [["France", "capital", "Lyon"]], "n": 1, "s": 0.0,
     "mean": 0.25, "utility": -1 / 12},
    {"uid": "q1", "cluster_id": 1,
     "members": [["France", "capital", "Paris"], ["france", "CAPITAL", "paris"]], "n": 1, "s": 1.0,
     "mean": 0.75, "utility": 5 / 12},
    {"uid": "q1", "cluster_id": 2, "members": [["Lyon", "located in", "France"]], "n": 1, "s": 0.0,
     "mean": 0.25, "utility": -1 / 12},
    {"uid": "q2", "cluster_id": 0, "members": [["Japan", "capital", "Tokyo"]], "n": 1, "s": 1.0,
     "mean": 0.75, "utility": -0.25},
]


def _assert_rows_match(rows, expected):
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        for key, value in want.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value, abs=1e-6), (want["rollout_id"], want["step"], key)
            else:
                assert row[key] == value, (want["rollout_id"], want["step"], key)


def test_worked_example_every_field():
    result = compute_process_advantages(WORKED, PAPER)
    _assert_rows_match([record.to_dict() for record in result.actions], EXPECTED)
    _assert_rows_match([record.to_dict() for record in result.clusters], EXPECTED_CLUSTERS)
    np.testing.assert_allclose(
        result.advantages, [row["advantage"] for row in EXPECTED], rtol=0, atol=1e-6
    )
    assert result.advantages.dtype == np.float32


def test_worked_example_rollout_outcomes_and_warnings():
    result = compute_process_advantages(WORKED, PAPER)
    by_id = {record.rollout_id: record for record in result.rollouts}
    assert (by_id["r1"].em, by_id["r1"].f1, by_id["r1"].outcome_reward) == (1.0, 1.0, 1.0)
    # r2 answered correctly but from an empty store: EM is reported, the reward is zeroed.
    assert (by_id["r2"].em, by_id["r2"].outcome_reward, by_id["r2"].success) == (1.0, 0.0, 0.0)
    assert by_id["r2"].empty_store_answer
    assert not by_id["r3"].answered and by_id["r3"].outcome_reward == 0.0
    assert result.metrics["searches_repeated"] == 1.0
    assert result.metrics["answers_empty_store"] == 1.0
    assert result.metrics["rollouts_unanswered"] == 1.0
    assert result.metrics["actions_invalid"] == 1.0
    assert result.metrics["clusters"] == 4.0
    assert result.metrics["shaping_nonzero_share"] == pytest.approx(3 / 13)
    assert result.metrics["utility_min"] == pytest.approx(-0.25)
    assert result.metrics["utility_max"] == pytest.approx(5 / 12)
    assert result.metrics["em_mean"] == pytest.approx(3 / 4)
    assert any("one rollout" in message for message in result.warnings)


def test_omega_zero_is_plain_grpo_outcome_advantage():
    result = compute_process_advantages(WORKED, FactUtilConfig(mode="exact", omega=0.0))
    outcome = np.array([record.outcome_advantage for record in result.actions], dtype=np.float32)
    assert np.array_equal(result.advantages, outcome)
    np.testing.assert_allclose(result.advantages[:10], np.array(Q1_OUTCOME_ADV)[ROLLOUT_OF], atol=1e-6)


def test_process_norm_group_normalises_the_process_rewards_of_each_group():
    result = compute_process_advantages(WORKED, PAPER.model_copy(update={"process_norm": "group"}))
    rows = [record.to_dict() for record in result.actions]
    want = _normalised(Q1_PROCESS) + _normalised(Q2_PROCESS)
    assert [row["process_advantage"] for row in rows] == pytest.approx(want, abs=1e-9)
    a_out = [Q1_OUTCOME_ADV[i] for i in ROLLOUT_OF] + [0.0] * 3
    assert [row["advantage"] for row in rows] == pytest.approx(
        [o + 0.5 * p for o, p in zip(a_out, want)], abs=1e-9
    )


def test_the_default_by_hand():
    """The default config (prior "group"): the module docstring's second computation."""
    result = compute_process_advantages(WORKED, FactUtilConfig(mode="exact"))
    clusters = [record.to_dict() for record in result.clusters]
    assert [c["utility"] for c in clusters] == pytest.approx([-1 / 6, 1 / 3, -1 / 6, 0.0], abs=1e-12)
    assert [c["mean"] for c in clusters] == pytest.approx([1 / 6, 2 / 3, 1 / 6, 1.0], abs=1e-12)
    assert clusters[3]["utility"] == 0.0  # q2: every rollout succeeded, exactly 0
    rows = [record.to_dict() for record in result.actions]
    t1, t3 = math.tanh(1 / 3), math.tanh(-1 / 3)
    assert [row["shaping"] for row in rows] == pytest.approx(
        [0, t1, 0, 0, 0, 0, 0, 0, t3, 0, 0, 0, 0], abs=1e-12
    )
    process = [0.2 * t1, 0.8 * t1, -0.01, 0, 0, -0.1, -0.1, 0.2 * t3, 0.8 * t3, 0, 0, 0, 0]
    assert [row["process_reward"] for row in rows] == pytest.approx(process, abs=1e-12)
    a_out = [Q1_OUTCOME_ADV[i] for i in ROLLOUT_OF] + [0.0] * 3
    # process_norm "group": q1's ten process rewards normalised; q2's, all 0, exactly 0.
    process_adv = _normalised(process[:10]) + [0.0] * 3
    np.testing.assert_allclose(
        result.advantages, [o + 0.5 * p for o, p in zip(a_out, process_adv)], rtol=0, atol=1e-6)
    raw = compute_process_advantages(WORKED, FactUtilConfig(mode="exact", process_norm="none"))
    np.testing.assert_allclose(
        raw.advantages, [o + 0.5 * r for o, r in zip(a_out, process)], rtol=0, atol=1e-6)
    assert result.metrics["prior_group"] == 1.0
    assert compute_process_advantages(WORKED, PAPER).metrics["prior_group"] == 0.0


LOO_GROUP = [
    _rollout("L", rid, [
        {"action": "search", "query": "capital of France", "observation": "o"},
        {"action": "assert", "triples": triples},
        {"action": "answer", "answer": answer},
    ], GOLD_Q1)
    for rid, triples, answer in (
        ("a1", [["France", "capital", "Paris"]], "Paris"),
        ("a2", [["France", "capital", "Paris"]], "Paris"),
        ("a3", [["France", "capital", "Lyon"]], "Lyon"),
        ("a4", [["France", "capital", "Paris"], ["France", "capital", "Lyon"]], "Lyon"),
    )
]


def test_leave_one_out_by_hand():
    """utility="loo": the module docstring's last computation."""
    result = compute_process_advantages(LOO_GROUP, FactUtilConfig(mode="exact", utility="loo"))
    # The clusters' own utilities stay the whole group's.
    assert [c.utility for c in result.clusters] == pytest.approx([-1 / 3, 1 / 8], abs=1e-12)
    phi = [math.tanh(1 / 9), math.tanh(1 / 9), math.tanh(-1 / 3), math.tanh(-1 / 9)]
    rows = [record.to_dict() for record in result.actions]
    assert [row["shaping"] for row in rows] == pytest.approx(
        [x for f in phi for x in (0.0, f, 0.0)], abs=1e-12)
    process = [x for f in phi for x in (0.2 * f, 0.8 * f, 0.0)]
    assert [row["process_reward"] for row in rows] == pytest.approx(process, abs=1e-12)
    a_out = [0.5 / (math.sqrt(1 / 3) + EPS)] * 2 + [-0.5 / (math.sqrt(1 / 3) + EPS)] * 2
    np.testing.assert_allclose(
        result.advantages, [a_out[k // 3] + 0.5 * p for k, p in enumerate(_normalised(process))],
        rtol=0, atol=1e-6)
    # Without leave-one-out every holder reads u_P = 1/8, u_Y = -1/3.
    plain = compute_process_advantages(LOO_GROUP, FactUtilConfig(mode="exact"))
    assert [r.shaping for r in plain.actions][1::3] == pytest.approx(
        [math.tanh(1 / 8)] * 2 + [math.tanh(-1 / 3), math.tanh(1 / 8 - 1 / 3)], abs=1e-12)


@pytest.mark.parametrize("y", [0.0, 1.0, 0.3, 0.7])
@pytest.mark.parametrize("utility", ["group", "loo"])
def test_the_default_gives_zero_utility_where_every_rollout_scored_the_same(y, utility):
    """y = 0 is the all-fail group: under the default every utility is 0 and nothing is shaped."""
    rows = [
        _rollout("u", f"u{i}", [
            {"action": "search", "query": f"q{i}", "observation": "o"},
            {"action": "assert", "triples": [[f"s{i % 3}", "r", "o"]]},
            {"action": "answer", "answer": "wrong"},
        ], ["Paris"]) | {"reward": y}
        for i in range(7)
    ]
    group = compute_process_advantages(
        rows, {"mode": "exact", "success": "reward", "utility": utility})
    assert [c.utility for c in group.clusters] == [0.0, 0.0, 0.0]
    assert set(group.action_columns["shaping"].tolist()) == {0.0}
    assert set(group.action_columns["process_reward"].tolist()) == {0.0}
    assert group.metrics["groups_uniform_share"] == 1.0
    beta = compute_process_advantages(rows, {"mode": "exact", "success": "reward", "preset": "paper"})
    # The paper's prior: m = (s + 0.5) / (n + 1) with n = 3 or 2 rollouts of success y each.
    want = [(3 * y + 0.5) / 4 - y, (2 * y + 0.5) / 3 - y, (2 * y + 0.5) / 3 - y]
    assert [c.utility for c in beta.clusters] == pytest.approx(want, abs=1e-12)


def test_alpha_zero_keeps_all_shaping_on_the_assert():
    result = compute_process_advantages(WORKED, PAPER.model_copy(update={"alpha": 0.0}))
    rows = [record.to_dict() for record in result.actions]
    assert [row["back_credit"] for row in rows] == [0.0] * len(rows)
    assert rows[1]["process_reward"] == pytest.approx(T1)
    assert rows[0]["process_reward"] == 0.0


def test_actions_after_answer_and_beyond_max_turns_are_ignored():
    rollout = _rollout("q3", "x", [
        {"action": "search", "query": "a"},
        {"action": "assert", "triples": [["a", "b", "c"]]},
        {"action": "answer", "answer": "c"},
        {"action": "search", "query": "late"},
    ], ["c"])
    other = _rollout("q3", "y", [{"action": "search", "query": "q"}] * 3, ["c"])
    result = compute_process_advantages([rollout, other], {"mode": "exact", "max_turns": 2})
    rows = [record.to_dict() for record in result.actions]
    # x: max_turns = 2 keeps search + assert; the answer and the late search are ignored -> no answer.
    assert [row["ignored"] for row in rows] == [False, False, True, True, False, False, True]
    assert [row["advantage"] for row in rows if row["ignored"]] == [0.0, 0.0, 0.0]
    assert result.rollouts[0].answered is False
    assert result.metrics["actions_ignored"] == 3.0
    assert len(result.warnings) == 2


def test_cli_score_matches_spec_to_1e6(tmp_path):
    source = tmp_path / "worked.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in WORKED), encoding="utf-8")
    target = tmp_path / "out" / "scored.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "factutil", "score", str(source), "-o", str(target),
         "--set", "mode=exact", "--set", "preset=paper"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "mean EM" in done.stdout
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    _assert_rows_match(rows, EXPECTED)
    assert list(rows[0])[:13] == [
        "uid", "rollout_id", "step", "action", "shaping", "back_credit", "penalty",
        "process_reward", "outcome_reward", "outcome_advantage", "process_advantage",
        "advantage", "new_clusters",
    ]
    clusters = subprocess.run(
        [sys.executable, "-m", "factutil", "clusters", str(source), "--format", "json",
         "--set", "mode=exact", "--set", "preset=paper"],
        capture_output=True, text=True, check=True,
    )
    _assert_rows_match(json.loads(clusters.stdout), EXPECTED_CLUSTERS)
