"""The input rules of ``compute_process_advantages`` (factutil/load.py over the models of schema.py).

Every accepted form (path, Group, Rollouts, rollout dicts, group dicts) gives the same plain rows;
bad input gives an ``InputError`` naming the item, the field and the value
(``groups[i] (uid …, rollout_id …): field: message``); the input is never changed.
"""

from __future__ import annotations

import copy
import enum
import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from pydantic import ValidationError
from typer.testing import CliRunner

from benchmarks.workloads import build_workload
from factutil import FactUtilConfig, compute_process_advantages
from factutil.cli import app
from factutil.io import InputError
from factutil.load import GroupRows, group_rows, load_groups
from factutil.schema import Group, Rollout, group_rollouts
from tests.test_reliability import ASSERT, RIGHT, SEARCH, WRONG, row

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "2wiki_rollouts.jsonl"
SAMPLE_ROWS = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


class Text(str):
    """A plain str subclass (as numpy.str_ is one)."""


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 2


def rows_group(rows: GroupRows) -> tuple:
    """A group's rows as a comparable tuple, each text checked to be a plain str."""
    def plain(value: Any) -> Any:
        if isinstance(value, str):
            assert type(value) is str, f"{value!r} is a {type(value).__name__}, not str"
        elif isinstance(value, (list, tuple)):
            return [plain(part) for part in value]
        elif isinstance(value, dict):
            return {key: plain(part) for key, part in value.items()}
        return value
    return plain([rows.uid, rows.question, rows.golden_answers, rows.rollouts])


def one_rollout(rollout: dict) -> dict:
    """load_groups' single rollout as the plain dict."""
    (group,), skipped = load_groups([rollout])
    assert skipped == {}
    (only,) = group.rollouts
    return only


def refused(groups: Any, fragment: str, exception: type[BaseException] = InputError) -> BaseException:
    """load_groups raises ``exception`` with ``fragment`` in its text (for an InputError, in its
    text or in the models' ValidationError it was raised from; every line names the item)."""
    with pytest.raises(exception) as caught:
        load_groups(groups)
    error = caught.value
    text = str(error)
    if isinstance(error, InputError) and isinstance(error.__cause__, ValidationError):
        assert all(line.startswith("groups") for line in text.splitlines()), text
        text += "\n" + str(error.__cause__)
    assert fragment in text, text
    return error


# --- every form, the same rows ----------------------------------------------------------------


def test_workload_s_rows_are_copies_of_the_input():
    """build_workload("S") (64 groups x 6, structured actions) -> 64 groups of 6 rollouts whose
    actions equal the input's and share no list with it."""
    rows = build_workload("S")
    groups, skipped = load_groups(rows)
    assert (len(groups), skipped) == (64, {})
    assert [len(g.rollouts) for g in groups] == [6] * 64
    first = groups[0].rollouts[0]
    assert (groups[0].uid, first["rollout_id"], first["reward"]) == ("step-0000", "step-0000-0", None)
    assert first["actions"] == rows[0]["actions"] and first["actions"] is not rows[0]["actions"]
    assert first["actions"][1]["triples"][0] is not rows[0]["actions"][1]["triples"][0]


def test_real_sample_as_dicts_file_models_and_group_dicts():
    """The 2Wiki sample (180 rollouts, 119 with raw model text) as dicts, as a path (str and
    Path), as Rollout models, as Groups and as group dicts -> the same groups every time."""
    models = [Rollout.model_validate(r) for r in SAMPLE_ROWS]
    by_uid: dict[str, list[dict]] = {}
    for r in SAMPLE_ROWS:
        by_uid.setdefault(r["uid"], []).append(r)
    forms = [SAMPLE_ROWS, str(SAMPLE), SAMPLE, models, group_rollouts(models),
             [{"uid": uid, "rollouts": rs} for uid, rs in by_uid.items()],
             [{"rollouts": rs} for rs in by_uid.values()]]
    results = [load_groups(form) for form in forms]
    assert all(skipped == {} for _, skipped in results)
    canon = [[rows_group(g) for g in groups] for groups, _ in results]
    assert all(c == canon[0] for c in canon)
    groups = results[0][0]
    assert [g.uid for g in groups] == list(by_uid) and sum(len(g.rollouts) for g in groups) == 180
    kinds = {a["action"] for g in groups for r in g.rollouts for a in r["actions"]}
    assert kinds == {"search", "assert", "answer", "invalid"}
    # Raw model text is parsed: the second rollout opens with an unknown action.
    assert groups[0].rollouts[1]["actions"][0]["reason"] == "unknown action 'lookup'"


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


