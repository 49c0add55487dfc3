"""SIGINT and SIGTERM: a run stops its kernels, writes what finished, never moves ``latest``,
prints one line and exits 128 + the signal. Real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from incidentkit import stopping
from incidentkit.findings import Findings

ROOT = Path(__file__).resolve().parent.parent
CRASH = ROOT / "fixtures" / "crash_recovery"
HEALTHY = ROOT / "fixtures" / "healthy"
pytestmark = pytest.mark.notebook


def start(*argv: str) -> subprocess.Popen[str]:
    """The command, with Python's fault handler on: a run that hangs after its stop is made
    to print every thread's stack (:func:`finish`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "incidentkit.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )


def finish(process: subprocess.Popen[str], seconds: float = 60) -> tuple[str, str]:
    """The stopped command's output once it has ended; one that has not ended by then fails
    the test with the stacks of its threads (SIGABRT makes the fault handler print them)."""
    try:
        return process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        _, stacks = process.communicate(timeout=30)
        pytest.fail(f"the command did not end {seconds} s after its stop:\n{stacks[-8000:]}")


def wait_for(done: Callable[[], bool], process: subprocess.Popen[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never reached the point to stop it at"
        time.sleep(0.05)


def kernels_of(pid: int) -> list[int]:
    """Live kernel processes that ``pid`` started (jupyter_client marks them JPY_PARENT_PID)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if f"JPY_PARENT_PID={pid}".encode() in environ:
            found.append(int(entry.name))
    return found


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*partial*"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_run_all_says_what_finished_and_keeps_latest(
    signum: int, tmp_path: Path
) -> None:
    out = tmp_path / "reports"
    earlier = out / "2026-01-01T000000Z"
    earlier.mkdir(parents=True)
    (out / "latest").symlink_to(earlier.name)
    process = start(
        *("run", "all", "--evidence", str(CRASH), "--out", str(out), "--timestamped"),
        *("--as-of", "2026-11-29T03:05:00Z", "-p", "app_name", "invoicing", "--quiet"),
    )
    folder = out / "2026-11-29T030500Z"
    wait_for(lambda: any(folder.glob("*/*.html")), process, 180)  # one flow finished
    process.send_signal(signum)
    _, stderr = finish(process)

    assert process.returncode == 128 + signum
    name = signal.Signals(signum).name
    assert stderr.splitlines() == [
        f"incidentkit: interrupted by {name}; {folder / 'summary.json'} says which flows finished"
    ]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert (summary["status"], summary["exit_code"]) == ("interrupted", 128 + signum)
    statuses = {flow: entry["status"] for flow, entry in summary["flows"].items()}
    assert set(statuses) == {"orphans", "latency_cliff", "runaway", "overview"}
    finished = {flow for flow, status in statuses.items() if status != "interrupted"}
    assert finished and finished != set(statuses)  # some finished, the rest were stopped
    for flow in finished:
        assert summary["flows"][flow]["report"] == f"{flow}/{flow}.html"
        assert (folder / flow / f"{flow}.html").is_file()
    for flow in set(statuses) - finished:
        assert summary["flows"][flow]["error"] == f"interrupted by {name}"
        assert not (folder / flow / f"{flow}.ipynb").exists()  # no half notebook under its name
    assert (folder / "index.html").is_file()
    assert os.readlink(out / "latest") == earlier.name
    assert leftovers(out) == []
    assert kernels_of(process.pid) == []


def test_a_terminated_flow_leaves_findings_that_say_so_and_no_half_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = start(
        *("run", "orphans", "--evidence", str(HEALTHY), "--out", str(out)),
        *("-p", "app_name", "invoicing", "--quiet"),
    )
    wait_for(lambda: bool(leftovers(tmp_path)), process, 120)  # the notebook is being written
    process.send_signal(signal.SIGTERM)
    _, stderr = finish(process)

    assert process.returncode == 143
    assert stderr.splitlines() == [
        f"incidentkit: interrupted by SIGTERM; {out / 'findings.json'} says so"
    ]
    findings = Findings.read(out / "findings.json")
    assert [item.id for item in findings.items] == ["run/interrupted"]
    assert findings.verdict.value == "INCOMPLETE_EVIDENCE"
    assert sorted(p.name for p in out.iterdir()) == [".incidentkit.lock", "findings.json"]
    assert kernels_of(process.pid) == []


def test_an_interrupted_snapshot_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    process = start("snapshot", str(CRASH), "--out", str(target), "--quiet")
    wait_for(lambda: (tmp_path / ".snap.partial").exists(), process, 120)
    process.send_signal(signal.SIGINT)
    _, stderr = finish(process)

    assert process.returncode == 130
    assert stderr.splitlines() == ["incidentkit: interrupted by SIGINT"]
    assert list(tmp_path.iterdir()) == []


def test_a_library_error_after_a_stop_is_reported_as_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A library that checks for signals itself (DuckDB, Arrow) turns the kit's stop into an
    error of its own: the command still says it was interrupted, with the signal's code."""
    from incidentkit import snapshot
    from incidentkit.cli import main

    def stopped_then_failed(*_args: object, **_kwargs: object) -> None:
        stopping.stop(signal.SIGINT)
        raise RuntimeError("INTERRUPT Error: Interrupted!")  # what duckdb raises

    monkeypatch.setattr(snapshot, "take", stopped_then_failed)
    assert main(["snapshot", str(CRASH), "--out", str(tmp_path / "snap")]) == 130
    assert capsys.readouterr().err.splitlines() == ["incidentkit: interrupted by SIGINT"]

    def failed(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(snapshot, "take", failed)  # no stop: a failure stays a failure
    assert main(["snapshot", str(CRASH), "--out", str(tmp_path / "snap")]) == 4


def test_a_run_abandoned_mid_loop_leaves_no_kernel_client_open() -> None:
    """A stop raises inside the client's event loop, so nbclient never closes its client; the
    run's kernel manager does, or the client's ``__del__`` could hang the exiting command."""
    import asyncio

    from incidentkit.runner import KERNEL, _run_kernel

    made = []
    with pytest.raises(stopping.Interrupted), _run_kernel() as manager:
        kernels = manager(kernel_name=KERNEL)

        async def started() -> None:
            await kernels.start_kernel()
            client = kernels.client()
            client.start_channels()
            await client.wait_for_ready(timeout=60)
            made.append(client)

        try:
            asyncio.run(started())
        finally:
            asyncio.run(kernels.shutdown_kernel(now=True))
        assert not made[0].context.closed  # open, as a stopped run leaves it
        raise stopping.Interrupted(signal.SIGTERM)
    assert made[0].context.closed
    assert not made[0].channels_running
