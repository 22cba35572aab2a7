"""A census of kornia's public operations in half precision: half inputs, or float32 under autocast.

    python tools/census.py run --mode autocast --out RUN.jsonl [--no-shim] [--timeout 60]
            [--cpu-half native|float32] [-k SUBSTRING]
    python tools/census.py compare A.jsonl B.jsonl ... [--names a,b,...] [--markdown OUT.md]

Run the first form with the python of the environment under test (the installed kornia; by
default this repository's shim applied first, ``--no-shim`` for the release alone, which is also
how kornia 0.9.0 is run). Every case runs first in float32 outside autocast: that is the
reference (a case that fails there is recorded as such and not counted). Then, per half dtype:

* ``--mode autocast``: the same float32 call inside ``torch.autocast("cpu", dtype=...)``,
  against the float32 reference (autocast's own contract: float32 in, the float32 answer to
  within half rounding);
* ``--mode half``: the call on inputs narrowed to the dtype, against the float32 call (the
  inputs' one half rounding is well inside the tolerance).

A case passes when it returns what the reference returns, finite where the reference is finite,
every floating output within ``0.05 * max|ref| + 8 ulps`` (elementwise, ulps of the half dtype
at the reference's magnitude), integer outputs of the same shape; a warp ("neighbourhood" cases)
passes when every pixel lies within its 3x3 neighbourhood's range in the reference (plus the same
tolerance). A case that does not return within ``--timeout`` seconds is a hang (the worker
process is killed and restarted). Output dtypes are recorded for the docs.

The cases: ``tools/half_public_apis.py``'s (the no-half-kernel call sites), the functions and
modules of kornia's image packages that take one image (found in the installed release by
calling them), and the ones written out below (networks on flat patches, losses, metrics,
geometry).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent

# ----------------------------------------------------------------------------------------------
# cases: name -> (builder(kornia, torch, dtype) -> output, check) ; check: "close" | "neighbourhood"


def _image(torch, dtype, shape=(1, 3, 32, 32), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=generator).to(dtype)


def _textured(torch, dtype, shape=(1, 3, 64, 64), seed=3):
    """A smooth image with structure (blobs and a ramp): features, warps and descriptors find
    something in it."""
    generator = torch.Generator().manual_seed(seed)
    h, w = shape[-2:]
    y = torch.linspace(0, 1, h).view(h, 1)
    x = torch.linspace(0, 1, w).view(1, w)
    image = 0.3 * x + 0.2 * y
    for _ in range(6):
        cy, cx = torch.rand(2, generator=generator).tolist()
        s = 0.05 + 0.1 * torch.rand(1, generator=generator).item()
        image = image + 0.5 * torch.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * s * s))
    image = (image / image.max()).expand(*shape).contiguous()
    return image.to(dtype)


SINGLE_IMAGE_PACKAGES = ("kornia.color", "kornia.enhance", "kornia.filters", "kornia.morphology",
                         "kornia.geometry.transform", "kornia.feature", "kornia.augmentation", "kornia.metrics",
                         "kornia.losses", "kornia.contrib", "kornia.utils", "kornia.io", "kornia.geometry.subpix")
# Functions and classes not worth calling with one image (they need other arguments or train).
SKIP_DISCOVERY = {"kornia.augmentation.AugmentationSequential", "kornia.augmentation.ImageSequential",
                  "kornia.augmentation.VideoSequential", "kornia.augmentation.PatchSequential",
                  "kornia.augmentation.ManyToManyAugmentationDispather", "kornia.augmentation.ManyToOneAugmentationDispather",
                  "kornia.utils.image_to_tensor", "kornia.utils.tensor_to_image", "kornia.io.load_image",
                  "kornia.io.write_image", "kornia.utils.draw_rectangle", "kornia.utils.print_image"}


def discovered_cases(kornia, torch):
    """name -> builder for every public function or default-constructed module of the image
    packages that takes one (1, 3, 32, 32) image (or a (1, 1, 32, 32) gray one) and returns a
    floating tensor in float32, in the installed release."""
    import importlib
    import inspect

    found = {}
    for package in SINGLE_IMAGE_PACKAGES:
        try:
            module = importlib.import_module(package)
        except Exception:  # noqa: BLE001
            continue
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in sorted(set(names)):
            qualified = f"{package}.{name}"
            if qualified in SKIP_DISCOVERY or name[0] == "_":
                continue
            obj = getattr(module, name, None)
            if obj is None:
                continue
            if inspect.isclass(obj):
                if not issubclass(obj, torch.nn.Module):
                    continue
                how = "p=1" if package == "kornia.augmentation" else "class"
            elif inspect.isfunction(obj) or callable(obj) and type(obj).__name__ in ("function", "ScriptFunction"):
                how = "function"
            else:
                continue
            for channels in (3, 1):
                try:
                    torch.manual_seed(0)
                    with _quiet():
                        out = _single_image_builder(qualified, how, channels)(kornia, torch, torch.float32)
                except Exception:  # noqa: BLE001
                    continue
                if not _floating(torch, out):
                    break
                suffix = "(p=1)" if how == "p=1" else ""
                found[f"{qualified}{suffix} {channels}ch"] = (_single_image_builder(qualified, how, channels), "close")
                break
    return found


def _single_image_builder(qualified, how, channels):
    """Looks the API up on the kornia it is given (so a case under autocast reaches it through
    ``UnderAutocast``), constructs it if it is a class, and calls it on one image."""

    def build(kornia, torch, dtype):
        api = kornia
        for part in qualified.split(".")[1:]:
            api = getattr(api, part)
        if how == "p=1":
            api = api(p=1.0)
        elif how == "class":
            api = api()
        return api(_image(torch, dtype, (1, channels, 32, 32)))

    return build


class _quiet:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)


def _floating(torch, out):
    return any(t.is_floating_point() for t in _tensors(torch, out))


def _tensors(torch, out):
    """The tensors of a result, in order (tuples, lists, dicts, dataclasses, kornia's wrappers)."""
    import dataclasses

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(torch, item)]
    if isinstance(out, dict):
        return [t for key in sorted(out, key=str) for t in _tensors(torch, out[key])]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return [t for f in dataclasses.fields(out) for t in _tensors(torch, getattr(out, f.name))]
    data = getattr(out, "data", None)
    if isinstance(data, torch.Tensor):
        return [data]
    return []


