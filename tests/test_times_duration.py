"""The kit's one duration parser (``times.parse_duration``): it reads the units it documents as
pandas does, refuses anything else with a ParameterError naming the value and the fix, and
means the same length to ``--stale-after``, ``window = { last }`` and ``-p baseline``."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit import schedule
from incidentkit.errors import IncidentkitError, ManifestError, ParameterError, shown
from incidentkit.flows.common import baseline_window
from incidentkit.manifest import parse_manifest
from incidentkit.times import NS_PER_UNIT, parse_duration

HERE = Path(__file__).resolve().parent
PROBLEM = "length is not a positive duration"
FIX = "give e.g. 2h"
AS_OF = pd.Timestamp("2026-12-02T06:15:00Z")

ONE = {
    **dict.fromkeys(("w", "week", "weeks"), pd.Timedelta(weeks=1)),
    **dict.fromkeys(("d", "day", "days"), pd.Timedelta(days=1)),
    **dict.fromkeys(("h", "hr", "hour", "hours"), pd.Timedelta(hours=1)),
    **dict.fromkeys(("m", "min", "minute", "minutes"), pd.Timedelta(minutes=1)),
    **dict.fromkeys(("s", "sec", "second", "seconds"), pd.Timedelta(seconds=1)),
    "ms": pd.Timedelta(milliseconds=1),
}
"""The units the parser documents, written out independently: one of each as pandas makes it."""

units = st.sampled_from(sorted(ONE))
spaces = st.sampled_from(["", " ", "  "])
parts = st.lists(st.tuples(st.integers(0, 999), spaces, units, spaces), min_size=1, max_size=4)


def parse(text: object) -> pd.Timedelta:
    return parse_duration(text, problem=PROBLEM, fix=FIX)


def written(chosen: list[tuple[int, str, str, str]]) -> str:
    return "".join(f"{count}{gap}{unit}{after}" for count, gap, unit, after in chosen)


def expected(chosen: list[tuple[int, str, str, str]]) -> pd.Timedelta:
    return sum((count * ONE[unit] for count, _, unit, _ in chosen), pd.Timedelta(0))


def refused(value: object) -> ParameterError:
    with pytest.raises(ParameterError) as caught:
        parse(value)
    error = caught.value
    assert isinstance(error, IncidentkitError)
    assert (error.problem, error.value, error.fix) == (PROBLEM, value, FIX)
    assert shown(value) in str(error) and FIX in str(error)
    return error


def test_the_documented_units_are_the_parser_s() -> None:
    assert set(NS_PER_UNIT) == set(ONE)


@settings(max_examples=300, deadline=None)
@given(parts)
def test_a_sum_of_documented_units_is_read_as_pandas_reads_each(
    chosen: list[tuple[int, str, str, str]],
) -> None:
    text = written(chosen)
    if expected(chosen) > pd.Timedelta(0):
        assert parse(text) == expected(chosen)
        assert parse(f" {text} ") == expected(chosen)
    else:
        refused(text)  # zero is not a positive duration


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9_999), st.integers(1, 999_999), units)
def test_fractions_are_exact_to_the_nanosecond(whole: int, fraction: int, unit: str) -> None:
    exact_ns = ONE[unit].value * (whole + Fraction(fraction, 10**6))
    assert abs(parse(f"{whole}.{fraction:06d}{unit}").value - exact_ns) <= Fraction(1, 2)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_any_text_is_a_positive_duration_or_a_parameter_error(text: str) -> None:
    try:
        length = parse(text)
    except ParameterError as error:
        assert (error.problem, error.value, error.fix) == (PROBLEM, text, FIX)
    else:
        assert length > pd.Timedelta(0)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=["Nd"]), max_size=20))
def test_text_without_a_number_is_refused(text: str) -> None:
    refused(text)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 999),
    st.text(
        alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8
    ),
)
def test_an_unknown_unit_is_refused(count: int, unit: str) -> None:
    if unit not in ONE:
        refused(f"{count}{unit}")


@settings(max_examples=200, deadline=None)
@given(parts, st.sampled_from(["-", "+", "−"]))
def test_a_signed_duration_is_refused(chosen: list[tuple[int, str, str, str]], sign: str) -> None:
    refused(sign + written(chosen))


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        "2",
        "30",
        "1.5",
        "h",
        ".5h",
        "1e3s",
        "1h30",
        "2hx",
        "1h,30m",
        "1 h and 5 m",
        "1M",
        "1mo",
        "1y",
        "1D",
        "1H",
        "00:30:00",
        "PT30M",
        "1 days 02:00:00",
        "0s",
        "0h0m",
        "0.0000000001s",
        "300000w",
        "9" * 40 + "d",
        "nan",
        "NaT",
        "inf",
        7200,
        2.5,
        None,
        True,
        pd.Timedelta(hours=1),
        b"2h",
        ["2h"],
    ],
)
def test_garbage_is_refused_with_the_value_and_the_fix(value: object) -> None:
    refused(value)


def test_m_means_minutes_everywhere() -> None:
    assert parse("30m") == parse("30min") == parse("30 minutes") == pd.Timedelta(minutes=30)
    assert parse("1h30m") == parse("1.5h") == parse("90 min") == pd.Timedelta(minutes=90)
    assert parse("500ms") == pd.Timedelta(milliseconds=500)


def window_last(text: str) -> pd.Timedelta | None:
    window = parse_manifest({"window": {"last": text}, "ledger": {"path": "l.csv"}}, base=HERE)
    return None if window.filters.window is None else window.filters.window.last


def baseline_length(text: str) -> pd.Timedelta:
    window = baseline_window(text, AS_OF)
    assert window is not None and window.end == AS_OF + pd.Timedelta(microseconds=1)
    return AS_OF - window.start


@settings(max_examples=100, deadline=None)
@given(parts)
def test_a_duration_means_the_same_to_every_caller(
    chosen: list[tuple[int, str, str, str]],
) -> None:
    text = written(chosen)
    if expected(chosen) <= pd.Timedelta(0):
        return
    length = parse(text)
    assert schedule.parse_stale_after(text) == length
    assert baseline_length(text) == length
    assert window_last(text) == length


@pytest.mark.parametrize("value", ["30m", "1h30m", "7d", "90s"])
def test_the_callers_read_the_short_units(value: str) -> None:
    length = parse(value)
    assert schedule.parse_stale_after(value) == baseline_length(value) == length
    assert window_last(value) == length


@pytest.mark.parametrize("value", ["soon", "2", "-2h", "1M", "00:30:00"])
def test_each_caller_keeps_its_error_class_and_message(value: str) -> None:
    with pytest.raises(ParameterError, match=r"--stale-after must be a positive duration.*2h"):
        schedule.parse_stale_after(value)
    with pytest.raises(ParameterError, match="baseline is not a duration or a START/END window"):
        baseline_window(value, AS_OF)
    with pytest.raises(
        ManifestError, match=r'window last must be a positive duration.*last = "2h"'
    ):
        window_last(value)
