"""The kit's own outputs, mutated, fed back to the commands that read them: ``postmortem`` and
``actions`` end with a draft, an export, or one of the kit's errors (exit 0, 2 or 3), never a
foreign exception.

The documents are real: ``incidentkit run all`` on the bundled crash_recovery incident (the
orphans, latency, runaway and overview flows, and its ``summary.json``), plus the
vanished_state and session flows' findings from the vanished_state incident: the run is the
demo's (made once per test process), copied once for this module. Each example changes one
document (any field, to any JSON value, removed, added to, or the bytes cut short), runs each
command's function (only an ``IncidentkitError`` may escape it) and then the command line
(``incidentkit.cli.main``) for its exit code, and puts the document back.

A document that still fits its schema (only values the schema leaves open changed: row values,
parameters, counters, texts, times) must give a draft, and the draft rendered as HTML by a
Markdown renderer that keeps raw HTML holds no element or attribute of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import mistune
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.cli import main
from incidentkit.demo import demo_packs, pack_parameters
from incidentkit.errors import IncidentkitError
from incidentkit.flows import session, vanished_state
from incidentkit.flows.orphans.export import actions_command
from incidentkit.postmortem import postmortem_command

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
pytestmark = [pytest.mark.notebook, pytest.mark.xdist_group("demo")]  # shares the demo's run
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXITS = {0, 2, 3}
"""Clean, and the kit's errors: evidence incomplete (a ``SourceError``), usage (the others)."""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, demo_out: Path) -> Path:
    """A ``run all`` folder of crash_recovery, with vanished_state/ and session/ findings from
    the vanished_state incident beside its flows. The run is the demo's (conftest's
    ``demo_out``: ``run all --evidence fixtures/crash_recovery -p app_name invoicing``),
    copied, as the examples change its documents."""
    default = demo_packs(FIXTURES).apps.get("crash_recovery")
    assert pack_parameters(FIXTURES / "crash_recovery", default) == {"app_name": "invoicing"}
    out = Path(
        shutil.copytree(demo_out / "crash_recovery", tmp_path_factory.mktemp("fuzz") / "out")
    )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["exit_code"] == 1  # ACTION_NEEDED: orphans and the latency cliff
    pack = FIXTURES / "vanished_state"
    sid = json.loads((pack / "truth.json").read_text(encoding="utf-8"))["expected"]["session_id"]
    incident, config = vanished_state.setup(pack, session_id=sid)
    report = vanished_state.triage(incident, config)
    (out / "vanished_state").mkdir()
    vanished_state.findings(report, incident, config).write(out / "vanished_state/findings.json")
    incident, config = session.setup(pack, session_id=sid)
    (out / "session").mkdir()
    session.findings(session.triage(incident, config), incident, config).write(
        out / "session/findings.json"
    )
    return out


def _documents(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.glob("*/findings.json"))


@contextlib.contextmanager
def _changed(path: Path, text: str | bytes) -> Iterator[None]:
    """``path`` holding ``text`` for the block, then its own bytes again."""
    original = path.read_bytes()
    try:
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        yield
    finally:
        path.write_bytes(original)


COMMANDS: list[tuple[list[str], Callable[[Path], str]]] = [
    (["postmortem", "--format", "md"], lambda out: postmortem_command(out, fmt="md")),
    (["postmortem", "--format", "html"], lambda out: postmortem_command(out, fmt="html")),
    (
        ["actions", "--kind", "REDRIVE", "--format", "csv"],
        lambda out: actions_command(out, kind="REDRIVE", fmt="csv"),
    ),
    (
        ["actions", "--kind", "PARK", "--format", "json"],
        lambda out: actions_command(out, kind="PARK", fmt="json"),
    ),
]


def _run(out: Path, words: list[str], call: Callable[[Path], str]) -> tuple[int, str]:
    """The function's result (only the kit's errors may escape it) and the command line's exit
    code, which must agree with it."""
    try:
        text, expected = call(out), 0
    except IncidentkitError as err:
        text, expected = str(err), err.exit_code
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main([words[0], str(out), *words[1:]])
    assert code in EXITS and code == expected, (words, code, text[:300])
    return code, text


# ---------------------------------------------------------------------------- any mutation

