"""The README and docs/ stay true: their Python blocks run, the command-line reference names
every command and option, links between pages resolve, and the README's first block is
the two commands `.ci/run` reads. (`mkdocs build --strict`, run by `.ci/run`, checks the
site: every page in the nav, no broken link or anchor.)"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gym_repost.cli import click_command

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "cli.md"


@pytest.mark.slow
def test_python_blocks_of_the_readme_and_docs_run() -> None:
    """Every ```python block, run by pytest-markdown-docs against this checkout (blocks
    marked `notest` need a model or a GPU and are skipped)."""
    if importlib.util.find_spec("pytest_markdown_docs") is None:
        pytest.fail('pytest-markdown-docs is missing: pip install -e ".[dev]"')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    command += ["--markdown-docs", "--markdown-docs-syntax=superfences", "README.md", "docs/"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout), done.stdout[-2000:]


def _commands(group: object, path: str) -> dict[str, object]:
    """Every leaf command of the CLI by its full name (``gym-repost data dstc``)."""
    found: dict[str, object] = {}
    for name, command in getattr(group, "commands", {}).items():
        full = f"{path} {name}"
        found.update(_commands(command, full) if hasattr(command, "commands") else {full: command})
    return found


def _section(page: str, name: str) -> str:
    """The part of the CLI page under the heading ``name``, up to the next heading."""
    match = re.search(rf"^#+ {re.escape(name)}\n(.*?)(?=^#+ |\Z)", page, re.M | re.S)
    assert match, f"docs/cli.md has no heading for `{name}`"
    return match.group(1)


def test_cli_reference_names_every_command_and_option() -> None:
    page = CLI_PAGE.read_text(encoding="utf-8")
    missing = []
    for name, command in _commands(click_command(), "gym-repost").items():
        section = _section(page, name)
        for param in getattr(command, "params", []):
            if getattr(param, "hidden", False) or param.name in ("help", "verbose"):
                continue
            if param.param_type_name == "argument":
                names = [(param.metavar or param.name).upper()]
            else:
                names = [*param.opts, *param.secondary_opts]
            missing += [f"{name} {n}" for n in names if f"`{n}`" not in section]
    assert not missing, f"docs/cli.md lacks: {missing} (see `gym-repost COMMAND --help`)"


def test_relative_links_resolve() -> None:
    pages = [README, *DOCS.glob("*.md")]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken


def test_readme_opens_with_the_two_commands_ci_reads() -> None:
    """`.ci/run` runs the second non-empty line of the README's first fenced block."""
    first = README.read_text(encoding="utf-8").split("```")[1]
    lines = [line for line in first.splitlines()[1:] if line.strip()]
    assert len(lines) == 2
    assert "gym-repost eval tasks/demo.jsonl --policy oracle" in lines[0]
    assert lines[1] == 'pip install -e ".[dev]" && python -m pytest -q'
