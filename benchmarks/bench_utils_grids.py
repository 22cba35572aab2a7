"""create_meshgrid: patched / unpatched time ratios, measured in one run (interleaved, medians).

    python benchmarks/bench_utils_grids.py [--repeat 41]

Target: float32 calls no more than 3% slower than unpatched.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import kornia  # noqa: F401
import kornia_halfpatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import grid_module  # noqa: E402 - where the tests find create_meshgrid, one definition


def per_call_seconds(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=41)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kornia_halfpatch.revert()
    module = grid_module()
    unpatched = module.create_meshgrid
    kornia_halfpatch.apply(only=["utils_grids"])
    patched = module.create_meshgrid
    assert patched is not unpatched, "the utils_grids fix is not applied on this kornia"
    cases = {
        "float32 16x16 (dtype=None)": (lambda f: (lambda: f(16, 16)), 2000),
        "float32 16x16 (dtype given)": (lambda f: (lambda: f(16, 16, True, None, torch.float32)), 2000),
        "float16 16x16": (lambda f: (lambda: f(16, 16, True, None, torch.float16)), 2000),
        "bfloat16 512x512": (lambda f: (lambda: f(512, 512, True, None, torch.bfloat16)), 200),
    }
    print(f"kornia {kornia.__version__}, torch {torch.__version__}, 1 thread, {args.repeat} interleaved rounds")
    for name, (make, calls) in cases.items():
        times = {"unpatched": [], "patched": []}
        for _ in range(args.repeat):
            times["unpatched"].append(per_call_seconds(make(unpatched), calls))
            times["patched"].append(per_call_seconds(make(patched), calls))
        before, after = statistics.median(times["unpatched"]), statistics.median(times["patched"])
        print(f"{name:<28} unpatched {before * 1e6:8.2f} us  patched {after * 1e6:8.2f} us  ratio {after / before:.3f}")

    # The shim's own cost, isolated from kornia's: the replacement around a do-nothing original.
    # Robust on a loaded machine, where the ratios above move by a few percent between runs.
    from kornia_halfpatch.fixes.utils_grids import build_create_meshgrid

    def nothing(height, width, normalized_coordinates=True, device=None, dtype=None):
        return None

    around_nothing = build_create_meshgrid(nothing)
    overhead = min(
        per_call_seconds(lambda: around_nothing(16, 16), 100000) - per_call_seconds(lambda: nothing(16, 16), 100000)
        for _ in range(5)
    )
    base = statistics.median(per_call_seconds(lambda: unpatched(16, 16), 2000) for _ in range(5))
    print(f"shim overhead per float32 call: {overhead * 1e6:.3f} us = {overhead / base:.2%} of create_meshgrid(16, 16)")


if __name__ == "__main__":
    main()
