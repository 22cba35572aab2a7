"""warp_sampling: kornia's half CPU grid_sample calls run in float32; NaN grids safe in backward.

Oracle (README, "float32 stays bitwise; half = widened, narrowed"; kornia 0.9.0 changed warp float32 results at the ulp level, so
it is not one here): the installed release's own unpatched computation in which every call that
reaches torch's ``grid_sample`` with a half CPU image is widened to float32 and narrowed. That is
done by a ``TorchFunctionMode`` (torch's interception, not the shim's module views), so the
buggy half kernel never runs in the oracle. Invariants: finite, inside the image's range, torch's
kernel never sees a half CPU image, float32 bitwise unchanged.
"""

import ast
import importlib
import inspect
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import kornia
import kornia_halfpatch
from kornia_halfpatch import _bindings, _environment, _options, testing
from kornia_halfpatch.fixes import warp_sampling as fix
from support import (
    HALF_DTYPES, KORNIA, MISSING_KERNEL_ERROR, TORCH, bitwise_equal, expect_missing_kernel_error, lacks_half_kernel,
    needs_old_kornia, widening_half_products,
)

NAME = "warp_sampling"
TORCH_GRID_SAMPLE = kornia_halfpatch.get_original(F.grid_sample)
T = kornia.geometry.transform


@pytest.fixture(autouse=True)
def only_this_fix():
    """Each test sees kornia with this fix alone, configured by default; state restored after."""
    with testing.isolated(only=[NAME]):
        yield


class TorchGridSampleCalls(TorchFunctionMode):
    """Sees every call that reaches torch's own grid_sample. With ``widen=True`` a half CPU call is
    computed as the oracle defines it: inputs widened to float32, torch's kernel, narrowed once."""

    def __init__(self, widen: bool = False):
        super().__init__()
        self.widen = widen
        self.dtypes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kornia_halfpatch.get_original(func) is TORCH_GRID_SAMPLE:
            bound = inspect.signature(func).bind(*args, **kwargs)
            image, grid = bound.arguments.pop("input"), bound.arguments.pop("grid")
            self.dtypes.append(image.dtype)
            if self.widen and image.device.type == "cpu" and image.dtype in HALF_DTYPES and grid.dtype == image.dtype:
                return func(image.float(), grid.float(), **bound.arguments).to(image.dtype)
        return func(*args, **kwargs)


def oracle(run, *args):
    """The unpatched release, every half CPU grid_sample call widened: (result or exception, dtypes)."""
    with kornia_halfpatch.unpatched([NAME]):
        with TorchGridSampleCalls(widen=True) as calls:
            try:
                return run(*args), calls.dtypes
            except Exception as exc:  # the release may not support half here at all
                return exc, calls.dtypes


def patched_with_record(run, *args):
    with TorchGridSampleCalls() as calls:
        try:
            return run(*args), calls.dtypes
        except Exception as exc:
            return exc, calls.dtypes


def flat(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flat(item)]
    return []


