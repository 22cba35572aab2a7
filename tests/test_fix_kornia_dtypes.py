"""kornia_dtypes: float16/bfloat16 accepted, finite and right (all but the augmentations, which are augmentation_pipeline's).

Oracle: the installed release's float32 computation on the same (half-representable) inputs,
narrowed to kornia 0.9.0's output dtype (measured in the 0.9.0 env: the input's half dtype for
every call here, float32 for apply_colormap's colours), computed in the same run with the fix
reverted. float32/float64: bitwise the unpatched release."""

import contextlib
import copy

import pytest
import torch

import gen_half_cases as half_cases
import kornia_halfpatch
import oracle
from kornia_halfpatch import testing
from kornia_halfpatch._kernels import widening_missing_kernels
import examples as inputs
from support import (
    FULL_DTYPES, HALF_DTYPES, KORNIA, UPSTREAM_FIXED, bitwise_equal, expect_missing_kernel_error, lacks_half_kernel,
)

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
DTYPE_IDS = [str(d).replace("torch.", "") for d in HALF_DTYPES]


def _kornia():
    import kornia

    return kornia


def api_cases():
    K = _kornia()
    cases = {
        "rgb_to_hls": lambda d: K.color.rgb_to_hls(*inputs.gray_patch_image(d)),
        "rgb_to_hsv": lambda d: K.color.rgb_to_hsv(*inputs.gray_patch_image(d)),
        "hsv_to_rgb": lambda d: K.color.hsv_to_rgb(*inputs.hsv_image(d)),
        "luv_to_rgb": lambda d: K.color.luv_to_rgb(*inputs.luv_image(d)),
        "rgb_to_grayscale": lambda d: K.color.rgb_to_grayscale(*inputs.rgb_image(d)),
        "apply_colormap": lambda d: K.color.apply_colormap(*inputs.colormap_call(d)),
        "adjust_hue": lambda d: K.enhance.adjust_hue(*inputs.gray_image_and_factor(d)),
        "adjust_saturation": lambda d: K.enhance.adjust_saturation(*inputs.gray_image_and_factor(d)),
        "AdjustHue": lambda d: K.enhance.AdjustHue(0.375)(*inputs.gray_patch_image(d)),
        "equalize": lambda d: K.enhance.equalize(*inputs.image_to_equalize(d)),
        "ssim": lambda d: K.metrics.ssim(*inputs.image_pair_window(d)),
        "ssim_loss": lambda d: K.losses.ssim_loss(*inputs.image_pair_window(d)),
        "SSIMLoss": lambda d: K.losses.SSIMLoss(5)(*inputs.image_pair(d)),
        "charbonnier_loss": lambda d: K.losses.charbonnier_loss(*inputs.image_pair(d)),
        "canny": lambda d: K.filters.canny(*inputs.rgb_image(d)),
        "gftt_response": lambda d: K.feature.gftt_response(*inputs.single_channel_image(d)),
        "CornerGFTT": lambda d: K.feature.CornerGFTT()(*inputs.single_channel_image(d)),
        "PatchAffineShapeEstimator": lambda d: (lambda m, p: m(p))(*inputs.affine_shape_call(d)),
        "PatchDominantGradientOrientation": lambda d: (lambda m, p: m(p))(*inputs.dominant_orientation_call(d)),
        "depth_to_normals": lambda d: K.geometry.depth.depth_to_normals(*inputs.depth_and_camera(d)),
        "get_tps_transform": lambda d: K.geometry.transform.get_tps_transform(*inputs.tps_points(d)),
        "warp_image_tps": lambda d: K.geometry.transform.warp_image_tps(*inputs.tps_warp_call(d)),
        "find_homography_dlt_iterated": lambda d: K.geometry.homography.find_homography_dlt_iterated(
            *inputs.weighted_homography_points(d)),
        "get_gaussian_discrete_kernel1d tensor sigma": lambda d: K.filters.get_gaussian_discrete_kernel1d(
            *inputs.discrete_kernel_call(d)),
        "get_gaussian_discrete_kernel1d dtype": lambda d: K.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=d),
        "normal_transform_pixel": lambda d: K.geometry.conversions.normal_transform_pixel(
            *inputs.normal_transform_call(d)),
        "image_histogram2d": lambda d: K.enhance.image_histogram2d(*inputs.histogram_call(d)),
        "lovasz_hinge_loss": lambda d: K.losses.lovasz_hinge_loss(*inputs.lovasz_hinge_call(d)),
        "lovasz_softmax_loss": lambda d: K.losses.lovasz_softmax_loss(*inputs.lovasz_softmax_call(d)),
        "RandomPlanckianJitter": lambda d: _seeded(K.augmentation.RandomPlanckianJitter(p=1.0), inputs.rgb_image(d)[0]),
        "rgb_to_luv": lambda d: K.color.rgb_to_luv(*inputs.black_rgb_image(d)),
        "rgb_to_lab": lambda d: K.color.rgb_to_lab(*inputs.rgb_image(d)),
        "lab_to_rgb": lambda d: K.color.lab_to_rgb(*inputs.lab_image(d)),
        "ssim3d": lambda d: K.metrics.ssim3d(*inputs.volume_pair_window(d)),
        "ssim3d_loss": lambda d: K.losses.ssim3d_loss(*inputs.volume_pair_window(d)),
        "histogram": lambda d: K.enhance.histogram(*inputs.histogram_far_call(d)),
        "histogram2d": lambda d: K.enhance.histogram2d(*inputs.histogram2d_far_call(d)),
        "make_upright": lambda d: K.feature.make_upright(*inputs.laf_call(d)),
        "ScalePyramid": lambda d: (lambda m, x: m(x))(*inputs.scale_pyramid_call(d)),
        "MKDDescriptor": lambda d: (lambda m, x: m(x))(*inputs.mkd_call(d)),
        "ScaleSpaceDetector": lambda d: (lambda m, x, n: m(x))(*inputs.scale_space_detect_call(d)),
        "normalize_homography": lambda d: K.geometry.conversions.normalize_homography(
            *inputs.normalize_homography_call(d)[:1], (3, 5), (4, 6)),
        "denormalize_homography": lambda d: K.geometry.conversions.denormalize_homography(
            *inputs.normalize_homography_call(d)[:1], (3, 5), (4, 6)),
    }
    if hasattr(K.filters, "otsu_threshold"):  # 0.8.x
        cases["otsu_threshold"] = lambda d: K.filters.otsu_threshold(*inputs.ramp_image(d))
        cases["OtsuThreshold"] = lambda d: (lambda m, *a: m(*a))(*inputs.otsu_module_call(d))
    for k in (3, 9, 15):
        for pool, call in half_cases.blur_pool_calls().items():
            cases[f"{pool} {k}"] = lambda d, call=call, k=k: call(half_cases.blur_pool_image().to(d), k)
    cases["gaussian_blur2d"] = lambda d: K.filters.gaussian_blur2d(*inputs.blur_call(d))
    cases["GaussianBlur2d separable=False"] = lambda d: K.filters.GaussianBlur2d((5, 5), (1.5, 2.5), separable=False)(
        *inputs.blur_call(d)[:1]) if "separable" in K.filters.GaussianBlur2d.__init__.__code__.co_varnames else (
        K.filters.gaussian_blur2d(*inputs.blur_call(d)))
    cases["quaternion_to_rotation_matrix"] = lambda d: K.geometry.conversions.quaternion_to_rotation_matrix(
        *inputs.unbatched_quaternion(d))
    cases["rotation_matrix_to_quaternion"] = lambda d: K.geometry.conversions.rotation_matrix_to_quaternion(
        *inputs.unbatched_rotation_matrix(d))
    cases["essential_from_fundamental"] = lambda d: K.geometry.epipolar.essential_from_fundamental(*inputs.epipolar_call(d))
    cases["conv_soft_argmax2d"] = lambda d: K.geometry.subpix.conv_soft_argmax2d(*inputs.soft_argmax_call(d))
    if hasattr(getattr(K.geometry, "solvers", None), "polynomial_solver") and hasattr(
            K.geometry.solvers.polynomial_solver, "solve_quartic"):  # 0.8.3
        cases["solve_quartic"] = lambda d: K.geometry.solvers.polynomial_solver.solve_quartic(*inputs.quartic_coefficients(d))
    if hasattr(K.enhance, "jpeg_codec_differentiable"):  # 0.7.4+
        cases["jpeg_codec_differentiable"] = lambda d: K.enhance.jpeg_codec_differentiable(*inputs.jpeg_call(d))
    return cases


