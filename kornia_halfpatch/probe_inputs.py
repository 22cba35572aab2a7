"""Deterministic probe inputs, one home: the fixes' probes, the demonstrations, the tests and
the benchmarks all draw from here. Each input builds from its own seeded generator, never the
global random stream."""

from __future__ import annotations

from typing import Tuple

import torch

# --------------------------------------------------------------------------------------------
# Response volumes for the sub-voxel refinement (quad_interp_solve)

PROBE_SHAPE = (1, 1, 5, 40, 40)


def blob_volume(seed: int, shape: Tuple[int, int, int, int, int] = PROBE_SHAPE) -> torch.Tensor:
    """A smooth response volume: twelve Gaussian blobs (spatial sigma 1.5-4.5 px, scale sigma 1
    level), amplitudes 0.2-1, normalized to a maximum of 1. Smooth means small second
    derivatives, so small Hessian determinants: the case float16 handles worst."""
    generator = torch.Generator().manual_seed(seed)
    depth, height, width = shape[-3:]
    d = torch.arange(depth, dtype=torch.float64).view(depth, 1, 1)
    h = torch.arange(height, dtype=torch.float64).view(1, height, 1)
    w = torch.arange(width, dtype=torch.float64).view(1, 1, width)
    volume = torch.zeros(depth, height, width, dtype=torch.float64)
    extent = torch.tensor([depth - 1, height - 1, width - 1], dtype=torch.float64)
    for _ in range(12):
        cd, ch, cw = (torch.rand(3, generator=generator, dtype=torch.float64) * extent).tolist()
        sigma = 1.5 + 3.0 * torch.rand(1, generator=generator, dtype=torch.float64).item()
        amplitude = 0.2 + 0.8 * torch.rand(1, generator=generator, dtype=torch.float64).item()
        volume += amplitude * torch.exp(-((h - ch) ** 2 + (w - cw) ** 2) / (2 * sigma**2) - (d - cd) ** 2 / 2)
    return (volume / volume.max()).float().expand(shape).contiguous()


def probe_volume(kind: str, seed: int) -> torch.Tensor:
    """float32 ``(1, 1, 5, 40, 40)``: ``"rand"`` is ``torch.rand`` after ``torch.manual_seed(seed)``,
    ``"rand_0.01"`` the same scaled to ``[0, 0.01]``, ``"blob"`` :func:`blob_volume`."""
    if kind == "blob":
        return blob_volume(seed)
    volume = torch.rand(PROBE_SHAPE, generator=torch.Generator().manual_seed(seed))
    if kind == "rand":
        return volume
    if kind == "rand_0.01":
        return volume * 0.01
    raise ValueError(f"unknown probe volume {kind!r}")


# --------------------------------------------------------------------------------------------
# Images and LAFs for patch extraction (laf_patches)


def laf_probe_inputs(
    dtype: torch.dtype = torch.float32, B: int = 2, N: int = 6, CH: int = 3, H: int = 48, W: int = 40
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Deterministic image and rotated LAFs, some crossing the border, several scales."""
    generator = torch.Generator().manual_seed(1234)
    img = torch.rand(B, CH, H, W, generator=generator, dtype=torch.float64)
    centre = torch.rand(B, N, 2, generator=generator, dtype=torch.float64) * torch.tensor([W, H], dtype=torch.float64)
    centre[:, 0] = torch.tensor([1.0, 2.0], dtype=torch.float64)  # on the border
    scale = 2.0 + 30.0 * torch.rand(B, N, 1, 1, generator=generator, dtype=torch.float64)
    angle = torch.rand(B, N, generator=generator, dtype=torch.float64) * 2.0 * 3.141592653589793
    cos, sin = angle.cos(), angle.sin()
    linear = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2) * scale
    laf = torch.cat([linear, centre.unsqueeze(-1)], dim=-1)
    return img.to(dtype), laf.to(dtype)


# --------------------------------------------------------------------------------------------
# Example calls of table rows (``example=`` of a row): ``factory(dtype)`` -> positional
# arguments, floating tensors in ``dtype``. The contract battery (tests/test_rows.py) calls each
# row with them in every dtype.


def cramer_system(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """Nine (1, 1, 3, 6, 6) solve inputs of [0, 0.01]-response size: Hessian entries ~1e-2 with
    a dominant diagonal (well posed), right-hand sides ~1e-3."""
    generator = torch.Generator().manual_seed(7)
    shape = (1, 1, 3, 6, 6)
    diagonal = [-(0.008 + 0.004 * torch.rand(shape, generator=generator)) for _ in range(3)]
    off = [0.001 * (torch.rand(shape, generator=generator) - 0.5) for _ in range(3)]
    rhs = [0.002 * (torch.rand(shape, generator=generator) - 0.5) for _ in range(3)]
    return tuple(t.to(dtype) for t in diagonal + off + rhs)


def sift_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(SIFTDescriptor(32), two patches: one textured, one flat) in ``dtype``."""
    from kornia.feature import SIFTDescriptor

    generator = torch.Generator().manual_seed(3)
    patches = torch.cat([torch.rand(1, 1, 32, 32, generator=generator), torch.full((1, 1, 32, 32), 0.5)])
    return SIFTDescriptor(32).to(dtype), patches.to(dtype)


def dense_sift_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    from kornia.feature import DenseSIFTDescriptor

    generator = torch.Generator().manual_seed(4)
    return DenseSIFTDescriptor().to(dtype), torch.rand(1, 1, 24, 24, generator=generator).to(dtype)
