"""Hypothesis properties of docs/method.md §6, in exact mode and in semantic mode.

Semantic mode runs here with a character-n-gram embedder: these tests are about the algebra
(bounds, telescoping, order independence); clustering quality with the real model is tested in
test_semantic.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factutil import FactUtilConfig
from factutil import compute_process_advantages as _compute
from factutil.cluster import SemanticClusterer, triple_text
from tests.conftest import CharGramEmbedder

CHAR_GRAMS = CharGramEmbedder()
MODES = pytest.mark.parametrize("mode", ["exact", "semantic"])


def compute_process_advantages(rows, config):
    """Score with the mode's clusterer (semantic: char-gram embedder, fresh cache)."""
    if config.mode == "semantic":
        return _compute(rows, config, clusterer=SemanticClusterer(config, embedder=CHAR_GRAMS))
    return _compute(rows, config)

SUBJECTS = ["Paris", "France", "Lyon", "Marie Curie", "Warsaw"]
RELATIONS = ["capital", "born in", "located in", "not born in"]
GOLD = ["Paris", "Warsaw"]

triples = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(RELATIONS), st.sampled_from(SUBJECTS))
actions = st.one_of(
    st.builds(lambda q: {"action": "search", "query": q}, st.sampled_from(["a", "b", "A ", "c"])),
    st.builds(
        lambda ts: {"action": "assert", "triples": [list(t) for t in ts]},
        st.lists(triples, min_size=1, max_size=3),
    ),
    st.builds(lambda a: {"action": "answer", "answer": a}, st.sampled_from(GOLD + ["Lyon", ""])),
    st.just({"action": "invalid", "raw": "{", "reason": "truncated JSON"}),
)
rollout_actions = st.lists(actions, min_size=0, max_size=9)
rewards = st.one_of(st.none(), st.floats(-1, 2, allow_nan=False))


@st.composite
def batches(draw):
    n_groups = draw(st.integers(1, 3))
    rows = []
    for g in range(n_groups):
        gold = [draw(st.sampled_from(GOLD))]
        for i in range(draw(st.integers(1, 5))):
            rows.append({
                "uid": f"g{g}", "question": f"question {g}", "golden_answers": gold,
                "rollout_id": f"g{g}-{i}", "actions": draw(rollout_actions),
                "reward": draw(rewards),
            })
    return rows


config_fields = st.fixed_dictionaries({
    "alpha": st.floats(0, 1),
    "omega": st.floats(0, 2),
    "success": st.sampled_from(["em", "f1", "reward"]),
    "norm_by_std": st.booleans(),
    "process_norm": st.sampled_from(["group", "none"]),
    "prior": st.sampled_from(["beta", "group"]),
    "utility": st.sampled_from(["group", "loo"]),
    "max_turns": st.integers(1, 9),
})

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _key(record):
    return (record.uid, record.rollout_id, record.step)


def _rows(result):
    return {_key(r): r.to_dict() for r in result.actions}


@MODES
@SETTINGS
@given(batches(), config_fields)
def test_bounds_telescoping_and_finiteness(mode, rows, fields):
    config = FactUtilConfig(mode=mode, **fields)
    result = compute_process_advantages(rows, config)
    assert np.all(np.isfinite(result.advantages))
    utility = {(c.uid, c.cluster_id): c.utility for c in result.clusters}
    assert all(-1.0 < u < 1.0 for u in utility.values())
    read = utility
    if config.utility == "loo":
        read = _leave_one_out(result, config)
        assert all(-1.0 < u < 1.0 for u in read.values())
    by_rollout: dict[tuple[str, str], list] = {}
    for record in result.actions:
        if not record.ignored:
            by_rollout.setdefault((record.uid, record.rollout_id), []).append(record)
    for (uid, rollout_id), records in by_rollout.items():
        final = [c for r in records for c in r.new_clusters]
        assert len(final) == len(set(final)), "a cluster enters a store once"
        key = ((lambda c, u=uid, r=rollout_id: (u, r, c)) if config.utility == "loo"
               else (lambda c, u=uid: (u, c)))
        phi_final = math.tanh(math.fsum(read[key(c)] for c in final))
        assert -1.0 < phi_final < 1.0
        assert math.fsum(r.shaping for r in records) == pytest_approx(phi_final)
        # Back-credit moves reward, never creates it.
        assert abs(math.fsum(r.back_credit for r in records)) < 1e-12
        for r in records:
            assert r.shaping + r.back_credit + r.penalty == pytest_approx(r.process_reward)
            if r.action != "assert":
                assert r.shaping == 0.0 and r.new_clusters == []


def _leave_one_out(result, config):
    """(uid, rollout_id, cluster) -> the cluster's utility from the rollout's group mates, by
    docs/method.md §3's formula with s_c - y_i, n_c - 1 and the mates' mean success."""
    success = {(r.uid, r.rollout_id): r.success for r in result.rollouts}
    mates: dict[str, list[float]] = {}
    for (uid, _), y in success.items():
        mates.setdefault(uid, []).append(y)
    clusters = {(c.uid, c.cluster_id): c for c in result.clusters}
    eps = config.epsilon
    read = {}
    for record in result.actions:
        for c in record.new_clusters:
            ys, y = mates[record.uid], success[(record.uid, record.rollout_id)]
            cluster = clusters[(record.uid, c)]
            if len(ys) == 1:
                value = 0.0
            else:
                p = (math.fsum(ys) - y) / (len(ys) - 1)
                s, n = cluster.s - y, cluster.n - 1
                value = ((s - n * p) / (n + 2 * eps) if config.prior == "group"
                         else (s + eps) / (n + 2 * eps) - p)
            read[(record.uid, record.rollout_id, c)] = value
    return read


