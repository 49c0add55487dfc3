"""The runaway flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from incidentkit import baselines
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows.common import (
    baseline_window,
    begin,
    findings_context,
    frames_of,
    notes_view,
    up_to,
)
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.runaway.findings import runaway_findings
from incidentkit.flows.runaway.flow import FLOW as DECLARED
from incidentkit.flows.runaway.settings import RunawaySettings
from incidentkit.flows.runaway.triage import RunawayReport, rebased, triage_runaway
from incidentkit.flows.settings import resolve

FLOW = "runaway"
SECTIONS = DECLARED.sections


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: object = "",
    baseline: str = "",
    max_llm_calls: int = 0,
    loop_exit_keys: list[str] | None = None,
    min_repeats: int = 0,
    price_per_1k_tokens: float = 0.0,
    baseline_engine: bool = True,
) -> tuple[Evidence, RunawaySettings]:
    """The incident narrowed to one app, and the flow's settings.

    ``max_llm_calls`` and ``loop_exit_keys`` come from the parameters, else ``[apps.<app>]``
    (neither is required: the limit error names the limit, and a loop without a known exit key
    is still found); ``min_repeats`` defaults to 3; ``baseline`` to none; ``as_of`` to the
    window's end, else the evidence's last record (:func:`~incidentkit.flows.common.judge`).
    ``baseline_engine`` computes the baseline where the events live (a database, or
    JSONL/Parquet files through DuckDB) when they can be; false loads the baseline's frames
    into pandas.
    """
    incident, found = begin(FLOW, evidence, app_name=app_name, as_of=as_of)
    settings = resolve(
        RunawaySettings,
        incident,
        found,
        max_llm_calls=max_llm_calls,
        loop_exit_keys=loop_exit_keys,
        min_repeats=min_repeats,
        price_per_1k_tokens=price_per_1k_tokens,
        baseline=baseline,
        baseline_engine=baseline_engine,
    )
    return up_to(incident, settings.as_of), settings


def triage(evidence: Evidence, settings: RunawaySettings) -> RunawayReport:
    """The flow on the app's evidence: counts, limit hits, loops, the recommendation, cost.

    With a baseline, its distribution is computed in the engine when the events can be
    (:mod:`incidentkit.baselines`: only a histogram of counts travels), else from its frames
    loaded into pandas; the report's ``baseline`` names which.
    """
    window = baseline_window(settings.baseline, settings.as_of)  # START/END, as setup wrote
    options: dict[str, Any] = {
        "as_of": settings.as_of,
        "max_llm_calls": settings.max_llm_calls,
        "loop_exit_keys": settings.loop_exit_keys,
        "min_repeats": settings.min_repeats,
        "price_per_1k_tokens": settings.price_per_1k_tokens,
    }
    frames = frames_of(evidence, DECLARED.reads)
    if window is None:
        return triage_runaway(frames, **options)
    span = f"the baseline {window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC"
    base_filters = replace(evidence.filters, window=window)
    spec = evidence.sources.get("events")
    if settings.baseline_engine and spec is not None and baselines.pushable(spec):
        report = triage_runaway(frames, **options)
        found = baselines.call_histogram(
            spec,
            base_filters,
            marked=report.flagged["invocation_id"].dropna().tolist(),
            environ=evidence.environ,
        )
        label = (
            f"{span} (computed in {found.where}: model-authored events; loop signatures as the "
            "incident window shows them)"
        )
        return rebased(report, found.value, label=label)
    baseline = frames_of(evidence.narrowed(base_filters), DECLARED.reads)
    return triage_runaway(
        frames, baseline=baseline, baseline_label=f"{span} (loaded into pandas)", **options
    )


def findings(report: RunawayReport, evidence: Evidence, settings: RunawaySettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects."""
    found = runaway_findings(report, **findings_context(evidence, settings, SECTIONS))
    return with_limits(found, evidence)


SHOWN: Mapping[str, tuple[str, ...]] = {
    "model_calls": (
        *("invocations", "p50", "p95", "p99", "max", "healthy_p99"),
        *("recommended_max_llm_calls", "configured_max_llm_calls", "source", "sources_agree"),
    ),
    "hits": ("invocation_id", "run_id", "model_calls", "limit", "evidence"),
    "loops": (
        *("invocation_id", "kind", "agents", "loop_agent", "exit_key", "tool", "args"),
        *("repeats", "error_string", "iterations", "model_calls", "hit_limit"),
    ),
    "cost": ("invocation_id", "kind", "model_calls", "tokens", "share", "cost"),
    "compactions": (
        *("session_id", "compactions", "prompt_tokens", "output_tokens", "total_tokens"),
        *("events_covered", "first", "last", "cost"),
    ),
    "sequence": ("ts", "author", "step", "what", "model_call", "prompt_tokens", "total_tokens"),
    "disagreements": ("invocation_id", "source", "model_calls", "other_source", "other_calls"),
}
"""The columns each view shows in the report; findings.json keeps every contract column."""


HEAD, TAIL = 20, 10
"""Steps of a long invocation shown: how the loop starts, and how it ends."""


def elided(frame: pd.DataFrame) -> pd.DataFrame:
    """The first :data:`HEAD` and last :data:`TAIL` rows, with a row saying how many are left
    out between them (a 500-call loop reads in thirty rows)."""
    if len(frame) <= HEAD + TAIL + 1:
        return frame
    gap = pd.DataFrame({"what": [f"... {len(frame) - HEAD - TAIL} more steps ..."]})
    return pd.concat([frame.head(HEAD), gap, frame.tail(TAIL)], ignore_index=True)


def table(report: RunawayReport, view: str) -> Any:
    """One view of the report (``"model_calls"``, ``"hits"``, ``"loops"``, ...) for people;
    a long invocation's steps are elided in the middle."""
    from incidentkit.report import table as people_table

    frame = getattr(report, view)
    return people_table(elided(frame) if view == "sequence" else frame, SHOWN[view])


def notes(report: RunawayReport) -> Any:
    """What the flow cannot tell from the sources present, as Markdown."""
    return notes_view(report.notes)
