"""``compute_process_advantages``: rollouts -> per-action advantages (SPEC.md §1–§5).

The steps, each in its own module: outcome rewards (:mod:`factutil.metrics`), clusters
(:mod:`factutil.cluster`), utilities (:mod:`factutil.utility`), potentials, shaping, back-credit
and penalties (:mod:`factutil.shaping`), advantages (:mod:`factutil.advantages`). This module only
walks the groups, feeds those pure functions and assembles the records.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from factutil.advantages import outcome_advantages, process_advantages, total_advantages
from factutil.cluster import (
    Clusterer,
    make_clusterer,
    normalize_fact_text,
    representatives,
    triple_text,
)
from factutil.metrics import qa_scores
from factutil.schema import (
    AnswerAction,
    AssertAction,
    FactUtilConfig,
    Group,
    Rollout,
    SearchAction,
)
from factutil.shaping import KIND_CODES, PAD, cluster_gain, process_rewards
from factutil.utility import cluster_utilities

logger = logging.getLogger("factutil")

GroupsInput = str | os.PathLike | Group | Mapping[str, Any] | Iterable[Any]


@dataclass(slots=True)
class ActionRecord:
    """One action's credit: the output line of SPEC §8.

    ``ignored`` marks an action after the rollout's first answer or beyond ``max_turns``: it has no
    effect and every reward and advantage field is 0. ``new_clusters`` holds the cluster ids an
    assert brought into the store.
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

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, keys in SPEC §8 order."""
        return asdict(self)


@dataclass(slots=True)
class RolloutRecord:
    """One rollout's outcome (SPEC §1, §3, §5).

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
    """One cluster of a group: SPEC §8's ``factutil clusters`` item.

    ``members`` are the distinct triples (original text) asserted in the group that fall in the
    cluster, sorted; ``n``, ``s``, ``mean`` and ``utility`` are SPEC §3's n_c, s_c, m_c and u_c.
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


@dataclass(frozen=True)
class ProcessAdvantages:
    """Result of :func:`compute_process_advantages`.

    Attributes:
        actions: one :class:`ActionRecord` per input action, in input order (groups, rollouts,
            actions as given).
        rollouts: one :class:`RolloutRecord` per rollout, in input order.
        clusters: :class:`ClusterRecord` per group and cluster id.
        advantages: float32 (N,), ``actions[k].advantage`` in input action order; every token of
            action k's response gets ``advantages[k]``.
        metrics: named floats: counts, clusters per group, utility mean/min/max, share of
            actions with non-zero shaping, mean EM/F1, and ``time_<stage>_s`` in seconds.
        warnings: messages also sent to the ``factutil`` logger.
        skipped: uid -> reason for groups left out under ``on_invalid_group="skip"``.
    """

    actions: list[ActionRecord]
    rollouts: list[RolloutRecord]
    clusters: list[ClusterRecord]
    advantages: np.ndarray
    metrics: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class _RolloutWork:
    """Per-rollout state gathered before clustering."""

    rollout: Rollout
    effective: list[Any]
    texts_per_action: list[list[str]]
    record: RolloutRecord


def _as_groups(groups: GroupsInput, skip_invalid: bool = False) -> tuple[list[Group], dict[str, str]]:
    """Accept a path, a Group, or an iterable of Groups / Rollouts / dicts (see the API doc).

    Returns the groups and, when ``skip_invalid``, the uids of groups that failed validation with
    the reason (otherwise the first failure raises).
    """
    if isinstance(groups, (str, os.PathLike)):
        from factutil.io import read_groups

        return read_groups(groups), {}
    if isinstance(groups, Group):
        return [groups], {}
    if isinstance(groups, Mapping):
        groups = [groups]
    # Validation happens per group so that, when skipping, one bad group costs only itself.
    pending: list[tuple[str, Any]] = []
    loose: dict[str, list[Any]] = {}
    for item in groups:
        if isinstance(item, Group):
            pending.append((item.uid, item))
        elif isinstance(item, Mapping) and "rollouts" in item:
            pending.append((str(item.get("uid", "?")), item))
        elif isinstance(item, (Rollout, Mapping)):
            uid = item.uid if isinstance(item, Rollout) else item.get("uid")
            if str(uid) not in loose:
                pending.append((str(uid), None))
            loose.setdefault(str(uid), []).append(item)
        else:
            raise TypeError(
                f"groups must hold Group, Rollout or dict items, got {type(item).__name__}"
            )
    result: list[Group] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for uid, item in pending:
        try:
            if item is None:
                rollouts = [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in loose[uid]]
                group = Group.from_rollouts(rollouts)
            else:
                group = item if isinstance(item, Group) else Group.model_validate(item)
            if group.uid in seen:
                raise ValueError(f"uid {group.uid!r} appears in two groups; a uid names one group")
        except (ValueError, TypeError) as error:  # pydantic.ValidationError is a ValueError
            if not skip_invalid:
                raise
            skipped[uid] = str(error)
            continue
        seen.add(group.uid)
        result.append(group)
    return result, skipped


def _effective_actions(rollout: Rollout, max_turns: int) -> list[Any]:
    """Actions up to and including the first answer, at most ``max_turns`` of them (SPEC §1)."""
    effective = []
    for action in rollout.actions[:max_turns]:
        effective.append(action)
        if isinstance(action, AnswerAction):
            break
    return effective


def _prepare_rollout(
    group: Group, rollout: Rollout, config: FactUtilConfig, warn: Any
) -> _RolloutWork:
    effective = _effective_actions(rollout, config.max_turns)
    ignored = len(rollout.actions) - len(effective)
    if ignored:
        warn(
            f"group {group.uid!r} rollout {rollout.rollout_id!r}: {ignored} action(s) after the "
            f"answer or beyond max_turns={config.max_turns} ignored"
        )
    texts_per_action: list[list[str]] = []
    store_empty = True
    answer: AnswerAction | None = None
    empty_store_answer = False
    for action in effective:
        texts: list[str] = []
        if isinstance(action, AssertAction):
            texts = [triple_text(triple, config.triple_template) for triple in action.triples]
            store_empty = False
        elif isinstance(action, AnswerAction):
            answer = action
            empty_store_answer = store_empty
        texts_per_action.append(texts)
    if answer is None:
        em = f1 = 0.0
    else:
        em, f1 = qa_scores(answer.answer, group.golden_answers, fold_unicode=config.fold_unicode)
    if answer is None or empty_store_answer:
        reward = 0.0
    elif rollout.reward is not None:
        reward = rollout.reward
    else:
        reward = f1
    if answer is None or empty_store_answer:
        success = 0.0
    elif config.success == "em":
        success = em
    elif config.success == "f1":
        success = f1
    else:
        success = min(max(reward, 0.0), 1.0)
    record = RolloutRecord(
        uid=group.uid,
        rollout_id=rollout.rollout_id,
        answer=None if answer is None else answer.answer,
        answered=answer is not None,
        empty_store_answer=empty_store_answer,
        em=em,
        f1=f1,
        outcome_reward=reward,
        success=success,
        outcome_advantage=0.0,
        actions=len(effective),
        ignored_actions=ignored,
    )
    return _RolloutWork(rollout, effective, texts_per_action, record)


def _repeated_searches(effective: list[Any]) -> np.ndarray:
    """True on each search whose normalised query equals an earlier search's (SPEC §4, §5)."""
    seen: set[str] = set()
    repeated = np.zeros(len(effective), dtype=bool)
    for t, action in enumerate(effective):
        if isinstance(action, SearchAction):
            query = normalize_fact_text(action.query)
            repeated[t] = query in seen
            seen.add(query)
    return repeated


