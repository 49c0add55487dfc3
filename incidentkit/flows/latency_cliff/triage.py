"""The latency cliff flow's pure core: when latency fell off a cliff, which
invocations hang and on what, which threads are stuck, and the fix.

:func:`triage_latency` takes frames, never reads evidence, and returns a
:class:`LatencyReport`; the steps (:mod:`.steps`) give it one incident's frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, empty_view
from incidentkit.flows._resume import (
    PAUSE_COLUMNS,
    RESUMED_COLUMNS,
    RUN_TWICE_COLUMNS,
    Resumes,
    calls_run_twice,
    resumes,
)
from incidentkit.flows.common import Frames
from incidentkit.flows.latency_cliff import cliff as cp
from incidentkit.flows.latency_cliff.baseline import LatencyBaseline, compared
from incidentkit.flows.latency_cliff.fixes import FIX_COLUMNS, fixes
from incidentkit.flows.latency_cliff.hangs import (
    Orphaned,
    alive,
    by_last_event,
    open_invocations,
)
from incidentkit.flows.latency_cliff.latency import (
    LATENCY_COLUMNS,
    SOURCE_LABELS,
    SOURCES,
    attach_runs,
    cross_check,
    empty_latency,
    from_diagnostics,
    from_events,
    from_ledger,
    from_spans,
    per_bucket,
)
from incidentkit.flows.latency_cliff.locks import OWNER_COLUMNS
from incidentkit.flows.latency_cliff.samples import CONTENTION_COLUMNS, contention
from incidentkit.flows.latency_cliff.spinning import SPIN_COLUMNS
from incidentkit.flows.latency_cliff.thread_evidence import read_threads
from incidentkit.frames import BOOL, FLOAT, INT, STR, TS

ONE_MINUTE = pd.Timedelta(minutes=1)
ERROR_Z = 3.0
"""How many standard errors apart two error rates must be to count as changed."""


CLIFF_COLUMNS: Mapping[str, str] = {
    "at": TS,
    "p50_before_ms": FLOAT,
    "p95_before_ms": FLOAT,
    "p50_after_ms": FLOAT,
    "p95_after_ms": FLOAT,
    "runs_before": INT,
    "runs_after": INT,
    "errors_before": INT,
    "errors_after": INT,
    "error_rate_changed": BOOL,
    "source": STR,
}
"""The cliff's one row; the percentiles are of the runs that ended on each side."""


