"""Benchmark a snapshot's reload against loading its source, in one run.

    .venv/bin/python benchmarks/bench_snapshot.py [--scenario crash_recovery] [--scale 400]
        [--into URL] [--pack DIR]

Simulates a pack (or reads ``--pack``), takes its snapshot, then loads every source of each
in a fresh process: the baseline is ``Evidence.load_all()`` on the source (JSON lines, CSV,
logs; or a database with ``--into``), the kit's figure the same on the snapshot. Each load
runs ``--repeat`` times (default 3), the two alternated. Prints the best times, the ratio,
peak RSS of each process, the snapshot's size, and checks the frames equal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import fresh

from incidentkit.simulate import SCENARIOS

_LOAD = """
import json, resource, sys, time
from incidentkit.evidence import FRAME_SOURCES, open_evidence
started = time.perf_counter()
evidence = open_evidence(sys.argv[1]).load_all()
took = time.perf_counter() - started
rows = sum(len(evidence.frame(n)) for n, s in FRAME_SOURCES.items() if evidence.has(s))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": took, "rows": rows, "peak_mb": peak}))
"""

_PREPARE = """
import json, sys, time
from incidentkit.simulate import simulate
from incidentkit.snapshot import take
scenario, scale, into, pack, out = sys.argv[1:]
if scenario:
    simulate(scenario, pack, scale=int(scale), into=into or None)
started = time.perf_counter()
taken = take(pack, out)
print(json.dumps([time.perf_counter() - started, taken.bytes, sum(taken.rows.values())]))
"""

_EQUAL = """
import sys
import pandas as pd
from incidentkit.evidence import FRAME_SOURCES, open_evidence
source, frozen = open_evidence(sys.argv[1]), open_evidence(sys.argv[2])
names = [n for n, s in FRAME_SOURCES.items() if source.has(s)] + ["rejects", "warnings"]
for name in names:
    pd.testing.assert_frame_equal(frozen.frame(name), source.frame(name), obj=name)
print(len(names))
"""


def _python(code: str, *args: str) -> str:
    """Run ``code`` in a fresh interpreter. Every step runs in its own process, and this one
    stays small: a child's peak RSS starts from its parent's (Linux keeps it across exec)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="crash_recovery", choices=sorted(SCENARIOS))
    parser.add_argument("--scale", type=int, default=400)
    parser.add_argument("--into", default=None, help="a database URL (an empty database)")
    parser.add_argument("--pack", default=None, help="an existing pack instead of simulating")
    parser.add_argument(
        "--repeat", type=int, default=3, help="loads of each, alternated; the best is shown"
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ik-bench-snapshot-"))
    try:
        pack, snapshot = Path(args.pack or work / "pack"), work / "snapshot"
        if args.into:
            os.environ["INCIDENT_DB_URL"] = args.into
        scenario = "" if args.pack else args.scenario
        prepared = _python(
            _PREPARE, scenario, str(args.scale), args.into or "", str(pack), str(snapshot)
        )
        took_snapshot, size, stored = json.loads(prepared)
        paths = {"source": pack, "snapshot": snapshot}
        loads = fresh.best_of(
            lambda case: [sys.executable, "-c", _LOAD, str(paths[case])], paths, args.repeat
        )
        base, rows, base_peak = (loads["source"][k] for k in ("seconds", "rows", "peak_mb"))
        kit, kit_rows, kit_peak = (loads["snapshot"][k] for k in ("seconds", "rows", "peak_mb"))
        frames = _python(_EQUAL, str(pack), str(snapshot))
        sys.stdout.write(
            f"{pack.name}: {rows:,} rows in the incident's window ({kit_rows:,} from the "
            f"snapshot; {frames} frames checked equal)\n"
            f"  snapshot taken in {took_snapshot:.2f} s, {size / 1e6:,.1f} MB on disk "
            f"({stored:,} rows, every source whole)\n"
            f"  best of {args.repeat} loads of each, alternated, each in a fresh process\n"
            f"  baseline, load the source:   {base:7.2f} s, peak RSS {base_peak:,.0f} MiB\n"
            f"  kit, load the snapshot:      {kit:7.2f} s, peak RSS {kit_peak:,.0f} MiB\n"
            f"  reload {base / kit:.1f}x faster than the source (target >= 10x)\n"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
