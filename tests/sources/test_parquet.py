"""Snapshot sections read back from Parquet: parts checked against the snapshot's record, and
parts the kit did not write refused with the file and what is wrong, never a foreign error.

Each test copies one snapshot of a small bundled incident (taken once for the module) and
breaks one thing. Where a part must be decoded to show the behaviour, the record is written
again over the broken parts (a snapshot some other writer recorded), so the hash check
passes and the part's content is what is tested.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incidentkit.errors import SchemaError, SourceError
from incidentkit.evidence import open_evidence
from incidentkit.frames import LATER_COLUMNS
from incidentkit.snapshot import take
from incidentkit.sources.parquet import RECORD, read_record, write_record

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PACK = FIXTURES / "broken" / "duplicate_ids"  # rejects in two sections
HEAP = FIXTURES / "slow_death"  # class histograms


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("taken")
    return {pack.name: take(pack, root / pack.name).folder for pack in (PACK, HEAP)}


@pytest.fixture
def snap(taken: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(taken[PACK.name], tmp_path / "snap"))


@pytest.fixture
def heap(taken: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(taken[HEAP.name], tmp_path / "heap"))


def _recorded_again(folder: Path) -> Path:
    """Record the snapshot's parts as they now are."""
    parts = sorted(folder.glob("*/*.parquet"))
    write_record(folder, {f"{p.parent.name}/{p.stem}": pq.read_metadata(p).num_rows for p in parts})
    return folder


