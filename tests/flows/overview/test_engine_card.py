"""The triage card computed in the engine (``card_engine``) equals the in-memory card line for
line: simulated incidents written into SQLite, PostgreSQL and MariaDB (ADK Java's event table,
ADK Python's ``events`` store), judged both ways; missing evidence is NOT_CHECKED with why;
and the engine path reads no events or ledger frame, only aggregates and flagged rows."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

import incidentkit.evidence as evidence_module
from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.flows import engine_card
from incidentkit.flows.overview import steps
from incidentkit.flows.overview.card import CHECKS
from incidentkit.flows.overview.triage import OverviewReport
from incidentkit.flows.runaway import card as runaway_card
from incidentkit.flows.runaway import counts
from incidentkit.simulate import simulate
from incidentkit.sources.registry import loader_for

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
UNREAD = ("spans", "diagnostics")
"""Sections the engine card does not read: left out of the packs compared, so both cards see
the same evidence."""
ENGINE_ONLY_IN_MEMORY = ("state-can-vanish", "growing-classes", "heap-growth")
"""Checks the engine card does not compute from the database (NOT_CHECKED, or the JVM's files)."""
COMPARED = ["app", "check", "severity", "count", "title", "flow", "evidence", "session_id"]
SCENARIO, SCALE = "healthy", 4
"""The latency incident (hangs, so flagged rows travel) at this scale: enough events that
what travels is far fewer."""
pytestmark = pytest.mark.xdist_group("engine_card")


def without_sections(pack: Path, drop: tuple[str, ...]) -> None:
    """Leave the ``drop`` sections out of the pack's manifest (the simulator wrote it: ours)."""
    manifest = pack / "evidence.toml"
    kept, skipping = [], False
    for text in manifest.read_text().splitlines():
        header = re.match(r"^\[([^\]]+)\]$", text)
        if header:
            skipping = header.group(1) in drop
        if not skipping:
            kept.append(text)
    manifest.write_text("\n".join(kept) + "\n")


@contextmanager
def opened_card(pack: Path) -> Iterator[engine_card.EngineCardContext]:
    """The engine card's context over ``pack`` as the overview opens it (``card_engine =
    "yes"``, every app of the fleet)."""
    incident, settings = steps.setup(pack, card_engine="yes")
    whole = incident.narrowed(replace(incident.filters, app_name=None))
    with engine_card.opened(
        apps=settings.apps,
        filters=whole.filters,
        as_of=settings.as_of,
        profiles={app: steps.profile_of(incident, app) for app in settings.apps},
        sources=incident.sources,
        environ=incident.environ,
    ) as context:
        yield context


def written(
    scenario: str,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    events_format: str = "adk-java",
) -> Path:
    pack = simulate(scenario, tmp_path / scenario, into=url, events_format=events_format)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    without_sections(pack, UNREAD)
    return pack


def both_cards(pack: Path) -> tuple[pd.DataFrame, pd.DataFrame, OverviewReport]:
    """The engine card and the in-memory card of ``pack`` (every app), and the engine report."""
    incident, settings = steps.setup(pack, card_engine="yes")
    report = steps.triage(incident, settings)
    memory_incident, memory_settings = steps.setup(pack, card_engine="no")
    memory = steps.triage(memory_incident, memory_settings).card
    return report.card, memory, report


def assert_equal_cards(engine: pd.DataFrame, memory: pd.DataFrame) -> None:
    """Line for line equal on every check the engine computes; the others NOT_CHECKED."""

    def keyed(card: pd.DataFrame) -> pd.DataFrame:
        kept = card.loc[~card["check"].isin(ENGINE_ONLY_IN_MEMORY), COMPARED].astype(object)
        kept = kept.where(kept.notna(), None)  # a missing session is None in both
        return kept.sort_values(["app", "check"], kind="stable").reset_index(drop=True)

    pd.testing.assert_frame_equal(keyed(engine), keyed(memory))
    state = engine.loc[engine["check"].eq("state-can-vanish")]
    assert len(state) and state["severity"].eq("NOT_CHECKED").all()
    assert state["title"].str.contains("not computed in the engine").all()


DATABASES = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind the engine card queries."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'incident.sqlite'}"
    url: str = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url")
    return url


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "needs_a_look"),
    [
        ("runaway", "over-call-limit"),
        ("latency_cliff", "open-past-timeout"),
        ("crash_recovery", "orphans"),
        ("vanished_state", "overlapping-invocations"),
    ],
)
def test_the_engine_card_equals_the_in_memory_card(
    scenario: str,
    needs_a_look: str,
    database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pack = written(scenario, database, tmp_path, monkeypatch)
    engine, memory, report = both_cards(pack)
    assert_equal_cards(engine, memory)
    flagged = engine.loc[engine["check"].eq(needs_a_look)]
    assert flagged["severity"].isin(["CRITICAL", "WARNING"]).any()  # the incident's own line
    assert report.computed.startswith("computed in ")
    assert " over adk_event, agent_run" in report.computed
    judged = ~engine["check"].isin(ENGINE_ONLY_IN_MEMORY) & engine["severity"].ne("NOT_CHECKED")
    computed = engine.loc[judged, "detail"]
    assert computed.str.startswith("computed in ").all()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["runaway", "crash_recovery"])
