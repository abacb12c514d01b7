"""The ``factagent`` loop end to end: real verl classes, real BM25 server on 127.0.0.1, and a
scripted generation server standing in for vLLM through the same ``server_manager.generate`` call.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch
from factutil import FactUtilConfig
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput
from verl_testkit import SAMPLE, make_agent_loop

from factutil_verl.advantage import compute_factagent_advantages
from factutil_verl.agent_loop import FactAgentLoop
from factutil_verl.reward import compute_score

QUESTION = "Who is the mother of the director of film Polish-Russian War (Film)?"
GOLD = "Małgorzata Braunek"
SEARCH_1 = '{"action": "search", "query": "Polish-Russian War director"}'
ASSERT_1 = '{"action": "assert", "facts": [["Polish-Russian War", "director", "Xawery Żuławski"]]}'
SEARCH_2 = '{"action": "search", "query": "Xawery Żuławski mother"}'
ASSERT_2 = '{"action": "assert", "facts": [["Xawery Żuławski", "mother", "Małgorzata Braunek"]]}'
ANSWER = '{"action": "answer", "answer": "Małgorzata Braunek"}'
WRONG = "<answer>Aleksander Ford</answer>"


class ScriptedServer:
    """Stands in for verl's LLM server client: returns the token ids of scripted actions + EOS."""

    def __init__(self, tokenizer: Any, script: list[str]):
        self.tokenizer = tokenizer
        self.script = list(script)
        self.prompts: list[str] = []
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any
    ) -> TokenOutput:
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        self.calls.append(
            {"request_id": request_id, "sampling_params": dict(sampling_params), **kwargs}
        )
        text = self.script.pop(0)
        if text is None:  # the server generated nothing
            return TokenOutput(token_ids=[], log_probs=[], num_preempted=0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), num_preempted=0)


def sample_kwargs(session: int = 0) -> dict[str, Any]:
    """One dataset row as verl's V1 worker passes it to ``run``."""
    return {
        "raw_prompt": [{"role": "user", "content": QUESTION}],
        "reward_model": {"style": "rule", "ground_truth": {"target": [GOLD]}},
        "extra_info": {"question": QUESTION},
        "data_source": "2wiki",
        "uid": "u1",
        "session_id": session,
        "index": 0,
        "global_steps": 1,
    }


def roll_out(config: Any, tokenizer: Any, script: list[str], session: int = 0, **options: Any):
    """Instantiate the loop exactly as verl's AgentLoopWorker does, then run one rollout."""
    server = ScriptedServer(tokenizer, script)

    async def main() -> list[AgentLoopOutput]:
        loop = make_agent_loop("factagent", config, tokenizer, server, **options)
        assert isinstance(loop, FactAgentLoop)
        return await loop.run({"temperature": 1.0, "top_p": 1.0}, **sample_kwargs(session))

    return asyncio.run(main()), server


@pytest.fixture(scope="module")
def config(verl_config):
    return verl_config(
        "actor_rollout_ref.rollout.prompt_length=8192",
        "actor_rollout_ref.rollout.response_length=256",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "+algorithm.factutil.mode=exact",
    )


def sample_observation(query: str) -> str:
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        for action in json.loads(line)["actions"]:
            if action.get("query") == query:
                return action["observation"]
    raise AssertionError(query)


