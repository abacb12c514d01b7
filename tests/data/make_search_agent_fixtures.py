"""Write the search-agent fixtures of tests/test_search_r1.py from public layouts and real passages.

    python tests/data/make_search_agent_fixtures.py

The passages are paragraphs of the bundled 2Wiki corpus (examples/data/hipporag_2wikimultihopqa_corpus.json,
HippoRAG, MIT), picked by title; the question is 2Wiki dev's "Where was the father of Ștefan I.
Nenițescu born?" (gold Galați; its supporting paragraphs are the first two below). Every layout is
written here as the recipes' public code writes it, with no factutil code:

- Search-R1: its instruct prompt template; after a search ``\\n\\n<information>`` + the retriever's
  text stripped + ``</information>\\n\\n``, the text ``Doc i(Title: "T") text\\n`` per passage (the
  title is the first line of the corpus' ``contents``, quoted as stored); an observation cut to its
  budget loses ``</information>`` and ends mid-word; a turn with neither search nor answer gets
  ``\\nMy previous action is invalid. ... Let me try again.\\n``.
- verl's search tool: ``json.dumps({"result": text})`` where text is ``Doc i (Title: "T")\\ntext\\n\\n``
  per passage, stripped, one part per query joined by ``\\n---\\n``; a response longer than the
  tool's limit (256 characters) keeps its first and last 128 with ``...(truncated)...`` between.
- Search-R1's retrieval server: ``{"result": [[{"document": {"id", "contents"}, "score"}]]}``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[1] / "examples" / "data" / "hipporag_2wikimultihopqa_corpus.json"
QUESTION = "Where was the father of Ștefan I. Nenițescu born?"
GOLD = ["Galați"]
TITLES = {  # name in the tests -> corpus title
    "G1": "Ștefan I. Nenițescu", "G2": "Ioan S. Nenițescu", "D1": "Dinu Cocea",
    "D2": "Gheorghe Vitanidis", "D3": "Jean Negulesco", "D4": "Palace of Justice, Cluj-Napoca",
    "D5": "Princess Xenia Georgievna of Russia",
}
PROMPT = (  # Search-R1's instruct template (make_prefix, template_type "base")
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can "
    "call a search engine by <search> query </search> and it will return the top searched results "
    "between <information> and </information>. You can search as many times as your want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    f"Question: {QUESTION}\n"
)
INVALID = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n"
)


def contents(name: str) -> str:
    """The passage as a Search-R1 corpus stores it: the quoted title, a newline, the text."""
    return f'"{TITLES[name]}"\n{DOCS[TITLES[name]]}'


def search_r1_information(names: list[str], cut: int | None = None) -> str:
    """Search-R1's ``_passages2string`` in its ``<information>`` block; ``cut``: keep that many
    characters of the block (the observation budget), losing its closing tag."""
    text = ""
    for rank, name in enumerate(names, start=1):
        title, _, body = contents(name).partition("\n")
        text += f"Doc {rank}(Title: {title}) {body}\n"
    block = f"\n\n<information>{text.strip()}</information>\n\n"
    return block if cut is None else block[:cut]


def verl_tool(queries: list[list[str]], limit: int | None = None) -> str:
    """verl's search tool answer for one call with several queries; ``limit``: its middle cut."""
    parts = []
    for names in queries:
        text = ""
        for rank, name in enumerate(names, start=1):
            title, _, body = contents(name).partition("\n")
            text += f"Doc {rank} (Title: {title})\n{body}\n\n"
        parts.append(text.strip())
    answer = json.dumps({"result": "\n---\n".join(parts)})
    if limit is not None and len(answer) > limit:
        answer = answer[: limit // 2] + "...(truncated)..." + answer[-(limit // 2):]
    return answer


def server_reply(names: list[str]) -> str:
    return json.dumps({"result": [[
        {"document": {"id": str(IDS[TITLES[name]]), "contents": contents(name)},
         "score": round(20.0 - rank, 2)} for rank, name in enumerate(names)]]}, ensure_ascii=False)


def turn(thought: str, query: str) -> str:
    return f"<think>{thought}</think>\n<search> {query} </search>"


def answer(thought: str, text: str) -> str:
    return f"<think>{thought}</think>\n<answer> {text} </answer>"


def main() -> None:
    rollouts = {  # rollout_id -> the whole response
        # right: G1 (rank 1) with D1, D2; then G2 and D3
        "r0": turn("I need the father of Ștefan I. Nenițescu.", "Ștefan I. Nenițescu father")
              + search_r1_information(["G1", "D1", "D2"])
              + turn("His father is Ioan S. Nenițescu; where was he born?", "Ioan S. Nenițescu born")
              + search_r1_information(["G2", "D3"])
              + answer("Ioan S. Nenițescu was born in Galați.", "Galați"),
        # right: G1 at rank 2; then G2 whole and D5 cut mid-word with the closing tag (budget)
        "r1": turn("Who was his father?", "Nenițescu poet parents")
              + search_r1_information(["D4", "G1"])
              + turn("Now the father's birthplace.", "Ioan S. Nenițescu")
              + search_r1_information(["G2", "D5"], cut=len(search_r1_information(["G2"])) + 60)
              + answer("He was born in Galați.", "Galați"),
        # wrong: D1 and D4; a turn with no tag gets the notice; a wrong answer
        "r2": turn("Let me search.", "Romanian poet father birthplace")
              + search_r1_information(["D1", "D4"])
              + "<think>Maybe it is Bucharest.</think>" + INVALID
              + answer("I will guess.", "Bucharest"),
        # wrong: D2 only
        "r3": turn("Search the film director.", "Gheorghe Vitanidis")
              + search_r1_information(["D2"])
              + answer("Not found.", "Cluj-Napoca"),
    }
    lines = [{"uid": "nenitescu", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rid,
              "prompt": PROMPT, "response": response} for rid, response in rollouts.items()]
    (HERE / "search_r1_responses.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")

    # The same group through verl's search tool: each call one or two queries, as per-action items
    def search(query: str, observation: str) -> dict:
        return {"action": "search", "query": query, "observation": observation}

    verl = {
        "r0": [search("Ștefan I. Nenițescu father", verl_tool([["G1", "D1", "D2"]])),
               search("Ioan S. Nenițescu born", verl_tool([["G2"], ["D3"]])),
               {"action": "answer", "answer": "Galați"}],
        "r1": [search("Nenițescu poet parents", verl_tool([["D4", "G1"]])),
               search("Ioan S. Nenițescu", verl_tool([["G2"]])),
               {"action": "answer", "answer": "Galați"}],
        "r2": [search("Romanian poet father birthplace", verl_tool([["D1"], ["D4"]])),
               {"raw": "<think>Maybe it is Bucharest.</think>"},
               {"action": "answer", "answer": "Bucharest"}],
        "r3": [search("Gheorghe Vitanidis", verl_tool([["D2"]])),
               {"action": "answer", "answer": "Cluj-Napoca"}],
    }
    lines = [{"uid": "nenitescu", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rid,
              "actions": actions} for rid, actions in verl.items()]
    (HERE / "verl_search_tool.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")

    # The same group as whole responses of verl's tool agent loop, decoded with Qwen's chat
    # template (its role markers kept): each search a <tool_call> (one query per result part),
    # each answer a <tool_response> in a user turn; r2's turn with no call gets the notice
    def tool_turn(queries: list[str], names: list[list[str]]) -> str:
        call = json.dumps({"name": "search", "arguments": {"query_list": queries}}, ensure_ascii=False)
        return (f"<tool_call>\n{call}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                f"{verl_tool(names)}\n</tool_response><|im_end|>\n<|im_start|>assistant\n")

    def tool_answer(text: str) -> str:
        return f"<answer> {text} </answer><|im_end|>"

    tool = {
        "r0": tool_turn(["Ștefan I. Nenițescu father"], [["G1", "D1", "D2"]])
              + tool_turn(["Ioan S. Nenițescu born", "Ioan S. Nenițescu"], [["G2"], ["D3"]])
              + tool_answer("Galați"),
        "r1": tool_turn(["Nenițescu poet parents"], [["D4", "G1"]])
              + tool_turn(["Ioan S. Nenițescu"], [["G2"]]) + tool_answer("Galați"),
        "r2": tool_turn(["Romanian poet", "father birthplace"], [["D1"], ["D4"]])
              + "<think>Maybe it is Bucharest.</think><|im_end|>\n<|im_start|>user\n" + INVALID
              + "<|im_end|>\n<|im_start|>assistant\n" + tool_answer("Bucharest"),
        "r3": tool_turn(["Gheorghe Vitanidis"], [["D2"]]) + tool_answer("Cluj-Napoca"),
    }
    lines = [{"uid": "nenitescu", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rid,
              "response": response} for rid, response in tool.items()]
    (HERE / "verl_tool_responses.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")

    # verl's default limit (256) leaves no whole passage; 40 characters cut out of the middle
    # (which falls in D2) leave D1 and D3 whole
    queries = [["D1", "D2"], ["D3"]]
    extra = {"verl_cut_default": verl_tool(queries, limit=256),
             "verl_cut_middle": verl_tool(queries, limit=len(verl_tool(queries)) - 40),
             "server_reply": server_reply(["G1", "D3"])}
    (HERE / "search_agent_observations.json").write_text(
        json.dumps(extra, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


_CORPUS = json.loads(CORPUS.read_text(encoding="utf-8"))
DOCS = {doc["title"]: doc["text"] for doc in _CORPUS}
IDS = {doc["title"]: index for index, doc in enumerate(_CORPUS)}

if __name__ == "__main__":
    main()
