"""Evaluation environments defined in ``envs/``: a virtual environment per definition.

A definition is a directory holding ``requirements.txt`` (the packages the evaluation
scripts import). ``gym-repost env install envs/NAME`` creates the virtual environment
``$GYM_REPOST_HOME/envs/NAME`` (default ``~/.cache/gym-repost/envs/NAME``) and installs
them; ``--env NAME`` then runs sandboxed scripts with its interpreter.

A definition may also hold ``preload.txt``: modules that take long to import (measured
in that environment), which the local sandbox's warm workers import once ahead of runs
(:attr:`~gym_repost.sandbox.config.LocalSandboxConfig.preload`) when the tasks at hand
import them (:func:`preload_for`). A line ``MODULE if PACKAGE ...`` preloads a module that
the tasks import through another package (``litellm if liteswarm``). A line
``apart MODULE [if PACKAGE ...]`` preloads it in a warm worker of its own, which serves
only the runs of tasks that import it (:func:`preload_apart_for`): a heavy module that few
tasks import (tensorflow, litellm) would otherwise slow every worker's start and fork.
``env install`` copies the file into the environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from gym_repost.errors import ConfigError

PRELOAD_FILE = "preload.txt"
"""Modules worth preloading, one per line (``#`` comments, ``MODULE if PACKAGE ...``,
``apart MODULE ...``), in a definition or an environment."""


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
    venv.parent.mkdir(parents=True, exist_ok=True)
    # One install at a time per environment, across processes: two pips writing one
    # site-packages break each other (a half-written dist-info has no version).
    with open(venv.parent / f".{venv.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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


def _preload_lines(env: str) -> list[tuple[str, tuple[str, ...], bool]]:
    """Each module of environment ``env``'s ``preload.txt`` (name, definition or path), the
    top-level packages whose use calls for it, and whether it is preloaded apart: the
    definition's file (of ``envs/NAME`` in this checkout or the current directory) or else
    the copy made at install; [] when none.

    Raises:
        ConfigError: a line is not ``[apart] MODULE`` or ``[apart] MODULE if PACKAGE ...``.
    """
    path = Path(env)
    checkout = Path(__file__).resolve().parents[2] / "envs" / path.name
    for directory in (path, checkout, Path.cwd() / "envs" / path.name, env_dir(path.name)):
        listing = directory / PRELOAD_FILE
        if not listing.is_file():
            continue
        entries: list[tuple[str, tuple[str, ...], bool]] = []
        for number, line in enumerate(listing.read_text("utf-8").splitlines(), 1):
            words = line.split("#", 1)[0].split()
            apart = bool(words) and words[0] == "apart"
            words = words[1:] if apart else words
            if not words and not apart:
                continue
            if len(words) == 1:
                entries.append((words[0], (words[0].split(".")[0],), apart))
            elif len(words) > 2 and words[1] == "if":
                entries.append((words[0], tuple(words[2:]), apart))
            else:
                raise ConfigError(
                    f"{listing}:{number}: expected [apart] MODULE or [apart] MODULE if PACKAGE ..., "
                    f"got {line.strip()!r}"
                )
        return entries
    return []


def env_preload(env: str) -> list[str]:
    """The modules every warm worker of environment ``env`` may preload: those of its
    ``preload.txt`` but the ones preloaded apart (see :func:`_preload_lines`)."""
    return [module for module, _, apart in _preload_lines(env) if not apart]


def preload_for(env: str, packages: Iterable[str]) -> list[str]:
    """The modules of ``env``'s ``preload.txt`` that the tasks need, from the top-level
    ``packages`` they import (e.g. their ``metadata.external_packages``): ``torch.nn`` if
    ``torch``, ``litellm if liteswarm`` if ``liteswarm``. Not those preloaded apart."""
    used = set(packages)
    return [module for module, wanted, apart in _preload_lines(env) if not apart and used.intersection(wanted)]


def preload_apart_for(env: str, packages: Iterable[str]) -> dict[str, list[str]]:
    """For each of the top-level ``packages`` that calls for modules ``env``'s ``preload.txt``
    preloads apart, those modules: the local sandbox's
    :attr:`~gym_repost.sandbox.config.LocalSandboxConfig.preload_apart`."""
    used = set(packages)
    apart: dict[str, list[str]] = {}
    for module, wanted, is_apart in _preload_lines(env):
        for package in wanted:
            if is_apart and package in used:
                apart.setdefault(package, []).append(module)
    return dict(sorted(apart.items()))
