"""Place a candidate solution into a task's evaluation script.

The candidate is the full source of the target function (helpers and imports may come
with it). It is renamed to ``{name}_new_implementation`` and inserted right after the
original definition, inside the class for methods, as RepoST's harness does.
"""

from __future__ import annotations

import ast
import re
import threading
import types
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from gym_repost.analysis.parsing import literal_eval, parse_python
from gym_repost.analysis.source import (
    FunctionSpan,
    dedent_code,
    find_function,
    indent_code,
    rename_definition,
)
from gym_repost.errors import CandidateError, TaskError
from gym_repost.task import FunctionTask, Target

MAX_CANDIDATE_CHARS = 200_000
"""Longest candidate accepted; longer ones are rejected with an explanation."""

_FENCE = re.compile(r"```[ \t]*+([\w+-]*+)[^\n`]*+\n(.*?)(?:```|\Z)", re.DOTALL)
"""A fenced block; possessive quantifiers keep it linear on text full of backticks."""


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
    stripped: str | None = None
    """``script`` without its tests (see :func:`strip_tests`), where :func:`assemble` made it."""


def new_name(target: Target) -> str:
    """The name the candidate takes in the script: ``{name}_new_implementation``."""
    return f"{target.name}_new_implementation"


def _unwrap_class(tree: ast.Module, code: str, target: Target) -> str | None:
    """If the candidate wrapped the method in its class, return the class body."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == target.class_name:
            lines = code.split("\n")
            first = min([node.body[0].lineno] + [d.lineno for d in getattr(node.body[0], "decorator_list", [])])
            return dedent_code("\n".join(lines[first - 1 : node.end_lineno]))
    return None


def prepare_candidate(code: str, target: Target) -> str:
    """Normalise a candidate: strip a markdown fence, dedent, check it defines the target.

    Raises:
        CandidateError: the code is too long, does not parse, or does not define
            ``def {target.name}``.
    """
    return _prepared(code, target)[0]


def _prepared(code: str, target: Target) -> tuple[str, ast.Module]:
    """:func:`prepare_candidate`'s code and its syntax tree."""
    if not isinstance(code, str):
        raise CandidateError(f"the code must be a string, got {type(code).__name__}")
    if len(code) > MAX_CANDIDATE_CHARS:
        raise CandidateError(f"the code is {len(code)} characters long; the limit is {MAX_CANDIDATE_CHARS}")
    if "```" in code and not _parses(code):  # a reply in Markdown; not a docstring showing a fence
        code = extract_code_block(code) or code
    code = dedent_code(code.replace("\r\n", "\n")).strip("\n")
    try:
        tree = parse_python(code)
    except SyntaxError as exc:
        raise CandidateError(f"your code does not parse: line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == target.name for n in tree.body):
        unwrapped = _unwrap_class(tree, code, target) if target.class_name else None
        if unwrapped is None:
            raise CandidateError(
                f"your code must define the function `def {target.name}(...)` at its top level "
                f"(the full source of {target.qualname}, signature included)"
            )
        return _prepared(unwrapped, target)
    return code, tree


def _parses(code: str) -> bool:
    try:
        parse_python(dedent_code(code.replace("\r\n", "\n")).strip("\n"))
    except (SyntaxError, ValueError):
        return False
    return True


RECORD_HOOK = "__gym_repost_record__"
"""Name under which the in-sandbox harness provides the call recorder to the script."""


@lru_cache(maxsize=8)
def _script_tree(script: str) -> ast.Module | None:
    """The syntax tree of a task's script, None when it does not parse: parsed once for the
    functions below (each cached per task), which only read it."""
    try:
        return parse_python(script)
    except (SyntaxError, ValueError):
        return None


@lru_cache(maxsize=512)
def _original_span(script: str, qualname: str) -> tuple[int, int]:
    tree = _script_tree(script)
    span = None if tree is None else find_function(script, qualname, tree)
    if span is None:
        raise TaskError(f"the evaluation script does not define {qualname}, the task's target")
    return span.start, span.end


_COMPILED: OrderedDict[str, types.CodeType | tuple[int | None, str]] = OrderedDict()
"""The scripts :func:`assemble` checked most recently (:data:`_COMPILED_KEPT`), by text: each
compiled, or where and why it does not compile. The ground truth is assembled into the same
script for every run of a task; a candidate's script is run right after its check."""
_COMPILED_KEPT = 32
_COMPILED_LOCK = threading.Lock()


def _compile_error(script: str) -> tuple[int | None, str] | None:
    """Where and why ``script`` does not compile, None when it does (compiled once per text)."""
    with _COMPILED_LOCK:
        compiled = _COMPILED.get(script)
        if compiled is not None:
            _COMPILED.move_to_end(script)
    if compiled is None:
        try:
            # optimize=0 whatever the host's -O: the sandbox's harness runs this code, asserts and all
            compiled = compile(script, "evaluation.py", "exec", dont_inherit=True, optimize=0)
        except SyntaxError as exc:
            compiled = exc.lineno, str(exc.msg)
        with _COMPILED_LOCK:
            _COMPILED[script] = compiled
            while len(_COMPILED) > _COMPILED_KEPT:
                _COMPILED.popitem(last=False)
    return None if isinstance(compiled, types.CodeType) else compiled


def compiled_script(script: str) -> types.CodeType | None:
    """The code of ``script`` if :func:`assemble` compiled it to check it, lately; else None
    (nothing is compiled here): the sandbox's harness runs it rather than compile it again."""
    with _COMPILED_LOCK:
        compiled = _COMPILED.get(script)
    return compiled if isinstance(compiled, types.CodeType) else None


def assemble(
    task: FunctionTask, code: str, *, keep_original: bool = False, check_stripped: bool = False
) -> AssembledScript:
    """Put ``code`` into the task's evaluation script in place of the original.

    The original definition is removed: the script that runs holds only the code under
    test, defined as ``{name}_new_implementation``, bound to the original name too and
    wrapped by the harness's call recorder. Tests that compare the two names therefore
    compare the code with itself; the verdict comes from comparing the recorded calls
    with the reference's (see :mod:`gym_repost.harness.verdict`).

    ``keep_original=True`` keeps the original and inserts the candidate right after it,
    unwrapped (RepoST's own layout): for trusted uses where the original is the reference,
    such as the training-data execution matrix, never for a verdict.

    ``check_stripped=True``: the script that will run is :attr:`AssembledScript.stripped`
    (a replay of recorded calls): that text is the one checked to compile (its lines are
    the script's), unless the candidate's lines are blanked in it.

    Raises:
        CandidateError: the candidate is unusable (see :func:`prepare_candidate`), or the
            script with it inserted does not compile (usually a wrong indentation).
        TaskError: the script does not define the target.
    """
    code, tree = _prepared(code, task.target)
    span = find_function(code, task.target.name, tree)
    assert span is not None  # prepare_candidate checked it
    new = new_name(task.target)
    renamed = rename_definition(code, span, new, task.target.class_name)
    hook = "" if keep_original else "\n" + f"{task.target.name} = {new} = {RECORD_HOOK}({new})"
    block = indent_code(renamed + hook, task.evaluation.indent).split("\n")
    lines = task.evaluation.script.split("\n")
    bare = list(_stripped_lines(task.evaluation.script, task.evaluation.test_function))
    at = task.evaluation.insert_line
    if not keep_original:
        first, last = _original_span(task.evaluation.script, task.target.qualname)
        if first <= at < last:
            raise TaskError(f"the insertion line {at} lies inside the original {task.target.qualname}")
        if at >= last:
            at -= last - first + 1
        in_tests = not bare[first - 1].strip()  # a method of a test class: the class is blanked, and so is the code
        lines = lines[: first - 1] + lines[last:]
        bare = bare[: first - 1] + bare[last:]
    script = "\n".join(lines[:at] + ["", *block, ""] + lines[at:])
    stripped = None
    bare_block: list[str] = []
    if not keep_original:
        if task.evaluation.indent:
            bare_block = [""] * len(block) if in_tests else block
        else:
            bare_block = _without_tests(block, tree, task.evaluation.test_function, span)
        stripped = "\n".join(bare[:at] + ["", *bare_block, ""] + bare[at:])
    start = at + 2
    end = start + len(block) - (1 if keep_original else 2)
    checked = stripped if check_stripped and stripped is not None and bare_block == block else script
    error = _compile_error(checked)
    if error is not None:
        lineno, msg = error
        where = (
            f"line {lineno - start + 1} of your code"
            if lineno and start <= lineno <= end
            else f"line {lineno} of the evaluation script"
        )
        raise CandidateError(f"the evaluation script does not compile with your code in it: {where}: {msg}")
    return AssembledScript(script=script, start_line=start, end_line=end, stripped=stripped)


PLAYBACK_HOOK = "__gym_repost_playback__"
"""Name under which the in-sandbox harness's ``playback`` mode answers calls from a candidate's record."""


def playback_script(task: FunctionTask) -> AssembledScript | None:
    """The task's script with the original kept and ``{name}_new_implementation`` answering from a record.

    Only for a task whose tests are its specification: a module-level target that the
    script reaches only through ``{name}_new_implementation`` (HumanEval's ``check``, a
    test asserting properties of the result). A script that uses the original's name
    outside its definition (RepoST's equivalence tests, a helper calling it) gives None:
    there the tests compare against the original, and the recorded calls decide alone.
    """
    target, evaluation = task.target, task.evaluation
    if target.class_name is not None:
        return None
    return _playback_script(evaluation.script, target.name, new_name(target), evaluation.insert_line)


@lru_cache(maxsize=256)
def _playback_script(script: str, name: str, new: str, at: int) -> AssembledScript | None:
    tree = _script_tree(script)
    span = None if tree is None else find_function(script, name, tree)
    if tree is None or span is None:
        return None
    lines = script.split("\n")
    outside = "\n".join(lines[: span.start - 1] + lines[span.end :])
    # An identifier is spelled out where it is used; a script that never writes the name
    # outside its definition (HumanEval's) needs no walk. Non-ASCII identifiers are
    # normalized by the parser (NFKC), so such a script is always walked.
    if not outside.isascii() or re.search(rf"\b{re.escape(name)}\b", outside):
        inside = set(ast.walk(span.node))
        for node in ast.walk(tree):
            if node in inside:
                continue
            if (
                (isinstance(node, ast.Name) and node.id == name)
                or (isinstance(node, ast.Attribute) and node.attr == name)
                or (isinstance(node, ast.alias) and name in (node.name, node.asname))
                or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name)
            ):
                return None
    at = max(at, span.end)
    hook = f"{new} = {PLAYBACK_HOOK}({name})"
    script = "\n".join(lines[:at] + ["", hook, ""] + lines[at:])
    return AssembledScript(script=script, start_line=at + 2, end_line=at + 2)


