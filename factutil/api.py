"""``compute_process_advantages``: rollouts -> per-action advantages (docs/method.md §1–§5).

The steps, each in its own module: outcome rewards and the empty-store rule
(:func:`factutil.metrics.outcome`), clusters (:mod:`factutil.cluster`), utilities
(:func:`factutil.utility.batch_utilities`), the gain grid, potentials, shaping, back-credit and
penalties (:mod:`factutil.shaping`), advantages (:mod:`factutil.advantages`). This module walks the
groups once into flat columns, feeds those batch functions and assembles the records.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np

from factutil.advantages import process_advantages, segment_normalize, total_advantages
from factutil.cluster import (
    Clusterer,
    ExactClusterer,
    Fact,
    SemanticClusterer,
    fact_text,
    make_clusterer,
    normalize_fact_text,
)
from factutil.config import FactUtilConfig
from factutil.load import GroupRows, GroupsInput, load_groups
from factutil.metrics import golds_normalized_empty, outcome, qa_scores
from factutil.shaping import INVALID, KIND_CODES, PAD, action_gains, process_rewards
from factutil.utility import BatchUtilities, batch_utilities

logger = logging.getLogger("factutil")


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
        records: _Records,
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
        with gc_paused(self._records.config.pause_gc):
            return self._records.actions(self.action_columns)

    @cached_property
    def rollouts(self) -> list[RolloutRecord]:
        """One :class:`RolloutRecord` per rollout, in input order."""
        with gc_paused(self._records.config.pause_gc):
            return self._records.rollouts()

    @cached_property
    def clusters(self) -> list[ClusterRecord]:
        """:class:`ClusterRecord` per group and cluster id."""
        with gc_paused(self._records.config.pause_gc):
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


def compute_process_advantages(
    groups: GroupsInput,
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    clusterer: Clusterer | None = None,
    on_invalid_group: str = "raise",
) -> ProcessAdvantages:
    """Per-action advantages A = A_out + omega * A_proc for a batch of groups (docs/method.md §1–§5).

    Args:
        groups: a path to a docs/method.md §8 JSONL file; a :class:`Group`; or an iterable of Groups,
            Rollouts, group dicts (with ``rollouts``) or rollout dicts (docs/method.md §8 lines, grouped by
            ``uid`` only). Inputs are never mutated.
        config: a :class:`FactUtilConfig` or a mapping of its fields; None uses the defaults.
        clusterer: the :class:`~factutil.cluster.Clusterer` to use; None builds the one
            ``config.mode`` names. Pass one to reuse its state (e.g. an embedding cache) across
            calls. An :class:`~factutil.cluster.ExactClusterer` or
            :class:`~factutil.cluster.SemanticClusterer` must agree with ``config`` on ``mode``
            and on every field of :data:`CLUSTERING_FIELDS` (a ValueError names the others);
            any other clusterer is used as given.
        on_invalid_group: ``"raise"`` (default) raises on the first group that fails validation;
            ``"skip"`` leaves such groups out, lists them in ``skipped`` with the reason and logs a
            warning, so a trainer can fall back to outcome-only advantages for them alone.

    Returns:
        :class:`ProcessAdvantages`; ``advantages`` is float32 (N,) over all N input actions in
        input order (0 for ignored actions). Deterministic, and independent of the order of
        groups, of rollouts within a group and of triples within an assert.

    Raises:
        pydantic.ValidationError: a bad config (the message names field and value).
        factutil.io.InputError: bad groups: every problem of a file as ``FILE:LINE: field: ...``,
            of dicts and models as ``groups[i] (uid ..., rollout_id ...): field: ...``
            (docs/method.md §8).
        ValueError: a uid shared by two groups; a clusterer built for another clustering
            config (the message names each field and both values).
        FloatingPointError: an advantage beyond float32 (extreme rewards or omega); the message
            names group, rollout, step and omega.
    """
    if config is None:
        config = FactUtilConfig()
    elif not isinstance(config, FactUtilConfig):
        config = FactUtilConfig.model_validate(dict(config))
    if clusterer is not None:
        check_clusterer(clusterer, config)
    # A step allocates ~10 objects per action and frees them together; generational collections
    # in the middle of it cost more than half of validation time, and find no cycles to free.
    with gc_paused(config.pause_gc):
        return _compute(groups, config, clusterer, on_invalid_group)


CLUSTERING_FIELDS = (
    "triple_template", "embedding_model", "embedding_backend", "sim_threshold", "sim_decimals",
    "filters", "key_edges", "knn_min_size", "knn_k", "hnsw_m", "hnsw_ef", "hnsw_seed",
)
"""The config fields a :class:`~factutil.cluster.SemanticClusterer`'s clusters depend on
(``embedding_device``, ``embedding_batch_size`` and the cache bounds change only speed)."""


def check_clusterer(clusterer: Clusterer, config: FactUtilConfig) -> None:
    """Refuse a clusterer built for another clustering config than ``config`` (docs/method.md §2).

    A passed clusterer does the clustering, so a call whose ``mode`` or :data:`CLUSTERING_FIELDS`
    differ from the clusterer's would silently cluster by the clusterer's. Clusterers other than
    :class:`~factutil.cluster.ExactClusterer` and :class:`~factutil.cluster.SemanticClusterer`
    carry no config and are not checked.

    Raises:
        ValueError: naming each differing field with the clusterer's and the call's value.
    """
    if isinstance(clusterer, ExactClusterer):
        mode, own = "exact", None
    elif isinstance(clusterer, SemanticClusterer):
        mode, own = "semantic", clusterer.config
    else:
        return
    differ = [] if mode == config.mode else [("mode", mode, config.mode)]
    if own is not None:
        differ += [(name, getattr(own, name), getattr(config, name)) for name in CLUSTERING_FIELDS
                   if getattr(own, name) != getattr(config, name)]
    if differ:
        fields = "; ".join(f"{name}: clusterer {mine!r}, config {theirs!r}"
                           for name, mine, theirs in differ)
        raise ValueError(
            f"the clusterer was built for another clustering config ({fields}); build it from "
            f"this config (factutil.cluster.make_clusterer(config)) or pass the config it was "
            f"built with"
        )


@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause Python's cyclic garbage collector (if ``pause`` and it is on), restore it after.

    A step allocates ~10 objects per action and frees them together; generational collections
    in the middle of it scan the whole heap (a trainer's is large) and find no cycles to free.
    Adapters wrap their own per-step work in it too (``FactUtilConfig.pause_gc``).
    """
    paused = pause and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@dataclass
