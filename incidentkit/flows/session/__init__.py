"""One session, read before forming a theory (seed 003): the session dump.

``dump``: :func:`session_dump` (one row per stored event) and :func:`dump_text` (the seed's
line per event), printed by ``incidentkit session SESSION_ID --evidence PATH``. The session
notebook (errors that vanish, the swimlane) and its registry entry come with the vanished-state
issue.
"""

from incidentkit.flows.session.dump import DUMP_COLUMNS, dump_text, session_dump

__all__ = ["DUMP_COLUMNS", "dump_text", "session_dump"]
