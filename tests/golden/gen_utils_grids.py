"""Golden create_meshgrid/create_meshgrid3d grids from kornia 0.9.0 (same float32 semantics).

Recorded once and committed (not computed live like the descriptors): a grid is elementwise
arithmetic on exact integer ramps (``arange``, or ``linspace(0, n - 1, n)`` whose step is exactly 1,
so a fused or unfused ``start + step * i`` gives the same integer), one IEEE division by
``size - 1``, a subtraction of 0.5, an exact scaling by 2, and the single narrowing the fix adds.
IEEE 754 rounds each of those operations correctly, hence the same way on every instruction set,
scalar or vector, x86 or ARM; no multiply feeds an add that a compiler could fuse into an FMA, and
no reduction or kernel whose summation order depends on the CPU is involved. (The unpatched half ramps, whose ``linspace`` step is inexact, are never compared with
these files.)

A grid is the outer product of its 1-D ramps, so only the ramps are stored; ``record`` asserts
that 0.9.0's full grid equals the grid rebuilt from them, so comparing a rebuilt grid is exactly
comparing 0.9.0's.
"""

import torch

SIZES_2D = [(2, 3), (3, 2), (257, 2), (2, 257), (258, 3), (3, 258), (2049, 2), (2, 2049), (2050, 3), (3, 2050), (6000, 2), (2, 6000)]
SIZES_3D = [(2, 3, 257), (258, 2, 3), (3, 2050, 2)]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def key(sizes, normalized, dtype) -> str:
    return f"{'x'.join(map(str, sizes))}/{'norm' if normalized else 'pix'}/{str(dtype)[6:]}"


def rebuild_2d(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    return torch.stack([xs[None, :].expand(len(ys), -1), ys[:, None].expand(-1, len(xs))], dim=-1)[None]


def rebuild_3d(xs, ys, zs) -> torch.Tensor:
    d, h, w = len(zs), len(ys), len(xs)
    return torch.stack(
        [zs[:, None, None].expand(d, h, w), xs[None, None, :].expand(d, h, w), ys[None, :, None].expand(d, h, w)], dim=-1
    )[None]


def record() -> dict:
    from kornia.geometry.grid import create_meshgrid, create_meshgrid3d

    out = {}
    cpu = torch.device("cpu")
    for normalized in (True, False):
        for dtype in DTYPES:
            for h, w in SIZES_2D:
                grid = create_meshgrid(h, w, normalized, cpu, dtype)
                xs, ys = grid[0, 0, :, 0].clone(), grid[0, :, 0, 1].clone()
                assert torch.equal(rebuild_2d(xs, ys), grid)
                out[key((h, w), normalized, dtype)] = (xs, ys)
            for d, h, w in SIZES_3D:
                grid = create_meshgrid3d(d, h, w, normalized, cpu, dtype)
                xs, ys, zs = grid[0, 0, 0, :, 1].clone(), grid[0, 0, :, 0, 2].clone(), grid[0, :, 0, 0, 0].clone()
                assert torch.equal(rebuild_3d(xs, ys, zs), grid), (d, h, w)
                out[key((d, h, w), normalized, dtype)] = (xs, ys, zs)
    return out
