"""The one error hierarchy: messages say what failed, the value and what to do, in words a
person reads (no escaped quotes), and notebooks show the message, not the library's frames."""

from __future__ import annotations

import pytest

from incidentkit.errors import IncidentkitError, SourceError, shown


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "'plain'"),
        ("it's", '"it\'s"'),
        (
            "(1045, \"Access denied for user 'root'@'localhost'\")",
            "`(1045, \"Access denied for user 'root'@'localhost'\")`",
        ),
        ("two\nlines", "'two\\nlines'"),  # a control character is shown escaped
        (["a", "b"], "['a', 'b']"),
        (3, "3"),
    ],
)
def test_a_value_is_quoted_without_escaping_its_quotes(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_a_message_is_problem_value_and_fix() -> None:
    err = SourceError("cannot connect", value="user 'root'@'db'", fix="check the grant")
    assert str(err) == "cannot connect: \"user 'root'@'db'\". check the grant"
    assert IncidentkitError("no value").problem == str(IncidentkitError("no value"))


def test_a_notebook_shows_the_message_not_the_frames() -> None:
    err = SourceError("cannot connect", value="db", fix="check the grant")
    assert err._render_traceback_() == ["SourceError: cannot connect: 'db'. check the grant"]
