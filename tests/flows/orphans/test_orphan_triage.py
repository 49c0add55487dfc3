"""Orphan classification on small hand-built frames: every class of seed 000 and every trap."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import ParameterError, SchemaError
from incidentkit.flows.orphans.triage import (
    CALL_COLUMNS,
    RUN_COLUMNS,
    OrphanClass,
    OrphanReport,
    classify_orphans,
    event_kinds,
    run_invocations,
)
from incidentkit.frames import build, empty

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(minutes=10)
TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}"}


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def run(run_id: str, session_id: str, **fields: Any) -> dict[str, Any]:
    """A ledger row: RUNNING, lease expired at 03:01, one attempt, unless told otherwise."""
    return {
        "run_id": run_id,
        "app_name": "billing",
        "user_id": "u1",
        "session_id": session_id,
        "invocation_id": None,
        "request": {"text": f"invoice for {run_id}"},
        "status": "RUNNING",
        "owner": "worker-a",
        "lease_until": at(60),
        "attempts": 1,
        "started_at": at(0),
        "updated_at": at(0),
        **fields,
    }


class Log:
    """Builds events, calls and responses in stored order (seq counts per session)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self._seq: dict[str, int] = {}

    def _event(
        self, session: str, inv: str | None, t: float, author: str, **f: Any
    ) -> dict[str, Any]:
        seq = self._seq.get(session, 0)
        self._seq[session] = seq + 1
        event = {
            "event_id": f"{session}-e{seq}",
            "app_name": f.pop("app_name", "billing"),
            "user_id": f.pop("user_id", "u1"),
            "session_id": session,
            "invocation_id": inv,
            "seq": seq,
            "ts": at(t),
            "author": author,
            "long_running_tool_ids": (),
            "source_format": "java-json",
            **f,
        }
        self.events.append(event)
        return event

    def user(self, session: str, inv: str | None, t: float, **f: Any) -> Log:
        self._event(session, inv, t, "user", text="send the invoice", **f)
        return self

    def text(self, session: str, inv: str, t: float, author: str, *, final: bool = True) -> Log:
        self._event(session, inv, t, author, text=f"{author} says hi", final_response=final)
        return self

    def error(self, session: str, inv: str, t: float, author: str, code: str) -> Log:
        """ADK Python's event when a tool or the model raises: an error code, no content, final
        by ADK's rule."""
        self._event(
            session, inv, t, author, error_code=code, error_message="boom", final_response=True
        )
        return self

    def call(
        self,
        session: str,
        inv: str,
        t: float,
        author: str,
        call_id: str | None,
        tool: str,
        args: dict[str, Any],
        *,
        long_running: bool = False,
    ) -> Log:
        ids = (call_id,) if long_running else ()
        event = self._event(
            session, inv, t, author, long_running_tool_ids=ids, final_response=long_running
        )
        self.calls.append(
            {
                **{k: event[k] for k in ("event_id", "session_id", "invocation_id", "seq", "ts")},
                "author": author,
                "call_id": call_id,
                "name": tool,
                "args": args,
                "args_key": str(sorted(args.items())),
                "long_running": long_running,
            }
        )
        return self

    def response(
        self, session: str, inv: str, t: float, author: str, call_id: str | None, tool: str
    ) -> Log:
        event = self._event(session, inv, t, author)
        self.responses.append(
            {
                **{k: event[k] for k in ("event_id", "session_id", "invocation_id", "seq", "ts")},
                "author": author,
                "call_id": call_id,
                "name": tool,
                "response": {"ok": True},
            }
        )
        return self

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return (
            build("events", self.events),
            build("calls", self.calls),
            build("responses", self.responses),
        )


def journal(*rows: tuple[str, str | None, str | None, str]) -> pd.DataFrame:
    """Journal rows from (key, invocation_id, function_call_id, status)."""
    return build(
        "journal",
        [
            {
                "key": k,
                "invocation_id": i,
                "function_call_id": c,
                "status": s,
                "result": {"sent": True} if s == "DONE" else None,
                "created_at": at(5),
                "updated_at": at(6),
            }
            for k, i, c, s in rows
        ],
    )