def _seeded(module, image):
    torch.manual_seed(57)
    return module(image)


# 0.9.0's output dtype where it is not the input's half dtype.
FLOAT32_OUTPUTS = {"apply_colormap", "image_histogram2d"}
# Outputs (by position in the flattened result) that 0.9.0 returns in float32: the LAFs.
FLOAT32_OUTPUT_POSITIONS = {"ScaleSpaceDetector": {0}}
# Not the release's float32 narrowed, by a documented rule (docs/fixes/kornia_dtypes.md).
OWN_RULE = {"normal_transform_pixel"}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


CASES = sorted(api_cases())


@pytest.fixture(scope="module")
def every_fix_applied():
    """Every needed fix applied once for this module's public-API cases (one shim cycle, not one
    per case), the previous state restored after."""
    with testing.isolated():
        yield


@pytest.fixture(scope="module")
def release_results(every_fix_applied):
    """Each case's result in float32 and float64 with kornia_dtypes reverted (the other fixes
    applied), computed in one unpatched block: the oracle of the half test and the reference of
    the full-precision test. A case that raises keeps its exception, raised in its test."""
    results = {}
    cases = api_cases()
    with kornia_halfpatch.unpatched(["kornia_dtypes"]):
        for name in CASES:
            for dtype in FULL_DTYPES:
                try:
                    results[name, dtype] = _tensors(cases[name](dtype))
                except Exception as exc:  # noqa: BLE001 - re-raised by the case's own test
                    results[name, dtype] = exc
    return results


def _release_result(results, name, dtype):
    result = results[name, dtype]
    if isinstance(result, Exception):
        raise result
    return result


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(set(CASES) - OWN_RULE))
def test_public_api_in_half_is_the_release_float32_narrowed(name, dtype, release_results):
    reference = _release_result(release_results, name, torch.float32)
    got = _tensors(api_cases()[name](dtype))
    assert len(got) == len(reference)
    for position, (g, r) in enumerate(zip(got, reference)):
        float32_output = name in FLOAT32_OUTPUTS or position in FLOAT32_OUTPUT_POSITIONS.get(name, ())
        expected_dtype = torch.float32 if float32_output else dtype
        assert g.shape == r.shape, name
        if not r.is_floating_point():
            assert torch.equal(g, r), name
            continue
        assert g.dtype == expected_dtype, name
        assert bool((torch.isfinite(g) | ~torch.isfinite(r)).all()), name
        expected = r.to(expected_dtype)
        if not bitwise_equal(g, expected):
            # A public wrapper doing half work around the promoted function (a module's
            # reduction, a half kernel built outside it): one half rounding step apart at most.
            torch.testing.assert_close(g.float(), expected.float(), rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_public_api_full_precision_is_bitwise_unchanged(name, dtype, release_results):
    unpatched = _release_result(release_results, name, dtype)
    patched = _tensors(api_cases()[name](dtype))
    assert len(patched) == len(unpatched)
    assert all(bitwise_equal(a, b) for a, b in zip(patched, unpatched))


def test_promoted_functions_are_bitwise_the_release_float32_narrowed():
    """Where the public function is the row itself, no tolerance: bitwise, against the float32
    example's result. A row whose half example is its float32 example exactly, on that example:
    tests/test_rows.py (the same assertion). Left here: other inputs than the row's example, and
    examples whose float32 form is not the half one widened (the histograms' bin edges, ScalePyramid)."""
    for name in ("get_gaussian_discrete_kernel1d dtype", "normalize_homography", "denormalize_homography",
                 "histogram", "histogram2d", "ScalePyramid"):
        case = api_cases()[name]
        with testing.isolated(only=["kornia_dtypes"]):
            with kornia_halfpatch.unpatched(["kornia_dtypes"]):
                reference = _tensors(case(torch.float32))
            for dtype in HALF_DTYPES:
                got = _tensors(case(dtype))
                assert all(bitwise_equal(g, r.to(dtype)) for g, r in zip(got, reference)), (name, dtype)


def test_gray_pixels_are_nan_unpatched_and_finite_patched():
    """The fix is what makes it finite: eps=1e-8 is 0 in float16 (rgb_to_hls: 0/0 hue)."""
    K = _kornia()
    gray = inputs.gray_patch_image(torch.float16)[0]
    with testing.isolated(only=()):
        assert not bool(torch.isfinite(K.color.rgb_to_hls(gray)).all())
    with testing.isolated(only=["kornia_dtypes"]):
        assert bool(torch.isfinite(K.color.rgb_to_hls(gray)).all())
        assert bool(torch.isfinite(K.enhance.adjust_hue(gray, 0.2)).all())


def test_flat_patch_orientation_is_nan_unpatched_and_the_float32_angle_patched():
    """A flat float16 patch: sqrt(0 + 1e-10) is 0 in half, the histogram peak 0/0, a NaN angle."""
    module, patches = inputs.dominant_orientation_call(torch.float16)
    # Sobel's replicate padding has no half CPU kernel in older torch (2.4): there it runs in float32,
    # narrowed (a copy, so bitwise the half padding); a no-op on a torch with the kernel.
    with testing.isolated(only=()), widening_missing_kernels():
        assert bool(torch.isnan(module(patches)[0]))
    module, patches = inputs.dominant_orientation_call(torch.float16)
    with testing.isolated(only=["kornia_dtypes"]):
        angles = module(patches)
        # The module's float32 weighting is not rounded by the half call.
        assert module.weighting.dtype == torch.float32
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = inputs.dominant_orientation_call(torch.float32)[0](patches.float())
    assert bool(torch.isfinite(angles).all())
    assert bitwise_equal(angles, reference.to(torch.float16))


def test_discrete_gaussian_kernel_is_finite_in_float16():
    K = _kornia()
    with testing.isolated(only=()):
        unpatched = K.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=torch.float16)
    with testing.isolated(only=["kornia_dtypes"]):
        patched = K.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=torch.float16)
    assert not bool(torch.isfinite(unpatched).all())
    assert bool(torch.isfinite(patched).all()) and patched.dtype == torch.float16


