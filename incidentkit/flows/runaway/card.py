"""The runaway flow's cheap check on the triage card: invocations at or over the model-call
limit; its engine twin counts model calls per invocation in the events' database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from incidentkit.baselines import queries
from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.runaway import limits
from incidentkit.flows.runaway.signatures import ping_pongs, repeated_calls, silent_loops
from incidentkit.flows.runaway.triage import triage_runaway
from incidentkit.frames import empty
from incidentkit.manifest import Filters

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "runaway"
EVIDENCE = "diagnostics log, spans, event log"


def card_lines(context: CardContext) -> list[CardLine]:
    """The over-call-limit line: CRITICAL for a limit hit, WARNING over the recommended limit."""
    report = triage_runaway(
        context.frames,
        as_of=context.as_of,
        max_llm_calls=context.profile.max_llm_calls,
        loop_exit_keys=context.profile.loop_exit_keys,
    )
    if report.source is None:
        return [not_checked("over-call-limit", FLOW, EVIDENCE, "no model call counted")]
    calls = report.counted["model_calls"]
    recommended = report.recommended
    over = int(calls.gt(recommended).sum()) if recommended is not None else 0
    limit = f"maxLlmCalls {report.configured} ({report.configured_from})"
    return [_line(len(report.hits), over, recommended, limit, report.source)]


def _line(hits: int, over: int, recommended: int | None, limit: str, source: str) -> CardLine:
    if hits:
        title = f"{hits} invocation(s) hit {limit}; {over} over the recommended {recommended}"
    elif over:
        title = f"{over} invocation(s) over the recommended {recommended} model calls ({limit})"
    else:
        title = f"model calls per invocation within the recommended {recommended} ({limit})"
    severity = "CRITICAL" if hits else ("WARNING" if over else "INFO")
    return card_line("over-call-limit", severity, hits + over, title, FLOW, source)


def engine_lines(context: EngineCardContext) -> list[CardLine]:
    """The over-call-limit line of every app, computed in the events' database: the histogram
    of model calls per invocation (``ended``; GROUP BY app), the invocations that stored a limit
    error with their counts, and those errors' code and message (the limit they name); the
    hits, the healthy p99 and the recommendation follow in Python from those few rows, as
    :func:`card_lines` has them. Loop signatures need every event of an invocation: a loop
    that hit no limit counts as healthy here (the detail says so)."""
    if context.events is None:
        return context.not_checked("over-call-limit", FLOW, EVIDENCE, context.events_missing())
    from incidentkit.flows.engine_card import event_conditions

    conn, table = context.events.conn, context.events.table
    inv = queries.per_invocation(conn, table, context.filters, times=False, apps=context.apps)
    c = inv.c
    keys = (c.app_name, c.model_calls, c.ended)
    histogram = context.fetch(
        conn,
        sa.select(*keys, sa.func.count().label("invocations"))
        .where(c.model_calls > 0, c.hit_limit == 0)
        .group_by(*keys),
    )
    refusing = context.fetch(
        conn, sa.select(c.app_name, c.invocation_id, c.model_calls, c.ended).where(c.hit_limit == 1)
    )
    flags = queries.event_flags(conn, table)
    stored = context.fetch(
        conn,
        sa.select(
            table.column("app_name").label("app_name"),
            table.column("invocation_id").label("invocation_id"),
            queries.event_field(conn, table, "error_code").label("error_code"),
            queries.event_field(conn, table, "error_message").label("error_message"),
        ).where(
            *event_conditions(context), flags["refused"], table.column("invocation_id").is_not(None)
        ),
    )
    counted = pd.DataFrame(
        [
            (r.app_name, None, int(r.model_calls), bool(r.ended), int(r.invocations))
            for r in histogram
        ]
        + [(r.app_name, r.invocation_id, int(r.model_calls), bool(r.ended), 1) for r in refusing],
        columns=["app_name", "invocation_id", "model_calls", "ended", "invocations"],
    )
    errors = pd.DataFrame(
        [tuple(r) for r in stored],
        columns=["app_name", "invocation_id", "error_code", "error_message"],
    ).astype({"error_code": "str", "error_message": "str"})
    exact = limits.names_limit_error(errors["error_code"]) | limits.names_limit_error(
        errors["error_message"]
    )
    errors = errors.loc[exact].assign(limit=limits.limit_texts(errors.loc[exact, "error_message"]))
    detail = context.computed("events") + (
        "; loop signatures looked for at the healthy p99 and above only"
    )
    lines: list[CardLine] = []
    for app in context.apps:
        mine = counted.loc[counted["app_name"].eq(app)]
        own = errors.loc[errors["app_name"].eq(app)]
        line = _app_line(context, app, _unlooped(context, app, mine, own, inv), own)
        keep = line["severity"] != "NOT_CHECKED"
        lines.append({**line, "detail": detail if keep else "", "app": app})
    return lines


LOOP_ROUNDS = 4
"""How many times the card reads the top invocations' events for loop signatures."""


