"""The ``gym-repost`` command line: one module per command group, each command a few
lines over a library function.

* :mod:`~gym_repost.cli.build`: ``build`` (function and test-file tasks, imports);
* :mod:`~gym_repost.cli.validate`: ``validate``;
* :mod:`~gym_repost.cli.audit`: ``audit``;
* :mod:`~gym_repost.cli.evaluate`: ``eval`` and ``report``;
* :mod:`~gym_repost.cli.data`: ``data rejection|dstc|acecoder|testgen``;
* :mod:`~gym_repost.cli.sandbox`: ``sandbox check|cleanup|build-image`` and ``env install``;
* :mod:`~gym_repost.cli.serve`: ``serve``;
* :mod:`~gym_repost.cli.common`: consoles, errors, progress, task loading, sandboxes.

May import: any part of gym_repost; nothing imports it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from importlib import import_module
from typing import Any

from gym_repost.cli.app import app
from gym_repost.cli.common import err_console, interrupted_note, invalid_settings, print_error
from gym_repost.errors import GymRepostError

# registers the commands, in this order
for _group in ("build", "validate", "audit", "evaluate", "data", "sandbox", "serve"):
    import_module(f"gym_repost.cli.{_group}")

_SIGNALS: list[int] = []
"""The signal that interrupted this process, if one did."""


def _interrupt_on_signals() -> None:
    """SIGINT and SIGTERM unwind as KeyboardInterrupt, so that sandboxes close (workers are
    killed, containers removed); a second signal exits at once."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        if _SIGNALS:
            os._exit(128 + _SIGNALS[0])
        _SIGNALS.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def _exit_interrupted() -> None:
    """Exit with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), promptly.

    Records are written and synced as episodes finish, and the sandbox is closed by the
    time the interrupt gets here, so nothing is lost by not waiting for threads still in
    an interrupted episode (a policy stuck in a call, a hung step): they would otherwise
    hold up the interpreter's exit.
    """
    import signal

    code = 128 + (_SIGNALS[0] if _SIGNALS else signal.SIGINT)
    err_console.print(interrupted_note())
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not busy:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """Entry point of the ``gym-repost`` console script.

    The project's own errors and invalid settings (a pydantic ``ValidationError``, say
    ``--reward foo``) end in one ``error:`` line and exit status 2, not a traceback.
    """
    from pydantic import ValidationError

    _interrupt_on_signals()
    try:
        try:
            app()
        except GymRepostError as exc:
            print_error(str(exc))
            sys.exit(2)
        except ValidationError as exc:
            print_error(invalid_settings(exc))
            sys.exit(2)
    except KeyboardInterrupt:
        _exit_interrupted()
    except SystemExit:  # typer turns KeyboardInterrupt into exit status 130
        if not _SIGNALS:
            raise
        _exit_interrupted()


__all__ = ["app", "main"]
