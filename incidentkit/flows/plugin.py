"""What a flow is to the rest of the kit: :class:`Flow`, declared in its folder's ``flow.py``.

A flow's folder says everything the runner, the CLI, ``run all``, the evidence limits, the
triage card and the postmortem draft need to know of it (:data:`incidentkit.flows.FLOWS`
collects them); nothing outside the folder names the flow. Declaring one imports none of the
flow's code: its modules load when its notebook runs, its card checks when a card is built, its
postmortem module when a draft is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Literal, Protocol, cast

if TYPE_CHECKING:
    from incidentkit.findings import Finding
    from incidentkit.flows.card_lines import CardContext, CardLine
    from incidentkit.flows.engine_card import EngineCardContext
    from incidentkit.flows.settings import FlowSettings
    from incidentkit.postmortem.collect import FlowFindings
    from incidentkit.postmortem.impact import Claim
    from incidentkit.postmortem.timeline import Moment


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
    """The table's limits (:data:`incidentkit.sources.events.bigquery_analytics.LIMITS`) its title
    names when they show in the evidence; None: all of them."""


Role = Literal["Trigger", "Root cause", "Mechanism", "Contributing", "Effect", "Evidence"]
"""What an item is in the postmortem's Root cause and trigger section, in the section's order."""
ActionType = Literal["mitigate", "prevent", "process"]
"""The type of a postmortem action item, in the order of its table."""


class PostmortemModule(Protocol):
    """The functions of a flow's postmortem module (``flows/<name>/postmortem.py``), each given
    one findings document of the flow (:class:`~incidentkit.postmortem.FlowFindings`)."""

    def impact(self, ff: FlowFindings) -> dict[str, Claim]:
        """Its claims by measure (:data:`incidentkit.postmortem.MEASURES`, then its own, such
        as "stuck threads"); a measure it cannot count is a ``missing`` claim with the reason.
        Asked of every run that reached its verdict."""
        ...

    def timeline(self, ff: FlowFindings) -> list[Moment]:
        """Its dated rows, as timeline moments. Asked of every run that reached its verdict."""
        ...

    def triggers(self, ff: FlowFindings) -> list[str]:
        """Root cause lines before those of its items' roles (``- **Trigger**: ...``), e.g.
        the worker that stopped. Asked of a run whose verdict is not CLEAN."""
        ...

    def detection(self, ff: FlowFindings) -> list[str]:
        """Its Detection lines (``- <flow>: ...``): the alert that saw it, or would have seen
        it sooner. Asked of a run whose verdict is not CLEAN."""
        ...

    def action_note(self, ff: FlowFindings, item: Finding) -> str:
        """Words after ``item``'s action in its action item (e.g. the command that lists the
        runs to act on, with a leading space), or ``""``."""
        ...


@dataclass(frozen=True)
class PostmortemHooks:
    """What a flow is to the postmortem draft (:mod:`incidentkit.postmortem`): the roles and
    action types of its items, and the module that counts, dates and detects from its findings.

    A flow that declares none reaches a draft as an unknown flow does: every item that needs
    action is Contributing (or Evidence) and a mitigate item, and the Impact says it was not
    counted.
    """

    module: str | None = None
    """The dotted path of the flow's postmortem module (:class:`PostmortemModule`), imported
    only when a draft is written; None: the draft counts, dates and detects nothing of it."""
    roles: Mapping[str, Role] = field(default_factory=dict, hash=False)
    """Item id -> its role in Root cause and trigger; an item not named is Contributing (one
    whose id ends like an evidence item, ``*/rejects``, is Evidence)."""
    action_types: Mapping[str, ActionType | None] = field(default_factory=dict, hash=False)
    """Item id -> the type of its action item (None: its action is no item, e.g. one the flow
    already did); an item not named is mitigate."""
    per_row: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Items whose rows are one action each -> the column that says the row's action."""
    navigates: bool = False
    """Whether its findings point to the other flows (a triage card: which to open first), not
    to a fix: the draft leaves it out of the impact, the root cause, the detection and the
    action items."""
    timed: bool = True
    """False: its findings carry no times (counts only), and the timeline says so."""

    def functions(self) -> PostmortemModule | None:
        """The flow's postmortem module, imported now; None when it declares none."""
        return None if self.module is None else cast(PostmortemModule, import_module(self.module))


