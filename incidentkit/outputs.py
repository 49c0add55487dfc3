"""The kit's output folders: every artifact renamed into place, one live run per folder.

- :func:`write_atomic` and :func:`partial` write a file under a temporary name in its folder
  and rename it into place, so a reader (a scheduler, a browser, the next run) sees the old
  file or the whole new one, never half of one — also when the run is killed.
- :func:`holding` takes a folder for one run: a second run into it is refused with
  :class:`~incidentkit.errors.BusyError` naming the holder's pid. The lock is the kernel's
  (``flock`` on ``.incidentkit.lock``), so it goes with its process however that ends; the file
  keeps the holder's pid, and a run that finds the pid of one that is gone takes the folder over
  and says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from incidentkit.errors import BusyError, ParameterError

LOCK_NAME = ".incidentkit.lock"


_PARTIAL = re.compile(r"\.(?P<stem>.*)\.\d+-\d+\.partial(?P<suffix>(?:\.[^.]*)?)")


def _temporary(path: Path) -> Path:
    """A hidden name beside ``path``, unique to this thread, with the same suffix."""
    unique = f"{os.getpid()}-{threading.get_ident()}"
    return path.with_name(f".{path.stem}.{unique}.partial{path.suffix}")


def final_name(path: str | os.PathLike[str]) -> str:
    """The name a temporary file of :func:`partial` was to get (any other path unchanged)."""
    target = Path(path)
    found = _PARTIAL.fullmatch(target.name)
    return str(target.with_name(found["stem"] + found["suffix"]) if found else target)


@contextlib.contextmanager
def partial(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary name beside ``path`` to write to; renamed to ``path`` when the block ends
    without an exception (if it was written), removed when it raises (whatever it raises)."""
    target = Path(path)
    temporary = _temporary(target)
    try:
        yield temporary
        if temporary.exists():
            os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary name; returns ``path``."""
    target = Path(path)
    with partial(target) as temporary:
        if isinstance(data, str):
            temporary.write_text(data, encoding="utf-8")
        else:
            temporary.write_bytes(data)
    return target


def out_folder(out: str | os.PathLike[str], *, fix: str) -> Path:
    """The ``--out`` folder, created if missing; a file of that name is a
    :class:`ParameterError` (``fix`` says what the folder is for)."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise ParameterError("--out names a file, not a folder", value=str(root), fix=fix)
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def holding(folder: str | os.PathLike[str]) -> Iterator[int | None]:
    """Hold ``folder`` (created if missing) for this run; yields the pid of an earlier run that
    held it and is gone without finishing (its files there may be partial), else None.

    Raises :class:`BusyError` when a live run holds it, :class:`ParameterError` when ``folder``
    is a file, and ``OSError`` when it cannot be created or written.
    """
    root = out_folder(
        folder, fix="give a folder for the notebook, the report and findings.json (it is created)"
    )
    descriptor = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = _pid_in(descriptor)
            raise BusyError(
                "another run is writing into this folder",
                value=str(root),
                fix=f"wait for it (pid {holder or 'unknown'}) to finish and run again, or give "
                "another --out (--timestamped gives every run a folder of its own)",
            ) from None
        gone = _pid_in(descriptor)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        try:
            yield gone
        finally:
            os.ftruncate(descriptor, 0)  # finished: nothing to take over
    finally:
        os.close(descriptor)  # releases the lock


def _pid_in(descriptor: int) -> int | None:
    text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


@contextlib.contextmanager
def exclusive(folder: str | os.PathLike[str]) -> Iterator[None]:
    """A short critical section among processes, locked on ``folder`` itself (waits its turn;
    leaves no file behind)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
