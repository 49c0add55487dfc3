"""``truth.json``: what a correct investigation of a simulated pack must find.

Schema ``incidentkit.truth/v1``::

    {"schema": "incidentkit.truth/v1", "scenario", "title", "seed", "scale", "events_format",
     "window": {"start", "end"}, "as_of", "counts": {frame: rows}, "rejects": 0,
     "files": [...], "expected": {...scenario specific, see docs/simulator.md...}}

``counts`` are the rows each canonical frame holds after loading the pack (diagnostics: one row
per log record, stack-trace lines included in their record; threads: Java and VM threads of all
dumps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from incidentkit.simulate.model import iso
from incidentkit.simulate.pack import Counts

SCHEMA = "incidentkit.truth/v1"


def document(
    *,
    scenario: str,
    title: str,
    seed: int,
    scale: int,
    events_format: str,
    window: tuple[int, int],
    as_of: int | None,
    counts: Counts,
    files: list[str],
    expected: dict[str, Any],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "scenario": scenario,
        "title": title,
        "seed": seed,
        "scale": scale,
        "events_format": events_format,
        "window": {"start": iso(window[0]), "end": iso(window[1])},
        "as_of": None if as_of is None else iso(as_of),
        "counts": counts.as_dict(),
        "rejects": 0,
        "files": files,
        "expected": expected,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's and pandas' default), ``q`` in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
