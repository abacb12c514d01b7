"""FactUtilGRPOTrainer on TRL 1.16's real GRPOTrainer (CPU): a tiny seeded Llama over the byte
tokenizer (ChatML template), episodes that write the bundled 2Wiki sample's actions (real texts)
through FactAgentRollout, and the real BM25 retriever over the bundled corpus.

The expected advantages are built without the adapter: the core scores the texts the policy
wrote (``{"raw": ...}`` items), and each value is placed on the tokens that decode to that text.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages
from trl_testkit import SHORT_INSTRUCTIONS, ScriptedPolicy, grpo_args, sample_groups, tiny_model

trl = pytest.importorskip("trl")

OMEGA = 0.5
EXACT = {"mode": "exact"}  # fast; the real-model test runs the default semantic mode


def dataset(groups: list[dict[str, Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": g["question"], "golden_answers": g["golden_answers"]} for g in groups]
    )


def rollout(tokenizer: Any, url: str, groups: list[dict[str, Any]], **options: Any) -> Any:
    from factutil.tools.retrieval import RetrievalClient

    from factutil_trl import FactAgentRollout

    policy = ScriptedPolicy(tokenizer, groups)
    settings = {"instructions": SHORT_INSTRUCTIONS, "max_turns": 8, "max_action_tokens": 256}
    settings.update(options)
    return FactAgentRollout(
        RetrievalClient(url, topk=1, max_observation_chars=80), generate=policy, **settings
    )


class Recording:
    """Mixin: keeps each batch's rows, TRL's own advantages and the adapter's output."""

    def _add_process_advantages(self, inputs, output):
        self.trl_advantages = getattr(self, "trl_advantages", []) + [output["advantages"].clone()]
        self.rows = getattr(self, "rows", []) + [[dict(row) for row in inputs]]
        super()._add_process_advantages(inputs, output)
        self.outputs = getattr(self, "outputs", []) + [dict(output)]


def make_trainer(cls, tokenizer, url, tmp_path, groups, factutil_config=None, seed=0, **args):
    from factutil_trl import factagent_reward

    kwargs = {} if factutil_config is None else {"factutil_config": factutil_config}
    return cls(
        model=tiny_model(tokenizer, seed),
        reward_funcs=[factagent_reward],
        args=grpo_args(tmp_path, **args),
        train_dataset=dataset(groups),
        processing_class=tokenizer,
        rollout_func=rollout(tokenizer, url, groups),
        **kwargs,
    )


@pytest.fixture(scope="module")
def groups() -> list[dict[str, Any]]:
    return sample_groups(groups=2, rollouts=4)


@pytest.fixture(scope="module")
def trained(byte_tokenizer, retrieval_url, tmp_path_factory, groups):
    """Two steps with omega = 0.5, every batch recorded."""
    from factutil_trl import FactUtilGRPOTrainer

    cls = type("RecordingTrainer", (Recording, FactUtilGRPOTrainer), {})
    trainer = make_trainer(
        cls,
        byte_tokenizer,
        retrieval_url,
        tmp_path_factory.mktemp("trl"),
        groups,
        factutil_config={**EXACT, "omega": OMEGA},
    )
    trainer.train()
    return trainer


def reference(
    trainer, step: int, config: FactUtilConfig
) -> dict[int, list[tuple[int, int, float]]]:
    """Per row of the batch: (start, end, omega * A_proc) of each action, from the core run on
    the texts the policy wrote; the token range is found by decoding the completion."""
    tokenizer = trainer.processing_class
    rows, output = trainer.rows[step], trainer.outputs[step]
    size = trainer.num_generations
    lines, where = [], []
    for i, row in enumerate(rows):
        completion = output["completion_ids"][i].tolist()
        items, spans = [], []
        for start, end in row["factutil"]["spans"]:
            items.append({"raw": tokenizer.decode(completion[start:end], skip_special_tokens=True)})
            spans.append((start, end))
        lines.append(
            {
                "uid": f"g{i // size}",
                "question": row["prompt"],
                "golden_answers": row["golden_answers"],
                "rollout_id": f"r{i}",
                "actions": items,
            }
        )
        where.append(spans)
    result = compute_process_advantages(lines, config)
    process = result.per_rollout("process_advantage")
    return {
        i: [
            (s, e, config.omega * float(v))
            for (s, e), v in zip(where[i], process[(f"g{i // size}", f"r{i}")])
        ]
        for i in range(len(rows))
    }


