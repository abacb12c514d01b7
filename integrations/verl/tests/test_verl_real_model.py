"""The ``factagent`` loop with a real language model, then verl's reward loop and the trainer
mode's advantage step (slow, CPU).

SmolLM2-135M-Instruct (the root conftest's ``smollm2``, loaded once per test run) stands behind
the same ``server_manager.generate`` call the scripted tests use: real tokenizer, real chat
template, sampled text. Two 2Wiki dev questions x 2 rollouts x at most 3 actions search the
bundled corpus through factutil's BM25 server; verl's own reward manager (loaded from
``reward.custom_reward_function.path=pkg://factutil_verl.reward``) scores each trajectory's last
row; verl's GRPO and then :func:`factutil_verl.advantage.compute_factagent_advantages` (the
step ``FactUtilTrainer._compute_advantage`` runs) give every token its advantage. The test holds
for whatever the model writes: invalid actions are real input.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import hydra
import numpy as np
import pytest
import torch
from factutil import FactUtilConfig, compute_process_advantages
from tests.language_models import SHORT_INSTRUCTIONS
from verl.experimental.agent_loop.agent_loop import (
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput
from verl_testkit import REPO

from factutil_verl.advantage import compute_factagent_advantages

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QUESTIONS = REPO / "examples" / "data" / "2wiki_dev_compositional30_evidences.jsonl"
ROLLOUTS = 2


class ModelServer:
    """verl's LLM server client, answered by SmolLM2 (seeded per call, so reruns agree)."""

    def __init__(self, smollm2: Any):
        self.smollm2 = smollm2
        self.calls: list[tuple[list[int], list[int]]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any
    ) -> TokenOutput:
        (ids,) = self.smollm2.generate(
            [list(prompt_ids)], max_new_tokens=sampling_params["max_tokens"], seed=len(self.calls)
        )
        self.calls.append((list(prompt_ids), ids))
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), num_preempted=0)


def dataset_row(question: dict, session: int) -> dict[str, Any]:
    """One dataset row as verl's V1 worker passes it to ``run``."""
    return {
        "raw_prompt": [{"role": "user", "content": question["question"]}],
        "reward_model": {"style": "rule", "ground_truth": {"target": [question["answer"]]}},
        "extra_info": {"question": question["question"]},
        "data_source": "2wiki",
        "uid": question["_id"],
        "session_id": session,
        "index": 0,
    }


def reward_of(manager: Any, outputs: list[Any], row: dict[str, Any]) -> float:
    """The trajectory's reward from verl's reward manager, on the batch verl's agent-loop worker
    builds for it (``_compute_score``): every output's prompt and response, the row's fields."""
    from tensordict import TensorDict
    from verl import DataProto

    pad = torch.nn.utils.rnn.pad_sequence
    prompts = [torch.tensor(o.prompt_ids) for o in outputs]
    responses = [torch.tensor(o.response_ids) for o in outputs]
    masks = [torch.ones(len(p) + len(r), dtype=torch.int64) for p, r in zip(prompts, responses)]
    batch = TensorDict(
        {
            "prompts": pad(prompts, batch_first=True),
            "responses": pad(responses, batch_first=True),
            "attention_mask": pad(masks, batch_first=True),
        },
        batch_size=len(outputs),
    )
    non_tensor = {key: np.array([value] * len(outputs), dtype=object) for key, value in row.items()}
    non_tensor["tool_extra_fields"] = np.array([o.extra_fields for o in outputs], dtype=object)
    data = DataProto(batch=batch, non_tensor_batch=non_tensor)
    result = manager.loop.run_until_complete(manager.run_single(data))  # the manager's own loop
    return float(result["reward_score"])


