"""An episode's transcript: what the policy was told and said, step by step, as the runner
records it in ``RUN_DIR/trajectories.jsonl`` (one line per episode, beside its
``episodes.jsonl`` line) and the run viewer shows it.

A line::

    {"task_id": str, "sample": int,
     "reset": {                      # step 0 (absent in runs recorded before it was kept)
         "observation": str,         # the task prompt: what reset() returned to the policy
         "messages": [MESSAGE...],   # what the policy's reset added to its conversation
         "seconds": {"env": s, "policy": s}},
     "steps": [{                     # one per environment step
         "action": ...,              # the tool call as the policy returned it
         "tool": str | None, "ok": bool, "reward": float,
         "messages": [MESSAGE...],   # what the policy's act added: model replies, prompts
         "observation": str,         # the tool result: what the environment answered
         "test_report": {...},       # run_tests and submit: status, failure, assertion...
         "tokens": {"input": n, "output": n} | None,   # spent in this step (LLM policies)
         "seconds": {"policy": s, "env": s}}],          # act() and env.step(), wall clock
     "interrupted": {                # the step under way when the episode stopped, if one was
         "messages": [...], "action": ..., "seconds": {"policy": s}}}

    MESSAGE = {"role": "system" | "user" | "assistant" | "tool", "content": str,
               "tool_calls": [{"id": str, "name": str, "arguments": str}],   # assistant
               "tool_call_id": str, "is_error": true,                          # tool
               "tokens_in": n, "tokens_out": n, "seconds": s, "cached": true,   # a model reply
               "observation_of_step": k}

Every policy gets the task prompt, actions and observations recorded. ``messages`` are
recorded for a policy that keeps a conversation and says so with a ``transcript()`` method
(:mod:`gym_repost.policy.base`; the LLM policy does): the runner takes the messages added
since the previous step, so a model reply that called three tools is in the first of the
three steps. A message that repeats an observation the runner recorded already (a tool
result, the task prompt as the first user turn) is kept as a pointer,
``observation_of_step`` (0: the task prompt), with empty content.

Sizes are bounded: a text longer than :data:`MAX_TEXT` characters (an observation:
:data:`MAX_OBSERVATION`) keeps its start and a marker saying how much was cut; a step keeps
at most :data:`MAX_STEP_CHARS` characters of messages. Wall-clock seconds are for reading:
they are written here, never into the environment's ``info``, and nothing scored depends on
them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_repost.evaluate.run_dir import Trajectory

logger = logging.getLogger(__name__)

MAX_TEXT = 32_000
"""Characters kept of a message's content or a tool call's arguments."""
MAX_OBSERVATION = 8_000
"""Characters kept of an observation (a tool result)."""
MAX_STEP_CHARS = 128_000
"""Characters of messages kept per step; the messages beyond are noted, not kept."""
ROLES = ("system", "user", "assistant", "tool")
_REPLY_NUMBERS = ("tokens_in", "tokens_out")


def bounded_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its first ``limit`` characters and a marker saying how many were cut;
    a character UTF-8 cannot encode (a lone surrogate) becomes ``?``, so that the record
    can be written."""
    if len(text) > limit:
        text = text[:limit] + f"\n… [truncated: {len(text) - limit:,} more characters not recorded]"
    return text.encode("utf-8", "replace").decode("utf-8")


def _seconds(value: float) -> float:
    return round(max(0.0, value), 3) if math.isfinite(value) else 0.0


def _tool_calls(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, (list, tuple)):
        return []
    calls = []
    for call in raw[:64]:
        if isinstance(call, dict):
            arguments = call.get("arguments", "")
            calls.append(
                {
                    "id": str(call.get("id") or "")[:200],
                    "name": str(call.get("name") or "")[:200],
                    "arguments": bounded_text(arguments if isinstance(arguments, str) else repr(arguments)),
                }
            )
    return calls


