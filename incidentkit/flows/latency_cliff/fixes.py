"""The fix for a tool that blocks on a slowed dependency, in the order it ships.

A read timeout on the client, a structured "unavailable" result the model can explain, a
reactive ``.timeout`` on the tool's wrapper as a second guard, and an alert on invocations open
longer than three quarters of the client timeout (45 s of 60 s): no error alert can fire when
nothing fails and things only wait. When the tool's threads wait for a lock held by a thread
blocked in the call, the client is that thread's, and the call moves out of the lock.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.frames import INT, STR

FIX_COLUMNS: Mapping[str, str] = {
    "step": INT,
    "fix": STR,
    "change": STR,
    "tool": STR,
    "client": STR,
}
"""One row per change, in order; every row names the tool and the client (missing without
thread dumps) the changes are for."""
READ_TIMEOUT_S = 5
ALERT_SHARE = 0.75


def alert_after_s(client_timeout_s: float) -> int:
    """When to alert on an open invocation: three quarters of the client timeout."""
    return max(1, round(ALERT_SHARE * client_timeout_s))


def fixes(
    tool: str,
    *,
    client: str | None,
    pool: str | None,
    client_timeout_s: float,
    lock: str | None = None,
    holder_frame: str | None = None,
) -> pd.DataFrame:
    """The changes, in order, naming ``tool`` and the ``client`` class it blocks in. When the
    blocked call runs in a thread (``pool``) holding the ``lock`` (a class) that ``tool``'s
    threads wait for, the client is that thread's, and a step moves the call out of the lock
    (at ``holder_frame``)."""
    if client and lock:
        by = pool or "the thread"
        on = f"{client} (used by {by} while it holds the {lock} lock {tool} waits for)"
    elif client:
        on = f"{client} (used by {tool})"
    else:
        on = f"every HTTP and database client {tool} uses"
    held = f"a {pool} thread" if pool else "a thread"
    if lock:
        held += f", and every {tool} call waiting for the {lock} lock,"
    rows = [
        (
            "read timeout",
            f"Give {on} a read timeout of {READ_TIMEOUT_S} s besides its connect timeout: a "
            f"read with no timeout holds {held} until the dependency answers.",
        ),
        *(
            [
                (
                    "release the lock before the call",
                    f"Call {client or 'the dependency'} outside the {lock} lock"
                    + (f" (in {holder_frame})" if holder_frame else "")
                    + ": fetch first, then take the lock only to swap the result in, so a "
                    f"slow dependency never holds {tool}'s callers.",
                )
            ]
            if lock
            else []
        ),
        (
            "structured unavailable result",
            f"When the call times out, make {tool} return a structured result such as "
            '{"status": "unavailable"}, and tell the model in its instruction to explain it '
            "to the user.",
        ),
        (
            "reactive timeout",
            f"Put .timeout(...) on the Single/Maybe that wraps {tool}, a second guard for a "
            "client that still blocks.",
        ),
        (
            "alert on open invocations",
            f"Alert on invocations open longer than {alert_after_s(client_timeout_s)} s (a "
            f"run.start with no run.end), before the {client_timeout_s:g} s client timeout: "
            "nothing fails, so no error alert fires.",
        ),
    ]
    frame = pd.DataFrame(
        [(i, fix, change, tool, client) for i, (fix, change) in enumerate(rows, start=1)],
        columns=list(FIX_COLUMNS),
    )
    return as_columns(frame, FIX_COLUMNS)


def fix_text(fix: pd.DataFrame) -> str:
    """The fixes as one numbered sentence list, for a finding's action."""
    return " ".join(
        f"{step}) {change}" for step, change in zip(fix["step"], fix["change"], strict=True)
    )
