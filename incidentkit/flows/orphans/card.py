"""The orphans flow's cheap check on the triage card: runs orphaned at as_of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd
import sqlalchemy as sa

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.common import Frames
from incidentkit.flows.orphans.triage import TERMINAL_STATUSES, classify_orphans
from incidentkit.frames import empty
from incidentkit.manifest import Filters

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "orphans"
EVIDENCE = "run ledger, event log, journal"


def card_lines(context: CardContext) -> list[CardLine]:
    """The orphans line: WARNING for orphaned runs, CRITICAL with a crash loop or a duplicate
    side effect; NOT_CHECKED without a ledger run or the profile's ``terminal_agent``."""
    frames, profile = context.frames, context.profile
    evidence = EVIDENCE
    if frames.runs.empty:
        return [not_checked("orphans", FLOW, evidence, "no ledger run of this app")]
    if not profile.terminal_agent:
        why = "the app's profile names no terminal_agent"
        return [not_checked("orphans", FLOW, evidence, why)]
    report = classify_orphans(
        frames.runs,
        frames.events,
        frames.calls,
        frames.responses,
        frames.journal,
        as_of=context.as_of,
        terminal_agent=profile.terminal_agent,
        key_templates=profile.key_templates,
        attempts_cap=profile.attempts_cap,
    )
    orphans, loops = len(report.orphans), len(report.crash_loops)
    title = f"{orphans} orphaned run(s) at as_of" + (f", {loops} crash loop(s)" if loops else "")
    severity = (
        "CRITICAL" if loops or len(report.duplicate_effects) else ("WARNING" if orphans else "INFO")
    )
    return [card_line("orphans", severity, orphans, title, FLOW, "run ledger")]


def engine_lines(context: EngineCardContext) -> list[CardLine]:
    """The orphans line of every app: the ledger's runs counted per app and its runs a
    sweeper would classify (not DONE, FAILED or PARKED: RUNNING and PAUSED ones) selected in
    the database; the sessions of those runs are read through the loader (their runs, events
    and journal entries only) and :func:`card_lines` classifies them, as in memory. A
    duplicate side effect is looked for in those sessions only."""
    if context.ledger is None:
        why = context.ledger_missing()
        if not context.has_ledger and context.events is not None and context.events.analytics:
            why = (
                "the Agent Analytics table keeps no run ledger (an invocation without "
                "INVOCATION_COMPLETED is open, or its rows were dropped): give a [ledger]"
            )
        return context.not_checked("orphans", FLOW, EVIDENCE, why)
    from incidentkit.flows.engine_card import ledger_conditions

    conn, table = context.ledger.conn, context.ledger.table
    app = table.column("app_name")
    counted = dict(
        (r.app_name, int(r.runs))
        for r in context.fetch(
            conn,
            sa.select(app.label("app_name"), sa.func.count().label("runs"))
            .where(*ledger_conditions(context))
            .group_by(app),
        )
    )
    status = sa.func.upper(table.column("status"))
    open_runs = context.fetch(
        conn,
        sa.select(app.label("app_name"), table.column("session_id").label("session_id"))
        .where(*ledger_conditions(context), status.not_in(list(TERMINAL_STATUSES)))
        .distinct(),
    )
    sessions = sorted({r.session_id for r in open_runs})
    runs = context.flagged("ledger", "runs", sessions=sessions)
    frames = Frames(runs=runs)
    if sessions and context.events is not None:
        frames = Frames(runs=runs, **sessions_events(context, sessions))
    invocations = set(runs["invocation_id"].dropna()) | set(frames.events["invocation_id"].dropna())
    journal = context.flagged("journal", "journal", invocations=sorted(invocations))
    lines: list[CardLine] = []
    for name in context.apps:
        if not counted.get(name):
            line = not_checked("orphans", FLOW, EVIDENCE, "no ledger run of this app")
        elif "events" in context.sources and context.events is None:
            line = not_checked("orphans", FLOW, EVIDENCE, context.events_missing())
        elif not context.profile(name).terminal_agent:
            why = "the app's profile names no terminal_agent"
            line = not_checked("orphans", FLOW, EVIDENCE, why)
        elif name not in {r.app_name for r in open_runs}:  # every run terminal: no orphan
            line = card_line("orphans", "INFO", 0, "0 orphaned run(s) at as_of", FLOW, "run ledger")
        else:
            mine = _app_frames(name, frames, journal)
            [line] = card_lines(CardContext(mine, context.as_of, context.profile(name)))
        if line["severity"] != "NOT_CHECKED":
            line = {**line, "detail": context.computed("ledger", "events")}
        lines.append({**line, "app": name})
    return lines


SESSION_FRAMES = ("events", "calls", "responses")
PER_APP_LOADS = 16
"""Up to this many apps in the card, flagged sessions are read one app at a time."""


def sessions_events(context: EngineCardContext, sessions: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The events, calls and responses of the flagged ``sessions``, read through the loader:
    one app of the card at a time (up to :data:`PER_APP_LOADS` apps), so the app and the
    sessions both filter and an index on the app and session (``incidentkit inspect`` asks
    for one) finds them rather than a scan of every event; every app's rows of those
    sessions, as the frames in memory hold them."""
    wanted = tuple(sorted(set(sessions)))
    if not wanted:
        return {}
    apps = [a for a in context.apps if a]
    each = apps if apps and len(apps) <= PER_APP_LOADS else [None]
    parts: dict[str, list[pd.DataFrame]] = {n: [] for n in SESSION_FRAMES}
    for app in each:
        narrow = Filters(window=context.filters.window, app_name=app, session_ids=wanted)
        loaded = context.load("events", narrow)
        for name in SESSION_FRAMES:
            parts[name].append(loaded.get(name, empty(name)))
    return {
        name: pd.concat(found, ignore_index=True) if len(found) > 1 else found[0]
        for name, found in parts.items()
    }


def _app_frames(app: str, frames: Frames, journal: pd.DataFrame) -> Frames:
    """One app's share of the flagged sessions' frames."""
    runs, events = frames.runs, frames.events
    mine = runs.loc[runs["app_name"].eq(app)]
    ev = events.loc[events["app_name"].eq(app)]
    sessions = set(ev["session_id"].dropna()) | set(mine["session_id"].dropna())
    return Frames(
        runs=mine,
        events=ev,
        calls=frames.calls.loc[frames.calls["session_id"].isin(sessions)],
        responses=frames.responses.loc[frames.responses["session_id"].isin(sessions)],
        journal=journal,
    )
