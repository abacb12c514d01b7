"""The OpenRLHF executor with a real language model, then the patched advantage step (slow, CPU).

SmolLM2-135M-Instruct (the root conftest's ``smollm2``, loaded once per test run) answers as
OpenRLHF's LLM engine: real tokenizer, real chat template, sampled text, at most 20 tokens per
action (``finish_reason="length"`` when cut, as vLLM reports it). The agent is the example agent
file, loaded by OpenRLHF's own loader, searching the bundled corpus through factutil's BM25 server;
two 2Wiki dev questions x 2 samples x at most 3 actions. The responses become Experiences through
OpenRLHF's own (patched) code, and the patched ``compute_advantages_and_returns`` adds
omega * A_proc on each action's tokens. The test holds for whatever the model writes.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from openrlhf_testkit import _SamplingParams, make_args

from factutil import FactUtilConfig, compute_process_advantages
from tests.language_models import SHORT_INSTRUCTIONS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
AGENT_FILE = ROOT / "examples" / "openrlhf" / "factagent_agent.py"
QUESTIONS = ROOT / "examples" / "data" / "2wiki_dev_compositional30_evidences.jsonl"
ACTION_TOKENS = 20
MAX_LENGTH = 1024
SAMPLES = 2


class ModelEngine:
    """OpenRLHF's ``llm_engine``, answered by SmolLM2 (seeded per call, so reruns agree)."""

    def __init__(self, smollm2: Any):
        self.smollm2 = smollm2
        self.log: list[tuple[int, int, str]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        budget = min(ACTION_TOKENS, sampling_params.max_tokens)
        (ids,) = self.smollm2.generate([list(prompt_token_ids)], budget, seed=len(self.log))
        eos = self.smollm2.tokenizer.eos_token_id
        text = self.smollm2.tokenizer.decode(ids, skip_special_tokens=True)
        start = len(prompt_token_ids)
        self.log.append((start, start + len(ids), text))
        finish = "stop" if ids and ids[-1] == eos else "length"
        output = SimpleNamespace(token_ids=ids, text=text, finish_reason=finish, logprobs=None)
        return SimpleNamespace(outputs=[output])


def test_executor_with_smollm2_then_the_patched_advantages(
    openrlhf, smollm2, retrieval_url, monkeypatch, one_torch_thread
):
    from factutil_openrlhf import patch
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    monkeypatch.setenv("FACTAGENT_RETRIEVER_URL", retrieval_url)
    monkeypatch.setenv("FACTAGENT_TOPK", "1")
    monkeypatch.setenv("FACTAGENT_TURN_FORMAT", "chatml")
    monkeypatch.setenv("FACTUTIL_MAX_TURNS", "3")
    executor = _load_agent_executor(str(AGENT_FILE))  # OpenRLHF's own loader
    tokenizer = smollm2.tokenizer
    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()][
        :2
    ]

    episodes = []
    for question in questions:
        prompt = tokenizer.apply_chat_template(
            [
                {"role": "system", "content": SHORT_INSTRUCTIONS},
                {"role": "user", "content": question["question"]},
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        for _ in range(SAMPLES):
            engine = ModelEngine(smollm2)
            response = asyncio.run(
                executor.execute(
                    prompt,
                    json.dumps([question["answer"]]),
                    _SamplingParams(),
                    MAX_LENGTH,
                    tokenizer,
                    engine,
                )
            )
            episodes.append((question, prompt, response, engine))

    lines = []
    for index, (question, prompt, response, engine) in enumerate(episodes):
        payload = response["factutil"]
        assert 1 <= len(engine.log) <= 3
        assert payload["spans"] == [list(r) for r in response["action_ranges"]]
        assert payload["spans"] == [[start, end] for start, end, _ in engine.log]
        for (start, end), (_, _, text) in zip(payload["spans"], engine.log):
            decoded = tokenizer.decode(
                response["observation_tokens"][start:end], skip_special_tokens=True
            )
            assert decoded == text
        assert len(payload["actions"]) == len(engine.log)
        lines.append(
            {
                "uid": str(index // SAMPLES),
                "question": prompt,
                "golden_answers": [question["answer"]],
                "rollout_id": str(index),
                "actions": [{"raw": text} for _, _, text in engine.log],
            }
        )

    # OpenRLHF's Experiences (its own patched code), then its advantages and factutil's term
    config = FactUtilConfig(omega=0.5, mode="exact")
    patch.configure(config)
    args = make_args(n=SAMPLES, micro_batch_size=4)
    maker = openrlhf.experience_maker.RemoteExperienceMaker(
        None, None, None, None, SimpleNamespace(value=0.0), SimpleNamespace(args=args), tokenizer
    )
    generator = openrlhf.samples_generator.SamplesGenerator.__new__(
        openrlhf.samples_generator.SamplesGenerator
    )
    samples = [
        generator._process_response_into_experience(response, max_len=MAX_LENGTH)
        for _, _, response, _ in episodes
    ]
    batches = maker.split_rollout_samples(samples)
    for batch in batches:
        batch.kl = torch.zeros_like(batch.action_mask, dtype=torch.float32)
        batch.values = torch.zeros_like(batch.action_mask, dtype=torch.float32)
    plain = copy.deepcopy(batches)
    for batch in plain:
        batch.info.pop("factutil")
    original = getattr(
        openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns,
        patch.PATCHED,
    )
    plain = original(maker, plain)
    patched = maker.compute_advantages_and_returns(batches)

    process = compute_process_advantages(lines, config).per_rollout("process_advantage")
    rows = 0
    for before, after in zip(plain, patched):
        assert torch.isfinite(after.advantages).all()
        for row, index in enumerate(after.index):
            rows += 1
            assert after.info["factutil/skipped"][row] == 0
            width = after.advantages.shape[1]
            delta = np.zeros(width, dtype=np.float32)
            spans = episodes[index][2]["action_ranges"]
            values = process[(str(index // SAMPLES), str(index))]
            for (start, end), value in zip(spans, values):
                for position in range(max(start, 1), min(end, width + 1)):
                    if after.action_mask[row, position - 1]:
                        delta[position - 1] = np.float32(config.omega * value)
            expected = before.advantages[row] + torch.from_numpy(delta)
            torch.testing.assert_close(after.advantages[row], expected, rtol=0, atol=0)
    assert rows == len(episodes)
