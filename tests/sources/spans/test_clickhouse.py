"""Spans read live from the OpenTelemetry Collector ClickHouse exporter's table, on the real
embedded ClickHouse engine (chDB, through clickhouse-connect's own chdb backend).

The exporter's tables (its Map and JSON schemas, the trace-id lookup table and the view that
fills it) are created from its SQL templates; the kit's span fixtures are written into them as
the exporter's Go code maps OTLP to columns (:func:`exporter_row`). Each table must load into
the very ``spans`` frame its OTLP/JSON file gives, under every filter, with the filters cutting
in SQL; the reader's client must refuse writes; a missing table or column, a bad URL or an
unreachable server must say what and never show a password.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from clickhouse_exporter import (
    INSERT_COLUMNS,
    LOOKUP_TABLE,
    as_string,
    create_tables,
    exporter_row,
    otlp_rows,
)
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from incidentkit.errors import IncidentkitError, SchemaError, SourceError
from incidentkit.manifest import Filters, SourceSpec, Window, load_manifest
from incidentkit.sources import spans
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.spans import clickhouse

pytestmark = pytest.mark.xdist_group("chdb")  # chDB runs one engine folder per process

ROOT = Path(__file__).resolve().parents[3]
FIXTURE_FILES = sorted(
    path for path in (ROOT / "fixtures").glob("*/spans.otlp.jsonl") if path.parent.name != "broken"
)
VARIANTS = ("map", "json")


def fixture_table(path: Path) -> str:
    return path.parent.name.replace("-", "_")


class Store:
    """The module's chDB folder: every fixture in a table of each schema (databases ``map`` and
    ``json``), written by a client of its own that stays open."""

    def __init__(self, folder: Path) -> None:
        import clickhouse_connect

        self.folder = folder
        self.url = f"chdb://{folder}"
        self.writer = clickhouse_connect.get_client(dsn=self.url)
        for variant in VARIANTS:
            for path in FIXTURE_FILES:
                table = fixture_table(path)
                create_tables(self.writer, variant, table, variant)
                self.insert(f"{variant}.{table}", otlp_rows(path, variant))

    def insert(self, table: str, rows: list[list[Any]]) -> None:
        if rows:
            self.writer.insert(table, rows, column_names=list(INSERT_COLUMNS))

    def load(self, table: str, filters: Filters | None = None) -> Loaded:
        spec = SourceSpec("spans", url_ref=self.url, table=table)
        return spans.load(spec, filters or Filters())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    made = Store(tmp_path_factory.mktemp("chdb") / "engine")
    yield made
    made.writer.close()


def file_load(path: Path, filters: Filters | None = None) -> Loaded:
    return spans.load(SourceSpec("spans", paths=(path,)), filters or Filters())


def reasons(loaded: Loaded) -> list[str]:
    return sorted(loaded.rejects["reason"].astype(str))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.parent.name)
def test_a_table_loads_into_the_frame_its_otlp_file_gives(
    store: Store, path: Path, variant: str
) -> None:
    expected = file_load(path)
    loaded = store.load(f"{variant}.{fixture_table(path)}")
    assert len(expected.frames["spans"]) > 0
    pd.testing.assert_frame_equal(loaded.frames["spans"], expected.frames["spans"])
    assert reasons(loaded) == reasons(expected)


def _adk_world() -> Any:
    """``tests/adk/adk_world.py``: the conformance world, a real google-adk ``Runner`` (scripted
    model, SQLite session store) whose spans the OpenTelemetry SDK records."""
    import importlib.util
    import sys

    if "ik_adk_world" not in sys.modules:
        path = ROOT / "tests/adk/adk_world.py"
        spec = importlib.util.spec_from_file_location("ik_adk_world", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["ik_adk_world"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["ik_adk_world"]


@pytest.mark.adk
@pytest.mark.parametrize("variant", VARIANTS)
def test_spans_of_a_real_adk_run_load_alike(
    store: Store, variant: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Both telemetry schemas of the installed google-adk (GenAI semconv and legacy)."""
    world = _adk_world()
    for schema in ("2", "1"):
        folder = tmp_path_factory.mktemp(f"adk-{variant}-{schema}")
        run = world.build_world(str(folder / "sessions.db"), folder, telemetry_schema=schema)
        table = f"adk_{variant}_{schema}"
        create_tables(store.writer, "default", table, variant)
        store.insert(table, otlp_rows(run.spans_file, variant))
        expected = file_load(run.spans_file)
        assert len(expected.frames["spans"]) == len(run.spans) > 0
        loaded = store.load(table)
        pd.testing.assert_frame_equal(loaded.frames["spans"], expected.frames["spans"])
        assert reasons(loaded) == reasons(expected)


