"""The wheel installs and works outside the checkout: its notebooks ship inside the package.

The wheel is built from this checkout and installed, without dependencies, into a fresh venv
in a temporary folder. The venv sees the test environment's dependencies (pandas, papermill,
...) through a ``.pth`` line: those are already installed here, and downloading them again
would test the package index, not the wheel. It never sees the checkout: the editable
install's own path hook is not read from there. ``incidentkit run`` and ``incidentkit new``
then run from a folder outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]  # one worker builds the wheel
PACK = ROOT / "fixtures" / "crash_recovery"


DATA = Path(sysconfig.get_path("data")) / "share" / "jupyter"
"""The test environment's Jupyter data (nbconvert's templates): a ``.pth`` line lends the venv
the dependencies' code, not their data files, which a real install puts in the venv."""


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JUPYTER_PATH": str(DATA)}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh venv holding only the wheel of this checkout."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "-w", work / "dist", ROOT, cwd=work,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = (work / "dist").glob("incidentkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "incidentkit/notebooks/orphans.ipynb" in names
    assert "incidentkit/py.typed" in names
    made = _run(sys.executable, "-m", "venv", "--without-pip", work / "venv", cwd=work)
    assert made.returncode == 0, made.stderr
    venv = work / "venv"
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "_incidentkit_test_deps.pth").write_text(
        sysconfig.get_path("purelib") + "\n", encoding="utf-8"
    )
    python = venv / "bin" / "python"
    pip = _run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=work)
    assert pip.returncode == 0, pip.stderr
    return venv / "bin"


def test_the_wheel_imports_from_the_venv_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    code = "import incidentkit.runner as r; print(r.__file__); print(r.NOTEBOOKS)"
    done = _run(installed / "python", "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    module, notebooks = done.stdout.split()
    assert Path(module).is_relative_to(installed.parent)
    assert Path(notebooks) == Path(module).parent / "notebooks"


@pytest.mark.notebook
def test_a_flow_runs_and_new_writes_a_notebook_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    evidence = tmp_path / "INC-1"
    shutil.copytree(PACK, evidence)
    ran = _run(
        installed / "incidentkit", "run", "orphans", "--evidence", evidence, "--out", "out",
        "--quiet", "-p", "app_name", "invoicing", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr  # action needed: the crash's orphans
    assert (tmp_path / "out" / "orphans.html").is_file()
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert findings["verdict"] == "ACTION_NEEDED"
    assert findings["evidence"]["parameters"]["app_name"] == "invoicing"
    made = _run(
        installed / "incidentkit", "new", "INC-1", "--flow", "orphans", "--evidence", evidence,
        cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "incidents" / "INC-1" / "orphans.ipynb").is_file()
