"""Stage 5, test generation without an LLM: helpers, hints, pools, tracer, search, writer."""

from __future__ import annotations

import argparse
import ast
import collections
import datetime
import decimal
import enum
import functools
import importlib
import io
import itertools
import operator
import random
import re
import socket
import textwrap
import time
import types
from pathlib import Path

import pytest

from gym_repost.analysis.mutation import generate_mutants
from gym_repost.analysis.source import find_function
from gym_repost.construct.stages import Candidate, Drop, GeneratedTests, SandboxedScript, SourceRepository
from gym_repost.construct.testgen import ChosenInput, RecordedCall, generate_tests, trace_repository, write_tests
from gym_repost.construct.testgen.explore import may_depend_on_hash_order, verification_task
from gym_repost.construct.testgen.trace import local_modules, source_roots, suite_files
from gym_repost.construct.testgen.trace import test_files as collected_test_files
from gym_repost.construct.testgen.writer import call_arguments, runtime_helpers
from gym_repost.harness import do_nothing_candidate, run_function_tests, run_host_made
from gym_repost.programs import hints, mutate, pools, runtime
from gym_repost.programs import trace as trace_program

# ---------------------------------------------------------------- helpers


def candidate(module: str, qualname: str, file: str = "pkg/mod.py", kind: str | None = None) -> Candidate:
    """A Candidate for ``qualname`` as defined in ``module`` (lines as in that text)."""
    span = find_function(module, qualname)
    assert span is not None
    decorators = tuple(ast.unparse(d) for d in span.node.decorator_list)
    if kind is None:
        kind = (
            "function"
            if span.class_name is None
            else next((d for d in ("staticmethod", "classmethod", "property") if d in decorators), "method")
        )
    return Candidate(
        file=file,
        module=file[:-3].replace("/", "."),
        qualname=qualname,
        name=span.name,
        class_name=span.class_name,
        kind=kind,
        start_line=span.start,
        def_line=span.def_line,
        end_line=span.end,
        signature="",
        decorators=decorators,
        docstring=span.docstring,
        source="\n".join(module.split("\n")[span.start - 1 : span.end]),
    )


def script(module: str, qualname: str) -> SandboxedScript:
    module = textwrap.dedent(module)
    return SandboxedScript(target=candidate(module, qualname), module=module)


def generated(sandbox, module: str, qualname: str, **options) -> GeneratedTests:
    result = generate_tests(sandbox, script(module, qualname), **options)
    assert isinstance(result, GeneratedTests), result
    return result


def kill_rate(sandbox, sandboxed: SandboxedScript, code: str) -> float:
    """The share of all the target's mutants the tests reject, judged as validation judges
    mutants: in batches, a mutant that loops forever stopped by CPU time (not a wall clock)."""
    task = verification_task(sandboxed, code)
    mutants = generate_mutants(task.ground_truth)
    killed = sum(not report.passed for report in run_host_made(sandbox, task, [m.source for m in mutants]))
    return killed / len(mutants)


# ---------------------------------------------------------------- runtime: states and outcomes


class Plain:
    def __init__(self, a, b):
        self.a, self.b = a, b


class Slotted:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


def test_state_compares_objects_without_eq_by_type_and_attributes():
    assert runtime._gr_state(Plain(1, [2])) == runtime._gr_state(Plain(1, [2]))
    assert runtime._gr_state(Plain(1, [2])) != runtime._gr_state(Plain(1, [3]))
    assert runtime._gr_state(Slotted(4)) == ("Slotted", [("x", 4)])


def test_state_of_floats_sets_dicts_bools():
    nan = float("nan")
    assert runtime._gr_state(nan) == runtime._gr_state(float("nan")) == ("float", "nan")
    assert runtime._gr_state(0.1 + 0.2) == runtime._gr_state(0.3)
    assert runtime._gr_state(-0.0) == runtime._gr_state(0.0)
    assert runtime._gr_state({3, 1, 2}) == runtime._gr_state({2, 3, 1})
    assert runtime._gr_state({"b": 1, "a": 2}) == runtime._gr_state({"a": 2, "b": 1})
    assert runtime._gr_state(True) != runtime._gr_state(1)
    assert runtime._gr_state(1.0) != runtime._gr_state(1)
    assert runtime._gr_state([1, 2]) != runtime._gr_state((1, 2))


def test_state_drains_iterators_and_is_cycle_safe():
    def numbers():
        yield 1
        yield 2
        raise ValueError("stop")

    assert runtime._gr_state(numbers()) == ("iter", [1, 2, ("raised", "ValueError", "stop")])
    looped: list = [1]
    looped.append(looped)
    assert runtime._gr_state(looped) == ("list", [1, ("cycle", "list")])
    deep: list = []
    for _ in range(50):
        deep = [deep]
    assert "deep" in repr(runtime._gr_state(deep))


def test_outcome_records_result_exception_output_and_mutated_arguments():
    def grow(items, extra):
        print("growing")
        items.extend(extra)
        return len(items)

    def fail(x):
        raise KeyError(f"missing {x} at 0x7f3a2b1c9d00")

    result, printed, warned, args, kwargs, owner = runtime._gr_outcome(grow, [1], [2, 3])
    assert result == ("ok", 3)
    assert printed == "growing\n"
    assert args == ("tuple", [("list", [1, 2, 3]), ("list", [2, 3])])
    assert runtime._gr_outcome(fail, 5)[0] == ("raised", "KeyError", "'missing 5 at 0x?'")
    assert runtime._gr_outcome(fail, 5) != runtime._gr_outcome(fail, 6)


def test_outcome_of_a_method_includes_the_instance_state():
    class Counter:
        def __init__(self):
            self.total = 0

        def add(self, n):
            self.total += n

        def add_new_implementation(self, n):
            self.total += n + 1

    assert runtime._gr_outcome(Counter().add, 2)[5] == (Counter.__qualname__, [("total", 2)])
    assert runtime._gr_outcome(Counter().add, 2) != runtime._gr_outcome(Counter().add_new_implementation, 2)


def _read_to(stream, position):
    stream.seek(position)
    return stream


