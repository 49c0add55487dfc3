"""The events section: ADK session events from files or databases into four frames.

Sources (``format`` in the manifest, detected when absent):

- ``adk-java-json``: ADK Java ``Event.toJson()`` as JSON lines (each line carrying ``appName``,
  ``userId`` and ``sessionId``), or a Java ``Session`` document (or a list of them);
- ``sql``: a table of ADK Java events (default ``adk_event``; ``columns`` maps its names);
- ``adk-python-db``: ADK Python ``DatabaseSessionService`` (schema v1) or
  ``SqliteSessionService`` stores, on PostgreSQL, MySQL/MariaDB or SQLite;
- ``adk-session-json``: ``adk run --save_session`` output (a Python ``Session`` by alias);
- ``vertex-ai-json``, ``firestore-json``: session stores behind an API, as their API's JSON
  was saved (:mod:`.vertex`, :mod:`.firestore`);
- ``adk-mongodb-json``: ADK Python's MongoDB session stores (ADK's ``MongoDbSessionService``, the
  community ``MongoSessionService``), their collections exported by ``mongoexport``
  (:mod:`.mongodb`);
- ``adk-redis``: ADK Python's ``RedisSessionService``, read live (``url``, read-only commands
  only) or from a dump of its keys (:mod:`.redis_sessions`);
- ``bigquery-agent-analytics``: the BigQuery Agent Analytics plugin's table, exported as JSON
  lines or Parquet (:mod:`.bigquery_analytics`, :mod:`.bigquery_events`), or read live from
  ``url = "bigquery://PROJECT/DATASET"`` (:mod:`.bigquery_live`).

Every source ends in :func:`.adk_events.normalise`, so the same events give equal frames
whatever they were stored in (``source_format`` says which reader saw them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack
from itertools import chain, islice
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.frames import build, empty
from incidentkit.manifest import PARQUET, Filters, SourceSpec, is_bigquery
from incidentkit.sources import parquet, sql
from incidentkit.sources.events import (
    adk_events,
    adk_python,
    bigquery_analytics,
    bigquery_events,
    bigquery_live,
    firestore,
    mongodb,
    redis_sessions,
    session_state,
    stored_state,
    vertex,
)
from incidentkit.sources.events.adk_columns import pluck
from incidentkit.sources.events.adk_events import (
    JAVA_JSON,
    MS_THRESHOLD,
    PYTHON_SESSION_JSON,
    Batch,
    IdentityLookup,
    Origin,
    normalise,
)
from incidentkit.sources.evidence_files import expand_paths, iter_lines, require_content
from incidentkit.sources.json_files import iter_json_line_chunks, read_json_document
from incidentkit.sources.loaded import Loaded, RejectSink
from incidentkit.sources.process_memory import bulk_decoding

WHAT = "events"
JAVA_TABLE = "adk_event"
JAVA_COLUMNS = ("event_id", "app_name", "user_id", "session_id", "invocation_id", "ts", "event")
_DATABASE_FORMATS = ("sql", "adk-python-db")
_DETECT_SAMPLE = 1000


def load(
    spec: SourceSpec,
    filters: Filters,
    *,
    environ: Mapping[str, str] | None = None,
    lookup: IdentityLookup | None = None,
) -> Loaded:
    """Load the events section into ``events``, ``calls``, ``responses``, ``state_writes`` and
    ``session_state`` (the state the store keeps, where it keeps one).

    ``lookup`` gives ledger rows to name the session of events that carry none.
    """
    sink = RejectSink(WHAT)
    states: list[pd.DataFrame] = []
    live_redis = spec.is_database and _is_redis(spec, environ)
    live_bigquery = spec.is_database and not live_redis and _is_bigquery(spec, environ)
    if live_bigquery:  # rows of an invocation make its events: filtered again, as an export's
        rows = bigquery_live.read(spec, filters, environ, sink)
        frames = analytics_frames(rows, filters, sink, identity=spec.identity, lookup=lookup)
        return Loaded(frames=frames, rejects=sink.frame(), warnings=sink.warnings())
    in_sql = spec.is_database and not live_redis  # the database applies the filters
    export = None if spec.is_database else export_format(spec)
    with ExitStack() as stack:  # a database stays open while its rows are normalised
        batches: Iterable[Batch]
        if live_redis:
            batches = redis_sessions.read_live(spec, filters, environ, sink, states)
        elif spec.is_database:
            batches = _read_database(spec, filters, environ, sink, states, stack)
        else:
            batches = _read_files(spec, filters, sink, states, export)
        frames = normalise(
            batches,
            filters,
            sink,
            apply_filters=not in_sql,
            identity=spec.identity,
            lookup=lookup,
        )
    kept = [part for part in states if not part.empty]
    if not kept:
        frames["session_state"] = empty("session_state")
    else:
        stored = build("session_state", pd.concat(kept, ignore_index=True))
        narrowed = in_sql or live_redis or export in _NARROWED_STATE
        frames["session_state"] = stored if narrowed else session_state.narrowed(stored, filters)
    return Loaded(frames=frames, rejects=sink.frame(), warnings=sink.warnings())


_NARROWED_STATE = (mongodb.FORMAT, redis_sessions.FORMAT)
"""Stores whose reader narrows the stored state itself, as ADK Python's database stores do."""


