"""The triage card computed in ClickHouse (``card_engine``) equals the in-memory card line for
line: the simulated incidents, written into SQLite as the other engine tests write them, are
copied into ClickHouse tables of ADK Java's shape (``ts DateTime64(6, 'UTC')``, the event as
JSON text) and a run ledger, on the real embedded engine (chDB, through clickhouse-connect's
chdb backend and its ``clickhousedb`` SQLAlchemy dialect), and judged both ways (and the
in-memory card of the frames loaded from ClickHouse is the one loaded from SQLite). The kit's
ClickHouse connections refuse writes; window bounds hold to the microsecond; an aggregate over
no row is NULL, as on every other engine."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from test_engine_card import (
    COMPARED,
    ENGINE_ONLY_IN_MEMORY,
    SCALE,
    SCENARIO,
    UNREAD,
    opened_card,
    without_sections,
)

from incidentkit.baselines import queries
from incidentkit.errors import SourceError
from incidentkit.flows import engine_card
from incidentkit.flows.overview import steps
from incidentkit.flows.overview.card import CHECKS
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.simulate import simulate
from incidentkit.sources import sql

pytestmark = pytest.mark.xdist_group("chdb")  # chDB runs one engine folder per process

EVENTS_DDL = """CREATE TABLE {db}.adk_event (
    event_id String, app_name String, user_id String, session_id String,
    invocation_id String, ts DateTime64(6, 'UTC'), event String
) ENGINE = MergeTree ORDER BY (app_name, session_id, ts)"""
"""ADK Java's event table in ClickHouse: the event document as JSON text."""
LEDGER_DDL = """CREATE TABLE {db}.agent_run (
    run_id String, app_name String, user_id String, session_id String,
    invocation_id Nullable(String), request String, status String, owner Nullable(String),
    lease_until Nullable(DateTime64(6, 'UTC')), attempts Int32,
    started_at DateTime64(6, 'UTC'), updated_at DateTime64(6, 'UTC')
) ENGINE = MergeTree ORDER BY (app_name, started_at)"""
"""The run ledger (``store.agent_run``'s columns) in ClickHouse."""
TIMES = {"adk_event": ("ts",), "agent_run": ("lease_until", "started_at", "updated_at")}
CH_ENV = "INCIDENT_CH_URL"
SCENARIOS = [
    ("runaway", "over-call-limit"),
    ("latency_cliff", "open-past-timeout"),
    ("crash_recovery", "orphans"),
    ("vanished_state", "overlapping-invocations"),
]


@dataclass
class Store:
    """The module's chDB folder, written by a client of its own that stays open."""

    folder: Path
    writer: Any

    @property
    def url(self) -> str:
        return f"chdb://{self.folder}"

    def command(self, text: str) -> object:
        return self.writer.command(text)

    def count(self, table: str) -> int:
        return int(self.writer.query(f"SELECT count() FROM {table}").result_rows[0][0])

    def copy(self, sqlite_url: str, database: str) -> None:
        """The ledger and the events of the SQLite store into ClickHouse tables of
        ``database``, every value as written (the event's JSON text untouched)."""
        self.command(f"CREATE DATABASE {database}")
        self.command(EVENTS_DDL.format(db=database))
        self.command(LEDGER_DDL.format(db=database))
        source = sa.create_engine(sqlite_url, poolclass=sa.pool.NullPool)
        try:
            for table, times in TIMES.items():
                rows = pd.read_sql(sa.text(f"SELECT * FROM {table}"), source, dtype=object)
                for column in times:
                    rows[column] = pd.to_datetime(rows[column], utc=True).astype(object)
                rows = rows.where(rows.notna(), None)
                self.writer.insert(
                    f"{database}.{table}", rows.values.tolist(), column_names=list(rows.columns)
                )
                assert self.count(f"{database}.{table}") == len(rows)
        finally:
            source.dispose()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    import clickhouse_connect

    folder = tmp_path_factory.mktemp("chdb")
    writer = clickhouse_connect.get_client(interface="chdb", path=str(folder))
    yield Store(folder, writer)
    writer.close()


def in_clickhouse(
    scenario: str,
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    database: str | None = None,
    scale: int = 1,
) -> tuple[Path, Path]:
    """The scenario's pack over SQLite, and a copy whose ledger and events are the same rows
    in ClickHouse (``database``, default the scenario's name; the journal stays in SQLite)."""
    database = database or scenario
    sqlite_url = f"sqlite:///{tmp_path / 'incident.sqlite'}"
    pack = simulate(scenario, tmp_path / scenario, into=sqlite_url, scale=scale)
    monkeypatch.setenv("INCIDENT_DB_URL", sqlite_url)
    monkeypatch.setenv(CH_ENV, store.url)
    without_sections(pack, UNREAD)
    store.copy(sqlite_url, database)
    copy = tmp_path / f"{scenario}-clickhouse"
    shutil.copytree(pack, copy)
    manifest = copy / "evidence.toml"
    text = manifest.read_text()
    for section, table in (("ledger", "agent_run"), ("events", "adk_event")):
        block = re.compile(
            rf'(\[{section}\]\n)url = "env:INCIDENT_DB_URL"\n((?:[^\[\n].*\n)*?)table = "{table}"'
        )
        text, found = block.subn(rf'\1url = "env:{CH_ENV}"\n\2table = "{database}.{table}"', text)
        assert found == 1, section
    manifest.write_text(text)
    return pack, copy


