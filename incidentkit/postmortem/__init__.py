"""Postmortem drafts from one incident's findings (``incidentkit postmortem OUT``).

OUT is one flow's output folder (``OUT/findings.json``) or a ``run all`` folder
(``OUT/<flow>/findings.json`` per flow, beside its ``summary.json``). :func:`postmortem_command`
reads every findings document there and writes the standard sections: summary, impact,
timeline (UTC), root cause and trigger, detection, resolution, action items (mitigate /
prevent / process, owner ``_owner_``) and the evidence appendix.

- Every number and time links to the rows that prove it:
  ``([findings.json](findings.json) → `latency_cliff/cliff`, row 1)``, or a summary counter.
- What only a person can write is a line starting with :data:`TODO` (``TODO(author):``).
- The wording is blameless: systems and conditions, never a person.
- The same findings give the same draft, byte for byte: no clock, no absolute path, every
  derived set sorted.
- Nothing from the findings becomes markup: text is escaped (HTML as entities), code spans are
  fenced longer than any backtick run inside (``text.md``, ``text.code``).

:func:`collect_findings` is also the reader of the flows' own commands on findings (the
action export).

No module here names a flow: what a flow's findings mean to the draft (its items' roles and
action types, its impact claims, dated rows, triggers and alerts) is declared in its folder
(:class:`~incidentkit.flows.plugin.PostmortemHooks`, ``flows/<name>/postmortem.py``) and read
from :data:`incidentkit.flows.FLOWS`; a flow that declares none reaches the draft as an unknown
one.

Modules, in the order of the data: ``collect`` (reading findings.json and summary.json, each
checked against its schema, and each flow's hooks) → ``text`` (wording and escaping of values)
and ``proof`` (pointers to rows) → one per section: ``impact``, ``timeline``, ``causes``,
``detection``, ``action_items`` (with the resolution), ``appendix`` → ``render`` (the Markdown
draft, its HTML page, the command). The flows' postmortem modules build on ``impact``
(:class:`Claim` and its helpers), ``timeline`` (:class:`Moment`, ``grouped``), ``proof`` and
``text``.
"""

from incidentkit.postmortem.action_items import ACTION_TYPES, OWNER
from incidentkit.postmortem.collect import FlowFindings, collect_findings
from incidentkit.postmortem.impact import MEASURES, Claim
from incidentkit.postmortem.proof import Ref
from incidentkit.postmortem.render import FORMATS, postmortem_command, postmortem_markdown, to_html
from incidentkit.postmortem.text import TODO
from incidentkit.postmortem.timeline import Moment

__all__ = [
    "ACTION_TYPES",
    "FORMATS",
    "MEASURES",
    "OWNER",
    "TODO",
    "Claim",
    "FlowFindings",
    "Moment",
    "Ref",
    "collect_findings",
    "postmortem_command",
    "postmortem_markdown",
    "to_html",
]
