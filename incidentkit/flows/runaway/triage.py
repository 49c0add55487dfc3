"""The runaway flow's pure core: model calls per invocation from every source, the
invocations that hit ``maxLlmCalls`` or loop, a limit set from the healthy ones, and what the
loops cost.

:func:`triage_runaway` takes frames, never reads evidence, and returns a
:class:`RunawayReport`; the notebook's steps (:mod:`.steps`) give it one incident's frames,
and a longer baseline's when the distribution is to come from more traffic than the incident
window holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, choose, empty_view, per_group
from incidentkit.flows._markers import is_marker, without_marker_invocations
from incidentkit.flows._text import text
from incidentkit.flows.common import Frames
from incidentkit.flows.runaway import counts, limits
from incidentkit.flows.runaway.compaction import compaction_cost
from incidentkit.flows.runaway.signatures import (
    MIN_REPEATS,
    Signature,
    ping_pongs,
    repeated_calls,
    silent_loops,
)
from incidentkit.frames import BOOL, FLOAT, INT, NINT, OBJ, STR, TS, SpanKind

FAR_ABOVE = 3
"""A configured limit this many times the recommendation or more is far above it."""
FEW = 100
"""Healthy invocations below which a p99 is little more than their maximum."""


COUNTED_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "run_id": STR,
    "model_calls": INT,
    "ended": BOOL,
    "source": STR,
    "hit_limit": BOOL,
    "looped": BOOL,
}
"""One row per invocation: its model calls from the best source that counts it."""


def counts_by_source(frames: Frames) -> dict[str, pd.DataFrame]:
    """The model-call counts of every source present, best first. Spans carry no app name:
    they are kept to the invocations another source places in the app. A marker's own
    invocation id (a compaction's, a rewind's) is no invocation of any source."""
    out = {
        "diagnostics": counts.from_diagnostics(frames.diagnostics),
        "events": counts.from_events(frames.events, frames.responses),
    }
    known = pd.concat([frame["invocation_id"] for frame in out.values()])
    spans = counts.from_spans(frames.spans, frames.events)
    out["spans"] = spans.loc[spans["invocation_id"].isin(known)] if len(known) else spans
    out = {name: without_marker_invocations(out[name], frames.events) for name in out}
    return {name: out[name] for name in counts.COUNT_SOURCES if len(out[name])}


def combined(by_source: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per invocation, the count of the best source whose count is final; an invocation no
    source counts finally gets the highest lower bound (``ended`` false)."""
    if not by_source:
        return pd.DataFrame(
            {"invocation_id": [], "model_calls": [], "ended": [], "source": []}
        ).astype({"invocation_id": STR, "model_calls": INT, "ended": BOOL, "source": STR})
    every = pd.concat(
        [frame.assign(source=name, rank=k) for k, (name, frame) in enumerate(by_source.items())],
        ignore_index=True,
    )
    final = every.loc[every["ended"]].sort_values("rank", kind="stable")
    best = final.drop_duplicates("invocation_id")
    bound = every.loc[~every["invocation_id"].isin(best["invocation_id"])]
    bound = bound.sort_values(["model_calls", "rank"], ascending=[False, True], kind="stable")
    out = pd.concat([best, bound.drop_duplicates("invocation_id")], ignore_index=True)
    return out.drop(columns="rank").sort_values("invocation_id", kind="stable")


MODEL_CALLS_COLUMNS: Mapping[str, str] = {
    "invocations": INT,
    "p50": FLOAT,
    "p95": FLOAT,
    "p99": FLOAT,
    "max": NINT,
    "healthy_p99": FLOAT,
    "recommended_max_llm_calls": NINT,
    "configured_max_llm_calls": INT,
    "source": STR,
    "sources_agree": BOOL,
}
"""The distribution's one row (``runaway/model-calls``)."""

