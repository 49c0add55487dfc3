"""The runaway flow's cheap check on the triage card: invocations at or over the model-call
limit; its engine twin counts model calls per invocation in the events' database."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from incidentkit.baselines import analytics, queries
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
    """The over-call-limit line of every app, computed in the events' database: in one pass
    over the events, the histogram of model calls per invocation (``ended``; GROUP BY app)
    and, as buckets of their own, the invocations that stored a limit error with their
    counts; then those errors' code and message (the limit they name); the
    hits, the healthy p99 and the recommendation follow in Python from those few rows, as
    :func:`card_lines` has them; loop signatures are looked for among the invocations with
    the most model calls (:func:`_unlooped`, the detail says where). Over the Agent Analytics
    table the counts are its finished ``LLM_RESPONSE`` rows (``analytics.per_invocation``)."""
    if context.events is None:
        return context.not_checked("over-call-limit", FLOW, EVIDENCE, context.events_missing())
    conn = context.events.conn
    inv, limit_errors = _counted_in(context)
    c = inv.c
    # one pass: the histogram's buckets (no id) and each invocation that stored a limit
    # error (its id, a bucket of its own)
    refusing = sa.case((c.hit_limit == 1, c.invocation_id)).label("invocation_id")
    keys = (c.app_name, refusing, c.model_calls, c.ended)
    histogram = context.fetch(
        conn,
        sa.select(*keys, sa.func.count().label("invocations"))
        .where(sa.or_(c.model_calls > 0, c.hit_limit == 1))
        .group_by(*keys),
    )
    stored = context.fetch(conn, limit_errors)
    counted = pd.DataFrame(
        [
            (r.app_name, r.invocation_id, int(r.model_calls), bool(r.ended), int(r.invocations))
            for r in histogram
        ],
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
    lines: list[CardLine] = []
    for app in context.apps:
        mine = counted.loc[counted["app_name"].eq(app)]
        own = errors.loc[errors["app_name"].eq(app)]
        unlooped, looked = _unlooped(context, app, mine, own, inv)
        line = _app_line(context, app, unlooped, own)
        keep = line["severity"] != "NOT_CHECKED"
        detail = f"{context.computed('events')}; {looked}" if keep else ""
        lines.append({**line, "detail": detail, "app": app})
    return lines


def _counted_in(context: EngineCardContext) -> tuple[sa.Subquery, sa.Select[Any]]:
    """Per invocation (``queries.per_invocation``, or ``analytics.per_invocation`` over the
    Agent Analytics table), and the statement of the stored limit errors: ``app_name``,
    ``invocation_id``, ``error_code``, ``error_message``."""
    from incidentkit.flows.engine_card import event_conditions

    assert context.events is not None
    conn, found = context.events.conn, context.events.analytics
    if found is not None:
        inv = analytics.per_invocation(conn, found, context.filters, context.apps)
        errors = analytics.error_events(conn, found, context.filters, context.apps).subquery()
        e = errors.c
        return inv, sa.select(e.app_name, e.invocation_id, e.error_code, e.error_message).where(
            e.refused == 1, e.invocation_id.is_not(None)
        )
    table = context.events.table
    inv = queries.per_invocation(conn, table, context.filters, times=False, apps=context.apps)
    flags = queries.event_flags(conn, table)
    return inv, sa.select(
        table.column("app_name").label("app_name"),
        table.column("invocation_id").label("invocation_id"),
        queries.event_field(conn, table, "error_code").label("error_code"),
        queries.event_field(conn, table, "error_message").label("error_message"),
    ).where(
        *event_conditions(context), flags["refused"], table.column("invocation_id").is_not(None)
    )


LOOP_ROUNDS = 4
"""How many times the card reads the top invocations' events for loop signatures."""
LOOP_INVOCATIONS = 2_000
"""At most this many invocations' events are read for loop signatures per app (over every
round), the most model calls first: healthy traffic whose counts take few values puts a
ninth of a fleet at its p99 count."""
LOOP_MODEL_CALLS = 100_000
"""At most this many model calls (a few events each) of those invocations are read per app;
the invocation with the most is read even when it alone makes more."""
LOOKED_AT_P99 = "loop signatures looked for at the healthy p99 and above only"


