"""Half precision reached through torch.autocast: float32 inputs, half matmuls and convolutions
inside kornia.

Autocast's reference is the float32 call outside autocast (its contract: float32 in, the float32
answer to within half rounding); kornia 0.9.0 under autocast is the floor. Every row of every
fix table is held to "the float32 call, bitwise" by the contract battery (tests/test_rows.py);
here: the seed fixes under autocast in eager and torch.compile, the cases that fail unpatched
(descriptor networks on flat patches, SSIM, GFTT, bfloat16 warps and augmentations, the PnP
solve, unsharp_mask), the oneDNN hang guard for the convolutions autocast makes float16, and
float32 outside autocast still the release's bit for bit.
"""

import contextlib

import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import _options, testing
from support import UPSTREAM_FIXED, bitwise_equal, cpu_autocast_accepts, grid_module, inductor_compile

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")

AUTOCAST_DTYPES = [
    pytest.param(dtype, id=str(dtype).replace("torch.", ""),
                 marks=pytest.mark.skipif(not cpu_autocast_accepts(dtype), reason=f"this torch's CPU autocast refuses {dtype}"))
    for dtype in (torch.float16, torch.bfloat16)
]


def image(shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def textured(shape, seed=3):
    """Smooth blobs on a ramp (warps, features and descriptors find structure in it)."""
    generator = torch.Generator().manual_seed(seed)
    h, w = shape[-2:]
    y = torch.linspace(0, 1, h).view(h, 1)
    x = torch.linspace(0, 1, w).view(1, w)
    picture = 0.3 * x + 0.2 * y
    for _ in range(6):
        cy, cx = torch.rand(2, generator=generator).tolist()
        s = 0.05 + 0.1 * torch.rand(1, generator=generator).item()
        picture = picture + 0.5 * torch.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * s * s))
    return (picture / picture.max()).expand(*shape).contiguous()


def tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in tensors(item)]
    return []


def assert_autocast_close(got, reference, dtype, neighbourhood=False):
    """Autocast's bound: finite where the float32 reference is, each value within 0.05 of the
    reference's largest plus 8 ulps of ``dtype`` at its own magnitude; a warp's pixel within its
    3x3 neighbourhood's range in the reference (a sampling position off by less than a pixel)."""
    got, reference = tensors(got), tensors(reference)
    assert len(got) == len(reference)
    for index, (g, r) in enumerate(zip(got, reference)):
        assert g.shape == r.shape, index
        if not r.is_floating_point():
            continue
        g, r = g.detach().double(), r.detach().double()
        finite = torch.isfinite(r)
        assert bool(torch.isfinite(g)[finite].all()), f"output {index}: non-finite where the float32 call is finite"
        tolerance = 0.05 * r[finite].abs().max() + 8 * torch.finfo(dtype).eps * r.abs()
        if neighbourhood:
            flat = r.reshape(-1, 1, *r.shape[-2:])
            high = torch.nn.functional.max_pool2d(flat, 3, 1, 1).reshape(r.shape)
            low = -torch.nn.functional.max_pool2d(-flat, 3, 1, 1).reshape(r.shape)
            excess = torch.maximum(g - high, low - g) - tolerance
        else:
            excess = (g - r).abs() - tolerance
        assert float(excess[finite].max()) <= 0, f"output {index}: {float(excess[finite].max()):.3g} beyond the bound"


def under_autocast(dtype, call, *args):
    with torch.autocast("cpu", dtype=dtype):
        return call(*args)


# --------------------------------------------------------------------------------------------
# The seed fixes under autocast, eager


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_create_meshgrid_under_autocast_is_the_float32_grid(dtype):
    grid = grid_module()  # 0.8.3 moved it (kornia.utils keeps deprecation wrappers)
    for make in (lambda: grid.create_meshgrid(8, 300), lambda: grid.create_meshgrid3d(3, 5, 300)):
        assert bitwise_equal(under_autocast(dtype, make), make())


