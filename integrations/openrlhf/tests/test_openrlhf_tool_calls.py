"""Parallel tool calls: one OpenRLHF generation holding several verl-style search calls.

OpenRLHF gives a generation one token span, so its calls are one factutil action; every passage
its tool replies hold must reach the credit (``facts="retrieved"``), not only the last call's,
and its dropped passages are counted as a single search's are.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch
from openrlhf_testkit import ScriptedEngine, ToyTokenizer, _SamplingParams, make_args

from factutil import FactUtilConfig, compute_process_advantages

KEY = ("Key House Mirror", "Key House Mirror is a 1923 film directed by Ewald Andre Dupont.")
COHN = ("Count Cohn", "Count Cohn is a 1917 film directed by Carl Wilhelm.")
CATS = ("Cats", "Cats are small mammals.")
TEMPLATE = "<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def _call(query):
    return json.dumps({"name": "search", "arguments": {"query_list": [query]}}).join(["<tool_call>", "</tool_call>"])


def _reply(passage):  # verl's search tool: {"result": 'Doc 1 (Title: "T")\ntext\n\n'}
    return _tool_response(f'Doc 1 (Title: "{passage[0]}")\n{passage[1]}\n\n')


def _tool_response(result, cut=False):  # cut: the JSON string never ends
    text = json.dumps({"result": result})
    return "<tool_response>" + (text[:-2] if cut else text) + "</tool_response>"


def _search(*calls):
    """One generation of several calls, answered by one tool reply per call."""
    text = "\n".join(_call(query) for query, _ in calls)
    return text, TEMPLATE.format("\n".join(_reply(passage) for _, passage in calls)), 0.0, False


def _answer(text, reward):
    return f"<answer>{text}</answer>", "", reward, True


PLAN = [  # n = 4 samples of one prompt: (the first generation's calls, the answer, its reward)
    ([("Key House Mirror director", KEY), ("cats", CATS)], "Key House Mirror", 1.0),
    ([("cats", CATS)], "Count Cohn", 0.0),
    ([("Count Cohn director", COHN), ("Key House Mirror director", KEY)], "Key House Mirror", 1.0),
    ([("Count Cohn director", COHN)], "Count Cohn", 0.0),
]
GROUP = [[_search(*calls), _answer(answer, reward)] for calls, answer, reward in PLAN]


def _instance_cls(group):
    from openrlhf.utils.agent import AgentInstanceBase

    class Replay(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.turns, self.at = None, 0

        async def reset(self, states, **kwargs):
            self.turns = group[int(states["label"])]
            return {"observation": states["observation"]}

        async def step(self, state_dict, **kwargs):
            _, feedback, reward, done = self.turns[self.at]
            self.at += 1
            return {"rewards": torch.tensor(reward), "environment_feedback": feedback, "done": done}

    return Replay


def _run(openrlhf, config, group=GROUP):
    """The group's episodes through the executor and the patched advantage step: the responses,
    each sample's omega * A_proc per token, and the step's factutil metrics."""
    from factutil_openrlhf import make_executor, patch

    tokenizer = ToyTokenizer()
    executor = make_executor(_instance_cls(group))()

    async def episode(k):
        engine = ScriptedEngine([turn[0] for turn in group[k]], tokenizer)
        return await executor.execute("Which film has the younger director?\n", str(k),
                                      _SamplingParams(max_tokens=None, logprobs=None), 4096, tokenizer, engine)

    async def main():
        return await asyncio.gather(*(episode(k) for k in range(len(group))))

    responses = asyncio.run(main())
    for response in responses:  # the gold answer: the label only picks the script here
        response["label"] = json.dumps(["Key House Mirror"])
    patch.configure(config)
    maker = openrlhf.experience_maker.RemoteExperienceMaker(
        None, None, None, None, SimpleNamespace(value=0.0),
        SimpleNamespace(args=make_args(n=len(group), micro_batch_size=3)), tokenizer)
    generator = openrlhf.samples_generator.SamplesGenerator.__new__(openrlhf.samples_generator.SamplesGenerator)
    batches = maker.split_rollout_samples(
        [generator._process_response_into_experience(response, max_len=4096) for response in responses])
    for batch in batches:
        batch.kl = torch.zeros_like(batch.action_mask, dtype=torch.float32)
    original = getattr(openrlhf.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns, patch.PATCHED)
    before = {int(i): a.clone() for b in original(maker, [_copy(b) for b in batches]) for i, a in zip(b.index, b.advantages)}
    after = maker.compute_advantages_and_returns(batches)
    metrics = {key: value[0].item() for key, value in after[0].info.items() if key.startswith("factutil/")}
    return responses, {int(i): a - before[int(i)] for b in after for i, a in zip(b.index, b.advantages)}, metrics


def _copy(batch):
    import copy

    twin = copy.deepcopy(batch)
    twin.info.pop("factutil")
    return twin


def test_every_reply_of_parallel_calls_reaches_the_credit(openrlhf):
    config = FactUtilConfig(omega=0.5, mode="exact", facts="retrieved")
    responses, deltas, _ = _run(openrlhf, config)
    # Independent reference: the core on hand-built rollouts, a generation's calls one search
    # listing every passage its replies hold.
    rollouts = []
    for k, (calls, answer, reward) in enumerate(PLAN):
        search = {"action": "search", "query": "; ".join(query for query, _ in calls),
                  "passages": [{"title": title, "text": text} for _, (title, text) in calls]}
        rollouts.append({"uid": "0", "question": "q", "golden_answers": ["Key House Mirror"], "rollout_id": str(k),
                         "actions": [search, {"action": "answer", "answer": answer}], "reward": reward})
    result = compute_process_advantages(rollouts, config)
    want = {}
    for record in result.actions:
        want.setdefault(int(record.rollout_id), []).append(0.5 * record.process_advantage)
    for k, response in enumerate(responses):
        got = [deltas[k][start - 1].item() for start, _ in response["action_ranges"]]
        assert got == pytest.approx(want[k], abs=1e-6), k  # float32 advantages
    # By hand: KEY came to both successful samples only (utility > 0); COHN and CATS each to
    # one success and one failure, as often as the group succeeds (utility 0).
    first = [deltas[k][response["action_ranges"][0][0] - 1].item() for k, response in enumerate(responses)]
    assert first[0] > 0 and first[2] > 0 and first[1] == 0 and first[3] == 0


def test_a_reply_with_text_after_its_block_keeps_the_searchs_passages(openrlhf):
    """An agent whose feedback adds its own words after the retrieved block (Search-R1's block,
    then "Search again or answer."): the search still observes the block, so its passages reach
    the credit; the reference is the core on rollouts listing them."""
    config = FactUtilConfig(omega=0.5, mode="exact", facts="retrieved")
    plan = [(KEY, "Key House Mirror", 1.0), (COHN, "Count Cohn", 0.0), (KEY, "Key House Mirror", 1.0),
            (CATS, "Count Cohn", 0.0)]
    group = [[(f"<search>{title} director</search>",
               f'\n\n<information>Doc 1(Title: "{title}") {text}</information>\n\nSearch again or answer.\n',
               0.0, False), _answer(answer, reward)] for (title, text), answer, reward in plan]
    responses, deltas, _ = _run(openrlhf, config, group)
    assert all(r["factutil"]["actions"][0]["observation"].startswith("Doc 1(Title: ") for r in responses)
    rollouts = [{"uid": "0", "question": "q", "golden_answers": ["Key House Mirror"], "rollout_id": str(k),
                 "actions": [{"action": "search", "query": f"{title} director",
                              "passages": [{"title": title, "text": text}]},
                             {"action": "answer", "answer": answer}], "reward": reward}
                for k, ((title, text), answer, reward) in enumerate(plan)]
    want = {}
    for record in compute_process_advantages(rollouts, config).actions:
        want.setdefault(int(record.rollout_id), []).append(0.5 * record.process_advantage)
    for k, response in enumerate(responses):
        got = [deltas[k][start - 1].item() for start, _ in response["action_ranges"]]
        assert got == pytest.approx(want[k], abs=1e-6), k
    assert deltas[0][responses[0]["action_ranges"][0][0] - 1].item() > 0  # KEY: both successes


# Replies whose passages are dropped (docs/method.md §9). A verl tool reply cut inside its second
# passage (the JSON string never ends: cut 1) and one whose first passage is blank (empty 1); a
# Search-R1 <information> block no header splits (unsplit 1) and one cut inside its second
# passage (no closing tag: cut 1).
CUT_REPLY = _tool_response(f'Doc 1 (Title: "{KEY[0]}")\n{KEY[1]}\n\nDoc 2 (Title: "{COHN[0]}")\nCount Co', cut=True)
EMPTY_REPLY = _tool_response(f'Doc 1 (Title: "")\n \n\nDoc 2 (Title: "{CATS[0]}")\n{CATS[1]}\n\n')
UNSPLIT_BLOCK = f"\n\n<information>{CATS[1]}</information>\n\n"
CUT_BLOCK = f"\n\n<information>Doc 1(Title: {KEY[0]}) {KEY[1]}\nDoc 2(Title: {COHN[0]}) Count Co"
CALLS = [  # per sample: (the generation's calls, the feedback of a generation holding them all)
    ([_call("Key House Mirror director"), _call("cats")], TEMPLATE.format(f"{CUT_REPLY}\n{EMPTY_REPLY}")),
    (["<search>cats</search>", "<search>Key House Mirror director</search>"], UNSPLIT_BLOCK + CUT_BLOCK),
]
SINGLE = [  # the feedback of each call made alone
    [TEMPLATE.format(CUT_REPLY), TEMPLATE.format(EMPTY_REPLY)], [UNSPLIT_BLOCK, CUT_BLOCK],
]


def _drops(metrics):
    return {name: metrics[f"factutil/{name}"]
            for name in ("observations_unsplit", "passages_cut", "passages_empty", "observations_unread")}


def test_passages_dropped_inside_parallel_calls_are_counted_as_single_searches_are(openrlhf, caplog):
    config = FactUtilConfig(omega=0.5, mode="exact", facts="retrieved")
    parallel = [[("\n".join(calls), feedback, 0.0, False), _answer("Key House Mirror", 1.0 - k)]
                for k, (calls, feedback) in enumerate(CALLS)]
    single = [[(call, feedback, 0.0, False) for call, feedback in zip(calls, SINGLE[k])]
              + [_answer("Key House Mirror", 1.0 - k)] for k, (calls, _) in enumerate(CALLS)]
    # By hand: the tool replies drop one cut and one empty passage, the <information> blocks are
    # one unsplit text and drop one cut passage; no block follows a turn that is no search.
    want = {"observations_unsplit": 1.0, "passages_cut": 2.0, "passages_empty": 1.0, "observations_unread": 0.0}
    for group in (parallel, single):
        caplog.clear()
        responses, _, metrics = _run(openrlhf, config, group)
        assert [len(response["factutil"]["actions"]) for response in responses] == [len(g) for g in group]
        assert _drops(metrics) == want
        assert "1 matched no passage layout and count as one passage each; 2 passage(s) cut short and 1 " \
            "empty dropped" in caplog.text  # the core's one warning of the step
