"""create_meshgrid / create_meshgrid3d against kornia 0.9.0 and the installed release."""

import contextlib
from pathlib import Path

import gen_utils_grids as golden_inputs
import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import testing
from support import (
    FULL_DTYPES,
    HALF_DTYPES,
    TORCH,
    bitwise_equal,
    expect_missing_kernel_error,
    grid_module,
    inductor_compile,
    needs_old_kornia,
    widening_half_products,
)

# Recorded once, not computed live: grids are elementwise IEEE arithmetic on exact integer ramps,
# the same bits on every CPU (gen_utils_grids.py says why), unlike convolution outputs (oracle.py).
GOLDEN = torch.load(Path(__file__).parent / "golden" / "utils_grids.pt")
CPU = torch.device("cpu")


@pytest.fixture
def grids():
    """(create_meshgrid, create_meshgrid3d) as kornia's own modules see them, with exactly this fix
    on (warp_geometry's HomographyWarper computes the direct path's grid in float32, so with it
    the direct path is more accurate than a grid precomputed, as 0.9.0 does, in half)."""
    with kornia_halfpatch.testing.isolated(only=["utils_grids"]):
        module = grid_module()
        yield module.create_meshgrid, module.create_meshgrid3d


def originals():
    module = grid_module()
    return kornia_halfpatch.get_original(module.create_meshgrid), kornia_halfpatch.get_original(module.create_meshgrid3d)


@pytest.mark.parametrize("dtype", HALF_DTYPES + FULL_DTYPES, ids=str)
@pytest.mark.parametrize("normalized", [True, False])
def test_2d_grids_equal_kornia_090_bitwise(grids, dtype, normalized):
    create_meshgrid, _ = grids
    for h, w in golden_inputs.SIZES_2D:
        xs, ys = GOLDEN[golden_inputs.key((h, w), normalized, dtype)]
        got = create_meshgrid(h, w, normalized, CPU, dtype)
        assert bitwise_equal(got, golden_inputs.rebuild_2d(xs, ys)), (h, w)


@pytest.mark.parametrize("dtype", HALF_DTYPES + FULL_DTYPES, ids=str)
@pytest.mark.parametrize("normalized", [True, False])
def test_3d_grids_equal_kornia_090_bitwise(grids, dtype, normalized):
    _, create_meshgrid3d = grids
    for d, h, w in golden_inputs.SIZES_3D:
        xs, ys, zs = GOLDEN[golden_inputs.key((d, h, w), normalized, dtype)]
        got = create_meshgrid3d(d, h, w, normalized, CPU, dtype)
        assert bitwise_equal(got, golden_inputs.rebuild_3d(xs, ys, zs)), (d, h, w)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_half_grid_is_installed_float32_grid_narrowed_once(grids, dtype):
    create_meshgrid, create_meshgrid3d = grids
    original_2d, original_3d = originals()
    for h, w in [(5, 300), (4097, 2), (3, 2050)]:
        expected = original_2d(h, w, True, CPU, torch.float32).to(dtype)
        assert bitwise_equal(create_meshgrid(h, w, True, CPU, dtype), expected)
    expected = original_3d(3, 4, 300, True, CPU, torch.float32).to(dtype)
    assert bitwise_equal(create_meshgrid3d(3, 4, 300, True, CPU, dtype), expected)


@needs_old_kornia
def test_the_float32_ramp_of_half_grids_is_the_releases_bit_for_bit():
    # Half normalized grids narrow a float32 ramp whose quotient is taken in float64 (so that
    # inductor's reciprocal multiplication cannot change it): it must be the release's ramp.
    from kornia_halfpatch.fixes import utils_grids

    original_2d, original_3d = originals()
    for size in list(range(1, 2100)) + [4097, 6000, 65535, 100003]:
        ramp = original_2d(1, size, True, CPU, torch.float32)[0, 0, :, 0]
        assert bitwise_equal(utils_grids._normalized_ramp(size, CPU), ramp), size
    for size in (1, 3, 300, 6000):
        assert bitwise_equal(utils_grids._normalized_ramp(size, CPU), original_3d(size, 1, 1, True, CPU, torch.float32)[0, :, 0, 0, 0])


