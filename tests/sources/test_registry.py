"""The ``LOADERS`` registry: every manifest section has a loader, each meets the protocol."""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from pathlib import Path

import pytest

from incidentkit import evidence
from incidentkit.errors import ParameterError
from incidentkit.manifest import FORMATS, PARQUET, SECTIONS
from incidentkit.sources import parquet
from incidentkit.sources.registry import LOADERS, SNAPSHOT_LOADER, Loader, LoaderPath, loader_for

REGISTERED = [*LOADERS.items(), (PARQUET, SNAPSHOT_LOADER)]


def test_every_manifest_section_has_a_loader() -> None:
    assert list(LOADERS) == list(SECTIONS)
    assert set(FORMATS) == set(LOADERS)


@pytest.mark.parametrize("section", SECTIONS)
def test_each_format_of_a_section_reads_through_its_loader(section: str) -> None:
    own = importlib.import_module(LOADERS[section].module).load
    for fmt in (None, *FORMATS[section]):
        want = parquet.load if fmt == PARQUET else own
        assert loader_for(section, fmt) is want, (section, fmt)
        assert evidence.loader_for(section, fmt) is want, (section, fmt)  # the public name


@pytest.mark.parametrize(("section", "where"), REGISTERED, ids=[s for s, _ in REGISTERED])
def test_each_loader_meets_the_protocol(section: str, where: LoaderPath) -> None:
    """The signature mypy checks statically, checked again on what the registry imports:
    the protocol's parameters by name, kind, default and type; its other keywords optional."""
    load = where.resolve()
    protocol = inspect.signature(Loader.__call__)
    wanted = {name: p for name, p in protocol.parameters.items() if name != "self"}
    got = inspect.signature(load).parameters
    assert list(got)[:2] == ["spec", "filters"], section
    for name, param in wanted.items():
        assert name in got, (section, name)
        assert (got[name].kind, got[name].default) == (param.kind, param.default), (section, name)
    extra = {name: p for name, p in got.items() if name not in wanted}
    assert all(p.default is not inspect.Parameter.empty for p in extra.values()), (section, extra)
    hints, want_hints = typing.get_type_hints(load), typing.get_type_hints(Loader.__call__)
    assert {name: hints[name] for name in want_hints} == want_hints, section


@pytest.mark.parametrize("fmt", [None, PARQUET])
@pytest.mark.parametrize("section", ["nope", "evnets", "base", "parquet", "registry"])
def test_an_unknown_section_is_refused_by_name(section: str, fmt: str | None) -> None:
    """A module of ``sources/`` that is no section is refused too (and so is any section in
    the snapshot format), with the sections the kit reads."""
    with pytest.raises(ParameterError, match="no loader reads the manifest section") as refused:
        evidence.loader_for(section, fmt)
    message = str(refused.value)
    assert f"'{section}'" in message
    assert "ledger, events, journal, spans, diagnostics, threads, histograms, jfr" in message
    assert ("did you mean evnets → events?" in message) == (section == "evnets")


def test_a_loader_is_imported_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering a loader imports nothing; resolving it imports its module."""
    (tmp_path / "toy_loader.py").write_text("def load(spec, filters, *, environ=None): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    where = LoaderPath("toy_loader")
    assert "toy_loader" not in sys.modules
    try:
        load = where.resolve()
        assert load is sys.modules["toy_loader"].load
    finally:
        sys.modules.pop("toy_loader", None)
