"""The vanished_state flow's cheap checks on the triage card, run apart: the sessions where
state can vanish (with the keys to judge there), and invocations of one session that
overlapped."""

from __future__ import annotations

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.vanished_state.overlaps import invocation_ranges, overlapping
from incidentkit.flows.vanished_state.suspects import state_suspects

FLOW = "vanished_state"
STATE_LINES = 5
"""The sessions where state can vanish the card lists per app, most suspicious first."""


def state_lines(context: CardContext) -> list[CardLine]:
    """The sessions where state can vanish (:mod:`incidentkit.flows.vanished_state.suspects`),
    each with the keys to judge there: a line per session (at most :data:`STATE_LINES`) for
    ``forgot`` or a stored value lost, WARNING; else one line for the record, INFO. With
    nothing found, what was checked."""
    frames = context.frames
    evidence = "event log (state deltas), stored state, ledger"
    if frames.events.empty:
        return [not_checked("state-can-vanish", FLOW, evidence, "no stored event of this app")]
    found = state_suspects(
        frames.events,
        frames.calls,
        frames.responses,
        frames.state_writes,
        stored=frames.session_state,
        runs=frames.runs,
    )
    suspects = found.suspects
    if suspects.empty:
        if not found.keys:
            return [
                not_checked(
                    "state-can-vanish",
                    FLOW,
                    evidence,
                    f"no key to examine: no session of the {found.sessions} holds or wrote a "
                    "state key the evidence keeps (a temp: key a store trimmed, or a direct "
                    "session.state write, leaves none); name the key the customer misses and "
                    "run vanished_state on their session",
                )
            ]
        return [
            card_line(
                "state-can-vanish",
                "INFO",
                0,
                f"no session where state can vanish: {found.checked()}",
                FLOW,
                evidence,
            )
        ]
    lost = suspects["differing_keys"].map(len).gt(0)
    if context.symptom != "forgot" and not lost.any():
        top = suspects.iloc[0]
        return [
            card_line(
                "state-can-vanish",
                "INFO",
                len(suspects),
                f"{len(suspects)} session(s) where state can vanish (of {found.sessions}); "
                f"the most suspicious, {top['session_id']}: {top['why']}",
                FLOW,
                evidence,
                session_id=str(top["session_id"]),
                keys=",".join(top["keys"]) or None,
            )
        ]
    lines = []
    shown = suspects.head(STATE_LINES)
    for n, row in enumerate(shown.to_dict("records"), start=1):
        keys = ",".join(row["keys"])
        lines.append(
            card_line(
                "state-can-vanish",
                "WARNING",
                int(row["signals"]),
                f"state can vanish in session {row['session_id']} (#{n} of {len(suspects)} "
                f"among {found.sessions} session(s), score {row['score']}): {row['why']}",
                FLOW,
                evidence,
                detail=found.checked(),
                session_id=str(row["session_id"]),
                keys=keys or None,
            )
        )
    return lines


def overlap_lines(context: CardContext) -> list[CardLine]:
    """The overlapping-invocations line: two invocations of one session at once, WARNING."""
    frames = context.frames
    evidence = "event log, ledger"
    if frames.events.empty and frames.runs.empty:
        why = "no event and no ledger run"
        return [not_checked("overlapping-invocations", FLOW, evidence, why)]
    pairs = overlapping(invocation_ranges(frames.events, frames.runs))
    sessions = pairs["session_id"].nunique()
    title = f"{len(pairs)} pair(s) of invocations overlapped on {sessions} session(s)"
    if len(pairs):
        title += f", e.g. session {pairs['session_id'].iloc[0]}"
    severity = "WARNING" if len(pairs) else "INFO"
    line = card_line(
        "overlapping-invocations",
        severity,
        len(pairs),
        title,
        FLOW,
        evidence,
        session_id=str(pairs["session_id"].iloc[0]) if len(pairs) else None,
    )
    return [line]