MARKUP = [
    "<img src=x onerror=alert(1)>",
    "</title><script>alert(1)</script>",
    "a`<b>x</b>`",
    "x``<i>y</i>`",
    "[a](javascript:alert(1))",
    "<javascript:alert(1)>",
    "x\n\n<div>y</div>",
]
"""Text that is markup in Markdown unless the draft escapes it."""
HOSTILE = [
    *MARKUP,
    "=HYPERLINK(1)",
    "-1+1",
    "../../etc/passwd",
    "2026-11-29T03:00:00",
    "2026-13-45T99:99:99Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "2262-04-11T23:47:16.854775807Z",
    "now",
    "PRESENT",
    "REDRIVE",
    "alert on it",
    "CRITICAL",
    "ACTION_NEEDED",
    "orphans/crash-loops",
    "run/error",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(HOSTILE)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value (of a list, its first three items)."""
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for n, item in enumerate(value[:3]):
            yield from _paths(item, (*at, n))


def _mutate(data: st.DataObject, document: Any) -> Any:
    """One change at a drawn place: a new value, removed, or a key or item added."""
    place = data.draw(st.sampled_from(list(_paths(document))), label="place")
    if not place:
        return data.draw(values, label="whole document")
    parent = document
    for key in place[:-1]:
        parent = parent[key]
    how = data.draw(st.sampled_from(["replace", "remove", "add"]), label="how")
    target = parent[place[-1]]
    if how == "remove":
        del parent[place[-1]]
    elif how == "add" and isinstance(target, dict):
        target[data.draw(st.text(max_size=8) | st.sampled_from(sorted(target) or ["x"]))] = (
            data.draw(values)
        )
    elif how == "add" and isinstance(target, list):
        target.append(data.draw(values if not target else st.just(target[0]) | values))
    else:
        parent[place[-1]] = data.draw(values, label="value")
    return document


@PROPERTY
@given(data=st.data())
def test_any_mutation_of_an_output_ends_in_a_draft_or_the_kit_s_error(
    outputs: Path, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from([*_documents(outputs), "summary.json"]), label="document")
    path = outputs / name
    original = path.read_text(encoding="utf-8")
    if data.draw(st.integers(0, 9), label="cut short unless") == 0:
        raw = original.encode("utf-8")
        text: str | bytes = raw[: data.draw(st.integers(0, len(raw) - 1), label="length")]
    else:
        document = json.loads(original)
        for _ in range(data.draw(st.integers(1, 3), label="changes")):
            document = _mutate(data, document)
        text = json.dumps(document, ensure_ascii=False)
    with _changed(path, text):
        for words, call in COMMANDS:
            _, message = _run(outputs, words, call)
            if message.startswith("cannot read"):
                assert message.startswith(f"cannot read {name}")  # the error names the document


def test_a_misshapen_document_names_its_file_and_field(outputs: Path) -> None:
    path = outputs / "orphans" / "findings.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["items"][0]["rows"][0] = "not a row"
    with _changed(path, json.dumps(document)):
        for words, call in COMMANDS:
            code, message = _run(outputs, words, call)
            assert code == 3
            assert "cannot read orphans/findings.json" in message
            assert "$.items[0].rows[0]" in message
    document = json.loads((outputs / "summary.json").read_text(encoding="utf-8"))
    document["flows"]["orphans"]["exit_code"] = "1"
    with _changed(outputs / "summary.json", json.dumps(document)):
        code, message = _run(outputs, *COMMANDS[0])
    assert code == 3 and "summary.json" in message and "$.flows['orphans'].exit_code" in message


# ---------------------------------------------------------------------------- valid documents

texts = st.sampled_from(MARKUP) | st.sampled_from(HOSTILE) | st.text(max_size=24)
times = st.builds(
    lambda at, minutes: at.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat(),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(-23 * 60, 23 * 60),
) | st.datetimes(timezones=st.just(UTC)).map(lambda at: at.isoformat())
counters = st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1)


def _valid_change(data: st.DataObject, document: dict[str, Any]) -> None:
    """One change the schema allows: a row value, a parameter, a counter, a text, a time."""
    items = document["items"]
    rows = [row for item in items for row in item["rows"][:5]]
    where = data.draw(st.sampled_from(["row", "parameter", "counter", "text", "time", "count"]))
    if where == "row" and rows:
        row = data.draw(st.sampled_from(rows))
        key = data.draw(st.sampled_from(sorted(row) or ["x"]) | st.text(max_size=8))
        row[key] = data.draw(texts | values | times)
    elif where == "parameter":
        parameters = document["evidence"]["parameters"]
        key = data.draw(st.sampled_from(sorted(parameters) or ["x"]) | st.text(max_size=8))
        parameters[key] = data.draw(texts | values)
    elif where == "counter":
        summary = document["summary"]
        summary[data.draw(st.sampled_from(sorted(summary) or ["x"]) | texts)] = data.draw(counters)
    elif where == "text" and items:
        item = data.draw(st.sampled_from(items))
        item[data.draw(st.sampled_from(["title", "detail", "action"]))] = data.draw(texts)
    elif where == "time":
        evidence = document["evidence"]
        evidence["as_of"] = data.draw(st.none() | times)
        evidence["window"] = data.draw(st.none() | st.tuples(times, times).map(list))
    elif where == "count" and items:
        data.draw(st.sampled_from(items))["count"] = data.draw(st.integers(0, 2**63 - 1))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[tuple[str, str]] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.add((tag, ""))
        self.found |= {(tag, f"{name}={value}") for name, value in attrs}


DRAFT_TAGS = {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
DRAFT_TAGS |= {"code", "a", "strong", "em", "blockquote"}


@PROPERTY
@given(data=st.data())
def test_a_document_that_fits_its_schema_gives_a_draft_with_no_markup_of_its_own(
    outputs: Path, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(_documents(outputs)), label="document")
    path = outputs / name
    document = json.loads(path.read_text(encoding="utf-8"))
    for _ in range(data.draw(st.integers(1, 4), label="changes")):
        _valid_change(data, document)
    with _changed(path, json.dumps(document, ensure_ascii=False)):
        draft = postmortem_command(outputs, fmt="md")  # no error at all
        for words, call in COMMANDS[1:]:
            _run(outputs, words, call)
    parser = _Tags()
    parser.feed(mistune.create_markdown(escape=False, plugins=["table"])(draft))
    tags = {tag for tag, attribute in parser.found if not attribute}
    attributes = {(tag, attribute) for tag, attribute in parser.found if attribute}
    assert tags <= DRAFT_TAGS, tags - DRAFT_TAGS
    assert {tag for tag, _ in attributes} <= {"a"}
    assert all(re.fullmatch(r"href=[\w./-]+", a) for _, a in attributes), attributes  # relative


def test_the_outputs_are_what_the_commands_read(outputs: Path) -> None:
    """The documents the fuzz starts from give a draft and an export as they are."""
    assert _documents(outputs) == [
        f"{flow}/findings.json"
        for flow in sorted(
            ("latency_cliff", "orphans", "overview", "runaway", "session", "vanished_state")
        )
    ]
    for words, call in COMMANDS:
        assert _run(outputs, words, call)[0] == 0
