"""The limit: which invocations hit it (Java: plugin lines and spans; Python: an error event),
what it is configured to, and what it should be (about three times the healthy p99)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.flows.runaway import counts
from incidentkit.flows.runaway.limits import (
    configured_limit,
    hits,
    limit_errors,
    limit_texts,
    nice_ceiling,
    recommend,
)
from incidentkit.frames import build

RUNAWAY = Path(__file__).resolve().parents[3] / "fixtures" / "runaway"


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("Max number of llm calls limit of 500 exceeded", 500),  # ADK Java
        ("Max number of llm calls limit of `8` exceeded", 8),  # ADK Python
        ("LlmCallsLimitExceededError: Max number of llm calls limit of `90` exceeded", 90),
        ("model quota exceeded", None),
        (None, None),
    ],
)
def test_the_limit_is_read_from_the_error_message(text: str | None, limit: int | None) -> None:
    [got] = limit_texts(pd.Series([text], dtype=object)).tolist()
    assert (None if pd.isna(got) else got) == limit


@pytest.mark.parametrize(
    ("value", "nice"), [(27, 30), (30, 30), (43, 45), (131, 140), (1234, 1300), (2, 5)]
)
def test_recommendations_are_rounded_up_to_numbers_people_set(value: float, nice: int) -> None:
    assert nice_ceiling(value) == nice


def test_the_recommendation_is_three_times_the_healthy_p99() -> None:
    p99, recommended = recommend(pd.Series([3] * 90 + [9] * 10))
    assert (p99, recommended) == (9.0, 30)  # seed 003: p99 9 -> 30
    assert recommend(pd.Series([], dtype=float))[1] is None


def test_a_python_limit_error_event_is_a_hit_with_its_limit() -> None:
    events = build(
        "events",
        [
            {
                "event_id": "x",
                "invocation_id": "e-1",
                "author": "loop",
                "error_code": "LlmCallsLimitExceededError",
                "error_message": "Max number of llm calls limit of `8` exceeded",
            },
            {"event_id": "y", "invocation_id": "e-2", "author": "a", "error_code": "MAX_TOKENS"},
        ],
    )
    model_calls = pd.DataFrame(
        {"invocation_id": ["e-1", "e-2"], "model_calls": [8, 2], "ended": [True, True]}
    )
    errors = limit_errors(
        events=events, diagnostics=build("diagnostics", []), spans=build("spans", [])
    )
    got = hits(model_calls, errors, configured=None)
    assert got.values.tolist() == [["e-1", 8, 8, "error event LlmCallsLimitExceededError"]]
    counted = hits(model_calls, errors, configured=1)  # e-2 made more than a limit of 1
    assert counted["invocation_id"].tolist() == ["e-1", "e-2"]
    assert counted["evidence"].iloc[1] == "model calls 2 exceed the configured limit 1"
    assert configured_limit(None, got) == (8, "the limit error's message")
    assert configured_limit(30, got) == (30, "[apps.<app>] max_llm_calls")
    assert configured_limit(None, got.iloc[0:0]) == (500, "ADK's default, assumed")


def test_a_java_limit_hit_is_found_from_the_plugin_log_and_the_spans() -> None:
    truth = json.loads((RUNAWAY / "truth.json").read_text())["expected"]
    incident = ik.open_evidence(RUNAWAY)
    model_calls = counts.from_diagnostics(incident.diagnostics)
    errors = limit_errors(
        events=incident.events, diagnostics=incident.diagnostics, spans=incident.spans
    )
    got = hits(model_calls, errors, configured=None)
    [expected] = truth["limit_hits"]
    [row] = got.to_dict("records")
    assert (row["invocation_id"], row["model_calls"], row["limit"]) == (
        expected["invocation_id"],
        expected["llm_calls"],
        limit_texts(pd.Series([expected["error"]])).iloc[0],
    )
    assert "diagnostics run.error" in row["evidence"] and "status ERROR" in row["evidence"]
    looped = [truth["ping_pong"]["invocation_id"], truth["repeated_call"]["invocation_id"]]
    flagged = model_calls["invocation_id"].isin([*got["invocation_id"], *looped])
    healthy = model_calls.loc[model_calls["ended"] & ~flagged]
    p99, _ = recommend(healthy["model_calls"])
    assert p99 == truth["llm_calls"]["p99"]


def test_exactly_the_limit_of_calls_is_no_hit_without_the_refusal() -> None:
    """ADK counts a call, then refuses it when the count exceeds the limit: an invocation that
    made exactly ``limit`` calls and ended was allowed every one. At the limit with no end
    stored (ADK Java stores no limit error), the refusal ended it; above it, ADK refused."""
    model_calls = pd.DataFrame(
        {
            "invocation_id": ["at-ended", "at-open", "over", "under"],
            "model_calls": [4, 4, 5, 3],
            "ended": [True, False, True, False],
        }
    )
    none = limit_errors(
        events=build("events", []), diagnostics=build("diagnostics", []), spans=build("spans", [])
    )
    got = hits(model_calls, none, configured=4)
    assert got[["invocation_id", "model_calls", "limit"]].values.tolist() == [
        ["at-open", 4, 4],
        ["over", 5, 4],
    ]
    assert got["evidence"].tolist() == [
        "model calls 4 reach the configured limit 4 and the invocation stored no end",
        "model calls 5 exceed the configured limit 4",
    ]
    assert hits(model_calls.drop(columns="ended").iloc[:1], none, configured=4).empty