def test_group_dict_rollouts_inherit_uid_question_and_gold():
    """A group dict whose rollouts hold only rollout_id and actions -> the same rows as the same
    group with every field written out on each rollout; the input is not changed; a rollout's
    own differing uid is the group check's error."""
    short = {"uid": "q", "question": "What is the capital of France?", "golden_answers": ["Paris"],
             "rollouts": [{"rollout_id": "q-0", "actions": [SEARCH, ASSERT, RIGHT]},
                          {"rollout_id": "q-1", "actions": [WRONG], "reward": 0.25}]}
    full = {"rollouts": [row("q-0"), row("q-1", actions=[WRONG], reward=0.25)]}
    before = copy.deepcopy(short)
    (got,), _ = load_groups([short])
    (want,), _ = load_groups([full])
    assert short == before
    assert rows_group(got) == rows_group(want)
    assert [r["rollout_id"] for r in got.rollouts] == ["q-0", "q-1"]
    mixed = copy.deepcopy(short)
    mixed["rollouts"][1]["uid"] = "p"
    with pytest.raises(InputError) as caught:
        load_groups([mixed])
    assert str(caught.value) == (
        "groups[0] (uid 'q'): (group): rollouts[1].uid is 'p', the group's uid is 'q'")


# --- what the rules accept and how -------------------------------------------------------------


@pytest.mark.parametrize("blank", ["\x1c", "\x1d \x1e", "\x1f\t", "\u2028", "\u3000\x85"])
def test_blank_texts_are_what_str_isspace_calls_blank(blank):
    """A query or triple part of characters str.isspace calls space -> the search or assert made
    invalid; such a gold -> refused, naming it; a blank answer is an answer and is kept."""
    search, assertion = one_rollout(row(actions=[dict(SEARCH, query=blank), {
        "action": "assert", "triples": [["France", blank, "Paris"]]}]))["actions"]
    assert (search["action"], search["reason"]) == ("invalid", "search with an empty query")
    assert (assertion["action"], assertion["reason"]) == ("invalid", "triple 0 has an empty relation")
    refused([row(golden_answers=["Paris", blank])],
            f"golden_answers: golden_answers[1] is empty or whitespace: {blank!r}")
    assert one_rollout(row(actions=[{"action": "answer", "answer": blank}]))["actions"] == [
        {"action": "answer", "answer": blank}]


