"""Canonical frames: the contract between loaders and triage.

Every loader returns frames with exactly these columns, in this order and with these dtypes,
whatever the source format. Timestamps are ``datetime64[ns, UTC]``; text is pandas' ``str``
dtype (missing = NaN); flags are plain ``bool`` (absent = False); counts a source may lack
are nullable ``Int64`` (missing = NA); structured payloads (JSON objects, lists) are Python
objects in ``object`` columns. Every column is present even when a
frame is empty. ``docs/frames.md`` describes each column for users.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from incidentkit.errors import ParameterError, SchemaError

TS: Final = "datetime64[ns, UTC]"
STR: Final = "str"
OBJ: Final = "object"
BOOL: Final = "bool"
INT: Final = "int64"
NINT: Final = "Int64"  # nullable integer
FLOAT: Final = "float64"


class RunStatus(enum.StrEnum):
    """Status of a ledger row (``agent_run.status``)."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    DONE = "DONE"
    FAILED = "FAILED"
    PARKED = "PARKED"
    UNKNOWN = "UNKNOWN"


class SpanKind(enum.StrEnum):
    """What an ADK span measures, whatever the ADK version called it."""

    INVOCATION = "invocation"
    INVOKE_AGENT = "invoke_agent"
    CALL_LLM = "call_llm"
    EXECUTE_TOOL = "execute_tool"
    OTHER = "other"


class EventKind(enum.StrEnum):
    """What a stored event is (``events.kind``): a turn of the conversation, or one of the
    markers ADK 2.x appends to the same log (``docs/frames.md``)."""

    TURN = "turn"
    """A user message, a model's text, calls or answer, a tool's response."""
    COMPACTION = "compaction"
    """A summary of earlier events (``actions.compaction``); the events stay stored."""
    REWIND = "rewind"
    """``Runner.rewind_async``: restores the state before an invocation."""
    CHECKPOINT = "checkpoint"
    """A content-less ``end_of_agent`` / ``agent_state`` event of a resumable app."""
    ERROR = "error"
    """An error event with no content (a tool or model raised, a timeout, a limit)."""


class StateScope(enum.StrEnum):
    """Scope of a state key, from its prefix (``app:``, ``user:``, ``temp:``, none)."""

    APP = "app"
    USER = "user"
    TEMP = "temp"
    SESSION = "session"


class JournalStatus(enum.StrEnum):
    """Status of a side-effect journal entry."""

    INTENT = "INTENT"
    DONE = "DONE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class FrameSpec:
    """The contract of one canonical frame: ordered column names and dtypes."""

    name: str
    columns: tuple[tuple[str, str], ...]
    doc: str

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    @property
    def dtypes(self) -> dict[str, str]:
        return dict(self.columns)


def _spec(frame: str, doc: str, /, **columns: str) -> FrameSpec:
    return FrameSpec(frame, tuple(columns.items()), doc)


