"""The run ledger (``agent_run``): a SQL table, or its CSV or JSON-lines export → ``runs``.

Every column of the frame must exist in the source except ``owner`` and ``lease_until``; map
other names with the manifest's ``columns`` table (``columns = { started_at = "created" }``).
A row is rejected when it lacks a column ``agent_run`` declares NOT NULL (run_id, app_name,
user_id, session_id, status, attempts, started_at, updated_at), when a timestamp is unreadable
or (in files) has no UTC offset, when attempts is not an integer, when request is not JSON,
when its status is not RUNNING, PAUSED, DONE, FAILED or PARKED, or when its run_id repeats (the
row updated last is kept). A row without its request (also NOT NULL) is kept with a warning:
it still tells the run's state, but cannot be replayed from the ledger. The window keeps runs
active in it: started before its end and updated after its start, or still RUNNING or PAUSED.
"""

from __future__ import annotations

from collections.abc import Mapping

from incidentkit.frames import RunStatus
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.sql import Predicates
from incidentkit.sources.sql.tables import Layout, load_table

LAYOUT = Layout(
    section="ledger",
    frame="runs",
    table="agent_run",
    key="run_id",
    optional=("owner", "lease_until"),
    not_null=(
        *("run_id", "app_name", "user_id", "session_id", "status", "attempts"),
        *("started_at", "updated_at"),
    ),
    warn_null={"request": "the run cannot be replayed from the ledger"},
    times=("lease_until", "started_at", "updated_at"),
    json=("request",),
    ints=("attempts",),
    statuses=tuple(s.value for s in RunStatus if s is not RunStatus.UNKNOWN),
    open_statuses=(RunStatus.RUNNING.value, RunStatus.PAUSED.value),
    window=("started_at", "updated_at"),
    filters=Predicates(app_name="app_name", session_id="session_id", invocation_id="invocation_id"),
    order=("started_at", "run_id"),
)


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Load the ledger named by ``spec`` into the ``runs`` frame (filters applied)."""
    return load_table(LAYOUT, spec, filters, environ=environ)
