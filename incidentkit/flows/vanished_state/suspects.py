"""Where state can vanish, across every session of an app, before anyone names a key: the
triage card's check for "the agent forgot" (the four causes, looked for everywhere).

Per session, each signal names the keys it points at:

- ``temp:`` keys written in its stored deltas: ADK never applies them to the session (ADK Java
  keeps them in the stored delta; ADK Python trims them, so a Python store shows only the
  quiet answer below);
- keys only partial (streamed) events carried, which ADK never appends (an event log written
  by a plugin keeps them; a session store never does);
- quiet answers: tool answers on events that carry no state delta after a call that names a
  key (:func:`names_key`, the rule the key verdicts use for their suspects), or from a tool
  that wrote a delta elsewhere: where a direct ``session.state`` mutation, or a ``temp:``
  write a store trimmed, most likely ran;
- stored state that differs from the value the deltas replay to (a store that keeps state);
- invocations of the session that overlapped, with the keys they wrote (marker events, such as
  a compaction stamped while the next invocation ran, are in no invocation's range).

The pure core (:func:`state_suspects`) takes frames and returns a :class:`StateSuspects`,
most suspicious session first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from incidentkit.flows._frames import per_group, rows_in
from incidentkit.flows.vanished_state.overlaps import invocation_ranges, overlapping
from incidentkit.frames import StateScope
from incidentkit.sources.json_text import canonical_json

_WORD = re.compile(r"[a-z0-9]+")
MIN_WORD = 3
"""Words of a key shorter than this name nothing (``a``, ``id``)."""
WEIGHTS: Mapping[str, int] = {
    "differs": 4,
    "temp": 3,
    "partial": 3,
    "overlap": 3,
    "quiet": 2,
}
"""How much each signal adds to a session's score: a proven loss first, then what never
becomes durable by ADK's rules, then a tool answer that most likely wrote past the delta."""
KEYS_CONSIDERED = 300
"""The most-written keys a quiet answer is matched against (the rest are rare)."""
KEYS_SHOWN = 5
"""The keys each suspect names (its command's ``-p keys``)."""
ADK_TOOLS = frozenset({"transfer_to_agent", "exit_loop"})
"""ADK's own tools: they write no state by design."""

SUSPECT_COLUMNS = [
    *("app_name", "user_id", "session_id", "score", "signals", "keys", "why"),
    *("temp_keys", "partial_keys", "differing_keys", "overlaps", "quiet_answers"),
    "last_event_at",
]
"""One row per session where state can vanish: ``keys`` the keys its signals name (most
telling first), ``why`` them in words, ``quiet_answers`` the tool answers with no delta
(``tool``, ``invocation_id``, ``event_id``, ``ts``, ``keys``), ``overlaps`` how many pairs of its
invocations ran at once."""


def key_words(key: str) -> list[str]:
    """The words of ``key`` a tool name can share (its ``app:``/``user:`` prefix dropped)."""
    return [w for w in _WORD.findall(bare(key).lower()) if len(w) >= MIN_WORD]


def bare(key: str) -> str:
    """``key`` without its ``app:`` or ``user:`` prefix (how a tool's answer would spell it)."""
    return key.split(":", 1)[1] if key.startswith(("app:", "user:")) else key


