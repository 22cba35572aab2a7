"""Property-based tests of the patched functions (hypothesis).

For every patched function (create_meshgrid/create_meshgrid3d, SOSNet/HardNet/SIFTDescriptor,
extract_patches_simple/extract_patches_from_pyramid, kornia's grid_sample paths warp_affine,
rotate and remap, ConvQuadInterp3d where its solver is patched) over shapes (empty batches, one
pixel, odd sizes), memory layouts (channels-last, non-contiguous, views with a storage offset),
dtypes, values (NaN, +-Inf, subnormals, huge) and devices (cpu, meta):

* where the release's own computation raises, the patched function raises the same exception
  type; for half inputs "the release's own computation" is the one on inputs widened to float32
  (an exception only the half run raises is the bug the fix removes);
* where it does not raise, neither does the patched one, and float32/float64 results are bitwise
  the unpatched ones; half results follow the fix's documented rule (the float32 result narrowed
  once, or range/finiteness where the rule is not a single narrowing).

The unpatched results come from ``kornia_halfpatch.get_original`` (the function object the
release defined) or, for functions that reach a patched callee through module globals, from the
same call inside ``kornia_halfpatch.unpatched([fix])``.

Hypothesis profile (CI-sized, reproducible): ``max_examples`` 30 per property (fewer where one
example costs 0.1 s or more), ``deadline=None`` (CPU timing on shared machines is noise),
``derandomize=True`` (the same examples on every run), no example database. Set
``KORNIA_HALFPATCH_EXAMPLES_SCALE=10`` locally to run ten times as many examples.
"""

import math
import os
import warnings

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import kornia
import kornia.feature
import kornia_halfpatch
from kornia_halfpatch import get_original, is_patched, unpatched
from support import bitwise_equal, grid_module, needs_old_kornia

pytestmark = needs_old_kornia

SCALE = float(os.environ.get("KORNIA_HALFPATCH_EXAMPLES_SCALE", "1"))


def profile(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


HALF = (torch.float16, torch.bfloat16)
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# NaN, +-Inf, signed zeros, a float32 subnormal, a float16 subnormal, float16's largest finite,
# past float16's range, and values past every half type (and float32, for the last one).
SPECIAL_VALUES = (
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1e-40,
    3e-8,
    65504.0,
    7e4,
    1e30,
    -1e30,
    1e300,
)

LAYOUTS = ("contiguous", "channels_last", "transposed", "offset_view", "strided_view")


@pytest.fixture(scope="module", autouse=True)
def shim_applied():
    with kornia_halfpatch.patched():
        yield


@pytest.fixture(autouse=True)
def quiet_kornia():
    # kornia's own UserWarnings (align_corners defaults, std_mean dof) are not under test here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --------------------------------------------------------------------------------------------
# Strategies and helpers


def filled(draw, shape, dtype, low=0.0, high=1.0, specials=True) -> torch.Tensor:
    """A tensor of ``shape``: uniform in [low, high) from a drawn seed, with a few drawn
    positions set to drawn special values."""
    seed = draw(st.integers(0, 2**16))
    values = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    values = values * (high - low) + low
    count = values.numel()
    if specials and count and draw(st.booleans()):
        flat = values.view(-1)
        for position in draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=3)):
            flat[position] = draw(st.sampled_from(SPECIAL_VALUES))
    return values.to(dtype)


