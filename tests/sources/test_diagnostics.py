from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import SourceError
from incidentkit.frames import spec_of
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import diagnostics
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parent.parent / "data" / "diagnostics"


def load(
    *names: str, fmt: str | None = None, naive: str = "error", filters: Filters | None = None
) -> Loaded:
    spec = SourceSpec(
        "diagnostics", paths=tuple(DATA / n for n in names), format=fmt, naive_timestamps=naive
    )
    return diagnostics.load(spec, filters or Filters())


def frame(*names: str, **kwargs: object) -> pd.DataFrame:
    loaded = load(*names, **kwargs)  # type: ignore[arg-type]
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["diagnostics"]


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC").as_unit("ns")


def typed(data: dict[str, list[object]]) -> pd.DataFrame:
    dtypes = spec_of("diagnostics").dtypes
    return pd.DataFrame(data).astype({col: dtypes[col] for col in data})


def test_plugin_lines_give_kinds_ids_and_numbers() -> None:
    got = frame("plugin.log")
    expected = typed(
        {
            "level": [
                "INFO",
                "INFO",
                "INFO",
                "ERROR",
                "ERROR",
                "INFO",
                "WARN",
                "ERROR",
                "ERROR",
                "INFO",
                "INFO",
            ],
            "kind": [
                "run.start",
                "run.end",
                "run.start",
                "tool.error",
                "run.error",
                "run.end",
                "run.many_llm_calls",
                "model.error",
                "rx.undeliverable",
                "other",
                "run.end",
            ],
            "invocation_id": ["e-7c1a", "e-7c1a"]
            + ["e-8d2b"] * 4
            + ["e-9e3c"] * 2
            + [None, None, "e-9e3c"],
            "agent": [None] * 6 + ["router_agent", "router_agent", None, None, None],
            "tool": [None, None, None, "order_lookup"] + [None] * 7,
            "call_id": [None, None, None, "adk-1f2e3d4c"] + [None] * 7,
            "outcome": [None, "ok", None, None, None, "error", None, None, None, None, "error"],
            "ms": [None, 4410, None, None, None, 1350, None, None, None, None, 61000],
            "llm_calls": [None, 3, None, None, None, 1, 20, None, None, None, 20],
            "location": [f"plugin.log:{n}" for n in (1, 2, 3, 4, 9, 12, 13, 14, 17, 22, 23)],
        }
    )
    pd.testing.assert_frame_equal(got[list(expected.columns)], expected)
    assert list(got.columns) == spec_of("diagnostics").names
    assert got["ts"].iloc[0] == utc("2026-11-29T03:09:58.101Z")
    assert got["ts"].iloc[6] == utc("2026-11-29T03:10:07Z")  # +00:00 offset


def test_stack_lines_join_the_record_before_them() -> None:
    got = frame("plugin.log").set_index("location")
    tool_error = got.loc["plugin.log:4"]
    assert tool_error["message"].splitlines() == [
        "tool.error inv=e-8d2b tool=order_lookup call=adk-1f2e3d4c",
        "java.net.SocketTimeoutException: Read timed out",
        "\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:288)",
        "\tat com.example.tools.OrderLookupTool.call(OrderLookupTool.java:57)",
        "\t... 12 common frames omitted",
    ]
    assert tool_error["line"].startswith("2026-11-29T03:10:06.300Z ERROR [RxCached")
    undeliverable = got.loc["plugin.log:17", "message"].splitlines()
    assert undeliverable[0] == "rx.undeliverable"
    assert undeliverable[3] == "Caused by: java.net.SocketException: Connection reset"
    assert len(undeliverable) == 5


def test_other_loggers_are_kept_as_other_without_ids() -> None:
    other = frame("plugin.log").query("kind == 'other'")
    assert other["message"].tolist() == ["Tomcat started on port 8080 (http) with context path '/'"]
    assert other[["invocation_id", "app_name", "session_id"]].isna().all().all()


def test_app_user_session_are_copied_from_run_start() -> None:
    got = frame("plugin.log").set_index("location")
    assert got.loc["plugin.log:12", ["app_name", "user_id", "session_id"]].tolist() == [
        "support",
        "u-18",
        "s-902",
    ]
    # e-9e3c started before this log begins: nothing to copy
    assert got.loc[got["invocation_id"].eq("e-9e3c"), "session_id"].isna().all()


