"""Loaded once per incident: what a file source gave, kept in the user's cache folder.

The first load of a file source writes its frames, rejects and warnings as snapshot parts
(Parquet, payloads as JSON text: :mod:`incidentkit.sources.parquet`) into a folder of the
user's cache (``platformdirs``; private, 0700); every later load with the same key reads that
folder instead of parsing again: each flow's kernel under ``run all``, a notebook re-run,
``inspect``. The key is everything that decides what the loader returns: the kit's own code
(a hash of the modules that read evidence), the section as the manifest gives it, the filters,
and each file's resolved path, size and modification time. A changed file is a new key.

A database source is kept for one run only (:data:`RUN_ENV`): ``run all`` reads it once for
all its flows, and the entries are deleted when the run ends, so a live incident's rows are
never read stale by a later run. A file source is cached only when every file it reads is a
regular file the kit can stat, and only when its parse took :data:`MIN_PARSE_SECONDS` or more,
except in a flow's kernel and in ``run all``, where every parse is kept (others read it).
Entries are written beside their final name and renamed into place, so two runs at once never
see half an entry (the second writer's copy is dropped); reading one that vanished or is
damaged is a miss. Entries are evicted least recently used first once the cache passes
:data:`CAP_BYTES`. No entry holds a secret: loaders keep no credential in a frame, and the key
is a hash.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import platformdirs
import pyarrow.parquet as pq

from incidentkit.errors import IncidentkitError
from incidentkit.manifest import PARQUET, Filters, SourceSpec
from incidentkit.sources.evidence_files import expand_paths
from incidentkit.sources.loaded import Loaded

MIN_PARSE_SECONDS: Final = 0.5
"""A parse quicker than this is not kept: writing and reading it back would cost as much."""
CAP_BYTES: Final = 4 << 30
"""The cache's size past which the least recently used entries go."""
DISABLE_ENV: Final = "INCIDENTKIT_NO_CACHE"
"""Set (to anything but empty) to read every source afresh: ``--no-cache`` sets it for the
kernels it starts."""
LOG: Final = "loads.log"
"""One line per load through the cache (``parse`` or ``read``, the section, the entry):
what ``incidentkit cache info`` counts, and how a test proves a source was parsed once."""
KEEP_ENV: Final = "INCIDENTKIT_CACHE_KEEP"
"""Set for the flows' kernels: every parse there is kept, however quick (the next flow, the
next run or a re-run of the notebook reads it)."""
RUN_ENV: Final = "INCIDENTKIT_CACHE_RUN"
"""The run a flow's kernel belongs to (``run all`` sets it): database sources read under it are
kept as entries named after the run, which :func:`end_run` deletes."""
_LOG_CAP = 1 << 20
_EXTRA = ("rejects", "warnings")
_DONE = "done"
_CODE_PARTS = ("errors.py", "frames.py", "times.py", "manifest.py", "redact.py", "sources")


