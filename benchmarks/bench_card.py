"""Benchmark: the triage card over a fleet, in the engine against pandas, in one run.

    .venv/bin/python benchmarks/bench_card.py                       # 10,000,000 events
    .venv/bin/python benchmarks/bench_card.py --events 1000000 --slice 0.2

Builds a scratch PostgreSQL database (dropped at the end unless ``--keep``) with the fleet of
``bench_baseline.py`` (``adk_event``: ADK Java event JSON in ``jsonb``, invocations over 7 days,
80 % of app ``support``, each a user message, 1 to 9 tool calls and answers and a final answer,
one in 9,973 a 500-call loop) and its run ledger (``agent_run``: one run per invocation, DONE
at its last event; one in 4,999 left RUNNING with its lease expired, an orphan; one in 7,919
FAILED), the ``(app_name, ts)`` and ``(app_name, started_at)`` indexes ``incidentkit inspect``
asks for, vacuumed as a table in service is. A manifest points the overview at both tables.

Then, each in its own process (peak RSS is that path's alone, imports included):

- ``engine``: the overview's card with ``card_engine = "yes"`` over the whole week (every
  check in the database; only aggregates and flagged rows travel), each check timed;
- ``pandas``: the same card with ``card_engine = "no"`` (the kit's loaders read every event and
  run of the window into frames, then every check) on a stated slice of the week (``--slice``,
  default 5 %: the week does not fit this machine's share), scaled to the week by the slice;
- ``engine`` again on the slice, whose card must equal the pandas card (check, severity,
  count).

Printed: per check seconds, the whole card's seconds and peak RSS per path, the ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_baseline

ADMIN = bench_baseline.ADMIN
START = bench_baseline.START
DAYS = bench_baseline.DAYS

LEDGER = """
CREATE UNLOGGED TABLE agent_run (
  run_id uuid NOT NULL, app_name text NOT NULL, user_id varchar(128) NOT NULL,
  session_id varchar(128) NOT NULL, invocation_id varchar(256), request jsonb NOT NULL,
  status varchar(16) NOT NULL, owner varchar(128), lease_until timestamptz,
  attempts integer NOT NULL DEFAULT 0, started_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
)"""
LEDGER_FILL = """
INSERT INTO agent_run (run_id, app_name, user_id, session_id, invocation_id, request, status,
                       owner, lease_until, attempts, started_at, updated_at)
SELECT md5('run-' || invocation_id)::uuid, app_name, min(user_id), min(session_id),
       invocation_id, jsonb_build_object('text', 'Where is my order?'),
       CASE WHEN substr(invocation_id, 3)::bigint % 4999 = 0 THEN 'RUNNING'
            WHEN substr(invocation_id, 3)::bigint % 7919 = 0 THEN 'FAILED'
            ELSE 'DONE' END,
       'worker-' || (substr(invocation_id, 3)::bigint % 8),
       min(ts) + interval '30 seconds', 1, min(ts), max(ts)
FROM adk_event GROUP BY app_name, invocation_id
"""
MANIFEST = """
title = "bench: a week of a fleet"
window = {{ start = "{start}", end = "{end}" }}

[events]
url = "env:IK_BENCH_URL"
table = "adk_event"

[ledger]
url = "env:IK_BENCH_URL"
table = "agent_run"

[apps.support]
terminal_agent = "support_agent"
key_templates = {{}}
client_timeout_s = 60

[apps.billing]
terminal_agent = "support_agent"
key_templates = {{}}
client_timeout_s = 60
"""


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_manifest(folder: Path, fraction: float) -> Path:
    import pandas as pd

    start = pd.Timestamp(START)
    end = start + pd.Timedelta(days=DAYS) * fraction
    path = folder / f"evidence-{fraction:g}.toml"
    text = MANIFEST.format(start=start.isoformat(), end=end.isoformat())
    path.write_text(text, encoding="utf-8")
    return path


def part(manifest: str, engine: str) -> dict[str, Any]:
    """One card: the overview's setup and triage, as its notebook calls them, each declared
    check timed (in pandas, the checks run per app after one load of every frame)."""
    from incidentkit.flows.overview import steps
    from incidentkit.flows.plugin import CardChecks

    checks: dict[str, float] = {}
    travelled: dict[str, Any] = {}

    def timed(method: Any) -> Any:
        def run(self: CardChecks, context: Any) -> Any:
            began = time.perf_counter()
            found = method(self, context)
            name = ",".join(self.checks)
            checks[name] = checks.get(name, 0.0) + time.perf_counter() - began
            if hasattr(context, "travelled"):
                travelled.update(rows=context.travelled.rows, loaded=context.travelled.loaded)
            return found

        return run

    CardChecks.lines = timed(CardChecks.lines)  # type: ignore[method-assign]
    CardChecks.engine_lines = timed(CardChecks.engine_lines)  # type: ignore[method-assign]
    began = time.perf_counter()
    evidence, settings = steps.setup(manifest, as_of=_end_of(manifest), card_engine=engine)
    set_up = time.perf_counter() - began
    report = steps.triage(evidence, settings)
    seconds = time.perf_counter() - began
    card = report.card
    lines = [
        [str(r["check"]), str(r["severity"]), int(r["count"]), str(r.get("app"))]
        for r in card.to_dict("records")
    ]
    return {
        "seconds": seconds,
        "setup_seconds": set_up,
        "peak_mb": _peak_mb(),
        "lines": sorted(lines),
        "computed": str(getattr(report, "computed", "") or ""),
        "checks": checks,
        "travelled": travelled,
    }


def _end_of(manifest: str) -> str:
    import tomllib

    with open(manifest, "rb") as handle:
        return str(tomllib.load(handle)["window"]["end"])


def _child(manifest: Path, engine: str, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--part", engine, "--manifest", str(manifest)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "IK_BENCH_URL": url},
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


SESSIONS = 4
"""Invocations per session: a session's invocations lie a quarter of the week apart (a
session of ``bench_baseline``'s fill has four back-to-back invocations, which overlap)."""


