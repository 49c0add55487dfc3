"""Spinning threads: the same frames in every dump, but on the CPU between them.

A thread that sits in one place in every dump looks stuck; its ``cpu=`` says whether it waited
there (blocked: next to no CPU) or ran there (a busy-wait on ``Thread.yield`` or
``Thread.onSpinWait``, a hot loop, a retry with no back-off). A spinning thread burns a core
and starves the others; it is its own finding, never a stuck one (:func:`.stacks.busy`).
JFR execution samples of the thread between the dumps corroborate it, or tell it when the
dumps carry no ``cpu=``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.flows.latency_cliff.stacks import (
    first_application_frame,
    names_tool,
    natural_key,
    pool_of,
)
from incidentkit.frames import FLOAT, INT, OBJ, STR

SPIN_COLUMNS: Mapping[str, str] = {
    "top_frame": STR,
    "app_frame": STR,
    "state": STR,
    "threads": OBJ,
    "count": INT,
    "pool": STR,
    "cpu_ms": FLOAT,
    "over_s": FLOAT,
    "cpu_share": FLOAT,
    "jfr_samples": INT,
    "tool": STR,
}
"""One row per group of spinning threads (top frame and first application frame): the CPU
they gained between the first and last dump (``cpu_ms``, summed), the wall time between those
dumps (``over_s``), the share of one core each used (``cpu_share``, NaN when the dumps carry no
``cpu=``), the JFR execution samples of them between the dumps, and the open call's tool their
frames name. The most CPU first."""


def group_spinning(
    spinning: pd.DataFrame, tools: Iterable[str] = (), executed: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Spinning threads (rows of :func:`.stacks.unchanged_threads`) grouped by stack
    (:data:`SPIN_COLUMNS`)."""
    if spinning.empty:
        return as_columns(pd.DataFrame(columns=list(SPIN_COLUMNS)), SPIN_COLUMNS)
    wanted = sorted({str(t) for t in tools if isinstance(t, str) and t})
    samples = dict(executed or {})
    app = spinning["frames"].map(first_application_frame)
    keyed = spinning.assign(
        app_frame=app, _top=spinning["top_frame"].fillna(""), _app=app.fillna("")
    )
    rows = []
    for _, group in keyed.groupby(["_top", "_app", "state"], sort=False):
        first = group.iloc[0]
        names = sorted(group["thread"].astype(str), key=natural_key)
        stack: tuple[str, ...] = first["frames"]
        tied = next((t for t in wanted for frame in stack if names_tool(frame, t)), None)
        rows.append(
            {
                "top_frame": first["top_frame"],
                "app_frame": first["app_frame"],
                "state": first["state"],
                "threads": tuple(names),
                "count": len(names),
                "pool": ", ".join(sorted({pool_of(n) for n in names})),
                "cpu_ms": group["cpu_ms_gained"].sum(min_count=1),
                "over_s": group["over_ms"].mean() / 1000,
                "cpu_share": group["cpu_share"].mean(),
                "jfr_samples": sum(samples.get(n, 0) for n in names),
                "tool": tied,
            }
        )
    out = pd.DataFrame(rows).sort_values(
        ["cpu_ms", "jfr_samples", "count"], ascending=False, kind="stable", na_position="last"
    )
    return as_columns(out.reset_index(drop=True), SPIN_COLUMNS)


def share_text(cpu_share: float) -> str:
    """A share of one core for people: ``99 % of a core``, ``1.5 cores``, or ``an unknown
    share of a core`` (JFR samples only)."""
    if pd.isna(cpu_share):
        return "an unknown share of a core"
    if cpu_share >= 1.5:
        return f"{cpu_share:.1f} cores"
    return f"{min(cpu_share, 1.0):.0%} of a core"
