"""factutil.integration: the surface every trainer adapter calls (the step object, batch score
with per-group fallback, rollouts from trainer values, action rows, spans, metrics, the one
warning), and factutil.preparer, the rollout workers' side."""

from __future__ import annotations

import base64
import io
import logging

import numpy as np
import pytest
import torch

from factutil import compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.integration import (
    BatchScore,
    TrainerStep,
    Unscorable,
    action_row,
    batch_metrics,
    checked_spans,
    fixed_key_row,
    row_of_fixed_keys,
    score_batch,
    trainer_rollout,
    warn_fallback,
)
from factutil.parse import parse_action
from factutil.preparer import FactPreparer, prepares_in_workers
from factutil.schema import FactUtilConfig

EXACT = FactUtilConfig(mode="exact")
FACT = ["Polish-Russian War", "director", "Xawery Żuławski"]


def _group(uid: str, rewards: tuple[float, float]) -> list[dict]:
    return [
        trainer_rollout(
            name=f"{uid}/{i}",
            uid=uid,
            rollout_id=str(i),
            question="Who directed Polish-Russian War?",
            golden_answers={"target": ["Xawery Żuławski"]},
            actions=[
                {"action": "search", "query": "Polish-Russian War"},
                {"action": "assert", "triples": [FACT]},
                {"action": "answer", "answer": "Xawery Żuławski" if reward else "Bob"},
            ],
            reward=reward,
        )
        for i, reward in enumerate(rewards)
    ]


def test_score_batch_scores_the_good_groups_once_and_names_each_fallback():
    def build(key: int) -> list[dict]:
        if key == 1:
            raise Unscorable("row 4 has no payload")
        rollouts = _group(str(key), (1.0, 0.0))
        if key == 2:  # fails the core's validation: the core skips it, the others are scored
            rollouts[1]["rollout_id"] = "0"
        return rollouts

    batch = score_batch([0, 1, 2, 3], build, EXACT, column="advantage")
    assert batch.groups == 4 and batch.error is None
    assert set(batch.fallback) == {1, 2}  # the caller's keys, ints, not the core's uid strings
    assert batch.fallback[1] == "row 4 has no payload"
    assert set(batch.values) == {("0", "0"), ("0", "1"), ("3", "0"), ("3", "1")}
    reference = compute_process_advantages(_group("0", (1.0, 0.0)) + _group("3", (1.0, 0.0)), EXACT)
    for key, values in reference.per_rollout("advantage").items():
        assert batch.values[key].tobytes() == values.tobytes()
    # Same facts, same searches: the two rollouts differ by their outcome alone, so each action
    # of the right one gets +a and of the wrong one -a (A_out is symmetric for R = 1, 0).
    right, wrong = batch.values[("0", "0")], batch.values[("0", "1")]
    assert right[0] > 0 and right[0] == pytest.approx(-wrong[0])


