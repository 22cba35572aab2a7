"""networks_half: kornia's networks converted to float16/bfloat16 run in half, the steps that need
float32 in float32 (kornia_halfpatch/fixes/networks_half.py).

Oracle, computed in the same run on this machine: the same network on the same half-rounded
weights and inputs in float64 (``copy.deepcopy(net).double()``), and in float32. A half network
passes when its outputs have its dtype, are finite where float32's are, and their mean relative
error against float64 is at most 20x the error of rounding the float32 output once to the dtype
(the bound of the issue's census). Each network in both cpu_half modes: "native" (the release's half
kernels, what GPUs and CPUs with avx512_fp16/amx run) and "float32" (networks_cpu_half beside it).
float32 and float64 stay bit for bit the release's (patched against unpatched). The networks are
built small with seeded random weights (nothing is downloaded).
"""

import copy
import importlib

import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import _model, testing
from kornia_halfpatch._codegen import edited_function, source_edit_problem
from kornia_halfpatch._kernels import widening_missing_kernels
from kornia_halfpatch.sample_inputs import blob_image
from kornia_halfpatch.fixes import networks_half
from examples import dedode_detector as seeded_dedode_detector, small_rt_detr
from support import UPSTREAM_FIXED, bitwise_equal

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")

HALF = (torch.float16, torch.bfloat16)
MODES = ("native", "float32")


def _class(*references):
    for reference in references:
        module_name, _, name = reference.partition(":")
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):
            continue
    pytest.skip(f"not in kornia {kornia.__version__}: {references[0]}")


# --------------------------------------------------------------------------------------------
# The networks: (build() -> eval module with seeded random weights, inputs in float32, the output
# the census compares). A network whose output is a dict or tuple is wrapped to return one tensor.


class _Pick(torch.nn.Module):
    def __init__(self, net, call):
        super().__init__()
        self.net = net
        self.call = call

    def forward(self, *args):
        return self.call(self.net, *args)


def tiny_vit():
    TinyViT = _class("kornia.contrib.models.tiny_vit:TinyViT", "kornia.models.tiny_vit:TinyViT")
    torch.manual_seed(0)
    return TinyViT.from_config("5m", img_size=64).eval(), (blob_image((1, 3, 64, 64)),)


def defmo():
    DeFMO = _class("kornia.feature.defmo:DeFMO")
    torch.manual_seed(0)
    net = DeFMO(pretrained=False).eval()
    # 4 rendered time steps instead of 24 (the times attribute is what the row is about; a step's
    # 2049-channel convolution is most of the time)
    net.rendering.tsr_steps = 4
    net.rendering.times = torch.linspace(0, 1, 4)
    return net, (torch.cat([blob_image((1, 3, 16, 16)), blob_image((1, 3, 16, 16), 1)], 1),)


def lite_mla():
    LiteMLA = _class("kornia.contrib.models.efficient_vit.nn.ops:LiteMLA", "kornia.models.efficient_vit.nn.ops:LiteMLA")
    torch.manual_seed(0)
    return LiteMLA(16, 16, dim=8).eval(), (blob_image((1, 16, 16, 16)),)


def sam_prompt_encoder():
    PromptEncoder = _class(
        "kornia.contrib.models.sam.architecture.prompt_encoder:PromptEncoder",
        "kornia.models.sam.architecture.prompt_encoder:PromptEncoder",
    )
    torch.manual_seed(0)
    encoder = PromptEncoder(embed_dim=32, image_embedding_size=(16, 16), input_image_size=(64, 64), mask_in_chans=4)
    points = torch.tensor([[[10.0, 20.0], [40.5, 33.0], [60.0, 5.0]]])
    labels = torch.tensor([[1, 0, 1]])

    def call(net, points):
        sparse, dense = net((points, labels), None, None)
        return torch.cat([sparse.flatten(), dense.flatten(), net.get_dense_pe().flatten()])

    return _Pick(encoder.eval(), call), (points,)


def lightglue():
    LightGlue = _class("kornia.feature.lightglue:LightGlue")
    torch.manual_seed(0)
    net = LightGlue(features=None, n_layers=2, width_confidence=0.99, depth_confidence=-1, filter_threshold=0.0)
    generator = torch.Generator().manual_seed(5)
    points = 600  # above the CPU pruning threshold: the points are pruned (the index-put path)
    k0 = torch.rand(1, points, 2, generator=generator) * 60
    d0 = torch.nn.functional.normalize(torch.randn(1, points, 256, generator=generator), dim=-1)
    d1 = d0 + 0.01 * torch.randn(1, points, 256, generator=generator)
    size = torch.tensor([[64, 64]])

    def call(net, k0, k1, d0, d1):
        out = net({"image0": {"keypoints": k0, "descriptors": d0, "image_size": size},
                   "image1": {"keypoints": k1, "descriptors": d1, "image_size": size}})
        return torch.cat([out["log_assignment"].exp().flatten(), out["matching_scores0"].flatten()])

    return _Pick(net.eval(), call), (k0, k0 + 1, d0, d1)


