"""The triage card computed in the engine: every flow's cheap check as SQLAlchemy Core queries
inside the database where the events and the run ledger live, for the whole fleet at once.

Each flow's check has an engine twin in its own ``card.py``
(:attr:`~incidentkit.flows.plugin.CardChecks.engine`), given an :class:`EngineCardContext`:
the open read-only connections, the events table (:func:`incidentkit.baselines.queries.event_table`)
and the ledger (:func:`~incidentkit.baselines.queries.ledger_table`), the filters, as_of and
each app's :class:`~incidentkit.flows.card_lines.Profile`. A twin groups by app (one pass per
check over the fleet) and returns the in-memory check's lines, each naming its app. Only
aggregates and the rows of flagged invocations travel: what they need beyond an aggregate
(the last event of an invocation open past the timeout, the runs a sweeper would classify)
is read through the kit's own loader with their ids as filters (:meth:`EngineCardContext.load`),
and the in-memory rule runs on those few rows. ``docs/engine-card.md`` says what each check
computes in SQL and where it is NOT_CHECKED.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from incidentkit import baselines
from incidentkit.baselines import analytics, queries
from incidentkit.baselines.dialects import NAMES, check_engine, is_mariadb, prepare
from incidentkit.errors import IncidentkitError, SourceError
from incidentkit.flows.card_lines import LINE_COLUMNS, CardLine, Profile, not_checked
from incidentkit.frames import empty
from incidentkit.manifest import DEFAULT_MAX_BYTES_BILLED, Filters, SourceSpec, is_bigquery
from incidentkit.sources import sql
from incidentkit.sources.registry import loader_for

CARD_ENGINE = ("auto", "yes", "no")
"""The overview's ``card_engine`` setting: the engine when it can (``auto``), always, never."""
ANALYTICS = "bigquery-agent-analytics"
"""The format of the BigQuery Agent Analytics table (``bigquery_analytics.FORMAT``)."""
UNREAD = ("diagnostics", "spans")
"""Sections the in-memory card reads first (they time and count runs better) that the engine
card does not read: they are files, as large as the traffic."""


@dataclass(frozen=True)
class EngineEvents:
    """The events table on its open read-only connection: a table of events (ADK Java's,
    ADK Python's store) or the BigQuery Agent Analytics table (:mod:`.baselines.analytics`)."""

    conn: Connection
    source: queries.EventTable | analytics.AnalyticsTable
    spec: SourceSpec
    engine: str
    """The database's kind in words (``PostgreSQL``)."""

    @property
    def analytics(self) -> analytics.AnalyticsTable | None:
        """The Agent Analytics table, None for a table of events."""
        return self.source if isinstance(self.source, analytics.AnalyticsTable) else None

    @property
    def table(self) -> queries.EventTable:
        """The table of events (a twin asks :attr:`analytics` first)."""
        if not isinstance(self.source, queries.EventTable):
            raise SourceError(
                "engine card: this check reads a table of events, not the Agent Analytics table",
                value=self.source.info.name,
                fix='give card_engine = "no" to load the events',
            )
        return self.source


@dataclass(frozen=True)
class EngineLedger:
    """The ledger table on its open read-only connection."""

    conn: Connection
    table: queries.LedgerTable
    spec: SourceSpec
    engine: str


