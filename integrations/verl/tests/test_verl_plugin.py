"""Registration through verl's own plugin loading, in fresh processes, and ``check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from factutil_verl.check import _FRESH_PROCESS, main

AGENT = "factutil_verl.agent_loop.FactAgentLoop"
TRAINER = "factutil_verl.trainer.FactUtilTrainer"


def python(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    return subprocess.run(
        [sys.executable, *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_check_passes_and_a_bare_import_verl_registers_both():
    completed = python("-m", "factutil_verl", "check")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[-1] == "factutil-verl check passed"
    assert "ok   entry point: verl.plugins: factutil = factutil_verl.plugin" in lines
    assert f"ok   fresh `import verl`: agent loop -> {AGENT}, trainer -> {TRAINER}" in lines
    assert not any(line.startswith("FAIL") for line in lines)


def test_check_fails_loudly_when_verl_skips_plugins():
    completed = python("-m", "factutil_verl", "check", VERL_USE_EXTERNAL_PLUGINS="none")
    assert completed.returncode == 1
    fail = [line for line in completed.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and fail[0].startswith("FAIL fresh `import verl`")
    assert "VERL_USE_EXTERNAL_MODULES=factutil_verl" in fail[0]
    assert "factutil-verl check failed: fresh `import verl`" in completed.stderr


def test_verl_use_external_modules_is_the_fallback():
    completed = python(
        "-c",
        _FRESH_PROCESS,
        VERL_USE_EXTERNAL_PLUGINS="none",
        VERL_USE_EXTERNAL_MODULES="factutil_verl",
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1]) == {"agent": AGENT, "trainer": TRAINER}


def test_a_broken_dependency_fails_with_its_reason(tmp_path: Path):
    broken = tmp_path / "transfer_queue"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("transfer_queue is broken here")\n')
    completed = python("-m", "factutil_verl", "check", PYTHONPATH=str(tmp_path))
    assert completed.returncode != 0
    assert "transfer_queue is broken here" in completed.stdout + completed.stderr


def test_usage(capsys):
    assert main(["nope"]) == 2
    assert main(["--help"]) == 0 and main(["-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m factutil_verl check\n") and "Exit status 0" in out