def test_an_in_memory_stream_is_compared_by_what_it_holds_and_where_it_stands():
    """As an iterator, a stream showed only the lines after its position: none after a call
    wrote to it, so two writers of different text had the same outcome."""

    def write(out, text):
        out.write(text)

    assert runtime._gr_outcome(write, io.StringIO(), "a") != runtime._gr_outcome(write, io.StringIO(), "b")
    assert runtime._gr_outcome(write, io.BytesIO(), b"a") == runtime._gr_outcome(write, io.BytesIO(), b"a")
    assert runtime._gr_state(io.StringIO("ab")) != runtime._gr_state(_read_to(io.StringIO("ab"), 1))
    held = io.StringIO("ab\ncd")
    assert runtime._gr_state(held) == ("StringIO", "ab\ncd", 0) and held.tell() == 0  # read, not drained
    closed = io.BytesIO(b"x")
    closed.close()
    assert runtime._gr_state(closed) == ("BytesIO", "closed")


def test_build_makes_instances_without_init():
    built = runtime._gr_build(Slotted, {"x": 7})
    assert built.x == 7
    assert runtime._gr_state(runtime._gr_build(Plain, {"a": 1, "b": 2})) == runtime._gr_state(Plain(1, 2))


# ---------------------------------------------------------------- hints and pools


def _hints(source: str, is_method: bool = False) -> hints.TargetHints:
    node = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(node, ast.FunctionDef)
    return hints.analyse(node, is_method)


def test_hints_from_usage_literals_and_isinstance():
    found = _hints("""
        def f(name, n, items, table, mode="fast", *rest, flag=False, **options):
            if isinstance(n, bool):
                return None
            if mode == "slow" or n > 10:
                name = name.strip().lower()
            for item in items:
                table[item] = table.get(item, 0) + n
            return name
        """)
    usage = {p.name: p.usage for p in found.params}
    assert [p.kind for p in found.params] == [
        "positional",
        "positional",
        "positional",
        "positional",
        "positional",
        "var_positional",
        "keyword_only",
        "var_keyword",
    ]
    assert usage["name"].tags == {"str"}
    assert "number" in usage["n"].tags and usage["n"].literals == ["10", "9", "11"]
    assert usage["n"].types == ["bool"]
    assert usage["items"].tags == {"iter"}
    assert "dict" in usage["table"].tags
    assert usage["mode"].literals == ["'slow'"]
    assert found.params[4].default == "'fast'"
    assert set(found.constants) == {"'slow'", "10", "0"}


def test_hints_of_self_attributes():
    found = _hints(
        """
        def pop(self, default=None):
            if not self.items:
                return default
            self.count -= 1
            return self.items.pop()
        """,
        is_method=True,
    )
    assert [p.name for p in found.params] == ["default"]
    assert {"truthy", "list"} <= found.self_attributes["items"].tags


def _builder(namespace: dict | None = None, constants: list[str] | None = None) -> pools.PoolBuilder:
    return pools.PoolBuilder(namespace or {}, None, constants or [], "_gr_target_module")


def test_pools_from_annotations():
    builder = _builder()
    assert builder.for_annotation("list[int]")[:3] == ["[]", "[0]", "[0, 1, -1]"]
    assert builder.for_annotation("Literal['a', 'b']") == ["'a'", "'b'"]
    assert builder.for_annotation("Optional[bool]") == ["None", "True", "False"]
    assert all(
        ast.literal_eval(v) == {} or isinstance(ast.literal_eval(v), dict)
        for v in builder.for_annotation("dict[str, int]")
    )
    assert builder.for_annotation("int | None")[:2] == ["0", "None"]


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Box:
    def __init__(self, width: int, label: str = "x"):
        self.width, self.label = width, label


Box.__module__ = "_gr_target_module"  # as if defined in the sandboxed module


def test_pools_for_enums_classes_and_foreign_types():
    shapes = types.SimpleNamespace(Color=Color)
    builder = _builder({"Color": Color, "Box": Box, "socket": socket, "shapes": shapes})
    assert builder.for_annotation("Color") == ["Color.RED", "Color.BLUE"]
    assert builder.for_annotation("shapes.Color") == ["shapes.Color.RED", "shapes.Color.BLUE"]
    made = builder.for_annotation("Box")
    assert made[0] == "Box(0)"
    assert "Box(1)" in made
    assert any(m.startswith("Box(0, label=") for m in made)
    with pytest.raises(pools.Unbuildable):
        builder.for_annotation("socket.socket")


def test_pools_from_defaults_usage_and_constants():
    found = _hints("""
        def f(count=3, text="", sep=","):
            if text.startswith("#"):
                return sep.join([text] * count)
            return text
        """)
    builder = _builder(constants=found.constants)
    by_name = {p.name: builder.for_param(p) for p in found.params}
    assert by_name["count"][:3] == pools.INT[:3]
    assert "'#'" in by_name["text"] and "'ab#'" in by_name["text"]
    assert "''" in by_name["sep"]


def test_a_parameter_used_only_as_a_stream_is_given_streams():
    """``out.write(...)``: real in-memory streams are tried, the first before any attribute
    bag (whose ``write`` is a lambda that writes nothing)."""
    found = _hints("""
        def dump(rows, out):
            for row in rows:
                out.write(",".join(row) + "\\n")
            out.flush()
        """)
    builder = _builder(constants=found.constants)
    by_name = {p.name: builder.for_param(p) for p in found.params}
    assert by_name["out"][0] == pools.STREAMS[0] and set(pools.STREAMS) <= set(by_name["out"])
    assert not any("StringIO" in v for v in by_name["rows"])
    mixed = _hints("""
        def show(item):
            return item.write(item.label)
        """)
    assert not any("StringIO" in v for v in _builder().for_param(mixed.params[0]))


def test_mutations_keep_the_call_shape():
    source = mutate.join_input("_gr_build(Box, {'width': 3})", "(1, 'ab', [1, 2])", "{'flag': True}")
    rng = random.Random(0)
    for _ in range(200):
        mutant = mutate.mutate(source, rng, ["None", "0"])
        assert mutant is not None
        instance, args, kwargs = mutate.split_input(mutant)
        assert instance is not None and instance.startswith("_gr_build(Box, {'width': ")
        assert len(ast.parse(args, mode="eval").body.elts) == 3
        assert list(ast.literal_eval(kwargs)) == ["flag"]


