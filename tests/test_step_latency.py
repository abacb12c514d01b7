"""Smoke test of the step-latency benchmark; timings are printed, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.step_latency import THREAD_VARIABLES
from benchmarks.workloads import (
    ROLLOUTS_PER_SIZE,
    SIZES,
    build_group,
    build_workload,
    triple_occurrences,
)
from factutil.cluster import normalize_fact_text
from factutil.shaping import (
    ANSWER,
    ASSERT,
    INVALID,
    PAD,
    SEARCH,
    process_rewards,
)
from tests.reference import rollout_process_rewards

ROOT = Path(__file__).resolve().parent.parent


def test_workloads_are_deterministic_and_sized():
    small = build_workload("S")
    assert small == build_workload("S")
    assert len({row["uid"] for row in small}) == SIZES["S"] and len(small) == 6 * SIZES["S"]
    assert all(len(row["actions"]) <= 8 for row in small)
    per_rollout = len(triple_occurrences(small)) / len(small)
    assert 4.5 < per_rollout < 7.5  # ~6 triples per rollout
    with pytest.raises(ValueError, match="size must be one of .*'XXL'"):
        build_workload("XXL")


def test_the_xl_workload_has_4096_groups_of_8_rollouts():
    assert SIZES["XL"] == 4096 and ROLLOUTS_PER_SIZE["XL"] == 8
    group = build_group(5, np.random.default_rng(0), rollouts=8)
    assert len(group) == 8 and {row["uid"] for row in group} == {"step-0005"}
    assert [row["rollout_id"] for row in group] == [f"step-0005-{r}" for r in range(8)]
    # the sizes S-L keep 6 rollouts a group, so their figures stay comparable with earlier runs
    assert len(build_group(5, np.random.default_rng(0))) == 6


def test_driver_threads_is_read_before_the_imports():
    from benchmarks.step_latency import _driver_threads_from_argv

    assert _driver_threads_from_argv(["--size", "S", "--driver-threads", "1"]) == 1
    assert _driver_threads_from_argv(["--driver-threads=3", "--quick"]) == 3
    assert _driver_threads_from_argv(["--quick"]) is None
    assert _driver_threads_from_argv(["--driver-threads", "0"]) is None  # argparse rejects it later
    assert _driver_threads_from_argv(["--driver-threads"]) is None


def _run_benchmark(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "step.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/step_latency.py"), *args, "--json", str(out)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.integration
def test_driver_threads_and_the_growth_section(tmp_path, static_vectors):
    done, report = _run_benchmark(tmp_path, "--quick", "--backends", "static", "--driver-threads", "1",
                                  "--growth", "S", "--growth-backend", "static")
    assert report["driver_threads"] == 1 and report["torch_threads"] == 1
    assert report["omp_num_threads"] == "1"
    (point,) = report["growth"]
    small = build_workload("S")
    assert (point["size"], point["groups"], point["rollouts"]) == ("S", 64, len(small))
    assert point["triples"] == len(triple_occurrences(small))
    assert point["torch_threads"] == 1  # the child process got the same limit
    assert point["identical"] is True and point["backend"] == "static"
    assert 0 < point["driver_s"] and 0 < point["cold_s"] and point["peak_rss_mb"] > 50
    assert "growth, backend static, driver threads 1" in done.stdout


def test_bad_benchmark_arguments_are_named(tmp_path):
    for args, message in (
        (["--driver-threads", "0"], "--driver-threads must be >= 1 (got 0)"),
        (["--workers", "0"], "--workers must be >= 1 (got 0)"),
        (["--growth", "S,XXL"], "--growth: unknown size 'XXL'"),
        (["--prepare-chunk", "-1"], "--prepare-chunk must be >= 0 (got -1)"),
        (["--embedding-batch-size", "0"], "--embedding-batch-size must be >= 1 (got 0)"),
    ):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks/step_latency.py"), *args],
                              capture_output=True, text=True, check=False, cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)


@pytest.mark.slow
@pytest.mark.integration
def test_critical_path_with_two_ray_workers(tmp_path, static_vectors):
    done, report = _run_benchmark(tmp_path, "--quick", "--backends", "none", "--driver-threads", "1",
                                  "--critical-path", "--critical-backend", "static", "--workers", "2")
    entry = report["critical_path"]
    assert (entry["workers"], entry["backend"], entry["size"]) == (2, "static", "S")
    assert entry["prepare_chunk"] == 1  # by rollout, as an agent-loop worker as each one finishes
    assert entry["rollouts"] == len(build_workload("S"))
    assert entry["identical"] is True
    assert "identical: work given yes" in done.stdout
    assert entry["embedded_by_driver"] == 0  # every vector came from the workers
    assert entry["shipped_mb"] > 0 and entry["shipped_npz_mb"] > 0
    # each worker ships a fact once: fewer facts than the batch's triple occurrences
    assert 0 < entry["shipped_facts"] < report["triples"]
    assert len(entry["worker_task_wall_s"]) == 2 and entry["worker_cpu_s"] > 0
    assert entry["worker_wall_s"] >= max(entry["worker_task_wall_s"])
    assert {"driver_s", "warm_s", "worker_cpu_s", "workers", "backend"} <= set(entry)
    assert entry["identical_warm"] is True  # the yardstick computes the same step
    assert entry["driver_over_warm"] == pytest.approx(entry["driver_s"] / entry["warm_s"])


@pytest.mark.slow
@pytest.mark.integration
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


@pytest.mark.slow
def test_before_after_times_the_shipped_step_on_both_checkouts(tmp_path, static_vectors):
    """The ``shipped`` mode runs the driver's step given the workers' work in both and compares
    their advantages; with one checkout on both sides they must agree, and so must the ``warm``
    step run on the before side of a pair (``--before-modes``)."""
    out = tmp_path / "ba.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/step_before_after.py"), "--before", str(ROOT),
         "--size", "S", "--modes", "shipped,static,shipped", "--before-modes",
         "shipped,static,warm", "--rounds", "2", "--json", str(out)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modes = json.loads(out.read_text())["modes"]
    assert modes["shipped"]["same_advantages"] is True
    assert modes["shipped"]["digest"] == modes["static"]["digest"]  # work given: the same step
    assert len(modes["shipped"]["times"]["before"]) == len(modes["shipped"]["times"]["after"]) == 2
    # the shipped step embedded nothing: its stages are the step's own
    assert modes["shipped"]["stage_medians_s"]["after"]["time_load_s"] > 0
    assert "| shipped |" in done.stdout
    # a pair of two modes: the before checkout's warm step against the after's shipped one (the
    # yardstick of issue 16); warm or shipped, one checkout's step gives the same advantages
    paired = modes["warm -> shipped"]
    assert (paired["before_mode"], paired["after_mode"]) == ("warm", "shipped")
    assert paired["same_advantages"] is True and paired["digest"] == modes["static"]["digest"]
    assert "| warm -> shipped |" in done.stdout
