"""The session flow's triage: one session event by event, the errors that vanish around it,
and what its swimlane draws."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.flows.session.dump import dump_text, session_dump
from incidentkit.flows.session.errors import error_counts, quiet, vanishing_errors
from incidentkit.flows.vanished_state import overlaps
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.manifest import Window


@dataclass(frozen=True)
class SessionReport:
    """Everything the session notebook shows and its findings are drawn from."""

    ref: SessionRef
    as_of: pd.Timestamp
    dump: pd.DataFrame
    """One row per stored event (:data:`.dump.DUMP_COLUMNS`)."""
    text: str
    """The dump as the seed prints it."""
    errors: pd.DataFrame
    """The errors of the app in the incident window (:data:`.errors.ERROR_COLUMNS`), with
    ``in_session``; the session's own first."""
    counts: pd.DataFrame
    """Errors per kind, agent and tool."""
    session: Frames
    """The session's own rows (events, runs, spans, journal, ...), for the swimlane."""
    ranges: pd.DataFrame
    overlaps: pd.DataFrame
    errors_window: str
    notes: tuple[str, ...]

    @property
    def quiet(self) -> pd.DataFrame:
        """The errors nothing threw: error codes on normally ended runs, undeliverable ones."""
        return quiet(self.errors)


def own_rows(frames: Frames, ref: SessionRef) -> Frames:
    """The rows of ``frames`` that belong to the session (spans and journal entries by their
    invocations, when they name no session)."""
    sid = ref.session_id

    def of(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.loc[frame["session_id"].eq(sid)].reset_index(drop=True)

    events = of(frames.events)
    invocations = set(events["invocation_id"].dropna()) | set(
        frames.runs.loc[frames.runs["session_id"].eq(sid), "invocation_id"].dropna()
    )
    spans = frames.spans
    mine = spans["session_id"].eq(sid) | spans["invocation_id"].isin(invocations)
    by_trace = spans["trace_id"].isin(spans.loc[mine, "trace_id"])
    journal = frames.journal.loc[frames.journal["invocation_id"].isin(invocations)]
    return Frames(
        runs=of(frames.runs),
        events=events,
        calls=of(frames.calls),
        responses=of(frames.responses),
        state_writes=of(frames.state_writes),
        spans=spans.loc[by_trace].reset_index(drop=True),
        diagnostics=frames.diagnostics.loc[
            frames.diagnostics["invocation_id"].isin(invocations)
        ].reset_index(drop=True),
        journal=journal.reset_index(drop=True),
    )


def _in_window(frame: pd.DataFrame, column: str, window: Window | None) -> pd.DataFrame:
    if window is None:
        return frame
    times = frame[column]
    return frame.loc[times.ge(window.start) & times.lt(window.end)]


def triage_session(
    frames: Frames, ref: SessionRef, *, as_of: pd.Timestamp, window: Window | None = None
) -> SessionReport:
    """The session's dump and swimlane rows, and the errors of its app within ``window`` (the
    incident's; None: every row read) plus the session's own, wherever they fall."""
    session = own_rows(frames, ref)
    dump = session_dump(
        session.events, session.calls, session.responses, session.state_writes, ref.session_id
    )
    ranges = overlaps.invocation_ranges(session.events, session.runs)
    around = vanishing_errors(
        _in_window(frames.events, "ts", window),
        _in_window(frames.diagnostics, "ts", window),
        frames.calls,
        frames.runs,
    )
    own = vanishing_errors(session.events, session.diagnostics, session.calls, session.runs)
    parts = [own.assign(in_session=True), around.assign(in_session=False)]
    kept = [part for part in parts if len(part)] or parts[:1]
    errors = pd.concat(kept).drop_duplicates("location", keep="first").reset_index(drop=True)
    errors["in_session"] = errors["in_session"].astype(bool)
    label = (
        "every row read"
        if window is None
        else f"{window.start:%Y-%m-%d %H:%M:%S} to {min(window.end, as_of):%Y-%m-%d %H:%M:%S} UTC"
    )
    notes = []
    if frames.diagnostics.empty:
        notes.append(
            "No diagnostics log: model.error / tool.error / run.error lines and RxJava's "
            "undeliverable errors are not seen; only error codes on events are."
        )
    if session.spans.empty:
        notes.append("No span of the session (none exported, or the sampler dropped them).")
    return SessionReport(
        ref=ref,
        as_of=as_of,
        dump=dump,
        text=dump_text(dump),
        errors=errors,
        counts=error_counts(errors),
        session=session,
        ranges=ranges,
        overlaps=overlaps.overlapping(ranges),
        errors_window=label,
        notes=tuple(notes),
    )
