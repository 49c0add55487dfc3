"""A crash the kit did not simulate: ADK Java ``Event.toJson()`` lines, the diagnostics plugin's
lines and an ``agent_run`` ledger, written here by hand (``docs``' formats, not the simulator),
where one worker of three died mid-tool and the others went on.

The invocations the dead worker held stay open past the client timeout. They are orphans, not
hangs: the card sends them to the orphans flow, the latency flow says the worker died (no
timeout fix, nothing "held a thread"), their ages make no latency cliff, and the postmortem
follows."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from incidentkit.findings import Findings
from incidentkit.flows import latency_cliff, overview
from incidentkit.postmortem import postmortem_command

APP = "checkout"
AGENT = "checkout_agent"
TOOLS = ("reserve_stock", "charge_card", "lookup_order")
START = pd.Timestamp("2027-03-02T10:00:00Z")
END = START + pd.Timedelta(minutes=40)
CRASHES = {"mid-window": pd.Timedelta(minutes=20), "near-the-end": pd.Timedelta(minutes=35)}
"""When the worker dies: an orphan's age stands out mid-window, and near the window's end
it would look like a latency cliff if it were taken for latency."""
LEASE = pd.Timedelta(seconds=60)
DEAD = "worker-b"


def ms(stamp: pd.Timestamp) -> int:
    return int(stamp.value // 1_000_000)


def iso(stamp: pd.Timestamp) -> str:
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class Crash:
    """The evidence as written, and its truth: the invocations the dead worker left open."""

    folder: Path
    crash: pd.Timestamp
    dead: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)


def _event(
    inv: str, author: str, at: pd.Timestamp, session: str, user: str, content: dict[str, Any]
) -> dict[str, Any]:
    """One event as ADK Java's ``Event.toJson()`` writes it (``docs``: key order of the
    declaration, empty actions maps always present), with the session keys a logging plugin
    adds."""
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{inv}/{author}/{ms(at)}")),
        "invocationId": inv,
        "author": author,
        "content": content,
        "actions": {
            "stateDelta": {},
            "artifactDelta": {},
            "requestedAuthConfigs": {},
            "requestedToolConfirmations": {},
        },
        "timestamp": ms(at),
        "appName": APP,
        "userId": user,
        "sessionId": session,
    }


def write_crash(folder: Path, after: pd.Timedelta, seed: int = 7) -> Crash:
    """Three workers take turns for 40 minutes; ``worker-b`` dies ``after`` the start with
    several invocations mid-tool. Its RUNNING rows keep their last lease."""
    rng = np.random.default_rng(seed)
    died_at = START + after
    crash = Crash(folder, died_at)
    events, runs, lines = [], [], []
    users = [f"u-{n}" for n in range(12)]
    sessions = {u: str(uuid.UUID(int=int(rng.integers(1, 2**62)))) for u in users}
    starts = [START + pd.Timedelta(seconds=float(s)) for s in np.arange(5, 2390, 17.0)]
    in_flight = [died_at - pd.Timedelta(seconds=s) for s in (9.0, 6.5, 4.0, 2.5, 1.0)]
    plan = [(s, None) for s in starts] + [(s, DEAD) for s in in_flight]
    for n, (at, forced) in enumerate(sorted(plan, key=lambda p: p[0])):
        user = f"u-stuck-{n}" if forced else users[int(rng.integers(len(users)))]
        session = str(uuid.uuid5(uuid.NAMESPACE_URL, user)) if forced else sessions[user]
        inv = f"e-{uuid.UUID(int=int(rng.integers(1, 2**62)))}"
        worker = forced or ("worker-a", "worker-c", DEAD)[n % 3]
        tool = TOOLS[n % len(TOOLS)]
        call_id = f"adk-{uuid.UUID(int=int(rng.integers(1, 2**62)))}"
        model_s = float(rng.lognormal(np.log(1.2), 0.25))
        tool_s = 12.0 if forced else float(rng.lognormal(np.log(2.5), 0.3))
        answer_s = float(rng.lognormal(np.log(1.0), 0.25))
        steps = [
            (at, "user", {"role": "user", "parts": [{"text": f"Please {tool} for me."}]}),
            (
                at + pd.Timedelta(seconds=model_s),
                AGENT,
                {
                    "role": "model",
                    "parts": [{"functionCall": {"args": {"ref": f"R-{n}"}, "id": call_id,
                                                "name": tool}}],
                },
            ),
            (
                at + pd.Timedelta(seconds=model_s + tool_s),
                AGENT,
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"id": call_id, "name": tool,
                                                    "response": {"status": "ok"}}}],
                },
            ),
            (
                at + pd.Timedelta(seconds=model_s + tool_s + answer_s),
                AGENT,
                {"role": "model", "parts": [{"text": "Done."}]},
            ),
        ]  # fmt: skip
        if worker == DEAD and not forced and steps[-1][0] >= died_at - pd.Timedelta(seconds=1):
            worker = "worker-a"  # the runs the dead worker finished, and none after
        died = worker == DEAD and steps[-1][0] >= died_at
        kept = [s for s in steps if s[0] < died_at] if died else steps
        events += [_event(inv, author, t, session, user, content) for t, author, content in kept]
        run: dict[str, Any] = {
            "run_id": str(uuid.UUID(int=int(rng.integers(1, 2**62)))),
            "app_name": APP,
            "user_id": user,
            "session_id": session,
            "invocation_id": inv,
            "request": json.dumps({"role": "user", "parts": [{"text": "..."}]}),
            "owner": worker,
            "attempts": 0,
            "started_at": iso(at),
        }
        lines.append(
            f"{iso(at)} INFO  c.e.agent.DiagnosticsPlugin - run.start inv={inv} app={APP} "
            f"user={user} session={session}"
        )
        if died:
            renewed = at + pd.Timedelta(seconds=20 * ((died_at - at).total_seconds() // 20))
            run |= {"status": "RUNNING", "lease_until": iso(renewed + LEASE)}
            run["updated_at"] = iso(kept[-1][0])
            crash.dead.append(inv)
            crash.sessions.append(session)
        else:
            end = steps[-1][0]
            run |= {"status": "DONE", "lease_until": iso(end + LEASE), "updated_at": iso(end)}
            took = round((end - at).total_seconds() * 1000)
            lines.append(
                f"{iso(end)} INFO  c.e.agent.DiagnosticsPlugin - run.end inv={inv} outcome=ok "
                f"ms={took} llmCalls=2"
            )
        runs.append(run)
    folder.mkdir(parents=True, exist_ok=True)
    events.sort(key=lambda e: e["timestamp"])
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    pd.DataFrame(runs).to_csv(folder / "ledger.csv", index=False)
    (folder / "diagnostics.log").write_text("".join(f"{line}\n" for line in sorted(lines)))
    (folder / "evidence.toml").write_text(
        f'title = "checkout: a worker died mid-tool (hand-written ADK Java evidence)"\n'
        f'window = {{ start = "{iso(START)}", end = "{iso(END)}" }}\n\n'
        '[ledger]\npath = "ledger.csv"\nformat = "csv"\n\n'
        '[events]\npath = "events.jsonl"\nformat = "adk-java-json"\n\n'
        '[diagnostics]\npath = "diagnostics.log"\nformat = "text"\n\n'
        f'[apps.{APP}]\nterminal_agent = "{AGENT}"\nclient_timeout_s = 60\n'
    )
    return crash


@pytest.fixture(scope="module", params=sorted(CRASHES))
def crash(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Crash:
    return write_crash(tmp_path_factory.mktemp("java-crash"), CRASHES[str(request.param)])


def _without_ledger(crash: Crash, folder: Path) -> Path:
    folder.mkdir()
    for name in ("events.jsonl", "diagnostics.log"):
        (folder / name).write_bytes((crash.folder / name).read_bytes())
    manifest = (crash.folder / "evidence.toml").read_text()
    (folder / "evidence.toml").write_text(
        manifest.replace('[ledger]\npath = "ledger.csv"\nformat = "csv"\n\n', "")
    )
    return folder


def card_of(folder: Path, **parameters: Any) -> tuple[pd.DataFrame, Findings]:
    incident, settings = overview.setup(folder, **parameters)
    report = overview.triage(incident, settings)
    return report.card, overview.findings(report, incident, settings)


def first_urgent(found: Findings) -> dict[str, Any]:
    card = next(item for item in found.items if item.id == "overview/card")
    return next(r for r in card.rows if r["severity"] in ("CRITICAL", "WARNING"))


def test_the_evidence_holds_a_dead_worker_and_workers_that_went_on(crash: Crash) -> None:
    assert len(crash.dead) >= 4
    events = [json.loads(line) for line in (crash.folder / "events.jsonl").read_text().splitlines()]
    after = [e for e in events if e["timestamp"] > ms(crash.crash + LEASE)]
    assert after and not {e["invocationId"] for e in after} & set(crash.dead)


@pytest.mark.parametrize("symptom", ["", "spinner", "crash"])
def test_the_card_sends_the_dead_workers_invocations_to_the_orphans_flow(
    crash: Crash, symptom: str
) -> None:
    card, found = card_of(crash.folder, symptom=symptom)
    top = first_urgent(found)
    assert top["flow"] == "orphans", top
    title = next(i.title for i in found.items if i.id == "overview/card")
    assert "open the orphans flow first" in title
    dead = card.loc[card["check"].eq("dead-worker")].iloc[0]
    assert dead["count"] == len(crash.dead) and "worker died" in dead["title"]
    assert DEAD in dead["title"]
    hung = card.loc[card["check"].eq("open-past-timeout")].iloc[0]
    assert (hung["severity"], hung["count"]) == ("INFO", 0)
    cliff = card.loc[card["check"].eq("latency-cliff")].iloc[0]
    assert cliff["severity"] == "INFO", cliff["title"]  # an orphan's age is no latency


def test_the_latency_flow_says_the_worker_died_and_proposes_no_timeout_fix(
    crash: Crash, tmp_path: Path
) -> None:
    incident, settings = latency_cliff.setup(crash.folder, app_name=APP)
    report = latency_cliff.triage(incident, settings)
    assert sorted(report.orphans["invocation_id"]) == sorted(crash.dead)
    assert report.hangs.empty and report.fix.empty and not report.has_cliff
    assert set(report.orphans["orphan_reason"]) == {"lease_expired"}
    assert set(report.orphans["owner"]) == {DEAD}
    found = latency_cliff.findings(report, incident, settings)
    items = {item.id: item for item in found.items}
    assert "latency_cliff/fix" not in items and "latency_cliff/cliff" not in items
    opened = items["latency_cliff/open-invocations"]
    assert "the worker died" in opened.title
    assert "Apply the fix below" not in opened.action and "orphans flow" in opened.action
    assert "still holds its thread" not in opened.detail
    assert [r["orphaned"] for r in opened.rows] == [True] * len(crash.dead)
    out = tmp_path / "lc"
    out.mkdir()
    found.write(out / "findings.json")
    draft = postmortem_command(out, fmt="md")
    assert "held a thread" not in draft.replace("none of them held a thread", "")
    assert "none of them held a thread" in draft
    assert f"worker(s) {DEAD} stopped" in draft
    timeline = draft.split("## Timeline")[1].split("## Root cause")[0]
    assert "died before it finished" in timeline and "still open at as_of" not in timeline


def test_without_a_ledger_the_silent_sessions_are_presumed_orphans(
    crash: Crash, tmp_path: Path
) -> None:
    folder = _without_ledger(crash, tmp_path / "no-ledger")
    _, found = card_of(folder, symptom="spinner")
    assert first_urgent(found)["check"] == "dead-worker"
    incident, settings = latency_cliff.setup(folder, app_name=APP)
    report = latency_cliff.triage(incident, settings)
    assert sorted(report.orphans["invocation_id"]) == sorted(crash.dead)
    assert set(report.orphans["orphan_reason"]) == {"session_silent"}
    assert report.fix.empty
