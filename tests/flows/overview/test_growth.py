from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.errors import SchemaError
from incidentkit.flows.overview.growth import (
    ADVICE,
    COLUMNS,
    Culprit,
    culprits,
    growing_classes,
    growth_headline,
    leaking_classes,
    why_no_growth,
)
from incidentkit.frames import build
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.jvm import histograms as loader

ROOT = Path(__file__).resolve().parents[3]
PACK = ROOT / "fixtures" / "slow_death"
JVM = ROOT / "tests" / "data" / "histograms" / "jvm-runner-cache"
HOURS = ("2026-11-29T00:00:00Z", "2026-11-29T01:00:00Z", "2026-11-29T02:00:00Z")


def histograms(
    counts: dict[str, tuple[int, ...]], *, size: int = 10, times: bool = True
) -> pd.DataFrame:
    """A class_histograms frame: per class, its instances in each histogram (0 = not listed)."""
    n = len(next(iter(counts.values())))
    records = [
        {
            "histogram": f"h{k}.txt",
            "taken_at": pd.Timestamp(HOURS[k]) if times else pd.NaT,
            "rank": rank,
            "class": name,
            "instances": per[k],
            "bytes": per[k] * size,
        }
        for k in range(n)
        for rank, (name, per) in enumerate(counts.items(), start=1)
        if per[k]
    ]
    return build("class_histograms", records)


def test_classes_that_grow_are_ranked_by_byte_growth() -> None:
    got = growing_classes(
        histograms(
            {
                "com.example.Small": (10, 20, 30),
                "com.example.Big": (100, 200, 400),
                "java.lang.Thread": (50, 50, 50),  # stable
                "com.example.Shrinks": (300, 200, 100),
            }
        )
    )
    assert list(got.columns) == list(COLUMNS)
    assert got["class"].tolist() == ["com.example.Big", "com.example.Small"]
    big = got.iloc[0]
    assert (big["first_instances"], big["last_instances"], big["instances_growth"]) == (
        100,
        400,
        300,
    )
    assert (big["first_bytes"], big["last_bytes"], big["bytes_growth"]) == (1000, 4000, 3000)
    assert big["bytes_per_hour"] == 1500.0
    assert big["histograms"] == 3


def test_a_class_that_grows_then_shrinks_is_no_leak_unless_asked() -> None:
    frame = histograms({"com.example.Wave": (10, 500, 20), "com.example.Leak": (10, 20, 30)})
    assert growing_classes(frame)["class"].tolist() == ["com.example.Leak"]
    loose = growing_classes(frame, monotonic=False)
    assert loose["class"].tolist() == ["com.example.Leak", "com.example.Wave"]


def test_a_new_class_grows_from_zero_and_one_that_vanished_does_not_grow() -> None:
    got = growing_classes(histograms({"com.example.New": (0, 5, 9), "com.example.Gone": (7, 3, 0)}))
    assert got["class"].tolist() == ["com.example.New"]
    assert got[["first_instances", "histograms"]].iloc[0].tolist() == [0, 2]


def test_instances_and_bytes_must_both_grow() -> None:
    frame = histograms({"[B": (10, 10, 10), "java.lang.String": (10, 20, 30)})
    frame.loc[frame["class"].eq("[B"), "bytes"] = [100, 200, 300]  # bigger arrays, same count
    assert growing_classes(frame)["class"].tolist() == ["java.lang.String"]


def test_rows_of_one_class_from_two_loaders_are_summed() -> None:
    frame = histograms({"com.example.Plugin": (1, 2, 3)})
    twice = pd.concat([frame, frame], ignore_index=True)
    assert growing_classes(twice)["last_instances"].tolist() == [6]


def test_histograms_are_ordered_by_time_and_by_position_when_a_time_is_unknown() -> None:
    frame = histograms({"com.example.Leak": (30, 20, 10)})
    reversed_times = frame.assign(
        taken_at=frame["taken_at"].map(lambda t: t.replace(hour=5 - t.hour))
    )
    assert growing_classes(reversed_times)["class"].tolist() == ["com.example.Leak"]
    untimed = histograms({"com.example.Leak": (10, 20, 30)}, times=False)
    got = growing_classes(untimed)
    assert got["class"].tolist() == ["com.example.Leak"]
    assert got["bytes_per_hour"].isna().all()


