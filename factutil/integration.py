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
- a rollout's work shipped from the rollout workers (docs/decisions.md, ``prepare_in_workers``):
  :class:`FactPreparer` does it in a worker (:func:`factutil.rollout_work.prepare_rollout`: the
  rollout's action columns and its facts' texts, vectors and analyses, as bytes), a rollout
  carries it under :data:`SHIPPED_KEY` (:func:`trainer_rollout`'s ``prepared``), and
  :func:`score_batch` hands the rollout to the core as a *shipped row* (its work, not its
  actions), with the same values bit for bit. A rollout whose worker sent nothing is computed by
  the trainer's step itself; one whose work cannot be read keeps its group on the trainer's
  advantages (with the reason). An older worker's facts' work alone
  (:func:`factutil.prepare.prepare_facts`' bytes) is still taken: the step uses what fits.

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

from factutil import api
from factutil.advantages import (
    mask_spans,
    scatter_rows_to_turns,
    scatter_to_spans,
    scatter_to_turns,
    turns_problem,
)
from factutil.config import FactUtilConfig
from factutil.load import action_row
from factutil.metrics import golden_answers_from
from factutil.result import ProcessAdvantages

__all__ = [
    "FIXED_ACTION_KEYS",
    "SHIPPED_KEY",
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
    "read_shipped",
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
        shipped: rollouts whose work came with them and was used (a rollout's work, or an
            older worker's facts' work that could be read; the core may still ignore facts'
            work made for another embedder: its ``cluster_prepared_ignored``).
        unshipped: rollouts that were to bring their work and did not: none came or an older
            worker's facts' work could not be read (the step computed it), or a rollout's work
            could not be used (unreadable, made for another ``max_turns``, or holding another
            number of actions than the trainer's rollout: its group is in ``fallback``).
        None when no rollout was to bring any.
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

    A rollout dict may hold :data:`SHIPPED_KEY`: the work its rollout worker shipped (bytes or
    their base64 text; None when the worker sent none). The key is taken out before the core
    sees the rollout. A rollout's work (:class:`FactPreparer`'s bytes,
    :func:`factutil.rollout_work.prepare_rollout`) makes the rollout a shipped row: it goes to
    the core without ``actions`` and with that work under
    :data:`factutil.rollout_work.SHIPPED_ROW_KEY`, and the core neither validates nor walks its
    actions. A shipped row whose work the core cannot use makes its group fall back with the
    core's reason; so does one whose values are not one per action of the trainer's rollout (its
    ``actions``), so that no adapter scatters them onto the wrong tokens. Facts' work alone (an
    older worker's :func:`factutil.prepare.prepare_facts` bytes or a
    :class:`~factutil.prepare.PreparedFacts`) is read and merged by
    :func:`factutil.prepare.load_prepared` (collector paused, one item per kind of work) and goes
    to the core as ``prepared``, which takes what fits and computes the rest.

    Returns:
        :class:`BatchScore`. The core runs with ``on_invalid_group="skip"``, so a group that
        fails its validation is in ``fallback`` with the core's reason. When the core call raises,
        every group built is in ``fallback`` (``"scoring failed: ..."``) and ``error`` holds the
        exception; nothing is raised.
    """
    from factutil.rollout_work import SHIPPED_ROW_KEY

    fallback: dict[K, str] = {}
    rollouts: list[Mapping[str, Any]] = []
    shipped: list[Any] = []  # facts' work alone (older workers) or None, one per rollout
    rows: list[tuple[K, str, int | None]] = []  # shipped rows: group, rollout_id, trainer's actions
    keys: dict[str, K] = {}
    count = 0
    for key in groups:
        count += 1
        try:
            members = build(key)
        except Unscorable as reason:
            fallback[key] = str(reason)
            continue
        for rollout in members:
            if SHIPPED_KEY in rollout:
                rollout = dict(rollout)
                item = _shipped_form(rollout.pop(SHIPPED_KEY))
                if _is_rollout_work(item):
                    actions = rollout.pop("actions", None)
                    rollout[SHIPPED_ROW_KEY] = bytes(item)
                    rows.append((key, str(rollout.get("rollout_id")),
                                 None if actions is None else len(actions)))
                else:
                    shipped.append(item)
            rollouts.append(rollout)
        keys[str(key)] = key
    score: BatchScore[K] = BatchScore(None, {}, fallback, count)
    if not rollouts:
        return score
    extra: dict[str, Any] = {}
    if shipped or rows:
        unreadable: list[int] = []
        if shipped:
            from factutil.prepare import load_prepared

            prepared = load_prepared(shipped, unreadable=unreadable, pause_gc=config.pause_gc)
            if prepared:
                extra["prepared"] = prepared
        score.unshipped = sum(item is None for item in shipped) + len(unreadable)
        score.shipped = len(shipped) + len(rows) - score.unshipped
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
    if rows:
        _check_shipped_rows(score, rows)
    return score


def _is_rollout_work(item: Any) -> bool:
    """Whether a shipped item (after :func:`_shipped_form`) is a rollout's work
    (:func:`factutil.rollout_work.prepare_rollout`'s bytes, by their magic), not facts' work."""
    from factutil.rollout_work import MAGIC

    return isinstance(item, (bytes, bytearray, memoryview)) and bytes(item[:4]) == MAGIC


def _check_shipped_rows(score: BatchScore[Any], rows: Sequence[tuple[Any, str, int | None]]) -> None:
    """The shipped rows of a scored batch, checked: a row whose group the core skipped for its
    work (the core's reason names the row's shipped work) or whose values are not one per action
    of the trainer's rollout moves from ``shipped`` to ``unshipped``; the second also puts its
    group in ``fallback`` and takes its groups' values out of ``values``."""
    result = score.result
    dropped: set[str] = set()
    for key, rollout_id, actions in rows:
        uid = str(key)
        reason = result.skipped.get(uid)
        if reason is not None:
            unused = reason.startswith(f"rollout {rollout_id!r}: its shipped")
        else:
            values = score.values.get((uid, rollout_id))
            unused = values is not None and actions is not None and len(values) != actions
            if unused:
                score.fallback.setdefault(
                    key, f"rollout {rollout_id!r}: its shipped work holds {len(values)} "
                         f"actions, the trainer's rollout {actions}")
                dropped.add(uid)
        if unused:
            score.shipped -= 1
            score.unshipped += 1
    if dropped:
        score.values = {k: v for k, v in score.values.items() if k[0] not in dropped}


def trainer_rollout(
    *,
    name: str,
    uid: str,
    rollout_id: str,
    question: Any,
    golden_answers: Any,
    actions: list[Any],
    reward: float | None,
    prepared: Any = None,
    shipping: bool = False,
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
        prepared: the work the rollout worker shipped (:class:`FactPreparer`'s bytes or their
            base64 text; an older worker's facts' work; None).
        shipping: the workers were to ship it (``prepares_in_workers``): the rollout then holds
            :data:`SHIPPED_KEY` (``prepared``, None counted as missing by :func:`score_batch`).

    Returns:
        ``{"uid", "question", "golden_answers", "rollout_id", "actions"[, "reward"]
        [, SHIPPED_KEY]}``.

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
    if shipping:
        rollout[SHIPPED_KEY] = prepared
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
        and ``factutil/prepared_unshipped`` (rollouts, :class:`BatchScore`'s ``shipped`` and
        ``unshipped``) next to the core's ``factutil/cluster_prepared_facts`` and
        ``cluster_prepared_ignored``.
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


SHIPPED_KEY = "prepared"
"""The key of a rollout dict (and of an adapter's per-row fields) holding the work its rollout
worker shipped (:class:`FactPreparer`'s bytes or their base64 text)."""


def prepares_in_workers(config: FactUtilConfig) -> bool:
    """Whether the rollout workers do the rollouts' work (``config.prepare_in_workers``; None:
    in semantic mode only, exact mode having no embedding or analysis to ship)."""
    if config.prepare_in_workers is not None:
        return bool(config.prepare_in_workers)
    return config.mode == "semantic"


class FactPreparer:
    """The work of rollouts (their action columns and their facts' texts, vectors and analyses),
    done where they are generated (a rollout worker).

    One per worker process and config: it owns the clusterer whose embedder (loaded on first use,
    on ``config.embedding_device``: CUDA when the worker has a GPU) and caches every call reuses.
    Calls may come from several threads; they run one at a time, and the rollouts that arrive
    while one runs are coalesced: the next call embeds and analyses the new facts of every
    waiting rollout in one pass (each then finds its own in the caches). On a CPU this matters:
    every pass has a fixed shape (``embedding_pass_tokens`` tokens, attention over
    ``embedding_batch_size`` texts of one length), so a rollout's few texts alone cost many times
    per text what they cost together (benchmarks/README.md). Each
    rollout's bytes are the same either way (a text's vector never depends on its neighbours).

    Args:
        config: the run's :class:`FactUtilConfig` (the trainer's: the work must be made for its
            template, embedder, filters and key edges, or the trainer ignores it).
        log: where a failure is reported (once).
    """

    def __init__(self, config: FactUtilConfig, log: logging.Logger | None = None):
        self.config = config
        self.log = log or logging.getLogger("factutil")
        self.failures = 0
        self._clusterer: Any = None
        self._lock = threading.Lock()
        self._waiting: list[Any] = []  # rollouts whose call waits for the lock
        self._waiting_lock = threading.Lock()
        self.coalesced = 0  # rollouts whose facts were embedded in another rollout's call

    def text(self, facts: Any) -> str | None:
        """:meth:`__call__`'s bytes as base64 text, for fields that must stay JSON (OpenRLHF's
        payload is logged as JSON). :func:`score_batch` takes both forms."""
        data = self(facts)
        return None if data is None else base64.b64encode(data).decode("ascii")

    def __call__(self, facts: Any) -> bytes | None:
        """The work of one rollout or trajectory as the bytes a shipped row carries
        (:func:`factutil.rollout_work.prepare_rollout`), to ship in the rollout's fields.

        Args:
            facts: the rollout's actions (a sequence of action dicts or models, as the worker
                has them: the work then names no uid or rollout_id and belongs to the row that
                carries it), or a rollout dict (its uid and rollout_id must be the trainer's).

        Returns:
            the bytes; None when the work failed (counted in ``failures``, logged once): the
            trainer's step then does it from the rollout's actions. Never raises.
        """
        from factutil.cluster import make_clusterer
        from factutil.rollout_work import prepare_rollout

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
                return prepare_rollout(facts, self.config, clusterer=self._clusterer)
        except Exception:  # a rollout never fails for work the trainer can redo
            self.failures += 1
            if self.failures == 1:
                self.log.warning("factutil: a rollout's work failed in the rollout worker; the "
                                 "trainer's step does it instead", exc_info=True)
            return None

    def _warm(self, waiting: list[Any]) -> None:
        """Embed and analyse the facts of every waiting rollout in one call, into the
        clusterer's caches (a rollout that cannot be read is left to its own call)."""
        from factutil.prepare import prepare_facts, triples_of

        parts = []
        for facts in waiting:
            try:
                parts += triples_of(facts, self.config.max_turns)
            except (TypeError, ValueError):
                continue
        if parts:
            prepare_facts(parts, self.config, clusterer=self._clusterer)
            self.coalesced += len(waiting) - 1


def _shipped_form(item: Any) -> Any:
    """A shipped item as :func:`factutil.prepare.load_prepared` reads it: base64 text as its
    bytes; None, bytes and PreparedFacts as they are; anything else (text that is not base64
    included) as ``b""``, which is unreadable."""
    from factutil.prepare import PreparedFacts

    if item is None or isinstance(item, (bytes, bytearray, memoryview, PreparedFacts)):
        return item
    if isinstance(item, str):
        try:
            return base64.b64decode(item.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
            pass
    return b""


def read_shipped(items: Iterable[Any]) -> tuple[list[Any], int]:
    """The shipped facts' work of some rollouts (what an older worker ships), read back.

    Args:
        items: per rollout, :meth:`PreparedFacts.to_bytes` bytes (or their base64 text), a
            :class:`~factutil.prepare.PreparedFacts`, or None (nothing shipped). A rollout's
            whole work (:class:`FactPreparer`'s bytes) is not facts' work alone: read it with
            :func:`factutil.rollout_work.read_rollout_work`.

    Returns:
        ``(PreparedFacts list, how many items were None or not facts' work that can be read)``.
    """
    from factutil.prepare import PreparedFacts

    found: list[Any] = []
    missing = 0
    for item in map(_shipped_form, items):
        if isinstance(item, PreparedFacts):
            found.append(item)
            continue
        try:
            if isinstance(item, (bytes, bytearray, memoryview)):
                found.append(PreparedFacts.from_bytes(bytes(item)))
                continue
        except ValueError:
            pass
        missing += 1
    return found, missing
