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
"""

from __future__ import annotations

from typing import Final

from incidentkit.redact import scrub_text

_NO_VALUE: Final = object()


class IncidentkitError(Exception):
    """Base class: ``problem: value. fix`` in one message, with every known secret masked."""

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


class SchemaError(SourceError):
    """A source is reachable but lacks a table, a column, or a supported format version."""


class SimulationError(IncidentkitError):
    """The simulator cannot produce what was asked (unknown scenario, colliding rows)."""


class NotebookError(IncidentkitError):
    """A flow notebook failed during execution."""
