"""``install()``: patch OpenRLHF when (or if already) its modules are imported. Standard library
and wrapt only.

Ray runs ``factutil_openrlhf.install`` in every worker process of the job before the worker
imports anything (``runtime_env["worker_process_setup_hook"]``). Most of those workers (vLLM
engines, model shards) never import OpenRLHF's experience code, so ``install`` costs them only
wrapt's post-import hooks: the patch itself, with torch, numpy and factutil, is imported by the
first process that imports one of the :data:`TARGETS`; each hook runs once and is dropped.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from functools import partial
from typing import Any

import wrapt

TARGETS = {
    "openrlhf.trainer.ppo_utils.samples_generator": "patch_samples_generator",
    "openrlhf.trainer.ppo_utils.experience_maker": "patch_experience_maker",
}
"""OpenRLHF 0.11 module -> the function of :mod:`factutil_openrlhf.patch` that patches it."""

_lock = threading.RLock()
_requested: dict[str, Any] = {"config": None}
_waiting: set[str] = set()  # the targets whose hook waits for their import


def _apply(fullname: str, module: Any) -> None:
    from factutil_openrlhf import patch  # torch, numpy, factutil: only now

    with _lock:
        _waiting.discard(fullname)
        patch.configure(_requested["config"])
        getattr(patch, TARGETS[fullname])(module)


def requested_config() -> Any:
    """What :func:`install` was last given: a config, a mapping of its fields, or None (the
    ``FACTUTIL_*`` environment)."""
    return _requested["config"]


def install(config: Any = None) -> None:
    """Patch OpenRLHF's experience code for factutil process advantages (docs/method.md §5), now or on import.

    The target of Ray's ``worker_process_setup_hook`` (``"factutil_openrlhf.install"``). Imports
    only the standard library and wrapt. Patches the :data:`TARGETS` already in ``sys.modules``
    and registers a wrapt post-import hook for each other one, which patches it right after it
    executes. Idempotent: a second call adds no second hook and never wraps a method twice, but
    a new ``config`` replaces the old one.

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
        for fullname in TARGETS:
            module = sys.modules.get(fullname)
            if module is not None:
                _apply(fullname, module)
            elif fullname not in _waiting:
                _waiting.add(fullname)
                wrapt.register_post_import_hook(partial(_apply, fullname), fullname)