def test_one_rollout_rows_masks_prompts_and_extra_fields(config, byte_tokenizer, retrieval_url):
    script = [SEARCH_1, ASSERT_1, "Let me think about it.", SEARCH_2, ASSERT_2, ANSWER]
    outputs, server = roll_out(
        config, byte_tokenizer, script, retriever_url=retrieval_url, max_observation_chars=100_000
    )

    assert len(outputs) == 6
    eos = byte_tokenizer.eos_token_id
    for output, text in zip(outputs, script):
        assert output.response_ids == byte_tokenizer.encode(text, add_special_tokens=False) + [eos]
        assert output.response_mask == [1] * len(output.response_ids)
        assert output.response_logprobs == [-0.25] * len(output.response_ids)
        assert byte_tokenizer.decode(output.prompt_ids) == server.prompts[outputs.index(output)]
    info = [output.extra_fields["factutil"] for output in outputs]
    assert [i["step"] for i in info] == [0, 1, 2, 3, 4, 5]
    assert {i["trajectory_id"] for i in info} == {"u1_0"}
    assert [i["action"]["kind"] for i in info] == [
        "search",
        "assert",
        "invalid",
        "search",
        "assert",
        "answer",
    ]
    assert info[0]["action"] == {
        "kind": "search",
        "query": "Polish-Russian War director",
        "triples": None,
        "answer": None,
        "error": None,
        "observation": sample_observation("Polish-Russian War director"),
    }
    assert info[1]["action"]["triples"] == [["Polish-Russian War", "director", "Xawery Żuławski"]]
    assert info[2]["action"]["error"] == "no action found"
    assert info[5]["action"]["answer"] == GOLD
    assert [i["store_size"] for i in info] == [0, 0, 1, 1, 1, 2]
    assert all(i["golden_answers"] == [GOLD] and i["question"] == QUESTION for i in info)
    assert all(i["retrieval_error"] is None for i in info)

    prompts = server.prompts
    first_observation = sample_observation("Polish-Russian War director")
    second_observation = sample_observation("Xawery Żuławski mother")
    assert prompts[0].startswith("<|im_start|>system\nYou answer a question")
    assert prompts[0].endswith("<|im_start|>assistant\n")
    assert (
        "Fact store:\n(empty)" in prompts[0] and "Latest search result:\n(none yet)" in prompts[0]
    )
    # the real BM25 server + client reproduce the sample's observation byte for byte
    assert f"Latest search result:\n{first_observation}<|im_end|>" in prompts[1]
    assert "- Polish-Russian War | director | Xawery Żuławski" in prompts[2]
    assert second_observation in prompts[4] and first_observation not in prompts[4]
    assert "- Xawery Żuławski | mother | Małgorzata Braunek" in prompts[5]
    for turn, prompt in enumerate(prompts):
        assert QUESTION in prompt
        for earlier in script[:turn]:  # the store, never the history
            assert earlier not in prompt
    assert len({call["request_id"] for call in server.calls}) == 1
    assert all(
        call["sampling_params"] == {"temperature": 1.0, "top_p": 1.0} for call in server.calls
    )

    # verl's V1 worker stores each output as a row: the same call path must accept them.
    fields = []
    for output in outputs:
        field = output.as_dict()
        field.update(sample_kwargs())
        fields.append(field)
    rows = list_of_dict_to_tensordict(fields)
    assert rows.batch_size == torch.Size([6])
    assert rows["response_mask"].offsets().diff().tolist() == [len(o.response_ids) for o in outputs]


def test_rollouts_become_a_scored_group(config, byte_tokenizer, retrieval_url):
    """Two sessions of one question -> verl rows -> reward -> FactAgent advantages."""
    scripts = [[SEARCH_1, ASSERT_1, SEARCH_2, ASSERT_2, ANSWER], [SEARCH_1, WRONG]]
    keys, uids, extras, masks, rewards = [], [], [], [], []
    for session, script in enumerate(scripts):
        outputs, _ = roll_out(
            config, byte_tokenizer, script, session=session, retriever_url=retrieval_url
        )
        final = outputs[-1]
        extra_info = {**sample_kwargs(session)["extra_info"], **final.extra_fields}
        reward = compute_score(
            "2wiki",
            byte_tokenizer.decode(final.response_ids, skip_special_tokens=True),
            {"target": [GOLD]},
            extra_info,
        )["score"]
        for index, output in enumerate(outputs):
            keys.append(f"u1_{session}_{index}")
            uids.append("u1")
            extras.append(output.extra_fields)
            masks.append(output.response_mask)
            rewards.append(reward)
    width = max(len(m) for m in masks)
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
    scores = torch.zeros(mask.shape)
    for row, (m, r) in enumerate(zip(masks, rewards)):
        scores[row, len(m) - 1] = r
    result = compute_factagent_advantages(
        keys=keys,
        uids=uids,
        extra_fields=extras,
        response_mask=mask,
        token_level_rewards=scores,
        grpo_advantages=torch.zeros(mask.shape),
        config=FactUtilConfig(mode="exact"),
    )
    assert result.fallback == {}
    assert rewards[0] == 1.0 and rewards[-1] == 0.0
    first_token = result.advantages[:, 0].tolist()
    # rows 0-4: the right rollout (search, assert, search, assert, answer); rows 5-6: the wrong one
    assert first_token[1] == max(first_token)  # the first useful assert earns most
    assert (
        first_token[1] > first_token[0] and first_token[3] > first_token[2]
    )  # assert > its search
    assert min(first_token[:5]) > max(first_token[5:])
    assert first_token[6] < first_token[5] < 0  # an answer from an empty store is penalised too


