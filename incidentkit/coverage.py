"""What the evidence of one incident covers: rows, time spans, rejects and join gaps; and the
filters that match nothing, with what the evidence holds instead.

A filter value (``app_name``, ``sessions``, ``invocations`` of the manifest, or the app or
session a flow is given) that no source names at all is an error naming what the sources do
hold, with the closest name (:func:`require_named`); a window that holds no row while the
sources hold rows elsewhere is a warning (:func:`window_note`): a quiet night is not an error.
Whether a source names a value is asked of the rows read with the filters first (those a flow
reads anyway); only a value not found there costs more: a bound ``SELECT 1 ... LIMIT 1`` in a
database, else the source read without filters (the error's list of what the sources hold
comes from a ``SELECT DISTINCT``, or that read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from incidentkit.baselines.indexes import IndexAdvice, advice
from incidentkit.errors import IncidentkitError, ManifestError, ParameterError
from incidentkit.evidence import FRAME_SOURCES, Evidence
from incidentkit.manifest import EARLIEST, PARQUET, Filters, SourceSpec, did_you_mean
from incidentkit.times import iso_utc

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from incidentkit.sources.sql import TableInfo

_T = TypeVar("_T")

TIME_COLUMNS: Mapping[str, tuple[str, str]] = {
    "runs": ("started_at", "updated_at"),
    "events": ("ts", "ts"),
    "calls": ("ts", "ts"),
    "responses": ("ts", "ts"),
    "state_writes": ("ts", "ts"),
    "session_state": ("updated_at", "updated_at"),
    "journal": ("created_at", "updated_at"),
    "spans": ("start", "end"),
    "diagnostics": ("ts", "ts"),
    "threads": ("taken_at", "taken_at"),
    "class_histograms": ("taken_at", "taken_at"),
    **{name: ("ts", "ts") for name in ("jfr_samples", "jfr_allocations", "jfr_old_objects")},
    **{name: ("ts", "ts") for name in ("jfr_heap", "jfr_locks")},
}
EXAMPLES = 5


@dataclass(frozen=True)
class FrameCoverage:
    """Rows and time span of one canonical frame (``status``: loaded, absent or error)."""

    frame: str
    source: str
    status: str
    rows: int
    start: str | None
    end: str | None
    error: str | None = None


@dataclass(frozen=True)
class RejectGroup:
    """Rejected rows of one source sharing a reason, with where the first few were."""

    source: str
    reason: str
    count: int
    locations: tuple[str, ...]


@dataclass(frozen=True)
class JoinGap:
    """Rows of one frame with no partner in another (a finding, not noise)."""

    name: str
    count: int
    total: int
    examples: tuple[str, ...]


@dataclass(frozen=True)
class SourceFormat:
    """The format a source is read as (``how``: ``given`` in the manifest, or ``detected``),
    and for a source whose every record was rejected or that could not be read, the format
    its records look like (None when they look like none the kit reads)."""

    source: str
    format: str
    how: str
    looks_like: str | None = None


@dataclass(frozen=True)
class Coverage:
    """The coverage report of one incident's evidence."""

    title: str
    manifest: str | None
    window: tuple[str, str] | None
    frames: tuple[FrameCoverage, ...]
    rejects: tuple[RejectGroup, ...]
    joins: tuple[JoinGap, ...]
    warnings: tuple[RejectGroup, ...] = ()
    all_rejected: tuple[str, ...] = ()
    """Sources that loaded no row because every record was rejected."""
    indexes: tuple[IndexAdvice, ...] = ()
    """Per database events/ledger table: the index a baseline query needs, and if one serves."""
    notes: tuple[str, ...] = ()
    """Warnings about the filters: a window (or an app, session, invocation) with no row in
    it, though the evidence holds rows elsewhere."""
    formats: tuple[SourceFormat, ...] = ()
    """Per events and diagnostics source: the format it is read as, given or detected."""

    @property
    def complete(self) -> bool:
        """True when every named source loaded at least one record, or had none to reject
        (rejects of some records, warnings and join gaps may still exist)."""
        return not self.all_rejected and all(frame.status != "error" for frame in self.frames)

    @property
    def reject_count(self) -> int:
        return sum(group.count for group in self.rejects)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _iso(value: pd.Timestamp | None) -> str | None:
    return None if value is None or pd.isna(value) else iso_utc(value)


