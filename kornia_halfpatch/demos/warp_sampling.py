"""Live before/after demonstration of the warp_sampling fix, for the CLI (``kornia-halfpatch``).

Loaded only by the CLI and the tests that run it (``Fix.demonstration`` names it as a string),
so importing the fix module builds no demo and imports no subprocess.
"""

from __future__ import annotations

import subprocess
import sys

import torch

from .._model import Demonstration
from ..fixes.warp_sampling import _PROBE_PADDING, current_workaround

_CRASH_SCRIPT = """
import torch, kornia, kornia_halfpatch
{apply}
angle = torch.tensor([float("nan")], requires_grad=True)
image = torch.rand(1, 1, 32, 32, requires_grad=True)
out = kornia.geometry.transform.rotate(image, angle, padding_mode="border")
out.sum().backward()
print("survived", float(out.abs().max()))
"""


def demonstrate() -> Demonstration:
    import kornia_halfpatch
    from kornia.geometry.transform import rotate

    demo = Demonstration("grid_sample on CPU: half rotate of a 182x182 image; NaN angle backward")
    holds = True
    for dtype in (torch.float16, torch.bfloat16):
        # The image sits 65536 elements into a buffer of 1000s, so the broken kernel's wrapped
        # reads land on known values inside the buffer (deterministic, never foreign memory).
        size = 182
        buffer = torch.full((_PROBE_PADDING + 3 * size * size,), 1000.0, dtype=dtype)
        image = torch.as_strided(buffer, (1, 3, size, size), (3 * size * size, size * size, size, 1), _PROBE_PADDING)
        image.copy_(torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0)).to(dtype))
        angle = torch.tensor([33.0], dtype=dtype)

        def outside() -> str:
            out = rotate(image, angle).float()
            low, high = min(float(image.min()), 0.0), float(image.max())
            bad = int(((out < low) | (out > high) | ~torch.isfinite(out)).sum())
            return f"{bad} of {out.numel()} outside [{low:g}, {high:g}]"

        with kornia_halfpatch.unpatched(["warp_sampling"]):
            before = outside()
        after = outside()
        holds = holds and after.startswith("0 of")
        demo.cases.append((f"{str(dtype)[6:]} rotate 33 deg", before, after))
    runs = {}
    for label, apply_line in (("unpatched", ""), ("patched", "kornia_halfpatch.apply(only=['warp_sampling'])")):
        result = subprocess.run(
            [sys.executable, "-c", _CRASH_SCRIPT.format(apply=apply_line)], capture_output=True, text=True, timeout=120
        )
        runs[label] = "completes" if result.returncode == 0 else f"process dies (exit {result.returncode})"
    holds = holds and runs["patched"] == "completes"
    demo.cases.append(("float32 NaN angle, border, backward", runs["unpatched"], runs["patched"]))
    demo.holds = holds
    demo.note = f"workaround: {current_workaround().describe()}"
    return demo
