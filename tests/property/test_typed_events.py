"""Typed decoding (adk_typed) gives the same frames, rejects and warnings as the general path.

Events are drawn in both spellings, with every field the frames read either well typed (the
typed path then decodes the chunk and the shared rules judge it: a missing id, a timestamp
in the wrong unit, ...) or wild (any JSON value, so the chunk may need the general path).
The same JSON text then goes through the normaliser with typed decoding on and off.
"""

from __future__ import annotations

import json
import os
from typing import Any, cast

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.manifest import Filters
from incidentkit.sources.events import adk_events
from incidentkit.sources.events.adk_events import (
    JAVA_JSON,
    PYTHON_SESSION_JSON,
    Batch,
    Origin,
    normalise,
)
from incidentkit.sources.events.adk_parts import REMOVED
from incidentkit.sources.loaded import RejectSink

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)

wild = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**30, 2**64, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
texts = st.none() | st.sampled_from(["", "user", "agent", "e1", "e2", "s1", "temp:x", "é☃"])
bools = st.none() | st.booleans()
times = (
    st.none()
    | st.sampled_from(
        [
            1_750_000_000_000,
            1_750_000_000_250,
            1_750_000_000.123456,
            1_750_000_000,
            1e11,
            0,
            -5,
            1e14,
            9e15,
        ]
    )
    | st.integers(0, 2**70)
    | st.floats(0, 1e16)
)


def typed_or_wild(strategy: st.SearchStrategy[Any], wildness: bool) -> st.SearchStrategy[Any]:
    return strategy | wild if wildness else strategy


