"""The shipped form of PreparedFacts (factutil.prepared_bytes): its layout, round trips of awkward
values, refusal of corrupted, truncated and foreign bytes (a ValueError, never another exception,
never code run), the older pickled form still read, and load_prepared's bulk read equal to
reading the items one by one and merging them."""

from __future__ import annotations

import json
import os
import pickle
import struct
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factutil import FactUtilConfig, prepared_bytes
from factutil import prepare as prepare_module
from factutil.filters import analyze
from factutil.prepare import PreparedFacts, load_prepared, merge_prepared, prepare_facts
from tests.conftest import CharGramEmbedder

TEMPLATE = "{subject} | {relation} | {object}"
FILTERS = ("negation", "numeric", "relation", "entity")
PARTS = [("Ada Lovelace", "born on", "10 December 1815"),
         ("Ada\x00x", "is not", "married"),  # a NUL inside a part
         ("Caf\u00e9 \ud800", "located in", "Paris \U0001F600")]  # a lone surrogate, an emoji


def _item(parts=PARTS, dims=4, analyses=True, sources=1, seed=0) -> PreparedFacts:
    """A PreparedFacts built by hand (no embedder): vectors of small width, a function of the
    text and the seed alone, as a fact's work depends on the fact alone."""
    parts = sorted(parts)
    texts = tuple(" | ".join(key).casefold() for key in parts)
    vectors = None
    if dims is not None:
        vectors = np.array([np.random.default_rng([seed, *text.encode("utf-8", "surrogatepass")])
                            .standard_normal(dims) for text in texts], dtype=np.float32)
        vectors = vectors.reshape(len(parts), dims)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # unit rows, as an embedder's
    features = tuple(analyze(*key) for key in parts) if analyses else None
    return PreparedFacts("test:model" if dims is not None else None, TEMPLATE, FILTERS, True,
                         tuple(parts), texts, vectors, features, "cpu", sources)


def test_the_bytes_follow_the_documented_layout():
    item = _item(dims=3)
    data = item.to_bytes()
    header = struct.Struct("<4sBBHIIIIII")
    magic, version, flags, zero, n, dims, sources, head_len, strings_len, analyses_len = \
        header.unpack_from(data)
    assert (magic, version, flags, zero, n, dims, sources) == (b"FUPF", 4, 3, 0, 3, 3, 1)
    at = header.size
    lengths = np.frombuffer(data[at:at + 16 * n], dtype="<u4").reshape(n, 4)
    expected = [[len(s) for s in (*key, text)] for key, text in zip(item.parts, item.texts)]
    assert lengths.tolist() == expected
    at += 16 * n
    alens = np.frombuffer(data[at:at + 4 * n], dtype="<u4")
    at += 4 * n
    assert data[at:at + 4 * n * dims] == item.vectors.astype("<f4").tobytes()
    at += 4 * n * dims
    assert json.loads(data[at:at + head_len]) == ["test:model", TEMPLATE, list(FILTERS), True, "cpu"]
    at += head_len
    strings = data[at:at + strings_len].decode("utf-8", "surrogatepass")
    assert strings == "".join(s + "\x00" for key, text in zip(item.parts, item.texts)
                              for s in (*key, text))
    at += strings_len
    written = data[at:at + analyses_len].decode("utf-8", "surrogatepass")
    for f, size in zip(item.analyses, alens.tolist()):  # the layout: 7 fields, each NUL-ended
        flag = str(int(f.relation_id is not None) + 2 * int(f.inverse))
        quantities = json.dumps(f.quantities, separators=(",", ":")) if f.quantities else ""
        fields = [flag, f.subject_key, f.object_key, f.relation_key, " ".join(f.negation_cues),
                  " ".join(sorted(f.words)), quantities]
        assert written[:size] == "".join(field + "\x00" for field in fields)
        written = written[size:]
    # every field is written somewhere: a date, a negation cue, a known relation
    assert all(any(getattr(f, name) for f in item.analyses)
               for name in ("quantities", "negation_cues", "relation_id", "words"))
    assert at + analyses_len == len(data) and int(alens.sum()) == analyses_len


