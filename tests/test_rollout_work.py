"""Shipped rows (factutil.rollout_work): a rollout's whole per-rollout work made where it was
generated; the step given the rows as ``shipped`` bytes instead of ``actions`` computes what it
computes from the actions, bit for bit, and a row whose work cannot be used makes its group
unscorable, never a crash."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.workloads import build_workload
from factutil import FactUtilConfig, compute_process_advantages
from factutil.cluster import Fact, SemanticClusterer, make_clusterer
from factutil.io import InputError
from factutil.prepare import load_prepared, prepare_facts
from factutil.rollout_work import SHIPPED_ROW_KEY, prepare_rollout
from tests.conftest import CharGramEmbedder
from tests.test_fuzz import batches as fuzz_batches
from tests.test_fuzz import config_fields as fuzz_config_fields
from tests.test_properties import batches as property_batches
from tests.test_properties import config_fields

CHAR_GRAMS = CharGramEmbedder()

HEAD = ("uid", "question", "golden_answers", "rollout_id")


def _edge_group() -> list[dict]:
    """One group that meets every per-rollout rule: a repeated search, case variants of one
    fact, an action after the answer, an invalid action, an answer from an empty store, no
    answer, a given reward, actions beyond max_turns, strings with a NUL."""
    head = {"uid": "edge", "question": "Where was Ada born?", "golden_answers": ["London"]}
    ada = ["Ada Lovelace", "born in", "London"]
    return [
        {**head, "rollout_id": "a", "actions": [
            {"action": "search", "query": "Ada birthplace"},
            {"action": "search", "query": "ada   BIRTHPLACE"},
            {"action": "assert", "triples": [ada, ["ada lovelace", "Born In", "london"]]},
            {"action": "answer", "answer": "London"},
            {"action": "search", "query": "too late"}]},
        {**head, "rollout_id": "b", "actions": [
            {"action": "invalid", "raw": "<x>", "reason": "no tag"},
            {"action": "answer", "answer": "Paris"}]},
        {**head, "rollout_id": "c", "reward": 0.25, "actions": [
            {"action": "assert", "triples": [ada, ["Ada Lovelace", "died in", "Marylebone"]]}]},
        {**head, "rollout_id": "d", "actions": [
            {"action": "search", "query": f"q{i}"} for i in range(5)] + [
            {"action": "assert", "triples": [ada]},
            {"action": "invalid", "raw": "?", "reason": "beyond"},
            {"action": "answer", "answer": "London"}]},
        {**head, "rollout_id": "e\x00", "actions": [  # NULs and non-ASCII text
            {"action": "assert", "triples": [["Ada\x00", "born in", "Lön\u2028don"]]},
            {"action": "answer", "answer": "Lon\x00don é"}]},
    ]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return build_workload("S")[:96] + _edge_group()


def _config(mode: str) -> FactUtilConfig:
    return FactUtilConfig(mode=mode, max_turns=6)


def _clusterer(config: FactUtilConfig, embedder=None):
    if config.mode == "exact":
        return make_clusterer(config)
    return SemanticClusterer(config, embedder=embedder or CharGramEmbedder())


def _shipped(row: dict, data: bytes) -> dict:
    out = {key: row[key] for key in HEAD}
    if "reward" in row:
        out["reward"] = row["reward"]
    out[SHIPPED_ROW_KEY] = data
    return out


def _ship(rows: list[dict], config: FactUtilConfig) -> list[dict]:
    worker = _clusterer(config)  # the worker's own clusterer and embedder object
    return [_shipped(row, prepare_rollout(row, config, clusterer=worker)) for row in rows]


def _step(rows, config, **kwargs):
    return compute_process_advantages(rows, config, clusterer=_clusterer(config), **kwargs)


def _assert_same(a, b, warnings: bool = True) -> None:
    assert a.advantages.dtype == np.float32 and a.advantages.tobytes() == b.advantages.tobytes()
    assert a.rollout_keys == b.rollout_keys
    assert np.array_equal(a.action_offsets, b.action_offsets)
    for name, column in a.action_columns.items():
        assert np.array_equal(column, b.action_columns[name]), name
    assert [r.to_dict() for r in a.actions] == [r.to_dict() for r in b.actions]
    assert a.rollouts == b.rollouts
    assert [r.to_dict() for r in a.clusters] == [r.to_dict() for r in b.clusters]
    if warnings:
        assert a.warnings == b.warnings
    for name in ("clusters", "cluster_facts", "cluster_edges", "cluster_merges",
                 "cluster_refused", "searches_repeated", "actions_ignored", "actions_invalid",
                 "answers_empty_store", "rollouts_unanswered"):
        assert a.metrics.get(name) == b.metrics.get(name), name


@pytest.mark.parametrize("mode", ["exact", "semantic"])
def test_shipped_rows_give_the_step_of_the_actions_bit_for_bit(rows, mode):
    config = _config(mode)
    plain = _step(rows, config)
    shipped = _step(_ship(rows, config), config)
    _assert_same(plain, shipped)
    # the edge group met every rule it was built for
    assert plain.metrics["searches_repeated"] >= 1 and plain.metrics["answers_empty_store"] >= 1
    assert plain.metrics["actions_ignored"] >= 3 and plain.metrics["rollouts_unanswered"] >= 1
    if mode == "semantic":
        assert shipped.metrics["cluster_prepared_facts"] == shipped.metrics["cluster_facts"]
        assert shipped.metrics["cluster_cache_misses"] == 0


def test_a_shipped_semantic_step_neither_embeds_analyses_nor_walks_actions(rows, monkeypatch):
    config = _config("semantic")
    plain = _step(rows, config)
    shipped_rows = _ship(rows, config)

    class NoModel(CharGramEmbedder):
        def encode(self, texts):
            raise AssertionError(f"embedded {len(texts)} texts")

    def fails(*args, **kwargs):
        raise AssertionError("called")

    monkeypatch.setattr("factutil.filters.analyze", fails)
    monkeypatch.setattr("factutil.columns.rollout_columns", fails)
    monkeypatch.setattr("factutil.columns.fact_text", fails)
    result = compute_process_advantages(shipped_rows, config,
                                        clusterer=SemanticClusterer(config, embedder=NoModel()))
    _assert_same(plain, result)


@pytest.mark.parametrize("mode", ["exact", "semantic"])
def test_mixed_and_reordered_batches_are_the_same(rows, mode):
    config = _config(mode)
    plain = _step(rows, config)
    shipped = _ship(rows, config)
    mixed = [row if i % 3 else shipped[i] for i, row in enumerate(rows)]
    _assert_same(plain, _step(mixed, config))
    order = list(range(len(rows)))
    random.Random(7).shuffle(order)
    reordered = _step([shipped[i] for i in order], config)
    by_key = reordered.per_rollout()
    for key, values in plain.per_rollout().items():
        assert values.tobytes() == by_key[key].tobytes()


@pytest.mark.parametrize("mode", ["exact", "semantic"])
def test_work_made_from_the_actions_alone_names_no_rollout_and_is_the_same(rows, mode):
    """A rollout worker that does not know the trainer's uid and rollout_id ships the work of
    the actions: the row carrying it owns it."""
    config = _config(mode)
    worker = _clusterer(config)
    shipped = [_shipped(row, prepare_rollout(row["actions"], config, clusterer=worker))
               for row in rows]
    _assert_same(_step(rows, config), _step(shipped, config))
    named = prepare_rollout(rows[0], config, clusterer=worker)
    assert named != shipped[0][SHIPPED_ROW_KEY]
    with pytest.raises(TypeError, match="list of actions"):
        prepare_rollout("search: x", config)


def test_shipped_rows_with_prepared_facts_of_other_rollouts(rows):
    config = _config("semantic")
    worker = _clusterer(config)
    half = len(rows) // 2
    shipped = [_shipped(row, prepare_rollout(row, config, clusterer=worker)) for row in rows[:half]]
    prepared = load_prepared([prepare_facts(row, config, clusterer=worker).to_bytes()
                              for row in rows[half:]])
    result = _step(shipped + rows[half:], config, prepared=prepared)
    _assert_same(_step(rows, config), result)
    assert result.metrics["cluster_cache_misses"] == 0


def test_facts_made_for_another_embedder_are_computed_with_one_warning(rows):
    config = _config("semantic")

    class Other(CharGramEmbedder):
        name = "test:other"

    shipped = [_shipped(row, prepare_rollout(row, config, embedder=Other())) for row in rows]
    result = _step(shipped, config)
    _assert_same(_step(rows, config), result, warnings=False)
    assert result.metrics["cluster_prepared_ignored"] == len(rows)
    assert sum("prepared fact set(s) ignored" in message for message in result.warnings) == 1


def _damaged(data: bytes, stride: int = 1) -> list[bytes]:
    """Every ``stride``-th truncation of ``data`` and single-byte change (all of the header)."""
    cuts = sorted({*range(0, len(data), stride), *range(64)} & set(range(len(data))))
    return [data[:cut] for cut in cuts] + [
        data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:] for i in cuts]


@pytest.mark.parametrize("target", [1, 2])
def test_damaged_work_is_read_or_skips_its_group_never_crashes(target):
    """Rollout "b" (index 1) ships no fact: a change it survives must mean nothing. Rollout "c"
    ships two facts, whose vector bytes may change and still be read: any finite result."""
    config = _config("semantic")
    group = _edge_group()
    shipped = _ship(group, config)
    plain = _step(group, config)
    name = group[target]["rollout_id"]
    outcomes = {"read": 0, "skipped": 0}
    for damaged in _damaged(shipped[target][SHIPPED_ROW_KEY], stride=1 if target == 1 else 5):
        batch = [dict(row) for row in shipped]
        batch[target][SHIPPED_ROW_KEY] = damaged
        result = _step(batch, config, on_invalid_group="skip")
        if result.skipped:
            assert list(result.skipped) == ["edge"]
            assert f"rollout {name!r}" in result.skipped["edge"]
            assert len(result.advantages) == 0
            outcomes["skipped"] += 1
            continue
        outcomes["read"] += 1
        assert np.all(np.isfinite(result.advantages))
        if target == 1:  # a change the reader cannot see must mean nothing to the result
            _assert_same(plain, result)
    assert outcomes["skipped"] > 0 and outcomes["read"] > 0


def test_headers_checked_at_once_refuse_what_each_header_alone_refuses():
    """The batch reader checks every header a column at a time; each forged field must be
    refused with the one-item reader's message, and its neighbours read as they read alone."""
    import struct

    from factutil import rollout_work

    config = _config("exact")
    group = _edge_group()
    datas = [prepare_rollout(row["actions"], config) for row in group]
    keys = {i: ("edge", row["rollout_id"]) for i, row in enumerate(group)}
    alone = rollout_work.read_rollout_work(dict(enumerate(datas)), keys, config)
    forged = []
    for offset, fmt, value in [(0, "<4s", b"FURX"), (4, "<B", 2), (5, "<B", 2), (6, "<H", 1),
                               (12, "<I", 99), (16, "<I", 0), (20, "<I", 50), (36, "<I", 7)]:
        data = bytearray(datas[2])
        struct.pack_into(fmt, data, offset, value)
        forged.append(bytes(data))
    for data in [*forged, datas[2][:39], datas[2] + b"x", "text"]:
        with pytest.raises(ValueError) as refused:
            rollout_work._read_header(data)
        work = rollout_work.read_rollout_work({**dict(enumerate(datas)), 2: data}, keys, config)
        assert work.unreadable == {2: f"its shipped work cannot be read ({refused.value})"}
        assert work.columns.keys() == alone.columns.keys() - {2}
        for i, columns in work.columns.items():  # fact rows renumbered without row 2's facts
            assert columns._replace(occurrence_work=None) == \
                alone.columns[i]._replace(occurrence_work=None)
            assert [work.facts[0].parts[r] for r in columns.occurrence_work] == \
                [alone.facts[0].parts[r] for r in alone.columns[i].occurrence_work]


