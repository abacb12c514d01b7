"""The ``factutil`` trainer mode end to end through verl's TransferQueue (Ray, CPU only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages
from verl_testkit import SAMPLE, Rows

ray = pytest.importorskip("ray")
tq = pytest.importorskip("transfer_queue")


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray instance with one TransferQueue storage unit (reused if one is running)."""
    from omegaconf import OmegaConf

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    if started:
        ray.shutdown()


def put_rows(rows: Rows, partition: str, with_extra_fields: bool = True):
    """Write rows the way verl's AgentLoopWorkerTQ does (jagged tensors, non-tensor extra_fields)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    fields, tags = [], []
    for row, key in enumerate(rows.keys):
        length = int(rows.response_mask[row].sum())
        field = {
            "uid": rows.uids[row],
            "responses": torch.arange(length, dtype=torch.int64),
            "response_mask": rows.response_mask[row, :length].clone(),
            "rm_scores": rows.rm_scores[row, :length].clone(),
        }
        if with_extra_fields:
            field["extra_fields"] = rows.extra_fields[row]
        fields.append(field)
        tags.append({"status": "success", "seq_len": 8 + length, "response_len": length})
    return tq.kv_batch_put(
        keys=list(rows.keys),
        partition_id=partition,
        fields=list_of_dict_to_tensordict(fields),
        tags=tags,
    )


def read_advantages(meta) -> list[torch.Tensor]:
    data = tq.kv_batch_get(
        keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages", "returns"]
    )
    advantages = data["advantages"].unbind()
    assert all(torch.equal(a, r) for a, r in zip(advantages, data["returns"].unbind()))
    return list(advantages)


def make_trainer(verl_config, *overrides: str):
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = verl_config(
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=6",
        "trainer.v1.trainer_mode=factutil",
        "+algorithm.factutil.mode=exact",
        *overrides,
    )
    return get_trainer_cls(config.trainer.v1.trainer_mode)(config)


def test_trainer_is_verls_sync_trainer(verl_config):
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from factutil_verl.trainer import FactUtilTrainer

    trainer = make_trainer(verl_config, "+algorithm.factutil.omega=0.3")
    assert type(trainer) is FactUtilTrainer and isinstance(trainer, PPOTrainerSync)
    # verl takes its async paths whenever trainer_mode != "sync": this trainer must not.
    assert trainer.trainer_mode == "sync" and trainer.registered_mode == "factutil"
    assert type(trainer.replay_buffer) is ReplayBuffer
    assert trainer.factutil_config.omega == 0.3


def test_compute_advantage_through_transfer_queue_equals_the_core(
    transfer_queue, sample_rows, verl_config
):
    trainer = make_trainer(verl_config)
    meta = put_rows(sample_rows, "train")
    metrics: dict[str, float] = {}

    returned = trainer._compute_advantage(meta, metrics)

    assert list(returned.keys) == list(meta.keys)
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    advantages = read_advantages(meta)
    for record in expected.actions:
        row = sample_rows.row_of_action[(record.uid, record.rollout_id, record.step)]
        tokens = advantages[row]
        assert tokens.shape[0] == int(sample_rows.response_mask[row].sum())
        np.testing.assert_allclose(tokens.numpy(), record.advantage, rtol=1e-6, atol=1e-6)
    assert metrics["factutil/batch_fallback"] == 0.0
    assert metrics["factutil/groups_scored"] == 30.0
    assert metrics["factutil/clusters"] == expected.metrics["clusters"]
    assert metrics["factutil/time_trainer_ms"] > 0


@pytest.mark.parametrize("early", [False, True])
def test_a_batch_without_extra_fields_keeps_verls_grpo(
    transfer_queue, sample_rows, verl_config, monkeypatch, early
):
    """No row has factutil's fields -> every group keeps verl's GRPO advantages, scored at the
    advantage step (rows without extra fields: the read fails, the whole batch keeps GRPO) or
    early (rows whose extra fields hold no factutil key: every group falls back, and verl's GRPO
    values are read for their rows)."""
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    trainer = make_trainer(verl_config)
    rows = Rows(
        keys=[f"x{key}" for key in sample_rows.keys],
        uids=[f"x{uid}" for uid in sample_rows.uids],
        extra_fields=sample_rows.extra_fields,
        response_mask=sample_rows.response_mask,
        rm_scores=sample_rows.rm_scores,
        lines=[],
        row_of_action={},
    )
    if early:
        rows.extra_fields = [{"other_loop": row} for row in range(len(rows.keys))]
    meta = put_rows(rows, "train", with_extra_fields=early)
    metrics: dict[str, float] = {}
    if early:
        meta = trainer._compute_old_log_prob(meta, metrics)
    trainer._compute_advantage(meta, metrics)
    if early:
        assert seen == [True] and metrics["factutil/score_early_used"] == 1.0
        assert metrics["factutil/groups_fallback"] == 30.0

    grpo = _verl_grpo(rows)
    for row, tokens in enumerate(read_advantages(meta)):
        assert torch.isfinite(tokens).all()
        torch.testing.assert_close(tokens, grpo[row, : tokens.shape[0]].float())
    assert metrics["factutil/batch_fallback"] == float(not early)


def _assert_advantages_are_the_cores(meta, sample_rows, expected, tol: float = 1e-6) -> None:
    advantages = read_advantages(meta)
    for record in expected.actions:
        row = sample_rows.row_of_action[(record.uid, record.rollout_id, record.step)]
        np.testing.assert_allclose(advantages[row].numpy(), record.advantage, rtol=tol, atol=tol)


def test_report_every_writes_that_steps_report_into_the_run_folder(
    transfer_queue, sample_rows, verl_config, tmp_path
):
    trainer = make_trainer(
        verl_config, "+algorithm.factutil.report_every=2", f"trainer.default_local_dir={tmp_path}"
    )
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    for step in (1, 2, 3, 4, 5):
        trainer.global_steps = step
        meta = put_rows(sample_rows, "train")
        metrics: dict[str, float] = {}
        trainer._compute_advantage(meta, metrics)
        assert metrics["factutil/batch_fallback"] == 0.0
        assert trainer.factutil_step.reports.wait(120)
    folder = tmp_path / "factutil_reports"
    assert sorted(path.name for path in folder.iterdir()) == ["step_000002.html", "step_000004.html"]
    page = (folder / "step_000004.html").read_text(encoding="utf-8")
    assert "training step 4" in page
    # The batch of that step: every group and cluster the core finds in the sample.
    assert page.count('<section class="card group"') == expected.metrics["groups"] == 30
    assert page.count('<tr class="cluster"') == expected.metrics["clusters"]
    assert metrics["factutil/report_failures"] == 0.0


def test_a_failing_report_never_fails_the_step(transfer_queue, sample_rows, verl_config, tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the run folder should be", encoding="utf-8")
    trainer = make_trainer(
        verl_config, "+algorithm.factutil.report_every=1", f"trainer.default_local_dir={blocker}"
    )
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    for step in (1, 2):
        trainer.global_steps = step
        meta = put_rows(sample_rows, "train")
        metrics: dict[str, float] = {}
        trainer._compute_advantage(meta, metrics)  # the writer's mkdir fails in its thread
        assert metrics["factutil/batch_fallback"] == 0.0
        _assert_advantages_are_the_cores(meta, sample_rows, expected)
        assert trainer.factutil_step.reports.wait(120)
    assert trainer.factutil_step.reports.failures == 2 and trainer.factutil_step.reports.written == []


def test_the_report_is_written_off_the_step(
    transfer_queue, sample_rows, verl_config, tmp_path, monkeypatch
):
    import threading

    from factutil.report import writer

    release = threading.Event()
    real = writer.write_report

    def held(*args, **kwargs):
        release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "write_report", held)
    trainer = make_trainer(
        verl_config, "+algorithm.factutil.report_every=1", f"trainer.default_local_dir={tmp_path}"
    )
    trainer.global_steps = 1
    meta = put_rows(sample_rows, "train")
    trainer._compute_advantage(meta, {})  # returns while the report is still held
    assert not trainer.factutil_step.reports.wait(0)
    assert not (tmp_path / "factutil_reports" / "step_000001.html").exists()
    release.set()
    assert trainer.factutil_step.reports.wait(120)
    assert (tmp_path / "factutil_reports" / "step_000001.html").exists()


def _fake_old_log_prob(monkeypatch, seen: list):
    """verl's old log-prob step without actor workers: it waits (up to 60 s) for the scoring
    started before it, as the driver waits on the actors, and records whether that was running."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    def old_log_prob(self, batch, metrics=None):
        early = self.factutil_step._early
        seen.append(None if early is None else early[1].result(timeout=60) is not None)
        return batch

    monkeypatch.setattr(PPOTrainer, "_compute_old_log_prob", old_log_prob)


