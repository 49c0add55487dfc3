"""Baselines pushed into the engine: aggregates over long windows, computed where the data is.

A flow asks for a baseline of one source (``[events]`` or ``[ledger]``) over a window; a
database computes it with the Core queries of :mod:`.queries` (PostgreSQL, MySQL/MariaDB,
SQLite, over the kit's read-only connection), JSONL or Parquet files with the same queries
run by DuckDB in-process over a view of the files (:mod:`.files`). :func:`pushable` says
whether a source can be; otherwise the flows fall back to loading the window's frames into
pandas. Every result says where it was computed (``where``), for the findings text. The
dialect features used are in :mod:`.dialects` and ``docs/baselines.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy.engine import Connection

from incidentkit.baselines import files, queries
from incidentkit.baselines.dialects import NAMES, check_engine, is_mariadb, prepare
from incidentkit.errors import ParameterError
from incidentkit.manifest import PARQUET, Filters, SourceSpec
from incidentkit.sources import sql

__all__ = ["Baseline", "call_histogram", "error_buckets", "latency_summary", "pushable"]


@dataclass(frozen=True)
class Baseline:
    """One aggregate and where it was computed (``"PostgreSQL over adk_event"``)."""

    value: Any
    where: str


def pushable(spec: SourceSpec | None) -> bool:
    """Whether ``spec``'s baseline can be computed in its engine: a database, or event
    lines / Parquet files DuckDB reads (a ledger export is loaded instead)."""
    if spec is None or spec.format == PARQUET:  # a snapshot: its frames are loaded
        return False
    if spec.is_database:
        return spec.section in ("events", "ledger") and spec.format != "adk-redis"  # no SQL
    return spec.section == "events" and files.readable(spec)


@contextmanager
def _connected(
    spec: SourceSpec, environ: Mapping[str, str] | None, *, what: str
) -> Iterator[Connection]:
    engine = sql.open_source(spec, environ, what=what)
    try:
        with sql.connect(engine, what=what) as conn:
            check_engine(conn, what=what)
            prepare(conn)
            yield conn
    finally:
        engine.dispose()


def _engine_name(conn: Connection) -> str:
    return "MariaDB" if is_mariadb(conn) else NAMES[conn.dialect.name]


def _files_label(spec: SourceSpec) -> str:
    shown = ", ".join(p.name for p in spec.paths[:2]) + (" ..." if len(spec.paths) > 2 else "")
    return f"DuckDB over {shown}"


def _require(spec: SourceSpec, section: str) -> None:
    if spec.section != section or not pushable(spec):
        raise ParameterError(
            f"the [{spec.section}] source cannot compute this baseline in its engine",
            value=spec.location(),
            fix="check baselines.pushable(spec) first; the flows then load the frames instead",
        )


def call_histogram(
    spec: SourceSpec,
    filters: Filters,
    *,
    marked: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Baseline:
    """Invocations per (model calls, ended, hit_limit, marked) of the ``[events]`` source
    (:func:`queries.call_histogram`); ``marked`` names invocations to tell apart (those the
    incident window flags)."""
    _require(spec, "events")
    if not spec.is_database:
        return Baseline(files.call_histogram(spec, filters, marked), _files_label(spec))
    what = f"events baseline {spec.location()}"
    with _connected(spec, environ, what=what) as conn:
        table = queries.event_table(conn, spec, what=what)
        frame = queries.call_histogram(conn, table, filters, marked)
        return Baseline(frame, f"{_engine_name(conn)} over {table.info.name}")


def latency_summary(
    spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None
) -> Baseline:
    """Runs, ended runs, errors and p50/p95/p99 latency (ms) of the ended ones, from the
    ``[events]`` (first to last event) or ``[ledger]`` (``started_at`` to ``updated_at``)."""
    _require(spec, spec.section)
    if not spec.is_database:
        return Baseline(files.latency_summary(spec, filters), _files_label(spec))
    what = f"{spec.section} baseline {spec.location()}"
    with _connected(spec, environ, what=what) as conn:
        runs, name = _runs(conn, spec, filters, what=what)
        return Baseline(queries.latency_summary(conn, runs), f"{_engine_name(conn)} over {name}")


def error_buckets(
    spec: SourceSpec,
    filters: Filters,
    size: pd.Timedelta,
    *,
    environ: Mapping[str, str] | None = None,
) -> Baseline:
    """Runs and errors per ``size`` bucket of start time (:func:`queries.error_buckets`)."""
    _require(spec, spec.section)
    if not spec.is_database:
        return Baseline(files.error_buckets(spec, filters, size), _files_label(spec))
    what = f"{spec.section} baseline {spec.location()}"
    with _connected(spec, environ, what=what) as conn:
        runs, name = _runs(conn, spec, filters, what=what)
        return Baseline(
            queries.error_buckets(conn, runs, size), f"{_engine_name(conn)} over {name}"
        )


def _runs(conn: Connection, spec: SourceSpec, filters: Filters, *, what: str) -> tuple[Any, str]:
    if spec.section == "ledger":
        return queries.ledger_runs(conn, spec, filters, what=what), spec.table or "agent_run"
    table = queries.event_table(conn, spec, what=what)
    return queries.event_runs(conn, table, filters), table.info.name