def test_score_batch_never_raises_when_the_core_call_does(monkeypatch):
    import factutil.api

    def broken(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(factutil.api, "compute_process_advantages", broken)
    batch = score_batch(["a", "b"], lambda key: _group(key, (1.0, 0.0)), EXACT)
    assert batch.result is None and batch.values == {}
    assert isinstance(batch.error, MemoryError)
    assert batch.fallback == {
        "a": "scoring failed: MemoryError: simulated",
        "b": "scoring failed: MemoryError: simulated",
    }
    empty = score_batch(["a"], lambda key: (_ for _ in ()).throw(Unscorable("no rows")), EXACT)
    assert empty.result is None and empty.fallback == {"a": "no rows"} and empty.groups == 1


def test_trainer_rollout_reads_gold_from_any_trainer_value_and_refuses_a_bad_reward():
    rollout = trainer_rollout(
        name="row 0", uid="7", rollout_id="0", question=None,
        golden_answers='["Paris", "paris"]', actions=[], reward=None,
    )
    assert rollout == {
        "uid": "7", "question": "", "golden_answers": ["Paris", "paris"], "rollout_id": "0",
        "actions": [],
    }
    with pytest.raises(Unscorable, match="row 3 has no golden_answers"):
        trainer_rollout(name="row 3", uid="7", rollout_id="3", question="q",
                        golden_answers={"label": "x"}, actions=[], reward=1.0)
    for bad in (float("nan"), torch.tensor(float("inf")), np.float32("nan"), "1", torch.ones(2)):
        with pytest.raises(Unscorable, match="row 2 has a reward that is no finite number"):
            trainer_rollout(name="row 2", uid="7", rollout_id="2", question="q",
                            golden_answers=["x"], actions=[], reward=bad)
    # what trainers hand over: numpy scalars and 0-d tensors, items of their reward arrays
    for given in (np.float32(0.5), torch.tensor([0.0, 0.5])[1], np.array(0.5)):
        rollout = trainer_rollout(name="row 4", uid="7", rollout_id="4", question="q",
                                  golden_answers=["x"], actions=[], reward=given)
        assert rollout["reward"] == 0.5 and type(rollout["reward"]) is float


def test_fixed_key_rows_have_the_same_keys_always_and_read_back():
    texts = [
        '{"action": "search", "query": "Z director"}',
        '{"action": "assert", "facts": [["Z", "director", "Ann"]]}',
        '{"action": "answer", "answer": "Ann"}',
        '{"action": "lookup"}',
    ]
    rows = [fixed_key_row(parse_action(text)) for text in texts]
    assert all(list(row) == ["kind", "query", "triples", "answer", "error", "observation"]
               for row in rows)
    assert rows[0] == {"kind": "search", "query": "Z director", "triples": None, "answer": None,
                       "error": None, "observation": None}
    assert rows[1]["triples"] == [["Z", "director", "Ann"]]
    assert rows[3]["kind"] == "invalid" and rows[3]["error"].startswith("unknown action")
    assert [row_of_fixed_keys(row) for row in rows[:3]] == [
        {"action": "search", "query": "Z director"},
        {"action": "assert", "triples": [["Z", "director", "Ann"]]},
        {"action": "answer", "answer": "Ann"},
    ]
    assert row_of_fixed_keys(rows[3])["action"] == "invalid"
    assert row_of_fixed_keys({"kind": "answer", "answer": None}) == {
        "action": "invalid", "raw": "", "reason": "malformed answer action"
    }
    with pytest.raises(Unscorable, match="unknown action kind 'x'"):
        row_of_fixed_keys({"kind": "x"})
    assert action_row(parse_action(texts[1])) == {
        "action": "assert", "triples": [["Z", "director", "Ann"]]
    }
    with pytest.raises(TypeError):
        fixed_key_row({"action": "answer"})
    # a search's observation is carried both ways (facts="retrieved" reads its passages)
    seen = fixed_key_row(parse_action(texts[0], observation="Doc 1(Title: Z) Z is a film."))
    assert seen["observation"] == "Doc 1(Title: Z) Z is a film."
    assert row_of_fixed_keys(seen) == {"action": "search", "query": "Z director",
                                       "observation": "Doc 1(Title: Z) Z is a film."}


@pytest.mark.parametrize("given,actions,problem", [
    ([[0, 2], [1, 4]], 2, "spans must be in order and must not overlap"),
    ([[0, 2]], 2, "1 spans for 2 actions"),
    ([[3, 2]], 1, "spans must be [start, end) pairs of ints"),
    ([[0, True]], 1, "spans must be [start, end) pairs of ints"),
    ("0-2", 1, "spans must be [start, end) pairs of ints"),
])
def test_checked_spans_names_each_problem(given, actions, problem):
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace(")", r"\)")):
        checked_spans(given, actions)


def test_checked_spans_by_hand():
    spans = checked_spans([[2, 5], [5, 5], [7, 9]], 3)
    assert spans.dtype == np.int64 and spans.tolist() == [[2, 5], [5, 5], [7, 9]]


