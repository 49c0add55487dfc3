"""The sink of one simulation: routes every record to its file or SQL table and counts them.

A pack is written by one main :class:`Pack` (the scenario's own invocations) and, at large
scales, by background shards writing part files in other processes; :meth:`Pack.absorb` appends
the parts in shard order, so the bytes depend on the arguments only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from incidentkit import store
from incidentkit.errors import SimulationError
from incidentkit.simulate import javafmt, pyfmt
from incidentkit.simulate.model import Bundle, Event, LedgerRow, aware
from incidentkit.simulate.pystore import PythonStore, write_python_store
from incidentkit.simulate.writers import (
    DiagnosticsLog,
    JsonLines,
    LedgerCsv,
    Table,
    journal_line,
    merge_logs,
)

PARTS = ".parts"
SPILL = ".events.spill.jsonl"
SQLITE_EVENTS = "sessions.db"
TERMINAL = ("DONE", "FAILED", "PARKED")


@dataclass
class Counts:
    """How many rows each canonical frame must hold after loading the pack."""

    runs: int = 0
    events: int = 0
    calls: int = 0
    responses: int = 0
    state_writes: int = 0
    journal: int = 0
    spans: int = 0
    diagnostics: int = 0
    threads: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, other: Counts) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


@dataclass
class PartResult:
    """What one background shard wrote (part files) and saw."""

    part: str
    counts: Counts
    open_rows: list[LedgerRow]
    python: PythonStore
    log_records: int


class Pack:
    """Writes one pack: files in ``out``, or ledger/events/journal into ``into``'s database.

    ``part`` names a shard: everything then goes to part files under ``out/.parts`` (``sql``:
    ledger, events and journal as SQL rows for the main pack to insert). ``zone`` is the JVM
    host's time zone, in which the diagnostics log is written.
    """

    def __init__(
        self,
        out: Path,
        *,
        events_format: str,
        window: tuple[int, int],
        into: str | None = None,
        part: str | None = None,
        split_log: bool = False,
        sql: bool = False,
        zone: str = "UTC",
    ) -> None:
        self.out, self.window, self.part = out, window, part
        self.java = events_format == "adk-java"
        self.sql = sql or into is not None  # rows for SQL (a database, or a shard's parts)
        self.counts = Counts()
        self.open_rows: list[LedgerRow] = []
        self.python = PythonStore()
        self.engine: Engine | None = None
        if into is not None and part is None:
            self.engine = sa.create_engine(into, poolclass=sa.pool.NullPool)
            store.create_tables(self.engine, store.kit_metadata)
            if not self.java:
                store.create_tables(self.engine, store.adk_python_metadata)
        self.ledger: Any
        self.journal: Any
        self.events: Any
        if self.engine is not None:
            self.ledger = Table(self.engine, store.agent_run)
            self.journal = Table(self.engine, store.tool_journal)
        elif self.sql:
            self.ledger, self.journal = (
                JsonLines(self.path("ledger")),
                JsonLines(self.path("journal")),
            )
        else:
            self.ledger = LedgerCsv(self.path("ledger.csv"), header=part is None)
            self.journal = JsonLines(self.path("journal.jsonl"))
        if not self.java:
            self.events = JsonLines(self.path(SPILL))
        elif self.engine is not None:
            self.events = Table(self.engine, store.adk_event)
        else:
            self.events = JsonLines(self.path("events" if self.sql else "events.jsonl"))
        self.spans = JsonLines(self.path("spans.otlp.jsonl"))
        if part is not None:
            log_path = self.path("diagnostics.log")
        elif split_log:
            log_path = out / PARTS / "main-diagnostics.log"
        else:
            log_path = out / "diagnostics.log"
        self.log = DiagnosticsLog(log_path, zone)

    def path(self, name: str) -> Path:
        if self.part is None:
            return self.out / name
        return self.out / PARTS / f"{self.part}-{name}"

    # -- records -----------------------------------------------------------------------------
    def _check(self, ts: int, what: str) -> None:
        if not self.window[0] <= ts < self.window[1]:
            raise SimulationError(
                f"a simulated {what} falls outside the scenario window",
                value=ts,
                fix="this is a simulator bug: widen the scenario's window",
            )

    def emit(self, bundle: Bundle) -> None:
        """Write everything one invocation left behind."""
        self.log.flush_before(bundle.start)
        low, high = self.window
        for record in bundle.logs:
            if not low <= record.ts < high:
                self._check(record.ts, "log line")
        self.log.push(bundle.logs)
        self.counts.diagnostics += len(bundle.logs)
        for row in bundle.ledger:
            self._check(row.started_at, "ledger row")
            self.counts.runs += 1
            if row.status not in TERMINAL:
                self.open_rows.append(row)
            self.ledger.write(self._sql(_ledger_sql(row)) if self.sql else row)
        for jrow in bundle.journal:
            self._check(jrow.created_at, "journal row")
            self.counts.journal += 1
            self.journal.write(self._sql(asdict(jrow)) if self.sql else journal_line(jrow))
        for event in bundle.events:
            self._event(event)
        exported = [sp for sp in bundle.spans if sp.end is not None]
        if exported:
            encode = javafmt.span if self.java else pyfmt.span
            for sp in exported:
                if not low <= sp.start < high:
                    self._check(sp.start, "span")
            self.spans.write(javafmt.resource_spans(bundle.service, [encode(s) for s in exported]))
            self.counts.spans += len(exported)

    def _event(self, e: Event) -> None:
        if not self.window[0] <= e.ts < self.window[1]:
            self._check(e.ts, "event")
        if self.java:
            if e.only == "adk-python":
                return
            delta_keys = len(e.state_delta)
            if self.sql:
                self.events.write(
                    self._sql(
                        {
                            "event_id": e.event_id,
                            "app_name": e.app,
                            "user_id": e.user,
                            "session_id": e.session,
                            "invocation_id": e.invocation_id,
                            "ts": e.ts,
                            "event": javafmt.event(e),
                        }
                    )
                )
            else:
                self.events.write(javafmt.dump_line(e))
        else:
            if not pyfmt.stored(e):
                return
            data = pyfmt.event(e)
            delta = data["actions"]["state_delta"]
            delta_keys = len(delta)
            self.python.apply(e, delta)
            self.events.write(
                {
                    "id": e.event_id,
                    "app_name": e.app,
                    "user_id": e.user,
                    "session_id": e.session,
                    "invocation_id": e.invocation_id,
                    "ts": e.ts,
                    "event_data": data,
                }
            )
        self.counts.events += 1
        self.counts.state_writes += delta_keys
        for part in e.parts:
            if part.kind == "call":
                self.counts.calls += 1
            elif part.kind == "response":
                self.counts.responses += 1

    def _sql(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row for SQL: datetimes for the database, epoch ms in a shard's part file."""
        return _dated(row) if self.engine is not None else row

    # -- shards ------------------------------------------------------------------------------
    def finish_part(self) -> PartResult:
        """Close a shard's part files and say what it wrote."""
        if self.part is None:
            raise ValueError("finish_part() is for shard packs")
        self._close_writers()
        return PartResult(self.part, self.counts, self.open_rows, self.python, self.log.records)

    def absorb(self, result: PartResult) -> None:
        """Append one shard's part files (in shard order) to this pack's outputs."""
        self.counts.add(result.counts)
        self.open_rows += result.open_rows
        self.python.merge(result.python)
        parts = self.out / PARTS

        def name(base: str) -> Path:
            return parts / f"{result.part}-{base}"

        if self.engine is not None:
            for base, writer in (("ledger", self.ledger), ("journal", self.journal)):
                for row in _read_rows(name(base)):
                    writer.write(_dated(row))
            if self.java:
                for row in _read_rows(name("events")):
                    self.events.write(_dated(row))
        elif not self.sql:
            _append(name("ledger.csv"), self.ledger.handle)
            _append(name("journal.jsonl"), self.journal.handle)
            if self.java:
                _append(name("events.jsonl"), self.events.handle)
        if not self.java:
            _append(name(SPILL), self.events.handle)
        _append(name("spans.otlp.jsonl"), self.spans.handle)

    # -- the end -----------------------------------------------------------------------------
    def _close_writers(self) -> None:
        self.log.close()
        for writer in (self.ledger, self.journal, self.events, self.spans):
            writer.close()

    def close(self, shard_logs: list[str] | None = None) -> Counts:
        self._close_writers()
        if shard_logs is not None:
            parts = self.out / PARTS
            merge_logs(
                [
                    parts / "main-diagnostics.log",
                    *(parts / f"{p}-diagnostics.log" for p in shard_logs),
                ],
                self.out / "diagnostics.log",
            )
        if not self.java:
            write_python_store(self.engine, self.out / SQLITE_EVENTS, self.python, self.out / SPILL)
        if self.engine is not None:
            self.engine.dispose()
        shutil.rmtree(self.out / PARTS, ignore_errors=True)
        return self.counts


def _append(source: Path, handle: IO[str]) -> None:
    with source.open(encoding="utf-8", newline="") as part:
        shutil.copyfileobj(part, handle, 1 << 20)


_TIMES = ("lease_until", "started_at", "updated_at", "created_at", "ts")


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows a shard wrote for SQL (times still epoch ms)."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def _dated(row: dict[str, Any]) -> dict[str, Any]:
    """Epoch-ms time columns as aware UTC datetimes."""
    for name in _TIMES:
        if row.get(name) is not None:
            row[name] = aware(row[name])
    return row


def _ledger_sql(row: LedgerRow) -> dict[str, Any]:
    return {
        "run_id": row.run_id,
        "app_name": row.app,
        "user_id": row.user,
        "session_id": row.session,
        "invocation_id": row.invocation_id,
        "request": row.request,
        "status": row.status,
        "owner": row.owner,
        "lease_until": row.lease_until,
        "attempts": row.attempts,
        "started_at": row.started_at,
        "updated_at": row.updated_at,
    }
