"""Properties of the reader of ADK Python's SQLite span store (``adk-web-sqlite``).

1. The row decoder takes any values SQLite can hold (NULL, integers, floats, text with or
   without bad UTF-8, blobs, JSON of any shape) and gives a raw span or a ValueError-family
   error; the span check then gives a row or one reject, never an exception.
2. Accounting: a store of any rows (a table without column types, so any value stays as
   written) loads with every row a span or a reject, and nothing else raised.
3. Filters pushed into SQL select whole traces: the frame under any window, sessions and
   invocations equals the whole store read and then narrowed.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import spans
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.spans import adk_web
from incidentkit.sources.spans.otlp import SHAPE_ERRORS

TYPELESS = f"CREATE TABLE spans ({', '.join(adk_web.COLUMNS)})"
S = 1_750_000_000_000_000_000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
attribute_maps = st.dictionaries(
    st.sampled_from(
        [
            "gen_ai.operation.name",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.conversation.id",
            "gcp.vertex.agent.invocation_id",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.input.messages",
            "error.type",
        ]
    )
    | st.text(max_size=10),
    json_values,
    max_size=5,
)
surrogates = st.text(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3
)
hex_ids = st.sampled_from(["0" * 15 + "1", "ab" * 8, "AB" * 8, "a" * 32, "b" * 16, "", "xyz"])
plain = (
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=8)
    | hex_ids
)
cells = plain | surrogates


class BadText(bytes):
    """Bytes stored as TEXT (``CAST(? AS TEXT)``): text that is not UTF-8 in the store."""


stored_cells = plain | st.binary(min_size=1, max_size=6).map(lambda b: BadText(b"\xff" + b))
attributes_cells = (
    attribute_maps.map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=12)
    | surrogates
    | st.binary(max_size=8)
    | st.none()
    | st.integers()
    | st.just("[" * 3000)
)
stored_attributes = (
    attribute_maps.map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=12)
    | st.binary(max_size=8)
    | st.binary(max_size=6).map(lambda b: BadText(b'{"\xff": ' + b))
    | st.none()
    | st.just("[" * 3000)
)
rows = st.tuples(cells, cells, cells, cells, cells, cells, cells, cells, attributes_cells)


@settings(max_examples=400, deadline=None)
@given(rows)
def test_any_row_decodes_to_a_span_or_a_reason_and_checks_to_a_row_or_a_reject(
    values: tuple[Any, ...],
) -> None:
    sink = RejectSink("spans")
    try:
        raw = adk_web.decode(values)
    except SHAPE_ERRORS as err:
        assert str(err)
        return
    row = spans._row(raw, "spans.db:rowid 1", sink, payloads=())
    assert (row is None) == (len(sink.rows) == 1)
    assert len(sink.rows) <= 1


def _write(folder: Path, table: str, records: list[tuple[Any, ...]]) -> Path:
    path = folder / "spans.db"
    with sqlite3.connect(path) as conn:
        conn.execute(table)
        for record in records:
            marks = ["CAST(? AS TEXT)" if isinstance(v, BadText) else "?" for v in record]
            conn.execute(f"INSERT INTO spans VALUES ({', '.join(marks)})", record)
    sqlite3.connect(path).close()
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            stored_cells,
            stored_cells,
            stored_cells,
            stored_cells,
            stored_cells,
            stored_cells,
            stored_cells,
            stored_cells,
            stored_attributes,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_every_stored_row_is_a_span_or_a_reject(records: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), TYPELESS, records)
        loaded = spans.load(SourceSpec("spans", paths=(path,)), Filters())
        assert len(loaded.frames["spans"]) + len(loaded.rejects) == len(records)


SESSIONS = ("s-1", "s-2")
INVOCATIONS = ("e-1", "e-2", "e-3")


@st.composite
def traces(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Traces as ADK writes them: one invocation each, some spans naming its session or
    invocation, times spread over a minute; now and then a row with a text time."""
    out = []
    for t in range(draw(st.integers(1, 4))):
        trace = f"{t + 1:032x}"
        session, invocation = draw(st.sampled_from(SESSIONS)), draw(st.sampled_from(INVOCATIONS))
        for s in range(draw(st.integers(1, 4))):
            attrs: dict[str, Any] = {}
            if draw(st.booleans()):
                attrs["gen_ai.conversation.id"] = session
            if draw(st.booleans()):
                attrs["gcp.vertex.agent.invocation_id"] = invocation
            start: Any = S + draw(st.integers(0, 60)) * 10**9
            if draw(st.integers(0, 9)) == 0:
                start = str(start)  # text: SQL cannot compare it, the kit reads it
            out.append(
                (
                    f"{t + 1:08x}{s + 1:08x}",
                    trace,
                    None if s == 0 else f"{t + 1:08x}{1:08x}",
                    "invoke_agent a" if s else "invocation",
                    start,
                    S + 61 * 10**9,
                    attrs.get("gen_ai.conversation.id"),
                    attrs.get("gcp.vertex.agent.invocation_id"),
                    json.dumps(attrs),
                )
            )
    return out


filters = st.builds(
    Filters,
    window=st.none()
    | st.tuples(st.integers(0, 61), st.integers(1, 30)).map(
        lambda w: Window(
            pd.Timestamp(S + w[0] * 10**9, unit="ns", tz="UTC"),
            pd.Timestamp(S + (w[0] + w[1]) * 10**9, unit="ns", tz="UTC"),
        )
    ),
    session_ids=st.lists(st.sampled_from(SESSIONS), max_size=2, unique=True).map(tuple),
    invocation_ids=st.lists(st.sampled_from(INVOCATIONS), max_size=2, unique=True).map(tuple),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), filters)
def test_pushed_filters_keep_what_a_whole_read_keeps(
    records: list[tuple[Any, ...]], chosen: Filters
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), TYPELESS, records)
        spec = SourceSpec("spans", paths=(path,))
        whole = spans.load(spec, Filters()).frames["spans"]
        got = spans.load(spec, chosen).frames["spans"]
    want = spans.narrow(whole, chosen).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
