"""The result of a step: :class:`ProcessAdvantages` and the records built from its columns
(docs/method.md §8).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np

from factutil.columns import Prepared
from factutil.config import FactUtilConfig
from factutil.load import GroupRows
from factutil.shaping import KIND_CODES
from factutil.utility import BatchUtilities


@dataclass(slots=True)
class ActionRecord:
    """One action's credit: the output line of docs/method.md §8.

    ``ignored`` marks an action after the rollout's first answer or beyond ``max_turns``: it has no
    effect and every reward and advantage field is 0. ``new_clusters`` holds the cluster ids an
    assert brought into the store. ``invalid_reason`` says why an ``invalid`` action failed to
    parse ("triple 0 has 2 parts, expected 3", "no action found"); None for the other actions.
    """

    uid: str
    rollout_id: str
    step: int
    action: str
    shaping: float
    back_credit: float
    penalty: float
    process_reward: float
    outcome_reward: float
    outcome_advantage: float
    process_advantage: float
    advantage: float
    new_clusters: list[int]
    ignored: bool = False
    invalid_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, keys in docs/method.md §8 order."""
        return asdict(self)


@dataclass(slots=True)
class RolloutRecord:
    """One rollout's outcome (docs/method.md §1, §3, §5).

    ``outcome_reward`` is R after the no-answer and empty-store rules; ``success`` is y.
    ``em`` and ``f1`` score the answer as given (0 when there is none).
    """

    uid: str
    rollout_id: str
    answer: str | None
    answered: bool
    empty_store_answer: bool
    em: float
    f1: float
    outcome_reward: float
    success: float
    outcome_advantage: float
    actions: int
    ignored_actions: int


@dataclass(slots=True)
class ClusterRecord:
    """One cluster of a group: docs/method.md §8's ``factutil clusters`` item.

    ``members`` are the distinct triples (original text) asserted in the group that fall in the
    cluster, sorted; ``n``, ``s``, ``mean`` and ``utility`` are docs/method.md §3's n_c, s_c, m_c and u_c.
    """

    uid: str
    cluster_id: int
    members: list[list[str]]
    n: int
    s: float
    mean: float
    utility: float

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return asdict(self)


class ProcessAdvantages:
    """Result of :func:`compute_process_advantages`.

    The step's numbers are arrays; the per-item records are built from them on first access (a
    trainer that only needs ``advantages`` or :meth:`per_rollout` never pays for 20,000 objects).

    Attributes:
        advantages: float32 (N,), A = A_out + omega * A_proc of every input action in input order
            (groups, rollouts, actions as given; 0 for ignored actions); every token of action
            k's response gets ``advantages[k]``.
        action_columns: per action (N,), float64 ``shaping``, ``back_credit``, ``penalty``,
            ``process_reward``, ``potential`` (Phi of the store after the action, docs/method.md §4),
            ``outcome_reward``, ``outcome_advantage``, ``process_advantage``, ``advantage``;
            int64 ``step``; bool ``ignored`` (0 in every float column). Read-only (the records
            are built from them); copy one to change it.
        rollout_keys: ``(uid, rollout_id)`` of each rollout, in input order.
        action_offsets: int64 (len(rollout_keys) + 1,): rollout i's actions are
            ``[action_offsets[i], action_offsets[i + 1])``.
        metrics: named floats: counts, clusters per group, utility mean/min/max, share of
            actions with non-zero shaping, mean EM/F1, gold answers that normalise to nothing
            (``golds_normalized_empty``, each also a warning), and ``time_<stage>_s`` in seconds.
        warnings: messages also sent to the ``factutil`` logger.
        skipped: uid -> reason for groups left out under ``on_invalid_group="skip"``.
        actions: one :class:`ActionRecord` per input action, in input order (built on access).
        rollouts: one :class:`RolloutRecord` per rollout, in input order (built on access).
        clusters: :class:`ClusterRecord` per group and cluster id (built on access).
    """

    def __init__(
        self,
        advantages: np.ndarray,
        action_columns: dict[str, np.ndarray],
        rollout_keys: list[tuple[str, str]],
        action_offsets: np.ndarray,
        metrics: dict[str, float],
        warnings: list[str],
        skipped: dict[str, str],
        records: Records,
    ):
        self.advantages = advantages
        self.action_columns = action_columns
        self.rollout_keys = rollout_keys
        self.action_offsets = action_offsets
        self.metrics = metrics
        self.warnings = warnings
        self.skipped = skipped
        self._records = records

    @cached_property
    def actions(self) -> list[ActionRecord]:
        """One :class:`ActionRecord` per input action, in input order."""
        return self._records.actions(self.action_columns)

    @cached_property
    def rollouts(self) -> list[RolloutRecord]:
        """One :class:`RolloutRecord` per rollout, in input order."""
        return self._records.rollouts()

    @cached_property
    def clusters(self) -> list[ClusterRecord]:
        """:class:`ClusterRecord` per group and cluster id."""
        return self._records.clusters()

    @property
    def config(self) -> FactUtilConfig:
        """The configuration the step ran with."""
        return self._records.config

    @property
    def groups(self) -> list[GroupRows]:
        """The validated input groups, in input order (skipped groups left out): the questions,
        gold answers and actions (queries, triples, answers, invalid reasons) the numbers are of.
        Shared with the result, not copies: do not change them."""
        return self._records.batch

    def __repr__(self) -> str:
        return (
            f"ProcessAdvantages(groups={int(self.metrics.get('groups', 0))}, "
            f"rollouts={len(self.rollout_keys)}, actions={len(self.advantages)}, "
            f"warnings={len(self.warnings)}, skipped={len(self.skipped)})"
        )

    def per_rollout(self, column: str = "advantage") -> dict[tuple[str, str], np.ndarray]:
        """One column's values for each rollout's actions, keyed by ``(uid, rollout_id)``.

        Args:
            column: a key of ``action_columns`` (``"advantage"``, ``"process_advantage"``, ...).

        Returns:
            ``(uid, rollout_id)`` -> the column's values (views, in action order), ignored
            actions included.

        Raises:
            KeyError: an unknown column, naming the known ones.
        """
        if column not in self.action_columns:
            raise KeyError(f"column must be one of {sorted(self.action_columns)}, got {column!r}")
        values = self.action_columns[column]
        bounds = self.action_offsets.tolist()
        return {
            key: values[bounds[i] : bounds[i + 1]] for i, key in enumerate(self.rollout_keys)
        }



