"""Smoke test of the step-latency benchmark; timings are printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.workloads import SIZES, build_workload, triple_occurrences
from factutil.cluster import normalize_fact_text
from factutil.shaping import (
    ANSWER,
    ASSERT,
    INVALID,
    PAD,
    SEARCH,
    process_rewards,
    rollout_process_rewards,
)

ROOT = Path(__file__).resolve().parent.parent


def test_workloads_are_deterministic_and_sized():
    small = build_workload("S")
    assert small == build_workload("S")
    assert len({row["uid"] for row in small}) == SIZES["S"] and len(small) == 6 * SIZES["S"]
    assert all(len(row["actions"]) <= 8 for row in small)
    per_rollout = len(triple_occurrences(small)) / len(small)
    assert 4.5 < per_rollout < 7.5  # ~6 triples per rollout
    with pytest.raises(ValueError, match="size"):
        build_workload("XL")


@pytest.mark.slow
def test_quick_benchmark_writes_its_json(tmp_path):
    out = tmp_path / "step.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/step_latency.py"), "--quick", "--backends", "minilm-int8",
         "--json", str(out)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["size"] == "S" and report["triples"] > report["unique_texts"] > 0
    entry = report["backends"]["minilm-int8"]
    assert {"cold_s", "warm_s", "floor_s", "peak_extra_rss_mb"} <= set(entry)
    assert "step latency" in done.stdout


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0b\x0c\u00a0\u2003\u3000\x1c\x85Ａ")), max_size=30))
def test_fast_whitespace_collapse_matches_the_regex(text):
    import re
    import unicodedata

    expected = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()
    assert normalize_fact_text(text) == expected


kind = st.sampled_from([SEARCH, ASSERT, ANSWER, INVALID])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(kind, st.floats(-0.9, 0.9), st.integers(0, 2), st.booleans()),
                         max_size=8), min_size=1, max_size=5))
def test_batched_process_rewards_equal_each_rollout_alone(rollouts):
    """The (R, T) batch gives every row exactly what that rollout gets alone (padding is inert)."""
    steps = max((len(r) for r in rollouts), default=0)
    shape = (len(rollouts), steps)
    kinds, gain = np.full(shape, PAD, dtype=np.int8), np.zeros(shape)
    added, repeated = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=bool)
    for i, rollout in enumerate(rollouts):
        for t, (k, g, a, rep) in enumerate(rollout):
            kinds[i, t], gain[i, t], added[i, t], repeated[i, t] = k, g if a else 0.0, a, rep
    batch = process_rewards(kinds, gain, added, repeated, alpha=0.3)
    for i, rollout in enumerate(rollouts):
        n = len(rollout)
        alone = process_rewards(kinds[i : i + 1, :n], gain[i : i + 1, :n], added[i : i + 1, :n],
                                repeated[i : i + 1, :n], alpha=0.3)
        assert batch.process_reward[i, :n].tobytes() == alone.process_reward[0].tobytes()
        assert not batch.process_reward[i, n:].any()
    # The per-rollout wrapper agrees with the batch form.
    first = rollouts[0]
    utility = np.array([0.3, -0.2, 0.1])
    wrapped = rollout_process_rewards(
        np.array([k for k, *_ in first], dtype=np.int8), [np.arange(a) for _, _, a, _ in first],
        utility, np.array([r for *_, r in first], dtype=bool), alpha=0.3,
    )
    assert wrapped.process_reward.shape == (len(first),)


def test_clear_caches_empties_the_filter_helpers_and_changes_no_result():
    from factutil import filters

    before = filters.analyze("Marie Curie", "was born in", "Warsaw, 7 November 1867")
    assert filters.fold.cache_info().currsize > 0
    filters.clear_caches()
    assert filters.fold.cache_info().currsize == 0 and filters._scan.cache_info().currsize == 0
    assert filters.analyze("Marie Curie", "was born in", "Warsaw, 7 November 1867") == before
