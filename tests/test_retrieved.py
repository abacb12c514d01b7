"""facts="retrieved": the passages a search brought are the facts (docs/method.md §9).

Values worked by hand from docs/method.md §3–§5.
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from factutil import FactUtilConfig, compute_process_advantages
from factutil.cli import app
from factutil.passages import passage_key, passage_parts
from factutil.search_r1 import Passage, document_passage, split_passages

QUESTION = "Who is the mother of the director of film Polish-Russian War?"
GOLD = ["Małgorzata Braunek"]
P1 = ('Doc 1(Title: "Xawery Żuławski") Xawery Żuławski is a Polish film director, son of '
      "Małgorzata Braunek.")
P3 = 'Doc {k}(Title: "Polish-Russian War (film)") Polish-Russian War is a 2009 Polish film.'
P2 = 'Doc {k}(Title: "Paris") Paris is the capital of France.'


def _search_r1(rollout_id: str, turns: list[tuple[str, str]], answer: str) -> dict:
    """A Search-R1 rollout: raw model turns, each search with the retriever's observation."""
    actions = [{"raw": f"<think>look it up</think><search>{query}</search>", "observation": obs}
               for query, obs in turns]
    actions.append({"raw": f"<think>done</think><answer>{answer}</answer>"})
    return {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rollout_id,
            "actions": actions}


# a (right): search 1 brings P1 and P3, search 2 brings P1 again; b (right): P3, then P1;
# c (wrong): P3 and P2.
ROLLOUTS = [
    _search_r1("a", [("director of Polish-Russian War", P1 + "\n" + P3.format(k=2)),
                     ("Xawery Zulawski mother", P1)], "Małgorzata Braunek"),
    _search_r1("b", [("Polish-Russian War film", P3.format(k=1)),
                     ("Xawery Żuławski", P1)], "Małgorzata Braunek"),
    _search_r1("c", [("Polish-Russian War director", P3.format(k=1) + "\n" + P2.format(k=2))],
               "Paris"),
]


def test_shaping_lands_on_the_search_that_first_retrieved_a_passage_of_the_successful_rollouts():
    result = compute_process_advantages(ROLLOUTS, FactUtilConfig(facts="retrieved"))
    # y = (1, 1, 0), p-bar = 2/3, prior "group", epsilon 0.5: u = sum(y - p-bar) / (n + 1).
    # P1 held by a and b: (1/3 + 1/3) / 3 = 2/9. P3 held by all three: 0. P2 by c alone:
    # (-2/3) / 2 = -1/3.
    u1, u3, u2 = 2 / 9, 0.0, -1 / 3
    shaping = result.per_rollout("shaping")
    assert shaping[("q", "a")].tolist() == pytest.approx([math.tanh(u1 + u3), 0.0, 0.0], abs=1e-12)
    # b's first search brought only P3, which every rollout holds: no credit.
    assert shaping[("q", "b")].tolist() == pytest.approx([0.0, math.tanh(u1), 0.0], abs=1e-12)
    assert shaping[("q", "c")].tolist() == pytest.approx([math.tanh(u2), 0.0], abs=1e-12)
    # the search is the action that gained: nothing is sent back, nothing penalised
    assert not result.action_columns["back_credit"].any()
    assert not result.action_columns["penalty"].any()
    by_text = {member[0]: cluster.utility for cluster in result.clusters
               for member in cluster.members}
    assert by_text == pytest.approx({"Xawery Żuławski": u1, "Polish-Russian War (film)": u3,
                                     "Paris": u2}, abs=1e-12)
    assert result.metrics["observations_unsplit"] == 0


def test_the_cli_scores_a_search_r1_file_with_facts_retrieved(tmp_path):
    source = tmp_path / "search_r1.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROLLOUTS),
                      encoding="utf-8")
    out = tmp_path / "credit.jsonl"
    done = CliRunner().invoke(app, ["score", str(source), "-o", str(out), "--set", "facts=retrieved"])
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    searches = [(line["rollout_id"], line["step"], line["shaping"]) for line in lines
                if line["action"] == "search"]
    # (P3's utility is 0 up to rounding: 1/3 + 1/3 - 2/3 in floats)
    assert [(rid, step) for rid, step, value in searches if value > 1e-9] == [("a", 0), ("b", 1)]
    assert [(rid, step) for rid, step, value in searches if abs(value) < 1e-9] == [("a", 1), ("b", 0)]
    assert [(rid, step) for rid, step, value in searches if value < -1e-9] == [("c", 0)]


