"""Mining test-file tasks: pairing heuristics on a small repository, measurement in the sandbox."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gym_repost.construct.ingest import ingest
from gym_repost.construct.stages import SourceRepository
from gym_repost.construct.testfile import (
    TestFileBuildSettings,
    build_testfile_tasks,
    find_pairs,
    is_test_file,
)
from gym_repost.sandbox import Sandbox
from gym_repost.task import TestFileTask, load_tasks, save_tasks

REPO = {
    "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\n",
    "pyproject.toml": '[project]\nname = "mini"\nversion = "1.0"\nlicense = {text = "MIT"}\n',
    "src/mini/__init__.py": "from .shapes import Square, area\n",
    "src/mini/shapes.py": textwrap.dedent("""\
        class Square:
            def __init__(self, side):
                if side < 0:
                    raise ValueError("negative side")
                self.side = side


        def area(shape):
            return shape.side * shape.side
        """),
    "src/mini/text.py": textwrap.dedent("""\
        def shout(text, times=1):
            return (text.upper() + "!") * times


        def whisper(text):
            return text.lower()
        """),
    "src/mini/lonely.py": "def alone():\n    return 1\n",
    "tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef side():\n    return 3\n",
    "tests/helpers.py": "LOUD = 'HI!'\n",
    "tests/test_shapes.py": textwrap.dedent("""\
        import pytest

        from mini import Square, area


        def test_area(side):
            assert area(Square(side)) == 9


        def test_negative():
            with pytest.raises(ValueError):
                Square(-1)
        """),
    "tests/test_words.py": "from helpers import LOUD\n\nfrom mini.text import shout\n\n\n"
    "def test_shout():\n    assert shout('hi') == LOUD\n",
    "tests/test_text_failing.py": "from mini.text import whisper\n\n\n"
    "def test_whisper():\n    assert whisper('A') == 'A'\n",
    "tests/test_lonely_broken.py": "import not_installed_anywhere\n\nfrom mini.lonely import alone\n\n\n"
    "def test_alone():\n    assert alone() == 1\n",
    "tests/test_misc.py": "def test_nothing():\n    assert 1 + 1 == 2\n",
}


@pytest.fixture
def mini_repo(tmp_path: Path) -> SourceRepository:
    for path, text in REPO.items():
        (tmp_path / "mini" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mini" / path).write_text(text)
    return ingest(tmp_path / "mini")


def test_test_file_names() -> None:
    assert is_test_file("tests/test_x.py") and is_test_file("x_test.py")
    assert not is_test_file("tests/conftest.py") and not is_test_file("tests/helpers.py")


def test_pairing_by_name_and_imports(mini_repo: SourceRepository) -> None:
    pairs, drops = find_pairs(mini_repo)
    found = {p.test_path: (p.focal_file, p.focal_module, p.evidence) for p in pairs}
    assert found == {
        # `from mini import Square, area`: the package re-exports them from shapes.
        "tests/test_shapes.py": ("src/mini/shapes.py", "mini.shapes", "name+import"),
        "tests/test_words.py": ("src/mini/text.py", "mini.text", "import"),
        # test_text_failing -> "text_failing", then "text".
        "tests/test_text_failing.py": ("src/mini/text.py", "mini.text", "name+import"),
        "tests/test_lonely_broken.py": ("src/mini/lonely.py", "mini.lonely", "name+import"),
    }
    assert all(p.python_path == ("", "src") for p in pairs)
    assert [(d.file, d.reason) for d in drops] == [("tests/test_misc.py", "no focal file")]


def test_build_keeps_pairs_whose_ground_truth_runs(
    mini_repo: SourceRepository, sandbox: Sandbox, tmp_path: Path
) -> None:
    seen: list[object] = []
    tasks, drops = build_testfile_tasks(mini_repo, sandbox, on_pair=seen.append)
    assert sorted(t.evaluation.test_path for t in tasks) == ["tests/test_shapes.py", "tests/test_words.py"]
    reasons = {d.file: (d.stage, d.reason) for d in drops}
    assert reasons == {
        "tests/test_misc.py": ("extract", "no focal file"),
        "tests/test_text_failing.py": ("execution", "ground truth fails"),
        "tests/test_lonely_broken.py": ("execution", "ground truth does not run"),
    }
    assert "not_installed_anywhere" in next(d.detail for d in drops if d.file == "tests/test_lonely_broken.py")
    assert len(seen) == 4

    shapes = next(t for t in tasks if t.evaluation.test_path == "tests/test_shapes.py")
    assert "tests/test_shapes.py" not in shapes.repository.files and "tests/conftest.py" in shapes.repository.files
    assert shapes.repository.target_file == "src/mini/shapes.py" and shapes.ground_truth == REPO["tests/test_shapes.py"]
    assert shapes.provenance.repo == "mini" and shapes.provenance.version == "1.0"
    ref = shapes.reference
    assert (ref.tests, ref.passed, ref.execution_rate, ref.pass_rate, ref.line_coverage) == (2, 2, 1.0, 1.0, 1.0)
    assert ref.branch_coverage == 1.0 and ref.mutation_score is not None and ref.mutants_total > 0
    assert shapes.metadata.num_tests == 2 and shapes.metadata.num_asserts == 1
    assert shapes.id == shapes.content_hash()

    out = tmp_path / "mini-tests.jsonl"
    save_tasks(tasks, out)
    loaded = load_tasks(out, strict=True)
    assert [t.model_dump() for t in loaded] == [t.model_dump() for t in tasks]
    assert all(isinstance(t, TestFileTask) for t in loaded)


def test_max_pairs_and_seed(mini_repo: SourceRepository, sandbox: Sandbox) -> None:
    settings = TestFileBuildSettings(max_mutants=5)
    first, _ = build_testfile_tasks(mini_repo, sandbox, max_pairs=1, seed=0, settings=settings, workers=1)
    again, _ = build_testfile_tasks(mini_repo, sandbox, max_pairs=1, seed=0, settings=settings, workers=1)
    assert len(first) == 1 and first[0].id == again[0].id
    assert first[0].evaluation.max_mutants == 5 and first[0].reference.mutants_total <= 5


def test_the_pairs_measured_and_kept_do_not_depend_on_the_workers(
    mini_repo: SourceRepository, sandbox: Sandbox
) -> None:
    """Seed 0 orders words (kept), text_failing (dropped), shapes (kept), lonely_broken: the
    shortest run of that order holding two kept pairs is the first three, whatever the workers
    (three workers once measured words and text_failing, then skipped shapes)."""
    settings = TestFileBuildSettings(max_mutants=2)
    builds = []
    for workers in (1, 3):
        measured: list[object] = []
        tasks, drops = build_testfile_tasks(
            mini_repo, sandbox, max_pairs=2, seed=0, settings=settings, workers=workers, on_pair=measured.append
        )
        assert [t.evaluation.test_path for t in tasks] == ["tests/test_words.py", "tests/test_shapes.py"]
        assert len(measured) == 3 and "tests/test_lonely_broken.py" not in {d.file for d in drops}
        builds.append([t.id for t in tasks])
    assert builds[0] == builds[1]


@pytest.mark.network
@pytest.mark.slow
def test_a_real_package(pypi_sdist: Callable[..., SourceRepository], sandbox: Sandbox) -> None:
    repo = pypi_sdist("inflection", "0.5.1")
    # 8 mutants: each runs the 455 tests until one fails; 20 took 2.5 times as long to check the same
    tasks, drops = build_testfile_tasks(repo, sandbox, settings=TestFileBuildSettings(max_mutants=8))
    assert [t.name for t in tasks] == ["inflection/test_inflection.py"] and drops == []
    ref = tasks[0].reference
    assert ref.tests > 400 and ref.pass_rate == 1.0 and ref.line_coverage > 0.9
    assert ref.mutants_total == 8 and ref.mutation_score is not None and ref.mutation_score > 0.5
