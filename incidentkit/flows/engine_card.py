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
from incidentkit.baselines import analytics, files, queries
from incidentkit.baselines.dialects import NAMES, check_engine, is_mariadb, prepare
from incidentkit.errors import IncidentkitError, SourceError
from incidentkit.flows.card_lines import LINE_COLUMNS, CardLine, Profile, not_checked
from incidentkit.frames import empty
from incidentkit.manifest import DEFAULT_MAX_BYTES_BILLED, Filters, SourceSpec, is_bigquery
from incidentkit.sources import sql
from incidentkit.sources.evidence_files import expand_paths
from incidentkit.sources.registry import loader_for

CARD_ENGINE = ("auto", "yes", "no")
"""The overview's ``card_engine`` setting: the engine when it can (``auto``), always, never."""
ANALYTICS = "bigquery-agent-analytics"
"""The format of the BigQuery Agent Analytics table (``bigquery_analytics.FORMAT``)."""
UNREAD = ("diagnostics", "spans")
"""Sections the in-memory card reads first (they time and count runs better) that the engine
card does not read: they are files, as large as the traffic."""
FILES_AUTO_BYTES = 256 * 1024**2
"""``auto`` computes the card by DuckDB over event files of at least this many bytes of events
(:func:`files_bytes`). Measured on a 10M-event week (``benchmarks/bench_card_files.py``): the
in-memory card holds about 1.9 KB of frames per event (six times its JSON) and took 3 to 5
times DuckDB's time per event, while DuckDB's memory stays capped (``files.MEMORY_LIMIT``;
under 1 GB peak for the week). At 256 MB (some 800,000 events) pandas needs some 1.5 GB and
40 to 100 s, DuckDB 10 to 30 s, and the gap grows with the files; below it pandas is quick and
small enough, and it computes every check from every source (the state check, the spans and
the diagnostics log first), which the engine card does not."""
FILES_ENGINE = NAMES["duckdb"]


@dataclass(frozen=True)
class EngineEvents:
    """The events table on its open read-only connection: a table of events (ADK Java's,
    ADK Python's store) or the BigQuery Agent Analytics table (:mod:`.baselines.analytics`)."""

    conn: Connection
    source: queries.EventTable | analytics.AnalyticsTable
    spec: SourceSpec
    engine: str
    """The database's kind in words (``PostgreSQL``)."""
    files: str | None = None
    """Event files read by DuckDB: their names as a line shows them (None: a database)."""

    @property
    def name(self) -> str:
        """What a line says it was computed over: the table, or the files."""
        return self.files or self.source.info.name

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
        elif section == "events" and self.events is not None and self.events.files is not None:
            frames = _view_frames(self.events, filters)
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
        """Where a line was computed: ``computed in PostgreSQL over adk_event``; ``computed
        in DuckDB over events.parquet and PostgreSQL over agent_run`` for two engines."""
        where: dict[str, list[str]] = {}
        if "events" in over and self.events is not None:
            where.setdefault(self.events.engine, []).append(self.events.name)
        if "ledger" in over and self.ledger is not None:
            where.setdefault(self.ledger.engine, []).append(self.ledger.table.info.name)
        said = " and ".join(f"{engine} over {', '.join(names)}" for engine, names in where.items())
        return f"computed in {said}" if said else ""


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


def _view_frames(events: EngineEvents, filters: Filters) -> dict[str, pd.DataFrame]:
    """The events frames of the rows of ``filters`` in the DuckDB view over the files: the
    view's rows (in the files' order: DuckDB keeps a scan's order) normalised as the files'
    loader normalises them, the filters applied again as for files."""
    from incidentkit.sources.events import adk_events
    from incidentkit.sources.loaded import RejectSink

    conn, table, spec = events.conn, events.table, events.spec
    on = sql.Predicates.named(table.names, time="ts", time_storage=table.storage)
    keys = ("event_id", "app_name", "user_id", "session_id", "event")
    statement = (
        sa.select(*(table.column(key).label(key) for key in keys))
        .select_from(table.info.clause)
        .where(*sql.where(conn, filters, on, table.info))
    )
    rows = pd.DataFrame(conn.execute(statement).all(), columns=list(keys), dtype=object)
    meta = rows[["app_name", "user_id", "session_id"]].assign(
        location=f"{events.files}:" + rows["event_id"].astype(str)
    )
    python = spec.format is None and table.python
    origin = adk_events.PYTHON_SESSION_JSON if python else adk_events.JAVA_JSON
    sink = RejectSink("events")
    batch = adk_events.Batch(values=rows["event"], meta=meta, origin=origin)
    frames = adk_events.normalise(
        [batch], filters, sink, apply_filters=True, identity=spec.identity
    )
    frames["session_state"] = empty("session_state")
    return frames


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


