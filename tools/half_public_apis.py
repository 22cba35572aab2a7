"""Run public kornia APIs that reach the no-half-kernel call sites, in float16 and bfloat16 on CPU.

    python tools/half_public_apis.py --out RESULTS.jsonl [--no-shim] [--timeout 60]
    python tools/half_public_apis.py --render RESULTS_a.jsonl=0.7.0 ... --oracle RESULTS_090.jsonl \\
        --sites CALL_SITES.json --markdown OUT.md

Run the first form with the python of each tox environment (the kornia under test is the
installed one). By default the shim is applied first (``kornia_halfpatch.apply()`` from this
repository), so the result is "kornia + current shim". Every case runs in float32 first (it must
work there: otherwise the case itself is wrong and is reported as such), then in float16 and
bfloat16, each with small inputs built in float32 and narrowed. A case that hangs (the float16
depthwise-convolution hang of oneDNN on avx512_fp16 CPUs is one known way) is killed after
``--timeout`` seconds and recorded as a hang; the worker restarts after it.

Per case and dtype: ``ok`` with the output dtypes, or the exception's first line, its class
(``no-kernel`` when torch has no half CPU kernel: "not implemented for 'Half'/'BFloat16'",
"Low precision dtypes not supported", "Unsupported dtype", "doesn't handle types other than
float and double", ...; ``error`` otherwise) and the innermost kornia frame. ``--render`` joins
the releases, maps each failing frame to the call site found by tools/half_call_sites.py, and
adds kornia 0.9.0's output dtypes for the same call.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NO_KERNEL = re.compile(r"not implemented for '(Complex)?(Half|BFloat16)'|Expected both inputs to be Half, Float or Double|Low precision dtypes not supported|Unsupported dtype (Half|BFloat16)|"
                       r"doesn't handle types other than float and double|expected a tensor with 2 or more dimensions of float|"
                       r"input tensor must be either float or double|MKL FFT doesn't support")


# ----------------------------------------------------------------------------------------------
# the cases: name -> (public API path, builder(kornia, torch, dtype) -> output)


def _rot(torch, angle=0.3, axis=(0.2, 1.0, 0.1)):
    axis = torch.tensor(axis)
    axis = axis / axis.norm()
    k = torch.tensor([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return torch.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


def _scene(torch, n=12):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 3, generator=g) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])
    K = torch.tensor([[100.0, 0.0, 32.0], [0.0, 100.0, 24.0], [0.0, 0.0, 1.0]])
    R, t = _rot(torch), torch.tensor([0.5, 0.1, 0.05])
    x1 = (K @ X.T).T
    x1 = x1[:, :2] / x1[:, 2:]
    X2 = (R @ X.T).T + t
    x2 = (K @ X2.T).T
    x2 = x2[:, :2] / x2[:, 2:]
    tx = torch.tensor([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    E = tx @ R
    return {"X": X[None], "K": K[None], "R": R[None], "t": t[None, :, None], "x1": x1[None], "x2": x2[None], "E": E[None],
            "F": (torch.linalg.inv(K).T @ E @ torch.linalg.inv(K))[None]}


def _img(torch, dtype, shape=(1, 3, 16, 16), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g).to(dtype)


def _laf(torch, dtype, n=2):
    laf = torch.tensor([[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]]).expand(1, n, 2, 3).clone()
    return laf.to(dtype)


def _desc(torch, dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 8, generator=g).to(dtype)


def _get(kornia, path):
    import importlib
    obj = kornia
    parts = path.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part):
            try:  # submodules that `import kornia` does not import (kornia.sensors.camera...)
                importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                pass
        obj = getattr(obj, part)
    return obj


def build_cases():
    C = {}

    def case(name, api):
        def register(fn):
            C[name] = (api, fn)
            return fn
        return register

    @case("guided_blur, 3-channel guidance", "kornia.filters.guided_blur")
    def _(k, torch, d):
        return k.filters.guided_blur(_img(torch, d, seed=1), _img(torch, d, seed=2), 3, 0.1)

    @case("GuidedBlur, 3-channel guidance", "kornia.filters.GuidedBlur")
    def _(k, torch, d):
        return k.filters.GuidedBlur(3, 0.1)(_img(torch, d, seed=1), _img(torch, d, seed=2))

    @case("guided_blur, 1-channel guidance", "kornia.filters.guided_blur")
    def _(k, torch, d):
        return k.filters.guided_blur(_img(torch, d, (1, 1, 16, 16), seed=1), _img(torch, d, seed=2), 3, 0.1)

    @case("fft_conv (0.8.3)", "kornia.filters.fft_conv")
    def _(k, torch, d):
        kernel = torch.ones(1, 5, 5).div(25).to(d)
        return k.filters.fft_conv(_img(torch, d), kernel)

    @case("zca_whiten", "kornia.enhance.zca_whiten")
    def _(k, torch, d):
        return k.enhance.zca_whiten(_img(torch, d, (20, 3)))

    @case("zca_mean", "kornia.enhance.zca_mean")
    def _(k, torch, d):
        return k.enhance.zca_mean(_img(torch, d, (20, 3)))

    @case("ZCAWhitening.fit + forward", "kornia.enhance.ZCAWhitening")
    def _(k, torch, d):
        x = _img(torch, d, (20, 3))
        return k.enhance.ZCAWhitening().fit(x)(x)

    @case("ellipse_to_laf", "kornia.feature.ellipse_to_laf")
    def _(k, torch, d):
        ells = torch.tensor([[[16.0, 15.0, 0.04, 0.01, 0.03]]]).to(d)
        return k.feature.ellipse_to_laf(ells)

    @case("LAFAffineShapeEstimator", "kornia.feature.LAFAffineShapeEstimator")
    def _(k, torch, d):
        return k.feature.LAFAffineShapeEstimator(patch_size=19).to(d)(_laf(torch, d), _img(torch, d, (1, 1, 32, 32)))

    @case("PatchAffineShapeEstimator", "kornia.feature.PatchAffineShapeEstimator")
    def _(k, torch, d):
        return k.feature.PatchAffineShapeEstimator(19).to(d)(_img(torch, d, (2, 1, 19, 19)))

    for name in ("match_nn", "match_mnn", "match_snn", "match_smnn"):
        @case(f"{name}, 5 vs 6 descriptors", f"kornia.feature.{name}")
        def _(k, torch, d, name=name):
            fn = getattr(k.feature, name)
            args = (_desc(torch, d, 5, 1), _desc(torch, d, 6, 2))
            return fn(*args) if name in ("match_nn", "match_mnn") else fn(*args, 0.95)

        @case(f"{name}, 40 vs 40 descriptors", f"kornia.feature.{name}")
        def _(k, torch, d, name=name):
            fn = getattr(k.feature, name)
            args = (_desc(torch, d, 40, 1), _desc(torch, d, 40, 2))
            return fn(*args) if name in ("match_nn", "match_mnn") else fn(*args, 0.95)

    @case("match_fginn, 5 vs 6 descriptors", "kornia.feature.match_fginn")
    def _(k, torch, d):
        lafs1 = k.feature.laf_from_center_scale_ori(torch.rand(1, 5, 2) * 30, torch.ones(1, 5, 1, 1) * 3).to(d)
        lafs2 = k.feature.laf_from_center_scale_ori(torch.rand(1, 6, 2) * 30, torch.ones(1, 6, 1, 1) * 3).to(d)
        return k.feature.match_fginn(_desc(torch, d, 5, 1), _desc(torch, d, 6, 2), lafs1, lafs2, 0.95)

    @case("DescriptorMatcher('snn'), 5 vs 6", "kornia.feature.DescriptorMatcher")
    def _(k, torch, d):
        return k.feature.DescriptorMatcher("snn", 0.95)(_desc(torch, d, 5, 1), _desc(torch, d, 6, 2))

    @case("conv_soft_argmax3d", "kornia.geometry.subpix.conv_soft_argmax3d")
    def _(k, torch, d):
        return k.geometry.subpix.conv_soft_argmax3d(_img(torch, d, (1, 1, 3, 8, 8)))

    @case("ConvSoftArgmax3d", "kornia.geometry.subpix.ConvSoftArgmax3d")
    def _(k, torch, d):
        return k.geometry.subpix.ConvSoftArgmax3d()(_img(torch, d, (1, 1, 3, 8, 8)))

    @case("ConvQuadInterp3d", "kornia.geometry.subpix.ConvQuadInterp3d")
    def _(k, torch, d):
        return k.geometry.subpix.ConvQuadInterp3d()(_img(torch, d, (1, 1, 3, 8, 8)))

    @case("ScaleSpaceDetector(num_features=8), 64x64", "kornia.feature.ScaleSpaceDetector")
    def _(k, torch, d):
        return k.feature.ScaleSpaceDetector(num_features=8).to(d)(_img(torch, d, (1, 1, 64, 64)))

    @case("SIFTFeature(num_features=8), 64x64", "kornia.feature.SIFTFeature")
    def _(k, torch, d):
        return k.feature.SIFTFeature(num_features=8).to(d)(_img(torch, d, (1, 1, 64, 64)))

    @case("SOSNet (random weights)", "kornia.feature.SOSNet")
    def _(k, torch, d):
        return k.feature.SOSNet(pretrained=False).to(d).eval()(_img(torch, d, (2, 1, 32, 32)))

    @case("HyNet (random weights)", "kornia.feature.HyNet")
    def _(k, torch, d):
        return k.feature.HyNet(pretrained=False).to(d).eval()(_img(torch, d, (2, 1, 32, 32)))

    @case("warp_perspective3d", "kornia.geometry.transform.warp_perspective3d")
    def _(k, torch, d):
        M = torch.eye(4)[None]
        M[0, 0, 3] = 0.5
        return k.geometry.transform.warp_perspective3d(_img(torch, d, (1, 1, 4, 8, 8)), M.to(d), (4, 8, 8))

    @case("warp_affine3d", "kornia.geometry.transform.warp_affine3d")
    def _(k, torch, d):
        M = torch.eye(4)[None, :3]
        M[0, 0, 3] = 0.5
        return k.geometry.transform.warp_affine3d(_img(torch, d, (1, 1, 4, 8, 8)), M.to(d), (4, 8, 8))

    @case("get_perspective_transform3d", "kornia.geometry.transform.get_perspective_transform3d")
    def _(k, torch, d):
        src = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]]])
        return k.geometry.transform.get_perspective_transform3d(src.to(d), (src * 1.1 + 0.05).to(d))

    @case("get_perspective_transform", "kornia.geometry.transform.get_perspective_transform")
    def _(k, torch, d):
        src = torch.tensor([[[0.0, 0], [10, 0], [10, 10], [0, 10]]])
        return k.geometry.transform.get_perspective_transform(src.to(d), (src * 1.1 + 0.5).to(d))

    @case("get_tps_transform", "kornia.geometry.transform.get_tps_transform")
    def _(k, torch, d):
        src = torch.tensor([[[-1.0, -1], [-1, 1], [1, -1], [1, 1], [0, 0]]])
        return k.geometry.transform.get_tps_transform(src.to(d), (src * 0.9).to(d))

    @case("Homography().forward_inverse()", "kornia.geometry.transform.image_registrator.Homography")
    def _(k, torch, d):
        return k.geometry.transform.image_registrator.Homography().to(d).forward_inverse()

    @case("Similarity().forward_inverse()", "kornia.geometry.transform.image_registrator.Similarity")
    def _(k, torch, d):
        return k.geometry.transform.image_registrator.Similarity().to(d).forward_inverse()

    @case("find_homography_dlt", "kornia.geometry.homography.find_homography_dlt")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.homography.find_homography_dlt(s["x1"][:, :8].to(d), s["x2"][:, :8].to(d), torch.ones(1, 8).to(d))

    @case("find_homography_dlt_iterated", "kornia.geometry.homography.find_homography_dlt_iterated")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.homography.find_homography_dlt_iterated(s["x1"][:, :8].to(d), s["x2"][:, :8].to(d), torch.ones(1, 8).to(d), 3)

    @case("find_homography_lines_dlt", "kornia.geometry.homography.find_homography_lines_dlt")
    def _(k, torch, d):
        s = _scene(torch)
        lines1 = torch.stack([s["x1"][:, :6], s["x1"][:, 6:12]], dim=2)
        lines2 = torch.stack([s["x2"][:, :6], s["x2"][:, 6:12]], dim=2)
        return k.geometry.homography.find_homography_lines_dlt(lines1.to(d), lines2.to(d))

    @case("RANSAC('homography')", "kornia.geometry.ransac.RANSAC")
    def _(k, torch, d):
        torch.manual_seed(0)
        s = _scene(torch)
        return k.geometry.ransac.RANSAC("homography", max_iter=2)(s["x1"][0].to(d), s["x2"][0].to(d))

    @case("find_fundamental (8POINT)", "kornia.geometry.epipolar.find_fundamental")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.find_fundamental(s["x1"].to(d), s["x2"].to(d), torch.ones(1, 12).to(d))

    @case("find_fundamental (7POINT)", "kornia.geometry.epipolar.find_fundamental")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.find_fundamental(s["x1"][:, :7].to(d), s["x2"][:, :7].to(d), torch.ones(1, 7).to(d), method="7POINT")

    @case("find_essential (5-point)", "kornia.geometry.epipolar.find_essential")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.find_essential(s["x1"][:, :5].to(d), s["x2"][:, :5].to(d), torch.ones(1, 5).to(d))

    @case("fundamental_from_essential", "kornia.geometry.epipolar.fundamental_from_essential")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.fundamental_from_essential(s["E"].to(d), s["K"].to(d), s["K"].to(d))

    @case("fundamental_from_projections", "kornia.geometry.epipolar.fundamental_from_projections")
    def _(k, torch, d):
        s = _scene(torch)
        P1 = s["K"] @ torch.eye(3, 4)[None]
        P2 = s["K"] @ torch.cat([s["R"], s["t"]], -1)
        return k.geometry.epipolar.fundamental_from_projections(P1.to(d), P2.to(d))

    @case("essential_from_fundamental", "kornia.geometry.epipolar.essential_from_fundamental")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.essential_from_fundamental(s["F"].to(d), s["K"].to(d), s["K"].to(d))

    @case("decompose_essential_matrix", "kornia.geometry.epipolar.decompose_essential_matrix")
    def _(k, torch, d):
        return k.geometry.epipolar.decompose_essential_matrix(_scene(torch)["E"].to(d))

    @case("motion_from_essential", "kornia.geometry.epipolar.motion_from_essential")
    def _(k, torch, d):
        return k.geometry.epipolar.motion_from_essential(_scene(torch)["E"].to(d))

    @case("motion_from_essential_choose_solution", "kornia.geometry.epipolar.motion_from_essential_choose_solution")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.motion_from_essential_choose_solution(s["E"].to(d), s["K"].to(d), s["K"].to(d), s["x1"].to(d), s["x2"].to(d))

    @case("triangulate_points", "kornia.geometry.epipolar.triangulate_points")
    def _(k, torch, d):
        s = _scene(torch)
        P1 = s["K"] @ torch.eye(3, 4)[None]
        P2 = s["K"] @ torch.cat([s["R"], s["t"]], -1)
        return k.geometry.epipolar.triangulate_points(P1.to(d), P2.to(d), s["x1"].to(d), s["x2"].to(d))

    @case("KRt_from_projection", "kornia.geometry.epipolar.KRt_from_projection")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.epipolar.KRt_from_projection((s["K"] @ torch.cat([s["R"], s["t"]], -1)).to(d))

    @case("projections_from_fundamental", "kornia.geometry.epipolar.projections_from_fundamental")
    def _(k, torch, d):
        return k.geometry.epipolar.projections_from_fundamental(_scene(torch)["F"].to(d))

    @case("solve_pnp_dlt", "kornia.geometry.calibration.solve_pnp_dlt")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.calibration.solve_pnp_dlt(s["X"].to(d), s["x1"].to(d), s["K"].to(d))

    @case("undistort_points", "kornia.geometry.calibration.undistort_points")
    def _(k, torch, d):
        s = _scene(torch)
        return k.geometry.calibration.undistort_points(s["x1"].to(d), s["K"].to(d), torch.tensor([[0.01, 0.001, 0.0, 0.0]]).to(d))

    @case("PinholeCamera.intrinsics_inverse / unproject", "kornia.geometry.camera.PinholeCamera")
    def _(k, torch, d):
        s = _scene(torch)
        K4 = torch.eye(4)[None]
        K4[:, :3, :3] = s["K"]
        cam = k.geometry.camera.PinholeCamera(K4.to(d), torch.eye(4)[None].to(d), torch.tensor([48.0]).to(d), torch.tensor([64.0]).to(d))
        return cam.intrinsics_inverse(), cam.unproject(s["x1"][0].to(d), torch.ones(12, 1).to(d) * 5)

    @case("average_quaternions", "kornia.geometry.quaternion.average_quaternions")
    def _(k, torch, d):
        q = k.geometry.quaternion.Quaternion(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0]]).to(d))
        return k.geometry.quaternion.average_quaternions(q).data

    @case("So2.exp(theta).inverse().matrix()", "kornia.geometry.liegroup.So2")
    def _(k, torch, d):
        return k.geometry.liegroup.So2.exp(torch.tensor([0.3, 1.2]).to(d)).inverse().matrix()

    @case("Se2.exp(v).inverse().matrix()", "kornia.geometry.liegroup.Se2")
    def _(k, torch, d):
        return k.geometry.liegroup.Se2.exp(torch.tensor([[0.3, 1.0, 0.5]]).to(d)).inverse().matrix()

    @case("So3.exp(v).inverse().matrix()", "kornia.geometry.liegroup.So3")
    def _(k, torch, d):
        return k.geometry.liegroup.So3.exp(torch.tensor([[0.3, 0.2, 0.1]]).to(d)).inverse().matrix()

    @case("matrix_cofactor_tensor", "kornia.geometry.epipolar.numeric.matrix_cofactor_tensor")
    def _(k, torch, d):
        return _get(k, "kornia.geometry.epipolar.numeric.matrix_cofactor_tensor")(_scene(torch)["K"].to(d))

    @case("Z1Projection.project", "kornia.sensors.camera.projection_model.Z1Projection")
    def _(k, torch, d):
        points = _get(k, "kornia.geometry.vector.Vector3")(torch.tensor([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]).to(d))
        return _get(k, "kornia.sensors.camera.projection_model.Z1Projection")().project(points).data

    @case("normalize_homography", "kornia.geometry.conversions.normalize_homography")
    def _(k, torch, d):
        return k.geometry.conversions.normalize_homography(torch.eye(3)[None].to(d), (8, 8), (8, 8))

    @case("fit_plane", "kornia.geometry.plane.fit_plane")
    def _(k, torch, d):
        plane = k.geometry.plane.fit_plane(_scene(torch)["X"].to(d))
        return plane.normal, plane.offset

    @case("fit_line", "kornia.geometry.line.fit_line")
    def _(k, torch, d):
        return k.geometry.line.fit_line(_scene(torch)["X"].to(d)).direction

    @case("RandomMixUpV2 (Beta sampling)", "kornia.augmentation.RandomMixUpV2")
    def _(k, torch, d):
        torch.manual_seed(0)
        return k.augmentation.RandomMixUpV2(p=1.0)(_img(torch, d, (2, 3, 8, 8)), torch.tensor([0, 1]))

    @case("RandomCutMixV2 (Beta sampling)", "kornia.augmentation.RandomCutMixV2")
    def _(k, torch, d):
        torch.manual_seed(0)
        return k.augmentation.RandomCutMixV2(p=1.0)(_img(torch, d, (2, 3, 8, 8)), torch.tensor([0, 1]))

    @case("RandomMosaic", "kornia.augmentation.RandomMosaic")
    def _(k, torch, d):
        torch.manual_seed(0)
        return k.augmentation.RandomMosaic((8, 8), p=1.0)(_img(torch, d, (2, 3, 8, 8)))

    @case("RandomPerspective (float16 accepted)", "kornia.augmentation.RandomPerspective")
    def _(k, torch, d):
        torch.manual_seed(0)
        return k.augmentation.RandomPerspective(p=1.0)(_img(torch, d, (1, 3, 8, 8)))

    return C


# ----------------------------------------------------------------------------------------------
# worker


def _dtypes_of(out):
    if out is None:
        return []
    if hasattr(out, "dtype") and hasattr(out, "shape"):
        return [str(out.dtype).replace("torch.", "")]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [d for item in out for d in _dtypes_of(item)]
    for attr in ("data", "matrix"):
        if hasattr(out, attr):
            try:
                return _dtypes_of(getattr(out, attr)() if callable(getattr(out, attr)) else getattr(out, attr))
            except Exception:  # noqa: BLE001
                return [type(out).__name__]
    return [type(out).__name__]


def _finite(out):
    import torch
    if hasattr(out, "dtype") and hasattr(out, "shape"):
        return bool(torch.isfinite(out).all()) if out.is_floating_point() else True
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return all(_finite(o) for o in out)
    return True


def _kornia_frame(tb):
    frames = [f for f in traceback.extract_tb(tb) if "/kornia/" in f.filename and "kornia_halfpatch" not in f.filename
              and not f.filename.endswith("kornia/core/check.py")]  # the caller of KORNIA_CHECK says which check
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.split('/kornia/', 1)[1]}:{f.lineno} ({f.name})"


def worker(out_path: str, start: int, shim: bool) -> None:
    if shim:
        sys.path.insert(0, str(REPO))
        import kornia_halfpatch
        kornia_halfpatch.apply()
    import torch
    import kornia
    torch.set_num_threads(1)
    cases = list(build_cases().items())
    with open(out_path, "a") as out:
        def write(entry):
            out.write(json.dumps(entry) + "\n")
            out.flush()
        if start == 0:
            applied = list(kornia_halfpatch.status().applied) if shim else []
            write({"event": "session", "kornia": kornia.__version__, "torch": torch.__version__, "shim": shim, "applied": applied})
        for index in range(start, len(cases)):
            name, (api, fn) = cases[index]
            try:
                _get(kornia, api)
            except AttributeError:
                write({"event": "case", "index": index, "case": name, "api": api, "dtype": "all", "status": "absent"})
                continue
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                label = str(dtype).replace("torch.", "")
                write({"event": "start", "index": index, "case": name, "dtype": label})
                entry = {"event": "case", "index": index, "case": name, "api": api, "dtype": label}
                try:
                    with torch.no_grad():
                        result = fn(kornia, torch, dtype)
                    entry.update(status="ok", out_dtypes=_dtypes_of(result), finite=_finite(result))
                except Exception as error:  # noqa: BLE001 - the error is the measurement
                    text = str(error).strip()
                    # TorchScript wraps the real error: keep the line that names the missing kernel
                    line = next((l.strip() for l in text.splitlines() if NO_KERNEL.search(l)), text.splitlines()[0] if text else "")
                    message = f"{type(error).__name__}: {line}"[:300]
                    entry.update(status="no-kernel" if NO_KERNEL.search(str(error)) else "error", error=message,
                                 frame=_kornia_frame(error.__traceback__))
                write(entry)


def drive(out: Path, shim: bool, timeout: float) -> None:
    out = out.resolve()
    if out.exists():
        out.unlink()
    start = 0
    while True:
        process = subprocess.Popen([sys.executable, "-W", "ignore", __file__, "--worker", str(out), str(start)] + (["--no-shim"] if not shim else []),
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
        last_size, last_change = -1, time.monotonic()
        while process.poll() is None:
            time.sleep(1.0)
            size = out.stat().st_size if out.exists() else 0
            if size != last_size:
                last_size, last_change = size, time.monotonic()
            elif time.monotonic() - last_change > timeout:
                process.kill()
                process.wait()
                break
        entries = [json.loads(line) for line in open(out)]
        done = {(e["index"], e["dtype"]) for e in entries if e["event"] == "case"}
        starts = [e for e in entries if e["event"] == "start" and (e["index"], e["dtype"]) not in done]
        if not starts:
            return
        victim = starts[-1]
        with open(out, "a") as handle:
            handle.write(json.dumps({"event": "case", "index": victim["index"], "case": victim["case"], "api": "", "dtype": victim["dtype"],
                                     "status": "hang" if process.returncode in (-9,) else "crash",
                                     "error": f"process killed after {timeout:g} s without progress" if process.returncode == -9
                                     else f"process died (return code {process.returncode})"}) + "\n")
        start = victim["index"] + 1  # the other dtypes of the dead case are not retried


# ----------------------------------------------------------------------------------------------
# rendering


def _load(path):
    entries = [json.loads(line) for line in open(path)]
    session = next((e for e in entries if e["event"] == "session"), {})
    cases = collections.OrderedDict()
    for e in entries:
        if e["event"] == "case":
            cases.setdefault(e["case"], {})[e["dtype"]] = e
    return session, cases


def _site_for(frame: str, sites: dict, release: str):
    if not frame or release not in sites:
        return ""
    path, _, rest = frame.partition(":")
    line = int(rest.split(" ")[0])
    module = "kornia." + path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    for s in sites[release]["sites"]:
        if s["module"] == module and s["line"] == line:
            return f"`{s['op']}` at `{module}:{s['function']}` line {line}"
    return ""


# case-name prefix -> proposal (W = promote the kornia function wholesale: widen inputs, call the
# release's function, narrow each output to the dtype 0.9.0 returns; O = promote the torch op for
# kornia's calls only, through the engine's kornia-scoped module views). Judged from the source of
# each release and the measured 0.9.0 dtypes.
PROPOSALS = {
    "guided_blur": "W `kornia.filters.guided:guided_blur` (GuidedBlur.forward calls the module global). "
                   "O on `torch.linalg.solve` would leave the box-filtered variances (cancellation) in half.",
    "GuidedBlur": "covered by W `guided_blur`",
    "fft_conv": "W `kornia.filters.filter:fft_conv` (0.8.3); rfftn/irfftn have no half kernel at all",
    "zca_mean": "W `zca_mean` with outputs kept in float32 (0.9.0 returns float32 T, mean for half input)",
    "zca_whiten": "W `zca_whiten` (half output, as 0.9.0)",
    "ZCAWhitening": "W `ZCAWhitening.fit` (statistics in float32) and `forward`; half output as 0.9.0",
    "ellipse_to_laf": "W `kornia.feature.laf:ellipse_to_laf` (half output, as 0.9.0); LAFAffineShapeEstimator reaches it "
                      "through the module global",
    "LAFAffineShapeEstimator": "covered by W `ellipse_to_laf`",
    "match_": "O: replace the private `kornia.feature.matching:_cdist` (every matcher calls it) by a widening one; "
              "distances narrowed to the descriptors' dtype (0.9.0). Changes half results above 25 descriptors too "
              "(float32 cdist instead of torch's half matmul path): more accurate, document it",
    "DescriptorMatcher": "covered by `_cdist`",
    "conv_soft_argmax3d": "W `conv_soft_argmax3d` (3 `F.avg_pool3d` calls and a softmax-like normalisation whose "
                          "sum is better in float32); O on `F.avg_pool3d` for kornia's calls would also work",
    "ConvSoftArgmax3d": "covered by W `conv_soft_argmax3d` (forward calls the module global)",
    "ScaleSpaceDetector": "covered by `conv_soft_argmax3d`; output dtypes (float32 responses, half LAFs in 0.9.0) are kornia_dtypes'",
    "warp_perspective3d": "W (warp_geometry promotes every warp wholesale: coordinates in float32); the `linalg.inv` in "
                          "`_transform_warp_impl3d` then runs in float32",
    "Homography()": "W the method `Homography.forward_inverse` (inverse of the half parameter in float32, narrowed)",
    "Similarity()": "W the method `Similarity.forward_inverse`",
    "find_homography_dlt": "0.7.0 only: W `find_homography_dlt` (its `transform2.inverse()`); find_homography_dlt_iterated "
                           "and RANSAC reach it through module globals",
    "RANSAC": "covered by W `find_homography_dlt` (0.7.0)",
    "find_fundamental": "W `find_fundamental` and `run_7point` (0.7.x-0.8.2: `linalg.det`; 0.8.3: also `run_8point`'s "
                        "TorchScript-compiled eigh helper, which only a wholesale wrapper outside the script can fix)",
    "find_essential": "W `find_essential` (float32 5-point solver narrowed); beyond 0.9.0, whose half result is "
                      "non-finite on this input",
    "fundamental_from_essential": "0.7.0 only: W (K.inverse())",
    "fundamental_from_projections": "W for every release: 0.7.0 has no kernel, 0.7.4-0.8.3 give non-finite float16 "
                                    "(9 determinants of 4x4 products overflow); 0.9.0 finite",
    "decompose_essential_matrix": "W (beyond 0.9.0, which fails the same way); half outputs",
    "motion_from_essential": "W, or covered by W `decompose_essential_matrix` through the module global (beyond 0.9.0)",
    "KRt_from_projection": "W (linalg.qr, inverse/solve); beyond 0.9.0, which fails the same way",
    "PinholeCamera": "W the method `PinholeCamera.intrinsics_inverse` (unproject calls it)",
    "average_quaternions": "W `average_quaternions` (0.8.2; eigh)",
    "So2.exp": "float16: W `So2.inverse` (1/z of a ComplexHalf in complex64, narrowed); bfloat16: no complex "
               "bfloat16 dtype exists, 0.9.0 refuses it with a clear TypeError: leave it, say so",
    "Se2.exp": "covered by `So2.inverse` (float16); bfloat16 as So2",
    "matrix_cofactor_tensor": "W (0.7.4+; torch.det and linalg.inv)",
    "solve_pnp_dlt": "not a kernel failure: a dtype check refuses half in every release and in 0.9.0 (kornia_dtypes' "
                     "dtype-refused class); W would make it work beyond 0.9.0",
    "RandomMixUpV2": "not a kernel failure (Beta parameters are drawn in float32): float16 'Index put' dtype mismatch, "
                     "bfloat16 refused: augmentation_pipeline's",
    "RandomCutMixV2": "not a kernel failure: bfloat16 refused (augmentation_pipeline's)",
    "RandomMosaic": "not a kernel failure: bfloat16 refused (augmentation_pipeline's)",
    "RandomPerspective": "not a kernel failure: bfloat16 refused (augmentation_pipeline's)",
    "Z1Projection": "W the method `Z1Projection.project` (0.7.0-0.8.2; diag(z).inverse())",
}


def render(runs: list, oracle: str | None, sites_path: str | None, markdown: Path) -> None:
    sites = json.load(open(sites_path)) if sites_path else {}
    loaded = [(label, *_load(path)) for path, label in runs]
    oracle_cases = _load(oracle)[1] if oracle else {}
    names = list(dict.fromkeys(n for _, _, cases in loaded for n in cases))
    lines = ["# Public APIs that reach a torch op without a half CPU kernel", "",
             "Generated by `tools/half_public_apis.py` (small inputs, CPU, torch 2.13, inside `torch.no_grad()`), "
             "each release's tox environment **with the current shim applied** "
             "(" + "; ".join(f"{label}: applied {', '.join(s.get('applied', [])) or 'nothing'}" for label, s, _ in loaded) + "). "
             "Every case works in float32 (else it is marked). Cells: `ok` (output dtypes; `non-finite` if any output value is NaN/Inf), "
             "`NO KERNEL` (torch has no half CPU kernel), `error` (another exception), `hang`, `absent` (not in that release). "
             "The last column is kornia 0.9.0's result for the same call (black box, no shim).", ""]
    # distinct cases per release whose float16 or bfloat16 call fails, by class
    lines += ["## Cases failing in half, per release", "",
              "Distinct cases (of " + str(len(names)) + ") whose float16 or bfloat16 call fails; a case counts once per class.", "",
              "| class | " + " | ".join(label for label, _, _ in loaded) + " | 0.9.0 |", "|---|" + "---|" * (len(loaded) + 1)]
    def per_class(cases):
        found = collections.defaultdict(set)
        for name, entries in cases.items():
            for dtype in ("float16", "bfloat16"):
                e = entries.get(dtype)
                if e is None:
                    continue
                if e["status"] == "ok" and not e.get("finite", True):
                    found["ok but non-finite"].add(name)
                elif e["status"] not in ("ok", "absent"):
                    found[{"no-kernel": "no half kernel", "error": "other error"}.get(e["status"], e["status"])].add(name)
        return found
    tables = [per_class(cases) for _, _, cases in loaded] + [per_class(oracle_cases)]
    for cls in ("no half kernel", "other error", "hang", "crash", "ok but non-finite"):
        if any(t.get(cls) for t in tables):
            lines.append(f"| {cls} | " + " | ".join(str(len(t.get(cls, ()))) for t in tables) + " |")
    lines += ["", "## Every case", ""]
    header = "| case | dtype | " + " | ".join(label for label, _, _ in loaded) + " | 0.9.0 |"
    lines += [header, "|---|---|" + "---|" * (len(loaded) + 1)]
    failing = collections.defaultdict(list)

    def cell(entry):
        if entry is None:
            return ""
        status = entry["status"]
        if status == "ok":
            dts = entry.get("out_dtypes", [])
            short = ",".join(dts) if len(dts) <= 4 else ",".join(sorted(set(dts), key=dts.index)) + f" ({len(dts)} outputs)"
            return f"ok ({short})" + ("" if entry.get("finite", True) else " **non-finite**")
        if status == "no-kernel":
            return "**NO KERNEL**"
        return status

    for name in names:
        for dtype in ("float32", "float16", "bfloat16"):
            row = []
            for label, _, cases in loaded:
                entries = cases.get(name, {})
                entry = entries.get(dtype) or entries.get("all")
                row.append(cell(entry))
                if entry is not None and entry["status"] not in ("ok", "absent") and dtype != "float32":
                    failing[label].append((name, dtype, entry))
            o = oracle_cases.get(name, {})
            row.append(cell(o.get(dtype) or o.get("all")))
            lines.append(f"| {name} | {dtype} | " + " | ".join(row) + " |")
    lines += ["", "## Proposals per failing case", "",
              "W = promote the kornia function wholesale (widen inputs, call the release's function, narrow each output "
              "to kornia 0.9.0's dtype for the call); O = promote the torch op for kornia's calls only.", "",
              "| case | releases failing (half, with the shim) | 0.9.0 | proposal |", "|---|---|---|---|"]
    for name in names:
        failing_in = [label for label, _, cases in loaded
                      if any(e["status"] not in ("ok", "absent") for d, e in cases.get(name, {}).items() if d != "float32")]
        if not failing_in:
            continue
        o = oracle_cases.get(name, {})
        oracle_text = "; ".join(f"{d}: {cell(o.get(d))}" for d in ("float16", "bfloat16") if o.get(d))
        proposal = next((text for prefix, text in PROPOSALS.items() if name.startswith(prefix)), "")
        lines.append(f"| {name} | {', '.join(failing_in)} | {oracle_text} | {proposal} |")
    lines += ["", "## Failing calls per release (half dtypes, with the shim)", ""]
    for label, _, _ in loaded:
        entries = failing.get(label, [])
        counts = collections.Counter(e["status"] for _, _, e in entries)
        lines += [f"### {label}: {len(entries)} failing (case, dtype) pairs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "",
                  "| case | dtype | class | error (first line) | innermost kornia frame | call site |", "|---|---|---|---|---|---|"]
        for name, dtype, e in entries:
            lines.append(f"| {name} | {dtype} | {e['status']} | {e.get('error', '').replace('|', '/')[:160]} | `{e.get('frame', '')}` | "
                         f"{_site_for(e.get('frame', ''), sites, label)} |")
        lines.append("")
    markdown.write_text("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), "--no-shim" not in sys.argv)
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-shim", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--render", nargs="+", help="RESULTS.jsonl=LABEL ...")
    parser.add_argument("--oracle")
    parser.add_argument("--sites")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.render:
        render([tuple(r.split("=", 1)) for r in args.render], args.oracle, args.sites, args.markdown)
        return 0
    drive(args.out, not args.no_shim, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
