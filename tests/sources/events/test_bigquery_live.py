"""The BigQuery Agent Analytics table read live (``url = "bigquery://PROJECT/DATASET"``).

No BigQuery server runs here. The query is compiled with the real ``sqlalchemy_bigquery``
dialect and read as text; the very same Core select runs on DuckDB (``duckdb_engine``) over a
table holding the rows the real ``BigQueryAgentAnalyticsPlugin`` wrote (``adk2_world``: its
Storage Write API batches, captured), and must give the frames the ``bq extract`` files of the
same rows give. The engine's job configuration is read from the client the dialect builds from
throwaway credentials (no network).
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_rows import duckdb_table

from incidentkit.errors import IncidentkitError, ManifestError, SchemaError, SourceError
from incidentkit.manifest import (
    DEFAULT_MAX_BYTES_BILLED,
    Filters,
    SourceSpec,
    Window,
    parse_manifest,
)
from incidentkit.sources import events, sql
from incidentkit.sources.events import bigquery_analytics, bigquery_live
from incidentkit.sources.events.bigquery_analytics import COLUMNS, FORMAT
from incidentkit.sources.loaded import RejectSink

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("bigquery_live")]  # the plugin's rows
FRAMES = ("events", "calls", "responses", "state_writes", "session_state")
URL = "bigquery://ik-test-project/agent_analytics"
TABLE = "agent_events"


# -- the plugin's rows: written by the real plugin, in DuckDB and as bq extract files -----------


@pytest.fixture(scope="module")
def w() -> ModuleType:
    # tests/ is on sys.path (its conftest.py is in no package): the ADK worlds' package
    return importlib.import_module("adk.adk2_world")


@pytest.fixture(scope="module")
def worlds(w: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Two runs of the real plugin (two apps): a max_llm_calls runaway, and a resumable app
    with compaction and a rewind."""
    root = tmp_path_factory.mktemp("bigquery-live")
    return [
        w.build_analytics(root / "analytics").analytics,
        w.build_analytics_markers(root / "markers").analytics,
    ]


@pytest.fixture(scope="module")
def duck(worlds: list[Any], tmp_path_factory: pytest.TempPathFactory) -> sa.Engine:
    """A DuckDB file holding the plugin's rows (``agent_events``), the same rows without
    ``event_id`` (``old_events``: a table from before it), and one lacking ``invocation_id``;
    opened read-only."""
    path = tmp_path_factory.mktemp("duckdb") / "bigquery.duckdb"
    whole = pa.concat_tables([world.table for world in worlds])
    con = duckdb.connect(str(path))
    try:
        duckdb_table(con, TABLE, whole)
        con.execute(f"CREATE TABLE old_events AS SELECT * EXCLUDE (event_id) FROM {TABLE}")
        con.execute(f"CREATE TABLE no_invocations AS SELECT * EXCLUDE (invocation_id) FROM {TABLE}")
    finally:
        con.close()
    return sa.create_engine(
        f"duckdb:///{path}", connect_args={"read_only": True}, poolclass=sa.pool.NullPool
    )


def export_spec(worlds: list[Any]) -> SourceSpec:
    """[events] over the worlds' ``bq extract`` files."""
    return SourceSpec(section="events", paths=tuple(world.extract for world in worlds))


def live(
    duck: sa.Engine, filters: Filters, table: str = TABLE
) -> tuple[dict[str, pd.DataFrame], pd.DataFrame, RejectSink]:
    """The frames, rows and sink of the live reader over DuckDB (the connection as the kit
    opens one)."""
    sink = RejectSink("events")
    with sql.connect(duck, what="events") as conn:
        rows = bigquery_live.read_rows(conn, table, filters, sink)
    return events.analytics_frames(rows, filters, sink), rows, sink


def assert_same(got: Mapping[str, pd.DataFrame], want: Mapping[str, pd.DataFrame]) -> None:
    for name in FRAMES:
        pd.testing.assert_frame_equal(
            got[name].drop(columns=["location"], errors="ignore"),
            want[name].drop(columns=["location"], errors="ignore"),
            obj=name,
        )


def _row_times(worlds: list[Any]) -> pd.DataFrame:
    rows = pd.concat([w.table.select(["timestamp", "event_type"]).to_pandas() for w in worlds])
    ordered: pd.DataFrame = rows.sort_values("timestamp", kind="stable")
    return ordered.reset_index(drop=True)


