"""factutil: dense per-step credit for RL-trained search agents (the FactAgent method).

See docs/method.md for the method; ``compute_process_advantages`` is the entry point.
"""

from factutil.advantages import outcome_advantages, process_advantages, total_advantages
from factutil.api import (
    ActionRecord,
    ClusterRecord,
    ProcessAdvantages,
    RolloutRecord,
    compute_process_advantages,
)
from factutil.cluster import ExactClusterer, SemanticClusterer, make_clusterer
from factutil.io import InputError, read_groups, read_rollouts
from factutil.metrics import exact_match, f1, normalize_answer
from factutil.schema import (
    Action,
    AnswerAction,
    AssertAction,
    FactUtilConfig,
    Group,
    InvalidAction,
    RawAction,
    Rollout,
    SearchAction,
    Triple,
    group_rollouts,
)
from factutil.workers import FactWork, make_work

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionRecord",
    "AnswerAction",
    "AssertAction",
    "ClusterRecord",
    "ExactClusterer",
    "FactWork",
    "FactUtilConfig",
    "Group",
    "InputError",
    "InvalidAction",
    "ProcessAdvantages",
    "RawAction",
    "Rollout",
    "RolloutRecord",
    "SearchAction",
    "SemanticClusterer",
    "Triple",
    "compute_process_advantages",
    "exact_match",
    "f1",
    "group_rollouts",
    "make_work",
    "make_clusterer",
    "normalize_answer",
    "outcome_advantages",
    "process_advantages",
    "read_groups",
    "read_rollouts",
    "total_advantages",
]
