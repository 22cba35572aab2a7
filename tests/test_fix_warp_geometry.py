"""warp_geometry: half warps with float32 geometry (plain warps; augmentations are augmentation_pipeline's).

Oracle: the installed release's float32 warp on the same (half-held) values, narrowed once,
computed in the same run with the fix reverted; the float64 warp for the accuracy ratios.
float32/float64: bitwise the unpatched release."""

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import testing
from kornia_halfpatch.demos.warp_geometry import error_ratio, warp_test_image, warp_calls
from kornia_halfpatch.fixes.warp_geometry import FIX as WARP_FIX
import examples as inputs
from support import (
    assert_as_close_to_float64_as_the_release,
    HALF_DTYPES, KORNIA, UPSTREAM_FIXED, bitwise_equal, expect_missing_kernel_error, lacks_half_kernel, run_python,
)

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
FIX = "warp_geometry"
DTYPE_IDS = [str(d).replace("torch.", "") for d in HALF_DTYPES]
WARPS = ("warp_affine", "warp_perspective", "remap", "rotate", "elastic_transform2d")
MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")


@pytest.fixture(autouse=True)
def _applied():
    with kornia_halfpatch.patched(only=[FIX]):
        yield


def _unpatched_float32_narrowed(call, image, dtype, mode, pad):
    with kornia_halfpatch.unpatched([FIX]):
        return call(image.float(), mode, pad).to(dtype)


# --------------------------------------------------------------------------------------------
# Bitwise: the half warp is the release's float32 warp of the same values, narrowed once