def test_logback_spring_python_and_bare_prefixes() -> None:
    got = frame("styles.log")
    assert got["ts"].tolist() == [
        utc("2026-11-29T03:10:00.123Z"),
        utc("2026-11-29T03:10:01Z"),
        utc("2026-11-29T03:10:02Z"),
        utc("2026-11-29T03:10:03Z"),  # written as 04:10:03+01:00
        utc("2026-11-29T03:10:04Z"),
    ]
    assert got["level"].tolist() == ["INFO", "WARN", "WARN", "INFO", "ERROR"]
    assert got["kind"].tolist() == [
        "run.start",
        "run.many_llm_calls",
        "tool.error",
        "run.end",
        "run.error",  # no logger name between level and message
    ]
    assert got["llm_calls"].tolist() == [pd.NA, 40, pd.NA, 41, pd.NA]
    assert pd.isna(got["call_id"].iloc[2])  # call=? means unknown
    assert got["message"].iloc[2].endswith("ValueError: amount must be positive")
    assert got["message"].iloc[4] == "run.error inv=e-a1"
    assert got["invocation_id"].eq("e-a1").all()


def test_naive_timestamps_are_rejected_unless_declared_utc() -> None:
    refused = load("naive.log")
    assert refused.frames["diagnostics"].empty
    assert refused.rejects["location"].tolist() == ["naive.log:1", "naive.log:2"]
    assert refused.rejects["reason"].str.contains('set timezone = "UTC"').all()
    accepted = frame("naive.log", naive="utc")
    assert accepted["ts"].tolist() == [
        utc("2026-11-29T03:10:00.123Z"),
        utc("2026-11-29T03:10:02.500Z"),
    ]
    assert accepted["ms"].tolist() == [pd.NA, 2377]


def test_every_reject_reason() -> None:
    loaded = load("rejects.log")
    assert loaded.frames["diagnostics"]["location"].tolist() == ["rejects.log:2", "rejects.log:7"]
    reasons = loaded.rejects.set_index("location")["reason"].to_dict()
    assert reasons == {
        "rejects.log:1": "stack line with no log record before it",
        "rejects.log:3": "no log prefix (timestamp, level, logger) and not a stack line",
        "rejects.log:4": "bad ms= number (a whole number from 0 up): 12x",
        "rejects.log:5": "bad llmCalls=/calls= number (a whole number from 0 up): lots",
        "rejects.log:6": 'timestamp without a UTC offset: set timezone = "UTC" (or the zone '
        'the JVM logs in, e.g. "Europe/Berlin") in [diagnostics] or at the top of the manifest',
        "rejects.log:8": "truncated last line: the file ends mid-line",
    }
    assert loaded.rejects.set_index("location").loc["rejects.log:3", "raw"] == (
        "garbage that is not a log line"
    )


def test_json_lines_logstash_ecs_and_structured_fields() -> None:
    loaded = load("plugin.jsonl")
    got = loaded.frames["diagnostics"].set_index("location")
    assert got.loc["plugin.jsonl:2", "message"].splitlines() == [
        "tool.error inv=e-8d2b tool=order_lookup call=adk-1f2e3d4c",
        "java.net.SocketTimeoutException: Read timed out",
        "\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:288)",
    ]
    assert got.loc["plugin.jsonl:3", "level"] == "WARN"  # ECS log.level
    end = got.loc["plugin.jsonl:4"]  # epoch ms, ids as fields
    assert end["ts"] == utc("2026-11-29T03:10:10Z")
    assert [end["kind"], end["invocation_id"], end["outcome"], end["ms"], end["llm_calls"]] == [
        "run.end",
        "e-9e3c",
        "error",
        61000,
        20,
    ]
    assert got.loc["plugin.jsonl:5", "kind"] == "other"
    reasons = loaded.rejects.set_index("location")["reason"]
    assert reasons["plugin.jsonl:6"] == "log line without a timestamp"
    assert reasons["plugin.jsonl:7"].startswith("malformed JSON")


def test_text_and_json_logs_agree_on_the_lines_they_share() -> None:
    text, json = frame("plugin.log"), load("plugin.jsonl").frames["diagnostics"]
    shared = ["ts", "level", "kind", "invocation_id", "agent", "tool", "call_id"]
    shared += ["outcome", "ms", "llm_calls"]
    same = text.loc[text["location"].isin([f"plugin.log:{n}" for n in (1, 4, 13, 22, 23)])]
    pd.testing.assert_frame_equal(
        same[shared].reset_index(drop=True), json[shared].reset_index(drop=True)
    )


def test_several_files_merge_in_time_order() -> None:
    got = frame("styles.log", "plugin.log")
    assert got["ts"].is_monotonic_increasing
    assert len(got) == 16
    assert got["location"].iloc[:3].tolist() == ["plugin.log:1", "styles.log:1", "styles.log:2"]


