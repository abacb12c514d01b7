"""Two TRL training steps of a real language model with factutil's credit, on CPU (slow).

SmolLM2-135M-Instruct (the root conftest's ``smollm2``, loaded once per test run) rolls out
FactAgent episodes on two 2Wiki dev questions x G = 4 through :class:`FactAgentRollout`,
searching the bundled corpus with the real BM25 server, and :class:`FactUtilGRPOTrainer` trains
it for two steps. Whatever the model writes is real input: most of its actions are invalid, and
the test holds for any text. Only the top two decoder layers and the final norm train (a copy
of the model): the loss still runs through all 30 layers, but a CPU backward through two is
what keeps the test within about a minute.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages
from trl_testkit import QUESTIONS, SHORT_INSTRUCTIONS, grpo_args

pytestmark = [pytest.mark.slow, pytest.mark.integration]

OMEGA = 0.5


def questions(count: int) -> list[dict]:
    rows = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()]
    return [{"prompt": r["question"], "golden_answers": [r["answer"]]} for r in rows[:count]]


def trainable_copy(model):
    """A copy whose top two decoder layers and final norm train; every other weight is frozen."""
    model = copy.deepcopy(model)
    model.requires_grad_(False)
    model.model.layers[-2:].requires_grad_(True)
    model.model.norm.requires_grad_(True)
    return model


def test_two_training_steps_of_smollm2_with_factutil_credit(
    smollm2, retrieval_url, tmp_path, one_torch_thread
):
    from datasets import Dataset
    from factutil.tools.retrieval import RetrievalClient

    from factutil_trl import FactAgentRollout, FactUtilGRPOTrainer, factagent_reward

    class Recording(FactUtilGRPOTrainer):
        """Keeps each batch: its rows, TRL's own output and the adapter's advantages; and, on
        the same TRL output, the adapter's result with omega = 0."""

        def _add_process_advantages(self, inputs, output):
            trl_output = dict(output)
            zero = dict(output)
            config = self.factutil_config
            self.factutil_config = FactUtilConfig(**{**config.model_dump(), "omega": 0.0})
            super()._add_process_advantages(inputs, zero)
            self.factutil_config = config
            super()._add_process_advantages(inputs, output)
            self.batches.append(([dict(r) for r in inputs], trl_output, zero, dict(output)))

    model = trainable_copy(smollm2.model)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rollout = FactAgentRollout(
        RetrievalClient(retrieval_url, topk=1, max_observation_chars=200),
        instructions=SHORT_INSTRUCTIONS,
        max_turns=3,
        max_action_tokens=20,
    )
    trainer = Recording(
        model=model,
        reward_funcs=[factagent_reward],
        args=grpo_args(tmp_path, learning_rate=1e-5, max_completion_length=160, temperature=1.0),
        train_dataset=Dataset.from_list(questions(2)),
        processing_class=smollm2.tokenizer,
        rollout_func=rollout,
        # the default semantic mode (the bundled MiniLM) with the paper's raw process term: the
        # penalties of a 135M model's failed turns then move every weight even when all its
        # rollouts fail, where the default's group normalisation (like GRPO) gives them 0
        factutil_config={"omega": OMEGA, "process_norm": "none"},
    )
    trainer.batches = []
    trainer.train()

    # it trained: every trainable tensor moved, the loss is finite, the credit was logged
    after = dict(model.named_parameters())
    assert all(not torch.equal(after[n], p) for n, p in before.items())
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert len(logged) == 2 and all(np.isfinite(e["loss"]) for e in logged)
    assert all(e["factutil/groups"] == 2.0 and e["factutil/batch_fallback"] == 0.0 for e in logged)
    assert len(trainer.batches) == 2

    tokenizer = smollm2.tokenizer
    config = FactUtilConfig(omega=OMEGA, process_norm="none")
    for rows, trl_output, zero, ours in trainer.batches:
        trl_advantages = trl_output["advantages"]
        completions = ours["completion_ids"]
        loss_mask = ours["completion_mask"] * ours["tool_mask"]
        # omega = 0: TRL's advantage on every token, hence TRL's loss bit for bit
        width = completions.shape[1]
        assert torch.equal(zero["advantages"], trl_advantages[:, None].expand(-1, width))
        # every token: TRL's A_out + omega * A_proc of its action, the core run on the texts
        lines = []
        for i, row in enumerate(rows):
            texts = [
                tokenizer.decode(completions[i, s:e].tolist(), skip_special_tokens=True)
                for s, e in row["factutil"]["spans"]
            ]
            lines.append(
                {
                    "uid": str(i // 4),
                    "question": row["prompt"],
                    "golden_answers": row["golden_answers"],
                    "rollout_id": str(i),
                    "actions": [{"raw": text} for text in texts],
                }
            )
        process = compute_process_advantages(lines, config).per_rollout("process_advantage")
        for i, row in enumerate(rows):
            want = np.full(width, float(trl_advantages[i]), dtype=np.float32)
            values = process[(str(i // 4), str(i))]
            for (start, end), value in zip(row["factutil"]["spans"], values):
                for t in range(start, end):
                    if loss_mask[i, t]:
                        want[t] = np.float32(trl_advantages[i]) + np.float32(OMEGA * value)
            np.testing.assert_allclose(ours["advantages"][i].numpy(), want, rtol=1e-6, atol=1e-7)
            assert loss_mask[i].sum() > 0

    # omega = 0 gives TRL's own loss exactly, on one group of the first batch
    rows, trl_output, zero, _ = trainer.batches[0]
    group = slice(0, 4)

    def part(output):
        return {
            k: v[group] if isinstance(v, torch.Tensor) and v.dim() > 0 else v
            for k, v in output.items()
        }

    with torch.no_grad():
        trl_loss = trainer.compute_loss(trainer.model, part(trl_output))
        zero_loss = trainer.compute_loss(trainer.model, part(zero))
    assert torch.isfinite(trl_loss) and torch.equal(trl_loss, zero_loss)
