"""The runs of ``crash_recovery``: the invoicing flow stopped at each crash window.

Each builder returns the bundles it wrote and a :class:`Case` saying what a correct orphan
classification finds. Worker ``worker-3`` is halted at ``KILL``; runs still open on it die then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from incidentkit.simulate import invoicing as flow
from incidentkit.simulate.agent import Call
from incidentkit.simulate.model import Bundle, LedgerRow, at
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.world import LEASE_MS, Billing, World

KILL = at("03:00:00")
AS_OF = at("03:05:00")
CAP = 3


@dataclass
class Case:
    """One run of the scenario and what its classification must be."""

    name: str
    window: str
    row: LedgerRow
    invocation_id: str | None
    orphan_class: str
    action: str
    why: str
    invoice: str | None = None
    unanswered: list[dict[str, Any]] = field(default_factory=list)
    log_status: str | None = None  # what the event log says, when the ledger disagrees


def timed(world: World, end: int, script: Callable[[int, Billing], Invocation]) -> Invocation:
    """Run ``script`` so that its last record lands at ``end``: a dry run measures it first."""
    state = world.rng.getstate()
    elapsed = script(0, Billing()).now
    world.rng.setstate(state)
    return script(end - elapsed, world.billing)


def unanswered(
    call: Call, *, verdict: str | None, key: str | None, long_running: bool = False
) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "tool": call.name,
        "args": call.args,
        "long_running": long_running,
        "business_key": key,
        "journal_verdict": verdict,
    }


def _in_model_call(
    world: World, agent: str, name: str, why: str, *, turns_before: tuple[int, ...] = ()
) -> tuple[list[Bundle], Case]:
    """A run killed during ``agent``'s model call (window W2): the draft agent's, or the
    billing agent's after the draft; after finished turns ``turns_before`` minutes earlier."""
    session = world.session("invoicing")
    done = [
        flow.full_run(world, session, KILL - minutes * 60_000, "worker-2", world.billing).finish()
        for minutes in turns_before
    ]
    invoice = flow.new_invoice(world)

    def script(start: int, bills: Billing) -> Invocation:
        inv, root = flow.begin(world, session, start, "worker-3", invoice)
        if agent != "draft_agent":
            flow.draft(root, invoice)
        root.sub(agent).start_llm()
        return inv

    inv = timed(world, KILL - 1, script)
    bundle = inv.crash(at=KILL)
    row = bundle.ledger[0]
    return [*done, bundle], Case(name, "W2", row, inv.id, "MODEL_INFLIGHT", "redrive", why, invoice)


def w2(world: World) -> tuple[list[Bundle], Case]:
    return _in_model_call(
        world,
        "draft_agent",
        "w2_model_inflight",
        "killed during the draft agent's model call: the log holds the user message only; the "
        "ledger never saw the invocation id (recover it from the user event)",
    )


def w3_w4(world: World, *, intent: bool) -> tuple[list[Bundle], Case]:
    session, invoice = world.session("invoicing"), flow.new_invoice(world)
    key = f"send-invoice:{invoice}"
    calls: list[Call] = []

    def script(start: int, bills: Billing) -> Invocation:
        inv, root = flow.begin(world, session, start, "worker-3", invoice)
        flow.draft(root, invoice)
        billing, call = flow.request_send(root, invoice)
        calls[:] = [call]
        if intent:
            flow.intent(inv, call, key)
            billing.start_tool(call)
            bills.send(invoice)  # billing.send returned; journal.done never ran
            inv.pause(world.rng.randint(150, 450))
        return inv

    inv = timed(world, KILL - (3 if intent else 25), script)
    bundle = inv.crash(at=KILL)
    name, window, verdict, action, why = (
        (
            "w4_intent_only",
            "W4",
            "INTENT_ONLY",
            "ask_downstream",
            "killed after billing.send returned, before journal.done: the journal holds an "
            "intent; ask billing for the key (it has the invoice), record done, replay it",
        )
        if intent
        else (
            "w3_no_entry",
            "W3",
            "NO_ENTRY",
            "redrive",
            "killed after the sendInvoice call event, before journal.intent: no journal entry, "
            "the tool never ran; re-drive sends once",
        )
    )
    return [bundle], Case(
        name,
        window,
        bundle.ledger[0],
        inv.id,
        "TOOL_UNANSWERED",
        action,
        why,
        invoice,
        [unanswered(calls[0], verdict=verdict, key=key)],
    )


