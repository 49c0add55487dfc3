"""Benchmark the JFR loader on a synthetic ``jfr print --json`` export of N events.

    .venv/bin/python benchmarks/bench_jfr.py [N] [KEPT]   # default 200000 events, 10 % kept

The export tiles the committed fixture's events (tests/data/jfr/stalled-agent.json.gz): a
share KEPT of them of the types the kit reads, the rest jdk.ClassLoad events it drops unread,
written to a temporary file first. Each case runs in its own process: the baseline, what a
reader that does not stream does (``json.load`` of the whole export, then the types the kit
reads), and the kit's ``jfr.load``. Prints rows, wall and CPU time, MB/s and each process's peak
RSS: the kit's memory follows the events kept, the baseline's the file.
"""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from incidentkit.manifest import Filters, parse_manifest
from incidentkit.sources.jvm import jfr
from incidentkit.sources.jvm.jfr_events import FRAME_OF

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


def run_case(case: str, path: Path) -> dict[str, float]:
    """One measurement, in this process: the kit's streaming loader, or the baseline a
    non-streaming reader is (``json.load`` of the whole export, then the allowlisted types)."""
    wall, cpu = time.perf_counter(), time.process_time()
    if case == "kit":
        spec = parse_manifest({"jfr": {"path": str(path)}}, base=path.parent).sources["jfr"]
        loaded = jfr.load(spec, Filters())
        rows = sum(len(frame) for frame in loaded.frames.values())
    else:
        with path.open(encoding="utf-8") as handle:
            every = json.load(handle)["recording"]["events"]
        rows = sum(1 for event in every if event.get("type") in FRAME_OF)
    return {
        "rows": rows,
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2], Path(sys.argv[3]))))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    kept = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.json"
        write_export(path, n, kept)
        size = path.stat().st_size / 1e6
        print(f"{n:,} events, {size:.0f} MB of JSON, {kept:.0%} of them of the types read")
        print(f"{'case':<44}{'rows':>9}{'wall s':>9}{'cpu s':>8}{'MB/s':>7}{'peak RSS':>10}")
        for case, label in (
            ("json", "baseline: json.load of the whole export"),
            ("kit", "kit: jfr.load, streamed with ijson"),
        ):
            out = subprocess.run(  # each case in its own process: peak RSS is its own
                [sys.executable, __file__, "--case", case, str(path)],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout)
            print(
                f"{label:<44}{r['rows']:>9,.0f}{r['wall']:>9.2f}{r['cpu']:>8.2f}"
                f"{size / r['wall']:>7.0f}{r['peak_mb']:>7.0f} MB"
            )


if __name__ == "__main__":
    main()
