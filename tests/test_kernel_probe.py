"""The kernel probe (kornia_halfpatch._kernels) and the torch_ops rows it gates, on the installed torch.

Every assertion is about this process's torch: its findings against calls of the op on other
(kornia-sized) inputs than the probe's, the rows installed exactly where a kernel is missing
(none of the new ones on torch 2.13; on torch 2.1 float16 padding, convolution, interpolation,
atan2, cumsum, topk, bmm/matmul, median), and each installed replacement's half result against
torch's float32 op on the widened inputs, narrowed once, computed here. Runs on any torch the
shim supports (2.1 through 2.13)."""

import pytest
import torch
import torch.nn.functional as F

import kornia_halfpatch
from kornia_halfpatch import _kernels, testing
from kornia_halfpatch._model import Verdict
from kornia_halfpatch.fixes import torch_ops
from support import UPSTREAM_FIXED, bitwise_equal

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")

HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _image(dtype, shape=(2, 3, 17, 19)):
    """Multiples of 1/64 in [0, 1): exact in float16, bfloat16 and float32, so the float32 call
    below computes on exactly the values the half call was given."""
    generator = torch.Generator().manual_seed(5)
    return (torch.randint(0, 64, shape, generator=generator) / 64).to(dtype)


# Other calls of each kernel than the probe's: kornia-sized inputs, other shapes and options.
REAL_CALLS = {
    "linalg_inv": lambda d: torch.linalg.inv(torch.eye(3).repeat(4, 1, 1).add(0.5).to(d)),
    "linalg_solve": lambda d: torch.linalg.solve(torch.eye(3).add(1.0).to(d), torch.ones(3, 2, dtype=d)),
    "linalg_svd": lambda d: torch.linalg.svd(_image(d, (4, 3, 3))),
    "linalg_eigh": lambda d: torch.linalg.eigh(torch.eye(4).add(1.0).to(d)),
    "linalg_eigvals": lambda d: torch.linalg.eigvals(torch.eye(4).add(1.0).to(d)),
    "linalg_qr": lambda d: torch.linalg.qr(_image(d, (2, 4, 3))),
    "linalg_det": lambda d: torch.linalg.det(_image(d, (5, 3, 3))),
    "linalg_matrix_rank": lambda d: torch.linalg.matrix_rank(_image(d, (4, 4))),
    "cdist": lambda d: torch.cdist(_image(d, (1, 5, 8)), _image(d, (1, 6, 8))),
    "avg_pool3d": lambda d: F.avg_pool3d(_image(d, (1, 2, 4, 6, 6)), 3, 1, 1),
    "fft_rfftn": lambda d: torch.fft.rfftn(_image(d, (1, 1, 8, 8)), dim=(-2, -1)),
    "replication_pad1d": lambda d: F.pad(_image(d, (2, 3, 9)), [2, 1], mode="replicate"),
    "replication_pad2d": lambda d: F.pad(_image(d), [2, 2, 1, 1], mode="replicate"),
    "replication_pad3d": lambda d: F.pad(_image(d, (1, 1, 3, 5, 5)), [1, 1, 1, 1, 1, 1], mode="replicate"),
    "reflection_pad1d": lambda d: F.pad(_image(d, (2, 3, 9)), [2, 1], mode="reflect"),
    "reflection_pad2d": lambda d: F.pad(_image(d), [2, 2, 1, 1], mode="reflect"),
    "reflection_pad3d": lambda d: F.pad(_image(d, (1, 1, 3, 5, 5)), [1, 1, 1, 1, 1, 1], mode="reflect"),
    "atan2": lambda d: torch.atan2(_image(d), _image(d) - 0.5),
    "cross": lambda d: _image(d, (2, 5, 3)).cross(_image(d, (2, 5, 3)).flip(0), dim=2),
    "dot": lambda d: _image(d, (7,)).dot(_image(d, (7,)).flip(0)),
    "prod": lambda d: _image(d, (2, 3, 5)).prod(dim=1),
    "cumsum": lambda d: _image(d).cumsum(2),
    "adaptive_max_pool3d": lambda d: F.adaptive_max_pool3d(_image(d, (1, 2, 3, 5, 5)), (1, 2, 2)),
    "addcdiv": lambda d: _image(d).addcdiv(_image(d), _image(d) + 1, value=-0.5),
    "median": lambda d: _image(d).median(dim=1),
    "eye": lambda d: torch.eye(4, 3, dtype=d),
    "softmax": lambda d: torch.softmax(_image(d), dim=1),
    "softmax_nonlast": lambda d: _image(d).softmax(dim=1),  # dice_loss's classes
    "log_softmax": lambda d: _image(d, (4, 3)).log_softmax(1),  # focal_loss on (B, C) logits
    "log_softmax_nonlast": lambda d: _image(d).log_softmax(1),  # focal_loss on (B, C, H, W) logits
    "topk": lambda d: _image(d, (5, 40)).topk(3, dim=1, largest=False),
    "bmm": lambda d: _image(d, (4, 3, 5)) @ _image(d, (4, 5, 2)),
    "mm": lambda d: _image(d, (7, 5)) @ _image(d, (5, 3)),
    "baddbmm": lambda d: torch.baddbmm(_image(d, (2, 3, 3)), _image(d, (2, 3, 4)), _image(d, (2, 4, 3))),
    "conv2d": lambda d: F.conv2d(_image(d), torch.ones(4, 3, 5, 5, dtype=d), padding=2, stride=2),
    "max_pool2d": lambda d: F.max_pool2d(_image(d), 3, 2, 1),
    "max_pool3d": lambda d: F.max_pool3d(_image(d, (1, 1, 4, 6, 6)), 3, 1, 1),
    "conv3d": lambda d: F.conv3d(_image(d, (1, 2, 4, 6, 6)), torch.ones(1, 2, 3, 3, 3, dtype=d)),
    "upsample_nearest2d": lambda d: F.interpolate(_image(d), size=(9, 31), mode="nearest"),
    "upsample_bilinear2d": lambda d: F.interpolate(_image(d), size=(9, 31), mode="bilinear", align_corners=True),
    "upsample_bicubic2d": lambda d: F.interpolate(_image(d), size=(9, 31), mode="bicubic", align_corners=False),
    "upsample_trilinear3d": lambda d: F.interpolate(_image(d, (1, 1, 3, 5, 5)), size=(4, 6, 7), mode="trilinear"),
    "adaptive_avg_pool2d": lambda d: F.interpolate(_image(d), size=(5, 7), mode="area"),
    "grid_sampler_2d": lambda d: torch.ops.aten.grid_sampler_2d(_image(d), _image(d, (2, 5, 5, 2)) * 2 - 1, 0, 0, False),
    "grid_sampler_3d": lambda d: torch.ops.aten.grid_sampler_3d(_image(d, (1, 1, 3, 5, 5)), _image(d, (1, 2, 2, 2, 3)) - 0.5,
                                                                 0, 0, False),
}


