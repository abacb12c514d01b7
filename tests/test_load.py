"""The fast loader (factutil/load.py) against the model path it replaces.

The oracle: for every input, either ``load_groups`` and the reference ``_as_groups`` raise the same
exception type with the same ``str()``, or ``load_groups`` returns the reference's groups as plain
rows (uid, question, gold, and per rollout its id, reward and actions) and the same skipped dict.
The inputs: the S workload, the real 2Wiki sample (dicts, file, models, group dicts), hypothesis
batches with odd rows mixed in, the bad-input catalogue of test_reliability, and one test per
pitfall of the fast tier (what "blank" means, rewards, str subclasses and bytes, triple forms, raw
actions and unknown keys, group checks, skipping, never mutating the input).
"""

from __future__ import annotations

import copy
import enum
import json
import math
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from benchmarks.workloads import build_workload
from factutil import load as load_module
from factutil.io import InputError, read_groups
from factutil.load import GroupRows, group_rows, load_groups
from factutil.schema import (
    AnswerAction,
    AssertAction,
    Group,
    InvalidAction,
    Rollout,
    SearchAction,
    Triple,
    group_rollouts,
)
from tests.test_fuzz import batches
from tests.test_reliability import ASSERT, RIGHT, SEARCH, WRONG, row

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "2wiki_rollouts.jsonl"
SAMPLE_ROWS = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
EXAMPLES = int(os.environ.get("FACTUTIL_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- the oracle ---------------------------------------------------------------------------------


def reference_as_groups(groups: Any, skip_invalid: bool = False) -> tuple[list[Group], dict[str, str]]:
    """``factutil.api._as_groups`` as of commit 24bca8d, verbatim: the behaviour to keep."""
    if isinstance(groups, (str, os.PathLike)):
        return read_groups(groups), {}
    if isinstance(groups, Group):
        return [groups], {}
    if isinstance(groups, Mapping):
        groups = [groups]
    pending: list[tuple[str, Any]] = []
    loose: dict[str, list[Any]] = {}
    for item in groups:
        if isinstance(item, Group):
            pending.append((item.uid, item))
        elif isinstance(item, Mapping) and "rollouts" in item:
            pending.append((str(item.get("uid", "?")), item))
        elif isinstance(item, (Rollout, Mapping)):
            uid = item.uid if isinstance(item, Rollout) else item.get("uid")
            if str(uid) not in loose:
                pending.append((str(uid), None))
            loose.setdefault(str(uid), []).append(item)
        else:
            raise TypeError(
                f"groups must hold Group, Rollout or dict items, got {type(item).__name__}"
            )
    result: list[Group] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for uid, item in pending:
        try:
            if item is None:
                rollouts = [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in loose[uid]]
                group = Group.from_rollouts(rollouts)
            else:
                group = item if isinstance(item, Group) else Group.model_validate(item)
            if group.uid in seen:
                raise ValueError(f"uid {group.uid!r} appears in two groups; a uid names one group")
        except (ValueError, TypeError) as error:
            if not skip_invalid:
                raise
            skipped[uid] = error  # not str(error): load_groups words a model's error its own way
            continue
        seen.add(group.uid)
        result.append(group)
    return result, skipped


def same_error(got: BaseException | str, want: BaseException) -> bool:
    """Whether load_groups' error (or skip reason) is the reference's: equal type and text, or,
    for the models' ValidationError, an InputError raised from that very error whose every line
    names the item's position (``groups...: field: message``)."""
    text = got if isinstance(got, str) else str(got)
    if not isinstance(want, ValidationError):
        return (isinstance(got, str) or type(got) is type(want)) and text == str(want)
    lines = text.splitlines()
    if not lines or not all(line.startswith("groups") and ": " in line for line in lines):
        return False
    if isinstance(got, str):
        return True
    cause = got.__cause__
    return isinstance(got, InputError) and (type(cause), str(cause)) == (type(want), str(want))


def model_action(action: Any) -> tuple:
    """An action model as (kind, payload...), built from the model, not by factutil.load."""
    if isinstance(action, SearchAction):
        return ("search", action.query, action.observation)
    if isinstance(action, AssertAction):
        return ("assert", [t.as_list() for t in action.triples])
    if isinstance(action, AnswerAction):
        return ("answer", action.answer)
    assert isinstance(action, InvalidAction)
    return ("invalid", action.raw, action.reason, action.observation)


def model_group(group: Group) -> tuple:
    return (group.uid, group.question, group.golden_answers, [
        (r.uid, r.question, r.golden_answers, r.rollout_id, r.reward,
         [model_action(a) for a in r.actions]) for r in group.rollouts])


def exact_str(value: Any) -> str:
    assert type(value) is str, f"{value!r} is a {type(value).__name__}, not str"
    return value


def row_action(action: dict) -> tuple:
    """An action dict of GroupRows as (kind, payload...), checking its types on the way."""
    kind = action["action"]
    observation = action.get("observation")
    assert observation is None or type(observation) is str
    if kind == "search":
        return ("search", exact_str(action["query"]), observation)
    if kind == "assert":
        triples = action["triples"]
        assert type(triples) is list and triples  # an unknown "facts" key beside it means nothing
        assert all(isinstance(t, (list, tuple)) and len(t) == 3 for t in triples)
        return ("assert", [[exact_str(part) for part in t] for t in triples])
    if kind == "answer":
        return ("answer", exact_str(action["answer"]))
    assert kind == "invalid"
    return ("invalid", exact_str(action["raw"]), exact_str(action["reason"]), observation)


def rows_group(rows: GroupRows) -> tuple:
    rollouts = []
    for r in rows.rollouts:
        assert r["reward"] is None or type(r["reward"]) is float and math.isfinite(r["reward"])
        rollouts.append((exact_str(r["uid"]), exact_str(r["question"]),
                         [exact_str(g) for g in r["golden_answers"]], exact_str(r["rollout_id"]),
                         r["reward"], [row_action(a) for a in r["actions"]]))
    return (exact_str(rows.uid), exact_str(rows.question), rows.golden_answers, rollouts)


def outcome(function: Any, groups: Any, skip_invalid: bool) -> tuple[Any, BaseException | None]:
    try:
        return function(groups, skip_invalid), None
    except Exception as error:  # noqa: BLE001 - the oracle compares whatever is raised
        return None, error


def assert_same(groups: Any, skip_invalid: bool = False, check_input: bool = True) -> Any:
    """The oracle; returns load_groups' result, or its exception when both raise."""
    before = repr(groups) if check_input else None
    expected, expected_error = outcome(reference_as_groups, groups, skip_invalid)
    got, error = outcome(load_groups, groups, skip_invalid)
    if check_input:
        assert repr(groups) == before, "load_groups changed its input"
    if expected_error is not None:
        assert error is not None, f"load_groups accepted what _as_groups rejects: {expected_error!r}"
        assert same_error(error, expected_error), (error, expected_error)
        return error
    assert error is None, f"load_groups raised {error!r}; _as_groups accepted the input"
    (want, want_skipped), (rows, skipped) = expected, got
    assert all(isinstance(g, GroupRows) for g in rows)
    assert [rows_group(g) for g in rows] == [model_group(g) for g in want]
    assert list(skipped) == list(want_skipped)
    assert all(same_error(skipped[uid], want_skipped[uid]) for uid in skipped), skipped
    return got


def raises_same(groups: Any, exception: type[BaseException], fragment: str) -> None:
    """The oracle, plus: it raised ``exception`` with ``fragment`` in its message (for the models'
    ValidationError: the error the InputError was raised from)."""
    error = assert_same(groups)
    if exception is ValidationError:
        assert isinstance(error, InputError), repr(error)
        error = error.__cause__
    assert isinstance(error, exception) and fragment in str(error), repr(error)


def one_rollout(rollout: dict) -> dict:
    """load_groups' single rollout (after the oracle) as the plain dict."""
    (group,), _ = assert_same([rollout])
    (only,) = group.rollouts
    return only


# --- real workloads and the real sample -------------------------------------------------------


def test_workload_s_takes_the_fast_tier_and_matches():
    """build_workload("S") (64 groups x 6) -> every row passes the fast tier; the result equals
    the model path and the actions are copies of the input's."""
    rows = build_workload("S")
    assert all(load_module._fast_row(r) is not None for r in rows)
    groups, skipped = assert_same(rows)
    assert (len(groups), skipped) == (64, {})
    assert [len(g.rollouts) for g in groups] == [6] * 64
    first = groups[0].rollouts[0]
    assert (groups[0].uid, first["rollout_id"], first["reward"]) == ("step-0000", "step-0000-0", None)
    assert first["actions"] == rows[0]["actions"] and first["actions"] is not rows[0]["actions"]
    assert first["actions"][1]["triples"][0] is not rows[0]["actions"][1]["triples"][0]


def test_real_sample_as_dicts_file_models_and_group_dicts():
    """The 2Wiki sample (180 rollouts, 119 with raw model text) as dicts, as a path (str and
    Path), as Rollout models, as Groups and as group dicts -> the same groups every time; the 61
    rollouts of structured actions only take the fast tier, the others the model path."""
    fast = [load_module._fast_row(r) is not None for r in SAMPLE_ROWS]
    assert fast == [all("action" in a for a in r["actions"]) for r in SAMPLE_ROWS]
    assert sum(fast) == 61
    results = [assert_same(SAMPLE_ROWS), assert_same(str(SAMPLE)), assert_same(SAMPLE)]
    models = [Rollout.model_validate(r) for r in SAMPLE_ROWS]
    results.append(assert_same(models))
    results.append(assert_same(group_rollouts(models)))
    by_uid: dict[str, list[dict]] = {}
    for r in SAMPLE_ROWS:
        by_uid.setdefault(r["uid"], []).append(r)
    results.append(assert_same([{"uid": uid, "rollouts": rs} for uid, rs in by_uid.items()]))
    results.append(assert_same([{"rollouts": rs} for rs in by_uid.values()]))
    canon = [[rows_group(g) for g in groups] for groups, _ in results]
    assert all(c == canon[0] for c in canon)
    groups = results[0][0]
    assert [g.uid for g in groups] == list(by_uid) and sum(len(g.rollouts) for g in groups) == 180
    kinds = {a["action"] for g in groups for r in g.rollouts for a in r["actions"]}
    assert kinds == {"search", "assert", "answer", "invalid"}
    # Raw model text is parsed by the model path: the second rollout opens with an unknown action.
    assert groups[0].rollouts[1]["actions"][0]["reason"] == "unknown action 'lookup'"


# --- hypothesis: real-looking batches with odd rows mixed in ----------------------------------


class Text(str):
    """A plain str subclass (as numpy.str_ is one)."""


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 2


ODD_REWARDS = [None, 0, 3, -1, 2**70, 0.5, -0.0, 1e308, np.float64(0.25), np.float32(0.5),
               np.int64(1), True, False, 10**400, float("nan"), float("inf"), "0.5", [0.5], Level.HIGH]
ODD_GOLD = [["Paris"], [" "], ["\x1c"], ["Paris", "\u3000"], ["\x85"], [b"Paris"], [b"\xff"], ("Paris",),
            [], "Paris", [Text("Paris")], [np.str_("Paris")], [Colour.RED], ["Par\ud800is"], [5],
            {"Paris"}]
ODD_ACTIONS = [
    {"action": "search", "query": "\x1c"}, {"action": "search", "query": "\u2028 \x1f"},
    {"action": "search", "query": "\u180e"}, {"action": "search", "query": Text("q")},
    {"action": "search", "query": np.str_("q")}, {"action": "search", "query": Colour.RED},
    {"action": "search", "query": b"q"}, {"action": "search", "query": b"  "},
    {"action": "search", "query": 5}, {"action": "search", "query": "x\ud800"},
    {"action": "search", "query": "q", "observation": b"o"}, {"action": "search", "query": "q", 5: 1},
    {"action": "search", "query": "q", "score": 0.3, "observation": None},
    {"action": Text("search"), "query": "q"}, {"action": "search"},
    {"action": "assert", "triples": [("a", "b", "c")]},
    {"action": "assert", "triples": (["a", "b", "c"],)},
    {"action": "assert", "triples": (["a", " ", "c"],)},
    {"action": "assert", "triples": [{"subject": "a", "relation": "b", "object": "c"}]},
    {"action": "assert", "triples": [{"subject": "a", "relation": "b"}]},
    {"action": "assert", "facts": [["a", "b", "c"]]},
    {"action": "assert", "triples": [["a", "b", "c"]], "facts": [["x", " ", "z"]]},
    {"action": "assert", "triples": [["a", "b"]]}, {"action": "assert", "triples": [["a", "b", "c", "d"]]},
    {"action": "assert", "triples": [["a", "b", "\x1f"]]}, {"action": "assert", "triples": []},
    {"action": "assert", "triples": [["a", "b", b"c"]]}, {"action": "assert", "triples": [[Text("a"), "b", "c"]]},
    {"action": "assert", "triples": [["a", "b", 5]]}, {"action": "assert", "triples": "abc"},
    {"action": "assert", "triples": [{"a", "b", "c"}]}, {"action": "assert", "triples": [["a"] * 3] * 2},
    {"action": "answer", "answer": b"x"}, {"action": "answer", "answer": None},
    {"action": "answer", "answer": ""}, {"action": "invalid", "raw": "x", "reason": "y"},
    {"action": "invalid", "raw": "x"}, {"raw": "<answer>Paris</answer>"}, {"raw": 5},
    {"action": "lookup"}, "not an action", types.MappingProxyType({"action": "search", "query": "q"}),
    SearchAction(query="q"), AssertAction(triples=[Triple(subject="a", relation="b", object="c")]),
]


def _with(rollout: dict, key: str, value: Any) -> dict:
    return {**rollout, key: value}


def _without(rollout: dict, key: str) -> dict:
    return {k: v for k, v in rollout.items() if k != key}


def _swap_action(rollout: dict, index: int, action: Any) -> dict:
    actions = list(rollout.get("actions", []))
    actions[index % (len(actions) + 1):index % (len(actions) + 1) + 1] = [action]
    return {**rollout, "actions": actions}


ROW_CHANGES = st.one_of(
    st.builds(lambda v: lambda r: _with(r, "reward", v), st.sampled_from(ODD_REWARDS)),
    st.builds(lambda v: lambda r: _with(r, "golden_answers", v), st.sampled_from(ODD_GOLD)),
    st.builds(lambda v: lambda r: _with(r, "question", v),
              st.sampled_from(["Other?", 5, b"What is it?", Text("What is it?")])),
    st.builds(lambda v: lambda r: _with(r, "uid", v),
              st.sampled_from(["g0", "g1", "", 5, None, Text("g0"), b"g0", "g\udfff"])),
    st.builds(lambda v: lambda r: _with(r, "rollout_id", v),
              st.sampled_from(["g0-0", "g1-1", "", 5, Text("x")])),
    st.builds(lambda k: lambda r: _without(r, k),
              st.sampled_from(["uid", "question", "golden_answers", "rollout_id", "actions", "reward"])),
    st.builds(lambda k, v: lambda r: _with(r, k, v), st.sampled_from(["step", "metadata"]),
              st.sampled_from([7, {"a": 1}, {5: 1}, "x", types.MappingProxyType({"a": 1})])),
    st.builds(lambda i, a: lambda r: _swap_action(r, i, a), st.integers(0, 9),
              st.sampled_from(ODD_ACTIONS)),
    st.just(lambda r: _with(r, "actions", tuple(r.get("actions", [])))),
)


@st.composite
def odd_inputs(draw):
    """A fuzz batch with up to 3 odd changes, given as rollout dicts, models or group dicts."""
    rows = draw(batches(max_groups=3, max_rollouts=4))
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(rows) - 1))
        rows[index] = draw(ROW_CHANGES)(rows[index])
    shape = draw(st.sampled_from(["rows", "rows", "groups", "groups without uid", "models"]))
    if shape == "models":  # the rows that validate become Rollout models, the rest stay dicts
        items = []
        for r in rows:
            try:
                items.append(Rollout.model_validate(r))
            except (ValueError, TypeError):
                items.append(r)
        return items
    if shape.startswith("groups"):
        by_uid: dict[str, list] = {}
        for r in rows:
            by_uid.setdefault(str(r.get("uid")), []).append(r)
        if shape == "groups":
            return [{"uid": uid, "rollouts": rs} for uid, rs in by_uid.items()]
        return [{"rollouts": rs} for rs in by_uid.values()]
    return rows