def actually_done(world: World) -> tuple[list[Bundle], Case]:
    session, invoice = world.session("invoicing"), flow.new_invoice(world)

    def script(start: int, bills: Billing) -> Invocation:
        inv, root = flow.begin(world, session, start, "worker-3", invoice)
        flow.draft(root, invoice)
        billing, call = flow.request_send(root, invoice)
        flow.send(inv, billing, call, invoice, bills)
        flow.conclude(inv, root, billing, invoice, bills)
        return inv

    inv = timed(world, KILL - 40, script)
    bundle = inv.crash(at=KILL)
    return [bundle], Case(
        "after_terminal_final",
        "after final",
        bundle.ledger[0],
        inv.id,
        "ACTUALLY_DONE",
        "mark_done",
        "killed after the notify agent's final response, before ledger.finish: "
        "finalResponse by the terminal agent; one invoice, one notification",
        invoice,
        log_status="DONE",
    )


def draft_final(world: World) -> tuple[list[Bundle], Case]:
    return _in_model_call(
        world,
        "billing_agent",
        "after_draft_final",
        "the last event is the draft agent's final text: finalResponse() is true but the author "
        "is not the terminal agent, so the run is unfinished",
    )


def null_invocation(world: World) -> tuple[list[Bundle], Case]:
    """Two finished turns, then a third killed in its first model call (ledger id null)."""
    return _in_model_call(
        world,
        "draft_agent",
        "null_invocation_id",
        "ledger invocation_id is null (crash during the first model call); the session has "
        "earlier turns, so take the user event at or after started_at",
        turns_before=(25, 12),
    )


def ledger_only(world: World, *, with_history: bool) -> tuple[list[Bundle], Case]:
    """W1 (ledger written, runAsync never appended the user event), or the session is gone."""
    session = world.session("invoicing")
    bundles = (
        [flow.full_run(world, session, KILL - 8 * 60_000, "worker-1", world.billing).finish()]
        if with_history
        else []
    )
    invoice = flow.new_invoice(world)
    started = KILL - world.rng.randint(3, 9)
    text = f"Invoice the order of customer {session.user} as {invoice}."
    row = LedgerRow(
        world.ids.uuid(),
        session.app,
        session.user,
        session.id,
        None,
        {"role": "user", "parts": [{"text": text}]},
        "RUNNING",
        "worker-3",
        started + LEASE_MS,
        0,
        started,
        started,
    )
    bundles.append(Bundle(start=started, ledger=[row]))
    name, why = (
        (
            "not_started",
            "the ledger row was written but the user event never was: no user event at or "
            "after started_at; replay the ledger request",
        )
        if with_history
        else (
            "session_gone",
            "the session does not exist (no events at all); replay the ledger request in a new "
            "session",
        )
    )
    return bundles, Case(name, "W1", row, None, "NOT_STARTED", "redrive", why, invoice)


def paused(world: World, *, recorded: bool) -> tuple[list[Bundle], Case]:
    """A billing approval (long-running tool): ledger PAUSED, or killed before ledger.finish."""
    session, invoice = world.session("invoicing"), flow.new_invoice(world)
    calls: list[Call] = []

    def script(start: int, bills: Billing) -> Invocation:
        owner = "worker-2" if recorded else "worker-3"
        inv, root = flow.begin(world, session, start, owner, invoice)
        flow.draft(root, invoice)
        billing = root.sub("billing_agent")
        calls[:] = [
            billing.request(
                "request_invoice_approval",
                {"invoiceId": invoice, "amount": 25_000},
                long_running=True,
            )
        ]
        billing.end()
        return inv

    if recorded:
        inv = script(at("02:52:10"), world.billing)
        bundle = inv.finish()
    else:
        inv = timed(world, KILL - 15, script)
        bundle = inv.crash(at=KILL)
    name, action, why, log_status = (
        (
            "paused_approval",
            "wait",
            "paused cleanly on a long-running approval (ledger PAUSED): not an orphan",
            None,
        )
        if recorded
        else (
            "paused_unrecorded",
            "mark_paused",
            "the last event carries longRunningToolIds: it paused, then died before "
            "ledger.finish; set the ledger to PAUSED, do not re-drive",
            "PAUSED",
        )
    )
    return [bundle], Case(
        name,
        "paused",
        bundle.ledger[0],
        inv.id,
        "PAUSED",
        action,
        why,
        invoice,
        [unanswered(calls[0], verdict=None, key=None, long_running=True)],
        log_status,
    )
