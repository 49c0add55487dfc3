"""Spans read live from the OpenTelemetry Collector's ClickHouse exporter (``otel_traces``).

The exporter (``exporter/clickhouseexporter`` of opentelemetry-collector-contrib) writes one row
per span: ``Timestamp DateTime64(9)`` (the start, the table's order key after ServiceName and
SpanName), ``TraceId``/``SpanId``/``ParentSpanId`` (lowercase hex, ``''`` for none), ``SpanName``,
``Duration`` (nanoseconds), ``StatusCode`` (``Unset``/``Ok``/``Error``; older releases wrote
``STATUS_CODE_…``), ``StatusMessage``, ``SpanAttributes``, ``ResourceAttributes`` and the
``Events``/``Links`` nested columns. Two schemas exist:

- **Map** (the default): ``SpanAttributes Map(LowCardinality(String), String)``, every value
  turned into text by pdata's ``Value.AsString`` (ints as decimals, arrays as JSON). The
  attributes ADK and the GenAI conventions give a type (:data:`TYPED`, ``gen_ai.usage.*``) get
  it back, so token counts are numbers and ``finish_reasons`` a list again; any other
  attribute stays the text the exporter wrote. Exporters before the ``ScopeName`` column put
  ``otel.scope.name``/``version`` into the map: they are dropped there, as the Jaeger reader
  drops them.
- **JSON** (``json: true``): ``SpanAttributes JSON``, types kept. ClickHouse splits dotted keys
  into paths; ``toJSONString`` gives them back nested and they are joined with dots again (an
  attribute whose value was itself a map comes back flattened; null values and empty maps are
  not stored).

Rows come out as :data:`.otlp.RawSpan` and are checked like every other span, so a table gives
the ``spans`` frame the same spans give from an OTLP/JSON file. The client is read-only
(ClickHouse ``readonly = 2`` for the connection: no write, no DDL, settings still allowed) and
every value is a server-side ``{name:Type}`` parameter. Filters select whole traces in SQL, as
:mod:`.adk_web` does: traces with a span started in the window (``Timestamp``, the order key)
and naming the sessions or invocations (``SpanAttributes``); the exporter's trace-id lookup
table (``<table>_trace_id_ts``), when present, bounds the read of those traces by time.
:func:`incidentkit.sources.spans.narrow` cuts the frame after ids are spread over each trace.

URLs: ``clickhouse://user@host:8123/db`` (``clickhouse+https://``, ``clickhousedb://`` and
``?secure=true`` too), normally from ``url = "env:NAME"``; ``chdb:///path/to/folder`` reads a
folder of the embedded chDB engine (clickhouse-connect's chdb backend), the form tests use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from incidentkit.errors import SchemaError, SourceError
from incidentkit.manifest import Filters
from incidentkit.redact import remember_url, scrub_text
from incidentkit.sources.json_text import JSON_ERRORS, fast_loads
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.spans.otlp import SHAPE_ERRORS, RawSpan

TABLE = "otel_traces"
LOOKUP_SUFFIX = "_trace_id_ts"
HTTP_SCHEMES = frozenset(
    {"clickhouse", "clickhousedb", "clickhouse+http", "clickhousedb+http"}
    | {"clickhouse+https", "clickhousedb+https", "clickhouses"}
)
CHDB_SCHEME = "chdb"
REQUIRED = (
    *("Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "Duration"),
    *("StatusCode", "StatusMessage", "SpanAttributes"),
)
"""The exporter's columns the spans frame needs; ``Events.Name``/``Events.Attributes`` (the
exception event) and ``ScopeName`` are read when present."""
TYPED: Mapping[str, str] = {
    "gen_ai.request.max_tokens": "int",
    "gen_ai.request.choice.count": "int",
    "gen_ai.request.seed": "int",
    "gen_ai.compaction.event_count": "int",
    "gen_ai.request.temperature": "float",
    "gen_ai.request.top_p": "float",
    "gen_ai.request.top_k": "float",
    "gen_ai.request.frequency_penalty": "float",
    "gen_ai.request.presence_penalty": "float",
    "gen_ai.response.finish_reasons": "list",
    "gen_ai.request.stop_sequences": "list",
    "gen_ai.request.encoding_formats": "list",
    "gcp.vertex.agent.associated_event_ids": "list",
    "gen_ai.workflow.nested": "bool",
}
"""Attributes of a known type (ADK, the GenAI conventions) the Map schema holds as text; every
``gen_ai.usage.*`` attribute is an integer."""
SCOPE_KEYS = ("otel.scope.name", "otel.scope.version")
EXCEPTION_KEYS = ("exception.type", "exception.message")
_INT = re.compile(r"-?[0-9]{1,19}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONNECT_FIX = (
    "check that the server is up, the URL's host, port (HTTP, 8123 or 8443) and database, and "
    "the credentials in the environment variable the manifest names"
)
_CHDB_FIX = (
    "chDB runs one engine folder per process: read this folder in a process that has opened no "
    "other (close other chdb clients first), and give a folder chDB has written"
)


def is_clickhouse_url(url: str) -> bool:
    """Whether ``url`` names a ClickHouse server or a chDB folder (by its scheme)."""
    scheme = url.partition("://")[0].lower()
    return "://" in url and (scheme in HTTP_SCHEMES or scheme == CHDB_SCHEME)


def read_spans(
    url: str,
    sink: RejectSink,
    *,
    shown: str,
    what: str,
    filters: Filters,
    table: str | None = None,
    wanted: Collection[str] | None = None,
    payloads: Collection[str] = (),
    redact: Collection[str] = (),
) -> Iterator[tuple[str, RawSpan]]:
    """``(table:trace/span, span)`` of the table's spans of the traces ``filters`` touch
    (``wanted``: only these lowercase span ids), ordered by start; ``redact`` attributes come
    back as ``<redacted>`` from the server (Map schema) unless named in ``payloads``. ``shown``
    stands for the URL in messages. Unreadable rows go to ``sink``."""
    database, name = _table_name(table or TABLE, what=what)
    client = _client(url, shown=shown, what=what)
    try:
        columns = _columns(client, database, name, shown=shown, what=what)
        variant = _variant(columns, name, what=what)
        lookup = _lookup_exists(client, database, name + LOOKUP_SUFFIX, shown=shown, what=what)
        query, params = _query(
            database,
            name,
            columns,
            variant,
            filters,
            wanted=wanted,
            redact=[key for key in redact if key not in payloads],
        )
        if lookup and (filters.window or filters.session_ids or filters.invocation_ids):
            bound = _lookup_bounds(client, database, name, query, params, shown=shown, what=what)
            if bound is not None:
                query = query.replace("/*BOUND*/", _BOUND)
                params.update(bound)
        result = _run(client, query, params, shown=shown, what=what)
    finally:
        client.close()
    label = name if database is None else f"{database}.{name}"
    yield from _raw_spans(result, label, variant, "ScopeName" not in columns, sink)


def _table_name(table: str, *, what: str) -> tuple[str | None, str]:
    """``db.table`` or ``table``, each part a plain identifier (it is quoted into the SQL)."""
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENT.fullmatch(part) for part in parts):
        raise SchemaError(
            f"{what}: not a ClickHouse table name",
            value=table,
            fix='give table = "otel_traces" or "database.otel_traces" (letters, digits, _)',
        )
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _client(url: str, *, shown: str, what: str) -> Any:
    """A clickhouse-connect client on ``url``, read-only for its whole life."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import Error as ClickHouseError

    remember_url(url)
    scheme = url.partition("://")[0].lower()
    try:
        split = urlsplit(url)
        query = {key: values[-1] for key, values in parse_qs(split.query).items()}
        if scheme == CHDB_SCHEME:
            folder = Path(unquote(split.path)) if not split.netloc else None
            if folder is None or not folder.is_dir():
                raise SourceError(
                    f"{what}: no chDB folder at this URL",
                    value=shown,
                    fix="give chdb:///absolute/path/to/folder, a folder chDB has written",
                )
            client = clickhouse_connect.get_client(interface="chdb", path=str(folder))
        else:
            secure = scheme.endswith("https") or scheme == "clickhouses"
            secure |= query.get("secure", "").lower() in ("1", "true", "yes")
            client = clickhouse_connect.get_client(
                host=split.hostname or "localhost",
                port=split.port,
                username=unquote(split.username) if split.username else None,
                password=unquote(split.password) if split.password else "",
                database=unquote(split.path.strip("/")) or None,
                interface="https" if secure else "http",
                connect_timeout=10,
                send_receive_timeout=300,
                autogenerate_session_id=False,
            )
    except SourceError:
        raise
    except (ClickHouseError, OSError, ValueError, TypeError, ImportError) as err:
        raise SourceError(
            f"{what}: cannot connect to ClickHouse",
            value=f"{shown} ({_reason(err)})",
            fix=_CHDB_FIX if scheme == CHDB_SCHEME else _CONNECT_FIX,
        ) from err
    try:
        current = client.server_settings.get("readonly")
        if current is None or current.value == "0":
            client.set_client_setting("readonly", "2")
    except ClickHouseError as err:
        client.close()
        raise SourceError(
            f"{what}: cannot make the ClickHouse connection read-only",
            value=f"{shown} ({_reason(err)})",
            fix="use a user allowed to set readonly = 2, or one whose profile is read-only",
        ) from err
    return client


