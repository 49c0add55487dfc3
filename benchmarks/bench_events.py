"""Benchmark the events loader against the floor of reading the same events, in one run.

    .venv/bin/python benchmarks/bench_events.py [N]               # in memory, default 200000
    .venv/bin/python benchmarks/bench_events.py --file PATH [N]   # a JSON-lines file
    .venv/bin/python benchmarks/bench_events.py --postgres [N]    # an adk_event table

Events cycle through the shapes of a tool-using invocation (user text, function call,
function response with a state delta, final text), 50 events per session. Each case runs in
its own process (so peak RSS is its own), ``--repeat`` times (default 3) alternated with the
others so a busy moment of a shared machine hits them all; the best time is shown.

In memory (JSON text as a COPY of a jsonb column hands it over; generating it is not timed):

    decode   msgspec decoding every text into dicts, nothing else: the floor of any reader
    general  the normaliser with typed decoding off (every chunk through dicts)
    kit      the normaliser as it runs

``--file PATH`` (written first with N events when it does not exist): ``decode`` reads and
decodes the lines; ``kit`` is ``events.load`` of the file. ``--postgres``: a scratch database
on the server of ``INCIDENTKIT_TEST_DATABASE_URL`` (default: the local trust-auth server)
gets N rows in ``adk_event``; ``copy`` is a raw psycopg ``COPY TO STDOUT`` of the columns the
kit reads, ``kit`` is ``events.load`` of the table; the database is dropped after.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fresh

CASES = {
    "memory": {
        "decode": "msgspec decode only",
        "general": "normaliser, dicts",
        "kit": "normaliser",
    },
    "file": {"decode": "read + msgspec decode", "kit": "events.load"},
    "postgres": {"copy": "psycopg COPY TO STDOUT", "kit": "events.load"},
}
_ACTIONS: dict[str, dict[str, object]] = {
    "artifactDelta": {},
    "requestedAuthConfigs": {},
    "requestedToolConfirmations": {},
}


def _event(i: int, *, keys: bool = False) -> dict[str, object]:
    invocation, shape = divmod(i, 4)
    event: dict[str, object] = {
        "id": f"ev-{i}",
        "invocationId": f"e-{invocation}",
        "author": "user" if shape == 0 else "billing_agent",
        "timestamp": 1_750_000_000_000 + i * 250,
    }
    if keys:  # a JSON-lines file carries the session keys in each event
        event.update(appName="billing", userId="u1", sessionId=f"s-{i // 50}")
    call = {"id": f"adk-{invocation}", "name": "send_invoice"}
    delta: dict[str, object] = {}
    if shape == 0:
        content = {"role": "user", "parts": [{"text": f"Send invoice INV-{invocation}"}]}
    elif shape == 1:
        args = {"invoice": f"INV-{invocation}", "amount": i % 500}
        content = {"role": "model", "parts": [{"functionCall": {**call, "args": args}}]}
        event["usageMetadata"] = {"promptTokenCount": 812, "totalTokenCount": 840}
    elif shape == 2:
        content = {"role": "user", "parts": [{"functionResponse": {**call, "response": {}}}]}
        delta = {"invoice_status": "sent", "temp:scratch": i, "stale": "__ADK_SENTINEL_REMOVED__"}
    else:
        content = {"role": "model", "parts": [{"text": "Invoice sent."}]}
    event["content"] = content
    event["actions"] = {"stateDelta": delta, **_ACTIONS}
    return event


def _memory_case(case: str, n: int) -> tuple[int, float]:
    import msgspec
    import pandas as pd

    from incidentkit.manifest import Filters
    from incidentkit.sources.events import adk_events
    from incidentkit.sources.loaded import RejectSink

    texts = pd.Series([json.dumps(_event(i)) for i in range(n)], dtype=object)
    meta = pd.DataFrame(
        {
            "location": [f"adk_event:ev-{i}" for i in range(n)],
            "app_name": "billing",
            "user_id": "u1",
            "session_id": [f"s-{i // 50}" for i in range(n)],
        }
    )
    gc.collect()
    started = time.perf_counter()
    if case == "decode":
        gc.disable()  # as the kit decodes (sources.process_memory.bulk_decoding)
        return len(list(map(msgspec.json.Decoder().decode, texts))), started
    adk_events.TYPED = case == "kit"
    batch = adk_events.Batch(texts, meta, adk_events.JAVA_JSON)
    sink = RejectSink("events")
    frames = adk_events.normalise([batch], Filters(), sink, apply_filters=False)
    return len(frames["events"]) + len(sink.rows), started


def _file_case(case: str, path: Path) -> tuple[int, float]:
    import msgspec

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    started = time.perf_counter()
    if case == "decode":
        gc.disable()
        decoder = msgspec.json.Decoder()
        with path.open("rb") as lines:
            return sum(1 for line in lines if decoder.decode(line) is not None), started
    loaded = events.load(SourceSpec("events", paths=(path,)), Filters())
    return len(loaded.frames["events"]) + len(loaded.rejects), started


def _postgres_case(case: str, url: str) -> tuple[int, float]:
    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    started = time.perf_counter()
    if case == "copy":
        query = "SELECT event_id, app_name, user_id, session_id, invocation_id, ts, event"
        return fresh.copy_out(url, f"{query} FROM adk_event").count(b"\n") - 1, started
    loaded = events.load(SourceSpec("events", url_ref=url), Filters())
    return len(loaded.frames["events"]) + len(loaded.rejects), started


def run_case(mode: str, case: str, target: str) -> dict[str, Any]:
    """One case in this process: events read, seconds, CPU seconds and peak RSS."""
    if mode == "memory":
        rows, started = _memory_case(case, int(target))
    elif mode == "file":
        rows, started = _file_case(case, Path(target))
    else:
        rows, started = _postgres_case(case, target)
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"rows": rows, "seconds": seconds, "peak_mb": peak_kb / 1024}


def write_file(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(_event(i, keys=True)) + "\n" for i in range(n))


def populate(url: str, n: int) -> None:
    """Create adk_event and COPY ``n`` synthetic events into it."""
    import sqlalchemy as sa

    from incidentkit import store

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    raw = engine.raw_connection()
    columns = "event_id, app_name, user_id, session_id, invocation_id, ts, event"
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY adk_event ({columns}) FROM STDIN") as copy:
            for i in range(n):
                event = _event(i)
                ts = datetime.fromtimestamp(1_750_000_000 + i * 0.25, UTC)
                row = ("billing", "u1", f"s-{i // 50}", event["invocationId"], ts.isoformat())
                copy.write_row((event["id"], *row, json.dumps(event)))
        cursor.execute("ANALYZE adk_event")
        raw.commit()
    finally:
        raw.close()
        engine.dispose()


def measure(mode: str, target: str, n: int, repeat: int) -> None:
    results = fresh.best_of(
        lambda case: [sys.executable, __file__, "--case", mode, case, target], CASES[mode], repeat
    )
    floor = next(iter(CASES[mode]))
    base = results[floor]["seconds"]
    print(f"{n:,} events, {mode}; best of {repeat} runs per case; share = floor time / case time")
    print(f"{'case':<34}{'events':>10}{'seconds':>9}{'events/s':>11}{'share':>7}{'peak RSS':>11}")
    for case, label in CASES[mode].items():
        r = results[case]
        print(
            f"{case + ' ' + label:<34}{r['rows']:>10,}{r['seconds']:>9.2f}"
            f"{r['rows'] / r['seconds']:>11,.0f}{base / r['seconds']:>7.2f}{r['peak_mb']:>8.0f} MB"
        )
    kit = results["kit"]
    print(
        f"kit: {kit['rows'] / kit['seconds']:,.0f} events/s (target 200,000), "
        f"{kit['peak_mb'] / n * 1e6:,.0f} MB peak RSS per 1M events, with imports (target 1,000)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=200_000)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--file", type=Path, help="a JSON-lines file (written when missing)")
    where.add_argument("--postgres", action="store_true", help="an adk_event table")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(*args.case)))
        return
    if args.file is not None:
        if not args.file.exists():
            write_file(args.file, args.n)
        measure("file", str(args.file), args.n, args.repeat)
    elif args.postgres:
        with fresh.scratch_database() as url:
            populate(url, args.n)
            measure("postgres", url, args.n, args.repeat)
    else:
        measure("memory", str(args.n), args.n, args.repeat)


if __name__ == "__main__":
    main()
