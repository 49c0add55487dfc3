"""The session flow's cheap check on the triage card: errors that vanish."""

from __future__ import annotations

from incidentkit.flows.card_lines import CardContext, CardLine, card_line
from incidentkit.flows.runaway.limits import names_limit_error
from incidentkit.flows.session.errors import EVENT_KIND, quiet, vanishing_errors

FLOW = "session"


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
        "event log, diagnostics log",
        session_id=str(sessions.iloc[0]) if len(sessions) else None,
    )
    return [line]
