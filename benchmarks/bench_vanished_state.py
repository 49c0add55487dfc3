"""Benchmark: the vanished-state and session flows on one session among a million events, against
a straightforward per-row Python loop over the same frames.

    .venv/bin/python benchmarks/bench_vanished_state.py                  # 1,000,000+ events
    .venv/bin/python benchmarks/bench_vanished_state.py --events 100000 --repeat 5

The vanished-state incident (fixtures/vanished_state: the shop session whose keys vanish, and
background traffic of four other apps) is tiled in memory until the events reach ``--events``,
each copy with fresh run, session, invocation, event and call ids (``bench_runaway.scaled``):
every copy of the shop session is another session of the same app. The flows judge copy 0's.

Timings over the same frames (best of ``--repeat``; the baseline once by default):

- ``kit vanished_state``: ``triage_vanished_state`` (the writes the session sees across its app
  and user, the replay, every key's verdict, invocation ranges and overlaps);
- ``kit session``: ``triage_session`` (the dump, the app's errors that vanish, the swimlane's
  rows);
- ``baseline``: the replayed state, the overlapping invocations and the app's error rows as a
  loop over every row (``itertuples``), dicts keyed by session and invocation.

The baseline's replayed state, overlap pairs and error locations are checked against the kit's
before a row is printed. Printed: events, seconds, kit / baseline, and the peak traced memory of
each (tracemalloc, a separate untimed run; the input frames not counted).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from bench_runaway import best_of, peak_mib, scaled

import incidentkit as ik
from incidentkit.flows.common import Frames
from incidentkit.flows.session.triage import SessionReport, triage_session
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.flows.vanished_state.triage import VanishedReport, triage_vanished_state

PACK = Path(__file__).resolve().parents[1] / "fixtures" / "vanished_state"
TRUTH = json.loads((PACK / "truth.json").read_text(encoding="utf-8"))
AS_OF = pd.Timestamp(TRUTH["as_of"])
NAMES = ("runs", "events", "calls", "responses", "state_writes", "spans", "diagnostics")
Answer = tuple[dict[str, Any], set[tuple[str, str]], set[str]]
"""The replayed state (key → value), the overlapping pairs, the app's error locations."""


def kit_vanished(frames: Frames, sid: str, keys: list[str]) -> VanishedReport:
    return triage_vanished_state(frames, sid, as_of=AS_OF, keys=keys)


def kit_session(frames: Frames, ref: SessionRef) -> SessionReport:
    return triage_session(frames, ref, as_of=AS_OF)


def kit_answer(vanished: VanishedReport, session: SessionReport) -> Answer:
    replayed = vanished.replayed.loc[vanished.replayed["origin"].eq("event delta")]
    state = dict(zip(replayed["key"], replayed["value"], strict=True))
    pairs = set(
        zip(vanished.overlaps["invocation_a"], vanished.overlaps["invocation_b"], strict=True)
    )
    return state, pairs, set(session.errors["location"])


def baseline(frames: Frames, sid: str, app: str) -> Answer:
    """The same answers, one row at a time."""
    owners: dict[str, tuple[str, str]] = {}
    for e in frames.events.itertuples(index=False):
        owners[e.session_id] = (e.app_name, e.user_id)
    user = owners[sid][1]
    seen = []
    for w in frames.state_writes.itertuples(index=False):
        of_app, of_user = owners.get(w.session_id, (None, None))
        shared = of_app == app and (w.scope == "app" or (w.scope == "user" and of_user == user))
        if w.session_id == sid or shared:
            seen.append(w)
    seen.sort(key=lambda w: (w.ts, w.session_id, w.seq))
    state: dict[str, Any] = {}
    for w in seen:
        if w.partial or w.scope == "temp":
            continue
        if w.removed:
            state.pop(w.key, None)
        else:
            state[w.key] = w.value
    spans: dict[str, list[pd.Timestamp]] = defaultdict(list)
    for e in frames.events.itertuples(index=False):
        if e.session_id == sid:
            spans[e.invocation_id].append(e.ts)
    for r in frames.runs.itertuples(index=False):
        if r.session_id == sid:
            spans[r.invocation_id] += [r.started_at, r.updated_at]
    ranges = sorted((min(t), max(t), inv) for inv, t in spans.items())
    pairs = {
        (a, b)
        for i, (a_start, a_end, a) in enumerate(ranges)
        for b_start, _, b in ranges[i + 1 :]
        if b_start < a_end and a_start <= b_start
    }
    errors = {
        e.event_id
        for e in frames.events.itertuples(index=False)
        if e.app_name == app and (isinstance(e.error_code, str) or isinstance(e.error_message, str))
    }
    kinds = {"model.error", "tool.error", "run.error", "rx.undeliverable"}
    errors |= {d.location for d in frames.diagnostics.itertuples(index=False) if d.kind in kinds}
    return state, pairs, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="at least this many events")
    parser.add_argument("--repeat", type=int, default=3, help="best of, for the kit")
    parser.add_argument("--baseline-repeat", type=int, default=1, help="best of, for the baseline")
    args = parser.parse_args()

    began = time.perf_counter()
    evidence = ik.open_evidence(PACK)
    base = {name: evidence.frame(name) for name in NAMES}
    copies = max(1, math.ceil(args.events / len(base["events"])))
    frames = Frames(**scaled(base, copies))
    expected = TRUTH["expected"]
    sid, app = f"{expected['session_id']}.0", expected["app_name"]
    keys = [key["key"] for key in expected["keys"]]
    ref = SessionRef(app, expected["user_id"], sid)
    app_events = frames.events.loc[frames.events["app_name"].eq(app)]
    print(
        f"frames: {copies:,} copies of {PACK.name}, {len(frames.events):,} events "
        f"({len(app_events):,} of app {app}, {app_events['session_id'].nunique():,} of its "
        f"sessions), {len(frames.state_writes):,} state writes, built in "
        f"{time.perf_counter() - began:.1f} s",
        flush=True,
    )
    base_s, answer = best_of(args.baseline_repeat, lambda: baseline(frames, sid, app))
    print(
        f"baseline answers: {len(answer[0])} replayed keys, {len(answer[1])} overlapping "
        f"pair(s), {len(answer[2]):,} error rows (each row below: the same answers)"
    )
    print(f"\n{'':32} {'seconds':>9} {'kit/baseline':>13} {'peak MiB':>9}")

    def row(name: str, seconds: float, work: Callable[[], Any]) -> None:
        print(
            f"{name:32} {seconds:9.2f} {seconds / base_s:13.3f} {peak_mib(work):9,.0f}", flush=True
        )

    row("baseline (per-row loop)", base_s, lambda: baseline(frames, sid, app))
    vanished_s, vanished = best_of(args.repeat, lambda: kit_vanished(frames, sid, keys))
    session_s, session = best_of(args.repeat, lambda: kit_session(frames, ref))
    got = kit_answer(vanished, session)
    if got != answer:
        raise SystemExit(
            f"the kit and the baseline disagree:\n  kit      {got}\n  baseline {answer}"
        )
    row("kit triage_vanished_state", vanished_s, lambda: kit_vanished(frames, sid, keys))
    row("kit triage_session", session_s, lambda: kit_session(frames, ref))
    print(
        f"\nsummary: {len(frames.events):,} events; baseline {base_s:.2f} s, vanished_state "
        f"{vanished_s:.2f} s ({vanished_s / base_s:.2f}), session {session_s:.2f} s "
        f"({session_s / base_s:.2f}); verdicts {', '.join(vanished.keys['verdict'])}"
    )


if __name__ == "__main__":
    main()
