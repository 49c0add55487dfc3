"""Findings: what a triage flow concluded, with the rows that prove it (``findings.json``).

Every flow returns a :class:`Findings`; :meth:`Findings.to_json` writes the versioned
document ``incidentkit.findings/v1`` described in ``docs/findings.md`` and
:meth:`Findings.from_json` reads it back, dispatching on the schema id and checking every
field against the version's schema (msgspec Structs): a misshapen document is a
``ParameterError`` naming the field. Values in rows are JSON-safe: timestamps are ISO 8601
strings in UTC with a ``Z``, missing values are ``null``; URL passwords in text values are
masked (:mod:`incidentkit.redact`).
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, TypedDict, TypeVar, Unpack

import msgspec
import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.outputs import write_atomic
from incidentkit.redact import MASK, SECRET_KEY, scrub_text

SCHEMA = "incidentkit.findings/v1"
ROW_LIMIT = 1000
"""How many proving rows one finding keeps by default (``count`` says how many there were)."""
FLOW_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$"
"""What a document's ``flow`` may be: a name that is safe as a file name and in Markdown."""
MAX_DEPTH = 64
"""How deeply a parameter or row value may nest (a flow's deepest is about 5)."""
TimeLike = datetime | np.datetime64 | str
"""A time a document records (a ``pd.Timestamp`` is a datetime; text is ISO 8601)."""


class Verdict(enum.StrEnum):
    """The flow's conclusion; the command line maps it to its exit code (0, 1, 2)."""

    CLEAN = "CLEAN"
    ACTION_NEEDED = "ACTION_NEEDED"
    INCOMPLETE_EVIDENCE = "INCOMPLETE_EVIDENCE"


class Severity(enum.StrEnum):
    """How urgent one finding is: INFO is for the record, WARNING and CRITICAL need action."""

    INFO = "INFO"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"

    @property
    def rank(self) -> int:
        """Its place when findings are read most urgent first: CRITICAL 0, WARNING 1, INFO 2."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK: Mapping[Severity, int] = {
    Severity.CRITICAL: 0,
    Severity.WARNING: 1,
    Severity.INFO: 2,
}


@dataclass(frozen=True)
class Finding:
    """One conclusion: what, why, what to do, and the rows that prove it.

    Rows become JSON-safe dicts with URL passwords in their text masked, however they were
    built (:func:`rows_of` masks them too).
    """

    id: str
    severity: Severity
    title: str
    detail: str
    action: str
    rows: tuple[dict[str, Any], ...] = ()
    count: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", _enum(Severity, self.severity, "severity"))
        rows = tuple(_scrub_text_values(json_safe(dict(row))) for row in self.rows)
        object.__setattr__(self, "rows", rows)
        if self.count is None:
            object.__setattr__(self, "count", len(self.rows))

    @property
    def needs_action(self) -> bool:
        return self.severity is not Severity.INFO


def verdict_of(items: Iterable[Finding], *, incomplete: bool) -> Verdict:
    """A flow's verdict: INCOMPLETE_EVIDENCE when its evidence is, else ACTION_NEEDED when any
    item needs action, else CLEAN."""
    if incomplete:
        return Verdict.INCOMPLETE_EVIDENCE
    return Verdict.ACTION_NEEDED if any(item.needs_action for item in items) else Verdict.CLEAN


@dataclass(frozen=True)
class Provenance:
    """What the findings were drawn from: incident title, window, as_of and the parameters."""

    title: str | None = None
    window: tuple[str, str] | None = None
    as_of: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window is not None:
            start, end = self.window
            object.__setattr__(self, "window", (iso_text(start), iso_text(end)))
        if self.as_of is not None:
            object.__setattr__(self, "as_of", iso_text(self.as_of))
        object.__setattr__(self, "parameters", _scrub(json_safe(dict(self.parameters))))


class FindingsContext(TypedDict, total=False):
    """What a flow's findings record beside its report: the keywords of every flow's
    ``*_findings`` builder, passed on to :meth:`Findings.build` (each optional)."""

    title: str | None
    """The incident's title."""
    window: tuple[TimeLike, TimeLike] | None
    """The incident's window."""
    rejects: pd.DataFrame | None
    """Rows of the flow's sources the loaders could not read."""
    row_limit: int | None
    """How many proving rows a finding keeps (:data:`ROW_LIMIT` when not given; None: all)."""
    parameters: Mapping[str, Any] | None
    """The settings the flow ran with."""


