"""Prototype for issue 31: DuckDB and ADBC do the parsing, Python only the odd records.

    .venv/bin/python benchmarks/proto_engine.py --events 1000000      # JSON lines: floor, fast, kit
    .venv/bin/python benchmarks/proto_engine.py --check 200000        # fast path == events.load
    .venv/bin/python benchmarks/proto_engine.py --hostile             # DuckDB on hostile lines
    .venv/bin/python benchmarks/proto_engine.py --args-key 250000     # args_key: DuckDB vs msgspec
    .venv/bin/python benchmarks/proto_engine.py --ledger 300000       # ADBC vs COPY vs ledger.load
    .venv/bin/python benchmarks/proto_engine.py --pg-events 1000000   # events from PostgreSQL
    .venv/bin/python benchmarks/proto_engine.py --cache 1000000       # IPC/Parquet cache reload

Not the kit: a measured sketch for the team to decide on. The fast path (:func:`fast_frames`)
reads a JSON-lines file of ADK Java events: numpy numbers the lines from the raw bytes (blank
lines kept, so a row's position is its line), Arrow holds them without a copy, and one DuckDB
query parses each line, reads every field the four event frames need as JSON text, checks its
JSON type (the first character of the value's text), looks for repeated keys (``json_keys``)
and screens anything odd (NaN, lone surrogates, deep nesting, a wrong type, an implausible
time, unreadable token counts, a compaction). Only the odd records go to Python: the kit's own
per-record reader (``adk_events._read``) is their oracle, so their rows and rejects are the
kit's. Payloads (``args``, ``response``, ``stateDelta``) stay JSON text out of DuckDB and are
decoded by msgspec in Python (the frames hold Python objects); ``args_key`` is msgspec's
sorted encoding of the decoded args. Identity, duplicates, order and ``seq`` are the kit's
own tail (``normalise`` after its chunks), run on the merged chunks.

Each timed case runs in a fresh process (``fresh.best_of``: best of ``--repeat`` alternated
runs), so peak RSS is its own.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fresh

MAX_LINE = 32 << 20
NS_LIMIT_MS = 9.2e18 / 1e6  # incidentkit.times.NS_LIMIT in epoch milliseconds
COUNT_MAX = 2**31 - 1  # incidentkit.sources.tokens.EVENT_COUNT_MAX

# -- what the frames read -----------------------------------------------------------------------
# One from_json of each line reads every field the frames need with the type the frames give it
# (DuckDB casts leniently: "7" would become 7.0); the JSON types themselves are checked once per
# *shape*: a hash of every object's keys and every value's JSON type, in document order
# (json_keys/json_type over '$..*'). Lines of one shape have the same keys and types
# everywhere, so one of them, checked by the kit's own typed decoder and a repeated-key check,
# vouches for all; the rules on values (an empty id, a time out of range, a token count) are
# checked on every row.
V, B, D, J = "VARCHAR", "BOOLEAN", "DOUBLE", "JSON"
TEXT_FIELDS = (
    "id",
    "invocationId",
    "invocation_id",
    "author",
    "branch",
    "errorCode",
    "error_code",
    "errorMessage",
    "error_message",
    "appName",
    "app_name",
    "userId",
    "user_id",
    "sessionId",
    "session_id",
)
FLAG_FIELDS = ("partial", "turnComplete", "turn_complete", "interrupted")
ACTION_TEXT = (
    "transferToAgent",
    "transfer_to_agent",
    "transferAgent",
    "rewindBeforeInvocationId",
    "rewind_before_invocation_id",
)
ACTION_FLAGS = (
    "escalate",
    "skipSummarization",
    "skip_summarization",
    "endOfAgent",
    "end_of_agent",
    "endInvocation",
)
ACTION_ANY = ("stateDelta", "state_delta", "compaction", "agentState", "agent_state")
USAGE = (
    "promptTokenCount",
    "prompt_token_count",
    "candidatesTokenCount",
    "candidates_token_count",
    "thoughtsTokenCount",
    "thoughts_token_count",
    "totalTokenCount",
    "total_token_count",
)
CALL_SHAPE = {"id": V, "name": V, "args": J}
RESPONSE_SHAPE = {"id": V, "name": V, "response": J}
PART_SHAPE: dict[str, Any] = {
    "text": V,
    "thought": B,
    "functionCall": CALL_SHAPE,
    "function_call": CALL_SHAPE,
    "functionResponse": RESPONSE_SHAPE,
    "function_response": RESPONSE_SHAPE,
    "codeExecutionResult": J,
    "code_execution_result": J,
}
EVENT_SHAPE: dict[str, Any] = {
    **{key: V for key in TEXT_FIELDS},
    **{key: B for key in FLAG_FIELDS},
    "timestamp": D,
    "longRunningToolIds": [V],
    "long_running_tool_ids": [V],
    "content": {"parts": [PART_SHAPE]},
    "actions": {
        **{key: V for key in ACTION_TEXT},
        **{key: B for key in ACTION_FLAGS},
        **{key: J for key in ACTION_ANY},
    },
    "usageMetadata": {key: D for key in USAGE},
    "usage_metadata": {key: D for key in USAGE},
}

MACROS = r"""
CREATE OR REPLACE MACRO given(x) AS x IS NOT NULL AND x <> '';
CREATE OR REPLACE MACRO count_ok(x) AS x IS NULL OR (x BETWEEN 0 AND 2147483647 AND x = floor(x));
"""


def _first(*values: str) -> str:
    """The first of ``values`` that is not null (the kit reads camelCase, then snake_case)."""
    return f"coalesce({', '.join(values)})"


SCREEN = r"""text[1] = '{' AND NOT contains(text, 'NaN') AND NOT contains(text, 'Infinity')
  AND NOT (contains(text, '\u') AND regexp_matches(text, '\\u[dD][89abcdefABCDEF]'))
  AND (strlen(text) < 400
       OR strlen(text) - strlen(replace(replace(text, '[', ''), '{', '')) < 200)"""
"""Lines the fast path may read: an object, no NaN/Infinity (Python refuses them, DuckDB reads
them), no escaped surrogate (a lone one the kit refuses), not nested deeper than the kit reads."""
SHAPE = """hash(json_keys('[' || text || ']', '$..*'), json_type('[' || text || ']', '$..*'))"""
"""Every object's keys and every value's JSON type, in document order (the line wrapped in an
array, so its own keys are among them), hashed."""


def value_checks() -> list[str]:
    """The kit's rules on values (not on types), on every row."""
    a = "e.actions"
    checks = [
        "given(e.id)",
        f"given({_first('e.invocationId', 'e.invocation_id')})",
        "given(e.author)",
        "ts_num >= 1e11",
        f"ts_num < {min(1e14, NS_LIMIT_MS)!r}",
        f"{a}.compaction IS NULL",  # compactions are rare: the oracle reads them
        "list_bool_and(list_transform(c.parts, lambda x: (x.call IS NULL OR given(x.call.name))"
        " AND (x.response IS NULL OR given(x.response.name)))) IS NOT FALSE",
    ]
    checks += [f"count_ok(usage.{key})" for key in USAGE]
    return checks