def test_every_kernel_has_a_real_call():
    assert set(REAL_CALLS) == set(_kernels.KERNELS)


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("kernel", sorted(_kernels.KERNELS))
def test_probe_finding_matches_the_op_on_other_inputs(kernel, dtype):
    REAL_CALLS[kernel](torch.float32)  # the float32 call works: else this test's input is wrong
    try:
        REAL_CALLS[kernel](HALF[dtype])
        raised = None
    except (RuntimeError, NotImplementedError) as error:
        raised = error
    assert (raised is not None) == (dtype in _kernels.missing(kernel)), (
        f"{kernel} in {dtype}: the probe says {'missing' if dtype in _kernels.missing(kernel) else 'present'}, "
        f"the call {'raised ' + str(raised).splitlines()[0] if raised else 'worked'}"
    )


def test_probe_runs_once_per_process():
    _kernels.missing("atan2")
    calls = []
    original = _kernels.KERNELS["atan2"]
    _kernels.KERNELS["atan2"] = lambda d: calls.append(d) or original(d)
    try:
        _kernels.findings()
    finally:
        _kernels.KERNELS["atan2"] = original
    assert calls == []


# --------------------------------------------------------------------------------------------
# The rows the probe gates: installed exactly where a kernel is missing, status says which


def _gated_targets():
    return [t for t in torch_ops.FIX.targets if t.gate is not None]


