"""What the vanished_state findings give a postmortem draft: the session and its overlapping
invocations, the state keys that did not stick (and those a rewind rolled back), when the
invocations overlapped, and an overlap alert.

Imported only when a draft is written (``flow.py`` names it); it is a
:class:`~incidentkit.flows.plugin.PostmortemModule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incidentkit.findings import Finding
from incidentkit.flows.vanished_state.verdicts import SETTLED, KeyVerdict
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import Claim, one_session
from incidentkit.postmortem.proof import dated, item_ref
from incidentkit.postmortem.text import md, utc
from incidentkit.postmortem.timeline import Moment, overlaps

if TYPE_CHECKING:
    from incidentkit.flows.plugin import PostmortemModule
    from incidentkit.flows.vanished_state import postmortem

    _CONFORMS: PostmortemModule = postmortem

KEYS = "vanished_state/keys"
OVERLAPS = "vanished_state/overlapping-invocations"


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The session, its overlapping invocations, the keys lost and the keys rewound."""
    claims = one_session(ff, OVERLAPS, None)
    rows = ff.rows(KEYS)
    lost = [n for n, r in enumerate(rows, 1) if r.get("verdict") not in SETTLED]
    rewound = [n for n, r in enumerate(rows, 1) if r.get("verdict") == KeyVerdict.REWOUND]
    if rows:
        names = ", ".join(
            f"{md(rows[n - 1].get('key'))} ({md(rows[n - 1].get('verdict'))})" for n in lost
        )
        claims["state keys"] = Claim(
            f"{len(lost)} of {len(rows)} keys did not stick" + (f": {names}" if names else ""),
            (item_ref(ff, KEYS, lost or None),),
        )
    if rewound:  # rolled back on request (Runner.rewind_async), not lost
        names = ", ".join(md(rows[n - 1].get("key")) for n in rewound)
        claims["rewound keys"] = Claim(
            f"{len(rewound)} key(s) rolled back by a rewind: {names}",
            (item_ref(ff, KEYS, rewound),),
        )
    return claims


def timeline(ff: FlowFindings) -> list[Moment]:
    """When each overlapping invocation started."""
    return overlaps(ff, OVERLAPS)


def triggers(ff: FlowFindings) -> list[str]:
    """None beyond its items' roles."""
    return []


def detection(ff: FlowFindings) -> list[str]:
    """Lost state raises no error: an alert on two invocations open at once on one session."""
    if not ff.rows(OVERLAPS):
        return []
    first = dated(ff, [OVERLAPS], "b_start")
    return [
        "- vanished_state: lost state raises no error; an alert on two invocations "
        "open at once on one session fires at the overlap, first at "
        f"{md(utc(first[0][3]['b_start'])) if first else 'n/a'} "
        f"{item_ref(ff, OVERLAPS).text()}"
    ]


def action_note(ff: FlowFindings, item: Finding) -> str:
    """Nothing: the items' actions say it all."""
    return ""