def written_cases():
    """The cases written out: what one image cannot exercise."""
    C = {}

    def case(name, check="close"):
        def register(fn):
            C[name] = (fn, check)
            return fn
        return register

    # descriptors on flat patches (the F2 bug: a zero feature vector normalised) and on texture
    for net in ("SOSNet", "HardNet", "HardNet8", "HyNet", "TFeat"):
        @case(f"{net} flat patches")
        def _(k, torch, d, net=net):
            torch.manual_seed(0)
            module = getattr(k.feature, net)(pretrained=False).eval().to(d if d != torch.float32 else torch.float32)
            return module(torch.zeros(2, 1, 32, 32, dtype=d))

        @case(f"{net} textured patches")
        def _(k, torch, d, net=net):
            torch.manual_seed(0)
            module = getattr(k.feature, net)(pretrained=False).eval()
            if d != torch.float32:
                module = module.to(d)
            return module(_textured(torch, d, (2, 1, 32, 32)))

    for name, size in (("SIFTDescriptor", 32), ("MKDDescriptor", 32)):
        @case(f"{name} flat patches")
        def _(k, torch, d, name=name, size=size):
            return getattr(k.feature, name)(size).to(d)(torch.zeros(2, 1, size, size, dtype=d))

        @case(f"{name} textured patches")
        def _(k, torch, d, name=name, size=size):
            return getattr(k.feature, name)(size).to(d)(_textured(torch, d, (2, 1, size, size)))

    @case("DenseSIFTDescriptor flat")
    def _(k, torch, d):
        return k.feature.DenseSIFTDescriptor().to(d)(torch.zeros(1, 1, 24, 24, dtype=d))

    @case("DenseSIFTDescriptor textured")
    def _(k, torch, d):
        return k.feature.DenseSIFTDescriptor().to(d)(_textured(torch, d, (1, 1, 24, 24)))

    # losses and metrics of an image pair
    def pair(torch, d, shape=(1, 3, 32, 32)):
        return _image(torch, d, shape, 1), _image(torch, d, shape, 2)

    for name, call in (
        ("metrics.ssim", lambda k, a, b: k.metrics.ssim(a, b, 11)),
        ("metrics.psnr", lambda k, a, b: k.metrics.psnr(a, b, 1.0)),
        ("losses.ssim_loss", lambda k, a, b: k.losses.ssim_loss(a, b, 11)),
        ("losses.SSIMLoss", lambda k, a, b: k.losses.SSIMLoss(5)(a, b)),
        ("losses.psnr_loss", lambda k, a, b: k.losses.psnr_loss(a, b, 1.0)),
        ("losses.charbonnier_loss", lambda k, a, b: k.losses.charbonnier_loss(a, b)),
        ("losses.cauchy_loss", lambda k, a, b: k.losses.cauchy_loss(a, b)),
        ("losses.welsch_loss", lambda k, a, b: k.losses.welsch_loss(a, b)),
        ("losses.geman_mcclure_loss", lambda k, a, b: k.losses.geman_mcclure_loss(a, b)),
        ("losses.MS_SSIMLoss", lambda k, a, b: k.losses.MS_SSIMLoss()(a, b)),
        ("losses.total_variation", lambda k, a, b: k.losses.total_variation(a)),
        ("losses.inverse_depth_smoothness_loss", lambda k, a, b: k.losses.inverse_depth_smoothness_loss(a[:, :1], b)),
    ):
        @case(name)
        def _(k, torch, d, call=call):
            a, b = pair(torch, d)
            return call(k, a, b)

    @case("metrics.ssim3d")
    def _(k, torch, d):
        return k.metrics.ssim3d(_image(torch, d, (1, 1, 8, 16, 16), 1), _image(torch, d, (1, 1, 8, 16, 16), 2), 5)

    for name in ("dice_loss", "focal_loss", "tversky_loss", "lovasz_softmax_loss"):
        @case(f"losses.{name}")
        def _(k, torch, d, name=name):
            logits = (_image(torch, torch.float32, (2, 3, 8, 8), 4) * 4 - 2).to(d)
            labels = torch.randint(0, 3, (2, 8, 8), generator=torch.Generator().manual_seed(5))
            fn = getattr(k.losses, name)
            if name == "focal_loss":
                return fn(logits, labels, alpha=0.5, reduction="mean")
            if name == "tversky_loss":
                return fn(logits, labels, alpha=0.5, beta=0.5)
            return fn(logits, labels)

    # responses and detectors on texture
    for name in ("gftt_response", "harris_response", "hessian_response", "dog_response"):
        @case(f"feature.{name}")
        def _(k, torch, d, name=name):
            if name == "dog_response":
                return getattr(k.feature, name)(_textured(torch, d, (1, 1, 4, 32, 32)))
            return getattr(k.feature, name)(_textured(torch, d, (1, 1, 32, 32)))

    for name in ("CornerGFTT", "CornerHarris", "BlobHessian", "BlobDoG"):
        @case(f"feature.{name}")
        def _(k, torch, d, name=name):
            cls = getattr(k.feature, name)
            module = cls(0.04) if name == "CornerHarris" else cls()
            x = _textured(torch, d, (1, 1, 4, 32, 32) if name == "BlobDoG" else (1, 1, 32, 32))
            return module(x)

    # warps (the neighbourhood check: a half-pixel displacement of the sampling grid is allowed,
    # a whole one is not)
    for size in (32, 256):
        @case(f"geometry.rotate {size}px", "neighbourhood")
        def _(k, torch, d, size=size):
            return k.geometry.transform.rotate(_textured(torch, d, (1, 3, size, size)), torch.tensor([30.0]).to(d))

        @case(f"geometry.warp_affine {size}px", "neighbourhood")
        def _(k, torch, d, size=size):
            matrix = torch.tensor([[[0.9, -0.3, size * 0.1], [0.3, 0.9, -size * 0.05]]])
            return k.geometry.transform.warp_affine(_textured(torch, d, (1, 3, size, size)), matrix.to(d), (size, size))

        @case(f"geometry.warp_perspective {size}px", "neighbourhood")
        def _(k, torch, d, size=size):
            matrix = torch.tensor([[[0.9, -0.2, size * 0.1], [0.25, 0.95, -size * 0.05], [1e-4, 2e-4, 1.0]]])
            return k.geometry.transform.warp_perspective(_textured(torch, d, (1, 3, size, size)), matrix.to(d), (size, size))

        @case(f"augmentation.RandomAffine {size}px", "neighbourhood")
        def _(k, torch, d, size=size):
            torch.manual_seed(0)
            return k.augmentation.RandomAffine(30.0, (0.1, 0.1), (0.8, 1.2), 10.0, p=1.0)(_textured(torch, d, (1, 3, size, size)))

        @case(f"augmentation.AugmentationSequential with mask {size}px", "neighbourhood")
        def _(k, torch, d, size=size):
            torch.manual_seed(0)
            seq = k.augmentation.AugmentationSequential(
                k.augmentation.RandomAffine(30.0, p=1.0), k.augmentation.RandomHorizontalFlip(p=1.0),
                data_keys=["input", "mask"])
            image = _textured(torch, d, (1, 3, size, size))
            mask = (_textured(torch, torch.float32, (1, 1, size, size), 9) > 0.5).to(d)
            return seq(image, mask)

    @case("geometry.resize antialias")
    def _(k, torch, d):
        return k.geometry.transform.resize(_textured(torch, d, (1, 3, 64, 64)), (24, 40), antialias=True)

    @case("geometry.crop_and_resize", "neighbourhood")
    def _(k, torch, d):
        boxes = torch.tensor([[[4.0, 6.0], [40.0, 6.0], [40.0, 50.0], [4.0, 50.0]]])
        return k.geometry.transform.crop_and_resize(_textured(torch, d), boxes.to(d), (32, 32))

    @case("geometry.elastic_transform2d")
    def _(k, torch, d):
        noise = (_image(torch, torch.float32, (1, 2, 32, 32), 6) * 2 - 1).to(d)
        return k.geometry.transform.elastic_transform2d(_textured(torch, d, (1, 3, 32, 32)), noise, (7, 7))

    @case("geometry.create_meshgrid 300")
    def _(k, torch, d):
        return k.utils.create_meshgrid(8, 300, True, dtype=d)

    @case("geometry.solve_pnp_dlt")
    def _(k, torch, d):
        generator = torch.Generator().manual_seed(7)
        world = torch.rand(1, 10, 3, generator=generator) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])
        K = torch.tensor([[[100.0, 0, 50], [0, 100, 50], [0, 0, 1]]])
        image = (K @ world.transpose(1, 2)).transpose(1, 2)
        image = image[..., :2] / image[..., 2:]
        return k.geometry.solve_pnp_dlt(world.to(d), image.to(d), K.to(d))

    @case("filters.unsharp_mask")
    def _(k, torch, d):
        return k.filters.unsharp_mask(_textured(torch, d, (1, 3, 32, 32)), (5, 5), (1.5, 1.5))

    @case("filters.gaussian_blur2d 17x17")
    def _(k, torch, d):
        return k.filters.gaussian_blur2d(_textured(torch, d, (1, 3, 48, 48)), (17, 17), (4.0, 4.0))

    @case("filters.canny")
    def _(k, torch, d):
        return k.filters.canny(_textured(torch, d, (1, 3, 32, 32)))

    @case("feature.extract_patches_from_pyramid")
    def _(k, torch, d):
        laf = torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]], [[4.0, 0.0, 30.0], [0.0, 4.0, 34.0]]]])
        return k.feature.extract_patches_from_pyramid(_textured(torch, d), laf.to(d), 16)

    @case("feature.ConvQuadInterp3d")
    def _(k, torch, d):
        return k.geometry.subpix.ConvQuadInterp3d(strict_maxima_bonus=0.0)(_textured(torch, d, (1, 1, 5, 40, 40)))

    @case("feature.SIFTFeature 64px")
    def _(k, torch, d):
        module = k.feature.SIFTFeature(num_features=8)
        if d != torch.float32:
            module = module.to(d)
        return module(_textured(torch, d, (1, 1, 64, 64)))

    @case("feature.LAFOrienter")
    def _(k, torch, d):
        laf = torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]], [[4.0, 0.0, 30.0], [0.0, 4.0, 34.0]]]])
        return k.feature.LAFOrienter(19).to(d)(laf.to(d), _textured(torch, d, (1, 1, 64, 64)))

    @case("feature.LAFAffineShapeEstimator")
    def _(k, torch, d):
        laf = torch.tensor([[[[6.0, 1.0, 16.0], [-1.0, 5.0, 15.0]], [[4.0, 0.0, 30.0], [0.0, 4.0, 34.0]]]])
        return k.feature.LAFAffineShapeEstimator(19).to(d)(laf.to(d), _textured(torch, d, (1, 1, 64, 64)))

    @case("enhance.equalize_clahe")
    def _(k, torch, d):
        return k.enhance.equalize_clahe(_textured(torch, d, (1, 3, 64, 64)))

    @case("enhance.normalize")
    def _(k, torch, d):
        return k.enhance.normalize(_image(torch, d), torch.tensor([0.5, 0.4, 0.3]).to(d), torch.tensor([0.2, 0.25, 0.3]).to(d))

    @case("geometry.depth_to_3d_v2")
    def _(k, torch, d):
        depth = 1.0 + _image(torch, d, (1, 16, 16), 8)
        K = torch.tensor([[[16.0, 0, 8], [0, 16, 8], [0, 0, 1]]])
        fn = getattr(k.geometry.depth, "depth_to_3d_v2", None)
        if fn is None:
            return k.geometry.depth.depth_to_3d(depth[:, None], K.to(d))
        return fn(depth[0], K[0].to(d))

    @case("geometry.project_points")
    def _(k, torch, d):
        points = (_image(torch, torch.float32, (1, 8, 3), 9) + torch.tensor([0.0, 0.0, 2.0])).to(d)
        K = torch.tensor([[[100.0, 0, 50], [0, 100, 50], [0, 0, 1]]])
        return k.geometry.camera.project_points(points, K.to(d))

    @case("geometry.transform_points")
    def _(k, torch, d):
        points = (_image(torch, torch.float32, (1, 8, 2), 9) * 100).to(d)
        M = torch.tensor([[[0.9, -0.2, 10.0], [0.25, 0.95, -5.0], [1e-4, 2e-4, 1.0]]])
        return k.geometry.linalg.transform_points(M.to(d), points)

    @case("geometry.quaternion_to_rotation_matrix")
    def _(k, torch, d):
        q = torch.tensor([[0.9, 0.1, -0.3, 0.2]])
        return k.geometry.conversions.quaternion_to_rotation_matrix((q / q.norm()).to(d))

    @case("geometry.axis_angle_to_rotation_matrix")
    def _(k, torch, d):
        return k.geometry.conversions.axis_angle_to_rotation_matrix(torch.tensor([[0.3, -0.2, 0.5]]).to(d))

    @case("geometry.rotation_matrix_to_axis_angle")
    def _(k, torch, d):
        R = k.geometry.conversions.axis_angle_to_rotation_matrix(torch.tensor([[0.3, -0.2, 0.5]]))
        return k.geometry.conversions.rotation_matrix_to_axis_angle(R.to(d))

    @case("feature.match_snn")
    def _(k, torch, d):
        g = torch.Generator().manual_seed(1)
        return k.feature.match_snn(torch.rand(20, 16, generator=g).to(d), torch.rand(24, 16, generator=g).to(d), 0.95)

    return C


