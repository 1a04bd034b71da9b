"""The Typer application and its command groups; the commands register on them.

:func:`click_command` is the application as the console script runs it: ``-v`` accepted
after the command as well as before it, and help that names values (``N``, ``PATH``,
``[binary|shaped]``) rather than Python types (``<int range>``, ``<list[str]>``).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import typer
import typer.core
import typer.main
from rich.logging import RichHandler

from gym_repost.cli.common import console, err_console

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Turn Python repositories into sandboxed, executable coding tasks.",
)
sandbox_app = typer.Typer(no_args_is_help=True, help="Check and clean up sandboxes.")
env_app = typer.Typer(no_args_is_help=True, help="Install evaluation environments from envs/.")
data_app = typer.Typer(no_args_is_help=True, help="Build training data (JSONL for TRL / HF datasets).")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(env_app, name="env")
app.add_typer(data_app, name="data")


def _print_version(value: bool) -> None:
    if value:
        from gym_repost import __version__

        console.print(f"gym-repost {__version__}", highlight=False)
        raise typer.Exit()


def _log_details(ctx: Any, param: Any, value: bool) -> None:
    """``-v`` after the command: the group's option has set up logging already."""
    if value:
        logging.getLogger().setLevel(logging.DEBUG)


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log details (also after the command)."),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
    )


def click_command() -> Any:
    """The application as a click command, with ``-v`` on every command (see the module)."""
    group = typer.main.get_command(app)
    verbose = next(p for p in group.params if p.name == "verbose")
    _add_verbose(group, verbose)
    _plain_help_types()
    return group


def _add_verbose(group: Any, verbose: Any) -> None:
    for command in getattr(group, "commands", {}).values():
        if hasattr(command, "commands"):
            _add_verbose(command, verbose)
        elif not any(p.name == "verbose" for p in command.params):
            option = copy.copy(verbose)
            option.expose_value = False
            option.callback = _log_details
            command.params.append(option)


_TYPE_NAMES = {"int": "INTEGER", "int range": "INTEGER", "float": "NUMBER", "float range": "NUMBER", "str": "TEXT"}


def _plain_type(label: str) -> str | None:
    """Typer's type label (``int range``, ``list[str]``, ``binary|shaped``) as help shows it."""
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    if "|" in label:
        return f"[{label}]"
    if label == "bool":
        return None
    return _TYPE_NAMES.get(label, label.upper())


def _plain_help_types() -> None:
    """Help without Python types. Typer (0.20 and later) shows each value's type as
    ``<int range>``, ``<list[str]>``, ``<bool>`` even on flags, and ignores an argument's
    metavar there; names such as ``INTEGER``, ``PATH`` and ``[a|b]`` read better, a flag
    needs none, and an argument's name says what it is."""
    option, argument = getattr(typer.core, "TyperOption", None), getattr(typer.core, "TyperArgument", None)
    for cls in (option, argument):
        original = getattr(cls, "display_type_rich", None)
        if cls is None or original is None or getattr(original, "plain", False):
            continue

        def display(self: Any, ctx: Any, _original: Any = original, _argument: bool = cls is argument) -> str | None:
            if _argument or getattr(self, "is_flag", False) or getattr(self, "count", False):
                return None
            if self.metavar is not None:
                return str(self.metavar)
            shown = _original(self, ctx)
            return None if shown is None else _plain_type(str(shown).removesuffix("...").strip("<>"))

        display.plain = True  # type: ignore[attr-defined]
        cls.display_type_rich = display
