"""Benchmark: LAF patch extraction, patched old kornia vs unpatched old kornia vs kornia 0.9.0.

Run with an old kornia's python; kornia 0.9.0 runs in a worker process started with
``--oracle-python`` (the 0.9.0 env's python). The three variants are timed interleaved, call by
call (the worker times one call when asked), and the medians are compared:

    tox -e bench-oracle && .tox/bench/bin/python benchmarks/bench_feature_patches.py \
        --oracle-python .tox/bench-oracle/bin/python

Cases: extract_patches_simple and extract_patches_from_pyramid, float16 and float32 images with
LAFs of the same dtype, CPU, B=2, N=512, PS=32, CH=1 and 3, on a 180x180 image by default
(half CPU grid_sample of the unpatched release is only correct up to 181x181; ``--size`` to
change), LAF scales 4..64 px so the pyramid uses three levels. Then peak memory of one
float32 call with N=20000, CH=8 (B=1), each variant in a fresh process, measured as the growth of
the peak resident set over the resident set before the call (glibc's mmap threshold pinned so
freed blocks leave the resident set).

``--emit-json`` prints the results as JSON instead of a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import torch

FUNCTIONS = ("extract_patches_simple", "extract_patches_from_pyramid")
DTYPES = {"float16": torch.float16, "float32": torch.float32}
B, N, PS = 2, 512, 32
MEMORY_CASE = dict(B=1, N=20000, CH=8, PS=32, size=512)


def make_inputs(
    B: int, N: int, CH: int, size: int, dtype: torch.dtype, seed: int = 0
) -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    img = torch.rand(B, CH, size, size, generator=generator, dtype=torch.float64)
    centre = torch.rand(B, N, 2, generator=generator, dtype=torch.float64) * size
    scale = 4.0 * 16.0 ** torch.rand(B, N, 1, 1, generator=generator, dtype=torch.float64)  # 4..64 px
    angle = torch.rand(B, N, generator=generator, dtype=torch.float64) * 6.283185307179586
    cos, sin = angle.cos(), angle.sin()
    linear = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2) * scale
    laf = torch.cat([linear, centre.unsqueeze(-1)], dim=-1)
    return img.to(dtype), laf.to(dtype)


def cases(size: int) -> List[Tuple[str, str, int]]:
    return [(function, dtype, ch) for function in FUNCTIONS for dtype in DTYPES for ch in (1, 3)]


def case_key(case: Tuple[str, str, int]) -> str:
    return f"{case[0]} {case[1]} CH={case[2]}"


def time_call(function, img: torch.Tensor, laf: torch.Tensor) -> float:
    start = time.perf_counter()
    function(img, laf, PS)
    return time.perf_counter() - start


# --------------------------------------------------------------------------------------------
# Worker (kornia 0.9.0 env): times one call per request line "index", answers seconds.


def worker(size: int) -> None:
    import kornia.feature as KF

    prepared = []
    for function, dtype, ch in cases(size):
        img, laf = make_inputs(B, N, ch, size, DTYPES[dtype])
        prepared.append((getattr(KF, function), img, laf))
    print(json.dumps({"kornia": __import__("kornia").__version__}), flush=True)
    for line in sys.stdin:
        function, img, laf = prepared[int(line)]
        print(repr(time_call(function, img, laf)), flush=True)


# --------------------------------------------------------------------------------------------
# Peak memory (fresh process per variant)


def _resident_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def memory_worker(variant: str, function: str) -> None:
    import resource

    import kornia
    import kornia.feature as KF

    if variant == "patched":
        import kornia_halfpatch

        kornia_halfpatch.apply(only=["feature_patches"])
    c = MEMORY_CASE
    img, laf = make_inputs(c["B"], c["N"], c["CH"], c["size"], torch.float32)
    extract = getattr(KF, function)
    extract(img, laf[:, :4], c["PS"])  # warm up kernels and thread pools
    before = _resident_kib()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = extract(img, laf, c["PS"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "kornia": kornia.__version__,
        "peak_growth_mib": (peak - before) / 1024.0,
        "output_mib": out.numel() * out.element_size() / 2**20,
        # The growth is only measured if the call set a new high-water mark.
        "valid": peak > peak_before,
    }))


def measure_memory(python: str, variant: str) -> Dict:
    # A fixed mmap threshold makes glibc map every large block and unmap it on free, so the
    # resident set follows live tensors instead of keeping freed blocks on the heap.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    result = {}
    for function in FUNCTIONS:  # a fresh process per call: its own high-water mark
        run = subprocess.run(
            [python, os.path.abspath(__file__), "--memory-worker", variant, function],
            capture_output=True, text=True, check=True, env=env,
        )
        result[function] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------------------------
# Driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--size", type=int, default=180)
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.size)
    if args.memory_worker:
        return memory_worker(*args.memory_worker)

    import kornia
    import kornia.feature as KF

    import kornia_halfpatch

    all_cases = cases(args.size)
    inputs = [make_inputs(B, N, ch, args.size, DTYPES[dtype]) for _, dtype, ch in all_cases]
    oracle = None
    if args.oracle_python:
        oracle = subprocess.Popen(
            [args.oracle_python, os.path.abspath(__file__), "--worker", "--size", str(args.size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        oracle_version = json.loads(oracle.stdout.readline())["kornia"]

    def run_local(index: int, patched: bool) -> float:
        function = getattr(KF, all_cases[index][0])
        img, laf = inputs[index]
        if patched:
            return time_call(function, img, laf)
        with kornia_halfpatch.unpatched():
            function = getattr(KF, all_cases[index][0])
            return time_call(function, img, laf)

    def run_oracle(index: int) -> float:
        oracle.stdin.write(f"{index}\n")
        oracle.stdin.flush()
        return float(oracle.stdout.readline())

    kornia_halfpatch.apply(only=["feature_patches"])
    variants = ["patched", "unpatched"] + (["kornia 0.9.0"] if oracle else [])
    timings: Dict[Tuple[int, str], List[float]] = {(i, v): [] for i in range(len(all_cases)) for v in variants}
    shuffle = random.Random(0)
    for repeat in range(args.repeats + 2):  # the first two rounds warm up
        for index in range(len(all_cases)):
            order = list(variants)
            shuffle.shuffle(order)
            for variant in order:
                if variant == "kornia 0.9.0":
                    seconds = run_oracle(index)
                else:
                    seconds = run_local(index, variant == "patched")
                if repeat >= 2:
                    timings[(index, variant)].append(seconds)
    if oracle:
        oracle.stdin.close()
        oracle.wait()

    results = {"kornia": kornia.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "size": args.size, "B": B, "N": N, "PS": PS, "repeats": args.repeats, "cases": {}}
    for index, case in enumerate(all_cases):
        medians = {v: statistics.median(timings[(index, v)]) * 1e3 for v in variants}
        entry = {"median_ms": medians, "patched_over_unpatched": medians["patched"] / medians["unpatched"]}
        if oracle:
            entry["patched_over_0.9.0"] = medians["patched"] / medians["kornia 0.9.0"]
        results["cases"][case_key(case)] = entry
    if not args.no_memory:
        results["memory"] = {"case": MEMORY_CASE, "patched": measure_memory(sys.executable, "patched"),
                             "unpatched": measure_memory(sys.executable, "unpatched")}
        if args.oracle_python:
            results["memory"]["kornia 0.9.0"] = measure_memory(args.oracle_python, "0.9.0")

    if args.emit_json:
        print(json.dumps(results, indent=1))
        return
    print(f"kornia {results['kornia']} (patched/unpatched)" + (f" vs kornia {oracle_version}" if oracle else "")
          + f", torch {results['torch']}, {results['threads']} threads, CPU, image {args.size}x{args.size}, "
          f"B={B} N={N} PS={PS}, median of {args.repeats} interleaved calls (ms)")
    header = f"{'case':<44}{'patched':>9}{'unpatched':>11}"
    header += (f"{'0.9.0':>9}{'p/0.9.0':>9}" if oracle else "") + f"{'p/unp':>8}"
    print(header)
    for key, entry in results["cases"].items():
        m = entry["median_ms"]
        line = f"{key:<44}{m['patched']:>9.2f}{m['unpatched']:>11.2f}"
        if oracle:
            line += f"{m['kornia 0.9.0']:>9.2f}{entry['patched_over_0.9.0']:>9.3f}"
        print(line + f"{entry['patched_over_unpatched']:>8.3f}")
    if "memory" in results:
        c = MEMORY_CASE
        print(f"\npeak memory growth, float32, B={c['B']} N={c['N']} CH={c['CH']} PS={c['PS']} image {c['size']}^2 "
              f"(workspace budget 64 MiB):")
        for variant in ("patched", "unpatched", "kornia 0.9.0"):
            if variant in results["memory"]:
                for function in FUNCTIONS:
                    r = results["memory"][variant][function]
                    print(f"  {variant:<13}{function:<30} peak +{r['peak_growth_mib']:8.1f} MiB, output "
                          f"{r['output_mib']:.1f} MiB, beyond output {r['peak_growth_mib'] - r['output_mib']:7.1f} MiB"
                          + ("" if r["valid"] else " (not measured: below the import high-water mark)"))


if __name__ == "__main__":
    main()
