"""LAF patch extraction : float32 sampling, folded and chunked, safe on non-finite LAFs.

Oracle: kornia 0.9.0 changed float32 patch values (pixel-centre grid, up to 0.37), so there are
no golden files; the oracle is the installed release's own unpatched computation, on inputs
widened to the sampling dtype for half images, plus invariants (finite, within the image range,
zero patch and zero gradient for non-finite LAFs). Tests that need the replacement skip on
kornia >= 0.9.0; tests of behaviour 0.9.0 also has run there against kornia itself.
"""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import kornia
import kornia.feature
import kornia.feature.laf
import kornia_halfpatch
from kornia_halfpatch.fixes import feature_patches
from support import FULL_DTYPES, HALF_DTYPES, TORCH, UPSTREAM_FIXED, bitwise_equal, needs_old_kornia, run_python

FUNCTIONS = ("extract_patches_simple", "extract_patches_from_pyramid")
ALL_DTYPES = HALF_DTYPES + FULL_DTYPES


@pytest.fixture(autouse=True)
def laf_fix():
    """The fix as the session has it (the pytest plugin applies every fix), else applied here.

    apply(only=[...]) would record every other fix that is not installed as "not selected",
    overwriting the status other tests read; so it is only called when really needed.
    """
    report = kornia_halfpatch.status()
    reason = report.fixes["feature_patches"].reason
    if "feature_patches" in report.applied or reason.startswith("already fixed upstream"):
        yield report
        return
    with kornia_halfpatch.patched(only=["feature_patches"]) as report:
        yield report


def extract(name):
    """The function as kornia's public namespace sees it now (patched unless inside unpatched())."""
    return getattr(kornia.feature, name)


def released(name, img, laf, PS, normalize=True):
    """The installed release's own function. (Called directly rather than under unpatched(),
    which re-applies every fix afterwards; the other fixes leave float32/float64 untouched.)"""
    return kornia_halfpatch.get_original(getattr(kornia.feature.laf, name))(img, laf, PS, normalize)


def widened_oracle(name, img, laf, PS, normalize=True):
    """The release run on inputs widened to the sampling dtype, narrowed once to the image dtype."""
    dtype = torch.promote_types(img.dtype, laf.dtype)
    dtype = torch.float32 if dtype in HALF_DTYPES else dtype
    return released(name, img.to(dtype), laf.to(dtype), PS, normalize).to(img.dtype)