def measure(evidence: Evidence) -> Coverage:
    """Load every source of ``evidence`` and report what it covers."""
    frames: list[FrameCoverage] = []
    loaded: dict[str, pd.DataFrame] = {}
    failed: dict[str, str] = {}
    for name, section in FRAME_SOURCES.items():
        if not evidence.has(section):
            frames.append(FrameCoverage(name, section, "absent", 0, None, None))
            continue
        if section in failed:
            frames.append(FrameCoverage(name, section, "error", 0, None, None, failed[section]))
            continue
        try:
            frame = evidence.frame(name)
        except IncidentkitError as err:
            failed[section] = str(err)
            frames.append(FrameCoverage(name, section, "error", 0, None, None, str(err)))
            continue
        loaded[name] = frame
        first, last = TIME_COLUMNS[name]
        frames.append(
            FrameCoverage(
                name,
                section,
                "loaded",
                len(frame),
                _iso(frame[first].min()) if len(frame) else None,
                _iso(frame[last].max()) if len(frame) else None,
            )
        )
    rejected = _all_rejected(evidence, frames, failed)
    return Coverage(
        title=evidence.title,
        manifest=str(evidence.manifest.path) if evidence.manifest.path else None,
        window=(
            (_iso(evidence.filters.window.start) or "", _iso(evidence.filters.window.end) or "")
            if evidence.filters.window
            else None
        ),
        frames=tuple(frames),
        rejects=_reject_groups(evidence, failed),
        joins=tuple(join_gaps(loaded)),
        warnings=_groups(
            [
                loaded_source.warnings
                for section in evidence.sources
                if section not in failed and (loaded_source := evidence.source(section))
            ]
        ),
        all_rejected=rejected,
        indexes=_indexes(evidence, failed),
        notes=tuple(note for note in [window_note(evidence, loaded)] if note),
        formats=_formats(evidence, loaded, (*rejected, *failed)),
    )


def _formats(
    evidence: Evidence, loaded: Mapping[str, pd.DataFrame], stuck: Iterable[str]
) -> tuple[SourceFormat, ...]:
    """The format each events and diagnostics source is read as: the manifest's, else the
    one the rows were read as (``source_format``), else the one its files show; for a source
    nothing could be read from, the events format its records look like."""
    from incidentkit.sources import diagnostics, events

    out = []
    for section in ("events", "diagnostics"):
        spec = evidence.sources.get(section)
        if spec is None:
            continue
        seen = loaded.get(section, pd.DataFrame()).get("source_format", pd.Series(dtype="str"))
        read = sorted(seen.dropna().astype(str).unique())
        try:
            if spec.format is not None or section == "diagnostics":
                shown = events.read_as(spec) if section == "events" else diagnostics.read_as(spec)
                if spec.format == PARQUET and read:  # a snapshot: what its events were read as
                    shown += f" (a snapshot of {', '.join(read)})"
            else:
                shown = ", ".join(read) or events.read_as(spec)
        except IncidentkitError:  # a file that cannot be read: its error says why
            shown = spec.format or "unknown"
        like = events.looks_like(spec) if section == "events" and section in stuck else None
        out.append(SourceFormat(section, shown, "given" if spec.format else "detected", like))
    return tuple(out)


def _indexes(evidence: Evidence, failed: Mapping[str, str]) -> tuple[IndexAdvice, ...]:
    """The baseline index advice of every database section that loaded."""
    environ = evidence.environ
    found = (advice(spec, environ) for name, spec in evidence.sources.items() if name not in failed)
    return tuple(item for item in found if item is not None)


def _all_rejected(
    evidence: Evidence, frames: list[FrameCoverage], failed: Mapping[str, str]
) -> tuple[str, ...]:
    rows: dict[str, int] = {}
    for frame in frames:
        if frame.status == "loaded":
            rows[frame.source] = rows.get(frame.source, 0) + frame.rows
    return tuple(
        section
        for section, count in rows.items()
        if count == 0
        and section not in failed
        and (loaded := evidence.source(section)) is not None
        and not loaded.rejects.empty
    )


