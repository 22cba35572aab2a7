"""Half at real image sizes (issue 35): kornia's depthwise convolutions in a faster layout, the
numbers held where they were.

``filters_conv_hang``'s conv2d target computes kornia's depthwise CPU convolutions channels-last
(``depthwise_at_scale``): a half image in float32 where its dtype has no arithmetic (cpu_half
"float32"), in its own dtype where it has (cpu_half "native"); a float32 image only inside the
shim's float32 evaluation of a half call. Both cpu_half modes are forced, so every machine proves
both paths. Oracles are computed in the same run (convolutions round per instruction set)."""

import functools
import inspect
import sys

import pytest
import torch
import torch.nn.functional as F

import kornia
import kornia_halfpatch
from kornia_halfpatch import _precision, testing
from kornia_halfpatch._kernels import widening_missing_kernels
from kornia_halfpatch.fixes.filters_conv_hang import depthwise_at_scale
from support import UPSTREAM_FIXED, assert_as_close_to_float64_as_the_release, bitwise_equal, run_python

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
HALF = (torch.float16, torch.bfloat16)
MODES = ("float32", "native")
ONLY = ["filters_conv_hang", "networks_cpu_half", "kornia_dtypes", "torch_ops"]


def image(batch=2, channels=3, size=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0, 0.5, size)
    return torch.rand(batch, channels, size, size, generator=g) * 0.5 + ramp


def _batch_by_image(dtype):
    """Seven 3 x 96 x 100 images in ``dtype``: two seeds' images side by side, cut to 100 columns."""
    return torch.cat([image(7, 3, 96, seed=6), image(7, 3, 96, seed=7)[..., :4]], -1).to(dtype)


# A bilinear resize computed from the rows it reads (``resized_from_rows_read``) is not torch's one
# pass: its float32 values differ in up to a third of the elements (by float32 roundings), its
# narrowed values by 1 half ulp in 2.9e-5 of the elements over 300 random crops (float16; bfloat16
# 6.9e-6; the worst call 1 element of 735). Stated bound: 1 ulp, 1 element in 10^3 of a batch.
RESIZED_MISMATCH_FRACTION = 1e-3


def assert_resized_within_bound(got, expected):
    apart = ulps_apart(got, expected)
    assert int(apart.max()) <= 1 and int((apart > 0).sum()) <= RESIZED_MISMATCH_FRACTION * apart.numel()


def ulps_apart(a, b):
    """Per element, how many steps of a's dtype lie between a and b (both in that dtype)."""
    assert a.dtype == b.dtype
    bits = torch.int16
    ia, ib = a.view(bits).int(), b.view(bits).int()
    # sign-magnitude to a monotonic integer line
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (ia - ib).abs()


@pytest.mark.parametrize("groups_shape", [(2, 3), (1, 3), (4, 1), (1, 2)], ids=str)
@pytest.mark.parametrize("kernel", [(1, 11), (11, 1), (3, 3), (9, 9), (15, 15)], ids=str)
def test_float32_evaluation_layout_is_bitwise_torchs_convolution(kernel, groups_shape):
    """Inside a float32 evaluation the channels-last convolution gives torch's NCHW bits (on
    this CPU; the shim's half results rest on it only to 1 half ulp, tested below)."""
    batch, channels = groups_shape
    x = image(batch, channels, 64)
    w = torch.rand(channels, 1, *kernel, generator=torch.Generator().manual_seed(1))
    expected = F.conv2d(x, w, None, 1, 0, 1, channels)
    with _precision.FLOAT32_EVALUATION:
        got = depthwise_at_scale(F.conv2d, x, w, None, 1, 0, 1, channels)
    assert got.is_contiguous() and bitwise_equal(got, expected)


def test_a_wanted_gradient_keeps_torchs_own_convolution():
    """Inside a float32 evaluation too: gradients are held to the release's, and channels-last
    backward rounds otherwise on torch 2.1 (SIFT's image gradient, measured)."""
    x = image(1, 3, 40).requires_grad_()
    w = torch.rand(3, 1, 5, 5)
    calls = []

    def original(*args):
        calls.append(args[0])
        return F.conv2d(*args)

    with _precision.FLOAT32_EVALUATION:
        depthwise_at_scale(original, x, w, None, 1, 0, 1, 3)
    assert calls[0] is x


@pytest.mark.parametrize("shape", [(4, 1, 2), (6, 1, 3)], ids=str)
def test_several_kernels_per_plane_are_bitwise_torchs_convolution(shape):
    """spatial_gradient's (B*C, 1, H, W) planes with 2 (or 3) derivative kernels: regrouped as
    (1, B*C) planes of k kernels each, the same sums."""
    batch, channels, outputs = shape
    x = image(batch, channels, 48)
    w = torch.rand(outputs, 1, 3, 3, generator=torch.Generator().manual_seed(2))
    expected = F.conv2d(x, w, None, 1, 0, 1, channels)
    with _precision.FLOAT32_EVALUATION:
        got = depthwise_at_scale(F.conv2d, x, w, None, 1, 0, 1, channels)
    assert got.is_contiguous() and bitwise_equal(got, expected)


def test_several_channels_with_several_kernels_each_are_left_to_torch():
    """A grouped convolution of several channels with 2 kernels each sums otherwise channels-last
    on AVX2 (5e-7 apart in float32; kornia makes none): the conv2d target's predicate leaves it to
    torch, and takes one kernel per channel and one-channel planes with several kernels."""
    from kornia_halfpatch.fixes.filters_conv_hang import depthwise_on_cpu

    x = image(2, 3, 40)
    w = torch.rand(6, 1, 3, 3)
    assert not depthwise_on_cpu(x, w, 3)
    assert depthwise_on_cpu(x, w[:3], 3)
    assert depthwise_on_cpu(x.reshape(6, 1, 40, 40), w[:2], 1)


def test_a_float32_call_outside_an_evaluation_is_torchs_own():
    x = image(1, 3, 40)
    w = torch.rand(3, 1, 5, 5)
    calls = []

    def original(*args):
        calls.append(args[0])
        return F.conv2d(*args)

    depthwise_at_scale(original, x, w, None, 1, 0, 1, 3)
    assert calls[0] is x  # the very tensor: no copy, no layout change


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["gaussian_blur2d", "ssim", "canny"])
def test_promoted_filters_stay_the_release_float32_narrowed(name, dtype, mode):
    """Promoted rows (kornia_dtypes) evaluate in float32 with the faster layout: the half result
    is the release's float32 result on the widened input narrowed once, within 1 half ulp in at
    most 0.1% of the elements (bitwise where the layout is, as on the CPUs measured)."""
    x = image().to(dtype)
    other = (image(seed=5) * 0.9).to(dtype)
    calls = {
        "gaussian_blur2d": lambda t, o: kornia.filters.gaussian_blur2d(t, (11, 11), (1.5, 1.5)),
        "ssim": lambda t, o: kornia.metrics.ssim(t, o, 11),
        "canny": lambda t, o: kornia.filters.canny(t)[0],
    }
    call = calls[name]
    with testing.isolated(only=()):
        expected = call(x.float(), other.float()).to(dtype)
    with testing.isolated(only=ONLY, cpu_half=mode):
        got = call(x, other)
    assert got.dtype == dtype
    apart = ulps_apart(got, expected)
    assert apart.max() <= 1 and (apart > 0).float().mean() <= 1e-3, (apart.max(), (apart > 0).float().mean())


def _hysteresis_kernels():
    from kornia.filters.kernels import get_hysteresis_kernel

    return get_hysteresis_kernel(torch.device("cpu"), torch.float32)


def test_neighbour_kernels_by_shifts_are_torchs_convolution():
    """A convolution with one-hot 3x3 kernels (canny's hysteresis) as shifted planes: bitwise
    torch's convolution on finite values (zeros of both signs, negatives, the largest float32); a
    plane with inf, NaN or a subnormal is left to the convolution itself."""
    from kornia_halfpatch.fixes.filters_conv_hang import neighbour_kernels, neighbours_by_shifts

    kernels = _hysteresis_kernels()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3, 1, 23, 31, generator=g) * 100
    x[0, 0, :5] = 0.0
    x[0, 0, 5:8] = -0.0
    x[1, 0, 3, 3] = torch.finfo(torch.float32).max
    x[2] = (x[2] > 0).float() * 0.5 + (x[2] > 1).float() * 0.5  # canny's 0, 0.5, 1 edges
    some = kernels[[2, 5, 7]]
    for weight in (kernels, some):
        assert neighbour_kernels(x, weight, None, 1, 1, 1, 1)
        assert bitwise_equal(neighbours_by_shifts(F.conv2d, x, weight), F.conv2d(x, weight, padding=1))
    for flush_denormal in (False, True):  # a subnormal compares as 0 where denormals are flushed
        torch.set_flush_denormal(flush_denormal)
        try:
            # written as bits: a flushing mode would turn an assigned subnormal into 0
            for odd in (0x7F800000, 0x7FC00000, 0x00000001, 0x80000001 - (1 << 32)):  # inf, NaN, +-subnormal
                y = x.clone()
                y.view(torch.int32)[1, 0, 4, 4] = odd
                calls = []
                got = neighbours_by_shifts(lambda *a: calls.append(a) or F.conv2d(*a), y, kernels)
                assert len(calls) == 1 and bitwise_equal(got, F.conv2d(y, kernels, padding=1)), (odd, flush_denormal)
        finally:
            torch.set_flush_denormal(False)
    # not one-hot, other paddings, a bias, several channels, a gradient wanted: not these kernels
    assert not neighbour_kernels(x, kernels * 0.5, None, 1, 1, 1, 1)
    assert not neighbour_kernels(x, kernels + kernels.flip(-1), None, 1, 1, 1, 1)
    assert not neighbour_kernels(x, kernels, None, 1, 0, 1, 1)
    assert not neighbour_kernels(x, kernels, torch.zeros(8), 1, 1, 1, 1)
    assert not neighbour_kernels(x.expand(3, 2, 23, 31), kernels.expand(8, 2, 3, 3), None, 1, 1, 1, 1)
    assert not neighbour_kernels(x.double(), kernels.double(), None, 1, 1, 1, 1)
    assert not neighbour_kernels(x.clone().requires_grad_(), kernels, None, 1, 1, 1, 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_canny_hysteresis_by_shifts_is_the_release_float32_narrowed(dtype, mode, monkeypatch):
    """canny of half images: its hysteresis convolutions are the shifted planes inside the float32
    evaluation (never for the user's float32 call), and both outputs are the release's float32
    narrowed (the edges bit for bit; the magnitude as test_promoted_filters allows)."""
    from kornia_halfpatch.fixes import filters_conv_hang

    calls = []
    real = filters_conv_hang.neighbours_by_shifts
    monkeypatch.setattr(filters_conv_hang, "neighbours_by_shifts", lambda *a: calls.append(1) or real(*a))
    x = image(size=80).to(dtype)
    with testing.isolated(only=()):
        magnitude, edges = (t.to(dtype) for t in kornia.filters.canny(x.float(), 0.05, 0.2))
    with testing.isolated(only=ONLY, cpu_half=mode):
        got_magnitude, got_edges = kornia.filters.canny(x, 0.05, 0.2)
        assert calls, "the hysteresis took the convolution"
        calls.clear()
        kornia.filters.canny(x.float(), 0.05, 0.2)
        assert calls == []
    assert got_edges.dtype == dtype and bitwise_equal(got_edges, edges)
    assert edges.float().sum() > 0 and (edges.float() == 1).sum() < edges.numel()  # edges, and not everywhere
    apart = ulps_apart(got_magnitude, magnitude)
    assert apart.max() <= 1 and (apart > 0).float().mean() <= 1e-3


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["filter2d", "spatial_gradient"])
def test_unpromoted_half_filters_in_float32_mode_are_float32_convolutions_narrowed(name, dtype):
    """filter2d and spatial_gradient (not promoted) convolve the half image with a half-rounded
    kernel (the release's filter2d casts it): in float32 mode the convolution runs in float32 and
    is narrowed once, so it is at least as close to the float64 filter of the same values as the
    release's half one, and finite."""
    x = image().to(dtype)
    box = torch.full((1, 9, 9), 1.0 / 81)
    calls = {"filter2d": lambda t: kornia.filters.filter2d(t, box),
             "spatial_gradient": lambda t: kornia.filters.spatial_gradient(t)}
    call = calls[name]
    # The release's half ops that this torch has no half CPU kernel for (torch 2.1: padding,
    # convolution) run widened, as a newer torch would run them.
    with testing.isolated(only=()), widening_missing_kernels():
        release_half = call(x)
        reference = call(x.double())
    with testing.isolated(only=ONLY, cpu_half="float32"):
        got = call(x)
    assert got.dtype == dtype and torch.isfinite(got).all()
    ours = (got.double() - reference).abs().mean()
    theirs = (release_half.double() - reference).abs().mean()
    assert ours <= theirs * 1.001 + 1e-12, (ours, theirs)


def _kernels_2d(*kernels):
    return [k.reshape(-1, 1, k.shape[-2], k.shape[-1]).float().contiguous() for k in kernels]


def test_rank_one_factors_split_large_separable_kernels_only():
    """Gaussian and box kernels with both sides >= 15 factor into a column and a row that rebuild
    every tap to float32 roundings; small, non-separable, degenerate kernels and convolutions
    with a stride, padding or dilation do not."""
    from kornia.filters import get_box_kernel2d, get_gaussian_kernel2d, get_motion_kernel2d
    from kornia_halfpatch.fixes.filters_conv_hang import RANK_ONE_TOLERANCE, rank_one_factors

    separable = _kernels_2d(get_gaussian_kernel2d((15, 15), (3.0, 3.0)), get_gaussian_kernel2d((63, 63), (32.0, 32.0)),
                            get_gaussian_kernel2d((15, 31), (2.0, 5.0)), get_box_kernel2d((15, 15)))
    for kernel in separable:
        factors = rank_one_factors(kernel, 1, 0, 1)
        assert factors is not None, kernel.shape
        column, row = factors
        assert column.shape == (kernel.shape[0], 1, kernel.shape[2], 1)
        assert row.shape == (kernel.shape[0], 1, 1, kernel.shape[3])
        rebuilt = column * row
        assert bool(((rebuilt - kernel).abs() <= RANK_ONE_TOLERANCE * kernel.abs()).all())
    gaussian = separable[0]
    with_nan, one_tap_off = gaussian.clone(), gaussian.clone()
    with_nan[0, 0, 3, 4] = float("nan")
    one_tap_off[0, 0, 7, 7] *= 1.0001
    not_split = {
        "9x9": _kernels_2d(get_gaussian_kernel2d((9, 9), (2.0, 2.0)))[0],
        "random": torch.rand(2, 1, 15, 15, generator=torch.Generator().manual_seed(4)),
        "motion": _kernels_2d(get_motion_kernel2d(15, 30.0, 0.0))[0],
        "one tap off": one_tap_off,
        "zeros": torch.zeros(1, 1, 15, 15),
        "nan": with_nan,
        "float64": gaussian.double(),
    }
    for name, kernel in not_split.items():
        assert rank_one_factors(kernel, 1, 0, 1) is None, name
    assert rank_one_factors(gaussian, 2, 0, 1) is None
    assert rank_one_factors(gaussian, 1, 1, 1) is None
    assert rank_one_factors(gaussian, 1, 0, 2) is None


def test_a_large_rank_one_kernel_is_convolved_as_its_column_then_its_row():
    """Inside a float32 evaluation: two convolutions of the factors, the 2-D kernel's sums to
    float32 roundings."""
    from kornia.filters.kernels import get_gaussian_kernel2d

    x = image(2, 3, 94)
    w = _kernels_2d(get_gaussian_kernel2d((31, 31), (6.0, 6.0)))[0].expand(3, 1, 31, 31).contiguous()
    expected = F.conv2d(x, w, None, 1, 0, 1, 3)
    kernels = []

    def original(*args):
        kernels.append(tuple(args[1].shape))
        return F.conv2d(*args)

    with _precision.FLOAT32_EVALUATION:
        got = depthwise_at_scale(original, x, w, None, 1, 0, 1, 3)
    assert kernels == [(3, 1, 31, 1), (3, 1, 1, 31)]
    assert got.is_contiguous() and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)
    kernels.clear()
    depthwise_at_scale(original, x, w, None, 1, 0, 1, 3)  # a user's float32 call: torch's own
    assert kernels == [(3, 1, 31, 31)]


@pytest.mark.parametrize("kernel", [(15, 15), (1, 15), (15, 1), (3, 64)], ids=str)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_half_convolution_with_a_side_of_15_keeps_torchs_layout(dtype, kernel, monkeypatch):
    """oneDNN never returns from a bfloat16 channels-last depthwise convolution with a kernel
    width >= 15 on avx512_bf16 CPUs (torch 2.13): a half convolution computed in its own dtype
    (native mode) with such a kernel is torch's own call on the image as given."""
    from kornia_halfpatch.fixes import networks_cpu_half

    monkeypatch.setattr(networks_cpu_half, "promoted_dtypes", lambda: ())  # native for both dtypes
    x = image(2, 3, 40).to(dtype)
    w = torch.rand(3, 1, *kernel).to(dtype)
    seen = []

    def original(*args):
        seen.append(args[0])
        return torch.zeros(())

    depthwise_at_scale(original, x, w, None, 1, 0, 1, 3)
    assert len(seen) == 1 and seen[0] is x
    seen.clear()
    depthwise_at_scale(original, x, w[..., :14, :14], None, 1, 0, 1, 3)  # smaller: channels-last
    assert len(seen) == 1 and seen[0] is not x and seen[0].is_contiguous(memory_format=torch.channels_last)


def test_bfloat16_filter2d_with_a_15x15_kernel_returns_in_native_mode():
    """The program that hung: kornia's filter2d of a bfloat16 image with a 15x15 Gaussian, half
    arithmetic forced (on an avx512_bf16 CPU, torch 2.13, channels-last never returned). In a
    fresh process with a deadline; the result is the release's own bfloat16 filter, bit for bit."""
    code = """
        import torch, kornia, kornia_halfpatch
        from kornia_halfpatch import testing
        x = torch.rand(2, 3, 64, 64).bfloat16()
        kernel = kornia.filters.get_gaussian_kernel2d((15, 15), (3.0, 3.0))
        with testing.isolated(only=()):
            expected = kornia.filters.filter2d(x, kernel)
        with testing.isolated(cpu_half="native"):
            got = kornia.filters.filter2d(x, kernel)
        assert got.dtype == torch.bfloat16
        assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
        print("returned")
    """
    result = run_python(code, timeout=240)
    assert result.returncode == 0 and "returned" in result.stdout, result.stderr[-2000:]


def _spy_rank_one_factors(monkeypatch):
    """Per call of ``rank_one_factors``, whether it split the kernel (two passes)."""
    from kornia_halfpatch.fixes import filters_conv_hang

    split = []
    factor = filters_conv_hang.rank_one_factors

    def spy(*arguments):
        factors = factor(*arguments)
        split.append(factors is not None)
        return factors

    monkeypatch.setattr(filters_conv_hang, "rank_one_factors", spy)
    return split


# A rank-one kernel in two passes (``rank_one_factors``) of a non-negative image: its float32 sums
# round otherwise than the 2-D kernel's by a few float32 ulps, so the narrowed value moves by 1
# half ulp where it lay that close to a rounding boundary: 0.04-0.12% of the elements measured
# (4x3x256x256, box 15x15 to 63x63, Gaussian 21x21 to 63x63, float16; bfloat16 0.005-0.08%).
TWO_PASS_MISMATCH_FRACTION = 2e-3
TWO_PASS_FILTERS = {
    "box_blur 15x15": lambda t: kornia.filters.box_blur(t, (15, 15)),
    "box_blur 31x17": lambda t: kornia.filters.box_blur(t, (31, 17)),
    "gaussian_blur2d full 31x31": lambda t: kornia.filters.gaussian_blur2d(t, (31, 31), (6.0, 6.0), separable=False),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(TWO_PASS_FILTERS))
def test_a_large_separable_2d_kernel_in_two_passes_is_within_1_ulp(name, dtype, mode, monkeypatch):
    split = _spy_rank_one_factors(monkeypatch)
    call = TWO_PASS_FILTERS[name]
    x = image(2, 3, 128, seed=9).to(dtype)
    with testing.isolated(only=()):
        expected = call(x.float()).to(dtype)
    with testing.isolated(cpu_half=mode):
        got = call(x)
    assert any(split)
    apart = ulps_apart(got, expected)
    assert int(apart.max()) <= 1 and float((apart > 0).float().mean()) <= TWO_PASS_MISMATCH_FRACTION


def _elastic_augmentation(t):
    return kornia.augmentation.RandomElasticTransform(p=1.0)(t)


def _elastic_function(t):
    # On a grid of 1/256: the same noise in every dtype.
    noise = (torch.rand(t.shape[0], 2, t.shape[2], t.shape[3]) * 512).round() / 256 - 1
    return kornia.geometry.transform.elastic_transform2d(t, noise.to(t.dtype), (63, 63), (32.0, 32.0), (1.0, 1.0))


