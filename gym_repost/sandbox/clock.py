"""A wall clock ahead for the local sandbox's runs (see :meth:`LocalSandbox.clock_ahead`).

``clock_ahead.c`` is a small library that the local sandbox's workers preload
(``LD_PRELOAD``). It reads the wall clock as it is, unless its offset is set: a run that asks
for its clock ahead (the request's ``clock_ahead_ns``) sets it in its own process before
the program starts, and the programs it starts preload the library with the offset in
``GYM_REPOST_CLOCK_AHEAD_NS``. Then ``time.time()``, ``datetime.now()`` and ``date`` move;
the monotonic clocks, sleeps, timeouts and file times do not. Other runs' programs do not
preload it (their environment does not name it).

It is compiled on first use with the machine's C compiler (``cc``, or ``$CC``) into the
package cache, which runs can read. The workers preload it on the host, before they isolate
themselves, so a library found there is used only if its SHA-256 is the one recorded when it
was built, in gym-repost's cache directory (which runs cannot see); and the sandbox's
``install`` never writes :data:`DIRECTORY` into the package cache. Without a compiler there
is no clock ahead (:func:`clock_library` returns None), and the harness makes references as
it did before.

(libfaketime, which Debian packages, was tried first: its version 0.9.10 breaks Python's
``time.sleep`` when only the wall clock is shifted, and hangs it when the monotonic clock
is shifted too.)
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources

from gym_repost.sandbox import environments

logger = logging.getLogger(__name__)

SOURCE = "clock_ahead.c"
ENV_NAME = "GYM_REPOST_CLOCK_AHEAD_NS"
DIRECTORY = ".gym-repost-clock"
"""The library's directory in the package cache (not a name Python can import)."""


SYMBOL = "gym_repost_clock_ahead_ns"
"""The library's offset, set by a warm run child that asks for its clock ahead."""
REQUEST_KEY = "clock_ahead_ns"
"""The field of a worker request asking for the run's clock that many nanoseconds ahead."""


def clock_env(library: str, seconds: float) -> dict[str, str]:
    """The environment that puts the programs a run starts on a wall clock ``seconds`` ahead."""
    return {"LD_PRELOAD": library, ENV_NAME: str(round(seconds * 1e9))}


def clock_request(seconds: float) -> dict[str, int]:
    """The request fields that put a run's own process on a wall clock ``seconds`` ahead."""
    return {REQUEST_KEY: round(seconds * 1e9)}


@functools.lru_cache(maxsize=None)
def clock_library(directory: str) -> str | None:
    """The compiled library in ``directory`` (made on first use, kept under a name of its
    source and the machine); None when it cannot be compiled here (no C compiler: logged)."""
    source = resources.files("gym_repost.sandbox").joinpath(SOURCE).read_bytes()
    digest = hashlib.sha256(source + platform.machine().encode()).hexdigest()[:16]
    home = os.path.join(directory, DIRECTORY)
    target = os.path.join(home, f"libclockahead-{digest}.so")
    record = environments.home() / "clock" / f"{digest}.sha256"
    if os.path.isfile(target) and record.is_file() and _sha256(target) == record.read_text().strip():
        return target
    compiler = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if compiler is None:
        logger.warning("no C compiler (cc): runs cannot have their clock ahead; references compare the clock")
        return None
    try:
        os.makedirs(home, mode=0o755, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=home) as tmp:
            source_path, built = os.path.join(tmp, SOURCE), os.path.join(tmp, "lib.so")
            with open(source_path, "wb") as handle:
                handle.write(source)
            done = subprocess.run(
                [compiler, "-shared", "-fPIC", "-O2", "-o", "lib.so", SOURCE, "-ldl"],
                cwd=tmp,  # relative names: the same bytes from every build
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                logger.warning("cannot compile %s with %s: %s", SOURCE, compiler, done.stderr.strip()[-500:])
                return None
            os.chmod(built, 0o755)
            record.parent.mkdir(parents=True, exist_ok=True)
            written = record.with_name(f"{record.name}.{os.getpid()}")
            written.write_text(_sha256(built) + "\n")
            os.replace(written, record)
            os.replace(built, target)  # whole, or not there: another process may build it too
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("cannot build %s in %s: %s", SOURCE, home, exc)
        return None
    return target


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()
