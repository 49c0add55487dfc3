"""The notebook ``incidentkit new --flow orphans`` writes, run as its reader runs it (papermill,
the standard python3 kernel): on evidence of several apps it takes the app the parameters or
the manifest name, else it stops in its load cell with a ParameterError that lists the apps
and says how to choose."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest

from incidentkit.flows import orphans
from incidentkit.runner import new_notebook

pytestmark = pytest.mark.notebook

CRASH = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"
APPS = ("expenses", "invoicing", "support", "travel")
"""The apps the crash_recovery ledger holds."""


def _execute(notebook: Path) -> Path:
    executed = notebook.with_name("executed.ipynb")
    papermill.execute_notebook(
        str(notebook),
        str(executed),
        kernel_name="python3",
        progress_bar=False,
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    return executed


def test_several_apps_and_none_named_stop_the_load_cell_with_the_apps(tmp_path: Path) -> None:
    ledger = (CRASH / "ledger.csv").read_text(encoding="utf-8")
    assert all(f",{app}," in ledger for app in APPS)  # the evidence holds several apps
    notebook = new_notebook("INC-1", "orphans", CRASH, out=tmp_path)
    with pytest.raises(papermill.PapermillExecutionError) as failed:
        _execute(notebook)
    err = failed.value
    assert err.ename == "ParameterError"
    assert f"the ledger holds {', '.join(APPS)}" in err.evalue
    assert "-p app_name" in err.evalue and "parameters cell" in err.evalue
    executed = nbformat.read(str(tmp_path / "executed.ipynb"), as_version=4)
    [cell] = [
        c
        for c in executed.cells
        if any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert cell.metadata["tags"] == ["load"] and "orphans.setup(" in cell.source


def test_the_reader_sees_the_message_not_a_traceback(tmp_path: Path) -> None:
    notebook = new_notebook("INC-1", "orphans", CRASH, out=tmp_path)
    with pytest.raises(papermill.PapermillExecutionError) as failed:
        _execute(notebook)
    shown = "\n".join(failed.value.traceback)
    assert shown.startswith("ParameterError: app_name is empty")
    assert "Traceback" not in shown and "common.py" not in shown


class _Tables(HTMLParser):
    """The tables of an HTML output, each as its rows of cell texts (the header first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None


def _shown_tables(executed: Path) -> list[pd.DataFrame]:
    """Every table the executed notebook shows, as text frames."""
    reader = _Tables()
    for cell in nbformat.read(str(executed), as_version=4).cells:
        for output in cell.get("outputs", []):
            reader.feed(output.get("data", {}).get("text/html", ""))
    return [pd.DataFrame(rows[1:], columns=rows[0]) for rows in reader.tables if rows]


def _pinned(tmp_path: Path) -> Path:
    """A copy of crash_recovery whose manifest names the app."""
    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    manifest = pack / "evidence.toml"
    manifest.write_text('app_name = "invoicing"\n' + manifest.read_text(encoding="utf-8"))
    return pack


@pytest.mark.parametrize("named_by", ["parameter", "manifest"])
def test_the_app_the_parameters_or_the_manifest_name_is_swept(
    tmp_path: Path, named_by: str
) -> None:
    if named_by == "parameter":
        notebook = new_notebook(
            "INC-1", "orphans", CRASH, out=tmp_path / "nb", parameters={"app_name": "invoicing"}
        )
    else:
        notebook = new_notebook("INC-1", "orphans", _pinned(tmp_path), out=tmp_path / "nb")
    executed = _execute(notebook)
    found = json.loads((tmp_path / "nb" / "findings.json").read_text(encoding="utf-8"))
    assert found["evidence"]["parameters"]["app_name"] == "invoicing"
    kinds: dict[str, set[str]] = {}
    for item in found["items"]:
        for row in item["rows"]:
            if "run_id" in row and row.get("action_kind"):
                kinds.setdefault(row["run_id"], set()).add(row["action_kind"])
    assert kinds and all(len(k) == 1 for k in kinds.values()), kinds  # one action per run
    # Every table the reader sees that names a run shows that run's own action kind.
    incident, settings = orphans.setup(CRASH, app_name="invoicing")
    sweep = orphans.triage(incident, settings)
    runs = pd.concat([sweep.orphans, sweep.in_flight]).set_index("run_id")["action_kind"]
    named = [table for table in _shown_tables(executed) if "run_id" in table.columns]
    assert len(named) >= 6  # actions, orphans, calls, crash loops, in flight, disagreements
    for table in named:
        assert "action_kind" in table.columns, table.columns.tolist()
        assert table["action_kind"].tolist() == table["run_id"].map(runs).tolist()