def loftr():
    LoFTR = _class("kornia.feature.loftr:LoFTR")
    torch.manual_seed(0)
    net = LoFTR(pretrained=None).eval()
    image = blob_image((1, 1, 64, 64))

    def call(net, image0, image1):
        seen = {}
        hook = net.coarse_matching.register_forward_hook(lambda m, args, out: seen.update(conf=args[2]["conf_matrix"]))
        try:
            out = net({"image0": image0, "image1": image1})
        finally:
            hook.remove()
        if image0.dtype in HALF:
            assert out["confidence"].dtype == image0.dtype
        return seen["conf"].to(image0.dtype)  # the coarse confidence (narrowed by the network after the hook)

    return _Pick(net, call), (image, torch.roll(image, 3, -1))


def dedode_detector():
    _class("kornia.feature.dedode.dedode_models:get_detector")  # skips where the release has no DeDoDe
    return seeded_dedode_detector().eval(), (blob_image((1, 3, 32, 32)),)


def rt_detr():
    try:
        net = small_rt_detr()
    except LookupError:
        pytest.skip(f"no RT-DETR in kornia {kornia.__version__}")

    def call(net, image):
        out = net(image)
        boxes = out["boxes"] if isinstance(out, dict) else out[1]  # 0.7.0 returns a dict
        # The detections are a set: the decoder's top-k orders near-tied queries (random weights)
        # differently in each dtype, so they are compared in box order.
        order = (boxes[..., 0].double() * 1024 + boxes[..., 1].double()).argsort(dim=-1)
        return boxes.gather(1, order.unsqueeze(-1).expand(-1, -1, 4))

    return _Pick(net.eval(), call), (blob_image((1, 3, 64, 64)),)


def xfeat():
    XFeat = _class("kornia.feature.xfeat:XFeat")
    torch.manual_seed(0)

    def call(net, image):
        resized = net._preprocess_tensor(image)[0]
        return torch.cat([t.flatten() for t in net.net(resized)])  # dense descriptors, keypoint logits, reliability

    return _Pick(XFeat(top_k=64).eval(), call), (blob_image((1, 3, 64, 64)),)


NETWORKS = {
    "TinyViT": tiny_vit,
    "DeFMO": defmo,
    "EfficientViT LiteMLA": lite_mla,
    "SAM PromptEncoder": sam_prompt_encoder,
    "LightGlue": lightglue,
    "LoFTR": loftr,
    "DeDoDe detector": dedode_detector,
    "RT-DETR": rt_detr,
    "XFeat": xfeat,
}


# The row each network's test is about.
NETWORK_ROWS = {
    "TinyViT": "Attention.forward",
    "DeFMO": "RenderingDeFMO.forward",
    "EfficientViT LiteMLA": "LiteMLA.relu_linear_att",
    "SAM PromptEncoder": "PromptEncoder.forward",
    "LightGlue": "LightGlue._forward",
    "LoFTR": "LoFTR.forward",
    "DeDoDe detector": "DeDoDeDetector.forward",
    "RT-DETR": "TransformerDecoder.forward",
    "XFeat": "XFeat._preprocess_tensor",
}


# Networks whose half error without their row is another cause than this fix's (left to the release).
NOT_OURS_WITHOUT_ITS_ROW = {
    "RT-DETR": "kornia 0.7.0's decoder keeps its references as logits (no half sigmoid round trip, no row); "
               "its half boxes are off by its half anchors, as the release computes them",
}
# Networks whose half error has another cause than this fix's on some releases, even with their row.
NOT_OURS_WITH_ITS_ROW = {
    "RT-DETR": (lambda: kornia.__version__.startswith("0.7."),
                "kornia 0.7.1-0.7.3: the half boxes are off before the decoder (0.27 mean relative error against "
                "float64 with or without the decoder's row, measured on 0.7.1 with torch 2.2; 0.8.x: within the "
                "bound with it), left to the release"),
}


def row_applied(name):
    with testing.isolated(only=["networks_half"]) as report:
        return any(status.verdict is _model.Verdict.APPLIED and status.target.endswith(":" + NETWORK_ROWS[name])
                   for status in report.fixes["networks_half"].target_statuses)


def _cast(inputs, dtype):
    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)