class _Prepared:
    """The batch as flat columns after one pass over every action (docs/method.md §1, §2.1).

    Rollouts are numbered 0..R-1 across the batch in input order ("rows"); effective actions
    0..N_eff-1 in (row, step) order; triple occurrences in (row, step, position) order.
    """

    rollout_starts: np.ndarray  # int64 (groups,): first row of each group
    lengths: np.ndarray  # int64 (R,): effective actions per rollout
    totals: np.ndarray  # int64 (R,): all actions per rollout
    kinds: np.ndarray  # int8 (N_eff,)
    occurrence_row: np.ndarray  # int64 (occurrences,)
    occurrence_step: np.ndarray  # int64 (occurrences,)
    occurrence_fact: np.ndarray  # int64 (occurrences,): batch fact index (groups' sorted texts)
    facts: list[list[Fact]]  # per group, one representative per distinct text, by text
    texts: list[list[str]]  # per group, the distinct texts, sorted
    repeated_row: list[int]
    repeated_step: list[int]
    rank: np.ndarray  # int64 (R,): position of the rollout in its group by rollout_id
    answers: list[str | None]
    empty_store_answer: list[bool]
    em: list[float]
    f1: list[float]
    reward: list[float]
    success: list[float]
    golds_normalized_empty: int  # gold answers (per group) that normalise to no token


