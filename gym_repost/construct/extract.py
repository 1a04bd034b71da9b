"""Stage 2, extract: the functions and methods of a repository that may become tasks.

Every Python file is parsed with tree-sitter (which parses broken files too) and checked
with :func:`ast.parse` (which the later stages rely on). Functions at module level and
methods of classes (nested classes included) are candidates; functions nested in
functions are not (nothing outside can call them), nor are definitions inside ``if`` or
``try`` blocks at module or class level (recorded as ``conditional definition``).

Every function seen either becomes a :class:`Candidate` or gets one :class:`Drop`; a file
``ast`` rejects gets one drop for the whole file (qualname ``*``). Drop reasons, checked in
this order:

``syntax error``
    ``ast`` rejects the function's file, or the function's tree-sitter subtree holds
    ERROR or MISSING nodes (with tree-sitter-python 0.25 the second has not been seen
    without the first: its grammar accepts more than Python 3.11 does).
``test code``
    files under ``test``/``tests``/``testing`` directories, ``test_*.py``, ``*_test.py``,
    ``*_tests.py``, ``test.py``, ``tests.py`` (unittest's modules), ``conftest.py``;
    functions named ``test*``, ``setUp*``/``tearDown*``, ``setup_*``/``teardown_*``;
    methods of classes named ``Test*`` or deriving from a ``*TestCase``.
``conditional definition``
    defined inside an ``if``/``try``/``with`` block at module or class level.
``redefined later``, ``property setter``
    a qualname defined more than once keeps its last definition (as at run time, and
    as :func:`~gym_repost.analysis.source.find_function` finds it); a last definition
    that is a property's setter or deleter cannot be called by name.
``dunder method``, ``name-mangled method``
    ``__x__`` and ``__x`` methods: the harness's ``{name}_new_implementation`` of such a
    method is name-mangled inside its class body, and dunders are invoked by the
    interpreter rather than by name. ``__init__`` is one of them: a constructor is
    exercised through the methods that are targets.
``trivial body``
    the body (docstring and comments aside) is only ``pass``, ``...`` and
    ``raise NotImplementedError``; or it is one statement that returns, evaluates or
    assigns a name, an attribute chain or a constant (getters, one-line delegations of
    nothing). A one-line body with a call or an operator is kept: it has behaviour.
``<category> keyword``
    the function's code (docstring and comments removed, decorators included) mentions
    a keyword of :data:`DEFAULT_EXCLUDE_KEYWORDS` (or the caller's table); the keyword
    is the drop's detail.
``not library code``
    ``setup.py``, ``noxfile.py``, files named ``example*.py``, files under ``doc``/``docs``,
    ``example``/``examples``, ``bench``/``benchmark``/``benchmarks`` directories, and under
    a top-level ``bin``, ``ci``, ``ci_tools``, ``tools``, ``scripts``, ``build_tools``,
    ``devtools``, ``utils`` or ``misc`` directory.
``single-statement body``
    one statement (nested ones counted) with no branch (no ``if``, loop, boolean operator,
    conditional expression) that calls no function or class the repository defines: a
    one-line wrapper of the standard library tests little of the repository's logic.
``body appears elsewhere in the repository``
    another function of the repository (a test's helper, a copy in another module) has the
    same body, parameters and names aside: the agent, who sees the repository, can copy it.
``over the per-repository cap``
    see :func:`select_candidates`.

The last three besides the cap are the builder's defaults and can each be kept
(:data:`KEEP_OPTIONS`).
"""

from __future__ import annotations

import ast
import gc
import inspect
import logging
import random
import re
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import tree_sitter
import tree_sitter_python

from gym_repost.analysis.parsing import literal_eval, parse_python
from gym_repost.analysis.source import dedent_code
from gym_repost.construct.stages import Candidate, Drop, SourceRepository

if TYPE_CHECKING:
    from gym_repost.construct.dependencies import RepositoryIndex

log = logging.getLogger(__name__)

