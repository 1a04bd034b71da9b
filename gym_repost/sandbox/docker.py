"""The docker sandbox: a warm pool of containers of the shared image, one ``exec`` per run.

The image is built on this machine from ``envs/docker`` (see
:mod:`gym_repost.sandbox.docker_image`). :meth:`DockerSandbox.start` starts ``workers``
containers, each with:

* a lone PID 1 that only reaps orphans (so that ``kill(-1)`` from a run's user finds no
  other process to count), run as ``nobody``;
* a read-only root, tmpfs at ``/home/user/tmp`` (every run's working directory, as in
  RepoST's image) and ``/tmp``, each of ``disk_mb`` (ENOSPC past it); no network
  (``network_mode="none"``); memory (swap and tmpfs files included: the cap of all of a
  run's processes together), CPU and process-count limits of the cgroup; no
  capabilities, ``no-new-privileges``;
* a uid of its own for the runs (so rlimits on the number of processes are per container);
* the package volume (:meth:`DockerSandbox.install`) mounted read-only; nothing else of
  the host (no project, task files or host virtual environment: the image's own
  ``/opt/gym-repost/venv`` is the evaluation environment); install containers alone
  also get the host's CA bundle and ``PIP_FIND_LINKS`` directories, read-only;
* labels ``gym-repost=1``, ``gym-repost.owner=<host>:<pid>:<start time>``,
  ``gym-repost.sandbox=<token>``: :func:`cleanup_containers` removes those whose owner died.

A run is one ``docker exec`` of a small ``sh`` script as the container's run user. Text
files of the top directory travel as arguments of the exec and are written by ``printf``
(a shell builtin: no process); any other file comes as a tar in the exec's stdin, ahead of
the run's own stdin (``head -c`` hands exactly the tar to ``tar -x``). The script sets the
rlimits, runs the command under ``timeout --kill-after``, then ``kill -9 -1`` until no
process of the run's user is left, removes the System V IPC objects it made, empties
``/home/user/tmp``, ``/tmp``, ``/dev/shm`` and ``/dev/mqueue``, and writes a status line
(with a nonce) as the last bytes of stderr. Docker's seccomp profile keeps runs off the
kernel keyrings. The host keeps head and tail of both streams, kills the run when its output passes 64 times
the cap or when the timeout passed by more than a grace period (a second ``exec`` that
kills everything of the run's user), and replaces a container that could not be cleaned.
A container that dies is a :class:`SandboxError`.

Exit statuses go through ``sh``: a command killed by signal ``N`` has returncode ``-N``
(a command that exits with ``128 + N`` by itself is reported the same way).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from gym_repost.errors import SandboxError, SandboxUnavailableError
from gym_repost.sandbox.base import (
    CA_ENV,
    INSTALL_TARGET,
    MAX_TIMEOUT,
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
from gym_repost.sandbox.config import DockerSandboxConfig
from gym_repost.sandbox.docker_containers import (
    LABEL,
    OWNER_LABEL,
    UIDS,
    Container,
    ContainerGone,
    connect,
    owner_gone,
    owner_identity,
    remove_all,
    remove_containers,
    remove_labelled,
    remove_one,
)
from gym_repost.sandbox.docker_exec import WORKDIR, ExecOutcome, ExecStream, RunSpec, pack_files, returncode_of
from gym_repost.sandbox.docker_image import (
    BASE_ENV,
    build_image,
    env_name,
    image_status,
    image_tag,
    resolve_recipe,
)
from gym_repost.sandbox.pool import WarmPool
from gym_repost.sandbox.worker import DEFAULT_PATH

logger = logging.getLogger(__name__)

IMAGE_PYTHON = "/opt/gym-repost/venv/bin/python3"
PACKAGES_MOUNT = "/opt/gym-repost/packages"
SANDBOX_LABEL = "gym-repost.sandbox"
ROLE_LABEL = "gym-repost.role"
KILL_AFTER = 1.0
"""Seconds between ``timeout``'s SIGTERM and its SIGKILL."""
HOST_GRACE = 5.0
"""Seconds past timeout + KILL_AFTER after which the host kills the run itself."""
_CA_MOUNT = "/etc/gym-repost-ca.crt"