def root() -> Path:
    """The cache's folder: ``<user cache>/incidentkit/sources`` (``XDG_CACHE_HOME`` moves it)."""
    return platformdirs.user_cache_path("incidentkit") / "sources"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether loads use the cache (``INCIDENTKIT_NO_CACHE`` unset or empty)."""
    return not (os.environ if environ is None else environ).get(DISABLE_ENV)


def keep_all() -> bool:
    """Whether this process keeps every parse (:data:`KEEP_ENV`), not only slow ones."""
    return bool(os.environ.get(KEEP_ENV))


@functools.cache
def code_hash() -> str:
    """A hash of the modules whose change can change a frame: a cache entry of older code is
    never read by newer code."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for part in _CODE_PARTS:
        path = package / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(file.relative_to(package).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def key(
    spec: SourceSpec,
    filters: Filters,
    *,
    also: tuple[SourceSpec, ...] = (),
    run: str | None = None,
) -> str | None:
    """The cache key of ``spec`` read with ``filters`` (``also``: other sources the load
    reads, as ``[events]`` reads the ledger); None when it is not cached: a snapshot section,
    a file that cannot be stat'ed, a database outside a run. ``run`` (a run's token): a load
    that reads a database is kept for that run only, under a key that starts with it."""
    described: list[dict[str, object]] = []
    live = False
    for one in (spec, *also):
        if one.is_database:
            if run is None:
                return None
            live = True
            where = str(one.sqlite_path) if one.sqlite_path is not None else one.url_ref
            described.append({"spec": _spec_text(one), "database": where})
            continue
        files = _files(one)
        if files is None:
            return None
        described.append({"spec": _spec_text(one), "files": files})
    text = json.dumps(
        {"code": code_hash(), "sources": described, "filters": _filters_text(filters)},
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{_run_prefix(run)}{digest}" if live and run is not None else digest


def run_token() -> str | None:
    """The run this process belongs to (:data:`RUN_ENV`), or None."""
    return os.environ.get(RUN_ENV) or None


def new_run() -> str:
    """A fresh run token, for :data:`RUN_ENV`."""
    return uuid.uuid4().hex


def end_run(run: str) -> int:
    """Delete the entries kept for ``run`` (its database sources); how many there were."""
    gone = 0
    for folder, _, _ in list(_entries()):
        if folder.name.startswith(_run_prefix(run)):
            shutil.rmtree(folder, ignore_errors=True)
            gone += 1
    return gone


def _run_prefix(run: str) -> str:
    return f"run-{run}-"


def read(entry: str, frames: tuple[str, ...]) -> Loaded | None:
    """The entry's frames, rejects and warnings, or None (absent, half gone, unreadable)."""
    from incidentkit.sources.parquet import read_frame

    folder = root() / entry
    if not (folder / _DONE).is_file():
        return None
    try:
        parts = {name: read_frame(folder, name) for name in (*frames, *_EXTRA)}
        os.utime(folder / _DONE)  # least recently used: the oldest mark goes first
    except Exception:  # noqa: BLE001 - a damaged or evicted entry is read afresh, never trusted
        return None
    return Loaded(
        frames={name: parts[name] for name in frames},
        rejects=parts["rejects"],
        warnings=parts["warnings"],
    )


def write(entry: str, loaded: Loaded) -> None:
    """Keep ``loaded`` as entry ``entry``; a cache that cannot be written is left alone (the
    load stands), and the oldest entries go once the cache passes :data:`CAP_BYTES`."""
    from incidentkit.sources.parquet import frame_table

    base = root()
    final = base / entry
    if final.exists():
        return
    temp = base / f".{entry}.{uuid.uuid4().hex}"
    try:
        _private(base)
        temp.mkdir(mode=0o700)
        tables = {**loaded.frames, "rejects": loaded.rejects, "warnings": loaded.warnings}
        for name, frame in tables.items():
            pq.write_table(frame_table(name, frame), temp / f"{name}.parquet", compression="lz4")
        (temp / _DONE).touch()
        temp.rename(final)
    except OSError:
        return  # a full or read-only cache, or another run's entry that won the rename
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    evict(CAP_BYTES)


def evict(cap: int) -> list[str]:
    """Delete the least recently used entries until the cache holds at most ``cap`` bytes;
    the entries deleted."""
    entries = sorted(_entries(), key=lambda item: item[1])
    total = sum(size for _, _, size in entries)
    gone = []
    for folder, _, size in entries:
        if total <= cap:
            break
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        gone.append(folder.name)
    return gone


def note(how: str, section: str, entry: str) -> None:
    """Add a line to :data:`LOG` (one ``write``: lines of two runs at once never mix); the log
    starts again past 1 MiB."""
    path = root() / LOG
    with contextlib.suppress(OSError):
        _private(root())
        if path.is_file() and path.stat().st_size > _LOG_CAP:
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{how} {section} {entry}\n".encode())
        finally:
            os.close(fd)


def loads() -> list[tuple[str, str, str]]:
    """The lines of :data:`LOG`: (``parse`` or ``read``, section, entry), oldest first."""
    try:
        text = (root() / LOG).read_text(encoding="utf-8")
    except OSError:
        return []
    return [(a, b, c) for a, b, c in (line.split(" ", 2) for line in text.splitlines())]


def usage() -> tuple[int, int]:
    """How many entries the cache holds, and their bytes."""
    entries = list(_entries())
    return len(entries), sum(size for _, _, size in entries)


def clear() -> tuple[int, int]:
    """Delete every entry; how many, and their bytes."""
    entries = list(_entries())
    for folder, _, _ in entries:
        shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        (root() / LOG).unlink()
    return len(entries), sum(size for _, _, size in entries)


def _entries() -> Iterator[tuple[Path, float, int]]:
    """Each finished entry: its folder, when it was last read, its bytes."""
    base = root()
    if not base.is_dir():
        return
    for folder in base.iterdir():
        if not folder.is_dir() or folder.name.startswith("."):
            continue  # the log, or another run's entry being written
        with contextlib.suppress(OSError):
            used = (folder / _DONE).stat().st_mtime
            size = sum(part.stat().st_size for part in folder.iterdir())
            yield folder, used, size


def _private(base: Path) -> None:
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    if base.stat().st_mode & 0o077:
        base.chmod(0o700)


def _files(spec: SourceSpec) -> list[tuple[str, int, int]] | None:
    if spec.is_database or spec.format == PARQUET or not spec.paths:
        return None
    try:
        stats = [
            (str(path.resolve()), path.stat())
            for path in expand_paths(spec.paths, what=spec.section)
        ]
    except (OSError, IncidentkitError):
        return None  # read (and refused) afresh by the loader, with its own words
    if not all(stat.S_ISREG(found.st_mode) for _, found in stats):
        return None  # a folder, a FIFO or a device: its bytes may not be there twice
    return [(name, found.st_size, found.st_mtime_ns) for name, found in stats]


def _spec_text(spec: SourceSpec) -> dict[str, object]:
    return {
        "section": spec.section,
        "format": spec.format,
        "table": spec.table,
        "columns": dict(spec.columns),
        "naive": spec.naive_timestamps,
        "identity": dict(spec.identity),
        "event_column": spec.event_column,
        "engines": dict(spec.engines),
    }


def _filters_text(filters: Filters) -> dict[str, object]:
    window = filters.window
    return {
        "window": None if window is None else [window.start.value, window.end.value],
        "app": filters.app_name,
        "sessions": list(filters.session_ids),
        "invocations": list(filters.invocation_ids),
    }