RUNS = _spec(
    "runs",
    "One row per ledger run (agent_run).",
    run_id=STR,
    app_name=STR,
    user_id=STR,
    session_id=STR,
    invocation_id=STR,
    request=OBJ,
    status=STR,
    owner=STR,
    lease_until=TS,
    attempts=INT,
    started_at=TS,
    updated_at=TS,
)
EVENTS = _spec(
    "events",
    "One row per stored ADK event; seq is the event's order within its session (0-based).",
    event_id=STR,
    app_name=STR,
    user_id=STR,
    session_id=STR,
    invocation_id=STR,
    seq=INT,
    ts=TS,
    author=STR,
    branch=STR,
    partial=BOOL,
    turn_complete=BOOL,
    interrupted=BOOL,
    error_code=STR,
    error_message=STR,
    transfer_to_agent=STR,
    escalate=BOOL,
    long_running_tool_ids=OBJ,
    final_response=BOOL,
    prompt_tokens=NINT,
    output_tokens=NINT,
    total_tokens=NINT,
    text=STR,
    source_format=STR,
    kind=STR,
    compaction_start=TS,
    compaction_end=TS,
    compacted_by=STR,
    rewind_before=STR,
    rewound_by=STR,
)
_OF_EVENT = {
    "event_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "seq": INT,
    "ts": TS,
    "author": STR,
}
"""The leading columns of a frame of event parts: the event each row comes from."""
CALLS = _spec(
    "calls",
    "One row per functionCall part; args_key is canonical JSON of args.",
    **_OF_EVENT,
    call_id=STR,
    name=STR,
    args=OBJ,
    args_key=STR,
    long_running=BOOL,
)
RESPONSES = _spec(
    "responses",
    "One row per functionResponse part.",
    **_OF_EVENT,
    call_id=STR,
    name=STR,
    response=OBJ,
)
STATE_WRITES = _spec(
    "state_writes",
    "One row per key of an event's stateDelta; removed marks a deletion.",
    **_OF_EVENT,
    key=STR,
    scope=STR,
    value=OBJ,
    removed=BOOL,
    partial=BOOL,
)
SESSION_STATE = _spec(
    "session_state",
    "One row per key of the state a session store keeps (not replayed from deltas); keys "
    "carry their app:/user: prefix as the session sees them.",
    app_name=STR,
    user_id=STR,
    session_id=STR,
    scope=STR,
    key=STR,
    value=OBJ,
    source=STR,
    updated_at=TS,
)
JOURNAL = _spec(
    "journal",
    "One row per side-effect journal entry, keyed by business identity.",
    key=STR,
    invocation_id=STR,
    function_call_id=STR,
    status=STR,
    result=OBJ,
    created_at=TS,
    updated_at=TS,
)
SPANS = _spec(
    "spans",
    "One row per exported span; ids are lowercase hex (trace 32 wide, span 16 wide).",
    trace_id=STR,
    span_id=STR,
    parent_span_id=STR,
    name=STR,
    kind=STR,
    start=TS,
    end=TS,
    duration_ms=FLOAT,
    status=STR,
    status_message=STR,
    invocation_id=STR,
    session_id=STR,
    agent_name=STR,
    tool_name=STR,
    tool_call_id=STR,
    input_tokens=NINT,
    output_tokens=NINT,
    attributes=OBJ,
)
DIAGNOSTICS = _spec(
    "diagnostics",
    "One row per diagnostics-plugin log line.",
    ts=TS,
    level=STR,
    kind=STR,
    invocation_id=STR,
    app_name=STR,
    user_id=STR,
    session_id=STR,
    agent=STR,
    tool=STR,
    call_id=STR,
    outcome=STR,
    ms=NINT,
    llm_calls=NINT,
    message=STR,
    line=STR,
    location=STR,
)
THREADS = _spec(
    "threads",
    "One row per thread of a JVM thread dump; frames lists the stack, top first. cpu_ms and "
    "elapsed_ms are the header's cpu= and elapsed= (missing when it has none); locks_held the "
    "monitors and ownable synchronizers (Thread.print -l only) the thread holds; lock_awaited "
    "the lock it waits to enter (lock_wait monitor) or is parked on (park), of lock_class.",
    dump=STR,
    taken_at=TS,
    thread=STR,
    nid=STR,
    state=STR,
    top_frame=STR,
    frames=OBJ,
    cpu_ms=FLOAT,
    elapsed_ms=FLOAT,
    locks_held=OBJ,
    lock_awaited=STR,
    lock_class=STR,
    lock_wait=STR,
    synchronizers_listed=BOOL,
)
CLASS_HISTOGRAMS = _spec(
    "class_histograms",
    "One row per class line of a JVM class histogram (jcmd GC.class_histogram); class without "
    "its module suffix, bytes the shallow size of its instances.",
    **{  # "class" is a Python keyword: the columns go in as a mapping
        "histogram": STR,
        "taken_at": TS,
        "rank": INT,
        "class": STR,
        "module": STR,
        "instances": INT,
        "bytes": INT,
    },
)
JFR_SAMPLES = _spec(
    "jfr_samples",
    "One row per execution or native-method sample of a JFR recording; frames lists the "
    "sampled stack, top first, as in the threads frame.",
    recording=STR,
    ts=TS,
    event_type=STR,
    thread=STR,
    state=STR,
    top_frame=STR,
    frames=OBJ,
)
JFR_ALLOCATIONS = _spec(
    "jfr_allocations",
    "One row per allocation sample (jdk.ObjectAllocationSample); weight is the bytes the "
    "sample stands for.",
    **{
        "recording": STR,
        "ts": TS,
        "thread": STR,
        "class": STR,
        "weight": INT,
        "top_frame": STR,
        "frames": OBJ,
    },
)
JFR_OLD_OBJECTS = _spec(
    "jfr_old_objects",
    "One row per old-object sample (jdk.OldObjectSample): an object still alive when the "
    "recording ended, a leak candidate; frames is where it was allocated.",
    **{
        "recording": STR,
        "ts": TS,
        "thread": STR,
        "class": STR,
        "allocated_at": TS,
        "heap_used": NINT,
        "array_elements": NINT,
        "top_frame": STR,
        "frames": OBJ,
    },
)
JFR_HEAP = _spec(
    "jfr_heap",
    "One row per heap summary of a JFR recording (jdk.GCHeapSummary): heap used before and "
    "after each GC.",
    recording=STR,
    ts=TS,
    gc_id=INT,
    when=STR,
    heap_used=INT,
    heap_committed=NINT,
)
JFR_LOCKS = _spec(
    "jfr_locks",
    "One row per monitor enter, monitor wait or thread park a JFR recording holds (each "
    "longer than the recording's threshold, 20 ms by default).",
    **{
        "recording": STR,
        "ts": TS,
        "event_type": STR,
        "thread": STR,
        "duration_ms": FLOAT,
        "class": STR,
        "previous_owner": STR,
        "top_frame": STR,
        "frames": OBJ,
    },
)
REJECTS = _spec(
    "rejects",
    "One row per input row the kit could not read, with where it was and why.",
    source=STR,
    location=STR,
    reason=STR,
    raw=STR,
)
WARNINGS = _spec(
    "warnings",
    "Evidence that was read but is odd or incomplete (events that name no session, ...).",
    **REJECTS.dtypes,
)

