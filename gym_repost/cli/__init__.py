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

import typer

from gym_repost.cli.app import app, click_command
from gym_repost.cli.common import console, err_console, interrupted_note, invalid_settings, print_error
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


def _click_exceptions() -> Any:
    """The module of click's exceptions that Typer raises (Typer 0.20 and later carry
    their own copy of click)."""
    try:
        return import_module("typer._click.exceptions")
    except ImportError:
        return import_module("click.exceptions")


def main() -> None:
    """Entry point of the ``gym-repost`` console script.

    Every error ends in one ``error:`` line on stderr and exit status 2, never a
    traceback: the project's own errors, invalid settings (a pydantic
    ``ValidationError``) and wrong usage (an unknown option, a value that is not a number
    or not a choice, a missing argument: the line says which command's ``--help`` to read).
    """
    from pydantic import ValidationError

    clicks = _click_exceptions()
    no_args = getattr(clicks, "NoArgsIsHelpError", ())  # click 8.2 and later: help shown, status 2
    _interrupt_on_signals()
    command = click_command()
    try:
        try:
            status = command.main(args=sys.argv[1:], prog_name="gym-repost", standalone_mode=False)
        except no_args as exc:  # `gym-repost`, `gym-repost data`: the help
            shown = exc.format_message()  # Typer's rich help printed itself already, and left this empty
            if shown.strip():
                console.print(shown, highlight=False, markup=False)
            status = 2
        except clicks.UsageError as exc:
            print_error(_usage_message(exc))
            status = 2
        except clicks.ClickException as exc:
            print_error(exc.format_message())
            status = exc.exit_code
        except GymRepostError as exc:
            print_error(str(exc))
            status = 2
        except ValidationError as exc:
            print_error(invalid_settings(exc))
            status = 2
        except typer.Abort:  # click's name for an interrupt
            if not _SIGNALS:
                _SIGNALS.append(2)
            status = 130
    except KeyboardInterrupt:
        _exit_interrupted()
    if _SIGNALS:  # Typer returns 130 for a KeyboardInterrupt
        _exit_interrupted()
    sys.exit(status if isinstance(status, int) else 0)


def _usage_message(exc: Any) -> str:
    """A usage error as one sentence naming the command whose help to read."""
    message = exc.format_message().replace(": Value error, ", ": ")  # as Typer's coercion words it
    where = getattr(getattr(exc, "ctx", None), "command_path", "gym-repost")
    return f"{message.rstrip('.')} (see `{where} --help`)"


__all__ = ["app", "main"]