def example_cases():
    """Every fix-table target with an example call (tests/examples.py), as the public function
    or method it replaces: "rows: <label>". Looked up by path in the installed kornia (so a
    release without it, or 0.9.0 where it moved, has no such case)."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    try:
        from examples import EXAMPLES

        from kornia_halfpatch.fixes import load_fixes
    except Exception:  # noqa: BLE001 - no repository beside the tool
        return {}
    found = {}
    for fix in load_fixes():
        for target in fix.targets:
            if target.label not in EXAMPLES or target.scope != "everywhere":
                continue
            module_name, _, path = target.candidates[0].partition(":")
            found[f"rows: {target.label}"] = (_example_builder(module_name, path, EXAMPLES[target.label]), "close")
    return found


def _example_builder(module_name, path, factory):
    def build(kornia, torch, dtype):
        import importlib

        api = importlib.import_module(module_name)  # (a package attribute may shadow the module)
        for part in path.split("."):
            api = getattr(api, part)
        if isinstance(kornia, UnderAutocast):
            api = UnderAutocast(api, torch, kornia._dtype)
        return api(*factory(dtype))

    return build


def all_cases():
    import kornia
    import torch

    sys.path.insert(0, str(TOOLS))
    from half_public_apis import build_cases

    cases = {}
    for name, (api, builder) in build_cases().items():
        cases[f"sites: {name}"] = (lambda k, t, d, b=builder: b(k, t, d), "close")
    cases.update(written_cases())
    cases.update(discovered_cases(kornia, torch))
    cases.update(example_cases())
    return cases


# ----------------------------------------------------------------------------------------------
# comparing


def _ulp_scale(torch, dtype):
    return torch.finfo(dtype).eps


def compare(torch, out, ref, dtype, check):
    """None if ``out`` passes against ``ref``, else why not."""
    outs, refs = _tensors(torch, out), _tensors(torch, ref)
    if len(outs) != len(refs):
        return f"returns {len(outs)} tensors, the reference {len(refs)}"
    worst = None
    for index, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape:
            return f"output {index}: shape {tuple(o.shape)}, reference {tuple(r.shape)}"
        if not r.is_floating_point():
            continue
        if not o.is_floating_point():
            return f"output {index}: {o.dtype}, reference {r.dtype}"
        o64, r64 = o.detach().double(), r.detach().double()
        finite = torch.isfinite(r64)
        if bool((finite & ~torch.isfinite(o64)).any()):
            bad = int((finite & ~torch.isfinite(o64)).sum())
            return f"output {index}: {bad} of {o.numel()} non-finite where the reference is finite"
        if not bool(finite.any()):
            continue
        scale = r64[finite].abs().max().item()
        tolerance = 0.05 * scale + 8 * _ulp_scale(torch, dtype) * r64.abs()
        if check == "neighbourhood" and r.dim() >= 2:
            pool = torch.nn.functional.max_pool2d
            flat = r64.reshape(-1, 1, *r64.shape[-2:]).nan_to_num()
            high = pool(flat, 3, 1, 1).reshape(r64.shape)
            low = -pool(-flat, 3, 1, 1).reshape(r64.shape)
            excess = torch.maximum(o64 - high, low - o64) - tolerance
        else:
            excess = (o64 - r64).abs() - tolerance
        excess = torch.where(finite, excess, torch.zeros_like(excess))
        e = excess.max().item()
        if e > 0:
            err = torch.where(finite, (o64 - r64).abs(), torch.zeros_like(o64)).max().item()
            worst = worst or f"output {index}: max |err| {err:.3g} where max |ref| is {scale:.3g}"
    return worst


def dtypes_of(torch, out):
    return [str(t.dtype).replace("torch.", "") for t in _tensors(torch, out)]


# ----------------------------------------------------------------------------------------------
# the worker


class UnderAutocast:
    """kornia seen through autocast: attributes are looked up as they are, and every call (a
    function, a class, a module instance, a method) runs inside ``torch.autocast("cpu", dtype)``;
    modules it returns are seen the same way. So a case's inputs (built with plain torch) are the
    float32 reference's, and only kornia's computation is under autocast."""

    def __init__(self, target, torch, dtype):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_torch", torch)
        object.__setattr__(self, "_dtype", dtype)

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if callable(value) or type(value).__name__ == "module":
            return UnderAutocast(value, self._torch, self._dtype)
        return value

    def __call__(self, *args, **kwargs):
        args = [a._target if isinstance(a, UnderAutocast) else a for a in args]
        kwargs = {k: v._target if isinstance(v, UnderAutocast) else v for k, v in kwargs.items()}
        with self._torch.autocast("cpu", dtype=self._dtype):
            out = self._target(*args, **kwargs)
        if isinstance(out, self._torch.nn.Module):
            return UnderAutocast(out, self._torch, self._dtype)
        return out


def _worker(requests, results, mode, shim, cpu_half):
    import warnings

    warnings.simplefilter("ignore")
    if cpu_half:
        os.environ["KORNIA_HALFPATCH_CPU_HALF"] = cpu_half
    os.environ.setdefault("KORNIA_HALFPATCH_CACHE", "0")
    import torch

    import kornia

    if shim:
        sys.path.insert(0, str(REPO))
        import kornia_halfpatch

        kornia_halfpatch.apply()
    cases = all_cases()
    results.put(("ready", sorted(cases)))
    while True:
        name = requests.get()
        if name is None:
            return
        builder, check = cases[name]
        record = {"case": name, "check": check}
        try:
            torch.manual_seed(0)
            ref = builder(kornia, torch, torch.float32)
            if not _floating(torch, ref):
                record["reference"] = "no floating output"
                results.put(("done", record))
                continue
            record["float32"] = dtypes_of(torch, ref)
        except Exception as exc:  # noqa: BLE001
            record["reference"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            results.put(("done", record))
            continue
        for dtype in (torch.float16, torch.bfloat16):
            key = str(dtype).replace("torch.", "")
            try:
                torch.manual_seed(0)
                if mode == "autocast":
                    # Inputs are built outside autocast; every call into kornia runs inside it.
                    out = builder(UnderAutocast(kornia, torch, dtype), torch, torch.float32)
                    reference = ref
                else:
                    # Inputs built in float32 and narrowed: the reference's inputs are one half
                    # rounding away, well inside the tolerance.
                    out = builder(kornia, torch, dtype)
                    reference = ref
                why = compare(torch, out, reference, dtype, check)
                record[key] = {"ok": why is None, "why": why, "dtypes": dtypes_of(torch, out)}
            except Exception as exc:  # noqa: BLE001
                line = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                frame = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__))
                              if "kornia" in f.filename and "kornia_halfpatch" not in f.filename), "")
                record[key] = {"ok": False, "why": f"{type(exc).__name__}: {line}", "frame": frame}
        results.put(("done", record))


def run(args):
    ctx = multiprocessing.get_context("spawn")
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["case"] for line in out.read_text().splitlines() if line.strip()}
    pending = None
    with out.open("a") as sink:
        while True:
            requests, results = ctx.Queue(), ctx.Queue()
            worker = ctx.Process(target=_worker, args=(requests, results, args.mode, not args.no_shim, args.cpu_half), daemon=True)
            worker.start()
            kind, names = results.get(timeout=600)
            if pending is None:
                pending = [n for n in names if n not in done and (not args.k or args.k in n)]
                print(f"{len(names)} cases, {len(pending)} to run", flush=True)
            restart = False
            while pending:
                name = pending[0]
                requests.put(name)
                started = time.monotonic()
                try:
                    _, record = results.get(timeout=args.timeout * 3)
                except Exception:  # noqa: BLE001 - no answer: a hang (or a crash)
                    alive = worker.is_alive()
                    record = {"case": name, "hang": alive, "crash": not alive,
                              "seconds": round(time.monotonic() - started, 1)}
                    worker.kill()
                    restart = True
                record["seconds"] = round(time.monotonic() - started, 2)
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                pending.pop(0)
                if restart:
                    break
            if not restart:
                requests.put(None)
                worker.join(30)
                return


# ----------------------------------------------------------------------------------------------
# comparing runs


def load(path):
    return {r["case"]: r for r in map(json.loads, Path(path).read_text().splitlines()) if r}


def outcome(record, dtype):
    if record is None:
        return "absent"
    if record.get("hang"):
        return "hang"
    if record.get("crash"):
        return "crash"
    if "reference" in record:
        return "n/a"
    result = record.get(dtype)
    if result is None:
        return "absent"
    return "pass" if result["ok"] else "FAIL"


def compare_runs(args):
    runs = [load(p) for p in args.runs]
    names = args.names.split(",") if args.names else [Path(p).stem for p in args.runs]
    cases = sorted(set().union(*runs))
    lines = []
    totals = {(n, d): [0, 0] for n in names for d in ("float16", "bfloat16")}
    rows = []
    for case in cases:
        cells = []
        counted = all(outcome(run.get(case), "float16") not in ("n/a", "absent") for run in runs)
        for name, run in zip(names, runs):
            for dtype in ("float16", "bfloat16"):
                o = outcome(run.get(case), dtype)
                cells.append(o)
                if counted:
                    totals[(name, dtype)][1] += 1
                    totals[(name, dtype)][0] += o == "pass"
        if counted and any(c != "pass" for c in cells):
            whys = []
            for name, run in zip(names, runs):
                record = run.get(case) or {}
                for dtype in ("float16", "bfloat16"):
                    result = record.get(dtype)
                    if isinstance(result, dict) and not result["ok"]:
                        whys.append(f"{name} {dtype}: {result['why']}")
            rows.append((case, cells, whys))
    header = "| case | " + " | ".join(f"{n} f16 | {n} bf16" for n in names) + " |"
    lines.append("| run | " + " | ".join(f"{n} float16 | {n} bfloat16" for n in names) + " |")
    lines.append("|---" * (1 + 2 * len(names)) + "|")
    lines.append("| passed | " + " | ".join(f"{totals[(n, d)][0]}/{totals[(n, d)][1]}" for n in names for d in ("float16", "bfloat16")) + " |")
    lines.append("")
    lines.append(header)
    lines.append("|---" * (1 + 2 * len(names)) + "|")
    for case, cells, _ in rows:
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    lines.append("")
    for case, _, whys in rows:
        lines.append(f"- {case}: " + "; ".join(whys))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=("autocast", "half"), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--no-shim", action="store_true")
    r.add_argument("--timeout", type=float, default=60.0)
    r.add_argument("--cpu-half", choices=("native", "float32", "auto"))
    r.add_argument("-k", default="")
    c = sub.add_parser("compare")
    c.add_argument("runs", nargs="+")
    c.add_argument("--names")
    c.add_argument("--markdown")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    else:
        compare_runs(args)


if __name__ == "__main__":
    main()
