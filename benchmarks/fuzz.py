"""The long fuzz run: tests/test_fuzz.py with many examples per test.

    python benchmarks/fuzz.py [--examples 10000] [--only exact|semantic|all] [pytest args ...]

Runs ``pytest tests/test_fuzz.py`` with ``FACTUTIL_FUZZ_EXAMPLES`` set (the default test run
uses 25 per test) and hypothesis statistics on. ``--only exact`` leaves out the tests that load
the real MiniLM (the parser, reader and exact-mode pipeline run at about a thousand examples a
minute on 2 cores); ``--only semantic`` runs those alone (a GPU helps: each example embeds new
random texts). Prints pytest's summary; exit status is pytest's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--only", choices=["exact", "semantic", "all"], default="all")
    args, rest = parser.parse_known_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--hypothesis-show-statistics", str(ROOT / "tests" / "test_fuzz.py")]
    if args.only == "exact":
        command += ["-m", "not slow"]
    elif args.only == "semantic":
        command += ["-m", "slow"]
    env = dict(os.environ, FACTUTIL_FUZZ_EXAMPLES=str(args.examples))
    print(f"FACTUTIL_FUZZ_EXAMPLES={args.examples} {' '.join(command[1:] + rest)}", flush=True)
    return subprocess.call(command + rest, cwd=ROOT, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
