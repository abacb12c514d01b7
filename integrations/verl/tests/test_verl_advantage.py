"""The adapter's advantages on real verl code paths (docs/method.md §5): equal to the core, GRPO at Ω=0."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages, make_clusterer
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl_testkit import SAMPLE, Rows

from factutil_verl.advantage import action_item, compute_factagent_advantages
from factutil_verl.config import factutil_config_from_verl


def verl_v1_grpo(rows: Rows, norm_by_std: bool = True) -> torch.Tensor:
    """verl's own V1 GRPO advantages of the batch (final row of each session, broadcast)."""
    data = DataProto.from_dict(
        tensors={
            "response_mask": rows.response_mask.clone(),
            "token_level_rewards": rows.rm_scores.clone(),
        },
        non_tensors={"uid": np.array(rows.uids, dtype=object)},
    )
    out = compute_advantage_for_multi_trajectories(
        data,
        batch_keys=rows.keys,
        adv_estimator="grpo",
        num_repeat=6,
        norm_adv_by_std_in_grpo=norm_by_std,
        config=None,
    )
    return out.batch["advantages"]


def run(rows: Rows, config: FactUtilConfig, grpo: torch.Tensor | None = None, **kwargs):
    return compute_factagent_advantages(
        keys=rows.keys,
        uids=rows.uids,
        extra_fields=kwargs.pop("extra_fields", rows.extra_fields),
        response_mask=rows.response_mask,
        token_level_rewards=rows.rm_scores,
        grpo_advantages=verl_v1_grpo(rows) if grpo is None else grpo,
        config=config,
        **kwargs,
    )