def _window_of(frame: pd.DataFrame) -> Window:
    """A window holding the middle third of the spans' starts."""
    starts = frame["start"].sort_values().reset_index(drop=True)
    third = len(starts) // 3
    return Window(starts[third], starts[2 * third])


@pytest.mark.parametrize("variant", VARIANTS)
def test_filters_select_what_they_select_in_the_file(store: Store, variant: str) -> None:
    path = next(p for p in FIXTURE_FILES if p.parent.name == "latency_cliff")
    whole = file_load(path).frames["spans"]
    session = whole["session_id"].dropna().value_counts().index[0]
    invocation = whole.loc[whole["session_id"].eq(session), "invocation_id"].dropna().iloc[0]
    cases = [
        Filters(window=_window_of(whole)),
        Filters(session_ids=(session,)),
        Filters(invocation_ids=(invocation,)),
        Filters(window=_window_of(whole), session_ids=(session, "no-such-session")),
        Filters(session_ids=("no-such-session",)),
    ]
    for filters in cases:
        expected = file_load(path, filters).frames["spans"]
        loaded = store.load(f"{variant}.{fixture_table(path)}", filters).frames["spans"]
        pd.testing.assert_frame_equal(loaded, expected)
        assert len(loaded) < len(whole)
    assert len(store.load(f"{variant}.latency_cliff", cases[2]).frames["spans"]) > 0


def _bad_span(trace: str, start: int, session: str, variant: str) -> list[Any]:
    """A span the kit rejects (no span id), in trace ``trace`` of ``session``."""
    span = {
        "traceId": trace,
        "spanId": "",
        "name": "invoke_agent poison",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1000),
        "attributes": [
            {"key": "gcp.vertex.agent.session_id", "value": {"stringValue": session}},
        ],
    }
    return exporter_row({}, {}, span, variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_filters_cut_in_sql_so_other_traces_are_never_read(store: Store, variant: str) -> None:
    """A row the kit would reject, in a trace outside the filters: a full read reports it, a
    filtered read never sees it (the filter ran in ClickHouse, not after reading)."""
    table = f"poison_{variant}"
    create_tables(store.writer, "default", table, variant)
    path = next(p for p in FIXTURE_FILES if p.parent.name == "healthy")
    rows = otlp_rows(path, variant)
    store.insert(table, rows)
    whole = file_load(path).frames["spans"]
    late = int(whole["start"].max().value) + 3_600 * 10**9
    store.insert(table, [_bad_span("f" * 32, late, "poison-session", variant)])

    assert reasons(store.load(table)) == ["span lacks its span id"]
    session = whole["session_id"].dropna().iloc[0]
    invocation = whole["invocation_id"].dropna().iloc[0]
    window = Window(whole["start"].min(), whole["start"].max() + pd.Timedelta(1, "s"))
    for filters in (
        Filters(window=window),
        Filters(session_ids=(session,)),
        Filters(invocation_ids=(invocation,)),
    ):
        loaded = store.load(table, filters)
        assert reasons(loaded) == []
        pd.testing.assert_frame_equal(
            loaded.frames["spans"], file_load(path, filters).frames["spans"]
        )
    assert reasons(store.load(table, Filters(session_ids=("poison-session",)))) == [
        "span lacks its span id"
    ]


def test_the_lookup_table_bounds_the_read_and_is_not_trusted_when_incomplete(
    store: Store,
) -> None:
    """The exporter's ``_trace_id_ts`` table gives the touched traces' time range: a row there
    narrower than the trace cuts the spans outside it (the bound is applied in SQL); a trace
    missing from it leaves the read unbounded, so nothing is lost."""
    path = next(p for p in FIXTURE_FILES if p.parent.name == "runaway")
    whole = file_load(path).frames["spans"]
    session = whole["session_id"].dropna().iloc[0]
    filters = Filters(session_ids=(session,))
    expected = file_load(path, filters).frames["spans"]

    create_tables(store.writer, "default", "bounded", "map", lookup=False)
    store.writer.command(LOOKUP_TABLE.format(db="default", table="bounded"))
    store.insert("bounded", otlp_rows(path, "map"))
    # The lookup table is empty (no view filled it): a partial lookup is ignored.
    pd.testing.assert_frame_equal(store.load("bounded", filters).frames["spans"], expected)

    traces = expected["trace_id"].unique()
    first = expected["start"].min()
    for trace in traces:  # every trace, but bounded to the first span's second
        store.writer.command(
            "INSERT INTO bounded_trace_id_ts VALUES ({t:String}, {s:DateTime}, {s:DateTime})",
            parameters={"t": trace, "s": first.floor("s").tz_localize(None)},
        )
    cut = store.load("bounded", filters).frames["spans"]
    assert 0 < len(cut) < len(expected)
    assert cut["start"].max() < first.floor("s") + pd.Timedelta(3, "s")


@pytest.mark.parametrize("variant", VARIANTS)
def test_attributes_come_back_with_their_types(store: Store, variant: str) -> None:
    attributes = {
        "gen_ai.operation.name": {"stringValue": "generate_content"},
        "gen_ai.usage.input_tokens": {"intValue": "1200"},
        "gen_ai.usage.output_tokens": {"intValue": 34},
        "gen_ai.request.top_p": {"doubleValue": 0.95},
        "gen_ai.response.finish_reasons": {"arrayValue": {"values": [{"stringValue": "stop"}]}},
        "gcp.vertex.agent.associated_event_ids": {
            "arrayValue": {"values": [{"stringValue": "e-1"}, {"stringValue": "e-2"}]}
        },
        "gcp.vertex.agent.invocation_id": {"stringValue": "e-42"},
        "gcp.vertex.agent.llm_request": {"stringValue": '{"contents": ["secret prompt"]}'},
        "custom.text": {"stringValue": "12"},
    }
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": "generate_content gemini",
        "startTimeUnixNano": "1750000000000000000",
        "endTimeUnixNano": "1750000000500000000",
        "attributes": [{"key": k, "value": v} for k, v in attributes.items()],
        "status": {"code": 2, "message": "boom"},
        "events": [
            {"timeUnixNano": "1750000000400000000", "name": "other", "attributes": []},
            {
                "timeUnixNano": "1750000000400000000",
                "name": "exception",
                "attributes": [
                    {"key": "exception.type", "value": {"stringValue": "ValueError"}},
                    {"key": "exception.message", "value": {"stringValue": "bad"}},
                    {"key": "exception.stacktrace", "value": {"stringValue": "..."}},
                ],
            },
        ],
    }
    scope = {"name": "gcp.vertex.agent", "version": "2.13"}
    table = f"typed_{variant}"
    create_tables(store.writer, "default", table, variant)
    store.insert(table, [exporter_row({}, scope, span, variant)])
    record = {
        "resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": scope, "spans": [span]}]}]
    }
    otlp_file = store.folder.parent / f"typed_{variant}.jsonl"
    otlp_file.write_text(json.dumps(record) + "\n", encoding="utf-8")

    loaded = store.load(table).frames["spans"]
    pd.testing.assert_frame_equal(loaded, file_load(otlp_file).frames["spans"])
    row = loaded.iloc[0]
    attrs = row["attributes"]
    assert attrs["gen_ai.usage.input_tokens"] == 1200
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert attrs["gcp.vertex.agent.associated_event_ids"] == ["e-1", "e-2"]
    assert attrs["gcp.vertex.agent.llm_request"] == spans.REDACTED
    assert attrs["custom.text"] == "12"
    assert attrs["exception.type"] == "ValueError"
    assert (row["status"], row["status_message"], row["input_tokens"]) == ("ERROR", "boom", 1200)

    spec = SourceSpec("spans", url_ref=store.url, table=table)
    payload = spans.span_payloads(spec, ["cd" * 8])
    assert payload.set_index("key").loc["gcp.vertex.agent.llm_request", "value"] == {
        "contents": ["secret prompt"]
    }


