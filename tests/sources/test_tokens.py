"""Token usage: the events' prompt/output/total tokens and the spans' input/output tokens, from
every format the kit reads, with missing and unreadable counts."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from incidentkit import store
from incidentkit.manifest import Filters, SourceSpec, Window, load_manifest
from incidentkit.sources import events, spans
from incidentkit.sources.events import adk_events
from incidentkit.sources.loaded import Loaded

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
USAGE = DATA / "events" / "usage.jsonl"
TOKENS = ["prompt_tokens", "output_tokens", "total_tokens"]
NA = None

# usage.jsonl: one event per case, and the (prompt, output, total) tokens it must give.
EXPECTED = {
    "full": (10, 8, 18),  # output = candidates 5 + thoughts 3
    "no-usage": (NA, NA, NA),  # a user message carries no usage metadata
    "no-total": (7, 2, 9),  # total = prompt + output
    "thoughts-only": (NA, 4, 4),
    "prompt-only": (6, NA, 6),
    "empty": (NA, NA, NA),
    "null-count": (NA, 1, 9),  # a JSON null is an absent count
    "whole-float": (12, 3, 15),
    "text": (NA, 5, 15),  # "10" is no count; the given total still stands
    "negative": (10, NA, NA),  # no output, so no sum for the total either
    "fraction": (10, 2, NA),
    "not-object": (NA, NA, NA),
    "boolean": (1, NA, 3),
    "too-big": (NA, 1, NA),  # 2**31 is past genai's int32
}
UNREADABLE = ("text", "negative", "fraction", "not-object", "boolean", "too-big")
WARNING = (
    "6 events carry unreadable token counts, kept with those counts missing (first at {at}: "
    "usageMetadata.promptTokenCount is not a token count: '10')"
)


def expected_tokens() -> pd.DataFrame:
    frame = pd.DataFrame.from_records(
        [(eid, *counts) for eid, counts in EXPECTED.items()], columns=["event_id", *TOKENS]
    )
    return frame.astype({col: "Int64" for col in TOKENS}).astype({"event_id": "str"})


def tokens_of(loaded: Loaded) -> pd.DataFrame:
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["events"][["event_id", *TOKENS]]


def java_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in USAGE.read_text(encoding="utf-8").splitlines()]


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def snake(value: Any) -> Any:
    """An event in ADK Python's stored form: every key snake_case (counts stay as they are)."""
    if isinstance(value, dict):
        return {_snake(k): snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake(v) for v in value]
    return value


def python_lines() -> list[dict[str, Any]]:
    """usage.jsonl as ADK Python event_data: snake_case, epoch seconds, invocation_id."""
    return [snake({**line, "timestamp": line["timestamp"] / 1000}) for line in java_lines()]


def load_files(*paths: Path, fmt: str | None = None) -> Loaded:
    return events.load(SourceSpec("events", paths=paths, format=fmt), Filters())


def load_db(url: str) -> Loaded:
    source = SourceSpec("events", url_ref="env:IK_EVENTS")
    return events.load(source, Filters(), environ={"IK_EVENTS": url})


def java_reference() -> Loaded:
    return load_files(USAGE)


def same_but_format(got: Loaded, want: Loaded) -> None:
    pd.testing.assert_frame_equal(
        got.frames["events"].drop(columns="source_format"),
        want.frames["events"].drop(columns="source_format"),
    )


# --- events, from each format -----------------------------------------------------------------


def test_java_lines_give_the_token_columns_and_one_warning() -> None:
    loaded = java_reference()
    pd.testing.assert_frame_equal(tokens_of(loaded), expected_tokens())
    assert loaded.warnings[["location", "reason"]].to_dict("records") == [
        {"location": "usage.jsonl:9", "reason": WARNING.format(at="usage.jsonl:9")}
    ]
    # Unreadable counts never cost the event: every line is a row, nothing is rejected.
    assert len(loaded.frames["events"]) == len(EXPECTED)


