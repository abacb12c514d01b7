"""Per-fact work done elsewhere (factutil.prepare): the batch step gives the same result bit for bit
with all, part or none of it given, in exact and semantic mode, from another process too."""

from __future__ import annotations

import logging
import multiprocessing
import pickle
from collections import OrderedDict

import numpy as np
import pytest
from pydantic import ValidationError

from benchmarks.workloads import build_workload
from factutil import FactUtilConfig, Rollout, compute_process_advantages
from factutil.cluster import (
    ExactClusterer,
    Fact,
    SemanticClusterer,
    fact_text,
    make_clusterer,
    representatives,
)
from factutil.filters import analyze
from factutil.prepare import PreparedFacts, merge_prepared, prepare_facts
from factutil.schema import Triple
from tests.conftest import CharGramEmbedder

# Metrics that describe the clusters (not the work done to find them).
CLUSTER_METRICS = ("cluster_facts", "cluster_edges", "cluster_key_edges", "clusters",
                   "clusters_per_group", "utility_mean", "utility_min", "utility_max",
                   "shaping_nonzero_share")


def _rollout(rollout_id: str, actions: list[dict]) -> dict:
    return {"uid": "q1", "question": "Where was Ada born?", "golden_answers": ["London"],
            "rollout_id": rollout_id, "actions": actions}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return build_workload("S")[:120]  # 20 groups of 6 rollouts


def _step(rows, config, prepared=None, embedder=None):
    clusterer = (make_clusterer(config) if config.mode == "exact"
                 else SemanticClusterer(config, embedder=embedder or CharGramEmbedder()))
    result = compute_process_advantages(rows, config, clusterer=clusterer, prepared=prepared)
    return result, clusterer


def _assert_same_step(a, b) -> None:
    assert a.advantages.dtype == np.float32 and np.array_equal(a.advantages, b.advantages)
    for name, column in a.action_columns.items():
        assert np.array_equal(column, b.action_columns[name]), name
    for name in CLUSTER_METRICS:
        assert a.metrics.get(name) == b.metrics.get(name), name
    assert [r.to_dict() for r in a.clusters] == [r.to_dict() for r in b.clusters]


def _all_facts(rows) -> set[tuple[str, str, str]]:
    return {tuple(t) for row in rows for action in row["actions"][:8]
            if action["action"] == "assert" for t in action["triples"]}


@pytest.mark.parametrize("mode", ["exact", "semantic"])
@pytest.mark.parametrize("share", ["all", "part", "none"])
def test_advantages_and_clusters_are_bit_identical_with_prepared_facts(rows, mode, share):
    config = FactUtilConfig(mode=mode)
    worker = CharGramEmbedder()  # the worker's own embedder object, same model
    given = {"all": rows, "part": rows[::3], "none": []}[share]
    prepared = [prepare_facts(row, config, embedder=worker) for row in given]
    plain, _ = _step(rows, config)
    with_work, _ = _step(rows, config, prepared)
    _assert_same_step(plain, with_work)
    found = with_work.metrics["cluster_prepared_facts"]
    facts = with_work.metrics["cluster_facts"]
    if share == "all":
        assert found == facts > 0
    elif share == "part":
        assert 0 < found < facts
    else:
        assert found == 0
    if mode == "semantic":
        # What the model still embedded: the batch's texts that no given rollout holds.
        given_texts = {fact_text(*key) for key in _all_facts(given)}
        batch_texts = {fact_text(*key) for key in _all_facts(rows)}
        assert with_work.metrics["cluster_cache_misses"] == len(batch_texts - given_texts)


def test_with_all_work_given_the_driver_neither_embeds_nor_analyses(rows, monkeypatch):
    config = FactUtilConfig()
    prepared = [prepare_facts(row, config, embedder=CharGramEmbedder()) for row in rows]
    plain, _ = _step(rows, config)

    class NoModel(CharGramEmbedder):
        def encode(self, texts):
            raise AssertionError(f"embedded {len(texts)} texts")

    def no_analysis(*parts, **kwargs):
        raise AssertionError(f"analysed {parts}")

    monkeypatch.setattr("factutil.filters.analyze", no_analysis)
    with_work, _ = _step(rows, config, prepared, embedder=NoModel())
    _assert_same_step(plain, with_work)
    assert with_work.metrics["cluster_cache_misses"] == 0


