"""Live demonstration of cpu_half for the CLI: HardNet on 64 patches, float32 versus float16
natively versus float16 in float32 mode, timed now (small: well under a second per variant).

Loaded only by the CLI and the tests that run it.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

import torch

from .._model import Demonstration


def _best_of(run: Callable[[], Any], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def demonstrate() -> Demonstration:
    import kornia.feature as KF

    import kornia_halfpatch

    torch.manual_seed(0)
    model16 = KF.HardNet(pretrained=False).eval().half()
    # The float32 reference: the same (float16-rounded) weights and patches, widened.
    model32 = copy.deepcopy(model16).float()
    half = torch.rand(64, 1, 32, 32).half()
    patches = half.float()
    with torch.no_grad():
        expected = model32(patches).half()
        model16(half)  # builds the cached float32 weights
        float32_s = _best_of(lambda: model32(patches))
        mode_s = _best_of(lambda: model16(half))
        got = model16(half)
        native_error = ""
        with kornia_halfpatch.unpatched(["networks_cpu_half"]):
            try:
                native_s = _best_of(lambda: model16(half), repeats=1)  # the slow path: once
            except (RuntimeError, NotImplementedError) as error:
                # torch 2.1 has no float16 CPU convolution/batch_norm: the native path raises
                native_s = None
                native_error = f"{type(error).__name__}: " + str(error).splitlines()[0][:50]
    holds = got.dtype == torch.float16 and torch.equal(got, expected)
    native_shown = native_error if native_s is None else f"{native_s:.3f} s ({native_s / float32_s:.1f}x float32)"
    faster = "" if native_s is None else f", {native_s / mode_s:.1f}x faster"
    return Demonstration(
        title="cpu_half: float16 HardNet on CPU through float32 weights (batch 64, timed now)",
        cases=[
            ("float16 output", "native float16 convolutions", "bitwise float32 forward, narrowed" if holds else "DIFFERS from float32 narrowed"),
            ("time (float32: %.3f s)" % float32_s, native_shown,
             f"{mode_s:.3f} s ({mode_s / float32_s:.2f}x float32{faster})"),
        ],
        holds=holds,
        note="untrained HardNet, one run; benchmarks/bench_networks_cpu_half.py has the full table",
    )
