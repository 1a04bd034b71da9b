"""References kept on disk, so that ``eval`` after ``validate`` (or a second eval) makes none.

A task's reference (:class:`~gym_repost.harness.verdict.Reference`) depends on the task's
evaluation, target and ground truth, on the harness program, and on the sandbox: its
limits and its interpreter with the packages installed beside it. The key holds all of
them; the packages are stamped by the modification times of the interpreter's
site-packages directories (installing or removing a distribution changes them). Only the
local sandbox's references are kept: a docker image is rebuilt under the same tag.

The store is ``$GYM_REPOST_REFERENCES`` (``off`` turns it off), by default
``$GYM_REPOST_HOME/references``. It lives on the host; no sandbox run can see it. A file
that cannot be read or validated is ignored and made again.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym_repost.harness.verdict import Reference, reference_key
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.environments import home
from gym_repost.sandbox.programs import program_source
from gym_repost.task import FunctionTask

logger = logging.getLogger(__name__)

_VOLATILE = ("workers", "memory_cap", "mode", "preload")
"""Parts of a sandbox's description that do not change what a run does."""


def store_dir() -> Path | None:
    """Where references are kept; None when the store is off."""
    value = os.environ.get("GYM_REPOST_REFERENCES", "")
    if value == "off":
        return None
    return Path(value) if value else home() / "references"


@lru_cache(maxsize=32)
def _interpreter_stamp(python: str) -> tuple[Any, ...] | None:
    """The interpreter's real path and the modification times of its site-packages directories."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", "import json, site, sys; print(json.dumps([sys.prefix, *site.getsitepackages()]))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        paths = json.loads(out)
        real = os.path.realpath(python)
        return (real, os.stat(real).st_mtime_ns, *((p, os.stat(p).st_mtime_ns) for p in paths[1:] if os.path.isdir(p)))
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def disk_key(sandbox: Sandbox, task: FunctionTask) -> str | None:
    """The task's key in the store, None when its references are not kept on disk."""
    description = sandbox.describe()
    if description.get("backend") != "local" or not isinstance(description.get("python"), str):
        return None
    stamp = _interpreter_stamp(str(description["python"]))
    if stamp is None:
        return None
    stable = {k: v for k, v in description.items() if k not in _VOLATILE}
    return reference_key(
        task.evaluation.model_dump(),
        task.target.model_dump(),
        task.ground_truth,
        stable,
        list(stamp),
        program_source("harness"),
        program_source("protocol"),
        program_source("values"),
    )


def _path(key: str) -> Path | None:
    root = store_dir()
    return None if root is None else root / key[:2] / f"{key}.json"


def load(key: str) -> Reference | None:
    """The stored reference of ``key``, None when there is none (or it is unreadable)."""
    path = _path(key)
    if path is None or not path.is_file():
        return None
    try:
        return Reference.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError) as exc:
        logger.warning("ignoring the stored reference %s: %s", path, exc)
        return None


def save(key: str, reference: Reference) -> None:
    """Keep ``reference`` under ``key`` (atomically; a failure to write is only logged)."""
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as handle:
            handle.write(reference.model_dump_json().encode("utf-8"))
        os.replace(handle.name, path)
    except OSError as exc:
        logger.warning("could not keep the reference in %s: %s", path, exc)