LOOP_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "kind": STR,
    "agents": OBJ,
    "tool": STR,
    "args": OBJ,
    "repeats": NINT,
    "error_string": STR,
    "iterations": NINT,
    "model_calls": NINT,
    "hit_limit": BOOL,
    "loop_agent": STR,
    "exit_key": STR,
    "keys_written": OBJ,
    "transfers": NINT,
    "proof_ids": OBJ,
}
"""One row per signature; ``agents`` is the two agents of a ping-pong, a loop's sub-agents, or
the agent that repeats a call; ``proof_ids`` the events (transfers, loop turns) or calls
(repeats) that show it."""

HIT_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "run_id": STR,
    "model_calls": NINT,
    "limit": NINT,
    "evidence": STR,
}
COST_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "kind": STR,
    "model_calls": NINT,
    "tokens": NINT,
    "share": FLOAT,
    "cost": FLOAT,
    "tokens_source": STR,
}
MARKER_STEPS: Mapping[str, str] = {
    "compaction": "summary of earlier events (the summariser's call: no model call here)",
    "rewind": "rewind (ADK's bookkeeping: no model call)",
    "checkpoint": "end of agent / agent state (ADK's bookkeeping: no model call)",
}
"""What a marker's step says (``what``)."""
STEP_COLUMNS: Mapping[str, str] = {
    "ts": TS,
    "author": STR,
    "step": STR,
    "what": STR,
    "model_call": NINT,
    "prompt_tokens": NINT,
    "output_tokens": NINT,
    "total_tokens": NINT,
}
"""The worst invocation, event by event: who acted, how (``model``, ``tool``, ``transfer``,
``error``, or a marker's kind: ``checkpoint``, ``compaction``, ``rewind``), and for each model
call its number and tokens (history is re-sent: prompts grow)."""


@dataclass(frozen=True)
class RunawayReport:
    """What the flow found, as frames (each documented by its ``*_COLUMNS`` contract)."""

    as_of: pd.Timestamp
    baseline: str
    """Where the distribution comes from: ``"the incident window"`` or the baseline's span."""
    counted: pd.DataFrame
    """Every invocation of the window with its count and flags (:data:`COUNTED_COLUMNS`)."""
    baseline_counted: pd.DataFrame
    """The same over the baseline (the window's own rows when no baseline is given)."""
    model_calls: pd.DataFrame
    configured: int
    configured_from: str
    sources: tuple[str, ...]
    disagreements: pd.DataFrame
    hits: pd.DataFrame
    loops: pd.DataFrame
    cost: pd.DataFrame
    total_tokens: int
    """The tokens of every invocation's model calls (compaction apart: :attr:`compactions`)."""
    price_per_1k_tokens: float | None
    worst: str | None
    """The invocation the sequence shows: the flagged one with most model calls."""
    sequence: pd.DataFrame
    """The worst invocation's events in order, one row each (:data:`STEP_COLUMNS`)."""
    compactions: pd.DataFrame
    """The summariser's tokens per session (:data:`.compaction.COMPACTION_COLUMNS`)."""
    min_repeats: int = MIN_REPEATS
    notes: tuple[str, ...] = ()

    @property
    def compaction_tokens(self) -> int:
        """The tokens every compaction's summary call spent (none counted: 0)."""
        return int(self.compactions["total_tokens"].fillna(0).sum())

    @property
    def recommended(self) -> int | None:
        value = self.model_calls["recommended_max_llm_calls"].iloc[0]
        return None if pd.isna(value) else int(value)

    @property
    def healthy_p99(self) -> float:
        return float(self.model_calls["healthy_p99"].iloc[0])

    @property
    def source(self) -> str | None:
        value = self.model_calls["source"].iloc[0]
        return None if pd.isna(value) else str(value)

    @property
    def far_above(self) -> bool:
        """Whether a configured limit (not ADK's default assumed) is far above the
        recommendation."""
        known = self.configured_from != limits.DEFAULT_FROM
        recommended = self.recommended
        return known and recommended is not None and self.configured >= FAR_ABOVE * recommended

    @property
    def flagged(self) -> pd.DataFrame:
        return self.counted.loc[self.counted["hit_limit"] | self.counted["looped"]]


