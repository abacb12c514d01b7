"""The ``search_r1`` loop end to end: real verl classes, a scripted generation server returning
Search-R1 text through ``server_manager.generate``, a scripted ``/retrieve`` on 127.0.0.1 (and the
real BM25 one), then the span-layout rows scored with ``+algorithm.factutil.facts=retrieved``.

Expected advantages are worked by hand from docs/method.md §3–§5 and §9.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch
from factutil.search_r1 import INVALID as SEARCH_R1_INVALID
from factutil.tools.retrieval import RetrievalClient
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput
from verl_testkit import make_agent_loop

from factutil_verl.advantage import compute_factagent_advantages
from factutil_verl.config import factutil_config_from_verl
from factutil_verl.reward import compute_score
from factutil_verl.search_r1 import SearchR1Loop

QUESTION = "Who is the mother of the director of film Polish-Russian War?"
GOLD = "Małgorzata Braunek"
PROMPT = (
    "Answer the given question. You can search with <search> query </search> and answer with "
    f"<answer> answer </answer>. Question: {QUESTION}"
)
# the passages, as a Search-R1 retriever stores them ("contents": '"Title"\ntext')
P1 = ("Xawery Żuławski",
      "Xawery Żuławski is a Polish film director, son of Małgorzata Braunek.")
P3 = ("Polish-Russian War (film)", "Polish-Russian War is a 2009 Polish film.")
P2 = ("Paris", "Paris is the capital of France.")
HITS = {
    "director of Polish-Russian War": [P1, P3],
    "Xawery Zulawski mother": [P1],
    "Polish-Russian War film": [P3],
    "Xawery Żuławski": [P1],
    "Polish-Russian War director": [P3, P2],
}


def turn(query: str) -> str:
    return f"<think>I need to look it up.</think>\n<search> {query} </search>"


def answer(text: str) -> str:
    return f"<think>I know it.</think>\n<answer> {text} </answer>"


INVALID = "<think>Search.</think><search></search>"
# a (right): P1+P3, then P1 again (nothing new); b (right): P3, an invalid turn, then P1;
# c (wrong): P3+P2.
SCRIPTS = [
    [turn("director of Polish-Russian War"), turn("Xawery Zulawski mother"), answer(GOLD)],
    [turn("Polish-Russian War film"), INVALID, turn("Xawery Żuławski"), answer(GOLD)],
    [turn("Polish-Russian War director"), answer("Paris")],
]


class _Retrieve(BaseHTTPRequestHandler):
    """Search-R1's ``/retrieve`` with scripted hits per query."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        docs = [
            {"document": {"contents": f'"{title}"\n{text}'}, "score": 1.0}
            for query in body["queries"]
            for title, text in HITS.get(query, [])
        ]
        payload = json.dumps({"result": [docs]}).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture(scope="module")
def scripted_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Retrieve)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    server.shutdown()
    server.server_close()


class SearchR1Server:
    """Stands in for verl's LLM server client: each turn's text as vLLM returns it with Search-R1's
    stop strings (the stop string kept, no EOS); ``eos=True`` items end with the EOS token."""

    def __init__(self, tokenizer: Any, script: list[str | tuple[str, bool]]):
        self.tokenizer = tokenizer
        self.script = list(script)
        self.prompts: list[list[int]] = []
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any
    ) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        text, eos = self.script.pop(0) if isinstance(self.script[0], tuple) else (
            self.script.pop(0), False)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if eos:
            ids.append(self.tokenizer.eos_token_id)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), num_preempted=0)


def sample_kwargs(session: int) -> dict[str, Any]:
    """One Search-R1 dataset row as verl's V1 worker passes it to ``run``."""
    return {
        "raw_prompt": [{"role": "user", "content": PROMPT}],
        "reward_model": {"style": "rule", "ground_truth": {"target": [GOLD]}},
        "extra_info": {"question": QUESTION},
        "data_source": "nq",
        "uid": "q",
        "session_id": session,
        "index": 0,
    }


def roll_out(config: Any, tokenizer: Any, script: list, session: int = 0, **options: Any):
    """Instantiate the loop as verl's AgentLoopWorker does, then run one rollout."""
    server = SearchR1Server(tokenizer, script)

    async def main() -> AgentLoopOutput:
        loop = make_agent_loop("search_r1", config, tokenizer, server, **options)
        assert isinstance(loop, SearchR1Loop)
        return await loop.run({"temperature": 1.0}, **sample_kwargs(session))

    return asyncio.run(main()), server


@pytest.fixture(scope="module")
def config(verl_config):
    return verl_config(
        "actor_rollout_ref.rollout.prompt_length=1024",
        "actor_rollout_ref.rollout.response_length=1024",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "+algorithm.factutil.facts=retrieved",
    )


def observation(*passages: tuple[str, str]) -> str:
    """The observation the retrieval client writes (``Doc i (Title: T) text`` lines)."""
    return "\n".join(f"Doc {k} (Title: {t}) {x}" for k, (t, x) in enumerate(passages, start=1))


