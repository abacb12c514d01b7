"""factutil-openrlhf: FactAgent per-step process advantages in OpenRLHF 0.11 agent training.

Three pieces (README.md of this distribution has the walk-through):

- :func:`make_executor` wraps the agent file's ``AgentInstance`` so each response carries the
  parsed actions and their token spans (``factutil`` payload);
- :func:`install`, the Ray ``worker_process_setup_hook`` target, patches OpenRLHF's experience
  code when it is imported: A = OpenRLHF's advantage + omega * A_proc on each action's tokens
  (docs/method.md §5);
- ``python -m factutil_openrlhf.train_ppo_ray <OpenRLHF args>`` starts Ray with that hook and the
  ``FACTUTIL_*`` settings, then runs ``openrlhf.cli.train_ppo_ray``.

Importing this package (and calling :func:`install`) loads only the standard library; the rest
is imported on first use.
"""

from __future__ import annotations

from typing import Any

from factutil_openrlhf._hook import install
from factutil_openrlhf.settings import (
    PAYLOAD_KEY,
    SettingsError,
    config_from_env,
    golden_answers_from_label,
)

__version__ = "0.1.0"

__all__ = [
    "PAYLOAD_KEY",
    "SettingsError",
    "config_from_env",
    "golden_answers_from_label",
    "install",
    "make_executor",
]


def __getattr__(name: str) -> Any:
    # make_executor imports OpenRLHF: only on first use, never at package import.
    if name == "make_executor":
        from factutil_openrlhf.executor import make_executor

        return make_executor
    raise AttributeError(f"module 'factutil_openrlhf' has no attribute {name!r}")
