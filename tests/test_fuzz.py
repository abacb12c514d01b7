"""Hypothesis fuzzing of the JSONL reader, the action parser and the whole pipeline.

The oracles are the contracts and the facts of docs/method.md §6: the reader returns rollouts or raises
``InputError`` whose every line is ``FILE:LINE: field: message`` about a corrupted line; the
parser returns an action for any text and a valid action survives a round trip; the pipeline is
finite, deterministic, leaves its input alone, does not depend on the order of groups, rollouts or
triples, keeps Phi and u in (-1, 1), telescopes (sum of shaping = Phi of the final store), moves
reward by back-credit without creating any, pays 0 for a re-assert, and with omega = 0 returns the
outcome advantage exactly. Semantic mode runs with the real MiniLM (one clusterer per session, so
its cache makes repeated texts cheap); its extra facts are that a paraphrase of a stored fact
earns 0 and that a negation or a changed number does not share the fact's cluster.

Examples per test: ``FACTUTIL_FUZZ_EXAMPLES`` (default 25) and, for the tests that embed new
texts with the real model, ``FACTUTIL_FUZZ_SEMANTIC_EXAMPLES`` (default 6: a short CI run). The
long run:

    python benchmarks/fuzz.py --examples 10000 --semantic-examples 1000
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from factutil import (
    AnswerAction,
    AssertAction,
    FactUtilConfig,
    InputError,
    InvalidAction,
    SearchAction,
    compute_process_advantages,
)
from factutil.cluster import SemanticClusterer, triple_text
from factutil.io import read_rollouts
from factutil.parse import parse_action

EXAMPLES = int(os.environ.get("FACTUTIL_FUZZ_EXAMPLES", "25"))
SEMANTIC_EXAMPLES = int(os.environ.get("FACTUTIL_FUZZ_SEMANTIC_EXAMPLES", "6"))
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                suppress_health_check=_HEALTH)
FUZZ_SEMANTIC = settings(FUZZ, max_examples=SEMANTIC_EXAMPLES)
DATA = Path(__file__).resolve().parents[1] / "examples" / "data"

# --- text material: real 2Wiki facts plus the odd texts of the catalogue ----------------------

_GOLD = json.loads((DATA / "2wiki_gold.json").read_text(encoding="utf-8"))
_SAMPLE = [json.loads(line) for line in (DATA / "2wiki_rollouts.jsonl").read_text(
    encoding="utf-8").splitlines()]
REAL_TRIPLES = sorted({tuple(t) for line in _SAMPLE for a in line["actions"]
                       if a.get("action") == "assert" for t in a["triples"]})
ODD_PARTS = ["Fr\ud800ance", "باريس", "\u200fשלום\u200e", "东京", "ＰＡＲＩＳ", "🗼", "🇫🇷", "1e400",
             "NaN", "0x1F", "-0", "Infinity", "x" * 300, "a\x00b", "\u3000Paris\u3000"]
QUERIES = ["capital of France", "Capital of  FRANCE", "who directed Ronnie Rocket", "\ud800", "🗼"]
ANSWERS = ["Paris", "paris.", "Lyon", "", "NaN", "東京", "Małgorzata Braunek", "yes", "the"]
GOLDS = [["Paris"], ["Małgorzata Braunek", "Malgorzata Braunek"], ["nan"], ["東京"], ["yes"]]

RAW_FRAGMENTS = [
    '{"action": "search", "query": "', '{"action": "answer", "answer": "',
    '{"action": "assert", "facts": [["France", "capital", "Paris"]]}', '{"action": "assert", ',
    '"facts": [["a", "", "c"]]', '{"action": "lookup"}', "{'action': 'answer', 'answer': 'Paris'}",
    "<search>", "</search>", "<answer>", "</answer>", "<assert>", "</assert>", "<ASSERT >",
    "France | capital | Paris", "(Paris, in, France)", "- a | b | c", "Paris", '"}', "}", "{", "[",
    "]", '"', "'", "\\", "\n", "```json\n", "```", " | ", "(", ")", ",", ": ", "action", "\ud800",
    "🗼", "باريس", "1e400", "NaN", "0x1F", "[" * 150, "{" * 150, " " * 40, "\\)", "\\N{", "\\x",
]


def triple_text_of(triple) -> str:
    from factutil import Triple

    return triple_text(Triple.model_validate(list(triple)))


# Each gold fact with the other wordings the sample asserts (letter case, relation wording):
# one fact, so one cluster in semantic mode.
PARAPHRASES = []
for _entry in _GOLD.values():
    for _evidence in _entry["evidences"]:
        _forms = [tuple(t) for t in _entry["gold"]
                  if t[0].casefold() == _evidence[0].casefold()
                  and t[2].casefold() == _evidence[2].casefold()]
        PARAPHRASES.append(sorted(set(_forms) | {tuple(_evidence)}))

odd_chars = st.one_of(st.characters(), st.characters(codec=None, categories=["Cs"]))
odd_text = st.text(odd_chars, max_size=8)
raw_text = st.lists(st.one_of(st.sampled_from(RAW_FRAGMENTS), odd_text), max_size=25).map("".join)
part = st.one_of(st.sampled_from(ODD_PARTS), odd_text.filter(lambda s: s.strip()))
triple = st.one_of(st.sampled_from(REAL_TRIPLES).map(list),
                   st.tuples(part, part, part).map(list))
structured = st.one_of(
    st.builds(lambda q: {"action": "search", "query": q, "observation": "obs"},
              st.sampled_from(QUERIES)),
    st.builds(lambda ts: {"action": "assert", "triples": ts}, st.lists(triple, min_size=1, max_size=4)),
    st.builds(lambda a: {"action": "answer", "answer": a}, st.sampled_from(ANSWERS)),
    st.builds(lambda t: {"raw": t, "observation": "obs"}, raw_text),
    st.just({"action": "assert", "triples": [["France", " ", "Paris"]]}),
    st.just({"action": "search", "query": "   "}),
)
reward = st.one_of(st.none(), st.floats(-2, 2), st.floats(allow_nan=False, allow_infinity=False),
                   st.integers(-10, 10), st.sampled_from([1e300, -1e300, 1.7e308, 5e-324]))


@st.composite
def batches(draw, max_groups: int = 3, max_rollouts: int = 5):
    rows = []
    for g in range(draw(st.integers(1, max_groups))):
        gold = draw(st.sampled_from(GOLDS))
        question = draw(st.sampled_from(["What is it?", "Qu'est-ce que c'est ?", "这是什么？"]))
        for i in range(draw(st.integers(1, max_rollouts))):
            rows.append({"uid": f"g{g}", "question": question, "golden_answers": gold,
                         "rollout_id": f"g{g}-{i}", "reward": draw(reward),
                         "actions": draw(st.lists(structured, max_size=9))})
    return rows


config_fields = st.fixed_dictionaries({
    "alpha": st.floats(0, 1), "omega": st.floats(0, 2), "epsilon": st.floats(0.01, 5),
    "success": st.sampled_from(["em", "f1", "reward"]), "norm_by_std": st.booleans(),
    "process_norm": st.sampled_from(["group", "none"]), "max_turns": st.integers(1, 9),
    "invalid_penalty": st.floats(-1, 0), "repeat_search_penalty": st.floats(-1, 0),
})


# --- parser -----------------------------------------------------------------------------------


def _round_trip(action) -> str:
    if isinstance(action, SearchAction):
        return json.dumps({"action": "search", "query": action.query})
    if isinstance(action, AnswerAction):
        return json.dumps({"action": "answer", "answer": action.answer})
    return json.dumps({"action": "assert", "facts": [t.as_list() for t in action.triples]})


@FUZZ
@given(raw_text, st.one_of(st.none(), odd_text))
def test_parser_never_raises_and_valid_actions_round_trip(text, observation):
    """Any text -> an action model and no Python warning; an invalid one keeps the text and a
    reason; a valid one, written back as JSON, parses to the same action; the observation stays
    on searches only."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action = parse_action(text, observation=observation)
    assert caught == []
    if isinstance(action, InvalidAction):
        assert action.raw == text and action.reason and action.observation == observation
        return
    assert isinstance(action, (SearchAction, AssertAction, AnswerAction))
    again = parse_action(_round_trip(action), observation=observation)
    assert again == action
    if isinstance(action, SearchAction):
        assert action.observation == observation and action.query == action.query.strip()
    if isinstance(action, AssertAction):
        assert all(p.strip() == p and p for t in action.triples for p in t.as_list())


