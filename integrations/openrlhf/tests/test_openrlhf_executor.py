"""make_executor on OpenRLHF's real MultiTurnAgentExecutor: spans, parsed actions, rewards."""

from __future__ import annotations

import asyncio
import json

import pytest
from openrlhf_testkit import (
    ScriptedEngine,
    ToyTokenizer,
    _SamplingParams,
    action_text,
    load_sample,
    make_instance_cls,
    run_episode,
    run_groups,
)


@pytest.fixture(scope="module")
def executor_cls(openrlhf):
    from factutil_openrlhf import make_executor

    return make_executor(make_instance_cls())


SCRIPTED = {
    "uid": "q1",
    "question": "Who directed Polish-Russian War?",
    "golden_answers": ["Xawery Żuławski"],
    "rollout_id": "q1-0",
    "actions": [
        {"action": "search", "query": "Polish-Russian War director", "observation": "Doc 1 (Title: Wojna) directed by Xawery Żuławski."},
        {"raw": "I will store it.\n<assert>Polish-Russian War | director | Xawery Żuławski</assert>"},
        {"raw": "{\"action\": \"lookup\"}"},
        {"action": "answer", "answer": "Xawery Żuławski"},
    ],
}


def test_spans_match_action_ranges_on_a_scripted_episode(executor_cls, openrlhf):
    tokenizer = ToyTokenizer()
    response, engine = asyncio.run(run_episode(executor_cls(), SCRIPTED, tokenizer, max_length=4096))
    payload = response["factutil"]
    assert isinstance(executor_cls(), openrlhf.agent.MultiTurnAgentExecutor)
    assert payload["spans"] == [list(r) for r in response["action_ranges"]]
    assert payload["spans"] == [[start, end] for start, end, _ in engine.log]
    assert len(payload["spans"]) == 4
    # Each span holds exactly the tokens of the text the engine generated.
    tokens = response["observation_tokens"]
    for (start, end), (_, _, text) in zip(payload["spans"], engine.log):
        assert tokenizer.decode(tokens[start:end]) == text
    assert [a["action"] for a in payload["actions"]] == ["search", "assert", "invalid", "answer"]
    assert payload["actions"][1]["triples"] == [["Polish-Russian War", "director", "Xawery Żuławski"]]
    assert payload["actions"][2]["reason"].startswith("unknown action")
    assert payload["done"] is True
    assert response["reward"] == pytest.approx(1.0)
    json.dumps(payload)  # plain data: crosses Ray by pickle, logs by JSON


def test_reward_final_keeps_only_the_done_step_and_sum_keeps_openrlhf(openrlhf):
    import torch
    from factutil_openrlhf import make_executor

    class Stepper(openrlhf.agent.AgentInstanceBase):
        def __init__(self):
            self.turn = 0

        async def step(self, state_dict, **kwargs):
            self.turn += 1
            done = self.turn == 3
            return {"rewards": torch.tensor(0.25 if not done else 1.0), "environment_feedback": "\nok\n", "done": done}

    texts = ['{"action": "search", "query": "a"}', '{"action": "search", "query": "b"}', '{"action": "answer", "answer": "c"}']
    for mode, expected in (("final", 1.0), ("sum", 1.5)):
        executor = make_executor(Stepper, reward=mode)()
        tokenizer = ToyTokenizer()
        response = asyncio.run(
            executor.execute("Q: ?\n", "c", _SamplingParams(), 512, tokenizer, ScriptedEngine(texts, tokenizer))
        )
        assert response["reward"] == pytest.approx(expected)
        assert response["factutil"]["step_rewards"] == [0.25, 0.25, 1.0]


def test_concurrent_episodes_never_mix(executor_cls):
    groups = load_sample(limit_groups=2)
    tokenizer = ToyTokenizer()
    results = run_groups(executor_cls(), groups, tokenizer, max_length=100_000)
    for (response, engine), rollout in zip(results, [r for g in groups for r in g]):
        payload = response["factutil"]
        assert payload["spans"] == [list(r) for r in response["action_ranges"]]
        emitted = [text for _, _, text in engine.log]
        assert emitted == [action_text(item) for item in rollout["actions"]][: len(emitted)]
        for (start, end), text in zip(payload["spans"], emitted):
            assert tokenizer.decode(response["observation_tokens"][start:end]) == text


def test_budget_cut_action_keeps_its_generated_tokens(executor_cls):
    tokenizer = ToyTokenizer()
    prompt_tokens = len(tokenizer.encode("Answer with JSON actions: search, assert facts, answer.\nQuestion: Who directed Polish-Russian War?\n"))
    response, _ = asyncio.run(run_episode(executor_cls(), SCRIPTED, tokenizer, max_length=prompt_tokens + 3))
    payload = response["factutil"]
    assert response["truncated"] is True
    assert payload["spans"] == [[prompt_tokens, prompt_tokens + 3]]
    assert payload["actions"][0]["action"] == "invalid"  # the cut JSON does not parse


def test_make_executor_rejects_a_non_instance_class(openrlhf):
    from factutil_openrlhf import make_executor

    with pytest.raises(TypeError, match="AgentInstanceBase"):
        make_executor(dict)
    with pytest.raises(ValueError, match="reward"):
        make_executor(make_instance_cls(), reward="mean")


def test_payload_reports_spans_that_disagree_with_action_ranges():
    from factutil_openrlhf.executor import _Episode

    episode = _Episode()
    episode.spans = [[3, 5]]
    episode.actions = [{"action": "answer", "answer": "x"}]
    assert "differ" in episode.payload([(3, 6)])["error"]
    assert episode.payload([(3, 5)])["spans"] == [[3, 5]]
