"""The filters' memo is an object its owner holds (FilterCache): same answers with and without it,
nothing kept at module level, one per clusterer."""

from __future__ import annotations

import inspect
import pickle
from collections import Counter
from itertools import product

import pytest

from factutil import FactUtilConfig
from factutil import filters as filters_package
from factutil.cluster import Fact, SemanticClusterer
from factutil.filters import (
    FILTERS,
    NO_MEMO,
    RELATION_BY_ID,
    FilterCache,
    analyze,
    entities,
    features,
    first_veto,
    lexicon,
    parts,
    quantities,
    relations,
    same_entity,
    text,
    vetoes,
)
from factutil.filters import cache as cache_module
from factutil.workers import make_work
from tests.conftest import CharGramEmbedder

TRIPLES = [
    ("Marie Curie", "was born in", "Warsaw, 7 November 1867"),
    ("Marie Curie", "born", "1867-11-07"),
    ("Ken Burns", "was not born in", "Brooklyn"),
    ("Ken Burns", "was born in", "Brooklyn"),
    ("John V", "father of", "John VI"),
    ("John VI", "father", "John V"),
    ("Armando Bó Jr.", "directed", "by Armando Bó"),
    ("Paris, Texas", "population", "about 25,000 people"),
    ("Paris", "area", "105 km²"),
    ("Route 66", "length", "2,448 miles"),
    ("Route 66", "length", "3940 km"),
    ("the episode", "is", "unaired"),
    ("the episode", "is", "aired"),
    ("Xi'an", "twinned administrative body", "Edinburgh"),
    ("Edinburgh", "twinned with", "Xi’an"),
    ("Łódź", "located in", "Poland"),
]


def test_analyze_is_the_same_with_a_cache_without_one_and_from_its_memo(monkeypatch):
    calls: Counter[str] = Counter()

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    for name in ("subject_part", "relation_part"):  # counted in the caches made from now on
        monkeypatch.setattr(parts, name, counted(name, getattr(parts, name)))
    cache = FilterCache()
    plain = [analyze(*t) for t in TRIPLES]
    assert [analyze(*t, cache=cache) for t in TRIPLES] == plain
    assert [analyze(*t, cache=cache) for t in TRIPLES] == plain  # now from the memo
    # 16 triples: 12 distinct subjects, 16 distinct (relation, object) pairs, each read once.
    assert calls == {"subject_part": len({t[0] for t in TRIPLES}),
                     "relation_part": len({t[1:] for t in TRIPLES})} == {"subject_part": 12,
                                                                         "relation_part": 16}


def test_every_veto_is_the_same_with_a_cache_in_either_order():
    cache = FilterCache()
    analysed = [analyze(*t) for t in TRIPLES]
    for a, b in product(analysed, repeat=2):
        for check in FILTERS.values():
            assert check(a, b, cache) == check(a, b), (a.subject, b.subject)
        assert first_veto(a, b, cache=cache) == first_veto(a, b) == first_veto(a, b, cache=NO_MEMO)
    assert cache.sizes()["pairs"] > 0


def test_relation_texts_are_compared_once_per_pair_through_the_cache():
    """"launched in" ~ "launch year": the stems {launch} are words of {launch, year}; "owns" and
    "married to" share no stem ({owns} vs {marri}). Each pair is worked out once per cache."""
    cache = FilterCache()
    for _ in range(3):
        assert cache.similar_text("launched in", "launch year") is True
        assert cache.similar_text("owns", "married to") is False
    assert cache.sizes() == {"texts": 0, "pairs": 2}
    assert text.similar_text("launched in", "launch year") is True
    assert NO_MEMO.similar_text("owns", "married to") is False


def test_the_last_alignment_is_kept_by_identity_in_the_cache_only():
    cache = FilterCache()
    a, b = analyze("Route 66", "length", "2,448 miles"), analyze("Route 66", "length", "3940 km")
    reason = first_veto(a, b, cache=cache)
    assert reason is not None and reason.startswith("numeric:")
    assert cache.last_align[0] is a and cache.last_align[1] is b
    first_veto(a, b)
    assert NO_MEMO.last_align == () and set(NO_MEMO.sizes().values()) == {0}


