"""The JSONL reader reports every problem of a file as FILE:LINE: field: what is wrong (docs/method.md §8)."""

from __future__ import annotations

import json

import pytest

from factutil import InputError, read_groups
from factutil.io import read_rollouts, write_jsonl

GOOD = {"uid": "q", "question": "?", "golden_answers": ["a"], "rollout_id": "q-0",
        "actions": [{"action": "search", "query": "x", "observation": "o"}]}


def _write(tmp_path, lines, name="in.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"".join(line if isinstance(line, bytes) else (line + "\n").encode() for line in lines))
    return path


def test_reads_groups_by_uid_in_first_appearance_order(tmp_path):
    rows = [dict(GOOD, uid="b", rollout_id="b-0"), dict(GOOD, rollout_id="q-0"), dict(GOOD, uid="b", rollout_id="b-1")]
    path = _write(tmp_path, [json.dumps(r) for r in rows] + [""])
    groups = read_groups(path)
    assert [g.uid for g in groups] == ["b", "q"]
    assert [r.rollout_id for r in groups[0].rollouts] == ["b-0", "b-1"]


def test_every_problem_reported_with_line_and_field(tmp_path):
    lines = [
        json.dumps(GOOD),                                                     # 1 fine
        '{"uid": "q", "question": "?", ',                                     # 2 bad JSON
        json.dumps(dict(GOOD, rollout_id="q-1", golden_answers=[" "])),        # 3 blank gold
        json.dumps(dict(GOOD, rollout_id="q-2", reward=float("nan"))),        # 4 NaN reward
        json.dumps(dict(GOOD, rollout_id="q-0")),                              # 5 repeated id
        json.dumps(dict(GOOD, rollout_id="q-3", actions=[{"action": "search", "query": 5}])),  # 6
        "[1, 2]",                                                             # 7 not an object
        b'{"uid": "\xff"}\n',                                                 # 8 bad UTF-8
        json.dumps(dict(GOOD, rollout_id="q-4", golden_answers=["b"])),        # 9 gold differs
        json.dumps({k: v for k, v in GOOD.items() if k != "uid"}),             # 10 missing uid
        json.dumps(dict(GOOD, rollout_id="q-5", actions=[{"action": "lookup"}])),  # 11 bad tag
        json.dumps(dict(GOOD, rollout_id="q-6", reward="1")),                 # 12 string reward
    ]
    path = _write(tmp_path, lines)
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    got = [str(problem) for problem in caught.value.problems]
    name = str(path)
    expected_prefixes = [
        f"{name}:2: (line): invalid JSON:",
        f"{name}:3: golden_answers: golden_answers[0] is empty or whitespace",
        f"{name}:4: reward: reward must be finite, got nan",
        f"{name}:6: actions[0].query: Input should be a valid string (got 5)",
        f"{name}:7: (line): expected a JSON object, got list",
        f"{name}:8: (line): not valid UTF-8: byte 0xff at column 10",
        f"{name}:10: uid: Field required",
        f"{name}:11: actions[0]: Input tag 'lookup' found using 'action' does not match",
        f"{name}:12: reward: reward must be a number or null, got '1'",
        f"{name}:5: rollout_id: 'q-0' repeats line 1 in uid 'q'",
        f"{name}:9: golden_answers: ['b'] differs from line 1 for uid 'q'",
    ]
    assert len(got) == len(expected_prefixes), got
    for line, prefix in zip(got, expected_prefixes):
        assert line.startswith(prefix), (line, prefix)
    assert len(caught.value.problems) == len(expected_prefixes)
    # The message shows the first ten, then a count.
    assert str(caught.value).splitlines() == got[:10] + ["... and 1 more (11 problems in all)"]


def test_write_jsonl_is_atomic(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")

    def rows():
        yield {"a": 1}
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError):
        write_jsonl(target, rows())
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]
    write_jsonl(target, [{"a": 1}, {"b": "é"}])
    assert target.read_text(encoding="utf-8") == '{"a": 1}\n{"b": "é"}\n'


def test_json_and_action_messages_read_as_sentences(tmp_path):
    """A line break inside a string -> "Invalid control character at column 28" (the decoder's
    message ends in "at", which is not doubled); an action with neither ``action`` nor ``raw`` -> "missing field `action`"."""
    lines = ['{"uid": "q", "question": "?', json.dumps(dict(GOOD, actions=[{"query": "x"}]))]
    path = _write(tmp_path, lines)
    with pytest.raises(InputError) as caught:
        read_rollouts(path)
    assert str(caught.value).splitlines() == [
        f"{path}:1: (line): invalid JSON: Invalid control character at column 28",
        (f"{path}:2: actions[0]: missing field `action` (one of search, assert, answer, invalid), "
         "or `raw` model output to parse (got {'query': 'x'})"),
    ]
