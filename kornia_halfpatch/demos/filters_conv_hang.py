"""Live before/after of filters_conv_hang for the CLI: kornia's float16 gaussian_blur2d with a
15x15 kernel, run in a subprocess with a timeout counted from kornia's import (unpatched it never
returns on avx512_fp16 CPUs, so it cannot run in this process)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time

from .._model import Demonstration
from .._options import DISABLE, FILTERS_CONV_HANG

# The subprocess's import of torch and kornia may take long on a loaded machine; the convolution,
# once kornia is imported, returns in milliseconds where it does not hang: the hang is declared
# CONVOLUTION_S after the child says it imported (unpatched), the whole run may take IMPORT_S.
CONVOLUTION_S = 5.0
PATCHED_CONVOLUTION_S = 60.0  # patched: generous, a slow machine must not read as a hang
IMPORT_S = 180.0
CALL = """
import torch, kornia, kornia_halfpatch
if {patched}:
    # torch_ops too: torch 2.1 has no float16 CPU kernel for the blur's reflection padding, which
    # is torch_ops' to take; where torch has the kernels it installs nothing this call reaches.
    kornia_halfpatch.apply(only=["filters_conv_hang", "torch_ops"])
x = torch.rand(1, 3, 41, 61, generator=torch.Generator().manual_seed(0)).half()
print("imported", flush=True)
out = kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))
print(out.dtype, bool(torch.isfinite(out).all()))
"""
IMPORTED = "imported"


def _run(patched: bool) -> tuple:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env[DISABLE.variable] = ""
    env[FILTERS_CONV_HANG.variable] = os.environ.get(FILTERS_CONV_HANG.variable, "auto")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env.get("PYTHONPATH", "")] if p)
    allowed = PATCHED_CONVOLUTION_S if patched else CONVOLUTION_S
    child = subprocess.Popen([sys.executable, "-c", CALL.format(patched=patched)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        first = lines.get(timeout=IMPORT_S)
    except queue.Empty:
        first = ""
    if first.strip() != IMPORTED:
        child.kill()
        stderr = child.communicate()[1]
        if child.returncode not in (None, -9) and stderr.strip():
            return f"exit {child.returncode}: {stderr.strip().splitlines()[-1:]}", False
        return f"no return in {IMPORT_S:.0f} s (before kornia was imported; killed)", False
    start = time.perf_counter()
    try:
        child.wait(timeout=allowed)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return f"no return {allowed:.0f} s after the import (in the convolution; killed)", False
    elapsed = time.perf_counter() - start
    reader.join(timeout=5)
    stderr = child.stderr.read() if child.stderr is not None else ""
    if child.returncode != 0:
        return f"exit {child.returncode}: {stderr.strip().splitlines()[-1:]}", False
    result = []
    while not lines.empty():
        result.append(lines.get())
    ok = "".join(result).split() == ["torch.float16", "True"]
    return f"{'float16, finite' if ok else ''.join(result).strip()} in {elapsed:.2f} s", ok


def demonstrate() -> Demonstration:
    demo = Demonstration(f"float16 gaussian_blur2d, kernel 15x15, 41x61 image (subprocess; a hang: no return {CONVOLUTION_S:.0f} s after import)")
    before, _ = _run(patched=False)
    after, holds = _run(patched=True)
    demo.cases.append(("kornia.filters.gaussian_blur2d", before, after))
    demo.holds = holds
    return demo
