"""``incidentkit demo``: every flow on every bundled incident, one ``run all`` per pack, and
one page that links them.

Each pack's parameters come from its own ``truth.json`` (the app it is about, the session of
the vanished-state incident), as a user would read them off the incident ticket.
"""

from __future__ import annotations

import html
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from incidentkit.errors import ParameterError
from incidentkit.flows import FLOWS

DEMO_LIST = "demo.toml"
"""The file in the fixtures folder that lists the packs the demo runs, in the order the page
lists them, and the app of a pack whose ``truth.json`` names none."""


@dataclass(frozen=True)
class DemoPacks:
    """The packs the demo runs, in order, and the app of each pack whose truth names none."""

    names: tuple[str, ...]
    apps: Mapping[str, str]


def demo_packs(fixtures: str | os.PathLike[str]) -> DemoPacks:
    """The packs ``fixtures/demo.toml`` lists; a missing or misshapen list is a ParameterError
    naming the file."""
    path = Path(fixtures) / DEMO_LIST
    try:
        listed = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ParameterError(
            "the list of bundled incidents cannot be read",
            value=f"{path} ({err})",
            fix="run it from a checkout of incidentkit (it reads fixtures/), or give "
            "--fixtures PATH",
        ) from err
    names, apps = listed.get("packs"), listed.get("apps", {})
    if (
        not isinstance(names, list)
        or not names
        or not all(isinstance(name, str) and name for name in names)
        or not isinstance(apps, dict)
        or not all(isinstance(app, str) for app in apps.values())
    ):
        raise ParameterError(
            "the list of bundled incidents is not a list of pack names with their apps",
            value=str(path),
            fix='write packs = ["crash_recovery", ...] and an [apps] table of pack = "app"',
        )
    return DemoPacks(tuple(names), dict(apps))


@dataclass(frozen=True)
class DemoRun:
    """One pack's ``run all``: where it went and its exit code."""

    pack: str
    folder: Path
    exit_code: int
    parameters: Mapping[str, str]


def pack_parameters(pack: Path, default_app: str | None = None) -> dict[str, str]:
    """The ``-p`` values a pack's incident names: its app (else ``default_app``) and, for a
    one-session incident, the session and its keys (read from the pack's ``truth.json``)."""
    truth = json.loads((pack / "truth.json").read_text(encoding="utf-8"))
    expected: Mapping[str, Any] = truth.get("expected") or {}
    found: dict[str, str] = {}
    if isinstance(expected.get("app_name"), str):
        found["app_name"] = expected["app_name"]
    elif default_app:
        found["app_name"] = default_app
    if isinstance(expected.get("session_id"), str):
        found["session_id"] = expected["session_id"]
        keys = [k["key"] for k in expected.get("keys", []) if isinstance(k, Mapping)]
        if keys:
            found["keys"] = json.dumps(keys)
    return found


def run_demo(
    fixtures: str | os.PathLike[str], out: str | os.PathLike[str], *, jobs: int | None = None
) -> tuple[Path, list[DemoRun]]:
    """Run every flow on every pack ``fixtures/demo.toml`` lists into
    ``out/<pack>/``; write ``out/index.html``. Returns the page and each pack's run."""
    from incidentkit.batch import run_all

    root, base = Path(out), Path(fixtures)
    packs = demo_packs(base)
    missing = [pack for pack in packs.names if not (base / pack / "evidence.toml").is_file()]
    if missing:
        raise ParameterError(
            "the bundled incidents are not where the demo looks",
            value=f"{base} (missing: {', '.join(missing)})",
            fix="run it from a checkout of incidentkit (it reads fixtures/), or give "
            "--fixtures PATH",
        )
    runs = []
    for pack in packs.names:
        parameters = pack_parameters(base / pack, packs.apps.get(pack))
        result = run_all(base / pack, root / pack, parameters=parameters, jobs=jobs)
        runs.append(DemoRun(pack, result.out, result.exit_code, parameters))
    return write_demo_index(root, runs), runs


def _told(folder: Path) -> tuple[str, str]:
    """An incident's title and what its triage card says first (from its summary.json): the
    top finding of the flow that navigates the others (the registry says which)."""
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "", ""
    flows = summary.get("flows") or {}
    cards = [name for name, flow in FLOWS.items() if flow.postmortem and flow.postmortem.navigates]
    tops = [(flows.get(name) or {}).get("top_finding") or {} for name in cards]
    top = next((found for found in tops if found), {})
    return str(summary.get("title") or ""), str(top.get("title") or "")


def write_demo_index(root: Path, runs: list[DemoRun]) -> Path:
    """One page linking each pack's ``index.html`` with its worst verdict."""
    words = {0: "CLEAN", 1: "ACTION_NEEDED", 2: "INCOMPLETE_EVIDENCE"}
    rows = "\n".join(
        f'<tr><td><a href="{html.escape(run.pack)}/index.html">{html.escape(run.pack)}</a></td>'
        f"<td>{html.escape(title)}</td><td>{html.escape(card)}</td>"
        f"<td>{words.get(run.exit_code, f'exit {run.exit_code}')}</td>"
        f"<td>{html.escape(', '.join(f'{k}={v}' for k, v in run.parameters.items()))}</td></tr>"
        for run in runs
        for title, card in [_told(run.folder)]
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>incidentkit demo</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}
td,th{{padding:.3em .8em;text-align:left;border-bottom:1px solid #ddd}}</style></head>
<body><h1>incidentkit demo: every flow on every bundled incident</h1>
<p>Each incident links to its own page: every flow's verdict, top finding and report.</p>
<table><tr><th>incident</th><th>what it is</th><th>the triage card says</th>
<th>worst verdict</th><th>parameters</th></tr>
{rows}
</table></body></html>
"""
    path = root / "index.html"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