def test_events_without_usage_metadata_have_na_tokens() -> None:
    got = load_files(DATA / "events" / "final_response.jsonl").frames["events"]
    assert got[TOKENS].isna().all().all()
    assert (got[TOKENS].dtypes == "Int64").all()


def test_chunks_give_the_same_tokens_and_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = java_reference()
    monkeypatch.setattr(adk_events, "CHUNK", 3)
    chunked = java_reference()
    pd.testing.assert_frame_equal(chunked.frames["events"], whole.frames["events"])
    pd.testing.assert_frame_equal(chunked.warnings, whole.warnings)


def test_a_window_counts_only_the_unreadable_events_inside_it() -> None:
    start = pd.Timestamp(1_750_000_000_000 + 9_000, unit="ms", tz="UTC")  # "negative" on
    window = Window(start, start + pd.Timedelta(seconds=2))
    loaded = events.load(SourceSpec("events", paths=(USAGE,)), Filters(window=window))
    assert list(loaded.frames["events"]["event_id"]) == ["negative", "fraction"]
    assert loaded.warnings["reason"].tolist() == [
        "2 events carry unreadable token counts, kept with those counts missing (first at "
        "usage.jsonl:10: usageMetadata.candidatesTokenCount is not a token count: -5)"
    ]


def test_python_snake_case_lines_load_like_the_java_lines(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in python_lines()), "utf-8")
    loaded = load_files(path)
    assert set(loaded.frames["events"]["source_format"]) == {"adk-session-json"}
    same_but_format(loaded, java_reference())
    assert loaded.warnings["reason"].tolist() == [WARNING.format(at="usage.jsonl:9")]


def test_a_saved_python_session_by_alias_loads_like_the_java_lines(tmp_path: Path) -> None:
    """adk run --save_session: camelCase ``usageMetadata`` and epoch seconds."""
    keys = ("appName", "userId", "sessionId")
    session = {
        "id": "s-usage",
        "appName": "billing",
        "userId": "u1",
        "state": {},
        "events": [
            {
                **{k: v for k, v in line.items() if k not in keys},
                "timestamp": line["timestamp"] / 1000,
            }
            for line in java_lines()
        ],
        "lastUpdateTime": 1750000013.0,
    }
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    loaded = load_files(path, fmt="adk-session-json")
    same_but_format(loaded, java_reference())
    assert loaded.warnings["location"].tolist() == ["session.json:events[8]"]


def test_a_java_event_table_loads_like_its_lines(db_url: str) -> None:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    keys = ("appName", "userId", "sessionId")
    store.insert_rows(
        engine,
        store.adk_event,
        [
            {
                "event_id": line["id"],
                "app_name": line["appName"],
                "user_id": line["userId"],
                "session_id": line["sessionId"],
                "invocation_id": line["invocationId"],
                "ts": datetime.fromtimestamp(line["timestamp"] / 1000, tz=UTC),
                "event": {k: v for k, v in line.items() if k not in keys},
            }
            for line in java_lines()
        ],
    )
    engine.dispose()
    loaded = load_db(db_url)
    pd.testing.assert_frame_equal(loaded.frames["events"], java_reference().frames["events"])
    assert loaded.warnings["location"].tolist() == ["adk_event:text"]


