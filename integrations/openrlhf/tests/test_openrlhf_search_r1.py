"""factutil_openrlhf.search_r1 on OpenRLHF's real MultiTurnAgentExecutor: a Search-R1-style
episode (scripted engine, toy tokenizer, the real BM25 retriever over the bundled corpus), its
payload's searches carrying what they retrieved, and their credit under facts="retrieved"."""

from __future__ import annotations

import asyncio
import json

import pytest
from openrlhf_testkit import ScriptedEngine, ToyTokenizer, _SamplingParams

from factutil import FactUtilConfig, compute_process_advantages
from factutil.tools.retrieval import RetrievalClient

QUESTION = "Who directed the film Polish-Russian War?"
GOLD = "Xawery Żuławski"
GOOD = "Polish-Russian War director"
BAD = "capital of France"
NOTICE = (
    "My previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again."
)


@pytest.fixture()
def agent(openrlhf, retrieval_url, monkeypatch):
    monkeypatch.setenv("FACTUTIL_RETRIEVAL_URL", retrieval_url)
    monkeypatch.setenv("FACTUTIL_RETRIEVAL_TOPK", "2")
    import factutil_openrlhf.search_r1 as agent

    return agent


class Recording(ScriptedEngine):
    def __init__(self, texts, tokenizer):
        super().__init__(texts, tokenizer)
        self.params = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.params.append(sampling_params)
        return await super().generate(prompt_token_ids, sampling_params, multi_modal_data)


LABEL = json.dumps([GOLD], ensure_ascii=False)


def episode(agent, texts, label=LABEL):
    tokenizer = ToyTokenizer()
    engine = Recording(texts, tokenizer)
    params = _SamplingParams(max_tokens=None, logprobs=None)
    response = asyncio.run(agent.AgentExecutor().execute(
        prompt=f"Answer with <search> and <answer>. Question: {QUESTION}\n",
        label=label, sampling_params=params, max_length=4096,
        hf_tokenizer=tokenizer, llm_engine=engine))
    assert not hasattr(params, "stop")  # the caller's parameters are left as they were
    return response, engine, tokenizer


def test_an_episode_searches_reads_the_passages_and_answers(agent, retrieval_url):
    response, engine, tokenizer = episode(agent, [f"<search>{GOOD}</search>",
                                                  f"<answer>{GOLD}</answer>"])
    observation = RetrievalClient(retrieval_url, topk=2).search(GOOD).observation
    assert all(p.stop == ["</search>", "</answer>"] and p.include_stop_str_in_output
               for p in engine.params)
    text = tokenizer.decode(response["observation_tokens"])
    assert text.endswith(f"<search>{GOOD}</search>\n\n<information>{observation}</information>"
                         f"\n\n<answer>{GOLD}</answer>")
    payload = response["factutil"]
    assert [a["action"] for a in payload["actions"]] == ["search", "answer"]
    assert payload["actions"][0]["observation"] == observation
    assert payload["spans"] == [list(r) for r in response["action_ranges"]]
    assert response["reward"] == pytest.approx(1.0) and payload["done"] is True


def test_a_turn_with_no_search_or_answer_gets_the_notice_and_the_episode_goes_on(agent, monkeypatch):
    """Search-R1's rule, as every adapter applies it: a refused tag or no tag at all gets the
    invalid-action notice (bare, as Search-R1 writes it) and another turn; the turn limit ends an
    episode that never answers, with reward 0."""
    response, _, tokenizer = episode(agent, ["<search></search>", "I am not sure.",
                                             f"<answer>{GOLD}</answer>"])
    text = tokenizer.decode(response["observation_tokens"])
    assert f"<search></search>\n{NOTICE}\nI am not sure.\n{NOTICE}\n<answer>" in text
    assert [a["action"] for a in response["factutil"]["actions"]] == ["invalid", "invalid", "answer"]
    assert response["reward"] == pytest.approx(1.0)
    monkeypatch.setenv("FACTUTIL_MAX_TURNS", "2")
    response, _, _ = episode(agent, ["I am not sure.", "Still not.", f"<answer>{GOLD}</answer>"])
    assert [a["action"] for a in response["factutil"]["actions"]] == ["invalid", "invalid"]
    assert response["reward"] == 0.0 and response["factutil"]["done"] is True


def test_a_search_that_fails_carries_no_observation(agent, monkeypatch):
    monkeypatch.setenv("FACTUTIL_RETRIEVAL_URL", "http://127.0.0.1:9/retrieve")  # nothing there
    response, _, tokenizer = episode(agent, [f"<search>{GOOD}</search>", "<answer>x</answer>"])
    assert "<information>Search failed" in tokenizer.decode(response["observation_tokens"])
    assert response["factutil"]["actions"][0].get("observation") is None


def test_search_r1_data_labels_score_and_a_label_without_gold_is_named(agent):
    """Search-R1's parquet gives its gold in reward_model (``--data.label_key reward_model``);
    a label holding no answer stops the episode at its start, naming the label."""
    label = {"style": "rule", "ground_truth": {"target": [GOLD]}}
    response, _, _ = episode(agent, [f"<answer>{GOLD}</answer>"], label=label)
    assert response["reward"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"label \{'style': 'rule'\} holds no gold answer"):
        episode(agent, [f"<answer>{GOLD}</answer>"], label={"style": "rule"})


def test_a_bad_topk_is_refused_naming_the_variable(agent):
    with pytest.raises(ValueError, match="FACTUTIL_RETRIEVAL_TOPK"):
        agent.retriever_from_env({"FACTUTIL_RETRIEVAL_TOPK": "0"})


def test_the_searches_that_found_the_successful_rollouts_passages_earn_credit(agent):
    """Two episodes search the right query and answer right, two search elsewhere and answer
    wrong: scored from their payloads with facts="retrieved", the good searches' process reward
    is positive and the others' negative (the passages only failures held)."""
    good = [f"<search>{GOOD}</search>", f"<answer>{GOLD}</answer>"]
    bad = [f"<search>{BAD}</search>", "<answer>Paris</answer>"]
    rollouts = []
    for k, texts in enumerate([good, good, bad, bad]):
        response, _, _ = episode(agent, texts)
        rollouts.append({"uid": "q", "question": QUESTION, "golden_answers": [GOLD],
                         "rollout_id": f"r{k}", "actions": response["factutil"]["actions"]})
    result = compute_process_advantages(rollouts, FactUtilConfig(mode="exact", facts="retrieved"))
    rewards = result.per_rollout("process_reward")
    assert [rewards[("q", f"r{k}")][0] > 0 for k in range(4)] == [True, True, False, False]
    assert all(rewards[("q", f"r{k}")][0] < 0 for k in (2, 3))
