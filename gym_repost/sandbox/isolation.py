"""Linux namespaces, mounts and privilege drops for the local sandbox, through ctypes.

Standard library only (and no heavy module such as ``dataclasses`` or ``typing``): the
sandbox worker imports this file as a top-level module, without the ``gym_repost``
package, so that it starts fast and can run under another interpreter
(``LocalSandboxConfig.python``).

The sequence the worker follows (see :mod:`gym_repost.sandbox.worker`):

1. :func:`enter_namespaces` (the outer worker process): new mount, PID, IPC, UTS and
   (unless the network is allowed) network namespaces; a user namespace too when not root.
2. after ``fork()``, in PID 1 of the new PID namespace: :func:`setup_filesystem` builds a
   fresh root from an allowlist (:class:`FilesystemPlan`): the interpreter's prefix, the
   evaluation packages, the package cache, system programs and libraries, a few files of
   ``/etc``, five devices, a ``/proc`` of the new PID namespace, a tmpfs ``/tmp`` and
   ``/dev/shm``, the worker's directory; it pivots into it and makes everything but the
   worker's directory, ``/tmp`` and ``/dev/shm`` read-only. Then
   :func:`bring_up_loopback` (an isolated loopback, not the host's).
3. per run: :func:`mount_run_scratch` puts the run's directory, ``/tmp`` and ``/dev/shm``
   on one tmpfs of the run's disk quota; :func:`unmount_run_scratch` drops it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

INNER_ROOT = "/sandbox"
"""Where the worker's private host directory appears inside the mount namespace."""

ADVICE = (
    "To fix it: run as root (with CAP_SYS_ADMIN), or enable unprivileged user namespaces "
    "(sysctl -w kernel.unprivileged_userns_clone=1 on Debian kernels, "
    "user.max_user_namespaces > 0, and on Ubuntu 23.10+ "
    'kernel.apparmor_restrict_unprivileged_userns=0); or use isolation="none" for '
    "trusted code only; or use the docker backend."
)

# Per-mount options that a bind remount must keep (dropping a locked one fails with EPERM).
_KEPT_OPTIONS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
# Remount failures that mean "this mount point is hidden under one of ours": not a leak.
_HIDDEN_ERRNOS = {errno.ENOENT, errno.EINVAL, errno.EACCES, errno.ENOTDIR}


