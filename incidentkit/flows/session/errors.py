"""Errors that vanish: problems that reached the evidence but not an exception.

- An ``errorCode`` / ``errorMessage`` a model response carried onto an event (``MAX_TOKENS``,
  ``SAFETY``, ...) while the run itself completed normally: nothing was thrown, no alert fired.
- RxJava's undeliverable errors (``rx.undeliverable``): an error raised after its subscriber
  was gone (a client that hung up), logged by the global handler and otherwise lost.
- The diagnostics plugin's ``model.error``, ``tool.error`` and ``run.error`` lines, counted per
  agent and tool.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ERROR_COLUMNS = [
    *("location", "invocation_id", "kind", "error_code", "message"),
    *("ts", "session_id", "agent", "tool", "run_outcome"),
]
"""One row per error: where it is (an event id or a log line), what kind, and its run."""
COUNT_COLUMNS = ["kind", "agent", "tool", "errors", "invocations"]
LOGGED_KINDS = ("model.error", "tool.error", "run.error", "rx.undeliverable")
EVENT_KIND = "event.error_code"
ALERT = (
    "Alert on events that carry an error code (count them per agent and error code), not only "
    "on exceptions: a truncated or blocked model answer ends the run normally. Alert on "
    "rx.undeliverable lines too: each is an error that had nobody left to tell."
)


def exception_line(messages: pd.Series) -> pd.Series:
    """The exception a log record carries (its second line, the first of the trace), else
    its first line."""
    parts = messages.fillna("").astype(str).str.split("\n", n=2)
    second = parts.str[1].fillna("")
    return second.where(second.str.strip().ne(""), parts.str[0]).astype("str")


def run_outcomes(
    diagnostics: pd.DataFrame, runs: pd.DataFrame, events: pd.DataFrame | None = None
) -> pd.Series:
    """How each invocation's run ended: the plugin's ``run.end outcome`` (an ``run.error``
    line makes it ``error``), else the ledger's terminal status, else ``error`` when its
    events store ADK's limit error (``max_llm_calls`` raised it out of ``run_async``: the run
    failed, loudly); indexed by invocation id."""
    ended = diagnostics.loc[diagnostics["kind"].eq("run.end")].dropna(subset=["invocation_id"])
    outcome = ended.drop_duplicates("invocation_id", keep="last").set_index("invocation_id")
    out = outcome["outcome"].astype(object)
    failed = diagnostics.loc[diagnostics["kind"].eq("run.error"), "invocation_id"].dropna()
    out = out.reindex(out.index.union(pd.Index(failed.unique())))
    out[out.index.isin(failed)] = "error"
    status = {"DONE": "ok", "FAILED": "error"}
    ledger = runs.dropna(subset=["invocation_id"]).drop_duplicates("invocation_id", keep="last")
    from_ledger = ledger.set_index("invocation_id")["status"].map(status)
    missing = from_ledger.index.difference(out.dropna().index)
    joined: pd.Series = pd.concat([out.dropna(), from_ledger.loc[missing].dropna()])
    if events is not None:
        from incidentkit.flows.runaway.limits import names_limit_error

        stopped = events.loc[
            names_limit_error(events["error_code"]) | names_limit_error(events["error_message"]),
            "invocation_id",
        ].dropna()
        unknown = pd.Index(stopped.unique()).difference(joined.index)
        joined = pd.concat([joined, pd.Series("error", index=unknown, dtype=object)])
    return joined.astype(object)


def vanishing_errors(
    events: pd.DataFrame,
    diagnostics: pd.DataFrame,
    calls: pd.DataFrame,
    runs: pd.DataFrame,
) -> pd.DataFrame:
    """Every error of :data:`ERROR_COLUMNS` the frames hold, in time order."""
    outcomes = run_outcomes(diagnostics, runs, events)
    coded = events.loc[events["error_code"].notna() | events["error_message"].notna()]
    from_events = pd.DataFrame(
        {
            "location": coded["event_id"],
            "invocation_id": coded["invocation_id"],
            "kind": EVENT_KIND,
            "error_code": coded["error_code"],
            "message": coded["error_message"],
            "ts": coded["ts"],
            "session_id": coded["session_id"],
            "agent": coded["author"],
            "tool": pd.Series(np.nan, index=coded.index, dtype="str"),
        }
    )
    logged = diagnostics.loc[diagnostics["kind"].isin(LOGGED_KINDS)]
    callers = calls.dropna(subset=["call_id"]).drop_duplicates("call_id").set_index("call_id")
    agent = logged["agent"].fillna(logged["call_id"].map(callers["author"]))
    from_logs = pd.DataFrame(
        {
            "location": logged["location"],
            "invocation_id": logged["invocation_id"],
            "kind": logged["kind"],
            "error_code": pd.Series(np.nan, index=logged.index, dtype="str"),
            "message": exception_line(logged["message"]),
            "ts": logged["ts"],
            "session_id": logged["session_id"],
            "agent": agent,
            "tool": logged["tool"],
        }
    )
    parts = [part for part in (from_events, from_logs) if len(part)]
    if not parts:
        frame = pd.DataFrame({col: pd.Series(dtype=object) for col in ERROR_COLUMNS})
        return frame.astype({"ts": "datetime64[ns, UTC]"})
    frame = pd.concat(parts, ignore_index=True)
    frame["run_outcome"] = frame["invocation_id"].map(outcomes).astype(object)
    text = ["location", "invocation_id", "kind", "error_code", "message", "session_id"]
    frame = frame.astype({col: "str" for col in [*text, "agent", "tool"]})
    return frame.sort_values("ts", kind="stable", ignore_index=True)[ERROR_COLUMNS]


def error_counts(errors: pd.DataFrame) -> pd.DataFrame:
    """Errors per kind, agent and tool (:data:`COUNT_COLUMNS`), most first."""
    if errors.empty:
        return pd.DataFrame({col: pd.Series(dtype=object) for col in COUNT_COLUMNS})
    keys = errors[["kind", "agent", "tool"]].fillna("-")
    grouped = errors.assign(**keys).groupby(["kind", "agent", "tool"], sort=False)
    counts = grouped.agg(
        errors=("location", "size"), invocations=("invocation_id", "nunique")
    ).reset_index()
    return counts.sort_values(["errors", "kind"], ascending=[False, True], ignore_index=True)


def quiet(errors: pd.DataFrame) -> pd.DataFrame:
    """The errors nothing threw: error codes on events whose run ended normally (or whose run
    is unknown) and undeliverable errors."""
    coded = errors["kind"].eq(EVENT_KIND) & errors["run_outcome"].ne("error")
    return errors.loc[coded | errors["kind"].eq("rx.undeliverable")]
