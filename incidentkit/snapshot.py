"""``incidentkit snapshot``: freeze an incident's evidence into Parquet, to re-run it later.

A snapshot is a folder that is itself evidence: ``evidence.toml`` (format ``parquet`` in every
section) beside one folder per section of Parquet frames, their rejects and warnings
(:mod:`incidentkit.sources.parquet`), ``snapshot.json`` (every part's rows and sha256, checked
when the snapshot is read), ``coverage.json`` (what the incident's window covered, as
``incidentkit inspect --json`` reports it) and ``source-evidence.toml`` (the content of the
manifest it was taken of: its keys and values, without its comments). A postmortem then
re-runs every flow on exactly what the incident saw, after production retention has dropped
the rows.

Each source is read whole, not cut to the window: flows read beyond it (a session's history,
the app's other sessions, a baseline), and a snapshot must answer them as the source did.
The snapshot's manifest keeps the source's title, window (a relative one fixed where it
ended), app, sessions, invocations and app profiles. The same evidence gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from incidentkit.coverage import Coverage, measure
from incidentkit.errors import ManifestError, ParameterError
from incidentkit.evidence import Evidence
from incidentkit.findings import generator
from incidentkit.manifest import (
    MANIFEST_NAME,
    PARQUET,
    SECTIONS,
    Filters,
    Manifest,
    load_manifest,
)
from incidentkit.sources.parquet import EXTRA, SECTION_FRAMES, SUFFIX, frame_table, write_record

SOURCE_MANIFEST = "source-evidence.toml"
COVERAGE = "coverage.json"


@dataclass(frozen=True)
class Snapshot:
    """What :func:`take` wrote: the folder, rows per frame, and the window's coverage."""

    folder: Path
    rows: Mapping[str, int]
    bytes: int
    coverage: Coverage


def take(
    evidence: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    as_of: pd.Timestamp | None = None,
) -> Snapshot:
    """Read every source of ``evidence`` whole and write its snapshot into ``out`` (a new or
    empty folder); a relative manifest window is fixed where it ends at ``as_of`` (else now).
    Written beside ``out`` first and moved into place when complete, so a failed read leaves
    no half snapshot."""
    manifest = load_manifest(evidence, as_of=as_of)
    target = Path(out).resolve()
    _check_target(target)
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        whole = Evidence(manifest, filters=Filters(), environ=environ)
        rows: dict[str, int] = {}
        for section in (name for name in SECTIONS if name in manifest.sources):
            rows.update(_write_section(whole, section, partial / section))
        write_record(partial, rows)
        (partial / MANIFEST_NAME).write_text(manifest_text(manifest, title=whole.title))
        if manifest.path is not None:
            (partial / SOURCE_MANIFEST).write_text(source_manifest_text(manifest.path))
        coverage = _coverage(partial, manifest, environ)
        (partial / COVERAGE).write_text(
            json.dumps(coverage.to_dict(), indent=2, sort_keys=True) + "\n"
        )
        if target.exists():
            target.rmdir()  # checked empty above
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    return Snapshot(folder=target, rows=rows, bytes=size, coverage=coverage)


def _check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ParameterError(
            "the snapshot folder exists and is not empty",
            value=str(target),
            fix="give a new folder for --out (a snapshot is never written over other files)",
        )


def _write_section(whole: Evidence, section: str, folder: Path) -> dict[str, int]:
    """Write one section's frames, rejects and warnings; rows per frame."""
    loaded = whole.source(section)
    assert loaded is not None  # the manifest names it
    folder.mkdir()
    rows = {}
    tables = {name: loaded.frames[name] for name in SECTION_FRAMES[section]}
    tables.update(zip(EXTRA, (loaded.rejects, loaded.warnings), strict=True))
    for name, frame in tables.items():
        pq.write_table(frame_table(name, frame), folder / f"{name}{SUFFIX}", compression="zstd")
        rows[f"{section}/{name}"] = len(frame)
    return rows


