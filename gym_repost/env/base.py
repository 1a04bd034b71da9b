"""What the tool-driven environments share: budgets, the step loop, the sandbox, ``info``.

:class:`ToolEnv` runs one tool call per ``step`` and leaves three things to a task kind:
the tools (:meth:`ToolEnv._new_tools`), the statement ``reset`` returns
(:meth:`ToolEnv._statement`) and what a ``submit`` does and earns (:meth:`ToolEnv._submit`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from pydantic import BaseModel

from gym_repost.bounded_json import type_name
from gym_repost.env.spaces import AnyText
from gym_repost.errors import InfrastructureError, ToolError
from gym_repost.sandbox.base import Sandbox
from gym_repost.tools import ToolResult, parse_action

logger = logging.getLogger(__name__)

_CAUSES = {
    "RecursionError": "the input is nested too deeply",
    "MemoryError": "the input is too large or nested too deeply",
}


def _unexpected_failure(tool: str | None, exc: Exception) -> ToolResult:
    """An error observation for an exception no tool meant to raise (the action caused it)."""
    logger.warning("the %s call raised an unexpected exception", tool or "action", exc_info=True)
    kind = type_name(exc)
    try:
        detail = _CAUSES.get(kind) or str(exc)[:500]
    except Exception:
        detail = "no message"
    return ToolResult(f"Error: the {tool or 'action'} call failed ({kind}: {detail})", ok=False)


class ToolEnv(gym.Env[str, str]):
    """A task as a Gymnasium environment whose actions are tool calls.

    Args:
        sandbox: a started sandbox to run tests in (shared, not closed by this one); by
            default the environment starts a local sandbox on the first test run and
            closes it in :meth:`close`.
        sandbox_config: options for the default local sandbox.
        max_steps: step budget (truncation).
        max_submissions: submissions allowed: repair iterations + 1.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    """``render_fps`` only keeps Gymnasium's checker quiet: ``ansi`` frames are text."""
    task: Any
    _plain_spec: EnvSpec | None = None

    @property
    def spec(self) -> EnvSpec | None:
        """How ``gym.make`` made this environment, as plain data: the task as its JSON
        form, so ``spec.to_json()`` works and ``gym.make(spec)`` makes it again. A shared
        ``sandbox`` is left out (a live object; the remade environment starts its own)."""
        return self._plain_spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        if value is not None:
            kwargs = {k: v for k, v in value.kwargs.items() if k != "sandbox"}
            if isinstance(kwargs.get("task"), BaseModel):
                kwargs["task"] = kwargs["task"].model_dump(mode="json")
            value = dataclasses.replace(value, kwargs=kwargs)
        self._plain_spec = value

    def __init__(
        self,
        *,
        sandbox: Sandbox | None,
        sandbox_config: dict[str, Any] | None,
        max_steps: int,
        max_submissions: int,
        render_mode: str | None,
    ) -> None:
        if max_steps < 1 or max_submissions < 1:
            raise ValueError("max_steps and max_submissions must be at least 1")
        self.max_steps = max_steps
        self.max_submissions = max_submissions
        self.render_mode = render_mode
        self._shared_sandbox = sandbox
        self._own_sandbox: Sandbox | None = None
        self._sandbox_config = dict(sandbox_config or {})
        self.observation_space = AnyText()
        self.action_space = AnyText(max_length=250_000)
        self._tools = self._new_tools()
        self._reset_counters()
        self._last_observation = ""

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: everything but the sandbox this environment started, which
        the copy starts again from ``sandbox_config`` where it runs (on its first test run).

        Raises:
            TypeError: the environment was given a shared ``sandbox=``, a handle on this
                process's workers that cannot travel.
        """
        if self._shared_sandbox is not None:
            raise TypeError(
                f"a {type(self).__name__} given sandbox=... cannot be sent to another process (the sandbox is "
                "a handle on this process's workers); make it with sandbox_config=... instead (or neither): "
                "it then starts its own sandbox where it runs"
            )
        state = self.__dict__.copy()
        state["_own_sandbox"] = None
        return state

    # ---- what a task kind provides

    def _new_tools(self) -> Any:
        raise NotImplementedError

    def _statement(self) -> str:
        raise NotImplementedError

    def _submit(self, args: dict[str, Any]) -> tuple[ToolResult, float]:
        raise NotImplementedError

    def _extra_info(self) -> dict[str, Any]:
        return {}

    # ---- shared

    def _sandbox(self) -> Sandbox:
        if self._shared_sandbox is not None:
            return self._shared_sandbox
        if self._own_sandbox is None:
            from gym_repost.sandbox import get_sandbox

            self._own_sandbox = get_sandbox("local", **self._sandbox_config)
            self._own_sandbox.start()
        return self._own_sandbox

    def _reset_counters(self) -> None:
        self._steps = 0
        self._submissions = 0
        self._solved = False
        self._done = False
        self._last_report: dict[str, Any] | None = None
        self._infra_error: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: the statement of the task and the budgets."""
        super().reset(seed=seed)
        self._tools = self._new_tools()
        self._reset_counters()
        self._last_observation = self._statement()
        return self._last_observation, self._info(None, ok=True)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one tool call (see the module docstring of the environment).

        Never raises. Whatever the action (any value, any size or depth), a problem it
        causes is an error observation with reward 0 and the episode goes on within its
        budgets. An infrastructure failure (the sandbox failed) ends the episode with
        ``truncated=True`` and the message in ``info["infra_error"]``; such an episode is
        not to be scored.
        """
        if self._done:
            text = "Error: the episode is over; call reset() to start a new one."
            return text, 0.0, True, False, self._info(None, ok=False)
        self._steps += 1
        name: str | None = None
        reward = 0.0
        try:
            name, args = parse_action(action)
            result, reward = self._submit(args) if name == "submit" else (self._tools.call(name, args), 0.0)
        except ToolError as exc:
            result = ToolResult(f"Error: {exc}", ok=False)
        except InfrastructureError as exc:
            self._infra_error = f"{type(exc).__name__}: {exc}"
            result = ToolResult(f"Infrastructure error (the episode ends, not scored): {self._infra_error}", ok=False)
        except Exception as exc:
            result = _unexpected_failure(name, exc)
        if "test_report" in result.data:
            self._last_report = result.data["test_report"]
        terminated = self._infra_error is None and (self._solved or self._submissions >= self.max_submissions)
        truncated = not terminated and (self._infra_error is not None or self._steps >= self.max_steps)
        self._done = terminated or truncated
        self._last_observation = result.output
        return result.output, reward, terminated, truncated, self._info(name, ok=result.ok)

    def _info(self, tool: str | None, ok: bool) -> dict[str, Any]:
        return {
            "task_id": self.task.id,
            "task_name": self.task.name,
            "tool": tool,
            "ok": ok,
            "steps": self._steps,
            "max_steps": self.max_steps,
            "submissions": self._submissions,
            "max_submissions": self.max_submissions,
            "solved": self._solved,
            "code_written": self._tools.code is not None,
            **self._extra_info(),
            "test_report": self._last_report,
            "infra_error": self._infra_error,
        }

    @property
    def code(self) -> str | None:
        """What the agent has written so far in this episode."""
        return self._tools.code

    def render(self) -> str | None:
        """``ansi``: the last observation."""
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the sandbox this environment started (a shared one is left alone)."""
        if self._own_sandbox is not None:
            self._own_sandbox.close()
            self._own_sandbox = None
        super().close()
