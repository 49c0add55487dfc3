"""Benchmark: a week's baseline p99 of model calls per invocation, in PostgreSQL against pandas.

    .venv/bin/python benchmarks/bench_baseline.py                      # 10,000,000 events
    .venv/bin/python benchmarks/bench_baseline.py --events 1000000 --slice 0.2

Builds a scratch database (dropped at the end unless ``--keep``) holding an ``adk_event``
table of the shape the kit reads (``incidentkit.store.adk_event``: ADK Java event JSON in
``jsonb``, ``timestamptz``; primary key and the ``(app_name, ts)`` index ``incidentkit
inspect`` asks for), filled by one ``INSERT ... SELECT generate_series``: invocations over 7
days, 80 % of app ``support``, each a user message, 1 to 9 tool calls with their responses
and a final answer (2 to 10 model calls), one in 9,973 a 500-call loop.

Then, each in its own process (so peak RSS is that path's alone, imports included):

- ``engine``: ``incidentkit.baselines.call_histogram`` over the week for ``support`` (only
  the histogram of counts travels) and the p99 from it, as the runaway flow computes it;
- ``pandas``: the kit's loader (``sources.events.load``: every event of the slice into the
  canonical frames) and ``counts.from_events``, the flow's pandas path, on a stated slice of
  the week (``--slice``, default 10 %: the whole week does not fit this machine's share);
  its time is scaled to the week by the events it read, and said so;
- ``engine`` again on the slice, whose histogram must equal the pandas counts.

Printed: events, invocations, seconds, peak RSS, the p99s, the ratio pandas / engine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

ADMIN = os.environ.get(
    "INCIDENTKIT_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
START = "2026-11-22T00:00:00Z"
DAYS = 7
APP = "support"

TABLE = """
CREATE UNLOGGED TABLE adk_event (
  event_id varchar(128) NOT NULL, app_name varchar(128) NOT NULL,
  user_id varchar(128) NOT NULL, session_id varchar(128) NOT NULL,
  invocation_id varchar(256) NOT NULL, ts timestamptz NOT NULL, event jsonb NOT NULL
)"""
FILL = """
INSERT INTO adk_event (event_id, app_name, user_id, session_id, invocation_id, ts, event)
SELECT 'ev-' || g || '-' || j,
       CASE WHEN g % 5 = 0 THEN 'billing' ELSE 'support' END,
       'u-' || (g % 50000), 's-' || (g / 4), 'e-' || g, t.ts,
       jsonb_build_object(
         'id', 'ev-' || g || '-' || j, 'invocationId', 'e-' || g,
         'author', CASE WHEN j = 0 THEN 'user' ELSE 'support_agent' END,
         'content', CASE
           WHEN j = 0 THEN jsonb_build_object('role', 'user', 'parts',
             jsonb_build_array(jsonb_build_object('text', 'Where is my order ORD-' || g || '?')))
           WHEN j = 2 * p.pairs + 1 THEN jsonb_build_object('role', 'model', 'parts',
             jsonb_build_array(jsonb_build_object('text', 'Your order has shipped.')))
           WHEN j % 2 = 1 THEN jsonb_build_object('role', 'model', 'parts', jsonb_build_array(
             jsonb_build_object('functionCall', jsonb_build_object('id', 'adk-' || g || '-' || j,
               'name', 'order_lookup', 'args', jsonb_build_object('order_id', 'ORD-' || g)))))
           ELSE jsonb_build_object('role', 'user', 'parts', jsonb_build_array(
             jsonb_build_object('functionResponse', jsonb_build_object(
               'id', 'adk-' || g || '-' || (j - 1), 'name', 'order_lookup',
               'response', jsonb_build_object('status', 'shipped')))))
         END,
         'actions', jsonb_build_object('stateDelta', '{}'::jsonb, 'artifactDelta', '{}'::jsonb),
         'timestamp', (extract(epoch FROM t.ts) * 1000)::bigint)
FROM generate_series(1, :n) AS g
CROSS JOIN LATERAL (
  SELECT CASE WHEN g % 9973 = 0 THEN 499 ELSE 1 + (g * 7) % 9 END AS pairs
) AS p
CROSS JOIN LATERAL generate_series(0, 2 * p.pairs + 1) AS j
CROSS JOIN LATERAL (
  SELECT timestamptz '2026-11-22T00:00:00Z'
         + (g::float8 / :n) * interval '7 days' + j * interval '1 second' AS ts
) AS t
"""


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _spec(url: str) -> Any:
    from incidentkit.manifest import SourceSpec

    return SourceSpec(section="events", url_ref=url, format="sql", table="adk_event")


def _filters(fraction: float) -> Any:
    import pandas as pd

    from incidentkit.manifest import Filters, Window

    start = pd.Timestamp(START)
    return Filters(window=Window(start, start + pd.Timedelta(days=DAYS) * fraction), app_name=APP)


def part_engine(url: str, fraction: float) -> dict[str, Any]:
    """The flow's engine path: the histogram in PostgreSQL, the p99 from it."""
    import numpy as np

    from incidentkit import baselines

    began = time.perf_counter()
    found = baselines.call_histogram(_spec(url), _filters(fraction))
    hist = found.value
    calls = np.repeat(hist["model_calls"].to_numpy(), hist["invocations"].to_numpy())
    p99 = float(np.quantile(calls, 0.99))
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "peak_mb": _peak_mb(),
        "invocations": int(hist["invocations"].sum()),
        "p99": p99,
        "histogram": hist.groupby("model_calls")["invocations"].sum().to_dict(),
        "where": found.where,
    }


