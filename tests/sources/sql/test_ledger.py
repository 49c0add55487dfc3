"""The ledger loader on CSV and JSON-lines exports (databases: test_sql.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.frames import conform, spec_of
from incidentkit.manifest import Filters, SourceSpec, Window, parse_manifest
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.sql import ledger
from incidentkit.times import to_utc

DATA = Path(__file__).resolve().parents[2] / "data" / "ledger"
RUN = "00000000-0000-4000-8000-00000000000{}".format


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC")


# The ledger of runs.csv and runs.jsonl, in canonical form (UTC, decoded JSON).
RUNS = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
WINDOW = Window.parse("2026-11-29T03:00:00Z", "2026-11-29T04:00:00Z")


def expected_runs(numbers: list[int] | None = None) -> pd.DataFrame:
    """RUNS (or the runs numbered so) as the canonical frame, sorted by started_at, run_id."""
    frame = pd.DataFrame([r for r in RUNS if numbers is None or int(r["run_id"][-1]) in numbers])
    for col in ("lease_until", "started_at", "updated_at"):
        frame[col] = to_utc(frame[col], what=col)
    frame = frame.sort_values(["started_at", "run_id"], kind="stable")
    return conform("runs", frame.reset_index(drop=True))


def files(name: str, **options: object) -> SourceSpec:
    return SourceSpec(section="ledger", paths=(DATA / name,), **options)  # type: ignore[arg-type]


def rejects_of(loaded: Loaded) -> list[tuple[str, str]]:
    return list(loaded.rejects[["location", "reason"]].itertuples(index=False, name=None))


@pytest.mark.parametrize("name", ["runs.csv", "runs.jsonl"])
def test_export_reads_to_the_canonical_runs(name: str) -> None:
    loaded = ledger.load(files(name), Filters())
    pd.testing.assert_frame_equal(loaded.frames["runs"], expected_runs())
    assert loaded.rejects.empty


def test_csv_and_jsonl_in_one_source_concatenate() -> None:
    spec = SourceSpec(section="ledger", paths=(DATA / "runs.csv", DATA / "no_lease.jsonl"))
    runs = ledger.load(spec, Filters()).frames["runs"]
    assert runs["run_id"].tolist() == [RUN(5), RUN(1), RUN(2), "r-1", RUN(3), RUN(6), RUN(4)]


def test_window_keeps_runs_active_in_it_and_open_runs() -> None:
    # 1 RUNNING and 5 PAUSED ended before the window but are still open; 2 finished before it;
    # 4 starts after it; 3 lies inside it; 6 overlaps its end.
    loaded = ledger.load(files("runs.jsonl"), Filters(window=WINDOW))
    pd.testing.assert_frame_equal(loaded.frames["runs"], expected_runs([1, 3, 5, 6]))


@pytest.mark.parametrize(
    ("filters", "numbers"),
    [
        (Filters(app_name="support"), [4]),
        (Filters(session_ids=("s'4",)), [4]),
        (Filters(session_ids=("s-1", "S'4")), [1, 3, 5]),
        (Filters(invocation_ids=("e-103", "e-106")), [3, 6]),
        (Filters(app_name="billing", invocation_ids=("e-101", "e-105")), [1, 5]),
    ],
)
def test_filters_on_files(filters: Filters, numbers: list[int]) -> None:
    loaded = ledger.load(files("runs.csv"), filters)
    pd.testing.assert_frame_equal(loaded.frames["runs"], expected_runs(numbers))


def test_column_mapping_from_the_manifest() -> None:
    headers = "id app user session invocation payload state worker lease tries created changed"
    columns = dict(zip(spec_of("runs").names, headers.split(), strict=True))
    manifest = parse_manifest({"ledger": {"path": "mapped.csv", "columns": columns}}, base=DATA)
    loaded = ledger.load(manifest.sources["ledger"], manifest.filters)
    pd.testing.assert_frame_equal(loaded.frames["runs"], expected_runs([1]))


def test_missing_column_names_it_and_the_mapping() -> None:
    with pytest.raises(SchemaError, match=r"lack columns: \['started_at'\].*columns = \{"):
        ledger.load(files("no_started_at.csv"), Filters())


def test_mapped_column_that_is_absent_is_named() -> None:
    with pytest.raises(SchemaError, match=r"\['created'\]"):
        ledger.load(files("runs.csv", columns={"started_at": "created"}), Filters())


def test_optional_columns_may_be_absent() -> None:
    runs = ledger.load(files("no_lease.jsonl"), Filters()).frames["runs"]
    assert runs["lease_until"].isna().all()
    assert runs["owner"].isna().all()


def test_mapping_an_unknown_canonical_name_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"\['state'\].*map only these canonical names"):
        ledger.load(files("runs.csv", columns={"state": "status"}), Filters())


def test_every_bad_csv_row_is_rejected_with_its_line() -> None:
    loaded = ledger.load(files("bad.csv"), Filters())
    assert loaded.frames["runs"]["run_id"].tolist() == ["r-multi", "r-ok"]
    assert loaded.frames["runs"]["request"].tolist() == [{"text": "two lines"}, {}]
    assert loaded.frames["runs"]["status"].tolist() == ["DONE", "DONE"]
    assert sorted(rejects_of(loaded), key=lambda r: int(r[0].split(":")[1])) == [
        ("bad.csv:3", "started_at: not an ISO 8601 timestamp"),
        ("bad.csv:4", "updated_at: timestamp without a UTC offset (set timezone in the manifest)"),
        ("bad.csv:5", "attempts is not a 64-bit integer: 2.5"),
        ("bad.csv:6", "request: malformed JSON (Expecting property name enclosed in double "
         "quotes at column 2)"),
        ("bad.csv:7", "missing run_id"),
        ("bad.csv:8", "status RETRYING is not one of RUNNING, PAUSED, DONE, FAILED, PARKED"),
        ("bad.csv:9", "duplicate run_id; kept the row updated last, at bad.csv:2"),
        ("bad.csv:10", "expected 12 fields, got 3"),
        ("bad.csv:13", "attempts is not a 64-bit integer: x; missing started_at"),
    ]  # fmt: skip
    assert set(loaded.rejects["source"]) == {"ledger"}
    assert (
        loaded.rejects.loc[loaded.rejects["location"] == "bad.csv:8", "raw"]
        .str.contains('"status":"RETRYING"')
        .all()
    )


def test_every_bad_jsonl_line_is_rejected_with_its_line() -> None:
    loaded = ledger.load(files("bad.jsonl"), Filters())
    assert loaded.frames["runs"]["run_id"].tolist() == ["r-ok"]
    assert rejects_of(loaded) == [
        ("bad.jsonl:2", "malformed JSON (Expecting property name enclosed in double quotes at "
         "column 46)"),
        ("bad.jsonl:3", "expected a JSON object, got list"),
        ("bad.jsonl:5", "truncated line: the file ends in the middle of a record"),
        ("bad.jsonl:4", "attempts is not a 64-bit integer: True"),
    ]  # fmt: skip


def test_naive_file_timestamps_are_rejected_unless_declared_utc() -> None:
    refused = ledger.load(files("naive.csv"), Filters())
    assert refused.frames["runs"].empty
    assert rejects_of(refused) == [
        (
            "naive.csv:2",
            "started_at: timestamp without a UTC offset (set timezone in the manifest); "
            "updated_at: timestamp without a UTC offset (set timezone in the manifest)",
        )
    ]
    accepted = ledger.load(files("naive.csv", naive_timestamps="utc"), Filters())
    assert accepted.rejects.empty
    assert accepted.frames["runs"]["started_at"].tolist() == [utc("2026-11-29T02:00:00Z")]


def test_a_header_only_export_is_a_source_error_naming_it(tmp_path: Path) -> None:
    header = (DATA / "runs.csv").read_text(encoding="utf-8").splitlines()[0]
    (tmp_path / "empty.csv").write_text(header + "\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"empty\.csv: the CSV file has a header but no rows"):
        ledger.load(SourceSpec("ledger", paths=(tmp_path / "empty.csv",)), Filters())


def test_an_empty_table_is_a_source_error_but_a_filter_matching_nothing_is_not(
    tmp_path: Path,
) -> None:
    import sqlalchemy as sa

    from incidentkit import store

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = sa.create_engine(url)
    store.create_tables(engine, store.kit_metadata)
    engine.dispose()
    spec = SourceSpec("ledger", url_ref=url, naive_timestamps="utc")
    with pytest.raises(SourceError, match=r"the table agent_run is empty"):
        ledger.load(spec, Filters())
    at = pd.Timestamp("2026-11-29T03:00:00Z").to_pydatetime()
    row = {"run_id": "r-1", "app_name": "support", "user_id": "u", "session_id": "s"}
    row |= {"invocation_id": "e", "request": {}, "status": "DONE", "owner": None}
    row |= {"lease_until": None, "attempts": 0, "started_at": at, "updated_at": at}
    engine = sa.create_engine(url)
    store.insert_rows(engine, store.agent_run, [row])
    engine.dispose()
    assert ledger.load(spec, Filters(app_name="nobody")).frames["runs"].empty
    assert ledger.load(spec, Filters(app_name="support")).frames["runs"]["run_id"].size == 1


def test_missing_file_is_a_source_error() -> None:
    with pytest.raises(SourceError, match=r"file not found.*check the path"):
        ledger.load(files("nowhere.csv"), Filters())


def test_unknown_suffix_asks_for_a_format(tmp_path: Path) -> None:
    (tmp_path / "ledger.txt").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ManifestError, match='format = "csv"'):
        ledger.load(SourceSpec("ledger", paths=(tmp_path / "ledger.txt",)), Filters())
    spec = SourceSpec("ledger", paths=(DATA / "runs.jsonl",), format="jsonl")
    assert len(ledger.load(spec, Filters()).frames["runs"]) == len(RUNS)


def test_an_oversized_csv_field_rejects_its_row_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from incidentkit.sources.sql import tables

    monkeypatch.setattr(tables, "MAX_LINE_BYTES", 4096)  # the real limit is 32 MiB
    lines = (DATA / "runs.csv").read_text(encoding="utf-8").splitlines()
    header, first, rest = lines[0], lines[1], lines[2:]
    huge = first.replace('"{', '"{""pad"": ""' + "x" * 5000 + '"", ', 1)
    assert huge != first
    (tmp_path / "runs.csv").write_text("\n".join([header, huge, *rest]) + "\n", encoding="utf-8")
    loaded = ledger.load(SourceSpec("ledger", paths=(tmp_path / "runs.csv",)), Filters())
    assert loaded.rejects["reason"].tolist() == ["a field is longer than the limit of 4,096 bytes"]
    assert len(loaded.frames["runs"]) == len(rest)


def test_huge_and_infinite_attempts_are_rejects_not_wrapped_numbers(tmp_path: Path) -> None:
    text = (DATA / "runs.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    rows[0]["attempts"] = 10**20
    rows[1]["attempts"] = "inf"
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = ledger.load(SourceSpec("ledger", paths=(tmp_path / "runs.jsonl",)), Filters())
    reasons = loaded.rejects["reason"].tolist()
    assert reasons == [
        "attempts is not a 64-bit integer: 100000000000000000000",
        "attempts is not a 64-bit integer: inf",
    ]
    assert (loaded.frames["runs"]["attempts"] >= 0).all()


NOT_NULL_HEADER = (
    "run_id,app_name,user_id,session_id,invocation_id,request,status,owner,lease_until,"
    "attempts,started_at,updated_at"
)
AT = "2026-11-29T03:00:00Z"


def test_every_not_null_column_of_agent_run_is_checked_in_files(tmp_path: Path) -> None:
    # agent_run declares app_name, user_id, session_id and request NOT NULL too
    rows = [
        f"r-ok,billing,u,s,e,{{}},DONE,,,0,{AT},{AT}",
        f"r-app,,u,s,e,{{}},DONE,,,0,{AT},{AT}",
        f"r-user,billing,,s,e,{{}},DONE,,,0,{AT},{AT}",
        f"r-session,billing,u,,e,{{}},DONE,,,0,{AT},{AT}",
        f"r-request,billing,u,s,e,,DONE,,,0,{AT},{AT}",
        f"r-no-inv,billing,u,s,,{{}},DONE,,,0,{AT},{AT}",  # invocation_id may be null
    ]
    (tmp_path / "runs.csv").write_text("\n".join([NOT_NULL_HEADER, *rows]) + "\n")
    loaded = ledger.load(SourceSpec("ledger", paths=(tmp_path / "runs.csv",)), Filters())
    assert sorted(loaded.frames["runs"]["run_id"]) == ["r-no-inv", "r-ok", "r-request"]
    assert rejects_of(loaded) == [
        ("runs.csv:3", "missing app_name"),
        ("runs.csv:4", "missing user_id"),
        ("runs.csv:5", "missing session_id"),
    ]
    assert loaded.warnings[["location", "reason"]].values.tolist() == [
        [
            "runs.csv:6",
            "missing request (NOT NULL in agent_run): the run cannot be replayed from the ledger",
        ]
    ]


@pytest.mark.parametrize(
    "url_of", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_not_null_columns_are_checked_in_a_table_without_the_constraints(
    url_of: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import sqlalchemy as sa

    url = (
        f"sqlite:///{tmp_path / 'ledger.db'}"
        if url_of == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    columns = NOT_NULL_HEADER.replace(",", " text, ") + " text"  # an export without NOT NULL
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE agent_run ({columns})"))
        conn.execute(
            sa.text(
                "INSERT INTO agent_run VALUES "
                f"('r-ok', 'billing', 'u', 's', 'e', '{{}}', 'DONE', NULL, NULL, '0', '{AT}', "
                f"'{AT}'),"
                f"('r-null-session', 'billing', 'u', NULL, 'e', '{{}}', 'DONE', NULL, NULL, '0', "
                f"'{AT}', '{AT}')"
            )
        )
    engine.dispose()
    loaded = ledger.load(SourceSpec("ledger", url_ref=url), Filters())
    assert loaded.frames["runs"]["run_id"].tolist() == ["r-ok"]
    assert rejects_of(loaded) == [("agent_run:r-null-session", "missing session_id")]
