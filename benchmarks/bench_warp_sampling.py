"""warp_sampling: time ratios measured in one run (interleaved rounds, medians).

    python benchmarks/bench_warp_sampling.py [--oracle-python /path/to/kornia-0.9.0/bin/python]
                                               [--repeat 15] [--threads 1] [--emit-json out.json]

Cases: ``warp_affine`` and ``rotate`` of 8 x 3 x 512 x 512 CPU images.
- float16/bfloat16, patched installed kornia versus kornia 0.9.0 (target <= 1.05). kornia 0.9.0
  runs in a second interpreter (``--oracle-python``) that serves timing requests over a pipe,
  so its rounds interleave with the local ones.
- float32, patched versus unpatched (target <= 1.03), and, for information, float32 rotate with
  border padding forward + backward (the autograd path that masks non-finite coordinates).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import kornia

BATCH, CHANNELS, SIZE = 8, 3, 512
NAME = "warp_sampling"
# glibc moves its mmap threshold as blocks come and go, so whether a 25 MB tensor is a fresh
# (page-faulting) mapping or reused heap depends on what ran before: the apply()/revert() between
# rounds flipped it and made one variant 10-50% slower at random. Fixed thresholds remove that.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def make_case(name: str, dtype: torch.dtype):
    T = kornia.geometry.transform
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(BATCH, CHANNELS, SIZE, SIZE, generator=generator).to(dtype)
    angles = torch.linspace(10.0, 80.0, BATCH)
    if name == "warp_affine":
        centre = torch.full((BATCH, 2), SIZE / 2)
        matrix = T.get_rotation_matrix2d(centre, angles, torch.ones(BATCH, 2)).to(dtype)
        return lambda: T.warp_affine(image, matrix, (SIZE, SIZE))
    if name == "rotate":
        angle = angles.to(dtype)
        return lambda: T.rotate(image, angle)
    if name == "rotate border fwd+bwd":
        leaf = image.clone().requires_grad_(True)
        angle = angles.to(dtype)
        return lambda: T.rotate(leaf, angle, padding_mode="border").sum().backward()
    raise ValueError(name)


def seconds_per_call(fn, calls: int) -> float:
    """CPU seconds of this process per call: on a shared machine wall time mostly measures the
    neighbours. A collection first, so garbage left by apply()/revert() is not timed."""
    gc.collect()
    fn()  # warm up (allocator, first-call dispatch)
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def serve(threads: int) -> None:
    """Oracle side: read 'case dtype calls' lines, answer with seconds per call."""
    torch.set_num_threads(threads)
    print(json.dumps({"kornia": kornia.__version__, "torch": torch.__version__}), flush=True)
    cache = {}
    for line in sys.stdin:
        case, dtype, calls = line.rsplit(" ", 2)
        key = (case, dtype)
        if key not in cache:
            cache[key] = make_case(case, DTYPES[dtype])
        print(seconds_per_call(cache[key], int(calls)), flush=True)


class Oracle:
    def __init__(self, python: str, threads: int) -> None:
        self.process = subprocess.Popen(
            [python, __file__, "--serve", "--threads", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.versions = json.loads(self.process.stdout.readline())

    def time(self, case: str, dtype: str, calls: int) -> float:
        self.process.stdin.write(f"{case} {dtype} {calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU time is summed over them)")
    parser.add_argument("--emit-json", help="also write the results here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any(os.environ.get(key) != value for key, value in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_ENV})
    if args.serve:
        serve(args.threads)
        return 0

    torch.set_num_threads(args.threads)  # before anything runs: no idle pool threads spinning
    import kornia_halfpatch

    kornia_halfpatch.revert()
    report = kornia_halfpatch.apply(only=[NAME])
    if NAME not in report.applied:
        print(f"{NAME} is not applied here: {report.fixes[NAME].reason}")
        return 1
    print(
        f"kornia {kornia.__version__}, torch {torch.__version__}, {args.threads} thread(s), "
        f"{BATCH}x{CHANNELS}x{SIZE}x{SIZE}, {args.repeat} interleaved rounds of {args.calls} calls"
    )
    print(f"workaround: {report.facts[NAME]}")
    oracle = Oracle(args.oracle_python, args.threads) if args.oracle_python else None
    if oracle:
        print(f"oracle: kornia {oracle.versions['kornia']}, torch {oracle.versions['torch']} ({args.oracle_python})")
    results = {}
    comparisons = []
    if oracle:
        comparisons += [(case, dtype, "vs 0.9.0", 1.05) for case in ("warp_affine", "rotate") for dtype in ("float16", "bfloat16")]
    comparisons += [(case, "float32", "vs unpatched", 1.03) for case in ("warp_affine", "rotate")]
    comparisons += [("rotate border fwd+bwd", "float32", "vs unpatched", None)]
    for case, dtype, against, target in comparisons:
        patched_fn = make_case(case, DTYPES[dtype])
        mine, theirs = [], []

        def other() -> float:
            if against == "vs 0.9.0":
                return oracle.time(case, dtype, args.calls)
            with kornia_halfpatch.unpatched([NAME]):
                return seconds_per_call(patched_fn, args.calls)

        for round_ in range(args.repeat):  # alternate which variant goes first
            if round_ % 2:
                theirs.append(other())
                mine.append(seconds_per_call(patched_fn, args.calls))
            else:
                mine.append(seconds_per_call(patched_fn, args.calls))
                theirs.append(other())
        ratio = statistics.median(mine) / statistics.median(theirs)
        verdict = "" if target is None else (f"target <= {target}: " + ("met" if ratio <= target else "MISSED"))
        label = f"{case} {dtype} patched {against}"
        print(
            f"{label:<48} {statistics.median(mine) * 1e3:8.1f} ms vs {statistics.median(theirs) * 1e3:8.1f} ms"
            f"  ratio {ratio:.3f}  {verdict}"
        )
        results[label] = {"patched_ms": statistics.median(mine) * 1e3, "other_ms": statistics.median(theirs) * 1e3, "ratio": ratio, "target": target}
    if oracle:
        oracle.close()
    if args.emit_json:
        with open(args.emit_json, "w") as handle:
            json.dump({"kornia": kornia.__version__, "torch": torch.__version__, "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