def test_every_token_gets_trl_outcome_plus_omega_times_its_actions_process_advantage(trained):
    config = FactUtilConfig(**EXACT, omega=OMEGA)
    assert len(trained.outputs) == 2
    for step, output in enumerate(trained.outputs):
        advantages = output["advantages"]
        trl_advantages = trained.trl_advantages[step]
        rows, width = output["completion_ids"].shape
        assert advantages.shape == (rows, width) and torch.isfinite(advantages).all()
        loss_mask = output["completion_mask"] * output["tool_mask"]
        expected = reference(trained, step, config)
        for i in range(rows):
            want = np.full(width, float(trl_advantages[i]), dtype=np.float32)
            for start, end, term in expected[i]:
                for t in range(start, end):
                    if loss_mask[i, t]:
                        want[t] = np.float32(trl_advantages[i]) + np.float32(term)
            np.testing.assert_allclose(advantages[i].numpy(), want, rtol=1e-6, atol=1e-7)
        # the process term is not zero everywhere: the sample's actions earn credit
        assert (advantages - trl_advantages[:, None]).abs().max() > 0.01


def test_each_group_is_the_rows_trl_normalised_together(trained):
    """TRL's A_out equals the core's outcome advantage of the same grouping (its eps, 1e-4)."""
    config = FactUtilConfig(**EXACT, omega=OMEGA, norm_eps=1e-4)
    for step, rows in enumerate(trained.rows):
        size = trained.num_generations
        lines = [
            {
                "uid": f"g{i // size}",
                "question": row["prompt"],
                "golden_answers": row["golden_answers"],
                "rollout_id": f"r{i}",
                "actions": [
                    {
                        "raw": trained.processing_class.decode(
                            trained.outputs[step]["completion_ids"][i, s:e].tolist(),
                            skip_special_tokens=True,
                        )
                    }
                    for s, e in row["factutil"]["spans"]
                ],
            }
            for i, row in enumerate(rows)
        ]
        result = compute_process_advantages(lines, config)
        outcome = {
            key: float(values[0]) for key, values in result.per_rollout("outcome_advantage").items()
        }
        want = [outcome[(f"g{i // size}", f"r{i}")] for i in range(len(rows))]
        np.testing.assert_allclose(trained.trl_advantages[step].numpy(), want, rtol=1e-4, atol=1e-5)
        assert np.ptp(want) > 0  # the sample's rollouts differ in outcome


