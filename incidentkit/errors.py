"""The one error hierarchy of incidentkit.

Every message says what failed, the offending value, and what to do::

    IncidentkitError
     ├── ManifestError      evidence.toml is missing, malformed, or holds a secret
     ├── ParameterError     a flow or loader parameter is wrong (naive datetime, bad template, ...)
     ├── SourceError        an evidence source cannot be read (missing file, unreachable database)
     │    └── SchemaError   the source is there but its shape is not one the kit reads
     ├── SimulationError    the simulator was asked for something it cannot write
     ├── NotebookError      a flow notebook failed while papermill executed it
     └── BusyError          another run holds the output folder

Rows that cannot be read are not errors: they become rows of the ``rejects`` frame.

Each class carries the :class:`Exit` code the command line (and ``incidentkit run``, for an
error raised inside a notebook) ends with. Anything else that escapes (a bug, a full disk) is
not a member of this family: the command line reports it in one line and exits
:attr:`Exit.FAILURE`.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Final

from incidentkit.redact import scrub_text

_NO_VALUE: Final = object()


class Exit(enum.IntEnum):
    """What an ``incidentkit`` exit code means. 0-2 are reports (the run ended in a verdict);
    the others are failures of the run itself. ``docs/scheduling.md`` has the table."""

    CLEAN = 0
    """Report: nothing needs action."""
    ACTION_NEEDED = 1
    """Report: findings need action."""
    INCOMPLETE_EVIDENCE = 2
    """Report: the evidence is incomplete; fix the sources before trusting a verdict."""
    USAGE = 3
    """Failure the operator must fix: a usage, parameter or manifest error."""
    FAILURE = 4
    """Failure: a notebook failed, an internal error, or results could not be written."""
    BUSY = 5
    """Failure that passes: another run holds the output folder; retry later."""
    INTERRUPTED = 130
    """Stopped by SIGINT (128 + 2)."""
    TERMINATED = 143
    """Stopped by SIGTERM (128 + 15)."""

    @property
    def is_report(self) -> bool:
        """Whether the run ended in a verdict (0, 1, 2) rather than failing."""
        return self <= Exit.INCOMPLETE_EVIDENCE

    @property
    def status(self) -> str:
        """The word ``summary.json`` gives this code (``clean``, ... ``interrupted`` for both
        signals)."""
        return "interrupted" if self >= Exit.INTERRUPTED else self.name.lower()


EXIT_INCOMPLETE, EXIT_USAGE, EXIT_NOTEBOOK = Exit.INCOMPLETE_EVIDENCE, Exit.USAGE, Exit.FAILURE


class IncidentkitError(Exception):
    """Base class: ``problem: value. fix`` in one message, with every known secret masked."""

    exit_code: ClassVar[int] = EXIT_USAGE

    def __init__(self, problem: str, *, value: object = _NO_VALUE, fix: str = "") -> None:
        self.problem = problem
        self.value = value
        self.fix = fix
        message = problem if value is _NO_VALUE else f"{problem}: {shown(value)}"
        if fix:
            message = f"{message}. {fix}"
        super().__init__(scrub_text(message))  # no remembered secret survives in a message

    def _render_traceback_(self) -> list[str]:
        """How IPython shows the error in a notebook: its message, not the library's frames
        (the message says what failed, the value and what to do)."""
        return [f"{type(self).__name__}: {self}"]


def shown(value: object) -> str:
    """A value as a message quotes it: text in the first of ``'``, ``"`` or a backtick it does
    not hold (never a backslash-escaped quote), anything else, and text with control
    characters, as Python writes it."""
    if isinstance(value, str) and value.isprintable():
        for quote in ("'", '"', "`"):
            if quote not in value:
                return f"{quote}{value}{quote}"
    return repr(value)


class ManifestError(IncidentkitError):
    """The evidence manifest is missing, malformed, or names a literal secret."""


class ParameterError(IncidentkitError):
    """A parameter given to a loader, flow or command is not acceptable."""


class SourceError(IncidentkitError):
    """An evidence source cannot be opened or read."""

    exit_code: ClassVar[int] = EXIT_INCOMPLETE


class SchemaError(SourceError):
    """A source is reachable but lacks a table, a column, or a supported format version."""


class SimulationError(IncidentkitError):
    """The simulator cannot produce what was asked (unknown scenario, colliding rows)."""


class NotebookError(IncidentkitError):
    """A flow notebook failed during execution."""

    exit_code: ClassVar[int] = EXIT_NOTEBOOK


class BusyError(IncidentkitError):
    """Another live run holds the output folder (retry later; nothing is wrong)."""

    exit_code: ClassVar[int] = Exit.BUSY


def exit_code_of(name: str) -> int:
    """The exit code of the error class called ``name`` (raised in a notebook); else 4."""
    found = {cls.__name__: cls for cls in _classes(IncidentkitError)}.get(name)
    return found.exit_code if found is not None else EXIT_NOTEBOOK


def _classes(root: type[IncidentkitError]) -> list[type[IncidentkitError]]:
    return [root, *(c for sub in root.__subclasses__() for c in _classes(sub))]
