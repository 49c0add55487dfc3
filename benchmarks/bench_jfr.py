"""Benchmark the JFR loader on a synthetic ``jfr print --json`` export of N events.

    .venv/bin/python benchmarks/bench_jfr.py [N] [KEPT]   # default 200000 events, 10 % kept

The export tiles the committed fixture's events (tests/data/jfr/stalled-agent.json.gz): a
share KEPT of them of the types the kit reads, the rest jdk.ClassLoad events it drops unread,
written to a temporary file first. Prints the file size, events/s and MB/s (wall and CPU time)
and the process's peak RSS beside the file size: memory follows the events kept, not the file.
Run each measurement in its own process.
"""

from __future__ import annotations

import gzip
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from incidentkit.manifest import Filters, parse_manifest
from incidentkit.sources import jfr

FIXTURE = (
    Path(__file__).resolve().parent.parent / "tests" / "data" / "jfr" / "stalled-agent.json.gz"
)


def write_export(path: Path, n: int, kept: float) -> None:
    """N events: ``kept`` of them the fixture's (cycled), the rest dropped ones."""
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as handle:
        real = [json.dumps(e) for e in json.load(handle)["recording"]["events"]]
    dropped = json.dumps(
        {"type": "jdk.ClassLoad", "values": {"startTime": "2026-12-02T15:40:28Z",
         "loadedClass": {"name": "com/example/Generated" + "x" * 400}}}
    )  # fmt: skip
    every = max(1, round(1 / kept)) if kept > 0 else n + 1
    with path.open("w", encoding="utf-8") as out:
        out.write('{"recording": {"events": [')
        for i in range(n):
            out.write(("," if i else "") + (real[i % len(real)] if i % every == 0 else dropped))
        out.write("]}}\n")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    kept = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.json"
        write_export(path, n, kept)
        size = path.stat().st_size
        spec = parse_manifest({"jfr": {"path": str(path)}}, base=path.parent).sources["jfr"]
        wall, cpu = time.perf_counter(), time.process_time()
        loaded = jfr.load(spec, Filters())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rows = sum(len(frame) for frame in loaded.frames.values())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} events ({size / 1e6:.0f} MB of JSON), {rows} rows kept")
    print(f"wall {wall:.2f} s ({n / wall:,.0f} events/s, {size / 1e6 / wall:.0f} MB/s)")
    print(f"cpu  {cpu:.2f} s ({n / cpu:,.0f} events/s)")
    print(f"peak RSS {peak:.0f} MB (the file: {size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
