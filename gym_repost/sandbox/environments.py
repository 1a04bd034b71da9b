"""Evaluation environments defined in ``envs/``: a virtual environment per definition.

A definition is a directory holding ``requirements.txt`` (the packages the evaluation
scripts import). ``gym-repost env install envs/NAME`` creates the virtual environment
``$GYM_REPOST_HOME/envs/NAME`` (default ``~/.cache/gym-repost/envs/NAME``) and installs
them; ``--env NAME`` then runs sandboxed scripts with its interpreter.

A definition may also hold ``preload.txt``: modules that take long to import (measured
in that environment), which the local sandbox's warm workers import once ahead of runs
(:attr:`~gym_repost.sandbox.config.LocalSandboxConfig.preload`) when the tasks at hand
import them (:func:`preload_for`). A line ``MODULE if PACKAGE ...`` preloads a module that
the tasks import through another package (``litellm if liteswarm``). ``env install``
copies the file into the environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from gym_repost.errors import ConfigError

PRELOAD_FILE = "preload.txt"
"""Modules worth preloading, one per line (``#`` comments, ``MODULE if PACKAGE ...``), in a
definition or an environment."""


def home() -> Path:
    """gym-repost's cache directory."""
    return Path(os.environ.get("GYM_REPOST_HOME", Path.home() / ".cache" / "gym-repost"))


def env_dir(name: str) -> Path:
    """Where environment ``name`` is (or would be) installed."""
    return home() / "envs" / name


def resolve_env_python(env: str) -> str:
    """The interpreter of an installed environment, given its name, definition or path.

    Raises:
        ConfigError: it is not installed (the message says how to install it).
    """
    path = Path(env)
    candidates = [path / "bin" / "python", env_dir(path.name) / "bin" / "python"]
    for python in candidates:
        if python.is_file():
            return str(python)
    definition = path if (path / "requirements.txt").is_file() else Path("envs") / path.name
    raise ConfigError(f"environment {env!r} is not installed; run: gym-repost env install {definition}")


INSTALLED_FILE = ".gym-repost-installed"
"""In an environment: what its last complete install installed (requirements.txt's hash)."""


def install_env(definition: str | Path, target: str | Path | None = None, *, force: bool = False) -> Path:
    """Create the virtual environment of ``definition`` and install its requirements.

    Output of pip goes to this process's stdout/stderr. Returns the interpreter path. An
    environment whose last complete install was of the same ``requirements.txt`` is left
    as it is (pip is not run again: resolving a long list takes seconds even when nothing
    is missing) unless ``force``.

    Raises:
        ConfigError: the definition has no requirements.txt, or an install step failed.
    """
    definition = Path(definition)
    requirements = definition / "requirements.txt"
    if not requirements.is_file():
        raise ConfigError(f"{definition} is not an environment definition (no requirements.txt)")
    venv = Path(target) if target else env_dir(definition.name)
    python = venv / "bin" / "python"
    stamp = venv / INSTALLED_FILE
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    done = python.exists() and stamp.is_file() and stamp.read_text("utf-8").strip() == wanted
    if not done or force:
        steps = [[sys.executable, "-m", "venv", str(venv)]] if not python.exists() else []
        steps.append([str(python), "-m", "pip", "install", "-r", str(requirements)])
        stamp.unlink(missing_ok=True)
        for command in steps:
            if subprocess.run(command, check=False).returncode != 0:
                raise ConfigError(f"installing {definition} failed at: {' '.join(command)}")
        stamp.write_text(wanted + "\n", "utf-8")
    if (definition / PRELOAD_FILE).is_file():
        shutil.copyfile(definition / PRELOAD_FILE, venv / PRELOAD_FILE)
    return python


def _preload_lines(env: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each module of environment ``env``'s ``preload.txt`` (name, definition or path) and the
    top-level packages whose use calls for it: the definition's file (of ``envs/NAME`` in
    this checkout or the current directory) or else the copy made at install; [] when none.

    Raises:
        ConfigError: a line is not ``MODULE`` or ``MODULE if PACKAGE ...``.
    """
    path = Path(env)
    checkout = Path(__file__).resolve().parents[2] / "envs" / path.name
    for directory in (path, checkout, Path.cwd() / "envs" / path.name, env_dir(path.name)):
        listing = directory / PRELOAD_FILE
        if not listing.is_file():
            continue
        entries: list[tuple[str, tuple[str, ...]]] = []
        for number, line in enumerate(listing.read_text("utf-8").splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) == 1:
                entries.append((words[0], (words[0].split(".")[0],)))
            elif words[1] == "if" and len(words) > 2:
                entries.append((words[0], tuple(words[2:])))
            else:
                raise ConfigError(f"{listing}:{number}: expected MODULE or MODULE if PACKAGE ..., got {line.strip()!r}")
        return entries
    return []


def env_preload(env: str) -> list[str]:
    """The modules of environment ``env``'s ``preload.txt`` (see :func:`_preload_lines`)."""
    return [module for module, _ in _preload_lines(env)]


def preload_for(env: str, packages: Iterable[str]) -> list[str]:
    """The modules of ``env``'s ``preload.txt`` that the tasks need, from the top-level
    ``packages`` they import (e.g. their ``metadata.external_packages``): ``torch.nn`` if
    ``torch``, ``litellm if liteswarm`` if ``liteswarm``."""
    used = set(packages)
    return [module for module, wanted in _preload_lines(env) if used.intersection(wanted)]
