"""The one error hierarchy of incidentkit.

Every message says what failed, the offending value, and what to do::

    IncidentkitError
     ├── ManifestError      evidence.toml is missing, malformed, or holds a secret
     ├── ParameterError     a flow or loader parameter is wrong (naive datetime, bad template, ...)
     ├── SourceError        an evidence source cannot be read (missing file, unreachable database)
     │    └── SchemaError   the source is there but its shape is not one the kit reads
     ├── SimulationError    the simulator was asked for something it cannot write
     └── NotebookError      a flow notebook failed while papermill executed it

Rows that cannot be read are not errors: they become rows of the ``rejects`` frame.

Each class carries the exit code the command line (and ``incidentkit run``, for an error raised
inside a notebook) ends with: 2 evidence incomplete, 3 usage or manifest, 4 notebook failure.
"""

from __future__ import annotations

from typing import ClassVar, Final

from incidentkit.redact import scrub_text

_NO_VALUE: Final = object()


EXIT_INCOMPLETE, EXIT_USAGE, EXIT_NOTEBOOK = 2, 3, 4


class IncidentkitError(Exception):
    """Base class: ``problem: value. fix`` in one message, with every known secret masked."""

    exit_code: ClassVar[int] = EXIT_USAGE

    def __init__(self, problem: str, *, value: object = _NO_VALUE, fix: str = "") -> None:
        self.problem = problem
        self.value = value
        self.fix = fix
        message = problem if value is _NO_VALUE else f"{problem}: {value!r}"
        if fix:
            message = f"{message}. {fix}"
        super().__init__(scrub_text(message))  # no remembered secret survives in a message


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


def exit_code_of(name: str) -> int:
    """The exit code of the error class called ``name`` (raised in a notebook); else 4."""
    found = {cls.__name__: cls for cls in _classes(IncidentkitError)}.get(name)
    return found.exit_code if found is not None else EXIT_NOTEBOOK


def _classes(root: type[IncidentkitError]) -> list[type[IncidentkitError]]:
    return [root, *(c for sub in root.__subclasses__() for c in _classes(sub))]
