"""Steps every flow shares: its parameters resolved against the evidence, its rejects."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import FRAME_SOURCES, Evidence
from incidentkit.frames import empty
from incidentkit.manifest import Window
from incidentkit.times import utc_timestamp


def begin(
    flow: str,
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str,
    as_of: Any,
    now_without_window: bool = False,
) -> tuple[Evidence, str, dict[str, Any], dict[str, str]]:
    """What every flow's setup starts with: the incident opened and narrowed to its app, and
    ``as_of`` resolved. Returns the evidence, the app, the values so far (``as_of``) and where
    each came from (``app_name``, ``as_of``).

    ``now_without_window``: with no ``as_of`` and no window, judge at the current time (a flow
    that judges nothing by age, such as the runaway flow, reads everything stored so far)."""
    incident = opened(flow, evidence)
    app, app_from = resolve_app(incident, app_name)
    incident = for_app(incident, app)
    blank = as_of is None or (isinstance(as_of, str) and not as_of.strip())
    if blank and now_without_window and incident.filters.window is None:
        now = pd.Timestamp.now(tz="UTC").ceil("s")  # rounded up: nothing stored so far is cut
        at, at_from = now, "now (the manifest has no window)"
    else:
        at = resolve_as_of(as_of, incident)
        at_from = "the window's end" if blank else "parameter"
    sources = {"app_name": app_from, "as_of": at_from}
    return incident, app, {"as_of": at}, sources


def baseline_window(text: Any, as_of: pd.Timestamp) -> Window | None:
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
    try:
        span: pd.Timedelta | None = pd.Timedelta(raw)
    except ValueError:
        span = None
    if span is None or pd.isna(span) or span <= pd.Timedelta(0):
        raise ParameterError("baseline is not a duration or a START/END window", value=raw, fix=fix)
    return Window(as_of - span, as_of + pd.Timedelta(microseconds=1))


def set_baseline(
    values: dict[str, Any], sources: dict[str, str], baseline: Any, baseline_engine: Any
) -> None:
    """Resolve the ``baseline`` and ``baseline_engine`` parameters into a flow's settings
    (``values["as_of"]`` resolved first), with where each came from."""
    window = baseline_window(baseline, values["as_of"])
    values["baseline"] = (
        None if window is None else f"{window.start.isoformat()}/{window.end.isoformat()}"
    )
    sources["baseline"] = "parameter" if window is not None else "default"
    values["baseline_engine"] = baseline_flag(baseline_engine)
    sources["baseline_engine"] = "parameter" if baseline_engine is not True else "default"


def baseline_flag(value: Any) -> bool:
    """The ``baseline_engine`` parameter: true computes a baseline in the engine where the
    source allows it, false loads its frames into pandas."""
    if not isinstance(value, bool):
        raise ParameterError(
            "baseline_engine is not true or false",
            value=value,
            fix="give -p baseline_engine true (where the data lives) or false (load into pandas)",
        )
    return value


def opened(flow: str, evidence: Evidence | str | os.PathLike[str]) -> Evidence:
    """The incident a flow's ``evidence`` parameter names (an empty one is refused)."""
    if isinstance(evidence, str) and not evidence.strip():
        raise ParameterError(
            "evidence is empty",
            value=evidence,
            fix=f"give the incident's evidence.toml or its folder: incidentkit run {flow} "
            "--evidence PATH (or set evidence in the notebook's first cell)",
        )
    from incidentkit.evidence import open_evidence

    return evidence if isinstance(evidence, Evidence) else open_evidence(evidence)


def resolve_as_of(as_of: Any, evidence: Evidence) -> pd.Timestamp:
    """``as_of`` as a UTC timestamp; empty means the end of the evidence window."""
    if as_of is None or (isinstance(as_of, str) and not as_of.strip()):
        window = evidence.filters.window
        if window is None:
            raise ParameterError(
                "as_of is empty and the manifest has no window to take it from",
                value=as_of,
                fix="give the sweep time, e.g. -p as_of 2026-11-29T04:00:00Z "
                "(a scheduled report passes the time of the run)",
            )
        return window.end
    return utc_timestamp(as_of, what="as_of")


def up_to(evidence: Evidence, as_of: pd.Timestamp) -> Evidence:
    """``evidence`` with its window ending at ``as_of`` (a later window end is cut): nothing
    after the moment judged is seen."""
    window = evidence.filters.window
    end = as_of + pd.Timedelta(microseconds=1)
    if window is None or window.end <= end or window.start >= end:
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