@pytest.mark.parametrize("mode", ["exact", "semantic"])  # semantic: the real bundled MiniLM
def test_sample_batch_equals_compute_process_advantages_action_by_action(sample_rows, mode):
    config = FactUtilConfig(mode=mode)
    clusterer = make_clusterer(config)  # one embedding of the facts for both: clusters never
    expected = compute_process_advantages(SAMPLE, config, clusterer=clusterer)  # read the cache
    result = run(sample_rows, config, clusterer=clusterer)

    assert result.fallback == {}
    assert len(expected.actions) == len(sample_rows.keys) == 976
    mask = sample_rows.response_mask.bool()
    got = {(r.uid, r.rollout_id.rsplit("_", 1)[1], r.step): r for r in result.result.actions}
    for record in expected.actions:
        row = sample_rows.row_of_action[(record.uid, record.rollout_id, record.step)]
        tokens = result.advantages[row]
        assert torch.all(tokens[~mask[row]] == 0)
        # verl keeps rewards in float32; R round-trips through it, so the outcome part may move an ulp.
        np.testing.assert_allclose(
            tokens[mask[row]].numpy(), record.advantage, rtol=1e-6, atol=1e-6
        )
        mine = got[(record.uid, record.rollout_id.rsplit("-", 1)[1], record.step)]
        assert mine.action == record.action
        assert mine.process_reward == record.process_reward  # process credit: bit for bit
        assert mine.process_advantage == record.process_advantage
        assert mine.new_clusters == record.new_clusters
    assert result.metrics["factutil/clusters"] == expected.metrics["clusters"]
    assert result.metrics["factutil/groups_scored"] == 30.0
    assert result.metrics["factutil/groups_fallback"] == 0.0
    assert result.metrics["factutil/utility_spread"] == pytest.approx(
        expected.metrics["utility_max"] - expected.metrics["utility_min"]
    )
    assert 0.0 < result.metrics["factutil/shaping_nonzero_share"] < 1.0
    assert all(name.startswith("factutil/") for name in result.metrics)
    assert "factutil/time_cluster_ms" in result.metrics


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_omega_zero_is_verls_grpo_per_trajectory(sample_rows, norm_by_std):
    config = factutil_config_from_verl(
        {"norm_adv_by_std_in_grpo": norm_by_std, "factutil": {"omega": 0.0, "mode": "exact"}}
    )
    assert config.norm_by_std is norm_by_std
    grpo = verl_v1_grpo(sample_rows, norm_by_std)
    result = run(sample_rows, config, grpo=torch.zeros_like(grpo))
    assert result.fallback == {}

    # verl's registered GRPO estimator, called directly on the final row of each trajectory.
    final_rows: dict[str, int] = {}
    for row, key in enumerate(sample_rows.keys):
        session = key.rsplit("_", 1)[0]
        if session not in final_rows or int(
            sample_rows.keys[final_rows[session]].rsplit("_", 1)[1]
        ) < int(key.rsplit("_", 1)[1]):
            final_rows[session] = row
    finals = list(final_rows.values())
    estimator = get_adv_estimator_fn("grpo")
    advantages, _ = estimator(
        token_level_rewards=sample_rows.rm_scores[finals],
        response_mask=sample_rows.response_mask[finals],
        index=np.array([sample_rows.uids[row] for row in finals], dtype=object),
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    per_trajectory = dict(zip(final_rows, advantages[:, 0].tolist()))
    for row, key in enumerate(sample_rows.keys):
        mask = sample_rows.response_mask[row].bool()
        expected = per_trajectory[key.rsplit("_", 1)[0]]
        np.testing.assert_allclose(
            result.advantages[row][mask].numpy(), expected, rtol=1e-5, atol=1e-6
        )
    # ... and the whole (B, T) tensor equals verl's V1 multi-trajectory GRPO.
    torch.testing.assert_close(result.advantages, grpo.float(), rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(grpo) > 0


def test_unscorable_groups_keep_grpo_and_never_nan(sample_rows):
    config = FactUtilConfig(mode="exact")
    grpo = verl_v1_grpo(sample_rows)
    extras = copy.deepcopy(sample_rows.extra_fields)
    uid_missing, uid_no_gold, uid_bad_step = sorted(set(sample_rows.uids))[:3]
    extras[sample_rows.uids.index(uid_missing)] = {}
    for row, uid in enumerate(sample_rows.uids):
        if uid == uid_no_gold:
            extras[row]["factutil"]["golden_answers"] = []
    extras[sample_rows.uids.index(uid_bad_step)]["factutil"]["step"] = "first"

    result = run(sample_rows, config, grpo=grpo, extra_fields=extras)

    assert set(result.fallback) == {uid_missing, uid_no_gold, uid_bad_step}
    assert "no extra_fields" in result.fallback[uid_missing]
    assert "golden_answers" in result.fallback[uid_no_gold]
    assert "step must be an int" in result.fallback[uid_bad_step]
    assert result.metrics["factutil/groups_fallback"] == 3.0
    assert result.metrics["factutil/groups_scored"] == 27.0
    assert torch.isfinite(result.advantages).all()
    for row, uid in enumerate(sample_rows.uids):
        if uid in result.fallback:
            assert torch.equal(result.advantages[row], grpo[row].float())
    scored = [row for row, uid in enumerate(sample_rows.uids) if uid not in result.fallback]
    assert not torch.equal(result.advantages[scored], grpo[scored].float())


def test_a_failing_scorer_keeps_grpo_for_the_whole_batch(sample_rows):
    class Broken:
        def __init__(self):
            self.metrics: dict[str, float] = {}

        def cluster_batch(self, facts_per_group):
            raise RuntimeError("embedding server down")

    grpo = verl_v1_grpo(sample_rows)
    result = run(sample_rows, FactUtilConfig(mode="exact"), grpo=grpo, clusterer=Broken())
    assert len(result.fallback) == 30
    assert all("embedding server down" in reason for reason in result.fallback.values())
    assert torch.equal(result.advantages, grpo.float())
    assert result.result is None


def test_padding_rows_are_left_as_verl_wrote_them(sample_rows):
    rows = copy.deepcopy(sample_rows)
    # verl pads a batch with copies of its first sample under a fresh uid and is_padding tags.
    rows.keys.append("padabc_0_0")
    rows.uids.append("padabc")
    rows.extra_fields.append(copy.deepcopy(rows.extra_fields[0]))
    rows.response_mask = torch.cat(
        [rows.response_mask, torch.zeros(1, rows.response_mask.shape[1], dtype=torch.int64)]
    )
    rows.rm_scores = torch.cat([rows.rm_scores, torch.zeros(1, rows.rm_scores.shape[1])])
    grpo = verl_v1_grpo(rows)
    grpo[-1] = 7.0
    flags = [False] * (len(rows.keys) - 1) + [True]
    result = run(rows, FactUtilConfig(mode="exact"), grpo=grpo, is_padding=flags)
    assert result.fallback == {}
    assert torch.all(result.advantages[-1] == 7.0)
    assert result.metrics["factutil/groups"] == 30.0


def _span_row(uid: str, session: int, actions: list[dict], mask: list[int], reward: float):
    return {
        "key": f"{uid}_{session}_0",
        "uid": uid,
        "extra": {
            "factutil": {
                "actions": actions,
                "question": "Who directed Z?",
                "golden_answers": ["Ann"],
            }
        },
        "mask": mask,
        "reward": reward,
    }


SEARCH = {"kind": "search", "query": "Z director", "triples": None, "answer": None, "error": None}
ASSERT = {
    "kind": "assert",
    "query": None,
    "triples": [["Z", "directed by", "Ann"]],
    "answer": None,
    "error": None,
}
ANSWER = {"kind": "answer", "query": None, "triples": None, "answer": "Ann", "error": None}
WRONG = {"kind": "answer", "query": None, "triples": None, "answer": "Bob", "error": None}


def test_span_layout_scatters_each_action_onto_its_turn():
    rows = [
        # three turns, observations (0s) between them
        _span_row("q", 0, [SEARCH, ASSERT, ANSWER], [1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 0], 1.0),
        # a long last turn that fills the row
        _span_row("q", 1, [SEARCH, ASSERT, WRONG], [1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1], 0.0),
        _span_row("q", 2, [SEARCH, WRONG], [1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], 0.0),
    ]
    mask = torch.tensor([r["mask"] for r in rows])
    scores = torch.zeros(mask.shape)
    for i, r in enumerate(rows):
        scores[i, max(j for j, m in enumerate(r["mask"]) if m)] = r["reward"]
    config = FactUtilConfig(mode="exact")
    result = compute_factagent_advantages(
        keys=[r["key"] for r in rows],
        uids=[r["uid"] for r in rows],
        extra_fields=[r["extra"] for r in rows],
        response_mask=mask,
        token_level_rewards=scores,
        grpo_advantages=torch.zeros(mask.shape),
        config=config,
    )
    assert result.fallback == {}
    expected = compute_process_advantages(
        [
            {
                "uid": "q",
                "question": "Who directed Z?",
                "golden_answers": ["Ann"],
                "rollout_id": f"q_{i}",
                "reward": r["reward"],
                "actions": [action_item(x) for x in r["extra"]["factutil"]["actions"]],
            }
            for i, r in enumerate(rows)
        ],
        config,
    )
    adv = {(rec.rollout_id, rec.step): np.float32(rec.advantage) for rec in expected.actions}
    a = adv
    assert result.advantages[0].tolist() == [
        a["q_0", 0],
        a["q_0", 0],
        0,
        0,
        a["q_0", 1],
        a["q_0", 1],
        a["q_0", 1],
        0,
        a["q_0", 2],
        a["q_0", 2],
        0,
        0,
    ]
    assert result.advantages[1].tolist() == (
        [a["q_1", 0], a["q_1", 0], 0, 0] + [a["q_1", 1]] * 3 + [0] + [a["q_1", 2]] * 4
    )
    assert result.advantages[2].tolist() == [a["q_2", 0], 0, a["q_2", 1], a["q_2", 1]] + [0] * 8
    assert (
        a["q_0", 1] > a["q_2", 0]
    )  # the assert that found the answer earns more than a bare search


def test_span_layout_with_more_turns_than_actions_falls_back():
    mask = torch.tensor([[1, 0, 1, 0, 1], [1, 1, 0, 0, 0]])
    grpo = torch.tensor([[0.5, 0, 0.5, 0, 0.5], [-0.5, -0.5, 0, 0, 0]])
    result = compute_factagent_advantages(
        keys=["q_0_0", "q_1_0"],
        uids=["q", "q"],
        extra_fields=[
            {"factutil": {"actions": [SEARCH, ANSWER], "question": "?", "golden_answers": ["Ann"]}},
            {"factutil": {"actions": [WRONG], "question": "?", "golden_answers": ["Ann"]}},
        ],
        response_mask=mask,
        token_level_rewards=torch.tensor([[0, 0, 0, 0, 1.0], [0, 1.0, 0, 0, 0]]),
        grpo_advantages=grpo,
        config=FactUtilConfig(mode="exact"),
    )
    assert "3 turns but only 2 actions" in result.fallback["q"]
    assert torch.equal(result.advantages, grpo)


def _span_batch(rows: list[dict], grpo: torch.Tensor | None = None):
    mask = torch.tensor([r["mask"] for r in rows])
    scores = torch.zeros(mask.shape)
    for i, r in enumerate(rows):
        scores[i, -1] = r["reward"]
    grpo = torch.full(mask.shape, 0.25) if grpo is None else grpo
    result = compute_factagent_advantages(
        keys=[r["key"] for r in rows],
        uids=[r["uid"] for r in rows],
        extra_fields=[r["extra"] for r in rows],
        response_mask=mask,
        token_level_rewards=scores,
        grpo_advantages=grpo,
        config=FactUtilConfig(mode="exact"),
    )
    return result, grpo


def _expected_values(rows: list[dict]) -> dict:
    """Per (rollout_id, step), factutil's advantage of the same rollouts given directly."""
    expected = compute_process_advantages(
        [
            {
                "uid": r["uid"],
                "question": "Who directed Z?",
                "golden_answers": ["Ann"],
                "rollout_id": r["key"].rsplit("_", 1)[0],
                "reward": r["reward"],
                "actions": [action_item(x) for x in r["extra"]["factutil"]["actions"]],
            }
            for r in rows
        ],
        FactUtilConfig(mode="exact"),
    )
    return {(rec.rollout_id, rec.step): np.float32(rec.advantage) for rec in expected.actions}


@pytest.mark.parametrize("mask,actions", [
    ([1, 1, 0, 0, 1, 1, 1, 1], [SEARCH, ASSERT, ANSWER]),  # assert + answer in one run of 1s
    ([1, 1, 1, 1, 1, 0, 0, 0], [SEARCH, ANSWER]),  # rLLM #575: A0 5, obs 4, A1 5, cut at 8
])
def test_span_layout_turns_that_cannot_be_recovered_fall_back_with_a_metric_and_one_warning(
    mask, actions, caplog
):
    """Fewer runs of 1s than actions and no explicit spans -> the group keeps verl's GRPO
    (outcome-only) advantage, ``factutil/groups_fallback_turns`` = 1 and one warning; no value
    lands on another action's tokens."""
    rows = [
        _span_row("q", 0, actions, mask, 1.0),
        _span_row("q", 1, [SEARCH, WRONG], [1, 1, 0, 0, 1, 1, 0, 0], 0.0),
    ]
    with caplog.at_level("WARNING", logger="factutil_verl"):
        result, grpo = _span_batch(rows)
    runs = 1 + int(np.count_nonzero(np.diff(mask) == 1))
    assert result.fallback["q"].endswith(
        f"response_mask has {runs} turns for {len(actions)} actions: the turn boundaries cannot be "
        "recovered; give extra_fields['factutil']['spans']"
    )
    assert torch.equal(result.advantages, grpo)
    assert result.metrics["factutil/groups_fallback"] == 1.0
    assert result.metrics["factutil/groups_fallback_turns"] == 1.0
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "'q'" in r.getMessage()]
    assert len(warned) == 1


def test_span_layout_with_explicit_spans_puts_each_value_on_its_own_tokens():
    """The same merged-run row with ``spans`` [[0, 2], [4, 6], [6, 8]] (the loop knows its turns)
    -> search on tokens 0-1, assert on 4-5, answer on 6-7, as factutil gives them; tokens outside
    the mask inside a span get 0."""
    rows = [
        _span_row("q", 0, [SEARCH, ASSERT, ANSWER], [1, 1, 0, 0, 1, 1, 1, 1], 1.0),
        _span_row("q", 1, [SEARCH, WRONG], [1, 1, 0, 0, 1, 0, 1, 0], 0.0),
    ]
    rows[0]["extra"]["factutil"]["spans"] = [[0, 2], [4, 6], [6, 8]]
    rows[1]["extra"]["factutil"]["spans"] = [[0, 2], [4, 8]]  # a 0 inside the answer's span
    result, _ = _span_batch(rows)
    assert result.fallback == {} and result.metrics["factutil/groups_fallback_turns"] == 0.0
    a = _expected_values(rows)
    assert a["q_0", 1] != a["q_0", 2]
    assert result.advantages[0].tolist() == (
        [a["q_0", 0]] * 2 + [0, 0] + [a["q_0", 1]] * 2 + [a["q_0", 2]] * 2
    )
    assert result.advantages[1].tolist() == (
        [a["q_1", 0]] * 2 + [0, 0, a["q_1", 1], 0, a["q_1", 1], 0]
    )


@pytest.mark.parametrize("spans,reason", [
    ([[0, 5], [9, 14]], "action 1's span [9, 14) runs past the row's 8 tokens (truncated row)"),
    ([[0, 5]], "1 spans for 2 actions"),
    ([[0, 5], [4, 8]], "spans must be in order and must not overlap"),
    ([[0, 5], [6, 7]], "model tokens outside every span"),
    ([[0, 5], "x"], "spans must be [start, end) pairs of ints"),
    ([[3, 2], [4, 8]], "spans must be [start, end) pairs of ints"),
])
def test_span_layout_explicit_spans_that_do_not_fit_fall_back(spans, reason):
    """Explicit spans that run past the row (rLLM #575's truncated row), miscount the actions,
    overlap, leave model tokens outside every span or are malformed -> outcome-only fallback
    naming the problem, counted in ``factutil/groups_fallback_turns``."""
    rows = [
        _span_row("q", 0, [SEARCH, ANSWER], [1, 1, 1, 1, 1, 0, 0, 1], 1.0),
        _span_row("q", 1, [SEARCH, WRONG], [1, 1, 0, 0, 1, 1, 0, 0], 0.0),
    ]
    rows[0]["extra"]["factutil"]["spans"] = spans
    result, grpo = _span_batch(rows)
    assert reason in result.fallback["q"]
    assert torch.equal(result.advantages, grpo)
    assert result.metrics["factutil/groups_fallback_turns"] == 1.0


def test_span_layout_explicit_span_on_observation_tokens_only_falls_back():
    """Every model token is inside a span, but the answer's span [5, 8) covers only observation
    tokens (mask 0): its value would land nowhere while the search's is written, so the group
    keeps verl's GRPO (0.25 on every token here), as TRL refuses such a span."""
    rows = [
        _span_row("q", 0, [SEARCH, ANSWER], [1, 1, 1, 1, 1, 0, 0, 0], 1.0),
        _span_row("q", 1, [SEARCH, WRONG], [1, 1, 0, 0, 1, 1, 0, 0], 0.0),
    ]
    rows[0]["extra"]["factutil"]["spans"] = [[0, 5], [5, 8]]
    rows[1]["extra"]["factutil"]["spans"] = [[0, 2], [4, 6]]
    result, _ = _span_batch(rows)
    assert result.fallback == {"q": "rollout 'q_0': action 1's span [5, 8) holds no model token"}
    assert result.advantages.tolist() == [[0.25] * 8] * 2
    assert result.metrics["factutil/groups_fallback_turns"] == 1.0


def test_span_rows_scattered_at_once_equal_each_turn_span_filled_row_by_row():
    from factutil.advantages import scatter_to_spans

    from factutil_verl.advantage import _Plan, _turn_tokens

    rng = np.random.default_rng(0)
    mask = rng.random((7, 40)) < 0.6
    plans, values = [], {}
    for row in range(7):
        plans.append(_Plan(f"g{row % 3}", f"t{row}", [row], span=True))
        turns = int((np.diff(np.concatenate(([0], mask[row].astype(int)))) == 1).sum())
        values[(f"g{row % 3}", f"t{row}")] = rng.normal(size=turns)
    values[("g2", "t5")] = values[("g2", "t5")][:1]  # fewer actions than turns: its group falls back
    values[("g1", "t1")] = np.append(values[("g1", "t1")], 1.0)  # more actions than turns: too
    del values[("g0", "t6")]  # never scored: its group falls back
    fallback: dict[str, str] = {}
    tokens = _turn_tokens(plans, values, mask, fallback)
    assert set(fallback) == {"g2", "g0", "g1"}
    assert "turns but only 1 actions are listed" in fallback["g2"]
    assert "the turn boundaries cannot be recovered" in fallback["g1"]
    assert fallback["g0"] == "no result for rollout 't6'"
    for row, got in enumerate(tokens):
        if row in (1, 5, 6):
            assert got is None
        else:
            edges = np.diff(np.concatenate(([0], mask[row], [0])).astype(np.int8))
            spans = np.stack([np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)], axis=1)
            want = scatter_to_spans(values[(f"g{row % 3}", f"t{row}")][: len(spans)], spans, 40)
            assert got.dtype == np.float32 and got.tobytes() == want.tobytes()


