"""Vectorised wording for triage messages: templates filled from whole columns at once.

Templates use ``str.format`` field names (``"call {cid} to {tool}"``); values are scalars or
Series in the row order of the index being worded (matched by position, not by label).
Conversions and format specs are ignored: a value is shown as :func:`text` shows it.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.frames import NINT, STR


def text(series: pd.Series, missing: str = "?") -> pd.Series:
    """The text of a column for messages (``str`` dtype); missing values read ``missing``."""
    if series.dtype == STR:
        return series.fillna(missing)
    return series.astype(object).where(series.notna(), missing).astype(STR)


def int_text(series: pd.Series) -> pd.Series:
    """Whole numbers as text (``3``, not ``3.0``); missing ones read ``?``."""
    return text(series.astype(NINT).astype(STR))


def time_text(series: pd.Series) -> pd.Series:
    """Times as UTC ISO-8601 text to the second (``2026-11-29T03:00:00Z``); missing read ``?``."""
    stamps = pd.to_datetime(series, utc=True)
    return text(stamps.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))


def join_text(values: Iterable[Any]) -> str:
    """One value's items joined by ``", "`` (for a tuple cell); missing items read ``?``."""
    return ", ".join("?" if v is None or v != v else str(v) for v in values)


def json_text(value: Any) -> str:
    """A payload value (state, arguments, a tool's answer) as JSON, the way ADK stores it:
    ``["kettle-blue", "mug-red"]``, ``"WELCOME10"``, not Python's ``['kettle-blue', ...]``."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except ValueError:  # a NaN or a cycle: Python's own words
        return str(value)


def fill(index: pd.Index, template: str, **values: Any) -> pd.Series:
    """Vectorised ``template.format(**values)`` over ``index`` (a ``str`` Series)."""
    return pd.Series(_filled(len(index), template, values), index=index, dtype=STR)


def fill_first(
    index: pd.Index,
    rules: Sequence[tuple[Any, str]],
    fields: Mapping[str, Any],
    default: str = "",
) -> pd.Series:
    """The template of the first rule whose condition holds, filled from ``fields``.

    Like :func:`~incidentkit.flows._frames.choose` over :func:`fill`s, but each template is
    filled only on the rows that take it. Rows no rule takes get ``default``, filled.
    Returns an object Series on ``index``.
    """
    conds = [np.asarray(cond, dtype=bool) for cond, _ in rules]
    which = np.select(conds, list(range(len(rules))), len(rules))
    out = np.full(len(index), None, dtype=object)
    for k, template in enumerate([words for _, words in rules] + [default]):
        rows = which == k
        if rows.any():
            names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
            sub = {
                n: fields[n][rows] if isinstance(fields[n], pd.Series) else fields[n] for n in names
            }
            out[rows] = _filled(int(rows.sum()), template, sub)
    return pd.Series(out, index=index, dtype=object)


def _filled(n: int, template: str, values: Mapping[str, Any]) -> np.ndarray:
    """``template`` filled on ``n`` rows, as an object array of str.

    Works on object arrays (one C-level concatenation per piece) rather than ``str`` Series,
    which would re-check for missing values at every step; no piece is ever missing.
    """
    out = np.full(n, "", dtype=object)
    for literal, name, _, _ in string.Formatter().parse(template):
        if literal:
            out = out + literal
        if name is not None:
            value = values[name]
            if isinstance(value, pd.Series):
                out = out + text(value).to_numpy(dtype=object)
            else:
                out = out + str(value)
    return out