@functools.lru_cache(maxsize=None)
def _elastic_float64(dtype, call):
    """The release's float64 call on the test's half image widened, and the random stream after
    it (0.8 of each test's 1 s: the 63x63 float64 blur), the same for both modes and for the
    augmentation whole or image by image."""
    x = image(2, 3, 128, seed=5).to(dtype).double()
    with testing.isolated(only=()):
        torch.manual_seed(3)
        return call(x), torch.random.get_rng_state()


@pytest.mark.parametrize("call", [_elastic_augmentation, "image by image", _elastic_function],
                         ids=["RandomElasticTransform", "RandomElasticTransform image by image", "function"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_elastic_noise_blurred_in_two_passes_is_as_close_to_float64_as_the_release(dtype, mode, call, monkeypatch):
    """The 63x63 Gaussian blur of the displacement noise (1.1 of the augmentation's 1.4 s at
    4x3x1024x1024) is rank one: in two passes its float32 sums round otherwise, and the sampled
    image moves by a float32 rounding of the displacement. Narrowed, that is 1 half ulp in about
    0.35% of the elements (float16; bfloat16 0.04%) and up to 4 float16 ulps in about 1e-5 of
    them, values near 0 where the release's own float32 result is 1-2 float16 ulps from the
    float64 one: never more than 1 half ulp farther from float64 than the release narrowed."""
    split = _spy_rank_one_factors(monkeypatch)
    x = image(2, 3, 128, seed=5).to(dtype)
    if call == "image by image":  # 128x128 images taken as large: one image a chunk
        from kornia_halfpatch.fixes import augmentation_pipeline

        monkeypatch.setattr(augmentation_pipeline, "CHUNKED_IMAGE_PIXELS", 128 * 128)
        monkeypatch.setattr(augmentation_pipeline, "CHUNK_PIXELS", 128 * 128)
        shapes = _spy_forwards(monkeypatch)
        call = _elastic_augmentation
    else:
        shapes = None
    with testing.isolated(only=()):
        torch.manual_seed(3)
        release = call(x.float())
        float64, stream = _elastic_float64(dtype, call)
    with testing.isolated(cpu_half=mode):
        torch.manual_seed(3)
        got = call(x)
    assert torch.equal(torch.random.get_rng_state(), stream)
    assert split and all(split)
    assert_as_close_to_float64_as_the_release(got, release.to(dtype), float64, 0.01)
    if shapes is not None:
        assert shapes == [(1, 3, 128, 128)] * 2


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_native_mode_keeps_the_half_convolution(dtype):
    """cpu_half="native" (a GPU's or a half-arithmetic CPU's path): the convolution stays in the
    half dtype, in channels-last, within 1 half ulp of the release's own half convolution."""
    x = image().to(dtype)
    with testing.isolated(only=()), widening_missing_kernels():
        expected = kornia.filters.box_blur(x, (5, 5))
    seen = []
    real = depthwise_at_scale.__globals__["_float32_mode_dtypes"]
    with testing.isolated(only=ONLY, cpu_half="native"):
        seen.append(real())
        got = kornia.filters.box_blur(x, (5, 5))
    assert dtype not in seen[0]
    assert got.dtype == dtype
    assert ulps_apart(got, expected).max() <= 1


def test_full_precision_filters_are_bitwise_the_release():
    x = image()
    with testing.isolated(only=()):
        expected = [kornia.filters.gaussian_blur2d(x, (11, 11), (1.5, 1.5)), kornia.filters.box_blur(x, (9, 9)),
                    kornia.metrics.ssim(x, x * 0.9, 11)]
    with testing.isolated(only=ONLY):
        got = [kornia.filters.gaussian_blur2d(x, (11, 11), (1.5, 1.5)), kornia.filters.box_blur(x, (9, 9)),
               kornia.metrics.ssim(x, x * 0.9, 11)]
    for a, b in zip(got, expected):
        assert bitwise_equal(a, b)


# --------------------------------------------------------------------------------------------
# Cheaper float32 evaluations (Promote(..., evaluate=...), fixes/_at_scale.py): the same float32
# values per element, so the half result is the release's float32 result narrowed, bitwise.

def _gray_and_color(batch=3, size=70, seed=2):
    x = image(batch, 3, size, seed)
    x[:, :, :7] = 0.5  # gray pixels: zero chroma, the release's eps and its replaced divisor
    x[:, 0, 7:12] = 1.0  # red maxima: the hue's first branch
    x[:, 1, 12:17] = 1.0
    return x


EVALUATED = {
    "rgb_to_hsv": lambda t, o, s, m: kornia.color.rgb_to_hsv(t),
    "gaussian_blur2d": lambda t, o, s, m: kornia.filters.gaussian_blur2d(t, (11, 11), (1.5, 1.5)),
    "gaussian_blur2d per-image sigma": lambda t, o, s, m: kornia.filters.gaussian_blur2d(t, (7, 9), s),
    "ssim": lambda t, o, s, m: kornia.metrics.ssim(t, o, 11),
    # the loss steps and reduction on the float32 map, as in the release's float32 call
    "ssim_loss": lambda t, o, s, m: kornia.losses.ssim_loss(t, o, 11),
    "ssim_loss sum": lambda t, o, s, m: kornia.losses.ssim_loss(t, o, 5, reduction="sum"),
    "ssim_loss none": lambda t, o, s, m: kornia.losses.ssim_loss(t, o, 7, reduction="none"),
    "SSIMLoss": lambda t, o, s, m: kornia.losses.SSIMLoss(11)(t, o),
    "equalize": lambda t, o, s, m: kornia.enhance.equalize(t),
    "box_blur": lambda t, o, s, m: kornia.filters.box_blur(t, (9, 9)),
    "sobel": lambda t, o, s, m: kornia.filters.sobel(t),
    "sobel 0-255 unnormalized": lambda t, o, s, m: kornia.filters.sobel(t, normalized=False),
    "rgb_to_lab": lambda t, o, s, m: kornia.color.rgb_to_lab(t),
    "lab_to_rgb": lambda t, o, s, m: kornia.color.lab_to_rgb(t),
    "rgb_to_luv": lambda t, o, s, m: kornia.color.rgb_to_luv(t),
    "luv_to_rgb": lambda t, o, s, m: kornia.color.luv_to_rgb(t),
    "hsv_to_rgb": lambda t, o, s, m: kornia.color.hsv_to_rgb(t),
    # warps with per-image parameters (sliced with their image): s[:, :1] as angles, and matrices
    "rotate": lambda t, o, s, m: kornia.geometry.transform.rotate(t, s[:, 0]),
    "warp_affine": lambda t, o, s, m: kornia.geometry.transform.warp_affine(t, m[:, :2], (50, 60)),
    "warp_perspective": lambda t, o, s, m: kornia.geometry.transform.warp_perspective(t, m, (50, 60)),
    "affine": lambda t, o, s, m: kornia.geometry.transform.affine(t, m[:, :2]),
    "translate": lambda t, o, s, m: kornia.geometry.transform.translate(t, s * 4),
    "scale": lambda t, o, s, m: kornia.geometry.transform.scale(t, s),
    "scale about a centre": lambda t, o, s, m: kornia.geometry.transform.scale(t, s, s * 8),
    "shear": lambda t, o, s, m: kornia.geometry.transform.shear(t, s / 8),
    "crop_by_transform_mat": lambda t, o, s, m: kornia.geometry.transform.crop_by_transform_mat(t, m, (40, 50)),
    "center_crop": lambda t, o, s, m: kornia.geometry.transform.center_crop(t, (41, 50)),
    "remap": lambda t, o, s, m: kornia.geometry.transform.remap(t, *_maps(t, s)),
    "crop_by_boxes": lambda t, o, s, m: kornia.geometry.transform.crop_by_boxes(t, _boxes(t, s), _boxes(t, s * 0, 40, 50)),
    "crop_and_resize": lambda t, o, s, m: kornia.geometry.transform.crop_and_resize(t, _boxes(t, s), (40, 50)),
    # per pixel, a scalar factor
    "rgb_to_grayscale": lambda t, o, s, m: kornia.color.rgb_to_grayscale(t),
    "adjust_hue": lambda t, o, s, m: kornia.enhance.adjust_hue(t, 0.7),
    "adjust_saturation": lambda t, o, s, m: kornia.enhance.adjust_saturation(t, 1.6),
    # per-image factors (a tensor argument): not tiled, the whole widened call
    "adjust_hue per-image factors": lambda t, o, s, m: kornia.enhance.adjust_hue(t, s[:, 0] - 1.5),
    # image by image
    "blur_pool2d": lambda t, o, s, m: kornia.filters.blur_pool2d(t, 3),
    "max_blur_pool2d": lambda t, o, s, m: kornia.filters.max_blur_pool2d(t, 3),
    # the squared error filled in tiles, its mean and the scalar steps the release's
    "psnr": lambda t, o, s, m: kornia.metrics.psnr(t, o, 1.0),
    "psnr 0-255": lambda t, o, s, m: kornia.metrics.psnr(t * 255, o * 255, 255),
    "psnr_loss": lambda t, o, s, m: kornia.losses.psnr_loss(t, o, 2.0),
}


def _maps(image, sigma):
    """Per-image pixel maps (B, H, W) in the image's dtype: a little stretch and a shift, in halves of
    a pixel (exact in both half dtypes, so the float32 reference reads the same maps)."""
    height, width = image.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32),
                            indexing="ij")
    shift = (sigma.float()[:, :1, None] * 4).round() / 2
    return ((xs * 0.97 * 2).round() / 2 + shift).to(image.dtype), ((ys * 1.02 * 2).round() / 2 - shift).to(image.dtype)


def _boxes(image, sigma, height=None, width=None):
    """Per-image boxes (B, 4, 2), clockwise from the top left, offset by the parameters; or the
    destination box of a height x width crop."""
    batch = image.shape[0]
    h, w = (height or 45), (width or 52)
    corners = torch.tensor([[0.0, 0.0], [w - 1.0, 0.0], [w - 1.0, h - 1.0], [0.0, h - 1.0]])
    offset = (sigma.float()[:, :2, None].transpose(1, 2) * 4).round()  # whole pixels: exact in half
    return (corners.expand(batch, 4, 2) + offset).to(image.dtype)


def _matrices(sigma):
    """Per-image 3x3 matrices (float32) from the (B, 2) parameters: a shear, a shift, a little
    perspective."""
    one = torch.ones_like(sigma[:, 0])
    rows = [torch.stack([one * 0.9, sigma[:, 1] * 0.1, sigma[:, 0] * 3], -1),
            torch.stack([sigma[:, 0] * -0.1, one, one * 2.5], -1),
            torch.stack([one * 1e-3, one * 0.0, one], -1)]
    return torch.stack(rows, 1)
# The inverse conversions take an image of their own space (made in float32, then rounded).
SPACE_OF = {"lab_to_rgb": "rgb_to_lab", "luv_to_rgb": "rgb_to_luv", "hsv_to_rgb": "rgb_to_hsv"}


@functools.lru_cache(maxsize=None)
def _evaluated_release(name, dtype):
    """The half inputs of an evaluated call and the release's float32 call on them narrowed: the
    same for both modes and both numbers of images per call (one unpatched cycle of the shim and
    the call, of each test's four)."""
    x = _gray_and_color()
    with testing.isolated(only=()):
        if name in SPACE_OF:
            x = getattr(kornia.color, SPACE_OF[name])(x)
        if "0-255" in name:
            x = x * 255  # 8-bit range: float16 squares of the unnormalised gradients pass 65504
        x = x.to(dtype)
        other = (_gray_and_color(seed=9) * 0.9).to(dtype)
        sigma = torch.tensor([[1.5, 1.5], [2.0, 1.0], [0.8, 3.0]]).to(dtype)
        matrices = _matrices(sigma.float()).to(dtype)
        expected = EVALUATED[name](x.float(), other.float(), sigma.float(), matrices.float()).to(dtype)
    return (x, other, sigma, matrices), expected


@pytest.mark.parametrize("images_per_call", [1, 2])  # three images: one call each; two calls
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(EVALUATED))
def test_an_evaluated_half_call_is_the_release_float32_narrowed_bitwise(name, dtype, mode, images_per_call, monkeypatch):
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "images_per_call", lambda: images_per_call)
    inputs, expected = _evaluated_release(name, dtype)
    inputs = [t.clone() for t in inputs]  # the cached inputs stay as made, whatever a call writes
    call = EVALUATED[name]
    with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"], cpu_half=mode):
        got = call(*inputs)
    assert got.dtype == dtype and got.shape == expected.shape
    assert bitwise_equal(got, expected), name


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_rgb_to_hsv_evaluation_on_ties_and_nan_is_the_release_float32_narrowed(dtype):
    """Ties pick the first maximal channel, as torch.max does; a NaN tile takes the release's
    reductions."""
    from kornia_halfpatch.fixes import _at_scale

    g = torch.Generator().manual_seed(0)
    quantised = torch.randint(0, 4, (2, 3, 40, 30), generator=g) / 4.0  # many ties, gray and black pixels
    with_nan = torch.rand(1, 3, 20, 20, generator=g)
    with_nan[0, 1, 3, 3] = float("nan")
    with_nan[0, 0, 4, 4] = float("nan")
    for x in (quantised, with_nan):
        x = x.to(dtype)
        with testing.isolated(only=()):
            expected = kornia.color.rgb_to_hsv(x.float()).to(dtype)
        assert bitwise_equal(_at_scale.rgb_to_hsv(None, dtype, x), expected)


def test_a_float32_rgb_to_hsv_inside_a_float32_evaluation_is_the_release_bitwise(monkeypatch):
    """``evaluate_float32``: inside the shim's float32 evaluation of a half call (an augmentation's
    widened band), kornia's float32 ``rgb_to_hsv`` takes the tiled evaluation, whose float32 values
    are the release's, bit for bit (ties, gray and black pixels, NaN, a non-contiguous input); a
    user's float32 call outside one is the release's own."""
    from kornia_halfpatch._precision import FLOAT32_EVALUATION
    from kornia_halfpatch.fixes import _at_scale

    g = torch.Generator().manual_seed(1)
    quantised = torch.randint(0, 4, (2, 3, 40, 30), generator=g) / 4.0
    with_nan = torch.rand(1, 3, 20, 20, generator=g)
    with_nan[0, 1, 3, 3] = float("nan")
    strided = torch.rand(2, 20, 3, 24, generator=g).transpose(1, 2)
    evaluated = []

    def spy(original, dtype, *arguments, **keywords):
        evaluated.append(dtype)
        return _at_scale.rgb_to_hsv(original, dtype, *arguments, **keywords)

    for x in (quantised, with_nan, strided):
        with testing.isolated(only=()):
            expected = kornia.color.rgb_to_hsv(x)
        with testing.isolated(only=ONLY):
            monkeypatch.setitem(kornia.color.rgb_to_hsv.__globals__, "_halfpatch_evaluate", spy)
            evaluated.clear()
            outside = kornia.color.rgb_to_hsv(x)
            assert evaluated == []
            with FLOAT32_EVALUATION:
                inside = kornia.color.rgb_to_hsv(x)
            assert evaluated == [torch.float32]
        assert bitwise_equal(outside, expected) and bitwise_equal(inside, expected)


def _tps_warp(batch, seed=4):
    """Per-image thin-plate-spline weights (float32) from five control points moved a little."""
    g = torch.Generator().manual_seed(seed)
    source = torch.rand(batch, 5, 2, generator=g) * 1.6 - 0.8
    destination = source + 0.15 * torch.randn(batch, 5, 2, generator=g)
    with testing.isolated(only=()):
        kernel, affine = kornia.geometry.transform.get_tps_transform(destination, source)
    return source, kernel, affine


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_warp_image_tps_in_bands_of_rows_is_the_release_float32_bitwise(dtype, mode, monkeypatch):
    """``warp_image_tps`` band by band of 16 output rows, image by image
    (``warp_image_tps_in_bands``): a half image's warp is the release's float32 warp narrowed, and
    a float32 warp inside the shim's float32 evaluation (an augmentation's) is the release's float32
    warp, bit for bit, aligned corners or not (and with border padding where the release takes
    it); a user's float32 call is the release's own. RandomThinPlateSpline, a large half batch
    image by image, takes it and is the release's float32 call narrowed."""
    from kornia_halfpatch._precision import FLOAT32_EVALUATION
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "TPS_BAND_PIXELS", 16 * 100)
    # 96 x 100, half values (the float32 calls read the half image's values)
    x = torch.cat([image(3, 3, 96, seed=5), image(3, 3, 96, seed=6)[..., :4]], -1).to(dtype).float()
    source, kernel, affine = _tps_warp(3)
    warp = kornia.geometry.transform.warp_image_tps
    options = [{"align_corners": False}, {"align_corners": True}]
    if "padding_mode" in inspect.signature(warp).parameters:
        options.append({"align_corners": True, "padding_mode": "border"})
    evaluated = []

    def spy(original, dtype, *arguments, **keywords):
        result = _at_scale.warp_image_tps_in_bands(original, dtype, *arguments, **keywords)
        evaluated.append((dtype, result is not None))
        return result

    for keywords in options:
        with testing.isolated(only=()):
            expected = warp(x, source, kernel, affine, **keywords)
        with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"], cpu_half=mode):
            warp = kornia.geometry.transform.warp_image_tps
            monkeypatch.setitem(warp.__globals__, "_halfpatch_evaluate", spy)
            evaluated.clear()
            got = warp(x.to(dtype), source, kernel, affine, **keywords)
            outside = warp(x, source, kernel, affine, **keywords)
            with FLOAT32_EVALUATION:
                inside = warp(x, source, kernel, affine, **keywords)
        assert evaluated == [(dtype, True), (torch.float32, True)], keywords
        assert got.dtype == dtype and bitwise_equal(got, expected.to(dtype)), keywords
        assert bitwise_equal(outside, expected) and bitwise_equal(inside, expected), keywords
    _small_images_by_image(monkeypatch, "chunks")
    monkeypatch.setattr(_at_scale, "TPS_BAND_PIXELS", 16 * 100)
    batch = x.repeat(2, 1, 1, 1).to(dtype)
    with testing.isolated(only=()):
        torch.manual_seed(8)
        expected = kornia.augmentation.RandomThinPlateSpline(p=0.8)(batch.float())
    with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling", "kornia_dtypes"],
                          cpu_half=mode):
        warp = kornia.geometry.transform.warp_image_tps
        monkeypatch.setitem(warp.__globals__, "_halfpatch_evaluate", spy)
        evaluated.clear()
        torch.manual_seed(8)
        got = kornia.augmentation.RandomThinPlateSpline(p=0.8)(batch)
    assert evaluated and all(call == (torch.float32, True) for call in evaluated)
    assert got.dtype == dtype and bitwise_equal(got, expected.to(dtype))


def test_the_rows_wrappers_hold_their_evaluation():
    from kornia_halfpatch.fixes import _at_scale

    with testing.isolated(only=ONLY):
        import importlib

        hsv = importlib.import_module("kornia.color.hsv")
        gaussian = importlib.import_module("kornia.filters.gaussian")

        assert hsv.rgb_to_hsv.__globals__["_halfpatch_evaluate"] is _at_scale.rgb_to_hsv
        assert gaussian.gaussian_blur2d.__globals__["_halfpatch_evaluate"] is _at_scale.filter_in_bands


def test_per_image_calls_the_original_once_per_widened_image(monkeypatch):
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "images_per_call", lambda: 2)  # a histogram equalisation: one image per call
    seen = []

    def original(x, sigma, scale):
        seen.append((tuple(x.shape), x.dtype, tuple(sigma.shape), scale))
        return x * sigma.view(-1, 1, 1, 1) * scale

    x = image(3, 2, 8).half()
    sigma = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
    out = _at_scale.per_image(original, torch.float16, x, sigma, scale=0.5)
    assert seen == [((1, 2, 8, 8), torch.float32, (1,), 0.5)] * 3
    assert out.dtype == torch.float16 and bitwise_equal(out, (x.float() * sigma.float().view(-1, 1, 1, 1) * 0.5).half())
    # one image, or a wanted gradient: left to the widened original (None)
    assert _at_scale.per_image(original, torch.float16, x[:1], sigma[:1], scale=0.5) is None
    assert _at_scale.per_image(original, torch.float16, x.requires_grad_(), sigma, scale=0.5) is None