@pytest.mark.parametrize("item", [
    _item(), _item(dims=None), _item(analyses=False), _item(parts=[]), _item(sources=7),
    _item(parts=[("a", "b", "c")], dims=None, analyses=False),
], ids=["semantic", "no-vectors", "no-analyses", "no-facts", "merged", "exact"])
def test_round_trip_keeps_every_field(item):
    back = PreparedFacts.from_bytes(item.to_bytes())
    assert back == item and back.sources == item.sources and back.device == item.device
    if item.vectors is not None:
        assert back.vectors.dtype == np.float32 and not back.vectors.flags.writeable
        assert back.vectors.tobytes() == item.vectors.tobytes()
    if item.analyses is not None:
        for mine, theirs in zip(back.analyses, item.analyses):
            assert mine == theirs and hash(mine.key) == hash(theirs.key)
            assert type(mine.quantities) is tuple and type(mine.words) is frozenset
    assert pickle.loads(pickle.dumps(item)) == item


def test_work_made_by_prepare_facts_round_trips():
    item = prepare_facts([("Ada", "born in", "12 June 1815"), ("Bob", "weighs", "80 kg"),
                          ("Bob", "is not", "married")], FactUtilConfig(), embedder=CharGramEmbedder())
    assert PreparedFacts.from_bytes(item.to_bytes()) == item
    assert load_prepared([item.to_bytes()]) == [item]


def test_every_truncation_is_a_value_error():
    data = _item().to_bytes()
    for size in range(len(data)):
        with pytest.raises(ValueError, match="PreparedFacts.from_bytes: "):
            PreparedFacts.from_bytes(data[:size])
    with pytest.raises(ValueError, match="bytes, the header says"):
        PreparedFacts.from_bytes(data + b"\x00")


def test_every_flipped_byte_is_read_or_refused_with_a_value_error_alone_and_in_bulk():
    good = _item(seed=1).to_bytes()
    other = _item(parts=[("Bob", "is", "here")], seed=2)
    data = _item().to_bytes()
    refused = 0
    for position in range(len(data)):
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        flipped = bytes(flipped)
        try:
            alone = PreparedFacts.from_bytes(flipped)
        except ValueError:
            alone = None
            refused += 1
        unreadable: list[int] = []
        loaded = load_prepared([other.to_bytes(), flipped, good], unreadable=unreadable)
        if alone is None:
            assert unreadable == [1]
            assert loaded == load_prepared([other.to_bytes(), good])
        else:  # a flip in a vector, a character or a number still makes an item
            assert unreadable == []
            readable = [PreparedFacts.from_bytes(d) for d in (other.to_bytes(), flipped, good)]
            kinds = {item._head() for item in readable}
            if len(kinds) == 1 and len({item.vectors.shape[1] for item in readable}) == 1:
                assert loaded == [merge_prepared(readable)]
    assert refused > len(data) // 2  # the header, lengths, separators, JSON: most flips


def _with_analysis(item: PreparedFacts, **fields) -> PreparedFacts:
    """``item`` with its first analysis' fields replaced."""
    return replace(item, analyses=(replace(item.analyses[0], **fields), *item.analyses[1:]))


@pytest.mark.parametrize("fields", [
    {"inverse": "yes"}, {"relation_id": 3}, {"quantities": (("s", "num", [1.0]),)},
    {"quantities": ("num",)}, {"key": ("r", "s", "o", False)}, {"words": frozenset({1})},
    {"negation_cues": ("not", None)}, {"subject_key": None},
    # values of the right types that analyze never makes: they would not read back as written
    {"negated": False}, {"symmetric": True}, {"relation_key": "other"}, {"subject_key": "a\x00b"},
    {"words": frozenset({"two words"})}, {"negation_cues": ("not", "")},
])
def test_an_analysis_the_form_cannot_hold_is_refused_when_written(fields):
    with pytest.raises(ValueError, match="an analysis that the shipped form cannot hold"):
        _with_analysis(_item(), **fields).to_bytes()


def _written(item: PreparedFacts, monkeypatch, text: str) -> bytes:
    """The bytes of ``item`` with its first analysis written as ``text`` (a forged one)."""
    real, first = prepared_bytes.analysis_text, item.analyses[0]
    monkeypatch.setattr(prepared_bytes, "analysis_text",
                        lambda f: text if f is first else real(f))
    data = item.to_bytes()
    monkeypatch.setattr(prepared_bytes, "analysis_text", real)
    return data


