"""Task model and task-set I/O, bad input included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym_repost.errors import TaskFormatError
from gym_repost.task import SCHEMA_VERSION, FunctionTask, load_tasks, save_tasks


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_round_trip_keeps_every_field(tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask) -> None:
    out = tmp_path / "tasks.jsonl"
    assert save_tasks([function_task, method_task], out) == 2
    loaded = load_tasks(out)
    assert [t.model_dump() for t in loaded] == [function_task.model_dump(), method_task.model_dump()]
    assert loaded.errors == []
    assert loaded[0].schema_version == SCHEMA_VERSION


def test_id_is_a_content_hash(function_task: FunctionTask) -> None:
    assert function_task.id == function_task.content_hash()
    changed = function_task.model_copy(deep=True)
    changed.evaluation.timeout = 11.0
    assert changed.content_hash() != function_task.id


def test_malformed_line_names_file_line_and_field_and_others_still_load(
    tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask
) -> None:
    bad = function_task.model_dump(mode="json")
    del bad["target"]["signature"]
    path = _write_lines(
        tmp_path / "t.jsonl",
        [function_task.model_dump_json(), json.dumps(bad), "{not json", method_task.model_dump_json()],
    )
    tasks = load_tasks(path)
    assert [t.name for t in tasks] == [function_task.name, method_task.name]
    first, second = tasks.errors
    assert (first.path, first.line, first.field) == (str(path), 2, "target.signature")
    assert f"{path}:2: field 'target.signature'" in str(first)
    assert second.line == 3 and "not valid JSON" in str(second)


def test_strict_mode_raises_on_first_bad_line(tmp_path: Path, function_task: FunctionTask) -> None:
    path = _write_lines(tmp_path / "t.jsonl", ["[]", function_task.model_dump_json()])
    with pytest.raises(TaskFormatError, match="expected a JSON object"):
        load_tasks(path, strict=True)


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (lambda d: d.pop("schema_version"), "schema_version", "schema_version"),
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "schema_version", "newer"),
        (lambda d: d.update(kind="essay"), "kind", "unknown task kind"),
        (lambda d: d.update(unexpected=1), "unexpected", "Extra inputs"),
        (lambda d: d["evaluation"].update(insert_line=-1), "evaluation.insert_line", "greater than"),
        (lambda d: d.update(name="edited"), "id", "content hash"),
    ],
)
def test_each_kind_of_bad_line(tmp_path: Path, function_task: FunctionTask, mutate, field: str, message: str) -> None:
    data = function_task.model_dump(mode="json")
    mutate(data)
    tasks = load_tasks(_write_lines(tmp_path / "t.jsonl", [json.dumps(data)]))
    assert len(tasks) == 0
    (error,) = tasks.errors
    assert error.field == field and message in str(error)


def test_duplicate_ids_are_reported(tmp_path: Path, function_task: FunctionTask) -> None:
    line = function_task.model_dump_json()
    tasks = load_tasks(_write_lines(tmp_path / "t.jsonl", [line, "", line]))
    assert len(tasks) == 1 and tasks.errors[0].line == 3 and "duplicate" in str(tasks.errors[0])


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="no such task file"):
        load_tasks(tmp_path / "absent.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"name": "caf\xe9"}\n')
    with pytest.raises(TaskFormatError, match="not UTF-8"):
        load_tasks(tmp_path / "latin1.jsonl")


def test_save_is_atomic_and_readable(tmp_path: Path, function_task: FunctionTask) -> None:
    out = tmp_path / "sub" / "tasks.jsonl"
    save_tasks([function_task], out)
    assert [p.name for p in out.parent.iterdir()] == ["tasks.jsonl"]
    assert out.stat().st_mode & 0o044  # readable by others, like any file the user writes


def test_repository_view_hides_the_body(function_task: FunctionTask) -> None:
    view = function_task.repository.files[function_task.repository.target_file]
    assert "total += clamp" not in view
    assert '"""Sum of scaled values' in view and "def score(values, cap=100):" in view
    assert function_task.target.source.startswith("def score(values, cap=100):")
    assert function_task.metadata.num_asserts == 3 and function_task.metadata.num_tests == 1


