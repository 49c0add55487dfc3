"""Every parser of untrusted text runs in linear time: hostile multi-megabyte lines load fast.

Each line below is shaped against a pattern the parsers use (quotes before a thread header's
``tid=``, brackets and ``key=value`` runs of log prefixes, URL userinfo and ``password=`` of the
redactor, dotted logger and class names of stack lines, deep JSON nesting, huge numbers). A
quadratic pattern takes minutes on 4 MB (the old thread-header regex: 74 s on 128 KB); the
bound is a benchmark-style ceiling far above the ~0.1 s these loads take, so it does not flake.
The load must end in frames plus rejects, or in an IncidentkitError: nothing else.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from incidentkit import open_evidence
from incidentkit.errors import IncidentkitError
from incidentkit.redact import scrub_text

SIZE = 4_000_000
CEILING_S = 5.0
HOSTILE = {
    "quote-space": '" ' * (SIZE // 2),
    "quote-then-letters": '"' + "a" * SIZE,
    "tid-after-quotes": '"' + '" ' * (SIZE // 4) + " tid=",
    "brackets": "[" * SIZE,
    "pairs": "a=" * (SIZE // 2),
    "log-prefix-brackets": "2026-11-29T03:10:00Z INFO " + "[] " * (SIZE // 3),
    "log-prefix-open-bracket": "2026-11-29T03:10:00Z INFO [" + " " * SIZE,
    "userinfo": "://" + "a:" * (SIZE // 2),
    "passwords": "password=" * (SIZE // 9),
    "dotted": "a." * (SIZE // 2),
    "stack-frame": "at " + "a." * (SIZE // 2),
    "digits": "1" * SIZE,
    "deep-json": '{"a":' * (SIZE // 5),
}
SECTIONS = {
    "ledger-csv": ("ledger", "ledger.csv", "csv", "run_id,app_name\n"),
    "ledger-jsonl": ("ledger", "ledger.jsonl", "jsonl", ""),
    "journal-csv": ("journal", "journal.csv", "csv", "key\n"),
    "events": ("events", "events.jsonl", "adk-java-json", ""),
    "spans-otlp": ("spans", "spans.jsonl", "otlp-json", ""),
    "spans-jaeger": ("spans", "spans.json", "jaeger-json", ""),
    "diagnostics-text": ("diagnostics", "diagnostics.log", "text", ""),
    "diagnostics-json": ("diagnostics", "diagnostics.jsonl", "json", ""),
    "threads": ("threads", "dump.txt", "jcmd", "2026-11-29 03:10:00\nFull thread dump X:\n\n"),
}
FRAME = {"ledger": "runs"}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_hostile_lines_load_in_linear_time(section: str, tmp_path: Path) -> None:
    name, filename, fmt, header = SECTIONS[section]
    slowest = (0.0, "")
    for label, line in HOSTILE.items():
        folder = tmp_path / label
        folder.mkdir()
        (folder / filename).write_text(header + line + "\n", encoding="utf-8")
        (folder / "evidence.toml").write_text(
            f'[{name}]\npath = "{filename}"\nformat = "{fmt}"\nnaive_timestamps = "utc"\n',
            encoding="utf-8",
        )
        started = time.perf_counter()
        try:
            incident = open_evidence(folder)
            getattr(incident, FRAME.get(name, name))
            _ = incident.rejects
        except IncidentkitError:
            pass  # a clear refusal is a fine end; any other exception fails the test
        took = time.perf_counter() - started
        slowest = max(slowest, (took, label))
    assert slowest[0] < CEILING_S, f"{section} took {slowest[0]:.1f} s on the {slowest[1]} line"


def test_the_redactor_is_linear_on_hostile_text() -> None:
    for label, line in HOSTILE.items():
        started = time.perf_counter()
        scrub_text(line)
        took = time.perf_counter() - started
        assert took < CEILING_S, f"scrub_text took {took:.1f} s on the {label} line"