@FUZZ
@given(odd_inputs(), st.booleans())
def test_fuzzed_batches_match_the_model_path(items, skip_invalid):
    """Hypothesis batches (real facts, odd texts, raw model text) with odd rows, actions, rewards,
    gold, uids and keys mixed in, as dicts, models or group dicts -> the oracle holds."""
    assert_same(items, skip_invalid=skip_invalid)


# --- the bad-input catalogue of test_reliability ------------------------------------------------

_DEEP: list = []
_inner = _DEEP
for _ in range(100_000):
    _inner.append([])
    _inner = _inner[0]

CATALOGUE = {
    "empty batch": [],
    "empty group": [{"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollouts": []}],
    "empty group then a good one": [
        {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollouts": []}, row(uid="p")],
    "one rollout": [row()],
    "all right": [row(f"q-{i}", actions=[SEARCH, ASSERT, RIGHT]) for i in range(6)],
    "rewards 0.1": [row(f"q-{i}", reward=0.1) for i in range(3)],
    "int and list items": [5],
    "list item": [[1, 2]],
    **{f"reward {v!r}": [row(reward=v)] for v in
       (float("nan"), float("inf"), float("-inf"), 10**400, "0.5", "NaN", "1e400", "0x1F", True,
        [0.5], -0.5, 1.7, 1e300, 1.7e308, 5e-324, 1e39)},
    "no gold": [_without(row(), "golden_answers")],
    **{f"gold {g!r}": [row(golden_answers=g)] for g in ([], [""], ["Paris", " \t"], "Paris")},
    "other gold": [row("q-0"), row("q-1", golden_answers=["Lyon"])],
    "other question": [row("q-0"), row("q-1", question="Other?")],
    "no actions": [row("q-0"), row("q-1", actions=[])],
    "only invalid": [row(actions=[{"raw": "no json here"}, {"raw": '{"action": "search", "query": '},
                                  {"action": "invalid", "raw": "x", "reason": "given"}])],
    "after the answer": [row("q-0", actions=[SEARCH, RIGHT, SEARCH, ASSERT]), row("q-1")],
    **{f"assert {t!r}": [row(actions=[{"action": "assert", "triples": t}])] for t in
       ([["France", "", "Paris"]], [["France", "capital", "Paris"], ["  ", "capital", "Paris"]],
        [["France", "capital"]], [])},
    **{f"typed {a!r}": [row(actions=[a])] for a in
       ({"action": "assert", "triples": [[5, "r", "o"]]}, {"action": "answer", "answer": None},
        {"action": "search", "query": 5}, {"action": "search", "query": "q", "observation": 5})},
    "blank query": [row(actions=[dict(SEARCH, query="  ")])],
    "unknown action": [row(actions=[{"action": "lookup", "query": "x"}])],
    "repeated rollout_id": [row("q-0"), row("q-0")],
    "rollout_id in two uids": [row("r", uid="a"), row("s", uid="a", actions=[]),
                               row("r", uid="b", actions=[SEARCH, ASSERT, WRONG]), row("s", uid="b")],
    "empty uid": [row(uid="")],
    "empty rollout_id": [row(rid="")],
    "megabyte texts": [row("q-0", actions=[dict(SEARCH, query="x " * 500_000), {
        "action": "assert", "triples": [["Ford", "archive", "y " * 500_000]]}, RIGHT])],
    "10,000 triples": [row(actions=[SEARCH, {"action": "assert", "triples": [
        [f"Entity {i}", "born in", f"City {i % 97}"] for i in range(10_000)]}, RIGHT])],
    "bytes gold": [row(golden_answers=[b"Paris"])],
    "bad bytes gold": [row(golden_answers=[b"\xff"])],
    "lone surrogates": [row("q-0", question="Wh\udfffat?", actions=[dict(SEARCH, query="x\ud800"), {
        "action": "assert", "triples": [["Fr\ud800ance", "capital", "Paris"]]},
        {"action": "answer", "answer": "Paris\udc00"}]), row("q-1", question="Wh\udfffat?")],
    "lone surrogate uid": [row(uid="q\udfff")],
    "rtl cjk emoji": [row("q-0", golden_answers=["🗼"], actions=[{"action": "assert", "triples": [
        ["باريس", "عاصمة", "فرنسا"], ["\u200fשלום\u200e", "עולם", "x"], ["ＰＡＲＩＳ", "in", "🇫🇷"]]}])],
    "number spellings": [row(actions=[{"action": "assert", "triples": [
        ["X", "value", v] for v in ("1e400", "NaN", "nan", "0x1F", "-0", "Infinity")]}])],
    "garbled raw": [row(actions=[{"raw": text, "observation": "obs"}]) for text in (
        '{"action": "search", "query": "Paris}', "{" * 10_000, "<answer>Paris",
        "<search>capital of <answer>Paris</answer></search>", "<search>   </search>")],
    "unknown keys": [row(actions=[dict(SEARCH, score=0.3)], step=7)],
    "group with unknown key": [{"uid": "q", "rollouts": [row()], "weight": 2}],
}


@pytest.mark.parametrize("items", list(CATALOGUE.values()), ids=list(CATALOGUE))
def test_reliability_catalogue_inputs(items):
    """Each input of the reliability catalogue -> the oracle holds, raising and skipping alike."""
    assert_same(items)
    assert_same(items, skip_invalid=True)


def test_deeply_nested_unknown_keys():
    """A 100,000-deep list under an unknown key of a rollout and of an action -> accepted, the
    assert (no triple) invalid, as the model path says."""
    items = [row(extra=_DEEP, actions=[{"action": "assert", "triples": [], "extra": _DEEP}, RIGHT]),
             row("q-1", metadata={"deep": _DEEP}, actions=[dict(SEARCH, extra=_DEEP)])]
    (group,), _ = assert_same(items, check_input=False)
    assert [a["action"] for r in group.rollouts for a in r["actions"]] == ["invalid", "answer", "search"]


# --- pitfalls, one by one ---------------------------------------------------------------------


def test_fast_tier_blank_class_is_exactly_str_isspace():
    """Every code point: the fast tier's text check accepts it alone iff ``not c.isspace()``
    (U+001C..U+001F included, which Rust's \\s lacks); lone surrogates go to the model path."""
    chars = [chr(c) for c in range(0x110000)]
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(list[load_module._Text]).validate_python(chars)
    rejected = {error["loc"][0] for error in caught.value.errors()}
    surrogates = set(range(0xD800, 0xE000))
    assert rejected - surrogates == {c for c in range(0x110000) if chars[c].isspace()}
    assert surrogates <= rejected and {0x1C, 0x1D, 0x1E, 0x1F, 0x85, 0x3000} <= rejected


@pytest.mark.parametrize("blank", ["\x1c", "\x1d \x1e", "\x1f\t", "\u2028", "\u3000\x85"])
def test_python_blank_strings_take_the_model_path(blank):
    """A query, triple part or gold of characters only str.isspace calls space -> a search made
    invalid, an assert made invalid, a gold refused: exactly as the model path."""
    search, assertion = one_rollout(row(actions=[dict(SEARCH, query=blank), {
        "action": "assert", "triples": [["France", blank, "Paris"]]}]))["actions"]
    assert (search["action"], search["reason"]) == ("invalid", "search with an empty query")
    assert (assertion["action"], assertion["reason"]) == ("invalid", "triple 0 has an empty relation")
    raises_same([row(golden_answers=["Paris", blank])], ValidationError,
                f"golden_answers[1] is empty or whitespace: {blank!r}")
    # A blank answer is an answer, not a blank text: no check, both tiers keep it.
    assert one_rollout(row(actions=[{"action": "answer", "answer": blank}]))["actions"] == [
        {"action": "answer", "answer": blank}]


@pytest.mark.parametrize("value,expected", [
    (None, None), (0, 0.0), (-3, -3.0), (2**70, float(2**70)), (0.5, 0.5), (-0.0, -0.0),
    (1.7e308, 1.7e308), (np.float64(0.25), 0.25), (Level.HIGH, 2.0),
])
def test_accepted_rewards_become_plain_floats(value, expected):
    """None, ints (huge ones within float range too), floats, numpy float64, an IntEnum ->
    ``reward`` a plain float (or None) equal to the model's."""
    got = one_rollout(row(reward=value))["reward"]
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value,message", [
    (True, "reward must be a number or null, got True"),
    (False, "reward must be a number or null, got False"),
    (np.int64(1), "reward must be a number or null, got np.int64(1)"),
    (np.float32(0.5), "reward must be a number or null, got np.float32(0.5)"),
    ("0.5", "reward must be a number or null, got '0.5'"),
    (10**400, "reward must be finite, got 1" + "0" * 76 + "..."),
    (float("nan"), "reward must be finite, got nan"),
    (float("-inf"), "reward must be finite, got -inf"),
    (np.float64("inf"), "reward must be finite, got np.float64(inf)"),
])
def test_refused_rewards_raise_the_model_error(value, message):
    """bool, numpy ints and float32, strings, 10**400, NaN and infinities -> the model's
    ValidationError at ``reward``, word for word."""
    raises_same([row(reward=value)], ValidationError, message)