def _is_test_name(name: str, test_names: set[str]) -> bool:
    return name in test_names or name == "check" or name.startswith(("test", "Test"))


def _is_test_statement(node: ast.stmt, test_names: set[str]) -> bool:
    if isinstance(node, ast.If):
        test = node.test
        return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _is_test_name(node.name, test_names)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        return isinstance(func, ast.Name) and _is_test_name(func.id, test_names)
    return False


def strip_tests(task: FunctionTask, assembled: AssembledScript) -> str:
    """The assembled script without its tests: the context the replay of recorded calls needs.

    Top-level ``if __name__ ...`` blocks, test functions and classes (the task's
    ``test_function``, ``check``, names starting with ``test``) and top-level calls of
    them become blank lines, so line numbers (and the candidate's) stay as they were. The
    candidate's own definition stays, whatever its name. :func:`assemble` makes it from
    the task's script, stripped once, and the candidate's syntax tree, parsing nothing.
    """
    if assembled.stripped is not None:
        return assembled.stripped
    lines = assembled.script.split("\n")
    return "\n".join(_without_tests(lines, parse_python(assembled.script), task.evaluation.test_function))


@lru_cache(maxsize=256)
def _stripped_lines(script: str, test_function: str) -> tuple[str, ...]:
    """The task's script, split into lines, with its tests blanked (once per task)."""
    tree = _script_tree(script)
    if tree is None:
        raise TaskError("the evaluation script does not parse")
    return tuple(_without_tests(script.split("\n"), tree, test_function))


