"""The vanished-state flow on the simulated incident (ADK Java event log, ADK Python session
store), step by step and through real papermill runs from files, SQLite and PostgreSQL, against
the pack's truth."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import INCIDENT_DB_PASSWORD, pack_without, read_run

from incidentkit.errors import ParameterError
from incidentkit.evidence import open_evidence
from incidentkit.findings import Findings
from incidentkit.flows import vanished_state as vs
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
JAVA = FIXTURES / "vanished_state"
PYTHON = FIXTURES / "vanished_state-adk-python"
VERDICTS = {
    "temp_prefix": ("TEMP_PREFIX", None),
    "partial_only": ("NEVER_DURABLE", "partial_only"),
    "never_written": ("NEVER_DURABLE", "direct_mutation"),
    "raced": ("RACED", None),
    "overwritten": ("OVERWRITTEN", None),
    "removed": ("REMOVED", None),
    "present": ("PRESENT", None),
}
"""The truth's diagnosis of each key → the flow's verdict and cause."""
KEY_FIELDS = {"key", "verdict", "cause", "why", "value", "written_by", "changed_by", "raced_with"}
OVERLAP_FIELDS = {
    *("session_id", "invocation_a", "invocation_b"),
    *("a_start", "a_end", "b_start", "b_end"),
}
REPLAYED_FIELDS = {"key", "scope", "value", "stored_value", "matches"}


def expected(pack: Path) -> dict[str, Any]:
    truth: dict[str, Any] = json.loads((pack / "truth.json").read_text())["expected"]
    return truth


def ms(text: str) -> pd.Timestamp:
    """A findings time to the millisecond (a float-seconds store keeps sub-µs noise)."""
    return pd.Timestamp(text).round("ms")


def _items(findings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in findings["items"]}


def assert_matches_truth(findings: dict[str, Any], pack: Path) -> None:
    """The findings.json of a run on a vanished-state pack say what its truth.json says."""
    truth = expected(pack)
    items = _items(findings)
    rows = {row["key"]: row for row in items["vanished_state/keys"]["rows"]}
    assert set(rows) == {k["key"] for k in truth["keys"]}
    for key in truth["keys"]:
        row = rows[key["key"]]
        assert set(row) >= KEY_FIELDS, key["key"]  # the contract (a fix rides along)
        assert (row["verdict"], row["cause"]) == VERDICTS[key["diagnosis"]], key["key"]
        durable = [w for w in key["writes"] if not w["partial"]]
        if key["diagnosis"] in ("present", "overwritten", "raced"):
            assert row["value"] == key["final_value"], key["key"]
            assert ms(row["written_by"]["ts"]) in {ms(w["ts"]) for w in durable}
        if key["diagnosis"] in ("overwritten", "removed"):
            by = key["overwritten_by" if key["diagnosis"] == "overwritten" else "removed_by"]
            changed = row["changed_by"]
            assert (changed["invocation_id"], changed["author"], ms(changed["ts"])) == (
                by["invocation_id"],
                by["author"],
                ms(by["ts"]),
            )
        if key["diagnosis"] == "raced":
            racers = {row["written_by"]["invocation_id"], row["raced_with"]["invocation_id"]}
            assert racers == set(key["raced_invocations"])
            assert ms(row["written_by"]["ts"]) == ms(durable[-1]["ts"])  # the later write won
        if key["diagnosis"] == "partial_only":
            assert ms(row["written_by"]["ts"]) == ms(key["writes"][0]["ts"])
    [pair] = items["vanished_state/overlapping-invocations"]["rows"]
    assert set(pair) >= OVERLAP_FIELDS
    raced = next(k for k in truth["keys"] if k["diagnosis"] == "raced")
    assert {pair["invocation_a"], pair["invocation_b"]} == set(raced["raced_invocations"])
    (a_start, a_end), (b_start, b_end) = raced["overlap"]
    for got, want in zip(  # the request's arrival vs its first event: milliseconds apart
        [pair[k] for k in ("a_start", "a_end", "b_start", "b_end")],
        [a_start, a_end, b_start, b_end],
        strict=True,
    ):
        assert abs(ms(got) - ms(want)) < pd.Timedelta(seconds=1), (got, want)
    replayed = items["vanished_state/replayed-state"]["rows"]
    assert all(set(row) >= REPLAYED_FIELDS for row in replayed)
    finals = {k["key"]: k["final_value"] for k in truth["keys"]}
    for row in replayed:
        assert row["value"] == finals[row["key"]]


def _steps(pack: Path, **parameters: Any) -> dict[str, Any]:
    truth = expected(pack)
    keys = [k["key"] for k in truth["keys"]]
    incident, settings = vs.setup(pack, session_id=truth["session_id"], keys=keys, **parameters)
    report = vs.triage(incident, settings)
    findings: dict[str, Any] = vs.findings(report, incident, settings).to_dict()
    return findings


@pytest.mark.parametrize("pack", [JAVA, PYTHON], ids=["adk-java", "adk-python"])
def test_the_steps_on_each_pack_match_its_truth(pack: Path) -> None:
    findings = _steps(pack)
    assert findings["verdict"] == "ACTION_NEEDED"
    assert_matches_truth(findings, pack)
    assert findings["evidence"]["parameters"]["app_name"] == expected(pack)["app_name"]


def test_the_python_store_replay_matches_the_stored_state_and_says_what_it_cannot_tell() -> None:
    findings = _steps(PYTHON)
    items = _items(findings)
    replayed = items["vanished_state/replayed-state"]
    assert replayed["severity"] == "INFO" and all(r["matches"] for r in replayed["rows"])
    rows = {row["key"]: row for row in items["vanished_state/keys"]["rows"]}
    assert "cannot tell" in rows["draft_reply"]["why"]  # no partial event is ever stored
    assert "trims" in rows["temp:shipping_quote"]["why"]


def test_the_java_event_log_shows_the_partial_write_and_has_no_stored_state() -> None:
    findings = _steps(JAVA)
    items = _items(findings)
    rows = {row["key"]: row for row in items["vanished_state/keys"]["rows"]}
    assert "keeps partial events" in rows["loyalty_tier"]["why"]
    assert "no stored state" in items["vanished_state/replayed-state"]["title"]
    assert all(row["matches"] is None for row in items["vanished_state/replayed-state"]["rows"])


def test_one_key_asked_gets_the_cause_the_proof_and_the_fix_in_the_title() -> None:
    truth = expected(JAVA)
    incident, settings = vs.setup(JAVA, session_id=truth["session_id"], keys=["draft_reply"])
    report = vs.triage(incident, settings)
    [item] = [i for i in vs.findings(report, incident, settings).items if i.id.endswith("/keys")]
    assert item.title.startswith("1 of 1 key(s)")
    assert "draft_reply NEVER_DURABLE (partial_only)" in item.title
    assert "partial (streamed) events" in item.detail and "final event" in item.action
    assert "(event " in item.title  # the event that proves it, on the first screen


def test_the_session_names_its_app_and_user_and_a_wrong_one_is_refused() -> None:
    truth = expected(JAVA)
    _incident, settings = vs.setup(JAVA, session_id=truth["session_id"])
    assert (settings.app_name, settings.user_id) == (truth["app_name"], truth["user_id"])
    assert settings.sources["app_name"] == "the session's events"
    with pytest.raises(ParameterError, match="belongs to user_id"):
        vs.setup(JAVA, session_id=truth["session_id"], user_id="u-someone-else")
    with pytest.raises(ParameterError, match="session_id is empty"):
        vs.setup(JAVA)
    held = open_evidence(JAVA).events["session_id"].nunique()
    with pytest.raises(
        ParameterError,
        match=rf"session_id 'no-such-session' matches nothing: 0 runs, 0 events, 0 "
        rf"diagnostics lines of session 'no-such-session'; .* and {held - 8} more",
    ):
        vs.setup(JAVA, session_id="no-such-session")
    session = str(truth["session_id"])
    typo = session[:-1] + ("y" if session.endswith("x") else "x")
    with pytest.raises(ParameterError, match=rf"did you mean {typo} → {session}\?"):
        vs.setup(JAVA, session_id=typo)


def test_evidence_without_an_event_log_is_refused_with_the_section_to_add(tmp_path: Path) -> None:
    pack = pack_without(JAVA, tmp_path, "events")
    with pytest.raises(ParameterError, match=r"names no event log.*\[events\]"):
        vs.setup(pack, session_id=expected(JAVA)["session_id"])


def test_a_session_that_started_before_the_window_is_judged_on_its_whole_history(
    tmp_path: Path,
) -> None:
    pack = tmp_path / "pack"
    pack.mkdir()
    for path in JAVA.iterdir():
        (pack / path.name).write_bytes(path.read_bytes())
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    manifest.write_text(re.sub(r'start = "[^"]+"', 'start = "2026-11-29T14:15:00.000Z"', text))
    findings = _steps(pack)  # the first writes (14:05) are before the window
    assert_matches_truth(findings, JAVA)
    assert ms(findings["evidence"]["window"][0]) == ms("2026-11-29T14:15:00Z")


@pytest.mark.notebook
@pytest.mark.parametrize("pack", [JAVA, PYTHON], ids=["adk-java", "adk-python-sqlite-file"])
def test_the_notebook_on_each_pack_from_files_matches_truth(pack: Path, tmp_path: Path) -> None:
    truth = expected(pack)
    keys = [k["key"] for k in truth["keys"]]
    code, findings, html = read_run(
        "vanished_state", pack, tmp_path, session_id=truth["session_id"], keys=keys
    )
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    assert_matches_truth(findings, pack)
    Findings.from_json(json.dumps(findings))  # the document reads back
    head = html[: html.index('id="Vanished-state')]  # the first screen: the summary
    for fact in (
        "loyalty_tier NEVER_DURABLE (direct_mutation)",
        "cart RACED",
        "tool_context.state",
    ):
        assert fact in head, fact


@pytest.mark.notebook
def test_the_notebook_on_the_python_pack_from_a_database_matches_truth(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = incident_db_url
    pack = simulate("vanished_state", tmp_path / "pack", events_format="adk-python", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    truth = expected(pack)
    keys = json.dumps([k["key"] for k in truth["keys"]])  # as a shell passes it
    code, findings, html = read_run(
        "vanished_state", pack, tmp_path / "out", session_id=truth["session_id"], keys=keys
    )
    assert code == 1
    assert_matches_truth(findings, pack)
    assert all(r["matches"] for r in _items(findings)["vanished_state/replayed-state"]["rows"])
    assert INCIDENT_DB_PASSWORD not in html


@pytest.mark.notebook
def test_the_notebook_without_a_session_id_fails_with_the_fix_in_the_report(
    tmp_path: Path,
) -> None:
    code, findings, html = read_run("vanished_state", JAVA, tmp_path)
    assert code == 3 and findings["verdict"] == "INCOMPLETE_EVIDENCE"
    assert "session_id is empty" in html and "-p session_id" in html


@pytest.mark.slow
def test_the_benchmark_runs_and_agrees_with_its_baseline() -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_vanished_state.py"
    done = subprocess.run(
        [sys.executable, str(script), "--events", "2000", "--repeat", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert re.search(r"^kit triage_vanished_state +[\d.]+ +[\d.]+ +[\d,]+$", done.stdout, re.M)
    assert "verdicts TEMP_PREFIX, NEVER_DURABLE, NEVER_DURABLE, RACED" in done.stdout
