"""Snapshots: every bundled incident frozen into Parquet reads back as the same evidence.

Frames, rejects and warnings equal the source's under the filters flows narrow to (the
manifest's, none, one app, one session, a cut window, some invocations); every flow gives
the same findings on the snapshot; the same input gives the same bytes; a database incident
snapshots like a file one; the source manifest is kept as its content, never its comments;
and bad snapshots or targets give clear errors (``tests/sources/test_parquet.py`` breaks a
snapshot's parts one way at a time).
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import inspect
import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import read_run
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.batch import skip_reason
from incidentkit.cli import main
from incidentkit.demo import demo_packs, pack_parameters
from incidentkit.errors import ManifestError, ParameterError, SourceError
from incidentkit.evidence import FRAME_SOURCES, Evidence, open_evidence
from incidentkit.flows import FLOWS
from incidentkit.manifest import Filters, Window, load_manifest
from incidentkit.simulate import simulate
from incidentkit.snapshot import COVERAGE, SOURCE_MANIFEST, _table_lines, take
from incidentkit.sources.parquet import RECORD

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PACKS = sorted(p.name for p in FIXTURES.iterdir() if (p / "evidence.toml").is_file())
pytestmark = pytest.mark.xdist_group("snapshot")  # one worker takes the module's snapshots


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every bundled pack's snapshot, taken once for the module."""
    root = tmp_path_factory.mktemp("snapshots")
    return {pack: take(FIXTURES / pack, root / pack).folder for pack in PACKS}


def _frames(evidence: Evidence) -> dict[str, pd.DataFrame]:
    names = [name for name, section in FRAME_SOURCES.items() if evidence.has(section)]
    return {name: evidence.frame(name) for name in [*names, "rejects", "warnings"]}


def _filter_sets(source: Evidence) -> list[Filters]:
    """The filters flows narrow to: the manifest's, none, one app, one session, invocations,
    and a window cut through the middle of the events."""
    everything = source.narrowed(Filters())
    sets = [source.filters, Filters()]
    events = everything.events if everything.has("events") else None
    runs = everything.runs if everything.has("ledger") else None
    keyed = events if events is not None and len(events) else runs
    if keyed is not None and len(keyed):
        sets.append(Filters(app_name=str(keyed["app_name"].dropna().iloc[0])))
        sets.append(Filters(session_ids=(str(keyed["session_id"].dropna().iloc[-1]),)))
        invocations = keyed["invocation_id"].dropna().unique()[:3]
        sets.append(Filters(invocation_ids=tuple(map(str, invocations))))
    times = events["ts"] if events is not None and len(events) else None
    if times is not None:
        middle = times.min() + (times.max() - times.min()) / 2
        sets.append(Filters(window=Window(middle, times.max() + pd.Timedelta("1h"))))
    return sets


@pytest.mark.slow
@pytest.mark.parametrize("pack", PACKS)
def test_a_snapshot_reads_back_as_its_source_under_every_filter(
    pack: str, snapshots: dict[str, Path]
) -> None:
    source = open_evidence(FIXTURES / pack)
    frozen = open_evidence(snapshots[pack])
    assert frozen.filters == source.filters
    assert frozen.title == source.title
    assert frozen.manifest.apps == source.manifest.apps
    for filters in _filter_sets(source):
        expected = _frames(source.narrowed(filters))
        found = _frames(frozen.narrowed(filters))
        assert list(found) == list(expected)
        for name, frame in expected.items():
            pd.testing.assert_frame_equal(found[name], frame, obj=f"{pack} {name} {filters}")


def _findings(flow: str, evidence: Path, given: dict[str, Any]) -> dict[str, Any]:
    module = importlib.import_module(f"incidentkit.flows.{flow}")
    accepted = inspect.signature(module.setup).parameters
    incident, settings = module.setup(
        str(evidence), **{k: v for k, v in given.items() if k in accepted}
    )
    report = module.triage(incident, settings)
    found = module.findings(report, incident, settings).to_dict()
    text = json.dumps({key: found[key] for key in ("verdict", "summary", "items")})
    for said in (str(evidence), os.path.relpath(evidence)):  # commands name the evidence
        text = text.replace(said, "EVIDENCE")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _source_findings(pack: str, flow: str) -> str:
    """The findings ``flow`` gives on the bundled ``pack`` itself, as JSON text: computed once
    for the module (two tests compare with orphans on crash_recovery), decoded anew for each."""
    return json.dumps(_findings(flow, FIXTURES / pack, _given(pack)))


