"""The overview flow's triage card on the bundled incidents, against each pack's truth: the
symptom orders the card, each incident's own check is the line that needs a look."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import read_run

from incidentkit.errors import ParameterError
from incidentkit.flows import overview as ov

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def truth(pack: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((FIXTURES / pack / "truth.json").read_text())["expected"]
    return found


def card(pack: str, **parameters: Any) -> pd.DataFrame:
    incident, settings = ov.setup(FIXTURES / pack, **parameters)
    found: pd.DataFrame = ov.triage(incident, settings).card
    return found


def line(found: pd.DataFrame, check: str, app: str) -> dict[str, Any]:
    [row] = found.loc[found["check"].eq(check) & found["app"].eq(app)].to_dict("records")
    return row


def test_a_spinner_opens_the_open_invocations_of_the_cliff_first() -> None:
    expected = truth("latency_cliff")
    found = card("latency_cliff", symptom="spinner")
    first = found.iloc[0]
    assert (first["check"], first["app"], first["severity"]) == (
        "open-past-timeout",
        expected["app_name"],
        "CRITICAL",
    )
    assert first["count"] == len(expected["open_invocations"]) and first["flow"] == "latency_cliff"
    cliff = line(found, "latency-cliff", expected["app_name"])
    assert cliff["severity"] == "WARNING" and "03:10 UTC" in cliff["title"]


def test_the_symptom_word_decides_which_check_comes_first() -> None:
    slow = card("latency_cliff", symptom="slow")
    assert slow.iloc[0]["check"] == "latency-cliff"
    by_severity = card("latency_cliff")
    assert list(by_severity["severity"].map(ov.SEVERITY_RANK)) == sorted(
        by_severity["severity"].map(ov.SEVERITY_RANK)
    )


def test_the_bill_opens_the_runaway_flow_at_the_limit_hit() -> None:
    expected = truth("runaway")
    found = card("runaway", symptom="cost", app_name=expected["app_name"])
    first = found.iloc[0]
    assert (first["check"], first["severity"], first["flow"]) == (
        "over-call-limit",
        "CRITICAL",
        "runaway",
    )
    assert f"{len(expected['limit_hits'])} invocation(s) hit maxLlmCalls" in first["title"]
    errors = line(found, "quiet-errors", expected["app_name"])
    assert errors["severity"] == "WARNING"
    assert (
        f"{len(expected['errors']['error_code_events'])} event(s) with an error code"
        in (errors["title"])
    )


def test_a_crash_opens_the_orphans_of_the_ledger() -> None:
    expected = truth("crash_recovery")
    found = card("crash_recovery", symptom="crash", app_name="invoicing")
    first = found.iloc[0]
    assert (first["check"], first["flow"], first["severity"]) == ("orphans", "orphans", "CRITICAL")
    assert first["count"] == len(expected["orphans"])


def test_forgot_opens_the_overlapping_invocations_of_the_session() -> None:
    expected = truth("vanished_state")
    found = card("vanished_state", symptom="forgot")
    first = found.iloc[0]
    assert (first["check"], first["app"], first["count"]) == (
        "overlapping-invocations",
        expected["app_name"],
        1,
    )
    assert expected["session_id"] in first["title"]


def test_every_app_of_the_healthy_pack_needs_no_look() -> None:
    found = card("healthy")
    assert set(found["app"].dropna()) == set(
        json.loads((FIXTURES / "healthy" / "truth.json").read_text())["expected"][
            "terminal_agents_per_app"
        ]
    )
    assert not found["severity"].isin(["CRITICAL", "WARNING"]).any(), found.to_dict("records")
    assert "growing-classes" not in set(found["check"])  # no [histograms]: nothing to check
    with_restarts = card("healthy", symptom="restarts")
    missing = with_restarts.loc[with_restarts["check"].eq("growing-classes")]
    assert list(missing["severity"]) == ["NOT_CHECKED"]  # asked about: said, once per JVM


def test_an_unknown_symptom_lists_the_symptoms() -> None:
    with pytest.raises(ParameterError, match="spinner, slow, cost, forgot, crash, errors"):
        ov.setup(FIXTURES / "healthy", symptom="sad")


@pytest.mark.notebook
def test_the_notebook_with_only_a_manifest_and_a_symptom(tmp_path: Path) -> None:
    code, findings, html = read_run(
        "overview", FIXTURES / "latency_cliff", tmp_path, symptom="spinner"
    )
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    items = {item["id"]: item for item in findings["items"]}
    assert "open the latency_cliff flow first" in items["overview/card"]["title"]
    assert "the diagnostics log" in items["overview/first-evidence"]["title"]
    head = html[: html.index('id="The-triage-card"')]
    assert "latency_cliff" in head and "incidentkit run latency_cliff" in head


def test_restarts_open_the_classes_that_grow_and_name_the_culprit() -> None:
    expected = json.loads((FIXTURES / "slow_death" / "truth.json").read_text())["expected"]
    found = card("slow_death", symptom="restarts")
    first = found.iloc[0]
    assert (first["check"], first["severity"]) == ("growing-classes", "WARNING")
    assert pd.isna(first["app"])  # the JVM's line, not an app's
    assert len(found.loc[found["check"].eq("growing-classes")]) == 1  # one JVM, one line
    culprits = {c["culprit"] for c in expected["growing"] if c.get("culprit")}
    assert any(culprit in first["title"] for culprit in culprits), first["title"]


def test_the_lines_carry_the_command_that_opens_their_flow() -> None:
    expected = truth("vanished_state")
    found = card("vanished_state", symptom="forgot")
    first = found.iloc[0]
    folder = os.path.relpath(FIXTURES / "vanished_state")  # the tests run from the checkout
    assert first["command"] == (
        f"incidentkit run vanished_state --evidence {folder} --out out/vanished_state "
        f"-p app_name {expected['app_name']} -p session_id {expected['session_id']}"
    )
    slow = card("slow_death", symptom="restarts").iloc[0]
    assert slow["command"] is None and "byte[] ([B)" in slow["title"]
