"""One action per run: every view, table and findings row that names a run shows that run's
own action kind (a call's is its run's), and the first screen names the runs behind each line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_orphan_triage import AS_OF, INVOICE, Log, classify, journal, one, run

from incidentkit.findings import Findings
from incidentkit.flows import orphans
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.steps import SHOWN
from incidentkit.flows.orphans.triage import OrphanReport
from incidentkit.report import summary_html

CRASH = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"
VIEWS = ("orphans", "in_flight", "calls", "crash_loops", "live_leases", "status_disagreements")
"""The report's frames whose rows name a run."""


@pytest.fixture(scope="module")
def mixed() -> OrphanReport:
    """Runs of every action that is not a re-drive, each with an unanswered call whose
    journal alone would say something else (re-drive, or ask downstream)."""
    log = Log()
    for session in ("s-paused", "s-wait", "s-live", "s-park", "s-ask"):
        log.user(session, f"i-{session}", 1)
    log.call("s-paused", "i-s-paused", 2, "billing_agent", "lr-1", "approve", {}, long_running=True)
    log.call("s-wait", "i-s-wait", 2, "billing_agent", "lr-2", "approve", {}, long_running=True)
    log.call("s-live", "i-s-live", 2, "billing_agent", "c-live", "sendInvoice", INVOICE)
    log.call("s-park", "i-s-park", 2, "billing_agent", "c-park", "lookup", {"id": 1})
    log.call("s-ask", "i-s-ask", 2, "billing_agent", "c-ask", "sendInvoice", {"invoiceId": "B"})
    runs = [
        run("r-paused", "s-paused", invocation_id="i-s-paused"),
        run("r-wait", "s-wait", invocation_id="i-s-wait", status="PAUSED", lease_until=None),
        run("r-live", "s-live", invocation_id="i-s-live", lease_until=AS_OF + pd.Timedelta("1min")),
        run("r-park", "s-park", invocation_id="i-s-park", attempts=3),
        run("r-ask", "s-ask", invocation_id="i-s-ask"),
    ]
    jrows = journal(
        ("send-invoice:INV-77", "i-s-live", "c-live", "INTENT"),
        ("send-invoice:B", "i-s-ask", "c-ask", "INTENT"),
    )
    return classify(runs, log, jrows)


def _kinds(report: OrphanReport) -> pd.Series:
    """Each non-terminal run's action kind, by run id."""
    runs = pd.concat([report.orphans, report.in_flight])
    return runs.set_index("run_id")["action_kind"]


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_shows_each_runs_own_action_kind(mixed: OrphanReport, view: str) -> None:
    frame = getattr(mixed, view)
    assert not frame.empty, view
    kinds = _kinds(mixed)
    assert frame["action_kind"].tolist() == frame["run_id"].map(kinds).tolist()


def test_a_calls_action_is_its_runs_and_its_own_is_kept_apart(mixed: OrphanReport) -> None:
    assert _kinds(mixed).sort_index().to_dict() == {
        "r-ask": "ASK_DOWNSTREAM",
        "r-live": "NONE",
        "r-park": "PARK",
        "r-paused": "MARK_PAUSED",
        "r-wait": "WAIT",
    }
    calls = mixed.calls.set_index("run_id")
    for run_id in ("r-paused", "r-wait", "r-live", "r-park"):
        run_row = one(mixed, run_id, "orphans" if run_id in ("r-paused", "r-park") else "in_flight")
        assert calls.loc[run_id, "action"] == run_row["action"], run_id
        assert "Safe to re-drive" not in calls.loc[run_id, "action"], run_id
    assert calls.loc["r-park", "call_action_kind"] == "REDRIVE"  # the journal alone: UNTRACKED
    assert calls.loc["r-live", "call_action_kind"] == "ASK_DOWNSTREAM"  # the journal: INTENT
    assert calls.loc["r-live", "action"].startswith("Not an orphan: lease held by worker")
    assert calls.loc["r-ask", "call_action"] in calls.loc["r-ask", "action"]


def test_a_crash_loops_call_matched_by_call_id_is_parked() -> None:
    log = Log().user("s1", "i1", 1)
    log.call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
    report = classify(
        [run("r1", "s1", invocation_id="i1", attempts=4)],
        log,
        journal(("c1", "i1", "c1", "INTENT")),
    )
    call = report.calls.iloc[0]
    assert (call["matched_by"], call["call_action_kind"]) == ("function_call_id", "ASK_DOWNSTREAM")
    assert call["action_kind"] == one(report, "r1", "crash_loops")["action_kind"] == "PARK"


