"""A manifest reads only inside its own folder unless it says ``allow_outside = true``.

A received manifest must not quote local files into a shared report: a relative path that
climbs out, an absolute path, a symlink (or a pattern's match) that resolves elsewhere and a
``sqlite:///`` URL to a file elsewhere are refused, naming the resolved path and the fix; the
same manifest with ``allow_outside = true`` reads them. The bundled incidents need no such line.
"""

from __future__ import annotations

import sqlite3
import tomllib
from pathlib import Path

import pytest

from incidentkit import open_evidence
from incidentkit.errors import ManifestError, SchemaError
from incidentkit.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
LINE = '{"appName":"a","userId":"u","sessionId":"s","id":"e1","invocationId":"i-1",'
LINE += '"author":"user","timestamp":1764385800000}\n'


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """(the evidence folder, a folder beside it holding a private file and a SQLite store)."""
    evidence, elsewhere = tmp_path / "evidence", tmp_path / "elsewhere"
    evidence.mkdir()
    elsewhere.mkdir()
    (elsewhere / "private.jsonl").write_text(LINE, encoding="utf-8")
    (evidence / "events.jsonl").write_text(LINE, encoding="utf-8")
    with sqlite3.connect(elsewhere / "store.db") as db:
        db.execute("CREATE TABLE agent_run (run_id TEXT)")
    db.close()
    return evidence, elsewhere


def _manifest(folder: Path, body: str, *, allow: bool = False) -> Path:
    path = folder / "evidence.toml"
    path.write_text(("allow_outside = true\n" if allow else "") + body, encoding="utf-8")
    return path


def _ways_out(evidence: Path, elsewhere: Path) -> dict[str, tuple[str, Path]]:
    """Each way a manifest can point outside: (its [events] or [ledger] lines, the target)."""
    private = (elsewhere / "private.jsonl").resolve()
    store = (elsewhere / "store.db").resolve()
    (evidence / "link.jsonl").symlink_to(elsewhere / "private.jsonl")
    (evidence / "pages").mkdir()
    (evidence / "pages" / "page-1.json").symlink_to(elsewhere / "private.jsonl")
    (evidence / "linked").symlink_to(elsewhere, target_is_directory=True)
    return {
        "climbs out": ('[events]\npath = "../elsewhere/private.jsonl"\n', private),
        "absolute": (f"[events]\npath = {str(private)!r}\n", private),
        "symlink": ('[events]\npath = "link.jsonl"\n', private),
        "symlinked folder": ('[events]\npaths = ["linked/private.jsonl"]\n', private),
        "pattern match": ('[events]\npaths = ["pages/*.json"]\n', private),
        "sqlite url": (f'[ledger]\nurl = "sqlite:///{store}"\n', store),
        "relative sqlite url": ('[ledger]\nurl = "sqlite:///../elsewhere/store.db"\n', store),
    }


WAYS = [
    "climbs out",
    "absolute",
    "symlink",
    "symlinked folder",
    "pattern match",
    "sqlite url",
    "relative sqlite url",
]


@pytest.mark.parametrize("way", WAYS)
def test_a_path_outside_the_evidence_folder_is_refused(world: tuple[Path, Path], way: str) -> None:
    evidence, elsewhere = world
    body, target = _ways_out(evidence, elsewhere)[way]
    with pytest.raises(ManifestError, match="outside the evidence folder") as info:
        load_manifest(_manifest(evidence, body))
    message = str(info.value)
    assert repr(str(target)) in message  # the resolved path, named
    assert "allow_outside = true" in message and str(evidence.resolve()) in message
    with pytest.raises(ManifestError, match="outside the evidence folder"):
        open_evidence(evidence)  # every entry point reads the manifest the same way


@pytest.mark.parametrize("way", WAYS)
def test_allow_outside_reads_them(world: tuple[Path, Path], way: str) -> None:
    evidence, elsewhere = world
    body, target = _ways_out(evidence, elsewhere)[way]
    manifest = load_manifest(_manifest(evidence, body, allow=True))
    assert manifest.allow_outside
    [spec] = manifest.sources.values()
    if spec.is_database:
        assert spec.sqlite_path == target and spec.url_ref is None
        with pytest.raises(SchemaError, match="lacks columns"):  # the file was opened and read
            open_evidence(evidence).frame("runs")
    else:
        assert len(open_evidence(evidence).events) == 1


def test_paths_inside_the_folder_need_no_permission(world: tuple[Path, Path]) -> None:
    evidence, _ = world
    (evidence / "sub").mkdir()
    (evidence / "sub" / "more.jsonl").write_text(LINE, encoding="utf-8")
    (evidence / "alias.jsonl").symlink_to(evidence / "events.jsonl")
    inside = f"{evidence.resolve() / 'events.jsonl'}"
    body = f'[events]\npaths = ["sub/../events.jsonl", {inside!r}, "alias.jsonl", "sub/*.jsonl"]\n'
    manifest = load_manifest(_manifest(evidence, body))
    assert not manifest.allow_outside
    assert len(manifest.sources["events"].paths) == 4


def test_a_relative_sqlite_url_starts_at_the_manifests_folder(
    world: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence, elsewhere = world
    (evidence / "stores").mkdir()
    (elsewhere / "store.db").rename(evidence / "stores" / "store.db")
    monkeypatch.chdir(elsewhere)  # not where the manifest is
    spec = load_manifest(_manifest(evidence, '[ledger]\nurl = "sqlite:///stores/store.db"\n'))
    ledger = spec.sources["ledger"]
    assert ledger.sqlite_path == (evidence / "stores" / "store.db").resolve()
    with pytest.raises(SchemaError, match="lacks columns"):  # the file was found and read
        open_evidence(evidence).frame("runs")


def test_a_relative_sqlite_url_from_the_environment_starts_there_too(
    world: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence, elsewhere = world
    (elsewhere / "store.db").rename(evidence / "store.db")
    monkeypatch.chdir(elsewhere)  # inspect's shell and run's kernel start in different folders
    _manifest(evidence, '[ledger]\nurl = "env:IK_RELATIVE_DB"\n')
    incident = open_evidence(evidence, environ={"IK_RELATIVE_DB": "sqlite:///store.db"})
    with pytest.raises(SchemaError, match="lacks columns"):  # the file was found and read
        incident.frame("runs")


@pytest.mark.parametrize("value", ['"yes"', "1", "[true]"])
def test_allow_outside_must_be_a_boolean(world: tuple[Path, Path], value: str) -> None:
    evidence, _ = world
    with pytest.raises(ManifestError, match="allow_outside must be true or false"):
        load_manifest(_manifest(evidence, f'allow_outside = {value}\n[events]\npath = "x"\n'))


@pytest.mark.parametrize(
    "pack", sorted(p.name for p in FIXTURES.iterdir() if (p / "evidence.toml").is_file())
)
def test_the_bundled_incidents_stay_inside_their_folders(pack: str) -> None:
    text = (FIXTURES / pack / "evidence.toml").read_text(encoding="utf-8")
    assert "allow_outside" not in tomllib.loads(text)
    assert not load_manifest(FIXTURES / pack).allow_outside
