"""The shipped form of :class:`~factutil.prepare.PreparedFacts`: a small binary layout that a step
reads in bulk, thousands of items at once, and that runs no code when read.

Layout of one item (integers little-endian)::

    header   32 bytes: b"FUPF", format version (u8, 3), flags (u8: 1 vectors, 2 analyses),
             2 zero bytes, then u32 n (facts), dims (vector width; 0 without vectors), sources,
             head_len, strings_len, analyses_len
    lengths  u32 (n, 4): the length in characters of each fact's subject, relation, object, text
    alens    u32 (n,): the length in bytes of each fact's analysis (only with analyses)
    vectors  float32 (n, dims), row i for fact i (only with vectors)
    head     head_len bytes: JSON [embedder, template, filters, key_edges, device]
    strings  strings_len bytes: UTF-8 (lone surrogates kept) of every fact's subject, relation,
             object and text, in fact order, each as long as ``lengths`` says and followed by
             a NUL (a reader cuts at the NULs when no string holds one itself)
    analyses analyses_len bytes: each fact's analysis (the FactFeatures fields after the parts)
             as an ASCII JSON array, one after another, each as long as ``alens`` says

Every field is checked when read (sizes against the item's length, UTF-8, character counts,
JSON types, each analysis field's type); anything else is a ValueError naming what is wrong.
:func:`read_headers` reads the headers of many items (inside other bytes, a batch's shipped rows)
a column at a time; :func:`read_many` reads many items of one kind of work at once: their
lengths, strings and vectors are joined and cut with a few array operations (the strings decoded
once), the facts are deduplicated once, and only the kept facts' analyses are decoded (one JSON
parse for all of them) and checked.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from factutil.filters import FactFeatures

MAGIC = b"FUPF"
VERSION = 3
_HEADER = struct.Struct("<4sBBHIIIIII")
_VECTORS, _ANALYSES = 1, 2
_ANALYSIS_WIDTH = 11  # FactFeatures' fields after subject, relation, object
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_SEP = "\x00"


class Item(NamedTuple):
    """One item's header, checked against its length (:func:`read_header`)."""

    data: bytes
    n: int
    dims: int
    vectors: bool
    analyses: bool
    sources: int
    head: bytes  # the JSON head, as written
    lengths: int  # offsets of each section in data
    alens: int
    vector_start: int
    head_start: int
    strings: int
    analyses_start: int
    end: int