def edge_window(worlds: list[Any]) -> Window:
    """A window that cuts invocations apart: it opens at a TOOL_STARTING row (its model's
    LLM_RESPONSE just before it) and closes at the last one."""
    times = _row_times(worlds)
    calls = times.loc[times["event_type"].eq("TOOL_STARTING"), "timestamp"]
    return Window(pd.Timestamp(calls.iloc[0]), pd.Timestamp(calls.iloc[-1]))


# -- (b) the same Core select on DuckDB gives the export's frames ---------------------------------


def filter_cases(worlds: list[Any]) -> dict[str, Filters]:
    ev = events.load(export_spec(worlds), Filters()).frames["events"]
    apps = sorted(ev["app_name"].dropna().unique())
    window = edge_window(worlds)
    return {
        "none": Filters(),
        "window": Filters(window=window),
        "app": Filters(app_name=apps[0]),
        "other app": Filters(app_name="no_such_app"),
        "sessions": Filters(session_ids=(str(ev["session_id"].iloc[-1]), "s-none")),
        "invocations": Filters(invocation_ids=(str(ev["invocation_id"].iloc[0]),)),
        "all": Filters(
            window=window, app_name=apps[0], session_ids=tuple(ev["session_id"].unique())
        ),
    }


CASES = ("none", "window", "app", "other app", "sessions", "invocations", "all")


@pytest.mark.parametrize("case", CASES)
def test_the_table_gives_the_frames_of_its_exports(
    worlds: list[Any], duck: sa.Engine, case: str
) -> None:
    filters = filter_cases(worlds)[case]
    exported = events.load(export_spec(worlds), filters)
    got, rows, sink = live(duck, filters)
    assert_same(got, exported.frames)
    assert sink.frame().empty and exported.rejects.empty
    if case == "none":
        assert len(got["events"]) >= 20 and set(got["events"]["app_name"]) == {
            "ik_limit",
            "ik_markers",
        }
        warned = sink.warnings()[["reason", "raw"]].sort_values(["reason", "raw"])
        want = exported.warnings[["reason", "raw"]].sort_values(["reason", "raw"])
        pd.testing.assert_frame_equal(warned.reset_index(drop=True), want.reset_index(drop=True))
    # the location names the row the way BigQuery can find it: table and event_id
    assert rows["location"].str.fullmatch(r"agent_events:[0-9a-f]{32}").all()


def test_a_window_reads_whole_invocations(worlds: list[Any], duck: sa.Engine) -> None:
    """Rows filtered by time alone would cut the invocations at the window's edges apart; the
    query reads every row of the invocations it picks."""
    window = edge_window(worlds)
    filters = Filters(window=window)
    _, rows, _ = live(duck, filters)
    inside = rows["ts"].ge(window.start) & rows["ts"].lt(window.end)
    assert inside.sum() < len(rows)  # rows before and after the window were read
    only = events.analytics_frames(rows.loc[inside], filters, RejectSink("events"))
    exported = events.load(export_spec(worlds), filters).frames
    with pytest.raises(AssertionError):  # what a time filter on rows would give: not this
        assert_same(only, exported)


@pytest.mark.parametrize("case", ["none", "window", "app"])
def test_the_diagnostics_are_the_export_s(worlds: list[Any], duck: sa.Engine, case: str) -> None:
    filters = filter_cases(worlds)[case]
    spec = SourceSpec(section="diagnostics", paths=export_spec(worlds).paths, format=FORMAT)
    want = bigquery_analytics.load_diagnostics(spec, filters)
    _, rows, _ = live(duck, filters)
    got = bigquery_analytics.diagnostics_loaded(rows, filters, RejectSink("diagnostics"))
    lines = got.frames["diagnostics"]
    assert len(lines) >= (10 if case == "none" else 1) and set(lines["kind"]) >= {"run.end"}
    pd.testing.assert_frame_equal(
        lines.drop(columns=["location"]), want.frames["diagnostics"].drop(columns=["location"])
    )
    assert got.rejects.empty and len(got.warnings) == len(want.warnings)