def _unlooped(
    context: EngineCardContext,
    app: str,
    counted: pd.DataFrame,
    errors: pd.DataFrame,
    inv: sa.Subquery,
) -> tuple[pd.DataFrame, str]:
    """``counted`` with the healthy invocations at or above the healthy p99 that show a loop
    signature marked ``looped`` (taken out of the healthy p99, as in memory), and what was
    looked at (the line's detail). The events of those invocations are read through the
    loader, the most model calls first and at most :data:`LOOP_INVOCATIONS` and
    :data:`LOOP_MODEL_CALLS` of them, and the runaway flow's signatures run on them; the p99
    is computed again until no new loop shows (at most :data:`LOOP_ROUNDS` times). When
    leaving all of them out would recommend the same limit (the recommendation is a step:
    ``nice_ceiling``), none is read."""
    counted = counted.assign(looped=False)
    seen: dict[str, int] = {}  # invocation read → its model calls
    budget = _Budget()
    assert context.events is not None
    conn = context.events.conn
    profile = context.profile(app)
    limit, _ = limits.configured_limit(profile.max_llm_calls, errors)
    unread: pd.Series | None = None  # candidates left unread at the last p99: count → how many
    for _ in range(LOOP_ROUNDS):
        p99 = _healthy_p99(context, app, counted, errors)
        if p99 is None:
            break
        below = _healthy_p99(context, app, counted, errors, under=p99)
        if below is not None and _recommended(below) == _recommended(p99):
            unread = None  # no loop at the top can move the recommendation
            break
        c = inv.c
        # candidates in one total order (most calls first, then id): a later round's p99 is
        # no higher, so the invocations read before are a prefix of its candidates
        rows = context.fetch(
            conn,
            sa.select(c.invocation_id, c.model_calls, c.ended)
            .where(
                c.app_name == app,
                c.model_calls >= p99,
                c.model_calls <= limit,  # above the limit: a hit, loop or not
                c.ended == 1,
                c.hit_limit == 0,
            )
            .order_by(c.model_calls.desc(), c.invocation_id)
            .limit(LOOP_INVOCATIONS),
        )
        fresh = [r for r in rows if str(r.invocation_id) not in seen]
        chosen = budget.take([int(r.model_calls) for r in fresh])
        ids = [str(r.invocation_id) for r in fresh[:chosen]]
        seen.update((str(r.invocation_id), int(r.model_calls)) for r in fresh[:chosen])
        unread = _unread(counted, seen, p99, limit)
        if not ids:
            break
        loaded = context.load("events", _ids_filters(context, sorted(ids)))
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
        looped_rows = [r for r in fresh[:chosen] if r.invocation_id in looped]
        counted = _marked_looped(counted, app, looped_rows)
        counted = counted.loc[counted["invocations"].gt(0)]
        unread = _unread(counted, seen, p99, limit)
    return counted, _looked(len(seen), unread)


@dataclass
class _Budget:
    """What is left of :data:`LOOP_INVOCATIONS` and :data:`LOOP_MODEL_CALLS` for one app."""

    invocations: int = field(default_factory=lambda: LOOP_INVOCATIONS)
    model_calls: int = field(default_factory=lambda: LOOP_MODEL_CALLS)
    first: bool = True

    def take(self, counts: list[int]) -> int:
        """How many of ``counts`` (most first) fit what is left; spent."""
        taken = 0
        for calls in counts:
            if taken >= self.invocations or (calls > self.model_calls and not self.first):
                break
            self.first = False
            taken += 1
            self.model_calls -= calls
        self.invocations -= taken
        return taken


def _unread(counted: pd.DataFrame, seen: Mapping[str, int], p99: float, limit: int) -> pd.Series:
    """The candidates at ``p99`` and above that were not read, per model-call count: the
    histogram's ended buckets (no limit error) less the invocations read that stayed in them."""
    buckets = counted.loc[
        counted["invocation_id"].isna()
        & counted["ended"]
        & counted["model_calls"].ge(p99)
        & counted["model_calls"].le(limit)
    ]
    there = buckets.groupby("model_calls")["invocations"].sum()
    own = set(counted["invocation_id"].dropna())  # a looped one left its bucket
    read = pd.Series([n for i, n in seen.items() if i not in own], dtype="int64").value_counts()
    left = there.sub(read.reindex(there.index, fill_value=0))
    return left.loc[left.gt(0)].sort_index(ascending=False)


def _looked(read: int, unread: pd.Series | None) -> str:
    """The line's word on the loop search: where it looked, and what it left unread."""
    if unread is None or unread.empty:
        return LOOKED_AT_P99
    counts = [int(k) for k in unread.index]
    at = str(counts[0]) if len(counts) == 1 else f"{counts[-1]} to {counts[0]}"
    return (
        f"loop signatures looked for in the {read} invocations with the most model calls; "
        f"{int(unread.sum())} more at {at} call{'' if at == '1' else 's'} were not read"
    )


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
