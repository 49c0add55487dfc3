"""Stopping a run cleanly on SIGINT and SIGTERM.

The command line runs every command inside :func:`handling`. The first signal then sets the
stop flag that the flow runners check, kills every flow kernel this process started (they run in
sessions of their own, so a terminal's Ctrl-C never reaches them) and raises :class:`Interrupted`
in the main thread. The runners write what finished and mark the rest ``interrupted``; every
artifact is renamed into place, so nothing is left half written; the command prints one line
and exits 128 + the signal (130, 143). Later signals are ignored while that is written (it
takes seconds: the kernels are already dead); SIGKILL still stops the process at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from incidentkit.errors import Exit

SIGNALS = (signal.SIGINT, signal.SIGTERM)
QUIETED = ("papermill", "nbclient", "traitlets")
"""Loggers that report a killed kernel as an error."""


class Interrupted(BaseException):
    """The run was stopped by a signal. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` mistakes it for a failure of one flow."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.note = ""
        """What the run left behind, for the one line the command prints."""
        super().__init__(self.signal_name)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> Exit:
        return exit_code_of(self.signum)


def exit_code_of(signum: int) -> Exit:
    """130 for SIGINT, 143 for SIGTERM."""
    return Exit.INTERRUPTED if signum == signal.SIGINT else Exit.TERMINATED


_kernels: dict[int, Callable[[], None]] = {}
_lock = threading.Lock()
_stopped: int | None = None


def requested() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _stopped


def register(key: int, kill: Callable[[], None]) -> None:
    """Remember how to kill one flow kernel; a kernel that starts after a stop dies at once."""
    with _lock:
        _kernels[key] = kill
    if _stopped is not None:
        _kill_all()


def unregister(key: int) -> None:
    """Forget a kernel that has shut down."""
    with _lock:
        _kernels.pop(key, None)


def stop(signum: int) -> None:
    """Ask the run to stop: set the flag and kill every kernel (safe in a signal handler: no
    lock is taken, the kernels are copied in one step). The runners' complaints about the
    kernels' deaths are silenced: the command says why in its one line."""
    global _stopped
    if _stopped is None:
        _stopped = signum
        for name in QUIETED:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    _kill_all()


def _kill_all() -> None:
    for kill in list(_kernels.values()):
        with contextlib.suppress(OSError):
            kill()


def kill_process_group(pid: int) -> Callable[[], None]:
    """A killer for a kernel that leads a session of its own (how jupyter_client starts them)."""

    def kill() -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:  # not its group's leader after all: the process alone
            os.kill(pid, signal.SIGKILL)

    return kill


_deferring = 0
_pending: int | None = None


def _handle(signum: int, frame: FrameType | None) -> None:
    global _pending
    first = _stopped is None
    stop(signum)
    if not first:  # later signals: the run is already writing what it finished
        return
    if _deferring:
        _pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A step that must not be cut in two (a kernel's launch and registration): a signal that
    arrives meanwhile raises :class:`Interrupted` when the step ends."""
    global _deferring, _pending
    main = threading.current_thread() is threading.main_thread()
    _deferring += main
    try:
        yield
    finally:
        _deferring -= main
        signum, _pending = _pending, None
    if signum is not None and main:
        raise Interrupted(signum)


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """SIGINT and SIGTERM stop the run (see the module); the previous handlers come back after,
    and the stop flag is cleared. Outside the main thread, nothing is installed."""
    global _stopped
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handle) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stopped = None
        _kernels.clear()
