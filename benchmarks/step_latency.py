"""Per-step overhead of factutil, side by side with a naive baseline and the embedding floor.

    python benchmarks/step_latency.py [--size S|M|L|XL] [--backends minilm,minilm-int8,static|none]
                                      [--driver-threads N] [--growth S,M,L,XL] [--growth-backend static]
                                      [--critical-path] [--workers K] [--prepare-chunk N]
                                      [--embedding-batch-size ROWS] [--quick] [--json FILE] [--no-naive]

One training step = ``compute_process_advantages`` on a whole batch of groups (the reference
workloads of ``benchmarks/workloads.py``: S/M/L = 64/256/512 groups × 6 rollouts × ≤ 8 actions,
~6 triples per rollout; XL = 4,096 groups × 8 rollouts). ``--driver-threads N`` limits the
process to N threads (``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` set
before numpy or torch load, and ``torch.set_num_threads``), as Ray does for a one-CPU actor such
as verl's trainer driver. In one process, for each embedding backend:

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

``--growth S,M,L,XL``: each size in a fresh process (same thread limit), with ``--growth-backend``
(default ``static``: MiniLM would spend minutes embedding XL's ~37k texts): the cold step's
seconds, the driver's seconds when every rollout's per-fact work was made beforehand
(:class:`factutil.preparer.FactPreparer`, one rollout at a time, not timed), the step's extra RSS
(sampled) and the process's peak RSS (``ru_maxrss``: interpreter, model, workload and both steps). JSON ``"growth"``.

``--critical-path``: the L step (``--size``) as a trainer with the per-fact work in its
rollout workers runs it. K Ray workers (``ray.init(num_cpus=K)``, ``--workers``, default 2), each
holding the ``minilm`` embedder (``--critical-backend``) in a
:class:`factutil.preparer.FactPreparer`, make each rollout of their share's work item
(:mod:`factutil.workers`: the facts that worker had not shipped before), embedding one
rollout at a time (as an agent-loop worker would as each finishes; ``--prepare-chunk N``: N
rollouts a call, 0 the whole share at once, as the preparer does for rollouts that wait for it),
and Ray returns the work objects. The driver runs the step on a cold clusterer given the work
(``driver_s``, wall), alternating with the driver doing everything on a warm clusterer (the
table's 'warm' row: ``warm_s``), a yardstick of this machine's speed at the time of the run:
``driver_over_warm`` compares across machines and days, where seconds do not. Also reported:
the workers' CPU seconds (``time.process_time`` inside each task, summed), the wall seconds of
the workers' phase, the work's size pickled (protocol 5: what Ray and verl's TransferQueue move)
and as ``.npz`` bytes (what OpenRLHF's JSON payload carries, before base64), and whether the
advantages equal, bit for bit, those of the driver doing everything itself. JSON
``"critical_path": {"driver_s", "warm_s", "driver_over_warm", "shipped_mb", "worker_cpu_s",
"worker_wall_s", "workers", "backend", ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _driver_threads_from_argv(argv: list[str]) -> int | None:
    """``--driver-threads N`` read before argparse: the BLAS/OpenMP pools read their variables
    when numpy and torch load, which the imports below do."""
    for index, arg in enumerate(argv):
        value = arg.partition("=")[2] if arg.startswith("--driver-threads=") else (
            argv[index + 1] if arg == "--driver-threads" and index + 1 < len(argv) else None)
        if value is not None:
            return int(value) if value.isdigit() and int(value) >= 1 else None
    return None


_EARLY_THREADS = _driver_threads_from_argv(sys.argv[1:])
if _EARLY_THREADS is not None:
    for _name in THREAD_VARIABLES:
        os.environ[_name] = str(_EARLY_THREADS)

import psutil
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.workloads import SIZES, build_workload, triple_occurrences
from factutil import FactUtilConfig, Triple, compute_process_advantages, filters
from factutil.cluster import SemanticClusterer, fact_text, normalize_fact_text, triple_text
from factutil.embed import make_embedder
from factutil.preparer import FactPreparer
from factutil.workers import assert_triples, make_work, work_bytes

GROWTH_SIZES = ("S", "M", "L", "XL")

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


def set_torch_threads(threads: int | None) -> None:
    """Limit torch's intra- and inter-op pools to ``threads`` (the environment variables were set
    before the imports, see ``_driver_threads_from_argv``)."""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set, or parallel work already started in this process
        pass


def torch_threads() -> int:
    """torch's intra-op threads in this process (what ``--driver-threads`` set)."""
    import torch

    return torch.get_num_threads()