def classify(
    runs: list[dict[str, Any]], log: Log, jrows: pd.DataFrame | None = None, **kw: Any
) -> OrphanReport:
    events, calls, responses = log.frames()
    return classify_orphans(
        build("runs", runs),
        events,
        calls,
        responses,
        empty("journal") if jrows is None else jrows,
        as_of=kw.pop("as_of", AS_OF),
        terminal_agent=kw.pop("terminal_agent", "notify_agent"),
        key_templates=kw.pop("key_templates", TEMPLATES),
        **kw,
    )


def one(report: OrphanReport, run_id: str, view: str = "orphans") -> pd.Series:
    rows = getattr(report, view)
    match = rows[rows["run_id"] == run_id]
    assert len(match) == 1, f"{run_id} not exactly once in {view}: {rows['run_id'].tolist()}"
    return match.iloc[0]


INVOICE = {"invoiceId": "INV-77"}


def test_every_seed_class_from_the_tail_of_the_invocation() -> None:
    log = (
        Log()
        .user("s-model", "i-model", 1)
        .call("s-model", "i-model", 2, "draft_agent", "c1", "lookup", {"id": 1})
        .response("s-model", "i-model", 3, "draft_agent", "c1", "lookup")
        .user("s-tool", "i-tool", 1)
        .call("s-tool", "i-tool", 2, "billing_agent", "c2", "sendInvoice", INVOICE)
        .user("s-pause", "i-pause", 1)
        .call(
            "s-pause",
            "i-pause",
            2,
            "billing_agent",
            "c3",
            "approve",
            {"amount": 5},
            long_running=True,
        )
        .user("s-done", "i-done", 1)
        .text("s-done", "i-done", 2, "notify_agent")
        .user("s-other", "i-other", 1)
    )
    runs = [
        run("r-missing", "s-gone", invocation_id="i-gone"),
        run("r-model", "s-model", invocation_id="i-model"),
        run("r-tool", "s-tool", invocation_id="i-tool"),
        run("r-pause", "s-pause", invocation_id="i-pause"),
        run("r-done", "s-done", invocation_id="i-done"),
    ]
    report = classify(runs, log)
    got = report.orphans[["run_id", "orphan_class", "unanswered_calls", "action_kind"]]
    expected = pd.DataFrame(
        {
            "run_id": ["r-done", "r-missing", "r-model", "r-pause", "r-tool"],
            "orphan_class": [
                "ACTUALLY_DONE",
                "NOT_STARTED",
                "MODEL_INFLIGHT",
                "PAUSED",
                "TOOL_UNANSWERED",
            ],
            "unanswered_calls": [(), (), (), ("c3",), ("c2",)],
            "action_kind": ["MARK_DONE", "REDRIVE", "REDRIVE", "MARK_PAUSED", "REDRIVE"],
        }
    ).astype(
        {"run_id": "str", "orphan_class": "str", "unanswered_calls": object, "action_kind": "str"}
    )
    pd.testing.assert_frame_equal(got, expected)
    assert list(report.orphans.columns) == list(RUN_COLUMNS)
    assert report.class_counts() == {
        "NOT_STARTED": 1,
        "MODEL_INFLIGHT": 1,
        "TOOL_UNANSWERED": 1,
        "PAUSED": 1,
        "ACTUALLY_DONE": 1,
        "UNKNOWN": 0,
    }
    assert one(report, "r-missing")["reason"] == "no event is stored for session s-gone"
    assert "session s-gone holds no events" in one(report, "r-missing")["action"]
    assert one(report, "r-model")["action"] == (
        "Re-drive: start a new invocation in session s-model with a continuation message; "
        "the model call in flight was lost (cost: one model call)."
    )
    assert "c3" in one(report, "r-pause")["action"]
    assert "answer the user twice" in one(report, "r-done")["action"]


def test_null_ledger_invocation_is_recovered_from_the_user_event_after_started_at() -> None:
    # An earlier, finished invocation in the same session must not be picked up.
    log = (
        Log()
        .user("s1", "i-old", -100)
        .text("s1", "i-old", -90, "notify_agent")
        .user("s1", "i-new", 5)
        .text("s1", "i-new", 6, "draft_agent")
    )
    report = classify([run("r1", "s1", started_at=at(4))], log)
    row = one(report, "r1")
    assert (row["invocation_id"], row["invocation_source"]) == ("i-new", "user_event")
    assert row["orphan_class"] == OrphanClass.MODEL_INFLIGHT
    assert "recovered from the user event #2" in row["reason"]


