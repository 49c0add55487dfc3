from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import ParameterError, SchemaError, SourceError
from incidentkit.frames import spec_of
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import spans
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "spans"
JAVA_TRACE = "5b8efff798038103d269b633813fc60c"
JAVA_INV = "e-3b1f2c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
PY2_INV = "e-d09e0966-3d0c-4ee3-add6-e3395a511c88"
PY2_SESSION = "5f1e9a3c-2b7d-4c6e-8a90-1b2c3d4e5f60"
LEGACY_INV = "e-1111aaaa-2222-4333-8444-555566667777"


def load(*names: str, fmt: str | None = None, filters: Filters | None = None) -> Loaded:
    spec = SourceSpec("spans", paths=tuple(DATA / n for n in names), format=fmt)
    return spans.load(spec, filters or Filters())


def frame(*names: str, **kwargs: object) -> pd.DataFrame:
    loaded = load(*names, **kwargs)  # type: ignore[arg-type]
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["spans"]


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC").as_unit("ns")


def test_java_otlp_spans_are_ordered_classified_and_carry_ids() -> None:
    got = frame("java_otlp.jsonl")
    expected = pd.DataFrame(
        {
            "span_id": [
                "3f2a9c1d7e6b5a40",
                "8c41d2e9a7b3f615",
                "eee19b7ec3c1b173",
                "eee19b7ec3c1b174",
            ],
            "parent_span_id": [None, "3f2a9c1d7e6b5a40", "8c41d2e9a7b3f615", "eee19b7ec3c1b173"],
            "kind": ["invocation", "invoke_agent", "call_llm", "execute_tool"],
            "start": [
                utc("2026-11-29T03:10:00Z"),
                utc("2026-11-29T03:10:00.010Z"),
                utc("2026-11-29T03:10:00.020Z"),
                utc("2026-11-29T03:10:01Z"),
            ],
            "duration_ms": [2100.0, 2080.0, 2060.0, 480.0],
            "status": ["ERROR", "ERROR", "UNSET", "ERROR"],
            "status_message": [
                "Error in runAsync Flowable execution",
                "Failed to call tool: lookup_order",
                None,
                "Failed to call tool: lookup_order",
            ],
            "invocation_id": [JAVA_INV] * 4,
            "session_id": ["s-7d1c0b9a"] * 4,
            "agent_name": [None, "triage_agent", None, None],
            "tool_name": [None, None, None, "lookup_order"],
            "tool_call_id": [None, None, None, "adk-0d1e2f3a-4b5c-4d6e-8f70-1a2b3c4d5e6f"],
        }
    )
    expected = expected.astype({c: spec_of("spans").dtypes[c] for c in expected.columns})
    pd.testing.assert_frame_equal(got[list(expected.columns)], expected)
    assert got["trace_id"].eq(JAVA_TRACE).all()
    assert list(got.columns) == spec_of("spans").names


def test_payload_attributes_are_redacted_and_exceptions_kept_without_stacktrace() -> None:
    got = frame("java_otlp.jsonl").set_index("span_id")["attributes"]
    llm, tool = got["eee19b7ec3c1b173"], got["eee19b7ec3c1b174"]
    assert llm["gcp.vertex.agent.llm_request"] == spans.REDACTED
    assert llm["gcp.vertex.agent.llm_response"] == spans.REDACTED
    assert llm["gen_ai.usage.input_tokens"] == 10
    assert llm["gen_ai.request.top_p"] == 0.95
    assert llm["gen_ai.response.finish_reasons"] == ["stop"]
    assert tool["gcp.vertex.agent.tool_call_args"] == spans.REDACTED
    assert tool["exception.type"] == "java.lang.RuntimeException"
    assert tool["exception.message"] == "Failed to call tool: lookup_order"
    assert not any("stacktrace" in key for attrs in got for key in attrs)


def test_python2_schema_invoke_workflow_and_generate_content() -> None:
    got = frame("python2_otlp.jsonl")
    assert got["name"].tolist() == [
        "invoke_workflow support_agent",
        "invoke_agent support_agent",
        "generate_content gemini-2.5-flash",
        "execute_tool lookup_order",
        "generate_content gemini-2.5-flash",
    ]
    assert got["kind"].tolist() == [
        "invocation",
        "invoke_agent",
        "call_llm",
        "execute_tool",
        "call_llm",
    ]
    assert got["parent_span_id"].isna().tolist() == [True, False, False, False, False]
    assert got["invocation_id"].eq(PY2_INV).all()  # spread up to the workflow root
    assert got["session_id"].eq(PY2_SESSION).all()  # from gen_ai.conversation.id
    tool = got.loc[got["kind"].eq("execute_tool")].iloc[0]
    assert tool["tool_call_id"] == "adk-5cd758c7-aad0-4136-8563-9f61b0b62bc0"
    assert tool["attributes"]["gen_ai.tool.call.arguments"] == spans.REDACTED
    assert got["status"].tolist() == ["UNSET", "OK", "UNSET", "UNSET", "UNSET"]


