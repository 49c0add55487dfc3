"""Slow death: which classes grow from one class histogram to the next, and the usual culprit.

Heap that only grows points at something retained per tenant, session or invocation. Two or
more ``jcmd <pid> GC.class_histogram`` outputs an hour apart show which classes grow; the
usual culprits are runners or agent trees held in unbounded maps, the in-memory session
service in a production profile, and per-invocation maps not cleaned on the error path.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import cast

import numpy as np
import pandas as pd

from incidentkit.frames import FLOAT, INT, STR, cast_columns, require_columns


class Culprit(enum.StrEnum):
    """What usually retains the classes that grow (seed 003, "Slow death")."""

    RUNNERS = "runners or agent trees held in an unbounded map"
    SESSIONS = "the in-memory session service in a production profile"
    INVOCATIONS = "per-invocation maps not cleaned on the error path"


ADVICE = (
    "Bound every cache and give it a metric: a maximum size and an expiry on every map that "
    "holds runners, agents, sessions or per-invocation state, and its size and evictions on a "
    "dashboard. Build one Runner per app (not per session or tenant); use a database-backed "
    "session service in production, never InMemorySessionService; remove per-invocation entries "
    "in a finally block, so the error path cleans up too."
)
"""What to do about a class that grows, whichever culprit holds it."""

_SIGNS: tuple[tuple[Culprit, str], ...] = (  # first match wins: InvocationContext is in agents
    (
        Culprit.INVOCATIONS,
        r"^com\.google\.adk\.agents\.(?:InvocationContext|CallbackContext|ReadonlyContext)\b"
        r"|^com\.google\.adk\.tools\.ToolContext\b|(?:^|[.$])\w*Invocation\w*(?:$|\$)",
    ),
    (
        Culprit.SESSIONS,
        r"^com\.google\.adk\.(?:sessions|events)\.|(?:^|[.$])\w*Session\w*(?:$|\$)",
    ),
    (
        Culprit.RUNNERS,
        r"^com\.google\.adk\.(?:runner|agents)\.|(?:^|[.$])\w*Runner\w*(?:$|\$)"
        r"|(?:^|[.$])\w*Agent(?:$|\$)",
    ),
)
"""Which classes name which culprit: ADK's own classes, and an application's by their names
(``com.example.agent.RunnerCache$Entry``, ``SupportAgent``, ``SessionStore$Node``)."""
_COMPANIONS = (
    r"^\[?L?java\.util\.(?:concurrent\.ConcurrentHashMap|HashMap|LinkedHashMap|TreeMap)"
    r"(?:\$\w*(?:Node|Entry))?;?$"
    r"|^com\.google\.genai\.types\.(?:Content|Part)\b"
)
"""Classes that grow with whatever holds them (maps, their nodes and tables, event content):
they are named after the culprit of the largest growing class that names one, if any."""

COLUMNS: Mapping[str, str] = {
    "class": STR,
    "first_instances": INT,
    "last_instances": INT,
    "instances_growth": INT,
    "first_bytes": INT,
    "last_bytes": INT,
    "bytes_growth": INT,
    "bytes_per_hour": FLOAT,
    "histograms": INT,
    "culprit": STR,
}
"""The columns of :func:`growing_classes`, in order, with their dtypes."""
_NEEDED = ("histogram", "taken_at", "class", "instances", "bytes")


def growing_classes(class_histograms: pd.DataFrame, *, monotonic: bool = True) -> pd.DataFrame:
    """The classes whose instances and bytes both grow from the first histogram to the last.

    Histograms are ordered by ``taken_at`` (by their order in the frame when a time is
    unknown). A class missing from a histogram had no instance then (a new class grows from
    0); rows of one class in one histogram (the same name from two class loaders) are summed.
    With ``monotonic`` (the default) neither count may fall between two histograms on the way:
    a class that grew then shrank is no leak. Ranked by byte growth, largest first;
    ``bytes_per_hour`` is NaN when the times are unknown. Empty (with every column) for fewer
    than two histograms: :func:`why_no_growth` says why.
    """
    require_columns(class_histograms, _NEEDED, what="the class_histograms frame")
    order = _order(class_histograms)
    if len(order) < 2:
        return _empty()
    step = class_histograms["histogram"].map(pd.Series(range(len(order)), index=order.index))
    wide = class_histograms.assign(step=step).pivot_table(
        index="class",
        columns="step",
        values=["instances", "bytes"],
        aggfunc="sum",
        fill_value=0,
        observed=True,
    )
    steps = range(len(order))
    counts, nbytes = (
        cast(pd.DataFrame, wide[value]).reindex(columns=steps, fill_value=0).to_numpy("int64")
        for value in ("instances", "bytes")
    )
    names = wide.index.to_numpy()
    grows = (counts[:, -1] > counts[:, 0]) & (nbytes[:, -1] > nbytes[:, 0])
    if monotonic:
        steady = (np.diff(counts, axis=1) >= 0) & (np.diff(nbytes, axis=1) >= 0)
        grows &= steady.all(axis=1)
    hours = (order["taken_at"].iloc[-1] - order["taken_at"].iloc[0]) / pd.Timedelta(hours=1)
    hours = float(hours) if pd.notna(hours) and hours > 0 else float("nan")
    out = pd.DataFrame(
        {
            "class": names[grows],
            "first_instances": counts[grows, 0],
            "last_instances": counts[grows, -1],
            "instances_growth": counts[grows, -1] - counts[grows, 0],
            "first_bytes": nbytes[grows, 0],
            "last_bytes": nbytes[grows, -1],
            "bytes_growth": nbytes[grows, -1] - nbytes[grows, 0],
            "histograms": (counts[grows] > 0).sum(axis=1),
        }
    )
    out["bytes_per_hour"] = out["bytes_growth"] / hours
    out = out.sort_values(["bytes_growth", "class"], ascending=[False, True], kind="stable")
    out["culprit"] = culprits(out["class"])
    return cast_columns(out, COLUMNS, what="the growing classes")


def culprits(classes: pd.Series) -> pd.Series:
    """The usual culprit each class names (:class:`Culprit` values; NaN when none), for classes
    ordered largest growth first: map nodes and event content take the first culprit named."""
    names = classes.astype(STR)
    named: pd.Series = pd.Series(None, index=classes.index, dtype=object)
    for culprit, pattern in _SIGNS:
        hit = named.isna() & names.str.contains(pattern, regex=True)
        named = named.mask(hit, culprit.value)
    first = named.dropna()
    if len(first):
        companions = named.isna() & names.str.contains(_COMPANIONS, regex=True)
        named = named.mask(companions, first.iloc[0])
    return named.astype(STR)


def why_no_growth(class_histograms: pd.DataFrame) -> str | None:
    """Why :func:`growing_classes` cannot compare (fewer than two histograms), for people; None
    when it can."""
    require_columns(class_histograms, _NEEDED, what="the class_histograms frame")
    order = _order(class_histograms)
    if len(order) >= 2:
        return None
    capture = (
        "take jcmd <pid> GC.class_histogram > histo-$(date -u +%Y-%m-%dT%H:%M:%SZ).txt twice, "
        "an hour apart, and list both in [histograms]"
    )
    if not len(order):
        return f"no class histogram in the evidence: {capture}"
    return f"only one class histogram ({order.index[0]}): growth needs two; {capture}"


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per histogram (index: its name) with its time, in time order; when a time is
    unknown, in the frame's order."""
    first = frame.drop_duplicates("histogram")[["histogram", "taken_at"]].set_index("histogram")
    if first["taken_at"].notna().all():
        return first.sort_values("taken_at", kind="stable")
    return first


def _empty() -> pd.DataFrame:
    return pd.DataFrame({col: pd.Series([], dtype=dtype) for col, dtype in COLUMNS.items()})
