"""The patched compute_advantages_and_returns on real OpenRLHF Experiences from the 2Wiki sample.

Every sample of examples/data/2wiki_rollouts.jsonl (30 groups x 6) is replayed through the
wrapped ``MultiTurnAgentExecutor``, turned into ``Experience`` objects by OpenRLHF's own
(patched) ``_process_response_into_experience`` and micro-batched by its own
``split_rollout_samples``; then OpenRLHF's original method and the patched one run on copies.
The expected term is built independently: the core scores the texts the engine emitted and
each value is put, token by token, on the engine's own spans.
"""

from __future__ import annotations

import copy
import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from openrlhf_testkit import (
    ToyTokenizer,
    load_sample,
    make_args,
    make_instance_cls,
    prompt_of,
    run_groups,
)

from factutil import FactUtilConfig, compute_process_advantages

EXECUTOR_MAX_LENGTH = 1400  # the generation budget: some last actions are cut (finish "length")
TRAIN_MAX_LEN = 1100  # --data.max_len at experience time: clips and drops later spans
N = 6
EXACT = {"mode": "exact"}  # fast; the main equality test also runs in semantic mode


@pytest.fixture(scope="module")
def episodes(openrlhf):
    """(rollout, response, engine) for all 180 samples, in rollout-batch order."""
    from factutil_openrlhf import make_executor

    groups = load_sample()
    tokenizer = ToyTokenizer()
    results = run_groups(make_executor(make_instance_cls())(), groups, tokenizer, EXECUTOR_MAX_LENGTH)
    rollouts = [rollout for group in groups for rollout in group]
    return SimpleNamespace(
        rollouts=rollouts,
        responses=[response for response, _ in results],
        engines=[engine for _, engine in results],
        tokenizer=tokenizer,
    )


def build_experiences(openrlhf, episodes, args, maker):
    """Experiences as OpenRLHF 0.11 hands them to compute_advantages_and_returns (sans models)."""
    generator = openrlhf.samples_generator.SamplesGenerator.__new__(
        openrlhf.samples_generator.SamplesGenerator
    )
    samples = [
        generator._process_response_into_experience(response, max_len=TRAIN_MAX_LEN)
        for response in episodes.responses
    ]
    batches = maker.split_rollout_samples(samples)
    for batch in batches:
        batch.kl = torch.zeros_like(batch.action_mask, dtype=torch.float32)
        batch.values = torch.zeros_like(batch.action_mask, dtype=torch.float32)
    return batches


def make_maker(openrlhf, episodes, estimator="group_norm", **train):
    args = make_args(estimator=estimator, n=N, **train)
    maker = openrlhf.experience_maker.RemoteExperienceMaker(
        None, None, None, None, SimpleNamespace(value=0.0), SimpleNamespace(args=args), episodes.tokenizer
    )
    return maker


def run_both(openrlhf, episodes, config, estimator="group_norm", **train):
    """(original result, patched result) on two copies of the same experiences."""
    from factutil_openrlhf import patch

    patch.configure(config)
    maker = make_maker(openrlhf, episodes, estimator, **train)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    method = openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns
    original = getattr(method, patch.PATCHED)
    return original(maker, plain), maker.compute_advantages_and_returns(batches)


def expected_delta(episodes, config, clusterer=None):
    """Per sample index: float32 (TRAIN_MAX_LEN - 1,) omega * A_proc on its action tokens,
    from the core run on the emitted texts and the engine's spans (no adapter code);
    ``clusterer``: one whose caches to reuse (clusters never depend on them)."""
    lines = []
    for rollout, engine in zip(episodes.rollouts, episodes.engines):
        lines.append(
            {
                "uid": rollout["uid"],
                "question": prompt_of(rollout),
                "golden_answers": rollout["golden_answers"],
                "rollout_id": rollout["rollout_id"],
                "actions": [{"raw": text} for _, _, text in engine.log],
            }
        )
    result = compute_process_advantages(lines, config, clusterer=clusterer)
    by_rollout = {}
    for record in result.actions:
        by_rollout.setdefault(record.rollout_id, []).append(record.process_advantage)
    deltas = []
    for rollout, engine, response in zip(episodes.rollouts, episodes.engines, episodes.responses):
        length = min(len(response["observation_tokens"]), TRAIN_MAX_LEN)
        delta = np.zeros(TRAIN_MAX_LEN - 1, dtype=np.float32)
        for (start, end, _), value in zip(engine.log, by_rollout[rollout["rollout_id"]]):
            for position in range(max(start, 1), min(end, length)):
                delta[position - 1] = np.float32(config.omega * value)
        deltas.append(delta)
    return deltas


