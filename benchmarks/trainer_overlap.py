"""verl's factutil trainer: what the advantage step costs with and without scoring early.

    python benchmarks/trainer_overlap.py [--size L] [--backend minilm] [--old-log-prob-s 5]
                                         [--rounds 3] [--workers 2] [--driver-threads 1]
                                         [--json FILE]

Runs the real trainer (``trainer.v1.trainer_mode=factutil``, verl's own ``ppo_trainer`` config,
a local Ray with verl's TransferQueue) on workload ``--size`` of ``benchmarks/workloads.py`` as
span-layout rows (one row per rollout, 256 response tokens, one run of 20 model tokens per action,
the reward on the last action's last token), each rollout's per-fact work in its extra fields as
the ``factagent`` loop puts it there (a work item, :mod:`factutil.workers`, from one of
``--workers`` rollout workers' :class:`factutil.preparer.FactPreparer` (contiguous shares,
as verl deals a batch out), each shipping a fact once; made beforehand, not timed; its pickled size is reported as ``work_bytes``). Per
round and mode (``score_early`` on, then off; a fresh clusterer each time, so no memo carries
over), the batch is written to TransferQueue, the trainer's old-log-prob step runs with verl's
actor workers replaced by a wait of ``--old-log-prob-s`` seconds (the driver waits on the actors
there), then the advantage step (``_compute_advantage``: factutil's, with verl's GRPO only where
a row keeps it) is timed. The old-log-prob step's time beyond the wait is what starting the early
thread adds there. Each round first times verl's own advantage step on the same batch (its GRPO
alone, what ``trainer_mode=sync`` runs).

Prints, per mode, the median wall seconds of the advantage step, verl's own step, the time the
factutil trainer adds ÷ verl's own step (per round, then the median), factutil's part of its step
(``factutil/time_trainer_ms``), how long it still waited for the early thread
(``factutil/time_wait_ms``), and whether both modes wrote the same advantages (bit for bit).
``--driver-threads 1`` gives the process the one thread verl's driver actor has.
"""

from __future__ import annotations

import os
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
if "--driver-threads" in sys.argv[1:-1]:
    _threads = sys.argv[sys.argv.index("--driver-threads") + 1]
    if _threads.isdigit() and int(_threads) >= 1:
        for _name in THREAD_VARIABLES:  # read by the BLAS/OpenMP pools when numpy and torch load
            os.environ[_name] = _threads
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import json
import pickle
import statistics
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.workloads import SIZES, build_workload
from factutil import FactUtilConfig
from factutil.cluster import SemanticClusterer
from factutil.integration import TrainerStep
from factutil.preparer import FactPreparer
from factutil.workers import assert_triples, make_work

TOKENS, RUN, STRIDE = 256, 20, 30


