"""The triage card computed in the BigQuery Agent Analytics table (``[events] url =
"bigquery://PROJECT/DATASET"``) equals the in-memory card of the same rows' export.

No BigQuery server runs here. The rows are the real ``BigQueryAgentAnalyticsPlugin``'s
(``adk2_world``: a ``max_llm_calls`` runaway, a resumable app with compaction and a rewind),
put into a DuckDB table as ``tests/sources/events/test_bigquery_live.py`` does; the card's
connection to the bigquery URL is a read-only connection to that DuckDB table (the engine the
kit would open is swapped for it), so every query runs for real on DuckDB. The BigQuery SQL is
compiled with the real ``sqlalchemy_bigquery`` dialect (throwaway credentials, no network)
and read as text.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlalchemy as sa
from plugin_rows import duckdb_table

from incidentkit.baselines import analytics, dialects
from incidentkit.flows import engine_card
from incidentkit.flows.overview import steps
from incidentkit.manifest import Filters, SourceSpec, Window, parse_manifest
from incidentkit.sources import sql
from incidentkit.sources.events import bigquery_live

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("bigquery_live")]
URL = "bigquery://ik-test-project/agent_analytics"
TABLE = "agent_events"
FORMAT = "bigquery-agent-analytics"
COMPARED = ["app", "check", "severity", "count", "title", "flow", "evidence", "session_id"]
NOT_IN_ENGINE = ("state-can-vanish", "growing-classes", "heap-growth", "orphans")
"""Checks the table cannot feed: NOT_CHECKED in the engine (no ledger, redacted state keys,
the JVM's files), compared apart."""
LATER = pd.Timedelta(minutes=5)
"""How long after its last row the hung fleet is judged: past the 60 s client timeout."""


@pytest.fixture(scope="module")
def w() -> ModuleType:
    return importlib.import_module("adk.adk2_world")


@pytest.fixture(scope="module")
def rows(w: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """The rows the real plugin wrote for two apps (``ik_limit``, ``ik_markers``)."""
    root = tmp_path_factory.mktemp("analytics-card")
    worlds = [
        w.build_analytics(root / "analytics").analytics,
        w.build_analytics_markers(root / "markers").analytics,
    ]
    return pa.concat_tables([world.table for world in worlds])


def hung(table: pa.Table) -> pa.Table:
    """``table`` without the rows of the limit app's runaway invocation after its second tool
    call started: the tool never answered, the invocation is open."""
    kinds = table.column("event_type").to_pylist()
    invocations = table.column("invocation_id").to_pylist()
    refused = next(i for k, i in zip(kinds, invocations, strict=True) if k == "NODE_ERROR")
    mine = pc.equal(table.column("invocation_id"), pa.scalar(str(refused)))
    tools = pc.equal(table.column("event_type"), pa.scalar("TOOL_STARTING"))
    starts = table.filter(pc.and_(mine, tools))
    cut = starts.column("timestamp")[1]
    kept = table.filter(pc.invert(pc.and_(mine, pc.greater(table.column("timestamp"), cut))))
    return kept


def _duckdb(path: Path, table: pa.Table) -> sa.Engine:
    """``table`` as the DuckDB table ``agent_events`` (JSON columns of type JSON, as
    BigQuery's), opened read-only."""
    con = duckdb.connect(str(path))
    try:
        duckdb_table(con, TABLE, table)
    finally:
        con.close()
    return sa.create_engine(
        f"duckdb:///{path}", connect_args={"read_only": True}, poolclass=sa.pool.NullPool
    )


def _export(w: ModuleType, folder: Path, table: pa.Table) -> Path:
    """``table`` as ``bq extract`` writes it, named by a manifest of its own."""
    folder.mkdir()
    lines = w.export_rows(table, nested=False)
    (folder / "agent_events.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in lines), encoding="utf-8"
    )
    (folder / "evidence.toml").write_text(
        f'[events]\npath = "agent_events.jsonl"\nformat = "{FORMAT}"\n', encoding="utf-8"
    )
    return folder


@pytest.fixture
def live_spec(tmp_path: Path) -> SourceSpec:
    """``[events] url = "env:AGENT_EVENTS"`` (the bigquery URL), as a manifest gives it."""
    text = '[events]\nurl = "env:AGENT_EVENTS"\n'
    return parse_manifest(tomllib.loads(text), base=tmp_path).sources["events"]


Cards = tuple[pd.DataFrame, pd.DataFrame, engine_card.Travelled, str, sa.Engine]


@pytest.fixture
def cards(
    w: ModuleType, tmp_path: Path, live_spec: SourceSpec, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """A function of the plugin's rows (and as_of): the engine card over them in DuckDB, the
    in-memory card of their export, what travelled, where the engine computed, and the
    DuckDB engine."""
    engines: list[sa.Engine] = []

    def made(table: pa.Table, name: str, later: pd.Timedelta | None = None) -> Cards:
        duck = _duckdb(tmp_path / f"{name}.duckdb", table)
        engines.append(duck)

        def opened(spec: SourceSpec, environ: Any, *, what: str) -> sa.Engine:
            assert spec.url(environ) == URL  # only the table's own section is swapped
            return duck

        pack = _export(w, tmp_path / name, table)
        as_of: object = ""
        if later is not None:
            last = pd.Timestamp(pc.max(table.column("timestamp")).as_py())
            as_of = (last + later).isoformat()
        incident, settings = steps.setup(pack, card_engine="no", as_of=as_of)
        memory = steps.triage(incident, settings).card
        monkeypatch.setattr(sql, "open_source", opened)
        sources = {"events": live_spec}
        environ = {"AGENT_EVENTS": URL}
        apps, where = engine_card.fleet_apps(sources, incident.filters, environ)
        assert apps == list(settings.apps) and where == "the Agent Analytics table"
        with engine_card.opened(
            apps=apps,
            filters=incident.filters,
            as_of=settings.as_of,
            profiles={app: steps.profile_of(incident, app) for app in apps},
            sources=sources,
            environ=environ,
        ) as context:
            engine = engine_card.engine_lines(context)
            computed = context.computed("events")
        monkeypatch.undo()
        return engine, memory, context.travelled, computed, duck

    yield made
    for engine in engines:
        engine.dispose()


def keyed(card: pd.DataFrame) -> pd.DataFrame:
    kept = card.loc[~card["check"].isin(NOT_IN_ENGINE), COMPARED].astype(object)
    kept = kept.where(kept.notna(), None)
    return kept.sort_values(["app", "check"], kind="stable").reset_index(drop=True)


def assert_equal_cards(engine: pd.DataFrame, memory: pd.DataFrame) -> None:
    """Line for line equal on every check the table feeds; the others NOT_CHECKED, why said."""
    pd.testing.assert_frame_equal(keyed(engine), keyed(memory))
    orphans = engine.loc[engine["check"].eq("orphans")]
    assert len(orphans) and orphans["severity"].eq("NOT_CHECKED").all()
    assert orphans["title"].str.contains("keeps no run ledger").all()
    assert memory.loc[memory["check"].eq("orphans"), "severity"].eq("NOT_CHECKED").all()
    state = engine.loc[engine["check"].eq("state-can-vanish")]
    assert len(state) and state["severity"].eq("NOT_CHECKED").all()
    assert state["title"].str.contains(r"\[REDACTED\]").all()


def test_the_engine_card_equals_the_card_of_the_export(rows: pa.Table, cards: Any) -> None:
    engine, memory, travelled, computed, duck = cards(rows, "whole")
    assert_equal_cards(engine, memory)
    assert set(engine["app"].dropna()) == {"ik_limit", "ik_markers"}
    calls = engine.loc[engine["check"].eq("over-call-limit")].set_index("app")
    assert calls.loc["ik_limit", "severity"] == "CRITICAL"  # the max_llm_calls hit
    assert "maxLlmCalls 4 (the limit error's message)" in calls.loc["ik_limit", "title"]
    errors = engine.loc[engine["check"].eq("quiet-errors")].set_index("app")
    assert errors.loc["ik_limit", "count"] == 1  # the limit's NODE_ERROR, counted apart
    assert computed == f"computed in DuckDB over {TABLE}"
    with sql.connect(duck, what="test") as conn:
        table = analytics.AnalyticsTable(bigquery_live.table_info(conn, TABLE, what="test"))
        last = conn.execute(analytics.latest(conn, table, Filters())).scalar_one()
    newest = pc.max(rows.column("timestamp")).as_py()
    assert last == pytest.approx(newest.timestamp(), abs=1e-6)
    judged = ~engine["check"].isin(NOT_IN_ENGINE) & engine["severity"].ne("NOT_CHECKED")
    assert engine.loc[judged, "detail"].str.startswith(computed).all()
    # aggregates, error rows and one row per invocation travel; never a JSON column
    assert not travelled.columns & {"content", "attributes", "latency_ms", "content_parts"}
    assert travelled.rows < rows.num_rows / 4


def test_an_invocation_open_past_the_timeout_is_flagged_as_in_memory(
    rows: pa.Table, cards: Any
) -> None:
    """The runaway invocation's rows cut after its second tool call started (the tool never
    answered), judged five minutes after the last row: open past the 60 s client timeout in
    both cards; its session's rows are the only ones read whole."""
    cut = hung(rows)
    engine, memory, travelled, _, _ = cards(cut, "hung", LATER)
    assert_equal_cards(engine, memory)
    past = engine.loc[engine["check"].eq("open-past-timeout")].set_index("app")
    assert past.loc["ik_limit", "severity"] in ("WARNING", "CRITICAL")
    assert past.loc["ik_limit", "count"] == 1
    assert past.loc["ik_markers", "count"] == 0
    assert 0 < travelled.loaded["events"] < cut.num_rows


# -- the BigQuery SQL ------------------------------------------------------------------------------


@pytest.fixture
def bigquery(w: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> sa.Engine:
    """An engine of the real ``sqlalchemy_bigquery`` dialect on throwaway application-default
    credentials (no network: nothing is sent)."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(w.fake_adc(tmp_path / "adc.json")))
    return sql.open_engine(URL, what="events")


def plugin_columns() -> list[str]:
    from google.adk.plugins.bigquery_agent_analytics_plugin import _get_events_schema

    return [field.name for field in _get_events_schema()]


WINDOW = Window(pd.Timestamp("2026-12-06T10:00:00Z"), pd.Timestamp("2026-12-06T12:30:00Z"))
FILTERS = Filters(window=WINDOW, session_ids=("sess-1", "sess-2"), invocation_ids=("inv-9",))
FLEET = ("shop-app", "billing-app")
DML = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|CREATE|DROP|ALTER|TRUNCATE|GRANT|CALL|EXECUTE|DECLARE|SET)\b"
)


@pytest.mark.parametrize("name", ["apps", "latest", "per_invocation", "errors"])
def test_every_query_compiles_for_bigquery_as_a_bound_select_on_the_partitions(
    bigquery: sa.Engine, name: str
) -> None:
    assert dialects.check_engine(bigquery, what="engine card") == "bigquery"
    table = analytics.with_columns(plugin_columns())
    statement = analytics.statements(bigquery, table, FILTERS, FLEET)[name]
    query = statement.compile(bigquery)
    text = " ".join(query.string.split())
    assert text.startswith("SELECT ") and not DML.search(text.upper())
    assert ";" not in text
    # the partition filter: the window on timestamp itself, bound as TIMESTAMP
    assert (
        f"`{TABLE}`.`timestamp` >= %(w_start:TIMESTAMP)s AND "
        f"`{TABLE}`.`timestamp` < %(w_end:TIMESTAMP)s"
    ) in text
    assert f"`{TABLE}`.`session_id` IN UNNEST(%(sid:STRING)s)" in text
    assert f"`{TABLE}`.`invocation_id` IN UNNEST(%(inv:STRING)s)" in text
    if name != "latest":
        assert "json_value(" in text.lower() and "json_extract" not in text.lower()
    params = query.params
    assert (params["w_start"], params["w_end"]) == (
        WINDOW.start.to_pydatetime(),
        WINDOW.end.to_pydatetime(),
    )
    assert params["sid"] == ["sess-1", "sess-2"] and params["inv"] == ["inv-9"]
    if name not in ("apps", "latest"):
        assert "IN UNNEST(%(card_apps:STRING)s)" in text and params["card_apps"] == list(FLEET)
    for value in ("shop-app", "billing-app", "sess-1", "inv-9", "2026-12-06"):
        assert value not in query.string  # every value is a parameter


def test_the_analytics_shape_is_chosen_by_the_url_or_the_format(
    live_spec: SourceSpec, tmp_path: Path
) -> None:
    assert engine_card.in_engine(live_spec)
    assert engine_card.is_analytics(live_spec, {"AGENT_EVENTS": URL})
    assert not engine_card.is_analytics(live_spec, {"AGENT_EVENTS": "postgresql://r@db/prod"})
    live = {"AGENT_EVENTS": URL}
    assert engine_card.engine_chosen("auto", {"events": live_spec}, environ=live)  # a warehouse
    text = f'[events]\nurl = "env:DB"\nformat = "{FORMAT}"\n'
    named = parse_manifest(tomllib.loads(text), base=tmp_path).sources["events"]
    assert engine_card.is_analytics(named, {})
