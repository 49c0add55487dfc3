"""The orphan flow's findings document, from small hand-built reports."""

from __future__ import annotations

from typing import Any

import pandas as pd

from incidentkit.findings import Findings, Severity, Verdict
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.triage import OrphanReport, classify_orphans
from incidentkit.frames import build, empty, rejects_frame

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(minutes=10)


def event(session: str, inv: str, seq: int, author: str, *, final: bool = False) -> dict[str, Any]:
    return {
        "event_id": f"{session}-{seq}",
        "app_name": "a",
        "user_id": "u",
        "session_id": session,
        "invocation_id": inv,
        "seq": seq,
        "ts": T0 + pd.Timedelta(seconds=seq + 1),
        "author": author,
        "long_running_tool_ids": (),
        "final_response": final,
    }


def ledger(run_id: str, session: str, inv: str | None, status: str, **f: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "app_name": "a",
        "user_id": "u",
        "session_id": session,
        "invocation_id": inv,
        "request": {"text": "hi"},
        "status": status,
        "owner": "w1",
        "lease_until": T0 + pd.Timedelta(minutes=1),
        "attempts": 1,
        "started_at": T0,
        "updated_at": T0,
        **f,
    }


def report(runs: list[dict[str, Any]], events: list[dict[str, Any]]) -> OrphanReport:
    return classify_orphans(
        build("runs", runs),
        build("events", events),
        empty("calls"),
        empty("responses"),
        empty("journal"),
        as_of=AS_OF,
        terminal_agent="notify_agent",
    )


def test_orphan_findings_for_an_incident() -> None:
    events = [
        event("s1", "i1", 0, "user"),
        event("s2", "i2", 0, "user"),
        event("s2", "i2", 1, "notify_agent", final=True),
    ]
    runs = [ledger("r1", "s1", "i1", "RUNNING"), ledger("r2", "s2", "i2", "RUNNING", attempts=4)]
    findings = orphan_findings(report(runs, events), title="incident 7")
    assert findings.verdict is Verdict.ACTION_NEEDED
    assert [(i.id, i.severity, i.title, i.count) for i in findings.items] == [
        (
            "orphans/model-inflight",
            Severity.WARNING,
            "1 orphaned run(s) lost a model call in flight: r1",
            1,
        ),
        (
            "orphans/actually-done",
            Severity.WARNING,
            "1 orphaned run(s) that actually finished: r2",
            1,
        ),
        (
            "orphans/status-disagreements",
            Severity.WARNING,
            "1 ledger row(s) whose status the log contradicts: r2",
            1,
        ),
    ]
    assert findings.items[0].rows[0]["run_id"] == "r1"
    assert findings.items[0].rows[0]["lease_until"] == "2026-11-29T03:01:00Z"
    assert findings.summary["orphans"] == 2
    assert findings.summary["orphans.ACTUALLY_DONE"] == 1
    assert findings.evidence.as_of == "2026-11-29T03:10:00Z"
    assert findings.evidence.parameters["terminal_agent"] == ["notify_agent"]
    assert Findings.from_json(findings.to_json()) == findings


def test_orphan_findings_clean_when_everything_finished() -> None:
    events = [event("s1", "i1", 0, "user"), event("s1", "i1", 1, "notify_agent", final=True)]
    live = ledger("r2", "s1", "i1", "RUNNING", lease_until=AS_OF + pd.Timedelta(seconds=9))
    findings = orphan_findings(report([ledger("r1", "s1", "i1", "DONE"), live], events))
    assert findings.verdict is Verdict.CLEAN
    assert not findings.needs_action
    assert [item.id for item in findings.items] == ["orphans/live-leases"]


def test_orphan_findings_incomplete_evidence() -> None:
    empty_ledger = orphan_findings(report([], []))
    assert empty_ledger.verdict is Verdict.INCOMPLETE_EVIDENCE
    assert empty_ledger.items[0].id == "orphans/empty-ledger"

    unknown = orphan_findings(
        report([ledger("r1", "s1", "i-lost", "RUNNING")], [event("s1", "i1", 0, "user")])
    )
    assert unknown.verdict is Verdict.INCOMPLETE_EVIDENCE

    rejects = rejects_frame(
        [{"source": "events", "location": "events.jsonl:3", "reason": "malformed JSON", "raw": "{"}]
    )
    events = [event("s1", "i1", 0, "user"), event("s1", "i1", 1, "notify_agent", final=True)]
    with_rejects = orphan_findings(
        report([ledger("r1", "s1", "i1", "DONE")], events), rejects=rejects
    )
    assert with_rejects.verdict is Verdict.INCOMPLETE_EVIDENCE
    assert with_rejects.items[0].rows[0]["location"] == "events.jsonl:3"
