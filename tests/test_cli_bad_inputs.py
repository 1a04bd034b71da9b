"""A battery of bad inputs to the command line (issue 34): each ends in exit status 2, no
traceback, one ``error:`` line that names the problem, and nothing written or changed.

Every case runs ``gym-repost`` in a subprocess (``python -m gym_repost.cli``) from the
worktree's root, against files made once per module (``{fx}``: task files, run
directories, policies) and a fresh folder per case (``{tmp}``); both are compared, path by
path with sizes and modification times, before and after the command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from gym_repost.evaluate import Episode, RunConfig, RunDir
from gym_repost.evaluate.runner import tasks_digest
from gym_repost.policy.loader import policy_fingerprint
from gym_repost.task import load_tasks, save_tasks

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("demo/pricing.apply_discount", "demo/money.parse_money")


@dataclass(frozen=True)
class Bad:
    """One bad input: the arguments (``{fx}``, ``{tmp}`` and ``{tasks}`` filled in), what
    its error line must say, and the program (``gym-repost`` unless a script's path)."""

    name: str
    args: tuple[str, ...]
    says: str
    program: str = ""


def bad(name: str, args: str, says: str, program: str = "") -> Bad:
    return Bad(name, tuple(args.split()), says, program)


EVAL = "eval {tasks} -o {tmp}/run"
ORACLE = EVAL + " --policy oracle"

CASES = [
    # ------------------------------------------------------------ usage
    bad("unknown-command", "nope", "No such command 'nope'"),
    bad("eval-no-arguments", "eval", "Missing argument 'TASKS'"),
    bad("eval-no-policy", "eval {tasks} -o {tmp}/run", "Missing option '--policy'"),
    bad("eval-no-output", "eval {tasks} --policy oracle", "Missing option '-o'"),
    bad("eval-unknown-option", ORACLE + " --bogus", "No such option: --bogus"),
    bad("eval-samples-zero", ORACLE + " -n 0", "'--samples': Input should be greater than or equal to 1"),
    bad("eval-samples-not-a-number", ORACLE + " -n abc", "'--samples': Input should be a valid integer"),
    bad("eval-repairs-negative", ORACLE + " --repairs -1", "'--repairs'"),
    bad("eval-workers-zero", ORACLE + " --workers 0", "'--workers'"),
    bad("eval-max-steps-zero", ORACLE + " --max-steps 0", "'--max-steps'"),
    bad("eval-reward-not-a-choice", ORACLE + " --reward foo", "'foo' is not one of 'binary', 'shaped'"),
    bad("eval-executor-not-a-choice", ORACLE + " --executor k8s", "'k8s' is not one of 'local', 'ray'"),
    bad("eval-seed-not-a-number", ORACLE + " --seed x", "'--seed'"),
    bad("eval-limit-zero", ORACLE + " --limit 0", "'--limit'"),
    bad("eval-task-matches-nothing", ORACLE + " --task nomatch*", "no task matches --task 'nomatch*'"),
    bad("eval-option-without-value", ORACLE + " --policy-arg", "'--policy-arg' requires an argument"),
    bad("validate-mutants-negative", "validate {tasks} --mutants -1", "'--mutants'"),
    bad("validate-limit-zero", "validate {tasks} --limit 0", "'--limit'"),
    bad("validate-task-matches-nothing", "validate {tasks} --task zzz", "no task matches --task 'zzz'"),
    bad("validate-json-is-a-directory", "validate {tasks} --json {fx}/adir", "--json {fx}/adir is a directory"),
    bad("validate-json-under-a-file", "validate {tasks} --json {fx}/afile.txt/v.json", "{fx}/afile.txt is a file"),
    # ------------------------------------------------------------ task files
    bad("eval-tasks-is-a-directory", "eval {fx}/adir --policy oracle -o {tmp}/run", "is a directory; give a task file"),
    bad("validate-tasks-is-a-directory", "validate {fx}/adir", "{fx}/adir: is a directory"),
    bad("eval-missing-task-file", "eval {fx}/missing.jsonl --policy oracle -o {tmp}/run", "no such task file"),
    bad("eval-empty-task-file", "eval {fx}/empty.jsonl --policy oracle -o {tmp}/run", "no usable tasks"),
    bad("eval-readme-as-tasks", "eval {fx}/readme.md --policy oracle -o {tmp}/run", "not a JSONL task file"),
    bad("eval-tasks-not-utf8", "eval {fx}/latin1.jsonl --policy oracle -o {tmp}/run", "not UTF-8 text"),
    bad(
        "eval-tasks-unterminated-string",
        "eval {fx}/unterminated.jsonl --policy oracle -o {tmp}/run",
        "Unterminated string starting at column",
    ),
    bad("eval-tasks-json-arrays", "eval {fx}/arrays.jsonl --policy oracle -o {tmp}/run", "is a JSON object"),
    bad("eval-tasks-wrong-schema", "eval {fx}/schema.jsonl --policy oracle -o {tmp}/run", "no usable tasks"),
    bad("eval-tasks-bad-field", "eval {fx}/badfield.jsonl --policy oracle -o {tmp}/run", "no usable tasks"),
    bad("eval-tasks-lone-surrogate", "eval {fx}/surrogate.jsonl --policy oracle -o {tmp}/run", "no usable tasks"),
    bad("eval-tasks-edited-line", "eval {fx}/edited.jsonl --policy oracle -o {tmp}/run", "no usable tasks"),
    bad("validate-readme", "validate {fx}/readme.md", "not a JSONL task file"),
    bad("serve-tasks-is-a-directory", "serve {fx}/adir", "is a directory"),
    bad("serve-port-out-of-range", "serve {tasks} --port 70000", "'--port'"),
    bad("serve-token-file-missing", "serve {tasks} --token-file {fx}/missing-token", "cannot read it"),
    # ------------------------------------------------------------ policies
    bad("policy-unknown", EVAL + " --policy gpt", "unknown policy 'gpt'"),
    bad("policy-file-missing", EVAL + " --policy {fx}/nofile.py:Agent", "policy file {fx}/nofile.py not found"),
    bad("policy-file-syntax-error", EVAL + " --policy {fx}/syntax.py:Agent", "SyntaxError"),
    bad("policy-class-missing", EVAL + " --policy {fx}/agent.py:Missing", "defines no 'Missing'"),
    bad("policy-without-act", EVAL + " --policy {fx}/noact.py:Agent", "lacks act"),
    bad("policy-constructor-raises", EVAL + " --policy {fx}/ctor.py:Agent", "could not be created: RuntimeError"),
    bad(
        "policy-oracle-with-an-option",
        ORACLE + " --policy-arg temperature=0.2",
        "policy 'oracle' could not be created: TypeError",
    ),
    bad("policy-arg-not-key-value", ORACLE + " --policy-arg oops", "expected KEY=VALUE"),
    bad("policy-module-missing", EVAL + " --policy no_such_module_xyz:Agent", "cannot import policy module"),
    bad("policy-claims-privilege", EVAL + " --policy {fx}/privileged.py:Cheat", "is a PrivilegedPolicy"),
    bad("policy-scripted-file-missing", EVAL + " --policy scripted:{fx}/missing.jsonl", "no such file"),
    bad(
        "policy-scripted-bad-json",
        EVAL + " --policy scripted:{fx}/badscript.jsonl",
        "badscript.jsonl:1: not valid JSON (Unterminated string starting at column",
    ),
    bad("policy-llm-unknown-provider", EVAL + " --policy llm:gemini/pro", "PROVIDER/MODEL"),
    bad(
        "policy-llm-misspelt-setting",
        EVAL + " --policy llm:openai-compatible/m --base-url http://127.0.0.1:9/v1 --policy-arg temprature=0",
        "'temprature'",
    ),
    bad("policy-base-url-without-llm", ORACLE + " --base-url http://127.0.0.1:9/v1", "--base-url applies to llm:"),
    bad(
        "policy-base-url-twice",
        EVAL + " --policy llm:openai-compatible/m --base-url http://x/v1 --policy-arg base_url=http://y/v1",
        "give the base URL once",
    ),
    bad("policy-empty-class-name", EVAL + " --policy {fx}/agent.py:", "unknown policy"),
    # ------------------------------------------------------------ run directories
    bad("eval-output-is-a-file", "eval {tasks} --policy oracle -o {fx}/afile.txt", "is a file, not a run directory"),
    bad(
        "eval-output-under-a-file",
        "eval {tasks} --policy oracle -o {fx}/afile.txt/run",
        "cannot create the run directory",
    ),
    bad(
        "eval-output-holds-another-run",
        "eval {tasks} --policy oracle -n 2 -o {fx}/run",
        "holds a different run (n: 1 there, 2 now); pass --overwrite",
    ),
    bad(
        "eval-output-holds-other-tasks",
        "eval {tasks} --policy oracle --limit 1 -o {fx}/run",
        "the tasks: another set than the run's (the task file, --task or --limit changed)",
    ),
    bad(
        "eval-output-holds-another-policy",
        "eval {tasks} --policy mutant -o {fx}/run",
        "policy: 'oracle' there, 'mutant' now",
    ),
    bad(
        "eval-policy-file-changed",
        "eval {tasks} --policy {fx}/agent.py:Agent -o {fx}/agent-run",
        "the policy file {fx}/agent.py changed since the run started",
    ),
    bad("eval-resume-not-utf8", "eval {tasks} --policy oracle -o {fx}/utf8-run", "episodes.jsonl:2: not UTF-8 text"),
    bad("eval-resume-damaged-config", "eval {tasks} --policy oracle -o {fx}/damaged-run", "config.json is damaged"),
    bad("eval-resume-config-not-utf8", "eval {tasks} --policy oracle -o {fx}/latin1-config-run", "not UTF-8 text"),
    bad("eval-unknown-sandbox", ORACLE + " --sandbox nope", "unknown sandbox backend 'nope'"),
    bad("eval-env-not-installed", ORACLE + " --env nowhere", "environment 'nowhere' is not installed"),
    bad("eval-interpreter-missing", ORACLE + " --python /nonexistent/python3", "interpreter not found"),
    bad("report-not-a-run", "report {fx}/adir", "is not a run directory"),
    bad("report-missing-run", "report {fx}/missing-run", "is not a run directory"),
    bad("report-not-utf8", "report {fx}/utf8-run", "episodes.jsonl:2: not UTF-8 text"),
    bad("report-damaged-config", "report {fx}/damaged-run", "config.json is damaged"),
    bad("report-output-is-a-file", "report {fx}/run -o {fx}/afile.txt", "{fx}/afile.txt is a file"),
    bad("report-output-holds-other-files", "report {fx}/run -o {fx}/adir", "holds something other than a report"),
    bad("report-several-without-output", "report {fx}/run {fx}/run", "say where to write the comparison"),
    bad("report-no-run", "report", "Missing argument 'RUN_DIR...'"),
    # ------------------------------------------------------------ build
    bad("build-empty-directory", "build {fx}/empty -o {tmp}/t.jsonl", "has no Python files (.py): nothing to build"),
    bad("build-empty-directory-testfile", "build {fx}/empty --kind testfile -o {tmp}/t.jsonl", "has no Python files"),
    bad("build-output-is-a-directory", "build tasks/demo/repo -o {fx}/adir", "-o {fx}/adir is a directory"),
    bad("build-output-under-a-file", "build tasks/demo/repo -o {fx}/afile.txt/t.jsonl", "is a file, not a folder"),
    bad("build-stats-is-a-directory", "build tasks/demo/repo -o {tmp}/t.jsonl --stats {fx}/adir", "--stats"),
    bad("build-unknown-source", "build svn://x -o {tmp}/t.jsonl", "no such directory, archive or PyPI"),
    bad("build-kind-not-a-choice", "build tasks/demo/repo --kind tests -o {tmp}/t.jsonl", "'tests' is not one of"),
    bad("build-split-not-a-choice", "build tasks/demo/repo --split test -o {tmp}/t.jsonl", "'test' is not one of"),
    bad("build-unknown-builder", "build tasks/demo/repo --builder gpt -o {tmp}/t.jsonl", "--builder gpt: choose"),
    bad("build-old-seconds-budget", "build tasks/demo/repo --test-budget 3 -o {tmp}/t.jsonl", "--test-executions"),
    bad("build-kill-rate-above-one", "build tasks/demo/repo --min-kill-rate 2 -o {tmp}/t.jsonl", "--min-kill-rate"),
    bad("build-testfile-from-humaneval", "build humaneval --kind testfile -o {tmp}/t.jsonl", "needs a repository"),
    bad("build-base-url-without-llm", "build tasks/demo/repo --base-url http://x -o {tmp}/t.jsonl", "apply to"),
    bad("build-missing-repost-eval", "build repost-eval:/nonexistent -o {tmp}/t.jsonl", "not found"),
    # ------------------------------------------------------------ data
    bad("dstc-output-is-a-directory", "data dstc {tasks} -o {fx}/adir", "-o {fx}/adir is a directory"),
    bad("dstc-kto-is-a-directory", "data dstc {tasks} -o {tmp}/d.jsonl --kto {fx}/adir", "--kto {fx}/adir"),
    bad("dstc-matrices-is-a-directory", "data dstc {tasks} -o {tmp}/d.jsonl --matrices {fx}/adir", "--matrices"),
    bad("dstc-old-j", "data dstc {tasks} -o {tmp}/d.jsonl -j 4", "give -n 4"),
    bad("dstc-samples-zero", "data dstc {tasks} -o {tmp}/d.jsonl -n 0", "'--samples'"),
    bad("dstc-task-matches-nothing", "data dstc {tasks} -o {tmp}/d.jsonl --task zzz", "no task matches"),
    bad("dstc-temperature-without-llm", "data dstc {tasks} -o {tmp}/d.jsonl --temperature 0.5", "apply to llm:"),
    bad("acecoder-output-is-a-directory", "data acecoder {tasks} -o {fx}/adir", "is a directory"),
    bad(
        "acecoder-tests-output-is-a-directory",
        "data acecoder {tasks} -o {tmp}/a.jsonl --tests-output {fx}/adir",
        "--tests-output",
    ),
    bad(
        "testgen-no-test-file-tasks",
        "data testgen {tasks} --generator scripted:x -o {tmp}/t.jsonl",
        "no test-file tasks",
    ),
    bad("testgen-output-is-a-directory", "data testgen {tasks} --generator scripted:x -o {fx}/adir", "is a directory"),
    bad("rejection-not-utf8", "data rejection {fx}/utf8-run -o {tmp}/s.jsonl", "episodes.jsonl:2: not UTF-8 text"),
    bad("rejection-not-a-run", "data rejection {fx}/adir -o {tmp}/s.jsonl", "has no config.json"),
    bad("rejection-missing-run", "data rejection {fx}/missing-run -o {tmp}/s.jsonl", "no such run directory"),
    bad("rejection-output-is-a-directory", "data rejection {fx}/run -o {fx}/adir", "is a directory"),
    bad(
        "rejection-format-not-a-choice",
        "data rejection {fx}/run -o {tmp}/s.jsonl --format yaml",
        "'yaml' is not one of",
    ),
    bad(
        "rejection-base-url-without-repairs",
        "data rejection {fx}/run -o {tmp}/s.jsonl --base-url http://x",
        "--base-url",
    ),
    # ------------------------------------------------------------ sandbox, env
    bad("sandbox-check-unknown-backend", "sandbox check --sandbox nope", "unknown sandbox backend 'nope'"),
    bad("sandbox-check-output-is-a-directory", "sandbox check -o {fx}/adir", "is a directory"),
    bad("sandbox-check-output-folder-missing", "sandbox check -o {fx}/missing/c.json", "does not exist"),
    bad("env-install-not-a-definition", "env install {fx}/adir", "is not an environment definition"),
    # ------------------------------------------------------------ the served-rollouts example
    bad("served-rollouts-oracle", "--policy oracle", "needs the task's ground truth", "agents/served_rollouts.py"),
    bad(
        "served-rollouts-no-server",
        "http://127.0.0.1:9",
        "cannot reach http://127.0.0.1:9",
        "agents/served_rollouts.py",
    ),
    bad("served-rollouts-unknown-policy", "--policy gpt", "unknown policy 'gpt'", "agents/served_rollouts.py"),
]


def test_the_battery_holds_at_least_80_distinct_bad_inputs() -> None:
    assert len(CASES) >= 80 and len({c.name for c in CASES}) == len(CASES)


AGENT = """\
class Agent:
    def reset(self, task, observation, info, *, seed):
        pass
    def act(self, observation, info):
        return {"tool": "submit"}
"""


def _episode(task_id: str, name: str) -> Episode:
    return Episode(task_id=task_id, task_name=name, sample=0, seed=1, policy="oracle", status="passed", solved_at=0)


def _run(path: Path, config: RunConfig, episodes: list[Episode]) -> Path:
    run = RunDir(path)
    with run.writer_lock():
        run.prepare(config)
        for episode in episodes:
            run.append(episode, [])
    return path


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the bad inputs point at."""
    root = tmp_path_factory.mktemp("bad-inputs")
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl") if t.name in NAMES]
    save_tasks(tasks, root / "tasks.jsonl")
    line = (root / "tasks.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    (root / "adir").mkdir()
    (root / "adir" / "notes.txt").write_text("not a report, not a run\n")
    (root / "empty").mkdir()
    (root / "afile.txt").write_text("a file\n")
    (root / "empty.jsonl").write_text("")
    (root / "readme.md").write_text("# A readme\n\nNot tasks.\n")
    (root / "latin1.jsonl").write_bytes(b'{"name": "caf\xe9"}\n')
    (root / "unterminated.jsonl").write_text('{"schema_version": 1, "name": "x')
    (root / "arrays.jsonl").write_text("[1, 2]\n[3]\n")
    (root / "schema.jsonl").write_text(json.dumps({**data, "schema_version": 99}) + "\n")
    (root / "badfield.jsonl").write_text(
        json.dumps({**data, "evaluation": {**data["evaluation"], "timeout": "x"}}) + "\n"
    )
    (root / "surrogate.jsonl").write_text(json.dumps({**data, "name": "\ud800"}) + "\n")
    (root / "edited.jsonl").write_text(json.dumps({**data, "name": "demo/edited"}) + "\n")
    (root / "agent.py").write_text(AGENT)
    (root / "syntax.py").write_text("class Agent(:\n")
    (root / "noact.py").write_text("class Agent:\n    def reset(self, *a, **k):\n        pass\n")
    (root / "ctor.py").write_text(AGENT + "    def __init__(self):\n        raise RuntimeError('no model here')\n")
    (root / "privileged.py").write_text(
        "from gym_repost.policy.oracle import OraclePolicy\n\nclass Cheat(OraclePolicy):\n    pass\n"
    )
    (root / "badscript.jsonl").write_text('{"task": "*", "actions": ["x')
    config = RunConfig(tasks=str(root / "tasks.jsonl"), tasks_digest=tasks_digest(tasks), policy="oracle")
    episodes = [_episode(t.id, t.name) for t in tasks]
    _run(root / "run", config, episodes)
    spec = f"{root / 'agent.py'}:Agent"
    stale = policy_fingerprint(spec).model_copy(update={"files": {str(root / "agent.py"): "0" * 64}})
    _run(root / "agent-run", config.model_copy(update={"policy": spec, "policy_fingerprint": stale}), [])
    _run(root / "utf8-run", config, episodes[:1])
    with open(root / "utf8-run" / "episodes.jsonl", "ab") as fh:
        fh.write(b'{"task_id": "\xff\xfe"}\n')
    _run(root / "damaged-run", config, [])
    (root / "damaged-run" / "config.json").write_text("{not json")
    _run(root / "latin1-config-run", config, [])
    (root / "latin1-config-run" / "config.json").write_bytes(b'{"tasks": "\xe9"}')
    return root


def _snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    """Every path under the folders, with its size and modification time (ns)."""
    found: dict[str, tuple[int, int]] = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                stat = os.lstat(os.path.join(dirpath, name))
                found[os.path.join(dirpath, name)] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_is_one_error_line_exit_2_and_leaves_nothing(case: Bad, fx: Path, tmp_path: Path) -> None:
    fill = {"fx": str(fx), "tmp": str(tmp_path), "tasks": str(fx / "tasks.jsonl")}
    args = [a.format(**fill) for a in case.args]
    program = [case.program] if case.program else ["-m", "gym_repost.cli"]
    before = _snapshot(fx, tmp_path)
    result = subprocess.run(
        [sys.executable, *program, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "80"},
    )
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "Traceback" not in said, said
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert all(line.startswith(("error: ", "skipped: ")) for line in lines), result.stderr  # nothing else, unwrapped
    assert case.says.format(**fill) in errors[0], errors[0]
    assert " at at " not in errors[0]
    assert result.stdout.strip() == "", result.stdout
    assert _snapshot(fx, tmp_path) == before  # nothing written, nothing changed


def test_a_long_error_stays_on_one_line_on_a_narrow_terminal(fx: Path) -> None:
    """Rich wraps at the console's width; an error line is printed whole."""
    result = subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", "eval", str(fx / "tasks.jsonl"), "--policy", "oracle", "-n", "2"]
        + ["-o", str(fx / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "40"},
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert textwrap.shorten(result.stderr, 1000).startswith("error: ")
