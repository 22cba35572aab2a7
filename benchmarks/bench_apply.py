"""What the shim costs a program and a test run: ``import kornia``, the first ``apply()`` after it,
and one ``testing.isolated(only=[name])`` cycle (the pytest plugin's fixtures run one per test).

    python benchmarks/bench_apply.py [--processes 3] [--cycles 5]

Targets on kornia 0.8.2: the first ``apply()`` at most 5% of ``import kornia`` in a fresh
process (torch's import included; kornia's own share is printed too), an isolated cycle at most
20 ms with every fix applied before. ``import kornia_halfpatch`` is timed on its own and the
apply() ratio is printed with it too (a program pays both).
Each process is a fresh interpreter (``import`` and the probes run once per process); the
figures are medians over the processes (import and apply) and over every cycle of every process.
The process's CPU time is printed beside the wall time, and the apply ratio is given both ways.
The first ``apply()`` is measured twice: cold (``KORNIA_HALFPATCH_CACHE=0``: every probe runs, as in
the first process on an installation) and warm (the probe cache filled by one process before, as
in every later process); the cache lives in a temporary directory of the run, removed after. The
5% target is the warm figure, what a program pays at each start (and each spawned worker under
``KORNIA_HALFPATCH_AUTO=1``); the cold one is paid once per installation (again after torch,
kornia or the shim change, or on another CPU): the probes' torch computations, reading kornia's
bytecode and compiling the generated wrappers, printed for what it is.
Neither is steady on a loaded machine: the probes run small torch computations on torch's intra-op
threads, whose OpenMP workers spin while they wait for a core, so under load the first apply()'s
CPU time grows with the load too (measured: 1.0 s CPU at load 12 on 2 cores, 0.2-0.35 s with one
thread or ``OMP_WAIT_POLICY=passive``). The load average is printed before and after the run.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Worker, serve  # noqa: E402


def worker(cycles: int) -> None:
    warnings.simplefilter("ignore")
    started, cpu_at_start = time.perf_counter(), time.process_time()
    import torch

    torch_imported, cpu_torch_imported = time.perf_counter(), time.process_time()
    import kornia

    kornia_imported, cpu_kornia_imported = time.perf_counter(), time.process_time()
    import kornia_halfpatch

    shim_imported, cpu_shim_imported = time.perf_counter(), time.process_time()
    report = kornia_halfpatch.apply()
    applied, cpu_applied = time.perf_counter(), time.process_time()
    from kornia_halfpatch import testing  # the cycles' helper, not what a program imports

    failed = [f"{name}: {fix.reason}" for name, fix in report.fixes.items() if fix.verdict.name == "FAILED"]
    names = [name for name, fix in report.fixes.items() if fix.applied]
    cycle_ms: Dict[str, List[float]] = {}
    cycle_cpu_ms: List[float] = []
    for _ in range(cycles):
        for name in names:
            begun, cpu_begun = time.perf_counter(), time.process_time()
            with testing.isolated(only=[name]):
                pass
            cycle_ms.setdefault(name, []).append(1000 * (time.perf_counter() - begun))
            cycle_cpu_ms.append(1000 * (time.process_time() - cpu_begun))
    if set(kornia_halfpatch.applied_fixes()) != set(names):
        failed.append(f"isolated() did not restore the applied fixes: {kornia_halfpatch.applied_fixes()} != {names}")
    serve(
        {
            "kornia": kornia.__version__,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "import_torch": torch_imported - started,
            "import_kornia": kornia_imported - torch_imported,
            "import_torch_cpu": cpu_torch_imported - cpu_at_start,
            "import_kornia_cpu": cpu_kornia_imported - cpu_torch_imported,
            "import_shim": shim_imported - kornia_imported,
            "import_shim_cpu": cpu_shim_imported - cpu_kornia_imported,
            "apply": applied - shim_imported,
            "apply_cpu": cpu_applied - cpu_shim_imported,
            "cycle_ms": cycle_ms,
            "cycle_cpu_ms": cycle_cpu_ms,
            "failed": failed,
        },
        lambda request: {},
    )


def _load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):  # not on this platform
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.cycles)
        return

    # An installed package has its bytecode (pip compiles it); a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would compile the shim's modules from source in every process
    # (40 ms of a warm apply()), which torch and kornia never pay: compiled as pip would.
    import kornia_halfpatch

    compileall.compile_dir(os.path.dirname(kornia_halfpatch.__file__), quiet=1)
    load_before = _load_average()
    cache = tempfile.mkdtemp(prefix="kornia-halfpatch-bench-")
    os.environ["KORNIA_HALFPATCH_CACHE_DIR"] = cache  # the workers inherit it
    runs: Dict[str, List[Dict[str, Any]]] = {"cold": [], "warm": []}
    try:
        for kind in ("cold", "warm"):
            os.environ["KORNIA_HALFPATCH_CACHE"] = "0" if kind == "cold" else "1"
            if kind == "warm":
                _run(args.cycles)  # fills the cache; not counted
            runs[kind] = [_run(args.cycles) for _ in range(args.processes)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    every = runs["cold"] + runs["warm"]
    first = every[0]
    by_name: Dict[str, List[float]] = {}
    for run in every:
        for name, times in run["cycle_ms"].items():
            by_name.setdefault(name, []).extend(times)
    every_cycle = [ms for times in by_name.values() for ms in times]
    print(f"kornia {first['kornia']}, torch {first['torch']}; {args.processes} fresh processes cold and "
          f"{args.processes} warm, {first['threads']} intra-op threads; load average {load_before} before, "
          f"{_load_average()} after")
    import_kornia = statistics.median(run["import_kornia"] for run in every)
    import_torch = statistics.median(run["import_torch"] for run in every)
    whole = import_torch + import_kornia
    whole_cpu = statistics.median(run["import_torch_cpu"] + run["import_kornia_cpu"] for run in every)
    kornia_cpu = statistics.median(run["import_kornia_cpu"] for run in every)
    print(f"import kornia               {1000 * whole:8.1f} ms  (torch {1000 * import_torch:.1f} + kornia's own "
          f"{1000 * import_kornia:.1f}); CPU time {1000 * whole_cpu:.1f} ms (kornia's own {1000 * kornia_cpu:.1f})")
    shim = statistics.median(run["import_shim"] for run in every)
    shim_cpu = statistics.median(run["import_shim_cpu"] for run in every)
    print(f"import kornia_halfpatch     {1000 * shim:8.1f} ms  (CPU time {1000 * shim_cpu:.1f} ms; "
          f"{100 * shim / whole:.1f} % of import kornia, CPU time {100 * shim_cpu / whole_cpu:.1f} %)")
    for kind, label in (("cold", "cold: every probe runs"), ("warm", "warm: probe cache filled")):
        apply = statistics.median(run["apply"] for run in runs[kind])
        apply_cpu = statistics.median(run["apply_cpu"] for run in runs[kind])
        print(f"first apply(), {kind}         {1000 * apply:8.1f} ms  (CPU time {1000 * apply_cpu:.1f} ms; {label})")
        target = "(target <= 5 %)" if kind == "warm" else "(once per installation)"
        print(f"    / import kornia         {100 * apply / whole:8.1f} %   {target}; CPU time "
              f"{100 * apply_cpu / whole_cpu:.1f} %")
        print(f"    / kornia's own import   {100 * apply / import_kornia:8.1f} %   CPU time {100 * apply_cpu / kornia_cpu:.1f} %")
        print(f"    with import kornia_halfpatch, / import kornia {100 * (apply + shim) / whole:5.1f} %   CPU time "
              f"{100 * (apply_cpu + shim_cpu) / whole_cpu:.1f} %")
    print(f"isolated(only=[name]) cycle {statistics.median(every_cycle):8.1f} ms median (target <= 20 ms), "
          f"{max(every_cycle):.1f} ms max, {len(every_cycle)} cycles; CPU time "
          f"{statistics.median(ms for run in every for ms in run['cycle_cpu_ms']):.1f} ms median")
    for name, times in by_name.items():
        print(f"    {name:<24} {statistics.median(times):7.1f} ms")


def _run(cycles: int) -> Dict[str, Any]:
    process = Worker(__file__, sys.executable, 1, "--cycles", str(cycles))
    process.close()
    if process.info["failed"]:
        raise SystemExit(f"a fix failed: {process.info['failed']}")
    return process.info


if __name__ == "__main__":
    main()
