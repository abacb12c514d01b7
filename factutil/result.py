"""The result of a step: :class:`ProcessAdvantages` and its records (docs/method.md §8)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
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
    """One action's credit: the output line of docs/method.md §8. ``ignored``: after the answer
    or beyond ``max_turns`` (every reward and advantage 0); ``new_clusters``: the cluster ids an
    assert brought into the store; ``invalid_reason``: why an ``invalid`` action failed."""

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
    """One rollout's outcome (docs/method.md §1, §3, §5): ``outcome_reward`` is R after the
    no-answer and empty-store rules, ``success`` y; ``em``, ``f1`` score the answer (0: none)."""

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
    """One cluster of a group: docs/method.md §8's ``factutil clusters`` item. ``members``: its
    distinct triples as written, sorted; ``n``, ``s``, ``mean``, ``utility``: §3's n_c, s_c, m_c,
    u_c."""

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


@dataclass(eq=False)
class ProcessAdvantages:
    """Result of :func:`compute_process_advantages`; the records are built on first access.

    Attributes:
        advantages: float32 (N,), A = A_out + omega * A_proc of every input action in input order,
            group by group (a uid's rollouts given apart are gathered at its first appearance,
            ``groups_gathered``; 0 for ignored actions); action k's tokens get ``advantages[k]``.
        action_columns: per action (N,), float64 ``shaping``, ``back_credit``, ``penalty``,
            ``process_reward``, ``potential`` (Phi after the action, docs/method.md §4),
            ``outcome_reward``, ``outcome_advantage``, ``process_advantage``, ``advantage``;
            int64 ``step``; bool ``ignored`` (0 in every float column). Read-only.
        rollout_keys: ``(uid, rollout_id)`` of each rollout, in that order.
        action_offsets: int64 (len(rollout_keys) + 1,): rollout i's actions are
            ``[action_offsets[i], action_offsets[i + 1])``.
        metrics: named floats (counts, utility spread, mean EM/F1, ``time_<stage>_s``).
        warnings: messages also sent to the ``factutil`` logger.
        skipped: uid -> reason for groups left out under ``on_invalid_group="skip"``.
        actions, rollouts, clusters: lists of :class:`ActionRecord` etc., in input order.
    """

    advantages: np.ndarray
    action_columns: dict[str, np.ndarray]
    rollout_keys: list[tuple[str, str]]
    action_offsets: np.ndarray
    metrics: dict[str, float]
    warnings: list[str]
    skipped: dict[str, str]
    _records: Records

    @cached_property
    def actions(self) -> list[ActionRecord]:
        return self._records.actions(self.action_columns)

    @cached_property
    def rollouts(self) -> list[RolloutRecord]:
        return self._records.rollouts()

    @cached_property
    def clusters(self) -> list[ClusterRecord]:
        return self._records.clusters()

    @property
    def config(self) -> FactUtilConfig:
        """The configuration the step ran with."""
        return self._records.config

    @property
    def groups(self) -> list[GroupRows]:
        """The validated input groups, in input order (skipped ones left out); shared, not
        copies: do not change them."""
        return self._records.batch

    def __repr__(self) -> str:
        return (
            f"ProcessAdvantages(groups={int(self.metrics.get('groups', 0))}, "
            f"rollouts={len(self.rollout_keys)}, actions={len(self.advantages)}, "
            f"warnings={len(self.warnings)}, skipped={len(self.skipped)})"
        )

    def per_rollout(self, column: str = "advantage") -> dict[tuple[str, str], np.ndarray]:
        """``(uid, rollout_id)`` -> one column of ``action_columns`` over the rollout's actions
        (views, ignored actions included); a KeyError names the known columns."""
        if column not in self.action_columns:
            raise KeyError(f"column must be one of {sorted(self.action_columns)}, got {column!r}")
        views = np.split(self.action_columns[column], self.action_offsets[1:-1])
        return dict(zip(self.rollout_keys, views))


KIND_NAMES = {code: name for name, code in KIND_CODES.items()}  # kind code -> action name


@dataclass
class Records:
    """What a step's records are built from: its columns, never the input rows."""

    batch: list[GroupRows]
    config: FactUtilConfig
    prep: Prepared
    util: BatchUtilities
    outcome_advantage: np.ndarray
    keys: list[tuple[str, str]]
    offsets: np.ndarray

    def actions(self, columns: dict[str, np.ndarray]) -> list[ActionRecord]:
        util, prep = self.util, self.prep
        counts = np.diff(np.append(prep.rollout_starts, len(self.keys)))  # rollouts per group
        group_of_row = np.repeat(np.arange(len(self.batch), dtype=np.int64), counts)
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
        floats = [listed[field.name] for field in fields(ActionRecord)[4:12]]  # shaping..advantage
        return [ActionRecord(*self.keys[row], t, kind, *values, new.get((row, t), []), ignored,
                             reasons.get(k))
                for k, (row, t, kind, ignored, *values)
                in enumerate(zip(row_of, listed["step"], kinds, listed["ignored"], *floats))]

    def rollouts(self) -> list[RolloutRecord]:
        prep = self.prep
        outcome = self.outcome_advantage.tolist()
        return [
            RolloutRecord(
                uid, rollout_id, prep.answers[i], prep.answers[i] is not None,
                prep.empty_store_answer[i], prep.em[i], prep.f1[i], prep.reward[i],
                prep.success[i], outcome[i], int(prep.lengths[i]),
                int(prep.totals[i] - prep.lengths[i]),
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

