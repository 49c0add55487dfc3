"""A flow's settings are a frozen dataclass in its folder: its fields say each setting's kind,
whether the app's profile gives it and its default, and one resolver builds any flow's settings
with where each value came from. The flow's profile keys come from them, and each is a key the
manifest's ``[apps.<app>]`` schema knows."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence, open_evidence
from incidentkit.flows import FLOWS
from incidentkit.flows.settings import (
    BASELINE,
    BASELINE_ENGINE,
    Choice,
    Duration,
    FlowSettings,
    Found,
    Names,
    OneOrMore,
    Positive,
    Seconds,
    Table,
    Whole,
    resolve,
    setting,
)
from incidentkit.manifest import PROFILE_KEYS

ROOT = Path(__file__).resolve().parents[2]
CRASH = ROOT / "fixtures" / "crash_recovery"
AS_OF = pd.Timestamp("2026-11-29T03:05:00Z")

PROFILE_KEYS_READ = {
    "orphans": ("terminal_agent", "key_templates", "attempts_cap"),
    "latency_cliff": ("client_timeout_s",),
    "runaway": ("max_llm_calls", "loop_exit_keys"),
    "vanished_state": (),
    "session": (),
    "overview": (
        *("client_timeout_s", "max_llm_calls", "loop_exit_keys"),
        *("terminal_agent", "key_templates", "attempts_cap"),
    ),
}
"""What each flow reads of an app's profile (the card: every check's)."""


def _settings_classes() -> list[type[FlowSettings]]:
    classes: list[type[FlowSettings]] = []
    for flow in FLOWS.values():
        assert flow.settings is not None, flow.name
        classes += [flow.settings, *flow.settings.profiles]
    return classes


@pytest.mark.parametrize("cls", _settings_classes(), ids=lambda cls: cls.__name__)
def test_every_profile_setting_is_a_key_of_the_manifest_s_profiles(cls: type[FlowSettings]) -> None:
    declared = [name for name, spec in cls.specs().items() if spec.profile]
    assert set(declared) <= set(PROFILE_KEYS), set(declared) - set(PROFILE_KEYS)


@pytest.mark.parametrize("name", list(FLOWS))
def test_a_flow_s_profile_keys_are_its_settings(name: str) -> None:
    flow = FLOWS[name]
    assert flow.settings is not None
    assert flow.profile_keys == flow.settings.profile_keys() == PROFILE_KEYS_READ[name]
    assert flow.settings.__module__ == f"incidentkit.flows.{name}.settings"


@pytest.mark.parametrize("name", list(FLOWS))
def test_setup_takes_the_settings_it_declares(name: str) -> None:
    """Each parameter of a flow's setup is one of its settings (or the app), and each setting
    the parameters can give is one of setup's parameters."""
    setup = import_module(f"incidentkit.flows.{name}.steps").setup
    parameters = set(inspect.signature(setup).parameters) - {"evidence"}
    cls = FLOWS[name].settings
    assert cls is not None
    specs = cls.specs()
    assert parameters - {"app_name"} <= set(specs)
    assert {field for field, spec in specs.items() if spec.kind is not None} <= parameters


# ------------------------------------------------------------------------------- the resolver


@dataclass(frozen=True, kw_only=True)
class ToySettings(FlowSettings):
    as_of: pd.Timestamp
    terminal_agent: str | tuple[str, ...] = setting(OneOrMore(fix="name it"), profile=True)
    key_templates: Mapping[str, str] = setting(Table(fix="key it"), profile=True, default={})
    client_timeout_s: float = setting(Seconds(fix="time it"), profile=True, default=60.0)
    loop_exit_keys: tuple[str, ...] = setting(
        Names(fix="list them"), profile=True, default=(), default_source="none: no key"
    )
    repeats: int = setting(Whole(2, fix="count them"), default=3)
    baseline: str | None = setting(BASELINE, default=None)
    baseline_engine: bool = setting(BASELINE_ENGINE, default=True)


@pytest.fixture(scope="module")
def crash() -> Evidence:
    return open_evidence(CRASH)