def rotated_lafs(B, N, H, W, dtype=torch.float64, seed=0, scales=(2.0, 40.0)):
    """Rotated LAFs, the first two of every image centred on a border (patches cross it)."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.rand(B, N, 2, generator=g, dtype=torch.float64) * torch.tensor([W - 1, H - 1], dtype=torch.float64)
    centre[:, 0] = torch.tensor([0.0, (H - 1) / 2])
    if N > 1:
        centre[:, 1] = torch.tensor([W - 1.0, H - 1.5])
    low, high = scales
    scale = low * (high / low) ** torch.rand(B, N, 1, 1, generator=g, dtype=torch.float64)
    angle = torch.rand(B, N, generator=g, dtype=torch.float64) * 2 * math.pi
    cos, sin = angle.cos(), angle.sin()
    linear = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2) * scale
    return torch.cat([linear, centre.unsqueeze(-1)], dim=-1).to(dtype)


def image(B, CH, H, W, dtype=torch.float64, seed=1):
    return torch.rand(B, CH, H, W, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


# --------------------------------------------------------------------------------------------
# Installation


@needs_old_kornia
def test_applied_and_every_kornia_binding_replaced(laf_fix):
    assert "feature_patches" in laf_fix.applied, laf_fix.fixes["feature_patches"].reason
    import kornia.feature.affine_shape
    import kornia.feature.integrated
    import kornia.feature.laf
    import kornia.feature.orientation

    holders = [
        kornia.feature,
        kornia.feature.laf,
        kornia.feature.integrated,
        kornia.feature.orientation,
        kornia.feature.affine_shape,
    ]
    for name in FUNCTIONS:
        replacement = getattr(kornia.feature.laf, name)
        assert kornia_halfpatch.is_patched(replacement)
        for module in holders:
            if name in vars(module):
                assert vars(module)[name] is replacement, (module.__name__, name)


@pytest.mark.skipif(not UPSTREAM_FIXED, reason="only kornia >= 0.9.0 is left alone")
def test_nothing_patched_on_fixed_kornia(laf_fix):
    assert "feature_patches" not in laf_fix.applied
    assert not kornia_halfpatch.is_patched(kornia.feature.extract_patches_simple)


@needs_old_kornia
def test_pyramid_level_rule_probe_matches_release():
    original = kornia_halfpatch.get_original(kornia.feature.laf.extract_patches_from_pyramid)
    if kornia.__version__ == "0.8.3":
        expected = feature_patches.LEVEL_WHILE_CURRENT_FITS
    else:
        expected = feature_patches.LEVEL_WHILE_PREVIOUS_FITS
    assert feature_patches._pyramid_level_rule(original) == expected


# --------------------------------------------------------------------------------------------
# Semantics: full precision bitwise unchanged, half = release on widened inputs


FULL_CASES = [
    # (B, CH, H, W, N, PS, normalize, channels_last)
    (1, 1, 48, 40, 7, 16, True, False),
    (3, 3, 37, 52, 5, 32, True, False),
    (2, 3, 64, 64, 6, 16, True, True),
    (2, 1, 100, 100, 9, 16, True, False),  # pyramid down to levels a release may not build
    (2, 2, 45, 45, 4, 5, False, False),
]


def _case_id(case):
    return "B{}CH{}_{}x{}_N{}_PS{}".format(*case[:6]) + ("_norm" if case[6] else "_px") + ("_cl" if case[7] else "")


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=str)
@pytest.mark.parametrize("case", FULL_CASES, ids=_case_id)
def test_full_precision_bitwise_unchanged(name, dtype, case):
    B, CH, H, W, N, PS, normalize, channels_last = case
    img = image(B, CH, H, W, dtype)
    if channels_last:
        img = img.contiguous(memory_format=torch.channels_last)
    laf = rotated_lafs(B, N, H, W, dtype, scales=(2.0, 90.0))
    if not normalize:
        laf = kornia.feature.normalize_laf(laf, img)
    expected = released(name, img, laf, PS, normalize)
    got = extract(name)(img, laf, PS, normalize)
    assert bitwise_equal(got, expected)
    assert got.is_contiguous()


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("PS", [16, 32])
@pytest.mark.parametrize(
    "img_dtype,laf_dtype",
    [
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),  # keeps the LAF's float32 precision
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.bfloat16),
        (torch.float32, torch.float16),  # autocast detector LAF, float32 image
        (torch.float16, torch.float64),
    ],
    ids=str,
)
def test_half_equals_release_on_widened_inputs(name, PS, img_dtype, laf_dtype):
    for B, CH, H, W, N in ((2, 1, 60, 70, 6), (2, 3, 190, 185, 5)):
        img = image(B, CH, H, W, img_dtype)
        laf = rotated_lafs(B, N, H, W, laf_dtype, scales=(2.0, 60.0))
        got = extract(name)(img, laf, PS)
        assert got.dtype == img.dtype and got.device == img.device
        assert bitwise_equal(got, widened_oracle(name, img, laf, PS)), (B, CH, H, W)


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_image_with_float64_laf_is_sampled_in_float64(name):
    # The release raises "expected scalar type Float but found Double"; the grid dtype is now
    # the promotion, and the patches come back in the image's dtype.
    img, laf = image(2, 1, 50, 50, torch.float32), rotated_lafs(2, 4, 50, 50, torch.float64)
    got = extract(name)(img, laf, 16)
    assert got.dtype == torch.float32
    assert bitwise_equal(got, released(name, img.double(), laf, 16).float())


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_border_patches_finite_and_within_image_range(name, dtype):
    # 190x190 > 181x181: torch's half CPU grid_sample reads out of bounds on this plane size.
    img = image(2, 3, 190, 190, dtype, seed=5)
    laf = rotated_lafs(2, 8, 190, 190, dtype, seed=6, scales=(3.0, 50.0))
    patches = extract(name)(img, laf, 32).float()
    assert patches.isfinite().all()
    assert patches.min() >= img.float().min() and patches.max() <= img.float().max()


# --------------------------------------------------------------------------------------------
# Folding and chunking


class CountingGridSample:
    def __init__(self, monkeypatch):
        self.calls = []
        original = F.grid_sample

        def counting(input, grid, *args, **kwargs):
            self.calls.append(tuple(grid.shape))
            return original(input, grid, *args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "grid_sample", counting)


@needs_old_kornia
def test_one_folded_grid_sample_per_chunk(monkeypatch):
    counter = CountingGridSample(monkeypatch)
    img = image(3, 1, 40, 40, torch.float32)
    extract("extract_patches_simple")(img, rotated_lafs(3, 10, 40, 40, torch.float32), 16)
    assert counter.calls == [(3, 10 * 16, 16, 2)]
    # CH=1 (budget 64 MiB, 8 KiB per LAF): 1000 LAFs in one call.
    counter.calls.clear()
    img = image(1, 1, 64, 64, torch.float32)
    extract("extract_patches_simple")(img, rotated_lafs(1, 1000, 64, 64, torch.float32), 32)
    assert counter.calls == [(1, 1000 * 32, 32, 2)]
    # CH=256 (1 MiB per LAF): chunks of 64.
    counter.calls.clear()
    img = image(1, 256, 20, 20, torch.float32)
    extract("extract_patches_simple")(img, rotated_lafs(1, 65, 20, 20, torch.float32), 32)
    assert counter.calls == [(1, 64 * 32, 32, 2), (1, 1 * 32, 32, 2)]


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_chunked_equals_single_call_bitwise(name, dtype, monkeypatch):
    img = image(2, 3, 80, 90, dtype)
    laf = rotated_lafs(2, 9, 80, 90, dtype, scales=(2.0, 70.0))
    single = extract(name)(img, laf, 16)
    monkeypatch.setattr(feature_patches, "_lafs_per_chunk", lambda *args, **kwargs: 1)
    counter = CountingGridSample(monkeypatch)
    chunked = extract(name)(img, laf, 16)
    assert len(counter.calls) >= 9 and all(shape[1] == 16 for shape in counter.calls)
    assert bitwise_equal(chunked, single)


# --------------------------------------------------------------------------------------------
# Compilation and scripting


def _graph_counter():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(sum(1 for node in gm.graph.nodes if "grid_sample" in str(node.target)))
        return gm.forward  # run the captured graph eagerly: results comparable bit for bit

    return graphs, backend


@pytest.mark.slow
def test_compile_batches_2_3_5_7_build_at_most_2_graphs_with_one_grid_sample():
    graphs, backend = _graph_counter()
    torch._dynamo.reset()
    try:
        simple = extract("extract_patches_simple")
        compiled = torch.compile(lambda img, laf: simple(img, laf, 8), backend=backend, fullgraph=True)
        for B in (2, 3, 5, 7):
            img, laf = image(B, 1, 30, 30, torch.float32), rotated_lafs(B, 4, 30, 30, torch.float32)
            laf[0, 1, 1, 2] = float("nan")  # masked without a data-dependent branch
            assert bitwise_equal(compiled(img, laf), simple(img, laf, 8))
    finally:
        torch._dynamo.reset()
    assert 1 <= len(graphs) <= 2
    assert graphs == [1] * len(graphs)


@pytest.mark.slow
@needs_old_kornia
def test_pyramid_compiles_fullgraph_one_grid_sample_per_level():
    graphs, backend = _graph_counter()
    torch._dynamo.reset()
    try:
        pyramid = extract("extract_patches_from_pyramid")
        compiled = torch.compile(lambda img, laf: pyramid(img, laf, 8), backend=backend, fullgraph=True)
        img, laf = image(2, 1, 40, 40, torch.float32), rotated_lafs(2, 6, 40, 40, torch.float32, scales=(2.0, 40.0))
        laf[1, 2, 0, 0] = float("inf")
        assert bitwise_equal(compiled(img, laf), pyramid(img, laf, 8))
    finally:
        torch._dynamo.reset()
    # 40x40, PS=8: levels 40, 20, 10, 5. Up to 0.8.2 level 3 (5 px) is sampled because level 2
    # (10 px) is at least PS; 0.8.3 stops before a level smaller than PS.
    assert graphs == ([3] if kornia.__version__ == "0.8.3" else [4])


@needs_old_kornia
def test_torchscript_and_trace_match_eager():
    simple = extract("extract_patches_simple")
    scripted = torch.jit.script(simple)
    for img_dtype, laf_dtype in ((torch.float32, torch.float32), (torch.float16, torch.float32)):
        img, laf = image(2, 1, 30, 30, img_dtype), rotated_lafs(2, 3, 30, 30, laf_dtype)
        assert bitwise_equal(scripted(img, laf, 8, True), simple(img, laf, 8))
    img, laf = image(2, 1, 40, 40, torch.float32), rotated_lafs(2, 5, 40, 40, torch.float32)
    for name in FUNCTIONS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about Python ints from shapes
            traced = torch.jit.trace(lambda i, l, f=extract(name): f(i, l, 8), (img, laf))
        assert bitwise_equal(traced(img, laf), extract(name)(img, laf, 8))


# --------------------------------------------------------------------------------------------
# Non-finite LAFs: forward and backward in subprocesses (a crash must fail, not kill, the run)

_NON_FINITE_SCRIPT = r"""
import sys, torch, kornia, kornia.feature, kornia_halfpatch
kornia_halfpatch.apply(only=["feature_patches"])
names = ("extract_patches_simple", "extract_patches_from_pyramid")
dtypes = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
positions = [(r, c) for r in range(2) for c in range(3)] + ["all"]
g = torch.Generator().manual_seed(0)
base_img = torch.rand(2, 2, 40, 36, generator=g, dtype=torch.float64)
base_laf = torch.tensor([[[6.0, 1.0, 0.5], [-1.0, 5.0, 20.0]], [[12.0, 0.0, 30.0], [0.0, 12.0, 35.0]],
                         [[3.0, 0.0, 10.0], [0.0, 3.0, 10.0]]], dtype=torch.float64).expand(2, 3, 2, 3).clone()
