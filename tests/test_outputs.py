"""Output folders: artifacts renamed into place, one live run per folder, ``latest`` raced for
by no one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from threading import Thread

import pytest

from incidentkit import outputs, schedule
from incidentkit.cli import main
from incidentkit.errors import BusyError, Exit

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "healthy"

HOLD = """
import sys, time
from incidentkit.outputs import holding
with holding(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def hold_in_child(folder: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def test_a_file_written_atomically_is_whole_or_absent(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    outputs.write_atomic(target, "first\n")
    with pytest.raises(RuntimeError), outputs.partial(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("killed while writing")
    assert target.read_text() == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left
    with outputs.partial(tmp_path / "report.ipynb") as temporary:
        assert temporary.suffix == ".ipynb" and temporary.name.startswith(".report.")
    assert not (tmp_path / "report.ipynb").exists()  # never written: nothing renamed


def test_a_second_run_into_a_held_folder_is_busy_and_names_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    child = hold_in_child(out)
    try:
        argv = ["run", "orphans", "--evidence", str(HEALTHY), "--out", str(out), "--quiet"]
        assert main(argv) == Exit.BUSY == 5
        line = capsys.readouterr().err
        assert f"another run is writing into this folder: '{out}'" in line
        assert f"pid {child.pid}" in line
        assert sorted(p.name for p in out.iterdir()) == [outputs.LOCK_NAME]  # nothing written
    finally:
        child.kill()
        child.communicate()


def test_a_folder_whose_holder_died_is_taken_over_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    child = hold_in_child(out)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    with outputs.holding(out) as gone:
        assert gone == child.pid
        with pytest.raises(BusyError, match=f"pid {os.getpid()}"), outputs.holding(out):
            pass  # held by this run now, also against another descriptor of this process
    with outputs.holding(out) as gone:
        assert gone is None  # the run above finished: nothing to take over
    child = hold_in_child(out)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    argv = ["run", "nonexistent_flow", "--evidence", str(HEALTHY), "--out", str(out)]
    assert main(argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"warning: took over {out} from run pid {child.pid}, which ended without" in err


def test_latest_points_at_the_latest_run_whatever_order_runs_finish_in(tmp_path: Path) -> None:
    folders = [tmp_path / f"2026-12-02T0{hour}1500Z" for hour in range(10)]
    for folder in folders:
        folder.mkdir()
    threads = [Thread(target=schedule.point_latest, args=(f,)) for f in reversed(folders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert os.readlink(tmp_path / "latest") == folders[-1].name
    schedule.point_latest(folders[3])  # a backfill, finishing last
    assert os.readlink(tmp_path / "latest") == folders[-1].name
    suffixed = tmp_path / f"{folders[-1].name}-2"
    suffixed.mkdir()
    schedule.point_latest(suffixed)
    assert os.readlink(tmp_path / "latest") == suffixed.name
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_dir() or p.is_symlink()) == [
        "latest"
    ]