def _side_of_one_rule(matrix, axis):
    """0.9.0's normalisation of a side of 1 on ``axis``: scale 1, offset 0 (its one pixel at the
    centre of the normalised range)."""
    axes = matrix.shape[-1] - 1
    return matrix[0, axis, axis].item() == 1.0 and matrix[0, axis, axes].item() == 0.0


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_normal_transform_pixel_single_row_takes_0_9_0s_rule_and_is_float32_elsewhere(dtype):
    """A side of 1 divides by eps in the release (2e14: Inf in float16). In half that side takes
    0.9.0's scale 1 and offset 0, all of it; every other entry is the release's float32 narrowed."""
    K = _kornia()
    with testing.isolated(only=["kornia_dtypes"]):
        half = K.geometry.conversions.normal_transform_pixel(1, 5, dtype=dtype)
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = K.geometry.conversions.normal_transform_pixel(1, 5, dtype=torch.float32)
    assert half.dtype == dtype and bool(torch.isfinite(half).all())
    assert reference[0, 1, 1].item() > 1e13 and reference[0, 1, 2].item() == -1.0  # the release's float32
    assert _side_of_one_rule(half, 1)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1, 1:] = False
    assert bitwise_equal(half[0][mask], reference[0][mask].to(dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_normal_transform_pixel3d_single_slice_takes_0_9_0s_rule_and_is_float32_elsewhere(dtype):
    """The 3-D matrix is built in the half dtype by the release: 2/eps overflows float16 (kornia's
    own test_divide_by_zero3d[float16], which 0.9.0 passes). Same rule as in 2-D."""
    K = _kornia()
    with testing.isolated(only=()):
        unpatched = K.geometry.conversions.normal_transform_pixel3d(*inputs.normal_transform3d_call(dtype))
    with testing.isolated(only=["kornia_dtypes"]):
        half = K.geometry.conversions.normal_transform_pixel3d(*inputs.normal_transform3d_call(dtype))
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = K.geometry.conversions.normal_transform_pixel3d(*inputs.normal_transform3d_call(torch.float32))
    if dtype == torch.float16:
        assert not bool(torch.isfinite(unpatched).all())
    assert half.dtype == dtype and bool(torch.isfinite(half).all())
    assert _side_of_one_rule(half, 2)  # depth 1
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2, 2:] = False
    assert bitwise_equal(half[0][mask], reference[0][mask].to(dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_side_of_one_normalisations_match_kornia_090(dtype):
    """The factories and the homography (de)normalisations with a side of 1, against 0.9.0's
    results: exact for the factories, within the rounding of a 3x3 (4x4) product chain for the
    homographies (0.9.0 multiplies its normalisations in float32 too, in another order)."""
    expected = oracle.kornia090_outputs("half_cases")
    dtype_name = str(dtype).replace("torch.", "")
    with testing.isolated(only=["kornia_dtypes"]):
        for name, call in half_cases.normalisation_calls().items():
            want = expected[f"normalisation/{name}/{dtype_name}"]
            got = call(dtype)
            assert got.dtype == want.dtype == dtype and bool(torch.isfinite(got).all()), name
            if name.startswith("normal_transform"):
                assert torch.equal(got, want), name
            else:
                torch.testing.assert_close(got.float(), want.float(), rtol=torch.finfo(dtype).eps, atol=0, msg=name)


def unpatched_product(call, dtype):
    """The release's half homography normalisation (its matrices multiplied with ``@``), or None
    where this torch has no half CPU bmm (torch 2.1, float16): there it raises, as asserted."""
    if lacks_half_kernel("bmm", dtype):
        with expect_missing_kernel_error(match="bmm"):
            call()
        return None
    return call()


# --------------------------------------------------------------------------------------------
# Allow-lists: bfloat16 accepted; integer input still gets kornia's own error


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_augmentations_accept_half(dtype):
    K = _kornia()
    aug = K.augmentation
    image = inputs.rgb_image(torch.float32)[0].expand(2, 3, 16, 16).contiguous()
    with testing.isolated():
        for transform in (aug.RandomAffine(10.0, p=1.0), aug.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0),
                          aug.RandomGrayscale(p=1.0),
                          aug.AugmentationSequential(aug.RandomAffine(10.0, p=1.0), aug.RandomGrayscale(p=1.0))):
            torch.manual_seed(0)
            out = transform(image.to(dtype))
            assert out.dtype == dtype, transform
            assert bool(torch.isfinite(out).all()), transform


def test_integer_input_still_gets_kornias_own_error():
    K = _kornia()
    image = torch.zeros(1, 3, 8, 8, dtype=torch.int32)
    with testing.isolated(only=()):
        with pytest.raises(TypeError) as unpatched:
            K.augmentation.RandomAffine(10.0, p=1.0)(image)
    with testing.isolated(only=["kornia_dtypes"]):
        with pytest.raises(TypeError) as patched:
            K.augmentation.RandomAffine(10.0, p=1.0)(image)
    assert str(patched.value) == str(unpatched.value)


@pytest.mark.parametrize("name", ["rgb_to_grayscale", "canny", "apply_colormap"])
def test_bfloat16_accepted_where_it_was_refused(name):
    case = api_cases()[name]
    with testing.isolated(only=["kornia_dtypes"]):
        assert all(bool(torch.isfinite(t).all()) for t in _tensors(case(torch.bfloat16)))


def test_script_holds_for_a_scriptable_row():
    K = _kornia()
    with testing.isolated(only=["kornia_dtypes"]):
        function = K.color.rgb_to_hsv
        scripted = torch.jit.script(function)
        for dtype in HALF_DTYPES:
            args = inputs.gray_patch_image(dtype)
            assert bitwise_equal(scripted(*args), function(*args))


# --------------------------------------------------------------------------------------------
# Output dtypes of the detectors (0.9.0: LAFs in float32 for a half image, responses in the
# image's dtype) and the pipelines built on them


SIFT_PIPELINES = ["SIFTFeature", "SIFTFeatureScaleSpace"]


def _sift_pipeline(name):
    return getattr(_kornia().feature, name)(8)


def _sift_image():
    """A (1, 1, 64, 64) texture in [0.05, 0.95] (sinusoids plus noise) on bfloat16's grid, exact in
    both half dtypes. Not _textured_image: its black corner (a ramp from 1e-12) gives 0.7-0.8's
    SIFTFeature a float32 image gradient of 7.7e7 on six corner pixels (0.9.0: 284), Inf narrowed
    to float16 (docs/training.md)."""
    generator = torch.Generator().manual_seed(49)
    noise = torch.rand(1, 1, 64, 64, generator=generator)
    y, x = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    texture = 0.5 + 0.25 * torch.sin(x / 3.1) * torch.cos(y / 4.3) + 0.2 * (noise - 0.5)
    return texture.bfloat16().float()


def _local_feature_outputs_and_image_gradient(module, image):
    """The pipeline's (LAFs, responses, descriptors) and the image's gradient of a fixed seeded
    projection of all three (entries multiples of 1/16, exact in every dtype)."""
    leaf = image.clone().requires_grad_(True)
    outputs = module(leaf)
    generator = torch.Generator().manual_seed(7)
    total = 0
    for output in outputs:
        weights = torch.randint(-16, 17, output.shape, generator=generator).float() / 16
        total = total + (output.float() * weights).sum()
    (gradient,) = torch.autograd.grad(total, leaf)
    return tuple(o.detach() for o in outputs), gradient


def _ulps_at_scale(got, reference, dtype):
    """max |got - reference| in half ulps at the reference's largest magnitude."""
    spacing = torch.finfo(dtype).eps * 2.0 ** torch.floor(torch.log2(reference.abs().max())).item()
    return ((got.float() - reference).abs().max() / spacing).item()


@pytest.mark.slow
@pytest.mark.parametrize("name", SIFT_PIPELINES)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_sift_pipeline_half_is_the_release_float32_pipeline_narrowed(dtype, name, monkeypatch):
    """SIFTFeature / SIFTFeatureScaleSpace on a half image (64x64, 8 features): detection,
    orientation and description in float32, LAFs float32 (0.9.0's dtype), responses and
    descriptors narrowed once; the image gradient of a projection of all three is the release's
    float32 gradient narrowed once (bitwise, so within half an ulp), finite. Row by row (the
    detector's half response as 0.9.0 computes it) it was tens to hundreds of ulps off (0.9.0:
    NaN in float16); float32 is bitwise the release's."""
    module = _sift_pipeline(name)
    image = _sift_image()
    local_feature = _kornia().feature.integrated.LocalFeature
    with testing.isolated():
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            expected_outputs, expected_gradient = _local_feature_outputs_and_image_gradient(module, image)
        full_outputs, full_gradient = _local_feature_outputs_and_image_gradient(module, image)
        outputs, gradient = _local_feature_outputs_and_image_gradient(module, image.to(dtype))
        with monkeypatch.context() as patch:  # the pipeline row by row: the release's forward
            patch.setattr(local_feature, "forward", kornia_halfpatch.get_original(local_feature.forward))
            _, row_by_row_gradient = _local_feature_outputs_and_image_gradient(module, image.to(dtype))
    assert all(bitwise_equal(g, e) for g, e in zip(full_outputs + (full_gradient,), expected_outputs + (expected_gradient,)))
    lafs, responses, descriptors = outputs
    assert lafs.dtype == torch.float32 and responses.dtype == dtype and descriptors.dtype == dtype
    assert bitwise_equal(lafs, expected_outputs[0])
    assert bitwise_equal(responses, expected_outputs[1].to(dtype))
    assert bitwise_equal(descriptors, expected_outputs[2].to(dtype))
    assert gradient.dtype == dtype and bool(torch.isfinite(gradient).all())
    assert bitwise_equal(gradient, expected_gradient.to(dtype))
    assert _ulps_at_scale(gradient, expected_gradient, dtype) <= 0.5
    row_by_row_finite = bool(torch.isfinite(row_by_row_gradient).all())
    assert not row_by_row_finite or _ulps_at_scale(row_by_row_gradient, expected_gradient, dtype) > 8


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_sift_pipeline_traced_is_the_eager_pipeline(dtype):
    """torch.jit.trace (the unpatched float32 forward traces; it neither scripts nor compiles
    with fullgraph: data-dependent shapes): a pipeline traced on a half image replays the float32
    path, outputs and image gradient bitwise the eager ones; traced on float32, the release's
    traced pipeline's."""
    module = _sift_pipeline("SIFTFeature")
    image = _sift_image()
    with testing.isolated():
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            released = torch.jit.trace(module, (image,), check_trace=False)
            expected = _local_feature_outputs_and_image_gradient(released, image)
        eager = _local_feature_outputs_and_image_gradient(module, image.to(dtype))
        traced_half = torch.jit.trace(module, (image.to(dtype),), check_trace=False)
        traced_full = torch.jit.trace(module, (image,), check_trace=False)
        got_half = _local_feature_outputs_and_image_gradient(traced_half, image.to(dtype))
        got_full = _local_feature_outputs_and_image_gradient(traced_full, image)
    assert all(bitwise_equal(g, e) for g, e in zip(got_half[0] + (got_half[1],), eager[0] + (eager[1],)))
    assert all(bitwise_equal(g, e) for g, e in zip(got_full[0] + (got_full[1],), expected[0] + (expected[1],)))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_laf_orienter_with_a_half_angle_network_keeps_the_release_path(dtype):
    """LAFOrienter with OriNet converted to half (KeyNetAffNetHardNet converted): the row would
    meet the half weights with a float32 patch (the shim raised 'Input type (torch.FloatTensor)
    and weight type (torch.HalfTensor)' where the release runs); it keeps the release's path."""
    K = _kornia()
    torch.manual_seed(5)
    orienter = K.feature.LAFOrienter(32, angle_detector=K.feature.OriNet(False)).eval().to(dtype)
    _, lafs, image = inputs.laf_orienter_call(dtype)
    with testing.isolated():
        got = orienter(lafs, image)
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            expected = orienter(lafs, image)
    assert got.dtype == dtype and bitwise_equal(got, expected)


def test_only_sift_pipelines_holding_no_half_are_promoted():
    """The row's guard: SIFTFeature/SIFTFeatureScaleSpace as built; not converted to half (their
    half buffers would meet the widened image), not the pipelines with networks (a half image
    meets them converted: their networks' half error is the user's choice, docs/training.md)."""
    from kornia_halfpatch.fixes.kornia_dtypes import is_sift_pipeline_holding_no_half

    K = _kornia()
    assert is_sift_pipeline_holding_no_half(K.feature.SIFTFeature(8))
    assert is_sift_pipeline_holding_no_half(K.feature.SIFTFeatureScaleSpace(8))
    assert not is_sift_pipeline_holding_no_half(K.feature.SIFTFeature(8).to(torch.bfloat16))
    gftt = K.feature.integrated.LocalFeature(
        K.feature.MultiResolutionDetector(K.feature.CornerGFTT(), 8) if hasattr(K.feature, "MultiResolutionDetector")
        else K.feature.ScaleSpaceDetector(8, resp_module=K.feature.CornerGFTT()),
        K.feature.LAFDescriptor(K.feature.HardNet(False), patch_size=32, grayscale_descriptor=True))
    assert not is_sift_pipeline_holding_no_half(gftt)


def _release_single_level_oracle(module, image, count, factor):
    """The release's float32 single-level detection, run on the half model's response widened:
    what 0.9.0 computes (response in half, geometry in float32)."""
    half = image.dtype
    wrapper = copy.copy(module)
    half_model = module.model
    wrapper.__dict__["_modules"] = dict(module._modules)
    wrapper._modules["model"] = _WidenedResponse(half_model, half)
    original = kornia_halfpatch.get_original(type(module).detect_features_on_single_level)
    return original(wrapper, image.float(), count, factor)


class _WidenedResponse(torch.nn.Module):
    def __init__(self, model, dtype):
        super().__init__()
        self.model = model
        self.dtype = dtype

    def forward(self, x):
        return self.model(x.to(self.dtype)).float()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_multiresolution_lafs_are_float32_from_the_half_response(dtype):
    """MultiResolutionDetector (KeyNetDetector's base) with a half model: the response in half as
    the release computes it, the LAFs float32: bitwise the release's float32 geometry on that
    response; scores its half scores. Unpatched, bfloat16 centres above 256 px step by 2 px."""
    module, image, count, factor = inputs.single_level_detection_call(dtype)
    # The response model is the user's float16 nn.Conv2d, not kornia's call: on a torch without a
    # half CPU conv2d kernel (2.1) it runs widened in every leg alike; elsewhere this is a no-op.
    users_conv = widening_missing_kernels() if lacks_half_kernel("conv2d", dtype) else contextlib.nullcontext()
    with testing.isolated(), users_conv:
        scores, lafs = module.detect_features_on_single_level(image, count, factor)
        expected_scores, expected_lafs = _release_single_level_oracle(module, image, count, factor)
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            unpatched_scores, unpatched_lafs = module.detect_features_on_single_level(image, count, factor)
    assert lafs.dtype == torch.float32 and bitwise_equal(lafs, expected_lafs)
    assert scores.dtype == dtype and bitwise_equal(scores, unpatched_scores)
    assert bool(torch.isfinite(lafs).all())
    if dtype == torch.bfloat16 and unpatched_lafs.dtype == dtype:  # 0.7.0-0.8.2 (0.8.3: float32 centres)
        assert (unpatched_lafs.float() - lafs).abs().max().item() >= 1.0  # whole pixels lost unpatched


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_keynet_detector_returns_float32_lafs_and_half_responses(dtype):
    """KeyNetDetector (random weights: no download) converted to half: 0.9.0's dtypes."""
    K = _kornia()
    torch.manual_seed(3)
    detector = K.feature.KeyNetDetector(False, num_features=30).to(dtype)
    image = inputs._textured_image(71, 96, 96).to(dtype)
    with testing.isolated():
        lafs, responses = detector(image)
    assert lafs.dtype == torch.float32 and responses.dtype == dtype
    assert bool(torch.isfinite(lafs).all()) and bool(torch.isfinite(responses).all())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=str)
def test_multiresolution_full_precision_is_bitwise_unchanged(dtype):
    module, image, count, factor = inputs.single_level_detection_call(dtype)
    with testing.isolated():
        patched = module.detect_features_on_single_level(image, count, factor)
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            unpatched = module.detect_features_on_single_level(image, count, factor)
    assert all(bitwise_equal(a, b) for a, b in zip(patched, unpatched))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_scale_pyramid_returns_every_output_in_the_image_dtype(dtype):
    """0.7-0.8 return float32 sigmas and pixel distances after the first octave; 0.9.0 the image's dtype."""
    module, image = inputs.scale_pyramid_call(dtype)
    with testing.isolated():
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = module(image.float())
            try:
                unpatched = module(image)
            except (RuntimeError, NotImplementedError):
                unpatched = None
        levels, sigmas, distances = module(image)
    for got, expected in zip((levels, sigmas, distances), reference):
        assert len(got) == len(expected)
        assert all(g.dtype == dtype and bitwise_equal(g, e.to(dtype)) for g, e in zip(got, expected))
    if unpatched is not None and KORNIA < (0, 8, 3):  # 0.8.3 returns the image's dtype already
        assert {t.dtype for t in unpatched[1]} == {dtype, torch.float32}  # the drift the row fixes


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_mkd_descriptor_returns_the_patch_dtype(dtype):
    module, patches = inputs.mkd_call(dtype)
    with testing.isolated():
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            unpatched = module(patches)
            reference = module(patches.float())
        patched = module(patches)
    assert unpatched.dtype == torch.float32
    assert patched.dtype == dtype and bitwise_equal(patched, reference.to(dtype))


# --------------------------------------------------------------------------------------------
# normalize_homography / denormalize_homography with a side of 1


HOMOGRAPHY_NORMALISATIONS = {
    "normalize_homography": (inputs.normalize_homography_call, False),
    "denormalize_homography": (inputs.normalize_homography_call, True),
    "normalize_homography3d": (inputs.normalize_homography3d_call, False),
}


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(HOMOGRAPHY_NORMALISATIONS))
def test_side_of_one_homography_normalisation_is_finite_and_consistent_with_the_pixel_normalisation(name, dtype):
    """A source and destination of height (depth) 1: the release casts 2e14 into half (Inf in
    float16). Patched: finite, and the matrix is the pixel homography conjugated by the half
    pixel normalisations (0.9.0's rule on the side of 1, float32 elsewhere), so every source pixel
    lands where the pixel homography sends it, within the rounding of the half matrix."""
    K = _kornia()
    conversions = K.geometry.conversions
    make_call, denormalize = HOMOGRAPHY_NORMALISATIONS[name]
    homography, size_src, size_dst = make_call(dtype)
    function = lambda *args: getattr(conversions, name)(*args)  # noqa: E731 - looked up in each state
    normaliser = conversions.normal_transform_pixel3d if len(size_src) == 3 else conversions.normal_transform_pixel
    with testing.isolated():
        half = function(homography, size_src, size_dst)
        to_src = normaliser(*size_src, dtype=dtype)[0].double()
        to_dst = normaliser(*size_dst, dtype=dtype)[0].double()
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            unpatched = unpatched_product(lambda: function(homography, size_src, size_dst), dtype)
    assert half.dtype == dtype and bool(torch.isfinite(half).all())
    if dtype == torch.float16 and unpatched is not None:
        assert not bool(torch.isfinite(unpatched).all())
    axes = len(size_src)
    grids = torch.meshgrid(*[torch.arange(float(side)) for side in reversed(size_src)], indexing="ij")
    pixels = torch.stack([g.flatten() for g in grids] + [torch.ones(grids[0].numel())]).double()
    given = homography[0].double()
    if denormalize:  # the given matrix maps normalised coordinates; the result maps pixels
        mapped, expected = half[0].double() @ pixels, torch.inverse(to_dst) @ given @ to_src @ pixels
    else:  # the given matrix maps pixels; the result maps normalised coordinates
        mapped, expected = torch.inverse(to_dst) @ half[0].double() @ to_src @ pixels, given @ pixels
    step = torch.finfo(dtype).eps
    scale = expected[:axes].abs().max().item()
    torch.testing.assert_close(mapped[:axes] / mapped[axes:], expected[:axes] / expected[axes:],
                               rtol=0, atol=8 * step * scale)


