"""Per-fact work made in a "worker" (factutil.workers) and used by the step: the same advantages,
bit for bit, as the step computing everything; each item is checked alone, and one that does
not fit or cannot be read is left out (its facts computed by the step), counted, and never
remembered into a later step."""

from __future__ import annotations

import io
import pickle
import random
import zipfile

import numpy as np
import pytest

from factutil import compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.config import FactUtilConfig
from factutil.embed import l2_normalize
from factutil.integration import score_batch
from factutil.io import read_rollouts
from factutil.load import rollout_row
from factutil.parse import parse_action
from factutil.workers import (
    WORK_FIELDS,
    assert_triples,
    build_id,
    fit_key,
    make_work,
    read_work,
    work_bytes,
)

from .conftest import CharGramEmbedder

SAMPLE = "examples/data/2wiki_rollouts.jsonl"
SEMANTIC = FactUtilConfig(mode="semantic")
EXACT = FactUtilConfig(mode="exact")


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [rollout_row(rollout) for _, rollout in read_rollouts(SAMPLE)]


def _clusterer(config: FactUtilConfig = SEMANTIC) -> SemanticClusterer:
    return SemanticClusterer(config, embedder=CharGramEmbedder())


def _triples(rows: list[dict], config: FactUtilConfig = SEMANTIC) -> list[tuple[str, str, str]]:
    return [t for row in rows for t in assert_triples(row["actions"], config.max_turns)]


def _work(rows, config=SEMANTIC, clusterer=None):
    return make_work(_triples(rows, config), config,
                     clusterer if clusterer is not None else _clusterer(config))


def _shares(rows: list[dict], workers: int) -> list[list[dict]]:
    """Each worker's share of the rollouts, as a trainer deals them out."""
    return [rows[k::workers] for k in range(workers)]


def _step(rows, config=SEMANTIC, clusterer=None, work=None):
    clusterer = clusterer if clusterer is not None else _clusterer(config)
    return compute_process_advantages(rows, config, clusterer=clusterer, work=work)


def _same(given, alone) -> None:
    assert given.advantages.tobytes() == alone.advantages.tobytes()
    for name, column in alone.action_columns.items():
        assert given.action_columns[name].tobytes() == column.tobytes(), name
    assert [c.members for c in given.clusters] == [c.members for c in alone.clusters]


def test_work_made_in_workers_gives_the_advantages_of_the_step_alone(rows):
    alone = _step(rows)
    worker = _clusterer()  # one per worker process; the driver's is another
    work = [_work(share, clusterer=worker) for share in _shares(rows, 2)]
    given = _step(rows, work=work)
    _same(given, alone)
    facts = alone.metrics["cluster_facts"]
    assert given.metrics["cluster_work_facts"] == facts > 0
    assert given.metrics["cluster_cache_misses"] == 0  # the model embedded nothing
    assert alone.metrics["cluster_cache_misses"] > 0
    assert given.metrics["cluster_work_ignored"] == given.metrics["cluster_work_unreadable"] == 0