def test_user_event_before_started_at_is_ignored() -> None:
    log = Log().user("s1", "i-old", -100).text("s1", "i-old", -90, "notify_agent")
    report = classify([run("r1", "s1", started_at=at(0))], log)
    row = one(report, "r1")
    assert row["orphan_class"] == OrphanClass.NOT_STARTED
    assert pd.isna(row["invocation_id"])
    assert (
        "no user event in session s1 at or after started_at 2026-11-29T03:00:00Z" in row["reason"]
    )
    assert "replay the stored request" in row["action"]


def test_run_invocations_reports_the_source_of_each_invocation_id() -> None:
    log = Log().user("s1", "i-1", 5).user("s2", "i-2", 5)
    runs = build("runs", [run("r1", "s1"), run("r2", "s2", invocation_id="i-x"), run("r3", "s3")])
    got = run_invocations(runs, log.frames()[0])
    expected = pd.DataFrame(
        {
            "run_id": ["r1", "r2", "r3"],
            "session_id": ["s1", "s2", "s3"],
            "invocation_id": ["i-1", "i-x", None],
            "invocation_source": ["user_event", "ledger", None],
        },
        dtype="str",
    )
    pd.testing.assert_frame_equal(got, expected)


def test_a_sub_agents_final_text_is_not_done() -> None:
    log = Log().user("s1", "i1", 1).text("s1", "i1", 2, "draft_agent")
    row = one(classify([run("r1", "s1", invocation_id="i1")], log), "r1")
    assert row["orphan_class"] == OrphanClass.MODEL_INFLIGHT
    assert "final text by draft_agent, which is not the terminal agent" in row["reason"]


def test_the_terminal_agents_final_response_is_actually_done() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .text("s1", "i1", 2, "draft_agent")
        .text("s1", "i1", 3, "notify_agent")
    )
    report = classify([run("r1", "s1", invocation_id="i1")], log)
    assert one(report, "r1")["orphan_class"] == OrphanClass.ACTUALLY_DONE
    # Several terminal agents may be named; one that is not named does not count.
    other = classify([run("r1", "s1", invocation_id="i1")], log, terminal_agent=["x", "y"])
    assert one(other, "r1")["orphan_class"] == OrphanClass.MODEL_INFLIGHT


def test_long_running_call_earlier_in_the_invocation_is_not_a_pause() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "approve", {"a": 1}, long_running=True)
        .response("s1", "i1", 3, "billing_agent", "c1", "approve")
    )
    row = one(classify([run("r1", "s1", invocation_id="i1")], log), "r1")
    assert row["orphan_class"] == OrphanClass.MODEL_INFLIGHT


def test_a_paused_ledger_row_waits_and_is_not_an_orphan() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "approve", {"a": 1}, long_running=True)
    )
    report = classify([run("r1", "s1", invocation_id="i1", status="PAUSED", lease_until=None)], log)
    assert report.orphans.empty
    row = one(report, "r1", "in_flight")
    assert (row["orphan_class"], row["action_kind"]) == ("PAUSED", "WAIT")
    assert row["action"] == "Wait: paused on long-running call(s) c1 awaiting approval."
    assert report.status_disagreements.empty


@pytest.mark.parametrize(
    ("jrows", "verdict", "window", "kind", "words"),
    [
        ([], "NO_ENTRY", "W3", "REDRIVE", "no journal entry for send-invoice:INV-77 (W3"),
        (
            [("send-invoice:INV-77", "i1", "c1", "INTENT")],
            "INTENT_ONLY",
            "W4",
            "ASK_DOWNSTREAM",
            "Ask the system behind sendInvoice whether it saw key send-invoice:INV-77 before "
            "re-driving (W4",
        ),
        (
            [("send-invoice:INV-77", "i1", "c1", "DONE")],
            "DONE",
            "-",
            "REPLAY",
            "Replay stored result for key send-invoice:INV-77; do not call sendInvoice again",
        ),
    ],
)
def test_journal_verdict_by_business_key(
    jrows: list[tuple[str, str, str, str]], verdict: str, window: str, kind: str, words: str
) -> None:
    # The journal entry was written by an earlier invocation with another call id: the
    # business key still matches it.
    log = (
        Log().user("s1", "i1", 1).call("s1", "i1", 2, "billing_agent", "c9", "sendInvoice", INVOICE)
    )
    report = classify([run("r1", "s1", invocation_id="i1")], log, journal(*jrows))
    call = report.calls.iloc[0]
    assert (call["call_id"], call["business_key"], call["journal_verdict"], call["window"]) == (
        "c9",
        "send-invoice:INV-77",
        verdict,
        window,
    )
    assert call["matched_by"] == ("business_key" if jrows else None) or (
        pd.isna(call["matched_by"]) and not jrows
    )
    row = one(report, "r1")
    assert (row["journal_verdict"], row["action_kind"]) == (verdict, kind)
    assert words in row["action"]
    assert list(report.calls.columns) == list(CALL_COLUMNS)


