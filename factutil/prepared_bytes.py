"""The shipped form of :class:`~factutil.prepare.PreparedFacts`: a small binary layout that a step
reads in bulk, thousands of items at once, and that runs no code when read.

Layout of one item (integers little-endian)::

    header   32 bytes: b"FUPF", format version (u8, 4), flags (u8: 1 vectors, 2 analyses),
             2 zero bytes, then u32 n (facts), dims (vector width; 0 without vectors), sources,
             head_len, strings_len, analyses_len
    lengths  u32 (n, 4): the length in characters of each fact's subject, relation, object, text
    alens    u32 (n,): the length in bytes of each fact's analysis (only with analyses)
    vectors  float32 (n, dims), row i for fact i (only with vectors)
    head     head_len bytes: JSON [embedder, template, filters, key_edges, device]
    strings  strings_len bytes: UTF-8 (lone surrogates kept) of every fact's subject, relation,
             object and text, in fact order, each as long as ``lengths`` says and followed by
             a NUL (a reader cuts at the NULs when no string holds one itself)
    analyses analyses_len bytes: each fact's analysis, one after another, each as long as
             ``alens`` says: UTF-8 of 7 fields, each followed by a NUL: flags ("0"-"3": 1 the
             relation is a known id, 2 inverse), subject key, object key, relation key, the
             negation cues and the words (each joined by spaces, the words sorted), and the
             quantities (compact JSON, empty when there are none). The other FactFeatures fields
             follow from these by the rules ``analyze`` uses (relation id, negated, symmetric,
             key), so they are made when read, not written.

Every field is checked when read (sizes against the item's length, UTF-8, character counts,
each analysis' fields and the JSON types of its quantities); anything else is a ValueError
naming what is wrong.
:func:`read_headers` reads the headers of many items (inside other bytes, a batch's shipped rows)
a column at a time; :func:`read_many` reads many items of one kind of work at once: their
lengths, strings and vectors are joined and cut with a few array operations (the strings decoded
once), the facts are deduplicated once, and only the kept facts' analyses are decoded (their
texts decoded and cut at once, a column at a time) and checked.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from factutil.filters.features import FactFeatures, fact_key, is_negated, is_symmetric

MAGIC = b"FUPF"
VERSION = 4
_HEADER = struct.Struct("<4sBBHIIIIII")
_VECTORS, _ANALYSES = 1, 2
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
            an analysis that :func:`analysis_text` cannot write).
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
        rows = [analysis_text(f).encode("utf-8", "surrogatepass") for f in analyses]
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
    """Items of one kind read together: the distinct facts (when deduplicated: sorted, or in
    order of first appearance)."""

    parts: tuple[tuple[str, str, str], ...]
    texts: tuple[str, ...]
    vectors: np.ndarray | None  # read-only float32 (n, dims)
    analyses: tuple[FactFeatures, ...] | None
    sources: int
    rows: list[int] | None = None  # with dedup: each fact of the items, in order, its row here


def read_many(items: Items | Sequence[Item], dedup: bool = True, sort: bool = True) -> Decoded:
    """Items of one kind (equal heads, all with or all without vectors of one width and
    analyses) as their facts: with ``dedup`` the distinct facts, sorted (``sort``) or in order of
    first appearance (a reader that finds each fact by its row needs no order, and sorting
    thousands of facts costs more than the rest of the deduplication), each fact's work from the
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
    chars = sizes - _in_each(ends, follow)
    if not np.array_equal(_per_item(lengths, counts, 4) + 4 * counts, chars):
        raise ValueError("strings are not as long as their lengths say")
    cuts = np.cumsum(lengths + 1)  # after each string's NUL, in characters
    nuls = np.flatnonzero(codes == 0)
    # each NUL's place in characters: its byte's, less the continuation bytes before it
    if np.array_equal(nuls - np.searchsorted(follow, nuls), cuts - 1):
        strings = text.split(_SEP)  # every NUL where the lengths say, and no other: cut at each
        strings.pop()
    else:  # a string that holds a NUL itself (or lengths that do not add up)
        cuts = cuts.tolist()
        strings = [text[start:end - 1] for start, end in zip([0, *cuts[:-1]], cuts)]
        if "".join([text[end - 1] for end in cuts]) != _SEP * len(cuts):
            raise ValueError("strings are not separated where their lengths say")
    parts = list(zip(strings[0::4], strings[1::4], strings[2::4]))
    texts = strings[3::4]
    if dedup:
        kept = list(dict.fromkeys(parts))
        if sort:
            kept.sort()
        rows = list(map(dict(zip(kept, range(len(kept)))).__getitem__, parts))
        # each kept fact's first appearance (the first one wins): kept fact r is the r-th
        # distinct value of rows
        picks = np.unique(np.asarray(rows, dtype=np.int64), return_index=True)[1].tolist()
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
        sizes = np.frombuffer(data, dtype="<u4", count=n, offset=item.alens).astype(np.int64)
        if int(sizes.sum()) != item.end - item.analyses_start:
            raise ValueError("analyses are not as long as their lengths say")
        analyses = _decode_analyses(parts, data[item.analyses_start:item.end], sizes)
    return Decoded(parts, tuple(strings[3::4]), vectors, analyses, item.sources)


