"""The latency cliff flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from incidentkit import baselines
from incidentkit.errors import IncidentkitError
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows.common import (
    Frames,
    baseline_window,
    begin,
    findings_context,
    frames_of,
    notes_view,
    up_to,
)
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.latency_cliff.baseline import LatencyBaseline, from_values, summarised
from incidentkit.flows.latency_cliff.findings import latency_findings
from incidentkit.flows.latency_cliff.flow import FLOW as DECLARED
from incidentkit.flows.latency_cliff.latency import empty_latency
from incidentkit.flows.latency_cliff.settings import LatencySettings
from incidentkit.flows.latency_cliff.triage import (
    LatencyReport,
    latency_by_source,
    triage_latency,
    with_baseline,
    with_journal,
)
from incidentkit.flows.settings import resolve
from incidentkit.manifest import Window

FLOW = "latency_cliff"
SECTIONS = tuple(dict.fromkeys((*DECLARED.sections, "jfr")))
"""The sections whose rejects make the verdict incomplete (a JFR recording among them)."""


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: object = "",
    client_timeout_s: float = 0,
    bucket: str = "",
    baseline: str = "",
    baseline_engine: bool = True,
) -> tuple[Evidence, LatencySettings]:
    """The incident narrowed to one app, and the flow's settings.

    The app comes from the parameter, the manifest or the ledger; ``as_of`` from the window's
    end; ``client_timeout_s`` from ``[apps.<app>]`` (else 60); ``bucket`` defaults to 1 minute.
    The evidence is read up to ``as_of``: nothing after it is seen. ``baseline`` (a duration
    before ``as_of`` such as ``7d``, or ``START/END``) gives the latency of the days before;
    ``baseline_engine`` computes it where the ledger or events live when they can be.
    """
    incident, found = begin(FLOW, evidence, app_name=app_name, as_of=as_of)
    settings = resolve(
        LatencySettings,
        incident,
        found,
        client_timeout_s=client_timeout_s,
        bucket=bucket,
        baseline=baseline,
        baseline_engine=baseline_engine,
    )
    return up_to(incident, settings.as_of), settings


BASELINE_READS = tuple(frame for frame in DECLARED.reads if frame != "threads")
"""The frames a baseline loaded into pandas reads (no thread dumps)."""
PUSHED = {"ledger": "ledger", "events": "events"}
"""Latency source → the section an engine computes its baseline from."""


def triage(evidence: Evidence, settings: LatencySettings) -> LatencyReport:
    """The flow on the app's evidence: latency, the cliff, open invocations, stuck threads,
    and with a baseline, the latency of the days before from the same source."""
    frames = frames_of(evidence, DECLARED.reads)
    jfr = evidence.has("jfr")
    report = triage_latency(
        frames,
        as_of=settings.as_of,
        client_timeout_s=settings.client_timeout_s,
        bucket=settings.bucket_span,
        jfr_samples=evidence.frame("jfr_samples") if jfr else None,
        jfr_locks=evidence.frame("jfr_locks") if jfr else None,
    )
    if len(report.calls_run_twice) and evidence.has("journal"):
        report = _journal_checked(report, evidence, frames)
    window = baseline_window(settings.baseline, settings.as_of)
    if window is None or report.source is None:
        return report
    return with_baseline(report, _baseline(evidence, settings, window, report.source))


def _journal_checked(report: LatencyReport, evidence: Evidence, frames: Frames) -> LatencyReport:
    """``report`` with the calls ADK ran again checked against the journal, read only now (a
    journal that cannot be read stops nothing: the calls say no journal tells, and a note
    why)."""
    try:
        journal = evidence.journal
    except IncidentkitError as err:
        note = (
            f"The journal could not be read ({err}): nothing tells whether a call ADK ran "
            "again after a crash had its side effect twice."
        )
        return replace(report, notes=(*report.notes, note))
    return with_journal(report, frames, journal)


def _baseline(
    evidence: Evidence, settings: LatencySettings, window: Window, source: str
) -> LatencyBaseline:
    """The baseline window's latency from ``source``: in its engine when it can be, else
    from the window's frames in pandas."""
    span = f"{window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC"
    filters = replace(evidence.filters, window=window)
    spec = evidence.sources.get(PUSHED.get(source, ""))
    if settings.baseline_engine and spec is not None and baselines.pushable(spec):
        found = baselines.latency_summary(spec, filters, environ=evidence.environ)
        return from_values(found.value, label=f"{span} (computed in {found.where})", source=source)
    frames = frames_of(evidence.narrowed(filters), BASELINE_READS)
    latency = latency_by_source(frames).get(source, empty_latency())
    return summarised(
        latency,
        start=window.start,
        end=window.end,
        label=f"{span} (loaded into pandas)",
        source=source,
    )


def findings(report: LatencyReport, evidence: Evidence, settings: LatencySettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects."""
    found = latency_findings(report, **findings_context(evidence, settings, SECTIONS))
    return with_limits(found, evidence)


SHOWN: Mapping[str, tuple[str, ...]] = {
    "cliff": (
        *("at", "p50_before_ms", "p95_before_ms", "p50_after_ms", "p95_after_ms"),
        *("runs_before", "runs_after", "errors_before", "errors_after", "error_rate_changed"),
    ),
    "buckets": ("bucket", "runs", "ended", "open", "errors", "p50_ms", "p95_ms", "p99_ms"),
    "open": (
        *("invocation_id", "run_id", "started_at", "open_for_s"),
        *("last_event_kind", "tool", "call_id", "orphaned", "orphan_reason"),
    ),
    "by_last_event": ("last_event_kind", "tool", "count", "invocation_ids"),
    "stalls": (
        *("count", "pool", "state", "tool", "client", "app_frame", "top_frame", "threads"),
        *("blocking", "waits_for", "evidence"),
    ),
    "lock_owners": (
        *("owner", "activity", "owner_app_frame", "client", "lock_class", "count", "pool"),
        *("waiter_frame", "tool", "unchanged", "jfr_enters"),
    ),
    "spinning": ("count", "pool", "state", "cpu_share", "cpu_ms", "over_s", "app_frame", "threads"),
    "idle_threads": ("count", "pool", "state", "idle_reason", "app_frame", "top_frame"),
    "fix": ("step", "fix", "change"),  # tool and client are named in every change
    "disagreements": ("invocation_id", "source", "other_source", "ms", "other_ms", "detail"),
    "resumed": (
        *("invocation_id", "segments", "started_at", "pause_ms", "active_ms", "cause"),
        "detail",
    ),
    "calls_run_twice": (
        *("invocation_id", "tool", "call_id", "called_at", "resumed_at", "journal_key"),
        *("journal_status", "verdict", "detail"),
    ),
    "contention": ("class", "kind", "count", "blocked_ms", "max_ms", "threads", "owners"),
}
"""The columns each view shows in the report; findings.json keeps every column."""


def table(report: LatencyReport, view: str) -> Any:
    """One view of the report (``"cliff"``, ``"open"``, ``"stalls"``, ...) for people."""
    from incidentkit.report import table as people_table

    frame = getattr(report, view)
    return people_table(frame, SHOWN[view])


def notes(report: LatencyReport) -> Any:
    """What the flow cannot tell from the sources present, as Markdown."""
    return notes_view(report.notes)