def test_journal_keyed_by_call_id_is_the_duplicate_send_trap() -> None:
    log = (
        Log().user("s1", "i1", 1).call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
    )
    report = classify(
        [run("r1", "s1", invocation_id="i1")], log, journal(("c1", "i1", "c1", "INTENT"))
    )
    call = report.calls.iloc[0]
    assert (call["matched_by"], call["journal_verdict"], call["journal_key"]) == (
        "function_call_id",
        "INTENT_ONLY",
        "c1",
    )
    row = one(report, "r1")
    assert row["action_kind"] == "ASK_DOWNSTREAM"
    assert row["action"].startswith("Do not re-drive yet.")
    assert "keyed by function call id" in row["action"]


def test_a_call_whose_args_lack_the_key_field_has_no_key() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", {"customer": "ACME"})
    )
    report = classify([run("r1", "s1", invocation_id="i1")], log)
    call = report.calls.iloc[0]
    assert call["journal_verdict"] == "NO_KEY"
    assert pd.isna(call["business_key"])
    assert "args lack field 'invoiceId'" in call["action"]
    assert one(report, "r1")["action_kind"] == "INVESTIGATE"


def test_a_tool_without_template_is_untracked() -> None:
    log = Log().user("s1", "i1", 1).call("s1", "i1", 2, "draft_agent", "c1", "lookup", {"id": 1})
    report = classify([run("r1", "s1", invocation_id="i1")], log)
    assert report.calls.iloc[0]["journal_verdict"] == "UNTRACKED"
    assert one(report, "r1")["action_kind"] == "REDRIVE"


def test_calls_without_ids_pair_as_the_seed_does() -> None:
    # The seed maps a missing id to "": a response without id answers a call without id.
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "draft_agent", None, "lookup", {"id": 1})
        .response("s1", "i1", 3, "draft_agent", None, "lookup")
        .user("s2", "i2", 1)
        .call("s2", "i2", 2, "draft_agent", None, "lookup", {"id": 1})
    )
    report = classify(
        [run("r1", "s1", invocation_id="i1"), run("r2", "s2", invocation_id="i2")], log
    )
    assert one(report, "r1")["orphan_class"] == OrphanClass.MODEL_INFLIGHT
    assert one(report, "r2")["orphan_class"] == OrphanClass.TOOL_UNANSWERED


def test_crash_loop_is_parked_with_a_dead_letter_record() -> None:
    log = Log().user("s1", "i1", 1).text("s1", "i1", 2, "draft_agent")
    report = classify([run("r1", "s1", invocation_id="i1", attempts=3)], log, attempts_cap=3)
    row = one(report, "r1")
    assert row["action_kind"] == "PARK"
    assert row["action"].startswith("Park and alert: attempts 3 ≥ cap 3")
    loop = one(report, "r1", "crash_loops")
    assert (loop["attempts"], loop["attempts_cap"], loop["orphan_class"]) == (
        3,
        3,
        "MODEL_INFLIGHT",
    )
    letter = loop["dead_letter"]
    assert letter["request"] == {"text": "invoice for r1"}
    assert letter["orphan_class"] == "MODEL_INFLIGHT"
    assert [(e["seq"], e["author"], e["kind"]) for e in letter["last_events"]] == [
        (0, "user", "user"),
        (1, "draft_agent", "final"),
    ]
    # Below the cap, the same run is re-driven.
    below = classify([run("r1", "s1", invocation_id="i1", attempts=2)], log, attempts_cap=3)
    assert below.crash_loops.empty
    assert one(below, "r1")["action_kind"] == "REDRIVE"


