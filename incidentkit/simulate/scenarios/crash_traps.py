"""The traps of ``crash_recovery``: a crash loop, a call-id-keyed journal, live leases."""

from __future__ import annotations

from typing import Any

from incidentkit.simulate import invoicing as flow
from incidentkit.simulate.model import Bundle, LedgerRow, at
from incidentkit.simulate.scenarios.crash_cases import AS_OF, KILL, Case, timed, unanswered
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.world import LEASE_MS, Billing, World

POISON = "render_invoice_pdf"


def crash_loop(world: World) -> tuple[list[Bundle], Case]:
    """A poison run: rendering the PDF kills the JVM, on every worker that re-drives it."""
    session, invoice = world.session("invoicing"), flow.new_invoice(world)
    attempts = (  # (claimed at, owner, crash at); the first is the original run
        (at("02:44:05"), "worker-4", at("02:44:10.230")),
        (at("02:45:20.512"), "worker-5", at("02:45:26.004")),
        (at("02:51:01.118"), "worker-6", at("02:51:07.551")),
        (KILL - 5_800, "worker-3", KILL),
    )
    bundles: list[Bundle] = []
    calls: list[Any] = []
    invs: list[Invocation] = []
    for number, (claimed, owner, crashed) in enumerate(attempts):

        def script(
            start: int, bills: Billing, number: int = number, owner: str = owner
        ) -> Invocation:
            text = None if number == 0 else flow.CONTINUE
            inv, root = flow.begin(world, session, start, owner, invoice, text=text, ledger=False)
            flow.draft(root, invoice)
            billing = root.sub("billing_agent")
            call = billing.request(POISON, {"invoiceId": invoice})
            billing.start_tool(call)
            calls[:] = [call]
            return inv

        inv = timed(world, crashed - world.rng.randint(40, 90), script)
        if inv.start < claimed:
            raise AssertionError("crash-loop attempt starts before its claim")
        bundles.append(inv.crash(at=crashed))
        invs.append(inv)
    first, last = invs[0], invs[-1]
    claim = attempts[-1][0]
    row = LedgerRow(
        first.run_id,
        session.app,
        session.user,
        session.id,
        last.id,
        first.request,
        "RUNNING",
        "worker-3",
        claim + LEASE_MS,
        len(attempts) - 1,
        first.started_at,
        last.recorded_at or claim,
    )
    bundles[-1].ledger.append(row)
    return bundles, Case(
        "crash_loop",
        "poison",
        row,
        last.id,
        "TOOL_UNANSWERED",
        "park",
        f"{POISON} kills the worker on every attempt (4 crashes, attempts = 3 = the cap): park "
        "the run with a dead-letter record instead of re-driving it again",
        invoice,
        [unanswered(calls[0], verdict=None, key=None)],
    )


def call_id_journal(world: World) -> tuple[list[Bundle], Case, dict[str, Any]]:
    """Killed in W4 by an old release whose journal key was the call id; the re-drive resent."""
    session, invoice = world.session("invoicing"), flow.new_invoice(world)
    calls: list[Any] = []

    def original(start: int, bills: Billing) -> Invocation:
        inv, root = flow.begin(world, session, start, "worker-0", invoice, ledger=False)
        flow.draft(root, invoice)
        billing, call = flow.request_send(root, invoice)
        calls[:] = [call]
        flow.intent(inv, call, f"send-invoice:{call.call_id}")
        billing.start_tool(call)
        bills.send(invoice)
        inv.pause(world.rng.randint(150, 400))
        return inv

    first = timed(world, at("02:38:00") - 4, original)
    bundles = [first.crash(at=at("02:38:00"))]
    first_call = calls[0]
    inv, root = flow.begin(
        world,
        session,
        at("02:39:05.310"),
        "worker-1",
        invoice,
        attempts=1,
        text=flow.CONTINUE,
        run=(first.run_id, first.started_at, first.request),
    )
    flow.draft(root, invoice)
    billing, call = flow.request_send(root, invoice)
    flow.send(inv, billing, call, invoice, world.billing, key=f"send-invoice:{call.call_id}")
    flow.conclude(inv, root, billing, invoice, world.billing)
    bundles.append(inv.finish())
    row = bundles[-1].ledger[0]
    case = Case(
        "call_id_keyed_journal",
        "W4",
        row,
        inv.id,
        "DONE",
        "none",
        "finished after one re-drive, but its journal was keyed by function call id: the "
        "re-driven call had a new id, found no entry and sent a second invoice",
        invoice,
    )
    duplicate = {
        "run_id": row.run_id,
        "business_key": f"send-invoice:{invoice}",
        "invoice": invoice,
        "invoices_sent": world.billing.sent[invoice],
        "call_ids": [first_call.call_id, call.call_id],
        "journal_keys": [f"send-invoice:{first_call.call_id}", f"send-invoice:{call.call_id}"],
        "invocation_ids": [first.id, inv.id],
        "journal_statuses": ["INTENT", "DONE"],
        "why": "journal keyed by function call id (the duplicate-send trap): the first call was "
        "killed in W4 (intent recorded, billing.send done, journal.done never), the re-driven "
        "call had a new id, found no entry and sent again; billing holds two invoices",
    }
    return bundles, case, duplicate


def live(world: World, *, in_tool: bool) -> tuple[list[Bundle], Case]:
    """A run on a live worker at as_of (lease not expired): not an orphan."""
    session, invoice = world.session("invoicing"), flow.new_invoice(world)
    calls: list[Any] = []

    def script(start: int, bills: Billing) -> Invocation:
        inv, root = flow.begin(world, session, start, "worker-1", invoice)
        if in_tool:
            flow.draft(root, invoice)
            billing, call = flow.request_send(root, invoice)
            flow.intent(inv, call, f"send-invoice:{invoice}")
            billing.start_tool(call)
            calls[:] = [call]
        else:
            root.sub("draft_agent").start_llm()
        return inv

    inv = timed(world, AS_OF - world.rng.randint(300, 900), script)
    bundle = inv.hang(alive_until=AS_OF - 1)
    pending = (
        [unanswered(calls[0], verdict="INTENT_ONLY", key=f"send-invoice:{invoice}")]
        if in_tool
        else []
    )
    return [bundle], Case(
        "live_in_tool" if in_tool else "live_in_model",
        "live",
        bundle.ledger[0],
        inv.id,
        "TOOL_UNANSWERED" if in_tool else "MODEL_INFLIGHT",
        "wait",
        "its worker is alive and renews the lease (lease_until after as_of): in flight, not an "
        "orphan",
        invoice,
        pending,
    )