DESCRIPTORS = {
    "SOSNet": lambda: kornia.feature.SOSNet(pretrained=False),
    "HyNet": lambda: kornia.feature.HyNet(pretrained=False, is_bias=False),
    "HardNet": lambda: kornia.feature.HardNet(pretrained=False),
    "HardNet8": lambda: kornia.feature.HardNet8(pretrained=False),
    "SIFTDescriptor": lambda: kornia.feature.SIFTDescriptor(32),
}


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("name", sorted(DESCRIPTORS))
def test_descriptors_under_autocast_are_finite_and_the_float32_descriptors_to_half_rounding(name, dtype):
    """Flat patches (the F2 bug: an exact zero descriptor normalised) and textured ones."""
    torch.manual_seed(0)
    module = DESCRIPTORS[name]().eval()
    patches = torch.cat([torch.zeros(2, 1, 32, 32), torch.full((1, 1, 32, 32), 0.5), textured((2, 1, 32, 32))])
    with torch.no_grad():
        reference = module(patches)
        got = under_autocast(dtype, module, patches)
    assert_autocast_close(got, reference, dtype)
    # kornia 0.9.0's dtypes under autocast: the networks' descriptors in autocast's dtype (their
    # trunks are half), SIFT's the float32 call's (no weights: computed in float32).
    assert got.dtype == (torch.float32 if name == "SIFTDescriptor" else dtype)


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_unpatched_flat_descriptors_under_float16_autocast_are_nan(dtype):
    """The bug the descriptor fix repairs under autocast (so the test above can fail)."""
    if dtype != torch.float16:
        pytest.skip("bfloat16 keeps float32's exponent range: its guards survive")
    torch.manual_seed(0)
    module = kornia.feature.HardNet(pretrained=False).eval()
    with kornia_halfpatch.unpatched(), torch.no_grad():
        out = under_autocast(dtype, module, torch.zeros(2, 1, 32, 32))
    assert not bool(torch.isfinite(out).any())


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_laf_patches_under_autocast_are_the_float32_patches(dtype):
    img = textured((1, 3, 64, 64))
    laf = torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]], [[4.0, 0.0, 30.0], [0.0, 4.0, 34.0]]]])
    for extract in (kornia.feature.extract_patches_simple, kornia.feature.extract_patches_from_pyramid):
        assert bitwise_equal(under_autocast(dtype, extract, img, laf, 16), extract(img, laf, 16)), extract.__name__


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_subpixel_refinement_under_autocast_has_finite_gradients(dtype):
    """ConvQuadInterp3d on [0, 1] responses: under autocast its Hessian comes from half
    convolutions and the 3x3 solve (0.8.3's Cramer rule) divides by determinants around 1e-4."""
    volume = image((1, 1, 5, 40, 40), 1).requires_grad_(True)
    module = kornia.geometry.subpix.ConvQuadInterp3d(strict_maxima_bonus=0.0)
    with torch.autocast("cpu", dtype=dtype):
        coords, values = module(volume)
    (coords.float().sum() + values.float().sum()).backward()
    assert bool(torch.isfinite(volume.grad).all())
    reference = module(volume.detach())
    assert_autocast_close((coords, values), reference, dtype)


def test_single_level_detection_under_autocast_keeps_the_network_half_and_the_rest_float32():
    """KeyNet's per-level detection: the response network runs in autocast's half, as the release
    runs it; the candidates, LAFs and scores come from its widened response in float32 (0.8.3
    fills unfilled slots with finfo(dtype).min / 2: -1.7e38 in float32, -32752 in half)."""
    from examples import single_level_detection_call

    detector, image, num_kp, factor = single_level_detection_call(torch.float32)
    detect = type(detector).detect_features_on_single_level
    reference = detect(detector, image, num_kp, factor)
    for dtype in [p.values[0] for p in AUTOCAST_DTYPES if cpu_autocast_accepts(p.values[0])]:
        with torch.autocast("cpu", dtype=dtype):
            scores, lafs = detect(detector, image, num_kp, factor)
        assert scores.dtype == torch.float32 and lafs.dtype == torch.float32
        assert_autocast_close((scores, lafs), reference, dtype)


