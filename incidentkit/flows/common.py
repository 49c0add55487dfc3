"""Steps every flow shares: the app and the moment its settings start from
(:mod:`incidentkit.flows.settings` resolves the rest), the evidence it reads, its rejects."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import FRAME_SOURCES, Evidence
from incidentkit.findings import iso_text
from incidentkit.flows import FLOWS
from incidentkit.flows.settings import Found
from incidentkit.frames import empty
from incidentkit.manifest import Window, run_as_of_from, run_stale_after
from incidentkit.times import parse_duration, utc_timestamp


def begin(
    flow: str,
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str,
    as_of: object,
) -> tuple[Evidence, Found]:
    """What every flow's setup starts with: the incident opened and narrowed to its app, and
    the moment it is judged at (:func:`judge`). Returns the evidence (read up to as_of) and
    what was found, with where from: the app and the moment judged (the settings' ``as_of``:
    :func:`~incidentkit.flows.settings.resolve` takes it from there)."""
    incident = opened(flow, evidence, as_of=as_of)
    app, app_from = resolve_app(incident, app_name)
    incident = for_app(incident, app)
    incident, moment = judge(flow, incident, as_of)
    return incident, Found(flow, app, app_from, moment.at, moment.source)


WINDOW_END = "the window's end"
EVIDENCE_END = "the evidence's end"
PARAMETER = "parameter"
"""Where a flow's as_of comes from (``settings_from["as_of"]``): the manifest window's end, the
evidence's last record (no window), or the parameter; ``incidentkit run`` names its own
(``--as-of``, ``-p as_of``, the run's start for a relative window)."""
STALE_AFTER = pd.Timedelta(hours=1)
"""How far as_of may lie past the evidence's end when the manifest has no window (with one:
the window's length) before the evidence counts as stale."""


@dataclass(frozen=True)
class AsOf:
    """The moment a flow judges ages at (leases, open invocations, anything "at as_of").

    ``asked`` is as_of as given or defaulted, ``origin`` where it came from; ``at`` the moment
    judged: ``asked``, or the evidence's end (``end``, its last record in the flow's sources)
    when ``asked`` lies past it by more than the stale limit (:func:`stale_limit`). A lease
    that expired after the evidence ended is not an orphan the evidence can show.
    """

    asked: pd.Timestamp
    origin: str
    at: pd.Timestamp
    end: pd.Timestamp | None = None

    @property
    def behind(self) -> pd.Timedelta | None:
        """How far as_of lies past the evidence's end (None: no end known)."""
        return None if self.end is None else self.asked - self.end

    @property
    def source(self) -> str:
        """Where the moment judged comes from, for ``settings_from["as_of"]`` and the report's
        first screen: the origin, or why ages are judged at the evidence's end."""
        if self.at == self.asked or self.behind is None:
            return self.origin
        return (
            f"{EVIDENCE_END}: the evidence ends {span_text(self.behind)} before as_of "
            f"{iso_text(self.asked)} ({self.origin}); ages judged at its end"
        )


def judge(
    flow: str,
    evidence: Evidence,
    as_of: object,
    *,
    sections: Iterable[str] | None = None,
    latest: Callable[[Evidence], pd.Timestamp | None] | None = None,
) -> tuple[Evidence, AsOf]:
    """The one rule for every flow's as_of, and the moment its ages are judged at.

    ``as_of`` given: that moment (its origin from the runner, else "parameter"), the evidence
    read up to it; ages are judged at the evidence's last record (in the flow's ``sections``)
    when as_of lies past it by more than the stale limit. Empty: the manifest window's end,
    else the evidence's last record; never the clock (``--as-of now`` asks for that).
    ``latest`` finds that last record in place of :func:`last_record` over the sections
    (the engine card asks the database, loading nothing).
    Returns the evidence up to as_of and the :class:`AsOf`.
    """
    read = tuple(FLOWS[flow].sections if sections is None else sections)
    if latest is None:

        def latest(ev: Evidence) -> pd.Timestamp | None:
            return last_record(ev, read)

    if _blank(as_of):
        window = evidence.filters.window
        if window is not None:
            return evidence, AsOf(window.end, WINDOW_END, window.end)
        end = latest(evidence)
        if end is None:
            raise ParameterError(
                "as_of is empty, the manifest has no window, and the evidence holds no row to "
                "take it from",
                value=as_of,
                fix="give the moment to judge, e.g. -p as_of 2026-11-29T04:00:00Z or "
                "--as-of now, or a window in the manifest",
            )
        return _judged(evidence, AsOf(end, f"{EVIDENCE_END} (no window)", end, end), end)
    asked = utc_timestamp(as_of, what="as_of")
    cut = up_to(evidence, asked)
    end = latest(cut)
    limit = stale_limit(cut.manifest.filters.window, run_stale_after())
    at = end if end is not None and asked - end > limit else asked
    return _judged(cut, AsOf(asked, run_as_of_from() or PARAMETER, at, end), end)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


_READ_UNTIL: weakref.WeakKeyDictionary[Evidence, pd.Timestamp] = weakref.WeakKeyDictionary()
"""Evidence whose rows (in the sources its flow reads) all lie at or before the moment kept
here: :func:`up_to` that moment changes nothing, so it reads nothing again."""


def _judged(evidence: Evidence, moment: AsOf, end: pd.Timestamp | None) -> tuple[Evidence, AsOf]:
    if end is not None:
        _READ_UNTIL[evidence] = end
    return evidence, moment


def stale_limit(window: Window | None, stale_after: pd.Timedelta | None = None) -> pd.Timedelta:
    """How far as_of may lie past the evidence's end: ``stale_after`` (``--stale-after``), else
    the window's length, else :data:`STALE_AFTER`. Within it the evidence is fresh (a quiet
    spell); past it, stale (``run/stale-evidence``) and ages are judged at its end."""
    if stale_after is not None:
        return stale_after
    return window.end - window.start if window is not None else STALE_AFTER


def last_record(evidence: Evidence, sections: Iterable[str]) -> pd.Timestamp | None:
    """The latest time of any row of the ``sections`` sources of ``evidence`` (None when
    they hold none); a source that cannot be read is left out (the flow reports it)."""
    from incidentkit.coverage import TIME_COLUMNS
    from incidentkit.errors import IncidentkitError

    wanted = set(sections)
    latest: pd.Timestamp | None = None
    failed: set[str] = set()
    for name, section in FRAME_SOURCES.items():
        if section not in wanted or section in failed or not evidence.has(section):
            continue
        try:
            column = evidence.frame(name)[TIME_COLUMNS[name][1]]
        except IncidentkitError:
            failed.add(section)
            continue
        top = column.max() if len(column) else None
        if top is not None and not pd.isna(top) and (latest is None or top > latest):
            latest = pd.Timestamp(top)
    return latest


def span_text(delta: pd.Timedelta) -> str:
    """A duration as people say it, to its two largest units: "7 d 12 h", "5 min 3 s"."""
    seconds = max(int(delta.total_seconds()), 0)
    parts: list[tuple[int, str]] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append((count, unit))
    shown = [f"{count} {unit}" for count, unit in parts[:2] if count]
    return " ".join(shown) or "0 s"


def baseline_window(text: object, as_of: pd.Timestamp) -> Window | None:
    """The baseline window: empty means none (the incident window's own invocations); a
    duration (``7d``) ends at ``as_of``; ``START/END`` gives both ends in UTC."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    raw = str(text).strip()
    fix = 'give a duration before as_of such as "7d" or "24h", or START/END in UTC'
    if "/" in raw:
        start_text, _, end_text = raw.partition("/")
        start = utc_timestamp(start_text.strip(), what="baseline start")
        end = utc_timestamp(end_text.strip(), what="baseline end")
        if end <= start:
            raise ParameterError("baseline ends before it starts", value=raw, fix=fix)
        return Window(start, end)
    span = parse_duration(raw, problem="baseline is not a duration or a START/END window", fix=fix)
    return Window(as_of - span, as_of + pd.Timedelta(microseconds=1))


def opened(
    flow: str, evidence: Evidence | str | os.PathLike[str], *, as_of: object = None
) -> Evidence:
    """The incident a flow's ``evidence`` parameter names (an empty one is refused), a relative
    manifest window ending at ``as_of`` (the flow's parameter; empty: now); a filter of its
    manifest that names nothing the evidence holds is refused too
    (:func:`~incidentkit.coverage.check_filters`)."""
    if isinstance(evidence, str) and not evidence.strip():
        raise ParameterError(
            "evidence is empty",
            value=evidence,
            fix=f"give the incident's evidence.toml or its folder: incidentkit run {flow} "
            "--evidence PATH (or set evidence in the notebook's first cell)",
        )
    from incidentkit.coverage import check_filters
    from incidentkit.evidence import open_evidence

    if isinstance(evidence, Evidence):
        incident = evidence
    else:
        anchor = None if _blank(as_of) else utc_timestamp(as_of, what="as_of")
        incident = open_evidence(evidence, as_of=anchor)
    check_filters(incident)
    return incident


def resolve_as_of(
    as_of: object, evidence: Evidence, *, sections: Iterable[str] | None = None
) -> pd.Timestamp:
    """``as_of`` as a UTC timestamp; empty means the end of the evidence window, else the last
    record of the ``sections`` sources (default: every one); with neither, a ParameterError.
    :func:`judge` also says when ages are judged at the evidence's end."""
    if not _blank(as_of):
        return utc_timestamp(as_of, what="as_of")
    every = tuple(evidence.sources) if sections is None else tuple(sections)
    _, moment = judge("", evidence, as_of, sections=every)
    return moment.asked


def up_to(evidence: Evidence, as_of: pd.Timestamp) -> Evidence:
    """``evidence`` with its window ending at ``as_of`` (a later window end is cut): nothing
    after the moment judged is seen. Evidence judged at its own end is kept as it is (its rows
    all lie before that end: nothing to cut, nothing to read again)."""
    window = evidence.filters.window
    end = as_of + pd.Timedelta(microseconds=1)
    if window is None or window.end <= end or window.start >= end:
        return evidence
    read_until = _READ_UNTIL.get(evidence)
    if read_until is not None and as_of >= read_until:
        return evidence
    return evidence.narrowed(replace(evidence.filters, window=Window(window.start, end)))


@dataclass(frozen=True)
class Frames:
    """The canonical frames the flows read; a source that is absent is an empty frame."""

    runs: pd.DataFrame = field(default_factory=partial(empty, "runs"))
    events: pd.DataFrame = field(default_factory=partial(empty, "events"))
    calls: pd.DataFrame = field(default_factory=partial(empty, "calls"))
    responses: pd.DataFrame = field(default_factory=partial(empty, "responses"))
    state_writes: pd.DataFrame = field(default_factory=partial(empty, "state_writes"))
    session_state: pd.DataFrame = field(default_factory=partial(empty, "session_state"))
    journal: pd.DataFrame = field(default_factory=partial(empty, "journal"))
    spans: pd.DataFrame = field(default_factory=partial(empty, "spans"))
    diagnostics: pd.DataFrame = field(default_factory=partial(empty, "diagnostics"))
    threads: pd.DataFrame = field(default_factory=partial(empty, "threads"))


def frames_of(evidence: Evidence, names: Iterable[str]) -> Frames:
    """The ``names`` frames of ``evidence`` (only those: others stay empty and unread); a frame
    whose section the manifest lacks is empty."""
    return Frames(
        **{
            name: evidence.frame(name) if evidence.has(FRAME_SOURCES[name]) else empty(name)
            for name in names
        }
    )


def log_context(evidence: Evidence, runs: pd.DataFrame, as_of: pd.Timestamp) -> Evidence:
    """The evidence over ``[earliest run start, as_of]`` (the app filter kept).

    The evidence itself when its window already is that span (no second read), else the same
    sources re-read with that window.
    """
    starts = runs["started_at"].dropna()
    if starts.empty or starts.min() >= as_of:
        return evidence
    window = Window(starts.min(), as_of + pd.Timedelta(microseconds=1))
    current = evidence.filters.window
    if current is not None and current.start <= window.start and current.end <= window.end:
        return evidence  # already covers every run's start and holds nothing after as_of
    return evidence.narrowed(replace(evidence.filters, window=window))


class Judged(Protocol):
    """A flow's settings as its findings record them: judged at ``as_of``, each value with
    where it came from (:class:`~incidentkit.flows.settings.FlowSettings`)."""

    @property
    def as_of(self) -> pd.Timestamp: ...

    @property
    def sources(self) -> Mapping[str, str]: ...

    def as_dict(self) -> dict[str, object]: ...


def findings_context(
    evidence: Evidence, settings: Judged, sections: Iterable[str]
) -> dict[str, Any]:
    """What a flow's findings record beside its report: the incident's title, its window (cut
    at ``as_of``), the rejects of the flow's sources, and the settings with where each came
    from (keywords of the flow's ``*_findings`` builder). ``parameters`` also carries
    ``evidence_notes`` (:func:`evidence_notes`) when there are any: the report's first screen
    shows them."""
    window = evidence.filters.window
    read = tuple(sections)
    notes = evidence_notes(evidence, read)
    return {
        "title": evidence.title,
        "window": None if window is None else (window.start, min(window.end, settings.as_of)),
        "rejects": flow_rejects(evidence, read),
        "parameters": {
            **settings.as_dict(),
            "settings_from": dict(settings.sources),
            **({"evidence_notes": notes} if notes else {}),
        },
    }


def evidence_notes(evidence: Evidence, sections: Iterable[str]) -> list[str]:
    """What a reader must know about the evidence before the verdict, for the first screen:
    that the window (for the app, sessions, invocations chosen) holds no row of the
    ``sections`` sources read, though they hold rows elsewhere (a warning: a quiet night is
    not an error). Sources that cannot be read are left out (their rejects say why)."""
    from incidentkit.coverage import window_note
    from incidentkit.errors import IncidentkitError

    frames: dict[str, pd.DataFrame] = {}
    wanted = set(sections)
    for name, section in FRAME_SOURCES.items():
        if section in wanted and evidence.has(section) and name in _ROW_FRAMES:
            try:
                frames[name] = evidence.frame(name)
            except IncidentkitError:
                continue
    note = window_note(evidence, frames)
    return [] if note is None else [note]


_ROW_FRAMES = frozenset(
    ("runs", "events", "journal", "spans", "diagnostics", "threads", "class_histograms")
)
"""The frames whose rows say the window holds something (the events section's other frames
and a JFR recording's follow its events or file)."""


def flow_rejects(evidence: Evidence, sections: Iterable[str]) -> pd.DataFrame:
    """Rejected rows of the sources a flow reads (other sources do not weaken its verdict)."""
    return evidence.rejects_of(sections).reset_index(drop=True)


def resolve_app(evidence: Evidence, given: str) -> tuple[str, str]:
    """The app a flow sweeps and where it came from.

    The parameter if given; else the manifest's ``app_name``; else the one app the ledger
    holds; else, with an empty ledger, the manifest's one ``[apps.X]`` profile. Otherwise a
    ParameterError that lists the apps found.
    """
    if given and given.strip():
        return given.strip(), "parameter"
    if evidence.filters.app_name:
        return evidence.filters.app_name, "manifest app_name"
    held, where = ledger_apps(evidence), "the ledger"
    if not evidence.has("ledger"):  # no ledger: the apps the event log or the plugin log name
        held, where = logged_apps(evidence)
    if len(held) == 1:
        return held[0], f"the only app in {where}"
    if not held and len(evidence.manifest.apps) == 1:
        return next(iter(evidence.manifest.apps)), "the manifest's only [apps.X] profile"
    raise ParameterError(
        "app_name is empty and the evidence does not say which app to sweep",
        value=given,
        fix=f"{where} holds {', '.join(held) or 'no run'}; give -p app_name NAME (in a "
        "notebook: app_name in its parameters cell), or app_name = ... at the top of the "
        "manifest",
    )


def ledger_apps(evidence: Evidence) -> list[str]:
    """The apps of the ledger's runs (read without the app filter), sorted."""
    return _apps(_all_runs(evidence))


def logged_apps(evidence: Evidence) -> tuple[list[str], str]:
    """The apps the event log names, else the diagnostics log (read without the app filter),
    and which of the two it was."""
    unfiltered = evidence.narrowed(replace(evidence.filters, app_name=None))
    for section, frame, where in (
        ("events", "events", "the event log"),
        ("diagnostics", "diagnostics", "the diagnostics log"),
    ):
        if evidence.has(section):
            apps = _apps(unfiltered.frame(frame))
            if apps:
                return apps, where
    return [], "the evidence"


def _all_runs(evidence: Evidence) -> pd.DataFrame:
    if not evidence.has("ledger"):
        return pd.DataFrame({"app_name": pd.Series(dtype=object)})
    return evidence.narrowed(replace(evidence.filters, app_name=None)).runs


def _apps(runs: pd.DataFrame) -> list[str]:
    return sorted(str(app) for app in runs["app_name"].dropna().unique())


def for_app(evidence: Evidence, app: str) -> Evidence:
    """The evidence narrowed to ``app``. An app that no source names at all is refused with
    the apps they do name and the closest one; an app with no row in the window is not (the
    findings' first screen says so: :func:`evidence_notes`)."""
    narrowed = (
        evidence
        if evidence.filters.app_name == app
        else evidence.narrowed(replace(evidence.filters, app_name=app))
    )
    section = next((s for s in ("ledger", "events", "diagnostics") if narrowed.has(s)), None)
    frame = {"ledger": "runs", "events": "events", "diagnostics": "diagnostics"}.get(section or "")
    if frame is not None and narrowed.frame(frame).empty:  # read anyway: the flow needs it
        check_app(narrowed, app)
    return narrowed


def check_app(evidence: Evidence, app: str) -> None:
    """Refuse an app that no source of ``evidence`` names (in no window), with the apps they
    do name and the closest one."""
    from incidentkit.coverage import require_named

    require_named(
        evidence,
        "app_name",
        [app],
        fix="give -p app_name with one of those apps (in a notebook: app_name in its "
        "parameters cell)",
    )


def notes_view(notes: Iterable[str]) -> Any:
    """What a flow cannot tell from the sources present, as a Markdown list for the notebook
    ("Every source is present." when nothing is missing); a note can quote evidence, so each
    is :func:`~incidentkit.report.markdown_text`."""
    from incidentkit.report import MarkdownView, markdown_text

    listed = "\n".join(f"- {markdown_text(note)}" for note in notes)
    return MarkdownView(listed or "Every source is present.")