FRAMES: Mapping[str, FrameSpec] = {
    spec.name: spec
    for spec in (
        RUNS,
        EVENTS,
        CALLS,
        RESPONSES,
        STATE_WRITES,
        SESSION_STATE,
        JOURNAL,
        SPANS,
        DIAGNOSTICS,
        THREADS,
        CLASS_HISTOGRAMS,
        JFR_SAMPLES,
        JFR_ALLOCATIONS,
        JFR_OLD_OBJECTS,
        JFR_HEAP,
        JFR_LOCKS,
        REJECTS,
        WARNINGS,
    )
}

RAW_LIMIT = 500
"""How many characters of a rejected row are kept in ``rejects.raw``."""


def spec_of(name: str) -> FrameSpec:
    """The contract of the frame called ``name``."""
    try:
        return FRAMES[name]
    except KeyError:
        raise ParameterError(
            "unknown frame", value=name, fix=f"use one of {', '.join(FRAMES)}"
        ) from None


def empty(name: str) -> pd.DataFrame:
    """An empty frame with every column of ``name`` and its dtype."""
    spec = spec_of(name)
    return pd.DataFrame({col: pd.Series([], dtype=dtype) for col, dtype in spec.columns})


TUPLE_COLUMNS = frozenset(
    {
        ("events", "long_running_tool_ids"),
        ("threads", "frames"),
        ("threads", "locks_held"),
        *((name, "frames") for name in ("jfr_samples", "jfr_allocations", "jfr_old_objects")),
        ("jfr_locks", "frames"),
    }
)
"""Object columns whose values are tuples by contract (empty tuple when there are none)."""

LATER_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "events": (
        "kind",
        "compaction_start",
        "compaction_end",
        "compacted_by",
        "rewind_before",
        "rewound_by",
    ),
    "threads": (
        "cpu_ms",
        "elapsed_ms",
        "locks_held",
        "lock_awaited",
        "lock_class",
        "lock_wait",
        "synchronizers_listed",
    ),
}
"""Columns a frame gained after snapshots were first taken: a snapshot taken before lacks them
and reads each as its neutral value (:func:`neutral`), with a warning."""


