"""The long fuzz run: tests/test_fuzz.py with many examples per property.

    python benchmarks/fuzz.py [--examples 10000] [--semantic-examples 1000]
                              [--only exact|semantic|all] [--json FILE] [pytest args ...]

Runs ``pytest tests/test_fuzz.py`` with ``FACTUTIL_FUZZ_EXAMPLES`` (the exact properties: the
parser, the JSONL reader and the exact-mode pipeline) and ``FACTUTIL_FUZZ_SEMANTIC_EXAMPLES``
(the properties that load the real MiniLM) set; the default test run uses 25 and 6. ``--only
exact`` leaves out the MiniLM properties, ``--only semantic`` runs those alone. Then prints one
row per property from pytest's JUnit XML and the statistics hypothesis adds to it: passing,
failing and invalid examples over all phases, why hypothesis stopped, outcome and seconds.
``--json`` writes the same rows. Exit status is pytest's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
STATISTICS = "hypothesis-statistics-"
CASES = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid test cases")
STOPPED = re.compile(r"Stopped because (.+)")


def properties(junit: Path) -> list[dict]:
    """One row per test case of a pytest JUnit XML file, with hypothesis's statistics summed."""
    root = ET.parse(junit).getroot()
    stats = {p.get("name")[len(STATISTICS):]: base64.b64decode(p.get("value")).decode()
             for p in root.iter("property") if p.get("name", "").startswith(STATISTICS)}
    rows = []
    for case in root.iter("testcase"):
        outcome = next((child.tag for child in case
                        if child.tag in ("failure", "error", "skipped")), "passed")
        name = case.get("name")
        text = next((v for nodeid, v in stats.items() if nodeid.endswith("::" + name)), "")
        counts = [sum(int(m[i]) for m in CASES.findall(text)) for i in range(3)]
        stopped = STOPPED.search(text)
        rows.append({"property": name, "outcome": outcome, "passing": counts[0],
                     "failing": counts[1], "invalid": counts[2],
                     "stopped_because": stopped[1] if stopped else "",
                     "seconds": float(case.get("time"))})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--semantic-examples", type=int, default=1_000)
    parser.add_argument("--only", choices=["exact", "semantic", "all"], default="all")
    parser.add_argument("--json", type=Path)
    args, rest = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "fuzz.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "--hypothesis-show-statistics", f"--junitxml={junit}",
                   str(ROOT / "tests" / "test_fuzz.py")]
        if args.only == "exact":
            command += ["-m", "not slow"]
        elif args.only == "semantic":
            command += ["-m", "slow"]
        env = dict(os.environ, FACTUTIL_FUZZ_EXAMPLES=str(args.examples),
                   FACTUTIL_FUZZ_SEMANTIC_EXAMPLES=str(args.semantic_examples))
        print(f"FACTUTIL_FUZZ_EXAMPLES={args.examples} FACTUTIL_FUZZ_SEMANTIC_EXAMPLES="
              f"{args.semantic_examples} {' '.join(command[1:] + rest)}", flush=True)
        start = time.perf_counter()
        status = subprocess.call(command + rest, cwd=ROOT, env=env)
        wall = time.perf_counter() - start
        rows = properties(junit) if junit.exists() else []
    table = Table(title=f"fuzz properties ({wall / 60:.1f} min wall, pytest exit {status})")
    for column in ("property", "outcome", "passing", "failing", "invalid", "stopped because", "s"):
        left = column in ("property", "outcome", "stopped because")
        table.add_column(column, justify="left" if left else "right")
    for row in rows:
        table.add_row(row["property"], row["outcome"], f"{row['passing']:,}", str(row["failing"]),
                      f"{row['invalid']:,}", row["stopped_because"], f"{row['seconds']:.0f}")
    console = Console(width=200)
    console.print(table)
    if args.json:
        report = {"examples": args.examples, "semantic_examples": args.semantic_examples,
                  "only": args.only, "pytest_args": rest, "exit_status": status, "wall_s": wall,
                  "cpus": os.cpu_count(), "python": platform.python_version(), "properties": rows}
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