@pytest.mark.parametrize("value,expected", [
    (None, None), (0, 0.0), (-3, -3.0), (2**70, float(2**70)), (0.5, 0.5), (-0.0, -0.0),
    (1.7e308, 1.7e308), (np.float64(0.25), 0.25), (Level.HIGH, 2.0), (np.int64(1), 1.0),
    (np.float32(0.5), 0.5), (np.uint8(3), 3.0), (np.array(-0.75), -0.75),
    (np.array([1.0, 0.25])[1], 0.25), (torch.tensor(0.5), 0.5), (torch.tensor(2), 2.0),
    (torch.tensor([1.0, 0.0])[1], 0.0), (torch.tensor(0.25, dtype=torch.bfloat16), 0.25),
])
def test_accepted_rewards_become_plain_floats(value, expected):
    """None, ints (huge ones within float range too), floats, an IntEnum, numpy scalars and 0-d
    numpy arrays and torch tensors (what a trainer hands over, e.g. one item of its rewards) ->
    ``reward`` a plain float (or None)."""
    got = one_rollout(row(reward=value))["reward"]
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value,message", [
    (True, "reward must be a number or null, got True"),
    (False, "reward must be a number or null, got False"),
    (np.True_, "reward must be a number or null, got np.True_"),
    (np.array([0.5, 1.0]), "reward must be a number or null, got array([0.5, 1. ])"),
    (torch.tensor([0.5]), "reward must be a number or null, got tensor([0.5000])"),
    (torch.tensor(True), "reward must be a number or null, got tensor(True)"),
    (np.array(1 + 2j), "reward must be a number or null, got array(1.+2.j)"),
    ("0.5", "reward must be a number or null, got '0.5'"),
    (10**400, "reward must be finite, got 1" + "0" * 76 + "..."),
    (float("nan"), "reward must be finite, got nan"),
    (float("-inf"), "reward must be finite, got -inf"),
    (np.float64("inf"), "reward must be finite, got np.float64(inf)"),
    (np.float32("nan"), "reward must be finite, got np.float32(nan)"),
    (torch.tensor(float("-inf")), "reward must be finite, got tensor(-inf)"),
])
def test_refused_rewards_name_the_field_and_value(value, message):
    """bools (Python, numpy, torch), arrays of more than one value, complex numbers, strings,
    10**400, NaN and infinities (numpy and torch too) -> one line at ``reward`` naming the value."""
    error = refused([row(reward=value)], message)
    assert str(error) == f"groups[0] (uid 'q', rollout_id 'q-0'): reward: {message}"


def test_str_subclasses_and_bytes():
    """str subclasses (plain, numpy.str_, a str Enum) anywhere -> plain str values; bytes ->
    decoded (b"  " as a query stays a search: it is not a blank str when checked) or refused
    (b"\\xff")."""
    rollout = one_rollout(row(
        uid=Text("q"), question=np.str_("Q?"), golden_answers=[Text("Paris"), Colour.RED],
        rollout_id=np.str_("q-0"), actions=[dict(SEARCH, query=Colour.RED), {
            "action": "assert", "triples": [[Text("a"), np.str_("b"), Colour.RED]]}]))
    assert rows_group(GroupRows("q", "Q?", ["Paris", "red"], [rollout]))
    assert rollout["golden_answers"] == ["Paris", "red"]
    assert rollout["actions"][0]["query"] == "red"
    assert rollout["actions"][1]["triples"] == [["a", "b", "red"]]
    rollout = one_rollout(row(golden_answers=[b"Paris"], actions=[
        {"action": "search", "query": b"  "}, {"action": "answer", "answer": b"Lyon"}]))
    assert rollout["golden_answers"] == ["Paris"]
    assert rollout["actions"] == [{"action": "search", "query": "  ", "observation": None},
                                  {"action": "answer", "answer": "Lyon"}]
    refused([row(actions=[{"action": "assert", "triples": [["a", "b", b"\xff"]]}])],
            "unable to parse raw data as a unicode string")


def test_triple_forms_tuples_dicts_and_the_facts_alias():
    """Tuple triples, dict triples and ``facts`` -> ``triples`` as lists of 3 str; an outer tuple
    skips the invalid-assert rule, so a blank part there is a data error."""
    rollout = one_rollout(row(actions=[
        {"action": "assert", "triples": [("France", "capital", "Paris")]},
        {"action": "assert", "triples": [{"subject": "a", "relation": "b", "object": "c"}]},
        {"action": "assert", "facts": [["x", "y", "z"]]},
        {"action": "assert", "triples": (["u", "v", "w"],)},
        {"action": "assert", "facts": [["x", "y"]]}]))
    assert [a.get("triples") for a in rollout["actions"]] == [
        [["France", "capital", "Paris"]], [["a", "b", "c"]], [["x", "y", "z"]], [["u", "v", "w"]], None]
    assert rollout["actions"][4]["reason"] == "triple 0 has 2 parts, expected 3"
    refused([row(actions=[{"action": "assert", "triples": (["u", " ", "w"],)}])],
            "actions[0].triples[0].relation: relation must not be empty or whitespace, got ' '")
    refused([row(actions=[{"action": "assert", "triples": [{"France", "capital", "Paris"}]}])],
            "Input should be a valid dictionary or instance of Triple")