def test_str_subclasses_and_bytes():
    """str subclasses (plain, numpy.str_, a str Enum) anywhere -> plain str values equal to the
    model's; bytes -> the model path decodes them (b"  " as a query even stays a search, as
    there) or refuses them (b"\\xff")."""
    rollout = one_rollout(row(
        uid=Text("q"), question=np.str_("Q?"), golden_answers=[Text("Paris"), Colour.RED],
        rollout_id=np.str_("q-0"), actions=[dict(SEARCH, query=Colour.RED), {
            "action": "assert", "triples": [[Text("a"), np.str_("b"), Colour.RED]]}]))
    assert rollout["golden_answers"] == ["Paris", "red"]
    assert rollout["actions"][0]["query"] == "red"
    assert rollout["actions"][1]["triples"] == [["a", "b", "red"]]
    rollout = one_rollout(row(golden_answers=[b"Paris"], actions=[
        {"action": "search", "query": b"  "}, {"action": "answer", "answer": b"Lyon"}]))
    assert rollout["golden_answers"] == ["Paris"]
    assert rollout["actions"] == [{"action": "search", "query": "  ", "observation": None},
                                  {"action": "answer", "answer": "Lyon"}]
    raises_same([row(actions=[{"action": "assert", "triples": [["a", "b", b"\xff"]]}])],
                ValidationError, "unable to parse raw data as a unicode string")


