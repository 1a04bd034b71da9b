"""The sandbox images of the docker backend, built on this machine from ``envs/docker``.

No registry is reachable, so nothing is pulled: ``envs/docker/rootfs.sh`` makes a Debian
root file system with ``debootstrap`` (cached as a tarball under
``$GYM_REPOST_HOME/docker``) and ``docker import`` turns it into the image
``gym-repost-rootfs:<hash>``; ``envs/docker/Dockerfile`` adds a virtual environment with
the packages of ``envs/docker/requirements.txt`` (what the harness and the tools need): the
base image ``gym-repost-sandbox:base``. The image of an environment definition,
``gym-repost-sandbox:NAME``, is a layer on the base image (``envs/docker/env.Dockerfile``)
that installs only ``envs/NAME/requirements.txt``; the base image is built first when it is
missing or stale.

Each image carries the label ``gym-repost.recipe``, a hash of everything it was built
from (an environment's includes the base image's); :func:`build_image` does nothing when an
image with the same hash exists. During the build pip sees this machine's package index
settings, its CA bundle (``PIP_CERT``, ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``) and its
``PIP_FIND_LINKS`` directories (served on loopback for the duration of the build; the build
runs on the host network).
"""

from __future__ import annotations

import hashlib
import http.server
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gym_repost.errors import SandboxUnavailableError
from gym_repost.sandbox.base import CA_ENV, PROXY_ENV
from gym_repost.sandbox.environments import home

logger = logging.getLogger(__name__)

IMAGE_REPOSITORY = "gym-repost-sandbox"
ROOTFS_REPOSITORY = "gym-repost-rootfs"
BASE_ENV = "base"
RECIPE_LABEL = "gym-repost.recipe"
ENV_LABEL = "gym-repost.env"
_PIP_SETTINGS = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_RETRIES",
    *PROXY_ENV,
)

Log = Callable[[str], None]


@dataclass(frozen=True)
class ImageRecipe:
    """What one image is built from.

    Attributes:
        env: ``base`` or the name of the environment definition (``envs/NAME``).
        recipe_dir: the directory holding ``rootfs.sh``, ``Dockerfile`` and ``env.Dockerfile``.
        requirements: the requirements file installed into the image.
    """

    env: str
    recipe_dir: Path
    requirements: Path

    @property
    def tag(self) -> str:
        """The image's name, e.g. ``gym-repost-sandbox:base``."""
        return image_tag(self.env)

    @property
    def rootfs_hash(self) -> str:
        """Hash of the root file system recipe (names the base image and the tarball)."""
        return _digest([self.recipe_dir / "rootfs.sh"])

    @property
    def dockerfile(self) -> Path:
        """``Dockerfile`` (the base image) or ``env.Dockerfile`` (a layer on it)."""
        return self.recipe_dir / ("Dockerfile" if self.env == BASE_ENV else "env.Dockerfile")

    @property
    def base(self) -> ImageRecipe:
        """The recipe of the base image (an environment's image is a layer on it)."""
        return ImageRecipe(BASE_ENV, self.recipe_dir, self.recipe_dir / "requirements.txt")

    @property
    def recipe_hash(self) -> str:
        """Hash of everything the image is built from (an environment's: its base's too)."""
        if self.env == BASE_ENV:
            return _digest([self.recipe_dir / "rootfs.sh", self.dockerfile, self.requirements])
        return _digest([self.dockerfile, self.requirements], prefix=self.base.recipe_hash)

    @property
    def parent_tag(self) -> str:
        """What the Dockerfile builds on: the imported root file system, or the base image."""
        return self.rootfs_tag if self.env == BASE_ENV else self.base.tag

    @property
    def rootfs_tag(self) -> str:
        return f"{ROOTFS_REPOSITORY}:{self.rootfs_hash}"


