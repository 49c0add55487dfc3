"""``crash_recovery``: the invoicing flow killed at each crash window, plus its traps.

Worker ``worker-3`` is halted at 03:00:00 (a poison run re-driven onto it renders a PDF that
exhausts the heap); every run open on it dies in a different window. ``as_of`` is 03:05:00.
"""

from __future__ import annotations

from typing import Any

from incidentkit.simulate import invoicing as flow
from incidentkit.simulate.model import Bundle, at, iso
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.scenarios import crash_cases as cases
from incidentkit.simulate.scenarios import crash_traps as traps
from incidentkit.simulate.scenarios.common import paused_entry, terminal_agents
from incidentkit.simulate.scenarios.crash_cases import AS_OF, CAP, KILL, Case
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import World

WINDOW = (at("02:30"), AS_OF)
SESSIONS = 16
NEEDS_ACTION = {"redrive", "ask_downstream", "replay_result", "mark_done", "mark_paused", "park"}


def build(world: World, scale: int) -> Plan:
    flow.register(world)
    core: list[Bundle] = []
    found: list[Case] = []
    for make in (
        cases.w2,
        lambda w: cases.w3_w4(w, intent=False),
        lambda w: cases.w3_w4(w, intent=True),
        cases.actually_done,
        cases.draft_final,
        cases.null_invocation,
        lambda w: cases.ledger_only(w, with_history=True),
        lambda w: cases.ledger_only(w, with_history=False),
        lambda w: cases.paused(w, recorded=True),
        lambda w: cases.paused(w, recorded=False),
        traps.crash_loop,
        lambda w: traps.live(w, in_tool=True),
        lambda w: traps.live(w, in_tool=False),
    ):
        bundles, case = make(world)
        core += bundles
        found.append(case)
    bundles, dup_case, duplicate = traps.call_id_journal(world)
    core += bundles
    special = {case.row.run_id for case in found} | {dup_case.row.run_id}
    background = Background(
        start=at("02:30"), end=at("03:04"), sessions=SESSIONS * scale, span_sample=0.35
    )

    def expected(w: World, events_format: str) -> dict[str, Any]:
        return _expected(w, found, duplicate, special)

    return Plan(core=core, background=background, expected=expected, as_of=AS_OF)


def _entry(case: Case) -> dict[str, Any]:
    row = case.row
    expired = row.status == "RUNNING" and row.lease_until is not None and row.lease_until < AS_OF
    return {
        "name": case.name,
        "window": case.window,
        "run_id": row.run_id,
        "session_id": row.session,
        "owner": row.owner,
        "attempts": row.attempts,
        "ledger_status": row.status,
        "lease_until": None if row.lease_until is None else iso(row.lease_until),
        "expired": expired,
        "ledger_invocation_id": row.invocation_id,
        "invocation_id": case.invocation_id,
        "orphan_class": case.orphan_class,
        "unanswered_calls": case.unanswered,
        "business_keys": sorted({c["business_key"] for c in case.unanswered if c["business_key"]}),
        "crash_loop": row.attempts >= CAP,
        "action": case.action,
        "needs_action": case.action in NEEDS_ACTION,
        "invoice": case.invoice,
        "why": case.why,
    }


def _expected(
    world: World,
    found: list[Case],
    duplicate: dict[str, Any],
    special: set[str],
) -> dict[str, Any]:
    entries = [_entry(case) for case in found]
    orphans = [e for e in entries if e["expired"]]
    owners: dict[str, int] = {}
    for entry in orphans:
        owners[entry["owner"]] = owners.get(entry["owner"], 0) + 1
    background_paused = [paused_entry(r) for r in world.open_rows if r.run_id not in special]
    bills = world.billing
    return {
        "as_of": iso(AS_OF),
        "kill": {"worker": "worker-3", "at": iso(KILL), "exit_code": 137},
        "terminal_agent": flow.TERMINAL,
        **terminal_agents(),
        "attempts_cap": CAP,
        "key_templates": flow.KEY_TEMPLATES,
        "orphans": orphans,
        "non_terminal": [e for e in entries if not e["expired"]] + background_paused,
        "crash_loops": [e["run_id"] for e in entries if e["crash_loop"]],
        "duplicate_effects": [duplicate],
        "live_leases": [e["run_id"] for e in entries if e["window"] == "live"],
        "status_disagreements": [
            {
                "run_id": case.row.run_id,
                "ledger_status": case.row.status,
                "log_status": case.log_status,
                "name": case.name,
            }
            for case in found
            if case.log_status
        ],
        "orphans_per_owner": dict(sorted(owners.items())),
        "billing": {
            "invoices_sent": dict(sorted(bills.sent.items())),
            "notifications": dict(sorted(bills.notified.items())),
            "after_recovery": _after_recovery(found, duplicate, bills.sent),
        },
    }


def _after_recovery(
    found: list[Case], duplicate: dict[str, Any], sent: dict[str, int]
) -> dict[str, int]:
    """Invoices per invoice id once every orphan got its action: one per run, except the trap."""
    after = dict(sent)
    for case in found:
        if case.invoice is None:
            continue
        if case.action in ("redrive", "ask_downstream", "mark_done"):
            after[case.invoice] = 1
        else:  # parked, paused or still running: nothing sent by recovery
            after[case.invoice] = sent.get(case.invoice, 0)
    after[duplicate["invoice"]] = duplicate["invoices_sent"]
    return dict(sorted(after.items()))


SPEC = Spec(
    "crash_recovery",
    "Invoicing flow killed at each crash window: orphans, a crash loop, a duplicate invoice",
    WINDOW,
    build,
)