@dataclass
class Travelled:
    """What came back to Python: result rows of the card's queries, the column labels they
    carried, and the rows the loader read of flagged invocations (by section)."""

    rows: int = 0
    columns: set[str] = field(default_factory=set)
    loaded: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineCardContext:
    """What an engine check is given: the fleet's apps, the connections and tables, the
    filters (no app: every app of :attr:`apps`), as_of and each app's profile."""

    apps: tuple[str, ...]
    filters: Filters
    as_of: pd.Timestamp
    profiles: Mapping[str, Profile]
    events: EngineEvents | None = None
    ledger: EngineLedger | None = None
    symptom: str | None = None
    sources: Mapping[str, SourceSpec] = field(default_factory=dict)
    """Every manifest section (the journal, the loader's specs for flagged rows)."""
    environ: Mapping[str, str] | None = None
    missing: Mapping[str, str] = field(default_factory=dict)
    """``events``/``ledger`` → why the engine does not hold it (absent: it does, or the
    manifest has no such section)."""
    unread: tuple[str, ...] = ()
    """Sections of the manifest the in-memory card would read first and this one does not."""
    histograms: pd.DataFrame | None = None
    jfr_heap: pd.DataFrame | None = None
    jfr_old_objects: pd.DataFrame | None = None
    travelled: Travelled = field(default_factory=Travelled)

    def profile(self, app: str) -> Profile:
        return self.profiles.get(app, Profile())

    @property
    def has_ledger(self) -> bool:
        """Whether the manifest has a ``[ledger]`` section (in the engine or not)."""
        return "ledger" in self.sources

    def fetch(self, conn: Connection, statement: sa.Select[Any]) -> list[Row[Any]]:
        """The rows of ``statement``, counted in :attr:`travelled`."""
        rows = list(conn.execute(statement).all())
        self.travelled.rows += len(rows)
        self.travelled.columns.update(str(c.name) for c in statement.selected_columns)
        return rows

    def load(self, section: str, filters: Filters) -> dict[str, pd.DataFrame]:
        """The frames of ``section`` read by the kit's loader with ``filters`` (the flagged
        invocations' or sessions' ids): canonical frames, for the in-memory rules. The Agent
        Analytics table is read on the card's own connection by the live reader
        (:func:`~incidentkit.sources.events.bigquery_live.read_rows`), as its loader reads it."""
        spec = self.sources[section]
        table = self.events.analytics if section == "events" and self.events else None
        if table is not None and self.events is not None:
            frames = _analytics_frames(self.events.conn, table, spec, filters)
        else:
            frames = dict(
                loader_for(section, spec.format)(spec, filters, environ=self.environ).frames
            )
        rows = sum(len(frame) for frame in frames.values())
        self.travelled.loaded[section] = self.travelled.loaded.get(section, 0) + rows
        return frames

    def flagged(
        self,
        section: str,
        name: str,
        *,
        invocations: Sequence[str] = (),
        sessions: Sequence[str] = (),
    ) -> pd.DataFrame:
        """The frame ``name`` of ``section`` for the given invocation or session ids only
        (empty when none is given or the section is absent)."""
        if section not in self.sources or not (invocations or sessions):
            return empty(name)
        narrow = Filters(
            window=self.filters.window,
            session_ids=tuple(sorted(set(sessions))),
            invocation_ids=tuple(sorted(set(invocations))),
        )
        return self.load(section, narrow).get(name, empty(name))

    def not_checked(self, check: str, flow: str, evidence: str, why: str) -> list[CardLine]:
        """A NOT_CHECKED line of ``check`` for every app, saying ``why``."""
        return [
            {**not_checked(check, flow, evidence, why), "app": app} for app in self.apps or ("",)
        ]

    def events_missing(self) -> str:
        return self.missing.get("events", "the manifest has no [events] section")

    def ledger_missing(self) -> str:
        return self.missing.get("ledger", "the manifest has no [ledger] section")

    def computed(self, *over: str) -> str:
        """Where a line was computed: ``computed in PostgreSQL over adk_event``."""
        names = []
        engine = ""
        if "events" in over and self.events is not None:
            engine = self.events.engine
            names.append(self.events.source.info.name)
        if "ledger" in over and self.ledger is not None:
            engine = engine or self.ledger.engine
            names.append(self.ledger.table.info.name)
        return f"computed in {engine} over {', '.join(names)}" if names else ""


def _analytics_frames(
    conn: Connection, table: analytics.AnalyticsTable, spec: SourceSpec, filters: Filters
) -> dict[str, pd.DataFrame]:
    """The events frames of the Agent Analytics rows of ``filters`` on ``conn``."""
    from incidentkit.sources import events as event_source
    from incidentkit.sources.events import bigquery_live
    from incidentkit.sources.loaded import RejectSink

    sink = RejectSink("events")
    what = f"engine card {spec.location()}"
    cap = spec.max_bytes_billed or DEFAULT_MAX_BYTES_BILLED
    rows = bigquery_live.read_rows(
        conn, table.info.name, filters, sink, naive=spec.naive_timestamps, what=what, cap=cap
    )
    return event_source.analytics_frames(rows, filters, sink, identity=spec.identity)


def apps_in(conn: Connection, col: ColumnElement[Any], apps: Sequence[str]) -> ColumnElement[bool]:
    """``col`` is one of the card's ``apps`` (one bound parameter); no app at all (the fleet
    still to be found, :func:`fleet_apps`): any."""
    if not apps:
        return sa.true()
    return sql.in_values(conn, col, "card_apps", list(apps))


