"""A rollout's whole per-rollout work, shipped from where it was generated (docs/method.md §1, §2.1–§2.4).

:func:`~factutil.prepare.prepare_facts` ships the work of a rollout's facts; :func:`prepare_rollout`
ships the rest of what the step does per rollout too: its columns
(:func:`factutil.columns.rollout_columns`: the kinds of its effective actions, each asserted
triple's step and fact, repeated searches, its answer, the empty-store flag, ignored actions and
invalid reasons). A trainer's step then receives the rollout as a *shipped row* -- ``uid``,
``question``, ``golden_answers``, ``rollout_id``, ``reward`` and ``shipped`` (these bytes), no
``actions`` -- and never validates or walks that rollout's actions: :func:`read_rollout_work`
reads every shipped row of a batch at once, and the step computes what it computes from the
actions, bit for bit.

The columns depend on ``config.max_turns`` only; the facts' work on what
:meth:`~factutil.prepare.PreparedFacts.mismatch` names. Work made for another ``max_turns``, naming
another rollout (its uid or rollout_id differ from the row's), or that cannot be read makes its
group unscorable (the step skips it with that reason); facts' work made for another embedder,
template, filters or key edges is recomputed by the step, as for ``prepare_facts``' items.

Layout of one item (integers little-endian)::

    header   40 bytes: b"FURW", format version (u8, 1), flags (u8: 1 the answer came while the
             store was empty), 2 zero bytes, then u32 max_turns, total (all actions), kinds
             (effective actions), occurrences, repeated, ignored, meta_len, facts_len
    kinds    u8 (kinds,): kind code of each effective action (factutil.shaping.KIND_CODES)
    ignored  u8 (ignored,): kind code of each ignored action
    steps    u32 (occurrences,): the step of each asserted triple occurrence
    facts    u32 (occurrences,): its row in the facts item below (its sorted distinct parts)
    repeated u32 (repeated,): the steps of repeated searches
    meta     meta_len bytes: ASCII JSON [uid, rollout_id, answer, {action index: invalid
             reason}]: uid and rollout_id null when the work names no rollout, answer null
             when none
    facts    facts_len bytes: the facts' work, :meth:`PreparedFacts.to_bytes`

Nothing runs when an item is read and every field is checked; the items of a batch are read
together (every header checked a column at a time, each section of every item cut out and
checked at once; no item's bytes copied whole), and, when that fails, one by one to name the bad
ones.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel

from factutil import prepared_bytes
from factutil.columns import RolloutColumns, rollout_columns
from factutil.config import FactUtilConfig
from factutil.errors import short
from factutil.facts import fact_text
from factutil.prepare import PreparedFacts, _config, prepare_facts
from factutil.shaping import KIND_CODES

__all__ = ["SHIPPED_ROW_KEY", "RolloutWork", "prepare_rollout", "read_rollout_work"]

SHIPPED_ROW_KEY = "shipped"
"""The key of a shipped row (a rollout dict without ``actions``) that holds its work's bytes."""

MAGIC = b"FURW"
VERSION = 1
_HEADER = struct.Struct("<4sBBHIIIIIIII")
_EMPTY_STORE = 1
_IS_KIND_CODE = np.isin(np.arange(256), list(KIND_CODES.values()))  # by u8 code: an action's?


