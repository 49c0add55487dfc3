from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import SourceError
from incidentkit.frames import spec_of
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources.jvm import threads
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "threads"
NAMED = "dump-2026-11-29T03-12-01Z.txt"


def load(*paths: str | Path, naive: str = "error", filters: Filters | None = None) -> Loaded:
    spec = SourceSpec("threads", paths=tuple(DATA / p for p in paths), naive_timestamps=naive)
    return threads.load(spec, filters or Filters())


def frame(*paths: str | Path, **kwargs: object) -> pd.DataFrame:
    loaded = load(*paths, **kwargs)  # type: ignore[arg-type]
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["threads"]


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC").as_unit("ns")


def test_one_row_per_thread_with_state_and_stack() -> None:
    got = frame(NAMED)
    assert list(got.columns) == spec_of("threads").names
    assert got["thread"].tolist() == [
        "main",
        "Reference Handler",
        "RxCachedThreadScheduler-3",
        "RxCachedThreadScheduler-4",
        "http-nio-8080-exec-1",
        "VM Thread",
        "GC Thread#0",
    ]
    assert got["state"].tolist() == [
        "WAITING",
        "RUNNABLE",
        "RUNNABLE",
        "RUNNABLE",
        "TIMED_WAITING",
        "UNKNOWN",
        "UNKNOWN",
    ]
    assert got["dump"].eq(NAMED).all()
    rx = got.set_index("thread").loc["RxCachedThreadScheduler-3"]
    assert rx["top_frame"] == "sun.nio.ch.Net.poll(java.base@17.0.12/Native Method)"
    assert len(rx["frames"]) == 9  # the "- locked" line and the synchronizers are not frames
    assert rx["frames"][7] == "com.example.tools.OrderLookupTool.call(OrderLookupTool.java:57)"
    assert all(not f.startswith(("- ", "at ")) for frames in got["frames"] for f in frames)
    assert rx["nid"] == "0x3a"
    assert got.set_index("thread").loc["main", "nid"] == "0x1"
    vm = got.set_index("thread").loc["VM Thread"]
    assert pd.isna(vm["top_frame"])
    assert vm["frames"] == ()


def test_utc_time_in_the_file_name_fixes_the_jvm_offset() -> None:
    # the header says 04:12:01 (JVM at UTC+1); the file name says 03:12:01Z
    assert frame(NAMED)["taken_at"].eq(utc("2026-11-29T03:12:01Z")).all()


def test_file_name_offset_applies_to_every_dump_of_the_file(tmp_path: Path) -> None:
    # the name was stamped a few seconds off: the header keeps its precision
    named = tmp_path / "threads-2026-11-29T04:12:03+01:00.txt"
    shutil.copy(DATA / "two_dumps.txt", named)
    got = load(named).frames["threads"]
    assert got["taken_at"].unique().tolist() == [
        utc("2026-11-29T03:12:01Z"),
        utc("2026-11-29T03:12:11Z"),
    ]


def test_several_dumps_in_one_file_are_numbered() -> None:
    got = frame("two_dumps.txt", naive="utc")
    assert got["dump"].tolist() == ["two_dumps.txt#1", "two_dumps.txt#1", "two_dumps.txt#2"]
    assert got["taken_at"].tolist() == [
        utc("2026-11-29T03:12:01Z"),
        utc("2026-11-29T03:12:01Z"),
        utc("2026-11-29T03:12:11Z"),
    ]
    carrier = got.set_index("thread").loc["ForkJoinPool-1-worker-1"]
    assert carrier["state"] == "WAITING"
    assert carrier["frames"] == (
        "jdk.internal.vm.Continuation.run(java.base@21.0.4/Continuation.java:248)",
        "java.lang.VirtualThread.runContinuation(java.base@21.0.4/VirtualThread.java:221)",
    )
    same = got.groupby("thread")["top_frame"].nunique()
    assert same["RxCachedThreadScheduler-3"] == 1


def test_an_undated_dump_loads_its_stacks_with_a_warning() -> None:
    """No zone and no UTC file name: taken_at is unknown, the stacks still compare."""
    loaded = load("two_dumps.txt")
    got = loaded.frames["threads"]
    assert len(got) > 0 and got["taken_at"].isna().all()
    assert loaded.rejects.empty
    [reason] = loaded.warnings["reason"].tolist()
    assert 'set timezone = "UTC"' in reason and "dump-2026-11-29T03:12:01Z" in reason
    assert got["dump"].unique().tolist() == ["two_dumps.txt#1", "two_dumps.txt#2"]


