"""The served contract, through OpenEnv's own clients: reset picks the task, step is the
in-process action, the observation is ``{"text", "info"}``, reward and done are the
environment's; the ground truth earns 1.0, a wrong body 0, and nothing sent holds the
ground truth or the evaluation script."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from serve_helpers import SUBMIT, run, write, wrong_body
from testfile_tasks import make_testfile_task

from gym_repost.env import make_task_env
from gym_repost.sandbox import Sandbox


def test_sync_client_ground_truth_earns_one(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[0]
    with serve() as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        first = client.reset(task_id=task.id, seed=3)
        assert first.done is False and first.reward is None
        assert first.observation["info"]["task_id"] == task.id
        assert task.target.signature in first.observation["text"]
        view = first.observation["info"]["task_view"]
        assert view["id"] == task.id and view["target"]["signature"] == task.target.signature
        written = client.step(write(task.ground_truth))
        assert (written.reward, written.done) == (0.0, False)
        result = client.step(SUBMIT)
        assert (result.reward, result.done) == (1.0, True)
        assert result.observation["terminated"] is True and result.observation["truncated"] is False
        assert result.observation["info"]["solved"] is True
        state = client.state()
        assert state["task_id"] == task.id and state["step_count"] == 2 and state["done"] is True


def test_async_client_wrong_body_earns_zero(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[1]

    async def episode(url: str) -> list[Any]:
        async with openenv.GenericEnvClient(base_url=url) as client:
            await client.reset(task_id=task.name)  # by name
            tested = await client.step({"tool": "run_tests", "args": {}})
            await client.step(write(wrong_body(task)))
            return [tested, await client.step({"tool": "submit", "args": {}})]

    with serve() as url:
        tested, submitted = run(episode(url))
    assert tested.reward == 0.0 and tested.done is False
    assert submitted.reward == 0.0 and submitted.done is True  # one submission allowed by default
    assert submitted.observation["info"]["test_report"]["passed"] is False
    assert submitted.observation["text"].startswith("Submission failed")


def test_same_observations_as_in_process(serve: Any, openenv: Any, demo_tasks: list[Any], sandbox: Sandbox) -> None:
    task = demo_tasks[2]
    actions = [
        {"tool": "read_file", "args": {"path": task.repository.target_file}},
        {"tool": "search", "args": {"pattern": "def "}},
        {"tool": "read_file", "args": {"path": "../etc/passwd"}},
        {"name": "list_files", "arguments": "{}"},  # OpenAI's spelling is accepted in-process too
        {"tool": "no_such_tool"},
        write(wrong_body(task)),
        {"tool": "run_tests", "args": {}},
    ]
    env = make_task_env(task, sandbox=sandbox, max_steps=30, max_submissions=1)
    expected = [env.reset(seed=5)[0]] + [env.step(a)[0] for a in actions]
    env.close()
    with serve() as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        got = [client.reset(task_id=task.id, seed=5).observation["text"]]
        got += [client.step(a).observation["text"] for a in actions]
    assert got == expected


def test_seeded_sample_and_budgets(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    with serve(max_steps=2) as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        drawn = [client.reset(seed=s).observation["info"]["task_id"] for s in (1, 2, 1, 2)]
        assert drawn[0] == drawn[2] and drawn[1] == drawn[3]
        assert set(drawn) <= {t.id for t in demo_tasks}
        client.step({"tool": "list_files", "args": {}})
        last = client.step({"tool": "list_files", "args": {}})
        assert last.done is True and last.observation["truncated"] is True and last.reward == 0.0


def test_sixteen_concurrent_sessions(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    """16 clients at once, each on its own task and code: every ground truth earns 1.0 and
    every wrong body 0, so no session saw another's state."""
    plan = [(demo_tasks[i % len(demo_tasks)], i % 2 == 0) for i in range(16)]

    async def episode(url: str, task: Any, right: bool) -> tuple[float, bool, str]:
        async with openenv.GenericEnvClient(base_url=url, message_timeout_s=300) as client:
            await client.reset(task_id=task.id)
            await client.step(write(task.ground_truth if right else wrong_body(task)))
            result = await client.step(SUBMIT)
            return result.reward, result.done, result.observation["info"]["task_id"]

    async def everyone(url: str) -> list[tuple[float, bool, str]]:
        return await asyncio.gather(*(episode(url, task, right) for task, right in plan))

    with serve(max_sessions=16) as url:
        results = run(everyone(url))
    assert results == [(1.0 if right else 0.0, True, task.id) for task, right in plan]


