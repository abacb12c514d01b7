"""What every trainer adapter shares, with no trainer import: one step object and one batch call.

An adapter (verl, OpenRLHF, TRL …) keeps only what its trainer decides: where a batch's
rollouts, rewards and token spans are, and how values go back onto its tensors. A group that
cannot be scored keeps the trainer's advantages, is counted and named in one warning: never a
crash or a NaN."""

from __future__ import annotations

import base64
import logging
import math
import os
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from factutil import api
from factutil.advantages import scatter_rows_to_turns, scatter_to_spans, turns_problem
from factutil.cluster import Clusterer, make_clusterer
from factutil.config import FactUtilConfig
from factutil.errors import number_value, short
from factutil.load import action_row
from factutil.metrics import golden_answers_from
from factutil.report.writer import FOLDER, ReportWriter
from factutil.result import ProcessAdvantages

__all__ = ["FIXED_ACTION_KEYS", "BatchScore", "TrainerStep", "Unscorable", "action_row",
           "batch_metrics", "checked_spans", "fixed_key_row", "golden_answers_from",
           "row_of_fixed_keys", "scatter_rows_to_turns", "scatter_to_spans", "score_batch",
           "trainer_rollout", "turns_problem", "warn_fallback"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Unscorable(Exception):
    """A group that cannot be scored and keeps the trainer's advantages; the message says why."""


@dataclass
class BatchScore(Generic[K]):
    """What :func:`score_batch` returns: the core's ``result`` (None when no group was scored or
    the call failed), ``values`` (``(uid, rollout_id)`` -> float64 per-action values of the
    column asked for), ``fallback`` (group key -> why it keeps the trainer's advantages), the
    batch's ``groups`` count, the core call's ``error``, and the work items ``shipped`` to the
    core and ``unshipped`` (None when no work was to come)."""

    result: ProcessAdvantages | None
    values: dict[tuple[str, str], np.ndarray]
    fallback: dict[K, str] = field(default_factory=dict)
    groups: int = 0
    error: Exception | None = None
    shipped: int | None = None
    unshipped: int | None = None


def score_batch(groups: Iterable[K], build: Callable[[K], Sequence[Mapping[str, Any]]],
                config: FactUtilConfig, *, clusterer: Any = None, column: str = "advantage",
                work: Sequence[Any] | None = None) -> BatchScore[K]:
    """Score a trainer's batch in one core call; a group that cannot be scored falls back alone.

    Args:
        groups: the batch's hashable group keys, in the order the rollouts go to the core.
        build: ``build(key)`` -> that group's rollout dicts (``uid`` ``str(key)``); raises
            :class:`Unscorable` for a group that cannot be scored.
        config, clusterer: the core's (reuse one clusterer across steps: its caches).
        column: the ``action_columns`` key returned: ``"advantage"`` (A, replacing the
            trainer's) or ``"process_advantage"`` (A_proc, added as omega * A_proc).
        work: per rollout whose worker was to make some, a work item (:mod:`factutil.workers`),
            its bytes or base64 text, or None (none came).

    Never raises: a group the core skips is in ``fallback`` with its reason; when the core call
    raises, every group is (``"scoring failed: ..."``).
    """
    fallback: dict[K, str] = {}
    rollouts: list[Mapping[str, Any]] = []
    keys: dict[str, K] = {}
    groups = list(groups)
    for key in groups:
        try:
            members = build(key)
        except Unscorable as reason:
            fallback[key] = str(reason)
            continue
        rollouts.extend(members)
        keys[str(key)] = key
    score: BatchScore[K] = BatchScore(None, {}, fallback, len(groups))
    if not rollouts:
        return score
    items = None if work is None else list(work)
    if items is not None:
        score.unshipped = sum(item is None for item in items)
        score.shipped = len(items) - score.unshipped
        # "" is a preparer's text for a rollout whose facts all went out before: nothing to read.
        items = [_work_form(item) for item in items if item is not None and item != ""]
    try:
        result = api.compute_process_advantages(rollouts, config, clusterer=clusterer,
                                                on_invalid_group="skip", work=items)
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
    """Base64 text as its bytes (``b""``, counted unreadable, when not base64); else as is."""
    if isinstance(item, str):
        try:
            return base64.b64decode(item.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
            return b""
    return item


def trainer_rollout(*, name: str, uid: str, rollout_id: str, question: Any, golden_answers: Any,
                    actions: list[Any], reward: float | None) -> dict[str, Any]:
    """One rollout dict (docs/method.md §8) from a trainer's values: ``name`` names it in a
    fallback reason (``"row 3"``); ``golden_answers``: what
    :func:`~factutil.metrics.golden_answers_from` reads; ``reward``: a number
    (:func:`~factutil.errors.number_value`: numpy and 0-d torch too), None leaves R to the core.
    Raises :class:`Unscorable`: no gold answer, or a reward that is no finite number."""
    answers = golden_answers_from(golden_answers)
    if not answers:
        raise Unscorable(f"{name} has no golden_answers (got {golden_answers!r})"[:300])
    rollout: dict[str, Any] = {
        "uid": uid, "question": question if isinstance(question, str) else str(question or ""),
        "golden_answers": answers, "rollout_id": rollout_id, "actions": actions,
    }
    if reward is not None:
        number = number_value(reward)
        if number is None or not math.isfinite(number):
            raise Unscorable(f"{name} has a reward that is no finite number: {short(reward)}")
        rollout["reward"] = number
    return rollout


FIXED_ACTION_KEYS = ("kind", "query", "triples", "answer", "error", "observation")
"""The keys of :func:`fixed_key_row`, every action the same."""


def fixed_key_row(action: Any) -> dict[str, Any]:
    """A parsed action model as a dict of :data:`FIXED_ACTION_KEYS` (for trainers that store
    fields per column), None where the kind has none. Raises TypeError for anything else."""
    row = action_row(action)
    fields: dict[str, Any] = dict.fromkeys(FIXED_ACTION_KEYS)
    fields["kind"] = kind = row["action"]
    name = {"search": "query", "assert": "triples", "answer": "answer"}.get(kind)
    fields[name or "error"] = row[name or "reason"]
    if kind == "search":
        fields["observation"] = row["observation"]
    return fields


def row_of_fixed_keys(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The action dict of a :func:`fixed_key_row` dict; a known kind whose field is missing or
    mistyped is an invalid action (the agent's format error). Raises :class:`Unscorable` when
    ``fields`` is not a mapping or names no known kind."""
    if not isinstance(fields, Mapping):
        raise Unscorable(f"action must be a mapping, got {type(fields).__name__}")
    kind = fields.get("kind")
    if kind == "search" and isinstance(fields.get("query"), str):
        search = {"action": "search", "query": fields["query"]}
        if isinstance(fields.get("observation"), str):
            search["observation"] = fields["observation"]
        return search
    if kind == "assert" and isinstance(fields.get("triples"), (list, tuple)):
        return {"action": "assert", "triples": [list(t) for t in fields["triples"]]}
    if kind == "answer" and isinstance(fields.get("answer"), str):
        return {"action": "answer", "answer": fields["answer"]}
    if kind in ("search", "assert", "answer", "invalid"):
        reason = fields.get("error") or f"malformed {kind} action"
        return {"action": "invalid", "raw": "", "reason": str(reason)}
    raise Unscorable(f"unknown action kind {kind!r}")


def checked_spans(given: Any, actions: int) -> np.ndarray:
    """A rollout's ``[start, end)`` token spans, one per action, as int64 (actions, 2); raises
    ValueError for pairs not of ints with ``0 <= start <= end < 2**63``, a wrong count, or
    overlaps."""
    if not isinstance(given, (list, tuple)) or not all(
            isinstance(pair, (list, tuple)) and len(pair) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
            and 0 <= pair[0] <= pair[1] < 2**63 for pair in given):
        raise ValueError(f"spans must be [start, end) pairs of ints with 0 <= start <= end < "
                         f"2**63, got {short(given, 300)}")
    if len(given) != actions:
        raise ValueError(f"{len(given)} spans for {actions} actions")
    spans = np.array(given, dtype=np.int64).reshape(-1, 2)
    if np.any(spans[1:, 0] < spans[:-1, 1]):
        raise ValueError(f"spans must be in order and must not overlap, got {spans.tolist()}")
    return spans


def batch_metrics(score: BatchScore[Any]) -> dict[str, float]:
    """The ``factutil/*`` metrics of one trainer step, every value a finite float: ``groups``,
    ``groups_scored``, ``groups_fallback`` (``score.fallback`` completed by the adapter); with a
    result, its numeric metrics (``time_<stage>_s`` as ``time_<stage>_ms``) and
    ``utility_spread``; with work to come, ``prepared_shipped`` and ``prepared_unshipped``."""
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
        metrics["factutil/utility_spread"] = found["utility_max"] - found["utility_min"]
    if score.shipped is not None:
        metrics["factutil/prepared_shipped"] = float(score.shipped)
        metrics["factutil/prepared_unshipped"] = float(score.unshipped or 0)
    # the trainer's groups, not only those that reached the core (its own "groups" metric)
    metrics["factutil/groups"] = float(groups)
    metrics["factutil/groups_scored"] = float(groups - len(fallback))
    metrics["factutil/groups_fallback"] = float(len(fallback))
    return {name: value if math.isfinite(value) else 0.0 for name, value in metrics.items()}


def warn_fallback(log: logging.Logger, fallback: Mapping[Any, str], kept: str, *,
                  every: str | None = None, error: BaseException | None = None) -> None:
    """The step's one warning naming the groups of ``fallback`` (group -> reason) that kept
    ``kept`` (``"verl's GRPO advantages"``); with ``every`` (why), the whole batch did.
    ``error`` is logged with its traceback."""
    if every is not None:
        log.warning("factutil: every group kept %s (factutil/batch_fallback): %s", kept, every,
                    exc_info=error)
    elif fallback:
        reasons = [f"group {group!r}: {reason}" for group, reason in sorted(fallback.items())]
        log.warning("factutil: %d group(s) kept %s (factutil/groups_fallback): %s%s",
                    len(fallback), kept, "; ".join(reasons[:3]), " ..." if len(reasons) > 3 else "",
                    exc_info=error)


class TrainerStep:
    """What one training run's factutil steps share: the :attr:`clusterer` (kept across steps),
    early scoring in one background thread (:meth:`start`, :meth:`take`: ``early_used`` and
    ``wait_s`` say whether the last take used it and how long it waited, None: none started),
    the report writer (:attr:`reports`, in ``<run_folder>/factutil_reports/``) and :meth:`finish`.
    """

    def __init__(self, config: FactUtilConfig, run_folder: str | os.PathLike = ".",
                 log: logging.Logger | None = None):
        self.config = config
        self.run_folder = run_folder
        self.log = log or logging.getLogger("factutil")
        self.steps = 0
        self.reports: ReportWriter | None = None
        self.early_used = False
        self.wait_s: float | None = None
        self._clusterer: Clusterer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._early: tuple[Any, Future] | None = None

    @property
    def clusterer(self) -> Clusterer:
        if self._clusterer is None:
            self._clusterer = make_clusterer(self.config)
        return self._clusterer

    def score(self, groups: Iterable[K], build: Callable[[K], Sequence[Mapping[str, Any]]], *,
              column: str = "advantage", work: Sequence[Any] | None = None) -> BatchScore[K]:
        """:func:`score_batch` with the run's config and clusterer."""
        return score_batch(groups, build, self.config, clusterer=self.clusterer, column=column,
                           work=work)

    def start(self, key: Any, score: Callable[[], T]) -> None:
        """Run ``score()`` in the background for the :meth:`take` of an equal (``==``) ``key``;
        forgets an earlier start. Never raises. ``key`` is compared once ``score()`` has returned,
        so ``score`` may fill it in (a list) when it is known only once the batch is read."""
        self._early = None
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="factutil")
            self._early = (key, self._pool.submit(score))
        except Exception:  # take scores instead
            self.log.warning("factutil: could not start scoring early", exc_info=True)

    def take(self, key: Any, score: Callable[[], T]) -> T:
        """What :meth:`start` computed from ``key``, else ``score()`` now (one warning when the
        early scoring failed or its key differs)."""
        early, self._early = self._early, None
        self.early_used, self.wait_s = False, None
        if early is not None:
            waited = time.perf_counter()
            try:
                value = early[1].result()
                self.early_used = bool(early[0] == key)
            except Exception:  # scored again below
                self.log.warning("factutil: scoring early failed; scoring the batch now",
                                 exc_info=True)
            else:
                if not self.early_used:
                    self.log.warning("factutil: the batch changed after it was scored early; "
                                     "scoring it again")
            self.wait_s = time.perf_counter() - waited
        return value if self.early_used else score()

    def finish(self, result: ProcessAdvantages | None, started: float, *, failed: bool = False,
               step: int | None = None) -> dict[str, float]:
        """End a step: count it, hand ``result`` to the report writer under ``step`` (1-based;
        None: :attr:`steps`) and return the step's metrics: ``factutil/batch_fallback`` (1.0
        when ``failed``), ``score_early_used``, ``time_wait_ms``, ``report_failures`` and
        ``time_trainer_ms`` (since ``started``, a ``time.perf_counter()``)."""
        self.steps += 1
        metrics = {"factutil/batch_fallback": float(failed),
                   "factutil/score_early_used": float(self.early_used)}
        if self.wait_s is not None:
            metrics["factutil/time_wait_ms"] = 1000.0 * self.wait_s
        self.early_used, self.wait_s = False, None
        if self.config.report_every:
            try:
                if self.reports is None:
                    self.reports = ReportWriter(Path(self.run_folder) / FOLDER,
                                                self.config.report_every)
                self.reports.submit(result, self.steps if step is None else step)
                metrics["factutil/report_failures"] = float(self.reports.failures)
            except Exception:  # a report must never fail a training step
                self.log.warning("factutil: the credit report could not be started; training "
                                 "goes on without it", exc_info=True)
                metrics["factutil/report_failures"] = 1.0
        metrics["factutil/time_trainer_ms"] = 1000.0 * (time.perf_counter() - started)
        return metrics
