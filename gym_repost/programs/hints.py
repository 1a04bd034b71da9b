"""What a target's source says about its inputs (standard library only; also runs in the sandbox).

Read statically from the function's AST: per parameter its kind, default and annotation
(as source text), and *usage tags* inferred from how the body uses it (``p.split(`` ->
``str``, ``p + 1`` -> ``number``, ``for x in p`` -> ``iter``, ``p.items()`` -> ``dict``,
``p == "x"`` -> the literal ``"x"``, ``isinstance(p, list)`` -> ``list``...); the same for
the attributes a method reads from ``self``; and the body's constants, good seeds for
every string and number.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field

STR_METHODS = frozenset(
    {
        "lower",
        "upper",
        "strip",
        "lstrip",
        "rstrip",
        "split",
        "rsplit",
        "splitlines",
        "startswith",
        "endswith",
        "replace",
        "format",
        "encode",
        "isdigit",
        "isalpha",
        "isspace",
        "title",
        "capitalize",
        "casefold",
        "center",
        "ljust",
        "rjust",
        "zfill",
        "partition",
        "rpartition",
        "find",
        "rfind",
        "translate",
        "expandtabs",
        "isupper",
        "islower",
        "isalnum",
        "isnumeric",
        "isdecimal",
        "isidentifier",
        "swapcase",
        "removeprefix",
        "removesuffix",
        "format_map",
        "join",
    }
)
LIST_METHODS = frozenset({"append", "extend", "insert", "pop", "remove", "sort", "reverse"})
DICT_METHODS = frozenset({"items", "keys", "values", "get", "setdefault", "update", "popitem"})
SET_METHODS = frozenset(
    {"add", "discard", "union", "intersection", "difference", "issubset", "issuperset", "symmetric_difference"}
)
SEQUENCE_FUNCTIONS = frozenset(
    {
        "len",
        "sorted",
        "reversed",
        "enumerate",
        "zip",
        "list",
        "tuple",
        "set",
        "frozenset",
        "iter",
        "map",
        "filter",
        "next",
        "any",
        "all",
        "dict",
    }
)
NUMBER_FUNCTIONS = frozenset(
    {
        "abs",
        "round",
        "range",
        "chr",
        "hex",
        "oct",
        "bin",
        "divmod",
        "pow",
        "math.floor",
        "math.ceil",
        "math.sqrt",
        "math.log",
        "math.isnan",
        "math.isinf",
        "math.isfinite",
        "math.exp",
        "math.fabs",
        "math.trunc",
    }
)
NUMBERS_FUNCTIONS = frozenset({"sum", "min", "max", "statistics.mean", "statistics.median"})
STR_FUNCTIONS = frozenset(
    {
        "ord",
        "re.match",
        "re.search",
        "re.sub",
        "re.split",
        "re.findall",
        "re.fullmatch",
        "re.finditer",
        "os.path.join",
        "os.path.splitext",
        "os.path.basename",
        "os.path.dirname",
        "unicodedata.normalize",
        "unicodedata.category",
        "textwrap.dedent",
        "textwrap.wrap",
    }
)


@dataclass
class Usage:
    """How the body uses one parameter (or one attribute of ``self``)."""

    tags: set[str] = field(default_factory=set)
    literals: list[str] = field(default_factory=list)
    """Sources of constants it is compared with (numbers with their neighbours)."""
    attributes: dict[str, Usage] = field(default_factory=dict)
    """Attributes read on it that are not methods of a known built-in type."""
    arity: int | None = None
    """Number of positional arguments it is called with, when it is called."""
    types: list[str] = field(default_factory=list)
    """Type names from ``isinstance(p, ...)`` checks."""
    keys: list[str] = field(default_factory=list)
    """Sources of constant keys it is subscripted with (``p["name"]``)."""

    def add_literal(self, source: str) -> None:
        """Remember a literal once."""
        if source not in self.literals:
            self.literals.append(source)


@dataclass
class Param:
    """One parameter of the target."""

    name: str
    kind: str
    """``positional_only``, ``positional``, ``var_positional``, ``keyword_only`` or ``var_keyword``."""
    default: str | None = None
    annotation: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass
class TargetHints:
    """Everything the target's source says about its inputs."""

    params: list[Param]
    self_attributes: dict[str, Usage] = field(default_factory=dict)
    constants: list[str] = field(default_factory=list)
    """Sources of the body's string and number constants (docstring excluded)."""


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def parameters(args: ast.arguments) -> list[Param]:
    """The parameters of a ``def``, in order, with defaults and annotations as source."""
    positional = [(a, "positional_only") for a in args.posonlyargs] + [(a, "positional") for a in args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [Param(a.arg, kind, _source(d), _source(a.annotation)) for (a, kind), d in zip(positional, defaults)]
    if args.vararg:
        params.append(Param(args.vararg.arg, "var_positional", None, _source(args.vararg.annotation)))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append(Param(a.arg, "keyword_only", _source(d), _source(a.annotation)))
    if args.kwarg:
        params.append(Param(args.kwarg.arg, "var_keyword", None, _source(args.kwarg.annotation)))
    return params


def _source(node: ast.AST | None) -> str | None:
    return None if node is None else ast.unparse(node)


def analyse(function: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> TargetHints:
    """Hints for a function (``is_method``: its first parameter is ``self``/``cls``, left out)."""
    params = parameters(function.args)
    receiver = params.pop(0).name if is_method and params and params[0].kind != "var_positional" else None
    by_name = {p.name: p.usage for p in params}
    self_attributes: dict[str, Usage] = {}
    parents = _parent_map(function)
    for node in ast.walk(function):
        subject = _subject(node, by_name, receiver, self_attributes)
        if subject is not None:
            _classify(node, parents, subject)
    _propagate_literals(function, parents, by_name)
    return TargetHints(params=params, self_attributes=self_attributes, constants=body_constants(function))


def _propagate_literals(function: ast.AST, parents: dict[int, ast.AST], by_name: dict[str, Usage]) -> None:
    """Literals compared with a local computed from parameters (``total = score + curve``)
    are good values for those parameters too."""
    derived: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            sources = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id in by_name}
            if sources and node.targets[0].id not in by_name:
                derived.setdefault(node.targets[0].id, set()).update(sources)
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in derived:
            scratch = Usage()
            _classify(node, parents, scratch)
            for name in sorted(derived[node.id]):
                for literal in scratch.literals:
                    by_name[name].add_literal(literal)


def _parent_map(root: ast.AST) -> dict[int, ast.AST]:
    return {id(child): parent for parent in ast.walk(root) for child in ast.iter_child_nodes(parent)}


def _subject(
    node: ast.AST, by_name: dict[str, Usage], receiver: str | None, self_attributes: dict[str, Usage]
) -> Usage | None:
    """The usage record ``node`` refers to: a parameter, or ``self.x``."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return by_name.get(node.id)
    if (
        receiver
        and isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == receiver
        and isinstance(node.ctx, ast.Load)
    ):
        return self_attributes.setdefault(node.attr, Usage())
    return None


def _classify(node: ast.AST, parents: dict[int, ast.AST], usage: Usage) -> None:
    parent = parents.get(id(node))
    if parent is None:
        return
    if isinstance(parent, ast.Attribute) and parent.value is node:
        _classify_attribute(parent, parents, usage)
    elif isinstance(parent, ast.Subscript) and parent.value is node:
        _classify_subscript(parent, usage)
    elif isinstance(parent, ast.Call):
        _classify_call(node, parent, usage)
    elif isinstance(parent, ast.BinOp):
        _classify_binop(node, parent, usage)
    elif isinstance(parent, ast.UnaryOp):
        usage.tags.add("truthy" if isinstance(parent.op, ast.Not) else "number")
    elif isinstance(parent, ast.Compare):
        _classify_compare(node, parent, usage)
    elif isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.BoolOp, ast.Assert)):
        usage.tags.add("truthy")
    elif isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
        usage.tags.add("iter")
    elif isinstance(parent, (ast.Starred, ast.YieldFrom)):
        usage.tags.add("iter")
    elif isinstance(parent, ast.keyword) and parent.arg is None:
        usage.tags.add("dict")


def _classify_attribute(parent: ast.Attribute, parents: dict[int, ast.AST], usage: Usage) -> None:
    attr = parent.attr
    for names, tag in ((STR_METHODS, "str"), (LIST_METHODS, "list"), (DICT_METHODS, "dict"), (SET_METHODS, "set")):
        if attr in names:
            usage.tags.add(tag)
            return
    if attr == "decode":
        usage.tags.add("bytes")
        return
    if attr in ("count", "index"):
        usage.tags.update(("str", "list"))
        return
    usage.tags.add("object")
    inner = usage.attributes.setdefault(attr, Usage())
    _classify(parent, parents, inner)


def _classify_subscript(parent: ast.Subscript, usage: Usage) -> None:
    index = parent.slice
    if isinstance(index, ast.Slice):
        usage.tags.update(("str", "list"))
    elif isinstance(index, ast.Constant) and isinstance(index.value, str):
        usage.tags.add("dict")
        if repr(index.value) not in usage.keys:
            usage.keys.append(repr(index.value))
    elif isinstance(index, ast.Constant) and isinstance(index.value, int):
        usage.tags.update(("list", "str") if isinstance(parent.ctx, ast.Load) else ("list",))
    else:
        usage.tags.add("list" if isinstance(parent.ctx, ast.Load) else "dict")


def _classify_call(node: ast.AST, call: ast.Call, usage: Usage) -> None:
    if call.func is node:
        usage.tags.add("callable")
        usage.arity = len(call.args)
        return
    name = dotted_name(call.func) or ""
    first = bool(call.args) and call.args[0] is node
    if name == "isinstance" and first and len(call.args) == 2:
        usage.types.extend(_type_names(call.args[1]))
    elif name in SEQUENCE_FUNCTIONS:
        usage.tags.add("iter")
    elif name in NUMBERS_FUNCTIONS:
        usage.tags.add("numbers")
    elif name in NUMBER_FUNCTIONS:
        usage.tags.add("number")
    elif name in ("int", "float", "Decimal", "decimal.Decimal"):
        usage.tags.update(("numeric_str", "number"))
    elif name in STR_FUNCTIONS or name.endswith(".join"):
        usage.tags.add("str" if not name.endswith(".join") else "iter")
    elif name == "callable":
        usage.tags.add("callable")
    elif name in ("hasattr", "getattr") and first and len(call.args) > 1:
        key = call.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            usage.attributes.setdefault(key.value, Usage())


def _type_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _type_names(elt)]
    name = dotted_name(node)
    return [name.split(".")[-1]] if name else []


def _classify_binop(node: ast.AST, parent: ast.BinOp, usage: Usage) -> None:
    other = parent.right if parent.left is node else parent.left
    repeated = isinstance(other, (ast.List, ast.ListComp, ast.Tuple, ast.JoinedStr)) or (
        isinstance(other, ast.Constant) and isinstance(other.value, (str, bytes))
    )
    if isinstance(parent.op, ast.Mult) and repeated:
        usage.tags.add("number")
    elif isinstance(parent.op, ast.Mod) and parent.left is node:
        usage.tags.update(("str", "number"))
    elif isinstance(other, ast.Constant) and isinstance(other.value, str) or isinstance(other, ast.JoinedStr):
        usage.tags.add("str")
    elif isinstance(other, (ast.List, ast.ListComp)):
        usage.tags.add("list")
    elif isinstance(other, ast.Tuple):
        usage.tags.add("tuple")
    elif isinstance(parent.op, (ast.Add, ast.Mult)) and not _is_number(other):
        usage.tags.update(("number", "str"))
    else:
        usage.tags.add("number")


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _classify_compare(node: ast.AST, parent: ast.Compare, usage: Usage) -> None:
    operands = [parent.left, *parent.comparators]
    position = next(i for i, n in enumerate(operands) if n is node)
    for i, op in enumerate(parent.ops):
        if i == position:
            _compared(op, operands[i + 1], usage, left=True)
        elif i + 1 == position:
            _compared(op, operands[i], usage, left=False)


def _compared(op: ast.cmpop, other: ast.AST, usage: Usage, left: bool) -> None:
    if isinstance(op, (ast.Is, ast.IsNot)):
        if isinstance(other, ast.Constant) and other.value is None:
            usage.tags.add("none")
        return
    if isinstance(op, (ast.In, ast.NotIn)):
        if not left:
            usage.tags.add("container")
            if isinstance(other, ast.Constant) and isinstance(other.value, str):
                usage.tags.add("str")
        elif isinstance(other, (ast.Tuple, ast.List, ast.Set)):
            for elt in other.elts:
                _literal(elt, usage)
        elif isinstance(other, ast.Constant) and isinstance(other.value, str):
            usage.tags.add("str")
            for char in dict.fromkeys(other.value[:20]):
                usage.add_literal(repr(char))
        return
    _literal(other, usage)
    if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and not _literal_type(other):
        usage.tags.add("number")


def _literal_type(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and node.value is not None and not isinstance(node.value, bool):
        return {int: "int", float: "float", str: "str", bytes: "bytes"}.get(type(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_number(node.operand):
        return "number"
    return None


def _literal(node: ast.AST, usage: Usage) -> None:
    """Remember a constant the parameter is compared with (numbers with neighbours)."""
    kind = _literal_type(node)
    if kind is None:
        if isinstance(node, ast.Constant):
            usage.add_literal(repr(node.value))
        return
    value = ast.literal_eval(node)
    usage.tags.add({"int": "number", "float": "number", "number": "number"}.get(kind, kind))
    if isinstance(value, int):
        for neighbour in (value, value - 1, value + 1):
            usage.add_literal(repr(neighbour))
    elif isinstance(value, str) and len(value) == 1:
        for code in (ord(value), ord(value) - 1, ord(value) + 1):
            if 0 <= code < 0x110000:
                usage.add_literal(repr(chr(code)))
    else:
        usage.add_literal(repr(value))


def body_constants(function: ast.FunctionDef | ast.AsyncFunctionDef, limit: int = 40) -> list[str]:
    """Sources of the str, bytes and number constants of the body, docstring excluded."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    found: dict[str, None] = {}
    for stmt in body:
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Constant)
                and type(node.value) in (str, bytes, int, float)
                and len(repr(node.value)) <= 60
            ):
                found.setdefault(repr(node.value))
    return list(found)[:limit]


