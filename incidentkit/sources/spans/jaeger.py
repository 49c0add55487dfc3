"""Jaeger JSON exports (UI "Download JSON", ``/api/traces``) into raw spans.

The document is ``{"data": [trace, ...]}``, each trace with a ``spans`` list; times are
microseconds, the parent is the first ``CHILD_OF`` reference, and OTel status and scope travel
as tags, which are dropped from the attributes. Spans come out as :data:`.otlp.RawSpan`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from incidentkit.errors import SchemaError
from incidentkit.sources.json_files import read_json_document
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.spans.otlp import SHAPE_ERRORS, RawSpan

# Tags the OTLP -> Jaeger translator adds; they are not span attributes.
_JAEGER_TAGS = frozenset(
    {"otel.status_code", "otel.status_description", "error", "span.kind", "w3c.tracestate"}
    | {"otel.scope.name", "otel.scope.version", "otel.library.name", "otel.library.version"}
)


def read_spans(path: Path, sink: RejectSink) -> Iterator[tuple[str, RawSpan]]:
    """``(file:data[i].spans[j], span)`` of every span; bad traces and spans go to ``sink``.

    A document that is not a Jaeger export raises SchemaError.
    """
    document = read_json_document(path, what="spans")
    traces = document.get("data") if isinstance(document, dict) else None
    if not isinstance(traces, list):
        raise SchemaError(
            'spans: Jaeger JSON must be an object with a "data" list of traces',
            value=str(path),
            fix="export from the Jaeger UI (Download JSON) or /api/traces",
        )
    for i, trace in enumerate(traces):
        spans = trace.get("spans") if isinstance(trace, dict) else None
        if not isinstance(spans, list):
            sink.add(f"{path.name}:data[{i}]", "Jaeger trace without a spans list", trace)
            continue
        for j, span in enumerate(spans):
            location = f"{path.name}:data[{i}].spans[{j}]"
            try:
                yield location, _from_jaeger(span)
            except SHAPE_ERRORS as err:
                sink.add(location, f"span cannot be decoded ({err!r})", json.dumps(span))


def _from_jaeger(span: dict[str, Any]) -> RawSpan:
    tags = {t["key"]: _jaeger_value(t) for t in span.get("tags") or []}
    refs = [r for r in span.get("references") or [] if r.get("refType") == "CHILD_OF"]
    status = str(tags.get("otel.status_code", "ERROR" if tags.get("error") is True else "UNSET"))
    logs = [
        {f["key"]: _jaeger_value(f) for f in log.get("fields") or []}
        for log in span.get("logs") or []
    ]
    exception = next(
        (log for log in logs if log.get("event") == "exception" or "exception.type" in log), {}
    )
    start, duration = span.get("startTime"), span.get("duration")
    return {
        "trace": span.get("traceID"),
        "span": span.get("spanID"),
        "parent": refs[0].get("spanID") if refs else None,
        "name": span.get("operationName"),
        "start": start,
        "end": None if start is None or duration is None else int(start) + int(duration),
        "scale": 1000,
        "status": status.upper() if status.upper() in ("OK", "ERROR") else "UNSET",
        "message": tags.get("otel.status_description"),
        "attrs": {k: v for k, v in tags.items() if k not in _JAEGER_TAGS},
        "exception": exception,
        "json": span,
    }


def _jaeger_value(tag: dict[str, Any]) -> Any:
    value = tag.get("value")
    if tag.get("type") == "int64" and isinstance(value, str):
        return int(value)
    return value
