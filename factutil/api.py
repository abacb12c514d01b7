"""``compute_process_advantages``: rollouts -> per-action advantages (docs/method.md §1–§5).
It only orders the steps, each one batch call over the columns of :mod:`factutil.columns`."""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
import warnings as python_warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from factutil.advantages import segment_normalize, total_advantages
from factutil.cluster import Clusterer, ExactClusterer, SemanticClusterer, make_clusterer
from factutil.columns import one_warning, prepare
from factutil.config import FactUtilConfig, as_config, clustering_fields, config_from_values
from factutil.embed import device_type
from factutil.load import GroupsInput, load_groups
from factutil.result import ActionRecord, ClusterRecord, ProcessAdvantages, Records, RolloutRecord
from factutil.shaping import ASSERT, INVALID, PAD, action_gains, process_rewards
from factutil.utility import PRIOR_RISK, PriorRiskWarning, batch_utilities
from factutil.workers import fit_key, read_work, work_items

__all__ = [
    "ActionRecord", "ClusterRecord", "ProcessAdvantages", "RolloutRecord", "check_clusterer",
    "compute_process_advantages",
]

logger = logging.getLogger("factutil")


def compute_process_advantages(
    groups: GroupsInput,
    config: FactUtilConfig | Mapping[str, Any] | None = None,
    *,
    clusterer: Clusterer | None = None,
    on_invalid_group: str = "raise",
    work: Any = None,
) -> ProcessAdvantages:
    """Per-action advantages A = A_out + omega * A_proc for a batch of groups (docs/method.md §1–§5).

    Args:
        groups: what :func:`factutil.load.load_groups` accepts (a §8 JSONL path, dicts, models).
        config: a :class:`FactUtilConfig` or a mapping of its fields; None: the defaults.
        clusterer: None builds the one ``config.mode`` names, as does that name (``"exact"``,
            ``"semantic"``, which sets the mode); pass one to reuse its caches. An
            Exact/SemanticClusterer must fit ``config`` (:func:`check_clusterer`).
        on_invalid_group: ``"raise"``, or ``"skip"``: leave a failing group out, listed in
            ``skipped`` and warned, so a trainer falls back to outcome-only advantages for it.
        work: per-fact work made elsewhere (:func:`factutil.workers.make_work`: one item, its
            bytes, or a list of them): each item is checked alone (:func:`factutil.workers.
            read_work`); what fits gives the clusterer its vectors (same results bit for bit),
            any other item is left out, its facts computed here, counted
            (``cluster_work_ignored``, ``cluster_work_unreadable``) and warned once.

    Returns:
        :class:`ProcessAdvantages`, independent of the order of groups, rollouts and triples.

    Raises:
        factutil.config.ConfigError: a bad config mapping, one ``config: field: message``
            line per problem.
        TypeError: a config that is no FactUtilConfig or mapping; groups of the wrong type.
        factutil.io.InputError: bad groups, one ``WHERE: field: ...`` line per problem (§8).
        ValueError: a uid shared by two groups; a clusterer built for another config.
        FloatingPointError: an advantage beyond float32; names group, rollout, step and omega.
    """
    config = as_config(config)
    if isinstance(clusterer, str):  # a mode's name, as the docs call the clusterers
        config = config_from_values({**config.model_dump(), "mode": clusterer}, lambda f: "clusterer")
        clusterer = None
    elif clusterer is not None and not isinstance(clusterer, Clusterer):
        raise TypeError(f"clusterer must be a Clusterer, 'exact' or 'semantic', got "
                        f"{type(clusterer).__name__}")
    if clusterer is not None:
        check_clusterer(clusterer, config)
    with _collector_paused(config.pause_gc):
        return _compute(groups, config, clusterer, on_invalid_group, work)


_NO_FACTS = {  # a step with answers and not one fact: most likely the wrong kind of facts
    "asserted": "no rollout asserted a triple, so all {} answers came from an empty store and their "
                "rewards were zeroed (docs/method.md §1); an agent that asserts nothing needs "
                "facts='retrieved'",
    "retrieved": "no search brought a passage, so all {} answers came from an empty store: give each "
                 "search its retrieved text ('observation' or 'passages'), or whole responses",
}