@pytest.mark.parametrize("view", [v for v in SHOWN if "run_id" in SHOWN[v]])
def test_every_table_for_people_that_names_a_run_shows_its_action_kind(
    mixed: OrphanReport, view: str
) -> None:
    data = orphans.table(mixed, view).data
    assert "action_kind" in data.columns, view
    kinds = _kinds(mixed)
    assert data["action_kind"].tolist() == data["run_id"].map(kinds).tolist()
    action = orphans.action_table(mixed).data
    assert action["action_kind"].tolist() == action["run_id"].map(kinds).tolist()


def _run_rows(findings: Findings) -> list[tuple[str, dict[str, Any]]]:
    return [(item.id, row) for item in findings.items for row in item.rows if "run_id" in row]


def test_every_findings_row_that_names_a_run_carries_its_action_kind(mixed: OrphanReport) -> None:
    kinds = _kinds(mixed)
    rows = _run_rows(orphan_findings(mixed))
    assert {fid for fid, _ in rows} >= {
        "orphans/paused",
        "orphans/crash-loops",
        "orphans/live-leases",
        "orphans/waiting",
        "orphans/status-disagreements",
    }
    wrong = [
        (fid, row["run_id"], row.get("action_kind"))
        for fid, row in rows
        if row.get("action_kind", "(none)") != kinds[row["run_id"]]
    ]
    assert not wrong


def test_the_bundled_crash_has_one_action_per_run_everywhere() -> None:
    incident, settings = orphans.setup(CRASH, app_name="invoicing")
    report = orphans.triage(incident, settings)
    kinds = _kinds(report)
    assert {"WAIT", "MARK_PAUSED", "PARK", "NONE"} <= set(report.calls["action_kind"])
    for view in VIEWS:
        frame = getattr(report, view)
        assert frame["action_kind"].tolist() == frame["run_id"].map(kinds).tolist(), view
    found = orphans.findings(report, incident, settings)
    for fid, row in _run_rows(found):
        assert row.get("action_kind", "(none)") == kinds[row["run_id"]], (fid, row["run_id"])


def test_a_terminal_runs_disagreement_carries_no_action() -> None:
    log = Log().user("s1", "i1", 1).text("s1", "i1", 2, "notify_agent")
    report = classify([run("r1", "s1", invocation_id="i1", status="FAILED")], log)
    row = one(report, "r1", "status_disagreements")
    assert pd.isna(row["action_kind"])


def test_each_title_names_the_runs_behind_it(mixed: OrphanReport) -> None:
    titles = {item.id: item.title for item in orphan_findings(mixed).items}
    assert titles["orphans/crash-loops"] == "1 run(s) at or over the attempts cap: r-park"
    assert titles["orphans/live-leases"] == "1 run(s) with a live lease: r-live"
    assert titles["orphans/waiting"] == "1 paused run(s) waiting for approval: r-wait"
    assert titles["orphans/tool-unanswered"] == (
        "2 orphaned run(s) died with a tool call unanswered: r-ask, r-park"
    )


def test_a_title_names_the_first_three_runs_and_counts_the_rest() -> None:
    log = Log()
    ids = [f"r-{n}-" + "x" * (70 if n == 0 else 0) for n in range(5)]
    for n in range(5):
        log.user(f"s{n}", f"i{n}", 1).text(f"s{n}", f"i{n}", 2, "draft_agent")
    runs = [run(run_id, f"s{n}", invocation_id=f"i{n}") for n, run_id in enumerate(ids)]
    item = orphan_findings(classify(runs, log)).items[0]
    assert item.id == "orphans/model-inflight"
    cut = ids[0][:63] + "…"
    assert item.title == (
        f"5 orphaned run(s) lost a model call in flight: {cut}, r-1-, r-2- and 2 more"
    )


def test_a_duplicate_effect_names_its_keys_and_a_trap_its_runs() -> None:
    log = Log()
    for n, inv in enumerate(("i1", "i2")):
        log.user("s1", inv, 10 * n + 1)
        log.call("s1", inv, 10 * n + 2, "billing_agent", f"c{n}", "sendInvoice", INVOICE)
        log.response("s1", inv, 10 * n + 3, "billing_agent", f"c{n}", "sendInvoice")
    log.user("s2", "i3", 1).call("s2", "i3", 2, "billing_agent", "c9", "sendInvoice", INVOICE)
    report = classify(
        [run("r9", "s2", invocation_id="i3")],
        log,
        journal(("c0", "i1", "c0", "DONE"), ("c1", "i2", "c1", "DONE"), ("c9", "i3", "c9", "DONE")),
    )
    titles = {item.id: item.title for item in orphan_findings(report).items}
    assert titles["orphans/duplicate-effects"].endswith("more than once: send-invoice:INV-77")
    assert titles["orphans/call-id-journal"].endswith("by function call id: in run(s) r9")


def test_the_first_screen_names_the_parked_run(mixed: OrphanReport) -> None:
    block = summary_html(orphan_findings(mixed, title="incident 7"))
    line = next(part for part in block.split("<li>") if "attempts cap" in part)
    assert "r-park" in line
