"""Baseline aggregates as SQLAlchemy Core queries, computed where the events and runs live.

Over a long window only aggregates travel: the distribution of model calls per invocation
(how many invocations made N calls, :func:`call_histogram`), the latency percentiles of the
runs that ended and their error counts (:func:`latency_summary`), errors per time bucket
(:func:`error_buckets`). Never an event document.

The events are read as the kit's loader reads them (``sources/events/__init__.py``): a table of ADK
Java event JSON (``adk_event``, the manifest's ``table`` and ``columns`` honoured) or ADK
Python's ``events`` store (``event_data``, snake_case). Each event's flags follow the
normaliser's rules (``adk_events.py``) and the flows' counts:

- a **model call** (``runaway/counts.py``): an event not authored by ``user``, not partial,
  carrying no function response part, not ADK Python's limit error event, no marker (a
  compaction, a rewind, a content-less ``end_of_agent`` / ``agent_state`` checkpoint), and
  with content parts or usage metadata (a content-less error event of a tool is no call);
- a **final response**: ``skipSummarization``, a non-empty ``longRunningToolIds``, or no call,
  no response and not partial (ADK Python: also an error that calls nothing). A trailing
  code-execution result is not looked for (the kit's agents run none);
- a **marker** (``sources/events/event_kinds.py``) is left out before anything is counted, so a
  compaction's or a rewind's own invocation id is no invocation and a resumable app's closing
  checkpoints do not keep its invocations from ending;
- an **error**: an ``errorCode``; a **limit error**: an error code or message naming
  ``LlmCallsLimitExceeded`` or "limit of N exceeded".

A part is found by its key in the text of ``content.parts`` (``"functionResponse":``), the
one JSON search every engine has. Filters (window, app, sessions, invocations) are the kit's
own Core conditions (:func:`incidentkit.sources.sql.where`), every value bound; connections
are the kit's read-only ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from incidentkit.baselines import dialects
from incidentkit.errors import ParameterError
from incidentkit.frames import RunStatus
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import sql
from incidentkit.sources.events import JAVA_TABLE, java_column_names

PYTHON_TABLE = "events"
PYTHON_COLUMNS = {
    "event_id": "id",
    "app_name": "app_name",
    "user_id": "user_id",
    "session_id": "session_id",
    "invocation_id": "invocation_id",
    "ts": "timestamp",
    "event": "event_data",
}
LEDGER_TABLE = "agent_run"
LEDGER_COLUMNS = ("run_id", "app_name", "session_id", "invocation_id", "status")
LEDGER_TIMES = ("started_at", "updated_at")

CAMEL: Mapping[str, tuple[str, ...]] = {
    "author": ("author",),
    "partial": ("partial",),
    "error_code": ("errorCode",),
    "error_message": ("errorMessage",),
    "parts": ("content", "parts"),
    "skip": ("actions", "skipSummarization"),
    "long_running": ("longRunningToolIds",),
    "usage": ("usageMetadata",),
    "compaction": ("actions", "compaction"),
    "rewind": ("actions", "rewindBeforeInvocationId"),
    "end_of_agent": ("actions", "endOfAgent"),
    "agent_state": ("actions", "agentState"),
}
SNAKE: Mapping[str, tuple[str, ...]] = {
    **CAMEL,
    "error_code": ("error_code",),
    "error_message": ("error_message",),
    "skip": ("actions", "skip_summarization"),
    "long_running": ("long_running_tool_ids",),
    "usage": ("usage_metadata",),
    "rewind": ("actions", "rewind_before_invocation_id"),
    "end_of_agent": ("actions", "end_of_agent"),
    "agent_state": ("actions", "agent_state"),
}
QUANTILES = (0.5, 0.95, 0.99)
_TRUE = ("true", "1")


@dataclass(frozen=True)
class EventTable:
    """An events table as the baseline reads it: its columns, key style and time storage."""

    info: sql.TableInfo
    names: Mapping[str, str]
    """canonical column (``app_name``, ``ts``, ``event``, ...) → the table's own name."""
    keys: Mapping[str, tuple[str, ...]]
    storage: sql.TimeStorage
    python: bool
    """ADK Python's final-response clause (an error that calls nothing ends the run)."""

    def column(self, name: str) -> sa.ColumnClause[Any]:
        return sql.column(self.info.clause, self.names[name])


