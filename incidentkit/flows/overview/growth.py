"""Slow death: which classes grow from one class histogram to the next, and what holds them.

Heap that only grows points at something retained per tenant, session or invocation. Two or
more ``jcmd <pid> GC.class_histogram`` outputs an hour apart show which classes grow.

The application's own classes are what to read first (:func:`leaking_classes`): the JDK's
(``java.``, ``javax.``, ``jdk.``, ``sun.``, ``com.sun.``, arrays) only carry them, and library
classes (Netty, Jackson, ADK, ...) rank below the application's. Each is paired with the JDK
containers that grew by the same count, within :data:`SAME_COUNT` (a ``ConcurrentHashMap$Node``
per entry of a map): "a map of ``OrderSnapshot``: +19,000 entries".

A usual culprit is named only when its own classes are in the histograms (:func:`culprits`):
ADK's runners (``com.google.adk.runner.``), agent trees (``com.google.adk.agents.``),
per-invocation contexts (``InvocationContext``, ``ToolContext``), and the in-memory session
service (``com.google.adk.sessions.InMemorySessionService`` present, its sessions and events
growing). An application class that grows by the same count as such an ADK class takes its
culprit; map nodes and event content take the first culprit named.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, cast

import numpy as np
import pandas as pd

from incidentkit.flows._frames import empty_view
from incidentkit.flows.latency_cliff.stacks import LIBRARY_PREFIXES
from incidentkit.frames import BOOL, FLOAT, INT, NINT, OBJ, STR, cast_columns, require_columns


class Culprit(enum.StrEnum):
    """What usually retains the classes that grow."""

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
        r"|^com\.google\.adk\.tools\.ToolContext\b",
    ),
    (Culprit.SESSIONS, r"^com\.google\.adk\.(?:sessions|events)\."),
    (Culprit.RUNNERS, r"^com\.google\.adk\.(?:runner|agents)\."),
)
"""Which of ADK's own classes name which culprit."""
_HINTS: Mapping[str, str] = {
    Culprit.INVOCATIONS.value: r"(?:^|[.$])\w*Invocation\w*(?:$|\$)",
    Culprit.SESSIONS.value: r"(?:^|[.$])\w*Session\w*(?:$|\$)",
    Culprit.RUNNERS.value: r"(?:^|[.$])\w*(?:Runner\w*|Agent)(?:$|\$)",
}
"""When an application class grew by the same count as ADK classes of two culprits, the one
its name hints at (``RunnerCache$Entry``: runners) wins; a name alone names nothing."""
IN_MEMORY_SESSIONS = "com.google.adk.sessions.InMemorySessionService"
"""The in-memory session service is named only when this class is in a histogram."""
SAME_COUNT = 0.05
"""Two classes grew by the same count when the counts differ by at most this share (5 %)."""
JDK_PREFIXES = ("java.", "javax.", "jdk.", "sun.", "com.sun.", "[")
"""The JDK's classes and every array: they carry the application's objects, never are them."""
CONTAINERS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "java.util.HashMap$Node",
            "java.util.HashMap$TreeNode",
            "java.util.LinkedHashMap$Entry",
            "java.util.TreeMap$Entry",
            "java.util.WeakHashMap$Entry",
            "java.util.Hashtable$Entry",
            "java.util.concurrent.ConcurrentHashMap$Node",
            "java.util.concurrent.ConcurrentHashMap$TreeNode",
            "java.util.concurrent.ConcurrentSkipListMap$Node",
        ),
        "map",
    ),
    **dict.fromkeys(
        (
            "java.util.concurrent.ConcurrentLinkedQueue$Node",
            "java.util.concurrent.ConcurrentLinkedDeque$Node",
            "java.util.concurrent.LinkedBlockingQueue$Node",
            "java.util.concurrent.LinkedBlockingDeque$Node",
            "java.util.concurrent.LinkedTransferQueue$Node",
        ),
        "queue",
    ),
    "java.util.LinkedList$Node": "list",
}
"""JDK container classes with one instance per element held, and what they make."""
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
    out["culprit"] = culprits(
        out["class"], growth=out["instances_growth"], present=class_histograms["class"]
    )
    return cast_columns(out, COLUMNS, what="the growing classes")


def culprits(
    classes: pd.Series,
    *,
    growth: pd.Series | None = None,
    present: Iterable[str] | None = None,
) -> pd.Series:
    """The usual culprit each class names (:class:`Culprit` values; NaN when none), for classes
    ordered largest growth first. Only ADK's own classes name one, and the in-memory session
    service only when ``present`` (every class of the histograms; else ``classes``) holds
    :data:`IN_MEMORY_SESSIONS`. With ``growth`` (instances gained, aligned with ``classes``),
    an application class that grew by the same count as a named ADK class takes its culprit;
    map nodes and event content take the first culprit named."""
    names = classes.astype(STR)
    seen = set(names if present is None else present)
    named: pd.Series = pd.Series(None, index=classes.index, dtype=object)
    for culprit, pattern in _SIGNS:
        if culprit is Culprit.SESSIONS and IN_MEMORY_SESSIONS not in seen:
            continue
        hit = named.isna() & names.str.contains(pattern, regex=True)
        named = named.mask(hit, culprit.value)
    if growth is not None and named.notna().any():
        named = named.fillna(_paired(names, growth, named))
    first = named.dropna()
    if len(first):
        companions = named.isna() & names.str.contains(_COMPANIONS, regex=True)
        named = named.mask(companions, first.iloc[0])
    return named.astype(STR)


