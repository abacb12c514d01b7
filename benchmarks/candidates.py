"""Dense cosine vs hnswlib k-NN for candidate pairs: where does k-NN start to pay?

    python benchmarks/candidates.py [--sizes 500,1000,2000,4000,8000] [--repeats 3]

Vectors are 384-d (MiniLM's size), in near-duplicate triplets like paraphrase clusters. Prints the
median time of each method, the recall of hnswlib's edges against the exact ones, and the memory of
the dense similarity matrix. ``FactUtilConfig.knn_min_size`` is set from this table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from factutil.cluster import candidate_pairs
from factutil.embed import l2_normalize


def timed(function, repeats: int):
    """Median seconds of ``repeats`` calls, and the last result."""
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main() -> None:
    """Run the sweep and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2000,4000,8000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    table = Table(title="candidate pairs: dense vs hnswlib (M=16, ef=64, k=10, 1 thread)")
    for column in ("facts", "dense ms", "hnswlib ms", "edges", "hnswlib recall", "dense matrix MB"):
        table.add_column(column, justify="right")
    for n in (int(size) for size in args.sizes.split(",")):
        centres = l2_normalize(rng.normal(size=(n // 3 + 1, 384)))
        vectors = l2_normalize(np.repeat(centres, 3, axis=0)[:n] + 0.01 * rng.normal(size=(n, 384)))
        dense_s, (dense, _) = timed(lambda v=vectors: candidate_pairs(v, args.threshold, dense_max=10**9), args.repeats)
        knn_s, (knn, _) = timed(lambda v=vectors: candidate_pairs(v, args.threshold, dense_max=1), args.repeats)
        exact = {tuple(e) for e in dense.tolist()}
        found = {tuple(e) for e in knn.tolist()}
        recall = len(found & exact) / len(exact) if exact else 1.0
        table.add_row(str(n), f"{1000 * dense_s:.0f}", f"{1000 * knn_s:.0f}", str(len(exact)),
                      f"{recall:.3f}", f"{n * n * 4 / 2**20:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