def test_the_readers_client_refuses_every_write(store: Store) -> None:
    before = store.writer.query_arrow("SELECT count() AS n FROM map.healthy").to_pylist()
    client = clickhouse._client(store.url, shown="chdb", what="[spans]")
    try:
        assert client.query_arrow("SELECT count() AS n FROM map.healthy").to_pylist() == before
        for statement in (
            "INSERT INTO map.healthy (TraceId) VALUES ('x')",
            "CREATE TABLE default.written (a Int8) ENGINE = Memory",
            "ALTER TABLE map.healthy DELETE WHERE 1",
            "DROP TABLE map.healthy",
            "SET readonly = 0",
        ):
            with pytest.raises(Exception, match="readonly"):
                client.command(statement)
    finally:
        client.close()
    assert store.writer.query_arrow("SELECT count() AS n FROM map.healthy").to_pylist() == before


def test_a_missing_table_or_column_says_what(store: Store) -> None:
    with pytest.raises(SchemaError, match="no table nope") as missing:
        store.load("map.nope")
    assert "healthy" in str(missing.value)  # the tables it has
    store.writer.command(
        "CREATE TABLE IF NOT EXISTS default.half (Timestamp DateTime64(9), TraceId String, "
        "SpanId String) ENGINE = MergeTree ORDER BY Timestamp"
    )
    with pytest.raises(SchemaError, match="lacks columns") as lacking:
        store.load("half")
    assert "SpanAttributes" in str(lacking.value)
    with pytest.raises(SchemaError, match="not a ClickHouse table name"):
        store.load("map.healthy; DROP TABLE map.healthy")