def test_adk_pythons_store_gives_the_in_memory_card(
    scenario: str, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = written(scenario, database, tmp_path, monkeypatch, events_format="adk-python")
    engine, memory, report = both_cards(pack)
    assert_equal_cards(engine, memory)
    assert " over events, agent_run" in report.computed


@pytest.mark.slow
def test_the_engine_reads_no_event_document_only_aggregates_and_flagged_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No frame of the evidence is loaded; the queries return no event document column; the
    rows that travel are far fewer than the events; the loader reads only flagged sessions."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    pack = simulate(SCENARIO, tmp_path / "pack", into=url, scale=SCALE)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    without_sections(pack, UNREAD)
    read: list[str] = []
    real = loader_for

    def spy(section: str, fmt: str | None = None) -> Callable[..., object]:
        read.append(section)
        return real(section, fmt)

    monkeypatch.setattr(evidence_module, "loader_for", spy)
    with opened_card(pack) as context:
        lines = engine_card.engine_lines(context)
        travelled = context.travelled
    incident, settings = steps.setup(pack, card_engine="yes")
    whole = incident.narrowed(replace(incident.filters, app_name=None))
    report = steps.triage(incident, settings)
    steps.findings(report, incident, settings)
    assert read == []  # setup, the card and the findings loaded no section of the evidence
    assert set(lines["check"]) == set(CHECKS)
    assert not travelled.columns & {"event", "event_data", "request"}
    monkeypatch.setattr(evidence_module, "loader_for", real)
    full = Evidence(incident.manifest, filters=whole.filters, environ=incident.environ)
    events, runs = len(full.events), len(full.runs)
    # one row per run (the cliff's series), aggregates, flagged invocations: never per event
    assert travelled.rows < events / 2
    # flagged invocations only: the open runs' sessions, and the loop search of the runaway
    # check over the invocations at the healthy p99 count and above (many, in traffic whose
    # counts take few values: docs/engine-card.md)
    assert 0 < travelled.loaded.get("events", 0) < events
    assert travelled.loaded.get("ledger", 0) < runs / 10


@pytest.mark.slow
def test_evidence_the_engine_does_not_hold_is_not_checked_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger kept as a CSV export beside events in a database: ``auto`` loads the frames;
    ``yes`` says which checks the ledger feeds cannot be computed, and why."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    pack = written("crash_recovery", url, tmp_path, monkeypatch)
    shutil.copy(FIXTURES / "crash_recovery" / "ledger.csv", pack / "ledger.csv")
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    text = re.sub(
        r"\[ledger\]\n(?:[^\[\n].*\n)*", '[ledger]\npath = "ledger.csv"\nformat = "csv"\n\n', text
    )
    manifest.write_text(text)
    incident, settings = steps.setup(pack)
    assert settings.card_engine == "auto"
    assert not engine_card.engine_chosen("auto", incident.sources)
    incident, settings = steps.setup(pack, card_engine="yes")
    card = steps.triage(incident, settings).card
    for check in ("orphans", "open-past-timeout", "latency-cliff", "quiet-errors"):
        found = card.loc[card["check"].eq(check)]
        assert len(found) and found["severity"].eq("NOT_CHECKED").all(), check
        assert found["title"].str.contains("ledger is kept elsewhere").all(), check
    calls = card.loc[card["check"].eq("over-call-limit")]  # the events alone feed it
    assert not calls["severity"].eq("NOT_CHECKED").all()


def test_auto_chooses_the_engine_only_for_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = steps.setup(FIXTURES / "runaway")[0].sources  # JSONL events, CSV ledger
    assert not engine_card.engine_chosen("auto", files)
    assert engine_card.engine_chosen("yes", files) and not engine_card.engine_chosen("no", files)
    pack = written("runaway", f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, monkeypatch)
    incident, settings = steps.setup(pack)  # an incident's events: pandas checks every line
    assert not settings.in_engine
    assert settings.sources["in_engine"].startswith("auto: fewer than 500,000 events")
    monkeypatch.setattr(engine_card, "DATABASE_AUTO_EVENTS", 100)  # as if it were a fleet's
    incident, settings = steps.setup(pack)
    assert settings.in_engine
    assert (
        settings.sources["in_engine"]
        == "auto: at least 100 events in the window, in their database"
    )
    assert steps.triage(incident, settings).computed.startswith("computed in SQLite")
    with pytest.raises(ParameterError, match="unknown card_engine"):
        steps.setup(pack, card_engine="sometimes")


def test_without_a_database_every_engine_check_says_why(tmp_path: Path) -> None:
    """The bundled JSONL/CSV incident with card_engine = yes: the events' own check is
    computed by DuckDB over the JSON lines; every check that needs the CSV ledger (or every
    event in memory) is NOT_CHECKED naming why."""
    incident, settings = steps.setup(FIXTURES / "runaway", card_engine="yes")
    card = steps.triage(incident, settings).card
    over_files = card["check"].eq("over-call-limit")
    assert card.loc[over_files, "detail"].str.startswith("computed in DuckDB over").all()
    rest = card.loc[~over_files]
    assert over_files.any() and len(rest) and rest["severity"].eq("NOT_CHECKED").all()
    assert rest["title"].str.contains("kept elsewhere|not computed").all()
    assert steps.coverage(incident, settings).startswith("Coverage not measured")


BUDGET = 5
"""The loop search's invocation budget in the bounded test: far fewer than share a top count."""


def _runaway_lines(pack: Path) -> tuple[pd.DataFrame, engine_card.Travelled]:
    """The engine's over-call-limit lines of every app of ``pack``, and what travelled."""
    with opened_card(pack) as context:
        return pd.DataFrame(runaway_card.engine_lines(context)), context.travelled


@pytest.mark.slow
def test_the_loop_search_reads_a_bounded_number_of_invocations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Healthy traffic whose model calls take one value per app (every invocation at the p99
    count): with a budget of :data:`BUDGET` invocations, the loader reads the events of at most
    that many per app, the line is the same, and its detail says how many were left unread."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    pack = simulate(SCENARIO, tmp_path / "pack", into=url, scale=SCALE)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    without_sections(pack, UNREAD)
    whole, unbounded = _runaway_lines(pack)
    monkeypatch.setattr(runaway_card, "LOOP_INVOCATIONS", BUDGET)
    bounded, travelled = _runaway_lines(pack)
    pd.testing.assert_frame_equal(
        bounded.drop(columns="detail"), whole.drop(columns="detail"), check_like=True
    )
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        per = (
            sa.select(sa.column("app_name"), sa.column("invocation_id"), sa.func.count().label("n"))
            .select_from(sa.table("adk_event"))
            .group_by(sa.column("app_name"), sa.column("invocation_id"))
            .subquery()
        )
        most = conn.execute(sa.select(sa.func.max(per.c.n))).scalar_one()
    engine.dispose()
    assert 0 < travelled.loaded["events"] <= len(bounded) * BUDGET * most
    assert travelled.loaded["events"] < unbounded.loaded["events"]
    # the apps whose every invocation makes the same number of calls say how many were left
    memory = steps.setup(pack, card_engine="no")[0]
    events = memory.events
    counted = counts.from_events(events, memory.responses)
    apps = events.drop_duplicates("invocation_id").set_index("invocation_id")["app_name"]
    calls = counted.assign(app=counted["invocation_id"].map(apps)).groupby("app")["model_calls"]
    said = 0
    for app, line in bounded.set_index("app").iterrows():
        mine = calls.get_group(app)
        if mine.min() == mine.max() and len(mine) > BUDGET:
            said += 1
            assert f"in the {BUDGET} invocations with the most model calls; " in line["detail"]
            assert f"; {len(mine) - BUDGET} more at " in line["detail"]
    assert said


ODD_VALUES: tuple[object, ...] = (None, "null", "", [], "[]", {}, [{"text": "x"}], 0, 1, True, "x")
"""JSON values a field may hold whose text is, or looks like, an empty or null one."""
FLAG_FIELDS: tuple[tuple[str, ...], ...] = (
    ("content", "parts"),
    ("longRunningToolIds",),
    ("usageMetadata",),
    ("actions", "compaction"),
    ("actions", "agentState"),
    ("actions", "rewindBeforeInvocationId"),
    ("actions", "endOfAgent"),
    ("actions", "skipSummarization"),
    ("partial",),
)


def _odd_events() -> list[dict[str, object]]:
    """Events with one field at each odd value (the others plain), bare and with parts."""
    docs: list[dict[str, object]] = []
    for path in FLAG_FIELDS:
        for value in ODD_VALUES:
            for parts in (None, [{"text": "hi"}], [{"functionCall": {"name": "f"}}]):
                doc: dict[str, object] = {"author": "agent"}
                if parts is not None:
                    doc["content"] = {"parts": parts}
                inner = doc
                for key in path[:-1]:
                    inner = inner.setdefault(key, {})  # type: ignore[assignment]
                inner[path[-1]] = value
                docs.append(doc)
    return docs


def _flag_rows(url: str, docs: list[dict[str, object]]) -> list[tuple[int, ...]]:
    """Each event's flags (``queries.event_flags``) as the engine at ``url`` evaluates them."""
    import json

    from incidentkit.baselines import queries
    from incidentkit.manifest import SourceSpec

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    doc_type = "jsonb" if engine.dialect.name == "postgresql" else "text"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE adk_event (event_id varchar(64) PRIMARY KEY, app_name varchar(64), "
            "user_id varchar(64), session_id varchar(64), invocation_id varchar(64), "
            f"ts timestamp, event {doc_type})"
        )
        rows = [
            {
                "id": f"e{n:04d}",
                "ts": pd.Timestamp("2026-01-01").to_pydatetime(),
                "doc": json.dumps(d),
            }
            for n, d in enumerate(docs)
        ]
        cast = "CAST(:doc AS jsonb)" if doc_type == "jsonb" else ":doc"
        conn.execute(
            sa.text("INSERT INTO adk_event VALUES (:id, 'app', 'u', 's', 'i', :ts, " + cast + ")"),
            rows,
        )
    with engine.connect() as conn:
        table = queries.event_table(conn, SourceSpec(section="events"), what="flags test")
        flags = queries.event_flags(conn, table)
        names = ("model", "final", "error", "refused", "marker")
        statement = sa.select(*(sa.case((flags[n], 1), else_=0).label(n) for n in names)).order_by(
            table.column("event_id")
        )
        found = [tuple(int(v) for v in row) for row in conn.execute(statement)]
    engine.dispose()
    return found


@pytest.mark.postgres
def test_postgresql_flags_events_as_every_engine_does(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL tests an object or array field as ``jsonb`` (never as text, for speed):
    each event's flags equal those SQLite's text tests give, whatever odd value a field
    holds (null, the string "null", "", [], "[]", an object, a number, true)."""
    docs = _odd_events()
    in_pg = _flag_rows(pg_url, docs)
    in_sqlite = _flag_rows(f"sqlite:///{tmp_path / 'flags.sqlite'}", docs)
    assert len(in_pg) == len(docs) and any(r[4] for r in in_pg) and any(r[0] for r in in_pg)
    differ = [
        (docs[n], a, b) for n, (a, b) in enumerate(zip(in_pg, in_sqlite, strict=True)) if a != b
    ]
    assert not differ


def test_a_symptoms_first_check_not_run_is_never_clean(tmp_path: Path) -> None:
    """Reported: it crashed. With the ledger kept as a file the engine card looks for no
    orphan: the card must not say nothing needs action (it would point the wrong way)."""
    incident, settings = steps.setup(
        FIXTURES / "crash_recovery", card_engine="yes", symptom="crash"
    )
    report = steps.triage(incident, settings)
    orphans = report.card.loc[report.card["check"].eq("orphans"), "severity"]
    assert len(orphans) and orphans.eq("NOT_CHECKED").all()
    found = steps.findings(report, incident, settings)
    assert found.verdict.value == "INCOMPLETE_EVIDENCE"
    card = next(item for item in found.items if item.id == "overview/card")
    assert card.title.startswith("the orphans check, the first for 'crash', did not run")
    incident, settings = steps.setup(FIXTURES / "crash_recovery", card_engine="no", symptom="crash")
    assert steps.findings(steps.triage(incident, settings), incident, settings).verdict.value != (
        "INCOMPLETE_EVIDENCE"
    )  # in pandas the ledger is read and the orphans looked for
