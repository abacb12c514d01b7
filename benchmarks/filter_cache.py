"""The filters' memo with functools' LRU (as shipped) against cachetools' LRUCache, on workload L.

    python benchmarks/filter_cache.py [--size L] [--rounds 7] [--json FILE]

:class:`factutil.filters.FilterCache` keeps one LRU per kind of thing (readings of texts, verdicts
on pairs) around the same ``read`` function; the ``cachetools`` form wraps that function with
``cachetools.cached(LRUCache(n))`` at the same bounds instead. Per round, alternating the two
forms (ABBA), with a fresh memo each time:

* ``analyse``: every distinct fact of the workload through :func:`factutil.filters.analyze`
  (subjects, relation + object pairs, their values and entity keys read once each);
* ``again``: the same facts once more through that memo (every reading a hit);
* ``step``: the semantic step (static backend) with a fresh clusterer whose memo is that form:
  its cluster stage (``time_cluster_s``, where the vetoes read pairs).

Prints the medians (seconds, CPU of this process) and the ratio cachetools ÷ functools; both
forms give the same analyses and the same advantages (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from cachetools import LRUCache, cached
from rich.console import Console
from rich.table import Table

from benchmarks.workloads import SIZES, build_workload, triple_occurrences
from factutil import FactUtilConfig, compute_process_advantages
from factutil.cluster import SemanticClusterer
from factutil.filters import FilterCache, analyze
from factutil.filters.cache import _PAIR_HELPERS, PAIR_ENTRIES, TEXT_ENTRIES

FORMS = ("functools", "cachetools")


def memo(form: str) -> FilterCache:
    """A fresh :class:`FilterCache`, its two LRUs functools' (as built) or cachetools'."""
    cache = FilterCache()
    if form == "cachetools":
        read = cache._texts.__wrapped__  # the one function both LRUs wrap
        texts, pairs = cached(LRUCache(TEXT_ENTRIES))(read), cached(LRUCache(PAIR_ENTRIES))(read)
        for name, value in list(vars(cache).items()):
            if isinstance(value, partial) and value.args == (name,):
                setattr(cache, name, partial(pairs if name in _PAIR_HELPERS else texts, name))
    return cache


def main(argv: list[str] | None = None) -> dict:
    """Time both forms, print the table, write ``--json``; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="L", choices=tuple(SIZES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = build_workload(args.size)
    facts = list(dict.fromkeys(tuple(t) for t in triple_occurrences(rows)))
    config = FactUtilConfig(mode="semantic", embedding_backend="static")
    SemanticClusterer(config).embedder.encode(["load the static vectors once"])
    times: dict[str, dict[str, list[float]]] = {f: {"analyse": [], "again": [], "step": []}
                                                for f in FORMS}
    analyses, digests = {}, {}
    for round_ in range(args.rounds):
        for form in FORMS if round_ % 2 == 0 else FORMS[::-1]:
            cache = memo(form)
            for name in ("analyse", "again"):
                start = time.process_time()
                analyses[form] = [analyze(*fact, cache=cache) for fact in facts]
                times[form][name].append(time.process_time() - start)
            clusterer = SemanticClusterer(config)
            clusterer.filter_cache = memo(form)
            result = compute_process_advantages(rows, config, clusterer=clusterer)
            times[form]["step"].append(result.metrics["time_cluster_s"])
            digests[form] = result.advantages.tobytes()
    same = analyses["functools"] == analyses["cachetools"] and len(set(digests.values())) == 1
    median = {form: {name: statistics.median(v) for name, v in cells.items()}
              for form, cells in times.items()}
    table = Table(title=f"filters' memo, {len(facts):,} distinct facts of {args.size}, median of "
                        f"{args.rounds} (CPU seconds)", header_style="bold")
    for column in ("measure", *FORMS, "cachetools ÷ functools"):
        table.add_column(column, justify="right")
    for name in ("analyse", "again", "step"):
        table.add_row(name, *(f"{median[f][name]:.3f}" for f in FORMS),
                      f"{median['cachetools'][name] / median['functools'][name]:.2f}")
    console = Console(width=max(Console().width, 100))
    console.print(table)
    console.print(f"same analyses and advantages: {'yes' if same else 'NO'}; 1-min load average "
                  f"{os.getloadavg()[0]:.1f}")
    report = {"size": args.size, "rounds": args.rounds, "facts": len(facts), "median": median,
              "times": times, "same": same}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