def events_sql(source: str, *, guard: bool = True, strict: bool = True) -> str:
    """One query over ``source`` (pos, text): a row per line the screen lets by, its shape
    hash, ``value_ok`` when the kit's value rules hold, every column of the four frames, and
    the event's calls and responses as lists. ``guard``: json_valid first (else a malformed
    line fails the query, and the caller runs it again guarded); ``strict=False`` leaves the
    shape out (to measure what it costs)."""
    a = "e.actions"
    counts = {
        "prompt_n": ("promptTokenCount", "prompt_token_count"),
        "candidates_n": ("candidatesTokenCount", "candidates_token_count"),
        "thoughts_n": ("thoughtsTokenCount", "thoughts_token_count"),
        "total_n": ("totalTokenCount", "total_token_count"),
    }
    count_cols = ",\n  ".join(
        f"{_first(f'usage.{x}', f'usage.{y}')}::BIGINT AS {col}" for col, (x, y) in counts.items()
    )
    sessions = {
        "app_name": ("appName", "app_name"),
        "user_id": ("userId", "user_id"),
        "session_id": ("sessionId", "session_id"),
    }
    session_cols = ",\n  ".join(
        f"nullif({_first(f'e.{x}', f'e.{y}')}, '') AS {col}" for col, (x, y) in sessions.items()
    )
    return f"""
WITH parsed AS MATERIALIZED (
  SELECT pos, from_json(text, '{json.dumps(EVENT_SHAPE)}') AS e,
    {SHAPE if strict else "0::UBIGINT"} AS shape
  FROM {source}
  WHERE {SCREEN}{" AND json_valid(text)" if guard else ""}
), read AS MATERIALIZED (
  SELECT pos, shape, e,
    struct_pack(parts := list_transform(e.content.parts, lambda x: struct_pack(
      text := x.text, thought := x.thought,
      call := coalesce(x.functionCall, x.function_call),
      response := coalesce(x.functionResponse, x.function_response),
      code := {_first("x.codeExecutionResult", "x.code_execution_result")}))) AS c,
    coalesce(e.usageMetadata, e.usage_metadata) AS usage,
    {_first("e.longRunningToolIds", "e.long_running_tool_ids")} AS lr,
    e.timestamp AS ts_num
  FROM parsed
)
SELECT pos, shape,
  coalesce({" AND ".join(value_checks())}, false) AS value_ok,
  e.id AS event_id,
  {_first("e.invocationId", "e.invocation_id")} AS invocation_id,
  e.author AS author,
  e.branch AS branch,
  coalesce(e.partial, false) AS partial,
  coalesce({_first("e.turnComplete", "e.turn_complete")}, false) AS turn_complete,
  coalesce(e.interrupted, false) AS interrupted,
  {_first("e.errorCode", "e.error_code")} AS error_code,
  {_first("e.errorMessage", "e.error_message")} AS error_message,
  {session_cols},
  {_first(a + ".transferToAgent", a + ".transfer_to_agent", a + ".transferAgent")}
    AS transfer_to_agent,
  coalesce({a}.escalate, false) AS escalate,
  coalesce({_first(a + ".skipSummarization", a + ".skip_summarization")}, false)
    AS skip_summarization,
  ts_num,
  CASE WHEN len(lr) > 0 THEN list_sort(lr) END AS long_running_tool_ids,
  coalesce(len(c.parts), 0) > 0 AS has_content,
  coalesce(list_bool_or(list_transform(c.parts, lambda x: x.call IS NOT NULL)), false)
    AS has_call,
  coalesce(list_bool_or(list_transform(c.parts, lambda x: x.response IS NOT NULL)), false)
    AS has_response,
  coalesce(c.parts[-1].code IS NOT NULL, false) AS trailing_code,
  nullif(array_to_string(list_transform(list_filter(c.parts, lambda x: given(x.text)
    AND NOT coalesce(x.thought, false)), lambda x: x.text), ''), '') AS text,
  {count_cols},
  {_first(a + ".rewindBeforeInvocationId", a + ".rewind_before_invocation_id")}
    AS rewind_before,
  coalesce({_first(a + ".endOfAgent", a + ".end_of_agent", a + ".endInvocation")}, false)
    AS end_of_agent,
  {_first(a + ".agentState", a + ".agent_state")} IS NOT NULL AS agent_state,
  nullif({_first(a + ".stateDelta", a + ".state_delta")}::VARCHAR, '{{}}') AS delta,
  [struct_pack(part_no := i - 1, id := c.parts[i].call.id, name := c.parts[i].call.name,
     payload := c.parts[i].call.args::VARCHAR)
   FOR i IN range(1, coalesce(len(c.parts), 0) + 1) IF c.parts[i].call IS NOT NULL] AS calls,
  [struct_pack(part_no := i - 1, id := c.parts[i].response.id,
     name := c.parts[i].response.name, payload := c.parts[i].response.response::VARCHAR)
   FOR i IN range(1, coalesce(len(c.parts), 0) + 1) IF c.parts[i].response IS NOT NULL]
    AS responses
FROM read
"""


# -- the shapes: one line of each, checked by the kit's own typed decoder ----------------------


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a repeated key")
    return dict(pairs)


def _count_type(value: Any) -> bool:
    return value is None or type(value) in (int, float)


def shape_ok(text: str) -> bool:
    """Whether a line's JSON types are those the kit reads without a reject or a warning
    (its values aside): no repeated key anywhere, the kit's typed decoder accepts it, and
    the fields that decoder leaves untyped hold what the fast path reads (a flag for
    ``thought``, numbers for token counts)."""
    import msgspec

    from incidentkit.sources.events import adk_typed

    try:
        obj = json.loads(text, object_pairs_hook=_no_repeats)
        adk_typed._DECODER.decode(text)
    except (ValueError, RecursionError, msgspec.DecodeError):
        return False
    if not isinstance(obj, dict):
        return False
    content = obj.get("content") or {}
    for part in content.get("parts") or []:
        if part.get("thought") not in (None, True, False):
            return False
    for key in ("usageMetadata", "usage_metadata"):
        usage = obj.get(key)
        if usage is not None and (
            not isinstance(usage, dict) or not all(_count_type(usage.get(k)) for k in USAGE)
        ):
            return False
    return True


# -- lines from raw bytes ---------------------------------------------------------------------


def split_lines(data: bytes | memoryview) -> Any:
    """The start of each line of ``data`` and where the next begins (numpy, 1 MiB at a
    time: 400 MB in 0.15 s; a whole-buffer ``== 10`` took 1.5 s)."""
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    found = [np.flatnonzero(buf[s : s + (1 << 20)] == 10) + s for s in range(0, len(buf), 1 << 20)]
    ends = np.concatenate([*found, np.zeros(0, np.int64)]) + 1  # one past each newline
    if not len(ends) or ends[-1] != len(buf):
        ends = np.append(ends, len(buf))  # a last line without its newline
    starts = np.concatenate([[0], ends[:-1]])
    return starts.astype(np.int64), ends.astype(np.int64)


