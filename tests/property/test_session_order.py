"""Property test: the events' session order and ``seq`` agree with pandas' stable sort and
``cumcount``, which the normaliser used before it sorted without copying the frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from incidentkit.frames import STR, TS
from incidentkit.sources.events.adk_events import SESSION_KEYS, _seq, _session_order

KEY = st.sampled_from(["", "a", "b", "B", "é", "e\u0301", "a\x00", "\U0001f600"])
EVENT = st.tuples(KEY, KEY, KEY, st.integers(min_value=0, max_value=3))


@given(st.lists(EVENT, max_size=40))
def test_session_order_and_seq_are_pandas_stable_sort_and_cumcount(
    rows: list[tuple[str, str, str, int]],
) -> None:
    events = pd.DataFrame(
        {
            **{
                key: pd.Series([r[i] for r in rows], dtype=STR)
                for i, key in enumerate(SESSION_KEYS)
            },
            "ts": pd.Series(pd.to_datetime([r[3] for r in rows], unit="s", utc=True), dtype=TS),
            "pos": np.arange(len(rows), dtype=np.int64)[::-1],  # not the input order
        }
    )
    expected = events.sort_values([*SESSION_KEYS, "ts", "pos"], kind="stable")
    ordered = events.iloc[_session_order(events)].reset_index(drop=True)
    pd.testing.assert_frame_equal(ordered, expected.reset_index(drop=True))
    counted = ordered.groupby(list(SESSION_KEYS), sort=False).cumcount().to_numpy()
    assert _seq(ordered).tolist() == counted.tolist()
