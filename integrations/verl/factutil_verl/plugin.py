"""verl plugin entry point (group ``verl.plugins``, name ``factutil``): lazy registration.

verl imports every ``verl.plugins`` entry point while ``import verl`` runs, in every Ray process,
and swallows a failing import at DEBUG level; ``python -m factutil_verl check`` shows the reason.
Without the entry point (verl started with ``VERL_USE_EXTERNAL_PLUGINS=none``, or the package not
installed in the workers' environment), set ``VERL_USE_EXTERNAL_MODULES=factutil_verl``.

Importing this module costs only the standard library: it imports neither verl's agent-loop nor
its V1-trainer modules (~2.5 s of imports a process that never uses them would pay). Each of
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
overwritten. The hook is a ``sys.meta_path`` finder that wraps only those two modules' loaders for
the length of their first import, then removes itself; the modules keep their own loaders.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

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
    try:
        HOOKS[name](module)
    except Exception:  # logged, never raised into verl's import
        logger.warning("factutil-verl: registering with %s failed; `python -m factutil_verl check` "
                       "shows why", name, exc_info=True)


class _AfterExec(Loader):
    """The module's own loader, with the registration run after the module body."""

    def __init__(self, loader: Loader, name: str, finder: _RegisterOnImport):
        self.loader = loader
        self.name = name
        self.finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
        self.finder.remove_if_done()
        _run_hook(self.name, module)

    def __getattr__(self, attribute: str):  # get_source, get_filename, is_package, ...
        return getattr(self.loader, attribute)


class _RegisterOnImport(MetaPathFinder):
    """Finds nothing itself: for a hooked module it asks the finders after it and wraps the
    loader of the spec they return. Removes itself once every hook has run."""

    def __init__(self, names: set[str]):
        self.pending = set(names)
        self.lock = threading.Lock()

    def find_spec(self, fullname: str, path, target=None) -> ModuleSpec | None:
        with self.lock:
            if fullname not in self.pending:
                return None
            self.pending.discard(fullname)
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _AfterExec(spec.loader, fullname, self)
                return spec
        return None

    def remove_if_done(self) -> None:
        """Leave ``sys.meta_path`` as it was once every hooked module is imported (called after a
        module body, never while the import system walks ``sys.meta_path``)."""
        with self.lock:
            if not self.pending and self in sys.meta_path:
                sys.meta_path.remove(self)


def install() -> None:
    """Register now with the modules already imported; hook the others' first import. Safe to
    call more than once (one finder at a time)."""
    for finder in [f for f in sys.meta_path if type(f).__name__ == _RegisterOnImport.__name__]:
        sys.meta_path.remove(finder)
    waiting = set()
    for name in HOOKS:
        if name in sys.modules:
            _run_hook(name, sys.modules[name])
        else:
            waiting.add(name)
    if waiting:
        sys.meta_path.insert(0, _RegisterOnImport(waiting))


install()
