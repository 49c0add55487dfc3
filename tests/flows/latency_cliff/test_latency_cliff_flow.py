"""The latency cliff flow on the simulated 03:10 incident and its variants, step by step and
through real papermill runs from files, SQLite and PostgreSQL, against the pack's truth."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import INCIDENT_DB_PASSWORD, pack_without, read_run

import incidentkit as ik
from incidentkit.errors import ParameterError, SourceError
from incidentkit.findings import Findings
from incidentkit.flows import latency_cliff as lc
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CLIFF = FIXTURES / "latency_cliff"
HEALTHY = FIXTURES / "healthy"
TRUTH: dict[str, Any] = json.loads((CLIFF / "truth.json").read_text())["expected"]
ITEM_FIELDS = {
    "latency_cliff/cliff": {
        *("at", "p50_before_ms", "p95_before_ms", "p50_after_ms", "p95_after_ms"),
        *("runs_before", "runs_after", "errors_before", "errors_after", "source"),
    },
    "latency_cliff/open-invocations": {
        *("invocation_id", "run_id", "session_id", "started_at", "open_for_s"),
        *("last_event_kind", "tool", "call_id"),
    },
    "latency_cliff/open-by-last-event": {"last_event_kind", "tool", "count", "invocation_ids"},
    "latency_cliff/stuck-threads": {"top_frame", "app_frame", "state", "threads", "count", "tool"},
}


def _without(tmp_path: Path, *sections: str) -> Path:
    """A copy of the pack whose manifest leaves ``sections`` out."""
    return pack_without(CLIFF, tmp_path, *sections)


def assert_matches_truth(findings: dict[str, Any], *, threads: bool = True) -> None:
    """The findings.json of a run on the cliff pack say what truth.json says."""
    items = {item["id"]: item for item in findings["items"]}
    for fid, fields in ITEM_FIELDS.items():
        if fid in items:
            assert fields <= set(items[fid]["rows"][0]), fid
    [cliff] = items["latency_cliff/cliff"]["rows"]
    # within one bucket: the first bucket after the split is the cliff minute itself
    assert pd.Timestamp(cliff["at"]) == pd.Timestamp(TRUTH["cliff"])
    assert cliff["runs_before"] == TRUTH["runs_before"]
    assert cliff["runs_after"] == TRUTH["runs_since_cliff"]
    for key in ("p50_before_ms", "p95_before_ms", "p50_after_ms", "p95_after_ms"):
        assert cliff[key] == pytest.approx(TRUTH[key]), key
    assert cliff["errors_before"] == cliff["errors_after"] == 0
    assert "nothing failed, things waited" in items["latency_cliff/cliff"]["title"]
    rows = items["latency_cliff/open-invocations"]["rows"]
    assert sorted(r["invocation_id"] for r in rows) == TRUTH["open_invocations"]
    assert {r["tool"] for r in rows} == {TRUTH["open_last_call"]["tool"]}
    assert sorted(r["call_id"] for r in rows) == TRUTH["open_last_call"]["call_ids"]
    assert {r["last_event_kind"] for r in rows} == {"unanswered_function_call"}
    assert all(r["run_id"] for r in rows)
    summary = findings["summary"]
    assert summary["open_invocations"] == TRUTH["open_since_cliff"]
    assert summary["run_starts_since_cliff"] == TRUTH["runs_since_cliff"]
    if not threads:
        assert "latency_cliff/stuck-threads" not in items
        return
    truth = TRUTH["threads"]
    first = items["latency_cliff/stuck-threads"]["rows"][0]
    assert sorted(first["threads"]) == sorted(truth["stuck_threads"])
    assert first["count"] == truth["stuck_count"] == summary["stuck_threads"]
    assert (first["state"], first["top_frame"]) == (truth["stuck_state"], truth["stuck_top_frame"])
    assert first["app_frame"] == truth["stuck_tool_frame"]
    assert first["tool"] == TRUTH["open_last_call"]["tool"]
    assert first["client"] == truth["client_class"]
    idle = {name for row in items["latency_cliff/idle-threads"]["rows"] for name in row["threads"]}
    assert {entry["thread"] for entry in truth["idle_by_design"]} <= idle  # the listener: apart
    stuck = {
        name for row in items["latency_cliff/stuck-threads"]["rows"] for name in row["threads"]
    }
    assert not set(truth["not_stuck"]) & (stuck | idle)  # slow in one dump only
    fix = items["latency_cliff/fix"]
    assert "OrderLookupClient" in fix["title"] and "order_lookup" in fix["title"]
    assert [row["fix"] for row in fix["rows"]] == [
        "read timeout",
        "structured unavailable result",
        "reactive timeout",
        "alert on open invocations",
    ]


def _steps(evidence: Path | str, **parameters: Any) -> dict[str, Any]:
    incident, settings = lc.setup(evidence, **parameters)
    report = lc.triage(incident, settings)
    return json.loads(lc.findings(report, incident, settings).to_json())


def test_the_steps_on_the_cliff_pack_match_its_truth() -> None:
    findings = _steps(CLIFF, app_name="support")
    assert findings["verdict"] == "ACTION_NEEDED"
    assert findings["flow"] == "latency_cliff"
    assert_matches_truth(findings)
    settings = findings["evidence"]["parameters"]
    assert settings["client_timeout_s"] == 60.0
    assert settings["settings_from"]["client_timeout_s"] == "[apps.support]"


def test_settings_errors_name_the_value_and_the_fix() -> None:
    with pytest.raises(ParameterError, match="bucket is not a positive duration"):
        lc.setup(CLIFF, app_name="support", bucket="soon")
    with pytest.raises(ParameterError, match="bucket is not a positive duration"):
        lc.setup(CLIFF, app_name="support", bucket="-1min")
    with pytest.raises(ParameterError, match="client_timeout_s is not a positive"):
        lc.setup(CLIFF, app_name="support", client_timeout_s=-5)
    with pytest.raises(ParameterError, match="evidence is empty"):
        lc.setup("")
    _, settings = lc.setup(CLIFF, app_name="support", client_timeout_s=30, bucket="30s")
    assert settings.sources["client_timeout_s"] == "parameter"
    assert (settings.client_timeout_s, settings.bucket) == (30.0, "30s")


@pytest.mark.parametrize("app", ["support", "invoicing", "travel", "expenses"])
def test_every_app_of_the_healthy_pack_is_clean(app: str) -> None:
    findings = _steps(HEALTHY, app_name=app)
    assert findings["verdict"] == "CLEAN", [i["id"] for i in findings["items"]]
    assert findings["summary"]["open_invocations"] == 0
    assert findings["summary"]["runs"] > 0


def test_without_thread_dumps_there_is_no_thread_verdict_but_the_rest_holds(tmp_path: Path) -> None:
    findings = _steps(_without(tmp_path, "threads"), app_name="support")
    assert_matches_truth(findings, threads=False)
    items = {item["id"]: item for item in findings["items"]}
    # the tool comes from the open calls: the fix names it, with no client to name
    assert "order_lookup" in items["latency_cliff/fix"]["title"]
    assert (
        "every HTTP and database client order_lookup uses" in items["latency_cliff/fix"]["action"]
    )


def test_without_diagnostics_the_ledger_times_the_runs_when_spans_are_sampled(
    tmp_path: Path,
) -> None:
    incident, settings = lc.setup(_without(tmp_path, "diagnostics"), app_name="support")
    report = lc.triage(incident, settings)
    assert (report.source, report.open_source) == ("ledger", "ledger")
    assert any("(sampled): latency comes from the ledger" in note for note in report.notes)
    assert any("No diagnostics run.start/run.end lines" in note for note in report.notes)
    assert report.cliff["at"].iloc[0].isoformat().startswith(TRUTH["cliff"][:16])
    assert sorted(report.open["invocation_id"]) == TRUTH["open_invocations"]
    assert report.stalls["tool"].iloc[0] == "order_lookup"


def test_spans_alone_time_the_runs_and_say_they_cannot_show_a_hang(tmp_path: Path) -> None:
    pack = _without(tmp_path, "diagnostics", "ledger", "events", "journal")
    incident, settings = lc.setup(pack, app_name="support")
    report = lc.triage(incident, settings)
    assert report.source == "spans" and report.open_source is None
    assert report.open.empty
    assert any("open invocations from no source" in note for note in report.notes)


def test_without_a_ledger_the_apps_come_from_the_event_log(tmp_path: Path) -> None:
    logged = pd.read_json(CLIFF / "events.jsonl", lines=True)["appName"].unique()
    with pytest.raises(ParameterError, match=f"the event log holds {', '.join(sorted(logged))};"):
        lc.setup(_without(tmp_path, "ledger"))
    findings = _steps(tmp_path / "pack", app_name="support")
    assert findings["summary"]["open_invocations"] == TRUTH["open_since_cliff"]
    assert all(row["run_id"] is None for row in _item(findings, "open-invocations")["rows"])


def _item(findings: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in findings["items"] if i["id"] == f"latency_cliff/{name}")


def test_an_earlier_as_of_sees_the_incident_as_it_stood_then() -> None:
    """At 03:12 the hung runs were younger than the timeout, and runs the ledger or the spans
    show ended later were still open then: no disagreement is made up."""
    findings = _steps(CLIFF, app_name="support", as_of="2026-11-29T03:12:00Z")
    assert findings["summary"]["open_invocations"] == 0
    assert findings["summary"]["source_disagreements"] == 0
    assert findings["evidence"]["window"][1] == "2026-11-29T03:12:00Z"
    assert _item(findings, "cliff")["rows"][0]["at"] == "2026-11-29T03:10:00Z"


def test_a_source_the_flow_does_not_read_cannot_stop_it(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(CLIFF, pack)
    (pack / "journal.jsonl").write_text("", encoding="utf-8")  # an empty file is refused
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    if "[journal]" not in text:
        head, apps = text.split("\n[apps.", 1)
        journal = '[journal]\npath = "journal.jsonl"\nformat = "jsonl"\n'
        manifest.write_text(f"{head}\n{journal}\n[apps.{apps}", encoding="utf-8")
    with pytest.raises(SourceError, match="the file is empty"):
        ik.open_evidence(pack).frame("journal")
    findings = _steps(pack, app_name="support")
    assert findings["verdict"] == "ACTION_NEEDED"
    assert findings["summary"]["rejects"] == 0


@pytest.mark.notebook
def test_the_notebook_on_the_cliff_pack_from_files_matches_truth(tmp_path: Path) -> None:
    code, findings, html = read_run("latency_cliff", CLIFF, tmp_path, app_name="support")
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    assert_matches_truth(findings)
    Findings.from_json(json.dumps(findings))  # the document reads back
    head = html[: html.index('id="Latency-cliff"')]  # the first screen: the summary block
    for fact in (
        "03:10 UTC",
        "nothing failed, things waited",
        "order_lookup",
        "OrderLookupClient",
        "64 thread(s) stuck",
        "read timeout",
        ".timeout(...)",
        "45 s",
    ):
        assert fact in head, fact


@pytest.mark.notebook
def test_the_notebook_on_the_cliff_pack_from_a_database_matches_truth(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = incident_db_url
    pack = simulate("latency_cliff", tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    code, findings, html = read_run("latency_cliff", pack, tmp_path / "out", app_name="support")
    assert code == 1
    assert_matches_truth(findings)
    assert INCIDENT_DB_PASSWORD not in html


@pytest.mark.notebook
def test_the_notebook_on_a_healthy_window_is_clean_and_exits_0(tmp_path: Path) -> None:
    code, findings, html = read_run("latency_cliff", HEALTHY, tmp_path, app_name="support")
    assert (code, findings["verdict"]) == (0, "CLEAN")
    assert "No rows" in html  # empty views say so
    assert "What to do first" not in html
