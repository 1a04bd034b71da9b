"""Importers of published task sets and of hand-written manifests, bad input included."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_repost.construct.importers.manifest import import_manifest
from gym_repost.construct.importers.repost_eval import import_repost_eval
from gym_repost.construct.sources import import_source
from gym_repost.context import parse_context
from gym_repost.errors import BuildError, ConfigError
from gym_repost.task import FunctionTask

REPOST_EVAL = Path(__file__).resolve().parents[3] / "shared" / "external" / "repost-eval"


def test_humaneval_has_164_tasks_with_tests(humaneval_tasks: list[FunctionTask]) -> None:
    assert len(humaneval_tasks) == 164
    assert len({t.id for t in humaneval_tasks}) == 164
    first = humaneval_tasks[0]
    assert first.name == "HumanEval/0" and first.provenance.license == "MIT"
    assert "check(has_close_elements_new_implementation)" in first.evaluation.script
    assert "for idx, elem" not in first.repository.files[first.repository.target_file]
    assert sum(t.metadata.num_asserts >= 3 for t in humaneval_tasks) >= 150


def test_parse_context_keeps_fences_inside_docstrings() -> None:
    md = (
        '```python\n## a/b.py\ndef f():\n    """Example:\n        ```python\n        f()\n'
        '        ```\n    """\n```\n\n\n```python\n# c.py\nX = 1\n```\n'
    )
    files = parse_context(md)
    assert list(files) == ["a/b.py", "c.py"]
    assert '        ```\n    """' in files["a/b.py"] and files["c.py"] == "X = 1\n"


@pytest.mark.skipif(not REPOST_EVAL.is_dir(), reason="the RepoST-Eval data is not beside the project")
def test_repost_eval_imports_all_296() -> None:
    items = list(import_repost_eval(REPOST_EVAL))
    tasks = [t for t in items if isinstance(t, FunctionTask)]
    assert len(tasks) == 296 and len(items) == 296
    assert sum(t.target.class_name is not None for t in tasks) == 165
    assert {t.provenance.repo for t in tasks}.__len__() == 99
    noted = {t.name.split("/")[1].split("-")[0] for t in tasks if t.metadata.notes}
    assert noted == {"471", "618", "623", "1027"}  # scripts that define the candidate's name
    method = next(t for t in tasks if t.name == "repost-eval/67-P115ECDHCipher.decode_token")
    assert method.evaluation.indent == "    " and method.target.decorators == ["staticmethod"]
    assert method.metadata.checks["test_correctness_check"] == "yes"
    assert "pycryptodome" in method.evaluation.requirements


def test_repost_eval_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="not found"):
        list(import_repost_eval(tmp_path))
    (tmp_path / "checked_test_set_final.json").write_text("{oops")
    with pytest.raises(BuildError, match="not valid JSON"):
        list(import_repost_eval(tmp_path))
    (tmp_path / "checked_test_set_final.json").write_text('[{"idx": "1"}, 3]')
    errors = list(import_repost_eval(tmp_path))
    assert all(isinstance(e, BuildError) for e in errors) and "missing or non-string" in str(errors[0])


def _manifest(tmp_path: Path, task_table: str) -> Path:
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "m.py").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "s.py").write_text(
        "def f(x):\n    return x + 1\n\n\ndef test_f():\n"
        "    for x in (1, 2, 3):\n        assert f(x) == f_new_implementation(x)\n\n\n"
        "if __name__ == '__main__':\n    test_f()\n"
    )
    path = tmp_path / "manifest.toml"
    path.write_text('[repository]\nname = "r"\npath = "repo"\nlicense = "MIT"\n\n' + task_table)
    return path


def test_manifest_builds_tasks(tmp_path: Path) -> None:
    path = _manifest(tmp_path, '[[task]]\nfile = "pkg/m.py"\nqualname = "f"\nscript = "s.py"\n')
    (task,) = list(import_manifest(path))
    assert isinstance(task, FunctionTask) and task.name == "r/f" and task.provenance.license == "MIT"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[[task]]\nfile = "pkg/m.py"\nqualname = "g"\nscript = "s.py"\n', "g not found in pkg/m.py"),
        ('[[task]]\nfile = "pkg/m.py"\nqualname = "f"\nscript = "absent.py"\n', "script absent.py not found"),
        ('[[task]]\nfile = "pkg/x.py"\nqualname = "f"\nscript = "s.py"\n', "no file 'pkg/x.py'"),
    ],
)
def test_manifest_entry_errors_are_reported_per_task(tmp_path: Path, table: str, message: str) -> None:
    (error,) = list(import_manifest(_manifest(tmp_path, table)))
    assert isinstance(error, BuildError) and message in str(error) and "task #1" in str(error)


def test_manifest_level_errors(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "[[task]]\nfile = 3\n")
    with pytest.raises(BuildError, match="field 'task.0.file'"):
        list(import_manifest(path))
    path.write_text("not = [toml")
    with pytest.raises(BuildError, match="not valid TOML"):
        list(import_manifest(path))


def test_unknown_sources_name_the_known_forms() -> None:
    with pytest.raises(ConfigError, match="humaneval, repost-eval:PATH"):
        import_source("ftp://example.org/x")


def test_no_task_context_holds_the_target_body(humaneval_tasks: list[FunctionTask]) -> None:
    """The dependency-only context shows the target like the repository view: body removed."""
    from gym_repost.analysis.source import find_function
    from gym_repost.task import load_tasks

    tasks = list(humaneval_tasks) + list(load_tasks(Path(__file__).resolve().parents[2] / "tasks" / "demo.jsonl"))
    if REPOST_EVAL.is_dir():
        tasks += [t for t in import_repost_eval(REPOST_EVAL) if isinstance(t, FunctionTask)]
    for task in tasks:
        span = find_function(task.target.source, task.target.name)
        body = "\n".join(ln.strip() for ln in task.target.source.split("\n")[span.body_start - 1 :] if ln.strip())
        context = "\n".join(ln.strip() for ln in task.context.split("\n") if ln.strip())
        assert len(body) < 20 or body not in context, task.name
        assert "Body removed" in task.context or task.repository.target_file not in task.context, task.name
