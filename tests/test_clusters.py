"""torchrun, Dask and Ray started for real on this machine: the shim in their worker processes.

Each engine runs tests/cluster_jobs.py three ways: without the variable (every worker fails the
float16 step), with the line docs/usage.md gives (every worker's float16 result equals its float32
result narrowed, computed in the same worker), and with that line plus
``KORNIA_HALFPATCH_DISABLE=1`` (the kill switch wins: every worker fails again). The float32
results are the same, bit for bit, with and without the shim. Dask also: workers already running
without the variable, fixed by the documented worker plugin; and `dask worker` commands as on two
hosts, one started with the documented prefix. Before any task imports kornia, every worker is
checked to have imported nothing of the shim (with the variable set, only the hook's own module). Engines bind to the loopback
interface, every run is bounded in time, and every process a run started is gone when it ends
(checked; stragglers are killed and fail the test).

The engines are test-only dependencies (`pip install '.[clusters]'`, `tox -e clusters`). Without
one, its tests skip and say so; with KORNIA_HALFPATCH_CLUSTERS_REQUIRED=1 (set by `tox -e
clusters`) a missing engine fails instead. torchrun comes with torch.
"""

import importlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kornia_halfpatch._launcher import STARTUP_HOOK, startup_hook_path
from support import UPSTREAM_FIXED

ROOT = Path(__file__).resolve().parent.parent
JOBS = Path(__file__).with_name("cluster_jobs.py")
USAGE_DOC = ROOT / "docs" / "usage.md"
BIN = Path(sys.executable).parent
ENGINES_REQUIRED = os.environ.get("KORNIA_HALFPATCH_CLUSTERS_REQUIRED", "") not in ("", "0")

# The lines docs/usage.md gives ("Multiprocessing and clusters"), as the runs below use them.
TORCHRUN_LINE = "kornia-halfpatch run -- torchrun --nproc-per-node"
RAY_LINE = 'ray.init(runtime_env={"env_vars": {"KORNIA_HALFPATCH_AUTO": "1"}}'
DASK_LOCAL_LINE = 'os.environ["KORNIA_HALFPATCH_AUTO"] = "1"'
DASK_PLUGIN_LINES = (
    "class ApplyKorniaHalfpatch(WorkerPlugin):",
    "    def setup(self, worker):",
    "        import kornia_halfpatch",
    "        kornia_halfpatch.apply()",
)
DASK_PLUGIN_REGISTRATION = "client.register_plugin(ApplyKorniaHalfpatch())"
DASK_WORKER_LINE = "kornia-halfpatch run -- dask worker"

FIXED = "equals float32 narrowed"
BROKEN = 'NotImplementedError: "linalg_svd_cpu" not implemented for \'Half\''

needs_installed_hook = pytest.mark.skipif(
    startup_hook_path() is None,
    reason=f"the start-up hook {STARTUP_HOOK} is not installed in {sys.prefix}'s site-packages "
    "(tox installs it; outside tox run `pip install .` or `pip install -e .` in this environment)",
)
needs_old_kornia = pytest.mark.skipif(
    UPSTREAM_FIXED, reason="kornia >= 0.9.0 runs zca_whiten in float16 unpatched: nothing is broken to show"
)
# Real engines in real processes; what they test (the start-up hook reaching each engine's
# workers) is the same on every kornia release that has the bug.
CLUSTER_TEST_MARKS = (
    pytest.mark.slow,
    pytest.mark.release_independent,
    pytest.mark.clusters,
    needs_installed_hook,
    needs_old_kornia,
    pytest.mark.timeout(600),
)


def cluster_test(test):
    for mark in CLUSTER_TEST_MARKS:
        test = mark(test)
    return test


def require_engine(module: str):
    """Import an engine; without it skip, or fail where the clusters environment requires it."""
    if ENGINES_REQUIRED:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install '.[clusters]', or tox -e clusters)")