def test_work_for_some_facts_only_is_completed_by_the_step(rows):
    alone = _step(rows)
    half = _work(rows[: len(rows) // 2])
    given = _step(rows, work=[half, None])
    _same(given, alone)
    assert 0 < given.metrics["cluster_work_facts"] < given.metrics["cluster_facts"]
    assert given.metrics["cluster_cache_misses"] > 0


def test_work_as_bytes_gives_the_same_advantages(rows):
    alone = _step(rows)
    given = _step(rows, work=work_bytes(_work(rows)))
    _same(given, alone)
    assert given.metrics["cluster_work_facts"] == alone.metrics["cluster_facts"]


@pytest.mark.parametrize("seed", [0, 1])
def test_results_with_work_do_not_depend_on_order_or_on_the_rest_of_the_batch(rows, seed):
    work = [_work(share) for share in _shares(rows, 3)]
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


def test_the_fit_is_the_build_the_clustering_fields_and_the_embedder():
    key = fit_key(SEMANTIC, "model")
    assert key.startswith(build_id() + ":") and len(key) == len(build_id()) + 17
    assert fit_key(SEMANTIC, "model") == key
    for other in (fit_key(SEMANTIC, "another model"),
                  fit_key(SEMANTIC.model_copy(update={"sim_threshold": 0.8}), "model"),
                  fit_key(SEMANTIC.model_copy(update={"filters": ("negation",)}), "model")):
        assert other != key
    # fields that change speed only are not in it
    assert fit_key(SEMANTIC.model_copy(update={"cache_max_entries": 5}), "model") == key


def test_the_build_is_the_version_and_a_digest_of_the_source(tmp_path, monkeypatch):
    """Two builds of one version differ: a changed source file changes the build."""
    from factutil import workers

    version, digest = build_id().split("+")
    assert len(digest) == 12 and int(digest, 16) >= 0
    copy = tmp_path / "factutil"
    copy.mkdir()
    (copy / "workers.py").write_text("# one file\n")
    monkeypatch.setattr(workers, "__file__", str(copy / "workers.py"))
    first = workers.build_id.__wrapped__()
    (copy / "workers.py").write_text("# one file, changed\n")
    assert workers.build_id.__wrapped__() != first and first.startswith(version + "+")


def test_work_holds_each_distinct_fact_once_sorted_with_its_vectors():
    triples = [["b", "born in", "London"], ("a", "born in", "Paris"), ("b", "born in", "London")]
    work = make_work(triples, SEMANTIC, _clusterer())
    assert set(work) == set(WORK_FIELDS)
    assert work["parts"].tolist() == [[b"a", b"born in", b"Paris"], [b"b", b"born in", b"London"]]
    assert work["vectors"].dtype == np.float32 and work["vectors"].shape == (2, 512)
    texts = ["a | born in | paris", "b | born in | london"]
    assert work["vectors"].tobytes() == CharGramEmbedder().encode(texts).tobytes()
    assert work["truncated"].tolist() == [False, False]
    assert (work["fit"], work["device"]) == (fit_key(SEMANTIC, "test:char-grams"), "cpu")
    exact = make_work(triples, EXACT)
    assert exact["vectors"].shape == (2, 0) and len(exact["parts"]) == 2
    with pytest.raises(ValueError, match=r"triples\[1\] is not three non-blank strings"):
        make_work([("a", "r", "o"), ("", "r", "o")], SEMANTIC, _clusterer())


def test_a_fact_with_a_lone_surrogate_travels_as_work():
    """A JSON assert can hold a cut escape ("\\ud83d": a lone surrogate) that the step accepts:
    its work is made and read back with its vector, not refused (a worker's whole rollout lost)."""
    clusterer = _clusterer()
    triple = ("Paris \ud83d", "capital of", "France")
    assert parse_action('<assert>[["Paris \\ud83d", "capital of", "France"]]</assert>').triples == [triple]
    work = make_work([triple], SEMANTIC, clusterer)
    given, counts, warnings = read_work(work_bytes(work), fit_key(SEMANTIC, "test:char-grams"), "cpu", 512)
    assert (counts["work_unreadable"], warnings) == (0.0, [])
    assert [tuple(parts) for parts in given[0]] == [triple]


def test_assert_triples_reads_the_asserts_before_the_answer_within_max_turns():
    actions = [{"action": "assert", "triples": [["a", "r", "o"]]},
               parse_action('<assert>[["Ada", "born in", "London"]]</assert>'),
               {"action": "answer", "answer": "x"},
               {"action": "assert", "triples": [["after", "the", "answer"]]}]
    assert assert_triples(actions, 8) == [("a", "r", "o"), ("Ada", "born in", "London")]
    assert assert_triples(actions, 1) == [("a", "r", "o")]
    assert assert_triples(actions, 0) == []


def test_pickling_work_keeps_every_array(rows):
    work = _work(rows)
    back = pickle.loads(pickle.dumps(work, protocol=5))
    for name in WORK_FIELDS:
        assert np.asarray(back[name]).tobytes() == np.asarray(work[name]).tobytes(), name


def test_a_config_that_is_no_mapping_is_a_type_error_naming_it(rows):
    """The step and make_work read a config through one rule (factutil.config.as_config)."""
    for config, shown in (("config.yaml", "str 'config.yaml'"), (0.5, "float 0.5")):
        for call in (compute_process_advantages, make_work):
            with pytest.raises(TypeError) as caught:
                call(rows, config)
            assert str(caught.value) == ("config must be a FactUtilConfig or a mapping of its "
                                         f"fields, got {shown}")


# --- every kind of bad item beside good ones ---------------------------------------------------


def _npz(arrays: dict, compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
            archive.writestr(f"{name}.npy", member.getvalue())
    return buffer.getvalue()


def _forged_length(work: dict) -> bytes:
    """An .npz whose vectors member declares 10**12 rows in its .npy header (its data as it was)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in WORK_FIELDS:
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(work[name]))
            raw = member.getvalue()
            if name == "vectors":
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(header, {
                    "descr": "<f4", "fortran_order": False,
                    "shape": (10**12, work["vectors"].shape[1])})
                raw = header.getvalue() + raw[len(raw) - work["vectors"].nbytes:]
            archive.writestr(f"{name}.npy", raw)
    return buffer.getvalue()


def _changed(work: dict, **fields) -> dict:
    return {**work, **fields}


def _bad_items(work: dict, config: FactUtilConfig, monkeypatch) -> dict[str, object]:
    """Every kind of item the step must leave out, made from the good item ``work``: name ->
    (item, the metric that counts it)."""
    from factutil import workers

    data = work_bytes(work)
    flipped = bytearray(data)
    flipped[data.index(b"vectors.npy") + 300] ^= 0x40  # the zip's CRC-32 no longer agrees
    vectors, parts = work["vectors"], work["parts"]
    other_config = config.model_copy(update={"sim_threshold": 0.8})
    with monkeypatch.context() as patch:  # a worker on another build of the same version
        patch.setattr(workers, "build_id", lambda: build_id().split("+")[0] + "+0123456789ab")
        other_build = fit_key(config, "test:char-grams")
    negation = np.array([["o", "num", "abc"]])  # the analyses an older build shipped
    unreadable = {
        "cut bytes": data[: len(data) // 2],
        "flipped byte": bytes(flipped),
        "declared 10**12 rows": _forged_length(work),
        "compressed member": _npz(work, zipfile.ZIP_DEFLATED),
        "a member too many (analyses)": _npz({**work, "analyses": negation}),
        "old form with analyses": {**work, "analyses": [["s", "o", None, False, "be", [], [], []]]},
        "a key missing": {k: v for k, v in work.items() if k != "truncated"},
        "one part fewer": _changed(work, parts=parts[:-1]),
        "parts as str": _changed(work, parts=np.char.decode(parts, "utf-8")),
        "a blank part": _changed(work, parts=np.where(parts == parts[0, 0], b" ", parts)),
        "parts not UTF-8": _changed(work, parts=np.where(parts == parts[0, 0], b"\xff", parts)),
        "narrower vectors": _changed(work, vectors=l2_normalize(vectors[:, :-1])),
        "vectors float64": _changed(work, vectors=vectors.astype(np.float64)),
        "vectors not unit": _changed(work, vectors=vectors * 3),
        "a NaN vector": _changed(work, vectors=np.where(np.arange(len(vectors))[:, None] == 0,
                                                        np.float32(np.nan), vectors)),
        "truncated as ints": _changed(work, truncated=work["truncated"].astype(int)),
        "fit not a string": _changed(work, fit=7),
        "an int": 10**12,
        "a text": "not work",
    }
    poisoned = _poisoned(work)  # taken, its vectors would change the clusters
    ignored = {
        "another config": _changed(poisoned, fit=fit_key(other_config, "test:char-grams")),
        "another build": _changed(poisoned, fit=other_build),
        "another embedder": _changed(poisoned, fit=fit_key(config, "test:other-model")),
    }
    return {**{name: (item, "cluster_work_unreadable") for name, item in unreadable.items()},
            **{name: (item, "cluster_work_ignored") for name, item in ignored.items()}}


def _poisoned(work: dict) -> dict:
    """``work`` with random unit vectors: paraphrases of it no longer merge."""
    vectors = np.random.default_rng(0).normal(size=work["vectors"].shape)
    return _changed(work, vectors=l2_normalize(vectors.astype(np.float32)))


def _planets() -> list[dict]:
    """A group whose facts differ by a negation the filters see and a vector that cannot, and
    two that differ by a full stop and merge by their vectors alone."""
    facts = [[["Pluto", "is", "a planet"], ["Pluto", "orbits", "the Sun"]],
             [["Pluto", "is not", "a planet"], ["Pluto", "orbits", "the Sun."]]]
    return [{"uid": "p", "question": "?", "golden_answers": ["no"], "rollout_id": f"p-{k}",
             "actions": [{"action": "assert", "triples": facts[k]},
                         {"action": "answer", "answer": "no" if k else "yes"}]}
            for k in range(2)]


class _BlindToNegation(CharGramEmbedder):
    """Char-gram vectors of the text with " not" removed: "X is a planet" and "X is not a
    planet" get one vector, as a model that misses the negation would give them."""

    name = "test:char-grams"

    def encode(self, texts: list[str]) -> np.ndarray:
        return super().encode([text.replace(" not", "") for text in texts])


CONFIG = FactUtilConfig(mode="semantic", filters=("negation",), key_edges=False)


def test_every_bad_item_beside_good_ones_leaves_the_driver_alone_clusters(rows, monkeypatch):
    """Malformed, crafted and other-build items beside good ones: this step and the next give
    the driver-alone clusters and advantages; each bad item is counted, its facts computed by
    the driver; the good items' vectors are used; nothing of a bad item is remembered. (Merges
    by the cosine under the negation veto alone, so any vector taken from a bad item shows.)"""
    batch = rows + _planets()
    embedder = _BlindToNegation()
    alone = compute_process_advantages(batch, CONFIG,
                                       clusterer=SemanticClusterer(CONFIG, embedder=embedder))
    pluto = [c.members for c in alone.clusters if c.uid == "p"]
    assert sorted(pluto) == [[["Pluto", "is", "a planet"]], [["Pluto", "is not", "a planet"]],
                             [["Pluto", "orbits", "the Sun"], ["Pluto", "orbits", "the Sun."]]]
    worker = SemanticClusterer(CONFIG, embedder=_BlindToNegation())
    good = [make_work(_triples(share, CONFIG), CONFIG, worker) for share in _shares(batch, 2)]
    bad = _bad_items(good[1], CONFIG, monkeypatch)
    poisoned = compute_process_advantages(batch, CONFIG, work=[_poisoned(item) for item in good],
                                          clusterer=SemanticClusterer(CONFIG, embedder=embedder))
    assert len(poisoned.clusters) > len(alone.clusters)  # what an ignored item would have done
    driver = SemanticClusterer(CONFIG, embedder=embedder)
    items = [good[0], *(item for item, _ in bad.values())]
    first = compute_process_advantages(batch, CONFIG, clusterer=driver, work=items)
    _same(first, alone)
    counted = {metric: sum(m == metric for _, m in bad.values())
               for metric in ("cluster_work_unreadable", "cluster_work_ignored")}
    for metric, count in counted.items():
        assert first.metrics[metric] == count, metric
    assert 0 < first.metrics["cluster_work_facts"] < first.metrics["cluster_facts"]
    assert first.metrics["cluster_cache_misses"] > 0  # the bad items' facts: embedded here
    assert sum("ignored" in warning for warning in first.warnings) == 2  # one per kind
    # the next step, with and without the same work: nothing of a bad item was kept
    _same(compute_process_advantages(batch, CONFIG, clusterer=driver), alone)
    _same(compute_process_advantages(batch, CONFIG, clusterer=driver, work=items), alone)
    for name, (item, metric) in bad.items():  # and each alone beside the good ones
        alone_bad = compute_process_advantages(batch, CONFIG, work=[good[0], item, good[1]],
                                               clusterer=SemanticClusterer(CONFIG,
                                                                           embedder=embedder))
        _same(alone_bad, alone)
        assert alone_bad.metrics[metric] == 1, name


def test_read_work_says_why_an_item_is_left_out(rows):
    work = _work(rows[:4])
    fit, dims = work["fit"], work["vectors"].shape[1]
    given, counts, warnings = read_work([work, work_bytes(work)[:-9], None], fit, "cpu", dims)
    assert len(given.parts) == 2 * len(work["parts"]) - len(work["parts"])
    assert counts == {"work_ignored": 0, "work_unreadable": 1, "work_other_device": 0}
    assert warnings == [("1 work item(s) ignored, unreadable (their facts are computed here): "
                        "not a work item's bytes (BadZipFile: File is not a zip file)")]
    _, _, warnings = read_work(_changed(work, vectors=work["vectors"][:, :3]), fit, "cpu", dims)
    assert f"vectors must be float32 ({len(work['parts'])}, {dims}), got float32" in warnings[0]


def test_bad_work_costs_score_batch_nothing_but_time(rows):
    """score_batch returns, nothing raises, no group falls back, and the values are the step's
    without work; the item is counted unreadable."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["uid"], []).append(row)
    plain = _step(rows)
    crafted = _changed(_work(rows[:6]), vectors=_work(rows[:6])["vectors"][:, :-1])
    batch = score_batch(list(groups), groups.__getitem__, SEMANTIC, clusterer=_clusterer(),
                        work=[crafted, work_bytes(_work(rows[6:])), None])
    assert batch.error is None and batch.fallback == {}
    assert batch.result.advantages.tobytes() == plain.advantages.tobytes()
    assert batch.result.metrics["cluster_work_unreadable"] == 1
    assert (batch.shipped, batch.unshipped) == (2, 1)


def test_work_from_another_kind_of_device_is_used_or_ignored_as_the_config_says(rows):
    """prepared_device='any' uses a worker GPU's vectors (counted, one warning); 'same' ignores
    them, so the step is bit-identical to doing it all."""
    moved = _changed(_work(rows), device="cuda")
    used = _step(rows, work=moved)
    assert used.metrics["cluster_work_other_device"] == len(moved["parts"])
    assert any("another kind of device" in w for w in used.warnings)
    same = SEMANTIC.model_copy(update={"prepared_device": "same"})
    ignored = _step(rows, config=same, work=_changed(_work(rows, same), device="cuda"))
    assert ignored.metrics["cluster_work_ignored"] == 1
    assert ignored.metrics["cluster_work_other_device"] == 0


def test_an_exact_step_ignores_work_and_says_so(rows):
    work = _work(rows, EXACT)
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
    work = [_work(share, clusterer=worker) for share in _shares(rows, 2)]
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
    that reads 40 -> the work says [True, True] (its bytes keep it); the step given it asks its
    own embedder nothing and still keeps the two apart (2 clusters, the same result as the step
    alone, which asks about both texts)."""
    rows = [{"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": f"q-{i}",
             "actions": [{"action": "assert", "triples": [["The opera", "premiered at", place]]},
                         {"action": "answer", "answer": "Paris"}]}
            for i, place in enumerate(["the theatre of Paris in 1875",
                                       "the theatre of Lyon in 1876"])]
    config = FactUtilConfig(mode="semantic", filters=[])
    work = make_work(_triples(rows), config, SemanticClusterer(config, embedder=_FirstCharacters()))
    assert work["truncated"].tolist() == [True, True]
    alone_embedder = _FirstCharacters()
    alone = compute_process_advantages(rows, config,
                                       clusterer=SemanticClusterer(config, embedder=alone_embedder))
    assert len(alone_embedder.asked) == 2 and len(alone.clusters) == 2
    for given in (work, work_bytes(work)):
        embedder = _FirstCharacters()
        result = compute_process_advantages(
            rows, config, clusterer=SemanticClusterer(config, embedder=embedder), work=given)
        assert embedder.asked == [] and len(result.clusters) == 2
        assert result.metrics["cluster_texts_truncated"] == 2.0
        assert result.advantages.tobytes() == alone.advantages.tobytes()


def test_work_that_cannot_be_iterated_is_one_unreadable_item(rows):
    def items():
        yield _work(rows[:4])
        raise RuntimeError("the channel broke")

    alone = _step(rows)
    given = _step(rows, work=items())
    _same(given, alone)
    assert given.metrics["cluster_work_unreadable"] == 1