def _expected(pack: str, flow: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(_source_findings(pack, flow))
    return found


def _given(pack: str) -> dict[str, Any]:
    """The parameters the demo gives a pack: its app, and a one-session incident's session."""
    apps = demo_packs(FIXTURES).apps
    given: dict[str, Any] = dict(pack_parameters(FIXTURES / pack, apps.get(pack)))
    if pack.startswith("crash_recovery-"):  # the crash's other stores: its invoices too
        given.setdefault("app_name", apps["crash_recovery"])
    if "keys" in given:
        given["keys"] = json.loads(given["keys"])
    return given


def _cases() -> list[tuple[str, str]]:
    cases = []
    for pack in PACKS:
        sections = load_manifest(FIXTURES / pack).sources
        for flow in FLOWS.values():
            if skip_reason(flow, sections, _given(pack)) is None:
                cases.append((pack, flow.name))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("pack", "flow"), _cases())
def test_every_flow_finds_the_same_on_a_snapshot(
    pack: str, flow: str, snapshots: dict[str, Path]
) -> None:
    expected = _expected(pack, flow)
    assert _findings(flow, snapshots[pack], _given(pack)) == expected


def test_the_same_evidence_gives_the_same_bytes(tmp_path: Path) -> None:
    pack = FIXTURES / "vanished_state"
    first, second = take(pack, tmp_path / "a").folder, take(pack, tmp_path / "b").folder
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert Path("evidence.toml") in files and Path(COVERAGE) in files
    assert Path(SOURCE_MANIFEST) in files and Path("events/events.parquet") in files
    assert Path(RECORD) in files
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    kept = tomllib.loads((first / SOURCE_MANIFEST).read_text())
    assert kept == tomllib.loads((pack / "evidence.toml").read_text())


def test_the_source_manifest_keeps_its_content_not_its_comments(tmp_path: Path) -> None:
    """A commented-out URL with a password stays out of the snapshot; every key and value of
    the manifest, times and nested tables included, is kept."""
    pack = Path(shutil.copytree(FIXTURES / "healthy", tmp_path / "pack"))
    manifest = pack / "evidence.toml"
    text = manifest.read_text().replace(
        'window = { start = "2026-11-29T09:00:00.000Z", end = "2026-11-29T10:00:00.000Z" }',
        "window = { start = 2026-11-29T09:00:00Z, end = 2026-11-29T10:00:00.000+00:00 }",
    )
    assert text != manifest.read_text()
    secret = "postgresql://agent:hunter2@db.internal/prod"
    text = text.replace('format = "csv"', f'format = "csv"  # url = "{secret}"')
    manifest.write_text(f'# url = "{secret}"\n{text}')
    folder = take(pack, tmp_path / "snap").folder
    kept = (folder / SOURCE_MANIFEST).read_text()
    assert "hunter2" not in kept
    assert tomllib.loads(kept) == tomllib.loads(manifest.read_text())
    assert "hunter2" not in "".join(
        p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
    )