def test_an_infinite_float_in_an_input_is_mutated_not_raised():
    """``1e309`` is how ``ast.unparse`` writes an infinite float; rounding it raised OverflowError."""
    source = mutate.join_input(None, "(1e309, -1e309)", "{}")
    rng = random.Random(0)
    mutants = {mutate.mutate(source, rng, []) for _ in range(200)}
    assert len(mutants - {None}) > 3  # None: both values became the name `inf`, nothing left to mutate


# ---------------------------------------------------------------- writer


def test_call_arguments_keeps_text_and_keywords():
    assert (
        call_arguments("(1, 'a b', [2, 3])", "{'sep': '-', 'not an id': 1}")
        == "1, 'a b', [2, 3], sep='-', **{'not an id': 1}"
    )
    assert call_arguments("()", "{}") == ""


def test_a_keyword_argument_named_like_a_python_keyword_is_written_in_a_mapping(tmp_path):
    """pyparsing 3.2.3: ``with_attribute(**attrs)`` is called with ``class='boo'``; written as
    ``class='boo'`` the evaluation script did not parse and the candidate was dropped. Such
    keys (and those the tracer meets in a ``partial``'s keywords or a namespace's fields)
    go in ``**{...}``."""
    text = call_arguments("('b',)", "{'class': 'boo', 'x': 1, 'match': 2}")
    assert text == "'b', x=1, match=2, **{'class': 'boo'}"  # ``match`` is a soft keyword: a name
    seen = {}
    exec(f"def f(*args, **kwargs):\n    seen.update(kwargs)\nf({text})", {"seen": seen})
    assert seen == {"class": "boo", "x": 1, "match": 2}

    serializer = trace_program.Serializer(str(tmp_path))
    namespace = {name: value for name, value in vars(runtime).items() if name.startswith("_gr_")}
    for value in (
        functools.partial(dict, 1, **{"class": "boo", "for": 2, "ok": 3}),
        types.SimpleNamespace(**{"class": 1, "a b": 2, "ok": 3}),
        argparse.Namespace(**{"if": True}),
    ):
        source = serializer.to_source(value)
        ast.parse(source, mode="eval")
        rebuilt = eval(source, dict(namespace))
        assert runtime._gr_state(rebuilt) == runtime._gr_state(value), source


def test_writer_output_calls_both_and_has_a_main_block():
    code = write_tests(
        "add",
        "method",
        "Counter",
        [
            ChosenInput(args="(1,)", kwargs="{}", instance="Counter(5)", origin="traced"),
            ChosenInput(args="(-1,)", kwargs="{}", instance="_gr_build(Counter, {'value': 0, 'history': []})"),
            ChosenInput(args="(2,)", kwargs="{}", instance="Counter(0)", seeded=True),
        ],
    )
    tree = ast.parse(code)
    test = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_add")
    used = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    assert {"add", "add_new_implementation"} <= used
    assert sum(isinstance(n, ast.Assert) for n in ast.walk(test)) == 3
    assert "_gr_seeded(Counter(0).add, 2)" in code
    assert code.rstrip().endswith('if __name__ == "__main__":\n    test_add()')
    assert runtime_helpers().startswith("import contextlib as _gr_contextlib")


def test_hash_order_check_looks_for_sets():
    assert may_depend_on_hash_order("def f(x):\n    return sorted(x)\n", [{"args": "(1,)", "kwargs": "{}"}]) is False
    assert may_depend_on_hash_order("def f(x):\n    return list(set(x))\n", [{"args": "(1,)", "kwargs": "{}"}])
    assert may_depend_on_hash_order("def f(x):\n    return list(x)\n", [{"args": "({1, 2},)", "kwargs": "{}"}])


# ---------------------------------------------------------------- writing values back as source


Pair = collections.namedtuple("Pair", "left right")


def double_it(x):
    return x * 2


