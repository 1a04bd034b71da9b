"""``gym_repost.serve.trl``: served tasks in the shape TRL's ``GRPOTrainer`` asks of an
``environment_factory``, driven by a stand-in for the trainer's loop (TRL is not installed
in CI).

The stand-in does what TRL 1.16 does with environments: it builds one to list the tools
(the public functions of its class), keeps a pool that it builds once and reuses for every
batch, calls ``reset(**row)`` and appends the returned text to the row's prompt, calls the
tools the "model" picks, hands ``reward_funcs`` the environments, and never closes them.

No timed assertions: the session timeout is tiny, and waits poll until the server has
closed the sessions, with generous deadlines.
"""

from __future__ import annotations

import functools
import inspect
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from serve_helpers import wrong_body
from testfile_tasks import tiny_testfile_task  # noqa: F401 - a fixture

from gym_repost.errors import ConfigError
from gym_repost.serve.app import SessionServer
from gym_repost.serve.trl import (
    ServedEnvironment,
    ServedTask,
    ServedTestFileTask,
    close_all,
    dataset_rows,
    open_sessions,
    reward_func,
    served_tasks,
)
from gym_repost.task import FunctionTask, TestFileTask
from gym_repost.tools import FUNCTION_TOOLS, TESTFILE_TOOLS
from tests.conftest import ROOT

DEADLINE = 60.0


