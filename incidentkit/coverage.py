"""What the evidence of one incident covers: rows, time spans, rejects and join gaps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from incidentkit.baselines.indexes import IndexAdvice, advice
from incidentkit.errors import IncidentkitError
from incidentkit.evidence import FRAME_SOURCES, Evidence
from incidentkit.manifest import EARLIEST

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


def _iso(value: Any) -> str | None:
    if value is None or pd.isna(value):
        return None
    return str(pd.Timestamp(value).strftime("%Y-%m-%dT%H:%M:%S.%f"))[:-3] + "Z"


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
        all_rejected=_all_rejected(evidence, frames, failed),
        indexes=_indexes(evidence, failed),
    )


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
    for source in report.all_rejected:
        lines.append(f"  ! {source}: every record was rejected (reasons below)")
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