def _toy(evidence: Evidence, app: str = "invoicing", **given: Any) -> ToySettings:
    found = Found("toy", app, "parameter", AS_OF, "the window's end")
    return resolve(ToySettings, evidence, found, **given)


def test_a_parameter_wins_then_the_profile_then_the_default(crash: Evidence) -> None:
    settings = _toy(crash, client_timeout_s=30, repeats=5)
    assert settings.terminal_agent == "notify_agent"
    assert settings.key_templates == {"sendInvoice": "send-invoice:{invoiceId}"}
    assert (settings.client_timeout_s, settings.repeats, settings.loop_exit_keys) == (30.0, 5, ())
    assert settings.sources == {
        "app_name": "parameter",
        "as_of": "the window's end",
        "terminal_agent": "[apps.invoicing]",
        "key_templates": "[apps.invoicing]",
        "client_timeout_s": "parameter",
        "loop_exit_keys": "none: no key",
        "repeats": "parameter",
        "baseline": "default",
        "baseline_engine": "default",
    }
    support = _toy(crash, "support")
    assert support.loop_exit_keys == ("review:approved",)
    assert support.sources["client_timeout_s"] == "[apps.support]"
    assert _toy(crash).sources["client_timeout_s"] == "default"
    assert support.sources["loop_exit_keys"] == "[apps.support]"
    with pytest.raises(FrozenInstanceError):
        support.repeats = 4  # type: ignore[misc]


def test_an_empty_parameter_or_one_that_checks_out_empty_gives_nothing(crash: Evidence) -> None:
    for empty in ("", 0, None, [], {}, "  ", "[]"):
        settings = _toy(crash, "support", loop_exit_keys=empty)
        assert settings.loop_exit_keys == ("review:approved",), empty
        assert settings.sources["loop_exit_keys"] == "[apps.support]"
    given = _toy(crash, "support", loop_exit_keys='["a", " b ", "a"]')
    assert (given.loop_exit_keys, given.sources["loop_exit_keys"]) == (("a", "b"), "parameter")


def test_a_flag_is_given_unless_it_is_its_default(crash: Evidence) -> None:
    assert _toy(crash, baseline_engine=True).sources["baseline_engine"] == "default"
    off = _toy(crash, baseline_engine=False)
    assert (off.baseline_engine, off.sources["baseline_engine"]) == (False, "parameter")
    with pytest.raises(ParameterError, match=r"baseline_engine is not true or false: None\."):
        _toy(crash, baseline_engine=None)


def test_a_window_before_as_of_is_recorded_as_start_and_end(crash: Evidence) -> None:
    settings = _toy(crash, baseline="2h")
    assert settings.baseline == "2026-11-29T01:05:00+00:00/2026-11-29T03:05:00.000001+00:00"
    assert settings.sources["baseline"] == "parameter"
    assert _toy(crash, baseline=" ").sources["baseline"] == "default"


def test_a_setting_nothing_gives_names_the_key_and_the_profile(
    crash: Evidence, tmp_path: Path
) -> None:
    with pytest.raises(ParameterError) as raised:
        _toy(crash, "nowhere")
    err = raised.value
    assert err.problem == (
        "the toy flow needs terminal_agent for app 'nowhere', and neither the parameters nor "
        "the manifest's [apps.nowhere] profile give it"
    )
    assert err.fix == (
        f"add terminal_agent to [apps.nowhere] in the manifest "
        f"({PROFILE_KEYS['terminal_agent']}), or give -p terminal_agent ..."
    )
    assert _toy(crash, "nowhere", terminal_agent="a").sources["key_templates"] == "default"


def test_a_parameter_the_settings_do_not_declare_is_refused(crash: Evidence) -> None:
    with pytest.raises(TypeError, match="ToySettings has no setting retries"):
        _toy(crash, retries=3)