def _loop_rows(pongs: pd.DataFrame, repeats: pd.DataFrame, cycles: pd.DataFrame) -> pd.DataFrame:
    """The three signatures' rows in one frame (:data:`LOOP_COLUMNS` less the counts)."""
    parts = [
        pongs.assign(kind=Signature.TRANSFER_PING_PONG.value, proof_ids=pongs["event_ids"]),
        repeats.assign(
            kind=Signature.REPEATED_IDENTICAL_CALL.value,
            proof_ids=repeats["call_ids"],
            agents=repeats["agent"].map(lambda agent: (agent,)),
        ),
        cycles.assign(
            kind=Signature.LOOP_AGENT_EXIT_NEVER_WRITTEN.value, proof_ids=cycles["event_ids"]
        ),
    ]
    rows = pd.concat([part for part in parts if len(part)] or [parts[0]], ignore_index=True)
    absent = [name for name in LOOP_COLUMNS if name not in rows.columns]
    return rows.assign(**{name: pd.Series([None] * len(rows), dtype=object) for name in absent})


def _flags(
    frames: Frames,
    counted: pd.DataFrame,
    *,
    configured: int | None,
    min_repeats: int,
    exit_keys: tuple[str, ...],
) -> tuple[pd.DataFrame, pd.DataFrame, int, str]:
    """The limit hits, the loop signatures, and the configured limit with its origin."""
    errors = limits.limit_errors(
        events=frames.events, diagnostics=frames.diagnostics, spans=frames.spans
    )
    limit, origin = limits.configured_limit(configured, errors)
    hit = limits.hits(counted, errors, configured=limit)
    pongs = ping_pongs(frames.events)
    repeats = repeated_calls(frames.calls, frames.responses, min_repeats=min_repeats)
    cycles = silent_loops(
        frames.events, frames.state_writes, spans=frames.spans, exit_keys=exit_keys
    )
    loops = _loop_rows(pongs, repeats, cycles)
    return hit, loops, limit, origin


def _flagged(counted: pd.DataFrame, hit: pd.DataFrame, loops: pd.DataFrame) -> pd.DataFrame:
    extra = pd.concat([hit["invocation_id"], loops["invocation_id"]]).dropna().drop_duplicates()
    missing = extra.loc[~extra.isin(counted["invocation_id"])].tolist()
    if missing:  # flagged by the event log alone (no count): count what is known
        add = pd.DataFrame(
            {"invocation_id": missing, "model_calls": 0, "ended": False, "source": ""}
        )
        counted = pd.concat([counted, add], ignore_index=True)
    return counted.assign(
        hit_limit=counted["invocation_id"].isin(hit["invocation_id"]),
        looped=counted["invocation_id"].isin(loops["invocation_id"]),
    )


