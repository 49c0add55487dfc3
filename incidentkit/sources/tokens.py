"""Token counts: an event's usage metadata and a span's ``gen_ai.usage.*`` attributes.

Events carry genai's ``GenerateContentResponseUsageMetadata`` as ``usageMetadata`` (ADK Java,
ADK Python by alias) or ``usage_metadata`` (ADK Python's stores), with camelCase or snake_case
counts inside. The events frame gets three columns from it, counted as ADK's own telemetry
counts them (``gen_ai.usage.output_tokens`` adds the thinking tokens):

- ``prompt_tokens`` = ``promptTokenCount``;
- ``output_tokens`` = ``candidatesTokenCount`` + ``thoughtsTokenCount``, when either is given;
- ``total_tokens`` = ``totalTokenCount`` when given, else ``prompt_tokens`` + ``output_tokens``
  when either is given.

A count is a whole number from 0 up to :data:`EVENT_COUNT_MAX` (genai declares int32): an int,
or a float without a fraction. Anything else there (text, a negative number, a fraction, a
boolean, a list or object) is unreadable: the column it gives is missing, and so is a column
derived from it; a ``usageMetadata`` that is not an object leaves all three missing. The event
itself is kept (its calls and responses matter more than its bill), and the source gets one
warning counting such events. JSON null counts as absent, like a missing key.

Spans keep ``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens`` as they are; the
same rule (up to 2**63 - 1, OTel's int64) turns them into the spans frame's columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.sources.events.adk_columns import (
    NONE,
    NOT_NONE,
    Bools,
    Ints,
    Records,
    mask,
    not_of,
)
from incidentkit.sources.loaded import RejectSink

EVENT_COUNT_MAX = 2**31 - 1
"""The largest token count an event may carry (genai's counts are int32)."""
SPAN_COUNT_MAX = 2**63 - 1
"""The largest token count a span attribute may carry (OTel integers are int64)."""
USAGE_KEYS = ("usageMetadata", "usage_metadata")
EVENT_COLUMNS = ("prompt_tokens", "output_tokens", "total_tokens")
SPAN_ATTRIBUTES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
}
REASON = "usage_reason"
"""Scratch column of the loaders' frames: why a row's token counts are unreadable (or None)."""

_COUNTS = {
    "prompt": ("promptTokenCount", "prompt_token_count"),
    "candidates": ("candidatesTokenCount", "candidates_token_count"),
    "thoughts": ("thoughtsTokenCount", "thoughts_token_count"),
    "total": ("totalTokenCount", "total_token_count"),
}
_ABSENT, _BAD = -1, -2  # what _reader returns for a null and for an unreadable value


@dataclass(frozen=True)
class Tokens:
    """Token columns (name → nullable Int64 array) and, per row, why a count is unreadable."""

    columns: dict[str, pd.arrays.IntegerArray]
    reasons: list[str | None]


def _reader(limit: int) -> Callable[[Any], int]:
    """A count from a JSON value: itself, ``_ABSENT`` for null, ``_BAD`` for anything else."""

    def read(value: Any) -> int:
        kind = type(value)
        if kind is int:
            return int(value) if 0 <= value <= limit else _BAD
        if value is None:
            return _ABSENT
        if kind is float and value.is_integer() and 0 <= value <= limit:
            return int(value)
        return _BAD

    return read


def _read(values: Sequence[Any], limit: int) -> Ints:
    """Counts of ``values`` (``_ABSENT``/``_BAD`` where there is none): one numpy pass when
    they are ints and nulls only and ``limit`` is exact as a float, else value by value."""
    if limit < 2**53 and set(map(type, values)) <= {int, NONE}:
        try:
            numbers = np.array(values, dtype=np.float64)  # None -> NaN
        except OverflowError:  # an int past float's range: read value by value
            pass
        else:
            with np.errstate(invalid="ignore"):
                bad = (numbers < 0) | (numbers > limit)
            counts = np.where(np.isnan(numbers), _ABSENT, np.where(bad, _BAD, numbers))
            return counts.astype(np.int64)
    return np.fromiter(map(_reader(limit), values), dtype=np.int64, count=len(values))


