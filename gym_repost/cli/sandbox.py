"""``gym-repost sandbox`` (check, cleanup, build-image) and ``gym-repost env install``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gym_repost.cli.app import env_app, sandbox_app
from gym_repost.cli.common import (
    PYTHON,
    check_output_file,
    console,
    err_console,
    fail,
    open_sandbox,
    progress_bar,
)


@sandbox_app.command("check")
def sandbox_check(
    sandbox: str = typer.Option("local", help="Backend to check."),
    python: Optional[str] = PYTHON,
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Also write the results as JSON (one object per check) to this file."
    ),
) -> None:
    """Run the sandbox conformance suite against a backend.

    Example: gym-repost sandbox check --sandbox local -o checks.json
    """
    import dataclasses
    import json

    from gym_repost.sandbox.conformance import run_conformance

    if output is not None and not output.parent.is_dir():
        raise fail(f"--output {output}: the directory {output.parent} does not exist")
    check_output_file(output, "--output")
    options: dict[str, Any] = {"python": python} if python else {}
    with open_sandbox(sandbox, options) as sb, progress_bar() as progress:
        progress.add_task(f"conformance checks of {sandbox}", total=None)
        results = run_conformance(sb)
    table = Table(title=f"sandbox conformance: {sandbox}")
    for col in ("check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.name, "[green]pass[/]" if r.passed else "[red]FAIL[/]", r.detail)
    console.print(table)
    failed = [r for r in results if not r.passed]
    console.print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    if output is not None:
        checks = [dataclasses.asdict(r) for r in results]
        try:
            output.write_text(json.dumps({"sandbox": sandbox, "checks": checks}, indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            raise fail(f"could not write the results to {output}: {exc.strerror or exc}") from exc
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("cleanup")
def sandbox_cleanup(
    all_containers: bool = typer.Option(
        False, "--all", help="Also remove the containers of live gym-repost processes (and of other hosts)."
    ),
) -> None:
    """Remove sandbox processes, directories, package sets and containers left behind by a crashed run.

    Example: gym-repost sandbox cleanup
    """
    from gym_repost.sandbox.leftovers import cleanup_leftovers

    report = cleanup_leftovers()
    console.print(
        f"removed {len(report.killed_pids)} leftover worker process(es) and "
        f"{len(report.removed_dirs)} directory(ies) of crashed runs"
    )
    for pid in report.killed_pids:
        console.print(f"  killed worker pid {pid}", highlight=False)
    for directory in report.removed_dirs:
        console.print(f"  removed {directory}", highlight=False)
    if report.removed_package_sets:
        console.print(f"removed {len(report.removed_package_sets)} package set(s) of killed builds")
    for directory in report.removed_package_sets:
        console.print(f"  removed {directory}", highlight=False)
    _cleanup_containers(all_containers)


def _cleanup_containers(all_containers: bool) -> None:
    from gym_repost.errors import MissingExtraError, SandboxUnavailableError

    try:
        from gym_repost.sandbox.docker_containers import cleanup_containers

        containers = cleanup_containers(all_owners=all_containers)
    except (MissingExtraError, SandboxUnavailableError) as exc:
        console.print(f"docker containers: not checked ({escape(str(exc))})", highlight=False)
        return
    console.print(
        f"removed {len(containers.removed)} leftover docker container(s); {len(containers.kept)} of live runs kept"
    )
    for name in containers.removed:
        console.print(f"  removed container {name}", highlight=False)
    _cleanup_docker_package_sets()


def _cleanup_docker_package_sets() -> None:
    """The package sets of killed builds in the docker sandbox's package volume."""
    from gym_repost.errors import MissingExtraError, SandboxError
    from gym_repost.sandbox.config import DockerSandboxConfig
    from gym_repost.sandbox.docker import DockerSandbox

    sandbox = DockerSandbox(DockerSandboxConfig(build_missing=False))
    try:
        removed = sandbox.remove_dead_package_sets()
    except (MissingExtraError, SandboxError) as exc:
        console.print(f"docker package sets: not checked ({escape(str(exc))})", highlight=False)
        return
    finally:
        sandbox.close()
    console.print(f"removed {len(removed)} docker package set(s) of killed builds")
    for name in removed:
        console.print(f"  removed package set {name}", highlight=False)


@sandbox_app.command("build-image")
def sandbox_build_image(
    env: Optional[str] = typer.Option(
        None,
        "--env",
        help="Environment definition whose "
        "requirements go into the image, e.g. envs/repost-eval; "
        "default: the base set of envs/docker.",
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the image is up to date."),
    docker_host: Optional[str] = typer.Option(None, help="Docker daemon URL (default: DOCKER_HOST)."),
) -> None:
    """Build the docker sandbox's image locally (debootstrap, then pip); reused when current.

    Example: gym-repost sandbox build-image --env envs/repost-eval
    """
    from gym_repost.sandbox.docker_containers import connect
    from gym_repost.sandbox.docker_image import build_image, resolve_recipe

    recipe = resolve_recipe(env)
    client = connect(docker_host, timeout=3600)
    tag = build_image(
        client, recipe, force=force, log=lambda line: err_console.print(line, highlight=False, markup=False)
    )
    console.print(
        f"image: {tag} (recipe {recipe.recipe_hash}); use it with --sandbox docker"
        + (f" --env {recipe.env}" if recipe.env != "base" else "")
    )


@env_app.command("install")
def env_install(
    definition: Path = typer.Argument(..., help="Environment definition, e.g. envs/repost-eval."),
    target: Optional[Path] = typer.Option(None, help="Virtual environment to create."),
    force: bool = typer.Option(
        False, "--force", help="Run pip even when requirements.txt is unchanged since the last install."
    ),
) -> None:
    """Create a virtual environment with the packages an environment definition lists
    (pip runs only when requirements.txt changed since the last complete install, or with --force).

    Example: gym-repost env install envs/repost-eval
    """
    from gym_repost.sandbox.environments import install_env

    python = install_env(definition, target, force=force)
    console.print(f"installed: {python}\nuse it with: --env {target or definition.name}")


_SIGNALS: list[int] = []
"""The signal that interrupted this process, if one did."""
