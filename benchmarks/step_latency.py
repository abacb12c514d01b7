"""Per-step overhead of factutil, side by side with a naive baseline and the embedding floor.

    python benchmarks/step_latency.py [--size S|M|L] [--backends minilm,minilm-int8,static]
                                      [--quick] [--json FILE] [--no-naive]

One training step = ``compute_process_advantages`` on a whole batch of groups (the reference
workloads of ``benchmarks/workloads.py``: S/M/L = 64/256/512 groups × 6 rollouts × ≤ 8 actions,
~6 triples per rollout). In one process, for each embedding backend:

- **factutil cold**: a fresh ``SemanticClusterer`` (empty embedding cache; the model itself is
  already loaded, as it is after the first step of a run), timed per stage;
- **factutil warm**: the same step again with the cache filled (a step whose facts were all seen);
- **emb. only**: the same step with a new clusterer that shares only the embedding cache (its
  per-fact analyses and checked-pair memo empty): facts seen before, met in new combinations;
- **floor**: only embedding the batch's distinct fact texts once — no method can do less;
- **naive** (MiniLM only): per group, embed every triple occurrence and cluster with sklearn
  average linkage on cosine distance; no dedup, no cache, no batching across groups.

Prints a table with factutil / floor and naive / factutil, and the peak extra RSS of the step
(sampled every 5 ms). ``--json`` writes the figures for other tools.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.workloads import build_workload, triple_occurrences
from factutil import FactUtilConfig, Triple, compute_process_advantages, filters
from factutil.cluster import SemanticClusterer, fact_text, normalize_fact_text, triple_text
from factutil.embed import make_embedder

STAGES = (
    ("load", "time_load_s"),
    ("dedup", "time_prepare_s"),
    ("embed", "cluster_time_embed_s"),
    ("candidates", "cluster_time_candidates_s"),
    ("filters", "cluster_time_filters_s"),
    ("linkage", "cluster_time_linkage_s"),
    ("utility→adv", None),
)


class PeakRSS:
    """Samples this process's RSS in a thread; ``extra_mb`` is the peak above the start."""

    def __init__(self, every_s: float = 0.005):
        self.every_s = every_s
        self.process = psutil.Process()

    def __enter__(self) -> PeakRSS:  # noqa: PYI034
        self.start = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def stage_seconds(metrics: dict[str, float]) -> dict[str, float]:
    """Seconds per stage from a result's metrics."""
    out = {name: metrics.get(key, 0.0) for name, key in STAGES if key}
    out["utility→adv"] = metrics["time_utility_s"] + metrics["time_shaping_s"] + metrics["time_advantage_s"]
    out["total"] = metrics["time_total_s"]
    return out


def naive_step(rows: list[dict], embedder, threshold: float) -> float:
    """The straightforward implementation, per group: embed every triple occurrence, cluster with
    sklearn average linkage; no dedup, no cache, no batching across groups. Seconds."""
    from sklearn.cluster import AgglomerativeClustering

    start = time.perf_counter()
    by_group: dict[str, list[str]] = {}
    for row in rows:
        for action in row["actions"]:
            if action["action"] == "assert":
                for t in action["triples"]:
                    by_group.setdefault(row["uid"], []).append(triple_text(Triple.model_validate(t)))
    for group in by_group.values():
        vectors = embedder.encode(group)
        if len(group) > 1:
            AgglomerativeClustering(
                n_clusters=None, metric="cosine", linkage="average", distance_threshold=1 - threshold
            ).fit(vectors)
    return time.perf_counter() - start


