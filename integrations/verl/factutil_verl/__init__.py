"""factutil-verl: FactAgent training in verl 0.9–0.10 (>=0.9,<0.11; tested on 0.9.1) without a fork.

- ``factagent`` agent loop (:class:`factutil_verl.agent_loop.FactAgentLoop`): one sample per action,
  prompts of question + fact store + latest observation, Search-R1 ``/retrieve`` for ``search``.
- ``search_r1`` agent loop (:class:`factutil_verl.search_r1.SearchR1Loop`): a Search-R1-style agent
  over the dataset's own prompt, one row per rollout with each turn's span, each search carrying
  its observation (score it with ``+algorithm.factutil.facts=retrieved``).
- ``factutil`` trainer mode (:class:`factutil_verl.trainer.FactUtilTrainer`): verl's sync V1
  trainer whose advantages are A = A_out + omega * A_proc (docs/method.md §5), GRPO fallback per group.
- ``factutil_verl.reward:compute_score``: answer F1 with the empty-store rule.

Importing this package (or the ``verl.plugins`` entry point, :mod:`factutil_verl.plugin`) loads
only the standard library: both names are registered when verl's agent-loop and V1-trainer
modules are first imported (``VERL_USE_EXTERNAL_MODULES=factutil_verl`` is the fallback when the
entry point is skipped), and the names below are imported on first access. Check an environment
with ``python -m factutil_verl check``.
"""

from importlib import import_module

from factutil_verl import plugin  # noqa: F401  registration first (lazy, standard library only)

__version__ = "0.1.0"

_EXPORTS = {
    "AGENT_NAME": "factutil_verl.agent_loop",
    "FactAgentAdvantages": "factutil_verl.advantage",
    "FactAgentLoop": "factutil_verl.agent_loop",
    "FactAgentLoopConfig": "factutil_verl.config",
    "FactUtilConfigError": "factutil_verl.config",
    "FactUtilTrainer": "factutil_verl.trainer",
    "SearchR1Loop": "factutil_verl.search_r1",
    "SearchR1LoopConfig": "factutil_verl.config",
    "TRAINER_MODE": "factutil_verl.trainer",
    "compute_factagent_advantages": "factutil_verl.advantage",
    "compute_score": "factutil_verl.reward",
    "factutil_config_from_verl": "factutil_verl.config",
    "golden_answers_of": "factutil_verl.reward",
}

__all__ = [*_EXPORTS]  # noqa: PLE0604 - the keys are the names


def __getattr__(name: str):
    """Import a public name's module on first access (PEP 562): ``import verl`` runs this
    package's plugin in every Ray process, where most of it is never used."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'factutil_verl' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
