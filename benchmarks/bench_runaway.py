"""Benchmark: the runaway flow's counts and loop signatures against a per-invocation Python loop.

    .venv/bin/python benchmarks/bench_runaway.py                  # 2,000,000+ events
    .venv/bin/python benchmarks/bench_runaway.py --events 200000 --repeat 5

The runaway incident (fixtures/runaway: some 50 invocations and 800 events, one of them a
500-call loop that hits maxLlmCalls, one a transfer ping-pong, one 8 identical retries) is
tiled in memory until the events reach ``--events``: every frame the flow reads (runs, events,
calls, responses, state_writes, spans, diagnostics) is repeated row for row, each copy with
fresh run, session, invocation, event and call ids (a suffix ``.<copy>``) and fresh hex trace
and span ids, so each copy keeps its three runaway invocations and the traffic is denser in
the same 40-minute window. The frames are conformed and their dtypes checked against the loaders'
contract (``incidentkit.frames``).

Three timings over the same frames (best of ``--repeat``; the baseline once by default):

- ``kit core``: ``counts_by_source`` + ``combined`` (model calls per invocation from the
  diagnostics run.end lines, the model-authored events and the call_llm spans) and the three
  signatures (``ping_pongs``, ``repeated_calls``, ``silent_loops``);
- ``kit triage``: the whole ``triage_runaway`` (also limit hits, the distribution, tokens,
  cost and the worst invocation's steps);
- ``baseline``: the same counts, limit hits and signatures written as a straightforward loop:
  rows grouped by invocation in dicts, each invocation's events walked in order.

The baseline's model calls per invocation and flagged invocations (with each signature's
details) are checked against each kit timing before its row is printed. Printed: events,
invocations, seconds, the ratio kit / baseline, the peak traced memory of each (tracemalloc,
a separate untimed run: allocations made by the work, the input frames not counted) and the
memory of the input frames (``memory_usage(deep=True)``). Each row is printed as soon as it is
measured and checked: at the default size a run of the whole triage takes minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

import incidentkit as ik
from incidentkit.flows.common import Frames
from incidentkit.flows.runaway.signatures import ping_pongs, repeated_calls, silent_loops
from incidentkit.flows.runaway.triage import (
    RunawayReport,
    combined,
    counts_by_source,
    triage_runaway,
)
from incidentkit.frames import SpanKind, conform, spec_of

PACK = Path(__file__).resolve().parents[1] / "fixtures" / "runaway"
AS_OF = pd.Timestamp(json.loads((PACK / "truth.json").read_text(encoding="utf-8"))["as_of"])
"""The incident's judgement time (its window's end): every copy stays in the window."""
EXIT_KEYS = ("review:approved",)
NAMES = ("runs", "events", "calls", "responses", "state_writes", "spans", "diagnostics")
TEXT_IDS = {
    "runs": ("run_id", "session_id", "invocation_id"),
    "events": ("event_id", "session_id", "invocation_id"),
    "calls": ("event_id", "session_id", "invocation_id", "call_id"),
    "responses": ("event_id", "session_id", "invocation_id", "call_id"),
    "state_writes": ("event_id", "session_id", "invocation_id"),
    "spans": ("session_id", "invocation_id", "tool_call_id"),
    "diagnostics": ("session_id", "invocation_id", "call_id"),
}
"""The id columns each copy renames, by frame: the same id gets the same new id everywhere."""


# -- the scaled frames -------------------------------------------------------------------------


def fresh_text(values: pd.Series, copies: int) -> np.ndarray:
    """``values`` tiled ``copies`` times, each copy's ids suffixed ``.<copy>``; missing stays."""
    codes, uniques = pd.factorize(values)
    width = len(uniques)
    named = pd.Series(np.tile(np.asarray(uniques, dtype=object), copies), dtype=object)
    copy_of = pd.Series(np.repeat(np.arange(copies), width).astype(str), dtype=object)
    fresh = (named + "." + copy_of).to_numpy(dtype=object)
    at = (codes[None, :] + width * np.arange(copies)[:, None]).ravel()
    out = np.asarray(fresh[at], dtype=object) if width else np.full(len(at), None, dtype=object)
    out[np.tile(codes < 0, copies)] = None
    return out