def analytics_frames(
    rows: pd.DataFrame,
    filters: Filters,
    sink: RejectSink,
    *,
    identity: Mapping[str, str] | None = None,
    lookup: IdentityLookup | None = None,
) -> dict[str, pd.DataFrame]:
    """The events frames (and an empty ``session_state``: the table keeps none) of BigQuery
    Agent Analytics ``rows`` (:func:`.bigquery_live.read`, or an export's
    :func:`.bigquery_analytics.read`), the filters applied to the events as for an export."""
    frames = normalise(
        [_analytics_batch(rows, sink)],
        filters,
        sink,
        apply_filters=True,
        identity=identity or {},
        lookup=lookup,
    )
    frames["session_state"] = empty("session_state")
    return frames


def _is_bigquery(spec: SourceSpec, environ: Mapping[str, str] | None) -> bool:
    """Whether a database section is the BigQuery Agent Analytics table, read live (a
    ``bigquery://`` URL, read only as format bigquery-agent-analytics)."""
    if spec.sqlite_path is not None:
        return False
    if not is_bigquery(spec.url(environ)):
        if spec.max_bytes_billed is not None:
            raise ManifestError(
                f"[{WHAT}] max_bytes_billed caps BigQuery queries, but the URL names another "
                "database",
                value=spec.location(),
                fix="remove max_bytes_billed, or point the variable at bigquery://PROJECT/DATASET",
            )
        return False
    if spec.format not in (None, bigquery_analytics.FORMAT):
        raise SourceError(
            f"{WHAT}: a bigquery:// URL is read as the BigQuery Agent Analytics table only",
            value=f"format {spec.format} for {spec.location()}",
            fix=f'write format = "{bigquery_analytics.FORMAT}", or leave the format out',
        )
    if spec.columns:
        raise ManifestError(
            f"[{WHAT}] columns does not apply to the BigQuery Agent Analytics table",
            value=f"{dict(spec.columns)} for {spec.location()}",
            fix="remove columns: the plugin's columns are fixed (table = names its table_id)",
        )
    return True


def _is_redis(spec: SourceSpec, environ: Mapping[str, str] | None) -> bool:
    """Whether a database section is a Redis store: ``format = "adk-redis"``, or a Redis URL,
    which only that format reads (it is refused here without it)."""
    if spec.sqlite_path is not None:
        if spec.format == redis_sessions.FORMAT:
            raise SourceError(
                f"{WHAT}: format adk-redis reads a Redis server or a dump of its keys, not a "
                "SQLite file",
                value=spec.location(),
                fix='give url = "env:NAME" holding redis://..., or path = the JSON dump',
            )
        return False
    url = spec.url(environ)
    if not redis_sessions.is_redis_url(url):
        if spec.format == redis_sessions.FORMAT:
            raise SourceError(
                f"{WHAT}: format adk-redis needs a redis://, rediss:// or unix:// URL",
                value=spec.location(),
                fix="point the variable at the Redis server of RedisSessionService, or drop "
                "the format for a SQL database",
            )
        return False
    if spec.format != redis_sessions.FORMAT:
        raise SourceError(
            f"{WHAT}: the URL names a Redis server, read only as format adk-redis",
            value=spec.location(),
            fix='write format = "adk-redis" in [events] (ADK Python\'s RedisSessionService; '
            'table = "<key_prefix>" when it is not adk:session:)',
        )
    return True


