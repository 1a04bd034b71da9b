"""The scripted policy: replays actions from a file.

The file is JSON Lines; each line is ``{"task": KEY, "sample": N, "actions": [...]}``:
``task`` is a task id, a task name or ``"*"`` (any task); ``sample`` (optional) restricts
the line to one sample index. For an episode the most specific line is used (id before
name before ``"*"``; a line with the sample before one without). Actions are tool calls
as the environment takes them. When the script runs out, the policy submits.

Example: ``{"task": "*", "actions": [{"tool": "list_files", "args": {}}]}``
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gym_repost.errors import ConfigError, json_error_text
from gym_repost.policy.base import Action, tool_call
from gym_repost.task_view import TaskView


def read_json_objects(path: str | Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSON Lines file, with their line numbers (blank lines skipped).

    Raises:
        ConfigError: the file is missing, or a line is not a JSON object (line number given).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what}: no such file {p}")
    objects = []
    for number, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}:{number}: not valid JSON ({json_error_text(exc)})") from None
        objects.append((number, entry))
    return objects


def read_script(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a script file.

    Raises:
        ConfigError: the file is missing or a line is malformed (line number given).
    """
    entries = []
    for number, entry in read_json_objects(path, "scripted policy"):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("task"), str)
            or not isinstance(entry.get("actions"), list)
        ):
            raise ConfigError(f'{path}:{number}: expected {{"task": str, "actions": [...]}}')
        entries.append(entry)
    return entries


class ScriptedPolicy:
    """Replays the actions a script file holds for the episode's task."""

    name = "scripted"

    def __init__(self, path: str | Path | None = None, entries: list[dict[str, Any]] | None = None) -> None:
        if entries is None:
            if path is None:
                raise ConfigError("scripted policy: give a script file (scripted:FILE)")
            entries = read_script(path)
        self.entries = entries

    def _actions_for(self, task: TaskView, sample: int | None) -> list[Action]:
        def rank(entry: dict[str, Any]) -> tuple[int, int] | None:
            key = entry["task"]
            level = 0 if key == task.id else 1 if key == task.name else 2 if key == "*" else None
            if level is None or (entry.get("sample") is not None and entry["sample"] != sample):
                return None
            return level, 0 if entry.get("sample") is not None else 1

        ranked = [(r, e) for e in self.entries if (r := rank(e)) is not None]
        return list(min(ranked, key=lambda item: item[0])[1]["actions"]) if ranked else []

    def reset(self, task: TaskView, observation: str, info: dict[str, Any], *, seed: int) -> None:
        """Select the script for this task and sample."""
        self._queue = self._actions_for(task, info.get("sample"))

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        """The next scripted action, or ``submit`` when none are left."""
        return self._queue.pop(0) if self._queue else tool_call("submit")
