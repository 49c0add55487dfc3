"""``simulate()``: run one scenario and write its pack (evidence, manifest, truth)."""

from __future__ import annotations

import heapq
import json
import os
import random
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.engine import make_url

from incidentkit.errors import SimulationError
from incidentkit.simulate import exports, truth
from incidentkit.simulate.model import Bundle, iso
from incidentkit.simulate.pack import SPILL, SQLITE_EVENTS, Pack
from incidentkit.simulate.plan import Spec
from incidentkit.simulate.scenarios import SCENARIOS
from incidentkit.simulate.shards import Job, run_all, shard_count, split
from incidentkit.simulate.threads import Dump, render
from incidentkit.simulate.traffic import APP_KEY_TEMPLATES, APP_SETTINGS, TERMINAL_AGENTS, stream
from incidentkit.simulate.world import World

EVENTS_FORMATS = ("adk-java", "adk-python", *exports.FORMATS)
URL_ENV = "INCIDENT_DB_URL"
PACK_FILES = (
    "evidence.toml",
    "truth.json",
    "ledger.csv",
    "events.jsonl",
    "journal.jsonl",
    "spans.otlp.jsonl",
    "diagnostics.log",
    SQLITE_EVENTS,
    SPILL,
    "firestore.jsonl",
)


def _start(bundle: Bundle) -> int:
    return bundle.start


def simulate(
    scenario: str,
    out: str | os.PathLike[str],
    *,
    seed: int = 0,
    scale: int = 1,
    events_format: str = "adk-java",
    into: str | None = None,
) -> Path:
    """Write one scenario's evidence pack to ``out`` and return the folder.

    Same arguments, same bytes. ``into`` (a SQLAlchemy URL) puts the ledger, events and journal
    into that database instead of files; the manifest then names them ``env:INCIDENT_DB_URL``.
    """
    spec = SCENARIOS.get(scenario)
    if spec is None:
        raise SimulationError(
            "unknown scenario", value=scenario, fix=f"use one of {', '.join(SCENARIOS)}"
        )
    if events_format not in EVENTS_FORMATS:
        raise SimulationError(
            "unknown events format", value=events_format, fix=f"use {' or '.join(EVENTS_FORMATS)}"
        )
    if into is not None and events_format in exports.FORMATS:
        raise SimulationError(
            "an API export is written to files, not into a database",
            value=events_format,
            fix="drop --into, or use --events-format adk-java or adk-python",
        )
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise SimulationError(
            "scale must be a whole number of at least 1",
            value=scale,
            fix="give --scale 1 for a fixture-sized pack, larger for benchmarks",
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SimulationError(
            "seed must be a whole number", value=seed, fix="give --seed 0 (any integer)"
        )
    return write_pack(
        spec, Path(out), seed=seed, scale=scale, events_format=events_format, into=into
    )


def write_pack(
    spec: Spec, out: Path, *, seed: int, scale: int, events_format: str, into: str | None
) -> Path:
    """Run ``spec`` and write its pack to ``out`` (arguments already checked)."""
    existed = out.exists()
    folder = _prepare(out)
    written = "adk-java" if events_format in exports.FORMATS else events_format
    """The store the pack writes first; an API export is rewritten from its Java events."""
    world = World(random.Random(seed))
    plan = spec.build(world, scale)
    core = sorted(plan.core, key=_start)
    count = shard_count(scale) if plan.background is not None else 1
    try:
        pack = Pack(
            folder,
            events_format=written,
            window=spec.window,
            into=into,
            split_log=count > 1,
            zone=spec.zone,
        )
    except SimulationError:
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if plan.background is None or count == 1:
        background = iter(()) if plan.background is None else stream(world, plan.background)
        for bundle in heapq.merge(core, background, key=_start):
            pack.emit(bundle)
        counts = pack.close()
    else:
        for bundle in core:
            pack.emit(bundle)
        jobs = [
            Job(
                folder,
                spec.name,
                seed,
                k,
                part,
                written,
                spec.window,
                into is not None,
                spec.zone,
            )
            for k, part in enumerate(split(plan.background, count))
        ]
        done = run_all(jobs)
        for result in done:
            pack.absorb(result.part)
            world.stats += result.stats
            world.billing.sent.update(result.billing.sent)
            world.billing.notified.update(result.billing.notified)
        counts = pack.close(shard_logs=[result.part.part for result in done])
    world.open_rows = pack.open_rows
    for dump in plan.dumps:
        target = folder / dump.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(dump, world.rng, zone=spec.zone), encoding="utf-8", newline="\n")
        counts.threads += dump.rows
    for name, text in plan.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="\n")
    java = written == "adk-java"
    export: tuple[list[str], list[str]] | None = None
    if events_format in exports.FORMATS:
        export = exports.write(folder, events_format)
    journal = counts.journal > 0
    if not journal:  # a tool journal nobody wrote to: no section (an empty one reads as lost)
        (folder / "journal.jsonl").unlink(missing_ok=True)
    files = _files(
        java=java,
        into=into is not None,
        journal=journal,
        dumps=[*(d.file for d in plan.dumps), *plan.files],
        events=None if export is None else export[0],
    )
    title = f"{spec.title} (simulated, seed {seed}, scale {scale})"
    doc = truth.document(
        scenario=spec.name,
        title=title,
        seed=seed,
        scale=scale,
        events_format=events_format,
        window=spec.window,
        as_of=plan.as_of,
        counts=counts,
        files=files,
        expected=plan.expected(world, events_format),
    )
    truth.write(folder / "truth.json", doc)
    (folder / "evidence.toml").write_text(
        manifest_text(
            title,
            spec.window,
            java=java,
            into=into is not None,
            naive_sql=into is not None and make_url(into).get_backend_name() != "postgresql",
            dumps=plan.dumps,
            zone=spec.zone,
            journal=journal,
            sections=plan.sections,
            event_lines=None if export is None else export[1],
            engines=export is not None and events_format == "vertex-ai",
        ),
        encoding="utf-8",
        newline="\n",
    )
    return folder


