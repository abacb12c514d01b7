"""Utilities -> potentials, shaping rewards, back-credit and penalties (docs/method.md §4).

Rollouts are the rows of (R, T) grids of their effective actions, kinds coded as below.
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
    """Process reward parts (docs/method.md §4), float64 (T,) or (R, T): ``process_reward =
    shaping + back_credit + penalty``; ``empty_store_answer`` (bool): answers from an empty store.
    """

    shaping: np.ndarray
    back_credit: np.ndarray
    penalty: np.ndarray
    process_reward: np.ndarray
    potential: np.ndarray
    empty_store_answer: np.ndarray


def potentials(gain: np.ndarray) -> np.ndarray:
    """Phi after each action, in (-1, 1), from ``gain`` (T,) or (R, T) of :func:`action_gains`;
    the one place Phi is computed (docs/method.md §4)."""
    return np.tanh(np.cumsum(np.asarray(gain, dtype=np.float64), axis=-1))


def shaping_rewards(potential: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """F_t = gamma * Phi(S_t) - Phi(S_{t-1}), Phi(S_{-1}) = 0 (docs/method.md §4), of the shape
    of ``potential``, float64 (T,) or (R, T) of :func:`potentials`."""
    potential = np.asarray(potential, dtype=np.float64)
    before = np.concatenate([np.zeros(potential.shape[:-1] + (1,)), potential[..., :-1]], axis=-1)
    return gamma * potential - before  # gamma = 1.0: exactly potential - before


def back_credit(kinds: np.ndarray, shaping: np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Move alpha * F of each assert to the most recent search before it (docs/method.md §4):
    float64 of the shape of ``kinds`` and ``shaping``, (T,) or (R, T), +alpha*F on receiving
    searches and -alpha*F on sending asserts, each row summing to 0."""
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
    """``(gain, added)`` (``rows``, ``steps``) grids: the float64 summed utility (exact,
    ``math.fsum``) of the clusters each action added and int64 how many (docs/method.md §4), from
    ``pair_*`` (P,) as :class:`~factutil.utility.BatchUtilities` gives them."""
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
    """:class:`ProcessRewards` of R rollouts at once, one per row (docs/method.md §4).
    ``kinds``: int (R, T) codes, :data:`PAD` (0 everywhere) after a rollout's last action;
    ``gain``, ``added``: as :func:`action_gains`; ``repeated_search``: bool (R, T), a search
    repeating an earlier query; the floats are the fields of §4. Each row depends on that row
    alone. Raises ValueError when ``kinds`` is not 2-D or the grids differ in shape."""
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