def test_batch_metrics_and_the_one_warning(caplog):
    result = compute_process_advantages(_group("0", (1.0, 0.0)), EXACT)
    metrics = batch_metrics(BatchScore(result, {}, {1: "a", 2: "b"}, groups=3))
    assert metrics["factutil/groups"] == 3.0 and metrics["factutil/groups_fallback"] == 2.0
    assert metrics["factutil/groups_scored"] == 1.0
    assert metrics["factutil/time_cluster_ms"] == 1000.0 * result.metrics["time_cluster_s"]
    assert "factutil/time_cluster_s" not in metrics
    assert metrics["factutil/utility_spread"] == pytest.approx(
        result.metrics["utility_max"] - result.metrics["utility_min"]
    )
    assert metrics["factutil/groups_uniform_share"] == 0.0  # y = (1, 0): a mixed group
    assert all(np.isfinite(value) for value in metrics.values())
    assert batch_metrics(BatchScore(None, {}, {}, groups=2)) == {
        "factutil/groups": 2.0, "factutil/groups_scored": 2.0, "factutil/groups_fallback": 0.0
    }
    log = logging.getLogger("factutil.test_integration")
    with caplog.at_level(logging.WARNING, logger=log.name):
        warn_fallback(log, {}, "the trainer's advantages")
        assert caplog.records == []
        reasons = {3: "c", 1: "a", 4: "d", 2: "b"}
        warn_fallback(log, reasons, "the trainer's advantages")
        warn_fallback(log, {}, "the trainer's advantages", every="boom")
    first, second = (r.getMessage() for r in caplog.records)
    assert first == (
        "factutil: 4 group(s) kept the trainer's advantages (factutil/groups_fallback): "
        "group 1: a; group 2: b; group 3: c ..."
    )
    assert second == "factutil: every group kept the trainer's advantages (factutil/batch_fallback): boom"


def test_prepares_in_workers_follows_the_mode_unless_the_config_says():
    assert prepares_in_workers(FactUtilConfig()) is True  # semantic by default
    assert prepares_in_workers(EXACT) is False  # nothing to embed or analyse
    assert prepares_in_workers(EXACT.model_copy(update={"prepare_in_workers": True})) is True
    assert prepares_in_workers(FactUtilConfig(prepare_in_workers=False)) is False
    # the work is asserted facts': under retrieved passages the workers would ship nothing
    assert prepares_in_workers(FactUtilConfig(facts="retrieved")) is False
    assert prepares_in_workers(FactUtilConfig(facts="retrieved", prepare_in_workers=True)) is True


def test_the_preparer_ships_each_fact_once_and_never_fails_the_worker(caplog):
    preparer = FactPreparer(EXACT)
    actions = _group("0", (1.0, 0.0))[0]["actions"]
    work = preparer(actions)
    assert np.char.decode(work["parts"], "utf-8").tolist() == [FACT]
    assert len(preparer(actions)["parts"]) == 0  # shipped before: the trainer's clusterer keeps it
    other = [{"action": "assert", "triples": [FACT, ["Xawery Żuławski", "mother", "M"]]}]
    text = preparer.text(other)
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as npz:
        assert npz["parts"].tolist() == [["Xawery Żuławski".encode(), b"mother", b"M"]]

    log = logging.getLogger("factutil.test_integration")
    failing = FactPreparer(EXACT, log)
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert failing("not a rollout") is None and failing(42) is None
    assert failing.failures == 2 and len(caplog.records) == 1  # one warning, then counted


def test_score_batch_passes_the_work_on_and_counts_what_came(char_grams):
    """Work as an object, as base64 text, a worker that sent none and text that is not base64:
    every value is the step's without work."""
    config = FactUtilConfig(mode="semantic")
    zero, one = _group("0", (1.0, 0.0)), _group("1", (0.0, 1.0))
    groups = {"0": zero, "1": one}
    preparer = FactPreparer(config)
    preparer._clusterer = SemanticClusterer(config, embedder=char_grams)
    work = [preparer(zero[0]["actions"]), preparer.text(one[0]["actions"]), None, "not base64!"]
    batch = score_batch(["0", "1"], groups.__getitem__, config,
                        clusterer=SemanticClusterer(config, embedder=char_grams), work=work)
    assert batch.fallback == {} and (batch.shipped, batch.unshipped) == (3, 1)
    metrics = batch_metrics(batch)
    assert (metrics["factutil/prepared_shipped"], metrics["factutil/prepared_unshipped"]) == (3, 1)
    assert metrics["factutil/cluster_work_facts"] == 2  # the one fact, in each group
    assert metrics["factutil/cluster_work_unreadable"] == 1
    plain = compute_process_advantages(zero + one, config,
                                       clusterer=SemanticClusterer(config, embedder=char_grams))
    assert batch.result.advantages.tobytes() == plain.advantages.tobytes()
    without = score_batch(["0"], groups.__getitem__, config,
                          clusterer=SemanticClusterer(config, embedder=char_grams))
    assert "factutil/prepared_shipped" not in batch_metrics(without)