def test_dump_to_file_text_lists_virtual_threads() -> None:
    got = frame("virtual.txt")
    assert got["thread"].tolist() == ["main", "#30", "#119"]
    assert got["nid"].tolist() == ["#1", "#30", "#119"]
    assert got["taken_at"].eq(utc("2026-11-29T03:12:01.531274Z")).all()
    assert got["state"].eq("UNKNOWN").all()
    assert got["top_frame"].iloc[1] == (
        "java.base/java.lang.VirtualThread.parkNanos(VirtualThread.java:640)"
    )
    assert len(got["frames"].iloc[1]) == 3
    assert got["frames"].iloc[2] == ()


def test_truncated_dump_keeps_the_thread_and_reports_it() -> None:
    loaded = load("truncated.txt", naive="utc")
    got = loaded.frames["threads"]
    assert got["thread"].tolist() == ["main", "RxCachedThreadScheduler-3"]
    assert got["state"].tolist() == ["WAITING", "UNKNOWN"]
    assert loaded.rejects["location"].tolist() == ["truncated.txt:9"]
    assert (
        loaded.rejects["reason"]
        .iloc[0]
        .startswith(
            "dump truncated: the file ends inside the block of thread 'RxCachedThreadScheduler-3'"
        )
    )


def test_unrecognised_header_is_a_warning_and_deadlock_report_is_not_threads() -> None:
    loaded = load("bad_header.txt", naive="utc")
    assert loaded.frames["threads"]["thread"].tolist() == ["pool-2-thread-2"]
    assert loaded.rejects.empty
    assert loaded.warnings[["location", "reason"]].to_dict("records") == [
        {
            "location": "bad_header.txt:4",
            "reason": "thread header not recognised (its stack lines are skipped)",
        }
    ]
    assert loaded.warnings["raw"].iloc[0].startswith('"pool-2-thread-1 #12')


def test_a_dump_cut_inside_its_smr_block_is_a_reject(tmp_path: Path) -> None:
    """The SMR block opens the dump; cut before its "}" no thread follows to be read."""
    text = (DATA / "dump-2026-11-29T03-12-01Z.txt").read_text(encoding="utf-8")
    head = text[: text.index("Threads class SMR info")]
    cut = head + "Threads class SMR info:\n_java_thread_list=0x1, length=2, elements={\n0x1,\n"
    path = tmp_path / "dump-2026-11-29T03-12-01Z.txt"
    path.write_text(cut, encoding="utf-8")
    loaded = load(path)
    assert loaded.frames["threads"].empty
    assert loaded.rejects["reason"].str.startswith("dump cut inside its Threads class SMR").all()
    # Cut inside the block but followed by threads: they are read, with a warning.
    whole = text.replace("\n}\n", "\n", 1)
    path.write_text(whole, encoding="utf-8")
    loaded = load(path)
    assert len(loaded.frames["threads"]) > 0
    assert "SMR info block never closed" in loaded.warnings["reason"].iloc[0]


def test_file_without_a_dump_and_missing_file() -> None:
    with pytest.raises(SourceError, match=r"not_a_dump\.txt holds no thread dump"):
        load("not_a_dump.txt")
    with pytest.raises(SourceError, match="file not found"):
        load("absent.txt")


def test_files_are_read_in_order_and_window_filters_dumps() -> None:
    both = frame("virtual.txt", "two_dumps.txt", naive="utc")
    assert both["dump"].drop_duplicates().tolist() == [
        "virtual.txt",
        "two_dumps.txt#1",
        "two_dumps.txt#2",
    ]
    window = Window(utc("2026-11-29T03:12:05Z"), utc("2026-11-29T03:13:00Z"))
    late = frame("virtual.txt", "two_dumps.txt", naive="utc", filters=Filters(window=window))
    assert late["dump"].tolist() == ["two_dumps.txt#2"]


ORDERS = "jvm-orders"


def orders(*names: str) -> pd.DataFrame:
    return frame(*(f"{ORDERS}/{n}" for n in names), naive="UTC")


def test_hotspot_headers_give_cpu_and_elapsed_and_frameless_vm_threads_load() -> None:
    got = orders("dump-l-1.txt").set_index("thread")
    text = (DATA / ORDERS / "dump-l-1.txt").read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith('"restock-poller"'))
    cpu = float(header.split(" cpu=")[1].split("ms")[0])
    elapsed = float(header.split(" elapsed=")[1].split("s ")[0])
    assert got.loc["restock-poller", "cpu_ms"] == cpu
    assert got.loc["restock-poller", "elapsed_ms"] == pytest.approx(elapsed * 1000)
    gc = got.loc["GC Thread#0"]  # a VM thread: a header, no state line, no stack
    assert gc["state"] == "UNKNOWN" and gc["frames"] == () and gc["cpu_ms"] >= 0
    assert got["cpu_ms"].notna().all() and got["elapsed_ms"].gt(0).all()