def test_nothing_sent_holds_the_answer(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[3]
    sent: list[Any] = []
    with serve(max_submissions=2) as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        sent.append(client.reset(task_id=task.id).observation)
        for action in (write(wrong_body(task)), {"tool": "run_tests", "args": {}}, SUBMIT, SUBMIT):
            sent.append(client.step(action).observation)
        sent.append(client.state())
        with urllib.request.urlopen(f"{url}/tasks") as response:
            sent.append(json.loads(response.read()))
        with urllib.request.urlopen(f"{url}/metadata") as response:
            sent.append(json.loads(response.read()))
    text = json.dumps(sent)
    body = task.ground_truth.split(task.target.signature, 1)[1]
    assert task.ground_truth not in text and json.dumps(body)[1:-1] not in text
    assert json.dumps(task.evaluation.script)[1:-1] not in text
    assert f"def test_{task.target.name}" not in text  # the evaluation script's tests
    listing = sent[-2]["tasks"]
    assert {t["id"] for t in listing} == {t.id for t in demo_tasks}
    assert set(listing[0]) == {"id", "name", "kind"}


def test_wrong_resets_and_steps_are_clear_errors(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    with serve() as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        for kwargs, says in (
            ({"task_id": "no-such-task"}, "no task with id or name 'no-such-task'"),
            ({"task_id": 7}, "task_id must be a task's id or name"),
            ({"seed": "x"}, "seed must be a non-negative integer"),
            ({"seed": -1}, "seed must be a non-negative integer"),
            ({"difficulty": 3}, "unknown argument(s) ['difficulty']"),
        ):
            try:
                client.reset(**kwargs)
            except RuntimeError as exc:
                assert says in str(exc)
            else:
                raise AssertionError(f"reset({kwargs}) was accepted")
        try:
            client.step({"tool": "list_files", "args": {}})
        except RuntimeError as exc:
            assert "no episode yet; call reset() first" in str(exc)
        else:
            raise AssertionError("a step before any reset was accepted")
        assert client.reset(task_id=demo_tasks[0].id).observation["info"]["task_id"] == demo_tasks[0].id


def test_testfile_task_served(serve: Any, openenv: Any) -> None:
    """A test-file task is served as TestFile-v0: its view, and write_tests in place of
    write_code (scoring is the environment's, as for function tasks)."""
    task = make_testfile_task()
    with serve(tasks=[task]) as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        first = client.reset()  # the only task
        view = first.observation["info"]["task_view"]
        assert view["kind"] == "testfile" and view["test_file"]["test_path"] == task.evaluation.test_path
        assert task.evaluation.test_path not in view["repository"]["files"]
        assert task.ground_truth not in first.observation["text"] + json.dumps(view)
        assert client.step(write(task.ground_truth)).observation["text"].startswith("Error:")  # no write_code here
        written = client.step({"tool": "write_tests", "args": {"code": task.ground_truth}})
        assert written.observation["info"]["code_written"] is True and written.reward == 0.0


def test_a_session_finds_nothing_of_another_in_its_memory(openenv: Any, demo_tasks: list[Any]) -> None:
    """Issue 32: session A submits a correct body; session B's candidate, on the same warm
    worker, looks for it (and for the reference's ground truth) in its own memory and up its
    stack, delegates to it or prints it through run_tests: B earns nothing and sees nothing."""
    from memory_attacks import MEMORY_ATTACKS

    from gym_repost.sandbox import get_sandbox
    from gym_repost.serve import ServeConfig, running

    task = demo_tasks[0]
    body = [line.strip() for line in task.ground_truth.splitlines()[1:] if len(line.strip()) > 12]
    with get_sandbox("local", workers=1) as one_worker:
        with running(demo_tasks, one_worker, ServeConfig(host="127.0.0.1", port=0)) as url:
            with openenv.GenericEnvClient(base_url=url).sync() as first:
                first.reset(task_id=task.id)
                first.step(write(task.ground_truth.replace("\n", "\n\n", 1)))
                assert first.step(SUBMIT).reward == 1.0
            for attack in MEMORY_ATTACKS.values():
                with openenv.GenericEnvClient(base_url=url).sync() as second:
                    second.reset(task_id=task.id)
                    second.step(write(attack.format(name=task.target.name)))
                    tested = second.step({"tool": "run_tests", "args": {}})
                    shown = [line for line in body if line in tested.observation["text"]]
                    assert not shown, shown
                    assert not tested.observation["text"].startswith("All tests passed"), tested.observation["text"]
                    assert second.step(SUBMIT).reward == 0.0
