"""Stage 2, extract: candidates, their measurements, every drop reason, the cap."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest

from gym_repost.analysis.source import dedent_code, find_function, function_source
from gym_repost.construct.extract import (
    extract_candidates,
    is_test_path,
    module_name,
    select_candidates,
)
from gym_repost.construct.stages import Candidate, SourceRepository

DEMO = Path(__file__).resolve().parents[2] / "tasks" / "demo" / "repo"


def repository(files: dict[str, str], root: Path = Path("/nonexistent")) -> SourceRepository:
    return SourceRepository(
        name="t", version=None, source=str(root), root=root, files={k: textwrap.dedent(v) for k, v in files.items()}
    )


def demo_repository() -> SourceRepository:
    files = {str(p.relative_to(DEMO)): p.read_text(encoding="utf-8") for p in DEMO.rglob("*") if p.is_file()}
    return SourceRepository(name="shopkit", version="1.0.0", source=str(DEMO), root=DEMO, files=files)


def by_qualname(candidates: list[Candidate]) -> dict[str, Candidate]:
    return {c.qualname: c for c in candidates}


SHAPES = '''\
"""Shapes."""
import math


def area(radius):
    """Area of a circle.

        Indented detail.
    """
    if radius < 0 or radius > 1e6:
        raise ValueError(radius)
    return math.pi * radius ** 2  # the formula
    # a trailing comment that is not part of the function


async def fetch_all(items,
                    limit=3) -> list:
    out = [i for i in items if i]
    for item in out[:limit]:
        await item
    return out


def chunks(seq, size):
    def inner():
        yield 0
    for start in range(0, len(seq), size):
        yield seq[start:start + size]


def not_a_generator(seq):
    def inner():
        yield 0
    return list(seq) if seq else []


class Circle:
    """A circle."""

    def __init__(self, r):
        self.r = r

    @staticmethod
    def unit_area():
        value = area(1)
        return value

    @classmethod
    def from_diameter(cls, d):
        radius = d / 2
        return cls(radius)

    @property
    def diameter(self):
        """Twice the radius."""
        d = 2 * self.r
        return d

    class Style:
        def describe(self, colour):
            label = colour.strip()
            return label.upper() if label else "none"
'''


def test_candidate_fields_are_measured_as_written() -> None:
    candidates, drops, stats = extract_candidates(repository({"pkg/shapes.py": SHAPES, "pkg/__init__.py": ""}))
    found = by_qualname(candidates)
    assert set(found) == {
        "area",
        "fetch_all",
        "chunks",
        "not_a_generator",
        "Circle.unit_area",
        "Circle.from_diameter",
        "Circle.diameter",
        "Circle.Style.describe",
    }
    area = found["area"]
    assert (area.module, area.kind, area.class_name) == ("pkg.shapes", "function", None)
    assert (area.start_line, area.def_line, area.end_line) == (5, 5, 12)  # trailing comment left out
    assert area.docstring == "Area of a circle.\n\nIndented detail."  # as inspect.cleandoc
    assert area.signature == "def area(radius):"
    assert area.source.splitlines()[-1] == "    return math.pi * radius ** 2  # the formula"
    # if + or = 2 branches; raise, if, return = 3 statements (docstring not counted)
    assert (area.branches, area.body_statements) == (2, 3)
    fetch = found["fetch_all"]
    assert fetch.is_async and not fetch.is_generator
    assert fetch.signature == "async def fetch_all(items,\n                    limit=3) -> list:"
    assert fetch.branches == 2  # the comprehension's if, the for loop
    assert found["chunks"].is_generator and not found["not_a_generator"].is_generator
    assert found["not_a_generator"].branches == 1  # the conditional expression
    assert found["Circle.unit_area"].kind == "staticmethod"
    assert found["Circle.from_diameter"].kind == "classmethod"
    diameter = found["Circle.diameter"]
    assert (diameter.kind, diameter.start_line, diameter.def_line) == ("property", 53, 54)
    assert diameter.decorators == ("property",)
    describe = found["Circle.Style.describe"]
    assert (describe.class_name, describe.kind) == ("Style", "method")
    assert [(d.qualname, d.reason) for d in drops] == [("Circle.__init__", "dunder method")]
    assert stats.functions_seen == 9 and stats.kept == stats.kept_before_cap == 8


def test_candidates_agree_with_find_function_on_the_demo_repository() -> None:
    repo = demo_repository()
    candidates, drops, stats = extract_candidates(repo, max_candidates=100, keep=("single-statement",))
    assert stats.kept == 33 and stats.functions_seen == 42
    assert Counter(d.reason for d in drops) == {"dunder method": 7, "trivial body": 1, "network keyword": 1}
    _, by_default, _ = extract_candidates(repo, max_candidates=100)
    assert Counter(d.reason for d in by_default)["single-statement body"] == 5
    for candidate in candidates:
        text = repo.files[candidate.file]
        span = find_function(text, candidate.qualname)
        assert span is not None, candidate.key
        assert (span.start, span.def_line, span.end) == (candidate.start_line, candidate.def_line, candidate.end_line)
        assert function_source(text, span) == dedent_code(candidate.source)
        assert span.docstring == candidate.docstring


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("pkg/sub/mod.py", "pkg.sub.mod"),
        ("src/pkg/sub/mod.py", "pkg.sub.mod"),
        ("pkg/__init__.py", "pkg"),
        ("scripts/tool.py", "tool"),
        ("pkg/nopkg/mod.py", "mod"),
    ],
)
def test_module_names(path: str, expected: str) -> None:
    files = {"pkg/__init__.py", "pkg/sub/__init__.py", "src/pkg/__init__.py", "src/pkg/sub/__init__.py", path}
    assert module_name(path, files) == expected


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/helpers.py", True),
        ("pkg/testing/fixtures.py", True),
        ("test/x.py", True),
        ("pkg/test_api.py", True),
        ("pkg/api_test.py", True),
        ("conftest.py", True),
        ("tests.py", True),  # unittest's modules: jsonpointer's and jsonpatch's suites
        ("ext_tests.py", True),
        ("test.py", True),
        ("pkg/testutils.py", False),
        ("pkg/contests.py", False),
        ("pkg/contest.py", False),
        ("latest/x.py", False),
    ],
)
def test_test_paths(path: str, is_test: bool) -> None:
    assert is_test_path(path) is is_test


DROPS = '''\
import os


def test_something():
    x = 1
    assert x


class TestThing:
    def check(self):
        value = 1
        return value + 1


class MyCase(unittest.TestCase):
    def helper(self):
        value = 1
        return value + 1


def stub():
    """Not written yet."""
    ...


def abstract(self):
    raise NotImplementedError("subclasses")


def getter(self):
    return self._value


def constant():
    return "x"


def one_call(x):
    return sorted(x)


class Holder:
    def __repr__(self):
        return "Holder()"

    def __mangled(self):
        value = 1
        return value

    @property
    def value(self):
        number = self._v * 2
        return number

    @value.setter
    def value(self, v):
        self._v = v
        self.changed = True


def twice(x):
    return x


def twice(x):
    doubled = x * 2
    return doubled


def uses_gpu(model):
    device = "cuda"
    return model.to(device)


def shells_out(cmd):
    """Never mind subprocess in the docstring."""
    # nor in a comment: subprocess
    return os.system(cmd)


def reads_input(prompt):
    answer = input(prompt)
    return answer.strip()


def parse_input(text):
    cleaned = text.strip()
    return cleaned


if os.name == "nt":
    def windows_only(path):
        parts = path.split("\\\\")
        return parts

'''


def test_every_drop_reason() -> None:
    candidates, drops, stats = extract_candidates(
        repository({"mod.py": DROPS, "tests/test_mod.py": "def helper(x):\n    y = x + 1\n    return y\n"}),
        keep=("single-statement",),  # one_call: a one-line body with a call (see the test above)
    )
    reasons = {(d.qualname, d.reason, d.detail) for d in drops}
    assert {c.qualname for c in candidates} == {"one_call", "twice", "parse_input"}
    assert reasons == {
        ("test_something", "test code", ""),
        ("TestThing.check", "test code", ""),
        ("MyCase.helper", "test code", ""),
        ("helper", "test code", ""),
        ("stub", "trivial body", ""),
        ("abstract", "trivial body", ""),
        ("getter", "trivial body", ""),
        ("constant", "trivial body", ""),
        ("Holder.__repr__", "dunder method", ""),
        ("Holder.__mangled", "name-mangled method", ""),
        ("Holder.value", "redefined later", ""),
        ("Holder.value", "property setter", ""),
        ("twice", "redefined later", ""),
        ("uses_gpu", "gpu keyword", "cuda"),
        ("shells_out", "process keyword", "os.system"),
        ("reads_input", "interactive keyword", "input("),
        ("windows_only", "conditional definition", ""),
    }
    assert by_qualname(candidates)["twice"].start_line == 65  # the last definition wins
    assert stats.functions_seen == len(candidates) + len(drops) == 20


def test_a_file_ast_rejects_is_one_drop_and_the_rest_goes_on() -> None:
    files = {
        "py2.py": 'def old(x):\n    print "x is", x\n    return x\n\n\ndef fine(y):\n    return y\n',
        "broken.py": "def f(:\n    pass\n",
        "ok.py": "def g(a):\n    b = a + 1\n    return b\n",
    }
    candidates, drops, stats = extract_candidates(repository(files))
    assert [c.key for c in candidates] == ["ok.py::g"]
    assert sorted((d.file, d.qualname, d.reason) for d in drops) == [
        ("broken.py", "*", "syntax error"),
        ("py2.py", "*", "syntax error"),
    ]
    assert "ast rejects the file: line 2" in next(d.detail for d in drops if d.file == "py2.py")
    assert stats.files_with_syntax_errors == 2 and stats.functions_seen == 4


def test_custom_keywords_replace_the_defaults() -> None:
    files = {"m.py": "def f(x):\n    y = x.frobnicate()\n    return os.system(y)\n"}
    candidates, drops, _ = extract_candidates(repository(files), keywords={"toy": ("frobnicate",)})
    assert not candidates and drops[0].reason == "toy keyword" and drops[0].detail == "frobnicate"
    candidates, _, _ = extract_candidates(repository(files), keywords={})
    assert [c.qualname for c in candidates] == ["f"]


def _candidate(name: str, *, method: bool = False, doc: bool = False, branches: int = 0) -> Candidate:
    return Candidate(
        file="m.py",
        module="m",
        qualname=f"C.{name}" if method else name,
        name=name,
        class_name="C" if method else None,
        kind="method" if method else "function",
        start_line=1,
        def_line=1,
        end_line=2,
        signature=f"def {name}():",
        decorators=(),
        docstring="doc" if doc else None,
        source="",
        branches=branches,
    )


def test_the_cap_balances_functions_and_methods_and_prefers_docstrings() -> None:
    functions = [_candidate(f"f{i}", doc=i < 2) for i in range(6)]
    methods = [_candidate(f"m{i}", method=True, doc=i == 5) for i in range(6)]
    chosen = select_candidates(functions + methods, 4, seed=0)
    assert len(chosen) == 4
    assert sum(c.class_name is None for c in chosen) == 2
    assert {"f0", "f1", "m5"} <= {c.name for c in chosen}  # the documented ones come first
    assert chosen == sorted(chosen, key=(functions + methods).index)  # in the given order
    assert select_candidates(functions + methods, 4, seed=0) == chosen
    # a group short of its half leaves its places to the other
    few_methods = functions + methods[:1]
    assert Counter(c.class_name is None for c in select_candidates(few_methods, 5)) == {True: 4, False: 1}
    assert select_candidates(functions, 10) == functions
    # 0: no cap (``build --max-candidates 0``, a corpus at scale considers every candidate)
    assert select_candidates(functions + methods, 0) == functions + methods


def test_the_cap_prefers_branchy_functions_but_is_not_a_sort() -> None:
    plain = [_candidate(f"p{i}") for i in range(20)]
    branchy = [_candidate(f"b{i}", branches=8) for i in range(20)]
    picks = Counter()
    for seed in range(50):
        picks.update("b" if c.name.startswith("b") else "p" for c in select_candidates(plain + branchy, 10, seed))
    assert picks["b"] > 3 * picks["p"] > 0


def test_over_the_cap_is_a_drop() -> None:
    body = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n\n\n" for i in range(7))
    candidates, drops, stats = extract_candidates(repository({"m.py": body}), max_candidates=3, seed=1)
    assert len(candidates) == 3 and stats.kept_before_cap == 7
    assert Counter(d.reason for d in drops) == {"over the per-repository cap": 4}
    again, _, _ = extract_candidates(repository({"m.py": body}), max_candidates=3, seed=1)
    assert again == candidates


def test_an_index_saves_the_second_parse_and_changes_nothing() -> None:
    from gym_repost.construct.dependencies import build_index

    files = {
        "a/x.py": "def f(a):\n    b = a + 1\n    return b\n",
        "b/x.py": "def g(a):\n    return a * 2\n",
        "py2.py": 'def old(x):\n    print "x"\n    return x\n',
    }
    repo = repository(files)
    index = build_index(repo)
    assert list(index.rejected) == ["py2.py"] and "b/x.py" not in index.files  # same module name x
    assert extract_candidates(repo, index=index)[:2] == extract_candidates(repo)[:2]


def test_the_garbage_collector_pause_restores_the_previous_state() -> None:
    import gc

    from gym_repost.construct.extract import garbage_collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), garbage_collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with garbage_collector_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


POLICY_FILES = {
    "setup.py": "def read(name):\n    with open(name) as fh:\n        return fh.read().strip().lower()\n",
    "docs/conf.py": "def setup(app):\n    app.add_css_file('x.css')\n    return {'ok': True}\n",
    "examples/demo.py": "def main(args):\n    total = sum(args)\n    return total * 2\n",
    "bench/run.py": "def timeit(f):\n    start = 0\n    return f() - start\n",
    "bin/update-tables.py": "def parse(rows):\n    out = [r.split() for r in rows]\n    return sorted(out)\n",
    "pkg/__init__.py": "",
    "pkg/text.py": '''
        def _clean(s):
            """A helper."""
            s = s.strip()
            return s.lower()


        def upper(s):
            """One line: a call of a str method."""
            return s.upper()


        def norm(s):
            return _clean(s)


        def pick(s, default):
            return s or default


        def twice(values):
            out = []
            for v in values:
                out.append(v * 2)
            return out
        ''',
    "pkg/copy.py": '''
        def doubled(items):
            """The same body as twice, another name."""
            out = []
            for v in items:
                out.append(v * 2)
            return out
        ''',
}


def test_non_library_code_one_line_wrappers_and_visible_copies_are_dropped() -> None:
    """Issue 33: setup.py, docs, examples and benchmarks entered the pool; 35% of the tasks had a
    single-statement body; a target's body stood verbatim in another file the agent reads."""
    candidates, drops, stats = extract_candidates(repository(POLICY_FILES), max_candidates=100)
    assert sorted(c.qualname for c in candidates) == ["_clean", "norm", "pick"]
    reasons = {(d.file, d.qualname): d.reason for d in drops}
    assert {
        reasons[(f, q)]
        for f, q in [
            ("setup.py", "read"),
            ("docs/conf.py", "setup"),
            ("examples/demo.py", "main"),
            ("bench/run.py", "timeit"),
            ("bin/update-tables.py", "parse"),  # wcwidth: 8 of its 10 candidates were maintainers' scripts
        ]
    } == {"not library code"}
    assert reasons[("pkg/text.py", "upper")] == "single-statement body"  # norm calls the repository's own helper
    assert (
        reasons[("pkg/text.py", "twice")]
        == reasons[("pkg/copy.py", "doubled")]
        == "body appears elsewhere in the repository"
    )
    assert stats.dropped["single-statement body"] == 1
    kept, _, _ = extract_candidates(
        repository(POLICY_FILES), max_candidates=100, keep=("non-library", "single-statement", "duplicates")
    )
    assert len(kept) == len(candidates) + 5 + 1 + 2