def names_key(key: str, tools: pd.Series, texts: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Which answers name ``key``: (by the tool's name sharing a word with it, by its text
    holding it). ``tools`` are the tool names, ``texts`` the answers' (and calls') canonical
    JSON, both lower case and aligned."""
    words = key_words(key)
    if not words:
        false = pd.Series(False, index=tools.index)
        return false, false
    by_name = tools.str.contains("|".join(map(re.escape, words)), regex=True)
    by_text = texts.str.contains(bare(key).lower(), regex=False)
    return by_name.fillna(False).astype(bool), by_text.fillna(False).astype(bool)


def answer_texts(responses: pd.DataFrame, calls: pd.DataFrame | None = None) -> pd.Series:
    """Each answer's text as matched against keys: its response, and its call's arguments
    when ``calls`` is given, as lower-case canonical JSON."""
    text = responses["response"].map(canonical_json).astype("str").str.lower()
    if calls is None or calls.empty:
        return text
    args = calls.drop_duplicates("call_id").set_index("call_id")["args_key"]
    called = responses["call_id"].map(args).fillna("").astype("str").str.lower()
    return text + " " + called


@dataclass(frozen=True)
class StateSuspects:
    """The sessions where state can vanish (:data:`SUSPECT_COLUMNS`) and what was checked."""

    suspects: pd.DataFrame
    sessions: int
    """Sessions examined (those with a stored event)."""
    keys: int
    """Distinct state keys the app's deltas and stored state name."""
    answers: int
    """Tool answers examined."""
    stored_compared: bool
    """Whether a stored state was there to compare the replay with."""
    deltas: bool = True
    """Whether the events keep state deltas (a Firestore export keeps none: no quiet answer
    and no replay can be judged)."""

    def checked(self) -> str:
        """What was examined, in words (the card's line when nothing was found)."""
        stored = (
            "stored state against the replayed deltas"
            if self.stored_compared
            else "no stored state to compare (an event log keeps none)"
        )
        if not self.deltas:
            return (
                f"{self.sessions} session(s) checked for overlapping invocations only: these "
                "events keep no state deltas (a Firestore export), so no write can be judged"
            )
        return (
            f"{self.sessions} session(s), {self.keys} key(s) and {self.answers} tool answer(s) "
            "checked for temp: keys written, keys only partial events carried, tool answers "
            f"with no delta after a call that names a key, {stored}, and overlapping "
            "invocations"
        )


def state_suspects(
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    writes: pd.DataFrame,
    *,
    stored: pd.DataFrame | None = None,
    runs: pd.DataFrame | None = None,
) -> StateSuspects:
    """Every session of ``events`` (one app's) where state can vanish, most suspicious first
    (by score, then the latest activity). Frames are the canonical ``events``, ``calls``,
    ``responses``, ``state_writes``, ``session_state`` and ``runs``."""
    stored = stored if stored is not None else pd.DataFrame(columns=["session_id", "key"])
    runs = runs if runs is not None else pd.DataFrame()
    sessions = events.dropna(subset=["session_id"]).groupby("session_id", sort=False)
    who = sessions.agg(
        app_name=("app_name", "first"), user_id=("user_id", "first"), last_event_at=("ts", "max")
    )
    mine = writes.loc[writes["session_id"].isin(who.index)]
    held = stored.loc[stored["session_id"].isin(who.index)] if len(stored) else stored
    # no delta at all beside a stored state: the deltas were not kept (a Firestore export)
    deltas = bool(len(mine)) or held.empty
    signals: list[pd.DataFrame] = [_temp(mine), _partial(mine), _overlaps(events, runs, mine)]
    if deltas:
        answers = responses.loc[responses["session_id"].isin(who.index)]
        signals += [_quiet(answers, calls, mine, held), _differs(mine, held)]
    parts = [s for s in signals if len(s)]
    named = pd.concat([mine["key"], held["key"]]) if len(held) else mine["key"]
    checked = StateSuspects(
        pd.DataFrame(columns=SUSPECT_COLUMNS),
        sessions=len(who),
        keys=int(named.dropna().nunique()),
        answers=int(responses["session_id"].isin(who.index).sum()),
        stored_compared=bool(len(held)) and deltas,
        deltas=deltas,
    )
    if not parts:
        return checked
    return replace(checked, suspects=_by_session(pd.concat(parts, ignore_index=True), who))


SIGNAL_COLUMNS = ["session_id", "signal", "key", "detail", "answer"]
"""One row per signal and key: ``detail`` in words, ``answer`` the quiet answer (a dict)."""


def _signal(frame: pd.DataFrame, signal: str, detail: pd.Series | str) -> pd.DataFrame:
    out = pd.DataFrame(
        {"session_id": frame["session_id"], "signal": signal, "key": frame["key"]},
        index=frame.index,
    )
    out["detail"] = detail
    out["answer"] = None
    return out[SIGNAL_COLUMNS].reset_index(drop=True)


