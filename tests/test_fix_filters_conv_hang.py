"""filters_conv_hang: float16 depthwise conv2d with a large kernel never returns on avx512_fp16 CPUs.

Anything that could run the hanging convolution runs in a subprocess with a timeout: a hang
fails the test (subprocess.TimeoutExpired) instead of hanging the run."""

import os
import subprocess

import pytest
import torch

from kornia_halfpatch import _options
from kornia_halfpatch.fixes import filters_conv_hang
from kornia_halfpatch._model import Verdict
from support import UPSTREAM_FIXED, cpu_reports, cpuinfo_reports, lacks_half_kernel, run_python

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
# torch 2.1 has no float16 CPU conv2d kernel at all: there the fix is needed without a hang too
# (its conv2d target widens kornia's float16 convolutions), and the hang only decides its rows.
NO_FLOAT16_CONV2D = lacks_half_kernel("conv2d", torch.float16)


def without_hang(verdict, needed=Verdict.NEEDED):
    """The fix's verdict where the hang workaround is off: ``needed`` (the probe's NEEDED, a
    report's APPLIED) on every CPU, since its conv2d target also takes kornia's depthwise
    convolutions at scale (``depthwise_at_scale``); ``verdict``, what the hang alone decides, is
    the hang gate's (the filter2d and pyramid rows)."""
    return needed


@pytest.mark.parametrize(
    "value, flag, verdict",
    [
        ("on", False, Verdict.NEEDED),
        ("off", True, Verdict.NOT_NEEDED),
        ("auto", True, Verdict.NEEDED),
        ("auto", False, Verdict.NOT_NEEDED),
        ("", False, Verdict.NOT_NEEDED),
        ("bogus", True, Verdict.NEEDED),  # an unknown value means auto, and the reason says so
    ],
)
def test_the_workaround_is_chosen_by_cpu_capability_or_forced(monkeypatch, value, flag, verdict):
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, value)
    monkeypatch.setattr(filters_conv_hang, "cpu_has_avx512_fp16", lambda: flag)
    finding = filters_conv_hang.probe([None])
    assert finding.verdict is without_hang(verdict)
    assert filters_conv_hang.hang_gate().verdict is verdict
    if value == "bogus":
        assert "bogus" in finding.reason


def test_the_verdict_follows_the_variable_set_at_run_time_on_a_cpu_without_avx512_fp16(monkeypatch):
    # An earlier apply() in this process (the plugin's, or this test's first step) must not decide
    # for a later one: the probe reads the variable, so its cached finding depends on it.
    from kornia_halfpatch import testing

    monkeypatch.setenv(_options.CPU_AVX512_FP16.variable, "0")
    monkeypatch.delenv(_options.FILTERS_CONV_HANG.variable, raising=False)
    with testing.isolated(only=["filters_conv_hang"]) as report:
        status = report.fixes["filters_conv_hang"]
        assert status.verdict is without_hang(Verdict.NOT_NEEDED, Verdict.APPLIED), status
        # applied (no float16 conv2d kernel), the status says "bug present"; the probe says why
        reason = filters_conv_hang.probe([None]).reason
        assert "does not report avx512_fp16" in reason, reason
        assert filters_conv_hang.hang_gate().verdict is Verdict.NOT_NEEDED
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "on")
    with testing.isolated(only=["filters_conv_hang"]) as report:
        assert report.fixes["filters_conv_hang"].applied, report.fixes["filters_conv_hang"]
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "off")
    with testing.isolated(only=["filters_conv_hang"]) as report:
        assert report.fixes["filters_conv_hang"].verdict is without_hang(Verdict.NOT_NEEDED, Verdict.APPLIED)


@pytest.mark.parametrize("value, reported", [("1", True), ("on", True), ("0", False), ("no", False)])
def test_the_cpu_capability_override_replaces_what_the_cpu_reports(monkeypatch, value, reported):
    monkeypatch.setenv(_options.CPU_AVX512_FP16.variable, value)
    assert filters_conv_hang.cpu_has_avx512_fp16() is reported


def test_capability_is_read_from_torch_else_from_the_kernel(monkeypatch):
    monkeypatch.delenv(_options.CPU_AVX512_FP16.variable, raising=False)
    # torch 2.4 and 2.6 have no torch.cpu.get_capabilities and hang all the same on avx512_fp16:
    # a missing API must not read as a missing flag.
    assert filters_conv_hang.cpu_has_avx512_fp16() is cpu_reports("avx512_fp16")
    monkeypatch.delattr(torch.cpu, "get_capabilities", raising=False)
    assert filters_conv_hang.cpu_has_avx512_fp16() is cpuinfo_reports("avx512_fp16")