def _kernels_of(target):
    return torch_ops._kernels_of(target)


@pytest.mark.parametrize("target", _gated_targets(), ids=lambda t: t.candidates[0])
def test_gated_row_is_installed_exactly_where_a_kernel_is_missing(target):
    with testing.isolated(["torch_ops"]) as report:
        installed = {entry[1].candidates[0] for entry in testing.installed_targets()}
        rows = {row.target: row for row in report.fixes["torch_ops"].target_statuses}
    kernels = _kernels_of(target)
    assert kernels, f"{target.candidates[0]}: a gated row names its kernels"
    lacking = _kernels.lacking(kernels)
    row = next((rows[c] for c in target.candidates if c in rows), None)
    assert row is not None
    if row.verdict is Verdict.ABSENT:
        pytest.skip(f"{target.candidates[0]} is not in this release")
    if lacking:
        assert target.candidates[0] in installed
        assert row.verdict is Verdict.APPLIED
        assert f"needed: torch {torch.__version__} has no " in row.reason
        for name in kernels:
            if _kernels.missing(name):
                assert name in row.reason
    else:
        assert target.candidates[0] not in installed
        assert row.verdict is Verdict.NOT_NEEDED
        assert f"not needed: torch {torch.__version__} has " in row.reason


def test_ungated_rows_stand_on_every_torch():
    """The rows with a numerical reason beyond a kernel (the guided filter's cancellation, ZCA's
    float32 statistics, fundamental_from_projections' overflow) are not gated."""
    ungated = {t.candidates[0] for t in torch_ops.FIX.targets if t.gate is None}
    assert "kornia.filters.guided:_guided_blur_multichannel_guidance" in ungated
    assert "kornia.enhance.zca:zca_mean" in ungated
    assert "kornia.geometry.epipolar.fundamental:fundamental_from_projections" in ungated


def test_promoted_dtypes_are_exactly_those_without_a_kernel():
    for target in _gated_targets():
        row = target.row
        if row is not None:
            assert row.promoted_dtypes() == _kernels.lacking(row.kernels, row.half)


# --------------------------------------------------------------------------------------------
# Each op replaced for kornia on this torch: half = torch's float32 op on widened inputs,
# narrowed once; a dtype that has its kernel keeps torch's own op; TorchScript compiles it.

OP_CALLS = {
    "torch.nn.functional:pad": [
        (lambda op, d: op(_image(d), [2, 1, 1, 2], mode="replicate"), lambda d: F.pad(_image(d), [2, 1, 1, 2], mode="replicate")),
        (lambda op, d: op(_image(d), [1, 1, 2, 2], "reflect"), lambda d: F.pad(_image(d), [1, 1, 2, 2], mode="reflect")),
        (lambda op, d: op(_image(d, (1, 2, 3, 4, 4)), [1, 1, 1, 1, 1, 1], mode="replicate"),
         lambda d: F.pad(_image(d, (1, 2, 3, 4, 4)), [1, 1, 1, 1, 1, 1], mode="replicate")),
    ],
    "torch.nn.functional:conv3d": [
        (lambda op, d: op(_image(d, (1, 2, 4, 6, 6)), _image(d, (3, 2, 3, 3, 3)), None, [1, 1, 1], [1, 1, 1], [1, 1, 1], 1),
         lambda d: F.conv3d(_image(d, (1, 2, 4, 6, 6)), _image(d, (3, 2, 3, 3, 3)), padding=1)),
    ],
    "torch:atan2": [(lambda op, d: op(_image(d) - 0.5, _image(d) - 0.25), lambda d: torch.atan2(_image(d) - 0.5, _image(d) - 0.25))],
    "torch:cumsum": [(lambda op, d: op(_image(d), 3), lambda d: torch.cumsum(_image(d), 3))],
    "torch:topk": [(lambda op, d: op(_image(d, (6, 30)), 2, dim=1, largest=False),
                    lambda d: torch.topk(_image(d, (6, 30)), 2, dim=1, largest=False))],
    "torch:bmm": [(lambda op, d: op(_image(d, (4, 3, 5)), _image(d, (4, 5, 3))), lambda d: torch.bmm(_image(d, (4, 3, 5)), _image(d, (4, 5, 3))))],
    "torch:matmul": [(lambda op, d: op(_image(d, (4, 3, 5)), _image(d, (5, 2))), lambda d: torch.matmul(_image(d, (4, 3, 5)), _image(d, (5, 2))))],
    "torch.nn.functional:softmax": [(lambda op, d: op(_image(d), dim=-1), lambda d: F.softmax(_image(d), dim=-1))],
    "torch:eye": [(lambda op, d: op(3, dtype=d), lambda d: torch.eye(3, dtype=d)),
                  (lambda op, d: op(2, 4, dtype=d), lambda d: torch.eye(2, 4, dtype=d))],
    "torch.nn.functional:interpolate": [
        (lambda op, d: op(_image(d), size=(9, 31), mode="bilinear", align_corners=False),
         lambda d: F.interpolate(_image(d), size=(9, 31), mode="bilinear", align_corners=False)),
        (lambda op, d: op(_image(d), scale_factor=2.0, mode="bicubic", align_corners=True),
         lambda d: F.interpolate(_image(d), scale_factor=2.0, mode="bicubic", align_corners=True)),
        (lambda op, d: op(_image(d), size=(5, 6), mode="area"), lambda d: F.interpolate(_image(d), size=(5, 6), mode="area")),
    ],
}


