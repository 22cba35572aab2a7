"""geometry_subpix: the float16 Cramer-rule sub-voxel solve, promoted to float32.

Oracles: the installed release's own float32 solve (the helper, called unpatched on widened
inputs), float64 runs of the whole refinement, and invariants (finite gradients, bfloat16/
float32/float64 bitwise unchanged, patched forward differs from the unpatched one only at the
refined maxima). kornia 0.9.0 is no oracle here: it changed float32 results of this function.
"""

import inspect

import pytest
import torch

import kornia.geometry.subpix as subpix
import kornia_halfpatch
from kornia_halfpatch.fixes import geometry_subpix as fix
from examples import probe_volume
from support import UPSTREAM_FIXED, bitwise_equal, inductor_compile

FIX = "geometry_subpix"
SOLVER_MODULE = subpix.spatial_soft_argmax
# By inspection of the installed release, not its version (no module global may keep the
# original: the engine would report it as a stale reference).
HAS_CRAMER = fix.is_cramer_solver(
    kornia_halfpatch.get_original(getattr(SOLVER_MODULE, "_solve_cramer_sym3x3", None))
)
HAS_ITERATIVE = hasattr(subpix, "iterative_quad_interp3d")
KINDS = ("rand", "rand_0.01", "blob")
SEEDS = range(20)

