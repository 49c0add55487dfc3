"""OTLP/JSON traces lines (the collector's file exporter, ``format: json``) into raw spans.

Each line is one ``ExportTraceServiceRequest``: ``resourceSpans[].scopeSpans[].spans[]``
(``instrumentationLibrarySpans`` in old exporters). Every span becomes a :data:`RawSpan`, the
form :mod:`incidentkit.sources.spans` checks and turns into rows; :mod:`.jaeger` gives the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from incidentkit.sources.json_files import read_json_lines
from incidentkit.sources.loaded import RejectSink

RawSpan = dict[str, Any]
"""One decoded span: ``trace``/``span``/``parent`` ids as written, ``name``, ``start``/``end``
times in units of ``scale`` nanoseconds, ``status`` (UNSET/OK/ERROR), ``message``, ``attrs``,
the ``exception`` event's attributes, and ``json``, the span as read (for rejects)."""

SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError)
"""What a span of the wrong shape raises while it is decoded; it is rejected, not fatal."""

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def read_spans(path: Path, sink: RejectSink) -> Iterator[tuple[str, RawSpan]]:
    """``(file:line, span)`` of every span; lines and spans of the wrong shape go to ``sink``."""
    records, locations = read_json_lines(path, sink, what="spans")
    for record, location in zip(records, locations, strict=True):
        try:
            spans = [
                span
                for resource in record["resourceSpans"]
                for scope in resource.get("scopeSpans")
                or resource.get("instrumentationLibrarySpans")
                or []
                for span in scope.get("spans") or []
            ]
        except SHAPE_ERRORS:
            reason = "not an OTLP/JSON traces line (resourceSpans/scopeSpans/spans)"
            sink.add(location, reason, json.dumps(record))
            continue
        for span in spans:
            try:
                yield location, _from_otlp(span)
            except SHAPE_ERRORS as err:
                sink.add(location, f"span cannot be decoded ({err!r})", json.dumps(span))


def _from_otlp(span: dict[str, Any]) -> RawSpan:
    status = span.get("status") or {}
    code = status.get("code", 0)
    if isinstance(code, str):  # plain protobuf JSON writes enum names
        code = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, 0)
    exception = next((e for e in span.get("events") or [] if e.get("name") == "exception"), None)
    return {
        "trace": span.get("traceId"),
        "span": span.get("spanId"),
        "parent": span.get("parentSpanId"),
        "name": span.get("name"),
        "start": span.get("startTimeUnixNano"),
        "end": span.get("endTimeUnixNano"),
        "scale": 1,
        "status": _STATUS.get(code, "UNSET"),
        "message": status.get("message"),
        "attrs": _key_values(span.get("attributes")),
        "exception": _key_values(exception.get("attributes")) if exception else {},
        "json": span,
    }


def _key_values(items: Any) -> dict[str, Any]:
    return {item["key"]: _any_value(item.get("value") or {}) for item in items or []}


def _any_value(value: dict[str, Any]) -> Any:
    for kind, raw in value.items():
        if kind == "intValue":
            return _int_value(raw)
        if kind == "doubleValue":
            return float(raw)
        if kind == "arrayValue":
            return [_any_value(v) for v in (raw or {}).get("values") or []]
        if kind == "kvlistValue":
            return _key_values((raw or {}).get("values"))
        return raw
    return None


def _int_value(raw: Any) -> int | float:
    """An ``intValue``: decimal text (how the JSON encoding writes int64) or a number. A
    fraction stays the float it is (never truncated into a wrong integer); a boolean, a list
    or text that is not a number raise ValueError, and the span is rejected."""
    if type(raw) is str:
        return int(raw)
    if type(raw) is int:
        return raw
    if type(raw) is float:
        return int(raw) if raw.is_integer() else raw
    raise ValueError(f"intValue is not an integer: {raw!r:.80}")