def clear_module_memos() -> None:
    """Empty the module-level memos a new run starts without, in versions that keep them: the
    memoised fact texts and the filters' helpers' memo (where the clusterer owns its caches, a
    new clusterer starts empty)."""
    for clear in (getattr(fact_text, "cache_clear", None), getattr(filters, "clear_caches", None)):
        if clear is not None:
            clear()


def cold_clusterer(config: FactUtilConfig, embedder) -> SemanticClusterer:
    """A fresh clusterer with the filters' tables loaded and every memo empty (a run's new step)."""
    clusterer = SemanticClusterer(config, embedder=embedder)
    clusterer.warmup()
    clear_module_memos()
    return clusterer


def growth_point(size: str, backend: str) -> dict:
    """One size of the growth table, in this (fresh) process: the cold step, then the driver's
    step on a new cold clusterer given every rollout's per-fact work made beforehand (untimed,
    one rollout at a time as a rollout worker would). Seconds, MiB."""
    import resource

    rows = build_workload(size)
    occurrences = triple_occurrences(rows)
    config = FactUtilConfig(embedding_backend=backend)
    embedder = make_embedder(backend)
    embedder.encode(["warm up the model"])
    clusterer = cold_clusterer(config, embedder)
    cpu = time.process_time()
    with PeakRSS() as rss:
        cold = compute_process_advantages(rows, config, clusterer=clusterer)
    cold_cpu_s = time.process_time() - cpu
    del clusterer
    preparer = FactPreparer(config, clusterer=cold_clusterer(config, embedder))
    work = [item for item in map(preparer, (row["actions"] for row in rows)) if len(item["parts"])]
    driver = cold_clusterer(config, embedder)
    cpu = time.process_time()
    with PeakRSS() as driver_rss:
        given = compute_process_advantages(rows, config, clusterer=driver, work=work)
    driver_cpu_s = time.process_time() - cpu
    return {
        "size": size, "groups": len({row["uid"] for row in rows}), "rollouts": len(rows),
        "actions": sum(len(row["actions"]) for row in rows), "triples": len(occurrences),
        "unique_texts": len({normalize_fact_text(" | ".join(t)) for t in occurrences}),
        "backend": backend, "cold_s": cold.metrics["time_total_s"],
        "embed_s": cold.metrics.get("cluster_time_embed_s", 0.0),
        "driver_s": given.metrics["time_total_s"], "cold_cpu_s": cold_cpu_s,
        "driver_cpu_s": driver_cpu_s,
        "stages_driver": stage_seconds(given.metrics),
        "identical": given.advantages.tobytes() == cold.advantages.tobytes(),
        "step_extra_rss_mb": rss.extra_mb, "driver_extra_rss_mb": driver_rss.extra_mb,
        # ru_maxrss is KiB on Linux: the process's peak, model and workload included
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch_threads": torch_threads(),
    }


def run_growth(sizes: list[str], backend: str, threads: int | None) -> list[dict]:
    """Each size in a fresh Python process (so ``ru_maxrss`` is that size's peak)."""
    points = []
    for size in sizes:
        command = [sys.executable, str(Path(__file__).resolve()), "--growth-child", size,
                   "--growth-backend", backend]
        if threads is not None:
            command += ["--driver-threads", str(threads)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"growth size {size} failed: {done.stderr[-3000:]}")
        points.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return points