def fleet_apps(
    sources: Mapping[str, SourceSpec], filters: Filters, environ: Mapping[str, str] | None
) -> tuple[list[str], str]:
    """The apps of the ledger's runs in the window, else of the events (``SELECT DISTINCT``,
    as ``common.ledger_apps`` / ``logged_apps`` find them in the frames), and where."""
    with opened(
        apps=(),
        filters=filters,
        as_of=pd.Timestamp.now("UTC"),
        profiles={},
        sources=sources,
        environ=environ,
    ) as context:
        if context.ledger is not None:
            app = context.ledger.table.column("app_name")
            rows = context.fetch(
                context.ledger.conn,
                sa.select(app.label("app_name")).where(*ledger_conditions(context)).distinct(),
            )
            if rows:
                return sorted(str(r.app_name) for r in rows if r.app_name), "the ledger"
        events = context.events
        if events is not None and events.analytics is not None:
            rows = context.fetch(
                events.conn, analytics.app_names(events.conn, events.analytics, context.filters)
            )
            return sorted(str(r.app_name) for r in rows if r.app_name), "the Agent Analytics table"
        if events is not None:
            app = events.table.column("app_name")
            rows = context.fetch(
                events.conn,
                sa.select(app.label("app_name")).where(*event_conditions(context)).distinct(),
            )
            return sorted(str(r.app_name) for r in rows if r.app_name), "the event log"
    return [], "the evidence"


def event_conditions(context: EngineCardContext) -> list[ColumnElement[bool]]:
    """The filters on the events table (window, sessions, invocations) and the card's apps."""
    assert context.events is not None
    events = context.events
    if events.analytics is not None:
        return analytics.conditions(events.conn, events.analytics, context.filters, context.apps)
    on = sql.Predicates.named(events.table.names, time="ts", time_storage=events.table.storage)
    conditions = sql.where(events.conn, context.filters, on, events.table.info)
    return [*conditions, apps_in(events.conn, events.table.column("app_name"), context.apps)]


def ledger_conditions(context: EngineCardContext) -> list[ColumnElement[bool]]:
    """The ledger rows the loader keeps (``sources/sql/ledger.py``): runs active in the
    window (started before its end; updated after its start, or still RUNNING or PAUSED), of
    the card's apps, sessions and invocations."""
    assert context.ledger is not None
    conn, table = context.ledger.conn, context.ledger.table
    names = table.names
    on = sql.Predicates(
        app_name=names["app_name"],
        session_id=names["session_id"],
        invocation_id=names["invocation_id"],
    )
    conditions = sql.where(conn, context.filters, on, table.info)
    conditions.append(apps_in(conn, table.column("app_name"), context.apps))
    window = context.filters.window
    if window is not None:
        start, end = table.column("started_at"), table.column("updated_at")
        begins = sql.window_params(conn, window, table.storage["updated_at"])[0]
        ends = sql.window_params(conn, window, table.storage["started_at"])[1]
        still_open = sql.in_values(
            conn, sa.func.upper(table.column("status")), "open_status", ["RUNNING", "PAUSED"]
        )
        conditions += [
            start < sa.bindparam("win_end", ends),
            sa.or_(end >= sa.bindparam("win_start", begins), still_open),
        ]
    return conditions


def engine_name(conn: Connection) -> str:
    return "MariaDB" if is_mariadb(conn) else NAMES.get(conn.dialect.name, conn.dialect.name)


def in_engine(spec: SourceSpec | None) -> bool:
    """Whether the card can be computed in ``spec``'s database (a table the baselines push
    into: PostgreSQL, MySQL/MariaDB, SQLite; the Agent Analytics table in BigQuery)."""
    return spec is not None and spec.is_database and baselines.pushable(spec)


def is_analytics(
    spec: SourceSpec, environ: Mapping[str, str] | None, conn: Connection | None = None
) -> bool:
    """Whether ``[events]`` is the BigQuery Agent Analytics table: its format says so, its URL
    is ``bigquery://`` or its connection is BigQuery's."""
    if spec.format == ANALYTICS or (conn is not None and conn.dialect.name == "bigquery"):
        return True
    if spec.sqlite_path is not None or spec.format is not None:
        return False
    try:
        return is_bigquery(spec.url(environ))
    except IncidentkitError:  # an unset variable: the connection says so
        return False


def engine_chosen(choice: str, sources: Mapping[str, SourceSpec]) -> bool:
    """Whether ``card_engine`` = ``choice`` computes the card in the engine: ``yes``; ``no``;
    ``auto`` when the events (and the ledger, if any) are in a database it can push into."""
    if choice == "yes":
        return True
    if choice == "no":
        return False
    ledger = sources.get("ledger")
    return in_engine(sources.get("events")) and (ledger is None or in_engine(ledger))


