"""ADK events as users export them: bare ``Event.toJson()`` lines and events-table row dumps.

Both are made here from the crash_recovery pack's events, so the frames they give can be
compared with the pack's own: the same events, the same calls, the same session keys.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from incidentkit import open_evidence
from incidentkit.errors import ManifestError
from incidentkit.manifest import load_manifest

PACK = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"
IDENTITY = ("appName", "userId", "sessionId")


def _events() -> list[dict[str, object]]:
    lines = (PACK / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _write(folder: Path, name: str, records: list[dict[str, object]], manifest: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record) + "\n" for record in records)
    (folder / name).write_text(text, encoding="utf-8")
    (folder / "evidence.toml").write_text(manifest, encoding="utf-8")
    return folder


def _bare(event: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in event.items() if key not in IDENTITY}


def _original() -> pd.DataFrame:
    return open_evidence(PACK).events


def test_a_one_session_dump_of_bare_events_takes_its_session_from_the_manifest(
    tmp_path: Path,
) -> None:
    session = [e for e in _events() if e["sessionId"] == _events()[0]["sessionId"]]
    app, user, sid = (session[0][key] for key in IDENTITY)
    folder = _write(
        tmp_path / "dump",
        "session.jsonl",
        [_bare(e) for e in session],
        f'[events]\npath = "session.jsonl"\napp_name = "{app}"\nuser_id = "{user}"\n'
        f'session_id = "{sid}"\n',
    )
    incident = open_evidence(folder)
    assert incident.rejects.empty and incident.warnings.empty
    original = _original()
    expected = original[original["session_id"] == sid].reset_index(drop=True)
    got = incident.events
    columns = ["event_id", "app_name", "user_id", "session_id", "seq", "invocation_id", "ts"]
    pd.testing.assert_frame_equal(got[columns], expected[columns])


def test_bare_events_take_their_session_from_the_ledger(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "with-ledger",
        "events.jsonl",
        [_bare(e) for e in _events()],
        '[events]\npath = "events.jsonl"\n[ledger]\npath = "ledger.csv"\n',
    )
    shutil.copy(PACK / "ledger.csv", folder / "ledger.csv")
    incident = open_evidence(folder)
    events = incident.events
    assert incident.rejects.empty
    in_ledger = events["invocation_id"].isin(incident.runs["invocation_id"])
    original = _original().set_index("event_id")
    named = events[in_ledger].set_index("event_id")
    for col in ("app_name", "user_id", "session_id"):
        assert named[col].equals(original.loc[named.index, col])
    # Events of invocations the ledger lacks are kept, unnamed, with one warning that says so.
    assert (events.loc[~in_ledger, "session_id"] == "").all()
    [reason] = incident.warnings["reason"].tolist()
    assert reason.startswith(f"{int((~in_ledger).sum())} events name no session")


def test_bare_events_alone_load_with_one_warning_and_no_reject(tmp_path: Path) -> None:
    records = [_bare(e) for e in _events()]
    folder = _write(
        tmp_path / "alone", "events.jsonl", records, '[events]\npath = "events.jsonl"\n'
    )
    incident = open_evidence(folder)
    assert len(incident.events) == len(records) and incident.rejects.empty
    assert incident.warnings["reason"].str.contains("give app_name, user_id and session_id").all()


@pytest.mark.parametrize("nested_as_text", [False, True])
def test_a_row_export_of_the_events_table_loads_like_the_table(
    tmp_path: Path, nested_as_text: bool
) -> None:
    """``psql \\copy (SELECT row_to_json(e) FROM adk_event e)``: the row's columns name it."""
    rows = [
        {
            "event_id": e["id"],
            "app_name": e["appName"],
            "user_id": e["userId"],
            "session_id": e["sessionId"],
            "invocation_id": e["invocationId"],
            "ts": "2026-11-29T03:00:00+00:00",
            "event": json.dumps(_bare(e)) if nested_as_text else _bare(e),
        }
        for e in _events()
    ]
    folder = _write(
        tmp_path / "rows", "adk_event.jsonl", rows, '[events]\npath = "adk_event.jsonl"\n'
    )
    incident = open_evidence(folder)
    assert incident.rejects.empty and incident.warnings.empty
    columns = ["event_id", "app_name", "user_id", "session_id", "seq", "invocation_id", "ts"]
    pd.testing.assert_frame_equal(incident.events[columns], _original()[columns])
    pd.testing.assert_frame_equal(
        incident.calls.drop(columns="location", errors="ignore"),
        open_evidence(PACK).calls.drop(columns="location", errors="ignore"),
    )