def _digest(paths: list[Path], prefix: str = "") -> str:
    digest = hashlib.sha256(prefix.encode())
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def env_name(env: str | None) -> str:
    """``envs/repost-eval``, ``repost-eval`` or a path to it -> ``repost-eval``; None -> base."""
    if env is None or env in ("", BASE_ENV):
        return BASE_ENV
    return Path(env.rstrip("/")).name


def image_tag(env: str | None) -> str:
    """The tag of the image of environment ``env`` (None: the base image)."""
    return f"{IMAGE_REPOSITORY}:{env_name(env)}"


def find_recipe_dir() -> Path | None:
    """``envs/docker`` of this checkout (or of the current directory), if present."""
    candidates = [Path(__file__).resolve().parents[2] / "envs" / "docker", Path.cwd() / "envs" / "docker"]
    return next((c for c in candidates if (c / "Dockerfile").is_file()), None)


def resolve_recipe(env: str | None = None, recipe_dir: Path | None = None) -> ImageRecipe:
    """The recipe of the image of ``env`` (None: the base image).

    Raises:
        SandboxUnavailableError: the recipe or the environment definition is not found.
    """
    recipe_dir = recipe_dir or find_recipe_dir()
    if recipe_dir is None:
        raise SandboxUnavailableError(
            "the sandbox image recipe (envs/docker) is not found: run `gym-repost sandbox "
            "build-image` from a checkout of gym-repost"
        )
    name = env_name(env)
    if name == BASE_ENV:
        return ImageRecipe(BASE_ENV, recipe_dir, recipe_dir / "requirements.txt")
    for definition in (Path(env or ""), recipe_dir.parent / name):
        if (definition / "requirements.txt").is_file():
            return ImageRecipe(name, recipe_dir, (definition / "requirements.txt").resolve())
    raise SandboxUnavailableError(
        f"environment {env!r} has no definition: expected {recipe_dir.parent / name / 'requirements.txt'}"
    )


def image_status(client: Any, recipe: ImageRecipe) -> str:
    """``current`` (built from this recipe), ``stale`` (another recipe) or ``missing``."""
    import docker.errors

    try:
        image = client.images.get(recipe.tag)
    except docker.errors.ImageNotFound:
        return "missing"
    labels = image.labels or {}
    return "current" if labels.get(RECIPE_LABEL) == recipe.recipe_hash else "stale"


def build_image(client: Any, recipe: ImageRecipe, *, force: bool = False, log: Log | None = None) -> str:
    """Build the image of ``recipe`` unless an image of the same recipe exists.

    Args:
        client: a ``docker.DockerClient``.
        recipe: see :func:`resolve_recipe`.
        force: rebuild even when the image is current (the root file system is reused, and
            for an environment's image the base image when it is current).
        log: called with each line of progress (default: the module's logger).

    Returns:
        The image's tag.

    Raises:
        SandboxUnavailableError: debootstrap, the import or the build failed (the
            message holds the tail of the build's output).
    """
    log = log or logger.info
    if not force and image_status(client, recipe) == "current":
        log(f"{recipe.tag} is up to date (recipe {recipe.recipe_hash})")
        return recipe.tag
    previous = _image_id(client, recipe.tag)
    if recipe.env == BASE_ENV:
        ensure_rootfs(client, recipe, log)
    else:
        build_image(client, recipe.base, log=log)
    with tempfile.TemporaryDirectory(prefix="gym-repost-build-") as context:
        with _find_links_served() as find_links:
            _write_context(recipe, Path(context), find_links)
            _docker_build(client, recipe, context, log, no_cache=force)
    if previous and previous != _image_id(client, recipe.tag):
        _remove_image(client, previous)
    log(f"built {recipe.tag} (recipe {recipe.recipe_hash})")
    return recipe.tag


def _image_id(client: Any, tag: str) -> str | None:
    import docker.errors

    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None