@pytest.mark.parametrize("mode", ["exact", "semantic"])  # semantic: the real bundled MiniLM
def test_added_term_is_omega_times_process_advantage_on_exactly_the_action_spans(openrlhf, episodes, mode):
    from factutil_openrlhf import patch

    config = FactUtilConfig(omega=0.5, mode=mode)
    plain, patched = run_both(openrlhf, episodes, config)
    deltas = expected_delta(episodes, config, patch.active().step.clusterer)
    cut = clipped = 0
    for before, after in zip(plain, patched):
        assert "factutil" not in after.info
        assert torch.equal(before.returns, after.returns)
        for row, index in enumerate(after.index):
            width = after.advantages.shape[1]
            expected = before.advantages[row] + torch.from_numpy(deltas[index][:width])
            assert torch.equal(after.advantages[row], expected)
            assert not torch.any((after.advantages[row] != before.advantages[row]) & (after.action_mask[row] == 0))
            assert after.info["factutil/skipped"][row] == 0
            spans = episodes.responses[index]["action_ranges"]
            clipped += any(end > TRAIN_MAX_LEN for _, end in spans)
            cut += episodes.responses[index]["truncated"]
    assert clipped > 0 and cut > 0  # the sample exercises both kinds of truncation
    changed = sum(int((a.advantages != b.advantages).any()) for a, b in zip(patched, plain))
    assert changed == len(patched)


@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "dr_grpo", "reinforce_baseline", "gae"])
def test_omega_zero_is_bit_identical_to_openrlhf(openrlhf, episodes, estimator, caplog):
    with caplog.at_level(logging.WARNING, logger="factutil.openrlhf"):
        plain, patched = run_both(openrlhf, episodes, FactUtilConfig(omega=0.0, **EXACT), estimator)
    assert ("whitens advantages" in caplog.text) == (estimator in ("gae", "reinforce_baseline"))
    for before, after in zip(plain, patched):
        assert torch.equal(before.advantages, after.advantages)
        assert torch.equal(before.returns, after.returns)
        assert torch.equal(before.rewards, after.rewards)
        assert "factutil" not in after.info
        extra = set(after.info) - set(before.info)
        assert extra == {key for key in after.info if key.startswith("factutil/")}
        for key in before.info:
            assert torch.equal(before.info[key], after.info[key])


