"""Where units of work run: one seam for every command that loops over work.

A *unit of work* is one call ``work(item, sandbox)``: an episode, a validation, a DSTC or
AceCoder task, a test-generation task, a repository of a corpus build. ``work`` is a
picklable object (a frozen dataclass with ``__call__``: the settings, never a live
sandbox, client or lock), so the same unit runs on a thread of this process or in a Ray
actor on another machine. Whatever a unit needs that cannot travel (a sandbox, an LLM
client) it is handed or creates where it runs.

Two executors, one protocol (:class:`Executor`):

* :class:`LocalExecutor` runs ``workers`` units at once on threads of this process, over
  one thread-safe sandbox (given, or built from a sandbox config and closed with the
  executor).

A sandbox built from a config is started before the first unit that may run code; a
unit that says it runs none (a ``runs_code`` attribute that is False, as ``data
rejection`` without repairs) is handed no sandbox, and never pays for one.
* :class:`RayExecutor` runs them in ``workers`` Ray actors. The sandbox *config* travels;
  each actor starts its own sandbox before its first unit that may run code, and keeps
  it warm for its lifetime.
  An actor whose process or node dies is restarted by Ray and its unit retried
  (``max_restarts``, ``max_task_retries``): a unit may run twice, its result is returned
  once. Actors work in the driver's working directory (where their node has it), so a
  relative path in a unit means the same on Ray as on threads.

Both return results in the order of ``items``, whatever order they finish in, and call
``on_result`` in this process once per item, so what a command writes (a run directory,
a task file) is written by this process alone and does not depend on scheduling.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Literal, Protocol, TypeVar

from gym_repost.errors import ConfigError
from gym_repost.sandbox.base import Sandbox

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
T_contra = TypeVar("T_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)

ExecutorKind = Literal["local", "ray"]
RAY_INSTALL = 'pip install "gym-repost[ray]"'


class Work(Protocol[T_contra, R_co]):
    """One unit of work: picklable, called where the executor runs it. A unit may say it
    runs no code with a ``runs_code`` attribute that is False (:func:`runs_code`): it is
    then handed no sandbox."""

    def __call__(self, item: T_contra, sandbox: Sandbox | None, /) -> R_co:
        """The result of ``item``; ``sandbox`` is the executor's (None when it has none, or
        the unit runs no code)."""
        ...


class Executor(Protocol):
    """Runs units of work and returns their results in input order."""

    def map(self, work: Work[T, R], items: Sequence[T], on_result: Callable[[R], None] | None = None) -> list[R]:
        """``[work(item, sandbox) for item in items]``, run as the executor runs work;
        ``on_result`` is called in this process once per finished item (in completion order)."""
        ...

    def close(self) -> None:
        """Release the executor's workers and the sandboxes it built."""
        ...