def test_raw_actions_unknown_keys_and_metadata():
    """A raw item is parsed; an unknown action key is kept off the row; a non-string action key
    is refused; an unknown rollout key goes to metadata; a metadata that is not a dict, or a key
    that is not a string, is refused."""
    for extra in ({"step": 7}, {"step": 7, "metadata": {"run": 1}}, {"metadata": {}}):
        assert one_rollout(row(**extra))["rollout_id"] == "q-0"
    assert one_rollout({**row(), b"step": 7})["rollout_id"] == "q-0"  # the model decodes the key
    refused([{**row(), 5: 7}], "metadata.5.[key]")
    refused([row(metadata=[("a", 1)], step=7)], "metadata")
    rollout = one_rollout(row(step=7, metadata={"run": 1}, actions=[
        {"raw": '{"action": "search", "query": "Paris"}', "observation": "obs"},
        dict(SEARCH, score=0.3), {"action": "answer", "answer": "Paris", "raw": "kept"}]))
    assert rollout["actions"] == [
        {"action": "search", "query": "Paris", "observation": "obs"}, SEARCH,
        {"action": "answer", "answer": "Paris"}]
    refused([row(actions=[{"action": "search", "query": "q", 5: 1}])], "Keys should be strings")
    refused([row(metadata="x")], "metadata: Input should be a valid dictionary")
    refused([row(metadata="x", step=7)], "metadata: Input should be a valid dictionary")
    refused([row(metadata={5: 1})], "metadata.5.[key]")


def test_rows_read_back_from_arrow_with_null_keys_are_the_same_rollouts():
    """Rollouts stored in a datasets/parquet table come back with every action key of the column,
    null where an item had none (``"action": None`` on a raw item): read as the rows given."""
    rows = [row(actions=[{"raw": '<search> capital of France </search>', "observation": "Paris."},
                         ASSERT, RIGHT]),
            row("q-1", actions=[{"raw": "<answer> Lyon </answer>"}])]
    back = pa.Table.from_pylist(rows).to_pylist()
    assert back[1]["actions"][0]["action"] is None and back[1]["actions"][0]["triples"] is None
    (group,), _ = load_groups(back)
    assert [[a["action"] for a in r["actions"]] for r in group.rollouts] == [
        ["search", "assert", "answer"], ["answer"]]
    assert group.rollouts[0]["actions"][0]["query"] == "capital of France"
    assert group.rollouts[1]["actions"][0]["answer"] == "Lyon"


def test_rows_of_a_pandas_table_are_the_same_rollouts():
    """A parquet/arrow table read with pandas gives list cells as numpy arrays (an assert's
    triples an array of arrays) and a missing cell as None or NaN: read as the rows given."""
    rows = [row(actions=[SEARCH, ASSERT, RIGHT]), row("q-1", actions=[SEARCH, WRONG])]
    table = pa.Table.from_pylist(rows).to_pandas().to_dict("records")
    assert isinstance(table[0]["golden_answers"], np.ndarray)
    assert isinstance(table[0]["actions"][1]["triples"][0], np.ndarray)
    assert load_groups(table) == load_groups(copy.deepcopy(rows))
    # a table of whole responses and of actions: each row's other column is null (NaN in pandas)
    mixed = pd.DataFrame([row(actions=[RIGHT]), {**row("q-1"), "actions": None,
                                                 "response": "<answer> Lyon </answer>"}])
    (group,), _ = load_groups(mixed.to_dict("records"))
    assert [[(a["action"], a.get("answer")) for a in r["actions"]] for r in group.rollouts] == [
        [("answer", RIGHT["answer"])], [("answer", "Lyon")]]


def test_deeply_nested_unknown_keys():
    """A 100,000-deep list under an unknown key of a rollout and of an action -> accepted, the
    assert (no triple) invalid."""
    deep: list = []
    inner = deep
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    items = [row(extra=deep, actions=[{"action": "assert", "triples": [], "extra": deep}, RIGHT]),
             row("q-1", metadata={"deep": deep}, actions=[dict(SEARCH, extra=deep)])]
    (group,), _ = load_groups(items)
    assert [a["action"] for r in group.rollouts for a in r["actions"]] == ["invalid", "answer", "search"]


