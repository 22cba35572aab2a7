"""Half-precision local descriptors: SOSNet, HyNet, HardNet, HardNet8, SIFT, DenseSIFT.

Oracles: kornia 0.9.0's descriptors on the same seeded weights where 0.9.0 computes the same way,
computed on this machine in the same run (``oracle.py``: the networks' convolutions round
differently per CPU instruction set, so recorded outputs would only hold on the recording CPU);
the installed release's own float32 computation (SIFT, whose float32 values 0.9.0 changed); a
float64 run of the same weights; and patched-versus-unpatched invariants.
"""

import contextlib
import copy
import os
import pickle
import re
from pathlib import Path

import gen_feature_descriptors as gen
import pytest
import torch

import kornia.feature as KF
import kornia_halfpatch
import oracle
from kornia_halfpatch._torch_compat import FUNCTIONAL_CALL_TRACEABLE
from kornia_halfpatch.fixes import feature_descriptors
from support import (
    FULL_DTYPES,
    cpu_autocast_accepts,
    HALF_DTYPES,
    UPSTREAM_FIXED,
    bitwise_equal,
    expect_missing_kernel_error,
    needs_old_kornia,
    inductor_compile,
    lacks_half_kernel,
    run_python,
)

FIX = "feature_descriptors"
# Recorded inputs only (calibrated statistics, weight checksums); 0.9.0's outputs come from `oracle`.
RECORDED = torch.load(Path(__file__).parent / "golden" / "feature_descriptors.pt")
ALL_DTYPES = HALF_DTYPES + FULL_DTYPES
SCRIPTABLE = ("sosnet", "hynet_bias", "hardnet", "hardnet8")


def scale_ulp(dtype: torch.dtype) -> float:
    """One ulp at a typical descriptor component, 1/sqrt(128) ~ 0.088 (in [2**-4, 2**-3))."""
    return 2.0**-4 * torch.finfo(dtype).eps


# Differences from 0.9.0 where 0.9.0 computes differently (see docs/fixes/feature_descriptors.md),
# in ulps at the descriptor scale; measured maxima on these weights are about 3/4 of each bound.
# SOSNet float16: 0.9.0 also runs the final BatchNorm in float32 (float32 running statistics).
# HyNet: 0.9.0 also runs every FilterResponseNorm in float32 (and the final BatchNorm for float16).
ULP_BOUND = {("sosnet", torch.float16): 6, ("hynet", torch.float16): 96, ("hynet", torch.bfloat16): 96}


@pytest.fixture(autouse=True)
def fix_on():
    with kornia_halfpatch.patched(only=[FIX]):
        yield


_networks = {}


