"""``incidentkit run all`` on a busy incident: every source parsed by each flow, against the
cache that loads it once (issue 31, "loaded once per incident").

    .venv/bin/python benchmarks/bench_run_all.py --pack DIR -p app_name invoicing --repeat 2

``DIR`` is an incident folder, such as ``incidentkit simulate crash_recovery --scale 3000
--out DIR``. Three cases run alternated, each ``run all`` in a fresh process with a cache
folder of its own: ``no-cache`` (``--no-cache``: each kernel parses every source it reads,
the baseline), ``cold`` (an empty cache: ``run all`` parses each source once, its kernels read
it) and ``warm`` (the cache the cold run left: nothing is parsed). Each line prints the best
wall time, and the findings of every case are checked equal first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = ("no-cache", "cold", "warm")


def _run(pack: Path, out: Path, cache_home: Path, params: list[str], *, cached: bool) -> float:
    command = [
        *(sys.executable, "-m", "incidentkit.cli", "run", "all"),
        *("--evidence", str(pack), "--out", str(out), "--quiet", *params),
        *(() if cached else ("--no-cache",)),
    ]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"run all failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def _findings(out: Path) -> dict[str, object]:
    found = {}
    for path in sorted(out.glob("*/findings.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        found[path.parent.name] = (data["verdict"], data["summary"], data["items"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", required=True, type=Path)
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    params = [word for pair in args.p for word in ("-p", *pair)]
    best: dict[str, float] = {}
    found: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="ik-bench-run-all-") as scratch:
        root = Path(scratch)
        for attempt in range(args.repeat):
            home = root / f"cache-{attempt}"
            for case in CASES:
                out = root / f"{case}-{attempt}"
                seconds = _run(args.pack, out, home, params, cached=case != "no-cache")
                best[case] = min(best.get(case, seconds), seconds)
                found[case] = _findings(out)
                shutil.rmtree(out)
    if not (found["no-cache"] == found["cold"] == found["warm"]):
        raise SystemExit("the findings differ between the cases")
    for case in CASES:
        ratio = best[case] / best["no-cache"]
        print(f"{case:9} {best[case]:7.1f} s  ({ratio:.2f} of no-cache)")
    print(f"findings equal in every case ({', '.join(found['cold'])})")


if __name__ == "__main__":
    main()
