"""The orphan flow's findings: one Finding per class, trap and side view, with its rows."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, Severity, TimeLike, rows_of
from incidentkit.flows._resume import run_twice_item
from incidentkit.flows.orphans.triage import Action, JournalVerdict, OrphanReport

NAMED = 3
"""How many run ids (business keys, for duplicate effects) a finding's title names; the rest
are counted ("and 2 more")."""
_NAME_CHARS = 64
"""An id longer than this is cut, with an ellipsis, in a title."""
_NAMED_BY: Mapping[str, tuple[str, str]] = {
    "orphans/call-id-journal": ("run_id", "in run(s) "),
    "orphans/duplicate-effects": ("business_key", ""),
}
"""The column that names what a finding is about, and the words before the names, where it is
not the rows' ``run_id``."""
_RUN_ROW = ["run_id", "session_id", "invocation_id", "orphan_class", "action_kind"]
_RUN_ROW += ["unanswered_calls", "journal_verdict", "action", "reason", "owner", "attempts"]
_RUN_ROW += ["lease_until"]
# Finding id -> (severity, title after the count, what it means, what to do).
_ORPHAN_TEXT: Mapping[str, tuple[Severity, str, str, str]] = {
    "orphans/rejects": (
        Severity.WARNING,
        "evidence row(s) could not be read",
        "Rows the loaders rejected are missing from every view below.",
        "Fix or re-export the rows listed, then run the flow again.",
    ),
    "orphans/not-started": (
        Severity.WARNING,
        "orphaned run(s) never reached the log",
        "No user event of the run is stored (or its session is gone): the worker died before "
        "the first append (W1).",
        "Re-drive each from the ledger: replay the stored request.",
    ),
    "orphans/model-inflight": (
        Severity.WARNING,
        "orphaned run(s) lost a model call in flight",
        "Every call of the invocation is answered and the last event is not the terminal "
        "agent's final response: a model call was running when the worker died (W2).",
        "Re-drive each: a new invocation in the same session with a continuation message.",
    ),
    "orphans/tool-unanswered": (
        Severity.CRITICAL,
        "orphaned run(s) died with a tool call unanswered",
        "The log cannot tell W3 (the tool never ran) from W4 (it ran, the response was lost); "
        "the side-effect journal decides, call by call.",
        "Follow each row's action: re-drive on W3, ask the downstream system on W4, replay on "
        "DONE.",
    ),
    "orphans/paused": (
        Severity.WARNING,
        "orphaned run(s) paused on a long-running call",
        "The last event carries long-running call ids: the run waits for an approval, but its "
        "worker died before recording PAUSED.",
        "Mark each PAUSED; do not re-drive.",
    ),
    "orphans/actually-done": (
        Severity.WARNING,
        "orphaned run(s) that actually finished",
        "The terminal agent's final response is stored; the worker died between it and the "
        "ledger update.",
        "Mark each DONE; re-driving would answer the user twice.",
    ),
    "orphans/unknown": (
        Severity.WARNING,
        "orphaned run(s) the log cannot classify",
        "The ledger and the log do not fit together (an invocation id with no stored event, or "
        "no started_at to find the user event).",
        "Investigate each by hand before re-driving.",
    ),
    "orphans/call-id-journal": (
        Severity.CRITICAL,
        "unanswered call(s) matched in the journal only by function call id",
        "A journal keyed by call id cannot protect a re-drive: the re-driven call has a new id, "
        "so the side effect would run again.",
        "Settle each with the downstream system before re-driving; key the journal by business "
        "identity.",
    ),
    "orphans/crash-loops": (
        Severity.CRITICAL,
        "run(s) at or over the attempts cap",
        "Each was recovered the cap's number of times and died again: another re-drive may "
        "kill the next worker too.",
        "Park each and alert; copy its dead-letter record to the dead-letter queue.",
    ),
    "orphans/duplicate-effects": (
        Severity.CRITICAL,
        "business key(s) applied more than once",
        "One business identity has several effects (by the journal, or by answered calls that "
        "no journal entry guards).",
        "Tell the owner of each downstream system; undo or refund the extra effects.",
    ),
    "orphans/status-disagreements": (
        Severity.WARNING,
        "ledger row(s) whose status the log contradicts",
        "The ledger's status and the event log disagree: a ledger update was lost or wrong.",
        "Correct each ledger row as its detail says.",
    ),
    "orphans/in-flight-check": (
        Severity.WARNING,
        "non-terminal run(s) that are not orphans but need a look",
        "PAUSED or lease-less ledger rows whose log does not match the ledger.",
        "Follow each row's action.",
    ),
    "orphans/waiting": (
        Severity.INFO,
        "paused run(s) waiting for approval",
        "Paused cleanly on a long-running call; not orphans.",
        "None: they wait for a person.",
    ),
    "orphans/live-leases": (
        Severity.INFO,
        "run(s) with a live lease",
        "A worker holds the lease at as_of; not orphans.",
        "None.",
    ),
}