@dataclass(frozen=True)
class Findings:
    """A flow's verdict, summary counts and findings; serialises to ``findings.json``."""

    flow: str
    verdict: Verdict
    summary: Mapping[str, int]
    items: tuple[Finding, ...]
    evidence: Provenance = field(default_factory=Provenance)
    generated_by: str = field(default_factory=lambda: generator())
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", _enum(Verdict, self.verdict, "verdict"))
        object.__setattr__(self, "summary", {str(k): int(v) for k, v in self.summary.items()})
        object.__setattr__(self, "items", tuple(self.items))
        if self.schema != SCHEMA:
            raise ParameterError(
                "unsupported findings schema", value=self.schema, fix=f"use {SCHEMA!r}"
            )

    @property
    def needs_action(self) -> bool:
        """Whether any finding asks someone to act (a WARNING or CRITICAL item)."""
        return any(item.needs_action for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "flow": self.flow,
            "verdict": self.verdict.value,
            "generated_by": self.generated_by,
            "evidence": {
                "title": self.evidence.title,
                "window": None if self.evidence.window is None else list(self.evidence.window),
                "as_of": self.evidence.as_of,
                "parameters": dict(self.evidence.parameters),
            },
            "summary": dict(self.summary),
            "items": [
                {
                    "id": item.id,
                    "severity": item.severity.value,
                    "title": item.title,
                    "detail": item.detail,
                    "action": item.action,
                    "count": item.count,
                    "rows": list(item.rows),
                }
                for item in self.items
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write ``findings.json`` (or any path) as UTF-8; returns the path. It is written under
        a temporary name and renamed into place: a reader sees the old document or this one,
        never half of one."""
        return write_atomic(path, self.to_json())

    @classmethod
    def build(
        cls,
        flow: str,
        items: Iterable[Finding | None],
        summary: Mapping[str, int],
        *,
        incomplete: bool = False,
        as_of: TimeLike | None = None,
        **context: Unpack[FindingsContext],
    ) -> Findings:
        """Every flow's findings document, closed the same way: its ``items`` (a None is one
        its builder had nothing for) after the ``<flow>/rejects`` item when ``rejects`` holds
        rows (None: the flow says it itself), the summary with its ``rejects`` count (last,
        unless the flow placed it), the verdict (INCOMPLETE_EVIDENCE when ``incomplete`` or
        rows were rejected) and the provenance."""
        rejects = context.get("rejects")
        rejected = 0 if rejects is None else len(rejects)
        limit = context.get("row_limit", ROW_LIMIT)
        opening = (
            [rejects_item(flow, rejects, limit=limit)] if rejects is not None and rejected else []
        )
        shown = (*opening, *(item for item in items if item is not None))
        counts = dict(summary)
        counts.setdefault("rejects", rejected)
        window = context.get("window")
        provenance = Provenance(
            context.get("title"),
            None if window is None else (iso_text(window[0]), iso_text(window[1])),
            None if as_of is None else iso_text(as_of),
            dict(context.get("parameters") or {}),
        )
        verdict = verdict_of(shown, incomplete=incomplete or rejected > 0)
        return cls(flow, verdict, counts, shown, provenance)

    @classmethod
    def from_json(cls, text: str | bytes) -> Findings:
        """Read a findings document, dispatching on its ``schema`` id; every field is checked
        against that version's schema (a misshapen one is a ``ParameterError`` naming it)."""
        head = _decode(text, _Head)
        reader = _READERS.get(head.schema) if isinstance(head.schema, str) else None
        if reader is None:
            raise ParameterError(
                "unknown findings schema",
                value=head.schema,
                fix=f"this incidentkit reads {', '.join(sorted(_READERS))}; upgrade it to read "
                "newer documents",
            )
        return reader(text)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Findings:
        return cls.from_json(Path(path).read_bytes())


# ---------------------------------------------------------------------------- the v1 schema


_INT64 = 2**63 - 1
"""Counts and counters are 64-bit integers (larger ones are no count: refused on read)."""
_Counter = Annotated[int, msgspec.Meta(ge=-_INT64, le=_INT64)]


class _Head(msgspec.Struct):
    """What every findings document has: the schema id its reader is chosen by."""

    schema: object = None


class _EvidenceV1(msgspec.Struct):
    title: str | None = None
    window: tuple[str, str] | None = None
    as_of: str | None = None
    parameters: dict[str, Any] | None = None


class _ItemV1(msgspec.Struct):
    id: str
    severity: Severity
    title: str
    detail: str
    action: str
    count: Annotated[int, msgspec.Meta(ge=0, le=_INT64)]
    rows: list[dict[str, Any]]


class _DocumentV1(msgspec.Struct):
    """``incidentkit.findings/v1`` (``docs/findings.md``); unknown keys are ignored."""

    schema: str
    flow: Annotated[str, msgspec.Meta(pattern=FLOW_NAME)]
    verdict: Verdict
    generated_by: str
    evidence: _EvidenceV1
    summary: dict[str, Any]  # counters: checked one by one, to name the one that is wrong
    items: list[_ItemV1]


_Doc = TypeVar("_Doc", _Head, _DocumentV1)


def _decode(text: str | bytes, kind: type[_Doc]) -> _Doc:
    """``text`` decoded as ``kind``; bad JSON and misshapen fields as ``ParameterError``."""
    fix = "give the findings.json a flow wrote"
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.ValidationError as err:
        if kind is _Head:
            raise ParameterError(
                "findings document is not a JSON object", value=str(err), fix=fix
            ) from err
        raise misshapen("findings document", err, SCHEMA, "docs/findings.md") from err
    except msgspec.DecodeError as err:
        raise ParameterError("findings document is not JSON", value=str(err), fix=fix) from err
    except RecursionError as err:  # msgspec's own limit, far deeper than MAX_DEPTH
        raise ParameterError(
            "findings document nests too deeply to read", value=str(err), fix=fix
        ) from err


def misshapen(
    what: str, err: msgspec.ValidationError, schema: str, doc: str, *, at: str = "$"
) -> ParameterError:
    """A ``ParameterError`` naming the field msgspec's error points to (``$.items[0].id``);
    ``at``: where the value msgspec checked lies in the document."""
    message, _, path = str(err).rpartition(" - at ")
    if not message:
        message, path = str(err), "`$`"
    return ParameterError(
        f"{what} lacks or misshapes a field of {schema} at {at}{path.strip('`')[1:]}",
        value=message,
        fix=f"see {doc} for its fields, or write it again with incidentkit",
    )


def _field_error(path: str, problem: str, value: object) -> ParameterError:
    return ParameterError(
        f"findings document lacks or misshapes a field of {SCHEMA} at {path}",
        value=f"{problem}: {value!r}" if value is not None else problem,
        fix="see docs/findings.md for its fields, or write it again with incidentkit",
    )


def _time_field(value: str, path: str) -> str:
    try:
        return iso_text(value)
    except ParameterError as err:
        raise _field_error(path, "expected an ISO 8601 time with an offset", value) from err


def _check_depth(value: object, path: str) -> None:
    """Refuse a value nested more than :data:`MAX_DEPTH` levels (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _field_error(path, f"nested more than {MAX_DEPTH} levels", None)
        if isinstance(current, dict):
            stack += [(v, depth + 1) for v in current.values()]
        elif isinstance(current, list):
            stack += [(v, depth + 1) for v in current]


def _read_v1(text: str | bytes) -> Findings:
    data = _decode(text, _DocumentV1)
    evidence = data.evidence
    parameters = evidence.parameters or {}
    _check_depth(parameters, "$.evidence.parameters")
    window = None
    if evidence.window is not None:
        window = (
            _time_field(evidence.window[0], "$.evidence.window[0]"),
            _time_field(evidence.window[1], "$.evidence.window[1]"),
        )
    for n, item in enumerate(data.items):
        _check_depth(item.rows, f"$.items[{n}].rows")
    for name, value in data.summary.items():
        try:
            msgspec.convert(value, _Counter)
        except msgspec.ValidationError as err:
            raise misshapen(
                "findings document", err, SCHEMA, "docs/findings.md", at=f"$.summary[{name!r}]"
            ) from err
    return Findings(
        flow=data.flow,
        verdict=data.verdict,
        summary=data.summary,
        items=tuple(
            Finding(
                id=item.id,
                severity=item.severity,
                title=item.title,
                detail=item.detail,
                action=item.action,
                rows=tuple(item.rows),
                count=item.count,
            )
            for item in data.items
        ),
        evidence=Provenance(
            title=evidence.title,
            window=window,
            as_of=None
            if evidence.as_of is None
            else _time_field(evidence.as_of, "$.evidence.as_of"),
            parameters=parameters,
        ),
        generated_by=data.generated_by,
        schema=data.schema,
    )


_READERS: Mapping[str, Callable[[str | bytes], Findings]] = {SCHEMA: _read_v1}


def generator() -> str:
    """``incidentkit <version>``, for ``generated_by``."""
    try:
        return f"incidentkit {version('incidentkit')}"
    except PackageNotFoundError:
        return "incidentkit (not installed)"


# ---------------------------------------------------------------------------- JSON-safe values


def json_safe(value: Any) -> Any:
    """``value`` with only JSON types: ISO-Z timestamps, None for missing, lists for tuples."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return None if math.isnan(number) or math.isinf(number) else number
    if value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, pd.Timestamp | datetime | np.datetime64):
        return iso_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, pd.Timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [json_safe(v) for v in items]
    return str(value)


