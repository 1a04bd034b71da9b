"""The executors side by side: the oracle over HumanEval and a corpus build of PyPI packages,
on the local executor and on Ray with one and with two simulated nodes, in one run.

An untimed pass on the local executor runs first, so that what a first use leaves on disk
(the references of the tasks' verdicts, packages the builds install, unpacked sdists)
serves every configuration alike. Every configuration then runs the same work with the
same number of workers (``--workers``,
default 2) and the same seed, and must give the same result: the run's summary and
episodes, the corpus's task ids (the script checks it and records ``same_results``).
Recorded per configuration: the start-up time (Ray instance, actors, their sandboxes),
the wall time of each workload, its throughput (episodes/s, repositories/min) and its
efficiency, the throughput relative to the local executor's in the same run.

On one machine a "node" of ``ray.cluster_utils.Cluster`` is a set of processes, so two
nodes share the same cores: these figures measure the executor's overhead (serialising
units, actor calls, one sandbox per actor instead of one shared), not a speed-up, which
needs more machines (or more cores than workers).

Sources are ``pypi:NAME==VERSION`` sdists, downloaded once into the gym-repost cache
(``$GYM_REPOST_HOME``, default ``~/.cache/gym-repost``), the cache the tests use.

Usage::

    python benchmarks/ray_scaling.py [--tasks /tmp/humaneval.jsonl] [--packages toolz==1.2.0 ...]
        [--max-candidates 3] [--workers 2] [--configs local,ray-1-node,ray-2-nodes] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import append_record, machine, now
from gym_repost.construct.corpus import build_corpus
from gym_repost.construct.ingest import ingest
from gym_repost.construct.pipeline import BuildSettings
from gym_repost.evaluate import RunConfig, RunDir, evaluate
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.executor import Executor, LocalExecutor, RayExecutor
from gym_repost.policy import load_policy
from gym_repost.sandbox import Sandbox, sandbox_config
from gym_repost.task import FunctionTask, load_tasks

# Small pure-Python packages with permissive licenses and test suites, of several kinds:
# functional utilities, text, versions, tables, data structures, a config parser, a query language.
PACKAGES = (
    "toolz==1.2.0",
    "inflection==0.5.1",
    "humanize==4.17.0",
    "semver==3.1.1",
    "python-slugify==9.2.0",
    "more-itertools==11.2.1",
    "tabulate==0.10.0",
    "boltons==26.2.0",
    "toml==0.10.2",
    "jmespath==1.0.1",
)
CONFIGS = ("local", "ray-1-node", "ray-2-nodes")


@dataclass(frozen=True)
class Ready:
    """A warm-up unit: the worker's sandbox runs one command."""

    def __call__(self, item: int, sandbox: Sandbox | None) -> int:
        assert sandbox is not None
        return sandbox.run(files={}, command=["true"], timeout=60.0).returncode + item


@contextmanager
def executor_for(config: str, workers: int) -> Iterator[Executor]:
    """The executor of a configuration (a simulated cluster for the Ray ones)."""
    sandbox = sandbox_config("local", workers=workers)
    if config == "local":
        with LocalExecutor(workers, sandbox) as executor:
            yield executor
        return
    import ray
    from ray.cluster_utils import Cluster

    os.environ.pop("RAY_ADDRESS", None)
    nodes = 1 if config == "ray-1-node" else 2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": workers if nodes == 1 else 1, "include_dashboard": False},
    )
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=workers - 1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        with RayExecutor(workers, sandbox, address=cluster.address) as executor:
            yield executor
    finally:
        ray.shutdown()
        cluster.shutdown()


def humaneval_oracle(tasks: list[FunctionTask], executor: Executor, workers: int) -> tuple[float, Any]:
    config = RunConfig(tasks="humaneval", tasks_digest=tasks_digest(tasks), policy="oracle", seed=0, workers=workers)
    with tempfile.TemporaryDirectory() as run:
        started = time.perf_counter()
        summary = evaluate(tasks, load_policy("oracle"), config, RunDir(run), executor=executor)
        elapsed = time.perf_counter() - started
        episodes = sorted((e.task_id, e.status, e.code) for e in RunDir(run).episodes())
    return elapsed, (summary, episodes)