def _remove_image(client: Any, image_id: str) -> None:
    """Remove the image a rebuild replaced (kept while containers still use it)."""
    import docker.errors

    try:
        client.images.remove(image_id)
    except docker.errors.APIError as exc:
        logger.debug("keeping the previous image %s: %s", image_id[:19], exc)


def ensure_rootfs(client: Any, recipe: ImageRecipe, log: Log) -> str:
    """The base image (``docker import`` of the debootstrap tarball), made if missing."""
    import docker.errors

    try:
        client.images.get(recipe.rootfs_tag)
        return recipe.rootfs_tag
    except docker.errors.ImageNotFound:
        pass
    tarball = home() / "docker" / f"rootfs-{recipe.rootfs_hash}.tar"
    if not tarball.is_file():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        log(f"debootstrap of the root file system into {tarball} (a few minutes, once)")
        _run_rootfs_script(recipe, tarball, log)
    log(f"docker import {tarball} as {recipe.rootfs_tag}")
    repository, tag = recipe.rootfs_tag.split(":")
    client.api.import_image_from_file(
        str(tarball),
        repository=repository,
        tag=tag,
        changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    )
    return recipe.rootfs_tag


def _run_rootfs_script(recipe: ImageRecipe, tarball: Path, log: Log) -> None:
    script = recipe.recipe_dir / "rootfs.sh"
    process = subprocess.Popen(
        ["sh", str(script), str(tarball)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert process.stdout is not None
    tail: list[str] = []
    for line in process.stdout:
        tail = [*tail[-19:], line.rstrip()]
        logger.debug("rootfs: %s", line.rstrip())
        if line.startswith(("I: Retrieving", "I: Configuring", "I: Base system")):
            log(line.rstrip())
    if process.wait() != 0:
        raise SandboxUnavailableError(f"building the root file system failed ({script}):\n" + "\n".join(tail))


def _write_context(recipe: ImageRecipe, context: Path, find_links: list[str]) -> None:
    build = context / "build"
    build.mkdir()
    shutil.copyfile(recipe.dockerfile, context / "Dockerfile")
    shutil.copyfile(recipe.requirements, build / "requirements.txt")
    settings = {k: os.environ[k] for k in _PIP_SETTINGS if os.environ.get(k)}
    if find_links:
        settings["PIP_FIND_LINKS"] = " ".join(find_links)
    (build / "pip.env").write_text(
        "".join(f"export {k}={_shell_quote(v)}\n" for k, v in settings.items()), encoding="utf-8"
    )
    ca = next((os.environ[k] for k in CA_ENV if os.path.isfile(os.environ.get(k, ""))), None)
    if ca:
        shutil.copyfile(ca, build / "ca.crt")


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _docker_build(client: Any, recipe: ImageRecipe, context: str, log: Log, no_cache: bool) -> None:
    labels = {RECIPE_LABEL: recipe.recipe_hash, ENV_LABEL: recipe.env, "gym-repost": "1"}
    tail: list[str] = []
    stream = client.api.build(
        path=context,
        tag=recipe.tag,
        buildargs={"BASE_IMAGE": recipe.parent_tag},
        labels=labels,
        network_mode="host",
        rm=True,
        forcerm=True,
        decode=True,
        pull=False,
        nocache=no_cache,
    )
    for chunk in stream:
        if "error" in chunk:
            raise SandboxUnavailableError(f"building {recipe.tag} failed: {chunk['error']}\n" + "\n".join(tail))
        for line in str(chunk.get("stream", "")).splitlines():
            if line.strip():
                tail = [*tail[-29:], line]
                log(line)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("find-links server: " + format, *args)


@contextmanager
def _find_links_served() -> Iterator[list[str]]:
    """``PIP_FIND_LINKS`` for the build: local directories served on loopback, URLs kept."""
    servers, links = [], []
    for entry in os.environ.get("PIP_FIND_LINKS", "").split():
        if not os.path.isdir(entry):
            links.append(entry)
            continue
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=entry))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        links.append(f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        yield links
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