def test_blur_pool_float16_is_all_zero_unpatched_and_the_release_float32_narrowed_patched():
    """The Pascal kernel of side 9 is normalised by 4^8 = 65536, Inf in float16: every weight 0.
    A torch without a float16 CPU convolution (2.1) stops the release at conv2d (max_blur_pool2d
    at max_pool2d before it): there the zero weights are shown with the ops that lack a kernel run
    in float32 on the half values."""
    image = half_cases.blur_pool_image()
    no_conv = lacks_half_kernel("conv2d", torch.float16)
    for name in ("blur_pool2d", "max_blur_pool2d"):
        call = half_cases.blur_pool_calls()[name]
        with testing.isolated(only=()):
            if no_conv:
                with expect_missing_kernel_error(match="conv2d|max_pool2d"):
                    call(image.half(), 9)
            with widening_missing_kernels() if no_conv else contextlib.nullcontext():
                unpatched = call(image.half(), 9)
            reference = call(image, 9)
        with testing.isolated(only=["kornia_dtypes"]):
            patched = call(image.half(), 9)
        assert bool((unpatched == 0).all()) and bool((reference > 0.1).all()), name
        assert patched.dtype == torch.float16 and bitwise_equal(patched, reference.half()), name


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_blur_pool_in_half_matches_kornia_090(dtype):
    """0.9.0 builds the kernel in float32: the same float32 pooling narrowed once, up to the
    order of the convolution's sums (one half step at most)."""
    expected = oracle.kornia090_outputs("half_cases")
    image = half_cases.blur_pool_image().to(dtype)
    dtype_name = str(dtype).replace("torch.", "")
    with testing.isolated(only=["kornia_dtypes"]):
        for name, call in half_cases.blur_pool_calls().items():
            for k in half_cases.BLUR_POOL_KERNELS:
                want = expected[f"blur_pool/{name}/{k}/{dtype_name}"]
                got = call(image, k)
                assert got.dtype == want.dtype == dtype and got.shape == want.shape, (name, k)
                step = torch.finfo(dtype).eps * want.float().abs().clamp_min(2 ** -14)
                assert bool(((got.float() - want.float()).abs() <= step).all()), (name, k)


