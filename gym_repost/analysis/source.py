"""Find, cut out and re-indent functions in Python source text.

Everything here works on text and keeps it byte-for-byte outside the part it changes:
comments and formatting survive, and lines inside multi-line string literals are never
re-indented (re-indenting them would change the strings' values).
"""

from __future__ import annotations

import ast
import io
import symtable
import tokenize
from dataclasses import dataclass

from gym_repost.analysis.parsing import parse_python


@dataclass(frozen=True)
class FunctionSpan:
    """Where a function sits in a source text (1-based, inclusive line numbers)."""

    qualname: str
    name: str
    class_name: str | None
    start: int
    """First line, decorators included."""
    def_line: int
    """The line holding ``def``."""
    end: int
    """Last line of the body."""
    body_start: int
    """First line of the body after the docstring (``end + 1`` when the body is only a
    docstring)."""
    indent: str
    """Leading whitespace of the ``def`` line."""
    docstring: str | None
    is_async: bool
    node: ast.FunctionDef | ast.AsyncFunctionDef


def string_continuation_lines(code: str) -> set[int]:
    """1-based numbers of lines that start inside a multi-line string literal.

    Falls back to an empty set when the text does not tokenize.
    """
    inside: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
            elif getattr(tokenize, "FSTRING_MIDDLE", None) == tok.type and tok.end[0] > tok.start[0]:
                inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return set()
    return inside


def dedent_code(code: str) -> str:
    """Remove the common leading whitespace of code lines, leaving string interiors alone."""
    lines = code.split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    if not first[:1].isspace():  # nothing in common (a string's interior never comes first)
        return code
    protected = string_continuation_lines(code)
    candidates = [ln for i, ln in enumerate(lines, 1) if i not in protected and ln.strip()]
    if not candidates:
        return code
    prefix = candidates[0][: len(candidates[0]) - len(candidates[0].lstrip())]
    for ln in candidates[1:]:
        while prefix and not ln.startswith(prefix):
            prefix = prefix[:-1]
    if not prefix:
        return code
    out = []
    for i, ln in enumerate(lines, 1):
        if i in protected or not ln.startswith(prefix):
            out.append(ln if i in protected else ln.lstrip(" \t") if not ln.strip() else ln)
        else:
            out.append(ln[len(prefix) :])
    return "\n".join(out)


def indent_code(code: str, indent: str) -> str:
    """Prefix every non-blank code line with ``indent`` (string interiors untouched)."""
    if not indent:
        return code
    protected = string_continuation_lines(code)
    return "\n".join(
        ln if (i in protected or not ln.strip()) else indent + ln for i, ln in enumerate(code.split("\n"), 1)
    )


_BLOCKS = (ast.If, ast.With, ast.AsyncWith, ast.Try, ast.For, ast.AsyncFor, ast.While)


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a block, looking inside ``if``/``with``/``try``/loops (not defs)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, _BLOCKS) or type(node).__name__ == "TryStar":
            for field in ("body", "orelse", "finalbody"):
                out.extend(_statements(getattr(node, field, [])))
            for handler in getattr(node, "handlers", []):
                out.extend(_statements(handler.body))
    return out


def _walk_named(
    body: list[ast.stmt], parts: list[str], owner: str | None = None
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None] | None:
    """Follow ``parts`` through classes (and functions) to the last matching def."""
    head, rest = parts[0], parts[1:]
    match = None
    for node in _statements(body):
        if getattr(node, "name", None) != head:
            continue
        if not rest and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            match = (node, owner)
        elif rest and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found = _walk_named(node.body, rest, head if isinstance(node, ast.ClassDef) else None)
            if found is not None:
                match = found
    return match


