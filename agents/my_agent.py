"""An example agent: explore the repository, propose code, test it, repair, submit.

Load it with ``gym-repost eval TASKS --policy agents/my_agent.py:MyAgent -o runs/mine``.

It shows the whole protocol (see ``gym_repost.policy.base.Policy``): ``reset`` receives a
``TaskView`` (the statement, the repository the agent may read, the dependency context,
the target's name, signature and docstring, the budgets; never the ground truth or the
tests) and the statement; ``act`` returns one tool call per step and reads the observation
of the previous one. Its "model" is a stand-in so that it runs offline: it writes the
target's header over a body that returns a guess (``None`` first, then an empty value of
the return annotation's type after a failing test run), which rarely passes. Replace
``propose`` with a call to your model, passing it ``self.notes`` (the statement, the files
the agent has read and the test reports it has seen). ``transcript`` lists what the agent
said (its prompts and its model's replies): the runner records it with each step and
the run viewer shows it beside the actions.
"""

from __future__ import annotations

from typing import Any

_GUESSES = {
    "bool": "False",
    "int": "0",
    "float": "0.0",
    "str": "''",
    "list": "[]",
    "dict": "{}",
    "tuple": "()",
    "set": "set()",
}


class MyAgent:
    """Explore, propose, run the tests, repair once, submit."""

    def __init__(self, explore: bool = True) -> None:
        self.explore = explore

    def reset(self, task: Any, observation: str, info: dict[str, Any], *, seed: int) -> None:
        """Start an episode: plan the first steps."""
        if task.kind != "function":
            raise ValueError("MyAgent writes functions; it does not write test files")
        self.view = task
        self.notes: list[str] = [observation]
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": observation}]
        self.attempt = 0
        self.plan: list[str] = ["list_files", "read_file"] if self.explore else []
        self.plan += ["write_code", "run_tests"]

    def propose(self) -> str:
        """The stand-in model: the target's header and docstring over a guessed return value."""
        target = self.view.target
        returns = target.signature.rpartition("->")[2].strip(" :") if "->" in target.signature else ""
        guess = "None" if self.attempt == 0 else _GUESSES.get(returns.split("[")[0].lower(), "None")
        lines = [f"@{d}" for d in target.decorators] + [target.signature]
        if target.docstring:
            lines.append('    """' + target.docstring.replace('"""', "'''").replace("\n", "\n    ") + '"""')
        code = "\n".join(lines + [f"    return {guess}"]) + "\n"
        self.messages.append({"role": "assistant", "content": f"A guess: `{target.name}` returns {guess}."})
        return code

    def transcript(self) -> list[dict[str, Any]]:
        """The conversation so far, oldest first (``role``, ``content``; a real model's
        replies also carry ``tool_calls``, ``tokens_in``, ``tokens_out``, ``seconds``)."""
        return self.messages

    def _step(self, tool: str) -> dict[str, Any]:
        if tool == "read_file":
            return {"tool": "read_file", "args": {"path": self.view.repository.target_file}}
        if tool == "write_code":
            code = self.propose()
            self.attempt += 1
            return {"tool": "write_code", "args": {"code": code}}
        return {"tool": tool, "args": {}}

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        """Follow the plan; after a test run, submit if it passed, else repair once."""
        self.notes.append(observation)
        if self.plan:
            return self._step(self.plan.pop(0))
        report = info.get("test_report") or {}
        if info.get("tool") == "run_tests" and not report.get("passed", False) and self.attempt < 2:
            self.plan = ["run_tests"]
            return self._step("write_code")
        if info.get("tool") == "submit" and not info.get("solved") and self.attempt < 2:
            self.plan = ["submit"]
            return self._step("write_code")
        return self._step("submit")