@pytest.mark.parametrize("text", [
    "7\0ada x\0married\0be\0not\0is married not\0\0",  # flags beyond 1 | 2
    "1\0ada x\0married\0no such id\0not\0is married not\0\0",  # a known id outside the lexicon
    "1\0ada x\0married\0be\0not\0is married not\0[1\0",  # quantities that are not JSON
    '1\0ada x\0married\0be\0not\0is married not\0[["s","num",[1.0]]]\0',  # a list inside one
    '1\0ada x\0married\0be\0not\0is married not\0["num"]\0',  # not a list of lists
    '1\0ada x\0married\0be\0not\0is married not\0{"s":1}\0',
    "1\0ada x\0married\0be\0not\0is married not\0",  # six fields
    "1\0ada x\0married\0be\0not\0is\0married\0\0",  # eight
    "1\0ada x\0married\0be\0not\0is married not\0x",  # the last field without its NUL
    "",
], ids=["flags", "unknown-id", "json", "nested", "flat", "object", "six", "eight", "no-nul",
        "empty"])
def test_a_forged_analysis_is_a_value_error_naming_its_fact(text, monkeypatch):
    item = _item()
    assert item.analyses[0].subject == "Ada\x00x"
    good = "1\0ada x\0married\0be\0not\0is married not\0\0"
    assert PreparedFacts.from_bytes(_written(item, monkeypatch, good)) == item  # as analyze wrote it
    data = _written(item, monkeypatch, text)
    with pytest.raises(ValueError, match=r"the analysis of \('Ada\\x00x', 'is not', 'married'\) is not"):
        PreparedFacts.from_bytes(data)
    unreadable: list[int] = []
    assert load_prepared([data, item.to_bytes()], unreadable=unreadable) == [item]
    assert unreadable == [0]


def test_quantities_that_are_json_only_when_joined_are_refused(monkeypatch):
    """Each fact's quantities are read alone: two halves that make JSON together (one array of
    both) are a forged analysis, not the first fact's quantities and none for the second."""
    item = _item()
    first, second = item.analyses[:2]
    real = prepared_bytes.analysis_text

    def halves(f):
        fields = real(f).split("\0")
        if f is first or f is second:
            fields[6] = '[["o","num",1.0]' if f is first else '["o","num",2.0]]'
        return "\0".join(fields)

    monkeypatch.setattr(prepared_bytes, "analysis_text", halves)
    data = item.to_bytes()
    monkeypatch.setattr(prepared_bytes, "analysis_text", real)
    with pytest.raises(ValueError, match=r"the analysis of \('Ada\\x00x', 'is not', 'married'\)"):
        PreparedFacts.from_bytes(data)
    headers = [prepared_bytes.read_header(data), prepared_bytes.read_header(item.to_bytes())]
    with pytest.raises(ValueError, match="is not flags, keys"):
        prepared_bytes.read_many(headers, dedup=False)


def test_foreign_and_forged_bytes_are_value_errors():
    data = _item().to_bytes()
    header = struct.Struct("<4sBBHIIIIII")
    fields = list(header.unpack_from(data))

    def forged(**changes) -> bytes:
        names = ["magic", "version", "flags", "zero", "n", "dims", "sources", "head_len",
                 "strings_len", "analyses_len"]
        values = [changes.get(name, value) for name, value in zip(names, fields)]
        return header.pack(*values) + data[header.size:]

    cases = {
        "unknown format version 9": forged(version=9),
        "unknown flags": forged(flags=7),
        "sources 0": forged(sources=0),
        "the header says": forged(n=fields[4] + 1),
        "shorter than the 32-byte header": b"FUPF",
        "not a pickle|not a PreparedFacts": b"\x80\x05junk",
    }
    for message, bad in cases.items():
        with pytest.raises(ValueError, match=message):
            PreparedFacts.from_bytes(bad)
    # a head that is not [embedder, template, filters, key_edges, device]
    head_at = header.size + 20 * fields[4] + 4 * fields[4] * fields[5]
    head = data[head_at:head_at + fields[7]]
    swapped = head.replace(b"true", b"1   ")
    with pytest.raises(ValueError, match="head key_edges 1 is not a bool"):
        PreparedFacts.from_bytes(data.replace(head, swapped))
    with pytest.raises(ValueError, match="device must be a device kind"):
        PreparedFacts.from_bytes(data.replace(b'"cpu"', b'"c:0"'))


class _Runs:
    def __reduce__(self):
        return os.system, ("touch factutil-pwned",)


def test_a_pickle_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="refused global"):
        PreparedFacts.from_bytes(pickle.dumps(_Runs(), protocol=5))
    assert load_prepared([pickle.dumps(_Runs())], unreadable=[]) == []
    assert not (tmp_path / "factutil-pwned").exists()


