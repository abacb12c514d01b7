"""verl batch -> factutil groups -> per-token advantages (docs/method.md §5). The adapter's only logic.

verl hands the trainer one row per *sample*. Two layouts are read:

- **action layout** (the ``factagent`` loop): one row per action. ``extra_fields["factutil"]``
  holds ``trajectory_id``, ``step``, ``action`` (``kind``, ``query``, ``triples``, ``answer``,
  ``error``), ``question`` and ``golden_answers``; the row's ``response_mask`` covers the action's
  tokens.
- **span layout** (one row per rollout, e.g. a ReAct-style loop): ``extra_fields["factutil"]``
  holds ``actions`` (a list of such action dicts, in order) with ``question`` and
  ``golden_answers``, and, best, ``spans``: one ``[start, end)`` token range per action, as the
  loop that wrote the row knows them (:func:`factutil.advantages.scatter_to_spans`). Without
  ``spans`` the k-th run of 1s in ``response_mask`` is the k-th action
  (:func:`factutil.advantages.scatter_rows_to_turns`), which holds only when there is exactly one
  run per action: fewer runs (two actions with no observation between them, a truncated row) and
  explicit spans that run past the row, leave model tokens outside them or hold none cannot be
  placed unambiguously, so the group falls back (counted in ``factutil/groups_fallback_turns`` too).

With ``algorithm.factutil.prepare_in_workers`` (default: on in semantic mode with asserted facts) a trajectory's
last row may also hold ``work``: the per-fact work its agent-loop worker made
(:class:`factutil.preparer.FactPreparer`: a work item, :mod:`factutil.workers`, of the facts
that worker had not shipped before). The batch's items go to the core (``work=``), which checks
each alone, takes the vectors of those that fit into its clusterer's cache and computes the rest: the advantages are the same either
way (``factutil/prepared_shipped``, ``prepared_unshipped``, ``cluster_work_*`` count them).

Rows are grouped by verl's ``uid`` (one question), rollouts by trajectory (the ``{uid}_{session}``
part of verl's V1 row key ``{uid}_{session}_{index}``, else ``trajectory_id``). The outcome reward
R of a rollout is the token sum of its *last* row's rewards, exactly what verl's GRPO reads. Then
one call of :func:`factutil.compute_process_advantages` gives every action's A = A_out + Ω·A_proc,
which is written on every token of that action.

A group that cannot be scored (rows without factutil fields, mixed layouts, a failed validation,
span-layout turns that cannot be placed, any exception of the call) keeps verl's GRPO outcome
advantage, is counted in ``factutil/groups_fallback`` and logged once: never NaN, never a crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from factutil.api import ProcessAdvantages
from factutil.cluster import Clusterer
from factutil.integration import (
    FIXED_ACTION_KEYS,
    Unscorable,
    batch_metrics,
    checked_spans,
    fixed_key_row,
    row_of_fixed_keys,
    scatter_rows_to_turns,
    scatter_to_spans,
    score_batch,
    trainer_rollout,
    turns_problem,
    warn_fallback,
)
from factutil.preparer import WORK_KEY, prepares_in_workers
from factutil.schema import FactUtilConfig

logger = logging.getLogger("factutil_verl")

EXTRA_KEY = "factutil"
"""The key of ``extra_fields`` that holds factutil's per-row information."""

ACTION_FIELDS = FIXED_ACTION_KEYS
action_fields = fixed_key_row
"""A parsed action as the flat dict stored in ``extra_fields``: :func:`factutil.integration.fixed_key_row`."""
action_item = row_of_fixed_keys
"""A stored action dict as the core's action dict: :func:`factutil.integration.row_of_fixed_keys`."""


class _Unplaceable(Unscorable):
    """Internal: a span-layout row whose action tokens cannot be told apart."""


@dataclass
class FactAgentAdvantages:
    """Result of :func:`compute_factagent_advantages`.

    Attributes:
        advantages: float32 (B, T): every response token of an action carries A_{i,t}; tokens
            outside the response mask are 0; fallback groups carry verl's GRPO advantage.
        metrics: ``factutil/*`` floats for verl's logger (counts, clusters, utility spread, share
            of non-zero shaping, milliseconds per stage).
        fallback: uid -> reason for every group that kept verl's GRPO advantage.
        result: factutil's full result (None when the call itself failed).
    """

    advantages: torch.Tensor
    metrics: dict[str, float]
    fallback: dict[str, str] = field(default_factory=dict)
    result: ProcessAdvantages | None = None


@dataclass
class _Plan:
    """Where the values of one rollout go: its rows, in action order."""

    uid: str
    rollout_id: str
    rows: list[int]
    span: bool
    spans: np.ndarray | None = None  # span layout: int64 (n, 2) [start, end) per action, if given


