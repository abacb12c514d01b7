"""``compute_process_advantages``: rollouts -> per-action advantages (docs/method.md §1–§5).

The steps, each in its own module: outcome rewards and the empty-store rule
(:func:`factutil.metrics.outcome`), clusters (:mod:`factutil.cluster`), utilities
(:func:`factutil.utility.batch_utilities`), the gain grid, potentials, shaping, back-credit and
penalties (:mod:`factutil.shaping`), advantages (:mod:`factutil.advantages`). This module only
orders them: the groups become flat columns once (:mod:`factutil.columns`), each step is one batch
call, and the result (:mod:`factutil.result`) builds its records from the columns on demand.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from factutil.advantages import process_advantages, segment_normalize, total_advantages
from factutil.cluster import (
    Clusterer,
    ExactClusterer,
    SemanticClusterer,
    _prepared_list,
    make_clusterer,
)
from factutil.columns import prepare
from factutil.config import FactUtilConfig
from factutil.load import GroupsInput, load_groups
from factutil.result import (
    ActionRecord,
    ClusterRecord,
    ProcessAdvantages,
    Records,
    RolloutRecord,
    gc_paused,
)
from factutil.shaping import INVALID, PAD, action_gains, process_rewards
from factutil.utility import batch_utilities

if TYPE_CHECKING:
    from factutil.load import GroupRows
    from factutil.prepare import PreparedFacts
    from factutil.rollout_work import RolloutWork

__all__ = [
    "CLUSTERING_FIELDS", "ActionRecord", "ClusterRecord", "ProcessAdvantages", "RolloutRecord",
    "check_clusterer", "compute_process_advantages", "gc_paused",
]

logger = logging.getLogger("factutil")


def compute_process_advantages(
    groups: GroupsInput,
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    clusterer: Clusterer | None = None,
    on_invalid_group: str = "raise",
    prepared: PreparedFacts | Sequence[PreparedFacts] | None = None,
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
        prepared: per-fact work done elsewhere (:func:`factutil.prepare.prepare_facts`, e.g. in
            the rollout workers): one :class:`~factutil.prepare.PreparedFacts` or several. The
            step takes the texts, vectors and analyses it finds there and computes the rest;
            results are the same bit for bit. Work made for another embedder, template, filters
            or key edges is ignored with one warning. ``metrics["cluster_prepared_facts"]``
            counts the facts found, ``cluster_prepared_ignored`` the items ignored and
            ``cluster_cache_misses`` the texts the model still embedded; vectors made on another
            kind of device (config ``prepared_device``) are used with one warning and counted in
            ``cluster_prepared_other_device`` (facts), or with ``"same"`` ignored. Many items
            (one per rollout): read them with :func:`factutil.prepare.load_prepared`.

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
        return _compute(groups, config, clusterer, on_invalid_group, prepared)


CLUSTERING_FIELDS = (
    "triple_template", "embedding_model", "embedding_backend", "sim_threshold", "sim_decimals",
    "filters", "key_edges", "knn_min_size", "knn_k", "hnsw_m", "hnsw_ef", "hnsw_seed",
)
"""The config fields a :class:`~factutil.cluster.SemanticClusterer`'s clusters depend on
(``embedding_device``, ``embedding_batch_size``, ``embedding_pass_tokens`` and the cache bounds
change only speed, and vectors by float rounding: the embedder's name, which keys its cache and
shipped work, names its pass shapes)."""


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


def _compute(
    groups: GroupsInput,
    config: FactUtilConfig,
    clusterer: Clusterer | None,
    on_invalid_group: str,
    prepared: PreparedFacts | Sequence[PreparedFacts] | None = None,
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
    batch, work = _shipped_rows(batch, config, skipped, on_invalid_group == "skip")
    for uid, reason in skipped.items():
        warn(f"group {uid!r} skipped: {reason}")
    timings["load"] = time.perf_counter() - clock

    # 1. Outcomes and the fact texts of every rollout (docs/method.md §1, §2.1).
    clock = time.perf_counter()
    prep = prepare(batch, config, warn, work.columns if work is not None else None)
    timings["prepare"] = time.perf_counter() - clock

    # 2. Clusters (docs/method.md §2).
    clock = time.perf_counter()
    clusterer = clusterer if clusterer is not None else make_clusterer(config)
    items = [] if prepared is None else _prepared_list(prepared)
    if work is not None:
        items = [*work.facts, *items]
    given = _given_work(clusterer, prep, items)
    if items and given is None:
        add_prepared = getattr(clusterer, "add_prepared", None)
        if add_prepared is not None:
            add_prepared(items, warn=warn)
        else:
            warn(f"prepared facts ignored: {type(clusterer).__name__} takes none "
                 f"(no add_prepared method)")
    if given is not None:
        labels = clusterer.cluster_given(prep.facts, *given)
    else:
        labels = clusterer.cluster_batch(prep.facts)
    timings["cluster"] = time.perf_counter() - clock

    # 3. Utilities of every cluster (docs/method.md §3).
    clock = time.perf_counter()
    util = batch_utilities(
        labels, prep.occurrence_row, prep.occurrence_step, prep.occurrence_fact,
        np.asarray(prep.success, dtype=np.float64), prep.rank, prep.rollout_starts,
        config.epsilon, config.prior, config.uniform_groups, config.utility,
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
    gain, added = action_gains(util.pair_row, util.pair_step, util.pair_utility, rows, steps)
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
    metrics["groups_uniform_share"] = util.groups_uniform / len(batch) if batch else 0.0
    metrics["prior_group"] = float(config.prior == "group")  # which prior ran: 0 beta, 1 group
    metrics["searches_repeated"] = float(len(prep.repeated_row))
    metrics["golds_normalized_empty"] = float(prep.golds_normalized_empty)
    metrics["groups_skipped"] = float(len(skipped))
    metrics.update({f"cluster_{name}": value for name, value in clusterer.metrics.items()})
    records = Records(batch, config, prep, util, a_out, keys, offsets)
    return ProcessAdvantages(
        advantages, columns, keys, offsets, metrics, warnings, skipped, records
    )


def _shipped_rows(
    batch: list[GroupRows], config: FactUtilConfig, skipped: dict[str, str], skip: bool
) -> tuple[list[GroupRows], RolloutWork | None]:
    """The shipped rows' work (:func:`factutil.rollout_work.read_rollout_work`), numbered by
    batch row; a group with a row whose work cannot be used is left out (``skip``: its reason
    added to ``skipped``) or raises.

    Raises:
        ValueError: with ``skip`` False, the first such row (group, rollout and reason named).
    """
    shipped: dict[int, bytes] = {}
    keys: dict[int, tuple[str, str]] = {}
    row = 0
    for group in batch:
        for rollout in group.rollouts:
            data = rollout.get("shipped")
            if data is not None:
                shipped[row] = data
                keys[row] = (group.uid, rollout["rollout_id"])
            row += 1
    if not shipped:
        return batch, None
    from factutil.rollout_work import read_rollout_work

    work = read_rollout_work(shipped, keys, config)
    if not work.unreadable:
        return batch, work
    bad: dict[str, str] = {}  # uid -> the reason of its first such row
    for row, reason in sorted(work.unreadable.items()):
        bad.setdefault(keys[row][0], f"rollout {keys[row][1]!r}: {reason}")
    if not skip:
        uid, reason = next(iter(bad.items()))
        raise ValueError(f"group {uid!r} {reason}")
    kept: list[GroupRows] = []
    renumbered: dict[int, Any] = {}
    row = new = 0
    for group in batch:
        size = len(group.rollouts)
        if group.uid in bad:
            skipped[group.uid] = bad[group.uid]
        else:
            kept.append(group)
            for offset in range(size):
                if row + offset in work.columns:
                    renumbered[new + offset] = work.columns[row + offset]
            new += size
        row += size
    return kept, work._replace(columns=renumbered)


def _given_work(
    clusterer: Clusterer, prep: Any, items: Sequence[PreparedFacts]
) -> tuple[PreparedFacts, np.ndarray] | None:
    """The first of ``items`` when it holds the work of every fact of the step and the
    clusterer can cluster from it alone (:meth:`~factutil.cluster.SemanticClusterer.cluster_given`:
    the item :meth:`fits` it), with each fact's row in it; else None (the clusterer then takes
    the items through ``add_prepared`` and computes what is missing). The shipped rows' facts
    come first, their rows known (``prep.fact_work``)."""
    if not items or getattr(clusterer, "cluster_given", None) is None \
            or not clusterer.fits(items[0]):
        return None
    rows = prep.fact_work
    if not len(rows) or int(rows.min()) < 0:
        position = {parts: index for index, parts in enumerate(items[0].parts)}
        found = [position.get(fact) for facts in prep.facts for fact in facts]
        if None in found:
            return None
        rows = np.array(found, dtype=np.int64)
    return items[0], rows


def _mean(values: list[float]) -> float:
    if not values:
        return 0.0
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # rewards near the float range: the exact sum overflows, the mean not
        return math.fsum(value / len(values) for value in values)