def _run_ids(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.Series:
    ids = runs.drop_duplicates("invocation_id", keep="last")[["invocation_id", "run_id"]]
    merged = frame[["invocation_id"]].merge(ids, on="invocation_id", how="left")
    return pd.Series(merged["run_id"].to_numpy(dtype=object), index=frame.index, dtype=object)


def _distribution(
    counted: pd.DataFrame,
    *,
    configured: int,
    source: str | None,
    agree: bool,
) -> pd.DataFrame:
    values = counted["model_calls"].to_numpy(dtype=float)
    healthy = counted.loc[~counted["hit_limit"] & ~counted["looped"] & counted["ended"]]
    p99, recommended = limits.recommend(healthy["model_calls"])

    def pct(q: float) -> float:
        return float(np.quantile(values, q)) if len(values) else math.nan

    row = {
        "invocations": len(counted),
        "p50": pct(0.5),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "max": int(values.max()) if len(values) else None,
        "healthy_p99": p99,
        "recommended_max_llm_calls": recommended,
        "configured_max_llm_calls": configured,
        "source": source,
        "sources_agree": agree,
    }
    return as_columns(pd.DataFrame([row]), MODEL_CALLS_COLUMNS)


def _primary(counted: pd.DataFrame) -> str | None:
    named = counted.loc[counted["source"].ne(""), "source"]
    return str(named.mode().iloc[0]) if len(named) else None


def tokens_per_invocation(frames: Frames) -> pd.DataFrame:
    """Tokens per invocation (prompt + output of every model call) from the events' usage
    metadata, else from the ``call_llm`` spans' ``gen_ai.usage.*``; with the source used. A
    compaction's summary call is no invocation's (:mod:`.compaction`)."""
    events = frames.events
    used = events.loc[
        events["total_tokens"].notna() & events["invocation_id"].notna() & ~is_marker(events)
    ]
    by_event = used.groupby("invocation_id", sort=False)["total_tokens"].sum()
    spans = frames.spans.loc[
        frames.spans["kind"].eq(SpanKind.CALL_LLM) & frames.spans["invocation_id"].notna()
    ]
    spent = spans["input_tokens"].astype("Float64").fillna(0) + spans["output_tokens"].astype(
        "Float64"
    ).fillna(0)
    has = spans["input_tokens"].notna() | spans["output_tokens"].notna()
    by_span = spent.loc[has].groupby(spans.loc[has, "invocation_id"], sort=False).sum()
    out = pd.DataFrame({"tokens": by_event, "tokens_source": "events"})
    rest = by_span.loc[~by_span.index.isin(out.index)]
    out = pd.concat([out, pd.DataFrame({"tokens": rest, "tokens_source": "spans"})])
    out.index.name = "invocation_id"
    return out.reset_index().astype({"tokens": "Int64"})


def _cost(
    counted: pd.DataFrame,
    tokens: pd.DataFrame,
    loops: pd.DataFrame,
    price_per_1k: float | None,
) -> tuple[pd.DataFrame, int]:
    total = int(tokens["tokens"].sum()) if len(tokens) else 0
    flagged = counted.loc[counted["hit_limit"] | counted["looped"]]
    kinds = loops.groupby("invocation_id", sort=False)["kind"].agg(", ".join)
    out = flagged[["invocation_id", "model_calls", "hit_limit"]].merge(
        tokens, on="invocation_id", how="left"
    )
    out["kind"] = out["invocation_id"].map(kinds)
    out["kind"] = out["kind"].where(out["kind"].notna(), "hit_limit")
    out["share"] = out["tokens"].astype(float) / total if total else math.nan
    out["cost"] = (
        out["tokens"].astype(float) / 1000 * price_per_1k if price_per_1k is not None else math.nan
    )
    out = out.sort_values("tokens", ascending=False, na_position="last", kind="stable")
    return as_columns(out, COST_COLUMNS), total


def worst_steps(frames: Frames, invocation_id: str | None) -> pd.DataFrame:
    """The events of ``invocation_id`` as steps (see :data:`STEP_COLUMNS`)."""
    if invocation_id is None:
        return empty_view(STEP_COLUMNS)
    events = frames.events.loc[frames.events["invocation_id"].eq(invocation_id)]
    events = events.loc[events["author"].ne("user")].sort_values(["session_id", "seq"])
    calls = frames.calls.loc[frames.calls["invocation_id"].eq(invocation_id)]
    answered = frames.responses.loc[frames.responses["invocation_id"].eq(invocation_id)]
    tool = events["event_id"].map(per_group(calls["name"], calls["event_id"], sep=", "))
    answer = events["event_id"].map(per_group(answered["name"], answered["event_id"], sep=", "))
    made = counts.model_events(events, frames.responses)
    marker = is_marker(events)
    conds = [
        marker,
        events["error_code"].notna(),
        events["transfer_to_agent"].notna(),
        ~made,
        tool.notna(),
    ]
    kind = events["kind"] if "kind" in events else pd.Series("", index=events.index)
    step = choose(conds, [kind, "error", "transfer", "tool", "model"], "model", events.index)
    what = choose(
        conds,
        [
            kind.map(MARKER_STEPS).fillna(""),
            text(events["error_code"]),
            "to " + text(events["transfer_to_agent"]),
            "answer of " + text(answer.astype(object)),
            "calls " + text(tool.astype(object)),
        ],
        text(events["text"].str.slice(0, 60), missing=""),
        events.index,
    )
    out = pd.DataFrame(
        {
            "ts": events["ts"],
            "author": events["author"],
            "step": step,
            "what": what,
            "model_call": made.cumsum().where(made),
            "prompt_tokens": events["prompt_tokens"],
            "output_tokens": events["output_tokens"],
            "total_tokens": events["total_tokens"],
        }
    )
    return as_columns(out.reset_index(drop=True), STEP_COLUMNS)


_FEW_NOTE = "The healthy p99 comes from "


def _few_note(wide: pd.DataFrame, label: str) -> list[str]:
    """The note a healthy p99 of fewer than :data:`FEW` invocations gets (none otherwise)."""
    healthy = int((~wide["hit_limit"] & ~wide["looped"] & wide["ended"]).sum())
    if not 0 < healthy < FEW:
        return []
    return [
        f"{_FEW_NOTE}{healthy} invocation(s) of {label}: below {FEW} it is close to their "
        'maximum. Give a longer baseline (e.g. baseline = "7d") before setting the limit from '
        "it."
    ]


def triage_runaway(
    frames: Frames,
    *,
    as_of: pd.Timestamp,
    baseline: Frames | None = None,
    baseline_label: str = "the incident window",
    max_llm_calls: int | None = None,
    loop_exit_keys: tuple[str, ...] = (),
    min_repeats: int = MIN_REPEATS,
    price_per_1k_tokens: float | None = None,
) -> RunawayReport:
    """The whole flow on one app's frames (see the module docstring of each step).

    ``baseline`` holds the frames of a longer window for the distribution and the healthy
    p99; without it the incident window's own invocations give them.
    """
    notes: list[str] = []
    # A span is exported when it ends: one ending after as_of was not there to be read then.
    frames = replace(frames, spans=frames.spans.loc[~frames.spans["end"].gt(as_of)])
    by_source = counts_by_source(frames)
    counted = combined(by_source)
    hit, loops, limit, origin = _flags(
        frames, counted, configured=max_llm_calls, min_repeats=min_repeats, exit_keys=loop_exit_keys
    )
    counted = _flagged(counted, hit, loops)
    counted["run_id"] = _run_ids(counted, frames.runs)
    counted = as_columns(counted, COUNTED_COLUMNS)
    wide = counted
    if baseline is not None:
        base = combined(counts_by_source(baseline))
        base_hits, base_loops, _, _ = _flags(
            baseline, base, configured=limit, min_repeats=min_repeats, exit_keys=loop_exit_keys
        )
        wide = _flagged(base, base_hits, base_loops)
        wide["run_id"] = _run_ids(wide, baseline.runs)
        wide = as_columns(wide, COUNTED_COLUMNS)
    differ = counts.disagreements(by_source)
    model_calls = _distribution(wide, configured=limit, source=_primary(wide), agree=differ.empty)
    calls_of = counted.set_index("invocation_id")["model_calls"]
    loops = loops.assign(
        model_calls=loops["invocation_id"].map(calls_of).astype("Int64"),
        hit_limit=loops["invocation_id"].isin(hit["invocation_id"]),
    )
    loops = as_columns(loops.sort_values(["invocation_id", "kind"], kind="stable"), LOOP_COLUMNS)
    hit = hit.assign(run_id=_run_ids(hit, frames.runs))
    hit = as_columns(hit, HIT_COLUMNS)
    tokens = tokens_per_invocation(frames)
    cost, total = _cost(counted, tokens, loops, price_per_1k_tokens)
    flagged = counted.loc[counted["hit_limit"] | counted["looped"]]
    pool = flagged if len(flagged) else counted
    worst = (
        str(
            pool.sort_values("model_calls", ascending=False, kind="stable")["invocation_id"].iloc[0]
        )
        if len(pool)
        else None
    )
    if not by_source:
        notes.append(
            "No source counts a model call of this app (no run.end llmCalls lines, no "
            "model-authored events, no call_llm spans): no distribution, no recommendation."
        )
    elif "diagnostics" not in by_source:
        notes.append(
            "No diagnostics run.end lines: model calls come from the "
            f"{'stored events' if 'events' in by_source else 'spans'}; a killed run's count "
            "is what was stored before it died."
        )
    if frames.events.empty:
        notes.append(
            "No event log: no loop signature can be seen (transfers, repeated calls and loop "
            "turns are in the events); limit hits come from the plugin log and the spans."
        )
    if not loop_exit_keys:
        notes.append(
            "No loop_exit_keys in the app's profile: a loop agent is reported on its cycle and "
            "the missing escalate alone, its exit key unknown (add loop_exit_keys to "
            "[apps.<app>] to check the key)."
        )
    if origin == limits.DEFAULT_FROM:
        notes.append(
            f"The configured maxLlmCalls is not known (no max_llm_calls in the app's profile, "
            f"no limit error): ADK's default {limits.DEFAULT_LIMIT} is assumed."
        )
    notes.extend(_few_note(wide, baseline_label))
    if len(tokens) == 0:
        notes.append("No usage metadata on the events or spans: tokens and cost are unknown.")
    return RunawayReport(
        as_of=as_of,
        baseline=baseline_label,
        counted=counted,
        baseline_counted=wide,
        model_calls=model_calls,
        configured=limit,
        configured_from=origin,
        sources=tuple(by_source),
        disagreements=differ,
        hits=hit,
        loops=loops,
        cost=cost,
        total_tokens=total,
        price_per_1k_tokens=price_per_1k_tokens,
        worst=worst,
        sequence=worst_steps(frames, worst),
        compactions=compaction_cost(frames.events, price_per_1k_tokens),
        min_repeats=min_repeats,
        notes=tuple(notes),
    )


BASELINE_SOURCE = "events"
"""The source an engine baseline counts: the model-authored events (``counts.model_events``)."""


def histogram_counted(histogram: pd.DataFrame, *, configured: int) -> pd.DataFrame:
    """An engine baseline's histogram (``baselines.queries.HISTOGRAM_COLUMNS``) as counted
    rows (:data:`COUNTED_COLUMNS`, no ids): an invocation hit the limit when it stored the
    limit error or its count shows the refusal (:func:`.limits.refused`), and is flagged
    (``looped``) when ``marked``."""
    rows = np.repeat(np.arange(len(histogram)), histogram["invocations"].to_numpy(dtype=np.int64))
    calls = histogram["model_calls"].to_numpy(dtype=np.int64)[rows]
    ended = histogram["ended"].to_numpy(dtype=bool)[rows]
    over = limits.refused(pd.Series(calls), pd.Series(ended), configured).to_numpy(dtype=bool)
    hit = histogram["hit_limit"].to_numpy(dtype=bool)[rows] | over
    wide = pd.DataFrame(
        {
            "invocation_id": pd.Series([None] * len(rows), dtype=object),
            "run_id": pd.Series([None] * len(rows), dtype=object),
            "model_calls": calls,
            "ended": ended,
            "source": BASELINE_SOURCE,
            "hit_limit": hit,
            "looped": histogram["marked"].to_numpy(dtype=bool)[rows] & ~hit,
        }
    )
    return as_columns(wide, COUNTED_COLUMNS)


def rebased(report: RunawayReport, histogram: pd.DataFrame, *, label: str) -> RunawayReport:
    """``report`` with its distribution, healthy p99 and recommendation from a baseline
    computed in an engine (``histogram``: :func:`histogram_counted`'s input), labelled
    ``label``. Only the distribution changes: hits, loops and cost stay the window's."""
    wide = histogram_counted(histogram, configured=report.configured)
    model_calls = _distribution(
        wide,
        configured=report.configured,
        source=BASELINE_SOURCE if len(wide) else None,
        agree=report.disagreements.empty,
    )
    notes = [note for note in report.notes if not note.startswith(_FEW_NOTE)]
    return replace(
        report,
        baseline=label,
        baseline_counted=wide,
        model_calls=model_calls,
        notes=(*notes, *_few_note(wide, label)),
    )