def _prepare(batch: list[GroupRows], config: FactUtilConfig, warn: Any) -> _Prepared:
    """One pass over every action: outcomes, kinds, fact texts and occurrences (docs/method.md §1, §2.1).

    Texts are memoised (:func:`~factutil.cluster.fact_text`); each group's distinct texts get one
    representative triple, the smallest ``(subject, relation, object)`` sharing the text, so no
    choice depends on input order.
    """
    template, max_turns, fold = config.triple_template, config.max_turns, config.fold_unicode
    success_rule = config.success
    kinds: list[int] = []
    occurrence_row: list[int] = []
    occurrence_step: list[int] = []
    occurrence_fact: list[int] = []
    remap: list[int] = []
    repeated_row: list[int] = []
    repeated_step: list[int] = []
    lengths: list[int] = []
    totals: list[int] = []
    rank: list[int] = []
    rollout_starts: list[int] = []
    answers: list[str | None] = []
    empty_store: list[bool] = []
    em_list: list[float] = []
    f1_list: list[float] = []
    rewards: list[float] = []
    successes: list[float] = []
    facts_per_group: list[list[Fact]] = []
    texts_per_group: list[list[str]] = []
    queries: dict[str, str] = {}
    golds_empty = 0
    add_kind, add_row, add_step, add_fact = (
        kinds.append, occurrence_row.append, occurrence_step.append, occurrence_fact.append
    )
    row = 0
    for group in batch:
        rollouts = group.rollouts
        size = len(rollouts)
        if size == 1:
            warn(f"group {group.uid!r} has one rollout: outcome advantage 0 (no baseline)")
        if config.group_size is not None and size != config.group_size:
            warn(f"group {group.uid!r} has {size} rollouts, group_size is {config.group_size}")
        rollout_starts.append(row)
        ids = [rollout["rollout_id"] for rollout in rollouts]
        positions = [0] * size
        for position, index in enumerate(sorted(range(size), key=ids.__getitem__)):
            positions[index] = position
        rank.extend(positions)
        golds = group.golden_answers
        for gold in golds_normalized_empty(golds, fold):
            golds_empty += 1
            warn(
                f"group {group.uid!r}: gold answer {gold!r} normalises to nothing (lower case, no "
                "punctuation, no a/an/the): no answer can match it, so it scores 0 against every "
                "answer"
            )
        scores: dict[str, tuple[float, float]] = {}
        local: dict[str, int] = {}
        best: list[tuple[str, str, str]] = []
        base = len(remap)
        for rollout in rollouts:
            actions = rollout["actions"]
            seen: set[str] = set()
            store_empty = True
            answer = None
            empty_store_answer = False
            t = 0
            for action in actions[:max_turns]:
                kind = action["action"]
                add_kind(KIND_CODES[kind])
                if kind == "assert":
                    store_empty = False
                    for subject, relation, obj in action["triples"]:
                        text = fact_text(subject, relation, obj, template)
                        index = local.get(text)
                        if index is None:
                            index = local[text] = len(best)
                            best.append((subject, relation, obj))
                        elif (subject, relation, obj) < best[index]:
                            best[index] = (subject, relation, obj)
                        add_row(row)
                        add_step(t)
                        add_fact(base + index)
                elif kind == "search":
                    query = action["query"]
                    normalized = queries.get(query)
                    if normalized is None:
                        normalized = queries[query] = normalize_fact_text(query)
                    if normalized in seen:
                        repeated_row.append(row)
                        repeated_step.append(t)
                    else:
                        seen.add(normalized)
                elif kind == "answer":
                    answer = action["answer"]
                    empty_store_answer = store_empty
                    t += 1
                    break
                t += 1
            ignored = len(actions) - t
            if ignored:
                warn(
                    f"group {group.uid!r} rollout {rollout['rollout_id']!r}: {ignored} action(s) "
                    f"after the answer or beyond max_turns={max_turns} ignored"
                )
            if answer is None:
                em = f1 = 0.0
            else:
                found = scores.get(answer)
                if found is None:
                    found = scores[answer] = qa_scores(answer, golds, fold_unicode=fold)
                em, f1 = found
            reward, success = outcome(
                em, f1, answered=answer is not None, empty_store=empty_store_answer,
                given=rollout.get("reward"), success=success_rule,
            )
            answers.append(answer)
            empty_store.append(empty_store_answer)
            em_list.append(em)
            f1_list.append(f1)
            rewards.append(reward)
            successes.append(success)
            lengths.append(t)
            totals.append(len(actions))
            row += 1
        texts = list(local)
        order = sorted(range(len(texts)), key=texts.__getitem__)
        where = [0] * len(texts)
        for position, index in enumerate(order):
            where[index] = base + position
        remap.extend(where)
        texts_per_group.append([texts[index] for index in order])
        facts_per_group.append([Fact._make(best[index]) for index in order])
    occurrence_fact_array = np.asarray(remap, dtype=np.int64)[np.asarray(occurrence_fact, dtype=np.int64)]
    return _Prepared(
        rollout_starts=np.asarray(rollout_starts, dtype=np.int64),
        lengths=np.asarray(lengths, dtype=np.int64),
        totals=np.asarray(totals, dtype=np.int64),
        kinds=np.asarray(kinds, dtype=np.int8),
        occurrence_row=np.asarray(occurrence_row, dtype=np.int64),
        occurrence_step=np.asarray(occurrence_step, dtype=np.int64),
        occurrence_fact=occurrence_fact_array,
        facts=facts_per_group,
        texts=texts_per_group,
        repeated_row=repeated_row,
        repeated_step=repeated_step,
        rank=np.asarray(rank, dtype=np.int64),
        answers=answers,
        empty_store_answer=empty_store,
        em=em_list,
        f1=f1_list,
        reward=rewards,
        success=successes,
        golds_normalized_empty=golds_empty,
    )


