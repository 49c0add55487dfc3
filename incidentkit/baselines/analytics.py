"""The triage card's per-invocation queries over the BigQuery Agent Analytics table.

ADK's ``BigQueryAgentAnalyticsPlugin`` writes one row per callback (``agent_events``:
``timestamp, event_id, event_type, agent, session_id, invocation_id, ..., content JSON,
attributes JSON, latency_ms JSON, status, error_message``); the kit builds events from those
rows (``docs/bigquery-analytics.md``). These SQLAlchemy Core queries give, per invocation,
what the triage card reads of those events, with the rows that start an event standing for
the event:

- an **event** starts at a ``USER_MESSAGE_RECEIVED`` (the user's), a finished ``LLM_RESPONSE``
  (a model call: ``finish_reason`` or ``cache_type`` in ``attributes``; every response of an
  invocation whose responses carry neither), a ``TOOL_COMPLETED`` (the tool's answer) or a
  ``NODE_ERROR`` (ADK's error event); the other rows join one of those or are no event;
- a **model call** is a finished ``LLM_RESPONSE`` (the refused call of a ``max_llm_calls``
  hit is an ``LLM_REQUEST`` without one);
- a **final response** is the user's message, an ``AGENT_RESPONSE`` (the plugin logs it for
  ADK's final text response), a ``TOOL_PAUSED`` (a long-running call) or a ``NODE_ERROR``
  (an error that calls nothing); an invocation's last event is final when such a row comes
  no earlier than its last event's first row;
- an **error** is a ``NODE_ERROR`` (code ``content.error_code``) or a finished
  ``LLM_RESPONSE`` with an ``error_message`` (its ``finish_reason`` the code); a **limit
  error** names ``LlmCallsLimitExceeded`` or "limit of N exceeded";
- a **marker** (an ``AGENT_STATE_CHECKPOINT``, an ``EVENT_COMPACTION``, a row naming
  ``attributes.adk.rewind_before_invocation_id``) is left out before anything is counted.

The app is ``attributes.adk.app_name``, else ``attributes.session_metadata.app_name``. Every
JSON field is read with :func:`incidentkit.baselines.dialects.json_text`, every time with
:func:`~incidentkit.baselines.dialects.epoch_seconds`; every filter is a bound parameter and
the window is a condition on ``timestamp`` itself (the plugin partitions the table by day on
it: BigQuery reads the window's partitions only). The functions take anything with a dialect,
so the queries compile for BigQuery where no server is reachable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from incidentkit.baselines import dialects
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import sql
from incidentkit.sources.events import bigquery_live

TABLE = bigquery_live.TABLE
"""The plugin's default ``table_id``."""
EVENT_ROWS = ("USER_MESSAGE_RECEIVED", "LLM_RESPONSE", "TOOL_COMPLETED", "NODE_ERROR")
"""The rows that start an event (an ``LLM_RESPONSE`` only when finished)."""
FINAL_ROWS = ("USER_MESSAGE_RECEIVED", "AGENT_RESPONSE", "TOOL_PAUSED", "NODE_ERROR")
"""The rows that say their event is a final response."""
MARKER_ROWS = ("AGENT_STATE_CHECKPOINT", "EVENT_COMPACTION")
"""The rows of ADK's bookkeeping events: never part of an invocation's turns."""
APP_KEYS = (("adk", "app_name"), ("session_metadata", "app_name"))
"""Where a row names its app (``bigquery_analytics.APP_PATHS``), the first that holds text
winning."""


@dataclass(frozen=True)
class AnalyticsTable:
    """The plugin's table as the card reads it: the columns it has."""

    info: sql.TableInfo

    def column(self, name: str) -> ColumnElement[Any]:
        """The column ``name``, or NULL when the table lacks it (an older plugin's)."""
        if name in self.info.columns:
            return sql.column(self.info.clause, name)
        return sa.null()


def analytics_table(conn: Connection, spec: SourceSpec, *, what: str) -> AnalyticsTable:
    """The ``[events]`` table of ``spec`` (``agent_events`` unless ``table`` names another):
    SchemaError when it is missing or lacks a column the kit needs."""
    return AnalyticsTable(bigquery_live.table_info(conn, spec.table or TABLE, what=what))


def with_columns(columns: Sequence[str], name: str = TABLE) -> AnalyticsTable:
    """The table ``name`` with ``columns``, for compiling the queries without a connection."""
    return AnalyticsTable(sql.TableInfo(name, tuple(columns), frozenset(), frozenset()))


def _text(conn: dialects.Bound, doc: ColumnElement[Any], *keys: str) -> ColumnElement[str]:
    return dialects.json_text(conn, doc, keys)


