"""The vanished-state flow's triage: one session's keys judged against its stored deltas, its
replayed state beside the stored one, and the invocations that overlapped on it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.flows.vanished_state import overlaps, state, verdicts
from incidentkit.flows.vanished_state.state import SessionRef


@dataclass(frozen=True)
class VanishedReport:
    """Everything the vanished-state notebook shows and its findings are drawn from."""

    ref: SessionRef
    as_of: pd.Timestamp
    keys: pd.DataFrame
    """One row per judged key (:data:`.verdicts.VERDICT_COLUMNS`)."""
    writes: pd.DataFrame
    """Every stored write the session sees, in the order ADK applied them."""
    replayed: pd.DataFrame
    """Replayed beside stored, one row per key (:data:`.state.REPLAYED_COLUMNS`)."""
    overlaps: pd.DataFrame
    """The session's overlapping invocation pairs (:data:`.overlaps.OVERLAP_COLUMNS`)."""
    ranges: pd.DataFrame
    """The session's invocations and their time ranges."""
    store_keeps_state: bool
    keeps_partials: bool
    notes: tuple[str, ...]

    @property
    def differences(self) -> pd.DataFrame:
        """Keys whose replayed value is not the stored one."""
        return self.replayed.loc[self.replayed["matches"].eq(False)]


def triage_vanished_state(
    frames: Frames,
    session_id: str,
    *,
    as_of: pd.Timestamp,
    keys: Iterable[str] = (),
    app_name: str = "",
    user_id: str = "",
    store_keeps_state: bool | None = None,
) -> VanishedReport:
    """Judge ``keys`` (every key the session names, when empty) of ``session_id``.

    ``store_keeps_state``: whether the evidence has a stored state to compare with (default:
    whether ``frames.session_state`` has any row); an event log alone has none.
    """
    ref = state.resolve_session(
        frames.events, frames.session_state, session_id, app_name=app_name, user_id=user_id
    )
    app_events = frames.events.loc[frames.events["app_name"].eq(ref.app_name)]
    writes = state.visible_writes(frames.state_writes, frames.events, frames.responses, ref)
    stored = state.stored_state(frames.session_state, ref)
    keeps = bool(len(frames.session_state)) if store_keeps_state is None else store_keeps_state
    session_events = app_events.loc[app_events["session_id"].eq(ref.session_id)]
    own_runs = frames.runs.loc[frames.runs["session_id"].eq(ref.session_id)]
    ranges = overlaps.invocation_ranges(session_events, own_runs)
    partials = bool(session_events["partial"].any())
    own_responses = frames.responses.loc[frames.responses["session_id"].eq(ref.session_id)]
    rewinds = verdicts.rewinds_of(app_events)
    ctx = verdicts.Context(ref, writes, stored, keeps, partials, ranges, own_responses, rewinds)
    judged = verdicts.judge(ctx, verdicts.keys_to_judge(ctx, keys))
    replayed = state.compare(
        state.replay(writes), stored, store_keeps_state=keeps, written=writes["key"]
    )
    notes = _notes(frames, keeps, partials, rewinds.loc[rewinds["session_id"].eq(ref.session_id)])
    if not [k for k in keys if k]:
        notes = (
            "No keys were asked for: every key the session's deltas or stored state name is "
            "judged. A key nothing wrote (a direct session.state mutation) cannot be found this "
            "way: name the key the customer misses, e.g. -p keys '[\"loyalty_tier\"]'.",
            *notes,
        )
    return VanishedReport(
        ref=ref,
        as_of=as_of,
        keys=judged,
        writes=writes,
        replayed=replayed,
        overlaps=overlaps.overlapping(ranges),
        ranges=ranges,
        store_keeps_state=keeps,
        keeps_partials=partials,
        notes=notes,
    )


def _notes(frames: Frames, keeps: bool, partials: bool, rewinds: pd.DataFrame) -> tuple[str, ...]:
    notes = []
    if len(rewinds):
        notes.append(
            f"The session was rewound {len(rewinds)} time(s) (Runner.rewind_async): a rewind "
            "deletes no event but appends one whose state delta restores the session keys "
            "before the invocation it names, so a write in the events it undid is no evidence "
            "of what a session key holds; app:/user: keys are not reverted, and state given to "
            "create_session is nulled (adk-python #4933). Such keys get the verdict REWOUND."
        )
    if not keeps:
        notes.append(
            "The evidence holds no stored session state (an event log, not a session store): "
            "the replay cannot be compared with what the store kept, and a key set at "
            "create_session, which has no delta, shows as never durable. Add the session store "
            "(or adk run --save_session / Session.toJson() JSON) to [events]."
        )
    if not partials:
        notes.append(
            "The event log holds no partial (streamed) event of this session, as a session "
            "store never does: a key written only by streamed events cannot be told from a "
            "direct session.state mutation."
        )
    if frames.runs.empty:
        notes.append(
            "No ledger: invocation time ranges come from the events alone (a run's queueing "
            "before its first event is not seen)."
        )
    return tuple(notes)
