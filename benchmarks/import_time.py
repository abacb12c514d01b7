"""What the factutil-verl plugin adds to ``import verl``, the start-up every verl Ray process pays.

    python benchmarks/import_time.py [--runs 5] [--json FILE]

verl imports every ``verl.plugins`` entry point while ``import verl`` runs. Each run starts fresh
Python processes that only ``import verl`` (as a Ray worker does), in turn:

- **without**: ``VERL_USE_EXTERNAL_PLUGINS=none`` (verl's own switch: no entry point loaded);
- **with**: ``VERL_USE_EXTERNAL_PLUGINS=factutil`` (only this plugin loaded, the lazy registration);
- **eager**: no entry point, then the two modules the plugin imported before registration became
  lazy (``factutil_verl.agent_loop``, ``factutil_verl.trainer``): the previous cost.

The variants alternate within a run, so a busy machine slows them alike. For each it reports the
median over runs of the process's wall seconds, of its CPU seconds (user + system, from
``os.wait4``; less sensitive than wall time to other work on the machine) and of the modules it
has imported at the end (``len(sys.modules)``: exact, whatever the load), and, for **with**,
the plugin's own cumulative import time from ``python -X importtime`` (``factutil_verl.plugin``
and everything it imports), the most direct measure of what the plugin adds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

COUNT = "; import sys; print(len(sys.modules))"
IMPORT_VERL = "import verl" + COUNT
EAGER = "import verl, factutil_verl.agent_loop, factutil_verl.trainer" + COUNT
VARIANTS = {
    "without": ("none", IMPORT_VERL),
    "with": ("factutil", IMPORT_VERL),
    "eager": ("none", EAGER),
}


def clean_env(plugins: str) -> dict[str, str]:
    """This process's environment without any ``VERL_USE_EXTERNAL_*`` and with ``plugins``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env.update(VERL_USE_EXTERNAL_PLUGINS=plugins, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def time_process(code: str, plugins: str, *flags: str) -> tuple[float, float, int, str]:
    """Run ``python [flags] -c code`` once; (wall s, CPU s of the child, the modules it had
    imported at the end, its stderr)."""
    with tempfile.TemporaryFile(mode="w+") as errors:  # -X importtime writes ~200 kB there
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, *flags, "-c", code], env=clean_env(plugins),
            stdout=subprocess.PIPE, stderr=errors, text=True,
        )
        stdout = process.stdout.read()
        # os.wait4 reaps the child and returns its own resource usage (CPU seconds)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        process.stdout.close()
        errors.seek(0)
        stderr = errors.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"`python -c {code!r}` (plugins={plugins}) failed: {stderr[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, int(stdout.split()[-1]), stderr


def plugin_import_s(stderr: str) -> float:
    """Cumulative seconds of ``factutil_verl.plugin``'s import from ``-X importtime`` output
    (the package ``factutil_verl`` is imported first, as part of it: both counted)."""
    total = 0.0
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)$", line)
        if match and match.group(3) in ("factutil_verl", "factutil_verl.plugin"):
            total = max(total, int(match.group(1)) / 1e6)
    return total


def main(argv: list[str] | None = None) -> dict:
    """Measure, print the table, write ``--json``; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per variant")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1 (got {args.runs})")
    samples: dict[str, dict[str, list[float]]] = {
        v: {"wall_s": [], "cpu_s": [], "modules": []} for v in VARIANTS}
    plugin_s: list[float] = []
    load = []
    for _ in range(args.runs):
        load.append(os.getloadavg()[0])
        for variant, (plugins, code) in VARIANTS.items():
            wall, cpu, modules, _ = time_process(code, plugins)
            samples[variant]["wall_s"].append(wall)
            samples[variant]["cpu_s"].append(cpu)
            samples[variant]["modules"].append(modules)
        *_, stderr = time_process(IMPORT_VERL, "factutil", "-X", "importtime")
        plugin_s.append(plugin_import_s(stderr))
    report = {
        "runs": args.runs, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "load_average_1min": {"min": min(load), "max": max(load)},
        "variants": {v: {key: statistics.median(values) for key, values in s.items()} | {"samples": s}
                     for v, s in samples.items()},
        "plugin_import_s": statistics.median(plugin_s),
    }
    median = {v: report["variants"][v] for v in VARIANTS}
    report["with_minus_without"] = {
        key: median["with"][key] - median["without"][key] for key in ("wall_s", "cpu_s", "modules")}
    report["eager_minus_without"] = {
        key: median["eager"][key] - median["without"][key] for key in ("wall_s", "cpu_s", "modules")}

    console = Console(width=max(Console().width, 110))
    table = Table(title=f"`import verl`, median of {args.runs} fresh processes (seconds)", header_style="bold")
    for column in ("variant", "wall s", "CPU s", "modules", "wall − without", "CPU − without",
                   "modules − without"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for variant in VARIANTS:
        row = median[variant]
        base = median["without"]
        table.add_row(variant, f"{row['wall_s']:.2f}", f"{row['cpu_s']:.2f}", f"{row['modules']:.0f}",
                      *("" if variant == "without" else f"{row[key] - base[key]:+{spec}}"
                        for key, spec in (("wall_s", ".2f"), ("cpu_s", ".2f"), ("modules", ".0f"))))
    console.print(table)
    console.print(f"plugin's own import (python -X importtime, factutil_verl + factutil_verl.plugin, "
                  f"median): {report['plugin_import_s'] * 1000:.1f} ms; {report['cpus']} CPUs, "
                  f"1-min load average {min(load):.1f}–{max(load):.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
