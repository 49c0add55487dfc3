"""The committed packs are exactly what ``scripts/make_fixtures`` writes today."""

from __future__ import annotations

from pathlib import Path

import pytest
from simpacks import FIXTURES

from incidentkit.simulate.fixtures import PACKS, build_all, comparable


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fixtures")
    build_all(root)
    return root


def _files(root: Path, folder: str) -> dict[str, bytes]:
    base = root / folder
    return {str(p.relative_to(base)): comparable(p) for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("folder", [p[0] for p in PACKS] + ["broken"])
def test_committed_pack_equals_a_fresh_generation(folder: str, fresh: Path) -> None:
    committed = _files(FIXTURES, folder)
    assert committed, f"fixtures/{folder} is missing: run scripts/make_fixtures"
    generated = _files(fresh, folder)
    assert sorted(committed) == sorted(generated), "files differ: run scripts/make_fixtures"
    for name, content in generated.items():
        assert committed[name] == content, (
            f"fixtures/{folder}/{name} is stale: run scripts/make_fixtures"
        )


@pytest.mark.parametrize("folder", [p[0] for p in PACKS] + ["broken"])
def test_packs_stay_small(folder: str) -> None:
    """Each pack is under 500 KB (issue 3: small text files, each pack under about 500 KB),
    except ``runaway``, under 600 KB: its loop is 500 model responses by design (ADK's default
    limit), about 285 KB on its own, beside the app's healthy traffic."""
    size = sum(p.stat().st_size for p in (FIXTURES / folder).rglob("*") if p.is_file())
    assert size < (600 if folder == "runaway" else 500) * 1024
