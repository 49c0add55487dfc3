"""What the flow reads from thread dumps and a JFR recording, in one pass: stuck thread groups,
spinning threads, lock owners, and what the evidence cannot tell.

The dumps' unchanged threads are split by their CPU time into stuck and spinning
(:mod:`.stacks`, :mod:`.spinning`); JFR samples add threads stuck in one native call and tell
busy threads when the dumps carry no ``cpu=`` (:mod:`.samples`); lock chains name the owners
the stuck threads wait for (:mod:`.locks`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from incidentkit.flows.latency_cliff.locks import lock_owners
from incidentkit.flows.latency_cliff.samples import executed_between, sampled_stuck, with_sampled
from incidentkit.flows.latency_cliff.spinning import group_spinning
from incidentkit.flows.latency_cliff.stacks import busy, group_stuck, unchanged_threads


@dataclass(frozen=True)
class ThreadReading:
    """The threads' part of the report (each frame documented by its ``*_COLUMNS``)."""

    groups: pd.DataFrame
    spinning: pd.DataFrame
    owners: pd.DataFrame
    dumps: int
    recordings: int
    notes: tuple[str, ...]


def read_threads(
    threads: pd.DataFrame,
    tools: Iterable[str],
    *,
    jfr_samples: pd.DataFrame | None = None,
    jfr_locks: pd.DataFrame | None = None,
) -> ThreadReading:
    """Stuck groups, spinning threads and lock owners of ``threads`` (the dumps) and a
    recording's frames, tied to the open calls' ``tools``."""
    wanted = [str(tool) for tool in tools]
    dumps = int(threads["dump"].nunique())
    samples = jfr_samples if jfr_samples is not None else pd.DataFrame()
    recordings = int(samples["recording"].nunique()) if len(samples) else 0
    sampled = sampled_stuck(samples) if recordings else pd.DataFrame()
    executed = executed_between(samples, threads["taken_at"]) if recordings else {}
    unchanged = unchanged_threads(threads)
    ran = busy(unchanged, executed)
    stuck = unchanged.loc[~ran]
    owners = lock_owners(threads, wanted, unchanged=stuck["thread"], jfr_locks=jfr_locks)
    if dumps >= 2 or len(sampled):
        groups = group_stuck(with_sampled(stuck, sampled), wanted, owners)
    else:
        groups = group_stuck(pd.DataFrame(), ())
    return ThreadReading(
        groups=groups,
        spinning=group_spinning(unchanged.loc[ran], wanted, executed),
        owners=owners,
        dumps=dumps,
        recordings=recordings,
        notes=_notes(unchanged, owners, dumps=dumps, recordings=recordings),
    )


def _notes(
    unchanged: pd.DataFrame, owners: pd.DataFrame, *, dumps: int, recordings: int
) -> tuple[str, ...]:
    """What the dumps cannot tell: too few of them, no ``cpu=`` to tell busy from blocked, a
    ``java.util.concurrent`` lock whose owner only ``Thread.print -l`` names."""
    notes = []
    if dumps < 2:
        notes.append(
            ("Stuck threads from the JFR samples only: " if recordings else "No thread verdict: ")
            + ("no thread dumps" if dumps == 0 else "one thread dump")
            + " (take two with jcmd <pid> Thread.print -l, ten seconds apart, while runs hang)."
        )
    elif len(unchanged) and unchanged["cpu_share"].isna().all():
        notes.append(
            "The thread dumps carry no cpu= and elapsed= (Thread.dump_to_file, or a JDK before "
            "11): a thread spinning in place and a blocked one look alike, so every unchanged "
            "thread counts as stuck"
            + (" unless the JFR recording sampled it running." if recordings else ".")
        )
    unknown = owners.loc[owners["owner"].isna()]
    if len(unknown):
        classes = ", ".join(sorted(set(unknown["lock_class"].dropna())))
        notes.append(
            f"{int(unknown['count'].sum())} thread(s) are parked on a java.util.concurrent lock "
            f"({classes}) whose owner the dumps do not name: only jcmd <pid> Thread.print -l "
            "lists each thread's locked ownable synchronizers. Take the dumps with -l."
        )
    return tuple(notes)