_REAPER = """\
import os, signal
wanted = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
while signal.sigwaitinfo(wanted).si_signo == signal.SIGCHLD:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
"""
"""PID 1 of every container: reaps orphans, exits on SIGTERM; no child of its own."""

_SCRATCH = (
    "/home/user/tmp/* /home/user/tmp/.[!.]* /home/user/tmp/..?* /tmp/* /tmp/.[!.]* "
    "/tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*"
)
# kill(-1) succeeds while any other process (pid > 1) is in the container: the run's,
# or one still being reaped. The second phase waits for slow exits (large memory).
_CLEAN_SH = f"""
i=0
while kill -9 -1 2>/dev/null; do
  i=$((i + 1))
  if [ "$i" -gt 200 ]; then
    [ "$i" -gt 700 ] && break
    sleep 0.01
  fi
done
clean=1
[ "$i" -gt 700 ] && clean=0
ipcrm --all 2>/dev/null
if [ "$keep" != 1 ]; then
  rm -rf {_SCRATCH} /dev/mqueue/* 2>/dev/null
  for f in {_SCRATCH}; do
    if [ -e "$f" ] || [ -h "$f" ]; then clean=0; fi
  done
fi
printf '\\000GRS %s %s %s\\n' "$nonce" "$rc" "$clean" >&2
"""
_RUN_SH = (
    """unset HOSTNAME PWD OLDPWD
nonce=$1 size=$2 limit=$3 vmem=$4 cpu=$5 fsize=$6 nproc=$7 keep=$8 nfiles=$9
shift 9
killafter=$1
shift
written=1
while [ "$nfiles" -gt 0 ]; do
  printf '%s' "$2" >"/home/user/tmp/$1" || written=0
  shift 2
  nfiles=$((nfiles - 1))
done
if [ "$size" -gt 0 ] && ! head -c "$size" | tar -x -m --no-same-owner -C / -f -; then
  written=0
fi
if [ "$written" = 1 ]; then
  ulimit -c 0; ulimit -v "$vmem"; ulimit -S -t "$cpu"; ulimit -H -t "$((cpu + 1))"
  ulimit -f "$fsize"; ulimit -p "$nproc"
  timeout -k "$killafter" "$limit" "$@"
  rc=$?
else
  echo "gym-repost sandbox: the run's files could not be written" >&2
  rc=126
fi
"""
    + _CLEAN_SH
)
_RESET_SH = "nonce=$1 rc=$2 keep=0\n" + _CLEAN_SH
_MERGE_PY = """import os, shutil, stat, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, mode=0o755, exist_ok=True)
def dist(name):
    return name.split("-", 1)[0].replace("_", "-").replace(".", "-").lower()
provided = set()
for site in sys.path:
    if site and site.endswith(("site-packages", "dist-packages")) and os.path.isdir(site):
        for name in os.listdir(site):
            provided.add(name)
            if name.endswith((".dist-info", ".egg-info")):
                provided.add("dist:" + dist(name))
if os.path.isdir(src):
    for name in sorted(os.listdir(src)):
        meta = name.endswith((".dist-info", ".egg-info")) and "dist:" + dist(name) in provided
        if name in provided or meta:
            print("not copied (the interpreter provides it):", name)
            continue
        entry, target = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        if os.path.isdir(entry) and not os.path.islink(entry):
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
for root, dirs, files in os.walk(dst):
    for name in [root] + [os.path.join(root, n) for n in dirs + files]:
        info = os.lstat(name)
        if not stat.S_ISLNK(info.st_mode):
            mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | 0o022)
            mode |= 0o644 | (0o111 if stat.S_ISDIR(info.st_mode) or info.st_mode & 0o111 else 0)
            os.chmod(name, mode)
"""
"""Copies pip's ``--target`` output into the package volume (as root), with plain
permissions, but never what the image's interpreter already shows runs: pip's ``--target``
installs a requirement again (``pytest-mock`` brings its own pytest), and the volume comes
first on ``PYTHONPATH``, so a copy there would shadow the evaluation packages in every
later run (the local backend's :func:`~gym_repost.sandbox.local._merge_tree` does the same)."""

