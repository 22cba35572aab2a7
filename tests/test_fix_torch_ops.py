"""torch_ops: kornia's calls of torch ops without a half CPU kernel, promoted.

The oracle is the installed release's float32 computation on the same (half-representable)
inputs, narrowed, computed in the same run with the fix reverted. Output dtypes are kornia
0.9.0's for the same call (docs/surface/no_half_kernel.md of the survey: the input's half dtype,
float32 for zca_mean's T and mean)."""

import contextlib

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import testing
from kornia_halfpatch._kernels import widening_missing_kernels
from kornia_halfpatch.fixes import torch_ops
import examples as inputs
from support import HALF_DTYPES, TORCH, UPSTREAM_FIXED, bitwise_equal, expect_missing_kernel_error, lacks_half_kernel

import kornia_call_sites

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
DTYPE_IDS = [str(d).replace("torch.", "") for d in HALF_DTYPES]

# --------------------------------------------------------------------------------------------
# Every call site found in the installed release's source is promoted, exempt with a reason, or
# a gap the doc names.

ROW_PATHS = {t.candidates[0] for t in torch_ops.FIX.targets}
# The enclosing function itself is a row, or the row is the public function that calls it.
COVERED_BY = {
    "kornia.geometry.epipolar.essential:null_to_Nister_solution": "kornia.geometry.epipolar.essential:find_essential",
    "kornia.geometry.epipolar.essential:_null_to_Nister_solution_script": "kornia.geometry.epipolar.essential:find_essential",
    # 0.7.1-0.7.3: the 5-point solver's ops in run_5point itself (not exported; find_essential calls it)
    "kornia.geometry.epipolar.essential:run_5point": "kornia.geometry.epipolar.essential:find_essential",
    "kornia.geometry.epipolar.fundamental:run_7point": "kornia.geometry.epipolar.fundamental:find_fundamental",
    "kornia.geometry.epipolar.fundamental:run_8point": "kornia.geometry.epipolar.fundamental:find_fundamental",
    "kornia.geometry.epipolar.fundamental:_nullspace_via_eigh": "kornia.geometry.epipolar.fundamental:find_fundamental",
}
HELPER = "kornia's own widening helper: casts half to float32 before the op"
EXEMPT = {
    "kornia.utils.helpers:_torch_inverse_cast": HELPER,
    "kornia.utils.helpers:_torch_solve_cast": HELPER,
    "kornia.utils.helpers:_torch_svd_cast": HELPER,
    "kornia.utils.helpers:_torch_linalg_svdvals": HELPER,
    "kornia.utils.helpers:safe_inverse_with_mask": HELPER,
    "kornia.utils.helpers:safe_solve_with_mask": HELPER,
    "kornia.core.utils:_torch_inverse_cast": HELPER,
    "kornia.core.utils:_torch_solve_cast": HELPER,
    "kornia.core.utils:_torch_svd_cast": HELPER,
    "kornia.core.utils:_torch_linalg_svdvals": HELPER,
    "kornia.core.utils:safe_inverse_with_mask": HELPER,
    "kornia.core.utils:safe_solve_with_mask": HELPER,
    "kornia.feature.aliked.aliked:_affine_from_cov": "casts half covariances to float32 before eigh (0.8.3)",
    "kornia.feature.matching:match_smnn": "cdist on the matched descriptors after _cdist (a row) built the distance matrix; "
    "reached in half only through _cdist's widened path",
    "kornia.geometry.calibration.pnp:solve_pnp_dlt": "refuses float16/bfloat16 with a dtype check before any op "
    "(every release and 0.9.0)",
    "kornia.geometry.liegroup.se2:Se2.inverse": "So2.inverse(), not Tensor.inverse (a Lie group object)",
    "kornia.geometry.liegroup.se3:Se3.inverse": "So3.inverse(), not Tensor.inverse (a Lie group object)",
    "kornia.geometry.pose:NamedPose.inverse": "Se3.inverse(), not Tensor.inverse (a Lie group object)",
}
# Reached through a kornia-scoped torch op target (module views), not a row of its function.
SCOPED_OP = {
    "kornia.tracking.planar_tracker:HomographyTracker.track_next_frame": "torch.inverse",
}
# Left out (docs/fixes/torch_ops.md says why).
GAPS = {}


@pytest.fixture(scope="module")
def sites():
    return kornia_call_sites.half_kernel_sites()


def test_every_call_site_is_promoted_or_exempt_with_a_reason(sites):
    assert sites, "the scan found no site: it is broken"
    unclassified = sorted(
        {f"{s.where} ({s.callee}, line {s.line})" for s in sites}
        - {f"{s.where} ({s.callee}, line {s.line})" for s in sites if s.where in ROW_PATHS | set(COVERED_BY) | set(EXEMPT) | set(GAPS) | set(SCOPED_OP)}
    )
    assert unclassified == []
    for caller in COVERED_BY.values():
        assert caller in ROW_PATHS


def test_every_row_of_a_site_in_this_release_is_installed(sites):
    with testing.isolated(only=["torch_ops"]) as report:
        installed = set(report.fixes["torch_ops"].targets)
    wanted = {s.where for s in sites if s.where in ROW_PATHS} | {COVERED_BY[s.where] for s in sites if s.where in COVERED_BY}
    assert wanted <= installed