def eventually(check: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not after {DEADLINE:g} s")
        time.sleep(0.05)


def offered_tools(cls: type) -> list[str]:
    """What TRL 1.16 offers the model (``GRPOTrainer.__init__``): the class's public
    functions, but ``reset`` and ``get_reward``."""
    names = [n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")]
    return sorted(n for n in names if n not in ("reset", "get_reward"))


class StandInTrainer:
    """TRL 1.16's use of ``environment_factory`` (see the module docstring), with a
    scripted model: ``answers[i]`` is the code the i-th rollout of a batch writes."""

    def __init__(self, factory: Callable[[], ServedEnvironment], rows: list[dict[str, Any]]) -> None:
        self.factory = factory
        self.rows = rows
        probe = factory()
        self.tools = offered_tools(type(probe))
        self.pool = [probe]
        self.made = 1
        self.prompts: list[str] = []

    def environments(self, count: int) -> list[ServedEnvironment]:
        while len(self.pool) < count:
            self.pool.append(self.factory())
            self.made += 1
        return self.pool[:count]

    def step(self, answers: list[str], write: str = "write_code") -> list[float]:
        """One generation batch: each rollout of each row writes its answer and submits."""
        environments = self.environments(len(self.rows))
        for env, row, answer in zip(environments, self.rows, answers):
            content = row["prompt"][-1]["content"]
            self.prompts.append(content + env.reset(**row))
            for tool, args in ((write, {"code": answer}), ("submit", {})):
                assert tool in self.tools
                try:
                    getattr(env, tool)(**args)
                except Exception as exc:  # TRL hands the model {"error": ...}
                    pytest.fail(f"{tool} raised {exc!r}")
        return reward_func(environments=environments, prompts=[], completions=[])


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> list[SessionServer]:
    """The session servers made during the test (the served app runs in this process)."""
    made: list[SessionServer] = []
    original = SessionServer.__init__

    def init(self: SessionServer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SessionServer, "__init__", init)
    return made


def test_each_kind_offers_exactly_its_tools() -> None:
    assert offered_tools(ServedTask) == sorted(s.name for s in FUNCTION_TOOLS)
    assert offered_tools(ServedTestFileTask) == sorted(s.name for s in TESTFILE_TOOLS)
    for cls in (ServedTask, ServedTestFileTask):
        for name in offered_tools(cls):
            assert inspect.getdoc(getattr(cls, name)), name  # TRL builds the tool's schema from it


def test_importing_it_imports_neither_trl_nor_openenv() -> None:
    code = (
        "import sys, gym_repost, gym_repost.serve.trl\n"
        "print(sorted(m for m in ('trl', 'torch', 'transformers', 'openenv', 'fastapi') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_a_long_run_reconnects_after_the_server_closed_idle_sessions_and_closes_them_at_the_end(
    serve: Any, servers: list[SessionServer], demo_tasks: list[FunctionTask]
) -> None:
    """TRL keeps its environments for the whole run; a training step longer than the
    session timeout leaves their sessions closed by the server, and the next batch's
    ``reset`` must still work. At the end, ``close_all()`` closes every session."""
    tasks = demo_tasks[:2]
    with serve(session_timeout=2.0, max_sessions=2) as url:
        (server,) = servers
        trainer = StandInTrainer(functools.partial(ServedTask, url), dataset_rows(url, limit=2))
        answers = [tasks[0].ground_truth, wrong_body(tasks[1])]
        assert trainer.step(answers) == [1.0, 0.0]
        assert server.active_sessions == 2 and open_sessions() == 2
        # the model trains on the batch for longer than the session timeout
        eventually(lambda: server.active_sessions == 0, "the idle sessions closed by the server")
        assert trainer.step(answers) == [1.0, 0.0]  # reset reconnected, transparently
        assert trainer.step(answers) == [1.0, 0.0]
        assert trainer.made == 2 and server.active_sessions == 2  # made once, new sessions only when lost
        assert [env.reconnections for env in trainer.pool] == [1, 1]
        assert close_all() == 2
        assert open_sessions() == 0
        eventually(lambda: server.active_sessions == 0, "the sessions closed by close_all()")
    # the prompt and the statement are apart: "...tests pass.\n\n# Task: ..."
    statement = trainer.pool[0].task_view["statement"]
    assert trainer.prompts[0].endswith("submit when the tests pass.\n\n" + statement)


def test_a_session_closed_mid_episode_ends_that_episode_and_the_next_reset_reconnects(
    serve: Any, servers: list[SessionServer], demo_tasks: list[FunctionTask]
) -> None:
    task = demo_tasks[0]
    with serve(session_timeout=2.0) as url:
        (server,) = servers
        with ServedTask(url) as env:
            env.reset(task_id=task.id)
            env.write_code(wrong_body(task))
            eventually(lambda: server.active_sessions == 0, "the idle session closed by the server")
            text = env.submit()
            assert text.startswith("The episode is over: the session ended") and "idle for more than 2 s" in text
            assert env.done and env.reward == 0.0 and env.lost
            with pytest.raises(ValueError, match="The episode is over"):
                env.run_tests()
            env.reset(task_id=task.id)
            assert not env.done and env.lost is None
            env.write_code(task.ground_truth)
            assert env.submit().startswith("Submission accepted") and env.reward == 1.0
        eventually(lambda: server.active_sessions == 0, "the session closed by the with block")


def test_environment_factory_shape_earns_the_environments_reward(serve: Any, demo_tasks: list[FunctionTask]) -> None:
    task = demo_tasks[0]
    with serve() as url:
        solved, failed = ServedTask(url), ServedTask(url)
        try:
            statement = solved.reset(task_id=task.id, prompt=[{"role": "user", "content": "Solve it."}], other=1)
            assert statement.startswith("\n\n# Task: ") and task.target.signature in statement
            assert failed.reset(task_id=task.id).startswith("# Task: ")  # no prompt to keep apart from
            assert "shopkit/" in solved.list_files()
            assert "[lines 1-3 of" in solved.read_file(task.repository.target_file, start=1, end=3)
            assert "def " in solved.search("def ")
            solved.write_code(task.ground_truth)
            failed.write_code(wrong_body(task))
            assert "passed" in solved.run_tests()
            assert solved.submit().startswith("Submission accepted")
            failed.submit()
            assert reward_func([solved, failed]) == [1.0, 0.0]
            with pytest.raises(ValueError, match="The episode is over"):
                solved.run_tests()
        finally:
            assert close_all([solved, failed, ServedTask(url)]) == 2  # one never connected


def test_each_class_serves_its_kind_and_rows_select_the_environment(
    serve: Any,
    demo_tasks: list[FunctionTask],
    tiny_testfile_task: TestFileTask,  # noqa: F811
) -> None:
    with serve(tasks=[demo_tasks[0], tiny_testfile_task], token="s3cret") as url:
        authorized = url.replace("http://", "http://user:s3cret@")
        rows = {row["environment"]: row for row in dataset_rows(authorized)}
        assert [t["kind"] for t in served_tasks(authorized)] == ["function", "testfile"]
        assert [r["task_id"] for r in dataset_rows(authorized, kind="testfile")] == [tiny_testfile_task.id]
        with ServedTask(authorized) as wrong, ServedTestFileTask(authorized) as right:
            with pytest.raises(ConfigError, match="is a testfile task.*use ServedTestFileTask"):
                wrong.reset(**rows["testfile"])
            right.reset(**rows["testfile"])
            right.write_tests(tiny_testfile_task.ground_truth)
            assert right.submit().startswith("Submission accepted") and right.reward > 0.5
