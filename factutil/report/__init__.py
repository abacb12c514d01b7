"""See the credit: a self-contained HTML report of a scored batch.

``factutil report IN.jsonl -o report.html``, :func:`write_report` or, from a trainer,
:class:`ReportWriter`: the batch's summary, plots, and per question its clusters and every
rollout's credited actions."""

from factutil.report.evidence import (
    GoldError,
    evidence_auc,
    gold_labels,
    load_gold,
    within_group_auc,
)
from factutil.report.page import (
    DEFAULT_MAX_GROUPS,
    ReportInputs,
    build_report,
    report_context,
    select_groups,
    summary_rows,
    write_report,
)
from factutil.report.writer import ReportWriter

__all__ = [
    "DEFAULT_MAX_GROUPS", "GoldError", "ReportInputs", "ReportWriter", "build_report",
    "evidence_auc", "gold_labels", "load_gold", "report_context", "select_groups",
    "summary_rows", "within_group_auc", "write_report",
]