def _advantages_of(trainer, rows, metrics, early: bool):
    meta = put_rows(rows, "train")
    if early:
        meta = trainer._compute_old_log_prob(meta, metrics)
    trainer._compute_advantage(meta, metrics)
    return read_advantages(meta)


def test_scoring_early_runs_during_the_old_log_probs_and_gives_the_same_advantages(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """score_early (default): the batch's scoring runs while verl computes the old log-probs (the
    fake step sees its result), the advantage step uses it, and every row's advantages equal,
    bit for bit, those of a trainer that scores at the advantage step, and the core's."""
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    early, metrics = make_trainer(verl_config), {}
    got = _advantages_of(early, sample_rows, metrics, early=True)
    assert seen == [True]
    assert metrics["factutil/score_early_used"] == 1.0 and metrics["factutil/batch_fallback"] == 0.0
    late, late_metrics = make_trainer(verl_config, "+algorithm.factutil.score_early=false"), {}
    want = _advantages_of(late, sample_rows, late_metrics, early=True)
    assert seen == [True, None] and late_metrics["factutil/score_early_used"] == 0.0
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    for record in expected.actions:
        row = sample_rows.row_of_action[(record.uid, record.rollout_id, record.step)]
        np.testing.assert_allclose(got[row].numpy(), record.advantage, rtol=1e-6, atol=1e-6)


def test_the_driver_reads_nothing_before_the_old_log_probs(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """score_early: every TransferQueue read of the early scoring is the background thread's,
    so the driver goes to verl's old log-prob step at once; the advantage step then reads the
    rows once on the driver (to check them against what the thread scored)."""
    import threading

    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    readers: list[tuple[str, tuple]] = []
    real_get = tq.kv_batch_get

    def recording_get(*args, **kwargs):
        readers.append((threading.current_thread().name, tuple(kwargs.get("select_fields", ()))))
        return real_get(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_get", recording_get)
    trainer, metrics = make_trainer(verl_config), {}
    meta = trainer._compute_old_log_prob(put_rows(sample_rows, "train"), metrics)
    assert seen == [True] and readers and all(
        name.startswith("factutil") for name, _ in readers), readers
    readers.clear()
    trainer._compute_advantage(meta, metrics)
    ours = [fields for name, fields in readers if "extra_fields" not in fields
            and "uid" in fields and "rollout_log_probs" not in fields]
    assert len(ours) == 1 and metrics["factutil/score_early_used"] == 1.0


def test_a_batch_whose_rewards_change_after_early_scoring_is_scored_again(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """The rewards rewritten between the early start and the advantage step (every reward
    flipped) -> the early result is not used; the advantages are those of the new rewards."""
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    flipped = Rows(**{**sample_rows.__dict__,
                      "rm_scores": torch.where(sample_rows.rm_scores != 0,
                                               1.0 - sample_rows.rm_scores,
                                               sample_rows.rm_scores)})
    assert not torch.equal(flipped.rm_scores, sample_rows.rm_scores)
    trainer, metrics = make_trainer(verl_config), {}
    meta = trainer._compute_old_log_prob(put_rows(sample_rows, "train"), metrics)
    put_rows(flipped, "train")  # the same keys, new rewards
    trainer._compute_advantage(meta, metrics)
    assert metrics["factutil/score_early_used"] == 0.0
    got = read_advantages(meta)
    late, late_metrics = make_trainer(verl_config, "+algorithm.factutil.score_early=false"), {}
    want = _advantages_of(late, flipped, late_metrics, early=False)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert not all(torch.equal(a, b) for a, b in zip(got, _advantages_of(
        late, sample_rows, {}, early=False)))


def test_a_failed_early_scoring_is_done_again_at_the_advantage_step(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    trainer, metrics = make_trainer(verl_config), {}
    real, calls = trainer._factutil_score, []

    def failing_once(batch, *read, **options):
        calls.append(batch)
        if len(calls) == 1:
            raise RuntimeError("scoring failed in the thread")
        return real(batch, *read, **options)

    monkeypatch.setattr(trainer, "_factutil_score", failing_once)
    meta = put_rows(sample_rows, "train")
    with pytest.raises(RuntimeError, match="scoring failed in the thread"):
        trainer._compute_old_log_prob(meta, metrics)  # the fake step re-raises the thread's error
    trainer._compute_advantage(meta, metrics)
    assert len(calls) == 2  # early, then again at the advantage step
    assert metrics["factutil/score_early_used"] == 0.0 and metrics["factutil/batch_fallback"] == 0.0
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    _assert_advantages_are_the_cores(meta, sample_rows, expected)


def test_no_early_scoring_with_kl_in_the_reward(verl_config, monkeypatch):
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    trainer = make_trainer(verl_config, "algorithm.use_kl_in_reward=true")
    trainer._compute_old_log_prob(object(), {})
    assert seen == [None]


P1 = "Doc 1 (Title: Xawery Żuławski) Xawery Żuławski is a Polish film director."
P3 = "Doc 1 (Title: Polish-Russian War) Polish-Russian War is a 2009 Polish film."


def _search(query: str, observation: str) -> dict:
    return {"kind": "search", "query": query, "triples": None, "answer": None, "error": None,
            "observation": observation}


def _answer(text: str) -> dict:
    return {"kind": "answer", "query": None, "triples": None, "answer": text, "error": None,
            "observation": None}


def test_span_layout_rows_with_facts_retrieved_are_credited_on_each_search_through_the_trainer(
    transfer_queue, verl_config
):
    """Six rows in the ``search_r1`` loop's layout (one per rollout: ``actions`` with each
    search's ``observation``, ``spans``, information tokens masked 0) through TransferQueue and the
    trainer mode with ``facts=retrieved``. By hand: R = y = (1, 1, 1, 0, 0, 0), p-bar = 1/2; the
    right rollouts retrieved P1, the wrong ones P3: u = +-(3 * 1/2) / (3 + 1) = +-0.375;
    A_out = +-(1/2) / (sqrt(0.3) + 1e-6); a search that brought its passage first gets
    A_out + 0.5 tanh(u), rollout 0's second search (P1 again) and every answer A_out."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = []
    for k in range(6):
        right = k < 3
        actions = [_search(f"query {k}", P1 if right else P3)]
        spans = [[0, 4]]
        if k == 0:  # a second search, then the answer; 5 information tokens after each search
            actions.append(_search("another query", P1))
            spans.append([9, 12])
        actions.append(_answer("Małgorzata Braunek" if right else "Paris"))
        start = spans[-1][1] + 5
        spans.append([start, start + 3])
        length = spans[-1][1]
        mask = torch.zeros(length, dtype=torch.int64)
        for s, e in spans:
            mask[s:e] = 1
        scores = torch.zeros(length)
        scores[-1] = 1.0 if right else 0.0
        rows.append((f"q_{k}_0", actions, spans, mask, scores))
    fields = [
        {"uid": "q", "responses": torch.arange(len(mask)), "response_mask": mask,
         "rm_scores": scores,
         "extra_fields": {"factutil": {"trajectory_id": key[:-2], "actions": actions,
                                       "spans": spans, "question": "Who?",
                                       "golden_answers": ["Małgorzata Braunek"]}}}
        for key, actions, spans, mask, scores in rows
    ]
    meta = tq.kv_batch_put(
        keys=[row[0] for row in rows],
        partition_id="span",
        fields=list_of_dict_to_tensordict(fields),
        tags=[{"status": "success", "seq_len": 8 + len(f["responses"]),
               "response_len": len(f["responses"])} for f in fields],
    )
    trainer = make_trainer(verl_config, "+algorithm.factutil.facts=retrieved",
                           "+algorithm.factutil.score_early=false")
    metrics: dict[str, float] = {}
    trainer._compute_advantage(meta, metrics)

    assert metrics["factutil/groups_fallback"] == 0.0
    a_out = 0.5 / (np.sqrt(0.3) + 1e-6)
    gain = 0.5 * np.tanh(0.375)
    for (key, actions, spans, mask, _), tokens in zip(rows, read_advantages(meta)):
        sign = 1.0 if int(key.split("_")[1]) < 3 else -1.0
        want = [sign * (a_out + gain)] + [sign * a_out] * (len(actions) - 1)
        for (s, e), value in zip(spans, want):
            np.testing.assert_allclose(tokens[s:e].numpy(), value, rtol=0, atol=1e-6)
        assert not tokens[~mask.bool()].any()  # the information tokens carry nothing


def _verl_grpo(rows: Rows) -> torch.Tensor:
    """verl's own GRPO advantages of ``rows`` (B, T), as its advantage step computes them."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    return compute_advantage_for_multi_trajectories(
        DataProto.from_dict(
            tensors={"response_mask": rows.response_mask, "token_level_rewards": rows.rm_scores},
            non_tensors={"uid": np.array(rows.uids, dtype=object)},
        ),
        batch_keys=rows.keys, adv_estimator="grpo", num_repeat=6,
    ).batch["advantages"]


def _count_verl_steps(monkeypatch) -> list:
    """The keys of every batch verl's own advantage step runs on, from now on."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    calls: list = []
    real = PPOTrainerSync._compute_advantage

    def counting(self, batch, metrics):
        calls.append(list(batch.keys))
        return real(self, batch, metrics)

    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", counting)
    return calls


def test_verls_own_step_runs_only_when_a_row_keeps_its_values(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """Every group scored -> verl's advantage step is not run (factutil overwrites every row);
    one group without factutil's fields -> it runs once, and that group's rows get its GRPO
    values while every other row keeps the core's."""

    calls = _count_verl_steps(monkeypatch)
    trainer = make_trainer(verl_config)
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    meta, metrics = put_rows(sample_rows, "train"), {}
    trainer._compute_advantage(meta, metrics)
    assert calls == [] and metrics["factutil/groups_scored"] == 30.0
    _assert_advantages_are_the_cores(meta, sample_rows, expected)

    first = sample_rows.uids[0]
    rows = Rows(**{**sample_rows.__dict__, "extra_fields": [
        {"other_loop": row} if uid == first else extra
        for row, (uid, extra) in enumerate(zip(sample_rows.uids, sample_rows.extra_fields))]})
    meta, metrics = put_rows(rows, "train"), {}
    trainer._compute_advantage(meta, metrics)
    assert calls == [list(meta.keys)] and metrics["factutil/groups_fallback"] == 1.0
    grpo, advantages = _verl_grpo(rows), read_advantages(meta)
    kept = [row for row, uid in enumerate(rows.uids) if uid == first]
    assert kept and any(grpo[row].abs().sum() > 0 for row in kept)
    for row in kept:
        torch.testing.assert_close(advantages[row], grpo[row, : advantages[row].shape[0]].float())
    for record in expected.actions:
        if record.uid != first:
            row = sample_rows.row_of_action[(record.uid, record.rollout_id, record.step)]
            np.testing.assert_allclose(advantages[row].numpy(), record.advantage, rtol=1e-6,
                                       atol=1e-6)


def test_verls_step_runs_first_with_kl_in_the_reward_or_rollout_log_probs(verl_config):
    from transfer_queue import KVBatchMeta

    fields = ["uid", "response_mask", "rm_scores"]
    plain = KVBatchMeta(keys=["a_0_0"], tags=[{}], fields=fields)
    corrected = KVBatchMeta(keys=["a_0_0"], tags=[{}], fields=[*fields, "rollout_log_probs"])
    unknown = KVBatchMeta(keys=["a_0_0"], tags=[{}], fields=None)
    trainer = make_trainer(verl_config)
    assert not trainer._verl_first(plain)
    assert trainer._verl_first(corrected) and trainer._verl_first(unknown)
    assert make_trainer(verl_config, "algorithm.use_kl_in_reward=true")._verl_first(plain)
    bypass = make_trainer(verl_config, "algorithm.rollout_correction.bypass_mode=true")
    assert not bypass._verl_first(corrected)


def test_verls_own_step_writes_only_advantages_and_returns_on_such_a_batch(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """What leaving verl's step out relies on: with no KL in the reward and no rollout log-probs,
    it writes ``advantages`` and ``returns`` (its GRPO) and nothing else, so factutil's write of
    every row leaves nothing of it behind (a verl that writes more fails here)."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    written: list[set] = []
    real_put = tq.kv_batch_put

    def recording_put(*args, **kwargs):
        written.append(set(kwargs["fields"].keys()))
        return real_put(*args, **kwargs)

    trainer = make_trainer(verl_config)
    meta = put_rows(sample_rows, "train")
    assert not trainer._verl_first(meta)
    monkeypatch.setattr(tq, "kv_batch_put", recording_put)
    PPOTrainerSync._compute_advantage(trainer, meta, {})
    assert written == [{"advantages", "returns"}]
    grpo, advantages = _verl_grpo(sample_rows), read_advantages(meta)
    for row, tokens in enumerate(advantages):
        torch.testing.assert_close(tokens, grpo[row, : tokens.shape[0]].float())


def test_with_rollout_log_probs_verls_step_runs_first_and_nothing_of_it_is_lost(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """A batch with rollout log-probs (verl's rollout correction, on by default) -> verl's own
    step runs first, once, and its ``rollout_corr/*`` metrics reach the step's metrics; every
    row still gets the core's advantages (the early score is used: the mask verl writes back is
    the same)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    calls = _count_verl_steps(monkeypatch)
    seen: list = []
    _fake_old_log_prob(monkeypatch, seen)
    trainer = make_trainer(verl_config)
    meta = put_rows(sample_rows, "train")
    lengths = [int(sample_rows.response_mask[row].sum()) for row in range(len(meta.keys))]
    meta = tq.kv_batch_put(keys=meta.keys, partition_id="train", fields=list_of_dict_to_tensordict(
        [{"rollout_log_probs": torch.full((n,), -1.0), "old_log_probs": torch.full((n,), -1.1)}
         for n in lengths]))
    assert trainer._verl_first(meta)
    metrics: dict[str, float] = {}
    meta = trainer._compute_old_log_prob(meta, metrics)
    trainer._compute_advantage(meta, metrics)
    assert calls == [list(meta.keys)] and seen == [True]
    assert any(key.startswith("rollout_corr/") for key in metrics), sorted(metrics)
    assert metrics["factutil/score_early_used"] == 1.0 and metrics["factutil/batch_fallback"] == 0.0
    expected = compute_process_advantages(SAMPLE, FactUtilConfig(mode="exact"))
    _assert_advantages_are_the_cores(meta, sample_rows, expected)


def test_a_rollout_rejected_by_verls_rollout_correction_keeps_its_group_scored(
    transfer_queue, verl_config
):
    """verl's rejection sampling (``rollout_rs=seq_max_k2``, threshold 0.5) zeroes the mask of
    rollout 5 (log-ratio 2 on every token: k2 = 2). Span layout without ``spans`` (a search run
    and an answer run per row): the turns are placed on the mask the loop wrote, then verl's mask
    applies, as verl's GRPO does. By hand (as the span-layout test above): a right search gets
    A_out + 0.5 tanh(0.375), a wrong one -(A_out + 0.5 tanh(0.375)), answers +-A_out with
    A_out = 0.5 / (sqrt(0.3) + 1e-6); rollout 5 gets 0 on every token."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    mask = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1])
    fields = []
    for k in range(6):
        right = k < 3
        fields.append({
            "uid": "rejected", "responses": torch.arange(12), "response_mask": mask.clone(),
            "rm_scores": torch.tensor([0.0] * 11 + [float(right)]),
            "rollout_log_probs": torch.full((12,), -3.0 if k == 5 else -1.0),
            "old_log_probs": torch.full((12,), -1.0),
            "extra_fields": {"factutil": {
                "trajectory_id": f"rejected_{k}", "question": "Who?",
                "golden_answers": ["Małgorzata Braunek"],
                "actions": [_search(f"query {k}", P1 if right else P3),
                            _answer("Małgorzata Braunek" if right else "Paris")]}},
        })
    meta = tq.kv_batch_put(keys=[f"rejected_{k}_0" for k in range(6)], partition_id="rs",
                           fields=list_of_dict_to_tensordict(fields), tags=[{}] * 6)
    trainer = make_trainer(verl_config, "+algorithm.factutil.facts=retrieved",
                           "+algorithm.factutil.score_early=false",
                           "algorithm.rollout_correction.rollout_rs=seq_max_k2",
                           "algorithm.rollout_correction.rollout_rs_threshold=0.5")
    assert trainer._verl_first(meta)
    metrics: dict[str, float] = {}
    trainer._compute_advantage(meta, metrics)

    assert metrics["factutil/groups_fallback"] == 0.0 and metrics["factutil/batch_fallback"] == 0.0
    kept = tq.kv_batch_get(keys=meta.keys, partition_id="rs", select_fields=["response_mask"])
    assert [bool(m.any()) for m in kept["response_mask"].unbind()] == [True] * 5 + [False]
    a_out = 0.5 / (np.sqrt(0.3) + 1e-6)
    search = a_out + 0.5 * np.tanh(0.375)
    for k, tokens in enumerate(read_advantages(meta)):
        sign = 1.0 if k < 3 else -1.0
        want = [sign * search] * 4 + [0.0] * 5 + [sign * a_out] * 3
        np.testing.assert_allclose(tokens.numpy(), [0.0] * 12 if k == 5 else want, atol=1e-6)


def _renamed(rows: Rows, prefix: str) -> Rows:
    """``rows`` under fresh keys and uids (nothing of an earlier test is read back)."""
    return Rows(**{**rows.__dict__, "keys": [prefix + key for key in rows.keys],
                   "uids": [prefix + uid for uid in rows.uids],
                   "row_of_action": {(prefix + uid, rid, step): row
                                     for (uid, rid, step), row in rows.row_of_action.items()}})


def _core_of(rows: Rows, prefix: str, rewards: dict | None = None):
    """The core's advantages of the sample's rollouts, uids under ``prefix`` (:func:`_renamed`);
    ``rewards``: (uid, rollout_id) -> R replaces the computed outcome reward."""
    lines = [{**line, "uid": prefix + line["uid"]} for line in rows.lines]
    if rewards is not None:
        lines = [{**line, "reward": rewards[(line["uid"], line["rollout_id"])]} for line in lines]
    return compute_process_advantages(lines, FactUtilConfig(mode="exact"))


def _put_fields(meta, of_row):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    return tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id,
                           fields=list_of_dict_to_tensordict([of_row(r) for r in range(len(meta))]))


@pytest.mark.parametrize("early", [False, True])
def test_verls_padding_rows_keep_verls_values_and_every_real_row_the_cores(
    transfer_queue, sample_rows, verl_config, monkeypatch, early
):
    """verl's own upsampling (:func:`upsample_batch_to_divisible_size`: copies of the first row,
    extra fields included, under a fresh uid, tagged ``is_padding``) -> the padding rows keep
    verl's GRPO (0: one all-zero group, empty mask) and every real row gets the core's."""
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    _fake_old_log_prob(monkeypatch, [])
    rows = _renamed(sample_rows, f"pad{int(early)}")
    trainer = make_trainer(verl_config, f"+algorithm.factutil.score_early={str(early).lower()}")
    meta = upsample_batch_to_divisible_size(put_rows(rows, "train"), len(rows.keys) + 3, 0)
    padding = [tag.get("is_padding", False) for tag in meta.tags]
    assert padding == [False] * len(rows.keys) + [True] * 3
    metrics: dict[str, float] = {}
    meta = trainer._compute_old_log_prob(meta, metrics)
    trainer._compute_advantage(meta, metrics)
    assert metrics["factutil/batch_fallback"] == 0.0 and metrics["factutil/groups_fallback"] == 0.0
    assert metrics["factutil/score_early_used"] == float(early)
    advantages = read_advantages(meta)
    assert all(not tokens.any() for tokens in advantages[len(rows.keys):])
    _assert_advantages_are_the_cores(meta, rows, _core_of(rows, f"pad{int(early)}"))


def test_kl_in_the_reward_end_to_end_scores_verls_token_level_rewards(
    transfer_queue, sample_rows, verl_config
):
    """``use_kl_in_reward``: verl's step applies the KL penalty first (old - ref log-prob = 0.5 on
    every token, beta = kl_coef = 0.001), and each rollout's outcome reward is its last row's
    score minus 0.001 * 0.5 * that row's length: the core's advantages with those rewards."""
    rows = _renamed(sample_rows, "kl")
    trainer = make_trainer(verl_config, "algorithm.use_kl_in_reward=true",
                           "algorithm.kl_ctrl.kl_coef=0.001")
    lengths = [int(rows.response_mask[row].sum()) for row in range(len(rows.keys))]
    meta = _put_fields(put_rows(rows, "train"), lambda r: {
        "old_log_probs": torch.full((lengths[r],), -1.0),
        "ref_log_prob": torch.full((lengths[r],), -1.5)})
    metrics: dict[str, float] = {}
    trainer._compute_advantage(meta, metrics)
    assert metrics["factutil/batch_fallback"] == 0.0 and "actor/reward_kl_penalty" in metrics
    rewards = {}
    for line in rows.lines:
        uid = "kl" + line["uid"]
        last = rows.row_of_action[(uid, line["rollout_id"], len(line["actions"]) - 1)]
        rewards[(uid, line["rollout_id"])] = (float(rows.rm_scores[last].sum())
                                              - 0.001 * 0.5 * lengths[last])
    expected = _core_of(rows, "kl", rewards)
    plain = _core_of(rows, "kl")
    assert max(abs(a.advantage - b.advantage) for a, b in zip(expected.actions, plain.actions)) > 1e-3
    _assert_advantages_are_the_cores(meta, rows, expected, tol=1e-5)


def test_rows_rejected_by_verls_rollout_correction_get_0_and_verls_weights_are_kept(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """verl's rejection sampling (``seq_max_k2`` 0.5) rejects every 7th row (log-ratio 2) and its
    token IS weights are on: rejected rows get 0, every other row the core's; verl's new mask,
    its ``rollout_is_weights`` and ``rollout_corr/*`` metrics are kept, and the early score (on
    the mask the loop wrote) is used."""
    _fake_old_log_prob(monkeypatch, [])
    rows = _renamed(sample_rows, "rs")
    trainer = make_trainer(verl_config, "algorithm.rollout_correction.rollout_rs=seq_max_k2",
                           "algorithm.rollout_correction.rollout_rs_threshold=0.5",
                           "algorithm.rollout_correction.rollout_is=token")
    lengths = [int(rows.response_mask[row].sum()) for row in range(len(rows.keys))]
    rejected = set(range(0, len(rows.keys), 7))
    meta = _put_fields(put_rows(rows, "train"), lambda r: {
        "rollout_log_probs": torch.full((lengths[r],), -3.0 if r in rejected else -1.0),
        "old_log_probs": torch.full((lengths[r],), -1.0)})
    metrics: dict[str, float] = {}
    meta = trainer._compute_old_log_prob(meta, metrics)
    trainer._compute_advantage(meta, metrics)
    assert metrics["factutil/score_early_used"] == 1.0 and metrics["factutil/batch_fallback"] == 0.0
    assert any(key.startswith("rollout_corr/") for key in metrics)
    kept = tq.kv_batch_get(keys=meta.keys, partition_id="train",
                           select_fields=["response_mask", "rollout_is_weights"])
    assert [bool(m.any()) for m in kept["response_mask"].unbind()] == [
        row not in rejected for row in range(len(rows.keys))]
    advantages = read_advantages(meta)
    for record in _core_of(rows, "rs").actions:
        row = rows.row_of_action[(record.uid, record.rollout_id, record.step)]
        want = 0.0 if row in rejected else record.advantage
        np.testing.assert_allclose(advantages[row].numpy(), want, rtol=1e-6, atol=1e-6)


def test_a_failed_write_after_verls_step_was_left_out_gives_the_whole_batch_verls_grpo(
    transfer_queue, sample_rows, verl_config, monkeypatch
):
    """Every group scored (verl's step left out), then factutil's write fails -> verl's step
    runs and every row has its GRPO values (none unwritten), ``batch_fallback`` 1."""
    rows = _renamed(sample_rows, "put")
    trainer = make_trainer(verl_config)
    meta = put_rows(rows, "train")
    real_put, failed = tq.kv_batch_put, []

    def failing_once(*args, **kwargs):
        if kwargs["fields"].get("advantages", None) is not None and not failed:
            failed.append(True)
            raise RuntimeError("the put failed")
        return real_put(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_put", failing_once)
    metrics: dict[str, float] = {}
    trainer._compute_advantage(meta, metrics)
    assert failed and metrics["factutil/batch_fallback"] == 1.0
    grpo = _verl_grpo(rows)
    for row, tokens in enumerate(read_advantages(meta)):
        torch.testing.assert_close(tokens, grpo[row, : tokens.shape[0]].float())