def test_a_done_run_over_the_cap_is_marked_done_not_parked() -> None:
    log = Log().user("s1", "i1", 1).text("s1", "i1", 2, "notify_agent")
    report = classify([run("r1", "s1", invocation_id="i1", attempts=5)], log)
    assert report.crash_loops.empty
    assert one(report, "r1")["action_kind"] == "MARK_DONE"


def test_a_live_lease_is_not_an_orphan() -> None:
    log = Log().user("s1", "i1", 1)
    lease = AS_OF + pd.Timedelta(seconds=30)
    report = classify(
        [run("r1", "s1", invocation_id="i1", lease_until=lease, owner="worker-b")], log
    )
    assert report.orphans.empty
    row = one(report, "r1", "in_flight")
    assert row["action_kind"] == "NONE"
    assert (
        row["action"] == "Not an orphan: lease held by worker worker-b until 2026-11-29T03:10:30Z."
    )
    live = one(report, "r1", "live_leases")
    assert (live["owner"], live["remaining_s"]) == ("worker-b", 30.0)


def test_duplicate_effects_from_the_journal_and_from_answered_calls() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
        .response("s1", "i1", 3, "billing_agent", "c1", "sendInvoice")
        .user("s1", "i2", 10)
        .call("s1", "i2", 11, "billing_agent", "c2", "sendInvoice", INVOICE)
        .response("s1", "i2", 12, "billing_agent", "c2", "sendInvoice")
        .user("s2", "i3", 1)
        .call("s2", "i3", 2, "billing_agent", "c3", "sendInvoice", {"invoiceId": "INV-9"})
        .response("s2", "i3", 3, "billing_agent", "c3", "sendInvoice")
        .user("s2", "i4", 10)
        .call("s2", "i4", 11, "billing_agent", "c4", "sendInvoice", {"invoiceId": "INV-9"})
        .response("s2", "i4", 12, "billing_agent", "c4", "sendInvoice")
    )
    # INV-77 was journaled by call id twice (two sends); INV-9 has no journal at all.
    jrows = journal(("c1", "i1", "c1", "DONE"), ("c2", "i2", "c2", "DONE"))
    report = classify([], log, jrows)
    got = report.duplicate_effects[["business_key", "tool", "effects", "basis", "call_ids"]]
    expected = pd.DataFrame(
        {
            "business_key": ["send-invoice:INV-77", "send-invoice:INV-9"],
            "tool": ["sendInvoice", "sendInvoice"],
            "effects": [2, 2],
            "basis": ["journal", "calls"],
            "call_ids": [("c1", "c2"), ("c3", "c4")],
        }
    ).astype({"business_key": "str", "tool": "str", "basis": "str", "call_ids": object})
    pd.testing.assert_frame_equal(got, expected)


def test_a_w4_intent_beside_a_later_done_under_call_id_keys_is_a_duplicate_send() -> None:
    """Seed 000's trap: killed in W4 (intent kept, invoice sent), re-driven under a new call
    id that found no entry and sent again."""
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
        .user("s1", "i2", 10)
        .call("s1", "i2", 11, "billing_agent", "c2", "sendInvoice", INVOICE)
        .response("s1", "i2", 12, "billing_agent", "c2", "sendInvoice")
    )
    jrows = journal(
        ("send-invoice:c1", "i1", "c1", "INTENT"), ("send-invoice:c2", "i2", "c2", "DONE")
    )
    dup = classify([], log, jrows).duplicate_effects
    assert dup[["business_key", "effects", "basis"]].to_dict("records") == [
        {"business_key": "send-invoice:INV-77", "effects": 2, "basis": "journal"}
    ]
    assert dup["journal_keys"].iloc[0] == ("send-invoice:c1", "send-invoice:c2")
    assert "keyed by function call id" in dup["detail"].iloc[0]


def test_two_intents_without_a_done_are_not_a_proven_duplicate() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
        .user("s1", "i2", 10)
        .call("s1", "i2", 11, "billing_agent", "c2", "sendInvoice", INVOICE)
    )
    jrows = journal(("k-c1", "i1", "c1", "INTENT"), ("k-c2", "i2", "c2", "INTENT"))
    assert classify([], log, jrows).duplicate_effects.empty


