"""Candidate values for a target's parameters, as Python source (standard library only).

Runs in the sandbox next to the sandboxed module: a :class:`PoolBuilder` turns the
:mod:`~gym_repost.programs.hints` of a parameter (annotation, default, usage
tags, compared literals, ``isinstance`` checks, attributes read) and the body's constants
into an ordered list of value sources, most promising first. Values are always source
text, so whatever an input is built from can be written into the test as it is.
Classes of the module are built by calling them with values for their ``__init__``;
enums by member; a few standard-library value types from fixed examples. A required
parameter nothing can be built for is reported as *unbuildable*.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import typing
from collections.abc import Iterable

try:
    from . import hints as _hints
except ImportError:  # in the sandbox, shipped as a top-level module
    import _gym_repost_hints as _hints  # type: ignore[no-redef,import-not-found]

INT = ["0", "1", "-1", "2", "3", "7", "10", "-5", "100", "255", "1000", "12345", "-1000000", "2 ** 40"]
FLOAT = [
    "0.0",
    "1.5",
    "-2.25",
    "0.1",
    "3.14159",
    "100.0",
    "1e-07",
    "1e+16",
    "-0.0",
    "0.5",
    "float('inf')",
    "float('nan')",
]
STR = [
    "''",
    "'a'",
    "'abc'",
    "'Hello World'",
    "'hello_world'",
    "'HelloWorld'",
    "'hello-world'",
    "'  padded text  '",
    "'x y z'",
    "'123'",
    "'-4.5'",
    "'A'",
    "'ÄÖÜ äöü ñ'",
    "'日本語'",
    "'a\\nb'",
    "'\\t'",
    "'CamelCaseString'",
    "'snake_case_string'",
    "'The quick brown fox'",
    "'a.b.c'",
    "'a/b/c.txt'",
    "'%s'",
    "'{}'",
    "'x' * 40",
    "'MiXeD cAsE'",
    "'1,234.5'",
]
BYTES = ["b''", "b'abc'", "b'\\x00\\xff'", "b'Hello World'"]
BOOL = ["True", "False"]
CALLABLE = [
    "lambda x: x",
    "str",
    "len",
    "bool",
    "lambda *a: a",
    "lambda x: x * 2",
    "abs",
    "lambda x: not x",
    "str.upper",
    "lambda a, b: a + b",
]
ANY = ["1", "'abc'", "[1, 2, 3]", "None", "0", "''", "-2", "2.5", "True", "{'a': 1}", "(1, 'x')", "[]"]
NUMERIC_STR = ["'42'", "'-3'", "'3.5'", "'0'", "'abc'", "''", "' 7 '", "'1e3'"]
STDLIB = {
    "Decimal": [
        "__import__('decimal').Decimal('1.5')",
        "__import__('decimal').Decimal('0')",
        "__import__('decimal').Decimal('-2.75')",
        "__import__('decimal').Decimal('100')",
    ],
    "date": [
        "__import__('datetime').date(2020, 1, 31)",
        "__import__('datetime').date(1999, 12, 31)",
        "__import__('datetime').date(2024, 2, 29)",
    ],
    "datetime": [
        "__import__('datetime').datetime(2020, 1, 31, 12, 30, 5)",
        "__import__('datetime').datetime(1999, 12, 31, 23, 59, 59)",
        "__import__('datetime').datetime(2024, 2, 29)",
    ],
    "timedelta": [
        "__import__('datetime').timedelta(0)",
        "__import__('datetime').timedelta(seconds=90)",
        "__import__('datetime').timedelta(days=3, hours=4)",
        "__import__('datetime').timedelta(days=-1)",
        "__import__('datetime').timedelta(days=400)",
        "__import__('datetime').timedelta(microseconds=1500)",
    ],
    "time": ["__import__('datetime').time(12, 30)", "__import__('datetime').time(0, 0, 1)"],
    "Fraction": ["__import__('fractions').Fraction(1, 3)", "__import__('fractions').Fraction(-5, 2)"],
    "Path": ["__import__('pathlib').PurePosixPath('a/b.txt')", "__import__('pathlib').PurePosixPath('/tmp/x')"],
    "Pattern": ["__import__('re').compile('a+b')", "__import__('re').compile('[0-9]+')"],
}
STDLIB.update({"PurePath": STDLIB["Path"], "PosixPath": STDLIB["Path"], "PurePosixPath": STDLIB["Path"]})
SIMPLE = {
    "int": INT,
    "float": FLOAT + INT[:6],
    "complex": ["1j", "complex(1, -2)", "0j"],
    "str": STR,
    "bytes": BYTES,
    "bytearray": ["bytearray(b'abc')", "bytearray()"],
    "bool": BOOL,
    "None": ["None"],
    "NoneType": ["None"],
    "Any": ANY,
    "object": ANY,
    "Number": INT[:6] + FLOAT[:4],
    "Integral": INT,
    "Real": INT[:6] + FLOAT[:6],
    "Callable": CALLABLE,
    "type": ["int", "str", "list", "dict"],
}
SEQUENCES = {
    "list",
    "List",
    "Sequence",
    "MutableSequence",
    "Iterable",
    "Collection",
    "Iterator",
    "Reversible",
    "Generator",
    "deque",
}
MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict", "Counter"}
SETS = {"set", "Set", "frozenset", "FrozenSet", "AbstractSet", "MutableSet"}
TAGS = {
    "str": STR,
    "bytes": BYTES,
    "number": INT + FLOAT[:6],
    "numeric_str": NUMERIC_STR,
    "callable": CALLABLE,
    "bool": BOOL,
    "truthy": ["True", "False", "None", "0", "1", "''", "'x'", "[]"],
    "none": ["None"],
}
ATTRIBUTE_BAGS = {
    "Namespace": ("argparse", "__import__('argparse').Namespace"),
    "SimpleNamespace": ("types", "__import__('types').SimpleNamespace"),
}
"""Standard-library classes whose instances are plain attribute bags: built from the
attributes the body reads (``Namespace(bump='minor', version='1.2.3')``)."""
TAG_ORDER = ("str", "number", "numeric_str", "bytes", "callable", "bool", "truthy", "none")
"""Most telling values first: ``None`` and falsy values only after typed ones."""
MAX_POOL = 40


_BAG_CONSTRUCTORS = frozenset(c for _, c in ATTRIBUTE_BAGS.values())
STREAM_ATTRIBUTES = frozenset(n for n in dir(io.StringIO) if not n.startswith("_")) & frozenset(dir(io.BytesIO))
"""What a parameter used only through these is read by: a stream (``out.write(...)``)."""
STREAMS = [
    "__import__('io').StringIO()",
    "__import__('io').BytesIO()",
    "__import__('io').StringIO('a,b\\nc d\\n')",
    "__import__('io').BytesIO(b'a,b\\nc d\\n')",
]


class Unbuildable(Exception):
    """No value of the required kind can be written as source."""


def merge(groups: Iterable[list[str]], limit: int = MAX_POOL) -> list[str]:
    """Round-robin merge of ordered groups, without duplicates, at most ``limit`` items."""
    lists = [g for g in groups if g]
    found: dict[str, None] = {}
    for position in range(max((len(g) for g in lists), default=0)):
        for group in lists:
            if position < len(group):
                found.setdefault(group[position])
    return list(found)[:limit]


def sequence_of(elements: list[str], kind: str = "list") -> list[str]:
    """List (or tuple, set) sources built from element sources."""
    e = elements or INT[:4]
    picks = [[], e[:1], e[:3], [e[min(2, len(e) - 1)], e[0], e[min(1, len(e) - 1)]], e[:6]]
    out = []
    for items in picks:
        body = ", ".join(items)
        if kind == "tuple":
            out.append(f"({body},)" if len(items) == 1 else f"({body})")
        elif kind == "set":
            out.append(f"{{{body}}}" if items else "set()")
        else:
            out.append(f"[{body}]")
    return list(dict.fromkeys(out))


def mapping_of(keys: list[str], values: list[str]) -> list[str]:
    """Dict sources from key and value sources."""
    k, v = keys or STR[1:4], values or INT[:4]
    pairs = [(k[i % len(k)], v[(i + 1) % len(v)]) for i in range(4)]
    return [
        "{}",
        f"{{{pairs[0][0]}: {pairs[0][1]}}}",
        "{" + ", ".join(f"{a}: {b}" for a, b in dict(pairs).items()) + "}",
    ]


class PoolBuilder:
    """Value sources for parameters of functions of one module."""

    def __init__(
        self, namespace: dict[str, object], module_tree: ast.Module | None, constants: list[str], module_name: str
    ) -> None:
        self.namespace = namespace
        self.module_tree = module_tree
        self.constants = constants
        self.module_name = module_name
        self._classes: dict[int, list[str]] = {}

    def for_param(self, param: _hints.Param, depth: int = 0) -> list[str]:
        """Ordered value sources for one parameter (empty when nothing fits).

        Raises:
            Unbuildable: its annotation names a type no value source can be written for.
        """
        usage = param.usage
        typed = self.for_annotation(param.annotation, depth) if param.annotation else []
        bag = next((v[:-2] for v in typed if v.endswith("()") and v[:-2] in _BAG_CONSTRUCTORS), None)
        if bag is not None:
            typed = self._namespaces(usage, depth, bag) if usage.attributes else typed
        groups = [
            list(usage.literals),
            self._isinstance_values(usage, depth),
            typed,
            self._usage_values(usage, depth),
            self._constants_for(usage, typed),
        ]
        if param.default is not None:
            groups.append(self._like_default(param.default, bool(typed or usage.tags)))
        pool = merge(groups)
        return pool or list(ANY)

    def _isinstance_values(self, usage: _hints.Usage, depth: int) -> list[str]:
        groups = []
        for name in usage.types:
            try:
                groups.append(self.for_type_name(name, depth)[:4])
            except Unbuildable:
                continue
        return merge(groups)

    def _like_default(self, default: str, informed: bool) -> list[str]:
        """Values of the default's type (anything, when nothing else is known about it)."""
        try:
            value = ast.literal_eval(default)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return [] if informed else list(ANY)
        if value is None:
            return [] if informed else list(ANY)
        return self._for_value_type(type(value).__name__)

    def _for_value_type(self, name: str) -> list[str]:
        if name in SIMPLE:
            return list(SIMPLE[name])
        if name in ("list", "tuple", "set", "frozenset"):
            return sequence_of(INT[:4] + STR[1:3], "tuple" if name == "tuple" else name.replace("frozen", ""))
        if name == "dict":
            return mapping_of(STR[1:5], INT[:4])
        return list(ANY)

    def _constants_for(self, usage: _hints.Usage, typed: list[str]) -> list[str]:
        wanted: set[type] = set()
        tags = usage.tags | {t.lower() for t in usage.types}
        if tags & {"str", "container", "numeric_str"} or any(v.startswith(("'", '"')) for v in typed[:3]):
            wanted.add(str)
        if tags & {"number", "int", "float"} or any(v.lstrip("-").isdigit() for v in typed[:3]):
            wanted.update((int, float))
        return [c for c in self.constants_with_variants() if type(ast.literal_eval(c)) in wanted]

    def constants_with_variants(self) -> list[str]:
        """The body's constants, plus strings that contain them and numbers next to them."""
        out = []
        for source in self.constants:
            value = ast.literal_eval(source)
            out.append(source)
            if isinstance(value, str) and 0 < len(value) <= 12:
                out.extend((repr("ab" + value), repr(value + "cd"), repr(value.upper())))
            elif type(value) is int:
                out.extend((repr(value - 1), repr(value + 1)))
        return list(dict.fromkeys(out))

    def _usage_values(self, usage: _hints.Usage, depth: int) -> list[str]:
        tags = usage.tags
        groups = [list(TAGS[t]) for t in TAG_ORDER if t in tags]
        if tags & {"list", "iter", "numbers"}:
            groups.append(sequence_of(self._element_values(usage)))
        if "tuple" in tags:
            groups.append(sequence_of(INT[:4], "tuple"))
        if "set" in tags:
            groups.append(sequence_of(INT[:4] + STR[1:3], "set"))
        if "dict" in tags or usage.keys:
            groups.append(mapping_of(usage.keys or STR[1:5], INT[:4] + STR[1:3]))
        if "iter" in tags and not tags & {"list", "dict", "set"}:
            groups.append(["'abc'", "(1, 2, 3)", "range(4)", "iter([3, 1, 2])", "(x for x in 'ab')"])
        if "container" in tags:
            groups.append(["'abc def'", "['a', 'abc', 1]", "{'a': 1, 'abc': 2}"])
        if "callable" in tags:
            groups.append(self._callables(usage.arity))
        if usage.attributes and set(usage.attributes) <= STREAM_ATTRIBUTES:
            groups.append(list(STREAMS))
        if usage.attributes and depth < 2:
            groups.append(self._namespaces(usage, depth))
        return merge(groups)

    def _element_values(self, usage: _hints.Usage) -> list[str]:
        if "numbers" in usage.tags:
            return INT[:5] + FLOAT[1:3]
        strings = [c for c in self.constants if c.startswith(("'", '"'))]
        return merge([INT[:5], strings[:4] + STR[1:4]])

    def _callables(self, arity: int | None) -> list[str]:
        if arity == 0:
            return ["lambda: 1", "lambda: None", "list"]
        if arity == 2:
            return ["lambda a, b: a + b", "lambda a, b: (a, b)", "max", "lambda a, b: a"]
        if arity and arity > 2:
            return ["lambda *a: a", "lambda *a: len(a)"]
        return list(CALLABLE)

    def _namespaces(
        self, usage: _hints.Usage, depth: int, constructor: str = "__import__('types').SimpleNamespace"
    ) -> list[str]:
        """Attribute bags (``SimpleNamespace``) with the attributes the body reads."""
        variants = []
        for pick in range(3):
            fields = []
            for attr, inner in sorted(usage.attributes.items()):
                if not attr.isidentifier() or attr.startswith("__"):
                    continue
                values = self.for_param(_hints.Param(attr, "positional", usage=inner), depth + 1)
                fields.append(f"{attr}={values[pick % len(values)]}")
            variants.append(constructor + "(" + ", ".join(fields) + ")")
        return list(dict.fromkeys(variants))

    def for_annotation(self, annotation: str, depth: int = 0) -> list[str]:
        """Value sources for a type annotation written as source.

        Raises:
            Unbuildable: the annotation names a type nothing can be built for.
        """
        try:
            node = ast.parse(annotation, mode="eval").body
        except SyntaxError:
            return []
        return self._for_type_node(node, depth)

    def _for_type_node(self, node: ast.expr, depth: int) -> list[str]:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return self.for_annotation(node.value, depth)
            return ["None"] if node.value is None else []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return merge([self._for_type_node(node.left, depth), self._for_type_node(node.right, depth)])
        if isinstance(node, ast.Subscript):
            return self._for_generic(node, depth)
        name = _hints.dotted_name(node)
        return self.for_type_name(name, depth) if name else []

    def _for_generic(self, node: ast.Subscript, depth: int) -> list[str]:
        base = (_hints.dotted_name(node.value) or "").split(".")[-1]
        args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base == "Literal":
            return [ast.unparse(a) for a in args]
        if base in ("Optional", "Union"):
            return merge([["None"] if base == "Optional" else []] + [self._for_type_node(a, depth) for a in args])
        if base in ("Annotated", "ClassVar", "Final"):
            return self._for_type_node(args[0], depth)
        if base in ("Callable",):
            first = args[0] if args else None
            return self._callables(len(first.elts) if isinstance(first, ast.List) else None)
        if base in ("Type", "type"):
            return [ast.unparse(a) for a in args]
        inner = [
            self._for_type_node(a, depth + 1)[:6]
            for a in args
            if not isinstance(a, ast.Constant) or a.value is not Ellipsis
        ]
        return self._container(base, inner, args)

    def _container(self, base: str, inner: list[list[str]], args: list[ast.expr]) -> list[str]:
        if base in MAPPINGS:
            return mapping_of(inner[0] if inner else [], inner[1] if len(inner) > 1 else [])
        if base in SETS:
            return sequence_of(inner[0] if inner else [], "set")
        if (
            base in ("tuple", "Tuple")
            and len(args) > 1
            and not (isinstance(args[-1], ast.Constant) and args[-1].value is Ellipsis)
        ):
            rows = [[group[i % len(group)] for group in inner] for i in range(3)] if all(inner) else []
            return [f"({', '.join(r)},)" if len(r) == 1 else f"({', '.join(r)})" for r in rows]
        if base in ("tuple", "Tuple"):
            return sequence_of(inner[0] if inner else [], "tuple")
        if base in SEQUENCES:
            return sequence_of(inner[0] if inner else [])
        return self.for_type_name(base, 0)

    def for_type_name(self, name: str, depth: int = 0) -> list[str]:
        """Value sources for a type named in an annotation or an ``isinstance`` check.

        Raises:
            Unbuildable: the name is a class nothing can be built for.
        """
        short = name.split(".")[-1]
        if short in SIMPLE:
            return list(SIMPLE[short])
        if short in STDLIB:
            return list(STDLIB[short])
        if short in SEQUENCES or short in ("tuple", "Tuple"):
            return sequence_of(INT[:4] + STR[1:3], "tuple" if short in ("tuple", "Tuple") else "list")
        if short in MAPPINGS:
            return mapping_of(STR[1:5], INT[:4])
        if short in SETS:
            return sequence_of(INT[:4], "set")
        found = self._lookup(name)
        if isinstance(found, type):
            return self.for_class(found, depth, name)
        if typing.get_origin(found) is not None and depth < 3:
            return self.for_annotation(_annotation_source(found) or "", depth + 1)
        return []

    def _lookup(self, name: str) -> object | None:
        value: object = self.namespace
        for i, part in enumerate(name.split(".")):
            value = value.get(part) if i == 0 and isinstance(value, dict) else getattr(value, part, None)
            if value is None:
                return None
        return value

    def for_class(self, cls: type, depth: int = 0, name: str | None = None) -> list[str]:
        """Sources that build instances of ``cls``: enum members, or calls of the class.

        Args:
            cls: the class.
            depth: nesting of constructions (classes whose ``__init__`` takes classes).
            name: how the module names the class, when known (else its qualified name).

        Raises:
            Unbuildable: ``cls`` is neither defined in the module nor a known value type.
        """
        if issubclass(cls, enum.Enum):
            return [f"{name or cls.__qualname__}.{m.name}" for m in cls][:8]
        if cls.__module__ != self.module_name or "<locals>" in cls.__qualname__:
            if cls.__name__ in STDLIB:
                return list(STDLIB[cls.__name__])
            if cls.__name__ in ATTRIBUTE_BAGS and ATTRIBUTE_BAGS[cls.__name__][0] == cls.__module__:
                return [ATTRIBUTE_BAGS[cls.__name__][1] + "()"]
            raise Unbuildable(f"{cls.__module__}.{cls.__qualname__} objects cannot be written as source")
        if id(cls) not in self._classes:
            self._classes[id(cls)] = []  # a class whose __init__ needs itself: stop recursing
            self._classes[id(cls)] = self._constructions(cls, depth) if depth < 3 else []
        return self._classes[id(cls)]

    def _constructions(self, cls: type, depth: int) -> list[str]:
        params = self.constructor_params(cls)
        required = [p for p in params if p.default is None and p.kind in ("positional", "positional_only")]
        pools = {}
        for p in params:
            try:
                pools[p.name] = self.for_param(p, depth + 1)
            except Unbuildable:
                if p in required:
                    return []
        base = [pools[p.name][0] for p in required]
        out = [f"{cls.__qualname__}({', '.join(base)})"]
        for i, p in enumerate(required):
            for value in pools[p.name][1:4]:
                args = base[:i] + [value] + base[i + 1 :]
                out.append(f"{cls.__qualname__}({', '.join(args)})")
        for p in params:
            if p not in required and p.kind in ("positional", "keyword_only") and p.name in pools:
                out.append(f"{cls.__qualname__}({', '.join(base + [f'{p.name}={pools[p.name][0]}'])})")
        return list(dict.fromkeys(out))[:12]

    def constructor_params(self, cls: type) -> list[_hints.Param]:
        """Parameters of ``cls(...)`` with the usage hints of its ``__init__``."""
        init = self._init_node(cls)
        if init is not None:
            return _hints.analyse(init, is_method=True).params
        try:
            signature = inspect.signature(cls)
        except (TypeError, ValueError):
            return []
        hints = _type_hints(cls)
        return [
            _hints.Param(
                p.name,
                _KINDS[p.kind],
                None if p.default is p.empty else repr(p.default),
                _annotation_source(hints.get(p.name, p.annotation)),
            )
            for p in signature.parameters.values()
        ]

    def _init_node(self, cls: type) -> ast.FunctionDef | None:
        if self.module_tree is None or dataclasses.is_dataclass(cls):
            return None
        owner = next((k for k in cls.__mro__ if "__init__" in vars(k)), None)
        if owner is None or owner is object or owner.__module__ != self.module_name:
            return None
        node = find_def(self.module_tree, f"{owner.__qualname__}.__init__")
        return node if isinstance(node, ast.FunctionDef) else None


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}


def _type_hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


def _annotation_source(annotation: object) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last definition of ``qualname`` (``f``, ``C.m``, ``C.D.m``) at class level, or None."""
    body: list[ast.stmt] = tree.body
    parts = qualname.split(".")
    found: ast.AST | None = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = None
        for node in _flat(body):
            if isinstance(node, kinds) and node.name == part:
                found = node
        if found is None:
            return None
        body = getattr(found, "body", [])
    return found  # type: ignore[return-value]


def _flat(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements of a block, looking into ``if``/``try`` blocks (conditional definitions)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for block in (
                node.body,
                node.orelse,
                getattr(node, "finalbody", []),
                *[h.body for h in getattr(node, "handlers", [])],
            ):
                yield from _flat(block)
