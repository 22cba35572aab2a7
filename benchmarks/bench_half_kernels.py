"""Benchmark for ``half_kernels`` and ``fp16_conv_hang``: each promoted public function, CPU.

    .tox/kornia082/bin/python benchmarks/bench_half_kernels.py --oracle-python .tox/kornia090/bin/python

Measures, in one run, variants interleaved round by round, medians taken:

* float16 and bfloat16: patched installed kornia versus kornia 0.9.0 (the ``--oracle-python``
  interpreter), same seeded inputs. 0.9.0 also promotes these ops to float32 (or casts), so the
  ratio says what the wholesale promotion costs against 0.9.0's own choice.
* float32: patched versus unpatched installed kornia. Target: ratio <= 1.03 (the wrapper's dtype
  test is the only added work).

``gaussian_blur2d`` (kernel 15, fp16_conv_hang) is measured in float32 and bfloat16 only against
0.9.0: float16 there would hang on avx512_fp16 CPUs unpatched (and in 0.9.0).
Workers are started once (``--worker``) and time calls on request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
FIXES = ["half_kernels", "fp16_conv_hang"]


def cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """name -> (dtype -> a no-argument call on prepared inputs). Realistic sizes."""
    import torch
    import kornia

    g = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    ep = kornia.geometry.epipolar

    def guided(dtype):
        guidance, image = torch.rand(1, 3, 256, 256, generator=g(1)).to(dtype), torch.rand(1, 3, 256, 256, generator=g(2)).to(dtype)
        return lambda: kornia.filters.guided_blur(guidance, image, 5, 0.01)

    def zca(dtype):
        x = torch.rand(2048, 48, generator=g(3)).to(dtype)
        return lambda: kornia.enhance.zca_whiten(x)

    def ellipses(dtype):
        xy = torch.rand(1, 2000, 2, generator=g(4)) * 256
        abc = torch.cat([0.02 + torch.rand(1, 2000, 1, generator=g(5)) * 0.05, torch.zeros(1, 2000, 1),
                         0.02 + torch.rand(1, 2000, 1, generator=g(6)) * 0.05], -1)
        e = torch.cat([xy, abc], -1).to(dtype)
        return lambda: kornia.feature.laf.ellipse_to_laf(e)

    def matcher(dtype):
        a, b = torch.rand(25, 128, generator=g(7)).to(dtype), torch.rand(25, 128, generator=g(8)).to(dtype)
        return lambda: kornia.feature.match_snn(a, b, 0.9)

    def soft_argmax(dtype):
        v = torch.rand(1, 1, 3, 128, 128, generator=g(9)).to(dtype)
        return lambda: kornia.geometry.subpix.conv_soft_argmax3d(v)

    def fundamental7(dtype):
        X = torch.cat([torch.rand(256, 7, 2, generator=g(10)) * 2 - 1, 2 + torch.rand(256, 7, 1, generator=g(11))], -1)
        x1, x2 = X[..., :2] / X[..., 2:], (X[..., :2] + 0.25) / (X[..., 2:] + 0.125)
        x1, x2 = x1.to(dtype), x2.to(dtype)
        return lambda: ep.find_fundamental(x1, x2, None, "7POINT")

    def decompose(dtype):
        E = torch.randn(1024, 3, 3, generator=g(12)).to(dtype)
        return lambda: ep.decompose_essential_matrix(E)

    def krt(dtype):
        P = (torch.eye(3, 4) + 0.1 * torch.randn(1024, 3, 4, generator=g(13))).to(dtype)
        return lambda: ep.KRt_from_projection(P)

    def warp3d(dtype):
        src = torch.rand(1, 1, 16, 64, 64, generator=g(14)).to(dtype)
        M = torch.eye(4).unsqueeze(0)
        M[:, :3, 3] = 0.5
        M = M.to(dtype)
        return lambda: kornia.geometry.transform.warp_perspective3d(src, M, (16, 64, 64))

    def blur15(dtype):
        x = torch.rand(1, 3, 256, 256, generator=g(15)).to(dtype)
        return lambda: kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))

    return {
        "guided_blur 3ch 256x256": guided,
        "zca_whiten 2048x48": zca,
        "ellipse_to_laf 2000": ellipses,
        "match_snn 25x25x128": matcher,
        "conv_soft_argmax3d 3x128x128": soft_argmax,
        "find_fundamental 7POINT B=256": fundamental7,
        "decompose_essential_matrix B=1024": decompose,
        "KRt_from_projection B=1024": krt,
        "warp_perspective3d 16x64x64": warp3d,
        "gaussian_blur2d k=15 3x256x256": blur15,
    }


NO_FLOAT16 = {"gaussian_blur2d k=15 3x256x256"}


def worker(threads: int) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import kornia
    import kornia_halfpatch

    if threads:
        torch.set_num_threads(threads)
    kornia_halfpatch.apply(only=FIXES)
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
                with kornia_halfpatch.unpatched(FIXES):
                    times = run()
            print(json.dumps({"times": times}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            print(json.dumps({"error": f"{type(exc).__name__}"}), flush=True)


class Worker:
    def __init__(self, python: str, threads: int) -> None:
        command = [python, str(Path(__file__).resolve()), "--worker", "--threads", str(threads)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.info = self._read()

    def _read(self) -> Dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("benchmark worker exited")
            if line.startswith("{"):
                return json.loads(line)

    def time(self, case: str, dtype: str, patched: bool, reps: int) -> Dict:
        self.process.stdin.write(json.dumps({"case": case, "dtype": dtype, "patched": patched, "reps": reps}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return 0
    sys.path.insert(0, str(ROOT))
    names = list(cases())
    local = Worker(sys.executable, args.threads)
    oracle = Worker(args.oracle_python, args.threads) if args.oracle_python else None
    variants = []
    for name in names:
        variants += [(name, "patched", "float32"), (name, "unpatched", "float32")]
        for dtype in ("float16", "bfloat16"):
            if dtype == "float16" and name in NO_FLOAT16:
                continue
            variants.append((name, "patched", dtype))
            if oracle is not None:
                variants.append((name, "kornia 0.9.0", dtype))
    samples: Dict[tuple, List[float]] = {v: [] for v in variants}
    errors: Dict[tuple, str] = {}
    try:
        for index in range(args.rounds):
            for variant in (variants if index % 2 == 0 else variants[::-1]):
                name, who, dtype = variant
                if variant in errors:
                    continue
                source = oracle if who == "kornia 0.9.0" else local
                answer = source.time(name, dtype, who != "unpatched", args.reps)
                if "error" in answer:
                    errors[variant] = answer["error"]
                else:
                    samples[variant] += answer["times"]
    finally:
        local.close()
        if oracle is not None:
            oracle.close()
    median = {v: statistics.median(s) for v, s in samples.items() if s}
    rows = []
    for name in names:
        row = {"case": name}
        row["float32 patched/unpatched"] = median[(name, "patched", "float32")] / median[(name, "unpatched", "float32")]
        for dtype in ("float16", "bfloat16"):
            key = (name, "kornia 0.9.0", dtype)
            if (name, "patched", dtype) in median:
                row[f"{dtype} patched ms"] = median[(name, "patched", dtype)] * 1e3
            if key in median and (name, "patched", dtype) in median:
                row[f"{dtype} patched/0.9.0"] = median[(name, "patched", dtype)] / median[key]
            elif key in errors:
                row[f"{dtype} patched/0.9.0"] = f"0.9.0 raises {errors[key]}"
        rows.append(row)
    result = {"benchmark": "half_kernels: promoted public functions, CPU", "installed": local.info,
              "oracle": oracle.info if oracle else None, "rows": rows, "samples_per_variant": args.rounds * args.reps,
              "float32_target": 1.03,
              "float32_met": all(r["float32 patched/unpatched"] <= 1.03 for r in rows)}
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']}; installed kornia {local.info['kornia']}, torch {local.info['torch']}, "
          f"{local.info['threads']} threads; {result['samples_per_variant']} calls per variant")
    print(f"  {'case':<36} {'f32 p/u':>8} {'f16 p/0.9':>12} {'bf16 p/0.9':>12} {'f16 ms':>8} {'bf16 ms':>8}")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else (v or "-")  # noqa: E731
    for r in rows:
        print(f"  {r['case']:<36} {r['float32 patched/unpatched']:8.3f} {fmt(r.get('float16 patched/0.9.0')):>12} "
              f"{fmt(r.get('bfloat16 patched/0.9.0')):>12} {fmt(r.get('float16 patched ms')):>8} {fmt(r.get('bfloat16 patched ms')):>8}")
    print(f"  float32 target <= 1.03: {'met' if result['float32_met'] else 'NOT met'} (per case above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