def build(
    name: str, data: pd.DataFrame | Mapping[str, Any] | Iterable[Mapping[str, Any]]
) -> pd.DataFrame:
    """A conformed ``name`` frame from partial data: a frame, records, or a column mapping.

    Columns not given take their neutral value: missing text, ``False``, ``0``, ``NaT``, an
    empty tuple for tuple columns, ``None`` for other payloads. For frames built by hand (tests,
    benchmarks, evidence from a source the kit does not read).
    """
    if isinstance(data, pd.DataFrame):
        given = data.copy()
    elif isinstance(data, Mapping):
        given = pd.DataFrame(data)
    else:
        given = pd.DataFrame(list(data))
    if given.empty and not len(given.columns):
        return empty(name)
    spec = spec_of(name)
    unknown = sorted(set(map(str, given.columns)) - set(spec.names))
    if unknown:
        raise ParameterError(
            f"columns not in the {name} frame", value=unknown, fix=f"use {spec.names}"
        )
    n = len(given)
    for col in spec.names:
        if col not in given.columns:
            given[col] = neutral(name, col, n)
        elif (name, col) in TUPLE_COLUMNS:  # a record that left it out means "none"
            given[col] = [() if _missing(v) else v for v in given[col].astype(object)]
    return conform(name, given)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def neutral(frame: str, column: str, n: int) -> pd.Series | bool | int | None:
    """``n`` rows of the neutral value of ``column``: missing text, ``False``, ``0``, ``NaT``,
    an empty tuple for tuple columns, ``None`` for other payloads."""
    dtype = dict(spec_of(frame).columns)[column]
    if (frame, column) == ("events", "kind"):  # an event read before kinds were: a turn
        return pd.Series([EventKind.TURN.value] * n, dtype=STR)
    if (frame, column) in TUPLE_COLUMNS:
        return pd.Series([()] * n, dtype=object)
    if dtype == TS:
        return pd.Series(pd.NaT, index=range(n), dtype=TS)
    return {BOOL: False, INT: 0}.get(dtype)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], *, what: str) -> None:
    """Raise SchemaError naming every column of ``columns`` that ``frame`` lacks."""
    missing = [col for col in columns if col not in frame.columns]
    if missing:
        raise SchemaError(
            f"{what} lacks required columns",
            value=missing,
            fix=f"it has {sorted(map(str, frame.columns))}; map the names in the manifest's "
            "`columns` table or fix the loader",
        )