def _paired(names: pd.Series, growth: pd.Series, named: pd.Series) -> pd.Series:
    """For each application class, the culprit of a named class that grew by the same count
    (:data:`SAME_COUNT`): the one its name hints at (:data:`_HINTS`), else the first; NaN when
    none did."""
    own = ~names.str.startswith(JDK_PREFIXES) & ~names.str.startswith(LIBRARY_PREFIXES)
    keys = growth.loc[named.notna()].astype(float)
    out = pd.Series(None, index=names.index, dtype=object)
    for index in names.index[own & named.isna()]:
        grew = float(growth.loc[index])
        same = named.loc[keys.index[(keys - grew).abs().le(SAME_COUNT * max(grew, 1.0))]]
        hinted = [c for c in same if re.search(_HINTS[c], str(names.loc[index]))]
        if len(same):
            out.loc[index] = hinted[0] if hinted else same.iloc[0]
    return out


LEAK_COLUMNS: Mapping[str, str] = {
    "class": STR,
    "library": BOOL,
    "instances_growth": INT,
    "bytes_growth": INT,
    "first_instances": INT,
    "last_instances": INT,
    "holds": STR,
    "containers": OBJ,
    "container_growth": NINT,
    "kin": OBJ,
    "culprit": STR,
    "text": STR,
}
"""One row per application (then library) class that grows, the most instances gained first:
``holds`` what its JDK ``containers`` make (``map``, ``queue``, ``list``; missing when none grew
by the same count), ``container_growth`` the first container's, ``kin`` the other classes that
grew by the same count with the same containers (folded into this row), ``text`` the line for
people: "a map of com.acme.OrderSnapshot: +19,000 entries (ConcurrentHashMap$Node +19,019)"."""


def leaking_classes(growing: pd.DataFrame, *, same: float = SAME_COUNT) -> pd.DataFrame:
    """The application's own classes among :func:`growing_classes`, then the libraries',
    ranked by instances gained, each paired with the JDK containers that grew by the same
    count (within ``same``) (:data:`LEAK_COLUMNS`)."""
    names = growing["class"].astype(STR)
    own = growing.loc[~names.str.startswith(JDK_PREFIXES)]
    if own.empty:
        return empty_view(LEAK_COLUMNS)
    boxes = growing.loc[names.isin(list(CONTAINERS))]
    own = own.assign(library=own["class"].astype(STR).str.startswith(LIBRARY_PREFIXES))
    own = own.sort_values(
        ["library", "instances_growth", "bytes_growth", "class"],
        ascending=[True, False, False, True],
        kind="stable",
    )
    rows: list[dict[str, Any]] = []
    for row in own.to_dict("records"):
        grew = int(row["instances_growth"])
        near = (boxes["instances_growth"] - grew).abs().le(same * grew)
        held = boxes.loc[near].sort_values("instances_growth", ascending=False, kind="stable")
        containers = tuple(held["class"].astype(str))
        lead = next(
            (
                r
                for r in rows
                if r["library"] == row["library"]
                and r["containers"] == containers
                and abs(int(r["instances_growth"]) - grew) <= same * grew
            ),
            None,
        )
        if lead is not None:
            lead["kin"] = (*lead["kin"], row["class"])
            continue
        rows.append(
            {
                **{col: row[col] for col in ("class", "library", "instances_growth")},
                **{col: row[col] for col in ("bytes_growth", "first_instances", "last_instances")},
                "holds": CONTAINERS[containers[0]] if containers else None,
                "containers": containers,
                "container_growth": int(held["instances_growth"].iloc[0]) if containers else None,
                "kin": (),
                "culprit": row.get("culprit"),
            }
        )
    out = pd.DataFrame(rows)
    out["text"] = [_leak_text(row) for row in out.to_dict("records")]
    return cast_columns(out, LEAK_COLUMNS, what="leaking classes")


def _leak_text(row: Mapping[Hashable, Any]) -> str:
    """One leaking class for people (see :data:`LEAK_COLUMNS`)."""
    grew = int(row["instances_growth"])
    kin = f"; with {', '.join(row['kin'])}" if row["kin"] else ""
    containers: tuple[str, ...] = row["containers"]
    if not containers:
        return f"{row['class']}: +{grew:,} instances ({int(row['bytes_growth']):+,} bytes){kin}"
    first = f"{_simple(containers[0])} +{int(row['container_growth']):,}"
    boxes = ", ".join([first, *map(_simple, containers[1:])])
    return f"a {row['holds']} of {row['class']}: +{grew:,} entries ({boxes}){kin}"


def _simple(name: str) -> str:
    """``ConcurrentHashMap$Node`` of ``java.util.concurrent.ConcurrentHashMap$Node``."""
    return name.rsplit(".", 1)[-1]


def growth_headline(growing: pd.DataFrame) -> str | None:
    """What grows, in one phrase for the triage card: the first leaking application class
    (:func:`leaking_classes`), with its culprit when one is named; else the first class that
    names a culprit (ADK's own); None when neither."""
    leaks = leaking_classes(growing)
    if len(leaks):
        first = leaks.iloc[0]
        culprit = first["culprit"] if isinstance(first["culprit"], str) else None
        return str(first["text"]) + (f", pointing at {culprit}" if culprit else "")
    named = growing.loc[growing["culprit"].notna()]
    if len(named):
        first = named.iloc[0]
        return f"{first['class']} and its kin point at {first['culprit']}"
    return None


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