def _temp(writes: pd.DataFrame) -> pd.DataFrame:
    temp = writes.loc[writes["scope"].eq(StateScope.TEMP)].drop_duplicates(["session_id", "key"])
    return _signal(temp, "temp", "temp: key " + temp["key"] + " written (never applied)")


def _partial(writes: pd.DataFrame) -> pd.DataFrame:
    applied = writes.loc[~writes["partial"], ["session_id", "key"]]
    only = writes.loc[writes["partial"] & writes["scope"].ne(StateScope.TEMP)]
    only = only.drop_duplicates(["session_id", "key"])
    never = ~pd.MultiIndex.from_frame(only[["session_id", "key"]]).isin(
        pd.MultiIndex.from_frame(applied)
    )
    only = only.loc[never]
    return _signal(only, "partial", only["key"] + " carried only by partial events")


def _quiet(
    responses: pd.DataFrame, calls: pd.DataFrame, writes: pd.DataFrame, stored: pd.DataFrame
) -> pd.DataFrame:
    """Tool answers with no delta that name a key, or whose tool wrote keys elsewhere."""
    delta_events = writes["event_id"]
    quiet = responses.loc[
        ~responses["event_id"].isin(delta_events) & ~responses["name"].isin(ADK_TOOLS)
    ].reset_index(drop=True)
    if quiet.empty:
        return pd.DataFrame(columns=SIGNAL_COLUMNS)
    counts = pd.concat([writes["key"], stored["key"]] if len(stored) else [writes["key"]])
    keys = [
        str(k)
        for k in counts.dropna().value_counts().index[:KEYS_CONSIDERED]
        if not str(k).startswith("temp:")
    ]
    # tool names and answers repeat: match each distinct one, then spread to the rows
    tool_of, tools = pd.factorize(quiet["name"].fillna("").astype("str").str.lower())
    text_of, texts = pd.factorize(answer_texts(quiet, calls))
    tool_names, answer_text = pd.Series(tools, dtype="str"), pd.Series(texts, dtype="str")
    hits: list[pd.DataFrame] = []
    for key in keys:
        by_name, by_text = names_key(key, tool_names, answer_text)
        named = by_name.to_numpy(dtype=bool)[tool_of] | by_text.to_numpy(dtype=bool)[text_of]
        rows = np.flatnonzero(named)
        hits.append(
            pd.DataFrame(
                {"session_id": quiet["session_id"].to_numpy()[rows], "key": key, "row": rows}
            )
        )
    writers = _writers(responses, writes)
    if len(writers):
        wrote = quiet[["session_id", "name"]].reset_index().merge(writers, on="name")
        hits.append(wrote.rename(columns={"index": "row"})[["session_id", "key", "row"]])
    found = (
        pd.concat(hits, ignore_index=True)
        if hits
        else pd.DataFrame(columns=["session_id", "key", "row"])
    )
    found = found.drop_duplicates(["row", "key"]).reset_index(drop=True)
    rows = found["row"].to_numpy(dtype=int)
    found["invocation_id"] = quiet["invocation_id"].to_numpy()[rows]
    found["ts"] = quiet["ts"].to_numpy()[rows]
    found = found.loc[~_durable(found, writes, stored)]
    if found.empty:
        return pd.DataFrame(columns=SIGNAL_COLUMNS)
    answers = quiet.loc[found["row"]].reset_index(drop=True)
    stamp = answers["ts"].dt.strftime("%H:%M:%S.%f").str[:-3] + "Z"
    detail = answers["name"] + " answered at " + stamp + " with no state delta"
    out = found[["session_id", "key"]].reset_index(drop=True).assign(signal="quiet", detail=detail)
    out["answer"] = pd.Series(
        [
            {"tool": t, "invocation_id": i, "event_id": e, "ts": s}
            for t, i, e, s in zip(
                answers["name"], answers["invocation_id"], answers["event_id"], answers["ts"],
                strict=True,
            )
        ],
        index=out.index,
        dtype=object,
    )  # fmt: skip
    return out[SIGNAL_COLUMNS]