# --- groups -------------------------------------------------------------------------------------


def test_group_checks_name_the_rollout_and_the_value():
    """Another uid in a group dict, a repeated rollout_id, other gold or question, one uid in two
    groups (dicts, Groups, a group dict and loose rows) -> an error naming them."""
    refused([{"uid": "p", "rollouts": [row()]}], "rollouts[0].uid is 'q', the group's uid is 'p'")
    refused([{"rollouts": [row("q-0"), row("q-0")]}],
            "rollouts[1].rollout_id 'q-0' repeats rollouts[0] in group 'q'")
    refused([{"rollouts": [row("q-0"), row("q-1", golden_answers=["Lyon"])]}],
            "rollouts[1].golden_answers ['Lyon'] differ from the group's ['Paris']")
    refused([{"golden_answers": ["Lyon"], "rollouts": [row("q-0")]}],
            "rollouts[0].golden_answers ['Paris'] differ from the group's ['Lyon']")
    refused([{"question": "Other?", "rollouts": [row("q-0")]}],
            "rollouts[0].question 'What is the capital of France?' differs")
    error = refused([row("q-0"), row("q-1", question="Other?")], "question")
    assert str(error) == ("groups[1] (uid 'q', rollout_id 'q-1'): question: 'Other?' differs "
                          "from groups[0] for uid 'q'")
    message = "uid 'q' appears in two groups; a uid names one group"
    group = Group.from_rollouts([Rollout.model_validate(row())])
    refused([group, group], message, ValueError)
    refused([{"rollouts": [row()]}, {"uid": "q", "rollouts": [row()]}], message, ValueError)
    refused([{"rollouts": [row()]}, row()], message, ValueError)
    refused([row(), group], message, ValueError)


def test_group_shapes():
    """A group dict with bad rollouts (all reported at once), a non-dict Mapping, a tuple of
    rollouts, Rollout models inside, a missing list, a single mapping or Group."""
    error = refused([{"uid": "q", "rollouts": [row("q-0", reward=True), row("q-1", uid="")]}],
                    "2 validation errors for Group")
    assert str(error).splitlines() == [
        "groups[0] (uid 'q'): rollouts[0].reward: reward must be a number or null, got True",
        "groups[0] (uid 'q'): rollouts[1].uid: String should have at least 1 character (got '')"]
    ((group,), _) = load_groups([types.MappingProxyType({"uid": "q", "rollouts": [row()]})])
    assert [r["rollout_id"] for r in group.rollouts] == ["q-0"]
    for items in ([{"uid": "q", "rollouts": (row("q-0"), row("q-1"))}],
                  [{"uid": "q", "rollouts": [Rollout.model_validate(row("q-0")), row("q-1")]}],
                  [row("q-0"), Rollout.model_validate(row("q-1"))]):
        ((group,), _) = load_groups(items)
        assert [r["rollout_id"] for r in group.rollouts] == ["q-0", "q-1"]
    refused([{"uid": "q", "rollouts": None}], "groups[0] (uid 'q'): rollouts: Input should be a valid list")
    refused([{"rollouts": [{k: v for k, v in row().items() if k != "question"}]}],
            "rollouts[0].question: Field required")
    refused([{"uid": "q", "rollouts": [row(), 5]}], "rollouts[1]")
    for single in ({"uid": "q", "rollouts": [row()]}, Group.from_rollouts([Rollout.model_validate(row())]),
                   row()):
        ((group,), _) = load_groups(single)
        assert group.uid == "q"
    (group,), _ = load_groups([{"rollouts": [row("q-0", reward=1), row("q-1")]}])
    assert (group.uid, group.golden_answers, [r["reward"] for r in group.rollouts]) == (
        "q", ["Paris"], [1.0, None])


