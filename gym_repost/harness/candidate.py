"""Place a candidate solution into a task's evaluation script.

The candidate is the full source of the target function (helpers and imports may come
with it). It is renamed to ``{name}_new_implementation`` and inserted right after the
original definition, inside the class for methods, as RepoST's harness does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import (
    dedent_code,
    find_function,
    indent_code,
    rename_definition,
)
from gym_repost.errors import CandidateError
from gym_repost.task import FunctionTask, Target

MAX_CANDIDATE_CHARS = 200_000
"""Longest candidate accepted; longer ones are rejected with an explanation."""

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code_block(text: str) -> str | None:
    """The first fenced code block of a reply (a ``python`` one preferred), else None."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return None
    for lang, body in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return body
    return blocks[0][1]


@dataclass(frozen=True)
class AssembledScript:
    """An evaluation script with the candidate in it.

    Attributes:
        script: the full script text.
        start_line: 1-based line of the candidate's first line in ``script``.
        end_line: 1-based line of the candidate's last line.
    """

    script: str
    start_line: int
    end_line: int


def new_name(target: Target) -> str:
    """The name the candidate takes in the script: ``{name}_new_implementation``."""
    return f"{target.name}_new_implementation"


def _unwrap_class(tree: ast.Module, code: str, target: Target) -> str | None:
    """If the candidate wrapped the method in its class, return the class body."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == target.class_name:
            lines = code.split("\n")
            first = min([node.body[0].lineno] + [d.lineno for d in getattr(node.body[0], "decorator_list", [])])
            return dedent_code("\n".join(lines[first - 1: node.end_lineno]))
    return None


def prepare_candidate(code: str, target: Target) -> str:
    """Normalise a candidate: strip a markdown fence, dedent, check it defines the target.

    Raises:
        CandidateError: the code is too long, does not parse, or does not define
            ``def {target.name}``.
    """
    if not isinstance(code, str):
        raise CandidateError(f"the code must be a string, got {type(code).__name__}")
    if len(code) > MAX_CANDIDATE_CHARS:
        raise CandidateError(f"the code is {len(code)} characters long; the limit is "
                             f"{MAX_CANDIDATE_CHARS}")
    if "```" in code:
        code = extract_code_block(code) or code
    code = dedent_code(code.replace("\r\n", "\n")).strip("\n")
    try:
        tree = parse_python(code)
    except SyntaxError as exc:
        raise CandidateError(f"your code does not parse: line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == target.name
               for n in tree.body):
        unwrapped = _unwrap_class(tree, code, target) if target.class_name else None
        if unwrapped is None:
            raise CandidateError(
                f"your code must define the function `def {target.name}(...)` at its top level "
                f"(the full source of {target.qualname}, signature included)")
        return prepare_candidate(unwrapped, target)
    return code


def assemble(task: FunctionTask, code: str) -> AssembledScript:
    """Insert ``code`` into the task's evaluation script as the candidate.

    Raises:
        CandidateError: the candidate is unusable (see :func:`prepare_candidate`), or the
            script with it inserted does not compile (usually a wrong indentation).
    """
    code = prepare_candidate(code, task.target)
    span = find_function(code, task.target.name)
    assert span is not None  # prepare_candidate checked it
    renamed = rename_definition(code, span, new_name(task.target), task.target.class_name)
    block = indent_code(renamed, task.evaluation.indent).split("\n")
    lines = task.evaluation.script.split("\n")
    at = task.evaluation.insert_line
    script = "\n".join(lines[:at] + ["", *block, ""] + lines[at:])
    start = at + 2
    end = start + len(block) - 1
    try:
        compile(script, "evaluation.py", "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = (f"line {exc.lineno - start + 1} of your code" if exc.lineno and start <= exc.lineno <= end
                 else f"line {exc.lineno} of the evaluation script")
        raise CandidateError(f"the evaluation script does not compile with your code in it: "
                             f"{where}: {exc.msg}") from None
    return AssembledScript(script=script, start_line=start, end_line=end)


def do_nothing_candidate(task: FunctionTask) -> str:
    """A candidate with the target's decorators and signature whose body returns None.

    Tests that accept it do not test the target's behaviour.
    """
    target = task.target
    decorators = [f"@{d}" for d in target.decorators]
    return "\n".join(decorators + [target.signature, "    return None"]) + "\n"