class CardCheck(Protocol):
    """A flow's cheap check: the card's lines for one app (:mod:`incidentkit.flows.card_lines`)."""

    def __call__(self, context: CardContext) -> list[CardLine]: ...


class EngineCardCheck(Protocol):
    """A cheap check's engine twin: the same lines, for every app of the fleet at once
    (each line's ``app`` set), computed by queries in the database the evidence lives in
    (:mod:`incidentkit.flows.engine_card`)."""

    def __call__(self, context: EngineCardContext) -> list[CardLine]: ...


@dataclass(frozen=True)
class CardChecks:
    """A flow's cheap check on the triage card (:mod:`incidentkit.flows.overview.card`): a
    function of its folder that gives the lines of :attr:`checks` on one app's frames.

    The card imports its module only when it is built. A check that raises an
    :class:`~incidentkit.errors.IncidentkitError` (odd evidence) is a NOT_CHECKED line for each of
    :attr:`checks`, naming the error, and the card goes on.
    """

    checks: tuple[str, ...]
    """The checks its lines are (each in :data:`incidentkit.flows.overview.card.CHECKS`, whose
    order the card keeps among lines of one severity)."""
    module: str
    """The dotted path of the module that defines it, imported only when a card is built."""
    function: str = "card_lines"
    """The :class:`CardCheck` function's name in :attr:`module`."""
    engine: str | None = None
    """The :class:`EngineCardCheck` function's name in :attr:`module`: the same lines computed
    in the events' and ledger's database (``card_engine``); None: in the engine card its
    checks are NOT_CHECKED, saying why."""

    def lines(self, context: CardContext) -> list[CardLine]:
        """Its lines on ``context``, its module imported now."""
        check = cast(CardCheck, getattr(import_module(self.module), self.function))
        return check(context)

    def engine_lines(self, context: EngineCardContext) -> list[CardLine] | None:
        """Its lines of every app computed in the engine; None when it has no engine twin."""
        if self.engine is None:
            return None
        check = cast(EngineCardCheck, getattr(import_module(self.module), self.engine))
        return check(context)


@dataclass(frozen=True)
class Flow:
    """One triage flow as the runner, the CLI, the evidence limits and the postmortem know it."""

    name: str
    notebook: str
    """The notebook's file name in ``notebooks/`` (shipped in the wheel too)."""
    summary: str
    sections: tuple[str, ...]
    """The manifest sections it reads: only their rejects make its evidence incomplete."""
    reads: tuple[str, ...] = ()
    """The frames its triage reads (``evidence.FRAME_SOURCES``), each loaded once and handed
    down; each comes from one of :attr:`sections`."""
    settings: type[FlowSettings] | None = None
    """Its settings (``flows/<name>/settings.py``): what each is, which the app's profile
    gives, their defaults (:mod:`incidentkit.flows.settings`); None: none."""
    required: tuple[str, ...] = ()
    """Parameters it cannot run without (nothing in the evidence can stand in for them)."""
    needs: tuple[str, ...] = ()
    """Manifest sections it cannot run without, each of them; empty: any one of
    :attr:`sections` will do (``run all`` skips the flow otherwise)."""
    limits: EvidenceLimits = EvidenceLimits()
    """What it concludes on evidence that lost facts."""
    postmortem: PostmortemHooks | None = None
    """What it is to a postmortem draft; None: its findings reach one as an unknown flow's do."""
    card: tuple[CardChecks, ...] = ()
    """Its cheap checks on the triage card, each run apart; empty: the card has no line for it."""

    @property
    def profile_keys(self) -> tuple[str, ...]:
        """The ``[apps.<name>]`` keys of the manifest it reads (its :attr:`settings` say)."""
        return () if self.settings is None else self.settings.profile_keys()
