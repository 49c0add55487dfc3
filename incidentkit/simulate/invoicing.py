"""The invoicing flow: ``invoice_flow`` = draft_agent → billing_agent → notify_agent.

The billing agent calls ``sendInvoice``; the tool journals by business key
(``send-invoice:{invoiceId}``): intent before ``billing.send``, done after. Steps are separate so
scenarios can stop the flow at any crash window.
"""

from __future__ import annotations

from typing import Any

from incidentkit.simulate.agent import Agent, Call
from incidentkit.simulate.model import JournalRow
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.world import Billing, Session, World

ROOT = "invoice_flow"
TERMINAL = "notify_agent"
KEY_TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}"}
DESCRIPTIONS = {
    ROOT: "Drafts, sends and announces an invoice.",
    "draft_agent": "Writes the invoice summary.",
    "billing_agent": "Sends the invoice through the billing system.",
    TERMINAL: "Tells the customer the invoice was sent.",
}
CONTINUE = "[recovery] Continue the interrupted task."


def register(world: World) -> None:
    world.descriptions.update(DESCRIPTIONS)


def new_invoice(world: World) -> str:
    return f"INV-{world.next('invoice', 1001)}"


def begin(
    world: World,
    session: Session,
    start: int,
    owner: str | None,
    invoice: str,
    *,
    attempts: int = 0,
    text: str | None = None,
    ledger: bool = True,
    run: tuple[str, int, dict[str, Any]] | None = None,
) -> tuple[Invocation, Agent]:
    """The user turn and the root agent's span."""
    inv = Invocation(
        world,
        session,
        start=start,
        root=ROOT,
        owner=owner,
        attempts=attempts,
        ledger=ledger,
        run=run,
        text=text or f"Invoice the order of customer {session.user} as {invoice}.",
    )
    return inv, inv.agent(ROOT)


def draft(flow: Agent, invoice: str) -> None:
    agent = flow.sub("draft_agent")
    agent.say(
        f"Draft for {invoice} ready: 3 lines, 1,240.00 EUR.", state_delta={"invoice_id": invoice}
    )
    agent.end()


def request_send(flow: Agent, invoice: str) -> tuple[Agent, Call]:
    billing = flow.sub("billing_agent")
    return billing, billing.request("sendInvoice", {"invoiceId": invoice})


def intent(inv: Invocation, call: Call, key: str) -> None:
    """journal.intent(key, invocationId, functionCallId), just before billing.send."""
    inv.now += 2
    inv.journal(JournalRow(key, inv.id, call.call_id, "INTENT", None, inv.now, inv.now))


def send(
    inv: Invocation,
    billing: Agent,
    call: Call,
    invoice: str,
    bills: Billing,
    *,
    key: str | None = None,
) -> None:
    """The whole tool: intent, billing.send, done, and the function response."""
    key = key or f"send-invoice:{invoice}"
    created = inv.now + 2
    result = {"status": "sent", "invoiceId": invoice, "billingRef": f"BIL-{invoice[4:]}"}
    billing.respond(call, result, ms=inv.world.between(120, 600))
    bills.send(invoice)
    inv.journal(JournalRow(key, inv.id, call.call_id, "DONE", result, created, inv.now - 2))


def conclude(inv: Invocation, flow: Agent, billing: Agent, invoice: str, bills: Billing) -> None:
    """The billing agent's text and the notify agent's final response (the notification)."""
    billing.say(f"Invoice {invoice} sent.")
    billing.end()
    notify = flow.sub(TERMINAL)
    notify.say(f"Your invoice {invoice} has been sent.")
    bills.notify(invoice)
    notify.end()


def full_run(
    world: World, session: Session, start: int, owner: str, bills: Billing, **extra: Any
) -> Invocation:
    """A complete healthy invoicing turn (ends with ``inv.finish()`` left to the caller)."""
    invoice = new_invoice(world)
    inv, flow = begin(world, session, start, owner, invoice, **extra)
    draft(flow, invoice)
    billing, call = request_send(flow, invoice)
    send(inv, billing, call, invoice, bills)
    conclude(inv, flow, billing, invoice, bills)
    return inv