def test_asserted_facts_ignore_observations_and_retrieved_facts_ignore_asserts():
    rollout = {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": "a",
               "actions": [{"action": "search", "query": "x", "observation": P1},
                           {"action": "assert", "triples": [["a", "b", "c"]]},
                           {"action": "answer", "answer": "Małgorzata Braunek"}]}
    other = {**rollout, "rollout_id": "b", "actions": [{"action": "answer", "answer": "no"}]}
    asserted = compute_process_advantages([rollout, other], FactUtilConfig(mode="exact"))
    retrieved = compute_process_advantages([rollout, other], FactUtilConfig(facts="retrieved"))
    assert [c.members for c in asserted.clusters] == [[["a", "b", "c"]]]
    assert [c.members for c in retrieved.clusters] == [
        [["Xawery Żuławski", "", ("Xawery Żuławski is a Polish film director, son of "
                                  "Małgorzata Braunek.")]]]
    # under "retrieved" the credit of the fact is the search's, under "asserted" the assert's
    assert retrieved.per_rollout("shaping")[("q", "a")][0] > 0
    assert asserted.per_rollout("shaping")[("q", "a")][0] == 0
    # b answered with nothing retrieved: penalised, but its outcome reward is not zeroed
    # (the store is not the agent's under "retrieved")
    assert retrieved.per_rollout("penalty")[("q", "b")].tolist() == [-0.1]


def test_an_asserting_agent_under_retrieved_facts_is_warned_once_that_its_asserts_get_no_credit():
    """Under facts="retrieved" the asserts' triples are no facts (§9): a step whose rollouts
    assert says so, once per process through Python's warnings (counted in every step's
    ``warnings``), naming facts='asserted'; a step with no assert, or under facts="asserted",
    says nothing of it."""
    import warnings

    from factutil import api
    from factutil.api import ASSERTS_UNCREDITED

    search = {"action": "search", "query": "x", "observation": P1}
    answer = {"action": "answer", "answer": "Małgorzata Braunek"}
    asserting = [{"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rid,
                  "actions": [search, {"action": "assert", "triples": [["a", "b", "c"]]}, answer]}
                 for rid in "ab"]
    searching = [{**row, "actions": [search, answer]} for row in asserting]
    config = FactUtilConfig(facts="retrieved")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per process: from a fresh registry
        vars(api).pop("__warningregistry__", None)
        steps = [compute_process_advantages(asserting, config) for _ in range(3)]
        quiet = compute_process_advantages(searching, config)
        asserted = compute_process_advantages(asserting, FactUtilConfig(mode="exact"))
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert said == [ASSERTS_UNCREDITED] and "facts='asserted'" in said[0]
    assert [step.metrics["warnings"] for step in steps] == [1.0, 1.0, 1.0]
    assert quiet.metrics["warnings"] == asserted.metrics["warnings"] == 0.0


def test_retrieved_facts_cluster_by_identity_by_default():
    assert FactUtilConfig(facts="retrieved").mode == "exact"
    assert FactUtilConfig(facts="retrieved", mode="semantic").mode == "semantic"
    assert FactUtilConfig().facts == "asserted" and FactUtilConfig().mode == "semantic"


