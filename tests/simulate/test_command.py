"""``incidentkit simulate``: the arguments and run_cli the CLI wires in."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import sqlalchemy as sa

from incidentkit.simulate import add_arguments, run_cli


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="incidentkit simulate")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_writes_a_pack_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo-incident"
    assert run_cli(_args("crash_recovery", "--out", str(out), "--seed", "3")) == 0
    printed = capsys.readouterr().out
    assert f"wrote crash_recovery to {out}" in printed
    assert f"incidentkit inspect {out}" in printed
    assert (out / "evidence.toml").is_file() and (out / "truth.json").is_file()


def test_python_format_writes_a_session_database(tmp_path: Path) -> None:
    out = tmp_path / "py"
    assert run_cli(_args("vanished_state", "--out", str(out), "--events-format", "adk-python")) == 0
    assert (out / "sessions.db").is_file()


def test_a_refused_request_exits_3_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("x")
    assert run_cli(_args("healthy", "--out", str(tmp_path))) == 3
    assert "not empty and holds no simulated pack" in capsys.readouterr().err


def test_into_accepts_an_env_reference(
    tmp_path: Path, sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIM_TARGET", f"sqlite:///{sqlite_path}")
    out = tmp_path / "db-pack"
    assert run_cli(_args("crash_recovery", "--out", str(out), "--into", "env:SIM_TARGET")) == 0
    manifest = (out / "evidence.toml").read_text()
    assert 'url = "env:INCIDENT_DB_URL"' in manifest and "sqlite" not in manifest
    with sa.create_engine(f"sqlite:///{sqlite_path}").connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM agent_run")).scalar_one() > 0


def test_into_an_unset_variable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SIM_NOWHERE", raising=False)
    assert run_cli(_args("healthy", "--out", str(tmp_path / "p"), "--into", "env:SIM_NOWHERE")) == 3
    assert "SIM_NOWHERE" in capsys.readouterr().err


def test_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _args("meltdown", "--out", "x")
    assert "invalid choice: 'meltdown'" in capsys.readouterr().err