def _reject_groups(evidence: Evidence, failed: Mapping[str, str]) -> tuple[RejectGroup, ...]:
    parts = [
        loaded.rejects
        for section in evidence.sources
        if section not in failed and (loaded := evidence.source(section)) is not None
    ]
    return _groups(parts)


def _groups(parts: list[pd.DataFrame]) -> tuple[RejectGroup, ...]:
    """Rejects or warnings grouped by source and reason, with example locations."""
    parts = [part for part in parts if not part.empty]
    if not parts:
        return ()
    rejects = pd.concat(parts, ignore_index=True)
    groups = rejects.groupby(["source", "reason"], sort=True)["location"]
    return tuple(
        RejectGroup(str(source), str(reason), int(locs.size), tuple(locs.head(EXAMPLES)))
        for (source, reason), locs in groups
    )


def _looked_like(item: SourceFormat | None) -> str:
    """What a source nothing was read from looks like, and the format that reads it."""
    if item is None or item.source != "events":
        return ""
    from incidentkit.sources.events import NAMES

    like = item.looks_like
    if like is None:
        return "; its records look like none of the event formats the kit reads"
    named = NAMES.get(like, like)
    if like == item.format:
        return f"; these rows look like {named}, the format they were read as"
    return f'; these rows look like {named}: give format = "{like}" (or leave format out)'


def _group_lines(groups: tuple[RejectGroup, ...]) -> list[str]:
    lines = []
    for group in groups:
        more = ", ..." if group.count > len(group.locations) else ""
        lines.append(f"  {group.source:<12}{group.count:>6}  {group.reason}")
        lines.append(f"  {'':<18}at {', '.join(group.locations)}{more}")
    return lines


def join_gaps(frames: Mapping[str, pd.DataFrame]) -> list[JoinGap]:
    """Rows with no partner across sources, computed for the frames that are present."""
    gaps: list[JoinGap] = []
    runs, events = frames.get("runs"), frames.get("events")
    calls, responses = frames.get("calls"), frames.get("responses")
    spans, journal = frames.get("spans"), frames.get("journal")
    if runs is not None and events is not None:
        by_invocation = runs["invocation_id"].isin(events["invocation_id"])
        by_session = runs["invocation_id"].isna() & runs["session_id"].isin(events["session_id"])
        gaps.append(_gap("runs with no events", runs["run_id"], ~(by_invocation | by_session)))
    if calls is not None and responses is not None:
        unanswered = ~calls["call_id"].isin(responses["call_id"])
        gaps.append(_gap("calls with no response", calls["call_id"], unanswered))
        gaps.append(
            _gap(
                "  of which long-running (awaiting approval)",
                calls["call_id"],
                unanswered & calls["long_running"],
            )
        )
        orphan_responses = ~responses["call_id"].isin(calls["call_id"])
        gaps.append(_gap("responses with no call", responses["call_id"], orphan_responses))
    if spans is not None:
        gaps.append(
            _gap("spans with no invocation id", spans["span_id"], spans["invocation_id"].isna())
        )
        if events is not None and len(events):
            absent = spans["invocation_id"].notna() & ~spans["invocation_id"].isin(
                events["invocation_id"]
            )
            gaps.append(_gap("spans of invocations not in the events", spans["span_id"], absent))
    if journal is not None and calls is not None:
        # An entry names its call; only one written without a call id falls back to the
        # invocation (the business key's tool call cannot be known here).
        by_call = journal["function_call_id"].isin(calls["call_id"])
        no_id = journal["function_call_id"].fillna("").eq("")
        by_inv = no_id & journal["invocation_id"].isin(calls["invocation_id"])
        gaps.append(_gap("journal keys with no call", journal["key"], ~(by_call | by_inv)))
    return gaps