def environment(**settings: str) -> dict:
    """This process's environment without any KORNIA_HALFPATCH_* switch, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in ("KORNIA_HALFPATCH_AUTO", "KORNIA_HALFPATCH_DISABLE")}
    # The console scripts (kornia-halfpatch, torchrun) of this interpreter's environment first.
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's pairs on the loopback interface
    env.update(settings)
    return env


# --------------------------------------------------------------------------------------------
# Bounded runs that leave no process behind


def session_processes(session: int, marker: str = "") -> list:
    """Processes of this session id, or whose command line contains ``marker``: (pid, command)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state ppid pgrp session ...
        if fields[0] == "Z":
            continue
        if int(fields[3]) == session or (marker and marker in command):
            found.append((int(entry.name), command))
    return found


def run_bounded(command: list, env: dict, cwd: Path, timeout: float, marker: str = "") -> str:
    """Run ``command`` in a session of its own; kill what is left of it after it exits (and fail)."""
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n[killed after {timeout} s]"
    leftovers = []
    if Path("/proc").is_dir():
        deadline = time.monotonic() + 20  # engines' daemons take a moment to exit after shutdown
        while session_processes(process.pid, marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = session_processes(process.pid, marker)
        for pid, _ in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elapsed = time.monotonic() - started
    print(f"{' '.join(map(str, command[:6]))} ...: {elapsed:.1f} s")  # shown with -rA / on failure
    assert process.returncode == 0, output[-6000:]
    assert not leftovers, f"still running after the run ended (killed now): {leftovers}\n{output[-3000:]}"
    return output


# --------------------------------------------------------------------------------------------
# What every worker must have done


def assert_broken(reports: list) -> None:
    assert reports
    for report in reports:
        assert report["outcome"] == BROKEN, report
        assert report["applied"] is None, report  # no shim in this worker


def assert_fixed(reports: list, by_the_hook: bool = True) -> None:
    assert reports
    for report in reports:
        assert report["outcome"] == FIXED, report
        assert "torch_ops" in report["applied"], report
    if by_the_hook:
        # the hook waited for kornia, and some of these calls were a worker's first import of it
        assert not any(report["shim_imported_before_kornia"] for report in reports), reports
        assert any(not report["kornia_imported_before"] for report in reports), reports


def assert_hook_left_alone(untouched: list, waiting: bool) -> None:
    """Workers that have not imported kornia: the hook (at most its own module) imported nothing."""
    assert untouched
    for report in untouched:
        assert report["imported"] == [], report
        assert report["hook_waiting"] is waiting, report


def assert_float32_identical(*runs: list) -> None:
    """float32 is the release's computation, shim or not: the same bytes per batch in every run."""
    digests = [{report["batch"]: report["float32_sha256"] for report in run} for run in runs]
    assert all(digest == digests[0] for digest in digests[1:]), digests


# --------------------------------------------------------------------------------------------
# The documented lines are the ones run here


@pytest.mark.release_independent
def test_usage_doc_gives_the_lines_these_tests_run():
    doc = USAGE_DOC.read_text()
    jobs = JOBS.read_text()
    for line in (TORCHRUN_LINE, RAY_LINE, DASK_LOCAL_LINE, DASK_WORKER_LINE, DASK_PLUGIN_REGISTRATION, *DASK_PLUGIN_LINES):
        assert line in doc, line
    assert '["kornia-halfpatch", "run", "--", *worker' in jobs and 'worker = ["dask", "worker", address' in jobs
    for line in (RAY_LINE, *DASK_PLUGIN_LINES):
        assert line in jobs, line
    # The driver sets the variable with exactly the documented statement, before the cluster.
    assert jobs.index(DASK_LOCAL_LINE) < jobs.index("LocalCluster(\n")
    assert "client.register_plugin(ApplyKorniaHalfpatch())" in jobs


# --------------------------------------------------------------------------------------------
# torchrun --nproc-per-node 2, gloo on CPU


@pytest.fixture(scope="module")
def torchrun_runs(tmp_path_factory):
    runs = {}

    def run(setting: str) -> dict:
        if setting not in runs:
            out = tmp_path_factory.mktemp(f"torchrun-{setting}")
            torchrun = ["torchrun", "--nproc-per-node", "2", "--standalone", str(JOBS), "torchrun", str(out)]
            if setting == "unset":
                command, env = torchrun, environment()
            else:
                command = TORCHRUN_LINE.split()[:3] + torchrun  # kornia-halfpatch run -- torchrun ...
                assert " ".join(command).startswith(TORCHRUN_LINE)
                env = environment(KORNIA_HALFPATCH_DISABLE="1") if setting == "disable" else environment()
            run_bounded(command, env, out, timeout=240)
            runs[setting] = json.loads((out / "torchrun.json").read_text())
        return runs[setting]

    return run


@cluster_test
@pytest.mark.parametrize("setting", ["unset", "disable"], ids=["unset", "disable-wins"])
def test_torchrun_ranks_fail_in_half_without_the_shim(torchrun_runs, setting):
    result = torchrun_runs(setting)
    assert result["world_size"] == 2 and result["fixed_ranks"] == 0
    assert_broken(result["ranks"])
    # disable: the variable is set (the hook's module loaded and stood down), nothing imported
    assert_hook_left_alone([rank["no_kornia"] for rank in result["ranks"]], waiting=setting == "disable")


@cluster_test
def test_torchrun_ranks_apply_the_shim_under_the_launcher(torchrun_runs):
    result = torchrun_runs("launcher")
    assert result["world_size"] == 2 and result["fixed_ranks"] == 2
    assert_fixed(result["ranks"])
    assert len({rank["pid"] for rank in result["ranks"]}) == 2
    assert_hook_left_alone([rank["no_kornia"] for rank in result["ranks"]], waiting=True)
    # The ranks' half results, summed in float16 by gloo, equal the sum of their float32 results
    # narrowed; the float32 all-reduce is the same bytes as without the shim.
    assert result["half_all_reduce_equals_narrowed_all_reduce"]
    unpatched = torchrun_runs("unset")
    assert result["float32_all_reduce_sha256"] == unpatched["float32_all_reduce_sha256"]
    assert_float32_identical(result["ranks"], unpatched["ranks"])


# --------------------------------------------------------------------------------------------
# Dask: LocalCluster, two worker processes (nannies)


@pytest.fixture(scope="module")
def dask_runs(tmp_path_factory):
    runs = {}

    def run(setting: str) -> dict:
        require_engine("distributed")
        if setting not in runs:
            out = tmp_path_factory.mktemp(f"dask-{setting}")
            env = {
                "unset": environment(CLUSTER_JOBS_DASK_PLUGIN="1"),
                "auto": environment(CLUSTER_JOBS_DASK_SET_AUTO="1"),
                "disable": environment(CLUSTER_JOBS_DASK_SET_AUTO="1", KORNIA_HALFPATCH_DISABLE="1"),
            }[setting]
            run_bounded([sys.executable, str(JOBS), "dask", str(out / "dask.json")], env, out, timeout=300)
            runs[setting] = json.loads((out / "dask.json").read_text())
        return runs[setting]

    return run


@cluster_test
@pytest.mark.parametrize("setting", ["unset", "disable"], ids=["unset", "disable-wins"])
def test_dask_workers_fail_in_half_without_the_shim(dask_runs, setting):
    result = dask_runs(setting)
    assert result["workers"] == 2 and not result["driver_imported_kornia"]
    assert_broken(result["batches"] + result["every_worker"])
    assert_hook_left_alone(result["no_kornia"], waiting=setting == "disable")


@cluster_test
def test_dask_local_cluster_workers_apply_the_shim_with_the_variable_set_before(dask_runs):
    result = dask_runs("auto")
    assert result["workers"] == 2 and not result["driver_imported_kornia"]
    assert_fixed(result["batches"] + result["every_worker"])
    assert len({report["pid"] for report in result["every_worker"]}) == 2
    assert_hook_left_alone(result["no_kornia"], waiting=True)
    assert_float32_identical(result["batches"], dask_runs("unset")["batches"])


@cluster_test
def test_dask_worker_plugin_applies_the_shim_in_running_workers(dask_runs):
    # Workers started without the variable, kornia already imported (and failing) there.
    result = dask_runs("unset")
    assert_broken(result["batches"])
    assert_fixed(result["batches_after_plugin"], by_the_hook=False)
    assert all(report["kornia_imported_before"] for report in result["batches_after_plugin"])
    assert {report["pid"] for report in result["batches_after_plugin"]} <= {report["pid"] for report in result["every_worker"]}
    assert_float32_identical(result["batches"], result["batches_after_plugin"])


@cluster_test
def test_dask_worker_started_by_the_launcher_applies_the_shim_beside_one_that_was_not(tmp_path):
    # Two `dask worker` commands against one `dask scheduler`, as on two hosts: the one started
    # with the documented prefix is fixed, the other (no variable in its environment) is not.
    require_engine("distributed")
    command = [sys.executable, str(JOBS), "dask-cli", str(tmp_path / "dask-cli.json")]
    run_bounded(command, environment(), tmp_path, timeout=300)
    result = json.loads((tmp_path / "dask-cli.json").read_text())
    assert set(result["every_worker"]) == {"launched", "plain"} and not result["driver_imported_kornia"]
    assert_fixed([result["every_worker"]["launched"]])
    assert_broken([result["every_worker"]["plain"]])
    assert_hook_left_alone([result["no_kornia"]["launched"]], waiting=True)
    assert_hook_left_alone([result["no_kornia"]["plain"]], waiting=False)
    assert_float32_identical([result["every_worker"]["launched"]], [result["every_worker"]["plain"]])


# --------------------------------------------------------------------------------------------
# Ray: a local cluster of worker processes, a remote task and an actor


@pytest.fixture(scope="module")
def ray_runs(tmp_path_factory):
    runs = {}

    def run(setting: str) -> dict:
        require_engine("ray")
        if setting not in runs:
            out = tmp_path_factory.mktemp(f"ray-{setting}")
            # Ray's session files (sockets, logs) in a short directory of this run's own.
            ray_temp = tempfile.mkdtemp(prefix="khp-ray-")
            try:
                # Ray's token authentication stays on, with a token of this run's own: without one,
                # ray.init() of a new local cluster writes ~/.ray/auth_token.
                settings = {"CLUSTER_JOBS_RAY_TEMP_DIR": ray_temp, "RAY_AUTH_TOKEN": secrets.token_hex(32)}
                if setting != "unset":
                    settings["CLUSTER_JOBS_RAY_RUNTIME_ENV"] = "1"
                command = [sys.executable, str(JOBS), "ray", str(out / "ray.json")]
                run_bounded(command, environment(**settings), out, timeout=300, marker=ray_temp)
            finally:
                shutil.rmtree(ray_temp, ignore_errors=True)
            runs[setting] = json.loads((out / "ray.json").read_text())
        return runs[setting]

    return run


@cluster_test
def test_ray_workers_fail_in_half_without_the_shim(ray_runs):
    result = ray_runs("unset")
    assert not result["driver_imported_kornia"]
    assert_broken(result["batches"] + result["actor"])
    assert_hook_left_alone(result["no_kornia"], waiting=False)


@cluster_test
def test_ray_disable_in_a_tasks_runtime_env_wins_in_workers_of_its_own(ray_runs):
    # One Ray start less than a run with the switch in the driver's environment, and it shows
    # that Ray does not hand such a task to the job's (patched) workers.
    result = ray_runs("runtime_env")
    assert_broken(result["disabled_in_runtime_env"])
    patched_workers = {report["pid"] for report in result["batches"] + result["actor"]}
    assert not patched_workers & {report["pid"] for report in result["disabled_in_runtime_env"]}


@cluster_test
def test_ray_task_and_actor_apply_the_shim_with_the_runtime_env(ray_runs):
    result = ray_runs("runtime_env")
    assert not result["driver_imported_kornia"]
    assert_fixed(result["batches"] + result["actor"])
    # the actor is a worker process of its own; tasks run in the pool's (reused) workers
    assert len({report["pid"] for report in result["batches"] + result["actor"]}) >= 2
    assert_hook_left_alone(result["no_kornia"], waiting=True)
    assert_float32_identical(result["batches"], ray_runs("unset")["batches"])
