"""Stage 3, local dependencies: resolution across modules, fragments, order, shims, clashes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_repost.construct.dependencies import (
    RepositoryIndex,
    bound_names,
    build_index,
    code_names,
    resolve_reference,
    slice_dependencies,
)
from gym_repost.construct.extract import KEEP_OPTIONS, extract_candidates
from gym_repost.construct.sandboxing import sandbox_script
from gym_repost.construct.stages import Candidate, DependencySlice, Drop, SandboxedScript, SourceRepository
from gym_repost.context import parse_context

GEO = {
    "geo/__init__.py": """\
        from .core import scale_all as public_scale
        from .shapes import *
        """,
    "geo/constants.py": """\
        FACTOR = 3
        UNITS = {"m": 1}
        UNITS["km"] = 1000
        LIMIT = FACTOR * 10
        """,
    "geo/util.py": """\
        import math


        def clamp(x, low, high):
            return max(low, min(high, x))


        def unused(x):
            return math.floor(x) + 1
        """,
    "geo/core.py": """\
        from . import util
        from .constants import FACTOR as F, LIMIT, UNITS


        def scale(v, unit="m"):
            return util.clamp(v * F * UNITS[unit], 0, LIMIT)


        def scale_all(values):
            \"\"\"Scale every value.\"\"\"
            out = []
            for v in values:
                out.append(scale(v) if v else 0)
            return out
        """,
    "geo/shapes.py": """\
        from dataclasses import dataclass, field

        from geo.base import Shape, registered


        @registered
        @dataclass
        class Square(Shape):
            side: float = 1.0
            tags: list = field(default_factory=list)

            def area(self):
                return self.side ** 2

            def describe(self):
                \"\"\"Name and area.\"\"\"
                return f"{self.label()}: {self.area()}" if self.side else "empty"

            def unrelated(self):
                return sorted(self.tags)
        """,
    "geo/base.py": """\
        REGISTRY = []


        def registered(cls):
            REGISTRY.append(cls.__name__)
            return cls


        class Shape:
            kind = "shape"

            def __repr__(self):
                return f"<{self.kind}>"

            def label(self):
                return self.kind.title()

            def never(self):
                return self.missing_helper()
        """,
    "app/__init__.py": "",
    "app/report.py": """\
        import geo
        from geo import public_scale


        def normalize(text):
            return text.strip().lower()


        def report(values):
            \"\"\"Scaled values, as text.\"\"\"
            return normalize(" ".join(str(v) for v in public_scale(values)))


        def square_text(side):
            return geo.shapes.Square(side).describe()
        """,
    "app/fmt.py": """\
        from app.report import report


        def normalize(items):
            return sorted(items)


        def summary(values):
            return report(normalize(values))
        """,
}


def repository(files: dict[str, str]) -> SourceRepository:
    return SourceRepository(
        name="t",
        version=None,
        source="test",
        root=Path("/nonexistent"),
        files={k: textwrap.dedent(v) for k, v in files.items()},
    )


def sliced(files: dict[str, str], key: str) -> DependencySlice | Drop:
    repo = repository(files)
    candidates, _, _ = extract_candidates(repo, max_candidates=1000, keep=KEEP_OPTIONS)
    target = next(c for c in candidates if c.key == key)
    return slice_dependencies(build_index(repo), target)


def ok(result: DependencySlice | Drop) -> DependencySlice:
    assert isinstance(result, DependencySlice), result
    return result


def layout(result: DependencySlice) -> list[tuple[str, str, str]]:
    return [(f.file, f.name, f.kind) for f in result.fragments]


def test_names_across_modules_aliases_reexports_and_mutations() -> None:
    result = ok(sliced(GEO, "app/fmt.py::summary"))
    assert layout(result) == [
        ("geo/util.py", "clamp", "function"),
        ("geo/constants.py", "FACTOR", "assign"),
        ("geo/constants.py", "UNITS", "assign"),
        ("geo/constants.py", "UNITS", "assign"),  # UNITS["km"] = 1000 comes with UNITS
        ("geo/constants.py", "LIMIT", "assign"),
        ("geo/core.py", "scale", "function"),
        ("geo/core.py", "scale_all", "function"),
        ("app/report.py", "normalize_report", "function"),
        ("app/report.py", "report", "function"),
        ("app/fmt.py", "normalize", "function"),
        ("app/fmt.py", "summary", "function"),
    ]
    # public_scale is a re-export through geo/__init__.py; F an alias; both used at call time
    assert result.shims == ["F = FACTOR", "public_scale = scale_all"]
    # two normalize functions: the target's module keeps its name, the other is renamed
    assert result.renamed == {"app.report.normalize": "normalize_report"}
    report = next(f for f in result.fragments if f.name == "report")
    assert 'normalize_report(" ".join(' in report.source
    # util.clamp in a fragment other than the target reads the definition directly
    scale = next(f for f in result.fragments if f.name == "scale")
    assert scale.source == 'def scale(v, unit="m"):\n    return clamp(v * F * UNITS[unit], 0, LIMIT)'
    assert (result.standalone, result.external_imports, result.third_party) == (False, [], [])


def test_the_target_reads_a_module_through_a_namespace() -> None:
    result = ok(sliced(GEO, "geo/core.py::scale"))
    assert [f.name for f in result.fragments] == ["clamp", "FACTOR", "UNITS", "UNITS", "LIMIT", "scale"]
    assert result.fragments[-1].source == (
        'def scale(v, unit="m"):\n    return util.clamp(v * F * UNITS[unit], 0, LIMIT)'
    )
    assert result.external_imports == ["import types"]
    assert result.shims == ["util = types.SimpleNamespace(clamp=clamp)", "F = FACTOR"]
    assert result.context == (
        "```python\n## geo/util.py\ndef clamp(x, low, high):\n    return max(low, min(high, x))\n```\n\n"
        '```python\n## geo/constants.py\nFACTOR = 3\n\n\nUNITS = {"m": 1}\n\n\nUNITS["km"] = 1000\n\n\n'
        "LIMIT = FACTOR * 10\n```\n\n"
        "```python\n## geo/core.py\nfrom . import util\nfrom .constants import FACTOR as F, LIMIT, UNITS\n\n\n"
        'def scale(v, unit="m"):\n    return util.clamp(v * F * UNITS[unit], 0, LIMIT)\n```\n'
    )
    assert list(parse_context(result.context)) == ["geo/util.py", "geo/constants.py", "geo/core.py"]


def test_a_method_keeps_its_class_its_bases_and_what_it_reaches() -> None:
    result = ok(sliced(GEO, "geo/shapes.py::Square.describe"))
    assert layout(result) == [
        ("geo/base.py", "REGISTRY", "assign"),
        ("geo/base.py", "registered", "function"),
        ("geo/base.py", "Shape", "class"),
        ("geo/shapes.py", "Square", "class"),
    ]
    shape, square = result.fragments[2].source, result.fragments[3].source
    # dunders stay, label is reached through self.label(), never is not reached
    assert "def __repr__" in shape and "def label" in shape and "def never" not in shape
    assert square.startswith(
        "@registered\n@dataclass\nclass Square(Shape):\n    side: float = 1.0\n"
        "    tags: list = field(default_factory=list)\n"
    )
    assert "def area" in square and "def describe" in square and "def unrelated" not in square
    assert result.external_imports == ["from dataclasses import dataclass", "from dataclasses import field"]
    assert not result.standalone
    alone = ok(sliced(GEO, "geo/base.py::Shape.label"))
    assert alone.standalone and layout(alone) == [("geo/base.py", "Shape", "class")]


def test_a_module_attribute_chain_in_the_target() -> None:
    result = ok(sliced(GEO, "app/report.py::square_text"))
    assert [f.name for f in result.fragments] == ["REGISTRY", "registered", "Shape", "Square", "square_text"]
    assert result.shims == ["geo = types.SimpleNamespace(shapes=types.SimpleNamespace(Square=Square))"]


def test_a_shim_needed_at_import_time_is_placed_before_its_user() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/deco.py": """\
            def tag(func):
                func.tagged = True
                return func
            """,
        "pkg/api.py": """\
            from pkg import deco
            from pkg.deco import tag as mark

            @mark
            def first(x):
                y = x + 1
                return y

            @deco.tag
            def second(x):
                y = first(x)
                return y * 2
            """,
    }
    result = ok(sliced(files, "pkg/api.py::second"))
    assert [(f.name, f.kind, f.source) for f in result.fragments] == [
        ("tag", "function", "def tag(func):\n    func.tagged = True\n    return func"),
        ("deco", "import", "deco = types.SimpleNamespace(tag=tag)"),
        ("mark", "import", "mark = tag"),
        ("first", "function", "@mark\ndef first(x):\n    y = x + 1\n    return y"),
        ("second", "function", "@deco.tag\ndef second(x):\n    y = first(x)\n    return y * 2"),
    ]
    assert result.shims == [] and result.external_imports == ["import types"]


def test_definition_time_uses_come_first_and_call_time_uses_may_come_later() -> None:
    files = {
        "m.py": """\
            def user(x=None):
                return helper(x) + LATER

            def helper(x):
                return [x, DEFAULT]

            DEFAULT = compute()
            LATER = 1

            def compute():
                value = 41
                return value + 1
            """,
    }
    result = ok(sliced(files, "m.py::user"))
    # DEFAULT waits for compute; the rest keeps the file's order
    assert [f.name for f in result.fragments] == ["user", "helper", "LATER", "compute", "DEFAULT"]


def test_a_loop_at_module_level_reads_what_it_binds() -> None:
    files = {
        "m.py": """\
        TABLE = {}
        for i in range(3):
            TABLE[i] = i * i
        del i

        def lookup(k):
            return TABLE.get(k, -1) + 0
        """
    }
    result = ok(sliced(files, "m.py::lookup"))
    assert [f.source.split("\n")[0] for f in result.fragments] == ["TABLE = {}", "for i in range(3):", "def lookup(k):"]


def test_an_unresolvable_name_is_a_drop() -> None:
    files = {"m.py": "def f(x):\n    y = undefined_helper(x)\n    return y\n"}
    drop = sliced(files, "m.py::f")
    assert drop == Drop("m.py", "f", "dependencies", "unresolved name", "m.py:2: undefined_helper")


def test_importing_from_a_module_that_does_not_parse_is_a_drop() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/broken.py": "def g(:\n    pass\n",
        "pkg/user.py": "from pkg.broken import g\n\n\ndef f(x):\n    y = g(x)\n    return y\n",
    }
    repo = repository(files)
    index = build_index(repo)
    assert list(index.rejected) == ["pkg/broken.py"]
    candidates, _, _ = extract_candidates(repo, keep=KEEP_OPTIONS)
    drop = slice_dependencies(index, next(c for c in candidates if c.qualname == "f"))
    assert isinstance(drop, Drop) and (drop.reason, drop.detail) == ("unresolved name", "pkg/user.py:5: g")


def test_the_target_meaning_two_things_is_a_name_clash() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/fast.py": "class Node:\n    pass\n",
        "pkg/tree.py": """\
            class Node:
                def copy(self):
                    twin = Node()
                    return twin

            try:
                from pkg.fast import Node
            except ImportError:
                pass
            """,
    }
    drop = sliced(files, "pkg/tree.py::Node.copy")
    assert isinstance(drop, Drop) and drop.reason == "name clash"
    assert drop.detail == "Node of the target means two things"


def test_external_imports_that_clash_are_renamed() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from json import loads\n\n\ndef read(text):\n    data = loads(text)\n    return data\n",
        "pkg/b.py": """\
            from pickle import loads
            from pkg.a import read

            def both(text, blob):
                first = read(text)
                return first, loads(blob)
            """,
    }
    result = ok(sliced(files, "pkg/b.py::both"))
    assert result.external_imports == ["from json import loads as loads_json", "from pickle import loads"]
    assert "data = loads_json(text)" in result.fragments[0].source
    assert result.renamed == {"loads": "loads_json"}


def test_spellings_of_one_external_module_are_one_name() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "import os.path\n\n\ndef f(p):\n    joined = os.path.join(p, 'x')\n    return joined\n",
        "pkg/b.py": "import os\nfrom pkg.a import f\n\n\ndef g(p):\n    return f(os.sep + p)\n",
    }
    result = ok(sliced(files, "pkg/b.py::g"))
    assert result.external_imports == ["import os", "import os.path"] and result.renamed == {}


def test_a_repository_name_shadowing_a_builtin_another_fragment_needs_is_renamed() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/io.py": "def open(path):\n    handle = path.upper()\n    return handle\n",
        "pkg/use.py": """\
            from pkg.io import open as fancy_open

            def both(path):
                with open(path) as fh:
                    return fh.read(), fancy_open(path)
            """,
    }
    result = ok(sliced(files, "pkg/use.py::both"))
    assert [f.name for f in result.fragments] == ["open_io", "both"]
    assert result.fragments[0].source.startswith("def open_io(path):")
    assert result.shims == ["fancy_open = open_io"]


def test_an_import_time_cycle_is_a_drop() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import B\n\n\nclass A(B):\n    def f(self):\n        x = 1\n        return x\n",
        "pkg/b.py": "from pkg.a import A\n\n\nclass B(A):\n    def g(self):\n        x = 2\n        return x\n",
    }
    drop = sliced(files, "pkg/a.py::A.f")
    assert isinstance(drop, Drop) and drop.reason == "import-time cycle"
    assert drop.detail == "pkg/a.py:4, pkg/b.py:4"


def test_an_import_fallback_takes_the_branch_whose_modules_exist() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/_pure.py": "def fast(x):\n    return x * 2\n",
        "pkg/m.py": """\
            try:
                from pkg._speedups import fast
            except ImportError:
                from pkg._pure import fast

            try:
                import numpy
            except ImportError:
                numpy = None

            def g(x):
                return fast(x) if numpy is None else numpy.double(x)
            """,
    }
    result = ok(sliced(files, "pkg/m.py::g"))
    assert [(f.name, f.kind) for f in result.fragments] == [
        ("fast", "function"),
        ("numpy", "import"),
        ("g", "function"),
    ]
    assert result.fragments[1].source.startswith("try:\n    import numpy\nexcept ImportError:")
    assert result.third_party == ["numpy"]


def test_a_conditional_repository_import_is_a_drop() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/x.py": "def h():\n    return 1\n",
        "pkg/m.py": "import sys\nif sys.version_info > (3,):\n    from pkg.x import h\n\n\ndef g():\n"
        "    v = h()\n    return v\n",
    }
    drop = sliced(files, "pkg/m.py::g")
    assert isinstance(drop, Drop) and drop.reason == "conditional repository import"


def test_typing_only_names_and_lazy_annotations() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/types_.py": "class Big:\n    pass\n",
        "pkg/m.py": """\
            from __future__ import annotations

            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.types_ import Big

            def size(item: Big) -> Big:
                count = len(item)
                return count
            """,
    }
    result = ok(sliced(files, "pkg/m.py::size"))
    assert result.standalone and [f.name for f in result.fragments] == ["size"]
    assert result.external_imports == ["from __future__ import annotations"]


def test_star_imports_globals_and_class_level_names() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/consts.py": "__all__ = ['A']\nA = 1\nB = 2\n",
        "pkg/m.py": """\
            from pkg.consts import *

            COUNTER = 0

            def bump():
                global COUNTER
                COUNTER += A
                return COUNTER

            class Box:
                def _get(self):
                    return self.v
                value = property(_get)

                def twice(self):
                    doubled = self.value * 2
                    return doubled
            """,
    }
    bump = ok(sliced(files, "pkg/m.py::bump"))
    assert [(f.file, f.name) for f in bump.fragments] == [
        ("pkg/consts.py", "A"),
        ("pkg/m.py", "COUNTER"),
        ("pkg/m.py", "bump"),
    ]
    twice = ok(sliced(files, "pkg/m.py::Box.twice"))
    assert "def _get(self)" in twice.fragments[0].source  # read by the class body itself


def test_methods_of_classes_derived_from_outside_code_are_all_kept() -> None:
    files = {
        "m.py": """\
        from datetime import timedelta, tzinfo

        class Fixed(tzinfo):
            def utcoffset(self, dt):
                return timedelta(hours=1)

            def dst(self, dt):
                return timedelta(0)

            def label(self):
                name = "UTC+1"
                return name
        """
    }
    result = ok(sliced(files, "m.py::Fixed.label"))
    assert "def utcoffset" in result.fragments[0].source and "def dst" in result.fragments[0].source


@pytest.mark.parametrize(
    "header",
    [
        "from collections.abc import MutableSet\n\nclass Base(MutableSet):",
        "import collections.abc\n\nclass Base(collections.abc.MutableSet):",
        "from typing import MutableSet, TypeVar\nT = TypeVar('T')\n\nclass Base(MutableSet[T]):",
    ],
)
def test_a_class_deriving_from_a_collection_abc_keeps_the_methods_the_abc_names(header: str) -> None:
    """ordered-set's ``OrderedSet(MutableSet[T], Sequence[T])``, sliced for ``add``, lost its
    ``discard`` (abstract in ``MutableSet``) and could not be instantiated: 323 inputs of 15
    candidates failed so. A subclass through a repository class keeps them too."""
    files = {
        "m.py": textwrap.indent(header, " " * 8)
        + """
            def __init__(self, items=()):
                self.items = list(items)

            def __contains__(self, key):
                return key in self.items

            def __iter__(self):
                return iter(self.items)

            def __len__(self):
                return len(self.items)

            def add(self, key):
                if key not in self.items:
                    self.items.append(key)

            def discard(self, key):
                if key in self.items:
                    self.items.remove(key)

            def unrelated(self):
                return 1


        class Tagged(Base):
            def tag(self):
                label = "tagged"
                return label + str(len(self))
        """
    }
    for key in ("m.py::Base.add", "m.py::Tagged.tag"):
        source = "\n".join(f.source for f in ok(sliced(files, key)).fragments)
        assert "def discard" in source and "def add" in source and "def unrelated" not in source, key
    from gym_repost.construct.sandboxing import assemble_module

    namespace: dict[str, object] = {}
    exec(compile(assemble_module(ok(sliced(files, "m.py::Base.add"))), "m", "exec"), namespace)
    made = namespace["Base"]([1])  # type: ignore[operator]
    made.add(2)
    assert list(made) == [1, 2]


def test_a_class_left_with_no_statement_gets_a_pass() -> None:
    files = {
        "m.py": """\
        class Tool:
            def run(self):
                return 1 + 1

        def use():
            return Tool()
        """
    }
    result = ok(sliced(files, "m.py::use"))
    assert result.fragments[0].source == "class Tool:\n    pass"


def test_scoping_rules_of_the_reference_walker() -> None:
    import ast

    code = textwrap.dedent("""\
        def f(a, b=DEFAULT, *, c: Hint = None):
            local = a + GLOBAL_ONE
            def inner():
                nonlocal local
                return local + CLOSURE_FREE
            squares = [x * FACTOR for x in range(a) if x > THRESHOLD]
            lam = lambda y, z=ZED: y + LAMBDA_FREE
            class K:
                attr = CLASS_LEVEL
                def m(self):
                    return attr
            return mod.sub.func(local), getattr(obj, "named"), getattr(obj, dynamic)
        """)
    names = code_names(ast.parse(code).body)
    found = {(r.name, r.attrs, r.import_time) for r in names.refs}
    assert found == {
        ("DEFAULT", (), True),
        ("Hint", (), True),
        ("GLOBAL_ONE", (), False),
        ("CLOSURE_FREE", (), False),
        ("FACTOR", (), False),
        ("THRESHOLD", (), False),
        ("ZED", (), False),
        ("LAMBDA_FREE", (), False),
        ("CLASS_LEVEL", (), False),
        ("attr", (), False),
        ("mod", ("sub", "func"), False),
        ("getattr", (), False),
        ("obj", (), False),
        ("dynamic", (), False),
        ("range", (), False),
    }
    assert {"sub", "func", "named"} <= names.attrs and names.dynamic_attributes
    lazy = code_names(ast.parse(code).body, lazy_annotations=True)
    assert "Hint" not in {r.name for r in lazy.refs}
    assert bound_names(
        ast.parse("a = 1\nfor b in c: pass\nimport d.e\nwith f as (g, h): del z\n").body, deletes=False
    ) == {"a", "b", "d", "g", "h"}


def test_resolution_follows_reexports(tmp_path: Path) -> None:
    index: RepositoryIndex = build_index(repository(GEO))
    resolution, used = resolve_reference(index, "app.report", "public_scale")
    assert (resolution.kind, resolution.module, resolution.name, used) == ("definition", "geo.core", "scale_all", 0)
    resolution, used = resolve_reference(index, "app.report", "geo", ("shapes", "Square", "area"))
    assert (resolution.kind, resolution.module, resolution.name, used) == ("definition", "geo.shapes", "Square", 2)
    resolution, _ = resolve_reference(index, "geo", "Square")  # through the star import
    assert (resolution.kind, resolution.module) == ("definition", "geo.shapes")
    resolution, _ = resolve_reference(index, "geo.shapes", "dataclass")
    assert resolution.kind == "external" and resolution.binding is not None
    assert resolution.binding.statement == "from dataclasses import dataclass"


@pytest.mark.parametrize("key", ["geo/base.py::registered", "geo/util.py::unused", "app/report.py::report"])
def test_slices_are_deterministic(key: str) -> None:
    assert sliced(GEO, key) == sliced(GEO, key)


def test_every_candidate_of_a_repository_gets_a_slice_or_a_reason() -> None:
    repo = repository(GEO)
    candidates, _, _ = extract_candidates(repo, keep=KEEP_OPTIONS)
    index = build_index(repo)
    results = [slice_dependencies(index, c) for c in candidates]
    assert all(isinstance(r, DependencySlice) for r in results)
    target: Candidate
    for result in results:
        assert isinstance(result, DependencySlice)
        target = result.target
        top = target.qualname.split(".")[0]
        assert any(f.name == top and f.file == target.file for f in result.fragments)


def test_names_from_an_external_star_import() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/flags.py": "from os import *\n",
        "pkg/m.py": """\
            from os.path import *
            from pkg import flags

            def where(p):
                return join(p, "x"), flags.sep
            """,
    }
    result = ok(sliced(files, "pkg/m.py::where"))
    assert result.external_imports == ["import types", "from os import *", "from os.path import *"]
    assert result.shims == ["flags = types.SimpleNamespace(sep=sep)"]


def test_a_package_importing_its_own_submodule() -> None:
    # ``from . import keys`` in pkg/__init__.py binds the submodule: the attribute it
    # would otherwise be looked up as is that very import (cachetools, sqlparse, attrs)
    files = {
        "pkg/__init__.py": """\
            from . import keys
            from pkg import tokens as T


            def cached(func, key=keys.hashkey):
                return (key(func), T.Name)
            """,
        "pkg/keys.py": "def hashkey(*args):\n    return tuple(args)\n",
        "pkg/tokens.py": "Name = 'name'\n",
        "pkg/user.py": """\
            from pkg import keys, tokens


            def describe(x):
                return (keys.hashkey(x), tokens.Name)
            """,
    }
    index = build_index(repository(files))
    resolution, used = resolve_reference(index, "pkg.user", "keys", ("hashkey",))
    assert (resolution.kind, resolution.module, resolution.name, used) == ("definition", "pkg.keys", "hashkey", 1)
    result = ok(sliced(files, "pkg/__init__.py::cached"))
    assert [(f.name, f.kind) for f in result.fragments] == [
        ("hashkey", "function"),
        ("Name", "assign"),
        ("keys", "import"),  # read while the module is imported: placed before its user
        ("cached", "function"),
    ]
    assert result.fragments[2].source == "keys = types.SimpleNamespace(hashkey=hashkey)"
    assert result.shims == ["T = types.SimpleNamespace(Name=Name)"]
    assert ok(sliced(files, "pkg/user.py::describe")).shims == [
        "keys = types.SimpleNamespace(hashkey=hashkey)",
        "tokens = types.SimpleNamespace(Name=Name)",
    ]


def test_python_2_builtins_in_branches_python_3_never_takes() -> None:
    # the module reads them only where Python 2 runs: the script fails (or not) as it does
    files = {
        "compat.py": """\
            import sys

            if sys.version_info < (3,):
                _range = xrange
                string_types = (basestring,)
            else:
                _range = range
                string_types = (str,)

            try:
                from collections.abc import Mapping
            except ImportError:
                from collections import Mapping
                str = unicode


            def evens(n, label):
                assert isinstance(label, string_types)
                return [str(i) for i in _range(0, n, 2) if not isinstance(i, Mapping)]
            """,
    }
    result = ok(sliced(files, "compat.py::evens"))
    assert [f.name for f in result.fragments] == ["Mapping", "_range", "evens"]
    script = sandbox_script(result)
    assert isinstance(script, SandboxedScript), script
    namespace: dict[str, object] = {}
    exec(compile(script.module, "<script>", "exec"), namespace)
    assert namespace["evens"](5, "x") == ["0", "2", "4"]  # type: ignore[operator]


ENGINE = {
    "eng/__init__.py": "",
    "eng/stack.py": """
        class Stack:
            def __init__(self):
                self.steps = []

            def enable(self):
                self.steps.append("grouping")

            def unused(self):
                return 0
        """,
    "eng/build.py": """
        def build(stack, options):
            if options.get("group"):
                stack.enable()
            return stack
        """,
    "eng/clash.py": """
        Stack = 3

        def build(stack, options):
            return stack, Stack
        """,
}


def test_classes_the_traced_inputs_name_are_put_in_the_script() -> None:
    repo = repository(ENGINE)
    candidates, _, _ = extract_candidates(repo, max_candidates=1000, keep=KEEP_OPTIONS)
    index = build_index(repo)
    target = next(c for c in candidates if c.key == "eng/build.py::build")
    # the target never names Stack: without the traced inputs' names the script lacks it
    assert layout(ok(slice_dependencies(index, target))) == [("eng/build.py", "build", "function")]
    result = ok(slice_dependencies(index, target, [("Stack", "eng.stack"), ("Stack.enable", "eng.stack")]))
    assert sorted(layout(result)) == [("eng/build.py", "build", "function"), ("eng/stack.py", "Stack", "class")]
    stack = next(f.source for f in result.fragments if f.name == "Stack")
    assert "def enable" in stack and "def __init__" in stack and "def unused" not in stack
    assert result.standalone is False
    # a name that means something else in the script: the slice is the one without it
    clash = next(c for c in candidates if c.key == "eng/clash.py::build")
    plain = ok(slice_dependencies(index, clash))
    assert ok(slice_dependencies(index, clash, [("Stack", "eng.stack")])) == plain
    # a module or name the repository does not have is left out
    assert ok(slice_dependencies(index, target, [("Nope", "eng.stack"), ("Stack", "no.such")])) == ok(
        slice_dependencies(index, target)
    )
