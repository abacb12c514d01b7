"""Clusters -> Beta-smoothed utilities u_c = m_c - p-bar (docs/method.md §3, which gives the
priors ``"group"`` and ``"beta"``, leave-one-out and their reasons)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Prior = Literal["beta", "group"]
UtilityFrom = Literal["group", "loo"]

PRIOR_RISK = (
    "at least half of this step's groups failed in every rollout, and under "
    "prior='beta' (the paper's Beta(epsilon, epsilon)) such a group gives every fact a positive "
    "utility, rarest facts most: in the credit ablation (benchmarks/README.md) that is what made "
    "plain GRPO from a cold start take off in fewer seeds than outcome-only. Without dynamic "
    "sampling use the defaults (prior='group', process_norm='group'); "
    "factutil/groups_uniform_share reports the share of such groups per step"
)


class PriorRiskWarning(UserWarning):
    """:data:`PRIOR_RISK`: a step under ``prior="beta"`` has at least half of its groups failing
    in every rollout, so the paper's prior rewards facts blindly (docs/method.md §3)."""


def success_rate(success: np.ndarray) -> float:
    """The group's mean success p-bar, exact (``math.fsum``); equal successes y give exactly y
    (a division can land one ulp away), so such a group's ``"group"`` utilities are exactly 0."""
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
    prior: Prior = "group",
) -> tuple[np.ndarray, np.ndarray]:
    """``(m_c, u_c)``, float64 (K,) each, of K clusters (docs/method.md §3).
    ``s``, ``n``: float64 s_c and int n_c (K,); ``deviation``: d_c, the summed y_i - p-bar of the
    rollouts holding c (read by ``"group"``, where u_c = d_c / (n_c + 2 epsilon): the formula of
    §3, exactly 0 when a group's successes are equal); ``baseline``: p-bar per cluster (K,) or a
    scalar. Raises ValueError for an unknown prior."""
    if prior == "beta":
        mean = (s + epsilon) / (n + 2.0 * epsilon)
        return mean, mean - baseline
    if prior == "group":
        utility = deviation / (n + 2.0 * epsilon)
        return baseline + utility, utility
    raise ValueError(f"prior must be 'beta' or 'group', got {prior!r}")


@dataclass(frozen=True)
class BatchUtilities:
    """Every cluster of a batch of groups (docs/method.md §3), numbered 0..K-1 across the batch.
    (K,) per cluster: its group, n_c (int64), s_c, m_c, u_c (float64); ``fact_cluster`` (facts,);
    ``pair_*`` (P,): each (rollout, cluster) pair once, sorted, with the step that first brought
    the cluster in and the utility the rollout reads; counts of groups zeroed, uniform, all-fail;
    ``prior_risk``: §3's case for :class:`PriorRiskWarning` (the step warns it)."""

    cluster_starts: np.ndarray
    cluster_group: np.ndarray
    n: np.ndarray
    s: np.ndarray
    mean: np.ndarray
    utility: np.ndarray
    fact_cluster: np.ndarray
    pair_row: np.ndarray
    pair_cluster: np.ndarray
    pair_step: np.ndarray
    pair_utility: np.ndarray
    uniform_zeroed: int
    groups_uniform: int
    groups_all_fail: int
    prior_risk: bool


