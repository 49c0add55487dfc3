"""What the runaway findings give a postmortem draft: the invocations that hit the model call
limit or looped, the runs and tokens they burned, and the limit as the alert (with the
recommended one, which would have stopped each loop sooner). Its findings carry no times.

Imported only when a draft is written (``flow.py`` names it); it is a
:class:`~incidentkit.flows.plugin.PostmortemModule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incidentkit.findings import Finding
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import Claim, count_claim, is_number, na, no_column
from incidentkit.postmortem.proof import cite, counter, item_ref
from incidentkit.postmortem.text import num
from incidentkit.postmortem.timeline import Moment

if TYPE_CHECKING:
    from incidentkit.flows.plugin import PostmortemModule
    from incidentkit.flows.runaway import postmortem

    _CONFORMS: PostmortemModule = postmortem

HIT_LIMIT = "runaway/hit-limit"


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The flagged invocations, their ledger runs, and the tokens they burned (and cost)."""
    s, claims = ff.findings.summary, {}
    flagged = [i for i in (HIT_LIMIT, "runaway/loops") if ff.item(i)]
    claims["invocations"] = Claim(
        f"{num(s.get('flagged', 0))} invocations hit the model call limit or looped, of "
        f"{num(s.get('invocations', 0))} in the window",
        (*(item_ref(ff, i) for i in flagged), counter(ff, "flagged")),
    )
    runs = count_claim(ff, [HIT_LIMIT], "run_id", "runs", " (the limit hits' ledger rows)")
    claims["runs"] = runs if runs.proof else no_column(ff, "run id")
    claims["sessions"] = no_column(ff, "session id")
    claims["users"] = no_column(ff, "user id")
    claims["duration"] = no_column(ff, "times")
    if "runaway_tokens" in s and s.get("tokens"):
        share = s["runaway_tokens"] / s["tokens"]
        costs = [float(c) for r in ff.rows("runaway/cost") if is_number(c := r.get("cost"))]
        cost = f"; cost {round(sum(costs), 2)}" if costs else ""
        claims["tokens"] = Claim(
            f"{num(s['runaway_tokens'])} by the flagged invocations, {share:.0%} of the app's "
            f"{num(s['tokens'])} in the window{cost}",
            (counter(ff, "runaway_tokens"), counter(ff, "tokens"), item_ref(ff, "runaway/cost")),
        )
    else:
        claims["tokens"] = na("the runaway findings count no tokens (no usage metadata)")
    return claims


def timeline(ff: FlowFindings) -> list[Moment]:
    """None: the findings carry counts only (``flow.py`` declares it: ``timed=False``)."""
    return []


def triggers(ff: FlowFindings) -> list[str]:
    """None beyond its items' roles."""
    return []


def detection(ff: FlowFindings) -> list[str]:
    """The limit that stopped the invocations, and the recommended one that would have stopped
    each loop sooner."""
    lines, s = [], ff.findings.summary
    hits = ff.rows(HIT_LIMIT)
    if hits:
        lines.append(
            f"- runaway: the limit (maxLlmCalls {num(hits[0].get('limit'))}) stopped "
            f"{len(hits)} invocation(s) after {num(hits[0].get('model_calls'))} model calls "
            f"{item_ref(ff, HIT_LIMIT).text()}"
        )
    if s.get("recommended_max_llm_calls"):
        lines.append(
            f"- runaway: maxLlmCalls {s['recommended_max_llm_calls']} (recommended from "
            "the healthy invocations) would have stopped each loop sooner, after "
            f"{s['recommended_max_llm_calls']} calls "
            + cite([counter(ff, "recommended_max_llm_calls"), item_ref(ff, "runaway/model-calls")])
        )
    return lines


def action_note(ff: FlowFindings, item: Finding) -> str:
    """Nothing: the items' actions say it all."""
    return ""
