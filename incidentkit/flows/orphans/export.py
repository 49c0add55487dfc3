"""Action exports: the runs to act on after a crash, for whoever runs the recovery.

``incidentkit actions OUT --kind REDRIVE`` reads the orphans flow's ``findings.json`` in OUT (a
flow folder, or a ``run all`` folder holding ``orphans/findings.json``) and lists the runs whose
``action_kind`` is the kind asked for, one row per run, ordered by run id. A run's kind is the
one its run row gives (a class, in-flight or waiting item); a row of another item that names
the run (a call, a crash loop, a lease) never lists it under another kind:

    app_name, run_id, session_id, invocation_id, action_kind, orphan_class, journal_verdict,
    unanswered_calls, owner, attempts, lease_until, action, reason, proof

``proof`` names the findings row (``orphans/findings.json → orphans/tool-unanswered, row 2``);
a PARK row adds ``dead_letter``, the record to copy to the dead-letter queue. CSV has a header
and writes a list as its items joined by ``;`` and an object as JSON; a cell that begins with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (:data:`FORMULA_START`)
so that a spreadsheet shows it as text instead of running it as a formula. JSON is a list of
objects with the values as they are.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from incidentkit.errors import ParameterError
from incidentkit.postmortem import FlowFindings, collect_findings

KINDS = (
    "ASK_DOWNSTREAM",
    "INVESTIGATE",
    "MARK_DONE",
    "MARK_PAUSED",
    "NONE",
    "PARK",
    "REDRIVE",
    "REPLAY",
    "WAIT",
)
"""The action kinds an export lists: every ``action_kind`` a run row shows (``docs/orphans.md``,
Actions)."""
_RUN_FIELDS = ("orphan_class", "unanswered_calls")
"""What a run row (an item's row about one run as a whole) carries beside run_id and
action_kind; a call's, crash loop's or lease's row does not carry both."""
FORMATS = ("csv", "json")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""How a CSV cell a spreadsheet would read as a formula begins (OWASP, CSV injection)."""
COLUMNS = (
    "app_name",
    "run_id",
    "session_id",
    "invocation_id",
    "action_kind",
    "orphan_class",
    "journal_verdict",
    "unanswered_calls",
    "owner",
    "attempts",
    "lease_until",
    "action",
    "reason",
    "proof",
)


def _orphans(out: Path) -> FlowFindings:
    """The one orphans findings document in ``out``, or an error saying what is there."""
    sources = collect_findings(out)
    found = [ff for ff in sources if ff.flow == "orphans"]
    if not found:
        raise ParameterError(
            "no orphans findings in OUT",
            value=", ".join(f"{ff.rel} ({ff.flow})" for ff in sources),
            fix="run the orphans flow first (incidentkit run orphans --evidence PATH --out OUT "
            "-p app_name APP) and give its OUT",
        )
    if len(found) > 1:
        raise ParameterError(
            "several orphans findings in OUT",
            value=[ff.rel for ff in found],
            fix="give the folder of one of them",
        )
    orphans = found[0]
    if orphans.failed is not None:
        raise ParameterError(
            f"the orphans run in {orphans.rel} stopped before its verdict",
            value=orphans.failed.detail,
            fix="fix what the message says and run the flow again; there is nothing to export",
        )
    return orphans


def action_rows(orphans: FlowFindings, kind: str) -> list[dict[str, Any]]:
    """The runs of ``orphans`` whose ``action_kind`` is ``kind``, by run id: each from its run
    row, else the first row that names it."""
    app = orphans.findings.evidence.parameters.get("app_name")
    chosen: dict[str, tuple[bool, dict[str, Any], str]] = {}  # run id -> (run row?, row, proof)
    dead_letters = {
        str(row.get("run_id")): row.get("dead_letter")
        for row in orphans.rows("orphans/crash-loops")
    }
    for item in orphans.findings.items:
        run_rows = [row for row in item.rows if "action_kind" in row and "run_id" in row]
        if run_rows and (item.count or 0) > len(item.rows):
            raise ParameterError(
                f"{orphans.rel} keeps only {len(item.rows)} of the {item.count} rows of {item.id}",
                value=item.id,
                fix="an export would miss runs: export from the flow's report in the notebook "
                "(orphans.action_table) instead",
            )
        for n, row in enumerate(item.rows, 1):
            if row.get("run_id") is None or "action_kind" not in row:
                continue
            run_id, whole = str(row["run_id"]), all(f in row for f in _RUN_FIELDS)
            if run_id not in chosen or (whole and not chosen[run_id][0]):
                chosen[run_id] = (whole, row, f"{orphans.rel} → {item.id}, row {n}")
    records = []
    for run_id in sorted(chosen):
        _, row, proof = chosen[run_id]
        if row.get("action_kind") != kind:
            continue
        record = {c: row.get(c) for c in COLUMNS}
        record["app_name"] = app
        record["proof"] = proof
        if kind == "PARK":
            record["dead_letter"] = dead_letters.get(run_id)
        records.append(record)
    return records


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(_text(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def cell(value: Any) -> str:
    """A CSV cell: a list as its items joined by ``;``, an object as JSON, None empty; text a
    spreadsheet would run as a formula (:data:`FORMULA_START`) with a leading ``'``."""
    text = _text(value)
    return f"'{text}" if text.startswith(FORMULA_START) else text


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(row.get(c)) for c in columns] for row in rows)
    return buffer.getvalue()


def actions_command(out: Path, *, kind: str, fmt: str) -> str:
    """The runs of the orphans findings in ``out`` to act on with ``kind``, as csv or json."""
    wanted = kind.strip().upper().replace("-", "_")
    if wanted not in KINDS:
        raise ParameterError(
            "unknown action kind", value=kind, fix=f"use one of {', '.join(KINDS)}"
        )
    if fmt not in FORMATS:
        raise ParameterError(
            "unknown actions format", value=fmt, fix=f"use one of {', '.join(FORMATS)}"
        )
    rows = action_rows(_orphans(Path(out)), wanted)
    if fmt == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    return to_csv(rows, [*COLUMNS, "dead_letter"] if wanted == "PARK" else COLUMNS)
