"""The fast path of ``parse_utc`` (Arrow's ISO 8601 reader over a whole column) reads every
time as pandas' ISO 8601 parser does, and leaves any column it cannot read whole to the
value-by-value path, whose reasons stand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.times import NO_OFFSET, NOT_ISO, _arrow_parsed, parse_utc

moments = st.datetimes(
    min_value=datetime(1700, 1, 1), max_value=datetime(2250, 12, 31), timezones=st.just(UTC)
)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timedelta(minutes=m))
separators = st.sampled_from(["T", " "])
spellings = st.sampled_from(["Z", "+HH:MM", "+HHMM", "+HH"])


@st.composite
def iso_texts(draw: st.DrawFn) -> str:
    moment, shift = draw(moments), draw(offsets)
    if draw(spellings) == "+HH":
        shift = timedelta(hours=round(shift.total_seconds() / 3600))
    local = moment + shift
    stamp = local.strftime(f"%Y-%m-%d{draw(separators)}%H:%M:%S")
    digits = draw(st.integers(min_value=0, max_value=9))
    if digits:
        stamp += "." + f"{local.microsecond:06d}{draw(st.integers(0, 999)):03d}"[:digits]
    spelling = draw(spellings)
    minutes = int(shift.total_seconds() // 60)
    sign, (hours, rest) = ("+" if minutes >= 0 else "-"), divmod(abs(minutes), 60)
    if spelling == "Z" and minutes == 0:
        return stamp + "Z"
    if spelling == "+HHMM":
        return f"{stamp}{sign}{hours:02d}{rest:02d}"
    if spelling == "+HH" and rest == 0:
        return f"{stamp}{sign}{hours:02d}"
    return f"{stamp}{sign}{hours:02d}:{rest:02d}"


@settings(max_examples=200, deadline=None)
@given(st.lists(iso_texts(), min_size=1, max_size=30))
def test_the_fast_path_reads_times_as_pandas_does(texts: list[str]) -> None:
    column = pd.Series(texts, dtype="str")
    assert _arrow_parsed(column) is not None  # the fast path reads them all
    times, reasons = parse_utc(column)
    expected = pd.to_datetime(pd.Series(texts, dtype=object), format="ISO8601", utc=True)
    pd.testing.assert_series_equal(times, expected.dt.as_unit("ns"), check_names=False)
    assert reasons.isna().all()


@settings(max_examples=100, deadline=None)
@given(st.lists(iso_texts(), min_size=1, max_size=10), st.data())
def test_one_unreadable_value_leaves_the_rest_read_and_says_why(
    texts: list[str], data: st.DataObject
) -> None:
    odd = data.draw(st.sampled_from(["2026-11-29T03:10:00", "yesterday", "2026-13-01T00:00Z"]))
    at = data.draw(st.integers(min_value=0, max_value=len(texts)))
    values = [*texts[:at], odd, *texts[at:]]
    times, reasons = parse_utc(pd.Series(values, dtype="str"))
    assert times.isna().tolist() == [i == at for i in range(len(values))]
    assert reasons.iloc[at] == (NO_OFFSET if odd == "2026-11-29T03:10:00" else NOT_ISO)
    rest = pd.to_datetime(pd.Series(texts, dtype=object), format="ISO8601", utc=True)
    assert times.drop(index=at).tolist() == rest.tolist()
