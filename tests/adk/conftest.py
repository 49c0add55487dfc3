"""The ADK 2.x worlds (``adk2_world``), each built once per test process and shared by every
module that reads it: the worlds are evidence, and no test writes into them."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

RESUME_PAUSE = 3.0
"""Seconds between the kill and the resume, and before the approval's answer, in the shared
resume world: more than the 2 s at which ``latency_cliff`` compares sources."""
NEEDED = ("google.adk", "opentelemetry.sdk", "aiosqlite")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.fixture(scope="session")
def w() -> ModuleType:
    """The world's module, or a failure naming the extra (never a skip)."""
    missing = [m for m in NEEDED if not _has(m)]
    if missing:
        pytest.fail(
            f"the ADK 2.x world needs {', '.join(missing)}, from the project's adk extra: "
            "pip install -e '.[adk]'",
            pytrace=False,
        )
    from . import adk2_world

    return adk2_world


@pytest.fixture(scope="session")
def adk2(w: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """``adk2(name)``: the world ``build_<name>`` writes, built on first use."""
    root = tmp_path_factory.mktemp("adk2-worlds")
    built: dict[str, Any] = {}
    options = {"resume": {"pause": RESUME_PAUSE}}

    def world(name: str) -> Any:
        if name not in built:
            build = getattr(w, f"build_{name}")
            built[name] = build(root / name, **options.get(name, {}))
        return built[name]

    return world


@pytest.fixture(scope="session")
def compaction(adk2: Callable[[str], Any]) -> Any:
    return adk2("compaction")


@pytest.fixture(scope="session")
def rewind(adk2: Callable[[str], Any]) -> Any:
    return adk2("rewind")


@pytest.fixture(scope="session")
def resume(adk2: Callable[[str], Any]) -> Any:
    return adk2("resume")


@pytest.fixture(scope="session")
def timeout(adk2: Callable[[str], Any]) -> Any:
    return adk2("timeout")


@pytest.fixture(scope="session")
def runaway(adk2: Callable[[str], Any]) -> Any:
    return adk2("runaway")


@pytest.fixture(scope="session")
def analytics(adk2: Callable[[str], Any]) -> Any:
    return adk2("analytics")


@pytest.fixture(scope="session")
def markers(adk2: Callable[[str], Any]) -> Any:
    return adk2("analytics_markers")


@pytest.fixture
def worlds(tmp_path: Path) -> Path:
    """A folder for a world a test builds for itself."""
    return tmp_path
