"""The latency flow's cheap checks on the triage card: invocations open past the client
timeout, those of them whose worker died (for the orphans flow), and the latency cliff."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from incidentkit.baselines import analytics, dialects, queries
from incidentkit.flows._frames import empty_view
from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.common import Frames
from incidentkit.flows.latency_cliff.hangs import Orphaned, open_invocations
from incidentkit.flows.latency_cliff.latency import LATENCY_COLUMNS
from incidentkit.flows.latency_cliff.triage import (
    CLIFF_COLUMNS,
    ONE_MINUTE,
    LatencyReport,
    censored,
    cliff_row,
    live_cliff,
    queued,
    triage_latency,
)
from incidentkit.flows.orphans.card import sessions_events
from incidentkit.flows.orphans.flow import FLOW as ORPHANS
from incidentkit.frames import FLOAT, RunStatus, empty
from incidentkit.sources import sql

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "latency_cliff"
EVIDENCE = "diagnostics log, spans, ledger, event log, thread dumps"


def card_lines(context: CardContext) -> list[CardLine]:
    """The open-past-timeout, dead-worker and latency-cliff lines (NOT_CHECKED, all three, when
    no source times an invocation)."""
    profile = context.profile
    report = triage_latency(
        context.frames, as_of=context.as_of, client_timeout_s=profile.client_timeout_s
    )
    if report.source is None:
        why = "no source times an invocation (no run.start, invocation span, run or event)"
        return [
            not_checked("open-past-timeout", FLOW, EVIDENCE, why),
            not_checked("latency-cliff", FLOW, EVIDENCE, why),
            not_checked("dead-worker", ORPHANS.name, EVIDENCE, why),
        ]
    return _lines(report, profile.client_timeout_s)


def _lines(report: LatencyReport, client_timeout_s: float) -> list[CardLine]:
    """The three lines of ``report`` (a source timed its invocations)."""
    assert report.source is not None
    timeout = f"{client_timeout_s:g} s client timeout"
    hangs, dead = report.hangs, report.orphans
    tools = hangs["tool"].dropna().value_counts()
    waiting = f", most waiting on {tools.index[0]}" if len(tools) else ""
    also = f"; {len(dead)} more belong to a dead worker (dead-worker line)" if len(dead) else ""
    open_line = card_line(
        "open-past-timeout",
        "CRITICAL" if len(hangs) else "INFO",
        len(hangs),
        f"{len(hangs)} invocation(s) open past the {timeout}{waiting}{also}",
        FLOW,
        f"{report.open_source or report.source}",
    )
    return [open_line, _dead_line(report, timeout), _cliff_line(report, report.source)]


def _dead_line(report: LatencyReport, timeout: str) -> CardLine:
    """The open invocations whose worker died: orphans, for the orphans flow."""
    dead = report.orphans
    evidence = "run ledger (leases), event log"
    if dead.empty:
        return card_line(
            "dead-worker", "INFO", 0, "no open invocation of a dead worker", ORPHANS.name, evidence
        )
    reason = dead["orphan_reason"]
    owners = sorted(set(dead["owner"].dropna().astype(str)))
    why = []
    if reason.eq(Orphaned.LEASE_EXPIRED).any():
        whose = f" ({', '.join(owners)})" if owners else ""
        why.append(f"{int(reason.eq(Orphaned.LEASE_EXPIRED).sum())} ledger lease(s) expired{whose}")
    if reason.eq(Orphaned.REDRIVEN).any():
        why.append(f"{int(reason.eq(Orphaned.REDRIVEN).sum())} run(s) re-driven since")
    if reason.eq(Orphaned.SESSION_SILENT).any():
        why.append(
            f"{int(reason.eq(Orphaned.SESSION_SILENT).sum())} session(s) silent while the app "
            "went on (no ledger: presumed)"
        )
    return card_line(
        "dead-worker",
        "WARNING",
        len(dead),
        f"{len(dead)} invocation(s) open past the {timeout} are orphans, not hangs: the "
        f"worker died ({'; '.join(why)})",
        ORPHANS.name,
        evidence,
    )


def _cliff_line(report: LatencyReport, source: str) -> CardLine:
    """The latency change point, a cliff only where latency rose (the latency flow's rule),
    told in the measure that rose: every run's latency, an open one at its age."""
    if not report.has_cliff:
        return card_line("latency-cliff", "INFO", 0, "no latency change point", FLOW, source)
    row = report.cliff.iloc[0]
    before = report.series.iloc[: report.cliff_index]
    after = report.series.iloc[report.cliff_index :]
    before = before.loc[~before["invocation_id"].isin(report.orphans["invocation_id"])]
    after = after.loc[~after["invocation_id"].isin(report.orphans["invocation_id"])]
    said = []
    for q in (0.95, 0.5):
        low, high = float(before["ms"].quantile(q)), float(after["ms"].quantile(q))
        if high > low:
            said.append(f"p{round(q * 100)} {low / 1000:.3g} s → {high / 1000:.3g} s")
    rose = said[0] if said else "latency rose"
    return card_line(
        "latency-cliff",
        "WARNING",
        report.run_starts_since_cliff,
        f"latency rose at {pd.Timestamp(row['at']):%H:%M} UTC: {rose} (open invocations "
        "counted at their age)",
        FLOW,
        source,
    )


CHECKS = ("open-past-timeout", "latency-cliff", "dead-worker")
_SERIES = ("app_name", "invocation_id", "run_id", "session_id", "start_s", "ms", "error", "open")


def engine_lines(context: EngineCardContext) -> list[CardLine]:
    """The three lines of every app, timed in the database as in memory: each ledger run's
    ``started_at`` to a terminal ``updated_at`` (PAUSED left out; a run that ended after
    as_of is open), else each invocation's first to last turn of the event log. One row per
    run travels (its start, its latency, whether it failed or is open; ids only of the open
    ones): the cliff's binary segmentation needs the series in start order, which no
    aggregate keeps. The invocations open past the client timeout are the flagged ones:
    their sessions' events and runs are read through the loader and judged by
    :func:`~incidentkit.flows.latency_cliff.hangs.open_invocations` (the tool they wait on,
    whether their worker died). The diagnostics log and the spans are not read."""
    if context.has_ledger and context.ledger is None:
        return _not_checked(context, context.ledger_missing())
    if context.ledger is None and context.events is None:
        return _not_checked(context, context.events_missing())
    series = _ledger_series(context) if context.ledger is not None else _empty_series()
    rest = tuple(a for a in context.apps if not series["app_name"].eq(a).any())
    if rest and context.events is not None:
        series = pd.concat([series, _event_series(context, rest)], ignore_index=True)
    by_ledger = set(series.loc[series["source"].eq("ledger"), "app_name"])
    by_app = {
        app: censored(
            _as_latency(series.loc[series["app_name"].eq(app)]), _empty_latency(), context.as_of
        )
        for app in context.apps
    }
    past = {
        app: frame.loc[
            frame["open"]
            & (context.as_of - frame["started_at"])
            .dt.total_seconds()
            .gt(context.profile(app).client_timeout_s)
        ]
        for app, frame in by_app.items()
    }
    sessions = {
        app: sorted(set(frame["session_id"].dropna())) for app, frame in past.items() if len(frame)
    }
    silent = [app for app in sessions if app not in by_ledger]
    latest = _latest_sessions(context, silent) if silent else {}
    frames = _flagged_frames(
        context,
        sorted({s for found in sessions.values() for s in found} | set().union(*latest.values())),
        ledger=bool(by_ledger),
    )
    detail = context.computed("ledger" if by_ledger else "events")
    lines: list[CardLine] = []
    for app in context.apps:
        latency = by_app[app]
        if latency.empty:
            why = "no source times an invocation (no run or event in the engine)"
            lines += [{**line, "app": app} for line in _not_checked(context, why)[:3]]
            continue
        source = "ledger" if app in by_ledger else "events"
        timeout = context.profile(app).client_timeout_s
        report = _report(context, latency, frames, app, source, timeout)
        lines += [{**line, "detail": detail, "app": app} for line in _lines(report, timeout)]
    return lines


def _not_checked(context: EngineCardContext, why: str) -> list[CardLine]:
    return [
        *context.not_checked("open-past-timeout", FLOW, EVIDENCE, why),
        *context.not_checked("latency-cliff", FLOW, EVIDENCE, why),
        *context.not_checked("dead-worker", ORPHANS.name, EVIDENCE, why),
    ]


def _empty_series() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in (*_SERIES, "source")})