def pytest_approx(value):
    import pytest

    return pytest.approx(value, abs=1e-12)


@MODES
@SETTINGS
@given(batches(), config_fields, st.randoms(use_true_random=False))
def test_order_of_groups_rollouts_and_triples_does_not_matter(mode, rows, fields, rnd):
    config = FactUtilConfig(mode=mode, **fields)
    baseline = _rows(compute_process_advantages(rows, config))
    shuffled = [dict(row, actions=[dict(a) for a in row["actions"]]) for row in rows]
    rnd.shuffle(shuffled)
    for row in shuffled:
        for action in row["actions"]:
            if action["action"] == "assert":
                action["triples"] = rnd.sample(action["triples"], len(action["triples"]))
    assert _rows(compute_process_advantages(shuffled, config)) == baseline


@MODES
@SETTINGS
@given(batches(), config_fields)
def test_deterministic_and_input_not_mutated(mode, rows, fields):
    import copy

    frozen = copy.deepcopy(rows)
    config = FactUtilConfig(mode=mode, **fields)
    first = compute_process_advantages(rows, config)
    second = compute_process_advantages(rows, config)
    assert rows == frozen
    assert first.advantages.tobytes() == second.advantages.tobytes()
    assert [r.to_dict() for r in first.actions] == [r.to_dict() for r in second.actions]


@MODES
@SETTINGS
@given(batches())
def test_alpha_does_not_change_a_rollouts_total(mode, rows):
    with_credit = compute_process_advantages(rows, FactUtilConfig(mode=mode, alpha=0.2))
    without = compute_process_advantages(rows, FactUtilConfig(mode=mode, alpha=0.0))
    totals: dict[tuple[str, str], list[float]] = {}
    for a, b in zip(with_credit.actions, without.actions):
        pair = totals.setdefault((a.uid, a.rollout_id), [0.0, 0.0])
        pair[0] += a.process_reward
        pair[1] += b.process_reward
    for x, y in totals.values():
        assert abs(x - y) < 1e-12


@MODES
@SETTINGS
@given(batches())
def test_omega_zero_reproduces_outcome_advantage_exactly(mode, rows):
    result = compute_process_advantages(rows, FactUtilConfig(mode=mode, omega=0.0))
    expected = np.array(
        [0.0 if r.ignored else r.outcome_advantage for r in result.actions], dtype=np.float32
    )
    assert np.array_equal(result.advantages, expected)


@MODES
@SETTINGS
@given(batches(), st.integers(0, 2), st.sampled_from(["upper", "lower", "spaces"]))
def test_reasserting_a_fact_or_its_case_variant_earns_zero(mode, rows, which, variant):
    """Append a re-assert of an already stored fact (in another letter case or spacing)."""
    config = FactUtilConfig(mode=mode, max_turns=20)
    row = rows[which % len(rows)]
    stored = [a for a in row["actions"] if a["action"] == "assert"]
    answered = any(a["action"] == "answer" for a in row["actions"])
    if not stored or answered:
        return
    s, r, o = stored[0]["triples"][0]
    change = {
        "upper": lambda t: t.upper(),
        "lower": lambda t: t.lower(),
        "spaces": lambda t: f"  {t.replace(' ', '   ')} ",
    }[variant]
    again = {"action": "assert", "triples": [[change(s), change(r), change(o)]]}
    assert triple_text(
        __import__("factutil").Triple(subject=s, relation=r, object=o)
    ) == triple_text(__import__("factutil").Triple(subject=change(s), relation=change(r), object=change(o)))
    extended = [dict(x) for x in rows]
    extended[which % len(rows)] = dict(row, actions=row["actions"] + [again])
    result = compute_process_advantages(extended, config)
    last = [a for a in result.actions if a.rollout_id == row["rollout_id"]][-1]
    assert last.action == "assert" and last.shaping == 0.0 and last.new_clusters == []


@MODES
@SETTINGS
@given(batches(), config_fields, st.floats(0, 1))
def test_prior_group_gives_uniform_groups_zero_utility_and_no_shaping(mode, rows, fields, y):
    """docs/method.md §6: with prior="group", a group whose rollouts all have the same success has u_c = 0."""
    # Every rollout gets reward y; an unanswered or empty-store one still has success 0 (§3).
    uniform = [dict(row, reward=y) for row in rows]
    config = FactUtilConfig(mode=mode, **{**fields, "prior": "group", "success": "reward"})
    for result in (compute_process_advantages(uniform, config),
                   compute_process_advantages(rows, FactUtilConfig(mode=mode, **{**fields, "prior": "group"}))):
        success: dict[str, list[float]] = {}
        for r in result.rollouts:
            success.setdefault(r.uid, []).append(r.success)
        for c in result.clusters:
            ys = success[c.uid]
            if min(ys) == max(ys):
                assert c.utility == 0.0
            # u = (s - n p-bar) / (n + 2 eps), the group-centred estimate.
            p = math.fsum(ys) / len(ys)
            assert c.utility == pytest.approx((c.s - c.n * p) / (c.n + 1.0), abs=1e-12)
            assert -1.0 < c.utility < 1.0
        for r in result.actions:
            ys = success[r.uid]
            if min(ys) == max(ys):
                assert r.shaping == 0.0 and r.back_credit == 0.0