def _v1_rows(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    session = ("app_name", "user_id", "session_id")
    return [
        {
            "id": line["id"],
            **{key: line[key] for key in session},
            "invocation_id": line["invocation_id"],
            "timestamp": datetime.fromtimestamp(line["timestamp"], tz=UTC).replace(tzinfo=None),
            "event_data": {k: v for k, v in line.items() if k not in session},
        }
        for line in lines
    ]


def test_a_python_v1_store_loads_like_the_java_lines(db_url: str) -> None:
    """DatabaseSessionService keeps usage_metadata inside event_data (JSONB on PostgreSQL,
    LONGTEXT on MariaDB, TEXT on SQLite)."""
    rows = _v1_rows(python_lines())
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.adk_python_metadata)
    store.insert_rows(
        engine, store.adk_internal_metadata, [{"key": "schema_version", "value": "1"}]
    )
    now = datetime(2025, 6, 15, 15, 0)
    store.insert_rows(
        engine,
        store.adk_sessions,
        [
            {
                "app_name": "billing",
                "user_id": "u1",
                "id": "s-usage",
                "state": {},
                "create_time": now,
                "update_time": now,
            }
        ],
    )
    store.insert_rows(engine, store.adk_events, rows)
    engine.dispose()
    loaded = load_db(db_url)
    assert set(loaded.frames["events"]["source_format"]) == {"adk-python-db-v1"}
    same_but_format(loaded, java_reference())
    assert loaded.warnings["location"].tolist() == ["events:s-usage/text"]


def test_a_sqlite_session_service_store_loads_like_the_java_lines(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    schema = (DATA / "events" / "sqlite_session_service.sql").read_text(encoding="utf-8")
    with sqlite3.connect(path) as db:
        db.executescript(schema)
        db.execute("INSERT INTO sessions VALUES ('billing', 'u1', 's-usage', '{}', 1.0, 1.0)")
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    row["id"],
                    row["app_name"],
                    row["user_id"],
                    row["session_id"],
                    row["invocation_id"],
                    row["event_data"]["timestamp"],
                    json.dumps(row["event_data"], separators=(",", ":")),
                )
                for row in _v1_rows(python_lines())
            ],
        )
    db.close()
    loaded = load_db(f"sqlite:///{path}")
    assert set(loaded.frames["events"]["source_format"]) == {"adk-python-sqlite"}
    same_but_format(loaded, java_reference())


# --- spans -----------------------------------------------------------------------------------

# usage_otlp.jsonl / usage_jaeger.json: one call_llm span per case (its request model names the
# case) and the (input, output) tokens it must give.
SPAN_EXPECTED = {
    "ints": (812, 28),  # OTLP intValue as decimal text
    "int-numbers": (640, 31),  # ... or as a JSON number
    "whole-double": (12, 3),
    "input-only": (9, NA),
    "none": (NA, NA),
    "text": (NA, 5),  # a stringValue is no count
    "negative": (7, NA),
    "fraction": (NA, 1),
    "int-fraction": (NA, 2),  # an intValue of 6.5 is not truncated into 6
    "boolean": (4, NA),
}


def span_tokens(name: str) -> Loaded:
    return spans.load(SourceSpec("spans", paths=(DATA / "spans" / name,)), Filters())


@pytest.mark.parametrize("name", ["usage_otlp.jsonl", "usage_jaeger.json"])
def test_spans_give_input_and_output_tokens(name: str) -> None:
    loaded = span_tokens(name)
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    got = loaded.frames["spans"]
    llm = got[got["kind"].eq("call_llm")]
    cases = [attrs["gen_ai.request.model"] for attrs in llm["attributes"]]
    want = pd.DataFrame.from_records(
        [SPAN_EXPECTED[case] for case in cases], columns=["input_tokens", "output_tokens"]
    ).astype("Int64")
    pd.testing.assert_frame_equal(
        llm[["input_tokens", "output_tokens"]].reset_index(drop=True), want
    )
    root = got[got["kind"].eq("invocation")]
    assert root[["input_tokens", "output_tokens"]].isna().all().all()
    assert loaded.warnings["reason"].str.fullmatch(
        r"5 spans carry unreadable token counts, kept with those counts missing \(first at "
        r".*: gen_ai\.usage\.input_tokens is not a token count: '10'\)"
    ).tolist() == [True]


def test_jaeger_and_otlp_give_the_same_token_columns() -> None:
    otlp = span_tokens("usage_otlp.jsonl").frames["spans"]
    jaeger = span_tokens("usage_jaeger.json").frames["spans"]
    columns = ["span_id", "input_tokens", "output_tokens"]
    pd.testing.assert_frame_equal(jaeger[columns], otlp[columns])


