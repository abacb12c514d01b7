"""The FactAgent prompt: question + fact store + latest observation, never the history (docs/method.md §1).

Every turn's prompt is rebuilt from these three parts only, so its length does not grow with the
number of turns (the paper's ~4x shorter prompts at turn 8). The messages go through the model's
chat template (verl's Continuous Token builder) in the agent loop. The prompt and the store are
the core's tools (:mod:`factutil.tools.agent`, shared with the other trainer adapters), re-exported
here under their names.
"""

from __future__ import annotations

from factutil.tools.agent import *  # the prompt and store, under their names
from factutil.tools.agent import __all__  # noqa: F401
