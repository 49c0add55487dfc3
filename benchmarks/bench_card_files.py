"""Benchmark: the triage card over a week of events in a Parquet file, by DuckDB against pandas.

    .venv/bin/python benchmarks/bench_card_files.py --url postgresql+psycopg://postgres@127.0.0.1:5432/ik_bench_card_7296
    .venv/bin/python benchmarks/bench_card_files.py --url ... --slice 0.02 --keep

Exports ``adk_event`` of the database at ``--url`` (the fleet ``bench_card.py --keep`` built:
10,000,000 events over 7 days; only read, in a read-only transaction) to a Parquet file of the
kit's shape (``event_id, app_name, user_id, session_id, invocation_id, ts``, ``event`` as JSON
text), streamed: ADBC's PostgreSQL driver (binary COPY into Arrow) into a pyarrow
``ParquetWriter``, a batch at a time. The file is kept in /tmp and removed at the end unless
``--keep`` (``--parquet`` reuses one). The ledger is left out: the engine card does not read a
ledger file (``docs/engine-card.md``), so both cards time runs from the events.

Then, each in its own process (peak RSS is that path's alone, imports included):

- ``duckdb``: the overview's card with ``card_engine = "yes"`` over the whole week of the
  Parquet file (an in-memory DuckDB reading it, capped at ``files.MEMORY_LIMIT``), each check
  timed;
- ``pandas``: the card with ``card_engine = "no"`` on a slice of the week (``--slice``, default
  2 %, a manifest window) of the same events, loaded by the kit from the PostgreSQL table (the
  kit's loader reads no Parquet events-table export), scaled to the week by the slice;
- ``duckdb`` again on the slice (the Parquet file, the same window), whose card must equal
  the pandas card (check, severity, count).

Printed: the export, per check seconds, the whole card's seconds and peak RSS per path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_card

START, DAYS = bench_card.START, bench_card.DAYS
COLUMNS = "event_id, app_name, user_id, session_id, invocation_id, ts, event::text AS event"
GROUP_ROWS = 262_144
"""Rows per Parquet row group (about; the Arrow batches from PostgreSQL are gathered)."""
MANIFEST = """
title = "bench: a week of a fleet, its events in {what}"
allow_outside = true  # ours: --parquet may name an earlier export in another folder
window = {{ start = "{start}", end = "{end}" }}

[events]
{events}

[apps.support]
terminal_agent = "support_agent"
key_templates = {{}}
client_timeout_s = 60

[apps.billing]
terminal_agent = "support_agent"
key_templates = {{}}
client_timeout_s = 60
"""


def export(url: str, target: Path, *, limit: int | None = None) -> tuple[int, float]:
    """Every row of ``adk_event`` (the first ``limit``, for a trial) into the Parquet file
    ``target`` (rows, seconds), streamed in a read-only transaction that is rolled back."""
    import adbc_driver_postgresql.dbapi as adbc
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sqlalchemy.engine import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    began = time.perf_counter()
    rows = 0
    with adbc.connect(conninfo) as conn, conn.cursor() as cursor:
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.adbc_statement.set_options(
            **{"adbc.postgresql.batch_size_hint_bytes": str(16 * 1024 * 1024)}
        )
        cursor.execute(
            f"SELECT {COLUMNS} FROM adk_event" + (f" LIMIT {int(limit)}" if limit else "")
        )
        reader = cursor.fetch_record_batch()
        with pq.ParquetWriter(target, reader.schema, compression="zstd") as writer:
            pending: list[pa.RecordBatch] = []
            for batch in reader:
                pending.append(batch)
                rows += batch.num_rows
                if sum(b.num_rows for b in pending) >= GROUP_ROWS:
                    writer.write_table(pa.Table.from_batches(pending))
                    pending = []
            if pending:
                writer.write_table(pa.Table.from_batches(pending))
        conn.rollback()
    return rows, time.perf_counter() - began


def write_manifest(folder: Path, fraction: float, events: str, what: str) -> Path:
    import pandas as pd

    start = pd.Timestamp(START)
    end = start + pd.Timedelta(days=DAYS) * fraction
    path = folder / f"evidence-{what}-{fraction:g}.toml"
    text = MANIFEST.format(start=start.isoformat(), end=end.isoformat(), events=events, what=what)
    path.write_text(text, encoding="utf-8")
    return path


def _child(manifest: Path, engine: str, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--part", engine, "--manifest", str(manifest)],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "IK_BENCH_URL": url},
    )
    if out.returncode:
        sys.exit(f"the {engine} card failed ({manifest.name}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _said(name: str, found: dict[str, Any], note: str = "") -> None:
    print(
        f"{name:14} {found['seconds']:8.2f} s  peak RSS {found['peak_mb']:6.0f} MB"
        f"  (setup {found['setup_seconds']:.2f} s; {found['computed'] or 'pandas'}){note}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="the database of bench_card.py --keep (read only)")
    parser.add_argument("--slice", type=float, default=0.02, help="pandas path: part of the week")
    parser.add_argument("--parquet", help="use this Parquet export as it is (an earlier --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the Parquet file")
    parser.add_argument("--part", choices=["yes", "no"], help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:  # a child: one card, its result as the last line
        print(json.dumps(bench_card.part(args.manifest, args.part), default=str))
        return
    if not args.url:
        parser.error("--url is required: the database bench_card.py --keep built")

    folder = Path(tempfile.mkdtemp(prefix="ik-bench-card-files-"))
    parquet = Path(args.parquet) if args.parquet else folder / "adk_event.parquet"
    try:
        if not args.parquet:
            rows, seconds = export(args.url, parquet)
            size = parquet.stat().st_size
            print(
                f"export: {rows:,} events to {parquet} ({size / 2**20:,.0f} MB) in {seconds:.1f} s"
            )
        files = f'path = "{parquet}"'
        table = 'url = "env:IK_BENCH_URL"\ntable = "adk_event"'
        week = write_manifest(folder, 1.0, files, "parquet")
        duck = _child(week, "yes", args.url)
        _said("duckdb  week", duck)
        pandas = _child(write_manifest(folder, args.slice, table, "postgresql"), "no", args.url)
        _said("pandas  slice", pandas, f"; {args.slice:.0%} of the week, from PostgreSQL")
        small = _child(write_manifest(folder, args.slice, files, "parquet"), "yes", args.url)
        _said("duckdb  slice", small)
        bench_card.compare("duckdb", duck, pandas, small, args.slice)
    finally:
        if args.keep and not args.parquet:
            print(f"kept {parquet}")
        elif not args.parquet:
            parquet.unlink(missing_ok=True)
        for left in folder.glob("*.toml"):
            left.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()


if __name__ == "__main__":
    main()
