"""Benchmark the events normaliser on N synthetic ADK Java events.

    .venv/bin/python benchmarks/bench_events.py [N]               # default 100000
    .venv/bin/python benchmarks/bench_events.py --file PATH [N]   # load a JSON-lines file

Events cycle through the shapes of a tool-using invocation (user text, function call,
function response with a state delta, final text), 50 events per session. Without
``--file`` the JSON text is built in memory, as a PostgreSQL COPY of a jsonb column would
hand it over, and the normaliser alone is timed. With ``--file`` the events loader reads
PATH (written first with N synthetic events when it does not exist): the figure that shows
whether a file streams. Prints events/s (wall and CPU time: on a shared machine CPU time is
the steadier figure) and the process's peak RSS. Run each measurement in its own process.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import pandas as pd

from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import events
from incidentkit.sources.adk_events import JAVA_JSON, Batch, normalise
from incidentkit.sources.base import RejectSink

_ACTIONS: dict[str, dict[str, object]] = {
    "artifactDelta": {},
    "requestedAuthConfigs": {},
    "requestedToolConfirmations": {},
}


def _event(i: int, *, keys: bool = False) -> str:
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
    return json.dumps(event)


def _report(
    label: str,
    frames: dict[str, pd.DataFrame],
    sink: RejectSink,
    started: float,
    cpu_started: float,
) -> None:
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    n = len(frames["events"]) + len(sink.rows)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = ", ".join(f"{name} {len(frame):,}" for name, frame in frames.items())
    sys.stdout.write(
        f"{label}: {elapsed:.2f} s wall ({n / elapsed:,.0f} events/s), {cpu:.2f} s CPU "
        f"({n / cpu:,.0f} events/s); {rows}; {len(sink.rows)} rejects; "
        f"peak RSS {peak_mib:,.0f} MiB\n"
    )


def main(n: int) -> None:
    texts = pd.Series([_event(i) for i in range(n)], dtype=object)
    meta = pd.DataFrame(
        {
            "location": [f"adk_event:ev-{i}" for i in range(n)],
            "app_name": "billing",
            "user_id": "u1",
            "session_id": [f"s-{i // 50}" for i in range(n)],
        }
    )
    sink = RejectSink("events")
    started, cpu_started = time.perf_counter(), time.process_time()
    frames = normalise([Batch(texts, meta, JAVA_JSON)], Filters(), sink, apply_filters=False)
    _report(f"{n:,} events", frames, sink, started, cpu_started)


def main_file(path: Path, n: int) -> None:
    if not path.exists():
        with path.open("w", encoding="utf-8") as out:
            out.writelines(_event(i, keys=True) + "\n" for i in range(n))
    started, cpu_started = time.perf_counter(), time.process_time()
    loaded = events.load(SourceSpec("events", paths=(path,)), Filters())
    sink = RejectSink("events", rows=loaded.rejects.to_dict("records"))
    _report(str(path), dict(loaded.frames), sink, started, cpu_started)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--file"]:
        main_file(Path(args[1]), int(args[2]) if len(args) > 2 else 100_000)
    else:
        main(int(args[0]) if args else 100_000)
