"""What the session findings give a postmortem draft: the session, its overlapping or failing
invocations and its errors (the quiet ones too), when they happened, and an error-code alert.

Imported only when a draft is written (``flow.py`` names it); it is a
:class:`~incidentkit.flows.plugin.PostmortemModule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incidentkit.findings import Finding
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import Claim, one_session
from incidentkit.postmortem.proof import cite, counter, item_ref
from incidentkit.postmortem.text import num
from incidentkit.postmortem.timeline import Moment, grouped, overlaps

if TYPE_CHECKING:
    from incidentkit.flows.plugin import PostmortemModule
    from incidentkit.flows.session import postmortem

    _CONFORMS: PostmortemModule = postmortem

ERRORS = "session/errors"
OVERLAPS = "session/overlapping-invocations"


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The session, its overlapping or failing invocations, and its errors."""
    claims = one_session(ff, OVERLAPS, ERRORS)
    s = ff.findings.summary
    claims["errors"] = Claim(
        f"{num(s.get('errors', 0))} errors, {num(s.get('quiet_errors', 0))} of them quiet (an "
        f"error code on a run that did not fail), {num(s.get('undeliverable', 0))} undeliverable",
        (counter(ff, "errors"), counter(ff, "quiet_errors"), item_ref(ff, ERRORS)),
    )
    return claims


def timeline(ff: FlowFindings) -> list[Moment]:
    """When each overlapping invocation started, and each error."""
    return [
        *overlaps(ff, OVERLAPS),
        *grouped(
            ff,
            [ERRORS],
            "ts",
            lambda r: (
                f"error {r.get('kind')} {r.get('error_code') or ''} in invocation "
                f"{r.get('invocation_id')}".replace("  ", " ")
            ),
        ),
    ]


def triggers(ff: FlowFindings) -> list[str]:
    """None beyond its items' roles."""
    return []


def detection(ff: FlowFindings) -> list[str]:
    """A run-failure alert sees only run errors; one on events with an error code fires
    sooner."""
    s = ff.findings.summary
    codes = s.get("error_code_events", 0)
    return [
        f"- session: a run-failure alert sees only run errors; an alert on events with an "
        f"error_code fires sooner: {codes} such event(s), {s.get('quiet_errors', 0)} on a "
        f"run that did not fail "
        + cite([counter(ff, "error_code_events"), counter(ff, "quiet_errors")])
    ]


def action_note(ff: FlowFindings, item: Finding) -> str:
    """Nothing: the items' actions say it all."""
    return ""