def keyed(card: pd.DataFrame) -> pd.DataFrame:
    kept = card.loc[~card["check"].isin(ENGINE_ONLY_IN_MEMORY), COMPARED].astype(object)
    kept = kept.where(kept.notna(), None)
    return kept.sort_values(["app", "check"], kind="stable").reset_index(drop=True)


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "needs_a_look"), SCENARIOS)
def test_the_clickhouse_card_equals_the_in_memory_card(
    scenario: str,
    needs_a_look: str,
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pack, copy = in_clickhouse(scenario, store, tmp_path, monkeypatch)
    incident, settings = steps.setup(copy, card_engine="yes")
    report = steps.triage(incident, settings)
    memory_incident, memory_settings = steps.setup(pack, card_engine="no")
    memory = steps.triage(memory_incident, memory_settings).card
    assert settings.as_of == memory_settings.as_of  # one MAX per table, in ClickHouse
    engine = report.card
    pd.testing.assert_frame_equal(keyed(engine), keyed(memory))
    assert report.computed == (
        f"computed in ClickHouse over {scenario}.adk_event, {scenario}.agent_run"
    )
    judged = ~engine["check"].isin(ENGINE_ONLY_IN_MEMORY) & engine["severity"].ne("NOT_CHECKED")
    assert judged.sum() >= len(settings.apps) * 5  # every engine check, every app
    assert engine.loc[judged, "detail"].str.startswith("computed in ClickHouse").all()
    flagged = engine.loc[engine["check"].eq(needs_a_look)]
    assert flagged["severity"].isin(["CRITICAL", "WARNING"]).any()  # the incident's own line
    state = engine.loc[engine["check"].eq("state-can-vanish")]
    assert len(state) and state["severity"].eq("NOT_CHECKED").all()
    # the loaders read the same frames from ClickHouse: the in-memory card over them is the same
    loaded = steps.triage(*steps.setup(copy, card_engine="no")).card
    whole = [*COMPARED, "detail"]
    pd.testing.assert_frame_equal(
        loaded[whole].sort_values(["app", "check"], kind="stable").reset_index(drop=True),
        memory[whole].sort_values(["app", "check"], kind="stable").reset_index(drop=True),
    )


@pytest.mark.slow
def test_only_aggregates_and_flagged_rows_travel_from_clickhouse(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No query of the card returns an event document; the loader reads the flagged
    invocations' events from ClickHouse, fewer than the table holds."""
    _pack, copy = in_clickhouse(
        SCENARIO, store, tmp_path, monkeypatch, database="travel", scale=SCALE
    )
    with opened_card(copy) as context:
        lines = engine_card.engine_lines(context)
        travelled = context.travelled
    assert set(lines["check"]) == set(CHECKS)
    assert not travelled.columns & {"event", "request"}
    events = store.count("travel.adk_event")
    assert travelled.rows < events / 2
    assert 0 < travelled.loaded.get("events", 0) < events


# The kit's ClickHouse connections: read-only, exact window bounds, SQL's NULL aggregates.

STAMP = pd.Timestamp("2026-11-29 03:10:07.250001", tz="UTC")
US = pd.Timedelta(microseconds=1)


@pytest.fixture(scope="module")
def probe(store: Store) -> str:
    """Database ``probe``: one event per microsecond around :data:`STAMP`, in ADK Java's
    table (the window tests), and an empty ledger."""
    store.command("CREATE DATABASE probe")
    store.command(EVENTS_DDL.format(db="probe"))
    store.command(LEDGER_DDL.format(db="probe"))
    rows = [
        [f"e{i}", "app", "u", "s", "inv", (STAMP + i * US).to_pydatetime(), "{}"]
        for i in range(-2, 3)
    ]
    columns = ["event_id", "app_name", "user_id", "session_id", "invocation_id", "ts", "event"]
    store.writer.insert("probe.adk_event", rows, column_names=columns)
    return "probe"


def test_writes_through_the_kits_connection_are_refused(store: Store, probe: str) -> None:
    engine = sql.open_engine(store.url, what="test")
    assert engine.dialect.name == "clickhousedb"
    before = store.count("probe.adk_event")
    writes = [
        "INSERT INTO probe.adk_event (event_id) VALUES ('x')",
        "ALTER TABLE probe.adk_event DELETE WHERE 1",
        "TRUNCATE TABLE probe.adk_event",
        "DROP TABLE probe.adk_event",
        "CREATE TABLE probe.other (a Int32) ENGINE = Memory",
        "SET readonly = 0",
    ]
    for statement in writes:
        with (
            pytest.raises(SourceError, match="the database refused a statement") as info,
            sql.connect(engine, what="test") as conn,
        ):
            conn.exec_driver_sql(statement)
        assert "readonly" in str(info.value).lower(), statement
    insert = sa.table("adk_event", sa.column("event_id"), schema="probe").insert()
    with (
        pytest.raises(SourceError, match="the database refused a statement"),
        sql.connect(engine, what="test") as conn,
    ):
        conn.execute(insert, {"event_id": "y"})
    # a statement's own settings would beat the connection's readonly: never sent
    lifted = sa.text("SELECT 1").execution_options(settings={"readonly": 0})
    with (
        pytest.raises(SourceError, match="no statement with settings") as caught,
        sql.connect(engine, what="test") as conn,
    ):
        conn.execute(lifted)
    assert caught.value.value == ["readonly"]
    with sql.connect(engine, what="test") as conn:  # reads still work
        assert conn.execute(sa.text("SELECT count() FROM probe.adk_event")).scalar() == before
    engine.dispose()
    assert store.count("probe.adk_event") == before
    assert "other" not in str(store.writer.query("SHOW TABLES FROM probe").result_rows)


def test_window_bounds_hold_to_the_microsecond(store: Store, probe: str) -> None:
    """A window bound on a ``DateTime64(6, 'UTC')`` column keeps its microseconds (a bound
    ``datetime`` would lose them in clickhouse-connect): start included, end excluded."""
    spec = SourceSpec("events", url_ref=store.url, table=f"{probe}.adk_event")
    engine = sql.open_source(spec, None, what="test")
    with sql.connect(engine, what="test") as conn:
        table = queries.event_table(conn, spec, what="test")
        on = sql.Predicates.named(table.names, time="ts", time_storage=table.storage)
        event_id = table.column("event_id")
        for start, end, expected in [
            (STAMP, STAMP + US, ["e0"]),
            (STAMP - US, STAMP + 2 * US, ["e-1", "e0", "e1"]),
            (STAMP + 3 * US, STAMP + 9 * US, []),
            (STAMP - 10 * US, STAMP + 10 * US, ["e-1", "e-2", "e0", "e1", "e2"]),
        ]:
            filters = Filters(window=Window(start, end))
            found = conn.execute(
                sa.select(event_id)
                .select_from(table.info.clause)
                .where(*sql.where(conn, filters, on, table.info))
                .order_by(event_id)
            ).scalars()
            assert sorted(found) == sorted(expected), (start, end)
        top = queries.latest_seconds(
            conn, spec, Filters(window=Window(STAMP, STAMP + US)), what="t"
        )
        assert top == pytest.approx(STAMP.timestamp(), abs=1e-7)
    engine.dispose()


def test_an_aggregate_over_no_row_is_null_as_elsewhere(store: Store, probe: str) -> None:
    """ClickHouse's ``max`` of no row is 0 by default: the kit's connections ask for NULL, so
    the latest time of an empty window (or table) is None, not 1970."""
    engine = sql.open_engine(store.url, what="test")
    empty = Filters(window=Window(STAMP + 1000 * US, STAMP + 2000 * US))
    with sql.connect(engine, what="test") as conn:
        for section, table in (("events", "adk_event"), ("ledger", "agent_run")):
            spec = SourceSpec(section, url_ref=store.url, table=f"{probe}.{table}")
            assert queries.latest_seconds(conn, spec, empty, what="test") is None
    engine.dispose()


def test_clickhouse_urls_are_checked_before_any_connection(tmp_path: Path) -> None:
    for url in ("clickhouse://u@127.0.0.1:1/db", "clickhousedb+https://u@127.0.0.1:1/db"):
        assert sql.open_engine(url, what="test").dialect.name == "clickhousedb"
    with pytest.raises(SourceError, match="options the kit does not take") as info:
        sql.open_engine("clickhousedb://u@127.0.0.1:1/db?readonly=0&secure=true", what="test")
    assert info.value.value == ["readonly"]
    missing = tmp_path / "nothing here"
    with pytest.raises(SourceError, match="no chDB folder at this URL"):
        sql.open_engine(f"chdb://{missing}", what="test")
    with pytest.raises(SourceError, match="no chDB folder at this URL"):
        sql.open_engine("chdb://relative/folder", what="test")
    cut = tmp_path / "a"
    cut.mkdir()  # chdb:///…/a#b would open …/a: a # is refused, unless written %23
    with pytest.raises(SourceError, match="no chDB folder at this URL") as hash_sign:
        sql.open_engine(f"chdb://{cut}#b", what="test")
    assert "%23" in hash_sign.value.fix
    for native in ("clickhouse+native://u@127.0.0.1:9000/db", f"chdb+x://{cut}"):
        with pytest.raises(SourceError, match="over HTTP"):
            sql.open_engine(native, what="test")
    server = sql.open_engine("clickhousedb://u:hunter22@127.0.0.1:1/db", what="t")
    with (
        pytest.raises(SourceError, match="cannot connect to the database") as down,
        sql.connect(server, what="t"),
    ):
        pass
    assert "hunter22" not in str(down.value)