# --------------------------------------------------------------------------------------------
# The seed fixes under autocast, compiled (few and small: CI time)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_seed_fixes_under_autocast_compile_as_they_run_eagerly(dtype):
    torch._dynamo.reset()
    try:
        grid = grid_module()  # looked up outside the compiled function (dynamo cannot import)
        cases = [
            (lambda: grid.create_meshgrid(4, 300), ()),
            (kornia.feature.extract_patches_simple,
             (textured((1, 1, 32, 32)), torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]]]]), 8)),
        ]
        torch.manual_seed(0)
        sosnet = kornia.feature.SOSNet(pretrained=False).eval()
        cases.append((sosnet, (torch.cat([torch.zeros(1, 1, 32, 32), textured((1, 1, 32, 32))]),)))
        # The release's sub-voxel refinement masks by data (a graph break unpatched too).
        module = kornia.geometry.subpix.ConvQuadInterp3d(strict_maxima_bonus=0.0)
        cases.append((module, (image((1, 1, 3, 12, 12), 2),)))
        for function, args in cases:
            def under(*inputs, function=function):
                with torch.autocast("cpu", dtype=dtype):
                    return function(*inputs)

            compiled = inductor_compile(under, fullgraph=function is not module)
            with torch.no_grad():
                eager, got = under(*args), compiled(*args)
            for g, e in zip(tensors(got), tensors(eager)):
                assert g.dtype == e.dtype and bool(torch.isfinite(g).all())
                # Inductor fuses the float32 arithmetic its own way: equal to half rounding.
                torch.testing.assert_close(g.float(), e.float(), rtol=0, atol=2 * torch.finfo(dtype).eps * e.abs().max().item())
    finally:
        torch._dynamo.reset()


# --------------------------------------------------------------------------------------------
# What failed under autocast with the release (and with the shim before it decided by the dtype
# that reaches the computation)

AFFINE = torch.tensor([[[0.9, -0.3, 25.6], [0.3, 0.9, -12.8]]])
CASES = {
    "metrics.ssim": (lambda: kornia.metrics.ssim(image((1, 3, 32, 32), 1), image((1, 3, 32, 32), 2), 11), False),
    "feature.gftt_response": (lambda: kornia.feature.gftt_response(textured((1, 1, 32, 32))), False),
    "feature.CornerGFTT": (lambda: kornia.feature.CornerGFTT()(textured((1, 1, 32, 32))), False),
    "geometry.warp_affine 256px": (
        lambda: kornia.geometry.transform.warp_affine(textured((1, 3, 256, 256)), AFFINE, (256, 256)), True),
    "geometry.rotate 256px": (
        lambda: kornia.geometry.transform.rotate(textured((1, 3, 256, 256)), torch.tensor([30.0])), True),
    "augmentation.RandomAffine 256px": (
        lambda: kornia.augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), 10.0, p=1.0)(textured((1, 3, 256, 256))),
        True),
    "augmentation.AugmentationSequential with a mask": (
        lambda: kornia.augmentation.AugmentationSequential(
            kornia.augmentation.RandomAffine(30.0, p=1.0), data_keys=["input", "mask"])(
            textured((1, 3, 128, 128)), (textured((1, 1, 128, 128), 9) > 0.5).float()), True),
    "filters.unsharp_mask": (lambda: kornia.filters.unsharp_mask(textured((1, 3, 32, 32)), (5, 5), (1.5, 1.5)), False),
    "losses.MS_SSIMLoss": (lambda: kornia.losses.MS_SSIMLoss()(image((1, 3, 48, 48), 1), image((1, 3, 48, 48), 2)), False),
    "geometry.solve_pnp_dlt": (lambda: kornia.geometry.solve_pnp_dlt(*PNP_SCENE), False),
    "feature.DenseSIFTDescriptor flat": (lambda: kornia.feature.DenseSIFTDescriptor()(torch.zeros(1, 1, 24, 24)), False),
}