def fresh_hex(columns: list[pd.Series], copies: int, digits: int) -> list[np.ndarray]:
    """Hex ids of ``digits`` for ``columns`` (factorised together, so a parent keeps pointing at
    its span): the copy in the high half, the original's number in the low half."""
    codes, _ = pd.factorize(pd.concat(columns, ignore_index=True))
    half = digits // 2
    copy_of = np.repeat(np.arange(copies), len(codes))
    numbers = np.tile(codes, copies)
    text = pd.Series(copy_of).map(f"{{:0{half}x}}".format) + pd.Series(numbers).map(
        f"{{:0{half}x}}".format
    )
    out = text.to_numpy(dtype=object)
    out[np.tile(codes < 0, copies)] = None
    cuts = np.cumsum([0, *(len(column) for column in columns)])
    per_copy = out.reshape(copies, len(codes))
    return [per_copy[:, lo:hi].ravel() for lo, hi in itertools.pairwise(cuts)]


def scaled(base: dict[str, pd.DataFrame], copies: int) -> dict[str, pd.DataFrame]:
    """Every frame of ``base`` repeated ``copies`` times with fresh ids, conformed."""
    out = {}
    for name, frame in base.items():
        tiled = frame.iloc[np.tile(np.arange(len(frame)), copies)].reset_index(drop=True)
        renamed: dict[str, Any] = {
            column: fresh_text(frame[column], copies) for column in TEXT_IDS[name]
        }
        if name == "spans":
            (renamed["trace_id"],) = fresh_hex([frame["trace_id"]], copies, 32)
            renamed["span_id"], renamed["parent_span_id"] = fresh_hex(
                [frame["span_id"], frame["parent_span_id"]], copies, 16
            )
        conformed = conform(name, tiled.assign(**renamed))
        got = {column: str(dtype) for column, dtype in conformed.dtypes.items()}
        if got != spec_of(name).dtypes:
            raise SystemExit(f"{name}: dtypes {got} are not the contract's {spec_of(name).dtypes}")
        out[name] = conformed
    return out


# -- what both sides answer --------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What the kit and the baseline must agree on."""

    model_calls: dict[str, int]
    """Per invocation, the best source's count."""
    pongs: dict[str, tuple[tuple[str, ...], int]]
    """Per ping-pong invocation: its two agents (sorted) and the longest alternating run."""
    repeats: set[tuple[str, str, int]]
    """(invocation, tool, repeats) of every repeated identical call."""
    loops: dict[str, tuple[tuple[str, ...], int, str | None]]
    """Per silent loop: the cycling agents, the iterations and the exit key nobody wrote."""
    hits: set[str] | None = None
    """The invocations that hit maxLlmCalls (none: not computed)."""

    @property
    def looped(self) -> set[str]:
        return set(self.pongs) | {inv for inv, _, _ in self.repeats} | set(self.loops)

    @property
    def flagged(self) -> set[str]:
        return self.looped | (self.hits or set())


def kit_core(frames: Frames) -> Answer:
    """The flow's counting and signatures, as the triage calls them."""
    counted = combined(counts_by_source(frames))
    pongs = ping_pongs(frames.events)
    repeats = repeated_calls(frames.calls, frames.responses)
    loops = silent_loops(
        frames.events, frames.state_writes, spans=frames.spans, exit_keys=EXIT_KEYS
    )
    return Answer(
        model_calls=dict(zip(counted["invocation_id"], counted["model_calls"], strict=True)),
        pongs={
            inv: (tuple(agents), int(n))
            for inv, agents, n in zip(
                pongs["invocation_id"], pongs["agents"], pongs["transfers"], strict=True
            )
        },
        repeats={
            (inv, tool, int(n))
            for inv, tool, n in zip(
                repeats["invocation_id"], repeats["tool"], repeats["repeats"], strict=True
            )
        },
        loops={
            inv: (tuple(agents), int(n), key if isinstance(key, str) else None)
            for inv, agents, n, key in zip(
                loops["invocation_id"],
                loops["agents"],
                loops["iterations"],
                loops["exit_key"],
                strict=True,
            )
        },
    )


def kit_triage(frames: Frames) -> RunawayReport:
    return triage_runaway(frames, as_of=AS_OF, loop_exit_keys=EXIT_KEYS)


