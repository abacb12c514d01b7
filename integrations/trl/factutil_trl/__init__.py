"""factutil-trl: FactAgent's dense per-action credit in TRL's GRPOTrainer (docs/method.md §5).

- :class:`FactUtilGRPOTrainer`: ``GRPOTrainer`` whose advantage on each action's tokens is
  A_out + Ω·A_proc (Ω = 0: TRL's own loss, bit for bit);
- :class:`FactAgentRollout`: the multi-turn Search–Assert–Answer ``rollout_func``;
- :class:`SearchR1Rollout`: a Search-R1-style ``rollout_func`` (``<search>``, ``<information>``,
  ``<answer>``; the dataset's own prompt), for ``facts="retrieved"``;
- :func:`factagent_reward`: the outcome reward (answer F1, 0 from an empty store).
"""

from factutil_trl.reward import factagent_reward
from factutil_trl.rollout import PAYLOAD_KEY, FactAgentRollout, question_of, transformers_generate
from factutil_trl.search_r1 import SearchR1Rollout
from factutil_trl.trainer import FactUtilGRPOTrainer

__version__ = "0.1.0"

__all__ = [
    "PAYLOAD_KEY",
    "FactAgentRollout",
    "FactUtilGRPOTrainer",
    "SearchR1Rollout",
    "factagent_reward",
    "question_of",
    "transformers_generate",
]
