"""SemanticClusterer.add_prepared's bulk path and EmbeddingCache.put_many: the same memo, cache,
order, serials and evictions as one insert per fact."""

from __future__ import annotations

import numpy as np
import pytest

from factutil import FactUtilConfig
from factutil.cluster import SemanticClusterer
from factutil.embed import EmbeddingCache
from factutil.filters import analyze
from factutil.prepare import PreparedFacts
from tests.conftest import CharGramEmbedder

PARTS = sorted([("Ada", "born in", "London"), ("Bob", "weighs", "80 kg"), ("Cy", "is not", "here"),
                ("Di", "born on", "1 May 1900"), ("Ed", "lives in", "Rome")])


def _item(parts=PARTS, analyses=True) -> PreparedFacts:
    texts = tuple(" | ".join(key).casefold() for key in parts)
    vectors = np.arange(len(parts) * 3, dtype=np.float32).reshape(len(parts), 3)
    features = tuple(analyze(*key) for key in parts) if analyses else None
    embedder = CharGramEmbedder()
    return PreparedFacts(embedder.name, "{subject} | {relation} | {object}",
                         tuple(FactUtilConfig().filters), True, tuple(parts), texts, vectors,
                         features)


def _clusterer(**config) -> SemanticClusterer:
    return SemanticClusterer(FactUtilConfig(**config), embedder=CharGramEmbedder())


def test_put_many_equals_put_one_by_one_with_evictions_and_repeated_texts():
    texts = ["a", "b", "a", "c", "d", "e"]
    vectors = np.arange(18, dtype=np.float32).reshape(6, 3)
    for bounds in ({}, {"max_entries": 3}, {"max_bytes": 2 * 12}, {"max_entries": 0},
                   {"max_bytes": 8}):
        one, many = EmbeddingCache(**bounds), EmbeddingCache(**bounds)
        one.put("old", "z", np.ones(3))
        many.put("old", "z", np.ones(3))
        for text, row in zip(texts, vectors):
            one.put("m", text, row)
        many.put_many("m", texts, vectors)
        assert list(one._store) == list(many._store) and one.nbytes == many.nbytes
        for key, row in one._store.items():
            assert np.array_equal(row, many._store[key]) and not many._store[key].flags.writeable
    # by hand: "a" is put again after "b", so the order is b, a, c, d, e; 3 entries keep c, d, e
    cache = EmbeddingCache(max_entries=3)
    cache.put_many("m", texts, vectors)
    assert list(cache._store) == [("m", "c"), ("m", "d"), ("m", "e")]
    assert cache.nbytes == 3 * 12
    vectors[3] = -1  # the cache holds copies
    assert cache.get("m", "c").tolist() == [9.0, 10.0, 11.0]
    with pytest.raises(ValueError, match=r"put_many: vectors \(6, 3\) for 2 texts"):
        cache.put_many("m", ["a", "b"], vectors)


def test_add_prepared_records_every_fact_in_order_with_fresh_serials():
    item = _item()
    clusterer = _clusterer()
    clusterer.add_prepared(item)
    expected = [(key, (text, analyze(*key), hash(analyze(*key).key), serial))
                for serial, (key, text) in enumerate(zip(PARTS, item.texts))]
    assert [(key, tuple(record)) for key, record in clusterer._records.items()] == expected
    name = clusterer.embedder.name
    found = clusterer.cache.get_many(name, list(item.texts))
    assert [row.tolist() for row in found] == item.vectors.tolist()
    assert clusterer._prepared == set(PARTS)


def test_add_prepared_fills_a_record_without_analysis_in_place_and_keeps_the_others():
    clusterer = _clusterer()
    clusterer.add_prepared(_item(PARTS[:2]))
    first = dict(clusterer._records)
    # a record without analysis (made where none was needed) is replaced where it stands
    clusterer._records[PARTS[0]] = clusterer._records[PARTS[0]]._replace(features=None)
    clusterer.add_prepared(_item())
    keys = list(clusterer._records)
    assert keys == PARTS  # PARTS[0] kept its place at the front
    assert clusterer._records[PARTS[0]].serial == 2  # the next serial after 0 and 1
    assert clusterer._records[PARTS[1]] == first[PARTS[1]]  # untouched
    assert [clusterer._records[key].serial for key in PARTS[2:]] == [3, 4, 5]


def test_add_prepared_past_the_memo_bound_keeps_the_most_recent_facts():
    clusterer = _clusterer(cache_max_entries=3)
    clusterer.add_prepared(_item())
    assert list(clusterer._records) == PARTS[2:]
    assert [record.serial for record in clusterer._records.values()] == [2, 3, 4]
    name = clusterer.embedder.name
    assert len(clusterer.cache) == 3 and clusterer.cache.get(name, _item().texts[0]) is None
