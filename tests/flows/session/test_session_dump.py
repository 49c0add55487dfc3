"""The session dump: one line per stored event, on small frames, on the simulated vanished-state
session against its truth, and through ``incidentkit session``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import incidentkit as ik
from incidentkit.cli import main
from incidentkit.errors import ParameterError
from incidentkit.flows.session import dump_text, session_dump
from incidentkit.frames import build

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
VANISHED = FIXTURES / "vanished_state"
T0 = pd.Timestamp("2026-11-29T14:00:00Z")


def _frames() -> tuple[pd.DataFrame, ...]:
    events = build(
        "events",
        [
            {"event_id": "e2", "session_id": "s", "invocation_id": "i1", "seq": 2,
             "ts": T0 + pd.Timedelta(seconds=2), "author": "a", "final_response": True},
            {"event_id": "e0", "session_id": "s", "invocation_id": "i1", "seq": 0, "ts": T0,
             "author": "user", "final_response": True},
            {"event_id": "e1", "session_id": "s", "invocation_id": "i1", "seq": 1,
             "ts": T0 + pd.Timedelta(seconds=1), "author": "a", "transfer_to_agent": "b",
             "error_code": "MAX_TOKENS"},
            {"event_id": "x0", "session_id": "other", "invocation_id": "i9", "seq": 0, "ts": T0,
             "author": "user"},
        ],
    )  # fmt: skip
    calls = build(
        "calls",
        [
            {"event_id": "e1", "session_id": "s", "call_id": "c1", "name": "lookup"},
            {"event_id": "e1", "session_id": "s", "call_id": "c2", "name": "quote"},
        ],
    )
    responses = build(
        "responses", [{"event_id": "e2", "session_id": "s", "call_id": "c1", "name": "lookup"}]
    )
    writes = build(
        "state_writes",
        [
            {"event_id": "e2", "session_id": "s", "key": "cart"},
            {"event_id": "e2", "session_id": "s", "key": "temp:quote", "removed": True},
        ],
    )
    return events, calls, responses, writes


def test_each_event_of_the_session_is_one_row_in_session_order() -> None:
    dump = session_dump(*_frames(), "s")
    assert dump["event_id"].tolist() == ["e0", "e1", "e2"]
    assert dump["calls"].tolist() == [(), ("lookup", "quote"), ()]
    assert dump["responses"].tolist() == [(), (), ("lookup",)]
    assert dump["delta"].tolist() == [(), (), ("cart", "temp:quote")]
    lines = dump_text(dump).splitlines()
    assert lines[1] == (
        "2026-11-29T14:00:01.000Z inv=i1 author=a calls=[lookup, quote] responses=[] delta=[] "
        "transfer=b err=MAX_TOKENS final=false"
    )
    assert lines[2].endswith("delta=[cart, temp:quote] transfer=- err=- final=true")


def test_an_unknown_session_names_how_many_there_are() -> None:
    with pytest.raises(
        ParameterError,
        match=r"no such session: no stored event has it; the evidence holds 2 session",
    ):
        session_dump(*_frames(), "nope")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s", "t"]), st.integers(0, 3)), max_size=12))
def test_every_event_and_every_delta_key_is_shown_once(rows: list[tuple[str, int]]) -> None:
    """Any log: the dump holds the session's events, each with as many delta keys as the
    state writes stored under it."""
    events = build(
        "events",
        [
            {"event_id": f"e{i}", "session_id": s, "seq": i, "ts": T0, "author": "a"}
            for i, (s, _) in enumerate(rows)
        ],
    )
    writes = build(
        "state_writes",
        [
            {"event_id": f"e{i}", "session_id": s, "key": f"k{j}"}
            for i, (s, n) in enumerate(rows)
            for j in range(n)
        ],
    )
    mine = [(f"e{i}", n) for i, (s, n) in enumerate(rows) if s == "s"]
    if not mine:
        with pytest.raises(ParameterError):
            session_dump(events, build("calls", []), build("responses", []), writes, "s")
        return
    dump = session_dump(events, build("calls", []), build("responses", []), writes, "s")
    assert list(zip(dump["event_id"], dump["delta"].map(len), strict=True)) == mine
    assert len(dump_text(dump).splitlines()) == len(mine)


def test_the_vanished_state_session_shows_each_write_of_its_truth() -> None:
    truth = json.loads((VANISHED / "truth.json").read_text())["expected"]
    incident = ik.open_evidence(VANISHED)
    dump = session_dump(
        incident.events, incident.calls, incident.responses, incident.state_writes,
        truth["session_id"],
    )  # fmt: skip
    assert len(dump) == int(incident.events["session_id"].eq(truth["session_id"]).sum())
    pairs = zip(dump["invocation_id"], dump["delta"], strict=True)
    shown = {(inv, key) for inv, keys in pairs for key in keys}
    for entry in truth["keys"]:
        for write in entry["writes"]:  # every write this format stores is in some line's delta
            assert (write["invocation_id"], entry["key"]) in shown, entry["key"]


def test_incidentkit_session_prints_the_dump_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = json.loads((VANISHED / "truth.json").read_text())["expected"]["session_id"]
    assert main(["session", session, "--evidence", str(VANISHED)]) == 0
    out = capsys.readouterr().out.splitlines()
    events = ik.open_evidence(VANISHED).events
    assert len(out) == int(events["session_id"].eq(session).sum())
    assert all(" inv=e-" in line and " final=" in line for line in out)
    assert main(["session", "nope", "--evidence", str(VANISHED)]) == 3
    assert "no such session: no stored event has it" in capsys.readouterr().err
    typo = session[:-1] + ("x" if session[-1] != "x" else "y")
    assert main(["session", typo, "--evidence", str(VANISHED)]) == 3
    assert f"did you mean {typo} → {session}?" in capsys.readouterr().err


def test_a_dump_with_unread_rows_says_so_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    broken = FIXTURES / "broken" / "malformed"
    session = str(ik.open_evidence(broken).events["session_id"].dropna().iloc[0])
    assert main(["session", session, "--evidence", str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.out and "could not be read and are not in the dump" in captured.err
