"""Which config fields change clusters: one mark on each (factutil.config.CLUSTERS), from which
the clusterer check and worker work's fit are derived; and a clusterer shared by threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from factutil.cluster import Fact, SemanticClusterer
from factutil.config import CLUSTERS, FactUtilConfig, clustering_fields
from factutil.embed import config_embedder
from factutil.workers import fit_key

from .conftest import CharGramEmbedder

SEMANTIC = FactUtilConfig(mode="semantic")

OTHER_VALUES = {  # per field, a valid value other than the default
    "preset": "paper", "max_turns": 9, "group_size": 6, "facts": "retrieved", "layouts": ("search_r1",),
    "mode": "exact",
    "triple_template": "{relation}: {subject} -> {object}", "embedding_model": "other-model",
    "sim_threshold": 0.8, "sim_decimals": 3, "filters": ("negation",), "key_edges": False,
    "embedding_backend": "static", "embedding_device": "cpu", "embedding_batch_size": 8,
    "knn_min_size": 100, "knn_k": 5, "hnsw_m": 8, "hnsw_ef": 32, "hnsw_seed": 1,
    "cache_max_entries": 5, "cache_max_bytes": 1024, "success": "f1", "epsilon": 1.0,
    "prior": "beta", "utility": "loo", "uniform_groups": "zero", "gamma": 0.9, "alpha": 0.3,
    "invalid_penalty": -0.2, "repeat_search_penalty": -0.02, "empty_store_answer_penalty": -0.2,
    "omega": 1.0, "norm_by_std": False, "norm_eps": 1e-5, "process_norm": "none",
    "pause_gc": False, "report_every": 5, "prepare_in_workers": True, "score_early": False,
    "prepared_device": "same", "fold_unicode": True,
}
# Fields that change a clusterer's speed or its vectors' last bits only: the embedder's name
# (its rows per pass) and a work item's device say what they change.
SPEED_ONLY = {"cache_max_entries", "cache_max_bytes", "embedding_device", "embedding_batch_size"}


def _marked() -> set[str]:
    return {name for name, field in FactUtilConfig.model_fields.items()
            if field.json_schema_extra == CLUSTERS}


def test_changing_a_field_changes_the_fit_exactly_when_it_is_marked():
    assert OTHER_VALUES.keys() == FactUtilConfig.model_fields.keys()  # a new field: decide here
    base = fit_key(SEMANTIC, "model")
    changed = set()
    for name, value in OTHER_VALUES.items():
        config = FactUtilConfig.model_validate({**SEMANTIC.model_dump(), name: value})
        assert getattr(config, name) != getattr(SEMANTIC, name), name
        if fit_key(config, "model") != base:
            changed.add(name)
    assert changed == _marked()
    assert _marked() == {"mode", "triple_template", "embedding_model", "embedding_backend",
                         "sim_threshold", "sim_decimals", "filters", "key_edges",
                         "knn_min_size", "knn_k", "hnsw_m", "hnsw_ef", "hnsw_seed"}


def test_in_exact_mode_only_the_mode_makes_the_fit():
    exact = FactUtilConfig(mode="exact")
    assert clustering_fields(exact) == {"mode": "exact"}
    assert clustering_fields(exact.model_copy(update={"sim_threshold": 0.5})) == {"mode": "exact"}


class _Recording:
    """A config that records each field read from it."""

    def __init__(self, config: FactUtilConfig):
        self._config = config
        self.read: set[str] = set()

    def __getattr__(self, name: str):
        if name in FactUtilConfig.model_fields:
            self.read.add(name)
        return getattr(self._config, name)


def test_the_marked_fields_are_what_the_clustering_reads_beyond_speed():
    """Every field the embedder's construction and a clusterer's work read is marked or changes
    speed only, and every marked semantic field is read (k-NN groups included)."""
    config = _Recording(SEMANTIC.model_copy(update={"knn_min_size": 2}))
    config_embedder(config)
    clusterer = SemanticClusterer(config, embedder=CharGramEmbedder())
    facts = [Fact("Ada", "born in", "London"), Fact("Ada", "was born in", "London"),
             Fact("Ada", "born in", "Paris"), Fact("Ada", "not born in", "London")]
    clusterer.cluster_batch([facts, facts[:2]])
    assert config.read - SPEED_ONLY == _marked() - {"mode"}


def test_a_clusterer_for_another_config_is_refused_naming_the_field():
    from factutil import compute_process_advantages

    row = {"uid": "q", "question": "?", "golden_answers": ["a"], "rollout_id": "r",
           "actions": [{"action": "answer", "answer": "a"}]}
    clusterer = SemanticClusterer(SEMANTIC, embedder=CharGramEmbedder())
    with pytest.raises(ValueError, match=r"sim_threshold: clusterer 0\.9, config 0\.8"):
        compute_process_advantages([row], SEMANTIC.model_copy(update={"sim_threshold": 0.8}),
                                   clusterer=clusterer)
    # a field that changes speed only is no reason
    compute_process_advantages([row], SEMANTIC.model_copy(update={"cache_max_entries": 5}),
                               clusterer=clusterer)


# --- one clusterer, two threads ----------------------------------------------------------------


class _SlowCharGrams(CharGramEmbedder):
    """Char-gram vectors, slowly: two threads' calls would overlap."""

    def encode(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.05)
        return super().encode(texts)


def _groups(offset: int) -> list[list[Fact]]:
    return [[Fact(f"Entity {offset + k}", "born in", f"City {c}") for c in range(k + 2)]
            for k in range(4)]


def test_threads_sharing_a_clusterer_each_get_their_own_metrics():
    config = SEMANTIC
    batches = [_groups(0), _groups(100)]
    alone = [SemanticClusterer(config, embedder=CharGramEmbedder()).cluster(batch)
             for batch in batches]
    shared = SemanticClusterer(config, embedder=_SlowCharGrams())
    out: dict[int, tuple] = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, shared.cluster(batches[k])))
               for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for k in range(2):
        labels, metrics = out[k]
        assert [x.tolist() for x in labels] == [x.tolist() for x in alone[k][0]]
        counts = {name: value for name, value in metrics.items() if not name.startswith("time_")}
        expected = {name: value for name, value in alone[k][1].items()
                    if not name.startswith("time_") and name != "cache_entries"}
        assert {name: counts[name] for name in expected} == expected


def test_threads_sharing_an_embedder_load_its_model_once(monkeypatch):
    import sentence_transformers

    from factutil.embed import SentenceTransformerEmbedder

    loads: list[int] = []

    class Model:
        max_seq_length = 256

        def __init__(self, *args, **kwargs):
            time.sleep(0.2)  # long enough for the other thread to ask meanwhile
            loads.append(1)

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", Model)
    embedder = SentenceTransformerEmbedder(device="cpu")
    threads = [threading.Thread(target=lambda: embedder.max_tokens) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(loads) == 1