def _gap(name: str, ids: pd.Series, mask: pd.Series) -> JoinGap:
    hits = ids[mask]
    return JoinGap(name, int(mask.sum()), len(ids), tuple(hits.astype(str).head(EXAMPLES)))


def render_text(report: Coverage) -> str:
    """The coverage report as plain text for a terminal."""
    lines = [report.title]
    if report.manifest:
        lines.append(f"manifest: {report.manifest}")
    if report.window:
        start = report.window[0]
        start = "everything stored" if start == _iso(EARLIEST) else start
        lines.append(f"window:   {start} .. {report.window[1]} (UTC)")
    lines += ["", f"{'frame':<17}{'source':<13}{'rows':>9}  {'from':<26}{'to'}"]
    for frame in report.frames:
        if frame.status == "loaded":
            lines.append(
                f"{frame.frame:<17}{frame.source:<13}{frame.rows:>9}  "
                f"{frame.start or '-':<26}{frame.end or '-'}"
            )
        else:
            lines.append(f"{frame.frame:<17}{frame.source:<13}{'-':>9}  {frame.status}")
    errors = {frame.source: frame.error for frame in report.frames if frame.error}
    for source, error in errors.items():
        said = error.removeprefix(f"{source}: ")  # a source's errors name it already
        lines.append(f"  ! {source}: {said}")
    formats = {item.source: item for item in report.formats}
    for source in report.all_rejected:
        lines.append(
            f"  ! {source}: every record was rejected (reasons below)"
            + _looked_like(formats.get(source))
        )
    for shown in report.formats:
        said = _looked_like(shown)
        if shown.source in errors and shown.looks_like and said[2:] not in errors[shown.source]:
            lines.append(f"  ! {shown.source}:{said.removeprefix(';')}")
    for note in report.notes:
        lines.append(f"  ! {note}")
    if report.formats:
        lines += ["", "formats:"]
        lines += [f"  {read.source:<12} {read.format} ({read.how})" for read in report.formats]
    lines += ["", f"rejects: {report.reject_count}"]
    lines += _group_lines(report.rejects)
    if report.warnings:
        lines += ["", f"warnings: {sum(group.count for group in report.warnings)}"]
        lines += _group_lines(report.warnings)
    lines += ["", "join coverage:"]
    if not report.joins:
        lines.append("  (needs two or more sources)")
    for gap in report.joins:
        example = f"  e.g. {', '.join(gap.examples[:2])}" if gap.count else ""
        lines.append(f"  {gap.name:<44}{gap.count:>7} of {gap.total:<7}{example}")
    if report.indexes:
        lines += ["", "indexes for baselines (one app over days):"]
    for item in report.indexes:
        on = f"{item.section} {item.table} ({', '.join(item.columns)})"
        if item.served_by is not None:
            lines.append(f"  {on}: served by {item.served_by}")
        else:
            lines.append(
                f"  ! {on}: no index; a baseline scans the whole table. Run: {item.statement}"
            )
    return "\n".join(line.rstrip() for line in lines) + "\n"


# ---------------------------------------------------------------------------- filters


FILTERED: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "app_name": ("app", {"ledger": "runs", "events": "events", "diagnostics": "diagnostics"}),
    "session_id": (
        "session",
        {"ledger": "runs", "events": "events", "diagnostics": "diagnostics"},
    ),
    "invocation_id": (
        "invocation",
        {
            **{"ledger": "runs", "events": "events", "journal": "journal"},
            **{"spans": "spans", "diagnostics": "diagnostics"},
        },
    ),
}
"""Per filtered column: what it names, and the sections (their frame) that carry it."""
SOURCE_NAMES = {
    "ledger": "the ledger",
    "events": "the event log",
    "journal": "the journal",
    "spans": "the spans",
    "diagnostics": "the diagnostics log",
}
ROW_NAMES = {
    "runs": "runs",
    "events": "events",
    "journal": "journal entries",
    "spans": "spans",
    "diagnostics": "diagnostics lines",
}
SHOWN_HELD = 8
"""How many held values an error lists."""


