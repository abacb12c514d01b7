"""The same training step timed on two checkouts of factutil, alternating, in one run.

    python benchmarks/step_before_after.py --before DIR [--after DIR] [--size L]
                                           [--modes exact,static] [--before-modes MODES]
                                           [--rounds 7] [--json FILE]
    python benchmarks/step_before_after.py --checkout NAME=DIR ... --cells NAME:MODE,...
                                           [--ratios CELL/CELL,...] [--size L] [--rounds 7]

Starts one worker process per checkout (``PYTHONPATH=DIR``; ``--after`` defaults to this
repository), each holding the workload of ``benchmarks/workloads.py`` in memory. Then, for each
mode, it runs the step ``compute_process_advantages(rows, config)`` ``--rounds`` times in each
worker, alternating before/after (ABBA order, so a drift in the machine's load falls on both
alike), after one untimed warm-up step each. Modes: ``exact``; ``static`` (semantic with the
static embedding backend, a fresh clusterer each step, so embeddings, filters and linkage are all
paid every time; a version whose filters memoise at module level has those memos cleared before
each step, so both start cold); ``minilm`` (the same with MiniLM: minutes per step on a CPU);
``shipped`` (``static``, a fresh clusterer given every rollout's per-fact work, which each
checkout made once, untimed, as two rollout workers' :class:`factutil.preparer.FactPreparer`
make it: the trainer driver's step; checkouts that have :mod:`factutil.workers` only); ``warm`` (``static`` through one clusterer kept across steps, its memos
filled by the untimed warm-up step: the issue's 'warm step' row, the driver doing everything with
every vector, analysis and checked pair known). Three modes time the driver's clusterer as a
trainer keeps it, its model loaded and every fact of the step new to it, given the shipped work:
``kept`` (it analyses every fact itself, as the step does), ``analysed`` (every analysis given
free: the floor of any design that ships analyses) and ``checked`` (the design not taken: each
fact's analysis shipped as JSON beside the work, checked on the driver by a strict schema in
pydantic's core and rebuilt, timed; built in this script only). ``--before-modes`` runs another mode on the before
checkout in each pair (a comma list as long as ``--modes``): ``--before <checkout of e7caa28>
--modes shipped --before-modes warm`` times today's driver given the workers' work against the warm step
of the code whose timings set issue 16's targets, on the same machine at the same moments, so the
ratio carries those targets over to this machine.

``--checkout NAME=DIR`` (repeatable) with ``--cells NAME:MODE,...`` instead runs every cell (a
checkout and one of its modes) once per round, the order rotating each round, and prints each
cell's medians and the ``--ratios A/B,...`` of cells (``here:shipped/here:warm``): every ratio
from the same rounds, so a busy machine's drift falls on both sides alike. The ``shipped`` cells
also report the work's size pickled (protocol 5: what Ray and verl's TransferQueue move).

Prints, per mode, the median step time of each checkout (wall clock, and the CPU time of the
worker, which a busy machine disturbs less) and the ratios after / before (below 1: the after
checkout is faster), the median of each stage's own ``time_*_s`` metric, and checks the two give
the same advantages (sha256 of the float32 bytes). ``--backend minilm`` runs the static,
shipped and warm modes with MiniLM instead of the static embedding (issue 16's default backend).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import hashlib, importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("workloads", sys.argv[1])
workloads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(workloads)
import factutil
from factutil import FactUtilConfig, compute_process_advantages, filters
rows = workloads.build_workload(sys.argv[2])
backend = sys.argv[3]  # of the static, shipped and warm modes
configs = {
    "exact": FactUtilConfig(mode="exact"),
    "static": FactUtilConfig(mode="semantic", embedding_backend=backend),
    "minilm": FactUtilConfig(mode="semantic", embedding_backend="minilm"),
    "shipped": FactUtilConfig(mode="semantic", embedding_backend=backend),
    "warm": FactUtilConfig(mode="semantic", embedding_backend=backend),
}
work = None
warm = None


def shipped_work():
    # every rollout's work made once here (untimed), as two rollout workers' preparers make it
    global work
    if work is None:
        from factutil.cluster import SemanticClusterer
        from factutil.preparer import FactPreparer
        clusterer = SemanticClusterer(configs["shipped"])
        preparers = [FactPreparer(configs["shipped"], clusterer=clusterer) for _ in range(2)]
        work = [preparers[2 * b // len(rows)](row["actions"]) for b, row in enumerate(rows)]
        # as the adapters: nothing new, nothing shipped (a mapping's facts are its parts)
        work = [item for item in work if len(item["parts"] if isinstance(item, dict) else item)]
    return work


def shipped_mb():
    import pickle
    return sum(len(pickle.dumps(item, protocol=5)) for item in shipped_work()) / 2**20


def fresh_clusterer():
    # a clusterer new to every fact of the step, its model loaded: the trainer driver's kept
    # clusterer meeting a step of new questions (its embedder is the warm one's, so no model load)
    from factutil.cluster import SemanticClusterer
    return SemanticClusterer(configs["shipped"], embedder=warm_clusterer().embedder)


def warm_clusterer():
    global warm
    if warm is None:
        from factutil.cluster import SemanticClusterer
        warm = SemanticClusterer(configs["warm"])
        compute_process_advantages(rows, configs["warm"], clusterer=warm)
    return warm


analyses = None


def shipped_analyses():
    # the design not taken, for its measurement only: each fact's filter analysis shipped as
    # JSON beside the work, checked on the driver by a strict schema (pydantic's core), then
    # rebuilt; made once here (untimed), as the workers would
    global analyses
    if analyses is None:
        parts = [tuple(p.decode() for p in three) for item in shipped_work() for three in item["parts"]]
        from factutil.filters import FilterCache, analyze
        cache = FilterCache()
        analyses = (parts, json.dumps([
            [f.subject_key, f.object_key, f.relation_id, f.inverse, f.negated,
             [list(q) for q in f.quantities], f.relation_key, f.symmetric, list(f.negation_cues),
             sorted(f.words)] for f in (analyze(*p, cache=cache) for p in parts)]).encode())
    return analyses


def checked_clusterer():
    # (timed) the shipped analyses checked and put into a fresh clusterer's fact memo
    from itertools import count
    from pydantic import ConfigDict, TypeAdapter
    from factutil.cluster.memo import FactRecord
    from factutil.facts import fact_text
    from factutil.filters import FactFeatures
    from factutil.filters.entities import plain_key
    schema = TypeAdapter(list[tuple[str, str, str | None, bool, bool, list[list[str | int | float]],
                                    str, bool, list[str], list[str]]], config=ConfigDict(strict=True))
    parts, wire = shipped_analyses()
    clusterer = fresh_clusterer()
    serials = count()
    template = configs["shipped"].triple_template
    for (s, r, o), (sk, ok, rid, inv, neg, qs, rk, sym, cues, words) in zip(
            parts, schema.validate_json(wire)):
        quantities = tuple(map(tuple, qs))
        key = (rk, plain_key(sk), plain_key(ok), neg,
               tuple(q[:4] if q[1] == "qty" else q for q in quantities))
        features = FactFeatures(s, r, o, sk, ok, rid, inv, neg, quantities, key, rk, sym,
                                tuple(cues), frozenset(words))
        clusterer.memo.records[(s, r, o)] = FactRecord(
            fact_text(s, r, o, template), features, hash(key), next(serials))
    clusterer.memo._serials = serials
    return clusterer


print(json.dumps({"ready": os.path.dirname(factutil.__file__)}), flush=True)
result = None
for line in sys.stdin:
    mode = line.strip()
    result = None  # the previous step's result is freed before the clock starts
    clusterer = {}
    if mode == "shipped":
        clusterer = {"work": shipped_work()}
    if mode in ("kept", "analysed", "checked"):
        clusterer = {"work": shipped_work()}
        if mode == "checked":
            shipped_analyses()
        elif mode == "analysed":  # every analysis given free: the floor of any shipped analysis
            kept = fresh_clusterer()
            for key, record in warm_clusterer().memo.records.items():
                kept.memo.records[key] = record._replace(truncated=None)
            clusterer["clusterer"] = kept
        else:
            clusterer["clusterer"] = fresh_clusterer()
    if mode == "warm":  # one clusterer for every step: the first (untimed) one fills its memos
        if warm is None:
            from factutil.cluster import SemanticClusterer
            warm = SemanticClusterer(configs["warm"])
        clusterer = {"clusterer": warm}
    elif hasattr(filters, "clear_caches"):  # a version whose filters memoise at module level
        filters.clear_caches()
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "checked":
        clusterer["clusterer"] = checked_clusterer()
    result = compute_process_advantages(rows, configs.get(mode, configs["shipped"]), **clusterer)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    digest = hashlib.sha256(result.advantages.tobytes()).hexdigest()
    stages = {k: v for k, v in result.metrics.items() if k.startswith("time_")}
    extra = {"shipped_mb": shipped_mb()} if mode == "shipped" else {}
    if mode == "checked":
        extra["analyses_mb"] = len(shipped_analyses()[1]) / 2**20
    print(json.dumps({"seconds": seconds, "cpu": cpu, "digest": digest, "stages": stages, **extra}),
          flush=True)
"""


