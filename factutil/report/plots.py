"""The report's plots as inline SVG text (matplotlib, optional: ``pip install 'factutil[report]'``).

matplotlib's object API (no pyplot, no global figure registry) lets a trainer draw them in a
background thread. The output is deterministic: fixed hash salt, no date, text kept as text.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

INSTALL_HINT = "pip install 'factutil[report]'"
"""How to get the plots when matplotlib is missing."""

POSITIVE, NEGATIVE, GOLD, DISTRACTOR, NEUTRAL = "#1f5fbf", "#c26a00", "#b8860b", "#5b6b7f", "#3b6fb6"

_RC = {
    "svg.fonttype": "none", "svg.hashsalt": "factutil-report", "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # bundled with matplotlib; browsers fall back to theirs
    "font.size": 9, "legend.fontsize": 8, "axes.spines.top": False, "axes.spines.right": False,
    "axes.titlesize": 10, "axes.titleweight": "bold",
}


def matplotlib_missing() -> str | None:
    """None when matplotlib can be imported, else a one-line note saying how to install it."""
    try:
        import matplotlib  # noqa: F401  (optional: the report extra)
    except ImportError:
        return f"plots left out: matplotlib is not installed ({INSTALL_HINT})"
    return None


WIDTH, HEIGHT = 4.8, 3.6
"""Inches of each plot: three side by side fill the page's width with legible text."""


@contextmanager
def _figure(rows: int = 1) -> Iterator:
    """A figure of ``rows`` stacked axes, drawn and saved under the page's rc settings."""
    import matplotlib  # optional (the report extra): imported when drawing
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(WIDTH, HEIGHT), layout="constrained")
        yield figure, figure.subplots(rows, 1, squeeze=False)[:, 0]


def _svg(figure, name: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), scaled by the page's CSS; its ids
    start with ``name`` so several plots can share one page."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    # The page sizes the plot (max-width: 100%); keep the aspect from the viewBox.
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", text, count=1)
    # Smaller, same picture: no metadata, no indentation, coordinates to 0.1 pt.
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = re.sub(r">\s+<", "><", text)
    text = re.sub(r'(id="|href="#|url\(#)', rf"\g<1>{name}-", text)
    return re.sub(r' (?:d|x|y|transform)="[^"]*"', _short_coordinates, text)


def _short_coordinates(match: re.Match) -> str:
    attribute = re.sub(r"\s+", " ", match.group(0).replace(' \n"', '"'))
    return re.sub(r"(-?\d+\.\d)\d+", r"\1", attribute)


def utility_histogram(utilities: Sequence[float], labels: Sequence[bool | None] | None = None,
                      auc: float | None = None) -> str:
    """An ``<svg>`` histogram of cluster utilities u_c, gold and distractor clusters apart when
    ``labels`` (per cluster True / False / None) are known; ``auc`` goes in the title."""
    with _figure() as (figure, (axis,)):
        values = list(utilities)
        low = min([*values, -0.1])
        high = max([*values, 0.1])
        bins = [low + (high - low) * k / 20 for k in range(21)]
        known = labels is not None and any(label is not None for label in labels)
        if known:
            gold, other = ([u for u, label in zip(values, labels) if label is flag]
                           for flag in (True, False))
            # Densities: the two kinds differ in number (few gold facts, many distractors); bars
            # side by side in each bin, so no overlap reads as a third colour.
            axis.hist([other, gold], bins=bins, density=True, color=[DISTRACTOR, GOLD],
                      label=[f"distractor ({len(other)})", f"gold evidence ({len(gold)})"])
            axis.legend(frameon=False, fontsize=8, title="clusters", title_fontsize=8)
            title = "Cluster utility: gold evidence vs distractors"
            if auc is not None:
                title += f"\nAUC {auc:.3f}"
            axis.set_ylabel("density")
        else:
            axis.hist(values, bins=bins, color=NEUTRAL, alpha=0.8)
            title = f"Cluster utility u_c ({len(values)} clusters)"
            axis.set_ylabel("clusters")
        axis.axvline(0.0, color="black", linewidth=0.8)
        axis.set_title(title)
        axis.set_xlabel("utility u_c = m_c − p̄  (> 0: came with success)")
        return _svg(figure, "utility")


def advantage_by_kind(values: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
    """``<svg>`` box plots of advantages per action kind, one stacked panel per quantity:
    ``values`` is panel title -> action kind -> that kind's values."""
    with _figure(rows=len(values)) as (figure, axes):
        for axis, (title, by_kind) in zip(axes, values.items()):
            kinds = [kind for kind, v in by_kind.items() if len(v)][::-1]  # first kind on top
            data = [list(by_kind[kind]) for kind in kinds]
            if data:
                labels = [f"{kind} ({len(v)})" for kind, v in zip(kinds, data)]
                axis.boxplot(data, tick_labels=labels, orientation="horizontal", widths=0.6,
                             flierprops={"markersize": 2, "alpha": 0.4},
                             medianprops={"color": "black"})
            axis.axvline(0.0, color="black", linewidth=0.6, alpha=0.6)
            axis.set_title(title)
        return _svg(figure, "advantage")


def potential_band(curves: Sequence[Sequence[float]],
                   ) -> tuple[list[float], list[float], list[float], int] | None:
    """``(low, median, high, count)``: the 25th, 50th and 75th percentiles of Phi at each step
    over ``curves`` (each from Phi(empty) = 0, an ended one keeping its last value), or None
    without curves."""
    if not curves:
        return None
    steps = max(len(curve) for curve in curves) + 1
    rows = [[0.0, *map(float, curve)] for curve in curves]
    grid = np.array([row + [row[-1]] * (steps - len(row)) for row in rows])
    low, median, high = np.percentile(grid, [25, 50, 75], axis=0)
    return low.tolist(), median.tolist(), high.tolist(), len(curves)


def potential_lines(curves: Sequence[Sequence[float]], succeeded: Sequence[bool],
                    whose: str = "") -> str:
    """``<svg>`` of Phi over the rollouts' steps (``curves``: per rollout, Phi after each
    action), per outcome (``succeeded``: y >= 0.5) its median and 25–75 % band; ``whose`` is
    added to the title."""
    with _figure() as (figure, (axis,)):
        for flag, colour, name in ((False, NEGATIVE, "failed"), (True, POSITIVE, "succeeded")):
            band = potential_band([c for c, ok in zip(curves, succeeded) if bool(ok) is flag])
            if band is None:
                continue
            low, median, high, count = band
            x = range(len(median))
            axis.fill_between(x, low, high, step="post", color=colour, alpha=0.2, linewidth=0)
            axis.plot(x, median, drawstyle="steps-post", color=colour, linewidth=1.6,
                      label=f"{name} ({count}): median, 25–75 %")
        axis.axhline(0.0, color="black", linewidth=0.6)
        axis.set_ylim(-1.0, 1.0)
        axis.set_xlabel("actions taken")
        axis.set_ylabel("potential Φ of the store")
        axis.set_title(f"Potential Φ = tanh(Σ u_c) over the rollouts{whose}")
        if axis.get_legend_handles_labels()[0]:  # no band (no rollout): an empty legend warns
            axis.legend(frameon=False, fontsize=8, loc="lower left")
        return _svg(figure, "potential")
