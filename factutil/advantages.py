"""Outcome + process advantages (SPEC.md §5).

    A_out,i   = (R_i - mean R) / (std R + eps)        (GRPO, per rollout; std with ddof = 1)
    A_proc,t  = (r_t - mean r) / (std r + eps)        (over all actions of the group)
    A_{i,t}   = A_out,i + omega * A_proc,i,t

Means and standard deviations are two-pass and summed exactly (``math.fsum``) in float64, so the
result does not depend on the order of rollouts or actions, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np


def group_normalize(values: np.ndarray, eps: float = 1e-6, by_std: bool = True) -> np.ndarray:
    """(x - mean) / (std + eps) over one group, or x - mean when ``by_std`` is False.

    Args:
        values: float (n,), n >= 1.
        eps: added to the sample std (ddof = 1, as ``torch.std`` in verl and OpenRLHF).
        by_std: divide by std + eps (verl's ``norm_adv_by_std_in_grpo``).

    Returns:
        float64 (n,). All zeros when n == 1 or when every value is equal (no NaN, no noise
        amplified by 1/eps).

    Raises:
        ValueError: if a value is not finite.
    """
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values must be finite, got {values.tolist()}")
    n = values.size
    if n <= 1 or values.min() == values.max():
        return np.zeros(n, dtype=np.float64)
    mean = math.fsum(values.tolist()) / n
    centred = values - mean
    if not by_std:
        return centred
    std = math.sqrt(math.fsum((centred * centred).tolist()) / (n - 1))
    return centred / (std + eps)


def outcome_advantages(
    rewards: np.ndarray, eps: float = 1e-6, norm_by_std: bool = True
) -> np.ndarray:
    """GRPO outcome advantage of each rollout of one group (SPEC §5).

    Args:
        rewards: float (G,) outcome rewards R_i.
        eps: see :func:`group_normalize`.
        norm_by_std: divide by the group's std + eps.

    Returns:
        float64 (G,). A group of one rollout, or whose rollouts all score the same, gets zeros.
    """
    return group_normalize(rewards, eps=eps, by_std=norm_by_std)


def process_advantages(
    process_rewards: np.ndarray, eps: float = 1e-6, mode: str = "group"
) -> np.ndarray:
    """Process advantage of each action of one group (SPEC §5).

    Args:
        process_rewards: float (N,), every effective action of every rollout of the group.
        eps: see :func:`group_normalize`.
        mode: ``"group"`` normalises over the group's actions; ``"none"`` keeps r as is.

    Returns:
        float64 (N,). A group with one action (or constant rewards) gets zeros under "group".

    Raises:
        ValueError: for an unknown mode or a non-finite reward.
    """
    if mode == "group":
        return group_normalize(process_rewards, eps=eps, by_std=True)
    if mode == "none":
        values = np.asarray(process_rewards, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"process_rewards must be finite, got {values.tolist()}")
        return values.copy()
    raise ValueError(f"process_norm must be 'group' or 'none', got {mode!r}")


def total_advantages(
    outcome_advantage: np.ndarray,
    process_advantage: np.ndarray,
    rollout_index: np.ndarray,
    omega: float = 0.5,
) -> np.ndarray:
    """A_{i,t} = A_out,i + omega * A_proc,i,t for each action (SPEC §5).

    Args:
        outcome_advantage: float64 (G,).
        process_advantage: float64 (N,).
        rollout_index: int (N,), the rollout of each action, in [0, G).
        omega: weight >= 0; omega = 0 returns exactly ``outcome_advantage[rollout_index]``.

    Returns:
        float64 (N,).
    """
    outcome = np.asarray(outcome_advantage, dtype=np.float64)[np.asarray(rollout_index)]
    if omega == 0.0:
        return outcome
    return outcome + omega * np.asarray(process_advantage, dtype=np.float64)