def seeded(*shape, low=0.0, high=1.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(*shape, generator=generator)


# --------------------------------------------------------------------------------------------
# Every kornia call site, driven through kornia's public API (H, W >= 182: the broken sizes)

H, W = 184, 190


def _image(dtype, channels=3):
    return seeded(1, channels, H, W, seed=1).to(dtype)


def _affine(dtype):
    center = torch.tensor([[W / 3, H / 2]])
    return T.get_rotation_matrix2d(center, torch.tensor([-71.0]), torch.tensor([[1.1, 0.9]])).to(dtype)


def _homography(dtype):
    matrix = torch.eye(3)[None].clone()
    matrix[:, :2, :] = _affine(torch.float32)
    matrix[:, 2, :2] = torch.tensor([[1e-4, -2e-4]])
    return matrix.to(dtype)


def case_warp_affine(dtype):
    return T.warp_affine(_image(dtype), _affine(dtype), (H, W), padding_mode="border")


def case_warp_affine_fill(dtype):
    if "fill_value" not in inspect.signature(T.warp_affine).parameters:
        pytest.skip("this kornia has no padding_mode='fill'")
    fill = torch.tensor([0.25, 0.5, 0.75], dtype=dtype)
    return T.warp_affine(_image(dtype), _affine(dtype), (H, W), padding_mode="fill", fill_value=fill)


def case_warp_perspective(dtype):
    return T.warp_perspective(_image(dtype), _homography(dtype), (H, W), padding_mode="reflection")


def case_rotate(dtype):
    return T.rotate(_image(dtype), torch.tensor([145.0], dtype=dtype))


def case_translate(dtype):
    return T.translate(_image(dtype), torch.tensor([[-40.5, 3.25]], dtype=dtype))


def case_scale(dtype):
    return T.scale(_image(dtype), torch.tensor([[0.5, 1.9]], dtype=dtype))


def case_shear(dtype):
    return T.shear(_image(dtype), torch.tensor([[-0.3, 0.05]], dtype=dtype))


def case_affine_module(dtype):
    module = T.Affine(angle=torch.tensor([-50.0], dtype=dtype), translation=torch.tensor([[1.0, -2.0]], dtype=dtype))
    return module(_image(dtype))


def case_remap(dtype):
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32), indexing="ij")
    map_x = (xs * 0.97 + 3.0 + 2.0 * torch.sin(ys / 9.0))[None].to(dtype)
    map_y = (ys * 1.02 - 2.0 + 2.0 * torch.cos(xs / 7.0))[None].to(dtype)
    return T.remap(_image(dtype), map_x, map_y, align_corners=True, normalized_coordinates=False)


def case_homography_warp(dtype):
    normalized = torch.eye(3)[None].clone()
    normalized[:, 0, 1], normalized[:, 1, 0], normalized[:, 0, 2] = 0.15, -0.1, 0.05
    return T.homography_warp(_image(dtype), normalized.to(dtype), (H, W))


def case_homography_warper(dtype):
    normalized = torch.eye(3)[None].clone()
    normalized[:, 0, 1], normalized[:, 1, 2] = 0.2, -0.07
    warper = T.HomographyWarper(H, W)
    direct = warper(_image(dtype), normalized.to(dtype))
    warper.precompute_warp_grid(normalized.to(dtype))
    return direct, warper(_image(dtype))


def case_elastic_transform2d(dtype):
    noise = seeded(1, 2, H, W, low=-1.0, high=1.0, seed=3).to(dtype)
    # A 7-tap smoothing of the noise, not the default 63: the blur is not what this fix samples,
    # and only warp_sampling is applied here, so a 63x63 blur ran in float16 on CPUs without
    # float16 arithmetic (9 s a case on an AVX2 CPU).
    return T.elastic_transform2d(_image(dtype), noise, kernel_size=(7, 7), sigma=(4.0, 4.0), padding_mode="border")


def case_warp_image_tps(dtype):
    points_src = seeded(1, 5, 2, low=-0.9, high=0.9, seed=4)
    points_dst = points_src + seeded(1, 5, 2, low=-0.1, high=0.1, seed=5)
    kernel, affine = T.get_tps_transform(points_dst, points_src)
    return T.warp_image_tps(_image(dtype), points_dst.to(dtype), kernel.to(dtype), affine.to(dtype))


def _pinhole(dtype):
    from kornia.geometry.camera import PinholeCamera

    intrinsics = torch.tensor([[[200.0, 0, W / 2, 0], [0, 200.0, H / 2, 0], [0, 0, 1, 0], [0, 0, 0, 1]]])
    extrinsics = torch.eye(4)[None]
    extrinsics[0, 0, 3] = 0.05
    as_dtype = lambda t: t.to(dtype)  # noqa: E731
    return PinholeCamera(as_dtype(intrinsics), as_dtype(extrinsics), as_dtype(torch.tensor([H])), as_dtype(torch.tensor([W])))


def case_warp_frame_depth(dtype):
    from kornia.geometry.depth import warp_frame_depth

    depth = (2.0 + seeded(1, 1, H, W, seed=6)).to(dtype)
    src_trans_dst = torch.eye(4)[None]
    src_trans_dst[0, 0, 3] = 0.03
    camera = torch.tensor([[[200.0, 0, W / 2], [0, 200.0, H / 2], [0, 0, 1]]])
    return warp_frame_depth(_image(dtype), depth, src_trans_dst.to(dtype), camera.to(dtype))