class IsolationError(OSError):
    """Namespaces cannot be set up on this machine; the message says what to do."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        lib.unshare.argtypes = [ctypes.c_int]
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _LIBC = lib
    return _LIBC


def _check(result: int, what: str) -> int:
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _encode(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (``unshare(2)``)."""
    _check(_libc().unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """Call ``mount(2)``; raises OSError naming the target."""
    result = _libc().mount(_encode(source), _encode(target), _encode(fstype), flags, _encode(data))
    _check(result, f"mount {target}")


def prctl(option: int, arg2: int = 0) -> None:
    """Call ``prctl(2)`` with one argument."""
    _check(_libc().prctl(option, arg2, 0, 0, 0), f"prctl({option})")


def set_parent_death_signal(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent thread exits."""
    prctl(PR_SET_PDEATHSIG, signum)


def set_no_new_privs() -> None:
    """Forbid gaining privileges through ``execve`` (setuid binaries, file capabilities)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def flush_c_stdio() -> None:
    """``fflush(NULL)``: what C extensions printed through stdio, before ``os._exit``."""
    _libc().fflush(None)


def set_child_subreaper() -> None:
    """Adopt orphaned descendants, so that they can be found and killed."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def enter_namespaces(*, network: bool) -> str:
    """Unshare the namespaces of a sandbox worker; call it first, single-threaded.

    As root, plain namespaces are used; otherwise (or when root lacks CAP_SYS_ADMIN)
    a user namespace maps the current user onto itself.

    Args:
        network: keep the host's network (package installs); else a new, empty one.

    Returns:
        ``"root"`` or ``"userns"``: which way the namespaces were made.

    Raises:
        IsolationError: the kernel refused; the message says what to do.
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if not network:
        flags |= CLONE_NEWNET
    failure: OSError | None = None
    if os.geteuid() == 0:
        try:
            unshare(flags)
            return "root"
        except OSError as exc:
            failure = exc
    try:
        _unshare_user(flags)
        return "userns"
    except OSError as exc:
        first = f"unshare as root failed ({failure.strerror}); " if failure else ""
        raise IsolationError(
            exc.errno or errno.EPERM,
            f"cannot create Linux namespaces for the sandbox: {first}unshare with a user "
            f"namespace as uid {os.getuid()} failed ({exc.strerror}). {ADVICE}",
        ) from None


def _unshare_user(flags: int) -> None:
    uid, gid = os.getuid(), os.getgid()
    unshare(flags | CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1\n"), ("gid_map", f"{gid} {gid} 1\n")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)


def drop_capabilities() -> None:
    """Drop every capability (bounding, ambient, effective, permitted, inheritable).

    Used in user-namespace mode, where the run keeps the worker's uid and would
    otherwise hold full capabilities inside the namespace (enough to undo read-only
    mounts).
    """
    lib = _libc()
    for cap in range(64):
        if lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(lib.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


class MountEntry:
    """One line of ``/proc/self/mountinfo``: where, the per-mount options, the type."""

    __slots__ = ("fstype", "mount_point", "options")

    def __init__(self, mount_point: str, options: frozenset[str], fstype: str = "") -> None:
        self.mount_point = mount_point
        self.options = options
        self.fstype = fstype

    @property
    def read_only(self) -> bool:
        return "ro" in self.options

    @property
    def kept_flags(self) -> int:
        """MS_* flags a bind remount must repeat to keep this mount's options."""
        flags = 0
        for option in self.options:
            flags |= _KEPT_OPTIONS.get(option, 0)
        return flags


def _unescape(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as three-digit octal escapes.
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit():
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse ``/proc/self/mountinfo`` (mount point and per-mount options of each line)."""
    entries = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) >= 6:
            tail = line.split(" - ", 1)[1].split(" ") if " - " in line else [""]
            entries.append(MountEntry(_unescape(fields[4]), frozenset(fields[5].split(",")), tail[0]))
    return entries


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys/devices/system/cpu")
"""Host paths every sandbox shows read-only: programs, shared libraries, CPU topology."""
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "fonts",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
"""What of ``/etc`` a Python process needs (users, resolver, time zone, TLS, locale,
the dynamic linker); the ``python3*`` entries of Debian's interpreters are added."""
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
SCRATCH = "/.scratch"
"""Empty mount point where PID 1 mounts each run's tmpfs before binding its parts."""
_STAGE = "/tmp"  # where the new root is assembled (a tmpfs hiding the host's /tmp)


class FilesystemPlan:
    """What the file system of a worker contains: an allowlist, nothing else.

    A fresh tmpfs becomes the root (``pivot_root``); the paths below are bound into it,
    read-only except the worker's directory, ``/tmp`` and ``/dev/shm``. Whatever is not
    listed (the project, task files, datasets, home directories, other interpreters'
    packages, the host's ``/proc``) does not exist inside.

    Attributes:
        host_dir: the worker's private directory on the host, bound writable at
            ``inner_root``; run directories are created inside it.
        read_only: host paths shown read-only at the same place: the interpreter's
            prefixes, the package cache; :data:`SYSTEM_PATHS`, :data:`ETC_ENTRIES` and
            :data:`DEVICES` are always added.
        views: directories (inside a ``read_only`` path) shown with only the named
            entries: site-packages directories restricted to the evaluation packages,
            or emptied.
        inner_root: where ``host_dir`` appears inside.
        tmpfs_size_mb: size of the ``/tmp`` and ``/dev/shm`` shared by the worker's runs
            when a run has no scratch space of its own (package installs).
        aliases: empty mount points created where PID 1 binds each run's directory; see
            :func:`bind_alias`.
    """

    def __init__(
        self,
        host_dir: str,
        read_only: list[str] | None = None,
        views: dict[str, list[str]] | None = None,
        inner_root: str = INNER_ROOT,
        tmpfs_size_mb: int = 256,
        aliases: list[str] | None = None,
    ) -> None:
        self.host_dir = host_dir
        self.read_only = list(read_only or [])
        self.views = dict(views or {})
        self.aliases = list(aliases or [])
        self.inner_root = inner_root
        self.tmpfs_size_mb = tmpfs_size_mb
        self.scratch_shown: list[str] = []
        """Shown paths below ``/tmp`` or ``/dev/shm`` (set up by :func:`setup_filesystem`),
        which each run's scratch space must show again: :func:`mount_run_scratch`."""

    def shown_paths(self) -> list[str]:
        """Every host path bound read-only (outermost only, existing, without duplicates)."""
        etc = [f"/etc/{name}" for name in ETC_ENTRIES]
        etc += [f"/etc/{n}" for n in _listdir("/etc") if n.startswith("python3")]
        wanted = [*SYSTEM_PATHS, *etc, *(f"/dev/{d}" for d in DEVICES), *self.read_only]
        paths = sorted({os.path.abspath(p) for p in wanted if os.path.lexists(p)})
        return [p for p in paths if not any(p.startswith(q + "/") and not os.path.islink(q) for q in paths)]

    def shown_views(self, shown: list[str]) -> dict[str, list[str]]:
        """The views that restrict a directory inside a bound path."""
        return {
            d: sorted(set(names))
            for d, names in sorted(self.views.items())
            if os.path.isdir(d) and any(d.startswith(p + "/") for p in shown)
        }


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def setup_filesystem(plan: FilesystemPlan) -> list[str]:
    """Build the worker's root file system and move into it (from PID 1 of the namespace).

    Returns:
        Warnings about mount points that could not be made read-only.

    Raises:
        IsolationError: the root file system could not be made read-only.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    shown = plan.shown_paths()
    views = plan.shown_views(shown)
    # Sources are opened before the staging tmpfs hides /tmp; bound via /proc/self/fd.
    sources = [plan.host_dir, *shown] + [f"{d}/{n}" for d, names in views.items() for n in names]
    fds = {p: _open_source(p) for p in sources if os.path.lexists(p)}
    try:
        _cover_with_tmpfs(_STAGE, 0o755, 8)
        for directory in ("/tmp", "/dev/shm"):  # first: shown paths may lie below them
            _cover_with_tmpfs(_STAGE + directory, 0o1777, plan.tmpfs_size_mb)
        for path in shown:
            _place(fds, path, _STAGE + path)
        for directory, names in views.items():
            _cover_with_tmpfs(_STAGE + directory, 0o755, 1)
            for name in names:
                if f"{directory}/{name}" in fds:
                    _place(fds, f"{directory}/{name}", f"{_STAGE}{directory}/{name}")
        _populate(plan, fds)
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    mount("proc", _STAGE + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
    pivot_root(_STAGE)
    plan.scratch_shown = [p for p in shown if _under_scratch(p)]
    return remount_read_only({"/tmp", plan.inner_root, "/dev/shm"})


def _populate(plan: FilesystemPlan, fds: dict[str, int | None]) -> None:
    """The writable and synthetic parts: worker directory, /tmp, /dev, /proc, aliases."""
    for directory in ("/proc", "/dev/shm", "/tmp", SCRATCH):
        os.makedirs(_STAGE + directory, mode=0o755, exist_ok=True)
    os.chmod(_STAGE + SCRATCH, 0o700)
    for name, target in DEV_LINKS.items():
        if not os.path.lexists(f"{_STAGE}/dev/{name}"):
            os.symlink(target, f"{_STAGE}/dev/{name}")
    for alias in plan.aliases:
        os.makedirs(_STAGE + alias, mode=0o755, exist_ok=True)
    _place(fds, plan.host_dir, _STAGE + plan.inner_root)


def _under_scratch(path: str) -> bool:
    return path.startswith(("/tmp/", "/dev/shm/"))


def _open_source(path: str) -> int | None:
    if os.path.islink(path):
        return None  # recreated as a symlink: its target resolves inside the new root
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def _place(fds: dict[str, int | None], source: str, target: str) -> None:
    """Make ``source`` (a host path) appear at ``target``: a bind, or the same symlink."""
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    fd = fds.get(source)
    if fd is None:
        if os.path.islink(source) and not os.path.lexists(target):
            os.symlink(os.readlink(source), target)
        return
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(target, mode=0o755, exist_ok=True)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


_PIVOT_ROOT = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "loongarch64": 41,
    "ppc64le": 203,
    "ppc64": 203,
    "s390x": 217,
    "i686": 217,
    "armv7l": 218,
    "armv8l": 218,
}


def pivot_root(new_root: str) -> None:
    """Make ``new_root`` (a mount point) the root; the old root is detached and gone.

    ``pivot_root(".", ".")`` stacks the old root on the new one, so that it can be
    unmounted without a directory to put it in. Where the system call number is not
    known, ``chroot`` (the run has no capability that could escape it).
    """
    os.chdir(new_root)
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        os.chroot(".")
    else:
        _check(_libc().syscall(number, b".", b"."), "pivot_root")
        _check(_libc().umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")


def _cover_with_tmpfs(directory: str, mode: int, size_mb: int) -> None:
    os.makedirs(directory, mode=0o755, exist_ok=True)
    mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o},size={size_mb}m,nr_inodes=65536")


def mount_run_scratch(run_dir: str, size_mb: int, uid: int | None, shown: list[str] | None = None) -> None:
    """Give a run one tmpfs of ``size_mb`` for its directory, ``/tmp`` and ``/dev/shm``.

    Everything the run can write is on it, so ``size_mb`` bounds the run's disk use as a
    whole (a write past it fails with ENOSPC), and the pages count against the memory
    cgroup of the run that wrote them. ``shown``: read-only paths below ``/tmp`` or
    ``/dev/shm`` (an interpreter or package cache there), bound again on top.
    """
    _cover_with_tmpfs(SCRATCH, 0o755, size_mb)
    done: list[str] = []
    try:
        for name, mode in (("work", 0o700), ("tmp", 0o1777), ("shm", 0o1777)):
            os.mkdir(f"{SCRATCH}/{name}")
            os.chmod(f"{SCRATCH}/{name}", mode)
            if uid is not None and name == "work":
                os.chown(f"{SCRATCH}/work", uid, uid)
        for path in shown or []:
            _place_again(path, _scratch_target(path))
        for name, target in (("work", run_dir), ("tmp", "/tmp"), ("shm", "/dev/shm")):
            mount(f"{SCRATCH}/{name}", target, None, MS_BIND | MS_REC)
            done.append(target)
    except OSError:
        for target in reversed(done):
            _libc().umount2(_encode(target), MNT_DETACH)
        raise
    finally:
        _libc().umount2(_encode(SCRATCH), MNT_DETACH)


def _scratch_target(path: str) -> str:
    if path.startswith("/tmp/"):
        return f"{SCRATCH}/tmp/{path[len('/tmp/') :]}"
    return f"{SCRATCH}/shm/{path[len('/dev/shm/') :]}"


def _place_again(path: str, target: str) -> None:
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.symlink(os.readlink(path), target)
        return
    fds = {path: _open_source(path)}
    try:
        _place(fds, path, target)
    finally:
        os.close(fds[path])  # type: ignore[arg-type]


def detach(path: str) -> None:
    """Lazily unmount ``path`` and everything mounted below it."""
    _check(_libc().umount2(_encode(path), MNT_DETACH), f"umount {path}")


def unmount_run_scratch(run_dir: str) -> None:
    """Undo :func:`mount_run_scratch` (lazily: the tmpfs goes when its last user does)."""
    for target in (run_dir, "/tmp", "/dev/shm"):
        _libc().umount2(_encode(target), MNT_DETACH)


def remount_read_only(writable: set[str]) -> list[str]:
    """Remount every mount point read-only except those in ``writable``.

    Returns:
        Warnings for mount points that stayed writable for an unexpected reason.

    Raises:
        IsolationError: ``/`` itself could not be made read-only.
    """
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        entries = parse_mountinfo(handle.read())
    warnings = []
    for entry in entries:
        # autofs: touching it would ask the host's automounter; nobody can write there.
        if entry.mount_point in writable or entry.read_only or entry.fstype == "autofs":
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | entry.kept_flags
        try:
            mount(None, entry.mount_point, None, flags)
        except OSError as exc:
            if entry.mount_point == "/":
                raise IsolationError(
                    exc.errno or errno.EPERM, f"cannot make / read-only in the sandbox: {exc}"
                ) from None
            if exc.errno not in _HIDDEN_ERRNOS:
                warnings.append(f"{entry.mount_point} stays writable: {exc.strerror}")
    return warnings


def bind_alias(run_dir: str, alias: str) -> None:
    """Make ``run_dir`` appear at ``alias`` too (an empty mount point made at set-up)."""
    mount(run_dir, alias, None, MS_BIND)


def unbind_alias(alias: str) -> None:
    """Undo :func:`bind_alias` (lazily: a process still inside lets go when it dies)."""
    _check(_libc().umount2(_encode(alias), MNT_DETACH), f"umount {alias}")


def bring_up_loopback() -> None:
    """Set ``lo`` up in the new network namespace (isolated from the host's loopback)."""
    lib = _libc()
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    fd = _check(lib.socket(2, 2, 0), "socket")  # AF_INET, SOCK_DGRAM
    try:
        request = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: name, then flags
        _check(lib.ioctl(fd, siocgifflags, request), "SIOCGIFFLAGS")
        flags = int.from_bytes(request.raw[16:18], "little") | iff_up
        ctypes.memmove(ctypes.addressof(request) + 16, flags.to_bytes(2, "little"), 2)
        _check(lib.ioctl(fd, siocsifflags, request), "SIOCSIFFLAGS")
    finally:
        os.close(fd)


# ---------------------------------------------------------------- kernel keyrings

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_KEYRING_CALLS = {
    0xC000003E: (248, 249, 250),  # AUDIT_ARCH_X86_64: add_key, request_key, keyctl
    0x40000003: (286, 287, 288),  # AUDIT_ARCH_I386 (int 0x80 from a 64-bit process too)
    0xC00000B7: (217, 218, 219),  # AUDIT_ARCH_AARCH64
    0x40000028: (309, 310, 311),  # AUDIT_ARCH_ARM
}
_X32_BIT = 0x40000000
"""x86-64's x32 system calls carry this bit: a run has no use for them."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_KEYRING_FILTER: _SockFprog | None = None


def keyring_filter() -> _SockFprog:
    """A seccomp filter that fails ``add_key``, ``request_key`` and ``keyctl`` with EPERM
    (as Docker's default profile does). Kernel keyrings outlive processes (a user's
    keyring lives as long as the kernel), so a run could leave data there for the next
    run of the same user. Built once, in PID 1; a run child installs it
    (:func:`forbid_keyrings`)."""
    global _KEYRING_FILTER
    if _KEYRING_FILTER is not None:
        return _KEYRING_FILTER
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    code: list[tuple[int, int, int, int]] = [(load, 0, 0, 4)]  # the architecture
    blocks = []
    for arch, calls in _KEYRING_CALLS.items():
        checks = [(jeq, -1, 0, nr) for nr in calls]  # -1: to the deny instruction
        if arch == 0xC000003E:
            checks.append((jge, -1, 0, _X32_BIT))
        blocks.append([(jeq, 0, len(checks) + 2, arch), (load, 0, 0, 0), *checks, (ret, 0, 0, allow)])
    for block in blocks:
        code += block
    code.append((ret, 0, 0, allow))  # another architecture
    code.append((ret, 0, 0, deny))
    deny_at = len(code) - 1
    program = (_SockFilter * len(code))()
    for index, (op, jt, jf, k) in enumerate(code):
        jt = deny_at - index - 1 if jt == -1 else jt
        program[index] = _SockFilter(op, jt, jf, k)
    _KEYRING_FILTER = _SockFprog(len(code), program)
    return _KEYRING_FILTER


def forbid_keyrings() -> None:
    """Install :func:`keyring_filter` in this process (after ``set_no_new_privs``)."""
    _check(_libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(keyring_filter()), 0, 0), "seccomp")