def test_triple_forms_tuples_dicts_and_the_facts_alias():
    """Tuple triples, dict triples and ``facts`` -> ``triples`` as lists of 3 str; an outer tuple
    skips the invalid-assert rule, so a blank part there is a data error, as in the model."""
    rollout = one_rollout(row(actions=[
        {"action": "assert", "triples": [("France", "capital", "Paris")]},
        {"action": "assert", "triples": [{"subject": "a", "relation": "b", "object": "c"}]},
        {"action": "assert", "facts": [["x", "y", "z"]]},
        {"action": "assert", "triples": (["u", "v", "w"],)},
        {"action": "assert", "facts": [["x", "y"]]}]))
    assert [a.get("triples") for a in rollout["actions"]] == [
        [["France", "capital", "Paris"]], [["a", "b", "c"]], [["x", "y", "z"]], [["u", "v", "w"]], None]
    assert rollout["actions"][4]["reason"] == "triple 0 has 2 parts, expected 3"
    raises_same([row(actions=[{"action": "assert", "triples": (["u", " ", "w"],)}])],
                ValidationError, "relation must not be empty or whitespace")
    raises_same([row(actions=[{"action": "assert", "triples": [{"France", "capital", "Paris"}]}])],
                ValidationError, "Input should be a valid dictionary or instance of Triple")


