"""A task's requirements, installed where an evaluation needs them: a task file built on
another machine runs on one whose package cache lacks what its build installed."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence

from gym_repost.analysis.packages import distribution_for
from gym_repost.sandbox.base import Sandbox

logger = logging.getLogger(__name__)

_MISSING_MODULE = re.compile(r"No module named '([^']+)'")
_INSTALLED: dict[tuple[str, str], bool] = {}
"""Requirements installed by this process, by the sandbox's package cache: each is tried once."""
_INSTALL_LOCK = threading.Lock()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_named(sandbox: Sandbox, requirements: Sequence[str], error: str, task: str, done: set[str]) -> bool:
    """Whether to run again: True when an entry of ``requirements`` (a task's
    ``evaluation.requirements``) provides a module ``error`` (a run's error text) says could
    not be imported, it is in the sandbox's package cache now, and the caller has not run
    again for it yet (``done``, which it is added to).

    The requirement is installed here unless this process installed it (or failed to)
    before, for this or a concurrent evaluation: each is tried once per package cache and
    process, and only a requirement the task names, so a run that prints the message on
    purpose gets no other install and no second one. Never into a package set: a build's
    or an audit's installer fills its own set, under its constraints.
    """
    if not requirements:
        return False
    described = sandbox.describe()
    if described.get("package_set"):
        return False
    named = {_normal(r.split("==")[0].split("[")[0]): r for r in requirements}
    for found in _MISSING_MODULE.findall(error):
        module = found.split(".")[0]
        requirement = named.get(_normal(distribution_for(module))) or named.get(_normal(module))
        if requirement is not None and requirement not in done:
            break
    else:
        return False
    done.add(requirement)
    cache = str(described.get("packages_dir") or described.get("packages_volume") or sandbox.name)
    with _INSTALL_LOCK:
        if (cache, requirement) not in _INSTALLED:
            logger.info("installing %s, a requirement of %s, into the sandbox's package cache", requirement, task)
            try:
                _INSTALLED[(cache, requirement)] = sandbox.install([requirement]).ok
            except NotImplementedError:
                _INSTALLED[(cache, requirement)] = False
        return _INSTALLED[(cache, requirement)]