def _as_tuple(out):
    return tuple(out) if isinstance(out, tuple) else (out,)


def _replacement(path):
    for _, target, _, replacement in testing.installed_targets():
        if target.candidates[0] == path:
            return replacement
    return None


def test_every_kernel_op_is_exercised():
    scoped = {t.candidates[0] for t in torch_ops.KERNEL_TARGETS} | {torch_ops.INTERPOLATE_ROW.candidates,
                                                                   torch_ops.SOFTMAX_ROW.candidates, "torch:eye"}
    assert scoped == set(OP_CALLS)


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("path", sorted(OP_CALLS))
def test_kornia_half_call_is_the_float32_op_narrowed_once(path, dtype):
    half = HALF[dtype]
    with testing.isolated(["torch_ops"]):
        replacement = _replacement(path)
        if replacement is None:
            target = next(t for t in torch_ops.FIX.targets if t.candidates[0] == path)
            assert not _kernels.lacking(_kernels_of(target)), f"{path} lacks a kernel here but is not installed"
            pytest.skip(f"{path}: torch {torch.__version__} has its half CPU kernels (row not needed)")
        for call, torch_call in OP_CALLS[path]:
            got = _as_tuple(call(replacement, half))
            if dtype in _kernels.lacking(_kernels_of(next(t for t in torch_ops.FIX.targets if t.candidates[0] == path))):
                # the oracle: torch's float32 op on the widened inputs, narrowed once
                expected = _as_tuple(torch_call(torch.float32))
                expected = tuple(e.to(half) if e.is_floating_point() else e for e in expected)
            else:
                expected = _as_tuple(torch_call(half))  # this dtype has its kernel: torch's own op
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert g.dtype == e.dtype and bitwise_equal(g, e)


def test_topk_keeps_the_named_result():
    with testing.isolated(["torch_ops"]):
        replacement = _replacement("torch:topk")
        if replacement is None:
            pytest.skip(f"torch {torch.__version__} has its half CPU topk kernels")
        out = replacement(_image(torch.float16, (3, 9)), 2, dim=1)
        assert out.indices.dtype == torch.int64 and out.values.dtype == torch.float16


@pytest.mark.parametrize("target", torch_ops.KERNEL_TARGETS, ids=lambda t: t.candidates[0])
def test_kernel_op_replacement_scripts(target):
    """Built on any torch (on 2.13 it widens nothing), the replacement compiles under
    TorchScript and agrees with eager: kornia functions that call it still script."""
    from kornia_halfpatch._engine import resolve
    from kornia_halfpatch._identity import give_identity

    found, _ = resolve(target)
    replacement = target.build(found[2])
    give_identity(replacement, found, target.scope)  # as the engine installs it
    scripted = torch.jit.script(replacement)
    example = OP_CALLS[target.candidates[0]][0]
    for dtype in (torch.float32, torch.float16):
        a, b = _as_tuple(example[0](replacement, dtype)), _as_tuple(example[0](scripted, dtype))
        for x, y in zip(a, b):
            assert bitwise_equal(x, y)


