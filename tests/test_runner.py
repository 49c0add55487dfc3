"""The orphan flow end to end: papermill runs of notebooks/orphans.ipynb against fixture packs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import INCIDENT_DB_PASSWORD

from incidentkit.cli import main
from incidentkit.errors import ParameterError
from incidentkit.findings import Findings
from incidentkit.runner import (
    check_sources,
    coerce_parameters,
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
    classified = {  # the items that list runs with their class and action
        row["run_id"]: row
        for item in items.values()
        if item["rows"] and "unanswered_calls" in item["rows"][0]
        for row in item["rows"]
    }
    live = {row["run_id"]: row for row in items["orphans/live-leases"]["rows"]}
    for run_id, row in live.items():
        classified.setdefault(run_id, {**row, "action_kind": "NONE"})
    for run in expected["orphans"] + expected["non_terminal"]:
        got = classified.get(run["run_id"])
        assert got is not None, f"{run['name']} ({run['run_id']}) missing from the findings"
        assert got["orphan_class"] == run["orphan_class"], run["name"]
        assert got["action_kind"] in ACTIONS[run["action"]], (run["name"], got["action_kind"])
        assert got["invocation_id"] == run["invocation_id"], run["name"]
        if run["run_id"] in live:
            continue  # a live lease: listed with its lease, not its calls
        calls = run["unanswered_calls"]
        assert sorted(got["unanswered_calls"]) == sorted(c["call_id"] for c in calls)
        if len(calls) == 1 and calls[0]["business_key"]:
            assert got["journal_verdict"] == calls[0]["journal_verdict"], run["name"]
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


# truth.json names actions in words; the kit's action kinds (a live run "waits" as NONE).
ACTIONS = {
    "redrive": {"REDRIVE"},
    "ask_downstream": {"ASK_DOWNSTREAM"},
    "mark_done": {"MARK_DONE"},
    "mark_paused": {"MARK_PAUSED"},
    "park": {"PARK"},
    "wait": {"WAIT", "NONE"},
    "replay": {"REPLAY"},
}
ORPHAN_CLASS_ITEMS = {
    "orphans/not-started",
    "orphans/model-inflight",
    "orphans/tool-unanswered",
    "orphans/paused",
    "orphans/actually-done",
}


def run_and_read(evidence: Path, out: Path, **parameters: Any) -> tuple[int, dict[str, Any]]:
    """Run the orphan flow on the invoicing app: every other setting from the pack's profile."""
    parameters = {"app_name": "invoicing", **parameters}
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


