"""The OpenTelemetry Collector ClickHouse exporter's tables, as its SQL templates create them,
and OTLP/JSON spans turned into its rows as its Go code maps them (:func:`exporter_row`): the
test stand-in for a collector writing into ClickHouse (chDB in tests)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

MAP_TABLE = """
CREATE TABLE IF NOT EXISTS `{db}`.`{table}` (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""
"""The exporter's ``internal/sqltemplates/traces_table.sql`` (opentelemetry-collector-contrib,
2025), rendered with engine MergeTree, no cluster, no TTL, no full-text indexes."""

JSON_TABLE = """
CREATE TABLE IF NOT EXISTS `{db}`.`{table}` (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes JSON CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes JSON CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes JSON
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes JSON
    ) CODEC(ZSTD(1)),
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
"""
"""The exporter's ``internal/sqltemplates/traces_json_table.sql`` (its ``json: true`` schema)."""

LOOKUP_TABLE = """
CREATE TABLE IF NOT EXISTS `{db}`.`{table}_trace_id_ts` (
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime) CODEC(ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime) CODEC(ZSTD(1))
) ENGINE = AggregatingMergeTree()
PARTITION BY toStartOfWeek(Start)
ORDER BY (TraceId)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""
LOOKUP_VIEW = """
CREATE MATERIALIZED VIEW IF NOT EXISTS `{db}`.`{table}_trace_id_ts_mv`
TO `{db}`.`{table}_trace_id_ts`
AS SELECT TraceId, min(Timestamp) as Start, max(Timestamp) as End
   FROM `{db}`.`{table}`
   WHERE TraceId != ''
   GROUP BY TraceId
"""
"""``traces_id_ts_lookup_table.sql`` and ``traces_id_ts_lookup_mv.sql``."""

INSERT_COLUMNS = (
    *("Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind"),
    *("ServiceName", "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes"),
    *("Duration", "StatusCode", "StatusMessage", "Events.Timestamp", "Events.Name"),
    *("Events.Attributes", "Links.TraceId", "Links.SpanId", "Links.TraceState"),
    "Links.Attributes",
)
"""``traces_insert.sql``'s columns, in its order."""
_STATUS = {0: "Unset", 1: "Ok", 2: "Error"}
_KIND = {0: "Unspecified", 1: "Internal", 2: "Server", 3: "Client", 4: "Producer", 5: "Consumer"}


def any_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON ``AnyValue`` as pdata's ``Value.AsRaw`` holds it."""
    for kind, raw in value.items():
        if kind == "intValue":
            return int(raw)
        if kind == "doubleValue":
            return float(raw)
        if kind == "arrayValue":
            return [any_value(v) for v in (raw or {}).get("values") or []]
        if kind == "kvlistValue":
            return key_values((raw or {}).get("values"))
        return raw
    return None


def key_values(items: Any) -> dict[str, Any]:
    return {item["key"]: any_value(item.get("value") or {}) for item in items or []}


def as_string(value: Any) -> str:
    """pdata's ``Value.AsString``: what the Map schema stores for every attribute value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # float64AsString: ES6 number formatting
        if math.isinf(value) or math.isnan(value):
            return f"json: unsupported value: {value}"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=isinstance(value, dict))


def exporter_row(
    resource: dict[str, Any], scope: dict[str, Any], span: dict[str, Any], variant: str
) -> list[Any]:
    """One OTLP/JSON span as the exporter inserts it (``exporter_traces.go`` for the Map
    schema, ``exporter_traces_json.go`` for JSON), in :data:`INSERT_COLUMNS` order."""
    res_attrs = key_values(resource.get("attributes"))
    attrs = key_values(span.get("attributes"))
    events = span.get("events") or []
    links = span.get("links") or []

    def attributes(values: dict[str, Any]) -> Any:
        if variant == "map":
            return {k: as_string(v) for k, v in values.items()}
        return json.dumps(values)

    start, end = int(span["startTimeUnixNano"]), int(span.get("endTimeUnixNano") or 0)
    status = span.get("status") or {}
    return [
        start,
        (span.get("traceId") or "").lower(),
        (span.get("spanId") or "").lower(),
        (span.get("parentSpanId") or "").lower(),
        span.get("traceState") or "",
        span["name"],
        _KIND.get(int(span.get("kind") or 0), "Unspecified"),
        as_string(res_attrs.get("service.name")),
        attributes(res_attrs),
        scope.get("name") or "",
        scope.get("version") or "",
        attributes(attrs),
        end - start,
        _STATUS[int(status.get("code") or 0)],
        status.get("message") or "",
        [int(e["timeUnixNano"]) for e in events],
        [e.get("name") or "" for e in events],
        [attributes(key_values(e.get("attributes"))) for e in events],
        [(link.get("traceId") or "").lower() for link in links],
        [(link.get("spanId") or "").lower() for link in links],
        [link.get("traceState") or "" for link in links],
        [attributes(key_values(link.get("attributes"))) for link in links],
    ]


def otlp_rows(path: Path, variant: str) -> list[list[Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for resource_spans in json.loads(line)["resourceSpans"]:
            resource = resource_spans.get("resource") or {}
            for scope_spans in resource_spans.get("scopeSpans") or []:
                scope = scope_spans.get("scope") or {}
                for span in scope_spans.get("spans") or []:
                    rows.append(exporter_row(resource, scope, span, variant))
    return rows


def create_tables(client: Any, db: str, table: str, variant: str, *, lookup: bool = True) -> None:
    client.command(f"CREATE DATABASE IF NOT EXISTS `{db}`")
    client.command((MAP_TABLE if variant == "map" else JSON_TABLE).format(db=db, table=table))
    if lookup:
        client.command(LOOKUP_TABLE.format(db=db, table=table))
        client.command(LOOKUP_VIEW.format(db=db, table=table))
