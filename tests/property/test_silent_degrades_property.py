"""Property tests: nothing the DDL or the plugin's format requires is lost without a word.

- Ledger and journal (JSON lines and CSV): a row the loader keeps has every column its table
  declares NOT NULL (``agent_run``, ``tool_journal``: ``incidentkit/store.py``); a record that
  lacks one is a reject naming the column, so rows + rejects == records.
- Diagnostics text: a plugin key written without its value (``user session=s-2``) is a warning
  naming the key at the line, unless the line gives that field as ``key=value`` too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import SchemaError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import diagnostics
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.sql import journal, ledger

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
AT = "2026-11-29T03:00:00Z"
RUN = {
    "run_id": "r",
    "app_name": "billing",
    "user_id": "u-1",
    "session_id": "s-1",
    "invocation_id": "e-1",
    "request": {"text": "hi"},
    "status": "DONE",
    "owner": "w-1",
    "lease_until": AT,
    "attempts": 1,
    "started_at": AT,
    "updated_at": AT,
}
ENTRY = {
    "key": "k",
    "invocation_id": "e-1",
    "function_call_id": "adk-1",
    "status": "DONE",
    "result": {"ok": True},
    "created_at": AT,
    "updated_at": AT,
}
NOT_NULL = {
    "ledger": (
        *("run_id", "app_name", "user_id", "session_id", "status", "attempts"),
        *("started_at", "updated_at"),
    ),
    "journal": ("key", "invocation_id", "status", "created_at", "updated_at"),
}
GONE = st.sampled_from(["null", "absent", "empty"])
"""How a value goes missing: JSON null, the key left out, an empty text (CSV's only way)."""


def _records(base: dict[str, object]) -> st.SearchStrategy[list[tuple[dict[str, object], str]]]:
    """Records over ``base``, each with a unique key, some columns gone (and how)."""
    columns = st.dictionaries(st.sampled_from(sorted(base)), GONE, max_size=3)
    return st.lists(columns, min_size=1, max_size=6).map(
        lambda edits: [
            (_without(base, edit, number), ",".join(sorted(edit)))
            for number, edit in enumerate(edits)
        ]
    )


def _without(base: dict[str, object], edit: dict[str, str], number: int) -> dict[str, object]:
    key = "run_id" if "run_id" in base else "key"
    record = {**base, key: f"{base[key]}-{number}"}
    for column, how in edit.items():
        if how == "absent":
            record.pop(column)
        else:
            record[column] = None if how == "null" else ""
    return record


def _load(section: str, path: Path) -> Loaded:
    module = ledger if section == "ledger" else journal
    return module.load(SourceSpec(section, paths=(path,)), Filters())


def _check(section: str, path: Path, records: list[dict[str, object]]) -> None:
    """A column no record has is a SchemaError naming it; else rows + rejects == records and
    no kept row lacks a NOT NULL value."""
    optional = {"owner", "lease_until", "function_call_id", "result"}
    base = RUN if section == "ledger" else ENTRY
    absent = sorted(set(base) - optional - {c for r in records for c in r})
    if absent:
        with pytest.raises(SchemaError, match="lack columns"):
            _load(section, path)
        return
    loaded = _load(section, path)
    frame = loaded.frames["runs" if section == "ledger" else "journal"]
    assert len(frame) + len(loaded.rejects) == len(records)
    assert not frame[list(NOT_NULL[section])].isna().any(axis=None), "a kept row lacks a value"
    lacking = [r for r in records if any(r.get(c) in (None, "") for c in NOT_NULL[section])]
    missing = loaded.rejects["reason"].str.contains("missing ", regex=False)
    assert int(missing.sum()) == len(lacking)


@SETTINGS
@given(records=_records(RUN), section=st.just("ledger"))
def test_ledger_jsonl_keeps_no_row_without_a_not_null_value(
    records: list[tuple[dict[str, object], str]], section: str, tmp_path: Path
) -> None:
    rows = [r for r, _ in records]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _check(section, tmp_path / "runs.jsonl", rows)


@SETTINGS
@given(records=_records(ENTRY), section=st.just("journal"))
def test_journal_jsonl_keeps_no_row_without_a_not_null_value(
    records: list[tuple[dict[str, object], str]], section: str, tmp_path: Path
) -> None:
    rows = [r for r, _ in records]
    (tmp_path / "journal.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _check(section, tmp_path / "journal.jsonl", rows)


@SETTINGS
@given(records=_records(RUN) | _records(ENTRY))
def test_csv_exports_keep_no_row_without_a_not_null_value(
    records: list[tuple[dict[str, object], str]], tmp_path: Path
) -> None:
    section = "ledger" if "run_id" in records[0][0] or "app_name" in records[0][0] else "journal"
    base = RUN if section == "ledger" else ENTRY
    rows = [{c: r.get(c, "") for c in base} for r, _ in records]  # CSV: absent reads as empty
    frame = pd.DataFrame(rows).map(lambda v: json.dumps(v) if isinstance(v, dict) else v)
    frame.to_csv(tmp_path / "export.csv", index=False)
    _check(section, tmp_path / "export.csv", rows)


KEYS = ("inv", "app", "user", "session", "agent", "tool", "call", "outcome", "ms", "llmCalls")
COLUMN = {
    **{"inv": "invocation_id", "app": "app_name", "user": "user_id", "session": "session_id"},
    **{"agent": "agent", "tool": "tool", "call": "call_id", "outcome": "outcome"},
    **{"ms": "ms", "llmCalls": "llm_calls"},
}
TOKEN = st.tuples(st.sampled_from(KEYS), st.booleans())
"""A plugin key and whether it carries its value."""


@SETTINGS
@given(
    kind=st.sampled_from(["run.start", "run.end", "tool.error", "model.error", "other.word"]),
    tokens=st.lists(TOKEN, min_size=1, max_size=6, unique_by=lambda t: t[0]),
)
def test_a_key_without_its_value_is_never_silent(
    kind: str, tokens: list[tuple[str, bool]], tmp_path: Path
) -> None:
    words = [f"{key}=7" if valued else key for key, valued in tokens]
    line = f"2026-11-29T03:10:00.000Z INFO  c.e.agent.DiagnosticsPlugin - {kind} {' '.join(words)}"
    (tmp_path / "plugin.log").write_text(line + "\n")
    loaded = diagnostics.load(
        SourceSpec("diagnostics", paths=(tmp_path / "plugin.log",)), Filters()
    )
    assert len(loaded.frames["diagnostics"]) + len(loaded.rejects) == 1
    warned = {reason.split(" ", 1)[0] for reason in loaded.warnings["reason"]}
    if loaded.rejects.empty and kind != "other.word":
        bare = {key for key, valued in tokens if not valued}
        assert warned == bare
        row = loaded.frames["diagnostics"].iloc[0]
        assert all(pd.isna(row[COLUMN[key]]) for key in bare)
    else:  # a rejected line says why; another logger's line holds prose, not keys
        assert not warned
