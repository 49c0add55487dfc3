"""Spans from OTLP/JSON lines (collector file exporter), Jaeger JSON, the SQLite store of ADK
Python's ``SqliteSpanExporter`` (``adk web``), or the collector ClickHouse exporter's table
(``otel_traces``, read live), ADK Java and Python.

The envelopes are decoded by :mod:`.otlp`, :mod:`.jaeger`, :mod:`.adk_web` and
:mod:`.clickhouse`; this module
checks the spans, turns them into the ``spans`` frame and re-reads payloads.

Ids become lowercase hex (trace 32 wide, span 16 wide; base64 ids from plain protobuf JSON are
decoded). ``kind`` says what a span measures whatever the ADK version named it. Invocation and
session ids are spread to every span of a trace that names exactly one. Payload attributes
(prompts, responses, tool arguments) are replaced by ``"<redacted>"``; :func:`span_payloads`
re-reads them on demand. Token counts (``gen_ai.usage.*``) stay in ``attributes`` and also
become columns (:mod:`incidentkit.sources.tokens`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError, SchemaError, SourceError
from incidentkit.frames import SpanKind, conform
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import sql, tokens
from incidentkit.sources.evidence_files import open_text, require_content
from incidentkit.sources.loaded import Loaded, RejectSink
from incidentkit.sources.spans import adk_web, clickhouse, jaeger, otlp
from incidentkit.sources.spans.otlp import RawSpan

PAYLOAD_KEYS: tuple[str, ...] = (
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.data",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
)
"""Attributes holding prompts, responses or tool data: redacted in the spans frame."""

REDACTED = "<redacted>"
FORMATS = ("otlp-json", "jaeger-json", adk_web.FORMAT)
_OP_KIND = {
    "invoke_workflow": SpanKind.INVOCATION,
    "invocation": SpanKind.INVOCATION,
    "invoke_agent": SpanKind.INVOKE_AGENT,
    "call_llm": SpanKind.CALL_LLM,
    "generate_content": SpanKind.CALL_LLM,
    "chat": SpanKind.CALL_LLM,
    "execute_tool": SpanKind.EXECUTE_TOOL,
}
_MAX_NS = 2**63  # datetime64[ns] ends in 2262
_HEX = re.compile(r"[0-9a-fA-F]+")
_COLUMNS = [
    *("trace_id", "span_id", "parent_span_id", "name", "start_ns", "end_ns", "status"),
    *("status_message", "op", "invocation_id", "session_id", "agent_name", "tool_name"),
    *("tool_call_id", "attributes", "location", "usage"),
]


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read every span file of ``spec`` (in order), or its span store, into the ``spans``
    frame."""
    sink = RejectSink("spans")
    records = list(_records(spec, filters, environ, sink, payloads=()))
    frame = pd.DataFrame.from_records(records, columns=_COLUMNS)
    frame = _drop_duplicates(frame, sink)
    frame["start"] = pd.to_datetime(frame["start_ns"].astype("Int64"), unit="ns", utc=True)
    frame["end"] = pd.to_datetime(frame["end_ns"].astype("Int64"), unit="ns", utc=True)
    frame["duration_ms"] = (frame["end"] - frame["start"]).dt.total_seconds() * 1000.0
    counts = tokens.span_tokens(frame["usage"].tolist())
    frame = frame.assign(**counts.columns)
    frame[tokens.REASON] = counts.reasons
    frame = _derive(frame)
    other = frame["kind"].eq(SpanKind.OTHER)
    if other.any():
        names = ", ".join(repr(n) for n in frame.loc[other, "name"].value_counts().index[:3])
        sink.warn(
            str(frame.loc[other, "location"].iloc[0]),
            f"{int(other.sum())} spans are of no kind the kit knows (not an ADK agent, model or "
            f"tool span), e.g. {names}; they are kept with kind {SpanKind.OTHER}",
        )
    for col in ("invocation_id", "session_id"):
        frame[col] = _propagate(frame, col)
    frame = narrow(frame, filters)
    tokens.warn_unreadable(frame, sink, what="spans")
    frame = frame.sort_values(["start", "trace_id", "span_id"], kind="stable")
    frame = frame.reset_index(drop=True)  # conform aligns on the index
    return Loaded(
        frames={"spans": conform("spans", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def span_payloads(
    source: SourceSpec | str | Path | Sequence[str | Path],
    span_ids: Iterable[str],
    *,
    keys: Iterable[str] = PAYLOAD_KEYS,
    environ: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Re-read the payload attributes of ``span_ids`` from the raw span files (or store; an
    ``env:`` URL is resolved in ``environ``, default the process environment).

    Returns one row per (span, payload key) with columns trace_id, span_id, key, value; JSON
    held in a string is decoded (a string that is not JSON stays a string). Spans the files do
    not hold give no rows; unreadable rows were already reported as rejects by :func:`load`.
    """
    if isinstance(source, SourceSpec):
        spec = source
    else:
        listed = [source] if isinstance(source, str | Path) else list(source)
        spec = SourceSpec("spans", paths=tuple(Path(p) for p in listed))
    wanted = []
    for value in span_ids:
        span_id = _norm_id(value, 16)
        if span_id is None:
            raise ParameterError(
                "not a span id", value=value, fix="give 16 hex digits, as in spans.span_id"
            )
        wanted.append(span_id)
    order = {span_id: i for i, span_id in enumerate(dict.fromkeys(wanted))}
    key_list = tuple(dict.fromkeys(keys))
    rows: list[tuple[int, str, str, str, Any]] = []
    sink = RejectSink("spans")
    for row in _records(spec, Filters(), environ, sink, payloads=key_list, wanted=order):
        attrs = row[_COLUMNS.index("attributes")]
        for key in key_list:
            if key in attrs:
                rows.append((order[row[1]], row[0], row[1], key, _decoded(attrs[key])))
    rows.sort(key=lambda r: (r[0], r[1], key_list.index(r[3])))
    out = pd.DataFrame(
        [r[1:] for r in rows], columns=["trace_id", "span_id", "key", "value"], dtype=object
    )
    return out.astype({"trace_id": "str", "span_id": "str", "key": "str"})


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON after all: the text is the value
            return value
    return value


def _records(
    spec: SourceSpec,
    filters: Filters,
    environ: Mapping[str, str] | None,
    sink: RejectSink,
    *,
    payloads: tuple[str, ...],
    wanted: Mapping[str, int] | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Rows (in ``_COLUMNS`` order) of every file of ``spec`` in order, or of the span store
    its URL names (SQLite; ClickHouse or chDB, :mod:`.clickhouse`; a literal ``sqlite:///`` URL
    is a path); unreadable spans go to ``sink``. Only a span store reads less than
    everything: the traces ``filters`` touch."""
    if spec.url_ref is not None:
        what = f"[spans] {spec.location()}"
        url = spec.url(environ)
        if clickhouse.is_clickhouse_url(url):
            raws = clickhouse.read_spans(
                url,
                sink,
                shown=spec.location(),
                what=what,
                filters=filters,
                table=spec.table,
                wanted=wanted,
                payloads=payloads,
                redact=PAYLOAD_KEYS,
            )
            yield from _checked(raws, sink, payloads=payloads, wanted=wanted)
            return
        engine = sql.open_source(spec, environ, what=what)
        if engine.dialect.name != "sqlite":
            engine.dispose()
            raise SourceError(
                f"{what}: spans are read from files or from a SQLite span store (or ClickHouse)",
                value=spec.location(),
                fix="point url at the SQLite file ADK's SqliteSpanExporter writes "
                "(sqlite:///spans.db) or at the ClickHouse exporter's server "
                "(clickhouse://user@host:8123/db), or export the spans as OTLP/JSON and give "
                'path = "..."',
            )
        raws = adk_web.read_spans(
            engine,
            sink,
            label=spec.location(),
            what=what,
            filters=filters,
            table=spec.table,
            wanted=wanted,
        )
        yield from _checked(raws, sink, payloads=payloads, wanted=wanted)
        return
    for path in spec.paths:
        yield from _read(
            path,
            spec.format,
            sink,
            payloads=payloads,
            wanted=wanted,
            filters=filters,
            table=spec.table,
        )


def _read(
    path: Path,
    fmt: str | None,
    sink: RejectSink,
    *,
    payloads: tuple[str, ...],
    wanted: Mapping[str, int] | None = None,
    filters: Filters | None = None,
    table: str | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Rows (in ``_COLUMNS`` order) of one file; unreadable spans go to ``sink``. A span
    store reads the traces ``filters`` touch (the frame is narrowed after, as for files)."""
    require_content(path, what="spans")
    fmt = fmt or _detect(path)
    if adk_web.is_sqlite(path) != (fmt == adk_web.FORMAT):
        kind = "not a SQLite database" if fmt == adk_web.FORMAT else "a SQLite database"
        raise SchemaError(
            f"spans: format {fmt} does not read this file ({kind})",
            value=str(path),
            fix="drop format from [spans]: the kit tells the formats apart",
        )
    raws: Iterable[tuple[str, RawSpan]]
    if fmt == adk_web.FORMAT:
        what = f"[spans] {path}"
        raws = adk_web.read_spans(
            sql.open_sqlite(path, what=what),
            sink,
            label=path.name,
            what=what,
            filters=filters or Filters(),
            table=table,
            wanted=wanted,
        )
    elif fmt == "otlp-json":
        raws = otlp.read_spans(path, sink)
    else:
        raws = jaeger.read_spans(path, sink)
    yield from _checked(raws, sink, payloads=payloads, wanted=wanted)


def _checked(
    raws: Iterable[tuple[str, RawSpan]],
    sink: RejectSink,
    *,
    payloads: tuple[str, ...],
    wanted: Mapping[str, int] | None,
) -> Iterator[tuple[Any, ...]]:
    for location, raw in raws:
        row = _row(raw, location, sink, payloads=payloads)
        if row is not None and (wanted is None or row[1] in wanted):
            yield row


def _detect(path: Path) -> str:
    if adk_web.is_sqlite(path):
        return adk_web.FORMAT
    with open_text(path, what="spans", errors="replace") as handle:
        head = handle.read(65536)
    marks = {"otlp-json": '"resourceSpans"', "jaeger-json": '"data"'}
    found = {fmt: head.find(mark) for fmt, mark in marks.items()}
    present = {fmt: pos for fmt, pos in found.items() if pos >= 0}
    if not head.strip():
        return "otlp-json"  # an empty export (no traffic in that rotation) holds no spans
    if not present:
        raise SchemaError(
            "spans: file is neither OTLP/JSON lines nor a Jaeger JSON export (nor ADK's SQLite "
            "span store)",
            value=str(path),
            fix='export with the collector file exporter (format: json) or Jaeger "Download '
            'JSON", or set format = "otlp-json" | "jaeger-json" | "adk-web-sqlite" in [spans]',
        )
    return min(present, key=present.__getitem__)


def _row(
    raw: RawSpan, location: str, sink: RejectSink, *, payloads: tuple[str, ...]
) -> tuple[Any, ...] | None:
    """Check one decoded span and turn it into a row, or reject it."""
    required = {"trace id": raw["trace"], "span id": raw["span"], "name": raw["name"]}
    required["start time"] = raw["start"]
    missing = [what for what, value in required.items() if value in (None, "")]
    if missing:
        sink.add(location, f"span lacks its {', '.join(missing)}", _text(raw))
        return None
    trace_id, span_id = _norm_id(raw["trace"], 32), _norm_id(raw["span"], 16)
    parent = None if raw["parent"] in (None, "") else _norm_id(raw["parent"], 16)
    for what, value, norm in (("trace", raw["trace"], trace_id), ("span", raw["span"], span_id)):
        if norm is None:
            sink.add(
                location,
                f"bad {what} id {value!r}: not hex or base64 of the right length",
                _text(raw),
            )
            return None
    if parent is None and raw["parent"] not in (None, ""):
        sink.add(location, f"bad parent span id {raw['parent']!r}", _text(raw))
        return None
    start, end = _whole(raw["start"]), _whole(raw["end"])
    if start is None or (end is None and raw["end"] not in (None, "", 0, "0")):
        sink.add(location, "start or end time is not an integer", _text(raw))
        return None
    start *= raw["scale"]
    end = None if not end else end * raw["scale"]
    if not isinstance(raw["name"], str):
        sink.add(location, f"span name is not text: {raw['name']!r}", _text(raw))
        return None
    reason = None
    if end is not None and end < start:
        reason = "span ends before it starts"
    elif not 0 <= start < _MAX_NS or (end is not None and end >= _MAX_NS):
        reason = "start or end time out of range (nanoseconds since 1970 before 2262)"
    if reason:
        sink.add(location, reason, _text(raw))
        return None
    attrs = dict(raw["attrs"])
    for key in ("exception.type", "exception.message"):
        if key in raw["exception"]:
            attrs[key] = raw["exception"][key]
    wrong = [key for key in _ID_ATTRIBUTES if isinstance(attrs.get(key), list | dict | bool)]
    if wrong:
        sink.add(location, f"attribute {wrong[0]} is not text: {attrs[wrong[0]]!r}", _text(raw))
        return None
    call_id = attrs.get("gen_ai.tool_call.id", attrs.get("gen_ai.tool.call.id"))
    row = (
        trace_id,
        span_id,
        parent,
        str(raw["name"]),
        start,
        end,
        raw["status"],
        raw["message"] or None,
        attrs.get("gen_ai.operation.name"),
        attrs.get("gcp.vertex.agent.invocation_id"),
        attrs.get("gcp.vertex.agent.session_id", attrs.get("gen_ai.conversation.id")),
        attrs.get("gen_ai.agent.name"),
        attrs.get("gen_ai.tool.name"),
        None if call_id == "<not specified>" else call_id,
        {
            k: (v if k in payloads else REDACTED) if k in PAYLOAD_KEYS else v
            for k, v in attrs.items()
        },
        location,
        tuple(attrs.get(key) for key in tokens.SPAN_ATTRIBUTES.values()),  # a tuple keeps ints
    )
    return row


_ID_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gcp.vertex.agent.invocation_id",
    "gcp.vertex.agent.session_id",
    "gen_ai.conversation.id",
    "gen_ai.agent.name",
    "gen_ai.tool.name",
    "gen_ai.tool_call.id",
    "gen_ai.tool.call.id",
)
"""Attributes that become id columns: a list or object there is a reject, not text."""


def _whole(value: Any) -> int | None:
    """An integer span time from an int or its decimal text (OTLP writes fixed64 as text);
    None for booleans, fractions and anything else."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 30:
        return int(value)
    if type(value) is float and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return None


def _text(raw: RawSpan) -> str:
    return json.dumps(raw["json"], default=str)


def _norm_id(value: Any, width: int) -> str | None:
    """Lowercase hex ``width`` wide from hex (16-wide trace ids are padded) or base64."""
    text = str(value).strip()
    if _HEX.fullmatch(text) and (len(text) == width or (width == 32 and len(text) == 16)):
        return text.lower().zfill(width)
    try:
        data = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return data.hex() if len(data) == width // 2 else None


def _drop_duplicates(frame: pd.DataFrame, sink: RejectSink) -> pd.DataFrame:
    dup = frame.duplicated(["trace_id", "span_id"], keep="first")
    if dup.any():
        key = frame["trace_id"] + "/" + frame["span_id"]
        first = frame.loc[~dup].set_index(key[~dup])["location"]
        reasons = "duplicate span (trace/span id already read at " + key[dup].map(first) + ")"
        raws = key[dup] + " " + frame.loc[dup, "name"]
        sink.add_many(frame.loc[dup, "location"], reasons, raws)
    return frame.loc[~dup].reset_index(drop=True)


def _derive(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``kind``; fill agent and tool names from span names where attributes lack them."""
    name, op = frame["name"].astype("str"), frame["op"].astype("str")
    by_name = np.select(
        [
            name.eq("invocation") | name.str.startswith("invoke_workflow "),
            name.str.startswith("invoke_agent ") | name.str.fullmatch(r"agent_run(?: \[.*\])?"),
            name.eq("call_llm") | name.str.startswith("generate_content "),
            name.str.startswith("execute_tool "),
        ],
        [SpanKind.INVOCATION, SpanKind.INVOKE_AGENT, SpanKind.CALL_LLM, SpanKind.EXECUTE_TOOL],
        default=SpanKind.OTHER,
    )
    kind = op.map(_OP_KIND).astype(object).fillna(pd.Series(by_name, index=frame.index))
    # Legacy Python: call_llm wraps generate_content; count the model call once.
    trace = frame["trace_id"].astype("str")
    key = trace + frame["span_id"].astype("str")
    parent_kind = (trace + frame["parent_span_id"].astype("str")).map(pd.Series(kind.values, key))
    generate = op.eq("generate_content") | name.str.startswith("generate_content ")
    kind = kind.mask(generate & parent_kind.eq(SpanKind.CALL_LLM), SpanKind.OTHER)
    agents = name.str.extract(r"^(?:invoke_agent (.+)|agent_run \[(.+)\])$")
    agent = agents[0].fillna(agents[1])
    tool = name.str.extract(r"^execute_tool (.+)$")[0]
    return frame.assign(
        kind=kind.astype("str"),
        agent_name=frame["agent_name"].fillna(agent.where(kind.eq(SpanKind.INVOKE_AGENT))),
        tool_name=frame["tool_name"].fillna(tool.where(kind.eq(SpanKind.EXECUTE_TOOL))),
    )


def _propagate(frame: pd.DataFrame, col: str) -> pd.Series:
    """Fill ``col`` on every span of a trace whose spans name exactly one value."""
    groups = frame.groupby("trace_id", sort=False)[col]
    single = groups.transform("nunique").eq(1)
    return frame[col].where(frame[col].notna() | ~single, groups.transform("first"))


def narrow(frame: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The spans ``filters`` keep: started in the window, of the sessions and invocations."""
    keep = pd.Series(True, index=frame.index)
    if filters.window is not None:
        keep &= frame["start"].ge(filters.window.start) & frame["start"].lt(filters.window.end)
    if filters.session_ids:
        keep &= frame["session_id"].isin(filters.session_ids)
    if filters.invocation_ids:
        keep &= frame["invocation_id"].isin(filters.invocation_ids)
    return frame.loc[keep]