ASSERTS_UNCREDITED = (
    "rollouts assert triples, which facts='retrieved' does not credit (docs/method.md §9); an agent "
    "that answers from its asserts trained below outcome-only on passage credit from a cold start "
    "(benchmarks/README.md, credit ablation): facts='asserted' (the default) credits them"
)


@contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """The cyclic collector paused for a step on the main thread (mid-step collections find no
    cycles); never from another thread, where switching it races with the trainer's code."""
    paused = pause and threading.current_thread() is threading.main_thread() and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def check_clusterer(clusterer: Clusterer, config: FactUtilConfig) -> None:
    """Refuse a clusterer built for another clustering config than ``config``, by which the step
    would silently cluster (docs/method.md §2; :func:`~factutil.config.clustering_fields`).

    Raises:
        ValueError: naming each differing field with the clusterer's and the call's value.
    """
    if isinstance(clusterer, ExactClusterer):
        own = {"mode": "exact"}
    elif isinstance(clusterer, SemanticClusterer):
        own = clustering_fields(clusterer.config)
    else:
        return
    wanted = clustering_fields(config)
    differ = [name for name in dict.fromkeys([*own, *wanted]) if own.get(name) != wanted.get(name)]
    if "mode" in differ:
        differ = ["mode"]
    if differ:
        fields = "; ".join(f"{name}: clusterer {own.get(name)!r}, config {wanted.get(name)!r}"
                           for name in differ)
        raise ValueError(
            f"the clusterer was built for another clustering config ({fields}); build it from "
            f"this config (factutil.cluster.make_clusterer(config)) or pass the config it was "
            f"built with"
        )


