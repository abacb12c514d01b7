"""See the credit: a self-contained HTML report of a scored batch.

``factutil report IN.jsonl -o report.html`` on the command line; from code::

    from factutil.report import ReportInputs, write_report
    write_report(result, "report.html", ReportInputs(gold=load_gold("gold.json")))

From a trainer, :class:`ReportWriter` writes a step's report in a background thread every N
steps and never raises. The page shows the summary of the batch, plots, and per question its
clusters (members, n, s, m, u) and every rollout's actions with their credit; it needs no script
and loads nothing (jinja2 for the page; matplotlib, optional, for the plots).
"""

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
    write_report,
)
from factutil.report.writer import ReportWriter

__all__ = [
    "DEFAULT_MAX_GROUPS",
    "GoldError",
    "ReportInputs",
    "ReportWriter",
    "build_report",
    "evidence_auc",
    "gold_labels",
    "load_gold",
    "report_context",
    "select_groups",
    "within_group_auc",
    "write_report",
]
