"""The triage card (let the reported symptom choose the first evidence source): the
cheap check of every flow on one app's frames, each a line with its count, its severity and
the flow to open next, ordered by the symptom the user reports.

Each check runs the flow's own pure core on frames loaded once (no notebook, no second read):
a check whose evidence is missing is a line that says so, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.errors import IncidentkitError
from incidentkit.flows.common import Frames

LINE_COLUMNS = [
    *("check", "severity", "count", "title", "flow", "evidence", "detail", "session_id"),
    "keys",
]
"""One row per check: what was checked, how urgent (``CRITICAL``, ``WARNING``, ``INFO``,
``NOT_CHECKED``), how many rows it found, in words, the flow to open next, the evidence it
reads first, the session to open it on (the one-session flows need one) and the state keys to
judge there (``k1,k2``; the state check's lines only)."""
SEVERITY_RANK = {"CRITICAL": 0, "WARNING": 1, "INFO": 2, "NOT_CHECKED": 3}
CHECKS = (
    "open-past-timeout",
    "latency-cliff",
    "over-call-limit",
    "orphans",
    "dead-worker",
    "quiet-errors",
    "state-can-vanish",
    "overlapping-invocations",
    "growing-classes",
    "heap-growth",
)
"""Every check, in the order the card lists them without a symptom (severity first)."""


@dataclass(frozen=True)
class Symptom:
    """What a reported symptom opens first, and the order its card lists the checks in."""

    first_evidence: str
    order: tuple[str, ...]


SYMPTOMS: Mapping[str, Symptom] = {
    "spinner": Symptom(
        "the diagnostics log (run.start lines with no run.end), then the last event of those "
        "invocations in the event log, then two thread dumps a few seconds apart; not the "
        "trace UI: a stuck request's span is never exported",
        (
            *("open-past-timeout", "dead-worker", "latency-cliff", "orphans", "quiet-errors"),
            "over-call-limit",
        ),
    ),
    "slow": Symptom(
        "the spans (invocation, call_llm and execute_tool durations) and the diagnostics log's "
        "run.end ms, per minute: a change point says when it started",
        ("latency-cliff", "open-past-timeout", "dead-worker", "over-call-limit", "quiet-errors"),
    ),
    "cost": Symptom(
        "the diagnostics log's run.end llmCalls and the model spans' token usage, per "
        "invocation: a loop burns calls long before anything fails",
        ("over-call-limit", "latency-cliff", "quiet-errors"),
    ),
    "forgot": Symptom(
        "the event log's sessions where state can vanish (temp: keys; partial events; tool "
        "answers with no delta; overlapping invocations), then the session's dump and its "
        "state deltas (incidentkit session ID), then its stored state",
        ("state-can-vanish", "overlapping-invocations", "quiet-errors", "orphans"),
    ),
    "crash": Symptom(
        "the run ledger (RUNNING rows whose lease expired), then the event log's last events "
        "and the side-effect journal of those runs",
        (
            *("orphans", "dead-worker", "open-past-timeout", "growing-classes", "heap-growth"),
            "quiet-errors",
        ),
    ),
    "errors": Symptom(
        "the event log's error codes and the diagnostics log's model/tool/run.error and "
        "rx.undeliverable lines: many errors never become exceptions",
        ("quiet-errors", "open-past-timeout", "dead-worker", "over-call-limit", "orphans"),
    ),
    "restarts": Symptom(
        "two GC.class_histogram dumps an hour apart (which classes grow), then the ledger's "
        "orphans each restart left",
        ("growing-classes", "heap-growth", "orphans", "dead-worker", "open-past-timeout"),
    ),
}
"""The triage card: each symptom's first evidence and the checks it lists first."""


@dataclass(frozen=True)
class Profile:
    """The app's settings the checks need (from parameters, else ``[apps.<app>]``)."""

    client_timeout_s: float = 60.0
    max_llm_calls: int | None = None
    loop_exit_keys: tuple[str, ...] = ()
    terminal_agent: Any = None
    """The orphan check needs it; without it that line is NOT_CHECKED."""
    key_templates: Mapping[str, str] | None = None
    attempts_cap: int = 3


def _line(
    check: str,
    severity: str,
    count: int,
    title: str,
    flow: str,
    evidence: str,
    detail: str = "",
    session_id: str | None = None,
    keys: str | None = None,
) -> dict[str, Any]:
    return {
        "check": check,
        "severity": severity,
        "count": count,
        "title": title,
        "flow": flow,
        "evidence": evidence,
        "detail": detail,
        "session_id": session_id,
        "keys": keys,
    }


def _not_checked(check: str, flow: str, evidence: str, why: str) -> dict[str, Any]:
    return _line(check, "NOT_CHECKED", 0, f"not checked: {why}", flow, evidence)


def _latency(frames: Frames, as_of: pd.Timestamp, profile: Profile) -> list[dict[str, Any]]:
    from incidentkit.flows.latency_cliff.triage import triage_latency

    flow, evidence = "latency_cliff", "diagnostics log, spans, ledger, event log, thread dumps"
    report = triage_latency(frames, as_of=as_of, client_timeout_s=profile.client_timeout_s)
    if report.source is None:
        why = "no source times an invocation (no run.start, invocation span, run or event)"
        return [
            _not_checked("open-past-timeout", flow, evidence, why),
            _not_checked("latency-cliff", flow, evidence, why),
            _not_checked("dead-worker", "orphans", evidence, why),
        ]
    timeout = f"{profile.client_timeout_s:g} s client timeout"
    hangs, dead = report.hangs, report.orphans
    tools = hangs["tool"].dropna().value_counts()
    waiting = f", most waiting on {tools.index[0]}" if len(tools) else ""
    also = f"; {len(dead)} more belong to a dead worker (dead-worker line)" if len(dead) else ""
    open_line = _line(
        "open-past-timeout",
        "CRITICAL" if len(hangs) else "INFO",
        len(hangs),
        f"{len(hangs)} invocation(s) open past the {timeout}{waiting}{also}",
        flow,
        f"{report.open_source or report.source}",
    )
    return [open_line, _dead_line(report, timeout), _cliff_line(report, flow)]


def _dead_line(report: Any, timeout: str) -> dict[str, Any]:
    """The open invocations whose worker died: orphans, for the orphans flow."""
    from incidentkit.flows.latency_cliff.hangs import Orphaned

    dead = report.orphans
    evidence = "run ledger (leases), event log"
    if dead.empty:
        return _line(
            "dead-worker", "INFO", 0, "no open invocation of a dead worker", "orphans", evidence
        )
    reason = dead["orphan_reason"]
    owners = sorted(set(dead["owner"].dropna().astype(str)))
    why = []
    if reason.eq(Orphaned.LEASE_EXPIRED).any():
        whose = f" ({', '.join(owners)})" if owners else ""
        why.append(f"{int(reason.eq(Orphaned.LEASE_EXPIRED).sum())} ledger lease(s) expired{whose}")
    if reason.eq(Orphaned.REDRIVEN).any():
        why.append(f"{int(reason.eq(Orphaned.REDRIVEN).sum())} run(s) re-driven since")
    if reason.eq(Orphaned.SESSION_SILENT).any():
        why.append(
            f"{int(reason.eq(Orphaned.SESSION_SILENT).sum())} session(s) silent while the app "
            "went on (no ledger: presumed)"
        )
    return _line(
        "dead-worker",
        "WARNING",
        len(dead),
        f"{len(dead)} invocation(s) open past the {timeout} are orphans, not hangs: the "
        f"worker died ({'; '.join(why)})",
        "orphans",
        evidence,
    )


def _cliff_line(report: Any, flow: str) -> dict[str, Any]:
    """The latency change point, a cliff only where latency rose (the latency flow's rule),
    told in the measure that rose: every run's latency, an open one at its age."""
    if not report.has_cliff:
        return _line("latency-cliff", "INFO", 0, "no latency change point", flow, report.source)
    row = report.cliff.iloc[0]
    before = report.series.iloc[: report.cliff_index]
    after = report.series.iloc[report.cliff_index :]
    before = before.loc[~before["invocation_id"].isin(report.orphans["invocation_id"])]
    after = after.loc[~after["invocation_id"].isin(report.orphans["invocation_id"])]
    said = []
    for q in (0.95, 0.5):
        low, high = float(before["ms"].quantile(q)), float(after["ms"].quantile(q))
        if high > low:
            said.append(f"p{round(q * 100)} {low / 1000:.3g} s → {high / 1000:.3g} s")
    rose = said[0] if said else "latency rose"
    return _line(
        "latency-cliff",
        "WARNING",
        report.run_starts_since_cliff,
        f"latency rose at {pd.Timestamp(row['at']):%H:%M} UTC: {rose} (open invocations "
        "counted at their age)",
        flow,
        report.source,
    )


def _runaway(frames: Frames, as_of: pd.Timestamp, profile: Profile) -> dict[str, Any]:
    from incidentkit.flows.runaway.triage import triage_runaway

    flow = "runaway"
    report = triage_runaway(
        frames,
        as_of=as_of,
        max_llm_calls=profile.max_llm_calls,
        loop_exit_keys=profile.loop_exit_keys,
    )
    if report.source is None:
        return _not_checked(
            "over-call-limit", flow, "diagnostics log, spans, event log", "no model call counted"
        )
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
    return _line("over-call-limit", severity, hits + over, title, flow, report.source)


def _orphans(frames: Frames, as_of: pd.Timestamp, profile: Profile) -> dict[str, Any]:
    from incidentkit.flows.orphans.triage import classify_orphans

    flow, evidence = "orphans", "run ledger, event log, journal"
    if frames.runs.empty:
        return _not_checked("orphans", flow, evidence, "no ledger run of this app")
    if not profile.terminal_agent:
        return _not_checked("orphans", flow, evidence, "the app's profile names no terminal_agent")
    report = classify_orphans(
        frames.runs,
        frames.events,
        frames.calls,
        frames.responses,
        frames.journal,
        as_of=as_of,
        terminal_agent=profile.terminal_agent,
        key_templates=profile.key_templates,
        attempts_cap=profile.attempts_cap,
    )
    orphans, loops = len(report.orphans), len(report.crash_loops)
    title = f"{orphans} orphaned run(s) at as_of" + (f", {loops} crash loop(s)" if loops else "")
    severity = (
        "CRITICAL" if loops or len(report.duplicate_effects) else ("WARNING" if orphans else "INFO")
    )
    return _line("orphans", severity, orphans, title, flow, "run ledger")


def _errors(frames: Frames) -> dict[str, Any]:
    """The quiet-errors line: the session flow's errors that vanish. A run ``max_llm_calls``
    stopped failed, loudly (``session.errors.run_outcomes``): its errors are counted apart and
    left to the over-call-limit line."""
    from incidentkit.flows.runaway.limits import names_limit_error
    from incidentkit.flows.session.errors import EVENT_KIND, quiet, vanishing_errors

    flow = "session"
    errors = vanishing_errors(frames.events, frames.diagnostics, frames.calls, frames.runs)
    silent = quiet(errors)
    by_limit = names_limit_error(errors["error_code"]) | names_limit_error(errors["message"])
    coded = int(silent["kind"].eq(EVENT_KIND).sum())
    lost = int(silent["kind"].eq("rx.undeliverable").sum())
    loud = errors.loc[~errors.index.isin(silent.index)]
    limit = int(by_limit.loc[loud.index].sum())
    logged = len(loud) - limit
    title = (
        f"{coded} event(s) with an error code on runs that did not fail, {lost} undeliverable "
        f"error(s), {logged} logged model/tool/run error(s)"
    )
    if limit:
        stops = errors.loc[by_limit, "invocation_id"].nunique()
        title += f"; {limit} error(s) of {stops} run(s) maxLlmCalls stopped (over-call-limit)"
    severity = "WARNING" if len(silent) or logged else "INFO"
    first = silent if len(silent) else errors
    sessions = first["session_id"].dropna()
    return _line(
        "quiet-errors",
        severity,
        len(errors),
        title,
        flow,
        "event log, diagnostics log",
        session_id=str(sessions.iloc[0]) if len(sessions) else None,
    )


def _overlaps(frames: Frames) -> dict[str, Any]:
    from incidentkit.flows.vanished_state.overlaps import invocation_ranges, overlapping

    flow = "vanished_state"
    if frames.events.empty and frames.runs.empty:
        return _not_checked(
            "overlapping-invocations", flow, "event log, ledger", "no event and no ledger run"
        )
    pairs = overlapping(invocation_ranges(frames.events, frames.runs))
    sessions = pairs["session_id"].nunique()
    title = f"{len(pairs)} pair(s) of invocations overlapped on {sessions} session(s)"
    if len(pairs):
        title += f", e.g. session {pairs['session_id'].iloc[0]}"
    severity = "WARNING" if len(pairs) else "INFO"
    return _line(
        "overlapping-invocations",
        severity,
        len(pairs),
        title,
        flow,
        "event log, ledger",
        session_id=str(pairs["session_id"].iloc[0]) if len(pairs) else None,
    )


STATE_LINES = 5
"""The sessions where state can vanish the card lists per app, most suspicious first."""


def _state(frames: Frames, symptom: str | None) -> list[dict[str, Any]]:
    """The sessions where state can vanish (:mod:`incidentkit.flows.vanished_state.suspects`),
    each with the keys to judge there: a line per session (at most :data:`STATE_LINES`) for
    ``forgot`` or a stored value lost, WARNING; else one line for the record, INFO. With
    nothing found, what was checked."""
    from incidentkit.flows.vanished_state.suspects import state_suspects

    flow, evidence = "vanished_state", "event log (state deltas), stored state, ledger"
    if frames.events.empty:
        return [_not_checked("state-can-vanish", flow, evidence, "no stored event of this app")]
    found = state_suspects(
        frames.events,
        frames.calls,
        frames.responses,
        frames.state_writes,
        stored=frames.session_state,
        runs=frames.runs,
    )
    suspects = found.suspects
    if suspects.empty:
        if not found.keys:
            return [
                _not_checked(
                    "state-can-vanish",
                    flow,
                    evidence,
                    f"no key to examine: no session of the {found.sessions} holds or wrote a "
                    "state key the evidence keeps (a temp: key a store trimmed, or a direct "
                    "session.state write, leaves none); name the key the customer misses and "
                    "run vanished_state on their session",
                )
            ]
        return [
            _line(
                "state-can-vanish",
                "INFO",
                0,
                f"no session where state can vanish: {found.checked()}",
                flow,
                evidence,
            )
        ]
    lost = suspects["differing_keys"].map(len).gt(0)
    if symptom != "forgot" and not lost.any():
        top = suspects.iloc[0]
        return [
            _line(
                "state-can-vanish",
                "INFO",
                len(suspects),
                f"{len(suspects)} session(s) where state can vanish (of {found.sessions}); "
                f"the most suspicious, {top['session_id']}: {top['why']}",
                flow,
                evidence,
                session_id=str(top["session_id"]),
                keys=",".join(top["keys"]) or None,
            )
        ]
    lines = []
    shown = suspects.head(STATE_LINES)
    for n, row in enumerate(shown.to_dict("records"), start=1):
        keys = ",".join(row["keys"])
        lines.append(
            _line(
                "state-can-vanish",
                "WARNING",
                int(row["signals"]),
                f"state can vanish in session {row['session_id']} (#{n} of {len(suspects)} "
                f"among {found.sessions} session(s), score {row['score']}): {row['why']}",
                flow,
                evidence,
                detail=found.checked(),
                session_id=str(row["session_id"]),
                keys=keys or None,
            )
        )
    return lines


JVM_ARRAYS = {
    "[B": "byte[]",
    "[C": "char[]",
    "[I": "int[]",
    "[J": "long[]",
    "[S": "short[]",
    "[Z": "boolean[]",
    "[D": "double[]",
    "[F": "float[]",
}


def readable_class(name: str) -> str:
    """A class name as people read it: ``[B`` → ``byte[] ([B)``, ``[Ljava.lang.Object;`` →
    ``java.lang.Object[]``."""
    if name in JVM_ARRAYS:
        return f"{JVM_ARRAYS[name]} ({name})"
    if name.startswith("[L") and name.endswith(";"):
        return f"{name[2:-1]}[]"
    return name


def _growth(histograms: pd.DataFrame | None) -> dict[str, Any]:
    flow, evidence = "overview", "GC.class_histogram dumps"
    if histograms is None or histograms.empty:
        return _not_checked("growing-classes", flow, evidence, "no class histograms")
    from incidentkit.flows.overview.growth import growing_classes, growth_headline

    growing = growing_classes(histograms)
    if growing.empty:
        return _line(
            "growing-classes", "INFO", 0, "no class grows between the histograms", flow, evidence
        )
    top = growing.iloc[0]
    title = f"{len(growing)} class(es) grow between the histograms"
    headline = growth_headline(growing)
    if headline:
        title += f": {headline}"
    title += f"; most bytes: {readable_class(str(top['class']))} (+{int(top['bytes_growth']):,})"
    return _line("growing-classes", "WARNING", len(growing), title, flow, evidence)


def _heap(heap: pd.DataFrame | None, old_objects: pd.DataFrame | None) -> dict[str, Any]:
    flow, evidence = "overview", "JFR recording (heap after GC, old-object samples)"
    if heap is None or heap.empty:
        return _not_checked("heap-growth", flow, evidence, "no JFR heap summaries")
    from incidentkit.flows.overview.heap import (
        heap_after_gc,
        heap_text,
        leak_candidates,
        old_object_text,
    )

    trend = heap_after_gc(heap)
    growing = trend.loc[trend["growing"]]
    if growing.empty:
        return _line("heap-growth", "INFO", 0, heap_text(trend), flow, evidence)
    title = heap_text(trend)
    leaks = leak_candidates(old_objects) if old_objects is not None else None
    old = old_object_text(leaks) if leaks is not None else None
    if old:
        title += f"; old objects: {old}"
    return _line("heap-growth", "WARNING", len(growing), title, flow, evidence)


CheckFn = Callable[[], list[dict[str, Any]]]


def triage_card(
    frames: Frames,
    *,
    as_of: pd.Timestamp,
    profile: Profile,
    histograms: pd.DataFrame | None = None,
    symptom: str | None = None,
    jfr_heap: pd.DataFrame | None = None,
    jfr_old_objects: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The card (:data:`LINE_COLUMNS`), one line per check: the symptom's order when one is
    given (its checks first), else by severity; a check that fails on odd evidence is a
    NOT_CHECKED line naming the error, never an exception."""
    steps: list[tuple[tuple[str, ...], str, CheckFn]] = [
        (("open-past-timeout", "latency-cliff", "dead-worker"), "latency_cliff",
         lambda: _latency(frames, as_of, profile)),
        (("over-call-limit",), "runaway", lambda: [_runaway(frames, as_of, profile)]),
        (("orphans",), "orphans", lambda: [_orphans(frames, as_of, profile)]),
        (("quiet-errors",), "session", lambda: [_errors(frames)]),
        (("state-can-vanish",), "vanished_state", lambda: _state(frames, symptom)),
        (("overlapping-invocations",), "vanished_state", lambda: [_overlaps(frames)]),
        (("growing-classes",), "overview", lambda: [_growth(histograms)]),
        (("heap-growth",), "overview", lambda: [_heap(jfr_heap, jfr_old_objects)]),
    ]  # fmt: skip
    lines: list[dict[str, Any]] = []
    for checks, flow, run in steps:
        try:
            lines += run()
        except IncidentkitError as err:  # a check on odd evidence: say so, keep the card
            lines += [_not_checked(c, flow, "", f"{type(err).__name__}: {err}") for c in checks]
    return ordered(pd.DataFrame(lines, columns=LINE_COLUMNS), symptom)


def ordered(card: pd.DataFrame, symptom: str | None) -> pd.DataFrame:
    """The card's lines in reading order: the symptom's checks first (when one is given),
    then by severity, then in the order of :data:`CHECKS`."""
    keys = pd.DataFrame(
        {
            "rank": card["severity"].map(SEVERITY_RANK),
            "position": card["check"].map({c: k for k, c in enumerate(CHECKS)}),
        }
    )
    if symptom:
        first = {c: k for k, c in enumerate(SYMPTOMS[symptom].order)}
        keys.insert(0, "asked", card["check"].map(first).fillna(len(first)))
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return card.loc[order].reset_index(drop=True)