def test_an_expired_run_whose_log_shows_a_clean_pause_disagrees_with_the_ledger() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "lr-1", "approve", {}, long_running=True)
    )
    report = classify([run("r1", "s1", invocation_id="i1")], log)
    assert one(report, "r1")["orphan_class"] == "PAUSED"
    row = one(report, "r1", "status_disagreements")
    assert row["ledger_status"] == "RUNNING"
    assert "PAUSED update was lost" in row["detail"]
    live = classify([run("r1", "s1", invocation_id="i1", lease_until=at(3600))], log)
    assert live.status_disagreements.empty


def test_a_replayed_call_under_a_business_key_journal_is_not_a_duplicate() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
        .response("s1", "i1", 3, "billing_agent", "c1", "sendInvoice")
        .user("s1", "i2", 10)
        .call("s1", "i2", 11, "billing_agent", "c2", "sendInvoice", INVOICE)
        .response("s1", "i2", 12, "billing_agent", "c2", "sendInvoice")
    )
    report = classify([], log, journal(("send-invoice:INV-77", "i1", "c1", "DONE")))
    assert report.duplicate_effects.empty


def test_status_disagreements_between_ledger_and_log() -> None:
    log = (
        Log()
        .user("s-done", "i-done", 1)
        .call("s-done", "i-done", 2, "billing_agent", "c1", "sendInvoice", INVOICE)
        .user("s-failed", "i-failed", 1)
        .text("s-failed", "i-failed", 2, "notify_agent")
        .user("s-paused", "i-paused", 1)
        .text("s-paused", "i-paused", 2, "draft_agent")
        .user("s-ok", "i-ok", 1)
        .text("s-ok", "i-ok", 2, "notify_agent")
    )
    runs = [
        run("r-done", "s-done", invocation_id="i-done", status="DONE"),
        run("r-failed", "s-failed", invocation_id="i-failed", status="FAILED"),
        run("r-paused", "s-paused", invocation_id="i-paused", status="PAUSED"),
        run("r-nolease", "s-ok", invocation_id="i-ok", status="RUNNING", lease_until=None),
        run("r-ok", "s-ok", invocation_id="i-ok", status="DONE"),
    ]
    report = classify(runs, log)
    got = report.status_disagreements[["run_id", "ledger_status", "orphan_class", "detail"]]
    expected = pd.DataFrame(
        {
            "run_id": ["r-done", "r-failed", "r-nolease", "r-paused"],
            "ledger_status": ["DONE", "FAILED", "RUNNING", "PAUSED"],
            "orphan_class": ["TOOL_UNANSWERED", "ACTUALLY_DONE", "ACTUALLY_DONE", "MODEL_INFLIGHT"],
            "detail": [
                "ledger says DONE but call(s) c1 have no response in the log",
                "ledger says FAILED but the terminal agent's final response is stored "
                "(event #1 by notify_agent)",
                "ledger says RUNNING without lease_until, so the sweeper never claims it",
                "ledger says PAUSED but no event of the invocation carries long-running call ids",
            ],
        },
        dtype="str",
    )
    pd.testing.assert_frame_equal(got, expected)
    # The lease-less RUNNING row is not an orphan (no lease expired) but needs a person.
    assert one(report, "r-nolease", "in_flight")["action_kind"] == "INVESTIGATE"


def test_ledger_invocation_without_events_is_unknown() -> None:
    log = Log().user("s1", "i-other", 1)
    row = one(classify([run("r1", "s1", invocation_id="i-lost")], log), "r1")
    assert row["orphan_class"] == OrphanClass.UNKNOWN
    assert row["action_kind"] == "INVESTIGATE"
    assert "no stored event carries the ledger's invocation id i-lost" in row["reason"]


def test_events_of_another_user_do_not_count_as_the_session() -> None:
    log = Log().user("s1", "i1", 1, user_id="someone-else")
    row = one(classify([run("r1", "s1", invocation_id="i1")], log), "r1")
    assert row["orphan_class"] == OrphanClass.NOT_STARTED


def test_per_owner_counts_recovered_but_unfinished_runs() -> None:
    log = Log().user("s1", "i1", 1).user("s2", "i2", 1).user("s3", "i3", 1)
    live = AS_OF + pd.Timedelta(seconds=30)
    runs = [
        run("r1", "s1", invocation_id="i1", owner="w1", attempts=0),
        run("r2", "s2", invocation_id="i2", owner="w1", attempts=2),
        run("r3", "s3", invocation_id="i3", owner="w2", attempts=1, lease_until=live),
        run("r4", "s3", invocation_id="i3", owner="w2", status="DONE"),
    ]
    got = classify(runs, log).per_owner
    expected = pd.DataFrame(
        {
            "owner": ["w1", "w2"],
            "runs": [2, 1],
            "live_leases": [0, 1],
            "orphans": [2, 0],
            "recovered_unfinished": [1, 1],
            "crash_loops": [0, 0],
        }
    ).astype({"owner": "str"})
    pd.testing.assert_frame_equal(got, expected)


