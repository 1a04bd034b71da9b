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

Three ways an episode can end other than by its budgets: an *infrastructure* error (a
sandbox, an LLM endpoint: not scored, retried by a rerun); a *policy* error (the policy's
constructor, ``reset`` or ``act`` raised: a failed episode whose ``policy_error`` holds the
traceback, counted apart, not retried); or the agent's own mistakes, which are
observations and never end it. A policy that cannot be built at all fails the run before
it starts (:func:`~gym_repost.policy.loader.load_policy` builds one). A run is resumed only
with the same policy (:class:`~gym_repost.evaluate.run_dir.RunConfig`'s
``policy_fingerprint``), or started afresh with ``overwrite``; ``fail_fast`` stops it at
the first policy or infrastructure error.

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
from gym_repost.errors import GymRepostError, InfrastructureError, PolicyError, UntrustedDataError
from gym_repost.evaluate.run_dir import Episode, RunConfig, RunDir, Trajectory, software_versions
from gym_repost.evaluate.summary import summarize
from gym_repost.evaluate.transcript import TranscriptRecorder
from gym_repost.executor import Executor, need_sandbox, with_sandbox
from gym_repost.policy.loader import PolicyFactory, policy_fingerprint
from gym_repost.policy.privileged import reset_policy
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import Task

logger = logging.getLogger(__name__)

_MAX_TRACEBACK_CHARS = 16000


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
    env: FunctionEnv | TestFileEnv,
    policy: Any,
    task: Task,
    sample: int,
    seed: int,
    recorder: TranscriptRecorder,
    outcome: _Outcome,
) -> None:
    """Play the episode into the transcript and ``outcome`` (both hold what was played
    when it raises)."""
    obs, info = env.reset(seed=seed)
    recorder.reset(obs)
    info = {**info, "sample": sample, "seed": seed}
    try:
        reset_policy(policy, task, obs, info, seed=seed)
    except Exception as exc:
        raise PolicyError(f"policy.reset raised {type(exc).__name__}: {exc}") from exc
    finally:
        recorder.policy_reset()
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
        outcome.last_report = info["test_report"]
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
            outcome.terminated, outcome.truncated, outcome.steps = terminated, truncated, info["steps"]
            return


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
    """Play one episode. An infrastructure failure becomes an ``infra_error`` record; the
    policy's own error (:class:`PolicyError`) a failed episode with its ``policy_error``.
    The trajectory is the episode's transcript (:mod:`gym_repost.evaluate.transcript`)."""
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
    out = _Outcome()
    started = time.time()
    try:
        policy = _make_policy(factory)
        recorder.attach(policy)
        _play(env, policy, task, sample, seed, recorder, out)
    except PolicyError as exc:
        recorder.interrupt()
        failed = {**base, **_timing(started), "status": "failed", "policy_error": policy_error_record(exc)}
        return _scored(failed, out, env, policy, steps=len(trajectory)), trajectory
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
    played = {**base, **_timing(started), "status": "passed" if solved_at is not None else "failed"}
    return _scored({**played, "solved_at": solved_at}, out, env, policy, steps=out.steps), trajectory


def _make_policy(factory: PolicyFactory) -> Any:
    """The episode's policy; any error but the infrastructure's is the policy's own."""
    try:
        return factory()
    except (PolicyError, InfrastructureError):
        raise
    except GymRepostError as exc:
        raise PolicyError(f"policy {factory.spec!r} could not be created: {exc}") from exc


def _scored(fields: dict[str, Any], out: _Outcome, env: Any, policy: Any, *, steps: int) -> Episode:
    """The record of a scored episode (played to its end, or ended by a policy error)."""
    return Episode(
        **fields,
        submissions=out.submissions,
        test_runs=out.test_runs,
        steps=steps,
        reward=out.reward,
        terminated=out.terminated,
        truncated=out.truncated,
        code=env.code,
        final_report=_brief(out.last_report),
        stats=_stats(policy),
    )


def policy_error_record(exc: PolicyError) -> dict[str, str]:
    """An episode's ``policy_error``: the policy's exception (what the PolicyError wraps),
    its message and its traceback as text (the last 16,000 characters of a long one)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    text = "".join(traceback.format_exception(cause))
    if len(text) > _MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-_MAX_TRACEBACK_CHARS:]
    return {"type": type(cause).__name__, "message": str(cause)[:2000], "traceback": text}


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
    With ``fail_fast``, the first episode that ended in a policy or infrastructure error is
    recorded, then recording stops and :class:`_FailFast` is raised (in the executor's
    ``on_result``, which makes it stop).
    """

    def __init__(self, run_dir: RunDir, on_episode: Callable[[Episode], None] | None, fail_fast: bool = False) -> None:
        self._run_dir = run_dir
        self._on_episode = on_episode
        self._fail_fast = fail_fast
        self._lock = threading.Lock()
        self.stopped = False

    def record(self, episode: Episode, trajectory: Trajectory) -> None:
        with self._lock:
            if self.stopped:
                return
            self._run_dir.append(episode, trajectory)
            failing = self._fail_fast and (episode.status == "infra_error" or episode.policy_error is not None)
            self.stopped = failing
        if self._on_episode is not None:
            self._on_episode(episode)
        if failing:
            raise _FailFast(episode)

    def stop(self) -> None:
        with self._lock:  # waits for an append under way: no half-written record
            self.stopped = True