def test_adapter_latency_benchmark_runs_and_prints_its_table(tmp_path):
    """Smoke test of benchmarks/adapter_latency.py (timings printed, never asserted)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "adapter_latency.py"
    done = subprocess.run([sys.executable, str(script), "--size", "S", "--repeat", "1"],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verl adapter, size S, 384 rows" in done.stdout and "adapter − core" in done.stdout


def test_grpo_values_land_on_padding_and_fallback_rows_only_and_are_read_only_then():
    import torch

    from factutil_verl.advantage import FactAgentAdvantages, grpo_rows, with_grpo_fallback

    scored = FactAgentAdvantages(
        advantages=torch.tensor([[1.0, float("nan")], [2.0, 2.0], [3.0, 3.0]]), metrics={},
        fallback={"b": "cannot be scored"})
    grpo = torch.full((3, 2), -5.0)
    uids = ["a", "b", "c"]
    assert grpo_rows(scored, uids, [False, False, True]).tolist() == [False, True, True]
    out = with_grpo_fallback(scored, grpo, uids, [False, False, True])
    assert out.tolist() == [[1.0, 0.0], [-5.0, -5.0], [-5.0, -5.0]]
    clean = FactAgentAdvantages(advantages=scored.advantages[[0, 2]], metrics={})
    assert with_grpo_fallback(clean, None, ["a", "c"]).tolist() == [[1.0, 0.0], [3.0, 3.0]]
    with pytest.raises(ValueError, match="1 row"):
        with_grpo_fallback(scored, None, uids)
