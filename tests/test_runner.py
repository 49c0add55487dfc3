"""The orphan flow end to end: papermill runs of notebooks/orphans.ipynb against fixture packs."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
import pytest

from incidentkit.cli import main
from incidentkit.errors import ParameterError
from incidentkit.runner import (
    coerce_parameters,
    credentials,
    new_notebook,
    run_flow,
    scan_for_secrets,
)
from incidentkit.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
CRASH = ROOT / "fixtures" / "crash_recovery"
HEALTHY = ROOT / "fixtures" / "healthy"
pytestmark = pytest.mark.notebook


def items_by_id(findings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in findings["items"]}


def assert_matches_truth(findings: dict[str, Any], truth: dict[str, Any]) -> None:
    """Every run of the worked example is classified and acted on as the seed says."""
    expected = truth["expected"]
    items = items_by_id(findings)
    classified = {
        row["run_id"]: row
        for item_id, item in items.items()
        if item_id.startswith("orphans/") and item["rows"] and "orphan_class" in item["rows"][0]
        for row in item["rows"]
    }
    for run in expected["orphans"] + expected["non_terminal"]:
        got = classified.get(run["run_id"])
        assert got is not None, f"{run['name']} ({run['run_id']}) missing from the findings"
        assert got["orphan_class"] == run["orphan_class"], run["name"]
    orphan_rows = [r for i, it in items.items() if i.startswith("orphans/") for r in it["rows"]]
    assert findings["summary"]["orphans"] == len(expected["orphans"])
    assert {r["run_id"] for r in items["orphans/crash-loops"]["rows"]} == set(
        expected["crash_loops"]
    )
    assert {r["run_id"] for r in items["orphans/live-leases"]["rows"]} == set(
        expected["live_leases"]
    )
    assert {r["run_id"] for r in items["orphans/status-disagreements"]["rows"]} == {
        d["run_id"] for d in expected["status_disagreements"]
    }
    assert {r["business_key"] for r in items["orphans/duplicate-effects"]["rows"]} == {
        d["business_key"] for d in expected["duplicate_effects"]
    }
    owners = Counter(
        r["owner"] for i, it in items.items() if i in ORPHAN_CLASS_ITEMS for r in it["rows"]
    )
    assert dict(owners) == expected["orphans_per_owner"]
    assert orphan_rows


ORPHAN_CLASS_ITEMS = {
    "orphans/not-started",
    "orphans/model-inflight",
    "orphans/tool-unanswered",
    "orphans/paused",
    "orphans/actually-done",
}


def run_and_read(evidence: Path, out: Path, **parameters: Any) -> tuple[int, dict[str, Any]]:
    result = run_flow("orphans", evidence, out, parameters=parameters, progress=False)
    assert result.notebook.is_file() and result.html is not None and result.html.is_file()
    findings = json.loads(result.findings.read_text()) if result.findings else {}
    return result.exit_code, findings


def test_crash_recovery_from_files_matches_truth(tmp_path: Path) -> None:
    code, findings = run_and_read(CRASH, tmp_path)
    assert code == 1
    assert findings["verdict"] == "ACTION_NEEDED"
    assert_matches_truth(findings, json.loads((CRASH / "truth.json").read_text()))
    html = (tmp_path / "orphans.html").read_text()
    assert "import incidentkit" not in html  # code hidden by default
    assert "Orphan classification" in html and "TOOL_UNANSWERED" in html
    executed = nbformat.read(str(tmp_path / "orphans.ipynb"), as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_crash_recovery_from_a_database_matches_truth(
    database: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'incident.sqlite'}"
        if database == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    pack = simulate("crash_recovery", tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    code, findings = run_and_read(pack, tmp_path / "out")
    assert code == 1
    assert_matches_truth(findings, json.loads((pack / "truth.json").read_text()))
    text = "".join(p.read_text() for p in (tmp_path / "out").iterdir())
    assert url not in text  # the credential-bearing URL never reaches an artifact


@pytest.mark.parametrize(
    ("app", "terminal"), [("invoicing", "notify_agent"), ("support", "support_agent")]
)
def test_healthy_gives_no_findings_and_exit_zero(app: str, terminal: str, tmp_path: Path) -> None:
    argv = [
        "run",
        "orphans",
        "--evidence",
        str(HEALTHY),
        "--out",
        str(tmp_path),
        "--quiet",
        "-p",
        "app_name",
        app,
        "-p",
        "terminal_agent",
        terminal,
    ]
    assert main(argv) == 0
    findings = json.loads((tmp_path / "findings.json").read_text())
    assert findings["verdict"] == "CLEAN"
    assert findings["summary"]["runs"] > 0
    assert [item for item in findings["items"] if item["severity"] != "INFO"] == []


def test_rejected_rows_make_the_evidence_incomplete(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    with (pack / "events.jsonl").open("a") as handle:
        handle.write('{"id": "broken", "invocationId": \n')
    assert (
        main(["run", "orphans", "--evidence", str(pack), "--out", str(tmp_path / "out"), "--quiet"])
        == 2
    )
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert findings["verdict"] == "INCOMPLETE_EVIDENCE"


def test_exit_codes_for_usage_and_notebook_errors(tmp_path: Path) -> None:
    assert main(["run", "orphans", "--evidence", str(tmp_path), "--out", str(tmp_path)]) == 3
    assert (
        main(
            [
                "run",
                "orphans",
                "--evidence",
                str(CRASH),
                "--out",
                str(tmp_path),
                "-p",
                "colour",
                "red",
            ]
        )
        == 3
    )
    assert (
        main(
            [
                "run",
                "orphans",
                "--evidence",
                str(CRASH),
                "--out",
                str(tmp_path / "x"),
                "--quiet",
                "-p",
                "as_of",
                "2026-11-29T03:05:00",
            ]
        )
        == 4
    )  # naive: fails in cell


def test_parameters_are_coerced_to_declared_types() -> None:
    values = coerce_parameters(
        "orphans",
        {
            "attempts_cap": "5",
            "key_templates": '{"a": "k:{x}"}',
            "as_of": "2026-11-29T03:05:00Z",
        },
    )
    assert values == {
        "attempts_cap": 5,
        "key_templates": {"a": "k:{x}"},
        "as_of": "2026-11-29T03:05:00Z",
    }
    with pytest.raises(ParameterError, match="attempts_cap must be int"):
        coerce_parameters("orphans", {"attempts_cap": "three"})
    with pytest.raises(ParameterError, match="key_templates must be dict"):
        coerce_parameters("orphans", {"key_templates": "[1]"})


def test_new_writes_a_parameterised_unexecuted_copy(tmp_path: Path) -> None:
    path = new_notebook("INC-1", "orphans", CRASH, out=tmp_path, parameters={"attempts_cap": 5})
    nb = nbformat.read(str(path), as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1
    assert "attempts_cap = 5" in injected[0].source
    assert str(CRASH / "evidence.toml") in injected[0].source
    assert all(c.get("outputs", []) == [] for c in nb.cells if c.cell_type == "code")
    assert nb.metadata["kernelspec"]["name"] == "python3"
    with pytest.raises(ParameterError, match="already exists"):
        new_notebook("INC-1", "orphans", CRASH, out=tmp_path)


def test_secret_scan_finds_credentials_from_the_environment(tmp_path: Path) -> None:
    manifest = tmp_path / "evidence.toml"
    manifest.write_text('[ledger]\nurl = "env:IK_SECRET_URL"\n')
    url = "postgresql://alice:hunter22@db.internal/prod"
    secrets = credentials(manifest, {"IK_SECRET_URL": url})
    assert secrets == [url, "hunter22"]
    clean, leaky = tmp_path / "clean.html", tmp_path / "leaky.html"
    clean.write_text("<p>nothing here</p>")
    leaky.write_text("<pre>password=hunter22</pre>")
    assert scan_for_secrets([clean, leaky], secrets) == [leaky]


def test_unknown_flow_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="unknown flow"):
        run_flow("latency", CRASH, "/tmp/never")
