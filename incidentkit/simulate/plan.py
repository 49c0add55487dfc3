"""What a scenario hands the driver: its window, its invocations, dumps and expected findings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from incidentkit.simulate.model import Bundle
from incidentkit.simulate.threads import Dump
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import World


@dataclass
class Plan:
    """One scenario's output, before it is written.

    ``core`` holds the scenario's own invocations (small, any order); ``background`` says how
    much healthy traffic streams around them (the driver generates it, in shards at scale);
    ``expected(world, events_format)`` is called after everything was written (``world.stats``
    complete) and returns the scenario's part of ``truth.json``.
    """

    core: list[Bundle]
    background: Background | None
    expected: Callable[[World, str], dict[str, Any]]
    dumps: list[Dump] = field(default_factory=list)
    as_of: int | None = None
    files: dict[str, str] = field(default_factory=dict)
    """More evidence files (path relative to the pack → text), written as they are."""
    sections: list[str] = field(default_factory=list)
    """The manifest lines that name ``files`` (a ``[histograms]`` section ...)."""


@dataclass(frozen=True)
class Spec:
    """A scenario: name, one-line title, UTC window (epoch ms) and its builder.

    ``zone`` is the JVM host's time zone: its diagnostics log and thread dump headers are
    written on that wall clock (the agent's database and exports stay UTC).
    """

    name: str
    title: str
    window: tuple[int, int]
    build: Callable[[World, int], Plan]
    zone: str = "UTC"
