"""factutil as a user installs it: the built wheel in a scratch venv beside verl 0.9.1, installed
one package at a time in either order (each ``install`` resolving alone against today's index, as
pip and uv do), then the bundled sample scored in semantic mode, the default."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "data" / "2wiki_rollouts.jsonl"
UV = Path(sys.executable).parent / "uv"  # the lock's uv, beside this venv's python
# The CPU torch of this venv is no PyPI file: the Makefile's UV_FIND_LINKS (or pip's) says where it is.
FIND_LINKS = (os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")
              or "https://download.pytorch.org/whl/cpu/torch/")

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not UV.exists(), reason="needs the lock's uv (make test)")]


def run(*command: object) -> None:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(UV, "build", "--quiet", "--wheel", "--out-dir", out, ROOT)
    (built,) = out.glob("factutil-*.whl")
    return built


@pytest.mark.parametrize("first", ["factutil", "verl"])
def test_the_wheel_scores_beside_verl_in_either_order(first, wheel, tmp_path):
    """torch first (the CPU build, as the README says), then factutil and verl 0.9.1 one after the
    other. Installed second, verl takes transformers back below 5.11 and leaves behind what the newer
    transformers brought (``kernels``), with which the older one cannot import: then the error names
    that package and its mend, and the mend it names makes the scoring work."""
    venv = tmp_path / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, venv)
    install = (UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python",
               "--find-links", FIND_LINKS)
    run(*install, f"torch=={torch.__version__}")
    packages = {"factutil": wheel, "verl": "verl==0.9.1"}
    for name in (first, *(n for n in packages if n != first)):
        run(*install, packages[name])
    out = tmp_path / "scored.jsonl"
    score = [str(venv / "bin" / "factutil"), "score", str(SAMPLE), "-o", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(score, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0 and first == "factutil":
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("config: cannot load the embedder"), line
        leftover = re.search(r"; ([\w.-]+) [\w.+]+ \(required by no installed package: "
                             r"`pip uninstall \1` may mend this\)\]$", line)
        assert leftover, line
        run(UV, "pip", "uninstall", "--quiet", "--python", venv / "bin" / "python", leftover[1])
        done = subprocess.run(score, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    actions = sum(len(json.loads(line)["actions"]) for line in SAMPLE.open(encoding="utf-8"))
    scored = [json.loads(line) for line in out.open(encoding="utf-8")]
    assert len(scored) == actions == 976
    assert all(math.isfinite(row["advantage"]) for row in scored)
    assert any(row["process_advantage"] != 0 for row in scored)
