"""Shipped per-fact work: the device kind its vectors were made on (config ``prepared_device``) and
reading many items at once (:func:`factutil.prepare.load_prepared`)."""

from __future__ import annotations

import gc
import logging
import pickle

import numpy as np
import pytest
from pydantic import ValidationError

import factutil.prepare as prepare_module
from factutil import FactUtilConfig, compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.embed import SentenceTransformerEmbedder, StaticEmbedder, device_type
from factutil.prepare import PreparedFacts, load_prepared, merge_prepared, prepare_facts
from tests.conftest import CharGramEmbedder

BORN = ["Ada", "born in", "London"]
FIELD = ["Ada", "field", "mathematics"]
FATHER = ["Ada", "father", "Byron"]


class CudaGrams(CharGramEmbedder):
    """The same model on a GPU: every vector one float step away from the CPU's (as rounding on
    another device moves it)."""

    device = "cuda:0"

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = super().encode(texts)
        vectors[:, 0] = np.nextafter(vectors[:, 0], np.float32(2))
        return vectors


class CpuGrams(CharGramEmbedder):
    device = "cpu"


def _rollout(rollout_id: str, triples: list[list[str]], answer: str) -> dict:
    return {"uid": "q1", "question": "Who was Ada?", "golden_answers": ["London"],
            "rollout_id": rollout_id,
            "actions": [{"action": "assert", "triples": triples},
                        {"action": "answer", "answer": answer}]}


ROWS = [_rollout("a", [BORN, FIELD], "London"), _rollout("b", [BORN, FATHER], "Paris")]


def _step(config: FactUtilConfig, driver, prepared=None):
    clusterer = SemanticClusterer(config, embedder=driver)
    result = compute_process_advantages(ROWS, config, clusterer=clusterer, prepared=prepared)
    return result, clusterer


def test_device_type_is_the_kind_without_index_and_cpu_without_a_device():
    assert device_type(CudaGrams()) == "cuda"
    assert device_type(CharGramEmbedder()) == "cpu"  # no device attribute
    assert device_type(SentenceTransformerEmbedder(device="cuda:1")) == "cuda"
    assert device_type(SentenceTransformerEmbedder(device="mps")) == "mps"
    assert device_type(StaticEmbedder("unused-folder")) == "cpu"


def test_prepared_work_records_its_device_and_keeps_it_through_bytes():
    config = FactUtilConfig()
    on_gpu = prepare_facts(ROWS[0], config, embedder=CudaGrams())
    assert on_gpu.device == "cuda" and on_gpu.sources == 1
    assert prepare_facts(ROWS[0], config, embedder=CharGramEmbedder()).device == "cpu"
    back = PreparedFacts.from_bytes(on_gpu.to_bytes())
    assert back == on_gpu and back.device == "cuda"
    # exact mode has no vectors: "cpu" by definition
    assert prepare_facts(ROWS[0], FactUtilConfig(mode="exact")).device == "cpu"
    with pytest.raises(ValueError, match="device must be a device kind .* got 'cuda:0'"):
        PreparedFacts(None, "t", (), False, (), (), None, None, "cuda:0")
    with pytest.raises(ValueError, match="sources must be an int >= 1, got 0"):
        PreparedFacts(None, "t", (), False, (), (), None, None, "cpu", 0)


def test_bytes_of_format_1_without_a_device_read_as_cpu():
    item = prepare_facts(ROWS[0], FactUtilConfig(), embedder=CudaGrams())
    analyses = tuple(tuple(getattr(f, name) for name in prepare_module._ANALYSIS_FIELDS)
                     for f in item.analyses)

    class Version1:  # what to_bytes wrote before the device was recorded
        def __reduce__(self):
            return prepare_module._restore, (
                1, (item.embedder, item.template, item.filters, item.key_edges), item.parts,
                item.texts, (item.vectors.shape[1], item.vectors.tobytes()), analyses)

    old = PreparedFacts.from_bytes(pickle.dumps(Version1(), protocol=5))
    assert old.device == "cpu" and old.sources == 1
    assert np.array_equal(old.vectors, item.vectors) and old.analyses == item.analyses
    assert old != item  # the device differs, nothing else

    class Version3:
        def __reduce__(self):
            return prepare_module._restore, (3, (), (), (), None, None)

    with pytest.raises(ValueError, match="unknown format version 3"):
        PreparedFacts.from_bytes(pickle.dumps(Version3(), protocol=5))