def test_a_warp_calls_the_original_on_as_many_images_as_torch_has_threads(monkeypatch):
    """grid_sample shares its work among threads by image: a warp takes as many images per float32
    call as there are threads, the last call the rest."""
    from kornia_halfpatch.fixes import _at_scale

    seen = []

    def original(x, sigma):
        seen.append((tuple(x.shape), tuple(sigma.shape)))
        return x * sigma.view(-1, 1, 1, 1)

    x = image(5, 2, 8).half()
    sigma = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float16)
    expected = (x.float() * sigma.float().view(-1, 1, 1, 1)).half()
    monkeypatch.setattr(_at_scale, "images_per_call", lambda: 2)
    out = _at_scale.per_thread_images(original, torch.float16, x, sigma)
    assert seen == [((2, 2, 8, 8), (2,)), ((2, 2, 8, 8), (2,)), ((1, 2, 8, 8), (1,))]
    assert bitwise_equal(out, expected)
    assert _at_scale.per_thread_images(original, torch.float16, x[:2], sigma[:2]) is None  # one call: the widened original
    previous = torch.get_num_threads()
    monkeypatch.undo()
    try:
        torch.set_num_threads(3)
        assert _at_scale.images_per_call() == 3
    finally:
        torch.set_num_threads(previous)


def _every_half_value(dtype, seed):
    """A plane holding every value of ``dtype`` from 0 to 1 (and -0.0), each 0-3 times, shuffled,
    padded with random values: every bit pattern the equalisation's table may meet."""
    g = torch.Generator().manual_seed(seed)
    one = int(torch.tensor(1.0, dtype=dtype).view(torch.int16))
    patterns = torch.cat([torch.arange(one + 1, dtype=torch.int16), torch.tensor([-(1 << 15)], dtype=torch.int16)])
    values = patterns.view(dtype).repeat_interleave(torch.randint(0, 4, (len(patterns),), generator=g))
    side = int((3 * len(patterns)) ** 0.5) + 1
    padding = torch.rand(side * side - len(values), generator=g).to(dtype)
    plane = torch.cat([values, padding])
    return plane[torch.randperm(len(plane), generator=g)].view(side, side)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_equalize_by_value_is_the_release_float32_narrowed_on_every_half_value(dtype, monkeypatch):
    """The histogram counted per bit pattern and the release's float32 steps run once per distinct
    value: every pixel bitwise the release's float32 result narrowed, on planes holding every half
    value in [0, 1] and -0.0, a constant plane (the step is 0: w / 255), a plane of a few levels
    (many ties), and every leading shape equalize takes; never left to the per-image evaluation."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "per_image", lambda *a, **k: pytest.fail("left to per_image"))
    every = torch.stack([_every_half_value(dtype, seed) for seed in range(3)])
    levels = (torch.randint(0, 5, every.shape[-2:], generator=torch.Generator().manual_seed(4)) / 4.0).to(dtype)
    constant = torch.full(every.shape[-2:], 0.3, dtype=dtype)
    batch = torch.stack([every, torch.stack([levels, constant, every[0]])])  # (2, 3, H, W)
    for x in (batch, batch[0], batch[0, 0], batch.view(1, 2, 3, *batch.shape[-2:])):
        with testing.isolated(only=()):
            release_equalize = kornia.enhance.equalize
            expected = release_equalize(x.float()).to(dtype)
        got = _at_scale.equalize_by_value(release_equalize, dtype, x)
        assert got.dtype == dtype and got.shape == expected.shape
        assert bitwise_equal(got, expected)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_equalize_by_value_leaves_what_it_cannot_count_to_the_release(dtype, monkeypatch):
    """Values past 1 or below 0 (the release raises its own ValueError), planes past float32's
    integer grid of counts, and a release whose equalisation reads otherwise take ``per_image``,
    the release's own code image by image."""
    from kornia_halfpatch.fixes import _at_scale

    x = image(2, 3, 16).to(dtype) / 2
    with testing.isolated(only=()):
        release_equalize = kornia.enhance.equalize
    for bad in (1.5, -0.25):
        y = x.clone()
        y[1, 2, 3, 4] = bad
        with testing.isolated(only=()):
            with pytest.raises(ValueError) as released:
                kornia.enhance.equalize(y.float())
        with pytest.raises(ValueError) as patched:
            _at_scale.equalize_by_value(release_equalize, dtype, y)
        assert str(patched.value) == str(released.value)

    left = []
    real_per_image = _at_scale.per_image
    monkeypatch.setattr(_at_scale, "per_image", lambda *a, **k: left.append(1) or real_per_image(*a, **k))
    with testing.isolated(only=()):
        expected = kornia.enhance.equalize(x.float()).to(dtype)
    monkeypatch.setattr(_at_scale, "_EXACT_COUNTS", 15 * 15)
    assert bitwise_equal(_at_scale.equalize_by_value(release_equalize, dtype, x), expected)
    assert left == [1]
    monkeypatch.undo()
    monkeypatch.setattr(_at_scale, "per_image", lambda *a, **k: left.append(2) or real_per_image(*a, **k))
    reads_otherwise = dict(_at_scale._EQUALIZE_STATEMENTS, _scale_channel=("im = im * 256.0",))
    monkeypatch.setattr(_at_scale, "_EQUALIZE_STATEMENTS", reads_otherwise)
    monkeypatch.setattr(_at_scale, "_equalize_checked", {})
    assert bitwise_equal(_at_scale.equalize_by_value(release_equalize, dtype, x), expected)
    assert left == [1, 2]


# --------------------------------------------------------------------------------------------
# The broadcast affine grid (fixes/_at_scale.py): stands in for torch's affine_grid only inside
# the float32 evaluation of a large half warp, and only where it is torch's grid bit for bit.

def _spy_broadcast(monkeypatch):
    from kornia_halfpatch.fixes import _at_scale

    calls = []
    real = _at_scale.affine_grid_by_broadcast

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(_at_scale, "affine_grid_by_broadcast", spy)
    return calls


def test_the_broadcast_grid_is_torchs_wherever_the_probe_says_so():
    """Where the probe finds the broadcast grid equal to torch's (its matmul rounds x*t0 + y*t1,
    then + t2), it is equal on other sizes and matrices too; where it does not, no evaluation
    enters the mode."""
    from kornia_halfpatch.fixes import _at_scale

    if not _at_scale.broadcast_grid_is_torchs(F.affine_grid):
        assert not _at_scale.large_warps(1 << 20).broadcast
        return
    g = torch.Generator().manual_seed(7)
    for batch, height, width in ((1, 2, 2), (4, 61, 333), (2, 700, 129)):
        theta = torch.randn(batch, 2, 3, generator=g) * torch.tensor([1.0, 1.0, 0.3])
        for align_corners in (True, False):
            size = [batch, 3, height, width]
            assert bitwise_equal(_at_scale.affine_grid_by_broadcast(theta, size, align_corners),
                                 F.affine_grid(theta, size, align_corners=align_corners))


def test_the_grid_probe_answers_the_same_under_a_half_default_dtype(monkeypatch):
    """The probe runs inside a user's first large warp, whatever the caller's default dtype: its
    matrices are float32 all the same, so a half default changes nothing."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "_broadcast_grid_checked", {})
    answer = _at_scale.broadcast_grid_is_torchs(F.affine_grid)
    monkeypatch.setattr(_at_scale, "_broadcast_grid_checked", {})
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float16)
        with torch.inference_mode():
            assert _at_scale.broadcast_grid_is_torchs(F.affine_grid) == answer
    finally:
        torch.set_default_dtype(previous)


def test_the_grid_probe_refuses_a_grid_rounded_otherwise(monkeypatch):
    """A broadcast grid that rounds in another order (x*t0 + (y*t1 + t2)) is not torch's: the probe
    says no, and so does a probe that fails."""
    from kornia_halfpatch.fixes import _at_scale

    def other_order(theta, size, align_corners):
        xs = _at_scale._neg_one_to_one(size[3], align_corners, theta)
        ys = _at_scale._neg_one_to_one(size[2], align_corners, theta)[:, None]
        planes = [theta[:, k, 0, None, None] * xs + (theta[:, k, 1, None, None] * ys + theta[:, k, 2, None, None])
                  for k in range(2)]
        return torch.stack(planes, -1)

    monkeypatch.setattr(_at_scale, "_broadcast_grid_checked", {})
    monkeypatch.setattr(_at_scale, "affine_grid_by_broadcast", other_order)
    assert not _at_scale.broadcast_grid_is_torchs(F.affine_grid)
    assert not _at_scale.large_warps(1 << 20).broadcast
    monkeypatch.setattr(_at_scale, "_broadcast_grid_checked", {})
    monkeypatch.setattr(_at_scale, "affine_grid_by_broadcast", lambda *a: 1 / 0)
    assert not _at_scale.broadcast_grid_is_torchs(F.affine_grid)


def test_the_grid_mode_is_entered_for_large_eager_images_only(monkeypatch):
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "broadcast_grid_is_torchs", lambda affine_grid: True)
    assert _at_scale.large_warps(_at_scale.BROADCAST_GRID_PIXELS).broadcast
    assert not isinstance(_at_scale.large_warps(_at_scale.BROADCAST_GRID_PIXELS - 1), _at_scale._LargeWarps)
    monkeypatch.setattr(torch.jit, "is_tracing", lambda: True)
    assert not isinstance(_at_scale.large_warps(1 << 20), _at_scale._LargeWarps)
    # Inside the mode: a theta wanting a gradient, or a 5-D size, is torch's own call.
    monkeypatch.undo()
    calls = _spy_broadcast(monkeypatch)
    theta = torch.randn(2, 2, 3)
    with _at_scale._LargeWarps(broadcast=True):
        F.affine_grid(theta.requires_grad_(), [2, 1, 8, 8], align_corners=False).sum().backward()
        F.affine_grid(torch.randn(2, 3, 4), [2, 1, 3, 8, 8], align_corners=True)
        assert calls == []
        F.affine_grid(theta.detach(), [2, 1, 8, 8], align_corners=False)
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_warp_is_bitwise_the_release_float32_narrowed_with_the_broadcast_grid(dtype, monkeypatch):
    """warp_affine (of three images and of one), rotate and RandomAffine of half images of 256x300
    pixels (past the mode's threshold): bitwise the release's float32 call narrowed, the broadcast
    grid sampled wherever the probe allows it (and only then), each warped image's rows sampled on
    both threads; a float32 call of the user's never takes either."""
    from kornia_halfpatch.fixes import _at_scale

    calls = _spy_broadcast(monkeypatch)
    broadcast = _at_scale.broadcast_grid_is_torchs(F.affine_grid)
    x = image(3, 3, 256)[..., :256, :]
    x = torch.cat([x, x[..., :44]], -1).to(dtype)  # 256 x 300
    matrices = _matrices(torch.tensor([[1.5, 1.5], [2.0, 1.0], [0.8, 3.0]]))[:, :2].to(dtype)
    angles = torch.tensor([10.0, 200.0, -33.0]).to(dtype)
    augment = kornia.augmentation.RandomAffine(degrees=30.0, translate=(0.1, 0.1), scale=(0.8, 1.2), p=1.0)
    calls_of = {
        "warp_affine": lambda t: kornia.geometry.transform.warp_affine(t, matrices.to(t.dtype), (250, 310)),
        "rotate": lambda t: kornia.geometry.transform.rotate(t, angles.to(t.dtype)),
        "RandomAffine": lambda t: augment(t),
        # one image: nothing to split, called whole inside the mode
        "warp_affine of one image": lambda t: kornia.geometry.transform.warp_affine(
            t[:1], matrices[:1].to(t.dtype), (250, 310)),
    }
    by_rows = []
    real = _at_scale.grid_sample_by_rows
    monkeypatch.setattr(_at_scale, "grid_sample_by_rows", lambda *a, **k: by_rows.append(a[2]) or real(*a, **k))
    previous = torch.get_num_threads()
    torch.set_num_threads(2)  # one image's rows sampled on both threads
    try:
        for name, call in calls_of.items():
            torch.manual_seed(3)
            with testing.isolated(only=()):
                expected = call(x.float()).to(dtype)
            with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling", "augmentation_pipeline"]):
                torch.manual_seed(3)
                got = call(x)
                assert got.dtype == dtype and bitwise_equal(got, expected), name
                assert bool(calls) == broadcast, name
                # the warps' images one at a time, each by rows; the augmentation's batch whole
                assert by_rows == ([] if name == "RandomAffine" else [2] * (1 if "one" in name else 3)), name
                calls.clear()
                by_rows.clear()
                call(x.float())  # the user's float32 call: torch's own grid and sampling
                assert calls == [] and by_rows == [], name
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_warp_in_bands_of_grid_rows_is_bitwise_the_release_float32_narrowed(dtype, monkeypatch):
    """Each image of a large half warp called once per band of output rows (bands of 40 rows of 310 pixels here),
    its affine grid answered with that band's rows of the broadcast grid: warp_affine (zeros,
    fill, nearest with reflection and align_corners=False, an output larger and smaller than the
    input), rotate, and warp_perspective (no affine grid: the whole image at the first call), all
    bitwise the release's float32 call narrowed; bands only where the probe allows the broadcast
    grid, and only for one or two images (``whole_images_exceed_float32``) or large ones."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "GRID_BAND_PIXELS", 40 * 310)
    rows_asked = []
    real = _at_scale.affine_grid_by_broadcast
    monkeypatch.setattr(_at_scale, "affine_grid_by_broadcast",
                        lambda theta, size, align_corners, rows=None: rows_asked.append(rows) or real(theta, size, align_corners, rows))
    broadcast = _at_scale.broadcast_grid_is_torchs(F.affine_grid)
    x = torch.cat([image(2, 3, 300, seed=4), image(2, 3, 300, seed=5)[..., :10]], -1).to(dtype)  # 300 x 310
    matrix = torch.tensor([[[0.9, 0.2, 10.0], [-0.1, 1.1, -5.0]], [[1.2, -0.3, 3.0], [0.3, 0.8, 7.0]]]).to(dtype)
    homography = torch.cat([matrix, torch.tensor([[[1e-4, -2e-4, 1.0]]]).to(dtype).expand(2, 1, 3)], 1)
    angles = torch.tensor([17.0, -200.0]).to(dtype)
    fill = torch.tensor([0.2, 0.5, 0.9])
    warp = kornia.geometry.transform
    calls_of = {
        "warp_affine": (lambda t, m: warp.warp_affine(t, m, (290, 320)), 8),
        "warp_affine fill": (lambda t, m: warp.warp_affine(t, m, (290, 320), padding_mode="fill", fill_value=fill), 8),
        "warp_affine nearest": (lambda t, m: warp.warp_affine(t, m, (333, 300), mode="nearest",
                                                              padding_mode="reflection", align_corners=False), 9),
        "rotate": (lambda t, m: warp.rotate(t, angles.to(t.dtype)), 8),
        "warp_perspective": (lambda t, m: warp.warp_perspective(t, homography.to(t.dtype), (290, 320)), 0),
    }
    for name, (call, bands) in calls_of.items():
        with testing.isolated(only=()):
            expected = call(x.float(), matrix.float()).to(dtype)
        rows_asked.clear()
        with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"]):
            got = call(x, matrix)
        assert got.dtype == dtype and bitwise_equal(got, expected), name
        if not broadcast:
            assert rows_asked == [], name
            continue
        assert len(rows_asked) == 2 * bands, name
        if bands:
            assert rows_asked[0] == (0, 40 * 310 // got.shape[-1]) and rows_asked[bands - 1][1] == got.shape[-2], name
            assert all(a[1] == b[0] for a, b in zip(rows_asked[: bands - 1], rows_asked[1:bands])), name
    # Three images or more: whole images hold less than the release's float32 batch; no bands
    # below BANDED_WARP_PIXELS, bands from there.
    monkeypatch.setattr(_at_scale, "BANDED_WARP_PIXELS", 300 * 310 + 1)
    x3 = torch.cat([x, x[:1]])
    with testing.isolated(only=()):
        expected = warp.rotate(x3.float(), angles[:1].float().expand(3)).to(dtype)
    rows_asked.clear()
    with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"]):
        got = warp.rotate(x3, angles[:1].expand(3))
    assert bitwise_equal(got, expected)
    assert rows_asked == ([None] * 3 if broadcast else [])
    monkeypatch.setattr(_at_scale, "BANDED_WARP_PIXELS", 300 * 310)
    rows_asked.clear()
    with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"]):
        assert bitwise_equal(warp.rotate(x3, angles[:1].expand(3)), expected)
    assert len(rows_asked) == (3 * 8 if broadcast else 0)


def test_a_warp_whose_grids_do_not_band_is_left_to_the_widened_original(monkeypatch):
    """In bands, a release that builds two affine grids a call, or returns rows other than the
    band's, is not banded (None: the widened original decides); one that builds none is taken whole
    at the first call; a gradient wanted is the release's float32 graph."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "GRID_BAND_PIXELS", 16 * 20)
    x = image(2, 2, 20).half()
    theta = torch.tensor([[[1.0, 0.1, 0.0], [0.0, 1.0, 0.1]]])
    calls = []

    def one_grid(t):
        calls.append(t.shape)
        grid = F.affine_grid(theta.expand(t.shape[0], -1, -1), [t.shape[0], 1, 20, 20], align_corners=True)
        return F.grid_sample(t, grid, align_corners=True)

    def two_grids(t):
        F.affine_grid(theta, [1, 1, 20, 20], align_corners=True)
        return one_grid(t)

    def no_grid(t):
        calls.append(t.shape)
        return t * 2

    if not _at_scale.broadcast_grid_is_torchs(F.affine_grid):
        pytest.skip("the broadcast grid is not torch's here: no bands")
    expected = one_grid(x.float()).half()
    calls.clear()
    assert bitwise_equal(_at_scale._each_image_in_grid_bands(one_grid, torch.float16, (x,), {}), expected)
    assert len(calls) == 4  # two images, two bands each (16 rows, then 4)
    assert _at_scale._each_image_in_grid_bands(two_grids, torch.float16, (x,), {}) is None
    assert _at_scale._each_image_in_grid_bands(lambda t: one_grid(t)[..., :3, :], torch.float16, (x,), {}) is None
    calls.clear()
    assert bitwise_equal(_at_scale._each_image_in_grid_bands(no_grid, torch.float16, (x,), {}), (x.float() * 2).half())
    assert len(calls) == 2  # one call an image
    assert _at_scale._each_image_in_grid_bands(one_grid, torch.float16, (x.clone().requires_grad_(),), {}) is None


@pytest.mark.parametrize("rounds", ["one", "several"])
@pytest.mark.parametrize("height", [9, 40, 41])  # rows left over, none, one
def test_one_image_sampled_by_rows_is_torchs_grid_sample(height, rounds, monkeypatch):
    """One image's grid_sample cut into batches of equal row chunks, in one round or several (and
    the rows left over): torch's output bit for bit, bilinear and nearest, for every padding mode
    and align_corners, grids reaching outside."""
    from kornia_halfpatch.fixes import _at_scale

    if rounds == "several":
        monkeypatch.setattr(_at_scale, "SAMPLED_PIXELS", 45 * 3)  # 3 rows a chunk

    g = torch.Generator().manual_seed(5)
    x = torch.rand(1, 3, 37, 50, generator=g)
    grid = torch.rand(1, height, 45, 2, generator=g) * 2.4 - 1.2
    assert not _at_scale.samples_by_rows(x, grid, 2, "bicubic")  # left to torch (2.10-2.12 differ)
    for mode in ("bilinear", "nearest"):
        assert _at_scale.samples_by_rows(x, grid[:, :, :, :], 2, mode) == (height >= 4)
        for padding_mode in ("zeros", "border", "reflection"):
            for align_corners in (True, False):
                options = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
                expected = F.grid_sample(x, grid, **options)
                for threads in (2, 3, 4):
                    got = _at_scale.grid_sample_by_rows(x, grid, threads, **options)
                    assert got.shape == expected.shape and got.is_contiguous()
                    assert bitwise_equal(got, expected), (mode, padding_mode, align_corners, threads)


def test_the_mode_samples_one_float32_image_by_rows_only(monkeypatch):
    """Inside the mode: one float32 image of enough rows is sampled by rows; a batch, a half
    input, a gradient wanted, one thread, or a grid of fewer than two rows a thread is torch's own
    call."""
    from kornia_halfpatch.fixes import _at_scale

    calls = []
    real = _at_scale.grid_sample_by_rows
    monkeypatch.setattr(_at_scale, "grid_sample_by_rows", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    x, grid = torch.rand(1, 2, 20, 20), torch.rand(1, 16, 16, 2) * 2 - 1
    expected = F.grid_sample(x, grid, align_corners=False)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with _at_scale._LargeWarps(broadcast=False):
            F.grid_sample(x.expand(2, -1, -1, -1), grid.expand(2, -1, -1, -1), align_corners=False)
            F.grid_sample(x.double(), grid.double(), align_corners=False)
            F.grid_sample(x.requires_grad_(), grid, align_corners=False).sum().backward()
            F.grid_sample(x.detach(), grid[:, :3], align_corners=False)
            assert calls == []
            out = F.grid_sample(x.detach(), grid, align_corners=False)
            assert calls == [2] and bitwise_equal(out, expected)
            torch.set_num_threads(1)
            F.grid_sample(x.detach(), grid, align_corners=False)
            assert calls == [2]
    finally:
        torch.set_num_threads(previous)


def test_a_gradient_takes_the_release_float32_graph():
    """A half input that wants a gradient is left to the widened original (the release's float32
    graph gives the gradient): the same gradient as the float32 call's, narrowed."""
    x = image(2, 3, 32).half().requires_grad_()
    with testing.isolated(only=()):
        wide = x.detach().float().requires_grad_()
        kornia.color.rgb_to_hsv(wide).sum().backward()
    with testing.isolated(only=ONLY):
        kornia.color.rgb_to_hsv(x).float().sum().backward()
    assert x.grad.dtype == torch.float16
    assert bitwise_equal(x.grad, wide.grad.half())


# A large single image (1x3x4096x4096) has no batch to split: the local filters take it in bands of
# full-width rows, each band's input a halo of the kernel's height wider. The band size is lowered
# here so a small image takes several bands (the arithmetic per pixel is the same at any size).
BANDED = {
    "gaussian_blur2d": lambda t, o: kornia.filters.gaussian_blur2d(t, (11, 7), (2.5, 1.5)),
    "gaussian_blur2d replicate, full kernel": lambda t, o: kornia.filters.gaussian_blur2d(
        t, (5, 9), (1.0, 2.0), "replicate", False),
    "gaussian_blur2d constant": lambda t, o: kornia.filters.gaussian_blur2d(t, 9, (3.0, 3.0), border_type="constant"),
    "box_blur": lambda t, o: kornia.filters.box_blur(t, (9, 9)),
    "box_blur even kernel": lambda t, o: kornia.filters.box_blur(t, (4, 6), "replicate"),
    "box_blur separable": lambda t, o: kornia.filters.box_blur(t, (9, 7), separable=True),
    "sobel": lambda t, o: kornia.filters.sobel(t),
    "sobel unnormalized": lambda t, o: kornia.filters.sobel(t, normalized=False),
    "ssim": lambda t, o: kornia.metrics.ssim(t, o, 11),
    # not banded (a circular border wraps a band onto itself; a valid map is not row for row): the
    # image whole, still the release's float32 narrowed
    "gaussian_blur2d circular": lambda t, o: kornia.filters.gaussian_blur2d(t, 9, (3.0, 3.0), border_type="circular"),
    "ssim valid": lambda t, o: kornia.metrics.ssim(t, o, 7, padding="valid"),
}
NOT_BANDED = {"gaussian_blur2d circular", "ssim valid"}


@pytest.mark.parametrize("batch", [1, 2])  # two images: one call, planes kept channels-last
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(BANDED))
def test_a_large_image_in_bands_of_rows_is_the_release_float32_narrowed_bitwise(name, dtype, mode, batch, monkeypatch):
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "BAND_PIXELS", 40 * 100)
    planned = []
    bands = _at_scale._bands
    monkeypatch.setattr(_at_scale, "_bands", lambda *a: planned.append(bands(*a)) or planned[-1])
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(batch, 3, 230, 100, generator=g) * 0.5 + torch.linspace(0, 0.5, 100)).to(dtype)
    other = (x.float() * 0.9 + 0.03).to(dtype)
    with testing.isolated(only=()):
        expected = BANDED[name](x.float(), other.float()).to(dtype)
    with testing.isolated(only=ONLY, cpu_half=mode):
        got = BANDED[name](x, other)
    assert got.dtype == dtype and bitwise_equal(got, expected), name
    assert len(planned) == 1
    if name in NOT_BANDED:
        assert planned[0] == [(0, 230)]
    else:
        assert len(planned[0]) > 2  # the first, inner and last bands all ran