def network(name: str, config: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Seeded network (see gen_feature_descriptors), cached per dtype; eval mode."""
    key = (name, config, dtype)
    if key not in _networks:
        base = _networks.get((name, config, torch.float32))
        if base is None:
            base = _networks[name, config, torch.float32] = gen.build_network(name, config, RECORDED)
        _networks[key] = copy.deepcopy(base).to(dtype).eval()
    return _networks[key]


def run(module: torch.nn.Module, patches: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with torch.no_grad():
        return module(patches.to(dtype))


_descriptors = {}


def golden_case(name: str, config: str, dtype: torch.dtype, case: str) -> torch.Tensor:
    """The patched descriptors of a golden case (computed once: several tests read them)."""
    key = (name, config, dtype, case)
    if key not in _descriptors:
        _descriptors[key] = run(network(name, config, dtype), gen.case_input(case), dtype)
    return _descriptors[key]


# --------------------------------------------------------------------------------------------
# The bug, as measured on the unpatched release


@needs_old_kornia
def test_fix_applied_because_the_bug_is_present():
    report = kornia_halfpatch.status()
    assert report.fixes[FIX].applied, report.fixes[FIX].reason
    assert len(report.fixes[FIX].targets) == 7


@pytest.mark.skipif(not UPSTREAM_FIXED, reason="only kornia >= 0.9.0 is left alone")
def test_nothing_patched_on_kornia_090():
    assert not kornia_halfpatch.status().fixes[FIX].applied
    assert not kornia_halfpatch.is_patched(KF.SOSNet.forward)


@needs_old_kornia
@pytest.mark.parametrize("name", ["sosnet", "hynet_bias", "hynet_nobias"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_unpatched_sosnet_hynet_half_raise_on_cpu(name, dtype):
    model = network(name, "untrained", dtype)
    # torch 2.1 has no float16 CPU convolution/batch_norm: the release's network stops earlier
    missing = "batch_norm|slow_conv2d" if lacks_half_kernel("conv2d", dtype) else "avg_pool3d"
    with kornia_halfpatch.unpatched([FIX, "networks_cpu_half"]), expect_missing_kernel_error(match=missing):
        run(model, gen.degenerate_patches(0.5), dtype)


def _sift() -> torch.nn.Module:
    return KF.SIFTDescriptor(32)


def _dense_sift() -> torch.nn.Module:
    return KF.DenseSIFTDescriptor()


def _flat_float16_descriptor(name: str) -> torch.Tensor:
    module = {"sift": _sift, "densesift": _dense_sift}.get(name)
    model = module() if module else network(name, "untrained", torch.float16)
    return run(model, gen.degenerate_patches(0.5), torch.float16)


@needs_old_kornia
@pytest.mark.parametrize("name", ["hardnet", "hardnet8", "sift", "densesift"])
def test_unpatched_float16_flat_patch_is_all_nan(name):
    # The release's own float16 run: networks_cpu_half (float32 trunks, applied by an earlier
    # apply() of this process where the CPU or torch lacks native float16) is not the release.
    with kornia_halfpatch.unpatched([FIX, "networks_cpu_half"]):
        if name in ("sift", "densesift") and lacks_half_kernel("atan2", torch.float16):
            # torch 2.1 has no float16 CPU atan2 (nor the convolution SIFT's pooling kernel runs
            # before it): the release raises there
            with expect_missing_kernel_error(match="atan2|conv2d"):
                _flat_float16_descriptor(name)
        elif name in ("hardnet", "hardnet8") and lacks_half_kernel("conv2d", torch.float16):
            # nor a float16 CPU convolution (slow_conv2d_cpu): the release's networks raise there
            with expect_missing_kernel_error(match="conv2d"):
                _flat_float16_descriptor(name)
        else:
            assert torch.isnan(_flat_float16_descriptor(name)).all()
    assert torch.isfinite(_flat_float16_descriptor(name)).all()


# --------------------------------------------------------------------------------------------
# Against kornia 0.9.0 on the same weights


def _oracle_groups():
    groups = sorted({(name, config, dtype_name) for name, config, dtype_name, _ in gen.entries()})
    return [pytest.param(*group, id="-".join(group)) for group in groups]


@pytest.fixture(scope="module")
def kornia090():
    """Kornia 0.9.0's descriptors on the same weights and inputs, computed on this machine."""
    return oracle.kornia090_outputs("feature_descriptors")  # the generator, tests/golden/gen_feature_descriptors.py


@pytest.mark.parametrize("name,config,dtype_name", _oracle_groups())
def test_descriptors_match_kornia_090(kornia090, name, config, dtype_name):
    dtype = gen.DTYPES[dtype_name]
    weights = gen.checksum(network(name, config).state_dict())
    assert weights == RECORDED[f"{name}/{config}/checksum"] == kornia090[f"{name}/{config}/checksum"]
    for case in gen.cases(config):
        expected = kornia090[f"{name}/{config}/{dtype_name}/{case}"]
        got = golden_case(name, config, dtype, case)
        assert got.dtype == dtype and got.shape == expected.shape == (got.shape[0], 128)
        assert torch.isfinite(got).all(), case
        family = name.split("_")[0]
        exact_zero_path = case == "flat0.0" and config == "untrained" and name != "hynet_bias"
        computes_differently = (family, dtype) in ULP_BOUND and not (config == "untrained" and family == "sosnet")
        if dtype == torch.float32 and name == "hardnet":
            # 0.9.0 runs HardNet's float32 CPU convolutions channels-last: a different oneDNN
            # kernel, a few float32 ulps apart. Its float16/bfloat16 paths are unchanged.
            torch.testing.assert_close(got, expected, rtol=0, atol=4e-6)
        elif computes_differently and not exact_zero_path:
            error = (got.float() - expected.float()).abs().max().item()
            assert error <= ULP_BOUND[family, dtype] * scale_ulp(dtype), (case, error / scale_ulp(dtype))
        else:
            assert bitwise_equal(got, expected), (case, (got.float() - expected.float()).abs().max().item())


@pytest.mark.parametrize("name", ["sosnet", "hynet_bias", "hynet_nobias"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_error_against_float64_is_kornia_090s(kornia090, name, dtype):
    reference = golden_case(name, "untrained", torch.float64, "uniform")
    error = (golden_case(name, "untrained", dtype, "uniform").double() - reference).abs().max().item()
    upstream = kornia090[f"{name}/untrained/{str(dtype)[6:]}/error_vs_float64"].item()
    if name == "sosnet":
        assert error == upstream  # same computation, bitwise
        if dtype == torch.float16:
            assert error < 5e-4  # 0.9.0's "about 2.3e-4", not the 2e-3 of a float16 normalization
    else:
        assert error <= 1.5 * upstream  # HyNet's FRN runs in half here (float32 in 0.9.0)


# --------------------------------------------------------------------------------------------
# Weight gradients in both cpu_half modes: natively (the half kernels GPUs and avx512_fp16 CPUs
# run) no further from the float32 gradients than kornia 0.9.0's on the same weights, finite;
# in the float32 mode the float32 gradients narrowed once.


def _gradient_params():
    return [pytest.param(name, config, case, id=f"{name}-{config}-{case}")
            for name in gen.NETWORKS for config, case in gen.GRADIENT_CASES]


@needs_old_kornia
@pytest.mark.parametrize("cpu_half", ["native"], indirect=True)
@pytest.mark.parametrize("name,config,case", _gradient_params())
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_native_weight_gradients_are_finite_and_no_further_from_float32_than_kornia_090s(
        kornia090, cpu_half, name, config, case, dtype):
    if lacks_half_kernel("conv2d", dtype):
        pytest.skip(f"torch {torch.__version__} has no {dtype} CPU convolution: no native half network")
    error, nonfinite, stray = gen.weight_gradient_error(network(name, config), gen.case_input(case), dtype).tolist()
    upstream_error, _, upstream_stray = kornia090[f"{name}/{config}/{str(dtype)[6:]}/{case}/gradient"].tolist()
    # 0.9.0's float16 SOSNet and HyNet(is_bias=False) give NaN weight gradients on an untrained
    # network's flat patch (1/eps through the normalisation, times zero activations): finite here.
    assert nonfinite == 0
    if upstream_error < float("inf"):
        assert error <= 1.05 * upstream_error + 1e-6, (error, upstream_error)
    assert stray <= 1.05 * upstream_stray + 1e-6, (stray, upstream_stray)


@needs_old_kornia
@pytest.mark.parametrize("cpu_half", ["float32"], indirect=True)
@pytest.mark.parametrize("name", gen.NETWORKS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_float32_mode_weight_gradients_are_the_float32_gradients_narrowed(cpu_half, name, dtype):
    half = copy.deepcopy(network(name, "trained")).to(dtype)
    wide = copy.deepcopy(half).float()
    patches = torch.cat([gen.textured_patches(2, 5), gen.degenerate_patches(0.0)[:1]])
    grads = []
    for model, x in ((half, patches.to(dtype)), (wide, patches.to(dtype).float())):
        out = model(x)
        projection = torch.randint(-16, 17, out.shape, generator=torch.Generator().manual_seed(3)).float() / 16
        grads.append(torch.autograd.grad((out.float() * projection).sum(), list(model.parameters())))
    for g_half, g_32 in zip(*grads):
        assert g_half.dtype == dtype and bitwise_equal(g_half, g_32.to(dtype))


@needs_old_kornia
@pytest.mark.parametrize("name", gen.NETWORKS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_descriptors_in_both_modes_are_finite_and_in_the_input_dtype(cpu_half, name, dtype):
    """Both modes on flat and textured patches: finite, of the input's dtype; in the float32
    mode bitwise the float32 network narrowed once, natively within float16 rounding of it."""
    if cpu_half == "native" and lacks_half_kernel("conv2d", dtype):
        pytest.skip(f"torch {torch.__version__} has no {dtype} CPU convolution: no native half network")
    model = network(name, "untrained", dtype)
    patches = torch.cat([gen.textured_patches(2, 5), gen.degenerate_patches(0.0), gen.degenerate_patches(0.5)])
    got = run(model, patches, dtype)
    expected = run(copy.deepcopy(model).float(), patches.to(dtype).float(), torch.float32)
    assert got.dtype == dtype and torch.isfinite(got).all()
    if cpu_half == "float32":
        assert bitwise_equal(got, expected.to(dtype))
    else:
        assert (got.float() - expected).abs().max() <= 64 * torch.finfo(dtype).eps * expected.abs().max()


# --------------------------------------------------------------------------------------------
# Degenerate patches and unchanged full precision


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_degenerate_patches_give_finite_descriptors(dtype):
    # The seeded networks in float16/bfloat16/float32 are covered case by case against 0.9.0 above.
    patches = torch.cat([gen.degenerate_patches(value) for value in gen.DEGENERATE_VALUES])
    modules = [_sift(), _dense_sift(), KF.TFeat(pretrained=False).eval()]
    if dtype == torch.float64:
        modules += [network(name, "untrained", dtype) for name in gen.NETWORKS]
    for module in modules:
        out = run(module.to(dtype), patches, dtype)
        assert out.dtype == dtype and torch.isfinite(out).all(), type(module).__name__
        assert out.shape[:2] == (len(patches), 128), type(module).__name__


@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=str)
def test_full_precision_is_bitwise_unchanged(dtype):
    patches = torch.cat([gen.textured_patches(2, 5), gen.degenerate_patches(0.0)[:1]])
    modules = [network(name, "trained", dtype) for name in gen.NETWORKS]
    modules += [_sift().to(dtype), _dense_sift().to(dtype)]
    for module in modules:
        patched = run(module, patches, dtype)
        with kornia_halfpatch.unpatched([FIX]):
            unpatched = run(module, patches, dtype)
        assert bitwise_equal(patched, unpatched), type(module).__name__


def test_float32_gradients_are_bitwise_unchanged():
    model = network("sosnet", "trained")
    patches = gen.textured_patches(2, 5)
    grads = []
    for context in (kornia_halfpatch.patched(only=[FIX]), kornia_halfpatch.unpatched([FIX])):
        with context:
            x = patches.clone().requires_grad_(True)
            model(x).pow(2).sum().backward()
            grads.append(x.grad)
    assert bitwise_equal(grads[0], grads[1])


@needs_old_kornia  # 0.9.0 computes float16 SIFT its own way, on its own float32 semantics
@pytest.mark.parametrize("factory", [_sift, _dense_sift], ids=["SIFTDescriptor", "DenseSIFTDescriptor"])
def test_sift_float16_is_the_release_float32_descriptor_narrowed(factory):
    # 0.9.0 changed SIFT's float32 values (and DenseSIFT's shape): the oracle is this release.
    patches = torch.cat([gen.textured_patches(3, 9), gen.degenerate_patches(0.0), gen.degenerate_patches(0.5)])
    for model in (factory(), factory().half()):  # float32 module with half input, and a half module
        got = run(model, patches, torch.float16)
        with kornia_halfpatch.unpatched([FIX]):
            expected = run(model, patches.half().float(), torch.float32).half()
            bfloat16 = run(model, patches, torch.bfloat16)
        assert bitwise_equal(got, expected)
        assert bitwise_equal(run(model, patches, torch.bfloat16), bfloat16)  # bfloat16 untouched


# --------------------------------------------------------------------------------------------
# Instances, state, pickling, pretrained path


@needs_old_kornia
def test_instances_created_before_apply_get_the_fix():
    with kornia_halfpatch.unpatched([FIX, "networks_cpu_half"]):  # the release's own float16 networks
        sosnet = KF.SOSNet(pretrained=False).half().eval()
        hardnet = KF.HardNet(pretrained=False).half().eval()
        with expect_missing_kernel_error():
            run(sosnet, gen.degenerate_patches(0.0), torch.float16)
        if lacks_half_kernel("conv2d", torch.float16):  # torch 2.1: no float16 CPU convolution
            with expect_missing_kernel_error(match="conv2d"):
                run(hardnet, gen.degenerate_patches(0.0), torch.float16)
        else:
            assert torch.isnan(run(hardnet, gen.degenerate_patches(0.0), torch.float16)).all()
    assert torch.isfinite(run(sosnet, gen.degenerate_patches(0.0), torch.float16)).all()
    assert torch.isfinite(run(hardnet, gen.degenerate_patches(0.0), torch.float16)).all()


@pytest.mark.parametrize("name", gen.NETWORKS)
def test_state_dict_and_pickling_unchanged(name):
    model = network(name, "trained", torch.float16)
    patched_bytes = pickle.dumps(model)
    with kornia_halfpatch.unpatched([FIX]):
        unpatched_bytes = pickle.dumps(model)
        unpatched_keys = list(gen.make_network(name).state_dict())
    assert list(model.state_dict()) == unpatched_keys
    assert patched_bytes == unpatched_bytes and b"kornia_halfpatch" not in patched_bytes
    restored = pickle.loads(patched_bytes)
    patches = gen.textured_patches(2, 5)
    assert bitwise_equal(run(restored, patches, torch.float16), run(model, patches, torch.float16))


@pytest.mark.parametrize("cls,kwargs", [(KF.SOSNet, {}), (KF.HyNet, {"is_bias": True})], ids=["SOSNet", "HyNet"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_pretrained_networks_run_in_half(monkeypatch, cls, kwargs, dtype):
    name = "sosnet" if cls is KF.SOSNet else "hynet_bias"
    weights = network(name, "trained").state_dict()

    def load_state_dict_from_url(*args, **kwargs):
        return copy.deepcopy(weights)

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", load_state_dict_from_url)
    module = __import__(cls.__module__, fromlist=["_"])
    if hasattr(module, "load_state_dict_from_url"):  # 0.9.0 downloads through its own loader
        monkeypatch.setattr(module, "load_state_dict_from_url", load_state_dict_from_url)
    model = cls(pretrained=True, **kwargs).to(dtype)
    patches = torch.cat([gen.textured_patches(2, 5), gen.degenerate_patches(0.0)])
    out = run(model, patches, dtype)
    assert out.shape == (4, 128) and out.dtype == dtype and torch.isfinite(out).all()
    assert bitwise_equal(out, run(network(name, "trained", dtype), patches, dtype))


# --------------------------------------------------------------------------------------------
# Execution modes


def _forget_scripted(module: torch.nn.Module) -> None:
    # TorchScript caches one compiled type per class; other tests script these classes too.
    from torch.jit._recursive import concrete_type_store

    concrete_type_store.type_store.pop(type(module), None)


# torch 2.1 has no float16 CPU convolution or batch_norm kernel. There a float16 network runs on
# CPU only through networks_cpu_half's float32 trunk, a Python hook (``Module._call_impl``) that
# TorchScript (it compiles ``forward``), ``torch.jit.trace`` (``functional_call`` refuses to run
# while tracing) and dynamo before torch 2.6 (``functional_call`` is not traceable there) do not
# take: they run the release's float16 forward, which raises for want of the kernel, as it does
# without the shim. Where torch itself cannot, the tests assert that: the same missing kernel,
# patched and unpatched (the shim makes nothing worse).
NO_FLOAT16_NETWORKS = lacks_half_kernel("conv2d", torch.float16)


def no_float16_network_kernel(dtype: torch.dtype) -> bool:
    return dtype == torch.float16 and NO_FLOAT16_NETWORKS


def missing_kernel_patched_and_unpatched(attempt) -> str:
    """Run ``attempt()`` patched, then with this fix and networks_cpu_half reverted: both must
    raise torch's missing-kernel error for the same kernel; returns that kernel's name."""
    names = []
    for leg in ("patched", "unpatched"):
        context = kornia_halfpatch.unpatched([FIX, "networks_cpu_half"]) if leg == "unpatched" else contextlib.nullcontext()
        with context, expect_missing_kernel_error(match="not implemented for 'Half'") as error:
            attempt()
        names.append(re.search(r'"(\w+)" not implemented for \'Half\'', str(error.value)).group(1))
    assert names[0] == names[1], names
    return names[0]


@pytest.mark.parametrize("name", SCRIPTABLE)
def test_torch_jit_script(name):
    patches = torch.cat([gen.uniform_patches(1, 4).float(), gen.degenerate_patches(0.0)])
    for dtype in ALL_DTYPES[:3]:
        # Scripted after the dtype conversion, as kornia 0.9.0 requires for these networks.
        model = network(name, "untrained", dtype)
        if no_float16_network_kernel(dtype):

            def script_and_run():
                _forget_scripted(model)
                run(torch.jit.script(copy.deepcopy(model)), patches, dtype)

            missing_kernel_patched_and_unpatched(script_and_run)
            continue
        _forget_scripted(model)
        scripted = torch.jit.script(copy.deepcopy(model))
        eager = run(model, patches, dtype)
        assert bitwise_equal(run(scripted, patches, dtype), eager), dtype
        assert torch.isfinite(eager).all()
        if dtype == torch.float32:
            with kornia_halfpatch.unpatched([FIX]):
                assert bitwise_equal(run(model, patches, dtype), eager)


def test_torch_jit_trace():
    patches = torch.cat([gen.uniform_patches(2, 4).float(), gen.degenerate_patches(0.0)])
    for name, dtype in (("sosnet", torch.float16), ("hynet_nobias", torch.bfloat16), ("hardnet8", torch.float16)):
        model = network(name, "untrained", dtype)

        def trace():
            with torch.no_grad():
                return torch.jit.trace(model, patches.to(dtype), check_trace=False)

        if no_float16_network_kernel(dtype):
            missing_kernel_patched_and_unpatched(trace)
            continue
        assert bitwise_equal(run(trace(), patches, dtype), run(model, patches, dtype)), name


def _fresh_compile(model: torch.nn.Module, **options) -> torch.nn.Module:
    torch._dynamo.reset()
    return torch.compile(model, **options) if options.get("backend") else inductor_compile(model, **options)


@pytest.mark.slow
def test_torch_compile_fullgraph_no_graph_break():
    # backend="eager" runs the captured graph with eager kernels: it checks that dynamo captures
    # each forward whole (fullgraph raises on a graph break) and that the capture equals eager.
    patches = torch.cat([gen.uniform_patches(2, 4).float(), gen.degenerate_patches(0.0)])
    cases = [("sosnet", torch.float16), ("hynet_nobias", torch.bfloat16)]
    cases += [("hardnet", torch.float16), ("hardnet8", torch.float16)]
    for name, dtype in cases:
        model = network(name, "untrained", dtype)
        if no_float16_network_kernel(dtype) and not FUNCTIONAL_CALL_TRACEABLE:
            # dynamo before torch 2.6 captures the release's float16 forward (see test_torch_jit_script);
            # each leg compiles afresh (a cached graph would be the other leg's)
            missing_kernel_patched_and_unpatched(
                lambda: run(_fresh_compile(model, fullgraph=True, backend="eager"), patches, dtype))
            continue
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        assert bitwise_equal(run(compiled, patches, dtype), run(model, patches, dtype)), (name, dtype)
    torch._dynamo.reset()


class _OneConvTrunk(torch.nn.Module):
    # A SOSNet with a one-convolution trunk: inductor compiles the patched forward in seconds (the
    # full network takes ~40 s on 2 cores, and its fused half BatchNorm/ReLU chains round
    # differently from eager, which is inductor's business, not the fix's). The convolution is an
    # extern ATen call in inductor too, so both paths normalize the same descriptor.
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 128, kernel_size=32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_torch_compile_inductor_equals_eager(dtype):
    model = KF.SOSNet(pretrained=False)
    model.layers = _OneConvTrunk()
    model = model.to(dtype).eval()
    patches = [gen.uniform_patches(2, 4).float(), gen.degenerate_patches(0.0), gen.degenerate_patches(0.5)]
    patches = torch.cat(patches).to(dtype)
    if no_float16_network_kernel(dtype) and not FUNCTIONAL_CALL_TRACEABLE:
        # dynamo before torch 2.6 captures the release's float16 forward (see test_torch_jit_script)
        missing_kernel_patched_and_unpatched(lambda: _fresh_compile(model, fullgraph=True)(patches))
        torch._dynamo.reset()
        return
    torch._dynamo.reset()
    compiled = inductor_compile(model, fullgraph=True)
    with torch.no_grad():
        got, eager = compiled(patches), model(patches)
    torch._dynamo.reset()
    assert got.dtype == dtype and torch.isfinite(got).all()
    # Inductor's float32 normalization kernel may round differently: one ulp at the descriptor scale.
    torch.testing.assert_close(got, eager, rtol=0, atol=scale_ulp(dtype))


# --------------------------------------------------------------------------------------------
# Wrappers and the CLI demonstration


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_laf_descriptor_wrapping_each_descriptor(dtype):
    image = torch.full((1, 1, 64, 64), 0.5, dtype=dtype)
    lafs = torch.tensor([[[[8.0, 0.0, 32.0], [0.0, 8.0, 32.0]], [[6.0, 0.0, 20.0], [0.0, 6.0, 40.0]]]], dtype=dtype)
    names = gen.NETWORKS if dtype == torch.float16 else ("sosnet", "hynet_nobias")  # bfloat16: only these were broken
    descriptors = [network(name, "untrained") for name in names] + ([_sift()] if dtype == torch.float16 else [])
    for descriptor in descriptors:
        out = KF.LAFDescriptor(copy.deepcopy(descriptor), patch_size=32)(image, lafs)
        assert out.shape == (1, 2, 128) and out.dtype == dtype, type(descriptor).__name__
        assert torch.isfinite(out).all(), type(descriptor).__name__


@needs_old_kornia
def test_demonstration_shows_failure_then_finite():
    demo = feature_descriptors.FIX.demonstrate()
    assert demo.holds
    # half networks; float32 networks under float16 autocast (which torch 2.1's CPU autocast refuses)
    under_autocast = 5 if cpu_autocast_accepts(torch.float16) else 0
    assert len(demo.cases) == 8 + under_autocast
    assert sum("autocast" in what for what, _, _ in demo.cases) == under_autocast
    for what, before, after in demo.cases:
        assert "Error" in before or "NaN" in before, what
        assert after.startswith("finite"), what


@pytest.mark.skipif(
    os.environ.get("KORNIA_HALFPATCH_UPSTREAM_TESTS") is None,
    reason="opt-in (~60 s): set KORNIA_HALFPATCH_UPSTREAM_TESTS to kornia's repository at the installed tag",
)
@pytest.mark.slow
def test_kornia_own_descriptor_tests_pass_in_every_dtype():
    root = Path(os.environ["KORNIA_HALFPATCH_UPSTREAM_TESTS"])
    tests = root / "tests" if (root / "tests").is_dir() else root / "test"  # 0.7.0 calls it test/
    names = ("test_sosnet.py", "test_hynet.py", "test_hardnet.py", "test_siftdesc.py")
    files = [str(tests / "feature" / name) for name in names]
    result = run_python(
        f"""
        import os, sys, pytest
        os.chdir({str(root)!r})
        sys.exit(pytest.main({files!r} + ["-q", "--dtype", "float32,float16,bfloat16,float64", "--device", "cpu"]))
        """,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:]


# --------------------------------------------------------------------------------------------
# SIFT gradients in float16: the release's float32 gradient of a flat patch is 1e12-2e14 (its
# orientation guard's 1/eps), Inf once narrowed; the half path's orientation has derivative 0
# where the pixel gradient is 0, as 0.9.0's float32 gradient there (0).

import gen_half_cases as half_cases  # noqa: E402 - the 0.9.0 oracle's inputs

SIFT_GRADIENT_CASES = ["SIFTDescriptor", "DenseSIFTDescriptor"]


def _sift_gradient_case(name):
    factory, make_input = half_cases.gradient_cases()[name]
    return factory, make_input()


def _flat(name, tensor):
    """The flat patch(es) of the case's input, or their gradient: SIFTDescriptor's second patch,
    DenseSIFTDescriptor's whole image."""
    return tensor[1:] if name == "SIFTDescriptor" else tensor


@needs_old_kornia
@pytest.mark.parametrize("name", SIFT_GRADIENT_CASES)
def test_sift_float16_gradient_is_finite_and_0_9_0s_on_a_flat_patch(name):
    factory, x = _sift_gradient_case(name)
    with kornia_halfpatch.unpatched([FIX]):
        release = half_cases.input_gradient(factory(), x)  # the release's float32 gradient
    # The mechanism: narrowed to float16, the release's float32 gradient is Inf.
    assert _flat(name, release).abs().max().item() > torch.finfo(torch.float16).max
    expected = oracle.kornia090_outputs("half_cases")[f"grad/{name}"]
    got = half_cases.input_gradient(factory(), x.half())
    assert got.dtype == torch.float16 and bool(torch.isfinite(got).all())
    assert bitwise_equal(_flat(name, got), _flat(name, expected).half())  # 0.9.0's: 0
    if name == "SIFTDescriptor":  # the textured patch: the release's float32 gradient, narrowed
        assert bitwise_equal(got[:1], release[:1].half())


@needs_old_kornia
@pytest.mark.parametrize("name", SIFT_GRADIENT_CASES)
def test_sift_float32_forward_and_backward_are_bitwise_the_release(name):
    factory, flat = _sift_gradient_case(name)
    textured = torch.rand(flat.shape, generator=torch.Generator().manual_seed(5))
    for x in (flat, textured, flat.double()):
        with kornia_halfpatch.unpatched([FIX]):
            module = factory().to(x.dtype)
            expected = (module(x), half_cases.input_gradient(module, x))
        module = factory().to(x.dtype)
        got = (module(x), half_cases.input_gradient(module, x))
        assert all(bitwise_equal(g, e) for g, e in zip(got, expected))


@needs_old_kornia
@pytest.mark.parametrize("name", SIFT_GRADIENT_CASES)
def test_sift_float16_forward_and_textured_gradient_are_the_release_float32_narrowed(name):
    factory, flat = _sift_gradient_case(name)
    textured = torch.rand(flat.shape, generator=torch.Generator().manual_seed(6)).half()
    for x in (flat.half(), textured):
        with kornia_halfpatch.unpatched([FIX]):
            module = factory()
            expected = (module(x.float()), half_cases.input_gradient(module, x.float()))
        module = factory()
        got = (module(x), half_cases.input_gradient(module, x))
        assert bitwise_equal(got[0], expected[0].half())
        if x is textured:  # no pixel with a zero gradient: the release's derivative everywhere
            assert bitwise_equal(got[1], expected[1].half())