def findings_context(
    evidence: Evidence, settings: Settings, sections: Iterable[str]
) -> dict[str, Any]:
    """What a flow's findings record beside its report: the incident's title, its window (cut
    at ``as_of``), the rejects of the flow's sources, and the settings with where each came
    from (keywords of the flow's ``*_findings`` builder)."""
    window = evidence.filters.window
    return {
        "title": evidence.title,
        "window": None if window is None else (window.start, min(window.end, settings["as_of"])),
        "rejects": flow_rejects(evidence, sections),
        "parameters": {**settings.as_dict(), "settings_from": dict(settings.sources)},
    }


def flow_rejects(evidence: Evidence, sections: Iterable[str]) -> pd.DataFrame:
    """Rejected rows of the sources a flow reads (other sources do not weaken its verdict)."""
    return evidence.rejects_of(sections).reset_index(drop=True)


_EMPTY: tuple[Any, ...] = (None, "", 0, (), [], {})


@dataclass(frozen=True)
class Settings:
    """A flow's resolved parameters: the app it sweeps, each value, and where it came from.

    ``sources`` says, per name, "parameter" (given to the notebook), "[apps.<app>]" (the
    manifest's profile), "default", or how the app was found. Findings and the report show both.
    """

    flow: str
    app_name: str
    values: Mapping[str, Any]
    sources: Mapping[str, str]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def as_dict(self) -> dict[str, Any]:
        """The values with the app first, as findings.json records them."""
        return {"app_name": self.app_name, **self.values}

    def table(self) -> pd.DataFrame:
        """One row per setting, for the notebook: name, value, from where."""
        rows = [("app_name", self.app_name, self.sources["app_name"])]
        rows += [(name, value, self.sources[name]) for name, value in self.values.items()]
        return pd.DataFrame(rows, columns=["setting", "value", "from"]).astype({"value": object})


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
    """The evidence narrowed to ``app``; a filter that leaves no run says so."""
    narrowed = (
        evidence
        if evidence.filters.app_name == app
        else evidence.narrowed(replace(evidence.filters, app_name=app))
    )
    if not narrowed.has("ledger"):
        _logged_app(evidence, narrowed, app)
    elif narrowed.runs.empty:
        every = _all_runs(evidence)  # read once, for both the count and the apps
        if len(every):
            raise ParameterError(
                f"0 of {len(every)} ledger runs are of app {app!r}; the ledger holds: "
                f"{', '.join(_apps(every))}",
                value=app,
                fix="give -p app_name with one of those apps",
            )
    return narrowed


def _logged_app(evidence: Evidence, narrowed: Evidence, app: str) -> None:
    """With no ledger: an app the event log (else the plugin log) never names is refused,
    with the apps it does name (a typo must not read as an empty incident)."""
    for section in ("events", "diagnostics"):
        if narrowed.has(section):
            if narrowed.frame(section).empty:
                held, where = logged_apps(evidence)
                if held and app not in held:
                    raise ParameterError(
                        f"no row of {where} is of app {app!r}; {where} holds: {', '.join(held)}",
                        value=app,
                        fix="give -p app_name with one of those apps",
                    )
            return


def setting(
    evidence: Evidence,
    flow: str,
    app: str,
    name: str,
    given: Any,
    *,
    default: Any = _EMPTY,
) -> tuple[Any, str]:
    """One setting of ``flow`` for ``app``: the parameter if given, else the app's profile,
    else ``default``; with none of them a ParameterError naming the key and its section."""
    if given not in _EMPTY:
        return given, "parameter"
    profile = evidence.manifest.apps.get(app, {})
    if name in profile:
        return profile[name], f"[apps.{app}]"
    if default is not _EMPTY:
        return default, "default"
    from incidentkit.manifest import PROFILE_KEYS

    raise ParameterError(
        f"the {flow} flow needs {name} for app {app!r}, and neither the parameters nor the "
        f"manifest's [apps.{app}] profile give it",
        value=given,
        fix=f"add {name} to [apps.{app}] in the manifest ({PROFILE_KEYS[name]}), or give "
        f"-p {name} ...",
    )


def notes_view(notes: Iterable[str]) -> Any:
    """What a flow cannot tell from the sources present, as a Markdown list for the notebook
    ("Every source is present." when nothing is missing); a note can quote evidence, so each
    is :func:`~incidentkit.report.markdown_text`."""
    from incidentkit.report import MarkdownView, markdown_text

    listed = "\n".join(f"- {markdown_text(note)}" for note in notes)
    return MarkdownView(listed or "Every source is present.")