def optional_keys(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def events(wildness: bool) -> st.SearchStrategy[dict[str, Any]]:
    def w(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return typed_or_wild(strategy, wildness)

    payload = st.none() | st.dictionaries(st.sampled_from(["a", "b"]), wild, max_size=2)
    call = optional_keys({"id": w(texts), "name": w(texts), "args": w(payload), "extra": wild})
    response = optional_keys({"id": w(texts), "name": w(texts), "response": w(payload)})
    part = optional_keys(
        {
            "text": w(texts),
            "thought": wild,
            "functionCall": w(st.none() | call),
            "function_call": w(st.none() | call),
            "functionResponse": w(st.none() | response),
            "function_response": w(st.none() | response),
            "codeExecutionResult": wild,
        }
    )
    delta_values = wild | st.just(REMOVED)
    delta = st.none() | st.dictionaries(
        st.sampled_from(["k", "temp:t", "app:a", "user:u", "x:y"]), delta_values, max_size=3
    )
    compaction = optional_keys(
        {
            "startTimestamp": w(times),
            "start_timestamp": w(times),
            "endTimestamp": w(times),
            "end_timestamp": w(times),
            "compactedContent": wild,
        }
    )
    actions = optional_keys(
        {
            "stateDelta": w(delta),
            "state_delta": w(delta),
            "transferToAgent": w(texts),
            "transferAgent": w(texts),
            "escalate": w(bools),
            "skip_summarization": w(bools),
            "compaction": w(st.none() | compaction),
            "rewindBeforeInvocationId": w(texts),
            "rewind_before_invocation_id": w(texts),
            "endOfAgent": w(bools),
            "end_of_agent": w(bools),
            "endInvocation": w(bools),
            "agentState": wild,
            "agent_state": wild,
        }
    )
    usage = wild | optional_keys(
        {"promptTokenCount": wild | st.integers(0, 99), "total_token_count": st.integers(0, 99)}
    )
    return optional_keys(
        {
            "id": w(texts),
            "invocationId": w(texts),
            "invocation_id": w(texts),
            "author": w(texts),
            "branch": w(texts),
            "partial": w(bools),
            "turn_complete": w(bools),
            "errorCode": w(texts),
            "error_message": w(texts),
            "appName": w(texts),
            "user_id": w(texts),
            "sessionId": w(texts),
            "timestamp": w(times),
            "content": w(
                st.none()
                | optional_keys(
                    {"role": texts, "parts": w(st.none() | st.lists(w(part), max_size=3))}
                )
            ),
            "actions": w(st.none() | actions),
            "longRunningToolIds": w(st.none() | st.lists(w(texts), max_size=2)),
            "usageMetadata": usage,
            "unknownKey": wild,
        }
    )


def _base(i: int) -> dict[str, Any]:
    """A well-formed event the drawn fields are laid over, so many records survive."""
    return {
        "id": f"ev{i}",
        "invocationId": "inv",
        "author": "agent",
        "timestamp": 1_750_000_000_000 + i,
    }


def _texts(drawn: list[Any], over_base: bool) -> list[str]:
    out = []
    for i, value in enumerate(drawn):
        if over_base and isinstance(value, dict):
            value = {**_base(i), **value}
        out.append(json.dumps(value))
    return out


def _run(lines: list[str], origin: Origin, with_meta: bool, typed: bool) -> tuple[Any, ...]:
    meta = pd.DataFrame({"location": [f"f.jsonl:{i + 1}" for i in range(len(lines))]})
    if with_meta:
        meta["app_name"], meta["user_id"], meta["session_id"] = "app", "u", "s"
    sink = RejectSink("events")
    adk_events.TYPED = typed
    try:
        frames = normalise(
            [Batch(pd.Series(lines, dtype=object), meta, origin)],
            Filters(),
            sink,
            apply_filters=False,
            identity={"app_name": "app"},
        )
    finally:
        adk_events.TYPED = True
    return frames, sink.rows, sink.warned


def _same(lines: list[str], origin: Origin, with_meta: bool) -> None:
    general = _run(lines, origin, with_meta, typed=False)
    typed = _run(lines, origin, with_meta, typed=True)
    for name, frame in general[0].items():
        pd.testing.assert_frame_equal(typed[0][name], frame, check_exact=True, obj=name)
    assert typed[1] == general[1]
    assert typed[2] == general[2]


origins = st.sampled_from([JAVA_JSON, PYTHON_SESSION_JSON])


@pytest.mark.slow
@SETTINGS
@given(
    st.lists(events(wildness=False), min_size=1, max_size=6), origins, st.booleans(), st.booleans()
)
def test_well_typed_events_read_the_same_typed(
    drawn: list[dict[str, Any]], origin: Origin, with_meta: bool, over_base: bool
) -> None:
    _same(_texts(drawn, over_base), origin, with_meta)


@pytest.mark.slow
@SETTINGS
@given(
    st.lists(events(wildness=True) | wild, min_size=1, max_size=6),
    origins,
    st.booleans(),
    st.booleans(),
)
def test_wild_events_read_the_same_typed(
    drawn: list[Any], origin: Origin, with_meta: bool, over_base: bool
) -> None:
    _same(_texts(drawn, over_base), origin, with_meta)


def test_well_formed_records_decode_typed_and_only_the_others_go_the_general_way() -> None:
    """The typed path reads well-formed text (else the tests above compare nothing); a record
    it cannot decode is left to the general path, not the records around it."""
    lines = _texts([{"content": {"parts": [{"functionCall": {"name": "t", "args": {}}}]}}], True)
    decode = adk_events.adk_typed.decode
    assert list(cast(Any, decode(lines)).undecodable) == []
    assert list(cast(Any, decode([*lines, "[1]", *lines])).undecodable) == [1]
    assert list(cast(Any, decode([*lines, '{"timestamp": NaN}'])).undecodable) == [1]
    assert decode([*lines, {"id": "e"}]) is None  # not text: the chunk goes the general way


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "a", "id": "b", "invocationId": "i", "author": "x", "timestamp": 1750000000000}',
        '{"id": "a", "invocationId": "i", "author": "x", "timestamp": 1e400}',
        '{"id": "a", "invocationId": "i", "author": "x", "timestamp": true}',
        '{"id": "a", "invocationId": "i", "author": "x", "timestamp": 1750000000000, '
        '"content": {"parts": [[]]}}',
        '{"id": "\\ud800", "invocationId": "i", "author": "x", "timestamp": 1750000000000}',
    ],
)
def test_edge_lines_read_the_same_typed(line: str) -> None:
    """Duplicate keys (the last wins), numbers past float, booleans, lone surrogates."""
    _same([line], JAVA_JSON, with_meta=True)


def test_the_typed_structs_hold_every_key_the_normaliser_reads() -> None:
    """A spelling added to the normaliser's tables but not to the Structs would fail here, not
    as an AttributeError on the first chunk that decodes typed."""
    from incidentkit.sources.events.adk_typed import _Actions, _Event
    from incidentkit.sources.tokens import USAGE_KEYS

    event_keys = {key for _, keys, _ in adk_events._TOP for key in keys}
    event_keys |= {key for keys in adk_events._SESSION_JSON_KEYS.values() for key in keys}
    event_keys |= set(USAGE_KEYS)
    action_keys = {key for _, keys, _ in adk_events._ACTIONS for key in keys}
    assert event_keys <= set(_Event.__struct_fields__)
    assert action_keys <= set(_Actions.__struct_fields__)


def test_half_a_surrogate_pair_is_a_reject_naming_it() -> None:
    line = '{"id": "\\ud800", "invocationId": "i", "author": "x", "timestamp": 1750000000000}'
    _, rejects, _ = _run([line], JAVA_JSON, with_meta=True, typed=True)
    assert [row["reason"] for row in rejects] == [
        "unreadable JSON value (\\ud800 is half of a UTF-16 surrogate pair, not a character: "
        "the writer must escape both halves of the pair, or write the character itself)"
    ]