def _cluster_members(
    rollouts: list[_RolloutWork], label_of: dict[str, int]
) -> dict[int, list[list[str]]]:
    """Distinct original triples of each cluster, sorted (for display, SPEC §8)."""
    members: dict[int, set[tuple[str, str, str]]] = {}
    for item in rollouts:
        for action, texts in zip(item.effective, item.texts_per_action):
            if isinstance(action, AssertAction):
                for triple, text in zip(action.triples, texts):
                    members.setdefault(label_of[text], set()).add(
                        (triple.subject, triple.relation, triple.object)
                    )
    return {label: [list(t) for t in sorted(found)] for label, found in members.items()}


def compute_process_advantages(
    groups: GroupsInput,
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    clusterer: Clusterer | None = None,
    on_invalid_group: str = "raise",
) -> ProcessAdvantages:
    """Per-action advantages A = A_out + omega * A_proc for a batch of groups (SPEC §1–§5).

    Args:
        groups: a path to a SPEC §8 JSONL file; a :class:`Group`; or an iterable of Groups,
            Rollouts, group dicts (with ``rollouts``) or rollout dicts (SPEC §8 lines, grouped by
            ``uid`` only). Inputs are never mutated.
        config: a :class:`FactUtilConfig` or a mapping of its fields; None uses the defaults.
        clusterer: the :class:`~factutil.cluster.Clusterer` to use; None builds the one
            ``config.mode`` names. Pass one to reuse its state (e.g. an embedding cache) across
            calls.
        on_invalid_group: ``"raise"`` (default) raises on the first group that fails validation;
            ``"skip"`` leaves such groups out, lists them in ``skipped`` with the reason and logs a
            warning, so a trainer can fall back to outcome-only advantages for them alone.

    Returns:
        :class:`ProcessAdvantages`; ``advantages`` is float32 (N,) over all N input actions in
        input order (0 for ignored actions). Deterministic, and independent of the order of
        groups, of rollouts within a group and of triples within an assert.

    Raises:
        pydantic.ValidationError: bad groups or config (the message names field and value).
        factutil.io.InputError: a bad input file (every problem as ``FILE:LINE: field: ...``).
        ValueError: a uid shared by two groups.
    """
    if config is None:
        config = FactUtilConfig()
    elif not isinstance(config, FactUtilConfig):
        config = FactUtilConfig.model_validate(dict(config))
    # A step allocates ~10 objects per action and frees them together; generational collections
    # in the middle of it cost more than half of validation time, and find no cycles to free.
    paused = config.pause_gc and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _compute(groups, config, clusterer, on_invalid_group)
    finally:
        if paused:
            gc.enable()


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
    batch, skipped = _as_groups(groups, skip_invalid=on_invalid_group == "skip")
    for uid, reason in skipped.items():
        warn(f"group {uid!r} skipped: {reason}")
    timings["load"] = time.perf_counter() - clock

    # 1. Outcomes and the fact texts of every rollout (SPEC §1, §2.1).
    clock = time.perf_counter()
    work: list[list[_RolloutWork]] = []
    group_texts: list[list[str]] = []
    group_facts: list[list[Any]] = []
    for group in batch:
        if len(group.rollouts) == 1:
            warn(f"group {group.uid!r} has one rollout: outcome advantage 0 (no baseline)")
        if config.group_size is not None and len(group.rollouts) != config.group_size:
            warn(
                f"group {group.uid!r} has {len(group.rollouts)} rollouts, group_size is "
                f"{config.group_size}"
            )
        rollouts = [_prepare_rollout(group, rollout, config, warn) for rollout in group.rollouts]
        work.append(rollouts)
        triples = [
            triple
            for item in rollouts
            for action in item.effective
            if isinstance(action, AssertAction)
            for triple in action.triples
        ]
        texts, facts = representatives(triples, config.triple_template)
        group_texts.append(texts)
        group_facts.append(facts)
    timings["prepare"] = time.perf_counter() - clock

    # 2. Clusters (SPEC §2).
    clock = time.perf_counter()
    clusterer = clusterer if clusterer is not None else make_clusterer(config)
    group_labels = clusterer.cluster_batch(group_facts)
    timings["cluster"] = time.perf_counter() - clock

    # 3. Utilities per group (SPEC §3); rows in rollout_id order so sums never depend on input order.
    clock = time.perf_counter()
    cluster_records: list[ClusterRecord] = []
    counts = {"groups_uniform_zeroed": 0}
    label_maps: list[dict[str, int]] = []
    utilities: list[np.ndarray] = []
    for group, rollouts, texts, labels in zip(batch, work, group_texts, group_labels):
        label_of = dict(zip(texts, labels.tolist()))
        n_clusters = int(labels.max()) + 1 if len(labels) else 0
        order = sorted(range(len(rollouts)), key=lambda i: rollouts[i].rollout.rollout_id)
        membership = np.zeros((len(rollouts), n_clusters), dtype=bool)
        for row, index in enumerate(order):
            for action_texts in rollouts[index].texts_per_action:
                for text in action_texts:
                    membership[row, label_of[text]] = True
        success = np.array([rollouts[i].record.success for i in order], dtype=np.float64)
        table = cluster_utilities(membership, success, config.epsilon)
        if config.uniform_groups == "zero" and len(success) and success.min() == success.max():
            # Nothing separates helpful facts from harmful ones when every rollout scored the
            # same; SPEC §3's prior would still reward every fact (all fail) or punish it (all win).
            table = dataclasses.replace(table, utility=np.zeros_like(table.utility))
            counts["groups_uniform_zeroed"] += 1
        members = _cluster_members(rollouts, label_of)
        for cluster_id, (n, s, mean, utility) in enumerate(
            zip(table.n.tolist(), table.s.tolist(), table.mean.tolist(), table.utility.tolist())
        ):
            cluster_records.append(
                ClusterRecord(group.uid, cluster_id, members.get(cluster_id, []), n, s, mean, utility)
            )
        label_maps.append(label_of)
        utilities.append(table.utility)
    timings["utility"] = time.perf_counter() - clock

    # 4. Potentials, shaping, back-credit and penalties, every rollout of the batch at once (SPEC §4).
    clock = time.perf_counter()
    items = [item for rollouts in work for item in rollouts]
    steps = max((len(item.effective) for item in items), default=0)
    kinds = np.full((len(items), steps), PAD, dtype=np.int8)
    gain = np.zeros((len(items), steps), dtype=np.float64)
    added_count = np.zeros((len(items), steps), dtype=np.int64)
    repeated = np.zeros((len(items), steps), dtype=bool)
    new_clusters: list[list[list[int]]] = []
    row = 0
    for rollouts, label_of, utility in zip(work, label_maps, utilities):
        for item in rollouts:
            store: set[int] = set()
            row_clusters = []
            for t, (action, action_texts) in enumerate(zip(item.effective, item.texts_per_action)):
                kinds[row, t] = KIND_CODES[action.action]
                added = sorted({label_of[text] for text in action_texts} - store)
                if added:
                    store.update(added)
                    gain[row, t] = cluster_gain(added, utility)
                    added_count[row, t] = len(added)
                row_clusters.append(added)
            repeated[row, : len(item.effective)] = _repeated_searches(item.effective)
            new_clusters.append(row_clusters)
            row += 1
    parts = process_rewards(
        kinds,
        gain,
        added_count,
        repeated,
        gamma=config.gamma,
        alpha=config.alpha,
        invalid_penalty=config.invalid_penalty,
        repeat_search_penalty=config.repeat_search_penalty,
        empty_store_answer_penalty=config.empty_store_answer_penalty,
    )
    counts["searches_repeated"] = int(repeated.sum())
    timings["shaping"] = time.perf_counter() - clock

    # 5. Advantages per group (SPEC §5), then one record per input action.
    clock = time.perf_counter()
    action_records: list[ActionRecord] = []
    rollout_records: list[RolloutRecord] = []
    shaping_rows = parts.shaping.tolist()
    credit_rows = parts.back_credit.tolist()
    penalty_rows = parts.penalty.tolist()
    reward_rows = parts.process_reward.tolist()
    row = 0
    for group, rollouts in zip(batch, work):
        first = row
        a_out = outcome_advantages(
            np.array([item.record.outcome_reward for item in rollouts], dtype=np.float64),
            eps=config.norm_eps,
            norm_by_std=config.norm_by_std,
        )
        lengths = [len(item.effective) for item in rollouts]
        process_reward = (
            parts.process_reward[first : first + len(rollouts)][kinds[first : first + len(rollouts)] != PAD]
            if rollouts else np.zeros(0)
        )
        a_proc = process_advantages(process_reward, eps=config.norm_eps, mode=config.process_norm)
        rollout_index = np.repeat(np.arange(len(rollouts), dtype=np.int64), lengths)
        total = total_advantages(a_out, a_proc, rollout_index, omega=config.omega).tolist()
        a_proc = a_proc.tolist()
        offset = 0
        for i, item in enumerate(rollouts):
            outcome_advantage = float(a_out[i])
            item.record.outcome_advantage = outcome_advantage
            rollout_records.append(item.record)
            uid, rollout_id, reward = group.uid, item.rollout.rollout_id, item.record.outcome_reward
            shaping, credit, penalty = shaping_rows[row], credit_rows[row], penalty_rows[row]
            rewards, clusters = reward_rows[row], new_clusters[row]
            for t, action in enumerate(item.rollout.actions):
                if t < lengths[i]:
                    k = offset + t
                    action_records.append(ActionRecord(
                        uid, rollout_id, t, action.action, shaping[t], credit[t], penalty[t],
                        rewards[t], reward, outcome_advantage, a_proc[k], total[k], clusters[t],
                    ))
                else:
                    action_records.append(ActionRecord(
                        uid, rollout_id, t, action.action, 0.0, 0.0, 0.0, 0.0, reward, 0.0, 0.0,
                        0.0, [], ignored=True,
                    ))
            offset += lengths[i]
            row += 1
    timings["advantage"] = time.perf_counter() - clock

    with np.errstate(over="ignore"):
        advantages = np.array([record.advantage for record in action_records], dtype=np.float32)
    if not np.all(np.isfinite(advantages)):
        bad = action_records[int(np.flatnonzero(~np.isfinite(advantages))[0])]
        raise FloatingPointError(
            f"advantage of group {bad.uid!r} rollout {bad.rollout_id!r} step {bad.step} is "
            f"{bad.advantage!r} (outcome_advantage {bad.outcome_advantage!r}, process_advantage "
            f"{bad.process_advantage!r}, omega {config.omega!r}): outside float32; lower omega, "
            f"set norm_by_std=true or rescale the rewards"
        )
    timings["total"] = time.perf_counter() - started
    metrics = _metrics(batch, action_records, rollout_records, cluster_records, warnings, timings)
    metrics.update({name: float(value) for name, value in counts.items()})
    metrics["groups_skipped"] = float(len(skipped))
    metrics.update({f"cluster_{name}": value for name, value in clusterer.metrics.items()})
    return ProcessAdvantages(
        actions=action_records,
        rollouts=rollout_records,
        clusters=cluster_records,
        advantages=advantages,
        metrics=metrics,
        warnings=warnings,
        skipped=skipped,
    )