def rows_of(
    frame: pd.DataFrame, columns: Iterable[str] | None = None, *, limit: int | None = ROW_LIMIT
) -> tuple[dict[str, Any], ...]:
    """The first ``limit`` rows of ``frame`` (only ``columns``) as JSON-safe dicts.

    Text values are scrubbed: a URL password in evidence (a log line holding a DSN) is masked.
    """
    picked = frame if columns is None else frame[list(columns)]
    if limit is not None:
        picked = picked.head(limit)
    return tuple(_scrub_text_values(json_safe(record)) for record in picked.to_dict("records"))


def rejects_item(flow: str, rejects: pd.DataFrame, *, limit: int | None = ROW_LIMIT) -> Finding:
    """The ``<flow>/rejects`` item: rows of the flow's sources the loaders could not read."""
    return Finding(
        f"{flow}/rejects",
        Severity.WARNING,
        f"{len(rejects)} evidence row(s) could not be read",
        "Rows the loaders rejected are missing from every view below.",
        "Fix or re-export the rows listed, then run the flow again.",
        rows_of(rejects, None, limit=limit),
        len(rejects),
    )


def iso_text(value: Any) -> str:
    """A time as ISO 8601 UTC with ``Z``; naive times and what is not a time are refused."""
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError) as err:
        raise ParameterError(
            "a findings time is not a time", value=str(value), fix="give an ISO 8601 time in UTC"
        ) from err
    if pd.isna(stamp):
        raise ParameterError(
            "a findings time is missing", value=str(value), fix="give an ISO 8601 time in UTC"
        )
    if stamp.tzinfo is None:
        raise ParameterError(
            "a findings time is naive", value=str(value), fix="give times in UTC with an offset"
        )
    text: str = stamp.tz_convert("UTC").isoformat()
    return text.removesuffix("+00:00") + "Z"


def _scrub(parameters: Any) -> Any:
    """Parameters with secrets removed: secret-named values and URL passwords become ***."""
    if isinstance(parameters, dict):
        return {
            k: MASK if SECRET_KEY.search(k) and v is not None else _scrub(v)
            for k, v in parameters.items()
        }
    if isinstance(parameters, list):
        return [_scrub(v) for v in parameters]
    return _scrub_text_values(parameters)


def _scrub_text_values(value: Any) -> Any:
    """``value`` (JSON-safe) with URL passwords in every string masked."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {k: _scrub_text_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_text_values(v) for v in value]
    return value


_Enum = TypeVar("_Enum", bound=enum.StrEnum)


def _enum(kind: type[_Enum], value: str, what: str) -> _Enum:
    try:
        return kind(value)
    except ValueError:
        raise ParameterError(
            f"unknown findings {what}", value=value, fix=f"use one of {', '.join(kind)}"
        ) from None
