"""The docker backend's containers: the daemon connection, the owner identity and labels,
removal of one container or all of a sandbox, and the leftovers of crashed runs
(``gym-repost sandbox cleanup``)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gym_repost.errors import MissingExtraError, SandboxError, SandboxUnavailableError
from gym_repost.sandbox.identity import UidPool, host_identity, identity_alive
from gym_repost.sandbox.pool import WarmPool

logger = logging.getLogger(__name__)
LABEL = "gym-repost"
OWNER_LABEL = "gym-repost.owner"
_UID_RANGE = (3_000_000, 3_999_999)


# ---------------------------------------------------------------- connection and identity


def owner_identity() -> str:
    """``<hostname>:<pid>:<start time>`` of this process: the owner label of its containers."""
    return f"{socket.gethostname()}:{host_identity()}"


def connect(docker_host: str | None = None, timeout: float = 120.0, pool_size: int = 10) -> Any:
    """A ``docker.DockerClient`` that answered a ping.

    Raises:
        MissingExtraError: the Docker SDK is not installed.
        SandboxUnavailableError: the daemon does not answer; the message says how to
            start it.
    """
    try:
        import docker
    except ImportError:
        raise MissingExtraError("docker", "docker", "The docker sandbox") from None
    where = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        if docker_host:
            client = docker.DockerClient(base_url=docker_host, timeout=int(timeout), max_pool_size=pool_size)
        else:
            client = docker.from_env(timeout=int(timeout), max_pool_size=pool_size)
        client.ping()
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise SandboxUnavailableError(
            f"Docker daemon not reachable at {where} ({reason}): start it with `dockerd &` "
            "or `systemctl start docker`, or use --sandbox local"
        ) from None
    return client


UIDS = UidPool(_UID_RANGE)  # run uids of this process's containers


class ContainerGone(SandboxError):
    """The container was not running when a run tried to start in it."""


@dataclass(eq=False)
class Container:
    """One container as the host sees it."""

    id: str
    name: str
    uid: int
    generation: int


# ---------------------------------------------------------------- removal and cleanup


def remove_one(client: Any, container_id: str) -> bool:
    import docker.errors

    try:
        client.api.remove_container(container_id, force=True, v=True)
        return True
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:
        if "already in progress" in str(exc):
            return True
        logger.warning("cannot remove sandbox container %s: %s", container_id[:12], exc)
        return False
    except Exception as exc:
        logger.warning("cannot remove sandbox container %s: %s", container_id[:12], exc)
        return False


def remove_containers(client: Any, pool: WarmPool[Container], owner: int) -> None:
    """Remove tracked containers (on garbage collection or interpreter exit)."""
    if os.getpid() != owner:  # a forked copy: the containers are the parent's
        return
    remove_all(client, pool.take_all())


def remove_all(client: Any, doomed: list[Container]) -> None:
    if not doomed:
        return
    try:
        with ThreadPoolExecutor(min(len(doomed), 8)) as pool:
            list(pool.map(lambda c: remove_one(client, c.id), doomed))
    except RuntimeError:  # no new threads at interpreter shutdown: one at a time
        for container in doomed:
            remove_one(client, container.id)
    for container in doomed:
        UIDS.release(container.uid)


def remove_labelled(client: Any, labels: Mapping[str, str]) -> list[str]:
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    found = client.api.containers(all=True, filters=filters)
    names = [c["Names"][0].lstrip("/") if c.get("Names") else c["Id"][:12] for c in found]
    if found:
        with ThreadPoolExecutor(min(len(found), 8)) as pool:
            list(pool.map(lambda c: remove_one(client, c["Id"]), found))
    return names


@dataclass(frozen=True)
class ContainerCleanupReport:
    """What :func:`cleanup_containers` removed, and what it left to live owners."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def owner_gone(owner: str) -> bool:
    """The process an owner label or file names (``host:pid:start``) ran on this host and is gone."""
    host, _, identity = owner.partition(":")
    return host == socket.gethostname() and not identity_alive(identity)


def cleanup_containers(*, all_owners: bool = False, docker_host: str | None = None) -> ContainerCleanupReport:
    """Remove the sandbox containers of processes that died (kill -9, a crash).

    Containers are recognised by the ``gym-repost`` label; the owner label names the
    host, pid and start time of the process that made them. Containers of live
    processes, and of other hosts sharing the daemon, are kept unless ``all_owners``.

    Raises:
        MissingExtraError: the Docker SDK is not installed.
        SandboxUnavailableError: the daemon does not answer.
    """
    client = connect(docker_host)
    removed, kept = [], []
    for found in client.api.containers(all=True, filters={"label": f"{LABEL}=1"}):
        name = found["Names"][0].lstrip("/") if found.get("Names") else found["Id"][:12]
        owner = (found.get("Labels") or {}).get(OWNER_LABEL, "")
        if all_owners or owner_gone(owner):
            if remove_one(client, found["Id"]):
                removed.append(name)
        else:
            kept.append(name)
    if removed:
        logger.info("removed %d leftover sandbox containers", len(removed))
    return ContainerCleanupReport(removed=removed, kept=kept)