class _PaddedLayouts(torch.overrides.TorchFunctionMode):
    """The layout of every image kornia pads (filter2d pads before each convolution)."""

    def __init__(self):
        super().__init__()
        self.channels_last = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.pad and args[0].dim() == 4 and args[0].shape[1] > 1:
            self.channels_last.append(args[0].is_contiguous(memory_format=torch.channels_last))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["ssim", "gaussian_blur2d", "box_blur", "box_blur separable"])
def test_two_images_keep_their_planes_channels_last_through_the_filters(name, mode):
    """Two images a banded call (four images: two calls) of a filter of two or more convolutions
    a plane: every plane kornia pads is already channels-last (no conversion per convolution), and
    the result is the release's float32 narrowed, bit for bit; one image, and a filter of one
    convolution a plane (box_blur's 2-D kernel), keep NCHW planes."""
    for batch, layout in ((4, name != "box_blur"), (1, False)):
        x = image(batch=batch, size=64).to(torch.float16)
        other = (x.float() * 0.9 + 0.03).to(torch.float16)
        with testing.isolated(only=()):
            expected = BANDED[name](x.float(), other.float()).to(torch.float16)
        with testing.isolated(only=ONLY, cpu_half=mode):
            with _PaddedLayouts() as padded:
                got = BANDED[name](x, other)
        assert bitwise_equal(got, expected), (name, batch)
        assert set(padded.channels_last) == {layout}, (name, batch, padded.channels_last)


def test_a_release_step_that_refuses_channels_last_planes_is_evaluated_in_nchw(monkeypatch):
    """Per-image sigmas make kornia's filter2d view two images' planes as one image of six
    channels (four images: two calls of two), which a channels-last plane refuses: the call is evaluated again in NCHW planes,
    the release's float32 narrowed all the same."""
    from kornia_halfpatch.fixes import _at_scale

    calls = []
    each = _at_scale._each_image
    monkeypatch.setattr(_at_scale, "_each_image", lambda *a, **k: calls.append(k.get("channels_last", False)) or each(*a, **k))
    x = image(batch=4, size=64).to(torch.bfloat16)
    sigma = torch.tensor([[1.5, 1.5], [2.0, 1.0], [0.8, 3.0], [1.2, 1.2]])
    with testing.isolated(only=()):
        expected = kornia.filters.gaussian_blur2d(x.float(), (7, 9), sigma).to(torch.bfloat16)
    with testing.isolated(only=ONLY, cpu_half="float32"):
        got = kornia.filters.gaussian_blur2d(x, (7, 9), sigma)
    assert bitwise_equal(got, expected)
    assert calls == [True, False]


def test_bands_cover_every_row_once_and_leave_small_images_whole():
    from kornia_halfpatch.fixes import _at_scale

    for height, width, reach in [(4096, 4096, 11), (4096, 4096, 3), (5000, 300, 9), (2048, 1024, 63)]:
        bands = _at_scale._bands(height, width, reach)
        assert len(bands) > 1 and bands[0][0] == 0 and bands[-1][1] == height
        assert all(a[1] == b[0] for a, b in zip(bands, bands[1:]))
        # each inner band's input (kept rows and a halo on each side) stays within a bounded workspace
        assert all((stop - start) * width <= max(_at_scale.BAND_PIXELS, 4 * reach * width) for start, stop in bands)
        assert all(stop - start <= max(_at_scale.BAND_ROWS, 4 * reach) for start, stop in bands)
    assert _at_scale._bands(1024, 1024, 11) == [(0, 512), (512, 1024)]  # at most 512 rows a band
    assert _at_scale._bands(2048, 2048, 11)[:2] == [(0, 512), (512, 1024)]  # 2^20 pixels a band
    assert _at_scale._bands(256, 256, 11) == [(0, 256)]  # a small image: whole
    assert _at_scale._bands(4096, 4096, None) == [(0, 4096)]  # a reach not known: the image whole
    assert _at_scale._bands(300, 8000, 100) == [(0, 300)]  # halos as tall as the image: whole


def _augmentations():
    augmentation = kornia.augmentation
    return {
        "RandomAffine": lambda: augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), (5.0, 10.0), p=0.6),
        "RandomRotation": lambda: augmentation.RandomRotation(40.0, p=0.6),
        "RandomShear": lambda: augmentation.RandomShear((-10.0, 10.0), p=0.6),
        "RandomTranslate": lambda: augmentation.RandomTranslate(0.2, 0.2, p=0.6),
        "RandomPerspective": lambda: augmentation.RandomPerspective(0.5, p=0.6),
        "RandomResizedCrop": lambda: augmentation.RandomResizedCrop((48, 50), p=1.0),
        "RandomResizedCrop resample": lambda: augmentation.RandomResizedCrop((48, 50), p=1.0, cropping_mode="resample"),
        "RandomCrop": lambda: augmentation.RandomCrop((64, 80), padding=3, p=1.0),
        "RandomCrop resample": lambda: augmentation.RandomCrop((64, 80), padding=3, p=1.0, cropping_mode="resample"),
        "RandomHorizontalFlip": lambda: augmentation.RandomHorizontalFlip(p=0.6),
        "RandomVerticalFlip": lambda: augmentation.RandomVerticalFlip(p=0.6),
        "RandomGaussianBlur": lambda: augmentation.RandomGaussianBlur((5, 5), (0.5, 2.0), p=0.6),
        "RandomGaussianBlur constant": lambda: augmentation.RandomGaussianBlur((9, 7), (0.5, 3.0), "constant", p=0.6),
        "RandomGaussianBlur circular": lambda: augmentation.RandomGaussianBlur((5, 5), (0.5, 2.0), "circular", p=0.6),
        # one drawn kernel side for the batch (3, 5 or 7 drawn per image), each image's angle
        "RandomMotionBlur": lambda: augmentation.RandomMotionBlur((3, 7), 35.0, 0.5, p=0.6),
        "RandomMotionBlur reflect bilinear": lambda: augmentation.RandomMotionBlur(
            (3, 9), 35.0, 0.5, border_type="reflect", resample="bilinear", p=0.6),
        "RandomMotionBlur circular": lambda: augmentation.RandomMotionBlur((3, 7), 35.0, 0.5, border_type="circular",
                                                                           p=0.6),
        "ColorJitter": lambda: augmentation.ColorJitter(0.2, 0.3, 0.3, 0.1, p=0.6),
        "ColorJiggle": lambda: augmentation.ColorJiggle(0.2, 0.3, 0.3, 0.1, p=0.6),
        "RandomBrightness": lambda: augmentation.RandomBrightness((0.8, 1.2), p=0.6),
        "RandomContrast": lambda: augmentation.RandomContrast((0.8, 1.2), p=0.6),
        "RandomSaturation": lambda: augmentation.RandomSaturation((0.7, 1.3), p=0.6),
        "RandomHue": lambda: augmentation.RandomHue((-0.2, 0.2), p=0.6),
        "RandomGamma": lambda: augmentation.RandomGamma((0.8, 1.2), (0.9, 1.1), p=0.6),
        "RandomGrayscale": lambda: augmentation.RandomGrayscale(p=0.6),
        "RandomPosterize": lambda: augmentation.RandomPosterize(3, p=0.6),
        "RandomSolarize": lambda: augmentation.RandomSolarize(0.1, 0.1, p=0.6),
        "RandomInvert": lambda: augmentation.RandomInvert(p=0.6),
        "RandomChannelShuffle": lambda: augmentation.RandomChannelShuffle(p=0.6),
        "RandomRGBShift": lambda: augmentation.RandomRGBShift(p=0.6),
        "Normalize": lambda: augmentation.Normalize(torch.tensor([0.4, 0.5, 0.6]), torch.tensor([0.2, 0.25, 0.3])),
        "RandomSharpness": lambda: augmentation.RandomSharpness(0.5, p=0.6),
        "RandomEqualize": lambda: augmentation.RandomEqualize(p=0.6),
        "RandomAutoContrast": lambda: augmentation.RandomAutoContrast(p=0.6),
        "RandomBoxBlur": lambda: augmentation.RandomBoxBlur((5, 5), p=0.6),
        "RandomBoxBlur replicate": lambda: augmentation.RandomBoxBlur((3, 7), "replicate", p=0.6),
        "RandomErasing": lambda: augmentation.RandomErasing(p=0.6),
        "RandomMedianBlur": lambda: augmentation.RandomMedianBlur((5, 3), p=0.6),
        "RandomChannelDropout": lambda: augmentation.RandomChannelDropout(p=0.6),
        "RandomRotation90": lambda: augmentation.RandomRotation90((-1, 2), p=0.6),
        "RandomGaussianIllumination": lambda: augmentation.RandomGaussianIllumination(p=0.6),
        "RandomLinearIllumination": lambda: augmentation.RandomLinearIllumination(p=0.6),
        "RandomLinearCornerIllumination": lambda: augmentation.RandomLinearCornerIllumination(p=0.6),
        "RandomSaltAndPepperNoise": lambda: augmentation.RandomSaltAndPepperNoise(p=0.6),
        "RandomThinPlateSpline": lambda: augmentation.RandomThinPlateSpline(p=0.6),
        "RandomFisheye": lambda: augmentation.RandomFisheye(
            torch.tensor([-0.3, 0.3]), torch.tensor([-0.3, 0.3]), torch.tensor([0.9, 1.0]), p=0.6),
        "RandomClahe": lambda: augmentation.RandomClahe(p=0.6),
        "RandomRain": lambda: augmentation.RandomRain(p=0.6),
        "RandomPlanckianJitter": lambda: augmentation.RandomPlanckianJitter(p=0.6),
        "RandomJPEG": lambda: augmentation.RandomJPEG(p=0.6),
        "RandomSnow": lambda: augmentation.RandomSnow(p=0.6),
        "CenterCrop": lambda: augmentation.CenterCrop((64, 80), p=1.0),
        "CenterCrop resample": lambda: augmentation.CenterCrop((64, 80), p=1.0, cropping_mode="resample"),
        "Resize": lambda: augmentation.Resize((48, 50)),
        "PadTo": lambda: augmentation.PadTo((100, 110)),
        "Denormalize": lambda: augmentation.Denormalize(torch.tensor([0.4, 0.5, 0.6]), torch.tensor([0.2, 0.25, 0.3])),
        # its noise drawn while applying (0.7.0-0.8.3): drawn first, each band given its rows
        "RandomGaussianNoise": lambda: augmentation.RandomGaussianNoise(mean=0.1, std=0.2, p=0.6),
        "RandomElasticTransform": lambda: augmentation.RandomElasticTransform(p=0.6),
    }