def test_the_usual_culprits_are_named_and_map_nodes_follow_the_largest() -> None:
    got = growing_classes(
        histograms(
            {
                "com.google.adk.runner.Runner": (10, 20, 40),
                "com.example.agent.RunnerCache$Entry": (10, 20, 40),
                "com.example.agent.SupportAgent": (10, 20, 40),
                "java.util.HashMap$Node": (100, 120, 140),
                "com.google.adk.sessions.InMemorySessionService": (1, 1, 1),
                "com.google.adk.events.Event": (1, 2, 3),
                "com.google.adk.agents.InvocationContext": (0, 1, 2),
                "com.example.agent.InvocationTracker$Entry": (0, 1, 2),
                "[B": (5, 6, 7),
            }
        )
    ).set_index("class")["culprit"]
    assert got["com.google.adk.runner.Runner"] == Culprit.RUNNERS.value
    assert got["com.example.agent.RunnerCache$Entry"] == Culprit.RUNNERS.value
    assert got["com.example.agent.SupportAgent"] == Culprit.RUNNERS.value
    assert got["java.util.HashMap$Node"] == Culprit.RUNNERS.value  # the largest named grower
    assert got["com.google.adk.events.Event"] == Culprit.SESSIONS.value
    assert got["com.google.adk.agents.InvocationContext"] == Culprit.INVOCATIONS.value
    assert got["com.example.agent.InvocationTracker$Entry"] == Culprit.INVOCATIONS.value
    assert pd.isna(got["[B"])
    assert "com.google.adk.sessions.InMemorySessionService" not in got  # there, not growing


def test_map_nodes_alone_name_no_culprit() -> None:
    named = culprits(pd.Series(["java.util.concurrent.ConcurrentHashMap$Node", "[B"]))
    assert named.isna().all()


@pytest.mark.parametrize("count", [0, 1])
def test_fewer_than_two_histograms_give_an_empty_result_and_a_reason(count: int) -> None:
    frame = histograms({"com.example.Leak": (10, 20, 30)})
    frame = frame.loc[frame["histogram"].isin([f"h{k}.txt" for k in range(count)])]
    got = growing_classes(frame)
    assert got.empty and list(got.columns) == list(COLUMNS)
    assert dict(got.dtypes.astype(str)) == dict(COLUMNS)
    reason = why_no_growth(frame)
    assert reason is not None and "GC.class_histogram" in reason
    assert ("only one" in reason) == (count == 1)


def test_two_histograms_need_no_reason_and_the_input_is_not_changed() -> None:
    frame = histograms({"com.example.Leak": (10, 20, 30)})
    before = frame.copy()
    growing_classes(frame)
    assert why_no_growth(frame) is None
    pd.testing.assert_frame_equal(frame, before)


def test_a_frame_without_the_columns_is_refused() -> None:
    with pytest.raises(SchemaError, match="lacks required columns"):
        growing_classes(pd.DataFrame({"class": ["x"]}))


def test_the_advice_bounds_every_cache_and_gives_it_a_metric() -> None:
    assert ADVICE.startswith("Bound every cache and give it a metric")


def test_the_real_jdk_histograms_show_the_runner_cache() -> None:
    truth = json.loads((JVM / "truth.json").read_text())
    spec = SourceSpec("histograms", paths=(JVM / "histo-*.txt",))
    got = growing_classes(loader.load(spec, Filters()).frames["class_histograms"])
    leak = got.set_index("class").loc[truth["leak"]["classes"]]
    assert leak["first_instances"].eq(truth["leak"]["first_instances"]).all()
    assert leak["last_instances"].eq(truth["leak"]["last_instances"]).all()
    assert leak["culprit"].isna().all() and truth["leak"]["culprit"] is None  # no ADK class
    assert leaking_classes(got)["text"].iloc[0] == truth["leak"]["text"]
    nodes = got.set_index("class").loc[truth["map_nodes"]["class"]]
    assert (nodes["first_instances"], nodes["last_instances"]) == (
        truth["map_nodes"]["first_instances"],
        truth["map_nodes"]["last_instances"],
    )


def test_the_slow_death_pack_shows_what_its_truth_says() -> None:
    expected = json.loads((PACK / "truth.json").read_text())["expected"]
    evidence = ik.open_evidence(PACK)
    frame = evidence.class_histograms
    assert evidence.rejects.empty and evidence.warnings.empty
    assert len(frame) == expected["rows"]
    taken = frame.groupby("histogram")["taken_at"].first()
    assert taken.to_dict() == {
        h["histogram"]: pd.Timestamp(h["taken_at"]) for h in expected["histograms"]
    }
    got = growing_classes(frame)
    want = pd.DataFrame(expected["growing"])
    assert got["class"].tolist() == want["class"].tolist()
    for col in ("first_instances", "last_instances", "first_bytes", "last_bytes", "bytes_growth"):
        assert got[col].tolist() == want[col].tolist(), col
    named = [None if pd.isna(c) else c for c in got["culprit"]]
    assert named == [g["culprit"] for g in expected["growing"]]
    assert got["bytes_per_hour"].tolist() == pytest.approx(want["bytes_per_hour"].tolist())
    assert sorted(got["culprit"].dropna().unique()) == expected["culprits"]
    not_growing = {c for names in expected["not_growing"].values() for c in names}
    assert not not_growing & set(got["class"])
    wave = expected["grows_then_shrinks"]
    assert set(wave) <= set(growing_classes(frame, monotonic=False)["class"])
    assert set(expected["new_classes"]) == set(got.loc[got["first_instances"].eq(0), "class"])
    assert expected["advice"] == ADVICE