def _docstring_end(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int | None:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return None


def find_function(source: str, qualname: str, tree: ast.Module | None = None) -> FunctionSpan | None:
    """Locate ``qualname`` (``func`` or ``Class.method``) in ``source``.

    When a name is defined more than once, the last definition wins (as at run time).
    Returns None when the source does not parse or the function is absent.
    """
    if tree is None:
        try:
            tree = parse_python(source)
        except (SyntaxError, ValueError):
            return None
    found = _walk_named(tree.body, qualname.split("."))
    if found is None:
        return None
    node, class_name = found
    lines = source.split("\n")
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    def_text = lines[node.lineno - 1]
    doc_end = _docstring_end(node)
    body_start = (doc_end + 1) if doc_end is not None else node.body[0].lineno
    if doc_end is not None and len(node.body) > 1:
        body_start = node.body[1].lineno
    return FunctionSpan(
        qualname=qualname,
        name=node.name,
        class_name=class_name,
        start=start,
        def_line=node.lineno,
        end=node.end_lineno or node.lineno,
        body_start=body_start,
        indent=def_text[: len(def_text) - len(def_text.lstrip())],
        docstring=ast.get_docstring(node, clean=True),
        is_async=isinstance(node, ast.AsyncFunctionDef),
        node=node,
    )


def function_source(source: str, span: FunctionSpan) -> str:
    """The function's text, decorators included, dedented."""
    lines = source.split("\n")[span.start - 1 : span.end]
    return dedent_code("\n".join(lines))


def signature_text(source: str, span: FunctionSpan) -> str:
    """The ``def`` header as written (possibly several lines), dedented, ending with ``:``."""
    first_body = span.node.body[0]
    lines = source.split("\n")
    if first_body.lineno > span.def_line:
        header = lines[span.def_line - 1 : first_body.lineno - 1]
        while header and not header[-1].rstrip().endswith(":"):
            header.pop()
        if header:
            return dedent_code("\n".join(header)).rstrip()
    stub = ast.FunctionDef(
        name=span.node.name,
        args=span.node.args,
        body=[ast.Pass()],
        decorator_list=[],
        returns=span.node.returns,
        type_comment=None,
        type_params=[],  # Python 3.12's field, ignored by 3.11
    )  # type: ignore[call-arg]
    prefix = "async " if span.is_async else ""
    return prefix + ast.unparse(ast.fix_missing_locations(stub)).split("\n")[0]


def decorators_text(span: FunctionSpan) -> list[str]:
    """Decorator expressions (without ``@``), outermost first."""
    return [ast.unparse(d) for d in span.node.decorator_list]


def replace_body(source: str, span: FunctionSpan, placeholder: list[str]) -> str:
    """Return ``source`` with the function's body (after its docstring) replaced.

    ``placeholder`` lines are indented like the body. Signature, decorators and the
    docstring stay as they were (a docstring on the ``def`` line itself is dropped).
    """
    lines = source.split("\n")
    first = span.node.body[0]
    if first.lineno == span.def_line:
        # one-line body: cut the def line at the start of the body
        cut = lines[span.def_line - 1].encode("utf-8")[: first.col_offset].decode("utf-8").rstrip()
        head = lines[span.start - 1 : span.def_line - 1] + [cut]
        body = [span.indent + "    " + p for p in placeholder]
        return "\n".join(lines[: span.start - 1] + head + body + lines[span.end :])
    body_indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
    doc_end = _docstring_end(span.node)
    keep_until = doc_end if doc_end is not None else first.lineno - 1
    return "\n".join(lines[:keep_until] + [body_indent + p for p in placeholder] + lines[span.end :])


def _reads_only_the_module_level_name(code: str, span: FunctionSpan) -> bool:
    """Whether every scope of the function that reads its name reads the module-level one,
    by Python's own scoping (:mod:`symtable`): none binds it (a parameter, an assignment, a
    loop or comprehension variable, a nested ``def``) nor assigns it as a global."""
    try:
        module = symtable.symtable(code, "<candidate>", "exec")
    except (SyntaxError, ValueError):
        return False
    tables = [t for t in module.get_children() if t.get_name() == span.name and t.get_lineno() == span.def_line]
    reads = []
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        if span.name in table.get_identifiers():
            symbol = table.lookup(span.name)
            if symbol.is_referenced() or symbol.is_assigned():
                reads.append(symbol.is_global() and not symbol.is_assigned())
    return bool(reads) and all(reads)


def rename_definition(code: str, span: FunctionSpan, new_name: str, class_name: str | None = None) -> str:
    """Rename the ``def`` of ``span`` and the references to it inside its own body.

    For a function, bare references to its name (recursion) are renamed, unless some scope
    of its body binds that name itself: then none is (``total = 0 ... return total`` must
    keep returning the local). For a method (``class_name`` given, or known from the span),
    ``self.name``, ``cls.name`` and ``ClassName.name``. A bare name inside a method means a
    module-level function or a builtin, so it is left alone. This keeps a candidate's
    recursion inside the candidate. (That alone would not keep a candidate from the original:
    the harness removes the original from the script the candidate runs in, see
    ``harness.candidate``.)
    """
    class_name = class_name or span.class_name
    encoded = span.name.encode("utf-8")
    lines = code.split("\n")
    def_line = lines[span.def_line - 1].encode("utf-8")
    name_at = def_line.find(encoded, def_line.find(b"def", span.node.col_offset) + 3)
    edits = [(span.def_line, name_at, name_at + len(encoded))]
    owners = {"self", "cls", class_name}
    body = span.node.body
    code_from = 1 if ast.get_docstring(span.node, clean=False) is not None else 0
    named = code_from < len(body) and span.name in "\n".join(lines[body[code_from].lineno - 1 : span.end])
    if not named or (class_name is None and not _reads_only_the_module_level_name(code, span)):
        body = []  # no reference (one in the docstring is none), or some scope's name is its own
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if (
            class_name is None
            and isinstance(node, ast.Name)
            and node.id == span.name
            and isinstance(node.ctx, ast.Load)
        ):
            edits.append((node.lineno, node.col_offset, node.end_col_offset or 0))
        elif (
            class_name is not None
            and isinstance(node, ast.Attribute)
            and node.attr == span.name
            and isinstance(node.value, ast.Name)
            and node.value.id in owners
        ):
            end = node.end_col_offset or 0
            edits.append((node.end_lineno or node.lineno, end - len(encoded), end))
    for line_no, col, end in sorted(edits, reverse=True):
        raw = lines[line_no - 1].encode("utf-8")
        lines[line_no - 1] = (raw[:col] + new_name.encode("utf-8") + raw[end:]).decode("utf-8")
    return "\n".join(lines)
