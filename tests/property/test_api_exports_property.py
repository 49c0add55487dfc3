"""Properties of the readers of sessions saved from an API (Vertex AI Agent Engine pages,
Firestore exports): whatever JSON a file holds, every event record ends as an event or a
reject with its place, the rest as rejects or warnings, and nothing but an
:class:`IncidentkitError` escapes.

Each example writes a real evidence folder under a fresh temporary folder and opens it with
``incidentkit.open_evidence``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import incidentkit as ik
from incidentkit.errors import IncidentkitError

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)  # JSON has no Infinity
    | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
ENGINE = "projects/p/locations/l/reasoningEngines/7/sessions/s"
times = (
    st.sampled_from(
        ["2026-11-29T02:30:00Z", "2026-11-29T02:30:00.123456789Z", "2026-11-29 02:30", "", "Z"]
    )
    | st.fixed_dictionaries({"seconds": st.integers(-10, 2**40) | st.text(max_size=4)})
    | values
)
wire_events = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from([f"{ENGINE}/events/e1", f"{ENGINE}/events/e2", "x/events/y", ""])
        | values,
        "author": st.sampled_from(["user", "agent"]) | values,
        "invocationId": st.sampled_from(["i-1", ""]) | values,
        "timestamp": times,
        "content": st.fixed_dictionaries({"parts": st.lists(values, max_size=2)}) | values,
        "actions": st.fixed_dictionaries(
            {}, optional={"stateDelta": values, "transferAgent": values}
        )
        | values,
        "eventMetadata": st.dictionaries(
            st.sampled_from(["partial", "turnComplete", "longRunningToolIds", "customMetadata"]),
            values,
            max_size=3,
        )
        | values,
        "rawEvent": values,
    },
)
pages = st.fixed_dictionaries(
    {"sessionEvents": st.lists(wire_events | values, max_size=4)},
    optional={"nextPageToken": st.text(max_size=4)},
)
lines = st.lists(pages | st.just({}) | values, min_size=1, max_size=4)


def _load(folder: Path, content: str, fmt: str) -> ik.Evidence | None:
    (folder / "export.jsonl").write_text(content, encoding="utf-8")
    (folder / "evidence.toml").write_text(
        f'[events]\npath = "export.jsonl"\nformat = "{fmt}"\n', encoding="utf-8"
    )
    try:
        evidence = ik.open_evidence(folder)
        evidence.frame("events")
    except IncidentkitError:
        return None
    return evidence


@pytest.mark.slow
@PROPERTY
@given(lines)
def test_every_page_event_is_an_event_or_a_reject(records: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        content = "".join(json.dumps(r) + "\n" for r in records)
        evidence = _load(Path(tmp), content, "vertex-ai-json")
        if evidence is None:
            return
        shipped = sum(
            len(r["sessionEvents"]) for r in records if isinstance(r, dict) and "sessionEvents" in r
        )
        rejects = evidence.rejects
        event_rejects = rejects["location"].str.contains("sessionEvents").sum()
        assert len(evidence.frame("events")) + event_rejects == shipped


firestore_docs = st.fixed_dictionaries(
    {
        "name": st.sampled_from(
            [
                "projects/p/databases/d/documents/adk-session/u/sessions/s",
                "projects/p/databases/d/documents/adk-session/u/sessions/s/user-event/e",
                "projects/p/databases/d/documents/app-state/a",
                "projects/p/databases/d/documents/other",
            ]
        ),
        "fields": st.dictionaries(
            st.sampled_from(["author", "timestamp", "content", "appName", "state"]),
            st.dictionaries(
                st.sampled_from(["stringValue", "integerValue", "mapValue", "arrayValue"]),
                values,
                max_size=1,
            )
            | values,
            max_size=5,
        ),
    }
)
firestore_records = st.lists(
    firestore_docs
    | st.fixed_dictionaries({"documents": st.lists(firestore_docs | values, max_size=3)})
    | st.fixed_dictionaries({"__collections__": values})
    | values,
    min_size=1,
    max_size=4,
)


@PROPERTY
@given(firestore_records)
def test_any_firestore_export_loads_or_says_why(records: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        content = "".join(json.dumps(r) + "\n" for r in records)
        evidence = _load(Path(tmp), content, "firestore-json")
        if evidence is None:
            return
        events = evidence.frame("events")
        assert events["invocation_id"].isna().all()
        evidence.frame("session_state")  # builds, or its rows were rejects
        assert set(evidence.rejects["source"]) <= {"events"}