# --- JSONL reader -----------------------------------------------------------------------------

PROBLEM = re.compile(r"^(?P<path>.+):(?P<line>\d+): (?P<field>\S[^:]*?): (?P<message>.+)$")


def _corrupt(line: bytes, how: int, rnd: random.Random) -> bytes:
    data = json.loads(line)
    if how == 0:  # truncated
        return line[: rnd.randrange(len(line))]
    if how == 1:  # a byte replaced by a non-UTF-8 or structural byte
        at = rnd.randrange(len(line))
        return line[:at] + rnd.choice([b"\xff", b"\xc3", b"{", b'"', b"\x00"]) + line[at + 1:]
    if how == 2:  # a required key deleted
        del data[rnd.choice(["uid", "question", "golden_answers", "rollout_id", "actions"])]
    elif how == 3:  # a field of the wrong type or value
        key, bad = rnd.choice([("reward", "0.5"), ("reward", float("nan")), ("golden_answers", [" "]),
                               ("golden_answers", "Paris"), ("actions", {"a": 1}), ("uid", 7),
                               ("reward", True), ("rollout_id", "")])
        data[key] = bad
    elif how == 4:  # an unknown action name
        data["actions"] = [{"action": "lookup", "query": "x"}]
    elif how == 5:  # nested too deeply
        return line[:-1] + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    else:  # not an object
        return json.dumps([data]).encode()
    return json.dumps(data).encode()