def encode(head: tuple[Any, ...], parts: Sequence[tuple[str, str, str]], texts: Sequence[str],
           vectors: np.ndarray | None, analyses: Sequence[FactFeatures] | None,
           sources: int) -> bytes:
    """The bytes of one item (see the module docstring); ``head`` is (embedder, template,
    filters, key_edges, device).

    Raises:
        ValueError: a field that cannot be written (a string the length of which does not fit,
            an analysis value JSON cannot hold).
    """
    n = len(parts)
    strings = [s for key, text in zip(parts, texts) for s in (*key, text)]
    lengths = np.fromiter(map(len, strings), dtype="<u4", count=4 * n)
    blob = "".join([s + _SEP for s in strings]).encode("utf-8", "surrogatepass")
    embedder, template, filters, key_edges, device = head
    head_bytes = _dumps([embedder, template, list(filters), bool(key_edges), device]).encode()
    flags = 0
    sections = [lengths.tobytes()]
    analyses_blob = b""
    if analyses is not None:
        flags |= _ANALYSES
        try:
            rows = [_dumps([f.subject_key, f.object_key, f.relation_id, f.inverse, f.negated,
                            f.quantities, f.key, f.relation_key, f.symmetric, f.negation_cues,
                            sorted(f.words)]).encode() for f in analyses]
        except (TypeError, ValueError) as error:
            raise ValueError(f"PreparedFacts.to_bytes: an analysis JSON cannot hold ({error})") \
                from None
        sections.append(np.fromiter(map(len, rows), dtype="<u4", count=n).tobytes())
        analyses_blob = b"".join(rows)
    dims = 0
    if vectors is not None:
        flags |= _VECTORS
        dims = vectors.shape[1] if vectors.ndim == 2 else 0
        sections.append(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
    header = _HEADER.pack(MAGIC, VERSION, flags, 0, n, dims, sources, len(head_bytes), len(blob),
                          len(analyses_blob))
    return b"".join((header, *sections, head_bytes, blob, analyses_blob))


def is_ours(data: bytes) -> bool:
    """Whether ``data`` starts as this form does (else it may be the older pickled form)."""
    return data[:4] == MAGIC


def read_header(data: bytes, start: int = 0, end: int | None = None) -> Item:
    """The header of the item that fills ``data[start:end]`` (another form, or a batch's joined
    bytes, may hold one inside its own; ``end`` None = ``len(data)``), every size checked against
    that length; the item's offsets count from the start of ``data``.

    Raises:
        ValueError: not this form, an unknown version or flags, or sizes that do not add up.
    """
    stop = len(data) if end is None else end
    if stop - start < _HEADER.size:
        raise ValueError(f"{stop - start} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, flags, zero, n, dims, sources, head_len, strings_len, analyses_len = \
        _HEADER.unpack_from(data, start)
    if magic != MAGIC:
        raise ValueError(f"starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ValueError(f"unknown format version {version}")
    if flags & ~(_VECTORS | _ANALYSES) or zero:
        raise ValueError(f"unknown flags {flags:#x}/{zero:#x}")
    if not flags & _VECTORS and dims:
        raise ValueError(f"dims {dims} without vectors")
    if sources < 1:
        raise ValueError(f"sources {sources}, expected >= 1")
    has_analyses = bool(flags & _ANALYSES)
    lengths = start + _HEADER.size
    alens = lengths + 16 * n
    vector_start = alens + (4 * n if has_analyses else 0)
    head = vector_start + 4 * n * dims
    strings = head + head_len
    analyses_start = strings + strings_len
    end = analyses_start + analyses_len
    if end != stop or (not has_analyses and analyses_len):
        raise ValueError(f"{stop - start} bytes, the header says {end - start} (n={n}, "
                         f"dims={dims})")
    return Item(data, n, dims, bool(flags & _VECTORS), has_analyses, sources,
                data[head:strings], lengths, alens, vector_start, head, strings, analyses_start,
                end)


_RECORD = np.dtype([("magic", "S4"), ("version", "u1"), ("flags", "u1"), ("zero", "<u2"),
                    ("n", "<u4"), ("dims", "<u4"), ("sources", "<u4"), ("head_len", "<u4"),
                    ("strings_len", "<u4"), ("analyses_len", "<u4")])


class Items(NamedTuple):
    """Many items' headers, read at once (:func:`read_headers`): per item, the bytes that hold it
    and int64 offsets into them (as :class:`Item`'s) and its fields, (m,) arrays."""

    datas: list[bytes]
    n: np.ndarray
    dims: np.ndarray
    vectors: np.ndarray  # bool
    analyses: np.ndarray  # bool
    sources: np.ndarray
    heads: list[bytes]
    lengths: np.ndarray
    alens: np.ndarray
    vector_start: np.ndarray
    strings: np.ndarray
    analyses_start: np.ndarray
    end: np.ndarray

    def take(self, index: Sequence[int]) -> Items:
        """The items ``index`` names, in its order."""
        return take(self, index)

    def item(self, i: int) -> Item:
        """Item ``i`` alone."""
        return Item(self.datas[i], int(self.n[i]), int(self.dims[i]), bool(self.vectors[i]),
                    bool(self.analyses[i]), int(self.sources[i]), self.heads[i],
                    *(int(field[i]) for field in (self.lengths, self.alens, self.vector_start)),
                    int(self.strings[i]) - len(self.heads[i]),
                    *(int(field[i]) for field in (self.strings, self.analyses_start, self.end)))


def take(table: Any, index: Sequence[int]) -> Any:
    """Rows ``index`` of ``table`` (a NamedTuple of equal-length columns, NumPy arrays or lists),
    in its order, as the same type."""
    index = np.asarray(index, dtype=np.int64)
    chosen = index.tolist()
    return type(table)(*(field[index] if isinstance(field, np.ndarray)
                         else [field[i] for i in chosen] for field in table))


def records_at(datas: Sequence[bytes], starts: np.ndarray, ends: np.ndarray,
               record: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The fixed-size ``record`` at ``datas[i][starts[i]:]`` of every i, read at once: a
    structured (m,) array (zeros where fewer than its size are left before ``ends[i]``) and the
    bool mask of the records that fit."""
    size = record.itemsize
    room = ends - starts >= size
    blank = bytes(size)
    raw = b"".join([data[start:start + size] if fits else blank for data, start, fits in
                    zip(datas, starts.tolist(), room.tolist())])
    return np.frombuffer(raw, dtype=record), room


def read_headers(datas: Sequence[bytes], starts: np.ndarray,
                 ends: np.ndarray) -> tuple[Items, dict[int, str]]:
    """The headers of the items that fill ``datas[i][starts[i]:ends[i]]``, read and checked at
    once (what :func:`read_header` checks, a column at a time). Returns the good items, in order,
    and the position of each other one -> why (:func:`read_header`'s message)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    fields, room = records_at(datas, starts, ends, _RECORD)
    n, dims, sources = (fields[name].astype(np.int64) for name in ("n", "dims", "sources"))
    flags = fields["flags"].astype(np.int64)
    has_vectors, has_analyses = (flags & _VECTORS) > 0, (flags & _ANALYSES) > 0
    head_len = fields["head_len"].astype(np.int64)
    lengths = starts + _HEADER.size
    alens = lengths + 16 * n
    vector_start = alens + 4 * n * has_analyses
    strings = vector_start + 4 * n * dims + head_len
    analyses_start = strings + fields["strings_len"]
    end = analyses_start + fields["analyses_len"]
    # counts beyond the item cannot add up: refused before their int64 products wrap (for items
    # under 1 GB none can)
    fits = (n <= ends - starts) & (dims <= ends - starts)
    good = (room & fits & (fields["magic"] == MAGIC) & (fields["version"] == VERSION)
            & (flags & ~(_VECTORS | _ANALYSES) == 0) & (fields["zero"] == 0)
            & (has_vectors | (dims == 0)) & (sources >= 1) & (end == ends)
            & (has_analyses | (fields["analyses_len"] == 0)))
    errors: dict[int, str] = {}
    for i in np.flatnonzero(~good).tolist():
        try:
            read_header(datas[i], int(starts[i]), int(ends[i]))
        except ValueError as error:
            errors[i] = str(error)
        else:  # pragma: no cover - the columns above check what read_header checks
            errors[i] = "its header cannot be read"
    kept = np.flatnonzero(good)
    chosen = kept.tolist()
    kept_datas = [datas[i] for i in chosen]
    heads = [data[a:b] for data, a, b in zip(kept_datas, (strings - head_len)[kept].tolist(),
                                             strings[kept].tolist())]
    return Items(kept_datas, n[kept], dims[kept], has_vectors[kept], has_analyses[kept],
                 sources[kept], heads, lengths[kept], alens[kept], vector_start[kept],
                 strings[kept], analyses_start[kept], end[kept]), errors


def items_of(items: Sequence[Item]) -> Items:
    """Items read one by one (:func:`read_header`) as one :class:`Items`."""

    def column(name: str, dtype: Any = np.int64) -> np.ndarray:
        return np.fromiter((getattr(item, name) for item in items), dtype, len(items))

    return Items([item.data for item in items], column("n"), column("dims"),
                 column("vectors", bool), column("analyses", bool), column("sources"),
                 [item.head for item in items],
                 *(column(name) for name in ("lengths", "alens", "vector_start", "strings",
                                             "analyses_start", "end")))


def read_head(head: bytes) -> tuple[Any, ...]:
    """The (embedder, template, filters, key_edges, device) an item's head names.

    Raises:
        ValueError: not that JSON array, or a field of another type.
    """
    try:
        value = json.loads(head)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"head {head[:80]!r} is not JSON") from None
    if type(value) is not list or len(value) != 5:
        raise ValueError(f"head {value!r:.80} is not [embedder, template, filters, key_edges, "
                         f"device]")
    embedder, template, filters, key_edges, device = value
    if embedder is not None and type(embedder) is not str:
        raise ValueError(f"head embedder {embedder!r:.80} is not a str or null")
    if type(template) is not str:
        raise ValueError(f"head template {template!r:.80} is not a str")
    if type(filters) is not list or not all(type(name) is str for name in filters):
        raise ValueError(f"head filters {filters!r:.80} is not a list of str")
    if type(key_edges) is not bool:
        raise ValueError(f"head key_edges {key_edges!r:.80} is not a bool")
    if type(device) is not str:
        raise ValueError(f"head device {device!r:.80} is not a str")
    return embedder, template, tuple(filters), key_edges, device


class Decoded(NamedTuple):
    """Items of one kind read together: the distinct facts (sorted, when deduplicated)."""

    parts: tuple[tuple[str, str, str], ...]
    texts: tuple[str, ...]
    vectors: np.ndarray | None  # read-only float32 (n, dims)
    analyses: tuple[FactFeatures, ...] | None
    sources: int
    rows: list[int] | None = None  # with dedup: each fact of the items, in order, its row here


def read_many(items: Items | Sequence[Item], dedup: bool = True) -> Decoded:
    """Items of one kind (equal heads, all with or all without vectors of one width and
    analyses) as their facts: with ``dedup`` the sorted distinct facts, each fact's work from the
    first item that has it (only those facts' analyses are decoded and checked); else every fact
    of the items in order.

    Raises:
        ValueError: a section that is not what the header says (the message names it); the
            caller reads the items one at a time to find which.
    """
    if not isinstance(items, Items):
        if len(items) == 1 and not dedup:
            return _read_one(items[0])
        items = items_of(items)
    datas, counts = items.datas, items.n
    total = int(counts.sum())
    lengths = np.frombuffer(_join(datas, items.lengths, items.alens),
                            dtype="<u4").astype(np.int64)
    raw = _join(datas, items.strings, items.analyses_start)
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise ValueError(f"strings are not UTF-8 ({error})") from None
    # Each item's strings start a character and end with a NUL, so no character crosses from one
    # item to the next (each item's bytes are UTF-8 alone), and an item's characters are its
    # lead bytes: its lengths plus 4 per fact (a NUL after each string).
    sizes = items.analyses_start - items.strings
    ends = np.cumsum(sizes)
    codes = np.frombuffer(raw, dtype=np.uint8)
    filled = sizes > 0
    if len(codes) and not (np.all(codes[(ends - sizes)[filled]] & 0xC0 != 0x80)
                           and np.all(codes[ends[filled] - 1] == 0)):
        raise ValueError("strings are not as long as their lengths say")
    follow = np.flatnonzero(codes & 0xC0 == 0x80)  # continuation bytes: few in most text
    chars = sizes - np.bincount(np.searchsorted(ends, follow, side="right"),
                                minlength=len(sizes))[:len(sizes)]
    if not np.array_equal(_per_item(lengths, counts, 4) + 4 * counts, chars):
        raise ValueError("strings are not as long as their lengths say")
    strings = text.split(_SEP)
    if len(strings) == 4 * total + 1:  # no string holds a NUL itself: a cut at each one
        strings.pop()
        if not np.array_equal(np.fromiter(map(len, strings), np.int64, 4 * total), lengths):
            raise ValueError("strings are not as long as their lengths say")
    else:
        cuts = np.cumsum(lengths + 1).tolist()
        strings = [text[start:end - 1] for start, end in zip([0, *cuts[:-1]], cuts)]
        if "".join([text[end - 1] for end in cuts]) != _SEP * len(cuts):
            raise ValueError("strings are not separated where their lengths say")
    parts = list(zip(strings[0::4], strings[1::4], strings[2::4]))
    texts = strings[3::4]
    if dedup:
        where: dict[tuple[str, str, str], int] = {}
        where.update(zip(reversed(parts), range(total - 1, -1, -1)))  # the first one wins
        kept = sorted(where)
        picks = [where[key] for key in kept]
        rows = list(map(dict(zip(kept, range(len(kept)))).__getitem__, parts))
    else:
        kept, picks, rows = parts, list(range(total)), None
    item_of = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    vectors = None
    if items.vectors[0]:
        vectors = _vectors(items, item_of, within, picks, int(items.dims[0]))
    analyses = None
    if items.analyses[0]:
        analyses = _analyses(items, item_of, within, kept, picks)
    return Decoded(tuple(kept), tuple([texts[i] for i in picks]), vectors, analyses,
                   int(items.sources.sum()), rows)


def _join(datas: Sequence[bytes], starts: np.ndarray, ends: np.ndarray) -> bytes:
    """The bytes ``datas[i][starts[i]:ends[i]]`` of every i, one after another."""
    return b"".join([data[a:b] for data, a, b in zip(datas, starts.tolist(), ends.tolist())])


def _read_one(item: Item) -> Decoded:
    """One item's facts in order (:func:`read_many` without the array work that pays for
    itself only over many items)."""
    data, n = item.data, item.n
    lengths = list(struct.unpack_from(f"<{4 * n}I", data, item.lengths))
    try:
        text = data[item.strings:item.analyses_start].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise ValueError(f"strings are not UTF-8 ({error})") from None
    strings = text.split(_SEP)
    if strings.pop() != "" or list(map(len, strings)) != lengths:
        ends, strings = 0, []
        for length in lengths:  # a string that holds a NUL itself
            strings.append(text[ends:ends + length])
            if text[ends + length:ends + length + 1] != _SEP:
                raise ValueError("strings are not as long as their lengths say")
            ends += length + 1
        if ends != len(text):
            raise ValueError("strings are not as long as their lengths say")
    parts = tuple(zip(strings[0::4], strings[1::4], strings[2::4]))
    vectors = None
    if item.vectors:
        vectors = np.frombuffer(data, dtype="<f4", count=n * item.dims, offset=item.vector_start)
        vectors = vectors.astype(np.float32, copy=False).reshape(n, item.dims)
        check_unit(vectors)
    analyses = None
    if item.analyses:
        sizes = struct.unpack_from(f"<{n}I", data, item.alens)
        if sum(sizes) != item.end - item.analyses_start:
            raise ValueError("analyses are not as long as their lengths say")
        rows, at = [], item.analyses_start
        for size in sizes:
            rows.append(data[at:at + size])
            at += size
        try:
            rows = json.loads(b"[" + b",".join(rows) + b"]")
        except (UnicodeDecodeError, ValueError):
            raise ValueError("analyses are not JSON") from None
        if len(rows) != n:
            raise ValueError(f"{len(rows)} analyses decoded, expected {n}")
        analyses = _all_features(parts, rows)
    return Decoded(parts, tuple(strings[3::4]), vectors, analyses, item.sources)


def _per_item(values: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """The sum of each item's ``width * n`` values (integers or bools; int64, one per item)."""
    if not len(values):
        return np.zeros(len(counts), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(counts[:-1]))) * width
    # a zero after the values: an empty last item starts there, and the item before it ends there
    sums = np.add.reduceat(np.append(values, 0), starts, dtype=np.int64)
    sums[counts == 0] = 0  # reduceat gives the next value for an empty item
    return sums


def _vectors(items: Items, item_of: np.ndarray, within: np.ndarray, picks: list[int],
             dims: int) -> np.ndarray:
    """Rows ``picks`` (numbered across the items; fact f is fact ``within[f]`` of item
    ``item_of[f]``) of the items' vectors: read-only float32 (len(picks), dims); only those rows'
    bytes are copied."""
    width = 4 * dims
    offsets = (items.vector_start[item_of] + within * width)[picks].tolist()
    datas = [items.datas[i] for i in item_of[picks].tolist()]
    raw = b"".join([data[start:start + width] for data, start in zip(datas, offsets)])
    vectors = np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)
    vectors = vectors.reshape(len(picks), dims)
    check_unit(vectors)
    vectors.setflags(write=False)
    return vectors


def check_unit(vectors: np.ndarray) -> None:
    """Refuse vectors that are not finite unit vectors (every embedder's are L2-normalised):
    a changed byte must not reach the similarities as an overflow or a NaN.

    Raises:
        ValueError: naming the first such row.
    """
    with np.errstate(all="ignore"):
        norms = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
    bad = ~(np.abs(norms - 1.0) <= 1e-3)
    if bad.any():
        raise ValueError(f"vector {int(np.flatnonzero(bad)[0])} is not a finite unit vector")


def _analyses(items: Items, item_of: np.ndarray, within: np.ndarray,
              kept: Sequence[tuple[str, str, str]], picks: list[int]) -> tuple[FactFeatures, ...]:
    """The analyses of the facts ``picks`` names (numbered as :func:`_vectors` numbers them),
    decoded in one JSON parse and checked."""
    counts = items.n
    sizes = np.frombuffer(_join(items.datas, items.alens, items.vector_start),
                          dtype="<u4").astype(np.int64)
    if not np.array_equal(_per_item(sizes, counts, 1), items.end - items.analyses_start):
        raise ValueError("analyses are not as long as their lengths say")
    # a fact's analysis starts where its item's do, after the item's earlier facts' ones
    before = np.cumsum(sizes) - sizes
    begin = items.analyses_start[item_of] + before - before[np.arange(len(within)) - within]
    picked = np.asarray(picks, dtype=np.int64)
    datas = [items.datas[i] for i in item_of[picked].tolist()]
    starts, stops = begin[picked].tolist(), (begin + sizes)[picked].tolist()
    try:
        rows = json.loads(b"[" + b",".join([data[a:b] for data, a, b in
                                            zip(datas, starts, stops)]) + b"]")
    except (UnicodeDecodeError, ValueError):
        raise ValueError("analyses are not JSON") from None
    if len(rows) != len(picks):
        raise ValueError(f"{len(rows)} analyses decoded, expected {len(picks)}")
    return _all_features(kept, rows)


_LIST = {list}
_STR = {str}
_BOOL = {bool}
_STR_OR_NONE = {str, type(None)}


def _all_features(kept: Sequence[tuple[str, str, str]], rows: list[Any]) -> tuple[FactFeatures, ...]:
    """Each fact's analysis from its JSON fields, the fields checked a column at a time (the
    cost of a per-fact check is most of reading); any fault is found again fact by fact
    (:func:`_features`) to name the fact."""
    if not rows:
        return ()
    try:
        if set(map(type, rows)) != _LIST or set(map(len, rows)) != {_ANALYSIS_WIDTH}:
            raise TypeError
        (subject_keys, object_keys, relation_ids, inverses, negateds, quantities, fact_keys,
         relation_keys, symmetrics, cues, words) = map(list, zip(*rows))
        if not (set(map(type, subject_keys)) == set(map(type, object_keys))
                == set(map(type, relation_keys)) == _STR
                and set(map(type, relation_ids)) <= _STR_OR_NONE
                and set(map(type, inverses)) == set(map(type, negateds))
                == set(map(type, symmetrics)) == _BOOL
                and set(map(type, quantities)) == set(map(type, fact_keys)) == set(map(type, cues))
                == set(map(type, words)) == _LIST
                and set(map(type, chain.from_iterable(quantities))) <= _LIST
                and set(map(len, fact_keys)) == {5}):
            raise TypeError
        heads = list(zip(*fact_keys))
        if not (set(map(type, heads[0])) == set(map(type, heads[1])) == set(map(type, heads[2]))
                == _STR and set(map(type, heads[3])) == _BOOL
                and set(map(type, heads[4])) == _LIST
                and set(map(type, chain.from_iterable(heads[4]))) <= _LIST):
            raise TypeError
        "".join(chain.from_iterable(cues))  # raises TypeError unless every item is a str
        "".join(chain.from_iterable(words))
        quantities = [tuple(map(tuple, q)) for q in quantities]
        fact_keys = list(zip(*heads[:4], [tuple(map(tuple, e)) for e in heads[4]]))
        set(map(hash, quantities))  # a list or object inside a quantity raises TypeError
        set(map(hash, fact_keys))
    except (TypeError, ValueError):
        for key, row in zip(kept, rows):
            _features(key, row)  # raises, naming the fact
        raise ValueError("analyses are not of FactFeatures' types") from None
    subjects, relations, objects = zip(*kept)
    return tuple(map(FactFeatures, subjects, relations, objects, subject_keys, object_keys,
                     relation_ids, inverses, negateds, quantities, fact_keys, relation_keys,
                     symmetrics, map(tuple, cues), map(frozenset, words)))


def _features(key: tuple[str, str, str], row: Any) -> FactFeatures:
    """One fact's analysis from its JSON fields, each field's type checked."""
    try:
        (subject_key, object_key, relation_id, inverse, negated, quantities, fact_key,
         relation_key, symmetric, cues, words) = row
        if not (type(row) is list and type(subject_key) is str and type(object_key) is str
                and type(relation_key) is str and (relation_id is None or type(relation_id) is str)
                and type(inverse) is bool and type(negated) is bool and type(symmetric) is bool
                and type(quantities) is list and type(cues) is list and type(words) is list
                and type(fact_key) is list and len(fact_key) == 5 and type(fact_key[0]) is str
                and type(fact_key[1]) is str and type(fact_key[2]) is str
                and type(fact_key[3]) is bool and type(fact_key[4]) is list
                and (not quantities or set(map(type, quantities)) == _LIST)
                and (not fact_key[4] or set(map(type, fact_key[4])) == _LIST)):
            raise TypeError
        "".join(cues)  # raises TypeError unless every item is a str
        "".join(words)
        quantities = tuple(map(tuple, quantities))
        fact_key[4] = tuple(map(tuple, fact_key[4]))
        fact_key = tuple(fact_key)
        hash(quantities)  # a list or object inside a quantity raises TypeError
        hash(fact_key)
    except (TypeError, ValueError):
        raise ValueError(f"the analysis of {key!r:.80} is not {_ANALYSIS_WIDTH} fields of "
                         f"FactFeatures' types") from None
    return FactFeatures(*key, subject_key, object_key, relation_id, inverse, negated, quantities,
                        fact_key, relation_key, symmetric, tuple(cues), frozenset(words))
