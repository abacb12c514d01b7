"""Clusters -> Beta-smoothed utilities (SPEC.md §3).

For a group with rollout successes y (G,) and a membership matrix saying which rollout's store
ever held a member of which cluster:

    n_c = #rollouts holding c,   s_c = sum of y over them,
    m_c = (s_c + epsilon) / (n_c + 2 epsilon),   u_c = m_c - mean(y).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClusterUtilities:
    """Per-cluster statistics of one group (SPEC §3). Arrays have shape (K,).

    Attributes:
        n: int64, rollouts whose store held the cluster.
        s: float64, summed success of those rollouts.
        mean: float64, posterior mean success m_c.
        utility: float64, u_c = m_c - baseline, in (-1, 1).
        baseline: the group's mean success p-bar.
    """

    n: np.ndarray
    s: np.ndarray
    mean: np.ndarray
    utility: np.ndarray
    baseline: float


def success_rate(success: np.ndarray) -> float:
    """The group's mean success p-bar, summed exactly (``math.fsum``) so order never matters."""
    success = np.asarray(success, dtype=np.float64)
    if success.size == 0:
        raise ValueError("success must hold at least one rollout, got an empty array")
    return math.fsum(success.tolist()) / success.size


def smoothed_success(s: np.ndarray, n: np.ndarray, epsilon: float) -> np.ndarray:
    """Posterior mean success m_c = (s_c + epsilon) / (n_c + 2 epsilon) (SPEC §3).

    Args:
        s: float64 (K,) summed success; n: int (K,) rollouts holding each cluster.

    Returns:
        float64 (K,).
    """
    return (s + epsilon) / (n + 2.0 * epsilon)


def cluster_utilities(
    membership: np.ndarray, success: np.ndarray, epsilon: float = 0.5
) -> ClusterUtilities:
    """Beta(epsilon, epsilon)-smoothed success of each cluster relative to the group (SPEC §3).

    Args:
        membership: bool array (G, K); ``membership[i, c]`` is True when rollout i's store ever
            held a member of cluster c (a rollout counts once).
        success: float array (G,), y_i in [0, 1].
        epsilon: prior strength, > 0.

    Returns:
        :class:`ClusterUtilities` with arrays of shape (K,).

    Raises:
        ValueError: on mismatched shapes, y outside [0, 1] or non-finite, or epsilon <= 0.
    """
    membership = np.asarray(membership, dtype=bool)
    success = np.asarray(success, dtype=np.float64)
    if membership.ndim != 2 or success.ndim != 1 or membership.shape[0] != success.shape[0]:
        raise ValueError(
            f"membership must be (G, K) and success (G,), got {membership.shape} and {success.shape}"
        )
    if not np.all(np.isfinite(success)) or np.any(success < 0.0) or np.any(success > 1.0):
        raise ValueError(f"success must lie in [0, 1], got {success.tolist()}")
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    baseline = success_rate(success)
    n = membership.sum(axis=0, dtype=np.int64)
    # Rollouts are added one after another, in the order given (callers pass them in rollout_id
    # order), for every K: numpy's sum would switch to pairwise summation when K == 1.
    s = np.zeros(membership.shape[1], dtype=np.float64)
    for row, y in zip(membership, success.tolist()):
        s += np.where(row, y, 0.0)
    mean = smoothed_success(s, n, epsilon)
    return ClusterUtilities(n=n, s=s, mean=mean, utility=mean - baseline, baseline=baseline)
