"""What compaction costs: the summariser's model calls, per session, apart from the invocations.

ADK's compaction (``apps/compaction.py``, ADK Java's summarisers) calls the model directly: the
call is not an agent's model request, so it never counts against ``max_llm_calls`` (only
``flows/llm_flows/core/_model_call.py`` counts) and belongs to no user's invocation. It costs
tokens all the same: ADK stores the summary call's usage on the compaction event. Those tokens
are reported here, never in an invocation's tokens nor in the runaway share.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.flows._markers import is_kind
from incidentkit.frames import FLOAT, INT, NINT, STR, TS, EventKind

COMPACTION_COLUMNS: Mapping[str, str] = {
    "session_id": STR,
    "compactions": INT,
    "prompt_tokens": NINT,
    "output_tokens": NINT,
    "total_tokens": NINT,
    "events_covered": INT,
    "first": TS,
    "last": TS,
    "cost": FLOAT,
}
"""One row per session that compacted: its compaction events, their summary calls' tokens
(NA when no compaction of it carries usage), the events they cover (``compacted_by`` one of
them), the first and last compaction's time, and ``cost`` at the price per 1,000 tokens (NaN
without a price)."""


def compaction_cost(events: pd.DataFrame, price_per_1k: float | None = None) -> pd.DataFrame:
    """The compaction cost of each session of ``events`` (:data:`COMPACTION_COLUMNS`), the
    sessions with most tokens first."""
    marks = events.loc[is_kind(events, EventKind.COMPACTION)]
    if marks.empty:
        return as_columns(pd.DataFrame(columns=list(COMPACTION_COLUMNS)), COMPACTION_COLUMNS)
    by = marks.groupby("session_id", sort=False)
    tokens = {
        name: by[name].sum(min_count=1).astype("Int64")
        for name in ("prompt_tokens", "output_tokens", "total_tokens")
    }
    covered = events.loc[events["compacted_by"].isin(marks["event_id"]), "session_id"]
    out = pd.DataFrame(
        {
            "compactions": by.size(),
            **tokens,
            "events_covered": covered.value_counts().reindex(by.size().index, fill_value=0),
            "first": by["ts"].min(),
            "last": by["ts"].max(),
        }
    )
    out.index.name = "session_id"
    out["cost"] = (
        out["total_tokens"].astype(float).to_numpy() / 1000 * price_per_1k
        if price_per_1k is not None
        else np.nan
    )
    out = out.reset_index().sort_values(
        ["total_tokens", "session_id"], ascending=[False, True], na_position="last", kind="stable"
    )
    return as_columns(out, COMPACTION_COLUMNS)