def _durable(found: pd.DataFrame, writes: pd.DataFrame, stored: pd.DataFrame) -> np.ndarray:
    """Which (answer, key) pairs name a key the session already holds: a delta of the same
    invocation or an earlier one of the session wrote it, or the stored state keeps it. Such
    an answer reads or echoes a durable key; it did not lose it."""
    applied = writes.loc[~writes["partial"] & writes["scope"].ne(StateScope.TEMP)]
    same = rows_in(found, applied, ["invocation_id", "key"])
    first = applied.groupby(["session_id", "key"], sort=False)["ts"].min().rename("first")
    written = found.join(first, on=["session_id", "key"])["first"]
    earlier = written.lt(found["ts"]).fillna(False).to_numpy(dtype=bool)
    kept = rows_in(found, stored, ["session_id", "key"]) if len(stored) else np.zeros_like(same)
    durable: np.ndarray = same | earlier | kept
    return durable


def _writers(responses: pd.DataFrame, writes: pd.DataFrame) -> pd.DataFrame:
    """(tool name, key) of every key a tool's answer carried in a delta."""
    named = responses.drop_duplicates("event_id").set_index("event_id")["name"]
    applied = writes.loc[~writes["partial"] & writes["scope"].ne(StateScope.TEMP)]
    pairs = pd.DataFrame({"name": applied["event_id"].map(named), "key": applied["key"]})
    return pairs.dropna().drop_duplicates().reset_index(drop=True)


def _differs(writes: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
    """Session keys whose stored value is not the last applied write's (a removal is a null);
    a session whose store holds none of its keys is not compared."""
    if stored.empty:
        return pd.DataFrame(columns=SIGNAL_COLUMNS)
    applied = writes.loc[~writes["partial"] & writes["scope"].eq(StateScope.SESSION)]
    last = applied.sort_values(["ts", "seq"], kind="stable").drop_duplicates(
        ["session_id", "key"], keep="last"
    )
    held = stored.loc[stored["scope"].eq(StateScope.SESSION)]
    held = held.sort_values("updated_at", kind="stable", na_position="first").drop_duplicates(
        ["session_id", "key"], keep="last"
    )
    both = last.merge(
        held[["session_id", "key", "value"]],
        on=["session_id", "key"],
        how="left",
        suffixes=("", "_stored"),
        indicator=True,
    )
    both = both.loc[both["session_id"].isin(held["session_id"])]
    replayed = _json(both["value"].where(~both["removed"].astype(bool)))
    kept = _json(both["value_stored"])
    differ = both.loc[replayed.ne(kept).to_numpy()]
    detail = "stored " + differ["key"] + " is not the value its deltas replay to"
    return _signal(differ, "differs", detail)


def _json(values: pd.Series) -> pd.Series:
    """Each value as canonical JSON ("null" for a missing one), to compare by value."""
    return values.map(lambda v: "null" if v is None or v != v else canonical_json(v))


def _overlaps(events: pd.DataFrame, runs: pd.DataFrame, writes: pd.DataFrame) -> pd.DataFrame:
    """A signal per overlapping pair of a session's invocations and each key either wrote."""
    mine = runs.loc[runs["session_id"].isin(events["session_id"])] if len(runs) else None
    ranges = invocation_ranges(events, mine if mine is not None else _no_runs())
    pairs = overlapping(ranges)
    if pairs.empty:
        return pd.DataFrame(columns=SIGNAL_COLUMNS)
    pairs = pairs.reset_index(drop=True).assign(pair=lambda p: p.index)
    sides = pd.concat(
        [
            pairs[["session_id", "pair", side]].rename(columns={side: "invocation_id"})
            for side in ("invocation_a", "invocation_b")
        ]
    )
    keyed = sides.merge(
        writes[["session_id", "invocation_id", "key"]].drop_duplicates(),
        on=["session_id", "invocation_id"],
        how="left",
    )
    keyed = keyed.drop_duplicates(["pair", "key"])
    said = "invocations " + pairs["invocation_a"] + " and " + pairs["invocation_b"] + " overlapped"
    return _signal(keyed, "overlap", keyed["pair"].map(said))


def _no_runs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "session_id": pd.Series(dtype="str"),
            "invocation_id": pd.Series(dtype="str"),
            "started_at": pd.Series(dtype="datetime64[ns, UTC]"),
            "updated_at": pd.Series(dtype="datetime64[ns, UTC]"),
        }
    )


