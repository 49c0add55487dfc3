"""Slow death in a JFR recording: heap used after GC that keeps growing, and the classes of the
old-object samples (objects allocated during the recording and still alive at its end: the
leak candidates), named after the class that allocated them and its usual culprit.

Heap used *after* each GC is what survives: in a healthy JVM it stays level; in a leaking one
it climbs from GC to GC. The heap before a GC only says how much garbage there was. A trend
needs :data:`MIN_GCS` GCs: with fewer, heap after GC says nothing either way (``judged`` is
false, and neither "grows" nor "level" is said).

An old-object sample carries its allocation stack only when the recording asked for it
(``settings=profile``, or ``jdk.OldObjectSample#stackTrace=true``); the default settings
(``default.jfc``, what ``jcmd <pid> JFR.start`` uses) record none. Then ``stack`` is false,
``allocated_in`` and ``holder`` are missing, and the texts say so, never naming a site.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import empty_view
from incidentkit.flows.latency_cliff.stacks import (
    class_of,
    first_application_frame,
    is_application,
)
from incidentkit.flows.overview.growth import culprits
from incidentkit.frames import BOOL, FLOAT, INT, STR, TS, cast_columns

MIN_GCS = 3
"""Heap-after-GC points needed to call a trend."""
RISE = 0.1
"""The heap after the last GC must be this much (10 %) above the first one's."""

HEAP_COLUMNS: Mapping[str, str] = {
    "recording": STR,
    "gcs": INT,
    "first": TS,
    "last": TS,
    "first_after_bytes": INT,
    "last_after_bytes": INT,
    "growth_bytes": INT,
    "bytes_per_hour": FLOAT,
    "rising_share": FLOAT,
    "judged": BOOL,
    "growing": BOOL,
}
"""One row per recording: heap used after its first and last GC, the growth, the share of GCs
after which more was used than after the one before, whether there were GCs enough to judge
(:data:`MIN_GCS`), and whether it grows."""

LEAK_COLUMNS: Mapping[str, str] = {
    "class": STR,
    "allocated_in": STR,
    "holder": STR,
    "stack": BOOL,
    "samples": INT,
    "first_allocated_at": TS,
    "last_allocated_at": TS,
    "culprit": STR,
}
"""One row per (class, allocation site) of the old-object samples, most samples first:
``allocated_in`` is the first application frame of the allocation stack (else its top frame),
``holder`` that frame's class (``RunnerCache$Entry`` for a ``[B`` allocated in its
constructor), ``stack`` whether the samples carry an allocation stack at all (the default
settings record none: then both are missing), ``culprit`` the usual culprit the holder (else
the class) names."""


def heap_after_gc(jfr_heap: pd.DataFrame) -> pd.DataFrame:
    """Heap used after GC per recording (:data:`HEAP_COLUMNS`); ``growing`` when there are
    :data:`MIN_GCS` GCs or more, the last is :data:`RISE` above the first and most steps rise."""
    after = jfr_heap.loc[jfr_heap["when"].eq("after")].sort_values(["recording", "ts"])
    if after.empty:
        return empty_view(HEAP_COLUMNS)
    rises = after.groupby("recording")["heap_used"].diff().gt(0)
    grouped = after.assign(_rises=rises).groupby("recording", sort=False)
    out = grouped.agg(
        gcs=("heap_used", "size"),
        first=("ts", "first"),
        last=("ts", "last"),
        first_after_bytes=("heap_used", "first"),
        last_after_bytes=("heap_used", "last"),
        rising=("_rises", "sum"),
    ).reset_index()
    out["growth_bytes"] = out["last_after_bytes"] - out["first_after_bytes"]
    hours = (out["last"] - out["first"]).dt.total_seconds() / 3600
    out["bytes_per_hour"] = (out["growth_bytes"] / hours.where(hours > 0)).astype(FLOAT)
    out["rising_share"] = out["rising"] / np.maximum(out["gcs"] - 1, 1)
    out["judged"] = out["gcs"].ge(MIN_GCS)
    out["growing"] = (
        out["judged"]
        & out["last_after_bytes"].gt(out["first_after_bytes"] * (1 + RISE))
        & out["rising_share"].ge(0.5)
    )
    return cast_columns(out, HEAP_COLUMNS, what="heap after GC")


def heap_text(trend: pd.DataFrame) -> str:
    """Heap after GC in words, from :func:`heap_after_gc`: grows, stays level, or (fewer than
    :data:`MIN_GCS` GCs) cannot be judged."""
    if trend.empty:
        return "no heap summary after a GC in the recording: heap after GC is not judged"
    growing = trend.loc[trend["growing"]]
    if len(growing):
        top = growing.iloc[0]
        return (
            f"heap used after GC grows from {int(top['first_after_bytes']):,} to "
            f"{int(top['last_after_bytes']):,} bytes over {int(top['gcs'])} GCs"
        )
    judged = trend.loc[trend["judged"]]
    if len(judged):
        return f"heap used after GC does not grow over {int(judged['gcs'].max())} GCs"
    gcs = int(trend["gcs"].max())
    return (
        f"heap after GC is not judged: {gcs} GC(s) in the recording, {MIN_GCS} needed "
        "(one GC says nothing either way)"
    )


def old_object_text(leaks: pd.DataFrame) -> str | None:
    """The leading old-object class in words, from :func:`leak_candidates`: where it was
    allocated, or that the recording kept no allocation stack; None without samples."""
    if leaks.empty:
        return None
    first = leaks.iloc[0]
    what = f"{first['class']} ({int(first['samples'])} of {int(leaks['samples'].sum())} samples)"
    if not first["stack"]:
        return (
            f"{what}; no allocation stack was recorded (the default settings keep none: "
            "record with settings=profile to see where they were allocated)"
        )
    where = first["holder"] if isinstance(first["holder"], str) else first["allocated_in"]
    named = f", pointing at {first['culprit']}" if isinstance(first["culprit"], str) else ""
    return f"{what} allocated in {where}{named}"


def leak_candidates(jfr_old_objects: pd.DataFrame) -> pd.DataFrame:
    """The old-object samples by class and allocation site (:data:`LEAK_COLUMNS`)."""
    if jfr_old_objects.empty:
        return empty_view(LEAK_COLUMNS)
    frames = jfr_old_objects["frames"]
    site = frames.map(first_application_frame)
    site = site.fillna(jfr_old_objects["top_frame"])
    holder = site.map(lambda f: class_of(f) if isinstance(f, str) and is_application(f) else None)
    keyed = jfr_old_objects.assign(
        allocated_in=site,
        holder=holder,
        stack=frames.map(len).gt(0),
        _site=site.fillna(""),
        _holder=holder.fillna(""),
    )
    out = (
        keyed.groupby(["class", "_site", "_holder"], sort=False)
        .agg(
            allocated_in=("allocated_in", "first"),
            holder=("holder", "first"),
            stack=("stack", "any"),
            samples=("ts", "size"),
            first_allocated_at=("allocated_at", "min"),
            last_allocated_at=("allocated_at", "max"),
        )
        .reset_index()
        .sort_values(["samples", "class"], ascending=[False, True], kind="stable")
        .reset_index(drop=True)
    )
    out["culprit"] = culprits(out["holder"].fillna(out["class"]))
    return cast_columns(out, LEAK_COLUMNS, what="leak candidates")