def _rewrite(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Write the part at ``path`` again with ``change(table)`` applied."""
    pq.write_table(change(pq.read_table(path)), path)


def test_the_record_lists_every_part_with_its_rows_and_hash(snap: Path) -> None:
    record = read_record(snap)
    assert record is not None and record.schema == "incidentkit.snapshot/v1"
    parts = sorted(str(p.relative_to(snap)) for p in snap.glob("*/*.parquet"))
    assert sorted(record.parts) == parts
    for name, part in record.parts.items():
        data = (snap / name).read_bytes()
        assert part.sha256 == hashlib.sha256(data).hexdigest()
        assert part.rows == pq.read_metadata(snap / name).num_rows
    assert record.parts["ledger/rejects.parquet"].rows == 1


def test_a_deleted_rejects_part_is_refused_not_read_as_no_rejects(snap: Path) -> None:
    assert len(open_evidence(snap).rejects) == 2
    (snap / "ledger" / "rejects.parquet").unlink()
    with pytest.raises(SourceError, match=r"lacks its part ledger/rejects\.parquet") as err:
        open_evidence(snap).frame("runs")
    assert "lists 1 row, sha256 " in str(err.value)


def test_a_swapped_part_is_refused_naming_whose_file_it_is(snap: Path) -> None:
    ledger = snap / "ledger"
    rejects, warnings = (ledger / "rejects.parquet").read_bytes(), (ledger / "warnings.parquet")
    (ledger / "rejects.parquet").write_bytes(warnings.read_bytes())
    warnings.write_bytes(rejects)
    with pytest.raises(SourceError, match=r"ledger/rejects\.parquet is not the one") as err:
        open_evidence(snap).rejects  # noqa: B018 - reading it is the test
    said = str(err.value)
    assert "those recorded for ledger/warnings.parquet" in said
    assert "lists 1 row," in said and "found 0 rows" in said


def test_an_altered_or_foreign_part_is_refused_with_what_differs(
    snap: Path, taken: dict[str, Path]
) -> None:
    runs = snap / "ledger" / "runs.parquet"
    _rewrite(runs, lambda t: t.slice(1))
    expected = pq.read_metadata(taken[PACK.name] / "ledger" / "runs.parquet").num_rows
    with pytest.raises(SourceError, match=r"ledger/runs\.parquet is not the one") as err:
        open_evidence(snap).frame("runs")
    assert f"lists {expected} rows" in str(err.value)
    assert f"found {expected - 1} rows" in str(err.value)
    shutil.copyfile(taken[HEAP.name] / "ledger" / "runs.parquet", runs)  # another incident's
    with pytest.raises(SourceError, match="is not the one it was taken with"):
        open_evidence(snap).frame("runs")
    runs.write_bytes(b"")
    with pytest.raises(SourceError, match=r"found rows unreadable, sha256 e3b0c44298fc1c14"):
        open_evidence(snap).frame("runs")


def test_a_part_the_record_does_not_list_is_refused(snap: Path) -> None:
    record = json.loads((snap / RECORD).read_text())
    del record["parts"]["spans/spans.parquet"]
    (snap / RECORD).write_text(json.dumps(record))
    with pytest.raises(SourceError, match=r"lists no part spans/spans\.parquet"):
        open_evidence(snap).frame("spans")


@pytest.mark.parametrize(
    "text", ["", "{", '{"schema": "incidentkit.snapshot/v9", "parts": {}}', '{"parts": []}']
)
def test_a_record_the_kit_did_not_write_is_refused(snap: Path, text: str) -> None:
    (snap / RECORD).write_text(text)
    with pytest.raises(SourceError, match=f"{RECORD} is not a record incidentkit wrote"):
        open_evidence(snap).frame("runs")


def test_a_snapshot_taken_before_records_opens_with_a_warning(snap: Path) -> None:
    source = open_evidence(snap)
    (snap / RECORD).unlink()
    frozen = open_evidence(snap)
    pd.testing.assert_frame_equal(frozen.frame("runs"), source.frame("runs"))
    pd.testing.assert_frame_equal(frozen.rejects, source.rejects)
    notes = frozen.warnings
    assert sorted(notes["source"]) == sorted(source.sources)
    assert notes["reason"].str.contains(f"has no {RECORD}").all()
    assert notes["reason"].str.contains("cannot be verified").all()
    (snap / "ledger" / "rejects.parquet").unlink()  # as before records: nothing to check it by
    assert len(open_evidence(snap).rejects) == 1


def test_corrupt_pandas_metadata_is_not_read(snap: Path) -> None:
    """The pandas metadata of a part is ignored: its Arrow types are the contract."""
    source = open_evidence(snap).frame("runs")
    for junk in (b"{not json", b'{"columns": 5}', b'{"index_columns": [{"kind": 1}]}'):
        metadata = {b"pandas": junk}
        _rewrite(
            snap / "ledger" / "runs.parquet", lambda t, m=metadata: t.replace_schema_metadata(m)
        )
        pd.testing.assert_frame_equal(open_evidence(_recorded_again(snap)).frame("runs"), source)


def test_a_payload_column_stored_as_numbers_is_refused(snap: Path) -> None:
    def floats(table: pa.Table) -> pa.Table:
        at = table.column_names.index("request")
        return table.set_column(at, "request", pa.array([1.5] * len(table), pa.float64()))

    _rewrite(snap / "ledger" / "runs.parquet", floats)
    with pytest.raises(SchemaError, match="stores column request as double, not JSON text") as e:
        open_evidence(_recorded_again(snap)).frame("runs")
    assert "runs.parquet" in str(e.value)


def test_a_payload_that_is_not_one_json_value_is_refused(snap: Path) -> None:
    def texts(table: pa.Table) -> pa.Table:
        at = table.column_names.index("request")
        return table.set_column(at, "request", pa.array(["1,2"] * len(table)))

    _rewrite(snap / "ledger" / "runs.parquet", texts)
    with pytest.raises(SourceError, match="holds a payload that is not JSON") as e:
        open_evidence(_recorded_again(snap)).frame("runs")
    assert "'1,2'" in str(e.value)


def test_a_repeated_event_id_is_refused_naming_it(snap: Path) -> None:
    events = snap / "events" / "events.parquet"
    _rewrite(events, lambda t: pa.concat_tables([t, t.slice(0, 1)]))
    first = pq.read_table(events).column("event_id")[0].as_py()
    with pytest.raises(SourceError, match=f"repeats event id '{first}'") as e:
        open_evidence(_recorded_again(snap)).frame("events")
    assert str(events) in str(e.value)


def test_a_missing_count_in_class_histograms_is_refused_naming_the_row(heap: Path) -> None:
    def hole(table: pa.Table) -> pa.Table:
        at = table.column_names.index("bytes")
        values = table.column("bytes").to_pylist()
        values[2] = None
        return table.set_column(at, "bytes", pa.array(values, pa.int64()))

    part = heap / "histograms" / "class_histograms.parquet"
    _rewrite(part, hole)
    with pytest.raises(SchemaError, match=r"leaves column bytes empty in 1 rows \(first: row 2\)"):
        open_evidence(_recorded_again(heap)).frame("class_histograms")


@pytest.mark.parametrize(
    ("column", "values", "said"),
    [
        ("attempts", pa.array(["3"]), "stores column attempts as string, not integers"),
        ("started_at", pa.array([1], pa.timestamp("ns")), "not times with a zone"),
        ("run_id", pa.array([[1]]), "stores column run_id as list<element: int64>, not text"),
        ("attempts", pa.array([2**40], pa.uint64()), "as uint64, not integers"),
    ],
)
def test_a_column_of_another_type_is_refused(
    snap: Path, column: str, values: pa.Array, said: str
) -> None:
    def changed(table: pa.Table) -> pa.Table:
        at = table.column_names.index(column)
        return table.slice(0, 1).set_column(at, column, values)

    _rewrite(snap / "ledger" / "runs.parquet", changed)
    with pytest.raises(SchemaError, match=said):
        open_evidence(_recorded_again(snap)).frame("runs")


def test_a_repeated_or_missing_column_is_refused(snap: Path) -> None:
    runs = snap / "ledger" / "runs.parquet"
    table = pq.read_table(runs)
    pq.write_table(table.append_column("run_id", table.column("run_id")), runs)
    with pytest.raises(SchemaError, match=r"repeats columns \[.run_id.\]"):
        open_evidence(_recorded_again(snap)).frame("runs")
    pq.write_table(table.drop_columns(["owner"]), runs)
    with pytest.raises(SchemaError, match=r"lacks columns \[.owner.\]"):
        open_evidence(_recorded_again(snap)).frame("runs")


def test_times_past_the_frames_range_are_refused(snap: Path) -> None:
    def far(table: pa.Table) -> pa.Table:
        at = table.column_names.index("started_at")
        stamps = pa.array([2**50] * len(table), pa.timestamp("ms", tz="UTC"))  # year 37648
        return table.set_column(at, "started_at", stamps)

    _rewrite(snap / "ledger" / "runs.parquet", far)
    with pytest.raises(SchemaError, match="holds values the kit cannot read"):
        open_evidence(_recorded_again(snap)).frame("runs")


def test_a_record_whose_rows_disagree_with_its_own_bytes_is_refused(snap: Path) -> None:
    record = json.loads((snap / RECORD).read_text())
    record["parts"]["ledger/runs.parquet"]["rows"] += 1
    (snap / RECORD).write_text(json.dumps(record))
    held = pq.read_metadata(snap / "ledger" / "runs.parquet").num_rows
    with pytest.raises(
        SourceError, match=rf"lists {held + 1} rows for ledger/runs\.parquet, which"
    ):
        open_evidence(snap).frame("runs")


def test_a_part_neither_listed_nor_present_says_both(snap: Path) -> None:
    (snap / "spans" / "spans.parquet").unlink()
    _recorded_again(snap)
    with pytest.raises(SourceError, match=r"lists no part spans/spans\.parquet \(and the folder"):
        open_evidence(snap).frame("spans")


def test_a_snapshot_taken_before_a_frame_gained_columns_reads_them_as_unknown(
    tmp_path: Path,
) -> None:
    """A thread dump snapshot from before cpu=/elapsed= and locks were read: the threads
    frame opens with those columns unknown, and a warning says why."""
    folder = take(FIXTURES / "latency_cliff", tmp_path / "snap").folder
    part = folder / "threads" / "threads.parquet"
    _rewrite(part, lambda table: table.drop_columns(list(LATER_COLUMNS["threads"])))
    _recorded_again(folder)
    evidence = open_evidence(folder)
    threads = evidence.frame("threads")
    assert len(threads) and threads["cpu_ms"].isna().all()
    assert threads["locks_held"].map(len).eq(0).all()
    assert not threads["synchronizers_listed"].any()
    (reason,) = evidence.warnings.loc[evidence.warnings["location"] == str(part), "reason"]
    assert "taken before the threads frame had the columns cpu_ms, elapsed_ms" in reason
    _rewrite(part, lambda table: table.drop_columns(["thread"]))  # not a later column
    _recorded_again(folder)
    with pytest.raises(SchemaError, match=r"lacks columns \['thread'\]"):
        open_evidence(folder).frame("threads")


def test_an_events_snapshot_taken_before_kinds_reads_every_event_as_a_turn(snap: Path) -> None:
    """A snapshot from before events had kinds: each event opens as a turn, no marker
    relates it to another, and a warning says why."""
    part = snap / "events" / "events.parquet"
    _rewrite(part, lambda table: table.drop_columns(list(LATER_COLUMNS["events"])))
    _recorded_again(snap)
    evidence = open_evidence(snap)
    got = evidence.frame("events")
    assert len(got) and got["kind"].eq("turn").all() and str(got["kind"].dtype) == "str"
    later = [col for col in LATER_COLUMNS["events"] if col != "kind"]
    assert got[later].isna().all(axis=None)
    (reason,) = evidence.warnings.loc[evidence.warnings["location"] == str(part), "reason"]
    assert "taken before the events frame had the columns kind, compaction_start" in reason
