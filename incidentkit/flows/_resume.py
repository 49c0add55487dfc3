"""Resumed invocations: the segments and pauses of one invocation id, and the calls ADK ran
again after a crash.

ADK 2.x reuses an invocation's id when it resumes it (``runners.py``: ``run_async`` with the
``invocation_id``, or a message whose ``function_response`` answers one of its calls), so one
invocation can hold several runs (segments) with a pause between. The kit sees a resume in:

- the invocation spans: one root span per run; events of the invocation that no root span
  covers were written by a process that exported no spans (it died before the root ended);
- a user ``function_response`` to a long-running call inside the invocation: a person answered
  (the pause runs from the call to the answer);
- the diagnostics log: several ``run.start`` lines for one invocation id.

Pauses the sources show of the same gap are one pause. A resumable app's crash-resumed call is
run again with the same function-call id (``flows/llm_flows/core/_resume.py``,
``REPLAY_CALLS``; ``apps/_configs.py``: at-least-once): :func:`calls_run_twice` lists those
calls and what the side-effect journal says of each.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd

from incidentkit.findings import Finding, Severity, rows_of
from incidentkit.flows._frames import as_columns, per_group
from incidentkit.flows._markers import marker_invocations
from incidentkit.flows._text import fill, fill_first, text
from incidentkit.frames import FLOAT, INT, STR, TS, SpanKind
from incidentkit.times import iso_utc

CLOCK_SLACK: Final = pd.Timedelta(milliseconds=100)
"""An event this close outside an invocation span still counts as inside it (the store's and
the tracer's clocks differ a little)."""
_UTC = pd.DatetimeTZDtype("ns", "UTC")


class Cause(enum.StrEnum):
    """Why an invocation paused between two of its segments."""

    CRASH_AND_RESUME = "crash_and_resume"
    """A run ended without the invocation ending (its process died) and ADK resumed it."""
    HUMAN_APPROVAL = "human_approval"
    """A long-running call waited for a person's ``function_response``."""


class RunTwice(enum.StrEnum):
    """What the side-effect journal says of a call ADK executed again after a resume."""

    RAN_TWICE = "ran_twice"
    """Its entry was created before the resume and updated after it: both processes ran it."""
    RAN_ONCE = "ran_once"
    """Its entry shows one run only (both times on one side of the resume)."""
    NO_JOURNAL = "no_journal"
    """No journal, or no entry with the call's id: nothing tells."""


PAUSE_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "paused_at": TS,
    "resumed_at": TS,
    "pause_ms": FLOAT,
    "cause": STR,
    "detail": STR,
}
"""One row per pause of an invocation, in time order."""
RESUMED_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "session_id": STR,
    "segments": INT,
    "started_at": TS,
    "ended_at": TS,
    "pause_ms": FLOAT,
    "active_ms": FLOAT,
    "cause": STR,
    "detail": STR,
}
"""One row per invocation with more than one segment: ``started_at`` and ``ended_at`` are its
first and last record (event, root span, diagnostics line), ``active_ms`` that time less the
pauses."""
RUN_TWICE_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "call_id": STR,
    "tool": STR,
    "called_at": TS,
    "resumed_at": TS,
    "journal_key": STR,
    "journal_status": STR,
    "journal_created_at": TS,
    "journal_updated_at": TS,
    "verdict": STR,
    "detail": STR,
}
"""One row per call ADK executed again after a crash (:class:`RunTwice` in ``verdict``)."""

_CANDIDATE = ["invocation_id", "paused_at", "resumed_at", "cause", "detail", "rank"]


@dataclass(frozen=True)
class Resumes:
    """The pauses (:data:`PAUSE_COLUMNS`) and the resumed invocations
    (:data:`RESUMED_COLUMNS`) of an event log."""

    pauses: pd.DataFrame
    invocations: pd.DataFrame


def _utc(series: pd.Series) -> pd.Series:
    return pd.to_datetime(series, utc=True).astype(_UTC)


def _clock(series: pd.Series) -> pd.Series:
    """Times as ``2026-12-06T20:38:56.699Z`` text (milliseconds shown: pauses can be short)."""
    return text(iso_utc(series))