def _hls_gradient(x):
    return half_cases.input_gradient(_kornia().color.rgb_to_hls, x)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_rgb_to_hls_half_gradient_on_gray_pixels_is_finite_and_0_9_0s(dtype):
    """On gray pixels the release's float32 hue gradient is (pi/3)/eps-scaled (eps=1e-8), past
    float16's range: the float32 backward narrowed is Inf. The half path divides by 1 where the
    chroma is 0 (0.9.0's rule): the hue is the same, its gradient 0.9.0's."""
    x = half_cases.gray_pixels()
    with testing.isolated(only=["kornia_dtypes"]):
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            release = _hls_gradient(x)
            release_forward = _kornia().color.rgb_to_hls(x)
        got = _hls_gradient(x.to(dtype))
        forward = _kornia().color.rgb_to_hls(x.to(dtype))
    assert release.abs().max().item() > 1e8 > torch.finfo(torch.float16).max
    assert bitwise_equal(forward, release_forward.to(dtype))
    expected = oracle.kornia090_outputs("half_cases")["grad/rgb_to_hls"]
    assert got.dtype == dtype and bool(torch.isfinite(got).all())
    # within 2 half steps of 0.9.0's float32 gradient narrowed (the release's float32 arithmetic
    # and 0.9.0's may differ in float32's last bits)
    step = torch.finfo(dtype).eps * expected.abs()
    assert bool(((got.float() - expected.to(dtype).float()).abs() <= 2 * step).all())


