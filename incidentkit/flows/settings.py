"""A flow's settings as data, and the one resolver that builds them.

Each flow declares its settings as a frozen dataclass in ``flows/<name>/settings.py``, a
:class:`FlowSettings` whose fields say, through :func:`setting`, what each is (its
:class:`Kind`: the check and the type a given value is turned into), whether the app's
``[apps.<app>]`` profile gives it, and its default; a field declared without it is one the
flow's setup finds itself (the moment judged, the session). :func:`resolve` builds any
flow's settings from the notebook's parameters, the manifest's profile and the defaults, and
records where each came from: "parameter", "[apps.<app>]", "default" (or the field's own words
for its default), or how the setup found it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast

import pandas as pd

from incidentkit.errors import ParameterError

if TYPE_CHECKING:
    from incidentkit.evidence import Evidence

T = TypeVar("T")
S = TypeVar("S", bound="FlowSettings")

PARAMETER: Final = "parameter"
DEFAULT: Final = "default"
_EMPTY: tuple[object, ...] = (None, "", 0, (), [], {})
"""Parameters that give nothing (a notebook's empty default): the profile or default stands."""
_NOTHING: Mapping[str, object] = MappingProxyType({})


class Kind(Generic[T]):
    """What a setting is: when a value counts as given, and how it is checked and turned into
    the setting's type (a bad one is a :class:`~incidentkit.errors.ParameterError` that names
    the setting, the value and how to give it)."""

    def given(self, value: object, default: object) -> bool:
        """Whether ``value`` gives the setting: an empty one (``""``, ``0``, ``[]``, None)
        leaves it to the profile, else the default."""
        return value not in _EMPTY

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> T:
        """``value`` checked and in the setting's type; ``earlier``: the settings resolved
        before this one (a window before ``as_of`` reads it)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Whole(Kind[int]):
    """A whole number of at least :attr:`least`."""

    least: int
    fix: str

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.least:
            raise ParameterError(
                f"{name} is not a whole number of at least {self.least}", value=value, fix=self.fix
            )
        return value


@dataclass(frozen=True)
class Positive(Kind[float]):
    """A number above zero, as a float (zero gives nothing: the default stands)."""

    fix: str
    what: str = "a positive number"

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ParameterError(f"{name} is not {self.what}", value=value, fix=self.fix)
        return float(value)


@dataclass(frozen=True)
class Seconds(Positive):
    """A positive number of seconds."""

    what: str = "a positive number of seconds"


@dataclass(frozen=True)
class Flag(Kind[bool]):
    """True or false; the notebook's default value gives nothing (False given is given)."""

    fix: str

    def given(self, value: object, default: object) -> bool:
        return value is not default

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> bool:
        if not isinstance(value, bool):
            raise ParameterError(f"{name} is not true or false", value=value, fix=self.fix)
        return value


@dataclass(frozen=True)
class Duration(Kind[str]):
    """A positive duration (``"1min"``, ``"30s"``), kept as its text; :meth:`span` reads it."""

    fix: str

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> str:
        text = str(value).strip()
        self.span(name, text)
        return text

    def span(self, name: str, text: str) -> pd.Timedelta:
        """The duration ``text`` says."""
        from incidentkit.times import parse_duration

        return parse_duration(text, problem=f"{name} is not a positive duration", fix=self.fix)


@dataclass(frozen=True)
class Names(Kind[tuple[str, ...]]):
    """A list of names (state keys): a list, one name, or the JSON text of a list (as a shell
    passes it); each stripped, each once."""

    fix: str
    what: str = "a list of state keys"

    def coerce(
        self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING
    ) -> tuple[str, ...]:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except ValueError:
                    raise ParameterError(
                        f"{name} is not a JSON list", value=text, fix=self.fix
                    ) from None
            else:
                value = [text] if text else []
        if value is None:
            return ()
        if not isinstance(value, list | tuple) or not all(
            isinstance(k, str) and k.strip() for k in value
        ):
            raise ParameterError(f"{name} is not {self.what}", value=value, fix=self.fix)
        return tuple(dict.fromkeys(k.strip() for k in value))


@dataclass(frozen=True)
class OneOrMore(Kind[str | tuple[str, ...]]):
    """One name, kept as it is, or a list of names."""

    fix: str

    def coerce(
        self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING
    ) -> str | tuple[str, ...]:
        if isinstance(value, str) and value.strip():
            return value
        if (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(v, str) and v.strip() for v in value)
        ):
            return tuple(value)
        raise ParameterError(f"{name} is not a name or a list of names", value=value, fix=self.fix)


