"""The triage card on ADK 2.x logs built by hand: a run max_llm_calls stopped failed (it is no
quiet error), one that made exactly the limit's calls did not hit it, and markers are no model
calls."""

from __future__ import annotations

from typing import Any

import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.flows.overview.card import Profile, triage_card
from incidentkit.frames import build

T0 = pd.Timestamp("2026-12-01T10:00:00Z")


def log(invocation: str, *rows: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "event_id": f"{invocation}-{i}",
            "app_name": "app",
            "session_id": f"s-{invocation}",
            "invocation_id": invocation,
            "seq": i,
            "ts": T0 + pd.Timedelta(seconds=i),
            "author": "agent",
            "kind": "turn",
            "total_tokens": 15,
            **row,
        }
        for i, row in enumerate(rows)
    ]


USER = {"author": "user", "total_tokens": None}
CALL = {"text": "calling"}
LIMIT = {
    "kind": "error",
    "error_code": "LlmCallsLimitExceededError",
    "error_message": "Max number of llm calls limit of `4` exceeded",
    "final_response": True,
    "total_tokens": None,
}
TIMEOUT = {"kind": "error", "error_code": "TimeoutError", "total_tokens": None}
CHECKPOINT = {"kind": "checkpoint", "total_tokens": None}


def card(*rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    events = build("events", [row for part in rows for row in part])
    found = triage_card(
        Frames(events=events), as_of=T0 + pd.Timedelta(hours=1), profile=Profile(max_llm_calls=4)
    )
    return {
        str(row["check"]): {str(k): v for k, v in row.items()} for row in found.to_dict("records")
    }


def test_a_limit_hit_run_failed_and_a_run_at_the_limit_did_not_hit_it() -> None:
    lines = card(
        log("e-at", USER, CALL, CALL, CALL, {"text": "done", "final_response": True}),
        log("e-stop", USER, CALL, CALL, CALL, CALL, LIMIT),
        log(
            "e-retry", USER, CALL, TIMEOUT, CALL, CHECKPOINT, {"text": "ok", "final_response": True}
        ),
    )
    over = lines["over-call-limit"]
    assert (over["severity"], over["count"]) == ("CRITICAL", 1)
    assert over["title"].startswith("1 invocation(s) hit maxLlmCalls 4")
    errors = lines["quiet-errors"]
    assert errors["count"] == 2  # the limit error and the timeout
    assert errors["title"].startswith("1 event(s) with an error code on runs that did not fail")
    assert "1 error(s) of 1 run(s) maxLlmCalls stopped" in errors["title"]
    assert errors["severity"] == "WARNING"  # the retried timeout is quiet
    assert errors["session_id"] == "s-e-retry"


def test_a_limit_error_alone_is_no_quiet_error() -> None:
    lines = card(log("e-stop", USER, CALL, CALL, CALL, CALL, LIMIT))
    errors = lines["quiet-errors"]
    assert errors["severity"] == "INFO" and errors["count"] == 1
    assert errors["title"].startswith("0 event(s) with an error code on runs that did not fail")
    assert lines["over-call-limit"]["count"] == 1
