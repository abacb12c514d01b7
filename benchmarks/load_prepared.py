"""Reading shipped per-fact work on the trainer's driver: one item per rollout, many at once.

    python benchmarks/load_prepared.py [--size L] [--runs 15] [--json FILE]

A trainer's driver receives one :class:`~factutil.prepare.PreparedFacts` (as bytes) per rollout,
3,072 at size L. Each workload rollout is prepared alone (default config, semantic mode, 384-d
vectors from a hashing stand-in for MiniLM: reading does not depend on the values; not timed);
then, into a fresh :class:`~factutil.cluster.SemanticClusterer` (timed, wall seconds, median and
minimum of ``--runs``):

- **per item**: ``PreparedFacts.from_bytes`` of each item, the list given to ``add_prepared``;
- **load_prepared**: :func:`factutil.prepare.load_prepared` (collector paused, one merged item),
  given to ``add_prepared``;

each with the cyclic garbage collector on, and inside ``gc_paused()`` as the adapters call
``score_batch``; ``same`` says whether both leave the same fact memo and embedding cache.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.workloads import SIZES, build_workload
from factutil.cluster import SemanticClusterer
from factutil.config import FactUtilConfig
from factutil.prepare import PreparedFacts, load_prepared, prepare_facts
from factutil.result import gc_paused


class HashVectors:
    """384-d unit vectors seeded by each text's hash: MiniLM's shape at no model cost."""

    name = "benchmark:hash-384"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), 384), dtype=np.float32)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vector = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            out[row] = vector / np.linalg.norm(vector)
        return out


def _per_item(items: list[bytes], clusterer: SemanticClusterer) -> None:
    clusterer.add_prepared([PreparedFacts.from_bytes(data) for data in items])


def _loaded(items: list[bytes], clusterer: SemanticClusterer) -> None:
    clusterer.add_prepared(load_prepared(items))


WAYS = {"per item": _per_item, "load_prepared": _loaded}


def _state(clusterer: SemanticClusterer) -> dict:
    """What a clusterer was given: per fact its text, analysis and vector bytes."""
    name = clusterer.embedder.name
    return {key: (record.text, record.features, clusterer.cache.get(name, record.text).tobytes())
            for key, record in clusterer._records.items()}


def main(argv: list[str] | None = None) -> dict:
    """Measure both ways, print the table, write ``--json``; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=list(SIZES))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    config = FactUtilConfig()
    embedder = HashVectors()
    items = [prepare_facts(row, config, embedder=embedder).to_bytes()
             for row in build_workload(args.size)]
    facts = sum(len(PreparedFacts.from_bytes(data)) for data in items)
    states = []
    for way in WAYS.values():
        clusterer = SemanticClusterer(config, embedder=embedder)
        way(items, clusterer)
        states.append(_state(clusterer))
    report = {"size": args.size, "items": len(items), "bytes": sum(map(len, items)),
              "facts": facts, "distinct_facts": len(states[0]),
              "same": all(state == states[0] for state in states), "seconds": {}}
    for label, way in WAYS.items():
        for paused in (False, True):
            times = []
            for _ in range(args.runs):
                gc.collect()
                clusterer = SemanticClusterer(config, embedder=embedder)
                with gc_paused(paused):
                    started = time.perf_counter()
                    way(items, clusterer)
                    times.append(time.perf_counter() - started)
                del clusterer
            report["seconds"][f"{label}, collector {'paused' if paused else 'on'}"] = {
                "median": statistics.median(times), "min": min(times)}
    table = Table(title=f"{report['items']:,} items of workload {args.size} ({facts:,} facts, "
                        f"{report['distinct_facts']:,} distinct, {report['bytes'] / 1e6:.1f} MB); "
                        f"same memo and cache: {report['same']}")
    table.add_column("way")
    table.add_column("median s", justify="right")
    table.add_column("min s", justify="right")
    for label, value in report["seconds"].items():
        table.add_row(label, f"{value['median']:.3f}", f"{value['min']:.3f}")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
