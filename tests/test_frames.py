from __future__ import annotations

import pandas as pd
import pytest

from incidentkit import frames, times
from incidentkit.errors import ParameterError, SchemaError


@pytest.mark.parametrize("name", sorted(frames.FRAMES))
def test_empty_frame_has_every_column_with_its_dtype(name: str) -> None:
    frame = frames.empty(name)
    spec = frames.FRAMES[name]
    assert list(frame.columns) == spec.names
    assert len(frame) == 0
    for column, dtype in spec.columns:
        assert str(frame[column].dtype) == str(pd.Series([], dtype=dtype).dtype), column


def test_timestamps_are_utc_nanoseconds() -> None:
    for name, spec in frames.FRAMES.items():
        for column, dtype in spec.columns:
            if dtype == frames.TS:
                assert str(frames.empty(name)[column].dtype) == "datetime64[ns, UTC]"


def test_conform_orders_casts_and_fills_flags() -> None:
    raw = pd.DataFrame(
        {
            "raw": ["x" * 900, None],
            "reason": ["bad", "worse"],
            "location": ["a.jsonl:1", "a.jsonl:2"],
            "source": ["events", "events"],
        }
    )
    out = frames.conform("rejects", raw)
    assert list(out.columns) == ["source", "location", "reason", "raw"]
    assert out["raw"].isna().tolist() == [False, True]


def test_conform_names_missing_columns() -> None:
    with pytest.raises(SchemaError, match=r"lacks required columns: \['reason', 'raw'\]"):
        frames.conform("rejects", pd.DataFrame({"source": ["a"], "location": ["b"]}))


def _histogram(**columns: object) -> pd.DataFrame:
    rows = {
        "histogram": ["h", "h", "h"],
        "taken_at": pd.to_datetime(["2026-11-29T03:00Z"] * 3, utc=True),
        "rank": [1, 2, 3],
        "class": ["a", "b", "c"],
        "module": [None, None, None],
        "instances": [1, 2, 3],
        "bytes": [16, 32, 48],
    }
    return pd.DataFrame({**rows, **columns})


@pytest.mark.parametrize(
    ("column", "values", "said"),
    [
        ("bytes", [16, None, 48], r"column bytes cannot be read as int64: 'row 1: missing'"),
        ("instances", ["1", "x", "3"], r"column instances cannot be read as int64: .*'x'"),
        ("rank", [1, 2**64, 3], r"column rank cannot be read as int64"),
    ],
)
def test_conform_names_the_column_and_row_a_count_cannot_hold(
    column: str, values: list[object], said: str
) -> None:
    """A count the frame's type cannot hold is a SchemaError naming it, never pandas' own."""
    frame = _histogram(**{column: pd.Series(values, dtype=object)})
    with pytest.raises(SchemaError, match=said):
        frames.conform("class_histograms", frame)


@pytest.mark.parametrize(
    "taken",
    [
        pd.Series(["2026-11-29T03:00Z", "soon", None], dtype=object),
        pd.Series(pd.to_datetime(["3000-01-01T00:00Z"] * 3, utc=True).as_unit("us")),
    ],
)
def test_conform_refuses_values_that_are_not_times_in_range(taken: pd.Series) -> None:
    with pytest.raises(SchemaError, match="column taken_at holds values that are not times"):
        frames.conform("class_histograms", _histogram(taken_at=taken))


def test_conform_refuses_naive_timestamps() -> None:
    frame = pd.DataFrame(
        {
            "dump": ["d"],
            "taken_at": [pd.Timestamp("2026-11-29 03:00")],
            "thread": ["t"],
            "nid": ["0x1a2b"],
            "state": ["RUNNABLE"],
            "top_frame": [None],
            "frames": [()],
            "cpu_ms": [None],
            "elapsed_ms": [None],
            "locks_held": [()],
            "lock_awaited": [None],
            "lock_class": [None],
            "lock_wait": [None],
            "synchronizers_listed": [False],
        }
    )
    with pytest.raises(SchemaError, match="not timezone-aware"):
        frames.conform("threads", frame)


def test_to_utc_converts_offsets_and_refuses_naive_text() -> None:
    out = times.to_utc(pd.Series(["2026-11-29T04:10:00+01:00"]), what="t")
    assert out.iloc[0] == pd.Timestamp("2026-11-29T03:10:00Z")
    with pytest.raises(ParameterError, match="without a UTC offset: '2026-11-29 03:10:00'"):
        times.to_utc(pd.Series(["2026-11-29 03:10:00"]), what="t")
    naive_ok = times.to_utc(pd.Series(["2026-11-29 03:10:00"]), what="t", naive="utc")
    assert naive_ok.iloc[0] == pd.Timestamp("2026-11-29T03:10:00Z")


