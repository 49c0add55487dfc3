"""The draft's wording of values: the TODO marker, Markdown-safe text, numbers, durations, times."""

from __future__ import annotations

from typing import Any

import pandas as pd

TODO = "TODO(author):"
"""The marker of every passage a person must write (``> TODO(author): ...``)."""


def md(text: str) -> str:
    """Text from the findings, safe inside Markdown prose and table cells."""
    for char in "\\`*[]|":
        text = text.replace(char, "\\" + char)
    return " ".join(text.split())


def num(value: Any) -> str:
    """An int with thousands separators; anything else as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def duration(seconds: float) -> str:
    """``seconds`` as ``1 h 5 min 3 s`` (zero parts left out)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] * bool(hours) + [f"{minutes} min"] * bool(minutes)
    return " ".join(parts + [f"{secs} s"] * bool(secs or not parts))


def ms(value: Any) -> str:
    """Milliseconds as seconds (``1.2 s``, ``14 s``); ``n/a`` when not a number."""
    if not isinstance(value, int | float):
        return "n/a"
    return f"{value / 1000:.2g} s" if value < 10_000 else f"{value / 1000:.0f} s"


def time(text: Any) -> pd.Timestamp | None:
    """A tz-aware timestamp from findings text, else None (not text, unparsable, or naive)."""
    if not isinstance(text, str):
        return None
    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        return None
    return None if stamp.tzinfo is None else stamp


def iso(stamp: pd.Timestamp) -> str:
    """``stamp`` in UTC as ISO 8601 to the millisecond with a ``Z``: every time of the draft in
    one format (``2026-11-29T03:10:00.000Z``), whatever precision the findings wrote it in."""
    utc = stamp.tz_convert("UTC")
    return f"{utc.strftime('%Y-%m-%dT%H:%M:%S')}.{utc.microsecond // 1000:03d}Z"


def utc(text: Any) -> str:
    """A time from the findings in the draft's one format (:func:`iso`); else as it is."""
    stamp = time(text)
    return str(text) if stamp is None else iso(stamp)
