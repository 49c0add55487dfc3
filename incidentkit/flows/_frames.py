"""Vectorised frame mechanics shared by the triage flows.

Output contracts (:func:`as_columns`, :func:`empty_view`), first-true choice over aligned
columns (:func:`choose`), multi-column membership (:func:`rows_in`), per-key combination
(:func:`per_group`, :func:`tuples`) and plain-Python records for JSON-bound output
(:func:`plain_records`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.frames import cast_columns


def as_columns(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """Exactly ``columns`` (name → dtype) of ``frame``, in order (see ``frames.cast_columns``)."""
    return cast_columns(frame, columns, what="a triage view")


def empty_view(columns: Mapping[str, str]) -> pd.DataFrame:
    """A view with no rows: exactly ``columns`` (name → dtype), typed as :func:`as_columns`
    types them."""
    return as_columns(pd.DataFrame(columns=list(columns)), columns)


def choose(
    conds: Sequence[pd.Series | np.ndarray],
    choices: Sequence[object],
    default: object,
    index: pd.Index,
) -> pd.Series:
    """``np.select`` over aligned columns: the first true condition's choice, else ``default``.

    Conditions are boolean Series or arrays aligned to ``index``; each choice and the default is
    an aligned Series or a scalar. Returns an object Series on ``index``.
    """
    n = len(index)

    def arr(value: object) -> np.ndarray:
        values: np.ndarray = (
            value.to_numpy(dtype=object)
            if isinstance(value, pd.Series)
            else np.full(n, value, dtype=object)
        )
        return values

    picked = np.select(
        [np.asarray(c, dtype=bool) for c in conds], [arr(v) for v in choices], arr(default)
    )
    return pd.Series(picked, index=index, dtype=object)


def rows_in(left: pd.DataFrame, right: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Positional flags: which rows of ``left`` equal some row of ``right`` on ``columns``.

    Missing values equal each other. Each column is factorised once over both frames and the
    codes folded into one integer key, so no per-row tuple is built.
    """
    key = np.zeros(len(left) + len(right), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(pd.concat([left[col], right[col]], ignore_index=True))
        key = pd.factorize(key * (len(uniques) + 1) + (codes + 1))[0].astype(np.int64)
    found: np.ndarray = np.isin(key[: len(left)], key[len(left) :])
    return found


def per_group(values: pd.Series, keys: pd.Series, sep: str | None = None) -> pd.Series:
    """``values`` per key, in order, indexed by key (first seen first): a tuple, or the
    strings joined by ``sep``. Rows with a missing key are left out.

    The rows are sorted by key once and cut at the key changes: no groupby call per group.
    """
    codes, uniques = pd.factorize(keys)
    kept = codes >= 0
    codes = codes[kept]
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    cuts = np.flatnonzero(np.diff(ordered)) + 1
    parts = np.split(values.to_numpy(dtype=object)[kept][order], cuts) if len(ordered) else []
    combined = np.empty(len(parts), dtype=object)
    combined[:] = [tuple(part) for part in parts] if sep is None else [sep.join(p) for p in parts]
    index = uniques.take(ordered[np.r_[0, cuts]]) if len(ordered) else uniques[:0]
    joined: pd.Series = pd.Series(combined, index=index, dtype=object)
    return joined


def in_session_order(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows grouped by invocation, each invocation's in session order (session,
    ``seq``). Sorts integer codes of the id columns, not their text (several times faster
    on millions of rows); the invocations come in order of first appearance."""
    invocation = pd.factorize(frame["invocation_id"])[0]
    session = pd.factorize(frame["session_id"])[0]
    order = np.lexsort((frame["seq"].to_numpy(), session, invocation))
    return frame.iloc[order]


def tuples(series: pd.Series) -> pd.Series:
    """The tuples of ``series``, with ``()`` where a value is missing (or not a tuple)."""
    values = series.to_numpy(dtype=object)
    out = np.empty(len(values), dtype=object)
    out[:] = [v if isinstance(v, tuple) else () for v in values]
    return pd.Series(out, index=series.index, dtype=object)


def plain_value(value: Any) -> Any:
    """``value`` as plain Python for JSON-bound output: missing markers (NaN, NaT, NA) become
    None, NumPy scalars Python ones, NumPy times pandas ones."""
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value)
    elif isinstance(value, np.timedelta64):
        value = pd.Timedelta(value)
    if value is None or value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def plain_values(series: pd.Series) -> list[Any]:
    """The values of ``series`` as plain Python objects; NaN, NaT and NA become None."""
    values = series.to_numpy(dtype=object, copy=True)
    values[pd.isna(values)] = None
    if series.dtype == object:  # an object column may hold NumPy scalars
        return [plain_value(value) for value in values]
    return list(values)


def plain_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per row of ``frame`` (column → :func:`plain_values` value), built column-wise."""
    names = list(frame.columns)
    columns = [plain_values(frame[name]) for name in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