def test_the_scan_sees_a_site_of_each_kind(sites):
    # The scan resolves module aliases and Tensor methods: one known site of each in every release.
    found = {(s.where, s.callee) for s in sites}
    assert ("kornia.feature.laf:ellipse_to_laf", "Tensor.inverse") in found
    assert ("kornia.geometry.subpix.spatial_soft_argmax:conv_soft_argmax3d", "F.avg_pool3d") in found
    assert ("kornia.filters.guided:_guided_blur_multichannel_guidance", "torch.linalg.solve") in found


# --------------------------------------------------------------------------------------------
# Public APIs (no_half_kernel.md's failing rows): patched half = release float32, narrowed


def _kornia():
    import kornia

    return kornia


def api_cases():
    K = _kornia()
    ep = K.geometry.epipolar
    cases = {
        "guided_blur 3-channel": lambda d: K.filters.guided_blur(*inputs.guided_multichannel(d)),
        "GuidedBlur 3-channel": lambda d: K.filters.GuidedBlur(5, 0.01)(*inputs.guided_multichannel(d)[:2]),
        "zca_whiten": lambda d: K.enhance.zca_whiten(*inputs.zca_input(d)),
        "zca_mean": lambda d: K.enhance.zca_mean(*inputs.zca_input(d))[:2],
        "ZCAWhitening fit+forward": lambda d: K.enhance.ZCAWhitening()(inputs.zca_input(d)[0], include_fit=True),
        "ellipse_to_laf": lambda d: K.feature.laf.ellipse_to_laf(*inputs.ellipses(d)),
        "match_nn": lambda d: K.feature.match_nn(*inputs.descriptor_pair(d)),
        "match_mnn": lambda d: K.feature.match_mnn(*inputs.descriptor_pair(d)),
        "match_snn": lambda d: K.feature.match_snn(*inputs.descriptor_pair(d)),
        "match_smnn": lambda d: K.feature.match_smnn(*inputs.descriptor_pair(d)),
        "DescriptorMatcher snn": lambda d: K.feature.DescriptorMatcher("snn", 0.9)(*inputs.descriptor_pair(d)),
        "conv_soft_argmax3d": lambda d: K.geometry.subpix.conv_soft_argmax3d(*inputs.soft_argmax_volume(d)),
        "ConvSoftArgmax3d": lambda d: K.geometry.subpix.ConvSoftArgmax3d()(*inputs.soft_argmax_volume(d)),
        "warp_perspective3d": lambda d: K.geometry.transform.warp_perspective3d(
            inputs.warp3d_call(d)[0], inputs.warp3d_call(d)[1], (4, 6, 6)),
        "find_homography_dlt": lambda d: K.geometry.homography.find_homography_dlt(*inputs.homography_points(d)),
        "find_homography_dlt_iterated": lambda d: K.geometry.homography.find_homography_dlt_iterated(
            *inputs.homography_points(d), torch.ones(1, 8, dtype=d)),
        "find_fundamental 7POINT": lambda d: ep.find_fundamental(*inputs.fundamental_points(d)),
        "find_fundamental 8POINT": lambda d: ep.find_fundamental(*_eight_points(d)),
        "fundamental_from_essential": lambda d: ep.fundamental_from_essential(*inputs.essential_and_intrinsics(d)),
        "fundamental_from_projections": lambda d: ep.fundamental_from_projections(*inputs.projection_pair(d)),
        "decompose_essential_matrix": lambda d: ep.decompose_essential_matrix(*inputs.essential_matrix(d)),
        "motion_from_essential": lambda d: ep.motion_from_essential(*inputs.essential_matrix(d)),
        "KRt_from_projection": lambda d: ep.KRt_from_projection(*inputs.projection_matrix(d)),
        "PinholeCamera.intrinsics_inverse": lambda d: inputs.pinhole_camera(d)[0].intrinsics_inverse(),
        "Homography.forward_inverse": lambda d: inputs.homography_module(d)[0].forward_inverse(),
        "Similarity.forward_inverse": lambda d: inputs.similarity_module(d)[0].forward_inverse(),
    }
    if hasattr(ep, "find_essential"):
        cases["find_essential"] = lambda d: ep.find_essential(*inputs.essential_points(d))
    if hasattr(K.geometry.epipolar, "numeric") and hasattr(ep.numeric, "matrix_cofactor_tensor"):
        cases["matrix_cofactor_tensor"] = lambda d: ep.numeric.matrix_cofactor_tensor(*inputs.square_matrices(d))
    if hasattr(K.filters, "fft_conv") or hasattr(K.filters.filter, "fft_conv"):
        cases["fft_conv"] = lambda d: K.filters.filter.fft_conv(*inputs.fft_conv_call(d))
    quaternion = K.geometry.quaternion
    if hasattr(quaternion, "average_quaternions"):
        cases["average_quaternions"] = lambda d: quaternion.average_quaternions(*inputs.quaternion_batch(d)).data
    return cases


def _eight_points(dtype):
    g = torch.Generator().manual_seed(37)
    X = torch.cat([torch.rand(1, 9, 2, generator=g) * 2 - 1, 2 + torch.rand(1, 9, 1, generator=g)], -1)
    x1, x2 = X[..., :2] / X[..., 2:], (X[..., :2] + torch.tensor([0.25, 0.0])) / X[..., 2:]
    return x1.bfloat16().to(dtype), x2.bfloat16().to(dtype), None, "8POINT"


# 0.9.0's output dtype per output where it is not the input's half dtype.
FLOAT32_OUTPUTS = {"zca_mean": (True, True)}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _oracle(case, name, dtype):
    """(the release's float32 outputs, the same narrowed to 0.9.0's output dtypes)."""
    with kornia_halfpatch.unpatched(["torch_ops"]):
        reference = _tensors(case(torch.float32))
    keep = FLOAT32_OUTPUTS.get(name, ())
    return reference, [
        t.to(dtype) if t.is_floating_point() and not (i < len(keep) and keep[i]) else t
        for i, t in enumerate(reference)
    ]