# -- databases ---------------------------------------------------------------------------------


def _read_files(
    spec: SourceSpec,
    filters: Filters,
    sink: RejectSink,
    states: list[pd.DataFrame],
    export: str | None,
) -> Iterable[Batch]:
    """The batches of the section's files (``export``: the store export they are, from
    :func:`export_format`), read as the normaliser draws them."""
    if spec.format in _DATABASE_FORMATS:
        raise SourceError(
            f"{WHAT}: format {spec.format} reads a database, but the manifest gives files",
            value=spec.location(),
            fix='give url = "env:NAME" (or a .db/.sqlite path), or drop the format',
        )
    paths = expand_paths(spec.paths, what=WHAT)
    if export == vertex.FORMAT:
        return _read_vertex(paths, spec, sink, states)
    if export == firestore.FORMAT:
        return [_read_firestore(paths, sink, states)]
    if export == mongodb.FORMAT:
        return _read_mongodb(paths, filters, sink, states)
    if export == redis_sessions.FORMAT:
        return _read_redis_dump(paths, spec, filters, sink, states)
    if export == bigquery_analytics.FORMAT:
        return [_read_analytics(paths, spec, sink)]
    for path in paths:
        if bigquery_analytics.is_parquet(path):  # the kit reads Parquet as the plugin's rows only
            said = (
                f"format {spec.format} reads JSON, but this file is Parquet" + looked_like(path)
                if spec.format
                else "this Parquet file is not the BigQuery Agent Analytics table (the only "
                "Parquet [events] reads)"
            )
            raise SourceError(
                f"{WHAT}: {said}",
                value=str(path),
                fix='give format = "bigquery-agent-analytics" for the plugin\'s rows, or '
                "point [events] at the JSON export",
            )
    return chain.from_iterable(
        _read_file(path, spec.format, sink, spec.event_column, states) for path in paths
    )


def _read_database(
    spec: SourceSpec,
    filters: Filters,
    environ: Mapping[str, str] | None,
    sink: RejectSink,
    states: list[pd.DataFrame],
    stack: ExitStack,
) -> Iterator[Batch]:
    """The filtered events of the database, in batches drawn as the normaliser asks (the
    connection, entered on ``stack``, stays open until they are drawn); the session state
    the store keeps goes to ``states`` first (ADK Python's stores keep one; a table of ADK
    Java events does not)."""
    if spec.format == "adk-session-json":
        raise SourceError(
            f"{WHAT}: format adk-session-json reads files, but the manifest gives a database",
            value=spec.location(),
            fix="give path = <the saved session JSON>, or use format adk-python-db",
        )
    if spec.format == mongodb.FORMAT:
        raise SourceError(
            f"{WHAT}: format {spec.format} reads mongoexport files; the kit does not connect "
            "to MongoDB",
            value=spec.location(),
            fix="export each collection with mongoexport (docs/producing-evidence.md) and give "
            "paths = the files",
        )
    if spec.format == bigquery_analytics.FORMAT:
        raise SourceError(
            f"{WHAT}: format {spec.format} reads the table's exports, or the table itself at "
            "a bigquery:// URL; this URL names another database",
            value=spec.location(),
            fix="point the variable at bigquery://PROJECT/DATASET, or give path or paths = "
            "the bq extract files",
        )
    if spec.format in _EXPORT_FORMATS:
        raise SourceError(
            f"{WHAT}: format {spec.format} reads files saved from its API, but the manifest "
            "gives a database",
            value=spec.location(),
            fix="give path or paths = the saved JSON files",
        )
    if spec.format == "adk-python-db" and (spec.table or spec.columns):
        raise ManifestError(
            "[events] table and columns do not apply to an ADK Python session store",
            value={"table": spec.table, "columns": dict(spec.columns)},
            fix="remove them: ADK Python's tables (events, adk_internal_metadata) are fixed",
        )
    what = f"{WHAT} {spec.location()}"  # every message names the store
    engine = sql.open_source(spec, environ, what=what)
    stack.callback(engine.dispose)
    conn = stack.enter_context(sql.connect(engine, what=what))
    if _is_python_store(conn, spec):
        batch = adk_python.read(conn, filters, what=what)
        states.append(
            session_state.read_python_store(
                conn,
                filters,
                sink,
                epoch_seconds=batch.origin is adk_events.PYTHON_SQLITE,
                what=what,
            )
        )
        return iter([batch])
    return _read_java_table(conn, spec, filters)


