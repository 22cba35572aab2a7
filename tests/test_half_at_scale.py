"""Half at real image sizes (issue 35): kornia's depthwise convolutions in a faster layout, the
numbers held where they were.

``filters_conv_hang``'s conv2d target computes kornia's depthwise CPU convolutions channels-last
(``depthwise_at_scale``): a half image in float32 where its dtype has no arithmetic (cpu_half
"float32"), in its own dtype where it has (cpu_half "native"); a float32 image only inside the
shim's float32 evaluation of a half call. Both cpu_half modes are forced, so every machine proves
both paths. Oracles are computed in the same run (convolutions round per instruction set)."""

import pytest
import torch
import torch.nn.functional as F

import kornia
import kornia_halfpatch
from kornia_halfpatch import _precision, testing
from kornia_halfpatch._kernels import widening_missing_kernels
from kornia_halfpatch.fixes.filters_conv_hang import depthwise_at_scale
from support import UPSTREAM_FIXED, bitwise_equal

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
HALF = (torch.float16, torch.bfloat16)
MODES = ("float32", "native")
ONLY = ["filters_conv_hang", "networks_cpu_half", "kornia_dtypes", "torch_ops"]


def image(batch=2, channels=3, size=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0, 0.5, size)
    return torch.rand(batch, channels, size, size, generator=g) * 0.5 + ramp


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


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["box_blur", "sobel"])
def test_unpromoted_half_filters_in_float32_mode_are_float32_convolutions_narrowed(name, dtype):
    """box_blur and sobel convolve the half image with a half-rounded kernel (the release's
    filter2d casts it): in float32 mode the convolution runs in float32 and is narrowed once, so
    it is at least as close to the float64 filter of the same values as the release's half one,
    and finite."""
    x = image().to(dtype)
    calls = {"box_blur": lambda t: kornia.filters.box_blur(t, (9, 9)),
             "sobel": lambda t: kornia.filters.spatial_gradient(t)}
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
