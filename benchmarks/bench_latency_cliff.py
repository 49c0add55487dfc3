"""Benchmark: the latency cliff triage on a million invocations, against loading its frames.

The simulated 03:10 incident (fixtures/latency_cliff) is scaled by tiling: its support
diagnostics lines are repeated ``--copies`` times, each copy with its own invocation ids and
its lines a few milliseconds apart, so the cliff, the hangs and the thread dumps stay where they
are while the invocations multiply. The kit then loads the scaled pack (diagnostics and thread
dumps, the flow's evidence when only the plugin log is kept) and triages it. Printed: the
invocations, load and triage time (best of ``--repeat``), the ratio (target: triage <= 0.25x
load), and the peak traced memory of each.

    .venv/bin/python benchmarks/bench_latency_cliff.py            # 1,000,000+ invocations
    .venv/bin/python benchmarks/bench_latency_cliff.py --copies 1000
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import incidentkit as ik
from incidentkit.flows.latency_cliff import Frames, triage_latency

PACK = Path(__file__).resolve().parents[1] / "fixtures" / "latency_cliff"
_TS = re.compile(r"^(\S+)")
_INV = re.compile(r"inv=(e-[0-9a-f-]+)")


def scaled_pack(folder: Path, copies: int) -> int:
    """Write the tiled pack into ``folder``; return how many invocations it holds."""
    lines = pd.Series(
        [
            line
            for line in (PACK / "diagnostics.log").read_text(encoding="utf-8").splitlines()
            if "app=support" in line or ("run.end" in line)
        ]
    )
    starts = lines.str.contains("run.start")
    support = set(lines[starts].str.extract(_INV)[0])
    ids = lines.str.extract(_INV)[0]
    lines = lines[ids.isin(support)].reset_index(drop=True)
    stamps = pd.to_datetime(lines.str.extract(_TS)[0], utc=True)
    rest = lines.str.replace(_TS, "", n=1, regex=True)
    codes, uniques = pd.factorize(lines.str.extract(_INV)[0])
    rng = np.random.default_rng(0)
    parts = []
    for copy in range(copies):  # one vectorised frame per copy, not a loop over lines
        per_invocation = rng.integers(0, 5_000, len(uniques)) if copy else np.zeros(len(uniques))
        shift = pd.to_timedelta(per_invocation[codes], unit="ms")  # start and end move together
        ts = (stamps + shift).dt.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3] + "Z"
        parts.append(ts + rest.str.replace(r"inv=e-", f"inv=e{copy}-", regex=True))
    text = pd.concat(parts, ignore_index=True)
    order = np.argsort(text.str[:24].to_numpy(), kind="stable")
    (folder / "diagnostics.log").write_text("\n".join(text.iloc[order]) + "\n", encoding="utf-8")
    shutil.copytree(PACK / "threads", folder / "threads")
    manifest = (PACK / "evidence.toml").read_text(encoding="utf-8")
    threads = manifest[manifest.index("[threads]") :].split("\n\n", 1)[0]
    head = manifest[: manifest.index("[ledger]")]
    (folder / "evidence.toml").write_text(
        head
        + 'app_name = "support"\n\n[diagnostics]\npath = "diagnostics.log"\nformat = "text"\n\n'
        + threads
        + "\n",
        encoding="utf-8",
    )
    return int(starts.sum()) * copies


def best_of(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return min(times), result


def peak_mib(work: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=11_500, help="tiles of the incident")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ik-bench-") as tmp:
        folder = Path(tmp)
        began = time.perf_counter()
        invocations = scaled_pack(folder, args.copies)
        print(f"pack: {invocations:,} invocations, written in {time.perf_counter() - began:.1f} s")
        as_of = pd.Timestamp("2026-11-29T03:16:00Z")

        def load() -> Frames:
            evidence = ik.open_evidence(folder)
            return Frames(diagnostics=evidence.diagnostics, threads=evidence.threads)

        def triage(frames: Frames) -> Any:
            return triage_latency(frames, as_of=as_of, client_timeout_s=60)

        load_s, frames = best_of(args.repeat, load)
        assert frames is not None
        triage_s, report = best_of(args.repeat, lambda: triage(frames))
        print(f"load:   {load_s:7.2f} s  ({len(frames.diagnostics):,} diagnostics lines)")
        print(f"triage: {triage_s:7.2f} s  = {triage_s / load_s:.2f}x load (target <= 0.25x)")
        cliff = report.cliff.iloc[0]
        print(
            f"found:  cliff at {cliff['at']:%H:%M} UTC, p95 {cliff['p95_before_ms']:.0f} -> "
            f"{cliff['p95_after_ms']:.0f} ms, {len(report.open):,} open, "
            f"{int(report.stalls['count'].sum())} stuck threads"
        )
        print(f"peak traced memory: load {peak_mib(load):,.0f} MiB, ", end="")
        print(f"triage {peak_mib(lambda: triage(frames)):,.0f} MiB")


if __name__ == "__main__":
    main()
