"""The driver side of test_clusters.py: kornia in the worker processes of torchrun, Dask and Ray.

    torchrun --nproc-per-node 2 ... cluster_jobs.py torchrun OUT_DIR
    python cluster_jobs.py dask OUT.json
    python cluster_jobs.py dask-cli OUT.json
    python cluster_jobs.py ray OUT.json

Every worker runs :func:`half_step` on its batches: ``kornia.enhance.zca_whiten`` in float16 on
CPU, which kornia 0.7-0.8 cannot run (``NotImplementedError: "linalg_svd_cpu" not implemented for
'Half'``) and which the shim's ``torch_ops`` fix runs as the release's float32 computation narrowed
once, and the same call in float32 on the same (float16-representable) values, the oracle. Neither
this driver nor anything it imports touches kornia or kornia_halfpatch: a fixed worker can only
have been fixed by the start-up hook in that worker. The workers' functions are defined here, in
``__main__``, so that Dask and Ray ship them by value (their workers need not find this file).

The lines that switch the shim on are the ones docs/usage.md gives (test_clusters.py checks that
they appear there, character for character): the driver's environment says whether they are used.
"""

import json
import os
import sys
from pathlib import Path

ENV_AUTO = "KORNIA_HALFPATCH_AUTO"
BATCHES = 4


def half_step(batch: int) -> dict:
    """zca_whiten of one batch in float16 and in float32, in this worker; what happened."""
    import hashlib

    # A reused worker (Dask, Ray, a rank's second step) has both imported from its earlier calls.
    kornia_imported_before = "kornia" in sys.modules
    shim_imported_before_kornia = "kornia_halfpatch" in sys.modules and not kornia_imported_before
    import torch

    import kornia

    generator = torch.Generator().manual_seed(batch)
    # 64 samples of 3x8x8: float16 values, so the float32 call sees exactly the half call's input.
    data = torch.rand(64, 3, 8, 8, generator=generator).half()
    float32_result = kornia.enhance.zca_whiten(data.float(), dim=0)
    try:
        half_result = kornia.enhance.zca_whiten(data, dim=0)
    except Exception as error:  # noqa: BLE001  (the broken case is the point)
        outcome = f"{type(error).__name__}: {error}"[:300]
    else:
        narrowed = float32_result.half()
        if half_result.dtype != torch.float16:
            outcome = f"dtype {half_result.dtype}"
        elif torch.equal(half_result, narrowed):
            outcome = "equals float32 narrowed"
        else:
            outcome = f"differs from float32 narrowed by {(half_result.float() - narrowed.float()).abs().max().item()}"
    shim = sys.modules.get("kornia_halfpatch")
    return {
        "pid": os.getpid(),
        "batch": batch,
        "outcome": outcome,
        "float32_sha256": hashlib.sha256(float32_result.numpy().tobytes()).hexdigest(),
        "applied": sorted(shim.applied_fixes()) if shim is not None else None,
        "kornia_imported_before": kornia_imported_before,
        "shim_imported_before_kornia": shim_imported_before_kornia,
    }


def no_kornia_step() -> dict:
    """A worker's task that never imports kornia: the hook must leave it alone."""
    return {
        "pid": os.getpid(),
        "auto": os.environ.get(ENV_AUTO),
        # with the variable set the hook's own module (standard library only) waits for kornia
        "hook_waiting": "_kornia_halfpatch_autostart" in sys.modules,
        "imported": sorted(name for name in ("kornia_halfpatch", "kornia", "wrapt") if name in sys.modules),
    }


# --------------------------------------------------------------------------------------------
# torchrun: every rank runs its batch, then the results meet in gloo collectives