def _empty_latency() -> pd.DataFrame:
    return empty_view(LATENCY_COLUMNS)


def _utc(seconds: pd.Series) -> pd.Series:
    micros = pd.to_numeric(seconds, errors="coerce").astype(float).mul(1e6).round()
    return pd.to_datetime(micros, unit="us", utc=True).astype("datetime64[ns, UTC]")


def _as_latency(rows: pd.DataFrame) -> pd.DataFrame:
    """Series rows as a latency frame (:data:`.latency.LATENCY_COLUMNS`) in start order
    (built in its types, sorted only when the rows are not already in start order: a
    week's series is some 30 bytes a run per copy)."""
    started = _utc(rows["start_s"])
    ms = pd.to_numeric(rows["ms"], errors="coerce").astype(FLOAT)
    columns = {
        "invocation_id": rows["invocation_id"],
        "run_id": rows["run_id"],
        "session_id": rows["session_id"],
        "started_at": started,
        "ended_at": started + pd.to_timedelta(ms.round(3), unit="ms"),
        "ms": ms,
        "error": rows["error"].astype(bool),
        "open": rows["open"].astype(bool),
        "source": rows["source"],
    }
    frame = pd.DataFrame(columns).astype(dict(LATENCY_COLUMNS))
    if not frame["started_at"].is_monotonic_increasing:
        frame = frame.sort_values("started_at", kind="stable")
    return frame.reset_index(drop=True)


