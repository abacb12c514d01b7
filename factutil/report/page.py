"""A :class:`~factutil.api.ProcessAdvantages` as one self-contained HTML page.

The page only displays what the core computed (docs/method.md §1–§5), recomputing none of the
method's numbers. Plots are inline SVG and styles inline; no script, and a Content-Security-Policy
forbids any load, so it opens from disk anywhere.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from factutil import __version__
from factutil.api import ClusterRecord, ProcessAdvantages
from factutil.config import FactUtilConfig
from factutil.io import write_atomic
from factutil.metrics import golds_normalized_empty
from factutil.passages import member_label
from factutil.report import plots
from factutil.report.evidence import evidence_auc, gold_labels, within_group_auc

DEFAULT_MAX_GROUPS = 30
"""Questions shown in full by default (widest utility spread first); the summary and plots
always cover every group."""

KINDS = ("search", "assert", "answer", "invalid")
OBSERVATION_CHARS = 120
RAW_CHARS = 160
MEMBERS_SHOWN = 6
CREDITS = ("shaping", "back_credit", "penalty", "process_advantage", "advantage")


def select_groups(result: ProcessAdvantages, max_groups: int | None = DEFAULT_MAX_GROUPS,
                  uids: Sequence[str] | None = None) -> list[int]:
    """Indices into ``result.groups`` of the questions to show, widest utility spread (largest
    minus smallest cluster utility, 0 with fewer than two) first, ties in input order: only
    ``uids`` when given, at most ``max_groups`` (None or 0: all). Raises ValueError for a
    negative ``max_groups`` or a uid that is not a group of ``result`` (named)."""
    if max_groups is not None and max_groups < 0:
        raise ValueError(f"max_groups must be >= 0, got {max_groups}")
    position = {group.uid: g for g, group in enumerate(result.groups)}
    if uids:
        missing = [uid for uid in uids if uid not in position]
        if missing:
            raise ValueError(f"uid {missing[0]!r} is not in the input ({len(position)} groups, "
                             f"e.g. {', '.join(repr(uid) for uid in list(position)[:3])})")
        chosen = sorted({position[uid] for uid in uids})
    else:
        chosen = list(range(len(position)))
    utilities: dict[str, list[float]] = {}
    for cluster in result.clusters:
        utilities.setdefault(cluster.uid, []).append(cluster.utility)
    spread = [max(values) - min(values) if len(values := utilities.get(group.uid, [])) > 1 else 0.0
              for group in result.groups]
    chosen.sort(key=lambda g: -spread[g])
    return chosen[:max_groups] if max_groups else chosen


@dataclass
class Number:
    """One number of the page: its value, its text and its CSS sign class."""

    value: float
    digits: int = 3
    signed: bool = True

    @property
    def text(self) -> str:
        sign = "+" if self.signed else ""
        return "0" if self.value == 0 else f"{self.value:{sign}.{self.digits}f}"

    @property
    def sign(self) -> str:
        """CSS class: ``p`` (positive), ``n`` (negative), ``z`` (zero), ``u`` (unsigned)."""
        if not self.signed:
            return "u"
        if self.value == 0:
            return "z"
        return "p" if self.value > 0 else "n"

    @property
    def exact(self) -> str:
        """The value to 7 significant digits (the cell's tooltip)."""
        return f"{self.value:.7g}"


@dataclass
class ReportInputs:
    """What a page shows besides the result: where it came from, gold evidence, which groups."""

    title: str = "factutil credit report"
    source: str | None = None
    gold: Mapping[str, Sequence[Sequence[str]]] | None = None
    max_groups: int | None = DEFAULT_MAX_GROUPS
    uids: Sequence[str] | None = None


def report_context(result: ProcessAdvantages, inputs: ReportInputs | None = None,
                   progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Everything ``templates/report.html.j2`` shows, as plain values; ``progress`` is called
    with 1 after each group is laid out. Raises ValueError as :func:`select_groups`."""
    inputs = inputs or ReportInputs()
    config = result.config
    clusters = result.clusters
    labels = gold_labels(clusters, inputs.gold, config.triple_template) if inputs.gold else None
    by_uid: dict[str, list[tuple[ClusterRecord, bool | None]]] = {}
    for k, cluster in enumerate(clusters):
        by_uid.setdefault(cluster.uid, []).append((cluster, labels[k] if labels else None))
    utilities = [cluster.utility for cluster in clusters]
    scale = max([abs(u) for u in utilities] + [1e-9])
    shown = select_groups(result, inputs.max_groups, inputs.uids)

    potential = result.action_columns["potential"].tolist()
    offsets = result.action_offsets.tolist()
    first_row = list(accumulate((len(group.rollouts) for group in result.groups), initial=0))

    groups = []
    for g in shown:
        groups.append(_group_view(
            result.groups[g], first_row[g], by_uid.get(result.groups[g].uid, []), result.actions,
            result.rollouts, potential, offsets, scale, config.facts == "retrieved"))
        if progress is not None:
            progress(1)

    auc = evidence_auc(labels, utilities) if labels is not None else None
    notes, figures = [], {}
    if missing := plots.matplotlib_missing():
        notes.append(missing)
    else:
        rows = [first_row[g] + j for g in shown for j in range(len(result.groups[g].rollouts))]
        figures = _figures(result, utilities, labels, auc, potential, offsets, rows, len(shown))
    return {
        "title": inputs.title, "source": inputs.source, "summary": summary_rows(result),
        "kinds": _kind_table(result), "invalid_reasons": _invalid_reasons(result),
        "times": [(name[5:-2], Number(value, 4, signed=False))
                  for name, value in result.metrics.items()
                  if name.startswith("time_") and name.endswith("_s")],
        "config": _config_rows(config), "retrieved": config.facts == "retrieved",
        "settings": config,
        "warnings": result.warnings[:10], "warnings_left": max(0, len(result.warnings) - 10),
        "skipped": sorted(result.skipped.items()),
        "gold": _gold_summary(clusters, utilities, labels, auc) if labels is not None else None,
        "figures": figures, "notes": notes, "groups": groups, "groups_total": len(result.groups),
        "by_uid": bool(inputs.uids),
    }


def summary_rows(result: ProcessAdvantages) -> list[tuple[str, str]]:
    """The batch's numbers as (name, text) rows, the report's and ``factutil score``'s: means
    only over something (no mean EM of no rollout, no utility of no cluster)."""
    m = result.metrics
    rows = [
        ("questions (groups)", f"{m['groups']:.0f}"),
        ("rollouts", f"{m['rollouts']:.0f}"),
        ("actions (ignored / invalid)",
         f"{m['actions']:.0f} ({m['actions_ignored']:.0f} / {m['actions_invalid']:.0f})"),
    ]
    if m["rollouts"]:
        rows += [("mean EM / F1", f"{m['em_mean']:.3f} / {m['f1_mean']:.3f}"),
                 ("mean outcome reward R", f"{m['outcome_reward_mean']:.3f}"),
                 ("searches repeated / answers from an empty store / rollouts with no answer",
                  (f"{m['searches_repeated']:.0f} / {m['answers_empty_store']:.0f} / "
                  f"{m['rollouts_unanswered']:.0f}"))]
    if m["clusters"]:
        rows += [("fact clusters", f"{m['clusters']:.0f} ({m['clusters_per_group']:.1f} per question)"),
                 ("cluster utility u min / mean / max",
                  f"{m['utility_min']:+.3f} / {m['utility_mean']:+.3f} / {m['utility_max']:+.3f}"),
                 ("actions with non-zero shaping", f"{100 * m['shaping_nonzero_share']:.1f}%")]
    if m.get("golds_normalized_empty"):
        # The SQuAD score is kept, but such a gold (the band "The The") is a data problem.
        golds = [repr(gold) for group in result.groups
                 for gold in golds_normalized_empty(group.golden_answers, result.config.fold_unicode)]
        rows.append(("gold answers that normalise to nothing",
                     f"{m['golds_normalized_empty']:.0f}: {', '.join(golds)}"))
    return rows


def _kind_table(result: ProcessAdvantages) -> list[dict[str, Any]]:
    counts = Counter(None if record.ignored else record.action for record in result.actions)
    names = {**{kind: kind for kind in KINDS}, None: "ignored (after the answer or max_turns)"}
    total = len(result.actions)
    return [{"kind": names[kind], "count": counts[kind],
             "share": f"{100 * counts[kind] / total:.1f}%" if total else "–"}
            for kind in names if kind is not None or counts[None]]


def _invalid_reasons(result: ProcessAdvantages) -> list[tuple[str, int, str]]:
    reasons = Counter(str(action.get("reason") or "unknown") for group in result.groups
                      for rollout in group.rollouts for action in rollout["actions"]
                      if action["action"] == "invalid")
    total = sum(reasons.values())
    return [(reason, count, f"{100 * count / total:.0f}%")
            for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]


def _config_rows(config: FactUtilConfig) -> list[tuple[str, str, str]]:
    """(field, value, default) of each config field that differs from its default."""
    defaults = FactUtilConfig()

    def shown(value: Any) -> str:
        return ", ".join(value) if isinstance(value, tuple) else str(value)

    return [(name, shown(getattr(config, name)), shown(getattr(defaults, name)))
            for name in type(config).model_fields if getattr(config, name) != getattr(defaults, name)]


def _gold_summary(clusters: list[ClusterRecord], utilities: list[float], labels: list[bool | None],
                  auc: float | None) -> dict[str, Any]:
    rows = []
    for name, flag in (("gold evidence", True), ("distractor", False)):
        values = [u for u, label in zip(utilities, labels) if label is flag]
        rows.append({
            "name": name, "count": len(values),
            "mean": Number(math.fsum(values) / len(values)) if values else None,
            "positive": f"{100 * sum(u > 0 for u in values) / len(values):.0f}%" if values else "–",
        })
    within = within_group_auc(labels, utilities, [cluster.uid for cluster in clusters])
    return {"rows": rows, "auc": None if auc is None else f"{auc:.3f}",
            "within": None if within is None else f"{within:.3f}"}


def _figures(result: ProcessAdvantages, utilities: list[float], labels: list[bool | None] | None,
             auc: float | None, potential: list[float], offsets: list[int], rows: list[int],
             shown: int) -> dict[str, str]:
    """Utilities and advantages of the whole batch; the potential of the rollouts ``rows``."""
    panels = {"process advantage A_proc": result.action_columns["process_advantage"].tolist(),
              "advantage A = A_out + Ω·A_proc": result.action_columns["advantage"].tolist()}
    by_kind = {title: {kind: [] for kind in KINDS} for title in panels}
    for title, values in panels.items():
        for k, record in enumerate(result.actions):
            if not record.ignored:
                by_kind[title][record.action].append(values[k])
    rollouts = result.rollouts
    curves = [potential[offsets[i] : offsets[i] + rollouts[i].actions] for i in rows]
    succeeded = [rollouts[i].success >= 0.5 for i in rows]
    whose = "" if shown == len(result.groups) else f"\n(rollouts of the {shown} questions shown)"
    return {
        "utility": plots.utility_histogram(utilities, labels, auc),
        "advantage": plots.advantage_by_kind(by_kind),
        "potential": plots.potential_lines(curves, succeeded, whose),
    }


def _group_view(group: Any, first_row: int, clusters: list[tuple[ClusterRecord, bool | None]],
                actions: list[Any], rollouts: list[Any], potential: list[float],
                offsets: list[int], scale: float, retrieved: bool) -> dict[str, Any]:
    utility_of = {cluster.cluster_id: cluster.utility for cluster, _ in clusters}
    gold_of = {cluster.cluster_id: label for cluster, label in clusters}
    ordered = sorted(clusters, key=lambda item: (-item[0].utility, item[0].cluster_id))
    cluster_rows = [{
        "id": cluster.cluster_id,
        "members": [member_label(member, retrieved) for member in cluster.members[:MEMBERS_SHOWN]],
        "members_left": max(0, len(cluster.members) - MEMBERS_SHOWN),
        "n": cluster.n, "s": Number(cluster.s, signed=False),
        "mean": Number(cluster.mean, signed=False), "utility": Number(cluster.utility),
        "bar": min(50.0, 50.0 * abs(cluster.utility) / scale), "gold": label,
        "few": cluster.n < 2,  # one rollout's outcome, no evidence about the fact
    } for cluster, label in ordered]
    rollout_views = []
    for j, source in enumerate(group.rollouts):
        i = first_row + j
        record = rollouts[i]
        rows = []
        for t, action in enumerate(source["actions"]):
            k = offsets[i] + t
            credit = actions[k]
            rows.append({
                "step": t, "kind": credit.action, "ignored": credit.ignored, **_action_text(action),
                "new": [{"id": c, "utility": Number(utility_of.get(c, 0.0)), "gold": gold_of.get(c)}
                        for c in credit.new_clusters],
                **{name: Number(getattr(credit, name)) for name in CREDITS},
                "potential": Number(potential[k]),
            })
        rollout_views.append({
            "id": record.rollout_id, "answer": record.answer, "answered": record.answered,
            "em": Number(record.em, 2, signed=False), "f1": Number(record.f1, 2, signed=False),
            "reward": Number(record.outcome_reward, signed=False), "success": record.success,
            "outcome_advantage": Number(record.outcome_advantage),
            "empty_store_answer": record.empty_store_answer, "ignored": record.ignored_actions,
            "actions": rows,
        })
    successes = [rollouts[first_row + j].success for j in range(len(group.rollouts))]
    return {
        "uid": group.uid, "anchor": "q-" + "".join(c if c.isalnum() else "-" for c in group.uid),
        "question": group.question, "golden_answers": group.golden_answers,
        "successes": sum(y >= 0.5 for y in successes), "rollout_count": len(successes),
        "spread": Number(ordered[0][0].utility - ordered[-1][0].utility if len(ordered) > 1
                         else 0.0, signed=False),
        "clusters": cluster_rows, "rollouts": rollout_views,
    }


def _action_text(action: Mapping[str, Any]) -> dict[str, Any]:
    kind = action["action"]
    if kind == "search":
        observation = action.get("observation") or ""
        short = observation[:OBSERVATION_CHARS] + ("…" if len(observation) > OBSERVATION_CHARS else "")
        return {"query": action["query"], "observation": short}
    if kind == "assert":
        return {"triples": [list(triple) for triple in action["triples"]]}
    if kind == "answer":
        return {"answer": action["answer"]}
    raw = str(action.get("raw") or "")
    return {"reason": str(action.get("reason") or ""),
            "raw": raw[:RAW_CHARS] + ("…" if len(raw) > RAW_CHARS else "")}


def build_report(result: ProcessAdvantages, inputs: ReportInputs | None = None,
                 progress: Callable[[int], None] | None = None) -> str:
    """The self-contained HTML page of a scored batch; ``progress`` is called with 1 after each
    question is laid out. Raises ValueError (an unknown uid or a negative ``max_groups`` in
    ``inputs``) or ImportError (jinja2 missing)."""
    context = report_context(result, inputs, progress)
    import jinja2  # when rendering only: the CLI's other commands start without it

    environment = jinja2.Environment(loader=jinja2.PackageLoader("factutil.report"),
                                     autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                     undefined=jinja2.StrictUndefined)
    return environment.get_template("report.html.j2").render(**context, version=__version__)


def write_report(result: ProcessAdvantages, path: str | os.PathLike,
                 inputs: ReportInputs | None = None,
                 progress: Callable[[int], None] | None = None) -> Path:
    """Write :func:`build_report`'s page to ``path`` atomically, creating parent folders, and
    return the path. Raises OSError (not writable) or as :func:`build_report`."""
    text = build_report(result, inputs, progress)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, [text])
    return target