def test_rollouts_that_wait_for_the_preparer_are_embedded_in_one_call(char_grams):
    """Four rollouts reach one worker's preparer at once: the first call embeds its own 2 facts;
    while it runs the other three wait, and the next call embeds their 6 facts in one go. Each
    rollout's bytes equal what a preparer of its own makes."""
    import threading

    config = FactUtilConfig(mode="semantic")
    rollouts = [
        [{"action": "search", "query": f"q{i}"},
         {"action": "assert", "triples": [[f"Entity {i}", "born in", f"City {i}"],
                                          [f"Entity {i}", "died in", f"Town {i}"]]},
         {"action": "answer", "answer": f"City {i}"}]
        for i in range(4)
    ]

    def preparer_with(embedder) -> FactPreparer:
        preparer = FactPreparer(config)
        preparer._clusterer = SemanticClusterer(config, embedder=embedder)
        return preparer

    alone = [preparer_with(char_grams)(rollout) for rollout in rollouts]
    assert all(len(work["parts"]) == 2 for work in alone)

    calls: list[int] = []
    preparer = None
    entered = threading.Event()

    class FirstCallWaits:
        name = char_grams.name

        def encode(self, texts):
            entered.set()
            if not calls:  # hold the lock until the three others are waiting for it
                for _ in range(1000):
                    if len(preparer._waiting) == 3:
                        break
                    threading.Event().wait(0.01)
            calls.append(len(texts))
            return char_grams.encode(texts)

    preparer = preparer_with(FirstCallWaits())
    out: dict[int, dict] = {}
    first = threading.Thread(target=lambda: out.__setitem__(0, preparer(rollouts[0])))
    first.start()
    assert entered.wait(30)  # the first call is embedding (it has taken the waiting list)
    others = [threading.Thread(target=lambda i=i: out.__setitem__(i, preparer(rollouts[i])))
              for i in (1, 2, 3)]
    for thread in others:
        thread.start()
    for thread in (first, *others):
        thread.join(30)
    assert calls == [2, 6]  # not [2, 2, 2, 2]
    assert preparer.coalesced == 2  # three rollouts, embedded in one of their calls
    assert [out[i]["parts"].tolist() for i in range(4)] == [w["parts"].tolist() for w in alone]
    assert all(out[i]["vectors"].tobytes() == alone[i]["vectors"].tobytes() for i in range(4))


def test_the_step_never_switches_the_collector_from_another_thread(monkeypatch):
    """A trainer's early-scoring thread must not race with the trainer on gc.isenabled(): only a
    step on the main thread pauses the collector (and restores it)."""
    import gc
    import threading

    switches: list[tuple[str, str]] = []
    monkeypatch.setattr(gc, "disable", lambda: switches.append(
        ("disable", threading.current_thread().name)))
    monkeypatch.setattr(gc, "enable", lambda: switches.append(
        ("enable", threading.current_thread().name)))
    rollouts = _group("0", (1.0, 0.0))
    thread = threading.Thread(target=compute_process_advantages, args=(rollouts, EXACT),
                              name="early")
    thread.start()
    thread.join(60)
    assert switches == []
    compute_process_advantages(rollouts, EXACT)
    main = threading.main_thread().name
    assert switches == [("disable", main), ("enable", main)]
    switches.clear()
    compute_process_advantages(rollouts, EXACT.model_copy(update={"pause_gc": False}))
    assert switches == []


def _two_groups(key: str) -> list[dict]:
    return _group(key, (1.0, 0.0) if key == "0" else (0.0, 1.0))