CASES = sorted(api_cases())


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", CASES)
def test_public_api_in_half_is_the_release_float32_narrowed(name, dtype):
    case = api_cases()[name]
    with testing.isolated(only=["torch_ops"]):
        reference, expected = _oracle(case, name, dtype)
        got = _tensors(case(dtype))
    assert len(got) == len(expected)
    for g, e, r in zip(got, expected, reference):
        assert g.dtype == e.dtype, name
        assert g.shape == e.shape, name
        if g.is_floating_point():
            # Non-finite only where the float32 path is (the inputs keep every value in range).
            assert bool((torch.isfinite(g) | ~torch.isfinite(r)).all()), name
            # Whole-function promotion: bitwise, except where kornia does half work before or after
            # the promoted function (a public wrapper): one half rounding step apart at most.
            if not bitwise_equal(g, e):
                torch.testing.assert_close(g.float(), e.float(), rtol=2 ** -6, atol=2 ** -6)
        else:
            assert torch.equal(g, e), name


@pytest.mark.parametrize("name", CASES)
def test_public_api_float32_is_bitwise_unchanged(name):
    case = api_cases()[name]
    with testing.isolated(only=["torch_ops"]):
        patched = _tensors(case(torch.float32))
        with kornia_halfpatch.unpatched(["torch_ops"]):
            unpatched = _tensors(case(torch.float32))
    assert all(bitwise_equal(a, b) for a, b in zip(patched, unpatched)) and len(patched) == len(unpatched)


def test_a_failing_call_fails_unpatched_and_works_patched():
    """The fix is what makes it work: ellipse_to_laf raises on half CPU input without it."""
    K = _kornia()
    with testing.isolated(only=()):
        with pytest.raises((RuntimeError, NotImplementedError)):
            K.feature.laf.ellipse_to_laf(*inputs.ellipses(torch.float16))
    with testing.isolated(only=["torch_ops"]):
        assert K.feature.laf.ellipse_to_laf(*inputs.ellipses(torch.float16)).dtype == torch.float16


# --------------------------------------------------------------------------------------------
# Hand-written method targets (no tensor parameter): float32 bitwise, half the float32 narrowed


def test_hand_written_targets_are_installed_where_present():
    with testing.isolated(only=["torch_ops"]):
        installed = {target.candidates[0] for name, target, _, _ in testing.installed_targets() if name == "torch_ops"}
    for target in torch_ops.METHOD_TARGETS:
        module, _, attribute = target.candidates[0].partition(":")
        try:
            import importlib

            owner = importlib.import_module(module)
            for part in attribute.split("."):
                owner = getattr(owner, part)
        except (ImportError, AttributeError):
            continue
        if target.gate is not None and not target.gate().needed:
            # gated on a half kernel this torch has (So2.log, Quaternion.__mul__ on torch >= 2.4)
            assert target.candidates[0] not in installed
            continue
        assert target.candidates[0] in installed


def test_script_holds_for_a_scriptable_row():
    """torch.jit.script of ellipse_to_laf (scriptable in every release) compiles the replacement."""
    K = _kornia()
    with testing.isolated(only=["torch_ops"]):
        function = K.feature.laf.ellipse_to_laf
        scripted = torch.jit.script(function)
        for dtype in HALF_DTYPES:
            assert bitwise_equal(scripted(*inputs.ellipses(dtype)), function(*inputs.ellipses(dtype)))


def test_zca_whitening_still_scripts_and_its_float32_is_unchanged():
    """ZCAWhitening scripts in every release (kornia tests it): its written-out forward must too."""
    K = _kornia()
    data = inputs.zca_input(torch.float32)[0]
    with testing.isolated(only=["torch_ops"]):
        module = K.enhance.ZCAWhitening().fit(data)
        scripted = torch.jit.script(module)
        patched = module(data)
        assert bitwise_equal(scripted(data), patched)
        with kornia_halfpatch.unpatched(["torch_ops"]):
            unpatched = K.enhance.ZCAWhitening().fit(data)(data)
    assert bitwise_equal(patched, unpatched)


def test_quaternion_products_in_float16():
    """A float16 quaternion product takes Tensor.cross (no float16 CPU kernel on torch 2.1): where
    the kernel is missing it is the release's product of the widened quaternions, narrowed,
    bitwise, and So3 composes and rotates through it; the unpatched release raises. Elsewhere
    the row is not installed. float32 bitwise unchanged."""
    from kornia.geometry.liegroup import So3
    from kornia.geometry.quaternion import Quaternion

    a = torch.tensor([[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0], [0.25, -0.75, 0.5, 0.125]])
    b = torch.tensor([[0.25, 0.75, -0.5, 0.125], [0.5, 0.5, 0.5, 0.5], [0.0, 0.5, 0.5, -0.5]])
    with testing.isolated(only=["torch_ops"]):
        got = (Quaternion(a.half()) * Quaternion(b.half())).data
        float32 = (Quaternion(a) * Quaternion(b)).data
        with kornia_halfpatch.unpatched(["torch_ops"]):
            wide = (Quaternion(a) * Quaternion(b)).data.half()
            assert bitwise_equal((Quaternion(a) * Quaternion(b)).data, float32)
            if lacks_half_kernel("cross", torch.float16):
                with expect_missing_kernel_error(match="cross"):
                    Quaternion(a.half()) * Quaternion(b.half())
            else:
                assert bitwise_equal(got, (Quaternion(a.half()) * Quaternion(b.half())).data)
        assert got.dtype == torch.float16
        if lacks_half_kernel("cross", torch.float16):
            assert bitwise_equal(got, wide)
        rotation = So3.exp(torch.tensor([[0.1, 0.2, 0.3]]).half())
        rotated = rotation * torch.tensor([[1.0, 2.0, 3.0]]).half()  # the rotation's own axis: unchanged
        torch.testing.assert_close(rotated.float(), torch.tensor([[1.0, 2.0, 3.0]]), atol=4e-3, rtol=4e-3)
        assert (rotation * rotation).q.data.dtype == torch.float16