def test_same_entity_through_a_cache_recurses_through_it():
    cache = FilterCache()
    # A qualifier the other side holds: the heads are compared by a nested call ("paris" vs
    # "paris city texas", containment).
    assert same_entity("paris, texas", "paris city texas", cache) is True
    assert cache.sizes()["pairs"] == 1  # only the nested call went through the memo
    assert cache.same_entity("paris, texas", "paris city texas") is True
    assert cache.sizes()["pairs"] == 2
    assert same_entity("paris, france", "paris, texas") is False


def test_no_module_level_memo_on_data():
    """Only constant tables may be memoised at module level: pint's registry and the whitelisted
    units' factors."""
    allowed = {(quantities, "_unit_registry"), (quantities, "_pint_unit")}
    found = set()
    for module in (cache_module, entities, features, lexicon, parts, quantities, relations, text,
                   vetoes, filters_package):
        for name, value in vars(module).items():
            if callable(value) and hasattr(value, "cache_info") and \
                    inspect.getmodule(value) is module:
                found.add((module, name))
    assert found == allowed
    assert not hasattr(vetoes, "_LAST_ALIGN")
    assert not hasattr(filters_package, "clear_caches")


def test_common_relation_table_equals_the_walk_up_the_lineage():
    def reference(ra: str, rb: str):
        if ra == rb:
            return ra, False, False
        for ancestor, flip in vetoes._lineage(ra):
            if ancestor == rb:
                return rb, flip, False
        for ancestor, flip in vetoes._lineage(rb):
            if ancestor == ra:
                return ra, False, flip
        return None

    ids = sorted(RELATION_BY_ID)
    assert len(ids) > 100
    for ra, rb in product(ids, repeat=2):
        assert vetoes._common_relation(ra, rb) == reference(ra, rb)


def test_each_clusterer_owns_its_filter_cache():
    config = FactUtilConfig()
    facts = [[Fact(*t) for t in sorted(TRIPLES)]]
    first = SemanticClusterer(config, embedder=CharGramEmbedder())
    labels = first.cluster_batch(facts)[0].tolist()
    assert sum(first.filter_cache.sizes().values()) > 0
    second = SemanticClusterer(config, embedder=CharGramEmbedder())
    assert set(second.filter_cache.sizes().values()) == {0}
    assert second.filter_cache is not first.filter_cache
    assert second.cluster_batch(facts)[0].tolist() == labels


def test_worker_work_carries_plain_values_only():
    clusterer = SemanticClusterer(FactUtilConfig(), embedder=CharGramEmbedder())
    item = make_work(TRIPLES, clusterer=clusterer)
    data = pickle.dumps(item)
    for name in (b"FilterCache", b"functools", b"lru_cache", b"factutil"):
        assert name not in data
    assert pickle.loads(data)["parts"].tolist() == [[part.encode() for part in t]
                                                    for t in sorted(TRIPLES)]


@pytest.mark.parametrize("memo", [True, False])
def test_filter_cache_repr_and_sizes(memo):
    cache = FilterCache(memo=memo)
    analyze("Ada", "born in", "London", cache=cache)
    assert (sum(cache.sizes().values()) > 0) is memo
    assert repr(cache).startswith(f"FilterCache(memo={memo}, entries=")


def test_a_dropped_cache_is_freed_without_the_cycle_collector():
    import gc
    import weakref

    gc.disable()
    try:
        cache = FilterCache()
        analyze("Ada", "born in", "London", cache=cache)
        ref = weakref.ref(cache)
        del cache
        assert ref() is None
    finally:
        gc.enable()


def test_the_benchmarks_cachetools_memo_reads_every_helper_through_cachetools():
    """benchmarks/filter_cache.py's other form: each helper of the memo goes through one of two
    cachetools LRUs (pairs apart from texts), and the analyses are the shipped memo's."""
    from cachetools import LRUCache

    from benchmarks.filter_cache import memo

    shipped, other = memo("functools"), memo("cachetools")
    facts = [("Paris", "is the capital of", "France"), ("X", "is not", "a planet"),
             ("Marie Curie", "born in", "1867"), ("Paris", "capital of", "France")]
    assert [analyze(*f, cache=other) for f in facts] == [analyze(*f, cache=shipped) for f in facts]
    stores = {name: getattr(other, name).func for name in ("fold", "scan", "same_entity")}
    assert stores["fold"] is stores["scan"] and stores["fold"] is not stores["same_entity"]
    assert isinstance(stores["fold"].cache, LRUCache) and stores["fold"].cache.currsize > 0
    assert shipped.sizes()["texts"] > 0 and shipped.fold.func is shipped._texts