def test_the_step_keeps_one_clusterer_and_scores_as_score_batch_does():
    step = TrainerStep(EXACT)
    assert step.clusterer is step.clusterer
    batch = step.score(["0", "1"], _two_groups, column="process_advantage")
    alone = score_batch(["0", "1"], _two_groups, EXACT, column="process_advantage")
    assert batch.values.keys() == alone.values.keys()
    assert all(batch.values[key].tobytes() == alone.values[key].tobytes() for key in alone.values)


def test_take_returns_the_early_score_only_for_the_same_key(caplog):
    """Started from key "step 1": take("step 1") returns that score without scoring again;
    take("step 2") scores now (one warning) and gives what score_batch gives directly."""
    step = TrainerStep(EXACT, log=logging.getLogger("factutil.test_step"))
    alone = score_batch(["0", "1"], _two_groups, EXACT)

    def never():
        raise AssertionError("scored again although the early score was for these inputs")

    step.start("step 1", lambda: step.score(["0", "1"], _two_groups))
    taken = step.take("step 1", never)
    assert step.early_used and step.wait_s is not None
    assert all(taken.values[key].tobytes() == alone.values[key].tobytes() for key in alone.values)

    step.start("step 1", lambda: step.score(["0"], _two_groups))  # another batch
    with caplog.at_level(logging.WARNING, logger="factutil.test_step"):
        now = step.take("step 2", lambda: step.score(["0", "1"], _two_groups))
    assert not step.early_used and set(now.values) == set(alone.values)
    assert all(now.values[key].tobytes() == alone.values[key].tobytes() for key in alone.values)
    assert [r.getMessage() for r in caplog.records] == [
        "factutil: the batch changed after it was scored early; scoring it again"]
    assert step.take("step 3", lambda: "now") == "now" and step.wait_s is None  # none started


def test_a_failed_early_scoring_is_done_now_with_one_warning(caplog):
    step = TrainerStep(EXACT, log=logging.getLogger("factutil.test_step"))

    def broken():
        raise MemoryError("simulated")

    step.start("step 1", broken)
    with caplog.at_level(logging.WARNING, logger="factutil.test_step"):
        assert step.take("step 1", lambda: "scored now") == "scored now"
    assert [r.getMessage() for r in caplog.records] == [
        "factutil: scoring early failed; scoring the batch now"]
    assert not step.early_used
    metrics = step.finish(None, 0.0)
    assert metrics["factutil/score_early_used"] == 0.0 and "factutil/time_wait_ms" in metrics
    assert step.steps == 1 and "factutil/report_failures" not in metrics  # report_every 0


def test_a_failing_report_never_fails_the_step(tmp_path, caplog):
    """A run folder that is a file: the writer's thread fails, counted; a folder that cannot
    even make a writer: one warning, counted. finish returns its metrics either way."""
    result = compute_process_advantages(_two_groups("0"), EXACT)
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the run folder should be", encoding="utf-8")
    config = EXACT.model_copy(update={"report_every": 1})
    step = TrainerStep(config, blocker)
    first = step.finish(result, 0.0)
    assert step.reports.wait(60) and step.reports.failures == 1
    assert first["factutil/batch_fallback"] == 0.0 and first["factutil/time_trainer_ms"] > 0
    assert step.finish(result, 0.0, failed=True)["factutil/batch_fallback"] == 1.0
    assert step.reports.wait(60) and step.reports.failures == 2
    broken = TrainerStep(config, None, log=logging.getLogger("factutil.test_step"))
    with caplog.at_level(logging.WARNING, logger="factutil.test_step"):
        assert broken.finish(result, 0.0)["factutil/report_failures"] == 1.0
    assert len([r for r in caplog.records if r.name == "factutil.test_step"]) == 1


def test_the_steps_early_thread_never_switches_the_collector(monkeypatch):
    import gc
    import threading

    switches: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: switches.append(threading.current_thread().name))
    monkeypatch.setattr(gc, "enable", lambda: switches.append(threading.current_thread().name))
    step = TrainerStep(EXACT)
    step.start("step 1", lambda: step.score(["0", "1"], _two_groups))
    assert step.take("step 1", lambda: None).result is not None and step.early_used
    assert switches == []
