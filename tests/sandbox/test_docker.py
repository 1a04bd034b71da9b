"""The docker backend against a real Docker engine and the locally built image (no mocks).

Needs a running daemon. Without one these tests are skipped with the reason shown (``-ra``),
except where ``GYM_REPOST_REQUIRE_DOCKER=1`` or ``CI`` is set (``.ci/run`` sets it): there
a missing daemon is an error. A missing image is built (minutes, once).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_repost.errors import MissingExtraError, SandboxError, SandboxUnavailableError
from gym_repost.harness import run_function_tests
from gym_repost.harness.validation import validate_task
from gym_repost.sandbox import get_sandbox
from gym_repost.sandbox.config import DockerSandboxConfig
from gym_repost.sandbox.conformance import CHECK_NAMES, processes_of_uid
from gym_repost.sandbox.docker import SANDBOX_LABEL, DockerSandbox
from gym_repost.sandbox.docker_containers import LABEL, OWNER_LABEL, cleanup_containers, connect, owner_identity
from gym_repost.sandbox.docker_exec import WORKDIR
from gym_repost.sandbox.docker_image import build_image, image_status, resolve_recipe
from gym_repost.task import FunctionTask, load_tasks, save_tasks

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_MODULE = ROOT / "tests" / "harness" / "test_hostile_candidates.py"


def _hostile_table() -> tuple[dict[str, tuple[str, set[str]]], Path]:
    """The local backend's hostile candidates (one table for both backends)."""
    spec = importlib.util.spec_from_file_location("_hostile_candidates", HOSTILE_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HOSTILE, module.HOST_FILE


HOSTILE, HOST_FILE = _hostile_table()


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_repost.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def ours(client: Any, **labels: str) -> list[dict[str, Any]]:
    """Containers with the gym-repost label (and ``labels``), running or not."""
    wanted = [f"{LABEL}=1", *(f"{k}={v}" for k, v in labels.items())]
    return client.api.containers(all=True, filters={"label": wanted})


def container_processes(sandbox: DockerSandbox) -> dict[str, list[str]]:
    """What ``docker top`` shows in each container of the sandbox besides its PID 1."""
    found = {}
    for container_id in sandbox.container_ids():
        rows = sandbox._client.api.top(container_id)["Processes"]
        found[container_id[:12]] = [row[-1] for row in rows if "sigwaitinfo" not in row[-1]]
    return found


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A daemon that answers and the base image; after the module, none of our containers."""
    try:
        docker_client = connect()
    except (SandboxUnavailableError, MissingExtraError) as exc:
        if os.environ.get("GYM_REPOST_REQUIRE_DOCKER") == "1" or os.environ.get("CI"):
            pytest.fail(f"the Docker tests must run here, but: {exc}")
        pytest.skip(f"no Docker engine ({exc}); set GYM_REPOST_REQUIRE_DOCKER=1 to fail instead")
    build_image(docker_client, resolve_recipe(None))
    yield docker_client
    left = ours(docker_client, **{OWNER_LABEL: owner_identity()})
    assert left == [], f"containers left after the docker tests: {[c['Names'] for c in left]}"


@pytest.fixture(scope="module")
def sandbox(client: Any) -> Iterator[DockerSandbox]:
    """A started two-container pool shared by the tests of this module."""
    with DockerSandbox(DockerSandboxConfig(workers=2)) as sb:
        yield sb
    assert ours(client, **{SANDBOX_LABEL: sb.token}) == []


@pytest.fixture(scope="module")
def one_container(client: Any) -> Iterator[DockerSandbox]:
    with DockerSandbox(DockerSandboxConfig(workers=1)) as sb:
        yield sb


def run_uid(sandbox: DockerSandbox) -> int:
    return int(sandbox.run({"p.py": "import os\nprint(os.getuid())"}, ["python3", "p.py"]).stdout)


# ---------------------------------------------------------------- the shared contract


@pytest.fixture(scope="module")
def conformance(client: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`gym-repost sandbox check --sandbox docker` once: its exit, its output and each check's result."""
    output = tmp_path_factory.mktemp("check") / "checks.json"
    result = cli("sandbox", "check", "--sandbox", "docker", "--output", str(output))
    checks = json.loads(output.read_text("utf-8"))["checks"] if output.exists() else []
    return {"run": result, **{c["name"]: c for c in checks}}


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_docker_sandbox_conforms(conformance: dict[str, Any], name: str) -> None:
    assert name in conformance, conformance["run"].stdout + conformance["run"].stderr
    assert conformance[name]["passed"], conformance[name]["detail"]


def test_sandbox_check_command_passes_against_docker(conformance: dict[str, Any]) -> None:
    result = conformance["run"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CHECK_NAMES)}/{len(CHECK_NAMES)} checks passed" in result.stdout
    assert len(conformance) - 1 == len(CHECK_NAMES)  # the JSON holds every check


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidate_is_contained_in_the_container(
    name: str, one_container: DockerSandbox, function_task: FunctionTask
) -> None:
    body, statuses = HOSTILE[name]
    uid = run_uid(one_container)
    task = function_task.model_copy(deep=True)
    task.evaluation.timeout = 4.0
    started = time.monotonic()
    report = run_function_tests(one_container, task, f"def score(values, cap=100):\n    {body}\n")
    assert not report.passed and report.status in statuses, report.to_text()
    assert time.monotonic() - started < 15
    assert not HOST_FILE.exists() and not Path("/etc/gym-repost-hostile").exists()
    assert processes_of_uid(uid) == [], f"{name}: processes left running"
    assert all(extra == [] for extra in container_processes(one_container).values())
    assert run_function_tests(one_container, task, task.ground_truth).passed