def check_filters(evidence: Evidence) -> None:
    """Refuse a filter of ``evidence`` (its app, sessions, invocations) that no source names
    at all: a ManifestError when the manifest gave it, a ParameterError otherwise; the error
    lists what the sources hold and the closest name."""
    filters, given = evidence.filters, evidence.manifest.filters
    for column, values, from_manifest in (
        ("app_name", _listed(filters.app_name), filters.app_name == given.app_name),
        ("session_id", filters.session_ids, filters.session_ids == given.session_ids),
        ("invocation_id", filters.invocation_ids, filters.invocation_ids == given.invocation_ids),
    ):
        if values:
            key = {"app_name": "app_name", "session_id": "sessions"}.get(column, "invocations")
            require_named(
                evidence,
                column,
                values,
                label=key if from_manifest else column,
                error=ManifestError if from_manifest else ParameterError,
                fix=f"set {key} in the manifest to what the evidence holds, or remove it",
            )


def require_named(
    evidence: Evidence,
    column: str,
    values: Iterable[str],
    *,
    label: str = "",
    error: type[ManifestError] | type[ParameterError] = ParameterError,
    fix: str,
) -> None:
    """Raise ``error`` when a source of ``evidence`` carrying ``column`` exists and none of them
    names one of ``values`` anywhere (in no window, for no app): "app_name 'shopp' matches
    nothing: 0 runs, 0 events of app 'shopp'; the ledger and the event log hold: orders,
    shop", with "did you mean" and ``fix``; ``label`` names the filter (default ``column``)."""
    what, sections = FILTERED[column]
    present = [section for section in sections if evidence.has(section)]
    if not present:
        return
    whole = evidence.narrowed(Filters())  # read (files only) when a value is not found
    unnamed = [v for v in values if not any(_named(evidence, s, column, v, whole) for s in present)]
    if not unnamed:
        return
    held = held_names(evidence, column, present, whole=whole)
    every = sorted({value for found, _ in held.values() for value in found})
    counts = ", ".join(f"0 {ROW_NAMES[sections[s]]}" for s in present)
    shown = ", ".join(repr(v) for v in unnamed)
    raise error(
        f"{label or column} {shown} matches nothing: {counts} of {what} {shown}; {_listing(held)}",
        value=unnamed[0] if len(unnamed) == 1 else unnamed,
        fix=f"{did_you_mean(list(unnamed), every)}{fix}",
    )


def _named(evidence: Evidence, section: str, column: str, value: str, whole: Evidence) -> bool:
    """:func:`names`, with a source that cannot be read taken as naming it: its own error is
    for the reader of the source to say (``inspect``, the flow), not for this check."""
    try:
        return names(evidence, section, column, value, whole=whole)
    except IncidentkitError:
        return True


def _listed(value: str | None) -> tuple[str, ...]:
    return () if value is None else (value,)


def _listing(held: Mapping[str, tuple[list[str], bool]]) -> str:
    """What the sources hold, sources with equal lists together: "the ledger and the event log
    hold orders, shop"."""
    by_list: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    for section, (found, complete) in held.items():
        by_list.setdefault((tuple(found), complete), []).append(SOURCE_NAMES[section])
    parts = []
    for (values, complete), where in by_list.items():
        shown = ", ".join(values[:SHOWN_HELD]) or "none"
        if len(values) > SHOWN_HELD:
            shown += f" and {len(values) - SHOWN_HELD} more"
        shown += "" if complete else " (the first of more)"
        who = where[0] if len(where) == 1 else ", ".join(where[:-1]) + " and " + where[-1]
        parts.append(f"{who} hold{'s' if len(where) == 1 else ''}: {shown}")
    return "; ".join(parts)


def names(
    evidence: Evidence, section: str, column: str, value: str, *, whole: Evidence | None = None
) -> bool:
    """Whether the ``section`` source names ``value`` in ``column`` at all. First in the rows
    ``evidence`` reads (with its filters: the rows a flow reads anyway); if none there, a bound
    probe of the whole table in a database, else the source read whole, without filters
    (``whole``: that evidence, so several questions read it once)."""
    from incidentkit.sources import sql

    _, frames = FILTERED[column]
    if evidence.frame(frames[section])[column].eq(value).any():
        return True
    spec = evidence.sources[section]
    probe = _in_database(spec, section, column, evidence.environ) if spec.is_database else None
    if probe is not None:
        return probe(partial(sql.holds_value, value=value))
    found, _ = held_names(evidence, column, [section], limit=None, whole=whole)[section]
    return value in found