def test_rgb_to_hls_float32_forward_and_backward_are_bitwise_the_release():
    x = half_cases.gray_pixels()
    textured = torch.rand(x.shape, generator=torch.Generator().manual_seed(9))
    for image in (x, textured, x.double()):
        with testing.isolated(only=["kornia_dtypes"]):
            with kornia_halfpatch.unpatched(["kornia_dtypes"]):
                expected = (_kornia().color.rgb_to_hls(image), _hls_gradient(image))
            got = (_kornia().color.rgb_to_hls(image), _hls_gradient(image))
        assert all(bitwise_equal(g, e) for g, e in zip(got, expected))


def test_rgb_to_hls_half_gradient_off_gray_is_the_release_float32_narrowed():
    """Where no pixel is gray, the half path is the release's arithmetic: forward and backward
    are its float32 results narrowed, bitwise."""
    image = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(10)).bfloat16().float()
    with testing.isolated(only=["kornia_dtypes"]):
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            expected = (_kornia().color.rgb_to_hls(image), _hls_gradient(image))
        for dtype in HALF_DTYPES:
            got = (_kornia().color.rgb_to_hls(image.to(dtype)), _hls_gradient(image.to(dtype)))
            assert all(bitwise_equal(g, e.to(dtype)) for g, e in zip(got, expected)), dtype


