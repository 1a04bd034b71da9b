"""The tool set shared by the environments and the construction agent.

Each tool has a name, a description and a JSON schema for its arguments (usable as is
for LLM function calling), and a handler. A handler returns a :class:`ToolResult`; an
agent's mistake (unknown tool, bad argument, a path outside the repository) raises
:class:`~gym_repost.errors.ToolError`, which environments turn into an error
observation.

Function tasks have ``list_files``, ``read_file``, ``search``, ``write_code``,
``run_tests`` and ``submit`` (the environment owns ``submit``'s budget logic); test-file
tasks have ``write_tests`` (the whole test file) in place of ``write_code``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from gym_repost import bounded_json
from gym_repost.analysis.parsing import parse_python
from gym_repost.errors import CandidateError, ToolError, UntrustedDataError
from gym_repost.harness import prepare_candidate, run_function_tests
from gym_repost.harness.function_report import TestReport
from gym_repost.harness.testfile_report import RewardConfig, TestFileReport, score_test_file
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask, TestFileTask


def tool_call(tool: str, **args: Any) -> dict[str, Any]:
    """Build an action: ``tool_call("read_file", path="a.py")``."""
    return {"tool": tool, "args": args}


MAX_READ_LINES = 400
"""Most lines one ``read_file`` returns."""
MAX_SEARCH_MATCHES = 100
MAX_SEARCH_BYTES = 8_000_000
"""Most characters of repository text one ``search`` reads."""
MAX_SEARCH_WORK = 100_000_000
"""Most characters searched times the pattern's RE2 program size (RE2's worst-case time
is proportional to both: at most about two seconds at this bound)."""
MAX_PATTERN_CHARS = 2_000
RE2_MAX_MEM = 8 << 20
"""Memory RE2 may use for one pattern (its program and DFA cache)."""
MAX_ARG_CHARS = 200_000
"""Longest string argument accepted (an oversized write is an error observation)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as described to an agent (and to LLM function calling)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def openai_schema(self) -> dict[str, Any]:
        """The tool in OpenAI's ``tools=[...]`` format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def anthropic_schema(self) -> dict[str, Any]:
        """The tool in Anthropic's ``tools=[...]`` format."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


@dataclass
class ToolResult:
    """What a tool call produced: text for the agent, structured data for the runner."""

    output: str
    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_STR = {"type": "string"}
_INT = {"type": "integer"}

FUNCTION_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_files",
        "List the repository's files, optionally under a directory.",
        _schema({"path": {**_STR, "description": "directory (default: the root)"}}, []),
    ),
    ToolSpec(
        "read_file",
        "Read a repository file with line numbers; optionally a line range "
        f"(1-based, inclusive; at most {MAX_READ_LINES} lines at a time).",
        _schema({"path": _STR, "start": _INT, "end": _INT}, ["path"]),
    ),
    ToolSpec(
        "search",
        "Search the repository's files for a regular expression "
        "(plain text if it is not a valid one); prints path:line: text.",
        _schema({"pattern": _STR, "path": {**_STR, "description": "file or directory"}}, ["pattern"]),
    ),
    ToolSpec(
        "write_code",
        "Write your implementation: the full source of the target function, "
        "its def line included (helper functions and imports may come with it). Replaces "
        "what you wrote before.",
        _schema({"code": _STR}, ["code"]),
    ),
    ToolSpec(
        "run_tests",
        "Run the task's tests against the code you wrote and see the report (does not use up a submission).",
        _schema({}, []),
    ),
    ToolSpec(
        "submit",
        "Submit the code you wrote for the final verdict. A failing submission "
        "shows the report; you may repair and submit again while submissions remain.",
        _schema({}, []),
    ),
)

TESTFILE_TOOLS: tuple[ToolSpec, ...] = (
    *FUNCTION_TOOLS[:3],
    ToolSpec(
        "write_tests",
        "Write your test file: the whole pytest module, imports included. Replaces what you wrote before.",
        _schema({"code": _STR}, ["code"]),
    ),
    ToolSpec(
        "run_tests",
        "Run your test file and see the report: tests that errored or failed, lines and "
        "branches of the focal file no passing test runs, mutants of the focal file that no test "
        "detects, and the scores (does not use up a submission).",
        _schema({}, []),
    ),
    ToolSpec(
        "submit",
        "Submit your test file for scoring. A submission below the bar shows the report; you "
        "may improve it and submit again while submissions remain.",
        _schema({}, []),
    ),
)

_TYPES = {"string": str, "integer": int}