def prepare_rollout(
    rollout: Mapping[str, Any] | Sequence[Any],
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    clusterer: Any = None,
    embedder: Any = None,
) -> bytes:
    """One rollout's work as the bytes a shipped row carries (see the module docstring).

    Args:
        rollout: a rollout dict (docs/method.md §8, ``actions`` required) or
            :class:`~factutil.schema.Rollout`: the work names its uid and rollout_id, and the
            step uses it only for the row with those; or the rollout's actions alone (a list of
            action dicts or models, as a rollout holds them), where the worker does not know
            the trainer's uid and rollout_id: the work names none, and the row that carries it
            owns it. Validated as the step validates a rollout.
        config, clusterer, embedder: as :func:`~factutil.prepare.prepare_facts` takes them.

    Returns:
        bytes; :func:`read_rollout_work` reads them.

    Raises:
        ValueError, TypeError: a rollout that fails validation (the field and value named).
        pydantic.ValidationError: a bad ``config``.
    """
    from factutil.load import load_groups

    named = isinstance(rollout, (Mapping, BaseModel))
    if not named:
        if isinstance(rollout, (str, bytes)) or not isinstance(rollout, Sequence):
            raise TypeError(f"prepare_rollout: rollout must be a rollout or a list of actions, "
                            f"got {short(rollout)}")
        rollout = {"uid": "-", "question": "", "golden_answers": ["-"], "rollout_id": "-",
                   "actions": list(rollout)}
    (group,), _ = load_groups([rollout])
    row = group.rollouts[0]
    config = _config(config, clusterer)
    columns = rollout_columns(row["actions"], config.max_turns)
    # the triples of the asserts the step reads, already validated with the rollout
    facts = prepare_facts(columns.occurrence_triples, config, clusterer=clusterer,
                          embedder=embedder)
    local = {parts: index for index, parts in enumerate(facts.parts)}
    occurrence_facts = [local[tuple(triple)] for triple in columns.occurrence_triples]
    meta = json.dumps([row["uid"] if named else None, row["rollout_id"] if named else None,
                       columns.answer, {str(k): v for k, v in columns.reasons.items()}],
                      separators=(",", ":")).encode("ascii")
    facts_bytes = facts.to_bytes()
    header = _HEADER.pack(MAGIC, VERSION, _EMPTY_STORE if columns.empty_store_answer else 0, 0,
                          config.max_turns, columns.total, len(columns.kinds),
                          len(occurrence_facts), len(columns.repeated_steps),
                          len(columns.ignored_kinds), len(meta), len(facts_bytes))
    return b"".join((
        header, bytes(columns.kinds), bytes(columns.ignored_kinds),
        np.asarray(columns.occurrence_step, dtype="<u4").tobytes(),
        np.asarray(occurrence_facts, dtype="<u4").tobytes(),
        np.asarray(columns.repeated_steps, dtype="<u4").tobytes(),
        meta, facts_bytes,
    ))


class RolloutWork(NamedTuple):
    """The shipped rows of a batch, read (:func:`read_rollout_work`)."""

    columns: dict[int, RolloutColumns]  # batch row -> its columns (texts and fact rows set)
    facts: list[PreparedFacts]  # the facts' work: the first one (its facts in order of first
    #                             appearance, not sorted) is what ``occurrence_work`` indexes
    unreadable: dict[int, str]  # batch row -> why its work cannot be used


class _Header(NamedTuple):
    data: bytes
    flags: int
    max_turns: int
    total: int
    kinds: int
    occurrences: int
    repeated: int
    ignored: int
    meta: int
    facts: int


def _columns_size(kinds: Any, ignored: Any, occurrences: Any, repeated: Any) -> Any:
    """The bytes of an item's column sections (kinds to repeated steps; ints or int64 arrays)."""
    return kinds + ignored + 4 * (2 * occurrences + repeated)