def arrange(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout."""
    if layout == "channels_last" and tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    if layout == "transposed" and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "offset_view":
        storage = torch.full((tensor.numel() + 7,), -3.0, dtype=tensor.dtype, device=tensor.device)
        view = storage[7:].view(tensor.shape)
        view.copy_(tensor)
        return view
    if layout == "strided_view" and tensor.dim() >= 1:
        wider = torch.full((*tensor.shape[:-1], 2 * tensor.shape[-1]), -3.0, dtype=tensor.dtype, device=tensor.device)
        view = wider[..., ::2]
        view.copy_(tensor)
        return view
    return tensor.contiguous()


def outcome(run):
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - compared between patched and unpatched
        return exc


def assert_same_failure(reference, got) -> bool:
    """True when the reference raised (and the patched call raised the same type)."""
    if isinstance(reference, Exception):
        assert isinstance(got, type(reference)), (
            f"the release raises {type(reference).__name__}: {reference}; patched: "
            f"{type(got).__name__}{': ' + str(got) if isinstance(got, Exception) else ''}"
        )
        return True
    assert not isinstance(got, Exception), f"patched raised {type(got).__name__}: {got}; the release does not"
    return False


def widened(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in HALF else dtype


def the_patched(function):
    assert is_patched(function), f"{function.__qualname__} is not patched"
    return function


# --------------------------------------------------------------------------------------------
# create_meshgrid / create_meshgrid3d

SIZES = st.one_of(st.integers(-1, 9), st.sampled_from([1, 2, 255, 257, 300, 2049]))
GRID_DTYPES = st.sampled_from([None, *FLOATS, torch.int64])
# Integers of a pixel ramp are exact in bfloat16 up to 256 and in float16 up to 2048.
EXACT_INTEGERS = {torch.float16: 2048, torch.bfloat16: 256}


def check_grid(patched, sizes, normalized, device, dtype, default_dtype):
    original = get_original(patched)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default_dtype)
    try:
        effective = dtype if dtype is not None else default_dtype
        got = outcome(lambda: patched(*sizes, normalized, device, dtype))
        if effective in HALF:
            reference = outcome(lambda: original(*sizes, normalized, device, torch.float32))
        else:
            reference = outcome(lambda: original(*sizes, normalized, device, dtype))
    finally:
        torch.set_default_dtype(previous)
    if assert_same_failure(reference, got):
        return
    assert got.shape == reference.shape and got.device == reference.device
    if effective not in HALF:
        assert got.dtype == reference.dtype
        if device.type != "meta":
            assert bitwise_equal(got, reference), "float32/float64/integer grid changed"
        return
    assert got.dtype == effective
    if device.type == "meta":
        return
    if normalized or max(sizes) <= EXACT_INTEGERS[effective]:
        assert bitwise_equal(got, reference.to(effective)), "half grid is not the float32 grid narrowed once"
    else:
        assert bool(torch.isfinite(got).all())


@pytest.mark.slow
@profile(40)
@given(
    height=SIZES,
    width=SIZES,
    normalized=st.booleans(),
    device=st.sampled_from(["cpu", "meta"]),
    dtype=GRID_DTYPES,
    default_dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
)
def test_create_meshgrid(height, width, normalized, device, dtype, default_dtype):
    patched = the_patched(grid_module().create_meshgrid)
    check_grid(patched, (height, width), normalized, torch.device(device), dtype, default_dtype)


@pytest.mark.slow
@profile(30)
@given(
    depth=st.integers(-1, 5),
    height=SIZES,
    width=st.integers(0, 9),
    normalized=st.booleans(),
    device=st.sampled_from(["cpu", "meta"]),
    dtype=GRID_DTYPES,
    default_dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
)
def test_create_meshgrid3d(depth, height, width, normalized, device, dtype, default_dtype):
    patched = the_patched(grid_module().create_meshgrid3d)
    check_grid(patched, (depth, height, width), normalized, torch.device(device), dtype, default_dtype)


# --------------------------------------------------------------------------------------------
# extract_patches_simple / extract_patches_from_pyramid


@st.composite
def laf_cases(draw):
    # Empty batches, PS < 1 and fewer images than LAF batches are known divergences (see
    # known_laf_divergence), drawn rarely so that most examples test something.
    B = draw(st.sampled_from([1, 2, 1, 2, 0]))
    N = draw(st.sampled_from([1, 2, 3, 1, 2, 3, 0]))
    CH = draw(st.integers(1, 3))
    H = draw(st.sampled_from([1, 2, 3, 5, 8, 13, 16, 17, 31, 40]))
    W = draw(st.sampled_from([1, 2, 3, 5, 8, 13, 16, 17, 31, 40]))
    PS = draw(st.sampled_from([3, 4, 5, 7, 8, 1]))  # PS <= 2 makes the release's pyramid raise
    img_dtype = draw(st.sampled_from(FLOATS))
    laf_dtype = draw(st.sampled_from([torch.float32, torch.float64, img_dtype]))
    # The image may hold more images than there are LAF batches (the release ignores the rest).
    img_batch = B + draw(st.sampled_from([0, 0, 1]))
    img = arrange(filled(draw, (img_batch, CH, H, W), img_dtype), draw(st.sampled_from(LAYOUTS)))
    centre = filled(draw, (B, N, 2), torch.float64, specials=False) * torch.tensor([W, H], dtype=torch.float64)
    scale = filled(draw, (B, N, 1, 1), torch.float64, 0.3, 2.0 * max(H, W), specials=False)
    angle = filled(draw, (B, N), torch.float64, 0.0, 2 * math.pi, specials=False)
    linear = torch.stack([torch.stack([angle.cos(), -angle.sin()], -1), torch.stack([angle.sin(), angle.cos()], -1)], -2)
    laf = torch.cat([linear * scale, centre.unsqueeze(-1)], dim=-1)
    if laf.numel() and draw(st.booleans()):
        flat = laf.view(-1)
        for position in draw(st.lists(st.integers(0, laf.numel() - 1), min_size=1, max_size=2)):
            flat[position] = draw(st.sampled_from(SPECIAL_VALUES))
    laf = arrange(laf.to(laf_dtype), draw(st.sampled_from(["contiguous", "transposed", "offset_view"])))
    device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
    return img.to(device), laf.to(device), PS, draw(st.booleans())


def sampling_dtype(img: torch.Tensor, laf: torch.Tensor) -> torch.dtype:
    return widened(torch.promote_types(img.dtype, laf.dtype))


def known_laf_divergence(img, laf, PS, reference) -> bool:
    """Inputs where the patched functions are known to differ from the release in float32: empty
    batches (the release raises, the patched ones return empty patches), fewer images than LAF
    batches and PS < 1 (another exception type), and the release's pyramid reaching a level of
    2 pixels or less (its pyrdown raises; the patched one builds only the levels LAFs use). Each
    is a failing case of ``test_laf_patches_fail_where_the_release_fails``; the properties
    explore the rest."""
    if laf.shape[0] == 0 or laf.shape[1] == 0 or img.shape[0] < laf.shape[0] or PS < 1:
        return True
    return isinstance(reference, RuntimeError) and "Padding size should be less than" in str(reference)


def check_patches(patched, img, laf, PS, normalize):
    original = get_original(patched)
    dtype = sampling_dtype(img, laf)
    reference = outcome(lambda: original(img.to(dtype), laf.to(dtype), PS, normalize))
    assume(not known_laf_divergence(img, laf, PS, reference))
    got = outcome(lambda: patched(img, laf, PS, normalize))
    if assert_same_failure(reference, got):
        return
    assert got.dtype == img.dtype and got.shape == reference.shape and got.device == img.device
    if img.device.type == "meta":
        return
    # Frames the release's own normalization makes non-finite get zero patches (documented);
    # every other frame is the release's result (on widened inputs, narrowed once for half).
    from kornia.feature.laf import normalize_laf

    nlaf = normalize_laf(laf.to(dtype), img.to(dtype)) if normalize else laf.to(dtype)
    invalid = ~torch.isfinite(nlaf).all(dim=-1).all(dim=-1)
    assert bool((got[invalid] == 0).all()), "a non-finite LAF did not give a zero patch"
    assert bitwise_equal(got[~invalid], reference[~invalid].to(img.dtype)), "patches differ from the release's"


@pytest.mark.slow
@profile(40)
@given(case=laf_cases())
def test_extract_patches_simple(case):
    check_patches(the_patched(kornia.feature.extract_patches_simple), *case)


@pytest.mark.slow
@profile(40)
@given(case=laf_cases())
def test_extract_patches_from_pyramid(case):
    check_patches(the_patched(kornia.feature.extract_patches_from_pyramid), *case)


LAF = torch.tensor([[[[2.0, 0.0, 5.0], [0.0, 2.0, 5.0]]]]).repeat(2, 1, 1, 1)
RELEASE_FAILURES = {
    "empty_batch": (torch.rand(0, 1, 10, 10), LAF[:0], 4),
    "no_lafs": (torch.rand(2, 1, 10, 10), LAF[:, :0], 4),
    "empty_batch_of_one_pixel_images": (torch.rand(0, 1, 1, 1), LAF[:0, :0], 1),
    "fewer_images_than_laf_batches": (torch.rand(1, 1, 10, 10), LAF, 4),
    "patch_size_0": (torch.rand(2, 1, 10, 10), LAF, 0),
    "pyramid_down_to_two_pixels": (torch.rand(2, 1, 10, 10), LAF, 2),
}


@pytest.mark.parametrize("name", ["extract_patches_simple", "extract_patches_from_pyramid"])
@pytest.mark.parametrize("case", list(RELEASE_FAILURES))
def test_laf_patches_fail_where_the_release_fails(name, case):
    # float32 inputs: whatever the release does (raise, and with which type) is the contract.
    img, laf, PS = RELEASE_FAILURES[case]
    patched = the_patched(getattr(kornia.feature, name))
    reference = outcome(lambda: get_original(patched)(img, laf, PS, True))
    got = outcome(lambda: patched(img, laf, PS, True))
    if not assert_same_failure(reference, got):
        assert bitwise_equal(got, reference)


# --------------------------------------------------------------------------------------------
# kornia's grid_sample paths: warp_affine, rotate, remap


@st.composite
def warp_cases(draw):
    B = draw(st.integers(0, 2))
    C = draw(st.integers(1, 3))
    H = draw(st.one_of(st.integers(1, 9), st.integers(10, 48)))
    W = draw(st.one_of(st.integers(1, 9), st.integers(10, 48)))
    dtype = draw(st.sampled_from(FLOATS))
    finite = draw(st.booleans())  # half range checks need finite inputs
    img = arrange(filled(draw, (B, C, H, W), dtype, specials=not finite), draw(st.sampled_from(LAYOUTS)))
    path = draw(st.sampled_from(["warp_affine", "rotate", "remap"]))
    mode = draw(st.sampled_from(["bilinear", "nearest"]))
    padding = draw(st.sampled_from(["zeros", "border", "reflection"]))
    align = draw(st.booleans())
    from kornia.geometry import transform

    if path == "rotate":
        angle = filled(draw, (B,), dtype, -180.0, 180.0, specials=not finite)
        return lambda: transform.rotate(img, angle, mode=mode, padding_mode=padding, align_corners=align), img, finite
    if path == "warp_affine":
        # the identity built in float32 and cast (exact): torch 2.1 has no bfloat16 CPU eye
        matrix = filled(draw, (B, 2, 3), dtype, -2.0, 2.0, specials=not finite) + torch.eye(2, 3).to(dtype)
        size = (draw(st.integers(1, 24)), draw(st.integers(1, 24)))
        return (
            lambda: transform.warp_affine(img, matrix, size, mode=mode, padding_mode=padding, align_corners=align),
            img,
            finite,
        )
    map_x = filled(draw, (B, H, W), dtype, -2.0, W + 2.0, specials=not finite)
    map_y = filled(draw, (B, H, W), dtype, -2.0, H + 2.0, specials=not finite)
    normalized = draw(st.booleans())
    return (
        lambda: transform.remap(
            img, map_x, map_y, mode=mode, padding_mode=padding, align_corners=align, normalized_coordinates=normalized
        ),
        img,
        finite,
    )


@pytest.mark.slow
@profile(50)
@given(case=warp_cases())
def test_grid_sample_paths(case):
    run, img, finite = case
    got = outcome(run)
    with unpatched(["warp_sampling"]):
        unpatched_result = outcome(run)
    if img.dtype not in HALF:
        if assert_same_failure(unpatched_result, got):
            return
        assert bitwise_equal(got, unpatched_result), "float32/float64 warp changed"
        return
    # Half: the release's half run raises only for reasons other than the sampling kernel
    # (kornia's own half ops), and then the patched run raises the same way.
    if assert_same_failure(unpatched_result, got):
        return
    assert got.dtype == img.dtype and got.shape == unpatched_result.shape
    if finite and img.numel() and got.numel():
        # bilinear/nearest samples are convex combinations of pixels and zero padding.
        low, high = min(float(img.min()), 0.0), max(float(img.max()), 0.0)
        inside = (got >= low) & (got <= high)
        assert bool(inside.all()), f"{int((~inside).sum())} half samples outside [{low}, {high}]"


# --------------------------------------------------------------------------------------------
# Descriptors: SIFTDescriptor, HardNet, SOSNet


@st.composite
def patch_batches(draw, size):
    B = draw(st.integers(0, 3))
    dtype = draw(st.sampled_from(FLOATS))
    flat = draw(st.booleans())
    if flat:
        value = draw(st.sampled_from([0.0, 0.5, 1.0]))
        patches = torch.full((B, 1, size, size), value, dtype=dtype)
    else:
        patches = filled(draw, (B, 1, size, size), dtype)
    finite = bool(torch.isfinite(patches).all()) and bool((patches.abs() <= 1).all())
    return arrange(patches, draw(st.sampled_from(LAYOUTS))), finite


def check_descriptor(module, patches, finite, convert_module: bool, widen_float16: bool):
    """``convert_module``: the module's weights take the input's dtype (networks); SIFT's
    kernels are built per call. ``widen_float16``: the fix's float16 rule is the float32 result
    narrowed once; otherwise half descriptors of finite patches must be finite."""
    forward = type(module).forward
    the_patched(forward)
    original = get_original(forward)
    dtype = patches.dtype
    with torch.no_grad():
        if convert_module:
            module.to(dtype)
        got = outcome(lambda: module(patches))
        if dtype in HALF:
            # The release's float32 run on the same values (half weights widened exactly).
            reference = outcome(lambda: original(module.float(), patches.float()))
            if convert_module:
                module.to(dtype)
        else:
            reference = outcome(lambda: original(module, patches))
    if assert_same_failure(reference, got):
        return
    assert got.dtype == dtype and got.shape == reference.shape
    if dtype not in HALF:
        assert bitwise_equal(got, reference), "float32/float64 descriptor changed"
    elif widen_float16 and dtype == torch.float16:
        assert bitwise_equal(got, reference.to(dtype)), "float16 descriptor is not the float32 one narrowed once"
    elif finite:
        assert bool(torch.isfinite(got).all()), "non-finite half descriptor for a finite patch"


@pytest.mark.slow
@profile(30)
@given(case=patch_batches(16))
def test_sift_descriptor(case):
    check_descriptor(kornia.feature.SIFTDescriptor(16), *case, convert_module=False, widen_float16=True)


@pytest.fixture(scope="module")
def hardnet():
    return kornia.feature.HardNet(pretrained=False).eval()


@pytest.mark.slow
@profile(20)
@given(case=patch_batches(32))
def test_hardnet(hardnet, case):
    check_descriptor(hardnet, *case, convert_module=True, widen_float16=False)


@pytest.fixture(scope="module")
def sosnet():
    # SOSNet's trunk of half convolutions costs 0.6 s per call on CPU; the fix is its final
    # normalization, so a cheap trunk with the same (B, 128, 1, 1) output stands in for it.
    model = kornia.feature.SOSNet(pretrained=False)
    model.layers = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(1, 128, 1))
    return model.eval()


@pytest.mark.slow
@profile(30)
@given(case=patch_batches(32))
def test_sosnet(sosnet, case):
    check_descriptor(sosnet, *case, convert_module=True, widen_float16=False)


# --------------------------------------------------------------------------------------------
# ConvQuadInterp3d (its solver is patched where the release has the Cramer-rule helper)


@st.composite
def response_volumes(draw):
    shape = (draw(st.integers(0, 2)), draw(st.integers(1, 2)), draw(st.integers(3, 5)), draw(st.integers(3, 10)), draw(st.integers(3, 10)))
    dtype = draw(st.sampled_from(FLOATS))
    scale = draw(st.sampled_from([1.0, 0.01]))
    return arrange(filled(draw, shape, dtype, 0.0, scale), draw(st.sampled_from(["contiguous", "transposed", "offset_view"])))


@pytest.mark.slow
@profile(30)
@given(volume=response_volumes())
def test_conv_quad_interp3d(volume):
    if "geometry_subpix" not in kornia_halfpatch.applied_fixes():
        pytest.skip("geometry_subpix is not needed on this release (no Cramer-rule solver)")
    from kornia.geometry.subpix import conv_quad_interp3d

    got = outcome(lambda: conv_quad_interp3d(volume, 0.0))
    with unpatched(["geometry_subpix"]):
        reference = outcome(lambda: conv_quad_interp3d(volume, 0.0))
    if assert_same_failure(reference, got):
        return
    for mine, theirs in zip(got, reference):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        if volume.dtype != torch.float16:
            assert bitwise_equal(mine, theirs), "bfloat16/float32/float64 refinement changed"


# --------------------------------------------------------------------------------------------
# Settings of the user's that change float32 arithmetic


@pytest.mark.parametrize("precision", ["high", "medium"])
@pytest.mark.parametrize("name", ["extract_patches_simple", "extract_patches_from_pyramid"])
def test_float32_patches_stay_the_release_s_under_the_user_s_matmul_precision(name, precision):
    # torch.set_float32_matmul_precision("medium") lets float32 matmuls (affine_grid's) run in
    # bfloat16 on CPUs that have it: the release's per-image calls and a folded call then round
    # differently, and float32 results would no longer be the release's.
    patched = the_patched(getattr(kornia.feature, name))
    generator = torch.Generator().manual_seed(11)
    img = torch.rand(2, 3, 40, 36, generator=generator)
    B, N = 2, 6
    angle = torch.rand(B, N, generator=generator) * 6.28
    scale = (2.0 + 30.0 * torch.rand(B, N, generator=generator)).view(B, N, 1, 1)
    rotation = torch.stack([torch.stack([angle.cos(), -angle.sin()], -1), torch.stack([angle.sin(), angle.cos()], -1)], -2)
    centre = torch.rand(B, N, 2, 1, generator=generator) * torch.tensor([36.0, 40.0]).view(1, 1, 2, 1)
    laf = torch.cat([rotation * scale, centre], dim=-1)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        got = patched(img, laf, 8)
        want = get_original(patched)(img, laf, 8)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert bitwise_equal(got, want), f"max |patched - release| = {(got - want).abs().max().item():.3g}"


def test_kornia_s_warnings_keep_their_location():
    # A warning raised by torch inside kornia's call (grid_sample's align_corners default) is
    # attributed to kornia's line, so filters by module (``-W ignore:::kornia...``) and the
    # once-per-location registry work as without the shim.
    from kornia.geometry.transform import remap

    img = torch.rand(1, 1, 6, 6)
    grid = torch.rand(1, 6, 6) * 5

    def caught():
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            remap(img, grid, grid, align_corners=None)
        return [(str(w.message)[:60], w.filename, w.lineno) for w in records]

    patched_warnings = caught()
    with unpatched(["warp_sampling"]):
        release_warnings = caught()
    assert patched_warnings == release_warnings
    if not release_warnings:  # 0.8.3's remap passes align_corners=False itself
        pytest.skip(f"kornia {kornia.__version__}: remap(align_corners=None) does not warn; nothing to attribute")
