"""Backends plug in by name: ``register_backend`` makes ``get_sandbox(name)`` build them."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel
from sandboxes import CountingSandbox

from gym_repost.errors import ConfigError
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.base import Sandbox
from gym_repost.sandbox.config import register_backend


class CountingLocalConfig(BaseModel):
    """A plugin backend: the local sandbox, counting its runs."""

    type: Literal["counting-local"] = "counting-local"
    workers: int = 1

    def build(self) -> Sandbox:
        return CountingSandbox(get_sandbox("local", workers=self.workers, warm=False))


def test_a_registered_backend_is_built_by_name_and_validated() -> None:
    register_backend("counting-local", CountingLocalConfig)
    sandbox = get_sandbox("counting-local", workers=1)
    assert isinstance(sandbox, CountingSandbox)
    sandbox.start()
    try:
        result = sandbox.run({"main.py": "print(6 * 7)"}, ["python3", "main.py"], timeout=30.0)
    finally:
        sandbox.inner.close()
    assert result.returncode == 0 and result.stdout.strip() == "42"
    assert sandbox.runs == 1
    with pytest.raises(ConfigError, match="counting-local.*workers"):
        get_sandbox("counting-local", workers="many")
    with pytest.raises(ConfigError, match="unknown sandbox backend 'nope'.*counting-local"):
        get_sandbox("nope")
