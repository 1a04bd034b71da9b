"""The TestFileTask model: JSONL round trip with function tasks, content hash, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testfile_tasks import GROUND_TRUTH, make_testfile_task

from gym_repost.errors import TaskFormatError
from gym_repost.task import FunctionTask, TestFileTask, load_tasks, save_tasks


def test_mixed_task_sets_round_trip(tmp_path: Path, function_task: FunctionTask) -> None:
    testfile = make_testfile_task()
    out = tmp_path / "mixed.jsonl"
    assert save_tasks([function_task, testfile], out) == 2
    loaded = load_tasks(out, strict=True)
    assert [type(t) for t in loaded] == [FunctionTask, TestFileTask]
    assert loaded[1].model_dump() == testfile.model_dump()
    assert loaded[1].ground_truth == GROUND_TRUTH and loaded[1].kind == "testfile"


def test_id_is_a_content_hash() -> None:
    task = make_testfile_task()
    changed = task.model_copy(deep=True)
    changed.evaluation.max_mutants = 7
    assert task.id == task.content_hash() != changed.content_hash()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("evaluation", "test_path"), "../escape.py", "evaluation"),
        (("evaluation", "focal_file"), "/etc/passwd", "evaluation"),
        (("evaluation", "focal_file"), "tinypkg/absent.py", None),
        (("evaluation", "max_mutants"), -1, "evaluation.max_mutants"),
    ],
)
def test_bad_lines_name_the_field(tmp_path: Path, path: tuple[str, str], value: object, field: str | None) -> None:
    data = make_testfile_task().model_dump(mode="json")
    data[path[0]][path[1]] = value
    out = tmp_path / "bad.jsonl"
    out.write_text(json.dumps(data) + "\n")
    with pytest.raises(TaskFormatError) as error:
        load_tasks(out, strict=True)
    assert error.value.line == 1
    if field:
        assert (error.value.field or "").startswith(field)