def test_guard_covers_every_measured_hanging_kernel_and_not_small_ones():
    hanging = [(1, 15), (1, 31), (3, 15), (15, 15), (31, 31)]  # measured on a 41x61 input, 3 channels
    for h, w in hanging:
        assert filters_conv_hang.large_kernel(torch.zeros(1, h, w))
    assert not filters_conv_hang.large_kernel(torch.zeros(1, 3, 3))
    assert not filters_conv_hang.large_kernel(torch.zeros(1, 1, 14))


BLUR = """
import torch, kornia, kornia_halfpatch
report = kornia_halfpatch.apply(only=["filters_conv_hang"])
assert report.fixes["filters_conv_hang"].applied, report
x = torch.rand(1, 3, 41, 61, generator=torch.Generator().manual_seed(0)).half()
got = kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))
with kornia_halfpatch.unpatched():
    expected = kornia.filters.gaussian_blur2d(x.float(), (15, 15), (2.0, 2.0)).half()
# gaussian_blur2d builds its kernel in float16 and filters twice (1x15, then 15x1), each
# filter2d call narrowed once: a few float16 roundings from the float32 blur, no more.
assert got.dtype == torch.float16
torch.testing.assert_close(got.float(), expected.float(), atol=4e-3, rtol=4e-3)
# The pyramid's reflect padding has no half CPU kernel in older torch (2.4): there it runs in
# float32, narrowed (a copy); a no-op where torch has the kernel. The hang is in the convolution.
from kornia_halfpatch._kernels import widening_missing_kernels
with widening_missing_kernels():
    pyramid, _, _ = kornia.geometry.ScalePyramid()(torch.rand(1, 1, 41, 61).half())  # the upstream test that hung
    pyramid3, _, _ = kornia.geometry.ScalePyramid()(torch.rand(1, 3, 41, 61).half())  # 0.8.3: its own depthwise convs
assert pyramid[0].dtype == torch.float16 and bool(torch.isfinite(pyramid[0]).all())
assert pyramid3[0].dtype == torch.float16 and bool(torch.isfinite(pyramid3[0]).all())
print("returned")
"""