@dataclass(frozen=True)
class LatencyReport:
    """What the flow found, as frames (each documented by its ``*_COLUMNS`` contract)."""

    as_of: pd.Timestamp
    bucket: pd.Timedelta
    client_timeout_s: float
    source: str | None
    """The latency source used (:data:`.latency.SOURCES`), None when no source times a run."""
    open_source: str | None
    """The source open invocations come from (spans show none)."""
    sources: tuple[str, ...]
    series: pd.DataFrame
    """Every invocation in start order, open ones at their age (``ms`` censored)."""
    buckets: pd.DataFrame
    cliff: pd.DataFrame
    changes: tuple[cp.Change, ...]
    open: pd.DataFrame
    """Invocations open past the client timeout (:data:`.hangs.OPEN_COLUMNS`): hangs, and the
    orphans of a dead worker (``orphaned``)."""
    by_last_event: pd.DataFrame
    disagreements: pd.DataFrame
    thread_groups: pd.DataFrame
    dumps: int
    fix: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)
    recordings: int = 0
    """JFR recordings whose samples were read for stuck threads."""
    contention: pd.DataFrame = field(default_factory=lambda: empty_view(CONTENTION_COLUMNS))
    """Contended monitors and locks of the JFR recordings (:data:`.samples.CONTENTION_COLUMNS`)."""
    baseline: LatencyBaseline | None = None
    """The latency of a baseline window before the incident, when one was given."""
    spinning: pd.DataFrame = field(default_factory=lambda: empty_view(SPIN_COLUMNS))
    """Threads unchanged across the dumps but on the CPU (:data:`.spinning.SPIN_COLUMNS`)."""
    lock_owners: pd.DataFrame = field(default_factory=lambda: empty_view(OWNER_COLUMNS))
    """The threads holding the locks others wait for in the last dump
    (:data:`.locks.OWNER_COLUMNS`; a row with no owner: a lock the dump names no owner of)."""
    pauses: pd.DataFrame = field(default_factory=lambda: empty_view(PAUSE_COLUMNS))
    """The pauses of the resumed invocations
    (:data:`incidentkit.flows._resume.PAUSE_COLUMNS`)."""
    resumed: pd.DataFrame = field(default_factory=lambda: empty_view(RESUMED_COLUMNS))
    """Invocations ADK resumed under their own id, timed as segments
    (:data:`incidentkit.flows._resume.RESUMED_COLUMNS`)."""
    calls_run_twice: pd.DataFrame = field(default_factory=lambda: empty_view(RUN_TWICE_COLUMNS))
    """Calls ADK executed again after a crash, each with what the journal says
    (:data:`incidentkit.flows._resume.RUN_TWICE_COLUMNS`)."""

    @property
    def baseline_text(self) -> str:
        """The baseline against the window in words ('' without a baseline)."""
        if self.baseline is None:
            return ""
        if self.has_cliff:
            row = self.cliff.iloc[0]
            return compared(
                self.baseline,
                before_ms=float(row["p95_before_ms"]),
                after_ms=float(row["p95_after_ms"]),
            )
        ended = self.series.loc[~self.series["open"], "ms"].dropna()
        p95 = float(ended.quantile(0.95)) if len(ended) else math.nan
        return compared(self.baseline, before_ms=None, after_ms=p95)

    @property
    def hangs(self) -> pd.DataFrame:
        """Open invocations past the client timeout whose worker lives: they hang."""
        return self.open.loc[~self.open["orphaned"]]

    @property
    def orphans(self) -> pd.DataFrame:
        """Open invocations past the client timeout whose worker died (``orphan_reason``)."""
        return self.open.loc[self.open["orphaned"]]

    @property
    def has_cliff(self) -> bool:
        return not self.cliff.empty

    @property
    def stalls(self) -> pd.DataFrame:
        """Stuck-thread groups that may be the stall (not idle by design), the tied first."""
        return self.thread_groups.loc[~self.thread_groups["idle"]]

    @property
    def idle_threads(self) -> pd.DataFrame:
        return self.thread_groups.loc[self.thread_groups["idle"]]

    @property
    def run_starts_since_cliff(self) -> int:
        return int(self.cliff["runs_after"].iloc[0]) if self.has_cliff else 0

    @property
    def open_share(self) -> float:
        """Open invocations since the cliff per run start since it (NaN without a cliff)."""
        if not self.has_cliff:
            return math.nan
        since = self.open["started_at"].ge(self.series["started_at"].iloc[self.cliff_index])
        return float(since.sum()) / max(1, self.run_starts_since_cliff)

    @property
    def cliff_index(self) -> int:
        return len(self.series) - self.run_starts_since_cliff

    @property
    def queued(self) -> bool:
        """Whether the ended runs' p95 rose too: healthy requests queued behind stuck ones."""
        if not self.has_cliff:
            return False
        row = self.cliff.iloc[0]
        return bool(row["p95_after_ms"] >= cp.MIN_RATIO * row["p95_before_ms"])


def latency_by_source(frames: Frames, resumed: Resumes | None = None) -> dict[str, pd.DataFrame]:
    """The latency frame of every source present, best first; spans are kept to the
    invocations other sources place in the app (they carry no app name). A resumed invocation
    (``resumed``, else found in ``frames``) is timed as segments in every source
    (:func:`segmented`)."""
    found = resumed if resumed is not None else resumes_of(frames)
    out = {
        "diagnostics": from_diagnostics(frames.diagnostics),
        "ledger": from_ledger(frames.runs),
        "events": from_events(frames.events, frames.calls, frames.responses),
    }
    known = pd.concat([frame["invocation_id"] for frame in out.values()]).dropna()
    spans = from_spans(frames.spans)
    out["spans"] = spans.loc[spans["invocation_id"].isin(known)] if len(known) else spans
    return {
        name: segmented(attach_runs(out[name].reset_index(drop=True), frames.runs), found)
        for name in SOURCES
        if not out[name].empty
    }


def resumes_of(frames: Frames) -> Resumes:
    """The pauses and resumed invocations the frames show (:func:`._resume.resumes`)."""
    return resumes(frames.events, frames.calls, frames.responses, frames.spans, frames.diagnostics)