def _coverage(folder: Path, manifest: Manifest, environ: Mapping[str, str] | None) -> Coverage:
    """The coverage of the incident's window, read from the snapshot; the index advice is the
    source databases' (a snapshot has no index to name)."""
    from incidentkit.baselines.indexes import advice

    frozen = load_manifest(folder)
    report = measure(Evidence(frozen, filters=frozen.filters))
    found = (advice(spec, environ) for spec in manifest.sources.values())
    return replace(
        report,
        manifest=str(manifest.path) if manifest.path else None,
        indexes=tuple(item for item in found if item is not None),
    )


# -- the snapshot's evidence.toml ----------------------------------------------------------------


def manifest_text(manifest: Manifest, *, title: str) -> str:
    """The snapshot's manifest: the source's title, filters and app profiles; every section
    read from its Parquet folder."""
    lines = [
        f"# A snapshot taken by {generator()}: every frame the sources of {SOURCE_MANIFEST}",
        "# gave, in Parquet. Open this folder as the evidence (incidentkit run, inspect, new).",
        f"title = {_value(title)}",
    ]
    filters = manifest.filters
    if filters.window is not None:
        start, end = (t.isoformat() for t in (filters.window.start, filters.window.end))
        lines.append(f"window = {{ start = {_value(start)}, end = {_value(end)} }}")
    if filters.app_name is not None:
        lines.append(f"app_name = {_value(filters.app_name)}")
    if filters.session_ids:
        lines.append(f"sessions = {_value(list(filters.session_ids))}")
    if filters.invocation_ids:
        lines.append(f"invocations = {_value(list(filters.invocation_ids))}")
    for app, profile in manifest.apps.items():
        lines += ["", f"[apps.{_key(app)}]"]
        lines += [f"{_key(key)} = {_value(value)}" for key, value in profile.items()]
    for section in (name for name in SECTIONS if name in manifest.sources):
        lines += ["", f"[{section}]", f'format = "{PARQUET}"', f'path = "{section}"']
    return "\n".join(lines) + "\n"


def source_manifest_text(path: Path) -> str:
    """The content of the manifest at ``path`` as TOML: its keys and values in their order,
    never its comments (a commented-out URL may hold a password)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:  # changed since read
        raise ManifestError(
            "the manifest changed while the snapshot was taken",
            value=f"{path}: {err}",
            fix="leave it unchanged while the snapshot is taken, then take it again",
        ) from err
    head = [
        f"# The content of the manifest this snapshot was taken of ({path.name}): its keys and",
        "# values, without its comments. Relative paths name files beside that manifest.",
    ]
    return "\n".join([*head, *_table_lines(data, ())]) + "\n"


def _table_lines(table: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    """A TOML table: its values, then each table inside it under its own header (in a
    section, a table of values only is written inline, as ``columns = { ... }``)."""
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping) and _headed(v, path)}
    lines = [f"{_key(k)} = {_value(v)}" for k, v in table.items() if k not in tables]
    for key, inner in tables.items():
        inside = (*path, key)
        body = _table_lines(inner, inside)
        if not body or body[0]:  # a table of tables only needs no header of its own
            body = ["", f"[{'.'.join(map(_key, inside))}]", *body]
        lines += body
    return lines


def _headed(table: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    return not path or any(isinstance(value, Mapping) for value in table.values())


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _value(key)


def _value(value: Any) -> str:
    """A TOML value of the kinds a manifest holds: text, booleans, numbers, times, lists,
    tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # TOML spells inf and nan as Python does
    if isinstance(value, dt.date | dt.time):  # TOML's times are ISO 8601, as isoformat gives
        return value.isoformat()
    if isinstance(value, str):  # JSON's escapes are TOML's; DEL must be escaped in TOML only
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items())
        return f"{{ {inner} }}" if inner else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")  # the manifest parser allows none
