"""The latency_cliff flow's settings (:mod:`incidentkit.flows.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.settings import (
    BASELINE,
    BASELINE_ENGINE,
    Duration,
    FlowSettings,
    Seconds,
    setting,
)

if TYPE_CHECKING:
    import pandas as pd

BUCKET = Duration(fix='give a duration such as "1m", "30s" or "5m"')


@dataclass(frozen=True, kw_only=True)
class LatencySettings(FlowSettings):
    """The app's latency judged at ``as_of``: the client's timeout, the percentile bucket, and
    the days before to compare with."""

    as_of: pd.Timestamp
    client_timeout_s: float = setting(
        Seconds(fix="give the timeout after which a client gives up, e.g. 60"),
        profile=True,
        default=60.0,
    )
    bucket: str = setting(BUCKET, default="1min")
    baseline: str | None = setting(BASELINE, default=None)
    """``START/END`` of the days before (a duration given ends at ``as_of``); None: none."""
    baseline_engine: bool = setting(BASELINE_ENGINE, default=True)

    @property
    def bucket_span(self) -> pd.Timedelta:
        """The percentile bucket's length."""
        return BUCKET.span("bucket", self.bucket)
