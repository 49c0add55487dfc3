"""The draft's wording of values: the TODO marker, Markdown-safe text and code spans, links,
numbers, durations, times."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pandas as pd

from incidentkit.times import iso_utc

TODO = "TODO(author):"
"""The marker of every passage a person must write (``> TODO(author): ...``)."""

_MD = str.maketrans(
    {
        **{char: "\\" + char for char in "\\`*[]|"},
        **{"&": "&amp;", "<": "&lt;", ">": "&gt;"},
    }
)
"""Markdown syntax escaped with a backslash, HTML as entities (no renderer reads a tag in it)."""


def md(text: object) -> str:
    """Text from the findings, safe inside Markdown prose and table cells: on one line, with no
    link, code span, strong emphasis, table cell or HTML of its own."""
    return " ".join(str(text).translate(_MD).split())


def code(text: object) -> str:
    """``text`` as a Markdown code span, on one line; its delimiter is longer than any run of
    backticks inside (CommonMark). Text holding ``|`` (a table cell would end there: not every
    renderer reads ``\\|`` in a code span) is escaped prose (:func:`md`) instead."""
    value = " ".join(str(text).split())
    if "|" in value or not value:
        return md(value)
    fence = "`" * (max((len(run) for run in re.findall("`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def link(path: str) -> str:
    """A Markdown link to ``path`` (relative to OUT), its text escaped and its target quoted."""
    return f"[{md(path)}]({quote(path)})"


def num(value: Any) -> str:
    """An int with thousands separators; anything else as escaped text (:func:`md`)."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else md(value)


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
    except (ValueError, OverflowError):
        return None
    return None if pd.isna(stamp) or stamp.tzinfo is None else stamp


def iso(stamp: pd.Timestamp) -> str:
    """``stamp`` in UTC as ISO 8601 to the millisecond with a ``Z``: every time of the draft in
    one format (``2026-11-29T03:10:00.000Z``), whatever precision the findings wrote it in."""
    return iso_utc(stamp)


def utc(text: Any) -> str:
    """A time from the findings in the draft's one format (:func:`iso`); else as it is (raw:
    escape it with :func:`md` where it is written)."""
    stamp = time(text)
    return str(text) if stamp is None else iso(stamp)
