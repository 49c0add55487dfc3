from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import ManifestError
from incidentkit.manifest import SourceSpec, load_manifest

FULL = """
title = "INC-1234 order lookup stall"
window = { start = "2026-11-29T02:30:00Z", end = "2026-11-29T04:00:00Z" }
app_name = "support"
sessions = ["s-1", "s-2"]

[ledger]
url = "env:INCIDENT_DB_URL"
table = "agent_run"
columns = { status = "state" }

[events]
path = "events.jsonl"

[journal]
url = "env:INCIDENT_DB_URL"
table = "tool_journal"

[spans]
path = "spans.otlp.jsonl"

[diagnostics]
path = "diagnostics.log"
format = "text"

[threads]
paths = ["dump-1.txt", "dump-2.txt"]
naive_timestamps = "utc"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evidence.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_full_manifest_parses(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, FULL))
    assert manifest.title == "INC-1234 order lookup stall"
    assert manifest.filters.window is not None
    assert manifest.filters.window.start == pd.Timestamp("2026-11-29T02:30:00Z")
    assert manifest.filters.app_name == "support"
    assert manifest.filters.session_ids == ("s-1", "s-2")
    assert set(manifest.sources) == {
        "ledger",
        "events",
        "journal",
        "spans",
        "diagnostics",
        "threads",
    }
    ledger = manifest.sources["ledger"]
    assert ledger.is_database and ledger.table == "agent_run"
    assert ledger.columns == {"status": "state"}
    assert manifest.sources["events"].paths == ((tmp_path / "events.jsonl").resolve(),)
    assert len(manifest.sources["threads"].paths) == 2
    assert manifest.sources["threads"].naive_timestamps == "utc"


def test_folder_resolves_to_its_manifest(tmp_path: Path) -> None:
    write(tmp_path, FULL)
    assert load_manifest(tmp_path).path == tmp_path / "evidence.toml"


def test_env_url_resolves_only_from_the_named_variable(tmp_path: Path) -> None:
    ledger = load_manifest(write(tmp_path, FULL)).sources["ledger"]
    assert ledger.url({"INCIDENT_DB_URL": "postgresql://u@h/db"}) == "postgresql://u@h/db"
    with pytest.raises(ManifestError, match="export INCIDENT_DB_URL="):
        ledger.url({})
    assert "env:INCIDENT_DB_URL" in ledger.location()


def test_literal_password_is_refused_with_pointer_to_env(tmp_path: Path) -> None:
    text = '[ledger]\nurl = "postgresql://alice:s3cret@db.internal/prod"\n'
    with pytest.raises(ManifestError, match=r"literal password.*env:NAME") as info:
        load_manifest(write(tmp_path, text))
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://alice@db/prod?password=hunter22", "?password=***"),
        ("postgresql://alice@db/prod?sslmode=require&sslpassword=k3yphrase", "&sslpassword=***"),
        ("mysql+pymysql://alice@db/prod?charset=utf8mb4&passwd=hunter22", "&passwd=***"),
    ],
)
def test_a_password_in_the_query_string_is_refused_too(
    tmp_path: Path, url: str, shown: str
) -> None:
    with pytest.raises(ManifestError, match=r"literal password.*env:NAME") as info:
        load_manifest(write(tmp_path, f'[ledger]\nurl = "{url}"\n'))
    assert shown in str(info.value)
    assert "hunter22" not in str(info.value)
    assert "k3yphrase" not in str(info.value)


def test_location_masks_every_password_of_a_literal_url() -> None:
    spec = SourceSpec("ledger", url_ref="postgresql://a:s3cret@db/prod?password=hunter22")
    assert spec.location() == "postgresql://a:***@db/prod?password=***"
    assert SourceSpec("ledger", url_ref="a:s3cret@db").location() == "<unparsable url>"


def test_url_without_password_is_allowed(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, '[ledger]\nurl = "postgresql://alice@db/prod"\n'))
    assert manifest.sources["ledger"].url() == "postgresql://alice@db/prod"


def test_sqlite_path_becomes_a_database(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, '[events]\npath = "store/session.db"\n'))
    events = manifest.sources["events"]
    assert events.is_database and events.url_ref is None
    assert events.sqlite_path == (tmp_path / "store" / "session.db").resolve()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[ledger]\npath = "a.csv"\nurl = "env:X"\n', "exactly one of url, path or paths"),
        ('[ledger]\npath = "a.csv"\nformat = "avro"\n', "format is not one the kit reads"),
        ('[ledger]\nurl = "env:X"\nformat = "parquet"\n', "reads one snapshot folder"),
        ('[ledger]\npath = "a.csv"\ncolour = "red"\n', r"unknown keys: \['colour'\]"),
        ('flavour = 1\n[ledger]\npath = "a.csv"\n', r"unknown keys: \['flavour'\]"),
        ('title = "x"\n', "names no evidence source"),
        (
            'window = { start = "2026-11-29T02:30:00", end = "2026-11-29T04:00:00Z" }\n'
            '[ledger]\npath = "a.csv"\n',
            "naive datetime",
        ),
        (
            'window = { start = "2026-11-29T05:00:00Z", end = "2026-11-29T04:00:00Z" }\n'
            '[ledger]\npath = "a.csv"\n',
            "window ends before it starts",
        ),
        (  # TOML local times and dates: no instant at all
            'window = { start = 02:30:00, end = 2026-11-29T04:00:00Z }\n[ledger]\npath = "a.csv"\n',
            r"window.start is not a timestamp: datetime.time\(2, 30\)",
        ),
        (
            "window = { start = 2026-11-29, end = 2026-11-29T04:00:00Z }\n"
            '[ledger]\npath = "a.csv"\n',
            "window.start is not a timestamp",
        ),
        ('[ledger]\nurl = "env:not-a-name"\n', "invalid environment variable"),
        ('[ledger]\npath = "a.csv"\ncolumns = { status = 3 }\n', "columns must map"),
        ('[ledger\npath = "a.csv"\n', "not valid TOML"),
    ],
)
def test_bad_manifests_say_what_and_how_to_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifest(write(tmp_path, text))


def test_missing_manifest_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="incidentkit simulate"):
        load_manifest(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[events]\npaths = "x.db"\n',
            r"paths must be a list of file names, not one text: \'x.db\'\. "
            r'write paths = \["x.db"\] \(or path = "x.db" for one file\)',
        ),
        ('[events]\npath = ["a.jsonl", "b.jsonl"]\n', r'write paths = \["a.jsonl", "b.jsonl"\]'),
        ("[events]\npaths = []\n", "paths must be a non-empty list"),
        ('[events]\npaths = ["a.jsonl", 3]\n', "list of file names as text"),
        ("[events]\npath = 3\n", 'write path = "events.jsonl"'),
    ],
)
def test_path_is_one_text_and_paths_a_list(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifest(write(tmp_path, text))
    fixed = load_manifest(write(tmp_path, '[events]\npaths = ["x.db"]\n')).sources["events"]
    assert fixed.sqlite_path == (tmp_path / "x.db").resolve()


# -- max_bytes_billed: the cap of every BigQuery query ([events], [diagnostics]) ----------------


def test_max_bytes_billed_is_kept_for_a_bigquery_table(tmp_path: Path) -> None:
    text = (
        '[events]\nurl = "env:AGENT_EVENTS"\nmax_bytes_billed = 1073741824\n\n'
        '[diagnostics]\nurl = "bigquery://my-project/agent_analytics"\n'
        'format = "bigquery-agent-analytics"\nmax_bytes_billed = 5000000\n'
    )
    sources = load_manifest(write(tmp_path, text)).sources
    assert sources["events"].max_bytes_billed == 1073741824
    assert sources["diagnostics"].max_bytes_billed == 5000000
    plain = load_manifest(write(tmp_path, '[events]\nurl = "env:AGENT_EVENTS"\n'))
    assert plain.sources["events"].max_bytes_billed is None  # the default applies when read


@pytest.mark.parametrize(
    ("value", "shown"),
    [("0", ": 0."), ("-5", ": -5."), ("1.5e10", ": 15000000000.0."), ('"10GiB"', ": '10GiB'."),
     ("true", ": True.")],
)  # fmt: skip
def test_max_bytes_billed_must_be_a_positive_whole_number(
    tmp_path: Path, value: str, shown: str
) -> None:
    text = f'[events]\nurl = "env:AGENT_EVENTS"\nmax_bytes_billed = {value}\n'
    with pytest.raises(ManifestError, match="max_bytes_billed must be a positive whole") as info:
        load_manifest(write(tmp_path, text))
    said = str(info.value)
    assert shown in said and "write max_bytes_billed = 10737418240" in said


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ('path = "agent_events.jsonl"', "path/paths"),
        ('url = "postgresql://reader@db.internal/prod"', "postgresql://reader@db.internal/prod"),
    ],
)
def test_max_bytes_billed_needs_a_bigquery_url(tmp_path: Path, source: str, where: str) -> None:
    text = f"[events]\n{source}\nmax_bytes_billed = 1000000\n"
    with pytest.raises(ManifestError, match="reads no BigQuery table") as info:
        load_manifest(write(tmp_path, text))
    assert where in str(info.value) and "bigquery://PROJECT/DATASET" in str(info.value)


def test_max_bytes_billed_belongs_to_the_sections_that_read_the_table(tmp_path: Path) -> None:
    text = '[ledger]\nurl = "env:LEDGER"\nmax_bytes_billed = 1000000\n'
    with pytest.raises(ManifestError, match=r"\[ledger\] has unknown keys: \['max_bytes_billed'\]"):
        load_manifest(write(tmp_path, text))
