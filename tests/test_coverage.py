from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import incidentkit
from incidentkit.cli import main
from incidentkit.coverage import (
    Coverage,
    FrameCoverage,
    JoinGap,
    join_gaps,
    measure,
    render_text,
)
from incidentkit.frames import build

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TS = pd.Timestamp("2026-11-29T03:00:00Z")


def frame(name: str, **columns: list[object]) -> pd.DataFrame:
    return build(name, columns)


def gaps_by_name(gaps: list[JoinGap]) -> dict[str, JoinGap]:
    return {gap.name.strip(): gap for gap in gaps}


def test_join_gaps_count_each_unmatched_row() -> None:
    runs = frame(
        "runs",
        run_id=["r1", "r2", "r3"],
        session_id=["s1", "s2", "s3"],
        invocation_id=["e-1", None, "e-9"],
    )
    events = frame(
        "events", event_id=["v1", "v2"], session_id=["s1", "s2"], invocation_id=["e-1", "e-2"]
    )
    calls = frame(
        "calls",
        call_id=["c1", "c2", "c3"],
        invocation_id=["e-1", "e-1", "e-2"],
        long_running=[False, False, True],
    )
    responses = frame("responses", call_id=["c1", "c7"], invocation_id=["e-1", "e-1"])
    spans = frame("spans", span_id=["a", "b", "c"], invocation_id=["e-1", None, "e-5"])
    journal = frame(
        "journal",
        key=["k1", "k2", "k3", "k4"],
        invocation_id=["e-1", "e-8", "e-2", "e-2"],
        function_call_id=["c1", "zz", "", "c-gone"],
    )
    gaps = gaps_by_name(
        join_gaps(
            {
                "runs": runs,
                "events": events,
                "calls": calls,
                "responses": responses,
                "spans": spans,
                "journal": journal,
            }
        )
    )
    assert (gaps["runs with no events"].count, gaps["runs with no events"].examples) == (1, ("r3",))
    assert gaps["calls with no response"].count == 2
    assert gaps["of which long-running (awaiting approval)"].examples == ("c3",)
    assert gaps["responses with no call"].examples == ("c7",)
    assert gaps["spans with no invocation id"].examples == ("b",)
    assert gaps["spans of invocations not in the events"].examples == ("c",)
    # k3 has no call id but its invocation made calls; k4 names a call that is not there
    assert gaps["journal keys with no call"].examples == ("k2", "k4")


def test_join_gaps_need_both_sides() -> None:
    runs = frame("runs", run_id=["r1"], session_id=["s1"])
    assert join_gaps({"runs": runs}) == []


def test_render_text_shows_errors_and_gaps() -> None:
    report = Coverage(
        title="INC-1",
        manifest="/x/evidence.toml",
        window=None,
        frames=(FrameCoverage("runs", "ledger", "error", 0, None, None, "boom: 'x'. fix it"),),
        rejects=(),
        joins=(JoinGap("calls with no response", 2, 5, ("c1", "c2")),),
    )
    text = render_text(report)
    assert "! ledger: boom: 'x'. fix it" in text
    assert "calls with no response" in text and "e.g. c1, c2" in text
    assert not report.complete


def test_inspect_prints_the_coverage_of_a_pack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "crash_recovery")]) == 0
    text = capsys.readouterr().out
    truth = json.loads((FIXTURES / "crash_recovery" / "truth.json").read_text())
    for name, count in truth["counts"].items():
        if count:
            assert re.search(rf"^{name}\s+\w+\s+{count}\s", text, re.MULTILINE), name
    assert "rejects: 0" in text and "threads          threads              -  absent" in text