def test_metrics_reach_trls_logs(trained):
    logged = [entry for entry in trained.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        assert np.isfinite(entry["loss"])
        assert entry["factutil/groups"] == 2.0 and entry["factutil/groups_scored"] == 2.0
        assert entry["factutil/groups_fallback"] == 0.0 and entry["factutil/batch_fallback"] == 0.0
        assert entry["factutil/actions"] > 8 and entry["factutil/clusters"] > 0
    assert trained.factutil_result is not None and len(trained.factutil_result.rollout_keys) == 8


def test_omega_zero_trains_exactly_like_trl(byte_tokenizer, retrieval_url, tmp_path, groups):
    from trl import GRPOTrainer

    from factutil_trl import FactUtilGRPOTrainer

    # Each trainer is built (TRL seeds the global generator there) right before it trains: TRL
    # shuffles each batch's rows with that generator, and the row order changes float sums.
    ours = make_trainer(
        FactUtilGRPOTrainer,
        byte_tokenizer,
        retrieval_url,
        tmp_path / "ours",
        groups,
        factutil_config={**EXACT, "omega": 0.0},
    )
    ours.train()
    plain = make_trainer(GRPOTrainer, byte_tokenizer, retrieval_url, tmp_path / "trl", groups)
    plain.train()
    trained = dict(ours.model.named_parameters())
    for name, parameter in plain.model.named_parameters():
        assert torch.equal(parameter, trained[name]), name
    assert [e["loss"] for e in ours.state.log_history if "loss" in e] == [
        e["loss"] for e in plain.state.log_history if "loss" in e
    ]
    initial = dict(tiny_model(byte_tokenizer, 0).named_parameters())
    assert any(not torch.equal(p, initial[n]) for n, p in trained.items())  # it did train


class DropPayload:
    """Mixin: the rows of the first question lose their payload before the adapter runs."""

    def _add_process_advantages(self, inputs, output):
        first = inputs[0]["prompt"]
        for row in inputs:
            if row["prompt"] == first:
                row.pop("factutil")
        self.trl_advantages = output["advantages"].clone()
        self.first = first
        super()._add_process_advantages(inputs, output)
        self.output = dict(output)
        self.inputs = inputs


def test_a_group_that_cannot_be_scored_keeps_trls_advantage_with_a_metric_and_one_warning(
    byte_tokenizer, retrieval_url, tmp_path, groups, caplog
):
    from factutil_trl import FactUtilGRPOTrainer

    cls = type("DropTrainer", (DropPayload, FactUtilGRPOTrainer), {})
    trainer = make_trainer(
        cls,
        byte_tokenizer,
        retrieval_url,
        tmp_path,
        groups,
        factutil_config={**EXACT, "omega": OMEGA},
        max_steps=1,
    )
    with caplog.at_level(logging.WARNING, logger="factutil_trl"):
        trainer.train()
    advantages = trainer.output["advantages"]
    dropped = [i for i, row in enumerate(trainer.inputs) if row["prompt"] == trainer.first]
    kept = [i for i in range(len(trainer.inputs)) if i not in dropped]
    assert len(dropped) == 4
    for i in dropped:
        assert torch.equal(advantages[i], trainer.trl_advantages[i].expand(advantages.shape[1]))
    assert any(
        not torch.equal(advantages[i], trainer.trl_advantages[i].expand(advantages.shape[1]))
        for i in kept
    )
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    assert entry["factutil/groups_fallback"] == 1.0 and entry["factutil/groups_scored"] == 1.0
    warnings = [
        r for r in caplog.records if r.name == "factutil_trl" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1 and "no 'factutil' payload" in warnings[0].getMessage()


def test_a_failing_step_keeps_trls_advantages_for_the_batch(
    byte_tokenizer, retrieval_url, tmp_path, groups, monkeypatch
):
    import factutil.api

    from factutil_trl import FactUtilGRPOTrainer

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(factutil.api, "compute_process_advantages", broken)
    cls = type("RecordingTrainer", (Recording, FactUtilGRPOTrainer), {})
    trainer = make_trainer(
        cls,
        byte_tokenizer,
        retrieval_url,
        tmp_path,
        groups,
        factutil_config={**EXACT, "omega": OMEGA},
        max_steps=1,
    )
    trainer.train()
    assert torch.equal(trainer.outputs[0]["advantages"], trainer.trl_advantages[0])
    entry = next(e for e in trainer.state.log_history if "loss" in e)
    assert entry["factutil/batch_fallback"] == 1.0 and np.isfinite(entry["loss"])
    assert trainer.factutil_result is None


def test_report_every_writes_the_steps_report_into_the_output_dir(
    byte_tokenizer, retrieval_url, tmp_path, groups
):
    from factutil_trl import FactUtilGRPOTrainer

    trainer = make_trainer(
        FactUtilGRPOTrainer,
        byte_tokenizer,
        retrieval_url,
        tmp_path,
        groups,
        factutil_config={**EXACT, "report_every": 2},
    )
    trainer.train()
    assert trainer.factutil_step.reports.wait(timeout=120)
    reports = sorted(p.name for p in (tmp_path / "factutil_reports").iterdir())
    assert reports == ["step_000002.html"]
    page = (tmp_path / "factutil_reports" / "step_000002.html").read_text(encoding="utf-8")
    assert "training step 2" in page and groups[0]["question"] in page


def test_a_bad_config_fails_before_trl_builds_anything():
    from factutil.config import ConfigError

    from factutil_trl import FactUtilGRPOTrainer

    with pytest.raises(ConfigError, match="config: omega: "):
        FactUtilGRPOTrainer(model=None, factutil_config={"omega": -1.0})
    with pytest.raises(ConfigError, match="omegaa"):
        FactUtilGRPOTrainer(model=None, factutil_config={"omegaa": 1.0})


def test_gold_answers_in_an_answer_column_train_as_under_golden_answers(
    byte_tokenizer, retrieval_url, tmp_path, groups
):
    """A dataset whose gold answers are its ``answer`` column (HotpotQA's, NQ's) is scored, every
    group, and trains exactly as the same data under ``golden_answers``: the reward function and
    the trainer read the first gold column of ``factutil.metrics.GOLD_KEYS``."""
    from datasets import Dataset

    from factutil_trl import FactUtilGRPOTrainer

    cls = type("RecordingTrainer", (Recording, FactUtilGRPOTrainer), {})
    runs = []
    for column in ("golden_answers", "answer"):
        trainer = make_trainer(cls, byte_tokenizer, retrieval_url, tmp_path / column, groups,
                               factutil_config={**EXACT, "omega": OMEGA}, max_steps=1)
        trainer.train_dataset = Dataset.from_list(
            [{"prompt": g["question"], column: g["golden_answers"]} for g in groups])
        trainer.train()
        runs.append(trainer)
    assert "answer" in runs[1].rows[0][0] and "golden_answers" not in runs[1].rows[0][0]
    entry = next(e for e in runs[1].state.log_history if "loss" in e)
    assert entry["factutil/groups_scored"] == 2.0 and entry["factutil/groups_fallback"] == 0.0
    assert torch.equal(runs[0].outputs[0]["advantages"], runs[1].outputs[0]["advantages"])
    assert runs[1].outputs[0]["advantages"].abs().sum() > 0


def test_a_group_split_over_processes_falls_back_whole_when_a_remote_row_misfits(monkeypatch):
    """Process 0 of 2 holds rows 0-1 of the one group of 4; row 3, on process 1, has a span on
    environment tokens only. Every process must drop the whole group: rows 0-1 keep TRL's A_out
    (0.5, -0.5 on every token), not A_out + omega * A_proc while process 1 keeps TRL's."""
    from types import SimpleNamespace

    from factutil.integration import TrainerStep

    import factutil_trl.trainer as trainer_module

    def payload(answer):
        return {"factutil": {"question": "q?", "spans": [[0, 2], [2, 4]], "actions": [
            {"action": "assert", "triples": [["France", "capital", answer]]},
            {"action": "answer", "answer": answer}]}, "golden_answers": ["Paris"]}

    remote = iter([[payload("Lyon")["factutil"]] * 2, [["Paris"]] * 2,
                   [None, "span [2, 4) holds no token the model wrote (env_mask 0)"]])
    monkeypatch.setattr(trainer_module, "gather_object", lambda local: local + next(remote))
    config = FactUtilConfig(omega=OMEGA, **EXACT)
    fake = SimpleNamespace(
        factutil_config=config, factutil_step=TrainerStep(config),
        _factutil_rewards=torch.tensor([[1.0], [0.0], [0.0], [0.0]]),
        reward_weights=torch.tensor([1.0]), num_generations=4,
        accelerator=SimpleNamespace(process_index=0))
    output = {"advantages": torch.tensor([0.5, -0.5]), "completion_mask": torch.ones(2, 4),
              "tool_mask": torch.ones(2, 4)}
    advantages, batch = trainer_module.FactUtilGRPOTrainer._factutil_advantages(
        fake, [payload("Paris"), payload("Lyon")], output, "train")
    assert batch.fallback == {0: "row 3: span [2, 4) holds no token the model wrote (env_mask 0)"}
    assert advantages.tolist() == [[0.5] * 4, [-0.5] * 4]