def test_dynamic_batches_mix_groups_and_still_match(openrlhf, episodes):
    config = FactUtilConfig(omega=0.3, **EXACT)
    plain, patched = run_both(
        openrlhf, episodes, config, dynamic_batch_enable=True, max_tokens_per_gpu=6000
    )
    assert any(len({index // N for index in batch.index}) > 1 for batch in patched)
    deltas = expected_delta(episodes, config)
    for before, after in zip(plain, patched):
        for row, index in enumerate(after.index):
            width = after.advantages.shape[1]
            assert torch.equal(after.advantages[row], before.advantages[row] + torch.from_numpy(deltas[index][:width]))


def test_a_group_that_cannot_be_scored_keeps_openrlhf_advantages(openrlhf, episodes, caplog):
    from factutil_openrlhf import patch

    patch.configure(FactUtilConfig(omega=0.5, **EXACT))
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    # Group 0: one sample lost its payload; group 1: a blank gold answer (core validation);
    # group 2: one sample's span ends at 2**70, past any token position (no int64 holds it).
    for batch in batches:
        for row, index in enumerate(batch.index):
            if index == 2:
                batch.info["factutil"][row] = None
            if index // N == 1:
                batch.labels[row] = json.dumps([" "])
            if index == 2 * N + 1:
                payload = batch.info["factutil"][row]
                spans = [list(span) for span in payload["spans"]]
                spans[-1][1] = 2**70
                batch.info["factutil"][row] = dict(payload, spans=spans)
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    original = getattr(openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns, patch.PATCHED)
    plain = original(maker, plain)
    with caplog.at_level(logging.WARNING, logger="factutil.openrlhf"):
        patched = maker.compute_advantages_and_returns(batches)
    assert "3 group(s) kept OpenRLHF's advantages" in caplog.text and "2**63" in caplog.text
    # The other groups get exactly their own delta (a group's numbers never depend on the others).
    deltas = expected_delta(episodes, FactUtilConfig(omega=0.5, **EXACT))
    for before, after in zip(plain, patched):
        assert torch.isfinite(after.advantages).all()
        for row, index in enumerate(after.index):
            kept = index // N in (0, 1, 2)
            assert after.info["factutil/skipped"][row] == float(kept)
            if kept:  # no process term on a sample whose group kept OpenRLHF's advantages
                assert after.info["factutil/process_adv_abs"][row] == 0
            width = after.advantages.shape[1]
            want = before.advantages[row] + (0 if kept else torch.from_numpy(deltas[index][:width]))
            assert torch.equal(after.advantages[row], want)
    assert any(np.any(deltas[index] != 0) for index in range(3 * N, len(episodes.rollouts)))


def test_a_failing_core_call_keeps_everything_and_never_raises(openrlhf, episodes, monkeypatch):
    from factutil_openrlhf import patch

    import factutil.api

    patch.configure(FactUtilConfig(omega=0.5, **EXACT))

    def broken(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(factutil.api, "compute_process_advantages", broken)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    original = getattr(openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns, patch.PATCHED)
    plain = original(maker, plain)
    patched = maker.compute_advantages_and_returns(batches)
    for before, after in zip(plain, patched):
        assert torch.equal(before.advantages, after.advantages)
        assert torch.all(after.info["factutil/skipped"] == 1)


def test_metrics_reach_the_replay_buffer_split_and_payload_is_gone(openrlhf, episodes):
    from factutil_openrlhf import patch

    patch.configure(FactUtilConfig(omega=0.5, **EXACT))
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    recorded = sum(len(payload["spans"]) for batch in batches for payload in batch.info["factutil"])
    patched = maker.compute_advantages_and_returns(batches)
    items = []
    for batch in patched:
        items.extend(openrlhf.experience.split_experience_batch(batch))  # what NaiveReplayBuffer.append does
    merged = openrlhf.experience.make_experience_batch(items[:8])
    assert "factutil" not in merged.info
    # As PolicyModelActor.training_step turns info lists into metrics:
    assert torch.tensor(merged.info["factutil/actions"], dtype=torch.float).shape == (8,)
    assert type(merged.info["factutil/actions"]) is type(merged.info["reward"])
    # factutil/actions is the step's count of actions, on every sample (as verl and TRL log it)
    actions = torch.cat([batch.info["factutil/actions"] for batch in patched])
    assert recorded > 0 and torch.all(actions == recorded)
    names = {key for key in patched[0].info if key.startswith("factutil/")}
    assert set(patch.METRIC_KEYS) | {"factutil/groups_fallback", "factutil/score_early_used",
                                     "factutil/time_trainer_ms"} <= names
    for key in names:
        values = torch.cat([batch.info[key] for batch in patched])
        assert torch.isfinite(values).all(), key


def test_an_unexpected_adapter_error_keeps_every_group(openrlhf, episodes, monkeypatch, caplog):
    from factutil_openrlhf import patch

    patch.configure(FactUtilConfig(omega=0.5, **EXACT))

    def broken(*args, **kwargs):
        raise KeyError("layout")

    monkeypatch.setattr(patch, "_collect_rows", broken)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    original = getattr(openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns, patch.PATCHED)
    plain = original(maker, plain)
    with caplog.at_level(logging.WARNING, logger="factutil.openrlhf"):
        patched = maker.compute_advantages_and_returns(batches)
    assert "every group kept OpenRLHF's advantages" in caplog.text
    for before, after in zip(plain, patched):
        assert torch.equal(before.advantages, after.advantages)
        assert torch.all(after.info["factutil/skipped"] == 1)
        assert "factutil" not in after.info


def _patched_steps(openrlhf, episodes, config, output_dir, steps):
    """Run the patched method ``steps`` times (one call per training step); the experiences."""
    from factutil_openrlhf import patch

    active = patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    maker.strategy.args.ckpt = SimpleNamespace(output_dir=str(output_dir))
    done = []
    for _ in range(steps):
        batches = build_experiences(openrlhf, episodes, maker.args, maker)
        done.append(maker.compute_advantages_and_returns(batches))
        if active.step.reports is not None:
            assert active.step.reports.wait(120)
    return active, done


def test_report_every_writes_the_steps_report_into_the_output_dir(openrlhf, episodes, tmp_path):
    config = FactUtilConfig(omega=0.5, mode="exact", report_every=2)
    active, _ = _patched_steps(openrlhf, episodes, config, tmp_path, steps=3)
    folder = tmp_path / "factutil_reports"
    assert sorted(path.name for path in folder.iterdir()) == ["step_000002.html"]
    page = (folder / "step_000002.html").read_text(encoding="utf-8")
    assert page.count('<section class="card group"') == 30  # the step's 30 GRPO groups
    assert active.step.reports.failures == 0


def test_a_failing_report_changes_no_advantage(openrlhf, episodes, tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the output folder should be", encoding="utf-8")
    config = FactUtilConfig(omega=0.5, mode="exact", report_every=1)
    active, (failed,) = _patched_steps(openrlhf, episodes, config, blocker, steps=1)
    assert active.step.reports.failures == 1
    _, (plain,) = _patched_steps(openrlhf, episodes, config.model_copy(update={"report_every": 0}),
                                 tmp_path, steps=1)
    for a, b in zip(failed, plain):
        assert torch.equal(a.advantages, b.advantages)
        assert torch.equal(a.info["factutil/skipped"], b.info["factutil/skipped"])


@pytest.mark.parametrize("mode", ["exact", "semantic"])
def test_scoring_early_gives_the_same_advantages_and_is_used(openrlhf, episodes, mode):
    """score_early (default): the batch scored in the background before the log-probs (as the
    wrapped make_experience starts it) -> the advantage step uses that result and every
    advantage equals, bit for bit, the advantages of scoring at the advantage step."""
    from factutil_openrlhf import patch

    config = FactUtilConfig(omega=0.5, mode=mode)
    _, late = run_both(openrlhf, episodes, config)
    patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    patch.active().start_early(maker, batches)
    assert patch.active().step._early is not None
    early = maker.compute_advantages_and_returns(batches)
    for a, b in zip(early, late):
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)
        assert bool((a.info["factutil/score_early_used"] == 1).all())
        assert bool((b.info["factutil/score_early_used"] == 0).all())


def test_a_batch_changed_after_early_scoring_is_scored_again(openrlhf, episodes, caplog):
    """The rows changed between the early start and the advantage step (here the first micro-
    batch's prompts, as another question would be) -> the early result is not used (one
    warning, score_early_used 0); the advantages are those of scoring the changed batch."""
    from factutil_openrlhf import patch

    config = FactUtilConfig(omega=0.5, **EXACT)
    patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    changed = copy.deepcopy(batches)
    changed[0].prompts = [f"another question {r}" for r in range(len(changed[0].prompts))]
    reference = maker.compute_advantages_and_returns(copy.deepcopy(changed))
    patch.active().start_early(maker, batches)
    batches[0].prompts = list(changed[0].prompts)
    with caplog.at_level("WARNING", logger="factutil.openrlhf"):
        again = maker.compute_advantages_and_returns(batches)
    assert "changed after it was scored early" in caplog.text
    for a, b in zip(again, reference):
        assert torch.equal(a.advantages, b.advantages)
        assert bool((a.info["factutil/score_early_used"] == 0).all())


def test_no_early_scoring_when_off_or_without_payloads(openrlhf, episodes):
    from factutil_openrlhf import patch

    maker = make_maker(openrlhf, episodes)
    patch.configure(FactUtilConfig(omega=0.5, score_early=False, **EXACT))
    patch.active().start_early(maker, build_experiences(openrlhf, episodes, maker.args, maker))
    assert patch.active().step._early is None
    patch.configure(FactUtilConfig(omega=0.5, **EXACT))
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    for batch in batches:
        batch.info.pop("factutil")
    patch.active().start_early(maker, batches)
    assert patch.active().step._early is None


def test_make_experience_starts_the_scoring(openrlhf, episodes, monkeypatch):
    """The wrapped make_experience hands its samples to start_early before OpenRLHF's own: a
    start_early that stops the call shows OpenRLHF's part (which would start Ray for its
    actors) has not run yet."""
    from factutil_openrlhf import patch

    class Stopped(Exception):
        pass

    def start_early(maker, samples):
        calls.append((maker, samples))
        raise Stopped

    patch.configure(FactUtilConfig(omega=0.5, **EXACT))
    maker = make_maker(openrlhf, episodes)
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    calls = []
    monkeypatch.setattr(patch.active(), "start_early", start_early)
    assert getattr(openrlhf.experience_maker.RemoteExperienceMaker.make_experience, patch.PATCHED)
    with pytest.raises(Stopped):
        maker.make_experience(batches)
    assert calls == [(maker, batches)]


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("penalty", [{"stop_properly_penalty_coef": -0.5},
                                     {"overlong_buffer_len": 200, "overlong_penalty_factor": 1.0}])
def test_length_penalties_keep_the_early_score_and_the_agents_reward(openrlhf, episodes, penalty, shared, caplog):
    """OpenRLHF's length penalties (ProRL's stop-properly, DAPO's overlong) rewrite
    ``info["reward"]`` inside compute_advantages_and_returns, after the early score read it: the
    batch is the same, so the early score is used (no warning), and the term is the core's on
    the agent's own rewards (the answers' F1, as the sample's environment gave them), also where
    ``rewards`` and ``info["reward"]`` are one tensor (``shared``: a reward model's, which the
    penalties change in place). ``success="reward"``: the term depends on those rewards."""
    from factutil_openrlhf import patch

    config = FactUtilConfig(omega=0.5, success="reward", **EXACT)
    patch.configure(config)
    maker = make_maker(openrlhf, episodes)
    for name, value in penalty.items():
        setattr(maker.args.reward, name, value)
    maker.args.rollout.max_new_tokens = 400  # DAPO: longer than 200 tokens costs reward
    batches = build_experiences(openrlhf, episodes, maker.args, maker)
    for batch in batches if shared else ():
        batch.rewards = batch.info["reward"]
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    original = getattr(openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns, patch.PATCHED)
    plain = original(maker, plain)
    raw = torch.cat([batch.info["reward"] for batch in batches])
    assert not torch.equal(torch.cat([batch.info["reward"] for batch in plain]), raw)  # penalised
    patch.active().start_early(maker, batches)
    with caplog.at_level(logging.WARNING, logger="factutil.openrlhf"):
        patched = maker.compute_advantages_and_returns(batches)
    assert "changed after it was scored early" not in caplog.text
    deltas = expected_delta(episodes, config)
    for before, after in zip(plain, patched):
        assert bool((after.info["factutil/score_early_used"] == 1).all())
        for row, index in enumerate(after.index):
            width = after.advantages.shape[1]
            assert torch.equal(after.advantages[row], before.advantages[row] + torch.from_numpy(deltas[index][:width]))


def test_a_sample_with_a_nan_reward_falls_back_with_its_group_alone():
    """A NaN reward is no R to score: its group keeps OpenRLHF's advantages, named as verl and
    TRL name it, and the other group is scored as if alone (not with the core's own F1 as R)."""
    from factutil_openrlhf import patch

    def payload(answer):
        return {"actions": [{"action": "search", "query": "capital of France"},
                            {"action": "answer", "answer": answer}], "spans": [[1, 4], [6, 9]]}

    rows = {(0, r): {"index": r, "payload": payload(["Paris", "Lyon"][r % 2]), "prompt": "q?",
                     "label": ["Paris"], "reward": [1.0, 0.0, float("nan"), 0.0][r]}
            for r in range(4)}
    groups = {0: [(0, 0), (0, 1)], 1: [(0, 2), (0, 3)]}
    config = FactUtilConfig(omega=0.5, **EXACT)
    batch = patch.ProcessAdvantagePatch(config)._score_groups(rows, groups)
    assert batch.fallback == {1: "sample 2 has a reward that is no finite number: nan"}
    alone = patch.ProcessAdvantagePatch(config)._score_groups(
        {key: rows[key] for key in groups[0]}, {0: groups[0]})
    assert batch.values.keys() == alone.values.keys() == {("0", "0"), ("0", "1")}
    for key, values in alone.values.items():
        assert batch.values[key].tobytes() == values.tobytes()


def test_a_nan_reward_starts_no_early_score_whose_key_could_never_match():
    """NaN != NaN: an early score keyed by a NaN reward would be thrown away with a warning that
    the batch changed; the advantage step scores such a batch instead."""
    from factutil_openrlhf import patch

    experience = SimpleNamespace(
        advantages=None, index=[0, 1], prompts=["q?", "q?"], labels=[["Paris"], ["Paris"]],
        info={"factutil": [{"actions": [], "spans": []}] * 2,
              "reward": torch.tensor([1.0, float("nan")])})
    maker = SimpleNamespace(strategy=SimpleNamespace(args=make_args(n=2)))
    active = patch.ProcessAdvantagePatch(FactUtilConfig(**EXACT))
    active.start_early(maker, [experience])
    assert active.step._early is None
    experience.info["reward"] = torch.tensor([1.0, 0.0])
    active.start_early(maker, [experience])
    assert active.step._early is not None