def _compute(
    groups: GroupsInput,
    config: FactUtilConfig,
    clusterer: Clusterer | None,
    on_invalid_group: str,
) -> ProcessAdvantages:
    """The body of :func:`compute_process_advantages` (config already validated)."""
    started = time.perf_counter()
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        logger.warning(message)

    timings: dict[str, float] = {}
    clock = time.perf_counter()
    if on_invalid_group not in ("raise", "skip"):
        raise ValueError(f"on_invalid_group must be 'raise' or 'skip', got {on_invalid_group!r}")
    batch, skipped = load_groups(groups, skip_invalid=on_invalid_group == "skip")
    for uid, reason in skipped.items():
        warn(f"group {uid!r} skipped: {reason}")
    timings["load"] = time.perf_counter() - clock

    # 1. Outcomes and the fact texts of every rollout (docs/method.md §1, §2.1).
    clock = time.perf_counter()
    prep = _prepare(batch, config, warn)
    timings["prepare"] = time.perf_counter() - clock

    # 2. Clusters (docs/method.md §2).
    clock = time.perf_counter()
    clusterer = clusterer if clusterer is not None else make_clusterer(config)
    labels = clusterer.cluster_batch(prep.facts)
    timings["cluster"] = time.perf_counter() - clock

    # 3. Utilities of every cluster (docs/method.md §3).
    clock = time.perf_counter()
    util = batch_utilities(
        labels, prep.occurrence_row, prep.occurrence_step, prep.occurrence_fact,
        np.asarray(prep.success, dtype=np.float64), prep.rank, prep.rollout_starts,
        config.epsilon, config.prior, config.uniform_groups,
    )
    timings["utility"] = time.perf_counter() - clock

    # 4. Potentials, shaping, back-credit and penalties, every rollout at once (docs/method.md §4).
    clock = time.perf_counter()
    rows = len(prep.lengths)
    steps = int(prep.lengths.max()) if rows else 0
    effective = int(prep.lengths.sum())
    starts = np.cumsum(prep.lengths) - prep.lengths
    action_row = np.repeat(np.arange(rows, dtype=np.int64), prep.lengths)
    action_step = np.arange(effective, dtype=np.int64) - starts[action_row]
    kinds = np.full((rows, steps), PAD, dtype=np.int8)
    kinds[action_row, action_step] = prep.kinds
    gain, added = action_gains(
        util.pair_row, util.pair_step, util.utility[util.pair_cluster], rows, steps
    )
    repeated = np.zeros((rows, steps), dtype=bool)
    repeated[prep.repeated_row, prep.repeated_step] = True
    parts = process_rewards(
        kinds,
        gain,
        added,
        repeated,
        gamma=config.gamma,
        alpha=config.alpha,
        invalid_penalty=config.invalid_penalty,
        repeat_search_penalty=config.repeat_search_penalty,
        empty_store_answer_penalty=config.empty_store_answer_penalty,
    )
    timings["shaping"] = time.perf_counter() - clock

    # 5. Advantages per group (docs/method.md §5), then the per-action columns over every input action.
    clock = time.perf_counter()
    reward = np.asarray(prep.reward, dtype=np.float64)
    a_out = segment_normalize(reward, prep.rollout_starts, config.norm_eps, config.norm_by_std)
    process_reward = parts.process_reward[action_row, action_step]
    if config.process_norm == "group":
        a_proc = segment_normalize(process_reward, starts[prep.rollout_starts] if rows else starts,
                                   config.norm_eps, True)
    else:
        a_proc = process_advantages(process_reward, eps=config.norm_eps, mode=config.process_norm)
    total = total_advantages(a_out, a_proc, action_row, omega=config.omega)
    offsets = np.concatenate([[0], np.cumsum(prep.totals)]).astype(np.int64)
    position = offsets[:-1][action_row] + action_step
    count = int(offsets[-1])
    columns: dict[str, np.ndarray] = {}
    for name, values in (
        ("shaping", parts.shaping[action_row, action_step]),
        ("back_credit", parts.back_credit[action_row, action_step]),
        ("penalty", parts.penalty[action_row, action_step]),
        ("process_reward", process_reward),
        ("potential", parts.potential[action_row, action_step]),
        ("outcome_advantage", a_out[action_row]),
        ("process_advantage", a_proc),
        ("advantage", total),
    ):
        column = np.zeros(count, dtype=np.float64)
        column[position] = values
        columns[name] = column
    columns["outcome_reward"] = np.repeat(reward, prep.totals)
    columns["step"] = np.arange(count, dtype=np.int64) - np.repeat(offsets[:-1], prep.totals)
    ignored = np.ones(count, dtype=bool)
    ignored[position] = False
    columns["ignored"] = ignored
    for column in columns.values():
        column.flags.writeable = False  # the records are built from them later
    timings["advantage"] = time.perf_counter() - clock

    with np.errstate(over="ignore"):
        advantages = columns["advantage"].astype(np.float32)
    keys = [
        (group.uid, rollout["rollout_id"]) for group in batch for rollout in group.rollouts
    ]
    if not np.all(np.isfinite(advantages)):
        k = int(np.flatnonzero(~np.isfinite(advantages))[0])
        uid, rollout_id = keys[int(np.searchsorted(offsets, k, side="right")) - 1]
        raise FloatingPointError(
            f"advantage of group {uid!r} rollout {rollout_id!r} step {int(columns['step'][k])} is "
            f"{float(columns['advantage'][k])!r} (outcome_advantage "
            f"{float(columns['outcome_advantage'][k])!r}, process_advantage "
            f"{float(columns['process_advantage'][k])!r}, omega {config.omega!r}): outside "
            f"float32; lower omega, set norm_by_std=true or rescale the rewards"
        )
    timings["total"] = time.perf_counter() - started

    utilities = util.utility.tolist()
    metrics = {
        "groups": float(len(batch)),
        "rollouts": float(rows),
        "actions": float(count),
        "actions_ignored": float(count - effective),
        "actions_invalid": float(np.count_nonzero(prep.kinds == INVALID)),
        "answers_empty_store": float(sum(prep.empty_store_answer)),
        "rollouts_unanswered": float(sum(answer is None for answer in prep.answers)),
        "groups_single_rollout": float(sum(len(g.rollouts) == 1 for g in batch)),
        "clusters": float(len(utilities)),
        "clusters_per_group": len(utilities) / len(batch) if batch else 0.0,
        "utility_mean": _mean(utilities),
        "utility_min": min(utilities) if utilities else 0.0,
        "utility_max": max(utilities) if utilities else 0.0,
        "shaping_nonzero_share": (
            float(np.count_nonzero(parts.shaping[action_row, action_step])) / effective
            if effective else 0.0
        ),
        "em_mean": _mean(prep.em),
        "f1_mean": _mean(prep.f1),
        "outcome_reward_mean": _mean(prep.reward),
        "warnings": float(len(warnings)),
    }
    metrics.update({f"time_{name}_s": seconds for name, seconds in timings.items()})
    metrics["groups_uniform_zeroed"] = float(util.uniform_zeroed)
    metrics["prior_group"] = float(config.prior == "group")  # which prior ran: 0 beta, 1 group
    metrics["searches_repeated"] = float(len(prep.repeated_row))
    metrics["golds_normalized_empty"] = float(prep.golds_normalized_empty)
    metrics["groups_skipped"] = float(len(skipped))
    metrics.update({f"cluster_{name}": value for name, value in clusterer.metrics.items()})
    records = _Records(batch, config, prep, util, a_out, keys, offsets)
    return ProcessAdvantages(
        advantages, columns, keys, offsets, metrics, warnings, skipped, records
    )