def mean_relative_error(out, reference):
    out, reference = out.double(), reference.double()
    return ((out - reference).abs().mean() / reference.abs().mean()).item()


def copy_of(name, net, dtype):
    """The network ``name`` built afresh with ``net``'s weights, in ``dtype`` (some of kornia's
    networks do not deepcopy: DeDoDe keeps a dict_keys)."""
    fresh = NETWORKS[name]()[0]
    fresh.load_state_dict(net.state_dict())
    return fresh.to(dtype)


def half_check(name, dtype):
    """(half output, float32 output, its error against float64, the bound) on the same rounded
    weights and inputs."""
    net, inputs = NETWORKS[name]()
    half_net = net.to(dtype)
    half_inputs = _cast(inputs, dtype)
    with torch.no_grad():
        torch.manual_seed(3)
        # The network's own half ops that this torch has no half CPU kernel for (torch 2.1: float16
        # convolutions) run widened, as a newer torch would run them: what is tested is the fix.
        with widening_missing_kernels():
            out = half_net(*half_inputs)
        torch.manual_seed(3)
        reference32 = copy_of(name, half_net, torch.float32)(*_cast(half_inputs, torch.float32))
        torch.manual_seed(3)
        try:
            reference64 = copy_of(name, half_net, torch.float64)(*_cast(half_inputs, torch.float64))
        except RuntimeError:  # XFeat resizes in float32 whatever the network's dtype (0.9.0 too)
            reference64 = reference32.double()
    bound = 20 * max(mean_relative_error(reference32.to(dtype), reference64), torch.finfo(dtype).eps / 2)
    return out, reference32, mean_relative_error(out, reference64), bound


# Convolutional networks whose native half forward takes torch's slow path on a CPU without half
# arithmetic (float16 25-50x float32; bfloat16 without avx512_bf16: LoFTR 4.7 s against 0.11 s on
# AVX2): those run with the slow tests, one stack per release.
CONVOLUTIONAL = ("DeFMO", "DeDoDe detector", "LoFTR", "TinyViT", "XFeat")


def _cases():
    for name in NETWORKS:
        for mode in MODES:
            for dtype in HALF:
                slow = name in CONVOLUTIONAL and mode == "native"
                yield pytest.param(name, mode, dtype, id=f"{mode}-{name}-{dtype}",
                                   marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize(("name", "mode", "dtype"), list(_cases()))
def test_a_half_network_is_within_the_bound_of_float64(name, mode, dtype):
    with testing.isolated(only=["networks_half", "networks_cpu_half"], cpu_half=mode) as report:
        assert "networks_half" in report.applied, report.fixes["networks_half"].reason
        _within_the_bound(name, mode, dtype)


def _within_the_bound(name, shim, dtype):
    if name in NOT_OURS_WITHOUT_ITS_ROW and not row_applied(name):
        pytest.skip(NOT_OURS_WITHOUT_ITS_ROW[name])
    if name in NOT_OURS_WITH_ITS_ROW and NOT_OURS_WITH_ITS_ROW[name][0]():
        pytest.skip(NOT_OURS_WITH_ITS_ROW[name][1])
    out, reference32, error, bound = half_check(name, dtype)
    assert out.dtype == dtype
    assert torch.isfinite(out[torch.isfinite(reference32)]).all()
    assert error <= bound, f"{name} {dtype} ({shim}): error {error:.3g} > bound {bound:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_release_fails_or_is_beyond_the_bound_where_the_fix_acts(name):
    """The bug is there without the fix: every network here fails in half or exceeds the bound
    in one half dtype (native mode: the release's own half path)."""
    outcomes = []
    with testing.isolated(only=["networks_cpu_half"], cpu_half="native"):
        for dtype in HALF:
            try:
                _, _, error, bound = half_check(name, dtype)
            except (RuntimeError, IndexError) as exc:
                outcomes.append(f"{dtype}: {type(exc).__name__}")
                continue
            if error > bound:
                outcomes.append(f"{dtype}: error {error:.3g} > {bound:.3g}")
    if not outcomes:
        assert not row_applied(name), f"{name} runs in half within the bound without networks_half"
        pytest.skip(f"{name} runs in half in kornia {kornia.__version__}: its row is not installed here")


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=pytest.mark.slow)], ids=str)
@pytest.mark.parametrize("name", list(NETWORKS))
def test_full_precision_is_bitwise_the_release(name, dtype):
    net, inputs = NETWORKS[name]()
    net = net.to(dtype)
    inputs = _cast(inputs, dtype)
    with testing.isolated(only=()):
        torch.manual_seed(3)
        try:
            expected = net(*inputs)
        except RuntimeError as exc:  # LightGlue and SAM's prompt encoder fail in float64 in the release
            assert dtype == torch.float64, exc
            expected = None
    with testing.isolated(only=["networks_half"]):
        torch.manual_seed(3)
        try:
            out = net(*inputs)
        except RuntimeError:
            if expected is not None:
                raise
            pytest.skip(f"{name} fails in float64 in the release and with the shim")
    if expected is None:
        assert out.dtype == torch.float64 and torch.isfinite(out).all()  # runs now, in float64
    else:
        assert bitwise_equal(out, expected)