def segmented(latency: pd.DataFrame, found: Resumes) -> pd.DataFrame:
    """``latency`` with each resumed invocation that ended timed as segments: from its first
    record to its last, less its pauses (``active_ms``). Every source then tells the same time
    of it: a source that saw only its last segment (spans: the process that died exported
    none) does not disagree with one that saw them all, and a pause is no latency."""
    resumed = found.invocations.set_index("invocation_id")
    which = latency["invocation_id"].isin(resumed.index) & ~latency["open"]
    if not which.any():
        return latency
    ids = latency.loc[which, "invocation_id"]
    out = latency.copy()
    for column in ("started_at", "ended_at"):
        out.loc[which, column] = ids.map(resumed[column]).astype(out[column].dtype)
    out.loc[which, "ms"] = ids.map(resumed["active_ms"]).astype(FLOAT)
    return out


def as_at(latency: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """``latency`` as it stood at ``as_of``: runs started later are left out, and a run that
    ended later was still open (a ledger row or a span written after ``as_of`` says nothing
    about the moment judged)."""
    seen = latency.loc[latency["started_at"].le(as_of)]
    later = seen["ended_at"].gt(as_of)
    if not later.any():
        return seen.reset_index(drop=True)
    return seen.assign(
        ended_at=seen["ended_at"].mask(later),
        ms=seen["ms"].mask(later),
        open=seen["open"] | later,
        error=seen["error"] & ~later,
    ).reset_index(drop=True)


SAMPLED = 0.9
"""Spans covering fewer than this share of the invocations another source holds are sampled:
a complete ledger or event log times the runs better."""


def _best_source(by_source: Mapping[str, pd.DataFrame], notes: list[str]) -> str | None:
    """The first source of :data:`.latency.SOURCES` present, skipping spans that are sampled."""
    names = list(by_source)
    if names[:1] == ["spans"] and len(names) > 1:
        spans = len(by_source["spans"])
        most = max(len(by_source[name]) for name in names[1:])
        if spans < SAMPLED * most:
            notes.append(
                f"The invocation spans hold {spans} of {most} invocations (sampled): latency "
                f"comes from the {SOURCE_LABELS[names[1]]} instead."
            )
            return names[1]
    return names[0] if names else None


def censored(best: pd.DataFrame, opens: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """``best`` plus the open invocations of another source it lacks, start-ordered, with
    every open one at its age at ``as_of``."""
    extra = opens.loc[opens["open"] & ~opens["invocation_id"].isin(best["invocation_id"].dropna())]
    series = pd.concat([best, extra], ignore_index=True) if len(extra) else best
    age = (as_of - series["started_at"]).dt.total_seconds() * 1000
    series = series.assign(ms=series["ms"].where(~series["open"], age.clip(lower=0)))
    series = series.sort_values("started_at", kind="stable").reset_index(drop=True)
    return as_columns(series, LATENCY_COLUMNS)


def _rate_changed(errors: tuple[int, int], runs: tuple[int, int]) -> bool:
    """A two-proportion test: the error rates differ by more than :data:`ERROR_Z` standard
    errors (no error on either side: unchanged)."""
    if min(runs) == 0:
        return False
    pooled = sum(errors) / sum(runs)
    if pooled in (0.0, 1.0):
        return False
    spread = math.sqrt(pooled * (1 - pooled) * (1 / runs[0] + 1 / runs[1]))
    return abs(errors[1] / runs[1] - errors[0] / runs[0]) > ERROR_Z * spread


def cliff_row(series: pd.DataFrame, at: int, bucket: pd.Timedelta, source: str) -> pd.DataFrame:
    """The cliff's row for a split of ``series`` before position ``at``."""
    before, after = series.iloc[:at], series.iloc[at:]

    def pct(part: pd.DataFrame, q: float) -> float:
        ended = part.loc[~part["open"], "ms"]
        return float(ended.quantile(q)) if len(ended) else math.nan

    errors = (int(before["error"].sum()), int(after["error"].sum()))
    row = {
        "at": after["started_at"].iloc[0].floor(bucket),
        "p50_before_ms": pct(before, 0.5),
        "p95_before_ms": pct(before, 0.95),
        "p50_after_ms": pct(after, 0.5),
        "p95_after_ms": pct(after, 0.95),
        "runs_before": len(before),
        "runs_after": len(after),
        "errors_before": errors[0],
        "errors_after": errors[1],
        "error_rate_changed": _rate_changed(errors, (len(before), len(after))),
        "source": source,
    }
    return as_columns(pd.DataFrame([row]), CLIFF_COLUMNS)


def triage_latency(
    frames: Frames,
    *,
    as_of: pd.Timestamp,
    client_timeout_s: float = 60.0,
    bucket: pd.Timedelta = ONE_MINUTE,
    jfr_samples: pd.DataFrame | None = None,
    jfr_locks: pd.DataFrame | None = None,
    journal: pd.DataFrame | None = None,
) -> LatencyReport:
    """The whole flow on one app's frames (see the module docstring of each step).

    ``jfr_samples`` and ``jfr_locks`` (a JFR recording's frames, when there is one) add the
    threads sampled in one native call through the recording to the stuck threads, and the
    contended monitors and locks. ``journal`` (None: the evidence has none) tells whether a
    call ADK ran again after a crash had its side effect twice."""
    resumed = resumes_of(frames)
    by_source = {
        name: as_at(frame, as_of) for name, frame in latency_by_source(frames, resumed).items()
    }
    notes: list[str] = []
    source = _best_source(by_source, notes)
    nothing = empty_latency()
    best = by_source[source] if source else nothing
    open_source = next((n for n in ("diagnostics", "ledger", "events") if n in by_source), None)
    opens = by_source[open_source] if open_source else nothing
    if source is None:
        notes.append(
            "No source times an invocation (no run.start lines, invocation spans, ledger rows "
            "or events for this app): no latency, no cliff."
        )
    elif source != "diagnostics":
        notes.append(
            f"No diagnostics run.start/run.end lines: latency comes from the "
            f"{SOURCE_LABELS[source]}, and open invocations from "
            f"{open_source or 'no source'}; a run.start with no run.end is the surest sign of "
            "a hang."
        )
    series = censored(best, opens if open_source != source else best.iloc[0:0], as_of)
    hung = open_invocations(
        series,
        frames.events,
        frames.calls,
        frames.responses,
        as_of=as_of,
        older_than_s=client_timeout_s,
        runs=frames.runs,
    )
    if frames.events.empty and len(hung):
        notes.append("No event log: what each open invocation waits on is unknown (no_events).")
    proven = hung["orphaned"] & hung["orphan_reason"].ne(Orphaned.SESSION_SILENT)
    seen = read_threads(
        frames.threads,
        hung.loc[~proven, "tool"].dropna().unique(),
        jfr_samples=jfr_samples,
        jfr_locks=jfr_locks,
    )
    hung = alive(hung, hung["tool"].isin(seen.groups.loc[~seen.groups["idle"], "tool"]))
    hung = queued(series, hung)
    if len(frames.threads) or (~hung["orphaned"]).any() or jfr_samples is not None:
        notes += seen.notes  # a dead worker's runs need no thread dump
    notes += _orphan_notes(hung)
    found, changes = live_cliff(series, hung)
    cliff = (
        cliff_row(series, found, bucket, source or "")
        if found is not None and source is not None
        else empty_view(CLIFF_COLUMNS)
    )
    others = {name: frame for name, frame in by_source.items() if name != source}
    disagreements = cross_check(best, others) if source else cross_check(best, {})
    report = LatencyReport(
        as_of=as_of,
        bucket=bucket,
        client_timeout_s=float(client_timeout_s),
        source=source,
        open_source=open_source,
        sources=tuple(by_source),
        series=series,
        buckets=per_bucket(series.assign(ms=series["ms"].where(~series["open"])), bucket),
        cliff=cliff,
        changes=tuple(changes),
        open=hung,
        by_last_event=by_last_event(hung),
        disagreements=disagreements,
        thread_groups=seen.groups,
        dumps=seen.dumps,
        fix=empty_view(FIX_COLUMNS),
        notes=tuple(notes),
        recordings=seen.recordings,
        contention=empty_view(CONTENTION_COLUMNS) if jfr_locks is None else contention(jfr_locks),
        spinning=seen.spinning,
        lock_owners=seen.owners,
        pauses=resumed.pauses,
        resumed=resumed.invocations,
        calls_run_twice=calls_run_twice(resumed.pauses, frames.calls, frames.responses, journal),
    )
    return _with_fix(report)


def with_journal(
    report: LatencyReport, frames: Frames, journal: pd.DataFrame | None
) -> LatencyReport:
    """``report`` with its calls run twice checked against ``journal`` (None: none to tell)."""
    twice = calls_run_twice(report.pauses, frames.calls, frames.responses, journal)
    return replace(report, calls_run_twice=twice)


def live_cliff(series: pd.DataFrame, hung: pd.DataFrame) -> tuple[int | None, list[cp.Change]]:
    """The cliff of the invocations whose worker lived: an orphan's age says when its worker
    died, not how slow anything was. Positions are of ``series``."""
    dead = series["invocation_id"].isin(hung.loc[hung["orphaned"], "invocation_id"].dropna())
    if not dead.any():
        return cp.find_cliff(series["ms"])
    kept = np.flatnonzero(~dead.to_numpy())
    found, changes = cp.find_cliff(series["ms"].iloc[kept].reset_index(drop=True))
    moved = [replace(change, at=int(kept[change.at])) for change in changes]
    return (None if found is None else int(kept[found])), moved


def queued(series: pd.DataFrame, hung: pd.DataFrame) -> pd.DataFrame:
    """``hung`` with the presumed orphans (no ledger) that started after a cliff of the live
    invocations counted as hangs: a worker that dies leaves the others as fast as before,
    while a stalled dependency slows everyone queued behind it."""
    presumed = hung["orphan_reason"].eq(Orphaned.SESSION_SILENT)
    if not presumed.any():
        return hung
    found, _ = live_cliff(series, hung)
    if found is None:
        return hung
    return alive(hung, presumed & hung["started_at"].ge(series["started_at"].iloc[found]))


def _orphan_notes(hung: pd.DataFrame) -> list[str]:
    """What the orphans among the open invocations are, and what the flow does with them."""
    dead = hung.loc[hung["orphaned"]]
    if dead.empty:
        return []
    silent = dead["orphan_reason"].eq(Orphaned.SESSION_SILENT)
    how = (
        "their ledger runs show the worker died (a lease that ran out, or a run re-driven since)"
        if not silent.any()
        else "with no ledger, their sessions went silent past the client timeout while other "
        "sessions of the app went on (presumed: a ledger row whose lease expired proves it)"
    )
    return [
        f"{len(dead)} of the {len(hung)} open invocation(s) are orphans, not hangs: {how}. "
        "They are left out of the cliff's series (an orphan's age is not latency) and get no "
        "timeout fix; the orphans flow says what to do with each run."
    ]


def with_baseline(report: LatencyReport, baseline: LatencyBaseline) -> LatencyReport:
    """``report`` with the latency of a baseline window, and a note comparing it."""
    done = replace(report, baseline=baseline)
    return replace(done, notes=(*report.notes, done.baseline_text))


def _with_fix(report: LatencyReport) -> LatencyReport:
    """``report`` with the fix for the tool the stall names: the stuck group tied to the open
    calls (a lock's owner first: the fix names the owner's client, and releasing the lock
    before the call), else, past a cliff, the tool most open invocations wait on. A hang with
    neither (an orphan of a dead worker, a model call in flight) gets no tool fix."""
    tied = report.stalls.loc[report.stalls["tool"].notna()]
    waiting = report.hangs["tool"].dropna()
    lock: str | None = None
    holder: str | None = None
    if len(tied):
        top = tied.iloc[0]
        tool, client, pool = str(top["tool"]), top["client"], str(top["pool"])
        if top["blocking"] > 0 and isinstance(top["lock_class"], str):
            lock = str(top["lock_class"])
            holder = top["lock_frame"] if isinstance(top["lock_frame"], str) else None
    elif report.has_cliff and len(waiting):
        tool, client, pool = str(waiting.mode().iloc[0]), None, None
    else:
        return report
    return replace(
        report,
        fix=fixes(
            tool,
            client=client if isinstance(client, str) else None,
            pool=pool,
            client_timeout_s=report.client_timeout_s,
            lock=lock,
            holder_frame=holder,
        ),
    )