@dataclass(frozen=True)
class Table(Kind[Mapping[str, str]]):
    """A table of texts by name (a tool's key template by tool name)."""

    fix: str
    what: str = "a table of texts by name"

    def coerce(
        self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING
    ) -> Mapping[str, str]:
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in value.items()
        ):
            raise ParameterError(f"{name} is not {self.what}", value=value, fix=self.fix)
        return dict(value)


@dataclass(frozen=True)
class Choice(Kind[str]):
    """One of :attr:`options` (read when a value is checked), in lower case; blank gives
    nothing."""

    options: Callable[[], Collection[str]]
    none: str
    """What giving none means, after "or none, " in the fix."""

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> str:
        from incidentkit.manifest import did_you_mean

        text = str(value).strip().lower()
        known = self.options()
        if text and text not in known:
            raise ParameterError(
                f"unknown {name}",
                value=value,
                fix=f"{did_you_mean([text], known)}give one of {', '.join(known)} (or none, "
                f"{self.none})",
            )
        return text


@dataclass(frozen=True)
class WindowBefore(Kind[str]):
    """A window before the moment judged (the setting ``as_of``, resolved first): a duration
    (``7d``) that ends there, or ``START/END`` in UTC; kept as ``START/END`` text."""

    def coerce(self, name: str, value: object, earlier: Mapping[str, object] = _NOTHING) -> str:
        from incidentkit.flows.common import baseline_window

        as_of = earlier.get("as_of")
        if not isinstance(as_of, pd.Timestamp):
            raise TypeError(f"{name} is a window before as_of: declare as_of before it")
        window = baseline_window(value, as_of)
        return "" if window is None else f"{window.start.isoformat()}/{window.end.isoformat()}"


@dataclass(frozen=True)
class Spec:
    """What a field of a :class:`FlowSettings` says of its setting (:func:`setting`)."""

    kind: Kind[Any] | None
    """None: the flow's setup finds the value itself (a field declared without
    :func:`setting`)."""
    profile: bool = False
    default_source: str = DEFAULT


_SPEC: Final = "incidentkit.setting"
"""The field metadata key that holds a setting's :class:`Spec`."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()
"""No default: a setting that neither the parameters nor the profile give is an error."""


def setting(
    kind: Kind[T],
    *,
    default: T | _Required | None = REQUIRED,
    profile: bool = False,
    default_source: str = DEFAULT,
) -> T:
    """A field of a flow's settings: a notebook parameter of ``kind``, else (``profile``) the
    key of that name in the app's ``[apps.<app>]`` profile, else ``default`` (said as
    ``default_source``)."""
    spec = {_SPEC: Spec(kind, profile, default_source)}
    if isinstance(default, _Required):
        return cast(T, field(metadata=spec))
    if isinstance(default, Mapping):  # a dataclass default must not be mutable
        return cast(T, field(default_factory=partial(dict, default), metadata=spec))
    return cast(T, field(default=default, metadata=spec))


@dataclass(frozen=True, kw_only=True)
class FlowSettings:
    """A flow's resolved settings: the app it sweeps, each setting (the fields of the flow's
    subclass: declared with :func:`setting`, else found by the flow's setup and given to
    :func:`resolve` in :attr:`Found.more`), and where each came from.

    ``sources`` says, per name, "parameter" (given to the notebook), "[apps.<app>]" (the
    manifest's profile), "default" (or the field's words for it), or how the setup found it.
    Findings (:meth:`as_dict`) and the notebook (:meth:`table`) show both.
    """

    profiles: ClassVar[tuple[type[FlowSettings], ...]] = ()
    """Other settings the flow resolves from each app's profile (the triage card's)."""

    app_name: str
    sources: Mapping[str, str] = field(repr=False, compare=False)

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """Each setting's :class:`Spec` by name, in the order findings record them."""
        return {f.name: _spec(f) for f in fields(cls) if f.name not in _OWN}

    @classmethod
    def profile_keys(cls) -> tuple[str, ...]:
        """The ``[apps.<app>]`` keys the flow reads: its settings' and :attr:`profiles`'."""
        own = [name for name, spec in cls.specs().items() if spec.profile]
        return tuple(dict.fromkeys([*own, *(k for p in cls.profiles for k in p.profile_keys())]))

    def as_dict(self) -> dict[str, object]:
        """The values with the app first, as findings.json records them (lists, not tuples)."""
        return {
            "app_name": self.app_name,
            **{name: _recorded(getattr(self, name)) for name in self.specs()},
        }

    def table(self) -> pd.DataFrame:
        """One row per setting, for the notebook: name, value, from where."""
        rows = [(name, value, self.sources[name]) for name, value in self.as_dict().items()]
        return pd.DataFrame(rows, columns=["setting", "value", "from"]).astype({"value": object})


