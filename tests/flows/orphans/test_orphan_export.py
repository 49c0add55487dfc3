"""Action exports: the runs to act on from the crash_recovery orphans findings, against the
truth's expected actions, as CSV and JSON, cells a spreadsheet would run as formulas, and the
errors."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.flows import orphans
from incidentkit.flows.orphans.export import COLUMNS, FORMULA_START, KINDS, actions_command, cell
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.triage import classify_orphans
from incidentkit.frames import build, empty
from incidentkit.runner import failed_findings

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
TRUTH = json.loads((FIXTURES / "crash_recovery" / "truth.json").read_text())["expected"]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("orphans")
    incident, settings = orphans.setup(FIXTURES / "crash_recovery", app_name="invoicing")
    orphans.findings(orphans.triage(incident, settings), incident, settings).write(
        folder / "findings.json"
    )
    return folder


def _expected(kind: str) -> list[tuple[str, str]]:
    return sorted(
        (o["run_id"], o["session_id"]) for o in TRUTH["orphans"] if o["action"] == kind.lower()
    )


@pytest.mark.parametrize("kind", ["REDRIVE", "PARK", "MARK_DONE", "ASK_DOWNSTREAM", "MARK_PAUSED"])
def test_each_kind_lists_the_runs_the_truth_expects(out: Path, kind: str) -> None:
    rows = json.loads(actions_command(out, kind=kind, fmt="json"))
    assert [(r["run_id"], r["session_id"]) for r in rows] == _expected(kind)
    assert all(r["action_kind"] == kind and r["app_name"] == "invoicing" for r in rows)
    assert all(r["proof"].startswith("findings.json → orphans/") for r in rows)


def test_csv_has_a_header_and_the_same_rows_as_json(out: Path) -> None:
    text = actions_command(out, kind="REDRIVE", fmt="csv")
    assert text.splitlines()[0] == ",".join(COLUMNS)
    parsed = list(csv.DictReader(io.StringIO(text)))
    rows = json.loads(actions_command(out, kind="REDRIVE", fmt="json"))
    assert [r["run_id"] for r in parsed] == [r["run_id"] for r in rows]
    assert [(r["run_id"], r["session_id"]) for r in parsed] == _expected("REDRIVE")  # by run id
    w3 = next(r for r in parsed if r["journal_verdict"] == "NO_ENTRY")
    assert w3["unanswered_calls"] == "adk-38c1962e-9148-424f-aac1-c14f30e9c5cc"
    assert next(r for r in parsed if r["orphan_class"] == "NOT_STARTED")["invocation_id"] == ""


def test_the_order_is_stable(out: Path) -> None:
    assert actions_command(out, kind="REDRIVE", fmt="csv") == actions_command(
        out, kind="REDRIVE", fmt="csv"
    )


def test_park_rows_carry_the_dead_letter_record(out: Path) -> None:
    [row] = json.loads(actions_command(out, kind="PARK", fmt="json"))
    assert row["run_id"] in TRUTH["crash_loops"]
    assert row["dead_letter"]["run_id"] == row["run_id"] and row["dead_letter"]["request"]
    header = actions_command(out, kind="PARK", fmt="csv").splitlines()[0]
    assert header.endswith(",proof,dead_letter")


def test_an_ask_downstream_row_names_the_key_to_ask_about(out: Path) -> None:
    [row] = json.loads(actions_command(out, kind="ASK_DOWNSTREAM", fmt="json"))
    assert row["journal_verdict"] == "INTENT_ONLY" and "send-invoice:INV-1003" in row["action"]


def test_a_kind_matches_whatever_its_case(out: Path) -> None:
    assert actions_command(out, kind="mark-done", fmt="csv") == actions_command(
        out, kind="MARK_DONE", fmt="csv"
    )


def test_a_kind_with_no_runs_gives_a_header_or_an_empty_list(out: Path) -> None:
    assert actions_command(out, kind="REPLAY", fmt="csv") == ",".join(COLUMNS) + "\n"
    assert json.loads(actions_command(out, kind="REPLAY", fmt="json")) == []


def test_a_run_all_folder_finds_the_orphans_findings(out: Path, tmp_path: Path) -> None:
    (tmp_path / "orphans").mkdir()
    (tmp_path / "orphans" / "findings.json").write_bytes((out / "findings.json").read_bytes())
    [row] = json.loads(actions_command(tmp_path, kind="MARK_DONE", fmt="json"))
    assert row["proof"] == "orphans/findings.json → orphans/actually-done, row 1"


def test_an_unknown_kind_lists_the_kinds(out: Path) -> None:
    with pytest.raises(ParameterError, match=r"unknown action kind: 'RETRY'\. use one of ") as err:
        actions_command(out, kind="RETRY", fmt="csv")
    assert all(kind in str(err.value) for kind in KINDS)
    with pytest.raises(
        ParameterError, match=r"unknown actions format: 'xml'\. use one of csv, json"
    ):
        actions_command(out, kind="REDRIVE", fmt="xml")


def test_no_orphans_findings_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match=r"no findings\.json in OUT"):
        actions_command(tmp_path, kind="REDRIVE", fmt="csv")
    failed_findings("latency_cliff", "boom", {}).write(tmp_path / "findings.json")
    with pytest.raises(ParameterError, match=r"no orphans findings in OUT.*run the orphans flow"):
        actions_command(tmp_path, kind="REDRIVE", fmt="csv")


def test_an_orphans_run_that_stopped_early_has_nothing_to_export(tmp_path: Path) -> None:
    failed_findings("orphans", "ParameterError: app_name is empty", {}).write(
        tmp_path / "findings.json"
    )
    with pytest.raises(ParameterError, match="stopped before its verdict: 'ParameterError: app"):
        actions_command(tmp_path, kind="REDRIVE", fmt="json")


FORMULA_OWNER = '=HYPERLINK("http://x")'
NO_EVENTS_SESSION = "a36bcb01-67e9-4363-905c-053b25fdacbe"  # a NOT_STARTED run: no events


@pytest.fixture(scope="module")
def formulas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The orphans findings of a crash_recovery copy whose ledger holds a spreadsheet formula
    as worker-3's owner name and ``-1+1`` as the session id of a run that stored no events."""
    root = tmp_path_factory.mktemp("formulas")
    pack = root / "pack"
    shutil.copytree(FIXTURES / "crash_recovery", pack)
    with (pack / "ledger.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    for row in rows:
        row["owner"] = FORMULA_OWNER if row["owner"] == "worker-3" else row["owner"]
        row["session_id"] = "-1+1" if row["session_id"] == NO_EVENTS_SESSION else row["session_id"]
    with (pack / "ledger.csv").open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    incident, settings = orphans.setup(pack, app_name="invoicing")
    orphans.findings(orphans.triage(incident, settings), incident, settings).write(
        root / "findings.json"
    )
    return root


def test_csv_cells_a_spreadsheet_would_run_start_with_a_quote(formulas: Path) -> None:
    text = actions_command(formulas, kind="REDRIVE", fmt="csv")
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert {r["owner"] for r in parsed} == {"'" + FORMULA_OWNER}
    assert "'-1+1" in {r["session_id"] for r in parsed}
    cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
    assert not [cell for cell in cells if cell.startswith(FORMULA_START)]
    rows = json.loads(actions_command(formulas, kind="REDRIVE", fmt="json"))
    assert {r["owner"] for r in rows} == {FORMULA_OWNER}  # JSON keeps the values as they are
    assert "-1+1" in {r["session_id"] for r in rows}


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1+1", "'-1+1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        (["=a", "b"], "'=a;b"),
        ({"k": "=1"}, '{"k": "=1"}'),
        (-3, "'-3"),
        ("worker-1", "worker-1"),
        (None, ""),
    ],
)
def test_a_cell_is_quoted_only_when_it_starts_like_a_formula(value: object, written: str) -> None:
    assert cell(value) == written