def case_depth_warper(dtype):
    from kornia.geometry.depth import DepthWarper

    # The projection is computed in float32 (linalg.inv has no half kernel) and handed to the
    # half warp, as a user with half images would.
    warper = DepthWarper(_pinhole(torch.float32), H, W)
    source = _pinhole(torch.float32)
    source.extrinsics[0, 0, 3] = 0.0
    warper.compute_projection_matrix(source)
    warper._dst_proj_src = warper._dst_proj_src.to(dtype)
    inverse_depth = (0.3 + seeded(1, 1, H, W, seed=7)).to(dtype)
    return warper(inverse_depth, _image(dtype))


def case_warp_affine3d(dtype):
    volume = seeded(1, 2, 6, 60, 64, seed=8).to(dtype)
    matrix = torch.tensor([[[0.98, -0.17, 0.0, 3.0], [0.17, 0.98, 0.0, -2.0], [0.0, 0.0, 1.0, 0.5]]])
    return T.warp_affine3d(volume, matrix.to(dtype), (6, 60, 64))


def case_extract_patches_simple(dtype):
    from kornia.feature import extract_patches_simple

    laf = torch.tensor([[[[20.0, 5.0, 60.0], [-3.0, 25.0, 170.0]], [[40.0, 0.0, 150.0], [0.0, 40.0, 90.0]]]])
    return extract_patches_simple(_image(dtype), laf.to(dtype), PS=16)


def _augmentation(name, **kwargs):
    import kornia.augmentation as K

    def run(dtype):
        augmentation = getattr(K, name)(p=1.0, **kwargs)
        torch.manual_seed(11)  # same sampled parameters in the oracle and the patched run
        return augmentation(_image(dtype))

    return run


def _deformable_attention_module():
    for name in ("kornia.models.rt_detr.architecture.rtdetr_head", "kornia.contrib.models.rt_detr.architecture.rtdetr_head"):
        try:
            return importlib.import_module(name).MultiScaleDeformableAttention
        except ImportError:
            continue
    pytest.skip("no RT-DETR head in this kornia")


def case_deformable_attention(dtype):
    module_class = _deformable_attention_module()
    torch.manual_seed(12)
    attention = module_class(32, 4, 1, 4).to(dtype)
    query = seeded(1, 7, 32, seed=13).to(dtype)
    reference = seeded(1, 7, 1, 4, low=0.2, high=0.8, seed=14).to(dtype)
    value = seeded(1, 190 * 184, 32, seed=15).to(dtype)
    return attention(query, reference, value, [(184, 190)])


def case_interpolate_sparse2d(dtype):
    try:
        from kornia.feature.xfeat import InterpolateSparse2d
    except ImportError:
        pytest.skip("no XFeat in this kornia")
    features = _image(dtype)
    positions = seeded(1, 40, 2, low=0.0, high=180.0, seed=16).to(dtype)
    return InterpolateSparse2d("bilinear")(features, positions, H, W)


CASES = {
    "warp_affine": case_warp_affine,
    "warp_affine fill": case_warp_affine_fill,
    "warp_perspective": case_warp_perspective,
    "rotate": case_rotate,
    "translate": case_translate,
    "scale": case_scale,
    "shear": case_shear,
    "Affine": case_affine_module,
    "remap": case_remap,
    "homography_warp": case_homography_warp,
    "HomographyWarper": case_homography_warper,
    "elastic_transform2d": case_elastic_transform2d,
    "warp_image_tps": case_warp_image_tps,
    "warp_frame_depth": case_warp_frame_depth,
    "DepthWarper": case_depth_warper,
    "warp_affine3d": case_warp_affine3d,
    "extract_patches_simple": case_extract_patches_simple,
    "RandomAffine": _augmentation("RandomAffine", degrees=40.0, translate=(0.1, 0.1)),
    "RandomRotation": _augmentation("RandomRotation", degrees=60.0),
    "RandomPerspective": _augmentation("RandomPerspective", distortion_scale=0.4),
    "RandomElasticTransform": _augmentation("RandomElasticTransform", kernel_size=(7, 7), sigma=(4.0, 4.0)),
    "RandomThinPlateSpline": _augmentation("RandomThinPlateSpline"),
    "MultiScaleDeformableAttention": case_deformable_attention,
    "InterpolateSparse2d": case_interpolate_sparse2d,
}


