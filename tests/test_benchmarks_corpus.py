"""The corpus benchmark's driver: its cost ledger adds up the calls of a build that was
killed and resumed, and it says after each unit where the build stands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.corpus_pypi import CostLedger, Progress
from gym_repost.construct.corpus import RepositoryBuild, Unit


class _Meter:
    source = "a test's meter"

    def __init__(self) -> None:
        self.cpu = 0.0

    def used(self) -> float:
        return self.cpu


def _unit_built(source: str, tasks: int, candidates: int, chunk: tuple[int, int] | None = None) -> RepositoryBuild:
    build = RepositoryBuild(source, statistics={"table2": {"candidate functions": candidates}}, seconds=12.4)
    build.chunk = chunk
    build.tasks = [object()] * tasks  # type: ignore[list-item]  # only counted
    return build


def test_a_resumed_build_counts_on_from_the_units_and_cpu_of_its_earlier_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "state" / "cost.json"
    units = [Unit("pypi:alpha==1.0 --hash=sha256:ab", (i, 100)) for i in range(2)] + [Unit("pypi:beta==2.0")]

    meter = _Meter()
    first = Progress(CostLedger(path, "digest-1", meter, started=0.0))  # type: ignore[arg-type]
    first.plan(units)
    meter.cpu = 3600.0
    first.unit(_unit_built(units[0].source, 7, 100, (0, 100)))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "corpus: 3 units of work (0 built by earlier calls)"
    assert out[1].startswith("[1/3] alpha==1.0 #0: 7 tasks of 100 candidates in 12 s | build so far: 1.00 CPU-h")
    assert json.loads(path.read_text())["units"] == 1

    # killed here; the next call starts its meter at 0 and adds to what the ledger holds
    meter = _Meter()
    again = Progress(CostLedger(path, "digest-1", meter, started=0.0))  # type: ignore[arg-type]
    again.plan(units)
    meter.cpu = 1800.0
    again.unit(_unit_built(units[2].source, 0, 0))
    failed = _unit_built(units[1].source, 0, 0, (1, 100))
    failed.error = "sandbox failure: no space left"
    again.unit(failed)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "corpus: 3 units of work (1 built by earlier calls)"
    assert out[1].startswith("[2/3] beta==2.0: 0 tasks of 0 candidates") and "1.50 CPU-h" in out[1]
    assert out[2].startswith("[3/3] alpha==1.0 #1: error: sandbox failure: no space left")
    ledger = json.loads(path.read_text())
    assert (ledger["units"], ledger["cpu_s"], ledger["calls"]) == (3, 5400.0, 2)

    # other settings or code: a build of its own, counted from nothing
    other = Progress(CostLedger(path, "digest-2", _Meter(), started=0.0))  # type: ignore[arg-type]
    other.plan(units)
    assert capsys.readouterr().out.strip() == "corpus: 3 units of work (0 built by earlier calls)"


def test_a_slice_built_into_the_state_of_another_counts_only_its_own_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--packages``: slices of the list built one after another into one state. The ledger
    holds every unit of the earlier slices; the count is of this slice's units, from the state."""
    from gym_repost.construct.corpus import CorpusState
    from gym_repost.construct.pipeline import BuildSettings

    state = CorpusState(tmp_path / "state", BuildSettings(max_candidates=0))
    earlier = _unit_built("pypi:alpha==1.0", 3, 10)
    earlier.tasks = []
    state.save(earlier)
    ledger = CostLedger(tmp_path / "state" / "cost.json", "digest-1", _Meter(), started=0.0)  # type: ignore[arg-type]
    ledger.prior["units"] = 4  # the earlier slices: alpha and three units of others
    slice_units = [Unit("pypi:beta==2.0", (0, 100)), Unit("pypi:beta==2.0", (1, 100))]
    progress = Progress(ledger, state)
    progress.plan(slice_units)
    built = _unit_built("pypi:beta==2.0", 0, 100, (0, 100))
    built.tasks = []
    progress.unit(built)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "corpus: 2 units of work (0 built by earlier calls)"
    assert out[1].startswith("[1/2] beta==2.0 #0: 0 tasks of 100 candidates")
    state.save(built)
    again = Progress(ledger, state)
    again.plan([Unit("pypi:alpha==1.0"), *slice_units])
    assert capsys.readouterr().out.strip() == "corpus: 3 units of work (2 built by earlier calls)"


def test_a_slice_of_repositories_an_earlier_record_built_is_a_second_build(tmp_path: Path) -> None:
    from benchmarks.corpus_pypi import second_build

    records = tmp_path / "corpus_pypi.jsonl"
    assert not second_build(records, "d1", ["pypi:toolz==1"])  # no records yet
    earlier = {"settings_digest": "d1", "facts": {"pypi:toolz==1": {}, "pypi:boltons==2": {}}}
    other_code = {"settings_digest": "d0", "facts": {"pypi:funcy==3": {}}}
    records.write_text(
        "\n".join([json.dumps(earlier), "not json", json.dumps(other_code), json.dumps({"totals": {}})]) + "\n",
        encoding="utf-8",
    )
    assert second_build(records, "d1", ["pypi:toolz==1"])
    assert second_build(records, "d1", ["pypi:boltons==2", "pypi:toolz==1"])
    assert not second_build(records, "d1", ["pypi:toolz==1", "pypi:funcy==3"])  # funcy: new to d1
    assert not second_build(records, "d2", ["pypi:toolz==1"])  # other code: a first build
    assert not second_build(records, "d1", [])


def test_slices_recorded_one_after_another_from_one_state_count_each_cpu_second_once(tmp_path: Path) -> None:
    """Two slices built and recorded from one state: the second record's cost is what was
    spent since the first was recorded, so the records add up to the ledger (each record
    held the whole ledger, and the first slice's CPU was counted again in every later one)."""
    from benchmarks.corpus_pypi import _cost

    path = tmp_path / "state" / "cost.json"
    args = type("Args", (), {"executor": "local"})()
    result = type("Result", (), {"totals": lambda self: {"tasks": 10}, "repositories": [object()]})()

    meter = _Meter()
    ledger = CostLedger(path, "digest-1", meter, started=0.0)  # type: ignore[arg-type]
    meter.cpu = 3600.0
    ledger.add_unit()
    spent = ledger.totals()
    first = _cost(result, ledger, args, spent)  # type: ignore[arg-type]
    ledger.mark_recorded(spent)

    meter = _Meter()  # the second slice: another call, its meter from 0
    ledger = CostLedger(path, "digest-1", meter, started=0.0)  # type: ignore[arg-type]
    meter.cpu = 1800.0
    ledger.add_unit()
    ledger.add_unit()
    spent = ledger.totals()
    second = _cost(result, ledger, args, spent)  # type: ignore[arg-type]
    assert first is not None and second is not None
    assert (first["cpu_s"], second["cpu_s"]) == (3600.0, 1800.0)
    assert first["cpu_s"] + second["cpu_s"] == spent["cpu_s"] == 5400.0
    assert second["tasks_per_cpu_hour"] == 20.0
    assert second["calls"] == 1
    ledger.mark_recorded(spent)
    saved = json.loads(path.read_text())
    assert {k: saved["recorded"][k] for k in ("cpu_s", "units", "calls")} == {"cpu_s": 5400.0, "units": 3, "calls": 2}

    # other code: nothing recorded yet
    assert CostLedger(path, "digest-2", _Meter(), started=0.0).recorded["cpu_s"] == 0  # type: ignore[arg-type]