DEFAULT_EXCLUDE_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "gpu": ("cuda", "CUDA", "gpu", "GPU", "torch.cuda", "jax.devices", "tpu", "TPU"),
    "cloud": ("boto3", "botocore", "s3", "S3", "aws", "AWS", "gcp", "google.cloud", "azure", "kubernetes", "docker"),
    "network": (
        "requests.",
        "urllib.request",
        "urlopen",
        "http.client",
        "httpx",
        "aiohttp",
        "socket",
        "websocket",
        "smtplib",
        "ftplib",
        "paramiko",
    ),
    "process": (
        "subprocess",
        "os.system",
        "os.popen",
        "os.fork",
        "os.kill",
        "multiprocessing",
        "threading",
        "asyncio.create_subprocess",
        "signal.",
    ),
    "hardware": ("tkinter", "pygame", "RPi", "serial.", "pyserial"),
    "database": ("sqlite3.connect", "psycopg", "psycopg2", "pymongo", "redis", "sqlalchemy"),
    "interactive": ("input(", "getpass"),
    "sleep": ("time.sleep", "asyncio.sleep"),
}
"""Keyword categories of the deterministic builder: a function whose code mentions one
(with no identifier character right before it, nor right after a keyword ending in one)
is dropped as ``"<category> keyword"``. The LLM builder may accept some with mocks."""

_TEST_DIRS = frozenset({"test", "tests", "testing"})
_BRANCH_TYPES = (
    "if_statement",
    "elif_clause",
    "for_statement",
    "while_statement",
    "except_clause",
    "boolean_operator",
    "conditional_expression",
    "if_clause",
    "case_clause",
)
_STATEMENT_TYPES = (
    "expression_statement",
    "return_statement",
    "pass_statement",
    "if_statement",
    "for_statement",
    "while_statement",
    "try_statement",
    "with_statement",
    "raise_statement",
    "assert_statement",
    "import_statement",
    "import_from_statement",
    "delete_statement",
    "global_statement",
    "nonlocal_statement",
    "break_statement",
    "continue_statement",
    "function_definition",
    "class_definition",
    "match_statement",
    "type_alias_statement",
    "future_import_statement",
    "print_statement",
    "exec_statement",
)
_SIMPLE_VALUES = frozenset(
    {
        "identifier",
        "attribute",
        "string",
        "concatenated_string",
        "integer",
        "float",
        "true",
        "false",
        "none",
        "ellipsis",
    }
)
_PROPERTY_DECORATORS = re.compile(r"^(?:[\w.]+\.)?(?:property|cached_property|abstractproperty)$")
_ACCESSOR_DECORATOR = re.compile(r"^\w+\.(?:setter|deleter|getter)$")


@dataclass
class ExtractStats:
    """What extraction saw in one repository.

    ``functions_seen`` counts every function and method found (nested functions aside),
    in files ``ast`` rejects too; each one is a candidate (before the cap), or has a drop,
    or sits in a file with a whole-file drop.
    """

    python_files: int = 0
    files_parsed: int = 0
    files_with_syntax_errors: int = 0
    functions_seen: int = 0
    kept_before_cap: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Definition:
    """A function found by the walk: its node, its decorators' wrapper and its classes."""

    node: tree_sitter.Node
    outer: tree_sitter.Node
    classes: tuple[tuple[str, str], ...]
    """Enclosing classes, outermost first: ``(name, bases text)``."""
    conditional: bool


@dataclass(frozen=True)
class _FileIndex:
    """Per-file positions found by tree-sitter queries, sorted by start byte."""

    branches: list[int]
    statements: list[int]
    comments: list[tuple[int, int]]
    yields: list[tree_sitter.Node]


@lru_cache(maxsize=1)
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_python.language())


@lru_cache(maxsize=1)
def _query() -> tree_sitter.Query:
    """One query for every position extraction counts: branches, statements, comments, yields."""
    branches = " ".join(f"({t})" for t in _BRANCH_TYPES)
    statements = " ".join(f"({t})" for t in _STATEMENT_TYPES)
    return tree_sitter.Query(_language(), f"[{branches}] @b [{statements}] @s (comment) @c (yield) @y")