def test_cluster_labels_are_identical_with_and_without_prepared(rows):
    config = FactUtilConfig()
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(row["uid"], []).extend(
            Fact(*t) for a in row["actions"] if a["action"] == "assert" for t in a["triples"])
    facts = [representatives(triples)[1] for triples in groups.values()]
    plain = SemanticClusterer(config, embedder=CharGramEmbedder()).cluster_batch(facts)
    clusterer = SemanticClusterer(config, embedder=CharGramEmbedder())
    clusterer.add_prepared(merge_prepared(prepare_facts(row, config, embedder=CharGramEmbedder())
                                          for row in rows[: len(rows) // 2]))
    labels = clusterer.cluster_batch(facts)
    assert all(np.array_equal(x, y) for x, y in zip(plain, labels))
    assert clusterer.metrics["prepared_facts"] > 0


def test_work_for_another_embedder_is_ignored_with_one_warning_and_a_metric(rows, caplog):
    config = FactUtilConfig()

    class Other(CharGramEmbedder):
        name = "test:other-model"

    stale = [prepare_facts(row, config, embedder=Other()) for row in rows[:4]]
    other_template = prepare_facts(rows[5], config.model_copy(
        update={"triple_template": "{subject} {relation} {object}"}), embedder=CharGramEmbedder())
    plain, _ = _step(rows, config)
    with caplog.at_level(logging.WARNING, logger="factutil"):
        result, _ = _step(rows, config, [*stale, other_template])
    _assert_same_step(plain, result)
    assert result.metrics["cluster_prepared_ignored"] == 5
    assert result.metrics["cluster_prepared_facts"] == 0
    ignored = [w for w in result.warnings if "ignored" in w and "prepared" in w]
    assert len(ignored) == 1
    assert "4 with embedder 'test:other-model', the clusterer's is 'test:char-grams'" in ignored[0]
    assert "1 with template '{subject} {relation} {object}'" in ignored[0]
    assert sum("prepared fact set(s) ignored" in r.message for r in caplog.records) == 1


def test_work_for_other_filters_is_ignored():
    config = FactUtilConfig()
    no_analysis = config.model_copy(update={"filters": [], "key_edges": False})
    assert prepare_facts([("Ada", "born in", "London")], no_analysis, embedder=CharGramEmbedder()
                         ).analyses is None
    item = prepare_facts([("Ada", "born in", "London")], config.model_copy(update={"filters": []}),
                         embedder=CharGramEmbedder())
    clusterer = SemanticClusterer(config, embedder=CharGramEmbedder())
    clusterer.add_prepared(item, warn=lambda message: None)
    clusterer.cluster_batch([[Fact("Ada", "born in", "London")]])
    assert clusterer.metrics["prepared_ignored"] == 1
    assert clusterer.metrics["prepared_facts"] == 0


def test_every_input_form_gives_the_same_facts():
    config = FactUtilConfig(mode="exact")
    expected = (("Ada", "born in", "London"), ("Ada", "died in", "Marylebone"))
    actions = [
        {"action": "search", "query": "Ada Lovelace"},
        {"action": "assert", "triples": [["Ada", "died in", "Marylebone"], ["Ada", "born in", "London"]]},
        {"action": "assert", "triples": [["Ada", "born in", "London"]]},
        {"action": "answer", "answer": "London"},
        {"action": "assert", "triples": [["after", "the", "answer"]]},  # never read by the step
    ]
    forms = [
        [Triple(subject="Ada", relation="died in", object="Marylebone"),
         Triple(subject="Ada", relation="born in", object="London")],
        [Fact("Ada", "born in", "London"), Fact("Ada", "died in", "Marylebone")],
        [["Ada", "born in", "London"], ("Ada", "died in", "Marylebone")],
        _rollout("r0", actions),
        Rollout.model_validate(_rollout("r0", actions)),
        actions,
        [{"raw": "<assert>[[\"Ada\", \"born in\", \"London\"], [\"Ada\", \"died in\", "
                 "\"Marylebone\"]]</assert>"}],
    ]
    for form in forms:
        item = prepare_facts(form, config)
        assert item.parts == expected, form
        assert item.texts == ("ada | born in | london", "ada | died in | marylebone")
        assert item.vectors is None and item.analyses is None and item.embedder is None


def test_max_turns_bounds_the_actions_read():
    actions = [{"action": "assert", "triples": [[f"s{i}", "r", "o"]]} for i in range(4)]
    item = prepare_facts(actions, FactUtilConfig(mode="exact", max_turns=2))
    assert item.parts == (("s0", "r", "o"), ("s1", "r", "o"))


def test_semantic_work_holds_the_vectors_and_analyses_the_step_would_compute():
    embedder = CharGramEmbedder()
    facts = [("Ada", "born in", "London"), ("ada", "born in", "london"), ("Ada", "born in", "London")]
    item = prepare_facts(facts, FactUtilConfig(), embedder=embedder)
    assert item.parts == (("Ada", "born in", "London"), ("ada", "born in", "london"))
    assert item.texts == ("ada | born in | london",) * 2
    assert item.embedder == "test:char-grams"
    reference = CharGramEmbedder().encode(["ada | born in | london"])[0]
    assert item.vectors.dtype == np.float32 and item.vectors.shape == (2, 512)
    assert np.array_equal(item.vectors[0], reference) and np.array_equal(item.vectors[1], reference)
    assert not item.vectors.flags.writeable
    assert item.analyses == (analyze("Ada", "born in", "London"), analyze("ada", "born in", "london"))
    assert embedder.calls == [["ada | born in | london"]]  # one distinct text, embedded once


def test_a_clusterer_lends_its_embedder_and_cache():
    config = FactUtilConfig()
    clusterer = SemanticClusterer(config, embedder=CharGramEmbedder())
    prepare_facts([("Ada", "born in", "London")], config, clusterer=clusterer)
    prepare_facts([("Ada", "born in", "London")], clusterer=clusterer)
    assert clusterer.embedder.calls == [["ada | born in | london"]]
    assert clusterer.filter_cache.sizes()["subject_part"] == 1  # its filter memo was read too
    with pytest.raises(ValueError, match="sim_threshold|filters: clusterer"):
        prepare_facts([("a", "b", "c")], config.model_copy(update={"filters": []}),
                      clusterer=clusterer)
    with pytest.raises(ValueError, match="another embedder"):
        prepare_facts([("a", "b", "c")], config, clusterer=clusterer, embedder=CharGramEmbedder())


def test_an_exact_clusterer_means_exact_mode():
    item = prepare_facts([("Ada", "born in", "London")], clusterer=ExactClusterer())
    assert item.vectors is None and item.analyses is None and item.embedder is None
    assert item.texts == ("ada | born in | london",)


def test_pickle_and_bytes_round_trip():
    item = prepare_facts([("Ada", "born in", "12 June 1815"), ("Bob", "is not", "married")],
                         FactUtilConfig(), embedder=CharGramEmbedder())
    for copy in (pickle.loads(pickle.dumps(item)), PreparedFacts.from_bytes(item.to_bytes())):
        assert copy == item
        assert np.array_equal(copy.vectors, item.vectors) and copy.vectors.dtype == np.float32
        assert copy.analyses == item.analyses
        assert copy.analyses[0].quantities == analyze("Ada", "born in", "12 June 1815").quantities
        assert not copy.vectors.flags.writeable
    assert len(item.to_bytes()) < 2 * item.vectors.nbytes
    # Exact-mode work has no vectors and no analyses; it round-trips too.
    exact = prepare_facts([("a", "b", "c")], FactUtilConfig(mode="exact"))
    assert PreparedFacts.from_bytes(exact.to_bytes()) == exact


def test_from_bytes_refuses_other_pickles():
    with pytest.raises(ValueError, match="refused global collections.OrderedDict"):
        PreparedFacts.from_bytes(pickle.dumps(OrderedDict(a=1)))
    with pytest.raises(ValueError, match="got list, expected PreparedFacts"):
        PreparedFacts.from_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a PreparedFacts"):
        PreparedFacts.from_bytes(b"not a pickle")


def test_merge_is_the_sorted_union_and_refuses_mixed_configs():
    config = FactUtilConfig()
    embedder = CharGramEmbedder()
    a = prepare_facts([("b", "r", "o"), ("a", "r", "o")], config, embedder=embedder)
    b = prepare_facts([("c", "r", "o"), ("a", "r", "o")], config, embedder=embedder)
    merged = merge_prepared([b, a])
    assert merged == PreparedFacts.merge([a, b])
    assert merged == prepare_facts([("a", "r", "o"), ("b", "r", "o"), ("c", "r", "o")], config,
                                   embedder=embedder)
    exact = prepare_facts([("a", "r", "o")], FactUtilConfig(mode="exact"))
    with pytest.raises(ValueError, match=r"items\[1\]\.embedder is None, items\[0\]\.embedder is "
                                         r"'test:char-grams'"):
        merge_prepared([a, exact])
    with pytest.raises(ValueError, match="no PreparedFacts"):
        merge_prepared([])
    with pytest.raises(TypeError, match=r"items\[1\] is list"):
        merge_prepared([a, [1]])


@pytest.mark.parametrize(("facts", "message"), [
    ([("a", "b", "c"), ("a", "b")], r"facts\[1\]: a triple has 3 parts .*got 2"),
    ([("a", " ", "c")], r"facts\[0\]\.relation: relation must not be empty or whitespace, got ' '"),
    ([("a", "b", 7)], r"facts\[0\]\.object: Input should be a valid string \(got 7\)"),
    ([{"action": "assert", "triples": "x"}], r"facts\[0\]\.triples: .*\(got 'x'\)"),
    ([{"action": "jump"}], r"facts\[0\]: .*'jump'"),
    ({"uid": "q", "actions": [], "question": "?", "golden_answers": [], "rollout_id": "r"},
     r"golden_answers: .*at least 1"),
    ({"question": "?"}, r"a rollout dict needs `actions`"),
])
def test_bad_input_names_the_field_and_value(facts, message):
    with pytest.raises(ValueError, match=message):
        prepare_facts(facts, FactUtilConfig(mode="exact"))


def test_a_string_is_no_trajectory():
    with pytest.raises(TypeError, match=r"facts must be a rollout or an iterable .*got 'a \| b'"):
        prepare_facts("a | b", FactUtilConfig(mode="exact"))


def test_bad_config_and_bad_prepared_items():
    with pytest.raises(ValidationError, match="sim_threshold"):
        prepare_facts([], {"sim_threshold": 2.0})
    with pytest.raises(ValueError, match=r"vectors must be float32 \(1, d\), got float64"):
        PreparedFacts("m", "{subject}", (), False, (("a", "b", "c"),), ("a b c",),
                      np.zeros((1, 4)), None)
    with pytest.raises(ValueError, match="texts has 0 entries, expected 1"):
        PreparedFacts(None, "{subject}", (), False, (("a", "b", "c"),), (), None, None)
    clusterer = SemanticClusterer(FactUtilConfig(), embedder=CharGramEmbedder())
    with pytest.raises(TypeError, match=r"prepared\[1\] must be a PreparedFacts, got dict"):
        clusterer.add_prepared([prepare_facts([], FactUtilConfig()), {"parts": []}])


def _prepare_in_worker(rows: list[dict]) -> bytes:
    """Runs in a spawned process: one torch thread, its own MiniLM."""
    import torch

    torch.set_num_threads(1)
    from factutil import FactUtilConfig
    from factutil.embed import SentenceTransformerEmbedder
    from factutil.prepare import prepare_facts
    from factutil.prepare import PreparedFacts, merge_prepared, prepare_facts

    embedder = SentenceTransformerEmbedder(device="cpu")
    return merge_prepared(prepare_facts(row, FactUtilConfig(), embedder=embedder)
                          for row in rows).to_bytes()


@pytest.mark.slow
def test_work_from_a_spawned_one_thread_worker_equals_the_driver_with_minilm(minilm):
    import torch

    rows = build_workload("S")[:12]  # 2 groups: the model's start-up in a new process dominates
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        shipped = PreparedFacts.from_bytes(pool.apply(_prepare_in_worker, (rows,)))
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        config = FactUtilConfig()
        local = merge_prepared(prepare_facts(row, config, embedder=minilm) for row in rows)
        assert shipped.embedder == minilm.name
        assert np.array_equal(shipped.vectors, local.vectors)  # bit for bit, 1 vs 2+ threads
        assert shipped == local
        plain, _ = _step(rows, config, embedder=minilm)
        with_work, _ = _step(rows, config, shipped, embedder=minilm)
    finally:
        torch.set_num_threads(threads)
    _assert_same_step(plain, with_work)
    assert with_work.metrics["cluster_prepared_facts"] == with_work.metrics["cluster_facts"]