def test_raw_actions_unknown_keys_and_metadata():
    """A raw item is parsed; an unknown action key is kept; a non-string action key is refused;
    an unknown rollout key goes to metadata (the fast tier takes it unless the merge could fail);
    a metadata that is not a dict, or a key that is not a string, is refused."""
    for extra in ({"step": 7}, {"step": 7, "metadata": {"run": 1}}, {"metadata": {}}):
        assert load_module._fast_row(row(**extra)) is not None
        one_rollout(row(**extra))
    assert load_module._fast_row({**row(), b"step": 7}) is None
    assert one_rollout({**row(), b"step": 7})["rollout_id"] == "q-0"  # the model decodes the key
    raises_same([{**row(), 5: 7}], ValidationError, "metadata.5.[key]")
    raises_same([row(metadata=[("a", 1)], step=7)], ValidationError, "metadata")
    rollout = one_rollout(row(step=7, metadata={"run": 1}, actions=[
        {"raw": '{"action": "search", "query": "Paris"}', "observation": "obs"},
        dict(SEARCH, score=0.3), {"action": "answer", "answer": "Paris", "raw": "kept"}]))
    assert [row_action(a) for a in rollout["actions"]] == [
        ("search", "Paris", "obs"), ("search", SEARCH["query"], SEARCH["observation"]),
        ("answer", "Paris")]
    raises_same([row(actions=[{"action": "search", "query": "q", 5: 1}])], ValidationError,
                "Keys should be strings")
    raises_same([row(metadata="x")], ValidationError, "metadata")
    raises_same([row(metadata="x", step=7)], ValidationError, "metadata")
    raises_same([row(metadata={5: 1})], ValidationError, "metadata.5.[key]")


