"""The vanished-state and session flows on real google-adk 2.x stores (``adk2_world``): what they
say of a rewind, of compactions, of a resumed invocation and of a retried tool timeout, checked
against what ADK did (the worlds' recorded truths), never against numbers the kit computed.

- A rewind: the keys it restored or nulled are REWOUND, with the rewind event and the
  invocations it undid as proof; creation state it nulled says so (adk-python #4933); ``app:``
  and ``user:`` keys are never REWOUND; no marker is blamed on ``user``.
- Compaction firing several times: its events are no invocations and make no overlap; the dump
  labels each with the span and the events it summarised.
- Resume and timeout: no overlap, no extra invocation, checkpoints and the error labelled.

Like the other ADK tests these fail, never skip, without the adk extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from incidentkit.evidence import open_evidence
from incidentkit.findings import Findings
from incidentkit.flows import session, vanished_state
from incidentkit.flows.vanished_state.suspects import state_suspects

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them
SHARED = ("app:", "user:")


def run(flow: ModuleType, world: Any, session_id: str) -> tuple[Any, Findings]:
    """The flow's report and findings on one session of the world's store."""
    incident, settings = flow.setup(world.store.manifest, session_id=session_id)
    report = flow.triage(incident, settings)
    return report, flow.findings(report, incident, settings)


def item(found: Findings, item_id: str) -> Any:
    (hit,) = [entry for entry in found.items if entry.id == item_id]
    return hit


def keys_of(found: Findings) -> dict[str, Mapping[str, Any]]:
    return {str(row["key"]): row for row in item(found, "vanished_state/keys").rows}


def rewind_event(world: Any, before: str) -> dict[str, Any]:
    """The event ADK appended for the rewind before ``before``, as stored."""
    events: list[dict[str, Any]] = world.store.events()
    (event,) = [
        e
        for e in events
        if (e["event_data"].get("actions") or {}).get("rewind_before_invocation_id") == before
    ]
    return event


# --- rewind ----------------------------------------------------------------------------------


def test_every_key_the_rewind_reverted_is_rewound_with_its_proof(
    rewind: Any, w: ModuleType
) -> None:
    for truth in rewind.rewinds:
        stored = rewind_event(rewind, truth.before)
        _, found = run(vanished_state, rewind, truth.session_id)
        keys = keys_of(found)
        reverted = [key for key in truth.delta if not key.startswith(SHARED)]
        assert reverted and found.summary["rewound"] == len(reverted)
        for key in reverted:
            row = keys[key]
            assert row["verdict"] == "REWOUND", (key, row["why"])
            assert row["value"] == truth.delta[key] == rewind.states[truth.session_id].get(key)
            proof = row["changed_by"]
            assert proof["event_id"] == stored["id"] and proof["kind"] == "rewind"
            assert proof["rewind_before"] == truth.before
            assert tuple(proof["undid"]) == truth.undone
            assert proof["invocation_id"] == stored["invocation_id"]
            stamped = pd.Timestamp(stored["event_data"]["timestamp"], unit="s", tz="UTC")
            assert abs(pd.Timestamp(proof["ts"]) - stamped) < pd.Timedelta(milliseconds=1)
            assert truth.before in row["why"] and stored["id"] in row["brief"]
            undone = row["written_by"]
            if undone is not None:  # the write the rewind undid, in an undone invocation
                assert undone["invocation_id"] in truth.undone
            creation = key in w.CREATION_STATE or key in w.CART_STATE
            assert (row["cause"] == "creation_state_nulled") is creation, key
            if creation:
                assert "#4933" in row["why"] and undone is None
        assert "Runner.rewind_async" in item(found, "vanished_state/keys").action


def test_a_restored_key_names_the_write_the_rewind_undid(rewind: Any, w: ModuleType) -> None:
    (main,) = [truth for truth in rewind.rewinds if truth.session_id == rewind.session_id]
    _, found = run(vanished_state, rewind, rewind.session_id)
    plan = keys_of(found)["plan"]
    assert plan["value"] == w.REWIND_DELTA["plan"]  # restored, not nulled
    assert plan["written_by"]["invocation_id"] == main.undone[0]  # premium, undone
    assert plan["written_by"]["tool"] == "choose_plan"
    assert "restored it to" in plan["why"]


def test_app_and_user_keys_are_never_rewound_and_keep_their_writes(
    rewind: Any, w: ModuleType
) -> None:
    (main,) = [truth for truth in rewind.rewinds if truth.session_id == rewind.session_id]
    _, found = run(vanished_state, rewind, rewind.session_id)
    keys = keys_of(found)
    shared = [key for key in w.KEY_FATES if key.startswith(SHARED)]
    for key in shared:
        row = keys[key]
        assert row["verdict"] != "REWOUND", key
        assert row["value"] == rewind.states[rewind.session_id].get(key), key
    for key in ("user:locale", "app:promo"):  # overwritten in an undone invocation: kept
        row = keys[key]
        assert row["changed_by"]["invocation_id"] in main.undone
        assert "does not revert app:/user: keys" in row["why"]
    for key in ("user:segment", "app:banner"):
        assert (keys[key]["verdict"], keys[key]["cause"]) == ("PRESENT", "set_at_creation")


def test_no_marker_is_blamed_on_user(rewind: Any) -> None:
    for truth in rewind.rewinds:
        stored = rewind_event(rewind, truth.before)
        _, found = run(vanished_state, rewind, truth.session_id)
        for row in item(found, "vanished_state/keys").rows:
            for field in ("written_by", "changed_by", "raced_with"):
                proof = row[field]
                if proof is not None and proof["event_id"] == stored["id"]:
                    assert proof["author"].startswith(f"a rewind (event {stored['id']}) undoing")
            assert f"user in invocation {stored['invocation_id']}" not in row["why"]
            assert "by user" not in row["brief"] and "removed by user" not in row["why"]


def test_the_session_dump_marks_what_the_rewind_undid(rewind: Any) -> None:
    for truth in rewind.rewinds:
        stored = rewind_event(rewind, truth.before)
        report, found = run(session, rewind, truth.session_id)
        dump = report.dump
        undone = dump["invocation_id"].isin(truth.undone)
        assert dump.loc[undone, "rewound_by"].eq(stored["id"]).all()
        assert dump.loc[~undone, "rewound_by"].isna().all()
        assert found.summary["rewound_events"] == int(undone.sum())
        assert found.summary["rewinds"] == 1
        assert found.summary["invocations"] == len(rewind.invocations[truth.session_id])
        line = report.dump.set_index("event_id").loc[stored["id"], "label"]
        assert all(invocation in line for invocation in truth.undone) and "rewind" in line
        (text,) = [
            row for row in report.text.splitlines() if f"inv={stored['invocation_id']}" in row
        ]
        assert "author=user" not in text and line in text


# --- compaction ------------------------------------------------------------------------------


def test_compactions_are_no_invocations_and_make_no_overlap(compaction: Any) -> None:
    report, found = run(session, compaction, compaction.session_id)
    assert found.summary["invocations"] == len(compaction.invocations)
    assert found.summary["compactions"] == len(compaction.compactions)
    assert found.summary["overlapping_invocations"] == 0
    assert set(report.ranges["invocation_id"]) == set(compaction.invocations)
    vanished, kept = run(vanished_state, compaction, compaction.session_id)
    assert vanished.overlaps.empty and kept.summary["overlapping_invocations"] == 0
    assert set(vanished.ranges["invocation_id"]) == set(compaction.invocations)
    incident = open_evidence(compaction.store.manifest)
    suspects = state_suspects(
        incident.events, incident.calls, incident.responses, incident.frame("state_writes")
    )
    assert suspects.suspects.empty or int(suspects.suspects["overlaps"].sum()) == 0


def test_the_dump_labels_each_compaction_with_its_span_and_events(compaction: Any) -> None:
    report, _ = run(session, compaction, compaction.session_id)
    rows = report.dump.set_index("event_id")
    for n, truth in enumerate(compaction.compactions):
        assert rows.loc[truth.event_id, "kind"] == "compaction"
        label = rows.loc[truth.event_id, "label"]
        for bound in (truth.start_timestamp, truth.end_timestamp):
            clock = pd.Timestamp(bound, unit="s", tz="UTC").strftime("%H:%M:%S.%f")[:-3] + "Z"
            assert clock in label, (clock, label)
        assert f": {len(truth.covered_events)} event(s) summarised" in label
        later = {e for t in compaction.compactions[n + 1 :] for e in t.covered_events}
        alone = len(set(truth.covered_events) - later)
        covered = rows["compacted_by"].eq(truth.event_id)
        assert int(covered.sum()) == alone
        assert set(rows.index[covered]) == set(truth.covered_events) - later
        if alone != len(truth.covered_events):
            assert f", {alone} covered" in label
        (text,) = [
            line for line in report.text.splitlines() if f"inv={truth.invocation_id}" in line
        ]
        assert "author=user" not in text and label in text


# --- resume and timeout ----------------------------------------------------------------------


def test_a_resumed_session_has_no_overlap_and_its_checkpoints_are_labelled(resume: Any) -> None:
    report, found = run(session, resume, resume.session_id)
    assert found.summary["invocations"] == len(resume.model_calls)
    assert found.summary["overlapping_invocations"] == 0
    assert found.summary["checkpoints"] == sum(resume.checkpoints.values())
    checkpoints = report.dump.loc[report.dump["kind"].eq("checkpoint")]
    assert checkpoints["label"].str.startswith("checkpoint of agent ").all()
    counted = checkpoints.groupby("invocation_id").size().to_dict()
    assert counted == dict(resume.checkpoints)
    vanished, kept = run(vanished_state, resume, resume.session_id)
    assert vanished.overlaps.empty and kept.summary["overlapping_invocations"] == 0
    assert set(vanished.ranges["invocation_id"]) == set(resume.model_calls)


def test_a_retried_timeout_is_labelled_and_adds_no_invocation(timeout: Any) -> None:
    report, found = run(session, timeout, timeout.session_id)
    assert found.summary["invocations"] == len(timeout.model_calls)
    assert found.summary["overlapping_invocations"] == 0
    errors = report.dump.loc[report.dump["kind"].eq("error")]
    assert errors["invocation_id"].tolist() == [timeout.retried]
    (raised,) = timeout.raised
    assert errors["label"].iloc[0].startswith(f"error with no content: {raised} from ")
    vanished, _ = run(vanished_state, timeout, timeout.session_id)
    assert vanished.overlaps.empty


def test_a_run_max_llm_calls_stopped_failed_and_its_error_is_not_quiet(runaway: Any) -> None:
    world = runaway
    hit = world.runaway
    report, found = run(session, world, hit.session_id)
    stopped = report.errors.loc[report.errors["invocation_id"].eq(hit.invocation_id)]
    assert len(stopped) == 1 and stopped["message"].iloc[0] == world.limit_error
    assert stopped["run_outcome"].tolist() == ["error"], "ADK raised it out of run_async"
    assert report.quiet.empty
    assert found.summary["quiet_errors"] == 0
