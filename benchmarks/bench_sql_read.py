"""Benchmark bulk reads of a ledger table from PostgreSQL: COPY, read_sql, the kit.

    .venv/bin/python benchmarks/bench_sql_read.py [--rows N]      # default 1,000,000

Creates a scratch database on the server of ``INCIDENTKIT_TEST_DATABASE_URL`` (default: the
local trust-auth server), loads N synthetic ``agent_run`` rows (a ~300-byte jsonb request each)
with COPY FROM, then times, each in its own process so peak RSS is per case:

    a  raw psycopg ``COPY (SELECT ...) TO STDOUT`` into a BytesIO (the baseline)
    b  ``pandas.read_sql`` of the same query
    e  raw ADBC: the typed table into Arrow (``cursor.fetch_arrow_table()``), no pandas
    c  the kit's ``sql.read_frame`` (ADBC, every value cast to text, into pandas)
    d  the kit's full ``ledger.load`` (read, parse times and JSON, check, sort, conform)

Each case runs ``--repeat`` times (default 3), the cases alternated so a busy moment of a
shared machine hits them all; the best time of each is shown. It prints rows/s, the share of
raw COPY's throughput and each process's peak RSS, then drops the database.
The imports-only line shows what every process pays before reading.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import uuid
from typing import Any

import fresh
import sqlalchemy as sa

COLUMNS = (
    "run_id, app_name, user_id, session_id, invocation_id, request, status, owner, "
    "lease_until, attempts, started_at, updated_at"
)
QUERY = f"SELECT {COLUMNS} FROM agent_run"
CASES = {
    "imports": "imports only (no read)",
    "a": "psycopg COPY TO STDOUT",
    "b": "pandas.read_sql",
    "e": "ADBC fetch_arrow_table",
    "c": "kit sql.read_frame",
    "d": "kit ledger.load",
}
STATUSES = ("DONE", "DONE", "DONE", "RUNNING", "FAILED", "PAUSED", "PARKED")
FILLER = "Please send invoice {i} to the customer and confirm the amount, the due date "
FILLER += "and the billing address on file; attach the usual terms and cc accounts payable. "


def populate(url: str, rows: int, chunk: int = 50_000) -> None:
    """Create agent_run and COPY ``rows`` synthetic runs into it."""
    from incidentkit import store

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY agent_run ({COLUMNS}) FROM STDIN (FORMAT csv)") as copy:  # type: ignore[attr-defined]
            for start in range(0, rows, chunk):
                copy.write(_csv_block(start, min(start + chunk, rows)))
        cursor.execute("ANALYZE agent_run")
        raw.commit()
    finally:
        raw.close()
        engine.dispose()


def _csv_block(start: int, stop: int) -> str:
    lines = []
    base = 1_795_000_000.0  # 2026-11-18
    for i in range(start, stop):
        request = json.dumps(
            {"role": "user", "parts": [{"text": FILLER.format(i=i)}], "n": i}
        ).replace('"', '""')
        started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i // 2))
        updated = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i // 2 + 30))
        status = STATUSES[i % len(STATUSES)]
        owner, lease = ("", "") if status == "DONE" else (f"worker-{i % 8}", f"{updated}Z")
        lines.append(
            f'{uuid.UUID(int=i + 1)},billing,u-{i % 977},s-{i // 4},e-{i},"{request}",{status},'
            f"{owner},{lease},{i % 4},{started}Z,{updated}Z\n"
        )
    return "".join(lines)


def run_case(case: str, url: str) -> dict[str, Any]:
    """Run one case in this process; returns rows, seconds and peak RSS."""
    import pandas as pd

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import sql
    from incidentkit.sources.sql import ledger

    started = time.perf_counter()
    rows = 0
    if case == "a":
        rows = fresh.copy_out(url, QUERY).count(b"\n") - 1
    elif case == "b":
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            rows = len(pd.read_sql(sa.text(QUERY), conn))
        engine.dispose()
    elif case == "e":
        import adbc_driver_postgresql.dbapi as adbc

        conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
        with adbc.connect(conninfo) as raw, raw.cursor() as cursor:
            cursor.execute(QUERY)
            rows = cursor.fetch_arrow_table().num_rows
    elif case == "c":
        engine = sql.open_engine(url, what="bench")
        with sql.connect(engine, what="bench") as conn:
            table = sa.Table("agent_run", sa.MetaData(), autoload_with=conn)
            statement = sa.select(*(table.c[name.strip()] for name in COLUMNS.split(",")))
            rows = len(sql.read_frame(conn, statement, what="bench"))
        engine.dispose()
    elif case == "d":
        loaded = ledger.load(SourceSpec("ledger", url_ref=url), Filters())
        rows = len(loaded.frames["runs"]) + len(loaded.rejects)
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"rows": rows, "seconds": seconds, "peak_mb": peak_kb / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each case, alternated; the best is shown"
    )
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.url)))
        return

    with fresh.scratch_database() as url:
        started = time.perf_counter()
        populate(url, args.rows)
        load_s = time.perf_counter() - started
        print(f"{args.rows:,} rows into the scratch database by COPY FROM in {load_s:.1f} s")
        command = [sys.executable, __file__, "--case"]
        results = fresh.best_of(lambda case: [*command, case, "--url", url], CASES, args.repeat)
        base = results["a"]["seconds"]
        print(f"best of {args.repeat} runs per case; speed = rows/s as a share of raw COPY's")
        print(f"{'case':<30}{'rows':>11}{'seconds':>9}{'rows/s':>11}{'speed':>8}{'peak RSS':>11}")
        for case, label in CASES.items():
            r = results[case]
            rate = f"{r['rows'] / r['seconds']:,.0f}" if r["rows"] else "-"
            share = f"{base / r['seconds']:.2f}" if r["rows"] else "-"
            print(
                f"{case + ' ' + label:<30}{r['rows']:>11,}{r['seconds']:>9.2f}{rate:>11}"
                f"{share:>8}{r['peak_mb']:>8.0f} MB"
            )
        kit = base / results["d"]["seconds"]
        print(f"ledger.load at {kit:.2f} of raw COPY throughput (target >= 0.9)")


if __name__ == "__main__":
    main()
