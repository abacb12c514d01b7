"""Reports from a running trainer (:class:`factutil.integration.TrainerStep` holds one): every
N steps, in a background thread, never failing the step."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from factutil.api import ProcessAdvantages
from factutil.report.page import DEFAULT_MAX_GROUPS, ReportInputs, write_report

logger = logging.getLogger("factutil")

FOLDER = "factutil_reports"
"""Sub-folder of a run's output folder that holds its reports (``step_000010.html``, ...)."""


class ReportWriter:
    """Write the HTML credit report of every ``every``-th training step (0: never) into
    ``folder``, off the critical path: :meth:`submit` returns at once and a background thread
    writes the page. A report due while the previous one is still being written is skipped, so
    reports never queue up behind a slow disk. No report error reaches the trainer: the first
    is logged, later ones counted. Counts ``written`` (paths), ``failures`` and ``skipped``;
    raises ValueError for ``every`` or ``max_groups`` below 0.
    """

    def __init__(self, folder: str | os.PathLike, every: int, *,
                 max_groups: int = DEFAULT_MAX_GROUPS):
        if every < 0:
            raise ValueError(f"report_every must be >= 0, got {every}")
        if max_groups < 0:
            raise ValueError(f"max_groups must be >= 0, got {max_groups}")
        self.folder = Path(folder)
        self.every = every
        self.max_groups = max_groups
        self.written: list[Path] = []
        self.failures = 0
        self.skipped = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def path(self, step: int) -> Path:
        """The file of step ``step``'s report."""
        return self.folder / f"step_{step:06d}.html"

    def submit(self, result: ProcessAdvantages | None, step: int) -> Path | None:
        """Start writing the report of ``result`` when ``step`` (1-based, as trainers count) is a
        multiple of ``every``; never raises. Returns the path being written, or None (not due,
        no result, skipped, or a failure to start)."""
        try:
            if result is None or not (self.every > 0 and step > 0 and step % self.every == 0):
                return None
            if self._thread is not None and self._thread.is_alive():
                self.skipped += 1
                logger.info("factutil report of step %d skipped: the previous one is still "
                            "being written", step)
                return None
            target = self.path(step)
            self._thread = threading.Thread(target=self._write, args=(result, target, step),
                                            name=f"factutil-report-{step}", daemon=True)
            self._thread.start()
            return target
        except Exception:  # noqa: BLE001 - a report must never fail a training step
            self._failed(step)
            return None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the report being written, if any; True when none is left running."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _write(self, result: ProcessAdvantages, target: Path, step: int) -> None:
        try:
            inputs = ReportInputs(title=f"factutil credit report, training step {step}",
                                  source=f"training step {step}", max_groups=self.max_groups)
            write_report(result, target, inputs)
        except Exception:  # noqa: BLE001 - a report must never fail a training step
            self._failed(step)
        else:
            with self._lock:
                self.written.append(target)

    def _failed(self, step: int) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            logger.exception("factutil report of step %d failed; training goes on (later report "
                             "failures are counted, not logged)", step)