def _valid_alone(line: bytes) -> bool:
    from factutil import Rollout

    try:
        text = line.decode("utf-8")
        return not text.strip() or isinstance(json.loads(text), dict) and bool(
            Rollout.model_validate(json.loads(text)))
    except (ValueError, RecursionError):
        return False


@FUZZ
@given(batches(max_groups=3, max_rollouts=3), st.lists(st.integers(0, 6), max_size=4),
       st.randoms(use_true_random=False))
def test_reader_reports_exactly_the_corrupted_lines(tmp_path_factory, rows, corruptions, rnd):
    """Valid lines, then corrupted copies (truncated, bad bytes, a key deleted, a wrong type, an
    unknown action, 5,000 deep, not an object) -> InputError whose every line is
    ``FILE:LINE: field: message`` about a corrupted line, naming every corrupted line that is
    invalid on its own; otherwise the rollouts, equal to validating the dicts."""
    lines = [json.dumps(r).encode() for r in rows]
    bad = [_corrupt(rnd.choice(lines), how, rnd) for how in corruptions]
    path = tmp_path_factory.mktemp("reader") / "in.jsonl"
    path.write_bytes(b"\n".join(lines + bad) + b"\n")
    try:
        got = read_rollouts(path)
    except InputError as error:
        assert corruptions, str(error)
        named = set()
        for text in str(error).splitlines():
            match = PROBLEM.match(text)
            assert match and match["path"] == str(path), text
            named.add(int(match["line"]))
        assert named and named <= set(range(len(lines) + 1, len(lines) + len(bad) + 1)), named
        assert [str(p) for p in error.problems] == str(error).splitlines()
        for number, line in enumerate(bad, start=len(lines) + 1):
            if not _valid_alone(line):
                assert number in named, (number, line[:200])
        return
    assert len(got) == len(lines) + sum(1 for line in bad if line.decode("utf-8").strip())
    from factutil import Rollout

    assert [r for _, r in got][: len(rows)] == [Rollout.model_validate(r) for r in rows]


# --- the whole pipeline -----------------------------------------------------------------------

_SEMANTIC: dict[str, SemanticClusterer] = {}


def _clusterer(config: FactUtilConfig, minilm):
    """Exact: a fresh one. Semantic: one real-MiniLM clusterer per session (its cache is what
    keeps a 10,000-example run feasible); filters and threshold come from the default config."""
    if config.mode == "exact":
        return None
    if "c" not in _SEMANTIC:
        _SEMANTIC["c"] = SemanticClusterer(FactUtilConfig(), embedder=minilm)
    return _SEMANTIC["c"]


