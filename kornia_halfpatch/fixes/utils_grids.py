"""create_meshgrid / create_meshgrid3d: half grids built in float32, narrowed once (docs/fixes/utils_grids.md).

Bug: the old code normalizes with ``(xs / (size - 1) - 0.5) * 2`` as three float16/bfloat16 ops,
each rounding, on a ``linspace`` ramp that is itself off by up to 1 ulp once ``size - 1`` is not
representable. Inductor fuses the chain in float32 and rounds once, so eager and compiled grids
differ (bfloat16 width 300: 0.0117). Fix: for half dtypes, run the installed release's own
float32 computation and narrow once; a float32 ramp of integers is exact, so every execution
mode rounds the same float32 value once. float32/float64/integer grids call the original
unchanged and stay bit-for-bit.

Pixel grids (``normalized_coordinates=False``) in half precision take kornia 0.9.0's ramp,
``arange`` in the half dtype, instead of the old half ``linspace``: once ``size - 1`` is not
representable (float16 past 2049, bfloat16 past 257) ``linspace`` fills the upper half of the
ramp backwards from a rounded end point and drifts from the index by up to 1 ulp. Measured with
kornia 0.9.0: its half pixel grids are exactly ``arange(size, dtype=half)`` (not the float32
ramp narrowed; bfloat16 index 4113 stays 4096), and the patched grids equal them bitwise.

Targets: kornia.utils.grid (0.7.0-0.8.2) or kornia.geometry.grid (0.8.3, behind deprecation
wrappers that call a captured ``_create_meshgrid``; the engine rebinds that capture too).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from .._model import Finding, Fix, Target, bug_present, not_needed
from ._common import like

MESHGRID_PARAMETERS = ("height", "width", "normalized_coordinates", "device", "dtype")


def _grid_dtype(device: Optional[torch.device], dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is not None:
        return dtype
    if torch.jit.is_scripting():
        # TorchScript has no builtin for torch.get_default_dtype() and would constant-fold a
        # factory call that does not depend on an argument: read it off a tensor on the device.
        return torch.empty(0, device=device).dtype
    return torch.get_default_dtype()  # eager/compile: no allocation on the float32 hot path


def _half_pixel_ramp(size: int, device: Optional[torch.device], dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(size, device=device, dtype=dtype)


def build_create_meshgrid(original: Any) -> Any:
    def create_meshgrid(
        height: int,
        width: int,
        normalized_coordinates: bool = True,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> torch.Tensor:
        grid_dtype = _grid_dtype(device, dtype)
        if grid_dtype == torch.float16 or grid_dtype == torch.bfloat16:
            if normalized_coordinates:
                return original(height, width, True, device, torch.float32).to(grid_dtype)
            xs = _half_pixel_ramp(width, device, grid_dtype)
            ys = _half_pixel_ramp(height, device, grid_dtype)
            return torch.stack(torch.meshgrid([xs, ys], indexing="ij"), dim=-1).permute(1, 0, 2).unsqueeze(0)
        return original(height, width, normalized_coordinates, device, grid_dtype)

    return like(create_meshgrid, original)


def build_create_meshgrid3d(original: Any) -> Any:
    def create_meshgrid3d(
        depth: int,
        height: int,
        width: int,
        normalized_coordinates: bool = True,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> torch.Tensor:
        grid_dtype = _grid_dtype(device, dtype)
        if grid_dtype == torch.float16 or grid_dtype == torch.bfloat16:
            if normalized_coordinates:
                return original(depth, height, width, True, device, torch.float32).to(grid_dtype)
            xs = _half_pixel_ramp(width, device, grid_dtype)
            ys = _half_pixel_ramp(height, device, grid_dtype)
            zs = _half_pixel_ramp(depth, device, grid_dtype)
            grid = torch.stack(torch.meshgrid([zs, xs, ys], indexing="ij"), dim=-1)
            return grid.permute(0, 2, 1, 3).unsqueeze(0)
        return original(depth, height, width, normalized_coordinates, device, grid_dtype)

    return like(create_meshgrid3d, original)


def probe(originals: Sequence[Any]) -> Finding:
    create_meshgrid = originals[0]
    eager = create_meshgrid(2, 300, True, torch.device("cpu"), torch.bfloat16)
    widened = create_meshgrid(2, 300, True, torch.device("cpu"), torch.float32).to(torch.bfloat16)
    if torch.equal(eager, widened):
        return not_needed("this create_meshgrid already rounds half grids once")
    return bug_present()


FIX = Fix(
    name="utils_grids",
    targets=(
        Target(
            ("kornia.geometry.grid:create_meshgrid", "kornia.utils.grid:create_meshgrid"),
            build_create_meshgrid,
            MESHGRID_PARAMETERS,
            reason="half normalized grids: the float32 grid narrowed once (three half roundings before); "
            "half pixel grids: arange in the half dtype",
        ),
        Target(
            ("kornia.geometry.grid:create_meshgrid3d", "kornia.utils.grid:create_meshgrid3d"),
            build_create_meshgrid3d,
            ("depth",) + MESHGRID_PARAMETERS,
            reason="as create_meshgrid, in three dimensions",
        ),
    ),
    probe=probe,
    demonstration="kornia_halfpatch.demos.utils_grids:demonstrate",
)
