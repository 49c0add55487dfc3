"""The runaway flow's cheap check on the triage card: invocations at or over the model-call
limit."""

from __future__ import annotations

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.runaway.triage import triage_runaway

FLOW = "runaway"


def card_lines(context: CardContext) -> list[CardLine]:
    """The over-call-limit line: CRITICAL for a limit hit, WARNING over the recommended limit."""
    report = triage_runaway(
        context.frames,
        as_of=context.as_of,
        max_llm_calls=context.profile.max_llm_calls,
        loop_exit_keys=context.profile.loop_exit_keys,
    )
    if report.source is None:
        evidence = "diagnostics log, spans, event log"
        return [not_checked("over-call-limit", FLOW, evidence, "no model call counted")]
    hits, recommended = len(report.hits), report.recommended
    calls = report.counted["model_calls"]
    over = int(calls.gt(recommended).sum()) if recommended is not None else 0
    limit = f"maxLlmCalls {report.configured} ({report.configured_from})"
    if hits:
        title = f"{hits} invocation(s) hit {limit}; {over} over the recommended {recommended}"
    elif over:
        title = f"{over} invocation(s) over the recommended {recommended} model calls ({limit})"
    else:
        title = f"model calls per invocation within the recommended {recommended} ({limit})"
    severity = "CRITICAL" if hits else ("WARNING" if over else "INFO")
    return [card_line("over-call-limit", severity, hits + over, title, FLOW, report.source)]