@needs_old_kornia
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_half_call_site_equals_the_widened_unpatched_call_bitwise(case, dtype):
    expected, oracle_dtypes = oracle(CASES[case], dtype)
    actual, torch_dtypes = patched_with_record(CASES[case], dtype)
    if isinstance(expected, Exception):
        # This release cannot run the case in half precision at all; the patch must not hide that.
        assert isinstance(actual, type(expected)) and str(actual) == str(expected), (expected, actual)
        return
    assert not isinstance(actual, Exception), actual
    assert oracle_dtypes, "the case never reached grid_sample"
    assert torch_dtypes and all(d in (torch.float32, torch.float64) for d in torch_dtypes), torch_dtypes
    for got, want in zip(flat(actual), flat(expected)):
        assert bitwise_equal(got, want), f"{case} {dtype}: max diff {(got.float() - want.float()).abs().max()}"


@needs_old_kornia
@pytest.mark.parametrize("case", ["warp_perspective", "rotate", "remap", "HomographyWarper", "warp_affine3d", "MultiScaleDeformableAttention"])
def test_float32_call_site_is_bitwise_unchanged(case):
    with kornia_halfpatch.unpatched([NAME]):
        expected = CASES[case](torch.float32)
    actual = CASES[case](torch.float32)
    for got, want in zip(flat(actual), flat(expected)):
        assert bitwise_equal(got, want), case


# --------------------------------------------------------------------------------------------
# Every call site in the installed source is bound to the replacement (independent of the
# engine's bytecode scan: a regular expression over the source text)

SAMPLERS = ("grid_sample", "map_coordinates")


