"""The ASGI application: openenv-core's server over :class:`SessionEnvironment`.

openenv-core's ``HTTPEnvServer`` owns the protocol (the ``/ws`` WebSocket that OpenEnv's
clients speak, ``/health``, ``/schema``, ``/metadata``), one environment and one thread per
session, and the session limit. It is registered in its *production* mode, so the
stateless ``POST /reset`` and ``POST /step`` (a fresh environment per request, useless for
multi-step episodes) are not offered. :class:`SessionServer` adds what serving coding
tasks needs:

* an idle session is one whose client has sent nothing for ``session_timeout`` seconds
  *and* that runs no step (a long test run is not idleness); it is closed, which frees its
  place under ``max_sessions``, and its client's next message gets an error saying so;
* going over ``max_sessions`` is refused with an error naming the limit;
* on shutdown every session is closed.

``GET /tasks`` lists the served tasks' ids, names and kinds. In front of it all,
:class:`~gym_repost.serve.gate.Gate` checks the token and keeps malformed frames from
ending a session.

The idle reaper and the capacity error override methods of ``HTTPEnvServer`` that are
not public (``_create_session``, ``_run_in_session_executor``, ``_reap_idle_sessions``);
``pyproject.toml`` pins openenv-core below 0.4 for that reason, and the tests in
``tests/serve`` exercise each of them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig, ServerMode

from gym_repost.sandbox.base import Sandbox
from gym_repost.serve.config import ServeConfig
from gym_repost.serve.environment import SessionEnvironment, TaskCatalog, TaskObservation, ToolCallAction
from gym_repost.serve.gate import Gate
from gym_repost.task import Task

logger = logging.getLogger(__name__)

SHUTDOWN_REASON = "the server is shutting down"
CLOSE_SECONDS = 2.0
"""How long shutdown waits for the sessions to close."""


class SessionServer(HTTPEnvServer):
    """openenv-core's server with busy-aware idle timeouts and a clearer capacity error."""

    def __init__(self, factory: Callable[[], SessionEnvironment], config: ServeConfig) -> None:
        super().__init__(
            factory,
            ToolCallAction,
            TaskObservation,
            concurrency_config=ConcurrencyConfig(
                max_concurrent_envs=config.max_sessions, session_timeout=config.session_timeout
            ),
        )
        self._busy: Counter[str] = Counter()

    async def _create_session(self) -> tuple[str, Any]:
        try:
            return await super()._create_session()
        except SessionCapacityError as exc:
            raise SessionCapacityError(
                exc.active_sessions,
                exc.max_sessions,
                message=(
                    f"the server is full: {exc.active_sessions} of {exc.max_sessions} sessions are open "
                    "(gym-repost serve --max-sessions); close a session or retry later"
                ),
            ) from None

    async def _run_in_session_executor(self, session_id: str, func: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        self._busy[session_id] += 1
        self._update_session_activity(session_id)
        try:
            return await super()._run_in_session_executor(session_id, func, *args, **kw)
        finally:
            self._busy[session_id] -= 1
            if not self._busy[session_id]:
                del self._busy[session_id]
            self._update_session_activity(session_id)

    def idle_sessions(self, now: float) -> list[str]:
        """Sessions idle for longer than the timeout (none running a step)."""
        timeout = self._session_idle_timeout_s
        if timeout is None:
            return []
        return [
            sid
            for sid, info in list(self._session_info.items())
            if now - info.last_activity_at > timeout and not self._busy.get(sid)
        ]

    async def _reap_idle_sessions(self) -> None:
        timeout = self._session_idle_timeout_s
        if timeout is None:
            return
        interval = min(max(timeout / 4, 0.05), 5.0)
        reason = f"the session was idle for more than {timeout:g} s and was closed"
        while True:
            try:
                await asyncio.sleep(interval)
                for sid in self.idle_sessions(time.time()):
                    if sid in self.idle_sessions(time.time()):  # activity may have come meanwhile
                        await self.close_session(sid, reason)
            except asyncio.CancelledError:
                break
            except Exception:
                logger.warning("the idle-session reaper failed (it goes on)", exc_info=True)

    async def close_session(self, session_id: str, reason: str) -> None:
        """Close one session: its client's next message gets ``reason``."""
        env = self._sessions.get(session_id)
        if isinstance(env, SessionEnvironment):
            env.retire(reason)
        await self._destroy_session(session_id)

    async def close_all(self) -> None:
        """Close every session (on shutdown), waiting at most :data:`CLOSE_SECONDS`: a
        session in the middle of a step closes once the step ends, which the caller's
        closing of the sandbox (killing the runs) hastens."""
        closing = [asyncio.ensure_future(self.close_session(sid, SHUTDOWN_REASON)) for sid in list(self._sessions)]
        if closing:
            await asyncio.wait(closing, timeout=CLOSE_SECONDS)


def create_app(tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig) -> Any:
    """The ASGI application serving ``tasks`` on ``sandbox`` (started; not closed here).

    Returns the FastAPI application wrapped in :class:`Gate` (its ``app``; there,
    ``app.state.sessions`` is the :class:`SessionServer`).
    """
    catalog = TaskCatalog(tasks)
    server = SessionServer(functools.partial(SessionEnvironment, catalog, sandbox, config), config)
    app = FastAPI(title="gym-repost", description="Coding tasks as environments, over OpenEnv's protocol.")
    server.register_routes(app, mode=ServerMode.PRODUCTION)
    app.router.on_shutdown.append(server.close_all)
    app.state.sessions = server

    @app.get("/tasks", tags=["Environment Info"], summary="The served tasks: id, name, kind")
    def list_tasks() -> dict[str, list[dict[str, str]]]:
        return {"tasks": catalog.listing()}

    return Gate(app, config.token)
