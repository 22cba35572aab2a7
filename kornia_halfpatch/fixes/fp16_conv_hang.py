"""float16 depthwise convolutions that never return on CPUs with avx512_fp16 (docs/fixes/half_kernels.md).

On a CPU that reports ``avx512_fp16`` (Sapphire Rapids and later), torch 2.13's oneDNN never
returns from a float16 depthwise ``F.conv2d`` (groups = channels >= 2) with a 1xk kernel,
15 <= k <= 31 (measured on a 41x61 and a 64x64 input; k = 14 or 33, kx1 kernels and one channel
return). kornia reaches it through ``filter2d`` (``filter2d_separable``, so ``gaussian_blur2d``
with a kernel of 15 or more, ``ScalePyramid`` before 0.8.3, ``box_blur``, ``motion_blur`` ...) and,
in 0.8.3, ``ScalePyramid._blur_fast`` (its own two depthwise convolutions).

The row promotes ``kornia.filters.filter:filter2d`` for float16 CPU input whose kernel has a side
of 15 or more: the filter runs in float32 (the input widened exactly; oneDNN's float32 path
returns) and its output is narrowed once, so the result is the release's float32 filter
narrowed, bitwise. The guard is wider than the measured range (every side >= 15, both
orientations, any channel count) because the range was measured on two input sizes only and a
hang cannot be caught from Python: a few more convolutions in float32 cost little, a missed one
hangs the program. bfloat16 (its own, returning kernels), float32 and float64 call the original.

Chosen by CPU capability: ``torch.cpu.get_capabilities()["avx512_fp16"]`` (torch 2.13; an older
torch without it counts as "no flag"). ``KORNIA_HALFPATCH_FP16_CONV_HANG=on|off|auto`` forces the
choice (default ``auto``), so the workaround can be exercised on any CPU.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from .._model import Finding, Fix, Promote, bug_present, not_needed

ENV_FP16_CONV_HANG = "KORNIA_HALFPATCH_FP16_CONV_HANG"
MODES = ("auto", "on", "off")
# The smallest kernel side measured to hang (1x15); every side from here up takes float32.
HANG_KERNEL_SIDE = 15


def large_kernel(kernel: torch.Tensor) -> bool:
    """A kernel with a side of HANG_KERNEL_SIDE (15) or more: filter2d's (B, kh, kw) kernels and
    0.8.3 ScalePyramid's 1-D Gaussian, used both as 1xk and kx1."""
    if kernel.shape[-1] >= 15:
        return True
    return kernel.dim() >= 2 and kernel.shape[-2] >= 15


def cpu_has_avx512_fp16() -> bool:
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is None:
        return False
    try:
        return bool(capabilities().get("avx512_fp16", False))
    except Exception:  # noqa: BLE001 - a torch whose probe fails: no flag known
        return False


def mode() -> str:
    value = os.environ.get(ENV_FP16_CONV_HANG, "auto").strip().lower() or "auto"
    return value if value in MODES else "auto"


FILTER_ROW = Promote(
    "kornia.filters.filter:filter2d",
    "float16 depthwise conv2d with a kernel side >= 15 never returns in oneDNN on avx512_fp16 CPUs: "
    "the filter in float32, narrowed once",
    half=("float16",),
    device="cpu",
    guard=f"{__name__}:large_kernel",
    guard_arguments=("kernel",),
    expects_parameters=("input", "kernel"),
    example="kornia_halfpatch.probe_inputs:large_kernel_filter",
)
# 0.8.3's ScalePyramid blurs with its own two depthwise F.conv2d calls (1xk, then kx1) on a
# precomputed 1-D kernel, not through filter2d.
PYRAMID_ROW = Promote(
    "kornia.geometry.transform.pyramid:ScalePyramid._blur_fast",
    "0.8.3 ScalePyramid's own float16 depthwise 1xk conv2d (k >= 15) never returns in oneDNN on avx512_fp16 "
    "CPUs: the blur in float32, narrowed once",
    half=("float16",),
    device="cpu",
    guard=f"{__name__}:large_kernel",
    guard_arguments=("kernel",),
    expects_parameters=("self", "x", "kernel"),
    optional=True,
    example="kornia_halfpatch.probe_inputs:pyramid_blur_call",
)


def probe(originals: Sequence[Any]) -> Finding:
    """No convolution is run: a probe that hits the bug never returns."""
    chosen = mode()
    raw = os.environ.get(ENV_FP16_CONV_HANG)
    if chosen == "off":
        return not_needed(f"{ENV_FP16_CONV_HANG}=off")
    if chosen == "on":
        return bug_present(f"forced by {ENV_FP16_CONV_HANG}=on")
    note = f" ({ENV_FP16_CONV_HANG}={raw!r} is not one of {', '.join(MODES)}: auto)" if raw and raw.strip().lower() not in MODES else ""
    if cpu_has_avx512_fp16():
        return bug_present(f"this CPU reports avx512_fp16: float16 depthwise 1xk convolutions (k >= 15) hang in oneDNN{note}")
    return not_needed(f"this CPU does not report avx512_fp16{note}")


FIX = Fix(
    name="fp16_conv_hang",
    targets=(FILTER_ROW, PYRAMID_ROW),
    probe=probe,
    demonstration="kornia_halfpatch.demos.fp16_conv_hang:demonstrate",
)