def event_table(conn: Connection, spec: SourceSpec, *, what: str) -> EventTable:
    """The events table of ``spec`` as the loader would pick it: ADK Python's store when the
    format says so or when it alone is there, else a table of ADK Java event JSON."""
    if spec.format == "adk-python-db" or (
        spec.format is None
        and not spec.table
        and not spec.columns
        and sql.inspect_table(conn, JAVA_TABLE) is None
        and sql.inspect_table(conn, PYTHON_TABLE) is not None
    ):
        info = sql.require_table(conn, PYTHON_TABLE, list(PYTHON_COLUMNS.values()), what=what)
        if "timestamp" in info.naive_time_columns:
            storage: sql.TimeStorage = "naive"
        else:  # SqliteSessionService keeps epoch seconds (REAL); a zoned column is aware
            storage = "epoch_s" if conn.dialect.name == "sqlite" else "aware"
        return EventTable(info, PYTHON_COLUMNS, SNAKE, storage, python=True)
    names = java_column_names(spec)
    info = sql.require_table(conn, spec.table or JAVA_TABLE, list(names.values()), what=what)
    return EventTable(info, names, CAMEL, sql.time_storage(info, names["ts"]), python=False)


def _like(text: ColumnElement[Any], pattern: str) -> ColumnElement[bool]:
    return sa.func.coalesce(text, "").like(pattern)


def _flags(conn: Connection, events: EventTable) -> dict[str, ColumnElement[bool]]:
    """Per event: model call, final response, error, limit error, and whether it is a marker
    (a compaction, a rewind, a checkpoint: never part of an invocation; see the module doc).

    Each JSON field is read once per flag that needs it; the part tests use the engine's
    own JSON search (:func:`dialects.has_item_key`). Whether an object or array field is
    given (:func:`_given`) never renders it as text on PostgreSQL.
    """
    doc = events.column("event")

    def field(name: str) -> ColumnElement[str]:
        return dialects.json_text(conn, doc, events.keys[name])

    def given(name: str, empty: tuple[str, ...] = ()) -> ColumnElement[bool]:
        return _given(conn, doc, events.keys[name], field(name), empty)

    def has_part(*names: str) -> ColumnElement[bool]:
        tests = [dialects.has_item_key(conn, doc, events.keys["parts"], n) for n in names]
        return tests[0] if len(tests) == 1 else sa.or_(*tests)

    # A Python store may hold by-alias (camelCase) parts too: the normaliser reads both.
    python = events.python
    has_response = has_part(
        *(("functionResponse", "function_response") if python else ("functionResponse",))
    )
    has_call = has_part(*(("functionCall", "function_call") if python else ("functionCall",)))
    partial = sa.func.coalesce(field("partial"), "").in_(_TRUE)
    code, message = field("error_code"), sa.func.lower(field("error_message"))
    refused = sa.or_(
        _like(sa.func.lower(code), "%llmcallslimitexceeded%"),
        _like(message, "%llmcallslimitexceeded%"),
        _like(message, "%limit of %exceeded%"),
    )
    final = sa.or_(
        sa.func.coalesce(field("skip"), "").in_(_TRUE),
        given("long_running", empty=("[]",)),
        sa.and_(~has_call, ~has_response, ~partial),
    )
    if python:
        final = sa.or_(final, sa.and_(code.is_not(None), ~partial, ~has_call))
    bare = ~given("parts", empty=("[]",))
    marker = sa.or_(
        given("compaction"),
        given("rewind", empty=("",)),
        sa.and_(
            bare,
            sa.or_(sa.func.coalesce(field("end_of_agent"), "").in_(_TRUE), given("agent_state")),
        ),
    )
    answered = sa.or_(~bare, given("usage"))  # a model's reply, even an empty one
    model = sa.and_(field("author") != "user", ~partial, ~has_response, ~refused, answered)
    return {
        **{"model": model, "final": final, "error": code.is_not(None), "refused": refused},
        "marker": marker,
    }