def source_call_sites(module):
    """(line, dotted callee) of every call of grid_sample / map_coordinates in the module's source."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return []
    found = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Call):
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
            if name in SAMPLERS:
                found.append((node.lineno, ast.unparse(callee)))
    return found


def resolve_call_site(module, expression):
    names = expression.split(".")
    value = module.__dict__[names[0]]
    for name in names[1:]:
        value = getattr(value, name)
    return value


@needs_old_kornia
def test_every_grid_sample_call_in_loaded_kornia_source_reaches_the_replacement():
    sites = []
    for name, module in list(sys.modules.items()):
        if _bindings.is_kornia_module(name):
            sites += [(name, line, expression) for line, expression in source_call_sites(module)]
    assert len(sites) >= 15, sites  # warps, remap, homography, depth, elastic, TPS, LAF, ...
    missed = [
        (name, line, expression)
        for name, line, expression in sites
        if not kornia_halfpatch.is_patched(resolve_call_site(sys.modules[name], expression))
    ]
    assert missed == []
    assert F.grid_sample is TORCH_GRID_SAMPLE  # torch itself is untouched


@needs_old_kornia
def test_revert_gives_kornia_back_the_real_torch_modules():
    kornia_halfpatch.revert()
    leftovers = []
    for name, module in list(sys.modules.items()):
        if _bindings.is_kornia_module(name):
            for attribute, value in list(vars(module).items()):
                if kornia_halfpatch.is_patched(value) or (
                    type(value) is type(sys) and "__kornia_halfpatch_view_of__" in value.__dict__
                ):
                    leftovers.append(f"{name}.{attribute}")
    assert leftovers == []
    assert T.imgwarp.F is F


# --------------------------------------------------------------------------------------------
# Invariants: sizes around the 32768-element plane limit, layouts, modes

SIZES = [64, 181, 182, 256, 512]
PADDINGS = ["zeros", "border", "reflection"]
MODES = ["bilinear", "nearest", "bicubic"]


def rotation_maps(size, dtype, degrees=37.0):
    """Pixel maps of a rotation about the centre with a slight zoom, made in float32."""
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    centre, angle = (size - 1) / 2, torch.tensor(degrees).deg2rad()
    x, y = (xs - centre) * 1.08, (ys - centre) * 1.08
    map_x = centre + x * torch.cos(angle) - y * torch.sin(angle)
    map_y = centre + x * torch.sin(angle) + y * torch.cos(angle)
    return map_x[None].to(dtype), map_y[None].to(dtype)


def half_test_images(size, dtype):
    """(label, image): C 1 and 3, contiguous and channels-last, values in [-0.5, 2]."""
    for channels in (1, 3):
        image = seeded(1, channels, size, size, low=-0.5, high=2.0, seed=size + channels).to(dtype)
        yield f"C={channels} contiguous", image
        yield f"C={channels} channels_last", image.contiguous(memory_format=torch.channels_last)


def assert_in_range(out, image, padding, mode, label):
    assert torch.isfinite(out).all(), label
    if mode == "bicubic":  # bicubic overshoots by design: finite is all it promises
        return
    low, high = float(image.min()), float(image.max())
    if padding == "zeros":
        low, high = min(low, 0.0), max(high, 0.0)
    assert low <= float(out.min()) and float(out.max()) <= high, label


@needs_old_kornia
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_half_remap_is_finite_in_range_and_equals_the_oracle_in_every_mode(size, dtype):
    map_x, map_y = rotation_maps(size, dtype)
    for label, image in half_test_images(size, dtype):
        for padding in PADDINGS:
            for mode in MODES:

                def run():
                    return T.remap(image, map_x, map_y, mode=mode, padding_mode=padding, align_corners=False)

                where = f"{size} {label} {padding} {mode}"
                out = run()
                assert_in_range(out, image, padding, mode, where)
                if (size == 182 and label.startswith("C=3")) or (size == 512 and label == "C=3 contiguous"):
                    expected, _ = oracle(run)
                    assert bitwise_equal(out, expected), where


@needs_old_kornia
@pytest.mark.parametrize("size", [181, 182, 512])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_half_rotate_is_in_range_and_equals_the_oracle(size, dtype):
    """The issue's case: kornia's rotate (0.8.2 + torch 2.13: 18-20 of 20 trials out of range)."""
    angle = torch.tensor([37.0], dtype=dtype)
    image = seeded(1, 3, size, size, seed=size).to(dtype)
    for padding in ("zeros", "border"):

        def run():
            # torch 2.1: rotate's float16 matrix product has no kernel; computed widened in both runs
            with widening_half_products(dtype):
                return T.rotate(image, angle, padding_mode=padding)

        out = run()
        assert_in_range(out, image, padding, "bilinear", f"{size} {padding}")
        expected, _ = oracle(run)
        assert bitwise_equal(out, expected)


@needs_old_kornia
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_unpatched_release_is_broken_where_the_patch_is_not(dtype):
    """The image sits 65536 elements into a buffer of 1000s: torch's wrapped reads land there."""
    size = 182
    buffer = torch.full((65536 + size * size,), 1000.0, dtype=dtype)
    image = torch.as_strided(buffer, (1, 1, size, size), (size * size, size * size, size, 1), 65536)
    image.copy_(seeded(1, 1, size, size, seed=3).to(dtype))
    angle = torch.tensor([33.0], dtype=dtype)
    with kornia_halfpatch.unpatched([NAME]):
        if TORCH < fix.FIRST_HALF_CPU_KERNEL:  # no half CPU kernel at all: the release cannot rotate
            with expect_missing_kernel_error(match="grid_sampler_2d"), widening_half_products(dtype):
                T.rotate(image, angle)  # (torch 2.1: past rotate's float16 matrix product, widened)
        else:
            broken = T.rotate(image, angle)
            assert float(broken.max()) > 1.0  # the sentinel leaked into the result
    with widening_half_products(dtype):
        fixed = T.rotate(image, angle)
    assert float(fixed.max()) <= 1.0 and float(fixed.min()) >= 0.0


