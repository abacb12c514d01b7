"""Deprecated import path: the FactAgent prompt and store are :mod:`factutil.tools.agent`; the
outcome reward and the gold-answer rule are :mod:`factutil.metrics`.

Kept as a thin re-export because the adapters and their READMEs documented ``factutil.agent``;
new code imports from the modules above. It will be removed in a later release.
"""

from factutil.metrics import GOLD_KEYS, Outcome, golden_answers_from, outcome_reward
from factutil.tools.agent import (
    EMPTY_STORE,
    INSTRUCTIONS,
    NO_OBSERVATION,
    add_to_store,
    build_messages,
    render_store,
)

__all__ = [
    "EMPTY_STORE", "GOLD_KEYS", "INSTRUCTIONS", "NO_OBSERVATION", "Outcome", "add_to_store",
    "build_messages", "golden_answers_from", "outcome_reward", "render_store",
]
