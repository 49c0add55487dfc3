"""Invocations that hit ``RunConfig.maxLlmCalls``, the limit itself, and a limit set from data.

Above the limit ADK throws: ``LlmCallsLimitExceededException`` (Java) or
``LlmCallsLimitExceededError`` (Python), with the message "Max number of llm calls limit of N
exceeded" (Python quotes N in backticks). ADK counts a call, then refuses it when the count
exceeds the limit (Python ``agents/invocation_context.py``
``increment_and_enforce_llm_calls_limit``, Java ``InvocationContext``): an invocation may make
exactly N calls and end well, and one stopped at the limit made N calls too. So the hit is told
by the refusal's evidence, never by a count of N alone: ADK Python stores an error event
carrying it; ADK Java stores none, so there the plugin's ``run.error``/``run.end
outcome=error`` lines, an error status on the invocation's spans, a count above the limit, or a
count of N with no final response stored (the refusal ended the invocation) are the evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.frames import STR

_MESSAGE = r"limit of\s+`?(\d+)`?\s+exceeded"
_LIMIT = re.compile(_MESSAGE, re.I)
_ERROR = re.compile(  # the exception's name or its message (no group: a flag only)
    "LlmCallsLimitExceeded(?:Exception|Error)|" + _MESSAGE.replace(r"(\d+)", r"\d+"), re.I
)
DEFAULT_LIMIT = 500
"""ADK's builder default: a backstop, not a budget."""
PROFILE_FROM = "[apps.<app>] max_llm_calls"
MESSAGE_FROM = "the limit error's message"
DEFAULT_FROM = "ADK's default, assumed"
"""Where the configured limit came from (:func:`configured_limit`)."""


def limit_texts(text: pd.Series) -> pd.Series:
    """Per text, the limit a limit error's message names (``limit of 90 exceeded``,
    ``limit of `8` exceeded``) as a nullable integer; NA when it names none."""
    found = text.astype("string").str.extract(_LIMIT, expand=False)
    limits: pd.Series = pd.to_numeric(found, errors="coerce").astype("Int64")
    return limits


def names_limit_error(text: pd.Series) -> pd.Series:
    """Which texts are a limit error: the exception's name or its message (only the texts
    present are searched: most events carry no error)."""
    flagged = pd.Series(False, index=text.index)
    present = text.notna()
    if present.any():
        flagged[present] = text[present].astype(str).str.contains(_ERROR).to_numpy(dtype=bool)
    return flagged


HIT_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "model_calls": "Int64",
    "limit": "Int64",
    "evidence": STR,
}


def limit_errors(
    *, events: pd.DataFrame, diagnostics: pd.DataFrame, spans: pd.DataFrame
) -> pd.DataFrame:
    """Every stored trace of a limit error, one row per piece of evidence (invocation_id,
    limit: the one its message names, evidence: in words): ADK Python's error event, the
    plugin's ``run.error``/``run.end``/``model.error`` lines, a span's ERROR status."""
    stored = events.loc[
        names_limit_error(events["error_code"]) | names_limit_error(events["error_message"])
    ]
    lines = diagnostics.loc[diagnostics["kind"].isin(["run.error", "run.end", "model.error"])]
    lines = lines.loc[names_limit_error(lines["message"])]  # the regex on those lines only
    failed = spans.loc[spans["status"].eq("ERROR") & names_limit_error(spans["status_message"])]
    found = [
        pd.DataFrame(
            {
                "invocation_id": stored["invocation_id"],
                "limit": limit_texts(stored["error_message"]),
                "evidence": "error event " + stored["error_code"].fillna("(no code)"),
            }
        ),
        pd.DataFrame(
            {
                "invocation_id": lines["invocation_id"],
                "limit": limit_texts(lines["message"]),
                "evidence": "diagnostics " + lines["kind"] + " at " + lines["location"].fillna("?"),
            }
        ),
        pd.DataFrame(
            {
                "invocation_id": failed["invocation_id"],
                "limit": limit_texts(failed["status_message"]),
                "evidence": "span " + failed["name"].fillna("?") + " status ERROR",
            }
        ),
    ]
    every = pd.concat([part for part in found if len(part)] or found[:1], ignore_index=True)
    return every.dropna(subset=["invocation_id"]).astype({"limit": "Int64"})