@contextmanager
def garbage_collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a block of static analysis.

    Every collection walks all the syntax trees alive (``ast.parse`` of a repository's
    files runs 3x slower with it, slicing and extraction next to a built index 1.3-2x),
    and the trees hold no reference cycles: reference counting frees them anyway.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def module_name(path: str, files: Collection[str]) -> str:
    """Dotted module name of a repository file.

    A leading ``src/`` is stripped; the name holds the directories that are packages
    (have an ``__init__.py`` in ``files``) up from the file, so a file outside packages
    gets its stem: ``src/pkg/sub/mod.py`` -> ``pkg.sub.mod``, ``pkg/__init__.py`` ->
    ``pkg``, ``scripts/tool.py`` -> ``tool`` (``scripts`` holding no ``__init__.py``).
    """
    parts = path.split("/")
    stem = parts[-1].removesuffix(".py")
    dirs = parts[:-1]
    package: list[str] = []
    while dirs and "/".join([*dirs, "__init__.py"]) in files:
        package.insert(0, dirs.pop())
    if stem == "__init__":
        return ".".join(package) or (dirs[-1] if dirs else stem)
    return ".".join([*package, stem])


def is_test_path(path: str) -> bool:
    """True for files of a test suite (see the module docstring)."""
    parts = path.split("/")
    name = parts[-1]
    return (
        bool(_TEST_DIRS.intersection(parts[:-1]))
        or name.startswith("test_")
        or name.endswith(("_test.py", "_tests.py"))
        or name in ("conftest.py", "test.py", "tests.py")
    )


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", errors="replace")


def _body(node: tree_sitter.Node) -> tree_sitter.Node | None:
    return node.child_by_field_name("body")


def _walk_definitions(
    block: tree_sitter.Node, classes: tuple[tuple[str, str], ...] = (), conditional: bool = False
) -> Iterator[_Definition]:
    """Functions directly in ``block`` and in the classes it defines (not in functions)."""
    for child in block.named_children:
        outer, node = child, child
        if child.type == "decorated_definition":
            node = child.child_by_field_name("definition") or child
        if node.type == "function_definition":
            yield _Definition(node, outer, classes, conditional)
        elif node.type == "class_definition":
            name = _text(node.child_by_field_name("name") or node)
            bases = node.child_by_field_name("superclasses")
            body = _body(node)
            if body is not None:
                yield from _walk_definitions(body, (*classes, (name, _text(bases) if bases else "")), conditional)
        elif node.type in (
            "if_statement",
            "try_statement",
            "with_statement",
            "elif_clause",
            "else_clause",
            "except_clause",
            "finally_clause",
            "block",
        ):
            yield from _walk_definitions(node, classes, True)


def _file_index(root: tree_sitter.Node) -> _FileIndex:
    found = tree_sitter.QueryCursor(_query()).captures(root)
    return _FileIndex(
        branches=sorted(n.start_byte for n in found.get("b", [])),
        statements=sorted(n.start_byte for n in found.get("s", [])),
        comments=sorted((n.start_byte, n.end_byte) for n in found.get("c", [])),
        yields=found.get("y", []),
    )


def _count_between(starts: list[int], low: int, high: int) -> int:
    return bisect_left(starts, high) - bisect_left(starts, low)


def _code_end_row(node: tree_sitter.Node) -> int:
    """0-based row of the last code token of ``node`` (trailing comments left out)."""
    for child in reversed(node.children):
        if child.type == "comment":
            continue
        return _code_end_row(child) if child.child_count else child.end_point.row
    return node.end_point.row


def _statements_of(body: tree_sitter.Node) -> list[tree_sitter.Node]:
    return [c for c in body.named_children if c.type != "comment"]


def _docstring(statements: list[tree_sitter.Node]) -> tuple[str | None, tree_sitter.Node | None]:
    """The cleaned docstring and its statement node, when the body starts with one."""
    if not statements or statements[0].type != "expression_statement":
        return None, None
    parts = statements[0].named_children
    if len(parts) != 1 or parts[0].type not in ("string", "concatenated_string"):
        return None, None
    try:
        value = literal_eval(_text(parts[0]))
    except (ValueError, SyntaxError):
        return None, None
    return (inspect.cleandoc(value), statements[0]) if isinstance(value, str) else (None, None)


