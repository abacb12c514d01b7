"""Tests for factutil.parse: model text -> actions (docs/method.md §1; the ``raw`` items of docs/method.md §8).

Each test states the exact model or reason expected. The rules under test (several actions in one
response, tag content, truncation, limits) are those of the ``factutil.parse`` module docstring.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.parse_worst_case import CASES
from factutil.parse import MAX_DEPTH, parse_action
from factutil.schema import (
    AnswerAction,
    AssertAction,
    InvalidAction,
    Rollout,
    SearchAction,
    Triple,
    assert_content_problem,
)

OBS = "Paris is the capital of France."


def T(subject: str, relation: str, object_: str) -> Triple:
    return Triple(subject=subject, relation=relation, object=object_)


def invalid(text: str, reason: str, observation: str | None = None) -> InvalidAction:
    return InvalidAction(raw=text, reason=reason, observation=observation)


# --- accepted forms -------------------------------------------------------------------------


def test_json_search_carries_the_observation():
    text = '{"action": "search", "query": "capital of France"}'
    assert parse_action(text, observation=OBS) == SearchAction(
        query="capital of France", observation=OBS
    )
    assert parse_action(text) == SearchAction(query="capital of France", observation=None)


@pytest.mark.parametrize(
    "text",
    [
        '{"action": "assert", "facts": [["France", "capital", "Paris"], ["Paris", "in", "Europe"]]}',
        '{"action": "assert", "triples": [["France", "capital", "Paris"], ["Paris", "in", "Europe"]]}',
        (
            '{"action": "assert", "facts": [{"subject": "France", "relation": "capital", '
            '"object": "Paris"}, ["Paris", "in", "Europe"]]}'
        ),
        '{"action": "assert", "facts": [[" France ", "capital\\n", "Paris"], ["Paris", "in", "Europe"]]}',
    ],
)
def test_json_assert_forms(text):
    expected = AssertAction(triples=[T("France", "capital", "Paris"), T("Paris", "in", "Europe")])
    # The observation belongs to a search only.
    assert parse_action(text, observation=OBS) == expected


def test_json_answer_is_stripped_and_drops_the_observation():
    text = '{"action": "answer", "answer": "  Paris \\n"}'
    assert parse_action(text, observation=OBS) == AnswerAction(answer="Paris")


def test_action_name_is_case_insensitive_and_extra_keys_are_dropped():
    text = '{"action": " Search ", "query": "q", "thought": "hm", "observation": "forged"}'
    # A model must not be able to supply its own observation.
    assert parse_action(text, observation=OBS) == SearchAction(query="q", observation=OBS)
    assert parse_action(text) == SearchAction(query="q")


def test_tag_search_and_answer():
    assert parse_action("<search> capital of France </search>", OBS) == SearchAction(
        query="capital of France", observation=OBS
    )
    assert parse_action("<answer>\n Paris \n</answer>", OBS) == AnswerAction(answer="Paris")
    assert parse_action("<SEARCH>q</Search >") == SearchAction(query="q")


@pytest.mark.parametrize(
    "content",
    [
        '[["France", "capital", "Paris"], ["Paris", "in", "Europe"]]',
        "[['France', 'capital', 'Paris'], ('Paris', 'in', 'Europe')]",
        '{"facts": [["France", "capital", "Paris"], ["Paris", "in", "Europe"]]}',
        '```json\n[["France", "capital", "Paris"], ["Paris", "in", "Europe"]]\n```',
        "France | capital | Paris\nParis | in | Europe",
        "\n  France|capital|Paris  \n\n  Paris | in | Europe\n",
        "(France, capital, Paris)\n(Paris, in, Europe)",
        "- France | capital | Paris\n* (Paris, in, Europe)",
        "1. France | capital | Paris\n2) Paris | in | Europe",
        '["France", "capital", "Paris"]\n["Paris", "in", "Europe"]',
        '(France, capital, Paris)\n("Paris", "in", "Europe")',
    ],
)
def test_tag_assert_content_forms(content):
    expected = AssertAction(triples=[T("France", "capital", "Paris"), T("Paris", "in", "Europe")])
    assert parse_action(f"<assert>{content}</assert>", OBS) == expected


def test_tag_assert_single_triples_and_quoted_commas():
    assert parse_action('<assert>["France", "capital", "Paris"]</assert>') == AssertAction(
        triples=[T("France", "capital", "Paris")]
    )
    assert parse_action(
        '<assert>{"subject": "France", "relation": "capital", "object": "Paris"}</assert>'
    ) == AssertAction(triples=[T("France", "capital", "Paris")])
    assert parse_action('<assert>("Paris, France", "is in", "Europe")</assert>') == AssertAction(
        triples=[T("Paris, France", "is in", "Europe")]
    )


def test_numbers_become_strings_in_answers_and_triple_parts():
    assert parse_action('{"action": "answer", "answer": 42}') == AnswerAction(answer="42")
    assert parse_action('{"action": "answer", "answer": 3.5}') == AnswerAction(answer="3.5")
    text = '{"action": "assert", "facts": [["Paris", "population", 2102650]]}'
    assert parse_action(text) == AssertAction(triples=[T("Paris", "population", "2102650")])


def test_empty_answer_is_a_valid_answer():
    assert parse_action("<answer></answer>") == AnswerAction(answer="")
    assert parse_action("<answer>  \n </answer>") == AnswerAction(answer="")
    assert parse_action('{"action": "answer", "answer": " "}') == AnswerAction(answer="")


# --- messy model output ---------------------------------------------------------------------


def test_json_inside_a_code_fence():
    text = 'Here you go:\n```json\n{"action": "search", "query": "Eiffel tower height"}\n```\n'
    assert parse_action(text, OBS) == SearchAction(query="Eiffel tower height", observation=OBS)
    bare = '```\n{"action": "answer", "answer": "330 m"}\n```'
    assert parse_action(bare) == AnswerAction(answer="330 m")


def test_json_with_prose_before_and_after():
    text = 'Sure! {"action": "answer", "answer": "Paris"} Hope this helps. Let me know :}'
    assert parse_action(text) == AnswerAction(answer="Paris")


def test_single_quoted_python_dict():
    text = "I'll search: {'action': 'search', 'query': \"Louvre's architect\"}"
    assert parse_action(text) == SearchAction(query="Louvre's architect")
    text = "{'action': 'assert', 'facts': [('Louvre', 'architect', 'I. M. Pei'),]}"
    assert parse_action(text) == AssertAction(triples=[T("Louvre", "architect", "I. M. Pei")])


def test_never_eval():
    text = "{'action': 'answer', 'answer': __import__('os').getcwd()}"
    result = parse_action(text)
    assert isinstance(result, InvalidAction)
    assert result.reason.startswith("malformed JSON: ")


def test_braces_inside_strings_do_not_end_the_object():
    text = r'{"action": "search", "query": "set {a, {b}} and \"}\" and \\"}'
    assert parse_action(text) == SearchAction(query='set {a, {b}} and "}" and \\')
    text = "{'action': 'answer', 'answer': 'a } b { c'}"
    assert parse_action(text) == AnswerAction(answer="a } b { c")


def test_nested_objects_are_read_whole():
    text = '{"action": "answer", "answer": "Paris", "meta": {"conf": {"p": 0.9}, "x": "}"}}'
    assert parse_action(text) == AnswerAction(answer="Paris")
    # An object without an "action" key is not an action, but one inside it may be.
    wrapped = '{"response": {"action": "search", "query": "q"}, "note": "{"}'
    assert parse_action(wrapped) == SearchAction(query="q")


def test_stray_brace_or_apostrophe_in_prose_does_not_hide_the_action():
    text = 'The set {x | x > 0 is open. {"action": "search", "query": "open sets"}'
    assert parse_action(text) == SearchAction(query="open sets")
    text = 'Hmm { it\'s tricky. {"action": "answer", "answer": "yes"}'
    assert parse_action(text) == AnswerAction(answer="yes")


def test_tags_inside_a_json_string_are_part_of_the_string():
    text = '{"action": "search", "query": "what does <answer>x</answer> mean"}'
    assert parse_action(text) == SearchAction(query="what does <answer>x</answer> mean")


def test_json_inside_a_tag_is_the_tag_content():
    text = '<answer>{"action": "search", "query": "q"}</answer>'
    assert parse_action(text) == AnswerAction(answer='{"action": "search", "query": "q"}')


# --- several actions in one response --------------------------------------------------------


def test_last_answer_wins_over_later_actions():
    text = (
        "<search>capital of France</search> <answer>Lyon</answer> on reflection "
        "<answer>Paris</answer> <search>more</search>"
    )
    assert parse_action(text, OBS) == AnswerAction(answer="Paris")


def test_without_answer_the_last_complete_action_decides():
    text = "<search>first</search> then <search>second</search>"
    assert parse_action(text, OBS) == SearchAction(query="second", observation=OBS)
    text = '<search>q</search> {"action": "assert", "facts": [["a", "b", "c"]]}'
    assert parse_action(text) == AssertAction(triples=[T("a", "b", "c")])


def test_last_action_invalid_without_answer_is_invalid():
    text = "<search>q</search><search>  </search>"
    assert parse_action(text, OBS) == invalid(text, "search with an empty query", OBS)


def test_a_valid_answer_beats_a_later_invalid_one():
    text = '<answer>Paris</answer> {"action": "answer", "answer": ["Paris"]}'
    assert parse_action(text) == AnswerAction(answer="Paris")


def test_json_and_tags_mix():
    text = '{"action": "search", "query": "q"} and finally <answer>Paris</answer>'
    assert parse_action(text) == AnswerAction(answer="Paris")
    text = '<answer>Paris</answer> {"action": "search", "query": "q"}'
    assert parse_action(text) == AnswerAction(answer="Paris")


def test_several_json_objects():
    text = '{"action": "search", "query": "a"}\n{"action": "search", "query": "b"}'
    assert parse_action(text) == SearchAction(query="b")


# --- truncation, tags left open, nesting -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"action": "search", "query": "abc', "truncated JSON: unterminated string"),
        ('{"action": "search", "query": "abc"', "truncated JSON: unterminated object"),
        ('Sure: {"action": "assert", "facts": [["a", "b", "c"],', "truncated JSON: unterminated object"),
        ("{'action': 'answer', 'answer': 'Par", "truncated JSON: unterminated string"),
        ('```json\n{"action": "answer", "answer": {"x": 1}\n```', "truncated JSON: unterminated object"),
    ],
)
def test_truncated_json_is_invalid(text, reason):
    assert parse_action(text, OBS) == invalid(text, reason, OBS)


def test_truncated_json_swallows_what_follows_it():
    text = '{"action": "answer", "answer": "x", "next": {"action": "search", "query": "q"}'
    assert parse_action(text) == invalid(text, "truncated JSON: unterminated object")
    # A complete action before the cut still counts.
    text = '{"action": "search", "query": "q"} {"action": "answer", "answer": "Par'
    assert parse_action(text) == SearchAction(query="q")


def test_unclosed_tag():
    assert parse_action("<answer>Paris") == invalid("<answer>Paris", "unclosed <answer> tag")
    text = "<search>q</search> <search>never closed"
    assert parse_action(text) == SearchAction(query="q")
    # A tag mentioned in prose is ignored once a real one follows.
    text = "Let me first <search> for it: <search>capital of France</search>"
    assert parse_action(text) == SearchAction(query="capital of France")


def test_first_failure_is_reported_when_nothing_is_complete():
    text = '<answer>x {"action": "search", "query": "q'
    assert parse_action(text) == invalid(text, "unclosed <answer> tag")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<answer>a <answer>b</answer> c</answer>", "nested <answer> tag inside <answer>"),
        ("<answer>Paris <search>q</search></answer>", "nested <search> tag inside <answer>"),
        ("<search>q <answer>x</search>", "nested <answer> tag inside <search>"),
    ],
)
def test_nested_tags_are_invalid(text, reason):
    assert parse_action(text) == invalid(text, reason)


def test_stray_close_tag_is_ignored():
    assert parse_action("</answer> <answer>Paris</answer>") == AnswerAction(answer="Paris")
    assert parse_action("</answer>") == invalid("</answer>", "no action found")


# --- content errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"action": "assert", "facts": []}', "assert with no triple"),
        ('{"action": "assert", "triples": []}', "assert with no triple"),
        ('{"action": "assert"}', "assert with no triple"),
        ("<assert></assert>", "assert with no triple"),
        ("<assert> [] </assert>", "assert with no triple"),
        ("<assert>\n\n</assert>", "assert with no triple"),
        ('{"action": "assert", "facts": [["a", "b", "c"], ["d", "e"]]}', "triple 1 has 2 parts, expected 3"),
        ('{"action": "assert", "facts": [["a", "b", "c", "d"]]}', "triple 0 has 4 parts, expected 3"),
        ("<assert>a | b | c\nd | e</assert>", "triple 1 has 2 parts, expected 3"),
        ("<assert>(a, b, c, d)</assert>", "triple 0 has 4 parts, expected 3"),
        ('{"action": "assert", "facts": [["a", "b", ""]]}', "triple 0 has an empty object"),
        ('{"action": "assert", "facts": [["a", "b", "c"], [" ", "b", "c"]]}', "triple 1 has an empty subject"),
        ("<assert>a |  | c</assert>", "triple 0 has an empty relation"),
        ('{"action": "assert", "facts": [["a", null, "c"]]}', "triple 0 part relation is not a string"),
        ('{"action": "assert", "facts": [["a", true, "c"]]}', "triple 0 part relation is not a string"),
        ('{"action": "assert", "facts": [["a", ["b"], "c"]]}', "triple 0 part relation is not a string"),
        ('{"action": "assert", "facts": [{"subject": "a", "object": "c"}]}', "triple 0 has no relation"),
        ('{"action": "assert", "facts": ["a"]}', "triple 0 is not a list or object: 'a'"),
        ('{"action": "assert", "facts": "a | b | c"}', "assert facts are not a list: 'a | b | c'"),
        ("<assert>just some words</assert>", "triple 0 is not 's | r | o' or '(s, r, o)': 'just some words'"),
        ('{"action": "search", "query": ""}', "search with an empty query"),
        ('{"action": "search", "query": " \\n\\t "}', "search with an empty query"),
        ("<search>   </search>", "search with an empty query"),
        ('{"action": "search"}', "search with no query"),
        ('{"action": "search", "query": 5}', "search query is not a string: 5"),
        ('{"action": "search", "query": ["a"]}', "search query is not a string: ['a']"),
        ('{"action": "answer"}', "answer with no 'answer' field"),
        ('{"action": "answer", "answer": null}', "answer is not a string: None"),
        ('{"action": "answer", "answer": true}', "answer is not a string: True"),
        ('{"action": "answer", "answer": ["Paris"]}', "answer is not a string: ['Paris']"),
        ('{"action": "lookup", "query": "q"}', "unknown action 'lookup'"),
        ('{"action": 3}', "action name is not a string: 3"),
        ("", "no action found"),
        ("I do not know.", "no action found"),
        ('{"query": "q"}', "no action found"),
        ("{action: search}", "no action found"),
    ],
)
def test_invalid_reasons(text, reason):
    assert parse_action(text, OBS) == invalid(text, reason, OBS)


def test_malformed_json_with_an_action_key():
    text = '{"action": "search", "query": }'
    result = parse_action(text)
    assert result == invalid(text, "malformed JSON: Expecting value at char 30")


@pytest.mark.parametrize(
    "facts",
    [
        [],
        [["a", "b"]],
        [["a", "b", "c"], ["a", "b", " "]],
        [{"subject": "a", "relation": "", "object": "c"}],
        [["a", None, ""]],
        [["a", "b", "c"], ["d", "e", "f", "g"]],
    ],
)
def test_assert_reasons_agree_with_schema(facts):
    problem = assert_content_problem({"facts": facts})
    assert problem is not None
    text = json.dumps({"action": "assert", "facts": facts})
    assert parse_action(text) == invalid(text, problem)


# --- limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"action": "answer", "answer": ' + "[" * 10_000 + "]" * 10_000 + "}",
        '{"action": ' * 10_000 + '"answer", "answer": "x"' + "}" * 10_000,
        "<assert>" + "[" * 10_000 + "]" * 10_000 + "</assert>",
        "{'action': 'answer', 'answer': " + "[" * 10_000 + "]" * 10_000 + "}",
    ],
)
def test_deep_nesting_is_invalid_not_recursion_error(text):
    assert parse_action(text) == invalid(text, f"JSON nested deeper than {MAX_DEPTH} levels")


def test_nesting_limit_is_inclusive():
    # The object itself is one level, so 99 brackets inside make 100 levels.
    def text(brackets: int) -> str:
        return '{"action": "answer", "answer": "Paris", "x": ' + "[" * brackets + "]" * brackets + "}"

    assert parse_action(text(MAX_DEPTH - 1)) == AnswerAction(answer="Paris")
    too_deep = text(MAX_DEPTH)
    assert parse_action(too_deep) == invalid(too_deep, f"JSON nested deeper than {MAX_DEPTH} levels")


def test_deep_structures_without_an_action():
    text = "{" * 10_000 + "}" * 10_000
    assert parse_action(text) == invalid(text, "no action found")
    text = '{"a": ' * 10_000 + '{"action": "search", "query": "q"}' + "}" * 10_000
    assert parse_action(text) == SearchAction(query="q")


@pytest.mark.parametrize("case", list(CASES))
def test_one_megabyte_of_adversarial_text_parses_to_the_right_action(case):
    """Each ~1 MB case of benchmarks/parse_worst_case.py (which times them) gives its action."""
    build, expected = CASES[case]
    assert parse_action(build()).action == expected


def test_lone_surrogates_and_odd_unicode():
    text = "\ud800 prose \udfff <search>caf\u00e9 \ud83d</search> \u202e\x00"
    assert parse_action(text) == SearchAction(query="caf\u00e9 \ud83d")
    text = '{"action": "answer", "answer": "\\ud800"}'
    assert parse_action(text) == AnswerAction(answer="\ud800")
    text = "{'action': 'answer', 'answer': '\ud800'}"  # literal_eval cannot encode it
    result = parse_action(text)
    assert isinstance(result, InvalidAction) and result.reason.startswith("malformed JSON: ")


def test_type_errors_name_the_argument():
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        parse_action(b'{"action": "answer", "answer": "x"}')  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str, got NoneType"):
        parse_action(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="observation must be a str or None, got int"):
        parse_action("<answer>x</answer>", observation=3)  # type: ignore[arg-type]


def test_raw_items_of_the_input_file_are_parsed():
    rollout = Rollout.model_validate({
        "uid": "q1", "question": "Capital?", "golden_answers": ["Paris"], "rollout_id": "r1",
        "actions": [
            {"raw": "<search>capital of France</search>", "observation": OBS},
            {"raw": '{"action": "search", "query": "capital of Fr'},
            {"raw": "<answer>Paris</answer>", "observation": OBS},
        ],
    })
    assert rollout.actions == [
        SearchAction(query="capital of France", observation=OBS),
        invalid('{"action": "search", "query": "capital of Fr', "truncated JSON: unterminated string"),
        AnswerAction(answer="Paris"),
    ]


# --- properties -----------------------------------------------------------------------------

MODELS = (SearchAction, AssertAction, AnswerAction, InvalidAction)
FRAGMENTS = [
    "{", "}", "[", "]", '"', "'", "\\", ":", ",", " ", "\n", "```", "json", '"action"', "'action'",
    '"search"', '"assert"', '"answer"', '"query"', '"facts"', '"triples"', "<search>",
    "</search>", "<assert>", "</assert>", "<answer>", "</answer>", "|", "(", ")", "a", "1", "null",
    "\ud800", "\u00e9",
]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)))
def test_any_text_gives_a_model_and_never_raises(text):
    result = parse_action(text, observation="obs")
    assert isinstance(result, MODELS)
    if isinstance(result, InvalidAction):
        assert result.raw == text and result.reason and result.observation == "obs"


value_text = st.text(min_size=1).map(str.strip).filter(bool)
triple_lists = st.lists(st.tuples(value_text, value_text, value_text), min_size=1, max_size=4)


@st.composite
def actions(draw):
    kind = draw(st.sampled_from(["search", "assert", "answer"]))
    if kind == "search":
        query = draw(value_text)
        return {"action": "search", "query": query}, SearchAction(query=query, observation=OBS)
    if kind == "answer":
        answer = draw(st.one_of(value_text, st.just("")))
        return {"action": "answer", "answer": answer}, AnswerAction(answer=answer)
    triples = draw(triple_lists)
    key = draw(st.sampled_from(["facts", "triples"]))
    as_dicts = draw(st.booleans())
    items = [
        {"subject": s, "relation": r, "object": o} if as_dicts else [s, r, o]
        for s, r, o in triples
    ]
    return {"action": "assert", key: items}, AssertAction(triples=[T(*t) for t in triples])


prose = st.text(alphabet=st.characters(blacklist_characters="{<", blacklist_categories=["Cs"]))


@settings(max_examples=300, deadline=None)
@given(
    actions(),
    st.booleans(),
    st.sampled_from([None, 2]),
    st.sampled_from(["none", "fence", "json-fence"]),
    prose,
    prose,
)
def test_round_trip_of_serialised_actions(action, ascii_only, indent, fence, before, after):
    payload, expected = action
    text = json.dumps(payload, ensure_ascii=ascii_only, indent=indent)
    if fence == "fence":
        text = f"```\n{text}\n```"
    elif fence == "json-fence":
        text = f"```json\n{text}\n```"
    assert parse_action(f"{before}{text}{after}", observation=OBS) == expected


# Characters that end a line for str.splitlines, and the one that separates parts.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
tag_text = st.text(
    alphabet=st.characters(blacklist_characters="<|" + LINE_BREAKS, blacklist_categories=["Cs"])
).map(str.strip)
# A part that opens like JSON, a tuple, a bullet or a fence would be read as one.
tag_part = tag_text.filter(
    lambda part: bool(part)
    and part[0] not in "[{(`"
    and re.match(r"(?:[-*\u2022]|\d{1,3}[.)])\s", part + " ") is None
)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_round_trip_of_tag_actions(data):
    kind = data.draw(st.sampled_from(["search", "answer", "assert"]))
    if kind == "search":
        query = data.draw(tag_text.filter(bool))
        text, expected = f"<search>{query}</search>", SearchAction(query=query, observation=OBS)
    elif kind == "answer":
        answer = data.draw(tag_text)
        text, expected = f"<answer> {answer} </answer>", AnswerAction(answer=answer)
    else:
        triples = data.draw(st.lists(st.tuples(tag_part, tag_part, tag_part), min_size=1, max_size=4))
        lines = "\n".join(" | ".join(triple) for triple in triples)
        text, expected = f"<assert>\n{lines}\n</assert>", AssertAction(triples=[T(*t) for t in triples])
    assert parse_action(text, observation=OBS) == expected