def test_default_table_is_otel_traces(store: Store) -> None:
    path = next(p for p in FIXTURE_FILES if p.parent.name == "healthy")
    create_tables(store.writer, "default", "otel_traces", "map")
    store.insert("otel_traces", otlp_rows(path, "map"))
    spec = SourceSpec("spans", url_ref=store.url)
    loaded = spans.load(spec, Filters())
    pd.testing.assert_frame_equal(loaded.frames["spans"], file_load(path).frames["spans"])


def test_the_manifest_takes_both_url_forms(store: Store, tmp_path: Path) -> None:
    manifest = tmp_path / "evidence.toml"
    manifest.write_text(
        '[spans]\nurl = "env:IK_SPANS_CH"\ntable = "map.healthy"\n', encoding="utf-8"
    )
    spec = load_manifest(manifest).sources["spans"]
    loaded = spans.load(spec, Filters(), environ={"IK_SPANS_CH": store.url})
    assert len(loaded.frames["spans"]) > 0
    manifest.write_text(
        '[spans]\nurl = "clickhouse://reader@ch.example:8123/otel"\n', encoding="utf-8"
    )
    assert load_manifest(manifest).sources["spans"].url_ref == (
        "clickhouse://reader@ch.example:8123/otel"
    )


def test_bad_urls_and_unreachable_servers_say_what_without_the_password(
    store: Store, tmp_path: Path
) -> None:
    secret = "s3cret-pass-word"
    environ = {"IK_CH": f"clickhouse://reader:{secret}@127.0.0.1:1/otel"}
    spec = SourceSpec("spans", url_ref="env:IK_CH")
    with pytest.raises(SourceError, match="cannot connect to ClickHouse") as refused:
        spans.load(spec, Filters(), environ=environ)
    assert secret not in str(refused.value)
    assert "env:IK_CH" in str(refused.value)

    missing = SourceSpec("spans", url_ref=f"chdb://{tmp_path / 'absent'}")
    with pytest.raises(SourceError, match="no chDB folder"):
        spans.load(missing, Filters())
    assert not (tmp_path / "absent").exists()  # never created by reading

    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(SourceError, match="cannot connect") as second:
        spans.load(SourceSpec("spans", url_ref=f"chdb://{other}"), Filters())
    assert "chdb" in str(second.value).lower()


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | _TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_KEYS = (
    st.sampled_from(
        [
            *spans.PAYLOAD_KEYS[:2],
            *clickhouse.TYPED,
            *("gen_ai.usage.input_tokens", "gcp.vertex.agent.session_id"),
            *("gcp.vertex.agent.invocation_id", "gen_ai.operation.name", "gen_ai.tool.name"),
            *("gen_ai.tool_call.id", "exception.type"),
        ]
    )
    | _TEXT
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    variant=st.sampled_from(VARIANTS),
    attributes=st.dictionaries(_KEYS, _VALUE, max_size=6),
    status=st.sampled_from(["Unset", "Ok", "Error", "STATUS_CODE_ERROR", "", "weird"]),
    trace=st.sampled_from(["ab" * 16, "", "AB" * 16, "zz", "ab" * 8]),
    session=st.sampled_from(["s-1", "", "\x00"]),
)
def test_any_attributes_load_or_raise_the_kits_errors(
    store: Store, variant: str, attributes: dict[str, Any], status: str, trace: str, session: str
) -> None:
    table = f"fuzz_{variant}"
    create_tables(store.writer, "default", table, variant)
    store.writer.command(f"TRUNCATE TABLE default.{table}")
    values = dict(attributes)
    row = [
        1_750_000_000_000_000_000,
        trace,
        "cd" * 8,
        "",
        "",
        "invoke_agent x",
        "Internal",
        "svc",
        {} if variant == "map" else "{}",
        "",
        "",
        None,
        5,
        status,
        "",
        [],
        [],
        [],
        [],
        [],
        [],
        [],
    ]
    if variant == "map":
        row[11] = {str(k): as_string(v) for k, v in values.items()}
    else:
        row[11] = json.dumps(values)
    try:
        store.insert(table, [row])
    except Exception:  # noqa: BLE001 - what ClickHouse refuses, the exporter cannot write
        reject()  # too many refusals fail the test (Hypothesis' filter health check)
    try:
        for filters in (Filters(), Filters(session_ids=(session,) if session else ())):
            loaded = store.load(table, filters)
            assert len(loaded.frames["spans"]) + len(loaded.rejects) <= 1
    except IncidentkitError:
        pass
