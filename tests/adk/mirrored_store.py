"""One run of the conformance scenario stored by two of ADK's own session services at once.

``MirroredSessionService`` serves the runner from ``primary`` (the store under test: ADK's
``MongoDbSessionService``, ``RedisSessionService``) and repeats every write into ``mirror``
(ADK's ``SqliteSessionService``, a store the kit is already checked against): each session is
created in both with the same id and state, and each event appended to both as the runner made
it (a copy each, ids and times kept). The kit must then read the same frames from either store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from . import adk_world


class MirroredSessionService(BaseSessionService):
    """``primary`` serving the runner, every write repeated into ``mirror``."""

    def __init__(
        self,
        primary: BaseSessionService,
        mirror: BaseSessionService,
        closing: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.primary = primary
        self.mirror = mirror
        self.closing = closing

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session = await self.primary.create_session(
            app_name=app_name, user_id=user_id, state=dict(state or {}), session_id=session_id
        )
        await self.mirror.create_session(
            app_name=app_name, user_id=user_id, state=dict(state or {}), session_id=session.id
        )
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        return await self.primary.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        return await self.primary.list_sessions(app_name=app_name, user_id=user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        for service in (self.primary, self.mirror):
            await service.delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        copy = event.model_copy(deep=True)  # each service trims and stores its own
        appended = await self.primary.append_event(session, event)
        mirrored = await self.mirror.get_session(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id
        )
        assert mirrored is not None
        await self.mirror.append_event(mirrored, copy)
        return appended

    async def close(self) -> None:
        for service in (self.primary, self.mirror):
            close = getattr(service, "close", None)
            if close is not None:
                await close()
        if self.closing is not None:  # what the primary holds open but does not close
            await self.closing()


def build_mirrored(
    primary: BaseSessionService,
    folder: Path,
    closing: Callable[[], Awaitable[None]] | None = None,
) -> Any:
    """Run the conformance scenario (``adk_world.build_world``) through ``primary``, mirrored
    into ``folder/adk.db`` (SqliteSessionService); the world ADK's ``get_session`` reads back
    from ``primary``. ``closing`` runs when the run ends (a client the primary leaves open)."""
    folder.mkdir(parents=True, exist_ok=True)
    mirror = SqliteSessionService(db_path=str(folder / "adk.db"))
    service = MirroredSessionService(primary, mirror, closing)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(adk_world, "session_service", lambda store: service)
        return adk_world.build_world("mirrored", folder)