def test_so2_log_in_float16():
    """A float16 rotation's angle is Tensor.atan2 of its ComplexHalf parts (no float16 CPU kernel
    on torch 2.1): where the kernel is missing, the log is the release's log of the widened
    rotation, narrowed, bitwise, and the unpatched release raises; elsewhere the row is not
    installed and the release's own float16 log runs. float32 bitwise unchanged. (Se2.log calls
    it, then a float16 matrix product: on torch 2.1 that still needs the bmm kernel.)"""
    from kornia.geometry.liegroup import So2

    theta = torch.tensor([0.5, 1.25, -2.0, 3.0])
    with testing.isolated(only=["torch_ops"]):
        rotation = So2.exp(theta.half())
        got = rotation.log()
        assert got.dtype == torch.float16
        with kornia_halfpatch.unpatched(["torch_ops"]):
            wide = So2(rotation.z.to(torch.complex64)).log().to(torch.float16)
            float32 = So2.exp(theta).log()
            if lacks_half_kernel("atan2", torch.float16):
                with expect_missing_kernel_error(match="atan2"):
                    rotation.log()
            else:
                assert bitwise_equal(got, rotation.log())  # not installed: the release's own
        if lacks_half_kernel("atan2", torch.float16):
            assert bitwise_equal(got, wide)
        torch.testing.assert_close(got.float(), theta, atol=4e-3, rtol=0)
        assert bitwise_equal(So2.exp(theta).log(), float32)


def _se3_parts(element):
    return element.so3.q.data, element.t.data


def _log_gradients(element):
    """The gradients of Se3.log's sum at the element's parameters; None where the log carries no
    gradient (0.8.3: the quaternion is no Parameter and the translation is read through .data)."""
    out = element.log()
    if not out.requires_grad:
        return None
    out.float().sum().backward()
    return [p.grad for p in element.parameters()]


def test_se3_exp_log_adjoint_in_float16():
    """Se3's exp, log and adjoint multiply 3x3 matrices with @ (bmm, no float16 CPU kernel on torch
    2.1). Where the kernel is missing: exp is the release's element of the widened vector, its
    quaternion and translation narrowed; log and adjoint the release's on the element's widened
    parameters, narrowed; bitwise, with gradients reaching the half parameters; the unpatched
    release raises. Elsewhere the targets are not installed and the release's own float16 runs.
    bfloat16 (which has the kernel) and float32 are the release's, bitwise."""
    from kornia.geometry.liegroup import Se3

    v = torch.tensor([[0.25, -0.5, 1.0, 0.125, 0.375, -0.25], [1.5, 0.75, -1.0, -0.5, 0.25, 0.625]])
    (element,) = inputs.se3_element(torch.float32)
    missing = lacks_half_kernel("bmm", torch.float16) or lacks_half_kernel("mm", torch.float16)
    with testing.isolated(only=["torch_ops"]):
        half = Se3.exp(v.half())
        via_instance = element.exp(v.half())  # a static method still: the instance is not bound
        (half_element,) = inputs.se3_element(torch.float16)
        log, adjoint = half_element.log(), half_element.adjoint()
        gradients = _log_gradients(half_element)
        patched32 = (Se3.exp(v), element.log(), element.adjoint())
        bfloat16 = (Se3.exp(v.bfloat16()), inputs.se3_element(torch.bfloat16)[0].log())
        with kornia_halfpatch.unpatched(["torch_ops"]):
            wide = Se3.exp(v)
            (wide_element,) = inputs.se3_element(torch.float32)
            wide_log = wide_element.log()
            wide_gradients = _log_gradients(wide_element)
            release32 = (Se3.exp(v), element.log(), element.adjoint())
            if lacks_half_kernel("eye", torch.bfloat16):
                # torch 2.1: the release builds V's identity in bfloat16 (torch_ops' eye target)
                with expect_missing_kernel_error(match="eye"):
                    Se3.exp(v.bfloat16())
                release_bfloat16 = None
            else:
                release_bfloat16 = (Se3.exp(v.bfloat16()), inputs.se3_element(torch.bfloat16)[0].log())
            if missing:
                for call in (lambda: Se3.exp(v.half()), half_element.log, half_element.adjoint):
                    with expect_missing_kernel_error(match="bmm|addmm"):
                        call()
            else:
                assert all(bitwise_equal(a, b) for a, b in zip(_se3_parts(half), _se3_parts(Se3.exp(v.half()))))
                assert bitwise_equal(log, half_element.log()) and bitwise_equal(adjoint, half_element.adjoint())
    assert all(p.dtype == torch.float16 for p in _se3_parts(half) + _se3_parts(via_instance))
    assert log.dtype == adjoint.dtype == torch.float16
    if missing:
        assert all(bitwise_equal(a, b.half()) for a, b in zip(_se3_parts(half), _se3_parts(wide)))
        assert all(bitwise_equal(a, b) for a, b in zip(_se3_parts(via_instance), _se3_parts(half)))
        assert bitwise_equal(log, wide_log.half()) and bitwise_equal(adjoint, wide_element.adjoint().half())
        # reached where the release's float32 log reaches (0.7.0: the quaternion; the translation
        # is read through .data)
        assert (gradients is None) == (wide_gradients is None)
        assert gradients is None or all(
            (g is None and w is None) or (g.dtype == torch.float16 and bitwise_equal(g, w.half()))
            for g, w in zip(gradients, wide_gradients))
    assert all(bitwise_equal(a, b) for a, b in zip(_se3_parts(patched32[0]), _se3_parts(release32[0])))
    assert bitwise_equal(patched32[1], release32[1]) and bitwise_equal(patched32[2], release32[2])
    assert all(p.dtype == torch.bfloat16 for p in _se3_parts(bfloat16[0]) + (bfloat16[1],))
    if release_bfloat16 is not None:
        assert all(bitwise_equal(a, b) for a, b in zip(_se3_parts(bfloat16[0]), _se3_parts(release_bfloat16[0])))
        assert bitwise_equal(bfloat16[1], release_bfloat16[1])


