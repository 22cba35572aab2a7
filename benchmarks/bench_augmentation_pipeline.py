"""Benchmark for ``augmentation_pipeline``: seeded augmentation pipelines, CPU.

    .tox/kornia082/bin/python benchmarks/bench_augmentation_pipeline.py --oracle-python .tox/kornia090/bin/python

Measures, in one run, variants interleaved round by round, medians taken (the worker protocol of
bench_torch_ops.py):

* (a) AugmentationSequential(RandomAffine, ColorJiggle, RandomPerspective, RandomGrayscale) on
  16x3x224x224: bfloat16 (and float16) patched installed kornia versus kornia 0.9.0 (the
  ``--oracle-python`` interpreter); float32 patched versus unpatched (target <= 1.03: the entry
  points' dtype test and a walk over the submodules is the only added work).
* the per-call cost of the wrapper: RandomGrayscale on 1x3x8x8, float32 patched versus
  unpatched (an upper bound of the float32 overhead: the pipelines' calls take ~1 s, and on a
  shared machine their ratios move by +-10% between runs).
* (b) AugmentationSequential(RandomAffine, RandomPerspective) on 8x3x512x512: float16 and
  bfloat16 patched versus 0.9.0 (target <= 1.1: the shim samples in float32 as 0.9.0's warps do,
  plus one widening and one narrowing of the image), float32 patched versus unpatched; and the
  peak memory of one call in a fresh process, patched versus 0.9.0.

Every variant runs the shim with all its needed fixes (what ``apply()`` installs); unpatched
means every fix reverted.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from _harness import ROOT, Worker, half_against_oracle, interleaved_rounds, variants
PIPELINE_A = "AugSeq(Affine,ColorJiggle,Perspective,Gray) 16x3x224x224"
PIPELINE_B = "AugSeq(Affine,Perspective) 8x3x512x512"
FIXED_COST = "RandomGrayscale 1x3x8x8, 50 calls (fixed cost)"


def cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """name -> (dtype -> a no-argument call on prepared inputs; seeded, so every run draws alike)."""
    import torch
    import kornia.augmentation as K

    def image(shape, dtype):
        generator = torch.Generator().manual_seed(1)
        return torch.rand(*shape, generator=generator).to(dtype)

    def pipeline_a(dtype):
        module = K.AugmentationSequential(
            K.RandomAffine(30.0, translate=(0.1, 0.1), scale=(0.9, 1.1), p=1.0),
            K.ColorJiggle(0.2, 0.2, 0.2, 0.1, p=1.0),
            K.RandomPerspective(0.3, p=1.0),
            K.RandomGrayscale(p=0.2),
        )
        x = image((16, 3, 224, 224), dtype)

        def call():
            torch.manual_seed(0)
            return module(x)

        return call

    def pipeline_b(dtype):
        module = K.AugmentationSequential(K.RandomAffine(30.0, p=1.0), K.RandomPerspective(0.3, p=1.0))
        x = image((8, 3, 512, 512), dtype)

        def call():
            torch.manual_seed(0)
            return module(x)

        return call

    def fixed_cost(dtype):
        # A tiny input: the per-call cost of the entry point's wrapper (dtype test, output walk)
        # is not hidden behind the warps here, so the float32 ratio bounds the shim's overhead.
        module = K.RandomGrayscale(p=1.0)
        x = image((1, 3, 8, 8), dtype)

        def call():
            torch.manual_seed(0)
            for _ in range(50):
                module(x)

        return call

    return {PIPELINE_A: pipeline_a, PIPELINE_B: pipeline_b, FIXED_COST: fixed_cost}


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() // 1024


def worker(threads: int, memory_case: str, memory_dtype: str) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import kornia
    import kornia_halfpatch

    if threads:
        torch.set_num_threads(threads)
    kornia_halfpatch.apply()
    built = cases()
    if memory_case:
        # A fresh process per measurement: the high-water mark then covers this one call.
        call = built[memory_case](getattr(torch, memory_dtype))
        with torch.no_grad():
            before = _current_rss_kib()
            call()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"peak_mib": (peak - before) / 1024}), flush=True)
        return
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
                with kornia_halfpatch.unpatched():
                    times = run()
            print(json.dumps({"times": times}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            print(json.dumps({"error": f"{type(exc).__name__}"}), flush=True)


def peak_memory(python: str, threads: int, case: str, dtype: str) -> float:
    command = [python, str(Path(__file__).resolve()), "--worker", "--threads", str(threads),
               "--memory-case", case, "--memory-dtype", dtype]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["peak_mib"]
    raise RuntimeError(f"memory worker failed: {out.stderr[-500:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-case", default="", help=argparse.SUPPRESS)
    parser.add_argument("--memory-dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads, args.memory_case, args.memory_dtype)
        return 0
    names = [PIPELINE_A, PIPELINE_B, FIXED_COST]
    local = Worker(__file__, sys.executable, args.threads)
    oracle = Worker(__file__, args.oracle_python, args.threads) if args.oracle_python else None
    # The releases' own float32 speeds differ: 0.9.0's float32 is the baseline for the half ratios.
    chosen = variants(names, oracle is not None, oracle_float32=True)
    median, errors = interleaved_rounds(chosen, local, oracle, args.rounds, args.reps)
    memory: Dict[str, Dict[str, float]] = {}
    for dtype in ("float16", "bfloat16"):
        memory[dtype] = {"patched": peak_memory(sys.executable, args.threads, PIPELINE_B, dtype)}
        if args.oracle_python:
            memory[dtype]["kornia 0.9.0"] = peak_memory(args.oracle_python, args.threads, PIPELINE_B, dtype)
    rows = []
    for name in names:
        row: Dict[str, Any] = {"case": name}
        row["float32 patched/unpatched"] = median[(name, "patched", "float32")] / median[(name, "unpatched", "float32")]
        row["float32 ms"] = median[(name, "unpatched", "float32")] * 1e3
        if (name, "kornia 0.9.0", "float32") in median:
            row["float32 unpatched/0.9.0"] = median[(name, "unpatched", "float32")] / median[(name, "kornia 0.9.0", "float32")]
        for dtype in ("float16", "bfloat16"):
            half_against_oracle(row, name, dtype, median, errors)
        rows.append(row)
    result = {"benchmark": "augmentation: seeded AugmentationSequential pipelines, CPU", "installed": local.info,
              "oracle": oracle.info if oracle else None, "rows": rows, "samples_per_variant": args.rounds * args.reps,
              "peak_memory_mib": memory, "float32_target": 1.03, "half_target_vs_090": 1.1,
              "float32_met": all(r["float32 patched/unpatched"] <= 1.03 for r in rows)}
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']}; installed kornia {local.info['kornia']}, torch {local.info['torch']}, "
          f"{local.info['threads']} threads; {result['samples_per_variant']} calls per variant")
    print(f"  {'case':<58} {'f32 p/u':>8} {'f32 u/0.9':>9} {'f16 p/0.9':>10} {'bf16 p/0.9':>10} {'f32 ms':>8} "
          f"{'f16 ms':>8} {'bf16 ms':>8}")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else (v or "-")  # noqa: E731
    for r in rows:
        print(f"  {r['case']:<58} {r['float32 patched/unpatched']:8.3f} {fmt(r.get('float32 unpatched/0.9.0')):>9} "
              f"{fmt(r.get('float16 patched/0.9.0')):>10} "
              f"{fmt(r.get('bfloat16 patched/0.9.0')):>10} {r['float32 ms']:8.1f} "
              f"{fmt(r.get('float16 patched ms')):>8} {fmt(r.get('bfloat16 patched ms')):>8}")
    for dtype, values in memory.items():
        text = ", ".join(f"{who} {mib:.0f} MiB" for who, mib in values.items())
        ratio = (f" (patched/0.9.0 {values['patched'] / values['kornia 0.9.0']:.2f})"
                 if "kornia 0.9.0" in values and values["kornia 0.9.0"] > 0 else "")
        print(f"  peak memory of one call, {PIPELINE_B}, {dtype}: {text}{ratio}")
    print(f"  float32 target <= 1.03: {'met' if result['float32_met'] else 'NOT met'} (per case above); "
          f"half target vs 0.9.0 <= 1.1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