def conform(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Return ``frame`` with exactly the columns of ``name``, in order, cast to their dtypes.

    A missing column is a loader bug and raises SchemaError; timestamp columns must already be
    timezone-aware (use :func:`incidentkit.times.to_utc` on the way in).
    """
    spec = spec_of(name)
    require_columns(frame, spec.names, what=f"the {name} frame")
    return cast_columns(frame, spec.dtypes, what=f"the {name} frame")


def cast_columns(frame: pd.DataFrame, columns: Mapping[str, str], *, what: str) -> pd.DataFrame:
    """Exactly ``columns`` (name → dtype) of ``frame``, in order, with a fresh RangeIndex.

    Times become UTC nanoseconds (naive datetime64 columns are refused; object columns of
    aware timestamps are converted), missing text NaN, missing flags False. A value the
    column's type cannot hold (a missing count, text in a number column) is a SchemaError
    naming the column and the row.
    """
    frame = frame.reset_index(drop=True)
    out = {}
    for col, dtype in columns.items():
        series = frame[col]
        if series.dtype == dtype and dtype in (STR, BOOL, OBJ):
            out[col] = series  # already the contract's type: nothing to convert
        elif dtype == TS:
            out[col] = _utc_column(series, what=f"{what}: column {col}")
        elif dtype == BOOL:
            out[col] = series.astype(object).where(series.notna(), False).astype(bool)
        elif dtype == STR:
            out[col] = _as_text(series)
        else:
            out[col] = _cast(series, dtype, what=f"{what}: column {col}")
    return pd.DataFrame(out, index=pd.RangeIndex(len(frame)))


def _cast(series: pd.Series, dtype: str, *, what: str) -> pd.Series:
    """``series`` as ``dtype`` (a dtype name of the frame contracts), or a SchemaError."""
    try:
        return series.astype(cast(Any, dtype))
    except (ValueError, TypeError, OverflowError) as err:
        missing = series.isna()
        if dtype == INT and missing.any():  # int64 holds no missing value
            value: object = f"row {missing.idxmax()}: missing"
        else:
            value = str(err)[:200]
        raise SchemaError(
            f"{what} cannot be read as {dtype}",
            value=value,
            fix="the loader must give every row a value of that type (a reject otherwise)",
        ) from err


def text_array(values: Sequence[str | None] | pa.Array[Any] | npt.NDArray[np.object_]) -> Any:
    """``values`` (text or None) as a ``str`` column, converted by Arrow in one pass: three
    times faster than pandas' own value-by-value check of a list (50k values: 1.6 ms, 5 ms).
    An Arrow array of text is taken as it is."""
    return pd.array(cast(Any, pa.array(values, type=pa.large_string())), dtype=STR)


def _as_text(series: pd.Series) -> pd.Series:
    return series.astype(object).where(series.notna(), None).astype(STR)


def _utc_column(series: pd.Series, *, what: str) -> pd.Series:
    aware = isinstance(series.dtype, pd.DatetimeTZDtype)
    if not aware and series.isna().all():
        return pd.Series(pd.NaT, index=series.index, dtype=TS)
    if aware or series.dtype == object:
        try:  # times past the nanosecond range (years 1677-2262) are no frame's times
            if aware:
                converted: pd.Series = series.dt.tz_convert("UTC").dt.as_unit("ns")
                return converted
            return pd.to_datetime(series, utc=True).dt.as_unit("ns")
        except (ValueError, TypeError, OverflowError) as err:  # OutOfBoundsDatetime: ValueError
            raise SchemaError(
                f"{what} holds values that are not times in the frames' range",
                value=str(err)[:200],
                fix="convert it with incidentkit.times.to_utc before conforming",
            ) from err
    raise SchemaError(
        f"{what} is not timezone-aware",
        value=str(series.dtype),
        fix="convert it with incidentkit.times.to_utc before conforming",
    )


def rejects_frame(rows: Iterable[Mapping[str, object]], name: str = "rejects") -> pd.DataFrame:
    """Build a conformed rejects (or warnings) frame from dicts with source, location, reason
    and raw."""
    records = [
        {
            "source": row["source"],
            "location": row["location"],
            "reason": row["reason"],
            "raw": None if row.get("raw") is None else str(row["raw"])[:RAW_LIMIT],
        }
        for row in rows
    ]
    if not records:
        return empty(name)
    return conform(name, pd.DataFrame.from_records(records))


def to_numbers(values: pd.Series) -> pd.Series:
    """``values`` as float64, NaN where a value is no number.

    Unlike ``pd.to_numeric`` on its own this never raises: text is parsed, an integer too large
    for a float becomes ±inf (so range checks catch it), and booleans, lists, objects and
    other values that are no number become NaN (``True`` is not 1 here).
    """
    if values.dtype.kind in "iuf":
        return values.astype("float64")
    if pd.api.types.infer_dtype(values, skipna=True) in _PLAIN_NUMBERS:
        try:  # text and ordinary numbers only: one vectorised pass
            return pd.to_numeric(values, errors="coerce").astype("float64")
        except OverflowError:
            pass  # an integer past float's range: the value-by-value path below
    return pd.to_numeric(values.map(_number_or_text), errors="coerce").astype("float64")


_PLAIN_NUMBERS = frozenset({"string", "integer", "floating", "mixed-integer-float", "empty"})
"""Column kinds (``infer_dtype``) ``to_numeric`` reads right: no booleans, lists or objects."""


def _number_or_text(value: Any) -> Any:
    kind = type(value)
    if kind is int:
        return value if abs(value) < 2**1000 else float("inf") if value > 0 else float("-inf")
    if kind is float or kind is str:
        return value
    return None