def test_values_are_written_back_as_source_that_rebuilds_them(tmp_path):
    serializer = trace_program.Serializer(str(tmp_path))
    values = [
        None,
        True,
        -3,
        2.5,
        float("nan"),
        float("-inf"),
        1 - 2j,
        "a'b\n",
        b"\x00",
        bytearray(b"ab"),
        [1, [2]],
        (1,),
        {"k": {3, 1}},
        frozenset({"x"}),
        set(),
        range(2, 9, 3),
        decimal.Decimal("1.50"),
        datetime.date(2020, 2, 29),
        datetime.datetime(2020, 1, 1, 12, tzinfo=datetime.timezone.utc),
        datetime.time(1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        re.IGNORECASE,
        re.compile("a+", re.I),
        re.search("b+", "abbbc"),
        len,
        operator.add,
        str.upper,
        int,
        functools.partial(max, 3),
        argparse.Namespace(verbose=True),
        collections.deque([1, 2]),
        collections.OrderedDict(a=1),
        io.StringIO("ab\ncd\n"),
        _read_to(io.BytesIO(b"abc\ndef"), 3),
        lambda x: x + 1,
        double_it,
    ]
    namespace = {name: value for name, value in vars(runtime).items() if name.startswith("_gr_")}
    for value in values:
        source = serializer.to_source(value)
        rebuilt = eval(source, dict(namespace))
        if callable(value) and not isinstance(value, (type, functools.partial)):
            assert rebuilt(5, 6) == value(5, 6) if value is operator.add else True
            continue
        if isinstance(value, re.Match):
            assert (rebuilt.span(), rebuilt.group()) == (value.span(), value.group())
            continue
        assert runtime._gr_state(rebuilt) == runtime._gr_state(value), source
    assert eval(serializer.to_source(lambda x: x + 1))(1) == 2
    assert serializer.to_source(double_it).startswith("_gr_func(")
    assert eval(serializer.to_source(double_it), dict(namespace))(4) == 8


def test_an_aware_datetime_names_its_zone_as_source_never_by_address(tmp_path, monkeypatch):
    """A datetime's repr shows a zone object of the repository as ``<zones.Utc object at
    0x7f...>``: not source, and another text every run (so the tracer's record of calls
    changed from build to build). The zone is written as an instance of its class."""
    (tmp_path / "zones.py").write_text(
        "import datetime\n"
        "class Utc(datetime.tzinfo):\n"
        "    def utcoffset(self, dt):\n"
        "        return datetime.timedelta(0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    zones = importlib.import_module("zones")
    serializer = trace_program.Serializer(str(tmp_path))
    value = datetime.datetime(1985, 4, 12, 10, 15, tzinfo=zones.Utc())
    source = serializer.to_source(value)
    assert source == "__import__('datetime').datetime(1985, 4, 12, 10, 15).replace(tzinfo=_gr_build(Utc, {}))"
    assert serializer.referenced == {"Utc": "zones"}
    namespace = {name: v for name, v in vars(runtime).items() if name.startswith("_gr_")}
    rebuilt = eval(source, {**namespace, "Utc": zones.Utc})
    assert rebuilt == value and type(rebuilt.tzinfo) is zones.Utc

    class Local(datetime.tzinfo):  # a test file's class: not in the script
        def utcoffset(self, dt):
            return datetime.timedelta(hours=1)

    with pytest.raises(trace_program.Unrepresentable):
        serializer.to_source(datetime.time(1, 2, tzinfo=Local()))


def test_values_that_cannot_be_written_back_are_refused(tmp_path):
    serializer = trace_program.Serializer(str(tmp_path))
    offset = 3
    with socket.socket() as sock:
        for value in (sock, iter([1]), (x for x in "ab"), lambda x: x + offset, Pair(1, 2), "x" * 5000):
            with pytest.raises(trace_program.Unrepresentable):
                serializer.to_source(value)
    looped: list = []
    looped.append(looped)
    with pytest.raises(trace_program.Unrepresentable):
        serializer.to_source(looped)


# ---------------------------------------------------------------- tracing the repository's tests


def repository(tmp_path: Path, files: dict[str, str]) -> SourceRepository:
    files = {k: textwrap.dedent(v) for k, v in files.items()}
    return SourceRepository(name="shapes", version="0", source=str(tmp_path), root=tmp_path, files=files)


GEOMETRY = """
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y

        def norm1(self):
            return abs(self.x) + abs(self.y)


    def scale(point, factor=1):
        return Point(point.x * factor, point.y * factor)


    def push_all(items, extra):
        items.extend(extra)
        return len(items)
    """


def test_trace_records_arguments_instances_and_mutated_lists(sandbox, tmp_path):
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_geometry.py": """
            from shapes.geometry import Point, push_all, scale

            def test_scale():
                assert scale(Point(1, 2), 3).x == 3
                assert scale(Point(0, 5)).y == 5

            def test_push():
                xs = [1]
                assert push_all(xs, [2, 3]) == 3
                assert xs == [1, 2, 3]

            def test_norm():
                assert Point(-2, 1).norm1() == 3
            """,
        },
    )
    module = repo.files["shapes/geometry.py"]
    targets = [candidate(module, q, "shapes/geometry.py") for q in ("scale", "push_all", "Point.norm1")]
    result = trace_repository(sandbox, repo, targets, timeout=60)
    assert result.tests_run == 3 and result.tests_failed == 0 and not result.missing_modules
    calls = {c.qualname: result.calls[c.key] for c in targets}
    assert RecordedCall(args="(_gr_build(Point, {'x': 1, 'y': 2}), 3)", kwargs="{}") in calls["scale"]
    assert RecordedCall(args="(_gr_build(Point, {'x': 0, 'y': 5}),)", kwargs="{}") in calls["scale"]
    assert calls["push_all"] == [RecordedCall(args="([1], [2, 3])", kwargs="{}")]
    rebuilt = "_gr_build(Point, {'x': -2, 'y': 1})"
    assert calls["Point.norm1"] == [RecordedCall(args="()", kwargs="{}", instance=rebuilt)]


def test_trace_spreads_its_calls_over_test_functions_and_names_the_classes_it_builds(sandbox, tmp_path):
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_geometry.py": """
            import pytest
            from shapes.geometry import Point, push_all, scale

            @pytest.mark.parametrize("n", range(60))
            def test_many(n):
                assert push_all([n], []) == 1

            def test_other():
                assert push_all([7], [8, 9]) == 3

            def test_scale():
                assert scale(Point(1, 2), 3).x == 3
            """,
        },
    )
    module = repo.files["shapes/geometry.py"]
    targets = [candidate(module, q, "shapes/geometry.py") for q in ("push_all", "scale")]
    result = trace_repository(sandbox, repo, targets, timeout=60, max_calls_per_target=8)
    pushes, scales = (result.calls[t.key] for t in targets)
    # the cases of one parametrized test filled the whole pool before: test_other's call was lost
    assert RecordedCall(args="([7], [8, 9])", kwargs="{}") in pushes
    # the reserve fills what the other tests leave: still 8 calls
    assert len(pushes) == 8 and RecordedCall(args="([59], [])", kwargs="{}") not in pushes
    # a class the call builds is named with its module, for the slicer
    assert scales[0].names == (("Point", "shapes.geometry"),)
    assert pushes[0].names == ()


def test_a_property_based_suite_gives_the_same_traced_calls_every_run(tmp_path):
    """dpath's tests draw their examples with Hypothesis: two builds of the same sdist traced
    other calls and made other tasks. The tracer fixes Hypothesis's seed and drops its
    deadline (a loaded machine would fail examples and shrink them into other calls)."""
    from gym_repost.sandbox.config import LocalSandboxConfig
    from gym_repost.sandbox.local import LocalSandbox

    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_props.py": """
            from hypothesis import given, settings, strategies as st
            from shapes.geometry import push_all

            settings.register_profile("default", max_examples=30)
            settings.load_profile("default")

            @given(st.lists(st.integers()), st.lists(st.integers()))
            def test_push(items, extra):
                assert push_all(list(items), extra) == len(items) + len(extra)
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    config = LocalSandboxConfig(work_root=str(tmp_path / "runs"), site_packages=["coverage", "pytest", "hypothesis"])
    runs = []
    for _ in range(2):
        with LocalSandbox(config) as box:
            runs.append(trace_repository(box, repo, [target], timeout=120))
    first, second = (run.calls[target.key] for run in runs)
    assert runs[0].tests_failed == 0 and len(first) >= 10
    assert first == second


def test_a_suite_that_draws_from_random_gives_the_same_traced_calls_every_run(sandbox, tmp_path):
    """A test that calls the target with values drawn from the global ``random`` (seeded by
    the OS in each forked run) traced other calls each build. The tracer seeds the global
    generators before each test."""
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_drawn.py": """
            import random
            from shapes.geometry import push_all

            def test_push_drawn():
                for _ in range(12):
                    items = [random.randint(-10**6, 10**6) for _ in range(3)]
                    assert push_all(list(items), [random.random()]) == 4
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    first, second = (trace_repository(sandbox, repo, [target], timeout=120).calls[target.key] for _ in range(2))
    assert len(first) >= 3
    assert first == second


def test_a_path_in_the_run_directory_or_named_by_tempfile_is_not_traced(sandbox, tmp_path):
    """boltons' ``SpooledBytesIO`` tests pass ``dir=`` a temporary directory: the traced call
    named ``/sandbox/run-760/tmpilde4xti`` in one build and ``/sandbox/run-0/tmp5wjojt5q`` in
    the other, so the two task files differed. A call whose values name the run's directory
    (working directory, ``HOME``, ``TMPDIR``) or a file ``tempfile`` named is not recorded."""
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_places.py": """
            import os
            import tempfile
            from shapes.geometry import Point, push_all

            def test_places(tmp_path):
                push_all([tempfile.mkdtemp()], [])
                push_all([], [str(tmp_path / "data.txt")])
                push_all([os.path.join(os.getcwd(), "x")], [])
                push_all([Point(os.environ["HOME"], 1)], [])
                push_all([b"/var/tmp/tmpab_12xyz/f"], [])
                push_all(["tmp_settings", "/srv/data"], [1])
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    runs = [trace_repository(sandbox, repo, [target], timeout=120) for _ in range(2)]
    assert runs[0].tests_run == 1 and runs[0].tests_failed == 0
    first, second = (run.calls[target.key] for run in runs)
    assert first == second == [RecordedCall(args="(['tmp_settings', '/srv/data'], [1])", kwargs="{}")]


def test_a_call_whose_values_the_clock_or_the_os_decides_is_not_traced(sandbox, tmp_path):
    """Two builds of boltons and funcy traced other calls: ``daterange(date.today(), ...)``,
    ``is_uuid(uuid4())``, ``format_time(elapsed)``. The calls kept are those a second run of
    their tests, with the clock moved and another run directory, makes again."""
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_clock.py": """
            import datetime
            import os
            import time
            import uuid
            from shapes.geometry import push_all

            def test_clock():
                started = time.perf_counter()
                push_all([datetime.date.today()], [])
                push_all([datetime.datetime.now()], [])
                push_all([datetime.datetime.now().date() - datetime.timedelta(days=1)], [])
                push_all([datetime.datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)], [])
                push_all([datetime.date.today() - datetime.timedelta(days=30)], [])
                push_all(list(time.localtime()[:3]), [])
                push_all([int(time.time() // 3600)], [])
                push_all([str(uuid.uuid4())], [])
                push_all([os.urandom(4)], [])
                push_all([time.perf_counter() - started], [])
                push_all([datetime.date(2015, 12, 25)], [3])

            def test_steady():
                push_all([1, 2], [3])
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    runs = [trace_repository(sandbox, repo, [target], timeout=120) for _ in range(2)]
    first, second = (run.calls[target.key] for run in runs)
    assert first == second
    assert first == [
        RecordedCall(args="([__import__('datetime').date(2015, 12, 25)], [3])", kwargs="{}"),
        RecordedCall(args="([1, 2], [3])", kwargs="{}"),
    ]
    assert runs[0].verified and runs[0].unsteady == 6  # the four dates within a day of the clock: never recorded
    unverified = trace_repository(sandbox, repo, [target], timeout=120, verify=False)
    assert len(unverified.calls[target.key]) == 8


def test_a_malformed_pool_in_the_tracers_result_gives_no_result(tmp_path):
    """The result comes from the process that ran the repository's tests: the host checks
    each recorded call before it keeps any (a malformed result is reported, not raised)."""
    from gym_repost.construct.testgen.trace import _result

    repo = repository(tmp_path, {"shapes/__init__.py": "", "shapes/geometry.py": GEOMETRY})
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    call = {"instance": None, "args": "([1], [2])", "kwargs": "{}", "names": {}}
    base = {"missing": [], "errors": [], "tests_run": 1, "tests_failed": 0, "deadline_hit": False}
    base |= {"cpu_limit_hit": False, "cut": False, "calls": {target.key: [call]}}
    entry = ["test_push", "t.py::test_push", call, False]
    good = _result({**base, "pools": {target.key: [entry]}}, repo, [target], 0.0)
    assert good is not None and good.pools[target.key][0][2] == call
    assert good.calls[target.key] == [RecordedCall(args="([1], [2])", kwargs="{}")]
    for entry in (
        ["test_push", "t.py::test_push", {**call, "args": 7}, False],
        ["test_push", "t.py::test_push", call],
        ["test_push", None, call, False],
        ["test_push", "t.py::test_push", call, "no"],
        ["test_push", "t.py::test_push", "call", False],
    ):
        assert _result({**base, "pools": {target.key: [entry]}}, repo, [target], 0.0) is None
    assert _result({**base, "calls": {target.key: [{**call, "instance": 3}]}}, repo, [target], 0.0) is None


def test_trace_reports_missing_modules(sandbox, tmp_path):
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_needs.py": """
            import gym_repost_no_such_module_xyz
            from shapes.geometry import push_all

            def test_push():
                assert push_all([], [1]) == 1
            """,
            "tests/test_plain.py": """
            from shapes.geometry import push_all

            def test_push():
                assert push_all([0], []) == 1
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    result = trace_repository(sandbox, repo, [target], timeout=60)
    assert result.missing_modules == ["gym_repost_no_such_module_xyz"]
    assert result.calls[target.key] == [RecordedCall(args="([0], [])", kwargs="{}")]


def test_a_hanging_test_suite_is_bounded(sandbox, tmp_path):
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_hang.py": """
            from shapes.geometry import push_all

            def test_hangs():
                push_all([7], [])
                while True:
                    pass

            def test_after():
                assert push_all([], [8]) == 1
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    started = time.monotonic()
    result = trace_repository(sandbox, repo, [target], timeout=60, test_timeout=1.0)
    assert time.monotonic() - started < 15
    assert result.tests_run == 2 and result.tests_failed == 1
    assert [c.args for c in result.calls[target.key]] == ["([7], [])", "([], [8])"]


# ---------------------------------------------------------------- the search, end to end


NESTED = '''
    def grade(score, curve=0, strict=False):
        """Letter grade of a score in 0..100."""
        if not isinstance(score, (int, float)):
            raise TypeError("score must be a number")
        total = score + curve
        if total > 100:
            total = 100
        if total >= 90:
            return "A"
        elif total >= 75:
            if strict and total < 80:
                return "C"
            return "B"
        elif total >= 50:
            return "C" if total % 2 == 0 else "D"
        return "F"
    '''


def test_search_reaches_every_branch_and_kills_mutants(sandbox):
    sandboxed = script(NESTED, "grade")
    result = generated(sandbox, NESTED, "grade")
    assert result.branch_coverage == 1.0
    assert result.assertions >= 3
    task = verification_task(sandboxed, result.code)
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    assert not run_function_tests(sandbox, task, do_nothing_candidate(task)).passed
    assert kill_rate(sandbox, sandboxed, result.code) >= 0.8


COLLATZ = """
    def steps(n, limit=1000):
        count = 0
        while n != 1 and count < limit:
            if n % 2:
                n = 3 * n + 1
            else:
                n //= 2
            count += 1
        return count
    """


def test_search_on_a_loop_with_nested_branches(sandbox):
    result = generated(sandbox, COLLATZ, "steps")
    assert result.branch_coverage == 1.0
    assert kill_rate(sandbox, script(COLLATZ, "steps"), result.code) >= 0.8


STACK = """
    class Stack:
        def __init__(self, limit=3):
            self.items = []
            self.limit = limit

        def push(self, item):
            if len(self.items) >= self.limit:
                raise OverflowError(f"stack full at {self.limit}")
            self.items.append(item)
            return len(self.items)
    """


def test_methods_compare_the_state_of_self(sandbox):
    result = generated(sandbox, STACK, "Stack.push")
    assert result.branch_coverage == 1.0
    assert ".push_new_implementation, " in result.code
    sandboxed = script(STACK, "Stack.push")
    task = verification_task(sandboxed, result.code)
    forgets_to_store = (
        "def push(self, item):\n    if len(self.items) >= self.limit:\n"
        "        raise OverflowError(f'stack full at {self.limit}')\n    return len(self.items) + 1\n"
    )
    assert not run_function_tests(sandbox, task, forgets_to_store).passed
    wrong_message = forgets_to_store.replace("full at", "is full at").replace(
        "return len(self.items) + 1", "self.items.append(item)\n    return len(self.items)"
    )
    assert not run_function_tests(sandbox, task, wrong_message).passed


EVENS = """
    def evens(limit, start=0):
        n = start
        while n < limit:
            if n % 2 == 0:
                yield n
            n += 1
    """


def test_a_generator_is_compared_by_what_it_yields(sandbox):
    result = generated(sandbox, EVENS, "evens")
    assert result.branch_coverage == 1.0
    task = verification_task(script(EVENS, "evens"), result.code)
    eager = "def evens(limit, start=0):\n    return [n for n in range(start, limit) if n % 2 == 0]\n"
    assert not run_function_tests(sandbox, task, eager).passed
    lazy = "def evens(limit, start=0):\n    yield from (n for n in range(start, limit) if n % 2 == 0)\n"
    assert run_function_tests(sandbox, task, lazy).passed


DEDUPE = '''
    def dedupe_in_place(items):
        """Remove repeated items, keep the first of each; return how many were removed."""
        seen = []
        removed = 0
        for item in list(items):
            if item in seen:
                items.remove(item)
                removed += 1
            else:
                seen.append(item)
        return removed
    '''


def test_a_function_that_mutates_its_list_argument(sandbox):
    result = generated(sandbox, DEDUPE, "dedupe_in_place")
    task = verification_task(script(DEDUPE, "dedupe_in_place"), result.code)
    counts_only = "def dedupe_in_place(items):\n    return len(items) - len(set(items))\n"
    assert not run_function_tests(sandbox, task, counts_only).passed


PARSE = """
    def parse_port(text):
        if not text.isdigit():
            raise ValueError(f"not a number: {text!r}")
        port = int(text)
        if not 0 < port < 65536:
            raise ValueError(f"out of range: {port}")
        return port
    """


def test_exceptions_are_compared_by_type_and_message(sandbox):
    result = generated(sandbox, PARSE, "parse_port")
    assert result.branch_coverage == 1.0
    task = verification_task(script(PARSE, "parse_port"), result.code)
    other_type = PARSE.replace('raise ValueError(f"out of range', 'raise OverflowError(f"out of range')
    assert not run_function_tests(sandbox, task, textwrap.dedent(other_type)).passed
    other_text = PARSE.replace("not a number", "bad number")
    assert not run_function_tests(sandbox, task, textwrap.dedent(other_text)).passed


RANDOM = """
    import random

    def roll(sides=6, times=3):
        return [random.randint(1, sides) for _ in range(times)]
    """

CLOCK = """
    import time

    def stamp(label):
        return f"{label}@{time.time()}"
    """


def test_randomness_is_seeded_and_clocks_are_dropped(sandbox):
    seeded = generated(sandbox, RANDOM, "roll")
    assert not seeded.deterministic
    assert "_gr_seeded(roll" in seeded.code
    assert any("seeded" in note for note in seeded.notes)
    dropped = generate_tests(sandbox, script(CLOCK, "stamp"), executions=500)
    assert isinstance(dropped, Drop) and dropped.reason == "non-deterministic" and dropped.stage == "tests"


SOCKET = """
    import socket

    def send_all(sock: socket.socket, payload: bytes) -> int:
        sock.sendall(payload)
        return len(payload)
    """


def test_inputs_that_cannot_be_built_drop_the_candidate(sandbox):
    dropped = generate_tests(sandbox, script(SOCKET, "send_all"), executions=500)
    assert isinstance(dropped, Drop)
    assert dropped.reason == "inputs cannot be built"
    assert "sock" in dropped.detail and "socket.socket" in dropped.detail


def test_traced_seeds_are_used_first(sandbox):
    seeds = [RecordedCall(args="(95, 0, True)", kwargs="{}"), RecordedCall(args="(77,)", kwargs="{'strict': True}")]
    result = generated(sandbox, NESTED, "grade", seeds=seeds)
    assert result.inputs.get("traced", 0) >= 1
    assert "_gr_outcome(grade, 77, strict=True)" in result.code or "_gr_outcome(grade, 95, 0, True)" in result.code


EXPAND = """
    def expand(original, num, default):
        if isinstance(original, list):
            return original + [default] * (num - len(original))
        return [default] * num
    """


def test_the_repositorys_own_calls_with_results_no_chosen_input_shows_are_kept(sandbox):
    """Issue 33: tabulate's ``_expand_iterable`` was tested on 12 inputs, all scalars or a list
    already as long as asked (shorter first): ``return original`` passed, though 3 of its
    20 traced calls pad a list. Traced calls whose results differ now get slots of their own."""
    seeds = [RecordedCall(args=f"({n}, {k}, {n})", kwargs="{}") for n in range(8) for k in (1, 2)]
    seeds += [RecordedCall(args="([7, 5], 2, None)", kwargs="{}"), RecordedCall(args="([12, 8], 3, None)", kwargs="{}")]
    result = generated(sandbox, EXPAND, "expand", seeds=seeds)
    assert "_gr_outcome(expand, [12, 8], 3, None)" in result.code
    assert result.code.count("_gr_outcome(expand,") == len(seeds)


@pytest.mark.limits
def test_a_test_is_timed_by_its_cpu_time_and_a_sleeping_one_by_the_wall_clocks_safety_limit(sandbox, tmp_path):
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/test_slow.py": """
            import time
            from shapes.geometry import push_all

            def test_sleeps():
                push_all([1], [])
                time.sleep(30)

            def test_spins():
                push_all([2], [])
                while True:
                    pass

            def test_after():
                assert push_all([], [3]) == 1
            """,
        },
    )
    target = candidate(repo.files["shapes/geometry.py"], "push_all", "shapes/geometry.py")
    result = trace_repository(sandbox, repo, [target], timeout=60, test_timeout=0.5)
    assert result.tests_run == 3 and result.tests_failed == 2
    assert [c.args for c in result.calls[target.key]] == ["([1], [])", "([2], [])", "([], [3])"]
    # the sleeping test always meets the wall clock's safety limit; on a quiet machine the spinning
    # one meets its CPU limit first, on a loaded one (less than 1/6 of a core) the wall clock may
    assert 1 <= result.wall_stops <= 2


def test_trace_runs_every_test_file_the_repositorys_runner_collects(sandbox, tmp_path):
    """Issue 33: ``tests/tests.py``, a top-level ``test.py`` and unittest modules were never
    traced (only ``test_*.py`` and ``*_test.py`` were), so their tasks fell back to made-up
    inputs; and a repository's own ``python_files`` setting is honoured."""
    unit = """
    import unittest

    from shapes.geometry import push_all


    class PushTests(unittest.TestCase):
        def test_push(self):
            self.assertEqual(push_all([7], [8]), 2)
    """
    repo = repository(
        tmp_path,
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": GEOMETRY,
            "tests/__init__.py": "",
            "tests/tests.py": unit,
            "test.py": unit.replace("[7], [8]", "[1], [2]"),
            "checks/check_push.py": unit.replace("[7], [8]", "[4], [5]"),
            "setup.cfg": "[tool:pytest]\npython_files = test*.py check_*.py\n",
        },
    )
    assert collected_test_files(repo) == ["checks/check_push.py", "test.py", "tests/tests.py"]
    module = repo.files["shapes/geometry.py"]
    target = candidate(module, "push_all", "shapes/geometry.py")
    result = trace_repository(sandbox, repo, [target], timeout=60)
    assert result.tests_run == 3 and result.tests_failed == 0, result.errors
    assert set(result.calls[target.key]) == {
        RecordedCall(args="([7], [8])", kwargs="{}"),
        RecordedCall(args="([1], [2])", kwargs="{}"),
        RecordedCall(args="([4], [5])", kwargs="{}"),
    }


def test_trace_runs_a_suite_laid_out_and_written_as_older_packages_are(sandbox, tmp_path):
    """A single module under ``lib/`` (markdown2's layout), found through ``lib`` on the path
    (and never installed from PyPI: it is the repository's own); a package reading its own
    version from its installed metadata at import (pqdict's); ``python_files = *.py`` that
    would name ``setup.py`` and ``docs/conf.py`` (boolean.py's; ``docs`` is in its
    ``norecursedirs``); and a test module ending in an unguarded ``unittest.main()``
    (toposort's and ply's). Each of these stopped the whole suite."""
    solo = """
    import importlib.metadata

    __version__ = importlib.metadata.version("solo")


    def push_all(xs, ys):
        for y in ys:
            xs.append(y)
        return len(xs)
    """
    unit = """
    import unittest

    from solo import push_all


    class PushTests(unittest.TestCase):
        def test_push(self):
            self.assertEqual(push_all([7], [8]), 2)


    unittest.main()
    """
    repo = SourceRepository(
        name="solo",
        version="1.2",
        source=str(tmp_path),
        root=tmp_path,
        files={
            k: textwrap.dedent(v)
            for k, v in {
                "lib/solo.py": solo,
                "test/test_solo.py": unit,
                "setup.py": "from setuptools import setup\n\nsetup(name='solo')\n",
                "docs/conf.py": "raise SystemExit('sphinx only')\n",
                "setup.cfg": "[tool:pytest]\npython_files = *.py\nnorecursedirs = docs .git\n",
            }.items()
        },
    )
    assert collected_test_files(repo) == ["lib/solo.py", "test/test_solo.py"]
    assert source_roots(repo) == ["lib"] and "solo" in local_modules(repo)
    assert suite_files(repo)["solo-1.2.dist-info/METADATA"].startswith("Metadata-Version")
    target = candidate(repo.files["lib/solo.py"], "push_all", "lib/solo.py")
    result = trace_repository(sandbox, repo, [target], timeout=60)
    assert result.tests_run == 1 and result.tests_failed == 0, result.errors
    assert result.calls[target.key] == [RecordedCall(args="([7], [8])", kwargs="{}")]


def test_trace_runs_a_suite_that_makes_warnings_errors_with_marks_and_options_of_absent_plugins(sandbox, tmp_path):
    """``filterwarnings = error`` (python-dateutil's, blinker's, Markdown's) with a mark, an
    ini option and a ``Test`` class pytest cannot collect that its authors' plugins
    handled: each warning became an error that stopped the whole suite. They stay
    warnings; the suite's own warnings are still errors."""
    module = """
    def push_all(xs, ys):
        for y in ys:
            xs.append(y)
        return len(xs)
    """
    tests = """
    import warnings

    import pytest

    from solo import push_all


    class TestingHelper:
        def __init__(self, x):
            self.x = x


    @pytest.mark.flaky_on_ci
    def test_push():
        assert push_all([7], [8]) == 2


    def test_own_warning_is_an_error():
        with pytest.raises(UserWarning):
            warnings.warn("the suite's own")
    """
    ini = "[pytest]\nfilterwarnings =\n    error\nflaky_reruns = 2\npython_classes = Test*\n"
    files = {"solo.py": module, "tests/test_solo.py": tests}
    repo = SourceRepository(
        name="solo",
        version="1.2",
        source=str(tmp_path),
        root=tmp_path,
        files={**{k: textwrap.dedent(v) for k, v in files.items()}, "pytest.ini": ini},
    )
    target = candidate(repo.files["solo.py"], "push_all", "solo.py")
    result = trace_repository(sandbox, repo, [target], timeout=60)
    assert result.tests_run == 2 and result.tests_failed == 0, result.errors
    assert result.calls[target.key] == [RecordedCall(args="([7], [8])", kwargs="{}")]


# ---------------------------------------------------------------- inputs that reach what a target is about

TABLE_ESCAPE = '''
    _ENTITIES = {"&": "&amp;", "<": "&lt;", '"': "&quot;", "'": "&#39;"}


    def _entity(ch):
        return _ENTITIES.get(ch, ch)


    def escape(text):
        """``text`` with the characters of the table as HTML entities."""
        return "".join(_entity(ch) for ch in text)
    '''

DOT_SEGMENTS = '''
    def resolve(parts):
        """The path segments with '.' and '..' resolved (RFC 3986, 5.2.4)."""
        out = []
        for part in parts:
            if part == ".":
                pass
            elif part == "..":
                if out and (len(out) > 1 or out[0]):
                    out.pop()
            else:
                out.append(part)
        if list(parts[-1:]) in (["."], [".."]):
            out.append("")
        return out
    '''


def _rejected(sandbox, sandboxed: SandboxedScript, code: str, wrong: str) -> bool:
    task = verification_task(sandboxed, code)
    return not run_function_tests(sandbox, task, textwrap.dedent(wrong)).passed


def test_inputs_hold_the_literals_of_the_tables_and_helpers_a_target_reads(sandbox):
    """An escape function whose characters live in a table read by a helper: the search puts
    them into its inputs, so the input returned unchanged, or one entity forgotten, fails."""
    sandboxed = script(TABLE_ESCAPE, "escape")
    code = generated(sandbox, TABLE_ESCAPE, "escape").code
    assert _rejected(sandbox, sandboxed, code, "def escape(text):\n    return text\n")
    forgot_quote = """
        def escape(text):
            return "".join({"&": "&amp;", "<": "&lt;", "'": "&#39;"}.get(ch, ch) for ch in text)
        """
    assert _rejected(sandbox, sandboxed, code, forgot_quote)


def test_the_literals_a_target_reaches_and_where_a_mutation_puts_them():
    module = textwrap.dedent(TABLE_ESCAPE) + textwrap.dedent("""
        _TABLE = str.maketrans({">": "&gt;"})


        class Quoter:
            marks = ("«", "»")

            def quote(self, text):
                return self.marks[0] + escape(text).translate(_TABLE) + self.marks[1]
        """)
    tree = ast.parse(module)
    namespace: dict = {}
    exec(compile(tree, "<m>", "exec"), namespace)
    quote = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "quote")
    found = hints.reachable_literals(quote, tree, namespace, namespace["Quoter"])
    assert {"'&'", "'<'", "'&amp;'", "'>'", "'«'"} <= set(found)  # a helper's table, a translate table, a class's
    rng = random.Random(0)
    seen = {mutate.mutate("(None, ('abc',), {})", rng, [], literals=["'&'"], literal_share=1.0) for _ in range(20)}
    assert any("&" in s for s in seen if s) and all(s.startswith("(None, (") for s in seen if s)
    parts = {
        mutate.mutate("(None, (('a', 'b'),), {})", rng, [], literals=["'..'"], literal_share=1.0) for _ in range(20)
    }
    assert any("'..'" in s for s in parts if s)


def test_a_hunt_puts_each_literal_in_each_place_one_input_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """prettytable's ``paginate``: every hunt made all the substitutions of its first three
    inputs, each a copy of an input that held a whole table, and the explorer spent 80 of
    its 82 CPU seconds there, not in the target; on a slower machine the CPU limit killed it.
    They are made as the hunt takes them, with no copy, in the same order."""
    found = list(mutate.substitutions("(None, (1, 'ab', [1]), {'k': -3})", ["0", "'x'"]))
    assert found == [
        "(None, (0, 'ab', [1]), {'k': -3})",
        "(None, (1, 'x', [1]), {'k': -3})",
        "(None, (1, 'ab', [1, 0]), {'k': -3})",
        "(None, (1, 'ab', [1, 'x']), {'k': -3})",
        "(None, (1, 'ab', [0]), {'k': -3})",
        "(None, (1, 'ab', [1]), {'k': 0})",
    ]
    written = []
    unparse = ast.unparse
    monkeypatch.setattr(mutate.ast, "unparse", lambda node: written.append(1) or unparse(node))
    table = "(_gr_build(Table, {'rows': %r}), (58,), {})" % [[i, str(i)] for i in range(2000)]
    first = list(itertools.islice(mutate.substitutions(table, ["0", "'x'"]), 5))
    # the input as given, then one per input tried (a literal in place of itself gives the
    # input again, and is not taken): a few, not one per place of the table's 6,000
    assert len(first) == 5 and len(written) <= 1 + 5 + 2


def test_a_path_resolver_tells_apart_the_mutants_of_its_last_segment_check(sandbox):
    """boltons' ``resolve_path_parts`` rewarded ``path_parts[-2:]`` (and ``[-0:]``, and ``'..'``
    changed): its tests never ended a path in '..'. The mutated line's literals now go into
    the inputs hunted against the mutants that survive."""
    sandboxed = script(DOT_SEGMENTS, "resolve")
    code = generated(sandbox, DOT_SEGMENTS, "resolve").code
    for wrong in ("parts[-2:]", "parts[-0:]", "parts[:1]"):
        assert _rejected(sandbox, sandboxed, code, textwrap.dedent(DOT_SEGMENTS).replace("parts[-1:]", wrong)), wrong