CALLEE_DEPTH = 2
"""How deep :func:`reachable_literals` follows calls into the module's own functions."""
TABLE_ITEMS = 64
"""Most items of one module-level table whose contents become literals."""


def reachable_literals(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    module_tree: ast.Module,
    namespace: dict[str, object],
    owner: type | None = None,
    limit: int = 80,
) -> list[str]:
    """Sources of the literals the target works with, beyond its own body's constants.

    The constants of the module's functions and methods it calls (two calls deep), and the
    contents of the tables it reads: module-level names and attributes of its class
    holding a string, a number or a small container of them (a mapping's keys and values;
    a translation table's code points as characters). An escape function whose body only
    says ``s.translate(_TABLE)`` gets the characters it escapes.
    """
    functions = _module_functions(module_tree)
    found: dict[str, None] = {}
    seen: set[int] = {id(function)}
    frontier = [function]
    for depth in range(CALLEE_DEPTH + 1):
        following = []
        for node in frontier:
            if depth:
                for source in body_constants(node, limit):
                    found.setdefault(source)
            for name in _read_names(node):
                for source in _table_literals(namespace.get(name, _ABSENT)):
                    found.setdefault(source)
            if owner is not None:
                for name in _self_attributes(node):
                    for source in _table_literals(_class_attribute(owner, name)):
                        found.setdefault(source)
            for name in _called_names(node):
                for callee in functions.get(name, ()):
                    if id(callee) not in seen:
                        seen.add(id(callee))
                        following.append(callee)
        frontier = following
    return list(found)[:limit]


