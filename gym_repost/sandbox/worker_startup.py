"""The worker's start-up: the file system it shows (allowlist, site-packages views,
distributions) and the modules it preloads, fit to fork from.

A sibling of :mod:`worker`: imported as ``worker_startup`` inside the worker and as
``gym_repost.sandbox.worker_startup`` on the host.
"""

from __future__ import annotations

import errno
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations are strings here
    from typing import Any, TypeVar

    Message = dict[str, Any]
    _T = TypeVar("_T")

if __package__:
    from gym_repost.sandbox import isolation
    from gym_repost.sandbox.worker_io import _ignore_errors, read_message, write_message
else:  # inside the worker its siblings are top-level modules (no gym_repost)
    import isolation  # type: ignore[no-redef,import-not-found]
    from worker_io import _ignore_errors, read_message, write_message  # type: ignore[no-redef,import-not-found]


# ---------------------------------------------------------------- start-up


def filesystem_plan(config: Message) -> isolation.FilesystemPlan:
    """What runs can read: the interpreter, its evaluation packages and the package cache.

    Called before ``site`` has run (the worker starts with ``-S``), so that nothing of
    the host's site-packages is imported into the worker that warm runs fork from.
    """
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    venv = venv_prefix()
    shown = [os.path.dirname(os.path.realpath(sys.executable)), *prefixes, *([venv] if venv else [])]
    shown += [p for p in sys.path[1:] if p and os.path.exists(p)]  # [0]: the worker's own dir
    if config.get("packages_dir"):
        shown.append(config["packages_dir"])
    size = max(64, 4 * int(config["limits"]["max_file_size_mb"]))
    views = config.get("views")  # found by the sandbox's first worker (~0.05 s of metadata)
    return isolation.FilesystemPlan(
        host_dir=config["host_dir"],
        read_only=[os.path.realpath(p) for p in shown],
        views=views_in_child(visible_distributions(config)) if views is None else views,
        tmpfs_size_mb=size,
        aliases=config.get("aliases") or [],
    )


def views_in_child(allowed: list[str] | None) -> dict[str, list[str]]:
    """:func:`site_views`, found in a child process that exits afterwards: the metadata
    machinery (``importlib.metadata``, ``email``, ``zipfile``, ``csv``...) stays out of
    PID 1, so every worker's runs start from the same, smaller, set of modules."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            write_message(write_fd, site_views(allowed))
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        views = read_message(read_fd)
    finally:
        os.close(read_fd)
        status = os.waitpid(pid, 0)[1]
    if views is None or status != 0:
        raise OSError(errno.EIO, "cannot list the distributions of the site-packages")
    return views


def visible_distributions(config: Message) -> list[str] | None:
    """The distributions runs see (None: all): as configured, except that an interpreter
    given explicitly that turns out to be the host's own (``python3`` through a shim, say)
    is no dedicated environment and shows only the host's evaluation packages."""
    allowed = config.get("site_packages")
    host_prefix = config.get("host_prefix")
    if (
        allowed is None
        and host_prefix
        and os.path.realpath(venv_prefix() or sys.prefix) == os.path.realpath(host_prefix)
    ):
        return list(config.get("host_packages") or [])
    return allowed


def site_views(allowed: list[str] | None) -> dict[str, list[str]]:
    """Each site-packages directory a run could reach, mapped to the entries it may see.

    ``allowed`` None: the interpreter is a dedicated evaluation environment, its own
    site-packages stay whole. Otherwise only the distributions named (and what they
    require) are shown. Any other site-packages (the base interpreter's under a virtual
    environment, the system's) is emptied.
    """
    import site

    venv = venv_prefix()
    own = [os.path.realpath(p) for p in site.getsitepackages([venv] if venv else None)]
    if allowed is None and venv and _includes_system_site(venv):
        own += [os.path.realpath(p) for p in site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])]
    others = site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])
    for base in ("/usr/lib", "/usr/local/lib"):
        for name in _listdir(base):
            if name.startswith("python"):
                others += [f"{base}/{name}/site-packages", f"{base}/{name}/dist-packages"]
    views: dict[str, list[str]] = {os.path.realpath(p): [] for p in others}
    for directory in own:
        if allowed is None:
            views.pop(directory, None)
        else:
            views[directory] = distribution_entries(directory, allowed)
    return {d: names for d, names in views.items() if os.path.isdir(d)}


def _listdir(path: str) -> list[str]:
    return _ignore_errors(os.listdir, path) or []


def venv_prefix() -> str | None:
    """The virtual environment of this interpreter, found as ``site`` would (the worker
    starts with ``-S``, so ``sys.prefix`` is still the base interpreter's)."""
    if sys.prefix != sys.base_prefix:
        return sys.prefix
    bin_dir = os.path.dirname(os.path.abspath(sys.executable))
    for directory in (bin_dir, os.path.dirname(bin_dir)):
        if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):
            return os.path.dirname(bin_dir)
    return None


def _includes_system_site(venv: str) -> bool:
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            lines = [line.partition("=") for line in handle]
    except OSError:
        return False
    return any(k.strip() == "include-system-site-packages" and v.strip().lower() == "true" for k, _, v in lines)