@pytest.mark.slow
def test_forced_workaround_returns_with_the_float32_result_narrowed():
    # The call that hangs unpatched on avx512_fp16 CPUs: gaussian_blur2d, kernel 15, 41x61.
    try:
        result = run_python(BLUR, env={**ENV, _options.FILTERS_CONV_HANG.variable: "on"}, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("float16 gaussian_blur2d did not return within 240 s with the workaround on")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "returned" in result.stdout


@pytest.mark.slow
def test_turned_off_leaves_filter2d_alone():
    code = """
import kornia, kornia_halfpatch
report = kornia_halfpatch.apply()
print(report.fixes["filters_conv_hang"].verdict.name)
print(kornia_halfpatch.is_patched(kornia.filters.filter.filter2d))
"""
    result = run_python(code, env={**ENV, _options.FILTERS_CONV_HANG.variable: "off"}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    # filter2d's row is the hang's alone: off, it stays the release's on every torch.
    assert result.stdout.split() == [without_hang(Verdict.NOT_NEEDED, Verdict.APPLIED).name, "False"]


# --------------------------------------------------------------------------------------------
# kornia's own F.conv2d calls (MS_SSIMLoss, blur_pool2d, ...): the kornia-scoped conv2d target

import sys  # noqa: E402

import torch.nn.functional as F  # noqa: E402

import kornia  # noqa: E402
import kornia_halfpatch  # noqa: E402
from kornia_halfpatch import testing  # noqa: E402
from support import HALF_DTYPES, bitwise_equal, expect_missing_kernel_error, lacks_half_kernel  # noqa: E402

REAL_CONV2D = F.conv2d


@pytest.fixture
def conv_replacement(monkeypatch):
    """The installed kornia-scoped conv2d replacement (workaround forced on)."""
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "on")
    with testing.isolated(only=["filters_conv_hang"]) as report:
        assert report.fixes["filters_conv_hang"].applied, report
        found = [r for name, target, o, r in testing.installed_targets() if target is filters_conv_hang.CONV2D_TARGET]
        assert found, "the conv2d target is not installed"
        yield found[0]


def conv_case(dtype, channels, kh, kw, groups, out=None):
    g = torch.Generator().manual_seed(7)
    x = torch.rand(1, channels, 24, 28, generator=g).to(dtype)
    w = torch.rand(out or channels, channels // groups, kh, kw, generator=g).to(dtype)
    return x, w


def test_conv2d_target_keeps_torch_for_everything_but_hang_prone_float16(conv_replacement):
    assert F.conv2d is REAL_CONV2D  # torch's module keeps its own
    # float32/float64, bfloat16, small float16 kernels, one-output-channel kernels: torch's own call
    for dtype, channels, kh, kw, groups, out in [
        (torch.float32, 3, 15, 15, 3, None), (torch.float64, 3, 1, 17, 3, None), (torch.bfloat16, 3, 15, 15, 3, None),
        (torch.float16, 3, 3, 3, 3, None), (torch.float16, 3, 1, 14, 3, None), (torch.float16, 1, 1, 21, 1, None),
    ]:
        x, w = conv_case(dtype, channels, kh, kw, groups, out)
        got = conv_replacement(x, w, None, 1, (kh // 2, kw // 2), 1, groups)
        if dtype in HALF_DTYPES and lacks_half_kernel("conv2d", dtype):
            # torch 2.1 has no float16 CPU convolution: torch's call raises; the replacement
            # convolves the widened inputs in float32, narrowed once.
            with expect_missing_kernel_error():
                REAL_CONV2D(x, w, None, 1, (kh // 2, kw // 2), 1, groups)
            expected = REAL_CONV2D(x.float(), w.float(), None, 1, (kh // 2, kw // 2), 1, groups).to(dtype)
        else:
            expected = REAL_CONV2D(x, w, None, 1, (kh // 2, kw // 2), 1, groups)
        assert bitwise_equal(got, expected), (dtype, kh, kw)
    # hang-prone: float32 convolution of the widened inputs, narrowed once (torch's float16 call
    # would not return, so the oracle is the float32 one)
    for channels, kh, kw in [(3, 15, 15), (2, 1, 23), (3, 33, 33), (3, 15, 1)]:
        x, w = conv_case(torch.float16, channels, kh, kw, channels)
        bias = torch.rand(channels).half()
        got = conv_replacement(x, w, bias, 1, (kh // 2, kw // 2), 1, channels)
        expected = REAL_CONV2D(x.float(), w.float(), bias.float(), 1, (kh // 2, kw // 2), 1, channels).half()
        assert got.dtype == torch.float16 and bitwise_equal(got, expected), (channels, kh, kw)


@pytest.mark.slow
def test_conv2d_target_scripts_and_compiles_fullgraph(conv_replacement):
    x, w = conv_case(torch.float16, 3, 15, 15, 3)
    eager = conv_replacement(x, w, None, 1, 7, 1, 3)
    scripted = torch.jit.script(conv_replacement)
    assert bitwise_equal(scripted(x, w, None, 1, 7, 1, 3), eager)
    assert bitwise_equal(scripted(x.float(), w.float(), None, 1, 7, 1, 3), REAL_CONV2D(x.float(), w.float(), None, 1, 7, 1, 3))

    def caller(x, w):
        return conv_replacement(x, w, padding=7, groups=3)

    compiled = torch.compile(caller, backend="eager", fullgraph=True)  # dynamo traces it without a break
    assert bitwise_equal(compiled(x, w), eager)


def conv2d_call_sites():
    """(module, line, chain) of every kornia call whose callee resolves to torch's conv2d through
    the module's globals (F.conv2d, torch.nn.functional.conv2d, torch.conv2d, a bound name)."""
    from kornia_call_sites import calls_of

    return [(sys.modules[site.module], site.line, site.callee.split(".")) for site in calls_of(REAL_CONV2D)]


def _live(namespace, chain):
    value = namespace.get(chain[0])
    for name in chain[1:]:
        value = getattr(value, name, None)
    return value


def test_every_kornia_conv2d_call_site_reaches_the_replacement_and_revert_restores_it(monkeypatch):
    sites = conv2d_call_sites()
    found = {module.__name__ for module, _, _ in sites}
    assert {"kornia.filters.filter", "kornia.filters.blur_pool", "kornia.losses.ms_ssim"} <= found, sorted(found)
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "on")
    with testing.isolated(only=["warp_sampling", "filters_conv_hang"]) as report:
        assert report.fixes["filters_conv_hang"].applied
        replacement = [r for _, target, _, r in testing.installed_targets() if target is filters_conv_hang.CONV2D_TARGET][0]
        missed = [f"{m.__name__}:{line} {'.'.join(chain)}" for m, line, chain in sites
                  if _live(vars(m), chain) is not replacement]
        assert missed == [], missed
        # The other fix's kornia-scoped grid_sample stays where it was, in the same views.
        imgwarp = kornia.geometry.transform.imgwarp
        assert imgwarp.F.grid_sample is not F.grid_sample
        kornia_halfpatch.revert(["filters_conv_hang"])
        assert all(_live(vars(m), chain) is REAL_CONV2D for m, _, chain in sites)
        assert imgwarp.F.grid_sample is not F.grid_sample and kornia.losses.ms_ssim.F is F


MS_SSIM_AND_BLUR_POOL = """
import torch, kornia, kornia_halfpatch
from torch.overrides import TorchFunctionMode
import torch.nn.functional as F
report = kornia_halfpatch.apply(only=["filters_conv_hang"])
assert report.fixes["filters_conv_hang"].applied, report
g = torch.Generator().manual_seed(0)
a, b = torch.rand(1, 3, 64, 64, generator=g).half(), torch.rand(1, 3, 64, 64, generator=g).half()
x = torch.rand(1, 3, 40, 48, generator=g).half()
# torch 2.1 has no half CPU kernel for the loss's cs.prod (nor max_pool2d, small convolutions):
# not what this fix is about, so both legs run past them widened (a no-op where torch has them).
from kornia_halfpatch._kernels import widening_missing_kernels
with widening_missing_kernels():
    got_loss = kornia.losses.MS_SSIMLoss().half()(a, b)          # 33x33 depthwise masks: hangs unpatched
    got_pool = kornia.filters.max_blur_pool2d(x, 15)              # 15x15 depthwise blur: hangs unpatched

class WidenDepthwise(TorchFunctionMode):
    # The oracle: unpatched kornia with each depthwise float16 conv2d computed by torch in float32
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.conv2d and args[0].dtype == torch.float16 and args[1].shape[1] == 1 and args[1].shape[0] > 1 \\
                and max(args[1].shape[-2:]) >= 15:
            wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
            wide_kwargs = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            return func(*wide, **wide_kwargs).half()
        return func(*args, **kwargs)

with kornia_halfpatch.unpatched(), widening_missing_kernels(), WidenDepthwise():
    want_loss = kornia.losses.MS_SSIMLoss().half()(a, b)
    want_pool = kornia.filters.max_blur_pool2d(x, 15)
assert got_loss.dtype == want_loss.dtype == torch.float16
assert torch.equal(got_loss, want_loss) or (got_loss.isnan() and want_loss.isnan()), (got_loss, want_loss)
assert torch.equal(torch.nan_to_num(got_pool), torch.nan_to_num(want_pool)) and got_pool.dtype == torch.float16
print("returned")
"""


@pytest.mark.slow
def test_ms_ssim_and_blur_pool_return_with_each_depthwise_conv_in_float32():
    try:
        result = run_python(MS_SSIM_AND_BLUR_POOL, env={**ENV, _options.FILTERS_CONV_HANG.variable: "on"}, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("float16 MS_SSIMLoss / max_blur_pool2d did not return within 240 s with the workaround on")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "returned" in result.stdout


def test_a_non_tensor_argument_gets_kornias_own_error(monkeypatch):
    """The generated wrapper reads .dtype only of a tensor: kornia's own check raises, as unpatched
    (kornia's TestFilter2D::test_exception in float32)."""
    monkeypatch.setenv(_options.FILTERS_CONV_HANG.variable, "on")
    kernel = torch.ones(1, 3, 3)
    with kornia_halfpatch.unpatched():
        with pytest.raises(Exception) as unpatched_error:
            kornia.filters.filter2d(1, kernel)
    with testing.isolated(only=["filters_conv_hang"]):
        assert kornia_halfpatch.is_patched(kornia.filters.filter.filter2d)
        with pytest.raises(Exception) as patched_error:
            kornia.filters.filter2d(1, kernel)
    assert type(patched_error.value) is type(unpatched_error.value)
    assert str(patched_error.value) == str(unpatched_error.value)
