"""Per-fact work made in a "worker" (factutil.workers) and used by the step: the same advantages,
bit for bit, as the step computing everything; work that does not fit or cannot be read is
ignored and counted, and never makes score_batch raise."""

from __future__ import annotations

import io
import json
import pickle
import random
import zipfile

import numpy as np
import pytest

from factutil import compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.config import FactUtilConfig
from factutil.filters import analyze
from factutil.integration import score_batch
from factutil.io import read_rollouts
from factutil.load import rollout_row
from factutil.workers import FactWork, clustering_fit, fit_key, make_work, triples_of

from .conftest import CharGramEmbedder

SAMPLE = "examples/data/2wiki_rollouts.jsonl"
SEMANTIC = FactUtilConfig(mode="semantic")
EXACT = FactUtilConfig(mode="exact")


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [rollout_row(rollout) for _, rollout in read_rollouts(SAMPLE)]


def _clusterer(config: FactUtilConfig = SEMANTIC) -> SemanticClusterer:
    return SemanticClusterer(config, embedder=CharGramEmbedder())


def _shares(rows: list[dict], workers: int) -> list[list[dict]]:
    """Each worker's share of the rollouts, as a trainer deals them out."""
    return [rows[k::workers] for k in range(workers)]


def _step(rows, config=SEMANTIC, clusterer=None, work=None):
    clusterer = clusterer if clusterer is not None else _clusterer(config)
    return compute_process_advantages(rows, config, clusterer=clusterer, work=work)


def test_work_made_in_workers_gives_the_advantages_of_the_step_alone(rows):
    alone = _step(rows)
    worker = _clusterer()  # one per worker process; the driver's is another
    work = [make_work(share, SEMANTIC, worker) for share in _shares(rows, 2)]
    given = _step(rows, work=work)
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    for name, column in alone.action_columns.items():
        assert given.action_columns[name].tobytes() == column.tobytes(), name
    facts = alone.metrics["cluster_facts"]
    assert given.metrics["cluster_work_facts"] == facts > 0
    assert given.metrics["cluster_cache_misses"] == 0  # the model embedded nothing
    assert alone.metrics["cluster_cache_misses"] > 0
    assert given.metrics["cluster_work_ignored"] == given.metrics["cluster_work_unreadable"] == 0