def _prepare(out: Path) -> Path:
    """Create ``out``, or clear a previous pack there; refuse a folder holding other things."""
    if out.exists() and not out.is_dir():
        raise SimulationError("the output path is a file", value=str(out), fix="give a folder")
    if out.is_dir() and any(out.iterdir()):
        marker = out / "truth.json"
        try:
            previous = truth.read(marker).get("schema") == truth.SCHEMA
        except (OSError, ValueError):
            previous = False
        if not previous:
            raise SimulationError(
                "the output folder is not empty and holds no simulated pack",
                value=str(out),
                fix="give a new or empty folder (a previous pack there is replaced)",
            )
        for name in PACK_FILES:
            (out / name).unlink(missing_ok=True)
        for evidence in ("threads", "histograms", "vertex"):
            shutil.rmtree(out / evidence, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _files(
    *, java: bool, into: bool, journal: bool, dumps: list[str], events: list[str] | None = None
) -> list[str]:
    files = ["evidence.toml", "truth.json", "spans.otlp.jsonl", "diagnostics.log", *dumps]
    if not into:
        files += ["ledger.csv", *(events or ["events.jsonl" if java else SQLITE_EVENTS])]
        files += ["journal.jsonl"] if journal else []
    return sorted(files)


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def manifest_text(
    title: str,
    window: tuple[int, int],
    *,
    java: bool,
    into: bool,
    naive_sql: bool = False,
    dumps: Sequence[Dump] = (),
    zone: str = "UTC",
    journal: bool = True,
    sections: Sequence[str] = (),
    event_lines: Sequence[str] | None = None,
    engines: bool = False,
) -> str:
    """The pack's ``evidence.toml``: relative paths; a database only as ``env:``; no
    ``[journal]`` when ``journal`` is false (no tool wrote to it).

    ``naive_sql`` says the database stores the kit's timestamps without an offset (SQLite,
    MySQL): they are UTC, which the manifest states with ``naive_timestamps = "utc"``. ``zone``
    is the JVM's: thread dump headers carry its wall clock without an offset, so ``[threads]``
    says ``timezone`` (``naive_timestamps = "utc"`` for a UTC host). ``sections`` are a
    scenario's own manifest lines (``[histograms]``), written after the others.
    ``event_lines`` replace the ``[events]`` lines (an API export); ``engines`` names each
    app's reasoning engine in its profile.
    """
    database = [f'url = "env:{URL_ENV}"'] + (['naive_timestamps = "utc"'] if naive_sql else [])
    if into:
        ledger = [*database, 'table = "agent_run"']
        journal_lines = [*database, 'table = "tool_journal"']
        events = (
            [*database, 'table = "adk_event"', 'format = "sql"']
            if java
            else [*database, 'format = "adk-python-db"']
        )
    else:
        ledger = ['path = "ledger.csv"', 'format = "csv"']
        journal_lines = ['path = "journal.jsonl"', 'format = "jsonl"']
        events = (
            ['path = "events.jsonl"', 'format = "adk-java-json"']
            if java
            else [f'path = "{SQLITE_EVENTS}"', 'format = "adk-python-db"']
        )
    if event_lines is not None:
        events = list(event_lines)
    note = f" Export {URL_ENV} (the database URL) before loading." if into else ""
    lines = [
        f"# Written by `incidentkit simulate`.{note}",
        f"title = {_q(title)}",
        f'window = {{ start = "{iso(window[0])}", end = "{iso(window[1])}" }}',
        *("", "[ledger]", *ledger, "", "[events]", *events),
        *(("", "[journal]", *journal_lines) if journal else ()),
        *("", "[spans]", 'path = "spans.otlp.jsonl"', 'format = "otlp-json"'),
        *("", "[diagnostics]", 'path = "diagnostics.log"', 'format = "text"'),
    ]
    if dumps:
        names = ", ".join(_q(d.file) for d in dumps)
        lines += ["", "[threads]", f"paths = [{names}]", 'format = "jcmd"']
        lines.append('naive_timestamps = "utc"' if zone == "UTC" else f"timezone = {_q(zone)}")
    if sections:
        lines.append("")
        for line in sections:
            lines += _with_engine(line) if engines else [line]
    return "\n".join([*lines, *profile_lines(engines=engines)]) + "\n"


def _with_engine(line: str) -> list[str]:
    """A scenario's manifest line, with its app's reasoning engine after an app header."""
    match = re.fullmatch(r"\[apps\.([\w-]+)\]", line)
    if match is None:
        return [line]
    return [line, f"reasoning_engine = {_q(exports.engine_of(match[1]))}"]


def profile_lines(*, engines: bool = False) -> list[str]:
    """An ``[apps.<app>]`` profile per simulated app: what every incident of it shares."""
    lines: list[str] = []
    for app, agents in sorted(TERMINAL_AGENTS.items()):
        terminal = _q(agents[0]) if len(agents) == 1 else f"[{', '.join(map(_q, agents))}]"
        templates = ", ".join(f"{tool} = {_q(t)}" for tool, t in APP_KEY_TEMPLATES[app].items())
        lines += ["", f"[apps.{app}]", f"terminal_agent = {terminal}"]
        if engines:
            lines.append(f"reasoning_engine = {_q(exports.engine_of(app))}")
        lines.append(f"key_templates = {{ {templates} }}" if templates else "key_templates = {}")
        for key, value in APP_SETTINGS.get(app, {}).items():
            shown = f"[{', '.join(map(_q, value))}]" if isinstance(value, list) else str(value)
            lines.append(f"{key} = {shown}")
    return lines
