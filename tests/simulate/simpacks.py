"""Plain readers of simulated packs, written independently of the kit's loaders.

They read the files the way a person would (json, csv, sqlite3) so tests can check a pack's
``truth.json`` against its evidence without trusting the code that wrote either.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
PACKS = (
    "healthy",
    "latency_cliff",
    "runaway",
    "vanished_state",
    "crash_recovery",
    "crash_recovery-adk-python",
    "vanished_state-adk-python",
)
RECORD = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(?:Z|[+-]\d\d:\d\d)) (INFO |WARN |ERROR) (\S+) - (.*)$"
)


def truth(pack: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((pack / "truth.json").read_text())
    return doc


def events(pack: Path) -> list[dict[str, Any]]:
    """Every stored event as camelCase-ish dicts with app/user/session, in file/table order."""
    if (pack / "events.jsonl").exists():
        with (pack / "events.jsonl").open() as handle:
            return [json.loads(line) for line in handle]
    conn = sqlite3.connect(f"file:{pack / 'sessions.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT app_name, user_id, session_id, timestamp, event_data FROM events"
        ).fetchall()
    finally:
        conn.close()
    out = []
    for app, user, session, column_ts, data in rows:
        event = json.loads(data)
        event.update(appName=app, userId=user, sessionId=session, column_ts=column_ts)
        out.append(event)
    return out


def parts(event: dict[str, Any]) -> list[dict[str, Any]]:
    content = event.get("content") or {}
    return list(content.get("parts", []))


def calls(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        p.get("functionCall") or p["function_call"]
        for p in parts(event)
        if "functionCall" in p or "function_call" in p
    ]


def responses(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        p.get("functionResponse") or p["function_response"]
        for p in parts(event)
        if "functionResponse" in p or "function_response" in p
    ]


def delta(event: dict[str, Any]) -> dict[str, Any]:
    actions = event["actions"]
    return dict(actions.get("stateDelta", actions.get("state_delta", {})))


def inv_id(event: dict[str, Any]) -> str:
    return str(event.get("invocationId") or event["invocation_id"])


def ts_ms(event: dict[str, Any]) -> int:
    """Epoch ms: Java writes int ms, Python float seconds."""
    value = event["timestamp"]
    return int(value) if isinstance(value, int) else round(value * 1000)


def ledger(pack: Path) -> list[dict[str, str]]:
    with (pack / "ledger.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def journal(pack: Path) -> list[dict[str, Any]]:
    """The journal's entries; none when the pack has no journal (no tool journaled)."""
    path = pack / "journal.jsonl"
    if not path.exists():
        assert "[journal]" not in (pack / "evidence.toml").read_text(), "the manifest names it"
        return []
    with path.open() as handle:
        return [json.loads(line) for line in handle]


def spans(pack: Path) -> list[dict[str, Any]]:
    out = []
    with (pack / "spans.otlp.jsonl").open() as handle:
        for line in handle:
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    out.extend(scope["spans"])
    return out


@dataclass
class Record:
    ts: str
    """UTC, ``2026-11-29T03:10:00.123Z`` (as written when the log is in UTC)."""
    level: str
    logger: str
    message: str
    extra: list[str]
    written: str = ""
    """The time as the line has it (local with an offset when the JVM is not in UTC)."""

    def field(self, name: str) -> str | None:
        match = re.search(rf"\b{name}=(\S+)", self.message)
        return match.group(1) if match else None


def utc(stamp: str) -> str:
    """``2026-11-29T04:10:00.123+01:00`` as ``2026-11-29T03:10:00.123Z``."""
    if stamp.endswith("Z"):
        return stamp
    moment = datetime.fromisoformat(stamp).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def log(pack: Path) -> list[Record]:
    """Diagnostics records; lines not starting with the prefix belong to the record above."""
    records: list[Record] = []
    for line in (pack / "diagnostics.log").read_text().splitlines():
        match = RECORD.match(line)
        if match:
            records.append(
                Record(utc(match[1]), match[2].strip(), match[3], match[4], [], match[1])
            )
        else:
            assert records, f"continuation line before any record: {line!r}"
            records[-1].extra.append(line)
    return records


@dataclass
class Thread:
    name: str
    state: str
    frames: list[str]


def dump(path: Path) -> tuple[str, list[Thread]]:
    """(header time, threads) of a jcmd Thread.print file."""
    lines = path.read_text().splitlines()
    threads: list[Thread] = []
    for line in lines:
        if line.startswith('"'):
            threads.append(Thread(line.split('"')[1], "", []))
        elif line.startswith("   java.lang.Thread.State: "):
            threads[-1].state = line.split(": ", 1)[1]
        elif line.startswith("\tat "):
            threads[-1].frames.append(line[4:])
    return lines[1], threads


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for item in span.get("attributes", []):
        value = item["value"]
        out[item["key"]] = next(iter(value.values()))
    return out
