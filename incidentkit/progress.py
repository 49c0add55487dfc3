"""Progress of long loads: records read per source and their rate, on standard error.

:func:`loading` opens one bar per source being read (``Evidence`` does it); readers call
:func:`advance` as records go by, a batch at a time. A bar appears only when a load takes
longer than :data:`DELAY` seconds, so small incidents print nothing, and it ends with the
source's total and rate::

    events: 1.20M records [00:06, 196k records/s]

Nothing is drawn when :data:`QUIET_ENV` is set (``--quiet``; the runner sets it in every
notebook kernel, so reports and scheduled runs hold no bars) or inside :func:`quiet`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Never

from tqdm.std import tqdm

QUIET_ENV = "INCIDENTKIT_QUIET"
DELAY = 2.0
"""Seconds a load runs before its bar is drawn."""
BATCH = 10_000
"""Records a reader counts before it calls :func:`advance` (a bar costs nothing per record)."""

_bar: ContextVar[tqdm[Never] | None] = ContextVar("incidentkit_progress_bar", default=None)
_silenced: ContextVar[bool] = ContextVar("incidentkit_progress_quiet", default=False)


def is_quiet() -> bool:
    """Whether bars are off here: :data:`QUIET_ENV` set, or inside :func:`quiet`."""
    return _silenced.get() or bool(os.environ.get(QUIET_ENV, "").strip())


@contextmanager
def quiet() -> Iterator[None]:
    """No bar inside this block (``--quiet``)."""
    token = _silenced.set(True)
    try:
        yield
    finally:
        _silenced.reset(token)


@contextmanager
def loading(label: str) -> Iterator[None]:
    """One source being read: a bar named ``label``, drawn after :data:`DELAY` seconds."""
    if is_quiet():
        yield
        return
    bar: tqdm[Never] = tqdm(
        desc=label, unit=" records", unit_scale=True, delay=DELAY, file=sys.stderr, leave=True
    )
    token = _bar.set(bar)
    try:
        yield
    finally:
        _bar.reset(token)
        bar.close()


def advance(records: int) -> None:
    """Count ``records`` more read by the source loading now (nothing when none is)."""
    bar = _bar.get()
    if bar is not None and records > 0:
        bar.update(records)
