"""What every trainer adapter shares: one batch call with per-group fallback, and its glue.

An adapter (verl, OpenRLHF, TRL, or a new one) keeps only what its trainer decides: where the
rollouts, rewards and token spans of a batch are, and how the values go back onto its tensors.
Everything else is here, once, with no trainer import:

- :func:`score_batch`: turn each group into rollout dicts (a group that cannot be, raising
  :class:`Unscorable`, keeps the trainer's own advantages), call
  :func:`factutil.compute_process_advantages` once for the batch, and return each rollout's
  per-action values with every group that fell back and why;
- :func:`trainer_rollout`: one rollout dict from a trainer's values (gold answers from any
  trainer value by :func:`factutil.metrics.golden_answers_from`, a reward that must be finite);
- action rows: :func:`action_row` (the core's dict form of a parsed action, what rollouts carry)
  and :func:`fixed_key_row` / :func:`row_of_fixed_keys` (the same action with the same keys
  always, for trainers that store per-row fields column by column);
- token spans: :func:`checked_spans` (``[start, end)`` pairs a rollout recorded) and the scatter
  functions of :mod:`factutil.advantages`, re-exported;
- :func:`batch_metrics` and :func:`warn_fallback`: the ``factutil/*`` metrics of a step and the
  one warning that names the groups which kept the trainer's advantages;
- per-fact work made in the rollout workers (docs/decisions.md, ``prepare_in_workers``):
  :class:`FactPreparer` makes each rollout's :class:`~factutil.workers.FactWork` there (the facts
  that worker has not shipped before), the rollout's fields carry it under :data:`WORK_KEY`,
  and :func:`score_batch` hands the batch's items to the core (``work=``), which takes what fits
  and computes the rest, with the same values bit for bit.

A group that cannot be scored is never a crash and never a NaN: it keeps the trainer's outcome-only
advantage, is counted in ``factutil/groups_fallback`` and named in one warning per step.
"""

from __future__ import annotations

import base64
import logging
import math
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
from cachetools import LRUCache

from factutil import api
from factutil.advantages import (
    mask_spans,
    scatter_rows_to_turns,
    scatter_to_spans,
    scatter_to_turns,
    turns_problem,
)
from factutil.cluster import make_clusterer
from factutil.config import FactUtilConfig
from factutil.load import action_row
from factutil.metrics import golden_answers_from
from factutil.result import ProcessAdvantages
from factutil.workers import FactWork, make_work, triples_of

__all__ = [
    "FIXED_ACTION_KEYS",
    "WORK_KEY",
    "BatchScore",
    "FactPreparer",
    "Unscorable",
    "action_row",
    "batch_metrics",
    "checked_spans",
    "fixed_key_row",
    "golden_answers_from",
    "mask_spans",
    "prepares_in_workers",
    "row_of_fixed_keys",
    "scatter_rows_to_turns",
    "scatter_to_spans",
    "scatter_to_turns",
    "score_batch",
    "trainer_rollout",
    "turns_problem",
    "warn_fallback",
]

K = TypeVar("K", bound=Hashable)


class Unscorable(Exception):
    """A group that cannot be scored: it keeps the trainer's own advantages. The message says
    why (it is the group's fallback reason)."""


@dataclass
class BatchScore(Generic[K]):
    """What :func:`score_batch` returns.

    Attributes:
        result: the core's result for the groups that were scored; None when none was or the
            call failed.
        values: ``(uid, rollout_id)`` -> float64 per-action values of the column asked for, in
            action order (views into ``result``); empty when ``result`` is None.
        fallback: group key -> why that group keeps the trainer's advantages (its build raised
            :class:`Unscorable`, the core skipped it, or the call failed). Adapters add the
            groups whose values they cannot place.
        groups: how many groups the batch has.
        error: the exception of the core call, None when it did not raise.
        shipped: work items given to the core (the core may still ignore some: its
            ``cluster_work_ignored`` and ``cluster_work_unreadable``); None when no work was
            to come.
        unshipped: items that were to come and did not (a worker's failure: the step computed
            their facts); None when no work was to come.
    """

    result: ProcessAdvantages | None
    values: dict[tuple[str, str], np.ndarray]
    fallback: dict[K, str] = field(default_factory=dict)
    groups: int = 0
    error: Exception | None = None
    shipped: int | None = None
    unshipped: int | None = None


