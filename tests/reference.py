"""Per-rollout and per-group faces of the batched method steps, for the tests to check by hand.

The library computes a whole batch at once (:func:`factutil.utility.batch_utilities`,
:func:`factutil.shaping.process_rewards`, :func:`factutil.advantages.segment_normalize`); these
wrap one group or one rollout of it, so a test can state a small case the way docs/method.md
writes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from factutil.advantages import segment_normalize
from factutil.shaping import ProcessRewards, action_gains, potentials, process_rewards
from factutil.utility import Prior, UtilityFrom, batch_utilities, success_rate


def group_normalize(values: np.ndarray, eps: float = 1e-6, by_std: bool = True) -> np.ndarray:
    """:func:`~factutil.advantages.segment_normalize` of one group: float64 (n,)."""
    values = np.asarray(values, dtype=np.float64)
    return segment_normalize(values, np.zeros(1 if values.size else 0, dtype=np.int64), eps, by_std)


@dataclass(frozen=True)
class ClusterUtilities:
    """Per-cluster statistics of one group (docs/method.md §3). Arrays have shape (K,).

    Attributes:
        n: int64, rollouts whose store held the cluster.
        s: float64, summed success of those rollouts.
        mean: float64, posterior mean success m_c.
        utility: float64, u_c = m_c - baseline, in (-1, 1).
        baseline: the group's mean success p-bar.
        rollout_utility: float64 (G, K), the utility rollout i's shaping reads for cluster c
            (u_c, or its leave-one-out value; 0 where rollout i never held c).
    """

    n: np.ndarray
    s: np.ndarray
    mean: np.ndarray
    utility: np.ndarray
    baseline: float
    rollout_utility: np.ndarray


def cluster_utilities(
    membership: np.ndarray,
    success: np.ndarray,
    epsilon: float = 0.5,
    prior: Prior = "group",
    utility_from: UtilityFrom = "group",
) -> ClusterUtilities:
    """Beta-smoothed success of each cluster relative to the group (docs/method.md §3).

    The one-group face of :func:`batch_utilities`: rollouts count in the order given (callers pass
    them in rollout_id order).

    Args:
        membership: bool array (G, K); ``membership[i, c]`` is True when rollout i's store ever
            held a member of cluster c (a rollout counts once).
        success: float array (G,), y_i in [0, 1].
        epsilon: prior strength, > 0.
        prior: ``"group"`` (mean p-bar) or ``"beta"`` (Beta(epsilon, epsilon), the paper's);
            see :func:`smoothed_utilities`.
        utility_from: ``"group"`` or ``"loo"``; see :func:`batch_utilities`.

    Returns:
        :class:`ClusterUtilities`.

    Raises:
        ValueError: on mismatched shapes, y outside [0, 1] or non-finite, epsilon <= 0, or an
            unknown prior or utility.
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
    if prior not in ("beta", "group"):
        raise ValueError(f"prior must be 'beta' or 'group', got {prior!r}")
    baseline = success_rate(success)
    rows, clusters = np.nonzero(membership)  # one occurrence per (rollout, cluster), step 0
    clusters_total = membership.shape[1]
    batch = batch_utilities(
        [np.arange(clusters_total, dtype=np.int64)], rows.astype(np.int64),
        np.zeros(len(rows), dtype=np.int64), clusters.astype(np.int64), success,
        np.arange(len(success), dtype=np.int64), np.zeros(1, dtype=np.int64), epsilon, prior,
        utility_from=utility_from,
    )
    rollout_utility = np.zeros(membership.shape, dtype=np.float64)
    rollout_utility[batch.pair_row, batch.pair_cluster] = batch.pair_utility
    return ClusterUtilities(
        n=batch.n, s=batch.s, mean=batch.mean, utility=batch.utility, baseline=baseline,
        rollout_utility=rollout_utility,
    )


def store_potentials(new_clusters: Sequence[np.ndarray], utility: np.ndarray) -> np.ndarray:
    """:func:`potentials` of one rollout given the clusters each action added.

    Args:
        new_clusters: T int arrays, the clusters each action added (each cluster at most once per
            rollout; summed exactly, so the order of triples in an assert does not matter).
        utility: float64 (K,), u_c of the group's clusters.

    Returns:
        float64 (T,), values in (-1, 1).
    """
    utility = np.asarray(utility, dtype=np.float64)
    return potentials(np.array([cluster_gain(added, utility) for added in new_clusters],
                               dtype=np.float64))


def rollout_process_rewards(
    kinds: np.ndarray,
    new_clusters: Sequence[np.ndarray],
    utility: np.ndarray,
    repeated_search: np.ndarray,
    *,
    gamma: float = 1.0,
    alpha: float = 0.2,
    invalid_penalty: float = -0.1,
    repeat_search_penalty: float = -0.01,
    empty_store_answer_penalty: float = -0.1,
) -> ProcessRewards:
    """All process reward parts of one rollout's effective actions (docs/method.md §4).

    Args:
        kinds: int (T,) action codes.
        new_clusters: T int arrays, the clusters each action brought into the store.
        utility: float64 (K,) cluster utilities of the group.
        repeated_search: bool (T,), True on a search whose normalised query repeats an earlier one.
        gamma, alpha, *_penalty: see :func:`process_rewards`.

    Returns:
        :class:`ProcessRewards` with (T,) arrays.
    """
    kinds = np.asarray(kinds)
    repeated_search = np.asarray(repeated_search, dtype=bool)
    if len(new_clusters) != len(kinds) or repeated_search.shape != kinds.shape:
        raise ValueError(
            f"kinds, new_clusters and repeated_search must have one entry per action, got "
            f"{len(kinds)}, {len(new_clusters)} and {len(repeated_search)}"
        )
    utility = np.asarray(utility, dtype=np.float64)
    counts = np.array([len(a) for a in new_clusters], dtype=np.int64)
    clusters = np.concatenate(
        [np.asarray(a, dtype=np.int64) for a in new_clusters] or [np.zeros(0, dtype=np.int64)]
    )
    pair_step = np.repeat(np.arange(len(kinds), dtype=np.int64), counts)
    gain, added = action_gains(
        np.zeros(len(pair_step), dtype=np.int64), pair_step, utility[clusters], 1, len(kinds)
    )
    parts = process_rewards(
        kinds[None, :], gain, added, repeated_search[None, :],
        gamma=gamma, alpha=alpha, invalid_penalty=invalid_penalty,
        repeat_search_penalty=repeat_search_penalty,
        empty_store_answer_penalty=empty_store_answer_penalty,
    )
    return ProcessRewards(*(getattr(parts, name)[0] for name in ProcessRewards.__dataclass_fields__))


def cluster_gain(added: Sequence[int], utility: np.ndarray) -> float:
    """Summed utility of the clusters an action added, summed exactly (order never matters)."""
    return math.fsum(utility[int(c)] for c in added)


def outcome_advantages(
    rewards: np.ndarray, eps: float = 1e-6, norm_by_std: bool = True
) -> np.ndarray:
    """GRPO outcome advantage of each rollout of one group (docs/method.md §5).

    Args:
        rewards: float (G,) outcome rewards R_i.
        eps: see :func:`group_normalize`.
        norm_by_std: divide by the group's std + eps.

    Returns:
        float64 (G,). A group of one rollout, or whose rollouts all score the same, gets zeros.
    """
    return group_normalize(rewards, eps=eps, by_std=norm_by_std)


def process_advantages(
    process_rewards: np.ndarray, eps: float = 1e-6, mode: str = "none"
) -> np.ndarray:
    """Process advantage, float64 (N,), of the N actions of one group (docs/method.md §5): under
    ``mode="group"`` :func:`group_normalize` of the rewards, under ``"none"`` the rewards (the
    step computes it for the whole batch at once, ``process_norm``)."""
    if mode == "group":
        return group_normalize(process_rewards, eps=eps, by_std=True)
    if mode == "none":
        values = np.asarray(process_rewards, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"process_rewards must be finite, got {values.tolist()}")
        return values.copy()
    raise ValueError(f"process_norm must be 'group' or 'none', got {mode!r}")
