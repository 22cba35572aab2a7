"""Live before/after of filters_conv_hang for the CLI: kornia's float16 gaussian_blur2d with a
15x15 kernel, run in a subprocess with a timeout (unpatched it never returns on avx512_fp16 CPUs,
so it cannot run in this process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .._model import Demonstration
from .._options import DISABLE, FILTERS_CONV_HANG

# Unpatched: long enough to import torch and kornia on a loaded machine, then the convolution
# would have returned in milliseconds. Patched: generous, a slow import must not read as a hang.
TIMEOUT_S = 20.0
PATCHED_TIMEOUT_S = 180.0
CALL = """
import torch, kornia, kornia_halfpatch
print("imported", flush=True)
if {patched}:
    kornia_halfpatch.apply(only=["filters_conv_hang"])
x = torch.rand(1, 3, 41, 61, generator=torch.Generator().manual_seed(0)).half()
out = kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))
print(out.dtype, bool(torch.isfinite(out).all()))
"""
IMPORTED = "imported"


def _run(patched: bool) -> tuple:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env[DISABLE.variable] = ""
    env[FILTERS_CONV_HANG.variable] = os.environ.get(FILTERS_CONV_HANG.variable, "auto")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env.get("PYTHONPATH", "")] if p)
    start = time.perf_counter()
    timeout = PATCHED_TIMEOUT_S if patched else TIMEOUT_S
    try:
        result = subprocess.run([sys.executable, "-c", CALL.format(patched=patched)], capture_output=True, text=True,
                                timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        where = "in the convolution" if IMPORTED in output else "before kornia was imported"
        return f"no return in {timeout:.0f} s ({where}; killed)", False
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1:]}", False
    elapsed = time.perf_counter() - start
    ok = result.stdout.split() == [IMPORTED, "torch.float16", "True"]
    return f"{'float16, finite' if ok else result.stdout.strip()} in {elapsed:.1f} s", ok


def demonstrate() -> Demonstration:
    demo = Demonstration("float16 gaussian_blur2d, kernel 15x15, 41x61 image (subprocess, timeout 20 s unpatched)")
    before, _ = _run(patched=False)
    after, holds = _run(patched=True)
    demo.cases.append(("kornia.filters.gaussian_blur2d", before, after))
    demo.holds = holds
    return demo