def _compute(
    groups: GroupsInput, config: FactUtilConfig, clusterer: Clusterer | None,
    on_invalid_group: str, work: Any = None,
) -> ProcessAdvantages:
    started = clock = time.perf_counter()
    warnings: list[str] = []
    timings: dict[str, float] = {}

    def warn(message: str, category: type[Warning] | None = None) -> None:
        """One warning of the step, counted: logged, or through Python's warnings as ``category``
        (their filters apply), shown on one line with no source line."""
        warnings.append(message)
        if category is None:
            logger.warning(message)
        else:
            python_warnings.warn_explicit(message, category, "factutil", 0, module="factutil",
                                          registry=globals().setdefault("__warningregistry__", {}))

    def lap(stage: str) -> None:  # the seconds since the previous stage ended
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = now - clock
        clock = now

    if on_invalid_group not in ("raise", "skip"):
        raise ValueError(f"on_invalid_group must be 'raise' or 'skip', got {on_invalid_group!r}")
    batch, skipped = load_groups(groups, skip_invalid=on_invalid_group == "skip")
    if skipped:
        warn(one_warning([f"group {uid!r} skipped: {reason}" for uid, reason in skipped.items()]))
    lap("load")

    # 1. Outcomes and the fact texts of every rollout (docs/method.md §1, §2.1).
    prep = prepare(batch, config, warn)
    lap("prepare")

    # 2. Clusters (docs/method.md §2).
    clusterer = clusterer if clusterer is not None else make_clusterer(config)
    work_metrics: dict[str, float] = {}
    if isinstance(clusterer, SemanticClusterer):  # its warnings are the step's
        given = None  # the work metrics are logged every step, 0 without work
        work_metrics = dict.fromkeys(("work_ignored", "work_unreadable", "work_other_device"), 0.0)
        if work is not None:
            clock = time.perf_counter()
            embedder = clusterer.embedder
            given, work_metrics, work_warnings = read_work(
                work, fit_key(config, embedder.name), device_type(embedder), clusterer.dims,
                same_device=config.prepared_device == "same")
            for message in work_warnings:
                warn(message)
            lap("work")
        texts = prep.texts if config.facts == "asserted" else None  # else passage keys
        labels, cluster_metrics = clusterer.cluster(prep.facts, warn, given, texts)
    else:
        if work is not None:
            items = work_items(work)
            work_metrics["work_ignored"] = float(sum(item is not None for item in items))
            warn(f"{int(work_metrics['work_ignored'])} work item(s) ignored: "
                 f"{type(clusterer).__name__} takes none")
        labels = clusterer.cluster_batch(prep.facts)  # any Clusterer: labels, then its metrics
        cluster_metrics = dict(clusterer.metrics)
    lap("cluster")

    # 3. Utilities of every cluster (docs/method.md §3).
    util = batch_utilities(
        labels, prep.occurrence_row, prep.occurrence_step, prep.occurrence_fact,
        np.asarray(prep.success, dtype=np.float64), prep.rank, prep.rollout_starts,
        config.epsilon, config.prior, config.uniform_groups, config.utility,
    )
    if util.prior_risk:
        warn(PRIOR_RISK, PriorRiskWarning)
    lap("utility")

    # 4. Potentials, shaping, back-credit and penalties, every rollout at once (docs/method.md §4).
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
        kinds, gain, added, repeated, gamma=config.gamma, alpha=config.alpha,
        invalid_penalty=config.invalid_penalty,
        repeat_search_penalty=config.repeat_search_penalty,
        empty_store_answer_penalty=config.empty_store_answer_penalty,
    )
    lap("shaping")

    # 5. Advantages per group (docs/method.md §5), then the per-action columns over every input action.
    reward = np.asarray(prep.reward, dtype=np.float64)
    a_out = segment_normalize(reward, prep.rollout_starts, config.norm_eps, config.norm_by_std)
    process_reward = parts.process_reward[action_row, action_step]
    a_proc = process_reward  # process_norm="none": the process reward itself (Eq. 14)
    if config.process_norm == "group":
        a_proc = segment_normalize(process_reward, starts[prep.rollout_starts] if rows else starts,
                                   config.norm_eps, True)
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
    lap("advantage")

    with np.errstate(over="ignore"):
        advantages = columns["advantage"].astype(np.float32)
    keys = [(group.uid, rollout["rollout_id"]) for group in batch for rollout in group.rollouts]
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
    }
    metrics.update({f"time_{name}_s": seconds for name, seconds in timings.items()})
    metrics["groups_uniform_zeroed"] = float(util.uniform_zeroed)
    metrics["groups_uniform_share"] = util.groups_uniform / len(batch) if batch else 0.0
    metrics["prior_group"] = float(config.prior == "group")  # which prior ran: 0 beta, 1 group
    metrics["searches_repeated"] = float(len(prep.repeated_row))
    if config.facts == "retrieved":
        names = ("observations_unsplit", "passages_cut", "passages_empty", "observations_unread")
        metrics.update(zip(names, map(float, prep.passages_dropped)))
        unsplit, cut, empty, unread = prep.passages_dropped
        if np.any(prep.kinds == ASSERT):
            warn(ASSERTS_UNCREDITED, UserWarning)
        if unsplit or cut or empty or unread:
            warn(f"search observations (docs/method.md §9): {unsplit} matched no passage layout and "
                 f"count as one passage each; {cut} passage(s) cut short and {empty} empty dropped; "
                 f"{unread} followed a turn read as no search (an invalid action) and were not read")
    if metrics["answers_empty_store"] and not len(prep.occurrence_fact):  # no fact in the step
        warn(_NO_FACTS[config.facts].format(int(metrics["answers_empty_store"])))
    metrics["groups_gathered"] = float(sum(group.gathered for group in batch))
    metrics["groups_single_rollout"] = float(sum(len(group.rollouts) == 1 for group in batch))
    metrics["golds_normalized_empty"] = float(prep.golds_normalized_empty)
    metrics["groups_skipped"] = float(len(skipped))
    metrics.update({f"cluster_{name}": value
                    for name, value in {**cluster_metrics, **work_metrics}.items()})
    metrics["warnings"] = float(len(warnings))  # every warning of the step, the last included
    records = Records(batch, config, prep, util, a_out, keys, offsets)
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