@needs_old_kornia
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_float_results_and_gradients_with_finite_grids_are_bitwise_unchanged(padding, dtype):
    """Including the autograd path that masks non-finite coordinates: a no-op here."""

    def run():
        image = seeded(2, 3, 40, 44, seed=21).to(dtype).requires_grad_(True)
        angle = torch.tensor([17.0, -63.0], dtype=dtype, requires_grad=True)
        out = T.rotate(image, angle, padding_mode=padding)
        weights = seeded(*out.shape, seed=22).to(dtype)
        image_grad, angle_grad = torch.autograd.grad((out * weights).sum(), (image, angle))
        return out.detach(), image_grad, angle_grad

    with kornia_halfpatch.unpatched([NAME]):
        expected = run()
    for got, want in zip(run(), expected):
        assert bitwise_equal(got, want)


@needs_old_kornia
def test_calls_off_the_cpu_go_to_torch_unchanged():
    replacement = T.imgwarp.F.grid_sample
    assert kornia_halfpatch.is_patched(replacement)
    devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])  # meta: any non-CPU device
    for device in devices:
        image = torch.zeros(1, 1, 200, 200, device=device, dtype=torch.float16, requires_grad=True)
        grid = torch.zeros(1, 8, 8, 2, device=device, dtype=torch.float16, requires_grad=True)
        with TorchGridSampleCalls() as calls:
            replacement(image, grid, padding_mode="border")
        assert calls.dtypes == [torch.float16], device  # not widened, not masked (one plain call)


# --------------------------------------------------------------------------------------------
# Which workaround, and forcing each one


def test_torch_versions_map_to_the_measured_workarounds():
    table = {
        (2, 0, 1): fix.NO_KERNEL,
        (2, 5, 1): fix.NO_KERNEL,
        (2, 6, 0): fix.OVERFLOW,
        (2, 9, 1): fix.OVERFLOW,
        (2, 13, 0): fix.OVERFLOW,
        (2, 14, 1): fix.OVERFLOW,
        (2, 14, 2): None,
        (2, 15, 0): None,
        (3, 0): None,
    }
    for version, expected in table.items():
        found = fix.workaround_for_version(version)
        assert (found.kind if found else None) == expected, version
    assert fix.TORCH_VERSION == _environment.parse_version(torch.__version__)
    assert all(isinstance(part, int) for part in fix.TORCH_VERSION)


MEASURED_OVERFLOW_TORCH = fix.FIRST_HALF_CPU_KERNEL <= fix.TORCH_VERSION <= fix.LAST_KNOWN_OVERFLOW


def test_probe_tells_the_three_kernels_apart():
    if MEASURED_OVERFLOW_TORCH:
        assert fix.probe_half_cpu_kernel() == fix.OVERFLOW

    def correct(image, grid, **kwargs):
        return TORCH_GRID_SAMPLE(image.float(), grid.float(), **kwargs).to(image.dtype)

    def missing(image, grid, **kwargs):
        raise RuntimeError('"grid_sampler_2d_cpu" not implemented for \'Half\'')

    assert fix.probe_half_cpu_kernel(correct) == fix.NONE
    assert fix.probe_half_cpu_kernel(missing) == fix.NO_KERNEL


def half_dtype_reaching_torch():
    image = seeded(1, 1, 16, 16, seed=2).half()  # small: torch's own half kernel is safe here
    with TorchGridSampleCalls() as calls, widening_half_products(torch.float16):  # torch 2.1: rotate's product
        refused_by_torch(lambda: T.rotate(image, torch.tensor([10.0], dtype=torch.float16)), calls)
    return calls.dtypes


def refused_by_torch(run, calls):
    """Runs ``run``; a torch without a half CPU grid_sample must refuse exactly the half call
    (the mode records its dtype before torch's kernel raises)."""
    if TORCH >= fix.FIRST_HALF_CPU_KERNEL:
        return run()
    try:
        return run()
    except MISSING_KERNEL_ERROR:
        assert calls.dtypes[-1:] in ([torch.float16], [torch.bfloat16])