def app_name(conn: dialects.Bound, table: AnalyticsTable) -> ColumnElement[str]:
    """The row's app: the first of :data:`APP_KEYS` in ``attributes`` that holds text."""
    attrs = table.column("attributes")
    if "attributes" not in table.info.columns:
        return sa.null().cast(sa.String)
    found = [sa.func.nullif(_text(conn, attrs, *keys), "") for keys in APP_KEYS]
    return sa.func.coalesce(*found, type_=sa.String)


def conditions(
    conn: dialects.Bound, table: AnalyticsTable, filters: Filters, apps: Sequence[str] = ()
) -> list[ColumnElement[bool]]:
    """The filters as conditions on the rows, every value bound: the window on ``timestamp``
    (the partition filter, bound as TIMESTAMP), the app (``filters.app_name``, else one of
    ``apps``), the sessions and the invocations."""
    found: list[ColumnElement[bool]] = []
    window = filters.window
    if window is not None:
        kind = sa.TIMESTAMP(timezone=True)
        ts = table.column("timestamp")
        start = window.start.floor("us").tz_convert("UTC").to_pydatetime()
        end = window.end.ceil("us").tz_convert("UTC").to_pydatetime()
        found += [
            ts >= sa.bindparam("w_start", start, kind),
            ts < sa.bindparam("w_end", end, kind),
        ]
    app = app_name(conn, table)
    if filters.app_name is not None:
        found.append(app == sa.bindparam("app_name", filters.app_name, sa.String()))
    elif apps:
        found.append(app.in_(sa.bindparam("card_apps", list(apps), sa.String(), expanding=True)))
    for values, col, label in (
        (filters.session_ids, "session_id", "sid"),
        (filters.invocation_ids, "invocation_id", "inv"),
    ):
        if values:
            param = sa.bindparam(label, list(values), sa.String(), expanding=True)
            found.append(table.column(col).in_(param))
    return found


def _like(text: ColumnElement[Any], pattern: str) -> ColumnElement[bool]:
    return sa.func.coalesce(sa.func.lower(text), "").like(pattern)