def _unlooped(
    context: EngineCardContext,
    app: str,
    counted: pd.DataFrame,
    errors: pd.DataFrame,
    inv: sa.Subquery,
) -> pd.DataFrame:
    """``counted`` with the healthy invocations at or above the healthy p99 that show a loop
    signature marked ``looped`` (taken out of the healthy p99, as in memory): the events of
    those few invocations are read through the loader and the runaway flow's signatures run
    on them; the p99 is computed again until no new loop shows (at most
    :data:`LOOP_ROUNDS` times). When leaving all of them out would recommend the same limit
    (the recommendation is a step: ``nice_ceiling``), none is read."""
    counted = counted.assign(looped=False)
    seen: set[str] = set()
    assert context.events is not None
    conn = context.events.conn
    profile = context.profile(app)
    for _ in range(LOOP_ROUNDS):
        p99 = _healthy_p99(context, app, counted, errors)
        if p99 is None:
            break
        below = _healthy_p99(context, app, counted, errors, under=p99)
        if below is not None and _recommended(below) == _recommended(p99):
            break  # no loop at the top can move the recommendation
        c = inv.c
        rows = context.fetch(
            conn,
            sa.select(c.invocation_id, c.model_calls, c.ended, c.hit_limit).where(
                c.app_name == app, c.model_calls >= p99, c.ended == 1
            ),
        )
        ids = sorted({r.invocation_id for r in rows} - seen)
        if not ids:
            break
        seen.update(ids)
        loaded = context.load(
            "events",
            _ids_filters(context, ids),
        )
        events, calls = loaded.get("events", empty("events")), loaded.get("calls", empty("calls"))
        looped = (
            set(ping_pongs(events)["invocation_id"])
            | set(
                repeated_calls(calls, loaded.get("responses", empty("responses")))["invocation_id"]
            )
            | set(
                silent_loops(
                    events,
                    loaded.get("state_writes", empty("state_writes")),
                    exit_keys=profile.loop_exit_keys,
                )["invocation_id"]
            )
        )
        if not looped:
            break
        looped_rows = [r for r in rows if r.invocation_id in looped]
        counted = _marked_looped(counted, app, looped_rows)
        counted = counted.loc[counted["invocations"].gt(0)]
    return counted


def _marked_looped(counted: pd.DataFrame, app: str, rows: list[Any]) -> pd.DataFrame:
    """``counted`` with each looped invocation of ``rows`` marked: its own row, else taken
    out of its bucket and added as a row of its own."""
    counted = counted.copy()
    added = []
    for row in rows:
        own = counted["invocation_id"].eq(str(row.invocation_id))
        if own.any():
            counted.loc[own, "looped"] = True
            continue
        calls, ended = int(row.model_calls), bool(row.ended)
        bucket = (
            counted["invocation_id"].isna()
            & counted["model_calls"].eq(calls)
            & counted["ended"].eq(ended)
        )
        counted.loc[bucket, "invocations"] -= 1
        added.append((app, str(row.invocation_id), calls, ended, 1, True))
    more = pd.DataFrame(added, columns=list(counted.columns))
    return pd.concat([counted, more], ignore_index=True) if added else counted


def _ids_filters(context: EngineCardContext, ids: list[str]) -> Filters:
    return Filters(window=context.filters.window, invocation_ids=tuple(ids))


def _recommended(p99: float) -> int:
    return limits.nice_ceiling(3 * p99)


def _healthy_p99(
    context: EngineCardContext,
    app: str,
    counted: pd.DataFrame,
    errors: pd.DataFrame,
    *,
    under: float | None = None,
) -> float | None:
    """The healthy p99 of ``counted`` (of the counts below ``under`` when given; None
    without a healthy invocation)."""
    found = _expanded(context, app, counted, errors)
    if found is None:
        return None
    calls, ended, hit, looped, _, _ = found
    healthy = calls[~hit & ~looped & ended]
    if under is not None:
        healthy = healthy[healthy < under]
    return float(np.quantile(healthy, 0.99)) if len(healthy) else None


def _expanded(
    context: EngineCardContext, app: str, counted: pd.DataFrame, errors: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, str] | None:
    """Per counted invocation (buckets expanded): model calls, ended, hit, looped; the
    configured limit and its origin. None when nothing is counted."""
    counted = counted.loc[counted["model_calls"].gt(0)]
    if counted.empty:
        return None
    limit, origin = limits.configured_limit(context.profile(app).max_llm_calls, errors)
    weights = counted["invocations"].to_numpy(dtype=np.int64)
    calls = np.repeat(counted["model_calls"].to_numpy(dtype=np.int64), weights)
    ended = np.repeat(counted["ended"].to_numpy(dtype=bool), weights)
    ids = np.repeat(counted["invocation_id"].to_numpy(dtype=object), weights)
    looped = np.repeat(counted["looped"].to_numpy(dtype=bool), weights)
    refused = limits.refused(pd.Series(calls), pd.Series(ended), limit).to_numpy(dtype=bool)
    stored = pd.Series(ids).isin(set(errors["invocation_id"])).to_numpy(dtype=bool)
    return calls, ended, refused | stored, looped, limit, origin


def _app_line(
    context: EngineCardContext, app: str, counted: pd.DataFrame, errors: pd.DataFrame
) -> CardLine:
    """One app's line from its histogram rows (``invocation_id`` None: a bucket of
    ``invocations``; ``looped`` marked) and its stored limit errors."""
    found = _expanded(context, app, counted, errors)
    if found is None:  # no source counts a model call (a stored error alone names no count)
        return not_checked("over-call-limit", FLOW, EVIDENCE, "no model call counted")
    calls, ended, hit, looped, limit, origin = found
    stored = set(errors["invocation_id"]) - set(
        counted.loc[counted["model_calls"].gt(0), "invocation_id"].dropna()
    )
    hits = int(hit.sum()) + len(stored)
    _, recommended = limits.recommend(pd.Series(calls[~hit & ~looped & ended]))
    over = int((calls > recommended).sum()) if recommended is not None else 0
    return _line(hits, over, recommended, f"maxLlmCalls {limit} ({origin})", "events")
