"""Fail a test, naming the module, when a loader it reads through is missing: a test that
skipped instead would hide a regrouped ``sources/`` (and every check that needs its loaders)."""

from __future__ import annotations

import pytest

from incidentkit.sources.registry import LOADERS

SECTIONS = ("ledger", "events", "journal", "spans", "diagnostics", "threads")


def require_loaders(*sections: str) -> None:
    """Fail unless every section named (default: those the simulator writes) has a loader the
    registry can import."""
    missing: list[str] = []
    for section in sections or SECTIONS:
        where = LOADERS.get(section)
        if where is None:
            missing.append(f"{section} (no loader registered in incidentkit.sources.registry)")
            continue
        try:
            where.resolve()
        except (ImportError, AttributeError) as err:
            missing.append(f"{section}: {where.module}.{where.function} ({err})")
    if missing:
        pytest.fail(f"loaders missing: {'; '.join(missing)}")