def pnp_scene():
    """Ten world points before a camera and their projections (built outside autocast: the
    projection is a matmul)."""
    generator = torch.Generator().manual_seed(7)
    world = torch.rand(1, 10, 3, generator=generator) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])
    K = torch.tensor([[[100.0, 0.0, 50.0], [0.0, 100.0, 50.0], [0.0, 0.0, 1.0]]])
    projected = (K @ world.transpose(1, 2)).transpose(1, 2)
    return world, projected[..., :2] / projected[..., 2:], K


PNP_SCENE = pnp_scene()


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_operations_under_autocast_are_the_float32_call_to_half_rounding(name, dtype):
    call, warp = CASES[name]
    torch.manual_seed(0)
    reference = call()
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=dtype):
        got = call()
    assert_autocast_close(got, reference, dtype, neighbourhood=warp)


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_float32_outside_autocast_is_the_releases_bit_for_bit(dtype):
    """After an autocast call, the same float32 calls outside autocast are the release's."""
    for name in ("metrics.ssim", "geometry.warp_affine 256px", "feature.gftt_response"):
        call, _ = CASES[name]
        with torch.autocast("cpu", dtype=dtype):
            call()
        patched = call()
        with kornia_halfpatch.unpatched():
            unpatched = call()
        assert all(bitwise_equal(a, b) for a, b in zip(tensors(patched), tensors(unpatched))), name


# --------------------------------------------------------------------------------------------
# The oneDNN hang: float16 depthwise convolutions with a kernel side >= 15 never return on
# avx512_fp16 CPUs, whether the half tensors come in or autocast makes them. A spy on the
# dispatcher proves, on any CPU, that none runs with the guard on.


