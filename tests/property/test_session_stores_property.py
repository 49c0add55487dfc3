"""Properties of the MongoDB and Redis session-store decoders.

- Extended JSON: whatever document of the BSON types ADK's stores hold (32- and 64-bit
  integers, doubles with their non-finite values, text, booleans, nulls, datetimes, ObjectIds,
  nested objects and arrays), :func:`mongodb.plain` of what ``bson.json_util`` writes for it, in
  mongoexport's canonical, relaxed and legacy modes, is the document's plain JSON: integers
  exact, doubles to the bit, a datetime as its epoch seconds, an ObjectId as its hex text.
- Documents and dump records: whatever JSON a file holds, each record is read or rejected with
  its location, never an exception (but a file whose documents have the shapes of two
  collections, refused as a SourceError naming both).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from incidentkit.errors import SourceError
from incidentkit.manifest import Filters
from incidentkit.sources.events import mongodb, redis_sessions
from incidentkit.sources.loaded import RejectSink

bson = pytest.importorskip("bson", reason="bson comes with pymongo, from the adk extra")
json_util = pytest.importorskip("bson.json_util")

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    report_multiple_bugs=False,
)
MODES = {
    "canonical": json_util.CANONICAL_JSON_OPTIONS,
    "relaxed": json_util.RELAXED_JSON_OPTIONS,
    "legacy": json_util.LEGACY_JSON_OPTIONS,
}
UTC = datetime.UTC

# -- strategies --------------------------------------------------------------------------------

datetimes = st.datetimes(
    min_value=datetime.datetime(1900, 1, 1), max_value=datetime.datetime(2200, 1, 1)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=UTC))
bson_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**31), 2**31 - 1)
    | st.integers(-(2**63), 2**63 - 1).map(bson.int64.Int64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | datetimes
    | st.binary(min_size=12, max_size=12).map(bson.ObjectId)
)
field_names = st.text(max_size=6).filter(lambda k: not k.startswith("$") and "\0" not in k)
bson_docs = st.dictionaries(
    field_names,
    st.recursive(
        bson_scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(field_names, inner, max_size=3),
        max_leaves=10,
    ),
    max_size=5,
)


def expected(value: Any) -> Any:
    """The plain JSON a BSON value stands for, as the kit reads it."""
    if isinstance(value, dict):
        return {k: expected(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expected(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, bson.ObjectId):
        return str(value)
    if isinstance(value, bson.int64.Int64):
        return int(value)
    return value


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and types kept (1 is not 1.0, True is not 1)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


# -- extended JSON -----------------------------------------------------------------------------


@PROPERTY
@given(doc=bson_docs, mode=st.sampled_from(sorted(MODES)))
def test_extended_json_reads_as_the_plain_json_it_stands_for(
    doc: dict[str, Any], mode: str
) -> None:
    import json

    written = json.loads(json_util.dumps(doc, json_options=MODES[mode]))
    got = mongodb.plain(written)
    want = expected(doc)
    assert same(got, want), (mode, written, got, want)


# -- documents and dump records ----------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = [
    "_id", "id", "app_name", "user_id", "session_id", "event_id", "event_data", "events",
    "state", "timestamp", "update_time", "last_update_time", "$date", "$numberLong", "$oid",
    "key", "value", "type", "expiretime",
]  # fmt: skip
shaped = st.dictionaries(st.sampled_from(KEYS), json_values | st.text(max_size=30), max_size=7)
records = st.lists(shaped | json_values, min_size=1, max_size=6)


@PROPERTY
@given(docs=records)
def test_any_documents_are_read_or_rejected_with_their_location(docs: list[Any]) -> None:
    sink, store = RejectSink("events"), mongodb.Store()
    locations = [f"f{i}.jsonl:1" for i in range(len(docs))]
    for i, (doc, location) in enumerate(zip(docs, locations, strict=True)):
        # a file each: no two collections meet in one
        for batch in mongodb.batches([doc], [location], f"f{i}.jsonl", store, sink):
            assert len(batch.values) == len(batch.meta) > 0
            assert batch.meta["ts"].dtype == "datetime64[ns, UTC]"
            assert batch.meta["location"].str.startswith(location).all()
    state = store.state(Filters(), sink)
    assert {"app_name", "key", "value"} <= set(state.columns)
    for where in sink.frame()["location"]:
        assert where.startswith(tuple(locations)), where


@PROPERTY
@given(docs=st.lists(shaped, min_size=2, max_size=6))
def test_one_file_of_two_collections_is_refused_naming_both(docs: list[Any]) -> None:
    sink, store = RejectSink("events"), mongodb.Store()
    kinds = [mongodb.kind(mongodb.plain(d)) for d in docs]
    locations = [f"x.jsonl:{i + 1}" for i in range(len(docs))]
    try:
        for _ in mongodb.batches(docs, locations, "x.jsonl", store, sink):
            pass
    except SourceError as err:
        first = next(k for k in kinds if k is not None)
        other = next(k for k in kinds if k is not None and k != first)
        assert "two collections" in str(err)
        assert f"{first} (first at" in str(err) and f"{other} (at" in str(err)
    else:
        assert len(set(kinds) - {None}) <= 1


dump_keys = st.sampled_from(["adk:session:", "adk:session:a:u:", "other:"]).flatmap(
    lambda prefix: st.text(max_size=8).map(lambda tail: prefix + tail)
)
dump_records = st.fixed_dictionaries(
    {"key": dump_keys},
    optional={
        "value": json_values | st.text(max_size=40),
        "type": st.sampled_from(["string", "hash"]),
        "expiretime": st.integers(-2, 2**40),
    },
)


@PROPERTY
@given(entries=st.lists(dump_records | json_values, min_size=1, max_size=6))
def test_any_dump_records_are_read_or_rejected_with_their_location(entries: list[Any]) -> None:
    sink = RejectSink("events")
    store = redis_sessions.Store(redis_sessions.DEFAULT_PREFIX)
    locations = [f"dump.jsonl:{i + 1}" for i in range(len(entries))]
    batch = redis_sessions.read_dump(entries, locations, store, sink)
    if batch is not None:
        assert batch.meta["location"].str.startswith(tuple(locations)).all()
    for where in sink.frame()["location"]:
        assert where.startswith(tuple(locations)), where
    for part in store.states:
        assert set(part["source"]) <= {"session state", "app_state key", "user_state key"}
