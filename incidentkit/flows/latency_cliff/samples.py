"""Stuck threads and lock contention from a JFR recording.

A thread is **stuck** in a recording when every native-method sample of it shows the same
state and top frames, it was sampled at least :data:`MIN_SAMPLES` times over at least
:data:`COVERAGE` of the recording's sampled time, and it was never sampled running (no
execution sample, no native sample in ``Thread.yield``/``onSpinWait``, which return at once): it
sat in one native call, such as a socket read, the whole time.
Those threads corroborate the stuck threads of the thread dumps (the same thread name), or are
the only evidence when there are no dumps (:func:`with_sampled`).

**Contention** is time threads spent blocked entering a ``synchronized`` monitor
(``jdk.JavaMonitorEnter``) or parked acquiring a ``java.util.concurrent`` lock
(``jdk.ThreadPark`` under ``AbstractQueuedSynchronizer.acquire``), per monitor class; parks of
pool workers waiting for work and condition waits are not contention.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import pandas as pd

from incidentkit.flows._frames import as_columns, empty_view
from incidentkit.flows.latency_cliff.stacks import (
    BOTH,
    DUMPS,
    JFR,
    TOP_FRAMES,
    first_application_frame,
)
from incidentkit.frames import FLOAT, INT, OBJ, STR, TS

SPIN_FRAMES = ("java.lang.Thread.yield", "java.lang.Thread.onSpinWait")
"""Native methods that return at once: a thread sampled in one is running, not sitting in a
native call (``Thread.yield0`` of JDK 21+ included)."""
MIN_SAMPLES = 3
COVERAGE = 0.8
"""The share of the recording's sampled time a stuck thread's samples must span."""


def sampled_stuck(
    jfr_samples: pd.DataFrame,
    *,
    top: int = TOP_FRAMES,
    min_samples: int = MIN_SAMPLES,
    coverage: float = COVERAGE,
) -> pd.DataFrame:
    """The threads stuck in one native call through their recording, one row each, shaped as
    the threads frame (``dump`` is the recording, ``taken_at`` the last sample), with
    ``samples``, ``first_sampled`` and ``last_sampled``."""
    columns = ["dump", "taken_at", "thread", "nid", "state", "top_frame", "frames"]
    extra = ["samples", "first_sampled", "last_sampled"]
    if jfr_samples.empty:
        return pd.DataFrame(columns=columns + extra)
    sig = (
        jfr_samples["state"].fillna("").astype(object)
        + "\x1f"
        + jfr_samples["frames"].map(lambda frames: "\x1f".join(frames[:top]))
    )
    keyed = jfr_samples.assign(
        _sig=sig, _native=jfr_samples["event_type"].eq("native") & ~_ran(jfr_samples)
    )
    span = keyed.groupby("recording")["ts"].agg(["min", "max"])
    length = (span["max"] - span["min"]).reindex(keyed["recording"]).to_numpy()
    grouped = keyed.assign(_length=length).groupby(["recording", "thread"], sort=False)
    stats = grouped.agg(
        samples=("_sig", "size"),
        signatures=("_sig", "nunique"),
        native=("_native", "all"),
        first_sampled=("ts", "min"),
        last_sampled=("ts", "max"),
        length=("_length", "first"),
    )
    stuck = (
        stats["native"]
        & stats["signatures"].eq(1)
        & stats["samples"].ge(min_samples)
        & (stats["last_sampled"] - stats["first_sampled"]).ge(stats["length"] * coverage)
    )
    chosen = stats.loc[stuck].reset_index()
    last = keyed.drop_duplicates(["recording", "thread"], keep="last")
    rows = chosen.merge(last, on=["recording", "thread"], how="left")
    rows = rows.assign(dump=rows["recording"], taken_at=rows["last_sampled"], nid=None)
    return rows[columns + extra].reset_index(drop=True)


def executed_between(jfr_samples: pd.DataFrame, taken_at: pd.Series) -> dict[str, int]:
    """Samples per thread name of it running (an execution sample, or a native one in a spin
    primitive: :data:`SPIN_FRAMES`) between the first and last dump's ``taken_at``; over the
    whole recording when the dumps' times are unknown. A thread sampled running between two
    dumps it sits unchanged in spins."""
    if jfr_samples.empty:
        return {}
    ran = jfr_samples.loc[_ran(jfr_samples)]
    times = taken_at.dropna()
    if len(times) >= 2 and times.min() < times.max():
        ran = ran.loc[ran["ts"].between(times.min(), times.max())]
    counts = ran.groupby("thread").size()
    return {str(name): int(n) for name, n in counts.items()}


def _ran(jfr_samples: pd.DataFrame) -> pd.Series:
    """Samples of a thread running: execution samples, and native ones in a spin primitive."""
    spin = jfr_samples["top_frame"].fillna("").str.startswith(SPIN_FRAMES)
    return jfr_samples["event_type"].eq("execution") | spin


def with_sampled(stuck: pd.DataFrame, sampled: pd.DataFrame) -> pd.DataFrame:
    """The stuck threads of the dumps and of the recordings together, each with its
    ``evidence``: a thread in both (by name) keeps its dump row, marked as corroborated."""
    dumps = stuck.assign(evidence=DUMPS)
    if sampled.empty:
        return dumps
    seen = dumps["thread"].isin(sampled["thread"])
    dumps = dumps.assign(evidence=dumps["evidence"].mask(seen, BOTH))
    only = sampled.loc[~sampled["thread"].isin(stuck["thread"])].assign(evidence=JFR)
    kept = [part for part in (dumps, only) if len(part)]
    if not kept:
        return dumps
    return pd.concat(kept, ignore_index=True).reindex(columns=[*stuck.columns, "evidence"])


CONTENTION_COLUMNS: Mapping[str, str] = {
    "class": STR,
    "kind": STR,
    "threads": OBJ,
    "count": INT,
    "blocked_ms": FLOAT,
    "max_ms": FLOAT,
    "owners": OBJ,
    "app_frame": STR,
    "first": TS,
    "last": TS,
}
"""One row per contended monitor or lock class: the threads that waited, how often and how
long in total, who held it (monitor enters name the previous owner), where they waited."""
_ACQUIRE = r"AbstractQueuedSynchronizer\.acquire|AbstractQueuedLongSynchronizer\.acquire"
_WAITING_FOR_WORK = r"ThreadPoolExecutor\.getTask|ForkJoinPool\.awaitWork|ConditionObject\.await"


def contention(jfr_locks: pd.DataFrame) -> pd.DataFrame:
    """Blocked monitor enters and parks on a lock, per monitor or lock class, the longest
    total blocked time first (:data:`CONTENTION_COLUMNS`)."""
    if jfr_locks.empty:
        return empty_view(CONTENTION_COLUMNS)
    stacks = jfr_locks["frames"].map(" ".join)
    monitor = jfr_locks["event_type"].eq("monitor-enter")
    lock = (
        jfr_locks["event_type"].eq("park")
        & stacks.str.contains(_ACQUIRE, regex=True)
        & ~stacks.str.contains(_WAITING_FOR_WORK, regex=True)
    )
    waits = jfr_locks.loc[monitor | lock]
    if waits.empty:
        return empty_view(CONTENTION_COLUMNS)
    app = waits["frames"].map(first_application_frame)
    waits = waits.assign(
        kind=waits["event_type"].map({"monitor-enter": "monitor", "park": "lock"}),
        app_frame=app,
        _class=waits["class"].fillna("(unknown)"),
    )
    grouped = waits.groupby(["_class", "kind"], sort=False)
    out = grouped.agg(
        count=("thread", "size"),
        blocked_ms=("duration_ms", "sum"),
        max_ms=("duration_ms", "max"),
        app_frame=("app_frame", "first"),
        first=("ts", "min"),
        last=("ts", "max"),
    ).reset_index()
    out["threads"] = _names(grouped["thread"])
    out["owners"] = _names(grouped["previous_owner"])
    out = out.rename(columns={"_class": "class"}).sort_values(
        ["blocked_ms", "class"], ascending=[False, True], kind="stable"
    )
    return as_columns(out, CONTENTION_COLUMNS)


def _names(column: Iterable[tuple[Hashable, pd.Series]]) -> list[tuple[str, ...]]:
    """Per group of ``column`` (a grouped text column), its distinct names, sorted."""
    return [tuple(sorted(set(names.dropna()))) for _, names in column]
