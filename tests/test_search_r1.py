"""Search-R1 as users have it (docs/method.md §9): whole responses, the retrieved-block layouts of
the common recipes, cut observations, and the per-passage credit of facts="retrieved".

The fixtures in tests/data are written by tests/data/make_search_agent_fixtures.py from the public
layouts (Search-R1's prompt template and ``<information>`` block, verl's search tool JSON, Search-R1's
retrieval-server JSON) with real paragraphs of the bundled 2Wiki corpus. Every credit below is
worked by hand from docs/method.md §3–§5, not read from the code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from factutil import FactUtilConfig, InputError, compute_process_advantages
from factutil.cli import app
from factutil.parse import parse_action
from factutil.passages import passage_key, passage_parts
from factutil.search_r1 import INVALID, TRUNCATED, Passage, split_passages, split_turns

DATA = Path(__file__).resolve().parent / "data"
CORPUS = {doc["title"]: doc["text"] for doc in json.loads(
    (Path(__file__).resolve().parents[1] / "examples/data/hipporag_2wikimultihopqa_corpus.json")
    .read_text(encoding="utf-8"))}
G1, G2, D1, D2, D3, D4 = ("Ștefan I. Nenițescu", "Ioan S. Nenițescu", "Dinu Cocea",
                          "Gheorghe Vitanidis", "Jean Negulesco", "Palace of Justice, Cluj-Napoca")


def lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


# y = (1, 1, 0, 0): r0 and r1 answer Galați, r2 and r3 do not; p-bar = 1/2. Prior "group",
# epsilon 1/2: u = sum over holders of (y - 1/2) / (n + 1).
#   G1 (r0, r1): (1/2 + 1/2) / 3 = 1/3; G2 (r0, r1): 1/3; D3 (r0 alone): (1/2) / 2 = 1/4;
#   D1 (r0, r2), D2 (r0, r3), D4 (r1, r2): (1/2 - 1/2) / 3 = 0. r1's second block is cut after
#   G2: the passage cut mid-word (D5) is dropped.
# Shaping F = tanh(sum u of the store after) - tanh(sum u before), on the search that brought it.
U = 1 / 3
SHAPING = {
    "r0": [math.tanh(U), math.tanh(2 * U + 0.25) - math.tanh(U), 0.0],
    "r1": [math.tanh(U), math.tanh(2 * U) - math.tanh(U), 0.0],
    "r2": [0.0, 0.0, 0.0],
    "r3": [0.0, 0.0],
}
PENALTY = {"r0": [0.0] * 3, "r1": [0.0] * 3, "r2": [0.0, -0.1, 0.0], "r3": [0.0] * 2}
KINDS = {"r0": ["search", "search", "answer"], "r1": ["search", "search", "answer"],
         "r2": ["search", "invalid", "answer"], "r3": ["search", "answer"]}
# A_out = (R - 1/2) / (std + 1e-6), std (ddof 1) of (1, 1, 0, 0) = sqrt(1/3); A = A_out + r / 2
A_OUT = {rid: (0.5 if rid in ("r0", "r1") else -0.5) / (math.sqrt(1 / 3) + 1e-6) for rid in KINDS}


def expected_advantages(rid: str) -> list[float]:
    return [A_OUT[rid] + 0.5 * (f + p) for f, p in zip(SHAPING[rid], PENALTY[rid])]


def test_a_file_of_whole_search_r1_responses_scores_every_doc_by_hand(tmp_path):
    """``factutil score FILE --set facts=retrieved`` on whole Search-R1 responses: each turn is an
    action, every Doc i of every <information> block a passage, and the shaping lands on the
    search that retrieved the passages the successful rollouts share."""
    out = tmp_path / "credit.jsonl"
    done = CliRunner().invoke(app, ["score", str(DATA / "search_r1_responses.jsonl"), "-o", str(out),
                                    "--set", "facts=retrieved"])
    assert done.exit_code == 0, done.output
    scored = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for rid, kinds in KINDS.items():
        mine = [line for line in scored if line["rollout_id"] == rid]
        assert [line["action"] for line in mine] == kinds
        assert [line["shaping"] for line in mine] == pytest.approx(SHAPING[rid], abs=1e-12)
        assert [line["penalty"] for line in mine] == pytest.approx(PENALTY[rid], abs=1e-12)
        assert [line["advantage"] for line in mine] == pytest.approx(expected_advantages(rid),
                                                                     abs=1e-6)
        assert not any(line["back_credit"] for line in mine)
    assert "no action found" in [line["invalid_reason"] for line in scored if line["rollout_id"] == "r2"]


def test_the_passages_and_their_counts_in_the_api():
    result = compute_process_advantages(lines("search_r1_responses.jsonl"),
                                        FactUtilConfig(facts="retrieved"))
    # six distinct passages (members: title, "", text as the corpus holds it)
    members = {member[0]: member[2] for cluster in result.clusters for member in cluster.members}
    assert members == {title: CORPUS[title] for title in (G1, G2, D1, D2, D3, D4)}
    utilities = {cluster.members[0][0]: cluster.utility for cluster in result.clusters}
    assert utilities == pytest.approx({G1: U, G2: U, D3: 0.25, D1: 0.0, D2: 0.0, D4: 0.0}, abs=1e-12)
    assert sorted((c.members[0][0], c.n) for c in result.clusters) == sorted(
        [(G1, 2), (G2, 2), (D1, 2), (D2, 2), (D3, 1), (D4, 2)])
    # 12 "Doc i" headers: 11 whole passages, 1 cut at the observation budget (counted, warned once)
    assert result.metrics["passages_cut"] == 1
    assert result.metrics["observations_unsplit"] == result.metrics["passages_empty"] == 0
    assert sum("1 passage(s) cut short" in warning for warning in result.warnings) == 1


def test_verl_search_tool_json_gives_the_same_passages_and_credit():
    """The same group as verl's search tool answers it (JSON, two queries of a call joined by a
    --- line, the passage's layout "Doc i (Title: T)\\ntext"): the same facts, bit for bit the same
    advantages (r2's invalid turn here a raw item: the same penalty)."""
    config = FactUtilConfig(facts="retrieved")
    text = compute_process_advantages(lines("search_r1_responses.jsonl"), config)
    verl = compute_process_advantages(lines("verl_search_tool.jsonl"), config)
    assert verl.metrics["passages_cut"] == 0
    assert verl.advantages.tolist() == text.advantages.tolist()
    for rid in KINDS:
        assert verl.per_rollout("shaping")[("nenitescu", rid)].tolist() == pytest.approx(
            SHAPING[rid], abs=1e-12)


def test_verl_tool_agent_responses_give_the_same_kinds_passages_and_credit():
    """The same group as whole responses of verl's tool agent loop, decoded with Qwen's role
    markers: each ``<tool_call>`` of the search tool is a search (its query list joined by "; "),
    each ``<tool_response>`` its passages, the markers around them no turn of their own. So the
    kinds, the shaping worked by hand above and the advantages are the Search-R1 text's."""
    config = FactUtilConfig(facts="retrieved")
    text = compute_process_advantages(lines("search_r1_responses.jsonl"), config)
    tool = compute_process_advantages(lines("verl_tool_responses.jsonl"), config)
    assert [a.action for a in tool.actions] == [kind for rid in KINDS for kind in KINDS[rid]]
    assert [a["query"] for a in tool.groups[0].rollouts[0]["actions"] if a["action"] == "search"] == [
        "Ștefan I. Nenițescu father", "Ioan S. Nenițescu born; Ioan S. Nenițescu"]
    assert tool.metrics["observations_unread"] == 0 and tool.metrics["passages_cut"] == 0
    assert tool.advantages.tolist() == text.advantages.tolist()
    for rid in KINDS:
        assert tool.per_rollout("shaping")[("nenitescu", rid)].tolist() == pytest.approx(
            SHAPING[rid], abs=1e-12)


def test_parallel_tool_calls_get_one_tool_response_each():
    """Two tool calls in one message are answered by two ``<tool_response>`` blocks in one user
    turn: the first block is the first call's, the second the second's (a block answers the
    first turn since the last block)."""
    def call(query: str) -> str:
        return f'<tool_call>\n{{"name": "search", "arguments": {{"query_list": ["{query}"]}}}}\n</tool_call>'

    def reply(title: str) -> str:
        return "<tool_response>\n" + json.dumps({"result": f'Doc 1 (Title: "{title}")\n{title} text'}) + \
            "\n</tool_response>"

    response = (f"{call('q1')}\n{call('q2')}<|im_end|>\n<|im_start|>user\n{reply('A')}\n{reply('B')}"
                "<|im_end|>\n<|im_start|>assistant\n<answer>A</answer><|im_end|>")
    turns = split_turns(response)
    assert [(parse_action(t).action, [p.title for p in split_passages(o).passages] if o else None)
            for t, o in turns] == [("search", ["A"]), ("search", ["B"]), ("answer", None)]


def test_a_text_of_several_blocks_is_read_block_by_block():
    """The replies of parallel tool calls as one observation (the blocks with the chat template
    between them): each block is split as it would be alone, its drops counted. By hand: the
    first reply holds A and a passage its JSON string is cut inside (cut 1), the second a blank
    passage and B (empty 1), the third no header (unsplit 1, one passage)."""
    cut = json.dumps({"result": 'Doc 1 (Title: "A")\nA text\n\nDoc 2 (Title: "C")\nC te'})[:-2]
    blank = json.dumps({"result": 'Doc 1 (Title: "")\n \n\nDoc 2 (Title: "B")\nB text'})
    text = (f"<|im_end|>\n<|im_start|>user\n<tool_response>{cut}</tool_response>\n<tool_response>{blank}"
            "</tool_response>\n<information>plain words</information><|im_end|>\n<|im_start|>assistant\n")
    found = split_passages(text)
    assert [(p.title, p.text) for p in found.passages] == [("A", "A text"), ("B", "B text"), ("", "plain words")]
    assert (found.unsplit, found.cut, found.empty) == (1, 1, 1)
    assert split_passages(text, ("search_r1",)).passages == found.passages  # the verl JSON is read whatever the layouts


def test_a_tag_inside_a_passages_text_is_text():
    """A block whose passage quotes a block's tag, or a text holding a closed pair of them, is one
    block: its passages are the headers' (as the same text without the tag gives), none cut."""
    for text in [('<information>Doc 1(Title: "HTML") The tag <result> wraps.\nDoc 2(Title: "B") B text'
                 "</information>"), 'Doc 1(Title: "HTML") The tag <result>x</result> wraps.\nDoc 2(Title: "B") B text',
                 "<tool_response>" + json.dumps({"result": 'Doc 1 (Title: "HTML")\nThe tag <result> wraps.'
                                                          '\n\nDoc 2 (Title: "B")\nB text'}) + "</tool_response>"]:
        found = split_passages(text)
        assert [p.title for p in found.passages] == ["HTML", "B"], text
        assert found.passages[0].text.startswith("The tag <result>") and found.passages[1].text == "B text"
        assert (found.unsplit, found.cut, found.empty) == (0, 0, 0)


def test_a_block_answers_the_first_unanswered_turn_that_ends_as_the_last_one():
    """Asserts get no block (FactAgent's protocol): a block after asserts and a search is the
    search's. A <search> turn verl never ran, then a tool call: the block is the tool call's."""
    def titles(response: str) -> list:
        return [(parse_action(t).action, [p.title for p in split_passages(o).passages] if o else None)
                for t, o in split_turns(response)]

    block = '<information>Doc 1(Title: "{0}") {0} text</information>'
    facts = ('<search>a</search>\n' + block.format("A") + '<assert>[["x", "y", "z"]]</assert>'
             '<assert>[["u", "v", "w"]]</assert><search>b</search>\n' + block.format("B"))
    assert titles(facts) == [("search", ["A"]), ("assert", None), ("assert", None), ("search", ["B"])]
    tool = ('<search>capital of Germany</search>\n<tool_call>{"name": "search", "arguments": '
            '{"query_list": ["capital of France"]}}</tool_call>\nuser\n<tool_response>'
            + json.dumps({"result": 'Doc 1 (Title: "Paris")\nParis text'}) + "</tool_response>")
    assert titles(tool) == [("search", None), ("search", ["Paris"])]
    assert parse_action(split_turns(tool)[1][0]).query == "capital of France"


def test_a_tool_call_of_another_tool_or_with_no_query_is_an_invalid_action():
    calls = {'{"name": "calculator", "arguments": {"expression": "1+1"}}': "tool call that is no search",
             '{"name": "search", "arguments": {"query_list": []}}': "tool call that is no search",
             '{"name": "search", "arguments": {"query_list": [3]}}': "tool call that is no search",
             '{"name": "search", "arguments": {"query_list": ["  "]}}': "search with an empty query",
             '{"name": "search", "arguments": {"query": "x"}}': "tool call that is no search",  # verl: an error
             '{"name": "search", "arguments": {"query": "x"': "malformed JSON"}
    for call, reason in calls.items():
        action = parse_action(f"<tool_call>{call}</tool_call>")
        assert action.action == "invalid" and action.reason.startswith(reason), (call, action)
    assert parse_action('<tool_call>{"name": "search", "arguments": {"query_list": [" x "]}}</tool_call>').query == "x"


def test_a_passage_is_one_fact_whatever_its_layout_rank_or_neighbour():
    title, text = G1, CORPUS[G1]
    other = f'Doc 1(Title: "{D1}") {CORPUS[D1]}\n'
    layouts = [
        f'Doc 1(Title: "{title}") {text}\n',  # Search-R1
        f'<information>{other}Doc 2(Title: "{title}") {text}</information>',  # rank 2, tag glued
        json.dumps({"result": f'Doc 1 (Title: "{title}")\n{text}\n---\nDoc 1 (Title: "{D1}")\n'
                              f'{CORPUS[D1]}'}),  # verl, last before the separator
        f'Doc 1 (Title: {title}) {text}',  # factutil's retrieval client
        f'Doc 1: "{title}"\n{text}',  # Doc i: contents
        json.dumps({"result": [[{"document": {"contents": f'"{title}"\n{text}'}, "score": 1.2}]]}),
        f"<|begin_of_documents|>\n{other}Doc 2 (Title: {title})\n{text}\n<|end_of_documents|>",
    ]
    keys = set()
    for observation in layouts:
        found = split_passages(observation)
        assert not found.unsplit and not found.cut
        keys.add(next(passage_key(passage_parts(p)) for p in found.passages if p.title == title))
    assert len(keys) == 1
    # an id decides identity when one is given
    with_id = split_passages(f'Doc 1(docid: 4738, Title: "{title}") {text}').passages[0]
    assert passage_key(passage_parts(with_id)) == "id:4738"
    served = json.loads((DATA / "search_agent_observations.json").read_text(encoding="utf-8"))
    assert [(p.id, p.title) for p in split_passages(served["server_reply"]).passages] == [
        ("4738", G1), ("1284", D3)]


def test_cut_observations_keep_their_whole_passages_and_count_the_cut_one():
    served = json.loads((DATA / "search_agent_observations.json").read_text(encoding="utf-8"))
    # verl's middle cut (its "...(truncated)..." inside D2): D1 and D3 are whole, D2 is not
    middle = split_passages(served["verl_cut_middle"])
    assert [(p.title, p.text) for p in middle.passages] == [(D1, CORPUS[D1]), (D3, CORPUS[D3])]
    assert middle.cut == 1
    # verl's default limit of 256 characters leaves no whole passage
    assert split_passages(served["verl_cut_default"])[:3] == ([], False, 1)
    # Search-R1's budget: no closing tag, the last passage cut mid-word
    block = f'<information>Doc 1(Title: "{D1}") {CORPUS[D1]}\nDoc 2(Title: "{D2}") {CORPUS[D2][:40]}'
    assert [p.title for p in split_passages(block).passages] == [D1]
    assert split_passages(block).cut == 1
    # a retrieval-server reply cut short keeps the documents that are whole
    reply = served["server_reply"]
    assert [p.id for p in split_passages(reply[: len(reply) - 30]).passages] == ["4738"]


def test_empty_and_invisible_passages_are_no_fact_and_are_counted():
    observation = (f'Doc 1(Title: "") \u200b\u2060 \nDoc 2(Title: "{D1}") {CORPUS[D1]}\n'
                   'Doc 3(Title: "")  \n')
    found = split_passages(observation)
    assert [p.title for p in found.passages] == [D1] and found.empty == 2
    rollout = {"uid": "q", "question": "?", "golden_answers": ["Galați"], "rollout_id": "a",
               "actions": [{"action": "search", "query": "x", "observation": observation},
                           {"action": "answer", "answer": "Galați"}]}
    result = compute_process_advantages([rollout], FactUtilConfig(facts="retrieved"))
    assert result.metrics["passages_empty"] == 2 and len(result.clusters) == 1
    assert any("2 empty dropped" in warning for warning in result.warnings)


def test_the_response_forms_and_the_per_action_forms_read_alike():
    response = lines("search_r1_responses.jsonl")[0]
    base = {key: response[key] for key in ("uid", "question", "golden_answers", "rollout_id")}
    block = response["response"].split("<information>", 1)[1].split("</information>", 1)[0]
    first_turn = response["response"].split("\n\n<information>", 1)[0]
    forms = [
        {**base, "response": response["response"]},
        {**base, "actions": [{"raw": response["response"]}]},  # one raw item: the whole response
    ]
    config = FactUtilConfig(facts="retrieved")
    results = [compute_process_advantages([form], config) for form in forms]
    assert [[a.action for a in r.actions] for r in results] == [["search", "search", "answer"]] * 2
    assert results[0].advantages.tolist() == results[1].advantages.tolist()
    # a raw item among others reads the block that follows its turn; a given observation wins
    mixed = {**base, "actions": [{"raw": first_turn + f"\n\n<information>{block}</information>"},
                                 {"raw": "<answer> Galați </answer>"}]}
    given = {**base, "rollout_id": "b",
             "actions": [{"raw": first_turn, "observation": block}, {"action": "answer",
                                                                     "answer": "Galați"}]}
    both = compute_process_advantages([mixed, given], config)
    assert [c.n for c in both.clusters] == [2, 2, 2]


def test_turns_of_a_whole_response():
    notice = f"\n{INVALID}\n"
    response = ('<think>a</think>\n<search> q1 </search>\n\n<information>Doc 1(Title: "A") a'
                '</information>\n\n<think>no tag</think>' + notice
                + "<search>q2</search>\n\n<information>" + notice.strip() + "</information>\n\n"
                + "<search> q3 </search>\n\n<information>Doc 1(Title: \"B\") cut he"
                + "<think>ok</think>\n<answer> x </answer> trailing words")
    assert split_turns(response) == [
        ('<think>a</think>\n<search> q1 </search>', 'Doc 1(Title: "A") a'),
        ("\n\n<think>no tag</think>\n", None),
        ("\n<search>q2</search>", None),  # the notice inside a block is no observation
        ("\n\n<search> q3 </search>", '<information>Doc 1(Title: "B") cut he'),
        ("<think>ok</think>\n<answer> x </answer>", None),
        (" trailing words", None),
    ]
    # the prompt's own tags are not the response's: a rollout carries its prompt as metadata, and
    # a text that holds it through a chat template is read from the assistant's turn on
    row = lines("search_r1_responses.jsonl")[0]
    assert "<search> query </search>" in row["prompt"]
    assert len(split_turns(row["response"])) == 3
    for template in ("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
                     ("<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n"),
                     "<bos><start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",  # Gemma
                     "<|endoftext|>" * 3 + "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",  # padded
                     # decoded without special tokens: role names alone (Qwen, Llama 3, Gemma)
                     "system\nYou are a helpful assistant.\nuser\n{}\nassistant\n",
                     "system\n\nCutting Knowledge Date: December 2023\n\nuser\n\n{}\nassistant\n\n",
                     "user\n{}\nmodel\n"):
        whole = template.format(row["prompt"]) + row["response"]
        assert split_turns(whole) == split_turns(row["response"])
    # a response that holds later chat turns (an agent whose feedback is a user turn) keeps its first
    chat = '<search>q</search><|im_end|>\n<|im_start|>assistant\n<answer>a</answer>'
    assert [text for text, _ in split_turns(chat)] == ["<search>q</search>",
                                                      "<|im_end|>\n<|im_start|>assistant\n<answer>a</answer>"]


@pytest.mark.parametrize("message", [
    "Search error: HTTPConnectionPool(host='127.0.0.1', port=8000): Read timed out.",
    "Search request failed or timed out after retries.", "No search results found.",
    "Unknown API state (no response and no error message).",
    "Error processing search results: 'document'",
    "Error: 'query_list' is missing, empty, or not a list in parameters."])
def test_verl_search_tool_messages_are_no_passages(message):
    """verl's search tool answers a failed or empty search with a message in its result: no
    passage, alone or as one query's part beside another's passages."""
    assert split_passages(json.dumps({"result": message})) == ([], False, 0, 0)
    both = json.dumps({"result": f'Doc 1 (Title: "A")\na text\n---\n{message}'})
    assert [p.title for p in split_passages(both).passages] == ["A"]


def test_a_block_cut_inside_a_header_keeps_the_passages_before_it():
    """Search-R1 cuts an observation to its token budget, closing tag and all: cut inside the next
    passage's header, every passage before it is whole (one passage cut, counted)."""
    block = '<information>Doc 1(Title: "Paris") Paris is the capital of France.\nDoc 2(Title: "Lyon") Lyon.'
    for end in ("\nD", "\nDoc 2", '\nDoc 2(Title: "Ly'):
        cut = block[: block.index("\nDoc 2")] + end
        assert split_passages(cut) == ([Passage("", "Paris", "Paris is the capital of France.")], False, 1, 0)


def test_a_verl_tail_that_starts_at_a_cut_escape_keeps_its_whole_passages():
    """verl's middle cut can leave the tail starting at an escaped quote whose backslash was cut
    off: the tail's cut passage is dropped, the whole ones after it kept."""
    whole = json.dumps({"result": 'Doc 1 (Title: "A")\na\n\nDoc 2 (Title: "Lyon")\nLyon\n\n'
                                  'Doc 3 (Title: "Nice")\nNice is on the coast.'})
    cut = whole[:12] + TRUNCATED + whole[whole.index('"Lyon') :]  # the tail: "Lyon\")...
    assert split_passages(cut) == ([Passage("", "Nice", "Nice is on the coast.")], False, 1, 0)


@pytest.mark.parametrize("side", ["left", "right"])
def test_verl_cuts_at_either_end_keep_the_whole_passages(side):
    """verl's tool with ``tool_response_truncate_side`` left keeps the start (``text[:n] +
    "...(truncated)"``), right the end (``"(truncated)..." + text[-n:]``): the whole passages on
    the kept side stay, the one the cut went through is dropped (one cut)."""
    whole = json.dumps({"result": 'Doc 1 (Title: "Paris")\nParis text\n\nDoc 2 (Title: "Lyon")\nLyon '
                                  'text\n\nDoc 3 (Title: "Nice")\nNice text'})
    at = whole.index("Lyon te")
    cut = whole[:at] + "...(truncated)" if side == "left" else "(truncated)..." + whole[at:]
    kept = ["Paris"] if side == "left" else ["Nice"]
    found = split_passages(f"<tool_response>\n{cut}\n</tool_response>")
    assert ([p.title for p in found.passages], found.cut, found.unsplit) == (kept, 1, False)
    backslash = whole[: whole.index("Nice") - 1] + "...(truncated)"  # cut right after a backslash
    assert [p.title for p in split_passages(backslash).passages] == ["Paris", "Lyon"]


def test_research_boxed_answers_are_their_boxed_text():
    """ReSearch's agents answer "<answer>The final answer is \\[ \\boxed{X} \\]</answer>": X."""
    assert parse_action(r"<answer> The final answer is \[ \boxed{Paris} \] </answer>").answer == "Paris"
    assert parse_action(r"<answer>\boxed{a {b} c}</answer>").answer == "a {b} c"
    assert parse_action("<answer> Paris </answer>").answer == "Paris"


def test_r1_searcher_documents_as_its_agent_wrote_them():
    """A real R1-Searcher trajectory's retrieved block (tests/data/r1searcher_documents.txt):
    five passages numbered (1)..(5), each ``(k)Title   text`` (three spaces after the title), as
    its 2Wiki and Bamboogle rollouts write them; its HotpotQA rollouts write ``(k)Title: T Text:
    text`` (the lines below are two of shared/data's, cut short)."""
    block = (DATA / "r1searcher_documents.txt").read_text(encoding="utf-8")
    found = split_passages(block)
    assert len(found.passages) == 5 and not found.unsplit and not found.cut
    assert [p.title for p in found.passages] == ["Filippo Strozzi the Elder", "Barbara Strozzi",
                                                 "Strozzi family", "Leone Strozzi", "Ercole Strozzi"]
    assert found.passages[0].text.startswith("- Lorenzo (1482–1549), who founded")
    hotpot = ("<|begin_of_documents|>\n(1)Title: Irish Home Rule movement Text:  The Irish Home Rule "
              "movement was a movement.\n(2)\"Title: Mad City (film) Text:  Mad City is a 1997 film."
              "\n<|end_of_documents|>")
    assert [tuple(p)[1:] for p in split_passages(hotpot).passages] == [
        ("Irish Home Rule movement", "The Irish Home Rule movement was a movement."),
        ("Mad City (film)", "Mad City is a 1997 film.")]
    # other numbered headers keep their text whole: three spaces are no title there
    assert split_passages("[1] a   b\n[2] c").passages[0][1:] == ("", "a   b")


def test_r1_searcher_queries_are_searches_and_their_blocks_their_passages():
    """R1-Searcher writes ``<|begin_of_query|>q<|end_of_query|>`` (search-agent-formats.md), then
    the environment its block: the query turn is a search holding the block's five passages. With
    y = (1, 0), p-bar 1/2, each passage of r0 alone has u = (1/2)/(1 + 1) = 1/4 (prior "group",
    epsilon 1/2) and r1's one passage u = -1/4, so r0's search gains, r1's loses."""
    block = (DATA / "r1searcher_documents.txt").read_text(encoding="utf-8").strip()
    other = "<|begin_of_documents|>\n(1)Paris   Paris is the capital of France.\n<|end_of_documents|>"
    responses = {
        "r0": f"I need to search.\n<|begin_of_query|> Strozzi family<|end_of_query|>\n\n{block}\n\n"
              " <answer> Lorenzo </answer>",
        "r1": f"<|begin_of_query|> capital of France<|end_of_query|>\n\n{other}\n\n<answer> Paris </answer>",
    }
    rows = [{"uid": "q", "question": "Who?", "golden_answers": ["Lorenzo"], "rollout_id": rid,
             "response": text} for rid, text in responses.items()]
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert [a.action for a in result.actions] == ["search", "answer", "search", "answer"]
    assert [a["query"] for g in result.groups for r in g.rollouts for a in r["actions"]
            if a["action"] == "search"] == ["Strozzi family", "capital of France"]
    assert sorted(c.utility for c in result.clusters) == pytest.approx([-0.25] + [0.25] * 5)
    assert result.actions[0].shaping > 0 > result.actions[2].shaping
    assert result.metrics["observations_unread"] == 0 and result.warnings == []


@pytest.mark.parametrize(("line", "message"), [
    ({"response": 7}, "response must be a string, got 7"),
    ({"response": "<answer>x</answer>", "actions": []}, "either actions or response"),
    ({"actions": [{"raw": 5}]}, r"actions\[0\]\.raw: Input should be a valid string"),
    ({"actions": [{"raw": "<search>a</search>", "observation": 3}]},
     r"actions\[0\]\.observation: Input should be a valid string"),
])
def test_a_bad_response_is_an_error_naming_it(line, message):
    row = {"uid": "q", "question": "?", "golden_answers": ["x"], "rollout_id": "a", **line}
    with pytest.raises(InputError, match=message):
        compute_process_advantages([row], FactUtilConfig(facts="retrieved"))


def test_the_layouts_read_are_configuration():
    """``layouts`` names the layouts read (block tags and passage header): R1-Searcher's block
    read with every layout is five passages; read with Search-R1's alone, its tags are not a
    block's and "(1)" is no passage header, so it is one unsplit text; the group's facts follow."""
    block = (DATA / "r1searcher_documents.txt").read_text(encoding="utf-8")
    alone = split_passages(block, ("search_r1",))
    assert alone.unsplit and [p.text for p in alone.passages] == [block.strip()]
    assert len(split_passages(block, ("r1_searcher",)).passages) == 5
    # <information> with Doc i headers splits under Search-R1's layout whichever others are named
    two = '<information>Doc 1(Title: "A") one\nDoc 2(Title: "B") two</information>'
    assert [p.title for p in split_passages(two, ("search_r1",)).passages] == ["A", "B"]
    assert split_passages(two, ("r1_searcher",)).unsplit
    rows = [{"uid": "q", "question": "?", "golden_answers": ["x"], "rollout_id": rid, "actions": [
        {"action": "search", "query": "q", "observation": block},
        {"action": "answer", "answer": answer}]} for rid, answer in (("a", "x"), ("b", "y"))]
    every = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    narrow = compute_process_advantages(rows, FactUtilConfig(facts="retrieved", layouts=["search_r1"]))
    assert (len(every.clusters), len(narrow.clusters)) == (5, 1)
    assert narrow.metrics["observations_unsplit"] == 2
    assert FactUtilConfig(layouts="search_r1, research").layouts == ("search_r1", "research")  # --set
    for bad, message in ((["searchr1"], "layouts.0"), ([], "names no layout"),
                         ("research,research", "repeats a name")):
        with pytest.raises(ValueError, match=message):
            FactUtilConfig(layouts=bad)


def test_a_cut_r1_searcher_block_ends_where_the_next_query_opens():
    """An R1-Searcher documents block never closed ends at the next ``<|begin_of_query|>``, as a
    Search-R1 block ends at the next tag: the next search is a turn of its own, with its block."""
    response = ("<|begin_of_query|> q1<|end_of_query|>\n\n<|begin_of_documents|>\n(1)Alpha   alpha text\n"
                "(2)Beta   beta te\n\n<|begin_of_query|> q2<|end_of_query|>\n\n<|begin_of_documents|>\n"
                "(1)Gamma   gamma text\n<|end_of_documents|>\n\n<answer> X </answer>")
    turns = split_turns(response)
    assert [parse_action(text, observation).action for text, observation in turns] == [
        "search", "search", "answer"]
    # q1: Alpha whole, Beta cut by the missing closing tag; q2: Gamma
    assert split_passages(turns[0][1]) == ([Passage("", "Alpha", "alpha text")], False, 1, 0)
    assert split_passages(turns[1][1]) == ([Passage("", "Gamma", "gamma text")], False, 0, 0)


def test_a_quoted_title_with_words_after_a_parenthesis_stays_whole():
    """A quoted title runs to its closing quote: the 2Wiki paragraph "Fort Nelson (Parker Lake)
    Water Aerodrome" keeps its whole title under Search-R1's header, and is the same fact as the
    retrieval server's JSON gives."""
    title = "Fort Nelson (Parker Lake) Water Aerodrome"
    text = CORPUS[title]
    found = split_passages(f'<information>Doc 1(Title: "{title}") {text}\nDoc 2(Title: "B") b</information>')
    assert found.passages == [Passage("", title, text), Passage("", "B", "b")]
    served = split_passages(json.dumps({"result": [[{"document": {"id": "", "contents": f'"{title}"\n{text}'}}]]}))
    assert passage_key(passage_parts(found.passages[0])) == passage_key(passage_parts(served.passages[0]))


@pytest.mark.parametrize("end", ["<|eot_id|><|end_of_text|>", "<|end_of_text|>", "</s>", "<end_of_turn>\n<eos>",
                                 "<eos><pad><pad>"])
def test_end_and_pad_tokens_after_the_answer_are_no_turn(end):
    """A response decoded with its special tokens ends with the model's end of turn and padding
    (Llama 3, Llama 2 / Mistral, Gemma): the template's text, not an invalid action."""
    response = "<search> q </search>\n\n<information>Doc 1(Title: \"A\") a</information>\n\n<answer> a </answer>"
    assert [text for text, _ in split_turns(response + end)] == [
        "<search> q </search>", "\n\n<answer> a </answer>"]


def test_a_title_that_opens_with_a_quote_ends_at_its_own_parenthesis():
    """A title that starts with a quote but is not wrapped in quotes ("Heroes" (David Bowie album),
    unquoted layout) ends at the ")" closing the header, not at a later '")' of the passage text."""
    text = '"Heroes" is an album ("Heroes") by Bowie.'
    for header in ("Doc 1(Title: ", "Doc 1 (Title: "):
        found = split_passages(f'<information>{header}"Heroes" (David Bowie album)) {text}\nDoc 2(Title: B) b</information>')
        assert [p.text for p in found.passages] == [text, "b"]
        assert found.passages[0].title.replace('"', "") == "Heroes (David Bowie album)"
    found = split_passages('<information>Doc 1 (Title: Fort Nelson (Parker Lake) Water Aerodrome) x (y) z</information>')
    assert found.passages == [Passage("", "Fort Nelson (Parker Lake) Water Aerodrome", "x (y) z")]
    found = split_passages('<information>Doc 1(Title: "A (B (C)) D") x ("y") z</information>')  # nested: to the quote
    assert found.passages == [Passage("", "A (B (C)) D", 'x ("y") z')]
