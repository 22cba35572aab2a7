"""create_meshgrid / create_meshgrid3d: half grids built in float32, narrowed once (docs/fixes/utils_grids.md).

Bug: the old code normalizes with ``(xs / (size - 1) - 0.5) * 2`` as three float16/bfloat16 ops,
each rounding, on a ``linspace`` ramp that is itself off by up to 1 ulp once ``size - 1`` is not
representable. Inductor fuses the chain in float32 and rounds once, so eager and compiled grids
differ (bfloat16 width 300: 0.0117). Fix: for half dtypes, run the installed release's own
float32 computation and narrow once; a float32 ramp of integers is exact, so every execution
mode rounds the same float32 value once (the ramp's quotient is taken in float64, see
_normalized_ramp: inductor before torch 2.9 divides by a reciprocal). float32/float64/integer
grids call the original unchanged and stay bit-for-bit.

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

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import _probe_cache as probe_cache
from .._model import Finding, Fix, Target, bug_present, not_needed

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


# Largest side the float32 ramp below reproduces bit for bit: the release's float32 linspace
# holds every index exactly up to 2**24, and the float64 quotient rounds to float32 correctly
# while size - 1 < 2**27 (see _normalized_ramp).
_EXACT_RAMP_SIDE = 2**24


def _normalized_ramp(size: int, device: Optional[torch.device]) -> torch.Tensor:
    """The release's float32 ramp ``(linspace(0, size - 1, size) / (size - 1) - 0.5) * 2``, bit
    for bit, in every execution mode.

    The release's division is one correctly rounded float32 quotient of two integers. Inductor
    before torch 2.9 compiles CPU code with fast-math, which turns a division by the constant
    ``size - 1`` into a multiplication by its rounded reciprocal: 1 ulp off in 3472 of 6000
    elements (width 6000, torch 2.6), enough to flip 2 float16 roundings (0.00049). Here the
    quotient is taken in float64 and rounded to float32: whether float64 divides or multiplies
    by the reciprocal, its error (an ulp of 2**-53) stays far below the distance from ``i / d``
    to the nearest float32 rounding boundary (at least 2**-25 / d relative, d < 2**27), so the
    float32 result is the correctly rounded quotient, as the release's. ``- 0.5`` and ``* 2``
    follow in float32 as in the release; scaling by 2 is exact, so no re-association or fused
    multiply-add of those two changes a bit.
    """
    quotient = torch.arange(size, device=device, dtype=torch.float64) / (size - 1)
    return (quotient.to(torch.float32) - 0.5) * 2


def _float64_ramps_allowed(sizes: List[int], device: Optional[torch.device], largest: int = _EXACT_RAMP_SIDE) -> bool:
    # MPS has no float64; sides past 2**24 are not exact integers in the release's ramp. (The
    # bound is a default argument: TorchScript cannot read module-level ints.)
    for size in sizes:
        if size > largest:
            return False
    return torch.empty(0, device=device).device.type != "mps"


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
                if _float64_ramps_allowed([height, width], device):
                    xs = _normalized_ramp(width, device)
                    ys = _normalized_ramp(height, device)
                    grid = torch.stack(torch.meshgrid([xs, ys], indexing="ij"), dim=-1).permute(1, 0, 2).unsqueeze(0)
                    return grid.to(grid_dtype)
                return original(height, width, True, device, torch.float32).to(grid_dtype)
            xs = _half_pixel_ramp(width, device, grid_dtype)
            ys = _half_pixel_ramp(height, device, grid_dtype)
            return torch.stack(torch.meshgrid([xs, ys], indexing="ij"), dim=-1).permute(1, 0, 2).unsqueeze(0)
        return original(height, width, normalized_coordinates, device, grid_dtype)

    def create_meshgrid_release_float32(
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

    if _ramp_is_the_releases(original, _ramps_2d):
        return create_meshgrid
    create_meshgrid_release_float32.__name__ = "create_meshgrid"
    return create_meshgrid_release_float32


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
                if _float64_ramps_allowed([depth, height, width], device):
                    xs = _normalized_ramp(width, device)
                    ys = _normalized_ramp(height, device)
                    zs = _normalized_ramp(depth, device)
                    grid = torch.stack(torch.meshgrid([zs, xs, ys], indexing="ij"), dim=-1)
                    return grid.permute(0, 2, 1, 3).unsqueeze(0).to(grid_dtype)
                return original(depth, height, width, True, device, torch.float32).to(grid_dtype)
            xs = _half_pixel_ramp(width, device, grid_dtype)
            ys = _half_pixel_ramp(height, device, grid_dtype)
            zs = _half_pixel_ramp(depth, device, grid_dtype)
            grid = torch.stack(torch.meshgrid([zs, xs, ys], indexing="ij"), dim=-1)
            return grid.permute(0, 2, 1, 3).unsqueeze(0)
        return original(depth, height, width, normalized_coordinates, device, grid_dtype)

    def create_meshgrid3d_release_float32(
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

    if _ramp_is_the_releases(original, _ramps_3d):
        return create_meshgrid3d
    create_meshgrid3d_release_float32.__name__ = "create_meshgrid3d"
    return create_meshgrid3d_release_float32


# Sides whose float32 quotients i / (size - 1) are inexact (and 1: 0/0, 2: exact ends).
_RAMP_CHECK_SIDES = (1, 2, 3, 7, 300, 1000, 6000)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


# (original, axes) -> answer: the release's float32 ramps are a function of its code alone, and
# every re-apply (two per testing.isolated() block) builds the replacement again.
_ramp_answers: Dict[Tuple[int, int], Tuple[Any, Any, bool]] = {}


def _ramp_is_the_releases(original: Any, axes: Any) -> bool:
    """Whether _normalized_ramp is bit for bit the installed release's float32 ramp on every
    axis (NaN included), on sides with inexact quotients. ``axes(original, size)`` returns the
    release's ramps of that size. If not, half normalized grids narrow the release's own float32
    grid (eager and compiled then differ where inductor's arithmetic does). Computed once per
    original (kept alive with the answer, so its id is not reused), and kept on disk for the next
    process (``_probe_cache``)."""
    key = (id(original), id(axes))
    known = _ramp_answers.get(key)
    if known is not None and known[0] is original and known[1] is axes:
        return known[2]
    answer = probe_cache.remembered(
        f"utils_grids:ramp:{axes.__name__}", lambda: _compare_ramps(original, axes), bool, probe_cache.a_bool, originals=(original,)
    )
    _ramp_answers[key] = (original, axes, answer)
    return answer


def _compare_ramps(original: Any, axes: Any) -> bool:
    for size in _RAMP_CHECK_SIDES:
        expected = _normalized_ramp(size, torch.device("cpu"))
        if not all(_same_bits(ramp, expected) for ramp in axes(original, size)):
            return False
    return True


def _ramps_2d(original: Any, size: int) -> List[torch.Tensor]:
    cpu = torch.device("cpu")
    xs = original(1, size, True, cpu, torch.float32)[0, 0, :, 0]
    ys = original(size, 1, True, cpu, torch.float32)[0, :, 0, 1]
    return [xs, ys]


def _ramps_3d(original: Any, size: int) -> List[torch.Tensor]:
    cpu = torch.device("cpu")
    zs = original(size, 1, 1, True, cpu, torch.float32)[0, :, 0, 0, 0]
    xs = original(1, 1, size, True, cpu, torch.float32)[0, 0, 0, :, 1]
    ys = original(1, size, 1, True, cpu, torch.float32)[0, 0, :, 0, 2]
    return [zs, xs, ys]


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