_SET_PY = """import json, os, shutil, sys
operation, path = sys.argv[1], sys.argv[2]
if operation == "owners":
    names = sorted(os.listdir(path)) if os.path.isdir(path) else []
    owners = {}
    for name in names:
        if name.endswith(".owner"):
            with open(os.path.join(path, name), encoding="utf-8") as handle:
                owners[name[: -len(".owner")]] = handle.read().strip()
    print(json.dumps(owners))
    sys.exit(0)
shutil.rmtree(path, ignore_errors=True)
if operation == "make":
    os.makedirs(path, mode=0o755)
    os.chmod(os.path.dirname(path), 0o755)
    with open(path + ".owner", "w", encoding="utf-8") as handle:
        handle.write(sys.argv[3])
elif os.path.exists(path + ".owner"):
    os.unlink(path + ".owner")
"""
"""Makes a package set empty in the package volume (``make PATH OWNER``: ``PATH.owner``
names the process that made it), removes it (``remove PATH``), or prints the owner of each
set of the directory ``PATH`` as JSON (``owners PATH``); as root."""


# ---------------------------------------------------------------- the backend


class DockerSandbox(Sandbox):
    """Runs commands in a warm pool of containers (see the module docstring).

    Args:
        config: the backend's settings and limits; defaults to ``DockerSandboxConfig()``.
    """

    name = "docker"

    def __init__(self, config: DockerSandboxConfig | None = None) -> None:
        self.config = config or DockerSandboxConfig()
        self.token = secrets.token_hex(4)
        self._client: Any = None
        self._image: str | None = None
        self._info: dict[str, object] = {}
        self._pool: WarmPool[Container] = WarmPool()
        self._start_lock = threading.Lock()
        self._owner = os.getpid()
        self._finalizer: weakref.finalize | None = None

    @property
    def python(self) -> str:
        """The interpreter inside the container that ``python``/``python3`` runs."""
        return self.config.python or IMAGE_PYTHON

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect, make sure the image exists, start the warm containers. Idempotent.

        Raises:
            MissingExtraError: the Docker SDK is not installed.
            SandboxUnavailableError: the daemon is down, or the image is missing and
                cannot be built; the message says what to do.
        """
        if os.getpid() != self._owner:
            raise SandboxError("a DockerSandbox cannot be used after fork(); create one in each process")
        with self._start_lock:
            if self._pool.open:
                return
            client = self._client or connect(self.config.docker_host, pool_size=2 * self.config.workers + 8)
            self._client = client
            self._image = self._ensure_image(client)
            self._ensure_volume(client)
            if self._finalizer is None:
                self._finalizer = weakref.finalize(self, remove_containers, client, self._pool, self._owner)
            self._pool.new_generation()
            self._start_pool()
            self._info = {
                "docker_version": client.version().get("Version"),
                "image_id": client.images.get(self._image).short_id,
            }
            logger.debug("docker sandbox started: %s", self.describe())

    def _start_pool(self) -> None:
        count = self.config.workers
        with ThreadPoolExecutor(min(count, 8)) as pool:
            futures = [pool.submit(self._create_container, "pool") for _ in range(count)]
        failures = [f.exception() for f in futures if f.exception() is not None]
        if failures:
            remove_containers(self._client, self._pool, self._owner)
            raise SandboxUnavailableError(f"cannot start the sandbox containers: {failures[0]}")
        self._pool.fill(future.result() for future in futures)

    def close(self) -> None:
        """Remove every container of this sandbox (idle or busy). Idempotent."""
        if os.getpid() != self._owner:
            return
        with self._start_lock:
            doomed = self._pool.close()
            if self._client is not None:
                remove_all(self._client, doomed)
                remove_labelled(self._client, {SANDBOX_LABEL: self.token})

    def container_ids(self) -> list[str]:
        """Ids of this sandbox's live containers (diagnostics and tests)."""
        return sorted(c.id for c in self._pool.members())

    def describe(self) -> dict[str, object]:
        """Backend, image, pool size, limits and interpreter (JSON-able)."""
        limits = {name: getattr(self.config, name) for name in SandboxLimits.model_fields}
        return {
            "backend": self.name,
            "image": self._image or self.config.image or image_tag(self.config.env),
            "env": env_name(self.config.env),
            "workers": self.config.workers,
            "limits": limits,
            "cpus": self.config.cpus,
            "memory_limit_mb": self._memory_mb(),
            "python": self.python,
            "memory_cap": {"total_memory_mb": self._memory_mb(), "enforced_by": "the container's cgroup"},
            "packages_volume": self.config.packages_volume,
            **self._info,
        }

    def _memory_mb(self) -> int:
        return self.config.memory_limit_mb or self.config.memory_mb + 512

    def _ensure_image(self, client: Any) -> str:
        import docker.errors

        if self.config.image:
            try:
                client.images.get(self.config.image)
            except docker.errors.ImageNotFound:
                raise SandboxUnavailableError(
                    f"the sandbox image {self.config.image} does not exist; build the shared "
                    "image with `gym-repost sandbox build-image`"
                ) from None
            return self.config.image
        name = env_name(self.config.env)
        hint = "gym-repost sandbox build-image" + ("" if name == BASE_ENV else f" --env envs/{name}")
        try:
            recipe = resolve_recipe(self.config.env)
        except SandboxUnavailableError as exc:
            recipe, why = None, str(exc)
        status = image_status(client, recipe) if recipe else _exists(client, image_tag(name))
        if status == "missing":
            if recipe is None or not self.config.build_missing:
                reason = f" ({why})" if recipe is None else ""
                raise SandboxUnavailableError(
                    f"the sandbox image {image_tag(name)} is missing: build it with `{hint}`{reason}"
                )
            logger.warning("the sandbox image %s is missing: building it (minutes, once)", recipe.tag)
            build_image(client, recipe)
        elif status == "stale":
            logger.warning("%s was built from an older recipe: rebuild it with `%s`", image_tag(name), hint)
        return image_tag(name)

    def _ensure_volume(self, client: Any) -> None:
        import docker.errors

        try:
            client.volumes.get(self.config.packages_volume)
        except docker.errors.NotFound:
            client.volumes.create(self.config.packages_volume, labels={LABEL: "1"})

    # ------------------------------------------------------------ containers

    def _create_container(
        self, role: str, *, network: bool = False, install: bool = False, binds: dict[str, dict[str, str]] | None = None
    ) -> Container:
        """Create and start one container; it is tracked (and removed by close) at once."""
        import docker.errors
        from docker.types import Ulimit

        cfg, uid = self.config, UIDS.allocate()
        name = f"gym-repost-{os.getpid()}-{self.token}-{secrets.token_hex(3)}"
        scratch = 8192 if install else cfg.workdir_size_mb or cfg.disk_mb
        memory = self._memory_mb() + (8192 if install else 0)
        tmpfs = {path: f"rw,exec,nosuid,nodev,size={scratch}m,mode=1777" for path in (WORKDIR, "/tmp")}
        volumes = {cfg.packages_volume: {"bind": PACKAGES_MOUNT, "mode": "rw" if install else "ro"}, **(binds or {})}
        labels = {LABEL: "1", OWNER_LABEL: owner_identity(), SANDBOX_LABEL: self.token, ROLE_LABEL: role}
        try:
            container = self._client.containers.create(
                self._image,
                command=["/usr/bin/python3", "-I", "-S", "-c", _REAPER],
                name=name,
                labels=labels,
                user="65534:65534",
                read_only=True,
                tmpfs=tmpfs,
                volumes=volumes,
                network_mode="bridge" if network else "none",
                mem_limit=f"{memory}m",
                memswap_limit=f"{memory}m",
                nano_cpus=int(cfg.cpus * 1e9),
                pids_limit=cfg.max_processes + 16,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                working_dir=WORKDIR,
                hostname="sandbox",
                ulimits=[Ulimit(name="nofile", soft=4096, hard=4096), Ulimit(name="core", soft=0, hard=0)],
            )
        except docker.errors.DockerException as exc:
            UIDS.release(uid)
            raise SandboxError(f"cannot create a sandbox container: {exc}") from None
        entry = Container(container.id, name, uid, self._pool.generation)
        self._pool.track(entry)
        try:
            container.start()
        except docker.errors.DockerException as exc:
            self._remove(entry)
            raise SandboxError(f"cannot start a sandbox container: {exc}") from None
        return entry

    def _remove(self, container: Container) -> None:
        self._pool.untrack(container)
        remove_one(self._client, container.id)
        UIDS.release(container.uid)

    def _make_pool_container(self) -> Container:
        return self._create_container("pool")

    def _checkout(self) -> Container:
        return self._pool.checkout(self._make_pool_container)

    def _checkin(self, container: Container) -> None:
        self._pool.checkin(container, self._remove)

    def _replace(self, container: Container, fresh: bool = True) -> None:
        """Remove a broken or unclean container; a fresh one takes its place (unless not
        ``fresh``: on Ctrl-C, when everything is about to be closed)."""
        self._pool.replace(container, self._make_pool_container, self._remove, fresh=fresh)

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
        return self._run(files, command, timeout, stdin, env, network, cpu_seconds, None)

    def _run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float,
        stdin: str | None,
        env: Mapping[str, str] | None,
        network: bool,
        cpu_seconds: float | None,
        packages: str | None,
    ) -> RunResult:
        limits = limit_overrides(cpu_seconds)
        spec = self._spec(files, command, timeout, stdin, env, limits, network=network, packages=packages)
        if not self._pool.open:
            self.start()
        if network:
            return self._run_in_fresh_container(spec, role="network")
        container = self._checkout()
        try:
            outcome = self._exec_run(container, spec)
        except ContainerGone:  # died while idle: nothing of this run ran yet
            self._replace(container)
            container = self._checkout()
            outcome = self._run_or_replace(container, spec)
        except BaseException as exc:  # the container's state is unknown (failure, Ctrl-C)
            self._replace(container, fresh=isinstance(exc, Exception))
            raise
        if outcome.clean:
            self._checkin(container)
        else:
            self._replace(container)
        return outcome.result

    def _run_or_replace(self, container: Container, spec: RunSpec) -> ExecOutcome:
        try:
            return self._exec_run(container, spec)
        except BaseException as exc:
            self._replace(container, fresh=isinstance(exc, Exception))
            raise

    def install(
        self, requirements: Sequence[str], timeout: float = 900.0, constraints: Sequence[str] = ()
    ) -> RunResult:
        """``pip install`` into the package volume, with the network on for that run only.

        pip runs as the run user into the run directory of a fresh container (the volume
        is read-only to that user); on success root copies the result into the volume
        (plain permissions, no set-id bits). Later runs of every container see it.
        """
        return self._install(requirements, timeout, constraints, None)

    def _install(
        self, requirements: Sequence[str], timeout: float, constraints: Sequence[str], packages: str | None
    ) -> RunResult:
        """:meth:`install`, into the package set ``packages`` when it names one."""
        argv = pip_install_command(requirements, constraints)
        env, binds = _pip_environment()
        limits = install_limits(self.config, timeout)
        files = install_files(constraints)
        spec = replace(self._spec(files, argv, timeout, None, env, limits, packages=packages), keep=True)
        self.start()
        container = self._create_container("install", network=True, install=True, binds=binds)
        try:
            result = self._exec_run(container, spec).result
            if result.ok:
                self._merge_packages(container, _packages_path(packages))
            return result
        finally:
            self._remove(container)

    def package_set(self, name: str) -> Sandbox:
        """This sandbox with runs that see the package set ``name`` in place of the package
        volume (see :meth:`Sandbox.package_set`): ``.sets/NAME`` in the volume, made empty
        now by root in a container of its own."""
        self._in_volume("make", _packages_path(check_package_set(name)), owner_identity())
        return _PackageSet(self, name)

    def remove_package_set(self, name: str) -> None:
        """Remove the package set ``name`` from the volume, with what was installed into it."""
        self._in_volume("remove", _packages_path(check_package_set(name)))

    def remove_dead_package_sets(self) -> list[str]:
        """Remove the package sets of the volume whose maker died (a build killed before it
        removed its set: ``gym-repost sandbox cleanup``); their names. Sets of live
        processes, and of other hosts sharing the daemon, are kept."""
        owners = json.loads(self._in_volume("owners", f"{PACKAGES_MOUNT}/{PACKAGE_SETS}") or "{}")
        dead = sorted(name for name, owner in owners.items() if owner_gone(str(owner)))
        for name in dead:
            self.remove_package_set(name)
        return dead

    def _in_volume(self, operation: str, path: str, *args: str) -> str:
        self.start()
        container = self._create_container("install", install=True)
        try:
            result = self._client.containers.get(container.id).exec_run(
                [IMAGE_PYTHON, "-I", "-c", _SET_PY, operation, path, *args],
                user="0:0",
                environment={"PATH": DEFAULT_PATH},
            )
        finally:
            self._remove(container)
        output = result.output.decode("utf-8", "replace")
        if result.exit_code != 0:
            raise SandboxError(f"the package set {path} could not be {operation}d in the volume: " + output[-2000:])
        return output

    def _run_in_fresh_container(self, spec: RunSpec, role: str) -> RunResult:
        container = self._create_container(role, network=True)
        try:
            return self._exec_run(container, spec).result
        finally:
            self._remove(container)

    def _spec(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        timeout: float,
        stdin: str | None,
        env: Mapping[str, str] | None,
        limits: Mapping[str, float] | None = None,
        *,
        network: bool = False,
        packages: str | None = None,
    ) -> RunSpec:
        """Validate a run's arguments (ValueError/TypeError) and prepare its exec; ``limits``:
        the run's own in place of the sandbox's (see :func:`~gym_repost.sandbox.base.limit_overrides`)."""
        if isinstance(command, (str, bytes)) or not command:
            raise ValueError("command must be a non-empty argv list, e.g. ['python3', 'main.py']")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT}] seconds, got {timeout!r}")
        caller = {str(k): str(v) for k, v in (env or {}).items()}
        if any(not k or "=" in k or "\0" in k + v for k, v in caller.items()):
            raise ValueError("env names must be non-empty, without '=' or NUL")
        argv = [os.fspath(a) for a in command]
        if argv[0] in ("python", "python3"):
            argv[0] = self.python
        run_env = {
            "PATH": f"{os.path.dirname(self.python)}:{DEFAULT_PATH}",
            "HOME": WORKDIR,
            "LANG": "C.UTF-8",
            "TMPDIR": WORKDIR,
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            **({} if network else OFFLINE_ENV),
            **caller,
        }
        given, shown = caller.get("PYTHONPATH"), _packages_path(packages)
        run_env["PYTHONPATH"] = f"{given}:{shown}" if given else shown
        data = (stdin or "").encode("utf-8", "surrogateescape")
        inline, payload = pack_files(files)
        return RunSpec(inline, payload, data, argv, run_env, float(timeout), dict(limits or {}))

    def _limit_args(self, overrides: Mapping[str, float]) -> list[str]:
        limits = {name: getattr(self.config, name) for name in SandboxLimits.model_fields}
        limits.update(overrides)
        return [
            str(int(limits["memory_mb"]) * 1024),
            str(max(1, math.ceil(limits["cpu_seconds"]))),
            str(int(limits["max_file_size_mb"]) * 2048),
            str(int(limits["max_processes"]) + 2),
        ]

    def _exec_run(self, container: Container, spec: RunSpec) -> ExecOutcome:
        """One run: exec the script, pump its streams, kill it if needed, read its status."""
        nonce = secrets.token_hex(8)
        argv = [
            "/bin/sh",
            "-c",
            _RUN_SH,
            "gym-repost-run",
            nonce,
            str(len(spec.payload)),
            f"{spec.timeout:.3f}",
            *self._limit_args(spec.limits),
            "1" if spec.keep else "0",
            str(len(spec.inline) // 2),
            f"{KILL_AFTER:g}",
            *spec.inline,
            *spec.argv,
        ]
        started = time.monotonic()
        stream = self._open_exec(container, argv, spec.env, spec.payload + spec.stdin)
        try:
            why = stream.pump(started + spec.timeout + KILL_AFTER + HOST_GRACE)
        finally:
            # closed before any reset: dockerd may not end a second exec of the container
            # while it still copies the output of this one into a socket nobody reads
            stream.close()
        duration = time.monotonic() - started
        status = stream.status(nonce)
        # no status line: the script was killed, by the run itself or with its container
        reset_clean = self._reset(container) if why is not None or status is None else True
        if not reset_clean:
            self._check_alive(container, settle=3.0)
        return _outcome(stream, status, why, duration, spec.timeout, reset_clean)

    def _open_exec(self, container: Container, argv: list[str], env: Mapping[str, str], outgoing: bytes) -> ExecStream:
        import docker.errors

        api = self._client.api
        try:
            exec_id = api.exec_create(
                container.id,
                argv,
                stdin=True,
                workdir=WORKDIR,
                user=f"{container.uid}:{container.uid}",
                environment=[f"{k}={v}" for k, v in env.items()],
            )["Id"]
            response = api.exec_start(exec_id, socket=True)
        except docker.errors.DockerException as exc:
            try:
                self._check_alive(container)
            except SandboxError as dead:
                raise ContainerGone(str(dead)) from None
            raise SandboxError(f"cannot exec in sandbox container {container.name}: {exc}") from None
        return ExecStream(response, outgoing, self.config.max_output_bytes)

    def _reset(self, container: Container) -> bool:
        """Kill every process of the run user and empty the scratch space; True if clean."""
        nonce = secrets.token_hex(8)
        try:
            stream = self._open_exec(
                container, ["/bin/sh", "-c", _RESET_SH, "gym-repost-reset", nonce, "0"], {"PATH": DEFAULT_PATH}, b""
            )
        except SandboxError:
            return False
        try:
            finished = stream.pump(time.monotonic() + 15.0) is None
        finally:
            stream.close()
        status = stream.status(nonce)
        return finished and status is not None and status[1]

    def _check_alive(self, container: Container, settle: float = 0.0) -> None:
        """Raise SandboxError when the container is not running any more.

        ``settle``: seconds to wait for the daemon to notice a container that dies right
        now (it reports "running" for a while after PID 1 was killed), unless an exec in
        it shows that it is alive.
        """
        deadline = time.monotonic() + settle
        while True:
            state = self._container_state(container)
            if not state.get("Running"):
                raise SandboxError(
                    f"sandbox container {container.name} died ({state.get('Status')}, exit code "
                    f"{state.get('ExitCode')}, OOM killed: {state.get('OOMKilled')})"
                )
            if time.monotonic() >= deadline or self._answers(container):
                return
            time.sleep(0.1)

    def _container_state(self, container: Container) -> dict[str, Any]:
        import docker.errors

        try:
            state: dict[str, Any] = self._client.api.inspect_container(container.id)["State"]
            return state
        except docker.errors.NotFound:
            return {"Status": "removed", "Running": False}
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the Docker daemon failed: {exc}") from None

    def _answers(self, container: Container) -> bool:
        """True when a trivial exec in the container succeeds."""
        import docker.errors

        api = self._client.api
        try:
            exec_id = api.exec_create(container.id, ["true"], user=f"{container.uid}")["Id"]
            api.exec_start(exec_id)
            return api.exec_inspect(exec_id).get("ExitCode") == 0
        except docker.errors.DockerException:
            return False

    def _merge_packages(self, container: Container, destination: str = PACKAGES_MOUNT) -> None:
        result = self._client.containers.get(container.id).exec_run(
            [IMAGE_PYTHON, "-I", "-c", _MERGE_PY, f"{WORKDIR}/{INSTALL_TARGET}", destination],
            user="0:0",
            environment={"PATH": DEFAULT_PATH},
        )
        if result.exit_code != 0:
            raise SandboxError(
                "copying the installed packages into the volume failed: "
                + result.output.decode("utf-8", "replace")[-2000:]
            )


def _packages_path(packages: str | None) -> str:
    """Where the runs of package set ``packages`` find their packages (None: the volume)."""
    return PACKAGES_MOUNT if packages is None else f"{PACKAGES_MOUNT}/{PACKAGE_SETS}/{packages}"


class _PackageSet(Sandbox):
    """A :class:`DockerSandbox` whose runs see the package set ``packages`` in place of the
    package volume, and whose installs go into it (see :meth:`DockerSandbox.package_set`).
    Every run is a fresh ``exec``: the set is on its ``PYTHONPATH``, nothing else changes."""

    def __init__(self, sandbox: DockerSandbox, packages: str) -> None:
        self.sandbox = sandbox
        self.packages = packages
        self.name = sandbox.name

    def start(self) -> None:
        self.sandbox.start()

    def close(self) -> None:
        """Nothing: the sandbox's own :meth:`~DockerSandbox.close` stops its containers."""

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
        return self.sandbox._run(files, command, timeout, stdin, env, network, cpu_seconds, self.packages)

    def install(
        self, requirements: Sequence[str], timeout: float = 900.0, constraints: Sequence[str] = ()
    ) -> RunResult:
        return self.sandbox._install(requirements, timeout, constraints, self.packages)

    def describe(self) -> dict[str, object]:
        """The sandbox's description, with the package set its runs see."""
        return {**self.sandbox.describe(), "package_set": self.packages}

    def package_set(self, name: str) -> Sandbox:
        return self.sandbox.package_set(name)

    def remove_package_set(self, name: str) -> None:
        self.sandbox.remove_package_set(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sandbox, name)


def _outcome(
    stream: ExecStream,
    status: tuple[int, bool] | None,
    why: str | None,
    duration: float,
    timeout: float,
    reset_clean: bool,
) -> ExecOutcome:
    """The RunResult of one exec, and whether its container is clean for the next run."""
    truncated = stream.out.truncated or stream.err.truncated
    if why is None and status is None:  # the run killed its own supervisors
        why = "timeout" if duration >= timeout else None
    if why is not None or status is None:
        returncode, timed_out = -9, why == "timeout"
        clean = reset_clean
    else:
        code, clean = status
        timed_out = code in (124, 137) and duration >= timeout
        returncode = -9 if timed_out else returncode_of(code)
        why = "timeout" if timed_out else None
    result = RunResult(
        returncode=returncode,
        stdout=stream.out.text(),
        stderr=stream.err.text(),
        timed_out=timed_out,
        duration=duration,
        output_truncated=truncated,
        killed_for=why,
    )
    return ExecOutcome(result, clean)


def _pip_environment() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """pip's settings of this machine for an install run, and the host files they need."""
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in PROXY_ENV}
    binds: dict[str, dict[str, str]] = {}
    for key in CA_ENV:
        env.pop(key, None)
    ca = next((os.environ[k] for k in CA_ENV if os.path.isfile(os.environ.get(k, ""))), None)
    if ca:
        binds[os.path.realpath(ca)] = {"bind": _CA_MOUNT, "mode": "ro"}
        env["PIP_CERT"] = _CA_MOUNT
    for entry in env.get("PIP_FIND_LINKS", "").split():
        if os.path.isdir(entry):
            binds[os.path.realpath(entry)] = {"bind": entry, "mode": "ro"}
    return env, binds


def _exists(client: Any, tag: str) -> str:
    import docker.errors

    try:
        client.images.get(tag)
        return "current"
    except docker.errors.ImageNotFound:
        return "missing"
