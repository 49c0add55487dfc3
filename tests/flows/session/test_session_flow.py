"""The session flow: errors that vanish (small frames and the runaway pack's truth), the
swimlane, and real papermill runs from files and from a database."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import INCIDENT_DB_PASSWORD, read_run

from incidentkit.cli import main
from incidentkit.evidence import open_evidence
from incidentkit.flows import session as se
from incidentkit.flows.common import frames_of
from incidentkit.flows.session.errors import EVENT_KIND, error_counts, quiet, vanishing_errors
from incidentkit.flows.session.swimlane import plot_session, plot_swimlane
from incidentkit.frames import build
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
RUNAWAY = FIXTURES / "runaway"
VANISHED = FIXTURES / "vanished_state"
ERRORS: dict[str, Any] = json.loads((RUNAWAY / "truth.json").read_text())["expected"]["errors"]
VANISHED_TRUTH: dict[str, Any] = json.loads((VANISHED / "truth.json").read_text())["expected"]
ERROR_FIELDS = {"location", "invocation_id", "kind", "error_code", "message"}
T0 = pd.Timestamp("2026-11-29T16:00:00Z")


def _app_errors() -> pd.DataFrame:
    incident = open_evidence(RUNAWAY, app_name="support")
    frames = frames_of(incident, ("events", "diagnostics", "calls", "runs"))
    return vanishing_errors(frames.events, frames.diagnostics, frames.calls, frames.runs)


def test_every_error_of_the_runaway_pack_is_found_with_its_kind_and_run() -> None:
    errors = _app_errors()
    coded = errors.loc[errors["kind"].eq(EVENT_KIND)]
    assert [
        {
            "event_id": row["location"],
            "invocation_id": row["invocation_id"],
            "error_code": row["error_code"],
            "run_outcome": row["run_outcome"],
        }
        for row in coded.to_dict("records")
    ] == ERRORS["error_code_events"]
    tools = errors.loc[errors["kind"].eq("tool.error")]
    assert [(r["invocation_id"], r["tool"]) for r in tools.to_dict("records")] == [
        (e["invocation_id"], e["tool"]) for e in ERRORS["tool_errors"]
    ]
    assert tools["agent"].notna().all()  # named from the call the line cites
    models = errors.loc[errors["kind"].eq("model.error")]
    assert [(r["invocation_id"], r["agent"]) for r in models.to_dict("records")] == [
        (e["invocation_id"], e["agent"]) for e in ERRORS["model_errors"]
    ]
    runs = errors.loc[errors["kind"].eq("run.error"), "invocation_id"]
    assert set(ERRORS["run_errors"]) <= set(runs)
    lost = errors.loc[errors["kind"].eq("rx.undeliverable")]
    assert [t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" for t in lost["ts"]] == ERRORS[
        "undeliverable"
    ]
    assert lost["message"].str.contains("Broken pipe").all()
    assert set(quiet(errors)["kind"]) == {EVENT_KIND, "rx.undeliverable"}


def test_errors_are_counted_per_kind_agent_and_tool() -> None:
    counts = error_counts(_app_errors()).set_index(["kind", "agent", "tool"])
    assert counts.loc[("tool.error", "support_agent", "order_lookup"), "errors"] == 1
    assert counts.loc[(EVENT_KIND, "support_agent", "-"), "invocations"] == 1


def test_an_error_code_on_a_failed_run_is_not_quiet_and_the_ledger_gives_outcomes() -> None:
    events = build(
        "events",
        [
            {"event_id": "e1", "session_id": "s", "invocation_id": "i-ok", "ts": T0,
             "author": "a", "error_code": "SAFETY", "error_message": "blocked"},
            {"event_id": "e2", "session_id": "s", "invocation_id": "i-bad", "ts": T0,
             "author": "a", "error_code": "MAX_TOKENS"},
        ],
    )  # fmt: skip
    runs = build(
        "runs",
        [
            {"run_id": "r1", "invocation_id": "i-ok", "status": "DONE"},
            {"run_id": "r2", "invocation_id": "i-bad", "status": "FAILED"},
        ],
    )
    errors = vanishing_errors(events, build("diagnostics", []), build("calls", []), runs)
    assert dict(zip(errors["location"], errors["run_outcome"], strict=True)) == {
        "e1": "ok",
        "e2": "error",
    }
    assert list(quiet(errors)["location"]) == ["e1"]
    none = vanishing_errors(build("events", []), build("diagnostics", []), build("calls", []), runs)
    assert none.empty and set(none.columns) >= ERROR_FIELDS


def test_the_session_flow_marks_the_sessions_own_error_among_the_apps() -> None:
    [coded] = ERRORS["error_code_events"]
    events = open_evidence(RUNAWAY).events
    sid = events.loc[events["event_id"].eq(coded["event_id"]), "session_id"].iloc[0]
    incident, settings = se.setup(RUNAWAY, session_id=sid)
    report = se.triage(incident, settings)
    mine = report.errors.loc[report.errors["in_session"]]
    assert list(mine["location"]) == [coded["event_id"]]
    assert len(report.errors) > len(mine)  # the app's other errors in the window
    findings = se.findings(report, incident, settings).to_dict()
    item = next(i for i in findings["items"] if i["id"] == "session/errors")
    assert item["severity"] == "WARNING" and "MAX_TOKENS" in item["title"]
    assert all(set(row) >= ERROR_FIELDS for row in item["rows"])
    assert "error code" in item["action"]
    assert report.text.count("\n") == len(report.dump) and "err=MAX_TOKENS" in report.text


def test_the_swimlane_draws_a_lane_per_author_and_the_race_in_red() -> None:
    incident, settings = se.setup(VANISHED, session_id=VANISHED_TRUTH["session_id"])
    report = se.triage(incident, settings)
    hit = set(report.overlaps["invocation_a"]) | set(report.overlaps["invocation_b"])
    assert len(hit) == 2
    ax = plot_swimlane(report.session, report.ranges, hit)
    lanes = [label.get_text() for label in ax.get_yticklabels()]
    authors = list(dict.fromkeys(report.session.events.sort_values("ts")["author"]))
    assert lanes == ["ledger runs", "invocations", *authors, "spans"]  # no journal entry: no lane
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "overlapping invocations" in legend and "event: partial" in legend
    assert "event: state" in legend  # a response that wrote state is drawn as a state write
    zoomed = plot_session(report.session, report.ranges, report.overlaps)
    [whole, zoom] = zoomed.get_figure(root=True).axes
    assert (
        zoom.get_xlim()[1] - zoom.get_xlim()[0] < (whole.get_xlim()[1] - whole.get_xlim()[0]) / 50
    )
    assert ax.get_xlabel() == "time on 2026-11-29 (UTC)"


@pytest.mark.notebook
def test_the_notebook_on_the_vanished_session_from_files(tmp_path: Path) -> None:
    sid = VANISHED_TRUTH["session_id"]
    code, findings, html = read_run("session", VANISHED, tmp_path, session_id=sid)
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    items = {item["id"]: item for item in findings["items"]}
    assert items["session/errors"]["severity"] == "INFO"  # this incident has none
    assert len(items["session/overlapping-invocations"]["rows"]) == 1
    events = items["session/events"]
    assert events["count"] == int(open_evidence(VANISHED).events["session_id"].eq(sid).sum())
    assert html.count("inv=") >= events["count"] and "<img" in html


@pytest.mark.notebook
def test_the_notebook_from_a_database_keeps_the_password_out(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = incident_db_url
    pack = simulate("runaway", tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    [coded] = json.loads((pack / "truth.json").read_text())["expected"]["errors"][
        "error_code_events"
    ]
    sid = open_evidence(pack).events.set_index("event_id").loc[coded["event_id"], "session_id"]
    code, findings, html = read_run("session", pack, tmp_path / "out", session_id=sid)
    assert code == 1
    rows = next(i for i in findings["items"] if i["id"] == "session/errors")["rows"]
    assert coded["event_id"] in {row["location"] for row in rows if row["in_session"]}
    assert INCIDENT_DB_PASSWORD not in html


def test_incidentkit_session_dumps_the_whole_history_whatever_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(VANISHED, pack)
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    manifest.write_text(re.sub(r'start = "[^"]+"', 'start = "2026-11-29T14:30:00.000Z"', text))
    sid = VANISHED_TRUTH["session_id"]
    assert main(["session", sid, "--evidence", str(pack)]) == 0
    lines = capsys.readouterr().out.splitlines()
    held = open_evidence(VANISHED).events
    assert len(lines) == int(held["session_id"].eq(sid).sum())
    assert lines[0].startswith("2026-11-29T14:05:00")  # before the window's start