def test_inspect_json_groups_rejects_with_their_locations(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pack = FIXTURES / "broken" / "malformed"
    assert main(["inspect", str(pack), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = json.loads((pack / "expected_rejects.json").read_text())
    got = sorted(
        (group["source"], location)
        for group in report["rejects"]
        for location in group["locations"]
    )
    assert got == sorted((r["source"], r["location"]) for r in expected["rejects"])
    counts = {frame["frame"]: frame["rows"] for frame in report["frames"]}
    assert {k: v for k, v in counts.items() if v} == {
        k: v for k, v in expected["counts"].items() if v
    }


def test_inspect_reports_a_source_that_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "evidence.toml").write_text(
        '[ledger]\npath = "missing.csv"\n[diagnostics]\npath = "diag.log"\n'
    )
    (tmp_path / "diag.log").write_text(
        "2026-11-29T03:10:00.000Z INFO  c.e.DiagnosticsPlugin - run.start inv=e-1 app=a "
        "user=u session=s\n"
    )
    assert main(["inspect", str(tmp_path)]) == 2
    text = capsys.readouterr().out
    assert "! ledger: [ledger]" in text and "file not found" in text
    assert re.search(r"^diagnostics\s+diagnostics\s+1\s", text, re.MULTILINE)


def test_inspect_exits_2_when_every_record_of_a_source_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "events.jsonl").write_text('{"nope": 1}\n[1]\n', encoding="utf-8")
    (tmp_path / "evidence.toml").write_text('[events]\npath = "events.jsonl"\n', encoding="utf-8")
    assert main(["inspect", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "! events: every record was rejected" in out
    assert "its records look like none of the event formats the kit reads" in out
    assert "rejects: 2" in out


PLUGIN_ROWS = [
    {
        "timestamp": "2026-12-06 19:38:32.036391 UTC",
        "event_id": "r1",
        "event_type": "USER_MESSAGE_RECEIVED",
        "agent": "support",
        "session_id": "s-1",
        "invocation_id": "e-1",
        "user_id": "u-1",
        "content": '{"text_summary": "Where is A-42?"}',
        "content_parts": [],
        "attributes": '{"adk": {"app_name": "shop"}}',
        "status": "OK",
        "is_truncated": False,
    },
    {
        "timestamp": "2026-12-06 19:38:32.056532 UTC",
        "event_id": "r2",
        "event_type": "INVOCATION_STARTING",
        "agent": "support",
        "session_id": "s-1",
        "invocation_id": "e-1",
        "attributes": '{"adk": {"app_name": "shop"}}',
        "status": "OK",
    },
]
"""Two rows of the BigQuery Agent Analytics table as ``bq extract`` writes them."""


@pytest.mark.parametrize(
    ("given", "code", "said"),
    [
        ("", 0, "  events       bigquery-agent-analytics (detected)"),
        ('format = "bigquery-agent-analytics"\n', 0, "bigquery-agent-analytics (given)"),
        (
            'format = "adk-java-json"\n',
            2,
            "! events: every record was rejected (reasons below); these rows look like the "
            'BigQuery Agent Analytics table: give format = "bigquery-agent-analytics"',
        ),
    ],
)
def test_inspect_names_the_format_and_what_rejected_rows_look_like(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, code: int, said: str
) -> None:
    rows = "".join(json.dumps(row) + "\n" for row in PLUGIN_ROWS)
    (tmp_path / "agent_events.jsonl").write_text(rows, encoding="utf-8")
    toml = '[events]\npath = "agent_events.jsonl"\n' + given
    (tmp_path / "evidence.toml").write_text(toml, encoding="utf-8")
    assert main(["inspect", str(tmp_path)]) == code
    assert said in capsys.readouterr().out


def test_inspect_names_the_format_of_event_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = {"id": "e1", "invocationId": "i1", "author": "user", "timestamp": 1764385800000}
    line = json.dumps(event | {"appName": "a", "userId": "u", "sessionId": "s"}) + "\n"
    (tmp_path / "events.jsonl").write_text(line, encoding="utf-8")
    (tmp_path / "evidence.toml").write_text('[events]\npath = "events.jsonl"\n', encoding="utf-8")
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    (read,) = json.loads(capsys.readouterr().out)["formats"]
    assert read == {
        "source": "events",
        "format": "adk-java-json",
        "how": "detected",
        "looks_like": None,
    }


def test_inspect_exits_2_on_an_empty_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "spans.jsonl").write_text("\n \n", encoding="utf-8")
    (tmp_path / "evidence.toml").write_text('[spans]\npath = "spans.jsonl"\n', encoding="utf-8")
    assert main(["inspect", str(tmp_path)]) == 2
    assert "spans: the file is empty" in capsys.readouterr().out


def test_inspect_shows_warnings_apart_from_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = {"id": "e1", "invocationId": "i1", "author": "user", "timestamp": 1764385800000}
    (tmp_path / "events.jsonl").write_text(json.dumps(event) + "\n", encoding="utf-8")
    (tmp_path / "evidence.toml").write_text('[events]\npath = "events.jsonl"\n', encoding="utf-8")
    assert main(["inspect", str(tmp_path)]) == 0  # read: a warning, not a reject
    out = capsys.readouterr().out
    assert "rejects: 0" in out
    assert "warnings: 1" in out and "1 events name no session" in out


def test_a_source_error_is_shown_once_with_its_section(tmp_path: Path) -> None:
    (tmp_path / "evidence.toml").write_text('[jfr]\npath = "none.jfr"\n', encoding="utf-8")
    text = render_text(measure(incidentkit.open_evidence(tmp_path)))
    (line,) = {line for line in text.splitlines() if line.startswith("  ! jfr:")}
    assert line.startswith("  ! jfr: file not found") and "jfr: jfr:" not in text


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sql_pack(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    """The runaway pack with its ledger and events in SQLite or PostgreSQL."""
    from incidentkit.simulate import simulate

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'incident.sqlite'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    return simulate("runaway", tmp_path / "pack", into=url), url


@pytest.mark.slow
def test_inspect_names_the_index_a_baseline_needs_until_it_exists(
    sql_pack: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlalchemy as sa

    pack, url = sql_pack
    report = measure(incidentkit.open_evidence(pack))
    advice = {item.section: item for item in report.indexes}
    assert advice["events"].served_by is None  # (app_name, session_id, ts) does not serve
    assert advice["events"].statement.endswith("ON adk_event (app_name, ts)")
    assert advice["ledger"].statement.endswith("ON agent_run (app_name, started_at)")
    assert main(["inspect", str(pack)]) == 0
    text = capsys.readouterr().out
    assert "! events adk_event (app_name, ts): no index" in text
    assert "CREATE INDEX adk_event_app_name_ts ON adk_event (app_name, ts)" in text
    writer = sa.create_engine(url, poolclass=sa.pool.NullPool)  # the DBA runs the statement
    with writer.begin() as conn:
        conn.exec_driver_sql(advice["events"].statement)
    writer.dispose()
    again = {item.section: item for item in measure(incidentkit.open_evidence(pack)).indexes}
    assert again["events"].served_by == "adk_event_app_name_ts"
    assert again["ledger"].served_by is None
    assert "events adk_event (app_name, ts): served by adk_event_app_name_ts" in render_text(
        measure(incidentkit.open_evidence(pack))
    )


def test_inspect_gives_no_index_advice_for_files() -> None:
    assert measure(incidentkit.open_evidence(FIXTURES / "runaway")).indexes == ()


# ---------------------------------------------------------------------------- filters


def pack_with(tmp_path: Path, source: Path, *lines: str, window: str | None = None) -> Path:
    """A copy of ``source`` whose manifest gains top-level ``lines`` (and another window)."""
    import shutil

    pack = tmp_path / "pack"
    shutil.copytree(source, pack)
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    if window is not None:
        text = re.sub(r"(?m)^window = .*$", window, text)
    head, _, rest = text.partition("\n[")
    manifest.write_text("\n".join([head, *lines]) + "\n\n[" + rest, encoding="utf-8")
    return pack


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'app_name = "invoicng"',
            r"app_name 'invoicng' matches nothing: 0 runs, 0 events, 0 diagnostics lines of "
            r"app 'invoicng'; the ledger, the event log and the diagnostics log hold: "
            r"expenses, invoicing, support, travel: 'invoicng'\. did you mean invoicng → "
            r"invoicing\? set app_name in the manifest",
        ),
        ('sessions = ["s-nowhere"]', r"sessions 's-nowhere' matches nothing: 0 runs, 0 events"),
        (
            'invocations = ["e-nowhere"]',
            r"invocations 'e-nowhere' matches nothing: 0 runs, 0 events, 0 journal entries, "
            r"0 spans, 0 diagnostics lines of invocation",
        ),
    ],
)
def test_inspect_refuses_a_filter_the_evidence_never_names(
    line: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = pack_with(tmp_path, FIXTURES / "crash_recovery", line)
    assert main(["inspect", str(pack)]) == 3
    said = capsys.readouterr().err
    assert re.search(message, said), said
    assert "Traceback" not in said


def test_a_window_without_a_row_is_a_warning_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    later = 'window = { start = "2026-11-28T02:30:00Z", end = "2026-11-28T03:05:00Z" }'
    pack = pack_with(tmp_path, FIXTURES / "crash_recovery", 'app_name = "invoicing"', window=later)
    assert main(["inspect", str(pack)]) == 0  # a quiet night is not an error
    text = capsys.readouterr().out
    assert (
        "  ! the window 2026-11-28T02:30:00.000Z .. 2026-11-28T03:05:00.000Z holds no row of app "
        "'invoicing' in diagnostics, events, journal, ledger, spans, though the evidence holds "
        "rows outside it" in text
    )
    assert main(["inspect", str(pack), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and notes[0].startswith("the window 2026-11-28T02:30:00.000Z")
    assert measure(incidentkit.open_evidence(FIXTURES / "crash_recovery")).notes == ()


def test_a_database_is_asked_for_its_names_not_read_again(
    sql_pack: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from incidentkit import evidence as evidence_module
    from incidentkit.coverage import check_filters
    from incidentkit.errors import ManifestError

    pack, _ = sql_pack
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace("\n[ledger]", 'app_name = "suport"\n\n[ledger]', 1))
    reads: list[tuple[str, object]] = []
    real = evidence_module.loader_for

    def spied(section: str, fmt: str | None = None) -> object:
        load = real(section, fmt)

        def recorded(spec: object, filters: object, **options: object) -> object:
            reads.append((section, filters))
            return load(spec, filters, **options)

        return recorded

    monkeypatch.setattr(evidence_module, "loader_for", spied)
    with pytest.raises(ManifestError, match=r"did you mean suport → support\?") as refused:
        check_filters(incidentkit.open_evidence(pack))
    assert "the ledger, the event log and the diagnostics log hold: " in str(refused.value)
    unfiltered = [section for section, filters in reads if filters == incidentkit.Filters()]
    assert unfiltered == ["diagnostics"]  # a file: read whole once, to say what it holds
    assert {section for section, _ in reads} == {"ledger", "events", "diagnostics"}