@needs_old_kornia
@pytest.mark.parametrize("choice", fix.CHOICES)
def test_each_workaround_can_be_forced_with_an_apply_option(choice):
    report = kornia_halfpatch.apply(only=[NAME], grid_sample_workaround=choice)
    assert NAME in report.applied
    line = report.facts[NAME]
    expected_kind = {fix.AUTO: fix.OVERFLOW, fix.PROBE: fix.OVERFLOW}.get(choice, choice)
    if choice in (fix.AUTO, fix.PROBE) and not MEASURED_OVERFLOW_TORCH:
        pytest.skip("the expected verdict is only known on a measured torch 2.6-2.14.1")
    assert fix.current_workaround().kind == expected_kind
    assert line.startswith(fix._KIND_TEXT[expected_kind]) and "in force" in line
    if choice in (fix.NONE, fix.NO_KERNEL, fix.OVERFLOW):
        assert "forced by apply(grid_sample_workaround=...)" in line
    if choice == fix.PROBE:
        assert "probe" in line
    assert half_dtype_reaching_torch() == ([torch.float16] if expected_kind == fix.NONE else [torch.float32])


@needs_old_kornia
def test_environment_variable_forces_the_workaround_and_the_option_beats_it(monkeypatch):
    monkeypatch.setenv(_options.GRID_SAMPLE_WORKAROUND.variable, "none")
    kornia_halfpatch.revert()
    report = kornia_halfpatch.apply(only=[NAME])
    assert f"forced by {_options.GRID_SAMPLE_WORKAROUND.variable}" in report.facts[NAME]
    assert half_dtype_reaching_torch() == [torch.float16]
    report = kornia_halfpatch.apply(only=[NAME], grid_sample_workaround="no-kernel")
    assert report.facts[NAME].startswith(fix._KIND_TEXT[fix.NO_KERNEL])
    assert half_dtype_reaching_torch() == [torch.float32]
    monkeypatch.setenv(_options.GRID_SAMPLE_WORKAROUND.variable, "sometimes")
    kornia_halfpatch.revert()
    with pytest.raises(ValueError, match="KORNIA_HALFPATCH_GRID_SAMPLE_WORKAROUND='sometimes' is not one of auto, probe"):
        kornia_halfpatch.apply(only=[NAME])


@needs_old_kornia
def test_a_torch_newer_than_measured_is_decided_by_the_probe(monkeypatch):
    monkeypatch.setattr(fix, "TORCH_VERSION", (2, 15, 0))
    monkeypatch.setattr(fix, "_probe_result", None)
    report = kornia_halfpatch.apply(only=[NAME], grid_sample_workaround="auto")
    assert fix._probe_result == fix.probe_half_cpu_kernel()  # ran once, result kept
    assert "newer than 2.14.1" in report.facts[NAME]
    # On this torch (2.6-2.14.1 in CI) the probe finds the overflow, so half is widened.
    if fix.FIRST_HALF_CPU_KERNEL <= _environment.parse_version(torch.__version__) <= fix.LAST_KNOWN_OVERFLOW:
        assert half_dtype_reaching_torch() == [torch.float32]


def test_bad_option_values_and_names_are_rejected():
    with pytest.raises(ValueError, match="grid_sample_workaround must be one of auto, probe, none, no-kernel, overflow, got 'always'"):
        kornia_halfpatch.apply(only=[NAME], grid_sample_workaround="always")
    with pytest.raises(ValueError, match="grid_sample_everywhere must be True or False"):
        kornia_halfpatch.apply(only=[NAME], grid_sample_everywhere="yes")
    with pytest.raises(TypeError, match="unknown kornia_halfpatch option 'grid_sample_mode'"):
        kornia_halfpatch.apply(grid_sample_mode="x")


@needs_old_kornia
def test_status_reports_the_workaround_and_why():
    line = kornia_halfpatch.status().facts[NAME]
    assert "in force for kornia's calls only" in line
    if MEASURED_OVERFLOW_TORCH:
        assert "16-bit offset overflow" in line and f"torch {_environment.format_version(fix.TORCH_VERSION)}" in line
    kornia_halfpatch.revert()
    assert "not applied" in kornia_halfpatch.status().facts[NAME]


