"""A value a manifest names with ``env:`` is a secret whatever it holds, and is never echoed.

``env:DB_PASSWORD`` written for ``env:DB_URL`` is an easy slip, and a received manifest can
name ``AWS_SECRET_ACCESS_KEY``: the variable then holds no URL. A canary in such a variable,
and one as a URL's password, must appear in no message, traceback, output of ``incidentkit
inspect`` or ``incidentkit run``, nor in any file the run leaves; messages name the variable.
:func:`incidentkit.manifest.env_secrets` lists every rendering the post-run scan looks for.
"""

from __future__ import annotations

import html
import json
import shutil
import socket
import traceback
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import sqlalchemy as sa

from incidentkit import open_evidence, redact
from incidentkit.cli import main
from incidentkit.errors import SourceError
from incidentkit.manifest import env_secrets, load_manifest

ROOT = Path(__file__).resolve().parents[2]
CRASH = ROOT / "fixtures" / "crash_recovery"
VARIABLE = "IK_CANARY_SETTING"
NOT_A_URL = "ik-canary/\"<&>'+= ü\\7f3a9c"
"""What a slip puts there: a password or key, with the characters renderers change."""
PASSWORD = "ik-pw canary&@:/ü#9d"


def renderings(secret: str) -> set[str]:
    """Ways ``secret`` could be printed, written out here rather than taken from the kit."""
    forms = {
        secret,
        quote(secret, safe=""),
        quote(secret, safe=" "),
        quote_plus(secret),
        html.escape(secret),
        html.escape(secret, quote=False),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        html.escape(json.dumps(secret)[1:-1]),
        repr(secret)[1:-1],
    }
    return {form for form in forms if len(form) >= 8}


def assert_clean(text: str, secret: str, where: str) -> None:
    for form in renderings(secret):
        assert form not in text, f"{where} holds the secret as {form!r}"


def _refused_url(password: str) -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port: int = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return sa.URL.create(
        "postgresql+psycopg",
        username="u",
        password=password,
        host="127.0.0.1",
        port=port,
        database="db",
        query={"connect_timeout": "2"},
    ).render_as_string(hide_password=False)


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret remembered by an earlier test masks this one's canary for it."""
    monkeypatch.setattr(redact, "_known", set())


@pytest.fixture(params=["not-a-url", "url-password"])
def canary(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str]]]:
    """(the variable's value, the secrets that must never show) for each kind of value."""
    if request.param == "not-a-url":
        yield NOT_A_URL, [NOT_A_URL]
    else:
        url = _refused_url(PASSWORD)
        yield url, [PASSWORD, url]


def _evidence(tmp_path: Path) -> Path:
    """The crash pack's files, its ledger read from the variable instead."""
    folder = tmp_path / "evidence"
    shutil.copytree(CRASH, folder)
    manifest = folder / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    csv = '[ledger]\npath = "ledger.csv"\nformat = "csv"\n'
    assert csv in text
    manifest.write_text(text.replace(csv, f'[ledger]\nurl = "env:{VARIABLE}"\n'), "utf-8")
    return folder


def test_the_python_api_names_the_variable_never_its_value(
    canary: tuple[str, list[str]], tmp_path: Path
) -> None:
    value, secrets = canary
    incident = open_evidence(_evidence(tmp_path), environ={VARIABLE: value})
    with pytest.raises(SourceError, match=f"env:{VARIABLE}") as info:
        _ = incident.runs
    chain = "".join(traceback.format_exception(info.value))  # what a notebook shows
    for secret in secrets:
        for text, where in ((str(info.value), "message"), (repr(info.value), "repr")):
            assert_clean(text, secret, where)
        assert_clean(chain, secret, "the traceback")


def test_inspect_names_the_variable_never_its_value(
    canary: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    value, secrets = canary
    monkeypatch.setenv(VARIABLE, value)
    assert main(["inspect", str(_evidence(tmp_path))]) == 2
    printed = capsys.readouterr()
    assert f"env:{VARIABLE}" in printed.out + printed.err
    for secret in secrets:
        assert_clean(printed.out + printed.err, secret, "inspect's output")


@pytest.mark.notebook
def test_run_leaves_the_value_in_no_output_and_no_file(
    canary: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    value, secrets = canary
    monkeypatch.setenv(VARIABLE, value)
    out = tmp_path / "out"
    argv = ["run", "orphans", "--evidence", str(_evidence(tmp_path)), "--out", str(out)]
    assert main([*argv, "--quiet", "-p", "as_of", "2026-11-29T04:00:00Z"]) == 2
    printed = capsys.readouterr()
    files = sorted(path for path in out.rglob("*") if path.is_file())
    assert {path.name for path in files} >= {"orphans.ipynb", "orphans.html", "findings.json"}
    for secret in secrets:
        assert_clean(printed.out + printed.err, secret, "run's output")
        for path in files:
            assert_clean(path.read_text(encoding="utf-8", errors="replace"), secret, str(path))
    assert f"env:{VARIABLE}" in (out / "findings.json").read_text(encoding="utf-8")


def test_env_secrets_lists_every_rendering_of_every_value(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    manifest = folder / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    journal = '[journal]\npath = "journal.jsonl"\nformat = "jsonl"\n'
    manifest.write_text(text.replace(journal, '[journal]\nurl = "env:IK_CANARY_URL"\n'), "utf-8")
    url = _refused_url(PASSWORD)
    found = env_secrets(load_manifest(folder), {VARIABLE: NOT_A_URL, "IK_CANARY_URL": url})
    for secret in (NOT_A_URL, PASSWORD, url):
        assert renderings(secret) <= set(found), secret
    assert found == sorted(found, key=lambda form: (-len(form), form))  # longest first
    assert env_secrets(load_manifest(folder), {}) == []  # an unset variable holds nothing
    assert env_secrets(load_manifest(folder), {VARIABLE: "short12", "IK_CANARY_URL": ""}) == []


def test_the_post_run_scan_finds_each_rendering_in_a_file(tmp_path: Path) -> None:
    from incidentkit.runner import scan_for_secrets

    secrets = env_secrets(load_manifest(_evidence(tmp_path)), {VARIABLE: NOT_A_URL})
    for i, form in enumerate(sorted(renderings(NOT_A_URL))):
        leaky = tmp_path / f"leak-{i}.html"
        leaky.write_text(f"<pre>cannot read it: {form}</pre>", encoding="utf-8")
        assert scan_for_secrets([leaky], secrets) == [leaky], form
    clean = tmp_path / "clean.html"
    clean.write_text(f"<pre>[ledger]: not a database URL: 'env:{VARIABLE}'</pre>", "utf-8")
    assert scan_for_secrets([clean], secrets) == []


def test_a_remembered_value_is_masked_in_every_message(tmp_path: Path) -> None:
    spec = load_manifest(_evidence(tmp_path)).sources["ledger"]
    assert spec.url({VARIABLE: NOT_A_URL}) == NOT_A_URL  # resolving remembers it
    err = SourceError("a driver echoed it", value=f"x {NOT_A_URL} y", fix=json.dumps(NOT_A_URL))
    assert_clean(str(err), NOT_A_URL, "an error naming it")
    shown = redact.scrub_text(f"{html.escape(NOT_A_URL)} and {quote(NOT_A_URL, safe='')}")
    assert_clean(shown, NOT_A_URL, "scrubbed text")
