"""The rollout workers' side of :mod:`factutil.workers`: a :class:`FactPreparer` per worker makes
each rollout's work item, carried under :data:`WORK_KEY` to
:func:`~factutil.integration.score_batch`."""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
from typing import Any

from cachetools import LRUCache

from factutil.cluster import SemanticClusterer
from factutil.config import FactUtilConfig
from factutil.workers import assert_triples, make_work, work_bytes

__all__ = ["WORK_KEY", "FactPreparer", "prepares_in_workers"]

WORK_KEY = "work"
"""The key of an adapter's per-rollout fields holding its :class:`FactPreparer`'s work."""


def prepares_in_workers(config: FactUtilConfig) -> bool:
    """``config.prepare_in_workers``; None: in semantic mode with asserted facts only (exact mode
    has nothing to ship; the work is asserted facts', so under ``facts="retrieved"`` none)."""
    if config.prepare_in_workers is not None:
        return bool(config.prepare_in_workers)
    return config.mode == "semantic" and config.facts == "asserted"


class FactPreparer:
    """A rollout worker's per-fact work: one work item (:mod:`factutil.workers`) per call of
    the facts not shipped before (an LRU of ``config.cache_max_entries``; the trainer's clusterer
    computes any it lacks, so the numbers never depend on what was shipped). One per worker
    process and (the trainer's) config; it owns ``clusterer`` (None: made on the first call).
    Calls run one at a time; the rollouts waiting meanwhile are embedded together by the next
    (a fixed-shape pass over a rollout's few texts alone costs far more per text)."""

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

    def text(self, actions: Any) -> str | None:
        """:meth:`__call__`'s work as base64 text of its bytes, for JSON fields (OpenRLHF's
        payload): None when it failed, ``""`` when it holds no fact."""
        work = self(actions)
        if work is None or not len(work["parts"]):
            return None if work is None else ""
        return base64.b64encode(work_bytes(work)).decode("ascii")

    def __call__(self, actions: Any) -> dict[str, Any] | None:
        """The work item of the facts one rollout's ``actions`` assert
        (:func:`~factutil.workers.assert_triples`) that were not shipped before; None when it
        failed (counted in ``failures``, logged once: the trainer's step does it). Never
        raises."""
        try:
            with self._waiting_lock:
                self._waiting.append(actions)
            with self._lock:
                if self._clusterer is None:
                    self._clusterer = SemanticClusterer(self.config)
                with self._waiting_lock:
                    waiting, self._waiting = self._waiting, []
                if len(waiting) > 1:
                    self._warm(waiting)
                new = [key for key in dict.fromkeys(assert_triples(actions, self.config.max_turns))
                       if key not in self._shipped]
                work = make_work(new, self.config, self._clusterer)
                self._shipped.update(dict.fromkeys(new, True))
                return work
        except Exception:  # a rollout never fails for work the trainer can redo
            self.failures += 1
            if self.failures == 1:
                self.log.warning("factutil: a rollout's work failed in the rollout worker; the "
                                 "trainer's step does it instead", exc_info=True)
            return None

    def _warm(self, waiting: list[Any]) -> None:
        """Embed and analyse every waiting rollout's facts in one call, into the clusterer's
        caches (a rollout that cannot be read is left to its own call)."""
        parts = []
        for actions in waiting:
            with contextlib.suppress(TypeError, ValueError, KeyError):
                parts += assert_triples(actions, self.config.max_turns)
        parts = [key for key in dict.fromkeys(parts) if key not in self._shipped]
        if parts:
            make_work(parts, self.config, self._clusterer)
            self.coalesced += len(waiting) - 1
