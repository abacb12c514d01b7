"""Registration through verl's own plugin loading, in fresh processes, and ``check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factutil_verl.check import _FRESH_PROCESS, main
from factutil_verl.plugin import AGENT_LOOP_MODULE, TRAINER_PACKAGE

AGENT = "factutil_verl.agent_loop.FactAgentLoop"
SEARCH_R1 = "factutil_verl.search_r1.SearchR1Loop"
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


@pytest.mark.integration
def test_check_passes_and_a_bare_import_verl_registers_both():
    completed = python("-m", "factutil_verl", "check")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[-1] == "factutil-verl check passed"
    assert "ok   entry point: verl.plugins: factutil = factutil_verl.plugin" in lines
    assert f"ok   fresh `import verl`: agent loop -> {AGENT}, trainer -> {TRAINER}" in lines
    assert not any(line.startswith("FAIL") for line in lines)


@pytest.mark.integration
def test_check_fails_loudly_when_verl_skips_plugins():
    completed = python("-m", "factutil_verl", "check", VERL_USE_EXTERNAL_PLUGINS="none")
    assert completed.returncode == 1
    fail = [line for line in completed.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and fail[0].startswith("FAIL fresh `import verl`")
    assert "VERL_USE_EXTERNAL_MODULES=factutil_verl" in fail[0]
    assert "factutil-verl check failed: fresh `import verl`" in completed.stderr


@pytest.mark.integration
def test_verl_use_external_modules_is_the_fallback():
    completed = python(
        "-c",
        _FRESH_PROCESS,
        VERL_USE_EXTERNAL_PLUGINS="none",
        VERL_USE_EXTERNAL_MODULES="factutil_verl",
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1]) == {"agent": AGENT, "trainer": TRAINER}


@pytest.mark.integration
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


# What a bare ``import verl`` leaves loaded, then each registered name resolved by name, in a
# fresh process (a Ray worker's start). The registry snapshots are taken with the plugin switched
# off and on, so an overwritten verl entry would show as a changed value.
_LAZY_PROCESS = r"""
import json, sys
import verl
heavy = sorted(m for m in sys.modules if m.startswith((
    "verl.experimental.agent_loop", "verl.trainer.ppo", "factutil_verl.agent_loop",
    "factutil_verl.trainer", "factutil_verl.advantage", "factutil.")))
from wrapt.importer import _post_import_hooks
HOOKED = ("verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.v1")
hooks = sorted(name for name in HOOKED if _post_import_hooks.get(name))
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
import hydra.utils
agents = {name: dict(entry) for name, entry in _agent_loop_registry.items()}
trainers = {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in TRAINER_REGISTRY.items()}
resolved = {}
if "factagent" in agents:
    for name in ("factagent", "search_r1"):
        loop = hydra.utils.get_class(agents[name]["_target_"])
        resolved[name] = f"{loop.__module__}.{loop.__qualname__}"
    resolved["trainer"] = get_trainer_cls("factutil").__name__
after = sorted(name for name in HOOKED if _post_import_hooks.get(name))
print(json.dumps({"heavy": heavy, "hooks": hooks, "hooks_after": after, "agents": agents,
                  "trainers": trainers, "resolved": resolved}))