def _one(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return sa.case((condition, 1), else_=0)


def flagged_rows(
    conn: dialects.Bound, table: AnalyticsTable, filters: Filters, apps: Sequence[str] = ()
) -> sa.Subquery:
    """One row per table row of the filtered invocations that is no marker: ``app_name``,
    ``session_id``, ``invocation_id``, ``event_id`` (the stored event's id where the row names
    it), ``author``, ``ts_s`` (epoch seconds), ``event_type``, and 0/1 flags ``turn`` (it
    starts an event), ``model``, ``final``, ``refused``; ``error_code`` and
    ``error_message`` of an error event (NULL on any other row)."""
    attrs, content = table.column("attributes"), table.column("content")
    kind = table.column("event_type")
    has_attrs = "attributes" in table.info.columns
    finish = _text(conn, attrs, "finish_reason") if has_attrs else sa.null()
    cache = _text(conn, attrs, "cache_type") if has_attrs else sa.null()
    response = kind == "LLM_RESPONSE"
    marked = sa.and_(response, sa.or_(finish.is_not(None), cache.is_not(None)))
    invocation = table.column("invocation_id")
    # an invocation whose responses carry no mark at all (an older plugin): each is finished
    any_marked = sa.func.max(_one(marked)).over(partition_by=invocation)
    rewind = _text(conn, attrs, "adk", "rewind_before_invocation_id") if has_attrs else sa.null()
    marker = sa.or_(kind.in_(MARKER_ROWS), sa.func.coalesce(rewind, "") != "")
    source_id = _text(conn, attrs, "adk", "source_event_id") if has_attrs else sa.null()
    source_author = _text(conn, attrs, "source_event_author") if has_attrs else sa.null()
    message = table.column("error_message")
    code = sa.case(
        (kind == "NODE_ERROR", _text(conn, content, "error_code")),
        (sa.and_(response, message.is_not(None)), finish),
    )
    seconds = dialects.epoch_seconds(conn, table.column("timestamp"), "aware")
    rows = (
        sa.select(
            app_name(conn, table).label("app_name"),
            table.column("session_id").label("session_id"),
            invocation.label("invocation_id"),
            sa.func.coalesce(
                sa.func.nullif(source_id, ""), table.column("event_id"), type_=sa.String
            ).label("event_id"),
            sa.func.coalesce(source_author, table.column("agent"), type_=sa.String).label("author"),
            seconds.label("ts_s"),
            kind.label("event_type"),
            _one(marked).label("marked"),
            any_marked.label("any_marked"),
            code.label("error_code"),
            sa.case((kind.in_(["NODE_ERROR", "LLM_RESPONSE"]), message)).label("error_message"),
        )
        .select_from(table.info.clause)
        .where(*conditions(conn, table, filters, apps), invocation.is_not(None), ~marker)
        .subquery("rows")
    )
    r = rows.c
    model = sa.and_(r.event_type == "LLM_RESPONSE", sa.or_(r.marked == 1, r.any_marked == 0))
    turn = sa.or_(model, r.event_type.in_([t for t in EVENT_ROWS if t != "LLM_RESPONSE"]))
    error_code = sa.case((sa.or_(r.event_type != "LLM_RESPONSE", model), r.error_code))
    error_message = sa.case((sa.or_(r.event_type != "LLM_RESPONSE", model), r.error_message))
    refused = sa.or_(
        _like(error_code, "%llmcallslimitexceeded%"),
        _like(error_message, "%llmcallslimitexceeded%"),
        _like(error_message, "%limit of %exceeded%"),
    )
    return sa.select(
        r.app_name,
        r.session_id,
        r.invocation_id,
        r.event_id,
        r.author,
        r.ts_s,
        r.event_type,
        _one(turn).label("turn"),
        _one(model).label("model"),
        _one(r.event_type.in_(FINAL_ROWS)).label("final"),
        _one(refused).label("refused"),
        error_code.label("error_code"),
        error_message.label("error_message"),
    ).subquery("flagged")


def per_invocation(
    conn: dialects.Bound, table: AnalyticsTable, filters: Filters, apps: Sequence[str] = ()
) -> sa.Subquery:
    """One row per invocation with an event (:func:`flagged_rows`), as
    :func:`incidentkit.baselines.queries.per_invocation` gives one for an event table:
    ``app_name``, ``session_id``, ``invocation_id``, ``model_calls``, ``ended`` (a final
    response stored), ``hit_limit``, ``error``, ``start_s``/``end_s`` (its first and last
    event) and ``last_final`` (its last event is a final response)."""
    f = flagged_rows(conn, table, filters, apps)
    keys = (f.c.app_name, f.c.session_id, f.c.invocation_id)
    turn_s = sa.case((f.c.turn == 1, f.c.ts_s))
    last = sa.func.max(turn_s)
    return (
        sa.select(
            *keys,
            sa.func.sum(f.c.model).label("model_calls"),
            sa.func.max(f.c.final).label("ended"),
            sa.func.max(f.c.refused).label("hit_limit"),
            sa.func.max(_one(f.c.error_code.is_not(None))).label("error"),
            sa.func.min(turn_s).label("start_s"),
            last.label("end_s"),
            _one(sa.func.max(sa.case((f.c.final == 1, f.c.ts_s))) >= last).label("last_final"),
        )
        .group_by(*keys)
        .having(sa.func.sum(f.c.turn) > 0)
        .subquery("per_invocation")
    )


def error_events(
    conn: dialects.Bound, table: AnalyticsTable, filters: Filters, apps: Sequence[str] = ()
) -> sa.Select[Any]:
    """The error events (:func:`flagged_rows` with a code or a message): ``event_id``,
    ``app_name``, ``session_id``, ``invocation_id``, ``ts_s``, ``author``, ``error_code``,
    ``error_message``, ``refused``."""
    f = flagged_rows(conn, table, filters, apps)
    return sa.select(
        f.c.event_id,
        f.c.app_name,
        f.c.session_id,
        f.c.invocation_id,
        f.c.ts_s,
        f.c.author,
        f.c.error_code,
        f.c.error_message,
        f.c.refused,
    ).where(f.c.turn == 1, sa.or_(f.c.error_code.is_not(None), f.c.error_message.is_not(None)))


def app_names(conn: dialects.Bound, table: AnalyticsTable, filters: Filters) -> sa.Select[Any]:
    """The apps the rows of ``filters`` name (``SELECT DISTINCT``)."""
    app = app_name(conn, table)
    return (
        sa.select(app.label("app_name"))
        .select_from(table.info.clause)
        .where(*conditions(conn, table, filters), app.is_not(None))
        .distinct()
    )


def statements(
    conn: dialects.Bound, table: AnalyticsTable, filters: Filters, fleet: Sequence[str]
) -> dict[str, sa.Select[Any]]:
    """Every statement the card sends to the table, by name (for review: each compiles for
    the table's dialect)."""
    inv = per_invocation(conn, table, filters, fleet)
    return {
        "apps": app_names(conn, table, filters),
        "latest": latest(conn, table, filters),
        "per_invocation": sa.select(inv),
        "errors": error_events(conn, table, filters, fleet),
    }


def latest(conn: dialects.Bound, table: AnalyticsTable, filters: Filters) -> sa.Select[Any]:
    """One row, ``latest_s``: the epoch seconds of the filtered rows' last ``timestamp`` (the
    evidence's last record, for an empty as_of), NULL when there is none."""
    seconds = dialects.epoch_seconds(conn, table.column("timestamp"), "aware")
    return (
        sa.select(sa.func.max(seconds).label("latest_s"))
        .select_from(table.info.clause)
        .where(*conditions(conn, table, filters))
    )