def build(url: str, events: int) -> tuple[int, int, float]:
    import sqlalchemy as sa

    invocations = math.ceil(events / 12.1)
    sessions = math.ceil(invocations / SESSIONS)
    fill = bench_baseline.FILL.replace("'s-' || (g / 4)", f"'s-' || (g % {sessions})")
    assert fill != bench_baseline.FILL, "bench_baseline's fill changed: sessions not spread"
    bench_baseline.FILL = fill
    rows, seconds = bench_baseline.build(url, events)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    began = time.perf_counter()
    with engine.begin() as conn:
        conn.exec_driver_sql(LEDGER)
        conn.execute(sa.text(LEDGER_FILL))
        conn.exec_driver_sql("ALTER TABLE agent_run ADD PRIMARY KEY (run_id)")
        conn.exec_driver_sql(
            "CREATE INDEX agent_run_app_started ON agent_run (app_name, started_at)"
        )
        runs = conn.execute(sa.text("SELECT count(*) FROM agent_run")).scalar_one()
    vacuum = sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    with vacuum.connect() as conn:
        conn.exec_driver_sql("VACUUM (ANALYZE) agent_run")
    vacuum.dispose()
    engine.dispose()
    return rows, int(runs), seconds + time.perf_counter() - began


def compare(
    name: str, week: dict[str, Any], pandas: dict[str, Any], small: dict[str, Any], part: float
) -> None:
    """Print the slice cards' equality, the ratios and each check's seconds: ``week`` and
    ``small`` the engine ``name``'s card over the week and the slice, ``pandas`` the slice's."""
    same = [line[:3] for line in small["lines"]] == [line[:3] for line in pandas["lines"]]
    print(f"slice cards equal (check, severity, count): {same}")
    if not same:
        print(f" {name}:", small["lines"], "\n pandas:", pandas["lines"])
    scaled = pandas["seconds"] / part
    print(
        f"pandas scaled to the week: {scaled:.0f} s (x{scaled / week['seconds']:.1f} the "
        f"{name}'s week); on the slice x{pandas['seconds'] / small['seconds']:.1f}; memory "
        f"x{pandas['peak_mb'] / small['peak_mb']:.1f} on the slice"
    )
    print(f"per check (s):  {name} week / pandas slice (after the load) / {name} slice")
    for check, seconds in week["checks"].items():
        slow, mine = pandas["checks"].get(check, 0.0), small["checks"].get(check, 0.0)
        print(f"  {check:48} {seconds:7.2f} {slow:7.2f} {mine:7.2f}")
    print(f"travelled ({name}, week): {week['travelled']}")
    for line in week["lines"]:
        print("  ", *line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--slice", type=float, default=0.05, help="pandas path: part of the week")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--url", help="use this database as it is (built by an earlier --keep)")
    parser.add_argument("--part", choices=["yes", "no"], help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:  # a child: one card, its result as the last line
        print(json.dumps(part(args.manifest, args.part), default=str))
        return

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    admin = make_url(ADMIN).set(drivername="postgresql+psycopg")
    name = f"ik_bench_card_{os.getpid()}"
    url = args.url or admin.set(database=name).render_as_string(hide_password=False)
    server = sa.create_engine(admin, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    if not args.url:
        with server.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        if not args.url:
            rows, runs, seconds = build(url, args.events)
            print(f"tables: {rows:,} events, {runs:,} runs in {seconds:.1f} s ({name})")
        with tempfile.TemporaryDirectory(prefix="ik-bench-card-") as scratch:
            folder = Path(scratch)
            week, part_of = write_manifest(folder, 1.0), write_manifest(folder, args.slice)
            engine = _child(week, "yes", url)
            print(
                f"engine  week   {engine['seconds']:7.2f} s  peak RSS {engine['peak_mb']:6.0f} MB"
                f"  (setup {engine['setup_seconds']:.2f} s; {engine['computed']})"
            )
            pandas = _child(part_of, "no", url)
            print(
                f"pandas  slice  {pandas['seconds']:7.2f} s  peak RSS {pandas['peak_mb']:6.0f} MB"
                f"  ({args.slice:.0%} of the week)"
            )
            small = _child(part_of, "yes", url)
            print(f"engine  slice  {small['seconds']:7.2f} s  peak RSS {small['peak_mb']:6.0f} MB")
            compare("engine", engine, pandas, small, args.slice)
    finally:
        if not args.url and not args.keep:
            with server.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        server.dispose()


if __name__ == "__main__":
    main()