def test_hyperplane_through_three_points_in_float16():
    """The plane through three points takes the cross product of two edges (Tensor.cross, no
    float16 CPU kernel on torch 2.1): where it is missing, the release's plane through the widened
    points, normal and offset narrowed, bitwise (tensors or Vector3 points), and the unpatched
    release raises; elsewhere not installed. float32 and bfloat16 are the release's, bitwise."""
    from kornia.geometry.plane import Hyperplane
    from kornia.geometry.vector import Vector3

    p0 = torch.tensor([[0.0, 0.0, 1.0], [1.0, 2.0, 0.5]])
    p1 = torch.tensor([[1.0, 0.0, 1.25], [0.5, -1.0, 0.25]])
    p2 = torch.tensor([[0.0, 1.0, 0.75], [2.0, 0.5, 1.5]])

    def plane(dtype, wrap=lambda p: p):
        found = Hyperplane.through(*(wrap(p.to(dtype)) for p in (p0, p1, p2)))
        return found.normal.data, found.offset.data

    missing = lacks_half_kernel("cross", torch.float16)
    with testing.isolated(only=["torch_ops"]):
        half, half_vectors = plane(torch.float16), plane(torch.float16, Vector3)
        patched = {dtype: plane(dtype) for dtype in (torch.float32, torch.bfloat16)}
        with kornia_halfpatch.unpatched(["torch_ops"]):
            release = {dtype: plane(dtype) for dtype in (torch.float32, torch.bfloat16)}
            if missing:
                with expect_missing_kernel_error(match="cross"):
                    plane(torch.float16)
            else:
                assert all(bitwise_equal(a, b) for a, b in zip(half, plane(torch.float16)))
    assert all(t.dtype == torch.float16 for t in half + half_vectors)
    if missing:
        assert all(bitwise_equal(a, b.half()) for a, b in zip(half, release[torch.float32]))
        assert all(bitwise_equal(a, b) for a, b in zip(half_vectors, half))
    for dtype in patched:
        assert all(bitwise_equal(a, b) for a, b in zip(patched[dtype], release[dtype])), dtype


def test_registration_model_reset_in_half():
    """ImageRegistrator resets its Homography model with nn.init.eye_, which writes torch.eye in
    the parameter's dtype (no bfloat16 CPU kernel on torch 2.1): where it is missing, the identity
    is copied in, exactly, into the same parameter; the unpatched release raises. Elsewhere not
    installed."""
    from kornia.geometry.transform.image_registrator import Homography

    with testing.isolated(only=["torch_ops"]):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            (module,) = inputs.homography_module(dtype)
            parameter = module.model
            module.reset_model()
            assert module.model is parameter and parameter.requires_grad and parameter.dtype == dtype
            assert torch.equal(parameter.float(), torch.eye(3)), dtype
            with kornia_halfpatch.unpatched(["torch_ops"]):
                (module,) = inputs.homography_module(dtype)
                if lacks_half_kernel("eye", dtype):
                    with expect_missing_kernel_error(match="eye"):
                        module.reset_model()
                else:
                    module.reset_model()
                    assert torch.equal(module.model, parameter), dtype
    assert isinstance(Homography(), torch.nn.Module)


def test_so2_and_se2_inverse_in_float16():
    """float16 rotations are ComplexHalf (no CPU reciprocal): the inverse is the release's 1/z on
    the widened z, narrowed, bitwise; float32 bitwise unchanged. bfloat16 has no complex dtype:
    kornia fails before any op, as 0.9.0 refuses it (not tested here)."""
    from kornia.geometry.liegroup import Se2, So2

    theta = torch.tensor([0.5, 1.25, -2.0, 3.0])
    with testing.isolated(only=["torch_ops"]):
        rotation = So2.exp(theta.half())
        got = rotation.inverse().z
        with kornia_halfpatch.unpatched(["torch_ops"]):
            expected = So2(rotation.z.to(torch.complex64)).inverse().z.to(torch.complex32)
            float32 = So2.exp(theta).inverse().z
            se2_float32 = Se2.exp(torch.tensor([[0.5, 0.25, 1.0]])).inverse().matrix()
        assert got.dtype == torch.complex32
        assert torch.equal(torch.view_as_real(got.to(torch.complex64)), torch.view_as_real(expected.to(torch.complex64)))
        assert bitwise_equal(torch.view_as_real(So2.exp(theta).inverse().z), torch.view_as_real(float32))
        se2 = Se2.exp(torch.tensor([[0.5, 0.25, 1.0]]).half()).inverse().matrix()
        assert se2.dtype == torch.float16
        torch.testing.assert_close(se2.float(), se2_float32, atol=4e-3, rtol=4e-3)
        assert bitwise_equal(Se2.exp(torch.tensor([[0.5, 0.25, 1.0]])).inverse().matrix(), se2_float32)