def _trajectory_of(key: str, uid: str, info: Mapping[str, Any]) -> str:
    # verl V1 keys rows "{uid}_{session_id}_{index}"; its own GRPO groups sessions by that prefix.
    prefix = f"{uid}_"
    if key.startswith(prefix) and key[len(prefix) :].count("_") == 1:
        return key.rsplit("_", 1)[0]
    trajectory = info.get("trajectory_id")
    return str(trajectory) if trajectory is not None else key


def _group_rollouts(
    uid: str,
    rows: list[int],
    keys: Sequence[str],
    infos: Sequence[Mapping[str, Any] | None],
    rewards: np.ndarray,
) -> tuple[list[dict[str, Any]], list[_Plan]]:
    """The docs/method.md §8 rollouts of one group and where their values go; raises Unscorable."""
    by_trajectory: dict[str, list[int]] = {}
    for row in rows:
        info = infos[row]
        if info is None:
            raise Unscorable(f"row {keys[row]!r} has no extra_fields[{EXTRA_KEY!r}]")
        by_trajectory.setdefault(_trajectory_of(keys[row], uid, info), []).append(row)
    rollouts: list[dict[str, Any]] = []
    plans: list[_Plan] = []
    for trajectory, members in by_trajectory.items():
        spans = [isinstance(infos[row].get("actions"), list) for row in members]
        if any(spans) and not all(spans):
            raise Unscorable(f"trajectory {trajectory!r} mixes the action and span layouts")
        explicit = None
        if all(spans):
            if len(members) != 1:
                raise Unscorable(
                    f"trajectory {trajectory!r}: span layout needs one row, got {len(members)}"
                )
            ordered = members
            actions = [action_item(item) for item in infos[members[0]]["actions"]]
            explicit = _explicit_spans(infos[members[0]].get("spans"), len(actions), trajectory)
        else:
            steps = []
            for row in members:
                step = infos[row].get("step")
                if not isinstance(step, int) or isinstance(step, bool):
                    raise Unscorable(f"row {keys[row]!r}: step must be an int, got {step!r}")
                steps.append(step)
            if len(set(steps)) != len(steps):
                raise Unscorable(f"trajectory {trajectory!r} repeats a step: {sorted(steps)}")
            ordered = [row for _, row in sorted(zip(steps, members))]
            actions = [action_item(infos[row].get("action")) for row in ordered]
        first = infos[ordered[0]]
        rollouts.append(
            trainer_rollout(
                name=f"trajectory {trajectory!r}",
                uid=uid,
                rollout_id=trajectory,
                question=first.get("question"),
                golden_answers=first.get("golden_answers"),
                actions=actions,
                reward=float(rewards[ordered[-1]]),
            )
        )
        plans.append(_Plan(uid, trajectory, ordered, span=all(spans), spans=explicit))
    return rollouts, plans


def _explicit_spans(given: Any, actions: int, trajectory: str) -> np.ndarray | None:
    """The span layout's ``spans`` as int64 (n, 2), None when absent; raises Unscorable."""
    if given is None:
        return None
    try:
        return checked_spans(given, actions)
    except ValueError as error:
        raise _Unplaceable(f"trajectory {trajectory!r}: {error}") from None


def _factutil_info(extra: Any) -> Mapping[str, Any] | None:
    if isinstance(extra, Mapping) and isinstance(extra.get(EXTRA_KEY), Mapping):
        return extra[EXTRA_KEY]
    return None