def bcubed_f1(backend: str, threshold: float) -> float:
    """B-cubed F1 of embedding+filters on the dev labelled set (benchmarks/cluster_quality.py)."""
    from benchmarks import cluster_quality as quality

    groups = quality.group_items(quality.read_set(quality.SET_PATH))
    embedder = quality.default_embedder(None, backend)
    return quality.run_semantic(groups, threshold, quality.FILTERS, embedder).bcubed.f1


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=("S", "M", "L"))
    parser.add_argument("--backends", default="minilm,minilm-int8,static")
    parser.add_argument("--quick", action="store_true", help="size S, no naive baseline, no quality run")
    parser.add_argument("--no-naive", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    size = "S" if args.quick else args.size
    rows = build_workload(size)
    occurrences = triple_occurrences(rows)
    unique = sorted({normalize_fact_text(" | ".join(t)) for t in occurrences})
    console = Console(width=max(Console().width, 140))
    console.print(f"workload {size}: {len({r['uid'] for r in rows})} groups, {len(rows)} rollouts, "
                  f"{sum(len(r['actions']) for r in rows)} actions, {len(occurrences)} triples, "
                  f"{len(unique)} distinct texts; {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")

    report: dict = {"size": size, "triples": len(occurrences), "unique_texts": len(unique),
                    "naive_s": None, "peak_extra_rss_mb": 0.0, "backends": {}}
    naive_embedder = None
    for backend in args.backends.split(","):
        config = FactUtilConfig(embedding_backend=backend)
        embedder = make_embedder(backend)
        # The model loads once per process, and a GPU's kernels start on the first real batch:
        # neither belongs to a step, so both happen before any timing.
        embedder.encode(unique[:256])
        floor_start = time.perf_counter()
        embedder.encode(unique)
        floor_s = time.perf_counter() - floor_start
        clusterer = SemanticClusterer(config, embedder=embedder)
        # Like the model, the filters' tables (pint's unit registry, the lexicons) load once per
        # process (``warmup``); the memoised texts and filter helpers start empty, as in a new run.
        clusterer.warmup()
        fact_text.cache_clear()
        filters.clear_caches()
        with PeakRSS() as rss:
            cold = compute_process_advantages(rows, config, clusterer=clusterer)
        warm = compute_process_advantages(rows, config, clusterer=clusterer)
        # Only the embeddings known: a new clusterer sharing the cache, its fact and pair memos
        # empty (facts seen before, met in new combinations).
        fact_text.cache_clear()
        filters.clear_caches()
        fresh = SemanticClusterer(config, embedder=embedder, cache=clusterer.cache)
        embeddings_only = compute_process_advantages(rows, config, clusterer=fresh)
        assert embeddings_only.advantages.tobytes() == cold.advantages.tobytes(), "memo changed a result"
        assert warm.advantages.tobytes() == cold.advantages.tobytes(), "warm and cold steps differ"
        entry = {"cold_s": cold.metrics["time_total_s"], "warm_s": warm.metrics["time_total_s"],
                 "floor_s": floor_s, "peak_extra_rss_mb": rss.extra_mb,
                 "warm_embeddings_only_s": embeddings_only.metrics["time_total_s"],
                 "stages_cold": stage_seconds(cold.metrics), "stages_warm": stage_seconds(warm.metrics),
                 "stages_warm_embeddings_only": stage_seconds(embeddings_only.metrics)}
        if not args.quick:
            entry["bcubed_f1"] = bcubed_f1(backend, config.sim_threshold)
        report["backends"][backend] = entry
        report["peak_extra_rss_mb"] = max(report["peak_extra_rss_mb"], rss.extra_mb)
        if backend == "minilm":
            naive_embedder = embedder
    if naive_embedder is not None and not (args.quick or args.no_naive):
        report["naive_s"] = naive_step(rows, naive_embedder, FactUtilConfig().sim_threshold)
    naive_s = report["naive_s"]

    table = Table(title=f"step latency, size {size} (seconds)", header_style="bold")
    for column in ("backend", "cache", *[name for name, _ in STAGES], "total", "floor", "÷ floor",
                   "naive ÷", "extra RSS MB"):
        table.add_column(column, justify="left" if column in ("backend", "cache") else "right")
    for backend, entry in report["backends"].items():
        floor_s = entry["floor_s"]
        if naive_s is not None:
            entry["naive_over_cold"] = naive_s / entry["cold_s"]
            entry["naive_over_warm"] = naive_s / entry["warm_s"]
        for label, key in (("cold", "cold"), ("warm", "warm"), ("emb. only", "warm_embeddings_only")):
            stages = entry[f"stages_{key}"]
            table.add_row(
                backend if label == "cold" else "", label,
                *[f"{stages[name]:.3f}" for name, _ in STAGES], f"{stages['total']:.3f}",
                f"{floor_s:.3f}" if label == "cold" else "",
                f"{stages['total'] / floor_s:.2f}" if label == "cold" else "",
                f"{naive_s / stages['total']:.1f}×" if naive_s is not None else "",
                f"{entry['peak_extra_rss_mb']:.0f}" if label == "cold" else "",
            )
    console.print(table)
    if naive_s is not None:
        console.print(f"naive (MiniLM; per group: embed its occurrences, {len(occurrences)} in all, + sklearn "
                      f"average linkage): {naive_s:.2f} s; 'naive ÷' = naive / that row's factutil step")
    if "minilm" in report["backends"] and not args.quick:
        reference = report["backends"]["minilm"]["bcubed_f1"]
        for backend, entry in report["backends"].items():
            console.print(f"B-cubed F1 (dev set, t = {FactUtilConfig().sim_threshold}) {backend}: "
                          f"{entry['bcubed_f1']:.3f} (loss vs minilm {reference - entry['bcubed_f1']:+.3f})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
