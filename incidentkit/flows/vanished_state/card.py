"""The vanished_state flow's cheap checks on the triage card, run apart: the sessions where
state can vanish (with the keys to judge there), and invocations of one session that
overlapped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from incidentkit.baselines import analytics, dialects, queries
from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.vanished_state.overlaps import invocation_ranges, overlapping
from incidentkit.flows.vanished_state.suspects import state_suspects

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "vanished_state"
STATE_LINES = 5
OVERLAP_EVIDENCE = "event log, ledger"
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
    evidence = OVERLAP_EVIDENCE
    if frames.events.empty and frames.runs.empty:
        why = "no event and no ledger run"
        return [not_checked("overlapping-invocations", FLOW, evidence, why)]
    pairs = overlapping(invocation_ranges(frames.events, frames.runs))
    return [_overlap_line(pairs)]


def _overlap_line(pairs: pd.DataFrame) -> CardLine:
    """The line of the overlapping ``pairs`` (``session_id`` each, in the order of
    :func:`overlapping`)."""
    sessions = pairs["session_id"].nunique()
    title = f"{len(pairs)} pair(s) of invocations overlapped on {sessions} session(s)"
    if len(pairs):
        title += f", e.g. session {pairs['session_id'].iloc[0]}"
    severity = "WARNING" if len(pairs) else "INFO"
    return card_line(
        "overlapping-invocations",
        severity,
        len(pairs),
        title,
        FLOW,
        OVERLAP_EVIDENCE,
        session_id=str(pairs["session_id"].iloc[0]) if len(pairs) else None,
    )


def overlap_engine_lines(context: EngineCardContext) -> list[CardLine]:
    """The overlapping-invocations line of every app, computed in the database: each
    invocation's range (its first and last turn, markers left out, else its ledger run's
    start; to the later of its last turn and its run's last update) grouped by app, session
    and invocation over the union of the events and the ledger, then the pairs of one
    session whose ranges overlap (:func:`_pairs`: a window function finds the sessions, a
    join their pairs), in one statement; only the pairs and a row per app travel."""
    check, evidence = "overlapping-invocations", OVERLAP_EVIDENCE
    if context.events is None and context.ledger is None:
        why = f"{context.events_missing()}; {context.ledger_missing()}"
        return context.not_checked(check, FLOW, evidence, why)
    if context.has_ledger and context.ledger is None:
        return context.not_checked(check, FLOW, evidence, context.ledger_missing())
    if "events" in context.sources and context.events is None:
        return context.not_checked(check, FLOW, evidence, context.events_missing())
    both = context.events is not None and context.ledger is not None
    if both and context.events.conn is not context.ledger.conn:  # type: ignore[union-attr]
        why = "the events and the ledger are in two databases: no query joins them"
        return context.not_checked(check, FLOW, evidence, why)
    conn = context.events.conn if context.events is not None else context.ledger.conn  # type: ignore[union-attr]
    rows = context.fetch(conn, _pairs(_ranges(context).cte("ranges")))
    pairs = pd.DataFrame(
        [tuple(r) for r in rows if r.session_id is not None],
        columns=["app_name", "session_id", "a_start", "b_start"],
    ).sort_values(["session_id", "a_start", "b_start"], kind="stable")
    held = {r.app_name for r in rows if r.session_id is None}
    detail = context.computed("events", "ledger")
    lines: list[CardLine] = []
    for app in context.apps:
        if app not in held:  # as in memory: an app with no turn and no run is not checked
            line = not_checked(check, FLOW, evidence, "no event and no ledger run")
        else:
            line = {**_overlap_line(pairs.loc[pairs["app_name"].eq(app)]), "detail": detail}
        lines.append({**line, "app": app})
    return lines


def _pairs(ranges: sa.CTE) -> sa.Select[Any]:
    """The overlapping pairs of ``ranges`` (``app_name``, ``session_id``, ``a_start``,
    ``b_start``), then a row per app that has a range (``session_id`` NULL), in one pass.

    In each session's order (start, then invocation id) an invocation overlaps an earlier
    one exactly when it starts before the latest end among those before it (a window
    function, as :func:`overlapping` has it); the pairs are joined within the few sessions
    where that happens only."""
    r = ranges.c
    before = sa.func.max(r.end_s).over(
        partition_by=(r.app_name, r.session_id),
        order_by=(r.start_s, r.invocation_id),
        rows=(None, -1),
    )
    ordered = sa.select(r.app_name, r.session_id, r.start_s, before.label("before")).subquery(
        "ordered"
    )
    o = ordered.c
    hit = (
        sa.select(o.app_name, o.session_id)
        .where(o.start_s < o.before)
        .group_by(o.app_name, o.session_id)
        .subquery("hit")
    )
    a, b = ranges.alias("a"), ranges.alias("b")
    pairs = (
        sa.select(
            a.c.app_name, a.c.session_id, a.c.start_s.label("a_start"), b.c.start_s.label("b_start")
        )
        .select_from(hit)
        .join(a, sa.and_(a.c.app_name == hit.c.app_name, a.c.session_id == hit.c.session_id))
        .join(b, sa.and_(b.c.app_name == a.c.app_name, b.c.session_id == a.c.session_id))
        .where(
            a.c.invocation_id != b.c.invocation_id,
            sa.or_(
                a.c.start_s < b.c.start_s,
                sa.and_(a.c.start_s == b.c.start_s, a.c.invocation_id < b.c.invocation_id),
            ),
            a.c.end_s > b.c.start_s,
        )
    )
    nothing = sa.literal(None, sa.Double)
    held = sa.select(
        r.app_name, sa.literal(None, sa.String).label("session_id"), nothing, nothing
    ).group_by(r.app_name)
    return sa.select(*sa.union_all(pairs, held).subquery("overlaps").c)


def _ranges(context: EngineCardContext) -> sa.Select[Any]:
    """Per app, session and invocation: ``start_s`` and ``end_s`` (epoch seconds), as
    :func:`invocation_ranges` gives them (over the Agent Analytics table, its invocations'
    first and last event: ``analytics.per_invocation``)."""
    from incidentkit.flows.engine_card import event_conditions, ledger_conditions

    parts = []
    found = context.events.analytics if context.events is not None else None
    if found is not None and context.events is not None:  # the Agent Analytics table
        conn = context.events.conn
        per = analytics.per_invocation(conn, found, context.filters, context.apps).c
        parts.append(
            sa.select(
                per.app_name,
                per.session_id,
                per.invocation_id,
                per.start_s.label("e_start"),
                sa.literal(None, sa.Double).label("l_start"),
                per.end_s,
            )
        )
    elif context.events is not None:
        conn, table = context.events.conn, context.events.table
        flags = queries.event_flags(conn, table)
        ts = dialects.epoch_seconds(conn, table.column("ts"), table.storage)
        inv = table.column("invocation_id")
        keys = [table.column(c).label(c) for c in ("app_name", "session_id", "invocation_id")]
        parts.append(
            sa.select(
                *keys,
                sa.func.min(ts).label("e_start"),
                sa.literal(None, sa.Double).label("l_start"),
                sa.func.max(ts).label("end_s"),
            )
            .where(
                *event_conditions(context), inv.is_not(None), ts.is_not(None), queries.turn(flags)
            )
            .group_by(*(table.column(c) for c in ("app_name", "session_id", "invocation_id")))
        )
    if context.ledger is not None:
        conn, runs = context.ledger.conn, context.ledger.table
        keys = [runs.column(c).label(c) for c in ("app_name", "session_id", "invocation_id")]
        parts.append(
            sa.select(
                *keys,
                sa.literal(None, sa.Double).label("e_start"),
                sa.func.min(runs.seconds(conn, "started_at")).label("l_start"),
                sa.func.max(runs.seconds(conn, "updated_at")).label("end_s"),
            )
            .where(
                *ledger_conditions(context),
                runs.column("invocation_id").is_not(None),
                runs.column("started_at").is_not(None),
            )
            .group_by(*(runs.column(c) for c in ("app_name", "session_id", "invocation_id")))
        )
    both = (sa.union_all(*parts) if len(parts) > 1 else parts[0]).subquery("both")
    c = both.c
    start = sa.func.coalesce(sa.func.min(c.e_start), sa.func.min(c.l_start))
    return sa.select(
        c.app_name,
        c.session_id,
        c.invocation_id,
        start.label("start_s"),
        sa.func.coalesce(sa.func.max(c.end_s), start).label("end_s"),
    ).group_by(c.app_name, c.session_id, c.invocation_id)
