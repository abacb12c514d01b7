"""verl plugin entry point (group ``verl.plugins``, name ``factutil``): lazy registration.

verl imports every ``verl.plugins`` entry point while ``import verl`` runs, in every Ray process,
and swallows a failing import at DEBUG level; ``python -m factutil_verl check`` shows the reason.
Without the entry point (verl started with ``VERL_USE_EXTERNAL_PLUGINS=none``, or the package not
installed in the workers' environment), set ``VERL_USE_EXTERNAL_MODULES=factutil_verl``.

Importing this module costs only the standard library and wrapt: it imports neither verl's
agent-loop nor its V1-trainer modules (~2.5 s of imports a process that never uses them would pay). Each of
verl's registries is a dict that lives in the module defining it, so the names are added when
that module is first imported, by whoever imports it:

- ``verl.experimental.agent_loop.agent_loop`` imported -> ``_agent_loop_registry["factagent"] =
  {"_target_": "factutil_verl.agent_loop.FactAgentLoop"}`` and ``["search_r1"] = {"_target_":
  "factutil_verl.search_r1.SearchR1Loop"}``, the entries verl's ``@register`` writes; Hydra
  imports the loop's module when a worker first builds the loop;
- ``verl.trainer.ppo.v1`` imported (every V1 trainer's module loaded) ->
  :mod:`factutil_verl.trainer` imported, whose ``@register_trainer("factutil")`` adds the mode
  (``TRAINER_REGISTRY`` holds classes, so the class is defined then).

A module already imported when this plugin loads is registered at once. An entry that verl or
another plugin already holds under one of these names is kept (a warning says so), never
overwritten. The hooks are wrapt's post-import hooks (``wrapt.register_post_import_hook``): each
runs once, right after its module's first import, and is dropped.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from functools import partial
from types import ModuleType

import wrapt

AGENT_NAME = "factagent"
AGENT_TARGET = "factutil_verl.agent_loop.FactAgentLoop"
SEARCH_R1_NAME = "search_r1"
SEARCH_R1_TARGET = "factutil_verl.search_r1.SearchR1Loop"
AGENT_LOOPS = {AGENT_NAME: AGENT_TARGET, SEARCH_R1_NAME: SEARCH_R1_TARGET}
"""The agent loops this package adds: name -> Hydra target."""
TRAINER_MODE = "factutil"
TRAINER_MODULE = "factutil_verl.trainer"
AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"
TRAINER_PACKAGE = "verl.trainer.ppo.v1"

logger = logging.getLogger(__name__)


def register_agent_loop(module: ModuleType) -> None:
    """Add :data:`AGENT_LOOPS` to verl's agent-loop registry (``module._agent_loop_registry``) as
    the Hydra targets verl's ``@register`` would write; an entry already there is kept."""
    registry = module._agent_loop_registry
    for name, target in AGENT_LOOPS.items():
        entry = {"_target_": target}
        existing = registry.get(name)
        if existing is None:
            registry[name] = entry
        elif dict(existing) != entry:
            logger.warning("factutil-verl: agent loop %r is already registered as %r; kept it",
                           name, existing)


def register_trainer(module: ModuleType) -> None:
    """Add the ``factutil`` trainer mode: import :mod:`factutil_verl.trainer`, whose class decorator
    registers it. A mode already registered to another class is kept."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    existing = TRAINER_REGISTRY.get(TRAINER_MODE)
    if existing is not None and f"{existing.__module__}" != TRAINER_MODULE:
        logger.warning("factutil-verl: trainer mode %r is already registered to %r; kept it",
                       TRAINER_MODE, existing)
        return
    importlib.import_module(TRAINER_MODULE)


HOOKS: dict[str, Callable[[ModuleType], None]] = {
    AGENT_LOOP_MODULE: register_agent_loop,
    TRAINER_PACKAGE: register_trainer,
}


def _run_hook(name: str, module: ModuleType) -> None:
    """A failing registration must not fail verl's own import: it is logged with its reason (verl
    would hide it at DEBUG level) and the name stays unregistered."""
    with _lock:
        _waiting.discard(name)
    try:
        HOOKS[name](module)
    except Exception:  # logged, never raised into verl's import
        logger.warning("factutil-verl: registering with %s failed; `python -m factutil_verl check` "
                       "shows why", name, exc_info=True)


_lock = threading.Lock()
_waiting: set[str] = set()  # the modules whose hook waits for their import


def install() -> None:
    """Register now with the modules already imported; hook the others' first import (one hook
    each, however often this is called)."""
    for name in HOOKS:
        with _lock:
            if name in _waiting:
                continue
            _waiting.add(name)
        wrapt.register_post_import_hook(partial(_run_hook, name), name)  # at once if imported


install()