def message_record(raw: Any) -> dict[str, Any]:
    """A message a policy reported, in the recorded form (bounded, plain types only)."""
    if not isinstance(raw, dict):
        return {"role": "user", "content": bounded_text(f"(not a message: {raw!r})", 500)}
    role = raw.get("role")
    content = raw.get("content")
    out: dict[str, Any] = {
        "role": role if role in ROLES else str(role)[:40],
        "content": bounded_text(content if isinstance(content, str) else "" if content is None else repr(content)),
    }
    calls = _tool_calls(raw.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    if raw.get("tool_call_id"):
        out["tool_call_id"] = str(raw["tool_call_id"])[:200]
    if raw.get("is_error") is True:
        out["is_error"] = True
    for key in _REPLY_NUMBERS:
        if isinstance(raw.get(key), int) and not isinstance(raw.get(key), bool):
            out[key] = raw[key]
    if isinstance(raw.get("seconds"), (int, float)) and not isinstance(raw.get("seconds"), bool):
        out["seconds"] = _seconds(float(raw["seconds"]))
    if raw.get("cached") is True:
        out["cached"] = True
    return out


class TranscriptRecorder:
    """Records an episode into a :class:`~gym_repost.evaluate.run_dir.Trajectory`: the
    reset, each step's messages and seconds, the step under way if the episode stops.

    Args:
        trajectory: where the record goes.
    """

    def __init__(self, trajectory: Trajectory) -> None:
        self._source: Callable[[], Any] | None = None
        self._trajectory = trajectory
        self._taken = 0
        self._observations: dict[str, int] = {}
        self._mark = time.monotonic()
        self._pending: dict[str, Any] | None = None

    def attach(self, policy: Any) -> None:
        """Record ``policy``: its messages come from ``policy.transcript()`` when it has
        that method; the clock starts now."""
        try:
            source = getattr(policy, "transcript", None)
        except Exception:
            source = None
        self._source = source if callable(source) else None
        self._mark = time.monotonic()

    def _lap(self) -> float:
        now = time.monotonic()
        seconds, self._mark = now - self._mark, now
        return _seconds(seconds)

    def _messages(self) -> list[dict[str, Any]] | None:
        """The messages the policy added since the last call (None: it keeps none)."""
        if self._source is None:
            return None
        try:
            messages = list(self._source())
            new, self._taken = messages[self._taken :], len(messages)
            return self._records(new)
        except Exception:
            logger.warning("policy.transcript() failed; its messages are no longer recorded", exc_info=True)
            self._source = None
            return None

    def _records(self, new: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        spent = 0
        for number, raw in enumerate(new):
            record = self._pointer(raw) or message_record(raw)
            spent += len(record["content"]) + sum(len(c["arguments"]) for c in record.get("tool_calls", ()))
            if spent > MAX_STEP_CHARS:
                note = f"[truncated: {len(new) - number} more messages of this step not recorded]"
                out.append({"role": "user", "content": note})
                break
            out.append(record)
        return out

    def _pointer(self, raw: Any) -> dict[str, Any] | None:
        """A tool result or user turn that repeats a recorded observation, as a pointer."""
        if not isinstance(raw, dict) or raw.get("role") not in ("tool", "user"):
            return None
        content = raw.get("content")
        step = self._observations.get(content) if isinstance(content, str) else None
        if step is None:
            return None
        return {**message_record({k: v for k, v in raw.items() if k != "content"}), "observation_of_step": step}

    def _observed(self, step: int, text: str) -> None:
        self._observations[text] = step  # a text seen twice points to its latest step

    def reset(self, observation: str) -> None:
        """The environment's reset returned ``observation`` (the task prompt)."""
        self._trajectory.reset = {"observation": bounded_text(observation), "seconds": {"env": self._lap()}}
        self._observed(0, observation)

    def policy_reset(self) -> None:
        """The policy's ``reset`` returned (or raised)."""
        reset = self._trajectory.reset
        assert reset is not None, "policy_reset() before reset()"
        messages = self._messages()
        if messages is not None:
            reset["messages"] = messages
        reset["seconds"]["policy"] = self._lap()

    def start_step(self) -> None:
        """The policy is asked for its next action."""
        self._lap()
        self._pending = {}

    def acted(self, action: Any) -> None:
        """The policy chose ``action`` (as it is recorded)."""
        assert self._pending is not None
        messages = self._messages()
        if messages is not None:
            self._pending["messages"] = messages
        self._pending["action"] = action
        self._pending["seconds"] = {"policy": self._lap()}

    def finish_step(self, step: dict[str, Any], observation: str) -> None:
        """The environment answered ``observation``: append ``step`` with the step's
        messages, its bounded observation and its seconds."""
        pending = self._pending or {}
        self._pending = None
        if "messages" in pending:
            step["messages"] = pending["messages"]
        step["observation"] = bounded_text(observation, MAX_OBSERVATION)
        step["seconds"] = {**pending.get("seconds", {}), "env": self._lap()}
        self._trajectory.append(step)
        self._observed(len(self._trajectory), observation)

    def interrupt(self) -> None:
        """The episode stopped during a step: keep what the policy said in it."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        if "messages" not in pending:
            messages = self._messages()
            if messages is not None:
                pending["messages"] = messages
            pending["seconds"] = {"policy": self._lap()}
        else:
            pending["seconds"]["env"] = self._lap()
        self._trajectory.interrupted = pending