T0 = pd.Timestamp("2026-11-29T03:00:00Z")


def _event(session: str, seq: int, author: str, **fields: Any) -> dict[str, Any]:
    return {
        "event_id": f"{session}-{seq}",
        "app_name": "billing",
        "user_id": "u1",
        "session_id": session,
        "invocation_id": f"i-{session}",
        "seq": seq,
        "ts": T0 + pd.Timedelta(seconds=seq + 1),
        "author": author,
        "long_running_tool_ids": (),
        **fields,
    }


def _call(session: str, seq: int, call_id: str, tool: str, **fields: Any) -> dict[str, Any]:
    return {
        "event_id": f"{session}-{seq}",
        "session_id": session,
        "invocation_id": f"i-{session}",
        "seq": seq,
        "ts": T0 + pd.Timedelta(seconds=seq + 1),
        "author": "billing_agent",
        "call_id": call_id,
        "name": tool,
        "args": {"invoiceId": "INV-77"},
        "args_key": "invoiceId=INV-77",
        "long_running": False,
        **fields,
    }


def _run(run_id: str, session: str, **fields: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "app_name": "billing",
        "user_id": "u1",
        "session_id": session,
        "invocation_id": f"i-{session}",
        "request": {"text": "send the invoice"},
        "status": "RUNNING",
        "owner": "worker-a",
        "lease_until": T0 + pd.Timedelta(minutes=1),
        "attempts": 1,
        "started_at": T0,
        "updated_at": T0,
        **fields,
    }