def _ledger_series(context: EngineCardContext) -> pd.DataFrame:
    """One row per ledger run of the fleet (:data:`_SERIES`), as ``latency.from_ledger``
    and ``triage.as_at`` give it."""
    from incidentkit.flows.engine_card import ledger_conditions

    assert context.ledger is not None
    conn, runs = context.ledger.conn, context.ledger.table
    start, end = runs.seconds(conn, "started_at"), runs.seconds(conn, "updated_at")
    status = sa.func.upper(runs.column("status"))
    as_of = sa.bindparam("as_of_s", context.as_of.timestamp(), type_=sa.Double)
    terminal = status.in_([RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED])
    ended = sa.and_(terminal, end <= as_of)
    is_open = sa.or_(status == RunStatus.RUNNING, sa.and_(terminal, end > as_of))
    failed = sa.and_(ended, status.in_([RunStatus.FAILED, RunStatus.PARKED]))

    def when_open(name: str) -> Any:
        return sa.case((is_open, runs.column(name))).label(name)

    return _series(
        context,
        conn,
        sa.select(
            runs.column("app_name").label("app_name"),
            when_open("invocation_id"),
            when_open("run_id"),
            when_open("session_id"),
            _float(conn, start).label("start_s"),
            _float(conn, sa.case((ended, (end - start) * 1000.0))).label("ms"),
            sa.case((failed, 1), else_=0).label("error"),
            sa.case((is_open, 1), else_=0).label("open"),
        )
        .where(
            *ledger_conditions(context),
            status != RunStatus.PAUSED,
            runs.column("started_at").is_not(None),
        )
        .order_by(runs.column("started_at"), runs.column("run_id")),
        "ledger",
    )