def _score(rows, config, minilm):
    return compute_process_advantages(rows, config, clusterer=_clusterer(config, minilm))


def _key(record):
    return (record.uid, record.rollout_id, record.step)


def _shuffled(rows, rnd):
    rows = copy.deepcopy(rows)
    rnd.shuffle(rows)
    for line in rows:
        for action in line["actions"]:
            if action.get("action") == "assert":
                action["triples"] = rnd.sample(action["triples"], len(action["triples"]))
    return rows


def _check_spec_facts(result, config) -> None:
    """docs/method.md §6 on one result: bounds, telescoping, back-credit, decomposition, finiteness."""
    assert result.advantages.dtype == np.float32 and np.all(np.isfinite(result.advantages))
    assert all(math.isfinite(v) for v in result.metrics.values())
    utility = {(c.uid, c.cluster_id): c.utility for c in result.clusters}
    assert all(-1.0 < u < 1.0 for u in utility.values())
    by_rollout: dict = {}
    for record in result.actions:
        if record.ignored:
            assert record.advantage == record.process_reward == 0.0
        else:
            by_rollout.setdefault((record.uid, record.rollout_id), []).append(record)
    for (uid, _), records in by_rollout.items():
        final = [c for r in records for c in r.new_clusters]
        assert len(final) == len(set(final)), "a cluster enters a store once"
        phi = math.tanh(math.fsum(utility[(uid, c)] for c in final))
        assert -1.0 < phi < 1.0
        if config.gamma == 1.0:
            assert math.fsum(r.shaping for r in records) == pytest.approx(phi, abs=1e-12)
        assert abs(math.fsum(r.back_credit for r in records)) < 1e-12
        for r in records:
            assert r.process_reward == pytest.approx(r.shaping + r.back_credit + r.penalty, abs=1e-12)
            if r.action != "assert":
                assert r.shaping == 0.0 and r.new_clusters == []


def _pipeline(rows, fields, mode, rnd, minilm, tmp):
    config = FactUtilConfig(mode=mode, **fields)
    frozen = copy.deepcopy(rows)
    try:
        result = _score(rows, config, minilm)
    except FloatingPointError as error:
        # Only an outcome advantage left unnormalised can leave float32 (|R - mean| > 3.4e38).
        assert not config.norm_by_std and "outside float32" in str(error)
        assert max(abs(r["reward"] or 0) for r in rows) > 1e38
        return
    assert rows == frozen, "input mutated"
    _check_spec_facts(result, config)
    again = _score(copy.deepcopy(rows), config, minilm)
    assert again.advantages.tobytes() == result.advantages.tobytes()
    baseline = {_key(r): r.to_dict() for r in result.actions}
    assert {_key(r): r.to_dict() for r in _score(_shuffled(rows, rnd), config, minilm).actions} == baseline
    # Back-credit moves reward within a rollout, never creates it.
    no_credit = _score(rows, config.model_copy(update={"alpha": 0.0}), minilm)
    totals: dict = {}
    for a, b in zip(result.actions, no_credit.actions):
        pair = totals.setdefault((a.uid, a.rollout_id), [[], []])
        pair[0].append(a.process_reward)
        pair[1].append(b.process_reward)
    for x, y in totals.values():
        assert math.fsum(x) == pytest.approx(math.fsum(y), abs=1e-12)
    # Omega = 0 is plain action-level GRPO, exactly.
    plain = _score(rows, config.model_copy(update={"omega": 0.0}), minilm)
    expected = np.array([0.0 if r.ignored else r.outcome_advantage for r in plain.actions],
                        dtype=np.float32)
    assert np.array_equal(plain.advantages, expected)
    if mode == "exact":  # the file reader and the API agree
        path = tmp / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        from_file = compute_process_advantages(path, config)
        assert [r.to_dict() for r in from_file.actions] == [r.to_dict() for r in result.actions]


