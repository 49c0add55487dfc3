"""Background traffic in parallel: large scales split the healthy sessions over two processes.

The number of shards depends on the scale only (never on the machine), each shard has its own
random generator derived from the seed, and parts are joined in shard order: the same arguments
give the same bytes on one core or many.
"""

from __future__ import annotations

import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from incidentkit.simulate.model import LedgerRow
from incidentkit.simulate.pack import Pack, PartResult
from incidentkit.simulate.traffic import Background, stream
from incidentkit.simulate.world import Billing, RunStat, World

SHARD_FROM_SCALE = 8
SHARDS = 2
INVOICE_BLOCK = 10_000_000


def shard_count(scale: int) -> int:
    """How many shards generate the background at ``scale`` (a function of the scale only)."""
    return SHARDS if scale >= SHARD_FROM_SCALE else 1


@dataclass(frozen=True)
class Job:
    """One shard's work."""

    folder: Path
    scenario: str
    seed: int
    shard: int
    background: Background
    events_format: str
    window: tuple[int, int]
    sql: bool
    zone: str = "UTC"


@dataclass
class Done:
    """One shard's result: its part files and what the truth needs from it."""

    part: PartResult
    stats: list[RunStat]
    billing: Billing
    open_rows: list[LedgerRow]


def split(background: Background, shards: int) -> list[Background]:
    base, extra = divmod(background.sessions, shards)
    return [replace(background, sessions=base + (1 if k < extra else 0)) for k in range(shards)]


def run_shard(job: Job) -> Done:
    """Generate one shard of the background into part files."""
    world = World(random.Random(f"{job.seed}/{job.scenario}/background/{job.shard}"))
    world.counters["invoice"] = (job.shard + 1) * INVOICE_BLOCK + 1
    pack = Pack(
        job.folder,
        events_format=job.events_format,
        window=job.window,
        part=f"shard{job.shard}",
        sql=job.sql,
        zone=job.zone,
    )
    for bundle in stream(world, job.background):
        pack.emit(bundle)
    result = pack.finish_part()
    return Done(result, world.stats, world.billing, result.open_rows)


def run_all(jobs: list[Job]) -> list[Done]:
    """Run the shards, in parallel when the machine has cores for it; results in shard order."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [run_shard(job) for job in jobs]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        return list(pool.map(run_shard, jobs))
