"""Actions and small helpers shared by the serve tests."""

from __future__ import annotations

import asyncio
from typing import Any

from gym_repost.task import FunctionTask


def write(code: str) -> dict[str, Any]:
    """The ``write_code`` action."""
    return {"tool": "write_code", "args": {"code": code}}


SUBMIT = {"tool": "submit", "args": {}}


def wrong_body(task: FunctionTask) -> str:
    """The target's header over a body that returns None (not the ground truth)."""
    lines = [f"@{d}" for d in task.target.decorators] + [task.target.signature, "    return None"]
    return "\n".join(lines) + "\n"


def run(coro: Any) -> Any:
    """Run a coroutine to completion (the async client's tests)."""
    return asyncio.run(coro)