def test_lock_lines_give_held_and_awaited_locks_not_frames() -> None:
    got = orders("dump-l-1.txt").set_index("thread")
    owner, waiter = got.loc["price-refresher"], got.loc["tool-exec-1"]
    assert waiter["state"] == "BLOCKED" and waiter["lock_wait"] == "monitor"
    assert waiter["lock_class"] == "com.acme.orders.PriceCache"
    assert waiter["lock_awaited"] in owner["locks_held"]
    assert waiter["lock_awaited"].startswith("0x")
    assert not any(f.startswith("- ") for frames in got["frames"] for f in frames)
    finalizer = got.loc["Finalizer"]  # Object.wait gave its monitor up: not held
    assert finalizer["locks_held"] == () and pd.isna(finalizer["lock_awaited"])
    parked = got.loc["inventory-tool-1"]
    assert parked["lock_wait"] == "park"
    assert parked["lock_class"] == "java.util.concurrent.locks.ReentrantLock$NonfairSync"


def test_ownable_synchronizers_are_held_only_in_a_dash_l_dump() -> None:
    with_l = orders("dump-l-1.txt").set_index("thread")
    without = orders("dump-1.txt").set_index("thread")
    assert with_l["synchronizers_listed"].all() and not without["synchronizers_listed"].any()
    awaited = with_l.loc["inventory-tool-1", "lock_awaited"]
    assert awaited in with_l.loc["stock-sync", "locks_held"]  # listed after the blank line
    assert not any(awaited in held for held in without["locks_held"])
    assert with_l.loc["restock-poller", "locks_held"] == ()  # "- None"


def test_a_jdk_25_dump_reads_the_same_with_tid_and_decimal_nid() -> None:
    got = orders("jdk25/dump-l-1.txt").set_index("thread")
    text = (DATA / ORDERS / "jdk25" / "dump-l-1.txt").read_text(encoding="utf-8")
    assert '"main" #3 [' in text  # "name" #N [tid] ... nid=<decimal>
    assert got.loc["main", "nid"].isdigit()
    waiter = got.loc["tool-exec-1"]
    assert waiter["lock_awaited"] in got.loc["price-refresher", "locks_held"]
    assert got.loc["restock-poller", "cpu_ms"] > 0


def test_a_jdk_25_dump_to_file_reads_state_and_class_named_locks() -> None:
    got = orders("jdk25/plain-1.txt").set_index("thread")
    assert got.loc["tool-exec-1", "state"] == "BLOCKED"
    assert got.loc["price-refresher", "state"] == "RUNNABLE"
    awaited = got.loc["tool-exec-1", "lock_awaited"]
    assert awaited.startswith("com.acme.orders.PriceCache@")
    assert got.loc["tool-exec-1", "lock_class"] == "com.acme.orders.PriceCache"
    assert awaited in got.loc["price-refresher", "locks_held"]
    assert got["cpu_ms"].isna().all() and not got["synchronizers_listed"].any()
    top = got.loc["price-refresher", "frames"]
    assert top[0] == "java.base/sun.nio.ch.Net.poll(Native Method)"
    assert not any(f.startswith("- ") for frames in got["frames"] for f in frames)


def test_header_numbers_after_the_name_only(tmp_path: Path) -> None:
    """A thread named like a header field does not lend its name's numbers."""
    path = tmp_path / "dump-2026-11-29T03-12-01Z.txt"
    path.write_text(
        "2026-11-29 03:12:01\nFull thread dump OpenJDK (test):\n\n"
        '"x cpu=99.00ms elapsed=9.00s" #1 prio=5 os_prio=0 tid=0x1 nid=0x1 runnable\n'
        "   java.lang.Thread.State: RUNNABLE\n\n"
        '"y" #2 prio=5 os_prio=0 cpu=1.50ms elapsed=2.25s tid=0x2 nid=0x2 runnable\n'
        "   java.lang.Thread.State: RUNNABLE\n\nJNI global refs: 1, weak refs: 0\n",
        encoding="utf-8",
    )
    got = frame(path).set_index("thread")
    assert pd.isna(got.loc["x cpu=99.00ms elapsed=9.00s", "cpu_ms"])
    assert (got.loc["y", "cpu_ms"], got.loc["y", "elapsed_ms"]) == (1.5, 2250.0)