def test_misspelt_rollouts_key_is_an_unknown_key_with_did_you_mean(tmp_path):
    """A group dict with ``rolouts`` for ``rollouts`` -> the unknown key named, with the key it
    resembles, through load_groups and compute_process_advantages; a rollout dict (it has
    ``actions`` or ``rollout_id``) with such a key keeps it in its metadata, as any unknown
    rollout key, or is refused for what it lacks."""
    group = {"uid": "q", "question": "What is the capital of France?", "golden_answers": ["Paris"],
             "rolouts": [{"rollout_id": "q-0", "actions": [SEARCH, ASSERT, RIGHT]}]}
    lines = ["groups[0] (uid 'q'): rollouts: Field required",
             "groups[0] (uid 'q'): rolouts: unknown field 'rolouts' (did you mean 'rollouts'?)"]
    with pytest.raises(InputError) as caught:
        compute_process_advantages([group], FactUtilConfig(mode="exact"))
    assert str(caught.value).splitlines() == lines
    with pytest.raises(InputError) as caught:
        load_groups(group)
    assert str(caught.value).splitlines() == [line.replace("groups[0]", "groups") for line in lines]
    assert one_rollout(row(rolouts=[]))["rollout_id"] == "q-0"
    no_actions = {k: v for k, v in row(rollout=1).items() if k != "actions"}
    error = refused([no_actions], "actions: Field required")
    assert str(error) == ("groups[0] (uid 'q', rollout_id 'q-0'): actions: Field required: the "
                          "actions, or the whole text as `response`")  # the other input form named
    misspelt = {**no_actions, "respons": "<answer>Paris</answer>"}  # kept as metadata: no response
    assert str(refused([misspelt], "actions: Field required")).endswith("as `response`")