def torchrun_job(out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    untouched = no_kornia_step()  # before this rank imports kornia
    report = half_step(batch=rank)

    # The float32 step on every rank, all-reduced: the sum of the ranks' float32 results.
    import kornia

    generator = torch.Generator().manual_seed(rank)
    data = torch.rand(64, 3, 8, 8, generator=generator).half()
    float32_result = kornia.enhance.zca_whiten(data.float(), dim=0)
    summed = float32_result.clone()
    dist.all_reduce(summed)
    # The half step all-reduced in float16 (gloo sums half tensors), next to the same all-reduce
    # of every rank's float32 result narrowed: equal if every rank's half result was.
    if report["outcome"] == "equals float32 narrowed":
        half = kornia.enhance.zca_whiten(data, dim=0)
    else:
        half = torch.zeros_like(data)
    narrowed = float32_result.half()
    dist.all_reduce(half)
    dist.all_reduce(narrowed)
    fixed_ranks = torch.tensor([int(report["outcome"] == "equals float32 narrowed")])
    dist.all_reduce(fixed_ranks)
    reports = [None] * world
    dist.all_gather_object(reports, {"rank": rank, "no_kornia": untouched, **report})
    if rank == 0:
        import hashlib

        result = {
            "world_size": world,
            "ranks": reports,
            "fixed_ranks": int(fixed_ranks.item()),
            "half_all_reduce_equals_narrowed_all_reduce": bool(torch.equal(half, narrowed)),
            "float32_all_reduce_sha256": hashlib.sha256(summed.numpy().tobytes()).hexdigest(),
        }
        Path(out_dir, "torchrun.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------
# Dask: a LocalCluster of worker processes (nannies), the half step mapped over batches


def dask_job(out: str) -> None:
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import WorkerPlugin

    # docs/usage.md: workers already running without the variable (or on hosts that lack it).
    class ApplyKorniaHalfpatch(WorkerPlugin):
        def setup(self, worker):
            import kornia_halfpatch
            kornia_halfpatch.apply()

    if os.environ.get("CLUSTER_JOBS_DASK_SET_AUTO") == "1":
        os.environ["KORNIA_HALFPATCH_AUTO"] = "1"
    results = {}
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    ) as cluster, Client(cluster, timeout="60s") as client:
        # Before any task imports kornia in the workers.
        results["no_kornia"] = list(client.run(no_kornia_step).values())
        futures = client.map(half_step, range(BATCHES), pure=False)
        results["batches"] = client.gather(futures)
        results["every_worker"] = list(client.run(half_step, 0).values())
        results["workers"] = len(client.scheduler_info()["workers"])
        if os.environ.get("CLUSTER_JOBS_DASK_PLUGIN") == "1":
            # The same worker processes, kornia already imported there: the plugin applies the
            # shim in each of them (and in any worker that joins or restarts later).
            client.register_plugin(ApplyKorniaHalfpatch())
            futures = client.map(half_step, range(BATCHES), pure=False)
            results["batches_after_plugin"] = client.gather(futures)
    results["driver_imported_kornia"] = "kornia" in sys.modules
    Path(out).write_text(json.dumps(results))


# --------------------------------------------------------------------------------------------
# Dask from the command line: `dask scheduler`, and two `dask worker` processes as on two hosts,
# one started with the documented prefix and one without


def dask_cli_job(out: str) -> None:
    import subprocess
    import time

    from distributed import Client

    scheduler_file = Path(out).with_name("scheduler.json")
    bin_dir = Path(sys.executable).parent
    loopback = ["--host", "127.0.0.1", "--no-dashboard"]
    processes = [
        subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--port", "0", "--scheduler-file", str(scheduler_file), *loopback])
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            if time.monotonic() > deadline or processes[0].poll() is not None:
                raise RuntimeError("the scheduler did not start")
            time.sleep(0.2)
        time.sleep(0.2)  # the file is written whole, but give it a moment
        address = json.loads(scheduler_file.read_text())["address"]
        worker = ["dask", "worker", address, "--nworkers", "1", "--nthreads", "1", "--death-timeout", "60", *loopback]
        # docs/usage.md: kornia-halfpatch run -- dask worker tcp://scheduler:8786
        processes.append(subprocess.Popen(["kornia-halfpatch", "run", "--", *worker, "--name", "launched"]))
        processes.append(subprocess.Popen([*worker, "--name", "plain"]))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
            names = {address: info["name"] for address, info in client.scheduler_info()["workers"].items()}
            results = {
                "no_kornia": {names[a]: r for a, r in client.run(no_kornia_step).items()},
                "every_worker": {names[a]: r for a, r in client.run(half_step, 0).items()},
            }
            client.shutdown()  # the scheduler and the workers
        results["driver_imported_kornia"] = "kornia" in sys.modules
        Path(out).write_text(json.dumps(results))
    finally:
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.terminate()
                process.wait(timeout=30)


# --------------------------------------------------------------------------------------------
# Ray: a local cluster (worker processes), a remote task over batches and an actor


def ray_job(out: str) -> None:
    import ray

    # Two worker processes on the loopback interface, no dashboard, Ray's files under the test's
    # temporary directory (short: Ray's unix socket paths must stay under 108 characters).
    settings = dict(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=os.environ.get("CLUSTER_JOBS_RAY_TEMP_DIR"),
    )
    if os.environ.get("CLUSTER_JOBS_RAY_RUNTIME_ENV") == "1":
        ray.init(runtime_env={"env_vars": {"KORNIA_HALFPATCH_AUTO": "1"}}, **settings)
    else:
        ray.init(**settings)
    try:
        untouched = ray.get([ray.remote(no_kornia_step).remote() for _ in range(2)], timeout=120)
        step = ray.remote(half_step)
        batches = ray.get([step.remote(batch) for batch in range(BATCHES)], timeout=300)

        @ray.remote
        class HalfStepActor:
            def run(self, batch: int) -> dict:
                return half_step(batch)

        actor = HalfStepActor.remote()
        actor_batches = ray.get([actor.run.remote(batch) for batch in range(2)], timeout=300)
        disabled = []
        if os.environ.get("CLUSTER_JOBS_RAY_RUNTIME_ENV") == "1":
            # The kill switch in a task's own runtime_env: Ray runs it in workers started with
            # that environment, never in the job's patched ones.
            switched_off = step.options(
                runtime_env={"env_vars": {"KORNIA_HALFPATCH_AUTO": "1", "KORNIA_HALFPATCH_DISABLE": "1"}}
            )
            disabled = ray.get([switched_off.remote(batch) for batch in range(2)], timeout=300)
    finally:
        ray.shutdown()
    results = {
        "no_kornia": untouched,
        "batches": batches,
        "actor": actor_batches,
        "disabled_in_runtime_env": disabled,
        "driver_imported_kornia": "kornia" in sys.modules,
    }
    Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    engine, target = sys.argv[1], sys.argv[2]
    {"torchrun": torchrun_job, "dask": dask_job, "dask-cli": dask_cli_job, "ray": ray_job}[engine](target)