def parse_action(action: Any) -> tuple[str, dict[str, Any]]:
    """Read an action: ``{"tool": name, "args": {...}}`` or the same as JSON text (``str``
    or UTF-8 ``bytes``).

    ``name``/``arguments`` (OpenAI's spelling, arguments possibly a JSON string) are
    accepted too. The action is copied into plain JSON types within
    :mod:`gym_repost.bounded_json`'s limits (size, nesting depth, string keys) without
    calling methods of the caller's subclasses.

    Raises:
        ToolError: the action is not of that shape, or breaks the limits.
    """
    action = _plain_action(action)
    if type(action) is not dict:
        raise ToolError(f'an action must be an object {{"tool": NAME, "args": {{...}}}}, got {_json_type(action)}')
    name = action.get("tool", action.get("name"))
    args = action.get("args", action.get("arguments", {}))
    if type(args) is str:
        try:
            args = bounded_json.loads(args) if args.strip() else {}
        except UntrustedDataError as exc:
            raise ToolError(f"the tool arguments are {exc}") from None
    if type(name) is not str or not name:
        raise ToolError('the action has no "tool" name')
    if args is None:
        args = {}
    if type(args) is not dict:
        raise ToolError(f'"args" must be an object, got {_json_type(args)}')
    return name, args


def _plain_action(action: Any) -> Any:
    """The action as plain JSON types (text decoded and parsed)."""
    kind = type(action)
    try:
        if issubclass(kind, (bytes, bytearray)):
            try:
                action = (bytes.decode if issubclass(kind, bytes) else bytearray.decode)(action, "utf-8")
            except UnicodeDecodeError:
                raise ToolError("the action is not UTF-8 text") from None
        if issubclass(type(action), str):
            try:
                return bounded_json.loads(action)
            except UntrustedDataError as exc:
                raise ToolError(f'the action is {exc}; send {{"tool": NAME, "args": {{...}}}}') from None
        return bounded_json.plain_copy(action)
    except UntrustedDataError as exc:
        raise ToolError(f"the action is unusable: {exc}") from None