class _Closing:
    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class LocalExecutor(_Closing):
    """``workers`` threads of this process over one shared sandbox.

    Args:
        workers: units run at once.
        sandbox: a started sandbox (left open), a sandbox config (built with ``workers``
            warm workers and started by the first :meth:`map` of units that may run code,
            closed by :meth:`close`), or None for units that run nothing.
    """

    def __init__(self, workers: int = 2, sandbox: Sandbox | Any | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self._given = sandbox if isinstance(sandbox, Sandbox) else None
        self._config = None if isinstance(sandbox, Sandbox) else sandbox
        self._built: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox units that may run code are handed: the one given, or the one built
        from the config (None until a :meth:`map` of such units started it)."""
        return self._given if self._given is not None else self._built

    def map(self, work: Work[T, R], items: Sequence[T], on_result: Callable[[R], None] | None = None) -> list[R]:
        """Threads over the items. Interrupted (KeyboardInterrupt) or failed (a unit or
        ``on_result`` raised), it raises at once, whichever item failed: units not started
        are cancelled, those in flight finish in the background.
        Units that say they run no code (:func:`runs_code`) are handed no sandbox."""
        sandbox = None
        if items and runs_code(work):
            if self._given is None and self._built is None and self._config is not None:
                self._built = started_sandbox(self._config)  # one that cannot start stops the command here
            sandbox = self.sandbox

        def one(item: T) -> R:
            result = work(item, sandbox)
            if on_result is not None:
                on_result(result)
            return result

        if self.workers == 1 or len(items) <= 1:
            return [one(item) for item in items]
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="gym-repost-work")
        try:
            futures = [pool.submit(one, item) for item in items]
            wait(futures, return_when=FIRST_EXCEPTION)  # the first failure stops the rest at once
            failed = next((f for f in futures if f.done() and f.exception() is not None), None)
            if failed is not None:
                failed.result()
            results = [f.result() for f in futures]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return results

    def close(self) -> None:
        """Close the sandbox built from a config (a given sandbox stays open)."""
        if self._built is not None:
            self._built.close()
            self._built = None


def started_sandbox(config: Any) -> Sandbox:
    """The sandbox ``config`` builds, started (closed again when it cannot start).

    Raises:
        SandboxError: it cannot start (a missing interpreter, no Docker), with why.
    """
    sandbox: Sandbox = config.build()
    try:
        sandbox.start()
    except BaseException:
        sandbox.close()
        raise
    return sandbox


def runs_code(work: Work[Any, Any]) -> bool:
    """Whether ``work`` may run code in its sandbox (True unless it says otherwise)."""
    return bool(getattr(work, "runs_code", True))


class _Actor:
    """The body of a Ray actor: a sandbox built from a config, started before its first
    unit that may run code (:func:`runs_code`) and kept warm for the actor's life.

    The actor works in the driver's working directory when its node has it (one machine,
    or a shared file system), so that a relative path a unit holds (a response cache, a
    policy file, a scripted reply file) means what it means to the driver, as it does on
    the driver's threads; a Ray worker otherwise runs where its node's Ray was started.
    It gets the driver's variables of :func:`forwarded_environment` as arguments, set in
    its own process (a dedicated one: Ray never reuses an actor's worker): a Ray
    ``runtime_env`` would do the same at the price of seconds per actor start.
    """

    def __init__(
        self, config: Any | None, driver_cwd: str | None = None, environment: Mapping[str, str] | None = None
    ) -> None:
        os.environ.update(environment or {})
        self._config = config
        self._sandbox: Sandbox | None = None
        if driver_cwd is not None and os.path.isdir(driver_cwd):
            os.chdir(driver_cwd)
        elif driver_cwd is not None:
            logger.warning("%s is not on this node: relative paths are taken from %s", driver_cwd, os.getcwd())

    def run(self, work: Work[Any, Any], index_item: tuple[int, Any]) -> tuple[int, Any]:
        index, item = index_item
        if self._config is None or not runs_code(work):
            return index, work(item, None)
        if self._sandbox is None:
            self._sandbox = started_sandbox(self._config)
        return index, work(item, self._sandbox)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--executor ray needs Ray: {RAY_INSTALL}") from exc
    return ray


class RayExecutor(_Closing):
    """``workers`` Ray actors, each with its own warm sandbox.

    Args:
        workers: actors (units run at once across the cluster).
        sandbox: the sandbox config each actor builds its sandbox from (with one warm
            worker: an actor runs one unit at a time), started before its first unit that
            may run code (:func:`runs_code`); None for units that run nothing.
        address: None starts a new local Ray instance (shut down by :meth:`close`; never
            one found running); ``auto`` or ``HOST:PORT`` (``ray://...``) joins a running
            cluster (left by :meth:`close`). When this process is already connected to Ray,
            that connection is used (and kept).
        retries: restarts of a dead actor, and reruns of the unit it held.
        cpus: CPUs Ray reserves per actor.
        init_options: more keyword arguments of ``ray.init`` (a local instance only).

    Raises:
        ConfigError: Ray is not installed.
    """

    def __init__(
        self,
        workers: int = 2,
        sandbox: Any | None = None,
        *,
        address: str | None = None,
        retries: int = 3,
        cpus: float = 1.0,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.ray = import_ray()
        self.workers = workers
        self.address = address
        self._config = _one_worker(sandbox)
        self._retries, self._cpus = retries, cpus
        self._init_options = dict(init_options or {})
        self._connected = False
        self._actors: list[Any] = []

    def _ensure_actors(self) -> list[Any]:
        ray = self.ray
        if not ray.is_initialized():
            if self.address is None:  # "local": a new instance, never one found in /tmp/ray
                ray.init(address="local", include_dashboard=False, log_to_driver=False, **self._init_options)
            else:
                ray.init(address=self.address, log_to_driver=False)
            self._connected = True
        if not self._actors:
            actor_class = ray.remote(_Actor).options(
                num_cpus=self._cpus,
                max_restarts=self._retries,
                max_task_retries=self._retries,
                scheduling_strategy="SPREAD",
                max_concurrency=2,  # close() is served while a unit runs (the pool sends one unit at a time)
            )
            environment = forwarded_environment()
            self._actors = [actor_class.remote(self._config, os.getcwd(), environment) for _ in range(self.workers)]
        return self._actors

    def map(self, work: Work[T, R], items: Sequence[T], on_result: Callable[[R], None] | None = None) -> list[R]:
        """Units to idle actors as they free up (Ray's ``ActorPool``); results in input order.

        Raises:
            the unit's own exception, as the unit raised it (Ray's wrapper is also an
            instance of the unit's exception class); ``RayActorError`` when an actor died
            more than ``retries`` times.
        """
        if not items:
            return []
        from ray.util import ActorPool

        actors = self._ensure_actors()
        work_ref = self.ray.put(work)
        results: list[Any] = [None] * len(items)
        pool = ActorPool(actors)
        for index, result in pool.map_unordered(lambda a, v: a.run.remote(work_ref, v), list(enumerate(items))):
            results[index] = result
            if on_result is not None:
                on_result(result)
        return results

    def close(self) -> None:
        """Close the actors' sandboxes, end the actors, and disconnect from Ray if this
        executor connected (a Ray instance it started is shut down; a cluster it joined
        keeps running). Disconnecting here, not at the interpreter's exit, spares the half
        second Ray's exit hook waits for the log lines a driver with ``log_to_driver=False``
        never receives."""
        ray = self.ray
        if self._actors:
            try:
                ray.get([a.close.remote() for a in self._actors], timeout=30)
            except Exception:
                logger.warning("closing the actors' sandboxes failed", exc_info=True)
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            self._actors = []
        if self._connected:
            ray.shutdown()
            self._connected = False


FORWARDED_ENVIRONMENT = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
"""Variables the actors get from the driver's environment (the LLM clients they create
read them), besides every ``GYM_REPOST_*`` one (the cache and reference-store folders)."""


def forwarded_environment() -> dict[str, str]:
    """The driver's variables a Ray actor is started with."""
    return {k: v for k, v in os.environ.items() if k in FORWARDED_ENVIRONMENT or k.startswith("GYM_REPOST_")}


def _one_worker(config: Any | None) -> Any | None:
    """An actor's sandbox: the config with one warm worker (an actor runs one unit at a time)."""
    if config is None or not hasattr(config, "model_copy") or "workers" not in type(config).model_fields:
        return config
    return config.model_copy(update={"workers": 1})


def get_executor(
    kind: ExecutorKind | str = "local",
    *,
    workers: int = 2,
    sandbox: Sandbox | Any | None = None,
    address: str | None = None,
) -> LocalExecutor | RayExecutor:
    """The executor named by ``--executor``.

    Args:
        sandbox: a sandbox config (``gym_repost.sandbox.sandbox_config(...)``); the local
            executor also takes a started sandbox.
        address: Ray only: None (a local instance), ``auto`` or a cluster address.

    Raises:
        ConfigError: an unknown kind, an address without Ray, a started sandbox for Ray,
            or Ray not installed.
    """
    if kind == "local":
        if address is not None:
            raise ConfigError("--ray-address applies to --executor ray")
        return LocalExecutor(workers, sandbox)
    if kind == "ray":
        if isinstance(sandbox, Sandbox):
            raise ConfigError("the Ray executor takes a sandbox config (it travels to the actors), not a sandbox")
        return RayExecutor(workers, sandbox, address=address)
    raise ConfigError(f"--executor {kind}: choose local or ray")


def need_sandbox(sandbox: Sandbox | None, what: str) -> Sandbox:
    """``sandbox``, or a :class:`ConfigError` saying that ``what`` runs code and its
    executor was given no sandbox."""
    if sandbox is None:
        raise ConfigError(f"{what} runs code in a sandbox: give the executor a sandbox (or a sandbox config)")
    return sandbox


def with_sandbox(executor: Executor | None, sandbox: Sandbox | None, workers: int = 2) -> Executor:
    """The executor a library function runs its units on: ``executor`` if it has its own
    sandboxes (or was given one), else threads over ``sandbox``."""
    if executor is None:
        return LocalExecutor(workers, sandbox)
    if isinstance(executor, LocalExecutor) and executor._given is None and executor._config is None:
        return LocalExecutor(executor.workers, sandbox)
    return executor


__all__ = [
    "RAY_INSTALL",
    "Executor",
    "ExecutorKind",
    "LocalExecutor",
    "RayExecutor",
    "Work",
    "get_executor",
    "import_ray",
    "need_sandbox",
    "runs_code",
    "started_sandbox",
    "with_sandbox",
]