def test_naive_as_of_is_refused() -> None:
    with pytest.raises(ParameterError, match="as_of is a naive datetime"):
        classify([], Log(), as_of=pd.Timestamp("2026-11-29T03:10:00"))


@pytest.mark.parametrize(
    ("template", "match"),
    [
        ("send-invoice:{invoiceId", "tool 'sendInvoice' is not a valid format string"),
        ("send-invoice:{}", "tool 'sendInvoice' has a positional field"),
        ("send-invoice", "tool 'sendInvoice' names no args field"),
        ("send-invoice:{invoiceId!x}", "tool 'sendInvoice' has an unknown conversion"),
    ],
)
def test_bad_key_template_is_refused(template: str, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        classify([], Log(), key_templates={"sendInvoice": template})


def test_bad_attempts_cap_is_refused() -> None:
    with pytest.raises(ParameterError, match="attempts_cap must be a whole number"):
        classify([], Log(), attempts_cap=0)


def test_empty_inputs_give_empty_report_with_all_columns() -> None:
    report = classify([], Log())
    for view in ("orphans", "in_flight"):
        pd.testing.assert_frame_equal(
            getattr(report, view),
            pd.DataFrame({c: pd.Series([], dtype=d) for c, d in RUN_COLUMNS.items()}),
        )
    pd.testing.assert_frame_equal(
        report.calls, pd.DataFrame({c: pd.Series([], dtype=d) for c, d in CALL_COLUMNS.items()})
    )
    for view in (
        "crash_loops",
        "duplicate_effects",
        "live_leases",
        "status_disagreements",
        "per_owner",
    ):
        assert getattr(report, view).empty, view
    assert report.as_of == AS_OF
    assert report.ledger_runs == 0


def test_inputs_are_not_modified() -> None:
    log = (
        Log().user("s1", None, 1).call("s1", None, 2, "billing_agent", "c1", "sendInvoice", INVOICE)
    )
    events, calls, responses = log.frames()
    runs = build("runs", [run("r1", "s1")])
    copies = [f.copy(deep=True) for f in (runs, events, calls, responses)]
    classify_orphans(
        runs,
        events,
        calls,
        responses,
        empty("journal"),
        as_of=AS_OF,
        terminal_agent="notify_agent",
        key_templates=TEMPLATES,
    )
    for before, after in zip(copies, (runs, events, calls, responses), strict=True):
        pd.testing.assert_frame_equal(before, after)


def test_event_kinds() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "a", "c1", "lookup", {})
        .response("s1", "i1", 3, "a", "c1", "lookup")
        .text("s1", "i1", 4, "a")
        .text("s1", "i1", 5, "a", final=False)
    )
    events, calls, responses = log.frames()
    assert event_kinds(events, calls, responses).tolist() == [
        "user",
        "call",
        "response",
        "final",
        "text",
    ]
    assert event_kinds(events).tolist() == ["user", "text", "text", "final", "text"]