def _nullable(values: Ints, given: Bools) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(given, values, 0), ~given)


def event_tokens(usage: list[Any]) -> Tokens:
    """The token columns of events whose usage metadata is ``usage`` (None when absent)."""
    n = len(usage)
    reasons: list[str | None] = [None] * n
    present = mask(usage, NOT_NONE)
    wrong = not_of(usage, (dict, NONE))
    if wrong is not None:
        for i in np.flatnonzero(wrong):
            reasons[i] = f"usageMetadata is not an object: {usage[i]!r:.80}"
        present &= ~wrong
    at = np.flatnonzero(present)
    columns = {name: np.zeros(n, dtype=np.int64) for name in EVENT_COLUMNS}
    known = {name: np.zeros(n, dtype=bool) for name in EVENT_COLUMNS}
    if len(at):
        found = Records(list(compress(usage, present)))
        raw = {name: found.get(keys) for name, keys in _COUNTS.items()}
        count = {name: _read(values, EVENT_COUNT_MAX) for name, values in raw.items()}
        given = {name: values >= 0 for name, values in count.items()}
        bad = {name: values == _BAD for name, values in count.items()}
        prompt, candidates = count["prompt"], count["candidates"]
        thoughts, total = count["thoughts"], count["total"]
        output = np.maximum(candidates, 0) + np.maximum(thoughts, 0)
        output_known = (given["candidates"] | given["thoughts"]) & ~(
            bad["candidates"] | bad["thoughts"]
        )
        summed = np.maximum(prompt, 0) + output
        sum_known = (given["prompt"] | output_known) & ~(
            bad["prompt"] | bad["candidates"] | bad["thoughts"]
        )
        total_known = given["total"] | (sum_known & (total == _ABSENT))
        for name, values, ok in (
            ("prompt_tokens", prompt, given["prompt"]),
            ("output_tokens", output, output_known),
            ("total_tokens", np.where(given["total"], total, summed), total_known),
        ):
            columns[name][at] = values
            known[name][at] = ok
        for j in np.flatnonzero(np.logical_or.reduce([bad[name] for name in _COUNTS])):
            name = next(name for name in _COUNTS if bad[name][j])
            key, value = _COUNTS[name][0], raw[name][j]
            reasons[at[j]] = f"usageMetadata.{key} is not a token count: {value!r:.80}"
    return Tokens({name: _nullable(columns[name], known[name]) for name in EVENT_COLUMNS}, reasons)


def span_tokens(usage: Sequence[tuple[Any, ...]]) -> Tokens:
    """The spans frame's token columns from each span's values of the
    :data:`SPAN_ATTRIBUTES` keys, in that order (None where a span has none)."""
    columns = {}
    reasons: list[str | None] = [None] * len(usage)
    for (col, key), values in zip(SPAN_ATTRIBUTES.items(), _transposed(usage), strict=True):
        count = _read(values, SPAN_COUNT_MAX)
        columns[col] = _nullable(count, count >= 0)
        for i in np.flatnonzero(count == _BAD):
            reasons[i] = reasons[i] or f"{key} is not a token count: {values[i]!r:.80}"
    return Tokens(columns, reasons)


def _transposed(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    if not rows:
        return [() for _ in SPAN_ATTRIBUTES]
    return list(zip(*rows, strict=True))


def warn_unreadable(frame: pd.DataFrame, sink: RejectSink, *, what: str) -> None:
    """One warning for the rows of ``frame`` whose :data:`REASON` says a count is unreadable."""
    bad = frame[REASON].notna()
    if not bad.any():
        return
    first = frame.loc[bad].iloc[0]
    sink.warn(
        str(first["location"]),
        f"{int(bad.sum())} {what} carry unreadable token counts, kept with those counts "
        f"missing (first at {first['location']}: {first[REASON]})",
    )
