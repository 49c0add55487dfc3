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
pytestmark = pytest.mark.xdist_group("overview_card")  # the forgot card is triaged once


def truth(pack: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((FIXTURES / pack / "truth.json").read_text())["expected"]
    return found


def card(pack: str, **parameters: Any) -> pd.DataFrame:
    incident, settings = ov.setup(FIXTURES / pack, **parameters)
    found: pd.DataFrame = ov.triage(incident, settings).card
    return found


@pytest.fixture(scope="module")
def forgot_card() -> pd.DataFrame:
    """The vanished_state incident's card for the symptom ``forgot``, triaged once: two tests
    read it (each gets a copy)."""
    return card("vanished_state", symptom="forgot")


@pytest.fixture
def forgot(forgot_card: pd.DataFrame) -> pd.DataFrame:
    return forgot_card.copy()


def line(found: pd.DataFrame, check: str, app: str) -> dict[str, Any]:
    [row] = found.loc[found["check"].eq(check) & found["app"].eq(app)].to_dict("records")
    return row


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_forgot_opens_the_session_where_state_vanished_with_its_keys(forgot: pd.DataFrame) -> None:
    expected = truth("vanished_state")
    found = forgot
    first = found.iloc[0]
    assert (first["check"], first["app"], first["severity"], first["flow"]) == (
        "state-can-vanish",
        expected["app_name"],
        "WARNING",
        "vanished_state",
    )
    assert first["session_id"] == expected["session_id"]
    # the keys the evidence shows vanish by ADK's rules: a temp: key, a partial-only key, and
    # the key the overlapping invocations raced on (not the overwritten or removed ones)
    vanish = {"temp_prefix", "partial_only", "raced"}
    shown = {k["key"] for k in expected["keys"] if k["diagnosis"] in vanish}
    assert set(first["keys"].split(",")) == shown
    overlap = line(found, "overlapping-invocations", expected["app_name"])
    assert overlap["severity"] == "WARNING" and expected["session_id"] in overlap["title"]


@pytest.mark.slow
def test_forgot_puts_the_keys_in_the_command_and_never_says_clean_unexamined(
    tmp_path: Path,
) -> None:
    expected = truth("vanished_state")
    incident, settings = ov.setup(FIXTURES / "vanished_state", symptom="forgot")
    found = ov.findings(ov.triage(incident, settings), incident, settings)
    item = next(i for i in found.items if i.id == "overview/card")
    assert f"-p session_id {expected['session_id']} -p keys " in item.action
    row = next(r for r in item.rows if r["check"] == "state-can-vanish")
    assert row["command"].endswith(f"-p keys {row['keys']}")
    # an app whose events carry no state at all: the card cannot say the state is clean
    bare = tmp_path / "bare"
    bare.mkdir()
    lines = (FIXTURES / "healthy" / "events.jsonl").read_text().splitlines()
    kept = [x for x in lines if '"appName":"expenses"' in x]
    (bare / "events.jsonl").write_text("\n".join(kept) + "\n")
    (bare / "evidence.toml").write_text('[events]\npath = "events.jsonl"\n')
    incident, settings = ov.setup(bare, symptom="forgot")
    report = ov.triage(incident, settings)
    state = report.card.loc[report.card["check"].eq("state-can-vanish")]
    assert (
        list(state["severity"]) == ["NOT_CHECKED"] and "no key to examine" in state.iloc[0]["title"]
    )
    found = ov.findings(report, incident, settings)
    assert found.verdict.value == "INCOMPLETE_EVIDENCE"
    title = next(i.title for i in found.items if i.id == "overview/card")
    assert "cannot say it is clean" in title


@pytest.mark.slow
def test_a_crash_without_a_symptom_opens_the_orphans_not_the_latency_flow() -> None:
    expected = truth("crash_recovery")
    for symptom in ("", "spinner", "slow"):
        found = card("crash_recovery", symptom=symptom, app_name="invoicing")
        urgent = found.loc[found["severity"].isin(["CRITICAL", "WARNING"])]
        assert urgent.iloc[0]["flow"] == "orphans", (symptom, urgent.iloc[0]["title"])
        assert "latency_cliff" not in set(urgent["flow"]), urgent.to_dict("records")
        dead = line(found, "dead-worker", "invoicing")
        workers = {o["owner"] for o in expected["orphans"]}
        assert all(w in dead["title"] for w in workers) and "worker died" in dead["title"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_lines_carry_the_command_that_opens_their_flow(forgot: pd.DataFrame) -> None:
    expected = truth("vanished_state")
    found = forgot
    first = found.iloc[0]
    folder = os.path.relpath(FIXTURES / "vanished_state")  # the tests run from the checkout
    assert first["command"] == (
        f"incidentkit run vanished_state --evidence {folder} --out out/vanished_state "
        f"-p app_name {expected['app_name']} -p session_id {expected['session_id']} "
        f"-p keys {first['keys']}"
    )  # the keys the session's suspects name, ready to paste
    lost = {k["key"] for k in expected["keys"] if k["diagnosis"] in ("temp_prefix", "raced")}
    assert lost <= set(first["keys"].split(","))
    slow = card("slow_death", symptom="restarts").iloc[0]
    assert slow["command"] is None and "byte[] ([B)" in slow["title"]
