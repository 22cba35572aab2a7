"""Benchmark for ``warp_geometry``: half warps with float32 geometry, CPU.

    .tox/kornia082/bin/python benchmarks/bench_warp_geometry.py --oracle-python .tox/kornia090/bin/python

Measures, in one run, variants interleaved round by round, medians taken, on 8x3x512x512 images:

* float16 and bfloat16 ``warp_affine``, ``rotate``, ``warp_perspective``: patched installed kornia
  versus kornia 0.9.0 (the ``--oracle-python`` interpreter), same seeded inputs. Target <= 1.1:
  the sampling already runs in float32 on CPU in both (grid_sample has no usable half CPU kernel).
* float32: patched versus unpatched installed kornia. Target <= 1.03 (the wrapper's dtype test is
  the only added work).
* peak memory of one half call above the inputs (resident set growth, ``ru_maxrss``, each in a
  fresh process), patched versus 0.9.0.

Workers are started once (``--worker``) and time calls on request (the protocol of
bench_torch_ops.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from _harness import ROOT, Worker, half_against_oracle, interleaved_rounds, variants
FIXES = ["warp_geometry"]
SHAPE = (8, 3, 512, 512)


def cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """name -> (dtype -> a no-argument call on prepared inputs)."""
    import torch
    from kornia.geometry import transform as T

    def image(dtype):
        return torch.rand(*SHAPE, generator=torch.Generator().manual_seed(1)).to(dtype)

    def affine(dtype):
        x = image(dtype)
        M = torch.tensor([[0.9537, -0.3007, 88.3], [0.3007, 0.9537, -65.1]]).expand(SHAPE[0], 2, 3).to(dtype)
        return lambda: T.warp_affine(x, M, SHAPE[-2:], padding_mode="border")

    def rotate(dtype):
        x = image(dtype)
        angle = torch.linspace(-30, 30, SHAPE[0]).to(dtype)
        return lambda: T.rotate(x, angle)

    def perspective(dtype):
        x = image(dtype)
        H = torch.tensor([[0.9537, -0.3007, 88.3], [0.3007, 0.9537, -65.1], [2e-4, -1e-4, 1.0]])
        H = H.expand(SHAPE[0], 3, 3).to(dtype)
        return lambda: T.warp_perspective(x, H, SHAPE[-2:])

    return {"warp_affine 8x3x512x512": affine, "rotate 8x3x512x512": rotate, "warp_perspective 8x3x512x512": perspective}


def _apply():
    sys.path.insert(0, str(ROOT))
    import kornia_halfpatch

    kornia_halfpatch.apply()  # every fix, as a user would (0.9.0: patches nothing)
    return kornia_halfpatch


def worker(threads: int) -> None:
    import torch
    import kornia

    if threads:
        torch.set_num_threads(threads)
    shim = _apply()
    built = cases()
    print(json.dumps({"ready": True, "kornia": kornia.__version__, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        dtype = getattr(torch, request["dtype"])

        def run() -> List[float]:
            call = built[request["case"]](dtype)
            times = []
            with torch.no_grad():
                call()  # warm-up
                for _ in range(request["reps"]):
                    start = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - start)
            return times

        try:
            if request["patched"]:
                times = run()
            else:
                with shim.unpatched(FIXES):
                    times = run()
            print(json.dumps({"times": times}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            print(json.dumps({"error": f"{type(exc).__name__}"}), flush=True)


def peak(case: str, dtype_name: str, threads: int) -> None:
    """One call in this fresh process: resident set growth above the prepared inputs, in MiB."""
    import gc
    import resource

    import torch

    if threads:
        torch.set_num_threads(threads)
    _apply()
    call = cases()[case](getattr(torch, dtype_name))
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad():
        call()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": (after - before) / 1024}), flush=True)


def measure_peak(python: str, case: str, dtype: str, threads: int) -> float:
    command = [python, str(Path(__file__).resolve()), "--peak", case, dtype, "--threads", str(threads)]
    output = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])["peak_mib"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peak", nargs=2, metavar=("CASE", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return 0
    if args.peak:
        peak(args.peak[0], args.peak[1], args.threads)
        return 0
    sys.path.insert(0, str(ROOT))
    names = list(cases())
    local = Worker(__file__, sys.executable, args.threads)
    oracle = Worker(__file__, args.oracle_python, args.threads) if args.oracle_python else None
    median, errors = interleaved_rounds(variants(names, oracle is not None), local, oracle, args.rounds, args.reps)
    rows = []
    for name in names:
        row: Dict[str, Any] = {"case": name}
        row["float32 patched/unpatched"] = median[(name, "patched", "float32")] / median[(name, "unpatched", "float32")]
        for dtype in ("float16", "bfloat16"):
            half_against_oracle(row, name, dtype, median, errors)
            row[f"{dtype} peak MiB"] = measure_peak(sys.executable, name, dtype, args.threads)
            if oracle is not None:
                row[f"{dtype} 0.9.0 peak MiB"] = measure_peak(args.oracle_python, name, dtype, args.threads)
        rows.append(row)
    result = {"benchmark": "warp_geometry: half warps with float32 geometry, CPU", "installed": local.info,
              "oracle": oracle.info if oracle else None, "rows": rows, "samples_per_variant": args.rounds * args.reps,
              "float32_target": 1.03, "half_target": 1.1,
              "float32_met": all(r["float32 patched/unpatched"] <= 1.03 for r in rows)}
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']}; installed kornia {local.info['kornia']}, torch {local.info['torch']}, "
          f"{local.info['threads']} threads; {result['samples_per_variant']} calls per variant")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else (v or "-")  # noqa: E731
    mib = lambda v: f"{v:.0f}" if isinstance(v, float) else "-"  # noqa: E731
    print(f"  {'case':<30} {'f32 p/u':>8} {'f16 p/0.9':>10} {'bf16 p/0.9':>10} {'f16 ms':>8} {'bf16 ms':>8}"
          f" {'f16 MiB p/0.9':>14} {'bf16 MiB p/0.9':>15}")
    for r in rows:
        print(f"  {r['case']:<30} {r['float32 patched/unpatched']:8.3f} {fmt(r.get('float16 patched/0.9.0')):>10} "
              f"{fmt(r.get('bfloat16 patched/0.9.0')):>10} {fmt(r.get('float16 patched ms')):>8} "
              f"{fmt(r.get('bfloat16 patched ms')):>8} "
              f"{mib(r.get('float16 peak MiB')) + '/' + mib(r.get('float16 0.9.0 peak MiB')):>14} "
              f"{mib(r.get('bfloat16 peak MiB')) + '/' + mib(r.get('bfloat16 0.9.0 peak MiB')):>15}")
    print(f"  float32 target <= 1.03: {'met' if result['float32_met'] else 'NOT met'}; half target <= 1.1 vs 0.9.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