_KEYS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8)
_SCALARS = (
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.datetimes(
        timezones=st.none()
        | st.builds(dt.timezone, st.integers(-1439, 1439).map(lambda m: dt.timedelta(minutes=m)))
    )
    | st.dates()
    | st.times()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.slow
@given(st.dictionaries(_KEYS, _VALUES | st.dictionaries(_KEYS, _VALUES, max_size=4), max_size=5))
@settings(max_examples=300, deadline=None)
def test_the_source_manifest_writer_gives_back_what_toml_read(data: dict[str, Any]) -> None:
    """Whatever TOML holds (text with any character, numbers, times, lists, nested tables)
    is written so that TOML reads it back equal."""
    assert tomllib.loads("\n".join(_table_lines(data, ()))) == data


def test_payloads_keep_their_json_values(tmp_path: Path) -> None:
    """NaN, integers past 64 bits, nested objects and tuples survive the Parquet round trip."""
    pack = FIXTURES / "runaway"
    source = open_evidence(pack)
    frozen = open_evidence(take(pack, tmp_path / "snap").folder)
    assert source.calls["args"].map(lambda v: isinstance(v, dict) and bool(v)).any()
    pd.testing.assert_series_equal(frozen.calls["args"], source.calls["args"])
    ids = frozen.events["long_running_tool_ids"]
    assert ids.map(lambda v: isinstance(v, tuple)).all()
    from incidentkit.sources.parquet import _decoded, _encode

    values = [float("nan"), 2**80, {"a": [1, {"b": None}]}, "text", None, True, 1.5]
    decoded = _decoded(pd.Series([_encode(v) for v in values]), tuples=False, where=tmp_path)
    assert decoded.iloc[0] != decoded.iloc[0]  # NaN
    assert decoded.iloc[1:].tolist() == values[1:]


def test_tuple_payloads_decode_each_text_once_and_share_only_what_cannot_change(
    tmp_path: Path,
) -> None:
    from incidentkit.sources.parquet import _decoded_tuples, _encode

    stacks = [["a", "b"], [], ["a", "b"], None, [1, 2.5]]
    texts = pd.Series([None if v is None else _encode(v) for v in stacks], dtype="str")
    shared = _decoded_tuples(texts, where=tmp_path)
    assert shared.tolist() == [("a", "b"), (), ("a", "b"), (), (1, 2.5)]
    assert shared.iloc[0] is shared.iloc[2]  # one decoding for equal texts
    nested = pd.Series([_encode([{"k": 1}]), _encode([{"k": 1}])], dtype="str")
    own = _decoded_tuples(nested, where=tmp_path)
    assert own.tolist() == [({"k": 1},), ({"k": 1},)]
    assert own.iloc[0][0] is not own.iloc[1][0]  # a dict inside is never shared by two rows


@pytest.mark.slow
def test_a_database_incident_snapshots_like_its_source(pg_url: str, tmp_path: Path) -> None:
    pack = simulate("crash_recovery", tmp_path / "pack", into=pg_url)
    environ = {"INCIDENT_DB_URL": pg_url}
    taken = take(pack, tmp_path / "snap", environ=environ)
    source = open_evidence(pack, environ=environ)
    frozen = open_evidence(taken.folder)
    assert any(source.sources[s].is_database for s in source.sources)
    for filters in _filter_sets(source):
        expected = _frames(source.narrowed(filters))
        found = _frames(frozen.narrowed(filters))
        for name, frame in expected.items():
            pd.testing.assert_frame_equal(found[name], frame, obj=f"{name} {filters}")
    text = "".join(p.read_text(errors="replace") for p in taken.folder.rglob("*") if p.is_file())
    assert pg_url not in text and "env:INCIDENT_DB_URL" in text


def test_a_window_cut_of_a_recording_warns_as_its_source(tmp_path: Path) -> None:
    """A window that holds none of a recording's events warns on a snapshot as on the source."""
    recording = Path(__file__).parent / "data" / "jfr" / "stalled-agent.json.gz"
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "evidence.toml").write_text(
        f'allow_outside = true\n[jfr]\npath = "{recording}"\n'
    )
    source = open_evidence(tmp_path / "pack")
    frozen = open_evidence(take(tmp_path / "pack", tmp_path / "snap").folder)
    pd.testing.assert_frame_equal(frozen.jfr_samples, source.jfr_samples)
    assert len(source.jfr_samples)
    before = Window(pd.Timestamp("2000-01-01", tz="UTC"), pd.Timestamp("2000-01-02", tz="UTC"))
    expected = source.narrowed(Filters(window=before)).source("jfr")
    found = frozen.narrowed(Filters(window=before)).source("jfr")
    assert expected is not None and found is not None
    assert "falls outside the window" in " ".join(expected.warnings["reason"])
    pd.testing.assert_frame_equal(found.warnings, expected.warnings)