# -- the baseline: one invocation at a time ----------------------------------------------------

LIMIT_ERROR = re.compile(
    r"LlmCallsLimitExceeded(?:Exception|Error)|limit of\s+`?\d+`?\s+exceeded", re.I
)
LIMIT_OF = re.compile(r"limit of\s+`?(\d+)`?\s+exceeded", re.I)
DEFAULT_LIMIT = 500
TRANSFER_TOOL = "transfer_to_agent"
MIN_TRANSFERS = 4
MIN_REPEATS = 3
MIN_ITERATIONS = 3
PERIODS = (2, 3, 4)


def is_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str)


def limit_error(value: Any) -> bool:
    return isinstance(value, str) and LIMIT_ERROR.search(value) is not None


def count_of(value: Any) -> int | None:
    return None if pd.isna(value) else int(value)


def named_limit(value: Any) -> int | None:
    found = LIMIT_OF.search(value) if isinstance(value, str) else None
    return int(found.group(1)) if found else None


def baseline(frames: Frames) -> Answer:
    """Counts, limit hits and signatures, one invocation at a time over plain Python rows."""
    answered = {r.event_id for r in frames.responses[["event_id"]].itertuples(index=False)}
    events: dict[str, list[Any]] = defaultdict(list)
    columns = ["invocation_id", "session_id", "seq", "event_id", "author", "partial"]
    columns += ["error_code", "error_message", "final_response", "transfer_to_agent", "escalate"]
    for e in frames.events[columns].itertuples(index=False):
        if is_text(e.invocation_id):
            events[e.invocation_id].append(e)
    calls: dict[str, list[Any]] = defaultdict(list)
    for c in frames.calls[["invocation_id", "name", "args_key"]].itertuples(index=False):
        if is_text(c.invocation_id):
            calls[c.invocation_id].append(c)
    written: dict[str, set[Any]] = defaultdict(set)
    for w in frames.state_writes[["invocation_id", "key"]].itertuples(index=False):
        if is_text(w.invocation_id):
            written[w.invocation_id].add(w.key)

    # per source, per invocation: (model calls, final); and the limit errors each names
    limits: list[int] = []
    errors: set[str] = set()
    ends: dict[str, int] = {}
    warned: dict[str, int] = {}
    columns = ["invocation_id", "kind", "llm_calls", "message"]
    for d in frames.diagnostics[columns].itertuples(index=False):
        ended_badly = d.kind in ("run.error", "run.end", "model.error")
        if ended_badly and limit_error(d.message) and is_text(d.invocation_id):
            errors.add(d.invocation_id)
            limits.append(named_limit(d.message) or 0)
        made_calls = count_of(d.llm_calls)
        if not is_text(d.invocation_id) or made_calls is None:
            continue
        if d.kind == "run.end":
            ends[d.invocation_id] = made_calls
        elif d.kind == "run.many_llm_calls":
            warned[d.invocation_id] = max(warned.get(d.invocation_id, 0), made_calls)
    by_diagnostics = {inv: (n, True) for inv, n in ends.items()}
    by_diagnostics.update({inv: (n, False) for inv, n in warned.items() if inv not in ends})
    span_calls: dict[str, int] = defaultdict(int)
    whole: set[str] = set()
    columns = ["invocation_id", "kind", "status", "status_message"]
    for s in frames.spans[columns].itertuples(index=False):
        refused = s.status == "ERROR" and limit_error(s.status_message)
        if refused and is_text(s.invocation_id):
            errors.add(s.invocation_id)
            limits.append(named_limit(s.status_message) or 0)
        if not is_text(s.invocation_id):
            continue
        if s.kind == SpanKind.INVOCATION:
            whole.add(s.invocation_id)
        elif s.kind == SpanKind.CALL_LLM and not refused:
            span_calls[s.invocation_id] += 1

    model_calls: dict[str, int] = {}
    pongs: dict[str, tuple[tuple[str, ...], int]] = {}
    loops: dict[str, tuple[tuple[str, ...], int, str | None]] = {}
    by_events: dict[str, tuple[int, bool]] = {}
    for inv, rows in events.items():
        rows.sort(key=lambda e: (e.session_id, e.seq))
        made, final, escalated = 0, False, False
        transfers: list[Any] = []
        turns: list[list[Any]] = []  # [author, transfers]
        for e in rows:
            final = final or e.final_response
            escalated = escalated or e.escalate
            refused = limit_error(e.error_code) or limit_error(e.error_message)
            if refused:
                errors.add(inv)
                limits.append(named_limit(e.error_message) or 0)
            if e.author != "user" and not e.partial and e.event_id not in answered and not refused:
                made += 1
            if is_text(e.transfer_to_agent):
                transfers.append(e)
            if e.author != "user":
                if turns and turns[-1][0] == e.author:
                    turns[-1][1] += is_text(e.transfer_to_agent)
                else:
                    turns.append([e.author, int(is_text(e.transfer_to_agent))])
        if made:
            by_events[inv] = (made, final)
        pong = ping_pong(transfers)
        if pong:
            pongs[inv] = pong
        loop = cycle(turns)
        if loop and not escalated:
            agents, rounds = loop
            missing = next((k for k in EXIT_KEYS if k not in written.get(inv, ())), None)
            if missing or not EXIT_KEYS:
                loops[inv] = (agents, rounds, missing)

    known = set(by_diagnostics) | set(by_events)
    by_spans = {
        inv: (n, inv in whole) for inv, n in span_calls.items() if not known or inv in known
    }
    sources = (by_diagnostics, by_events, by_spans)
    for inv in set(by_diagnostics) | set(by_events) | set(by_spans):
        counts = [source[inv] for source in sources if inv in source]
        ended = [n for n, final in counts if final]
        model_calls[inv] = ended[0] if ended else max(n for n, _ in counts)

    limit = max((n for n in limits if n), default=DEFAULT_LIMIT)
    hits = errors | {inv for inv, n in model_calls.items() if n >= limit}
    repeats = set()
    for inv, rows in calls.items():
        same = Counter(
            (c.name, c.args_key)
            for c in rows
            if is_text(c.name) and is_text(c.args_key) and c.name != TRANSFER_TOOL
        )
        repeats |= {(inv, tool, n) for (tool, _), n in same.items() if n >= MIN_REPEATS}
    return Answer(model_calls, pongs, repeats, loops, hits)


