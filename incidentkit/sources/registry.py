"""Which loader reads each manifest section: the ``LOADERS`` registry.

A loader is named by where it lives and imported on first use: importing every loader with
:mod:`incidentkit.evidence` would add 30-100 ms (``events``, ``threads``, ``histograms`` and
what they import), spent even by a process that never reads those sections. mypy holds each
registered loader to :class:`Loader` (the ``TYPE_CHECKING`` block below).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from incidentkit.errors import ParameterError
from incidentkit.manifest import PARQUET, Filters, SourceSpec, did_you_mean
from incidentkit.sources.loaded import Loaded


class Loader(Protocol):
    """How every loader is called: one section's spec, read under ``filters``, with ``env:``
    URLs resolved in ``environ`` (None: the process environment). A loader may take more
    keywords of its own (``events``: ``lookup``), each with a default."""

    def __call__(
        self, spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None
    ) -> Loaded: ...


@dataclass(frozen=True)
class LoaderPath:
    """Where one loader lives, imported when it is first resolved."""

    module: str
    function: str = "load"

    def resolve(self) -> Loader:
        """The loader itself (importing its module on first use)."""
        load: Loader = getattr(import_module(self.module), self.function)
        return load


LOADERS: Mapping[str, LoaderPath] = MappingProxyType(
    {
        "ledger": LoaderPath("incidentkit.sources.sql.ledger"),
        "events": LoaderPath("incidentkit.sources.events"),
        "journal": LoaderPath("incidentkit.sources.sql.journal"),
        "spans": LoaderPath("incidentkit.sources.spans"),
        "diagnostics": LoaderPath("incidentkit.sources.diagnostics"),
        "threads": LoaderPath("incidentkit.sources.jvm.threads"),
        "histograms": LoaderPath("incidentkit.sources.jvm.histograms"),
        "jfr": LoaderPath("incidentkit.sources.jvm.jfr"),
    }
)
"""The loader of each manifest section, whatever its format but a snapshot's."""

SNAPSHOT_LOADER = LoaderPath("incidentkit.sources.parquet")
"""The loader of every section whose format is ``parquet`` (an ``incidentkit snapshot``)."""


def loader_for(section: str, fmt: str | None = None) -> Loader:
    """The loader of a manifest section in format ``fmt`` (a snapshot's ``parquet`` sections
    all read through :data:`SNAPSHOT_LOADER`)."""
    if section not in LOADERS:
        raise ParameterError(
            "no loader reads the manifest section",
            value=section,
            fix=f"{did_you_mean([section], LOADERS)}the sections are {', '.join(LOADERS)}",
        )
    return (SNAPSHOT_LOADER if fmt == PARQUET else LOADERS[section]).resolve()


if TYPE_CHECKING:  # mypy checks every registered loader against the protocol; nothing runs
    from incidentkit.sources import diagnostics, events, parquet, spans
    from incidentkit.sources.jvm import histograms, jfr, threads
    from incidentkit.sources.sql import journal, ledger

    _CHECKED: tuple[Loader, ...] = (
        ledger.load,
        events.load,
        journal.load,
        spans.load,
        diagnostics.load,
        threads.load,
        histograms.load,
        jfr.load,
        parquet.load,
    )
