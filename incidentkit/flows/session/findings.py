"""The session flow's findings: the errors that vanish (with the alert to add), errors per
agent and tool, the session's events, and its overlapping invocations.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

from typing import Unpack

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, FindingsContext, Severity, rows_of
from incidentkit.flows._markers import without_marker_invocations
from incidentkit.flows.session.errors import ALERT, COUNT_COLUMNS, EVENT_KIND
from incidentkit.flows.session.triage import SessionReport
from incidentkit.flows.vanished_state.overlaps import FIX as OVERLAP_FIX

FLOW = "session"
ERROR_ROW = ["location", "invocation_id", "kind", "error_code", "message"]
ERROR_EXTRA = ["ts", "session_id", "agent", "tool", "run_outcome", "in_session"]
EVENT_ROW = ["ts", "seq", "event_id", "invocation_id", "author", "calls", "responses", "delta"]
EVENT_EXTRA = ["transfer", "error_code", "final", "partial", "kind", "label"]
EVENT_MARKS = ["compacted_by", "rewound_by"]
MARKER_COUNTS = {"compactions": "compaction", "rewinds": "rewind", "checkpoints": "checkpoint"}
"""Summary counters of the markers in the session, and the kind each counts."""


def invocations(dump: pd.DataFrame) -> int:
    """The session's invocations: a marker's own invocation id (a compaction's, a rewind's)
    is none, as ADK never ran one under it."""
    return int(without_marker_invocations(dump, dump)["invocation_id"].nunique())


def _markers(dump: pd.DataFrame) -> str:
    """The markers of the dump in words (``; 4 compaction(s), 1 rewind(s) undoing 8
    event(s)``), empty when it holds none."""
    counts = dump["kind"].value_counts()
    said = [f"{int(counts[kind])} {kind}(s)" for kind in MARKER_COUNTS.values() if kind in counts]
    undone = int(dump["rewound_by"].notna().sum())
    if undone:
        said.append(f"{undone} event(s) undone by a rewind")
    return "; " + ", ".join(said) if said else ""


def _errors(report: SessionReport, limit: int | None) -> Finding:
    errors = report.errors
    quiet = report.quiet
    mine = errors.loc[errors["in_session"]]
    coded = quiet.loc[quiet["kind"].eq(EVENT_KIND)]
    lost = quiet.loc[quiet["kind"].eq("rx.undeliverable")]
    parts = []
    if len(coded):
        codes = ", ".join(sorted(set(coded["error_code"].dropna())))
        parts.append(
            f"{len(coded)} event(s) carry an error code ({codes}) on runs that did not fail"
        )
    if len(lost):
        parts.append(f"{len(lost)} undeliverable RxJava error(s)")
    loud = errors.loc[~errors.index.isin(quiet.index)]
    failed = int(loud["kind"].eq(EVENT_KIND).sum())  # an error event of a run that failed
    thrown = len(loud) - failed
    if failed:
        codes = ", ".join(sorted(set(loud.loc[loud["kind"].eq(EVENT_KIND), "error_code"].dropna())))
        parts.append(f"{failed} event(s) carry the error ({codes}) of a run that failed")
    if thrown:
        parts.append(f"{thrown} logged model/tool/run error(s)")
    title = (
        "; ".join(parts) + f" ({len(mine)} in session {report.ref.session_id})"
        if parts
        else f"no error in session {report.ref.session_id} or around it"
    )
    return Finding(
        f"{FLOW}/errors",
        Severity.WARNING if len(quiet) or len(loud) else Severity.INFO,
        title,
        f"Errors of the app over {report.errors_window}, and of the session wherever they fall "
        "(in_session). An error code on an event is the model reporting a problem (a cut or "
        "blocked answer) while nothing was thrown; an undeliverable error had no subscriber "
        "left (the client hung up). Neither reaches an exception-based alert.",
        ALERT if len(errors) else "None.",
        rows_of(errors, [*ERROR_ROW, *ERROR_EXTRA], limit=limit),
        len(errors),
    )


def _counts(report: SessionReport, limit: int | None) -> Finding | None:
    if report.counts.empty:
        return None
    return Finding(
        f"{FLOW}/error-counts",
        Severity.INFO,
        f"errors per kind, agent and tool: {len(report.counts)} group(s)",
        "The same errors, counted: where they cluster is where to look first.",
        "None: the counts are for the record.",
        rows_of(report.counts, COUNT_COLUMNS, limit=limit),
        len(report.counts),
    )


def _events(report: SessionReport, limit: int | None) -> Finding:
    dump = report.dump
    return Finding(
        f"{FLOW}/events",
        Severity.INFO,
        f"session {report.ref.session_id}: {len(dump)} stored event(s) in "
        f"{invocations(dump)} invocation(s){_markers(dump)}",
        "The session dump, one row per stored event in session order (the text form is in "
        "the report and printed by incidentkit session). ADK 2.x markers are labelled for what "
        "they are (label): a compaction (summary) with the span it summarised, a rewind with "
        "the invocations it undid, a checkpoint of a resumable app; none is a turn, and a "
        "compaction's or a rewind's own invocation id is no invocation. Events a rewind "
        "undid name it (rewound_by): they stay stored, but ADK drops them when it reads the "
        "session.",
        "None: the dump is for the record.",
        rows_of(dump, [*EVENT_ROW, *EVENT_EXTRA, *EVENT_MARKS], limit=limit),
        len(dump),
    )


def _overlaps(report: SessionReport, limit: int | None) -> Finding | None:
    pairs = report.overlaps
    if pairs.empty:
        return None
    return Finding(
        f"{FLOW}/overlapping-invocations",
        Severity.WARNING,
        f"{len(pairs)} pair(s) of invocations ran at the same time on session "
        f"{report.ref.session_id}",
        "Both start from the same session snapshot: the later write of a key wins silently. "
        "The vanished-state flow says which keys it cost.",
        OVERLAP_FIX,
        rows_of(pairs, None, limit=limit),
        len(pairs),
    )


def session_findings(report: SessionReport, **context: Unpack[FindingsContext]) -> Findings:
    """The findings of the session flow, from :func:`.triage.triage_session`, with ``context``
    (:class:`~incidentkit.findings.FindingsContext`).

    Verdict: INCOMPLETE_EVIDENCE when ``rejects`` is not empty; else ACTION_NEEDED when errors
    vanished or were logged, or invocations overlapped on the session; else CLEAN.
    """
    limit = context.get("row_limit", ROW_LIMIT)
    items = (
        _errors(report, limit),
        _counts(report, limit),
        _overlaps(report, limit),
        _events(report, limit),
    )
    errors = report.errors
    summary = {
        "events": len(report.dump),
        "invocations": invocations(report.dump),
        "errors": len(errors),
        "session_errors": int(errors["in_session"].sum()),
        "error_code_events": int(errors["kind"].eq(EVENT_KIND).sum()),
        "quiet_errors": len(report.quiet),
        "undeliverable": int(errors["kind"].eq("rx.undeliverable").sum()),
        "overlapping_invocations": len(report.overlaps),
        **{name: int(report.dump["kind"].eq(kind).sum()) for name, kind in MARKER_COUNTS.items()},
        "rewound_events": int(report.dump["rewound_by"].notna().sum()),
    }
    return Findings.build(FLOW, items, summary, as_of=report.as_of, **context)