def information(text: str) -> str:
    """Search-R1's block: the retrieved text stripped, between the tags and blank lines."""
    return f"\n\n<information>{text.strip()}</information>\n\n"


def test_one_rollout_is_one_row_with_each_turns_span_and_each_searchs_observation(
    config, byte_tokenizer, scripted_url
):
    script = SCRIPTS[1]
    output, server = roll_out(config, byte_tokenizer, script, session=1,
                              retriever_url=scripted_url)
    encode = lambda text: byte_tokenizer.encode(text, add_special_tokens=False)
    observations = [observation(P3), None, observation(P1), None]
    pieces = [  # (text, mask) in response order
        (script[0], 1), (information(observation(P3)), 0),
        (script[1], 1), (f"\n{SEARCH_R1_INVALID}\n", 0),
        (script[2], 1), (information(observation(P1)), 0),
        (script[3], 1),
    ]
    assert output.response_ids == [t for text, _ in pieces for t in encode(text)]
    assert output.response_mask == [m for text, m in pieces for _ in encode(text)]
    assert output.response_logprobs == [-0.5 if m else 0.0 for text, m in pieces
                                        for _ in encode(text)]
    info = output.extra_fields["factutil"]
    assert set(info) == {"trajectory_id", "actions", "spans", "question", "golden_answers"}
    assert info["trajectory_id"] == "q_1" and info["question"] == QUESTION
    assert info["golden_answers"] == [GOLD]
    # each span is exactly its turn's tokens
    assert [byte_tokenizer.decode(output.response_ids[s:e]) for s, e in info["spans"]] == script
    starts = [0]
    for text, _ in pieces:
        starts.append(starts[-1] + len(encode(text)))
    assert info["spans"] == [[starts[0], starts[1]], [starts[2], starts[3]],
                             [starts[4], starts[5]], [starts[6], starts[7]]]
    actions = info["actions"]
    assert [a["kind"] for a in actions] == ["search", "invalid", "search", "answer"]
    assert [a["query"] for a in actions] == ["Polish-Russian War film", None, "Xawery Żuławski",
                                             None]
    assert [a["observation"] for a in actions] == observations
    assert actions[3]["answer"] == GOLD
    assert actions[1]["error"] == "search with an empty query"

    # the dataset's own prompt, no FactAgent instructions; each turn continues the text so far
    first = byte_tokenizer.decode(server.prompts[0])
    assert first == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    for k, prompt in enumerate(server.prompts):
        assert prompt == server.prompts[0] + output.response_ids[: starts[2 * k]]
    for call, start in zip(server.calls, starts[::2]):
        assert call["sampling_params"] == {
            "temperature": 1.0, "stop": ["</search>", "</answer>"],
            "include_stop_str_in_output": True, "max_tokens": 1024 - start,
        }
    assert len({call["request_id"] for call in server.calls}) == 1
    assert output.num_turns == 9

    # verl's V1 worker stores the output as one row through this call path
    row = output.as_dict()
    row.update(sample_kwargs(1))
    rows = list_of_dict_to_tensordict([row])
    assert rows.batch_size == torch.Size([1])
    assert rows["response_mask"].reshape(-1).tolist() == output.response_mask


def test_the_real_retrieval_client_and_bm25_server_give_the_searchs_observation(
    config, byte_tokenizer, retrieval_url
):
    query = "Polish-Russian War director"
    output, _ = roll_out(config, byte_tokenizer, [turn(query), answer("x")],
                         retriever_url=retrieval_url, max_observation_chars=300)
    expected = RetrievalClient(retrieval_url, topk=3, max_observation_chars=300).search(query)
    assert expected.ok and expected.observation.startswith("Doc 1 (Title: ")
    assert output.extra_fields["factutil"]["actions"][0]["observation"] == expected.observation
    assert information(expected.observation) in byte_tokenizer.decode(output.response_ids)


def test_a_turn_with_no_tag_gets_the_notice_and_a_failed_search_has_no_observation(
    config, byte_tokenizer, scripted_url
):
    """Search-R1's rule: a turn that neither searches nor answers (here one that ends with the
    model's EOS) gets the invalid-action notice and the episode goes on; only an answer or the
    turn limit ends it."""
    script = [turn("anything"), ("<think>I give up.</think>", True), answer("asked again")]
    output, server = roll_out(config, byte_tokenizer, script,
                              retriever_url="http://127.0.0.1:9/retrieve", retries=0)
    actions = output.extra_fields["factutil"]["actions"]
    assert [a["kind"] for a in actions] == ["search", "invalid", "answer"] and server.script == []
    assert actions[0]["observation"] is None  # the error message is no passage
    text = byte_tokenizer.decode(output.response_ids)
    assert "<information>Search failed: the retriever is unreachable" in text
    assert f"<|endoftext|>\n{SEARCH_R1_INVALID}\n<think>I know it." in text.replace(
        byte_tokenizer.decode([byte_tokenizer.eos_token_id]), "<|endoftext|>")
    # the turn limit ends an episode that never answers
    output, server = roll_out(config, byte_tokenizer, [turn("a"), turn("b"), answer("x")],
                              retriever_url=scripted_url, max_turns=2)
    assert [a["kind"] for a in output.extra_fields["factutil"]["actions"]] == ["search", "search"]
    assert server.script == [answer("x")]
    # a search that found nothing retrieved no passage either
    output, _ = roll_out(config, byte_tokenizer, [turn("nowhere"), answer("x")],
                         retriever_url=scripted_url)
    assert output.extra_fields["factutil"]["actions"][0]["observation"] is None
    assert information("No documents found.") in byte_tokenizer.decode(output.response_ids)


