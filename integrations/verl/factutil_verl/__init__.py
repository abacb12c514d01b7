"""factutil-verl: FactAgent training in verl 0.9–0.10 (>=0.9,<0.11; tested on 0.9.1) without a fork.

- ``factagent`` agent loop (:class:`factutil_verl.agent_loop.FactAgentLoop`): one sample per action,
  prompts of question + fact store + latest observation, Search-R1 ``/retrieve`` for ``search``.
- ``factutil`` trainer mode (:class:`factutil_verl.trainer.FactUtilTrainer`): verl's sync V1
  trainer whose advantages are A = A_out + omega * A_proc (docs/method.md §5), GRPO fallback per group.
- ``factutil_verl.reward:compute_score``: answer F1 with the empty-store rule.

Importing this package registers both with verl (the ``verl.plugins`` entry point does it
automatically; ``VERL_USE_EXTERNAL_MODULES=factutil_verl`` is the fallback). Check an environment
with ``python -m factutil_verl check``.
"""

from factutil_verl import plugin  # noqa: F401  registration first
from factutil_verl.advantage import FactAgentAdvantages, compute_factagent_advantages
from factutil_verl.agent_loop import AGENT_NAME, FactAgentLoop
from factutil_verl.config import (
    FactAgentLoopConfig,
    FactUtilConfigError,
    factutil_config_from_verl,
)
from factutil_verl.reward import compute_score, golden_answers_of
from factutil_verl.trainer import TRAINER_MODE, FactUtilTrainer

__version__ = "0.1.0"

__all__ = [
    "AGENT_NAME",
    "TRAINER_MODE",
    "FactAgentAdvantages",
    "FactAgentLoop",
    "FactAgentLoopConfig",
    "FactUtilConfigError",
    "FactUtilTrainer",
    "compute_factagent_advantages",
    "compute_score",
    "factutil_config_from_verl",
    "golden_answers_of",
]
