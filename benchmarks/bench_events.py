"""Benchmark the events normaliser: N synthetic ADK Java events, as JSON text, to four frames.

    .venv/bin/python benchmarks/bench_events.py [N]      # default 100000

Events cycle through the shapes of a tool-using invocation (user text, function call,
function response with a state delta, final text), 50 events per session. The JSON text is
built in memory, as a PostgreSQL COPY of a jsonb column would hand it over. Prints events/s
of the normaliser alone (wall and CPU time: on a shared machine CPU time is the steadier
figure) and the process's peak RSS, which includes the generated JSON text.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import pandas as pd

from incidentkit.manifest import Filters
from incidentkit.sources.adk_events import JAVA_JSON, Batch, normalise
from incidentkit.sources.base import RejectSink

_ACTIONS = {"artifactDelta": {}, "requestedAuthConfigs": {}, "requestedToolConfirmations": {}}


def _event(i: int) -> str:
    invocation, shape = divmod(i, 4)
    event: dict[str, object] = {
        "id": f"ev-{i}",
        "invocationId": f"e-{invocation}",
        "author": "user" if shape == 0 else "billing_agent",
        "timestamp": 1_750_000_000_000 + i * 250,
    }
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
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = ", ".join(f"{name} {len(frame):,}" for name, frame in frames.items())
    sys.stdout.write(
        f"{n:,} events: {elapsed:.2f} s wall ({n / elapsed:,.0f} events/s), {cpu:.2f} s CPU "
        f"({n / cpu:,.0f} events/s); {rows}; {len(sink.rows)} rejects; "
        f"peak RSS {peak_mib:,.0f} MiB\n"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