def test_the_attributes_keep_the_usage_values_as_exported() -> None:
    got = span_tokens("usage_otlp.jsonl").frames["spans"]
    by_case = {a.get("gen_ai.request.model"): a for a in got["attributes"]}
    assert by_case["ints"]["gen_ai.usage.input_tokens"] == 812
    assert by_case["text"]["gen_ai.usage.input_tokens"] == "10"


def test_an_undecodable_int_value_still_rejects_the_span() -> None:
    loaded = span_tokens("rejects.jsonl")
    assert "b100000000000010" not in set(loaded.frames["spans"]["span_id"])
    assert (
        loaded.rejects.set_index("location")
        .loc["rejects.jsonl:10", "reason"]
        .startswith("span cannot be decoded (ValueError(")
    )


# --- the simulated packs ----------------------------------------------------------------------


def _raw_counts(usage: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    def get(camel: str) -> int | None:
        value = usage.get(camel, usage.get(_snake(camel)))
        return None if value is None else int(value)

    prompt, total = get("promptTokenCount"), get("totalTokenCount")
    candidates, thoughts = get("candidatesTokenCount"), get("thoughtsTokenCount")
    output = (
        None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    )
    if total is None and (prompt is not None or output is not None):
        total = (prompt or 0) + (output or 0)
    return prompt, output, total


def _check_against(frame: pd.DataFrame, raw: dict[str, dict[str, Any]]) -> None:
    """Each event's tokens are what its stored usage metadata says; NA where it has none."""
    got = frame.set_index("event_id")[TOKENS]
    with_usage = got.index.isin(list(raw))
    assert with_usage.sum() > 0
    assert got[~with_usage].isna().all().all()
    for event_id, usage in raw.items():
        row = tuple(None if pd.isna(v) else int(v) for v in got.loc[event_id])
        assert row == _raw_counts(usage), event_id


def test_the_runaway_pack_tokens_match_the_raw_event_lines() -> None:
    pack = ROOT / "fixtures" / "runaway"
    loaded = events.load(load_manifest(pack / "evidence.toml").sources["events"], Filters())
    assert not loaded.warnings["reason"].str.contains("token").any()
    lines = (pack / "events.jsonl").read_text(encoding="utf-8").splitlines()
    raw = {e["id"]: e["usageMetadata"] for e in map(json.loads, lines) if "usageMetadata" in e}
    _check_against(loaded.frames["events"], raw)
    model = loaded.frames["events"]["prompt_tokens"].notna()
    assert (loaded.frames["events"].loc[model, "author"] != "user").all()


def test_the_runaway_pack_spans_match_the_raw_attributes() -> None:
    pack = ROOT / "fixtures" / "runaway"
    loaded = spans.load(load_manifest(pack / "evidence.toml").sources["spans"], Filters())
    raw: dict[str, tuple[int | None, ...]] = {}
    for line in (pack / "spans.otlp.jsonl").read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
                    raw[span["spanId"]] = tuple(
                        int(attrs[key]["intValue"]) if key in attrs else None
                        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
                    )
    got = loaded.frames["spans"].set_index("span_id")[["input_tokens", "output_tokens"]]
    assert got.notna().any().all()
    for span_id, counts in got.iterrows():
        assert tuple(None if pd.isna(v) else int(v) for v in counts) == raw[str(span_id)]


def test_an_adk_python_pack_tokens_match_the_stored_event_data() -> None:
    pack = ROOT / "fixtures" / "crash_recovery-adk-python"
    loaded = events.load(load_manifest(pack / "evidence.toml").sources["events"], Filters())
    with sqlite3.connect(pack / "sessions.db") as db:
        stored = [json.loads(data) for (data,) in db.execute("SELECT event_data FROM events")]
    db.close()
    raw = {e["id"]: e["usage_metadata"] for e in stored if "usage_metadata" in e}
    _check_against(loaded.frames["events"], raw)
