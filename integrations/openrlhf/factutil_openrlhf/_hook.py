"""``install()``: patch OpenRLHF when (or if already) its modules are imported. Standard library only.

Ray runs ``factutil_openrlhf.install`` in every worker process of the job before the worker
imports anything (``runtime_env["worker_process_setup_hook"]``). Most of those workers (vLLM
engines, model shards) never import OpenRLHF's experience code, so ``install`` costs them only
a ``sys.meta_path`` entry: the patch itself, with torch, numpy and factutil, is imported by the
first process that imports one of the :data:`TARGETS`.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Mapping
from typing import Any

TARGETS = {
    "openrlhf.trainer.ppo_utils.samples_generator": "patch_samples_generator",
    "openrlhf.trainer.ppo_utils.experience_maker": "patch_experience_maker",
}
"""OpenRLHF 0.11 module -> the function of :mod:`factutil_openrlhf.patch` that patches it."""

_lock = threading.RLock()
_requested: dict[str, Any] = {"config": None}


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then patches the fresh module."""

    def __init__(self, loader: Any, fullname: str):
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _apply(self._fullname, module)

    def __getattr__(self, name: str) -> Any:
        # get_source, is_package, get_resource_reader ...: whatever the real loader offers.
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that wraps the loader of each of :data:`TARGETS`.

    It finds nothing itself: it asks the finders after it for the module's spec and swaps in a
    loader that patches the module right after it executes.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, PostImportFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, fullname)
        return spec


def _apply(fullname: str, module: Any) -> None:
    from factutil_openrlhf import patch  # torch, numpy, factutil: only now

    with _lock:
        patch.configure(_requested["config"])
        getattr(patch, TARGETS[fullname])(module)


def requested_config() -> Any:
    """What :func:`install` was last given: a config, a mapping of its fields, or None (the
    ``FACTUTIL_*`` environment)."""
    return _requested["config"]


def install(config: Any = None) -> None:
    """Patch OpenRLHF's experience code for factutil process advantages (docs/method.md §5), now or on import.

    The target of Ray's ``worker_process_setup_hook`` (``"factutil_openrlhf.install"``). Imports
    only the standard library. Registers a post-import hook on ``sys.meta_path`` and patches
    the :data:`TARGETS` already in ``sys.modules``; when a target is imported later it is patched
    right after it executes. Idempotent: a second call adds no second hook and never wraps a
    method twice, but a new ``config`` replaces the old one.

    The patches (see :mod:`factutil_openrlhf.patch`):
    ``SamplesGenerator._process_response_into_experience`` carries the executor's ``factutil``
    payload into ``Experience.info``; ``RemoteExperienceMaker.compute_advantages_and_returns``
    calls OpenRLHF's own, then adds omega * A_proc on each action's tokens.

    Args:
        config: a ``factutil.FactUtilConfig``, a mapping of its fields, or None to read the
            ``FACTUTIL_*`` environment variables (:func:`factutil_openrlhf.config_from_env`) when
            the patch is applied.

    Raises:
        factutil_openrlhf.SettingsError: bad settings, raised when a target is patched (so from
            the import of that OpenRLHF module: a misconfigured run stops at once, naming the
            variable).
    """
    with _lock:
        if config is not None and not isinstance(config, Mapping) and not hasattr(
            config, "model_dump"
        ):
            raise TypeError(
                f"config must be a FactUtilConfig, a mapping or None, got {type(config).__name__}"
            )
        _requested["config"] = config
        if not any(isinstance(finder, PostImportFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, PostImportFinder())
        for fullname in TARGETS:
            module = sys.modules.get(fullname)
            if module is not None:
                _apply(fullname, module)
