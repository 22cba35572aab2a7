"""The float16 depthwise-convolution hang on CPUs with avx512_fp16, reduced to one torch call.

    python tools/fp16_conv_hang_repro.py [--timeout 20]

Found by kornia 0.8.2's own tests (TestScalePyramid::test_shape_*[cpu-float16] never return).
ScalePyramid(n_levels=1, min_size=30) on a (3, 2, 41, 41) float16 image blurs with a separable
Gaussian; the third convolution, a depthwise (2, 1, 1, 23) kernel over (3, 2, 41, 63), never
returns. Each configuration runs in a subprocess with a timeout; the parent prints what happened.
Measured here (Sapphire Rapids, torch 2.13.0+cpu): hangs by default, returns in about 1 ms with
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (oneDNN's ISA just below avx512_fp16) and with
ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41.
"""

import argparse
import os
import subprocess
import sys

CHILD = """
import time, torch, torch.nn.functional as F
x = torch.zeros(3, 2, 41, 63, dtype=torch.float16)
w = torch.ones(2, 1, 1, 23, dtype=torch.float16) / 23
t = time.time()
y = F.conv2d(x, w, groups=2)
print(f"returned in {time.time() - t:.3f} s, output {tuple(y.shape)} {y.dtype}")
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()
    with open("/proc/cpuinfo") as handle:
        flags = "avx512_fp16" in handle.read()
    print(f"CPU reports avx512_fp16: {flags}")
    for extra in ({}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
        label = " ".join(f"{k}={v}" for k, v in extra.items()) or "default ISA"
        try:
            done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=args.timeout)
            print(f"{label}: {done.stdout.strip() or done.stderr.strip()[-200:]}")
        except subprocess.TimeoutExpired:
            print(f"{label}: no return within {args.timeout:g} s (killed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
