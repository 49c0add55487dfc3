"""Steps every flow shares: its parameters resolved against the evidence, its rejects."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.manifest import Window
from incidentkit.times import utc_timestamp


def resolve_as_of(as_of: Any, evidence: Evidence) -> pd.Timestamp:
    """``as_of`` as a UTC timestamp; empty means the end of the evidence window."""
    if as_of is None or (isinstance(as_of, str) and not as_of.strip()):
        window = evidence.filters.window
        if window is None:
            raise ParameterError(
                "as_of is empty and the manifest has no window to take it from",
                value=as_of,
                fix="give the sweep time, e.g. -p as_of 2026-11-29T04:00:00Z "
                "(a scheduled report passes the time of the run)",
            )
        return window.end
    return utc_timestamp(as_of, what="as_of")


def log_context(evidence: Evidence, runs: pd.DataFrame, as_of: pd.Timestamp) -> Evidence:
    """The evidence over ``[earliest run start, as_of]`` (the app filter kept).

    The evidence itself when its window already is that span (no second read), else the same
    sources re-read with that window.
    """
    starts = runs["started_at"].dropna()
    if starts.empty or starts.min() >= as_of:
        return evidence
    window = Window(starts.min(), as_of + pd.Timedelta(microseconds=1))
    current = evidence.filters.window
    if current is not None and current.start <= window.start and current.end <= window.end:
        return evidence  # already covers every run's start and holds nothing after as_of
    return evidence.narrowed(replace(evidence.filters, window=window))


def flow_rejects(evidence: Evidence, sections: Iterable[str]) -> pd.DataFrame:
    """Rejected rows of the sources a flow reads (other sources do not weaken its verdict)."""
    rejects = evidence.rejects
    return rejects[rejects["source"].isin(list(sections))].reset_index(drop=True)