def compute_factagent_advantages(
    *,
    keys: Sequence[str],
    uids: Sequence[str],
    extra_fields: Sequence[Any],
    response_mask: torch.Tensor,
    token_level_rewards: torch.Tensor,
    grpo_advantages: torch.Tensor | None,
    config: FactUtilConfig,
    clusterer: Clusterer | None = None,
    is_padding: Sequence[bool] | None = None,
) -> FactAgentAdvantages:
    """FactAgent advantages for one verl batch (docs/method.md §5), GRPO fallback per group.

    Args:
        keys: B row keys (verl V1: ``{uid}_{session_id}_{index}``).
        uids: B prompt uids (verl's ``uid``); rows of one uid form one group.
        extra_fields: B ``extra_fields`` dicts (or None) from the agent loop.
        response_mask: (B, T) int/bool, 1 on the model's tokens.
        token_level_rewards: (B, T) float; a rollout's R is the sum over its last row.
        grpo_advantages: (B, T) float, verl's GRPO advantages of the same batch: kept for padding
            rows and for groups that cannot be scored. None: those rows are left 0, to be filled
            later by :func:`with_grpo_fallback` (a step scored before verl's GRPO ran).
        config: the method's parameters (``algorithm.factutil``).
        clusterer: reused across steps when given (e.g. to keep an embedding cache).
        is_padding: B flags; verl's synthetic padding rows are left as they are.

    Returns:
        :class:`FactAgentAdvantages`; ``advantages`` is float32 (B, T) and finite.
    """
    started = time.perf_counter()
    batch_size = len(keys)
    if not (len(uids) == len(extra_fields) == batch_size == response_mask.shape[0]):
        raise ValueError(
            f"batch parts disagree: {batch_size} keys, {len(uids)} uids, {len(extra_fields)} "
            f"extra_fields, {response_mask.shape[0]} mask rows"
        )
    mask = response_mask.detach().to("cpu").numpy().astype(bool)
    rewards = token_level_rewards.detach().to("cpu").sum(dim=-1).double().numpy()
    out = torch.zeros(mask.shape, dtype=torch.float32)
    padding = list(is_padding) if is_padding is not None else [False] * batch_size
    infos = [_factutil_info(extra) for extra in extra_fields]

    groups: dict[str, list[int]] = {}
    for row in range(batch_size):
        if not padding[row]:
            groups.setdefault(str(uids[row]), []).append(row)

    unplaced: set[str] = set()  # groups whose span-layout action tokens cannot be told apart
    plans: list[_Plan] = []
    work = None
    if prepares_in_workers(config):
        work = [infos[row][WORK_KEY] for row in range(batch_size)
                if not padding[row] and infos[row] is not None and WORK_KEY in infos[row]]

    def build(uid: str) -> list[dict[str, Any]]:
        try:
            group_rollouts, group_plans = _group_rollouts(uid, groups[uid], keys, infos, rewards)
        except _Unplaceable:
            unplaced.add(uid)
            raise
        plans.extend(group_plans)
        return group_rollouts

    batch = score_batch(groups, build, config, clusterer=clusterer, work=work)
    fallback, values, result = batch.fallback, batch.values, batch.result

    scored: dict[str, list[tuple[int, torch.Tensor]]] = {}
    span_plans = [plan for plan in plans if plan.span and plan.uid not in fallback]
    span_tokens = _turn_tokens(span_plans, values, mask, fallback, unplaced)
    for plan, tokens in zip(span_plans, span_tokens):
        if tokens is not None:
            scored.setdefault(plan.uid, []).append((plan.rows[0], torch.from_numpy(tokens)))
    for plan in plans:
        if plan.uid in fallback or plan.span:
            continue
        action_values = values.get((plan.uid, plan.rollout_id))
        try:
            if action_values is None:
                raise Unscorable(f"no result for rollout {plan.rollout_id!r}")
            if len(action_values) != len(plan.rows):
                raise Unscorable(
                    f"rollout {plan.rollout_id!r}: {len(action_values)} values for "
                    f"{len(plan.rows)} rows"
                )
            for row, value in zip(plan.rows, action_values):
                tokens = torch.from_numpy(mask[row].astype(np.float32)) * float(value)
                scored.setdefault(plan.uid, []).append((row, tokens))
        except (Unscorable, ValueError) as reason:
            fallback[plan.uid] = str(reason)
    for uid, writes in scored.items():
        if uid in fallback:
            continue
        if not all(bool(torch.isfinite(tokens).all()) for _, tokens in writes):
            fallback[uid] = "non-finite advantage"
            continue
        for row, tokens in writes:
            out[row] = tokens.to(torch.float32)

    warn_fallback(logger, fallback, "verl's GRPO advantages", error=batch.error)
    metrics = batch_metrics(batch)
    metrics["factutil/groups_fallback_turns"] = float(len(unplaced & fallback.keys()))
    scored_batch = FactAgentAdvantages(out, metrics, fallback, result)
    if grpo_advantages is not None:
        scored_batch.advantages = with_grpo_fallback(scored_batch, grpo_advantages, uids,
                                                     padding)
    metrics["factutil/time_adapter_ms"] = 1000.0 * (time.perf_counter() - started)
    return scored_batch


def grpo_rows(
    scored: FactAgentAdvantages, uids: Sequence[str], is_padding: Sequence[bool] | None = None
) -> torch.Tensor:
    """Which of the batch's B rows keep verl's GRPO values: padding rows and the rows of every
    fallback group; bool (B,)."""
    padding = list(is_padding) if is_padding is not None else [False] * len(uids)
    return torch.tensor([pad or str(uid) in scored.fallback for uid, pad in zip(uids, padding)],
                        dtype=torch.bool)