def test_a_table_from_before_event_id_reads_as_its_export(
    worlds: list[Any], duck: sa.Engine, w: ModuleType, tmp_path: Path
) -> None:
    extract = tmp_path / "old_events.jsonl"
    lines = [
        {k: v for k, v in row.items() if k != "event_id"}
        for world in worlds
        for row in w.export_rows(world.table, nested=False)
    ]
    extract.write_text("".join(json.dumps(row) + "\n" for row in lines), encoding="utf-8")
    exported = events.load(SourceSpec(section="events", paths=(extract,)), Filters())
    got, rows, sink = live(duck, Filters(), table="old_events")
    assert_same(got, exported.frames)
    assert sink.frame().empty and len(got["events"]) >= 20
    assert rows["location"].str.fullmatch(r"old_events:row \d+").all()


def test_a_missing_table_or_column_is_a_schema_error(duck: sa.Engine) -> None:
    sink = RejectSink("events")
    with sql.connect(duck, what="events") as conn:
        with pytest.raises(SchemaError, match=r"not there: 'agent_event'\. check the project"):
            bigquery_live.read_rows(conn, "agent_event", Filters(), sink)
        with pytest.raises(SchemaError, match=r"lacks columns .*: \['invocation_id'\]"):
            bigquery_live.read_rows(conn, "no_invocations", Filters(), sink)


# -- (a) the BigQuery SQL ------------------------------------------------------------------------


