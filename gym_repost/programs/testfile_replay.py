"""The replayer of :mod:`testfile` (inside the sandbox): imports the focal module from the
run directory's snapshot under coverage.py and replays the calls the session recorded,
unpickling their arguments with a restricted unpickler. It never loads the test file.
"""

import json
import os
import pickle
import re
import sys
import types

try:
    from . import protocol
except ImportError:  # in the sandbox, beside the protocol module
    import _gym_repost_protocol as protocol  # type: ignore[no-redef,import-not-found]

MESSAGE_CHARS = 300
_GENERATOR_ITEMS = 100000


# --------------------------------------------------------------------------- replayer


class _NotReplayable(Exception):
    """The recorded call cannot be rebuilt here (an object of the test file, a lambda...)."""


_SAFE_GLOBALS = {
    "builtins": {
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "list",
        "dict",
        "set",
        "frozenset",
        "tuple",
        "bool",
        "slice",
        "range",
        "object",
        "type",
        "NoneType",
        "Ellipsis",
        "NotImplemented",
    },
    "copyreg": {"_reconstructor"},
    "collections": {"OrderedDict", "defaultdict", "deque", "Counter"},
    "datetime": {"date", "time", "datetime", "timedelta", "timezone"},
    "decimal": {"Decimal"},
    "fractions": {"Fraction"},
    "uuid": {"UUID"},
    "pathlib": {"Path", "PosixPath", "PurePath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "re": {"_compile"},
    "enum": set(),
    "types": {"SimpleNamespace"},
}


class _Unpickler(pickle.Unpickler):
    """Only plain values, a few standard value types, and what the repository defines."""

    def __init__(self, data, repository_modules):
        import io

        super().__init__(io.BytesIO(data))
        self.repository_modules = repository_modules

    def find_class(self, module, name):
        if name in _SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module in self.repository_modules:
            value = sys.modules.get(module)
            for part in name.split("."):
                value = getattr(value, part, None)
            if (
                isinstance(value, (type, types.FunctionType))
                and getattr(value, "__module__", None) in self.repository_modules
            ):
                return value
        raise _NotReplayable("%s.%s" % (module, name))

    def persistent_load(self, pid):
        raise _NotReplayable("a persistent id")


class _SnapshotFinder:
    """Imports the repository's modules from the snapshot (never from disk)."""

    def __init__(self, root, snapshot, roots, exclude):
        self.root = root
        self.sources = {}
        for relative, data in snapshot.items():
            if relative.endswith(".py") and relative not in exclude:
                self.sources[relative] = data
        self.roots = roots
        self.packages = set()
        for relative in self.sources:
            parts = relative.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                self.packages.add("/".join(parts[:i]))
        self.modules = set()

    def find_spec(self, name, path=None, target=None):
        import importlib.util

        base = name.replace(".", "/")
        for entry in self.roots:
            prefix = (entry.strip("/") + "/") if entry.strip("/.") else ""
            for relative, package in ((prefix + base + "/__init__.py", True), (prefix + base + ".py", False)):
                if relative in self.sources:
                    self.modules.add(name)
                    full = os.path.join(self.root, relative)
                    spec = importlib.util.spec_from_loader(
                        name, _SnapshotLoader(self.sources[relative], full), origin=full, is_package=package
                    )
                    spec.has_location = True
                    if package:
                        spec.submodule_search_locations = [os.path.dirname(full)]
                    return spec
            if prefix + base in self.packages:  # a namespace package of the repository
                import importlib.machinery

                self.modules.add(name)
                spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
                spec.submodule_search_locations = [os.path.join(self.root, prefix + base)]
                return spec
        return None


class _SnapshotLoader:
    def __init__(self, data, path):
        self.data, self.path = data, path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = compile(self.data, self.path, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_source(self, name):
        return self.data.decode("utf-8", "replace")


class _ReplayTimeout(BaseException):
    """Raised in a replayed call that overran its time (by the alarm)."""


def _replay_alarm(signum, frame):
    raise _ReplayTimeout()


def replayer_main(server, command, write_fd):
    """Measure the coverage of the recorded calls in a process that never ran test code.

    The focal file comes from ``command["original"]``, a file the monitor wrote for this
    replay alone (the zygote's snapshot lacks it), never from its place in the run."""
    config, root = server.config, server.root
    with open(command["original"], "rb") as fh:
        original = fh.read()
    os.chdir(root)
    focal = os.path.join(root, config["focal_file"])
    sys.path[:] = [p for p in sys.path if p and not os.path.realpath(p).startswith(root)]
    snapshot = {**server.snapshot, config["focal_file"]: original}
    finder = _SnapshotFinder(root, snapshot, config["python_path"], {config["test_path"]})
    sys.meta_path.insert(0, finder)
    sys.dont_write_bytecode = True
    import coverage

    _quiet_coverage_start(coverage)
    cov = coverage.Coverage(branch=True, data_file=None, include=[focal], config_file=False)
    counts = {"replayed": 0, "not_replayable": 0, "raised": 0}
    focal_source = original.decode("utf-8", "surrogateescape")
    codes = _code_index(focal_source, focal)
    real_exit = os._exit
    os._exit = _no_exit
    protocol.set_alarms(0, 0, _replay_alarm)
    cov.start()
    try:
        try:
            module = __import__(config["focal_module"], fromlist=["_"])
        except BaseException:
            module = None
        for nodeid, qualname, firstline, blob in command["records"]:
            cov.switch_context(nodeid)
            counts[_replay_call(module, codes, qualname, firstline, blob, finder.modules, config)] += 1
    finally:
        protocol.set_alarms(0, 0)
        cov.stop()
        os._exit = real_exit
    reply = {
        "coverage": _analysis(cov, focal, focal_source, command["passing"]),
        "contexts": _contexts(cov, focal),
        **counts,
    }
    protocol.write_all(write_fd, json.dumps(reply).encode("utf-8", "surrogatepass"))
    os._exit(0)


def _no_exit(status=0):
    raise SystemExit(status)


def _code_index(source, filename):
    """Every function code object of the focal source, by (qualified name, first line)."""
    index = {}
    try:
        stack = [compile(source, filename, "exec", dont_inherit=True)]
    except (SyntaxError, ValueError):
        return index
    while stack:
        code = stack.pop()
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                index[(getattr(const, "co_qualname", const.co_name), const.co_firstlineno)] = const
                stack.append(const)
    return index


def _replay_call(module, codes, qualname, firstline, blob, repository_modules, config):
    code = codes.get((qualname, firstline))
    if module is None or code is None:
        return "not_replayable"
    try:
        import base64

        args, kwargs, free = _Unpickler(base64.b64decode(blob), repository_modules).load()
        cells = tuple(types.CellType(free[name]) if name in free else types.CellType() for name in code.co_freevars)
        function = types.FunctionType(code, vars(module), code.co_name, None, cells or None)
    except BaseException:
        return "not_replayable"
    protocol.set_alarms(config["test_timeout"], config["wall_factor"] * config["test_timeout"])
    try:
        result = function(*args, **kwargs)
        _drain(result, code)
    except BaseException:
        return "raised"
    finally:
        protocol.set_alarms(0, 0)
    return "replayed"


GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator


def _drain(result, code):
    if not code.co_flags & GENERATOR_FLAGS:
        return
    if code.co_flags & 0x20:
        for index, _ in enumerate(result):
            if index >= _GENERATOR_ITEMS:
                break
    elif hasattr(result, "send"):
        for _ in range(_GENERATOR_ITEMS):
            result.send(None)


def _quiet_coverage_start(coverage):
    """Skip the call-stack snapshot coverage.py takes for its debug output at start.

    It reads the source of every frame on the stack (~40 ms), for a message we never show.
    """
    try:
        import coverage.collector

        coverage.collector.short_stack = lambda *args, **kwargs: ""
    except (ImportError, AttributeError):
        pass


def _analysis(cov, focal, source, passing):
    """Lines and branches of the focal file run by the passing tests or at import time.

    The focal file is analysed from its text in memory (the file on disk may have been
    changed by the test code).
    """
    try:
        from coverage.parser import PythonParser
        from coverage.python import PythonFileReporter

        data = cov.get_data()
        data.set_query_contexts(["^$"] + ["^%s$" % re.escape(nodeid) for nodeid in passing])
        reporter = PythonFileReporter(focal, cov)
        reporter._source = source
        reporter._parser = PythonParser(text=source, filename=focal, exclude=cov._exclude_regex("exclude"))
        reporter._parser.parse_source()
        if focal not in data.measured_files():
            data.touch_file(focal)
        analysis = cov._analyze(focal, file_reporter=reporter)
        executed = sorted(analysis.executed)
        missing = sorted(analysis.missing)
        return {
            "executed_lines": executed,
            "missing_lines": missing,
            "executed_branches": _pairs(analysis.executed_branch_arcs()),
            "missing_branches": _pairs(analysis.missing_branch_arcs()),
        }
    except BaseException as exc:
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:MESSAGE_CHARS])}


def _pairs(arcs):
    return sorted([a, b] for a, ends in arcs.items() for b in ends)


def _contexts(cov, focal):
    data = cov.get_data()
    data.set_query_contexts(None)
    try:
        by_line = data.contexts_by_lineno(focal)
    except BaseException:
        return {}
    return {str(line): sorted(names) for line, names in by_line.items()}
