"""One incident's evidence: the manifest's sources, loaded lazily into canonical frames."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from incidentkit import cache, progress
from incidentkit.frames import empty, spec_of
from incidentkit.manifest import Filters, Manifest, SourceSpec, Window, load_manifest
from incidentkit.sources.loaded import Loaded, concat_rejects
from incidentkit.sources.parquet import SECTION_FRAMES, narrowed
from incidentkit.sources.registry import loader_for

FRAME_SOURCES: Mapping[str, str] = {
    "runs": "ledger",
    "events": "events",
    "calls": "events",
    "responses": "events",
    "state_writes": "events",
    "session_state": "events",
    "journal": "journal",
    "spans": "spans",
    "diagnostics": "diagnostics",
    "threads": "threads",
    "class_histograms": "histograms",
    "jfr_samples": "jfr",
    "jfr_allocations": "jfr",
    "jfr_old_objects": "jfr",
    "jfr_heap": "jfr",
    "jfr_locks": "jfr",
}
"""Which manifest section produces each canonical frame."""


class Evidence:
    """The frames of one incident. Each source is read on first use, then kept.

    Filters (window, app, sessions, invocations) come from the manifest and may be narrowed by
    the caller; database sources apply them in SQL.
    """

    def __init__(
        self,
        manifest: Manifest,
        *,
        filters: Filters | None = None,
        environ: Mapping[str, str] | None = None,
        wider: Evidence | None = None,
        keep: bool = False,
        run: str | None = None,
    ) -> None:
        self.manifest = manifest
        self.filters = filters or manifest.filters
        self._environ = environ
        self._wider = wider
        self._keep = keep or cache.keep_all()
        """Keep every parse in the cache, however quick (others will read it: ``run all``)."""
        self._run = run or cache.run_token()
        """The ``run all`` this evidence is read for: its database sources are cached for it."""
        self._loaded: dict[str, Loaded] = {}

    def __repr__(self) -> str:
        where = self.manifest.path or "<manifest>"
        return f"Evidence({str(where)!r}, sources={sorted(self.manifest.sources)})"

    @property
    def title(self) -> str:
        return self.manifest.title or (
            self.manifest.path.parent.name if self.manifest.path else "incident"
        )

    @property
    def sources(self) -> Mapping[str, SourceSpec]:
        return self.manifest.sources

    @property
    def environ(self) -> Mapping[str, str] | None:
        """Where ``env:NAME`` URLs are resolved (None: the process environment)."""
        return self._environ

    def narrowed(self, filters: Filters) -> Evidence:
        """The same sources under other filters. Filters within this evidence's own are a
        filter on what it has read (never a second parse); wider ones read the sources
        again (through the cache: :mod:`incidentkit.cache`)."""
        if filters == self.filters:
            return self
        wider = self if within(filters, self.filters) else None
        return Evidence(
            self.manifest, filters=filters, environ=self._environ, wider=wider, run=self._run
        )

    def has(self, section: str) -> bool:
        """Whether the manifest names the ``section`` source."""
        return section in self.manifest.sources

    def source(self, section: str) -> Loaded | None:
        """Load (once) and return one section's result, or None if the manifest lacks it."""
        if section not in self.manifest.sources:
            return None
        if section not in self._loaded:
            if self._wider is not None:
                whole = self._wider.source(section)
                assert whole is not None  # the same manifest names it
                self._loaded[section] = narrowed(section, whole, self.filters)
            else:
                self._loaded[section] = self._read(section)
        return self._loaded[section]

    def _read(self, section: str) -> Loaded:
        """``section`` as its loader reads it under this evidence's filters, from the cache
        when an earlier read left it there."""
        spec = self.manifest.sources[section]
        extra: dict[str, Any] = {}
        also: tuple[SourceSpec, ...] = ()
        if section == "events" and self.has("ledger"):
            extra["lookup"] = lambda: self.runs  # names events that carry no session
            also = (self.manifest.sources["ledger"],)
        entry = cache.key(spec, self.filters, also=also, run=self._run) if cache.enabled() else None
        found = cache.read(entry, SECTION_FRAMES[section]) if entry else None
        if entry and found is not None:
            cache.note("read", section, entry)
            return found
        load = loader_for(section, spec.format)
        started = time.perf_counter()
        with progress.loading(section):
            loaded = load(spec, self.filters, environ=self._environ, **extra)
        if entry:
            cache.note("parse", section, entry)
            if self._keep or time.perf_counter() - started >= cache.MIN_PARSE_SECONDS:
                cache.write(entry, loaded)
        return loaded

    def frame(self, name: str) -> pd.DataFrame:
        """The canonical frame ``name`` (empty, with all columns, when its source is absent)."""
        spec_of(name)
        if name == "rejects":
            return self.rejects
        if name == "warnings":
            return self.warnings
        loaded = self.source(FRAME_SOURCES[name])
        if loaded is None:
            return empty(name)
        return loaded.frames[name]

    def load_all(self) -> Evidence:
        """Read every source now (loading is otherwise lazy); returns self."""
        for section in self.manifest.sources:
            self.source(section)
        return self

    @property
    def runs(self) -> pd.DataFrame:
        return self.frame("runs")

    @property
    def events(self) -> pd.DataFrame:
        return self.frame("events")

    @property
    def calls(self) -> pd.DataFrame:
        return self.frame("calls")

    @property
    def responses(self) -> pd.DataFrame:
        return self.frame("responses")

    @property
    def state_writes(self) -> pd.DataFrame:
        return self.frame("state_writes")

    @property
    def session_state(self) -> pd.DataFrame:
        return self.frame("session_state")

    @property
    def journal(self) -> pd.DataFrame:
        return self.frame("journal")

    @property
    def spans(self) -> pd.DataFrame:
        return self.frame("spans")

    @property
    def diagnostics(self) -> pd.DataFrame:
        return self.frame("diagnostics")

    @property
    def threads(self) -> pd.DataFrame:
        return self.frame("threads")

    @property
    def class_histograms(self) -> pd.DataFrame:
        return self.frame("class_histograms")

    @property
    def jfr_samples(self) -> pd.DataFrame:
        return self.frame("jfr_samples")

    @property
    def jfr_allocations(self) -> pd.DataFrame:
        return self.frame("jfr_allocations")

    @property
    def jfr_old_objects(self) -> pd.DataFrame:
        return self.frame("jfr_old_objects")

    @property
    def jfr_heap(self) -> pd.DataFrame:
        return self.frame("jfr_heap")

    @property
    def jfr_locks(self) -> pd.DataFrame:
        return self.frame("jfr_locks")

    @property
    def rejects(self) -> pd.DataFrame:
        """Rows every source could not read (loads all sources)."""
        return self.rejects_of(self.manifest.sources)

    def rejects_of(self, sections: Iterable[str]) -> pd.DataFrame:
        """Rows the ``sections`` named could not read (loads only those sources): a source a
        flow does not read cannot stop it."""
        loaded = [self.source(section) for section in sections]
        return concat_rejects(part.rejects for part in loaded if part is not None)

    @property
    def warnings(self) -> pd.DataFrame:
        """Evidence every source read but found odd or incomplete (loads all sources)."""
        self.load_all()
        parts = [loaded.warnings for loaded in self._loaded.values() if not loaded.warnings.empty]
        return pd.concat(parts, ignore_index=True) if parts else empty("warnings")


