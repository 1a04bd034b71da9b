"""``agents/served_rollouts.py``: the trainer's loop over the package's served tasks
(``gym_repost.serve.trl``, tested in test_trl.py), played by a policy instead of a model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import wrong_body

from gym_repost.serve.trl import open_sessions

EXAMPLE = Path(__file__).resolve().parents[2] / "agents" / "served_rollouts.py"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    spec = importlib.util.spec_from_file_location("served_rollouts", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(EXAMPLE.parents[1])  # --policy agents/my_agent.py:MyAgent is relative
    return module


def test_rollout_groups_with_the_offline_policy(example: Any, serve: Any) -> None:
    with serve() as url:
        results = example.main([url, "--tasks", "2", "--group", "3"])
    assert len(results) == 2
    for result in results:
        assert len(result["rewards"]) == 3 and set(result["rewards"]) <= {0.0, 1.0}
        assert len(set(result["rewards"])) == 1  # the stand-in is deterministic: no advantage
        assert result["advantages"] == [0.0, 0.0, 0.0]
    assert open_sessions() == 0  # the bad inputs (no server, --policy oracle) are in tests/test_cli_bad_inputs.py


@pytest.mark.usefixtures("llm_keys")
def test_rollout_group_with_an_openai_compatible_model(
    example: Any, serve: Any, demo_tasks: list[Any], server: Any
) -> None:
    """The LLM policy (a scripted OpenAI-compatible server) through the trainer's loop: one
    generation answers the ground truth, the other a wrong body; GRPO's advantages split."""
    from gym_repost.llm.scripted_server import Reply
    from gym_repost.policy import load_policy

    task = demo_tasks[0]
    server.push(Reply(text=f"```python\n{task.ground_truth}```\n"), Reply(text=f"```python\n{wrong_body(task)}```\n"))
    policy = load_policy("llm:openai-compatible/test-model", base_url=server.openai_base_url, timeout=5.0)
    with serve() as url:
        rewards, advantages = example.rollout_group(url, policy, {"task_id": task.id}, 2)
    assert sorted(rewards) == [0.0, 1.0]
    assert sorted(round(a, 2) for a in advantages) == [-1.0, 1.0]
    assert all(task.ground_truth not in r.text() for r in server.requests)  # the model never saw it