def growth_table(points: list[dict], threads: int | None) -> Table:
    """The growth rows, with the driver's microseconds per triple occurrence (flat = linear)."""
    table = Table(title=f"growth, backend {points[0]['backend']}, driver threads "
                        f"{threads or 'all'} (seconds, MiB)", header_style="bold")
    for column in ("size", "groups × rollouts", "triples", "distinct texts", "cold s", "embed s",
                   "driver s (work given)", "its CPU s", "driver µs / triple",
                   "identical", "step extra MiB", "peak RSS MiB"):
        table.add_column(column, justify="left" if column == "size" else "right")
    for point in points:
        table.add_row(
            point["size"], f"{point['groups']:,} × {point['rollouts'] // point['groups']}",
            f"{point['triples']:,}", f"{point['unique_texts']:,}", f"{point['cold_s']:.3f}",
            f"{point['embed_s']:.3f}", f"{point['driver_s']:.3f}", f"{point['driver_cpu_s']:.3f}",
            f"{point['driver_s'] / point['triples'] * 1e6:.1f}",
            "yes" if point["identical"] else "NO",
            f"{point['step_extra_rss_mb']:.0f}", f"{point['peak_rss_mb']:.0f}",
        )
    return table


class PrepareWorker:
    """A rollout worker: holds one embedder (loaded once, as an agent-loop worker holds its
    model) in a :class:`~factutil.preparer.FactPreparer`, and makes its share's work."""

    def __init__(self, backend: str, rows: int):
        self.config = FactUtilConfig(embedding_backend=backend, embedding_batch_size=rows)
        embedder = make_embedder(backend, batch_size=rows)
        embedder.encode(["warm up the model"])
        self.clusterer = SemanticClusterer(self.config, embedder=embedder)
        self.clusterer.warmup()  # the filters' tables load once per process, like the model
        self.preparer = FactPreparer(self.config, clusterer=self.clusterer)

    def prepare(self, rollouts: list[dict], chunk: int) -> tuple[list, float, float]:
        """(each rollout's work item, CPU seconds, wall seconds) of this share. The rollouts'
        facts are embedded ``chunk`` rollouts per call (1: each rollout alone, as it
        finishes; 0: the whole share in one call, as the preparer does for rollouts that wait
        for it); every rollout's work then holds the facts this worker had not shipped before."""
        cpu, wall = time.process_time(), time.perf_counter()
        size = chunk or len(rollouts)
        if size > 1:
            for start in range(0, len(rollouts), size):
                triples = [triple for row in rollouts[start : start + size]
                           for triple in assert_triples(row["actions"], self.config.max_turns)]
                make_work(triples, self.config, self.clusterer)
        work = [self.preparer(row["actions"]) for row in rollouts]
        # as the adapters: nothing new, nothing shipped
        work = [item for item in work if len(item["parts"])]
        return work, time.process_time() - cpu, time.perf_counter() - wall