def _version_2(item: PreparedFacts) -> bytes:
    """What ``to_bytes`` wrote before this form: a pickle of the restore function's arguments."""
    analyses = tuple(tuple(getattr(f, name) for name in prepare_module._ANALYSIS_FIELDS)
                     for f in item.analyses)

    class Version2:
        def __reduce__(self):
            return prepare_module._restore, (
                2, item._head(), item.parts, item.texts,
                (item.vectors.shape[1], item.vectors.tobytes()), analyses, item.sources)

    return pickle.dumps(Version2(), protocol=5)


def test_the_older_pickled_form_is_still_read_and_merges_with_the_new_one():
    items = [_item(seed=0), _item(parts=[("Bob", "is", "here"), PARTS[0]], seed=0),
             _item(parts=[("Bob", "is", "here")], seed=0, sources=2)]
    assert PreparedFacts.from_bytes(_version_2(items[0])) == items[0]
    shipped = [_version_2(items[0]), items[1].to_bytes(), items[2]]
    (loaded,) = load_prepared(shipped)
    assert loaded == merge_prepared(items) and loaded.sources == 4
    assert loaded.parts == tuple(sorted({*PARTS, ("Bob", "is", "here")}))


def test_bulk_read_equals_reading_one_by_one_and_merging():
    config = FactUtilConfig()
    embedder = CharGramEmbedder()
    facts = [("Ada", "born in", "London"), ("Ada", "born in", "london"), ("Bob", "weighs", "80 kg"),
             ("Bob", "is not", "married"), ("Cy", "born on", "1 May 1900"), ("Ada", "is", "Ada")]
    items = [prepare_facts(facts[i:i + 3], config, embedder=embedder) for i in range(4)]
    data = [item.to_bytes() for item in items]
    (bulk,) = load_prepared([data[2], None, data[0], data[3], data[1]])
    one_by_one = merge_prepared([PreparedFacts.from_bytes(d) for d in data])
    assert bulk == one_by_one == prepare_facts(facts, config, embedder=embedder)
    assert bulk.sources == 4 and not bulk.vectors.flags.writeable
    assert [hash(f.key) for f in bulk.analyses] == [hash(analyze(*key).key) for key in bulk.parts]


@pytest.mark.parametrize("layout", [(2, 0), (0, 2), (2, 0, 0), (0, 2, 0), (0, 0)])
def test_items_without_facts_anywhere_are_read_together(layout):
    """Items with no fact first, between or last: read in one bulk pass (no fallback), each
    item's facts where they are (a trailing empty item once cut its neighbour's strings short)."""
    from factutil import prepared_bytes

    items = [_item(parts=PARTS[:n], seed=k) for k, n in enumerate(layout)]
    headers = [prepared_bytes.read_header(item.to_bytes()) for item in items]
    decoded = prepared_bytes.read_many(headers, dedup=False)
    assert decoded.parts == tuple(p for item in items for p in item.parts)
    assert decoded.texts == tuple(t for item in items for t in item.texts)
    bulk = prepared_bytes.read_many(headers)
    assert bulk.parts == tuple(sorted({p for item in items for p in item.parts}))


def test_headers_read_at_once_agree_with_read_header_on_every_flip_and_cut():
    """read_headers (a column at a time, items inside one joined buffer) keeps exactly the
    items read_header keeps, with the same offsets, and refuses the others with its message."""
    from factutil import prepared_bytes

    before, after = _item(seed=1).to_bytes(), _item(parts=PARTS[:1], seed=2).to_bytes()
    data = _item().to_bytes()
    variants = [data[:size] for size in range(0, len(data), 3)] + [data + b"\x00"]
    for position in range(min(len(data), 200)):  # the header, lengths, vectors, head
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        variants.append(bytes(flipped))
    for offset, fmt, value in [(16, "<I", 0), (12, "<I", 0), (6, "<H", 1), (5, "<B", 0), (5, "<B", 2),
                               (5, "<B", 7), (4, "<B", 2), (0, "<4s", b"FUPX")]:
        forged = bytearray(data)  # sources 0, the zero field set, flags without vectors, ...
        struct.pack_into(fmt, forged, offset, value)
        variants.append(bytes(forged))
    # n and dims whose sections' size is 2**64: a wrapped int64 would make the sizes add up
    head_len = struct.unpack_from("<I", data, 20)[0]
    wrapped = bytearray(data)
    struct.pack_into("<BBHIIIIII", wrapped, 4, 3, 1, 0, 2**31, 2**31 - 4, 1, head_len,
                     len(data) - 32 - head_len, 0)
    variants.append(bytes(wrapped))
    for middle in variants:
        joined = before + middle + after
        starts = np.array([0, len(before), len(before) + len(middle)])
        ends = np.array([len(before), len(before) + len(middle), len(joined)])
        items, errors = prepared_bytes.read_headers([joined] * 3, starts, ends)
        expected, messages = [], {}
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            try:
                expected.append(prepared_bytes.read_header(joined, start, end))
            except ValueError as error:
                messages[i] = str(error)
        assert errors == messages
        assert [items.item(i) for i in range(len(items.n))] == expected


