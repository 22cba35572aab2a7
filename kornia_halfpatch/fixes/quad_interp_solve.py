"""Sub-voxel quadratic refinement: the float16 Cramer-rule solve runs in float32 (SPEC F4).

Target: ``kornia.geometry.subpix.spatial_soft_argmax._solve_cramer_sym3x3``, the symmetric 3x3
Cramer-rule helper that kornia 0.8.3 introduced. It is the only solve behind
``conv_quad_interp3d`` / ``ConvQuadInterp3d``, ``iterative_quad_interp3d`` /
``IterativeQuadInterp3d``, ``AdaptiveQuadInterp3d`` and so behind the scale-space refinement of
``ScaleSpaceDetector`` and the SIFT-like detectors in ``kornia.feature.integrated``. Both callers
look the helper up as a module global on every call, so replacing that one attribute reaches
them all, in eager mode, under ``torch.compile`` and in ``torch.jit.script``.

Bug: for responses in ``[0, 1]`` the determinant of the Hessian is around 1e-4, and 1e-6 for
responses in ``[0, 0.01]``. The forward division is fine, but its backward scales by
``1/det**2``, which float16 cannot hold (max 65504): the gradient of the volume turns inf/NaN
over 4-8% of the voxels of ``torch.rand(1, 1, 5, 40, 40)`` and about 75% once the input is
scaled to ``[0, 0.01]``.

Fix (what kornia 0.9.0 does): float16 only, the nine solve inputs are widened to float32, the
installed release's own helper solves, and the three shifts are narrowed once; the ``solved``
mask is the float32 one. Everything around the solve (finite differences, lookup tables, shift
iteration, response correction) stays in float16 and is the installed release's code.
bfloat16 (float32's exponent range), float32 and float64 call the original unchanged, so they
are bit for bit the installed release's results.

When it applies: only where a Cramer solver is found by inspection (the helper exists with its
nine-tensor signature) and a tiny float16 system confirms the non-finite backward. kornia
0.7.0 to 0.8.2 have no such helper: ``conv_quad_interp3d`` solves with ``safe_solve_with_mask``
(LU in float32), which the check probes and reports as not needed.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional, Sequence, Tuple

import torch

from .._engine import Demonstration, Fix, Target

SOLVER_PATH = "kornia.geometry.subpix.spatial_soft_argmax:_solve_cramer_sym3x3"
# Resolved only where the helper is absent, so that the check can say why nothing is patched.
REFINEMENT_PATH = "kornia.geometry.subpix.spatial_soft_argmax:conv_quad_interp3d"
SOLVER_PARAMETERS = ("dxx", "dyy", "dss", "dxy", "dxs", "dys", "r0", "r1", "r2")

def build_solve(original: Any) -> Any:
    def _solve_cramer_sym3x3(
        dxx: torch.Tensor,
        dyy: torch.Tensor,
        dss: torch.Tensor,
        dxy: torch.Tensor,
        dxs: torch.Tensor,
        dys: torch.Tensor,
        r0: torch.Tensor,
        r1: torch.Tensor,
        r2: torch.Tensor,
        eps: float = 1e-7,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if dxx.dtype == torch.float16:
            # 1/det**2 in the backward needs float32's exponent range; narrow the shifts once.
            sx, sy, ss, solved = original(
                dxx.float(),
                dyy.float(),
                dss.float(),
                dxy.float(),
                dxs.float(),
                dys.float(),
                r0.float(),
                r1.float(),
                r2.float(),
                eps,
            )
            return sx.to(torch.float16), sy.to(torch.float16), ss.to(torch.float16), solved
        return original(dxx, dyy, dss, dxy, dxs, dys, r0, r1, r2, eps)

    # No __wrapped__: TorchScript would compile the original's source instead of this one.
    _solve_cramer_sym3x3.__defaults__ = original.__defaults__
    _solve_cramer_sym3x3.__doc__ = original.__doc__
    return _solve_cramer_sym3x3


# --------------------------------------------------------------------------------------------
# Probe volumes (shared by the check, the demonstration, the tests and the benchmark)

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
# Detection


def is_cramer_solver(candidate: Any) -> bool:
    """The installed release solves the sub-voxel system with the symmetric Cramer helper."""
    if not callable(candidate):
        return False
    try:
        names = tuple(inspect.signature(candidate).parameters)
    except (TypeError, ValueError):
        return False
    return names[: len(SOLVER_PARAMETERS)] == SOLVER_PARAMETERS


def _probe_system(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """A well-posed system as a [0, 0.01] response gives: Hessian entries ~1e-2, det ~ -1e-6."""
    # dxx, dyy, dss, dxy, dxs, dys, then the right-hand side r0, r1, r2.
    values = (-0.01, -0.012, -0.009, 0.001, 0.0005, -0.0008, 0.002, -0.001, 0.0015)
    return tuple(torch.tensor([value], dtype=dtype, requires_grad=True) for value in values)


def solver_backward_is_finite(solver: Any, dtype: torch.dtype) -> bool:
    inputs = _probe_system(dtype)
    sx, sy, ss, _ = solver(*inputs)
    (sx.sum() + sy.sum() + ss.sum()).backward()
    return all(bool(torch.isfinite(t.grad).all()) for t in inputs if t.grad is not None)


def refinement_backward_is_finite(refine: Any) -> bool:
    generator = torch.Generator().manual_seed(0)
    volume = (torch.rand(1, 1, 5, 24, 24, generator=generator) * 0.01).half().requires_grad_(True)
    coords, values = refine(volume)
    (coords.float().sum() + values.float().sum()).backward()
    return bool(torch.isfinite(volume.grad).all()) and bool(torch.isfinite(coords).all())


def _check(originals: Sequence[Any]) -> Optional[str]:
    found = originals[0]
    if not is_cramer_solver(found):
        if refinement_backward_is_finite(found):
            return (
                "not needed: no Cramer-rule solver in this release (conv_quad_interp3d solves "
                "with safe_solve_with_mask in float32); float16 gradient finite on the probe"
            )
        return "not patched: float16 refinement gradient is non-finite but no Cramer helper to promote"
    if solver_backward_is_finite(found, torch.float16):
        return "not needed: this Cramer solver already has a finite float16 backward"
    if not solver_backward_is_finite(found, torch.float32):
        return "not patched: the Cramer solver's float32 backward is non-finite on the probe too"
    return None


# --------------------------------------------------------------------------------------------
# Live before/after for the CLI


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
        with kornia_halfpatch.unpatched(["quad_interp_solve"]):
            before = non_finite_gradient_fraction(half)
        with kornia_halfpatch.patched(only=["quad_interp_solve"]):
            after = non_finite_gradient_fraction(half)
        holds = holds and after == 0.0
        demo.rows.append((label, f"{before:.3f}", f"{after:.3f}"))
    demo.holds = holds
    return demo


FIX = Fix(
    name="quad_interp_solve",
    summary="ConvQuadInterp3d/iterative/scale-space float16 sub-voxel solve promoted to float32",
    targets=(Target((SOLVER_PATH, REFINEMENT_PATH), build_solve),),
    check=_check,
    demonstrate=demonstrate,
)