def _is_trivial(statements: list[tree_sitter.Node]) -> bool:
    """See ``trivial body`` in the module docstring (docstring already removed)."""

    def empty(node: tree_sitter.Node) -> bool:
        if node.type == "pass_statement":
            return True
        if node.type == "raise_statement":
            return _text(node).replace(" ", "").startswith("raiseNotImplemented")
        return node.type == "expression_statement" and _text(node).strip() == "..."

    if all(empty(s) for s in statements):
        return True
    if len(statements) != 1:
        return False
    only = statements[0]
    values = only.named_children
    if only.type == "return_statement":
        return not values or values[0].type in _SIMPLE_VALUES
    if only.type == "expression_statement" and len(values) == 1:
        value = values[0]
        if value.type == "assignment":
            right = value.child_by_field_name("right")
            return right is None or right.type in _SIMPLE_VALUES
        return value.type in _SIMPLE_VALUES
    return False


def _kind(classes: tuple[tuple[str, str], ...], decorators: tuple[str, ...]) -> str:
    if not classes:
        return "function"
    for dec in decorators:
        name = dec.split("(")[0].strip()
        if name in ("staticmethod", "classmethod"):
            return name
        if _PROPERTY_DECORATORS.match(name):
            return "property"
    return "method"


def _is_generator(node: tree_sitter.Node, yields: list[tree_sitter.Node]) -> bool:
    """A ``yield`` inside ``node`` whose innermost function is ``node`` itself."""
    for y in yields:
        if not node.start_byte <= y.start_byte < node.end_byte:
            continue
        owner = y.parent
        while owner is not None and owner.type not in ("function_definition", "lambda"):
            owner = owner.parent
        if owner is not None and owner.id == node.id:
            return True
    return False


def _signature(lines: list[str], node: tree_sitter.Node, body: tree_sitter.Node) -> str:
    """The ``def`` header as written, dedented, ending with its colon."""
    colon = next((c for c in reversed(node.children) if c.type == ":" and c.end_byte <= body.start_byte), None)
    end_row, end_col = colon.end_point if colon is not None else body.start_point
    header = lines[node.start_point.row : end_row + 1]
    last = header[-1].encode("utf-8")[:end_col].decode("utf-8", errors="replace")
    header[-1] = last
    if len(header) == 1:
        return last.strip()
    return dedent_code("\n".join(header)).strip()


def _keyword_hit(code: str, keywords: Mapping[str, tuple[str, ...]]) -> tuple[str, str] | None:
    """The first ``(category, keyword)`` whose keyword occurs in ``code``."""
    for category, words in keywords.items():
        pattern = _keyword_pattern(tuple(words))
        match = pattern.search(code)
        if match:
            return category, match.group(0)
    return None


@lru_cache(maxsize=256)
def _keyword_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = sorted(words, key=len, reverse=True)
    parts = [re.escape(w) + (r"(?!\w)" if re.match(r"\w", w[-1]) else "") for w in alternatives]
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + ")")


def _code_text(source: bytes, outer: tree_sitter.Node, skip: list[tuple[int, int]]) -> str:
    """The text of ``outer`` with the byte ranges in ``skip`` (sorted) left out."""
    pieces, at = [], outer.start_byte
    for start, end in skip:
        if end <= at or start >= outer.end_byte:
            continue
        pieces.append(source[at : max(at, start)])
        at = max(at, end)
    pieces.append(source[at : outer.end_byte])
    return b"".join(pieces).decode("utf-8", errors="replace")


def _is_test_function(name: str, classes: tuple[tuple[str, str], ...]) -> bool:
    if name.startswith(("test", "setUp", "tearDown", "setup_", "teardown_")):
        return True
    return any(cls.startswith("Test") or re.search(r"TestCase\b", bases) for cls, bases in classes)


def _drop_reason(
    definition: _Definition, name: str, path: str, redefined: bool, decorators: tuple[str, ...]
) -> str | None:
    """The structural drop reasons, in the order they are checked (None: keep looking)."""
    node, classes = definition.node, definition.classes
    if node.has_error or definition.outer.has_error:
        return "syntax error"
    if is_test_path(path) or _is_test_function(name, classes):
        return "test code"
    if definition.conditional:
        return "conditional definition"
    if redefined:
        return "redefined later"
    if any(_ACCESSOR_DECORATOR.match(d.split("(")[0].strip()) for d in decorators):
        return "property setter"
    if classes and name.startswith("__"):
        return "dunder method" if name.endswith("__") else "name-mangled method"
    return None


@dataclass
class _FileScan:
    """What one file gave: candidates, drops and how many functions it holds."""

    candidates: list[Candidate] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    functions: int = 0
    syntax_error: bool = False