def _same_database(a: SourceSpec, b: SourceSpec) -> bool:
    return (a.url_ref, a.sqlite_path) == (b.url_ref, b.sqlite_path)


@contextmanager
def opened(
    *,
    apps: Sequence[str],
    filters: Filters,
    as_of: pd.Timestamp,
    profiles: Mapping[str, Profile],
    sources: Mapping[str, SourceSpec],
    environ: Mapping[str, str] | None = None,
    symptom: str | None = None,
    histograms: pd.DataFrame | None = None,
    jfr_heap: pd.DataFrame | None = None,
    jfr_old_objects: pd.DataFrame | None = None,
) -> Iterator[EngineCardContext]:
    """The engine card's context: a read-only connection to the events' database and to the
    ledger's (one when they share it), each in one read-only transaction, closed after."""
    missing: dict[str, str] = {}
    with ExitStack() as stack:
        conns: dict[tuple[object, object], Connection] = {}

        def connect(spec: SourceSpec, what: str) -> Connection:
            key = (spec.url_ref, spec.sqlite_path)
            if key not in conns:
                engine = sql.open_source(spec, environ, what=what)
                stack.callback(engine.dispose)
                conn = stack.enter_context(sql.connect(engine, what=what))
                check_engine(conn, what=what)
                prepare(conn)
                conns[key] = conn
            return conns[key]

        events = ledger = None
        spec = sources.get("events")
        if spec is not None and in_engine(spec):
            what = f"engine card {spec.location()}"
            conn = connect(spec, what)
            source: queries.EventTable | analytics.AnalyticsTable
            if is_analytics(spec, environ, conn):
                source = analytics.analytics_table(conn, spec, what=what)
            else:
                source = queries.event_table(conn, spec, what=what)
            events = EngineEvents(conn, source, spec, engine_name(conn))
        elif spec is not None:
            missing["events"] = (
                f"the [events] source is not a database table the card can query "
                f'({spec.location()}): give card_engine = "no" to load it'
            )
        spec = sources.get("ledger")
        if spec is not None and in_engine(spec):
            what = f"engine card {spec.location()}"
            conn = connect(spec, what)
            runs = queries.ledger_table(conn, spec, what=what)
            ledger = EngineLedger(conn, runs, spec, engine_name(conn))
        elif spec is not None:
            missing["ledger"] = (
                f"the ledger is kept elsewhere ({spec.location()}), not in a database the card "
                'can query: give card_engine = "no" to load it'
            )
        yield EngineCardContext(
            apps=tuple(apps),
            filters=filters,
            as_of=as_of,
            profiles=profiles,
            events=events,
            ledger=ledger,
            symptom=symptom,
            sources=sources,
            environ=environ,
            missing=missing,
            unread=tuple(s for s in UNREAD if s in sources),
            histograms=histograms,
            jfr_heap=jfr_heap,
            jfr_old_objects=jfr_old_objects,
        )


def engine_lines(context: EngineCardContext) -> pd.DataFrame:
    """Every declared check's engine lines for every app (:data:`LINE_COLUMNS` and ``app``):
    a check with no engine twin, or one that fails on odd evidence, is a NOT_CHECKED line per
    app saying why. A line without a detail says where it was computed."""
    from incidentkit.flows import FLOWS

    lines: list[CardLine] = []
    for flow in FLOWS.values():
        for declared in flow.card:
            try:
                found = declared.engine_lines(context)
            except IncidentkitError as err:
                why = f"{type(err).__name__}: {err}"
                found = [
                    line
                    for check in declared.checks
                    for line in context.not_checked(check, flow.name, "", why)
                ]
            if found is None:
                why = (
                    "not computed in the engine: it needs every event of each session "
                    'in memory (run its flow, or give card_engine = "no")'
                )
                if context.events is not None and context.events.analytics is not None:
                    why += (
                        "; the Agent Analytics table logs temp: and secret-like state keys as "
                        "[REDACTED], so no verdict rests on their values"
                    )
                found = [
                    line
                    for check in declared.checks
                    for line in context.not_checked(check, flow.name, "", why)
                ]
            lines += found
    frame = pd.DataFrame(lines, columns=[*LINE_COLUMNS, "app"])
    if context.unread and len(frame):
        said = " and ".join(context.unread)
        note = f"; the {said} not read (the engine card reads the event log and the ledger)"
        computed = frame["detail"].fillna("").str.startswith("computed in ")
        frame.loc[computed, "detail"] = frame.loc[computed, "detail"] + note
    return frame
