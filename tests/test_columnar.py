"""The batch-wide (columnar) pipeline equals a per-group reference built from the method's step functions.

``compute_process_advantages`` computes the whole batch in flat arrays. The reference
here walks one group and one rollout at a time and calls the public per-step functions
(:func:`cluster_utilities`, :func:`rollout_process_rewards`, :func:`outcome_advantages`,
:func:`process_advantages`, :func:`total_advantages`) exactly as docs/method.md §1–§5 chain them. Every
number must agree bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.workloads import build_workload
from factutil import FactUtilConfig, compute_process_advantages
from factutil.advantages import segment_normalize, total_advantages
from factutil.cluster import (
    ExactClusterer,
    SemanticClusterer,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.io import read_groups
from factutil.metrics import qa_scores
from factutil.schema import AnswerAction, AssertAction, Rollout, SearchAction, group_rollouts
from factutil.shaping import KIND_CODES
from tests.conftest import CharGramEmbedder
from tests.reference import (
    cluster_utilities,
    group_normalize,
    outcome_advantages,
    process_advantages,
    rollout_process_rewards,
)
from tests.test_properties import batches, config_fields

SAMPLE = "examples/data/2wiki_rollouts.jsonl"


def reference(groups, config, clusterer):
    """Per group, per rollout: the method's chain (docs/method.md §1–§5) with the public step functions. Returns
    (advantages float64 per input action, per-action process advantage, cluster utilities per group)."""
    batch = read_groups(groups) if isinstance(groups, str) else group_rollouts(
        Rollout.model_validate(row) for row in groups)
    work = []
    for group in batch:
        rollouts = []
        for rollout in group.rollouts:
            effective = []
            for action in rollout.actions[: config.max_turns]:
                effective.append(action)
                if isinstance(action, AnswerAction):
                    break
            answer = next((a for a in effective if isinstance(a, AnswerAction)), None)
            before = effective[: effective.index(answer)] if answer is not None else effective
            empty = answer is not None and not any(isinstance(a, AssertAction) for a in before)
            em, f1 = qa_scores(answer.answer, group.golden_answers, config.fold_unicode) if answer else (0.0, 0.0)
            if answer is None or empty:
                reward = success = 0.0
            else:
                reward = rollout.reward if rollout.reward is not None else f1
                success = {"em": em, "f1": f1}.get(config.success, min(max(reward, 0.0), 1.0))
            rollouts.append((rollout, effective, reward, success))
        work.append(rollouts)
    facts = []
    texts = []
    for rollouts in work:
        triples = [t for _, eff, _, _ in rollouts for a in eff if isinstance(a, AssertAction) for t in a.triples]
        group_texts, group_facts = representatives(triples, config.triple_template)
        texts.append(group_texts)
        facts.append(group_facts)
    labels = clusterer.cluster_batch(facts)
    advantages, process, utilities = [], [], []
    for group, rollouts, group_texts, group_labels in zip(batch, work, texts, labels):
        label_of = dict(zip(group_texts, group_labels.tolist()))
        k = int(group_labels.max()) + 1 if len(group_labels) else 0
        order = sorted(range(len(rollouts)), key=lambda i: rollouts[i][0].rollout_id)
        membership = np.zeros((len(rollouts), k), dtype=bool)
        for row, i in enumerate(order):
            for action in rollouts[i][1]:
                if isinstance(action, AssertAction):
                    for t in action.triples:
                        membership[row, label_of[triple_text(t, config.triple_template)]] = True
        success = np.array([rollouts[i][3] for i in order])
        table = cluster_utilities(membership, success, config.epsilon, config.prior, config.utility)
        utility, read = table.utility, table.rollout_utility  # read: (rows by rollout_id, K)
        if config.uniform_groups == "zero" and success.min() == success.max():
            utility, read = np.zeros_like(utility), np.zeros_like(read)
        utilities.append(utility)
        rewards = []
        for i, (rollout, effective, _, _) in enumerate(rollouts):
            store: set[int] = set()
            new, seen, repeated = [], set(), []
            for action in effective:
                added = []
                if isinstance(action, AssertAction):
                    added = sorted({label_of[triple_text(t, config.triple_template)] for t in action.triples} - store)
                    store.update(added)
                new.append(np.array(added, dtype=np.int64))
                query = normalize_fact_text(action.query) if isinstance(action, SearchAction) else None
                repeated.append(query is not None and query in seen)
                if query is not None:
                    seen.add(query)
            kinds = np.array([KIND_CODES[a.action] for a in effective], dtype=np.int8)
            parts = rollout_process_rewards(
                kinds, new, read[order.index(i)], np.array(repeated, dtype=bool), gamma=config.gamma, alpha=config.alpha,
                invalid_penalty=config.invalid_penalty, repeat_search_penalty=config.repeat_search_penalty,
                empty_store_answer_penalty=config.empty_store_answer_penalty,
            )
            rewards.append(parts.process_reward)
        a_out = outcome_advantages(np.array([r[2] for r in rollouts]), config.norm_eps, config.norm_by_std)
        flat = np.concatenate(rewards) if rewards else np.zeros(0)
        a_proc = process_advantages(flat, config.norm_eps, config.process_norm)
        index = np.repeat(np.arange(len(rollouts)), [len(r) for r in rewards])
        total = total_advantages(a_out, a_proc, index, config.omega)
        offset = 0
        for i, (rollout, effective, _, _) in enumerate(rollouts):
            n = len(effective)
            advantages.extend(total[offset : offset + n].tolist() + [0.0] * (len(rollout.actions) - n))
            process.extend(a_proc[offset : offset + n].tolist() + [0.0] * (len(rollout.actions) - n))
            offset += n
    return np.array(advantages), np.array(process), utilities


def assert_matches_reference(groups, config, make_clusterer):
    result = compute_process_advantages(groups, config, clusterer=make_clusterer())
    advantages, process, utilities = reference(groups, config, make_clusterer())
    assert result.action_columns["advantage"].tobytes() == advantages.tobytes()
    assert result.action_columns["process_advantage"].tobytes() == process.tobytes()
    assert result.advantages.tobytes() == advantages.astype(np.float32).tobytes()
    by_group: dict[str, list[float]] = {}
    for record in result.clusters:
        by_group.setdefault(record.uid, []).append(record.utility)
    assert [np.array(by_group.get(uid, [])).tobytes() for uid in dict.fromkeys(k[0] for k in result.rollout_keys)] == [
        u.tobytes() for u in utilities
    ]
    return result


def test_sample_matches_the_per_group_reference_in_both_modes():
    config = FactUtilConfig(mode="exact", omega=0.7, alpha=0.3)
    result = assert_matches_reference(SAMPLE, config, ExactClusterer)
    assert result.metrics["groups"] == 30.0 and result.metrics["actions"] > 600
    embedder = CharGramEmbedder()
    semantic = FactUtilConfig(mode="semantic", sim_threshold=0.8)
    assert_matches_reference(SAMPLE, semantic, lambda: SemanticClusterer(semantic, embedder=embedder))


def test_workload_with_three_term_gains_matches_the_reference():
    # Workload S asserts up to 3 new clusters at once: the exact re-summation of 3+ terms runs.
    rows = build_workload("S")
    config = FactUtilConfig(mode="exact", uniform_groups="zero", gamma=0.95)
    result = assert_matches_reference(rows, config, ExactClusterer)
    assert max(len(r.new_clusters) for r in result.actions) == 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), config_fields, st.sampled_from(["keep", "zero"]))
def test_random_batches_match_the_reference(rows, fields, uniform):
    config = FactUtilConfig(mode="exact", uniform_groups=uniform, **fields)
    assert_matches_reference(rows, config, ExactClusterer)


def test_columns_records_and_per_rollout_agree():
    rows = [
        {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": rid, "actions": actions}
        for rid, actions in [
            ("b", [{"action": "search", "query": "capital"},
                   {"action": "assert", "triples": [["France", "capital", "Paris"]]},
                   {"action": "answer", "answer": "Paris"},
                   {"action": "search", "query": "after the answer: ignored"}]),
            ("a", [{"action": "answer", "answer": "Lyon"}]),
        ]
    ]
    result = compute_process_advantages(rows, {"mode": "exact"})
    assert result.rollout_keys == [("q", "b"), ("q", "a")]
    assert result.action_offsets.tolist() == [0, 4, 5]
    columns = result.action_columns
    assert columns["step"].tolist() == [0, 1, 2, 3, 0]
    assert columns["ignored"].tolist() == [False, False, False, True, False]
    # G = 2, R = (1, 0): A_out = ±1 / (std + eps) with std = sqrt(0.5).
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert columns["outcome_advantage"].tolist() == pytest.approx([a, a, a, 0.0, -a])
    for name in ("shaping", "back_credit", "penalty", "process_reward", "outcome_reward",
                 "outcome_advantage", "process_advantage", "advantage"):
        assert columns[name].tolist() == [getattr(r, name) for r in result.actions], name
    per_rollout = result.per_rollout("advantage")
    assert per_rollout[("q", "a")].tolist() == [result.actions[4].advantage]
    assert len(per_rollout[("q", "b")]) == 4 and per_rollout[("q", "b")][3] == 0.0
    assert [r.new_clusters for r in result.actions] == [[], [0], [], [], []]
    with pytest.raises(KeyError, match="column must be one of"):
        result.per_rollout("utility")
    assert result.actions is result.actions  # built once


def test_records_come_from_the_columns_not_from_the_input_rows():
    """Ignored actions keep their kind and an invalid one its reason; cluster members are the
    triples as written. The input rows are emptied before the records are first read."""
    rows = [
        {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": rid, "actions": actions}
        for rid, actions in [
            ("1", [{"action": "assert", "triples": [["France", "capital", "Paris"]]},
                   {"raw": "no action here"},
                   {"action": "answer", "answer": "Paris"},
                   {"raw": "<search></search>"},
                   {"action": "assert", "triples": [["x", "y", "z"]]}]),
            ("2", [{"action": "assert", "triples": [["france", " capital", "PARIS"]]},
                   {"action": "answer", "answer": "Lyon"}]),
        ]
    ]
    result = compute_process_advantages(rows, {"mode": "exact"})
    for group in result.groups:
        for rollout in group.rollouts:
            rollout["actions"] = []
    records = result.actions
    assert [(r.action, r.ignored, r.invalid_reason) for r in records] == [
        ("assert", False, None), ("invalid", False, "no action found"), ("answer", False, None),
        ("invalid", True, "search with an empty query"), ("assert", True, None),
        ("assert", False, None), ("answer", False, None),
    ]
    assert [(r.uid, r.rollout_id, r.step) for r in records] == [
        ("q", "1", 0), ("q", "1", 1), ("q", "1", 2), ("q", "1", 3), ("q", "1", 4),
        ("q", "2", 0), ("q", "2", 1),
    ]
    # Both spellings normalise to "france | capital | paris": one cluster, both members listed
    # (sorted, as written); the ignored assert after the answer adds nothing.
    (cluster,) = result.clusters
    assert cluster.members == [["France", "capital", "Paris"], ["france", " capital", "PARIS"]]
    assert (cluster.n, cluster.s) == (2, 1.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["normal", "constant", "huge", "levels"])),
                max_size=6), st.booleans(), st.integers(0, 2**32 - 1))
def test_segment_normalize_equals_a_plain_reference_per_segment(shape, by_std, seed):
    rng = np.random.default_rng(seed)
    segments = []
    for size, kind in shape:
        values = {"normal": rng.normal(size=size), "constant": np.full(size, rng.normal()),
                  "huge": rng.normal(size=size) * 1e306, "levels": rng.choice([0.0, 0.5, 1.0], size)}[kind]
        segments.append(values)
    values = np.concatenate(segments) if segments else np.zeros(0)
    starts = np.cumsum([0] + [len(s) for s in segments[:-1]]) if segments else np.zeros(0, dtype=np.int64)
    got = segment_normalize(values, starts, 1e-6, by_std)
    want = [value for segment in segments for value in _plain_normalize(segment.tolist(), 1e-6, by_std)]
    assert got.tobytes() == np.array(want, dtype=np.float64).tobytes()
    for segment in segments:  # one group is one segment
        assert group_normalize(segment, 1e-6, by_std).tobytes() == np.array(
            _plain_normalize(segment.tolist(), 1e-6, by_std), dtype=np.float64
        ).tobytes()


def _plain_normalize(values: list[float], eps: float, by_std: bool) -> list[float]:
    """docs/method.md §5 on one group, one float at a time: exact sums, sample std (ddof = 1),
    zeros for one value or equal values, a power-of-two scaling above 2**500 in magnitude."""
    n = len(values)
    if n <= 1 or min(values) == max(values):
        return [0.0] * n
    exponent = math.frexp(max(abs(v) for v in values))[1]
    exponent = exponent if exponent > 500 else 0
    scaled = [math.ldexp(v, -exponent) for v in values]
    mean = math.fsum(scaled) / n
    centred = [v - mean for v in scaled]
    if not by_std:
        return [math.ldexp(v, exponent) for v in centred]
    std = math.sqrt(math.fsum(v * v for v in centred) / (n - 1))
    return [v / (std + math.ldexp(eps, -exponent)) for v in centred]


def test_segment_normalize_rejects_bad_input_by_name():
    with pytest.raises(ValueError, match=r"nan in segment 1"):
        segment_normalize(np.array([0.0, 1.0, np.nan]), np.array([0, 2]))
    with pytest.raises(ValueError, match="starts must rise from 0"):
        segment_normalize(np.array([0.0, 1.0]), np.array([1]))
    # An empty first segment, then (1, 3): mean 2, std sqrt(2), so ±1 / (sqrt(2) + eps).
    got = segment_normalize(np.array([1.0, 3.0]), np.array([0, 0]))
    assert got.tolist() == [-1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6)]


def test_many_rollouts_one_cluster_sums_success_in_rollout_id_order():
    # 12 rollouts share one cluster: s_c adds their fractional successes one after another in
    # rollout_id order, as cluster_utilities does for any number of clusters.
    import random

    rnd = random.Random(4)
    rows = [{"uid": "q", "question": "q", "golden_answers": ["paris"], "rollout_id": f"r{i:02d}",
             "actions": [{"action": "assert", "triples": [["Paris", "capital of", "France"]]},
                         {"action": "answer", "answer": "x"}], "reward": rnd.random()} for i in range(12)]
    result = assert_matches_reference(rows, FactUtilConfig(mode="exact", success="reward"), ExactClusterer)
    total = 0.0
    for row in sorted(rows, key=lambda r: r["rollout_id"]):
        total += row["reward"]
    assert result.clusters[0].s == total


def test_columns_are_read_only_and_the_result_has_a_short_repr():
    result = compute_process_advantages(build_workload("S")[:12], {"mode": "exact"})
    with pytest.raises(ValueError, match="read-only"):
        result.action_columns["advantage"][0] = 99.0
    with pytest.raises(ValueError, match="read-only"):
        next(iter(result.per_rollout().values()))[0] = 99.0
    actions = sum(len(row["actions"]) for row in build_workload("S")[:12])
    assert repr(result) == f"ProcessAdvantages(groups=2, rollouts=12, actions={actions}, warnings=0, skipped=0)"


def test_asserts_of_four_new_clusters_match_the_reference():
    # Every assert adds 4 new clusters: the exact re-summation of 3+ terms runs in every cell.
    rows = [{"uid": f"q{q}", "question": "q", "golden_answers": ["paris"], "rollout_id": f"r{j}",
             "actions": [{"action": "assert", "triples": [[f"e{q}", f"rel{k}", f"o{j}{k}"] for k in range(4)]},
                         {"action": "answer", "answer": "paris" if j else "lyon"}]}
            for q in range(50) for j in range(3)]
    result = assert_matches_reference(rows, FactUtilConfig(mode="exact"), ExactClusterer)
    assert [len(r.new_clusters) for r in result.actions[:2]] == [4, 0]