@pytest.mark.parametrize("change, reason", [
    ("other rollout", "work of uid 'edge' rollout_id 'a'"),
    ("max_turns", "made for max_turns=8, the step's is 6"),
    ("garbage", "cannot be read"),
])
def test_unusable_work_names_the_group_rollout_and_reason(change, reason):
    config = _config("exact")
    group = _edge_group()
    other = [*_edge_group(), *build_workload("S")[:6]]
    shipped = _ship(other, config)
    if change == "other rollout":
        shipped[1][SHIPPED_ROW_KEY] = shipped[0][SHIPPED_ROW_KEY]
    elif change == "max_turns":
        shipped[1][SHIPPED_ROW_KEY] = prepare_rollout(group[1], FactUtilConfig(mode="exact"))
    else:
        shipped[1][SHIPPED_ROW_KEY] = b"FURW" + bytes(60)
    result = _step(shipped, config, on_invalid_group="skip")
    assert list(result.skipped) == ["edge"] and reason in result.skipped["edge"]
    assert "rollout 'b'" in result.skipped["edge"]
    _assert_same(_step(other[len(group):], config), result, warnings=False)  # the other group
    assert result.warnings[0].startswith("group 'edge' skipped: rollout 'b'")
    with pytest.raises(ValueError, match=f"group 'edge' rollout 'b'.*{reason}"):
        _step(shipped, config)