def _without_tests(
    lines: list[str], tree: ast.Module, test_function: str, keep: FunctionSpan | None = None
) -> list[str]:
    """``lines`` (of the module ``tree``) with the top-level test statements blanked, but ``keep``."""
    lines = list(lines)
    for node in tree.body:
        if _is_test_statement(node, {test_function}) and (keep is None or node is not keep.node):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            for i in range(first - 1, node.end_lineno or node.lineno):
                lines[i] = ""
    return lines


def do_nothing_candidate(task: FunctionTask) -> str:
    """A candidate with the target's decorators and signature whose body returns None.

    Tests that accept it do not test the target's behaviour.
    """
    target = task.target
    decorators = [f"@{d}" for d in target.decorators]
    return "\n".join(decorators + [target.signature, "    return None"]) + "\n"


def trivial_candidates(task: FunctionTask, calls: list[dict[str, str]] | None = None) -> dict[str, str]:
    """Candidates that solve nothing, by what they do: return None, return the first argument,
    return ``self``, return the value the ground truth returns most often, raise the
    exception it raises most often. Tests that accept any of them do not test the target's
    behaviour (a policy finds such a hole by itself: "return the input unchanged").

    ``calls``: the reference's recorded calls (for the most common value and exception);
    without them only the first three are made.
    """
    target = task.target
    header = [f"@{d}" for d in target.decorators] + [target.signature]
    found = {"return None": do_nothing_candidate(task)}
    first, is_method = _first_parameters(task)
    if first is not None:
        found["return the first argument"] = "\n".join([*header, f"    return {first}"]) + "\n"
    if is_method:
        found["return self"] = "\n".join([*header, "    return self"]) + "\n"
    value, exception = _most_common_outcome(calls or [])
    if value is not None:
        found["return the most common value"] = "\n".join([*header, f"    return {value}"]) + "\n"
    if exception is not None:
        found[f"raise {exception}"] = "\n".join([*header, f"    raise {exception}()"]) + "\n"
    return found