def in_engine(spec: SourceSpec | None, *, files: bool = False) -> bool:
    """Whether the card can be computed in ``spec``'s database (a table the baselines push
    into: PostgreSQL, MySQL/MariaDB, SQLite; the Agent Analytics table in BigQuery); with
    ``files``, also by DuckDB over ``[events]`` files (:func:`in_duckdb`)."""
    if spec is None:
        return False
    return (spec.is_database and baselines.pushable(spec)) or (files and in_duckdb(spec))


def in_duckdb(spec: SourceSpec | None) -> bool:
    """Whether ``spec`` is ``[events]`` files DuckDB reads for the card: JSON lines of the
    kit's event shapes, or Parquet rows of an events table (:func:`files.readable`)."""
    return (
        spec is not None
        and spec.section == "events"
        and not spec.is_database
        and baselines.pushable(spec)
    )


def files_bytes(spec: SourceSpec) -> int:
    """The size of the events in ``spec``'s files (a pattern expanded): JSON lines as they
    are; a Parquet file as its row groups hold them uncompressed (from its footer), the size
    the frames are loaded from (compressed, event JSON takes about a twentieth of it)."""
    import pyarrow.parquet as pq

    total = 0
    for path in expand_paths(spec.paths, what=spec.section):
        if path.suffix.lower() in files.PARQUET_SUFFIXES:
            meta = pq.ParquetFile(path).metadata
            total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        else:
            total += path.stat().st_size
    return total


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