def test_lone_surrogate_is_rejected_naming_file_line_and_field(
    tmp_path: Path, function_task: FunctionTask, method_task: FunctionTask
) -> None:
    line = function_task.model_dump_json()
    assert '"repo":"tests/tiny"' in line
    bad = line.replace('"repo":"tests/tiny"', '"repo":"tests\\ud800tiny"', 1)
    bad_key = method_task.model_dump_json().replace('"tiny/counter.py":', '"tiny/\\udc00.py":', 1)
    path = _write_lines(tmp_path / "t.jsonl", [line, bad, bad_key])
    tasks = load_tasks(path)
    assert [t.id for t in tasks] == [function_task.id]
    first, second = tasks.errors
    assert (first.line, first.field, second.line, second.field) == (
        2,
        "provenance.repo",
        3,
        "repository.files.tiny/\\udc00.py",
    )
    assert "lone surrogate \\ud800" in str(first) and str(first).startswith(f"{path}:2: field 'provenance.repo'")
    str(second).encode("utf-8")  # the message itself prints anywhere
    with pytest.raises(TaskFormatError, match=r"t\.jsonl:2: field 'provenance\.repo': the text is not valid Unicode"):
        load_tasks(path, strict=True)


def test_deep_nesting_and_huge_integers_are_rejected(tmp_path: Path, function_task: FunctionTask) -> None:
    deep = function_task.model_dump(mode="json")
    deep["metadata"]["checks"]["x"] = json.loads("[" * 100 + "]" * 100)
    lines = ["[" * 5000 + "]" * 5000, json.dumps(deep), '{"schema_version": ' + "1" * 5000 + "}"]
    tasks = load_tasks(_write_lines(tmp_path / "t.jsonl", lines))
    assert [(e.line, e.field) for e in tasks.errors] == [(1, None), (2, "metadata.checks.x" + ".0" * 61), (3, None)]
    assert "nested more than 64 levels deep" in str(tasks.errors[0]) and "not valid JSON" in str(tasks.errors[2])


_PLACES = ["context", "provenance.repo", "metadata.notes", "file content", "file name"]


def _put(data: dict, place: str, text: str) -> tuple[dict, str]:
    """Put ``text`` at ``place`` of a task's JSON; the dotted field a rejection must name."""
    if place == "file content":
        data["repository"]["files"]["extra.txt"] = text
        return data, "repository.files.extra.txt"
    if place == "file name":
        data["repository"]["files"][text] = "x"
        return data, "repository.files." + text.encode("utf-8", "backslashreplace").decode("utf-8")
    if place == "metadata.notes":
        data["metadata"]["notes"] = [text]
        return data, "metadata.notes.0"
    section, _, key = place.rpartition(".")
    (data[section] if section else data)[key] = text
    return data, place


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=st.text(alphabet=st.characters(exclude_categories=()), max_size=30), place=st.sampled_from(_PLACES))
def test_any_json_string_loads_or_is_rejected_clearly(
    tmp_path_factory: pytest.TempPathFactory, function_task: FunctionTask, text: str, place: str
) -> None:
    data, field = _put(function_task.model_dump(mode="json"), place, text)
    encodable = not any("\ud800" <= c <= "\udfff" for c in text)  # no lone surrogate
    if encodable:
        data["id"] = FunctionTask.model_validate(data).content_hash()
    path = tmp_path_factory.mktemp("tasks") / "t.jsonl"
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")  # ensure_ascii: surrogates become \\u escapes
    tasks = load_tasks(path)
    if encodable:
        assert len(tasks) == 1 and tasks.errors == []
        assert tasks[0].model_dump(mode="json") == data
    else:
        (error,) = tasks.errors
        assert (error.path, error.line, error.field) == (str(path), 1, field)
        assert "lone surrogate" in str(error)
        str(error).encode("utf-8")