@pytest.fixture
def credentials(w: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Throwaway application-default credentials (a service-account key valid nowhere), read
    by ``google.auth.default()`` as ADK's plugin reads them; no network."""
    path = Path(w.fake_adc(tmp_path / "adc.json"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    return path


def plugin_columns() -> list[str]:
    from google.adk.plugins.bigquery_agent_analytics_plugin import _get_events_schema

    return [field.name for field in _get_events_schema()]


FILTERS = Filters(
    window=Window(pd.Timestamp("2026-12-06T10:00:00Z"), pd.Timestamp("2026-12-06T12:30:00Z")),
    app_name="shop-app",
    session_ids=("sess-1", "sess-2"),
    invocation_ids=("inv-9",),
)
DML = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|CREATE|DROP|ALTER|TRUNCATE|GRANT|CALL|EXECUTE|DECLARE|SET)\b"
)


def compiled(engine: sa.Engine, filters: Filters = FILTERS) -> Any:
    info = sql.TableInfo(TABLE, tuple(plugin_columns()), frozenset(), frozenset())
    return bigquery_live.statement(info, filters).compile(engine)


def test_the_query_selects_the_plugin_columns_with_bound_filters(credentials: Path) -> None:
    engine = sql.open_engine(URL, what="events")
    query = compiled(engine)
    text = " ".join(query.string.split())
    assert text.startswith("SELECT ") and not DML.search(text.upper())
    assert list(query.statement.selected_columns.keys()) == plugin_columns() == list(COLUMNS)
    for name in ("content", "attributes", "latency_ms"):  # JSON text, as bq extract writes it
        assert f"TO_JSON_STRING(`{TABLE}`.`{name}`) AS `{name}`" in text
    assert f"`{TABLE}`.`content_parts` AS `content_parts`" in text
    # the partition filter: the window (widened by MARGIN) on timestamp, bound as TIMESTAMP
    assert (
        f"`{TABLE}`.`timestamp` >= %(p_start:TIMESTAMP)s AND "
        f"`{TABLE}`.`timestamp` < %(p_end:TIMESTAMP)s"
    ) in text
    assert "`picked`.`timestamp` >= %(w_start:TIMESTAMP)s" in text
    assert f"`{TABLE}`.`session_id` IN UNNEST(%(sid:STRING)s)" in text
    assert f"`{TABLE}`.`invocation_id` IN UNNEST(%(inv:STRING)s)" in text
    assert "JSON_VALUE(`picked`.`attributes`, '$.adk.app_name') = %(app_name:STRING)s" in text
    window = FILTERS.window
    assert window is not None
    params = query.params
    assert (params["p_start"], params["p_end"]) == (
        (window.start - bigquery_live.MARGIN).to_pydatetime(),
        (window.end + bigquery_live.MARGIN).to_pydatetime(),
    )
    assert (params["sid"], params["inv"], params["app_name"]) == (
        ["sess-1", "sess-2"],
        ["inv-9"],
        "shop-app",
    )
    for value in ("shop-app", "sess-1", "inv-9", "2026-12-06"):  # no value is in the SQL
        assert value not in query.string
    bare = " ".join(compiled(engine, Filters()).string.split())
    assert "WHERE" not in bare and "UNNEST" not in bare  # no filter, no condition


def test_the_plugin_partitions_by_day_on_timestamp(worlds: list[Any]) -> None:
    """The table the real plugin creates: DAY partitions on ``timestamp``, the column the
    query's window filter is on."""
    for world in worlds:
        made = world.table_definition
        assert made.time_partitioning.field == "timestamp"
        assert made.time_partitioning.type_ == "DAY"
        assert made.clustering_fields == ["event_type", "agent", "user_id"]


VIEW_PATH = re.compile(
    r"(?:CAST\(\s*)?JSON_(?:VALUE|QUERY)\(\s*(\w+),\s*'(\$[^']*)'\s*\)(?:\s+AS\s+\w+\))?\s+AS\s+(\w+)"
)


def test_the_json_paths_are_those_of_the_plugin_views(worlds: list[Any]) -> None:
    """The fields of ``attributes`` the kit reads (in SQL, the app; in Python, the rest) are
    at the paths the plugin's own ``v_*`` views read them from (``JSON_VALUE(attributes,
    '$.adk.…')``); the app, which no view reads, is where every row the plugin wrote has it."""
    views: dict[str, set[tuple[str, str]]] = {}
    for sql_text in worlds[0].views:
        for column, path, alias in VIEW_PATH.findall(sql_text):
            views.setdefault(alias, set()).add((column, path))
    aliases = {
        "source_event_id": "source_event_id",
        "pause_kind": "pause_kind",
        "function_call_id": "function_call_id",
        "source_author": "source_event_author",
    }
    for name, alias in aliases.items():
        assert ("attributes", bigquery_analytics.ATTRIBUTE_PATHS[name]) in views[alias], name
    assert views["total_ms"] == {("latency_ms", "$.total_ms")}  # the diagnostics' run time
    assert ("content", "$.tool") in views["tool_name"]
    assert ("content", "$.error_traceback") in views["error_traceback"]
    for world in worlds:
        for row in world.rows:
            for path in bigquery_analytics.APP_PATHS:
                value: Any = row["attributes"]
                for key in path.removeprefix("$.").split("."):
                    value = value[key]
                assert value in ("ik_limit", "ik_markers")


# -- (c) max_bytes_billed reaches every query's job configuration --------------------------------


def _job_config(engine: sa.Engine) -> Any:
    """The default job configuration of the client the dialect built for ``engine``: merged
    into every query job it sends."""
    with sql.connect(engine, what="events") as conn:
        return conn.connection.dbapi_connection._client.default_query_job_config  # type: ignore[union-attr]


def manifest_spec(tmp_path: Path, extra: str = "") -> SourceSpec:
    text = f'[events]\nurl = "env:AGENT_EVENTS"\n{extra}'
    return parse_manifest(tomllib.loads(text), base=tmp_path).sources["events"]


def test_max_bytes_billed_caps_every_query_job(credentials: Path, tmp_path: Path) -> None:
    environ = {"AGENT_EVENTS": URL}
    capped = manifest_spec(tmp_path, "max_bytes_billed = 1234567\n")
    config = _job_config(sql.open_source(capped, environ, what="events"))
    assert config.maximum_bytes_billed == 1234567
    assert config.default_dataset.dataset_id == "agent_analytics"
    assert config.destination is None and not config.dry_run  # a query writes no table
    assert config.write_disposition is None and config.create_disposition is None
    default = _job_config(sql.open_source(manifest_spec(tmp_path), environ, what="events"))
    assert default.maximum_bytes_billed == DEFAULT_MAX_BYTES_BILLED == 10 * 2**30


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (URL + "?destination=ik-test-project.agent_analytics.copy", r"\['destination'\]"),
        (URL + "?maximum_bytes_billed=0&dry_run=true", r"\['dry_run', 'maximum_bytes_billed'\]"),
        ("bigquery://ik-test-project", "must name the project and the dataset"),
    ],
)
def test_a_url_can_set_nothing_but_the_location(credentials: Path, url: str, message: str) -> None:
    with pytest.raises(SourceError, match=message) as info:
        sql.open_engine(url, what="events", shown="env:AGENT_EVENTS")
    assert "copy" not in str(info.value)
    engine = sql.open_engine(URL + "?location=EU", what="events")
    assert engine.dialect.location == "EU"  # type: ignore[attr-defined]


