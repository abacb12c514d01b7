"""Clusters -> Beta-smoothed utilities (docs/method.md §3).

For a group with rollout successes y (G,), p-bar = mean(y), and a membership matrix saying which
rollout's store ever held a member of which cluster:

    n_c = #rollouts holding c,   s_c = sum of y over them,
    prior="beta"  (the paper's Eq. 5-9):  m_c = (s_c + epsilon) / (n_c + 2 epsilon)
    prior="group" (this library's option): m_c = (s_c + 2 epsilon p-bar) / (n_c + 2 epsilon)
    u_c = m_c - p-bar.

Under "group" the prior is Beta with mean p-bar and strength 2 epsilon, so a group whose rollouts
all have the same success gives every cluster u_c = 0 exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Prior = Literal["beta", "group"]


@dataclass(frozen=True)
class ClusterUtilities:
    """Per-cluster statistics of one group (docs/method.md §3). Arrays have shape (K,).

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
    """The group's mean success p-bar, summed exactly (``math.fsum``) so order never matters.

    A group whose rollouts all have the same success y gets p-bar = y exactly (the mean of equal
    values; ``fsum`` then a division can land one ulp away), so that its utilities under
    ``prior="group"`` are exactly 0.
    """
    success = np.asarray(success, dtype=np.float64)
    if success.size == 0:
        raise ValueError("success must hold at least one rollout, got an empty array")
    values = success.tolist()
    if min(values) == max(values):
        return values[0]
    return math.fsum(values) / len(values)


def smoothed_utilities(
    s: np.ndarray,
    deviation: np.ndarray,
    n: np.ndarray,
    baseline: np.ndarray | float,
    epsilon: float,
    prior: Prior = "beta",
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean success m_c and utility u_c = m_c - p-bar of each cluster (docs/method.md §3).

    ``prior="beta"`` (the paper's Eq. 5-9): Beta(epsilon, epsilon),
    m_c = (s_c + epsilon) / (n_c + 2 epsilon). ``prior="group"`` (this library's option): Beta with
    mean p-bar and strength 2 epsilon, m_c = (s_c + 2 epsilon p-bar) / (n_c + 2 epsilon), computed as
    u_c = d_c / (n_c + 2 epsilon) with d_c = sum of (y_i - p-bar) over the rollouts holding c, the same
    value algebraically, and exactly 0 when every rollout of the group has the same success.

    Args:
        s: float64 (K,) summed success of the rollouts holding each cluster.
        deviation: float64 (K,) summed y_i - p-bar of those rollouts (read only by "group").
        n: int (K,) rollouts holding each cluster.
        baseline: float64 (K,) p-bar of each cluster's group, or one scalar.
        epsilon: prior strength, > 0.
        prior: ``"beta"`` or ``"group"``.

    Returns:
        ``(mean, utility)``, float64 (K,) each.

    Raises:
        ValueError: for an unknown prior.
    """
    if prior == "beta":
        mean = (s + epsilon) / (n + 2.0 * epsilon)
        return mean, mean - baseline
    if prior == "group":
        utility = deviation / (n + 2.0 * epsilon)
        return baseline + utility, utility
    raise ValueError(f"prior must be 'beta' or 'group', got {prior!r}")


def cluster_utilities(
    membership: np.ndarray, success: np.ndarray, epsilon: float = 0.5, prior: Prior = "beta"
) -> ClusterUtilities:
    """Beta-smoothed success of each cluster relative to the group (docs/method.md §3).

    Args:
        membership: bool array (G, K); ``membership[i, c]`` is True when rollout i's store ever
            held a member of cluster c (a rollout counts once).
        success: float array (G,), y_i in [0, 1].
        epsilon: prior strength, > 0.
        prior: ``"beta"`` (Beta(epsilon, epsilon), the paper's) or ``"group"`` (mean p-bar);
            see :func:`smoothed_utilities`.

    Returns:
        :class:`ClusterUtilities` with arrays of shape (K,).

    Raises:
        ValueError: on mismatched shapes, y outside [0, 1] or non-finite, epsilon <= 0, or an
            unknown prior.
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
    deviation = np.zeros(membership.shape[1], dtype=np.float64)
    for row, y in zip(membership, success.tolist()):
        s += np.where(row, y, 0.0)
        deviation += np.where(row, y - baseline, 0.0)
    mean, utility = smoothed_utilities(s, deviation, n, baseline, epsilon, prior)
    return ClusterUtilities(n=n, s=s, mean=mean, utility=utility, baseline=baseline)
