"""cpu_half: float16 and bfloat16 kornia networks on CPU computed with float32 copies of their weights.

Oracle: the module's own float32 forward on the same (half-rounded) weights and input,
``copy.deepcopy(m).float()(x.float()).to(dtype)``, computed in the same run, and its float32
gradients narrowed once; unpatched runs for everything that must not change. Nothing depends on
this CPU's flags: the float32 mode is forced (apply option), and auto's branches are driven
through KORNIA_HALFPATCH_CPU_NATIVE_HALF / KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16.
"""

import copy
import dataclasses
import importlib
import inspect
import math
import pickle
import pkgutil
import platform
import re
import warnings

import pytest
import torch

import kornia
import kornia.feature as KF
import kornia_halfpatch
from kornia_halfpatch import _options, testing
from kornia_halfpatch._torch_compat import FUNCTIONAL_CALL_TRACEABLE
from kornia_halfpatch._kernels import widening_missing_kernels
from kornia_halfpatch.fixes import networks_cpu_half as cpu_half
from support import UPSTREAM_FIXED, bitwise_equal, cpu_reports


def _torch_runs_float16_networks() -> bool:
    """Whether torch has the float16 CPU kernels kornia's networks use natively (a convolution
    and a batch norm on tiny tensors): torch 2.1 has neither."""
    one = torch.ones(1, 1, 2, 2, dtype=torch.float16)
    try:
        torch.nn.functional.conv2d(one, one)
        torch.nn.functional.batch_norm(one, torch.zeros(1, dtype=torch.float16), torch.ones(1, dtype=torch.float16))
    except (RuntimeError, NotImplementedError):
        return False
    return True


NATIVE_FLOAT16_NETWORKS = _torch_runs_float16_networks()

FIX = "networks_cpu_half"
pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")


@pytest.fixture
def float32_mode():
    with testing.isolated(only=[FIX], cpu_half="float32") as report:
        assert FIX in report.applied, report.fixes[FIX].reason
        yield report


def seeded(module):
    torch.manual_seed(0)
    return module


HALF = (torch.float16, torch.bfloat16)


def reference(module, *args):
    """The module's float32 forward on the widened weights and inputs, narrowed once."""
    dtype = next(module.parameters()).dtype
    wide = copy.deepcopy(module).float()
    with torch.no_grad():
        out = wide(*[a.float() if isinstance(a, torch.Tensor) and a.dtype in HALF else a for a in args])
    return narrow(out, dtype)


def narrow(out, dtype=torch.float16):
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.is_floating_point() else out
    if isinstance(out, (tuple, list)):
        return type(out)(narrow(o, dtype) for o in out)
    if isinstance(out, dict):
        return {k: narrow(v, dtype) for k, v in out.items()}
    if dataclasses.is_dataclass(out):
        return type(out)(**{f.name: narrow(getattr(out, f.name), dtype) for f in dataclasses.fields(out)})
    return out


def native_or_none(run, dtype=torch.float16):
    """The release's native half call, or None where this torch has no float16 CPU kernels for
    kornia's networks (torch 2.1: convolution, batch_norm): there it raises, as asserted."""
    if NATIVE_FLOAT16_NETWORKS or dtype != torch.float16:
        return run()
    with pytest.raises((RuntimeError, NotImplementedError), match="not implemented for 'Half'"):
        run()
    return None


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and bitwise_equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def patches(n=3, size=32, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, size, size, generator=generator)


def image(channels=1, size=48, seed=2):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(1, channels, size, size, generator=generator)


def lafs():
    return torch.tensor([[[[6.0, 0.0, 20.0], [0.0, 6.0, 24.0]], [[5.0, 1.0, 28.0], [-1.0, 4.0, 18.0]]]])


def hardnet8():
    from kornia_halfpatch.demos.feature_descriptors import _untrained_hardnet8

    return _untrained_hardnet8()