# --------------------------------------------------------------------------------------------
# HomographyTracker: torch.inverse of its stored half homography, through the kornia-scoped target


class _FixedMatcher(torch.nn.Module):
    """A matcher that returns fixed correspondences and records the images it was given."""

    def __init__(self, keypoints0, keypoints1):
        super().__init__()
        self.keypoints0, self.keypoints1, self.seen = keypoints0, keypoints1, []

    def forward(self, data):
        self.seen.append(data["image1"])
        n = len(self.keypoints0)
        return {"keypoints0": self.keypoints0, "keypoints1": self.keypoints1,
                "batch_indexes": torch.zeros(n, dtype=torch.long)}


class _FixedRansac(torch.nn.Module):
    def __init__(self, homography):
        super().__init__()
        self.homography = homography

    def forward(self, keypoints0, keypoints1):
        return self.homography, torch.ones(len(keypoints0), dtype=torch.bool)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_homography_tracker_tracks_a_half_frame(dtype):
    from kornia.tracking import HomographyTracker

    g = torch.Generator().manual_seed(61)
    target, frame = torch.rand(1, 1, 32, 40, generator=g).to(dtype), torch.rand(1, 1, 32, 40, generator=g).to(dtype)
    H = torch.tensor([[1.0625, 0.03125, 2.0], [-0.03125, 0.9375, 1.0], [0.0, 0.0, 1.0]]).to(dtype)
    points = (torch.rand(40, 2, generator=g) * 30).round().to(dtype)
    fast = _FixedMatcher(points, points)
    tracker = HomographyTracker(_FixedMatcher(points, points), fast, _FixedRansac(H), minimum_inliers_num=10)
    tracker.set_target(target)
    tracker.previous_homography = H.clone()
    # torch < 2.6 has no half CPU grid_sample, so the release's half warp exists there only
    # through warp_sampling's float32 sampling (on in both runs below).
    only = ["torch_ops"] if TORCH >= (2, 6) else ["torch_ops", "warp_sampling"]
    if lacks_half_kernel("bmm", dtype):
        # torch 2.1 has no float16 CPU bmm: the release's half warp_perspective (normalize_homography's
        # matrix products) exists there only through kornia_dtypes' float32 normalisation (on in both runs).
        only.append("kornia_dtypes")
    with testing.isolated(only=only):
        homography, found = tracker.track_next_frame(frame)
        assert found and homography.dtype == dtype
        # The prewarp: the release's border margin on the stored homography, inverted in float32
        # and narrowed once, then the release's half warp (no other fix in either run).
        Hwarp = H.clone()[None]
        Hwarp[:, 0:2, 0:2] = Hwarp[:, 0:2, 0:2] / 0.8
        Hwarp[:, 0:2, 2] -= 10.0
        with kornia_halfpatch.unpatched(["torch_ops"]):
            # Looked up now: a binding taken before isolated() would be warp_geometry's float32 warp.
            import kornia.geometry.transform as transform

            warp_perspective = transform.warp_perspective
            # torch 2.1: the release's half warp also meets bmm (transform_points) without its
            # half kernel, which torch_ops' kernel row widens when applied: the oracle computes
            # that product the same way, in float32 narrowed once (a no-op where torch has it).
            no_bmm = widening_missing_kernels() if lacks_half_kernel("bmm", dtype) else contextlib.nullcontext()
            with no_bmm:
                expected = warp_perspective(frame, torch.inverse(Hwarp.float()).to(dtype), (32, 40))
            tracker.previous_homography = H.clone()
            with pytest.raises((RuntimeError, NotImplementedError)):  # torch refuses the half inverse
                tracker.track_next_frame(frame)
    assert bool((expected != 0).any())
    assert bitwise_equal(fast.seen[0], expected)


def test_kornia_scoped_torch_inverse_leaves_torch_and_full_precision_alone():
    import kornia.tracking.planar_tracker as planar_tracker

    real = torch.inverse
    with testing.isolated(only=["torch_ops"]):
        assert torch.inverse is real
        scoped = planar_tracker.torch.inverse
        assert scoped is not real and kornia_halfpatch.get_original(scoped) is real
        m = torch.eye(3) + 0.25 * torch.rand(4, 3, 3, generator=torch.Generator().manual_seed(62))
        for dtype in (torch.float32, torch.float64):
            assert bitwise_equal(scoped(m.to(dtype)), real(m.to(dtype)))
        for dtype in HALF_DTYPES:
            assert bitwise_equal(scoped(m.to(dtype)), real(m.to(dtype).float()).to(dtype))
        assert bitwise_equal(torch.jit.script(scoped)(m.half()), scoped(m.half()))
        kornia_halfpatch.revert(["torch_ops"])
        assert planar_tracker.torch is torch