failures = []
cleans = {}
keep = torch.ones(2, 3, dtype=torch.bool)
keep[1, 1] = False
def check(name, dtype, position, value, call):
    label = f"{name} {dtype} {position} {value} {'compiled' if call is not None else 'eager'}"
    print("start", label, flush=True)
    function = getattr(kornia.feature, name)
    img = base_img.to(dtype).clone().requires_grad_(True)
    laf = base_laf.to(dtype).clone()
    if position == "all":
        laf[1, 1] = value
    else:
        laf[1, 1][position] = value
    laf.requires_grad_(True)
    patches = call(img, laf) if call is not None else function(img, laf, 8)
    if (name, dtype) not in cleans:
        cleans[(name, dtype)] = function(base_img.to(dtype), base_laf.to(dtype), 8)
    clean = cleans[(name, dtype)]
    weights = torch.linspace(0.5, 1.5, patches.numel()).view(patches.shape)
    (patches.float() * weights).sum().backward()
    # Compiled graphs may decompose affine_grid differently: neighbours equal to rounding there.
    same = torch.equal if call is None else (lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-5))
    checks = {
        "zero patch": bool((patches[1, 1] == 0).all()),
        "neighbours untouched": bool(same(patches[keep], clean[keep])),
        "zero LAF grad": bool((laf.grad[1, 1] == 0).all()),
        "finite LAF grad": bool(laf.grad.isfinite().all()),
        "neighbour LAF grad": bool(laf.grad[keep].abs().sum() > 0),
        "finite image grad": bool(img.grad.isfinite().all()),
    }
    bad = [k for k, v in checks.items() if not v]
    if bad:
        failures.append(f"{label}: {bad}")
    print("done", label, not bad, flush=True)