def _is_python_store(conn: Connection, spec: SourceSpec) -> bool:
    """ADK Python's store or a Java event table: from the format, else from the tables.

    A named table, a column mapping or an ``adk_event`` table mean ADK Java's layout.
    """
    if spec.format == "adk-python-db":
        return True
    if spec.format is not None or spec.table or spec.columns:
        return False
    if sql.inspect_table(conn, JAVA_TABLE, what=f"{WHAT} ({spec.location()})") is not None:
        return False
    if adk_python.is_python_store(conn):
        return True
    raise SchemaError(
        f"{WHAT}: no ADK event table in the database",
        value=f"{spec.location()} (looked for {JAVA_TABLE} and ADK Python's events)",
        fix="name the table with table = ... (a table of ADK Java event JSON), or point at an "
        "ADK Python session store",
    )


def java_column_names(spec: SourceSpec) -> dict[str, str]:
    """Canonical column of a Java event table → the table's own name (``columns``)."""
    unknown = sorted(set(spec.columns) - set(JAVA_COLUMNS))
    if unknown:
        raise ManifestError(
            "[events] columns maps names that are not columns of an event table",
            value=unknown,
            fix=f"map only these canonical names to yours: {', '.join(JAVA_COLUMNS)}",
        )
    return {col: spec.columns.get(col, col) for col in JAVA_COLUMNS}


def _read_java_table(conn: Connection, spec: SourceSpec, filters: Filters) -> Iterator[Batch]:
    """The filtered rows of a table of ADK Java event JSON, in a stable order: a batch per
    chunk of rows, each holding its own memory, read as the normaliser draws them."""
    table = spec.table or JAVA_TABLE
    names = java_column_names(spec)
    info = sql.require_table(conn, table, list(names.values()), what=WHAT)
    table_clause = info.clause
    c = {col: sql.column(table_clause, name) for col, name in names.items()}
    conditions = sql.where(conn, filters, sql.Predicates.named(names, time="ts"), info)
    selected = ("event_id", "app_name", "user_id", "session_id", "event")
    statement = (
        sa.select(*(c[col].label(col) for col in selected))
        .select_from(table_clause)
        .where(*conditions)
        .order_by(c["app_name"], c["user_id"], c["session_id"], c["ts"], c["event_id"])
    )
    read = 0
    for frame in sql.stream_frames(conn, statement, what=WHAT, rows=adk_events.CHUNK):
        read += len(frame)
        if len(frame):
            yield _java_batch(frame.reindex(columns=list(selected)), table)
    if not read:
        sql.require_rows(conn, info, what=f"{WHAT} {spec.location()}")


def _java_batch(frame: pd.DataFrame, table: str) -> Batch:
    meta = frame[["event_id", "app_name", "user_id", "session_id"]].assign(
        location=table + ":" + frame["event_id"].astype(str)
    )
    return Batch(values=frame["event"], meta=meta, origin=JAVA_JSON)


# -- files -------------------------------------------------------------------------------------

_EXPORT_FORMATS = (
    vertex.FORMAT,
    firestore.FORMAT,
    bigquery_analytics.FORMAT,
    mongodb.FORMAT,
    redis_sessions.FORMAT,
)
"""Stores read as their exports were saved (API JSON, table exports, collection exports, key
dumps), not as event lines."""