def test_group_checks_give_the_model_errors():
    """Another uid in a group dict, a repeated rollout_id, other gold or question, one uid in two
    groups (dicts, Groups, a group dict and loose rows) -> the reference's exception."""
    raises_same([{"uid": "p", "rollouts": [row()]}], ValidationError,
                "rollouts[0].uid is 'q', the group's uid is 'p'")
    raises_same([{"rollouts": [row("q-0"), row("q-0")]}], ValidationError,
                "rollouts[1].rollout_id 'q-0' repeats rollouts[0] in group 'q'")
    raises_same([{"rollouts": [row("q-0"), row("q-1", golden_answers=["Lyon"])]}], ValidationError,
                "rollouts[1].golden_answers ['Lyon'] differ from the group's ['Paris']")
    raises_same([{"golden_answers": ["Lyon"], "rollouts": [row("q-0")]}], ValidationError,
                "rollouts[0].golden_answers ['Paris'] differ from the group's ['Lyon']")
    raises_same([{"question": "Other?", "rollouts": [row("q-0")]}], ValidationError,
                "rollouts[0].question 'What is the capital of France?' differs")
    raises_same([row("q-0"), row("q-1", question="Other?")], ValidationError,
                "rollouts[1].question 'Other?' differs")
    message = "uid 'q' appears in two groups; a uid names one group"
    group = Group.from_rollouts([Rollout.model_validate(row())])
    raises_same([group, group], ValueError, message)
    raises_same([{"rollouts": [row()]}, {"uid": "q", "rollouts": [row()]}], ValueError, message)
    raises_same([{"rollouts": [row()]}, row()], ValueError, message)
    raises_same([row(), group], ValueError, message)


