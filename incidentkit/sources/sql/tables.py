"""Table-shaped sources shared by the ledger and the journal: a SQL table, CSV or JSON lines.

A :class:`Layout` describes one canonical frame: which columns a source must have, which hold
timestamps, JSON or integers, the statuses a row may carry, and the span of time a row was
active (``window``). :func:`load_table` reads the rows through the manifest's column mapping,
with the filters in SQL as bound parameters (or applied in pandas for files), rejects rows it
cannot read, and returns the conformed frame in a fixed order.

Time filter: a row is kept when it was active in the window, ``start < window.end`` and
(``end >= window.start`` or its status is still open), so a run that died before the window and
is still RUNNING stays visible. Rows whose times are null or unreadable pass the filter and are
rejected with a reason. Empty text counts as missing, as CSV cannot tell the two apart.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.frames import conform, spec_of, to_numbers
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import sql
from incidentkit.sources.evidence_files import MAX_LINE_BYTES, open_text, require_content
from incidentkit.sources.json_files import read_json_lines
from incidentkit.sources.json_text import canonical_json, parse_json_values
from incidentkit.sources.loaded import Loaded, RejectSink, all_distinct
from incidentkit.times import parse_utc, zone_of

_INT64 = 2.0**63


_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


@dataclass(frozen=True)
class Layout:
    """How one canonical frame is read from a table-shaped source."""

    section: str
    frame: str
    table: str
    key: str
    optional: tuple[str, ...]
    not_null: tuple[str, ...]
    times: tuple[str, ...]
    json: tuple[str, ...]
    ints: tuple[str, ...]
    statuses: tuple[str, ...]
    open_statuses: tuple[str, ...]
    window: tuple[str, str]
    filters: sql.Predicates
    order: tuple[str, ...]
    warn_null: Mapping[str, str] = field(default_factory=dict)
    """NOT NULL columns whose absence leaves the row usable: kept, with a warning saying what
    it cannot tell (column → that consequence)."""

    @property
    def columns(self) -> list[str]:
        return spec_of(self.frame).names


def load_table(
    layout: Layout, spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None
) -> Loaded:
    """Read ``spec`` into the ``layout.frame`` frame and its rejects."""
    names = column_names(layout, spec)
    sink = RejectSink(layout.section)
    if spec.is_database:
        raw, prefix, exact = _read_sql(layout, spec, names, filters, environ)
        where = raw[layout.key].fillna(f"<no {layout.key}>")  # table:key, built when needed
    else:
        raw, where = _read_files(layout, spec, names, sink)
        prefix, exact = "", False
    raw = _blank_is_missing(raw).reset_index(drop=True)
    where = prefix + where.astype(str).reset_index(drop=True)
    frame, reasons = _normalise(layout, raw, naive=spec.naive_timestamps)
    if not exact:
        keep = filter_mask(layout, frame, filters)
        frame, raw, reasons, where = frame[keep], raw[keep], reasons[keep], where[keep]
    reasons = _duplicates(layout, frame, reasons, where)
    bad = reasons.notna()
    good = frame
    if bad.any():  # most tables have nothing to reject: no copy of their rows then
        shown: pd.DataFrame = raw[bad].astype(object)
        rejected = shown.where(shown.notna(), None).to_dict("records")
        for location, reason, row in zip(where[bad], reasons[bad], rejected, strict=True):
            sink.add(location, reason, canonical_json(row))
        good = frame[~bad]
    _warn_missing(layout, raw[~bad], where[~bad], sink, table=spec.table or layout.table)
    if not _ordered(good, layout.order):  # a database hands its rows over mostly in order
        good = good.sort_values(list(layout.order), kind="stable", na_position="last")
    return Loaded(
        frames={layout.frame: conform(layout.frame, good.reset_index(drop=True))},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def _warn_missing(
    layout: Layout, raw: pd.DataFrame, where: pd.Series, sink: RejectSink, *, table: str
) -> None:
    """A warning per kept row that lacks a :attr:`Layout.warn_null` column."""
    for col, consequence in layout.warn_null.items():
        missing = raw[col].isna()
        if not missing.any():
            continue
        shown = raw[missing].astype(object)
        reason = f"missing {col} (NOT NULL in {table}): {consequence}"
        for location, row in zip(
            where[missing], shown.where(shown.notna(), None).to_dict("records"), strict=True
        ):
            sink.warn(str(location), reason, canonical_json(row))


def _blank_is_missing(raw: pd.DataFrame) -> pd.DataFrame:
    """Empty text is missing: None in object columns (an all-NaN column parses as nothing),
    NaN in text columns (COPY's), which stay text."""
    columns = {}
    for col in raw.columns:
        values = raw[col]
        if values.dtype == "str":
            columns[col] = values.mask(values.eq(""))
        else:
            columns[col] = values.astype(object).where(values.notna() & (values != ""), None)
    return pd.DataFrame(columns, index=raw.index)


def column_names(layout: Layout, spec: SourceSpec) -> dict[str, str]:
    """Canonical column name → the source's name, from the manifest's ``columns`` table."""
    unknown = sorted(set(spec.columns) - set(layout.columns))
    if unknown:
        raise ManifestError(
            f"[{spec.section}] columns maps names the {layout.frame} frame does not have",
            value=unknown,
            fix=f"map only these canonical names: {', '.join(layout.columns)}",
        )
    return {col: spec.columns.get(col, col) for col in layout.columns}


def _needed(layout: Layout, spec: SourceSpec) -> list[str]:
    return [c for c in layout.columns if c not in layout.optional or c in spec.columns]


def _read_sql(
    layout: Layout,
    spec: SourceSpec,
    names: dict[str, str],
    filters: Filters,
    environ: Mapping[str, str] | None,
) -> tuple[pd.DataFrame, str, bool]:
    table = spec.table or layout.table
    what = f"[{spec.section}] {spec.location()}" + ("" if spec.table else f" table {table}")
    engine = sql.open_source(spec, environ, what=what)
    try:
        with sql.connect(engine, what=what) as conn:
            info = sql.require_table(
                conn, table, [names[c] for c in _needed(layout, spec)], what=what
            )
            present = [c for c in layout.columns if names[c] in info.columns]
            naive = sorted(
                names[c]
                for c in layout.times
                if c in present and names[c] in info.naive_time_columns
            )
            zone = zone_of(spec.naive_timestamps)
            if naive and zone is None:
                raise SchemaError(
                    f"{what}: columns store timestamps without a time zone",
                    value=naive,
                    fix=f'set timezone = "UTC" (or the zone they were written in, e.g. '
                    f'"Europe/Berlin") in [{spec.section}] or at the top of the manifest; or '
                    "convert them to a time-zone-aware type",
                )
            # Local wall times cannot be compared with UTC bounds in SQL: pandas applies the
            # window after parsing them in their zone.
            local = bool(naive) and zone != "UTC"
            in_sql = replace(filters, window=None) if local else filters
            statement = _select(conn, layout, names, present, info, in_sql)
            raw = sql.read_frame(conn, statement, what=what)
            if raw.empty:
                sql.require_rows(conn, info, what=what)
            exact = conn.dialect.name == "postgresql" and not local
    finally:
        engine.dispose()
    # Only PostgreSQL's result is exact; pandas applies the filters again elsewhere: MySQL
    # collations fold case and trailing spaces in the text filters, and SQLite text times not in
    # SQLAlchemy's form pass the window unfiltered (sql.time_unknown) to be placed after parsing.
    return raw.reindex(columns=layout.columns), f"{table}:", exact


def _select(
    conn: Connection,
    layout: Layout,
    names: dict[str, str],
    present: list[str],
    info: sql.TableInfo,
    filters: Filters,
) -> sa.Select[Any]:
    """The SELECT of the present columns, named canonically, with every filter bound."""
    on = layout.filters
    mapped = sql.Predicates(
        app_name=on.app_name and names[on.app_name],
        session_id=on.session_id and names[on.session_id],
        invocation_id=on.invocation_id and names[on.invocation_id],
    )
    table = info.clause
    conditions = sql.where(conn, filters, mapped, info)
    if filters.window is not None:
        # Each bound as the column it is compared with stores time; rows whose time SQL
        # cannot compare (NULL, odd SQLite text) pass, to be placed or rejected after parsing.
        (start, start_as), (end, end_as) = (
            (sql.column(table, names[c]), sql.time_storage(info, names[c])) for c in layout.window
        )
        win_start = sql.window_params(conn, filters.window, end_as)[0]
        win_end = sql.window_params(conn, filters.window, start_as)[1]
        still_open = sql.in_values(
            conn, sql.column(table, names["status"]), "open_status", layout.open_statuses
        )
        conditions += [
            sa.or_(
                sql.time_unknown(conn, start, start_as), start < sa.bindparam("win_end", win_end)
            ),
            sa.or_(
                sql.time_unknown(conn, end, end_as),
                end >= sa.bindparam("win_start", win_start),
                still_open,
            ),
        ]
    columns = [sql.column(table, names[c]).label(c) for c in present]
    return sa.select(*columns).select_from(table).where(*conditions)


def _read_files(
    layout: Layout, spec: SourceSpec, names: dict[str, str], sink: RejectSink
) -> tuple[pd.DataFrame, pd.Series]:
    frames, locations = [], []
    for path in spec.paths:
        fmt = spec.format or _FORMATS.get(path.suffix.lower())
        what = f"[{spec.section}] {path}"
        require_content(path, what=f"[{spec.section}]")
        if fmt == "csv":
            raw, where = read_csv_rows(path, sink, what=what)
        elif fmt == "jsonl":
            records, where = read_json_lines(path, sink, what=what)
            raw = pd.DataFrame(records, index=range(len(records)))  # [{}] is one row, too
        else:
            raise ManifestError(
                f"[{spec.section}] cannot tell the format of a file from its name",
                value=str(path),
                fix='say format = "csv" or format = "jsonl" in the manifest section',
            )
        missing = [names[c] for c in _needed(layout, spec) if names[c] not in raw.columns]
        if missing and (fmt == "csv" or len(raw)):
            raise SchemaError(
                f"{what}: the {fmt.upper()} {'header' if fmt == 'csv' else 'records'} lack columns",
                value=missing,
                fix=f"it has {sorted(map(str, raw.columns))}; map your names with columns = "
                '{ canonical = "yours" } in the manifest',
            )
        renamed = raw.rename(columns={names[c]: c for c in layout.columns})
        frames.append(renamed.reindex(columns=layout.columns).astype(object))
        locations.append(pd.Series(where, dtype=object))
    return pd.concat(frames, ignore_index=True), pd.concat(locations, ignore_index=True)


def read_csv_rows(path: Path, sink: RejectSink, *, what: str) -> tuple[pd.DataFrame, list[str]]:
    """Read a CSV file with a header row as text; ragged or non-UTF-8 rows become rejects.

    A field may be as long as a text line may (:data:`MAX_LINE_BYTES`); bytes that are not
    UTF-8 are kept as surrogates while reading, so only their row is rejected.
    """
    header: list[str] | None = None
    rows: list[list[str]] = []
    locations: list[str] = []
    csv.field_size_limit(MAX_LINE_BYTES)
    with open_text(
        path, what=what, encoding="utf-8-sig", errors="surrogateescape", newline=""
    ) as handle:
        reader = csv.reader(handle, strict=True)
        last = 0
        try:
            for record in _records(reader, path, sink):
                start, last = last + 1, reader.line_num
                if not record or (len(record) == 1 and not record[0].strip()):
                    continue
                where = f"{path.name}:{start}"
                if any(_NOT_UTF8.search(field) for field in record):
                    raw = ",".join(record).encode("utf-8", "surrogateescape")
                    sink.add(where, "not UTF-8 text", raw.decode("utf-8", "replace"))
                elif header is None:
                    header = _header(record, path, what=what)
                elif len(record) != len(header):
                    sink.add(
                        where, f"expected {len(header)} fields, got {len(record)}", ",".join(record)
                    )
                else:
                    rows.append(record)
                    locations.append(where)
        except csv.Error as err:
            raise SourceError(
                f"{what}: unreadable CSV after line {last} ({err})",
                value=str(path),
                fix="export the file again as UTF-8 CSV with a header row",
            ) from err
    if header is None:
        raise SchemaError(
            f"{what}: the CSV file has no header row",
            value=str(path),
            fix="export it with a header naming the columns",
        )
    if not rows and not sink.rows:
        raise SourceError(
            f"{what}: the CSV file has a header but no rows",
            value=str(path),
            fix="export the evidence again, or remove the file from the manifest",
        )
    return pd.DataFrame(rows, columns=header, dtype=object), locations


_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_FIELD_LIMIT = "field larger than field limit"


def _records(reader: Any, path: Path, sink: RejectSink) -> Iterator[list[str]]:
    """The reader's records; a field over the size limit rejects its record, not the file."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if _FIELD_LIMIT not in str(err):
                raise
            sink.add(
                f"{path.name}:{reader.line_num}",
                f"a field is longer than the limit of {MAX_LINE_BYTES:,} bytes",
                None,
            )


def _header(record: list[str], path: Path, *, what: str) -> list[str]:
    repeated = sorted({name for name in record if record.count(name) > 1})
    if repeated:
        raise SchemaError(
            f"{what}: the CSV header repeats columns",
            value=repeated,
            fix="export the file again with each column named once",
        )
    return record


def _normalise(layout: Layout, raw: pd.DataFrame, *, naive: Any) -> tuple[pd.DataFrame, pd.Series]:
    """Parse every column to its canonical type; ``reasons`` says why a row cannot be used."""
    reasons = pd.Series(None, index=raw.index, dtype=object)
    out: dict[str, pd.Series] = {}
    for col in layout.columns:
        values = raw[col]
        if col in (*layout.times, *layout.json):
            if col in layout.times:
                out[col], why = parse_utc(values, naive=naive)
            else:
                out[col], why = parse_json_values(values)
            reasons = _note(reasons, why.notna(), f"{col}: ", why)
        elif col in layout.ints and (exact := _arrow_ints(values)) is not None:
            out[col] = exact  # every value a plain integer: read whole by Arrow
        elif col in layout.ints:
            numbers = to_numbers(values)
            whole = numbers.notna() & numbers.eq(numbers.round()) & numbers.abs().lt(_INT64)
            bad = raw[col].notna() & ~whole
            reasons = _note(reasons, bad, f"{col} is not a 64-bit integer: ", raw[col])
            ints = numbers.where(whole, 0).astype("int64")
            wide = whole & numbers.abs().ge(2.0**53)  # past float's exact integers: reread
            if wide.any():
                ints[wide] = values[wide].map(_exact_int).astype("int64")
            out[col] = ints
        elif pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
            out[col] = values  # all text (every CSV field, most JSON): nothing to check
        else:
            wrong = values.map(_not_text)
            reasons = _note(reasons, wrong, f"{col} is not text: ", values.map(repr))
            out[col] = values.map(_as_text).where(~wrong, None)
    for col in layout.not_null:
        reasons = _note(reasons, raw[col].isna(), f"missing {col}")
    status = raw["status"]
    unknown = status.notna() & ~status.isin(layout.statuses)
    if unknown.any():
        allowed = f" is not one of {', '.join(layout.statuses)}"
        reasons = _note(reasons, unknown, "status ", status[unknown].astype(str) + allowed)
    return pd.DataFrame(out, index=raw.index), reasons


def _ordered(frame: pd.DataFrame, order: tuple[str, ...]) -> bool:
    """Whether ``frame`` is already sorted by ``order`` (no missing values in it), so the
    stable sort would change nothing: each row's first differing key is not below the last's."""
    if len(frame) < 2 or bool(frame[list(order)].isna().any(axis=None)):
        return len(frame) < 2
    tied = np.ones(len(frame) - 1, dtype=bool)
    for col in order:
        values = pa.array(frame[col])
        before, after = values[:-1], values[1:]
        below = pc.less(after, before).to_numpy(zero_copy_only=False)
        if bool((tied & below).any()):
            return False
        tied &= pc.equal(after, before).to_numpy(zero_copy_only=False)
    return True


def _arrow_ints(values: pd.Series) -> pd.Series | None:
    """A text column of plain integers (COPY's) as int64, or None when any value is missing,
    fractional, too large or no integer (the checked path says which)."""
    if values.dtype != "str" or not len(values) or bool(values.isna().any()):
        return None
    try:
        ints = pc.cast(pa.array(values), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pd.Series(ints.to_numpy(), index=values.index, dtype="int64")


def _exact_int(value: Any) -> int:
    """The exact integer of a value ``to_numbers`` read as a whole number past 2**53."""
    if type(value) is int:
        return value
    text = str(value).strip()
    return int(text) if text.lstrip("+-").isdigit() else int(float(text))


def _not_text(value: Any) -> bool:
    """A JSON list, object or boolean where text belongs (numbers are read as their text)."""
    return isinstance(value, list | dict | bool)


def _as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not pd.isna(value) else value


def _note(
    reasons: pd.Series, mask: pd.Series, reason: str, detail: pd.Series | None = None
) -> pd.Series:
    """Add ``reason`` (+ ``detail`` of the row) to the rows in ``mask``, after earlier ones."""
    if not mask.any():
        return reasons
    new = pd.Series(reason, index=reasons.index[mask], dtype=object)
    if detail is not None:
        new = new + detail.reindex(new.index).astype(str).astype(object)
    old = reasons[mask]
    out = reasons.copy()
    out[mask] = new.where(old.isna(), old + "; " + new)
    return out


def filter_mask(layout: Layout, frame: pd.DataFrame, filters: Filters) -> pd.Series:
    """The filters of the SQL query, as a boolean mask over parsed rows."""
    keep = pd.Series(True, index=frame.index)
    on = layout.filters
    if filters.app_name is not None and on.app_name:
        keep &= frame[on.app_name].eq(filters.app_name)
    for values, col in (
        (filters.session_ids, on.session_id),
        (filters.invocation_ids, on.invocation_id),
    ):
        if values and col:
            keep &= frame[col].isin(values)
    if filters.window is not None:
        start, end = (frame[c] for c in layout.window)
        keep &= (start.isna() | start.lt(filters.window.end)) & (
            end.isna() | end.ge(filters.window.start) | frame["status"].isin(layout.open_statuses)
        )
    return keep.astype(bool)


def _duplicates(
    layout: Layout, frame: pd.DataFrame, reasons: pd.Series, where: pd.Series
) -> pd.Series:
    """Reject all but the last-updated row of each key (ties: the first read)."""
    keys = frame[layout.key][reasons.isna()]
    if all_distinct(keys):  # the common case: only the key column is looked at
        return reasons
    valid = frame[reasons.isna()]
    latest = valid.sort_values(layout.window[1], ascending=False, kind="stable")
    dup = latest[layout.key].duplicated(keep="first")
    kept = latest[~dup]
    kept_at = pd.Series(where[kept.index].to_numpy(), index=kept[layout.key].to_numpy())
    mask = pd.Series(False, index=reasons.index)
    mask[latest.index[dup]] = True
    return _note(
        reasons,
        mask,
        f"duplicate {layout.key}; kept the row updated last, at ",
        frame[layout.key].map(kept_at),
    )