def test_cli_score_names_a_misspelt_rollouts_key(tmp_path):
    """``factutil score`` on a file whose line is a group dict with ``rolouts`` -> exit 2 and one
    line at FILE:LINE naming the key and saying a file holds rollouts (not "rollout_id: Field
    required", as when the line was read as a rollout)."""
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"uid": "q", "question": "Q?", "golden_answers": ["Paris"],
                                "rolouts": [{"rollout_id": "q-0", "actions": [RIGHT]}]}) + "\n")
    result = CliRunner().invoke(app, ["score", str(path), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        (f"{path}:1: rolouts: a group dict (key 'rolouts'); a file holds one rollout per line "
         f"(docs/method.md §8), group dicts are Python input")]


def test_given_models_are_not_validated_again_but_their_group_is():
    """A Rollout model changed after validation (models are not frozen) is not validated again,
    but its group is: a blank gold set on the first model, alone or followed by a dict, -> the
    Group's error; another question on the second -> the group check's."""
    model = Rollout.model_validate(row("q-0"))
    model.golden_answers = [" "]
    refused([model], "golden_answers[0] is empty or whitespace")
    refused([model, row("q-1")], "golden_answers[0] is empty or whitespace")
    model = Rollout.model_validate(row("q-1"))
    model.question = "Other?"
    error = refused([row("q-0"), model], "question")
    assert str(error) == ("groups[1] (uid 'q', rollout_id 'q-1'): question: 'Other?' differs "
                          "from groups[0] for uid 'q'")


def test_skip_invalid_keeps_the_other_groups():
    """skip_invalid=True with bad groups among good ones -> the good ones, and uid ->
    str(error) for each bad one ("?", "5", "None" included)."""
    items = [row("a-0", uid="a"), row("b-0", uid="b", reward=float("nan")), row("c-0", uid="c"),
             {"rollouts": []}, row("d-0", uid=5), {k: v for k, v in row("e-0").items() if k != "uid"},
             {"uid": "c", "rollouts": [row("c-1", uid="c")]}, row("a-1", uid="a", question="?")]
    groups, skipped = load_groups(items, skip_invalid=True)
    assert [g.uid for g in groups] == ["c"]
    assert list(skipped) == ["a", "b", "?", "5", "None", "c"]
    assert skipped["c"] == "uid 'c' appears in two groups; a uid names one group"
    assert skipped["a"] == "groups[7] (uid 'a', rollout_id 'a-1'): question: '?' differs from groups[0] for uid 'a'"
    assert skipped["b"] == "groups[1] (uid 'b', rollout_id 'b-0'): reward: reward must be finite, got nan"
    assert skipped["?"].splitlines() == [
        "groups[3]: uid: Field required", "groups[3]: question: Field required",
        "groups[3]: golden_answers: Field required",
        "groups[3]: rollouts: List should have at least 1 item after validation, not 0 (got [])"]
    refused(items, "question: '?' differs from groups[0] for uid 'a'")


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
    """A file with problems -> InputError at FILE:LINE; an int, a list or bytes (not a path)
    among the items -> TypeError; a generator is read once, like a list."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row("q-0")) + "\n" + json.dumps(row("q-0")) + "\n")
    with pytest.raises(InputError) as caught:
        load_groups(path)
    assert str(caught.value) == f"{path}:2: rollout_id: 'q-0' repeats line 1 in uid 'q'"
    refused([row(), 5], "got int", TypeError)
    refused([[1, 2]], "got list", TypeError)
    refused(b"in.jsonl", "got int", TypeError)
    with pytest.raises(TypeError) as caught:
        load_groups(5)
    assert str(caught.value) == ("groups must be a JSONL path, a Group, a mapping or an iterable "
                                 "of them, got int 5")
    groups, _ = load_groups(r for r in SAMPLE_ROWS)
    assert [rows_group(g) for g in groups] == [rows_group(g) for g in load_groups(SAMPLE_ROWS)[0]]



def test_a_table_given_whole_is_refused_with_its_rows_named():
    """A pandas DataFrame iterates its column names: the error names the item and its value, and
    asks for the table's rows as dicts (a Series row likewise)."""
    frame = pd.DataFrame([row()])
    with pytest.raises(TypeError) as caught:
        load_groups(frame)
    assert "groups[0]: groups must hold Group, Rollout or dict items, got str 'uid'" in str(caught.value)
    assert "to_dict('records')" in str(caught.value)
    with pytest.raises(TypeError, match=r"groups\[0\]: .* got Series"):
        load_groups([series for _, series in frame.iterrows()])

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


def test_rollouts_given_apart_are_gathered_with_a_count_and_one_warning(tmp_path, caplog):
    """Loose rollouts of two uids interleaved (q1, q2, q1, q2): each group is scored with its
    rollouts together and returned group by group; the step counts the two gathered groups and
    says so once; per (uid, rollout_id) the advantages are those of the same rollouts given in
    one run each (order never changes a number). A file of the same lines gives the same."""
    import json

    from factutil import FactUtilConfig, compute_process_advantages

    def rollout(uid, rid, answer, searches):
        actions = [{"action": "search", "query": f"q{k}"} for k in range(searches)]
        actions += [{"action": "assert", "triples": [["x", "r", answer]]},
                    {"action": "answer", "answer": answer}]
        return {"uid": uid, "question": f"Q {uid}", "golden_answers": ["Paris"], "rollout_id": rid,
                "actions": actions}

    interleaved = [rollout("q1", "0", "Paris", 1), rollout("q2", "0", "Lyon", 2),
                   rollout("q1", "1", "Lyon", 1), rollout("q2", "1", "Paris", 1)]
    contiguous = [interleaved[i] for i in (0, 2, 1, 3)]
    config = FactUtilConfig(mode="exact")
    with caplog.at_level("WARNING", logger="factutil"):
        given_apart = compute_process_advantages(interleaved, config)
    together = compute_process_advantages(contiguous, config)
    assert given_apart.rollout_keys == [("q1", "0"), ("q1", "1"), ("q2", "0"), ("q2", "1")]
    assert given_apart.metrics["groups_gathered"] == 2.0 and together.metrics["groups_gathered"] == 0.0
    said = [r.getMessage() for r in caplog.records if "given apart" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("group 'q1' had rollouts given apart")
    assert said[0].endswith("(and 1 more like it in this step)") and together.warnings == []
    apart, whole = given_apart.per_rollout(), together.per_rollout()
    assert all((apart[key] == whole[key]).all() for key in whole)
    path = tmp_path / "interleaved.jsonl"  # a file is read group by group too
    path.write_text("".join(json.dumps(row) + "\n" for row in interleaved), encoding="utf-8")
    assert (compute_process_advantages(path, config).advantages == given_apart.advantages).all()
