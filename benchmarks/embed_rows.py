"""The shape of MiniLM's fixed-shape passes: the batch step's cost against a rollout worker's.

    python benchmarks/embed_rows.py [--rows 32,8] [--every 50] [--json FILE]

Every pass of the embedder has a fixed shape, so a text's vector never depends on the texts
embedded beside it: texts of one token length run together, ROWS (``embedding_batch_size``) a
pass, a short pass filled with copies (``factutil.embed.fixed_shape_batches``). The fill is
nearly free when a whole batch's texts are embedded at once, and most of the work when a rollout
worker embeds one rollout's few texts as it finishes. For each row count, on one thread (OpenMP,
BLAS and torch):

- **batch**: CPU seconds to embed workload L's 4,206 distinct fact texts in one call, as the
  driver's cold step does;
- **per rollout**: CPU milliseconds per text when every ``--every``-th rollout of L is prepared
  alone (:func:`factutil.workers.make_work`, one call per rollout, nothing cached);
- **bits**: whether the vectors equal, bit for bit, those of the first shape, else the largest
  difference of a vector component from them.

CPU seconds (``time.process_time``), not wall time: the figures are meant to compare shapes on a
machine that other work shares.
"""

from __future__ import annotations

import os
import sys

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import json
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from benchmarks.workloads import build_workload, triple_occurrences
from factutil import FactUtilConfig
from factutil.cluster import SemanticClusterer, fact_text
from factutil.embed import SentenceTransformerEmbedder
from factutil.workers import assert_triples, make_work


def main(argv: list[str] | None = None) -> dict:
    """Measure each row count, print the table, write ``--json``; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="32,8",
                        help="comma list of rows per pass (embedding_batch_size)")
    parser.add_argument("--every", type=int, default=50, help="prepare every N-th rollout of L alone")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        counts = [int(value) for value in args.rows.split(",")]
    except ValueError:
        parser.error(f"--rows: expected a comma list of integers such as 32,8, got {args.rows!r}")
    if any(count < 1 for count in counts) or args.every < 1:
        parser.error(f"--rows needs counts >= 1, --every >= 1 (got {args.rows!r}, {args.every})")
    torch.set_num_threads(1)
    rows = build_workload("L")
    texts = sorted({fact_text(*t) for t in triple_occurrences(rows)})
    sample = rows[:: args.every]
    report: dict = {"texts": len(texts), "rollouts": len(sample), "load_average_1min": [os.getloadavg()[0]],
                    "shapes": {}}
    first = None
    for rows_per_pass in counts:
        embedder = SentenceTransformerEmbedder(batch_size=rows_per_pass)
        embedder.encode(["warm up the model"])
        start = time.process_time()
        vectors = embedder.encode(texts)
        batch_s = time.process_time() - start
        config = FactUtilConfig(embedding_batch_size=rows_per_pass)
        start = time.process_time()
        prepared = [make_work(assert_triples(row["actions"], config.max_turns), config,
                              SemanticClusterer(config, embedder=embedder)) for row in sample]
        per_rollout_s = time.process_time() - start
        embedded = sum(len(item["parts"]) for item in prepared)
        if first is None:
            first = vectors
        report["shapes"][str(rows_per_pass)] = {
            "batch_cpu_s": batch_s, "per_rollout_cpu_ms_per_text": per_rollout_s / embedded * 1e3,
            "per_rollout_texts": embedded, "bits_equal_to_first": bool(np.array_equal(vectors, first)),
            "max_abs_difference_to_first": float(np.abs(vectors - first).max()),
        }
    report["load_average_1min"].append(os.getloadavg()[0])
    table = Table(title=f"MiniLM, one thread: rows per pass (L: {len(texts):,} texts; "
                        f"{len(sample)} rollouts prepared alone)", header_style="bold")
    for column in ("rows", "batch CPU s", "per rollout CPU ms / text", f"vs {counts[0]} rows"):
        table.add_column(column, justify="right")
    for shape, entry in report["shapes"].items():
        same = entry["bits_equal_to_first"]
        table.add_row(shape, f"{entry['batch_cpu_s']:.1f}", f"{entry['per_rollout_cpu_ms_per_text']:.1f}",
                      "same bits" if same else f"max diff {entry['max_abs_difference_to_first']:.1e}")
    console = Console(width=max(Console().width, 100))
    console.print(table)
    console.print("1-min load average {:.1f} at the start, {:.1f} at the end".format(*report["load_average_1min"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