def test_items_read_at_once_equal_each_read_alone():
    """read_many over items inside one buffer (offsets not at 0) equals reading each item's own
    bytes: parts, texts, vectors and analyses, in order and deduplicated."""
    from factutil import prepared_bytes

    items = [_item(parts=PARTS[:n], seed=n) for n in (3, 0, 1, 2)]
    datas = [b"padding" * k + item.to_bytes() for k, item in enumerate(items)]
    joined = b"".join(datas)
    ends = np.cumsum([len(d) for d in datas])
    starts = ends - [len(item.to_bytes()) for item in items]
    table, errors = prepared_bytes.read_headers([joined] * len(items), starts, ends)
    assert errors == {}
    every = prepared_bytes.read_many(table, dedup=False)
    assert every.parts == tuple(p for item in items for p in item.parts)
    assert every.texts == tuple(t for item in items for t in item.texts)
    assert np.array_equal(every.vectors, np.concatenate([item.vectors for item in items]))
    assert every.analyses == tuple(a for item in items for a in item.analyses)
    distinct = prepared_bytes.read_many(table)
    merged = merge_prepared(items)
    assert distinct.parts == merged.parts and distinct.analyses == merged.analyses
    assert np.array_equal(distinct.vectors, merged.vectors)
    assert [distinct.parts[row] for row in distinct.rows] == list(every.parts)


def test_items_read_unsorted_keep_first_appearance_and_its_work():
    """read_many(sort=False): the distinct facts in the order they first appear, each with the
    work of the item it first appears in (its vector differs by seed), rows pointing at them;
    sorted, the same facts and work in parts order."""
    from factutil import prepared_bytes

    p0, p1, p2 = PARTS  # sorted: p1 ("Ada\x00x") < p0 ("Ada Lovelace") < p2
    a, b, c = _item(parts=[p2], seed=5), _item(parts=PARTS, seed=3), _item(parts=[p0], seed=1)
    assert b.parts == (p1, p0, p2)  # each item's own facts are sorted
    headers = [prepared_bytes.read_header(item.to_bytes()) for item in (a, b, c)]
    first = prepared_bytes.read_many(headers, sort=False)
    assert first.parts == (p2, p1, p0)
    assert first.rows == [0, 1, 2, 0, 2]  # a: p2; b: p1, p0, p2; c: p0
    assert np.array_equal(first.vectors, np.stack([a.vectors[0], b.vectors[0], b.vectors[1]]))
    assert first.analyses == (a.analyses[0], b.analyses[0], b.analyses[1])
    assert first.texts == (a.texts[0], b.texts[0], b.texts[1])
    ordered = prepared_bytes.read_many(headers)
    assert ordered.parts == (p1, p0, p2) and ordered.rows == [2, 0, 1, 2, 1]
    assert np.array_equal(ordered.vectors, first.vectors[[1, 2, 0]])


_PIECES = ["not", "never", "unmarried", "non-profit", "born in", "born on", "located in", "of",
           "12 June 1816", "March 1990", "5 kg", "1,000", "two", "3rd", "1990s", "John V", "no",
           "False", "Paris, Texas", "São Paulo", "Łódź", "x\x00y", "\ud800", "married to",
           "spouse", "directed by", "won't", "100 km/h", "-7.5", "1e999", "half"]
_part = st.one_of(st.text(max_size=12),
                  st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map(" ".join))


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.tuples(_part, _part, _part), min_size=1, max_size=6))
def test_every_analysis_analyze_makes_is_written_and_read_back_as_it_was(parts):
    """The form writes only the fields the others do not determine: whatever analyze makes of
    any text (numbers, dates, negations, odd characters) reads back equal, alone and in bulk."""
    item = _item(parts=list(dict.fromkeys(parts)), dims=None)
    back = PreparedFacts.from_bytes(item.to_bytes())
    assert back.analyses == item.analyses
    assert [hash(f.key) for f in back.analyses] == [hash(f.key) for f in item.analyses]
    assert load_prepared([item.to_bytes(), item.to_bytes()]) == [item]
