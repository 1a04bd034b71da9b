"""What a server refuses or ends: idle sessions, sessions over the limit, requests without
the token, malformed messages, a client that vanishes mid-episode.

No timed assertions: waits poll until the server has done what it must, with generous
deadlines for a loaded machine.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from serve_helpers import SUBMIT, run, write, wrong_body
from websockets.sync.client import connect

DEADLINE = 60.0


def eventually(attempt: Callable[[], Any], what: str) -> Any:
    """``attempt()``'s first result that does not raise, retrying until the deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            return attempt()
        except Exception as exc:
            if time.monotonic() > end:
                raise AssertionError(f"{what}: still failing after {DEADLINE:g} s") from exc
            time.sleep(0.1)


def fresh_episode(openenv: Any, url: str, task: Any) -> Any:
    """Connect a new client and reset it (raises while the server refuses)."""
    client = openenv.GenericEnvClient(base_url=url).sync()
    try:
        client.reset(task_id=task.id)
    except Exception:
        client.close()
        raise
    return client


def test_idle_session_is_closed_and_frees_its_place(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[0]
    with serve(max_sessions=1, session_timeout=0.5) as url:
        idle = openenv.GenericEnvClient(base_url=url).sync()
        idle.reset(task_id=task.id)
        # the session is closed while idle: a second client gets its place
        second = eventually(lambda: fresh_episode(openenv, url, task), "a new session after the idle one timed out")
        second.close()
        with pytest.raises(RuntimeError, match=r"idle for more than 0.5 s and was closed; open a new connection"):
            idle.step({"tool": "list_files", "args": {}})
        idle.close()


def test_a_long_step_is_not_idleness(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    """A test run longer than the idle timeout does not close the session running it."""
    task = demo_tasks[0]
    sleep_once = "    import time\n    if not hasattr(time, 'slept'):\n        time.slept = time.sleep(1.0)\n"
    slow = task.target.signature + "\n" + sleep_once + "    return None\n"
    with serve(session_timeout=0.2) as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        client.reset(task_id=task.id)
        client.step(write(slow))
        tested = client.step({"tool": "run_tests", "args": {}})
        assert tested.observation["info"]["test_report"] is not None
        written = client.step(write(task.ground_truth))  # sent at once: the session is still open
        assert written.observation["info"]["code_written"] is True


def test_session_limit_is_a_clear_error(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[0]
    with serve(max_sessions=2) as url:
        first, second = (fresh_episode(openenv, url, task) for _ in range(2))
        third = openenv.GenericEnvClient(base_url=url).sync()
        with pytest.raises(RuntimeError, match=r"the server is full: 2 of 2 sessions are open \(gym-repost serve --"):
            third.reset(task_id=task.id)
        third.close()
        first.close()
        eventually(lambda: fresh_episode(openenv, url, task), "a session once one was closed").close()
        second.close()


def test_token_is_required(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    token = "s3cret-token"
    with serve(token=token) as url:
        host = url.removeprefix("http://")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic !!"}):
            request = urllib.request.Request(f"{url}/health", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request)
            assert refused.value.code == 401 and b"missing or wrong token" in refused.value.read()
        basic = base64.b64encode(f"anyone:{token}".encode()).decode()
        for value in (f"Bearer {token}", f"Basic {basic}"):
            with urllib.request.urlopen(urllib.request.Request(f"{url}/tasks", headers={"Authorization": value})) as ok:
                assert len(json.loads(ok.read())["tasks"]) == len(demo_tasks)
        for base in (url, f"http://user:wrong@{host}"):
            with pytest.raises(ConnectionError, match="401"):
                openenv.GenericEnvClient(base_url=base).sync().connect()
        with openenv.GenericEnvClient(base_url=f"http://user:{token}@{host}").sync() as client:
            assert client.reset(task_id=demo_tasks[0].id).observation["info"]["task_id"] == demo_tasks[0].id


def test_malformed_messages_get_errors_and_the_session_goes_on(serve: Any, demo_tasks: list[Any]) -> None:
    task = demo_tasks[0]

    def exchange(ws: Any, message: str | bytes) -> dict[str, Any]:
        ws.send(message)
        return json.loads(ws.recv(timeout=DEADLINE))

    with serve() as url, connect(url.replace("http", "ws") + "/ws") as ws:
        for message, code in (
            ("not json", "INVALID_JSON"),
            ('{"type": "dance"}', "UNKNOWN_TYPE"),
            ("[1, 2]", "VALIDATION_ERROR"),  # JSON, not an object
            (b"\x00binary", "VALIDATION_ERROR"),
            ("[" * 100_000 + "]" * 100_000, "VALIDATION_ERROR"),  # deeper than the parser goes
            ('{"type": "step", "data": "read_file"}', "VALIDATION_ERROR"),
            ('{"type": "step", "data": {"tool": "list_files"}, "extra": 1}', "VALIDATION_ERROR"),
            ('{"type": "reset", "data": {"task_id": ["x"]}}', "EXECUTION_ERROR"),
        ):
            reply = exchange(ws, message)
            assert reply["type"] == "error", message
            assert reply["data"]["code"] == code, (message[:20], reply)
        assert exchange(ws, json.dumps({"type": "reset", "data": {"task_id": task.id}}))["type"] == "observation"
        for action in ({"tool": 5}, {"tool": "read_file", "args": "path"}, {"args": {"code": "x" * 10}}):
            reply = exchange(ws, json.dumps({"type": "step", "data": action}))
            assert reply["type"] == "observation" and reply["data"]["observation"]["text"].startswith("Error:")
            assert reply["data"]["reward"] == 0.0 and reply["data"]["done"] is False
        for depth in (1_000, 100_000):  # an object nested deeper than the limit, or than any parser goes
            nested = "[" * depth + "]" * depth
            deep = '{"type": "step", "data": {"tool": "write_code", "args": {"code": ' + nested + "}}}"
            reply = exchange(ws, deep)
            assert reply["type"] == "error" and reply["data"]["code"] == "VALIDATION_ERROR", reply
            assert "nested more than 64 levels" in reply["data"]["message"], reply
        # the session goes on, its episode with it
        reply = exchange(ws, json.dumps({"type": "step", "data": {"tool": "list_files", "args": {}}}))
        assert reply["type"] == "observation" and not reply["data"]["observation"]["text"].startswith("Error:")


def test_client_that_vanishes_mid_episode_frees_its_session(serve: Any, openenv: Any, demo_tasks: list[Any]) -> None:
    """A client that drops its connection without a word (no close message, no close
    frame) mid-episode: the server ends that session, and the place is free again."""
    task = demo_tasks[0]

    async def vanish(url: str) -> None:
        client = openenv.GenericEnvClient(base_url=url)
        await client.connect()
        await client.reset(task_id=task.id)
        await client.step(write(wrong_body(task)))
        client._ws.transport.abort()  # the TCP connection is cut

    with serve(max_sessions=1) as url:
        run(vanish(url))
        with eventually(lambda: fresh_episode(openenv, url, task), "a session after the client vanished") as client:
            client.step(write(task.ground_truth))
            assert client.step(SUBMIT).reward == 1.0
