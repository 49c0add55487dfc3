"""The side-effect journal (``tool_journal``): a SQL table, CSV or JSON lines → ``journal``.

Every column of the frame must exist in the source except ``function_call_id`` and ``result``;
map other names with the manifest's ``columns`` table. A row is rejected when it lacks a column
``tool_journal`` declares NOT NULL (key, invocation_id, status, created_at, updated_at; an
empty function_call_id is its "no call id"), when a timestamp is unreadable or (in files) has
no UTC offset, when result is not JSON, when its status is not INTENT or DONE, or when its key
repeats (the row updated last is kept). The window keeps entries active in it: created before
its end and updated after its start, or still INTENT. Entries for a business key written
outside the window are not read: widen the window before concluding a key has no entry.
"""

from __future__ import annotations

from collections.abc import Mapping

from incidentkit.frames import JournalStatus
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.sql import Predicates
from incidentkit.sources.sql.tables import Layout, load_table

LAYOUT = Layout(
    section="journal",
    frame="journal",
    table="tool_journal",
    key="key",
    optional=("function_call_id", "result"),
    not_null=("key", "invocation_id", "status", "created_at", "updated_at"),
    times=("created_at", "updated_at"),
    json=("result",),
    ints=(),
    statuses=(JournalStatus.INTENT.value, JournalStatus.DONE.value),
    open_statuses=(JournalStatus.INTENT.value,),
    window=("created_at", "updated_at"),
    filters=Predicates(invocation_id="invocation_id"),
    order=("key",),
)


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Load the journal named by ``spec`` into the ``journal`` frame (filters applied)."""
    return load_table(LAYOUT, spec, filters, environ=environ)
