from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import SourceError
from incidentkit.evidence import open_evidence
from incidentkit.frames import spec_of
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources.jvm import histograms
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "histograms"
JVM = DATA / "jvm-runner-cache"


def load(*paths: str | Path, naive: str = "error", filters: Filters | None = None) -> Loaded:
    spec = SourceSpec("histograms", paths=tuple(DATA / p for p in paths), naive_timestamps=naive)
    return histograms.load(spec, filters or Filters())


def frame(*paths: str | Path, **kwargs: object) -> pd.DataFrame:
    loaded = load(*paths, **kwargs)  # type: ignore[arg-type]
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["class_histograms"]


def utc(text: str) -> pd.Timestamp:
    return pd.Timestamp(text).tz_convert("UTC").as_unit("ns")


def test_one_row_per_class_line_of_each_histogram() -> None:
    got = frame("two_histograms.txt", naive="utc")
    assert list(got.columns) == spec_of("class_histograms").names
    assert got["histogram"].unique().tolist() == ["two_histograms.txt#1", "two_histograms.txt#2"]
    first = got.loc[got["histogram"].eq("two_histograms.txt#1")]
    assert first["rank"].tolist() == [1, 2, 3, 4]
    assert first["class"].tolist() == [
        "[B",
        "java.lang.String",
        "com.example.agent.RunnerCache$Entry",
        "com.acme.Plugin",
    ]
    assert first["instances"].tolist() == [150000, 50000, 1000, 10]
    assert first["bytes"].tolist() == [12000000, 1200000, 64000, 480]


def test_the_module_suffix_goes_to_its_own_column() -> None:
    got = frame("two_histograms.txt", naive="utc").set_index("class")
    assert got.loc["java.lang.String", "module"].tolist() == ["java.base@17.0.15"] * 2
    assert got.loc["com.acme.Plugin", "module"] == "com.acme.plugins"  # named, no version
    assert got.loc["com.example.agent.RunnerCache$Entry", "module"].isna().all()  # class path


def test_a_time_line_before_each_histogram_is_read_in_the_manifest_zone() -> None:
    berlin = frame("two_histograms.txt", naive="Europe/Berlin")
    assert berlin.groupby("histogram")["taken_at"].first().tolist() == [
        utc("2026-11-29T03:00:00Z"),
        utc("2026-11-29T04:00:00Z"),
    ]
    assert frame("two_histograms.txt", naive="utc")["taken_at"].iloc[0] == utc(
        "2026-11-29T04:00:00Z"
    )


def test_without_a_zone_the_time_is_unknown_and_says_how_to_fix_it() -> None:
    loaded = load("two_histograms.txt")
    assert loaded.rejects.empty
    assert loaded.frames["class_histograms"]["taken_at"].isna().all()
    (reason,) = loaded.warnings["reason"].tolist()
    assert "timezone" in reason and "file name" in reason


def test_a_utc_time_in_the_file_name_fixes_the_offset_of_every_histogram(tmp_path: Path) -> None:
    named = tmp_path / "histo-2026-11-29T03:00:00Z.txt"  # the time lines say 04:00 and 05:00
    shutil.copy(DATA / "two_histograms.txt", named)
    loaded = histograms.load(SourceSpec("histograms", paths=(named,)), Filters())
    assert loaded.warnings.empty
    taken = loaded.frames["class_histograms"].groupby("histogram")["taken_at"].first()
    assert taken.tolist() == [utc("2026-11-29T03:00:00Z"), utc("2026-11-29T04:00:00Z")]


def test_an_iso_time_line_with_an_offset_needs_no_zone(tmp_path: Path) -> None:
    text = (DATA / "two_histograms.txt").read_text()
    iso = tmp_path / "iso.txt"
    iso.write_text(
        text.replace("2026-11-29 04:00:00", "2026-11-29T03:00:00Z").replace(
            "2026-11-29 05:00:00", "2026-11-29T05:00:00+01:00"
        )
    )
    loaded = histograms.load(SourceSpec("histograms", paths=(iso,)), Filters())
    assert loaded.warnings.empty
    taken = loaded.frames["class_histograms"].groupby("histogram")["taken_at"].first()
    assert taken.tolist() == [utc("2026-11-29T03:00:00Z"), utc("2026-11-29T04:00:00Z")]


def test_a_file_of_one_bare_histogram_takes_the_time_of_its_name() -> None:
    truth = json.loads((JVM / "truth.json").read_text())
    spec = SourceSpec("histograms", paths=(JVM / "histo-*.txt",))  # a pattern, name order
    loaded = histograms.load(spec, Filters())
    assert loaded.rejects.empty and loaded.warnings.empty
    got = loaded.frames["class_histograms"]
    per = got.groupby("histogram", sort=False).agg(rows=("rank", "size"), at=("taken_at", "first"))
    assert per.index.tolist() == [h["file"] for h in truth["histograms"]]
    assert per["rows"].tolist() == [h["rows"] for h in truth["histograms"]]
    assert per["at"].tolist() == [utc(h["utc_time"]) for h in truth["histograms"]]


