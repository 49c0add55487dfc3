"""The latency cliff flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows import FLOWS
from incidentkit.flows.common import (
    Settings,
    begin,
    findings_context,
    frames_of,
    notes_view,
    up_to,
)
from incidentkit.flows.common import setting as profile_setting
from incidentkit.flows.latency_cliff.findings import latency_findings
from incidentkit.flows.latency_cliff.triage import LatencyReport, triage_latency
from incidentkit.flows.limits import with_limits

FLOW = "latency_cliff"
SECTIONS = tuple(dict.fromkeys((*FLOWS[FLOW].sections, "jfr")))
"""The sections whose rejects make the verdict incomplete (a JFR recording among them)."""
DEFAULT_TIMEOUT_S = 60
DEFAULT_BUCKET = "1min"


def _bucket(text: Any) -> pd.Timedelta:
    try:
        bucket: pd.Timedelta | None = pd.Timedelta(str(text))
    except ValueError:
        bucket = None
    if bucket is None or pd.isna(bucket) or bucket <= pd.Timedelta(0):
        raise ParameterError(
            "bucket is not a positive duration",
            value=text,
            fix='give a pandas duration such as "1min", "30s" or "5min"',
        )
    return bucket


def _timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ParameterError(
            "client_timeout_s is not a positive number of seconds",
            value=value,
            fix="give the timeout after which a client gives up, e.g. 60",
        )
    return float(value)


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: Any = "",
    client_timeout_s: float = 0,
    bucket: str = "",
) -> tuple[Evidence, Settings]:
    """The incident narrowed to one app, and the flow's settings.

    The app comes from the parameter, the manifest or the ledger; ``as_of`` from the window's
    end; ``client_timeout_s`` from ``[apps.<app>]`` (else 60); ``bucket`` defaults to 1 minute.
    The evidence is read up to ``as_of``: nothing after it is seen.
    """
    incident, app, values, sources = begin(FLOW, evidence, app_name=app_name, as_of=as_of)
    timeout, sources["client_timeout_s"] = profile_setting(
        incident, FLOW, app, "client_timeout_s", client_timeout_s, default=DEFAULT_TIMEOUT_S
    )
    values["client_timeout_s"] = _timeout(timeout)
    values["bucket"] = str(bucket or DEFAULT_BUCKET).strip()
    _bucket(values["bucket"])  # a bad duration fails here, before any triage
    sources["bucket"] = "parameter" if bucket else "default"
    return up_to(incident, values["as_of"]), Settings(FLOW, app, values, sources)


def triage(evidence: Evidence, settings: Settings) -> LatencyReport:
    """The flow on the app's evidence: latency, the cliff, open invocations, stuck threads."""
    frames = frames_of(
        evidence, ("runs", "events", "calls", "responses", "spans", "diagnostics", "threads")
    )
    jfr = evidence.has("jfr")
    return triage_latency(
        frames,
        as_of=settings["as_of"],
        client_timeout_s=settings["client_timeout_s"],
        bucket=_bucket(settings["bucket"]),
        jfr_samples=evidence.frame("jfr_samples") if jfr else None,
        jfr_locks=evidence.frame("jfr_locks") if jfr else None,
    )


def findings(report: LatencyReport, evidence: Evidence, settings: Settings) -> Findings:
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
        *("last_event_kind", "tool", "call_id"),
    ),
    "by_last_event": ("last_event_kind", "tool", "count", "invocation_ids"),
    "stalls": (
        *("count", "pool", "state", "tool", "client", "app_frame", "top_frame", "threads"),
        "evidence",
    ),
    "idle_threads": ("count", "pool", "state", "idle_reason", "app_frame", "top_frame"),
    "fix": ("step", "fix", "change"),  # tool and client are named in every change
    "disagreements": ("invocation_id", "source", "other_source", "ms", "other_ms", "detail"),
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