def critical_path(rows: list[dict], workers: int, backend: str, reference, reference_cpu_s: float,
                  chunk: int = 1, batch_rows: int = 32, repeat: int = 7) -> dict:
    """The driver's step when K Ray workers made the per-fact work (see the module docstring).
    ``reference``: the cold step of the driver doing everything (its advantages are compared),
    ``reference_cpu_s`` its CPU seconds. The driver's step given the work and the warm step run
    ``repeat`` times each, alternating, the first each on a new cold clusterer; medians. A
    shared machine's noise is larger than this step."""

    import numpy as np
    import ray

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        start = time.perf_counter()
        actor = ray.remote(num_cpus=1)(PrepareWorker)
        pool = [actor.remote(backend, batch_rows) for _ in range(workers)]
        shares = [[rows[int(i)] for i in share] for share in np.array_split(np.arange(len(rows)), workers)]
        shares_refs = [ray.put(share) for share in shares]
        ray.get([worker.__ray_ready__.remote() for worker in pool])
        startup_s = time.perf_counter() - start
        phase = time.perf_counter()
        results = ray.get([worker.prepare.remote(ref, chunk) for worker, ref in zip(pool, shares_refs)])
        worker_wall_s = time.perf_counter() - phase
    finally:
        ray.shutdown()
    work = [item for share, _, _ in results for item in share]
    config = FactUtilConfig(embedding_backend=backend, embedding_batch_size=batch_rows)
    embedder = make_embedder(backend, batch_size=batch_rows)
    embedder.encode(["warm up the model"])
    forms = ("work", "warm")
    runs: dict[str, list[float]] = {form: [] for form in forms}
    cpu_runs: dict[str, list[float]] = {form: [] for form in forms}
    results_of: dict[str, object] = {}
    extra_rss: dict[str, float] = {}
    # the yardstick: the driver doing everything on a warm clusterer (every fact's
    # vector, analysis and checked pair known), the 'warm' row of the table above
    warm = cold_clusterer(config, embedder)
    compute_process_advantages(rows, config, clusterer=warm)
    for _ in range(repeat):
        for form in forms:
            driver = warm if form == "warm" else cold_clusterer(config, embedder)
            cpu, wall = time.process_time(), time.perf_counter()
            with PeakRSS() as rss:
                result = compute_process_advantages(
                    rows, config, clusterer=driver, work=work if form == "work" else None)
            cpu_runs[form].append(time.process_time() - cpu)
            runs[form].append(time.perf_counter() - wall)
            results_of[form] = result
            extra_rss[form] = max(extra_rss.get(form, 0.0), rss.extra_mb)
    result = results_of["work"]
    identical = {form: r.advantages.tobytes() == reference.advantages.tobytes()
                 for form, r in results_of.items()}
    return {
        "driver_s": statistics.median(runs["work"]), "driver_runs_s": runs["work"],
        "driver_cpu_s": statistics.median(cpu_runs["work"]), "driver_cpu_runs_s": cpu_runs["work"],
        "warm_s": statistics.median(runs["warm"]), "warm_runs_s": runs["warm"],
        "warm_cpu_s": statistics.median(cpu_runs["warm"]), "warm_cpu_runs_s": cpu_runs["warm"],
        "driver_over_warm": statistics.median(runs["work"]) / statistics.median(runs["warm"]),
        "driver_over_warm_cpu": statistics.median(cpu_runs["work"]) / statistics.median(cpu_runs["warm"]),
        "worker_cpu_s": sum(cpu for _, cpu, _ in results),
        "worker_wall_s": worker_wall_s,
        "worker_task_wall_s": [wall for _, _, wall in results],
        "workers": workers, "backend": backend, "rollouts": len(rows),
        "prepare_chunk": chunk, "embedding_batch_size": batch_rows,
        "shipped_mb": sum(len(pickle.dumps(item, protocol=5)) for item in work) / 2**20,
        "shipped_npz_mb": sum(len(work_bytes(item)) for item in work) / 2**20,
        "shipped_items": len(work),
        "shipped_facts": sum(len(item["parts"]) for item in work),
        "ray_start_s": startup_s,
        "embedded_by_driver": int(result.metrics.get("cluster_cache_misses", 0)),
        "stages_driver": stage_seconds(result.metrics),
        "driver_extra_rss_mb": extra_rss["work"],
        "identical": identical["work"],
        "identical_warm": identical["warm"],
        "reference_cold_s": reference.metrics["time_total_s"],
        "reference_cold_cpu_s": reference_cpu_s,
    }


