"""The rows an event's content and actions give: calls, responses, state writes and text.

:func:`check_part_shapes` and :func:`check_calls` reject records whose parts cannot give
rows. Each builder takes the flattened parts (or deltas) of a chunk of records, with
``owner`` the record each item belongs to, and keeps only the items of records that were not
rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.frames import StateScope, text_array
from incidentkit.sources.adk_columns import (
    NONE,
    NOT_NONE,
    Bools,
    Ints,
    Reasons,
    Records,
    explode,
    mask,
    not_of,
    pluck,
)
from incidentkit.sources.base import canonical_json

REMOVED = "__ADK_SENTINEL_REMOVED__"
"""How ADK Java writes a deleted state key in ``stateDelta`` (JSON null means the same)."""
_SCOPES = {
    f"{scope.value}:": scope.value for scope in (StateScope.APP, StateScope.USER, StateScope.TEMP)
}
_SESSION = StateScope.SESSION.value


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


def check_calls(
    calls: list[Any], responses: list[Any], owner: Ints, part_no: Ints, reasons: Reasons
) -> None:
    """Flag records with a function call/response that lacks its ``name`` (the tool it
    names) or has ``args``/``response`` or ``id`` of the wrong type.

    An absent ``args``/``response`` is legal (genai marks both optional and ADK Python's JSON
    drops None fields), and so is an absent ``id``: Firestore-origin events carry none, and
    their calls pair with responses by name and order instead.
    """
    for kind, values, payload in (
        ("functionCall", calls, "args"),
        ("functionResponse", responses, "response"),
    ):
        _check_fields(kind, values, payload, owner, part_no, reasons)


def _check_fields(
    kind: str, values: list[Any], payload: str, owner: Ints, part_no: Ints, reasons: Reasons
) -> None:
    """Flag ``kind`` parts without a text ``name``, or with a non-object ``payload`` or a
    non-text ``id`` (records whose ``kind`` is not an object are flagged already)."""
    at = np.flatnonzero(mask(values, NOT_NONE))
    if not len(at):
        return
    found = [values[i] for i in at]
    names = pluck(found, ("name",))
    if None in names or "" in names:
        missing = np.flatnonzero(mask(names, lambda v: v is None or v == ""))
        _flag(reasons, owner, part_no, at[missing], f".{kind}.name is missing")
    for field, allowed, what in (
        ("name", (str, NONE), "text"),
        (payload, (dict, NONE), "an object"),
        ("id", (str, NONE), "text"),
    ):
        got = pluck(found, (field,))
        wrong = not_of(got, allowed)
        if wrong is not None:
            rows = np.flatnonzero(wrong)
            shown = [got[i] for i in rows]
            _flag(reasons, owner, part_no, at[rows], f".{kind}.{field} is not {what}", shown)


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
    calls: list[Any], rows: Bools, owner: Ints, part_no: Ints, pos: Ints, lr_ids: list[Any]
) -> pd.DataFrame:
    """One row per functionCall part in ``rows``; long-running when its id is in the event's
    ``longRunningToolIds``."""
    found = [calls[i] for i in np.flatnonzero(rows)]
    ids, args = pluck(found, ("id",)), pluck(found, ("args",))
    owners = owner[rows]
    return pd.DataFrame(
        {
            "pos": pos[owners],
            "part_no": part_no[rows],
            "call_id": text_array(ids),
            "name": text_array(pluck(found, ("name",))),
            "args": pd.Series(args, dtype=object),
            "args_key": text_array([canonical_json(a) for a in args]),
            "long_running": [i in lr_ids[o] for i, o in zip(ids, owners, strict=True)],
        }
    )


def responses_frame(
    responses: list[Any], rows: Bools, owner: Ints, part_no: Ints, pos: Ints
) -> pd.DataFrame:
    """One row per functionResponse part in ``rows``."""
    found = [responses[i] for i in np.flatnonzero(rows)]
    return pd.DataFrame(
        {
            "pos": pos[owner[rows]],
            "part_no": part_no[rows],
            "call_id": text_array(pluck(found, ("id",))),
            "name": text_array(pluck(found, ("name",))),
            "response": pd.Series(pluck(found, ("response",)), dtype=object),
        }
    )


def state_writes_frame(deltas: list[Any], pos: Ints, keep: Bools) -> pd.DataFrame:
    """One row per stateDelta key; the Java sentinel or a JSON null marks a removal."""
    kept = [d if ok else None for d, ok in zip(deltas, keep, strict=True)]
    owner, _, items = explode([list(d.items()) if d else None for d in kept])
    values = [v for _, v in items]
    removed = mask(values, lambda v: v is None or (type(v) is str and v == REMOVED))
    keys = [k for k, _ in items]
    return pd.DataFrame(
        {
            "pos": pos[owner],
            "key": text_array(keys),
            "scope": text_array([_SCOPES.get(k[: k.find(":") + 1], _SESSION) for k in keys]),
            "value": pd.Series(values, dtype=object).where(~removed, None),
            "removed": removed,
        }
    )