def test_python_legacy_generate_content_under_call_llm_is_not_a_second_model_call() -> None:
    got = frame("python_legacy_otlp.jsonl").set_index("name")
    assert got.loc["call_llm", "kind"] == "call_llm"
    assert got.loc["generate_content gemini-2.0-flash", "kind"] == "other"
    assert got["kind"].eq("call_llm").sum() == 1
    assert got.loc["execute_tool lookup_order", "tool_call_id"] == "adk-fc-1"
    assert got["invocation_id"].eq(LEGACY_INV).all()
    assert got["session_id"].eq("s-legacy-1").all()


def test_jaeger_export_gives_the_otlp_frame_except_where_jaeger_loses_types() -> None:
    otlp = frame("java_otlp.jsonl")
    jaeger = frame("java_jaeger.json")
    columns = [c for c in otlp.columns if c != "attributes"]
    pd.testing.assert_frame_equal(jaeger[columns], otlp[columns])
    lossy = "gen_ai.response.finish_reasons"  # Jaeger writes arrays as JSON text
    for a, b in zip(jaeger["attributes"], otlp["attributes"], strict=True):
        assert {k: v for k, v in a.items() if k != lossy} == {
            k: v for k, v in b.items() if k != lossy
        }
    llm = jaeger.set_index("name").loc["call_llm", "attributes"]
    assert llm[lossy] == '["stop"]'


def test_explicit_format_skips_detection() -> None:
    pd.testing.assert_frame_equal(
        frame("java_jaeger.json", fmt="jaeger-json"), frame("java_jaeger.json")
    )


def test_jaeger_short_trace_ids_are_padded_and_error_tag_sets_status() -> None:
    got = frame("jaeger_short_ids.json").iloc[0]
    assert got["trace_id"] == "0000000000000000d269b633813fc60c"
    assert got["status"] == "ERROR"
    assert pd.isna(got["parent_span_id"])
    assert got["attributes"] == {
        "gen_ai.tool.name": "lookup_order",
        "gen_ai.usage.input_tokens": 12,
    }
    assert got["duration_ms"] == 250.0


def test_base64_and_uppercase_ids_and_numeric_times_are_normalised() -> None:
    got = frame("ids.jsonl")
    assert got["trace_id"].tolist() == [JAVA_TRACE, JAVA_TRACE]
    assert got["span_id"].tolist() == ["eee19b7ec3c1b173", "eee19b7ec3c1b174"]
    assert got["parent_span_id"].iloc[1] == "eee19b7ec3c1b173"
    assert got["status"].tolist() == ["OK", "ERROR"]  # enum names from plain protobuf JSON
    assert got["end"].iloc[1] == utc("2026-11-29T03:10:01.480Z")


def test_kind_from_names_merged_tools_and_ambiguous_invocations() -> None:
    got = frame("names.jsonl").set_index("name")
    assert got["kind"].to_dict() == {
        "HTTP POST /run": "other",
        "agent_run [old_agent]": "invoke_agent",
        "call_llm": "call_llm",
        "execute_tool (merged)": "execute_tool",
        "execute_tool get_weather": "execute_tool",
        "send_data": "other",
    }
    assert got.loc["agent_run [old_agent]", "agent_name"] == "old_agent"
    assert got.loc["execute_tool (merged)", "tool_name"] == "(merged tools)"
    assert pd.isna(got.loc["execute_tool (merged)", "tool_call_id"])  # "<not specified>"
    assert got.loc["execute_tool get_weather", "tool_name"] == "get_weather"
    # two invocation ids in one trace: nothing is spread
    assert got["invocation_id"].isna().sum() == 4
    attrs = got.loc["send_data", "attributes"]
    assert attrs["adk.flags"] == [1, True]
    assert attrs["adk.map"] == {"a": 1.5}
    assert attrs["gcp.vertex.agent.data"] == spans.REDACTED


def test_every_reject_reason() -> None:
    loaded = load("rejects.jsonl")
    assert loaded.frames["spans"]["span_id"].tolist() == ["b100000000000001"]
    rejects = loaded.rejects.set_index("location")["reason"]
    assert sorted(rejects.index) == sorted(f"rejects.jsonl:{n}" for n in range(2, 14))
    assert rejects["rejects.jsonl:2"].startswith("malformed JSON")
    assert rejects["rejects.jsonl:3"] == "span lacks its span id"
    assert rejects["rejects.jsonl:4"] == "span lacks its start time"
    assert rejects["rejects.jsonl:5"].startswith("bad trace id 'not-a-trace-id'")
    assert rejects["rejects.jsonl:6"] == "span ends before it starts"
    assert rejects["rejects.jsonl:7"].startswith("duplicate span")
    assert "rejects.jsonl:1" in rejects["rejects.jsonl:7"]
    assert rejects["rejects.jsonl:8"].startswith("not an OTLP/JSON traces line")
    assert rejects["rejects.jsonl:9"] == "bad parent span id 'xyz'"
    assert rejects["rejects.jsonl:10"].startswith("span cannot be decoded (ValueError(")
    assert rejects["rejects.jsonl:11"].startswith("start or end time out of range")
    assert rejects["rejects.jsonl:12"] == "start or end time is not an integer"
    assert rejects["rejects.jsonl:13"].startswith("truncated line")
    assert loaded.rejects["source"].eq("spans").all()
    assert loaded.rejects["raw"].notna().all()


