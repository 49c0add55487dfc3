"""The cliff's change point: the exact l2 split (checked against ruptures), the BIC-style test,
and the cases seed 003 names: a tail-only change, a few slow outliers, hangs, a healthy window."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import ruptures
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.flows.latency_cliff.cliff import MIN_SIZE, best_split, changes, find_cliff

PROPERTY = settings(max_examples=60, deadline=None, derandomize=bool(os.environ.get("CI")))


def _brute_force(values: np.ndarray, min_size: int) -> int:
    costs = [
        ((values[:k] - values[:k].mean()) ** 2).sum()
        + ((values[k:] - values[k:].mean()) ** 2).sum()
        for k in range(min_size, len(values) - min_size + 1)
    ]
    return min_size + int(np.argmin(costs))


@PROPERTY
@given(
    st.lists(
        st.floats(min_value=0.0, max_value=12.0, allow_nan=False),
        min_size=2 * MIN_SIZE,
        max_size=80,
    ).filter(lambda xs: len(set(xs)) > len(xs) // 2)
)
def test_the_prefix_sum_split_is_the_exact_l2_split(values: list[float]) -> None:
    series = np.array(values)
    found = best_split(series)
    assert found is not None
    at, gain = found
    total = ((series - series.mean()) ** 2).sum()
    left, right = series[:at], series[at:]
    rest = ((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum()
    assert gain == pytest.approx(total - rest, abs=1e-6)
    brute = _brute_force(series, MIN_SIZE)
    brute_rest = ((series[:brute] - series[:brute].mean()) ** 2).sum() + (
        (series[brute:] - series[brute:].mean()) ** 2
    ).sum()
    assert rest == pytest.approx(brute_rest, abs=1e-6)  # ties may pick another split


@pytest.mark.parametrize("seed", range(5))
def test_the_split_equals_ruptures_binseg_l2(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    at = int(rng.integers(40, 360))
    values = np.concatenate(
        [rng.normal(1.0, 0.4, at), rng.normal(1.0 + rng.uniform(0.3, 2), 0.4, n - at)]
    )
    ours = best_split(values, min_size=MIN_SIZE)
    assert ours is not None
    theirs = ruptures.Binseg(model="l2", min_size=MIN_SIZE, jump=1).fit(values).predict(n_bkps=1)
    assert ours[0] == theirs[0]


def _log_normal(
    rng: np.random.Generator, n: int, median_ms: float, sigma: float = 0.35
) -> np.ndarray:
    return np.exp(rng.normal(np.log(median_ms), sigma, n))


@pytest.mark.parametrize("seed", range(30))
def test_a_healthy_window_has_no_cliff(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # a mix of quick answers and tool turns, as real traffic is: bimodal, not Gaussian
    quick = rng.random(600) < 0.3
    ms = np.where(quick, _log_normal(rng, 600, 900), _log_normal(rng, 600, 4000))
    at, _ = find_cliff(pd.Series(ms))
    assert at is None


@pytest.mark.parametrize("seed", range(10))
def test_a_few_slow_outliers_are_no_cliff(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ms = _log_normal(rng, 500, 4000)
    ms[rng.choice(500, 4, replace=False)] = 45_000.0
    at, _ = find_cliff(pd.Series(ms))
    assert at is None


def test_a_step_is_found_within_a_few_invocations() -> None:
    rng = np.random.default_rng(7)
    ms = np.concatenate([_log_normal(rng, 300, 4000), _log_normal(rng, 300, 55_000, 0.1)])
    at, found = find_cliff(pd.Series(ms))
    assert at is not None and abs(at - 300) <= 2
    assert [c.up for c in found if c.at == at] == [True]


def test_a_tail_only_change_is_found_where_the_median_stays() -> None:
    """15 % of runs go from 4 s to 60 s: the median does not move, the l2 cost sees it."""
    rng = np.random.default_rng(3)
    before = _log_normal(rng, 1000, 4000, 0.2)
    after = _log_normal(rng, 1000, 4000, 0.2)
    slow = rng.random(1000) < 0.15
    after[slow] = 60_000.0
    ms = pd.Series(np.concatenate([before, after]))
    assert ms.iloc[1000:].median() < 1.3 * ms.iloc[:1000].median()
    at, _ = find_cliff(ms)
    assert at is not None and abs(at - 1000) <= 60


def test_a_cliff_of_hangs_is_found_from_their_ages() -> None:
    """After the cliff every run hangs; each enters the series at its (growing) age."""
    rng = np.random.default_rng(5)
    ages = np.linspace(360_000, 61_000, 40)  # the oldest started first
    ms = pd.Series(np.concatenate([_log_normal(rng, 60, 4000), ages]))
    at, _ = find_cliff(ms)
    assert at == 60


def test_a_recovery_alone_is_no_cliff() -> None:
    rng = np.random.default_rng(11)
    ms = np.concatenate([_log_normal(rng, 200, 50_000, 0.1), _log_normal(rng, 200, 4000)])
    at, found = find_cliff(pd.Series(ms))
    assert at is None
    assert [c.up for c in found] == [False]


def test_a_rise_then_recovery_gives_the_rise_and_both_changes() -> None:
    rng = np.random.default_rng(13)
    ms = np.concatenate(
        [
            _log_normal(rng, 200, 4000),
            _log_normal(rng, 100, 50_000, 0.1),
            _log_normal(rng, 200, 4000),
        ]
    )
    at, found = find_cliff(pd.Series(ms))
    assert at is not None and abs(at - 200) <= 2
    assert [c.up for c in found] == [True, False]


def test_too_short_a_series_has_no_split() -> None:
    assert best_split(np.ones(2 * MIN_SIZE - 1)) is None
    assert changes(np.ones(3)) == []
    assert find_cliff(pd.Series([], dtype=float)) == (None, [])