ORDERS = ROOT / "tests" / "data" / "histograms" / "jvm-orders"
ORDERS_TRUTH = json.loads(
    (ROOT / "tests" / "data" / "threads" / "jvm-orders" / "truth.json").read_text()
)["leak"]


def orders_histograms() -> pd.DataFrame:
    spec = SourceSpec("histograms", paths=(ORDERS / "histo-*.txt",))
    loaded = loader.load(spec, Filters())
    assert loaded.rejects.empty and loaded.warnings.empty
    return loaded.frames["class_histograms"]


def test_the_application_class_and_its_map_lead_a_real_leak() -> None:
    got = growing_classes(orders_histograms())
    leaks = leaking_classes(got)
    first = leaks.iloc[0]
    first_count, last_count = ORDERS_TRUTH["instances"]
    assert first["class"] == ORDERS_TRUTH["class"] and not first["library"]
    assert first["instances_growth"] == last_count - first_count
    assert first["holds"] == ORDERS_TRUTH["holds"]
    assert first["containers"][0] == ORDERS_TRUTH["container"]
    boxes = ORDERS_TRUTH["container_instances"]
    assert first["container_growth"] == boxes[1] - boxes[0]
    assert list(first["kin"]) == ORDERS_TRUTH["kin"]
    assert first["text"] == ORDERS_TRUTH["text"]
    assert not leaks["class"].str.startswith(("java.", "jdk.", "sun.", "[")).any()


def test_no_usual_culprit_without_its_own_classes() -> None:
    """The app has a CheckoutSession class but no ADK session service: nothing names one."""
    got = growing_classes(orders_histograms())
    assert got["culprit"].isna().all()
    headline = growth_headline(got)
    assert headline is not None and headline.startswith("a map of com.acme.orders.OrderSnapshot")
    assert ORDERS_TRUTH["not_culprit"] not in headline
    session_named = culprits(pd.Series(["com.example.SessionStore$Node"]))
    assert session_named.isna().all()  # a name alone names nothing


def test_the_session_service_is_named_only_when_its_class_is_in_the_histograms() -> None:
    growth = {
        "com.google.adk.sessions.Session": (10, 20, 30),
        "com.google.adk.events.Event": (5, 9, 20),
    }
    without = growing_classes(histograms(growth))
    assert without["culprit"].isna().all()
    present = growing_classes(
        histograms({**growth, "com.google.adk.sessions.InMemorySessionService": (1, 1, 1)})
    )
    assert present["culprit"].eq(Culprit.SESSIONS.value).all()


def test_library_classes_rank_below_the_applications() -> None:
    got = growing_classes(
        histograms(
            {
                "io.netty.buffer.PooledByteBuf": (10, 5000, 9000),
                "com.example.Cart": (10, 20, 40),
                "java.util.HashMap$Node": (10, 20, 40),
            }
        )
    )
    leaks = leaking_classes(got)
    assert leaks["class"].tolist() == ["com.example.Cart", "io.netty.buffer.PooledByteBuf"]
    assert leaks["library"].tolist() == [False, True]
    assert leaks["text"].iloc[0] == "a map of com.example.Cart: +30 entries (HashMap$Node +30)"
    assert leaks["holds"].isna().iloc[1]


def test_overview_findings_name_the_application_class() -> None:
    from incidentkit.flows.common import Frames
    from incidentkit.flows.overview.card import Profile
    from incidentkit.flows.overview.findings import overview_findings
    from incidentkit.flows.overview.triage import triage_overview

    report = triage_overview(
        Frames(), as_of=pd.Timestamp("2026-12-07T00:00:00Z"), profile=Profile(),
        histograms=orders_histograms(),
    )  # fmt: skip
    found = overview_findings(report)
    items = {item.id: item for item in found.items}
    growing = items["overview/growing-classes"]
    assert ORDERS_TRUTH["text"] in growing.title
    assert growing.rows[0]["class"] == ORDERS_TRUTH["class"]
    assert ORDERS_TRUTH["not_culprit"] not in json.dumps([i.title for i in found.items])