def _records(path: Path, sink: RejectSink) -> Iterator[tuple[list[Any], list[str]]]:
    """The decoded records of a JSON-lines file, a chunk at a time, or of a JSON document
    (an array is its items)."""
    require_content(path, what=WHAT)
    if _peek(path) == "document":
        doc = read_json_document(path, what=WHAT)
        if isinstance(doc, list):
            yield doc, [f"{path.name}:[{i}]" for i in range(len(doc))]
        else:
            yield [doc], [path.name]
        return
    yield from iter_json_line_chunks(path, sink, what=WHAT, size=adk_events.CHUNK)


_PEEK_RECORDS = 20


def _first_records(path: Path) -> list[Any]:
    """The first records of a file, for detection (none when it cannot be read as JSON): the
    first lines of JSON lines, decoded one by one (never a whole chunk), or a document's
    items."""
    try:
        if _peek(path) == "document":
            doc = read_json_document(path, what=WHAT)
            return list(doc[:_PEEK_RECORDS]) if isinstance(doc, list) else [doc]
        records = []
        for _, text, _ in islice(iter_lines(path, what=WHAT), _PEEK_RECORDS):
            try:
                records.append(json.loads(text))
            except (ValueError, RecursionError):  # a broken line: the reader rejects it
                continue
        return records
    except SourceError:
        return []


def export_format(spec: SourceSpec) -> str | None:
    """``vertex-ai-json``, ``firestore-json``, ``bigquery-agent-analytics``,
    ``adk-mongodb-json`` or ``adk-redis`` when ``[events]`` is such an export (given, or
    detected from its first file's first records or Parquet columns), and
    ``bigquery-agent-analytics`` for the table read live (``bigquery://``: the same rows); None
    for event logs and other databases (a live Redis store too). Cheap: flows ask it without
    loading the events."""
    if spec.is_database:
        return bigquery_analytics.FORMAT if _names_bigquery(spec) else None
    if spec.format == PARQUET:  # a snapshot: what its events were read from
        formats = parquet.column_values(spec, "events", "source_format")
        return formats[0] if len(formats) == 1 and formats[0] in _EXPORT_FORMATS else None
    if spec.format is not None:
        return spec.format if spec.format in _EXPORT_FORMATS else None
    paths = expand_paths(spec.paths, what=WHAT)
    if paths and bigquery_analytics.detect(paths[0]):
        return bigquery_analytics.FORMAT
    first = _first_records(paths[0]) if paths else []
    return _store_export(first)


def _names_bigquery(spec: SourceSpec) -> bool:
    """Whether a database section names the BigQuery table (its format, else its URL as the
    process environment holds it), without connecting."""
    if spec.sqlite_path is not None or spec.format not in (None, bigquery_analytics.FORMAT):
        return False
    if spec.format == bigquery_analytics.FORMAT:
        return True
    try:
        return is_bigquery(spec.url())
    except ManifestError:  # an unset variable: loading says so
        return False


def _store_export(first: list[Any]) -> str | None:
    """The store export the first records of a file are, None for none."""
    if vertex.is_vertex(first):
        return vertex.FORMAT
    if firestore.is_firestore(first):
        return firestore.FORMAT
    if mongodb.is_mongodb(first):
        return mongodb.FORMAT
    if redis_sessions.is_dump(first):
        return redis_sessions.FORMAT
    return None


def _read_vertex(
    paths: list[Path], spec: SourceSpec, sink: RejectSink, states: list[pd.DataFrame]
) -> Iterator[Batch]:
    """Agent Engine API JSON: files of sessions (``sessions.get``/``list``) first, so their
    users name the events of the pages read after them."""
    sessions = vertex.Sessions(engines=spec.engines)
    for path in sorted(paths, key=lambda p: not _holds_sessions(p)):  # stable: order kept
        for records, locations in _records(path, sink):
            yield from vertex.batches(records, locations, sessions, sink)
    states.extend(sessions.states)


NAMES = {
    "adk-java-json": "ADK Java event JSON",
    "adk-session-json": "ADK Python event JSON (adk run --save_session)",
    "vertex-ai-json": "Vertex AI Agent Engine API responses",
    "firestore-json": "a Firestore export of ADK's FirestoreSessionService",
    mongodb.FORMAT: "mongoexport files of an ADK Python MongoDB session store",
    redis_sessions.FORMAT: "ADK Python's RedisSessionService (a live server or a dump)",
    bigquery_analytics.FORMAT: "the BigQuery Agent Analytics table",
}
"""What each file format of ``[events]`` is, in words."""