def test_jaeger_rejects_name_the_trace_and_span() -> None:
    loaded = load("jaeger_rejects.json")
    assert loaded.frames["spans"]["name"].tolist() == ["invocation"]
    reasons = loaded.rejects.set_index("location")["reason"].to_dict()
    assert reasons == {
        "jaeger_rejects.json:data[0].spans[1]": "span cannot be decoded "
        "(ValueError(\"invalid literal for int() with base 10: 'long'\"))",
        "jaeger_rejects.json:data[0].spans[2]": "span cannot be decoded (KeyError('key'))",
        "jaeger_rejects.json:data[0].spans[3]": "span lacks its span id",
        "jaeger_rejects.json:data[1]": "Jaeger trace without a spans list",
    }


def test_several_files_are_read_in_order_and_later_duplicates_rejected() -> None:
    both = frame("java_otlp.jsonl", "python2_otlp.jsonl")
    parts = pd.concat([frame("java_otlp.jsonl"), frame("python2_otlp.jsonl")])
    pd.testing.assert_frame_equal(both, parts.reset_index(drop=True))
    twice = load("java_otlp.jsonl", "ids.jsonl")
    assert len(twice.frames["spans"]) == 4
    assert twice.rejects["location"].tolist() == ["ids.jsonl:1", "ids.jsonl:1"]
    assert twice.rejects["reason"].str.contains("java_otlp.jsonl:").all()


def test_filters_window_sessions_invocations_after_spreading() -> None:
    files = ("java_otlp.jsonl", "python2_otlp.jsonl", "python_legacy_otlp.jsonl")
    window = Window(utc("2026-11-29T03:10:00.015Z"), utc("2026-11-29T03:11:00.015Z"))
    got = frame(*files, filters=Filters(window=window))
    assert got["name"].tolist() == [
        "call_llm",
        "execute_tool lookup_order",
        "invoke_workflow support_agent",
        "invoke_agent support_agent",
    ]
    by_session = frame(*files, filters=Filters(session_ids=("s-7d1c0b9a", "s-legacy-1")))
    assert set(by_session["invocation_id"]) == {JAVA_INV, LEGACY_INV}
    assert len(by_session) == 9
    by_invocation = frame(*files, filters=Filters(invocation_ids=(PY2_INV,), app_name="x"))
    assert len(by_invocation) == 5  # the root span has the id only by spreading
    assert by_invocation["kind"].iloc[0] == "invocation"


def test_an_empty_export_is_a_source_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text("\n  \n")
    with pytest.raises(SourceError, match=r"spans: the file is empty: '.*data\.json'"):
        spans.load(SourceSpec("spans", paths=(tmp_path / "data.json",)), Filters())


def test_unknown_file_shape_and_missing_file() -> None:
    with pytest.raises(SchemaError, match="neither OTLP/JSON lines nor a Jaeger JSON export"):
        load("not_spans.log")
    with pytest.raises(SourceError, match="file not found"):
        load("nope.jsonl")


def test_span_payloads_parses_json_in_strings_on_demand() -> None:
    spec = SourceSpec("spans", paths=(DATA / "java_otlp.jsonl", DATA / "names.jsonl"))
    got = spans.span_payloads(spec, ["EEE19B7EC3C1B174", "eee19b7ec3c1b173", "a000000000000004"])
    assert got.columns.tolist() == ["trace_id", "span_id", "key", "value"]
    tool, llm, merged = "eee19b7ec3c1b174", "eee19b7ec3c1b173", "a000000000000004"
    assert got["span_id"].tolist() == [tool] * 4 + [llm] * 2 + [merged]  # in the order asked
    values = got.set_index(["span_id", "key"])["value"]
    assert values["eee19b7ec3c1b174", "gcp.vertex.agent.tool_call_args"] == {"order_id": "A-42"}
    assert values["eee19b7ec3c1b173", "gcp.vertex.agent.llm_response"]["finishReason"] == "STOP"
    assert values["a000000000000004", "gcp.vertex.agent.tool_call_args"] == "N/A"  # not JSON
    one_key = spans.span_payloads(
        DATA / "java_otlp.jsonl", ["eee19b7ec3c1b173"], keys=["gcp.vertex.agent.llm_request"]
    )
    assert one_key["value"].iloc[0]["model"] == "gemini-2.5-flash"
    assert len(one_key) == 1
    assert spans.span_payloads(DATA / "java_otlp.jsonl", ["0123456789abcdef"]).empty


def test_span_payloads_refuses_a_malformed_span_id() -> None:
    with pytest.raises(ParameterError, match="not a span id: 'span-1'"):
        spans.span_payloads(DATA / "java_otlp.jsonl", ["span-1"])