@pytest.mark.parametrize("pad", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", WARPS)
def test_half_warp_is_the_float32_warp_narrowed_in_every_mode(name, mode, pad):
    if name == "elastic_transform2d" and mode == "bicubic":
        pytest.skip("elastic_transform2d takes bilinear or nearest")
    image = warp_test_image("noise", 64, seed=1)
    for dtype in HALF_DTYPES:
        call = warp_calls(64, dtype)[name]
        expected = _unpatched_float32_narrowed(call, image, dtype, mode, pad)
        out = call(image.to(dtype), mode, pad)
        assert out.dtype == dtype  # 0.9.0's output dtype
        if name == "elastic_transform2d":
            # its 15x15 noise blur in two passes (filters_conv_hang.rank_one_factors): the bound
            # of test_half_at_scale's elastic test, not the release's bits
            with kornia_halfpatch.unpatched([FIX]):
                float64 = call(image.double(), mode, pad)
            assert_as_close_to_float64_as_the_release(out, expected, float64, 0.01)
        else:
            assert bitwise_equal(out, expected), (name, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", WARPS)
def test_full_precision_warps_are_bitwise_the_release(name, dtype):
    image = warp_test_image("smooth", 64, seed=2).to(dtype)
    call = warp_calls(64, torch.float16)[name]  # any held parameters: the same in both runs
    with kornia_halfpatch.unpatched([FIX]):
        expected = call(image, "bilinear", "reflection")
    assert bitwise_equal(call(image, "bilinear", "reflection"), expected)


# --------------------------------------------------------------------------------------------
# Accuracy against float64: patched = the ideal (float32 rounded once), unpatched worse

SIZES = (64, 182, 256, 512)
# (warp, size, image): every size for the affine warp, the others at 182 and 512 (lean: each
# 512 px ratio costs three warps in float64/float32/half, twice).
# The warps that build their grid with F.affine_grid (rotate through warp_affine).
AFFINE_GRID_WARPS = ("warp_affine", "rotate")
ACCURACY_CASES = [("warp_affine", s, k) for s in SIZES for k in ("smooth", "noise")] + [
    (name, s, "smooth") for name in ("warp_perspective", "remap", "rotate") for s in (182, 512)
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,size,kind", ACCURACY_CASES)
def test_patched_error_is_the_ideal_and_unpatched_is_worse(name, size, kind, dtype):
    image = warp_test_image(kind, size, seed=3)
    patched = error_ratio(name, image, dtype, "bilinear", "border")
    assert patched == pytest.approx(1.0, abs=5e-3)
    if name in AFFINE_GRID_WARPS and (lacks_half_kernel("baddbmm", dtype) or lacks_half_kernel("bmm", dtype)):
        # torch 2.1: the release's half affine_grid needs a half baddbmm (rotate composes its
        # matrix with bmm first), which torch lacks; the unpatched warp raises instead of
        # computing a worse warp.
        with kornia_halfpatch.unpatched([FIX]), expect_missing_kernel_error(match="bmm"):
            error_ratio(name, image, dtype, "bilinear", "border")
        return
    with kornia_halfpatch.unpatched([FIX]):
        unpatched = error_ratio(name, image, dtype, "bilinear", "border")
    # Unpatched float16 warp_affine happens to land on the ideal on some releases (its half grid
    # rounds to the same samples); never better than the ideal.
    assert unpatched >= patched - 5e-3
    if dtype == torch.bfloat16 or name != "warp_affine":
        assert unpatched > 1.2, unpatched


# --------------------------------------------------------------------------------------------
# Every row is installed where the release has it. Each row's example (and that of Affine.forward
# and HomographyWarper.forward) against the float32 result narrowed: tests/test_rows.py.


def test_every_row_present_in_the_release_is_patched():
    import kornia_call_sites

    patched = 0
    for target in WARP_FIX.targets:
        function = kornia_call_sites.resolve(target.candidates[0])
        if function is None:
            continue  # absent in this release (optional row)
        assert kornia_halfpatch.is_patched(function), target.label
        patched += 1
    assert patched >= 30  # of 38 rows and 3 methods: older releases lack a few


def test_perspective_transform_of_a_256_px_image_is_nan_unpatched_and_float32_accurate_patched():
    """0.7-0.8 solve the 8x8 system in float16: products of pixel coordinates (255 * 255 = 65025)
    reach float16's 65504 and the matrix is NaN. Patched: the float32 solve, narrowed once."""
    from kornia.geometry import transform

    src, dst = inputs.perspective_transform_call(torch.float16)
    # Looked up inside each state: a name bound before it would keep the replacement.
    with testing.isolated(only=()):
        assert not bool(torch.isfinite(transform.get_perspective_transform(src, dst)).all())
    with testing.isolated(only=[FIX]):
        matrix = transform.get_perspective_transform(src, dst)
        with kornia_halfpatch.unpatched([FIX]):
            reference = transform.get_perspective_transform(src.float(), dst.float())
    assert bitwise_equal(matrix, reference.to(torch.float16))
    # The corners map where they should, to float16's resolution at 256 px (0.125) and a little more.
    from kornia.geometry import transform_points

    mapped = transform_points(matrix.float(), src.float())
    assert float((mapped - dst.float()).abs().max()) < 0.25


def test_module_forms_go_through_the_promoted_functions():
    from kornia.geometry import transform as T

    image = warp_test_image("smooth", 40, seed=4)
    modules = {
        "Rotate": lambda d: T.Rotate(torch.tensor([17.3]).to(d)),
        "Translate": lambda d: T.Translate(torch.tensor([[2.3, -1.1]]).to(d)),
        "Scale": lambda d: T.Scale(torch.tensor([[1.3, 0.9]]).to(d)),
        "Shear": lambda d: T.Shear(torch.tensor([[0.11, -0.23]]).to(d)),
    }
    for name, make in modules.items():
        for dtype in HALF_DTYPES:
            held = make(dtype)
            with kornia_halfpatch.unpatched([FIX]):
                wide = make(dtype)
                for attribute in ("angle", "translation", "scale_factor", "shear"):
                    if isinstance(getattr(wide, attribute, None), torch.Tensor):
                        setattr(wide, attribute, getattr(wide, attribute).float())
                expected = wide(image).to(dtype)
            assert bitwise_equal(held(image.to(dtype)), expected), (name, dtype)


def test_homography_warper_precomputed_grid_from_a_half_homography():
    """The precomputed path is the release's float32 precomputed path narrowed, bitwise the direct
    path (the release kept the grid in half: 0.03 / 0.24 apart in float16 / bfloat16 on kornia's
    own test_homography_warper), and the stored grid keeps the release's (and 0.9.0's) dtype."""
    from kornia.geometry import transform

    for dtype in HALF_DTYPES:
        _, patch, H = inputs.homography_warper_call(dtype)
        with testing.isolated(only=[FIX]):
            warper = transform.HomographyWarper(12, 10)
            warper.precompute_warp_grid(H)
            grid = warper._warped_grid
            out = warper(patch)
            direct = warper(patch, H)
            with kornia_halfpatch.unpatched([FIX]):
                reference_warper = transform.HomographyWarper(12, 10)
                reference_warper.precompute_warp_grid(H.float())
                expected = reference_warper(patch.float())
                reference_grid = reference_warper._warped_grid
        assert grid.dtype == dtype  # warp_grid narrows to the homography's dtype, as 0.9.0
        assert bitwise_equal(grid, reference_grid.to(dtype))
        assert bitwise_equal(out, expected.to(dtype))
        assert bitwise_equal(out, direct)
        assert grid is warper._warped_grid  # the instance keeps its grid
        # A grid the user put there (not from this shim's precompute) is sampled at its own values.
        with testing.isolated(only=[FIX]):
            warper._warped_grid = grid.clone()
            assert bitwise_equal(warper(patch), torch.nn.functional.grid_sample(
                patch.float(), grid.float(), align_corners=False).to(dtype))


# --------------------------------------------------------------------------------------------
# Gradients: the half backward is the float32 backward narrowed (image and transform)


def _grads(call, image, params, upstream):
    image = image.detach().requires_grad_(True)
    params = params.detach().requires_grad_(True)
    call(image, params).backward(upstream.to(image.dtype))
    return image.grad, params.grad


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["warp_affine", "warp_perspective", "rotate"])
def test_half_backward_is_the_float32_backward_narrowed(name, dtype):
    from kornia.geometry import transform as T

    size = 48
    image = warp_test_image("smooth", size, seed=5)
    params = {
        "warp_affine": torch.tensor([[[0.9537, -0.3007, 20.3], [0.3007, 0.9537, -5.7]]]),
        "warp_perspective": torch.tensor([[[0.9537, -0.3007, 20.3], [0.3007, 0.9537, -5.7], [0.001, -0.002, 1.0]]]),
        "rotate": torch.tensor([17.3]),
    }[name].to(dtype)
    calls = {
        "warp_affine": lambda x, m: T.warp_affine(x, m, (size, size), padding_mode="border"),
        "warp_perspective": lambda x, m: T.warp_perspective(x, m, (size, size), padding_mode="border"),
        "rotate": lambda x, a: T.rotate(x, a, padding_mode="border"),
    }
    upstream = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(6)).to(dtype)
    half_image, half_params = _grads(calls[name], image.to(dtype), params, upstream)
    with kornia_halfpatch.unpatched([FIX]):
        wide_image, wide_params = _grads(calls[name], image, params.float(), upstream.float())
    assert half_image.dtype == dtype and half_params.dtype == dtype
    assert bitwise_equal(half_image, wide_image.to(dtype))
    assert bitwise_equal(half_params, wide_params.to(dtype))


@pytest.mark.slow
def test_a_non_finite_matrix_never_kills_the_process():
    code = """
import torch, kornia, kornia_halfpatch
kornia_halfpatch.apply()
from kornia.geometry import transform as T
for dtype in (torch.float16, torch.bfloat16):
    for pad in ("zeros", "border", "reflection"):
        image = torch.rand(1, 2, 20, 20).to(dtype).requires_grad_(True)
        M = torch.tensor([[[float("nan"), 0.0, 1.0], [0.0, 1.0, float("inf")]]]).to(dtype).requires_grad_(True)
        out = T.warp_affine(image, M, (20, 20), padding_mode=pad)
        out.sum().backward()
        assert out.dtype == dtype and image.grad.dtype == dtype
        angle = torch.tensor([float("nan")], dtype=dtype, requires_grad=True)
        T.rotate(image, angle, padding_mode=pad).sum().backward()
print("survived")
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "survived" in result.stdout


# --------------------------------------------------------------------------------------------
# Compilers: TorchScript per row is in tests/test_rows.py; one fullgraph compile here


@pytest.mark.slow
def test_torch_compile_fullgraph_warp_affine():
    from kornia.geometry import transform as T

    image, M, dsize, mode, pad = inputs.warp_affine_call(torch.bfloat16)
    torch._dynamo.reset()
    try:
        # backend="eager": the graph capture (what a wrapper can break: fullgraph refuses any
        # break) without Inductor's code generation (46 s here), so the result is bitwise.
        compiled = torch.compile(lambda x, m: T.warp_affine(x, m, dsize, mode, pad), fullgraph=True, backend="eager")
        out = compiled(image, M)
        with kornia_halfpatch.unpatched([FIX]):
            expected = T.warp_affine(image.float(), M.float(), dsize, mode, pad).to(torch.bfloat16)
        assert bitwise_equal(out, expected)
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("name,factory", [("warp_affine", inputs.warp_affine_call), ("remap", inputs.remap_call),
                                          ("rotate", inputs.rotate_call), ("warp_perspective", inputs.warp_perspective_call)])
def test_torch_jit_script_holds_where_the_original_scripts(name, factory):
    from kornia.geometry import transform as T

    function = getattr(T, name)
    try:
        torch.jit.script(kornia_halfpatch.get_original(function))
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the release's {name} does not script either: {type(exc).__name__}")
    scripted = torch.jit.script(function)
    for dtype in HALF_DTYPES + [torch.float32]:
        args = factory(dtype)
        assert bitwise_equal(scripted(*args), function(*args)), (name, dtype)


# --------------------------------------------------------------------------------------------
# The table against the source: every function that samples at derived coordinates


# Callers that are not rows, each with the reason. Prefixes of "module:qualname".
EXEMPT = {
    "kornia.augmentation.": "augmentations: fixes/augmentation_pipeline.py, through these rows",
    "kornia.feature.": "keypoint/descriptor sampling (LAF patches: feature_patches; DeDoDe/ALIKED/XFeat/SOLD2 sample "
                       "features at keypoints): not an image warp",
    "kornia.contrib.models.rt_detr": "deformable attention: sampling offsets are network outputs, not geometry",
    "kornia.models.rt_detr": "deformable attention: sampling offsets are network outputs, not geometry",
    "kornia.contrib.image_stitching:ImageStitcher": "through the warp_perspective row",
    "kornia.tracking.planar_tracker:HomographyTracker": "through the warp_perspective row",
    "kornia.filters.kernels_geometry:": "motion kernels: through the rotate/rotate3d rows",
    "kornia.geometry.transform.imgwarp:_fill_and_warp": "a helper of warp_affine/warp_perspective (rows)",
    "kornia.geometry.transform.imgwarp:_transform_warp_impl3d": "torch_ops' row (CPU); through warp_perspective3d",
    "kornia.geometry.transform.thin_plate_spline:warp_image_tps": "kornia_dtypes' row (promoted wholesale there)",
    "kornia.geometry.transform.affwarp:Rotate.forward": "calls rotate through the module global (row)",
    "kornia.geometry.transform.affwarp:Translate.forward": "calls translate through the module global (row)",
    "kornia.geometry.transform.affwarp:Scale.forward": "calls scale through the module global (row)",
    "kornia.geometry.transform.affwarp:Shear.forward": "calls shear through the module global (row)",
}


@pytest.mark.slow
def test_every_function_sampling_at_derived_coordinates_is_covered():
    import kornia_call_sites

    callers = kornia_call_sites.callers_of_warps()
    rows = {t.candidates[0] for t in WARP_FIX.targets}
    uncovered = [
        where for where in callers
        if where not in rows and not any(where.startswith(prefix) for prefix in EXEMPT)
    ]
    assert uncovered == []
    # every row that exists in this release is found by the scan (the table holds no stale line),
    # but the grid transforms and matrix builders: they compute coordinates and transforms, and sample nothing
    present = {t.candidates[0] for t in WARP_FIX.targets if kornia_call_sites.resolve(t.candidates[0]) is not None}
    builders = {f"kornia.geometry.transform.imgwarp:{name}" for name in (
        "warp_grid", "warp_grid3d", "get_rotation_matrix2d", "get_affine_matrix2d", "get_affine_matrix3d",
        "get_projective_transform", "invert_affine_transform", "get_perspective_transform",
        "get_perspective_transform3d", "get_shear_matrix2d", "get_shear_matrix3d")} | {
        "kornia.geometry.transform.homography_warper:HomographyWarper.precompute_warp_grid"}
    assert present - set(callers) == builders


def test_warp_perspective_256px_float16_matrix_gradient_is_float32_narrowed_inf_only_past_the_range():
    """At 256 px the float32 gradient of the perspective row (h20, h21: sums of x * dI/dx over
    65536 pixels) is of order 1e6-1e7, past float16's 65504. The half gradient is the float32
    gradient narrowed once: Inf exactly there, never NaN, every other entry finite and bitwise."""
    import kornia

    generator = torch.Generator().manual_seed(80)
    image = torch.rand(1, 3, 256, 256, generator=generator).half().float()
    matrix = torch.tensor([[[1.02, 0.01, 1.5], [-0.01, 0.98, -2.0], [1e-5, -2e-5, 1.0]]]).half().float()
    projection = torch.randn(1, 3, 256, 256, generator=generator).half().float()

    def gradients(im, m):
        im, m = im.clone().requires_grad_(True), m.clone().requires_grad_(True)
        out = kornia.geometry.transform.warp_perspective(im, m, (256, 256))
        (out.float() * projection).sum().backward()
        return im.grad, m.grad

    with testing.isolated(only=[WARP_FIX.name]):
        with kornia_halfpatch.unpatched([WARP_FIX.name]):
            image_reference, matrix_reference = gradients(image, matrix)
        image_gradient, matrix_gradient = gradients(image.half(), matrix.half())
    past_range = matrix_reference.abs() > torch.finfo(torch.float16).max
    assert bool(past_range.any()) and bool(torch.isfinite(matrix_reference).all())
    assert not bool(torch.isnan(matrix_gradient).any())
    assert torch.equal(torch.isinf(matrix_gradient), past_range)
    assert bitwise_equal(matrix_gradient, matrix_reference.half())
    assert bitwise_equal(image_gradient, image_reference.half())
