"""ASGI middleware in front of the served application: the token, and frames that would
otherwise end a session.

openenv-core's WebSocket handler answers a frame that is not JSON with an error and goes
on, but one that is JSON and not an object (``[1, 2]``), one nested deeper than the
parser's stack (``[[[...]]]`` a thousand deep), or a binary frame, ends the session; such
frames are answered here (as is one nested deeper than :data:`MAX_FRAME_DEPTH`, or larger
than :data:`MAX_FRAME_CHARS`), and the session goes on. When the handler sends an
error and then closes at once (the server is full), the close waits for the client's next
message (at most :data:`LINGER_SECONDS`), so that the client reads the error instead of
finding the connection closed under its request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
from collections.abc import Sequence
from typing import Any

from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from gym_repost import bounded_json
from gym_repost.errors import UntrustedDataError

LINGER_SECONDS = 5.0
MAX_FRAME_DEPTH = 64
"""Deepest nesting of objects and arrays a frame may have (an action needs about five)."""
MAX_FRAME_CHARS = 16 * 1024 * 1024
"""Largest frame read, in characters (uvicorn's own limit on a WebSocket message is 16 MiB)."""

NOT_AN_OBJECT = json.dumps(
    {
        "type": "error",
        "data": {
            "message": 'a message must be a JSON object in a text frame: {"type": "reset" | "step", "data": {...}}',
            "code": "VALIDATION_ERROR",
        },
    }
)


class Gate:
    """The middleware (see the module docstring).

    With ``token``, every request that does not carry it is refused with 401, a WebSocket
    handshake too. Accepted: ``Authorization: Bearer TOKEN``, or HTTP Basic with TOKEN as
    the password (what a client sends for ``ws://user:TOKEN@host:port``, OpenEnv's clients
    included); compared in constant time. A connection that closes while a reply is due
    (the client left, the server is shutting down), or a session cancelled at shutdown, is
    not a crash to log.
    """

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token else None

    def authorized(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        """Whether the request's headers carry the token (always, without a token)."""
        if self._token is None:
            return True
        carried = _carried_token(headers)
        return carried is not None and hmac.compare_digest(carried, self._token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket") and not self.authorized(scope.get("headers", [])):
            await _refuse(scope, send)
            return
        if kind != "websocket":
            await self.app(scope, receive, send)
            return
        channel = _Channel(receive, send)
        try:
            await self.app(scope, channel.receive, channel.send)
        except (WebSocketDisconnect, WebSocketDisconnected):
            pass  # the connection closed (client gone, server shutting down) while a reply was due
        except asyncio.CancelledError:
            # uvicorn cancels the sessions still in a step once its shutdown grace is over;
            # the session is closed with the others, and uvicorn would log this as a crash
            pass


def _carried_token(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    value = next((v for k, v in headers if k.lower() == b"authorization"), b"")
    scheme, _, credentials = value.strip().partition(b" ")
    if scheme.lower() == b"bearer":
        return credentials.strip()
    if scheme.lower() == b"basic":
        try:
            return base64.b64decode(credentials.strip(), validate=True).partition(b":")[2]
        except (binascii.Error, ValueError):
            return None
    return None


async def _refuse(scope: dict[str, Any], send: Any) -> None:
    body = json.dumps(
        {"detail": "missing or wrong token: send Authorization: Bearer TOKEN (or use http://user:TOKEN@host:port)"}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="gym-repost"')]
    if scope["type"] == "http":
        prefix = "http.response"
    elif "websocket.http.response" in scope.get("extensions", {}):
        prefix = "websocket.http.response"
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong token"})
        return
    await send({"type": f"{prefix}.start", "status": 401, "headers": headers})
    await send({"type": f"{prefix}.body", "body": body})


def _error(message: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": "VALIDATION_ERROR"}})


class _Channel:
    """One WebSocket's ``receive`` and ``send``, as the application sees them."""

    def __init__(self, receive: Any, send: Any) -> None:
        self._receive = receive
        self._send = send
        self._last_was_error = False

    async def receive(self) -> dict[str, Any]:
        while True:
            message = await self._receive()
            if message["type"] != "websocket.receive":
                return message
            problem = _frame_problem(message)
            if problem is None:
                return message
            await self._send({"type": "websocket.send", "text": problem})

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            self._last_was_error = (message.get("text") or "").startswith('{"type":"error"')
        elif message["type"] == "websocket.close" and self._last_was_error:
            try:
                await asyncio.wait_for(self._receive(), LINGER_SECONDS)
            except Exception:
                pass  # the client left or said nothing: close anyway
        await self._send(message)


def _frame_problem(message: dict[str, Any]) -> str | None:
    """The error to answer a frame with, or None to hand it to the handler: a text frame
    holding a JSON object within the limits, or text that is not JSON at all (the handler
    answers that one itself)."""
    text = message.get("text")
    if text is None:
        return NOT_AN_OBJECT
    if len(text) > MAX_FRAME_CHARS:
        return _error(f"the message is {len(text)} characters long; the limit is {MAX_FRAME_CHARS}")
    try:
        data = json.loads(text)
    except RecursionError:
        return _error(f"the message is nested more than {MAX_FRAME_DEPTH} levels deep")
    except ValueError:
        return None
    try:
        bounded_json.plain_copy(data, max_chars=MAX_FRAME_CHARS, max_depth=MAX_FRAME_DEPTH)
    except UntrustedDataError as exc:
        return _error(f"the message was refused: {exc}")
    return None if type(data) is dict else NOT_AN_OBJECT