for name in names:
    for dtype in dtypes:
        for position in positions:
            for value in (float("nan"), float("inf"), float("-inf")):
                check(name, dtype, position, value, None)
if "--compile" in sys.argv:
    # Forward and backward through a fullgraph-compiled graph (the pyramid's compiled forward
    # with a non-finite LAF is checked in-process).
    torch._dynamo.reset()
    f = kornia.feature.extract_patches_simple
    compiled = torch.compile(lambda i, l: f(i, l, 8), backend="aot_eager", fullgraph=True)
    for position in ((0, 2), "all"):
        check("extract_patches_simple", torch.float32, position, float("nan"), compiled)
print("FAILURES", failures, flush=True)
print("FINISHED", flush=True)
"""


def _last_started(stdout):
    started = [line for line in stdout.splitlines() if line.startswith("start ")]
    return started[-1][6:] if started else "before the first case"


@pytest.mark.slow
def test_non_finite_lafs_every_position_forward_backward_subprocess():
    compile_flag = "--compile" if not UPSTREAM_FIXED else ""
    run = run_python("import sys; sys.argv.append(%r)\n" % compile_flag + _NON_FINITE_SCRIPT, timeout=240)
    assert run.returncode == 0, (
        f"process died (returncode {run.returncode}) in case: {_last_started(run.stdout)}\n{run.stderr[-2000:]}"
    )
    assert "FINISHED" in run.stdout, run.stdout[-2000:]
    assert "FAILURES []" in run.stdout, [line for line in run.stdout.splitlines() if line.startswith("FAILURES")]


@pytest.mark.slow
@needs_old_kornia
def test_unpatched_release_crashes_on_nan_laf_backward_subprocess():
    # The control: the harness above must be able to see a crash. On every release up to
    # 0.8.3 float32 backward through a NaN LAF kills the process in grid_sampler_2d_backward.
    run = run_python(
        """
        import torch, kornia.feature
        laf = torch.tensor([[[[8.0, 0.0, 30.0], [0.0, 8.0, 30.0]]]]).repeat(1, 2, 1, 1)
        laf[0, 1, 0, 2] = float("nan")
        laf.requires_grad_(True)
        kornia.feature.extract_patches_simple(torch.rand(1, 1, 64, 64), laf, 16).sum().backward()
        print("survived", flush=True)
        """,
        timeout=120,
    )
    assert run.returncode < 0 and "survived" not in run.stdout, (run.returncode, run.stdout)


# --------------------------------------------------------------------------------------------
# MPS border emulation (no MPS here: the clamp maths on CPU)


@pytest.mark.parametrize("h,w", [(7, 5), (1, 9), (32, 17)])
def test_pixel_centre_clamp_with_zeros_padding_equals_border_padding(h, w):
    img = image(2, 3, h, w, torch.float64)
    grid = (torch.rand(2, 11, 13, 2, generator=torch.Generator().manual_seed(h * w), dtype=torch.float64) - 0.5) * 4.0
    grid[0, 0, :4] = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-3.0, 0.2], [0.3, 5.0]], dtype=torch.float64)
    border = F.grid_sample(img, grid, padding_mode="border", align_corners=False)
    clamped = feature_patches._clamp_to_pixel_centres(grid, h, w)
    emulated = F.grid_sample(img, clamped, padding_mode="zeros", align_corners=False)
    torch.testing.assert_close(emulated, border, rtol=0, atol=1e-12)
    # Clamping to +-1 (the outer pixel edge) is not border padding: it blends in half a pixel of zeros.
    edge = F.grid_sample(img, grid.clamp(-1, 1), padding_mode="zeros", align_corners=False)
    assert (edge - border).abs().max() > 0.1


# --------------------------------------------------------------------------------------------
# Bad input, empty input, integer images


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
def test_bad_input_raises_the_release_error(name):
    good_img, good_laf = image(2, 1, 40, 40, torch.float32), rotated_lafs(2, 3, 40, 40, torch.float32)
    cases = [
        ("laf shape", good_img, torch.rand(2, 3, 3, 3), 16),
        ("laf rank", good_img, torch.rand(3, 2, 3), 16),
        ("img rank", good_img[0], good_laf, 16),
        ("PS 0", good_img, good_laf, 0),
        ("PS -1", good_img, good_laf, -1),
        ("img batch < laf batch", good_img[:1], good_laf, 16),
        ("integer img", good_img.to(torch.uint8), good_laf, 16),
    ]
    for label, img, laf, PS in cases:
        with pytest.raises(Exception) as before:
            released(name, img, laf, PS)
        with pytest.raises(Exception) as after:
            extract(name)(img, laf, PS)
        assert type(after.value) is type(before.value), (label, before.value, after.value)


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
def test_larger_image_batch_keeps_release_semantics(name):
    # The release samples image i for LAF batch i and ignores extra images.
    img, laf = image(3, 1, 40, 40, torch.float32), rotated_lafs(2, 3, 40, 40, torch.float32)
    assert bitwise_equal(extract(name)(img, laf, 16), released(name, img, laf, 16))


@needs_old_kornia
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("B,N", [(0, 4), (2, 0), (0, 0)])
def test_empty_batches_behave_as_the_release_does(name, dtype, B, N):
    # Not the half bug: the release's own outcome on the widened inputs is the contract (simple
    # raises; the pyramid returns empty patches).
    img = image(B, 3, 40, 40, dtype)
    laf = rotated_lafs(max(B, 1), max(N, 1), 40, 40, dtype)[:B, :N]
    try:
        want = released(name, img.float(), laf.float(), 16)
    except Exception as failure:  # noqa: BLE001 - the release's exception type is the contract
        with pytest.raises(type(failure)):
            extract(name)(img, laf, 16)
        return
    got = extract(name)(img, laf, 16)
    assert got.shape == want.shape == (B, N, 3, 16, 16) and got.dtype == dtype


# --------------------------------------------------------------------------------------------
# Kornia modules that hold the functions by name


@needs_old_kornia
def test_laf_modules_accept_half_image_with_float32_laf():
    img = image(1, 1, 64, 64, torch.float16)
    laf = rotated_lafs(1, 3, 64, 64, torch.float32, scales=(4.0, 12.0))
    descriptor = kornia.feature.LAFDescriptor(kornia.feature.SIFTDescriptor(32), patch_size=32)
    orienter = kornia.feature.LAFOrienter(32)
    release_pyramid = kornia_halfpatch.get_original(kornia.feature.laf.extract_patches_from_pyramid)
    # torch < 2.6 refuses the half image before it compares the dtypes: it has no half CPU kernel
    refusal = "expected scalar type" if TORCH >= (2, 6) else "grid_sampler_2d_cpu not implemented for Half"
    with pytest.raises(RuntimeError, match=refusal):
        release_pyramid(img, laf, 32)  # what LAFOrienter/LAFDescriptor call, unpatched
    descriptor = descriptor.half()
    assert descriptor(img, laf).shape == (1, 3, 128)
    assert orienter(laf, img).shape == laf.shape


# --------------------------------------------------------------------------------------------
# Composition with the warp_sampling fix: one promotion, whichever workaround it selects


_COMPOSITION_SCRIPT = r"""
import json, torch, kornia, kornia.feature, kornia.feature.laf, kornia_halfpatch
g = torch.Generator().manual_seed(3)
img = torch.rand(2, 3, 190, 190, generator=g).half()
laf = torch.tensor([[[20.0, 5.0, 1.0], [-5.0, 20.0, 90.0]], [[9.0, 0.0, 188.0], [0.0, 9.0, 3.0]],
                    [[30.0, 0.0, 95.0], [0.0, 30.0, 95.0]]]).expand(2, 3, 2, 3).contiguous()