def test_only_compiled_selects_are_sent(credentials: Path) -> None:
    engine = sql.open_engine(URL, what="events")
    table = sa.table(TABLE, sa.column("event_type"))
    with sql.connect(engine, what="events") as conn:
        for statement in (
            sa.delete(table),
            sa.update(table).values(event_type="x"),
            sa.text("SELECT 1; DELETE FROM agent_events WHERE TRUE"),
        ):
            with pytest.raises(SourceError, match="sends SELECT statements only"):
                conn.execute(statement)
        with pytest.raises(SourceError, match=r"only: 'DROP'"):
            conn.exec_driver_sql("DROP TABLE agent_events")


# -- routing and errors ---------------------------------------------------------------------------


def test_a_bigquery_url_is_read_as_the_analytics_table(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("AGENT_EVENTS", URL)
    spec = manifest_spec(tmp_path)
    assert events.export_format(spec) == FORMAT  # flows add the table's evidence limits
    assert events.read_as(spec) == FORMAT
    monkeypatch.setenv("AGENT_EVENTS", "postgresql://reader@db.internal/prod")
    assert events.export_format(spec) is None


@pytest.mark.parametrize(
    ("url", "extra", "error", "message"),
    [
        (URL, 'format = "sql"\n', SourceError, "read as the BigQuery Agent Analytics table"),
        (URL, 'columns = { ts = "timestamp" }\n', ManifestError, "columns does not apply"),
        (
            "postgresql://reader@127.0.0.1:1/prod",
            "max_bytes_billed = 5\n",
            ManifestError,
            "max_bytes_billed caps BigQuery queries, but the URL names another database",
        ),
        (
            "postgresql://reader@127.0.0.1:1/prod",
            f'format = "{FORMAT}"\n',
            SourceError,
            "or the table itself at a bigquery:// URL",
        ),
    ],
)
def test_what_does_not_fit_the_table_is_refused(
    tmp_path: Path, url: str, extra: str, error: type[Exception], message: str
) -> None:
    spec = manifest_spec(tmp_path, extra)
    with pytest.raises(error, match=message) as info:
        events.load(spec, Filters(), environ={"AGENT_EVENTS": url})
    assert url not in str(info.value) and "env:AGENT_EVENTS" in str(info.value)


def test_missing_credentials_say_how_to_give_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "nowhere" / "key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))  # no file: no metadata probe
    environ = {"AGENT_EVENTS": URL}
    loaders: dict[str, Any] = {
        "events": events.load,
        "diagnostics": bigquery_analytics.load_diagnostics,
    }
    for section, load in loaders.items():
        text = f'[{section}]\nurl = "env:AGENT_EVENTS"\nformat = "{FORMAT}"\n'
        spec = parse_manifest(tomllib.loads(text), base=tmp_path).sources[section]
        with pytest.raises(SourceError, match="no usable Google credentials") as info:
            load(spec, Filters(), environ=environ)
        said = str(info.value)
        assert said.startswith(section) and "GOOGLE_APPLICATION_CREDENTIALS" in said
        assert str(key) not in said and URL not in said


def _raised(err: BaseException, cap: int = 1000) -> IncidentkitError:
    """``err`` as the BigQuery DB-API raises it (wrapped), through the kit's translation."""
    from google.cloud.bigquery.dbapi import exceptions as dbapi

    where = "events env:AGENT_EVENTS"
    with pytest.raises(IncidentkitError) as info, bigquery_live.google_errors(where, cap=cap):
        try:
            raise dbapi.DatabaseError(err)
        except dbapi.DatabaseError as wrapped:
            raise sa.exc.DBAPIError("SELECT ...", {}, wrapped) from wrapped
    return info.value


def test_bigquery_errors_say_what_failed_and_what_to_do() -> None:
    from google.api_core import exceptions

    api: Any = exceptions  # its constructors are untyped

    url = "POST https://bigquery.googleapis.com/bigquery/v2/projects/ik-test-project/queries"
    billed = api.BadRequest(
        f"{url}: Query exceeded limit for bytes billed: 1000. 10485760 or higher required.",
        errors=[{"reason": "bytesBilledLimitExceeded"}],
    )
    said = _raised(billed)
    assert isinstance(said, SourceError) and not isinstance(said, SchemaError)
    assert "max_bytes_billed = 1000; BigQuery needs 10485760 or more" in str(said)
    assert "narrow the window" in str(said) and "googleapis" not in str(said)
    missing = _raised(api.NotFound(f"{url}: Not found: Table ik-test-project:agent_analytics.x"))
    assert isinstance(missing, SchemaError) and "no such project, dataset or table" in str(missing)
    refused = _raised(api.Forbidden(f"{url}: Access Denied: User does not have permission"))
    assert "roles/bigquery.dataViewer" in str(refused) and "Access Denied" in str(refused)
    column = _raised(api.BadRequest(f"{url}: Unrecognized name: event_id at [1:8]"))
    assert isinstance(column, SchemaError) and "Unrecognized name: event_id" in str(column)
    with (
        pytest.raises(ZeroDivisionError),  # not Google's: not the kit's to translate
        bigquery_live.google_errors("events", cap=1),
    ):
        raise ZeroDivisionError


# -- (e) any values a row holds: read or rejected, never a crash -----------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["{}", "[]", "null", '"x"', '{"adk": {"app_name": "a"}}', "{", "1e999"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
stamps = (
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([None, UTC]),
    )
    | st.none()
    | values
)
TYPES = (
    *("USER_MESSAGE_RECEIVED", "INVOCATION_STARTING", "LLM_RESPONSE", "TOOL_STARTING"),
    *("TOOL_COMPLETED", "TOOL_ERROR", "STATE_DELTA", "INVOCATION_COMPLETED", "LLM_ERROR"),
)
CONTENTS = ('{"tool": "t", "args": {}}', '{"response": "text: \'a\'"}', '"Answer."')