def test_any_device_uses_a_workers_gpu_vectors_with_one_warning_and_a_metric(caplog):
    config = FactUtilConfig()
    assert config.prepared_device == "any"
    gpu = prepare_facts(ROWS[0], config, embedder=CudaGrams())  # BORN, FIELD
    cpu = prepare_facts(ROWS[1], config, embedder=CpuGrams())  # BORN, FATHER
    with caplog.at_level(logging.WARNING, logger="factutil"):
        result, clusterer = _step(config, CharGramEmbedder(), [gpu, cpu])
    # the group's 3 distinct facts; BORN and FIELD were given by the GPU item
    assert result.metrics["cluster_prepared_facts"] == 3
    assert result.metrics["cluster_prepared_other_device"] == 2
    assert result.metrics["cluster_prepared_ignored"] == 0
    assert result.metrics["cluster_cache_misses"] == 0  # nothing embedded here
    text = gpu.texts[gpu.parts.index(tuple(FIELD))]
    assert np.array_equal(clusterer.cache.get(clusterer.embedder.name, text),
                          CudaGrams().encode([text])[0])  # the worker's vector was used
    device_warnings = [w for w in result.warnings if "another kind of device" in w]
    assert device_warnings == [w for w in result.warnings if "prepared" in w]
    assert len(device_warnings) == 1
    assert "1 prepared fact set(s) embedded on another kind of device than this step's " \
           "embedder (cpu): 1 on cuda" in device_warnings[0]
    assert sum("another kind of device" in r.message for r in caplog.records) == 1

    # a driver on the GPU: the CPU item is the other kind (its 2 facts, BORN and FATHER)
    on_gpu, _ = _step(config, CudaGrams(), [gpu, cpu])
    assert on_gpu.metrics["cluster_prepared_other_device"] == 2
    assert [w for w in on_gpu.warnings if "1 on cpu" in w]


def test_same_device_ignores_other_kinds_and_is_bit_identical_to_doing_it_all():
    config = FactUtilConfig(prepared_device="same")
    gpu = prepare_facts(ROWS[0], config, embedder=CudaGrams())
    cpu = prepare_facts(ROWS[1], config, embedder=CpuGrams())
    plain, _ = _step(config, CharGramEmbedder())
    result, clusterer = _step(config, CharGramEmbedder(), [gpu, cpu])
    assert result.advantages.tobytes() == plain.advantages.tobytes()
    for name, column in plain.action_columns.items():
        assert np.array_equal(column, result.action_columns[name]), name
    assert result.metrics["cluster_prepared_ignored"] == 1  # the GPU item
    assert result.metrics["cluster_prepared_facts"] == 2  # BORN, FATHER from the CPU item
    assert result.metrics["cluster_prepared_other_device"] == 0
    assert result.metrics["cluster_cache_misses"] == 1  # FIELD, embedded here
    text = gpu.texts[gpu.parts.index(tuple(FIELD))]
    assert np.array_equal(clusterer.cache.get(clusterer.embedder.name, text),
                          CharGramEmbedder().encode([text])[0])
    ignored = [w for w in result.warnings if "ignored" in w]
    assert len(ignored) == 1 and "1 with device 'cuda', the clusterer's is 'cpu'" in ignored[0]
    assert not [w for w in result.warnings if "another kind of device" in w]


def test_prepared_device_is_checked():
    with pytest.raises(ValidationError, match="prepared_device"):
        FactUtilConfig(prepared_device="cuda")