def _given(
    conn: Connection,
    doc: ColumnElement[Any],
    keys: Sequence[str],
    text: ColumnElement[str],
    empty: tuple[str, ...] = (),
) -> ColumnElement[bool]:
    """Whether a JSON field is there and its text (``text``, :func:`dialects.json_text`) is
    neither ``null`` nor one of ``empty``.

    PostgreSQL compares the ``jsonb`` value itself with each value whose text that is (the
    JSON value and the string: ``[]`` and ``"[]"``), once it is there: the same test,
    without rendering an object or an array as text for every event (the parts' text was
    half a scan's time) nor comparing ``jsonb`` values for an absent field."""
    if conn.dialect.name != "postgresql":
        return sa.func.coalesce(text, "null").not_in(["null", *empty])
    value: ColumnElement[Any] = sa.cast(doc, JSONB)
    for key in keys:
        value = value.op("->")(sa.cast(sa.literal(key), sa.Text))
    texts = ("null", *empty)
    same = [t for t in texts if _is_json(t)] + [json.dumps(t) for t in texts]
    return sa.and_(value.is_not(None), value.not_in([sa.cast(sa.literal(t), JSONB) for t in same]))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def turn(flags: Mapping[str, ColumnElement[bool]]) -> ColumnElement[bool]:
    """The events that are turns (no marker: :func:`event_flags`), as a condition the
    planner counts as most rows (``CASE ... <> 1``). A test of JSON fields is one it cannot
    count: PostgreSQL then guessed a few hundred of ten million events, sorted every
    document to group them rather than hashing the invocations, and took three times as
    long."""
    return _one(flags["marker"]) != 1