class Worker:
    """A process that runs the step on one checkout when asked."""

    def __init__(self, checkout: Path, size: str, backend: str = "static"):
        env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(ROOT / "benchmarks/workloads.py"), size, backend],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/",
        )
        self.package = json.loads(self.process.stdout.readline())["ready"]

    def step(self, mode: str) -> dict:
        """One step in ``mode``: ``{"seconds": float, "digest": str}``."""
        self.process.stdin.write(mode + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker of {self.package} died (exit {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def run_cells(checkouts: dict[str, Path], cells: list[tuple[str, str]], size: str,
              backend: str, rounds: int) -> dict:
    """Each cell's steps, one per round after an untimed warm-up, the order rotating (and
    reversed every other round); per cell the medians, the step's stages and its digest."""
    workers = {name: Worker(path.resolve(), size, backend) for name, path in checkouts.items()
               if any(cell[0] == name for cell in cells)}
    runs: dict[tuple[str, str], list[dict]] = {cell: [] for cell in cells}
    digests = {}
    try:
        for cell in cells:
            digests[cell] = workers[cell[0]].step(cell[1])["digest"]
        for r in range(rounds):
            order = cells[r % len(cells):] + cells[: r % len(cells)]
            for cell in order if r % 2 == 0 else order[::-1]:
                runs[cell].append(workers[cell[0]].step(cell[1]))
    finally:
        for worker in workers.values():
            worker.close()
    figures = {}
    for (name, mode), steps in runs.items():
        figures[f"{name}:{mode}"] = {
            "package": workers[name].package, "digest": digests[(name, mode)],
            "median_s": statistics.median(step["seconds"] for step in steps),
            "cpu_median_s": statistics.median(step["cpu"] for step in steps),
            "times": [step["seconds"] for step in steps],
            "stage_medians_s": {key: statistics.median(step["stages"][key] for step in steps)
                                for key in steps[0]["stages"]},
            **{key: steps[0][key] for key in ("shipped_mb", "analyses_mb") if key in steps[0]},
        }
    return figures


def main_cells(args: argparse.Namespace) -> int:
    checkouts = {name: Path(path) for name, _, path in
                     (entry.partition("=") for entry in args.checkout)}
    cells = [tuple(cell.split(":", 1)) for cell in args.cells.split(",")]
    figures = {"size": args.size, "rounds": args.rounds, "backend": args.backend,
               "load_average_1min": [os.getloadavg()[0]],
               "cells": run_cells(checkouts, cells, args.size, args.backend, args.rounds)}
    figures["load_average_1min"].append(os.getloadavg()[0])
    print(f"{args.size} step, median of {args.rounds} rounds, every cell once a round (load "
          f"{figures['load_average_1min'][0]:.1f} -> {figures['load_average_1min'][1]:.1f})\n")
    print("| cell | checkout | wall s | CPU s | load s | cluster s | shipped MB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for cell, row in figures["cells"].items():
        stages = row["stage_medians_s"]
        shipped = f"{row['shipped_mb']:.2f}" if "shipped_mb" in row else ""
        if "analyses_mb" in row:
            shipped = f"+{row['analyses_mb']:.2f} (analyses)"
        print(f"| {cell} | {row['package']} | {row['median_s']:.3f} | {row['cpu_median_s']:.3f} | "
              f"{stages.get('time_load_s', 0):.3f} | {stages.get('time_cluster_s', 0):.3f} | "
              f"{shipped} |")
    figures["ratios"] = {}
    for ratio in filter(None, (args.ratios or "").split(",")):
        top, bottom = (figures["cells"][cell] for cell in ratio.split("/"))
        figures["ratios"][ratio] = {"wall": top["median_s"] / bottom["median_s"],
                                    "cpu": top["cpu_median_s"] / bottom["cpu_median_s"]}
    if figures["ratios"]:
        print("\n| ratio | wall | CPU |\n| --- | --- | --- |")
        for ratio, values in figures["ratios"].items():
            print(f"| {ratio} | {values['wall']:.3f} | {values['cpu']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="checkout of the older factutil")
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=DIR",
                        help="a checkout the --cells name (repeatable)")
    parser.add_argument("--cells", help="comma list of NAME:MODE, every one run once a round")
    parser.add_argument("--ratios", help="comma list of CELL/CELL to print")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout of the newer (default: here)")
    parser.add_argument("--size", default="L", choices=["S", "M", "L"])
    parser.add_argument("--modes", default="exact,static",
                        help="comma list of exact, static, minilm, shipped, warm, kept, "
                             "analysed, checked")
    parser.add_argument("--backend", default="static", choices=("static", "minilm"),
                        help="the embedding backend of the static, shipped and warm modes "
                             "(minilm: each checkout's first step or shipped rows embed every "
                             "text, about half a minute here)")
    parser.add_argument("--before-modes", help="the mode the before checkout runs for each of "
                        "--modes (a comma list as long; default the same)")
    parser.add_argument("--rounds", type=int, default=7, help="timed steps per checkout and mode")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.cells:
        return main_cells(args)
    if args.before is None:
        parser.error("--before (or --checkout with --cells) is needed")
    workers = {"before": Worker(args.before.resolve(), args.size, args.backend),
               "after": Worker(args.after.resolve(), args.size, args.backend)}
    figures: dict = {"size": args.size, "rounds": args.rounds, "backend": args.backend,
                     "modes": {}}
    modes = args.modes.split(",")
    before_modes = args.before_modes.split(",") if args.before_modes else modes
    if len(before_modes) != len(modes):
        parser.error(f"--before-modes names {len(before_modes)} modes, --modes {len(modes)}")
    try:
        for mode, before_mode in zip(modes, before_modes):
            run = {"before": before_mode, "after": mode}
            digests = {name: worker.step(run[name])["digest"] for name, worker in workers.items()}
            times: dict[str, list[float]] = {"before": [], "after": []}
            cpu: dict[str, list[float]] = {"before": [], "after": []}
            stages: dict[str, list[dict]] = {"before": [], "after": []}
            for r in range(args.rounds):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for name in order:
                    step = workers[name].step(run[name])
                    times[name].append(step["seconds"])
                    cpu[name].append(step["cpu"])
                    stages[name].append(step["stages"])
            before, after = statistics.median(times["before"]), statistics.median(times["after"])
            cpu_before, cpu_after = statistics.median(cpu["before"]), statistics.median(cpu["after"])
            label = mode if before_mode == mode else f"{before_mode} -> {mode}"
            figures["modes"][label] = {
                "before_mode": before_mode, "after_mode": mode,
                "before_s": before, "after_s": after, "ratio": after / before,
                "cpu_before_s": cpu_before, "cpu_after_s": cpu_after, "cpu_ratio": cpu_after / cpu_before,
                "same_advantages": digests["before"] == digests["after"],
                "digest": digests["after"],  # sha256 of the after checkout's advantages
                "times": times,
                "stage_medians_s": {
                    name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
                    for name, runs in stages.items()
                },
            }
    finally:
        for worker in workers.values():
            worker.close()
    print(f"{args.size} step, median of {args.rounds} alternating runs per checkout")
    print(f"before: {workers['before'].package}\nafter:  {workers['after'].package}\n")
    print("| mode | before s | after s | after / before | CPU before s | CPU after s | "
          "CPU after / before | same advantages |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode, row in figures["modes"].items():
        print(f"| {mode} | {row['before_s']:.3f} | {row['after_s']:.3f} | {row['ratio']:.3f} | "
              f"{row['cpu_before_s']:.3f} | {row['cpu_after_s']:.3f} | {row['cpu_ratio']:.3f} | "
              f"{'yes' if row['same_advantages'] else 'NO'} |")
    print("\nmedian seconds per stage (the step's own time_*_s metrics)")
    for mode, row in figures["modes"].items():
        medians = row["stage_medians_s"]
        keys = [k for k in medians["after"] if k in medians["before"]]
        print(f"{mode}: " + ", ".join(
            f"{k.removeprefix('time_').removesuffix('_s')} {medians['before'][k]:.4f}->{medians['after'][k]:.4f}"
            for k in keys
        ))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
