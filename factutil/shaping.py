"""Utilities -> potentials, shaping rewards, back-credit and penalties (SPEC.md §4).

All functions work on one rollout's effective actions (those before its first answer and within
``max_turns``), given as parallel arrays of length T:

- ``kinds``: int8 codes :data:`SEARCH`, :data:`ASSERT`, :data:`ANSWER`, :data:`INVALID`;
- ``new_clusters``: per action, the sorted int64 ids of clusters the action brought into the store
  (empty for everything but an assert that adds a new cluster).

The potential of a store is Phi(S) = tanh(sum of its clusters' utilities), Phi(empty) = 0; the
shaping reward of action t is F_t = gamma * Phi(S_t) - Phi(S_{t-1}).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SEARCH, ASSERT, ANSWER, INVALID = 0, 1, 2, 3
KIND_CODES = {"search": SEARCH, "assert": ASSERT, "answer": ANSWER, "invalid": INVALID}


@dataclass(frozen=True)
class ProcessRewards:
    """Process reward parts of one rollout (SPEC §4); every array is float64 (T,).

    ``process_reward = shaping + back_credit + penalty``. ``back_credit`` is +alpha*F on the
    search that receives a share and -alpha*F on the assert that sends it, so it sums to 0 over a
    rollout. ``potential`` is Phi of the store after each action; ``empty_store_answer`` (bool)
    marks an answer given while the store held no fact.
    """

    shaping: np.ndarray
    back_credit: np.ndarray
    penalty: np.ndarray
    process_reward: np.ndarray
    potential: np.ndarray
    empty_store_answer: np.ndarray


def store_potentials(new_clusters: Sequence[np.ndarray], utility: np.ndarray) -> np.ndarray:
    """Phi of the store after each action: tanh of the running sum of utilities (SPEC §4).

    Args:
        new_clusters: T int arrays, the clusters each action added (each cluster at most once per
            rollout; sorted, so the sum does not depend on the order of triples in an assert).
        utility: float64 (K,), u_c of the group's clusters.

    Returns:
        float64 (T,), values in (-1, 1).
    """
    utility = np.asarray(utility, dtype=np.float64)
    total = 0.0
    potential = np.empty(len(new_clusters), dtype=np.float64)
    for t, added in enumerate(new_clusters):
        if len(added):
            total += float(np.sum(utility[np.sort(np.asarray(added, dtype=np.int64))]))
        potential[t] = np.tanh(total)
    return potential


def shaping_rewards(potential: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """F_t = gamma * Phi(S_t) - Phi(S_{t-1}) with Phi(S_{-1}) = Phi(empty) = 0 (SPEC §4).

    Args:
        potential: float64 (T,), Phi after each action (:func:`store_potentials`).
        gamma: discount in (0, 1]. With gamma = 1 the rewards telescope to Phi(final store).

    Returns:
        float64 (T,).
    """
    potential = np.asarray(potential, dtype=np.float64)
    before = np.concatenate(([0.0], potential[:-1]))
    if gamma == 1.0:
        return potential - before
    return gamma * potential - before


def back_credit(kinds: np.ndarray, shaping: np.ndarray, alpha: float = 0.2) -> np.ndarray:
    """Move alpha * F of each assert to the most recent search before it (SPEC §4).

    Args:
        kinds: int (T,) action codes.
        shaping: float64 (T,) shaping rewards.
        alpha: share in [0, 1] sent back; an assert with no earlier search keeps all of F.

    Returns:
        float64 (T,): +alpha*F on receiving searches, -alpha*F on sending asserts; sums to 0.
    """
    kinds = np.asarray(kinds)
    shaping = np.asarray(shaping, dtype=np.float64)
    credit = np.zeros(len(kinds), dtype=np.float64)
    if alpha == 0.0:
        return credit
    last_search = -1
    for t, kind in enumerate(kinds):
        if kind == SEARCH:
            last_search = t
        elif kind == ASSERT and last_search >= 0 and shaping[t] != 0.0:
            share = alpha * shaping[t]
            credit[last_search] += share
            credit[t] -= share
    return credit


def rollout_process_rewards(
    kinds: np.ndarray,
    new_clusters: Sequence[np.ndarray],
    utility: np.ndarray,
    repeated_search: np.ndarray,
    *,
    gamma: float = 1.0,
    alpha: float = 0.2,
    invalid_penalty: float = -0.1,
    repeat_search_penalty: float = -0.1,
    empty_store_answer_penalty: float = -0.1,
) -> ProcessRewards:
    """All process reward parts of one rollout's effective actions (SPEC §4).

    Args:
        kinds: int (T,) action codes.
        new_clusters: T int arrays, the clusters each action brought into the store.
        utility: float64 (K,) cluster utilities of the group.
        repeated_search: bool (T,), True on a search whose normalised query repeats an earlier one.
        gamma, alpha: SPEC §4 parameters.
        invalid_penalty, repeat_search_penalty, empty_store_answer_penalty: values <= 0 added to
            the process reward of the matching actions.

    Returns:
        :class:`ProcessRewards`.
    """
    kinds = np.asarray(kinds)
    repeated_search = np.asarray(repeated_search, dtype=bool)
    if len(new_clusters) != len(kinds) or repeated_search.shape != kinds.shape:
        raise ValueError(
            f"kinds, new_clusters and repeated_search must have one entry per action, got "
            f"{len(kinds)}, {len(new_clusters)} and {len(repeated_search)}"
        )
    potential = store_potentials(new_clusters, utility)
    shaping = shaping_rewards(potential, gamma)
    credit = back_credit(kinds, shaping, alpha)
    store_size = np.cumsum([len(added) for added in new_clusters], dtype=np.int64)
    store_before = np.concatenate(([0], store_size[:-1])) if len(kinds) else store_size
    empty_store_answer = (kinds == ANSWER) & (store_before == 0)
    penalty = np.zeros(len(kinds), dtype=np.float64)
    penalty[kinds == INVALID] += invalid_penalty
    penalty[(kinds == SEARCH) & repeated_search] += repeat_search_penalty
    penalty[empty_store_answer] += empty_store_answer_penalty
    return ProcessRewards(
        shaping=shaping,
        back_credit=credit,
        penalty=penalty,
        process_reward=shaping + credit + penalty,
        potential=potential,
        empty_store_answer=empty_store_answer,
    )