# ---------------------------------------------------------------- the container


def test_workdir_is_home_user_tmp_and_fresh_per_run(sandbox: DockerSandbox) -> None:
    script = (
        "import os\nprint(os.getcwd(), sorted(os.listdir('/home/user/tmp')))\n"
        "open('/home/user/tmp/made.txt', 'w').write('x')\n"
        "open('/tmp/scratch.txt', 'w').write('x')\nprint(sorted(os.listdir('.')))\n"
    )
    for _ in range(4):  # both containers, twice each
        result = sandbox.run({"main.py": script}, ["python3", "main.py"], timeout=10)
        assert result.ok, result.stderr
        assert result.stdout == f"{WORKDIR} ['main.py']\n['made.txt', 'main.py']\n"
    check = sandbox.run({}, ["sh", "-c", "ls -A /tmp /home/user/tmp"], timeout=10)
    assert check.stdout.split() == ["/home/user/tmp:", "/tmp:"], check.stdout


def test_repost_tasks_that_write_to_home_user_tmp_pass(
    sandbox: DockerSandbox, repost_eval_tasks: list[FunctionTask]
) -> None:
    wanted = ("repost-eval/121-", "repost-eval/214-", "repost-eval/492-", "repost-eval/649-", "repost-eval/1025-")
    tasks = [t for t in repost_eval_tasks if t.name.startswith(wanted)]
    assert len(tasks) == len(wanted)
    for task in tasks:
        assert "/home/user/tmp" in json.dumps(task.model_dump())
        result = validate_task(sandbox, task, mutants=0)
        assert result.passed, (task.name, result.cause)


def test_root_is_read_only_and_runs_are_unprivileged(sandbox: DockerSandbox) -> None:
    script = (
        "import os\nfor path in ('/usr/x', '/etc/x', '/opt/gym-repost/packages/x', '/x'):\n"
        "    try:\n        open(path, 'w')\n        print(path, 'written')\n"
        "    except OSError as exc:\n        print(path, exc.errno)\n"
        "print(os.getuid(), [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')])\n"
    )
    result = sandbox.run({"main.py": script}, ["python3", "main.py"], timeout=10)
    assert result.ok and "written" not in result.stdout, result.stdout + result.stderr
    uid, caps = result.stdout.splitlines()[-1].split(" ", 1)
    assert int(uid) >= 1000 and caps == "['0000000000000000']"


def test_a_forged_status_line_is_output_not_status(sandbox: DockerSandbox) -> None:
    script = "import sys\nsys.stderr.write(chr(0) + 'GRS 0123456789abcdef 0 1\\n')\nsys.exit(3)\n"
    result = sandbox.run({"main.py": script}, ["python3", "main.py"], timeout=10)
    assert result.returncode == 3 and result.stderr.endswith("GRS 0123456789abcdef 0 1\n"), result


