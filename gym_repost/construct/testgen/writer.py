"""Write the equivalence test for chosen inputs: helpers, ``test_{name}()``, ``__main__`` block.

Each input becomes one assertion comparing the outcome of the original with the
outcome of ``{name}_new_implementation``::

    assert (_gr_outcome(slugify, 'Hello World', separator='_')
            == _gr_outcome(slugify_new_implementation, 'Hello World', separator='_'))

Both sides write the input out in full, so the original and the candidate never share a
mutable argument or instance: each side builds its own. Methods are called on two equal
instances (``Counter(5).add`` vs ``Counter(5).add_new_implementation``) and
``_gr_outcome`` compares the instance's state after the call; properties are read through
a lambda that receives the instance as an argument. Inputs that needed seeding use
``_gr_seeded``.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from gym_repost.analysis.parsing import parse_python
from gym_repost.sandbox.programs import program_source

HEADER = "# Equivalence tests written by gym-repost's test generation (deterministic builder)."
LINE_LIMIT = 100


@dataclass(frozen=True)
class ChosenInput:
    """One input of the test, as source text (see :class:`~.trace.RecordedCall`)."""

    args: str
    kwargs: str
    instance: str | None = None
    origin: str = "search"
    seeded: bool = False


@lru_cache(maxsize=1)
def runtime_helpers() -> str:
    """The code of :mod:`gym_repost.programs.runtime` without its docstring."""
    text = program_source("runtime")
    tree = parse_python(text)
    first = tree.body[1] if ast.get_docstring(tree) is not None else tree.body[0]
    return "\n".join(text.split("\n")[first.lineno - 1 :]).strip("\n") + "\n"


def call_arguments(args: str, kwargs: str) -> str:
    """``1, 'a', key=2`` from the sources ``(1, 'a')`` and ``{'key': 2}``.

    Element texts are kept as written; keys that cannot be written as ``key=`` (not
    identifiers, or keywords such as ``class``, which pyparsing's ``with_attribute(**attrs)``
    is called with) go in ``**{...}``.

    Raises:
        ValueError: ``args`` is not a tuple display or ``kwargs`` not a dict display.
    """
    args_node = parse_python(args, mode="eval").body
    kwargs_node = parse_python(kwargs, mode="eval").body
    if not isinstance(args_node, ast.Tuple) or not isinstance(kwargs_node, ast.Dict):
        raise ValueError(f"not an argument tuple and keyword dict: {args!r}, {kwargs!r}")
    parts = [_segment(args, e) for e in args_node.elts]
    rest = []
    for key, value in zip(kwargs_node.keys, kwargs_node.values):
        text = _segment(kwargs, value)
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and _keyword_name(key.value):
            parts.append(f"{key.value}={text}")
        elif key is not None:
            rest.append(f"{_segment(kwargs, key)}: {text}")
    if rest:
        parts.append("**{" + ", ".join(rest) + "}")
    return ", ".join(parts)


def _keyword_name(name: str) -> bool:
    """``name`` can be written as a keyword argument, ``name=...``."""
    return name.isidentifier() and not keyword.iskeyword(name)


def _segment(source: str, node: ast.AST) -> str:
    return ast.get_source_segment(source, node) or ast.unparse(node)


def _receiver(instance: str) -> str:
    """The instance source, parenthesised when an attribute access would bind wrongly."""
    node = parse_python(instance, mode="eval").body
    return instance if isinstance(node, (ast.Call, ast.Name, ast.Attribute, ast.Subscript)) else f"({instance})"


def call_sides(name: str, kind: str, class_name: str | None, item: ChosenInput) -> tuple[str, str]:
    """The two ``_gr_outcome(...)`` expressions of one assertion (original, candidate)."""
    observe = "_gr_seeded" if item.seeded else "_gr_outcome"
    new = f"{name}_new_implementation"
    if kind == "property":
        instance = item.instance or "None"
        return (
            f"{observe}(lambda _gr_self: _gr_self.{name}, {instance})",
            f"{observe}(lambda _gr_self: _gr_self.{new}, {instance})",
        )
    if kind == "method":
        owner = _receiver(item.instance or "None")
        callee, callee_new = f"{owner}.{name}", f"{owner}.{new}"
    elif kind in ("staticmethod", "classmethod"):
        callee, callee_new = f"{class_name}.{name}", f"{class_name}.{new}"
    else:
        callee, callee_new = name, new
    arguments = call_arguments(item.args, item.kwargs)
    tail = f", {arguments}" if arguments else ""
    return f"{observe}({callee}{tail})", f"{observe}({callee_new}{tail})"


def assertion(left: str, right: str) -> str:
    """One assert line (two lines when long), indented for a function body."""
    one_line = f"    assert {left} == {right}"
    if len(one_line) <= LINE_LIMIT:
        return one_line
    return f"    assert ({left}\n            == {right})"


def write_tests(name: str, kind: str, class_name: str | None, inputs: Sequence[ChosenInput]) -> str:
    """The code appended to the sandboxed module: helpers, ``test_{name}``, ``__main__``.

    Args:
        name: the target's name.
        kind: ``function``, ``method``, ``staticmethod``, ``classmethod`` or ``property``.
        class_name: the class (dotted for nested classes) of a method, else None.
        inputs: one per assertion.
    """
    origins = sorted({i.origin for i in inputs})
    doc = f'    """{name} and {name}_new_implementation agree on {len(inputs)} inputs ({", ".join(origins)})."""'
    body = [assertion(*call_sides(name, kind, class_name, item)) for item in inputs]
    return "\n".join(
        [
            HEADER,
            "",
            runtime_helpers(),
            "",
            f"def test_{name}():",
            doc,
            *body,
            "",
            "",
            'if __name__ == "__main__":',
            f"    test_{name}()",
            "",
        ]
    )