def refused(calls: pd.Series, ended: pd.Series, configured: int) -> pd.Series:
    """Whether each count shows the ``configured`` limit's refusal by itself: above the limit,
    or at it with no final count (``ended`` false: no final response, no run.end; ADK Java
    stores no limit error). A count at the limit of an invocation that ended is no hit: ADK
    refuses only a call that would exceed the limit."""
    over: pd.Series = calls.gt(configured) | (calls.eq(configured) & ~ended.astype(bool))
    return over


def hits(
    model_calls: pd.DataFrame, errors: pd.DataFrame, *, configured: int | None
) -> pd.DataFrame:
    """Invocations that hit the limit, each with its evidence in words joined by ``; ``: the
    stored ``errors`` (:func:`limit_errors`) and a count that shows the ``configured`` limit's
    refusal (:func:`refused`). ``model_calls`` holds the counts (best source) and whether each
    is final (``ended``; absent: final); ``limit`` is the one the error names, else
    ``configured``."""
    found = [errors]
    if configured is not None:
        calls = model_calls["model_calls"]
        ended = model_calls.get("ended", pd.Series(True, index=model_calls.index))
        over = model_calls.loc[refused(calls, ended, configured)]
        words = pd.Series(
            np.where(
                over["model_calls"].gt(configured),
                f" exceed the configured limit {configured}",
                f" reach the configured limit {configured} and the invocation stored no end",
            ),
            index=over.index,
            dtype=object,
        )
        found.append(
            pd.DataFrame(
                {
                    "invocation_id": over["invocation_id"],
                    "limit": pd.array([configured] * len(over), dtype="Int64"),
                    "evidence": "model calls " + over["model_calls"].astype(str) + words,
                }
            )
        )
    every = pd.concat([part for part in found if len(part)] or found[:1], ignore_index=True)
    if every.empty:
        return as_columns(pd.DataFrame(columns=list(HIT_COLUMNS)), HIT_COLUMNS)
    grouped = every.groupby("invocation_id", sort=True)
    out = pd.DataFrame(
        {
            "limit": grouped["limit"].max(),
            "evidence": grouped["evidence"].agg(lambda texts: "; ".join(dict.fromkeys(texts))),
        }
    ).reset_index()
    if configured is not None:
        out["limit"] = out["limit"].fillna(configured)
    calls = model_calls.drop_duplicates("invocation_id").set_index("invocation_id")["model_calls"]
    out["model_calls"] = out["invocation_id"].map(calls).astype("Int64")
    return as_columns(out, HIT_COLUMNS)


def configured_limit(profile_value: object, hit_rows: pd.DataFrame) -> tuple[int, str]:
    """The configured ``maxLlmCalls`` and where it came from: the app profile's
    ``max_llm_calls``, else the limit a limit error names (``hit_rows``: :func:`hits` or
    :func:`limit_errors`), else ADK's default 500."""
    if isinstance(profile_value, int) and not isinstance(profile_value, bool) and profile_value > 0:
        return profile_value, PROFILE_FROM
    named = hit_rows["limit"].dropna()
    if len(named):
        return int(named.max()), MESSAGE_FROM
    return DEFAULT_LIMIT, DEFAULT_FROM


def nice_ceiling(value: float) -> int:
    """``value`` rounded up to a number people set: a multiple of 5 up to 100, of 10 up to
    1,000, of 100 beyond (27 → 30, 43 → 45, 131 → 140, 1,234 → 1,300)."""
    step = 5 if value <= 100 else 10 if value <= 1000 else 100
    return max(step, math.ceil(value / step) * step)


def recommend(healthy_calls: pd.Series) -> tuple[float, int | None]:
    """The healthy p99 of model calls per invocation and the recommended ``maxLlmCalls``,
    about three times it, rounded up (a measured p99 of 9 gives 30); None without healthy runs."""
    values = healthy_calls.dropna().to_numpy(dtype=float)
    if not len(values):
        return math.nan, None
    p99 = float(np.quantile(values, 0.99))
    return p99, nice_ceiling(3 * p99)
