"""The rows an event's content and actions give: calls, responses, state writes and text.

:func:`check_part_shapes` and :func:`check_calls` reject records whose parts cannot give
rows. Each builder takes the flattened parts (or deltas) of a chunk of records, with
``owner`` the record each item belongs to, and keeps only the items of records that were not
rejected.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from incidentkit.frames import StateScope, text_array
from incidentkit.sources.events.adk_columns import (
    NONE,
    NOT_NONE,
    Bools,
    Ints,
    Reasons,
    Records,
    mask,
    not_of,
    pluck,
)

REMOVED = "__ADK_SENTINEL_REMOVED__"
"""How ADK Java writes a deleted state key in ``stateDelta`` (JSON null means the same)."""
_SCOPES = {
    f"{scope.value}:": scope.value for scope in (StateScope.APP, StateScope.USER, StateScope.TEMP)
}
_SESSION = StateScope.SESSION.value


@dataclass(frozen=True)
class Parts:
    """The function calls (or responses) among a chunk's parts: the record each belongs to,
    its place in the record's parts, and its ``id``, ``name`` and payload (``args`` or
    ``response``)."""

    owner: Ints
    part_no: Ints
    ids: list[Any]
    names: list[Any]
    payloads: list[Any]

    def taken(self, at: Ints) -> Parts:
        """Parts ``at`` (positions in this one)."""
        return Parts(
            self.owner[at],
            self.part_no[at],
            [self.ids[i] for i in at],
            [self.names[i] for i in at],
            [self.payloads[i] for i in at],
        )


def check_part_shapes(
    items: Records,
    calls: list[Any],
    responses: list[Any],
    owner: Ints,
    part_no: Ints,
    reasons: Reasons,
) -> None:
    """Flag records with a part that is not an object, a ``text`` that is not text, or a
    function call/response that is not an object.

    ``calls``/``responses`` hold each part's ``functionCall``/``functionResponse`` (None when
    it has none). Typed decoding (:mod:`.adk_typed`) has checked all this already.
    """
    shapes: list[tuple[str, Sequence[Any], tuple[type, ...], str]] = [
        ("", items.objs, (dict,), "an object"),
        (".functionCall", calls, (dict, NONE), "an object"),
        (".functionResponse", responses, (dict, NONE), "an object"),
        (".text", items.get(("text",)), (str, NONE), "text"),
    ]
    for name, values, allowed, what in shapes:
        wrong = not_of(values, allowed)
        if wrong is not None:
            _flag(reasons, owner, part_no, np.flatnonzero(wrong), f"{name} is not {what}")


def check_calls(calls: Parts, responses: Parts, reasons: Reasons) -> None:
    """Flag records with a function call/response that lacks its ``name`` (the tool it
    names) or has ``args``/``response`` or ``id`` of the wrong type.

    An absent ``args``/``response`` is legal (genai marks both optional and ADK Python's JSON
    drops None fields), and so is an absent ``id``: Firestore-origin events carry none, and
    their calls pair with responses by name and order instead.
    """
    for kind, parts, payload in (
        ("functionCall", calls, "args"),
        ("functionResponse", responses, "response"),
    ):
        _check_fields(kind, parts, payload, reasons)


def _check_fields(kind: str, parts: Parts, payload: str, reasons: Reasons) -> None:
    """Flag ``kind`` parts without a text ``name``, or with a non-object ``payload`` or a
    non-text ``id``."""
    names = parts.names
    if None in names or "" in names:
        missing = np.flatnonzero(mask(names, lambda v: v is None or v == ""))
        _flag(reasons, parts.owner, parts.part_no, missing, f".{kind}.name is missing")
    for field, got, allowed, what in (
        ("name", names, (str, NONE), "text"),
        (payload, parts.payloads, (dict, NONE), "an object"),
        ("id", parts.ids, (str, NONE), "text"),
    ):
        wrong = not_of(got, allowed)
        if wrong is not None:
            rows = np.flatnonzero(wrong)
            shown = [got[i] for i in rows]
            what = f".{kind}.{field} is not {what}"
            _flag(reasons, parts.owner, parts.part_no, rows, what, shown)


def _flag(
    reasons: Reasons,
    owner: Ints,
    part_no: Ints,
    at: Ints,
    what: str,
    shown: list[Any] | None = None,
) -> None:
    """Flag the records owning parts ``at``: ``what`` is wrong with each part (followed by
    ``shown[k]``, the wrong value of part ``at[k]``, when given)."""

    def reason(k: int) -> str:
        value = "" if shown is None else f": {shown[k]!r}"
        return f"content.parts[{part_no[at[k]]}]{what}{value}"

    reasons.flag_rows(owner[at], reason)


def function_parts(raw: list[Any], owner: Ints, part_no: Ints, payload: str) -> Parts:
    """The parts whose function call (or response), ``raw`` by part, is an object."""
    at = np.flatnonzero(mask(raw, lambda v: type(v) is dict))
    found = [raw[i] for i in at]
    return Parts(
        owner[at],
        part_no[at],
        pluck(found, ("id",)),
        pluck(found, ("name",)),
        pluck(found, (payload,)),
    )


def texts(values: list[Any], thoughts: list[Any], owner: Ints, n: int) -> Any:
    """Each record's non-thought text parts (``values``, and ``thoughts`` their ``thought``
    flags, by part), joined (None when it has none)."""
    out = np.full(n, None, dtype=object)
    keep = mask(values, bool) & ~mask(thoughts, bool)
    wrong = not_of(values, (str, type(None)))
    if wrong is not None:
        keep &= ~wrong
    series = pd.Series(values, dtype=object)[keep]
    series.index = owner[keep]
    single = ~series.index.duplicated(keep=False)
    out[series.index[single]] = series[single].to_numpy()
    if not single.all():
        joined = series[~single].groupby(level=0).agg("".join)
        out[joined.index] = joined.to_numpy()
    return out


def calls_frame(
    calls: Parts, rows: Bools | None, pos: Ints, lr_ids: list[tuple[str, ...]]
) -> pd.DataFrame:
    """One row per function call among ``calls`` that ``rows`` keeps (None: all);
    long-running when its id is in the event's ``longRunningToolIds``."""
    calls = calls if rows is None else calls.taken(np.flatnonzero(rows))
    long_running = np.zeros(len(calls.ids), dtype=bool)
    if any(lr_ids):  # most chunks pause on nothing
        long_running[:] = [i in lr_ids[o] for i, o in zip(calls.ids, calls.owner, strict=True)]
    args_keys = text_array(list(map(args_key, calls.payloads)))
    return _part_rows(calls, pos, "args", args_key=args_keys, long_running=long_running)