def test_a_row_s_own_columns_win_over_the_nested_event(tmp_path: Path) -> None:
    event = _events()[0]
    row = {"event_id": event["id"], "app_name": "from-row", "event": event}
    folder = _write(tmp_path / "wins", "rows.jsonl", [row], '[events]\npath = "rows.jsonl"\n')
    events = open_evidence(folder).events
    assert events["app_name"].tolist() == ["from-row"]
    assert events["session_id"].tolist() == [event["sessionId"]]  # the event fills the rest


def test_the_nested_column_can_be_named(tmp_path: Path) -> None:
    event = _events()[0]
    row = {"event_id": event["id"], "payload": event}
    folder = _write(
        tmp_path / "named",
        "rows.jsonl",
        [row],
        '[events]\npath = "rows.jsonl"\nevent_column = "payload"\n',
    )
    assert open_evidence(folder).events["event_id"].tolist() == [event["id"]]


def test_identity_keys_belong_to_events_and_misspellings_get_a_guess(tmp_path: Path) -> None:
    manifest = tmp_path / "evidence.toml"
    manifest.write_text('[ledger]\npath = "l.csv"\nsession_id = "s"\n', encoding="utf-8")
    with pytest.raises(ManifestError, match=r"\[ledger\] has unknown keys: \['session_id'\]"):
        load_manifest(manifest)
    manifest.write_text('[events]\npath = "e.jsonl"\nsesion_id = "s"\n', encoding="utf-8")
    with pytest.raises(ManifestError, match="did you mean sesion_id → session_id"):
        load_manifest(manifest)


@pytest.mark.adk
@pytest.mark.parametrize("by_alias", [False, True])
def test_bare_adk_python_events_load_in_either_key_style(tmp_path: Path, by_alias: bool) -> None:
    """``Event.model_dump_json()`` lines, written by the real google-adk (epoch seconds)."""
    from google.adk.events import Event
    from google.genai import types

    call = types.FunctionCall(id="call-1", name="order_lookup", args={"order": "A-42"})
    reply = types.FunctionResponse(id="call-1", name="order_lookup", response={"ok": True})
    events = [
        Event(
            invocation_id="e-1",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text="where is A-42?")]),
            timestamp=1764385800.25,
        ),
        Event(
            invocation_id="e-1",
            author="support_agent",
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            timestamp=1764385801.5,
        ),
        Event(
            invocation_id="e-1",
            author="support_agent",
            content=types.Content(role="user", parts=[types.Part(function_response=reply)]),
            timestamp=1764385802.75,
        ),
    ]
    lines = "".join(e.model_dump_json(exclude_none=True, by_alias=by_alias) + "\n" for e in events)
    (tmp_path / "dump.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "evidence.toml").write_text(
        '[events]\npath = "dump.jsonl"\napp_name = "support"\nuser_id = "u-1"\n'
        'session_id = "s-1"\n',
        encoding="utf-8",
    )
    incident = open_evidence(tmp_path)
    assert incident.rejects.empty and incident.warnings.empty
    got = incident.events
    assert got["event_id"].tolist() == [e.id for e in events]
    assert got["source_format"].unique().tolist() == ["adk-session-json"]
    assert got["ts"].tolist() == [
        pd.Timestamp(e.timestamp, unit="s", tz="UTC").floor("us") for e in events
    ]
    assert incident.calls["call_id"].tolist() == ["call-1"]
    assert incident.responses["call_id"].tolist() == ["call-1"]


def test_a_json_array_of_bare_events_loads_like_json_lines(tmp_path: Path) -> None:
    session = [e for e in _events() if e["sessionId"] == _events()[0]["sessionId"]]
    app, user, sid = (session[0][key] for key in IDENTITY)
    tail = f'app_name = "{app}"\nuser_id = "{user}"\nsession_id = "{sid}"\n'
    (tmp_path / "events.json").write_text(json.dumps([*map(_bare, session), 3]))
    (tmp_path / "evidence.toml").write_text(f'[events]\npath = "events.json"\n{tail}')
    incident = open_evidence(tmp_path)
    assert incident.events["event_id"].tolist() == [e["id"] for e in session]
    assert incident.rejects[["location", "reason"]].values.tolist() == [
        [f"events.json:[{len(session)}]", "expected a JSON object, got int"]
    ]
