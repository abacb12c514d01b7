"""``python -m factutil_verl check``: is factutil-verl usable by verl in this environment?

verl imports its ``verl.plugins`` entry points itself and hides a failing import at DEBUG level,
so a broken install shows up only as "Agent loop factagent not registered" deep in a Ray worker.
This command checks, and prints one ``ok``/``FAIL`` line per item:

1. verl's version is in the supported range (>=0.9,<0.11, i.e. 0.9–0.10; tested on 0.9.1);
2. the ``verl.plugins`` entry point ``factutil`` is installed and points at ``factutil_verl.plugin``;
3. every module imports;
4. the ``factagent`` and ``search_r1`` agent loops and the ``factutil`` trainer mode are in verl's
   registries;
5. the reward function scores a known answer;
6. the default ``algorithm.factutil`` config validates;
7. a *fresh* Python process that only runs ``import verl`` (as a Ray worker does) finds both
   registrations, through the entry point or ``VERL_USE_EXTERNAL_MODULES``.

Exit status 0 when every item passes, 1 otherwise (the failing lines say why).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

ENTRY_POINT_GROUP = "verl.plugins"
ENTRY_POINT_NAME = "factutil"
ENTRY_POINT_VALUE = "factutil_verl.plugin"
MODULES = (
    "factutil_verl.config",
    "factutil_verl.prompt",
    "factutil_verl.reward",
    "factutil_verl.advantage",
    "factutil_verl.agent_loop",
    "factutil_verl.search_r1",
    "factutil_verl.trainer",
    "factutil_verl.plugin",
)

_FRESH_PROCESS = r"""
import json, sys
import verl
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
agent = _agent_loop_registry.get("factagent", {}).get("_target_")
trainer = TRAINER_REGISTRY.get("factutil")
print(json.dumps({"agent": agent, "trainer": None if trainer is None else
                  f"{trainer.__module__}.{trainer.__qualname__}"}))
"""


@dataclass
class CheckResult:
    """One line of the report: the item, whether it passed, and the detail or the reason."""

    name: str
    ok: bool
    detail: str


def _run(name: str, fn: Callable[[], str]) -> CheckResult:
    try:
        return CheckResult(name, True, fn())
    except Exception as error:  # noqa: BLE001 - every failure becomes a FAIL line
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return CheckResult(name, False, last)


def _check_version() -> str:
    import verl
    from packaging.version import Version

    version = Version(verl.__version__)
    if not Version("0.9") <= version < Version("0.11"):
        raise RuntimeError(f"verl {version} is outside the supported range >=0.9,<0.11")
    return f"verl {version}"


def _check_entry_point() -> str:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == ENTRY_POINT_NAME]
    if not found:
        raise RuntimeError(
            f"no '{ENTRY_POINT_GROUP}' entry point named '{ENTRY_POINT_NAME}': install the package "
            f"(pip install -e integrations/verl) in the environment verl runs in"
        )
    values = sorted({ep.value for ep in found})
    if values != [ENTRY_POINT_VALUE]:
        raise RuntimeError(
            f"entry point '{ENTRY_POINT_NAME}' points at {values}, expected {ENTRY_POINT_VALUE}"
        )
    return f"{ENTRY_POINT_GROUP}: {ENTRY_POINT_NAME} = {ENTRY_POINT_VALUE}"


def _check_imports() -> str:
    for module in MODULES:
        importlib.import_module(module)
    return f"{len(MODULES)} modules"


def _check_registrations() -> str:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from factutil_verl.plugin import AGENT_LOOPS
    from factutil_verl.trainer import TRAINER_MODE, FactUtilTrainer

    for name, expected in AGENT_LOOPS.items():
        target = _agent_loop_registry.get(name, {}).get("_target_")
        if target != expected:
            raise RuntimeError(
                f"agent loop '{name}' is registered as {target!r}, expected {expected!r}"
            )
        module, _, qualname = expected.rpartition(".")
        if not issubclass(getattr(importlib.import_module(module), qualname), AgentLoopBase):
            raise TypeError(f"{expected} is not an AgentLoopBase")
    trainer = get_trainer_cls(TRAINER_MODE)
    if trainer is not FactUtilTrainer or not issubclass(trainer, PPOTrainerSync):
        raise RuntimeError(
            f"trainer mode '{TRAINER_MODE}' is {trainer!r}, expected FactUtilTrainer"
        )
    loops = ", ".join(f"'{name}'" for name in AGENT_LOOPS)
    return f"agent loops {loops}, trainer mode '{TRAINER_MODE}'"


def _check_reward() -> str:
    from factutil_verl.reward import SCORE_KEYS, compute_score

    result = compute_score(
        "check",
        '{"action": "answer", "answer": "Paris"}',
        {"target": ["Paris"]},
        {"factutil": {"store_size": 1}},
    )
    if tuple(result) != SCORE_KEYS or result["score"] != 1.0:
        raise RuntimeError(f"unexpected reward {result}")
    return "compute_score('Paris' vs ['Paris']) = 1.0"


def _check_config() -> str:
    from factutil_verl.config import factutil_config_from_verl

    config = factutil_config_from_verl({"norm_adv_by_std_in_grpo": True})
    return f"algorithm.factutil defaults: omega={config.omega}, mode={config.mode!r}"


def _check_fresh_process() -> str:
    completed = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if completed.returncode != 0:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"`import verl` failed in a fresh process: {tail[0]}")
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    if found["agent"] is None or found["trainer"] is None:
        raise RuntimeError(
            f"`import verl` in a fresh process did not register factutil (agent loop: "
            f"{found['agent']}, trainer: {found['trainer']}): verl skipped or failed the plugin. "
            "Check VERL_USE_EXTERNAL_PLUGINS (must be 'auto' or list 'factutil'), or set "
            "VERL_USE_EXTERNAL_MODULES=factutil_verl"
        )
    return f"agent loop -> {found['agent']}, trainer -> {found['trainer']}"


CHECKS: tuple[tuple[str, Callable[[], str]], ...] = (
    ("verl version", _check_version),
    ("entry point", _check_entry_point),
    ("imports", _check_imports),
    ("registrations", _check_registrations),
    ("reward function", _check_reward),
    ("config", _check_config),
    ("fresh `import verl`", _check_fresh_process),
)


def run_checks() -> list[CheckResult]:
    """Run every check in order; never raises."""
    return [_run(name, fn) for name, fn in CHECKS]


def main(argv: list[str] | None = None) -> int:
    """``python -m factutil_verl check``; returns the exit status (0 all passed or ``--help``,
    1 a failure, 2 usage)."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help", "help"):
        print("usage: python -m factutil_verl check\n\n" + __doc__.split("\n", 1)[1].strip())
        return 0
    if args != ["check"]:
        print("usage: python -m factutil_verl check  (--help: what it checks)", file=sys.stderr)
        return 2
    results = run_checks()
    for result in results:
        print(f"{'ok  ' if result.ok else 'FAIL'} {result.name}: {result.detail}", flush=True)
    failed = [result.name for result in results if not result.ok]
    if failed:
        print(f"factutil-verl check failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("factutil-verl check passed")
    return 0