def read_as(spec: SourceSpec) -> str:
    """The format ``[events]`` is read as: the manifest's, else the one its first file's
    records (or Parquet columns) show; a database is told apart when it is read."""
    if spec.format is not None:
        return spec.format
    if spec.is_database:
        if _names_bigquery(spec):
            return bigquery_analytics.FORMAT
        return "sql or adk-python-db (told apart by its tables)"
    return export_format(spec) or looks_like(spec) or JAVA_JSON.source_format


def looks_like(spec: SourceSpec) -> str | None:
    """The file format of ``[events]`` its first file's first records look like, whatever
    format the manifest gives; None when they look like none the kit reads (or it is a
    database or a snapshot)."""
    if spec.is_database or spec.format == PARQUET:
        return None
    try:
        paths = expand_paths(spec.paths, what=WHAT)
    except SourceError:
        return None
    if not paths:
        return None
    if bigquery_analytics.detect(paths[0]):
        return bigquery_analytics.FORMAT
    first = _first_records(paths[0])
    store = _store_export(first)
    if store is not None:
        return store
    record = first[0] if first and isinstance(first[0], dict) else {}
    nested = record.get("events")
    sample = [r for r in (nested if isinstance(nested, list) else first)[:_PEEK_RECORDS]]
    events = [_as_object(r) for r in sample]
    if any(
        isinstance(e, dict) and "author" in e and ("invocationId" in e or "invocation_id" in e)
        for e in events
    ):
        return _origin(None, events).source_format
    return None


def looked_like(path: Path) -> str:
    """`` (it looks like the BigQuery Agent Analytics table)``, when it does."""
    return (
        " (it looks like the BigQuery Agent Analytics table)"
        if bigquery_analytics.detect(path)
        else ""
    )


def _read_analytics(paths: list[Path], spec: SourceSpec, sink: RejectSink) -> Batch:
    """The BigQuery Agent Analytics rows of every file as the events they stand for."""
    with bulk_decoding():  # the rows' decoded JSON makes no reference cycles
        rows = bigquery_analytics.read(paths, sink, naive=spec.naive_timestamps)
        return _analytics_batch(rows, sink)


def _analytics_batch(rows: pd.DataFrame, sink: RejectSink) -> Batch:
    """The events the Agent Analytics ``rows`` stand for (exported or read live), with
    warnings of what the table lost here (open or dropped invocations, cut text)."""
    with bulk_decoding():  # the rows' decoded JSON makes no reference cycles
        bigquery_analytics.warn_limits(rows, sink)
        bigquery_analytics.warn_truncation(rows, sink)
        return bigquery_events.batch(rows, sink)


def _holds_sessions(path: Path) -> bool:
    first = _first_records(path)[:1]
    return bool(first) and vertex.kind(first[0]) in ("session", "sessions")


def _read_mongodb(
    paths: list[Path], filters: Filters, sink: RejectSink, states: list[pd.DataFrame]
) -> Iterator[Batch]:
    """mongoexport files, each one collection (told by its documents' shape): their events a
    chunk at a time, then the stored state of every file."""
    store = mongodb.Store()
    for path in paths:
        for records, locations in _records(path, sink):
            yield from mongodb.batches(records, locations, path.name, store, sink)
    states.append(store.state(filters, sink))


def _read_redis_dump(
    paths: list[Path],
    spec: SourceSpec,
    filters: Filters,
    sink: RejectSink,
    states: list[pd.DataFrame],
) -> Iterator[Batch]:
    """A dump of RedisSessionService's keys: the events of each chunk's sessions, then the
    stored state."""
    store = redis_sessions.Store(redis_sessions.key_prefix(spec))
    for path in paths:
        for records, locations in _records(path, sink):
            batch = redis_sessions.read_dump(records, locations, store, sink)
            if batch is not None:
                yield batch
    if store.vanished:
        sink.warn(
            paths[0].name,
            f"{store.vanished} keys of the dump have no value (gone before the dump read them)",
        )
    states.append(stored_state.combined(store.states, filters))