def test_mixed_formats_are_detected_per_file() -> None:
    loaded = load("styles.log", "plugin.jsonl")
    assert len(loaded.frames["diagnostics"]) == 10
    assert len(loaded.rejects) == 2


def test_filters_keep_lines_without_the_filtered_id() -> None:
    window = Window(utc("2026-11-29T03:10:00Z"), utc("2026-11-29T03:10:09.500Z"))
    in_window = frame("plugin.log", filters=Filters(window=window))
    assert in_window["location"].tolist() == [
        f"plugin.log:{n}" for n in (2, 3, 4, 9, 12, 13, 14, 17)
    ]
    by_session = frame("plugin.log", filters=Filters(session_ids=("s-902",)))
    assert set(by_session["invocation_id"].dropna()) == {"e-8d2b", "e-9e3c"}
    assert "e-7c1a" not in set(by_session["invocation_id"])
    by_invocation = frame("plugin.log", filters=Filters(invocation_ids=("e-9e3c",)))
    assert by_invocation["kind"].tolist() == [
        "run.many_llm_calls",
        "model.error",
        "rx.undeliverable",
        "other",
        "run.end",
    ]
    by_app = frame("plugin.log", filters=Filters(app_name="billing"))
    assert by_app["app_name"].isna().all()
    assert len(by_app) == 5


def test_empty_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text(" \n\t\n")
    spec = SourceSpec("diagnostics", paths=(tmp_path / "empty.log",))
    with pytest.raises(SourceError, match=r"diagnostics: the file is empty: '.*empty\.log'"):
        diagnostics.load(spec, Filters())
    with pytest.raises(SourceError, match="file not found"):
        load("absent.log")


def test_key_value_pairs_first_of_a_repeat_wins_and_lines_stay_apart() -> None:
    got = frame("pairs.log")
    columns = ["kind", "invocation_id", "app_name", "outcome", "ms", "llm_calls", "agent"]
    expected = typed(
        {
            "kind": ["run.start", "run.error", "other", "run.end", "run.many_llm_calls"],
            "invocation_id": ["e-1", None, None, "e-1", "e-2"],
            "app_name": ["a1", None, None, "a1", None],  # run.end's copied from its run.start
            "outcome": [None, None, None, None, None],  # "outcome=" is empty: missing
            "ms": [None, None, None, 12, None],  # "note=x=ms=5" is one pair, note's
            "llm_calls": [None, None, None, 3, 40],  # llmCalls before calls; first calls=
            "agent": [None, None, None, None, "helper"],
        }
    )
    pd.testing.assert_frame_equal(got[columns], expected)


def test_a_record_separator_inside_a_message_separates_pairs() -> None:
    got = frame("separator.jsonl")
    assert got[["invocation_id", "ms", "outcome"]].to_dict("records") == [
        {"invocation_id": "e-3", "ms": 7, "outcome": "ok"}
    ]


def test_a_key_without_its_value_is_a_warning_naming_the_line(tmp_path: Path) -> None:
    prefix = "2026-11-29T03:10:0{}.000Z INFO  c.e.agent.DiagnosticsPlugin - "
    lines = [
        prefix.format(0) + "run.start inv=e-1 app=a1 user session=s-2",
        prefix.format(1) + "run.end inv=e-1 outcome=ok ms=5 llmCalls",
        prefix.format(2) + "run.error inv=e-1 Max number of llm calls limit of 500 exceeded",
        "2026-11-29T03:10:03.000Z INFO  c.e.app.Other - user session logged in",
    ]
    (tmp_path / "bare.log").write_text("\n".join(lines) + "\n")
    spec = SourceSpec("diagnostics", paths=(tmp_path / "bare.log",))
    loaded = diagnostics.load(spec, Filters())
    assert loaded.rejects.empty  # the lines are still usable
    got = loaded.frames["diagnostics"]
    assert got["session_id"].tolist()[:2] == ["s-2", "s-2"]
    assert got["user_id"].isna().all() and got["llm_calls"].isna().all()
    assert loaded.warnings[["location", "reason"]].values.tolist() == [
        ["bare.log:1", "user has no =value (write user=VALUE): user_id is read as missing"],
        [
            "bare.log:2",
            "llmCalls has no =value (write llmCalls=VALUE): llm_calls is read as missing",
        ],
    ]  # prose ("llm calls limit") and other loggers' lines are not keys
    assert loaded.warnings["raw"].tolist() == lines[:2]