def _rows() -> st.SearchStrategy[list[dict[str, Any]]]:
    base = datetime(2026, 12, 6, 19, tzinfo=UTC)
    good: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
        {
            "timestamp": st.integers(0, 10_000).map(lambda ms: base + timedelta(milliseconds=ms)),
            "event_id": st.sampled_from(["r-1", "r-2", "r-3", None]),
            "event_type": st.sampled_from(TYPES),
            "session_id": st.sampled_from(["s-1", "s-2"]),
            "invocation_id": st.sampled_from(["e-1", "e-2"]),
            "content": st.sampled_from(
                ['{"tool": "t", "args": {}}', '{"response": "text: \'a\'"}']
            ),
            "attributes": st.just('{"adk": {"app_name": "shop"}, "finish_reason": "STOP"}'),
            "content_parts": st.just([]),
        }
    )
    mutated = st.tuples(
        good, st.dictionaries(st.sampled_from(COLUMNS), values | stamps, max_size=3)
    )
    return st.lists(mutated.map(lambda pair: pair[0] | pair[1]), min_size=1, max_size=6)


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(_rows(), st.integers(1, 4))
def test_any_row_values_are_read_or_rejected_with_their_place(
    rows: list[dict[str, Any]], size: int
) -> None:
    """Rows as the DB-API hands them (any value in any column), fetched in batches of
    ``size``: each is read, rejected at its location, or (a repeated event_id) warned."""
    names = list(COLUMNS)
    tuples = [tuple(row.get(name) for name in names) for row in rows]
    sink = RejectSink("events")
    parts = [
        bigquery_live.batch_frame(names, tuples[at : at + size], TABLE, at, "error")
        for at in range(0, len(tuples), size)
    ]
    read = bigquery_analytics.rows_of(parts, sink, naive="error")
    rejects, warned = sink.frame(), sink.warnings()
    repeated = warned["reason"].eq(bigquery_analytics.DUPLICATE).sum()
    assert len(read) + len(rejects) + repeated == len(rows)
    assert rejects["location"].str.startswith("agent_events:").all()
    assert rejects["reason"].str.len().gt(0).all()
    try:
        frames = events.analytics_frames(read, Filters(app_name="shop"), sink)
        bigquery_analytics.diagnostics_loaded(read, Filters(), RejectSink("diagnostics"))
    except IncidentkitError:
        return
    assert len(frames["events"]) <= len(read)


def test_opening_bigquery_leaves_other_dialects_func_unnest_alone(credentials: Path) -> None:
    """sqlalchemy-bigquery registers its ``unnest`` for every dialect on import; PostgreSQL's
    reflection calls ``func.unnest``, which would then warn (an error here) or refuse."""
    from sqlalchemy.dialects import postgresql

    engine = sql.open_engine(URL, what="events")
    unnest = sa.func.unnest(sa.column("indkey"))
    assert not type(unnest).__module__.startswith("sqlalchemy_bigquery")
    assert str(unnest.compile(dialect=postgresql.dialect())) == "unnest(indkey)"  # type: ignore[no-untyped-call]
    engine.dispose()
