"""Benchmark the simulator at scale: events/s, wall time and peak RSS for about 1M events.

    .venv/bin/python benchmarks/bench_simulate.py [--scenario crash_recovery] [--events 1000000]
        [--format adk-java] [--into URL] [--keep DIR]

A small calibration run (scale 20) measures events per scale unit; the timed run uses the scale
that gives about ``--events`` events. Not a test: machines are noisy, read the figures as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from incidentkit.simulate import SCENARIOS, simulate


def _events(folder: Path) -> dict[str, int]:
    counts: dict[str, int] = json.loads((folder / "truth.json").read_text())["counts"]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="crash_recovery", choices=sorted(SCENARIOS))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--format", default="adk-java", choices=("adk-java", "adk-python"))
    parser.add_argument("--into", default=None, help="a database URL (an empty database)")
    parser.add_argument("--keep", default=None, help="write the pack here and keep it")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ik-bench-"))
    try:
        probe = simulate(args.scenario, work / "probe", scale=20)
        per_scale = _events(probe)["events"] / 20
        scale = max(1, round(args.events / per_scale))
        out = Path(args.keep) if args.keep else work / "pack"
        load = os.getloadavg()[0]
        began = time.perf_counter()
        cpu = time.process_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        simulate(args.scenario, out, scale=scale, events_format=args.format, into=args.into)
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        shard_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
        shard_rss = after.ru_maxrss / 1024
        counts = _events(out)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"scenario {args.scenario} ({args.format}), scale {scale}")
        print("rows: " + ", ".join(f"{k} {v:,}" for k, v in counts.items() if v))
        print(
            f"wall {wall:.1f} s, {counts['events'] / wall:,.0f} events/s; cpu: main {cpu:.1f} s, "
            f"shards {shard_cpu:.1f} s; {size / 1e6:,.0f} MB on disk; peak RSS main "
            f"{rss_mb:,.0f} MB, largest shard {shard_rss:,.0f} MB; load average before {load:.2f}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