@pytest.mark.parametrize("dtype", list(HALF))
def test_kornia_filters_reach_the_replacements(dtype):
    """kornia's own half filters on this torch: each one runs (on torch 2.1 its float16 padding,
    convolution and interpolation have no kernel without the shim)."""
    import kornia

    half = HALF[dtype]
    with testing.isolated():
        image = _image(half)
        for out in (
            kornia.filters.box_blur(image, (3, 3)),
            kornia.filters.sobel(image),
            kornia.filters.median_blur(image, (3, 3)),
            kornia.enhance.integral_image(image),
            kornia.geometry.resize(image, (9, 11)),
            kornia.feature.harris_response(image),
        ):
            assert out.dtype == half and bool(torch.isfinite(out).all())


# (row, its public caller, the row function's own arguments for the same call). median_blur's row is
# not gated (its selection runs on every torch): tests/test_half_at_scale.py holds it.
METHOD_ROW_CALLS = [
    ("kornia.enhance.integral:integral_tensor", lambda k, x: k.enhance.integral.integral_tensor(x, (2, 3)),
     lambda x: (x, (2, 3))),
    ("kornia.filters.blur_pool:edge_aware_blur_pool2d", lambda k, x: k.filters.edge_aware_blur_pool2d(x, 3),
     lambda x: (x, 3)),
]


@pytest.mark.parametrize("path,call,arguments", METHOD_ROW_CALLS, ids=[c[0] for c in METHOD_ROW_CALLS])
@pytest.mark.parametrize("dtype", list(HALF))
def test_method_kernel_rows_are_the_float32_function_narrowed(path, call, arguments, dtype):
    import kornia

    half = HALF[dtype]
    target = next(t for t in torch_ops.FIX.targets if t.candidates[0] == path)
    image = _image(half)
    with testing.isolated(["torch_ops"]):
        installed = _replacement(path) is not None
        got = call(kornia, image)
        wide = call(kornia, image.float()).to(half)
    assert installed == bool(_kernels.lacking(_kernels_of(target)))
    if dtype in target.row.promoted_dtypes():
        with testing.isolated(()):
            with pytest.raises((RuntimeError, NotImplementedError)):
                call(kornia, image)  # the row stands in for a kernel this torch lacks
        assert bitwise_equal(got, wide)
    elif installed:
        # this dtype has its kernels: the replacement hands it to the release's own function
        with testing.isolated(["torch_ops"]):
            original = kornia_halfpatch.get_original(_replacement(path))
            assert original is not _replacement(path)
            native = original(*arguments(image))
        assert bitwise_equal(got, native)
    else:
        pytest.skip(f"{path}: torch {torch.__version__} has its {dtype} CPU kernels (row not needed)")


# --------------------------------------------------------------------------------------------
# Probes that run kornia in half find their own bug without the kernels they do not test for


def test_widening_mode_runs_ops_without_a_kernel_in_float32():
    lacking = [name for name in ("atan2", "bmm", "cumsum", "linalg_inv") if "float16" in _kernels.missing(name)]
    assert lacking, "linalg_inv has no float16 CPU kernel on every supported torch"
    x = _image(torch.float16, (3, 3)) + torch.eye(3, dtype=torch.float16)
    with _kernels.widening_missing_kernels():
        got = torch.linalg.inv(x)
        with pytest.raises(RuntimeError, match="must be batches of square matrices|square"):
            torch.linalg.inv(_image(torch.float16, (2, 3)))  # any other error is torch's own
    assert got.dtype == torch.float16 and bitwise_equal(got, torch.linalg.inv(x.float()).half())


@pytest.mark.parametrize("name", ["warp_sampling", "warp_geometry", "geometry_subpix"])
def test_probes_that_run_kornia_in_half_do_not_fail_on_other_kernels(name):
    with testing.isolated([name]) as report:
        status = report.fixes[name]
    assert status.verdict is not Verdict.FAILED, status.reason