def ping_pong(transfers: list[Any]) -> tuple[tuple[str, ...], int] | None:
    """The longest run of transfers alternating between two agents, when long enough."""
    to = [e.transfer_to_agent for e in transfers]
    best, end, streak = 0, 0, 0
    for i in range(2, len(to)):
        if to[i] == to[i - 2] and to[i] != to[i - 1]:
            streak += 1
            if streak > best:
                best, end = streak, i
        else:
            streak = 0
    if best + 2 < MIN_TRANSFERS:
        return None
    return tuple(sorted(set(to[end - best - 1 : end + 1]))), best + 2


def cycle(turns: list[list[Any]]) -> tuple[tuple[str, ...], int] | None:
    """Two to four agents taking turns for enough rounds with no transfer: agents, rounds."""
    for period in PERIODS:
        best, end, streak = 0, 0, 0
        for i in range(period, len(turns)):
            if turns[i][0] == turns[i - period][0]:
                streak += 1
                if streak > best:
                    best, end = streak, i
            else:
                streak = 0
        rounds = math.ceil((best + period) / period)
        if best and rounds >= MIN_ITERATIONS:
            run = turns[end - best + 1 - period : end + 1]
            if sum(transfers for _, transfers in run):
                return None
            return tuple(dict.fromkeys(author for author, _ in run)), rounds
    return None


# -- timing and the check ----------------------------------------------------------------------


