"""Deliberately broken packs: each damages a small clean pack in one way.

Every variant folder holds a loadable pack and ``expected_rejects.json``::

    {"variant", "what", "rejects": [{"source", "location", "reason"}], "counts": {frame: rows}}

``source`` is the manifest section, ``location`` is ``file:line`` (1-based physical lines; a CSV
header is line 1), ``reason`` a case-insensitive regular expression the reject's reason matches.
``counts`` are the rows each frame still holds: the loaders keep every row they can read.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from incidentkit.simulate.driver import write_pack
from incidentkit.simulate.model import at
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.scenarios.common import llm_call_figures
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.truth import read
from incidentkit.simulate.world import World


def _mini(world: World, scale: int) -> Plan:
    background = Background(start=at("11:00"), end=at("11:25"), sessions=5 * scale)

    def expected(w: World, events_format: str) -> dict[str, Any]:
        return {"llm_calls": llm_call_figures(w.stats)}

    return Plan(core=[], background=background, expected=expected)


MINI = Spec(
    "mini", "A few healthy sessions (base of the broken packs)", (at("11:00"), at("11:30")), _mini
)


class _Pack:
    """A copy of the clean pack being damaged, with the rejects and counts it now implies."""

    def __init__(self, folder: Path, counts: dict[str, int]) -> None:
        self.folder, self.counts = folder, dict(counts)
        self.rejects: list[dict[str, str]] = []

    def lines(self, name: str) -> list[str]:
        return (self.folder / name).read_text(encoding="utf-8").splitlines(keepends=True)

    def write(self, name: str, lines: list[str]) -> None:
        (self.folder / name).write_text("".join(lines), encoding="utf-8", newline="")

    def reject(self, source: str, name: str, line: int, reason: str) -> None:
        self.rejects.append({"source": source, "location": f"{name}:{line}", "reason": reason})

    def lose_event(self, text: str) -> None:
        """An events.jsonl line that will not load takes its parts and delta with it."""
        event = json.loads(text)
        parts = event.get("content", {}).get("parts", [])
        self.counts["events"] -= 1
        self.counts["calls"] -= sum("functionCall" in p for p in parts)
        self.counts["responses"] -= sum("functionResponse" in p for p in parts)
        self.counts["state_writes"] -= len(event["actions"]["stateDelta"])


def _line_of(lines: list[str], predicate: Callable[[str], bool], nth: int = 0) -> int:
    hits = [i for i, text in enumerate(lines) if predicate(text)]
    return hits[min(nth, len(hits) - 1)]


def truncated(pack: _Pack) -> str:
    lines = pack.lines("events.jsonl")
    last = lines[-1]
    pack.lose_event(last)
    lines[-1] = last[: len(last) // 2]
    pack.write("events.jsonl", lines)
    pack.reject("events", "events.jsonl", len(lines), "truncat")
    return "events.jsonl ends in the middle of its last record (a copy cut short)"


def malformed(pack: _Pack) -> str:
    events = pack.lines("events.jsonl")
    i = _line_of(events, lambda t: '"functionCall"' in t)
    pack.lose_event(events[i])
    events[i] = events[i][: len(events[i]) // 3] + "\n"
    pack.write("events.jsonl", events)
    pack.reject("events", "events.jsonl", i + 1, "malformed|json")
    spans = pack.lines("spans.otlp.jsonl")
    j = 1
    pack.counts["spans"] -= len(json.loads(spans[j])["resourceSpans"][0]["scopeSpans"][0]["spans"])
    spans[j] = "this is not JSON\n"
    pack.write("spans.otlp.jsonl", spans)
    pack.reject("spans", "spans.otlp.jsonl", j + 1, "malformed|json")
    journal = pack.lines("journal.jsonl")
    journal.insert(1, "[1, 2, 3]\n")
    pack.write("journal.jsonl", journal)
    pack.reject("journal", "journal.jsonl", 2, "object")
    return "a cut events line, a span line that is not JSON, a journal line that is a list"


def naive_timestamps(pack: _Pack) -> str:
    ledger = pack.lines("ledger.csv")
    for row in (2, 4):
        fields = next(csv.reader([ledger[row - 1]]))
        fields[10] = fields[10].removesuffix("Z")  # started_at loses its offset
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(fields)
        ledger[row - 1] = buffer.getvalue()
        pack.reject("ledger", "ledger.csv", row, "offset|naive|time ?zone")
        pack.counts["runs"] -= 1
    pack.write("ledger.csv", ledger)
    journal = pack.lines("journal.jsonl")
    journal[0] = journal[0].replace('Z","updated_at"', '","updated_at"')
    pack.write("journal.jsonl", journal)
    pack.reject("journal", "journal.jsonl", 1, "offset|naive|time ?zone")
    pack.counts["journal"] -= 1
    return "two ledger rows and one journal row with timestamps that have no UTC offset"


def duplicate_ids(pack: _Pack) -> str:
    events = pack.lines("events.jsonl")
    i = _line_of(events, lambda t: '"stateDelta":{"' in t)
    events.insert(i + 1, events[i])
    pack.write("events.jsonl", events)
    pack.reject("events", "events.jsonl", i + 2, "duplicate")
    ledger = pack.lines("ledger.csv")
    ledger.append(ledger[1])
    pack.write("ledger.csv", ledger)
    pack.reject("ledger", "ledger.csv", len(ledger), "duplicate")
    return "an event line and a ledger row repeated with the same id"


VARIANTS: dict[str, Callable[[_Pack], str]] = {
    "truncated": truncated,
    "malformed": malformed,
    "naive_timestamps": naive_timestamps,
    "duplicate_ids": duplicate_ids,
}


def make(root: Path, *, seed: int = 0) -> list[Path]:
    """Write every broken variant under ``root`` (``root/<variant>/``)."""
    base = root / ".clean"
    write_pack(MINI, base, seed=seed, scale=1, events_format="adk-java", into=None)
    counts = read(base / "truth.json")["counts"]
    made = []
    for name, damage in VARIANTS.items():
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(base, folder)
        (folder / "truth.json").unlink()
        pack = _Pack(folder, counts)
        what = damage(pack)
        manifest = (folder / "evidence.toml").read_text(encoding="utf-8")
        (folder / "evidence.toml").write_text(
            manifest.replace('title = "', f'title = "BROKEN ({name}): ', 1), encoding="utf-8"
        )
        doc = {"variant": name, "what": what, "rejects": pack.rejects, "counts": pack.counts}
        (folder / "expected_rejects.json").write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
        made.append(folder)
    shutil.rmtree(base)
    return made
