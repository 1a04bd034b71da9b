"""The tool set: argument checking, repository reading, agent mistakes as ToolError."""

from __future__ import annotations

import pytest

from gym_repost.errors import ToolError
from gym_repost.task import FunctionTask
from gym_repost.tools import (
    FUNCTION_TOOLS,
    MAX_READ_LINES,
    FunctionTools,
    RepositoryTools,
    normalize_repo_path,
    parse_action,
    validate_args,
)

REPO = {
    "pkg/__init__.py": "",
    "pkg/a.py": "\n".join(f"line {i}" for i in range(1, 1001)),
    "pkg/sub/b.py": "def f():\n    return 'needle'\n",
    "README.md": "# demo\n",
}


def test_every_tool_has_a_json_schema_for_function_calling() -> None:
    names = [s.name for s in FUNCTION_TOOLS]
    assert names == ["list_files", "read_file", "search", "write_code", "run_tests", "submit"]
    for spec in FUNCTION_TOOLS:
        assert spec.parameters["type"] == "object" and spec.parameters["additionalProperties"] is False
        assert spec.openai_schema()["function"]["name"] == spec.name
        assert spec.anthropic_schema()["input_schema"] == spec.parameters


@pytest.mark.parametrize(
    "action",
    [
        {"tool": "read_file", "args": {"path": "a"}},
        '{"tool": "read_file", "args": {"path": "a"}}',
        {"name": "read_file", "arguments": '{"path": "a"}'},
        b'{"tool": "read_file", "args": {"path": "a"}}',
    ],
)
def test_parse_action_accepts_dicts_json_and_openai_spelling(action) -> None:
    assert parse_action(action) == ("read_file", {"path": "a"})


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("not json", "not valid JSON"),
        ([1, 2], "must be an object"),
        ({"args": {}}, 'no "tool"'),
        ({"tool": "x", "args": [1]}, '"args" must be an object'),
        ({"tool": "x", "arguments": "{bad"}, "arguments are not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (None, "must be an object"),
    ],
)
def test_parse_action_errors(action, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        parse_action(action)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument 'path'"),
        ({"path": 3}, "must be a string"),
        ({"path": "a", "start": "1"}, "must be a integer"),
        ({"path": "a", "start": True}, "must be a integer"),
        ({"path": "a", "colour": 1}, "unknown argument"),
        ({"path": "x" * 300_000}, "limit"),
        ({"path": "\udc80"}, "not valid UTF-8"),
    ],
)
def test_validate_args_errors(args, message: str) -> None:
    spec = next(s for s in FUNCTION_TOOLS if s.name == "read_file")
    with pytest.raises(ToolError, match=message):
        validate_args(spec, args)


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd"])
def test_paths_outside_the_repository_are_refused(path: str) -> None:
    with pytest.raises(ToolError):
        normalize_repo_path(path)
    with pytest.raises(ToolError):
        RepositoryTools(REPO).read_file(path)


def test_list_read_and_search() -> None:
    tools = RepositoryTools(REPO)
    assert tools.list_files().output.split("\n") == sorted(REPO)
    assert tools.list_files("pkg/sub").output == "pkg/sub/b.py"
    page = tools.read_file("pkg/a.py")
    assert page.data["end"] == MAX_READ_LINES and "read on with start=401" in page.output
    assert tools.read_file("./pkg/a.py", start=999, end=2000).output.splitlines()[1:] == [
        "  999  line 999",
        " 1000  line 1000",
    ]
    assert tools.search("needle").output == "pkg/sub/b.py:2: return 'needle'"
    assert tools.search("(unclosed").data["count"] == 0  # an invalid regex is searched literally
    with pytest.raises(ToolError, match="is a directory"):
        tools.read_file("pkg")
    with pytest.raises(ToolError, match="past the end"):
        tools.read_file("README.md", start=50)


def test_write_code_checks_the_candidate_before_storing(function_task: FunctionTask) -> None:
    tools = FunctionTools(function_task, sandbox=lambda: pytest.fail("no sandbox needed"))
    with pytest.raises(ToolError, match="no code yet"):
        tools.run_tests()
    with pytest.raises(ToolError, match="does not parse"):
        tools.write_code("def score(:")
    assert tools.code is None
    assert tools.call("write_code", {"code": "def score(values, cap=100):\n    return 1"}).ok
    assert tools.code is not None
    with pytest.raises(ToolError, match="unknown tool 'rm'"):
        tools.call("rm", {})