def test_group_shapes():
    """A group dict with bad rollouts (all reported at once), a non-dict Mapping, a tuple of
    rollouts, Rollout models inside, an empty or missing list -> as the reference."""
    raises_same([{"uid": "q", "rollouts": [row("q-0", reward=True), row("q-1", uid="")]}],
                ValidationError, "2 validation errors for Group")
    assert_same([types.MappingProxyType({"uid": "q", "rollouts": [row()]})])
    assert_same([{"uid": "q", "rollouts": (row("q-0"), row("q-1"))}])
    assert_same([{"uid": "q", "rollouts": [Rollout.model_validate(row("q-0")), row("q-1")]}])
    assert_same([row("q-0"), Rollout.model_validate(row("q-1"))])
    assert_same([{"uid": "q", "rollouts": None}])
    raises_same([{"rollouts": [_without(row(), "question")]}], ValidationError, "question\n  Field required")
    raises_same([{"uid": "q", "rollouts": [row(), 5]}], ValidationError, "rollouts.1")
    assert_same({"uid": "q", "rollouts": [row()]})
    assert_same(Group.from_rollouts([Rollout.model_validate(row())]))
    assert_same(row())
    (group,), _ = assert_same([{"rollouts": [row("q-0", reward=1), row("q-1")]}])
    assert (group.uid, group.golden_answers, [r["reward"] for r in group.rollouts]) == (
        "q", ["Paris"], [1.0, None])


def test_given_models_are_checked_as_the_reference_checks_them():
    """A Rollout model changed after validation (models are not frozen) is not validated again,
    but its group is: a blank gold set on the first model, alone or followed by a dict, -> the
    Group's ValidationError; another question on the second -> the group check's."""
    model = Rollout.model_validate(row("q-0"))
    model.golden_answers = [" "]
    raises_same([model], ValidationError, "golden_answers[0] is empty or whitespace")
    raises_same([model, row("q-1")], ValidationError, "golden_answers[0] is empty or whitespace")
    model = Rollout.model_validate(row("q-1"))
    model.question = "Other?"
    raises_same([row("q-0"), model], ValidationError, "rollouts[1].question 'Other?' differs")


def test_skip_invalid_keeps_the_other_groups():
    """skip_invalid=True with bad groups among good ones -> the good ones, and uid ->
    str(error) for each bad one under the reference's key ("?", "5", "None" included)."""
    items = [row("a-0", uid="a"), row("b-0", uid="b", reward=float("nan")), row("c-0", uid="c"),
             {"rollouts": []}, row("d-0", uid=5), _without(row("e-0"), "uid"),
             {"uid": "c", "rollouts": [row("c-1", uid="c")]}, row("a-1", uid="a", question="?")]
    groups, skipped = assert_same(items, skip_invalid=True)
    assert [g.uid for g in groups] == ["c"]
    assert list(skipped) == ["a", "b", "?", "5", "None", "c"]
    assert "reward must be finite, got nan" in skipped["b"]
    assert skipped["c"] == "uid 'c' appears in two groups; a uid names one group"
    assert skipped["a"] == "groups[7] (uid 'a', rollout_id 'a-1'): question: '?' differs from groups[0] for uid 'a'"
    assert skipped["b"] == "groups[1] (uid 'b', rollout_id 'b-0'): reward: reward must be finite, got nan"
    raises_same(items, ValidationError, "rollouts[1].question '?' differs")


def test_inputs_are_never_mutated_and_rows_are_copies():
    """A rollout without reward, with an int reward, in a group dict without uid -> the input
    keeps its keys and values; changing the result leaves the input alone."""
    items = [row("q-0"), row("q-1", reward=1), {"rollouts": [row("p-0", uid="p", reward=2)]}]
    before = copy.deepcopy(items)
    groups, _ = load_groups(items)
    assert items == before and "reward" not in items[0]
    assert [r["reward"] for g in groups for r in g.rollouts] == [None, 1.0, 2.0]
    groups[0].rollouts[0]["actions"][1]["triples"][0][0] = "changed"
    groups[0].golden_answers.append("changed")
    groups[1].rollouts[0]["golden_answers"].append("changed")
    assert items == before