def _ms_ssim_value_and_gradient(module, first, second):
    leaf = first.clone().requires_grad_(True)
    loss = module(leaf, second)
    (gradient,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), gradient


def _ulps_off(got, reference, dtype):
    """|got - reference| in units of the half dtype's spacing at the reference's magnitude."""
    spacing = torch.finfo(dtype).eps * 2.0 ** torch.floor(torch.log2(reference.abs().clamp_min(1e-30)))
    return (got.float() - reference).abs() / spacing


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_ms_ssim_half_backward_is_the_release_float32_backward_narrowed(dtype):
    """The local (co)variances cancel in half; the release's bfloat16 backward puts input
    gradients tens of half steps off. Patched, for a float32 module (which the release refuses
    with half images; 0.9.0 accepts): the release's float32 loss and gradient on the widened
    images, each narrowed once, bitwise. A module converted to the half dtype (default sigmas)
    computes with its masks as built, as kornia 0.9.0 does (its converted gradient is the float32
    module's narrowed within 0.52 half ulps): bitwise the float32 module's narrowed; its rounded
    masks widened as inputs would put the gradient 435 bfloat16 ulps off (8.4 at the gradient's
    scale). Custom sigmas: the widened masks renormalised to sum 1, within 2 half steps."""
    K = _kornia()
    module, first, second = inputs.ms_ssim_call(torch.float32)
    converted = K.losses.MS_SSIMLoss().to(dtype)
    custom = K.losses.MS_SSIMLoss(sigmas=[0.5, 1.0, 2.0, 4.0, 7.0])
    custom_converted = copy.deepcopy(custom).to(dtype)
    with testing.isolated(only=["kornia_dtypes"]):
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = _ms_ssim_value_and_gradient(module, first, second)
            widened_as_inputs = _ms_ssim_value_and_gradient(copy.deepcopy(converted).float(), first, second)
            custom_reference = _ms_ssim_value_and_gradient(custom, first, second)
            renormalised = copy.deepcopy(custom)
            masks = custom_converted._g_masks.float()
            renormalised._g_masks = masks / masks.sum(dim=[1, 2, 3], keepdim=True)
            custom_converted_reference = _ms_ssim_value_and_gradient(renormalised, first, second)
            if lacks_half_kernel("conv2d", dtype):
                # torch 2.1 (float16): the release stops at its first convolution.
                with expect_missing_kernel_error(match="conv2d"):
                    _ms_ssim_value_and_gradient(converted, first.to(dtype), second.to(dtype))
            else:
                unpatched = _ms_ssim_value_and_gradient(converted, first.to(dtype), second.to(dtype))
        got = _ms_ssim_value_and_gradient(module, first.to(dtype), second.to(dtype))
        got_converted = _ms_ssim_value_and_gradient(converted, first.to(dtype), second.to(dtype))
        got_custom = _ms_ssim_value_and_gradient(custom_converted, first.to(dtype), second.to(dtype))
    assert all(g.dtype == dtype for g in got + got_converted + got_custom)
    assert all(bitwise_equal(g, r.to(dtype)) for g, r in zip(got, reference))
    assert all(bitwise_equal(g, r.to(dtype)) for g, r in zip(got_converted, reference))
    assert _ulps_off(got_converted[1], reference[1], dtype).max().item() <= 0.5
    assert all(bitwise_equal(g, r.to(dtype)) for g, r in zip(got_custom, custom_converted_reference))
    assert _ulps_off(got_custom[1], custom_reference[1], dtype).max().item() <= 2
    if dtype == torch.bfloat16:
        # the masks' own rounding, were they inputs: what 0.9.0 does not do either
        assert _ulps_off(widened_as_inputs[1].to(dtype), reference[1], dtype).max().item() > 40
        # the failure: the release's own bfloat16 gradient
        assert _ulps_off(unpatched[1], reference[1], dtype).max().item() > 40


def test_ms_ssim_full_precision_and_script_are_the_release():
    K = _kornia()
    module, first, second = inputs.ms_ssim_call(torch.float32)
    with testing.isolated(only=["kornia_dtypes"]):
        for dtype in FULL_DTYPES:
            typed = copy.deepcopy(module).to(dtype)
            with kornia_halfpatch.unpatched(["kornia_dtypes"]):
                expected = _ms_ssim_value_and_gradient(typed, first.to(dtype), second.to(dtype))
            got = _ms_ssim_value_and_gradient(typed, first.to(dtype), second.to(dtype))
            assert all(bitwise_equal(g, e) for g, e in zip(got, expected)), dtype
        scripted = torch.jit.script(K.losses.MS_SSIMLoss())
        assert bitwise_equal(scripted(first, second), module(first, second))
        for dtype in HALF_DTYPES:  # the scripted half path is the eager one
            assert bitwise_equal(scripted(first.to(dtype), second.to(dtype)), module(first.to(dtype), second.to(dtype)))
            converted = K.losses.MS_SSIMLoss().to(dtype)  # masks as built, scripted too
            assert bitwise_equal(torch.jit.script(converted)(first.to(dtype), second.to(dtype)),
                                 converted(first.to(dtype), second.to(dtype)))


@pytest.mark.slow
def test_ms_ssim_converted_module_compiles_with_fullgraph():
    """torch.compile(fullgraph=True) of a converted module (the release's float32 module compiles):
    the masks-as-built choice is a tensor select, not a data-dependent branch; backend="eager"
    checks dynamo's capture, the values bitwise the eager half path."""
    K = _kornia()
    _, first, second = inputs.ms_ssim_call(torch.float32)
    with testing.isolated(only=["kornia_dtypes"]):
        for dtype in HALF_DTYPES:
            converted = K.losses.MS_SSIMLoss().to(dtype)
            torch._dynamo.reset()
            compiled = torch.compile(converted, fullgraph=True, backend="eager")
            assert bitwise_equal(compiled(first.to(dtype), second.to(dtype)), converted(first.to(dtype), second.to(dtype)))