@pytest.fixture(scope="module")
def trapped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Findings of a crash loop whose unanswered call the journal knows only by call id (the
    call alone would ask downstream; the run is parked), and of a run paused for approval."""
    folder = tmp_path_factory.mktemp("trapped")
    events = [
        _event("s-loop", 0, "user"),
        _event("s-loop", 1, "billing_agent", final_response=False),
        _event("s-wait", 0, "user"),
        _event("s-wait", 1, "billing_agent", long_running_tool_ids=("lr-1",), final_response=True),
    ]
    calls = [
        _call("s-loop", 1, "c1", "sendInvoice"),
        _call("s-wait", 1, "lr-1", "approve", long_running=True),
    ]
    journal = build(
        "journal",
        [
            {
                "key": "c1",
                "invocation_id": "i-s-loop",
                "function_call_id": "c1",
                "status": "INTENT",
                "created_at": T0,
                "updated_at": T0,
            }
        ],
    )
    runs = [
        _run("r-loop", "s-loop", attempts=3),
        _run("r-wait", "s-wait", status="PAUSED", lease_until=None),
    ]
    report = classify_orphans(
        build("runs", runs),
        build("events", events),
        build("calls", calls),
        empty("responses"),
        journal,
        as_of=T0 + pd.Timedelta(minutes=10),
        terminal_agent="notify_agent",
        key_templates={"sendInvoice": "send-invoice:{invoiceId}"},
    )
    orphan_findings(report, app_name="billing").write(folder / "findings.json")
    return folder


def test_a_run_is_listed_under_its_own_kind_only(trapped: Path) -> None:
    [parked] = json.loads(actions_command(trapped, kind="PARK", fmt="json"))
    assert parked["run_id"] == "r-loop" and parked["dead_letter"]["run_id"] == "r-loop"
    assert parked["proof"] == "findings.json → orphans/tool-unanswered, row 1"
    assert json.loads(actions_command(trapped, kind="ASK_DOWNSTREAM", fmt="json")) == []
    [waiting] = json.loads(actions_command(trapped, kind="WAIT", fmt="json"))
    assert (waiting["run_id"], waiting["orphan_class"]) == ("r-wait", "PAUSED")
    assert json.loads(actions_command(trapped, kind="REDRIVE", fmt="json")) == []
    rows = list(csv.DictReader(io.StringIO(actions_command(trapped, kind="PARK", fmt="csv"))))
    assert [(r["run_id"], r["action_kind"]) for r in rows] == [("r-loop", "PARK")]


def test_a_call_row_of_an_older_document_does_not_list_its_run_again(
    trapped: Path, tmp_path: Path
) -> None:
    """Before a call's row carried its run's kind, it carried the call's own; the run row
    decides."""
    document = json.loads((trapped / "findings.json").read_text(encoding="utf-8"))
    for item in document["items"]:
        for row in item["rows"]:
            if "call_action_kind" in row:
                row["action_kind"] = row.pop("call_action_kind")
    (tmp_path / "findings.json").write_text(json.dumps(document), encoding="utf-8")
    assert json.loads(actions_command(tmp_path, kind="ASK_DOWNSTREAM", fmt="json")) == []
    assert [
        r["run_id"] for r in json.loads(actions_command(tmp_path, kind="PARK", fmt="json"))
    ] == ["r-loop"]