_ABSENT = object()


def _module_functions(tree: ast.Module) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Functions of the module and methods of its classes, by name."""
    out: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.setdefault(item.name, []).append(item)
    return out


def _called_names(function: ast.AST) -> list[str]:
    """Names called as ``f(...)`` or ``self.f(...)`` / ``cls.f(...)`` / ``Class.f(...)``."""
    names = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                names.append(node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                names.append(node.func.attr)
    return list(dict.fromkeys(names))


def _read_names(function: ast.AST) -> list[str]:
    return list(
        dict.fromkeys(n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    )


def _self_attributes(function: ast.AST) -> list[str]:
    return list(
        dict.fromkeys(
            n.attr
            for n in ast.walk(function)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
        )
    )


def _class_attribute(owner: type, name: str) -> object:
    for klass in getattr(owner, "__mro__", ()):
        if name in vars(klass):
            return vars(klass)[name]
    return _ABSENT


def _table_literals(value: object) -> list[str]:
    """Sources of a table's literals: the value itself, or a small container's items."""
    if _is_plain(value):
        return [repr(value)] if len(repr(value)) <= 60 else []
    if isinstance(value, dict):
        items = list(value.items())[:TABLE_ITEMS]
        out = []
        for key, item in items:
            if type(key) is int and 0 <= key < 0x110000 and isinstance(item, (str, type(None))):
                out.append(repr(chr(key)))  # a str.translate table
            out.extend(repr(v) for v in (key, item) if _is_plain(v) and len(repr(v)) <= 60)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
        out = []
        for item in items[:TABLE_ITEMS]:
            if isinstance(item, tuple) and len(item) <= 4:
                out.extend(repr(v) for v in item if _is_plain(v) and len(repr(v)) <= 60)
            elif _is_plain(item) and len(repr(item)) <= 60:
                out.append(repr(item))
        return out
    return []


def _is_plain(value: object) -> bool:
    return type(value) in (str, bytes, int, float)


def line_literals(
    function: ast.AST, line: int, lines: list[str], namespace: dict[str, object], owner: type | None = None
) -> list[str]:
    """Sources of the literals that bear on one line of the target: those written on it and
    on the headers of the statements around it (the ``if`` it is in, the ``for`` over a
    table), and the contents of the tables those lines read (module names, ``self.X``).

    ``line`` and ``lines`` are the module's (1-based line, its text split in lines).
    """
    numbers = {line}
    for node in ast.walk(function):
        body = getattr(node, "body", None)
        end = getattr(node, "end_lineno", None)
        if isinstance(node, ast.stmt) and isinstance(body, list) and body and end is not None:
            if node.lineno <= line <= end:
                numbers.update(range(node.lineno, max(node.lineno, body[0].lineno - 1) + 1))
    found: dict[str, None] = {}
    tables: list[object] = []
    for number in sorted(numbers):
        if not 0 < number <= len(lines):
            continue
        tokens = _tokens(lines[number - 1])
        for i, token in enumerate(tokens):
            if token.type in (tokenize.STRING, tokenize.NUMBER) and len(token.string) <= 60:
                found.setdefault(token.string)
            elif token.type != tokenize.NAME:
                continue
            after_dot = i > 0 and tokens[i - 1].string == "."
            if after_dot and i > 1 and tokens[i - 2].string in ("self", "cls") and owner is not None:
                tables.append(_class_attribute(owner, token.string))
            elif not after_dot and token.string in namespace:
                tables.append(namespace[token.string])
    for table in tables:
        if table is not _ABSENT and not callable(table) and not isinstance(table, type(ast)):
            for source in _table_literals(table):
                found.setdefault(source)
    return list(found)


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
