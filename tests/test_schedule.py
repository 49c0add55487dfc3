"""Scheduled reports: relative windows, --as-of, stale evidence, timestamped folders, the
commands docs/scheduling.md gives to cron, systemd and Airflow, and papermill's error flags."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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
from incidentkit.flows.common import opened
from incidentkit.manifest import (
    AS_OF_FROM_ENV,
    STALE_AFTER_ENV,
    Window,
    parse_manifest,
)

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "healthy"
DOC = ROOT / "docs" / "scheduling.md"


def ts(text: str) -> pd.Timestamp:
    return pd.Timestamp(text)


# ---------------------------------------------------------------------------- relative windows


def manifest_with(window: Any, tmp_path: Path, as_of: pd.Timestamp | None = None) -> Any:
    data = {"window": window, "ledger": {"path": "l.csv"}}
    return parse_manifest(data, base=tmp_path, as_of=as_of)


def test_a_relative_window_ends_at_the_run_s_as_of(tmp_path: Path) -> None:
    window = manifest_with({"last": "2h"}, tmp_path, ts("2026-12-02T06:15:00Z")).filters.window
    assert window == Window(ts("2026-12-02T04:15:00Z"), ts("2026-12-02T06:15:00Z"))
    assert window.last == pd.Timedelta(hours=2)
    moved = window.anchored(ts("2026-12-03T00:00:00Z"))
    assert (moved.start, moved.last) == (ts("2026-12-02T22:00:00Z"), window.last)
    fixed = Window(ts("2026-11-29T02:30:00Z"), ts("2026-11-29T03:05:00Z"))
    assert fixed.anchored(ts("2026-12-03T00:00:00Z")) is fixed


def test_without_an_anchor_a_relative_window_ends_now(tmp_path: Path) -> None:
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


def test_a_flow_opens_a_relative_window_at_its_as_of_and_refuses_a_naive_one(
    tmp_path: Path,
) -> None:
    """The kernel's steps hand the flow's as_of to the manifest explicitly: its relative window
    ends there (no environment variable anchors it), and an as_of without a zone is refused."""
    (tmp_path / "l.csv").write_text(
        (ROOT / "fixtures" / "crash_recovery" / "ledger.csv").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    (tmp_path / "evidence.toml").write_text(
        'window = { last = "2h" }\n[ledger]\npath = "l.csv"\n', encoding="utf-8"
    )
    incident = opened("orphans", tmp_path, as_of="2026-11-29T04:00:00Z")
    assert incident.filters.window == Window(
        ts("2026-11-29T02:00:00Z"), ts("2026-11-29T04:00:00Z"), pd.Timedelta(hours=2)
    )
    with pytest.raises(ParameterError, match="as_of"):
        opened("orphans", tmp_path, as_of="2026-11-29T04:00:00")


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
    assert item.title == "the evidence ends 2 d 20 h before as_of"
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
    judged = ts(findings["evidence"]["as_of"])  # ages judged at the evidence's end
    assert ts("2026-11-29T09:30:00Z") < judged <= ts("2026-11-29T10:00:00Z")
    said = findings["evidence"]["parameters"]["settings_from"]["as_of"]
    assert said.startswith("the evidence's end: the evidence ends 2 d 20 h before as_of ")
    assert said.endswith("2026-12-02T06:15:00Z (--as-of); ages judged at its end")
    stale = [item for item in findings["items"] if item["id"] == "run/stale-evidence"]
    assert len(stale) == 1 and stale[0]["severity"] == "WARNING"
    assert stale[0]["rows"][0]["as_of"] == "2026-12-02T06:15:00Z"
    assert [item for item in findings["items"] if item["severity"] != "INFO"] == stale
    page = (folder / "orphans.html").read_text(encoding="utf-8")
    first = page[page.index("ik-summary") :].partition("<table")[0]
    assert f"<b>Why incomplete:</b> {stale[0]['title']}; ages (leases" in first


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


# ---------------------------------------------------------------------------- the as_of rule

CRASH = ROOT / "fixtures" / "crash_recovery"


def pack_without_window(tmp_path: Path, source: Path = CRASH) -> Path:
    """A copy of ``source`` whose manifest has no window."""
    pack = tmp_path / "pack"
    shutil.copytree(source, pack)
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(re.sub(r"(?m)^window = .*\n", "", text), encoding="utf-8")
    return pack


def test_stale_evidence_is_judged_at_its_end_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentkit.flows.orphans import steps as orphans

    monkeypatch.setenv(AS_OF_FROM_ENV, "--as-of")
    truth = json.loads((CRASH / "truth.json").read_text(encoding="utf-8"))
    week_later = "2026-12-06T15:00:00Z"
    incident, settings = orphans.setup(CRASH, app_name="invoicing", as_of=week_later)
    report = orphans.triage(incident, settings)
    assert len(report.orphans) == len(truth["expected"]["orphans"])  # no lease expired since
    window_end = ts("2026-11-29T03:05:00Z")
    assert window_end - pd.Timedelta(minutes=1) < settings.as_of < window_end
    said = settings.sources["as_of"]
    assert said.startswith("the evidence's end: the evidence ends 7 d 11 h before as_of ")
    assert "2026-12-06T15:00:00Z (--as-of); ages judged at its end" in said
    # within the stale limit (the window's 35 min) as_of is judged as given
    _, near = orphans.setup(CRASH, app_name="invoicing", as_of="2026-11-29T03:20:00Z")
    assert (near.as_of, near.sources["as_of"]) == (ts("2026-11-29T03:20:00Z"), "--as-of")
    monkeypatch.setenv(STALE_AFTER_ENV, "3600")  # --stale-after 1h: the limit the run gives
    _, longer = orphans.setup(CRASH, app_name="invoicing", as_of="2026-11-29T03:50:00Z")
    assert longer.as_of == ts("2026-11-29T03:50:00Z")


def test_every_flow_takes_the_same_default_as_of(tmp_path: Path) -> None:
    from incidentkit.flows.latency_cliff import steps as latency
    from incidentkit.flows.orphans import steps as orphans
    from incidentkit.flows.overview import steps as overview
    from incidentkit.flows.runaway import steps as runaway

    with_window = {
        flow.FLOW: flow.setup(CRASH, app_name="invoicing")[1]
        for flow in (orphans, latency, runaway, overview)
    }
    for settings in with_window.values():
        assert settings.as_of == ts("2026-11-29T03:05:00Z")
        assert settings.sources["as_of"] == "the window's end"
    pack = pack_without_window(tmp_path)  # no window: the evidence's last record, not the clock
    found = {
        flow.FLOW: flow.setup(pack, app_name="invoicing")[1]
        for flow in (orphans, latency, runaway, overview)
    }
    for settings in found.values():
        assert settings.sources["as_of"] == "the evidence's end (no window)"
        assert ts("2026-11-29T02:30:00Z") < settings.as_of < ts("2026-11-30T00:00:00Z")


def test_an_empty_evidence_without_a_window_asks_for_as_of(tmp_path: Path) -> None:
    from incidentkit.evidence import Evidence
    from incidentkit.flows.common import judge
    from incidentkit.manifest import load_manifest

    (tmp_path / "evidence.toml").write_text('[ledger]\npath = "ledger.csv"\n')
    evidence = Evidence(load_manifest(tmp_path))  # its one source cannot be read: no row
    with pytest.raises(ParameterError, match=r"as_of is empty.*--as-of now"):
        judge("orphans", evidence, "")


@pytest.mark.parametrize(
    ("behind", "text"),
    [
        (pd.Timedelta(days=7, hours=12, minutes=5), "7 d 12 h"),
        (pd.Timedelta(hours=2, seconds=4), "2 h"),
        (pd.Timedelta(minutes=5, seconds=3), "5 min 3 s"),
        (pd.Timedelta(seconds=0.4), "0 s"),
    ],
)
def test_a_span_reads_in_its_two_largest_units(behind: pd.Timedelta, text: str) -> None:
    from incidentkit.flows.common import span_text

    assert span_text(behind) == text


def test_the_first_screen_says_why_the_verdict_is_incomplete() -> None:
    from incidentkit.report import summary_html

    stale = schedule.stale_finding(
        ts("2026-12-06T15:00:00Z"),
        ts("2026-11-29T03:04:59Z"),
        "runs",
        window=Window(ts("2026-11-29T02:30:00Z"), ts("2026-11-29T03:05:00Z")),
    )
    assert stale is not None and stale.title == "the evidence ends 7 d 11 h before as_of"
    origin = "the evidence's end: the evidence ends 7 d 11 h before as_of <b>x</b> (--as-of)"
    provenance = Provenance(
        as_of="2026-11-29T03:04:59Z",
        parameters={
            "settings_from": {"as_of": origin},
            "evidence_notes": ["the window holds no row of app '<i>shop</i>'"],
        },
    )
    found = runner.with_items(
        Findings("orphans", Verdict.ACTION_NEEDED, {"orphans": 10}, (), provenance), [stale]
    )
    page = summary_html(found)
    first, _, _ = page.partition("<table")  # above the facts: the verdict, why, the notes
    assert "INCOMPLETE_EVIDENCE" in first
    assert (
        "<b>Why incomplete:</b> the evidence ends 7 d 11 h before as_of; ages (leases, open "
        "invocations) judged at its end, 2026-11-29T03:04:59Z" in first
    )
    assert "the window holds no row of app &#x27;&lt;i&gt;shop&lt;/i&gt;&#x27;" in first
    assert "2026-11-29T03:04:59Z (the evidence&#x27;s end: the evidence ends 7 d 11 h" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page


@pytest.mark.notebook
def test_run_all_without_a_window_agrees_on_as_of_and_takes_the_session_s_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = pack_without_window(tmp_path)
    runs = pd.read_csv(pack / "ledger.csv")
    session = str(runs.loc[runs["app_name"].eq("invoicing"), "session_id"].iloc[0])
    known = ("orphans", "latency_cliff", "runaway", "vanished_state", "session")
    monkeypatch.setattr(batch, "FLOWS", {name: FLOWS[name] for name in known})
    out = tmp_path / "out"
    argv = ["run", "all", "--evidence", str(pack), "--out", str(out), "--quiet"]
    code = main([*argv, "-p", "session_id", session])
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert set(summary["flows"]) == set(known)  # none skipped, none refused
    assert code == summary["exit_code"] in (0, 1, 2)
    for name, flow in summary["flows"].items():
        assert flow["exit_code"] in (0, 1, 2), (name, flow["error"])
        assert flow["parameters"]["app_name"] == "invoicing"  # the session's app
        findings = Findings.read(out / flow["findings"])
        assert findings.evidence.parameters["app_name"] == "invoicing"
        origin = findings.evidence.parameters["settings_from"]["as_of"]
        assert origin == "the evidence's end (no window)", (name, origin)
    typo = session[:-1] + ("x" if not session.endswith("x") else "y")
    assert main([*argv, "-p", "session_id", typo]) == 3  # a session the evidence never names
    refused = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert f"did you mean {typo} → {session}?" in refused["error"]