def test_the_real_jdk17_rows_read_as_printed() -> None:
    got = frame(*sorted(p.relative_to(DATA) for p in JVM.glob("histo-*.txt")))
    first = got.loc[got["histogram"].eq(got["histogram"].iloc[0])].set_index("class")
    assert first.loc["[B", "module"] == "java.base@17.0.15"
    assert first.loc["com.example.agent.Runner", ["instances", "bytes"]].tolist() == [1000, 24000]
    lambdas = first.index[first.index.str.contains("$$Lambda", regex=False)]
    assert len(lambdas) and all("/0x" in name for name in lambdas)
    assert (first["rank"].diff().dropna() == 1).all()


def test_a_histogram_with_no_time_at_all_is_kept_with_a_warning() -> None:
    loaded = load("jmap-jdk8.txt")
    got = loaded.frames["class_histograms"]
    assert got["class"].tolist() == ["[C", "java.lang.String", "<no name>"]  # JDK 8: no module
    assert got["module"].isna().all() and got["taken_at"].isna().all()
    assert loaded.rejects.empty
    assert "no time line" in loaded.warnings["reason"].iloc[0]


def test_an_unreadable_row_is_a_reject_with_its_line_and_the_total_disagrees() -> None:
    loaded = load("broken.txt", naive="utc")
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {"location": "broken.txt:5", "reason": "not a class histogram row"}
    ]
    assert "java.lang.String" in loaded.rejects["raw"].iloc[0]
    assert loaded.frames["class_histograms"]["class"].tolist() == [
        "[B",
        "com.example.agent.RunnerCache$Entry",
    ]
    total = loaded.warnings.loc[loaded.warnings["reason"].str.contains("Total")]
    assert total["location"].tolist() == ["broken.txt:7"]  # its Total counts the lost row
    assert "rows read add up to 151000 and 12064000" in total["reason"].iloc[0]


def test_a_histogram_cut_before_its_total_keeps_its_rows_and_is_rejected() -> None:
    loaded = load("truncated.txt", naive="utc")
    assert len(loaded.frames["class_histograms"]) == 2
    assert loaded.rejects["location"].tolist() == ["truncated.txt:2"]
    assert "truncated" in loaded.rejects["reason"].iloc[0]


def test_a_row_outside_any_table_and_a_number_past_64_bits_are_rejects(tmp_path: Path) -> None:
    odd = tmp_path / "odd.txt"
    odd.write_text(
        "   1:  5  40  java.lang.Object\n"
        " num     #instances         #bytes  class name (module)\n"
        "   1:  99999999999999999999  40  java.lang.Object\n"
        "   2:  1  16  java.lang.Thread\n"
        "Total  1  16\n"
        "   0:             0              0  \n"  # row-shaped, after the table, no class
    )
    loaded = histograms.load(SourceSpec("histograms", paths=(odd,)), Filters())
    assert loaded.rejects["location"].tolist() == ["odd.txt:1", "odd.txt:3", "odd.txt:6"]
    assert "outside a table" in loaded.rejects["reason"].iloc[0]
    assert "64 bits" in loaded.rejects["reason"].iloc[1]
    assert "outside a table" in loaded.rejects["reason"].iloc[2]
    assert loaded.frames["class_histograms"]["class"].tolist() == ["java.lang.Thread"]


def test_the_jvm_error_instead_of_a_histogram_is_a_reject(tmp_path: Path) -> None:
    failed = tmp_path / "failed.txt"
    failed.write_text("12345:\nERROR: Ran out of C-heap; histogram not generated\n")
    loaded = histograms.load(SourceSpec("histograms", paths=(failed,)), Filters())
    assert loaded.frames["class_histograms"].empty
    assert loaded.rejects["location"].tolist() == ["failed.txt:2"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("empty.txt", "the file is empty"),
        ("not_a_histogram.txt", "holds no class histogram"),
        ("missing.txt", "file not found"),
        ("nothing-*.txt", "matches no file"),
    ],
)
def test_a_file_that_is_no_histogram_is_a_source_error(name: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        load(name)


def test_the_window_keeps_histograms_inside_it_and_those_of_unknown_time() -> None:
    window = Window(utc("2026-11-29T04:30:00Z"), utc("2026-11-29T06:00:00Z"))
    inside = frame("two_histograms.txt", naive="utc", filters=Filters(window=window))
    assert inside["histogram"].unique().tolist() == ["two_histograms.txt#2"]
    unknown = frame("jmap-jdk8.txt", filters=Filters(window=window))
    assert len(unknown) == 3


def test_the_manifest_section_reads_a_pattern_in_its_timezone(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    shutil.copy(DATA / "two_histograms.txt", tmp_path / "h" / "histo-a.txt")
    (tmp_path / "evidence.toml").write_text(
        '[histograms]\npaths = ["h/histo-*.txt"]\nformat = "jcmd"\ntimezone = "Europe/Berlin"\n'
    )
    evidence = open_evidence(tmp_path)
    got = evidence.class_histograms
    assert got["taken_at"].min() == utc("2026-11-29T03:00:00Z")
    assert evidence.frame("class_histograms").equals(got)
    assert evidence.rejects.empty