def _mean(values: list[float]) -> float:
    if not values:
        return 0.0
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # rewards near the float range: the exact sum overflows, the mean not
        return math.fsum(value / len(values) for value in values)


@dataclass
class _Records:
    """What the per-item records of a step are built from, on first access."""

    batch: list[GroupRows]
    config: FactUtilConfig
    prep: _Prepared
    util: BatchUtilities
    outcome_advantage: np.ndarray
    keys: list[tuple[str, str]]
    offsets: np.ndarray

    def _group_of_row(self) -> np.ndarray:
        counts = np.diff(np.append(self.prep.rollout_starts, len(self.keys)))
        return np.repeat(np.arange(len(self.batch), dtype=np.int64), counts)

    def actions(self, columns: dict[str, np.ndarray]) -> list[ActionRecord]:
        util = self.util
        group_of_row = self._group_of_row()
        order = np.lexsort((util.pair_cluster, util.pair_step, util.pair_row))
        new: dict[tuple[int, int], list[int]] = {}
        local = util.pair_cluster - util.cluster_starts[group_of_row[util.pair_row]]
        for r, t, c in zip(
            util.pair_row[order].tolist(), util.pair_step[order].tolist(), local[order].tolist()
        ):
            new.setdefault((r, t), []).append(c)
        listed = {name: values.tolist() for name, values in columns.items()}
        records = []
        k = 0
        row = 0
        for group in self.batch:
            for rollout in group.rollouts:
                uid, rollout_id = self.keys[row]
                for t, action in enumerate(rollout["actions"]):
                    kind = action["action"]
                    reason = action["reason"] if kind == "invalid" else None
                    if listed["ignored"][k]:
                        records.append(ActionRecord(
                            uid, rollout_id, t, kind, 0.0, 0.0, 0.0, 0.0,
                            listed["outcome_reward"][k], 0.0, 0.0, 0.0, [], True, reason,
                        ))
                    else:
                        records.append(ActionRecord(
                            uid, rollout_id, t, kind, listed["shaping"][k],
                            listed["back_credit"][k], listed["penalty"][k],
                            listed["process_reward"][k], listed["outcome_reward"][k],
                            listed["outcome_advantage"][k], listed["process_advantage"][k],
                            listed["advantage"][k], new.get((row, t), []), False, reason,
                        ))
                    k += 1
                row += 1
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
        # The occurrences were recorded walking the effective actions in this same order.
        fact_cluster, occurrence_fact = util.fact_cluster.tolist(), prep.occurrence_fact.tolist()
        lengths = prep.lengths.tolist()
        members: list[set[tuple[str, str, str]]] = [set() for _ in n]
        k = row = 0
        for group in self.batch:
            for rollout in group.rollouts:
                for action in rollout["actions"][: lengths[row]]:
                    if action["action"] == "assert":
                        for triple in action["triples"]:
                            members[fact_cluster[occurrence_fact[k]]].add(tuple(triple))
                            k += 1
                row += 1
        starts, groups = util.cluster_starts.tolist(), util.cluster_group.tolist()
        return [
            ClusterRecord(
                self.batch[g].uid, c - starts[g], [list(t) for t in sorted(members[c])],
                n[c], s[c], mean[c], utility[c],
            )
            for c, g in enumerate(groups)
        ]