def hardnet8_orthonormal_pca():
    """HardNet8 with trained-like PCA (a random orthonormal projection): the releases'
    placeholder (identity, or all ones) makes the weight gradient float32 noise."""
    module = hardnet8()
    with torch.no_grad():
        q, _ = torch.linalg.qr(torch.randn(*module.components.shape, generator=torch.Generator().manual_seed(4)))
        module.components.copy_(q)
    return module


# name -> (module factory, input factory); modules untrained (pretrained=False), seeded.
CASES = {
    "SOSNet": (lambda: KF.SOSNet(pretrained=False), lambda: (patches(),)),
    "HardNet": (lambda: KF.HardNet(pretrained=False), lambda: (patches(),)),
    "HardNet8": (hardnet8, lambda: (patches(),)),
    "HyNet": (lambda: KF.HyNet(pretrained=False), lambda: (patches(),)),
    "TFeat": (lambda: KF.TFeat(pretrained=False), lambda: (patches(),)),
    "KeyNet": (lambda: KF.KeyNet(pretrained=False), lambda: (image(),)),
    "OriNet": (lambda: KF.OriNet(pretrained=False), lambda: (patches(),)),
    "LAFAffNetShapeEstimator": (lambda: KF.LAFAffNetShapeEstimator(pretrained=False), lambda: (lafs(), image())),
    "DISK": (lambda: KF.DISK(), lambda: (image(3, 32),)),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_half_is_the_float32_forward_narrowed_bitwise(float32_mode, name, dtype):
    build, inputs = CASES[name]
    module = seeded(build()).eval().to(dtype)
    args = tuple(a.to(dtype) for a in inputs())
    expected = reference(module, *args)
    with torch.no_grad():
        got = module(*args)
        again = module(*args)  # from the cached float32 weights
    assert same(got, expected)
    assert same(again, expected)


@pytest.mark.parametrize("name", ["SOSNet", "HardNet", "KeyNet"])
def test_float32_float64_and_native_mode_are_the_release(name):
    build, inputs = CASES[name]
    base = seeded(build()).eval()
    for dtype in (torch.float32, torch.float64):
        module = copy.deepcopy(base).to(dtype)
        args = tuple(a.to(dtype) for a in inputs())
        with torch.no_grad(), testing.isolated(only=None, cpu_half="float32") as report:
            assert FIX in report.applied
            patched = module(*args)
            with kornia_halfpatch.unpatched([FIX]):
                unpatched = module(*args)
        assert same(patched, unpatched), dtype
    # native mode installs nothing: float16 is the release's float16 path itself
    module = copy.deepcopy(base).half()
    with testing.isolated(only=[FIX], cpu_half="native") as report:
        assert FIX not in report.applied
        assert "_call_impl" not in type(module).__dict__


def test_a_float32_module_fed_float16_and_a_meta_input_take_the_releases_path(float32_mode):
    module = seeded(KF.HardNet(pretrained=False)).eval()
    x = patches().half()
    assert not cpu_half.float32_wanted(module, (x,), {})  # float32 parameters
    half = copy.deepcopy(module).half()
    assert cpu_half.float32_wanted(half, (x,), {})
    assert not cpu_half.float32_wanted(half, (x.to("meta"),), {})  # not a CPU tensor (as CUDA/MPS)
    assert not cpu_half.float32_wanted(half, (x.bfloat16(),), {})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not cpu_half.float32_wanted(half, (x,), {})
    both = (torch.float16, torch.bfloat16)
    assert cpu_half.float32_wanted(half, (x,), {}, both) is torch.float16
    assert cpu_half.float32_wanted(copy.deepcopy(module).bfloat16(), (x.bfloat16(),), {}, both) is torch.bfloat16
    assert not cpu_half.float32_wanted(half, (x.bfloat16(),), {}, both)  # input and weights differ: the release's
    assert not cpu_half.float32_wanted(copy.deepcopy(module).bfloat16(), (x.bfloat16(),), {})  # bfloat16 not promoted


@pytest.mark.parametrize("native16, native_bf16", [(False, True), (True, False)])
def test_auto_decides_each_half_dtype_on_its_own(monkeypatch, native16, native_bf16):
    """A CPU with the arithmetic of one half dtype only: that dtype runs the release's path, the
    other the float32 path (float32, float64 untouched either way)."""
    monkeypatch.delenv(_options.CPU_HALF.variable, raising=False)
    monkeypatch.setenv(_options.CPU_NATIVE_HALF.variable, "1" if native16 else "0")
    monkeypatch.setenv(_options.CPU_NATIVE_BFLOAT16.variable, "1" if native_bf16 else "0")
    base = seeded(KF.HardNet(pretrained=False)).eval()
    x = patches()
    with torch.no_grad(), testing.isolated(only=[FIX], cpu_half="auto") as report:
        assert FIX in report.applied
        promoted = "bfloat16" if native16 else "float16"
        assert f"float32 in force for {promoted}" in report.facts[FIX]
        for dtype, native in ((torch.float16, native16), (torch.bfloat16, native_bf16), (torch.float32, True)):
            module = copy.deepcopy(base).to(dtype)
            if native:
                # The release's own path: where this torch has no float16 CPU kernels (torch 2.1
                # on a CPU without avx512_fp16), it raises, patched as unpatched.
                with kornia_halfpatch.unpatched([FIX]):
                    expected = native_or_none(lambda: module(x.to(dtype)), dtype)
                got = native_or_none(lambda: module(x.to(dtype)), dtype)
                if expected is None:
                    assert got is None, dtype
                    continue
            else:
                got = module(x.to(dtype))
                expected = reference(module, x.to(dtype))
            assert same(got, expected), dtype


def test_modes_code_beats_environment_beats_auto(monkeypatch):
    monkeypatch.setenv(_options.CPU_HALF.variable, "float32")
    with testing.isolated(only=[FIX]) as report:
        assert FIX in report.applied
        assert "KORNIA_HALFPATCH_CPU_HALF=float32" in report.facts[FIX]
    with testing.isolated(only=[FIX], cpu_half="native") as report:
        assert FIX not in report.applied
        assert "apply(cpu_half='native')" in report.fixes[FIX].reason
    monkeypatch.setenv(_options.CPU_HALF.variable, "native")
    with testing.isolated(only=[FIX], cpu_half="float32") as report:
        assert FIX in report.applied


def test_auto_follows_the_cpu_and_its_override(monkeypatch):
    monkeypatch.delenv(_options.CPU_HALF.variable, raising=False)
    monkeypatch.delenv(_options.CPU_NATIVE_HALF.variable, raising=False)
    monkeypatch.delenv(_options.CPU_NATIVE_BFLOAT16.variable, raising=False)
    monkeypatch.delenv(_options.CPU_AVX512_FP16.variable, raising=False)  # what the CPU itself reports
    # torch's report, or the kernel's flags where torch has no get_capabilities (2.4, 2.6).
    native = cpu_reports("avx512_fp16") or cpu_reports("amx_fp16")
    try:  # torch 2.1 has no float16 CPU convolution: float32 whatever the CPU
        torch.nn.functional.conv2d(torch.ones(1, 1, 1, 1).half(), torch.ones(1, 1, 1, 1).half())
    except RuntimeError:
        native = False
    native_bf16 = cpu_reports("avx512_bf16") or cpu_reports("amx_bf16")
    if platform.machine().lower() in ("x86_64", "amd64"):
        modes = cpu_half.resolve_modes()
        assert modes["float16"][0] == ("native" if native else "float32"), modes
        assert modes["bfloat16"][0] == ("native" if native_bf16 else "float32"), modes
    with testing.isolated(only=[FIX], cpu_half="auto") as report:
        assert (FIX not in report.applied) == (cpu_half.resolve_modes()["float16"][0] == cpu_half.resolve_modes()["bfloat16"][0] == "native"), report.fixes[FIX].reason
    monkeypatch.setenv(_options.CPU_NATIVE_HALF.variable, "0")
    with testing.isolated(only=[FIX], cpu_half="auto") as report:
        assert FIX in report.applied
        assert "KORNIA_HALFPATCH_CPU_NATIVE_HALF=0" in report.facts[FIX]
    monkeypatch.setenv(_options.CPU_NATIVE_HALF.variable, "1")
    monkeypatch.setenv(_options.CPU_NATIVE_BFLOAT16.variable, "0")
    with testing.isolated(only=[FIX], cpu_half="auto") as report:
        assert FIX in report.applied
        assert "KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16=0" in report.facts[FIX]
    monkeypatch.setenv(_options.CPU_NATIVE_BFLOAT16.variable, "1")
    with testing.isolated(only=[FIX]) as report:
        assert FIX not in report.applied
        assert "auto" in report.fixes[FIX].reason


def test_bad_values_raise_in_code_and_warn_from_the_environment(monkeypatch):
    with testing.preserved():
        with pytest.raises(ValueError, match="cpu_half must be one of"):
            kornia_halfpatch.apply(only=[FIX], cpu_half="fast")
    monkeypatch.setenv(_options.CPU_HALF.variable, "fastest")
    monkeypatch.setenv(_options.CPU_NATIVE_HALF.variable, "0")
    monkeypatch.setenv(_options.CPU_NATIVE_BFLOAT16.variable, "0")
    with pytest.warns(kornia_halfpatch.HalfPatchWarning, match="KORNIA_HALFPATCH_CPU_HALF='fastest'"):
        with testing.isolated(only=[FIX]) as report:
            assert FIX in report.applied  # auto, with a CPU said to lack float16 arithmetic
            assert "ignored" in report.facts[FIX]


def test_cache_is_kept_and_rebuilt_when_a_parameter_changes(float32_mode):
    module = seeded(KF.HardNet(pretrained=False)).eval().half()
    x = patches().half()
    with torch.no_grad():
        module(x)
        state = cpu_half._cache[module][1]
        module(x)
        assert cpu_half._cache[module][1] is state
        weights = sum(p.numel() for p in module.parameters()) + sum(
            b.numel() for b in module.buffers() if b.dtype == torch.float16
        )
        assert cpu_half.cached_float32_bytes(module) == 4 * weights
        first_conv = next(m for m in module.modules() if isinstance(m, torch.nn.Conv2d))
        first_conv.weight.mul_(0.5)  # in place: same storage, new version
        got = module(x)
        assert cpu_half._cache[module][1] is not state
    assert same(got, reference(module, x))
    module.float().half()  # new tensors (dtype round trip)
    with torch.no_grad():
        assert same(module(x), reference(module, x))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_training_step_gradients_reach_the_half_parameters(float32_mode, dtype):
    torch.manual_seed(0)
    module16 = KF.HardNet(pretrained=False).to(dtype).train()
    module32 = copy.deepcopy(module16).float()
    x = patches(8).to(dtype)
    torch.manual_seed(5)  # HardNet has Dropout: the same mask for both runs
    loss16 = module16(x).float().pow(2).sum()
    torch.manual_seed(5)
    loss32 = module32(x.float()).to(dtype).float().pow(2).sum()
    loss16.backward()
    loss32.backward()
    for (name, p16), (_, p32) in zip(module16.named_parameters(), module32.named_parameters()):
        assert p16.grad is not None and p16.grad.dtype == dtype, name
        assert bitwise_equal(p16.grad, p32.grad.to(dtype)), name
    for (name, b16), (_, b32) in zip(module16.named_buffers(), module32.named_buffers()):
        # BatchNorm's running statistics: updated in float32, stored back narrowed
        expected = b32.to(dtype) if b16.is_floating_point() else b32
        assert bitwise_equal(b16, expected), name
    before = [p.detach().clone() for p in module16.parameters()]
    torch.optim.SGD(module16.parameters(), lr=0.1).step()
    assert any(not torch.equal(a, b) for a, b in zip(before, module16.parameters()))
    assert all(p.dtype == dtype for p in module16.parameters())
    assert not cpu_half._cache.get(module16)  # nothing cached while gradients were needed


def _gradient_errors(module, x, dtype):
    """Per weight tensor and for the input: (gradient in ``dtype``, the float32 gradient on the
    widened weights and input narrowed once, ulp at the float32 gradient's largest magnitude)."""
    module = module.eval().to(dtype)
    wide = copy.deepcopy(module).float()
    x_half = x.to(dtype).requires_grad_()
    x_wide = x_half.detach().float().requires_grad_()
    out_half = module(x_half)
    out_wide = wide(x_wide)
    projection = torch.randint(-16, 17, out_wide.shape, generator=torch.Generator().manual_seed(3)) / 16
    (out_half.float() * projection).sum().backward()
    (out_wide * projection).sum().backward()
    digits = {torch.float16: 10, torch.bfloat16: 7}[dtype]  # significand bits after the leading one
    rows = []
    pairs = [(n, p.grad, q.grad) for (n, p), (_, q) in zip(module.named_parameters(), wide.named_parameters())]
    for name, got, wide_grad in pairs + [("input", x_half.grad, x_wide.grad)]:
        assert got is not None and got.dtype == dtype, name
        scale = wide_grad.abs().max().item()
        ulp = 2.0 ** (math.floor(math.log2(scale)) - digits) if scale > 0 else 0.0
        rows.append((name, got, wide_grad.to(dtype), ulp))
    return rows


# HyNet and HardNet8 in bfloat16: weight gradients 8-16% off (relative L2) natively, in every
# release and 0.9.0 (docs/training.md); the float32 path gives the float32 gradient narrowed.
GRADIENT_CASES = {
    "HyNet": lambda: seeded(KF.HyNet(pretrained=False)),
    "HardNet8": hardnet8_orthonormal_pca,
}


@pytest.mark.slow  # the native bfloat16 backward on a CPU without bfloat16 arithmetic: 3-220 s for HardNet8 (AVX2, loaded)
@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_bfloat16_weight_and_input_gradients_are_the_float32_gradient_narrowed(name):
    base = GRADIENT_CASES[name]()
    x = patches(2)
    with testing.isolated(only=None, cpu_half="float32") as report:
        assert FIX in report.applied
        patched = _gradient_errors(copy.deepcopy(base), x, torch.bfloat16)
        with kornia_halfpatch.unpatched([FIX]):
            native = _gradient_errors(copy.deepcopy(base), x, torch.bfloat16)
    worst_native = 0.0
    for (name_, got, expected, ulp), (_, got_native, _, _) in zip(patched, native):
        assert torch.isfinite(got).all(), name_
        # within a few ulps at the gradient's scale: in fact the float32 gradient narrowed, bitwise
        assert (got.float() - expected.float()).abs().max().item() <= 2 * ulp, name_
        assert bitwise_equal(got, expected), name_
        if ulp > 0:  # a tensor the projection leaves without gradient (all 0) has no scale
            worst_native = max(worst_native, (got_native.float() - expected.float()).abs().max().item() / ulp)
    assert worst_native > 2, "native bfloat16 is expected far from the float32 gradient"


def test_parameters_state_dict_pickle_and_to_are_unchanged(float32_mode):
    module = seeded(KF.SOSNet(pretrained=False)).eval().half()
    attributes = set(vars(module))
    keys = {k: (v.dtype, v.shape) for k, v in module.state_dict().items()}
    x = patches().half()
    with torch.no_grad():
        out = module(x)
    assert set(vars(module)) == attributes
    assert {k: (v.dtype, v.shape) for k, v in module.state_dict().items()} == keys
    clone = pickle.loads(pickle.dumps(module))
    with torch.no_grad():
        assert same(clone(x), out)
    assert set(vars(clone)) == attributes
    assert all(p.dtype == torch.float32 for p in module.to(torch.float32).parameters())
    assert module.training is False


def test_revert_removes_the_hook_from_the_class():
    with testing.isolated(only=()):
        assert "_call_impl" not in KF.HardNet.__dict__
        kornia_halfpatch.apply(only=[FIX], cpu_half="float32")
        assert "_call_impl" in KF.HardNet.__dict__
        kornia_halfpatch.revert([FIX])
        assert "_call_impl" not in KF.HardNet.__dict__
        assert KF.HardNet._call_impl is torch.nn.Module._call_impl


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("order", [("feature_descriptors", FIX), (FIX, "feature_descriptors")])
def test_composes_with_descriptor_norm_in_either_order(order, dtype):
    module = seeded(KF.SOSNet(pretrained=False)).eval().to(dtype)
    x = patches().to(dtype)
    expected = reference(module, x)
    release_forward = kornia_halfpatch.get_original(KF.SOSNet.__dict__["forward"])
    with testing.isolated(only=()):
        assert not kornia_halfpatch.is_patched(release_forward)
        with testing.isolated(only=["feature_descriptors"]):
            with torch.no_grad():
                descriptor_norm_only = native_or_none(lambda: module(x), dtype)
        for name in order:
            kornia_halfpatch.apply(only=[name], cpu_half="float32")
        with torch.no_grad():
            assert same(module(x), expected)
        kornia_halfpatch.revert([order[0]])  # the other one stays, alone
        with torch.no_grad():
            if order[1] == FIX:
                assert same(module(x), expected)
            else:
                alone = native_or_none(lambda: module(x), dtype)
                assert alone is descriptor_norm_only is None or same(alone, descriptor_norm_only)
        kornia_halfpatch.revert()
        assert KF.SOSNet.__dict__["forward"] is release_forward
        assert "_call_impl" not in KF.SOSNet.__dict__


def test_only_and_exclude_select_it():
    with testing.isolated(only=None, cpu_half="float32") as report:
        assert FIX in report.applied
    with testing.preserved():
        kornia_halfpatch.revert()
        report = kornia_halfpatch.apply(exclude=[FIX], cpu_half="float32")
        assert FIX not in report.applied and "feature_descriptors" in report.applied
        assert "_call_impl" not in KF.SOSNet.__dict__


def test_pipelines_reach_their_networks_in_float32(float32_mode):
    """A LocalFeature pipeline is not a row: its networks are, and run with float32 weights."""
    torch.manual_seed(0)
    detector = KF.KeyNetDetector(
        pretrained=False, num_features=20, aff_module=KF.LAFAffNetShapeEstimator(pretrained=False)
    )
    feature = KF.LocalFeature(detector, KF.LAFDescriptor(KF.HardNet(pretrained=False), patch_size=32)).eval().half()
    seen = {}
    hooks = []
    for owner in (feature.detector.model, feature.descriptor.descriptor, feature.detector.aff):
        conv = next(m for m in owner.modules() if isinstance(m, torch.nn.Conv2d))
        hooks.append(conv.register_forward_hook(lambda m, i, o, n=type(owner).__name__: seen.__setitem__(n, (i[0].dtype, m.weight.dtype))))
    try:
        # The pipeline's own half ops without a CPU kernel in an older torch (NMS's replicate
        # padding) run in float32, narrowed; what reaches the networks is what is checked.
        with torch.no_grad(), widening_missing_kernels():
            lafs_, responses, descriptors = feature(image(1, 64).half())
    finally:
        for hook in hooks:
            hook.remove()
    assert seen["KeyNet"] == (torch.float32, torch.float32)
    if descriptors.shape[1]:  # patches were described and shaped (0.7.0's untrained KeyNet finds
        # none here, and the release returns its empty descriptor tensor in float32)
        assert descriptors.dtype == torch.float16
        assert seen["HardNet"] == (torch.float32, torch.float32)
        assert seen["LAFAffNetShapeEstimator"] == (torch.float32, torch.float32)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_torch_jit_script_still_works(float32_mode, dtype):
    module = seeded(KF.HardNet(pretrained=False)).eval().to(dtype)
    x = patches().to(dtype)
    scripted = torch.jit.script(module)  # compiles forward; the hook is not part of it
    with torch.no_grad():
        got = native_or_none(lambda: scripted(x), dtype)
        with kornia_halfpatch.unpatched([FIX]):
            native = native_or_none(lambda: torch.jit.script(copy.deepcopy(module))(x), dtype)
    assert got is native is None or same(got, native)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_torch_jit_trace_still_works(float32_mode, dtype):
    # The float32 path cannot run under torch.jit.trace (torch.func.functional_call refuses it):
    # the trace is the release's half forward, and tracing never raises where it did not.
    module = seeded(KF.HardNet(pretrained=False)).eval().to(dtype)
    x = patches().to(dtype)
    with torch.no_grad():
        with kornia_halfpatch.unpatched([FIX]):
            native = native_or_none(lambda: module(x), dtype)
        if native is None:  # torch 2.1: no float16 CPU convolution, traced or not
            with pytest.raises((RuntimeError, NotImplementedError), match="not implemented for 'Half'"):
                torch.jit.trace(module, x, check_trace=False)
            return
        traced = torch.jit.trace(module, x, check_trace=False)
        assert same(traced(x), native)
        assert same(module(x), reference(module, x))  # eager keeps the float32 path


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_torch_compile_fullgraph_in_float32_mode(float32_mode, dtype):
    module = seeded(KF.TFeat(pretrained=False)).eval().to(dtype)
    x = patches(2).to(dtype)
    if FUNCTIONAL_CALL_TRACEABLE:
        expected = reference(module, x)
    else:
        # dynamo before torch 2.6 cannot trace the float32 path (torch.func.functional_call): the
        # graph is the release's float16 forward, which must still compile as one graph.
        with torch.no_grad(), kornia_halfpatch.unpatched([FIX]):
            expected = native_or_none(lambda: module(x), dtype)
        if expected is None:
            # torch 2.1: that forward has no float16 CPU kernels; compiled, it fails as eager does
            torch._dynamo.reset()
            try:
                with torch.no_grad(), pytest.raises((RuntimeError, NotImplementedError), match="not implemented for 'Half'"):
                    torch.compile(module, fullgraph=True, backend="eager")(x)
            finally:
                torch._dynamo.reset()
            return
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            # dynamo must capture the float32 path as one graph; the eager backend runs that
            # graph (inductor's code generation is not what this checks, and costs ~45 s)
            got = torch.compile(module, fullgraph=True, backend="eager")(x)
    finally:
        torch._dynamo.reset()
    assert got.dtype == dtype
    assert same(got, expected)


def _conv_classes():
    """Every nn.Module class defined in the installed kornia whose source builds or calls a convolution."""
    pattern = re.compile(r"Conv[123]d|ConvTranspose|conv2d\(")
    found = set()
    for package in ("kornia.feature", "kornia.filters", "kornia.contrib", "kornia.models", "kornia.geometry", "kornia.losses"):
        try:
            root = importlib.import_module(package)
        except Exception:  # noqa: BLE001 - a package this release does not have
            continue
        names = [package] + [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")]
        for name in names:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - optional dependencies (onnx, transformers)
                continue
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, torch.nn.Module) and obj.__module__ == name:
                    try:
                        source = inspect.getsource(obj)
                    except (OSError, TypeError):
                        continue
                    if pattern.search(source):
                        found.add(f"{obj.__module__}:{obj.__qualname__}")
    return found


def test_every_convolutional_kornia_module_is_a_row_reached_or_exempt():
    with testing.isolated(only=[FIX], cpu_half="float32") as report:
        rows = {row.target.rsplit("._call_impl", 1)[0] for row in report.fixes[FIX].target_statuses if row.verdict.value == "applied"}
    row_names = {path.split(":")[1] for path in rows}
    uncovered = []
    for qualified in sorted(_conv_classes()):
        if qualified in rows:
            continue
        holder = cpu_half.REACHED_THROUGH.get(qualified)
        if holder is not None:
            assert holder in row_names, f"{qualified} is said to be reached through {holder}, not a row here"
            continue
        if cpu_half.exemption(qualified) is None:
            uncovered.append(qualified)
    assert uncovered == [], "convolutional kornia modules neither a row, reached through one, nor exempt"
    # and every row that resolves in this release is a convolutional class of it
    assert rows <= _conv_classes() | {"kornia.feature.disk.disk:DISK", "kornia.feature.disk._unets.unet:Unet",
                                     "kornia.feature.dedode.detector:DeDoDeDetector",
                                     "kornia.feature.dedode.descriptor:DeDoDeDescriptor", "kornia.feature.defmo:DeFMO",
                                     "kornia.filters.dexined:DexiNed", "kornia.models.dexined:DexiNed",
                                     "kornia.feature.sold2.backbones:SOLD2Net"}


def test_reached_through_holds_on_instances():
    """The holders really contain the classes said to be reached through them (cheap ones)."""
    import kornia.feature.keynet as keynet

    assert any(isinstance(m, keynet._FeatureExtractor) for m in KF.KeyNet(pretrained=False).modules())
    from kornia.feature.disk._unets import blocks

    unet = KF.DISK().unet
    assert any(isinstance(m, blocks.Conv) for m in unet.modules())
    assert any(isinstance(m, blocks.ThinUnetUpBlock) for m in unet.modules())


def test_demonstration_holds_and_status_says_why(float32_mode):
    from kornia_halfpatch.demos.networks_cpu_half import demonstrate

    demo = demonstrate()
    assert demo.holds, demo.cases
    assert float32_mode.facts[FIX].startswith("float32 in force (apply(cpu_half='float32'))")
    with testing.isolated(only=[FIX], cpu_half="native") as report:
        assert report.facts[FIX].startswith("native in force")


def test_each_hook_keeps_the_dtypes_it_was_built_with_across_nested_blocks(monkeypatch):
    """A block that re-applies with another mode and then restores puts the earlier hooks back as
    they were built: auto with native bfloat16 computes only float16 in float32, whatever a nested
    float32-mode block installed in between (the hooks' dtypes are theirs, not the last build's)."""
    monkeypatch.delenv(_options.CPU_HALF.variable, raising=False)
    monkeypatch.setenv(_options.CPU_NATIVE_HALF.variable, "0")
    monkeypatch.setenv(_options.CPU_NATIVE_BFLOAT16.variable, "1")
    widened = []
    original_run = cpu_half.run_in_float32
    monkeypatch.setattr(cpu_half, "run_in_float32", lambda module, args, kwargs, half: widened.append(half) or original_run(module, args, kwargs, half))
    network = KF.HardNet(pretrained=False).eval()
    patches = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0))

    def widened_dtypes():
        widened.clear()
        with torch.no_grad():
            for dtype in (torch.float16, torch.bfloat16):
                copy.deepcopy(network).to(dtype)(patches.to(dtype))
        return list(widened)

    with testing.isolated(only=[FIX], cpu_half="auto") as report:
        assert FIX in report.applied
        assert widened_dtypes() == [torch.float16]
        with testing.isolated(only=[FIX], cpu_half="float32"):
            assert widened_dtypes() == [torch.float16, torch.bfloat16]
        assert widened_dtypes() == [torch.float16]