def _first_parameters(task: FunctionTask) -> tuple[str | None, bool]:
    """The first parameter a caller passes (after ``self``/``cls``), and whether the target is
    an instance method."""
    try:
        tree = parse_python(f"{task.target.signature}\n    pass\n")
    except (SyntaxError, ValueError):
        return None, False
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, False
    names = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    decorators = set(task.target.decorators)
    is_method = task.target.class_name is not None and not decorators & {"staticmethod", "classmethod"}
    if task.target.class_name is not None and "staticmethod" not in decorators and names:
        names = names[1:]
    if "property" in decorators or any(d.endswith((".setter", ".deleter")) for d in decorators):
        return None, is_method
    return (names[0] if names else None), is_method


def _most_common_outcome(calls: list[dict[str, str]]) -> tuple[str | None, str | None]:
    """The ground truth's most common plain return value (as source) and most common exception
    (its class's name), over its recorded calls; None where there is none."""
    values: dict[str, int] = {}
    exceptions: dict[str, int] = {}
    for call in calls:
        if call.get("x") and call["x"] != "*":
            name = call["x"].rsplit(".", 1)[-1]
            if name.isidentifier():
                exceptions[name] = exceptions.get(name, 0) + 1
        elif call.get("rr") and call.get("g") is None:
            text = call["rr"]
            try:
                literal = literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if literal is not None and repr(literal) == text:
                values[text] = values.get(text, 0) + 1
    value = max(values, key=lambda v: (values[v], v)) if values else None
    exception = max(exceptions, key=lambda e: (exceptions[e], e)) if exceptions else None
    return value, exception
