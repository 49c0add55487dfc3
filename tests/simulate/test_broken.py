"""The broken packs are damaged exactly where their expected_rejects.json says."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from simloaders import require_loaders
from simpacks import FIXTURES

from incidentkit import open_evidence
from incidentkit.simulate.broken import VARIANTS

BROKEN = FIXTURES / "broken"


def _expected(variant: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((BROKEN / variant / "expected_rejects.json").read_text())
    return doc


def _line(folder: Path, location: str) -> tuple[list[str], int]:
    name, _, number = location.rpartition(":")
    lines = (folder / name).read_text().splitlines(keepends=True)
    return lines, int(number) - 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_expected_reject_points_at_damage(variant: str) -> None:
    folder = BROKEN / variant
    expected = _expected(variant)
    assert expected["rejects"]
    for reject in expected["rejects"]:
        lines, i = _line(folder, reject["location"])
        text = lines[i]
        if reject["reason"] == "truncat":
            assert i == len(lines) - 1 and not text.endswith("\n")
        elif reject["reason"] == "duplicate":
            key = (lambda t: json.loads(t)["id"]) if text.startswith("{") else (lambda t: t[:36])
            assert key(text) in {key(other) for other in lines[1:i]}
        elif reject["reason"].startswith("offset"):
            if reject["location"].startswith("ledger"):
                assert not next(csv.reader([text]))[10].endswith("Z")
            else:
                assert not json.loads(text)["created_at"].endswith("Z")
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                continue
            assert not isinstance(value, dict)


@pytest.mark.parametrize("variant", VARIANTS)
def test_broken_pack_gives_exactly_its_rejects(variant: str) -> None:
    require_loaders()
    expected = _expected(variant)
    evidence = open_evidence(BROKEN / variant)
    rejects = evidence.rejects
    got = sorted(zip(rejects["source"], rejects["location"], strict=True))
    assert got == sorted((r["source"], r["location"]) for r in expected["rejects"])
    for reject in expected["rejects"]:
        reason = rejects.loc[rejects["location"] == reject["location"], "reason"].iloc[0]
        assert re.search(reject["reason"], reason, re.IGNORECASE), reason
    assert {f: len(evidence.frame(f)) for f in expected["counts"]} == expected["counts"]
