"""The latency of the days before: "was the cliff a deploy?".

A baseline window (``baseline = "7d"``) gives the p50/p95/p99 of the runs that ended in it,
from the same source the incident's latency comes from (ledger or event log, computed where
they live by :mod:`incidentkit.baselines`; other sources, or ``baseline_engine = false``,
from their frames in pandas). :func:`compared` says whether the window started at the
baseline's level, so the change began at the cliff, or was slow before it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from incidentkit.flows.latency_cliff.latency import SOURCE_LABELS

ABOVE = 1.5
"""A p95 this many times the baseline's or more is above it (the cliff's own ratio)."""


@dataclass(frozen=True)
class LatencyBaseline:
    """The baseline window's latency: runs, ended runs, errors, percentiles of the ended."""

    label: str
    """The window and where it was computed, for the findings text."""
    source: str
    runs: int
    ended: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def from_values(values: Mapping[str, float], *, label: str, source: str) -> LatencyBaseline:
    """A baseline from an engine's summary (``baselines.latency_summary``)."""
    return LatencyBaseline(
        label=label,
        source=source,
        runs=int(values["runs"]),
        ended=int(values["ended"]),
        errors=int(values["errors"]),
        p50_ms=float(values["p50_ms"]),
        p95_ms=float(values["p95_ms"]),
        p99_ms=float(values["p99_ms"]),
    )


def summarised(
    latency: pd.DataFrame,
    *,
    start: pd.Timestamp,
    end: pd.Timestamp,
    label: str,
    source: str,
) -> LatencyBaseline:
    """A baseline from a latency frame (``latency.LATENCY_COLUMNS``): the runs started in
    ``[start, end)``, as the engine queries count them."""
    runs = latency.loc[latency["started_at"].ge(start) & latency["started_at"].lt(end)]
    ended = runs["ms"].dropna().to_numpy(dtype=float)

    def pct(q: float) -> float:
        return float(np.quantile(ended, q)) if len(ended) else math.nan

    return LatencyBaseline(
        label=label,
        source=source,
        runs=len(runs),
        ended=len(ended),
        errors=int(runs["error"].sum()),
        p50_ms=pct(0.5),
        p95_ms=pct(0.95),
        p99_ms=pct(0.99),
    )


def _s(ms: float) -> str:
    return "unknown" if math.isnan(ms) else f"{ms / 1000:.1f} s"


def compared(baseline: LatencyBaseline, *, before_ms: float | None, after_ms: float | None) -> str:
    """The baseline in words, against the window's p95 before and after the cliff (or the
    window's p95 as ``after_ms`` when there is no cliff)."""
    rate = f"{baseline.errors} errors in {baseline.runs} runs"
    source = SOURCE_LABELS.get(baseline.source, baseline.source)
    text = (
        f"Baseline, {baseline.label}, from the {source}: "
        f"p95 {_s(baseline.p95_ms)}, p50 {_s(baseline.p50_ms)}, p99 {_s(baseline.p99_ms)} over "
        f"{baseline.ended} runs that ended; {rate}."
    )
    if math.isnan(baseline.p95_ms) or baseline.p95_ms <= 0:
        return text + " No run ended in it: nothing to compare."
    if before_ms is None:
        if after_ms is None or math.isnan(after_ms):
            return text
        ratio = after_ms / baseline.p95_ms
        level = "above" if ratio >= ABOVE else "at"
        return text + f" The window's p95 {_s(after_ms)} is {ratio:.1f} x it: {level} the baseline."
    ratio_before = before_ms / baseline.p95_ms
    ratio_after = (after_ms or math.nan) / baseline.p95_ms
    if ratio_before < ABOVE:
        return text + (
            f" Before the cliff the p95 ({_s(before_ms)}) was at the baseline's level "
            f"({ratio_before:.1f} x) and after it {ratio_after:.1f} x: the change began at the "
            "cliff. Check what was deployed or changed then (the app, a tool's dependency)."
        )
    return text + (
        f" Already before the cliff the p95 ({_s(before_ms)}) was {ratio_before:.1f} x the "
        "baseline's: the cliff is not the first change; look before the window."
    )