def _small_images_by_image(monkeypatch, path):
    """96x100 images taken as large: two a chunk ("chunks"), or one in bands of 16 rows ("bands")."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    pixels = 96 * 100
    monkeypatch.setattr(augmentation_pipeline, "CHUNKED_IMAGE_PIXELS", pixels)
    monkeypatch.setattr(augmentation_pipeline, "CHUNK_PIXELS", 2 * pixels if path == "chunks" else pixels)
    monkeypatch.setattr(_at_scale, "BROADCAST_GRID_PIXELS", pixels)
    monkeypatch.setattr(_at_scale, "GRID_BAND_PIXELS", 16 * 100)
    monkeypatch.setattr(augmentation_pipeline, "ROW_BAND_PIXELS", 16 * 100)
    monkeypatch.setattr(augmentation_pipeline, "HALO_BAND_PIXELS", 16 * 100)
    return pixels


def _spy_forwards(monkeypatch, entry="_forward_by_images", named=False):
    """The shapes of the images each release forward called by ``augmentation_pipeline``'s
    ``entry`` receives (with the module's class name: ``named``)."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    shapes = []
    real = getattr(augmentation_pipeline, entry)

    def spy(original, *rest):
        def counted(module, image, *args, **kwargs):
            shapes.append((type(module).__name__, tuple(image.shape)) if named else tuple(image.shape))
            return original(module, image, *args, **kwargs)

        counted.__qualname__ = original.__qualname__
        return real(counted, *rest)

    monkeypatch.setattr(augmentation_pipeline, entry, spy)
    return shapes


@functools.lru_cache(maxsize=None)
def _release_by_image(name, dtype):
    """The release's augmentation (its ``_params`` and matrix as its float32 call left them), that
    call's output on the test's half batch widened (or the error it raised) and the random stream
    after it: the same for chunks and bands."""
    x = _batch_by_image(dtype)
    with testing.isolated(only=()):
        reference = _augmentations()[name]()
        torch.manual_seed(5)
        try:
            expected = reference(x.float())
        except Exception as refused:  # noqa: BLE001 - asserted to be the patched call's error
            return reference, refused, None
        return reference, expected, torch.random.get_rng_state()


@pytest.mark.parametrize("path", ["chunks", "bands"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(_augmentations()))
def test_a_large_half_augmentation_image_by_image_is_the_release_float32_call_bitwise(name, dtype, path, monkeypatch):
    """An augmentation that treats each image alone, a large half batch, forward by forward of a
    few images (chunks) or of one image band by band (bands: of grid rows for a warp, where
    RandomPerspective builds no affine grid and takes its image whole; of rows for a per-pixel
    augmentation; whole images for the others); a flip, which only moves values, by the release's
    own forward on the half batch where the release takes the dtype: the output is the release's
    float32 call narrowed, bit for bit, and ``_params``, the random stream after the call,
    ``transform_matrix`` (narrowed) and a geometric one's inverse are the float32 call's. Seven
    images, p=0.6: applied and passed-through images in one chunk."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    if not hasattr(kornia.augmentation, name.split()[0]):
        pytest.skip(f"kornia {kornia.__version__} has no {name.split()[0]}")
    pixels = _small_images_by_image(monkeypatch, path)
    split = augmentation_pipeline.AUGMENTATIONS_BY_IMAGE[name.split()[0]].split
    if path == "bands" and split == "grid" and not _at_scale.takes_grid_bands(pixels):
        pytest.skip("the broadcast grid is not torch's here: no bands")
    shapes = _spy_forwards(monkeypatch)
    boxes = _poisoned_copies(monkeypatch)  # a crop's copies start as NaN: only what it reads is filled
    monkeypatch.setattr(augmentation_pipeline, "_REFUSED_HALF", set())  # asked again in this test
    x = _batch_by_image(dtype)
    reference, expected, stream = _release_by_image(name, dtype)
    geometric = isinstance(reference, kornia.augmentation.GeometricAugmentationBase2D)
    if isinstance(expected, Exception):  # 0.7.2's RandomJPEG: sides not multiples of 16
        refused = expected
        with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
            torch.manual_seed(5)
            with pytest.raises(type(refused)) as patched:
                _augmentations()[name]()(x)
        assert str(patched.value) == str(refused)  # the release's own error, the whole batch's
        return
    if name.split()[0] in augmentation_pipeline.COMPUTED_IN_HALF:
        # a filter that 0.9.0 convolves in half does so in the native mode (tested below)
        monkeypatch.setenv("KORNIA_HALFPATCH_CPU_HALF", "float32")
    with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
        augment = _augmentations()[name]()
        torch.manual_seed(5)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        assert got.dtype == dtype
        resized_in_float32_planes = name == "RandomResizedCrop" and (type(augment), dtype) not in \
            augmentation_pipeline._REFUSED_HALF
        if name == "RandomResizedCrop" and not resized_in_float32_planes and _at_scale.modes_see_indexing():
            assert_resized_within_bound(got, expected.to(dtype))  # the float32 chunks: resized from the rows read
        else:  # (the release's forward on the half batch, each crop's planes resized in float32: exact)
            assert bitwise_equal(got, expected.to(dtype)), name
        applied = augment._params["batch_prob"] > 0.5
        if "Crop" not in name and name not in ("Normalize", "Denormalize", "Resize", "PadTo"):
            # drawn for the whole batch or none (a crop: its size)
            assert 0 < int(applied.sum()) < 7  # both kinds of image in the batch
        assert set(augment._params) == set(reference._params)
        assert all(torch.equal(augment._params[k], reference._params[k]) for k in reference._params)
        if getattr(reference, "transform_matrix", None) is not None:
            assert augment.transform_matrix.dtype == dtype
            assert bitwise_equal(augment.transform_matrix, reference.transform_matrix.to(dtype))
        if geometric and reference.flags.get("cropping_mode", "resample") == "resample":  # a slice crop has none
            assert bitwise_equal(augment.inverse(got), reference.inverse(got.float()).to(dtype))
    row = augmentation_pipeline.AUGMENTATIONS_BY_IMAGE[name.split()[0]]
    refused = (type(augment), dtype) in augmentation_pipeline._REFUSED_HALF
    moved = augmentation_pipeline._moves_values(augment, row)  # a flip, a crop by indices: the half batch
    if resized_in_float32_planes:
        assert not boxes and shapes == [(7, 3, 96, 100)]  # the release's forward on the half batch, once
        return
    if row.sampled and not (moved and not refused) and _at_scale.modes_see_indexing():
        assert all(r[0] <= r[1] <= 96 and c[0] <= c[1] <= 100 for r, c in boxes)
        if name == "RandomResizedCrop":  # resized from the half rows: the copies never filled
            assert not boxes
        else:
            assert boxes
    else:
        assert not boxes
    checked = augmentation_pipeline.CHUNKS_CHECKED.get(name.split()[0])
    if checked is not None and not checked(augment, x, 1 if path == "bands" else 2):
        assert shapes == []  # a chunk would not compute what the batch does here: the whole widened call
        return
    if (moved or name == "RandomResizedCrop") and refused:
        # the release refused the half image (bfloat16 on 0.7.0-0.8.2) before it drew or moved anything
        assert shapes[0] == (7, 3, 96, 100)
        shapes = shapes[1:]
    if moved and not refused:
        assert shapes == [(7, 3, 96, 100)]  # the release's own forward on the half batch, whole
    elif name in augmentation_pipeline.CHANNELS_SCALED:
        assert shapes == [(7, 3, 1, 3)]  # one probe of a pixel a value: the half planes scaled by its weights
    elif split == "batch":
        assert shapes == [(7, 3, 96, 100)]  # parameters that index the batch: the whole float32 call
    elif path == "chunks":
        assert shapes == [(2, 3, 96, 100)] * 3 + [(1, 3, 96, 100)]
    elif split == "grid":
        bands = 1 if name == "RandomPerspective" else 6  # 16 rows a band
        expected_shapes = [(1, 3, 96, 100)] * sum(bands if a else 1 for a in applied.tolist())
        assert shapes == expected_shapes
    elif augmentation_pipeline._halo_rows(augment, row, augment._params) is not None:
        # a filter: 16 rows a band and half its (largest drawn) kernel more on either side, inside the image
        halo = (max(augment.flags["kernel_size"]) // 2 if "kernel_size" in augment.flags
                else int(augment._params["ksize_factor"].max()) // 2 if "ksize_factor" in augment._params else 1)
        # (four images' rows a call, then three)
        assert shapes == [(n, 3, min(start + 16 + halo, 96) - max(start - halo, 0), 100)
                          for n in (4, 3) for start in range(0, 96, 16)]
    elif split == "rows":
        assert shapes == [(4, 3, 16, 100)] * 6 + [(3, 3, 16, 100)] * 6  # four images' 16 rows a call, then three
    else:
        assert shapes == [(1, 3, 96, 100)] * 7


def _augmented_in_mode(make, x, mode, stream, params):
    """The augmentation's output and transform matrix under seed 5 in ``cpu_half`` mode ``mode``,
    checked to leave the random stream and ``_params`` as the float32 call does."""
    with testing.isolated(only=ONLY + ["augmentation_pipeline"], cpu_half=mode):
        augment = make()
        torch.manual_seed(5)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        assert all(torch.equal(augment._params[k], params[k]) for k in params)
        return got, getattr(augment, "transform_matrix", None)


@pytest.mark.parametrize("border, sides", [("constant", (3, 9)), ("reflect", (3, 9)), ("reflect", (15, 17))])
@pytest.mark.parametrize("path", ["whole", "bands"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_motion_blur_convolves_in_half_where_the_dtype_is_native(dtype, path, border, sides, monkeypatch):
    """RandomMotionBlur (``COMPUTED_IN_HALF``): kornia 0.9.0 convolves a half image in half with
    the float32-built motion kernel narrowed (its half output is exactly that, measured against
    0.9.0). In the native mode the shim does the same, band by band on the half image or in its
    float32 evaluation of a small one: within 1 half ulp of the release's own ``motion_blur`` of
    the half images with the drawn parameters (the convolution's layout may round otherwise),
    images not applied untouched, the parameters and the stream the float32 call's; the
    convolutions saw the half dtype. In the float32 mode it is the float32 call narrowed, bitwise.
    Sides of 15 and more: the half convolution in NCHW (the bfloat16 channels-last one hangs)."""
    from kornia_halfpatch.fixes import augmentation_pipeline, filters_conv_hang

    if path == "bands":
        _small_images_by_image(monkeypatch, path)
    seen = []
    real = filters_conv_hang.native_half_arithmetic

    def spy():
        seen.append(real())
        return seen[-1]

    monkeypatch.setattr(filters_conv_hang, "native_half_arithmetic", spy)
    monkeypatch.setattr(augmentation_pipeline, "native_half_arithmetic", spy)
    x = _batch_by_image(dtype)

    def make():
        return kornia.augmentation.RandomMotionBlur(sides, 35.0, 0.5, border_type=border, p=0.6)

    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(5)
        float32_call = reference(x.float())
        stream = torch.random.get_rng_state()
        params = reference._params
        applied = params["batch_prob"] > 0.5
        assert 0 < int(applied.sum()) < 7
        with widening_missing_kernels():  # torch 2.1 has no float16 CPU convolution
            side = int(params["ksize_factor"][int(params["idx"][0])])
            expected = x.clone()
            expected[applied] = kornia.filters.motion_blur(x[applied], side, params["angle_factor"],
                                                           params["direction_factor"], border)
    for mode in MODES:
        seen.clear()
        got, _ = _augmented_in_mode(make, x, mode, stream, params)
        assert got.dtype == dtype
        if mode == "float32":
            assert bitwise_equal(got, float32_call.to(dtype))
            assert seen and not any(seen)
            continue
        assert seen and set(seen) == {dtype}
        assert bitwise_equal(got[~applied], x[~applied])
        apart = ulps_apart(got, expected)
        assert apart.max() <= 1 and (apart > 0).float().mean() <= 1e-3
        # the half computation, not the float32 one narrowed (which differs in 10-20% of the values)
        assert (got != float32_call.to(dtype)).float().mean() > 0.01


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_resized_crop_resizes_in_half_where_the_dtype_is_native(dtype, monkeypatch):
    """RandomResizedCrop by indices (``COMPUTED_IN_HALF``): kornia 0.9.0 resizes each half crop by
    torch's half bilinear kernel (its output is exactly that, measured on 0.7.0, 0.8.2 and 0.8.3's
    draws). In the native mode a large half batch takes the release's forward on the half batch:
    each output image is torch's half ``interpolate`` of the crop its drawn box gives, bit for bit;
    the parameters and the stream are the float32 call's, the transform matrices within 3 half
    ulps of its (0.9.0's are as far). In the float32 mode: the release's forward on the half batch
    too (where the release takes the dtype), each crop resized plane by plane by torch's float32
    kernel on the widened plane: the float32 call narrowed, bit for bit; the matrices its narrowed."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    _small_images_by_image(monkeypatch, "chunks")
    monkeypatch.setattr(augmentation_pipeline, "_REFUSED_HALF", set())
    forwards = []
    real = augmentation_pipeline._release_half_forward

    def spy(original, module, image, params):
        result = real(original, module, image, params)
        if result is not None:
            forwards.append((image.dtype, tuple(image.shape)))
        return result

    monkeypatch.setattr(augmentation_pipeline, "_release_half_forward", spy)
    x = _batch_by_image(dtype)

    def make():
        return kornia.augmentation.RandomResizedCrop((48, 50), p=1.0)

    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(5)
        float32_call = reference(x.float())
        stream = torch.random.get_rng_state()
        params, matrices = reference._params, reference.transform_matrix
    boxes = params["src"].round().long()  # corners (x, y): top-left first, bottom-right third
    crops = [x[i : i + 1, :, boxes[i, 0, 1] : boxes[i, 2, 1] + 1, boxes[i, 0, 0] : boxes[i, 2, 0] + 1] for i in range(7)]
    try:
        expected = torch.cat([F.interpolate(crop, size=(48, 50), mode="bilinear", align_corners=True)
                              for crop in crops])
    except RuntimeError:
        # no half CPU interpolate in this torch (2.1): the shim's torch_ops row resizes the half
        # crop in float32, narrowed once
        expected = torch.cat([F.interpolate(crop.float(), size=(48, 50), mode="bilinear", align_corners=True)
                              for crop in crops]).to(dtype)
    for mode in MODES:
        got, got_matrices = _augmented_in_mode(make, x, mode, stream, params)
        assert got.dtype == dtype and got_matrices.dtype == dtype
        if mode == "float32":
            refused = (kornia.augmentation.RandomResizedCrop, dtype) in augmentation_pipeline._REFUSED_HALF
            assert forwards == ([] if refused else [(dtype, (7, 3, 96, 100))])
            if refused:  # bfloat16 on 0.7.0-0.8.2: the float32 chunks, resized from the rows read
                assert_resized_within_bound(got, float32_call.to(dtype))
            else:
                assert bitwise_equal(got, float32_call.to(dtype))
            assert bitwise_equal(got_matrices, matrices.to(dtype))
            forwards.clear()
            continue
        assert bitwise_equal(got, expected)
        assert forwards == [(dtype, (7, 3, 96, 100))]  # the release's forward on the half batch, once
        ulp = torch.finfo(dtype).eps
        large = matrices.abs() > 1e-6
        relative = (got_matrices.double() - matrices.double()).abs()[large] / matrices.abs().double()[large]
        assert relative.max() <= 3 * ulp
        assert (got_matrices.double()[~large].abs() <= 1e-6).all()


@pytest.mark.parametrize("planes", ["whole", "above the workspace"])
# nearest with align_corners=False: torch's own error, in the release and patched alike
@pytest.mark.parametrize("resample, align_corners", [("bilinear", True), ("bilinear", False), ("bicubic", True),
                                                     ("nearest", None), ("nearest", False)])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_resized_crop_in_the_float32_mode_is_the_float32_call_on_the_half_batch(dtype, resample, align_corners,
                                                                                 planes, monkeypatch):
    """RandomResizedCrop by indices in the float32 mode (float16 on a CPU without ``avx512_fp16``):
    the release's forward on the half batch, each crop's ``interpolate`` answered plane by plane
    by torch's float32 kernel on the widened plane (``HalfCropsResizedInFloat32``). The crop by
    indices only copies, so the output is the release's float32 call narrowed, bit for bit, for
    every interpolation; a plane above the workspace with aligned bilinear corners is resized from
    its rows read, within that bound. The matrices, parameters and stream are the float32 call's;
    no float32 batch is made (the forward's image is the half batch)."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    _small_images_by_image(monkeypatch, "chunks")
    monkeypatch.setattr(augmentation_pipeline, "_REFUSED_HALF", set())
    if planes == "above the workspace":
        monkeypatch.setattr(_at_scale, "RESIZED_PLANE_PIXELS", 0)
    seen = []
    real = augmentation_pipeline._release_half_forward

    def spy(original, module, image, params):
        seen.append(image.dtype)
        return real(original, module, image, params)

    monkeypatch.setattr(augmentation_pipeline, "_release_half_forward", spy)
    from_rows = []
    real_rows = _at_scale.resized_from_rows_read

    def rows_spy(interpolate, half, args, kwargs):
        resized = real_rows(interpolate, half, args, kwargs)
        from_rows.append((half.dtype, resized is not None))
        return resized

    monkeypatch.setattr(_at_scale, "resized_from_rows_read", rows_spy)
    x = torch.cat([image(7, 3, 96, seed=8), image(7, 3, 96, seed=9)[..., :4]], -1).to(dtype)  # 96 x 100

    def make():
        # scales both sides of the output: crops larger and smaller than it
        return kornia.augmentation.RandomResizedCrop((48, 50), (0.05, 1.0), resample=resample,
                                                     align_corners=align_corners, p=1.0)

    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(5)
        try:
            float32_call = reference(x.float())
        except Exception as refused:  # noqa: BLE001 - the release's own error for this interpolation
            with testing.isolated(only=ONLY + ["augmentation_pipeline"], cpu_half="float32"):
                torch.manual_seed(5)
                with pytest.raises(type(refused)):
                    make()(x)
            return
        stream = torch.random.get_rng_state()
        params, matrices = reference._params, reference.transform_matrix
    assert params["src"].shape[0] == 7 and float32_call.shape == (7, 3, 48, 50)
    got, got_matrices = _augmented_in_mode(make, x, "float32", stream, params)
    refused = (kornia.augmentation.RandomResizedCrop, dtype) in augmentation_pipeline._REFUSED_HALF
    assert seen == [dtype]  # the half batch, once (refused: bfloat16 on 0.7.0-0.8.2, the float32 chunks)
    assert got.dtype == dtype and got_matrices.dtype == dtype
    assert bitwise_equal(got_matrices, matrices.to(dtype))
    try:
        F.interpolate(torch.zeros(1, 1, 2, 2, dtype=dtype), size=(3, 3), mode="bilinear", align_corners=True)
        torch_resizes_half = True
    except RuntimeError:  # torch 2.1: no half CPU interpolate; the shim's torch_ops row widens the crop
        torch_resizes_half = False
    rows_read = ((refused or (planes == "above the workspace" and torch_resizes_half))
                 and (resample, align_corners) == ("bilinear", True))
    if rows_read:
        assert_resized_within_bound(got, float32_call.to(dtype))
    else:
        assert bitwise_equal(got, float32_call.to(dtype))
    # the half crops resized from their rows read above the workspace only (refused: the float32 chunks')
    assert any(done for _, done in from_rows) == rows_read
    assert all(kind == (torch.float32 if refused else dtype) for kind, _ in from_rows)


def _containers():
    augmentation = kornia.augmentation
    return {
        "one warp": lambda: augmentation.AugmentationSequential(
            augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), (5.0, 10.0), p=0.6)),
        "two warps": lambda: augmentation.AugmentationSequential(
            augmentation.RandomRotation(40.0, p=0.6), augmentation.RandomAffine(10.0, (0.1, 0.1), p=0.5)),
        "random_apply": lambda: augmentation.AugmentationSequential(
            augmentation.RandomTranslate(0.2, 0.2, p=0.7), augmentation.RandomShear((-10.0, 10.0), p=0.7),
            augmentation.RandomRotation(20.0, p=0.7), random_apply=2),
        "ImageSequential": lambda: augmentation.ImageSequential(
            augmentation.RandomShear((-10.0, 10.0), p=0.6), augmentation.RandomPerspective(0.5, p=0.6)),
        "a training pipeline": lambda: augmentation.AugmentationSequential(
            augmentation.RandomResizedCrop((64, 70), p=1.0, cropping_mode="resample"),
            augmentation.RandomHorizontalFlip(p=0.5), augmentation.ColorJiggle(0.2, 0.2, 0.2, 0.05, p=0.8),
            augmentation.RandomGrayscale(p=0.3)),
        "per-pixel children": lambda: augmentation.AugmentationSequential(
            augmentation.ColorJiggle(0.2, 0.3, 0.3, 0.1, p=0.6), augmentation.RandomGamma((0.8, 1.2), p=0.6)),
        # an image-sized parameter (the gradient) is not cut into the container's bands: whole images
        "a per-pixel child with an image-sized parameter": lambda: augmentation.AugmentationSequential(
            augmentation.RandomGamma((0.8, 1.2), p=0.6), augmentation.RandomLinearIllumination(p=0.6)),
    }


def _assert_same_state(got, expected, dtype, where):
    """Every submodule's ``_params``, ``_transform_matrix`` and ``_transform_matrices``: the float32
    call's (its matrices narrowed)."""
    for (name, sub), reference in zip(got.named_modules(), expected.modules()):
        mine, theirs = sub.__dict__, reference.__dict__
        for key in ("_transform_matrix", "_transform_matrices"):
            a, b = mine.get(key), theirs.get(key)
            if isinstance(b, torch.Tensor):
                assert isinstance(a, torch.Tensor) and bitwise_equal(a, b.to(dtype)), (where, name, key)
            elif isinstance(b, list):
                assert isinstance(a, list) and len(a) == len(b), (where, name, key)
                assert all(bitwise_equal(m, n.to(dtype)) for m, n in zip(a, b)), (where, name, key)
            else:
                assert a is None and b is None, (where, name, key)
        a, b = mine.get("_params"), theirs.get("_params")
        if isinstance(b, list):
            assert [item.name for item in a] == [item.name for item in b], (where, name)
            pairs = [(x.data, y.data) for x, y in zip(a, b)]
        else:
            pairs = [(a, b)]
        for x, y in pairs:
            if y is None:
                assert x is None, (where, name)
                continue
            assert set(x) == set(y), (where, name)
            for key in y:
                same = torch.equal(x[key], y[key]) if isinstance(y[key], torch.Tensor) else x[key] == y[key]
                assert same, (where, name, key)


def _assert_container_is_the_release_float32_call(make, x, dtype, seed, inverse=False):
    """``make()``'s call on the half ``x``, patched, against the release's float32 call of the
    widened ``x`` under ``seed``: the output narrowed, every submodule's parameters and matrices,
    the lazily composed ``transform_matrix`` (read on the release's first) and the random stream,
    bit for bit; the inverse too where there is a matrix, or ``inverse``. (the release's module,
    the patched output)"""
    reference, expected, stream = _release_float32_call(make, x, seed)
    with testing.isolated(only=()):
        expected_matrix = getattr(reference, "transform_matrix", None)  # VideoSequential has none
    with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
        augment = make()
        torch.manual_seed(seed)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        assert got.dtype == dtype and bitwise_equal(got, expected.to(dtype))
        _assert_same_state(augment, reference, dtype, type(reference).__name__)
        if expected_matrix is not None:
            assert bitwise_equal(augment.transform_matrix, expected_matrix.to(dtype))
        if expected_matrix is not None or inverse:  # the inverse reads the state the call left
            assert bitwise_equal(augment.inverse(got), reference.inverse(got.float()).to(dtype))
    return reference, got


@pytest.mark.parametrize("path", ["chunks", "bands"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(_containers()))
def test_a_container_image_by_image_is_the_release_float32_call_bitwise(name, dtype, path, monkeypatch):
    """AugmentationSequential and ImageSequential of augmentations that treat each image alone (warps,
    crops, flips, colour), a large half batch: each
    chunk's forward given every child's rows of the parameters drawn once. The output, every
    submodule's parameters and matrices, the composed ``transform_matrix``, the inverse and the
    random stream are the release's float32 call's (narrowed). A container of several warps takes
    whole images (no bands: the second warps the first's whole output); of one, bands of grid
    rows; of per-pixel children only, bands of rows."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    if "image-sized" in name and not hasattr(kornia.augmentation, "RandomLinearIllumination"):
        pytest.skip(f"kornia {kornia.__version__} has no RandomLinearIllumination")
    pixels = _small_images_by_image(monkeypatch, path)
    if path == "bands" and not _at_scale.takes_grid_bands(pixels):
        pytest.skip("the broadcast grid is not torch's here: no bands")
    shapes = _spy_forwards(monkeypatch)
    boxes = _poisoned_copies(monkeypatch)  # a first child's crop reads a copy that starts as NaN
    x = _batch_by_image(dtype)
    reference, _ = _assert_container_is_the_release_float32_call(_containers()[name], x, dtype, 5)
    if name == "a training pipeline" and _at_scale.modes_see_indexing():
        # its first child a crop: the container's copies filled where it samples
        assert boxes and sum((r[1] - r[0]) * (c[1] - c[0]) for r, c in boxes) < 7 * 96 * 100
    else:
        assert not boxes
    whole_images = [shape for shape in shapes if shape[0] == 7]
    assert not whole_images, shapes  # image by image, never the whole batch
    several = len(reference._params) > 1
    if path == "bands" and name == "per-pixel children":
        # bands of rows (four images' a call, then three): every child per pixel
        assert shapes == [(4, 3, 16, 100)] * 6 + [(3, 3, 16, 100)] * 6
    elif path == "chunks" or several:
        per_call = 2 if path == "chunks" else 1
        assert shapes[: -(-7 // per_call)] == [(per_call, 3, 96, 100)] * (7 // per_call) + [(1, 3, 96, 100)] * (7 % per_call)


def _videos():
    augmentation = kornia.augmentation
    return {
        "warp and colour": lambda: augmentation.VideoSequential(
            augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), p=0.6),
            augmentation.ColorJiggle(0.2, 0.3, 0.3, 0.1, p=0.6), data_format="BTCHW", same_on_frame=True),
        "colour, each frame its own": lambda: augmentation.VideoSequential(
            augmentation.ColorJiggle(0.2, 0.3, 0.3, 0.1, p=0.6), augmentation.RandomGamma((0.8, 1.2), p=0.6),
            data_format="BCTHW", same_on_frame=False),
        "crop and flip": lambda: augmentation.VideoSequential(
            augmentation.RandomCrop((64, 80), p=1.0), augmentation.RandomHorizontalFlip(p=0.6),
            data_format="BTCHW", same_on_frame=True),
    }


@pytest.mark.parametrize("path", ["chunks", "bands"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(_videos()))
def test_a_large_half_video_frame_by_frame_is_the_release_float32_call_bitwise(name, dtype, path, monkeypatch):
    """VideoSequential of augmentations that treat each image alone, a large half video
    (``VIDEOS_BY_FRAMES``): the parameters drawn once for the videos, then a few frames of one
    video a call (two here), or, where every child is per pixel, bands of 16 rows of up to four
    frames, each given every child's rows of those frames. The output, every submodule's
    parameters and matrices and the random stream are the release's float32 call's (narrowed), in
    both data formats, one draw for all frames or each frame its own; no call sees a whole video."""
    _small_images_by_image(monkeypatch, path)
    calls = _spy_forwards(monkeypatch, "_video_by_frames")
    frames = torch.stack([torch.cat([image(5, 3, 96, seed=6 + k), image(5, 3, 96, seed=9 + k)[..., :4]], -1)
                          for k in range(3)])  # 3 videos of 5 frames, 96 x 100
    make = _videos()[name]
    x = (frames.transpose(1, 2) if make().data_format == "BCTHW" else frames).contiguous().to(dtype)
    warps = name == "warp and colour"
    reference, _ = _assert_container_is_the_release_float32_call(make, x, dtype, 5, inverse=warps)
    axis = 2 if make().data_format == "BCTHW" else 1
    if any(item.data["batch_prob"].shape != (15,) for item in reference._params):
        # 0.7.0 repeats a RandomCrop's parameters across frames only where it reads them: not one
        # row per frame, so the whole widened call with the parameters drawn
        assert calls == [tuple(x.shape)]
        return
    assert calls and all(shape[0] == 1 for shape in calls)  # never the whole video
    per_pixel = name.startswith("colour")
    if path == "bands" and per_pixel:
        # 16 rows of four frames, then of the fifth, video by video
        assert [(shape[axis], shape[-2]) for shape in calls] == ([(4, 16)] * 6 + [(1, 16)] * 6) * 3
    else:
        per_call = 2 if path == "chunks" else 1
        assert [shape[axis] for shape in calls] == ([per_call] * (5 // per_call) + [1] * (5 % per_call)) * 3
        assert all(shape[-2:] == (96, 100) for shape in calls)


def _warp_then_colour():
    augmentation = kornia.augmentation

    def children():
        return (augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), p=0.6),
                augmentation.ColorJiggle(0.2, 0.3, 0.3, 0.1, p=0.6), augmentation.RandomGamma((0.8, 1.2), p=0.6))

    return {
        "AugmentationSequential": lambda: augmentation.AugmentationSequential(*children()),
        "VideoSequential": lambda: augmentation.VideoSequential(*children(), data_format="BTCHW", same_on_frame=True),
    }


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(_warp_then_colour()))
def test_per_pixel_children_after_a_warp_go_in_float32_bands_of_rows(name, dtype, monkeypatch):
    """A container of a warp and per-pixel children, a large half batch (or video) two images a
    chunk: inside each chunk's float32 forward the per-pixel children (ColorJiggle, RandomGamma)
    take the warped float32 images in bands of 16 rows, each given the chunk's parameters
    (``_child_in_row_bands``). The output, every submodule's parameters and matrices, the inverse
    and the random stream are the release's float32 call's (narrowed); a user's float32 call of the
    same container never goes in bands (its bits are the release's call's, not merely equal)."""
    _small_images_by_image(monkeypatch, "chunks")
    bands = _spy_forwards(monkeypatch, "_child_in_row_bands", named=True)
    x = torch.cat([image(6, 3, 96, seed=2), image(6, 3, 96, seed=3)[..., :4]], -1)  # 96 x 100
    x = (x.view(2, 3, 3, 96, 100) if name == "VideoSequential" else x).to(dtype)
    make = _warp_then_colour()[name]
    _assert_container_is_the_release_float32_call(make, x, dtype, 7, inverse=True)
    # two images a chunk, each per-pixel child in six bands of 16 rows; a video's chunks are
    # frames of one video (3 frames: two, then one, whose pixels are below a chunk's: whole)
    per_chunk = [(child, (2, 3, 16, 100)) for child in ("ColorJiggle", "RandomGamma") for _ in range(6)]
    assert bands == per_chunk * (2 if name == "VideoSequential" else 3)
    bands.clear()
    _, expected, _ = _release_float32_call(make, x, 7)
    with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
        torch.manual_seed(7)
        own = make()(x.float())  # the user's float32 call: never in bands
    assert not bands and bitwise_equal(own, expected)


def test_a_per_pixel_child_whose_parameters_want_a_gradient_keeps_its_whole_call(monkeypatch):
    """A container given parameters of which one wants a gradient (ColorJiggle's brightness
    factors): the whole widened call, its children whole too (no bands), and the factors' gradient
    is the release's float32 call's."""
    _small_images_by_image(monkeypatch, "chunks")
    bands = _spy_forwards(monkeypatch, "_child_in_row_bands", named=True)
    augmentation = kornia.augmentation

    def make():
        return augmentation.AugmentationSequential(augmentation.RandomAffine(20.0, p=1.0),
                                                   augmentation.ColorJiggle(0.3, 0.0, 0.0, 0.0, p=1.0))

    x = torch.cat([image(6, 3, 96, seed=2), image(6, 3, 96, seed=3)[..., :4]], -1).to(torch.float16)
    reference, _, _ = _release_float32_call(make, x, 3)

    def gradient(image_in, patched):
        params = [type(item)(item.name, {k: v.clone() for k, v in item.data.items()}) for item in reference._params]
        factor = params[1].data["brightness_factor"].requires_grad_()
        with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"] if patched else ()):
            out = make()(image_in, params=params)
        out.float().sum().backward()
        return out, factor.grad

    expected, expected_grad = gradient(x.float(), False)
    got, grad = gradient(x, True)
    assert got.dtype == torch.float16 and bitwise_equal(got.detach(), expected.detach().half())
    assert torch.equal(grad, expected_grad) and not bands


@pytest.mark.parametrize("policy", ["RandAugment", "AutoAugment"])
def test_a_policy_s_per_pixel_operations_go_in_float32_bands_of_rows(policy, monkeypatch):
    """AutoAugment and RandAugment (0.7.4+) run on the widened half batch; inside, an operation
    that computes each pixel from its own (posterize, solarize, saturation, invert) is called with
    its parameters on the float32 batch and goes in bands of rows (``_child_in_row_bands``). Over
    six seeds the output is the release's float32 call narrowed, bit for bit, and some operation
    went in bands."""
    auto = pytest.importorskip("kornia.augmentation.auto")
    from kornia_halfpatch.fixes import augmentation_pipeline

    _small_images_by_image(monkeypatch, "chunks")
    banded = []
    real = augmentation_pipeline._child_in_row_bands

    def spy(*arguments):
        result = real(*arguments)
        banded.extend([type(arguments[1]).__name__] if result is not None else [])
        return result

    monkeypatch.setattr(augmentation_pipeline, "_child_in_row_bands", spy)
    make = (lambda: auto.RandAugment(n=3, m=10)) if policy == "RandAugment" else auto.AutoAugment
    x = torch.cat([image(6, 3, 96, seed=2), image(6, 3, 96, seed=3)[..., :4]], -1).to(torch.float16)
    for seed in range(6):
        with testing.isolated(only=()):
            torch.manual_seed(seed)
            expected = make()(x.float())
        with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
            torch.manual_seed(seed)
            got = make()(x)
        assert got.dtype == torch.float16 and bitwise_equal(got, expected.half()), (policy, seed)
    assert banded, policy


def _spy_mix_forwards(monkeypatch, dtypes=False):
    """The shapes of the images each release forward of a mix augmentation's entry receives (with
    their dtypes: ``dtypes``)."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    shapes = []
    real = augmentation_pipeline._mix_in_row_bands

    def spy(original, *rest):
        def counted(module, *images, **kwargs):
            shapes.append((tuple(images[0].shape), images[0].dtype) if dtypes else tuple(images[0].shape))
            return original(module, *images, **kwargs)

        counted.__qualname__ = original.__qualname__
        counted.__module__ = original.__module__
        return real(counted, *rest)

    monkeypatch.setattr(augmentation_pipeline, "_mix_in_row_bands", spy)
    return shapes


@pytest.mark.parametrize("p", [1.0, 0.5])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_mixup_in_bands_of_rows_is_the_release_float32_call_bitwise(dtype, p, monkeypatch):
    """RandomMixUpV2 mixes each pixel with the same pixel of another image of the batch: a large
    half batch goes band by band of rows of the whole batch (16 rows here), each band the release's
    float32 forward with the parameters drawn once. The output is the release's float32 call
    narrowed, bit for bit, and ``_params`` (with its ``"dtype"``) and the random stream after the
    call are the float32 call's (its ``p`` draws for the whole batch: mixed or not). Given
    parameters, data keys or labels: the whole call."""
    _small_images_by_image(monkeypatch, "bands")
    shapes = _spy_mix_forwards(monkeypatch)
    x = _batch_by_image(dtype)
    with testing.isolated(only=()):
        reference = kornia.augmentation.RandomMixUpV2(p=p)
        torch.manual_seed(5)
        expected = reference(x.float())
        stream = torch.random.get_rng_state()
    with testing.isolated(only=["augmentation_pipeline"]):
        augment = kornia.augmentation.RandomMixUpV2(p=p)
        torch.manual_seed(5)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        assert got.dtype == dtype and bitwise_equal(got, expected.to(dtype))
        assert set(augment._params) == set(reference._params)
        assert all(torch.equal(augment._params[k], reference._params[k]) for k in reference._params)
        assert shapes == [(7, 3, 16, 100)] * 6
        # given parameters: the whole widened call with them (no band)
        shapes.clear()
        again = augment(x, params=augment._params)
        assert bitwise_equal(again, got) and shapes == []
        # the labels beside the image: the whole call, the labels the release's
        labels = torch.arange(7)
        shapes.clear()
        torch.manual_seed(5)
        mixed, mixed_labels = augment(x, labels, data_keys=["input", "class"])
        assert bitwise_equal(mixed, got) and shapes == []
    with testing.isolated(only=()):
        torch.manual_seed(5)
        _, expected_labels = reference(x.float(), labels, data_keys=["input", "class"])
    assert mixed_labels.dtype == torch.float32 and torch.equal(mixed_labels, expected_labels)  # as 0.9.0: float32


@pytest.mark.parametrize("p", [1.0, 0.5])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_cutmix_moves_the_half_values_as_the_release_float32_call(dtype, p, monkeypatch):
    """RandomCutMixV2 only copies each drawn box's pixels from the paired image: the release's
    forward of the images' numbers (one float16 channel), with the parameters drawn for the
    float32 call, says which image each pixel comes from, and each half image is written from
    those (no float32 copy; without it, the release's forward on the half batch itself). The output is the release's float32 call narrowed, bit for
    bit; ``_params`` (with its float32 ``"dtype"``) and the random stream are the float32 call's.
    Two cut boxes (``cut_size`` and ``num_mix``) overlap and reach the borders; a NaN is moved as
    a NaN (its half bits: not the float32 call's 0xFFFF for bfloat16). A bfloat16 image,
    which 0.7.0-0.8.2 refuse, is moved as the same bits viewed as float16."""
    _small_images_by_image(monkeypatch, "bands")
    shapes = _spy_mix_forwards(monkeypatch)
    x = _batch_by_image(dtype)
    x[0, 0, 0, 0] = float("nan")  # copied as it is, wherever it goes
    make = lambda: kornia.augmentation.RandomCutMixV2(num_mix=2, cut_size=(0.3, 0.7), p=p)
    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(5)
        expected = reference(x.float())
        stream = torch.random.get_rng_state()
    with testing.isolated(only=["augmentation_pipeline"]):
        augment = make()
        torch.manual_seed(5)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        # A NaN is moved with its half bits (the float32 call narrows a bfloat16 NaN to 0xFFFF).
        nan = torch.isnan(got)
        assert got.dtype == dtype and torch.equal(nan, torch.isnan(expected)) and bool(nan.any())
        assert bitwise_equal(torch.where(nan, 0.0, got), torch.where(nan, 0.0, expected).to(dtype))
        if p == 1.0:
            assert not bitwise_equal(got, x)  # boxes were pasted
        assert set(augment._params) == set(reference._params)
        assert all(torch.equal(augment._params[k], reference._params[k]) for k in reference._params)
        # each image's number, one float16 channel: which image each pixel comes from (nothing
        # mixed, no pairs drawn: the release's forward on the half batch, which returns it)
        mixed = bool((reference._params["batch_prob"] > 0.5).any())
        assert mixed or p < 1.0
        assert shapes == ([(7, 1, 96, 100)] if mixed else [(7, 3, 96, 100)])
        # without it: the release's forward on the half batch itself, the same output
        from kornia_halfpatch.fixes import augmentation_pipeline

        monkeypatch.setattr(augmentation_pipeline, "MIXES_BY_SOURCES", frozenset())
        shapes.clear()
        torch.manual_seed(5)
        assert bitwise_equal(augment(x), got) and shapes == [(7, 3, 96, 100)]
        labels = torch.arange(7)
        shapes.clear()
        torch.manual_seed(5)
        mixed, mixed_labels = augment(x, labels, data_keys=["input", "class"])  # labels: the whole call
        assert torch.equal(torch.where(nan, 0.0, mixed), torch.where(nan, 0.0, got)) and shapes == []
    with testing.isolated(only=()):
        torch.manual_seed(5)
        _, expected_labels = reference(x.float(), labels, data_keys=["input", "class"])
    assert mixed_labels.dtype == torch.float32 and torch.equal(mixed_labels, expected_labels)


def _mixed_as_the_release(make, x, seed=5):
    """``make()``'s call on ``x``, patched, against the release's float32 call narrowed: bitwise,
    NaNs moved as NaNs; the random stream and ``_params`` the float32 call's. The patched output;
    None where the release's float32 call raises (0.7.x's RandomJigsaw with a grid of unequal
    sides), and the patched call raised the same error."""
    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(seed)
        try:
            expected = reference(x.float())
        except RuntimeError as error:
            with testing.isolated(only=["augmentation_pipeline"]), pytest.raises(RuntimeError) as patched:
                torch.manual_seed(seed)
                make()(x)
            assert str(patched.value) == str(error)
            return None
        stream = torch.random.get_rng_state()
    with testing.isolated(only=["augmentation_pipeline"]):
        augment = make()
        torch.manual_seed(seed)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
        assert set(augment._params) == set(reference._params)
        assert all(torch.equal(augment._params[k], reference._params[k]) for k in reference._params)
    nan = torch.isnan(got)
    assert got.dtype == x.dtype and got.shape == expected.shape and torch.equal(nan, torch.isnan(expected))
    assert bitwise_equal(torch.where(nan, 0.0, got), torch.where(nan, 0.0, expected).to(x.dtype))
    return got


@pytest.mark.parametrize("grid", [(4, 4), (5, 2)])
@pytest.mark.parametrize("p", [1.0, 0.5])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_jigsaw_copies_each_piece_where_the_release_puts_it(dtype, p, grid, monkeypatch):
    """RandomJigsaw only moves the pieces of its grid: the release's forward is called once, on an
    image of one pixel a piece holding its number (float32, the drawn parameters), and each half
    piece is copied where that call put its number. The output is the release's float32 call
    narrowed, bit for bit (a NaN moved with its half bits); images not applied stay in place; the
    random stream and ``_params`` are the float32 call's. Past ``PIECE_COPIES`` copies, the
    release's forward on the half batch, the same output. A grid that does not divide the image
    raises the release's own error."""
    _small_images_by_image(monkeypatch, "bands")
    shapes = _spy_mix_forwards(monkeypatch, dtypes=True)
    x = image(7, 3, 100, seed=6).to(dtype)
    x[0, 0, 0, 0] = float("nan")
    got = _mixed_as_the_release(lambda: kornia.augmentation.RandomJigsaw(grid, p=p), x)
    if got is not None:
        assert shapes == [((7, 1) + grid, torch.float32)]  # the pieces' numbers, once; no image-sized call
        moved = [not bitwise_equal(got[i], x[i]) for i in range(7)]
        assert any(moved) and (p == 1.0 or not all(moved))
    else:
        assert grid[0] != grid[1]  # the release's own error (0.7.0: unequal sides)
        return
    # more piece copies than PIECE_COPIES: the release's forward on the half batch (bfloat16 as
    # float16 bits), the same output
    from kornia_halfpatch.fixes import augmentation_pipeline

    monkeypatch.setattr(augmentation_pipeline, "PIECE_COPIES", 7 * grid[0] * grid[1] - 1)
    shapes.clear()
    again = _mixed_as_the_release(lambda: kornia.augmentation.RandomJigsaw(grid, p=p), x)
    assert bitwise_equal(torch.where(torch.isnan(got), 0.0, again), torch.where(torch.isnan(got), 0.0, got))
    assert shapes == [((7, 3, 100, 100), torch.float16)]
    shapes.clear()
    with testing.isolated(only=()):
        with pytest.raises(RuntimeError) as unpatched:
            kornia.augmentation.RandomJigsaw((3, 3), p=1.0)(x.float())
    with testing.isolated(only=["augmentation_pipeline"]):
        with pytest.raises(RuntimeError) as patched:
            kornia.augmentation.RandomJigsaw((3, 3), p=1.0)(x)
    assert str(patched.value) == str(unpatched.value)


@pytest.mark.parametrize("size, grid", [((64, 80), (2, 2)), ((150, 150), (2, 2)), ((150, 260), (3, 2))])
@pytest.mark.parametrize("p", [1.0, 0.5])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_mosaic_copies_the_covered_parts_of_the_half_images(dtype, p, size, grid, monkeypatch):
    """RandomMosaic (``cropping_mode="slice"``) concatenates drawn images and slices each drawn box
    out, cut or padded with zeros to the output size. Each part of each half image an output box
    covers is copied once, where the release's ``_compose_images`` of the images' numbers and its
    ``_crop_images`` of the mosaic's row and column numbers put it: no image-sized forward. The
    output is the release's float32 call narrowed, bit for bit (a NaN moved with its half bits),
    boxes across the images' borders and past the mosaic's, wider grids, images not applied.
    Where that layout is not taken (``keepdim``), the release's forward on the half batch itself
    (bfloat16 as the same bits viewed as float16): the same output. Where the release's crop
    resizes (one image: every box the same, 100x100 against the output size) or resamples
    (``cropping_mode="resample"``), the whole float32 call runs, with the same draws."""
    _small_images_by_image(monkeypatch, "bands")
    shapes = _spy_mix_forwards(monkeypatch, dtypes=True)
    x = image(7, 3, 100, seed=6).to(dtype)
    x[0, 0, 0, 0] = float("nan")
    got = _mixed_as_the_release(lambda: kornia.augmentation.RandomMosaic(size, mosaic_grid=grid, p=p), x)
    assert got.shape == (7, 3) + size and shapes == []
    as_given = _mixed_as_the_release(
        lambda: kornia.augmentation.RandomMosaic(size, mosaic_grid=grid, p=p, keepdim=True), x)
    assert shapes == [((7, 3, 100, 100), torch.float16)]
    nan = torch.isnan(got)
    assert bitwise_equal(torch.where(nan, 0.0, as_given), torch.where(nan, 0.0, got))
    for batch, mode in ((1, "slice"), (3, "resample")):
        shapes.clear()
        _mixed_as_the_release(lambda: kornia.augmentation.RandomMosaic(size, cropping_mode=mode, p=1.0), x[:batch])
        assert shapes == [((batch, 3, 100, 100), torch.float32)]


def test_an_augmentation_not_drawn_image_by_image_is_the_whole_release_call(monkeypatch):
    """What is not a per-image warp of a large half batch keeps one whole float32 forward, bitwise
    the release's narrowed: given parameters, a wanted gradient, an augmentation outside the table,
    a container with such a child or one that draws while applying (noise), a channels-last image
    whose noise is drawn in its layout, a mask or data keys (its children see float32), small
    images, and drawn parameters of an unexpected
    form (then the whole call with the parameters already drawn: the random stream stays the
    release's)."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    pixels = 64 * 64
    monkeypatch.setattr(augmentation_pipeline, "CHUNKED_IMAGE_PIXELS", pixels)
    monkeypatch.setattr(augmentation_pipeline, "CHUNK_PIXELS", pixels)
    monkeypatch.setattr(_at_scale, "BROADCAST_GRID_PIXELS", pixels)
    shapes = _spy_forwards(monkeypatch)
    x = image(3, 3, 64, seed=8).half()
    augmentation = kornia.augmentation
    given = augmentation.RandomRotation(30.0, p=1.0)
    given(x.float())
    params = dict(given._params)
    cases = {
        "given parameters": (lambda: augmentation.RandomRotation(30.0, p=1.0), lambda m, t: m(t, params)),
        "a gradient": (lambda: augmentation.RandomRotation(30.0, p=1.0), lambda m, t: m(t.requires_grad_())),
        "not in the table": (lambda: augmentation.RandomPlasmaBrightness(p=1.0), lambda m, t: m(t)),
        "a container with a child outside the table": (
            lambda: augmentation.AugmentationSequential(augmentation.RandomRotation(30.0, p=1.0),
                                                        augmentation.RandomPlasmaBrightness(p=1.0)),
            lambda m, t: m(t)),
        "a container with a child whose parameters index the batch": (
            lambda: augmentation.AugmentationSequential(augmentation.RandomRotation(30.0, p=1.0),
                                                        augmentation.RandomChannelDropout(p=1.0)),
            lambda m, t: m(t)),
        "a container given a mask": (
            lambda: augmentation.AugmentationSequential(augmentation.RandomRotation(30.0, p=1.0),
                                                        data_keys=["input", "mask"]),
            lambda m, t: m(t, (t[:, :1] > 0.5).float())[0]),
        "a container given data keys": (
            lambda: augmentation.AugmentationSequential(augmentation.RandomRotation(30.0, p=1.0)),
            lambda m, t: m(t, data_keys=["input"])),
        "a container with a child that draws while applying": (  # the children's draws in the release's order
            lambda: augmentation.AugmentationSequential(augmentation.RandomGaussianNoise(std=0.1, p=1.0),
                                                        augmentation.RandomBrightness((0.8, 1.2), p=1.0)),
            lambda m, t: m(t)),
        "a channels-last image drawing like itself": (  # noise drawn in the widened image's layout
            lambda: augmentation.RandomGaussianNoise(std=0.1, p=1.0),
            lambda m, t: m(t.contiguous(memory_format=torch.channels_last))),
        "small images": (lambda: augmentation.RandomRotation(30.0, p=1.0), lambda m, t: m(t[..., :63, :])),
        "unexpected parameters": (lambda: augmentation.RandomRotation(30.0, p=1.0), lambda m, t: m(t)),
    }
    if not hasattr(augmentation, "RandomChannelDropout"):  # kornia 0.7.0
        del cases["a container with a child whose parameters index the batch"]
    for name, (build, call) in cases.items():
        if name == "unexpected parameters":
            monkeypatch.setitem(augmentation_pipeline.AUGMENTATIONS_BY_IMAGE, "RandomRotation",
                                augmentation_pipeline.ByImage(("angle",), split="grid"))
        with testing.isolated(only=()):
            torch.manual_seed(2)
            expected = call(build(), x.float().clone())
            stream = torch.random.get_rng_state()
        shapes.clear()
        with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
            torch.manual_seed(2)
            got = call(build(), x.clone())
        assert torch.equal(torch.random.get_rng_state(), stream), name
        assert got.dtype == torch.float16 and bitwise_equal(got.detach(), expected.detach().half()), name
        assert all(shape[0] == 3 for shape in shapes), name  # whole batches only
    assert shapes == [(3, 3, 64, 64)]  # the unexpected parameters: one whole forward, params given


def test_a_float32_augmentation_is_never_split(monkeypatch):
    """The user's float32 batch: the release's forward untouched, whatever its size."""
    from kornia_halfpatch.fixes import _at_scale, augmentation_pipeline

    monkeypatch.setattr(augmentation_pipeline, "CHUNKED_IMAGE_PIXELS", 1)
    monkeypatch.setattr(augmentation_pipeline, "CHUNK_PIXELS", 1)
    monkeypatch.setattr(_at_scale, "BROADCAST_GRID_PIXELS", 1)
    shapes = _spy_forwards(monkeypatch)
    x = image(3, 3, 48, seed=9)
    with testing.isolated(only=()):
        torch.manual_seed(4)
        expected = kornia.augmentation.RandomAffine(20.0, p=1.0)(x)
    with testing.isolated(only=["augmentation_pipeline", "warp_geometry", "warp_sampling"]):
        torch.manual_seed(4)
        got = kornia.augmentation.RandomAffine(20.0, p=1.0)(x)
    assert bitwise_equal(got, expected) and shapes == []


def test_ssim_loss_takes_the_float32_map_only_from_its_own_ssim_call(monkeypatch):
    """The loss's evaluation asks for one float32 map: its own ssim call's. A 'valid' padding (not
    banded), a release whose ssim_loss reads otherwise, or a map that came narrowed leave the
    call to the widened original: bitwise the release's float32 call narrowed, whatever the path;
    a later ssim call of the user's is narrowed as always."""
    from kornia_halfpatch.fixes import _at_scale

    x = _gray_and_color().half()
    other = (_gray_and_color(seed=9) * 0.9).half()
    with testing.isolated(only=()):
        expected = kornia.losses.ssim_loss(x.float(), other.float(), 11).half()
        expected_valid = kornia.losses.ssim_loss(x.float(), other.float(), 11, padding="valid").half()
    served = []  # per banded ssim evaluation: whether its map was asked for in float32
    real = _at_scale._in_channels_last_bands
    monkeypatch.setattr(_at_scale, "_in_channels_last_bands",
                        lambda original, dtype, *a, **k: served.append(dtype == torch.float32) or real(original, dtype, *a, **k))
    with testing.isolated(only=ONLY):
        assert bitwise_equal(kornia.losses.ssim_loss(x, other, 11), expected)
        assert served == [True]
        assert kornia.metrics.ssim(x, other, 11).dtype == torch.float16  # no request left behind
        served.clear()
        assert bitwise_equal(kornia.losses.ssim_loss(x, other, 11, padding="valid"), expected_valid)
        assert served == []  # not asked, not banded: the widened original's map
    monkeypatch.setattr(_at_scale, "_SSIM_LOSS_STATEMENTS", ("loss = something_else(ssim_map)",))
    monkeypatch.setattr(_at_scale, "_ssim_loss_checked", {})
    served.clear()
    with testing.isolated(only=ONLY):
        assert bitwise_equal(kornia.losses.ssim_loss(x, other, 11), expected)
    assert served == []  # the loss's text not the release's known one: the widened original whole
    # The ssim row not applied: the release's ssim would take the half images (on torch 2.1 no half
    # CPU convolution at all), so the loss is left to the widened original before any call.
    monkeypatch.undo()
    calls = []
    with testing.isolated(only=["torch_ops"]):
        assert _at_scale.cheaper_evaluation(kornia.metrics.ssim) is None
        release_ssim = kornia.metrics.ssim
        with monkeypatch.context() as patch:  # undone before the fixes come back
            patch.setattr(kornia.metrics, "ssim", lambda *a, **k: calls.append(a) or release_ssim(*a, **k))
            got = _at_scale.ssim_loss_by_map(kornia.losses.ssim.ssim_loss, torch.float16, x, other, 11)
    assert got is None and calls == []
    with testing.isolated(only=ONLY):
        assert _at_scale.cheaper_evaluation(kornia.metrics.ssim) is _at_scale.ssim_in_bands


def _psnr_pairs(dtype):
    """Image pairs of odd sizes, one above a tile of pixels, in the 0-1 and 0-255 ranges."""
    g = torch.Generator().manual_seed(5)
    for shape in [(2, 3, 256, 257), (3, 1, 17, 23), (7,), (1, 1, 1, 1)]:
        for top in (1.0, 255.0):
            x = torch.rand(shape, generator=g) * top
            y = x * 0.9 + 0.05 * top + torch.rand(shape, generator=g) * 0.01 * top
            yield x.to(dtype), y.to(dtype), top


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_psnr_in_float32_is_the_release_float32_psnr_bitwise_before_narrowing(dtype):
    """Not only the narrowed result: the float32 value itself is the release's float32 call's (its
    squared error filled tile by tile, its mean over the whole tensor as the release takes it)."""
    from kornia_halfpatch.fixes import _at_scale

    with testing.isolated(only=()):
        release_psnr = kornia.metrics.psnr
        pairs = list(_psnr_pairs(dtype))
        assert pairs[0][0].numel() > _at_scale.TILE_PIXELS  # more than one tile
        for x, y, top in pairs:
            expected = release_psnr(x.float(), y.float(), top)
            got = _at_scale.psnr_in_float32(release_psnr, dtype, x, y, top)
            assert got.dtype == torch.float32 and torch.isfinite(got)
            assert bitwise_equal(got, expected), (tuple(x.shape), top)
            first = next(iter(inspect.signature(release_psnr).parameters))  # 0.7.0: input, 0.8: image
            by_name = {first: x, "target": y, "max_val": top}
            assert bitwise_equal(_at_scale.psnr_in_float32(release_psnr, dtype, **by_name), expected)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_the_tiled_squared_error_has_the_mean_of_torchs_mse_loss_bitwise(dtype):
    """Sizes of one to eight tiles, ragged: a mean of the tiles' sums differs here in float32."""
    from kornia_halfpatch.fixes import _at_scale

    g = torch.Generator().manual_seed(6)
    for n in [1, 5, _at_scale.TILE_PIXELS - 3, _at_scale.TILE_PIXELS + 1, 3 * _at_scale.TILE_PIXELS + 7777,
              8 * _at_scale.TILE_PIXELS - 1]:
        for top in (1.0, 255.0):
            x = (torch.rand(n, generator=g) * top).to(dtype)
            y = (torch.rand(n, generator=g) * top).to(dtype)
            expected = F.mse_loss(x.float(), y.float())
            assert bitwise_equal(_at_scale.mean_squared_error(x, y), expected), (n, top)
            shaped = (x.reshape(1, 1, 1, n), y.reshape(1, 1, n, 1))
            assert bitwise_equal(_at_scale.mean_squared_error(shaped[0], shaped[1].reshape(1, 1, 1, n)), expected)


def test_psnr_leaves_what_it_does_not_tile_to_the_widened_original(monkeypatch):
    """Inputs that are not both contiguous, a tensor max_val, a wanted gradient or a release whose
    psnr reads otherwise: no evaluation (None), and through kornia the whole widened call,
    bitwise the release's float32 call narrowed."""
    from kornia_halfpatch.fixes import _at_scale

    x, y, _ = next(_psnr_pairs(torch.float16))
    with testing.isolated(only=()):
        release_psnr = kornia.metrics.psnr
    transposed = x.transpose(-1, -2)
    assert _at_scale.psnr_in_float32(release_psnr, torch.float16, transposed, y.transpose(-1, -2).contiguous(), 1.0) is None
    assert _at_scale.psnr_in_float32(release_psnr, torch.float16, x, y, torch.tensor(1.0)) is None
    assert _at_scale.psnr_in_float32(release_psnr, torch.float16, x, y.float(), 1.0) is None
    assert _at_scale.psnr_in_float32(release_psnr, torch.float16, x.requires_grad_(), y, 1.0) is None
    with torch.no_grad():
        assert _at_scale.psnr_in_float32(release_psnr, torch.float16, x, y, 1.0) is not None
    x = x.detach()
    monkeypatch.setattr(_at_scale, "_PSNR_RETURNS", ("return something_else(image, target)",))
    monkeypatch.setattr(_at_scale, "_psnr_checked", {})
    assert _at_scale.psnr_in_float32(release_psnr, torch.float16, x, y, 1.0) is None
    monkeypatch.undo()
    evaluated = []
    real = _at_scale.psnr_in_float32
    monkeypatch.setattr(_at_scale, "psnr_in_float32", lambda *a, **k: evaluated.append(1) or real(*a, **k))
    cases = [(x, y, 1.0), (transposed, y.transpose(-1, -2), 1.0), (x, y, torch.tensor(1.0))]
    with testing.isolated(only=ONLY):
        for a, b, top in cases:
            with testing.isolated(only=()):
                expected = kornia.metrics.psnr(a.float(), b.float(), top).half()
            assert bitwise_equal(kornia.metrics.psnr(a, b, top), expected)
    assert len(evaluated) == len(cases)  # asked each time; answered None for the last two
    with testing.isolated(only=ONLY):
        for a, b in [(x, y[..., :-1])]:
            with pytest.raises(TypeError, match="equal shapes"):
                kornia.metrics.psnr(a, b, 1.0)


CROPS = {
    "center_crop": lambda t, m: kornia.geometry.transform.center_crop(t, (150, 170)),
    "center_crop nearest": lambda t, m: kornia.geometry.transform.center_crop(t, (101, 200), mode="nearest"),
    "center_crop align_corners=False": lambda t, m: kornia.geometry.transform.center_crop(t, (99, 150), align_corners=False),
    "crop_by_transform_mat": lambda t, m: kornia.geometry.transform.crop_by_transform_mat(t, m, (150, 133)),
    # points above the image: border padding reads its first row
    "crop_by_transform_mat border": lambda t, m: kornia.geometry.transform.crop_by_transform_mat(
        t, m, (150, 133), padding_mode="border"),
    "crop_by_transform_mat reflection": lambda t, m: kornia.geometry.transform.crop_by_transform_mat(
        t, m, (300, 400), padding_mode="reflection"),
    "crop_by_transform_mat bicubic": lambda t, m: kornia.geometry.transform.crop_by_transform_mat(
        t, m, (150, 133), mode="bicubic"),
}


def _poisoned_copies(monkeypatch):
    """Every float32 copy a crop gets starts as NaN (not the zeros of fresh pages), so a value the
    release read unfilled shows; records the boxes filled."""
    from kornia_halfpatch.fixes import _at_scale

    boxes = []
    real_widened, real_fill = _at_scale.SampledSources.widened, _at_scale.SampledSources._fill

    def widened(self, value, channels_last):
        copy = real_widened(self, value, channels_last)
        if self.copies and self.copies[-1][0]() is copy:
            copy.fill_(float("nan"))
        return copy

    def fill(self, entry, rows, columns):
        boxes.append((rows, columns))
        return real_fill(self, entry, rows, columns)

    monkeypatch.setattr(_at_scale.SampledSources, "widened", widened)
    monkeypatch.setattr(_at_scale.SampledSources, "_fill", fill)
    return boxes


@pytest.mark.parametrize("batch", [3, 1])  # three images one by one; one image in bands of grid rows
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(CROPS))
def test_a_large_half_crop_reads_its_float32_copy_only_where_filled(name, dtype, mode, batch, monkeypatch):
    """A crop of a large image fills its image's float32 copy only where its grid samples (NaN
    elsewhere here): bitwise the release's float32 call narrowed, a centre crop filling a part of
    the image, a reflection reaching past the image all of it."""
    from kornia_halfpatch.fixes import _at_scale

    boxes = _poisoned_copies(monkeypatch)
    x = image(batch, 3, 400, seed=3)[..., :300, :]
    x[:, :, :4] = float("nan")  # NaN rows beyond the centre crops: never sampled
    x = x.to(dtype)
    shift = torch.tensor([[1.0, 0.1, 120.0], [0.05, 1.0, 75.0], [0.0, 0.0, 1.0]]).expand(batch, 3, 3)
    matrices = shift.to(dtype)
    call = CROPS[name]
    with testing.isolated(only=()):
        expected = call(x.float(), matrices.float()).to(dtype)
    with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"], cpu_half=mode):
        got = call(x.contiguous(), matrices)
    # NaN where the release's NaN: torch 2.1's sampling gives a NaN's payload by kernel path (the
    # release's float32 call on two images and on three: 0x7E00 and 0x7FFF at other pixels)
    assert got.dtype == dtype and torch.equal(got.isnan(), expected.isnan()), name
    assert bitwise_equal(got.nan_to_num(0.0), expected.nan_to_num(0.0)), name
    if not _at_scale.modes_see_indexing():
        assert not boxes  # torch 2.1: no copies filled on demand, the images widened whole
        return
    assert boxes, "the copy was not filled on demand"
    filled = [(r[1] - r[0]) * (c[1] - c[0]) for r, c in boxes]
    if "reflection" in name:
        assert all(f == 300 * 400 for f in filled)
    elif name.startswith("center_crop"):
        assert max(filled) <= 0.6 * 300 * 400


def test_any_other_read_of_a_sampled_copy_fills_it_whole():
    """A release step other than grid_sample or a plain slice that takes the copy (a sum, a strided
    slice, a concatenation) sees the whole widened image; a plain slice of rows and columns (a crop
    by indices) fills its box alone; shape and dtype reads fill nothing. Where a torch function
    mode does not see every indexing (torch 2.1: ``x[0]``, ``x[None]``), no copy is used."""
    from kornia_halfpatch.fixes import _at_scale

    half = image(2, 3, 64).half()
    if not _at_scale.modes_see_indexing():
        sources = _at_scale.SampledSources(half.shape[1:])
        assert bitwise_equal(sources.widened(half, False), half.float()) and sources.copies == []
        return
    boxes = {"rows": (lambda c: c[:, :, 10:20].clone(), 2 * 3 * 10 * 64),
             "box": (lambda c: c[..., 5:9, -7:] * 2, 2 * 3 * 4 * 7)}
    for name, (step, filled) in boxes.items():
        sources = _at_scale.SampledSources(half.shape[1:])
        copy = sources.widened(half, False)
        copy.fill_(float("nan"))
        with sources:
            got = step(copy)
        assert bitwise_equal(got, step(half.float())) and sources.filled_elements == filled, name
    for step in (lambda c: c.sum(), lambda c: c[:, :, 10:20:2].clone(), lambda c: c[0], lambda c: torch.cat([c, c]),
                 lambda c: torch.ones(3).to(c) * c.mean()):
        sources = _at_scale.SampledSources(half.shape[1:])
        copy = sources.widened(half, False)
        copy.fill_(float("nan"))
        with sources:
            assert copy.shape == half.shape and copy.dtype == torch.float32 and copy.size(-1) == 64
            assert sources.filled_elements == 0
            got = step(copy)
        assert bitwise_equal(got, step(half.float()))
        assert sources.filled_elements == half.numel()
    # Not a copy to fill: a channels-last or non-contiguous half image, a float32 tensor
    sources = _at_scale.SampledSources(half.shape[1:])
    for value in (half.to(memory_format=torch.channels_last), half.transpose(-1, -2), half.float()):
        assert bitwise_equal(sources.widened(value, False), value.float())
    assert sources.copies == []


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_resize_from_the_rows_read_is_torchs_float32_resize_within_the_bound(dtype):
    """``resized_from_rows_read`` against torch's float32 bilinear resize of the widened crop:
    aligned corners, downscales, upscales, one axis unchanged, a single row or column, two
    images, 0-1 and 0-255 values; float32 values within a few float32 ulps, narrowed within 1 half ulp in at most
    ``RESIZED_MISMATCH_FRACTION`` of the elements of all the calls."""
    from kornia_halfpatch.fixes import _at_scale

    g = torch.Generator().manual_seed(3)
    cases = [((1, 3, 150, 130), (51, 52)), ((1, 3, 30, 20), (51, 52)), ((2, 3, 97, 61), (33, 70)),
             ((1, 3, 40, 47), (48, 50)), ((1, 1, 64, 64), (64, 17)), ((1, 3, 1, 7), (3, 5)), ((1, 2, 5, 1), (1, 1)),
             ((1, 3, 100, 100), (100, 37)), ((1, 3, 255, 2), (7, 9))]
    got_all, expected_all = [], []
    for shape, size in cases:
        for scale in (1.0, 255.0):
            half = (torch.rand(*shape, generator=g) * scale).to(dtype)
            expected = F.interpolate(half.float(), size=size, mode="bilinear", align_corners=True)
            got = _at_scale.resized_from_rows_read(F.interpolate, half, (half.float(),),
                                                   {"size": size, "mode": "bilinear", "align_corners": True})
            assert got is not None and got.dtype == torch.float32 and got.shape == expected.shape
            assert torch.allclose(got, expected, rtol=4 * torch.finfo(torch.float32).eps, atol=0)
            got_all.append(got.to(dtype).flatten())
            expected_all.append(expected.to(dtype).flatten())
    assert_resized_within_bound(torch.cat(got_all), torch.cat(expected_all))


def test_a_resize_the_rows_cannot_give_falls_back_to_the_filled_crop():
    """Where the two passes cannot be the resize, ``resized_from_rows_read`` says None and the copy's
    box is filled for torch: an inf in the crop, another mode, corners not aligned (torch's source
    index is fused or not by instruction set), a scale factor, torch's antialias, a gradient. Through ``SampledSources`` each gives torch's resize of the widened crop, bitwise."""
    from kornia_halfpatch.fixes import _at_scale

    half = image(1, 3, 64).half()
    size = {"size": (20, 24), "mode": "bilinear", "align_corners": True}
    assert _at_scale.resized_from_rows_read(F.interpolate, half, (half.float(),), size) is not None
    with_inf = half.clone()
    with_inf[0, 1, 30, 30] = float("inf")
    assert _at_scale.resized_from_rows_read(F.interpolate, with_inf, (with_inf.float(),), size) is None
    for other in ({"mode": "nearest"}, {"mode": "bicubic"}, {"size": None, "scale_factor": 0.5},
                  {"antialias": True}, {"align_corners": False}, {"align_corners": None}):
        assert _at_scale.resized_from_rows_read(F.interpolate, half, (half.float(),), {**size, **other}) is None
    wanting = half.float().requires_grad_()
    assert _at_scale.resized_from_rows_read(F.interpolate, half, (wanting,), size) is None
    if not _at_scale.modes_see_indexing():
        return
    for source, keywords in ((with_inf, size), (half, {**size, "mode": "bicubic"}), (half, {**size, "mode": "nearest",
                                                                                          "align_corners": None}),
                             (half, {**size, "align_corners": False})):
        sources = _at_scale.SampledSources(source.shape[1:])
        copy = sources.widened(source, False)
        copy.fill_(float("nan"))
        with sources:
            got = F.interpolate(copy[..., 5:50, 3:60], **keywords)
        assert bitwise_equal(got, F.interpolate(source.float()[..., 5:50, 3:60], **keywords))
        assert sources.filled_elements == 3 * 45 * 57


def test_a_crop_view_is_read_from_the_half_image_only_while_nothing_wrote_the_copy():
    """A view of a copy sliced by indices (a crop) is resized from the half image; read in any
    other way, or after the copy was written, its box is filled first and torch reads the copy; a
    view that leaves the mode unread is filled as the mode exits."""
    from kornia_halfpatch.fixes import _at_scale

    half = image(1, 3, 64).half()
    if not _at_scale.modes_see_indexing():
        pytest.skip("no copies filled on demand on this torch")
    size = {"size": (20, 24), "mode": "bilinear", "align_corners": True}
    sources = _at_scale.SampledSources(half.shape[1:])
    copy = sources.widened(half, False)
    copy.fill_(float("nan"))
    with sources:
        crop = copy[..., 5:50, 3:60]
        resized = F.interpolate(crop, **size)
        assert sources.filled_elements == 0
        copy[..., 10, 10] = 7.0  # a write into the copy: the crop must show it
        written = F.interpolate(crop, **size)
        left = copy[0, :, 1:3, 2:5]
    assert_resized_within_bound(resized.half(), F.interpolate(half.float()[..., 5:50, 3:60], **size).half())
    expected = half.float()
    expected[..., 10, 10] = 7.0
    assert bitwise_equal(written, F.interpolate(expected[..., 5:50, 3:60], **size))
    assert bitwise_equal(left, expected[0, :, 1:3, 2:5])


def test_where_a_mode_misses_an_indexing_no_copy_is_filled_on_demand(monkeypatch):
    """The probe answers what a mode sees here (``x[0]`` and ``x[None]``: unseen on torch 2.1); told
    no, a crop widens its images whole, bitwise the release's float32 call narrowed all the same."""
    from torch.overrides import TorchFunctionMode

    from kornia_halfpatch.fixes import _at_scale

    class Count(TorchFunctionMode):
        seen = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.seen += 1
            return func(*args, **(kwargs or {}))

    tensor = torch.zeros(3, 3)
    with Count():
        tensor[0]
        tensor[None]
    assert _at_scale.modes_see_indexing() == (Count.seen == 2)
    monkeypatch.setattr(_at_scale, "_modes_see_indexing", [False])
    boxes = _poisoned_copies(monkeypatch)
    x = image(3, 3, 400, seed=4)[..., :300, :].half()
    with testing.isolated(only=()):
        expected = kornia.geometry.transform.center_crop(x.float(), (150, 170)).half()
    with testing.isolated(only=ONLY + ["warp_geometry", "warp_sampling"]):
        got = kornia.geometry.transform.center_crop(x.contiguous(), (150, 170))
    assert bitwise_equal(got, expected) and boxes == []


# --------------------------------------------------------------------------------------------
# median_blur by selection: a network of minima and maxima over shifted views of the half image.


def _tied_image(shape, dtype, seed=0):
    """Few distinct values (ties in every window), negative zeros among them."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randint(-4, 5, shape, generator=g) / 4.0).to(dtype)
    return torch.where(x == 0, torch.full_like(x, -0.0), x)


def test_the_median_program_selects_the_middle_value():
    """On integers (the 0-1 principle for nine values, and random ties for the larger windows)."""
    import itertools
    import random

    from kornia_halfpatch.fixes._at_scale import median_program

    def run(values):
        program, median = median_program(len(values))
        known = dict(enumerate(values))
        for number, op, a, b, _, _ in program:
            known[number] = min(known[a], known[b]) if op is torch.minimum else max(known[a], known[b])
        return known[median]

    for bits in itertools.product((0, 1), repeat=9):
        assert run(list(bits)) == sorted(bits)[4]
    rng = random.Random(0)
    for count in (1, 3, 5, 15, 21, 25, 35, 49, 81):
        for _ in range(200):
            values = [rng.randint(0, 6) for _ in range(count)]
            assert run(values) == sorted(values)[count // 2], count


def test_the_3x3_median_by_sorted_columns_is_the_median_of_the_nine():
    from kornia_halfpatch.fixes._at_scale import median_of_3x3

    g = torch.Generator().manual_seed(3)
    for levels in (3, 9, 1000):
        band = torch.randint(0, levels, (4, 12, 17), generator=g).float()
        windows = torch.stack([band[:, dy:dy + 10, dx:dx + 15] for dy in range(3) for dx in range(3)], -1)
        assert torch.equal(median_of_3x3(band, 10, 15), windows.median(-1).values)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel_size", [1, 3, (3, 5), (5, 1), (1, 7), 5, 7], ids=str)
def test_median_blur_by_selection_is_the_release_float32_narrowed_bitwise(kernel_size, dtype, mode, monkeypatch):
    """Ties, zeros of both signs (the convolution leaves +0), 0-255 values, borders, images
    smaller than the window; bands of three rows and chunks of planes."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "MEDIAN_BAND_ELEMENTS", 3 * 19 * 2)
    calls = []
    program, of_3x3 = _at_scale.median_program, _at_scale.median_of_3x3
    monkeypatch.setattr(_at_scale, "median_program", lambda count: calls.append(count) or program(count))
    monkeypatch.setattr(_at_scale, "median_of_3x3", lambda *a: calls.append("3x3") or of_3x3(*a))
    images = [_tied_image((2, 3, 17, 19), dtype), (image(1, 2, 23) * 255).round().to(dtype),
              _tied_image((1, 1, 2, 3), dtype, seed=1), image(3, 1, 9).to(dtype)]
    for x in images:
        with testing.isolated(only=()):
            expected = kornia.filters.median_blur(x.float(), kernel_size).to(dtype)
        with testing.isolated(only=ONLY, cpu_half=mode):
            got = kornia.filters.median_blur(x, kernel_size)
        assert bitwise_equal(got, expected), (kernel_size, tuple(x.shape))
    # every call selected (none left to the widened original), 3x3 by its sorted columns, band by band
    assert len(calls) >= len(images) and (set(calls) == {"3x3"}) == (kernel_size == 3)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_median_blur_leaves_non_finite_windows_and_gradients_to_the_widened_original(dtype):
    """An inf makes the release's whole window NaN (inf * 0 in its one-hot convolution), which a
    selection would not: such a call is the release's float32 call narrowed, NaNs where it has
    them; so is a call that wants a gradient."""
    from kornia_halfpatch.fixes import _at_scale

    x = image(1, 2, 20).to(dtype)
    x[0, 0, 5, 5] = float("inf")
    x[0, 1, 9, 9] = float("nan")
    assert _at_scale.median_by_selection(None, dtype, x, (3, 3)) is None
    with testing.isolated(only=()):
        expected = kornia.filters.median_blur(x.float(), (3, 3)).to(dtype)
    with testing.isolated(only=ONLY):
        got = kornia.filters.median_blur(x, (3, 3))
    assert bitwise_equal(got, expected) and bool(got.isnan().any())
    leaf = image(1, 1, 12).to(dtype).requires_grad_()
    assert _at_scale.median_by_selection(None, dtype, leaf, 3) is None
    with testing.isolated(only=ONLY):
        kornia.filters.median_blur(leaf, 3).sum().backward()
    wide = leaf.detach().float().requires_grad_()
    with testing.isolated(only=()):
        kornia.filters.median_blur(wide, 3).sum().backward()
    assert bitwise_equal(leaf.grad, wide.grad.to(dtype))


def test_median_blur_takes_only_odd_windows_of_a_batch_of_planes():
    from kornia_halfpatch.fixes import _at_scale

    x = image(1, 1, 8).half()
    for size in (2, (3, 4), (3,), (3, 3, 3), 0, -1, True, 3.0):
        assert _at_scale.median_by_selection(None, torch.float16, x, size) is None, size
    assert _at_scale.median_by_selection(None, torch.float16, x[0], 3) is None  # (C, H, W): kornia's shape error
    assert _at_scale.median_by_selection(None, torch.float16, x, [3, 5]) is not None


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_median_blur_traced_is_the_release_float32_narrowed(dtype):
    """A trace records the widened original (the selection is eager only), whose one-hot
    convolutions keep torch's own convolution while tracing."""
    x = image(1, 2, 20).to(dtype)
    with testing.isolated(only=()):
        expected = kornia.filters.median_blur(x.float(), (3, 3)).to(dtype)
    with testing.isolated(only=ONLY):
        traced = torch.jit.trace(lambda t: kornia.filters.median_blur(t, (3, 3)), (x,))
        assert bitwise_equal(traced(x), expected)


def test_median_blur_in_full_precision_is_bitwise_the_release():
    x = image(2, 3, 30)
    for dtype in (torch.float32, torch.float64):
        with testing.isolated(only=()):
            expected = kornia.filters.median_blur(x.to(dtype), (5, 3))
        with testing.isolated(only=ONLY):
            got = kornia.filters.median_blur(x.to(dtype), (5, 3))
        assert bitwise_equal(got, expected)



def _release_float32_call(make, x, seed):
    """(the augmentation, its output, the random stream after it): the unpatched release's float32
    call on the widened ``x`` under ``seed``."""
    with testing.isolated(only=()):
        reference = make()
        torch.manual_seed(seed)
        expected = reference(x.float())
        return reference, expected, torch.random.get_rng_state()


@pytest.mark.parametrize("mode", ["native", "float32"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_planckian_jitter_is_each_half_plane_times_its_weight(dtype, mode, monkeypatch):
    """RandomPlanckianJitter multiplies each plane by a float32 weight drawn per image and clamps at
    1: the release's forward is called once, on a float32 image of a pixel per probe value (the
    drawn parameters), and each half plane is multiplied by the weight it gives (a half tensor
    times a Python float is float32's product narrowed). The output is the release's float32 call
    narrowed, bit for bit, in both ``cpu_half`` modes, with values above 1 (clamped in applied
    images, kept in the others), negative, infinite and NaN; the random stream and ``_params``
    are the float32 call's. Where the kernel rule does not hold, the float32 bands, the same output."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    _small_images_by_image(monkeypatch, "bands")
    shapes = _spy_forwards(monkeypatch)
    x = image(7, 3, 100, seed=3).to(dtype)
    x[:, :, 0, :6] = torch.tensor([1.5, -0.75, float("inf"), float("-inf"), float("nan"), 3.0e4], dtype=dtype)
    reference, expected, stream = _release_float32_call(lambda: kornia.augmentation.RandomPlanckianJitter(p=0.6), x, 11)
    applied = reference._params["batch_prob"] > 0.5
    assert 0 < int(applied.sum()) < 7
    assert bool((expected[applied] == 1.0).any()) and bool((expected[~applied][:, :, 0, 0] == 1.5).all())
    for kernel_rule in (True, False):
        monkeypatch.setattr(augmentation_pipeline, "_SCALAR_PRODUCTS", {(dtype, "cpu"): kernel_rule})
        shapes.clear()
        with testing.isolated(only=["augmentation_pipeline"], cpu_half=mode):
            augment = kornia.augmentation.RandomPlanckianJitter(p=0.6)
            torch.manual_seed(11)
            got = augment(x)
            assert torch.equal(torch.random.get_rng_state(), stream)
            assert all(torch.equal(augment._params[k], v) for k, v in reference._params.items())
            assert set(augment._params) == set(reference._params)
        assert bitwise_equal(got, expected.to(dtype))
        if kernel_rule:
            assert shapes == [(7, 3, 1, 3)]  # the probe, once: no image-sized float32 call
        else:
            # the float32 bands: four images' 16 rows a call, then three
            assert shapes == [(n, 3, min(start + 16, 100) - start, 100) for n in (4, 3) for start in range(0, 100, 16)]


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_the_scalar_product_kernel_rule_is_asked_of_torch(dtype):
    """The rule ``_channels_scaled`` rests on, asked of this torch for every finite half value: a
    half tensor times a float that float32 holds is the float32 product narrowed."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    assert augmentation_pipeline._scalar_products_narrow_float32s(dtype, torch.device("cpu"))
    values = torch.linspace(-4, 4, 4097).to(dtype)
    weight = float(torch.tensor(0.7312345))
    assert bitwise_equal(values * weight, (values.float() * weight).to(dtype))
    assert not bitwise_equal(values * weight, values * torch.tensor(weight, dtype=dtype))  # not the narrowed weight


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_large_half_jpeg_by_chunks_where_a_chunk_computes_what_the_batch_does(dtype, count, monkeypatch):
    """RandomJPEG's float32 codec goes by chunks of images where, for these shapes, its chroma's
    resizes and its DCT's tensordot compute a chunk as the batch does (asked of this machine's
    kernels on random values): the output is the release's float32 call narrowed, bit for bit,
    ``_params`` and the random stream the float32 call's. A resize that a chunk computes otherwise
    (a batch-dependent stand-in) sends the call whole, the same output."""
    from kornia_halfpatch.fixes import augmentation_pipeline

    if not hasattr(kornia.augmentation, "RandomJPEG"):
        pytest.skip(f"kornia {kornia.__version__} has no RandomJPEG")
    pixels = 256 * 256
    monkeypatch.setattr(augmentation_pipeline, "CHUNKED_IMAGE_PIXELS", pixels)
    monkeypatch.setattr(augmentation_pipeline, "CHUNK_PIXELS", count * pixels)
    monkeypatch.setattr(augmentation_pipeline, "_CHUNKS_ARE_THE_BATCH", {})
    shapes = _spy_forwards(monkeypatch)
    x = image(5, 3, 256, seed=4).to(dtype)
    reference, expected, stream = _release_float32_call(lambda: kornia.augmentation.RandomJPEG(p=0.6), x, 2)
    applied = reference._params["batch_prob"] > 0.5
    assert 0 < int(applied.sum()) < 5

    def augmented() -> torch.Tensor:
        with testing.isolated(only=["augmentation_pipeline"]):
            augment = kornia.augmentation.RandomJPEG(p=0.6)
            torch.manual_seed(2)
            got = augment(x)
            assert torch.equal(torch.random.get_rng_state(), stream)
            assert all(torch.equal(augment._params[k], v) for k, v in reference._params.items())
            return got, augment

    got, augment = augmented()
    assert bitwise_equal(got, expected.to(dtype))
    if augmentation_pipeline._jpeg_chunks_are_the_batch(augment, x, count):
        assert shapes == [(min(count, 5 - start), 3, 256, 256) for start in range(0, 5, count)]
    else:
        assert shapes == []
    # a stand-in resize whose result depends on how many images it is given
    codec_module = sys.modules[kornia.enhance.jpeg_codec_differentiable.__module__]
    real = codec_module.rescale
    monkeypatch.setattr(codec_module, "rescale", lambda values, *a, **k: real(values, *a, **k) + values.shape[0] * 1e-3)
    monkeypatch.setattr(augmentation_pipeline, "_CHUNKS_ARE_THE_BATCH", {})
    assert not augmentation_pipeline._jpeg_chunks_are_the_batch(augment, x, count)
    monkeypatch.setattr(codec_module, "rescale", real)  # the probe's answer is kept: no for these shapes
    shapes.clear()
    again, _ = augmented()
    assert bitwise_equal(again, expected.to(dtype))
    assert shapes == []


def _diamond_square_module():
    return sys.modules["kornia.contrib.diamond_square"]


def _spy_diamond_steps(monkeypatch):
    """The batch of every map the release's diamond-square step receives (the whole call's and
    ``diamond_square_by_images``' read it from the module)."""
    module = _diamond_square_module()
    real = module._one_diamond_one_square
    batches = []

    def step(img, *arguments, **keywords):
        batches.append(img.shape[0])
        return real(img, *arguments, **keywords)

    monkeypatch.setattr(module, "_one_diamond_one_square", step)
    return batches


def _small_diamond_steps(monkeypatch):
    """Steps of maps from 33x33 taken as large, two images a step."""
    from kornia_halfpatch.fixes import _at_scale

    monkeypatch.setattr(_at_scale, "DIAMOND_STEP_PIXELS", 33 * 33)
    monkeypatch.setattr(_at_scale, "images_per_call", lambda: 2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["RandomPlasmaShadow", "RandomPlasmaBrightness", "RandomPlasmaContrast"])
def test_a_half_plasma_augmentation_draws_its_fractal_a_few_images_a_step(name, dtype, mode, monkeypatch):
    """The plasma augmentations' fractal (``diamond_square``) in the shim's float32 evaluation of a
    half call: its large steps two images at a time (``diamond_square_by_images``). Output, random
    stream and ``_params`` are the release's float32 call's, bit for bit, with images not applied;
    the release's own steps take every applied map at once."""
    _small_diamond_steps(monkeypatch)
    x = image(6, 3, 40, seed=4)[..., :36].to(dtype)  # 40x36: maps of 65x65, steps from 33x33 to 65x65
    make = lambda: getattr(kornia.augmentation, name)(p=0.7)  # noqa: E731
    steps = _spy_diamond_steps(monkeypatch)
    reference, expected, stream = _release_float32_call(make, x, 6)
    applied = int((reference._params["batch_prob"] > 0.5).sum())
    assert 2 < applied < 6
    expected_steps = list(steps)
    maps = applied * (1 if name == "RandomPlasmaShadow" else 3)  # a shade map an image, or one a channel
    assert expected_steps and set(expected_steps) == {maps}  # the release's steps: every map at once
    steps.clear()
    with testing.isolated(only=["augmentation_pipeline"], cpu_half=mode):
        augment = make()
        torch.manual_seed(6)
        got = augment(x)
        assert torch.equal(torch.random.get_rng_state(), stream)
    assert got.dtype == dtype and bitwise_equal(got, expected.to(dtype))
    assert all(torch.equal(augment._params[k], v) for k, v in reference._params.items())
    # five steps a fractal (maps of 5 to 65 pixels a side): the last two (33x33, 65x65) in twos
    calls = len(expected_steps) // 5
    in_twos = [2] * (maps // 2) + [1] * (maps % 2)
    assert calls >= 1 and steps == ([maps] * 3 + in_twos * 2) * calls


def test_diamond_square_by_images_is_the_release_call_bitwise(monkeypatch):
    """``diamond_square_by_images`` against the release's ``diamond_square``: fractals of several
    images and channels, sizes not a power of two plus one, roughness and scale as floats or one per
    image, the same map (values and strides) and random stream, bit for bit; where it does not
    take the call (another random function, a normalized range, float64, a gradient wanted, CUDA
    draws), None, and the original runs."""
    from kornia_halfpatch.fixes import _at_scale

    _small_diamond_steps(monkeypatch)
    with testing.isolated(only=()):
        original = _diamond_square_module().diamond_square
        cpu = torch.device("cpu")
        cases = [((5, 1, 40, 36), torch.rand(5) * 0.6 + 0.1, 1.0), ((2, 3, 33, 70), 0.5, torch.tensor([0.7, 0.3])),
                 ((3, 1, 64, 64), torch.tensor([0.4]), torch.rand(3)), ((4, 2, 100, 9), 0.25, 2)]
        for size, roughness, scale in cases:
            torch.manual_seed(11)
            expected = original(size, roughness, scale, device=cpu, dtype=torch.float32)
            after = torch.random.get_rng_state()
            torch.manual_seed(11)
            got = _at_scale.diamond_square_by_images(original, size, roughness, scale, device=cpu, dtype=torch.float32)
            assert torch.equal(torch.random.get_rng_state(), after), size
            assert got is not None and bitwise_equal(got, expected) and got.stride() == expected.stride(), size
        size, wanted = (3, 1, 40, 40), torch.rand(3).requires_grad_()
        for keywords in ({"random_fn": torch.randn}, {"normalize_range": (0.0, 1.0)}, {"dtype": torch.float64},
                         {"device": None}, {"device": torch.device("meta")}, {"roughness": wanted}):
            options = dict({"device": cpu, "dtype": torch.float32}, **keywords)
            assert _at_scale.diamond_square_by_images(original, size, **options) is None, keywords


def test_a_float32_plasma_outside_the_shim_s_evaluation_is_the_release_s_call(monkeypatch):
    """A user's float32 plasma augmentation, and ``diamond_square`` called directly, are the
    release's whole calls (every step the whole batch), bit for bit; float64 too."""
    _small_diamond_steps(monkeypatch)
    steps = _spy_diamond_steps(monkeypatch)
    for dtype in (torch.float32, torch.float64):
        x = image(5, 3, 40, seed=2).to(dtype)
        with testing.isolated(only=()):
            torch.manual_seed(4)
            expected = kornia.augmentation.RandomPlasmaShadow(p=1.0)(x)
            torch.manual_seed(4)
            fractal = kornia.contrib.diamond_square((5, 1, 40, 40), 0.5, dtype=dtype)
        steps.clear()
        with testing.isolated(only=["augmentation_pipeline"]):
            torch.manual_seed(4)
            got = kornia.augmentation.RandomPlasmaShadow(p=1.0)(x)
            torch.manual_seed(4)
            direct = kornia.contrib.diamond_square((5, 1, 40, 40), 0.5, dtype=dtype)
        assert steps and set(steps) == {5}
        assert bitwise_equal(got, expected) and bitwise_equal(direct, fractal)
