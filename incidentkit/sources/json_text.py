"""JSON text decoded and encoded: msgspec first and ``json.loads`` for what it refuses, a reason
for each value that fails, and the canonical text of a value."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from incidentkit.sources.process_memory import bulk_decoding


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json reads NaN and Infinity; JSON has none


_DECODER = msgspec.json.Decoder()


def fast_loads(text: str) -> Any:
    """Decode JSON text as ``json.loads`` does (integers of any size kept exact): msgspec
    first (50k ADK events, GC paused: 0.15 s, json.loads 0.37 s); what it refuses (malformed
    text, NaN, a number past float's range, a lone surrogate, nesting past its limit) goes to
    ``json.loads``, whose result or error stands, but for a lone surrogate: see
    :func:`_python_loads`."""
    try:
        return _DECODER.decode(text)
    except msgspec.DecodeError:
        return _python_loads(text)


def loads(text: str) -> Any:
    """:func:`fast_loads` refusing NaN and Infinity (a ValueError, like any malformed text)."""
    try:
        return _DECODER.decode(text)
    except msgspec.DecodeError:
        return _python_loads(text, parse_constant=_no_constant)


def _python_loads(text: str, **options: Any) -> Any:
    """``json.loads``, refusing (a ValueError) half a UTF-16 pair (``"\\ud800"``, escaped or
    not): Python keeps it in a str no UTF-8, so no Arrow column and no report, can hold."""
    value = json.loads(text, **options)
    if not text.isascii() or "\\ud" in text.lower():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as err:
            half = f"\\u{ord(err.object[err.start]):04x}"
            raise ValueError(
                f"{half} is half of a UTF-16 surrogate pair, not a character: the writer must "
                "escape both halves of the pair, or write the character itself"
            ) from None
    return value


JSON_ERRORS = (ValueError, RecursionError)
"""What ``json.loads`` raises: malformed text (JSONDecodeError, a ValueError), an integer past
Python's digit limit (ValueError), nesting past the recursion limit (RecursionError)."""


def json_failure(err: Exception) -> str:
    """A reject reason for one of :data:`JSON_ERRORS`."""
    if isinstance(err, json.JSONDecodeError):
        return f"malformed JSON ({err.msg} at column {err.colno})"
    if isinstance(err, RecursionError):
        return "JSON nested too deeply to read"
    return f"unreadable JSON value ({str(err).split(';')[0]})"


def parse_json_values(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Decode JSON text values (dicts and lists pass through); reasons say which failed."""
    raw = values.to_numpy(dtype=object)
    out = np.empty(len(raw), dtype=object)
    reasons = np.empty(len(raw), dtype=object)
    with bulk_decoding():
        present = pd.notna(raw)
        if values.dtype == "str" or pd.api.types.infer_dtype(raw, skipna=True) == "string":
            out[~present] = None
            try:  # all text: one pass in C, value by value only if one fails
                out[present] = np.fromiter(map(_DECODER.decode, raw[present]), dtype=object)
            except (msgspec.DecodeError, RecursionError):  # msgspec too refuses deep nesting
                _decode_each(raw, out, reasons)
        else:
            _decode_each(raw, out, reasons)
    return pd.Series(out, index=values.index, dtype=object), pd.Series(
        reasons, index=values.index, dtype=object
    )


def _decode_each(raw: Any, out: Any, reasons: Any) -> None:
    for i, value in enumerate(raw):
        if isinstance(value, str):
            try:
                out[i] = loads(value)
            except JSON_ERRORS as err:
                reasons[i] = json_failure(err)
        elif value is None or (isinstance(value, float) and np.isnan(value)):
            out[i] = None
        else:
            out[i] = value


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)  # built once: json.dumps with options builds an encoder per call, half its cost on small args


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``: sorted keys, no spaces (equal args give equal text)."""
    return _CANONICAL.encode(value)