def test_the_response_budget_cuts_the_last_information_and_its_spans_stay_in_the_row(
    verl_config, byte_tokenizer, scripted_url
):
    short = verl_config(
        "actor_rollout_ref.rollout.prompt_length=1024",
        "actor_rollout_ref.rollout.response_length=90",
        "+algorithm.factutil.facts=retrieved",
    )
    output, server = roll_out(short, byte_tokenizer, SCRIPTS[0], retriever_url=scripted_url)
    first = len(byte_tokenizer.encode(SCRIPTS[0][0], add_special_tokens=False))
    assert len(output.response_ids) == len(output.response_mask) == 90
    assert output.response_mask == [1] * first + [0] * (90 - first)
    assert output.extra_fields["factutil"]["spans"] == [[0, first]]
    assert len(server.calls) == 1


def test_search_r1_rollouts_scored_with_facts_retrieved_credit_the_searches_by_hand(
    config, byte_tokenizer, scripted_url
):
    """Three sessions of one question -> verl rows -> compute_score -> advantages.

    y = (1, 1, 0), p-bar = 2/3; prior "group", epsilon 0.5: u = sum(y - p-bar) / (n + 1).
    P1 (a, b): (1/3 + 1/3) / 3 = 2/9; P3 (all): 0; P2 (c): (-2/3) / 2 = -1/3.
    Shaping (Phi = tanh(sum u), F = Phi' - Phi): a's first search tanh(2/9), its second 0 (P1
    again); b's first 0 (P3 only), its invalid turn -0.1 (penalty), its second search tanh(2/9);
    c's search tanh(-1/3). A_out = (R - 2/3) / (std + 1e-6), std = sqrt(1/3); A = A_out + 0.5 r.
    """
    outputs = [
        roll_out(config, byte_tokenizer, script, session=k, retriever_url=scripted_url)[0]
        for k, script in enumerate(SCRIPTS)
    ]
    rewards = [
        compute_score("nq", byte_tokenizer.decode(o.response_ids, skip_special_tokens=True),
                      {"target": [GOLD]}, {**sample_kwargs(k)["extra_info"], **o.extra_fields})
        ["score"]
        for k, o in enumerate(outputs)
    ]
    assert rewards == [1.0, 1.0, 0.0]
    width = max(len(o.response_ids) for o in outputs) + 3
    mask = torch.zeros(3, width, dtype=torch.int64)
    scores = torch.zeros(3, width)
    for row, (o, r) in enumerate(zip(outputs, rewards)):
        mask[row, : len(o.response_mask)] = torch.tensor(o.response_mask)
        scores[row, len(o.response_mask) - 1] = r
    method = factutil_config_from_verl(config.algorithm)
    assert method.facts == "retrieved" and method.mode == "exact"
    # the extra_fields as the trainer reads them back from verl's rows
    stored = list_of_dict_to_tensordict(
        [{**o.as_dict(), **sample_kwargs(k)} for k, o in enumerate(outputs)]
    )
    extra_fields = list(stored["extra_fields"])
    assert extra_fields == [o.extra_fields for o in outputs]
    result = compute_factagent_advantages(
        keys=[f"q_{k}_0" for k in range(3)],
        uids=["q"] * 3,
        extra_fields=extra_fields,
        response_mask=mask,
        token_level_rewards=scores,
        grpo_advantages=torch.full((3, width), 99.0),
        config=method,
    )
    assert result.fallback == {}
    std = math.sqrt(1 / 3)
    right, wrong = (1 / 3) / (std + 1e-6), (-2 / 3) / (std + 1e-6)
    gain = 0.5 * math.tanh(2 / 9)
    expected = [
        [right + gain, right, right],
        [right, right - 0.05, right + gain, right],
        [wrong + 0.5 * math.tanh(-1 / 3), wrong],
    ]
    advantages = result.advantages.double()
    for row, (o, want) in enumerate(zip(outputs, expected)):
        spans = o.extra_fields["factutil"]["spans"]
        for (start, end), value in zip(spans, want):
            assert advantages[row, start:end].tolist() == pytest.approx([value] * (end - start),
                                                                         abs=1e-6)
        # the information tokens and the padding carry nothing
        assert not advantages[row][~mask[row].bool()].any()
    # a search that retrieved nothing new gets exactly the outcome advantage: a's second search
    # and its answer carry the same float32 value, bit for bit
    (s2, e2), (s3, e3) = outputs[0].extra_fields["factutil"]["spans"][1:]
    assert set(result.advantages[0, s2:e2].tolist()) == set(result.advantages[0, s3:e3].tolist())
    assert result.advantages[0, 0] > result.advantages[0, s2]