def test_the_worst_call_decides_and_every_call_is_listed() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .call("s1", "i1", 2, "billing_agent", "c1", "sendInvoice", {"invoiceId": "A"})
        .call("s1", "i1", 3, "billing_agent", "c2", "sendInvoice", {"invoiceId": "B"})
        .call("s1", "i1", 4, "billing_agent", "c3", "sendInvoice", {"invoiceId": "C"})
    )
    jrows = journal(("send-invoice:B", "i1", "c2", "INTENT"), ("c3", "i1", "c3", "DONE"))
    report = classify([run("r1", "s1", invocation_id="i1")], log, jrows)
    got = report.calls[
        ["call_id", "journal_verdict", "matched_by", "window", "call_action_kind", "action_kind"]
    ]
    expected = pd.DataFrame(
        {
            "call_id": ["c1", "c2", "c3"],
            "journal_verdict": ["NO_ENTRY", "INTENT_ONLY", "DONE"],
            "matched_by": [None, "business_key", "function_call_id"],
            "window": ["W3", "W4", "-"],
            "call_action_kind": ["REDRIVE", "ASK_DOWNSTREAM", "INVESTIGATE"],
            "action_kind": ["INVESTIGATE"] * 3,  # the run's: its worst call decides
        },
        dtype="str",
    )
    pd.testing.assert_frame_equal(got, expected)
    row = one(report, "r1")
    assert (row["unanswered_calls"], row["journal_verdict"], row["action_kind"]) == (
        ("c1", "c2", "c3"),
        "DONE",
        "INVESTIGATE",
    )
    # Only the calls that block a re-drive are spelled out in the action, worst first in seq.
    assert row["action"].startswith("Do not re-drive yet. Ask the system behind sendInvoice")
    assert (
        "journal entry c3 for call c3 is keyed by function call id and says DONE" in row["action"]
    )
    assert "send-invoice:A" not in row["action"]
    assert "sendInvoice c1: NO_ENTRY (W3); sendInvoice c2: INTENT_ONLY (W4)" in row["reason"]


def test_bad_terminal_agent_and_missing_columns_are_refused() -> None:
    with pytest.raises(ParameterError, match="terminal_agent must name the agent"):
        classify([], Log(), terminal_agent=None)
    events, calls, responses = Log().frames()
    with pytest.raises(SchemaError, match="the journal frame lacks required columns"):
        classify_orphans(
            build("runs", []),
            events,
            calls,
            responses,
            empty("journal").drop(columns="key"),
            as_of=AS_OF,
            terminal_agent="notify_agent",
        )


def test_an_error_event_of_the_terminal_agent_is_no_answer() -> None:
    """ADK Python stores an error event (error_code, no content) when a tool or the model
    raises; ADK counts it as final, but the user got no answer: the run is not done."""
    log = (
        Log()
        .user("s-tool", "i-tool", 1)
        .call("s-tool", "i-tool", 2, "notify_agent", "c1", "lookup", {"id": 1})
        .error("s-tool", "i-tool", 3, "notify_agent", "LookupError")
        .user("s-model", "i-model", 1)
        .error("s-model", "i-model", 2, "notify_agent", "ConnectionResetError")
    )
    events, _, _ = log.frames()
    assert events.loc[events["error_code"].notna(), "final_response"].all()  # ADK's rule
    orphans = classify(
        [
            run("r-tool", "s-tool", invocation_id="i-tool"),
            run("r-model", "s-model", invocation_id="i-model"),
        ],
        log,
    )
    tool, model = one(orphans, "r-tool"), one(orphans, "r-model")
    assert (tool["orphan_class"], tool["action_kind"]) == ("TOOL_UNANSWERED", "REDRIVE")
    assert tool["reason"].endswith("; the last event is an error (LookupError), not an answer")
    assert (model["orphan_class"], model["action_kind"]) == ("MODEL_INFLIGHT", "REDRIVE")
    assert model["reason"] == (
        "last event #1 by notify_agent is an error (ConnectionResetError), not an answer; every "
        "call is answered"
    )
    assert "failed with ConnectionResetError" in model["action"]
    assert orphans.status_disagreements.empty  # RUNNING and not done: nothing contradicts
    # The same logs under a ledger that recorded the failure agree with it.
    failed = classify(
        [
            run("r-tool", "s-tool", invocation_id="i-tool", status="FAILED"),
            run("r-model", "s-model", invocation_id="i-model", status="FAILED"),
        ],
        log,
    )
    assert failed.status_disagreements.empty, failed.status_disagreements.to_string()
    # ADK Java completes a run whose model returned an error: its DONE agrees with the log too.
    done = classify([run("r-model", "s-model", invocation_id="i-model", status="DONE")], log)
    assert done.status_disagreements.empty, done.status_disagreements.to_string()


def test_an_error_event_before_the_terminal_agents_answer_does_not_hide_it() -> None:
    log = (
        Log()
        .user("s1", "i1", 1)
        .error("s1", "i1", 2, "draft_agent", "RESOURCE_EXHAUSTED")
        .text("s1", "i1", 3, "notify_agent")
    )
    row = one(classify([run("r1", "s1", invocation_id="i1")], log), "r1")
    assert (row["orphan_class"], row["action_kind"]) == ("ACTUALLY_DONE", "MARK_DONE")
