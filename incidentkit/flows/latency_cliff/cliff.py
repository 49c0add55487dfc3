"""The cliff: the change point where per-invocation latency shifts, by binary segmentation.

The series is every invocation's log latency in start order; an open one enters at its age at
``as_of`` (censored: it took at least that long), so a cliff made mostly of hangs is found.

The method is binary segmentation with the l2 cost (a shift in the mean of log latency):
:func:`best_split` finds the exact single split that minimises the summed squared deviation
of the two segments, the split ``ruptures.Binseg(model="l2", jump=1)`` finds (a test holds
the two equal), computed from prefix sums in O(n) so a million invocations cost milliseconds
where ruptures' cost is evaluated segment by segment. A split counts when it passes a
BIC-style test, ``n * log(RSS_before / RSS_after) > penalty * log(n)`` (the Gaussian
likelihood of one more mean and one more change), and each side is searched again for further
changes. The l2 cost sees a tail-only change that the l1 cost (the median) misses; the log
keeps a few slow outliers from dominating, and ``min_size`` keeps a split from isolating them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PENALTY = 3.0
"""BIC-style penalty per change, times log(n): two parameters (the split and the new mean) and
a margin for latency that is not Gaussian."""
MIN_SIZE = 5
"""The fewest invocations on either side of a change."""
MIN_RATIO = 1.5
"""A cliff must raise the p50 or the p95 of the series by at least this factor."""
MAX_CHANGES = 8


@dataclass(frozen=True)
class Change:
    """One change point: the first invocation after it (position in the series) and its gain
    in the l2 cost; ``up`` when latency rises across it."""

    at: int
    gain: float
    up: bool


def _segment_cost(
    prefix: np.ndarray, squares: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Summed squared deviation from the mean of each segment ``[lo, hi)``."""
    sums = prefix[hi] - prefix[lo]
    costs: np.ndarray = squares[hi] - squares[lo] - sums * sums / (hi - lo)
    return costs


def best_split(values: np.ndarray, *, min_size: int = MIN_SIZE) -> tuple[int, float] | None:
    """The exact l2 single split of ``values``: (first index after it, the cost it saves), or
    None when the series is too short for two segments of ``min_size``."""
    n = len(values)
    if n < 2 * min_size:
        return None
    centred = values - values.mean()  # keeps the prefix sums well conditioned
    prefix = np.concatenate(([0.0], np.cumsum(centred)))
    squares = np.concatenate(([0.0], np.cumsum(centred * centred)))
    splits = np.arange(min_size, n - min_size + 1)
    zero = np.zeros_like(splits)
    end = np.full_like(splits, n)
    split_cost = _segment_cost(prefix, squares, zero, splits) + _segment_cost(
        prefix, squares, splits, end
    )
    total = float(squares[n] - prefix[n] ** 2 / n)
    best = int(np.argmin(split_cost))
    return int(splits[best]), total - float(split_cost[best])


def changes(
    values: np.ndarray, *, min_size: int = MIN_SIZE, penalty: float = PENALTY
) -> list[Change]:
    """Every change point binary segmentation accepts, in series order."""
    found: list[Change] = []
    pending = [(0, len(values))]
    while pending and len(found) < MAX_CHANGES:
        lo, hi = pending.pop()
        segment = values[lo:hi]
        split = best_split(segment, min_size=min_size)
        if split is None:
            continue
        at, gain = split
        n = hi - lo
        rss = float(((segment - segment.mean()) ** 2).sum())
        rest = rss - gain
        if rss <= 0 or (rest > 0 and n * np.log(rss / rest) <= penalty * np.log(n)):
            continue
        up = bool(segment[at:].mean() > segment[:at].mean())
        found.append(Change(lo + at, gain, up))
        pending += [(lo, lo + at), (lo + at, hi)]
    return sorted(found, key=lambda change: change.at)


def find_cliff(
    ms: pd.Series,
    *,
    min_size: int = MIN_SIZE,
    penalty: float = PENALTY,
    min_ratio: float = MIN_RATIO,
) -> tuple[int | None, list[Change]]:
    """Where ``ms`` (latency in start order, censored values included) falls off a cliff: the
    position of the first invocation after it, or None; and every change found.

    The cliff is the rising change with the largest gain whose p50 or p95 after is at least
    ``min_ratio`` times the one before (each side measured up to the neighbouring change).
    """
    values = np.log(np.maximum(ms.to_numpy(dtype=float), 1.0))
    found = changes(values, min_size=min_size, penalty=penalty)
    bounds = [0, *(c.at for c in found), len(values)]
    best: int | None = None
    best_gain = 0.0
    for i, change in enumerate(found, start=1):
        if not change.up:
            continue
        before = ms.iloc[bounds[i - 1] : bounds[i]]
        after = ms.iloc[bounds[i] : bounds[i + 1]]
        rose = any(
            float(after.quantile(q)) >= min_ratio * float(before.quantile(q)) for q in (0.5, 0.95)
        )
        if rose and change.gain > best_gain:
            best, best_gain = change.at, change.gain
    return best, found
