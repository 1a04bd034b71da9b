"""``gym-repost serve``: the tasks as environments over the network (OpenEnv's protocol)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from gym_repost.cli.app import app
from gym_repost.cli.common import ENV, SANDBOX, console, load_tasks, open_sandbox, sandbox_options


@app.command("serve")
def serve_command(
    tasks_path: Path = typer.Argument(..., metavar="TASKS", help="Task file (JSONL)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: a free one)."),
    max_sessions: int = typer.Option(16, min=1, help="Sessions open at once; more are refused."),
    session_timeout: float = typer.Option(600.0, min=0.001, help="Seconds before an idle session is closed."),
    sandbox: str = SANDBOX,
    env: Optional[str] = ENV,
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="Sandbox runs at once (default: CPUs)."),
    max_steps: int = typer.Option(30, min=1, help="Step budget per episode."),
    repairs: int = typer.Option(0, "--repairs", min=0, help="Repair iterations after a failing submission."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the token every request must carry."),
) -> None:
    """Serve the tasks as environments over the network (OpenEnv's protocol).

    Example: gym-repost serve tasks/demo.jsonl --port 8000
    """
    from gym_repost.serve import ServeConfig, read_token, require_serve_extra, serve

    token = read_token(token_file) if token_file else None
    tasks = load_tasks(tasks_path)
    require_serve_extra()
    config = ServeConfig(
        host=host,
        port=port,
        max_sessions=max_sessions,
        session_timeout=session_timeout,
        max_steps=max_steps,
        max_submissions=repairs + 1,
        token=token,
    )
    preload = ["pytest", "coverage"] if any(t.kind == "testfile" for t in tasks) else None
    options = sandbox_options(workers or min(max_sessions, os.cpu_count() or 1), None, env, preload, tasks)

    def ready(url: str) -> None:
        auth = ", token required" if token else ""
        console.print(
            f"serving {len(tasks)} task(s) from {tasks_path} on {url} (OpenEnv: GenericEnvClient(base_url=...)); "
            f"{max_sessions} session(s) at most{auth}; Ctrl-C or SIGTERM stops",
            highlight=False,
        )
        sys.stdout.flush()  # a supervisor reading the URL from a pipe sees it now

    with open_sandbox(sandbox, options) as sb:
        serve(tasks, sb, config, on_ready=ready)