@pytest.mark.slow  # autocast's half convolutions: torch's slow path on a CPU without half arithmetic
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_loftr_under_autocast_is_within_the_bound_of_the_float32_call(dtype):
    from support import cpu_autocast_accepts

    if not cpu_autocast_accepts(dtype):
        pytest.skip(f"this torch's CPU autocast refuses {dtype}")
    net, inputs = loftr()
    with torch.no_grad():
        reference64 = copy_of("LoFTR", net, torch.float64)(*_cast(inputs, torch.float64))
        reference32 = net(*inputs)
        with testing.isolated(only=()), torch.autocast("cpu", dtype=dtype):
            release = net(*inputs)
        with testing.isolated(only=["networks_half"]), torch.autocast("cpu", dtype=dtype):
            out = net(*inputs)
    bound = 20 * mean_relative_error(reference32.to(dtype), reference64)
    assert mean_relative_error(out, reference64) <= bound
    assert mean_relative_error(out, reference64) < mean_relative_error(release, reference64)


def test_a_half_network_traces():
    net, inputs = tiny_vit()
    half_net = net.bfloat16()
    half_inputs = _cast(inputs, torch.bfloat16)
    with testing.isolated(only=["networks_half"], cpu_half="native"), torch.no_grad():
        traced = torch.jit.trace(half_net, half_inputs, check_trace=False)
        assert bitwise_equal(traced(*half_inputs), half_net(*half_inputs))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["TinyViT", "LightGlue", "LoFTR"])
def test_a_compiled_half_network_is_the_eager_one(name):
    net, inputs = NETWORKS[name]()
    dtype = torch.bfloat16
    half_net = net.to(dtype)
    half_inputs = _cast(inputs, dtype)
    torch._dynamo.reset()
    try:
        with testing.isolated(only=["networks_half"], cpu_half="native"), torch.no_grad():
            eager = half_net(*half_inputs)
            # dynamo traces the edited code (and AOT autograd its graphs); inductor's code generation
            # adds minutes per network (TinyViT: 137 s on torch 2.1) and nothing about the edits
            compiled = torch.compile(half_net, backend="aot_eager")
            out = compiled(*half_inputs)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), eager.float(), rtol=0.02, atol=0.02)
    finally:
        torch._dynamo.reset()


# --------------------------------------------------------------------------------------------
# The mechanism: EditSource


def test_an_edit_missing_from_the_source_is_named_and_leaves_the_row_out():
    LoFTR = _class("kornia.feature.loftr:LoFTR")
    problem = source_edit_problem(LoFTR.forward, (("no such line", "x"),))
    assert problem is not None and "'no such line' not found" in problem
    fix = _model.Fix(
        name="edit_missing",
        targets=(_model.EditSource("kornia.feature.loftr:LoFTR.forward", "test", edits=(("no such line", "x"),)),),
    )
    with testing.use_fixes([fix]):
        report = kornia_halfpatch.apply()
        statuses = report.fixes["edit_missing"].target_statuses
    assert statuses[0].verdict is _model.Verdict.UNSUPPORTED
    assert LoFTR.forward is _class("kornia.feature.loftr:LoFTR").forward  # nothing installed


def test_an_edited_method_keeps_its_closure_and_the_releases_globals():
    LoFTR = _class("kornia.feature.loftr:LoFTR")
    edits = networks_half.TABLE[[row.candidates for row in networks_half.TABLE].index(
        "kornia.feature.loftr.loftr:LoFTR.forward")].edits
    if source_edit_problem(LoFTR.forward, edits) is not None:
        pytest.skip("this release's LoFTR.forward is written otherwise")
    edited = edited_function(LoFTR.forward, edits, helpers={
        "_halfpatch_loftr_coarse": networks_half._halfpatch_loftr_coarse,
        "_halfpatch_coarse_matching": networks_half._halfpatch_coarse_matching,
    })
    assert edited.__globals__ is LoFTR.forward.__globals__
    assert edited.__qualname__ == LoFTR.forward.__qualname__
    assert "_halfpatch_loftr_coarse" in edited.__code__.co_freevars
    import inspect

    assert "_halfpatch_loftr_coarse(" in inspect.getsource(edited)  # TorchScript reads this
