"""Fuzz over the kit's own snapshots: a mutated snapshot loads (frames, rejects, warnings) or
raises an IncidentkitError, never another exception.

A small bundled incident is snapshotted once; each case copies the snapshot, mutates its
Parquet parts (drops one, swaps two, puts another snapshot's part in, changes values, column
types or schema metadata, truncates or flips bytes, repeats rows, adds a foreign file, breaks
the record) and then reads it three ways: with its record as taken (a changed part must be
refused), with the record removed (an older snapshot: parts read as they are), and with a
record written again over the changed parts (a snapshot some other writer recorded: parts
decoded and checked). Every frame is read under the manifest's filters and under narrower
ones (one session, one app: the paths that renumber and cut), and the events' export format
is asked as flows ask it.

``test_every_mutation_kind`` sweeps each kind on each record mode from a fixed seed;
``test_mutations_in_combination`` lets Hypothesis combine them. Python warnings are recorded
beside the outcome, not escalated (the project's pytest config turns them into errors).
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import IncidentkitError
from incidentkit.evidence import FRAME_SOURCES, Evidence, open_evidence
from incidentkit.manifest import Filters
from incidentkit.snapshot import take
from incidentkit.sources import events
from incidentkit.sources.parquet import RECORD, write_record

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "fixtures" / "slow_death"  # small; ledger, events, spans, logs, histograms
OTHER = ROOT / "fixtures" / "broken" / "duplicate_ids"  # another incident's parts, rejects
PACKAGE = ROOT / "incidentkit"
MODES = ("kept", "dropped", "recorded")


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    return take(PACK, root / "snap").folder, take(OTHER, root / "other").folder


@contextmanager
def _copy(snapshot: Path) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="ik-snapfuzz-"))
    try:
        yield Path(shutil.copytree(snapshot, folder / "snap"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _parts(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.parquet"))


# -- mutations ----------------------------------------------------------------------------------

Mutation = Callable[[Path, Path, random.Random], str]
"""Change the snapshot in the first folder (the second holds another incident's snapshot);
say what was done."""


def _rewrite(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def drop_part(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    part.unlink()
    return f"dropped {part.relative_to(folder)}"


def swap_parts(folder: Path, other: Path, rng: random.Random) -> str:
    a, b = rng.sample(_parts(folder), 2)
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)
    return f"swapped {a.relative_to(folder)} and {b.relative_to(folder)}"


def foreign_part(folder: Path, other: Path, rng: random.Random) -> str:
    """Another snapshot's part under a name this one has (the same frame, or another's)."""
    theirs = rng.choice(_parts(other))
    same = folder / theirs.relative_to(other)
    ours = same if same.exists() and rng.random() < 0.5 else rng.choice(_parts(folder))
    shutil.copyfile(theirs, ours)
    return f"{theirs.relative_to(other)} of another snapshot as {ours.relative_to(folder)}"


def foreign_file(folder: Path, other: Path, rng: random.Random) -> str:
    section = rng.choice([p for p in folder.iterdir() if p.is_dir()])
    name = rng.choice(["extra.parquet", "events.parquet.bak", ".hidden", "runs"])
    target = section / name
    if target.exists():
        return "nothing (the name is taken)"
    if rng.random() < 0.5:
        shutil.copyfile(rng.choice(_parts(other)), target)
    else:
        target.write_bytes(rng.randbytes(rng.randint(0, 64)))
    return f"added {target.relative_to(folder)}"


def truncate(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    data = part.read_bytes()
    cut = rng.randint(0, len(data) - 1)
    part.write_bytes(data[:cut])
    return f"cut {part.relative_to(folder)} at byte {cut} of {len(data)}"


def flip_bytes(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    data = bytearray(part.read_bytes())
    at = [rng.randrange(len(data)) for _ in range(rng.randint(1, 8))]
    for i in at:
        data[i] ^= rng.randint(1, 255)
    part.write_bytes(bytes(data))
    return f"flipped bytes {sorted(at)} of {part.relative_to(folder)}"


_ODD_TEXT = ["", "{", "1,2", "NaN", "[1", "null", '{"a":', "\x00", "é" * 3, "x" * 5000, "[[[["]
_ODD_INT = [0, -1, 2**63 - 1, -(2**63)]
_ODD_FLOAT = [float("nan"), float("inf"), -0.0, 1e308]


def _odd_value(kind: pa.DataType, rng: random.Random) -> Any:
    if rng.random() < 0.25:
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return rng.choice(_ODD_TEXT)
    if pa.types.is_integer(kind):
        return rng.choice(_ODD_INT)
    if pa.types.is_floating(kind):
        return rng.choice(_ODD_FLOAT)
    if pa.types.is_boolean(kind):
        return rng.random() < 0.5
    if pa.types.is_timestamp(kind):
        return rng.choice([0, 2**63 - 1, -(2**63) + 1])
    return None


def _nonempty_part(folder: Path, rng: random.Random) -> Path | None:
    parts = [p for p in _parts(folder) if pq.read_metadata(p).num_rows]
    return rng.choice(parts) if parts else None


def change_values(folder: Path, other: Path, rng: random.Random) -> str:
    part = _nonempty_part(folder, rng)
    if part is None:
        return "nothing (no rows)"
    table = pq.read_table(part)
    at = rng.randrange(table.num_columns)
    column = table.column(at)
    stamps = pa.types.is_timestamp(column.type)  # changed as their integers
    values = (column.cast(pa.int64()) if stamps else column).to_pylist()
    rows = range(len(values)) if rng.random() < 0.3 else [rng.randrange(len(values))]
    for row in rows:
        values[row] = _odd_value(column.type, rng)
    array = (
        pa.array(values, pa.int64()).cast(column.type) if stamps else pa.array(values, column.type)
    )
    pq.write_table(table.set_column(at, table.field(at), array), part)
    return f"set column {table.field(at).name} of {part.relative_to(folder)} in {len(rows)} rows"


_TYPES: list[Callable[[int], pa.Array]] = [
    lambda n: pa.array([1.5] * n, pa.float64()),
    lambda n: pa.array([7] * n, pa.int64()),
    lambda n: pa.array(["7"] * n, pa.string()),
    lambda n: pa.array([True] * n, pa.bool_()),
    lambda n: pa.array([0] * n, pa.timestamp("ns")),
    lambda n: pa.array([0] * n, pa.timestamp("s", tz="+05:00")),
    lambda n: pa.array([[1, 2]] * n, pa.list_(pa.int64())),
    lambda n: pa.array([b"\xff"] * n, pa.binary()),
    lambda n: pa.nulls(n),
    lambda n: pa.array(["{}"] * n).dictionary_encode(),
    lambda n: pa.array([2**40] * n, pa.uint64()),
    lambda n: pa.array([{"a": 1}] * n),
]


def change_type(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    table = pq.read_table(part)
    at = rng.randrange(table.num_columns)
    array = rng.choice(_TYPES)(table.num_rows)
    name = table.field(at).name
    pq.write_table(table.set_column(at, name, array), part)
    return f"stored column {name} of {part.relative_to(folder)} as {array.type}"


def change_columns(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    table = pq.read_table(part)
    name = rng.choice(table.column_names)
    how = rng.choice(["drop", "repeat", "rename", "reorder"])
    if how == "drop":
        table = table.drop_columns([name])
    elif how == "repeat":
        table = table.append_column(name, table.column(name))
    elif how == "rename":
        table = table.rename_columns([c if c != name else c + "_" for c in table.column_names])
    else:
        table = table.select(list(reversed(table.column_names)))
    pq.write_table(table, part)
    return f"{how} column {name} of {part.relative_to(folder)}"


def repeat_rows(folder: Path, other: Path, rng: random.Random) -> str:
    part = _nonempty_part(folder, rng)
    if part is None:
        return "nothing (no rows)"
    _rewrite(part, lambda t: pa.concat_tables([t, t.slice(rng.randrange(t.num_rows), 2)]))
    return f"repeated rows of {part.relative_to(folder)}"


_METADATA = [
    {b"pandas": b"{not json"},
    {b"pandas": b'{"columns": 5}'},
    {b"pandas": b'{"index_columns": [{"kind": "range", "start": "x"}], "columns": []}'},
    {b"pandas": json.dumps({"columns": [{"name": "x", "numpy_type": "weird"}]}).encode()},
    {},
]


def change_metadata(folder: Path, other: Path, rng: random.Random) -> str:
    part = rng.choice(_parts(folder))
    metadata = rng.choice(_METADATA)
    _rewrite(part, lambda t: t.replace_schema_metadata(metadata))
    return f"schema metadata of {part.relative_to(folder)} set to {metadata!r}"


def break_record(folder: Path, other: Path, rng: random.Random) -> str:
    record = folder / RECORD
    text = rng.choice(
        [
            "",
            "{",
            "[]",
            '{"schema": "incidentkit.snapshot/v1", "parts": {"x": 1}}',
            '{"schema": "incidentkit.snapshot/v1", "parts": {}}',
            record.read_text().replace('"rows": ', '"rows": -'),
            record.read_text().replace("sha256", "md5"),
        ]
    )
    record.write_text(text)
    return f"record set to {text[:60]!r}"


MUTATIONS: dict[str, Mutation] = {
    fn.__name__: fn
    for fn in (
        drop_part,
        swap_parts,
        foreign_part,
        foreign_file,
        truncate,
        flip_bytes,
        change_values,
        change_type,
        change_columns,
        repeat_rows,
        change_metadata,
        break_record,
    )
}


# -- loading and classifying --------------------------------------------------------------------


def _records_again(folder: Path) -> None:
    """Record the parts as they now are (rows as each file says, when it says)."""
    rows = {}
    for part in _parts(folder):
        try:
            rows[f"{part.parent.name}/{part.stem}"] = pq.read_metadata(part).num_rows
        except (OSError, pa.ArrowException):
            rows[f"{part.parent.name}/{part.stem}"] = 0
    write_record(folder, rows)


def _read_everything(evidence: Evidence) -> None:
    for name, section in FRAME_SOURCES.items():
        if evidence.has(section):
            evidence.frame(name)
    evidence.frame("rejects")
    evidence.frame("warnings")


def _narrower(evidence: Evidence) -> list[Filters]:
    """One app and one of its sessions, from the events as read (none when there are none)."""
    found = evidence.narrowed(Filters()).frame("events")
    keyed = found.dropna(subset=["session_id", "app_name"])
    if keyed.empty:
        return []
    row = keyed.iloc[len(keyed) // 2]
    return [Filters(app_name=str(row["app_name"]), session_ids=(str(row["session_id"]),))]


@dataclass(frozen=True)
class Outcome:
    kind: str  # "ok" | "kit" | "FOREIGN"
    detail: str = ""
    python_warnings: tuple[str, ...] = ()


def load(folder: Path) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            evidence = open_evidence(folder)
            _read_everything(evidence)
            events.export_format(evidence.sources["events"])
            for filters in _narrower(evidence):
                _read_everything(evidence.narrowed(filters))
        except IncidentkitError as err:
            out = Outcome("kit", str(err).splitlines()[0][:200])
        except (Exception, RecursionError) as err:  # noqa: BLE001 - classifying is the point
            where = [
                f
                for f in traceback.extract_tb(err.__traceback__)
                if PACKAGE.as_posix() in f.filename
            ]
            at = f"{Path(where[-1].filename).name}:{where[-1].lineno}" if where else "?"
            out = Outcome("FOREIGN", f"{type(err).__name__} at {at}: {str(err)[:200]}")
        else:
            out = Outcome("ok")
    shown = tuple(f"{w.category.__name__}: {str(w.message)[:100]}" for w in caught)
    return Outcome(out.kind, out.detail, shown)


def _mutate(kind: str, folder: Path, other: Path, rng: random.Random) -> str:
    """One mutation; none when an earlier one left its part unreadable or a folder empty."""
    try:
        return MUTATIONS[kind](folder, other, rng)
    except (OSError, pa.ArrowException, ValueError, IndexError) as err:
        return f"no {kind} ({type(err).__name__})"


def mutated(
    snapshot: Path, other: Path, kinds: list[str], mode: str, seed: int, *, strict: bool = False
) -> Outcome:
    """Load a copy of ``snapshot`` after ``kinds`` of mutation, read in ``mode``. ``strict``:
    every mutation must apply (a pristine copy), else one that cannot is passed over."""
    rng = random.Random(seed)
    with _copy(snapshot) as folder:
        done = [
            MUTATIONS[kind](folder, other, rng) if strict else _mutate(kind, folder, other, rng)
            for kind in kinds
        ]
        if mode == "dropped":
            (folder / RECORD).unlink(missing_ok=True)
        elif mode == "recorded" and "break_record" not in kinds:
            _records_again(folder)
        out = load(folder)
    said = f"{mode}: {'; '.join(done)}"
    return Outcome(out.kind, f"{said} -> {out.detail}", out.python_warnings)


# -- the tests ----------------------------------------------------------------------------------


def test_the_unmutated_snapshot_loads_in_every_mode(snapshots: tuple[Path, Path]) -> None:
    snapshot, other = snapshots
    for mode in MODES:
        out = mutated(snapshot, other, [], mode, 0, strict=True)
        assert out.kind == "ok", out.detail


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_every_mutation_kind(snapshots: tuple[Path, Path], kind: str, mode: str) -> None:
    """Four seeded mutants of each kind, in each record mode. With the record kept, a mutant
    that changed a part the manifest reads is refused."""
    snapshot, other = snapshots
    outcomes = [mutated(snapshot, other, [kind], mode, seed, strict=True) for seed in range(4)]
    foreign = [out.detail for out in outcomes if out.kind == "FOREIGN"]
    assert not foreign, "foreign exceptions:\n" + "\n".join(foreign)
    if mode == "kept" and kind in ("drop_part", "truncate", "flip_bytes", "change_type"):
        assert all(out.kind == "kit" for out in outcomes), [o.detail for o in outcomes]


@pytest.mark.slow
@given(
    kinds=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**32 - 1),
)
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_mutations_in_combination(
    snapshots: tuple[Path, Path], kinds: list[str], mode: str, seed: int
) -> None:
    out = mutated(*snapshots, kinds, mode, seed)
    assert out.kind != "FOREIGN", out.detail