def _mean(values: list[float]) -> float:
    if not values:
        return 0.0
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # rewards near the float range: the exact sum overflows, the mean not
        return math.fsum(value / len(values) for value in values)


def _metrics(
    batch: list[Group],
    actions: list[ActionRecord],
    rollouts: list[RolloutRecord],
    clusters: list[ClusterRecord],
    warnings: list[str],
    timings: dict[str, float],
) -> dict[str, float]:
    """Batch metrics (all floats, never NaN: empty sets give 0)."""
    effective = [record for record in actions if not record.ignored]
    utilities = [record.utility for record in clusters]
    metrics = {
        "groups": float(len(batch)),
        "rollouts": float(len(rollouts)),
        "actions": float(len(actions)),
        "actions_ignored": float(len(actions) - len(effective)),
        "actions_invalid": float(sum(r.action == "invalid" for r in effective)),
        "answers_empty_store": float(sum(r.empty_store_answer for r in rollouts)),
        "rollouts_unanswered": float(sum(not r.answered for r in rollouts)),
        "groups_single_rollout": float(sum(len(g.rollouts) == 1 for g in batch)),
        "clusters": float(len(clusters)),
        "clusters_per_group": len(clusters) / len(batch) if batch else 0.0,
        "utility_mean": _mean(utilities),
        "utility_min": min(utilities) if utilities else 0.0,
        "utility_max": max(utilities) if utilities else 0.0,
        "shaping_nonzero_share": (
            sum(r.shaping != 0.0 for r in effective) / len(effective) if effective else 0.0
        ),
        "em_mean": _mean([r.em for r in rollouts]),
        "f1_mean": _mean([r.f1 for r in rollouts]),
        "outcome_reward_mean": _mean([r.outcome_reward for r in rollouts]),
        "warnings": float(len(warnings)),
    }
    metrics.update({f"time_{name}_s": seconds for name, seconds in timings.items()})
    return metrics
