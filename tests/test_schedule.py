"""Scheduled reports: relative windows, --as-of, stale evidence, timestamped folders, the
commands docs/scheduling.md gives to cron, systemd and Airflow, and papermill's error flags."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest

from incidentkit import batch, runner, schedule
from incidentkit.cli import build_parser, main
from incidentkit.errors import ManifestError, ParameterError
from incidentkit.findings import Finding, Findings, Provenance, Severity, Verdict
from incidentkit.flows import FLOWS
from incidentkit.manifest import AS_OF_ENV, Window, parse_manifest

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "healthy"
DOC = ROOT / "docs" / "scheduling.md"


def ts(text: str) -> pd.Timestamp:
    return pd.Timestamp(text)


# ---------------------------------------------------------------------------- relative windows


def manifest_with(window: Any, tmp_path: Path) -> Any:
    return parse_manifest({"window": window, "ledger": {"path": "l.csv"}}, base=tmp_path)


def test_a_relative_window_ends_at_the_run_s_as_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(AS_OF_ENV, "2026-12-02T06:15:00Z")
    window = manifest_with({"last": "2h"}, tmp_path).filters.window
    assert window == Window(ts("2026-12-02T04:15:00Z"), ts("2026-12-02T06:15:00Z"))
    assert window.last == pd.Timedelta(hours=2)
    moved = window.anchored(ts("2026-12-03T00:00:00Z"))
    assert (moved.start, moved.last) == (ts("2026-12-02T22:00:00Z"), window.last)
    fixed = Window(ts("2026-11-29T02:30:00Z"), ts("2026-11-29T03:05:00Z"))
    assert fixed.anchored(ts("2026-12-03T00:00:00Z")) is fixed


def test_without_an_anchor_a_relative_window_ends_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(AS_OF_ENV, raising=False)
    before = pd.Timestamp.now(tz="UTC")
    window = manifest_with({"last": "1h30min"}, tmp_path).filters.window
    assert window is not None and before <= window.end <= before + pd.Timedelta(seconds=2)
    assert window.end == window.end.ceil("s")
    assert window.end - window.start == pd.Timedelta(minutes=90)


@pytest.mark.parametrize("last", ["", "2", "-2h", "0s", "two hours", 7200])
def test_a_bad_relative_window_says_how_to_write_one(last: Any, tmp_path: Path) -> None:
    with pytest.raises(
        ManifestError, match=r'window last must be a positive duration.*last = "2h"'
    ):
        manifest_with({"last": last}, tmp_path)
    with pytest.raises(ManifestError, match="or with last"):
        manifest_with({"last": "2h", "start": "2026-11-29T02:30:00Z"}, tmp_path)


def test_a_naive_anchor_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AS_OF_ENV, "2026-12-02T06:15:00")
    with pytest.raises(ManifestError, match=AS_OF_ENV):
        manifest_with({"last": "2h"}, tmp_path)


def test_as_of_and_stale_after_are_parsed() -> None:
    assert schedule.parse_as_of("2026-12-02T06:15:00+01:00") == ts("2026-12-02T05:15:00Z")
    stamp = schedule.parse_as_of("now")
    assert stamp is not None and stamp == stamp.ceil("s")
    assert schedule.parse_as_of(None) is None
    with pytest.raises(ParameterError, match="--as-of"):
        schedule.parse_as_of("2026-12-02T06:15:00")
    assert schedule.parse_stale_after("30min") == pd.Timedelta(minutes=30)
    with pytest.raises(ParameterError, match="--stale-after must be a positive duration"):
        schedule.parse_stale_after("soon")


# ---------------------------------------------------------------------------- stale evidence

AS_OF = ts("2026-12-02T06:15:00Z")
TWO_HOURS = Window.before(AS_OF, pd.Timedelta(hours=2))


def test_evidence_within_the_window_s_length_is_fresh() -> None:
    end = AS_OF - pd.Timedelta(minutes=90)
    assert schedule.stale_finding(AS_OF, end, "events", window=TWO_HOURS) is None


def test_evidence_ending_long_before_as_of_is_stale() -> None:
    fixed = Window(ts("2026-11-29T09:00:00Z"), ts("2026-11-29T10:00:00Z"))
    end = ts("2026-11-29T09:59:00Z")
    item = schedule.stale_finding(AS_OF, end, "spans", window=fixed)
    assert item is not None and item.id == "run/stale-evidence"
    assert item.severity is Severity.WARNING
    assert item.title == "the evidence ends 2d 20h 16min before as_of"
    [row] = item.rows
    assert row["frame"] == "spans" and row["evidence_end"] == "2026-11-29T09:59:00Z"
    assert row["stale_after_s"] == 3600.0  # the window's length
    assert (
        schedule.stale_finding(AS_OF, end, "spans", window=fixed, stale_after=pd.Timedelta(days=3))
        is None
    )


def test_a_window_without_a_row_is_stale_and_no_window_allows_an_hour() -> None:
    item = schedule.stale_finding(AS_OF, None, None, window=TWO_HOURS)
    assert item is not None and item.title == "no evidence row in the window judged"
    late = AS_OF - pd.Timedelta(minutes=61)
    assert schedule.stale_finding(AS_OF, late, "runs", window=None) is not None
    assert (
        schedule.stale_finding(AS_OF, AS_OF - pd.Timedelta(minutes=59), "runs", window=None) is None
    )


def test_the_evidence_end_is_the_latest_row_in_the_window_read() -> None:
    from incidentkit.manifest import load_manifest

    manifest = load_manifest(HEALTHY)
    end, frame = schedule.evidence_end(manifest, ts("2026-11-29T10:00:00Z"))
    assert end is not None and ts("2026-11-29T09:30:00Z") < end <= ts("2026-11-29T10:05:00Z")
    assert frame in ("runs", "events", "journal", "spans", "diagnostics", "calls", "responses")


def test_a_stale_item_makes_the_verdict_incomplete() -> None:
    clean = Findings("orphans", Verdict.CLEAN, {"runs": 3}, (), Provenance())
    stale = schedule.stale_finding(AS_OF, None, None, window=TWO_HOURS)
    assert stale is not None
    marked = runner.with_items(clean, [stale])
    assert marked.verdict is Verdict.INCOMPLETE_EVIDENCE and marked.items == (stale,)
    note = Finding("run/note", Severity.INFO, "t", "d", "a")
    assert runner.with_items(clean, [note]).verdict is Verdict.CLEAN


# ---------------------------------------------------------------------------- folders


def test_timestamped_folders_never_collide_and_latest_moves_atomically(tmp_path: Path) -> None:
    first = schedule.stamped_folder(tmp_path / "out", AS_OF)
    second = schedule.stamped_folder(tmp_path / "out", AS_OF)
    assert (first.name, second.name) == ("2026-12-02T061500Z", "2026-12-02T061500Z-2")
    link = schedule.point_latest(first)
    assert os.readlink(link) == first.name
    schedule.point_latest(second)
    assert os.readlink(link) == second.name and link.resolve() == second.resolve()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "2026-12-02T061500Z",
        "2026-12-02T061500Z-2",
        "latest",
    ]  # no temporary link left behind


def test_latest_that_is_a_real_folder_or_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out" / "latest").mkdir(parents=True)
    folder = schedule.stamped_folder(tmp_path / "out", AS_OF)
    with pytest.raises(ParameterError, match="latest beside the run folders is not a symlink"):
        schedule.point_latest(folder)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ParameterError, match="--out names a file"):
        schedule.stamped_folder(tmp_path / "file", AS_OF)


def test_as_of_given_twice_is_a_usage_error_recorded_in_the_run_s_folder(tmp_path: Path) -> None:
    argv = [
        *("run", "orphans", "--evidence", str(HEALTHY), "--out", str(tmp_path), "--timestamped"),
        *("--as-of", "2026-12-02T06:15:00Z", "-p", "as_of", "2026-12-02T06:15:00Z"),
    ]
    assert main(argv) == 3
    findings = Findings.read(tmp_path / "latest" / "findings.json")
    assert "given twice" in findings.items[0].detail
    assert os.readlink(tmp_path / "latest") == "2026-12-02T061500Z"


# ---------------------------------------------------------------------------- error flags


def executed(cells: list[Any], *, notebook_exception: bool | None = None) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["papermill"] = {"exception": notebook_exception}
    return nb


def code_cell(outputs: list[Any] = (), tags: list[str] = (), **papermill: Any) -> Any:  # type: ignore[assignment]
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = list(outputs)
    cell.metadata["tags"] = list(tags)
    cell.metadata["papermill"] = {"exception": False, "status": "completed", **papermill}
    return cell


ERROR = nbformat.v4.new_output("error", ename="ValueError", evalue="boom", traceback=[])


@pytest.mark.parametrize(
    ("cells", "flag", "message"),
    [
        ([code_cell(), code_cell()], None, None),
        (
            [code_cell(), code_cell([ERROR], ["raises-exception"])],
            None,
            "ValueError: boom in cell 2 (raises-exception)",
        ),
        (
            [code_cell(exception=True, status="failed")],
            True,
            "papermill flagged an exception in cell 1",
        ),
        ([code_cell()], True, "papermill flagged an exception in the notebook"),
    ],
)
def test_papermill_s_error_flags_fail_the_run(
    cells: list[Any], flag: bool | None, message: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "run.ipynb"
    nbformat.write(executed(cells, notebook_exception=flag), str(path))
    assert runner.notebook_failure(path) == (None if message is None else (4, message))


@pytest.mark.notebook
def test_a_cell_that_exits_zero_after_the_findings_is_still_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """papermill returns without raising for ``sys.exit(0)``; the findings say CLEAN."""
    nb = nbformat.read(str(runner.NOTEBOOKS / "orphans.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("raise SystemExit(0)"))
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, str(tmp_path / "notebooks" / "orphans.ipynb"))
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path / "notebooks")
    result = runner.run_flow(
        "orphans", HEALTHY, tmp_path / "out", parameters={"app_name": "invoicing"}, progress=False
    )
    assert result.exit_code == 4
    assert result.error is not None and result.error.startswith("SystemExit: 0 in cell ")
    assert Findings.read(tmp_path / "out" / "findings.json").items[0].id == "run/error"


# ---------------------------------------------------------------------------- scheduled runs


@pytest.mark.notebook
def test_a_single_flow_run_judged_long_after_its_evidence_warns(tmp_path: Path) -> None:
    argv = [
        *("run", "orphans", "--evidence", str(HEALTHY), "--out", str(tmp_path), "--quiet"),
        *("--timestamped", "--as-of", "2026-12-02T06:15:00Z", "-p", "app_name", "invoicing"),
    ]
    assert main(argv) == 2  # clean, but the evidence ends days before as_of
    folder = tmp_path / "2026-12-02T061500Z"
    assert os.readlink(tmp_path / "latest") == folder.name
    findings = json.loads((folder / "findings.json").read_text(encoding="utf-8"))
    assert findings["verdict"] == "INCOMPLETE_EVIDENCE"
    assert findings["evidence"]["as_of"] == "2026-12-02T06:15:00Z"
    stale = [item for item in findings["items"] if item["id"] == "run/stale-evidence"]
    assert len(stale) == 1 and stale[0]["severity"] == "WARNING"
    assert [item for item in findings["items"] if item["severity"] != "INFO"] == stale
    assert stale[0]["title"] in (folder / "orphans.html").read_text(encoding="utf-8")


def doc_commands() -> dict[str, str]:
    """The command each scheduler runs, as docs/scheduling.md writes it."""
    text = DOC.read_text(encoding="utf-8")
    cron = re.search(r"```cron\n\S+ \S+ \S+ \S+ \S+ cd /srv && (.+?) >>", text)
    systemd = re.search(r"^ExecStart=(.+)$", text, re.MULTILINE)
    airflow = re.search(r'bash_command="(.+?)"', text)
    assert cron and systemd and airflow, "a scheduler's command is missing from the doc"
    return {"cron": cron.group(1), "systemd": systemd.group(1), "airflow": airflow.group(1)}


def argv_of(command: str, out: Path) -> list[str]:
    """The command's arguments, aimed at the healthy fixture and ``out`` (Airflow's template
    rendered as Airflow renders ``{{ data_interval_end | ts }}``)."""
    words = shlex.split(
        command.replace("{{ data_interval_end | ts }}", "2026-11-29T10:00:00+00:00")
    )
    assert words[0].endswith("bin/incidentkit")
    argv = words[1:]
    argv[argv.index("--evidence") + 1] = str(HEALTHY)
    argv[argv.index("--out") + 1] = str(out)
    return argv


def test_the_documented_commands_are_one_command_the_parser_takes() -> None:
    commands = doc_commands()
    parsed = {
        name: build_parser().parse_args(argv_of(c, Path("/o"))) for name, c in commands.items()
    }
    for args in parsed.values():
        assert (args.flow, args.timestamped, args.parameter) == (
            "all",
            True,
            [["app_name", "support"]],
        )
    assert parsed["cron"].as_of == parsed["systemd"].as_of == "now"
    assert parsed["airflow"].as_of == "2026-11-29T10:00:00+00:00"


@pytest.mark.notebook
def test_scheduled_runs_back_to_back_keep_every_folder_and_point_latest_at_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cron's and systemd's command (as of now: days after the fixture, so stale), then
    Airflow's (as of the fixture's end: fresh, a backfill) into one OUT, one flow each to stay
    cheap. latest stays at the run that judged the latest time."""
    monkeypatch.setattr(batch, "FLOWS", {"orphans": FLOWS["orphans"]})
    out = tmp_path / "reports"
    commands = doc_commands()
    codes = [main(argv_of(commands[name], out)) for name in ("cron", "systemd", "airflow")]
    assert codes == [2, 2, 0]
    folders = sorted(p for p in out.iterdir() if p.name != "latest")
    assert len(folders) == 3
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in folders}
    airflow = summaries.pop("2026-11-29T100000Z")
    assert airflow["exit_code"] == 0 and airflow["stale"] is None
    assert os.readlink(out / "latest") == max(summaries)  # the backfill does not move it back
    for summary in summaries.values():  # the two runs as of now
        assert summary["exit_code"] == 2
        assert summary["stale"]["id"] == "run/stale-evidence"
        assert summary["flows"]["orphans"]["verdict"] == "INCOMPLETE_EVIDENCE"
        assert (out / next(iter(summaries)) / "orphans" / "orphans.html").is_file()
    assert (out / "latest" / "index.html").is_file()
