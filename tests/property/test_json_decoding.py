"""The kit's JSON decoder (msgspec first, Python's json for what msgspec refuses) gives exactly
what ``json.loads`` gives, and fails where it fails; it also refuses half a UTF-16 pair, which
``json.loads`` keeps in a str that UTF-8 cannot hold."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.sources.json_text import JSON_ERRORS, loads


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _python(text: str) -> tuple[str, Any]:
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except JSON_ERRORS as err:
        return "error", type(err).__name__
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "error", "ValueError"
    return "ok", value


def _kit(text: str) -> tuple[str, Any]:
    try:
        return "ok", loads(text)
    except JSON_ERRORS as err:
        return "error", type(err).__name__


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
fragments = st.sampled_from(
    [
        '{"a": NaN}',
        "[Infinity]",
        '"\\ud800"',
        '{"a": 1, "a": 2}',
        "[" * 2000 + "]" * 2000,
        '{"n": 123456789012345678901234567890}',
        '{"t": 1.5e400}',
        "-0",
        "1e-400",
        '{"a":1}x',
        '{"a": "\\u0000"}',
        "",
        "   ",
        '{"a": -9223372036854775809}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_decoding_any_json_value_equals_pythons(value: Any, spaced: bool) -> None:
    text = json.dumps(value, indent=1 if spaced else None, ensure_ascii=spaced)
    assert _kit(text) == _python(text)
    kind, decoded = _kit(text)
    assert kind == "ok" and type(decoded) is type(json.loads(text))


@settings(max_examples=100, deadline=None)
@given(fragments | st.text(max_size=40))
def test_odd_and_malformed_text_is_read_or_refused_as_python_does(text: str) -> None:
    assert _kit(text) == _python(text)