def _by_session(found: pd.DataFrame, who: pd.DataFrame) -> pd.DataFrame:
    """One row per session: its score, its keys (most telling first), its signals in words."""
    order = {name: n for n, name in enumerate(WEIGHTS)}
    found = found.assign(rank=found["signal"].map(order)).sort_values(
        ["session_id", "rank"], kind="stable"
    )
    # a quiet answer counts once per answer, an overlap once per pair, the rest once per key
    unit = found["detail"].where(found["signal"].isin(["quiet", "overlap"]), found["key"])
    counted = found.assign(unit=unit.fillna("")).drop_duplicates(["session_id", "signal", "unit"])
    sessions = counted.groupby("session_id", sort=False)
    out = pd.DataFrame(
        {
            "score": counted["signal"].map(WEIGHTS).groupby(counted["session_id"]).sum(),
            "signals": sessions.size(),
            "overlaps": counted["signal"].eq("overlap").groupby(counted["session_id"]).sum(),
        }
    )
    keyed = found.dropna(subset=["key"]).drop_duplicates(["session_id", "key"])
    out["keys"] = per_group(keyed["key"], keyed["session_id"]).map(lambda k: k[:KEYS_SHOWN])
    for signal, column in (("temp", "temp_keys"), ("partial", "partial_keys")):
        part = keyed.loc[keyed["signal"].eq(signal)]
        out[column] = per_group(part["key"], part["session_id"])
    differ = found.loc[found["signal"].eq("differs")]
    out["differing_keys"] = per_group(differ["key"], differ["session_id"])
    out["why"] = _why(found)
    out["quiet_answers"] = _answers(found.loc[found["signal"].eq("quiet")])
    for column in ("keys", "temp_keys", "partial_keys", "differing_keys", "quiet_answers"):
        out[column] = out[column].map(lambda v: v if isinstance(v, tuple) else ())
    out = (
        out.rename_axis("session_id")
        .reset_index()
        .merge(who.reset_index(), on="session_id", how="left")
    )
    out = out.sort_values(
        ["score", "last_event_at", "session_id"], ascending=[False, False, True], kind="stable"
    )
    return out[SUSPECT_COLUMNS].astype({"score": "int64", "signals": "int64", "overlaps": "int64"})


def _answers(quiet: pd.DataFrame) -> pd.Series:
    """Per session, each quiet answer once with the keys it names."""
    if quiet.empty:
        return pd.Series(dtype=object)
    event = quiet["answer"].map(lambda a: a["event_id"])
    keys = per_group(quiet["key"], event)
    first = quiet.assign(event=event).drop_duplicates("event")
    answers = pd.Series(
        [{**a, "keys": keys[e]} for a, e in zip(first["answer"], first["event"], strict=True)],
        index=first.index,
        dtype=object,
    )
    return per_group(answers, first["session_id"])


def _why(found: pd.DataFrame) -> pd.Series:
    """Per session, its signals in words: a clause per signal kind, with the keys it names."""
    kinds = found.drop_duplicates(["session_id", "signal", "detail"])
    group = kinds["session_id"] + "\x00" + kinds["signal"]
    details = per_group(kinds["detail"], group, sep=", ")
    named = found.dropna(subset=["key"]).drop_duplicates(["session_id", "signal", "key"])
    keys = per_group(named["key"], named["session_id"] + "\x00" + named["signal"], sep=", ")
    keys = keys.reindex(details.index).fillna("")
    signal = details.index.str.split("\x00").str[1]
    text = np.where(
        signal == "quiet",
        details + ", after a call that names " + keys,
        np.where(
            (signal == "overlap") & (keys != ""), details + " (they wrote " + keys + ")", details
        ),
    )
    clauses = pd.Series(text, index=details.index, dtype="str")
    sessions = pd.Series(details.index.str.split("\x00").str[0], index=details.index)
    return per_group(clauses, sessions, sep="; ")
