"""Exit codes a scheduler can trust: a failure that is not a finding (a bug, a full disk, a
read-only ``--out``) is one line and exit 4, never 0, 1 or 2, and leaves a result document
saying so where it can; the documented schedulers treat each code as the table says."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from incidentkit import batch
from incidentkit.batch import internal_error_text
from incidentkit.cli import main
from incidentkit.errors import Exit
from incidentkit.findings import Findings

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "healthy"
DOC = ROOT / "docs" / "scheduling.md"


def test_the_codes_are_reports_then_failures() -> None:
    assert [int(code) for code in Exit] == [0, 1, 2, 3, 4, 5, 130, 143]
    assert [code for code in Exit if code.is_report] == [0, 1, 2]
    assert [code.status for code in Exit] == [
        "clean",
        "action_needed",
        "incomplete_evidence",
        "usage",
        "failure",
        "busy",
        "interrupted",
        "interrupted",
    ]


def test_a_bug_ends_in_one_line_exit_4_and_a_summary_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def loader_bug(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("'float' object is not subscriptable")  # as a loader once raised

    monkeypatch.setattr(batch, "check_sources", loader_bug)
    out = tmp_path / "reports"
    argv = ["run", "all", "--evidence", str(HEALTHY), "--out", str(out), "--timestamped"]
    assert main([*argv, "--as-of", "2026-11-29T03:05:00Z", "--quiet"]) == Exit.FAILURE
    line = "incidentkit: internal error: TypeError: 'float' object is not subscriptable " + (
        "(please report)"
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("latest:") and err[1] == line  # no traceback
    summary = json.loads((out / "latest" / "summary.json").read_text(encoding="utf-8"))
    assert (summary["status"], summary["exit_code"]) == ("failure", 4)
    assert summary["error"] == line.removeprefix("incidentkit: ")


def test_a_bug_inside_one_flow_fails_that_flow_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("report")

    monkeypatch.setattr(batch, "run_flow", bug)
    result = batch.run_all(HEALTHY, tmp_path / "out", parameters={"app_name": "invoicing"})
    assert result.exit_code == Exit.FAILURE
    for outcome in result.outcomes:
        assert outcome.error == "internal error: KeyError: 'report' (please report)"
        document = Findings.read(tmp_path / "out" / outcome.flow / "findings.json")
        assert document.items[0].id == "run/error"
    assert result.summary["status"] == "failure"


def test_write_failures_name_the_file_the_run_meant_and_why() -> None:
    temporary = "/srv/out/.orphans.123-456.partial.ipynb"
    for code, reason in [
        (errno.ENOSPC, "disk full"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
    ]:
        text = internal_error_text(OSError(code, os.strerror(code), temporary))
        assert text == f"cannot write /srv/out/orphans.ipynb: {reason}"


def in_a_mount(options: str, mount: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``incidentkit ARGV`` with a fresh tmpfs (``options``) mounted at ``mount``, in a user and
    mount namespace of its own (``unshare``: no privilege needed, nothing left mounted)."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is needed (apt-get install util-linux)"
    script = 'mount -t tmpfs -o "$1" none "$2" && shift 2 && exec "$@"'
    command = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]
    command += [options, str(mount), sys.executable, "-m", "incidentkit.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.notebook
def test_a_full_disk_is_exit_4_in_one_line(tmp_path: Path) -> None:
    mount = tmp_path / "disk"
    mount.mkdir()
    argv = ["run", "orphans", "--evidence", str(HEALTHY), "--out", str(mount / "out")]
    done = in_a_mount("size=96k", mount, *argv, "-p", "app_name", "invoicing", "--quiet")
    assert done.returncode == Exit.FAILURE, done.stderr
    assert re.fullmatch(rf"incidentkit: cannot write {mount}/out(/\S+)?: disk full\n", done.stderr)


def test_a_read_only_out_is_exit_4_in_one_line(tmp_path: Path) -> None:
    mount = tmp_path / "ro"
    mount.mkdir()
    argv = ["run", "all", "--evidence", str(HEALTHY), "--out", str(mount / "out")]
    done = in_a_mount("ro", mount, *argv, "--timestamped", "--quiet")
    assert done.returncode == Exit.FAILURE, done.stderr
    assert done.stderr == f"incidentkit: cannot write {mount}/out: read-only file system\n"


def doc_block(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if marker in block)


def test_the_documented_schedulers_treat_reports_as_success_and_failures_as_failures() -> None:
    reports = {int(code) for code in Exit if code.is_report and code}
    unit = doc_block("ini", "SuccessExitStatus")
    success = re.search(r"^SuccessExitStatus=(.*)$", unit, re.M)
    assert success is not None and {int(c) for c in success[1].split()} == reports
    airflow = doc_block("python", "skip_on_exit_code")
    skipped = re.search(r"skip_on_exit_code=\[([^\]]*)\]", airflow)
    assert skipped is not None and {int(c) for c in skipped[1].split(",")} == reports
    table = DOC.read_text(encoding="utf-8")
    for code in Exit:  # the table names every code and its summary.json status
        assert re.search(rf"^\| {int(code)} \| `{code.status}` \|", table, re.M), code