def _reason(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return scrub_text(lines[0][:300] if lines else type(err).__name__)


def _run(client: Any, query: str, params: dict[str, Any], *, shown: str, what: str) -> Any:
    from clickhouse_connect.driver.exceptions import Error as ClickHouseError

    try:
        return client.query_arrow(query, parameters=params)
    except ClickHouseError as err:
        raise SourceError(
            f"{what}: ClickHouse refused the query",
            value=f"{shown}: {_reason(err)}",
            fix="check that the user may read the table (and system.columns), and that the "
            "table is the exporter's",
        ) from err


def _from(database: str | None, name: str) -> str:
    return f"`{name}`" if database is None else f"`{database}`.`{name}`"


def _where_db(database: str | None) -> str:
    return "{db:String}" if database is not None else "currentDatabase()"


def _columns(
    client: Any, database: str | None, name: str, *, shown: str, what: str
) -> dict[str, str]:
    """Column name → type of the table; SchemaError when it is missing or not the exporter's."""
    params: dict[str, Any] = {"t": name} | ({"db": database} if database else {})
    rows = _run(
        client,
        f"SELECT name, type FROM system.columns WHERE database = {_where_db(database)} "
        "AND table = {t:String}",
        params,
        shown=shown,
        what=what,
    ).to_pydict()
    columns = dict(zip(rows["name"], rows["type"], strict=True))
    if not columns:
        tables = _run(
            client,
            f"SELECT name FROM system.tables WHERE database = {_where_db(database)} "
            "ORDER BY name LIMIT 20",
            {"db": database} if database else {},
            shown=shown,
            what=what,
        ).column("name")
        raise SchemaError(
            f"{what}: ClickHouse has no table {name}"
            + (f" in database {database}" if database else " in the URL's database"),
            value=tables.to_pylist(),
            fix='name the exporter\'s traces table with table = "..." in [spans] (default '
            "otel_traces), or the database in the URL",
        )
    missing = [column for column in REQUIRED if column not in columns]
    if missing:
        raise SchemaError(
            f"{what}: table {name} lacks columns of the OpenTelemetry ClickHouse exporter",
            value=missing,
            fix=f"it has {sorted(columns)}; point table at the exporter's traces table",
        )
    return columns


def _variant(columns: Mapping[str, str], name: str, *, what: str) -> str:
    kind = columns["SpanAttributes"]
    if kind.startswith("Map("):
        return "map"
    if kind == "JSON" or kind.startswith("JSON(") or kind.startswith("Object("):
        return "json"
    raise SchemaError(
        f"{what}: table {name} has SpanAttributes of a type the exporter does not write",
        value=kind,
        fix="read the exporter's table (SpanAttributes Map(LowCardinality(String), String), or "
        "JSON with the exporter's json option)",
    )


def _lookup_exists(client: Any, database: str | None, name: str, *, shown: str, what: str) -> bool:
    params: dict[str, Any] = {"t": name} | ({"db": database} if database else {})
    found = (
        _run(
            client,
            f"SELECT groupArray(name) AS names FROM system.columns WHERE database = "
            f"{_where_db(database)} AND table = {{t:String}}",
            params,
            shown=shown,
            what=what,
        )
        .column("names")[0]
        .as_py()
    )
    return {"TraceId", "Start", "End"} <= set(found)


_BOUND = (
    "AND Timestamp >= fromUnixTimestamp64Nano({lo:Int64}) "
    "AND Timestamp < fromUnixTimestamp64Nano({hi:Int64})"
)


def _lookup_bounds(
    client: Any,
    database: str | None,
    name: str,
    query: str,
    params: dict[str, Any],
    *,
    shown: str,
    what: str,
) -> dict[str, int] | None:
    """The time range of the touched traces from the lookup table, or None when it lacks one
    of them (then the read is not bounded: a bound from a partial lookup could lose spans)."""
    touched = query.split("/*TOUCHED*/")[1]
    lookup = _from(database, name + LOOKUP_SUFFIX)
    counts = _run(
        client,
        f"SELECT (SELECT uniqExact(TraceId) FROM {_from(database, name)} WHERE 1 {touched}) "
        "AS wanted, uniqExact(TraceId) AS found, "
        "toInt64(toUnixTimestamp(min(Start))) AS lo, toInt64(toUnixTimestamp(max(End))) AS hi "
        f"FROM {lookup} WHERE 1 {touched}",
        params,
        shown=shown,
        what=what,
    ).to_pylist()[0]
    if counts["found"] != counts["wanted"] or counts["found"] == 0:
        return None
    # Start and End are whole seconds (DateTime) in recent exporters: widen by one second.
    return {"lo": (counts["lo"] - 1) * 10**9, "hi": (counts["hi"] + 2) * 10**9}


def _query(
    database: str | None,
    name: str,
    columns: Mapping[str, str],
    variant: str,
    filters: Filters,
    *,
    wanted: Collection[str] | None,
    redact: list[str],
) -> tuple[str, dict[str, Any]]:
    """The spans read, every value a parameter; ``/*TOUCHED*/`` marks the trace conditions and
    ``/*BOUND*/`` where the lookup table's time bound goes."""
    source = _from(database, name)
    params: dict[str, Any] = {}
    if variant == "map":
        attributes = (
            "mapApply((k, v) -> (k, if(has({redact:Array(String)}, k), {mask:String}, v)), "
            "SpanAttributes) AS attrs"
        )
        params |= {"redact": redact, "mask": "<redacted>"}
    else:
        attributes = "toJSONString(SpanAttributes) AS attrs"
    cells = [
        "toUnixTimestamp64Nano(toDateTime64(Timestamp, 9)) AS start_ns",
        "toInt64(Duration) AS duration_ns",
        "TraceId AS trace",
        "SpanId AS span",
        "ParentSpanId AS parent",
        "SpanName AS name",
        "multiIf(upper(StatusCode) IN ('OK', 'STATUS_CODE_OK'), 'OK', upper(StatusCode) IN "
        "('ERROR', 'STATUS_CODE_ERROR'), 'ERROR', 'UNSET') AS status",
        "StatusMessage AS message",
        attributes,
    ]
    if "Events.Name" in columns and "Events.Attributes" in columns:
        event = "Events.Attributes[indexOf(Events.Name, 'exception')]"
        if variant == "map":
            cells.append(f"mapFilter((k, v) -> k IN {EXCEPTION_KEYS!r}, {event}) AS exception")
        else:
            cells.append(f"toJSONString({event}) AS exception")
    touched = []
    if filters.window is not None:
        params |= {
            "w_start": int(filters.window.start.value),
            "w_end": int(filters.window.end.value),
        }
        touched.append(
            "Timestamp >= fromUnixTimestamp64Nano({w_start:Int64}) "
            "AND Timestamp < fromUnixTimestamp64Nano({w_end:Int64})"
        )
    for values, param, keys in (
        (
            filters.session_ids,
            "sessions",
            ("gcp.vertex.agent.session_id", "gen_ai.conversation.id"),
        ),
        (filters.invocation_ids, "invocations", ("gcp.vertex.agent.invocation_id",)),
    ):
        if values:
            params[param] = list(values)
            either = " OR ".join(
                f"{_attribute(variant, key)} IN {{{param}:Array(String)}}" for key in keys
            )
            touched.append(f"({either})")
    trace_sets = " ".join(
        f"AND TraceId IN (SELECT TraceId FROM {source} WHERE {condition})" for condition in touched
    )
    where = f"WHERE 1 /*TOUCHED*/ {trace_sets} /*TOUCHED*/ /*BOUND*/"
    if wanted is not None:
        params["span_ids"] = sorted(wanted)
        where += " AND lower(SpanId) IN {span_ids:Array(String)}"
    query = f"SELECT {', '.join(cells)} FROM {source} {where} ORDER BY Timestamp, TraceId, SpanId"
    return query, params


def _attribute(variant: str, key: str) -> str:
    """The text of attribute ``key`` in SQL ('' when absent)."""
    if variant == "map":
        return f"SpanAttributes['{key}']"
    return f"toString(getSubcolumn(SpanAttributes, '{key}'))"


def _raw_spans(
    result: Any, label: str, variant: str, legacy_scope: bool, sink: RejectSink
) -> Iterator[tuple[str, RawSpan]]:
    """Raw spans of the query's Arrow result, decoded column by column."""
    columns = {name: result.column(name).to_pylist() for name in result.column_names}
    count = result.num_rows
    exceptions = columns.get("exception", [None] * count)
    values = zip(
        columns["trace"],
        columns["span"],
        columns["parent"],
        columns["name"],
        columns["start_ns"],
        columns["duration_ns"],
        columns["status"],
        columns["message"],
        columns["attrs"],
        exceptions,
        strict=True,
    )
    for trace, span, parent, name, start, duration, status, message, attrs, exc in values:
        location = f"{label}:{trace}/{span}"
        row = {"TraceId": trace, "SpanId": span, "SpanName": name, "Timestamp": start}
        try:
            if variant == "map":
                attributes = _typed(dict(attrs), legacy_scope)
                exception = dict(exc) if exc else {}
            else:
                attributes = _flat(fast_loads(attrs))
                exception = _flat(fast_loads(exc)) if exc else {}
        except (*SHAPE_ERRORS, *JSON_ERRORS) as err:
            sink.add(
                location, f"attributes cannot be read ({err!r:.200})", json.dumps(row, default=str)
            )
            continue
        yield (
            location,
            {
                "trace": trace,
                "span": span,
                "parent": parent or None,
                "name": name,
                "start": start,
                "end": start + duration,
                "scale": 1,
                "status": status,
                "message": message or None,
                "attrs": attributes,
                "exception": {k: exception[k] for k in EXCEPTION_KEYS if k in exception},
                "json": {**row, "Duration": duration, "SpanAttributes": attributes},
            },
        )


def _typed(attrs: dict[str, Any], legacy_scope: bool) -> dict[str, Any]:
    """The Map schema's text values given back the type ADK wrote (see :data:`TYPED`)."""
    if legacy_scope:
        for key in SCOPE_KEYS:
            attrs.pop(key, None)
    for key, text in attrs.items():
        kind = "int" if key.startswith("gen_ai.usage.") else TYPED.get(key)
        if kind is not None:
            attrs[key] = _retyped(kind, text)
    return attrs


def _retyped(kind: str, text: str) -> Any:
    """``text`` as ``kind``; the text itself when it is not one (never an error)."""
    if kind == "int":
        return int(text) if _INT.fullmatch(text) else text
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if text.startswith("["):
        try:
            value = fast_loads(text)
        except JSON_ERRORS:
            return text
        return value if isinstance(value, list) else text
    return text


def _flat(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON column's nested object as dotted keys (ClickHouse splits keys at dots)."""
    if out is None:
        out = {}
    if not isinstance(value, dict):
        raise ValueError(f"attributes are not a JSON object but {type(value).__name__}")
    for key, item in value.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(item, dict) and item:
            _flat(item, path, out)
        else:
            out[path] = item
    return out
