"""Findings: the typed value every flow returns, its findings.json, and the orphan flow's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.findings import (
    SCHEMA,
    Finding,
    Findings,
    Provenance,
    Severity,
    Verdict,
    json_safe,
    rows_of,
)

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(minutes=10)


def sample() -> Findings:
    rows = pd.DataFrame(
        {
            "run_id": ["r1", "r2"],
            "lease_until": [T0, pd.NaT],
            "attempts": np.array([3, 1], dtype=np.int64),
            "calls": [("c1", "c2"), ()],
            "share": [0.5, float("nan")],
        }
    )
    return Findings(
        flow="orphans",
        verdict=Verdict.ACTION_NEEDED,
        summary={"orphans": 2, "crash_loops": 1},
        items=(
            Finding(
                "orphans/crash-loops",
                Severity.CRITICAL,
                "1 run over the cap",
                "d",
                "Park.",
                rows_of(rows),
            ),
            Finding("orphans/live-leases", Severity.INFO, "0 live", "d", "None."),
        ),
        evidence=Provenance(
            title="checkout outage",
            window=(T0, AS_OF),
            as_of=AS_OF,
            parameters={"attempts_cap": 3, "key_templates": {"sendInvoice": "s:{id}"}},
        ),
    )


def test_rows_are_json_safe() -> None:
    rows = sample().items[0].rows
    assert rows == (
        {
            "run_id": "r1",
            "lease_until": "2026-11-29T03:00:00Z",
            "attempts": 3,
            "calls": ["c1", "c2"],
            "share": 0.5,
        },
        {"run_id": "r2", "lease_until": None, "attempts": 1, "calls": [], "share": None},
    )


def test_json_round_trip_and_shape(tmp_path: Path) -> None:
    findings = sample()
    path = findings.write(tmp_path / "findings.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA == "incidentkit.findings/v1"
    assert data["verdict"] == "ACTION_NEEDED"
    assert data["evidence"] == {
        "title": "checkout outage",
        "window": ["2026-11-29T03:00:00Z", "2026-11-29T03:10:00Z"],
        "as_of": "2026-11-29T03:10:00Z",
        "parameters": {"attempts_cap": 3, "key_templates": {"sendInvoice": "s:{id}"}},
    }
    assert [item["count"] for item in data["items"]] == [2, 0]
    assert data["generated_by"].startswith("incidentkit ")
    assert Findings.read(path) == findings
    assert Findings.from_json(findings.to_json()) == findings


def test_needs_action_follows_the_severities() -> None:
    findings = sample()
    assert findings.needs_action
    info_only = Findings("orphans", Verdict.CLEAN, {}, (findings.items[1],))
    assert not info_only.needs_action


def test_unknown_schema_is_refused() -> None:
    text = sample().to_json().replace(SCHEMA, "incidentkit.findings/v9")
    expected = re.escape("unknown findings schema: 'incidentkit.findings/v9'")
    with pytest.raises(ParameterError, match=expected):
        Findings.from_json(text)


def test_not_json_and_missing_fields_are_refused() -> None:
    with pytest.raises(ParameterError, match="findings document is not JSON"):
        Findings.from_json("{nope")
    with pytest.raises(ParameterError, match="findings document is not a JSON object"):
        Findings.from_json("[1, 2]")
    with pytest.raises(ParameterError, match="findings document is not JSON"):
        Findings.from_json(b'{"schema": "\xff"}')  # not UTF-8
    data = json.loads(sample().to_json())
    del data["items"][0]["action"]
    with pytest.raises(
        ParameterError, match=r"field of incidentkit\.findings/v1 at \$\.items\[0\]: .*`action`"
    ):
        Findings.from_json(json.dumps(data))
    data = json.loads(sample().to_json())
    data["verdict"] = "FINE"
    with pytest.raises(ParameterError, match=r"at \$\.verdict: .*Invalid enum value 'FINE'"):
        Findings.from_json(json.dumps(data))


def _set(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("flow",), 7, "$.flow"),
        (("flow",), "../../elsewhere", "$.flow"),
        (("verdict",), None, "$.verdict"),
        (("generated_by",), ["incidentkit"], "$.generated_by"),
        (("summary",), [], "$.summary"),
        (("summary", "orphans"), "2", "$.summary['orphans']"),
        (("summary", "orphans"), 2**64, "$.summary['orphans']"),
        (("summary", "crash_loops"), True, "$.summary['crash_loops']"),
        (("evidence",), "checkout", "$.evidence"),
        (("evidence", "title"), {"t": 1}, "$.evidence.title"),
        (("evidence", "window"), ["2026-11-29T03:00:00Z"], "$.evidence.window"),
        (("evidence", "window"), ["2026-11-29T03:00:00Z", "soon"], "$.evidence.window[1]"),
        (("evidence", "as_of"), "2026-11-29T03:10:00", "$.evidence.as_of"),  # naive
        (("evidence", "as_of"), "", "$.evidence.as_of"),
        (("evidence", "parameters"), [1], "$.evidence.parameters"),
        (("items",), {"0": {}}, "$.items"),
        (("items", 0), "orphans/crash-loops", "$.items[0]"),
        (("items", 0, "id"), None, "$.items[0].id"),
        (("items", 0, "severity"), "URGENT", "$.items[0].severity"),
        (("items", 1, "title"), 5, "$.items[1].title"),
        (("items", 0, "count"), -1, "$.items[0].count"),
        (("items", 0, "count"), 1.5, "$.items[0].count"),
        (("items", 0, "rows"), {"run_id": "r1"}, "$.items[0].rows"),
        (("items", 0, "rows", 1), "r2", "$.items[0].rows[1]"),
    ],
)
def test_a_misshapen_field_is_named(path: tuple[str | int, ...], value: Any, named: str) -> None:
    data = _set(json.loads(sample().to_json()), path, value)
    with pytest.raises(ParameterError, match=f"incidentkit.findings/v1 at {re.escape(named)}: "):
        Findings.from_json(json.dumps(data))


def test_values_nested_too_deeply_are_refused_with_their_field() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    data = _set(json.loads(sample().to_json()), ("items", 0, "rows", 0, "calls"), deep)
    with pytest.raises(ParameterError, match=r"at \$\.items\[0\]\.rows: 'nested more than 64"):
        Findings.from_json(json.dumps(data))
    data = _set(json.loads(sample().to_json()), ("evidence", "parameters", "deep"), deep)
    with pytest.raises(ParameterError, match=r"at \$\.evidence\.parameters: 'nested more"):
        Findings.from_json(json.dumps(data))
    deeper = "[" * 100_000 + "]" * 100_000  # past msgspec's own limit
    text = sample().to_json().replace('"calls": [', f'"calls": {deeper}, "more": [')
    with pytest.raises(ParameterError, match="findings document nests too deeply to read"):
        Findings.from_json(text)


def test_unknown_keys_and_missing_evidence_fields_are_tolerated() -> None:
    data = json.loads(sample().to_json())
    data["comment"], data["items"][0]["note"] = "added by hand", {"x": 1}
    data["evidence"] = {"title": "checkout outage"}
    findings = Findings.from_json(json.dumps(data))
    assert findings.evidence.window is None and findings.evidence.parameters == {}
    assert findings.items == sample().items


def test_write_renames_a_whole_document_into_place(tmp_path: Path) -> None:
    """A reader sees the old document or the new one: the new one is a new file renamed over
    the old (another inode), never the old file rewritten in place; nothing else is left."""
    path = sample().write(tmp_path / "findings.json")
    before = path.stat().st_ino
    held = path.open(encoding="utf-8")  # a reader that opened the old document
    changed = Findings("orphans", Verdict.CLEAN, {"runs": 1}, ())
    changed.write(path)
    assert path.stat().st_ino != before
    assert Findings.from_json(held.read()) == sample()  # the reader still reads the whole old one
    held.close()
    assert Findings.read(path) == changed
    assert [p.name for p in tmp_path.iterdir()] == ["findings.json"]


def test_naive_times_are_refused() -> None:
    with pytest.raises(ParameterError, match="a findings time is naive"):
        Provenance(as_of=pd.Timestamp("2026-11-29T03:10:00"))


def test_secrets_never_reach_the_document() -> None:
    provenance = Provenance(
        parameters={
            "ledger_url": "postgresql+psycopg://ops:hunter2@db.internal/incidents",
            "api_token": "tok-123",
            "nested": {"password": "p4ss"},
        }
    )
    text = Findings("orphans", Verdict.CLEAN, {}, (), provenance).to_json()
    for secret in ("hunter2", "tok-123", "p4ss"):
        assert secret not in text
    assert "ops:***@db.internal" in text


def test_query_string_passwords_never_reach_the_document() -> None:
    provenance = Provenance(
        parameters={
            "ledger_url": "postgresql+psycopg://ops@db.internal/incidents?password=hunter22",
            "urls": ["mysql://ops@db/x?sslmode=on&sslpassword=k3yphrase", {"secret": "s3"}],
        }
    )
    text = Findings("orphans", Verdict.CLEAN, {}, (), provenance).to_json()
    for secret in ("hunter22", "k3yphrase", '"s3"'):
        assert secret not in text
    assert "incidents?password=***" in text


def test_rows_of_masks_passwords_in_evidence_text() -> None:
    """A rejected log line holding a DSN must not carry its password into findings.json."""
    frame = pd.DataFrame(
        {
            "location": ["app.log:3", "app.log:4"],
            "raw": [
                "connecting to postgresql://ops:hunter22@db/prod?sslpassword=k3yphrase now",
                None,
            ],
            "attempts": [2, 3],
        }
    )
    assert rows_of(frame) == (
        {
            "location": "app.log:3",
            "raw": "connecting to postgresql://ops:***@db/prod?sslpassword=*** now",
            "attempts": 2,
        },
        {"location": "app.log:4", "raw": None, "attempts": 3},
    )


def test_rows_given_directly_are_masked_too() -> None:
    finding = Finding(
        "x",
        Severity.INFO,
        "t",
        "d",
        "a",
        ({"line": "dsn=mysql://root:hunter22@db/x", "n": [1, "pg://u@h/db?password=hunter22"]},),
    )
    text = Findings("orphans", Verdict.CLEAN, {}, (finding,)).to_json()
    assert "hunter22" not in text
    assert finding.rows == (
        {"line": "dsn=mysql://root:***@db/x", "n": [1, "pg://u@h/db?password=***"]},
    )


def test_json_safe_values() -> None:
    assert json_safe(
        {
            "t": pd.Timestamp("2026-11-29T04:10:00+01:00"),
            "n": np.int64(2),
            "s": {"b", "a"},
            "d": pd.Timedelta(seconds=1.5),
            "e": Severity.INFO,
            "x": pd.NA,
        }
    ) == {"t": "2026-11-29T03:10:00Z", "n": 2, "s": ["a", "b"], "d": 1.5, "e": "INFO", "x": None}


# ---------------------------------------------------------------------------- orphan findings
