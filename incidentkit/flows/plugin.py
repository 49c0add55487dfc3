"""What a flow is to the rest of the kit: :class:`Flow`, declared in its folder's ``flow.py``.

A flow's folder says everything the runner, the CLI, ``run all`` and the evidence limits need
to know of it (:data:`incidentkit.flows.FLOWS` collects them); nothing outside the folder names
the flow. Declaring one imports none of the flow's code: its modules load when its notebook
runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceLimits:
    """What a flow concludes on session stores that lose facts (:mod:`incidentkit.flows.limits`).

    On a Firestore export (no invocation ids, actions, call ids or error codes) the flow gives
    :attr:`withheld` and drops the items and summary counters resting on the missing facts. On
    the BigQuery Agent Analytics table its limits item says what :attr:`table_means` for it,
    naming the table's limits in :attr:`table_limits` (None: every limit that shows).
    """

    withheld: str = (
        "its findings as they stand: read each beside what these events lack, as none was "
        "written to withhold what rests on invocation ids, state deltas or call ids"
    )
    """What the flow still gives on events without invocation ids (after "This flow gives")."""
    withheld_items: tuple[str, ...] = ()
    """The item ids that would rest on the missing facts: dropped there."""
    withheld_counts: tuple[str, ...] = ()
    """Summary counters resting on the same facts (a name also covers ``name.*``): left out."""
    table_means: str = "read its findings beside these limits"
    """What the Agent Analytics table's limits mean for this flow."""
    table_limits: tuple[str, ...] | None = None
    """The table's limits (:data:`incidentkit.sources.bigquery_analytics.LIMITS`) its title
    names when they show in the evidence; None: all of them."""


@dataclass(frozen=True)
class Flow:
    """One triage flow as the runner, the CLI and the evidence limits know it."""

    name: str
    notebook: str
    """The notebook's file name in ``notebooks/`` (shipped in the wheel too)."""
    summary: str
    sections: tuple[str, ...]
    """The manifest sections it reads: only their rejects make its evidence incomplete."""
    profile_keys: tuple[str, ...]
    """The ``[apps.<name>]`` keys of the manifest it reads."""
    required: tuple[str, ...] = ()
    """Parameters it cannot run without (nothing in the evidence can stand in for them)."""
    needs: tuple[str, ...] = ()
    """Manifest sections it cannot run without, each of them; empty: any one of
    :attr:`sections` will do (``run all`` skips the flow otherwise)."""
    limits: EvidenceLimits = EvidenceLimits()
    """What it concludes on evidence that lost facts."""