KIND_NAMES = {code: name for name, code in KIND_CODES.items()}
"""Kind code -> action name (``"search"``, ``"assert"``, ``"answer"``, ``"invalid"``)."""


@dataclass
class Records:
    """What the per-item records of a step are built from, on first access: the step's columns
    (:class:`~factutil.columns.Prepared`, the utilities), never the input rows."""

    batch: list[GroupRows]
    config: FactUtilConfig
    prep: Prepared
    util: BatchUtilities
    outcome_advantage: np.ndarray
    keys: list[tuple[str, str]]
    offsets: np.ndarray

    def _group_of_row(self) -> np.ndarray:
        counts = np.diff(np.append(self.prep.rollout_starts, len(self.keys)))
        return np.repeat(np.arange(len(self.batch), dtype=np.int64), counts)

    def actions(self, columns: dict[str, np.ndarray]) -> list[ActionRecord]:
        util, prep = self.util, self.prep
        group_of_row = self._group_of_row()
        order = np.lexsort((util.pair_cluster, util.pair_step, util.pair_row))
        new: dict[tuple[int, int], list[int]] = {}
        local = util.pair_cluster - util.cluster_starts[group_of_row[util.pair_row]]
        for r, t, c in zip(
            util.pair_row[order].tolist(), util.pair_step[order].tolist(), local[order].tolist()
        ):
            new.setdefault((r, t), []).append(c)
        ignored = columns["ignored"]
        codes = np.empty(len(ignored), dtype=np.int8)
        codes[~ignored] = prep.kinds  # the effective actions, in (row, step) order
        codes[ignored] = prep.ignored_kinds
        kinds = [KIND_NAMES[code] for code in codes.tolist()]
        reasons = prep.reasons
        row_of = np.repeat(np.arange(len(self.keys), dtype=np.int64), prep.totals).tolist()
        listed = {name: values.tolist() for name, values in columns.items()}
        records = []
        for k, (row, t, kind) in enumerate(zip(row_of, listed["step"], kinds)):
            uid, rollout_id = self.keys[row]
            if listed["ignored"][k]:
                records.append(ActionRecord(
                    uid, rollout_id, t, kind, 0.0, 0.0, 0.0, 0.0,
                    listed["outcome_reward"][k], 0.0, 0.0, 0.0, [], True, reasons.get(k),
                ))
            else:
                records.append(ActionRecord(
                    uid, rollout_id, t, kind, listed["shaping"][k],
                    listed["back_credit"][k], listed["penalty"][k],
                    listed["process_reward"][k], listed["outcome_reward"][k],
                    listed["outcome_advantage"][k], listed["process_advantage"][k],
                    listed["advantage"][k], new.get((row, t), []), False, reasons.get(k),
                ))
        return records

    def rollouts(self) -> list[RolloutRecord]:
        prep = self.prep
        outcome = self.outcome_advantage.tolist()
        return [
            RolloutRecord(
                uid=uid,
                rollout_id=rollout_id,
                answer=prep.answers[i],
                answered=prep.answers[i] is not None,
                empty_store_answer=prep.empty_store_answer[i],
                em=prep.em[i],
                f1=prep.f1[i],
                outcome_reward=prep.reward[i],
                success=prep.success[i],
                outcome_advantage=outcome[i],
                actions=int(prep.lengths[i]),
                ignored_actions=int(prep.totals[i] - prep.lengths[i]),
            )
            for i, (uid, rollout_id) in enumerate(self.keys)
        ]

    def clusters(self) -> list[ClusterRecord]:
        util, prep = self.util, self.prep
        n, s, mean, utility = util.n.tolist(), util.s.tolist(), util.mean.tolist(), util.utility.tolist()
        fact_cluster, occurrence_fact = util.fact_cluster.tolist(), prep.occurrence_fact.tolist()
        members: list[set[tuple[str, str, str]]] = [set() for _ in n]
        for fact, triple in zip(occurrence_fact, prep.occurrence_triples):
            members[fact_cluster[fact]].add(tuple(triple))
        starts, groups = util.cluster_starts.tolist(), util.cluster_group.tolist()
        return [
            ClusterRecord(
                self.batch[g].uid, c - starts[g], [list(t) for t in sorted(members[c])],
                n[c], s[c], mean[c], utility[c],
            )
            for c, g in enumerate(groups)
        ]

