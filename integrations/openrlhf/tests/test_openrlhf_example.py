"""examples/openrlhf: the FactAgent environment, and the agent file loaded the way OpenRLHF does."""

from __future__ import annotations

import asyncio
import json
import runpy
import sys
from pathlib import Path

import pytest
from openrlhf_testkit import ScriptedEngine, ToyTokenizer, _SamplingParams

from factutil.tools.retrieval import RetrievalClient, SearchResult

ROOT = Path(__file__).resolve().parents[3]
AGENT_FILE = ROOT / "examples" / "openrlhf" / "factagent_agent.py"


@pytest.fixture(scope="module")
def agent():
    """The agent file's functions without OpenRLHF (as ``python factagent_agent.py`` sees them)."""
    return runpy.run_path(str(AGENT_FILE), run_name="factagent_check")


class Scripted:
    """A retriever: one passage named after the query, every query logged."""

    def __init__(self, log: list[str] | None = None, fail: bool = False):
        self.log = [] if log is None else log
        self.fail = fail

    def search(self, query: str) -> SearchResult:
        self.log.append(query)
        if self.fail:
            return SearchResult("Search failed: connection refused.", "connection refused", 0.0)
        return SearchResult(f"Doc 1 (Title: {query}) text about {query}", None, 0.0)


def test_environment_runs_search_assert_answer(agent):
    queries: list[str] = []
    env = agent["FactAgentEnv"](["Paris"], Scripted(queries), max_turns=8)

    async def play():
        return [
            await env.step('{"action": "search", "query": "capital of France"}'),
            await env.step('<assert>France | capital | Paris</assert>'),
            await env.step("I think it is"),
            await env.step('{"action": "answer", "answer": "paris"}'),
        ]

    search, store, invalid, answer = asyncio.run(play())
    assert queries == ["capital of France"]
    assert search.feedback == "\nSearch result:\nDoc 1 (Title: capital of France) text about capital of France\n"
    assert not search.done
    assert store.feedback == "\nFact store:\n- France | capital | Paris\n"
    assert invalid.feedback == "\nInvalid action (no action found). Reply with one JSON action.\n"
    assert answer.done and answer.reward == 1.0 and answer.feedback == ""


def test_environment_outcome_rules(agent):
    env = agent["FactAgentEnv"](["Paris"], Scripted(), max_turns=2)
    result = asyncio.run(env.step('{"action": "answer", "answer": "Paris"}'))
    assert result.done and result.reward == 0.0  # an answer from an empty store (docs/method.md §4)
    env = agent["FactAgentEnv"](["Paris"], Scripted(), max_turns=2)

    async def two_searches():
        await env.step('{"action": "search", "query": "a"}')
        return await env.step('{"action": "search", "query": "b"}')

    last = asyncio.run(two_searches())
    assert last.done and last.reward == 0.0 and last.feedback == ""  # turn limit, no answer


def test_retrieval_failure_is_fed_back_not_raised(agent):
    env = agent["FactAgentEnv"](["x"], Scripted(fail=True))
    result = asyncio.run(env.step('{"action": "search", "query": "q"}'))
    assert "Search failed: connection refused." in result.feedback
    assert result.logs["retrieval_errors"] == 1.0


def test_agent_settings_validate(agent):
    settings = agent["agent_settings"]({"FACTUTIL_MAX_TURNS": "5", "FACTAGENT_TOPK": "4"})
    assert settings == {"url": "http://127.0.0.1:8000/retrieve", "topk": 4, "turn_format": "plain", "max_turns": 5}
    with pytest.raises(ValueError, match="FACTAGENT_TOPK"):
        agent["agent_settings"]({"FACTAGENT_TOPK": "0"})
    with pytest.raises(ValueError, match="FACTUTIL_MAX_TURNS"):
        agent["agent_settings"]({"FACTUTIL_MAX_TURNS": "0"})


def test_openrlhf_loads_the_agent_file_and_the_payload_is_recorded(openrlhf, monkeypatch):
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    monkeypatch.setenv("FACTUTIL_MAX_TURNS", "4")
    executor = _load_agent_executor(str(AGENT_FILE))  # OpenRLHF's own loader
    assert isinstance(executor, openrlhf.agent.MultiTurnAgentExecutor)
    instance_cls = executor.agent_instance_cls.__mro__[1]
    monkeypatch.setitem(instance_cls.reset.__globals__, "RetrievalClient", lambda url, topk: Scripted())
    texts = [
        '{"action": "search", "query": "Polish-Russian War director"}',
        '{"action": "assert", "facts": [["Polish-Russian War", "director", "Xawery Żuławski"]]}',
        '{"action": "answer", "answer": "Xawery Żuławski"}',
    ]
    tokenizer = ToyTokenizer()
    response = asyncio.run(
        executor.execute("Question: who?\n", json.dumps(["Xawery Żuławski"]), _SamplingParams(), 2048,
                         tokenizer, ScriptedEngine(texts, tokenizer))
    )
    payload = response["factutil"]
    assert [a["action"] for a in payload["actions"]] == ["search", "assert", "answer"]
    assert payload["spans"] == [list(r) for r in response["action_ranges"]]
    assert response["reward"] == 1.0 and payload["done"]
    assert "Search result:\nDoc 1 (Title: Polish-Russian War director)" in tokenizer.decode(
        response["observation_tokens"])


def test_make_prompts_writes_one_line_per_question(tmp_path):
    sys.path.insert(0, str(ROOT / "examples" / "openrlhf"))
    try:
        import make_prompts
    finally:
        sys.path.pop(0)
    out = tmp_path / "p.jsonl"
    assert make_prompts.main(["-o", str(out), "--max-turns", "6"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 30
    assert json.loads(rows[0]["label"]) == ["Małgorzata Braunek"]
    assert "at most 6 actions" in rows[0]["prompt"] and rows[0]["prompt"].endswith("(Film)?")


def test_check_mode_against_the_repository_retrieval_server(agent, capsys):
    """The agent's check mode, end to end over HTTP on 127.0.0.1, against factutil.tools.retrieval."""
    pytest.importorskip("bm25s")
    server = pytest.importorskip("factutil.tools.retrieval.server", reason="needs the retrieval extra")
    from factutil.tools.retrieval import DEFAULT_CORPUS, BM25Retriever, load_corpus

    with server.running_server(BM25Retriever(load_corpus(DEFAULT_CORPUS))) as url:
        assert agent["check"](["--retriever-url", url]) == 0
        out = capsys.readouterr().out
        assert "[1] search: 'Search result:\\nDoc 1 (Title:" in out and "retrieval errors: 0" in out
        # The same BM25 over the same corpus that built the sample: identical passages.
        first = json.loads((ROOT / "examples/data/2wiki_rollouts.jsonl").read_text(encoding="utf-8").splitlines()[0])
        search = first["actions"][0]
        assert RetrievalClient(url, topk=3).search(search["query"]).observation == search["observation"]