def _qualname(definition: _Definition) -> tuple[str, str]:
    name = _text(definition.node.child_by_field_name("name") or definition.node)
    return name, ".".join([c for c, _ in definition.classes] + [name])


def _decorators(outer: tree_sitter.Node) -> tuple[str, ...]:
    if outer.type != "decorated_definition":
        return ()
    return tuple(_text(d).lstrip("@").strip() for d in outer.named_children if d.type == "decorator")


def _build_candidate(definition: _Definition, path: str, module: str, lines: list[str], index: _FileIndex) -> Candidate:
    """The candidate for one definition (which has a body without error nodes)."""
    node, outer = definition.node, definition.outer
    body = _body(node)
    assert body is not None  # a function_definition without error nodes has a body
    name, qualname = _qualname(definition)
    statements = _statements_of(body)
    docstring, doc_node = _docstring(statements)
    decorators = _decorators(outer)
    start, end = outer.start_point.row + 1, _code_end_row(node) + 1
    counted = _count_between(index.statements, body.start_byte, body.end_byte)
    return Candidate(
        file=path,
        module=module,
        qualname=qualname,
        name=name,
        class_name=definition.classes[-1][0] if definition.classes else None,
        kind=_kind(definition.classes, decorators),  # type: ignore[arg-type]
        start_line=start,
        def_line=node.start_point.row + 1,
        end_line=end,
        signature=_signature(lines, node, body),
        decorators=decorators,
        docstring=docstring,
        source="\n".join(lines[start - 1 : end]),
        is_async=bool(node.children) and node.children[0].type == "async",
        is_generator=_is_generator(node, index.yields),
        body_statements=counted - (1 if doc_node is not None else 0),
        branches=_count_between(index.branches, body.start_byte, body.end_byte),
    )


def ast_error(text: str) -> str | None:
    """Why :func:`ast.parse` rejects ``text`` (``line N: message``), or None."""
    try:
        parse_python(text)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:  # null bytes
        return str(exc)
    return None


def _scan_file(
    parser: tree_sitter.Parser,
    path: str,
    text: str,
    module: str,
    keywords: Mapping[str, tuple[str, ...]],
    rejected: str | None,
) -> _FileScan:
    """Candidates and drops of one file (``rejected``: why ``ast`` rejects it, or None)."""
    source = text.encode("utf-8")
    root = parser.parse(source).root_node
    definitions = list(_walk_definitions(root))
    scan = _FileScan(functions=len(definitions))
    if rejected is not None:
        scan.drops.append(Drop(path, "*", "extract", "syntax error", f"ast rejects the file: {rejected}"))
        scan.syntax_error = True
        return scan
    scan.syntax_error = root.has_error
    index = _file_index(root)
    lines = text.split("\n")
    last = {_qualname(d)[1]: i for i, d in enumerate(definitions)}
    for i, definition in enumerate(definitions):
        name, qualname = _qualname(definition)
        reason, detail = _reason_for(definition, name, path, last[qualname] != i, source, index, keywords)
        if reason is not None:
            scan.drops.append(Drop(path, qualname, "extract", reason, detail))
            continue
        scan.candidates.append(_build_candidate(definition, path, module, lines, index))
    return scan


def _reason_for(
    definition: _Definition,
    name: str,
    path: str,
    redefined: bool,
    source: bytes,
    index: _FileIndex,
    keywords: Mapping[str, tuple[str, ...]],
) -> tuple[str | None, str]:
    """The drop reason and detail of a definition before its body is looked at."""
    outer = definition.outer
    decorators = _decorators(outer)
    reason = _drop_reason(definition, name, path, redefined, decorators)
    if reason is not None:
        return reason, ""
    body = _body(definition.node)
    statements = _statements_of(body) if body is not None else []
    _, doc_node = _docstring(statements)
    if _is_trivial([s for s in statements if s is not doc_node]):
        return "trivial body", ""
    skip = _ranges_within(index.comments, outer.start_byte, outer.end_byte)
    if doc_node is not None:
        skip = sorted([*skip, (doc_node.start_byte, doc_node.end_byte)])
    hit = _keyword_hit(_code_text(source, outer, skip), keywords)
    if hit is not None:
        return f"{hit[0]} keyword", hit[1]
    return None, ""