class ConvolutionSpy(torch.utils._python_dispatch.TorchDispatchMode):
    """Records (input dtype, weight shape, groups) of every aten convolution."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in (torch.ops.aten.convolution, torch.ops.aten._convolution):
            self.calls.append((args[0].dtype, tuple(args[1].shape), args[-1] if isinstance(args[-1], int) else None))
        return func(*args, **kwargs)


def hang_prone(calls):
    return [c for c in calls if c[0] == torch.float16 and len(c[1]) == 4 and c[1][1] == 1 and c[1][0] >= 2
            and max(c[1][-2:]) >= 15]


HANG_CALLS = {
    "MS_SSIMLoss": lambda: kornia.losses.MS_SSIMLoss()(image((1, 3, 40, 40), 1), image((1, 3, 40, 40), 2)),
    "blur_pool2d": lambda: kornia.filters.blur_pool2d(image((1, 3, 40, 40)), 17),
    "filter2d 17x17": lambda: kornia.filters.filter2d(image((1, 3, 40, 40)), torch.ones(1, 17, 17) / 289),
    "gaussian_blur2d 17x17": lambda: kornia.filters.gaussian_blur2d(image((1, 3, 40, 40)), (17, 17), (4.0, 4.0)),
}


@pytest.mark.parametrize("name", sorted(HANG_CALLS))
def test_no_hang_prone_float16_convolution_runs_under_float16_autocast(monkeypatch, name):
    if not cpu_autocast_accepts(torch.float16):
        pytest.skip("this torch's CPU autocast refuses float16")
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "on")
    call = HANG_CALLS[name]
    reference = call()
    with testing.isolated():
        assert kornia_halfpatch.status().fixes["filters_conv_hang"].applied
        spy = ConvolutionSpy()
        with spy, torch.autocast("cpu", dtype=torch.float16):
            got = call()
    assert spy.calls, "the spy saw no convolution"
    assert not hang_prone(spy.calls), hang_prone(spy.calls)
    assert_autocast_close(got, reference, torch.float16)
    # Unpatched, autocast runs these convolutions in float16 (the hang on avx512_fp16 CPUs): the
    # spy sees them (nothing is run to completion that could hang: the spy only records, and on a
    # CPU with avx512_fp16 this leg is not run).
    if not _cpu_has_avx512_fp16():
        spy = ConvolutionSpy()
        with kornia_halfpatch.unpatched(), spy, torch.autocast("cpu", dtype=torch.float16):
            call()
        assert hang_prone(spy.calls), "unpatched, autocast makes these convolutions float16"


def _cpu_has_avx512_fp16():
    from kornia_halfpatch.fixes.filters_conv_hang import cpu_has_avx512_fp16

    return cpu_has_avx512_fp16()


def _outcome(function, *args):
    try:
        return function(*args)
    except Exception as error:  # the release's own refusal of meta tensors is the reference
        return error


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tensors_on_device_types_autocast_does_not_know_pass_through_as_unpatched(dtype):
    """A meta tensor (shape inference, fake tensors) under CPU autocast: torch's autocast has no
    meta device type and raises when asked about it; the fixes must treat it as "no autocast" and
    give the release's shapes and dtypes (or its own error), never autocast's error."""
    from kornia_halfpatch import _precision

    meta = torch.empty(1, 1, 32, 32, device="meta", dtype=dtype)
    assert _precision.autocast_dtype("meta") is None
    assert not _precision.leave_autocast(meta) and _precision.half_reaching(meta) == dtype
    laf = torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]]]], device="meta")
    cases = [
        (kornia.filters.gaussian_blur2d, meta, (3, 3), (1.0, 1.0)),
        (kornia.feature.extract_patches_simple, meta, laf, 8),
        (kornia.geometry.transform.warp_affine, meta, torch.eye(2, 3, device="meta")[None], (16, 16)),
    ]
    caller_state = torch.autocast("cpu", dtype=dtype) if cpu_autocast_accepts(dtype) else contextlib.nullcontext()
    for function, *args in cases:
        with caller_state:
            with testing.isolated(()):
                expected = _outcome(function, *args)
            got = _outcome(function, *args)
        name = function.__name__
        if isinstance(expected, Exception):
            assert isinstance(got, type(expected)), (name, expected, got)
        else:
            assert not isinstance(got, Exception), (name, got)
            assert got.device.type == "meta" and (got.shape, got.dtype) == (expected.shape, expected.dtype), name


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_mkd_whitening_built_under_autocast_runs_under_autocast_as_the_release_runs_it(dtype):
    """kornia's PCA whitening with eigenvalue attenuation (``pcawt``) multiplies its eigenvectors
    at construction: built under autocast, the module holds a half matrix beside float32 ones.
    The release runs it under autocast (the matmul casts both operands); a float32 call with
    autocast off would meet a dtype error (kornia 0.8.3's own test_whitened_shape did)."""
    from kornia.feature.mkd import Whitening

    generator = torch.Generator().manual_seed(0)
    mkd = kornia.feature.MKDDescriptor(patch_size=9, kernel_type="polar", whitening=None).eval()
    dims = mkd.odims
    eigvecs, _ = torch.linalg.qr(torch.randn(dims, dims, generator=generator))
    model = {"pca": {"mean": 0.01 * torch.randn(dims, generator=generator), "eigvecs": eigvecs,
                     "eigvals": torch.linspace(2.0, 0.1, dims)}}
    patches = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(1))
    mkd.whitening, mkd.whitening_layer = "pcawt", Whitening("pcawt", model, in_dims=dims, output_dims=64)
    with torch.no_grad():
        reference = mkd(patches)  # the float32 call outside autocast
    with torch.autocast("cpu", dtype=dtype):
        mkd.whitening_layer = Whitening("pcawt", model, in_dims=dims, output_dims=64)
        assert mkd.whitening_layer.evecs.dtype == dtype  # kornia's construction under autocast
        with testing.isolated(()):
            expected = mkd(patches)
        got = mkd(patches)
    assert got.dtype == expected.dtype and got.shape == expected.shape == (2, 64)
    assert torch.isfinite(got).all()
    # The half eigenvectors are the module's own now: within the census's bound of the float32 call.
    assert (got.float() - reference).abs().max() <= 0.05 * reference.abs().max()