def held_names(
    evidence: Evidence,
    column: str,
    sections: Iterable[str],
    *,
    limit: int | None = 200,
    whole: Evidence | None = None,
) -> dict[str, tuple[list[str], bool]]:
    """Per section: the distinct values of ``column`` it holds (sorted, at most ``limit``;
    None: all) and whether that is all of them; read without any filter (a ``SELECT
    DISTINCT`` in a database, the source read whole otherwise: from ``whole`` when given)."""
    from incidentkit.sources import sql

    _, frames = FILTERED[column]
    out: dict[str, tuple[list[str], bool]] = {}
    for section in sections:
        spec = evidence.sources[section]
        probe = _in_database(spec, section, column, evidence.environ) if spec.is_database else None
        if probe is not None:
            distinct = partial(sql.distinct_values, limit=limit if limit is not None else 10**9)
            out[section] = probe(distinct)
            continue
        whole = whole or evidence.narrowed(Filters())
        values = whole.frame(frames[section])[column].dropna().astype(str).unique()
        ordered = sorted(values)
        most = len(ordered) if limit is None else limit
        out[section] = (ordered[:most], len(ordered) <= most)
    return out


def _in_database(
    spec: SourceSpec, section: str, column: str, environ: Mapping[str, str] | None
) -> Callable[[Callable[[Connection, TableInfo, str], _T]], _T] | None:
    """For a database source whose table holds ``column``: a function running a query on
    (connection, table, the column's name there); None when the kit cannot tell which table."""
    if section not in ("ledger", "journal", "events") or spec.format == "adk-redis":
        return None  # no table (a Redis store is read whole: held_names loads it)

    def run(query: Callable[[Connection, TableInfo, str], _T]) -> _T:
        from incidentkit.sources import events, sql
        from incidentkit.sources.events import adk_python
        from incidentkit.sources.sql import journal, ledger, tables

        what = f"[{section}] {spec.location()}"
        engine = sql.open_source(spec, environ, what=what)
        try:
            with sql.connect(engine, what=what) as conn:
                if section in ("ledger", "journal"):
                    layout = ledger.LAYOUT if section == "ledger" else journal.LAYOUT
                    table, name = spec.table or layout.table, tables.column_names(layout, spec)
                elif adk_python.is_python_store(conn):
                    table, name = adk_python.EVENTS_TABLE, {column: column}
                else:
                    table, name = spec.table or events.JAVA_TABLE, events.java_column_names(spec)
                info = sql.require_table(conn, table, [name[column]], what=what)
                return query(conn, info, name[column])
        finally:
            engine.dispose()

    return run


def window_note(evidence: Evidence, frames: Mapping[str, pd.DataFrame]) -> str | None:
    """A warning when the evidence has a window and none of ``frames`` (those read) holds a row
    in it: every source that was read holds rows elsewhere (an empty table or file is refused
    when read), so the window, the app or the ids chosen match nothing there."""
    window = evidence.filters.window
    if window is None or not frames or any(len(frame) for frame in frames.values()):
        return None
    start = "everything stored" if window.start == EARLIEST else _iso(window.start)
    scope = [
        f"{what} {value!r}"
        for what, value in (
            ("app", evidence.filters.app_name),
            ("sessions", ", ".join(evidence.filters.session_ids) or None),
            ("invocations", ", ".join(evidence.filters.invocation_ids) or None),
        )
        if value
    ]
    of = f" of {' and '.join(scope)}" if scope else ""
    read = ", ".join(sorted({FRAME_SOURCES[name] for name in frames}))
    return (
        f"the window {start} .. {_iso(window.end)} holds no row{of} in {read}, though the "
        "evidence holds rows outside it: a quiet time, or the wrong window (without the "
        "window, incidentkit inspect shows the span the evidence holds)"
    )
