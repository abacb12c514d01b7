"""Golden digests of a step: are two versions of factutil bit-identical on the same input?

    python benchmarks/golden.py [--out FILE] [--cases sample,L] [--modes exact,semantic]
                                [--priors beta,group] [--backend minilm|minilm-int8|static]
    python benchmarks/golden.py --compare A.json B.json

Runs ``compute_process_advantages`` on the demo sample (``examples/data/2wiki_rollouts.jsonl``)
and on the L workload of ``benchmarks/workloads.py`` (512 groups x 6 rollouts), in exact and
semantic mode (the default MiniLM backend unless ``--backend`` says otherwise), under both
priors, each case with a fresh clusterer. For each case it writes the sha256 of:

- ``advantages`` (float32) and every float/int/bool column of ``action_columns``, hashed by
  their bytes;
- ``cluster_labels``: every group's facts (original triples) with the id of their cluster;
- ``cluster_stats``: n, s, mean, utility of every cluster (float64 bytes);
- ``new_clusters``: the cluster ids each action brought into the store;
- ``rollouts``: every field of every rollout record (JSON, floats written exactly);
- ``metric:NAME``: each of the step's metrics, timings left out (a metric only one side has is
  listed as added, not as a difference).

``--compare`` prints one row per case: identical, or the digests that differ or are missing.
The factutil imported is the one on ``sys.path`` (set ``PYTHONPATH`` to a checkout of another
version to digest it); the workload always comes from this file's repository.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples/data/2wiki_rollouts.jsonl"


def load_workloads():
    """``benchmarks/workloads.py`` of this repository, without putting its root on sys.path
    (which would shadow a factutil given by PYTHONPATH)."""
    spec = importlib.util.spec_from_file_location("golden_workloads", ROOT / "benchmarks/workloads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sha(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def array_digest(values: np.ndarray) -> str:
    """sha256 of an array's dtype, shape and bytes (C order)."""
    values = np.ascontiguousarray(values)
    return sha(f"{values.dtype.str}{values.shape}".encode() + values.tobytes())


def json_digest(value) -> str:
    """sha256 of ``value`` as compact JSON (floats written by repr, so exactly)."""
    return sha(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


def digests(result) -> dict[str, str]:
    """The digests of one step's result (see the module docstring)."""
    out = {"advantages": array_digest(result.advantages)}
    for name in sorted(result.action_columns):
        out[f"column:{name}"] = array_digest(result.action_columns[name])
    clusters = result.clusters
    out["cluster_labels"] = json_digest(sorted(
        [c.uid, c.cluster_id, [list(m) for m in c.members]] for c in clusters
    ))
    out["cluster_stats"] = array_digest(np.array(
        [[c.n, c.s, c.mean, c.utility] for c in clusters], dtype=np.float64
    ).reshape(-1, 4))
    out["new_clusters"] = json_digest([list(a.new_clusters) for a in result.actions])
    out["rollouts"] = json_digest([
        {k: getattr(r, k) for k in sorted(r.__dataclass_fields__)} for r in result.rollouts
    ])
    for name, value in sorted(result.metrics.items()):
        if not name.startswith(("time_", "cluster_time_")):
            out[f"metric:{name}"] = json_digest(float(value))
    return out


def version(package: Path) -> str:
    """The git commit of the checkout ``package`` lies in (``+dirty`` with uncommitted changes
    to it), or "unknown" outside git."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(package), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", ".") else "")


def run(cases: list[str], modes: list[str], priors: list[str], backend: str | None) -> dict:
    """Every (input, mode, prior) case's digests, with the factutil version that ran them."""
    import factutil
    from factutil import FactUtilConfig, compute_process_advantages

    inputs = {}
    if "sample" in cases:
        inputs["sample"] = SAMPLE
    if "L" in cases:
        inputs["L"] = load_workloads().build_workload("L")
    known = set(FactUtilConfig.model_fields)
    out = {"factutil": version(Path(factutil.__file__).resolve().parent), "cases": {}, "skipped": {}}
    for name, groups in inputs.items():
        for mode in modes:
            for prior in priors:
                fields = {"mode": mode, "prior": prior}
                if mode == "semantic" and backend:
                    fields["embedding_backend"] = backend
                key = f"{name}/{mode}/{prior}"
                missing = sorted(set(fields) - known)
                if missing:
                    out["skipped"][key] = f"this factutil's FactUtilConfig has no {missing}"
                    print(f"{key}: skipped ({out['skipped'][key]})", flush=True)
                    continue
                start = time.perf_counter()
                result = compute_process_advantages(groups, FactUtilConfig(**fields))
                seconds = time.perf_counter() - start
                out["cases"][key] = {
                    "actions": len(result.advantages), "config": fields, "seconds": round(seconds, 3),
                    "digests": digests(result),
                }
                print(f"{key}: {len(result.advantages)} actions, {seconds:.2f} s", flush=True)
    return out


def compare(a_path: Path, b_path: Path) -> int:
    """Print one row per case (its digests identical, or which differ or are missing); 1 if any
    digest is not identical."""
    a = json.loads(a_path.read_text(encoding="utf-8"))
    b = json.loads(b_path.read_text(encoding="utf-8"))
    rows = []
    total = same = 0
    for case in sorted(set(a["cases"]) | set(b["cases"])):
        da = a["cases"].get(case, {}).get("digests", {})
        db = b["cases"].get(case, {}).get("digests", {})
        items = sorted(set(da) | set(db))
        added = [i for i in items if i not in da and i.startswith("metric:")]
        missing = [i for i in items if (i not in da or i not in db) and i not in added]
        different = [i for i in items if i in da and i in db and da[i] != db[i]]
        compared = len(items) - len(added)
        total += compared
        same += compared - len(missing) - len(different)
        verdict = "identical" if not missing and not different else "DIFFERENT"
        detail = ", ".join(different + [f"{i} (missing)" for i in missing])
        if added:
            detail = "; ".join(filter(None, [detail, "B adds " + ", ".join(added)]))
        rows.append((case, f"{compared - len(missing) - len(different)}/{compared}", verdict, detail))
    print(f"A = {a_path} ({a['factutil']})\nB = {b_path} ({b['factutil']})\n")
    width = max((len(r[0]) for r in rows), default=4)
    print(f"| {'case':<{width}} | digests equal | A vs B | differing digests |")
    print(f"| {'-' * width} | --- | --- | --- |")
    for case, count, verdict, detail in rows:
        print(f"| {case:<{width}} | {count} | {verdict} | {detail} |")
    for side, data in (("A", a), ("B", b)):
        for case, why in data.get("skipped", {}).items():
            print(f"{side} skipped {case}: {why}")
    print(f"\n{same} of {total} digests identical")
    return int(same != total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the digests as JSON here")
    parser.add_argument("--cases", default="sample,L", help="comma list of sample, L")
    parser.add_argument("--modes", default="exact,semantic", help="comma list of exact, semantic")
    parser.add_argument("--priors", default="beta,group", help="comma list of beta, group")
    parser.add_argument("--backend", default=None, help="semantic embedding backend (default: the config's)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two digest files")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    out = run(args.cases.split(","), args.modes.split(","), args.priors.split(","), args.backend)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