def _read_header(data: Any) -> _Header:
    """One item's header, its sizes checked against its length.

    Raises:
        ValueError: not this form, an unknown version or flags, or sizes that do not add up.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"is {type(data).__name__}, expected bytes")  # noqa: TRY004 - a reason
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    (magic, version, flags, zero, max_turns, total, kinds, occurrences, repeated, ignored, meta,
     facts) = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION or flags & ~_EMPTY_STORE or zero:
        raise ValueError(f"unknown format version {version} or flags {flags:#x}/{zero:#x}")
    size = _HEADER.size + _columns_size(kinds, ignored, occurrences, repeated) + meta + facts
    if size != len(data) or kinds + ignored != total:
        raise ValueError(f"{len(data)} bytes, the header says {size} (total {total}, kinds "
                         f"{kinds}, ignored {ignored})")
    return _Header(data, flags, max_turns, total, kinds, occurrences, repeated, ignored, meta,
                   facts)


_RECORD = np.dtype([("magic", "S4"), ("version", "u1"), ("flags", "u1"), ("zero", "<u2"),
                    *((name, "<u4") for name in _Header._fields[2:])])


def read_rollout_work(
    shipped: Mapping[int, Any], keys: Mapping[int, tuple[str, str]], config: FactUtilConfig
) -> RolloutWork:
    """Every shipped row of a batch, read at once.

    Method: every header is read and checked a column at a time (the headers joined), the
    column sections of every item are joined and cut out with a few array operations, and
    the facts' items inside go to :func:`~factutil.prepared_bytes.read_headers` and
    :func:`~factutil.prepared_bytes.read_many` together. Rows that fail are read alone
    (:func:`_read_header`, :func:`_read_columns` on one row) to name what is wrong.

    Args:
        shipped: batch row -> the row's ``shipped`` bytes (:func:`prepare_rollout`).
        keys: batch row -> its ``(uid, rollout_id)``, which work that names a rollout must name.
        config: the step's config (its ``max_turns`` must be the work's).

    Returns:
        :class:`RolloutWork`: each readable row's columns, with ``occurrence_texts`` and
        ``occurrence_work`` (the row of each occurrence's fact in ``facts[0]``, -1 when its fact's
        work is in another item of ``facts``); the facts' work, one item per kind
        (:func:`~factutil.prepare.load_prepared`'s kinds); each other row's reason. Never raises
        for a bad item.
    """
    unreadable: dict[int, str] = {}
    rows: list[int] = []
    datas: list[bytes] = []
    for row, data in shipped.items():
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if type(data) is bytes:
            rows.append(row)
            datas.append(data)
        else:
            unreadable[row] = _why_unreadable(data)
    rows, table = _checked_headers(rows, datas, config, unreadable)
    found: dict[int, Any] = {}  # batch row -> its _read_columns tuple, then its RolloutColumns
    try:
        found.update(zip(rows, _read_columns(table, [keys[row] for row in rows])))
    except ValueError:  # each alone, to name the bad ones
        for i, row in enumerate(rows):
            try:
                found[row] = _read_columns(table.take([i]), [keys[row]])[0]
            except ValueError as error:
                unreadable[row] = f"its shipped work cannot be read ({error})"
    ordered = [i for i, row in enumerate(rows) if row in found]
    facts = _read_facts(found, [rows[i] for i in ordered], table.take(ordered), unreadable, config)
    return RolloutWork(found, facts, unreadable)


def _why_unreadable(data: Any) -> str:
    """Why an item's header cannot be read (:func:`_read_header`'s message)."""
    try:
        _read_header(data)
    except ValueError as error:
        return f"its shipped work cannot be read ({error})"
    return "its shipped work cannot be read"  # pragma: no cover - only for refused headers


def _checked_headers(rows: list[int], datas: list[bytes], config: FactUtilConfig,
                     unreadable: dict[int, str]) -> tuple[list[int], _Table]:
    """The items' headers read and checked a column at a time (what :func:`_read_header` checks,
    and the step's ``max_turns``): the rows that pass and their table; each other row's reason
    is added to ``unreadable``."""
    sizes = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
    fields, room = prepared_bytes.records_at(datas, np.zeros(len(datas), dtype=np.int64), sizes,
                                             _RECORD)
    columns = np.stack([fields[name].astype(np.int64) for name in _Header._fields[2:]])
    max_turns, total, kinds, occurrences, repeated, ignored, meta, facts = columns
    flags = fields["flags"].astype(np.int64)
    good = (room & (fields["magic"] == MAGIC) & (fields["version"] == VERSION)
            & (flags & ~_EMPTY_STORE == 0) & (fields["zero"] == 0) & (kinds + ignored == total)
            & (_HEADER.size + _columns_size(kinds, ignored, occurrences, repeated) + meta + facts
               == sizes))
    for i in np.flatnonzero(~good).tolist():
        unreadable[rows[i]] = _why_unreadable(datas[i])
    other = good & (max_turns != config.max_turns)
    for i in np.flatnonzero(other).tolist():
        unreadable[rows[i]] = (f"its shipped work was made for max_turns={int(max_turns[i])}, "
                               f"the step's is {config.max_turns}")
    kept = np.flatnonzero(good & ~other)
    chosen = kept.tolist()
    return [rows[i] for i in chosen], _Table(
        [datas[i] for i in chosen], flags[kept], *(column[kept] for column in columns[1:]))


class _Table(NamedTuple):
    """Many items' checked headers: each item's bytes and its fields, int64 (m,) arrays."""

    datas: list[bytes]
    flags: np.ndarray
    total: np.ndarray
    kinds: np.ndarray
    occurrences: np.ndarray
    repeated: np.ndarray
    ignored: np.ndarray
    meta: np.ndarray
    facts: np.ndarray

    def take(self, index: Sequence[int]) -> _Table:
        """The items ``index`` names, in its order."""
        return prepared_bytes.take(self, index)


def _cut(data: np.ndarray, starts: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """``data[starts[i]:starts[i] + widths[i]]`` of every i, one after another (uint8)."""
    ends = np.cumsum(widths)
    return data[np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
                + np.repeat(starts - (ends - widths), widths)]


def _read_columns(table: _Table, keys: Sequence[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """The columns of some items, each as the fields of its :class:`RolloutColumns` but the
    occurrences' triples and texts, its occurrences' local fact rows last (:func:`_link_together`
    makes the RolloutColumns, once): the sections of every item joined, then each cut out and
    checked at once.

    Raises:
        ValueError: some item is not what the layout says (the caller reads them one by one to
            name it).
    """
    if not table.datas:
        return []
    # Each item's sections after its header, up to its meta, one after another.
    widths = _columns_size(table.kinds, table.ignored, table.occurrences, table.repeated)
    data = np.frombuffer(b"".join([item[_HEADER.size:_HEADER.size + width] for item, width in
                                   zip(table.datas, widths.tolist())]), dtype=np.uint8)
    at = np.cumsum(widths) - widths

    def section(width: np.ndarray) -> np.ndarray:
        nonlocal at
        found = _cut(data, at, width)
        at = at + width
        return found

    kind_codes = section(table.kinds)
    ignored_codes = section(table.ignored)
    steps = section(4 * table.occurrences).view("<u4")
    local = section(4 * table.occurrences).view("<u4")
    repeated_steps = section(4 * table.repeated).view("<u4")
    if not (_IS_KIND_CODE[kind_codes].all() and _IS_KIND_CODE[ignored_codes].all()):
        raise ValueError("a kind code that is no action's")
    if not (np.all(steps < np.repeat(table.kinds, table.occurrences))
            and np.all(repeated_steps < np.repeat(table.kinds, table.repeated))):
        raise ValueError("a step beyond the rollout's effective actions")
    meta_starts = (widths + _HEADER.size).tolist()
    try:
        metas = json.loads(b"[" + b",".join([item[a:a + size] for item, a, size in zip(
            table.datas, meta_starts, table.meta.tolist())]) + b"]")
    except (UnicodeDecodeError, ValueError):
        raise ValueError("its meta is not JSON") from None
    if len(metas) != len(keys):
        raise ValueError("its meta is not one JSON value")
    totals, flags = table.total.tolist(), table.flags.tolist()
    answers = _metas(metas, totals, keys)
    bounds = [np.cumsum(width).tolist() for width in
              (table.kinds, table.ignored, table.occurrences, table.repeated)]
    kind_codes, ignored_codes = kind_codes.tolist(), ignored_codes.tolist()
    steps, local, repeated_steps = steps.tolist(), local.tolist(), repeated_steps.tolist()
    out = []
    k0 = g0 = o0 = r0 = 0
    for (answer, reasons), total, flag, k1, g1, o1, r1 in zip(answers, totals, flags, *bounds):
        out.append((kind_codes[k0:k1], total, steps[o0:o1], repeated_steps[r0:r1], answer,
                    bool(flag & _EMPTY_STORE), ignored_codes[g0:g1], reasons, local[o0:o1]))
        k0, g0, o0, r0 = k1, g1, o1, r1
    return out


def _metas(metas: list[Any], totals: list[int],
           keys: Sequence[tuple[str, str]]) -> list[tuple[str | None, dict[int, str]]]:
    """Each item's answer and invalid reasons (:func:`_meta`): when every meta names its own
    rollout, or every one names none, and no invalid action (a run's usual batch), checked a
    column at a time, else item by item.

    Raises:
        ValueError: as :func:`_meta`, for the first item that is not so.
    """
    if set(map(type, metas)) == {list} and set(map(len, metas)) == {4}:
        uids, rollout_ids, answers, reasons = zip(*metas)
        if (set(map(type, answers)) <= {str, type(None)} and set(map(type, reasons)) == {dict}
                and not any(reasons) and (set(uids) == set(rollout_ids) == {None}
                                          or list(zip(uids, rollout_ids)) == list(keys))):
            return [(answer, {}) for answer in answers]
    return [_meta(found, total, key) for found, total, key in zip(metas, totals, keys)]


def _meta(meta: Any, total: int, key: tuple[str, str]) -> tuple[str | None, dict[int, str]]:
    """An item's answer and invalid reasons from its meta, checked (and its named rollout
    against ``key``).

    Raises:
        ValueError: a meta that is not ``[uid, rollout_id, answer, {index: reason}]`` of its
            types, or that names another rollout.
    """
    if type(meta) is not list or len(meta) != 4:
        raise ValueError(f"its meta {short(meta)} is not [uid, rollout_id, answer, reasons]")
    uid, rollout_id, answer, reasons = meta
    if not (uid is None and rollout_id is None or type(uid) is str and type(rollout_id) is str):
        raise ValueError(f"its uid {short(uid)} and rollout_id {short(rollout_id)} are not "
                         f"two strings or two nulls")
    if uid is not None and (uid, rollout_id) != key:
        raise ValueError(f"it is the work of uid {short(uid)} rollout_id {short(rollout_id)}")
    if answer is not None and type(answer) is not str:
        raise ValueError(f"its answer {short(answer)} is not a string or null")
    if type(reasons) is not dict:
        raise ValueError(f"its invalid reasons {short(reasons)} are not a JSON object")
    if not reasons:
        return answer, {}
    try:
        found = {int(index): reason for index, reason in reasons.items()}
    except ValueError:
        found = {}
    if len(found) != len(reasons) or not all(
            type(reason) is str and 0 <= index < total for index, reason in found.items()):
        raise ValueError(f"its invalid reasons {short(reasons)} are not action indices and "
                         f"strings")
    return answer, found


def _read_facts(columns: dict[int, Any], rows: Sequence[int], table: _Table,
                unreadable: dict[int, str], config: FactUtilConfig) -> list[PreparedFacts]:
    """The facts' work of ``rows`` (their items at the end of ``table``'s items), read together,
    and each row's RolloutColumns with its occurrences' triples, texts and rows in the first
    result (set in ``columns`` over :func:`_read_columns`' tuples; a row whose facts' work cannot
    be read is moved to ``unreadable``).

    The items of the first row's kind of work (:func:`factutil.prepare.load_prepared` groups by
    it; all of them, in a run) are read at once (:func:`~factutil.prepared_bytes.read_many`);
    items of another kind, one by one, their occurrences' rows -1. An occurrence's text is the
    shipped one when the work was made for the step's template, else made here.
    """
    from factutil.prepare import _from_item, _item_kind, merge_prepared
    from factutil.result import gc_paused

    ends = np.fromiter(map(len, table.datas), dtype=np.int64, count=len(table.datas))
    items, errors = prepared_bytes.read_headers(table.datas, ends - table.facts, ends)
    bad = {rows[i]: error for i, error in errors.items()}
    rows = [row for i, row in enumerate(rows) if i not in errors]
    heads: dict[bytes, tuple[Any, ...]] = {}
    for head in dict.fromkeys(items.heads):
        try:
            heads[head] = prepared_bytes.read_head(head)
        except ValueError as error:
            bad.update({row: str(error) for row, found in zip(rows, items.heads) if found == head})
    for row, error in bad.items():
        unreadable[row] = f"its shipped facts' work cannot be read ({error})"
        columns.pop(row)
    keep = [i for i, row in enumerate(rows) if row not in bad]
    rows = [rows[i] for i in keep]
    items = items.take(keep)
    if not rows:
        return []
    with gc_paused(config.pause_gc):
        kinds = list(map(_item_kind, map(heads.__getitem__, items.heads), items.analyses.tolist(),
                         items.dims.tolist(), items.vectors.tolist(), items.n.tolist()))
        main_kind = kinds[0]
        main = [i for i, kind in enumerate(kinds) if kind == main_kind]
        facts: list[PreparedFacts] = []
        head = main_kind[0]
        try:
            decoded = prepared_bytes.read_many(items.take(main), sort=False)
        except ValueError:  # each alone, to name the bad ones, and the rest merged
            alone = {}
            for i in main:
                try:
                    alone[i] = _from_item(items.item(i), head)
                except ValueError as error:
                    unreadable[rows[i]] = f"its shipped facts' work cannot be read ({error})"
                    columns.pop(rows[i])
            main = list(alone)
            if alone:
                merged = merge_prepared(alone.values())
                position = {parts: index for index, parts in enumerate(merged.parts)}
                fact_rows = [position[parts] for item in alone.values() for parts in item.parts]
        else:
            merged = PreparedFacts(*head[:4], decoded.parts, decoded.texts, decoded.vectors,
                                   decoded.analyses, head[4], decoded.sources)
            fact_rows = decoded.rows
        if main:
            facts.append(merged)
            _link_together(columns, [rows[i] for i in main], items.n[main].tolist(), fact_rows,
                           merged, unreadable, config)
        for i, kind in enumerate(kinds):
            row = rows[i]
            if kind == main_kind or row not in columns:
                continue
            try:
                item = _from_item(items.item(i), kind[0])
            except ValueError as error:
                unreadable[row] = f"its shipped facts' work cannot be read ({error})"
                columns.pop(row)
                continue
            facts.append(item)
            _link_together(columns, [row], [len(item)], range(len(item)), item, unreadable, config)
            if row in columns:  # its facts are not in facts[0]
                column = columns[row]
                columns[row] = column._replace(occurrence_work=[-1] * len(column.occurrence_work))
    return facts


def _link_together(columns: dict[int, Any], rows: Sequence[int], counts: Sequence[int],
                   fact_rows: Sequence[int], facts: PreparedFacts, unreadable: dict[int, str],
                   config: FactUtilConfig) -> None:
    """The columns of ``rows`` (:func:`_read_columns`' tuples, whose facts' items were read
    together into ``facts``) as RolloutColumns, with each occurrence's triple, text (the shipped
    one when made for the step's template, else made here) and row in ``facts``, from its local
    fact row. ``counts``: the number of facts of each row's item; ``fact_rows``: each of those
    facts' row in ``facts``, the items one after another. A row naming a fact beyond its item is
    moved to ``unreadable``."""
    local = [columns[row][-1] for row in rows]
    sizes = np.fromiter(map(len, local), dtype=np.int64, count=len(rows))
    flat = np.fromiter(chain.from_iterable(local), dtype=np.int64, count=int(sizes.sum()))
    counts = np.asarray(counts, dtype=np.int64)
    bad = np.zeros(len(rows), dtype=bool)
    outside = flat >= np.repeat(counts, sizes)
    if outside.any():
        np.logical_or.at(bad, np.repeat(np.arange(len(rows)), sizes)[outside], True)
    starts = np.cumsum(counts) - counts
    found = np.asarray(fact_rows, dtype=np.int64)[
        np.minimum(np.repeat(starts, sizes) + flat, max(len(fact_rows) - 1, 0))].tolist()
    parts, texts = facts.parts, facts.texts
    template = config.triple_template
    triples = list(map(parts.__getitem__, found))  # the read tuples: nothing new to track
    if facts.template == template:
        occurrence_texts = list(map(texts.__getitem__, found))
    else:
        occurrence_texts = [fact_text(*parts[i], template) for i in found]
    ends = np.cumsum(sizes).tolist()
    for index, (row, end, size) in enumerate(zip(rows, ends, sizes.tolist())):
        if bad[index]:
            unreadable[row] = "its shipped work names a fact its facts' work does not hold"
            columns.pop(row)
            continue
        start = end - size
        kinds, total, steps, repeated, answer, empty_store, ignored, reasons, _ = columns[row]
        columns[row] = RolloutColumns(
            kinds, total, steps, triples[start:end], repeated, answer, empty_store, ignored,
            reasons, occurrence_texts[start:end], found[start:end])
