"""Model calls per invocation, from each source that counts them, and where they disagree.

Three sources count an invocation's model calls: the diagnostics plugin's
``run.end llmCalls=`` (its ``run.many_llm_calls`` warnings give a lower bound when the run never
ended), the ``call_llm`` / ``generate_content`` spans, and the model-authored events (an event
of an agent that carries no function response: each model call stores one, its text or its
function calls, or its error code). A failed model call leaves a span and maybe no event; a
killed run leaves no ``run.end``; sampled traces leave out calls: the counts differ, and each
difference is a row of :func:`disagreements`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.flows.runaway.limits import names_limit_error
from incidentkit.frames import BOOL, INT, STR, SpanKind

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


def from_spans(spans: pd.DataFrame) -> pd.DataFrame:
    """``call_llm`` spans per invocation (ADK Java ``call_llm``, Python 2.x
    ``generate_content``): a sampled trace undercounts, so ``ended`` is true only for traces
    whose ``invocation`` span was exported. The call the limit refused (ADK Python's legacy
    telemetry opens a span for it, then fails it) never reached the model: not counted."""
    calls = spans.loc[
        spans["kind"].eq(SpanKind.CALL_LLM)
        & spans["invocation_id"].notna()
        & ~(spans["status"].eq("ERROR") & names_limit_error(spans["status_message"]))
    ]
    counted = calls.groupby("invocation_id", sort=False).size()
    whole = spans.loc[spans["kind"].eq(SpanKind.INVOCATION), "invocation_id"].dropna()
    ids = counted.index.to_series()
    return _counts(ids, counted.to_numpy(), ids.isin(whole).to_numpy())


def model_events(events: pd.DataFrame, responses: pd.DataFrame) -> pd.Series:
    """Which events a model call stored: not the user's, not partial, carrying no function
    response (a tool's answer is stored under the agent's name too), and not ADK Python's
    limit error event (the call it refused never reached the model)."""
    answered = events["event_id"].isin(responses["event_id"])
    refused = names_limit_error(events["error_code"]) | names_limit_error(events["error_message"])
    made: pd.Series = events["author"].ne("user") & ~events["partial"] & ~answered & ~refused
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