def score_batch(
    groups: Iterable[K],
    build: Callable[[K], Sequence[Mapping[str, Any]]],
    config: FactUtilConfig,
    *,
    clusterer: Any = None,
    column: str = "advantage",
    scorer: Callable[..., ProcessAdvantages] | None = None,
    work: Sequence[Any] | None = None,
) -> BatchScore[K]:
    """Score a trainer's batch in one core call; a group that cannot be scored falls back alone.

    Args:
        groups: the batch's group keys (any hashable: a uid string, a group number), in the order
            the rollouts go to the core.
        build: ``build(key)`` -> that group's rollout dicts (docs/method.md §8; each ``uid``
            must be ``str(key)``, e.g. from :func:`trainer_rollout`); raises :class:`Unscorable`
            for a group that cannot be scored.
        config: the method's parameters.
        clusterer: passed on to :func:`factutil.compute_process_advantages` (reuse one across
            steps to keep its caches).
        column: the ``action_columns`` key returned per rollout: ``"advantage"`` (A = A_out +
            omega * A_proc, for a trainer whose advantages are replaced) or
            ``"process_advantage"`` (A_proc, for one that adds omega * A_proc to its own).
        scorer: the core call, ``compute_process_advantages`` when None (looked up at call time).

        work: the batch's per-fact work from its rollout workers, one item per rollout that
            was to bring some: a :class:`~factutil.workers.FactWork`, its bytes or their base64
            text (:meth:`FactPreparer.text`), or None (none came); passed on as the core's
            ``work``. Work that does not fit or cannot be read costs only time: the core
            computes those facts itself.

    Returns:
        :class:`BatchScore`. The core runs with ``on_invalid_group="skip"``, so a group that
        fails its validation is in ``fallback`` with the core's reason. When the core call raises,
        every group built is in ``fallback`` (``"scoring failed: ..."``) and ``error`` holds the
        exception; nothing is raised.
    """
    fallback: dict[K, str] = {}
    rollouts: list[Mapping[str, Any]] = []
    keys: dict[str, K] = {}
    count = 0
    for key in groups:
        count += 1
        try:
            members = build(key)
        except Unscorable as reason:
            fallback[key] = str(reason)
            continue
        rollouts.extend(members)
        keys[str(key)] = key
    score: BatchScore[K] = BatchScore(None, {}, fallback, count)
    if not rollouts:
        return score
    extra: dict[str, Any] = {}
    if work is not None:
        items = list(work)
        score.unshipped = sum(item is None for item in items)
        score.shipped = len(items) - score.unshipped
        # "" is a preparer's text for a rollout whose facts all went out before: nothing to read.
        extra["work"] = [_work_form(item) for item in items if item is not None and item != ""]
    call = scorer if scorer is not None else api.compute_process_advantages
    try:
        result = call(rollouts, config, clusterer=clusterer, on_invalid_group="skip", **extra)
    except Exception as error:  # noqa: BLE001 - a bad batch never stops training
        score.error = error
        for key in keys.values():
            fallback.setdefault(key, f"scoring failed: {type(error).__name__}: {error}")
        return score
    for uid, reason in result.skipped.items():
        fallback[keys.get(uid, uid)] = reason
    score.result = result
    score.values = result.per_rollout(column)
    return score