def critical_table(entry: dict, threads: int | None) -> Table:
    chunk = {0: "its whole share", 1: "each rollout"}.get(entry["prepare_chunk"], f"{entry['prepare_chunk']} rollouts")
    table = Table(title=f"critical path, size {entry['size']}, backend {entry['backend']}, driver "
                        f"threads {threads or 'all'}, {entry['workers']} Ray workers, one embedding call "
                        f"per {chunk}, passes of {entry['embedding_batch_size']} texts (seconds)",
                  header_style="bold")
    for column in ("driver does everything (cold) s", "its CPU s", "driver_s (work given)",
                   "its CPU s", "warm step s", "driver_s ÷ warm", "worker CPU s",
                   "workers' wall s", "shipped MB (pickled / npz)", "facts shipped",
                   "texts the driver embedded", "identical"):
        table.add_column(column, justify="right")
    table.add_row(f"{entry['reference_cold_s']:.3f}", f"{entry['reference_cold_cpu_s']:.3f}",
                  f"{entry['driver_s']:.3f}", f"{entry['driver_cpu_s']:.3f}",
                  f"{entry['warm_s']:.3f}", f"{entry['driver_over_warm']:.2f}",
                  f"{entry['worker_cpu_s']:.2f}", f"{entry['worker_wall_s']:.2f}",
                  f"{entry['shipped_mb']:.1f} / {entry['shipped_npz_mb']:.1f}",
                  f"{entry['shipped_facts']:,}", str(entry["embedded_by_driver"]),
                  "yes" if entry["identical"] and entry["identical_warm"] else "no")
    return table


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=tuple(SIZES))
    parser.add_argument("--backends", default="minilm,minilm-int8,static",
                        help="comma list, or 'none' for the growth / critical-path sections alone")
    parser.add_argument("--driver-threads", type=int, metavar="N",
                        help="threads of this process (BLAS/OpenMP pools and torch), as Ray gives a 1-CPU actor")
    parser.add_argument("--growth", metavar="SIZES", help=f"comma list of {','.join(GROWTH_SIZES)}")
    parser.add_argument("--growth-backend", default="static")
    parser.add_argument("--growth-child", choices=GROWTH_SIZES, help=argparse.SUPPRESS)
    parser.add_argument("--critical-path", action="store_true",
                        help="the step with the per-fact work done by --workers Ray workers")
    parser.add_argument("--workers", type=int, default=2, metavar="K")
    parser.add_argument("--repeat", type=int, default=7, metavar="N",
                        help="critical path: driver steps per form (median; the forms alternate)")
    parser.add_argument("--critical-backend", default="minilm")
    parser.add_argument("--prepare-chunk", type=int, default=1, metavar="N",
                        help="rollouts per embedding call in a worker (1: each rollout alone; 0: its whole share)")
    parser.add_argument("--embedding-batch-size", type=int, metavar="ROWS",
                        help="the config's embedding_batch_size (rows per fixed-shape pass) for every backend run")
    parser.add_argument("--quick", action="store_true", help="size S, no naive baseline, no quality run")
    parser.add_argument("--no-naive", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.driver_threads is not None and args.driver_threads < 1:
        parser.error(f"--driver-threads must be >= 1 (got {args.driver_threads})")
    if args.prepare_chunk < 0:
        parser.error(f"--prepare-chunk must be >= 0 (got {args.prepare_chunk})")
    if args.embedding_batch_size is not None and args.embedding_batch_size < 1:
        parser.error(f"--embedding-batch-size must be >= 1 (got {args.embedding_batch_size})")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1 (got {args.workers})")
    growth = [] if not args.growth else [size.strip() for size in args.growth.split(",")]
    for size in growth:
        if size not in GROWTH_SIZES:
            parser.error(f"--growth: unknown size {size!r} (choose from {','.join(GROWTH_SIZES)})")
    set_torch_threads(args.driver_threads)
    if args.growth_child:
        print(json.dumps(growth_point(args.growth_child, args.growth_backend)))
        return
    size = "S" if args.quick else args.size
    rows_per_pass = args.embedding_batch_size or FactUtilConfig().embedding_batch_size
    rows = build_workload(size)
    occurrences = triple_occurrences(rows)
    unique = sorted({normalize_fact_text(" | ".join(t)) for t in occurrences})
    console = Console(width=max(Console().width, 140))
    console.print(f"workload {size}: {len({r['uid'] for r in rows})} groups, {len(rows)} rollouts, "
                  f"{sum(len(r['actions']) for r in rows)} actions, {len(occurrences)} triples, "
                  f"{len(unique)} distinct texts; {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")

    report: dict = {"size": size, "triples": len(occurrences), "unique_texts": len(unique),
                    "naive_s": None, "peak_extra_rss_mb": 0.0, "backends": {},
                    "driver_threads": args.driver_threads, "torch_threads": torch_threads(),
                    "embedding_batch_size": rows_per_pass,
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count(),
                    "load_average_1min": {"start": os.getloadavg()[0]}}
    naive_embedder = None
    cold_results = {}
    backends = [] if args.backends == "none" else args.backends.split(",")
    for backend in backends:
        config = FactUtilConfig(embedding_backend=backend, embedding_batch_size=rows_per_pass)
        embedder = make_embedder(backend, batch_size=rows_per_pass)
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
        clear_module_memos()
        cpu = time.process_time()
        with PeakRSS() as rss:
            cold = compute_process_advantages(rows, config, clusterer=clusterer)
        cold_cpu_s = time.process_time() - cpu
        cpu = time.process_time()
        warm = compute_process_advantages(rows, config, clusterer=clusterer)
        warm_cpu_s = time.process_time() - cpu
        # Only the embeddings known: a new clusterer sharing the cache, its fact and pair memos
        # empty (facts seen before, met in new combinations).
        clear_module_memos()
        fresh = SemanticClusterer(config, embedder=embedder, cache=clusterer.cache)
        embeddings_only = compute_process_advantages(rows, config, clusterer=fresh)
        assert embeddings_only.advantages.tobytes() == cold.advantages.tobytes(), "memo changed a result"
        assert warm.advantages.tobytes() == cold.advantages.tobytes(), "warm and cold steps differ"
        cold_results[backend] = (cold, cold_cpu_s)
        entry = {"cold_s": cold.metrics["time_total_s"], "warm_s": warm.metrics["time_total_s"],
                 "cold_cpu_s": cold_cpu_s, "warm_cpu_s": warm_cpu_s,
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
    if backends:
        console.print(table)
        for backend, entry in report["backends"].items():
            console.print(f"{backend}: CPU seconds of the step (time.process_time, this process's threads): "
                          f"cold {entry['cold_cpu_s']:.3f}, warm {entry['warm_cpu_s']:.3f}")
    if naive_s is not None:
        console.print(f"naive (MiniLM; per group: embed its occurrences, {len(occurrences)} in all, + sklearn "
                      f"average linkage): {naive_s:.2f} s; 'naive ÷' = naive / that row's factutil step")
    if "minilm" in report["backends"] and not args.quick:
        reference = report["backends"]["minilm"]["bcubed_f1"]
        for backend, entry in report["backends"].items():
            console.print(f"B-cubed F1 (dev set, t = {FactUtilConfig().sim_threshold}) {backend}: "
                          f"{entry['bcubed_f1']:.3f} (loss vs minilm {reference - entry['bcubed_f1']:+.3f})")
    if args.critical_path:
        backend = args.critical_backend
        reference, reference_cpu_s = cold_results.get(backend, (None, None))
        if reference is None:  # the driver doing everything, cold, as in the table above
            embedder = make_embedder(backend, batch_size=rows_per_pass)
            embedder.encode(unique[:256])
            config = FactUtilConfig(embedding_backend=backend, embedding_batch_size=rows_per_pass)
            clusterer = cold_clusterer(config, embedder)
            cpu = time.process_time()
            reference = compute_process_advantages(rows, config, clusterer=clusterer)
            reference_cpu_s = time.process_time() - cpu
        report["critical_path"] = {"size": size, **critical_path(
            rows, args.workers, backend, reference, reference_cpu_s, args.prepare_chunk, rows_per_pass,
            args.repeat)}
        console.print(critical_table(report["critical_path"], args.driver_threads))
        entry = report["critical_path"]
        console.print(f"identical: work given {'yes' if entry['identical'] else 'no'} (advantages "
                      "vs the driver doing everything)")
        console.print("driver stages, work given: " + ", ".join(
            f"{name} {seconds:.3f}" for name, seconds in entry["stages_driver"].items()))
    if growth:
        report["growth"] = run_growth(growth, args.growth_backend, args.driver_threads)
        console.print(growth_table(report["growth"], args.driver_threads))
    report["load_average_1min"]["end"] = os.getloadavg()[0]
    console.print(f"1-min load average {report['load_average_1min']['start']:.1f} at the start, "
                  f"{report['load_average_1min']['end']:.1f} at the end; driver threads "
                  f"{args.driver_threads or 'all'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