def corpus(sources: list[str], settings: BuildSettings, executor: Executor) -> tuple[float, Any, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        result = build_corpus(sources, Path(out) / "corpus.jsonl", settings, executor)
        elapsed = time.perf_counter() - started
    return elapsed, [t.id for t in result.tasks()], result.totals()


def measure(config: str, tasks: list[FunctionTask], sources: list[str], args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    with executor_for(config, args.workers) as executor:
        executor.map(Ready(), list(range(args.workers)))  # Ray up, actors and their sandboxes started
        startup = time.perf_counter() - started
        he_s, he_result = humaneval_oracle(tasks, executor, args.workers)
        settings = BuildSettings(max_candidates=args.max_candidates, test_executions=args.test_executions)
        build_s, task_ids, totals = corpus(sources, settings, executor)
    print(f"{config}: start-up {startup:.1f} s, HumanEval oracle {he_s:.1f} s, corpus {build_s:.1f} s", flush=True)
    return {
        "startup_s": round(startup, 2),
        "humaneval_oracle_s": round(he_s, 2),
        "episodes_per_s": round(len(tasks) / he_s, 3),
        "corpus_s": round(build_s, 2),
        "repositories_per_min": round(60 * len(sources) / build_s, 3),
        "corpus_tasks": len(task_ids),
        "corpus_totals": totals,
        "load_after": os.getloadavg(),
        "_results": (he_result, task_ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, default=Path("/tmp/humaneval.jsonl"), help="gym-repost build humaneval")
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES))
    parser.add_argument("--max-candidates", type=int, default=3)
    parser.add_argument("--test-executions", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not args.tasks.is_file():
        raise SystemExit(f"{args.tasks}: build it first: gym-repost build humaneval -o {args.tasks}")
    tasks = [t for t in load_tasks(args.tasks) if isinstance(t, FunctionTask)]
    sources = [f"pypi:{p}" for p in args.packages]
    for source in sources:  # downloaded (once) before anything is timed
        ingest(source)
    # One untimed pass on the local executor first: references kept on disk, packages the
    # builds install and unpacked sdists are then in place for every configuration alike.
    warm_up = measure("local", tasks, sources, args)
    warm_up.pop("_results")
    before = machine()
    figures = {config: measure(config, tasks, sources, args) for config in args.configs.split(",")}
    results = {config: f.pop("_results") for config, f in figures.items()}
    baseline = figures.get("local")
    for f in figures.values():
        if baseline:
            f["humaneval_efficiency"] = round(f["episodes_per_s"] / baseline["episodes_per_s"], 3)
            f["corpus_efficiency"] = round(f["repositories_per_min"] / baseline["repositories_per_min"], 3)
    first = next(iter(results.values()))
    record = {
        "benchmark": "ray_scaling",
        "date": now(),
        "machine": before,
        "workers": args.workers,
        "humaneval_tasks": len(tasks),
        "packages": args.packages,
        "max_candidates": args.max_candidates,
        "test_executions": args.test_executions,
        "warm_up_pass": warm_up,
        "configs": figures,
        "same_results": all(r == first for r in results.values()),
        "same_humaneval_results": all(r[0] == first[0] for r in results.values()),
        "same_corpus_task_ids": all(r[1] == first[1] for r in results.values()),
        "corpus_task_ids_differing": {
            config: sorted(set(r[1]) ^ set(first[1])) for config, r in results.items() if r[1] != first[1]
        },
    }
    print(
        "same results in every configuration:",
        record["same_results"],
        "| efficiency vs local:",
        {c: (f.get("humaneval_efficiency"), f.get("corpus_efficiency")) for c, f in figures.items()},
    )
    if not args.no_record:
        print(f"recorded in {append_record('ray_scaling', record)}")


if __name__ == "__main__":
    main()
