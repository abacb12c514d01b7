"""Per-step cost of the verl adapter around the core, at the reference workloads.

    python benchmarks/adapter_latency.py [--size S|M|L] [--backend static] [--repeat 3]

Builds a verl batch in the span layout (one row per rollout, T = 256 tokens, one run of 20 model
tokens per action, the reward on the last action's last token) from ``benchmarks/workloads.py``
and times :func:`factutil_verl.advantage.compute_factagent_advantages` (parse the rows' stored
actions, score with the core, scatter each action's advantage onto its tokens, GRPO fallback)
against the core's ``compute_process_advantages`` on the same rollouts, with one warm clusterer.
Needs factutil-verl (``pip install -e integrations/verl``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.workloads import build_workload
from factutil import FactUtilConfig, compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.embed import make_embedder

TOKENS, RUN, STRIDE = 256, 20, 30


def verl_batch(rows: list[dict]) -> dict:
    """The keyword arguments of ``compute_factagent_advantages`` for ``rows`` (span layout)."""
    mask = torch.zeros(len(rows), TOKENS, dtype=torch.int64)
    scores = torch.zeros(len(rows), TOKENS)
    keys, uids, extras = [], [], []
    for b, row in enumerate(rows):
        for a in range(len(row["actions"])):
            mask[b, a * STRIDE : a * STRIDE + RUN] = 1
        scores[b, (len(row["actions"]) - 1) * STRIDE + RUN - 1] = 1.0 if b % 3 else 0.0
        keys.append(f"{row['uid']}_{row['rollout_id']}_0")
        uids.append(row["uid"])
        actions = [{"kind": a["action"], **{k: v for k, v in a.items() if k != "action"}}
                   for a in row["actions"]]
        extras.append({"factutil": {"actions": actions, "question": row["question"],
                                    "golden_answers": row["golden_answers"]}})
    return {"keys": keys, "uids": uids, "extra_fields": extras, "response_mask": mask,
            "token_level_rewards": scores, "grpo_advantages": torch.zeros(len(rows), TOKENS)}


def main() -> None:
    """Time adapter and core side by side and print the table."""
    from factutil_verl.advantage import compute_factagent_advantages

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=("S", "M", "L"))
    parser.add_argument("--backend", default="static")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = build_workload(args.size)
    config = FactUtilConfig(embedding_backend=args.backend)
    clusterer = SemanticClusterer(config, embedder=make_embedder(args.backend))
    batch = verl_batch(rows)
    first = compute_factagent_advantages(**batch, config=config, clusterer=clusterer)  # fills the caches
    if first.fallback:
        raise SystemExit(f"{len(first.fallback)} groups fell back: {next(iter(first.fallback.items()))}")
    adapter, core = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        compute_factagent_advantages(**batch, config=config, clusterer=clusterer)
        adapter.append(time.perf_counter() - start)
        start = time.perf_counter()
        compute_process_advantages(rows, config, clusterer=clusterer)
        core.append(time.perf_counter() - start)
    table = Table(title=f"verl adapter, size {args.size}, {len(rows)} rows × {TOKENS} tokens, warm "
                        f"{args.backend} (seconds, best of {args.repeat})", header_style="bold")
    for column in ("core step", "adapter step", "adapter − core"):
        table.add_column(column, justify="right")
    table.add_row(f"{min(core):.3f}", f"{min(adapter):.3f}", f"{min(adapter) - min(core):.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