def test_shipped_row_validation_names_the_field():
    config = _config("exact")
    row = _edge_group()[0]
    data = prepare_rollout(row, config)
    with pytest.raises(InputError, match="not both"):
        _step([{**row, SHIPPED_ROW_KEY: data}], config)
    with pytest.raises(InputError, match="shipped"):
        _step([{**_shipped(row, data), SHIPPED_ROW_KEY: "text"}], config)
    with pytest.raises(InputError, match="golden_answers"):
        _step([{**_shipped(row, data), "golden_answers": []}], config)
    with pytest.raises((ValueError, TypeError), match="actions"):
        prepare_rollout({key: row[key] for key in HEAD}, config)


def test_cluster_given_equals_cluster_batch_and_checks_its_input(rows):
    config = _config("semantic")
    embedder = CharGramEmbedder()
    facts = [prepare_facts(row, config, embedder=embedder) for row in rows]
    merged = load_prepared([item.to_bytes() for item in facts])[0]
    per_group = [[], list(map(Fact._make, merged.parts[:7])),
                 list(map(Fact._make, merged.parts[7:30]))]
    per_group = [sorted(group, key=lambda p: merged.texts[merged.parts.index(p)])
                 for group in per_group]
    rows_of = np.array([merged.parts.index(p) for group in per_group for p in group])
    plain = SemanticClusterer(config, embedder=embedder).cluster_batch(per_group)
    given = SemanticClusterer(config, embedder=embedder)
    labels = given.cluster_given(per_group, merged, rows_of)
    assert [a.tolist() for a in plain] == [b.tolist() for b in labels]
    assert len(given.cache) == 0
    with pytest.raises(ValueError, match="rows must be 30 rows"):
        given.cluster_given(per_group, merged, rows_of[:-1])
    other = SemanticClusterer(FactUtilConfig(filters=[]), embedder=embedder)
    assert not other.fits(merged)
    with pytest.raises(ValueError, match="does not fit"):
        other.cluster_given(per_group, merged, rows_of)


