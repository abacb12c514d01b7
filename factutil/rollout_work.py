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
together (each section of every item joined and checked at once), and, when that fails, one by
one to name the bad ones.
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
_KIND_CODES = frozenset(KIND_CODES.values())


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
    facts: list[PreparedFacts]  # the facts' work: the first one is what ``occurrence_work`` indexes
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


def _read_header(data: Any) -> _Header:
    """One item's header, its sizes checked against its length.

    Raises:
        ValueError: not this form, an unknown version or flags, or sizes that do not add up.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"is {type(data).__name__}, expected bytes")
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    (magic, version, flags, zero, max_turns, total, kinds, occurrences, repeated, ignored, meta,
     facts) = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION or flags & ~_EMPTY_STORE or zero:
        raise ValueError(f"unknown format version {version} or flags {flags:#x}/{zero:#x}")
    size = _HEADER.size + kinds + ignored + 4 * (2 * occurrences + repeated) + meta + facts
    if size != len(data) or kinds + ignored != total:
        raise ValueError(f"{len(data)} bytes, the header says {size} (total {total}, kinds "
                         f"{kinds}, ignored {ignored})")
    return _Header(data, flags, max_turns, total, kinds, occurrences, repeated, ignored, meta,
                   facts)


def read_rollout_work(
    shipped: Mapping[int, Any], keys: Mapping[int, tuple[str, str]], config: FactUtilConfig
) -> RolloutWork:
    """Every shipped row of a batch, read at once.

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
    headers: dict[int, _Header] = {}
    for row, data in shipped.items():
        try:
            header = _read_header(data)
        except ValueError as error:
            unreadable[row] = f"its shipped work cannot be read ({error})"
            continue
        if header.max_turns != config.max_turns:
            unreadable[row] = (f"its shipped work was made for max_turns={header.max_turns}, "
                               f"the step's is {config.max_turns}")
            continue
        headers[row] = header
    columns: dict[int, RolloutColumns] = {}
    fact_items: dict[int, tuple[bytes, int]] = {}
    try:
        found = _read_columns(list(headers.values()), [keys[row] for row in headers])
    except ValueError:  # each alone, to name the bad ones
        found = []
        for row, header in list(headers.items()):
            try:
                found += _read_columns([header], [keys[row]])
            except ValueError as error:
                unreadable[row] = f"its shipped work cannot be read ({error})"
                del headers[row]
    for row, (column, facts_at) in zip(headers, found):
        columns[row], fact_items[row] = column, facts_at
    facts = _read_facts(columns, fact_items, unreadable, config)
    return RolloutWork(columns, facts, unreadable)


def _read_columns(
    headers: Sequence[_Header], keys: Sequence[tuple[str, str]]
) -> list[tuple[RolloutColumns, tuple[bytes, int]]]:
    """The columns of some items (occurrences' local fact rows in ``occurrence_work``, texts
    unset) and where each one's facts item starts in its bytes: each section of every item
    joined and checked at once.

    Raises:
        ValueError: some item is not what the layout says (the caller reads them one by one to
            name it).
    """
    if not headers:
        return []
    fields = np.array([header[1:] for header in headers], dtype=np.int64)
    _, _, _, kinds, occurrences, repeated, ignored, meta, _ = fields.T
    datas = [header.data for header in headers]
    at = np.full(len(headers), _HEADER.size, dtype=np.int64)

    def section(width: np.ndarray) -> list[bytes]:
        nonlocal at
        starts, at = at.tolist(), at + width
        return [data[a:b] for data, a, b in zip(datas, starts, at.tolist())]

    kind_codes = np.frombuffer(b"".join(section(kinds)), dtype=np.uint8)
    ignored_codes = np.frombuffer(b"".join(section(ignored)), dtype=np.uint8)
    steps = np.frombuffer(b"".join(section(4 * occurrences)), dtype="<u4")
    local = np.frombuffer(b"".join(section(4 * occurrences)), dtype="<u4")
    repeated_steps = np.frombuffer(b"".join(section(4 * repeated)), dtype="<u4")
    if not (_KIND_CODES.issuperset(np.unique(kind_codes).tolist())
            and _KIND_CODES.issuperset(np.unique(ignored_codes).tolist())):
        raise ValueError("a kind code that is no action's")
    if not (np.all(steps < np.repeat(kinds, occurrences))
            and np.all(repeated_steps < np.repeat(kinds, repeated))):
        raise ValueError("a step beyond the rollout's effective actions")
    try:
        metas = json.loads(b"[" + b",".join(section(meta)) + b"]")
    except (UnicodeDecodeError, ValueError):
        raise ValueError("its meta is not JSON") from None
    answers = [_meta(found, header, key) for found, header, key in zip(metas, headers, keys)]
    facts_at = at.tolist()
    bounds = [np.concatenate(([0], np.cumsum(width))).tolist()
              for width in (kinds, ignored, occurrences, repeated)]
    kind_codes, ignored_codes = kind_codes.tolist(), ignored_codes.tolist()
    steps, local, repeated_steps = steps.tolist(), local.tolist(), repeated_steps.tolist()
    out = []
    for i, (header, (answer, reasons)) in enumerate(zip(headers, answers)):
        k0, k1 = bounds[0][i], bounds[0][i + 1]
        g0, g1 = bounds[1][i], bounds[1][i + 1]
        o0, o1 = bounds[2][i], bounds[2][i + 1]
        r0, r1 = bounds[3][i], bounds[3][i + 1]
        out.append((RolloutColumns(
            kind_codes[k0:k1], header.total, steps[o0:o1], [], repeated_steps[r0:r1], answer,
            bool(header.flags & _EMPTY_STORE), ignored_codes[g0:g1], reasons, None,
            local[o0:o1],
        ), (header.data, facts_at[i])))
    return out


