"""The journal loader on CSV and JSON-lines exports (databases: test_sql.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import ManifestError, SchemaError
from incidentkit.frames import conform
from incidentkit.manifest import Filters, SourceSpec, Window, parse_manifest
from incidentkit.sources.sql import journal
from incidentkit.times import to_utc

DATA = Path(__file__).resolve().parents[2] / "data" / "journal"

# The journal of journal.csv and journal.jsonl, in canonical form (UTC, decoded JSON).
ENTRIES = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
WINDOW = Window.parse("2026-11-29T03:00:00Z", "2026-11-29T04:00:00Z")


def expected_journal(keys: list[str] | None = None) -> pd.DataFrame:
    """ENTRIES (or those with these keys) as the canonical frame, sorted by key."""
    frame = pd.DataFrame([e for e in ENTRIES if keys is None or e["key"] in keys])
    for col in ("created_at", "updated_at"):
        frame[col] = to_utc(frame[col], what=col)
    return conform("journal", frame.sort_values("key").reset_index(drop=True))


def files(name: str, **options: object) -> SourceSpec:
    return SourceSpec(section="journal", paths=(DATA / name,), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["journal.csv", "journal.jsonl"])
def test_export_reads_to_the_canonical_journal(name: str) -> None:
    loaded = journal.load(files(name), Filters())
    pd.testing.assert_frame_equal(loaded.frames["journal"], expected_journal())
    assert loaded.rejects.empty


def test_empty_function_call_id_is_missing() -> None:
    frame = journal.load(files("journal.jsonl"), Filters()).frames["journal"]
    assert frame.set_index("key")["function_call_id"].isna().to_dict() == {
        "notify:C-9": True,
        "refund:R-1": False,
        "send-invoice:INV-77": False,
        "send-invoice:INV-78": False,
    }


def test_window_keeps_entries_active_in_it_and_open_intents() -> None:
    # INV-77 is an INTENT from before the window (still open); INV-78 was done before it;
    # R-1 was written after it; C-9 lies inside it.
    loaded = journal.load(files("journal.csv"), Filters(window=WINDOW))
    expected = expected_journal(["notify:C-9", "send-invoice:INV-77"])
    pd.testing.assert_frame_equal(loaded.frames["journal"], expected)


def test_invocation_filter_and_ignored_session_filter() -> None:
    # The journal has no session column: a session filter does not apply to it.
    filters = Filters(invocation_ids=("e-103",), session_ids=("s-1",), app_name="billing")
    loaded = journal.load(files("journal.jsonl"), filters)
    expected = expected_journal(["notify:C-9", "send-invoice:INV-78"])
    pd.testing.assert_frame_equal(loaded.frames["journal"], expected)


def test_column_mapping_and_absent_optional_result() -> None:
    columns = {"key": "business_key", "invocation_id": "inv", "function_call_id": "call"}
    section = {"path": "mapped.jsonl", "columns": {**columns, "status": "state"}}
    manifest = parse_manifest({"journal": section}, base=DATA)
    loaded = journal.load(manifest.sources["journal"], manifest.filters)
    pd.testing.assert_frame_equal(
        loaded.frames["journal"], expected_journal(["send-invoice:INV-77"])
    )


def test_unmapped_names_are_named_in_the_error() -> None:
    with pytest.raises(SchemaError, match=r"lack columns: \['key', 'invocation_id', 'status'\]"):
        journal.load(files("mapped.jsonl"), Filters())


def test_mapping_a_runs_column_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"\['attempts'\]"):
        journal.load(files("journal.csv", columns={"attempts": "tries"}), Filters())


def test_every_bad_row_is_rejected_with_its_line() -> None:
    loaded = journal.load(files("bad.csv"), Filters())
    frame = loaded.frames["journal"]
    assert frame[["key", "status"]].values.tolist() == [["k-ok", "DONE"]]
    assert frame["result"].tolist() == [{}]
    assert list(loaded.rejects[["location", "reason"]].itertuples(index=False, name=None)) == [
        ("bad.csv:2", "duplicate key; kept the row updated last, at bad.csv:7"),
        ("bad.csv:3", "status STARTED is not one of INTENT, DONE"),
        ("bad.csv:4", "result: malformed JSON (Expecting property name enclosed in double quotes "
         "at column 2)"),
        ("bad.csv:5", "missing key"),
        ("bad.csv:6", "created_at: timestamp without a UTC offset (set timezone in the manifest)"),
        ("bad.csv:8", "missing updated_at"),
    ]  # fmt: skip
    assert set(loaded.rejects["source"]) == {"journal"}


def test_a_null_invocation_id_is_a_reject_not_a_good_row(tmp_path: Path) -> None:
    # tool_journal declares invocation_id NOT NULL; "" is function_call_id's "no call id"
    good = {"key": "k-1", "invocation_id": "e-1", "function_call_id": "", "status": "DONE"}
    good |= {"result": None, "created_at": "2026-11-29T03:00:00Z"}
    good |= {"updated_at": "2026-11-29T03:00:00Z"}
    absent = {k: v for k, v in good.items() if k != "invocation_id"} | {"key": "k-3"}
    lines = [good, {**good, "key": "k-2", "invocation_id": None}, absent]
    (tmp_path / "journal.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    loaded = journal.load(SourceSpec("journal", paths=(tmp_path / "journal.jsonl",)), Filters())
    assert loaded.frames["journal"]["key"].tolist() == ["k-1"]
    assert loaded.rejects[["location", "reason"]].values.tolist() == [
        ["journal.jsonl:2", "missing invocation_id"],
        ["journal.jsonl:3", "missing invocation_id"],
    ]