def part_pandas(url: str, fraction: float) -> dict[str, Any]:
    """The flow's pandas path: the kit's loader into frames, then ``counts.from_events``."""
    import numpy as np

    from incidentkit.flows.runaway import counts
    from incidentkit.sources import events

    began = time.perf_counter()
    loaded = events.load(_spec(url), _filters(fraction))
    frames = loaded.frames
    by_events = counts.from_events(frames["events"], frames["responses"])
    p99 = float(np.quantile(by_events["model_calls"].to_numpy(dtype=float), 0.99))
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "peak_mb": _peak_mb(),
        "events": len(frames["events"]),
        "invocations": len(by_events),
        "p99": p99,
        "histogram": by_events.groupby("model_calls").size().to_dict(),
    }


def _child(part: str, url: str, fraction: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--part", part, "--url", url, "--slice", str(fraction)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def build(url: str, events: int) -> tuple[int, float]:
    import sqlalchemy as sa

    invocations = math.ceil(events / 12.1)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    began = time.perf_counter()
    with engine.begin() as conn:
        conn.exec_driver_sql(TABLE)  # incidentkit.store.adk_event, keys added after the fill
        conn.execute(sa.text(FILL), {"n": invocations})
        conn.exec_driver_sql("ALTER TABLE adk_event ADD PRIMARY KEY (event_id)")
        conn.exec_driver_sql(
            "CREATE INDEX adk_event_app_session_ts ON adk_event (app_name, session_id, ts)"
        )
        conn.exec_driver_sql("CREATE INDEX adk_event_app_ts ON adk_event (app_name, ts)")
        rows = conn.execute(sa.text("SELECT count(*) FROM adk_event")).scalar_one()
    # A table in service has been vacuumed: its hint bits are set and its statistics known.
    vacuum = sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    with vacuum.connect() as conn:
        conn.exec_driver_sql("VACUUM (ANALYZE) adk_event")
    vacuum.dispose()
    engine.dispose()
    return int(rows), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--slice", type=float, default=0.1, help="pandas path: part of the week")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=["engine", "pandas"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:  # a child: one path, its result as the last line
        run = part_engine if args.part == "engine" else part_pandas
        print(json.dumps(run(args.url, args.slice), default=str))
        return

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    name = f"ik_bench_baseline_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
    try:
        rows, fill_s = build(url, args.events)
        print(f"table adk_event: {rows:,} events in {fill_s:.1f} s (scratch database {name})")
        week = _child("engine", url, 1.0)
        print(
            f"engine  week  {week['invocations']:>9,} invocations  {week['seconds']:7.2f} s  "
            f"peak RSS {week['peak_mb']:6.0f} MB  p99 {week['p99']:g}  ({week['where']})"
        )
        part = _child("pandas", url, args.slice)
        scaled = part["seconds"] / args.slice  # the traffic is even over the week
        print(
            f"pandas  slice {part['invocations']:>9,} invocations  {part['seconds']:7.2f} s  "
            f"peak RSS {part['peak_mb']:6.0f} MB  p99 {part['p99']:g}  "
            f"({part['events']:,} events, {args.slice:.0%} of the week)"
        )
        same = _child("engine", url, args.slice)
        assert same["histogram"] == part["histogram"], "engine and pandas counts differ"
        assert same["p99"] == part["p99"]
        print(
            f"engine  slice {same['invocations']:>9,} invocations  {same['seconds']:7.2f} s  "
            f"peak RSS {same['peak_mb']:6.0f} MB  p99 {same['p99']:g}  (counts equal pandas')"
        )
        print(
            f"pandas path scaled to the week ({args.slice:.0%} slice x {1 / args.slice:.0f}): "
            f"{scaled:.0f} s "
            f"(x{scaled / week['seconds']:.0f} the engine); on the slice x"
            f"{part['seconds'] / same['seconds']:.1f}; memory x"
            f"{part['peak_mb'] / same['peak_mb']:.1f} on the slice"
        )
    finally:
        if not args.keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