def best_of(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return min(times), result


def peak_mib(work: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def check(name: str, got: Answer, expected: Answer) -> None:
    """Exit when the kit's answer differs from the baseline's."""
    wrong = [
        part
        for part in ("model_calls", "pongs", "repeats", "loops")
        if getattr(got, part) != getattr(expected, part)
    ]
    if got.hits is not None and got.flagged != expected.flagged:
        wrong.append("flagged")
    if wrong:
        raise SystemExit(f"MISMATCH ({name}): {', '.join(wrong)} differ from the baseline")


def as_answer(report: RunawayReport) -> Answer:
    """The report's counts, signatures (from its loop rows) and flagged invocations."""
    loops = report.loops
    of = {kind: loops.loc[loops["kind"].eq(kind)] for kind in loops["kind"].unique()}
    empty = loops.iloc[:0]
    pongs = of.get("transfer_ping_pong", empty)
    repeats = of.get("repeated_identical_call", empty)
    cycles = of.get("loop_agent_exit_never_written", empty)
    flagged = set(report.flagged["invocation_id"])
    return Answer(
        model_calls=dict(
            zip(report.counted["invocation_id"], report.counted["model_calls"], strict=True)
        ),
        pongs={
            inv: (tuple(agents), int(n))
            for inv, agents, n in zip(
                pongs["invocation_id"], pongs["agents"], pongs["transfers"], strict=True
            )
        },
        repeats={
            (inv, tool, int(n))
            for inv, tool, n in zip(
                repeats["invocation_id"], repeats["tool"], repeats["repeats"], strict=True
            )
        },
        loops={
            inv: (tuple(agents), int(n), key if isinstance(key, str) else None)
            for inv, agents, n, key in zip(
                cycles["invocation_id"],
                cycles["agents"],
                cycles["iterations"],
                cycles["exit_key"],
                strict=True,
            )
        },
        hits=flagged - set(loops["invocation_id"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="at least this many events")
    parser.add_argument("--repeat", type=int, default=3, help="best of, for the kit")
    parser.add_argument("--baseline-repeat", type=int, default=1, help="best of, for the baseline")
    args = parser.parse_args()

    began = time.perf_counter()
    evidence = ik.open_evidence(PACK)
    base = {name: evidence.frame(name) for name in NAMES}
    copies = max(1, math.ceil(args.events / len(base["events"])))
    frames = Frames(**scaled(base, copies))
    built = time.perf_counter() - began
    sizes = {name: getattr(frames, name) for name in NAMES}
    held = {name: frame.memory_usage(deep=True).sum() / 2**20 for name, frame in sizes.items()}
    invocations = frames.events["invocation_id"].nunique()
    print(
        f"frames: {copies:,} copies of {PACK.name}, {len(frames.events):,} events, "
        f"{invocations:,} invocations, built in {built:.1f} s"
    )
    print("  " + ", ".join(f"{name} {len(frame):,}" for name, frame in sizes.items()))
    print(
        f"  input memory (deep): {sum(held.values()):,.0f} MiB ("
        + ", ".join(f"{name} {mib:,.0f}" for name, mib in held.items())
        + ")",
        flush=True,
    )

    base_s, expected = best_of(args.baseline_repeat, lambda: baseline(frames))
    print(
        f"baseline answers: model calls of {len(expected.model_calls):,} invocations; "
        f"{len(expected.pongs):,} ping-pongs, {len(expected.repeats):,} repeated calls, "
        f"{len(expected.loops):,} silent loops, {len(expected.hits or ()):,} limit hits; "
        f"{len(expected.flagged):,} flagged invocations (each row below: the same answers)"
    )
    print(f"\n{'':32} {'seconds':>9} {'kit/baseline':>13} {'peak MiB':>9}")

    def row(name: str, seconds: float, work: Callable[[], Any]) -> None:
        peak = peak_mib(work)
        print(f"{name:32} {seconds:9.2f} {seconds / base_s:13.3f} {peak:9,.0f}", flush=True)

    row("baseline (per-invocation loop)", base_s, lambda: baseline(frames))
    core_s, core = best_of(args.repeat, lambda: kit_core(frames))
    check("kit core", core, expected)
    row("kit core (counts + signatures)", core_s, lambda: kit_core(frames))
    triage_s, report = best_of(args.repeat, lambda: kit_triage(frames))
    check("kit triage", as_answer(report), expected)
    row("kit triage_runaway", triage_s, lambda: kit_triage(frames))
    print(
        f"\nsummary: {len(frames.events):,} events, {invocations:,} invocations; baseline "
        f"{base_s:.2f} s, kit core {core_s:.2f} s, triage {triage_s:.2f} s; kit / baseline: "
        f"core {core_s / base_s:.2f}, triage {triage_s / base_s:.2f}"
    )


if __name__ == "__main__":
    main()