def test_search_r1_and_factutil_observation_layouts_split_into_passages():
    search_r1 = ('Doc 1(Title: "Paris (film)") Paris is a 2008 film.\nIt stars Juliette Binoche.\n'
                 'Doc 2(Title: "Juliette Binoche") Juliette Binoche is an actress.\n')
    assert split_passages(search_r1) == ([
        Passage("", "Paris (film)", "Paris is a 2008 film.\nIt stars Juliette Binoche."),
        Passage("", "Juliette Binoche", "Juliette Binoche is an actress.")], False, 0, 0)
    served = "Doc 1 (Title: Paris) Paris is in France.\nDoc 2 (Title: Lyon) Lyon too."
    assert [p.title for p in split_passages(served).passages] == ["Paris", "Lyon"]
    assert [p.text for p in split_passages("[1] one\n[2] two").passages] == ["one", "two"]
    assert [p.text for p in split_passages("1. one\n2) two\n").passages] == ["one", "two"]
    assert [p.text for p in split_passages("one\n\n  \ntwo").passages] == ["one", "two"]
    # no layout: the observation is one passage, and says so
    assert split_passages(" free text ") == ([Passage("", "", "free text")], True, 0, 0)
    # what factutil's client writes when a search retrieved nothing holds no passage
    assert split_passages(" No documents found. ") == split_passages("") == ([], False, 0, 0)
    assert split_passages("Search failed: the retriever timed out after 10 s.").passages == []
    # a number inside prose is no numbered layout
    assert split_passages("In 1990. it rained").unsplit


def test_explicit_passages_and_their_identity():
    given = ["plain\ntext", {"id": 7, "contents": '"Title"\nBody text'},
             {"id": "d9", "title": "T", "text": "t"}, {"document": {"text": " x "}, "score": 1}]
    assert [document_passage(item) for item in given] == [
        Passage("", "plain", "text"), Passage("7", "Title", "Body text"), Passage("d9", "T", "t"),
        Passage("", "", "x")]
    for bad in (3, {"id": 1}, {"document": {"contents": 5}}):
        with pytest.raises(ValueError, match="'contents' or 'text'"):
            document_passage(bad)
    # an id decides identity; without one, the normalised title and text do
    assert passage_key(passage_parts(Passage("7", "A", "x"))) == "id:7"
    assert passage_key(passage_parts(Passage("", "A", "Some  TEXT"))) == "a | some text"
    assert passage_key(passage_parts(Passage("", "", "Some text"))) == "some text"


def test_an_observation_no_layout_splits_is_one_passage_counted_and_warned():
    rollout = {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": "a",
               "actions": [{"action": "search", "query": "x", "observation": "free text answer"},
                           {"action": "answer", "answer": "x"}]}
    result = compute_process_advantages([rollout, {**rollout, "rollout_id": "b"}],
                                        FactUtilConfig(facts="retrieved"))
    assert result.metrics["observations_unsplit"] == 2
    assert any("matched no passage layout" in w for w in result.warnings)
    # that warning is the step's last: counted like every other
    assert result.metrics["warnings"] == len(result.warnings) == 1
    assert [c.members for c in result.clusters] == [[["", "", "free text answer"]]]


