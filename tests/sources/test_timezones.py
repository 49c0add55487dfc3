"""``timezone``: times written without an offset, read in the zone whose wall clock wrote them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from incidentkit import open_evidence, store
from incidentkit.errors import ManifestError
from incidentkit.manifest import load_manifest

DATA = Path(__file__).resolve().parents[1] / "data"
LOGBACK = (
    "{ts} [http-nio-8080-exec-1] INFO  c.e.agent.DiagnosticsPlugin - run.start inv=e-{n} "
    "app=support user=u-1 session=s-1\n"
)


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC").as_unit("ns")


def _diagnostics(tmp_path: Path, stamps: list[str], manifest_tail: str) -> pd.DataFrame:
    lines = "".join(LOGBACK.format(ts=ts, n=i) for i, ts in enumerate(stamps))
    (tmp_path / "app.log").write_text(lines, encoding="utf-8")
    (tmp_path / "evidence.toml").write_text(
        f'{manifest_tail}\n[diagnostics]\npath = "app.log"\n', encoding="utf-8"
    )
    incident = open_evidence(tmp_path)
    assert incident.rejects.empty
    return incident.diagnostics


def test_logback_lines_are_read_in_the_manifest_s_zone(tmp_path: Path) -> None:
    got = _diagnostics(tmp_path, ["2026-11-29 04:10:00,123"], 'timezone = "Europe/Berlin"')
    assert got["ts"].tolist() == [utc("2026-11-29T03:10:00.123Z")]  # CET is UTC+1 in November


def test_utc_is_a_zone_too(tmp_path: Path) -> None:
    got = _diagnostics(tmp_path, ["2026-11-29 03:10:00,123"], 'timezone = "UTC"')
    assert got["ts"].tolist() == [utc("2026-11-29T03:10:00.123Z")]


def test_dst_folds_take_the_first_occurrence_and_gaps_move_forward(tmp_path: Path) -> None:
    got = _diagnostics(
        tmp_path,
        ["2026-10-25 02:30:00", "2026-03-29 02:30:00", "2026-07-01 12:00:00"],
        'timezone = "Europe/Berlin"',
    )
    assert sorted(got["ts"].tolist()) == [
        utc("2026-03-29T01:00:00Z"),  # 02:30 never happened: 03:00 CEST, the gap's end
        utc("2026-07-01T10:00:00Z"),  # summer: UTC+2
        utc("2026-10-25T00:30:00Z"),  # 02:30 happened twice: the first, CEST (UTC+2)
    ]


def test_offsets_win_over_the_zone(tmp_path: Path) -> None:
    got = _diagnostics(tmp_path, ["2026-11-29T03:10:00.123Z"], 'timezone = "Asia/Tokyo"')
    assert got["ts"].tolist() == [utc("2026-11-29T03:10:00.123Z")]


def test_a_section_s_zone_wins_over_the_top_one(tmp_path: Path) -> None:
    shutil.copy(DATA / "threads" / "two_dumps.txt", tmp_path / "dumps.txt")
    (tmp_path / "evidence.toml").write_text(
        'timezone = "UTC"\n[threads]\npath = "dumps.txt"\ntimezone = "America/New_York"\n',
        encoding="utf-8",
    )
    incident = open_evidence(tmp_path)
    taken = incident.threads.groupby("dump")["taken_at"].first().tolist()
    assert taken[0] == utc("2026-11-29T08:12:01Z")  # EST is UTC-5: the dump says 03:12:01
    assert incident.warnings.empty


def test_naive_sql_columns_in_a_local_zone_are_filtered_after_parsing(tmp_path: Path) -> None:
    database = tmp_path / "ledger.db"
    engine = sa.create_engine(f"sqlite:///{database}")
    store.create_tables(engine, store.kit_metadata)
    at = pd.Timestamp("2026-11-29 04:10:00").to_pydatetime()  # Berlin wall clock: 03:10Z
    row = {
        "run_id": "00000000-0000-0000-0000-000000000001",
        "app_name": "support",
        "user_id": "u",
        "session_id": "s",
        "invocation_id": "e",
        "request": {},
        "status": "DONE",
        "owner": None,
        "lease_until": None,
        "attempts": 0,
        "started_at": at,
        "updated_at": at,
    }
    store.insert_rows(engine, store.agent_run, [row])
    engine.dispose()
    window = 'window = {{ start = "{}", end = "{}" }}\n'
    for start, end, expected in (
        ("2026-11-29T03:00:00Z", "2026-11-29T03:20:00Z", 1),
        ("2026-11-29T04:00:00Z", "2026-11-29T04:20:00Z", 0),  # 04:10 wall is not 04:10Z
    ):
        (tmp_path / "evidence.toml").write_text(
            window.format(start, end)
            + '[ledger]\npath = "ledger.db"\ntimezone = "Europe/Berlin"\n',
            encoding="utf-8",
        )
        runs = open_evidence(tmp_path).runs
        assert len(runs) == expected
        if expected:
            assert runs["started_at"].tolist() == [utc("2026-11-29T03:10:00Z")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"Europe/Berlni"', "did you mean Europe/Berlni → Europe/Berlin"),
        ('"../../etc/passwd"', "not a time zone name"),
        ("3", "not a time zone name"),
    ],
)
def test_an_unknown_zone_is_refused_with_a_guess(tmp_path: Path, value: str, message: str) -> None:
    (tmp_path / "evidence.toml").write_text(
        f'timezone = {value}\n[diagnostics]\npath = "x.log"\n', encoding="utf-8"
    )
    with pytest.raises(ManifestError, match=message):
        load_manifest(tmp_path)