# --------------------------------------------------------------------------------------------
# Scope: kornia only by default, everywhere only when asked


def user_code_sample(image, grid):
    return F.grid_sample(image, grid, align_corners=False)


@needs_old_kornia
@pytest.mark.filterwarnings("ignore::kornia_halfpatch.HalfPatchWarning")  # this module's TORCH_GRID_SAMPLE
def test_torch_and_user_code_are_untouched_unless_asked():
    assert F.grid_sample is TORCH_GRID_SAMPLE
    image = seeded(1, 1, 16, 16).half()
    grid = seeded(1, 4, 4, 2, low=-1, high=1).half()
    with TorchGridSampleCalls() as calls:
        refused_by_torch(lambda: user_code_sample(image, grid), calls)
    assert calls.dtypes == [torch.float16]

    with kornia_halfpatch.patched(only=[NAME], grid_sample_everywhere=True) as report:
        assert kornia_halfpatch.is_patched(F.grid_sample)
        assert "every caller" in report.facts[NAME]
        with TorchGridSampleCalls() as calls:
            user_code_sample(image, grid)
        assert calls.dtypes == [torch.float32]
        # kornia's modules hold torch's own module again, whose grid_sample is the replacement
        assert T.imgwarp.F is F
    # patched() gave the fix its previous (kornia-only) options back
    assert F.grid_sample is TORCH_GRID_SAMPLE
    assert kornia_halfpatch.is_patched(T.imgwarp.F.grid_sample) and T.imgwarp.F is not F


# --------------------------------------------------------------------------------------------
# torch.compile (TorchScript: test_fix_grid_sample_cpu_subprocess.py, for its per-process cache)


def _padded_half_image(size=182, channels=1, dtype=torch.float16):
    buffer = torch.full((65536 + channels * size * size,), 1000.0, dtype=dtype)
    plane = channels * size * size
    image = torch.as_strided(buffer, (1, channels, size, size), (plane, size * size, size, 1), 65536)
    image.copy_(seeded(1, channels, size, size, seed=31).to(dtype))
    return image


def _rotation_grid(size: int, degrees: float, dtype: torch.dtype) -> torch.Tensor:
    # A rotation about the centre as a normalised sampling grid, built in float32 and narrowed:
    # remap samples it with no matrix product in half on the way.
    angle = torch.tensor(degrees).deg2rad()
    theta = torch.stack([torch.stack([angle.cos(), -angle.sin(), torch.tensor(0.0)]),
                         torch.stack([angle.sin(), angle.cos(), torch.tensor(0.0)])])[None]
    return F.affine_grid(theta, [1, 1, size, size], align_corners=False).to(dtype)


def _compiled_equals_eager(run, *args) -> torch.Tensor:
    eager = run(*args)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(run, fullgraph=True, backend="aot_eager")(*args)
    finally:
        torch._dynamo.reset()
    assert bitwise_equal(compiled, eager)
    return compiled


@pytest.mark.slow
@needs_old_kornia
@pytest.mark.parametrize("path", ["rotate", "remap"])
def test_torch_compile_fullgraph_runs_the_replacement(path):
    image = _padded_half_image(channels=3)
    if path == "rotate":
        if lacks_half_kernel("bmm", torch.float16):
            # rotate builds its matrix with float16 @ before it samples: without that kernel the
            # release raises there, and a TorchFunctionMode cannot widen it inside dynamo (2.1);
            # the remap case reaches the same sampling with a grid built in float32.
            pytest.skip(f"torch {torch.__version__} has no float16 CPU bmm: rotate raises before it samples")
        compiled = _compiled_equals_eager(
            lambda image, angle: T.rotate(image, angle, padding_mode="border"), image, torch.tensor([33.0], dtype=torch.float16))
    else:
        grid = _rotation_grid(image.shape[-1], 33.0, torch.float16)
        compiled = _compiled_equals_eager(
            lambda image, grid: T.remap(image, grid[..., 0], grid[..., 1], padding_mode="border",
                                        align_corners=False, normalized_coordinates=True), image, grid)
    assert float(compiled.max()) <= 1.0