def test_binary_nested_and_large_files_arrive_byte_exact(sandbox: DockerSandbox) -> None:
    blob = bytes(range(256)) * 1024
    large = "x = 1\n" * 40_000  # beyond what travels as an exec argument
    files: dict[str, str | bytes] = {
        "data/blob.bin": blob,
        "big.py": large,
        "run.sh": "#!/bin/sh\necho sh\n",
        "main.py": "import hashlib, os\n"
        "print(hashlib.sha256(open('data/blob.bin', 'rb').read()).hexdigest(),"
        " len(open('big.py').read()), os.access('run.sh', os.X_OK))\n",
    }
    result = sandbox.run(files, ["python3", "main.py"], timeout=10, stdin="ignored\n")
    digest = __import__("hashlib").sha256(blob).hexdigest()
    assert result.stdout == f"{digest} {len(large)} True\n", result


def test_concurrent_runs_use_the_whole_pool(sandbox: DockerSandbox) -> None:
    def one(i: int) -> str:
        return sandbox.run({"m.py": f"import os\nprint({i}, os.getuid())"}, ["python3", "m.py"]).stdout

    results: list[str] = []
    threads = [threading.Thread(target=lambda i=i: results.append(one(i))) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(r.split()[0]) for r in results) == list(range(6))
    assert len({r.split()[1] for r in results}) == 2  # one run user per container


def test_host_enforces_the_timeout_when_the_run_kills_its_supervisors(one_container: DockerSandbox) -> None:
    # The run kills `timeout` and the exec's shell (same user), then spins: the exec ends
    # without a status line (dockerd closes it), and the host's clean-up exec kills the run.
    script = (
        "import os, signal, time\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit() and int(pid) not in (1, os.getpid()):\n"
        "        try:\n            os.kill(int(pid), signal.SIGKILL)\n"
        "        except OSError:\n            pass\nprint('alone', flush=True)\nwhile True:\n    pass\n"
    )
    uid = run_uid(one_container)
    started = time.monotonic()
    result = one_container.run({"main.py": script}, ["python3", "main.py"], timeout=1.0)
    assert result.timed_out and result.returncode == -9 and "alone" in result.stdout
    assert time.monotonic() - started < 1.0 + 1.0 + 5.0 + 5.0
    assert processes_of_uid(uid) == []
    assert all(extra == [] for extra in container_processes(one_container).values())
    assert one_container.run({}, ["python3", "-c", "print(2)"]).stdout == "2\n"


def test_host_deadline_ends_a_run_whose_container_hangs(client: Any) -> None:
    with DockerSandbox(DockerSandboxConfig(workers=1)) as sb:
        frozen = sb.container_ids()[0]
        threading.Timer(0.5, lambda: client.api.pause(frozen)).start()
        started = time.monotonic()
        result = sb.run({}, ["sleep", "30"], timeout=1.0)
        elapsed = time.monotonic() - started
        assert result.timed_out and result.killed_for == "timeout" and result.returncode == -9
        assert 1.0 + 1.0 + 5.0 <= elapsed < 30
        assert frozen not in sb.container_ids()  # it could not be cleaned: replaced
        assert sb.run({}, ["python3", "-c", "print(5)"]).stdout == "5\n"


def test_a_dead_container_is_an_infrastructure_error_and_is_replaced(client: Any) -> None:
    with DockerSandbox(DockerSandboxConfig(workers=1)) as sb:
        victim = sb.container_ids()[0]
        killer = threading.Timer(1.0, lambda: client.api.kill(victim))
        killer.start()
        with pytest.raises(SandboxError, match="died"):
            sb.run({}, ["sleep", "30"], timeout=20)
        killer.join()
        assert sb.run({}, ["python3", "-c", "print(3)"]).stdout == "3\n"
        assert victim not in sb.container_ids() and len(sb.container_ids()) == 1


def test_describe_names_image_limits_and_pool(sandbox: DockerSandbox) -> None:
    info = sandbox.describe()
    assert info["backend"] == "docker" and info["image"] == "gym-repost-sandbox:base"
    assert info["workers"] == 2 and info["limits"]["memory_mb"] == 4096
    assert str(info["image_id"]).startswith("sha256:") and info["docker_version"]


