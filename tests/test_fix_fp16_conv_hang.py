"""fp16_conv_hang: float16 depthwise conv2d with a large kernel never returns on avx512_fp16 CPUs.

Anything that could run the hanging convolution runs in a subprocess with a timeout: a hang
fails the test (subprocess.TimeoutExpired) instead of hanging the run."""

import os
import subprocess

import pytest
import torch

from kornia_halfpatch.fixes import fp16_conv_hang
from kornia_halfpatch._model import Verdict
from support import UPSTREAM_FIXED, run_python

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize(
    "value, flag, verdict",
    [
        ("on", False, Verdict.APPLIED),
        ("off", True, Verdict.NOT_NEEDED),
        ("auto", True, Verdict.APPLIED),
        ("auto", False, Verdict.NOT_NEEDED),
        ("", False, Verdict.NOT_NEEDED),
        ("bogus", True, Verdict.APPLIED),  # an unknown value means auto, and the reason says so
    ],
)
def test_the_workaround_is_chosen_by_cpu_capability_or_forced(monkeypatch, value, flag, verdict):
    monkeypatch.setenv(fp16_conv_hang.ENV_FP16_CONV_HANG, value)
    monkeypatch.setattr(fp16_conv_hang, "cpu_has_avx512_fp16", lambda: flag)
    finding = fp16_conv_hang.probe([None])
    assert finding.verdict is verdict
    if value == "bogus":
        assert "bogus" in finding.reason


def test_capability_is_read_from_torch_and_missing_means_no_flag(monkeypatch):
    expected = bool(getattr(torch.cpu, "get_capabilities", lambda: {})().get("avx512_fp16", False))
    assert fp16_conv_hang.cpu_has_avx512_fp16() is expected
    monkeypatch.delattr(torch.cpu, "get_capabilities", raising=False)
    assert fp16_conv_hang.cpu_has_avx512_fp16() is False


def test_guard_covers_every_measured_hanging_kernel_and_not_small_ones():
    hanging = [(1, 15), (1, 31), (3, 15), (15, 15), (31, 31)]  # measured on a 41x61 input, 3 channels
    for h, w in hanging:
        assert fp16_conv_hang.large_kernel(torch.zeros(1, h, w))
    assert not fp16_conv_hang.large_kernel(torch.zeros(1, 3, 3))
    assert not fp16_conv_hang.large_kernel(torch.zeros(1, 1, 14))


BLUR = """
import torch, kornia, kornia_halfpatch
report = kornia_halfpatch.apply(only=["fp16_conv_hang"])
assert report.fixes["fp16_conv_hang"].applied, report
x = torch.rand(1, 3, 41, 61, generator=torch.Generator().manual_seed(0)).half()
got = kornia.filters.gaussian_blur2d(x, (15, 15), (2.0, 2.0))
with kornia_halfpatch.unpatched():
    expected = kornia.filters.gaussian_blur2d(x.float(), (15, 15), (2.0, 2.0)).half()
# gaussian_blur2d builds its kernel in float16 and filters twice (1x15, then 15x1), each
# filter2d call narrowed once: a few float16 roundings from the float32 blur, no more.
assert got.dtype == torch.float16
torch.testing.assert_close(got.float(), expected.float(), atol=4e-3, rtol=4e-3)
pyramid, _, _ = kornia.geometry.ScalePyramid()(torch.rand(1, 1, 41, 61).half())  # the upstream test that hung
assert pyramid[0].dtype == torch.float16 and bool(torch.isfinite(pyramid[0]).all())
pyramid3, _, _ = kornia.geometry.ScalePyramid()(torch.rand(1, 3, 41, 61).half())  # 0.8.3: its own depthwise convs
assert pyramid3[0].dtype == torch.float16 and bool(torch.isfinite(pyramid3[0]).all())
print("returned")
"""


def test_forced_workaround_returns_with_the_float32_result_narrowed():
    # The call that hangs unpatched on avx512_fp16 CPUs: gaussian_blur2d, kernel 15, 41x61.
    try:
        result = run_python(BLUR, env={**ENV, fp16_conv_hang.ENV_FP16_CONV_HANG: "on"}, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("float16 gaussian_blur2d did not return within 240 s with the workaround on")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "returned" in result.stdout


def test_turned_off_leaves_filter2d_alone():
    code = """
import kornia, kornia_halfpatch
report = kornia_halfpatch.apply()
print(report.fixes["fp16_conv_hang"].verdict.name)
print(kornia_halfpatch.is_patched(kornia.filters.filter.filter2d))
"""
    result = run_python(code, env={**ENV, fp16_conv_hang.ENV_FP16_CONV_HANG: "off"}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["NOT_NEEDED", "False"]