def test_the_command_writes_a_snapshot_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "snap"
    assert main(["snapshot", str(FIXTURES / "healthy"), "--out", str(out), "--quiet"]) == 0
    said = capsys.readouterr().err
    assert f"snapshot: {out}" in said and "rows" in said
    assert load_manifest(out).sources["ledger"].format == "parquet"
    assert main(["snapshot", str(FIXTURES / "healthy"), "--out", str(out)]) == 3
    assert "not empty" in capsys.readouterr().err
    assert not list(tmp_path.glob(".*partial"))  # nothing half-written is left behind


def test_a_broken_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    folder = take(FIXTURES / "healthy", tmp_path / "snap").folder
    (folder / "ledger" / "runs.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match=r"runs\.parquet is not the one it was taken with"):
        open_evidence(folder).frame("runs")
    (folder / RECORD).unlink()  # as a snapshot taken before records: read as it is
    with pytest.raises(SourceError, match="not a readable Parquet file"):
        open_evidence(folder).frame("runs")
    pq.write_table(pa.table({"run_id": ["r1"]}), folder / "ledger" / "runs.parquet")
    with pytest.raises(SourceError, match=r"lacks columns \['app_name', 'user_id'"):
        open_evidence(folder).frame("runs")
    (folder / "ledger" / "runs.parquet").unlink()
    with pytest.raises(SourceError, match="lacks its runs frame"):
        open_evidence(folder).frame("runs")
    manifest = folder / "evidence.toml"
    manifest.write_text(manifest.read_text().replace('path = "events"', 'url = "env:X"'))
    with pytest.raises(ManifestError, match="reads one snapshot folder"):
        load_manifest(folder)


def test_a_snapshot_missing_a_part_is_refused_by_the_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = take(FIXTURES / "healthy", tmp_path / "snap").folder
    (folder / "events" / "rejects.parquet").unlink()
    assert main(["inspect", str(folder)]) == 2
    assert "lacks its part events/rejects.parquet" in capsys.readouterr().out


def test_a_snapshot_is_never_written_into_a_folder_that_holds_files(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ParameterError, match="not empty"):
        take(FIXTURES / "healthy", tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_notebook_runs_on_a_snapshot(snapshots: dict[str, Path], tmp_path: Path) -> None:
    """papermill runs the flow's notebook on the snapshot folder as on any evidence."""
    given = _given("crash_recovery")
    code, findings, _html = read_run("orphans", snapshots["crash_recovery"], tmp_path, **given)
    expected = _expected("crash_recovery", "orphans")
    assert code == 1 and findings["verdict"] == expected["verdict"]
    assert [item["id"] for item in findings["items"]] == [i["id"] for i in expected["items"]]


def test_snapshot_as_of_fixes_a_relative_window_so_two_snapshots_agree(tmp_path: Path) -> None:
    """``snapshot --as-of`` is where a ``last`` window ends (no environment variable): the
    same --as-of twice gives the same manifest and the same frames."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copyfile(FIXTURES / "crash_recovery" / "ledger.csv", source / "ledger.csv")
    (source / "evidence.toml").write_text(
        'window = { last = "30m" }\n[ledger]\npath = "ledger.csv"\n', encoding="utf-8"
    )
    argv = ["snapshot", str(source), "--quiet", "--as-of", "2026-11-29T03:00:00Z"]
    for name in ("one", "two"):
        assert main([*argv, "--out", str(tmp_path / name)]) in (0, 2)
    one, two = (tomllib.loads((tmp_path / n / "evidence.toml").read_text()) for n in ("one", "two"))
    assert one == two
    assert pd.Timestamp(one["window"]["end"]) == pd.Timestamp("2026-11-29T03:00:00Z")
    assert pd.Timestamp(one["window"]["start"]) == pd.Timestamp("2026-11-29T02:30:00Z")
    assert (tmp_path / "one" / "ledger").exists()