def _meta(meta: Any, header: _Header, key: tuple[str, str]) -> tuple[str | None, dict[int, str]]:
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
            type(reason) is str and 0 <= index < header.total for index, reason in found.items()):
        raise ValueError(f"its invalid reasons {short(reasons)} are not action indices and "
                         f"strings")
    return answer, found


def _read_facts(columns: dict[int, RolloutColumns], fact_items: Mapping[int, tuple[bytes, int]],
                unreadable: dict[int, str], config: FactUtilConfig) -> list[PreparedFacts]:
    """The facts' work of every readable row, read together, and each occurrence's triple, text
    and row in the first result (set in ``columns``; a row whose facts' work cannot be read is
    moved to ``unreadable``).

    The items of the first row's kind of work (:func:`factutil.prepare.load_prepared` groups by
    it; all of them, in a run) are read at once (:func:`~factutil.prepared_bytes.read_many`);
    items of another kind, one by one, their occurrences' rows -1. An occurrence's text is the
    shipped one when the work was made for the step's template, else made here.
    """
    from factutil.prepare import _from_item, _kind, merge_prepared
    from factutil.result import gc_paused

    heads: dict[bytes, tuple[Any, ...]] = {}
    items: dict[int, prepared_bytes.Item] = {}
    for row, (data, start) in fact_items.items():
        try:
            item = prepared_bytes.read_header(data, start)
            if item.head not in heads:
                heads[item.head] = prepared_bytes.read_head(item.head)
        except ValueError as error:
            unreadable[row] = f"its shipped facts' work cannot be read ({error})"
            columns.pop(row)
            continue
        items[row] = item
    if not items:
        return []
    with gc_paused(config.pause_gc):
        kinds = {row: _kind(item, heads) for row, item in items.items()}
        main_kind = next(iter(kinds.values()))
        main_rows = [row for row, kind in kinds.items() if kind == main_kind]
        facts: list[PreparedFacts] = []
        head = main_kind[0]
        try:
            decoded = prepared_bytes.read_many([items[row] for row in main_rows])
        except ValueError:  # each alone, to name the bad ones, and the rest merged
            alone = {}
            for row in main_rows:
                try:
                    alone[row] = _from_item(items[row], heads[items[row].head])
                except ValueError as error:
                    unreadable[row] = f"its shipped facts' work cannot be read ({error})"
                    columns.pop(row)
            main_rows = list(alone)
            if alone:
                main = merge_prepared(alone.values())
                position = {parts: index for index, parts in enumerate(main.parts)}
                fact_rows = [position[parts] for item in alone.values() for parts in item.parts]
        else:
            main = PreparedFacts(*head[:4], decoded.parts, decoded.texts, decoded.vectors,
                                 decoded.analyses, head[4], decoded.sources)
            fact_rows = decoded.rows
        if main_rows:
            facts.append(main)
            _link_together(columns, main_rows, [items[row].n for row in main_rows], fact_rows,
                           main, unreadable, config)
        for row, kind in kinds.items():
            if kind == main_kind or row not in columns:
                continue
            try:
                item = _from_item(items[row], heads[items[row].head])
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


def _link_together(columns: dict[int, RolloutColumns], rows: Sequence[int], counts: Sequence[int],
                   fact_rows: Sequence[int], facts: PreparedFacts, unreadable: dict[int, str],
                   config: FactUtilConfig) -> None:
    """The occurrences of ``rows`` (whose facts' items were read together into ``facts``):
    each one's triple, text (the shipped one when made for the step's template, else made here)
    and row in ``facts``, from its local fact row. ``counts``: the number of facts of each row's
    item; ``fact_rows``: each of those facts' row in ``facts``, the items one after another. A
    row naming a fact beyond its item is moved to ``unreadable``."""
    local = [columns[row].occurrence_work for row in rows]
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
    triples = [list(parts[i]) for i in found]
    if facts.template == template:
        occurrence_texts = [texts[i] for i in found]
    else:
        occurrence_texts = [fact_text(*parts[i], template) for i in found]
    ends = np.cumsum(sizes).tolist()
    for index, (row, end, size) in enumerate(zip(rows, ends, sizes.tolist())):
        if bad[index]:
            unreadable[row] = "its shipped work names a fact its facts' work does not hold"
            columns.pop(row)
            continue
        start = end - size
        columns[row] = columns[row]._replace(
            occurrence_triples=triples[start:end], occurrence_texts=occurrence_texts[start:end],
            occurrence_work=found[start:end])