def test_the_report_and_the_clusters_table_show_passages(tmp_path):
    from factutil.report import ReportInputs, build_report

    result = compute_process_advantages(ROLLOUTS, FactUtilConfig(facts="retrieved"))
    html = build_report(result, ReportInputs(source="search_r1.jsonl"))
    assert "passages (as retrieved)" in html
    assert "Xawery Żuławski: Xawery Żuławski is a Polish film director" in html
    assert "members (as the rollouts wrote them)" not in html
    source = tmp_path / "search_r1.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROLLOUTS),
                      encoding="utf-8")
    table = CliRunner().invoke(app, ["clusters", str(source), "--set", "facts=retrieved"],
                               env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert "Paris: Paris is the capital of France." in table.output
    assert " | " not in table.output.split("members")[1]


def test_a_search_may_list_its_passages_and_an_id_decides_identity():
    def rollout(rollout_id, passages, answer):
        return {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rollout_id,
                "actions": [{"action": "search", "query": "q " + rollout_id, "passages": passages},
                            {"action": "answer", "answer": answer}]}
    # a and b (right) hold passage 17 under two texts (one id: one fact); c (wrong) holds d2.
    rows = [rollout("a", [{"id": 17, "contents": '"Xawery Żuławski"\nXawery is her son.'}],
                    "Małgorzata Braunek"),
            rollout("b", [{"id": "17", "title": "Xawery Żuławski", "text": "another cut"}],
                    "Małgorzata Braunek"),
            rollout("c", ["a passage without id"], "Paris")]
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert sorted(c.n for c in result.clusters) == [1, 2]
    # p-bar = 2/3; id 17 held by a and b: (1/3 + 1/3) / (2 + 1) = 2/9
    shaping = result.per_rollout("shaping")
    assert shaping[("q", "a")][0] == pytest.approx(math.tanh(2 / 9), abs=1e-12)
    assert shaping[("q", "b")][0] == pytest.approx(math.tanh(2 / 9), abs=1e-12)
    # the observation is not read when the passages are listed
    listed = rollout("a", ["x"], "y")
    listed["actions"][0]["observation"] = P1
    single = compute_process_advantages([listed], FactUtilConfig(facts="retrieved"))
    assert [c.members for c in single.clusters] == [[["", "", "x"]]]


def test_listed_passages_read_back_from_a_table_with_null_keys():
    """Passages stored in a datasets/parquet table come back with every key of the column, null
    where a passage had none (``"title": None``): the same passages, one fact each."""
    rows = [{"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rollout_id,
             "actions": [{"action": "search", "query": "q", "passages": passages},
                         {"action": "answer", "answer": answer}]}
            for rollout_id, passages, answer in [
                ("a", [{"id": "1", "title": "France", "text": "Paris is the capital."},
                       {"contents": '"Lyon"\nLyon is a city.'}], "Paris"),
                ("b", [{"contents": '"Lyon"\nLyon is a city.'}], "Lyon")]]
    back = pa.Table.from_pylist(rows).to_pylist()
    assert back[1]["actions"][0]["passages"][0]["title"] is None
    result = compute_process_advantages(back, FactUtilConfig(facts="retrieved"))
    # France (id 1) in a alone; Lyon (no id: its title and text) in a and b
    assert sorted((c.members, c.n) for c in result.clusters) == [
        ([["France", "id:1", "Paris is the capital."]], 1), ([["Lyon", "", "Lyon is a city."]], 2)]


def test_a_listed_string_in_search_r1_contents_form_keeps_its_title():
    """A passage listed as a string is Search-R1's ``contents`` when its first line is a quoted
    title ('"Lyon"\nLyon is a city.'): the same fact as the object form; any other string is
    the passage's text, title-less, however many lines it has."""
    def row(rollout_id, passages, answer):
        return {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": rollout_id,
                "actions": [{"action": "search", "query": "q", "passages": passages},
                            {"action": "answer", "answer": answer}]}

    rows = [row("a", ['"Lyon"\nLyon is a city.', "Paris is big.\nIt has 2 million people."], "x"),
            row("b", [{"contents": '"Lyon"\nLyon is a city.'}], "y"),
            row("c", ({"text": "Paris is big.\nIt has 2 million people."}, '"Rome"'), "z")]  # a tuple
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert sorted((c.members, c.n) for c in result.clusters) == [
        ([["", "", '"Rome"']], 1),
        ([["", "", "Paris is big.\nIt has 2 million people."]], 2),
        ([["Lyon", "", "Lyon is a city."]], 2)]


def test_a_title_with_quotes_inside_is_one_fact_in_every_form():
    """A title holding double quotes (The "Best" Film) keeps them in every form a passage comes
    in: a listed string or ``contents`` ('"The "Best" Film"\nA film.', with "\n" or "\r\n"), a
    Search-R1 ``Doc 1(Title: ...)`` header, a ``Doc i: contents`` block: one fact, one cluster."""
    contents = '"The "Best" Film"\nA film.'
    forms = [{"passages": [contents]}, {"passages": [contents.replace("\n", "\r\n")]},
             {"passages": [{"contents": contents}]},
             {"observation": '<information>Doc 1(Title: "The "Best" Film") A film.</information>'},
             {"observation": f"<information>Doc 1: {contents}</information>"},
             {"observation": "<information>Doc 1: " + contents.replace("\n", "\r\n") + "</information>"}]
    rows = [{"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": str(k),
             "actions": [{"action": "search", "query": "q", **form}, {"action": "answer", "answer": "x"}]}
            for k, form in enumerate(forms)]
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert [(c.members, c.n) for c in result.clusters] == [([["The \"Best\" Film", "", "A film."]], 6)]


def test_a_title_that_opens_with_a_quote_keeps_it_under_a_title_header():
    """wiki-18 writes the title "Weird Al" Yankovic as '""Weird Al" Yankovic"' (one pair around
    it); Search-R1's header carries that line: one pair comes off in every form, not every quote."""
    contents = '""Weird Al" Yankovic"\nAn American singer.'
    forms = [{"passages": [{"contents": contents}]},
             {"observation": '<information>Doc 1(Title: ""Weird Al" Yankovic") An American singer.'
                             "</information>"}]
    rows = [{"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": str(k),
             "actions": [{"action": "search", "query": "q", **form}, {"action": "answer", "answer": "x"}]}
            for k, form in enumerate(forms)]
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert [(c.members, c.n) for c in result.clusters] == [
        ([['"Weird Al" Yankovic', "", "An American singer."]], 2)]


def test_a_listed_passage_without_text_is_an_error_naming_it():
    from factutil import InputError

    row = {"uid": "q", "question": QUESTION, "golden_answers": GOLD, "rollout_id": "a",
           "actions": [{"action": "search", "query": "x", "passages": [{"id": 3}]}]}
    with pytest.raises(InputError, match=r"actions\[0\]\.passages\[0\]: a passage needs a text"):
        compute_process_advantages([row], FactUtilConfig(facts="retrieved"))


def test_a_search_agent_scored_as_asserting_gets_one_warning_naming_facts_retrieved(caplog):
    """Under facts="asserted" (the default) a step where no rollout asserts anything answers from
    an empty store everywhere, so every outcome reward is zeroed (§1): the step says so, once,
    naming the setting; one assert in the batch and the warning is not given."""
    with caplog.at_level("WARNING", logger="factutil"):
        result = compute_process_advantages(ROLLOUTS, FactUtilConfig(mode="exact"))
    said = [r.getMessage() for r in caplog.records if "asserted a triple" in r.getMessage()]
    assert len(said) == 1 and "all 3 answers came from an empty store" in said[0]
    assert "facts='retrieved'" in said[0] and result.metrics["warnings"] >= 1.0
    assert result.metrics["answers_empty_store"] == 3.0
    assert all(r.outcome_reward == 0.0 for r in result.rollouts)  # the rule the warning names
    caplog.clear()
    asserting = json.loads(json.dumps(ROLLOUTS))
    asserting[0]["actions"].insert(1, {"action": "assert", "triples": [
        ["Xawery Żuławski", "mother", "Małgorzata Braunek"]]})
    with caplog.at_level("WARNING", logger="factutil"):
        compute_process_advantages(asserting, FactUtilConfig(mode="exact"))
    assert not [r for r in caplog.records if "asserted a triple" in r.getMessage()]
    caplog.clear()
    with caplog.at_level("WARNING", logger="factutil"):
        retrieved = compute_process_advantages(ROLLOUTS, FactUtilConfig(facts="retrieved"))
    assert not [r for r in caplog.records if "asserted a triple" in r.getMessage()]
    assert [r.outcome_reward > 0 for r in retrieved.rollouts] == [True, True, False]


def test_a_block_after_a_turn_that_is_no_search_is_counted_and_warned(caplog):
    """Prose between a search and its block is a turn of its own: an invalid action holding the
    block, which is not read; counted (``observations_unread``) and warned, and with no passage
    left in the step, warned again."""
    response = ("<search>capital of France</search>\nLet me read.\n<information>Doc 1(Title: \"Paris\") "
                "Paris is the capital of France.</information>\n\n<answer>Paris</answer>")
    rows = [{"uid": "q", "question": "Capital?", "golden_answers": ["Paris"], "rollout_id": rid,
             "response": response} for rid in ("a", "b")]
    with caplog.at_level("WARNING", logger="factutil"):
        result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert [a.action for a in result.actions] == ["search", "invalid", "answer"] * 2
    assert result.metrics["observations_unread"] == 2.0 and result.clusters == []
    said = [r.getMessage() for r in caplog.records]
    assert any("2 followed a turn read as no search" in m for m in said)
    assert any("no search brought a passage" in m for m in said)


@pytest.mark.parametrize("between, after", [
    ("\nuser\n", "\nassistant\n"),  # decoded without special tokens
    ("<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),  # Qwen, with them
    ("<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),  # Llama 3
])
def test_chat_role_markers_between_turns_are_no_turns(between, after):
    """A whole multi-turn response decoded through a chat template: the role markers around the
    retrieved block and after the answer are the template's, not turns, so the search holds its
    block and the answer is the last action."""
    response = (f"<search>capital of France</search>{between}<information>Doc 1(Title: \"Paris\") "
                f"Paris is the capital of France.</information>{after}<answer>Paris</answer>"
                f"{after.split(chr(10))[0]}")
    rows = [{"uid": "q", "question": "Capital?", "golden_answers": ["Paris"], "rollout_id": rid,
             "response": response} for rid in ("a", "b")]
    result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    assert [a.action for a in result.actions] == ["search", "answer"] * 2
    assert result.metrics["observations_unread"] == 0.0
    # one passage, retrieved by both rollouts
    assert [(c.n, c.members) for c in result.clusters] == [
        (2, [["Paris", "", "Paris is the capital of France."]])]


def test_searches_without_observations_under_facts_retrieved_are_warned(caplog):
    """facts="retrieved" and no search carries its retrieved text (here under another key, kept
    as an extra field): no fact at all, every answer from an empty store; one warning says so."""
    rows = [{"uid": "q", "question": "Q", "golden_answers": ["Paris"], "rollout_id": rid, "actions": [
        {"action": "search", "query": "capital", "information": 'Doc 1(Title: "Paris") Paris.'},
        {"action": "answer", "answer": answer}]} for rid, answer in (("a", "Paris"), ("b", "Lyon"))]
    with caplog.at_level("WARNING", logger="factutil"):
        result = compute_process_advantages(rows, FactUtilConfig(facts="retrieved"))
    said = [r.getMessage() for r in caplog.records if "brought a passage" in r.getMessage()]
    assert len(said) == 1 and "all 2 answers came from an empty store" in said[0]
    assert result.clusters == [] and result.metrics["warnings"] == 1.0


def test_under_mode_semantic_a_passage_is_clustered_as_title_empty_relation_text(char_grams):
    """Semantic clusters of passages compare title | "" | text (docs/method.md §9): the same text
    served under two ids is two facts (ids differ) in one cluster, not kept apart by its ids.
    y = (1, 1, 0), p-bar 2/3, prior "group": u(Paris, held by a and b) = (1/3 + 1/3) / 3 = 2/9,
    u(Lyon, c alone) = (-2/3) / 2 = -1/3."""
    from factutil.cluster import SemanticClusterer

    def rollout(rid: str, doc_id: int, title: str, answer: str) -> dict:
        return {"uid": "q", "question": "Capital?", "golden_answers": ["Paris"], "rollout_id": rid,
                "actions": [{"action": "search", "query": "capital", "passages": [
                    {"id": doc_id, "title": title, "text": f"{title} is the capital of France."}]},
                            {"action": "answer", "answer": answer}]}

    rows = [rollout("a", 17, "Paris", "Paris"), rollout("b", 99, "Paris", "Paris"),
            rollout("c", 5, "Lyon", "Lyon")]
    config = FactUtilConfig(facts="retrieved", mode="semantic")
    result = compute_process_advantages(rows, config,
                                        clusterer=SemanticClusterer(config, embedder=char_grams))
    by_ids = {tuple(sorted(m[1] for m in c.members)): c.utility for c in result.clusters}
    assert by_ids == pytest.approx({("id:17", "id:99"): 2 / 9, ("id:5",): -1 / 3}, abs=1e-12)
    assert sorted(char_grams.calls[0]) == ["lyon | | lyon is the capital of france.",
                                           "paris | | paris is the capital of france."]