@needs_old_kornia
@pytest.mark.parametrize("dtype,width", [(torch.bfloat16, 300), (torch.float16, 6000)], ids=str)
def test_unpatched_half_grid_has_the_bug(dtype, width):
    original_2d, _ = originals()
    assert not torch.equal(original_2d(2, width, True, CPU, dtype), original_2d(2, width, True, CPU, torch.float32).to(dtype))


@pytest.mark.parametrize("dtype", FULL_DTYPES + [torch.int32, torch.int64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("normalized", [True, False])
def test_full_precision_integer_and_pixel_grids_bitwise_unchanged(grids, dtype, normalized):
    if dtype in HALF_DTYPES and normalized:
        pytest.skip("half normalized grids are what the fix changes")
    if not dtype.is_floating_point and normalized:
        pytest.skip("integer normalized grids are not meaningful (both raise or truncate alike)")
    create_meshgrid, create_meshgrid3d = grids
    original_2d, original_3d = originals()
    # Half pixel ramps change only past the exactly representable range (kornia 0.9.0's arange,
    # checked against the golden grids above); below it they must be untouched.
    sizes = [(1, 1), (2, 3), (7, 200)] if dtype in HALF_DTYPES else [(1, 1), (2, 3), (7, 258), (2050, 3)]
    for h, w in sizes:
        assert bitwise_equal(create_meshgrid(h, w, normalized, CPU, dtype), original_2d(h, w, normalized, CPU, dtype))
    assert bitwise_equal(create_meshgrid3d(2, 3, 4, normalized, CPU, dtype), original_3d(2, 3, 4, normalized, CPU, dtype))


def test_default_dtype_follows_torch_default_like_the_release(grids):
    create_meshgrid, _ = grids
    original_2d, _ = originals()
    previous = torch.get_default_dtype()
    try:
        for default in (torch.float64, torch.float32):
            torch.set_default_dtype(default)
            assert bitwise_equal(create_meshgrid(3, 5), original_2d(3, 5))
            assert bitwise_equal(create_meshgrid(3, 5, False), original_2d(3, 5, False))
    finally:
        torch.set_default_dtype(previous)


def test_every_kornia_binding_runs_the_fix(grids):
    create_meshgrid, _ = grids
    expected = originals()[0](2, 300, True, CPU, torch.float32).to(torch.bfloat16)
    import kornia.utils  # lazily imported on 0.8.3

    callers = [kornia.utils.create_meshgrid]
    if hasattr(kornia, "create_meshgrid"):
        callers.append(kornia.create_meshgrid)  # 0.8.3: a deprecation wrapper over a captured alias
    import kornia.geometry.transform.homography_warper as homography_warper

    callers.append(homography_warper.create_meshgrid)
    for caller in callers:
        with _quiet():
            assert bitwise_equal(caller(2, 300, True, CPU, torch.bfloat16), expected), caller


class _quiet:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_eager_traced_scripted_grids_identical(grids, dtype):
    create_meshgrid, create_meshgrid3d = grids

    def grid_of(image: torch.Tensor) -> torch.Tensor:
        return create_meshgrid(image.shape[-2], image.shape[-1], True, image.device, image.dtype)

    image = torch.zeros(1, 1, 3, 2050, dtype=dtype)
    eager = grid_of(image)
    traced = torch.jit.trace(grid_of, (image,), check_trace=False)(image)
    scripted = torch.jit.script(create_meshgrid)(3, 2050, True, CPU, dtype)
    for other in (traced, scripted):
        assert bitwise_equal(other, eager)
    scripted3d = torch.jit.script(create_meshgrid3d)(2, 3, 300, True, CPU, dtype)
    assert bitwise_equal(scripted3d, create_meshgrid3d(2, 3, 300, True, CPU, dtype))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_eager_and_compiled_grids_identical(grids, dtype):
    create_meshgrid, _ = grids

    def grid_of(image: torch.Tensor) -> torch.Tensor:
        return create_meshgrid(image.shape[-2], image.shape[-1], True, image.device, image.dtype)

    image = torch.zeros(1, 1, 3, 2050, dtype=dtype)
    torch._dynamo.reset()
    compiled = inductor_compile(grid_of, fullgraph=True)(image)
    torch._dynamo.reset()
    assert bitwise_equal(compiled, grid_of(image))


@pytest.mark.slow
@needs_old_kornia
def test_unpatched_compile_drift_is_real_and_patched_has_none():
    """The bug the fix exists for, measured both ways in one run."""

    def gap(dtype: torch.dtype, width: int) -> float:
        module = grid_module()

        def grid() -> torch.Tensor:
            return module.create_meshgrid(2, width, True, CPU, dtype)

        torch._dynamo.reset()
        compiled = inductor_compile(grid, fullgraph=True)()
        torch._dynamo.reset()
        return (compiled.float() - grid().float()).abs().max().item()

    with kornia_halfpatch.unpatched(["utils_grids"]):
        before = gap(torch.bfloat16, 300)
    with kornia_halfpatch.patched(only=["utils_grids"]):
        after = gap(torch.bfloat16, 300)
        # Inductor before torch 2.9 divides by a constant as a multiplication by its reciprocal
        # (1 ulp off in float32, 2 float16 roundings flipped at width 6000): none left here.
        after_float16 = gap(torch.float16, 6000)
    assert before > 0.005  # about one bfloat16 ulp on [-1, 1]
    assert after == 0.0 and after_float16 == 0.0


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_homography_warper_precomputed_and_direct_paths_agree(grids, dtype):
    torch.manual_seed(0)
    height, width = 128, 64
    image = torch.rand(2, 1, height, width, dtype=dtype)
    homography = (torch.eye(3) + torch.rand(3, 3) * 0.3).to(dtype)[None].repeat(2, 1, 1)
    warper = kornia.geometry.transform.HomographyWarper(height, width, align_corners=True)
    # torch 2.1: warp_grid's float16 bmm has no kernel; widened alike on both paths
    with half_grid_sample_on_old_torch(), widening_half_products(dtype):
        direct = warper(image, homography)
        warper.precompute_warp_grid(homography)
        precomputed = warper(image)
    assert bitwise_equal(precomputed, direct)


def half_grid_sample_on_old_torch():
    """torch < 2.6 has no half CPU grid_sample: there the warp samples through warp_sampling's
    float32 call, which leaves both paths' grids as they are (they are what is compared)."""
    if TORCH >= (2, 6):
        return contextlib.nullcontext()
    return kornia_halfpatch.patched(only=["warp_sampling"])


@needs_old_kornia
def test_homography_warper_paths_disagree_without_the_fix():
    # No fix at all: warp_geometry (float32 grids for HomographyWarper) makes the two paths agree
    # as well, so the release's disagreement shows only with every fix off.
    with testing.isolated(only=()):
        torch.manual_seed(0)
        image = torch.rand(2, 1, 128, 64, dtype=torch.bfloat16)
        homography = (torch.eye(3) + torch.rand(3, 3) * 0.3).to(torch.bfloat16)[None].repeat(2, 1, 1)
        warper = kornia.geometry.transform.HomographyWarper(128, 64, align_corners=True)
        if TORCH < (2, 6):  # no half CPU grid_sample: the release cannot warp a half image at all
            with expect_missing_kernel_error(match="grid_sampler_2d"):
                warper(image, homography)
            return
        direct = warper(image, homography)
        warper.precompute_warp_grid(homography)
        assert not torch.equal(warper(image), direct)
