"""Diagnostics-plugin log lines (``run.start``, ``run.end``, ``tool.error``, ...), text or JSON.

Text lines carry a log prefix (ISO 8601 time, level, optional ``[thread]``, logger) before the
message; stack-trace lines that follow a record are appended to its ``message``. JSON lines
(logstash / ECS style) carry the same message, and may carry the ids as fields. The BigQuery
Agent Analytics plugin's rows (``format = "bigquery-agent-analytics"``, or detected) give the
same lines (:func:`.bigquery_analytics.diagnostics`). Lines from
other loggers are kept with ``kind = "other"``. ``app_name``, ``user_id`` and ``session_id``
are copied from an invocation's ``run.start`` to its other lines. A plugin key written without
its value (``user session=s-2``) leaves its field missing, with a warning naming the line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.frames import conform, empty, to_numbers
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.events import bigquery_analytics
from incidentkit.sources.events.adk_events import MS_THRESHOLD
from incidentkit.sources.evidence_files import iter_lines, require_content
from incidentkit.sources.json_files import read_json_lines
from incidentkit.sources.loaded import Loaded, RejectSink
from incidentkit.times import NO_OFFSET, Naive, holdable, parse_utc

KINDS = (
    "run.start",
    "run.end",
    "model.error",
    "tool.error",
    "run.error",
    "run.many_llm_calls",
    "rx.undeliverable",
)
"""The message kinds the diagnostics plugin writes; other lines get kind ``other``."""

OTHER = "other"
_TS = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[zZ]|[+-]\d\d(?::?\d\d)?)?"
_PREFIX = (
    rf"^(?P<ts>{_TS})\s+(?:\[[^\]]*\]\s+)?"
    r"(?P<level>(?i:trace|debug|info|warn|warning|error|fatal|critical))\s+"
    r"(?:\d+\s+---\s+)?(?:\[[^\]]*\]\s+)*"  # Spring Boot: pid --- [app] [thread]
    r"(?P<logger>[A-Za-z_$][\w$.]*)(?:\s*[-:](?:\s|$)|\s+)(?P<head>.*)$"
)
_CONTINUATION = (
    r"^(?:\s|at |Caused by:|Suppressed:|Traceback \(most recent call last\):"
    r"|(?:[a-z_][\w]*\.)+[A-Z][\w$]*(?::|$)|[A-Z]\w*(?:Error|Exception)(?::|$))"
)
# message key -> column; the first key found wins
_KEYS = {
    "invocation_id": ("inv",),
    "app_name": ("app",),
    "user_id": ("user",),
    "session_id": ("session",),
    "agent": ("agent",),
    "tool": ("tool",),
    "call_id": ("call",),
    "outcome": ("outcome",),
    "ms": ("ms",),
    "llm_calls": ("llmCalls", "calls"),
}
_JSON_KEYS = {
    "ts": ("@timestamp", "timestamp", "ts", "time"),
    "level": ("level", "log.level", "severity"),
    "head": ("message", "msg"),
    "stack": ("stack_trace", "error.stack_trace", "exc_info"),
    "kind": ("kind", "event"),
    "invocation_id": ("inv", "invocation_id", "invocationId"),
    "app_name": ("app", "app_name", "appName"),
    "user_id": ("user", "user_id", "userId"),
    "session_id": ("session", "session_id", "sessionId"),
    "agent": ("agent",),
    "tool": ("tool",),
    "call_id": ("call", "call_id", "callId"),
    "outcome": ("outcome",),
    "ms": ("ms",),
    "llm_calls": ("llmCalls", "llm_calls", "calls"),
}
_MISSING = ("", "?", "null", "-")
_SEP = "\x1e"  # record separator while joining stack lines to their record
# _SEP, or one key=value pair at the start of a line or after whitespace (_SEP is whitespace)
_PAIR_SCAN = re.compile(r"(\x1e)|(?<!\S)(\w+)=(\S*)")
_PAIR_KEYS = frozenset(key for keys in _KEYS.values() for key in keys)
_KEY_WORDS = "|".join(sorted(_PAIR_KEYS, key=lambda k: (-len(k), k)))
_BARE_KEY = re.compile(rf"(?<!\S)({_KEY_WORDS})(?=\s+(?:\w+=|(?:{_KEY_WORDS})(?!\S))|\s*$)")
"""A key of ``_KEYS`` standing alone among the pairs (``user session=s-2``: followed by a pair
or another key, or last on the line): its ``=value`` is lost. Prose (``llm calls limit``) is
not a key."""
_COLUMN_OF = {key: col for col, keys in _KEYS.items() for key in keys}


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read every log file of ``spec`` (in order) into the ``diagnostics`` frame."""
    if read_as(spec) == bigquery_analytics.FORMAT:
        return bigquery_analytics.load_diagnostics(spec, filters, environ=environ)
    sink = RejectSink("diagnostics")
    parts = []
    for order, path in enumerate(spec.paths):
        require_content(path, what="diagnostics")
        fmt = spec.format or _detect(path)
        part = _json_file(path, sink) if fmt == "json" else _text_file(path, sink)
        parts.append(part.assign(order=order))
    if not parts:
        return Loaded(frames={"diagnostics": empty("diagnostics")}, rejects=sink.frame())
    naive: Naive = spec.naive_timestamps
    frame = _fields(pd.concat(parts, ignore_index=True), sink, naive=naive)
    frame = narrow(frame, filters)
    frame = frame.sort_values(["ts", "order", "lineno"], kind="stable").reset_index(drop=True)
    return Loaded(
        frames={"diagnostics": conform("diagnostics", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def read_as(spec: SourceSpec) -> str:
    """The format ``[diagnostics]`` is read as: the manifest's, else ``bigquery-agent-analytics``
    when its first file holds the plugin's rows, else ``json`` or ``text`` by its first line."""
    if spec.format is not None:
        return spec.format
    if not spec.paths:
        return "text"
    if bigquery_analytics.detect(spec.paths[0]):
        return bigquery_analytics.FORMAT
    return _detect(spec.paths[0])


def _detect(path: Path) -> str:
    for _, text, _ in iter_lines(path, what="diagnostics"):
        return "json" if text.lstrip().startswith("{") else "text"
    return "text"


def _text_file(path: Path, sink: RejectSink) -> pd.DataFrame:
    """Records of one text log: prefix fields, first-line message, message with stack."""
    numbers, texts, complete = _columns(iter_lines(path, what="diagnostics", sink=sink))
    text = pd.Series(texts, dtype="str")
    lines = pd.DataFrame({"lineno": numbers, "text": text, "complete": complete})
    lines["location"] = path.name + ":" + lines["lineno"].astype("str")
    parsed = text.str.extract(_PREFIX)
    is_record = parsed["ts"].notna()
    is_cont = ~is_record & text.str.contains(_CONTINUATION)
    orphan = is_cont & is_record.cumsum().eq(0)
    reasons = pd.Series(None, index=lines.index, dtype=object)
    reasons[~is_record & ~is_cont] = "no log prefix (timestamp, level, logger) and not a stack line"
    reasons[~is_record & ~is_cont & ~lines["complete"]] = (
        "truncated last line: the file ends mid-line"
    )
    reasons[orphan] = "stack line with no log record before it"
    sink.add_many(lines["location"], reasons, lines["text"])
    records = pd.concat([lines, parsed], axis=1).loc[is_record]
    head = records["head"].astype("str")
    no_logger = records["logger"].isin(KINDS)  # "<ts> ERROR run.error inv=..": no logger name
    head = head.mask(no_logger, records["logger"] + " " + head)
    # one message per record: its first line, then its stack lines, joined in one pass
    pieces = pd.concat([_SEP + head, "\n" + text[is_cont & ~orphan]]).sort_index()
    joined = "".join(pieces)
    return records.assign(
        head=head,
        line=records["text"],
        message=joined.split(_SEP)[1:],
        stack=None,
        truncated=~records["complete"],
    )


def _columns(rows: Iterable[tuple[int, str, bool]]) -> tuple[list[int], list[str], list[bool]]:
    numbers: list[int] = []
    texts: list[str] = []
    complete: list[bool] = []
    for number, text, ends in rows:
        numbers.append(number)
        texts.append(text.replace(_SEP, " "))
        complete.append(ends)
    return numbers, texts, complete


def _json_file(path: Path, sink: RejectSink) -> pd.DataFrame:
    """Records of one JSON-lines log, keyed like the text records."""
    objects, locations = read_json_lines(path, sink, what="diagnostics")
    columns: dict[str, list[Any]] = {key: [] for key in (*_JSON_KEYS, "logger", "line")}
    for obj in objects:
        flat = _flatten(obj)
        for key, names in _JSON_KEYS.items():
            columns[key].append(next((flat[n] for n in names if flat.get(n) is not None), None))
        columns["logger"].append(
            flat.get("logger_name", flat.get("logger", flat.get("log.logger")))
        )
        columns["line"].append(json.dumps(obj, ensure_ascii=False))
    frame = pd.DataFrame(columns, dtype=object)
    frame["ts"] = frame["ts"].map(_epoch_iso, na_action="ignore")
    head = frame["head"].astype("str")
    return frame.assign(
        location=locations,
        lineno=[int(loc.rsplit(":", 1)[1]) for loc in locations],
        head=head,
        message=(head + "\n" + frame["stack"].astype("str").str.rstrip()).fillna(head),
        truncated=False,
    )


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _epoch_iso(value: Any) -> Any:
    """An epoch number (seconds, or milliseconds past MS_THRESHOLD) as ISO text.

    A number no time pandas can hold stays as it is, to be rejected as no ISO timestamp.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        unit = "ms" if value >= MS_THRESHOLD else "s"
        try:
            stamp = pd.Timestamp(value, unit=unit, tz="UTC")
        except (ValueError, OverflowError):  # OutOfBoundsDatetime is a ValueError
            return str(value)
        return stamp.isoformat() if holdable(pd.Series([stamp])).all() else str(value)
    return value


def _fields(rows: pd.DataFrame, sink: RejectSink, *, naive: Naive) -> pd.DataFrame:
    """Typed columns from the records of every file; unreadable records become rejects."""
    head = rows["head"].astype("str")
    word = head.str.extract(r"^([^ ]*)", expand=False)
    given = rows.get("kind", pd.Series(np.nan, index=rows.index))
    kind = given.where(given.isin(KINDS), word).where(lambda k: k.isin(KINDS), OTHER)
    out = rows.assign(kind=kind)
    plugin_head = head.where(kind.ne(OTHER), "")
    given_pairs = _pairs(plugin_head)
    for col, keys in _KEYS.items():
        found = pd.Series(np.nan, index=rows.index, dtype=object)
        for key in reversed(keys):
            if key in given_pairs:
                found = given_pairs[key].where(given_pairs[key].notna(), found)
        structured = rows[col] if col in rows else pd.Series(np.nan, index=rows.index)
        merged = structured.astype(object).where(structured.notna(), found)
        out[col] = merged.where(~merged.astype("str").isin(_MISSING))
    reasons = pd.Series(None, index=rows.index, dtype=object)
    for col, key in (("ms", "ms="), ("llm_calls", "llmCalls=/calls=")):
        text = out[col].astype("str")
        number = to_numbers(text.where(text.str.fullmatch(r"\+?\d{1,18}")))
        bad = out[col].notna() & number.isna()
        reasons[bad] = f"bad {key} number (a whole number from 0 up): " + text[bad]
        out[col] = number.astype("Int64")
    ts_text = rows["ts"].astype("str").str.replace(",", ".", regex=False)
    out["ts"], ts_reasons = parse_utc(ts_text, naive=naive)
    ts_reasons[rows["ts"].isna()] = "log line without a timestamp"
    ts_reasons[ts_reasons.eq(NO_OFFSET)] = (
        'timestamp without a UTC offset: set timezone = "UTC" (or the zone the JVM logs in, '
        'e.g. "Europe/Berlin") in [diagnostics] or at the top of the manifest'
    )
    reasons = reasons.where(reasons.notna(), ts_reasons)
    reasons = reasons.where(reasons.notna(), _scalar_ids(rows))
    cut = reasons.notna() & rows["truncated"].astype(bool)
    reasons[cut] = "truncated last line: " + reasons[cut].astype("str")
    sink.add_many(rows["location"], reasons, rows["line"])
    _warn_bare_keys(plugin_head.loc[reasons.isna()], out, rows, sink)
    out = out.loc[reasons.isna()]
    level = out["level"].astype("str").str.upper()
    out["level"] = level.replace({"WARNING": "WARN"})
    return _spread_from_start(out)


def _pairs(head: pd.Series) -> pd.DataFrame:
    """Each line's value of every ``_KEYS`` key (``key=value``; the first of a repeat wins).

    One regex pass over all lines joined by ``_SEP``, which the pattern treats as whitespace,
    so no pair spans two lines; a pair's line is the number of separators before it.
    """
    text = head.fillna("").str.replace(_SEP, " ", regex=False)
    found = np.array(_PAIR_SCAN.findall(_SEP.join(text.tolist())), dtype=object).reshape(-1, 3)
    is_pair = found[:, 0] == ""
    line = np.cumsum(~is_pair)[is_pair]  # non-decreasing
    codes, keys = pd.factorize(found[is_pair, 1])
    values = found[is_pair, 2]
    out = pd.DataFrame(index=head.index)
    for code, key in enumerate(keys):
        if key in _PAIR_KEYS:
            hit = np.flatnonzero(codes == code)
            first = hit[np.r_[True, line[hit][1:] != line[hit][:-1]]]
            column = np.full(len(head), np.nan, dtype=object)
            column[line[first]] = values[first]
            out[key] = column
    return out


def _warn_bare_keys(
    head: pd.Series, out: pd.DataFrame, rows: pd.DataFrame, sink: RejectSink
) -> None:
    """Warn of each key written without its value (``user session=s-2``) whose column the
    line leaves empty: the line is kept, the field is missing, and the warning says so."""
    found = head.str.extractall(_BARE_KEY)
    if found.empty:
        return
    line = found.index.get_level_values(0)
    keys = found[0].astype(str).to_numpy()
    columns = [_COLUMN_OF[key] for key in keys]
    named = out[sorted(set(columns))]
    values = named.to_numpy(dtype=object)[
        named.index.get_indexer(line), named.columns.get_indexer(pd.Index(columns))
    ]
    lost = pd.isna(values)
    where, raw = rows["location"].loc[line[lost]], rows["line"].loc[line[lost]]
    for location, text, key, col in zip(
        where, raw, keys[lost], np.array(columns, dtype=object)[lost], strict=True
    ):
        reason = f"{key} has no =value (write {key}=VALUE): {col} is read as missing"
        sink.warn(str(location), reason, text)


_PLAIN = ("string", "empty", "integer", "floating", "mixed-integer-float")
"""Column kinds that hold no list, object or boolean: their ids need no value-by-value check."""
_ID_COLUMNS = ("invocation_id", "app_name", "user_id", "session_id", "agent", "tool", "call_id")


def _scalar_ids(rows: pd.DataFrame) -> pd.Series:
    """Why a JSON record's id field is no text or number (a list, an object), else null."""
    reasons = pd.Series(None, index=rows.index, dtype=object)
    for col in _ID_COLUMNS:
        if col in rows and pd.api.types.infer_dtype(rows[col], skipna=True) not in _PLAIN:
            wrong = rows[col].map(lambda v: isinstance(v, list | dict | bool))
            reasons[wrong & reasons.isna()] = f"{col} is not text: " + rows[col][wrong].map(repr)
    return reasons


def _spread_from_start(frame: pd.DataFrame) -> pd.DataFrame:
    """Copy app, user and session from each invocation's run.start to its other lines."""
    starts = frame.loc[frame["kind"].eq("run.start") & frame["invocation_id"].notna()]
    starts = starts.drop_duplicates("invocation_id").set_index("invocation_id")
    out = frame.copy()
    for col in ("app_name", "user_id", "session_id"):
        out[col] = frame[col].where(frame[col].notna(), frame["invocation_id"].map(starts[col]))
    return out


def narrow(frame: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The lines ``filters`` keep: window on ts; id filters drop only lines that name another
    app/session/invocation."""
    keep = pd.Series(True, index=frame.index)
    if filters.window is not None:
        keep &= frame["ts"].ge(filters.window.start) & frame["ts"].lt(filters.window.end)
    if filters.app_name is not None:
        keep &= frame["app_name"].isna() | frame["app_name"].eq(filters.app_name)
    for col, wanted in (
        ("session_id", filters.session_ids),
        ("invocation_id", filters.invocation_ids),
    ):
        if wanted:
            keep &= frame[col].isna() | frame[col].isin(wanted)
    return frame.loc[keep]
