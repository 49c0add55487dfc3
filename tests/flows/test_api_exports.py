"""The flows on sessions saved from an API: Vertex AI Agent Engine pages give the findings of
the ADK Java log they were written from; a Firestore export makes every flow say what it
cannot tell and withhold what would rest on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run

from incidentkit.flows import FLOWS as DECLARED
from incidentkit.flows import latency_cliff, orphans, overview, runaway, session, vanished_state
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _truth(pack: Path) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads((pack / "truth.json").read_text())["expected"]
    return expected


def _findings(flow: str, pack: Path, **params: Any) -> dict[str, Any]:
    module = {
        "orphans": orphans,
        "runaway": runaway,
        "vanished_state": vanished_state,
        "session": session,
        "latency_cliff": latency_cliff,
        "overview": overview,
    }[flow]
    incident, settings = module.setup(pack, **params)
    report = module.triage(incident, settings)
    found: dict[str, Any] = module.findings(report, incident, settings).to_dict()
    return found


def _comparable(findings: dict[str, Any]) -> dict[str, Any]:
    """Findings without their provenance (the manifest's title and parameters)."""
    return {key: findings[key] for key in ("verdict", "summary", "items")}


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """The scenarios written as ADK Java lines and as Vertex AI pages (same seed)."""
    root = tmp_path_factory.mktemp("exports")
    out: dict[tuple[str, str], Path] = {}
    for scenario in ("runaway", "vanished_state"):
        for fmt in ("adk-java", "vertex-ai"):
            out[scenario, fmt] = simulate(scenario, root / f"{scenario}-{fmt}", events_format=fmt)
    out["crash_recovery", "adk-java"] = FIXTURES / "crash_recovery"
    out["crash_recovery", "vertex-ai"] = FIXTURES / "crash_recovery-vertex-ai"
    return out


CASES = [
    ("orphans", "crash_recovery", {"app_name": "invoicing"}),
    ("runaway", "runaway", {"app_name": "support"}),
    ("vanished_state", "vanished_state", {}),
]


@pytest.mark.parametrize(("flow", "scenario", "params"), CASES, ids=[c[0] for c in CASES])
def test_vertex_pages_give_the_findings_of_the_java_log(
    packs: dict[tuple[str, str], Path], flow: str, scenario: str, params: dict[str, Any]
) -> None:
    java, vertex = packs[scenario, "adk-java"], packs[scenario, "vertex-ai"]
    if flow == "vanished_state":
        params = {"session_id": _truth(java)["session_id"]}
    want, got = _findings(flow, java, **params), _findings(flow, vertex, **params)
    assert want["verdict"] == "ACTION_NEEDED"
    if flow != "vanished_state":
        assert _comparable(got) == _comparable(want)
        return

    # Agent Engine keeps the session's state (sessions.get), which a Java event log has not:
    # the verdict of every key is the same, and the replay now matches a stored state.
    def keys(findings: dict[str, Any]) -> list[tuple[Any, ...]]:
        (item,) = [i for i in findings["items"] if i["id"] == "vanished_state/keys"]
        return [(r["key"], r["verdict"], r["cause"]) for r in item["rows"]]

    assert keys(got) == keys(want) and got["verdict"] == want["verdict"]
    (replayed,) = [i for i in got["items"] if i["id"] == "vanished_state/replayed-state"]
    assert replayed["rows"] and all(row["matches"] for row in replayed["rows"])


@pytest.mark.slow
def test_the_orphan_notebook_runs_on_the_vertex_pack_as_a_user_runs_it(tmp_path: Path) -> None:
    pack = FIXTURES / "crash_recovery-vertex-ai"
    code, findings, html = read_run("orphans", pack, tmp_path / "out", app_name="invoicing")
    assert (code, findings["verdict"]) == (1, "ACTION_NEEDED")
    assert findings["summary"]["orphans"] == len(_truth(pack)["orphans"])
    assert findings["summary"]["rejects"] == 0 and "Traceback" not in html


FIRESTORE = FIXTURES / "vanished_state-firestore"
FLOWS = ["orphans", "runaway", "vanished_state", "session", "latency_cliff", "overview"]


@pytest.mark.parametrize("flow", FLOWS)
def test_every_flow_on_a_firestore_export_says_what_it_cannot_tell(flow: str) -> None:
    truth = _truth(FIRESTORE)
    params: dict[str, Any] = (
        {"session_id": truth["session_id"]}
        if flow in ("vanished_state", "session")
        else {"app_name": truth["app_name"]}
    )
    findings = _findings(flow, FIRESTORE, **params)
    first = findings["items"][0]
    assert first["id"] == f"{flow}/evidence-limits"
    assert findings["verdict"] == "INCOMPLETE_EVIDENCE"
    assert "Firestore export" in first["title"] and first["count"] == 4
    limits = DECLARED[flow].limits
    withheld = set(limits.withheld_items)
    assert not withheld & {item["id"] for item in findings["items"]}
    counts = set(limits.withheld_counts)
    assert not {k for k in findings["summary"] if k.split(".")[0] in counts}
    assert "rejects" in findings["summary"]
    assert limits.withheld in first["detail"]


@pytest.mark.slow
def test_the_firestore_notebook_shows_the_limits_first(tmp_path: Path) -> None:
    truth = _truth(FIRESTORE)
    code, findings, html = read_run(
        "vanished_state", FIRESTORE, tmp_path / "out", session_id=truth["session_id"]
    )
    assert code == 2 and findings["items"][0]["id"] == "vanished_state/evidence-limits"
    assert "keeps no invocation ids" in html and "This flow gives no state verdicts" in html
    assert "so the bug is on the read side" not in html  # no per-key verdict is shown
