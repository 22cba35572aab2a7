"""Live before/after demonstration of the geometry_subpix fix, for the CLI (``kornia-halfpatch``).

Loaded only by the CLI and the tests that run it (``Fix.demonstration`` names it as a string),
so importing the fix module builds no demo.
"""

from __future__ import annotations

import torch

from .._model import Demonstration


def non_finite_gradient_fraction(volume: torch.Tensor) -> float:
    from kornia.geometry.subpix import ConvQuadInterp3d

    leaf = volume.detach().clone().requires_grad_(True)
    coords, values = ConvQuadInterp3d(strict_maxima_bonus=0.0)(leaf)
    (coords.sum() + values.sum()).backward()
    return (~torch.isfinite(leaf.grad)).float().mean().item()


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("ConvQuadInterp3d float16: fraction of non-finite input gradients")
    generator = torch.Generator().manual_seed(0)
    volume = torch.rand(1, 1, 5, 40, 40, generator=generator)
    holds = True
    for label, scale in (("torch.rand(1,1,5,40,40)", 1.0), ("same, scaled to [0, 0.01]", 0.01)):
        half = (volume * scale).half()
        with kornia_halfpatch.unpatched(["geometry_subpix"]):
            before = non_finite_gradient_fraction(half)
        with kornia_halfpatch.patched(only=["geometry_subpix"]):
            after = non_finite_gradient_fraction(half)
        holds = holds and after == 0.0
        demo.cases.append((label, f"{before:.3f}", f"{after:.3f}"))
    demo.holds = holds
    return demo