def _read_firestore(paths: list[Path], sink: RejectSink, states: list[pd.DataFrame]) -> Batch:
    """A Firestore export: every document filed first (events need their sessions), then
    the events as one batch, with the warning of what such events cannot tell."""
    store = firestore.Store()
    for path in paths:
        for records, locations in _records(path, sink):
            firestore.read(records, locations, store, sink)
    states.append(build("session_state", store.state(sink)))
    if store.skipped:
        sink.warn(
            str(paths[0].name),
            f"{store.skipped} Firestore documents are not in the layout of ADK's "
            "FirestoreSessionService (sessions, user-event, app-state, user-state): not read",
        )
    if store.events:
        sink.warn(str(paths[0].name), firestore.limits_warning(store))
    return store.batch()


def _read_file(
    path: Path, fmt: str | None, sink: RejectSink, column: str, states: list[pd.DataFrame]
) -> Iterator[Batch]:
    """The batches of one file, read as the normaliser asks: none when the file is empty.

    A session document is one batch (its ``state`` goes to ``states``). JSON lines stream, a
    chunk at a time, so a file of millions of events never sits in memory as dicts; the
    first chunk decides the origin of them all. Bare events come as their JSON text, which
    the normaliser decodes by types; rows of an events table come decoded.
    """
    require_content(path, what=WHAT)
    shape = _peek(path)  # None: no line is readable text; read as lines, each a reject
    if shape == "document":
        doc = read_json_document(path, what=WHAT)
        if _is_event_list(doc):  # a JSON array of events, or of events-table rows
            locations = [f"{path.name}:[{i}]" for i in range(len(doc))]
            yield _batch(doc, locations, fmt, column, None)
        else:
            yield _read_sessions(path, doc, fmt, sink, states)
        return
    first = _first_records(path)[:1]
    texts = bool(first) and isinstance(first[0], dict) and not _is_row_export(first[0], column)
    origin: Origin | None = None
    for records, locations in iter_json_line_chunks(
        path, sink, what=WHAT, size=adk_events.CHUNK, decode=not texts
    ):  # bare events stay text, for the normaliser to decode by types
        batch = _batch(records, locations, fmt, column, origin)
        origin = batch.origin  # the first chunk decides for the file
        yield batch
        del records, locations, batch  # before the next chunk is decoded


def _is_event_list(doc: Any) -> bool:
    """A JSON array whose first item is an object but not a session (no ``events`` list)."""
    return (
        isinstance(doc, list)
        and bool(doc)
        and isinstance(doc[0], dict)
        and (not isinstance(doc[0].get("events"), list))
    )


def _batch(
    records: list[Any], locations: list[str], fmt: str | None, column: str, origin: Origin | None
) -> Batch:
    """Bare events, or rows of an events table (the event nested in ``column``)."""
    first = records[0] if records and isinstance(records[0], dict) else {}
    rows = _is_row_export(first, column)
    if rows:
        events = [r.get(column) if isinstance(r, dict) else r for r in records]
        batch = _row_batch(records, locations, column, origin or _origin(fmt, events))
    else:
        meta = pd.DataFrame({"location": locations})
        batch = Batch(pd.Series(records, dtype=object), meta, origin or _origin(fmt, records))
    return batch


ROW_KEYS = ("event_id", "app_name", "user_id", "session_id", "invocation_id")
"""Columns of an exported events-table row that name the event and its session."""


def _is_row_export(first: dict[str, Any], column: str) -> bool:
    """Whether JSON lines are rows of an events table (the event nested in ``column``).

    An ADK event has no key of that name (``event`` by default); a ``psql`` ``row_to_json``
    or database-tool export of ``adk_event`` nests the event JSON there.
    """
    return isinstance(first.get(column), dict | str) and "author" not in first