# ---------------------------------------------------------------- faults: daemon, image, SDK


def test_daemon_not_running_says_how_to_start_it() -> None:
    sb = get_sandbox("docker", docker_host="unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailableError) as caught:
        sb.start()
    message = str(caught.value)
    assert "unix:///nonexistent/docker.sock" in message and "dockerd" in message
    assert "systemctl start docker" in message and "--sandbox local" in message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"image": "gym-repost-sandbox:no-such-image"}, "gym-repost sandbox build-image"),
        ({"env": "no-such-env"}, "build it with `gym-repost sandbox build-image --env envs/no-such-env`"),
    ],
)
def test_missing_image_without_a_recipe_names_build_image(client: Any, config: dict[str, str], message: str) -> None:
    sb = DockerSandbox(DockerSandboxConfig(**config))
    with pytest.raises(SandboxUnavailableError) as caught:
        sb.start()
    assert message in str(caught.value)
    assert ours(client, **{SANDBOX_LABEL: sb.token}) == []


def test_missing_image_is_built_from_its_definition_as_a_layer_on_the_base_image(client: Any, tmp_path: Path) -> None:
    definition = tmp_path / f"gymrepost-test-{secrets.token_hex(3)}"
    definition.mkdir()
    (definition / "requirements.txt").write_text("# one package beyond the base image's\nsix\n")
    recipe = resolve_recipe(str(definition))
    assert image_status(client, recipe) == "missing"
    refused = DockerSandbox(DockerSandboxConfig(env=str(definition), build_missing=False))
    with pytest.raises(SandboxUnavailableError, match="is missing"):
        refused.start()
    try:
        with DockerSandbox(DockerSandboxConfig(env=str(definition))) as sb:
            script = "import six, pytest, coverage\nprint('built', six.__name__)"
            assert sb.run({}, ["python3", "-c", script]).stdout == "built six\n"
        assert image_status(client, recipe) == "current"
        # the environment adds one layer to the base image, which it does not rebuild
        base = client.images.get(resolve_recipe(None).tag)
        layers = [entry["Id"] for entry in client.images.get(recipe.tag).history()]
        assert base.id in layers, layers
        assert recipe.recipe_hash != resolve_recipe(None).recipe_hash
    finally:
        client.images.remove(recipe.tag, force=True)
    assert image_status(client, resolve_recipe(None)) == "current"


def test_base_image_is_reused_when_current(client: Any) -> None:
    recipe = resolve_recipe(None)
    assert image_status(client, recipe) == "current"
    started = time.monotonic()
    assert build_image(client, recipe, log=lambda _: None) == "gym-repost-sandbox:base"
    assert time.monotonic() - started < 5