"""


def _lazy_report(plugins: str) -> dict:
    completed = python("-c", _LAZY_PROCESS, VERL_USE_EXTERNAL_PLUGINS=plugins)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


@pytest.mark.integration
def test_import_verl_loads_no_agent_loop_or_trainer_module_and_every_name_resolves():
    with_plugin = _lazy_report("auto")
    # import verl alone: none of the modules the plugin used to import at once is loaded
    assert with_plugin["heavy"] == []
    assert with_plugin["hooks"] == sorted([AGENT_LOOP_MODULE, TRAINER_PACKAGE])
    # once verl's modules are imported (by anyone), both names are there and resolve
    assert with_plugin["resolved"] == {"factagent": AGENT, "search_r1": SEARCH_R1,
                                       "trainer": "FactUtilTrainer"}
    assert with_plugin["agents"]["factagent"] == {"_target_": AGENT}
    assert with_plugin["agents"]["search_r1"] == {"_target_": SEARCH_R1}
    assert with_plugin["trainers"]["factutil"] == TRAINER
    # ... and the import hooks are gone once they ran
    assert with_plugin["hooks_after"] == []
    without = _lazy_report("none")
    assert "factagent" not in without["agents"] and "factutil" not in without["trainers"]
    # no entry verl registers itself was overwritten or dropped; the plugin added exactly three
    ours = ("factagent", "search_r1")
    assert {k: v for k, v in with_plugin["agents"].items() if k not in ours} == without["agents"]
    assert {k: v for k, v in with_plugin["trainers"].items() if k != "factutil"} == without["trainers"]
    assert len(without["agents"]) >= 2 and len(without["trainers"]) >= 1


@pytest.mark.integration
def test_the_plugin_registers_at_once_with_modules_already_imported():
    # verl's modules first (the plugin switched off), then the plugin: no hook left waiting
    code = (
        "import json, sys, importlib\n"
        "import verl.trainer.ppo.v1\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "assert 'factagent' not in _agent_loop_registry\n"
        "importlib.import_module('factutil_verl.plugin')\n"
        "from wrapt.importer import _post_import_hooks\n"
        "hooks = [n for n in ('verl.experimental.agent_loop.agent_loop', 'verl.trainer.ppo.v1')\n"
        "         if _post_import_hooks.get(n)]\n"
        "print(json.dumps([_agent_loop_registry['factagent']['_target_'],\n"
        "                  TRAINER_REGISTRY['factutil'].__name__, len(hooks)]))\n"
    )
    completed = python("-c", code, VERL_USE_EXTERNAL_PLUGINS="none")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1]) == [AGENT, "FactUtilTrainer", 0]


def test_an_entry_already_registered_under_the_name_is_kept(caplog):
    from types import SimpleNamespace

    from factutil_verl import plugin

    other = {"_target_": "somebody.else.Loop"}
    module = SimpleNamespace(_agent_loop_registry={"factagent": other, "tool_agent": {"_target_": "x"}})
    with caplog.at_level("WARNING", logger="factutil_verl.plugin"):
        plugin.register_agent_loop(module)
    assert module._agent_loop_registry == {"factagent": other, "tool_agent": {"_target_": "x"},
                                           "search_r1": {"_target_": SEARCH_R1}}
    assert "already registered" in caplog.text
    empty = SimpleNamespace(_agent_loop_registry={})
    plugin.register_agent_loop(empty)
    assert empty._agent_loop_registry == {"factagent": {"_target_": AGENT},
                                          "search_r1": {"_target_": SEARCH_R1}}


def test_the_plugin_names_match_the_registered_classes():
    from factutil_verl import plugin
    from factutil_verl.agent_loop import AGENT_NAME, FactAgentLoop
    from factutil_verl.search_r1 import SEARCH_R1_NAME, SearchR1Loop
    from factutil_verl.trainer import TRAINER_MODE, FactUtilTrainer

    assert (plugin.AGENT_NAME, plugin.TRAINER_MODE) == (AGENT_NAME, TRAINER_MODE)
    assert plugin.AGENT_TARGET == f"{FactAgentLoop.__module__}.{FactAgentLoop.__qualname__}" == AGENT
    assert (plugin.SEARCH_R1_NAME, plugin.SEARCH_R1_TARGET) == (
        SEARCH_R1_NAME, f"{SearchR1Loop.__module__}.{SearchR1Loop.__qualname__}")
    assert plugin.TRAINER_MODULE == FactUtilTrainer.__module__


def test_the_package_exports_resolve_lazily():
    import factutil_verl

    for name in factutil_verl.__all__:
        assert getattr(factutil_verl, name) is not None, name
    assert factutil_verl.FactAgentLoop.__name__ == "FactAgentLoop"
    try:
        factutil_verl.nope  # noqa: B018
    except AttributeError as error:
        assert "nope" in str(error)
    else:
        raise AssertionError("no AttributeError")
