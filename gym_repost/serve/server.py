"""Running the application: uvicorn on a socket bound here, in the foreground or a thread."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import uvicorn

from gym_repost.errors import ConfigError
from gym_repost.sandbox.base import Sandbox
from gym_repost.serve.app import create_app
from gym_repost.serve.config import ServeConfig
from gym_repost.task import Task

GRACE_SECONDS = 5.0
"""How long shutdown waits for connections to finish (a step in flight) before it closes them."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _uvicorn(tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig) -> uvicorn.Server:
    app = create_app(tasks, sandbox, config)
    return uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(GRACE_SECONDS),
            lifespan="on",
        )
    )


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (once uvicorn has shut down gracefully), so that the
    caller's ``finally`` blocks run and the sandbox is closed, unless the program already
    handles SIGTERM (the ``gym-repost`` command does)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def serve(
    tasks: Sequence[Task],
    sandbox: Sandbox,
    config: ServeConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``tasks`` until SIGINT or SIGTERM (see :mod:`gym_repost.serve`).

    On a signal the server stops taking connections, closes every session and returns
    (by raising ``KeyboardInterrupt``), leaving the caller to close ``sandbox``.

    Args:
        tasks: the task set.
        sandbox: a started sandbox, shared by every session (not closed here).
        config: where to listen, limits, budgets, token.
        on_ready: called with the server's URL once it listens.

    Raises:
        ConfigError: the address cannot be bound.
    """
    server = _uvicorn(tasks, sandbox, config)
    sock = _bind(config.host, config.port)
    try:
        with _terminate_unwinds():
            if on_ready is not None:
                on_ready(_url(sock))
            server.run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def running(tasks: Sequence[Task], sandbox: Sandbox, config: ServeConfig) -> Iterator[str]:
    """Serve ``tasks`` from a thread of this process for the ``with`` block; yields the URL.

    For tests, benchmarks and notebooks (``config.port=0`` picks a free port).
    """
    server = _uvicorn(tasks, sandbox, config)
    sock = _bind(config.host, config.port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="gym-repost-serve", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread stopped before it started (see the log)")
            thread.join(0.01)
        yield _url(sock)
    finally:
        server.should_exit = True
        thread.join(GRACE_SECONDS + 5)
        sock.close()