def verl_fields(rows: list[dict], config: FactUtilConfig,
                workers: int) -> tuple[list[str], list[dict], int]:
    """(keys, per-row TransferQueue fields, work bytes) of ``rows`` in the span layout, the
    rollouts dealt to ``workers`` in contiguous shares (as verl chunks a batch over its agent-loop
    workers: a group's rollouts in one share), each with its per-fact work (the facts its worker had not shipped
    before) in its extra fields; the work's size pickled (protocol 5)."""
    clusterer = SemanticClusterer(config)
    # one embedding pass; each rollout's own work below
    make_work([t for row in rows for t in assert_triples(row["actions"], config.max_turns)],
              config, clusterer)
    preparers = [FactPreparer(config, clusterer=clusterer) for _ in range(workers)]
    keys, fields, size = [], [], 0
    for b, row in enumerate(rows):
        count = len(row["actions"])
        mask = torch.zeros(TOKENS, dtype=torch.int64)
        for a in range(count):
            mask[a * STRIDE : a * STRIDE + RUN] = 1
        length = (count - 1) * STRIDE + RUN
        scores = torch.zeros(length)
        scores[length - 1] = 1.0 if b % 3 else 0.0
        actions = [{"kind": a["action"], **{k: v for k, v in a.items() if k != "action"}}
                   for a in row["actions"]]
        work = preparers[b * workers // len(rows)](row["actions"])
        new = len(work["parts"])
        extra = {"work": work} if new else {}  # as the factagent loop: nothing new, nothing shipped
        size += len(pickle.dumps(work, protocol=5)) if new else 0
        keys.append(f"{row['uid']}_{row['rollout_id']}_0")
        fields.append({
            "uid": row["uid"], "responses": torch.arange(length, dtype=torch.int64),
            "response_mask": mask[:length].clone(), "rm_scores": scores,
            "extra_fields": {"factutil": {"actions": actions, "question": row["question"],
                                          "golden_answers": row["golden_answers"],
                                          **extra}},
        })
    return keys, fields, size


def main(argv: list[str] | None = None) -> dict:
    """Run both modes, print the table, write ``--json``; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=tuple(SIZES))
    parser.add_argument("--backend", default="minilm", choices=("minilm", "minilm-int8", "static"))
    parser.add_argument("--old-log-prob-s", type=float, default=5.0,
                        help="seconds the driver waits on the actors' old log-probs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="rollout workers making the work")
    parser.add_argument("--driver-threads", type=int, metavar="N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.old_log_prob_s < 0:
        parser.error(f"--rounds must be >= 1 and --old-log-prob-s >= 0 (got {args.rounds}, "
                     f"{args.old_log_prob_s})")
    if args.driver_threads is not None:
        torch.set_num_threads(args.driver_threads)

    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integrations" / "verl" / "tests"))
    from verl_testkit import compose_verl_config

    rows = build_workload(args.size)
    config = FactUtilConfig(embedding_backend=args.backend)
    console = Console(width=max(Console().width, 120))
    console.print(f"workload {args.size}: {len(rows)} rollouts; shipping each rollout's per-fact "
                  f"work ({args.backend}) ...")
    keys, fields, work_bytes = verl_fields(rows, config, args.workers)
    console.print(f"work shipped: {work_bytes / 2**20:.1f} MiB from {args.workers} workers")

    def old_log_prob(self, batch, metrics=None):  # the driver waiting on verl's actor workers
        time.sleep(args.old_log_prob_s)
        return batch

    PPOTrainer._compute_old_log_prob = old_log_prob
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    report: dict = {"size": args.size, "backend": args.backend, "rollouts": len(rows),
                    "old_log_prob_s": args.old_log_prob_s, "driver_threads": args.driver_threads,
                    "workers": args.workers, "work_bytes": work_bytes,
                    "load_average_1min": [os.getloadavg()[0]], "modes": {}}
    try:
        trainers = {}
        for early in (True, False):
            verl_config = compose_verl_config(
                "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=6",
                "trainer.v1.trainer_mode=factutil",
                f"+algorithm.factutil.embedding_backend={args.backend}",
                f"+algorithm.factutil.score_early={str(early).lower()}")
            trainers[early] = get_trainer_cls("factutil")(verl_config)
        written: dict[bool, bytes] = {}
        runs: dict[bool, list[dict]] = {True: [], False: []}
        tags = [{"status": "success", "seq_len": 8 + len(f["responses"]),
                 "response_len": len(f["responses"])} for f in fields]
        verl_own: list[float] = []
        for _ in range(args.rounds):
            # verl's own advantage step (its GRPO alone, as trainer_mode=sync runs it) on the batch
            meta = tq.kv_batch_put(keys=keys, partition_id="train",
                                   fields=list_of_dict_to_tensordict(fields), tags=tags)
            start = time.perf_counter()
            PPOTrainerSync._compute_advantage(trainers[True], meta, {})
            verl_own.append(time.perf_counter() - start)
            for early, trainer in trainers.items():
                # a new run's clusterer: nothing memoised from the round before
                trainer.factutil_step = TrainerStep(trainer.factutil_config)
                meta = tq.kv_batch_put(keys=keys, partition_id="train",
                                       fields=list_of_dict_to_tensordict(fields), tags=tags)
                metrics: dict[str, float] = {}
                start = time.perf_counter()
                meta = trainer._compute_old_log_prob(meta, metrics)
                old_log_prob_extra_s = time.perf_counter() - start - args.old_log_prob_s
                start = time.perf_counter()
                trainer._compute_advantage(meta, metrics)
                seconds = time.perf_counter() - start
                data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])
                written[early] = b"".join(t.numpy().tobytes() for t in data["advantages"].unbind())
                runs[early].append({
                    "advantage_step_s": seconds,
                    "verl_own_s": verl_own[-1],
                    "added_over_verl_own": (seconds - verl_own[-1]) / verl_own[-1],
                    "old_log_prob_extra_s": old_log_prob_extra_s,
                    "factutil_s": metrics["factutil/time_trainer_ms"] / 1000.0,
                    "wait_s": metrics.get("factutil/time_wait_ms", 0.0) / 1000.0,
                    "score_s": metrics.get("factutil/time_adapter_ms", 0.0) / 1000.0,
                    "early_used": metrics.get("factutil/score_early_used", 0.0),
                    "fallback": metrics["factutil/batch_fallback"],
                    "groups_fallback": metrics.get("factutil/groups_fallback", 0.0),
                })
    finally:
        tq.close()
        ray.shutdown()
    report["load_average_1min"].append(os.getloadavg()[0])
    report["identical"] = written[True] == written[False]
    table = Table(title=f"verl factutil trainer, advantage step, size {args.size}, {args.backend}, "
                        f"old log-probs {args.old_log_prob_s:g} s, driver threads "
                        f"{args.driver_threads or 'all'} (seconds, median of {args.rounds})",
                  header_style="bold")
    for column in ("score_early", "old-log-prob step beyond the wait", "advantage step",
                   "verl's own step", "added ÷ verl's own", "of which factutil",
                   "waited for the thread", "scoring itself", "early result used",
                   "groups fallen back"):
        table.add_column(column, justify="right")
    for early in (True, False):
        median = {name: statistics.median(run[name] for run in runs[early]) for name in runs[early][0]}
        report["modes"]["on" if early else "off"] = {"median": median, "runs": runs[early]}
        table.add_row("on" if early else "off", f"{median['old_log_prob_extra_s']:.3f}",
                      f"{median['advantage_step_s']:.3f}", f"{median['verl_own_s']:.3f}",
                      f"{median['added_over_verl_own']:+.2f}",
                      f"{median['factutil_s']:.3f}", f"{median['wait_s']:.3f}",
                      f"{median['score_s']:.3f}", f"{median['early_used']:.0f}",
                      f"{median['groups_fallback']:.0f}")
    console.print(table)
    console.print(f"same advantages with and without scoring early: "
                  f"{'yes' if report['identical'] else 'NO'}; 1-min load average "
                  "{:.1f} at the start, {:.1f} at the end".format(*report["load_average_1min"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