def orphan_findings(
    report: OrphanReport,
    *,
    title: str | None = None,
    window: tuple[TimeLike, TimeLike] | None = None,
    rejects: pd.DataFrame | None = None,
    row_limit: int | None = ROW_LIMIT,
    app_name: str | None = None,
    settings_from: Mapping[str, str] | None = None,
) -> Findings:
    """The findings of the orphan flow, from :func:`.triage.classify_orphans`.

    Verdict: INCOMPLETE_EVIDENCE when the ledger is empty, a run is UNKNOWN, or ``rejects``
    (the loaders' unread rows) is not empty; else ACTION_NEEDED when any finding needs
    action; else CLEAN.
    """
    orphans, calls, in_flight = report.orphans, report.calls, report.in_flight
    trap = calls[calls["matched_by"] == "function_call_id"]
    proofs: dict[str, tuple[pd.DataFrame, list[str] | None]] = {
        "orphans/rejects": (rejects if rejects is not None else pd.DataFrame(), None)
    }
    for cls in report.class_counts():
        fid = "orphans/" + cls.lower().replace("_", "-")
        proofs[fid] = (orphans[orphans["orphan_class"] == cls], _RUN_ROW)
    proofs |= {
        "orphans/call-id-journal": (trap, None),
        "orphans/crash-loops": (report.crash_loops, None),
        "orphans/duplicate-effects": (report.duplicate_effects, None),
        "orphans/status-disagreements": (report.status_disagreements, None),
        "orphans/in-flight-check": (
            in_flight[~in_flight["action_kind"].isin([Action.WAIT, Action.NONE])],
            _RUN_ROW,
        ),
        "orphans/waiting": (in_flight[in_flight["action_kind"] == Action.WAIT], _RUN_ROW),
        "orphans/live-leases": (report.live_leases, None),
    }
    items = [
        Finding(
            fid,
            severity,
            f"{len(frame)} {what}{_names(fid, frame)}",
            detail,
            action,
            rows_of(frame, columns, limit=row_limit),
            len(frame),
        )
        for fid, (severity, what, detail, action) in _ORPHAN_TEXT.items()
        for frame, columns in [proofs[fid]]
        if len(frame)
    ]
    twice = run_twice_item("orphans", report.calls_run_twice, row_limit)
    counts = report.class_counts()
    verdicts = calls["journal_verdict"].value_counts()
    summary = {
        "runs": report.ledger_runs,
        "orphans": len(orphans),
        **{f"orphans.{cls}": n for cls, n in counts.items()},
        "in_flight": len(in_flight),
        "live_leases": len(report.live_leases),
        "unanswered_calls": len(calls),
        **{f"calls.{v}": int(verdicts.get(v, 0)) for v in JournalVerdict},
        "calls.matched_by_call_id": len(trap),
        "crash_loops": len(report.crash_loops),
        "duplicate_effects": len(report.duplicate_effects),
        "status_disagreements": len(report.status_disagreements),
        "calls_run_twice": len(report.calls_run_twice),
        "rejects": 0 if rejects is None else len(rejects),
    }
    incomplete = report.ledger_runs == 0 or counts["UNKNOWN"] > 0 or summary["rejects"] > 0
    parameters = {
        **({"app_name": app_name} if app_name is not None else {}),
        "as_of": report.as_of,
        "terminal_agent": list(report.terminal_agents),
        "key_templates": dict(report.key_templates),
        "attempts_cap": report.attempts_cap,
        **({"settings_from": dict(settings_from)} if settings_from else {}),
    }
    return Findings.build(  # its rejects item is among its own (none given here: not twice)
        "orphans",
        [_empty_ledger(report), *items, twice],
        summary,
        incomplete=incomplete,
        as_of=report.as_of,
        title=title,
        window=window,
        parameters=parameters,
        row_limit=row_limit,
    )


def _empty_ledger(report: OrphanReport) -> Finding | None:
    if report.ledger_runs:
        return None
    return Finding(
        "orphans/empty-ledger",
        Severity.WARNING,
        "the ledger holds no run",
        "Nothing can be classified without the run ledger (agent_run).",
        "Check the [ledger] source and the window of the evidence manifest.",
    )


def _named(values: pd.Series, limit: int = NAMED) -> str:
    """The first ``limit`` distinct values, in order, joined for a title ("a, b, c and 2
    more"); "" when there are none."""
    ids = list(dict.fromkeys(str(v) for v in values.dropna()))
    cut = [v if len(v) <= _NAME_CHARS else v[: _NAME_CHARS - 1] + "…" for v in ids[:limit]]
    more = len(ids) - len(cut)
    return ", ".join(cut) + (f" and {more} more" if more > 0 else "")


def _names(fid: str, frame: pd.DataFrame) -> str:
    """What a finding's title adds after its count: the runs (or keys) behind it."""
    column, lead = _NAMED_BY.get(fid, ("run_id", ""))
    if column not in frame.columns:
        return ""
    names = _named(frame[column])
    return f": {lead}{names}" if names else ""