def test_crash_recovery_from_a_database_matches_truth(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = incident_db_url
    pack = simulate("crash_recovery", tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    code, findings = run_and_read(pack, tmp_path / "out")
    assert code == 1
    assert_matches_truth(findings, json.loads((pack / "truth.json").read_text()))
    text = "".join(p.read_text() for p in (tmp_path / "out").iterdir())
    assert url not in text  # the credential-bearing URL never reaches an artifact
    assert INCIDENT_DB_PASSWORD not in text


@pytest.mark.parametrize("app", ["invoicing", "support"])
def test_healthy_gives_no_findings_and_exit_zero(app: str, tmp_path: Path) -> None:
    """Only the app is given: its terminal agent and key templates come from [apps.<app>]."""
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
    ]
    assert main(argv) == 0
    findings = json.loads((tmp_path / "findings.json").read_text())
    assert findings["verdict"] == "CLEAN"
    parameters = findings["evidence"]["parameters"]
    assert parameters["app_name"] == app
    assert parameters["settings_from"]["terminal_agent"] == f"[apps.{app}]"
    assert findings["summary"]["runs"] > 0
    assert [item for item in findings["items"] if item["severity"] != "INFO"] == []


def test_rejected_rows_make_the_evidence_incomplete(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    with (pack / "events.jsonl").open("a") as handle:
        handle.write('{"id": "broken", "invocationId": \n')
    assert (
        main(
            [
                *("run", "orphans", "--evidence", str(pack), "--out", str(tmp_path / "out")),
                *("--quiet", "-p", "app_name", "invoicing"),
            ]
        )
        == 2
    )
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert findings["verdict"] == "INCOMPLETE_EVIDENCE"


def test_exit_codes_for_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = str(tmp_path / "out")
    assert main(["run", "orphans", "--evidence", str(tmp_path), "--out", out]) == 3
    assert main(["run", "orphans", "--evidence", str(CRASH), "--out", out, "--bogus"]) == 3
    assert (
        main(["run", "orphans", "--evidence", str(CRASH), "--out", out, "-p", "colour", "red"]) == 3
    )
    # a naive as_of is refused inside the notebook: still a usage error
    assert (
        main(
            [
                "run",
                "orphans",
                "--evidence",
                str(CRASH),
                "--out",
                out,
                "--quiet",
                "-p",
                "as_of",
                "2026-11-29T03:05:00",
            ]
        )
        == 3
    )
    # an env: URL whose variable is unset is refused before a kernel starts
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "evidence.toml").write_text('[ledger]\nurl = "env:IK_UNSET_URL"\n')
    monkeypatch.delenv("IK_UNSET_URL", raising=False)
    assert main(["run", "orphans", "--evidence", str(tmp_path / "db"), "--out", out]) == 3


def test_an_unreadable_source_is_incomplete_evidence(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    (pack / "ledger.csv").unlink()
    assert (
        main(
            [
                *("run", "orphans", "--evidence", str(pack), "--out", str(tmp_path / "out")),
                *("--quiet", "-p", "app_name", "invoicing"),
            ]
        )
        == 2
    )
    assert (tmp_path / "out" / "orphans.html").is_file()
    # A scheduler still gets a findings document, with the error's own text.
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert findings["verdict"] == "INCOMPLETE_EVIDENCE"
    [item] = findings["items"]
    assert item["id"] == "run/error"
    assert "SourceError" in item["detail"] and "ledger.csv" in item["detail"]


def test_a_failing_cell_s_message_reaches_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "orphans", "--evidence", str(CRASH), "--out", str(tmp_path), "--quiet"]
    assert main([*argv, "-p", "app_name", "billing"]) == 3
    err = capsys.readouterr().err
    rows = (CRASH / "ledger.csv").read_text(encoding="utf-8").splitlines()[1:]
    apps = ", ".join(sorted({row.split(",")[1] for row in rows}))  # app_name: second column
    said = "ParameterError: app_name 'billing' matches nothing: 0 runs, 0 events, "
    assert f"incidentkit: {said}" in err and f"diagnostics log hold: {apps}" in err
    assert "see the failing cell" not in err
    assert "without encryption" not in err  # the kernel talks over IPC, not TCP
    findings = json.loads((tmp_path / "findings.json").read_text())
    assert findings["items"][0]["detail"].startswith(said)
    assert findings["evidence"]["parameters"]["flow_parameters"]["app_name"] == "billing"


def test_a_cell_timeout_names_the_cell_and_its_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the flow notebook with a stuck cell: the real runner, kernel and timeout."""
    from incidentkit import runner

    nb = nbformat.read(str(runner.NOTEBOOKS / "orphans.ipynb"), as_version=4)
    stuck = nbformat.v4.new_code_cell("import time\n\ntime.sleep(60)")
    stuck.metadata["tags"] = ["load"]
    nb.cells.insert(2, stuck)
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, str(tmp_path / "notebooks" / "orphans.ipynb"))
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path / "notebooks")
    result = runner.run_flow(
        "orphans", CRASH, tmp_path / "out", timeout=2, progress=False, parameters={}
    )
    assert result.exit_code == 4
    assert result.error == "timed out after 2 s in cell 4 (load)"  # after the injected cell
    assert Findings.read(tmp_path / "out" / "findings.json").items[0].id == "run/error"


def test_out_naming_a_file_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("an earlier report")
    argv = ["run", "orphans", "--evidence", str(CRASH), "--out", str(target)]
    assert main([*argv, "-p", "app_name", "invoicing"]) == 3
    assert target.read_text() == "an earlier report"


def test_version_and_one_exit_code_per_error_class(capsys: pytest.CaptureFixture[str]) -> None:
    from incidentkit import errors

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("incidentkit ")
    assert [
        errors.exit_code_of(name)
        for name in (
            "ManifestError",
            "ParameterError",
            "SourceError",
            "SchemaError",
            "NotebookError",
            "SimulationError",
            "KeyError",
        )
    ] == [3, 3, 2, 2, 4, 3, 4]


def test_inspect_run_and_new_do_not_import_the_simulator() -> None:
    code = (
        "import sys\n"
        "from incidentkit.cli import main\n"
        f"main(['inspect', {str(CRASH)!r}])\n"
        "sys.exit(any(m.startswith('incidentkit.simulate') for m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


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


def test_new_says_which_required_parameter_the_notebook_still_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    vanished = CRASH.parent / "vanished_state"
    assert main(["new", "INC-2", "--flow", "vanished_state", "--evidence", str(vanished)]) == 0
    assert "needs session_id" in capsys.readouterr().err
    argv = ["new", "INC-3", "--flow", "session", "--evidence", str(vanished)]
    assert main([*argv, "-p", "session_id", "s-1"]) == 0
    assert "needs" not in capsys.readouterr().err
    assert main(["new", "INC-4", "--flow", "orphans", "--evidence", str(CRASH)]) == 0
    err = capsys.readouterr().err  # the ledger holds several apps, the manifest names none
    assert "the evidence holds the apps expenses, invoicing, support, travel" in err
    argv = ["new", "INC-5", "--flow", "orphans", "--evidence", str(CRASH)]
    assert main([*argv, "-p", "app_name", "invoicing"]) == 0
    assert "note" not in capsys.readouterr().err


def test_secret_scan_finds_credentials_from_the_environment(tmp_path: Path) -> None:
    manifest = tmp_path / "evidence.toml"
    manifest.write_text('[ledger]\nurl = "env:IK_SECRET_URL"\n')
    url = "postgresql://alice:hunter22@db.internal/prod?sslpassword=k3y-pass"
    secrets = check_sources(manifest, {"IK_SECRET_URL": url})
    assert {"hunter22", "k3y-pass", url} <= set(secrets)  # the whole value is one too
    clean, leaky = tmp_path / "clean.html", tmp_path / "leaky.html"
    clean.write_text("<p>read from db.internal as alice</p>")  # a host or a user is no secret
    leaky.write_text("<pre>password=hunter22</pre>")
    assert scan_for_secrets([clean, leaky], secrets) == [leaky]


def test_unknown_flow_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="unknown flow"):
        run_flow("latency", CRASH, "/tmp/never")


def test_a_run_refused_before_the_notebook_replaces_an_earlier_findings_json(
    tmp_path: Path,
) -> None:
    stale = tmp_path / "findings.json"
    stale.write_text('{"verdict": "ACTION_NEEDED"}')
    argv = ["run", "orphans", "--evidence", str(CRASH), "--out", str(tmp_path), "--quiet"]
    assert main([*argv, "-p", "app_nam", "invoicing"]) == 3
    findings = Findings.read(stale)
    assert findings.verdict.value == "INCOMPLETE_EVIDENCE"
    assert "app_nam" in findings.items[0].detail


def test_a_run_refused_before_the_notebook_writes_findings_into_a_new_out_folder(
    tmp_path: Path,
) -> None:
    out = tmp_path / "reports" / "INC-1"
    argv = ["run", "vanished_state", "--evidence", str(CRASH), "--out", str(out), "--quiet"]
    assert main([*argv, "-p", "keys", "[1"]) == 3
    findings = Findings.read(out / "findings.json")
    assert findings.verdict.value == "INCOMPLETE_EVIDENCE"
    assert "-p keys" in findings.items[0].detail  # the fix names the parameter itself


def test_a_list_parameter_takes_json_or_names_separated_by_commas() -> None:
    assert coerce_parameters("vanished_state", {"keys": '["a", "b"]'}) == {"keys": ["a", "b"]}
    assert coerce_parameters("vanished_state", {"keys": "loyalty_tier, cart"}) == {
        "keys": ["loyalty_tier", "cart"]
    }


def test_parameters_the_runner_sets_and_a_bad_timeout_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="-p evidence is set by the runner"):
        coerce_parameters("orphans", {"evidence": "elsewhere"})
    with pytest.raises(ParameterError, match="-p findings_path is set by the runner"):
        coerce_parameters("orphans", {"findings_path": "x.json"})
    for timeout in (0, -3):
        with pytest.raises(ParameterError, match="--timeout must be a positive number"):
            run_flow("orphans", CRASH, tmp_path / "out", timeout=timeout, progress=False)
    assert not (tmp_path / "out").exists()  # refused before anything was written
