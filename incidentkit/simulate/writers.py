"""Streaming writers: one per output format, each writing records as they come.

Files are written line by line through a large buffer; SQL tables receive batches through
:func:`incidentkit.store.insert_rows` (COPY on PostgreSQL). Nothing holds the whole world.
"""

from __future__ import annotations

import csv
import heapq
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from incidentkit.simulate.model import JournalRow, LedgerRow, LogRecord, WallClock, iso
from incidentkit.store import insert_rows

BUFFER = 1 << 20
LEDGER_COLUMNS = (
    "run_id",
    "app_name",
    "user_id",
    "session_id",
    "invocation_id",
    "request",
    "status",
    "owner",
    "lease_until",
    "attempts",
    "started_at",
    "updated_at",
)


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def compact(value: Any) -> str:
    """Compact JSON (Jackson's and the collector's style: no spaces)."""
    return _ENCODE(value)


def open_text(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", encoding="utf-8", newline="\n", buffering=BUFFER)


class JsonLines:
    """A JSON-lines file, one compact object per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open_text(path)

    def write(self, obj: Any) -> None:
        self.handle.write(compact(obj) + "\n")

    def close(self) -> None:
        self.handle.close()


class LedgerCsv:
    """The ``agent_run`` export: a header, then one row per run; empty field = null."""

    def __init__(self, path: Path, *, header: bool = True) -> None:
        self.handle = open_text(path)
        self.csv = csv.writer(self.handle, lineterminator="\n")
        if header:
            self.csv.writerow(LEDGER_COLUMNS)

    def write(self, row: LedgerRow) -> None:
        self.csv.writerow(
            (
                row.run_id,
                row.app,
                row.user,
                row.session,
                row.invocation_id or "",
                compact(row.request),
                row.status,
                row.owner or "",
                "" if row.lease_until is None else iso(row.lease_until),
                row.attempts,
                iso(row.started_at),
                iso(row.updated_at),
            )
        )

    def close(self) -> None:
        self.handle.close()


def journal_line(row: JournalRow) -> dict[str, Any]:
    """A journal row as exported (its fields are the table's columns), times as ISO text."""
    return {**asdict(row), "created_at": iso(row.created_at), "updated_at": iso(row.updated_at)}


def log_lines(record: LogRecord, clock: WallClock | None = None) -> str:
    """``2026-11-29T03:10:00.123Z INFO  c.e.agent.DiagnosticsPlugin - run.start inv=...``
    (the time on ``clock``, the JVM host's; UTC when None)."""
    stamp = iso(record.ts) if clock is None else clock.log_time(record.ts)
    head = f"{stamp} {record.level:<5} {record.logger} - {record.message}\n"
    if not record.throwable:
        return head
    return head + "".join(line + "\n" for line in record.throwable)


class DiagnosticsLog:
    """The plugin's log in time order: records wait in a heap until no earlier one can come.

    Times are written on the wall clock of the JVM host, whose zone is ``zone``.
    """

    def __init__(self, path: Path, zone: str = "UTC") -> None:
        self.handle = open_text(path)
        self.clock = WallClock(zone)
        self.heap: list[tuple[int, int, LogRecord]] = []
        self.seq = 0
        self.records = 0

    def push(self, records: list[LogRecord]) -> None:
        for record in records:
            heapq.heappush(self.heap, (record.ts, self.seq, record))
            self.seq += 1

    def flush_before(self, ts: int) -> None:
        heap = self.heap
        while heap and heap[0][0] < ts:
            self.handle.write(log_lines(heapq.heappop(heap)[2], self.clock))
            self.records += 1

    def close(self) -> None:
        while self.heap:
            self.handle.write(log_lines(heapq.heappop(self.heap)[2], self.clock))
            self.records += 1
        self.handle.close()


def _records(path: Path) -> Iterator[tuple[str, str]]:
    """(timestamp, text) of each record of a written diagnostics log (stack traces included)."""
    with path.open(encoding="utf-8", newline="") as handle:
        record: list[str] = []
        for line in handle:
            if line[:4].isdigit() and line[4:5] == "-" and record:
                yield record[0][:24], "".join(record)
                record = []
            record.append(line)
        if record:
            yield record[0][:24], "".join(record)


def merge_logs(parts: list[Path], target: Path) -> None:
    """Merge time-ordered logs into one, record by record (ties keep the order of ``parts``).

    Records sort by their written time, so every part must be written in the same zone.
    """
    with open_text(target) as out:
        for _, text in heapq.merge(*(_records(p) for p in parts), key=lambda r: r[0]):
            out.write(text)


class Table:
    """Rows for one SQL table, inserted in batches."""

    def __init__(self, engine: Engine, table: sa.Table, *, batch: int = 20_000) -> None:
        self.engine, self.table, self.batch = engine, table, batch
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            insert_rows(self.engine, self.table, self.rows, batch=self.batch)
            self.rows = []

    def close(self) -> None:
        self.flush()