def _row_batch(records: list[Any], locations: list[str], column: str, origin: Origin) -> Batch:
    """A batch of row objects: the nested events, the rows' own columns as their keys."""
    meta = pd.DataFrame({"location": locations})
    for key in ROW_KEYS:
        meta[key] = pd.Series(
            [r.get(key) if isinstance(r, dict) else None for r in records], dtype=object
        )
    events = [r.get(column) if isinstance(r, dict) else r for r in records]
    return Batch(pd.Series(events, dtype=object), meta, origin)


def _peek(path: Path) -> str | None:
    """``"lines"``, ``"document"`` (a session or a list of them), or None when no line is
    readable text."""
    line = next(iter_lines(path, what=WHAT), None)  # the generator closes the file on release
    if line is None:
        return None
    first = line[1].strip()
    if first.startswith("["):
        return "document"
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        # A document spread over lines, or JSON lines whose first line is broken.
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return "lines"
        return "document"
    return "document" if isinstance(value, dict) and "events" in value else "lines"


def _read_sessions(
    path: Path, doc: Any, fmt: str | None, sink: RejectSink, states: list[pd.DataFrame]
) -> Batch:
    """The events of a session document, or of a list of them, with the session's keys; each
    session's ``state`` goes to ``states``."""
    sessions = doc if isinstance(doc, list) else [doc]
    values: list[Any] = []
    meta: dict[str, list[Any]] = {"location": [], "app_name": [], "user_id": [], "session_id": []}
    for number, session in enumerate(sessions):
        where = f"{path.name}:" + (f"[{number}]." if isinstance(doc, list) else "")
        keys = _session_keys(session, path, where)
        events = session["events"]
        values.extend(events)
        meta["location"].extend(f"{where}events[{i}]" for i in range(len(events)))
        for col, value in keys.items():
            meta[col].extend([value] * len(events))
        states.append(
            session_state.from_document(
                session.get("state"),
                app_name=keys["app_name"],
                user_id=keys["user_id"],
                session_id=keys["session_id"],
                updated_at=session.get("lastUpdateTime", session.get("last_update_time")),
                source="session JSON state",
                location=where.rstrip(":."),
                sink=sink,
            )
        )
    return Batch(pd.Series(values, dtype=object), pd.DataFrame(meta), _origin(fmt, values))


def _session_keys(session: Any, path: Path, where: str) -> dict[str, str]:
    if not isinstance(session, dict) or not isinstance(session.get("events"), list):
        raise SchemaError(
            f"{WHAT}: not an ADK session document (an object with an events list)",
            value=f"{where.rstrip(':.')} in {path}",
            fix="give a session JSON (adk run --save_session, Session.toJson()) or JSON lines",
        )
    keys = {
        "app_name": session.get("appName", session.get("app_name")),
        "user_id": session.get("userId", session.get("user_id")),
        "session_id": session.get("id"),
    }
    missing = [name for name, value in keys.items() if not isinstance(value, str) or not value]
    if missing:
        raise SchemaError(
            f"{WHAT}: session document lacks {', '.join(missing)}",
            value=f"{where.rstrip(':.')} in {path}",
            fix="a session JSON needs id, appName and userId; export the session again",
        )
    return {name: str(value) for name, value in keys.items()}


def _as_object(record: Any) -> Any:
    """A record as an object for detection: event JSON kept as text (a row export) decoded."""
    if isinstance(record, str):
        try:
            return json.loads(record)
        except (ValueError, RecursionError):
            return None
    return record


def _origin(fmt: str | None, records: list[Any]) -> Origin:
    """Java or Python event JSON: from the format, else from the first timestamped record.

    snake_case keys mean ADK Python; camelCase with an epoch-millisecond timestamp means
    ADK Java; camelCase with epoch seconds means ADK Python's by-alias JSON.
    """
    if fmt == "adk-session-json":
        return PYTHON_SESSION_JSON
    if fmt is not None:
        return JAVA_JSON
    sample = [_as_object(record) for record in records[:_DETECT_SAMPLE]]
    for record, stamp in zip(sample, pluck(sample, ("timestamp",)), strict=True):
        if type(stamp) not in (int, float):
            continue
        if "invocation_id" in record or stamp < MS_THRESHOLD:
            return PYTHON_SESSION_JSON
        return JAVA_JSON
    return JAVA_JSON