def engine_chosen(
    choice: str,
    sources: Mapping[str, SourceSpec],
    *,
    filters: Filters | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``card_engine`` = ``choice`` computes the card in the engine: ``yes``; ``no``;
    ``auto`` (:func:`auto_choice`) when the evidence is a fleet's, not an incident's."""
    if choice in ("yes", "no"):
        return choice == "yes"
    return auto_choice(sources, filters=filters, environ=environ)[0]


def auto_choice(
    sources: Mapping[str, SourceSpec],
    *,
    filters: Filters | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """``card_engine = "auto"``: whether the engine computes the card, and why. The engine
    when the events (and the ledger, if any) are where it can query them and there are many
    of them: the BigQuery Agent Analytics table always (a warehouse is not loaded); a database
    table holding at least :data:`DATABASE_AUTO_EVENTS` events in the window (counted with a
    ``LIMIT``, so no more are read); event files DuckDB reads of :data:`FILES_AUTO_BYTES` or
    more. Below that, pandas: it checks every line (``state-can-vanish`` needs every state
    delta) in seconds."""
    ledger = sources.get("ledger")
    if ledger is not None and not in_engine(ledger):
        return False, "auto: the ledger is not in a database the card can query"
    events = sources.get("events")
    if events is None:
        return False, "auto: no [events] section"
    if in_engine(events):
        if events.is_database and is_analytics(events, environ):
            return True, "auto: the events are the Agent Analytics table in BigQuery"
        many = events_at_least(events, filters or Filters(), environ, DATABASE_AUTO_EVENTS)
        shown = f"{DATABASE_AUTO_EVENTS:,}"
        if many:
            return True, f"auto: at least {shown} events in the window, in their database"
        return False, f"auto: fewer than {shown} events in the window: loaded into pandas"
    if in_duckdb(events):
        size = files_bytes(events)
        if size >= FILES_AUTO_BYTES:
            return True, f"auto: {size / 1024**2:,.0f} MB of event files, read by DuckDB"
        return False, f"auto: {size / 1024**2:,.0f} MB of event files: loaded into pandas"
    return False, "auto: the events are files DuckDB does not read: loaded into pandas"


DATABASE_AUTO_EVENTS = 500_000
"""``auto`` computes the card in the events' database from this many events in the window:
about the size of :data:`FILES_AUTO_BYTES` of JSON lines, where pandas needs a gigabyte of
frames (``benchmarks/bench_card.py``: about 1.9 KB per event) and most of a minute."""


def events_at_least(
    spec: SourceSpec, filters: Filters, environ: Mapping[str, str] | None, count: int
) -> bool:
    """Whether ``spec``'s table holds at least ``count`` events within ``filters``: a
    ``COUNT`` over a ``LIMIT count`` sub-query, so the database reads no more than that."""
    what = f"[{spec.section}] {spec.location()}"
    engine = sql.open_source(spec, environ, what=what)
    try:
        with sql.connect(engine, what=what) as conn:
            table = queries.event_table(conn, spec, what=what)
            on = sql.Predicates.named(table.names, time="ts", time_storage=table.storage)
            rows = (
                sa.select(sa.literal(1).label("one"))
                .select_from(table.info.clause)
                .where(*sql.where(conn, filters, on, table.info))
                .limit(count)
                .subquery("some")
            )
            found = conn.execute(sa.select(sa.func.count()).select_from(rows)).scalar()
    finally:
        engine.dispose()
    return int(found or 0) >= count


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
    ledger's (one when they share it), each in one read-only transaction, closed after; event
    files DuckDB reads: a fresh in-memory DuckDB with the view over them
    (:func:`files.event_view`), closed after."""
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
        elif spec is not None and in_duckdb(spec):
            what = f"engine card {spec.location()}"
            conn, view = stack.enter_context(files.event_view(spec, what=what))
            events = EngineEvents(conn, view, spec, FILES_ENGINE, files=files_label(spec))
        elif spec is not None:
            missing["events"] = (
                f"the [events] source is not a database table or files DuckDB reads "
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


def files_label(spec: SourceSpec) -> str:
    """The event files as a line names them: ``events.parquet``, ``a.jsonl, b.jsonl ...``."""
    paths = expand_paths(spec.paths, what=spec.section)
    return ", ".join(p.name for p in paths[:2]) + (" ..." if len(paths) > 2 else "")


def latest(
    spec: SourceSpec, filters: Filters, environ: Mapping[str, str] | None
) -> pd.Timestamp | None:
    """The latest time of ``spec``'s rows within ``filters`` (``[events]``: its events';
    ``[ledger]``: its runs' ``updated_at``), asked of where the engine card reads them, one
    ``MAX``: the database (:func:`queries.latest_seconds`; the Agent Analytics table's
    ``timestamp``), or DuckDB over event files. None when no row matches."""
    what = f"[{spec.section}] {spec.location()}"
    if in_duckdb(spec):  # the view's ts: a TIMESTAMP in UTC, to the microsecond
        with files.event_view(spec, what=what) as (conn, table):
            on = sql.Predicates.named(table.names, time="ts", time_storage=table.storage)
            statement = sa.select(sa.func.max(table.column("ts"))).select_from(table.info.clause)
            top = conn.execute(statement.where(*sql.where(conn, filters, on, table.info))).scalar()
        return None if top is None else pd.Timestamp(top, tz="UTC")
    engine = sql.open_source(spec, environ, what=what)
    try:
        with sql.connect(engine, what=what) as conn:
            if spec.section == "events" and is_analytics(spec, environ, conn):
                found = analytics.analytics_table(conn, spec, what=what)
                seconds = conn.execute(analytics.latest(conn, found, filters)).scalar()
            else:
                seconds = queries.latest_seconds(conn, spec, filters, what=what)
    finally:
        engine.dispose()
    return None if seconds is None else pd.Timestamp(seconds, unit="s", tz="UTC")


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