def _event_series(context: EngineCardContext, apps: tuple[str, ...]) -> pd.DataFrame:
    """One row per invocation of ``apps``' events: first to last turn, ended when its last
    turn is a final response (``queries.per_invocation``)."""
    assert context.events is not None
    conn, found = context.events.conn, context.events.analytics
    if found is not None:  # the Agent Analytics table: its events' first and last row
        inv = analytics.per_invocation(conn, found, context.filters, apps)
    else:
        inv = queries.per_invocation(conn, context.events.table, context.filters, apps=apps)
    c = inv.c
    is_open = c.last_final == 0

    def when_open(col: Any, name: str) -> Any:
        return sa.case((is_open, col)).label(name)

    return _series(
        context,
        conn,
        sa.select(
            c.app_name,
            when_open(c.invocation_id, "invocation_id"),
            sa.literal(None, sa.String).label("run_id"),
            when_open(c.session_id, "session_id"),
            _float(conn, c.start_s).label("start_s"),
            _float(conn, sa.case((c.last_final == 1, (c.end_s - c.start_s) * 1000.0))).label("ms"),
            c.error,
            sa.case((is_open, 1), else_=0).label("open"),
        ).order_by(c.start_s),
        "events",
    )


def _float(conn: Connection, value: ColumnElement[Any]) -> ColumnElement[Any]:
    """``value`` as a float where the engine computes it: PostgreSQL's epoch seconds are
    ``numeric`` (exact), which the driver gives as a ``Decimal`` per value; the cast rounds
    the exact value once, as ``float()`` of that ``Decimal`` did."""
    return sa.cast(value, sa.Double) if conn.dialect.name == "postgresql" else value


SERIES_CHUNK = 20_000
"""Runs of the series read from the cursor at a time (:func:`_series`)."""


def _series(
    context: EngineCardContext, conn: Connection, statement: sa.Select[Any], source: str
) -> pd.DataFrame:
    """The rows of a series ``statement`` (:data:`_SERIES`, one per run) as a frame, read
    :data:`SERIES_CHUNK` rows at a time from a streaming cursor: each chunk becomes numpy
    columns (floats, small integers; the apps' few names and the open runs' ids as shared
    objects) before the next is read, so the runs never stand as a Python row each (826,000
    runs: hundreds of MB as rows, a few tens as columns). Counted in ``context.travelled``
    as :meth:`EngineCardContext.fetch` counts."""
    streamed = statement.execution_options(stream_results=True, max_row_buffer=SERIES_CHUNK)
    names: dict[object, object] = {}
    chunks: dict[str, list[np.ndarray]] = {name: [] for name in _SERIES}
    for part in conn.execute(streamed).partitions(SERIES_CHUNK):
        for name, values in zip(_SERIES, zip(*part, strict=True), strict=True):
            chunks[name].append(_series_column(name, values, names))
    columns = {}  # column by column, each one's chunks let go once joined
    for name in _SERIES:
        found = chunks.pop(name)
        columns[name] = np.concatenate(found) if found else _series_column(name, (), names)
        del found
    frame = pd.DataFrame(
        {
            name: pd.Series(values, dtype=values.dtype, copy=False)
            for name, values in columns.items()
        }
    )
    frame["source"] = pd.Series(source, index=frame.index, dtype="category")
    context.travelled.rows += len(frame)
    context.travelled.columns.update(str(c.name) for c in statement.selected_columns)
    return frame


def _series_column(name: str, values: Sequence[Any], names: dict[object, object]) -> np.ndarray:
    """One column of a chunk of series rows: ``start_s`` and ``ms`` floats (NULL: NaN),
    ``error`` and ``open`` int8, the rest objects (each app's name one shared string)."""
    if name in ("start_s", "ms"):
        return np.array([np.nan if v is None else float(v) for v in values], dtype="float64")
    if name in ("error", "open"):
        return np.array(values, dtype="int8")
    if name == "app_name":
        return np.array([names.setdefault(v, v) for v in values], dtype=object)
    return np.array(values, dtype=object)  # kept as objects: no string column built


