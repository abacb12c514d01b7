"""Outcome + process advantages, A_{i,t} = A_out,i + omega * A_proc,i,t (docs/method.md §5), and
their scatter onto the tokens of each action."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def segment_normalize(
    values: np.ndarray, starts: np.ndarray, eps: float = 1e-6, by_std: bool = True
) -> np.ndarray:
    """(x - mean) / (std + eps) over each segment of float ``values`` (n,) at once, or x - mean when
    ``by_std`` is False (docs/method.md §5). Sample std (ddof = 1, as ``torch.std`` in verl and
    OpenRLHF); float64 (n,), zeros for a segment of one value or of equal values. Segment k is
    ``values[starts[k]:starts[k + 1]]`` (``starts``: int (k,), rising from 0). Sums are exact
    (``math.fsum``), so no result depends on order; values above 2**500 are scaled by a power of
    two first. ValueError for a non-finite value (naming its segment) or bad ``starts``."""
    values = np.asarray(values, dtype=np.float64)
    starts = np.asarray(starts, dtype=np.int64)
    n = values.size
    if len(starts) and (starts[0] != 0 or np.any(np.diff(starts) < 0) or starts[-1] > n):
        raise ValueError(f"starts must rise from 0 to at most {n}, got {starts.tolist()}")
    if not np.all(np.isfinite(values)):
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        segment = int(np.searchsorted(starts, bad, side="right")) - 1
        raise ValueError(f"values must be finite, got {float(values[bad])!r} in segment {segment}")
    out = np.zeros(n, dtype=np.float64)
    if not len(starts) or not n:
        return out
    ends = np.append(starts[1:], n)
    sizes = ends - starts
    # Per segment: the scaling exponent, the exact mean, and whether it is constant (-> zeros).
    segment_of = np.repeat(np.arange(len(starts)), sizes)
    nonempty = sizes > 0
    differs = values != values[starts[segment_of]]  # from the first value of its segment
    live = np.bincount(segment_of, weights=differs, minlength=len(starts)) > 0
    if not live.any():
        return out
    peak = np.zeros(len(starts))
    peak[nonempty] = np.maximum.reduceat(np.abs(values), starts[nonempty])
    exponent = np.frexp(peak)[1].astype(np.int64)
    exponent = np.where(exponent > 500, exponent, 0)
    scaled = np.ldexp(values, -exponent[segment_of])
    listed = scaled.tolist()
    bounds = list(zip(starts.tolist(), ends.tolist()))
    mean = np.zeros(len(starts))
    for k in np.flatnonzero(live).tolist():
        a, b = bounds[k]
        mean[k] = math.fsum(listed[a:b]) / (b - a)
    centred = scaled - mean[segment_of]
    keep = live[segment_of]
    if not by_std:
        with np.errstate(over="ignore"):
            out[keep] = np.ldexp(centred, exponent[segment_of])[keep]
        return out
    squares = (centred * centred).tolist()
    divisor = np.ones(len(starts))
    for k in np.flatnonzero(live).tolist():
        a, b = bounds[k]
        std = math.sqrt(math.fsum(squares[a:b]) / (b - a - 1))
        divisor[k] = std + math.ldexp(eps, -int(exponent[k]))
    out[keep] = (centred / divisor[segment_of])[keep]
    return out


def total_advantages(
    outcome_advantage: np.ndarray,
    process_advantage: np.ndarray,
    rollout_index: np.ndarray,
    omega: float = 0.5,
) -> np.ndarray:
    """A_{i,t} = A_out,i + omega * A_proc,i,t, float64 (N,), for each action (docs/method.md §5).
    ``outcome_advantage``: (G,); ``process_advantage``: (N,); ``rollout_index``: int (N,) in
    [0, G). omega = 0 returns exactly ``outcome_advantage[rollout_index]``."""
    outcome = np.asarray(outcome_advantage, dtype=np.float64)[np.asarray(rollout_index)]
    if omega == 0.0:
        return outcome
    return outcome + omega * np.asarray(process_advantage, dtype=np.float64)


def scatter_to_spans(
    values: np.ndarray, spans: np.ndarray, length: int, response_mask: np.ndarray | None = None
) -> np.ndarray:
    """Put each action's value on every token of its span: float32 (``length``,), 0 elsewhere.
    ``values``: float (n,); ``spans``: int (n, 2) ``[start, end)`` (OpenRLHF's ``action_ranges``),
    clipped to the row; tokens where ``response_mask`` (T,) is 0 get 0.
    ValueError when values and spans differ in count, or a span is reversed or overlaps another."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if len(values) != len(spans):
        raise ValueError(f"got {len(values)} values for {len(spans)} spans; need one per action")
    if np.any(spans[:, 1] < spans[:, 0]):
        raise ValueError(f"a span ends before it starts: {spans.tolist()}")
    order = np.argsort(spans[:, 0], kind="stable")
    ordered = spans[order]
    if len(ordered) > 1 and np.any(ordered[1:, 0] < ordered[:-1, 1]):
        raise ValueError(f"spans overlap: {spans.tolist()}")
    out = np.zeros(length, dtype=np.float32)
    clipped = np.clip(spans, 0, length)
    for value, (start, end) in zip(values, clipped):
        out[start:end] = value
    if response_mask is not None:
        mask = np.asarray(response_mask).astype(bool).reshape(-1)
        if mask.shape != (length,):
            raise ValueError(f"response_mask has shape {mask.shape}, expected ({length},)")
        out[~mask] = 0.0
    return out


def turns_problem(turns: int, actions: int) -> str | None:
    """Why ``turns`` runs of 1s cannot stand for ``actions`` actions (None when they can)."""
    if turns > actions:
        return f"response_mask has {turns} turns but only {actions} actions are listed"
    if turns < actions:
        return (
            f"response_mask has {turns} turns for {actions} actions: the turn boundaries cannot "
            "be recovered"
        )
    return None


def scatter_rows_to_turns(
    values: Sequence[np.ndarray], response_mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Span layout, R rows in one vectorised pass: the k-th run of 1s of row r of
    ``response_mask`` (R, T) gets ``values[r][k]``. Returns (float32 (R, T) tokens, int64 (R,)
    turns); the caller checks each row's turns with :func:`turns_problem` (turns beyond the
    values get 0; with fewer turns than actions, give spans to :func:`scatter_to_spans`)."""
    mask = np.asarray(response_mask, dtype=bool)
    if mask.ndim != 2 or mask.shape[0] != len(values):
        raise ValueError(f"response_mask must be (R, T) with R = {len(values)}, got {mask.shape}")
    starts = mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1]
    turn = np.cumsum(starts, axis=1) - 1
    turns = starts.sum(axis=1).astype(np.int64)
    width = max([len(v) for v in values] + [1])
    table = np.zeros((len(values), width + 1), dtype=np.float64)  # the last column stays 0
    for r, row_values in enumerate(values):
        table[r, : len(row_values)] = row_values
    picked = table[np.arange(len(values))[:, None], np.clip(turn, 0, width)]
    return np.where(mask, picked, 0.0).astype(np.float32), turns