def _ranges_within(ranges: list[tuple[int, int]], low: int, high: int) -> list[tuple[int, int]]:
    """The sorted ``(start, end)`` ranges that start in ``[low, high)``."""
    first = bisect_left(ranges, (low, -1))
    last = bisect_left(ranges, (high, -1))
    return ranges[first:last]


def _scan_repository(
    repo: SourceRepository, keywords: Mapping[str, tuple[str, ...]], index: RepositoryIndex | None, stats: ExtractStats
) -> tuple[list[Candidate], list[Drop]]:
    """Every file's candidates and drops, before the cap (``stats`` counts the files)."""
    candidates: list[Candidate] = []
    drops: list[Drop] = []
    parser = tree_sitter.Parser(_language())
    for path in repo.python_files:
        text = repo.files[path]
        if index is not None and path in index.files:
            rejected = None
        elif index is not None and path in index.rejected:
            rejected = index.rejected[path]
        else:
            rejected = ast_error(text)
        scan = _scan_file(parser, path, text, module_name(path, repo.files), keywords, rejected)
        stats.files_parsed += 1
        stats.files_with_syntax_errors += scan.syntax_error
        stats.functions_seen += scan.functions
        candidates.extend(scan.candidates)
        drops.extend(scan.drops)
    return candidates, drops


KEEP_OPTIONS = ("non-library", "single-statement", "duplicates")
"""What ``extract_candidates(keep=...)`` (``gym-repost build --keep``) can keep that is dropped
by default: non-library code, single-statement bodies, bodies found elsewhere."""
_NON_LIBRARY_DIRS = frozenset({"doc", "docs", "example", "examples", "bench", "benchmark", "benchmarks"})
_NON_LIBRARY_TOPS = frozenset({"bin", "ci", "ci_tools", "tools", "scripts", "build_tools", "devtools", "utils", "misc"})
"""Top-level directories of a repository that hold its maintainers' tools, not the library."""


def is_library_path(path: str) -> bool:
    """False for ``setup.py``, ``example*.py``, files under docs, examples or benchmarks, and
    files under a top-level tools directory (``ci_tools/``, ``scripts/``...)."""
    parts = path.split("/")
    name = parts[-1]
    top = parts[0] if len(parts) > 1 else ""
    return not (
        name in ("setup.py", "noxfile.py")
        or name.startswith("example")
        or _NON_LIBRARY_DIRS.intersection(parts[:-1])
        or top in _NON_LIBRARY_TOPS
    )


def _policy_drops(
    repo: SourceRepository, candidates: list[Candidate], keep: Collection[str]
) -> tuple[list[Candidate], list[Drop]]:
    """The default drops of :data:`KEEP_OPTIONS` not in ``keep``."""
    defined = _defined_names(repo) if "single-statement" not in keep else set()
    bodies = _body_counts(repo) if "duplicates" not in keep else Counter()
    kept: list[Candidate] = []
    drops: list[Drop] = []
    for candidate in candidates:
        reason = None
        if "non-library" not in keep and not is_library_path(candidate.file):
            reason = "not library code"
        elif "single-statement" not in keep and _single_statement(candidate, defined):
            reason = "single-statement body"
        elif "duplicates" not in keep and bodies[_normalized_body(candidate.source)] > 1:
            reason = "body appears elsewhere in the repository"
        if reason is None:
            kept.append(candidate)
        else:
            drops.append(Drop(candidate.file, candidate.qualname, "extract", reason))
    return kept, drops


_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)


def _defined_names(repo: SourceRepository) -> set[str]:
    """Names of every function and class the repository defines."""
    return {name for path in repo.python_files for name in _DEFINED.findall(repo.files[path])}


def _single_statement(candidate: Candidate, defined: set[str]) -> bool:
    """One statement, no branch, and no call into the repository's own functions or classes."""
    if candidate.body_statements != 1 or candidate.branches:
        return False
    try:
        tree = parse_python(dedent_code(candidate.source))
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if called in defined and called != candidate.name:
                return False
    return True


def _normalized_body(source: str) -> str:
    """A function's body as a syntax tree, docstring left out and parameters renamed by
    position ('' when it does not parse)."""
    try:
        tree = parse_python(dedent_code(source))
    except (SyntaxError, ValueError):
        return ""
    function = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    return "" if function is None else _body_dump(function)


