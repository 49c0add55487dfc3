"""Column helpers over decoded JSON records: pluck fields, check types, flatten nested lists.

The normaliser runs these over lists of up to a chunk of records. Each is one C-level pass
where it can be (``map`` with builtins, ``set`` of types); a slow per-value mask is built
only when a check finds something wrong.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import partial
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
NONE = type(None)
IS_TRUE: Callable[[Any], bool] = partial(operator.is_, True)
NOT_NONE: Callable[[Any], bool] = partial(operator.is_not, None)


def pluck(objs: Sequence[Any], keys: tuple[str, ...]) -> list[Any]:
    """The value of the first of ``keys`` that is not null in each dict (None otherwise)."""
    if len(keys) == 1:
        key = keys[0]
        return [o.get(key) if type(o) is dict else None for o in objs]
    if len(keys) == 2:
        a, b = keys
        return [
            (v if (v := o.get(a)) is not None else o.get(b)) if type(o) is dict else None
            for o in objs
        ]
    found, last = pluck(objs, keys[:-1]), keys[-1]
    return [
        v if v is not None else (o.get(last) if type(o) is dict else None)
        for v, o in zip(found, objs, strict=True)
    ]


class Records:
    """Decoded records (dicts, or anything else for rows already rejected) and their keys.

    ``get`` skips keys that no record has, so the many optional fields an event usually
    lacks cost one set lookup instead of one dict lookup per record.
    """

    def __init__(self, objs: Sequence[Any]) -> None:
        self.objs = objs
        self.all_dicts = set(map(type, objs)) <= {dict}
        dicts = objs if self.all_dicts else [o for o in objs if type(o) is dict]
        self.keys: set[str] = set().union(*dicts)

    def __len__(self) -> int:
        return len(self.objs)

    def get(self, keys: tuple[str, ...]) -> list[Any]:
        """Like :func:`pluck`, for the keys some record has."""
        present = tuple(key for key in keys if key in self.keys)
        if not present:
            return [None] * len(self.objs)
        if len(present) == 1 and self.all_dicts:
            key = present[0]
            return [o.get(key) for o in self.objs]
        return pluck(self.objs, present)


def mask(values: Sequence[Any], test: Callable[[Any], Any]) -> Bools:
    """``test`` of each value, as booleans (pass builtins or ``partial``\\ s for speed)."""
    return np.fromiter(map(test, values), dtype=bool, count=len(values))


def not_of(values: Sequence[Any], allowed: tuple[type, ...]) -> Bools | None:
    """Where a value's type is not one of ``allowed``; None when every value's is."""
    kinds = set(map(type, values))
    if kinds <= set(allowed):
        return None
    found = np.empty(len(values), dtype=object)
    found[:] = list(map(type, values))
    ok = np.zeros(len(values), dtype=bool)
    for kind in allowed:
        ok |= found == kind
    return ~ok


class Reasons:
    """The first reason each record of a chunk is unreadable (None while it is fine)."""

    def __init__(self, n: int) -> None:
        self.array = np.full(n, None, dtype=object)

    def flag(self, where: Bools | None, reason: str | Callable[[int], str]) -> None:
        """Give ``reason`` (text, or built from the row number) to fine rows in ``where``."""
        if where is None or not where.any():
            return
        for i in np.flatnonzero(where & ~self.bad):
            self.array[i] = reason if isinstance(reason, str) else reason(int(i))

    def flag_rows(self, rows: Ints, reason: Callable[[int], str]) -> None:
        """Flag records ``rows`` (repeats allowed); ``reason`` gets the position in ``rows``."""
        for pos, row in enumerate(rows):
            if self.array[row] is None:
                self.array[row] = reason(pos)

    @property
    def bad(self) -> Bools:
        found: Bools = self.array != None  # noqa: E711 (elementwise)
        return found


def check(values: list[Any], kind: str, name: str, reasons: Reasons, *, types: bool = True) -> None:
    """Flag values that break ``kind``: "required" text, optional "text", or "bool"
    (``types=False``: their types are known to be right, only a missing one is flagged)."""
    if kind == "required" and (None in values or "" in values):
        reasons.flag(mask(values, lambda v: v is None or v == ""), f"{name} is missing")
    if not types:
        return
    expected = (bool, NONE) if kind == "bool" else (str, NONE)
    word = "true/false" if kind == "bool" else "text"
    reasons.flag(not_of(values, expected), lambda i: f"{name} is not {word}: {values[i]!r}")


def explode(lists: Sequence[Any]) -> tuple[Ints, Ints, list[Any]]:
    """Flatten per-record lists (other values count as empty): owner, index within, item."""
    if not set(map(type, lists)) <= {list}:
        lists = [x if type(x) is list else [] for x in lists]
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    owner = np.repeat(np.arange(len(lists), dtype=np.int64), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    items = list(chain.from_iterable(lists))
    return owner, np.arange(len(owner), dtype=np.int64) - starts, items


def fill(values: list[Any], fallback: list[Any] | None) -> list[Any]:
    """``values`` with nulls taken from ``fallback`` (same length) when there is one."""
    if fallback is None or None not in values:
        return values
    if values.count(None) == len(values):  # a key no record has: the fallback whole
        return fallback
    if fallback.count(None) == len(fallback):  # nothing to take from it
        return values
    return [v if v is not None else f for v, f in zip(values, fallback, strict=True)]
