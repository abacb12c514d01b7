"""Utilities -> potentials, shaping rewards, back-credit and penalties (docs/method.md §4).

Phi(S) = tanh(sum of the utilities of the store's clusters), Phi(empty) = 0, and
F_t = gamma * Phi(S_t) - Phi(S_{t-1}). Rollouts are rows of (R, T) grids of their effective
actions, kinds coded :data:`SEARCH`, :data:`ASSERT`, :data:`ANSWER`, :data:`INVALID`, :data:`PAD`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SEARCH, ASSERT, ANSWER, INVALID = 0, 1, 2, 3
PAD = -1  # a padded cell after a rollout's last effective action
KIND_CODES = {"search": SEARCH, "assert": ASSERT, "answer": ANSWER, "invalid": INVALID}


@dataclass(frozen=True)
class ProcessRewards:
    """Process reward parts (docs/method.md §4); float64 arrays, (T,) or (R, T).

    ``process_reward = shaping + back_credit + penalty``; ``potential`` is Phi after each action;
    ``empty_store_answer`` (bool) marks an answer given while the store held no fact.
    """

    shaping: np.ndarray
    back_credit: np.ndarray
    penalty: np.ndarray
    process_reward: np.ndarray
    potential: np.ndarray
    empty_store_answer: np.ndarray


def potentials(gain: np.ndarray) -> np.ndarray:
    """Phi of the store after each action (docs/method.md §4); the one place Phi is computed.

    Args:
        gain: float64 (T,) or (R, T), the summed utility of the clusters each action added
            (:func:`action_gains`), one rollout per row.

    Returns:
        float64, the shape of ``gain``, values in (-1, 1).
    """
    return np.tanh(np.cumsum(np.asarray(gain, dtype=np.float64), axis=-1))


def shaping_rewards(potential: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """F_t = gamma * Phi(S_t) - Phi(S_{t-1}) with Phi(S_{-1}) = Phi(empty) = 0 (docs/method.md §4).

    Args:
        potential: float64 (T,) or (R, T), Phi after each action (:func:`potentials`).
        gamma: discount in (0, 1].

    Returns:
        float64, the shape of ``potential``.
    """
    potential = np.asarray(potential, dtype=np.float64)
    before = np.concatenate(
        [np.zeros(potential.shape[:-1] + (1,)), potential[..., :-1]], axis=-1
    )
    if gamma == 1.0:
        return potential - before
    return gamma * potential - before


def back_credit(kinds: np.ndarray, shaping: np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Move alpha * F of each assert to the most recent search before it (docs/method.md §4).

    Args:
        kinds: int (T,) or (R, T) action codes, one rollout per row.
        shaping: float64, the shape of ``kinds``.
        alpha: share in [0, 1] sent back.

    Returns:
        float64, the shape of ``kinds``: +alpha*F on receiving searches, -alpha*F on sending
        asserts; each row sums to 0.
    """
    kinds = np.asarray(kinds)
    shaping = np.asarray(shaping, dtype=np.float64)
    flat = kinds.ndim == 1
    kinds, shaping = np.atleast_2d(kinds), np.atleast_2d(shaping)
    rows, steps = kinds.shape
    credit = np.zeros((rows, steps), dtype=np.float64)
    if alpha != 0.0 and steps:
        columns = np.where(kinds == SEARCH, np.arange(steps), -1)
        last_search = np.maximum.accumulate(columns, axis=1)
        earlier = np.concatenate([np.full((rows, 1), -1), last_search[:, :-1]], axis=1)
        r, t = np.nonzero((kinds == ASSERT) & (earlier >= 0) & (shaping != 0.0))
        share = alpha * shaping[r, t]
        np.add.at(credit, (r, earlier[r, t]), share)  # in (row, step) order, like a loop
        credit[r, t] -= share
    return credit[0] if flat else credit