def _json_type(value: Any) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        int: "number",
        float: "number",
        bool: "boolean",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def validate_args(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """Check arguments against the tool's schema.

    Raises:
        ToolError: a required argument is missing, one is unknown or of the wrong type,
            or a string is too long or not valid UTF-8.
    """
    props: dict[str, Any] = spec.parameters["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolError(
            f"{spec.name}: unknown argument(s) {', '.join(unknown)}; accepted: {', '.join(props) or 'none'}"
        )
    for req in spec.parameters.get("required", []):
        if req not in args:
            raise ToolError(f"{spec.name}: missing required argument '{req}'")
    for key, value in args.items():
        expected = _TYPES[props[key]["type"]]
        if not isinstance(value, expected) or isinstance(value, bool):
            raise ToolError(f"{spec.name}: argument '{key}' must be a {props[key]['type']}, got {type(value).__name__}")
        if isinstance(value, str):
            _check_text(spec.name, key, value)
    return args


def _check_text(tool: str, key: str, value: str) -> None:
    if len(value) > MAX_ARG_CHARS:
        raise ToolError(f"{tool}: argument '{key}' is {len(value)} characters long; the limit is {MAX_ARG_CHARS}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"{tool}: argument '{key}' is not valid UTF-8 text (character {exc.start})") from None


def normalize_repo_path(path: str) -> str:
    """A repository-relative POSIX path; '' is the root (so are '', '.' and '/').

    Raises:
        ToolError: the path is absolute or leaves the repository.
    """
    raw = path.replace("\\", "/").strip()
    if raw in ("", ".", "/", "./"):
        return ""
    if raw.startswith("/"):
        raise ToolError(f"path {path!r} is absolute; use a path relative to the repository root")
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise ToolError(f"path {path!r} is outside the repository")
    return "" if norm == "." else norm


class RepositoryTools:
    """Read-only tools over a repository view (a path-to-text mapping)."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)

    def _under(self, directory: str) -> list[str]:
        prefix = directory + "/" if directory else ""
        return sorted(p for p in self.files if p.startswith(prefix))

    def list_files(self, path: str = "") -> ToolResult:
        """List files under ``path``."""
        base = normalize_repo_path(path)
        if base in self.files:
            return ToolResult(base)
        found = self._under(base)
        if not found:
            raise ToolError(f"no such directory in the repository: {path!r}")
        return ToolResult("\n".join(found), data={"count": len(found)})

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> ToolResult:
        """Read ``path`` (lines ``start``..``end``, 1-based inclusive) with line numbers."""
        rel = normalize_repo_path(path)
        if rel not in self.files:
            hint = " (it is a directory; use list_files)" if self._under(rel) else ""
            raise ToolError(f"no such file in the repository: {path!r}{hint}")
        lines = self.files[rel].split("\n")
        first = max(1, start or 1)
        if first > len(lines):
            raise ToolError(f"{rel} has {len(lines)} lines; start={start} is past the end")
        last = min(len(lines), end or len(lines), first + MAX_READ_LINES - 1)
        if last < first:
            raise ToolError(f"end={end} is before start={start}")
        body = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(first, last + 1))
        more = f"\n[lines {first}-{last} of {len(lines)}; read on with start={last + 1}]" if last < len(lines) else ""
        return ToolResult(f"{rel}:\n{body}{more}", data={"path": rel, "start": first, "end": last})

    def search(self, pattern: str, path: str = "") -> ToolResult:
        """Lines matching ``pattern`` in files under ``path``.

        The pattern runs on RE2 (linear time, no backtracking), over at most
        :data:`MAX_SEARCH_BYTES` of text and :data:`MAX_SEARCH_WORK` of text times pattern
        size, so no pattern blocks the host; a pattern RE2 does not support (backreferences,
        lookaround) or that does not compile is searched as plain text, and said so.
        """
        base = normalize_repo_path(path)
        targets = [base] if base in self.files else self._under(base)
        if not targets:
            raise ToolError(f"no such file or directory in the repository: {path!r}")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ToolError(f"search: the pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN_CHARS}")
        matches, note = _line_matcher(pattern)
        hits, searched, budget = [], 0, MAX_SEARCH_BYTES
        if isinstance(matches, _Regex):
            budget = min(budget, MAX_SEARCH_WORK // max(1, matches.cost))
        for p in targets:
            text = self.files[p][: budget - searched]
            searched += len(text)
            found = list(matches.lines(text))
            if found:
                lines = text.split("\n")
                hits += [f"{p}:{n}: {lines[n - 1].strip()[:200]}" for n in found]
            if len(text) < len(self.files[p]):
                note += (
                    f"\n[stopped in {p} after {searched} characters, the search budget for this pattern: "
                    "narrow the path or simplify the pattern]"
                )
                break
        if not hits:
            return ToolResult(f"no matches for {pattern!r}{note}", data={"count": 0})
        shown = hits[:MAX_SEARCH_MATCHES]
        more = f"\n[{len(hits) - len(shown)} more matches not shown]" if len(hits) > len(shown) else ""
        return ToolResult("\n".join(shown) + more + note, data={"count": len(hits)})


class _Literal:
    """Plain-text search."""

    def __init__(self, text: str) -> None:
        self.text = text

    def lines(self, text: str) -> Iterator[int]:
        """1-based numbers of the lines of ``text`` holding the text."""
        for n, line in enumerate(text.split("\n"), 1):
            if self.text in line:
                yield n


class _Regex:
    """An RE2 pattern, run over a file's whole text at once (per-line calls cost ten times
    more); ``cost`` is its program size: RE2's worst-case time is proportional to the text's
    length times that size."""

    def __init__(self, regex: Any) -> None:
        self.regex = regex
        self.cost = int(regex.programsize)

    def lines(self, text: str) -> Iterator[int]:
        """1-based numbers of the lines of ``text`` a match starts on (matches never span
        lines: the pattern is compiled with ``never_nl`` and ``^``/``$`` match at lines)."""
        data = text.encode("utf-8", "replace")
        pos = counted = 0
        line = 1
        while (match := self.regex.search(data, pos)) is not None:
            start = match.start()
            line += data.count(b"\n", counted, start)
            counted = start
            yield line
            end = data.find(b"\n", start)
            if end < 0:
                return
            pos = end + 1


def _line_matcher(pattern: str) -> tuple[_Literal | _Regex, str]:
    """The matcher for ``pattern`` and a note for the agent when it is searched as text."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    options.never_nl = True
    try:
        return _Regex(re2.compile(("(?m)" + pattern).encode("utf-8"), options)), ""
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return _Literal(pattern), (
            f"\n[the pattern is not a regular expression RE2 supports ({reason}; "
            "backreferences and lookaround are not); searched for it as plain text]"
        )


class TaskTools(RepositoryTools):
    """Repository reading plus a sandbox, and dispatch of tool calls by name.

    Args:
        files: the repository view.
        sandbox: a started sandbox, or a callable returning one (called on first use,
            so episodes that never run tests never start a sandbox).
    """

    specs: tuple[ToolSpec, ...] = FUNCTION_TOOLS[:3]

    def __init__(self, files: Mapping[str, str], sandbox: Sandbox | Callable[[], Sandbox]) -> None:
        super().__init__(files)
        self._sandbox = sandbox
        self._make_sandbox = None if isinstance(sandbox, Sandbox) else sandbox
        self.code: str | None = None

    def sandbox(self) -> Sandbox:
        """The sandbox, created on first use."""
        if not isinstance(self._sandbox, Sandbox):
            self._sandbox = self._sandbox()
        return self._sandbox

    def __getstate__(self) -> dict[str, Any]:
        # A sandbox made on first use is not sent: the copy makes its own where it runs.
        state = self.__dict__.copy()
        if self._make_sandbox is not None:
            state["_sandbox"] = self._make_sandbox
        return state

    def spec(self, name: str) -> ToolSpec:
        """The spec of tool ``name``.

        Raises:
            ToolError: no such tool.
        """
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise ToolError(f"unknown tool {name!r}; available: {', '.join(s.name for s in self.specs)}")

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Validate and run a tool other than ``submit`` (the environment handles it)."""
        validate_args(self.spec(name), args)
        handler = getattr(self, name)
        return handler(**args)


class FunctionTools(TaskTools):
    """The tools of a function task: repository reading, writing the candidate, testing.

    Args:
        task: the task.
        sandbox: a started sandbox, or a callable returning one (called on first use,
            so episodes that never run tests never start a sandbox).
    """

    specs: tuple[ToolSpec, ...] = FUNCTION_TOOLS

    def __init__(self, task: FunctionTask, sandbox: Sandbox | Callable[[], Sandbox]) -> None:
        super().__init__(task.repository.files, sandbox)
        self.task = task

    def write_code(self, code: str) -> ToolResult:
        """Store the candidate after checking it parses and defines the target."""
        try:
            prepare_candidate(code, self.task.target)
        except CandidateError as exc:
            raise ToolError(str(exc)) from None
        self.code = code
        return ToolResult(
            f"Code saved ({len(code.splitlines())} lines). Use run_tests to test it or submit when you are done.",
            data={"lines": len(code.splitlines())},
        )

    def test_current(self) -> TestReport:
        """Run the tests on the current code.

        Raises:
            ToolError: no code has been written yet.
            SandboxError: the sandbox failed (infrastructure).
        """
        if self.code is None:
            raise ToolError("no code yet: call write_code with your implementation first")
        return run_function_tests(self.sandbox(), self.task, self.code)

    def run_tests(self) -> ToolResult:
        """Run the tests and report."""
        report = self.test_current()
        return ToolResult(report.to_text(), ok=True, data={"test_report": report.model_dump()})


class TestFileTools(TaskTools):
    """The tools of a test-file task: repository reading, writing the test file, scoring it.

    The repository view holds no ground-truth test file; the agent's file is run where
    that file lives (``task.evaluation.test_path``).

    Args:
        task: the task.
        sandbox: a started sandbox, or a callable returning one (called on first use).
        reward: how the metrics blend into the reward.
    """

    __test__ = False  # not a pytest test class
    specs: tuple[ToolSpec, ...] = TESTFILE_TOOLS

    def __init__(
        self, task: TestFileTask, sandbox: Sandbox | Callable[[], Sandbox], reward: RewardConfig | None = None
    ) -> None:
        super().__init__(task.repository.files, sandbox)
        self.task = task
        self.reward = reward or RewardConfig()

    def write_tests(self, code: str) -> ToolResult:
        """Store the test file; a file that does not parse is kept, and said so."""
        self.code = code
        lines = len(code.splitlines())
        try:
            parse_python(code)
        except (SyntaxError, ValueError) as exc:
            where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) else ""
            return ToolResult(
                f"Test file saved ({lines} lines), but it does not parse: {exc}{where}. "
                "It cannot run until you fix it.",
                data={"lines": lines, "parses": False},
            )
        return ToolResult(
            f"Test file saved ({lines} lines) as {self.task.evaluation.test_path}. Use run_tests "
            "to score it or submit when you are done.",
            data={"lines": lines, "parses": True},
        )

    def test_current(self) -> TestFileReport:
        """Run and score the current test file.

        Raises:
            ToolError: no test file has been written yet.
            SandboxError: the sandbox failed (infrastructure).
        """
        if self.code is None:
            raise ToolError("no test file yet: call write_tests with your test file first")
        return score_test_file(self.sandbox(), self.task, self.code, self.reward)

    def run_tests(self) -> ToolResult:
        """Run the test file and report."""
        report = self.test_current()
        return ToolResult(report.to_text(), ok=True, data={"test_report": report.model_dump(mode="json")})
