"""Skip a test with a clear reason while a source loader has not landed yet."""

from __future__ import annotations

import importlib.util

import pytest

SECTIONS = ("ledger", "events", "journal", "spans", "diagnostics", "threads")


def require_loaders(*sections: str) -> None:
    missing = [
        s
        for s in (sections or SECTIONS)
        if importlib.util.find_spec(f"incidentkit.sources.{s}") is None
    ]
    if missing:
        pytest.skip(f"loaders not there yet: incidentkit.sources.{{{','.join(missing)}}}")