def test_fundamental_from_pixel_scale_projections_is_finite_in_float16():
    """Cameras with a focal length of 500: the float32 F reaches ~1e7, Inf in float16 (kornia's own
    epipolar tests built their scene this way and got NaN). Patched: the float32 F divided by its
    largest entry, narrowed (F is defined up to scale; 0.9.0 scales it so); bfloat16, and float16
    within range, are the release's float32 F narrowed."""
    from kornia.geometry import epipolar

    K = torch.tensor([[500.0, 0.0, 320.0], [0.0, 500.0, 240.0], [0.0, 0.0, 1.0]])
    Rt2 = torch.tensor([[1.0, 0.0, 0.125, -1.0], [0.0, 1.0, 0.0, 0.25], [-0.125, 0.0, 1.0, 0.0]])
    P1 = (K @ torch.cat([torch.eye(3), torch.zeros(3, 1)], 1))[None]
    P2 = (K @ Rt2)[None]
    with testing.isolated(only=()):
        try:
            unpatched_finite = bool(torch.isfinite(epipolar.fundamental_from_projections(P1.half(), P2.half())).all())
        except (NotImplementedError, RuntimeError):  # 0.7.0: det has no half CPU kernel
            unpatched_finite = False
    with testing.isolated(only=["torch_ops"]):
        with kornia_halfpatch.unpatched(["torch_ops"]):
            reference = epipolar.fundamental_from_projections(P1.half().float(), P2.half().float())
            small_reference = epipolar.fundamental_from_projections(*(p.float() for p in inputs.projection_pair(torch.float16)))
        half = epipolar.fundamental_from_projections(P1.half(), P2.half())
        bfloat = epipolar.fundamental_from_projections(P1.bfloat16(), P2.bfloat16())
        with kornia_halfpatch.unpatched(["torch_ops"]):
            bfloat_reference = epipolar.fundamental_from_projections(P1.bfloat16().float(), P2.bfloat16().float())
        small = epipolar.fundamental_from_projections(*inputs.projection_pair(torch.float16))
    assert float(reference.abs().max()) > 65504
    assert not unpatched_finite
    assert half.dtype == torch.float16 and bool(torch.isfinite(half).all())
    assert bitwise_equal(half, (reference / reference.abs().amax(dim=(-2, -1), keepdim=True)).half())
    assert bitwise_equal(bfloat, bfloat_reference.bfloat16())
    assert bitwise_equal(small, small_reference.half())


# --------------------------------------------------------------------------------------------
# Found by kornia's own tests on torch 2.1.2 (kornia 0.7.0; tools/upstream_tests.py, issue 23):
# public functions that reach a kernel torch 2.1 lacks in float16 (softmax/log_softmax over the
# classes, the slow conv2d/conv3d, bmm/mm/dot through `@`) and work on torch 2.13. Each case:
# (kernels it needs, the call, whether the patched half result is bitwise the release's float32
# result narrowed: the whole public function is promoted, or half work surrounds the promoted
# part).


def _line(dtype):
    from kornia.geometry.line import ParametrizedLine

    return ParametrizedLine(torch.tensor([0.5, -0.25, 1.0]).to(dtype), torch.tensor([0.5, 0.0, 0.75]).to(dtype))


def _line_points(dtype):
    g = torch.Generator().manual_seed(94)
    t = torch.linspace(-1, 1, 9)[None, :, None]
    points = torch.tensor([[0.5, -0.25, 1.0]]) + t * torch.tensor([[0.6, 0.0, 0.8]]) + 0.05 * torch.rand(1, 9, 3, generator=g)
    return points.bfloat16().to(dtype)


def _segmentation(dtype, depth=None):
    """A two-class prediction (1, 2, [3,] 8, 8) in [0, 1] on bfloat16's grid and its (1, 1, ...) labels."""
    g = torch.Generator().manual_seed(95)
    shape = (8, 8) if depth is None else (depth, 8, 8)
    pred = torch.rand(1, 2, *shape, generator=g).bfloat16().to(dtype)
    return pred, (torch.rand(1, 1, *shape, generator=g) > 0.5).long()


def _auto_augment_matrix(dtype):
    """AutoAugment's transformation matrix (a product of the policy's matrices) for the params of
    a seeded float32 forward, as kornia's test_transform_mat asks for it after its forward."""
    aug, image, params = inputs.auto_augment_matrix_call(dtype)
    return aug.get_transformation_matrix(image, params=params)


def _registration(dtype):
    """ImageRegistrator('similarity') of an image onto its slightly scaled and shifted warp (two
    pyramid levels, 40 Adam steps each), as kornia's test_registration_toy: the final model and
    the intermediate ones."""
    from kornia.geometry.transform import ImageRegistrator

    g = torch.Generator().manual_seed(97)
    homography = torch.tensor([[[1.0625, 0.0, 0.125], [0.0, 1.0625, 0.0], [0.0, 0.0, 1.0]]])
    source = torch.rand(1, 3, 16, 18, generator=g)
    target = _kornia().geometry.homography_warp(source, homography, (16, 18), align_corners=False)
    registrator = ImageRegistrator("similarity", num_iterations=40, lr=3e-4, pyramid_levels=2).to("cpu", dtype)
    final, intermediate = registrator.register(source.bfloat16().to(dtype), target.bfloat16().to(dtype),
                                               output_intermediate_models=True)
    return (final, *intermediate, *(p.data for p in registrator.model.parameters()))


def _exact(example, dtype):
    # the example's tensors rounded to bfloat16's grid: the same values in float32 and float16
    return tuple(x.bfloat16().to(dtype) for x in example(torch.float32))