# --- properties: any batch, any config, any share of shipped rows -----------------------------

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _ship_some(rows: list[dict], config: FactUtilConfig, shipped: list[bool]) -> list[dict]:
    """The rows with those marked shipped as shipped rows (from their actions alone); a row the
    worker cannot prepare (it fails validation) keeps its actions, as a failing worker ships
    nothing."""
    worker = _clusterer(config, CHAR_GRAMS)
    out = []
    for row, ship in zip(rows, shipped):
        if ship:
            try:
                row = _shipped(row, prepare_rollout(row["actions"], config, clusterer=worker))
            except (ValueError, TypeError):
                pass
        out.append(row)
    return out


@pytest.mark.parametrize("mode", ["exact", "semantic"])
@SETTINGS
@given(rows=property_batches(), fields=config_fields, shipped=st.lists(st.booleans(), min_size=40,
                                                                      max_size=40))
def test_any_share_of_shipped_rows_gives_the_same_step(mode, rows, fields, shipped):
    config = FactUtilConfig(mode=mode, **fields)
    plain = compute_process_advantages(rows, config, clusterer=_clusterer(config, CHAR_GRAMS))
    mixed = _ship_some(rows, config, shipped)
    result = compute_process_advantages(mixed, config, clusterer=_clusterer(config, CHAR_GRAMS))
    _assert_same(plain, result)