def _in_each(ends: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """How many of ``positions`` (byte offsets, sorted) fall in each of the pieces laid end to end
    that end at ``ends`` (int64, one per piece)."""
    return np.bincount(np.searchsorted(ends, positions, side="right"),
                       minlength=len(ends) + 1)[:len(ends)]


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
    views = list(map(memoryview, items.datas))  # a row's slice is then not copied before the join
    datas = [views[i] for i in item_of[picks].tolist()]
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
    decoded together and checked."""
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
    raw = b"".join([data[a:b] for data, a, b in zip(datas, starts, stops)])
    return _decode_analyses(kept, raw, sizes[picked])


def analysis_text(f: FactFeatures) -> str:
    """One fact's analysis as the shipped form writes it (the module docstring's layout): the
    fields of ``f`` that the others do not determine.

    Raises:
        ValueError: ``f`` is not what :func:`~factutil.filters.analyze` makes (the written text
            would not read back as ``f``).
    """
    try:
        text = _SEP.join([
            _FLAG_TEXT[f.relation_id is not None, bool(f.inverse)], f.subject_key, f.object_key,
            f.relation_key, " ".join(f.negation_cues), " ".join(sorted(f.words)),
            _dumps(f.quantities) if f.quantities else "", ""])
        back = _features_of([(f.subject, f.relation, f.object)], text.split(_SEP)[:-1])[0]
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"an analysis that the shipped form cannot hold ({error})") from None
    if back != f:
        raise ValueError(f"an analysis that the shipped form cannot hold: {f!r:.200}")
    return text


_FIELDS = 7  # NUL-ended fields of one fact's analysis
_FLAG_TEXT = {(False, False): "0", (True, False): "1", (False, True): "2", (True, True): "3"}
_FLAGS = {text: flags for flags, text in _FLAG_TEXT.items()}  # "1" -> (known id, inverse)
_LIST = {list}


def _decode_analyses(kept: Sequence[tuple[str, str, str]], raw: bytes,
                     sizes: np.ndarray) -> tuple[FactFeatures, ...]:
    """The analyses of the facts ``kept`` from their written texts, one after another in ``raw``,
    each ``sizes[i]`` bytes: each must be UTF-8 of exactly :data:`_FIELDS` NUL-ended fields.

    Raises:
        ValueError: naming the first fact whose analysis is not so.
    """
    if not len(kept):
        return ()
    codes = np.frombuffer(raw, dtype=np.uint8)
    ends = np.cumsum(sizes)
    nuls = _in_each(ends, np.flatnonzero(codes == 0))
    bad = (nuls != _FIELDS) | (sizes == 0)
    bad[~bad] = codes[ends[~bad] - 1] != 0  # and each ends with its last field's NUL
    if bad.any():
        key = kept[int(np.flatnonzero(bad)[0])]
        raise ValueError(f"the analysis of {key!r:.80} is not {_FIELDS} NUL-ended fields")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise ValueError(f"analyses are not UTF-8 ({error})") from None
    fields = text.split(_SEP)
    fields.pop()  # after the last NUL
    return _features_of(kept, fields)


def _features_of(kept: Sequence[tuple[str, str, str]], fields: list[str]) -> tuple[FactFeatures, ...]:
    """Each fact's FactFeatures from its :data:`_FIELDS` written fields (``fields``, the facts one
    after another), the derived fields made by the rules :func:`~factutil.filters.analyze` uses,
    a column at a time; any fault is found again fact by fact to name the fact.

    Raises:
        ValueError: flags other than "0"-"3", a known relation id that is not in the lexicon, or
            quantities that are not a JSON list of lists of numbers and strings.
    """
    try:
        return _columns(kept, fields)
    except (KeyError, TypeError, ValueError):
        for i, key in enumerate(kept):
            try:
                _columns([key], fields[_FIELDS * i:_FIELDS * (i + 1)])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"the analysis of {key!r:.80} is not flags, keys, cues, words "
                                 f"and quantities as written") from None
        raise  # pragma: no cover - a fault of the columns is a fault of some fact


def _each(rule: Any, values: list[Any]) -> list[Any]:
    """``rule(v)`` for each of ``values`` (hashable), computed once per distinct value: facts
    share relations, cues, words and quantities."""
    found = {value: rule(value) for value in set(values)}
    return list(map(found.__getitem__, values))


def _cues(text: str) -> tuple[str, ...]:
    return tuple(text.split(" ")) if text else ()


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split(" ")) if text else frozenset()


def _quantities(text: str) -> tuple[tuple, ...]:
    """A fact's quantities from their written JSON ("": none).

    Raises:
        ValueError, TypeError: not a JSON list of lists of hashable values.
    """
    if not text:
        return ()
    value = json.loads(text)
    if type(value) is not list or not set(map(type, value)) <= _LIST:
        raise TypeError
    value = tuple(map(tuple, value))
    hash(value)  # a list or object inside a quantity raises TypeError
    return value


def _columns(kept: Sequence[tuple[str, str, str]], fields: list[str]) -> tuple[FactFeatures, ...]:
    flags, subject_keys, object_keys, relation_keys, cues, words, quantities = (
        fields[i::_FIELDS] for i in range(_FIELDS))
    known, inverses = zip(*map(_FLAGS.__getitem__, flags))
    relation_ids = [key if found else None for key, found in zip(relation_keys, known)]
    symmetrics = _each(is_symmetric, relation_ids)  # KeyError: an id outside the lexicon
    cues = _each(_cues, cues)
    negateds = _each(is_negated, cues)
    quantities = _each(_quantities, quantities)
    keys = list(map(fact_key, relation_keys, subject_keys, object_keys, negateds, quantities))
    subjects, relations, objects = zip(*kept)
    return tuple(map(FactFeatures, subjects, relations, objects, subject_keys, object_keys,
                     relation_ids, inverses, negateds, quantities, keys, relation_keys,
                     symmetrics, cues, _each(_words, words)))