def with_grpo_fallback(
    scored: FactAgentAdvantages,
    grpo_advantages: torch.Tensor | None,
    uids: Sequence[str],
    is_padding: Sequence[bool] | None = None,
) -> torch.Tensor:
    """The batch's advantages with verl's GRPO values on every row :func:`compute_factagent_advantages`
    did not score (:func:`grpo_rows`); non-finite values become 0.

    Args:
        scored: the result of :func:`compute_factagent_advantages` for the batch (with or without
            its ``grpo_advantages``).
        grpo_advantages: (B, T) float, verl's GRPO advantages of the same batch; None when no
            row keeps them (the trainer then need not read them).
        uids: the batch's B uids; is_padding: its B padding flags (None: none).

    Returns:
        float32 (B, T), finite.

    Raises:
        ValueError: the shapes of ``scored.advantages`` and ``grpo_advantages`` differ, or
            ``grpo_advantages`` is None while a row keeps verl's values.
    """
    keep = grpo_rows(scored, uids, is_padding)
    out = scored.advantages.clone()
    if grpo_advantages is not None:
        grpo = grpo_advantages.detach().to("cpu", torch.float32)
        if tuple(grpo.shape) != tuple(out.shape):
            raise ValueError(f"grpo_advantages has shape {tuple(grpo.shape)}, the scored batch "
                             f"{tuple(out.shape)}")
        out[keep] = grpo[keep]
    elif keep.any():
        raise ValueError(f"grpo_advantages is None, but {int(keep.sum())} row(s) keep verl's "
                         "GRPO values")
    return torch.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def _turn_tokens(
    plans: list[_Plan],
    values: Mapping[tuple[str, str], np.ndarray],
    mask: np.ndarray,
    fallback: dict[str, str],
    unplaced: set[str] | None = None,
) -> list[np.ndarray | None]:
    """Span layout: each action's value on its own tokens, every row without spans at once.

    A row with explicit ``spans`` gets :func:`factutil.advantages.scatter_to_spans`; one without
    gets the k-th run of 1s of its mask per k-th action value
    (:func:`factutil.advantages.scatter_rows_to_turns`), only when there are as many runs as
    actions.

    Args:
        plans: span-layout plans, one row each.
        values: (uid, rollout_id) -> float64 per-action values.
        mask: bool (B, T) response mask of the batch.
        fallback: uid -> reason; a plan with no values, or whose action tokens cannot be placed
            (runs and actions differ in number; spans past the row's end, leaving model tokens
            outside them or holding none), adds its group.
        unplaced: when given, gets the uid of every group whose action tokens cannot be placed.

    Returns:
        per plan, float32 (T,) token values, or None when its group falls back.
    """
    if not plans:
        return []
    found = [values.get((plan.uid, plan.rollout_id)) for plan in plans]
    rows = np.array([plan.rows[0] for plan in plans], dtype=np.int64)
    by_runs = [
        v if v is not None and plan.spans is None else np.zeros(0)
        for plan, v in zip(plans, found)
    ]
    tokens, turns = scatter_rows_to_turns(by_runs, mask[rows])
    result: list[np.ndarray | None] = []
    for i, (plan, action_values) in enumerate(zip(plans, found)):
        if action_values is None:
            fallback.setdefault(plan.uid, f"no result for rollout {plan.rollout_id!r}")
            result.append(None)
            continue
        if plan.spans is None:
            problem = turns_problem(int(turns[i]), len(action_values))
            placed = tokens[i]
            if problem is not None:
                problem += "; give extra_fields['factutil']['spans']"
        else:
            problem, placed = _placed_on_spans(action_values, plan.spans, mask[plan.rows[0]])
        if problem is not None:
            fallback.setdefault(plan.uid, f"rollout {plan.rollout_id!r}: {problem}")
            if unplaced is not None:
                unplaced.add(plan.uid)
            placed = None
        result.append(placed)
    return result


def _placed_on_spans(
    action_values: np.ndarray, spans: np.ndarray, row_mask: np.ndarray
) -> tuple[str | None, np.ndarray | None]:
    """(why the spans do not fit the row, None) or (None, float32 (T,) token values)."""
    length = len(row_mask)
    past = np.flatnonzero(spans[:, 1] > length)
    if len(past):
        start, end = spans[past[0]].tolist()
        return (
            f"action {int(past[0])}'s span [{start}, {end}) runs past the row's {length} tokens "
            "(truncated row)"
        ), None
    covered = np.zeros(length, dtype=bool)
    for start, end in spans.tolist():
        covered[start:end] = True
    if np.any(row_mask & ~covered):
        return "model tokens outside every span", None
    for action, (start, end) in enumerate(spans.tolist()):
        if end > start and not row_mask[start:end].any():  # its credit would land nowhere
            return f"action {action}'s span [{start}, {end}) holds no model token", None
    return None, scatter_to_spans(action_values, spans, length, response_mask=row_mask)