def batch_utilities(
    labels: Sequence[np.ndarray],
    occurrence_row: np.ndarray,
    occurrence_step: np.ndarray,
    occurrence_fact: np.ndarray,
    success: np.ndarray,
    rank: np.ndarray,
    rollout_starts: np.ndarray,
    epsilon: float,
    prior: Prior = "group",
    uniform_groups: Literal["keep", "zero"] = "keep",
    utility_from: UtilityFrom = "group",
) -> BatchUtilities:
    """The :class:`BatchUtilities` of every group of a batch at once (docs/method.md §3).
    Rollouts ("rows") and facts are numbered across the batch, group by group; ``labels``: per
    group, int cluster labels of its facts; ``occurrence_*``: int64, each asserted triple's row,
    step and batch fact; ``success``, ``rank``: (R,) y and position by rollout_id, the order s_c
    is summed in; ``rollout_starts``: int64, each group's first row. Each group's numbers depend
    on it alone."""
    if utility_from not in ("group", "loo"):
        raise ValueError(f"utility must be 'group' or 'loo', got {utility_from!r}")
    groups = len(labels)
    sizes = np.array([int(g.max()) + 1 if len(g) else 0 for g in labels], dtype=np.int64)
    cluster_starts = np.cumsum(sizes) - sizes
    total = int(sizes.sum())
    fact_counts = np.array([len(g) for g in labels], dtype=np.int64)
    fact_group = np.repeat(np.arange(groups, dtype=np.int64), fact_counts)
    fact_cluster = fact_group
    if groups:
        fact_cluster = np.concatenate(labels).astype(np.int64) + cluster_starts[fact_group]
    cluster_group = np.repeat(np.arange(groups, dtype=np.int64), sizes)
    occurrence_cluster = fact_cluster[occurrence_fact]
    keys, first = np.unique(occurrence_row * max(total, 1) + occurrence_cluster, return_index=True)
    pair_row, pair_cluster = np.divmod(keys, max(total, 1))
    pair_step = occurrence_step[first]
    success = np.asarray(success, dtype=np.float64)
    n = np.bincount(pair_cluster, minlength=total).astype(np.int64)
    order = np.lexsort((rank[pair_row], pair_cluster))
    s = np.bincount(pair_cluster[order], weights=success[pair_row[order]], minlength=total)
    bounds = np.append(rollout_starts, len(success))
    rollout_counts = np.diff(bounds)
    row_group = np.repeat(np.arange(groups, dtype=np.int64), rollout_counts)
    baseline = np.array(
        [success_rate(success[a:b]) if b > a else 0.0
         for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())],
        dtype=np.float64,
    )
    deviation = np.zeros(total, dtype=np.float64)
    if prior == "group":
        row_deviation = success - baseline[row_group]
        deviation = np.bincount(
            pair_cluster[order], weights=row_deviation[pair_row[order]], minlength=total
        )
    mean, utility = smoothed_utilities(s, deviation, n, baseline[cluster_group], epsilon, prior)
    if utility_from == "loo":
        pair_utility = _leave_one_out(
            success, row_group, bounds, pair_row, pair_cluster, order, n, epsilon, prior
        )
    else:
        pair_utility = utility[pair_cluster]
    # A group is uniform when every success is its p-bar (then exactly its first success).
    off = np.bincount(row_group, weights=success != baseline[row_group], minlength=groups)
    uniform = (rollout_counts > 0) & (off == 0)
    all_fail = int((uniform & (baseline == 0.0)).sum())
    zeroed = 0
    if uniform_groups == "zero" and groups:
        # Nothing separates helpful facts from harmful ones when every rollout scored the same;
        # §3's prior would still reward every fact (all fail) or punish it (all win).
        utility = np.where(uniform[cluster_group], 0.0, utility)
        pair_utility = np.where(uniform[cluster_group[pair_cluster]], 0.0, pair_utility)
        zeroed = int(uniform.sum())
    risk = prior == "beta" and uniform_groups != "zero" and groups > 0 and 2 * all_fail >= groups
    return BatchUtilities(
        cluster_starts, cluster_group, n, s, mean, utility, fact_cluster,
        pair_row, pair_cluster, pair_step, pair_utility, zeroed, int(uniform.sum()), all_fail, risk,
    )


def _leave_one_out(
    success: np.ndarray,
    row_group: np.ndarray,
    bounds: np.ndarray,
    pair_row: np.ndarray,
    pair_cluster: np.ndarray,
    order: np.ndarray,
    n: np.ndarray,
    epsilon: float,
    prior: Prior,
) -> np.ndarray:
    """Per (row, cluster) pair, the cluster's utility from the row's group mates alone (mates
    summed in rank order; a row without mates reads 0)."""
    others = np.zeros(len(success), dtype=np.float64)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if b - a < 2:
            continue  # no mates: the row reads 0 (``alone`` below)
        values = success[a:b].tolist()
        for i in range(b - a):
            others[a + i] = success_rate(np.asarray(values[:i] + values[i + 1:]))
    pairs = len(pair_row)
    row = pair_row[order]
    cluster = pair_cluster[order]
    held = n[cluster]  # rows holding each pair's cluster, the pair's own row included
    begin = np.searchsorted(cluster, cluster)  # where the pair's cluster begins in ``order``
    me = np.repeat(np.arange(pairs), held)  # every pair against every holder of its cluster
    mate = np.repeat(begin, held) + np.arange(len(me)) - np.repeat(np.cumsum(held) - held, held)
    keep = me != mate
    me, mate = me[keep], mate[keep]
    if prior == "group":
        term = success[row[mate]] - others[row[me]]
    else:
        term = success[row[mate]]
    summed = np.bincount(me, weights=term, minlength=pairs)  # mates added in rank order
    scale = held - 1 + 2.0 * epsilon
    value = summed / scale if prior == "group" else (summed + epsilon) / scale - others[row]
    alone = (bounds[1:] - bounds[:-1])[row_group[row]] < 2
    pair_utility = np.empty(pairs, dtype=np.float64)
    pair_utility[order] = np.where(alone, 0.0, value)
    return pair_utility