@SETTINGS
@given(rows=fuzz_batches(max_groups=2, max_rollouts=3), fields=fuzz_config_fields,
       shipped=st.lists(st.booleans(), min_size=6, max_size=6))
def test_odd_text_and_raw_actions_ship_as_they_score(rows, fields, shipped):
    """Raw model text (parsed as the loader parses it), odd characters, blank parts: a row that
    validates ships and gives the same step; a batch that fails, fails the same way shipped."""
    config = FactUtilConfig(mode="exact", **fields)
    try:
        plain = compute_process_advantages(rows, config, on_invalid_group="skip")
    except (ValueError, TypeError, FloatingPointError) as error:
        with pytest.raises(type(error)):
            compute_process_advantages(_ship_some(rows, config, shipped), config,
                                       on_invalid_group="skip")
        return
    result = compute_process_advantages(_ship_some(rows, config, shipped), config,
                                        on_invalid_group="skip")
    _assert_same(plain, result)


_KEYS = [("u", "a"), ("u", "b"), ("v", "a")]


@pytest.mark.parametrize("metas", [
    [[None, None, "x", {}], [None, None, None, {}], [None, None, "y", {}]],  # all name none
    [["u", "a", "x", {}], ["u", "b", None, {}], ["v", "a", "y", {}]],  # all their own rollout
    [["u", "a", "x", {}], [None, None, None, {}], ["v", "a", "y", {}]],  # mixed: still fine
    [[None, None, "x", {}], [None, None, None, {"0": "bad tag"}], [None, None, "y", {}]],
    [[None, "a", "x", {}], [None, None, None, {}], [None, None, "y", {}]],  # half a name
    [["u", None, "x", {}], [None, None, None, {}], [None, None, "y", {}]],
    [[None, None, "x", {}], ["u", "a", None, {}], [None, None, "y", {}]],  # another's work
    [[None, None, 3, {}], [None, None, None, {}], [None, None, "y", {}]],  # not an answer
    [[None, None, "x", []], [None, None, None, {}], [None, None, "y", {}]],
    [[None, None, "x", {}], [None, None, None, {"9": "beyond"}], [None, None, "y", {}]],
    [[None, None, "x"], [None, None, None, {}], [None, None, "y", {}]],
])
def test_metas_read_a_column_at_a_time_as_one_by_one(metas):
    """_metas (the batch's usual metas checked a column at a time) gives what _meta gives item by
    item, or refuses with its first message."""
    from factutil import rollout_work

    totals = [2, 3, 2]
    try:
        expected = [rollout_work._meta(m, t, k) for m, t, k in zip(metas, totals, _KEYS)]
    except ValueError as error:
        with pytest.raises(ValueError) as refused:
            rollout_work._metas(metas, totals, _KEYS)
        assert str(refused.value) == str(error)
    else:
        assert rollout_work._metas(metas, totals, _KEYS) == expected