def within(inner: Filters, outer: Filters) -> bool:
    """Whether every row ``inner`` keeps is one ``outer`` keeps (so ``inner`` can be cut from
    what ``outer`` read)."""
    if outer.window is not None and (
        inner.window is None
        or inner.window.start < outer.window.start
        or inner.window.end > outer.window.end
    ):
        return False
    if outer.app_name is not None and inner.app_name != outer.app_name:
        return False
    for mine, theirs in (
        (inner.session_ids, outer.session_ids),
        (inner.invocation_ids, outer.invocation_ids),
    ):
        if theirs and not (mine and set(mine) <= set(theirs)):
            return False
    return True


def open_evidence(
    path: str | os.PathLike[str],
    *,
    window: tuple[Any, Any] | Window | None = None,
    app_name: str | None = None,
    session_ids: tuple[str, ...] | list[str] | None = None,
    invocation_ids: tuple[str, ...] | list[str] | None = None,
    environ: Mapping[str, str] | None = None,
    as_of: pd.Timestamp | None = None,
) -> Evidence:
    """Open the evidence described by a manifest (or a folder holding ``evidence.toml``).

    Keyword filters replace the manifest's own (an empty ``app_name`` keeps the manifest's);
    a relative manifest window ends at ``as_of`` (else now); frames load lazily on first
    access.
    """
    manifest = load_manifest(path, as_of=as_of)
    filters = manifest.filters
    if window is not None:
        filters = replace(
            filters, window=window if isinstance(window, Window) else Window.parse(*window)
        )
    if app_name:
        filters = replace(filters, app_name=app_name)
    if session_ids is not None:
        filters = replace(filters, session_ids=tuple(session_ids))
    if invocation_ids is not None:
        filters = replace(filters, invocation_ids=tuple(invocation_ids))
    return Evidence(manifest, filters=filters, environ=environ)