def bad_utf8(data: bytes, starts: Any, ends: Any) -> set[int]:
    """Lines (indexes) that are not UTF-8: Arrow validates all at once (400 MB: 0.05 s);
    only when that fails does Python decode line by line to find them."""
    import numpy as np
    import pyarrow as pa

    offsets = np.append(starts, ends[-1] if len(ends) else 0)
    binary = pa.Array.from_buffers(
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    try:
        binary.cast(pa.large_string())
        return set()
    except pa.ArrowInvalid:
        pass
    bad = set()
    view = memoryview(data)
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        try:
            str(view[a:b], "utf-8")
        except UnicodeDecodeError:
            bad.add(i)
    return bad


class Lines:
    """A block of whole lines of a JSON-lines file, as one Arrow table without a copy:
    ``pos`` (the line's index in the file, 0-based) and ``text`` (the line with its newline;
    null for lines the fast path must not see: not UTF-8, too long, the file's last line cut
    off, a BOM opening the file)."""

    def __init__(self, path: Path, data: bytes, first: int = 0, *, last: bool = True) -> None:
        import numpy as np
        import pyarrow as pa

        self.path, self.data, self.first = path, data, first
        self.starts, self.ends = split_lines(data)
        n = len(self.starts)
        hidden = np.zeros(n, dtype=bool)
        hidden[(self.ends - self.starts) > MAX_LINE] = True
        hidden[list(bad_utf8(data, self.starts, self.ends))] = True
        if last and n and data[self.ends[-1] - 1 : self.ends[-1]] != b"\n":
            hidden[-1] = True  # a cut-off last line: the kit names it truncated
        if first == 0 and data.startswith(b"\xef\xbb\xbf"):
            hidden[0] = True  # a BOM before line 1: the kit strips it, DuckDB refuses it
        self.hidden = np.flatnonzero(hidden)
        offsets = np.append(self.starts, self.ends[-1] if n else 0)
        validity = pa.array(~hidden).buffers()[1] if len(self.hidden) else None
        text = pa.Array.from_buffers(
            pa.large_string(),
            n,
            [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
            null_count=len(self.hidden),
        )
        pos = pa.array(np.arange(first, first + n, dtype=np.int64))
        self.table = pa.table({"pos": pos, "text": text})

    def raw(self, i: int) -> bytes:
        """Line ``i`` (its index in the file) as bytes, with its newline."""
        return self.data[self.starts[i - self.first] : self.ends[i - self.first]]

    def text(self, i: int) -> str:
        """Line ``i`` as the kit's line reader hands it over (a readable line)."""
        return self.raw(i).decode("utf-8").removeprefix("\ufeff").rstrip("\r\n")


BLOCK = 32 << 20
"""Bytes read at a time: each block of whole lines is parsed, then freed."""


def blocks(path: Path, size: int = BLOCK) -> Iterator[Lines]:
    """The file's lines, a block of whole lines at a time (a line longer than a block makes
    its block longer)."""
    first = 0
    rest = b""
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(size)
            data = rest + chunk
            if not chunk:
                if data:
                    yield Lines(path, data, first, last=True)
                return
            cut = data.rfind(b"\n") + 1
            if not cut:
                rest = data  # no whole line yet
                continue
            rest = data[cut:]
            lines = Lines(path, data[:cut], first, last=False)
            first += lines.table.num_rows
            yield lines


# -- the odd records: the kit's own per-record reader is their oracle --------------------------


def odd_records(lines: Lines, rows: Any, sink: Any) -> tuple[list[str], list[str], list[int]]:
    """Texts, locations and positions of the odd lines ``rows`` as the kit's line reader
    hands them over (``evidence_files.iter_lines`` and ``iter_json_line_chunks(decode=False)``): a
    line-level reject goes to ``sink``, a blank line is skipped."""
    from incidentkit.sources import evidence_files, json_files

    texts, locations, positions = [], [], []
    name = lines.path.name
    for i in map(int, rows):
        raw = lines.raw(i)
        location = f"{name}:{i + 1}"
        if len(raw) > MAX_LINE:
            evidence_files._reject_line(
                sink, lines.path, i + 1, f"line longer than {MAX_LINE >> 20} MiB", raw
            )
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            reason = f"not UTF-8 text (byte {err.start + 1})"
            evidence_files._reject_line(sink, lines.path, i + 1, reason, raw)
            continue
        if i == 0:
            text = text.removeprefix("\ufeff")
        stripped = text.rstrip("\r\n")
        if not stripped.strip():
            continue
        complete = text.endswith("\n")
        if not complete and json_files._json_object(stripped, complete, location, sink) is None:
            continue
        texts.append(stripped)
        locations.append(location)
        positions.append(i)
    return texts, locations, positions


def oracle_chunk(texts: list[str], locations: Any, positions: list[int], sink: Any) -> Any:
    """The kit's ``_read_chunk`` for records at ``positions`` (not a contiguous range);
    ``locations`` is a list, or a meta frame with ``location`` and the session keys."""
    import numpy as np
    import pandas as pd

    from incidentkit.sources.events import adk_events as ae
    from incidentkit.sources.events import adk_typed

    raw = pd.Series(texts, dtype=object)
    meta = (
        locations.reset_index(drop=True)
        if isinstance(locations, pd.DataFrame)
        else pd.DataFrame({"location": locations})
    )
    pos = np.array(positions, dtype=np.int64)
    rejects: list[Any] = []
    typed = adk_typed.decode(raw.tolist())
    chunk = ae._read(typed, raw, meta, pos, ae.JAVA_JSON, {}, rejects)
    if typed is not None and len(rows := typed.undecodable):
        meta_rows = meta.iloc[rows].reset_index(drop=True)
        rest = ae._read(None, raw.iloc[rows], meta_rows, pos[rows], ae.JAVA_JSON, {}, rejects)
        chunk = ae._merged(chunk, rest)
        rejects.sort(key=lambda rejected: rejected[0])
    for _, location, reason, text in rejects:
        sink.add(location, reason, text)
    return chunk


# -- the fast path ----------------------------------------------------------------------------


def connect(threads: int | None = None) -> Any:
    import duckdb

    con = duckdb.connect(config={"threads": threads or os.cpu_count() or 2})
    con.execute(MACROS)
    return con


def parse(con: Any, table: Any, *, strict: bool = True, guard: bool = False) -> Any:
    """The event query over an Arrow table of lines (pos, text), as Arrow: first without
    json_valid (a malformed line fails the query), then, only if it failed, with it."""
    import duckdb

    con.register("lines_in", table)
    try:
        if not guard:
            try:
                return con.sql(events_sql("lines_in", guard=False, strict=strict)).to_arrow_table()
            except duckdb.Error:
                pass  # a malformed line: read again with json_valid in front
        return con.sql(events_sql("lines_in", guard=True, strict=strict)).to_arrow_table()
    finally:
        con.unregister("lines_in")


def _decode_all(texts: list[Any]) -> list[Any]:
    """JSON text (or None) decoded as the kit decodes payloads: msgspec, else json.loads."""
    import msgspec

    from incidentkit.sources.json_text import fast_loads

    decoder = msgspec.json.Decoder()
    try:
        return [None if t is None else decoder.decode(t) for t in texts]
    except msgspec.DecodeError:
        return [None if t is None else fast_loads(t) for t in texts]


def plain_chunk(table: Any, location_prefix: str) -> Any:
    """The kit's per-chunk frames (``adk_events._Chunk``) from the fast path's plain rows."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    from incidentkit.frames import STR, TS, text_array
    from incidentkit.sources.events import adk_events as ae
    from incidentkit.sources.events import event_kinds
    from incidentkit.sources.events.adk_parts import (
        Parts,
        calls_frame,
        responses_frame,
        state_writes_frame,
    )
    from incidentkit.sources.tokens import REASON

    n = table.num_rows
    pos = table["pos"].to_numpy()
    col = {name: table[name] for name in table.column_names}

    def text(name: str) -> Any:
        return text_array(col[name].combine_chunks().cast(pa.large_string()))

    def flag(name: str) -> Any:
        return col[name].to_numpy()

    numbers = col["ts_num"].to_numpy()
    ts = pd.Series(pd.to_datetime(numbers, unit="ms", utc=True)).dt.as_unit("ns")
    lr_col = col["long_running_tool_ids"]
    if lr_col.null_count == n:
        lr_ids: list[tuple[str, ...]] = [()] * n
    else:
        lr_ids = [() if v is None else tuple(v) for v in lr_col.to_pylist()]

    # tokens as tokens.event_tokens counts them (unreadable ones went to the oracle)
    def counts(name: str) -> Any:
        return col[name].to_numpy(zero_copy_only=False)

    p, c, th, tot = (counts(x) for x in ("prompt_n", "candidates_n", "thoughts_n", "total_n"))
    pg, cg, tg, totg = (~np.isnan(x.astype(float)) for x in (p, c, th, tot))

    def zero(x: Any, g: Any) -> Any:
        return np.where(g, x, 0).astype(np.int64)

    output = zero(c, cg) + zero(th, tg)
    output_known = cg | tg
    total = np.where(totg, zero(tot, totg), zero(p, pg) + output)
    total_known = totg | pg | output_known
    tokens = {
        "prompt_tokens": pd.arrays.IntegerArray(zero(p, pg), ~pg),
        "output_tokens": pd.arrays.IntegerArray(output, ~output_known),
        "total_tokens": pd.arrays.IntegerArray(total.astype(np.int64), ~total_known),
    }
    partial = flag("partial")
    has_call, has_response = flag("has_call"), flag("has_response")
    error_code = text("error_code")
    final = (
        flag("skip_summarization")
        | np.array([bool(x) for x in lr_ids], dtype=bool)
        | (~has_call & ~has_response & ~partial & ~flag("trailing_code"))
    )
    kinds = event_kinds.kinds(
        {
            "has_content": flag("has_content"),
            "error_code": error_code,
            "has_compaction": np.zeros(n, dtype=bool),
            "compaction_start": pd.Series(pd.NaT, index=range(n), dtype=TS),
            "compaction_end": pd.Series(pd.NaT, index=range(n), dtype=TS),
            "rewind_before": text("rewind_before"),
            "end_of_agent": flag("end_of_agent"),
            "has_agent_state": flag("agent_state"),
        }
    )
    final &= ~event_kinds.is_marker(kinds["kind"])
    location = pc.binary_join_element_wise(
        location_prefix, pc.cast(pc.add(table["pos"], 1), pa.string()), ""
    )
    events = pd.DataFrame(
        {
            "pos": pos,
            "location": text_array(location.combine_chunks().cast(pa.large_string())),
            "event_id": text("event_id"),
            "invocation_id": text("invocation_id"),
            "author": text("author"),
            "branch": text("branch"),
            "partial": partial,
            "turn_complete": flag("turn_complete"),
            "interrupted": flag("interrupted"),
            "error_code": error_code,
            "error_message": text("error_message"),
            "app_name": text("app_name"),
            "user_id": text("user_id"),
            "session_id": text("session_id"),
            "transfer_to_agent": text("transfer_to_agent"),
            "escalate": flag("escalate"),
            "skip_summarization": flag("skip_summarization"),
            "ts": ts.array,
            "long_running_tool_ids": lr_ids,
            "final_response": final,
            **tokens,
            REASON: [None] * n,
            "text": pd.array(
                pc.if_else(pc.equal(col["text"], ""), None, col["text"])
                .combine_chunks()
                .cast(pa.large_string()),
                dtype=STR,
            ),
            "source_format": "adk-java-json",
            **kinds,
        }
    )
    children = {}
    for name in ("calls", "responses"):
        lists = col[name].combine_chunks()
        flat = pc.list_flatten(lists)
        parts = Parts(
            pc.list_parent_indices(lists).to_numpy(),
            flat.field("part_no").to_numpy(zero_copy_only=False).astype(np.int64),
            flat.field("id").to_pylist(),
            flat.field("name").to_pylist(),
            _decode_all(flat.field("payload").to_pylist()),
        )
        if name == "calls":
            children[name] = calls_frame(parts, None, pos, lr_ids)
        else:
            children[name] = responses_frame(parts, None, pos)
    deltas = col["delta"].to_pylist()
    children["state_writes"] = state_writes_frame(_decode_all(deltas), pos, np.ones(n, dtype=bool))
    return ae._Chunk(events=events, **children)


def plain_rows(
    lines: Lines, parsed: Any, *, strict: bool, verdicts: dict[int, bool] | None = None
) -> Any:
    """Which parsed rows the fast path reads as the kit does: their values pass, and one line
    of their shape passes :func:`shape_ok` (checked once per shape; ``verdicts`` keeps the
    answers across blocks)."""
    import numpy as np

    value_ok = parsed["value_ok"].to_numpy(zero_copy_only=False)
    if not strict:
        return value_ok
    verdicts = verdicts if verdicts is not None else {}
    shape = parsed["shape"].to_numpy()
    shapes, inverse = np.unique(shape, return_inverse=True)
    by_shape = np.lexsort((~value_ok, inverse))  # each shape's rows, those whose values pass first
    first = by_shape[np.searchsorted(inverse[by_shape], np.arange(len(shapes)))]
    pos = parsed["pos"].to_numpy()
    good = np.zeros(len(shapes), dtype=bool)
    for k, (found, row) in enumerate(zip(shapes.tolist(), first.tolist(), strict=True)):
        if found not in verdicts or (not verdicts[found] and value_ok[row]):
            verdicts[found] = shape_ok(lines.text(int(pos[row])))
        good[k] = verdicts[found]
    return value_ok & good[inverse]


def fast_frames(
    path: Path,
    *,
    sink: Any = None,
    stats: dict[str, Any] | None = None,
    strict: bool = True,
    block: int = BLOCK,
) -> tuple[dict[str, Any], Any]:
    """The four event frames of a JSON-lines file of ADK Java events, by the fast path: a
    block of lines at a time through DuckDB, the odd records through the kit's own reader,
    then the kit's tail (identity, duplicates, order, seq, children)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from incidentkit.manifest import Filters
    from incidentkit.sources.events import adk_events as ae
    from incidentkit.sources.loaded import RejectSink

    sink = sink if sink is not None else RejectSink("events")
    stats = stats if stats is not None else {}
    for key in ("lines_s", "duckdb_s", "python_s", "odd_s", "odd", "records", "shapes"):
        stats[key] = 0
    con = connect()
    verdicts: dict[int, bool] = {}  # shape -> the kit reads it plain
    chunks = []
    clock = time.perf_counter()
    for lines in blocks(path, block):
        now = time.perf_counter()
        stats["lines_s"] += now - clock
        parsed = parse(con, lines.table, strict=strict)
        clock, now = now, time.perf_counter()
        stats["duckdb_s"] += now - clock
        plain_mask = plain_rows(lines, parsed, strict=strict, verdicts=verdicts)
        seen = np.zeros(lines.table.num_rows, dtype=bool)
        seen[parsed["pos"].to_numpy() - lines.first] = True  # the rest: held back, screened
        odd_rows = np.union1d(
            parsed["pos"].to_numpy()[~plain_mask], lines.first + np.flatnonzero(~seen)
        )
        parts = []
        if plain_mask.any():
            parts.append(plain_chunk(parsed.filter(pa.array(plain_mask)), f"{path.name}:"))
        del parsed
        clock, now = now, time.perf_counter()
        stats["python_s"] += now - clock
        if len(odd_rows):
            texts, locations, positions = odd_records(lines, odd_rows, sink)
            if texts:
                parts.append(oracle_chunk(texts, locations, positions, sink))
        clock, now = now, time.perf_counter()
        stats["odd_s"] += now - clock
        stats["odd"] += len(odd_rows)
        stats["records"] += lines.table.num_rows
        if len(parts) == 1:
            chunks.append(parts[0])
        elif parts:  # the kit's chunks come in input order: the plain and odd rows merged
            events = pd.concat([part.events for part in parts], ignore_index=True)
            order = np.argsort(events["pos"].to_numpy(), kind="stable")
            chunks.append(
                ae._Chunk(
                    events=events.take(order).reset_index(drop=True),
                    **{
                        name: pd.concat([getattr(p, name) for p in parts], ignore_index=True)
                        for name in ("calls", "responses", "state_writes")
                    },
                )
            )
        del lines, parts
        clock = time.perf_counter()
    stats["shapes"] = len(verdicts)
    frames = kit_tail(chunks, Filters(), sink)
    stats["tail_s"] = time.perf_counter() - clock
    return frames, sink


def kit_tail(chunks: list[Any], filters: Any, sink: Any) -> dict[str, Any]:
    """``adk_events.normalise`` after its chunks are read (identity, duplicates, order, seq,
    kinds across events, child frames), as the kit runs it."""
    import pandas as pd

    from incidentkit.frames import TS, conform, empty
    from incidentkit.sources.events import adk_events as ae
    from incidentkit.sources.events import event_kinds
    from incidentkit.sources.process_memory import release_memory
    from incidentkit.sources.tokens import REASON, warn_unreadable

    if not chunks:
        return {name: empty(name) for name in ae.EVENT_FRAMES}
    parts = [chunk.events for chunk in chunks]
    children = {name: [getattr(c, name) for c in chunks] for name in ae.EVENT_FRAMES[1:]}
    del chunks
    release_memory()
    events = pd.concat([part[ae._DECIDING] for part in parts], ignore_index=True)
    parts = [part.drop(columns=ae._DECIDING) for part in parts]
    events["ts"] = events["ts"].astype(TS)
    events = ae._identify(events, None, sink)
    if not (keep := ae.matches(events, filters)).all():
        events = events[keep]
    events = ae._drop_duplicates(events, sink)
    warn_unreadable(events, sink, what="events")
    events = events.drop(columns=["location", REASON])
    order = ae._session_order(events)
    rest_order = events.index.to_numpy()[order]
    read = sum(len(part) for part in parts)
    gather = None if ae._in_order(order, len(order)) else order
    rest_gather = None if ae._in_order(rest_order, read) else rest_order
    columns = [str(col) for col in events.columns]
    events = pd.DataFrame({col: ae._gathered([events.pop(col)], gather) for col in columns})
    events["seq"] = ae._seq(events)
    keys = events[
        ["pos", "event_id", *ae.SESSION_KEYS, "invocation_id", "seq", "ts", "author", "partial"]
    ]
    rest = {
        col: ae._gathered([part.pop(col) for part in parts], rest_gather)
        for col in parts[0].columns
    }
    del parts
    events = pd.concat([events, pd.DataFrame(rest)], axis=1)
    del rest
    frames = {"events": conform("events", events.assign(**event_kinds.relations(events)))}
    del events
    for name, by in (("calls", "part_no"), ("responses", "part_no"), ("state_writes", "key")):
        frames[name] = ae._attach(children.pop(name), name, keys, by)
    return frames


# -- hostile input: lines each of which breaks one rule, mixed with good ones -------------------


def _base(i: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_events

    return bench_events._event(i, keys=True)


def hostile_lines() -> list[bytes]:
    """Good events with a bad or odd one after every few: each line exercises one rule of the
    kit (a reject, a warning, a blank, a repeated key, ...)."""
    out: list[bytes] = ["\ufeff".encode() + json.dumps(_base(0)).encode()]

    def ev(i: int, **change: Any) -> dict[str, Any]:
        event = _base(i)
        for key, value in change.items():
            if value is _DROP:
                event.pop(key, None)
            else:
                event[key] = value
        return event

    call = {"id": "adk-x", "name": "send_invoice", "args": {"b": 1, "a": [1.5, 1e16, "é"]}}
    variants: list[Any] = [
        ev(1, id=7),
        ev(2, id=""),
        ev(3, id=_DROP),
        ev(4, author=True),
        ev(5, invocationId=None),
        ev(6, invocationId=_DROP, invocation_id="e-snake"),
        ev(7, partial="true"),
        ev(8, partial=True),
        ev(9, timestamp="1750000000000"),
        ev(10, timestamp=True),
        ev(11, timestamp=1750000000.5),
        ev(12, timestamp=1750000000123.75),
        ev(13, timestamp=-5),
        ev(14, timestamp=10**30),
        ev(15, timestamp=_DROP),
        ev(16, content="hello"),
        ev(17, content={"parts": {"text": "x"}}),
        ev(18, content={"parts": ["x", {"text": "y"}]}),
        ev(19, content={"parts": [{"text": 5}]}),
        ev(20, content={"parts": [{"text": "a", "thought": True}, {"text": "b"}, {"text": "c"}]}),
        ev(21, content={"parts": [{"text": "a", "thought": "yes"}]}),
        ev(22, content={"parts": [{"functionCall": "call"}]}),
        ev(23, content={"parts": [{"functionCall": {"args": {}}}]}),
        ev(24, content={"parts": [{"functionCall": {**call, "name": ""}}]}),
        ev(25, content={"parts": [{"functionCall": {**call, "args": [1]}}]}),
        ev(26, content={"parts": [{"functionCall": {**call, "id": 5}}]}),
        ev(27, content={"parts": [{"functionCall": call}, {"functionCall": {**call, "id": "b"}}]}),
        ev(28, content={"parts": [{"function_call": call}]}),
        ev(29, content={"parts": [{"functionResponse": {"name": "f", "response": "ok"}}]}),
        ev(30, content={"parts": [{"functionResponse": {"name": "f", "response": None}}]}),
        ev(31, content={"parts": [{"codeExecutionResult": {"outcome": "OK"}}]}),
        ev(32, content={"parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}),
        ev(33, content={"parts": []}),
        ev(34, content=None),
        ev(35, actions=[1]),
        ev(36, actions={"stateDelta": [1]}),
        ev(37, actions={"stateDelta": {"app:x": 1, "user:y": None, "temp:z": "t", "k": {}}}),
        ev(38, actions={"transferToAgent": 5}),
        ev(39, actions={"escalate": "yes"}),
        ev(40, actions={"escalate": True, "transferToAgent": "b", "skipSummarization": True}),
        ev(
            41,
            actions={
                "compaction": {"startTimestamp": 1750000000000, "endTimestamp": 1750000001000}
            },
        ),
        ev(42, actions={"compaction": {"startTimestamp": "x"}}),
        ev(43, actions={"rewindBeforeInvocationId": "e-1"}),
        ev(44, actions={"endOfAgent": True}, content=_DROP),
        ev(45, actions={"endInvocation": True, "agentState": {"a": 1}}, content=_DROP),
        ev(46, errorCode="MAX_TOKENS", content=_DROP),
        ev(47, longRunningToolIds="adk-1"),
        ev(48, longRunningToolIds=[1, 2]),
        ev(49, longRunningToolIds=["adk-z", "adk-x"], content={"parts": [{"functionCall": call}]}),
        ev(50, usageMetadata={"promptTokenCount": "5"}),
        ev(51, usageMetadata={"promptTokenCount": True}),
        ev(52, usageMetadata={"promptTokenCount": -1}),
        ev(53, usageMetadata={"promptTokenCount": 1.5}),
        ev(54, usageMetadata={"promptTokenCount": 2.0, "thoughtsTokenCount": 3}),
        ev(55, usageMetadata={"totalTokenCount": 2**31}),
        ev(56, usageMetadata="lots"),
        ev(57, usageMetadata={"prompt_token_count": 4, "candidates_token_count": 1}),
        ev(58, appName="", userId=_DROP, sessionId=_DROP),
        ev(59, branch="root.a", turnComplete=True, interrupted=False, errorMessage='é " \\ \n'),
        ev(60, id="ev-1"),  # a repeated event id: the later copy is rejected
        ev(61, id="ev-\u00e9-\U0001f600"),
        ev(62, author="a\\u0062"),
    ]
    for i, event in enumerate(variants):
        out.append(json.dumps(_base(100 + i)).encode())
        out.append(json.dumps(event, ensure_ascii=i % 2 == 0).encode())
    good = json.dumps(_base(300))
    out += [
        b"",
        b"   ",
        b"\r",
        json.dumps(_base(301)).encode() + b"\r",
        b"null",
        b"null",
        b"null",
        b"[1, 2]",
        b'"text"',
        b"5",
        b"{bad json",
        good.replace('"amount": ', '"amount": NaN, "x": ').encode(),
        json.dumps(ev(302, content={"parts": [{"functionCall": {**call, "args": {"n": 1}}}]}))
        .replace('"n": 1', '"n": Infinity')
        .encode(),
        good.encode() + b" " + good.encode(),
        good.encode() + b",",
        json.dumps(_base(303)).replace('"id": "ev-303"', '"id": "ev-303", "id": "ev-dup"').encode(),
        json.dumps(_base(304))
        .replace('"stateDelta": {}', '"stateDelta": {"a": 1, "a": 2}')
        .encode(),
        json.dumps(_base(305)).replace('"author": ', '"author": "first", "author": ').encode(),
        json.dumps(_base(306)).replace('"role": "user"', '"role": "user", "parts": 5').encode(),
        json.dumps(ev(307, content={"parts": [{"functionCall": call}]}))
        .replace('"name": "send_invoice"', '"name": "a", "name": "b"')
        .encode(),
        json.dumps(_base(308)).replace('"id"', '"\\u0069d"', 1).encode(),
        json.dumps(ev(309, errorMessage="\ud83d\ude00")).encode(),
        json.dumps(ev(310, errorMessage="x")).replace('"x"', '"\\ud800"').encode(),
        json.dumps(ev(311, errorMessage="x")).replace('"x"', '"\\udc00 lone"').encode(),
        b'{"id": "deep", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        json.dumps(ev(312, errorMessage="x")).encode().replace(b'"x"', b'"\xff\xfe"'),
        json.dumps(ev(313, errorMessage="x")).encode().replace(b'"x"', b'"a\x00b"'),
        b"   " + json.dumps(_base(314)).encode(),
        json.dumps(ev(315, errorMessage="y" * 50_000)).encode(),
        json.dumps(
            ev(316, content={"parts": [{"functionCall": {**call, "args": {"big": 10**30}}}]})
        ).encode(),
    ]
    out += [json.dumps(_base(400 + i)).encode() for i in range(5)]
    out.append(json.dumps(_base(500)).encode()[:-20])  # the last line cut off
    return out


class _Drop:
    pass


_DROP = _Drop()


def write_hostile(path: Path, *, long_line: bool = False) -> None:
    lines = hostile_lines()
    if long_line:  # a 40 MB line: past the kit's 32 MiB limit
        big = json.dumps(_base(999))[:-1].encode() + b', "pad": "' + b"x" * (40 << 20) + b'"}'
        lines.insert(5, big)
    data = b"\n".join(lines[:-1]) + b"\n" + lines[-1]
    path.write_bytes(data)


# -- DuckDB on hostile files, each case in a subprocess (a crash is an answer too) ----------------

HOSTILE_CASES: dict[str, bytes] = {
    "null block": b'{"id": "a"}\n' + b"null\n" * 20_000 + b'{"id": "b"}\n',
    "NaN, Infinity": b'{"id": "a", "x": NaN}\n{"id": "b", "x": -Infinity}\n{"id": "c"}\n',
    "BOM on line 1": b'\xef\xbb\xbf{"id": "a"}\n{"id": "b"}\n',
    "deep nesting": b'{"id": "a", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b'}\n{"id": "b"}\n',
    "two objects, one line": b'{"id": "a"} {"id": "b"}\n{"id": "c"}\n',
    "invalid UTF-8": b'{"id": "a\xff"}\n{"id": "b"}\n',
    "blank lines": b'{"id": "a"}\n\n   \n{"id": "b"}\n',
    "repeated key": b'{"id": "a", "id": "b"}\n',
    "40 MB line": b'{"id": "a", "pad": "' + b"x" * (40 << 20) + b'"}\n{"id": "b"}\n',
    "cut-off last line": b'{"id": "a"}\n{"id": "b", "x": [1, ',
}


def hostile_probe(case: str, tmp: Path) -> dict[str, Any]:
    """What DuckDB's reader and its functions make of one hostile case."""
    import duckdb

    path = tmp / "case.jsonl"
    path.write_bytes(HOSTILE_CASES[case])
    out: dict[str, Any] = {}
    con = duckdb.connect()
    cols = "{'id': 'VARCHAR'}"
    for label, options in (
        ("read_json", ""),
        ("read_json ignore_errors", ", ignore_errors=true"),
    ):
        try:
            rows = con.sql(
                f"SELECT id FROM read_json('{path}', format='newline_delimited', "
                f"columns={cols}, maximum_object_size=104857600{options})"
            ).fetchall()
            out[label] = f"{len(rows)} rows: {[r[0] for r in rows][:4]}"
        except duckdb.Error as err:
            out[label] = "error: " + str(err).splitlines()[0][:90]
    try:
        rows = con.sql(
            f"SELECT line FROM read_csv('{path}', columns={{'line': 'VARCHAR'}}, header=false, "
            "delim='\\x01', quote='', escape='', max_line_size=104857600, "
            "auto_detect=false)"
        ).fetchall()
        data = path.read_bytes()
        total = data.count(b"\n") + (not data.endswith(b"\n"))
        out["read_csv 1 column"] = f"{len(rows)} rows (the file has {total} lines)"
    except duckdb.Error as err:
        out["read_csv 1 column"] = "error: " + str(err).splitlines()[0][:90]
    lines = Lines(path)
    con.register("l", lines.table)
    try:
        rows = con.sql(
            "SELECT pos, json_valid(text) AS ok, CASE WHEN json_valid(text) THEN "
            'from_json(text, \'{"id": "VARCHAR"}\').id END AS id FROM l ORDER BY pos'
        ).fetchall()
        summary = [(int(p) + 1, ok, i) for p, ok, i in rows if not ok or i is None][:3]
        out["lines + json_valid/from_json"] = (
            f"{len(rows)} of {lines.table.num_rows} lines parsed "
            f"({lines.hidden.size} held back by numpy: not UTF-8, too long, cut off, BOM); "
            f"not valid: {summary}"
        )
    except duckdb.Error as err:
        out["lines + json_valid/from_json"] = "error: " + str(err).splitlines()[0][:90]
    return out


def hostile_report() -> None:
    import subprocess
    import tempfile

    for case in HOSTILE_CASES:
        with tempfile.TemporaryDirectory() as tmp:
            run = subprocess.run(
                [sys.executable, __file__, "--probe", case, tmp],
                capture_output=True,
                text=True,
                check=False,
            )
        if run.returncode:
            print(f"{case}: the process died ({run.returncode}): {run.stderr.strip()[-200:]}")
            continue
        found = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{case}:")
        for label, what in found.items():
            print(f"    {label:<32} {what}")


# -- measuring ---------------------------------------------------------------------------------


def _sql_type(shape: Any) -> str:
    """A from_json shape as a DuckDB column type (read_json's ``columns``)."""
    if isinstance(shape, dict):
        return "STRUCT(" + ", ".join(f'"{k}" {_sql_type(v)}' for k, v in shape.items()) + ")"
    if isinstance(shape, list):
        return _sql_type(shape[0]) + "[]"
    return str(shape)


def floor_read(path: Path) -> int:
    """DuckDB's own structured read of the file: read_json with every field the four frames
    read declared with its type, into Arrow (the floor of any DuckDB reader)."""
    import duckdb

    columns = "{" + ", ".join(f"'{k}': '{_sql_type(v)}'" for k, v in EVENT_SHAPE.items()) + "}"
    con = duckdb.connect()
    table = con.sql(
        f"SELECT * FROM read_json('{path}', format='newline_delimited', columns={columns}, "
        "maximum_object_size=104857600)"
    ).to_arrow_table()
    return int(table.num_rows)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


EVENT_CASES = {
    "floor": "DuckDB read_json, declared columns -> Arrow",
    "decode": "read + msgspec decode (bench_events)",
    "fast": "fast path -> the four frames",
    "lenient": "fast path without the shape check",
    "kit": "events.load",
}


def events_case(case: str, path: Path) -> dict[str, Any]:
    """One case of ``--events`` in this process."""
    import msgspec

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    stats: dict[str, Any] = {}
    started = time.perf_counter()
    if case == "floor":
        rows = floor_read(path)
    elif case == "decode":
        gc.disable()
        decoder = msgspec.json.Decoder()
        with path.open("rb") as handle:
            rows = sum(1 for line in handle if decoder.decode(line) is not None)
    elif case in ("fast", "lenient"):
        frames, sink = fast_frames(path, stats=stats, strict=case == "fast")
        rows = len(frames["events"]) + len(sink.rows)
    else:
        loaded = events.load(SourceSpec("events", paths=(path,)), Filters())
        rows = len(loaded.frames["events"]) + len(loaded.rejects)
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "peak_mb": _peak_mb(), "stats": stats}


def measure_events(path: Path, n: int, repeat: int) -> None:
    results = fresh.best_of(
        lambda case: [sys.executable, __file__, "--case", "events", case, str(path)],
        EVENT_CASES,
        repeat,
    )
    floor = results["floor"]["seconds"]
    print(f"{n:,} events ({path.stat().st_size / 1e6:,.0f} MB); best of {repeat} alternated runs,")
    print("each in a fresh process; share = floor time / case time")
    print(f"{'case':<52}{'rows':>10}{'seconds':>9}{'events/s':>11}{'share':>7}{'peak RSS':>11}")
    for case, label in EVENT_CASES.items():
        r = results[case]
        print(
            f"{case + ': ' + label:<52}{r['rows']:>10,}{r['seconds']:>9.2f}"
            f"{n / r['seconds']:>11,.0f}{floor / r['seconds']:>7.2f}{r['peak_mb']:>8,.0f} MB"
        )
    for case in ("fast", "lenient"):
        st = results[case]["stats"]
        print(
            f"{case} (last run): lines {st['lines_s']:.2f} s, DuckDB {st['duckdb_s']:.2f} s, "
            f"Python on plain rows {st['python_s']:.2f} s, oracle {st['odd_s']:.2f} s, "
            f"kit tail {st['tail_s']:.2f} s; odd records {st['odd']:,} of {st['records']:,}, "
            f"shapes {st['shapes']:,}"
        )


def check_equal(path: Path) -> bool:
    """The fast path's frames, rejects and warnings against ``events.load`` of ``path``
    (rejects compared in line order: the kit's order follows its 50k-record chunks)."""
    import pandas as pd

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    stats: dict[str, Any] = {}
    frames, sink = fast_frames(path, stats=stats)
    kit = events.load(SourceSpec("events", paths=(path,)), Filters())
    ok = True
    found = []

    def line_order(frame: pd.DataFrame) -> pd.DataFrame:
        line = frame["location"].str.rsplit(":", n=1).str[1].astype(int)
        return (
            frame.assign(_line=line)
            .sort_values(["_line", "reason"], kind="stable")
            .drop(columns="_line")
            .reset_index(drop=True)
        )

    pairs = [(name, frames[name], kit.frames[name]) for name in frames]
    pairs += [("rejects", line_order(sink.frame()), line_order(kit.rejects))]
    pairs += [("warnings", sink.warnings(), kit.warnings)]
    for name, mine, theirs in pairs:
        try:
            pd.testing.assert_frame_equal(mine, theirs)
            found.append(f"{name} {len(mine):,} equal")
        except AssertionError as err:
            ok = False
            found.append(f"{name} DIFFERENT: {str(err)[:300]}")
    print(f"{path.name}: {'; '.join(found)}")
    print(
        f"    odd records {stats['odd']:,} of {stats['records']:,} lines "
        f"({stats['odd'] / max(stats['records'], 1):.1%}), shapes {stats['shapes']:,}"
    )
    return ok


def _events_file(n: int, given: Path | None) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_events

    path = given or Path(f"/tmp/proto_engine_events_{n}.jsonl")
    if not path.exists():
        bench_events.write_file(path, n)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--events", type=int, metavar="N", help="JSON lines: floor, fast, kit")
    mode.add_argument("--check", type=int, metavar="N", help="fast path == events.load")
    mode.add_argument("--hostile", action="store_true", help="DuckDB on hostile lines")
    mode.add_argument("--args-key", type=int, metavar="N", help="args_key: DuckDB vs msgspec")
    mode.add_argument("--ledger", type=int, metavar="N", help="ADBC vs COPY vs ledger.load")
    mode.add_argument("--pg-events", type=int, metavar="N", help="events from PostgreSQL")
    mode.add_argument("--cache", type=int, metavar="N", help="Arrow IPC / Parquet cache")
    mode.add_argument("--case", nargs="+", help=argparse.SUPPRESS)
    mode.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help="the JSON-lines file (written when missing)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(hostile_probe(args.probe[0], Path(args.probe[1]))))
    elif args.case:
        print(json.dumps(run_case(*args.case)))
    elif args.events:
        measure_events(_events_file(args.events, args.file), args.events, args.repeat)
    elif args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            hostile = Path(tmp) / "hostile.jsonl"
            write_hostile(hostile, long_line=True)
            paths = [_events_file(args.check, args.file), hostile]
            ok = all([check_equal(path) for path in paths])
        print("all equal" if ok else "DIFFERENCES FOUND")
    elif args.hostile:
        hostile_report()
    elif args.args_key:
        measure_args_key(args.args_key)
    elif args.ledger:
        measure_ledger(args.ledger, args.repeat)
    elif args.pg_events:
        measure_pg_events(args.pg_events, args.repeat)
    elif args.cache:
        measure_cache(_events_file(args.cache, args.file), args.cache, args.repeat)


def run_case(kind: str, *rest: str) -> dict[str, Any]:
    if kind == "events":
        return events_case(rest[0], Path(rest[1]))
    if kind == "ledger":
        return ledger_case(rest[0], rest[1])
    if kind == "pg-events":
        return pg_events_case(rest[0], rest[1])
    return cache_case(rest[0], Path(rest[1]), Path(rest[2]))


def _args(i: int) -> dict[str, Any]:
    """Tool arguments of the kinds evidence holds: flat, nested, numbers of every form."""
    kinds: list[dict[str, Any]] = [
        {"invoice": f"INV-{i}", "amount": i % 500},
        {"z": 1, "a": {"y": [1, 2, {"b": 1, "a": 2}], "x": None}, "m": True},
        {"price": 19.99, "ratio": 1e16, "tiny": 0.00001, "big": 10**20, "neg": -0.0},
        {"name": 'Zoë \u2028 "q"', "tags": ["b", "a"], "empty": {}},
    ]
    return kinds[i % len(kinds)]


def measure_args_key(n: int) -> None:
    """``args_key`` (msgspec's sorted encoding of the decoded args) against what DuckDB can
    write from the args' JSON text: its own serialisation, and keys sorted by SQL."""
    import duckdb
    import msgspec
    import pyarrow as pa

    from incidentkit.sources.events.adk_parts import args_key

    texts = [json.dumps(_args(i)) for i in range(n)]
    started = time.perf_counter()
    decoded = _decode_all(texts)
    decode_s = time.perf_counter() - started
    started = time.perf_counter()
    keys = [args_key(a) for a in decoded]
    key_s = time.perf_counter() - started
    con = duckdb.connect()
    con.register("t", pa.table({"i": list(range(n)), "args": texts}))
    attempts = {
        "json(args)": "json(args)",
        "top-level keys sorted in SQL": (
            "'{' || array_to_string(list_transform(list_sort(json_keys(args)), lambda k: "
            "to_json(k) || ':' || json_extract(args, '$.\"' || k || '\"')), ',') || '}'"
        ),
    }
    print(f"{n:,} args: msgspec decode {decode_s:.2f} s, args_key (sorted encode) {key_s:.2f} s")
    for label, expr in attempts.items():
        started = time.perf_counter()
        got = con.sql(f"SELECT {expr} AS k FROM t ORDER BY i").to_arrow_table()["k"].to_pylist()
        seconds = time.perf_counter() - started
        same = sum(a == b for a, b in zip(got, keys, strict=True))
        print(f"    DuckDB {label}: {seconds:.2f} s, identical text for {same:,} of {n:,}")
    for i in range(4):
        encoded = msgspec.json.encode(decoded[i], order="sorted").decode()
        print(f"    e.g. kit {encoded}")


LEDGER_CASES = {
    "copy": "psycopg COPY TO STDOUT (baseline)",
    "adbc": "ADBC -> Arrow, read-only, no parameters",
    "adbc-bound": "ADBC -> Arrow, read-only, bound window",
    "proto": "ADBC + the runs frame (request decoded)",
    "proto-lazy": "ADBC + the runs frame (request as text)",
    "duckdb-check": "ADBC + DuckDB checks request is an object",
    "kit": "ledger.load",
}
LEDGER_SQL = (
    "SELECT run_id::text, app_name, user_id, session_id, invocation_id, request::text AS "
    "request, status, owner, lease_until, attempts, started_at, updated_at FROM agent_run"
)


def adbc_read(url: str, query: str, params: tuple[Any, ...] | None = None) -> Any:
    """``query`` through ADBC's PostgreSQL driver into one Arrow table, in a transaction that
    is read-only by its own first statement (the session default says so too)."""
    import adbc_driver_postgresql.dbapi as pg
    from sqlalchemy.engine import make_url

    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    options = "options=-c%20default_transaction_read_only%3Don%20-c%20TimeZone%3DUTC"
    uri = plain + ("&" if "?" in plain else "?") + options
    with pg.connect(uri) as conn, conn.cursor() as cursor:  # autocommit off: a transaction
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute(query, parameters=params)
        table = cursor.fetch_arrow_table()
        conn.rollback()
    return table


def proto_runs(table: Any, *, decode: bool = True) -> Any:
    """The runs frame from ADBC's Arrow table: times and text as Arrow hands them over,
    ``request`` decoded by msgspec (or kept as text), ids checked for repeats by sorting."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from incidentkit.frames import conform
    from incidentkit.sources.loaded import all_distinct

    columns: dict[str, Any] = {}
    for name in table.column_names:
        column = table[name]
        if pa.types.is_timestamp(column.type):
            columns[name] = pd.Series(column.cast(pa.timestamp("ns", tz="UTC")).to_pandas())
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            columns[name] = pd.Series(pd.array(column.cast(pa.large_string()), dtype="str"))
        else:
            columns[name] = column.to_pandas()
    if decode:
        texts = table["request"].to_pylist()
        out = np.empty(len(texts), dtype=object)
        out[:] = _decode_all(texts)
        columns["request"] = pd.Series(out, dtype=object)
    else:
        columns["request"] = columns["request"].astype(object)
    frame = pd.DataFrame(columns)
    assert all_distinct(frame["run_id"])
    return conform("runs", frame)


def ledger_case(case: str, url: str) -> dict[str, Any]:
    """One case of ``--ledger`` in this process."""
    from datetime import UTC, datetime

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources.sql import ledger

    started = time.perf_counter()
    window = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
    bound = LEDGER_SQL + " WHERE started_at >= $1 AND started_at < $2"
    if case == "copy":
        rows = fresh.copy_out(url, LEDGER_SQL).count(b"\n") - 1
    elif case == "adbc":
        rows = adbc_read(url, LEDGER_SQL).num_rows
    elif case == "adbc-bound":
        rows = adbc_read(url, bound, window).num_rows
    elif case in ("proto", "proto-lazy"):
        rows = len(proto_runs(adbc_read(url, bound, window), decode=case == "proto"))
    elif case == "duckdb-check":
        import duckdb

        table = adbc_read(url, bound, window)
        con = duckdb.connect()
        con.register("t", table)
        bad = con.sql(
            "SELECT count(*) FROM t WHERE request IS NOT NULL AND json_type(request) <> 'OBJECT'"
        ).fetchall()[0][0]
        rows = len(proto_runs(table, decode=False)) + bad
    else:
        loaded = ledger.load(SourceSpec("ledger", url_ref=url), Filters())
        rows = len(loaded.frames["runs"]) + len(loaded.rejects)
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "peak_mb": _peak_mb()}


def measure_ledger(n: int, repeat: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_sql_read

    with fresh.scratch_database() as url:
        bench_sql_read.populate(url, n)
        import pandas as pd

        from incidentkit.manifest import Filters, SourceSpec
        from incidentkit.sources.sql import ledger

        kit = ledger.load(SourceSpec("ledger", url_ref=url), Filters()).frames["runs"]
        from datetime import UTC, datetime

        window = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
        bound = LEDGER_SQL + " WHERE started_at >= $1 AND started_at < $2"
        mine = proto_runs(adbc_read(url, bound, window))
        order = ["started_at", "run_id"]
        mine = mine.sort_values(order, kind="stable").reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(mine, kit)
            same = "equal to ledger.load's"
        except AssertionError as err:
            same = f"DIFFERENT from ledger.load's: {str(err)[:200]}"
        print(f"{n:,} ledger rows; the prototype's runs frame is {same}")
        results = fresh.best_of(
            lambda case: [sys.executable, __file__, "--case", "ledger", case, url],
            LEDGER_CASES,
            repeat,
        )
    base = results["copy"]["seconds"]
    print(f"best of {repeat} alternated runs, each in a fresh process; share = COPY / case")
    print(f"{'case':<52}{'rows':>10}{'seconds':>9}{'share':>7}{'peak RSS':>11}")
    for case, label in LEDGER_CASES.items():
        r = results[case]
        print(
            f"{case + ': ' + label:<52}{r['rows']:>10,}{r['seconds']:>9.2f}"
            f"{base / r['seconds']:>7.2f}{r['peak_mb']:>8,.0f} MB"
        )


PG_EVENT_CASES = {
    "copy": "psycopg COPY TO STDOUT (baseline)",
    "adbc": "ADBC -> Arrow (ordered as the kit reads)",
    "fast": "ADBC + DuckDB fast path -> the four frames",
    "kit": "events.load",
}
PG_EVENTS_SQL = (
    "SELECT event_id, app_name, user_id, session_id, event::text AS event FROM adk_event "
    "ORDER BY app_name, user_id, session_id, ts, event_id"
)


def table_frames(
    table: Any, name: str, *, sink: Any = None, stats: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Any]:
    """The four event frames of an Arrow table of an ADK Java events table (event_id, the
    session keys, event JSON text), by the same DuckDB query as a file's lines: the table's
    session keys win over the event's, locations are ``table:event_id``."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from incidentkit.manifest import Filters
    from incidentkit.sources.events import adk_events as ae
    from incidentkit.sources.loaded import RejectSink

    sink = sink if sink is not None else RejectSink("events")
    stats = stats if stats is not None else {}
    started = time.perf_counter()
    n = table.num_rows
    lines = pa.table({"pos": pa.array(np.arange(n, dtype=np.int64)), "text": table["event"]})
    con = connect()
    parsed = parse(con, lines)
    stats["duckdb_s"] = time.perf_counter() - started
    texts = table["event"]

    class _Rows:  # what plain_rows asks of a block of lines
        @staticmethod
        def text(i: int) -> str:
            return str(texts[i].as_py())

    plain_mask = plain_rows(_Rows(), parsed, strict=True)  # type: ignore[arg-type]
    seen = np.zeros(n, dtype=bool)
    seen[parsed["pos"].to_numpy()] = True
    odd_rows = np.union1d(parsed["pos"].to_numpy()[~plain_mask], np.flatnonzero(~seen))
    plain = parsed.filter(pa.array(plain_mask))
    keys = ("app_name", "user_id", "session_id")
    rows = plain["pos"]
    for col in keys:  # the table's columns name the session
        plain = plain.set_column(plain.schema.get_field_index(col), col, table[col].take(rows))
    parts = []
    if plain.num_rows:
        chunk = plain_chunk(plain, f"{name}:")
        ids = table["event_id"].take(rows).to_pylist()
        chunk.events["location"] = pd.array([f"{name}:{i}" for i in ids], dtype="str")
        parts.append(chunk)
    stats["odd"], stats["records"] = len(odd_rows), n
    if len(odd_rows):
        odd = table.take(pa.array(odd_rows))
        meta = odd.select(["event_id", *keys]).to_pandas()
        meta["location"] = name + ":" + meta["event_id"].astype(str)
        parts.append(oracle_chunk(odd["event"].to_pylist(), meta, odd_rows.tolist(), sink))
    if len(parts) > 1:
        events = pd.concat([part.events for part in parts], ignore_index=True)
        order = np.argsort(events["pos"].to_numpy(), kind="stable")
        parts = [
            ae._Chunk(
                events=events.take(order).reset_index(drop=True),
                **{
                    col: pd.concat([getattr(p, col) for p in parts], ignore_index=True)
                    for col in ("calls", "responses", "state_writes")
                },
            )
        ]
    return kit_tail(parts, Filters(), sink), sink


def pg_events_case(case: str, url: str) -> dict[str, Any]:
    """One case of ``--pg-events`` in this process."""
    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    stats: dict[str, Any] = {}
    started = time.perf_counter()
    if case == "copy":
        query = "SELECT event_id, app_name, user_id, session_id, invocation_id, ts, event"
        rows = fresh.copy_out(url, f"{query} FROM adk_event").count(b"\n") - 1
    elif case == "adbc":
        rows = adbc_read(url, PG_EVENTS_SQL).num_rows
    elif case == "fast":
        frames, sink = table_frames(adbc_read(url, PG_EVENTS_SQL), "adk_event", stats=stats)
        rows = len(frames["events"]) + len(sink.rows)
    else:
        loaded = events.load(SourceSpec("events", url_ref=url), Filters())
        rows = len(loaded.frames["events"]) + len(loaded.rejects)
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "peak_mb": _peak_mb(), "stats": stats}


def measure_pg_events(n: int, repeat: int) -> None:
    import pandas as pd

    from incidentkit.manifest import Filters, SourceSpec
    from incidentkit.sources import events

    sys.path.insert(0, str(Path(__file__).parent))
    import bench_events

    with fresh.scratch_database() as url:
        bench_events.populate(url, n)
        probe = min(n, 50_000)  # equality on a first slice (the whole table below is timed)
        kit = events.load(SourceSpec("events", url_ref=url), Filters())
        mine, _sink = table_frames(adbc_read(url, PG_EVENTS_SQL), "adk_event")
        found = []
        for name in mine:
            try:
                pd.testing.assert_frame_equal(mine[name], kit.frames[name])
                found.append(f"{name} equal")
            except AssertionError as err:
                found.append(f"{name} DIFFERENT {str(err)[:200]}")
        del kit, mine, probe
        print(f"{n:,} events in adk_event: {'; '.join(found)}")
        results = fresh.best_of(
            lambda case: [sys.executable, __file__, "--case", "pg-events", case, url],
            PG_EVENT_CASES,
            repeat,
        )
    base = results["copy"]["seconds"]
    print(f"best of {repeat} alternated runs, each in a fresh process; share = COPY / case")
    print(f"{'case':<52}{'rows':>10}{'seconds':>9}{'events/s':>11}{'share':>7}{'peak RSS':>11}")
    for case, label in PG_EVENT_CASES.items():
        r = results[case]
        print(
            f"{case + ': ' + label:<52}{r['rows']:>10,}{r['seconds']:>9.2f}"
            f"{n / r['seconds']:>11,.0f}{base / r['seconds']:>7.2f}{r['peak_mb']:>8,.0f} MB"
        )
    st = results["fast"]["stats"]
    print(f"fast (last run): DuckDB {st['duckdb_s']:.2f} s; odd {st['odd']:,} of {st['records']:,}")


# -- a per-incident cache of the four frames ---------------------------------------------------

PAYLOADS = {
    ("events", "long_running_tool_ids"),
    ("calls", "args"),
    ("responses", "response"),
    ("state_writes", "value"),
}


def frames_to_arrow(frames: dict[str, Any]) -> dict[str, Any]:
    """Each frame as an Arrow table; payloads (Python objects) as msgspec's JSON text."""
    import msgspec
    import pyarrow as pa

    encode = msgspec.json.Encoder().encode
    out = {}
    for name, frame in frames.items():
        columns = {}
        for col in frame.columns:
            if (name, col) in PAYLOADS:
                columns[col] = pa.array([encode(v).decode() for v in frame[col]], pa.large_string())
            else:
                columns[col] = pa.array(frame[col], from_pandas=True)
        out[name] = pa.table(columns)
    return out


def arrow_to_frames(tables: dict[str, Any]) -> dict[str, Any]:
    """:func:`frames_to_arrow` undone: the frames as the loader gave them."""
    import numpy as np
    import pandas as pd

    from incidentkit.frames import conform

    frames = {}
    for name, table in tables.items():
        frame = table.to_pandas()
        for col in frame.columns:
            if (name, col) in PAYLOADS:
                values = _decode_all(table[col].to_pylist())
                if col == "long_running_tool_ids":
                    values = [tuple(v) for v in values]
                out = np.empty(len(values), dtype=object)
                out[:] = values
                frame[col] = pd.Series(out, dtype=object)
        frames[name] = conform(name, frame)
    return frames


CACHE_CASES = {
    "source": "fast path from the JSON-lines file",
    "ipc": "Arrow IPC, memory-mapped, payloads decoded",
    "ipc-lazy": "Arrow IPC, memory-mapped, payloads as text",
    "parquet": "Parquet (zstd), payloads decoded",
}


def cache_case(case: str, path: Path, folder: Path) -> dict[str, Any]:
    """One case of ``--cache`` in this process: load the frames from the source or a cache."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    started = time.perf_counter()
    if case == "source":
        frames, _ = fast_frames(path)
        rows = sum(len(f) for f in frames.values())
    elif case in ("ipc", "ipc-lazy"):
        tables = {}
        for name in ("events", "calls", "responses", "state_writes"):
            with pa.memory_map(str(folder / f"{name}.arrow")) as source:
                tables[name] = ipc.open_file(source).read_all()
        if case == "ipc":
            rows = sum(len(f) for f in arrow_to_frames(tables).values())
        else:
            rows = sum(len(t.to_pandas()) for t in tables.values())
    else:
        tables = {
            name: pq.ParquetFile(folder / f"{name}.parquet").read()
            for name in ("events", "calls", "responses", "state_writes")
        }
        rows = sum(len(f) for f in arrow_to_frames(tables).values())
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "peak_mb": _peak_mb()}


def measure_cache(path: Path, n: int, repeat: int) -> None:
    import tempfile

    import pandas as pd
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    frames, _ = fast_frames(path)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        tables = frames_to_arrow(frames)
        to_arrow = time.perf_counter() - started
        started = time.perf_counter()
        for name, table in tables.items():
            with ipc.new_file(str(folder / f"{name}.arrow"), table.schema) as out:
                out.write_table(table)
        ipc_s = time.perf_counter() - started
        started = time.perf_counter()
        for name, table in tables.items():
            pq.write_table(table, folder / f"{name}.parquet", compression="zstd")
        parquet_s = time.perf_counter() - started
        back = arrow_to_frames(tables)
        for name in frames:
            pd.testing.assert_frame_equal(back[name], frames[name])
        sizes = {
            ext: sum(f.stat().st_size for f in folder.glob(f"*.{ext}")) / 1e6
            for ext in ("arrow", "parquet")
        }
        print(
            f"{n:,} events: frames -> Arrow (payloads as JSON text) {to_arrow:.2f} s; "
            f"write IPC {ipc_s:.2f} s ({sizes['arrow']:,.0f} MB), Parquet zstd {parquet_s:.2f} s "
            f"({sizes['parquet']:,.0f} MB); read back equal to the frames"
        )
        del frames, tables, back
        results = fresh.best_of(
            lambda case: [sys.executable, __file__, "--case", "cache", case, str(path), tmp],
            CACHE_CASES,
            repeat,
        )
    base = results["source"]["seconds"]
    print(f"best of {repeat} alternated runs, each in a fresh process; speed-up = source / case")
    print(f"{'case':<52}{'rows':>10}{'seconds':>9}{'speed-up':>9}{'peak RSS':>11}")
    for case, label in CACHE_CASES.items():
        r = results[case]
        print(
            f"{case + ': ' + label:<52}{r['rows']:>10,}{r['seconds']:>9.2f}"
            f"{base / r['seconds']:>9.1f}{r['peak_mb']:>8,.0f} MB"
        )


if __name__ == "__main__":
    main()