needs_cramer = pytest.mark.skipif(
    UPSTREAM_FIXED or not HAS_CRAMER,
    reason="kornia >= 0.9.0 has the fix; nothing is patched"
    if UPSTREAM_FIXED
    else "no Cramer-rule solver in this kornia (conv_quad_interp3d solves by LU in float32); nothing to patch",
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Single-threaded, for two measured reasons: with several threads the backward of kornia's
    gathers (index_put with accumulate) sums in a varying order, so float32 gradients of the same
    call differ by an ulp from run to run (15 of 20 reruns), which would defeat the bitwise
    comparisons; and on these tiny volumes a second thread only adds contention (10-40x slower on
    a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def refinement_paths():
    """Every sub-voxel refinement path of the installed release, built at call time."""
    from kornia.feature import ScaleSpaceDetector
    from kornia.feature.integrated import SIFTFeatureScaleSpace

    paths = {"ConvQuadInterp3d": lambda x: subpix.ConvQuadInterp3d(strict_maxima_bonus=0.0)(x)}
    if HAS_ITERATIVE:
        paths["iterative_quad_interp3d"] = lambda x: subpix.iterative_quad_interp3d(x, strict_maxima_bonus=0.0)
    detectors = {"SIFTFeatureScaleSpace": SIFTFeatureScaleSpace(num_features=100, upright=True).detector}
    if "subpix_module" in inspect.signature(ScaleSpaceDetector).parameters:
        detectors["ScaleSpaceDetector()"] = ScaleSpaceDetector()
    for name, detector in detectors.items():
        paths[name] = lambda x, detector=detector: detector_refinement(detector, x)
    return paths


def detector_refinement(detector, response):
    """Maxima and minima of ``response`` refined as the detector's octave loop does it."""
    module = getattr(detector, "subpix", None) or detector.nms
    if getattr(detector, "_is_iterative_subpix", False):
        max_mask, min_mask = subpix.nms3d_minmax(response)
        high = module(response, precomputed_nms_mask=max_mask)
        low = module(-response, precomputed_nms_mask=min_mask)
    else:
        high, low = module(response), module(-response)
    return torch.cat([high[0], low[0]]), torch.cat([high[1], low[1]])


def forward_backward(refine, volume):
    leaf = volume.detach().clone().requires_grad_(True)
    coords, values = refine(leaf)
    (coords.sum() + values.sum()).backward()
    return coords.detach(), values.detach(), leaf.grad


def original_solver():
    return kornia_halfpatch.get_original(SOLVER_MODULE._solve_cramer_sym3x3)


def random_systems(n, seed, scale):
    """Symmetric systems like a response in [0, scale] gives: diagonal-dominant negative
    Hessians (maxima), mixed entries, and some near-singular ones."""
    generator = torch.Generator().manual_seed(seed)
    diagonal = -scale * (0.2 + torch.rand(3, n, generator=generator))
    mixed = 0.25 * scale * (torch.rand(3, n, generator=generator) - 0.5)
    rhs = 0.5 * scale * (torch.rand(3, n, generator=generator) - 0.5)
    singular = torch.arange(n) % 7 == 0
    diagonal[0, singular] = mixed[0, singular] * mixed[1, singular] / diagonal[1, singular].clamp(max=-1e-3)
    return [*diagonal, *mixed, *rhs]


# ------------------------------------------------------------------------------------------
# Which releases get the fix, decided by inspection and behaviour


def test_status_follows_the_solver_not_the_version():
    kornia_halfpatch.apply()  # re-evaluates every fix not installed, whatever earlier tests selected
    reason = kornia_halfpatch.status().fixes[FIX].reason
    if UPSTREAM_FIXED:
        assert reason.startswith("already fixed upstream")
    elif HAS_CRAMER:
        assert FIX in kornia_halfpatch.applied_fixes(), reason
    else:
        assert FIX not in kornia_halfpatch.applied_fixes()
        assert reason.startswith("not needed: no Cramer-rule solver"), reason


@pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: apply() does not consult the check")
def test_check_reads_behaviour():
    if HAS_CRAMER:
        original = original_solver()
        assert fix._check([original]).needed
        # A solver that already promotes (the fixed one) is recognised as not needing the fix.
        assert fix._check([fix.build_solve(original)]).reason.startswith("not needed")
    else:
        assert not hasattr(SOLVER_MODULE, "_solve_cramer_sym3x3")
        assert fix._check([SOLVER_MODULE.conv_quad_interp3d]).reason.startswith("not needed")
    assert not fix.is_cramer_solver(SOLVER_MODULE.conv_quad_interp3d)


@needs_cramer
def test_unpatched_float16_gradient_is_not_finite():
    with kornia_halfpatch.unpatched([FIX]):
        _, _, grad = forward_backward(refinement_paths()["ConvQuadInterp3d"], probe_volume("rand", 0).half())
    assert not torch.isfinite(grad).all()


# ------------------------------------------------------------------------------------------
# The solve itself


@needs_cramer
@pytest.mark.parametrize("scale", [1.0, 0.01], ids=["unit", "0.01"])
def test_float16_solve_is_installed_float32_solve_narrowed_once(scale):
    original = original_solver()
    with kornia_halfpatch.patched(only=[FIX]):
        solve = SOLVER_MODULE._solve_cramer_sym3x3
        assert solve is not original
        systems = [t.half() for t in random_systems(4096, 0, scale)]
        *shifts, solved = solve(*systems)
    *expected, expected_solved = original(*[t.float() for t in systems])
    for got, want in zip(shifts, expected):
        assert bitwise_equal(got, want.half())
    assert torch.equal(solved, expected_solved)


@needs_cramer
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_other_dtypes_solve_bitwise_unchanged(dtype):
    original = original_solver()
    systems = [t.to(dtype).requires_grad_(True) for t in random_systems(1024, 1, 0.01)]
    with kornia_halfpatch.patched(only=[FIX]):
        got = SOLVER_MODULE._solve_cramer_sym3x3(*systems)
    want = original(*systems)
    for a, b in zip(got, want):
        assert bitwise_equal(a, b)


# ------------------------------------------------------------------------------------------
# Every refinement path, on the probe volumes


@pytest.mark.parametrize("kind", KINDS)
def test_float16_backward_and_forward_finite_on_every_path(kind):
    # Where the fix does not apply (0.7.0-0.8.2, 0.9.0) this checks the "not needed" claim.
    with kornia_halfpatch.patched(only=[FIX]):
        for name, refine in refinement_paths().items():
            for seed in SEEDS:
                coords, values, grad = forward_backward(refine, probe_volume(kind, seed).half())
                assert torch.isfinite(grad).all(), (name, seed)
                assert torch.isfinite(coords).all() and torch.isfinite(values).all(), (name, seed)


@needs_cramer
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_other_dtypes_bitwise_unchanged_on_every_path(dtype):
    paths = refinement_paths()
    for kind in KINDS:
        for seed in (0, 1):
            volume = probe_volume(kind, seed).to(dtype)
            for name, refine in paths.items():
                with kornia_halfpatch.unpatched([FIX]):
                    want = forward_backward(refine, volume)
                with kornia_halfpatch.patched(only=[FIX]):
                    got = forward_backward(refine, volume)
                for a, b in zip(got, want):
                    assert bitwise_equal(a, b), (name, kind, seed)


def float16_spacing(x):
    return torch.exp2(torch.floor(torch.log2(x.abs().double().clamp(min=2.0**-14))) - 10)


@needs_cramer
@pytest.mark.parametrize("kind", KINDS)
def test_float16_forward_changes_only_at_maxima_and_gets_closer_to_float64(kind):
    paths = refinement_paths()
    for name in ("ConvQuadInterp3d", "iterative_quad_interp3d"):
        if name not in paths:
            continue
        refine = paths[name]
        error_before = error_after = 0.0
        for seed in SEEDS:
            volume = probe_volume(kind, seed).half()
            maxima = subpix.nms3d(volume.float(), (3, 3, 3), True)
            with kornia_halfpatch.unpatched([FIX]):
                before = refine(volume)
                reference = refine(volume.double())
            with kornia_halfpatch.patched(only=[FIX]):
                after = refine(volume)
            for old, new, ref, at_maxima in zip(before, after, reference, (maxima.unsqueeze(2), maxima)):
                changed = old != new
                assert not (changed & ~at_maxima.expand_as(changed)).any(), (name, seed, "changed off the maxima")
                err_old = (old.double() - ref).abs()
                err_new = (new.double() - ref).abs()
                error_before += err_old.sum().item()
                error_after += err_new.sum().item()
                # Per element the float16 arithmetic after the solve may round either way; the
                # largest error may grow by that rounding only (measured: at most 0.04 ulp).
                worst = err_new.argmax()
                assert err_new.max() <= err_old.max() + float16_spacing(new.reshape(-1)[worst]), (name, seed)
        assert error_after <= error_before, name


@needs_cramer
def test_scaled_responses_are_refined_like_float64():
    """On [0, 0.01] the float16 solve was far off (coordinates up to 1.99 from float64)."""
    refine = refinement_paths()["ConvQuadInterp3d"]
    for seed in range(5):
        volume = probe_volume("rand_0.01", seed).half()
        with kornia_halfpatch.unpatched([FIX]):
            reference, _ = refine(volume.double())
            before, _ = refine(volume)
        with kornia_halfpatch.patched(only=[FIX]):
            after, _ = refine(volume)
        assert (after.double() - reference).abs().max() < 0.02
        assert (before.double() - reference).abs().max() > 0.5


# ------------------------------------------------------------------------------------------
# Execution modes


@needs_cramer
def test_torchscript_compiles_the_replacement():
    systems = [t.half() for t in random_systems(256, 2, 0.01)]
    with kornia_halfpatch.patched(only=[FIX]):
        solve = SOLVER_MODULE._solve_cramer_sym3x3
        scripted = torch.jit.script(solve)
        eager = solve(*systems)
    for a, b in zip(scripted(*systems), eager):
        assert bitwise_equal(a, b)
    assert torch.isfinite(eager[0]).all()


@needs_cramer
def test_torch_jit_trace_of_the_refinement_keeps_the_fix():
    # kornia 0.8.3's conv_quad_interp3d cannot be scripted (torch.is_tensor), but it traces.
    volume = probe_volume("rand_0.01", 0).half()
    with kornia_halfpatch.patched(only=[FIX]):
        eager = subpix.conv_quad_interp3d(volume, strict_maxima_bonus=0.0)
        traced = torch.jit.trace(
            lambda x: subpix.conv_quad_interp3d(x, strict_maxima_bonus=0.0), (volume,), check_trace=False
        )
    # The trace holds the float32 solve: it keeps working after the fix is reverted.
    with kornia_halfpatch.unpatched([FIX]):
        coords, values, grad = forward_backward(traced, volume)
    assert bitwise_equal(coords, eager[0]) and bitwise_equal(values, eager[1])
    assert torch.isfinite(grad).all()


@pytest.mark.slow
@needs_cramer
def test_torch_compile_fullgraph_finite_backward():
    systems = [t.half() for t in random_systems(64, 3, 0.01)]
    with kornia_halfpatch.patched(only=[FIX]):
        solve = SOLVER_MODULE._solve_cramer_sym3x3
        torch._dynamo.reset()
        try:
            compiled = inductor_compile(solve, fullgraph=True)
            leaves = [t.clone().requires_grad_(True) for t in systems]
            sx, sy, ss, solved = compiled(*leaves)
            (sx.float().sum() + sy.float().sum() + ss.float().sum()).backward()
        finally:
            torch._dynamo.reset()
        eager = solve(*systems)
    assert torch.equal(solved, eager[3])
    for got, want in zip((sx, sy, ss), eager[:3]):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, want, rtol=2**-10, atol=0)
    assert all(torch.isfinite(leaf.grad).all() for leaf in leaves)


@needs_cramer
def test_demonstration_holds():
    demo = fix.FIX.demonstrate()
    assert demo.holds, demo.cases
    assert all(float(before) > 0 for _, before, _ in demo.cases)
