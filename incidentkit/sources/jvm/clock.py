"""The JVM's clock in its own dumps: HotSpot prints local wall-clock times without a zone, so
thread dumps and class histograms share how a time is read and what a UTC time in the file's
name (``dump-2026-11-29T03:12:01Z.txt``) says about the JVM's offset."""

from __future__ import annotations

import re

import pandas as pd

from incidentkit.times import holdable, localize

FILE_TIME = re.compile(
    r"(\d{4}-\d\d-\d\d)T(\d\d)[-:]?(\d\d)[-:]?(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d(?::?\d\d)?)",
    re.ASCII,
)
STEP = pd.Timedelta(minutes=15)
"""UTC offsets are whole quarter hours: a file-name time fixes the offset to the nearest."""


def wall_time(text: str) -> pd.Timestamp | None:
    """A time as the JVM (or the operator's script) wrote it, or None when it is no date
    pandas can hold; naive when written without a zone."""
    try:
        stamp = pd.Timestamp(text.replace(",", "."))
    except (ValueError, OverflowError):  # impossible dates
        return None
    if pd.isna(stamp):
        return None
    aware = stamp if stamp.tzinfo is not None else stamp.tz_localize("UTC")
    return stamp if holdable(pd.Series([aware])).all() else None  # years outside 1677-2262


def file_time(name: str) -> pd.Timestamp | None:
    """The UTC time written in a file's name, or None."""
    found = FILE_TIME.search(name)
    if not found:
        return None
    day, hh, mm, ss, frac, offset = found.groups()
    return wall_time(f"{day}T{hh}:{mm}:{ss}{'.' + frac if frac else ''}{offset}")


def clock_offset(named: pd.Timestamp, first_local: pd.Timestamp) -> pd.Timedelta:
    """How far the JVM's wall clock is from UTC, from the file name's UTC time and the first
    local time the file holds (rounded to :data:`STEP`)."""
    named_utc = named.tz_convert("UTC").tz_localize(None)
    offset: pd.Timedelta = round((named_utc - first_local) / STEP) * STEP
    return offset


def host_offset(
    local: list[pd.Timestamp], named: pd.Timestamp | None, *, zone: str | None
) -> pd.Timedelta | None:
    """The offset that reads the naive times ``local`` of a file when no ``zone`` is given:
    the file name's (:func:`clock_offset`); 0 when no time needs it, None when it is unknown."""
    if not local or zone is not None:
        return pd.Timedelta(0)
    return None if named is None else clock_offset(named, local[0])


def utc_of(
    wall: pd.Timestamp, *, zone: str | None, offset: pd.Timedelta | None
) -> pd.Timestamp | None:
    """A naive wall time in UTC: read in ``zone`` when one is given, else moved by the host's
    ``offset``; None when neither is known or the time leaves pandas' range."""
    if zone is not None:
        utc: pd.Timestamp = localize(pd.Series([wall]), zone).iloc[0]
        return utc
    if offset is None:
        return None
    try:
        moved = (wall + offset).tz_localize("UTC")
    except (OverflowError, ValueError):  # pandas' OutOfBoundsDatetime is a ValueError
        return None
    return moved if holdable(pd.Series([moved])).all() else None