def test_to_utc_names_the_offending_value() -> None:
    values = pd.Series(["2026-11-29T03:10:00Z", "29/11/2026 03:10", None])
    with pytest.raises(
        ParameterError, match=r"^t holds a value that is not an ISO 8601 timestamp: '29/11/2026"
    ):
        times.to_utc(values, what="t")
    with pytest.raises(ParameterError, match=r"not a number of ms: 'soon'\. give epoch"):
        times.to_utc(pd.Series([1_750_000_000_123, "soon"]), what="t", unit="ms")
    naive = pd.Series([pd.NaT, pd.Timestamp("2026-11-29 03:10")])
    with pytest.raises(ParameterError, match=r"without a UTC offset: '2026-11-29 03:10:00'"):
        times.to_utc(naive, what="t")


def test_to_utc_and_the_row_tolerant_parser_agree() -> None:
    values = pd.Series(["2026-11-29T03:10:00Z", "2026-11-29T04:10:00.5+0100", None])
    parsed, reasons = times.parse_utc(values)
    assert reasons.isna().all()
    pd.testing.assert_series_equal(times.to_utc(values, what="t"), parsed)
    assert parsed.tolist()[:2] == [
        pd.Timestamp("2026-11-29T03:10:00Z"),
        pd.Timestamp("2026-11-29T03:10:00.5Z"),
    ]


def test_to_utc_reads_epoch_units() -> None:
    ms = times.to_utc(pd.Series([1_750_000_000_123]), what="t", unit="ms")
    assert ms.iloc[0] == pd.Timestamp("2025-06-15T15:06:40.123Z")


def test_utc_timestamp_refuses_naive_parameter() -> None:
    with pytest.raises(ParameterError, match="naive datetime"):
        times.utc_timestamp("2026-11-29T03:10:00", what="as_of")
    assert times.utc_timestamp("2026-11-29T03:10:00Z", what="as_of").tzname() == "UTC"


def test_rejects_frame_truncates_raw() -> None:
    out = frames.rejects_frame(
        [{"source": "s", "location": "f:1", "reason": "r", "raw": "y" * 2000}]
    )
    assert len(out["raw"].iloc[0]) == frames.RAW_LIMIT


def test_conform_keeps_row_order_of_a_sorted_or_filtered_frame() -> None:
    raw = pd.DataFrame(
        {
            "source": ["a", "b", "c"],
            "location": ["1", "2", "3"],
            "reason": ["x", "y", "z"],
            "raw": ["p", "q", "r"],
        }
    )
    assert frames.conform("rejects", raw.iloc[::-1])["source"].tolist() == ["c", "b", "a"]
    assert frames.conform("rejects", raw.iloc[[2]])["location"].tolist() == ["3"]


def test_build_fills_what_was_left_out_with_neutral_values() -> None:
    events = frames.build(
        "events",
        [{"event_id": "a", "long_running_tool_ids": ("c1",)}, {"event_id": "b", "partial": True}],
    )
    assert list(events.columns) == frames.FRAMES["events"].names
    assert events["long_running_tool_ids"].tolist() == [("c1",), ()]
    assert events["partial"].tolist() == [False, True]
    assert events["seq"].tolist() == [0, 0] and events["ts"].isna().all()
    assert events["author"].isna().all()
    assert events["kind"].tolist() == ["turn", "turn"]  # an event of unknown kind: a turn
    assert events[["compacted_by", "rewound_by", "compaction_start"]].isna().all(axis=None)
    threads = frames.build("threads", {"thread": ["t1"]})
    assert threads["frames"].tolist() == [()]
    assert frames.build("calls", []).equals(frames.empty("calls"))
    given = pd.DataFrame({"thread": ["t1"]})
    pd.testing.assert_frame_equal(frames.build("threads", given), threads)
    assert list(given.columns) == ["thread"]  # the input is not modified


def test_build_refuses_columns_the_frame_does_not_have() -> None:
    with pytest.raises(ParameterError, match=r"columns not in the runs frame: \['colour'\]"):
        frames.build("runs", [{"run_id": "r", "colour": "red"}])
