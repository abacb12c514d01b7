"""The action parser on one megabyte of adversarial model text: is every case parsed in time?

    python benchmarks/parse_worst_case.py [--repeats 3] [--target-s 5] [--json FILE]

Each case is one ~1 MB response built to make a naive parser quadratic or recursive (prose, a
megabyte-long query, stray and unbalanced braces, many tags, many JSON objects, a run of
backslashes, unclosed tags, a megabyte of ``{`` before an action). Prints, per case, the action
found and the median seconds of ``--repeats`` calls to :func:`factutil.parse.parse_action`; the
command exits 1 when a case finds another action than expected or its median is over
``--target-s`` (5 s: far above the expected figure, so that it flags a quadratic parser, not
a busy machine). ``--json`` writes the figures. tests/test_parse.py checks the actions found on
the same cases, without timing them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from factutil.parse import parse_action

MB = 1_000_000
ACTION = '{"action": "search", "query": "q"}'

#: case name -> (builds the ~1 MB text, the action it parses to)
CASES: dict[str, tuple[Callable[[], str], str]] = {
    "prose": (lambda: "lorem ipsum " * (MB // 12), "invalid"),
    "long-query": (lambda: json.dumps({"action": "search", "query": "x" * MB}), "search"),
    "stray-braces": (lambda: "It's {" * (MB // 6) + ACTION, "search"),
    "many-tags": (lambda: "<search>q</search>" * (MB // 18) + "<answer>A</answer>", "answer"),
    "many-json": (lambda: ACTION * (MB // len(ACTION)), "search"),
    "backslashes": (lambda: '{"action": "search", "query": "' + "\\" * MB, "invalid"),
    "open-tags": (lambda: "<answer>" * (MB // 8), "invalid"),
    "all-braces": (lambda: "{" * MB + ACTION, "search"),
}


def measure(repeats: int) -> list[dict]:
    """One row per case: its size, the action found, the median and max seconds of ``repeats`` calls."""
    rows = []
    for name, (build, expected) in CASES.items():
        text = build()
        seconds, action = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            action = parse_action(text).action
            seconds.append(time.perf_counter() - start)
        rows.append({"case": name, "chars": len(text), "expected": expected, "found": action,
                     "median_s": statistics.median(seconds), "max_s": max(seconds)})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, write ``--json``; 0 when every case is right and within target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = measure(args.repeats)
    table = Table(title=f"parse_action on ~1 MB texts (median of {args.repeats}, target {args.target_s} s)")
    for column in ("case", "chars", "action", "median s", "max s", "ok"):
        table.add_column(column, justify="left" if column in ("case", "action") else "right")
    failed = 0
    for row in rows:
        row["ok"] = row["found"] == row["expected"] and row["median_s"] <= args.target_s
        failed += not row["ok"]
        table.add_row(row["case"], f"{row['chars']:,}", row["found"], f"{row['median_s']:.3f}",
                      f"{row['max_s']:.3f}", "yes" if row["ok"] else "NO")
    console = Console()
    console.print(table)
    if args.json:
        report = {"repeats": args.repeats, "target_s": args.target_s, "cpus": os.cpu_count(),
                  "python": platform.python_version(), "cases": rows}
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