def responses_frame(responses: Parts, rows: Bools | None, pos: Ints) -> pd.DataFrame:
    """One row per function response among ``responses`` that ``rows`` keeps (None: all)."""
    responses = responses if rows is None else responses.taken(np.flatnonzero(rows))
    return _part_rows(responses, pos, "response")


def _part_rows(parts: Parts, pos: Ints, payload: str, **more: object) -> pd.DataFrame:
    """One row per part: its record's ``pos``, its ``part_no``, ``call_id`` and ``name``, its
    payload in the column ``payload``, then the columns ``more``."""
    return pd.DataFrame(
        {
            "pos": pos[parts.owner],
            "part_no": parts.part_no,
            "call_id": text_array(parts.ids),
            "name": text_array(parts.names),
            payload: _objects(parts.payloads),
            **more,
        }
    )


def state_writes_frame(deltas: list[Any], pos: Ints, keep: Bools) -> pd.DataFrame:
    """One row per stateDelta key of the kept records; the Java sentinel or a JSON null marks
    a removal."""
    written = np.flatnonzero(mask(deltas, bool) & keep)  # an empty delta writes nothing
    objs = [deltas[i] for i in written]
    owner = np.repeat(written, np.fromiter(map(len, objs), dtype=np.int64, count=len(objs)))
    keys = pa.array(list(chain.from_iterable(objs)), type=pa.large_string())
    values = list(chain.from_iterable(map(dict.values, objs)))
    nulls = ~mask(values, NOT_NONE) if None in values else np.zeros(len(values), dtype=bool)
    removed = nulls | np.fromiter(
        map(operator.eq, values, repeat(REMOVED)), dtype=bool, count=len(values)
    )
    scope = np.full(len(keys), _SESSION, dtype=object)
    for prefix, name in _SCOPES.items():  # the text up to a key's first colon names its scope
        scope[pc.starts_with(keys, prefix).to_numpy(zero_copy_only=False)] = name
    value = _objects(values)
    if removed.any():
        value[removed] = None
    return pd.DataFrame(
        {
            "pos": pos[owner],
            "key": text_array(keys),
            "scope": text_array(scope),
            "value": value,
            "removed": removed,
        }
    )


def _objects(values: list[Any]) -> pd.Series:
    """``values`` as an object column, each value as it is (a list stays one value)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, dtype=object)


_ARGS_KEY = msgspec.json.Encoder(order="sorted")


def args_key(args: Any) -> str:
    """Canonical JSON of a call's arguments: keys sorted, no spaces (equal arguments give equal
    text). msgspec writes it (50k calls: 0.02 s; Python's json 0.11 s); floats take its form
    (``1e16``, ``0.00001``), which only this column holds."""
    return _ARGS_KEY.encode(args).decode()