_OWN = frozenset(("app_name", "sources"))
"""The fields every flow's settings have: the app and where each setting came from."""
_FOUND = Spec(None)


def _spec(f: Field[Any]) -> Spec:
    spec = f.metadata.get(_SPEC, _FOUND)
    assert isinstance(spec, Spec)
    return spec


def _recorded(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    return dict(value) if isinstance(value, Mapping) else value


@dataclass(frozen=True)
class Found:
    """What a flow's setup found before its settings: the flow, the app (:attr:`app_from`:
    how), the moment judged, and other values it found itself, each with where it came from."""

    flow: str
    app: str
    app_from: str
    as_of: pd.Timestamp | None = None
    """None: nothing judged (an app's profile alone)."""
    as_of_from: str = ""
    more: Mapping[str, tuple[object, str]] = field(default_factory=dict)

    def values(self) -> dict[str, tuple[object, str]]:
        """Each value found by name, with where it came from."""
        judged = {} if self.as_of is None else {"as_of": (self.as_of, self.as_of_from)}
        return {**judged, **self.more}


def resolve(cls: type[S], evidence: Evidence, found: Found, /, **given: object) -> S:
    """The settings ``cls`` declares for ``found.app``: each field declared without
    :func:`setting` from ``found``; each other one from its parameter in ``given`` (one left
    out, empty or that checks out empty gives nothing), else the app's profile, else its
    default, else a ParameterError naming the key and its section. Fields resolve in their
    order (a later one's check may read an earlier one)."""
    unknown = sorted(set(given) - set(cls.specs()))
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}")
    profile = evidence.manifest.apps.get(found.app, {})
    known = found.values()
    values: dict[str, Any] = {}
    sources = {"app_name": found.app_from}
    for each in fields(cls):
        if each.name in _OWN:
            continue
        name, spec = each.name, _spec(each)
        if spec.kind is None:
            values[name], sources[name] = known[name]
            continue
        kind, default, raw = spec.kind, _default(each), given.get(name)
        if name in given and kind.given(raw, default):
            value = kind.coerce(name, raw, values)
            if kind.given(value, default):
                values[name], sources[name] = value, PARAMETER
                continue
        if spec.profile and name in profile:
            values[name] = kind.coerce(name, profile[name], values)
            sources[name] = f"[apps.{found.app}]"
        elif default is not REQUIRED:
            values[name], sources[name] = default, spec.default_source
        else:
            raise _missing(found.flow, found.app, name, raw, in_profile=spec.profile)
    return cls(app_name=found.app, sources=sources, **values)


def _default(f: Field[Any]) -> object:
    if f.default is not MISSING:
        return f.default
    return REQUIRED if f.default_factory is MISSING else f.default_factory()


def _missing(flow: str, app: str, name: str, given: object, *, in_profile: bool) -> ParameterError:
    if not in_profile:
        return ParameterError(f"the {flow} flow needs {name}", value=given, fix=f"give -p {name}")
    from incidentkit.manifest import PROFILE_KEYS

    return ParameterError(
        f"the {flow} flow needs {name} for app {app!r}, and neither the parameters nor the "
        f"manifest's [apps.{app}] profile give it",
        value=given,
        fix=f"add {name} to [apps.{app}] in the manifest"
        f"{f' ({PROFILE_KEYS[name]})' if name in PROFILE_KEYS else ''}, or give -p {name} ...",
    )


BASELINE = WindowBefore()
"""The ``baseline`` setting of a flow that compares with the days before."""
BASELINE_ENGINE = Flag(
    fix="give -p baseline_engine true (where the data lives) or false (load into pandas)"
)
"""The ``baseline_engine`` setting: compute the baseline where the data lives, else in pandas."""
