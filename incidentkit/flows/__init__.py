"""The triage flows: one folder each, one registry entry each, one notebook each.

A flow folder holds its pure triage, its findings, its plots and the steps its notebook's
cells call (``incidentkit/flows/<name>/``); :data:`FLOWS` is what the runner, the CLI,
``incidentkit new``, the docs and the tests read. ``docs/adding-a-flow.md`` says how to add one.
Nothing here imports a flow's code: a flow's modules load when its notebook runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Flow:
    """One triage flow as the runner and the CLI know it."""

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


FLOWS: Mapping[str, Flow] = {
    "orphans": Flow(
        name="orphans",
        notebook="orphans.ipynb",
        summary="classify runs orphaned by a crash and say what to do with each",
        sections=("ledger", "events", "journal"),
        profile_keys=("terminal_agent", "key_templates", "attempts_cap"),
    ),
    "latency_cliff": Flow(
        name="latency_cliff",
        notebook="latency_cliff.ipynb",
        summary="find when latency fell off a cliff, which invocations hang on what, which "
        "threads are stuck, and the fix",
        sections=("diagnostics", "spans", "ledger", "events", "threads", "jfr"),
        profile_keys=("client_timeout_s",),
    ),
    "runaway": Flow(
        name="runaway",
        notebook="runaway.ipynb",
        summary="count model calls per invocation, find the invocations that hit maxLlmCalls "
        "and the loops that burned them, and set the limit from data",
        sections=("diagnostics", "spans", "ledger", "events"),
        profile_keys=("max_llm_calls", "loop_exit_keys"),
    ),
    "vanished_state": Flow(
        name="vanished_state",
        notebook="vanished_state.ipynb",
        summary="say why a session forgot a state key: temp:, never durable, overwritten, "
        "raced, removed or present, with the writes that prove it",
        sections=("events", "ledger"),
        profile_keys=(),
        required=("session_id",),
    ),
    "session": Flow(
        name="session",
        notebook="session.ipynb",
        summary="dump one session event by event, list the errors that vanish, and draw the "
        "session's swimlane",
        sections=("events", "ledger", "diagnostics", "spans", "journal"),
        profile_keys=(),
        required=("session_id",),
    ),
    "overview": Flow(
        name="overview",
        notebook="overview.ipynb",
        summary="the triage card: every flow's cheap check on every app, ordered by the "
        "reported symptom, each line with the flow to open next",
        sections=(
            *("ledger", "events", "journal", "spans", "diagnostics"),
            *("threads", "histograms", "jfr"),
        ),
        profile_keys=(
            *("client_timeout_s", "max_llm_calls", "loop_exit_keys"),
            *("terminal_agent", "key_templates", "attempts_cap"),
        ),
    ),
}
"""Every flow, by name."""