class _FailFast(Exception):
    """The first episode of a ``fail_fast`` run that ended in an error: stop the run."""

    def __init__(self, episode: Episode) -> None:
        super().__init__(f"{episode.task_name} sample {episode.sample}")
        self.episode = episode


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


@dataclass(frozen=True)
class RunStart:
    """What a run found in its directory when it started: episodes finished earlier (of
    this run's tasks and samples; infrastructure errors are run again), how many of those
    passed, and how many episodes are left to run."""

    done: int
    passed: int
    todo: int


def evaluate(
    tasks: Sequence[Task],
    factory: PolicyFactory,
    config: RunConfig,
    run_dir: RunDir,
    sandbox: Sandbox | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    executor: Executor | None = None,
    *,
    overwrite: bool = False,
    fail_fast: bool = False,
    on_start: Callable[[RunStart], None] | None = None,
) -> dict[str, Any]:
    """Run every (task, sample) not yet finished in ``run_dir``; return the summary.

    Episodes run on ``executor`` (default: ``config.workers`` threads over ``sandbox``;
    the Ray executor brings its own sandboxes). This process alone writes ``run_dir``: each
    episode is recorded once, when its result comes back, whichever worker played it (an
    episode rerun after a worker died is still recorded once). The writer lock is held
    throughout. Interrupted (KeyboardInterrupt), it returns at once by raising, with every
    finished episode on disk and none of those in flight; closing ``sandbox`` then frees
    threads stuck in a sandbox call.

    Args:
        overwrite: remove the run already in ``run_dir`` (of any settings) and start afresh.
        fail_fast: stop at the first episode that ends in a policy or infrastructure
            error (it is recorded; those in flight are not); the summary then has
            ``stopped_at``: that episode's task, sample and error.
        on_start: called once the directory is prepared, with what is done and left.

    Raises:
        RunDirError: ``run_dir`` belongs to a run with other settings or another policy
            (its files' SHA-256 differ), or its records are damaged.
        RunDirBusyError: another process is writing to ``run_dir``.
    """
    config = _completed(config)
    with run_dir.writer_lock():
        run_dir.prepare(config, overwrite=overwrite)
        wanted = {(t.id, s) for t in tasks for s in range(config.n)}
        finished = [e for e in run_dir.episodes() if e.key in wanted and e.status != "infra_error"]
        done = {e.key for e in finished}
        todo = [(t, s) for t in tasks for s in range(config.n) if (t.id, s) not in done]
        logger.info("%d episodes to run (%d already finished)", len(todo), len(done))
        if on_start is not None:
            on_start(RunStart(len(done), sum(e.status == "passed" for e in finished), len(todo)))
        stopped = _run(todo, factory, config, _Recorder(run_dir, on_episode, fail_fast), sandbox, executor)
        ids = {t.id for t in tasks}
        summary = summarize([e for e in run_dir.episodes() if e.task_id in ids], config)
        if stopped is not None:
            error = stopped.infra_error or (stopped.policy_error or {}).get("message", "")
            kind = "infrastructure error" if stopped.status == "infra_error" else "policy error"
            summary["stopped_at"] = {"task": stopped.task_name, "sample": stopped.sample, "error": f"{kind}: {error}"}
        run_dir.write_summary(summary)
        return summary


def _completed(config: RunConfig) -> RunConfig:
    """``config`` with the software versions and the policy's fingerprint filled in."""
    update: dict[str, Any] = {}
    if not config.versions:
        update["versions"] = software_versions()
    if config.policy_fingerprint is None:
        update["policy_fingerprint"] = policy_fingerprint(config.policy, config.policy_options)
    return config.model_copy(update=update) if update else config


def _run(
    todo: list[tuple[Task, int]],
    factory: PolicyFactory,
    config: RunConfig,
    recorder: _Recorder,
    sandbox: Sandbox | None,
    executor: Executor | None,
) -> Episode | None:
    """Play ``todo``, recording each episode; the episode that stopped a fail-fast run."""
    try:
        with_sandbox(executor, sandbox, config.workers).map(
            EpisodeWork(factory, config), todo, lambda result: recorder.record(*result)
        )
    except _FailFast as stop:
        return stop.episode
    except BaseException:
        recorder.stop()
        raise
    return None