def test_factagent_loop_with_smollm2_through_verls_reward_and_the_advantage_step(
    smollm2, verl_config, retrieval_url, one_torch_thread
):
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    config = verl_config(
        "actor_rollout_ref.rollout.prompt_length=2048",
        "actor_rollout_ref.rollout.response_length=64",
        "reward.custom_reward_function.path=pkg://factutil_verl.reward",
        "+algorithm.factutil.mode=exact",
    )
    server = ModelServer(smollm2)
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()][
        :2
    ]
    manager = load_reward_manager(config, smollm2.tokenizer)

    async def roll(row: dict[str, Any]) -> list[Any]:
        loop = hydra.utils.instantiate(
            config={**_agent_loop_registry["factagent"]},
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=smollm2.tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
            retriever_url=retrieval_url,
            topk=1,
            max_observation_chars=200,
            max_turns=3,
            max_action_tokens=20,
            instructions=SHORT_INSTRUCTIONS,
        )
        return await loop.run({"temperature": 1.0, "top_p": 1.0}, **row)

    keys, uids, extras, masks, rewards, lines = [], [], [], [], [], []
    for question in questions:
        for session in range(ROLLOUTS):
            row = dataset_row(question, session)
            outputs = asyncio.run(roll(row))
            assert 1 <= len(outputs) <= 3
            reward = reward_of(manager, outputs, row)
            texts = [
                smollm2.tokenizer.decode(o.response_ids, skip_special_tokens=True) for o in outputs
            ]
            for index, output in enumerate(outputs):
                assert (
                    output.response_ids == server.calls[len(keys)][1]
                    or not server.calls[len(keys)][1]
                )
                keys.append(f"{question['_id']}_{session}_{index}")
                uids.append(question["_id"])
                extras.append(output.extra_fields)
                masks.append(output.response_mask)
                rewards.append(reward)
            lines.append(
                {
                    "uid": question["_id"],
                    "question": question["question"],
                    "golden_answers": [question["answer"]],
                    "rollout_id": f"{question['_id']}_{session}",
                    "actions": [{"raw": text} for text in texts],
                }
            )
    # the prompts the model saw are the loop's: its instructions, the question, no history
    for prompt, _ in server.calls:
        text = smollm2.tokenizer.decode(prompt)
        assert text.startswith(f"<|im_start|>system\n{SHORT_INSTRUCTIONS}<|im_end|>")
        assert text.endswith("<|im_start|>assistant\n")

    width = max(len(m) for m in masks)
    response_mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
    scores = torch.zeros(response_mask.shape)
    for row, (mask, reward) in enumerate(zip(masks, rewards)):
        scores[row, len(mask) - 1] = reward
    grpo = compute_advantage_for_multi_trajectories(
        DataProto.from_dict(
            tensors={"response_mask": response_mask, "token_level_rewards": scores},
            non_tensors={"uid": np.array(uids, dtype=object)},
        ),
        batch_keys=keys,
        adv_estimator="grpo",
        num_repeat=ROLLOUTS,
    ).batch["advantages"]
    config_ = FactUtilConfig(mode="exact")
    result = compute_factagent_advantages(
        keys=keys,
        uids=uids,
        extra_fields=extras,
        response_mask=response_mask,
        token_level_rewards=scores,
        grpo_advantages=grpo,
        config=config_,
    )
    assert result.fallback == {}
    assert result.metrics["factutil/groups_scored"] == 2.0
    assert torch.isfinite(result.advantages).all()

    # independently: the core on the texts the model wrote, its own outcome rule (verl's reward
    # manager must have applied the same one), each action's value on that row's tokens
    expected = compute_process_advantages(lines, config_)
    by_action = {(r.rollout_id, r.step): r.advantage for r in expected.actions}
    for row, key in enumerate(keys):
        trajectory, step = key.rsplit("_", 1)
        tokens = result.advantages[row][: len(masks[row])]
        want = torch.tensor(masks[row], dtype=torch.float32) * by_action[(trajectory, int(step))]
        torch.testing.assert_close(tokens, want, rtol=1e-6, atol=1e-6)
    outcome = {r.rollout_id: r.outcome_reward for r in expected.rollouts}
    for key, reward in zip(keys, rewards):
        assert reward == pytest.approx(outcome[key.rsplit("_", 1)[0]])
