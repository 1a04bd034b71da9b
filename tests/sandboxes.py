"""Sandboxes the tests wrap around the real one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gym_repost.sandbox.base import RunResult, Sandbox


class CountingSandbox(Sandbox):
    """The real sandbox ``inner``, counting its runs; closing it leaves ``inner`` open.

    ``description``: what :meth:`describe` says instead of ``inner``'s (a sandbox whose
    limits or process differ, for what is keyed on them)."""

    def __init__(self, inner: Sandbox, description: dict[str, object] | None = None) -> None:
        self.inner, self.runs, self.description = inner, 0, description

    def start(self) -> None:
        self.inner.start()

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return self.description if self.description is not None else self.inner.describe()

    def run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float = 10.0,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        cpu_seconds: float | None = None,
    ) -> RunResult:
        self.runs += 1
        return self.inner.run(files, command, timeout, stdin=stdin, env=env, network=network, cpu_seconds=cpu_seconds)
