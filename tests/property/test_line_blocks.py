"""Text files read a block at a time give the lines and rejects a line-by-line read gives.

The reference below is the reader the kit had before blocks: ``readline`` with a length limit,
one decode per line. Files are drawn from pieces that make every case meet a block boundary:
line ends with and without ``\\r``, blank and whitespace lines, a BOM, multi-byte and invalid
UTF-8, lines over the length limit (both cut off by a block and whole inside one), and a last
line with no line end. The limit and the blocks are made small so that a short file holds them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import SourceError
from incidentkit.sources import base
from incidentkit.sources.base import RejectSink, iter_lines

LIMIT = 24
PIECES = [
    b"\n",
    b"\r\n",
    b"\r",
    b" ",
    b"\t",
    b"{}",
    b'{"id":"e1"}',
    b"\xef\xbb\xbf",  # a BOM
    "é☃😀".encode(),
    b"\xff",  # never UTF-8
    b"\xc3",  # the first byte of a two-byte character
    b"x" * LIMIT,
    b"y" * (LIMIT - 1),
    b"\x00",
]


def reference(path: Path, limit: int) -> tuple[list[tuple[int, str, bool]], list[tuple[str, str]]]:
    """The lines and rejects of the line-by-line reader (a line of exactly the limit with its
    line end no longer swallows the line after it: that was its one bug)."""
    lines, rejects = [], []
    with path.open("rb") as handle:
        if b"\0" in handle.peek(1024)[:1024]:
            raise SourceError("binary", value=str(path), fix="-")
        lineno = 0
        while raw := handle.readline(limit + 1):
            lineno += 1
            if len(raw) > limit:
                if not raw.endswith(b"\n"):
                    while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
                        pass
                rejects.append((f"{path.name}:{lineno}", f"line longer than {limit >> 20} MiB"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                reason = f"not UTF-8 text (byte {err.start + 1})"
                rejects.append((f"{path.name}:{lineno}", reason))
                continue
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            stripped = text.rstrip("\r\n")
            if stripped.strip():
                lines.append((lineno, stripped, text.endswith("\n")))
    return lines, rejects


def read(path: Path) -> tuple[list[tuple[int, str, bool]], list[tuple[str, str]]]:
    sink = RejectSink("test")
    lines = list(iter_lines(path, what="test", sink=sink))
    return lines, [(str(row["location"]), str(row["reason"])) for row in sink.rows]


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "MAX_LINE_BYTES", LIMIT)
    monkeypatch.setattr(base, "_FIRST_BLOCK", 5)
    monkeypatch.setattr(base, "_BLOCK", 11)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=bool(os.environ.get("CI")),
)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_blocks_read_the_lines_a_line_by_line_read_reads(
    small_blocks: None, tmp_path: Path, pieces: list[bytes]
) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(pieces))
    try:
        want = reference(path, LIMIT)
    except SourceError:
        with pytest.raises(SourceError, match="binary"):
            read(path)
        return
    assert read(path) == want


def test_a_line_of_the_limit_with_its_end_is_rejected_and_the_next_line_read(
    small_blocks: None, tmp_path: Path
) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"x" * LIMIT + b"\nnext\n" + b"y" * LIMIT)
    lines, rejects = read(path)
    assert lines == [(2, "next", True), (3, "y" * LIMIT, False)]  # the last line has no end
    assert rejects == [("lines.txt:1", "line longer than 0 MiB")]


def test_rejected_lines_keep_their_text_without_the_line_end(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b'{"a":1}\n\xff{"b":2}\r\n{"c":3}\n')
    sink = RejectSink("test")
    lines = list(iter_lines(path, what="test", sink=sink))
    assert [text for _, text, _ in lines] == ['{"a":1}', '{"c":3}']
    assert sink.rows == [
        {
            "source": "test",
            "location": "lines.txt:2",
            "reason": "not UTF-8 text (byte 1)",
            "raw": '\ufffd{"b":2}\r',
        }
    ]
