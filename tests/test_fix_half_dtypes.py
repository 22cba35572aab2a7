"""half_dtypes: float16/bfloat16 accepted, finite and right (issue 10, first part).

Oracle: the installed release's float32 computation on the same (half-representable) inputs,
narrowed to kornia 0.9.0's output dtype (measured in the 0.9.0 env: the input's half dtype for
every call here, float32 for apply_colormap's colours), computed in the same run with the fix
reverted. float32/float64: bitwise the unpatched release."""

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import probe_inputs as inputs
from kornia_halfpatch import testing
from support import FULL_DTYPES, HALF_DTYPES, UPSTREAM_FIXED, bitwise_equal

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
    }
    return cases


def _seeded(module, image):
    torch.manual_seed(57)
    return module(image)


# 0.9.0's output dtype where it is not the input's half dtype.
FLOAT32_OUTPUTS = {"apply_colormap", "image_histogram2d"}
# Not the release's float32 narrowed, by a documented rule (docs/fixes/half_dtypes.md).
OWN_RULE = {"normal_transform_pixel"}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


CASES = sorted(api_cases())


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(set(CASES) - OWN_RULE))
def test_public_api_in_half_is_the_release_float32_narrowed(name, dtype):
    case = api_cases()[name]
    with testing.isolated():
        with kornia_halfpatch.unpatched(["half_dtypes"]):
            reference = _tensors(case(torch.float32))
        got = _tensors(case(dtype))
    expected_dtype = torch.float32 if name in FLOAT32_OUTPUTS else dtype
    assert len(got) == len(reference)
    for g, r in zip(got, reference):
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
def test_public_api_full_precision_is_bitwise_unchanged(name, dtype):
    case = api_cases()[name]
    with testing.isolated():
        patched = _tensors(case(dtype))
        with kornia_halfpatch.unpatched(["half_dtypes"]):
            unpatched = _tensors(case(dtype))
    assert len(patched) == len(unpatched)
    assert all(bitwise_equal(a, b) for a, b in zip(patched, unpatched))


def test_promoted_functions_are_bitwise_the_release_float32_narrowed():
    """Where the public function is the row itself, no tolerance: bitwise."""
    for name in ("rgb_to_hls", "rgb_to_hsv", "hsv_to_rgb", "equalize", "ssim", "get_tps_transform",
                 "get_gaussian_discrete_kernel1d tensor sigma", "get_gaussian_discrete_kernel1d dtype"):
        case = api_cases()[name]
        with testing.isolated(only=["half_dtypes"]):
            with kornia_halfpatch.unpatched(["half_dtypes"]):
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
    with testing.isolated(only=["half_dtypes"]):
        assert bool(torch.isfinite(K.color.rgb_to_hls(gray)).all())
        assert bool(torch.isfinite(K.enhance.adjust_hue(gray, 0.2)).all())


def test_discrete_gaussian_kernel_is_finite_in_float16():
    K = _kornia()
    with testing.isolated(only=()):
        unpatched = K.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=torch.float16)
    with testing.isolated(only=["half_dtypes"]):
        patched = K.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=torch.float16)
    assert not bool(torch.isfinite(unpatched).all())
    assert bool(torch.isfinite(patched).all()) and patched.dtype == torch.float16


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_normal_transform_pixel_single_row_is_finite_and_maps_the_pixel_like_float32(dtype):
    """Rule: a side of 1 has scale 1 in half (2/eps is Inf in float16); every other entry is the
    release's float32 narrowed, and the single pixel's coordinate 0 maps to -1 as in float32."""
    K = _kornia()
    with testing.isolated(only=["half_dtypes"]):
        half = K.geometry.conversions.normal_transform_pixel(1, 5, dtype=dtype)
        with kornia_halfpatch.unpatched(["half_dtypes"]):
            reference = K.geometry.conversions.normal_transform_pixel(1, 5, dtype=torch.float32)
    assert half.dtype == dtype and bool(torch.isfinite(half).all())
    assert half[0, 1, 1].item() == 1.0
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1, 1] = False
    assert bitwise_equal(half[0][mask], reference[0][mask].to(dtype))
    pixel = torch.tensor([2.0, 0.0, 1.0])
    assert torch.equal((half[0].float() @ pixel), (reference[0] @ pixel))


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
    with testing.isolated(only=["half_dtypes"]):
        with pytest.raises(TypeError) as patched:
            K.augmentation.RandomAffine(10.0, p=1.0)(image)
    assert str(patched.value) == str(unpatched.value)


@pytest.mark.parametrize("name", ["rgb_to_grayscale", "canny", "apply_colormap"])
def test_bfloat16_accepted_where_it_was_refused(name):
    case = api_cases()[name]
    with testing.isolated(only=["half_dtypes"]):
        assert all(bool(torch.isfinite(t).all()) for t in _tensors(case(torch.bfloat16)))


def test_script_holds_for_a_scriptable_row():
    K = _kornia()
    with testing.isolated(only=["half_dtypes"]):
        function = K.color.rgb_to_hsv
        scripted = torch.jit.script(function)
        for dtype in HALF_DTYPES:
            args = inputs.gray_patch_image(dtype)
            assert bitwise_equal(scripted(*args), function(*args))
