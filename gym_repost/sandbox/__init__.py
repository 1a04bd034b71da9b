"""Sandboxes: where candidate code and evaluation scripts run.

Owns the :class:`Sandbox` interface and its backends, and the host side of the protocol
with the in-sandbox programs of :mod:`gym_repost.programs`
(:func:`gym_repost.sandbox.programs.run_program`).

>>> from gym_repost.sandbox import get_sandbox
>>> with get_sandbox("local") as sb:
...     r = sb.run(files={"main.py": "print(1)"}, command=["python3", "main.py"], timeout=5.0)

May import: bounded_json, errors, programs.
"""

from gym_repost.sandbox.base import RunResult, Sandbox, SandboxLimits
from gym_repost.sandbox.config import LocalSandboxConfig, get_sandbox, sandbox_config

__all__ = ["LocalSandboxConfig", "RunResult", "Sandbox", "SandboxLimits", "get_sandbox", "sandbox_config"]