def _body_dump(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return ""
    args = function.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    renamed = {name: f"_p{i}" for i, name in enumerate(names)}
    module = ast.Module(body=body, type_ignores=[])
    text = ast.dump(module, annotate_fields=False, include_attributes=False)
    for name, placeholder in renamed.items():
        text = text.replace(f"Name('{name}',", f"Name('{placeholder}',")
    return text


def _body_counts(repo: SourceRepository) -> Counter[str]:
    """How many functions of the repository have each normalized body."""
    counts: Counter[str] = Counter()
    for path in repo.python_files:
        try:
            tree = parse_python(repo.files[path])
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dumped = _body_dump(node)
                if dumped:
                    counts[dumped] += 1
    return counts


def select_candidates(candidates: list[Candidate], limit: int, seed: int = 0) -> list[Candidate]:
    """At most ``limit`` candidates (every one for ``limit`` 0), chosen deterministically
    (in their given order).

    Functions and methods (every kind defined in a class) get half the places each, a
    group with fewer candidates leaving its places to the other (RepoST samples both).
    Within a group, candidates with a docstring come first; among equals, a weighted
    random order with weight ``1 + min(branches, 8)`` (Efraimidis-Spirakis keys drawn
    from ``random.Random(seed)`` in the given order): richer functions are likelier to
    be picked without the choice becoming the same few giants every time.
    """
    if limit <= 0 or len(candidates) <= limit:
        return list(candidates)
    rng = random.Random(seed)
    keys = {c.key: rng.random() ** (1.0 / (1 + min(c.branches, 8))) for c in candidates}
    functions = [c for c in candidates if c.class_name is None]
    methods = [c for c in candidates if c.class_name is not None]
    take_functions = min(len(functions), max(limit // 2, limit - len(methods)))
    take_methods = min(len(methods), limit - take_functions)

    def best(group: list[Candidate], count: int) -> list[Candidate]:
        return sorted(group, key=lambda c: (c.docstring is None, -keys[c.key]))[:count]

    chosen = {c.key for c in best(functions, take_functions) + best(methods, take_methods)}
    return [c for c in candidates if c.key in chosen]


def extract_candidates(
    repo: SourceRepository,
    *,
    max_candidates: int = 30,
    seed: int = 0,
    keywords: Mapping[str, tuple[str, ...]] = DEFAULT_EXCLUDE_KEYWORDS,
    index: RepositoryIndex | None = None,
    keep: Collection[str] = (),
) -> tuple[list[Candidate], list[Drop], ExtractStats]:
    """Find the candidate functions and methods of ``repo``.

    Args:
        repo: the ingested repository; its files are parsed, never imported.
        max_candidates: the per-repository cap (see :func:`select_candidates`).
        seed: seed of the choice under the cap.
        keywords: category -> keywords whose presence in a function's code drops it.
        index: the repository's :func:`~gym_repost.construct.dependencies.build_index`,
            when the caller has it: its ``ast`` parse of every file is reused instead of
            parsing again.
        keep: which of :data:`KEEP_OPTIONS` to keep rather than drop.

    Returns:
        The candidates in file and line order, the drops (one per function left out, or
        one per file ``ast`` rejects) and the statistics.
    """
    started = time.perf_counter()
    stats = ExtractStats(python_files=len(repo.python_files))
    with garbage_collector_paused():
        candidates, drops = _scan_repository(repo, keywords, index, stats)
        candidates, policy_drops = _policy_drops(repo, candidates, keep)
    drops += policy_drops
    stats.kept_before_cap = len(candidates)
    kept = select_candidates(candidates, max_candidates, seed)
    chosen = {c.key for c in kept}
    drops.extend(
        Drop(c.file, c.qualname, "extract", "over the per-repository cap") for c in candidates if c.key not in chosen
    )
    stats.kept = len(kept)
    stats.dropped = dict(Counter(d.reason for d in drops))
    stats.seconds = time.perf_counter() - started
    log.info(
        "extract %s: %d functions, %d candidates (%d before the cap)",
        repo.name,
        stats.functions_seen,
        stats.kept,
        stats.kept_before_cap,
    )
    return kept, drops, stats
