"""factutil: dense per-step credit for RL-trained search agents (the FactAgent method).

See docs/method.md for the method; ``compute_process_advantages`` is the entry point. This
package exports the names a user of the step needs: the entry point and its result, the config,
the input models, reading, the clusterer protocol and the error type. Everything else is
importable from its own module (``factutil.metrics``, ``factutil.advantages``, ``factutil.cluster``,
``factutil.tools.retrieval`` …; docs/architecture.md maps them).
"""

from factutil.actions import (
    Action,
    AnswerAction,
    AssertAction,
    InvalidAction,
    SearchAction,
    Triple,
)
from factutil.api import ProcessAdvantages, compute_process_advantages
from factutil.cluster import Clusterer, make_clusterer
from factutil.config import FactUtilConfig
from factutil.io import InputError, read_groups
from factutil.schema import Group, Rollout

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AnswerAction",
    "AssertAction",
    "Clusterer",
    "FactUtilConfig",
    "Group",
    "InputError",
    "InvalidAction",
    "ProcessAdvantages",
    "Rollout",
    "SearchAction",
    "Triple",
    "__version__",
    "compute_process_advantages",
    "make_clusterer",
    "read_groups",
]
