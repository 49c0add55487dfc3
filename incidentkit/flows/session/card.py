"""The session flow's cheap check on the triage card: errors that vanish; its engine twin
reads the events that carry an error (a few fields each) and their runs' status from the
database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from incidentkit.baselines import analytics, dialects, queries
from incidentkit.flows.card_lines import CardContext, CardLine, card_line
from incidentkit.flows.common import Frames
from incidentkit.flows.runaway.limits import names_limit_error
from incidentkit.flows.session.errors import EVENT_KIND, quiet, vanishing_errors
from incidentkit.frames import empty

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "session"
EVIDENCE = "event log, diagnostics log"


def card_lines(context: CardContext) -> list[CardLine]:
    """The quiet-errors line: the session flow's errors that vanish. A run ``max_llm_calls``
    stopped failed, loudly (``session.errors.run_outcomes``): its errors are counted apart and
    left to the over-call-limit line."""
    frames = context.frames
    errors = vanishing_errors(frames.events, frames.diagnostics, frames.calls, frames.runs)
    silent = quiet(errors)
    by_limit = names_limit_error(errors["error_code"]) | names_limit_error(errors["message"])
    coded = int(silent["kind"].eq(EVENT_KIND).sum())
    lost = int(silent["kind"].eq("rx.undeliverable").sum())
    loud = errors.loc[~errors.index.isin(silent.index)]
    limit = int(by_limit.loc[loud.index].sum())
    logged = len(loud) - limit
    title = (
        f"{coded} event(s) with an error code on runs that did not fail, {lost} undeliverable "
        f"error(s), {logged} logged model/tool/run error(s)"
    )
    if limit:
        stops = errors.loc[by_limit, "invocation_id"].nunique()
        title += f"; {limit} error(s) of {stops} run(s) maxLlmCalls stopped (over-call-limit)"
    severity = "WARNING" if len(silent) or logged else "INFO"
    first = silent if len(silent) else errors
    sessions = first["session_id"].dropna()
    line = card_line(
        "quiet-errors",
        severity,
        len(errors),
        title,
        FLOW,
        EVIDENCE,
        session_id=str(sessions.iloc[0]) if len(sessions) else None,
    )
    return [line]


def engine_lines(context: EngineCardContext) -> list[CardLine]:
    """The quiet-errors line of every app: the events that carry an error code or message are
    selected in the database (their ids, time, author, code and message: never the document),
    their runs' ledger status read by their invocation ids, and :func:`card_lines` run on those
    rows. The diagnostics log is not read (its logged and undeliverable errors are not
    counted: the detail says so)."""
    if context.events is None:
        return context.not_checked("quiet-errors", FLOW, EVIDENCE, context.events_missing())
    if context.has_ledger and context.ledger is None:
        return context.not_checked("quiet-errors", FLOW, EVIDENCE, context.ledger_missing())

    conn = context.events.conn
    names = ("event_id", "app_name", "session_id", "invocation_id", "ts_s", "author")
    rows = context.fetch(conn, _error_events(context))
    coded = pd.DataFrame(
        [tuple(r) for r in rows], columns=[*names, "error_code", "error_message"]
    ).astype({c: "str" for c in (*names[:4], "author", "error_code", "error_message")})
    coded["ts"] = _utc(coded.pop("ts_s"))
    coded = coded.sort_values(["session_id", "ts", "event_id"], kind="stable")
    runs = _statuses(context, coded["invocation_id"].dropna().unique().tolist())
    detail = context.computed("events", "ledger")
    if "diagnostics" in context.unread:
        detail += "; the diagnostics log's logged and undeliverable errors not counted"
    lines: list[CardLine] = []
    for app in context.apps:
        frames = Frames(
            events=coded.loc[coded["app_name"].eq(app)].reset_index(drop=True),
            runs=runs,
            diagnostics=empty("diagnostics"),
            calls=empty("calls"),
        )
        found = card_lines(CardContext(frames, context.as_of, context.profile(app)))
        lines += [{**line, "detail": detail, "app": app} for line in found]
    return lines


def _error_events(context: EngineCardContext) -> sa.Select[Any]:
    """The events with an error code or message: ``event_id``, ``app_name``, ``session_id``,
    ``invocation_id``, ``ts_s``, ``author``, ``error_code``, ``error_message`` (over the
    Agent Analytics table, ``analytics.error_events``)."""
    from incidentkit.flows.engine_card import event_conditions

    assert context.events is not None
    conn, found = context.events.conn, context.events.analytics
    if found is not None:
        errors = analytics.error_events(conn, found, context.filters, context.apps).subquery()
        e = errors.c
        return sa.select(
            e.event_id,
            e.app_name,
            e.session_id,
            e.invocation_id,
            e.ts_s,
            e.author,
            e.error_code,
            e.error_message,
        )
    table = context.events.table
    code = queries.event_field(conn, table, "error_code")
    message = queries.event_field(conn, table, "error_message")
    return sa.select(
        *(
            table.column(c).label(c)
            for c in ("event_id", "app_name", "session_id", "invocation_id")
        ),
        dialects.epoch_seconds(conn, table.column("ts"), table.storage).label("ts_s"),
        queries.event_field(conn, table, "author").label("author"),
        code.label("error_code"),
        message.label("error_message"),
    ).where(*event_conditions(context), sa.or_(code.is_not(None), message.is_not(None)))


def _utc(seconds: pd.Series) -> pd.Series:
    """Epoch seconds as UTC times to the microsecond."""
    micros = pd.to_numeric(seconds, errors="coerce").mul(1e6).round()
    return pd.to_datetime(micros, unit="us", utc=True).astype("datetime64[ns, UTC]")


def _statuses(context: EngineCardContext, invocations: list[str]) -> pd.DataFrame:
    """The ledger's runs of ``invocations`` (invocation id and status, in the loader's order)."""
    columns = ["invocation_id", "status"]
    if context.ledger is None or not invocations:
        return pd.DataFrame({c: pd.Series(dtype="str") for c in columns})
    from incidentkit.flows.engine_card import ledger_conditions
    from incidentkit.sources import sql

    conn, table = context.ledger.conn, context.ledger.table
    inv = table.column("invocation_id")
    rows = context.fetch(
        conn,
        sa.select(inv.label("invocation_id"), sa.func.upper(table.column("status")).label("status"))
        .where(*ledger_conditions(context), sql.in_values(conn, inv, "coded", invocations))
        .order_by(table.column("started_at"), table.column("run_id")),
    )
    return pd.DataFrame([tuple(r) for r in rows], columns=columns).astype("str")