def test_import_does_not_load_the_sdk_and_a_missing_sdk_names_the_extra() -> None:
    code = (
        "import sys\nimport gym_repost, gym_repost.sandbox.docker\n"
        "from gym_repost.sandbox import get_sandbox, sandbox_config\n"
        "sandbox_config('docker', workers=2)\nassert 'docker' not in sys.modules\n"
        "sys.modules['docker'] = None\n"
        "try:\n    get_sandbox('docker').start()\nexcept ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'pip install "gym-repost[docker]"' in result.stdout


# ---------------------------------------------------------------- no leaks


HOST_PROGRAM = """
import sys, time
from gym_repost.sandbox import get_sandbox
sb = get_sandbox("docker", workers=2)
with sb:
    print(" ".join(sb.container_ids()), flush=True)
    sb.run({}, ["sleep", "60"], timeout=90)
"""


def _start_host(client: Any) -> tuple[subprocess.Popen[str], list[str]]:
    host = subprocess.Popen([sys.executable, "-c", HOST_PROGRAM], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert host.stdout is not None
    ids = host.stdout.readline().split()
    assert len(ids) == 2, "the host program did not start its sandbox"
    time.sleep(1.0)  # its run is under way
    return host, ids


def test_containers_carry_labels_and_close_removes_them(client: Any) -> None:
    sb = DockerSandbox(DockerSandboxConfig(workers=2))
    with sb:
        found = ours(client, **{SANDBOX_LABEL: sb.token})
        assert sorted(c["Id"] for c in found) == sb.container_ids()
        assert all(c["Labels"][OWNER_LABEL] == owner_identity() for c in found)
    assert ours(client, **{SANDBOX_LABEL: sb.token}) == []


def test_ctrl_c_removes_the_containers(client: Any) -> None:
    host, ids = _start_host(client)
    host.send_signal(signal.SIGINT)
    host.wait(timeout=60)
    assert [c for c in ours(client) if c["Id"] in ids] == []


def test_sigterm_to_the_cli_removes_its_containers(client: Any) -> None:
    command = [sys.executable, "-m", "gym_repost.cli", "sandbox", "check", "--sandbox", "docker"]
    host = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def its_containers() -> list[dict[str, Any]]:
        return [c for c in ours(client) if f":{host.pid}:" in c["Labels"].get(OWNER_LABEL, "")]

    deadline = time.monotonic() + 60
    while not its_containers() and time.monotonic() < deadline and host.poll() is None:
        time.sleep(0.2)
    assert its_containers(), "the CLI did not start its sandbox"
    time.sleep(1.0)
    host.terminate()
    _, stderr = host.communicate(timeout=60)
    assert host.returncode == 143, stderr  # unwound like Ctrl-C, exit status 128 + SIGTERM
    assert its_containers() == []


def test_killed_runner_leaves_containers_that_cleanup_removes(client: Any) -> None:
    host, ids = _start_host(client)
    host.kill()
    host.wait()
    assert sorted(c["Id"] for c in ours(client) if c["Id"] in ids) == sorted(ids)
    result = cli("sandbox", "cleanup")
    assert result.returncode == 0, result.stderr
    assert "removed 2 leftover docker container(s)" in result.stdout
    assert [c for c in ours(client) if c["Id"] in ids] == []


def test_cleanup_spares_containers_of_live_owners(sandbox: DockerSandbox) -> None:
    report = cleanup_containers()
    assert not set(report.removed) & {c["Names"][0].lstrip("/") for c in ours(sandbox._client)}
    assert sandbox.run({}, ["python3", "-c", "print(4)"]).stdout == "4\n"


# ---------------------------------------------------------------- the CLI on real tasks


def test_validate_humaneval_tasks_with_the_docker_sandbox(
    client: Any, tmp_path: Path, humaneval_tasks: list[FunctionTask]
) -> None:
    tasks = humaneval_tasks[:3]
    subset = tmp_path / "humaneval3.jsonl"
    save_tasks(tasks, subset)
    out = tmp_path / "validation.json"
    result = cli("validate", str(subset), "--sandbox", "docker", "--mutants", "3", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    totals = json.loads(out.read_text())["totals"]
    assert totals["tasks"] == 3 and totals["ground_truth_passed"] == 3
    assert totals["mutants_total"] > 0


def test_eval_with_the_docker_sandbox(client: Any, tmp_path: Path) -> None:
    tasks = [t for t in load_tasks(ROOT / "tasks" / "demo.jsonl")][:3]
    subset = tmp_path / "demo3.jsonl"
    save_tasks(tasks, subset)
    result = cli("eval", str(subset), "--policy", "oracle", "--sandbox", "docker", "-o", str(tmp_path / "run"))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["pass@1"] == 1.0 and summary["infra_errors"] == 0


TINY_MODULE = '''"""Small helpers."""


def clamp(value: int, low: int, high: int) -> int:
    """Bring value into [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
'''


def test_build_then_validate_with_the_docker_sandbox(client: Any, tmp_path: Path) -> None:
    repo = tmp_path / "tinyrepo"
    (repo / "tinypkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tinypkg" / "__init__.py").write_text("")
    (repo / "tinypkg" / "ops.py").write_text(TINY_MODULE)
    (repo / "tests" / "test_ops.py").write_text(
        "from tinypkg.ops import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0, 10) == 5\n"
        "    assert clamp(-1, 0, 10) == 0\n    assert clamp(11, 0, 10) == 10\n"
    )
    out = tmp_path / "tiny.jsonl"
    built = cli("build", str(repo), "-o", str(out), "--sandbox", "docker", "-w", "1", "--licenses", "any")
    assert built.returncode == 0 and "wrote 1 tasks" in built.stdout, built.stdout + built.stderr
    validated = cli("validate", str(out), "--sandbox", "docker", "--mutants", "3")
    assert validated.returncode == 0, validated.stdout + validated.stderr


# ---------------------------------------------------------------- network: installs


@pytest.mark.network
def test_install_reaches_every_container_read_only(client: Any) -> None:
    volume = f"gym-repost-test-packages-{secrets.token_hex(3)}"
    try:
        with DockerSandbox(DockerSandboxConfig(workers=2, packages_volume=volume)) as sb:
            result = sb.install(["six==1.16.0"], timeout=300)
            assert result.ok, result.stdout[-2000:] + result.stderr[-2000:]
            probe = (
                "import six\nprint(six.__version__, six.__file__)\n"
                "try:\n    open(six.__file__, 'a')\nexcept OSError as exc:\n    print(exc.errno)\n"
            )
            for _ in range(2):
                r = sb.run({"m.py": probe}, ["python3", "m.py"])
                version, path, errno = r.stdout.split()
                assert (version, path) == ("1.16.0", "/opt/gym-repost/packages/six.py"), r
                assert errno in ("13", "30")  # EACCES (root's files) or EROFS (read-only mount)
    finally:
        client.volumes.get(volume).remove(force=True)


@pytest.mark.network
def test_an_install_never_shadows_the_evaluation_packages_on_docker(client: Any) -> None:
    """pip's ``--target`` installs ``pytest-mock``'s requirement pytest again; the volume is
    first on PYTHONPATH, so a copy there would replace the image's pytest in every later
    run. Only what the image does not provide reaches the volume."""
    volume = f"gym-repost-test-packages-{secrets.token_hex(3)}"
    try:
        with DockerSandbox(DockerSandboxConfig(workers=1, packages_volume=volume)) as sb:
            result = sb.install(["pytest-mock==3.14.0"], timeout=300)
            assert result.ok, result.stdout[-2000:] + result.stderr[-2000:]
            probe = "import os, pytest, pytest_mock\nprint(pytest.__file__, pytest_mock.__file__)\n"
            probe += "print(sorted(os.listdir('/opt/gym-repost/packages')))\n"
            r = sb.run({"m.py": probe}, ["python3", "m.py"])
            first, listing = r.stdout.splitlines()
            assert first.split() == [
                "/opt/gym-repost/venv/lib/python3.11/site-packages/pytest/__init__.py",
                "/opt/gym-repost/packages/pytest_mock/__init__.py",
            ], r
            assert "'pytest'" not in listing and "'_pytest'" not in listing and "'pluggy'" not in listing, listing
    finally:
        client.volumes.get(volume).remove(force=True)


@pytest.mark.network
def test_a_package_set_on_docker_shows_its_runs_only_its_own_installs(client: Any) -> None:
    """A build's runs see its set in place of the package volume: what another build
    installed into the volume is not on their path, and their installs stay in the set."""
    volume = f"gym-repost-test-packages-{secrets.token_hex(3)}"
    probe = {
        "m.py": "for name in ('whatever', 'six'):\n    try:\n        print(name, __import__(name).__file__)\n"
        "    except ImportError:\n        print(name, '-')\n"
    }

    def seen(box: Any) -> dict[str, str]:
        result = box.run(probe, ["python3", "m.py"])
        assert result.ok, result
        return dict(line.split(" ", 1) for line in result.stdout.splitlines())

    try:
        with DockerSandbox(DockerSandboxConfig(workers=1, packages_volume=volume)) as sb:
            assert sb.install(["whatever==0.7"], timeout=300).ok
            own = sb.package_set("b1-build")
            assert seen(own) == {"whatever": "-", "six": "-"}
            result = own.install(["six==1.16.0"], timeout=300)
            assert result.ok, result.stdout[-2000:] + result.stderr[-2000:]
            assert seen(own) == {"whatever": "-", "six": "/opt/gym-repost/packages/.sets/b1-build/six.py"}
            assert seen(sb) == {"whatever": "/opt/gym-repost/packages/whatever.py", "six": "-"}
            sb.package_set("b1-build")  # made again: empty
            assert seen(own)["six"] == "-"
            sb.remove_package_set("b1-build")
            listing = sb.run({}, ["ls", "-A", "/opt/gym-repost/packages/.sets"])
            assert listing.ok and listing.stdout == "", listing
    finally:
        client.volumes.get(volume).remove(force=True)


def test_cleanup_removes_the_package_sets_of_killed_builds_from_the_volume(client: Any) -> None:
    """A build killed before it removed its set left it in the volume for good: each set
    now names its maker, and the sets of processes that are gone are removed."""
    import socket

    volume = f"gym-repost-test-packages-{secrets.token_hex(3)}"
    try:
        with DockerSandbox(DockerSandboxConfig(workers=1, packages_volume=volume)) as sb:
            sb.package_set("b1-live")
            sb._in_volume("make", "/opt/gym-repost/packages/.sets/b2-killed", f"{socket.gethostname()}:999999999:1")
            sb._in_volume("make", "/opt/gym-repost/packages/.sets/b3-elsewhere", "another-host:999999999:1")
            assert sb.remove_dead_package_sets() == ["b2-killed"]
            listing = sb.run({}, ["ls", "-A", "/opt/gym-repost/packages/.sets"])
            assert listing.stdout.split() == ["b1-live", "b1-live.owner", "b3-elsewhere", "b3-elsewhere.owner"]
            sb.remove_package_set("b1-live")
            assert sb.remove_dead_package_sets() == []
            listing = sb.run({}, ["ls", "-A", "/opt/gym-repost/packages/.sets"])
            assert listing.stdout.split() == ["b3-elsewhere", "b3-elsewhere.owner"]
    finally:
        client.volumes.get(volume).remove(force=True)


@pytest.mark.network
def test_network_only_when_asked(sandbox: DockerSandbox) -> None:
    probe = (
        "import socket\ntry:\n    socket.create_connection(('pypi.org', 443), timeout=10).close()\n"
        "    print('connected')\nexcept OSError as exc:\n    print('blocked', type(exc).__name__)\n"
    )
    assert sandbox.run({"m.py": probe}, ["python3", "m.py"], timeout=20).stdout.startswith("blocked")
    asked = sandbox.run({"m.py": probe}, ["python3", "m.py"], timeout=30, network=True)
    assert asked.stdout == "connected\n", asked


# ---------------------------------------------------------------- issue 32's attacks, on docker


def test_memory_attacks_earn_nothing_on_docker(one_container: DockerSandbox, function_task: FunctionTask) -> None:
    """A candidate that looks for the ground truth (or another session's code) in its own
    memory, up its stack, or prints what it found: each docker run is a fresh process."""
    sys.path.insert(0, str(ROOT / "tests"))
    from memory_attacks import MEMORY_ATTACKS

    task = function_task
    honest = task.ground_truth.replace("\n", "\n\n", 1)
    assert run_function_tests(one_container, task, honest).passed
    body = [line.strip() for line in task.ground_truth.splitlines()[1:] if len(line.strip()) > 12]
    for name, attack in MEMORY_ATTACKS.items():
        report = run_function_tests(one_container, task, attack.format(name=task.target.name), timeout=10)
        assert not report.passed, name
        assert not [line for line in body if line in report.to_text()], name


def test_a_test_file_finds_no_original_focal_file_on_docker(one_container: DockerSandbox) -> None:
    """The test-file attacks that compare the focal module with the original (by its path, a
    copy the session left, a process it left behind, the memory of the process running the
    tests) earn what the trivial test earns on docker too."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "harness")]
    from test_reward_attacks import ORIGINAL_ATTACKS, TRIVIAL, _testfile_attack
    from testfile_tasks import measured_testfile_task

    from gym_repost.harness.testfile_report import score_test_file

    task = measured_testfile_task(one_container)
    trivial = score_test_file(one_container, task, TRIVIAL).reward
    for name in ORIGINAL_ATTACKS:
        report = score_test_file(one_container, task, _testfile_attack(name))
        assert report.reward <= trivial + 1e-9, (name, report.to_text())
