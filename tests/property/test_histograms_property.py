"""Any text given as a class histogram loads into rows, rejects and warnings, or raises an
IncidentkitError: never a foreign exception. Every table line is accounted for: a row or a reject.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import IncidentkitError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.jvm import histograms

HEADER = " num     #instances         #bytes  class name (module)"
RULE = "-" * 55
_ROW = re.compile(r"^\s*\d+:\s")
_BREAKS = set("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00")  # line ends, and NUL (binary)

NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=10**40),
    st.sampled_from([0, 1, 10**19, 2**64]),
)
NAMES = st.one_of(
    st.sampled_from(
        [
            "[B (java.base@17.0.15)",
            "java.lang.String (java.base@21.0.5)",
            "com.example.agent.RunnerCache$Entry",
            "com.acme.Plugin (com.acme.plugins)",
            "<no name>",
            "x (",
            "y ()",
            "z (a (b@1))",
        ]
    ),
    st.text(min_size=0, max_size=30).filter(lambda t: not set(t) & _BREAKS),
)
ROWS = st.builds(
    lambda rank, n, size, name: f"{rank:4d}: {n:13d}  {size:13d}  {name}",
    st.integers(min_value=0, max_value=10**6),
    NUMBERS,
    NUMBERS,
    NAMES,
)
TIMES = st.one_of(
    st.sampled_from(
        [
            "2026-11-29 03:00:00",
            "2026-11-29T03:00:00Z",
            "2026-11-29T04:00:00+01:00",
            "2026-13-45 99:99:99",
            "2262-04-11 23:59:59",
            "1677-09-21 00:00:00",
            "9999-12-31T23:59:59Z",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat(sep=" ")),
)
LINES = st.one_of(
    ROWS,
    TIMES,
    st.sampled_from(
        [HEADER, RULE, "12345:", "Total  1  2", "Total 99999999999999999999999 1", "", "ERROR: "]
    ),
    st.text(max_size=40),
)
FILE_NAMES = st.sampled_from(
    [
        "histo.txt",
        "histo-2026-11-29T03:00:00Z.txt",
        "histo-2026-11-29T03-00-00+0530.txt",
        "histo-9999-11-29T03-00-00Z.txt",
        "histo-1677-09-21T00-00-00Z.txt",
    ]
)
ZONES = st.sampled_from(["error", "utc", "Europe/Berlin", "America/St_Johns"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(LINES, max_size=25), name=FILE_NAMES, zone=ZONES)
def test_any_text_gives_rows_or_rejects_never_a_foreign_error(
    lines: list[str], name: str, zone: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text("\n".join(lines), encoding="utf-8")
        spec = SourceSpec("histograms", paths=(path,), naive_timestamps=zone)
        try:
            loaded = histograms.load(spec, Filters())
        except IncidentkitError:
            return
    frame = loaded.frames["class_histograms"]
    rows = frame["rank"].size
    rejected = loaded.rejects["location"].nunique()
    table_lines = sum(1 for line in lines if _ROW.match(line))
    assert rows + rejected >= min(table_lines, 1) or not table_lines
    assert (frame["instances"] >= 0).all() and (frame["bytes"] >= 0).all()
    assert frame["taken_at"].isna().all() or str(frame["taken_at"].dtype) == "datetime64[ns, UTC]"


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(ROWS, min_size=1, max_size=20))
def test_every_row_of_a_table_is_a_row_or_a_reject(rows: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "histo-2026-11-29T03-00-00Z.txt"
        path.write_text("\n".join(["4711:", HEADER, RULE, *rows, "Total 0 0"]) + "\n")
        try:
            loaded = histograms.load(SourceSpec("histograms", paths=(path,)), Filters())
        except IncidentkitError:
            return
    frame = loaded.frames["class_histograms"]
    rejected = loaded.rejects.loc[loaded.rejects["location"].ne(f"{path.name}:2")]
    readable = [row for row in rows if _ROW.match(row)]
    assert len(frame) + len(rejected) == len(readable)
    assert frame["class"].str.len().gt(0).all()
    assert not frame["class"].str.endswith(" ").any()
