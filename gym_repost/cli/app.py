"""The Typer application and its command groups; the commands register on them."""

from __future__ import annotations

import logging

import typer
from rich.logging import RichHandler

from gym_repost.cli.common import err_console

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


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log details.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
    )
