"""The orphan sweep on an ADK 2.x resumable app's log, with small hand-built frames: a run is
judged on its last turn (checkpoints after the answer are no model call in flight), a
compaction authored ``user`` is no user's message, and the calls ADK ran again after a crash
are listed with what the journal says."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.findings import Severity
from incidentkit.flows import orphans
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.triage import OrphanClass, OrphanReport, classify_orphans
from incidentkit.frames import build, empty

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
T0 = pd.Timestamp("2026-12-06T20:00:00Z")
AS_OF = T0 + pd.Timedelta(minutes=10)


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def ledger(**fields: Any) -> pd.DataFrame:
    """One RUNNING run whose lease ran out at T0 + 60 s (an orphan at AS_OF)."""
    row = {
        "run_id": "r1",
        "app_name": "shop",
        "user_id": "u1",
        "session_id": "s1",
        "invocation_id": "e-1",
        "request": {"text": "charge A-1"},
        "status": "RUNNING",
        "owner": "worker-a",
        "lease_until": at(60),
        "attempts": 1,
        "started_at": at(0),
        "updated_at": at(0),
        **fields,
    }
    return build("runs", [row])


def events(*rows: tuple[str, float, str, str, dict[str, Any]]) -> pd.DataFrame:
    """Events from (invocation, seconds, author, kind, other fields), in stored order."""
    return build(
        "events",
        [
            {
                "event_id": f"ev-{seq}",
                "app_name": "shop",
                "user_id": "u1",
                "session_id": "s1",
                "invocation_id": inv,
                "seq": seq,
                "ts": at(t),
                "author": author,
                "kind": kind,
                **fields,
            }
            for seq, (inv, t, author, kind, fields) in enumerate(rows)
        ],
    )


def sweep(log: pd.DataFrame, runs: pd.DataFrame | None = None, **kw: Any) -> OrphanReport:
    return classify_orphans(
        ledger() if runs is None else runs,
        log,
        kw.pop("calls", empty("calls")),
        kw.pop("responses", empty("responses")),
        kw.pop("journal", empty("journal")),
        as_of=AS_OF,
        terminal_agent="notifier",
        key_templates={},
        **kw,
    )


def test_a_finished_run_of_a_resumable_app_is_actually_done() -> None:
    log = events(
        ("e-1", 0, "user", "turn", {"text": "charge A-1"}),
        ("e-1", 1, "notifier", "turn", {"text": "Receipt sent.", "final_response": True}),
        ("e-1", 1.1, "notifier", "checkpoint", {}),  # end_of_agent, after the answer
        ("e-1", 1.2, "checkout", "checkpoint", {}),
    )
    got = sweep(log).orphans
    assert got["orphan_class"].tolist() == [OrphanClass.ACTUALLY_DONE]
    assert got["last_author"].tolist() == ["notifier"]


def test_a_compaction_is_not_the_message_a_run_is_recovered_from() -> None:
    log = events(
        ("m-1", 1, "user", "compaction", {}),  # authored user, no content, its own id
        ("e-7", 2, "user", "turn", {"text": "charge A-1"}),
    )
    got = sweep(log, ledger(invocation_id=None)).orphans
    assert got["invocation_id"].tolist() == ["e-7"]
    assert got["invocation_source"].tolist() == ["user_event"]
    assert got["orphan_class"].tolist() == [OrphanClass.MODEL_INFLIGHT]


def crashed() -> dict[str, Any]:
    """e-1: the charge call logged by a worker that died, the invocation resumed at 5 s (its
    one root span), the call answered after it."""
    log = events(
        ("e-1", 0, "user", "turn", {"text": "charge A-1"}),
        ("e-1", 0.2, "cashier", "turn", {}),
        ("e-1", 5.1, "cashier", "turn", {}),
        ("e-1", 5.2, "notifier", "turn", {"text": "Receipt sent.", "final_response": True}),
    )
    call = {"session_id": "s1", "invocation_id": "e-1", "call_id": "c1", "name": "charge_card"}
    spans = build(
        "spans",
        [
            {
                "trace_id": "0" * 32,
                "span_id": "0" * 16,
                "name": "invoke_workflow checkout",
                "kind": "invocation",
                "start": at(5),
                "end": at(5.5),
                "invocation_id": "e-1",
            }
        ],
    )
    return {
        "log": log,
        "calls": build("calls", [{**call, "event_id": "ev-1", "seq": 1, "ts": at(0.2)}]),
        "responses": build("responses", [{**call, "event_id": "ev-2", "seq": 2, "ts": at(5.1)}]),
        "spans": spans,
    }


@pytest.mark.parametrize(
    ("has_journal", "verdict", "severity"),
    [(True, "ran_twice", Severity.CRITICAL), (False, "no_journal", Severity.WARNING)],
)
def test_the_sweep_lists_the_calls_adk_ran_again_after_a_crash(
    has_journal: bool, verdict: str, severity: Severity
) -> None:
    story = crashed()
    entry = build(
        "journal",
        [
            {
                "key": "charge:A-1",
                "invocation_id": "e-1",
                "function_call_id": "c1",
                "status": "DONE",
                "created_at": at(0.3),
                "updated_at": at(5.05),
            }
        ],
    )
    report = sweep(
        story.pop("log"),
        build("runs", []),  # no ledger: the calls run twice are found all the same
        journal=entry if has_journal else empty("journal"),
        has_journal=has_journal,
        **story,
    )
    assert report.calls_run_twice["call_id"].tolist() == ["c1"]
    assert report.calls_run_twice["verdict"].tolist() == [verdict]
    doc = orphan_findings(report)
    items = {item.id: item for item in doc.items}
    assert items["orphans/calls-run-twice"].severity is severity
    assert doc.summary["calls_run_twice"] == 1
    bare = crashed()
    without = sweep(bare.pop("log"), build("runs", []), **{**bare, "spans": None})
    assert without.calls_run_twice.empty  # no spans: nothing shows the crash


def test_spans_that_cannot_be_read_are_said_not_skipped(tmp_path: Path) -> None:
    pack = Path(shutil.copytree(FIXTURES / "crash_recovery", tmp_path / "pack"))
    (pack / "spans.otlp.jsonl").unlink()  # the manifest still names it
    evidence, settings = orphans.setup(pack, app_name="invoicing")
    report = orphans.triage(evidence, settings)
    (note,) = report.notes
    assert note.startswith("The spans could not be read (") and "event log alone" in note
    found = orphans.findings(report, evidence, settings)
    assert note in found.evidence.parameters["evidence_notes"]
    assert not report.orphans.empty  # the sweep itself stands