def distribution_entries(directory: str, names: list[str]) -> list[str]:
    """Top-level entries of ``directory`` that belong to distributions ``names`` and to
    what they require (extras aside), found in their installed metadata."""
    found = _distributions(directory)
    entries: set[str] = set()
    todo, seen = [_normalise(n) for n in names], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for dist in found.get(name, []):
            entries.update(_top_level(dist))
            for requirement in dist.requires or []:
                if "extra" not in requirement.partition(";")[2]:
                    todo.append(_normalise(_requirement_name(requirement)))
    return sorted(e for e in entries if os.path.lexists(os.path.join(directory, e)))


def _distributions(directory: str) -> dict[str, list[Any]]:
    """The distributions installed in ``directory`` by normalised name (a name installed
    twice, an ``.egg-info`` beside a ``.dist-info``, has both). The name is read from the
    ``.dist-info``/``.egg-info`` directory's own name (``NAME-VERSION...``, the name's
    dashes written as underscores), so that only the metadata of the distributions asked
    for is parsed: parsing a site-packages of ~200 of them whole took 0.06 to 0.15 s, at
    every sandbox's start. An entry whose name does not split is read whole."""
    import pathlib
    from importlib import metadata

    found: dict[str, list[Any]] = {}
    for entry in sorted(_listdir(directory)):
        stem, dot, suffix = entry.rpartition(".")
        if not dot or suffix not in ("dist-info", "egg-info"):
            continue
        dist = metadata.PathDistribution(pathlib.Path(directory, entry))
        name = stem.partition("-")[0] if "-" in stem else (dist.metadata["Name"] or "")
        found.setdefault(_normalise(name), []).append(dist)
    return found


def _normalise(name: str) -> str:
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-"))


def _requirement_name(requirement: str) -> str:
    end = 0
    while end < len(requirement) and (requirement[end].isalnum() or requirement[end] in "-_."):
        end += 1
    return requirement[:end]


def _top_level(dist: Any) -> set[str]:
    entries = set()
    path = getattr(dist, "_path", None)
    if path is not None:
        entries.add(os.path.basename(str(path)))  # the .dist-info directory
    for file in dist.files or []:
        first = str(file).split("/")[0]
        if first and first != ".." and first != "__pycache__":
            entries.add(first)
    return entries


def _take_protocol_fds() -> tuple[int, int]:
    """Move the pipes off stdin/stdout so that nothing printed can corrupt the protocol."""
    req_fd, resp_fd = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    return req_fd, resp_fd


# ---------------------------------------------------------------- preloading

PRELOAD_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
"""Set to 1 while preloading (unless set already): BLAS and OpenMP libraries then start
no thread pool that forked run children would inherit without its threads."""
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})
"""Native threads that may run in the worker: jemalloc's background thread (pyarrow,
imported by pandas) quiesces itself around fork() and is restarted in the child."""
EXIT_TEARDOWN = frozenset({("torch.library", "_del_library")})
"""``weakref.finalize`` callbacks (module, name) that only undo in-memory state when the
interpreter exits (torch deregisters thousands of operators: 0.1 s). Those registered by
preloaded imports are not run at the exit of runs: nothing outside the process could tell,
and a run that never imported torch would otherwise pay for it."""
PRELOAD_DIR = "preload"
"""Directory (under the run root) that is ``HOME``, ``TMPDIR`` and the working directory
while preloading, as a run's directory is for the run."""


def _truncate(captures: tuple[int, int], ends: list[int]) -> None:
    """Drop what an import that is not kept printed."""
    for capture, end in zip(captures, ends):
        os.ftruncate(capture, end)


def _threads() -> dict[str, str]:
    """This process's threads but the main one (native ones included): tid -> name."""
    threads = {}
    for tid in _listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            try:
                with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as handle:
                    threads[tid] = handle.read().strip()
            except OSError:  # the thread ended meanwhile
                pass
    return threads


def _import_watched(name: str, captures: tuple[int, int], offsets: list[int], replay: bool) -> str | None:
    """Import ``name`` with fds 1 and 2 on ``captures`` (positioned at ``offsets``, their
    ends); what makes it unfit to fork from, if anything. Variables it adds to (or sets in)
    the environment stay set. What it prints makes it unfit, unless ``replay`` (each run
    prints it again: see :func:`preload`)."""
    threads, environ, cwd = _threads(), dict(os.environ), os.getcwd()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(captures[0], 1)
    os.dup2(captures[1], 2)
    try:
        __import__(name)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                _ignore_errors(stream.flush)
    finally:
        for fd, copy in ((1, saved[0]), (2, saved[1])):
            os.dup2(copy, fd)
            os.close(copy)
    printed = [os.lseek(capture, 0, os.SEEK_END) > offset for capture, offset in zip(captures, offsets)]
    if any(printed) and not replay:
        capture, offset = next((c, o) for c, o, p in zip(captures, offsets, printed) if p)
        text = os.pread(capture, 160, offset).decode("utf-8", "replace").strip()
        return f"printed at import (a run would print it): {text!r}"
    started = sorted(name for tid, name in _threads().items() if tid not in threads and name not in FORK_SAFE_THREADS)
    if started:
        return f"started threads {started} (a forked run would have none of them)"
    removed = sorted(k for k in environ if k not in os.environ)
    if removed:
        return f"removed environment variables {removed}"
    if os.getcwd() != cwd:
        return "changed the working directory"
    return None


