"""What the side-effect journal says about each unanswered call, found by its business key.

A tool with a side effect has a key template (``"send-invoice:{invoiceId}"``) filled from the
call's args; the journal is looked up by that key, else by the function call id (the W4 trap).
"""

from __future__ import annotations

import enum
import re
import string
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.flows._frames import choose
from incidentkit.frames import STR, JournalStatus


class JournalVerdict(enum.StrEnum):
    """What the side-effect journal says about one unanswered call."""

    NO_ENTRY = "NO_ENTRY"
    INTENT_ONLY = "INTENT_ONLY"
    DONE = "DONE"
    NO_KEY = "NO_KEY"
    UNTRACKED = "UNTRACKED"
    UNKNOWN = "UNKNOWN"


class KeyTemplate(NamedTuple):
    """A tool's business-key template and the args fields it names."""

    text: str
    roots: tuple[str, ...]


_STATUS_RANK = {JournalStatus.DONE: 0, JournalStatus.INTENT: 1}
_EXAMPLE = 'give e.g. {"sendInvoice": "send-invoice:{invoiceId}"}'


def parse_key_templates(raw: Mapping[str, str] | None) -> dict[str, KeyTemplate]:
    """Checked key templates by tool; ParameterError says which one is wrong and how."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ParameterError(
            "key_templates is not a mapping of tool name to key template", value=raw, fix=_EXAMPLE
        )
    out: dict[str, KeyTemplate] = {}
    for tool, template in raw.items():
        if not isinstance(tool, str) or not isinstance(template, str):
            raise ParameterError(
                "key_templates must map tool names to template strings",
                value={tool: template},
                fix=_EXAMPLE,
            )
        out[tool] = _parse(tool, template)
    return out


def _parse(tool: str, template: str) -> KeyTemplate:
    def bad(problem: str) -> ParameterError:
        return ParameterError(
            f"key template for tool {tool!r} {problem}",
            value=template,
            fix="name the call's args fields in braces, e.g. send-invoice:{invoiceId}, and "
            "double literal braces ({{ }})",
        )

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise bad(f"is not a valid format string ({err})") from err
    roots = []
    for _, field_name, _, conversion in parsed:
        if field_name is None:
            continue
        root = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if not root or root.isdigit():
            raise bad("has a positional field; fields must name args")
        if conversion not in (None, "r", "s", "a"):
            raise bad(f"has an unknown conversion !{conversion}")
        roots.append(root)
    if not roots:
        raise bad("names no args field, so every call would get the same key")
    return KeyTemplate(template, tuple(roots))


def _render(template: KeyTemplate, args: Any) -> tuple[str | None, str | None]:
    """The business key of one call, or why it cannot be made."""
    if not isinstance(args, Mapping):
        return None, "the call's args are not a JSON object"
    for root in template.roots:
        if args.get(root) is None:
            return None, f"args lack field {root!r} that key template {template.text!r} needs"
    try:
        return template.text.format_map(args), None
    except (KeyError, AttributeError, IndexError, TypeError, ValueError) as err:
        return None, f"key template {template.text!r} cannot be filled from args ({err!r})"


def business_keys(
    calls: pd.DataFrame, templates: Mapping[str, KeyTemplate]
) -> tuple[np.ndarray, np.ndarray]:
    """Business key and, where none can be made, why, of every call (positional arrays).

    Only templated tools get either; filling a template from a call's decoded args is the one
    step done per call.
    """
    keys = np.full(len(calls), None, dtype=object)
    reasons = np.full(len(calls), None, dtype=object)
    names = calls["name"].to_numpy(dtype=object)
    args = calls["args"].to_numpy(dtype=object)
    for tool, template in templates.items():
        where = np.flatnonzero(names == tool)
        rendered = [_render(template, value) for value in args[where]]
        keys[where] = [key for key, _ in rendered]
        reasons[where] = [reason for _, reason in rendered]
    return keys, reasons


def _journal_index(journal: pd.DataFrame, by: str) -> pd.DataFrame:
    """One journal row per ``by`` value (DONE wins over INTENT over anything else)."""
    j = pd.DataFrame({"by": journal[by], "key": journal["key"], "status": journal["status"]})
    j = j[j["by"].notna()]
    j["rank"] = j["status"].map(_STATUS_RANK).fillna(2).astype(np.int64)
    return j.sort_values(["by", "rank", "key"]).drop_duplicates("by").set_index("by")


def journal_verdicts(
    open_calls: pd.DataFrame,
    keys: np.ndarray,
    key_problems: np.ndarray,
    journal: pd.DataFrame,
    templates: Mapping[str, KeyTemplate],
) -> pd.DataFrame:
    """The journal entry and verdict of every unanswered call (``cidx``: position in calls).

    Adds ``tool`` (the call's name), business_key, ``key_problem`` (why there is none),
    journal_key, journal_status, matched_by ("business_key", "function_call_id" or missing),
    journal_verdict and window ("W3", "W4" or "-"); the index is a fresh RangeIndex.
    """
    c = open_calls.rename(columns={"name": "tool"}).reset_index(drop=True)
    idx = c.index
    cidx = c["cidx"].to_numpy(dtype=np.int64)
    c["business_key"] = pd.Series(keys[cidx], dtype=object).astype(STR)
    c["key_problem"] = pd.Series(key_problems[cidx], dtype=object).astype(STR)
    by_key, by_cid = _journal_index(journal, "key"), _journal_index(journal, "function_call_id")
    hit_key = c["business_key"].isin(by_key.index)
    hit_cid = ~hit_key & c["call_id"].notna() & c["call_id"].isin(by_cid.index)

    def found(column: str) -> pd.Series:
        via_key = c["business_key"].map(by_key[column])
        return via_key.where(hit_key, c["call_id"].map(by_cid[column]).where(hit_cid))

    c["journal_key"], c["journal_status"] = found("key").astype(STR), found("status").astype(STR)
    rank = found("rank")
    c["matched_by"] = choose([hit_key, hit_cid], ["business_key", "function_call_id"], None, idx)
    v = JournalVerdict
    verdict = choose(
        [
            rank == 0,
            rank == 1,
            rank.notna(),
            ~c["tool"].isin(list(templates)),
            c["key_problem"].notna(),
        ],
        [v.DONE.value, v.INTENT_ONLY.value, v.UNKNOWN.value, v.UNTRACKED.value, v.NO_KEY.value],
        v.NO_ENTRY.value,
        idx,
    )
    c["journal_verdict"] = verdict
    c["window"] = choose([verdict == v.NO_ENTRY, verdict == v.INTENT_ONLY], ["W3", "W4"], "-", idx)
    return c