def action_gains(
    pair_row: np.ndarray, pair_step: np.ndarray, pair_utility: np.ndarray, rows: int, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """What each action brought into its rollout's store, as (R, T) grids (docs/method.md §4).

    Args:
        pair_row, pair_step, pair_utility: (P,), as :class:`~factutil.utility.BatchUtilities`.
        rows, steps: the grid's shape R x T.

    Returns:
        ``(gain, added)``: float64 (R, T) summed utility of the clusters each action added, summed
        exactly (``math.fsum``, so order never matters), and int64 (R, T) how many it added.
    """
    cell = pair_row * steps + pair_step
    added = np.bincount(cell, minlength=rows * steps).astype(np.int64).reshape(rows, steps)
    gain = np.bincount(cell, weights=pair_utility, minlength=rows * steps)
    # bincount adds in order, exact for one or two terms; three or more are re-summed exactly.
    heavy = np.flatnonzero(added.reshape(-1) > 2)
    if len(heavy):
        by_cell = np.argsort(cell, kind="stable")
        first = np.searchsorted(cell[by_cell], heavy).tolist()
        ordered = pair_utility[by_cell].tolist()
        for c, a, n in zip(heavy.tolist(), first, added.reshape(-1)[heavy].tolist()):
            gain[c] = math.fsum(ordered[a : a + n])
    return gain.reshape(rows, steps), added


def process_rewards(
    kinds: np.ndarray,
    gain: np.ndarray,
    added: np.ndarray,
    repeated_search: np.ndarray,
    *,
    gamma: float = 1.0,
    alpha: float = 0.2,
    invalid_penalty: float = -0.1,
    repeat_search_penalty: float = -0.01,
    empty_store_answer_penalty: float = -0.1,
) -> ProcessRewards:
    """All process reward parts of many rollouts at once (docs/method.md §4), one rollout per row.

    Args:
        kinds: int (R, T) action codes, :data:`PAD` after a rollout's last effective action
            (padded cells get 0 everywhere).
        gain, added: (R, T), as :func:`action_gains`.
        repeated_search: bool (R, T), True on a search whose normalised query repeats an earlier one.
        gamma, alpha, invalid_penalty, repeat_search_penalty, empty_store_answer_penalty: the
            fields of docs/method.md §4.

    Returns:
        :class:`ProcessRewards` with (R, T) arrays; each row depends on that row alone.

    Raises:
        ValueError: ``kinds`` is not 2-D or the four grids differ in shape.
    """
    kinds = np.asarray(kinds)
    if kinds.ndim != 2:
        raise ValueError(f"kinds must be (R, T), got shape {kinds.shape}")
    gain = np.asarray(gain, dtype=np.float64)
    added = np.asarray(added)
    repeated_search = np.asarray(repeated_search, dtype=bool)
    if not gain.shape == added.shape == repeated_search.shape == kinds.shape:
        raise ValueError(
            f"kinds, gain, added and repeated_search must share one shape, got {kinds.shape}, "
            f"{gain.shape}, {added.shape} and {repeated_search.shape}"
        )
    rows, steps = kinds.shape
    valid = kinds != PAD
    potential = potentials(gain)
    shaping = np.where(valid, shaping_rewards(potential, gamma), 0.0)
    credit = back_credit(kinds, shaping, alpha)

    store_before = np.cumsum(added, axis=1) - added
    empty_store_answer = (kinds == ANSWER) & (store_before == 0)
    penalty = np.zeros((rows, steps), dtype=np.float64)
    penalty[kinds == INVALID] += invalid_penalty
    penalty[(kinds == SEARCH) & repeated_search] += repeat_search_penalty
    penalty[empty_store_answer] += empty_store_answer_penalty
    return ProcessRewards(
        shaping=shaping,
        back_credit=credit,
        penalty=penalty,
        process_reward=shaping + credit + penalty,
        potential=np.where(valid, potential, 0.0),
        empty_store_answer=empty_store_answer,
    )