def _kornia_cases():
    K = _kornia()
    from kornia.geometry.liegroup import Se2

    conversions = K.geometry.conversions
    se2_vectors = torch.tensor([[0.25, -0.5, 0.75], [1.0, 0.5, -1.25]])
    cases = {
        "dice_loss": (("softmax_nonlast",), lambda d: K.losses.dice_loss(*inputs.class_logits(d)), True),
        "DiceLoss": (("softmax_nonlast",), lambda d: K.losses.DiceLoss()(*inputs.class_logits(d)), True),
        "focal_loss (B, C, H, W)": (("log_softmax_nonlast",), lambda d: K.losses.focal_loss(*inputs.focal_call(d)), True),
        "FocalLoss (B, C)": (("log_softmax",), lambda d: K.losses.FocalLoss(0.5, 2.0, "mean")(
            inputs.class_logits(d)[0][..., 0, 0], inputs.class_logits(d)[1][..., 0, 0]), True),
        "HausdorffERLoss": (("conv2d",), lambda d: K.losses.HausdorffERLoss()(*_segmentation(d)), False),
        "HausdorffERLoss3D": (("conv3d", "adaptive_max_pool3d"), lambda d: K.losses.HausdorffERLoss3D()(*_segmentation(d, depth=3)), False),
        "essential_from_Rt": (("bmm", "mm"), lambda d: K.geometry.epipolar.essential_from_Rt(*_exact(inputs.two_camera_poses, d)), True),
        "depth_from_point": (("bmm", "mm"), lambda d: K.geometry.epipolar.depth_from_point(*_exact(inputs.depth_call, d)), True),
        "camtoworld_graphics_to_vision_Rt": (("bmm", "mm"), lambda d: conversions.camtoworld_graphics_to_vision_Rt(
            *_exact(inputs.rigid_pose, d)), True),
        "camtoworld_vision_to_graphics_Rt": (("bmm", "mm"), lambda d: conversions.camtoworld_vision_to_graphics_Rt(
            *_exact(inputs.rigid_pose, d)), True),
        "camtoworld_to_worldtocam_Rt": (("bmm", "mm"), lambda d: conversions.camtoworld_to_worldtocam_Rt(
            *_exact(inputs.rigid_pose, d)), True),
        "worldtocam_to_camtoworld_Rt": (("bmm", "mm"), lambda d: conversions.worldtocam_to_camtoworld_Rt(
            *_exact(inputs.rigid_pose, d)), True),
        "tilt_projection": (("bmm", "mm"), lambda d: K.geometry.calibration.distort.tilt_projection(
            *inputs.tilt_angles(d)), True),
        "fit_line": (("bmm", "mm"), lambda d: tuple(p.data for p in K.geometry.line.fit_line(_line_points(d))), True),
        "ParametrizedLine.projection": (("dot", "mm", "bmm"), lambda d: _line(d).projection(
            torch.tensor([1.0, 2.0, 0.5]).to(d)), True),
        "ParametrizedLine.distance": (("dot", "mm", "bmm"), lambda d: _line(d).distance(
            torch.tensor([1.0, 2.0, 0.5]).to(d)), False),
        "Se2.log": (("bmm", "mm"), lambda d: Se2.exp(se2_vectors.to(d)).log(), False),
        "AutoAugment.get_transformation_matrix": (("bmm", "mm"), _auto_augment_matrix, True),
        "ImageRegistrator.register": (("addcdiv",), _registration, True),
    }
    if not hasattr(conversions, "camtoworld_graphics_to_vision_Rt"):  # 0.7.0's: present in every supported release
        cases = {k: v for k, v in cases.items() if "camtoworld" not in k and "worldtocam" not in k}
    return cases


OLD_TORCH_CASES = sorted(_kornia_cases())


@pytest.mark.parametrize("name", OLD_TORCH_CASES)
def test_old_torch_float16_kernel_gaps_of_kornias_own_tests(name):
    """On a torch without the float16 CPU kernel (torch 2.1) the unpatched release raises torch's
    missing-kernel error and the patched call returns float16: the release's float32 result on the
    same inputs narrowed once, bitwise where the whole public function is promoted (within half
    rounding where half work surrounds the promoted part: Se2.log's exp, the line's sqrt, the
    Hausdorff loss's half reduction). Where the kernel exists (torch 2.4+) the rows are not
    installed and the release's own float16 call runs: the test skips. float32 is bitwise the
    release's either way."""
    kernels, call, bitwise = _kornia_cases()[name]
    dtype = torch.float16
    missing = any(lacks_half_kernel(k, dtype) for k in kernels)
    # warp_sampling too: the registration samples with grid_sample (no float16 CPU kernel below torch 2.6)
    with testing.isolated(only=["torch_ops", "warp_sampling"]):
        got = _tensors(call(dtype))
        patched32 = _tensors(call(torch.float32))
        with kornia_halfpatch.unpatched(["torch_ops"]):
            release32 = _tensors(call(torch.float32))
            if missing:
                with expect_missing_kernel_error():
                    call(dtype)
            else:
                try:
                    native = _tensors(call(dtype))
                except RuntimeError:  # AutoAugment: the unpatched half forward fails on a dtype mismatch
                    native = None
    assert all(bitwise_equal(a, b) for a, b in zip(patched32, release32)) and len(patched32) == len(release32)
    if not missing:
        assert native is None or all(bitwise_equal(a, b) for a, b in zip(got, native))
        pytest.skip(f"torch {TORCH} has float16 CPU kernels for {', '.join(kernels)}: nothing installed")
    assert len(got) == len(release32)
    for g, r in zip(got, release32):
        assert g.dtype == (torch.float16 if r.is_floating_point() else r.dtype), name
        if bitwise:
            assert bitwise_equal(g, r.to(g.dtype)), name
        else:
            torch.testing.assert_close(g.float(), r.float(), atol=4e-3, rtol=4e-3)