def _work_form(item: Any) -> Any:
    """A shipped work item as the core takes it: base64 text as its bytes (text that is not
    base64 as ``b""``, which the core counts unreadable); anything else as it is."""
    if isinstance(item, str):
        try:
            return base64.b64decode(item.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
            return b""
    return item


def trainer_rollout(
    *,
    name: str,
    uid: str,
    rollout_id: str,
    question: Any,
    golden_answers: Any,
    actions: list[Any],
    reward: float | None,
) -> dict[str, Any]:
    """One rollout dict (docs/method.md §8) from a trainer's values.

    Args:
        name: how the fallback reason names the rollout (``"row 3"``, ``"trajectory 'q_0'"``).
        uid: the group's key as a string; rollout_id: the rollout's, unique in its group.
        question: the question (any value; its text is used, None gives ``""``).
        golden_answers: any trainer value holding the gold answers
            (:func:`factutil.metrics.golden_answers_from`).
        actions: the rollout's action dicts, in order.
        reward: the outcome reward R; None leaves it to the core (F1 of the answer).

    Returns:
        ``{"uid", "question", "golden_answers", "rollout_id", "actions"[, "reward"]}``.

    Raises:
        Unscorable: no gold answer in ``golden_answers``, or a reward that is not finite.
    """
    answers = golden_answers_from(golden_answers)
    if not answers:
        raise Unscorable(f"{name} has no golden_answers (got {golden_answers!r})"[:300])
    rollout: dict[str, Any] = {
        "uid": uid,
        "question": question if isinstance(question, str) else str(question or ""),
        "golden_answers": answers,
        "rollout_id": rollout_id,
        "actions": actions,
    }
    if reward is not None:
        reward = float(reward)
        if not math.isfinite(reward):
            raise Unscorable(f"{name} has a non-finite reward {reward}")
        rollout["reward"] = reward
    return rollout


FIXED_ACTION_KEYS = ("kind", "query", "triples", "answer", "error")
"""The keys of :func:`fixed_key_row`, every action the same."""


def fixed_key_row(action: Any) -> dict[str, Any]:
    """A parsed action with the same keys always (for trainers that store fields per column).

    Args:
        action: a search, assert, answer or invalid action model.

    Returns:
        ``{"kind": "search"|"assert"|"answer"|"invalid", "query": str|None,
        "triples": [[s, r, o], ...]|None, "answer": str|None, "error": str|None}``.

    Raises:
        TypeError: ``action`` is not an action model.
    """
    row = action_row(action)
    fields: dict[str, Any] = dict.fromkeys(FIXED_ACTION_KEYS)
    kind = row["action"]
    fields["kind"] = kind
    if kind == "search":
        fields["query"] = row["query"]
    elif kind == "assert":
        fields["triples"] = row["triples"]
    elif kind == "answer":
        fields["answer"] = row["answer"]
    else:
        fields["error"] = row["reason"]
    return fields


def row_of_fixed_keys(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The action dict (docs/method.md §8 item) of a :func:`fixed_key_row` dict.

    A known kind whose field is missing or of the wrong type is an invalid action (the agent's
    format error, penalised like any other); an ``assert`` with an empty part becomes one through
    the core's own input rules.

    Raises:
        Unscorable: ``fields`` is not a mapping or names no known kind (a data error: the
            group falls back).
    """
    if not isinstance(fields, Mapping):
        raise Unscorable(f"action must be a mapping, got {type(fields).__name__}")
    kind = fields.get("kind")
    if kind == "search" and isinstance(fields.get("query"), str):
        return {"action": "search", "query": fields["query"]}
    if kind == "assert" and isinstance(fields.get("triples"), (list, tuple)):
        return {"action": "assert", "triples": [list(t) for t in fields["triples"]]}
    if kind == "answer" and isinstance(fields.get("answer"), str):
        return {"action": "answer", "answer": fields["answer"]}
    if kind in ("search", "assert", "answer", "invalid"):
        reason = fields.get("error") or f"malformed {kind} action"
        return {"action": "invalid", "raw": "", "reason": str(reason)}
    raise Unscorable(f"unknown action kind {kind!r}")


def checked_spans(given: Any, actions: int) -> np.ndarray:
    """A rollout's recorded ``[start, end)`` token spans, one per action, checked.

    Args:
        given: a sequence of ``[start, end)`` pairs of ints.
        actions: how many actions the rollout has.

    Returns:
        int64 (actions, 2).

    Raises:
        ValueError: not pairs of ints with ``0 <= start <= end``, another count than
            ``actions``, or spans out of order or overlapping (the message says which).
    """
    pairs = list(given) if isinstance(given, (list, tuple)) else None
    if pairs is None or not all(
        isinstance(pair, (list, tuple))
        and len(pair) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
        and 0 <= pair[0] <= pair[1]
        for pair in pairs
    ):
        raise ValueError(
            f"spans must be [start, end) pairs of ints with 0 <= start <= end, got {given!r}"[:300]
        )
    if len(pairs) != actions:
        raise ValueError(f"{len(pairs)} spans for {actions} actions")
    spans = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    if np.any(spans[1:, 0] < spans[:-1, 1]):
        raise ValueError(
            f"spans must be in order and must not overlap, got {spans.tolist()}"
        )
    return spans


def batch_metrics(score: BatchScore[Any]) -> dict[str, float]:
    """The ``factutil/*`` metrics of one trainer step, every value a finite float.

    Args:
        score: the step's :class:`BatchScore`, its ``fallback`` completed by the adapter (the
            groups whose values it could not place).

    Returns:
        ``factutil/groups``, ``groups_scored``, ``groups_fallback`` (the trainer's groups); with
        a result, each of its other numeric ``metrics`` as ``factutil/<name>`` (stage times ``time_<stage>_s`` as
        ``factutil/time_<stage>_ms``, in milliseconds) and ``factutil/utility_spread`` (max -
        min utility); when the workers were to ship their work, ``factutil/prepared_shipped``
        and ``factutil/prepared_unshipped`` (work items, :class:`BatchScore`'s ``shipped`` and
        ``unshipped``) next to the core's ``factutil/cluster_work_facts``,
        ``cluster_work_ignored`` and ``cluster_work_unreadable``.
    """
    result, groups, fallback = score.result, score.groups, score.fallback
    metrics: dict[str, float] = {}
    if result is not None:
        found = result.metrics
        for name, value in found.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if name.startswith("time_") and name.endswith("_s"):
                metrics[f"factutil/{name[:-2]}_ms"] = 1000.0 * float(value)
            else:
                metrics[f"factutil/{name}"] = float(value)
        metrics["factutil/utility_spread"] = float(
            found.get("utility_max", 0.0) - found.get("utility_min", 0.0)
        )
    if score.shipped is not None:
        metrics["factutil/prepared_shipped"] = float(score.shipped)
        metrics["factutil/prepared_unshipped"] = float(score.unshipped or 0)
    # the trainer's groups, not only those that reached the core (its own "groups" metric)
    metrics["factutil/groups"] = float(groups)
    metrics["factutil/groups_scored"] = float(groups - len(fallback))
    metrics["factutil/groups_fallback"] = float(len(fallback))
    return {name: value if math.isfinite(value) else 0.0 for name, value in metrics.items()}


def warn_fallback(
    log: logging.Logger,
    fallback: Mapping[Any, str],
    kept: str,
    metric: str,
    *,
    every: str | None = None,
    error: BaseException | None = None,
) -> None:
    """The step's one warning naming the groups that kept the trainer's advantages.

    Args:
        log: the adapter's logger.
        fallback: group -> reason (nothing is logged when empty and ``every`` is None).
        kept: what they kept (``"verl's GRPO advantages"``).
        metric: the metric that counts them (``"factutil/groups_fallback"``).
        every: when the whole batch kept them, why (the message then says "every group").
        error: the exception behind the fallback, logged with its traceback.
    """
    if not fallback and every is None:
        return
    reasons = [f"group {group!r}: {reason}" for group, reason in sorted(fallback.items())]
    log.warning(
        "factutil: %s kept %s (%s): %s%s",
        "every group" if every is not None else f"{len(fallback)} group(s)",
        kept,
        metric,
        every if every is not None else "; ".join(reasons[:3]),
        " ..." if every is None and len(reasons) > 3 else "",
        exc_info=error,
    )


WORK_KEY = "work"
"""The key of an adapter's per-rollout fields holding the work its rollout worker made
(:class:`FactPreparer`'s :class:`~factutil.workers.FactWork`, or its base64 text)."""


def prepares_in_workers(config: FactUtilConfig) -> bool:
    """Whether the rollout workers make the rollouts' per-fact work (``config.prepare_in_workers``;
    None: in semantic mode only, exact mode having no embedding or analysis to ship)."""
    if config.prepare_in_workers is not None:
        return bool(config.prepare_in_workers)
    return config.mode == "semantic"


class FactPreparer:
    """Per-fact work made where rollouts are generated (a rollout worker), one
    :class:`~factutil.workers.FactWork` per call, with only the facts this preparer has not
    shipped before.

    One per worker process and config: it owns the clusterer (its embedder loads on first use, on
    ``config.embedding_device``) and remembers the facts it shipped (an LRU of
    ``config.cache_max_entries``): the trainer's clusterer keeps them across steps, and computes
    any it lacks, so the numbers never depend on what was shipped. Calls from several threads
    run one at a time; the rollouts that wait meanwhile are embedded together by the next call
    (a fixed-shape pass costs a rollout's few texts alone many times more per text).

    Args:
        config: the run's :class:`FactUtilConfig` (the trainer's: work made for another
            clustering fit is ignored by the trainer).
        log: where a failure is reported (once).
        clusterer: the clusterer whose embedder and caches to use; None: made from ``config``
            on the first call.
    """

    def __init__(self, config: FactUtilConfig, log: logging.Logger | None = None,
                 clusterer: Any = None):
        self.config = config
        self.log = log or logging.getLogger("factutil")
        self.failures = 0
        self.coalesced = 0  # rollouts whose facts were embedded in another rollout's call
        self._clusterer: Any = clusterer
        self._shipped: LRUCache = LRUCache(max(config.cache_max_entries, 1))
        self._lock = threading.Lock()
        self._waiting: list[Any] = []  # rollouts whose call waits for the lock
        self._waiting_lock = threading.Lock()

    def text(self, facts: Any) -> str | None:
        """:meth:`__call__`'s work as base64 text of its bytes (:meth:`FactWork.to_bytes`), for
        fields that must stay JSON (OpenRLHF's payload; :func:`score_batch` takes both forms):
        None when it failed, ``""`` when it holds no fact (nothing to ship)."""
        work = self(facts)
        if work is None or not len(work):
            return None if work is None else ""
        return base64.b64encode(work.to_bytes()).decode("ascii")

    def __call__(self, facts: Any) -> FactWork | None:
        """The per-fact work of one rollout's facts that this preparer has not shipped before.

        Args:
            facts: the rollout's actions (action dicts or models), a rollout dict, or anything
                else :func:`~factutil.workers.triples_of` reads.

        Returns:
            a :class:`~factutil.workers.FactWork`; of no fact when every fact of the rollout was
            shipped before (an adapter need not ship it); None when the work failed (counted in
            ``failures``, logged once): the trainer's step then does it. Never raises.
        """
        try:
            with self._waiting_lock:
                self._waiting.append(facts)
            with self._lock:
                if self._clusterer is None:
                    self._clusterer = make_clusterer(self.config)
                with self._waiting_lock:
                    waiting, self._waiting = self._waiting, []
                if len(waiting) > 1:
                    self._warm(waiting)
                shipped = self._shipped
                new = [key for key in dict.fromkeys(triples_of(facts, self.config.max_turns))
                       if key not in shipped]
                work = make_work(new, self.config, self._clusterer)
                for key in new:
                    shipped[key] = True
                return work
        except Exception:  # a rollout never fails for work the trainer can redo
            self.failures += 1
            if self.failures == 1:
                self.log.warning("factutil: a rollout's work failed in the rollout worker; the "
                                 "trainer's step does it instead", exc_info=True)
            return None

    def _warm(self, waiting: list[Any]) -> None:
        """Embed and analyse the facts of every waiting rollout in one call, into the
        clusterer's caches (a rollout that cannot be read is left to its own call)."""
        parts = []
        for facts in waiting:
            try:
                parts += triples_of(facts, self.config.max_turns)
            except (TypeError, ValueError):
                continue
        parts = [key for key in dict.fromkeys(parts) if key not in self._shipped]
        if parts:
            make_work(parts, self.config, self._clusterer)
            self.coalesced += len(waiting) - 1
