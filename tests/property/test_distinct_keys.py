"""Property test: the check for repeated keys (ledger, journal, event ids) agrees with counting."""

from __future__ import annotations

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from incidentkit.sources.loaded import all_distinct

KEYS = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(["a", "A", "", "é", "e\u0301"])))


@given(KEYS)
def test_keys_are_distinct_exactly_when_no_text_repeats(keys: list[str]) -> None:
    assert all_distinct(pd.Series(keys, dtype="str")) == (len(set(keys)) == len(keys))


@given(KEYS, st.integers(min_value=0, max_value=5))
def test_a_missing_key_is_checked_the_pandas_way(keys: list[str], at: int) -> None:
    with_missing = pd.Series([*keys[:at], None, *keys[at:]], dtype="str")
    assert all_distinct(with_missing) == (not with_missing.duplicated().any())