class _Slow(BaseHTTPRequestHandler):
    delay = 1.5
    status = 200
    hits = 0

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(self.delay)
        try:
            self.send_response(self.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except (BrokenPipeError, ConnectionResetError):  # the client timed out first, as meant
            pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/retrieve"


def test_a_retriever_that_times_out_becomes_an_observation(config, byte_tokenizer):
    handler = type("Slow", (_Slow,), {"delay": 1.5, "hits": 0})
    server, url = _serve(handler)
    try:
        outputs, scripted = roll_out(
            config, byte_tokenizer, [SEARCH_1, ANSWER], retriever_url=url, timeout_s=0.2, retries=0
        )
    finally:
        server.shutdown()
        server.server_close()
    assert len(outputs) == 2 and handler.hits == 1
    assert (
        outputs[0].extra_fields["factutil"]["retrieval_error"]
        == "the retriever timed out after 0.2 s"
    )
    assert (
        "Latest search result:\nSearch failed: the retriever timed out after 0.2 s.<|im_end|>"
        in scripted.prompts[1]
    )
    assert outputs[1].extra_fields["factutil"]["action"]["kind"] == "answer"


def test_http_errors_and_an_unreachable_retriever_become_observations(config, byte_tokenizer):
    handler = type("Broken", (_Slow,), {"delay": 0.0, "status": 500, "hits": 0})
    server, url = _serve(handler)
    try:
        outputs, _ = roll_out(
            config, byte_tokenizer, [SEARCH_1, ANSWER], retriever_url=url, retries=1
        )
    finally:
        server.shutdown()
        server.server_close()
    assert handler.hits == 2  # a 5xx is retried once
    assert outputs[0].extra_fields["factutil"]["retrieval_error"] == "HTTP 500 from the retriever"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    outputs, scripted = roll_out(
        config,
        byte_tokenizer,
        [SEARCH_1, ANSWER],
        retriever_url=f"http://127.0.0.1:{closed_port}/retrieve",
        retries=0,
    )
    assert "the retriever is unreachable" in outputs[0].extra_fields["factutil"]["retrieval_error"]
    assert "Search failed: the retriever is unreachable" in scripted.prompts[1]


def test_max_turns_without_an_answer_and_max_action_tokens(config, byte_tokenizer, retrieval_url):
    outputs, server = roll_out(
        config,
        byte_tokenizer,
        [SEARCH_1, SEARCH_1, SEARCH_1, ANSWER],
        retriever_url=retrieval_url,
        max_turns=3,
        max_action_tokens=64,
    )
    assert len(outputs) == 3 and server.script == [ANSWER]
    assert [o.extra_fields["factutil"]["action"]["kind"] for o in outputs] == ["search"] * 3
    assert all(call["sampling_params"]["max_tokens"] == 64 for call in server.calls)


def test_a_long_observation_is_cut_so_the_instructions_stay(
    verl_config, byte_tokenizer, retrieval_url
):
    small = verl_config(
        "actor_rollout_ref.rollout.prompt_length=2048",
        "actor_rollout_ref.rollout.response_length=256",
        "+algorithm.factutil.mode=exact",
    )
    outputs, server = roll_out(
        small, byte_tokenizer, [SEARCH_1, ANSWER], retriever_url=retrieval_url
    )
    assert len(outputs[1].prompt_ids) <= 2048
    assert server.prompts[1].startswith("<|im_start|>system\nYou answer a question")
    assert "Latest search result:\nDoc 1 (Title: Aleksander Ford)" in server.prompts[1]


def test_an_empty_generation_keeps_one_masked_token_for_the_reward(
    config, byte_tokenizer, retrieval_url
):
    outputs, _ = roll_out(config, byte_tokenizer, [None, ANSWER], retriever_url=retrieval_url)
    empty = outputs[0]
    assert empty.response_ids == [byte_tokenizer.eos_token_id] and empty.response_mask == [0]
    assert empty.extra_fields["factutil"]["action"]["error"] == "no action found"
    empty.reward_score = 0.5  # verl puts the trajectory's reward on every row's last token
    assert empty.as_dict()["rm_scores"].tolist() == [0.5]
