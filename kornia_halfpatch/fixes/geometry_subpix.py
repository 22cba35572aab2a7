"""Sub-voxel quadratic refinement: the float16 Cramer-rule solve runs in float32 (docs/fixes/geometry_subpix.md).

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
from typing import Any, Sequence, Tuple

import torch

from .._functions import resolve_path
from .._model import Finding, Fix, Promote, Verdict, bug_present, not_needed

SOLVER_PATH = "kornia.geometry.subpix.spatial_soft_argmax:_solve_cramer_sym3x3"
# Probed only where the helper is absent, so that the status can say why nothing is patched.
REFINEMENT_PATH = "kornia.geometry.subpix.spatial_soft_argmax:conv_quad_interp3d"
SOLVER_PARAMETERS = ("dxx", "dyy", "dss", "dxy", "dxs", "dys", "r0", "r1", "r2")

SOLVE_ROW = Promote(
    SOLVER_PATH,
    "float16 solve in float32: the backward's 1/det**2 (det ~1e-4 to 1e-6) overflows float16; "
    "shifts narrowed once, the solved mask kept",
    half=("float16",),
    expects_parameters=SOLVER_PARAMETERS,
    optional=True,  # absent before 0.8.3: explain_absence() says why that is fine
)


def build_solve(original: Any) -> Any:
    """The generated replacement of the row (float16 solve inputs widened, shifts narrowed)."""
    return SOLVE_ROW.build(original)


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
    from .._kernels import widening_missing_kernels

    # The question is the gradient's finiteness: ops without a half CPU kernel in this torch
    # (replicate padding on torch 2.1) run widened, each narrowed, as the patched ops would.
    with widening_missing_kernels():
        coords, values = refine(volume)
    (coords.float().sum() + values.float().sum()).backward()
    return bool(torch.isfinite(volume.grad).all()) and bool(torch.isfinite(coords).all())


def probe(originals: Sequence[Any]) -> Finding:
    solver = originals[0]
    if not is_cramer_solver(solver):
        return Finding(Verdict.UNSUPPORTED, "unsupported: the solver helper has another signature")
    if solver_backward_is_finite(solver, torch.float16):
        return not_needed("this Cramer solver already has a finite float16 backward")
    if not solver_backward_is_finite(solver, torch.float32):
        return Finding(Verdict.UNSUPPORTED, "not patched: the Cramer solver's float32 backward is non-finite on the probe too")
    return bug_present()


def explain_absence() -> Finding:
    """kornia 0.7.0-0.8.2 have no Cramer helper; say why that is fine, or why it is not."""
    module_name, _, attribute = REFINEMENT_PATH.partition(":")
    _, _, refine = resolve_path(module_name, attribute)
    # The check is about the solve; the refinement around it pads and convolves in float16,
    # which torch before 2.2 has no CPU kernels for (replication_pad3d): refinement_backward_is_finite
    # runs those widened, so that the check runs on every torch.
    finite = refinement_backward_is_finite(refine)
    if finite:
        return not_needed(
            "no Cramer-rule solver in this release (conv_quad_interp3d solves "
            "with safe_solve_with_mask in float32); float16 gradient finite on the probe"
        )
    return Finding(
        Verdict.UNSUPPORTED, "not patched: float16 refinement gradient is non-finite but no Cramer helper to promote"
    )


def _check(originals: Sequence[Any]) -> Finding:
    """The probe for a resolved solver, or the explanation when ``originals[0]`` is none."""
    if is_cramer_solver(originals[0]):
        return probe(originals)
    return explain_absence()


FIX = Fix(
    name="geometry_subpix",
    targets=(SOLVE_ROW,),
    probe=probe,
    when_absent=explain_absence,
    demonstration="kornia_halfpatch.demos.geometry_subpix:demonstrate",
)
