"""Time parsing: every timestamp the kit reads or is given becomes UTC here.

``parse_utc`` reads a column row by row tolerant (the reasons become rejects), ``to_utc`` reads
a column strictly, ``utc_timestamp`` reads one parameter. Naive times are refused unless the
source is declared to store UTC without an offset.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.frames import TS

Naive = Literal["error", "utc"]
"""What naive times mean: an error, or UTC wall time (the manifest's ``naive_timestamps``)."""
NO_OFFSET = "timestamp without a UTC offset"
NOT_ISO = "not an ISO 8601 timestamp"
_OFFSET = re.compile(r"(?:[zZ]|[+-]\d\d(?::?\d\d)?)$")


def parse_utc(
    values: pd.Series, *, naive: Naive = "error", unit: str | None = None
) -> tuple[pd.Series, pd.Series]:
    """Parse a column to ``datetime64[ns, UTC]``, row by row tolerant.

    Returns ``(times, reasons)``: ``reasons`` is null where the value parsed (or was null) and
    says why it did not otherwise. Strings are ISO 8601; numbers need ``unit``. Naive values
    are unreadable unless ``naive="utc"`` says the source stores UTC without an offset.
    """
    index = values.index
    reasons = pd.Series(None, index=index, dtype=object)
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        return values.dt.tz_convert("UTC").dt.as_unit("ns"), reasons
    if pd.api.types.is_datetime64_dtype(values.dtype):
        if naive == "utc":
            return values.dt.tz_localize("UTC").dt.as_unit("ns"), reasons
        reasons[values.notna()] = NO_OFFSET
        return pd.Series(pd.NaT, index=index, dtype=TS), reasons
    present = values.notna()
    if unit is not None:
        numbers = pd.to_numeric(values, errors="coerce")
        reasons[present & numbers.isna()] = f"timestamp is not a number of {unit}"
        times = pd.to_datetime(numbers, unit=unit, utc=True).dt.as_unit("ns")
        return times, reasons
    times = pd.Series(pd.NaT, index=index, dtype=TS)
    if not present.any():
        return times, reasons
    as_text = values[present].map(_as_iso_text).astype("str")
    parsed = pd.to_datetime(as_text, format="ISO8601", utc=True, errors="coerce")
    unreadable = parsed.isna()
    reasons[unreadable[unreadable].index] = NOT_ISO
    if naive == "error":
        offsetless = ~unreadable & ~as_text.str.contains(_OFFSET, na=False)
        reasons[offsetless[offsetless].index] = NO_OFFSET
        parsed[offsetless] = pd.NaT
    times[present] = parsed.dt.as_unit("ns")
    return times, reasons


def _as_iso_text(value: Any) -> str:
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


_TO_UTC_ERRORS = {
    NO_OFFSET: (
        "a timestamp without a UTC offset",
        "write it in UTC with an offset, e.g. 2026-11-29T03:10:00Z, or declare the source's "
        "naive times as UTC",
    ),
    NOT_ISO: ("a value that is not an ISO 8601 timestamp", "write it like 2026-11-29T03:10:00Z"),
}


def to_utc(values: Any, *, what: str, naive: Naive = "error", unit: str | None = None) -> pd.Series:
    """Parse ``values`` to ``datetime64[ns, UTC]``; the first unreadable one is an error.

    Strings are read as ISO 8601; numbers need ``unit`` ("s", "ms", "us", "ns"). Naive values
    are an error unless ``naive="utc"`` says the source stores UTC without an offset.
    """
    series = values if isinstance(values, pd.Series) else pd.Series(values)
    times, reasons = parse_utc(series, naive=naive, unit=unit)
    bad = reasons.notna().to_numpy()
    if bad.any():
        first = int(bad.argmax())
        problem, fix = _TO_UTC_ERRORS.get(
            str(reasons.iloc[first]),
            (f"a value that is not a number of {unit}", f"give epoch numbers in {unit}"),
        )
        raise ParameterError(f"{what} holds {problem}", value=str(series.iloc[first]), fix=fix)
    return times


def utc_timestamp(value: Any, *, what: str) -> pd.Timestamp:
    """One timezone-aware UTC timestamp from a parameter; naive values are refused."""
    if isinstance(value, pd.Timestamp | str) or hasattr(value, "tzinfo"):
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError) as err:
            raise ParameterError(
                f"{what} is not a timestamp",
                value=value,
                fix="write it like 2026-11-29T03:10:00Z",
            ) from err
        if stamp.tzinfo is None:
            raise ParameterError(
                f"{what} is a naive datetime",
                value=str(value),
                fix="give it in UTC with an offset, e.g. 2026-11-29T03:10:00Z",
            )
        return stamp.tz_convert("UTC").as_unit("ns")
    raise ParameterError(
        f"{what} is not a timestamp", value=value, fix="write it like 2026-11-29T03:10:00Z"
    )
