"""Live before/after demonstration of the feature_patches fix, for the CLI (``kornia-halfpatch``).

Loaded only by the CLI and the tests that run it (``Fix.demonstration`` names it as a string),
so importing the fix module builds no demo and starts no subprocess.
"""

from __future__ import annotations

from typing import Any

import torch

from .._model import Demonstration
from ..sample_inputs import laf_inputs

_NAN_BACKWARD_SCRIPT = """
import torch, kornia, kornia.feature, kornia_halfpatch
if {patched}:
    kornia_halfpatch.apply(only=["feature_patches"])
laf = torch.tensor([[[[8.0, 0.0, 30.0], [0.0, 8.0, 30.0]]]]).repeat(1, 2, 1, 1)
laf[0, 1, 0, 2] = float("nan")
laf.requires_grad_(True)
kornia.feature.extract_patches_simple(torch.rand(1, 1, 64, 64), laf, 16).sum().backward()
print(bool(torch.isfinite(laf.grad).all()), float(laf.grad[0, 1].abs().sum()))
"""


def _start_nan_backward(patched: bool) -> Any:
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", _NAN_BACKWARD_SCRIPT.format(patched=patched)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _nan_backward_outcome(process: Any) -> str:
    import signal
    import subprocess

    try:
        stdout, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return "hangs"
    if process.returncode < 0:
        return f"process killed ({signal.Signals(-process.returncode).name})"
    if process.returncode != 0:
        return f"exit {process.returncode}"
    finite, nan_frame_grad = stdout.split()
    return f"grad finite={finite}, NaN-frame grad {float(nan_frame_grad):g}"


def demonstrate() -> Demonstration:
    import kornia_halfpatch
    from kornia.feature import laf as laf_module

    def mixed_dtype() -> str:
        img, laf = laf_inputs(torch.float32, B=1, N=4, CH=1, H=256, W=256)
        try:
            patches = laf_module.extract_patches_simple(img.half(), laf, 32)
        except RuntimeError as exc:
            return "RuntimeError: " + str(exc).splitlines()[0][:60]
        return f"{patches.dtype}, finite={bool(patches.isfinite().all())}"

    def out_of_range() -> str:
        torch.manual_seed(0)
        img = torch.rand(1, 1, 256, 256).half()
        centre = torch.tensor([[[2.0, 128.0], [254.0, 3.0], [128.0, 128.0], [250.0, 250.0]]])
        laf = laf_module.laf_from_center_scale_ori(centre, torch.full((1, 4, 1, 1), 20.0), torch.full((1, 4, 1), 33.0))
        bad = 0
        for function in (laf_module.extract_patches_simple, laf_module.extract_patches_from_pyramid):
            try:
                patches = function(img, laf.half(), 32).float()
            except (RuntimeError, NotImplementedError) as exc:
                # torch < 2.6 has no half CPU grid_sample: the unpatched "before" is that error.
                return f"{type(exc).__name__}: " + str(exc).splitlines()[0][:60]
            bad += int((~patches.isfinite() | (patches < float(img.min())) | (patches > float(img.max()))).sum())
        return f"{bad} of {2 * 4 * 32 * 32} values"

    demo = Demonstration("LAF patch extraction: half images, mixed dtypes, NaN LAFs")
    # The crash runs in child processes, started first so that they overlap the in-process cases.
    crash_before, crash_after = _start_nan_backward(False), _start_nan_backward(True)
    with kornia_halfpatch.unpatched():
        before = (mixed_dtype(), out_of_range(), _nan_backward_outcome(crash_before))
    with kornia_halfpatch.patched(only=["feature_patches"]):
        after = (mixed_dtype(), out_of_range(), _nan_backward_outcome(crash_after))
    labels = (
        "float16 image 256x256, float32 LAF",
        "float16 256x256 border patches outside [min, max]",
        "float32 NaN LAF, backward",
    )
    demo.cases = [(label, b, a) for label, b, a in zip(labels, before, after)]
    demo.holds = (
        after[0].startswith("torch.float16, finite=True")
        and after[1].startswith("0 of")
        and after[2].startswith("grad finite=True, NaN-frame grad 0")
    )
    return demo