def _one(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return sa.case((condition, 1), else_=0)


def per_invocation(
    conn: Connection,
    events: EventTable,
    filters: Filters,
    marked: Sequence[str] = (),
    *,
    times: bool = True,
    apps: Sequence[str] = (),
) -> sa.Subquery:
    """One row per invocation of the filtered events: ``model_calls``, ``ended`` (a final
    response stored), ``hit_limit``, ``error``, ``start_s``/``end_s`` (epoch seconds of the
    first and last event), ``last_final`` (whether the last event is a final response) and
    ``marked`` (one of the ``marked`` invocation ids). ``times=False`` leaves out the
    columns of time and errors (a histogram of counts reads no clock). ``apps`` (the triage
    card's fleet) keeps those apps' events and adds ``app_name`` and ``session_id``: one pass
    over every app."""
    flags = _flags(conn, events)
    inv = events.column("invocation_id")
    mark = sql.in_values(conn, inv, "marked", marked) if marked else sa.false()
    seconds = dialects.epoch_seconds(conn, events.column("ts"), events.storage)
    on = sql.Predicates.named(events.names, time="ts", time_storage=events.storage)
    conditions = sql.where(conn, filters, on, events.info)
    keys = [inv.label("invocation_id")]
    if apps:
        app = events.column("app_name")
        conditions.append(sql.in_values(conn, app, "card_apps", apps))
        keys = [app.label("app_name"), events.column("session_id").label("session_id"), *keys]
    columns = [
        *keys,
        _one(flags["model"]).label("model"),
        _one(flags["final"]).label("final"),
        _one(flags["refused"]).label("refused"),
        _one(mark).label("marked"),
    ]
    if times:
        columns += [_one(flags["error"]).label("error"), seconds.label("s")]
    rows = (
        sa.select(*columns)
        .select_from(events.info.clause)
        .where(*conditions, inv.is_not(None), turn(flags))
        .subquery("flagged")
    )
    r = rows.c
    grouped = [r[k.name] for k in keys]
    per = [
        *grouped,
        sa.func.sum(r.model).label("model_calls"),
        sa.func.max(r.final).label("ended"),
        sa.func.max(r.refused).label("hit_limit"),
        sa.func.max(r.marked).label("marked"),
    ]
    if times:
        last = sa.func.max(r.s)
        per += [
            sa.func.max(r.error).label("error"),
            sa.func.min(r.s).label("start_s"),
            last.label("end_s"),
            _one(sa.func.max(sa.case((r.final == 1, r.s))) >= last).label("last_final"),
        ]
    return sa.select(*per).group_by(*grouped).subquery("per_invocation")


def call_histogram(
    conn: Connection, events: EventTable, filters: Filters, marked: Sequence[str] = ()
) -> pd.DataFrame:
    """How many invocations made each number of model calls, split by ``ended``,
    ``hit_limit`` and ``marked`` (:data:`HISTOGRAM_COLUMNS`).

    As the flow counts (``counts.from_events``), an invocation with no model call is left out.
    """
    inv = per_invocation(conn, events, filters, marked, times=False)
    keys = (inv.c.model_calls, inv.c.ended, inv.c.hit_limit, inv.c.marked)
    statement = (
        sa.select(*keys, sa.func.count().label("invocations"))
        .where(inv.c.model_calls > 0)
        .group_by(*keys)
        .order_by(*keys)
    )
    rows = conn.execute(statement).all()
    return histogram_frame(rows)


HISTOGRAM_COLUMNS: Mapping[str, str] = {
    "model_calls": "int64",
    "ended": "bool",
    "hit_limit": "bool",
    "marked": "bool",
    "invocations": "int64",
}
"""Invocations (``invocations``) per model-call count and flags: a final response stored
(``ended``), a limit error stored (``hit_limit``), one of the ids asked about (``marked``)."""


def histogram_frame(rows: Iterable[Sequence[object]]) -> pd.DataFrame:
    """Rows of :data:`HISTOGRAM_COLUMNS` values as a typed frame."""
    frame = pd.DataFrame([tuple(row) for row in rows], columns=list(HISTOGRAM_COLUMNS))
    return frame.astype(dict(HISTOGRAM_COLUMNS))


def event_runs(conn: Connection, events: EventTable, filters: Filters) -> sa.Subquery:
    """Per invocation of the events, as :func:`latency_summary` reads runs: ``start_s``,
    ``ms`` (first to last event; NULL unless its last event is a final response), ``ended``,
    ``error``."""
    inv = per_invocation(conn, events, filters)
    ended = inv.c.last_final == 1
    return sa.select(
        inv.c.start_s,
        sa.case((ended, (inv.c.end_s - inv.c.start_s) * 1000.0)).label("ms"),
        _one(ended).label("ended"),
        inv.c.error,
    ).subquery("runs")


def ledger_runs(conn: Connection, spec: SourceSpec, filters: Filters, *, what: str) -> sa.Subquery:
    """Per ledger run started in the window, as the flow times it (``latency.from_ledger``):
    ``started_at`` to a terminal row's ``updated_at``; PAUSED runs left out; FAILED and PARKED
    are errors."""
    names = {col: spec.columns.get(col, col) for col in (*LEDGER_COLUMNS, *LEDGER_TIMES)}
    table = spec.table or LEDGER_TABLE
    info = sql.require_table(conn, table, list(names.values()), what=what)
    c = {col: sql.column(info.clause, name) for col, name in names.items()}
    storage = {t: sql.time_storage(info, names[t]) for t in LEDGER_TIMES}
    start = dialects.epoch_seconds(conn, c["started_at"], storage["started_at"])
    end = dialects.epoch_seconds(conn, c["updated_at"], storage["updated_at"])
    status = sa.func.upper(c["status"])
    terminal = status.in_([RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED])
    on = sql.Predicates.named(names, time="started_at", time_storage=storage["started_at"])
    conditions = sql.where(conn, filters, on, info)
    return (
        sa.select(
            start.label("start_s"),
            sa.case((terminal, (end - start) * 1000.0)).label("ms"),
            _one(terminal).label("ended"),
            _one(status.in_([RunStatus.FAILED, RunStatus.PARKED])).label("error"),
        )
        .select_from(info.clause)
        .where(*conditions, c["started_at"].is_not(None), status != RunStatus.PAUSED)
        .subquery("runs")
    )


def latency_summary(conn: Connection, runs: sa.Subquery) -> dict[str, float]:
    """``runs`` (``start_s``, ``ms``, ``ended``, ``error``) summed up: ``runs``, ``ended``,
    ``errors`` and the p50/p95/p99 of ``ms`` over the runs that ended."""
    counts = conn.execute(
        sa.select(
            sa.func.count().label("runs"),
            sa.func.coalesce(sa.func.sum(runs.c.ended), 0).label("ended"),
            sa.func.coalesce(sa.func.sum(runs.c.error), 0).label("errors"),
        )
    ).one()
    ended = sa.select(runs.c.ms).where(runs.c.ended == 1).subquery("ended")
    pct = conn.execute(dialects.percentiles(conn, ended, "ms", QUANTILES)).one()
    out = {"runs": float(counts.runs), "ended": float(counts.ended), "errors": float(counts.errors)}
    for q, value in zip(QUANTILES, pct, strict=True):
        out[f"p{round(q * 100)}_ms"] = float("nan") if value is None else float(value)
    return out


def error_buckets(conn: Connection, runs: sa.Subquery, size: pd.Timedelta) -> pd.DataFrame:
    """Runs and errors per UTC bucket of start time (empty buckets absent): ``bucket``,
    ``runs``, ``errors``."""
    seconds = size.total_seconds()
    if not seconds > 0:
        raise ParameterError(
            "bucket is not a positive duration", value=str(size), fix='give a duration, "1min"'
        )
    bucket = dialects.time_bucket(conn, runs.c.start_s, seconds).label("bucket_s")
    statement = (
        sa.select(bucket, sa.func.count().label("runs"), sa.func.sum(runs.c.error).label("errors"))
        .group_by(bucket)
        .order_by(bucket)
    )
    return bucket_frame(conn.execute(statement).all())


def bucket_frame(rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """Rows of ``(bucket epoch seconds, runs, errors)`` as a typed frame."""
    frame = pd.DataFrame(
        [(float(b), int(n), int(e or 0)) for b, n, e in rows],
        columns=["bucket_s", "runs", "errors"],
    )
    frame.insert(0, "bucket", pd.to_datetime(frame.pop("bucket_s"), unit="s", utc=True))
    return frame.astype({"bucket": "datetime64[ns, UTC]", "runs": "int64", "errors": "int64"})


def event_flags(conn: Connection, events: EventTable) -> dict[str, ColumnElement[bool]]:
    """Per event, the flags the counts read (``model``, ``final``, ``error``, ``refused``,
    ``marker``), as :func:`per_invocation` applies them: for queries of the triage card."""
    return _flags(conn, events)


def event_field(conn: Connection, events: EventTable, name: str) -> ColumnElement[str]:
    """The event document's field ``name`` (a key of :data:`CAMEL`) as text, in the table's
    key style."""
    return dialects.json_text(conn, events.column("event"), events.keys[name])


LEDGER_CARD_COLUMNS = ("attempts", "owner", "lease_until")
"""The ledger's columns the triage card reads besides :data:`LEDGER_COLUMNS` and
:data:`LEDGER_TIMES` (``owner`` and ``lease_until`` may be absent, as in the loader)."""


@dataclass(frozen=True)
class LedgerTable:
    """A ledger table as the card reads it: its columns (the manifest's names) and how each
    time column stores time."""

    info: sql.TableInfo
    names: Mapping[str, str]
    """canonical column (``run_id``, ``status``, ``started_at``, ...) → the table's own name;
    only the columns the table has."""
    storage: Mapping[str, sql.TimeStorage]

    def column(self, name: str) -> sa.ColumnClause[Any]:
        return sql.column(self.info.clause, self.names[name])

    def seconds(self, conn: Connection, name: str) -> ColumnElement[float]:
        """Epoch seconds of the time column ``name``."""
        return dialects.epoch_seconds(conn, self.column(name), self.storage[name])


def ledger_table(conn: Connection, spec: SourceSpec, *, what: str) -> LedgerTable:
    """The ``[ledger]`` table of ``spec`` (``agent_run`` unless named; ``columns`` honoured):
    the columns :func:`ledger_runs` reads are required, ``attempts``, ``owner`` and
    ``lease_until`` taken when present."""
    wanted = (*LEDGER_COLUMNS, *LEDGER_TIMES, *LEDGER_CARD_COLUMNS)
    names = {col: spec.columns.get(col, col) for col in wanted}
    required = [names[c] for c in (*LEDGER_COLUMNS, *LEDGER_TIMES)]
    info = sql.require_table(conn, spec.table or LEDGER_TABLE, required, what=what)
    present = {col: name for col, name in names.items() if name in info.columns}
    times = [c for c in (*LEDGER_TIMES, "lease_until") if c in present]
    return LedgerTable(info, present, {t: sql.time_storage(info, present[t]) for t in times})


def latest_seconds(
    conn: Connection, spec: SourceSpec, filters: Filters, *, what: str
) -> float | None:
    """Epoch seconds of the latest row of ``spec``'s table (``[events]``: its events' times;
    ``[ledger]``: its runs' ``updated_at``) within ``filters`` (window, app, sessions,
    invocations): one ``MAX`` in the engine, where the flows take it from the loaded frame. None
    when no row matches."""
    if spec.section == "ledger":
        ledger = ledger_table(conn, spec, what=what)
        names = ledger.names
        column, storage = ledger.column("updated_at"), ledger.storage["updated_at"]
        on = sql.Predicates.named(names, time="updated_at", time_storage=storage)
        info = ledger.info
    else:
        events = event_table(conn, spec, what=what)
        column, storage = events.column("ts"), events.storage
        on = sql.Predicates.named(events.names, time="ts", time_storage=storage)
        info = events.info
    seconds = dialects.epoch_seconds(conn, column, storage)
    statement = sa.select(sa.func.max(seconds)).select_from(info.clause)
    top = conn.execute(statement.where(*sql.where(conn, filters, on, info))).scalar()
    return None if top is None else float(top)