def _limit_library_threads() -> None:
    """Libraries that size their pools at first use: one thread, like the BLAS above."""
    torch = sys.modules.get("torch")
    if torch is not None:
        _ignore_errors(torch.set_num_threads, 1)


def _skip_exit_teardown() -> None:
    import weakref

    for info in list(weakref.finalize._registry.values()):  # type: ignore[attr-defined]
        function = info.func
        if (getattr(function, "__module__", None), getattr(function, "__qualname__", None)) in EXIT_TEARDOWN:
            info.atexit = False


RUN_PARENTS: set[int] = set()
"""The processes that fork run children: PID 1, and the zygote (which adds itself)."""


def _reseed_in_run_child(server_pid: int) -> None:
    """numpy and torch seed their global generators from the OS at import; every run must
    too, not inherit one seed from the worker (the ``random`` module reseeds itself at
    fork). Else runs forked from one worker draw the same "random" inputs, and those of
    another worker others: a task whose tests draw unseeded inputs would look deterministic
    to its reference and fail a correct candidate run by another worker."""
    numpy_random = sys.modules.get("numpy.random")
    torch_generator = getattr(sys.modules.get("torch"), "default_generator", None)
    reseeds = [f for f in (getattr(numpy_random, "seed", None), getattr(torch_generator, "seed", None)) if f]
    if not reseeds:
        return

    RUN_PARENTS.add(server_pid)

    def reseed() -> None:
        if os.getppid() in RUN_PARENTS:  # a run child, not a process a run forked
            for function in reseeds:
                function()

    os.register_at_fork(after_in_child=reseed)


def preload(names: list[str], directory: str, *, replay: bool = False) -> tuple[Message, tuple[bytes, bytes]]:
    """Import ``names`` before runs are forked; a report of what happened, and what to print
    again in each run (see ``replay``). Never raises.

    A module is kept only if its import leaves the worker fit to fork runs from: it
    printed nothing, started no thread (but :data:`FORK_SAFE_THREADS`), removed no
    environment variable and did not change the working directory. One that did is
    reported under ``unfit`` (the host then starts workers without it); one that fails
    to import, under ``failed``. Variables the imports set (scikit-learn sets
    ``KMP_DUPLICATE_LIB_OK`` and ``KMP_INIT_AT_FORK``) are reported under
    ``environment`` and set in every run, unless the run's own environment sets them.
    ``directory`` is ``HOME``, ``TMPDIR`` and the working directory meanwhile.

    ``replay`` (a worker that preloads modules apart, for the runs of the tasks that import
    them): a module that prints at import is kept all the same, and what the kept modules
    printed (standard output, standard error) is returned, for each run this worker forks
    to print again before its code starts (``printed``: how many bytes, per module).
    """
    report: Message = {"loaded": [], "failed": {}, "unfit": {}, "seconds": {}, "environment": {}, "printed": {}}
    output = (b"", b"")
    if not names:
        return report, output
    environ, cwd = dict(os.environ), os.getcwd()
    preload_env = {"HOME": directory, "TMPDIR": directory, **{k: "1" for k in PRELOAD_THREAD_ENV if k not in environ}}
    os.makedirs(directory, 0o755, exist_ok=True)
    captures = (os.memfd_create("gym-repost-preload-out"), os.memfd_create("gym-repost-preload-err"))
    try:
        for name in names:
            os.environ.clear()  # as it was, for each import (and its check) alike
            os.environ.update(environ, **preload_env)
            os.chdir(directory)
            started = time.monotonic()
            ends = [os.lseek(capture, 0, os.SEEK_END) for capture in captures]
            try:
                unfit = _import_watched(name, captures, ends, replay)
            except BaseException as exc:
                report["failed"][name] = f"{type(exc).__name__}: {exc}"[:300]
                _truncate(captures, ends)
                continue
            report["seconds"][name] = round(time.monotonic() - started, 3)
            if unfit:
                report["unfit"][name] = unfit
                _truncate(captures, ends)
                continue
            report["loaded"].append(name)
            printed = sum(os.lseek(capture, 0, os.SEEK_END) - end for capture, end in zip(captures, ends))
            if printed:
                report["printed"][name] = printed
            report["environment"].update(
                {k: v for k, v in os.environ.items() if k not in preload_env and environ.get(k) != v}
            )
        if replay:
            out, err = (os.pread(c, os.lseek(c, 0, os.SEEK_END), 0) for c in captures)
            output = (out, err)
    finally:
        for capture in captures:
            os.close(capture)
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
    _limit_library_threads()
    _skip_exit_teardown()
    _reseed_in_run_child(os.getpid())
    return report, output