def _latest_sessions(context: EngineCardContext, apps: list[str]) -> dict[str, set[str]]:
    """Per app, the two sessions with the latest events (``hangs._by_silence`` compares a
    silent session with the latest other one)."""
    from incidentkit.flows.engine_card import event_conditions

    assert context.events is not None
    conn, found = context.events.conn, context.events.analytics
    if found is not None:  # the Agent Analytics table: the sessions' last event
        per = analytics.per_invocation(conn, found, context.filters, apps).c
        last = (
            sa.select(per.app_name, per.session_id, sa.func.max(per.end_s).label("at"))
            .group_by(per.app_name, per.session_id)
            .subquery("last")
        )
    else:
        table = context.events.table
        ts = dialects.epoch_seconds(conn, table.column("ts"), table.storage)
        app, session = table.column("app_name"), table.column("session_id")
        last = (
            sa.select(
                app.label("app_name"), session.label("session_id"), sa.func.max(ts).label("at")
            )
            .where(*event_conditions(context), sql.in_values(conn, app, "silent_apps", apps))
            .group_by(app, session)
            .subquery("last")
        )
    rank = sa.func.row_number().over(partition_by=last.c.app_name, order_by=last.c.at.desc())
    ranked = sa.select(last.c.app_name, last.c.session_id, rank.label("n")).subquery("ranked")
    rows = context.fetch(
        conn, sa.select(ranked.c.app_name, ranked.c.session_id).where(ranked.c.n <= 2)
    )
    out: dict[str, set[str]] = {a: set() for a in apps}
    for row in rows:
        out[row.app_name].add(row.session_id)
    return out


def _flagged_frames(context: EngineCardContext, sessions: list[str], *, ledger: bool) -> Frames:
    """The flagged sessions' runs (when the ledger times them), events, calls and responses,
    read through the loader (the events one app at a time: ``orphans.card.sessions_events``)."""
    if not sessions:
        return Frames()
    runs = context.flagged("ledger", "runs", sessions=sessions) if ledger else empty("runs")
    if context.events is None:
        return Frames(runs=runs)
    return Frames(runs=runs, **sessions_events(context, sessions))


def _report(
    context: EngineCardContext,
    series: pd.DataFrame,
    frames: Frames,
    app: str,
    source: str,
    timeout_s: float,
) -> LatencyReport:
    """A latency report holding what the card's lines read: the series, the open invocations
    past the timeout (judged on the flagged rows) and the cliff of the live ones."""
    events = frames.events.loc[frames.events["app_name"].eq(app)]
    runs = frames.runs.loc[frames.runs["app_name"].eq(app)]
    sessions = set(events["session_id"].dropna())
    hung = open_invocations(
        series,
        events,
        frames.calls.loc[frames.calls["session_id"].isin(sessions)],
        frames.responses.loc[frames.responses["session_id"].isin(sessions)],
        as_of=context.as_of,
        older_than_s=timeout_s,
        runs=runs if source == "ledger" else None,
    )
    hung = queued(series, hung)
    found, changes = live_cliff(series, hung)
    cliff = (
        cliff_row(series, found, ONE_MINUTE, source)
        if found is not None
        else empty_view(CLIFF_COLUMNS)
    )
    nothing = pd.DataFrame()
    return LatencyReport(
        as_of=context.as_of,
        bucket=ONE_MINUTE,
        client_timeout_s=float(timeout_s),
        source=source,
        open_source=source,
        sources=(source,),
        series=series,
        buckets=nothing,
        cliff=cliff,
        changes=tuple(changes),
        open=hung,
        by_last_event=nothing,
        disagreements=nothing,
        thread_groups=nothing,
        dumps=0,
        fix=nothing,
    )