def test_paths_non_group_items_and_iterators(tmp_path):
    """A file with problems -> the same InputError; an int, a list or bytes (not a path) among the
    items -> the same TypeError; a generator is read once, like a list."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row("q-0")) + "\n" + json.dumps(row("q-0")) + "\n")
    raises_same(path, InputError, "2: rollout_id: 'q-0' repeats line 1 in uid 'q'")
    raises_same([row(), 5], TypeError, "got int")
    raises_same([[1, 2]], TypeError, "got list")
    raises_same(b"in.jsonl", TypeError, "got int")
    groups, _ = load_groups(r for r in SAMPLE_ROWS)
    assert [rows_group(g) for g in groups] == [rows_group(g) for g in load_groups(SAMPLE_ROWS)[0]]


def test_models_become_rows_field_by_field():
    """A Group of models -> GroupRows whose action dicts carry the model's fields: search
    (query, observation), assert (triples as lists), answer, invalid (raw, reason, observation)."""
    model = Rollout.model_validate(row(reward=0.5, actions=[
        SEARCH, {"action": "assert", "facts": [("a", "b", "c")]}, {"raw": "nonsense"}, RIGHT]))
    rows = group_rows(Group.from_rollouts([model]))
    assert (rows.uid, rows.question, rows.golden_answers) == (
        "q", "What is the capital of France?", ["Paris"])
    (rollout,) = rows.rollouts
    assert {k: v for k, v in rollout.items() if k != "actions"} == {
        "uid": "q", "question": "What is the capital of France?", "golden_answers": ["Paris"],
        "rollout_id": "q-0", "reward": 0.5}
    assert rollout["actions"] == [
        {"action": "search", "query": "capital of France", "observation": "Paris is the capital."},
        {"action": "assert", "triples": [["a", "b", "c"]]},
        {"action": "invalid", "raw": "nonsense", "reason": "no action found", "observation": None},
        {"action": "answer", "answer": "Paris"}]


# --- the group-dict form and how dict input errors read (docs/method.md §8) ------------------


def test_group_dict_rollouts_inherit_uid_question_and_gold():
    """A group dict whose rollouts hold only rollout_id and actions -> the same rows as the same
    group with every field written out on each rollout, on the fast tier and on the models; the
    input is not changed; a rollout's own differing uid is still the group check's error."""
    short = {"uid": "q", "question": "What is the capital of France?", "golden_answers": ["Paris"],
             "rollouts": [{"rollout_id": "q-0", "actions": [SEARCH, ASSERT, RIGHT]},
                          {"rollout_id": "q-1", "actions": [WRONG], "reward": 0.25}]}
    full = {"rollouts": [row("q-0"), row("q-1", actions=[WRONG], reward=0.25)]}
    before = copy.deepcopy(short)
    (got,), _ = load_groups([short])
    (want,), _ = load_groups([full])
    assert short == before
    assert rows_group(got) == rows_group(want)
    (model,) = Group.model_validate(short).rollouts[:1]
    assert (model.uid, model.question, model.golden_answers) == (
        "q", "What is the capital of France?", ["Paris"])
    # The fast tier alone (its rollouts are plain dicts) gives it too.
    assert load_module._dict_group(short) is not None
    mixed = copy.deepcopy(short)
    mixed["rollouts"][1]["uid"] = "p"
    with pytest.raises(InputError) as caught:
        load_groups([mixed])
    assert str(caught.value) == (
        "groups[0] (uid 'q'): (group): rollouts[1].uid is 'p', the group's uid is 'q'")


def test_dict_errors_name_the_position_like_file_errors():
    """Bad dicts -> InputError, one line per problem, ``groups[i] (uid, rollout_id): field:
    message`` (as a file's ``FILE:LINE: field: message``): every bad rollout of a uid at once;
    a group dict's problems under its position; a single mapping is ``groups``; an action with no
    ``action`` key says so; ``__cause__`` is the models' ValidationError."""
    items = [row("q-0", actions=[{"query": "capital"}, RIGHT]), row("p-0", uid="p"),
             row("q-1", reward="high")]
    with pytest.raises(InputError) as caught:
        load_groups(items)
    assert str(caught.value).splitlines() == [
        ("groups[0] (uid 'q', rollout_id 'q-0'): actions[0]: missing field `action` (one of "
         "search, assert, answer, invalid), or `raw` model output to parse (got {'query': "
         "'capital'})"),
        ("groups[2] (uid 'q', rollout_id 'q-1'): reward: reward must be a number or null, "
         "got 'high'"),
    ]
    assert isinstance(caught.value.__cause__, ValidationError)
    group = {"uid": "q", "question": "?", "golden_answers": ["Paris"],
             "rollouts": [{"rollout_id": "q-0", "actions": [{"action": "search"}]}]}
    with pytest.raises(InputError) as caught:
        load_groups([row("p-0", uid="p"), group])
    assert str(caught.value) == "groups[1] (uid 'q'): rollouts[0].actions[0].query: Field required"
    with pytest.raises(InputError) as caught:
        load_groups(group)
    assert str(caught.value) == "groups (uid 'q'): rollouts[0].actions[0].query: Field required"
    with pytest.raises(InputError) as caught:
        load_groups([row("q-0"), row("q-0")])
    assert str(caught.value) == (
        "groups[1] (uid 'q', rollout_id 'q-0'): rollout_id: 'q-0' repeats groups[0] in uid 'q'")
