"""Model calls per invocation, from each source that counts them, and where they disagree.

Three sources count an invocation's model calls: the diagnostics plugin's
``run.end llmCalls=`` (its ``run.many_llm_calls`` warnings give a lower bound when the run never
ended), the ``call_llm`` / ``generate_content`` spans, and the model-authored events (an event
of an agent that carries no function response: each model call stores one, its text or its
function calls, or its error code). A failed model call leaves a span and maybe no event; a
killed run leaves no ``run.end``; sampled traces leave out calls: the counts differ, and each
difference is a row of :func:`disagreements`.

They count what ADK counts: one per model request an agent makes (ADK Python
``flows/llm_flows/core/_model_call.py`` calls ``increment_llm_call_count`` once per request;
ADK Java ``incrementLlmCallsCount``). ADK 2.x's markers are no model call: a compaction's
summary (the summariser calls the model directly, outside that count: its tokens are the
compaction cost, :mod:`.compaction`), a rewind, a resumable app's checkpoints. Nor is an error
event without content that no model answered (a tool's ``TimeoutError`` the agent retried, the
call ``max_llm_calls`` refused). A marker's own invocation id is no invocation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.flows._markers import is_kind, is_marker
from incidentkit.flows.runaway.limits import names_limit_error
from incidentkit.frames import BOOL, INT, STR, EventKind, SpanKind

COUNT_SOURCES = ("diagnostics", "events", "spans")
"""The sources of model-call counts, best first: the plugin counts every call it saw."""

COUNT_COLUMNS: Mapping[str, str] = {"invocation_id": STR, "model_calls": INT, "ended": BOOL}
"""One row per invocation; ``ended`` says the count is final (a run.end, or a whole trace)."""


def _counts(ids: pd.Series, counts: object, ended: object) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "invocation_id": ids.to_numpy(dtype=object),
            "model_calls": np.asarray(counts),
            "ended": np.asarray(ended, dtype=bool),
        }
    )
    return as_columns(frame.sort_values("invocation_id", kind="stable"), COUNT_COLUMNS)


def from_diagnostics(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """``run.end llmCalls=`` per invocation; without a run.end, the highest
    ``run.many_llm_calls calls=`` (a lower bound, ``ended`` false)."""
    named = diagnostics.loc[diagnostics["invocation_id"].notna() & diagnostics["llm_calls"].notna()]
    ends = named.loc[named["kind"].eq("run.end")].drop_duplicates("invocation_id", keep="last")
    warned = named.loc[named["kind"].eq("run.many_llm_calls")]
    warned = warned.loc[~warned["invocation_id"].isin(ends["invocation_id"])]
    most = warned.groupby("invocation_id", sort=False)["llm_calls"].max()
    ids = pd.concat([ends["invocation_id"], most.index.to_series()], ignore_index=True)
    counts = pd.concat([ends["llm_calls"], most], ignore_index=True).astype(INT)
    ended = np.r_[np.ones(len(ends), dtype=bool), np.zeros(len(most), dtype=bool)]
    return _counts(ids, counts, ended)


CLOCK_SLACK = pd.Timedelta(milliseconds=100)
"""How much earlier than its invocation's first span an event may be stored and still be of a
run that span covers (the store's and the tracer's clocks, ADK Java's millisecond times)."""


def from_spans(spans: pd.DataFrame, events: pd.DataFrame | None = None) -> pd.DataFrame:
    """``call_llm`` spans per invocation (ADK Java ``call_llm``, Python 2.x
    ``generate_content``): a sampled trace undercounts, so ``ended`` is true only for traces
    whose ``invocation`` span was exported, and (given the ``events``) began before the
    invocation's first model call was stored (:data:`CLOCK_SLACK` allowed): a resumed
    invocation's first worker died with its spans unexported. The call the limit refused
    (ADK Python's legacy telemetry opens a span for it, then fails it) never reached the
    model: not counted."""
    calls = spans.loc[
        spans["kind"].eq(SpanKind.CALL_LLM)
        & spans["invocation_id"].notna()
        & ~(spans["status"].eq("ERROR") & names_limit_error(spans["status_message"]))
    ]
    counted = calls.groupby("invocation_id", sort=False).size()
    whole = spans.loc[spans["kind"].eq(SpanKind.INVOCATION)].dropna(subset=["invocation_id"])
    began = whole.groupby("invocation_id", sort=False)["start"].min()
    if events is not None and len(began):
        made = events.loc[events["invocation_id"].isin(began.index)]
        made = made.loc[model_events(made)]
        first = made.groupby("invocation_id", sort=False)["ts"].min()
        early = first.lt(began.reindex(first.index) - CLOCK_SLACK)
        late = first.index[early.to_numpy(dtype=bool)]
        began = began.drop(late)
    ids = counted.index.to_series()
    return _counts(ids, counted.to_numpy(), ids.isin(began.index).to_numpy())


USAGE = ("prompt_tokens", "output_tokens", "total_tokens")
"""An event's usage metadata: only a model's answer carries it."""


def model_events(events: pd.DataFrame, responses: pd.DataFrame | None = None) -> pd.Series:
    """Which events a model call stored: an agent's (not the user's), not partial, no marker,
    carrying no function response (a tool's answer is stored under the agent's name too; with
    ``responses`` given), and not an error event without content unless a model answered it
    (usage metadata: a blocked or truncated answer with no parts). So never a tool's
    ``TimeoutError`` nor the limit error (the call it refused never reached the model)."""
    answered = (
        events["event_id"].isin(responses["event_id"])
        if responses is not None
        else pd.Series(False, index=events.index)
    )
    refused = names_limit_error(events["error_code"]) | names_limit_error(events["error_message"])
    used = events[list(USAGE)].notna().any(axis=1)
    bare = is_kind(events, EventKind.ERROR) & ~used
    made: pd.Series = (
        events["author"].ne("user")
        & ~events["partial"]
        & ~answered
        & ~refused
        & ~is_marker(events)
        & ~bare
    )
    return made


def from_events(events: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """Model-authored events per invocation; ``ended`` when a final response is stored."""
    made = events.loc[model_events(events, responses) & events["invocation_id"].notna()]
    counted = made.groupby("invocation_id", sort=False).size()
    final = events.loc[events["final_response"], "invocation_id"].dropna()
    ids = counted.index.to_series()
    return _counts(ids, counted.to_numpy(), ids.isin(final).to_numpy())


DISAGREEMENT_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "source": STR,
    "model_calls": INT,
    "other_source": STR,
    "other_calls": INT,
    "detail": STR,
}


def disagreements(by_source: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Invocations two sources count differently, the best source against each other one.

    Only final counts are compared (a run.end, an exported invocation span, a stored final
    response): a lower bound or a sampled trace is expected to count fewer.
    """
    names = [name for name in COUNT_SOURCES if name in by_source]
    if len(names) < 2:
        return as_columns(pd.DataFrame(columns=list(DISAGREEMENT_COLUMNS)), DISAGREEMENT_COLUMNS)
    best = by_source[names[0]].loc[lambda f: f["ended"]]
    parts = []
    for name in names[1:]:
        other = by_source[name].loc[lambda f: f["ended"]]
        both = best.merge(other, on="invocation_id", suffixes=("", "_o"))
        differ = both.loc[both["model_calls"].ne(both["model_calls_o"])]
        parts.append(
            pd.DataFrame(
                {
                    "invocation_id": differ["invocation_id"],
                    "source": names[0],
                    "model_calls": differ["model_calls"],
                    "other_source": name,
                    "other_calls": differ["model_calls_o"],
                    "detail": names[0]
                    + " counts "
                    + differ["model_calls"].astype(str)
                    + ", "
                    + name
                    + " "
                    + differ["model_calls_o"].astype(str),
                }
            )
        )
    out = pd.concat(parts, ignore_index=True).sort_values(["invocation_id", "other_source"])
    return as_columns(out, DISAGREEMENT_COLUMNS)
