"""The flow notebooks' shape: thin, tagged, parameterised, committed without outputs."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import papermill
import pytest

from incidentkit.flows import FLOWS
from incidentkit.runner import NOTEBOOKS

NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb"))
TAGS = {"parameters", "load", "triage", "plot", "findings"}
# No default names the demo's app, agents or tools: empty means "from the manifest".
ORPHAN_PARAMETERS = {
    "evidence": ("str", '""'),
    "app_name": ("str", '""'),
    "as_of": ("str", '""'),
    "terminal_agent": ("str", '""'),
    "key_templates": ("dict", "{}"),
    "attempts_cap": ("int", "0"),
    "findings_path": ("str", '"findings.json"'),
}


def code_cells(path: Path) -> list[nbformat.NotebookNode]:
    nb = nbformat.read(str(path), as_version=4)
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_every_flow_has_its_notebook() -> None:
    assert {NOTEBOOKS / flow.notebook for flow in FLOWS.values()} <= set(NOTEBOOK_FILES)


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path) -> None:
    for cell in code_cells(path):
        assert cell.outputs == [], cell.source
        assert cell.execution_count is None, cell.source


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_cells_are_tagged_and_parameters_come_first(path: Path) -> None:
    cells = code_cells(path)
    tags = [cell.metadata.get("tags", []) for cell in cells]
    assert tags[0] == ["parameters"]
    assert all(len(t) == 1 and t[0] in TAGS for t in tags), tags
    assert sum(t == ["parameters"] for t in tags) == 1
    nb = nbformat.read(str(path), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_cells_are_thin(path: Path) -> None:
    """No def, class, loops or comprehensions: logic lives in the library, with tests."""
    forbidden = (
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.For,
        ast.While,
        ast.ListComp,
        ast.DictComp,
        ast.SetComp,
        ast.GeneratorExp,
        ast.Lambda,
    )
    for cell in code_cells(path):
        tree = ast.parse(cell.source)
        bad = [type(node).__name__ for node in ast.walk(tree) if isinstance(node, forbidden)]
        assert not bad, f"{bad} in cell:\n{cell.source}"
        statements = [
            node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)
        ]
        if "parameters" not in cell.metadata["tags"]:
            assert len(statements) <= 1, f"one library call per cell:\n{cell.source}"


def test_parameters_cell_typed_with_help() -> None:
    declared = papermill.inspect_notebook(str(NOTEBOOKS / "orphans.ipynb"))
    assert {name: (p["inferred_type_name"], p["default"]) for name, p in declared.items()} == (
        ORPHAN_PARAMETERS
    )
    assert all(p["help"] for p in declared.values())


def test_notebooks_are_valid_nbformat() -> None:
    for path in NOTEBOOK_FILES:
        nbformat.validate(json.loads(path.read_text()))
