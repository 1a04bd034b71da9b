"""The rollout runner: n samples per task, parallel workers, resumable run directories.

Each episode runs a fresh policy object in a fresh environment against a shared,
thread-safe sandbox. The policy is given the task's
:class:`~gym_repost.task_view.TaskView`; only the shipped controls also get the ground
truth (:func:`~gym_repost.policy.privileged.reset_policy`). Every finished episode is
appended to ``episodes.jsonl`` at once, so a killed run loses only the episodes in
flight; rerunning continues where it stopped (infrastructure errors are retried, finished
episodes are skipped, nothing duplicates). One process writes to a run directory at a
time (``RUN_DIR/.lock``); an interrupt stops recording at once and does not wait for the
episodes in flight. Beside each episode record, its transcript goes to
``trajectories.jsonl``: the task prompt, then per step what the policy said (an LLM's
replies, tool calls and tokens), the action, the observation and the wall-clock seconds
(:mod:`gym_repost.evaluate.transcript`).

The environment follows the task's kind: ``gym_repost/Function-v0`` for function tasks,
``gym_repost/TestFile-v0`` for test-file tasks. A test-file episode's reward is its best
submission's metric blend (``--reward`` applies to function tasks only), and it *passes*
when a submission does: the test file runs, every test passes and the blend reaches the
pass threshold (0.9 of the repository's own tests by default); pass@k counts those.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gym_repost import bounded_json
from gym_repost.env import make_task_env
from gym_repost.env.function_env import FunctionEnv
from gym_repost.env.testfile_env import TestFileEnv
from gym_repost.errors import InfrastructureError, PolicyError, UntrustedDataError
from gym_repost.evaluate.run_dir import Episode, RunConfig, RunDir, Trajectory, software_versions
from gym_repost.evaluate.summary import summarize
from gym_repost.evaluate.transcript import TranscriptRecorder
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.policy.loader import PolicyFactory
from gym_repost.policy.privileged import reset_policy
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import Task

logger = logging.getLogger(__name__)


def episode_seed(base: int, task_id: str, sample: int) -> int:
    """A stable 31-bit seed per (run seed, task, sample)."""
    digest = hashlib.sha256(f"{base}:{task_id}:{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def tasks_digest(tasks: Sequence[Task]) -> str:
    """Hash of the task ids, so a resumed run is checked to use the same tasks."""
    return hashlib.sha256("\n".join(sorted(t.id for t in tasks)).encode()).hexdigest()[:16]


def _act(policy: Any, observation: str, info: dict[str, Any]) -> Any:
    try:
        return policy.act(observation, info)
    except InfrastructureError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy.act raised {type(exc).__name__}: {exc}") from exc


def make_env(task: Task, sandbox: Sandbox, config: RunConfig) -> FunctionEnv | TestFileEnv:
    """The environment for the task's kind, with the run's budgets."""
    return make_task_env(
        task, sandbox=sandbox, max_steps=config.max_steps, max_submissions=config.repairs + 1, reward=config.reward
    )


@dataclass
class _Outcome:
    """What one played episode gave, before it becomes an :class:`Episode`."""

    submissions: list[bool] = field(default_factory=list)
    test_runs: list[bool] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    steps: int = 0
    last_report: dict[str, Any] | None = None


def _play(
    env: FunctionEnv | TestFileEnv, policy: Any, task: Task, sample: int, seed: int, recorder: TranscriptRecorder
) -> _Outcome:
    obs, info = env.reset(seed=seed)
    recorder.reset(obs)
    info = {**info, "sample": sample, "seed": seed}
    try:
        reset_policy(policy, task, obs, info, seed=seed)
    except Exception as exc:
        raise PolicyError(f"policy.reset raised {type(exc).__name__}: {exc}") from exc
    finally:
        recorder.policy_reset()
    outcome = _Outcome()
    tokens = _Tokens(policy)
    while True:
        recorder.start_step()
        action = _act(policy, obs, info)
        recorded = _recordable(action)
        recorder.acted(recorded)
        obs, reward, terminated, truncated, info = env.step(action)
        if info.get("infra_error"):
            raise InfrastructureError(info["infra_error"])
        outcome.reward += float(reward)
        tested = info["tool"] in ("run_tests", "submit") and info["ok"] and info["test_report"] is not None
        if tested:
            outcome.test_runs.append(bool(info["test_report"]["passed"]))
            if info["tool"] == "submit":
                outcome.submissions.append(bool(info["test_report"]["passed"]))
        step = {"action": recorded, "reward": reward, "tool": info["tool"], "ok": info["ok"]}
        step["tokens"] = tokens.since_last()
        if tested:
            step["test_report"] = _brief(info["test_report"])
        recorder.finish_step(step, obs)
        if terminated or truncated:
            outcome.terminated, outcome.truncated = terminated, truncated
            outcome.steps, outcome.last_report = info["steps"], info["test_report"]
            return outcome


def _recordable(action: Any) -> Any:
    """The action as the trajectory keeps it: a plain JSON copy, or what was wrong with it
    (the environment said so too; an action must not break the run's files)."""
    try:
        copy = bounded_json.plain_copy(action)
        json.dumps(copy, ensure_ascii=False).encode("utf-8")
        return copy
    except (UntrustedDataError, UnicodeEncodeError) as exc:
        return {"unrecordable_action": f"{bounded_json.type_name(action)}: {exc}"[:500]}


def run_episode(
    task: Task, sample: int, factory: PolicyFactory, sandbox: Sandbox, config: RunConfig
) -> tuple[Episode, Trajectory]:
    """Play one episode; infrastructure failures become an ``infra_error`` record. The
    trajectory is the episode's transcript (:mod:`gym_repost.evaluate.transcript`)."""
    seed = episode_seed(config.seed, task.id, sample)
    env = make_env(task, sandbox, config)
    trajectory = Trajectory()
    recorder = TranscriptRecorder(trajectory)
    base: dict[str, Any] = {
        "task_id": task.id,
        "task_name": task.name,
        "sample": sample,
        "seed": seed,
        "policy": config.policy,
    }
    policy: Any = None
    started = time.time()
    try:
        policy = factory()
        recorder.attach(policy)
        out = _play(env, policy, task, sample, seed, recorder)
    except Exception as exc:
        recorder.interrupt()
        if not isinstance(exc, InfrastructureError):
            logger.error("episode %s/%d crashed:\n%s", task.name, sample, traceback.format_exc())
        return Episode(
            **base,
            **_timing(started),
            status="infra_error",
            steps=len(trajectory),
            infra_error=f"{type(exc).__name__}: {exc}",
        ), trajectory
    finally:
        _close_policy(policy)
        env.close()
    solved_at = out.submissions.index(True) if True in out.submissions else None
    return Episode(
        **base,
        **_timing(started),
        status="passed" if solved_at is not None else "failed",
        submissions=out.submissions,
        test_runs=out.test_runs,
        solved_at=solved_at,
        steps=out.steps,
        reward=out.reward,
        terminated=out.terminated,
        truncated=out.truncated,
        code=env.code,
        final_report=_brief(out.last_report),
        stats=_stats(policy),
    ), trajectory


_REPORT_KEYS = ("passed", "status", "exception", "message", "assertion", "reward")
"""What an episode's final report and a trajectory step keep of a test report: the failing
assertion with both sides' values (function tasks) or the reward and the main metrics
(test-file tasks); the observation holds the rest."""
_METRIC_KEYS = ("tests", "passed", "execution_rate", "pass_rate", "line_coverage", "branch_coverage", "mutation_score")


def _brief(report: dict[str, Any] | None) -> dict[str, Any] | None:
    if report is None:
        return None
    brief = {k: report.get(k) for k in _REPORT_KEYS if k in report}
    if isinstance(report.get("metrics"), dict):
        brief["metrics"] = {k: report["metrics"].get(k) for k in _METRIC_KEYS if k in report["metrics"]}
    return brief


class _Tokens:
    """The tokens a policy spent since the last step, from its ``stats()`` (LLM policies
    count ``input_tokens`` and ``output_tokens``); None for a policy that counts none. The
    first step also carries what ``reset`` spent (a generated docstring, say), so the steps
    add up to the episode's total."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self._last: tuple[int, int] | None = None

    def _totals(self) -> tuple[int, int] | None:
        stats = _stats(self._policy)
        if not isinstance(stats.get("input_tokens"), int) or not isinstance(stats.get("output_tokens"), int):
            return None
        return stats["input_tokens"], stats["output_tokens"]

    def since_last(self) -> dict[str, int] | None:
        now = self._totals()
        before, self._last = self._last, now
        if now is None:
            return None
        base = before or (0, 0)
        return {"input": now[0] - base[0], "output": now[1] - base[1]}


def _timing(started: float) -> dict[str, Any]:
    """When the episode started (UTC, ISO 8601) and its wall-clock seconds: for the report
    only; nothing scored depends on them."""
    started_at = datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds")
    return {"started_at": started_at, "seconds": round(time.time() - started, 3)}


def _stats(policy: Any) -> dict[str, Any]:
    stats = getattr(policy, "stats", None)
    try:
        return dict(stats()) if callable(stats) else {}
    except Exception:
        return {}


def _close_policy(policy: Any) -> None:
    close = getattr(policy, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            logger.warning("policy.close() failed", exc_info=True)


class _Recorder:
    """Appends finished episodes to the run directory until stopped.

    Once :meth:`stop` has returned nothing more is written: the episodes in flight when a
    run is interrupted are not recorded, so the next run into the directory reruns them.
    """

    def __init__(self, run_dir: RunDir, on_episode: Callable[[Episode], None] | None) -> None:
        self._run_dir = run_dir
        self._on_episode = on_episode
        self._lock = threading.Lock()
        self.stopped = False

    def record(self, episode: Episode, trajectory: Trajectory) -> None:
        with self._lock:
            if self.stopped:
                return
            self._run_dir.append(episode, trajectory)
        if self._on_episode is not None:
            self._on_episode(episode)

    def stop(self) -> None:
        with self._lock:  # waits for an append under way: no half-written record
            self.stopped = True


@dataclass(frozen=True)
class EpisodeWork:
    """The unit of work of :func:`evaluate`: one (task, sample) episode, played where the
    executor runs it. Picklable: the policy factory travels as its spec and options and the
    policy (and its LLM client) is created where the episode runs."""

    factory: PolicyFactory
    config: RunConfig

    def __call__(self, item: tuple[Task, int], sandbox: Sandbox | None) -> tuple[Episode, Trajectory]:
        task, sample = item
        return run_episode(task, sample, self.factory, need_sandbox(sandbox, "an episode"), self.config)


def evaluate(
    tasks: Sequence[Task],
    factory: PolicyFactory,
    config: RunConfig,
    run_dir: RunDir,
    sandbox: Sandbox | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Run every (task, sample) not yet finished in ``run_dir``; return the summary.

    Episodes run on ``executor`` (default: ``config.workers`` threads over ``sandbox``;
    the Ray executor brings its own sandboxes). This process alone writes ``run_dir``: each
    episode is recorded once, when its result comes back, whichever worker played it (an
    episode rerun after a worker died is still recorded once). The writer lock is held
    throughout. Interrupted (KeyboardInterrupt), it returns at once by raising, with every
    finished episode on disk and none of those in flight; closing ``sandbox`` then frees
    threads stuck in a sandbox call.

    Raises:
        RunDirError: ``run_dir`` belongs to a run with other settings.
        RunDirBusyError: another process is writing to ``run_dir``.
    """
    with run_dir.writer_lock():
        run_dir.prepare(config if config.versions else config.model_copy(update={"versions": software_versions()}))
        done = run_dir.finished()
        todo = [(t, s) for t in tasks for s in range(config.n) if (t.id, s) not in done]
        logger.info("%d episodes to run (%d already finished)", len(todo), len(done))
        recorder = _Recorder(run_dir, on_episode)
        try:
            with_sandbox(executor, sandbox, config.workers).map(
                EpisodeWork(factory, config), todo, lambda result: recorder.record(*result)
            )
        except BaseException:
            recorder.stop()
            raise
        ids = {t.id for t in tasks}
        summary = summarize([e for e in run_dir.episodes() if e.task_id in ids], config)
        run_dir.write_summary(summary)
        return summary
