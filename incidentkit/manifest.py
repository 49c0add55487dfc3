"""The evidence manifest (``evidence.toml``): where one incident's evidence lives.

A manifest names credentials only indirectly (``url = "env:INCIDENT_DB_URL"``); a URL holding a
literal password (``user:secret@`` or a secret-named query parameter such as ``?password=``) is
refused, and a value read from an ``env:`` variable is a secret whatever it holds (messages name
the variable, never its value; :func:`env_secrets` lists what no output may contain).

Relative paths, and the file of a relative ``sqlite:///`` URL, resolve against the manifest's
folder, the evidence folder. A path that leaves it (``../``, an absolute path, a symlink, a
``sqlite:///`` URL to a file elsewhere) is refused unless the manifest says
``allow_outside = true``: a received manifest must not quote local files into a shared report.
The format is documented in ``docs/manifest.md``, the reasons in ``docs/security.md``.
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import tomllib
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from incidentkit.errors import ManifestError, ParameterError
from incidentkit.redact import env_value_secrets, has_query_secret, redact_url, remember_env_value
from incidentkit.times import parse_duration, utc_timestamp

MANIFEST_NAME = "evidence.toml"
SECTIONS = (
    *("ledger", "events", "journal", "spans", "diagnostics", "threads", "histograms"),
    "jfr",
)
_SOURCE_FORMATS: Mapping[str, tuple[str, ...]] = {
    "ledger": ("sql", "csv", "jsonl"),
    "events": (
        "sql",
        "adk-java-json",
        "adk-python-db",
        "adk-session-json",
        "vertex-ai-json",
        "firestore-json",
        "bigquery-agent-analytics",
        "adk-mongodb-json",
        "adk-redis",
    ),
    "journal": ("sql", "csv", "jsonl"),
    "spans": ("otlp-json", "jaeger-json", "adk-web-sqlite"),
    "diagnostics": ("text", "json", "bigquery-agent-analytics"),
    "threads": ("jcmd",),
    "histograms": ("jcmd",),
    "jfr": ("jfr", "jfr-json"),
}
PARQUET = "parquet"
"""The format of a snapshot section (`incidentkit snapshot`): the frames as the kit loaded them."""
FORMATS: Mapping[str, tuple[str, ...]] = {
    section: (*formats, PARQUET) for section, formats in _SOURCE_FORMATS.items()
}
_SECTION_KEYS = {
    "url",
    "path",
    "paths",
    "format",
    "table",
    "columns",
    "naive_timestamps",
    "timezone",
}
BIGQUERY_KEYS = {"max_bytes_billed"}
"""Keys of a section that reads the BigQuery Agent Analytics table live ([events],
[diagnostics]: ``url`` naming ``bigquery://PROJECT/DATASET``)."""
DEFAULT_MAX_BYTES_BILLED = 10 * 2**30
"""Bytes one BigQuery query may bill unless ``max_bytes_billed`` says otherwise: 10 GiB (about
USD 0.06 at on-demand prices), days of a busy agent's rows within a window's partitions."""
EVENT_IDENTITY_KEYS = ("app_name", "user_id", "session_id")
"""[events] keys naming the session of events that carry none (a one-session dump)."""
_EVENTS_KEYS = {*EVENT_IDENTITY_KEYS, "event_column"}
_TOP_KEYS = {
    "allow_outside",
    "title",
    "window",
    "app_name",
    "sessions",
    "invocations",
    "timezone",
    "apps",
    *SECTIONS,
}
PROFILE_KEYS: Mapping[str, str] = {
    "terminal_agent": "the agent whose final response ends a run (a name, or a list of names)",
    "key_templates": "tool name → journal key template, e.g. { sendInvoice = "
    '"send-invoice:{invoiceId}" } ({} when no tool journals by business key)',
    "attempts_cap": "how many attempts make a crash loop (default 3)",
    "client_timeout_s": "the client's timeout in seconds (default 60)",
    "max_llm_calls": "the configured maxLlmCalls limit of a run",
    "loop_exit_keys": "state keys whose write ends a loop agent (a list)",
    "reasoning_engine": "the Vertex AI Agent Engine (reasoning engine) id whose sessions are "
    "this app's",
}
"""The keys of an ``[apps.<name>]`` profile: facts every incident of one app shares."""
DATABASE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
_PATTERN = frozenset("*?[")
"""Characters that make a path's file name a pattern (expanded in name order when read)."""


EARLIEST = pd.Timestamp("1970-01-01", tz="UTC")
"""The start of a window that reads everything stored before its end (a session's history)."""


@dataclass(frozen=True)
class Window:
    """A closed-open UTC time window ``[start, end)``."""

    start: pd.Timestamp
    end: pd.Timestamp
    last: pd.Timedelta | None = field(default=None, compare=False)
    """A relative window's length (``window = { last = "2h" }``); None for a fixed window."""

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ParameterError(
                "window ends before it starts",
                value=f"{self.start.isoformat()} .. {self.end.isoformat()}",
                fix="give end later than start",
            )

    @classmethod
    def parse(cls, start: Any, end: Any) -> Window:
        return cls(utc_timestamp(start, what="window.start"), utc_timestamp(end, what="window.end"))

    @classmethod
    def before(cls, as_of: pd.Timestamp, last: pd.Timedelta) -> Window:
        """The relative window ``[as_of - last, as_of)``: back-to-back runs read each row once."""
        return cls(as_of - last, as_of, last)

    def anchored(self, as_of: pd.Timestamp) -> Window:
        """A relative window moved to end at ``as_of``; a fixed window unchanged."""
        return self if self.last is None else Window.before(as_of, self.last)


AS_OF_FROM_ENV = "INCIDENTKIT_AS_OF_FROM"
"""Where the run's as_of came from (``--as-of``, ``-p as_of``, the run's start for a relative
window), set by ``incidentkit run`` for the flow's kernel beside its ``as_of`` parameter; a
flow's report says it."""
STALE_AFTER_ENV = "INCIDENTKIT_STALE_AFTER"
"""``--stale-after`` in seconds, set by ``incidentkit run`` for the flow's kernel: how far as_of
may lie past the evidence's end before ages are judged at that end."""


def run_as_of_from() -> str | None:
    """Where the runner took the flow's as_of from (:data:`AS_OF_FROM_ENV`); None outside it."""
    return os.environ.get(AS_OF_FROM_ENV, "").strip() or None


def run_stale_after() -> pd.Timedelta | None:
    """The run's ``--stale-after`` (:data:`STALE_AFTER_ENV`); None when not given or unreadable
    (the default limit then holds)."""
    text = os.environ.get(STALE_AFTER_ENV, "").strip()
    try:
        length = pd.Timedelta(seconds=float(text)) if text else None
    except (ValueError, OverflowError):
        return None
    return length if length is not None and length > pd.Timedelta(0) else None


@dataclass(frozen=True)
class Filters:
    """Row filters pushed into every source read: time window, app, sessions, invocations."""

    window: Window | None = None
    app_name: str | None = None
    session_ids: tuple[str, ...] = ()
    invocation_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceSpec:
    """One manifest section: a database (``url`` + ``table``) or files (``path``/``paths``)."""

    section: str
    url_ref: str | None = None
    paths: tuple[Path, ...] = ()
    format: str | None = None
    table: str | None = None
    columns: Mapping[str, str] = field(default_factory=dict)
    naive_timestamps: str = "error"
    """How times without an offset are read: "error" (refused), "utc", or an IANA zone name
    (the manifest's ``timezone``; ``naive_timestamps = "utc"`` is the older spelling)."""
    sqlite_path: Path | None = None
    """A SQLite file given as ``path`` (opened by path, never through a URL)."""
    identity: Mapping[str, str] = field(default_factory=dict)
    """[events] only: app_name, user_id, session_id for events that name no session."""
    event_column: str = "event"
    """[events] only: the column of a JSON row export that holds the event."""
    engines: Mapping[str, str] = field(default_factory=dict)
    """[events] only: Vertex AI reasoning engine id → app name, from the app profiles."""
    base: Path | None = None
    """The manifest's folder: where a relative ``sqlite:///`` URL read from an ``env:``
    variable starts (None: the working directory)."""
    max_bytes_billed: int | None = None
    """[events], [diagnostics] on ``bigquery://``: bytes each query may bill (None: not given,
    :data:`DEFAULT_MAX_BYTES_BILLED`)."""

    @property
    def is_database(self) -> bool:
        return self.url_ref is not None or self.sqlite_path is not None

    def url(self, environ: Mapping[str, str] | None = None) -> str:
        """The database URL, with ``env:NAME`` resolved from ``environ`` (default os.environ)."""
        if self.url_ref is None:
            raise ManifestError(
                f"[{self.section}] has no url", value=None, fix='give url = "env:NAME"'
            )
        return resolve_url(self.url_ref, section=self.section, environ=environ)

    def location(self) -> str:
        """Where the source is, safe to print (never a resolved URL)."""
        table = f" table {self.table}" if self.table else ""
        if self.url_ref is not None:
            return _redact(self.url_ref) + table
        return ", ".join(str(p) for p in self.paths) + (table if self.sqlite_path else "")


@dataclass(frozen=True)
class Manifest:
    """A parsed ``evidence.toml``."""

    path: Path | None
    title: str | None
    filters: Filters
    sources: Mapping[str, SourceSpec]
    apps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``[apps.<name>]`` profiles: per app, the settings its flows read (:data:`PROFILE_KEYS`)."""
    allow_outside: bool = False
    """``allow_outside = true``: paths may leave the manifest's folder."""


def resolve_url(ref: str, *, section: str, environ: Mapping[str, str] | None = None) -> str:
    """Turn ``env:NAME`` into the URL held by that variable; other URLs pass unchanged.

    The value is remembered as a secret (:func:`~incidentkit.redact.remember_env_value`): from
    now on every message of this process masks it, and its URL password, in every rendering.
    """
    env = os.environ if environ is None else environ
    if not ref.startswith("env:"):
        return ref
    name = ref[4:]
    if name not in env or not env[name].strip():
        raise ManifestError(
            f"[{section}] url names an environment variable that is not set",
            value=ref,
            fix=f"export {name}=<database URL> before loading this evidence",
        )
    url = env[name]
    remember_env_value(url)
    return url


def env_secrets(manifest: Manifest, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every rendering of every value the manifest names with ``env:`` (longest first): what no
    output of a run may contain (:func:`~incidentkit.redact.env_value_secrets`; whole values
    under 8 characters and URL passwords under 4 are left out). Unset variables give none."""
    env = os.environ if environ is None else environ
    forms: set[str] = set()
    for spec in manifest.sources.values():
        ref = spec.url_ref
        if ref is not None and ref.startswith("env:") and env.get(ref[4:]):
            forms.update(env_value_secrets(env[ref[4:]]))
    return sorted(forms, key=lambda form: (-len(form), form))


def _redact(ref: str) -> str:
    """``ref`` safe to show: ``env:NAME`` as is, a URL with its passwords masked."""
    if ref.startswith("env:"):
        return ref
    try:
        make_url(ref)
    except (ArgumentError, ValueError):
        return "<unparsable url>"  # not a URL: no telling where a secret would sit
    return redact_url(ref)


def find_manifest(path: str | os.PathLike[str]) -> Path:
    """The manifest file for ``path``: the file itself, or ``evidence.toml`` in a folder."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / MANIFEST_NAME
    if not candidate.is_file():
        raise ManifestError(
            "no evidence manifest found",
            value=str(path),
            fix=f"point at an {MANIFEST_NAME} or a folder holding one "
            "(incidentkit simulate healthy --out DIR writes an example)",
        )
    return candidate


def load_manifest(path: str | os.PathLike[str], *, as_of: pd.Timestamp | None = None) -> Manifest:
    """Read and check a manifest file (or a folder holding ``evidence.toml``). A relative
    window (``window = { last = "2h" }``) ends at ``as_of``, else now."""
    file = find_manifest(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ManifestError(
            f"{file} is not valid TOML", value=str(err), fix="fix the syntax at that line"
        ) from err
    return parse_manifest(data, base=file.parent, path=file, as_of=as_of)


def parse_manifest(
    data: Mapping[str, Any],
    *,
    base: Path,
    path: Path | None = None,
    as_of: pd.Timestamp | None = None,
) -> Manifest:
    """Check a manifest already read into a mapping; relative paths resolve against ``base``."""
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ManifestError(
            "manifest has unknown keys",
            value=unknown,
            fix=f"{did_you_mean(unknown, _TOP_KEYS)}allowed keys: {sorted(_TOP_KEYS)}",
        )
    zone = _timezone("manifest", data.get("timezone")) if "timezone" in data else "error"
    apps = _parse_apps(data.get("apps", {}))
    allow_outside = data.get("allow_outside", False)
    if not isinstance(allow_outside, bool):
        raise ManifestError(
            "allow_outside must be true or false",
            value=allow_outside,
            fix="write allow_outside = true to let paths leave the manifest's folder",
        )
    folder = None if allow_outside else base.resolve()
    sources = {
        name: _parse_section(name, data[name], base, zone, inside=folder)
        for name in SECTIONS
        if name in data
    }
    if not sources:
        raise ManifestError(
            "manifest names no evidence source",
            value=str(path or base),
            fix=f"add at least one of the sections {', '.join(SECTIONS)}",
        )
    return Manifest(
        path=path,
        title=_optional_str(data, "title"),
        filters=Filters(
            window=_parse_window(data.get("window"), as_of),
            app_name=_optional_str(data, "app_name"),
            session_ids=_str_tuple(data, "sessions"),
            invocation_ids=_str_tuple(data, "invocations"),
        ),
        sources=_with_engines(sources, apps),
        apps=apps,
        allow_outside=allow_outside,
    )


def _with_engines(
    sources: dict[str, SourceSpec], apps: Mapping[str, Mapping[str, Any]]
) -> dict[str, SourceSpec]:
    """Give [events] the app of each Vertex AI reasoning engine its profiles name."""
    engines: dict[str, str] = {}
    for app, profile in apps.items():
        engine = profile.get("reasoning_engine")
        if engine is None:
            continue
        if engine in engines:
            raise ManifestError(
                "two app profiles name the same reasoning_engine",
                value=f"reasoning_engine = {engine!r} in [apps.{engines[engine]}] and [apps.{app}]",
                fix="each Agent Engine holds one app's sessions: keep it in one [apps.<name>]",
            )
        engines[engine] = app
    if engines and "events" in sources:
        sources = {**sources, "events": replace(sources["events"], engines=engines)}
    return sources


def _parse_apps(raw: object) -> dict[str, dict[str, Any]]:
    """The ``[apps.<name>]`` tables, each key checked for its type."""
    if not isinstance(raw, Mapping) or not all(isinstance(v, Mapping) for v in raw.values()):
        raise ManifestError(
            "apps must hold one table per app",
            value=raw,
            fix='write [apps.support] then terminal_agent = "support_agent" on the next line',
        )
    profiles: dict[str, dict[str, Any]] = {}
    allowed = profile_keys()
    for app, table in raw.items():
        where = f"[apps.{app}]"
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ManifestError(
                f"{where} has unknown keys",
                value=unknown,
                fix=f"{did_you_mean(unknown, allowed)}allowed: {sorted(allowed)}",
            )
        profiles[app] = {key: _profile_value(where, key, value) for key, value in table.items()}
    return profiles


def profile_keys() -> frozenset[str]:
    """The keys an ``[apps.<name>]`` profile may hold: :data:`PROFILE_KEYS` and every key a
    registered flow's settings read from the profile (a flow added later declares its own;
    its settings check the value when the flow runs)."""
    from incidentkit.flows import FLOWS  # the flows build on this module: imported when used

    return frozenset(PROFILE_KEYS).union(*(flow.profile_keys for flow in FLOWS.values()))


def _profile_value(where: str, key: str, value: object) -> object:
    def names(v: object) -> bool:
        return isinstance(v, str) and bool(v.strip())

    checks: dict[str, tuple[bool, str]] = {
        "terminal_agent": (
            names(value) or (isinstance(value, list) and bool(value) and all(map(names, value))),
            'terminal_agent = "notify_agent" (or a list of names)',
        ),
        "key_templates": (
            isinstance(value, Mapping)
            and all(isinstance(k, str) and names(v) for k, v in value.items()),
            'key_templates = { sendInvoice = "send-invoice:{invoiceId}" }',
        ),
        "attempts_cap": (type(value) is int and value >= 1, "attempts_cap = 3"),
        "client_timeout_s": (
            isinstance(value, int | float) and not isinstance(value, bool) and value > 0,
            "client_timeout_s = 60",
        ),
        "max_llm_calls": (type(value) is int and value >= 1, "max_llm_calls = 500"),
        "loop_exit_keys": (
            isinstance(value, list) and all(map(names, value)),
            'loop_exit_keys = ["review_approved"]',
        ),
        "reasoning_engine": (
            names(value) and "/" not in str(value),
            'reasoning_engine = "1234567890123456789" (the last segment of '
            "projects/.../reasoningEngines/<id>)",
        ),
    }
    if key not in checks:  # a flow's own key: its settings check it when the flow runs
        return dict(value) if isinstance(value, Mapping) else value
    ok, example = checks[key]
    if not ok:
        raise ManifestError(
            f"{where} {key} must be {PROFILE_KEYS[key]}", value=value, fix=f"write {example}"
        )
    return dict(value) if isinstance(value, Mapping) else value


def _parse_window(raw: object, as_of: pd.Timestamp | None) -> Window | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping) and set(raw) == {"last"}:
        return _relative_window(raw["last"], as_of)
    if not isinstance(raw, Mapping) or set(raw) != {"start", "end"}:
        raise ManifestError(
            "window must be a table with start and end, or with last",
            value=raw,
            fix='write window = { start = "2026-11-29T02:30:00Z", end = "2026-11-29T04:00:00Z" }, '
            'or window = { last = "2h" } (the two hours before the run\'s as_of)',
        )
    try:
        return Window.parse(_toml_time(raw["start"]), _toml_time(raw["end"]))
    except ParameterError as err:
        raise ManifestError(err.problem, value=err.value, fix=err.fix) from err


def _relative_window(last: object, as_of: pd.Timestamp | None) -> Window:
    """``window = { last = "2h" }``: the ``last`` before ``as_of``, else before now."""
    try:
        length = parse_duration(
            last,
            problem="window last must be a positive duration",
            fix='write window = { last = "2h" } (or "30m", "90s", "1d", "1h30m")',
        )
    except ParameterError as err:
        raise ManifestError(err.problem, value=err.value, fix=err.fix) from err
    if as_of is None:  # up to now, rounded up: nothing stored so far is cut
        return Window.before(pd.Timestamp.now(tz="UTC").ceil("s"), length)
    return Window.before(as_of, length)


def _toml_time(value: object) -> object:
    # TOML offset date-times arrive as aware datetimes; local ones as naive (refused later).
    return pd.Timestamp(value) if isinstance(value, datetime.datetime) else value


def _parse_section(
    name: str, raw: Any, base: Path, zone: str = "error", *, inside: Path | None = None
) -> SourceSpec:
    """One section; with ``inside``, every path it names must resolve into that folder."""
    if not isinstance(raw, Mapping):
        raise ManifestError(f"[{name}] must be a table", value=raw, fix=f"write [{name}] ...")
    allowed = _SECTION_KEYS | (_EVENTS_KEYS if name == "events" else set())
    allowed |= BIGQUERY_KEYS if name in ("events", "diagnostics") else set()
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ManifestError(
            f"[{name}] has unknown keys",
            value=unknown,
            fix=f"{did_you_mean(unknown, allowed)}allowed: {sorted(allowed)}",
        )
    given = [key for key in ("url", "path", "paths") if key in raw]
    if len(given) != 1:
        raise ManifestError(
            f"[{name}] must give exactly one of url, path or paths",
            value=given,
            fix="use url for a database, path (or paths) for files",
        )
    fmt = raw.get("format")
    if fmt is not None and fmt not in FORMATS[name]:
        raise ManifestError(
            f"[{name}] format is not one the kit reads",
            value=fmt,
            fix=f"{did_you_mean([str(fmt)], FORMATS[name])}use one of "
            f"{', '.join(FORMATS[name])}, or leave it out to detect it",
        )
    if fmt == PARQUET and "path" not in raw:
        raise ManifestError(
            f"[{name}] format parquet reads one snapshot folder",
            value={key: raw[key] for key in given},
            fix=f'write path = "{name}" (the folder incidentkit snapshot wrote)',
        )
    columns = raw.get("columns", {})
    if not isinstance(columns, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in columns.items()
    ):
        raise ManifestError(
            f"[{name}] columns must map canonical names to your column names",
            value=columns,
            fix='write columns = { status = "state" }',
        )
    naive = raw.get("naive_timestamps", "error")
    if naive not in ("error", "utc"):
        raise ManifestError(
            f'[{name}] naive_timestamps must be "error" or "utc"',
            value=naive,
            fix='say timezone = "UTC" (or the zone the source writes in) instead',
        )
    if "timezone" in raw:
        naive = _timezone(f"[{name}]", raw["timezone"])
    elif naive == "error":
        naive = zone
    url_ref: str | None = None
    sqlite_path: Path | None = None
    paths: tuple[Path, ...] = ()
    if "url" in raw:
        url_ref = _check_url(name, raw["url"])
        sqlite_path = _sqlite_file(url_ref, base)
        if sqlite_path is not None:  # read as path = "<file>": by path, from the manifest's folder
            url_ref, paths = None, (sqlite_path,)
            _check_inside(name, "url", paths, inside)
    else:
        listed = _listed_paths(name, raw)
        paths = tuple((base / p).resolve() for p in listed)
        _check_inside(name, "paths" if "paths" in raw else "path", paths, inside)
        if len(paths) == 1 and paths[0].suffix in DATABASE_SUFFIXES and fmt != PARQUET:
            sqlite_path = paths[0]
    return SourceSpec(
        section=name,
        max_bytes_billed=_max_bytes_billed(name, raw, url_ref),
        url_ref=url_ref,
        sqlite_path=sqlite_path,
        identity={key: _text(name, raw, key) for key in EVENT_IDENTITY_KEYS if key in raw},
        event_column=_text(name, raw, "event_column") if "event_column" in raw else "event",
        paths=paths,
        format=fmt,
        table=raw.get("table"),
        columns=dict(columns),
        naive_timestamps=naive,
        base=base,
    )


def _max_bytes_billed(name: str, raw: Mapping[str, object], url: str | None) -> int | None:
    """``max_bytes_billed``: a positive whole number of bytes, given with a BigQuery ``url``
    (an ``env:`` one is checked when it is read); None when not given."""
    if "max_bytes_billed" not in raw:
        return None
    value = raw["max_bytes_billed"]
    if type(value) is not int or value <= 0:
        raise ManifestError(
            f"[{name}] max_bytes_billed must be a positive whole number of bytes",
            value=value,
            fix=f"write max_bytes_billed = {DEFAULT_MAX_BYTES_BILLED} (10 GiB, the default) or "
            "another number of bytes, without quotes or units; BigQuery refuses a query that "
            "would bill more",
        )
    if url is None or not (url.startswith("env:") or is_bigquery(url)):
        raise ManifestError(
            f"[{name}] max_bytes_billed caps BigQuery queries, but the section reads no "
            "BigQuery table",
            value=_redact(str(raw["url"])) if "url" in raw else "path/paths",
            fix='give url = "env:NAME" holding bigquery://PROJECT/DATASET, or remove '
            "max_bytes_billed",
        )
    return value


def is_bigquery(url: str) -> bool:
    """Whether ``url`` is a ``bigquery://`` URL (the Agent Analytics table, read live)."""
    scheme, found, _ = url.partition("://")
    return bool(found) and scheme.lower() == "bigquery"


def _listed_paths(name: str, raw: Mapping[str, object]) -> list[str]:
    """The file names of ``path = "a"`` (one, as text) or ``paths = ["a", "b"]`` (a list of
    text); a bare text for ``paths`` is refused with the list that was meant."""
    if "path" in raw:
        one = raw["path"]
        if isinstance(one, str) and one:
            return [one]
        several = isinstance(one, list)
        raise ManifestError(
            f"[{name}] path must be one file name as text",
            value=one,
            fix=f"write paths = {_toml_list(one)} for several files"
            if several
            else 'write path = "events.jsonl" (or paths = [...] for several files)',
        )
    listed = raw["paths"]
    if isinstance(listed, str):
        raise ManifestError(
            f"[{name}] paths must be a list of file names, not one text",
            value=listed,
            fix=f"write paths = {_toml_list([listed])} (or path = {_toml_list(listed)} for one "
            "file)",
        )
    if (
        not isinstance(listed, list)
        or not listed
        or not all(isinstance(p, str) and p for p in listed)
    ):
        raise ManifestError(
            f"[{name}] paths must be a non-empty list of file names as text",
            value=listed,
            fix='write paths = ["events-1.jsonl", "events-2.jsonl"]',
        )
    return listed


def _toml_list(value: object) -> str:
    """``value`` written as TOML (a text, or a list of texts) for a fix."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml_list(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _sqlite_file(url: str, base: Path) -> Path | None:
    """The file a literal ``sqlite:///`` URL names, resolved against ``base``; None for any
    other URL (and for SQLite URLs naming no file, which opening refuses)."""
    if url.startswith("env:"):
        return None
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):  # a URI: opening refuses it and says why
        return None
    return (base / Path(database).expanduser()).resolve()


def _check_inside(section: str, key: str, paths: tuple[Path, ...], inside: Path | None) -> None:
    """Refuse a resolved path (or a file its pattern matches) outside the folder ``inside``."""
    if inside is None:
        return
    for path in paths:
        found = [path]
        if _PATTERN & set(path.name) and path.parent.is_dir():
            found += [match.resolve() for match in path.parent.glob(path.name)]
        for target in found:
            if not target.is_relative_to(inside):
                raise ManifestError(
                    f"[{section}] {key} leads outside the evidence folder {inside}",
                    value=str(target),
                    fix="copy the evidence into the manifest's folder, or, if you trust this "
                    "manifest (it is yours), write allow_outside = true at its top: a manifest "
                    "from elsewhere could quote your local files into a shared report",
                )


def _check_url(section: str, url: object) -> str:
    if not isinstance(url, str) or not url:
        raise ManifestError(f"[{section}] url must be text", value=url, fix='url = "env:NAME"')
    if url.startswith("env:"):
        if not url[4:].isidentifier():
            raise ManifestError(
                f"[{section}] url names an invalid environment variable",
                value=url,
                fix='write url = "env:INCIDENT_DB_URL"',
            )
        return url
    if url.partition("://")[0].lower() in ("redis", "rediss", "unix") and "://" in url:
        # ADK Python's RedisSessionService store ([events] format = "adk-redis"), read by
        # redis-py, which splits the URL as urllib does: refused as a SQL URL would be.
        from urllib.parse import urlsplit

        try:
            split = urlsplit(url)
            split.port  # noqa: B018  (a port that is no number raises here)
        except ValueError as err:
            raise ManifestError(
                f"[{section}] url is not a Redis URL",
                value=redact_url(url),
                fix="write redis://[user@]host:port/db (or rediss://, unix:///path.sock) in an "
                'environment variable and say url = "env:NAME"',
            ) from err
        return _no_literal_password(section, url, bool(split.password))
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as err:
        raise ManifestError(
            f"[{section}] url is not a database URL",
            value=_redact(url),
            fix='write a SQLAlchemy URL in an environment variable and say url = "env:NAME"',
        ) from err
    return _no_literal_password(section, url, bool(parsed.password))


def _no_literal_password(section: str, url: str, has_password: bool) -> str:
    """``url``, refused when it holds a password (in its user part or its query)."""
    if has_password or has_query_secret(url):
        raise ManifestError(
            f"[{section}] url holds a literal password",
            value=redact_url(url),
            fix='put the URL in an environment variable and write url = "env:NAME"; '
            "a password must never be in a manifest, a notebook or git",
        )
    return url


def _timezone(where: str, value: object) -> str:
    """An IANA zone name checked against the zone database ("UTC" comes back as "utc")."""
    if isinstance(value, str) and value.upper() == "UTC":
        return "utc"
    if isinstance(value, str) and value:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
        else:
            return value
    known = zoneinfo.available_timezones()
    guess = did_you_mean([value], known) if isinstance(value, str) else ""
    raise ManifestError(
        f"{where} timezone is not a time zone name",
        value=value,
        fix=f'{guess}give an IANA name such as "UTC" or "Europe/Berlin" (the zone whose wall '
        "clock wrote the times that carry no offset)",
    )


def did_you_mean(given: list[str], known: Iterable[str]) -> str:
    """``"did you mean X? "`` for the closest known name to each given one ('' when none)."""
    guesses = [
        f"{word} → {close[0]}"
        for word in given
        if (close := difflib.get_close_matches(word, list(known), n=1, cutoff=0.6))
    ]
    return f"did you mean {', '.join(guesses)}? " if guesses else ""


def _text(section: str, raw: Mapping[str, object], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value:
        raise ManifestError(
            f"[{section}] {key} must be non-empty text", value=value, fix=f'write {key} = "..."'
        )
    return value


def _optional_str(data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ManifestError(f"{key} must be text", value=value, fix=f'write {key} = "..."')
    return value


def _str_tuple(data: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{key} must be a list of text", value=value, fix=f'{key} = ["..."]')
    return tuple(value)