def test_findings_and_the_notebook_show_the_values_app_first_lists_as_lists(
    crash: Evidence,
) -> None:
    settings = _toy(crash, "travel")
    assert settings.terminal_agent == ("flights_agent", "hotels_agent")
    recorded = settings.as_dict()
    assert list(recorded) == ["app_name", *ToySettings.specs()]
    assert recorded["terminal_agent"] == ["flights_agent", "hotels_agent"]
    assert (recorded["loop_exit_keys"], recorded["key_templates"]) == ([], {})
    table = settings.table()
    assert table.columns.tolist() == ["setting", "value", "from"]
    assert table["setting"].tolist() == list(recorded)
    assert table.iloc[2].tolist() == [
        "terminal_agent",
        ["flights_agent", "hotels_agent"],
        "[apps.travel]",
    ]


# ---------------------------------------------------------------------------------- the kinds


@pytest.mark.parametrize(
    ("kind", "value", "problem"),
    [
        (Whole(1, fix="fix"), 0, "x is not a whole number of at least 1"),
        (Whole(2, fix="fix"), True, "x is not a whole number of at least 2"),
        (Whole(1, fix="fix"), 2.0, "x is not a whole number of at least 1"),
        (Positive(fix="fix"), -1.0, "x is not a positive number"),
        (Positive(fix="fix"), "3", "x is not a positive number"),
        (Seconds(fix="fix"), 0, "x is not a positive number of seconds"),
        (Duration(fix="fix"), "soon", "x is not a positive duration"),
        (Duration(fix="fix"), "-1min", "x is not a positive duration"),
        (Names(fix="fix"), [""], "x is not a list of state keys"),
        (Names(fix="fix"), '["a", 3]', "x is not a list of state keys"),
        (Names(fix="fix"), "[not json", "x is not a JSON list"),
        (Names(fix="fix"), {"a": 1}, "x is not a list of state keys"),
        (OneOrMore(fix="fix"), " ", "x is not a name or a list of names"),
        (OneOrMore(fix="fix"), [], "x is not a name or a list of names"),
        (Table(fix="fix", what="a table of key templates"), {"t": ""}, "x is not a table of key"),
        (Table(fix="fix"), ["a"], "x is not a table of texts by name"),
    ],
)
def test_a_bad_value_is_refused_with_its_name_the_value_and_the_fix(
    kind: Any, value: Any, problem: str
) -> None:
    with pytest.raises(ParameterError) as raised:
        kind.coerce("x", value)
    assert raised.value.problem.startswith(problem)
    assert raised.value.fix == "fix"


@pytest.mark.parametrize(
    ("kind", "value", "coerced"),
    [
        (Whole(1, fix=""), 7, 7),
        (Positive(fix=""), 2, 2.0),
        (Seconds(fix=""), 0.5, 0.5),
        (Duration(fix=""), " 30s ", "30s"),
        (Names(fix=""), "cart", ("cart",)),
        (Names(fix=""), ["x", " y"], ("x", "y")),
        (Names(fix=""), None, ()),
        (OneOrMore(fix=""), "agent", "agent"),
        (OneOrMore(fix=""), ["a", "b"], ("a", "b")),
        (Table(fix=""), {"t": "k:{id}"}, {"t": "k:{id}"}),
    ],
)
def test_a_good_value_is_turned_into_its_type(kind: Any, value: Any, coerced: Any) -> None:
    assert kind.coerce("x", value) == coerced


def test_a_choice_names_its_options_and_the_closest() -> None:
    kind = Choice(lambda: ("slow", "crash"), none="to take them all")
    assert kind.coerce("symptom", " Slow ") == "slow"
    assert kind.coerce("symptom", "  ") == ""
    with pytest.raises(ParameterError) as raised:
        kind.coerce("symptom", "slwo")
    assert raised.value.problem == "unknown symptom"
    assert raised.value.fix == (
        "did you mean slwo → slow? give one of slow, crash (or none, to take them all)"
    )


def test_a_window_before_as_of_needs_as_of_first() -> None:
    with pytest.raises(TypeError, match="declare as_of before it"):
        BASELINE.coerce("baseline", "1h")
    assert BASELINE.coerce("baseline", "1h", {"as_of": AS_OF}).startswith("2026-11-29T02:05")


def test_the_shared_settings_module_names_no_flow() -> None:
    tree = ast.parse((ROOT / "incidentkit" / "flows" / "settings.py").read_text(encoding="utf-8"))
    literals = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not {text for text in literals for name in FLOWS if name in text.split("/")}