def _psnr_value_and_gradient(first, second, max_val):
    leaf = first.clone().requires_grad_(True)
    value = _kornia().metrics.psnr(leaf, second, max_val)
    (gradient,) = torch.autograd.grad(value, leaf)
    return value.detach(), gradient


@pytest.mark.parametrize("scale", [255.0, 1000.0])
def test_psnr_float16_gradient_is_the_release_float32_gradient_narrowed(scale):
    """Differences past 256 square past 65504: unpatched the float16 mse is Inf (PSNR -Inf, every
    gradient NaN). For 8-bit-range images the gradient (about 1e-5 to 1e-4) is lost in float16
    arithmetic. Patched: the float32 value and gradient, narrowed once."""
    generator = torch.Generator().manual_seed(79)
    first, second = (torch.randint(0, int(scale) + 1, (1, 3, 32, 32), generator=generator).float() for _ in range(2))
    with testing.isolated(only=["kornia_dtypes"]):
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            reference = _psnr_value_and_gradient(first, second, scale)
            try:
                unpatched = _psnr_value_and_gradient(first.half(), second.half(), scale)
            except RuntimeError as error:  # torch < 2.5 has no float16 CPU mse backward: fails too
                assert "not implemented for 'Half'" in str(error), error
                unpatched = None
        got = _psnr_value_and_gradient(first.half(), second.half(), scale)
    assert bool(torch.isfinite(reference[1]).all()) and reference[1].abs().max().item() < torch.finfo(torch.float16).max
    assert all(bitwise_equal(g, r.half()) for g, r in zip(got, reference))
    if unpatched is not None:
        assert not bitwise_equal(unpatched[1], reference[1].half())
        if scale > 256:
            assert not bool(torch.isfinite(unpatched[1]).any())


# --------------------------------------------------------------------------------------------
# Two-view errors at pixel scale (640x480, focal length 500): the half gradients were NaN or tens
# to hundreds of ulps off; patched, each is the release's float32 gradient narrowed once, Inf
# (never NaN) where that gradient is beyond float16's range (F's gradient: pixel coordinates
# squared over line norms, 1e7 here).


def _two_view_calls():
    K = _kornia()
    epipolar, homography = K.geometry.epipolar, K.geometry.homography
    return {
        "sampson_epipolar_distance": lambda x1, x2, F, H: epipolar.sampson_epipolar_distance(x1, x2, F),
        "sampson_epipolar_distance, not squared": lambda x1, x2, F, H: epipolar.sampson_epipolar_distance(x1, x2, F, False),
        "symmetrical_epipolar_distance": lambda x1, x2, F, H: epipolar.symmetrical_epipolar_distance(x1, x2, F),
        "compute_correspond_epilines": lambda x1, x2, F, H: epipolar.compute_correspond_epilines(x1, F),
        "oneway_transfer_error": lambda x1, x2, F, H: homography.oneway_transfer_error(x1, x2, H),
        "symmetric_transfer_error": lambda x1, x2, F, H: homography.symmetric_transfer_error(x1, x2, H),
    }


def _projected_gradients(call, tensors):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = call(*leaves)
    projection = torch.randint(-16, 17, out.shape, generator=torch.Generator().manual_seed(2021)).float() / 16
    grads = torch.autograd.grad((out.float() * projection).sum(), leaves, allow_unused=True)
    return [g if g is not None else torch.zeros_like(leaf) for g, leaf in zip(grads, leaves)]


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(_two_view_calls()))
def test_two_view_half_gradients_at_pixel_scale_are_the_release_float32_narrowed(name, dtype):
    call = _two_view_calls()[name]
    tensors = inputs.two_view_scene(dtype)
    with testing.isolated(only=["kornia_dtypes"]):
        got = _projected_gradients(call, tensors)
        with kornia_halfpatch.unpatched(["kornia_dtypes"]):
            wide = _projected_gradients(call, [t.float() for t in tensors])
    for g, w in zip(got, wide):
        assert g.dtype == dtype
        assert bool(torch.isfinite(w).all())
        assert not bool(torch.isnan(g).any()), name
        # The float32 gradient narrowed once: Inf exactly where it passes the half range.
        assert bitwise_equal(g, w.to(dtype)), name


def test_a_release_compiling_sampson_with_torch_jit_script_gets_its_row():
    """0.8.3 compiles sampson_epipolar_distance with @torch.jit.script: the row is generated from
    the ScriptFunction's own Python function and calls the compiled original; elsewhere the
    original is a plain function. Either way the installed replacement is a plain function that
    pickles by reference and scripts."""
    import pickle

    with testing.isolated(only=["kornia_dtypes"]):
        installed = _kornia().geometry.epipolar.sampson_epipolar_distance
        original = kornia_halfpatch.get_original(installed)
        assert original is not None and original is not installed
        assert type(installed).__name__ == "function"
        assert installed.__module__ == "kornia.geometry.epipolar._metrics"
        assert pickle.loads(pickle.dumps(installed)) is installed
        x1, x2, F, _ = inputs.two_view_scene(torch.float32)
        assert bitwise_equal(torch.jit.script(installed)(x1, x2, F), original(x1, x2, F))


def test_two_view_float16_gradients_are_nan_unpatched():
    """What the rows fix: symmetrical_epipolar_distance and compute_correspond_epilines divide by
    squared line norms that underflow float16 at pixel scale (NaN point gradients)."""
    calls = _two_view_calls()
    tensors = inputs.two_view_scene(torch.float16)
    with testing.isolated(only=()):
        for name in ("symmetrical_epipolar_distance", "compute_correspond_epilines"):
            if lacks_half_kernel("bmm", torch.float16):  # torch 2.1: the release cannot even run
                with expect_missing_kernel_error():
                    _projected_gradients(calls[name], tensors)
                continue
            points_gradient = _projected_gradients(calls[name], tensors)[0]
            assert not bool(torch.isfinite(points_gradient).all()), name


def test_two_view_float32_gradient_of_f_passes_float16s_range():
    """The honest overflow: F's float32 gradient at pixel scale is beyond 65504 (docs/training.md),
    so its float16 gradient has Inf entries; the points' gradients are finite."""
    tensors = inputs.two_view_scene(torch.float16)
    with testing.isolated(only=["kornia_dtypes"]):
        x1, x2, F, H = _projected_gradients(_two_view_calls()["symmetrical_epipolar_distance"], tensors)
    assert bool(torch.isinf(F).any()) and bool(torch.isfinite(x1).all()) and bool(torch.isfinite(x2).all())