def test_work_for_some_facts_only_is_completed_by_the_step(rows):
    alone = _step(rows)
    half = make_work(rows[: len(rows) // 2], SEMANTIC, _clusterer())
    given = _step(rows, work=[half, None])
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    assert 0 < given.metrics["cluster_work_facts"] < given.metrics["cluster_facts"]
    assert given.metrics["cluster_cache_misses"] > 0


def test_work_as_bytes_gives_the_same_advantages(rows):
    alone = _step(rows)
    work = make_work(rows, SEMANTIC, _clusterer())
    given = _step(rows, work=work.to_bytes())
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    assert given.metrics["cluster_work_facts"] == alone.metrics["cluster_facts"]


@pytest.mark.parametrize("seed", [0, 1])
def test_results_with_work_do_not_depend_on_order_or_on_the_rest_of_the_batch(rows, seed):
    work = [make_work(share, SEMANTIC, _clusterer()) for share in _shares(rows, 3)]
    first = _step(rows, work=work)
    shuffled_rows, shuffled_work = rows[:], work[:]
    random.Random(seed).shuffle(shuffled_rows)
    random.Random(seed).shuffle(shuffled_work)
    again = _step(shuffled_rows, work=shuffled_work)
    by_key = again.per_rollout("advantage")
    for key, values in first.per_rollout("advantage").items():
        assert by_key[key].tobytes() == values.tobytes()
    # one group alone, given the whole batch's work, scores as in the batch
    uid = rows[0]["uid"]
    group = [row for row in rows if row["uid"] == uid]
    alone = _step(group, work=work).per_rollout("advantage")
    for key, values in alone.items():
        assert by_key[key].tobytes() == values.tobytes()


def test_work_for_another_config_is_ignored_and_counted(rows, caplog):
    alone = _step(rows)
    other = SEMANTIC.model_copy(update={"sim_threshold": 0.8})
    foreign = make_work(rows, other, SemanticClusterer(other, embedder=CharGramEmbedder()))
    fitting = make_work(rows[:3], SEMANTIC, _clusterer())
    with caplog.at_level("WARNING", logger="factutil"):
        given = _step(rows, work=[foreign, fitting, foreign])
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    assert given.metrics["cluster_work_ignored"] == 2
    assert 0 < given.metrics["cluster_work_facts"] < given.metrics["cluster_facts"]
    (message,) = [w for w in given.warnings if "ignored" in w]
    assert "2 work item(s) ignored, made for another clustering config" in message
    assert foreign.fit in message and fitting.fit in message


def test_work_of_another_embedder_name_is_ignored():
    """The embedder's name (its pass shapes included) is part of the fit."""
    worker = _clusterer()
    work = make_work([["Ada", "born in", "London"]], SEMANTIC, worker)
    driver = _clusterer()
    driver.embedder.name = "test:char-grams [rows 8]"
    driver.add_work(work)
    driver.cluster_batch([[]])
    assert driver.metrics["work_ignored"] == 1


def test_the_fit_names_version_mode_and_every_clustering_field():
    fit = dict(clustering_fit(SEMANTIC, "model"))
    assert list(fit)[:2] == ["version", "mode"] and fit["embedder"] == "model"
    assert fit["filters"] == ("negation", "numeric", "relation", "entity")
    assert {"triple_template", "key_edges", "sim_threshold", "hnsw_seed"} <= set(fit)
    assert dict(clustering_fit(EXACT)).keys() == {"version", "mode"}
    # fields that change speed only are not in it
    assert clustering_fit(SEMANTIC.model_copy(update={"cache_max_entries": 5})) == \
        clustering_fit(SEMANTIC)
    # work carries the version and a digest of the whole fit
    key = fit_key(clustering_fit(SEMANTIC, "model"))
    assert key.startswith(fit["version"] + ":") and len(key) == len(fit["version"]) + 17
    for other in (clustering_fit(SEMANTIC, "another model"),
                  clustering_fit(SEMANTIC.model_copy(update={"sim_threshold": 0.8}), "model"),
                  clustering_fit(SEMANTIC.model_copy(update={"filters": ["negation"]}), "model")):
        assert fit_key(other) != key


def test_work_holds_each_distinct_fact_once_sorted_with_its_analysis():
    triples = [["b", "born in", "London"], ["a", "born in", "Paris"], ["b", "born in", "London"]]
    work = make_work(triples, SEMANTIC, _clusterer())
    assert work.parts == [("a", "born in", "Paris"), ("b", "born in", "London")]
    assert work.vectors.shape == (2, 512) and work.vectors.dtype == np.float32
    texts = ["a | born in | paris", "b | born in | london"]
    assert work.vectors.tobytes() == CharGramEmbedder().encode(texts).tobytes()
    assert work.features() == [analyze(*parts) for parts in work.parts]
    exact = make_work(triples, EXACT)
    assert exact.vectors is None and exact.analyses is None and len(exact) == 2


def test_triples_of_reads_rollouts_action_lists_and_triples_within_max_turns(rows):
    actions = [{"action": "assert", "triples": [["a", "r", "o"]]},
               {"action": "answer", "answer": "x"},
               {"action": "assert", "triples": [["after", "the", "answer"]]}]
    assert triples_of(actions, 8) == [("a", "r", "o")]
    assert triples_of([actions, [["t", "r", "o"]]], 8) == [("a", "r", "o"), ("t", "r", "o")]
    assert triples_of(actions, 0) == []
    assert triples_of([rows[0]], 8) == triples_of(rows[0], 8)
    with pytest.raises(ValueError, match=r"items\[1\]"):
        triples_of([["a", "r", "o"], ["", "r", "o"]], 8)
    with pytest.raises(TypeError, match="must be rollouts, actions or triples"):
        triples_of("a text", 8)


def test_pickling_work_round_trips_with_the_vectors_out_of_band(rows):
    work = make_work(rows, SEMANTIC, _clusterer())
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(work, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == work.vectors.nbytes
    assert len(data) < work.vectors.nbytes  # the vectors are not in the pickle's bytes
    back = pickle.loads(data, buffers=buffers)
    assert back.vectors.tobytes() == work.vectors.tobytes()
    assert (back.fit, back.parts, back.analyses) == (work.fit, work.parts, work.analyses)


def test_work_as_the_mapping_of_its_fields_is_taken(rows):
    """msgpack channels (verl's TransferQueue) give a dataclass back as the mapping of its
    fields; the step takes that as the work itself."""
    alone = _step(rows)
    work = make_work(rows, SEMANTIC, _clusterer())
    fields = {name: getattr(work, name) for name in
              ("fit", "device", "subjects", "relations", "objects", "vectors", "analyses")}
    given = _step(rows, work=[fields, {**fields, "extra": 1}])
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    assert given.metrics["cluster_work_facts"] == alone.metrics["cluster_facts"]
    assert given.metrics["cluster_work_unreadable"] == 1  # an unknown field


def test_work_of_the_wrong_type_is_unreadable_never_allocated(rows):
    """An int is no work (bytes(10**12) would allocate a terabyte) and a single mapping is one
    item, not its keys: each is counted unreadable, its facts computed here, same advantages."""
    alone = _step(rows)
    for work in (10**12, {"fit": "x"}):
        given = _step(rows, work=work)
        assert given.advantages.tobytes() == alone.advantages.tobytes()
        assert given.metrics["cluster_work_unreadable"] == 1
    assert any("not a FactWork, fields or bytes: int 1000000000000" in warning
               for warning in _step(rows, work=10**12).warnings)


def test_a_config_that_is_no_mapping_is_a_type_error_naming_it(rows):
    """The step and make_work read a config through one rule (factutil.config.as_config)."""
    for config, shown in (("config.yaml", "str 'config.yaml'"), (0.5, "float 0.5")):
        for call in (compute_process_advantages, make_work):
            with pytest.raises(TypeError) as caught:
                call(rows, config)
            assert str(caught.value) == ("config must be a FactUtilConfig or a mapping of its "
                                         f"fields, got {shown}")


def test_bytes_round_trip(rows):
    work = make_work(rows, SEMANTIC, _clusterer())
    back = FactWork.from_bytes(work.to_bytes())
    assert back.vectors.tobytes() == work.vectors.tobytes()
    assert (back.fit, back.device, back.parts, back.analyses) == (
        work.fit, work.device, work.parts, work.analyses)
    assert back.features() == work.features()


# --- crafted work: one test per form -----------------------------------------------------------


def _npz(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _arrays(work: FactWork) -> dict:
    with np.load(io.BytesIO(work.to_bytes())) as npz:
        return {name: npz[name] for name in npz.files}


def _crafted(form: str, work: FactWork) -> bytes:
    data = work.to_bytes()
    if form == "truncated":
        return data[: len(data) // 2]
    if form == "flipped byte":
        # a byte inside the vectors' data: the zip's CRC-32 no longer agrees
        flipped = bytearray(data)
        flipped[data.index(b"vectors.npy") + 400] ^= 0x40
        return bytes(flipped)
    arrays = _arrays(work)
    if form == "wrong sizes":
        arrays["objects"] = arrays["objects"][:-1]
        return _npz(arrays)
    if form == "wrong vector width":
        arrays["vectors"] = arrays["vectors"][:, :-1] * 2
        return _npz(arrays)
    if form == "not unit vectors":
        arrays["vectors"][0] = np.inf
        return _npz(arrays)
    if form == "deep nesting":  # JSON nested past the parser's recursion limit
        arrays["head"] = np.array("[" * 100_000 + "]" * 100_000)
        return _npz(arrays)
    if form == "deep quantity":
        head = json.loads(str(arrays["head"]))
        head["analyses"][0][7] = [[[["deep"]]]]
        arrays["head"] = np.array(json.dumps(head))
        return _npz(arrays)
    if form == "huge declared length":
        return _forged_header(arrays)
    raise AssertionError(form)


def _forged_header(arrays: dict) -> bytes:
    """An .npz whose vectors member declares 10**12 rows in its .npy header (its data as it was)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, array)
            raw = member.getvalue()
            if name == "vectors":
                header = {"descr": "<f4", "fortran_order": False,
                          "shape": (10**12, array.shape[1])}
                out = io.BytesIO()
                np.lib.format.write_array_header_1_0(out, header)
                raw = out.getvalue() + raw[len(raw) - array.nbytes:]
            archive.writestr(f"{name}.npy", raw)
    return buffer.getvalue()


FORMS = ["truncated", "flipped byte", "wrong sizes", "wrong vector width", "not unit vectors",
         "deep nesting", "deep quantity", "huge declared length"]


@pytest.mark.parametrize("form", FORMS)
def test_crafted_work_is_refused_by_from_bytes_with_a_reason(rows, form):
    work = make_work(rows[:6], SEMANTIC, _clusterer())
    with pytest.raises(ValueError, match="not a FactWork's bytes"):
        FactWork.from_bytes(_crafted(form, work))


@pytest.mark.parametrize("form", FORMS)
def test_crafted_work_costs_score_batch_nothing_but_time(rows, form):
    """score_batch returns, nothing raises, no group falls back, and the values are the step's
    without work; the item is counted unreadable."""
    work = make_work(rows[:6], SEMANTIC, _clusterer())
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["uid"], []).append(row)
    plain = _step(rows)
    good = make_work(rows[6:], SEMANTIC, _clusterer())
    batch = score_batch(list(groups), groups.__getitem__, SEMANTIC, clusterer=_clusterer(),
                        work=[_crafted(form, work), good, None])
    assert batch.error is None and batch.fallback == {}
    assert batch.result.advantages.tobytes() == plain.advantages.tobytes()
    assert batch.result.metrics["cluster_work_unreadable"] == 1
    assert (batch.shipped, batch.unshipped) == (2, 1)


def test_a_crafted_work_object_is_ignored_too(rows):
    """Work objects come from the trainer's own workers, but one whose analyses or vectors are
    not what they should be is ignored as unreadable bytes are."""
    work = make_work(rows[:6], SEMANTIC, _clusterer())
    bad_analysis = FactWork(work.fit, work.device, work.subjects, work.relations, work.objects,
                            work.vectors, [["x"]] * len(work))
    bad_vectors = FactWork(work.fit, work.device, work.subjects, work.relations, work.objects,
                           work.vectors * 3, work.analyses)
    plain = _step(rows)
    given = _step(rows, work=[bad_analysis, bad_vectors, "text", 42])
    assert given.advantages.tobytes() == plain.advantages.tobytes()
    assert given.metrics["cluster_work_unreadable"] == 4


def test_inconsistent_fields_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="objects has 0 entries, subjects 1"):
        FactWork("fit", "cpu", ["a"], ["r"], [], None, None)
    with pytest.raises(ValueError, match=r"vectors must be float32 \(1, d\), got float64"):
        FactWork("fit", "cpu", ["a"], ["r"], ["o"], np.ones((1, 2)), None)


def test_work_from_another_kind_of_device_is_used_or_ignored_as_the_config_says(rows):
    """prepared_device='any' uses a worker GPU's vectors (counted, one warning); 'same' ignores
    them, so the step is bit-identical to doing it all."""
    work = make_work(rows, SEMANTIC, _clusterer())
    moved = FactWork(work.fit, "cuda", work.subjects, work.relations, work.objects,
                     work.vectors, work.analyses)
    used = _step(rows, work=moved)
    assert used.metrics["cluster_work_other_device"] == used.metrics["cluster_facts"]
    assert any("another kind of device" in w for w in used.warnings)
    same = SEMANTIC.model_copy(update={"prepared_device": "same"})
    ignored = _step(rows, config=same, work=moved)
    assert ignored.metrics["cluster_work_ignored"] == 1
    assert ignored.metrics["cluster_work_other_device"] == 0


def test_an_exact_step_ignores_work_and_says_so(rows):
    work = make_work(rows, EXACT)
    plain = compute_process_advantages(rows, EXACT)
    given = compute_process_advantages(rows, EXACT, work=[work, None])
    assert given.advantages.tobytes() == plain.advantages.tobytes()
    assert given.metrics["cluster_work_ignored"] == 1
    assert any("ExactClusterer takes none" in w for w in given.warnings)


@pytest.mark.slow
def test_minilm_work_from_a_worker_gives_the_same_advantages(rows, minilm):
    alone = compute_process_advantages(rows, SEMANTIC,
                                       clusterer=SemanticClusterer(SEMANTIC, embedder=minilm))
    worker = SemanticClusterer(SEMANTIC, embedder=minilm)  # a cache of its own
    work = [make_work(share, SEMANTIC, worker) for share in _shares(rows, 2)]
    given = compute_process_advantages(rows, SEMANTIC, work=work,
                                       clusterer=SemanticClusterer(SEMANTIC, embedder=minilm))
    assert given.metrics["cluster_cache_misses"] == 0
    assert given.advantages.tobytes() == alone.advantages.tobytes()


class _FirstCharacters(CharGramEmbedder):
    """Char-gram vectors of a text's first 40 characters; says which texts are longer, and
    counts the texts it was asked about."""

    name = "test:first-40"
    max_tokens = 40

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        return super().encode([text[:40] for text in texts])

    def truncated(self, texts: list[str]) -> np.ndarray:
        self.asked += texts
        return np.array([len(text) > 40 for text in texts])


def test_work_says_which_texts_are_truncated_so_the_step_does_not_ask_again():
    """Two facts whose texts share their first 40 characters, made into work by one embedder
    that reads 40 -> the work says [True, True] (bytes and mapping keep it); the step given it
    asks its own embedder nothing and still keeps the two apart (2 clusters, the same result as
    the step alone, which asks about both texts)."""
    rows = [{"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": f"q-{i}",
             "actions": [{"action": "assert", "triples": [["The opera", "premiered at", place]]},
                         {"action": "answer", "answer": "Paris"}]}
            for i, place in enumerate(["the theatre of Paris in 1875",
                                       "the theatre of Lyon in 1876"])]
    config = FactUtilConfig(mode="semantic", filters=[])
    work = make_work(rows, config, SemanticClusterer(config, embedder=_FirstCharacters()))
    assert work.truncated == [True, True]
    assert FactWork.from_bytes(work.to_bytes()).truncated == [True, True]
    alone_embedder = _FirstCharacters()
    alone = compute_process_advantages(rows, config,
                                       clusterer=SemanticClusterer(config, embedder=alone_embedder))
    assert len(alone_embedder.asked) == 2 and len(alone.clusters) == 2
    for given in (work, work.to_bytes()):
        embedder = _FirstCharacters()
        result = compute_process_advantages(
            rows, config, clusterer=SemanticClusterer(config, embedder=embedder), work=given)
        assert embedder.asked == [] and len(result.clusters) == 2
        assert result.metrics["cluster_texts_truncated"] == 2.0
        assert result.advantages.tobytes() == alone.advantages.tobytes()


def test_work_whose_truncated_flags_are_not_bools_is_refused():
    with pytest.raises(ValueError, match="truncated must hold bools"):
        FactWork("fit", "cpu", ["a"], ["b"], ["c"], None, None, [1])
    with pytest.raises(ValueError, match="truncated has 2 entries, subjects 1"):
        FactWork("fit", "cpu", ["a"], ["b"], ["c"], None, None, [True, False])