names = ("extract_patches_simple", "extract_patches_from_pyramid")
kernel = torch.grid_sampler  # what F.grid_sample finally calls, behind any wrapper
seen = []
def recording(input, grid, *args):
    seen.append((str(input.dtype), str(grid.dtype)))
    return kernel(input, grid, *args)
results = {}
for workaround in ("none", "overflow", "no-kernel"):
    for everywhere in (False, True):
        report = kornia_halfpatch.apply(grid_sample_workaround=workaround, grid_sample_everywhere=everywhere)
        applied = {"feature_patches", "warp_sampling"} <= set(report.applied)
        torch.grid_sampler = recording
        seen.clear()
        equal = []
        for name in names:
            release = kornia_halfpatch.get_original(getattr(kornia.feature.laf, name))
            expected = release(img.float(), laf, 16).half()  # widened once, float32 LAF kept
            torch.grid_sampler = recording
            got = getattr(kornia.feature, name)(img, laf, 16)
            torch.grid_sampler = kernel
            equal.append(bool(torch.equal(got, expected)))
        results[f"{workaround} everywhere={everywhere}"] = [applied, equal, sorted(set(map(tuple, seen)))]
print(json.dumps(results))
"""


@pytest.mark.slow
@needs_old_kornia
def test_composes_with_grid_sample_fix_whichever_workaround_subprocess():
    # In a fresh process: switching the grid_sample fix's options re-applies fixes, which would
    # rewrite the shared status other tests read. Half images reach torch's kernel only as
    # float32 (one promotion, in this fix), whatever that fix selects, and the patches equal
    # the release run on widened inputs.
    import json

    run = run_python(_COMPOSITION_SCRIPT, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == 6
    for label, (applied, equal, kernel_dtypes) in results.items():
        assert applied, label
        assert equal == [True, True], label
        assert kernel_dtypes == [["torch.float32", "torch.float32"]], (label, kernel_dtypes)