def test_merge_refuses_mixed_devices():
    config = FactUtilConfig()
    with pytest.raises(ValueError, match="items\\[1\\].device is 'cpu', items\\[0\\].device is "
                                         "'cuda'"):
        merge_prepared([prepare_facts(ROWS[0], config, embedder=CudaGrams()),
                        prepare_facts(ROWS[1], config, embedder=CharGramEmbedder())])


def test_load_prepared_merges_bytes_and_items_skipping_none():
    config = FactUtilConfig()
    embedder = CharGramEmbedder()
    items = [prepare_facts([BORN, FIELD], config, embedder=embedder),
             prepare_facts([BORN, FATHER], config, embedder=embedder),
             prepare_facts([FATHER], config, embedder=embedder)]
    loaded = load_prepared([items[0].to_bytes(), None, items[1], items[2].to_bytes()])
    assert len(loaded) == 1
    (merged,) = loaded
    # the union, sorted by parts, each fact's work as prepare_facts gives it alone
    alone = prepare_facts([BORN, FIELD, FATHER], config, embedder=embedder)
    assert merged == alone == merge_prepared(items)
    assert merged.parts == (tuple(BORN), tuple(FATHER), tuple(FIELD))  # "born" < "father" < "field"
    assert merged.sources == 3 and merge_prepared(items[::-1]) == merged
    assert load_prepared([]) == [] and load_prepared([None, None]) == []


def test_load_prepared_keeps_one_item_per_kind_and_a_clusterer_counts_its_sources():
    config = FactUtilConfig()

    class Other(CharGramEmbedder):
        name = "test:other-model"

    mine = [prepare_facts(row, config, embedder=CharGramEmbedder()) for row in ROWS]
    foreign = [prepare_facts(row, config, embedder=Other()) for row in ROWS + ROWS[:1]]
    gpu = prepare_facts(ROWS[1], config, embedder=CudaGrams())
    data = [item.to_bytes() for item in (foreign[0], mine[0], gpu, foreign[1], mine[1],
                                         foreign[2])]
    loaded = load_prepared(data)
    assert [(item.embedder, item.device, item.sources) for item in loaded] == [
        ("test:other-model", "cpu", 3), ("test:char-grams", "cpu", 2),
        ("test:char-grams", "cuda", 1)]
    result, _ = _step(config, CharGramEmbedder(), loaded)
    assert result.metrics["cluster_prepared_ignored"] == 3  # the 3 foreign items, merged in 1
    assert result.metrics["cluster_prepared_facts"] == 3
    assert result.metrics["cluster_prepared_other_device"] == 2  # the GPU item: BORN, FATHER
    assert [w for w in result.warnings if "3 with embedder 'test:other-model'" in w]


def test_load_prepared_reports_or_raises_on_unreadable_items():
    good = prepare_facts([BORN], FactUtilConfig(), embedder=CharGramEmbedder()).to_bytes()
    with pytest.raises(ValueError, match=r"load_prepared: items\[1\]: not a PreparedFacts"):
        load_prepared([good, b"junk", good])
    with pytest.raises(ValueError, match=r"items\[0\]: not a PreparedFacts \(got dict"):
        load_prepared([pickle.dumps({"parts": []})])
    unreadable: list[int] = []
    loaded = load_prepared([b"junk", good, None, good[:-5]], unreadable=unreadable)
    assert unreadable == [0, 3] and len(loaded) == 1 and loaded[0].sources == 1
    with pytest.raises(TypeError, match=r"items\[0\] is int, expected bytes"):
        load_prepared([3])


def test_load_prepared_reads_with_the_collector_paused(monkeypatch):
    seen = []
    read = prepare_module.shipped.read_header

    def spy(data):
        seen.append(gc.isenabled())
        return read(data)

    monkeypatch.setattr(prepare_module.shipped, "read_header", spy)
    good = prepare_facts([BORN], FactUtilConfig(), embedder=CharGramEmbedder()).to_bytes()
    assert gc.isenabled()
    load_prepared([good, good])
    assert seen == [False, False] and gc.isenabled()
    load_prepared([good], pause_gc=False)
    assert seen[-1] is True
