"""factutil: dense per-step credit for RL-trained search agents (the FactAgent method).

``compute_process_advantages`` is the entry point (docs/method.md); the rest is importable from
its own module (docs/architecture.md maps them).
"""

from factutil.actions import Action, AnswerAction, AssertAction, InvalidAction, SearchAction, Triple
from factutil.api import ProcessAdvantages, compute_process_advantages
from factutil.cluster import Clusterer, make_clusterer
from factutil.config import FactUtilConfig
from factutil.io import InputError, read_groups
from factutil.schema import Group, Rollout

__version__ = "0.1.0"

__all__ = [
    "Action", "AnswerAction", "AssertAction", "Clusterer", "FactUtilConfig", "Group", "InputError",
    "InvalidAction", "ProcessAdvantages", "Rollout", "SearchAction", "Triple", "__version__",
    "compute_process_advantages", "make_clusterer", "read_groups",
]