def _empty(columns: Mapping[str, str]) -> pd.DataFrame:
    return as_columns(pd.DataFrame(columns=list(columns)), columns)


def _candidates(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[_CANDIDATE].assign(paused_at=_utc(rows["paused_at"]))


def _logged(events: pd.DataFrame) -> pd.DataFrame:
    """The events of user invocations (a marker's own invocation is never resumed)."""
    named = events.loc[events["invocation_id"].notna() & events["ts"].notna()]
    named = named.loc[~named["invocation_id"].isin(marker_invocations(events))]
    return named[["invocation_id", "session_id", "ts"]].assign(ts=_utc(named["ts"]))


def _roots(spans: pd.DataFrame | None, known: pd.Index | None = None) -> pd.DataFrame:
    """The invocation (root) spans (of ``known`` invocations), with their rank in each."""
    if spans is None or spans.empty:
        return pd.DataFrame(
            {"invocation_id": pd.Series(dtype=object), "start": [], "end": [], "rank": []}
        )
    kept = spans["kind"].eq(SpanKind.INVOCATION) & spans["start"].notna()
    kept &= spans["invocation_id"].notna() if known is None else spans["invocation_id"].isin(known)
    roots = spans.loc[kept]
    roots = roots[["invocation_id", "start", "end"]].assign(
        start=_utc(roots["start"]), end=_utc(roots["end"])
    )
    roots = roots.sort_values(["invocation_id", "start"], kind="stable")
    return roots.assign(rank=roots.groupby("invocation_id", sort=False).cumcount())


def _span_pauses(logged: pd.DataFrame, roots: pd.DataFrame) -> pd.DataFrame:
    """Gaps between the runs the spans show: between two root spans, or between events no root
    span covers (a process that died before exporting its spans) and the next run."""
    mine = logged.loc[logged["invocation_id"].isin(roots["invocation_id"])]
    left = mine.assign(at=mine["ts"] + CLOCK_SLACK).sort_values("at", kind="stable")
    hit = pd.merge_asof(
        left,
        roots.sort_values("start", kind="stable"),
        left_on="at",
        right_on="start",
        by="invocation_id",
        direction="backward",
    )
    inside = hit["rank"].notna() & (hit["end"].isna() | hit["ts"].le(hit["end"] + CLOCK_SLACK))
    bare = hit.loc[~inside].assign(rank=hit["rank"].fillna(-1))
    spanless = (
        bare.groupby(["invocation_id", "rank"], sort=False)["ts"]
        .agg(start="min", end="max")
        .reset_index()
        .assign(spanless=True)
    )
    segments = pd.concat(
        [roots[["invocation_id", "start", "end"]].assign(spanless=False), spanless],
        ignore_index=True,
    ).sort_values(["invocation_id", "start"], kind="stable")
    by_inv = segments.groupby("invocation_id", sort=False)
    before = segments.assign(
        paused_at=by_inv["end"].shift(),
        first=by_inv["start"].shift(),
        was_bare=by_inv["spanless"].shift(),
    )
    gaps = before.loc[before["paused_at"].notna() & before["start"].gt(before["paused_at"])]
    fields = {
        "first": _clock(gaps["first"]),
        "last": _clock(gaps["paused_at"]),
        "at": _clock(gaps["start"]),
    }
    detail = fill_first(
        gaps.index,
        [
            (
                gaps["was_bare"].eq(True),
                "no invocation span covers its events from {first} to {last}: the process "
                "that wrote them exported none (it died mid-run); ADK resumed the invocation "
                "under the same id at {at}",
            ),
            (
                gaps["spanless"],
                "its run ended at {last} and its events from {at} on have no invocation span "
                "(a run still going, or one whose process died)",
            ),
        ],
        fields,
        "two runs of the invocation: one ended at {last}, the next started at {at} under the "
        "same id",
    )
    return _candidates(
        gaps.assign(
            resumed_at=gaps["start"], cause=Cause.CRASH_AND_RESUME.value, detail=detail, rank=1
        )
    )


def _approval_pauses(calls: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """From each long-running call to the first user ``function_response`` answering it."""
    asked = calls.loc[calls["long_running"].eq(True) & calls["call_id"].notna()]
    answers = responses.loc[responses["author"].eq("user") & responses["call_id"].notna()]
    both = asked[["invocation_id", "call_id", "name", "ts"]].merge(
        answers[["invocation_id", "call_id", "ts"]].rename(columns={"ts": "resumed_at"}),
        on=["invocation_id", "call_id"],
    )
    both = both.loc[both["resumed_at"].ge(both["ts"])].sort_values("resumed_at", kind="stable")
    both = both.drop_duplicates(["invocation_id", "call_id"])
    detail = fill(
        both.index,
        "long-running call {tool} ({cid}) at {asked}, answered by a person's function_response "
        "at {answered} inside the same invocation",
        tool=both["name"],
        cid=both["call_id"],
        asked=_clock(both["ts"]),
        answered=_clock(both["resumed_at"]),
    )
    return _candidates(
        both.assign(
            paused_at=both["ts"],
            resumed_at=_utc(both["resumed_at"]),
            cause=Cause.HUMAN_APPROVAL.value,
            detail=detail,
            rank=0,
        )
    )


def _started_again(diagnostics: pd.DataFrame | None) -> pd.Index:
    """The invocation ids with more than one ``run.start`` line."""
    if diagnostics is None or diagnostics.empty:
        return pd.Index([], dtype=object)
    starts = diagnostics["kind"].eq("run.start") & diagnostics["ts"].notna()
    started = diagnostics.loc[starts & diagnostics["invocation_id"].notna(), "invocation_id"]
    again: pd.Index = pd.Index(started.loc[started.duplicated()].unique())
    return again


def _diagnostics_pauses(
    logged: pd.DataFrame, diagnostics: pd.DataFrame, again: pd.Index
) -> pd.DataFrame:
    """Each ``run.start`` of an invocation (of ``again``) after its first: paused since the
    invocation's last record before it (a diagnostics line or an event)."""
    named = diagnostics["invocation_id"].isin(again) & diagnostics["ts"].notna()
    lines = diagnostics.loc[named]
    lines = lines[["invocation_id", "kind", "ts"]].assign(ts=_utc(lines["ts"]))
    starts = lines.loc[lines["kind"].eq("run.start")].sort_values("ts", kind="stable")
    later = starts.loc[starts.groupby("invocation_id", sort=False).cumcount().gt(0)]
    logged = logged.loc[logged["invocation_id"].isin(again)]
    records = pd.concat([lines[["invocation_id", "ts"]], logged[["invocation_id", "ts"]]])
    records = records.rename(columns={"ts": "paused_at"}).sort_values("paused_at")
    found = pd.merge_asof(
        later[["invocation_id", "ts"]],
        records,
        left_on="ts",
        right_on="paused_at",
        by="invocation_id",
        allow_exact_matches=False,
    ).dropna(subset=["paused_at"])
    detail = fill(
        found.index,
        "the diagnostics log shows run.start again at {at} after the invocation's last line "
        "or event at {last}: ADK ran it again under the same id",
        at=_clock(found["ts"]),
        last=_clock(found["paused_at"]),
    )
    return _candidates(
        found.assign(
            resumed_at=found["ts"], cause=Cause.CRASH_AND_RESUME.value, detail=detail, rank=2
        )
    )


def _merged(candidates: pd.DataFrame) -> pd.DataFrame:
    """One pause per gap: overlapping pauses of one invocation are one (an approval wins over
    the spans' and the diagnostics' view of the same gap)."""
    rows = candidates.sort_values(["invocation_id", "paused_at"], kind="stable")
    reach = rows.groupby("invocation_id", sort=False)["resumed_at"].cummax()
    before = reach.groupby(rows["invocation_id"], sort=False).shift()
    group = (before.isna() | rows["paused_at"].gt(before)).cumsum()
    rows = rows.assign(group=group.to_numpy())
    span = rows.groupby("group").agg(
        paused_at=("paused_at", "min"), resumed_at=("resumed_at", "max")
    )
    best = rows.sort_values(["group", "rank"], kind="stable").drop_duplicates("group")
    out = best.drop(columns=["paused_at", "resumed_at"]).merge(span, on="group")
    out = out.assign(pause_ms=(out["resumed_at"] - out["paused_at"]).dt.total_seconds() * 1000)
    out = out.sort_values(["invocation_id", "paused_at"], kind="stable")
    return as_columns(out, PAUSE_COLUMNS)


def resumes(
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    spans: pd.DataFrame | None = None,
    diagnostics: pd.DataFrame | None = None,
) -> Resumes:
    """The pauses of every invocation of ``events`` and the invocations that have any.

    A pause is a :class:`Cause`: ``human_approval`` when a person's ``function_response``
    answered a long-running call of the invocation in it, else ``crash_and_resume``.
    """
    approvals = _approval_pauses(calls, responses)
    roots = _roots(spans)
    again = _started_again(diagnostics)
    candidates = pd.concat([roots["invocation_id"], approvals["invocation_id"], again.to_series()])
    # Only invocations that may have paused are read: with a root span (events outside it
    # show a dead process), a person's answer, or several run.start lines.
    logged = _logged(events.loc[events["invocation_id"].isin(candidates)])
    roots = roots.loc[roots["invocation_id"].isin(logged["invocation_id"])]
    parts = [approvals.loc[approvals["invocation_id"].isin(logged["invocation_id"])]]
    if len(roots):
        parts.append(_span_pauses(logged, roots))
    if len(again) and diagnostics is not None:
        parts.append(_diagnostics_pauses(logged, diagnostics, again))
    found = [part for part in parts if len(part)]
    if not found:
        return Resumes(_empty(PAUSE_COLUMNS), _empty(RESUMED_COLUMNS))
    pauses = _merged(pd.concat(found, ignore_index=True))
    return Resumes(pauses, _invocations(pauses, logged, spans, diagnostics))


def _invocations(
    pauses: pd.DataFrame,
    logged: pd.DataFrame,
    spans: pd.DataFrame | None,
    diagnostics: pd.DataFrame | None,
) -> pd.DataFrame:
    """One row per paused invocation: its segments, first and last record, pause and active
    time, causes and the pauses' details."""
    ids = pauses["invocation_id"]
    records = [logged[["invocation_id", "ts"]].rename(columns={"ts": "at"})]
    if spans is not None and len(spans):
        roots = _roots(spans, pd.Index(ids.unique()))
        records += [roots[["invocation_id", "start"]], roots[["invocation_id", "end"]]]
    if diagnostics is not None and len(diagnostics):
        records.append(diagnostics[["invocation_id", "ts"]])
    times = pd.concat(
        [frame.set_axis(["invocation_id", "at"], axis=1) for frame in records], ignore_index=True
    )
    times = times.loc[times["invocation_id"].isin(ids)]
    times = times.assign(at=_utc(times["at"]))
    bounds = times.groupby("invocation_id")["at"].agg(started_at="min", ended_at="max")
    grouped = pauses.groupby("invocation_id", sort=False)
    causes = pauses.drop_duplicates(["invocation_id", "cause"]).sort_values("cause")
    out = pd.DataFrame(
        {
            "segments": grouped.size() + 1,
            "pause_ms": grouped["pause_ms"].sum(),
            "cause": per_group(causes["cause"], causes["invocation_id"], sep=", "),
            "detail": per_group(pauses["detail"], ids, sep="; "),
        }
    ).join(bounds)
    sessions = logged.drop_duplicates("invocation_id").set_index("invocation_id")["session_id"]
    whole = (out["ended_at"] - out["started_at"]).dt.total_seconds() * 1000
    out = out.assign(
        session_id=out.index.to_series().map(sessions),
        active_ms=(whole - out["pause_ms"]).clip(lower=0),
    )
    out = out.rename_axis("invocation_id").reset_index().sort_values("started_at", kind="stable")
    return as_columns(out, RESUMED_COLUMNS)


def calls_run_twice(
    pauses: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    journal: pd.DataFrame | None,
) -> pd.DataFrame:
    """The calls ADK executed again after a crash, each checked against the journal.

    A call of a crash-resumed invocation whose call event precedes the resume and whose
    response follows it was run again by the new process with the same function-call id
    (long-running calls are not: a person answers them). Its journal entries (by
    ``function_call_id``; ``journal`` None: the evidence has no journal) tell whether the first
    process ran it too: created before the resume and updated after it (:class:`RunTwice`).
    """
    crashes = pauses.loc[
        pauses["cause"].eq(Cause.CRASH_AND_RESUME), ["invocation_id", "resumed_at"]
    ]
    asked = calls.loc[calls["long_running"].ne(True) & calls["call_id"].notna()]
    asked = asked[["invocation_id", "call_id", "name", "ts"]].assign(ts=_utc(asked["ts"]))
    found = asked.merge(crashes, on="invocation_id")
    found = found.loc[found["ts"].lt(found["resumed_at"])]
    answered = responses.loc[responses["call_id"].notna(), ["invocation_id", "call_id", "ts"]]
    answered = answered.assign(answered_at=_utc(answered["ts"])).drop(columns="ts")
    answered = answered.sort_values("answered_at").drop_duplicates(["invocation_id", "call_id"])
    found = found.merge(answered, on=["invocation_id", "call_id"])
    found = found.loc[found["answered_at"].ge(found["resumed_at"])]
    found = found.sort_values("resumed_at", kind="stable").drop_duplicates("call_id")
    if found.empty:
        return _empty(RUN_TWICE_COLUMNS)
    entries = _entries(journal)
    rows = found.reset_index(drop=True).merge(
        entries, left_on="call_id", right_index=True, how="left"
    )
    created, updated, resumed = rows["created"], rows["updated"], rows["resumed_at"]
    has = rows["key"].notna()
    twice = has & created.lt(resumed) & updated.ge(resumed)
    verdict = np.select(
        [twice.to_numpy(dtype=bool), has.to_numpy(dtype=bool)],
        [RunTwice.RAN_TWICE.value, RunTwice.RAN_ONCE.value],
        RunTwice.NO_JOURNAL.value,
    )
    fields = {
        "tool": rows["name"],
        "cid": rows["call_id"],
        "key": rows["key"],
        "status": rows["status"],
        "created": _clock(created),
        "updated": _clock(updated),
        "resumed": _clock(resumed),
    }
    detail = fill_first(
        rows.index,
        [
            (
                twice,
                "journal entry {key} was created at {created}, before the resume at {resumed}, "
                "and updated at {updated} ({status}) after it: {tool} ran in both processes; "
                "its side effect may have happened twice (ADK resumes a call at-least-once, "
                "with the same function-call id)",
            ),
            (
                has & updated.lt(resumed),
                "journal entry {key} was created and last updated ({status}, {updated}) before "
                "the resume at {resumed}: it shows the first run only (the second run wrote "
                "nothing to it)",
            ),
            (
                has,
                "journal entry {key} was created at {created}, after the resume at {resumed}: "
                "it shows the second run only (the first process left no entry before it died)",
            ),
            (
                pd.Series(journal is None, index=rows.index),
                "the evidence has no journal: nothing tells whether the first run of {tool} "
                "({cid}) had its side effect before the crash",
            ),
        ],
        fields,
        "no journal entry has function-call id {cid}: nothing tells whether the first run of "
        "{tool} had its side effect before the crash",
    )
    out = rows.assign(
        tool=rows["name"],
        called_at=rows["ts"],
        journal_key=rows["key"],
        journal_status=rows["status"],
        journal_created_at=created,
        journal_updated_at=updated,
        verdict=verdict,
        detail=detail,
    )
    return as_columns(
        out.sort_values(["resumed_at", "called_at"], kind="stable"), RUN_TWICE_COLUMNS
    )


def _entries(journal: pd.DataFrame | None) -> pd.DataFrame:
    """The journal per function-call id: its keys, the status last written, the first
    creation and the last update."""
    columns = ["key", "status", "created", "updated"]
    if journal is None or journal.empty:
        return pd.DataFrame(columns=columns, index=pd.Index([], dtype=object)).astype(
            {"created": _UTC, "updated": _UTC}
        )
    rows = journal.loc[journal["function_call_id"].notna()]
    rows = rows.assign(created_at=_utc(rows["created_at"]), updated_at=_utc(rows["updated_at"]))
    rows = rows.sort_values("updated_at", kind="stable")
    by_call = rows.groupby("function_call_id", sort=False)
    return pd.DataFrame(
        {
            "key": per_group(rows["key"].fillna("?"), rows["function_call_id"], sep=", "),
            "status": by_call["status"].last(),
            "created": by_call["created_at"].min(),
            "updated": by_call["updated_at"].max(),
        }
    )


CAUSE_WORDS: Mapping[str, str] = {
    Cause.CRASH_AND_RESUME.value: "a crash",
    Cause.HUMAN_APPROVAL.value: "a human approval",
}


def resumed_item(flow: str, resumed: pd.DataFrame, limit: int | None) -> Finding | None:
    """``<flow>/resumed-invocations`` (INFO): the invocations ADK resumed under their own id,
    one row each (:data:`RESUMED_COLUMNS`); None when there are none."""
    if resumed.empty:
        return None
    causes = resumed["cause"].str.split(", ").explode().value_counts()
    said = ", ".join(f"{n} after {CAUSE_WORDS.get(str(c), str(c))}" for c, n in causes.items())
    return Finding(
        f"{flow}/resumed-invocations",
        Severity.INFO,
        f"{len(resumed)} invocation(s) resumed under their own id ({said}): timed as segments",
        "ADK reuses an invocation's id when it resumes it (runners.py: a resumable app's "
        "invocation run again after its process died, or a long-running call answered by a "
        "person's function_response): one invocation then has segments with pauses between. "
        "Its latency is its active time (first to last record, less pause_ms), so sources that "
        "saw only some segments do not disagree; once it ended it is neither open nor an "
        "orphan.",
        "None for the pause itself; a crash-resumed invocation's calls are checked in "
        f"{flow}/calls-run-twice.",
        rows_of(resumed, list(RESUMED_COLUMNS), limit=limit),
        len(resumed),
    )


def run_twice_item(flow: str, twice: pd.DataFrame, limit: int | None) -> Finding | None:
    """``<flow>/calls-run-twice``: the calls ADK executed again after a crash
    (:data:`RUN_TWICE_COLUMNS`); CRITICAL when the journal shows one ran in both processes,
    WARNING when no journal tells, else INFO; None when there are none."""
    if twice.empty:
        return None
    counts = twice["verdict"].value_counts()
    both = int(counts.get(RunTwice.RAN_TWICE.value, 0))
    none = int(counts.get(RunTwice.NO_JOURNAL.value, 0))
    once = len(twice) - both - none
    severity = Severity.CRITICAL if both else Severity.WARNING if none else Severity.INFO
    tools = ", ".join(dict.fromkeys(twice["tool"].dropna().astype(str)))
    steps = []
    if both:
        steps.append(
            f"Check the side effect of each ran_twice call ({both}) with the downstream "
            "system (a charge, a message, a booking) and undo the duplicate."
        )
    if none:
        steps.append(
            f"For each no_journal call ({none}), ask the downstream system whether the first "
            "run's side effect happened."
        )
    steps.append(
        f"Make {tools or 'the tool'} idempotent: journal its intent before the side effect and "
        "look the entry up (by business key or function-call id) before acting again."
    )
    return Finding(
        f"{flow}/calls-run-twice",
        severity,
        f"{len(twice)} call(s) ADK ran again after a crash, with the same function-call id "
        f"({tools}): {both} ran twice by the journal, {once} ran once, {none} with no journal "
        "to tell",
        "ADK resumes a crashed invocation at-least-once (apps/_configs.py ResumabilityConfig; "
        "flows/llm_flows/core/_resume.py replays the call left unanswered): a call whose "
        "response came only after the resume was executed again by the new process, with the "
        "same function-call id. A journal entry created before the resume and updated after it "
        "shows the tool ran in both processes: its side effect may have happened twice.",
        " ".join(steps),
        rows_of(twice, list(RUN_TWICE_COLUMNS), limit=limit),
        len(twice),
    )