@FUZZ
@given(rows=batches(), fields=config_fields, rnd=st.randoms(use_true_random=False))
def test_pipeline_spec_facts_hold_on_odd_batches_exact(rows, fields, rnd, tmp_path_factory):
    """Random odd batches (real and odd triples, raw model text, extreme finite rewards, random
    config), exact mode -> the docs/method.md §6 facts, determinism, order independence, alpha and omega
    identities, the file reader agreeing with the API; a FloatingPointError only for |R| > 1e38
    with norm_by_std=False."""
    _pipeline(rows, fields, "exact", rnd, None, tmp_path_factory.mktemp("pipeline"))


@pytest.mark.slow
@FUZZ_SEMANTIC
@given(rows=batches(), fields=config_fields, rnd=st.randoms(use_true_random=False))
def test_pipeline_spec_facts_hold_on_odd_batches_semantic(rows, fields, rnd, minilm):
    """The same batches in semantic mode with the real MiniLM -> the same facts."""
    _pipeline(rows, fields, "semantic", rnd, minilm, None)


@FUZZ
@given(rows=batches(max_groups=2), data=st.data())
def test_reasserting_a_stored_fact_earns_zero_exact(rows, data):
    """A copy of a stored triple (other case and spacing) asserted right after the assert that
    stored it -> shaping 0 and no new cluster."""
    _reassert(rows, data, "exact", None)


@pytest.mark.slow
@FUZZ_SEMANTIC
@given(rows=batches(max_groups=2), data=st.data())
def test_reasserting_a_stored_fact_earns_zero_semantic(rows, data, minilm):
    """As above, semantic mode with the real MiniLM."""
    _reassert(rows, data, "semantic", minilm)


def _reassert(rows, data, mode, minilm) -> None:
    config = FactUtilConfig(mode=mode, max_turns=20)
    first = _score(rows, config, minilm)
    candidates = [(i, t) for i, line in enumerate(rows) for t, a in enumerate(line["actions"])
                  if any(r.rollout_id == line["rollout_id"] and r.step == t and r.action == "assert"
                         and not r.ignored for r in first.actions) and a.get("action") == "assert"]
    assume(candidates)
    i, t = data.draw(st.sampled_from(candidates))
    s, r, o = data.draw(st.sampled_from(rows[i]["actions"][t]["triples"]))
    again = {"action": "assert", "triples": [[f"  {s.upper()} ", r.upper(), f"{o.upper()}  "]]}
    assume(triple_text_of([s.upper(), r.upper(), o.upper()]) == triple_text_of([s, r, o]))
    extended = copy.deepcopy(rows)
    extended[i]["actions"].insert(t + 1, again)
    result = _score(extended, config, minilm)
    (record,) = [a for a in result.actions if a.rollout_id == rows[i]["rollout_id"] and a.step == t + 1]
    assert (record.action, record.shaping, record.new_clusters) == ("assert", 0.0, [])


def _lookalikes(fact: tuple) -> list[tuple]:
    """The negation of a fact, and (when it holds a year or number) the same fact with it changed."""
    subject, relation, obj = fact
    out = [(subject, f"not {relation}", obj)]
    changed = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), obj, count=1)
    if changed != obj:
        out.append((subject, relation, changed))
    return out


@pytest.mark.slow
@FUZZ_SEMANTIC
@given(st.sampled_from(PARAPHRASES), st.data())
def test_paraphrase_earns_zero_and_lookalikes_get_their_own_cluster(minilm, forms, data):
    """Real model. Store a gold 2Wiki fact; assert another wording of it -> shaping 0; assert its
    negation or the fact with a number changed -> a new cluster (its own, never the fact's)."""
    stored = data.draw(st.sampled_from(forms))
    other = data.draw(st.sampled_from(forms))
    tail = data.draw(st.sampled_from([other] + _lookalikes(stored)))
    config = FactUtilConfig(max_turns=20)
    rows = [{"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": f"q-{i}",
             "actions": [{"action": "assert", "triples": [list(stored)]},
                         {"action": "assert", "triples": [list(tail)]},
                         {"action": "answer", "answer": answer}]}
            for i, answer in enumerate(["Paris", "Lyon", "Paris"])]
    result = _score(rows, config, minilm)
    second = result.actions[1]
    if tail in forms:
        assert second.shaping == 0.0 and second.new_clusters == [], (stored, tail)
    else:
        assert second.new_clusters != [], f"{tail} shares the cluster of {stored}"
