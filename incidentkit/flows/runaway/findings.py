"""The runaway flow's findings: the distribution and the limit it should have, the invocations
that hit it, the loops that burned the calls, and what they cost.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Unpack

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, FindingsContext, Severity, rows_of
from incidentkit.flows._text import join_text, json_text
from incidentkit.flows.runaway.limits import DEFAULT_FROM
from incidentkit.flows.runaway.signatures import Signature
from incidentkit.flows.runaway.triage import RunawayReport

FLOW = "runaway"
MODEL_CALLS_ROW = [
    *("invocations", "p50", "p95", "p99", "max", "healthy_p99"),
    *("recommended_max_llm_calls", "configured_max_llm_calls", "source", "sources_agree"),
]
HIT_ROW = ["invocation_id", "run_id", "model_calls", "limit", "evidence"]
LOOP_ROW = [
    *("invocation_id", "kind", "agents", "tool", "args", "repeats", "error_string"),
    *("iterations", "model_calls", "hit_limit"),
]
COST_ROW = ["invocation_id", "tokens", "share", "cost"]
COMPACTION_ROW = [
    *("session_id", "compactions", "prompt_tokens", "output_tokens", "total_tokens"),
    *("events_covered", "first", "last"),
]
FIXES = {
    Signature.TRANSFER_PING_PONG: "Ping-pong: make the two agents' descriptions disjoint (one "
    "owns the task), so the model stops handing it back.",
    Signature.REPEATED_IDENTICAL_CALL: "Repeat: return a terminal error the model cannot retry "
    "(no 'try again later'), or retry inside the tool with a budget.",
    Signature.LOOP_AGENT_EXIT_NEVER_WRITTEN: "Loop: have a sub-agent write the exit key (or "
    "escalate), and give the LoopAgent max_iterations.",
}
"""The fix of each loop signature; an action names only the kinds found."""
CAVEAT = (
    "Give a long-running agent (a batch job, a research agent) its own RunConfig with a higher "
    "limit instead of raising the global one."
)


SHOWN_LOOPS = 3
"""Signatures a title names; the rest are counted."""


def _number(value: float) -> str:
    """A count or percentile as people read it: ``9``, ``6.8``, ``176``."""
    if pd.isna(value):
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def loop_text(row: Mapping[Hashable, Any]) -> str:
    """One signature in words: which agents, which tool with which arguments, which loop."""
    kind = row["kind"]
    calls = "" if pd.isna(row["model_calls"]) else f", {row['model_calls']} model calls"
    if kind == Signature.TRANSFER_PING_PONG:
        return (
            f"{join_text(row['agents'])} transfer back and forth ({row['transfers']} transfers"
            f"{calls})"
        )
    if kind == Signature.REPEATED_IDENTICAL_CALL:
        answer = (
            f", answered {json_text(row['error_string'])}" if pd.notna(row["error_string"]) else ""
        )
        who = join_text(row["agents"]) if isinstance(row["agents"], tuple | list) else "an agent"
        return (
            f"{who} called {row['tool']}({_args(row['args'])}) {row['repeats']} times{answer}"
            f"{calls}"
        )
    agent = row["loop_agent"] if pd.notna(row["loop_agent"]) else "a loop agent"
    key = (
        f"its exit key {row['exit_key']} is written by nobody"
        if pd.notna(row["exit_key"])
        else "no sub-agent escalates (exit key unknown)"
    )
    return (
        f"{agent} ran {join_text(row['agents'])} for {row['iterations']} iterations: {key}{calls}"
    )


def _args(args: object) -> str:
    if isinstance(args, Mapping):
        return ", ".join(f"{k}={json_text(v)}" for k, v in args.items())
    return "" if args is None else str(args)


def _limit_step(report: RunawayReport) -> str:
    """What to do with the limit: lower it to the recommendation, or keep it."""
    recommended = report.recommended
    if recommended is None:
        return "Count a healthy baseline before changing the limit (no healthy invocation)."
    if recommended < report.configured:
        return (
            f"Set RunConfig maxLlmCalls to {recommended} (3 x the healthy p99 "
            f"{_number(report.healthy_p99)}): the next loop then stops after {recommended} calls "
            f"instead of {report.configured}."
        )
    return f"Keep maxLlmCalls {report.configured}: it is at or below the recommended {recommended}."


def _model_calls(report: RunawayReport) -> Finding:
    row = report.model_calls.iloc[0]
    recommended = report.recommended
    wanted = (
        f"{recommended} recommended"
        if recommended is not None
        else "no recommendation (no healthy invocation counted)"
    )
    far = report.far_above
    if report.configured_from == DEFAULT_FROM and recommended is not None:
        action = (
            f"Check the app's RunConfig: unless it sets maxLlmCalls, ADK stops a loop only at "
            f"{report.configured} calls. Set it to {recommended} and record it as max_llm_calls "
            f"in the app's profile. {CAVEAT}"
        )
    elif far:
        action = f"{_limit_step(report)} {CAVEAT}"
    else:
        action = f"None for the limit. {CAVEAT}"
    source = row["source"] if pd.notna(row["source"]) else "no source"
    return Finding(
        f"{FLOW}/model-calls",
        Severity.WARNING if far else Severity.INFO,
        f"model calls per invocation: healthy p99 {_number(report.healthy_p99)}, p50 "
        f"{_number(row['p50'])}, max {_number(row['max'])}; maxLlmCalls {report.configured} "
        f"({report.configured_from}), {wanted}",
        f"Over {row['invocations']} invocations of {report.baseline}, counted by {source} "
        f"(p95 {_number(row['p95'])}, p99 {_number(row['p99'])} with the runaway ones). The "
        "healthy p99 leaves out the invocations that hit the limit or carry a loop signature; "
        "a healthy turn makes a handful of calls, so a limit far above it is a backstop, not a "
        "budget.",
        action,
        rows_of(report.model_calls, MODEL_CALLS_ROW),
    )


SHOWN_HITS = 3
"""Invocations a title names; the rest are counted."""


def _hits(report: RunawayReport, limit: int | None) -> Finding | None:
    hits = report.hits
    if hits.empty:
        return None
    kinds = report.loops.groupby("invocation_id", sort=False)["kind"].agg(", ".join)
    named = [
        f"{inv} ({kinds.get(inv, 'no loop signature')})"
        for inv in hits["invocation_id"].head(SHOWN_HITS)
    ]
    more = f" and {len(hits) - SHOWN_HITS} more" if len(hits) > SHOWN_HITS else ""
    return Finding(
        f"{FLOW}/hit-limit",
        Severity.CRITICAL,
        f"{len(hits)} invocation(s) hit maxLlmCalls {report.configured}: "
        + ", ".join(named)
        + more,
        "ADK stopped them with LlmCallsLimitExceeded after every call up to the limit had been "
        "made and paid for. ADK Python stores an error event; ADK Java stores none, so the "
        "plugin's run.error lines, the spans' error status and the count (above the limit, or "
        "at it with no end stored) are the evidence. Exactly the limit's calls and an end is no "
        "hit: ADK refuses only a call that would exceed the limit.",
        "Fix the loop each one carries (below), then "
        + (
            f"set RunConfig maxLlmCalls to {report.recommended} (see the model calls)."
            if report.recommended is not None and report.recommended < report.configured
            else "keep the limit: it is at or below the recommendation."
        ),
        rows_of(hits, HIT_ROW, limit=limit),
        len(hits),
    )


def _loops(report: RunawayReport, limit: int | None) -> Finding | None:
    loops = report.loops
    if loops.empty:
        return None
    worst = loops.sort_values("model_calls", ascending=False, na_position="last", kind="stable")
    named = [loop_text(row) for row in worst.head(SHOWN_LOOPS).to_dict("records")]
    more = f"; and {len(loops) - SHOWN_LOOPS} more" if len(loops) > SHOWN_LOOPS else ""
    return Finding(
        f"{FLOW}/loops",
        Severity.CRITICAL,
        f"{len(loops)} loop(s) in {loops['invocation_id'].nunique()} invocation(s): "
        + "; ".join(named)
        + more,
        "transfer_ping_pong: two agents whose descriptions claim the same task hand the "
        "conversation back and forth; repeated_identical_call: a tool answers with an error or "
        "a retry hint and the model obliges with the same arguments; "
        "loop_agent_exit_never_written: a loop agent's exit depends on state no sub-agent "
        "writes.",
        " ".join(FIXES[kind] for kind in Signature if kind in set(loops["kind"])),
        rows_of(loops, LOOP_ROW, limit=limit),
        len(loops),
    )


def _cost(report: RunawayReport, limit: int | None) -> Finding | None:
    cost = report.cost
    if cost.empty:
        return None
    tokens = int(cost["tokens"].fillna(0).sum())
    share = tokens / report.total_tokens if report.total_tokens else float("nan")
    money = (
        f", {cost['cost'].sum():.2f} at {report.price_per_1k_tokens:g} per 1k tokens"
        if report.price_per_1k_tokens is not None
        else ""
    )
    capped = "None beyond the fixes above: a loop stopped sooner re-sends less history, too."
    return Finding(
        f"{FLOW}/cost",
        Severity.WARNING,
        f"the runaway invocations spent {tokens:,} tokens, {share:.0%} of the app's "
        f"{report.total_tokens:,}{money}",
        "Tokens from the usage metadata of each model call (events, else spans); compaction's "
        "summary calls are apart (runaway/compaction-cost). History is re-sent on every call, "
        "so a loop's prompt grows with each turn: its cost grows faster than its call count.",
        capped,
        rows_of(cost, COST_ROW, limit=limit),
        len(cost),
    )


def _compactions(report: RunawayReport, limit: int | None) -> Finding | None:
    compactions = report.compactions
    if compactions.empty:
        return None
    priced = report.price_per_1k_tokens is not None
    money = (
        f", {compactions['cost'].sum():.2f} at {report.price_per_1k_tokens:g} per 1k tokens"
        if priced
        else ""
    )
    return Finding(
        f"{FLOW}/compaction-cost",
        Severity.INFO,
        f"{int(compactions['compactions'].sum())} compaction(s) in {len(compactions)} "
        f"session(s) spent {report.compaction_tokens:,} tokens{money}, apart from the "
        "invocations",
        "ADK's compaction calls the model directly to summarise earlier events: no agent's "
        "model call, so it never counts against maxLlmCalls and belongs to no invocation, but "
        "its tokens are billed. They are counted here from the usage ADK stores on each "
        "compaction event, and left out of the invocations' tokens, the runaway share and the "
        "app's total.",
        "None: compaction is a feature, not a fault. If it costs more than it saves, raise "
        "the compaction interval or set a cheaper summariser model.",
        rows_of(compactions, [*COMPACTION_ROW, *(["cost"] if priced else [])], limit=limit),
        len(compactions),
    )


def _no_source(report: RunawayReport) -> Finding | None:
    if report.source is not None:
        return None
    return Finding(
        f"{FLOW}/no-model-calls",
        Severity.WARNING,
        "no source counts a model call of this app",
        " ".join(report.notes),
        "Add the diagnostics log (run.end llmCalls), the event log or the spans to the "
        "manifest, and check its window and app_name.",
    )


def _disagreements(report: RunawayReport, limit: int | None) -> Finding | None:
    differ = report.disagreements
    if differ.empty:
        return None
    return Finding(
        f"{FLOW}/source-disagreements",
        Severity.INFO,
        f"{len(differ)} invocation(s) counted differently by two sources",
        "Final counts only: a model call that failed leaves a span and maybe no event; "
        "a tail sampler that kept only part of a long trace leaves fewer call_llm spans.",
        "None: the counts above come from the best source; check a row before trusting "
        "the other source for it.",
        rows_of(differ, None, limit=limit),
        len(differ),
    )


def runaway_findings(report: RunawayReport, **context: Unpack[FindingsContext]) -> Findings:
    """The findings of the runaway flow, from :func:`.triage.triage_runaway`, with ``context``
    (:class:`~incidentkit.findings.FindingsContext`).

    Verdict: INCOMPLETE_EVIDENCE when ``rejects`` (unread rows of the flow's sources) is not
    empty or no source counts a model call; else ACTION_NEEDED when an invocation hit the
    limit or looped, or the configured limit is far above the recommendation; else CLEAN.
    """
    limit = context.get("row_limit", ROW_LIMIT)
    items = (
        _no_source(report),
        _hits(report, limit),  # which invocations ran away, and why
        _loops(report, limit),
        _model_calls(report),  # what the limit is and what it should be
        _cost(report, limit),  # what the loops cost
        _compactions(report, limit),  # what compaction cost, apart
        _disagreements(report, limit),
    )
    rejects = context.get("rejects")
    summary = {
        "invocations": len(report.counted),
        "flagged": len(report.flagged),
        "hit_limit": len(report.hits),
        "loops": len(report.loops),
        "tokens": report.total_tokens,
        "runaway_tokens": int(report.cost["tokens"].fillna(0).sum()),
        "compaction_tokens": report.compaction_tokens,
        "source_disagreements": len(report.disagreements),
        "rejects": 0 if rejects is None else len(rejects),
    }
    if report.configured_from != DEFAULT_FROM:  # known, not ADK's default assumed
        summary["configured_max_llm_calls"] = report.configured
    if report.recommended is not None:
        summary["recommended_max_llm_calls"] = report.recommended
    return Findings.build(
        FLOW, items, summary, incomplete=report.source is None, as_of=report.as_of, **context
    )
