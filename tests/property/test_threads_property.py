"""Thread dumps as the JDK writes them, generated: every header's ``cpu=``/``elapsed=`` and
every lock line read back exactly, hostile lines never a foreign exception; and the lock
chains of any dump end at a thread that waits for no held lock, or say deadlock.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import IncidentkitError
from incidentkit.flows.latency_cliff.locks import lock_owners
from incidentkit.frames import build
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.jvm import threads

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
_BREAKS = set("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00")
ADDRESSES = st.integers(min_value=1, max_value=2**40).map(lambda n: f"0x{n:016x}")
CLASSES = st.sampled_from(
    [
        "com.acme.orders.PriceCache",
        "java.util.concurrent.locks.ReentrantLock$NonfairSync",
        "java.lang.Object",
    ]
)
MILLIS = st.one_of(st.none(), st.decimals(min_value=0, max_value=10**9, places=2))
NAMES = st.text(max_size=20).filter(lambda t: not set(t) & _BREAKS and t.strip() == t)
LOCK = st.tuples(
    st.sampled_from(["locked ", "waiting to lock ", "waiting on ", "parking to wait for  "]),
    ADDRESSES,
    CLASSES,
)
JUNK = st.text(max_size=40).filter(lambda t: not set(t) & _BREAKS)


def _load(text: str) -> pd.DataFrame | None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dump-2026-11-29T03-12-01Z.txt"
        path.write_text(text, encoding="utf-8")
        try:
            loaded = threads.load(SourceSpec("threads", paths=(path,)), Filters())
        except IncidentkitError:
            return None
    return loaded.frames["threads"]


def _header(i: int, name: str, cpu: object, elapsed: object) -> str:
    clock = (f" cpu={cpu}ms" if cpu is not None else "") + (
        f" elapsed={elapsed}s" if elapsed is not None else ""
    )
    ids = f"tid=0x{i:x} nid={100 + i}"
    return f'"{name}" #{i} [{100 + i}] daemon prio=5 os_prio=0{clock} {ids} runnable'


@SETTINGS
@given(
    blocks=st.lists(
        st.tuples(
            NAMES,
            MILLIS,
            MILLIS,
            st.lists(LOCK, max_size=4),
            st.one_of(st.none(), st.lists(ADDRESSES, max_size=2)),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_headers_and_lock_lines_read_back_exactly(
    blocks: list[tuple[str, object, object, list[tuple[str, str, str]], list[str] | None]],
) -> None:
    lines = ["4711:", "2026-11-29 03:12:01", "Full thread dump OpenJDK (test):", ""]
    for i, (name, cpu, elapsed, locks, owned) in enumerate(blocks, start=1):
        lines += [_header(i, name, cpu, elapsed), "   java.lang.Thread.State: RUNNABLE"]
        lines.append("\tat com.acme.A.run(A.java:1)")
        lines += [f"	- {verb}<{a}> (a {c})" for verb, a, c in locks]  # as HotSpot spaces them
        lines.append("")
        if owned is not None:
            lines += ["   Locked ownable synchronizers:"]
            lines += [
                f"\t- <{a}> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)" for a in owned
            ] or ["\t- None"]
            lines.append("")
    lines.append("JNI global refs: 1, weak refs: 0")
    got = _load("\n".join(lines) + "\n")
    assert got is not None
    assert len(got) == len(blocks)
    for row, (name, cpu, elapsed, locks, owned) in zip(got.to_dict("records"), blocks, strict=True):
        assert row["thread"] == name
        assert math.isnan(row["cpu_ms"]) if cpu is None else row["cpu_ms"] == float(cpu)  # type: ignore[arg-type]
        if elapsed is None:
            assert math.isnan(row["elapsed_ms"])
        else:
            assert math.isclose(row["elapsed_ms"], float(elapsed) * 1000)  # type: ignore[arg-type]
        awaited = next(
            (
                a
                for verb, a, _ in locks
                if verb.strip() in ("waiting to lock", "parking to wait for")
            ),
            None,
        )
        assert pd.isna(row["lock_awaited"]) if awaited is None else row["lock_awaited"] == awaited
        released = {a for verb, a, _ in locks if verb.strip() == "waiting on"} | {awaited}
        held = [a for verb, a, _ in locks if verb.strip() == "locked" and a not in released]
        owns = [a for a in owned or [] if a not in released]  # waited for: not held
        assert row["locks_held"] == tuple(dict.fromkeys([*held, *owns]))
        assert row["frames"] == ("com.acme.A.run(A.java:1)",)
    assert got["synchronizers_listed"].all() == any(b[4] is not None for b in blocks)


@SETTINGS
@given(junk=st.lists(JUNK, min_size=1, max_size=8), plain=st.booleans())
def test_hostile_lines_inside_a_block_never_escape_as_foreign_errors(
    junk: list[str], plain: bool
) -> None:
    if plain:
        head = [
            "4711",
            "2026-11-29T03:12:01Z",
            "25.0.3",
            "",
            '#3 "main" RUNNABLE 2026-11-29T03:12:01.5Z',
        ]
    else:
        head = [
            "2026-11-29 03:12:01",
            "Full thread dump x:",
            "",
            _header(1, "main", "1.00", "2.00"),
        ]
    body = [f"    {line}" for line in junk] + [f"    - {line}" for line in junk]
    got = _load("\n".join([*head, *body, ""]))
    if got is not None:
        assert not any(f.startswith("- ") for frames in got["frames"] for f in frames)


EDGES = st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 7))), max_size=8)


@SETTINGS
@given(edges=EDGES, held_by=st.lists(st.integers(0, 7), min_size=8, max_size=8))
def test_every_chain_ends_at_a_thread_waiting_for_no_held_lock(
    edges: list[tuple[int, int | None]], held_by: list[int]
) -> None:
    """Thread t holds lock L{i} when held_by[i] == t; a waiter awaits one lock. Whatever the
    graph (cycles included), each owner row's owner is a thread, and it awaits no held lock
    unless the row says deadlock."""
    awaits = dict(edges)
    rows = []
    for t in range(8):
        lock = awaits.get(t)
        rows.append(
            {
                "dump": "d", "thread": f"t{t}", "nid": str(t), "state": "BLOCKED",
                "frames": ("com.acme.A.run(A.java:1)",),
                "locks_held": tuple(f"L{i}" for i, h in enumerate(held_by) if h == t),
                "lock_awaited": None if lock is None else f"L{lock}",
                "lock_class": "com.acme.A", "lock_wait": "monitor",
                "synchronizers_listed": True,
            }
        )  # fmt: skip
    frame = build("threads", rows)
    owners = lock_owners(frame)
    holder = {f"L{i}": f"t{h}" for i, h in enumerate(held_by)}
    by_name = {r["thread"]: r for r in rows}
    for row in owners.to_dict("records"):
        owner = row["owner"]
        assert isinstance(owner, str) and owner in by_name
        awaited = by_name[owner]["lock_awaited"]
        if not row["deadlock"]:
            assert awaited is None or holder.get(awaited) in (None, owner)
        assert owner not in row["waiters"] or row["deadlock"]
