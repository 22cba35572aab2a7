"""warp_sampling in fresh interpreters: crashes (non-finite grids, half backward), import
orders, the lazy probe, TorchScript's per-process cache.

A crash of torch's CPU kernels kills the interpreter, so these run with ``sys.executable``; each
script prints one JSON line that the test checks. The oracle for gradients is the unpatched
release with each half CPU grid_sample widened to float32 by a TorchFunctionMode (see
test_fix_warp_sampling.py), or, for non-finite grids, the unpatched release on the same grid
with the non-finite coordinates replaced and their upstream gradient zeroed.
"""

import json
from pathlib import Path

import pytest
import torch

from support import TORCH, lacks_half_kernel, needs_old_kornia, run_python

pytestmark = [needs_old_kornia, pytest.mark.slow]  # every test runs an interpreter

ORACLE_MODE = '''
import inspect, torch, torch.nn.functional as F
from torch.overrides import TorchFunctionMode
import kornia_halfpatch
TORCH_GRID_SAMPLE = kornia_halfpatch.get_original(F.grid_sample)
HALF = (torch.float16, torch.bfloat16)

class Widen(TorchFunctionMode):
    """Every half CPU call reaching torch's grid_sample: widened to float32, narrowed once."""
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kornia_halfpatch.get_original(func) is TORCH_GRID_SAMPLE:
            bound = inspect.signature(func).bind(*args, **kwargs)
            image, grid = bound.arguments.pop("input"), bound.arguments.pop("grid")
            if image.dtype in HALF and grid.dtype == image.dtype:
                return func(image.float(), grid.float(), **bound.arguments).to(image.dtype)
        return func(*args, **kwargs)

def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
'''


# Where torch has no half CPU matrix product (torch 2.1, float16), kornia's warps raise in their
# own matrix products (``@`` in normalize_homography, rotate's matrix) before they sample: as in
# the in-process tests, those products run on float32 operands, narrowed once
# (support.widening_half_products, a no-op where the kernel exists), so the sampling is reached.
WIDEN_PRODUCTS = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from support import widening_half_products
for _dtype in (torch.float16, torch.bfloat16):
    widening_half_products(_dtype).__enter__()
"""


def outcome(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# Non-finite grids: no kornia warp path kills the process in backward, in any dtype


NONFINITE_SCRIPT = ORACLE_MODE + '''
import json, sys, torch, kornia
import kornia_halfpatch
kornia_halfpatch.apply(only=["warp_sampling"])
''' + WIDEN_PRODUCTS + '''
T = kornia.geometry.transform
nan, inf = float("nan"), float("inf")
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
failures, checked = [], 0

def note(ok, what):
    global checked
    checked += 1
    if not ok:
        failures.append(what)

def leaf(t, dtype):
    return t.to(dtype).detach().requires_grad_(True)

def image_of(dtype, size=24):
    g = torch.Generator().manual_seed(0)
    return leaf(torch.rand(1, 3, size, size, generator=g), dtype)

# 1. remap: a direct pixel grid with a NaN, an inf and a -inf coordinate. Exact semantics:
#    zero sample, zero gradient to the map there; elsewhere torch's own values and gradients.
bad = [(5, 7, "x", nan), (10, 3, "y", inf), (20, 20, "x", -inf), (20, 20, "y", nan)]
for dtype in DTYPES:
    for padding in ("border", "reflection"):
        what = f"remap {dtype} {padding}"
        print(what, flush=True)
        ys, xs = torch.meshgrid(torch.arange(24.0), torch.arange(24.0), indexing="ij")
        map_x, map_y = (xs * 0.9 + 1.3)[None], (ys * 1.1 - 0.7)[None]
        finite = torch.ones(24, 24, dtype=torch.bool)
        for y, x, axis, value in bad:
            (map_x if axis == "x" else map_y)[0, y, x] = value
            finite[y, x] = False
        image, mx, my = image_of(dtype), leaf(map_x, dtype), leaf(map_y, dtype)
        out = T.remap(image, mx, my, padding_mode=padding, align_corners=False)
        weights = torch.rand(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        (out * weights).sum().backward()
        note(bool((out[..., ~finite] == 0).all()), what + ": zero sample")
        note(bool((mx.grad[0][~finite] == 0).all() and (my.grad[0][~finite] == 0).all()), what + ": zero map gradient")
        note(bool(torch.isfinite(image.grad).all()), what + ": finite image gradient")
        # Oracle: unpatched, the same map with its non-finite entries replaced, upstream masked.
        with kornia_halfpatch.unpatched(["warp_sampling"]), Widen():
            image2, mx2, my2 = image_of(dtype), leaf(torch.where(finite, map_x, 0.0), dtype), leaf(torch.where(finite, map_y, 0.0), dtype)
            out2 = T.remap(image2, mx2, my2, padding_mode=padding, align_corners=False)
            (out2 * weights * finite).sum().backward()
        note(same_bits(out[..., finite], out2[..., finite]), what + ": finite samples are torch's")
        note(torch.equal(image.grad, image2.grad), what + ": image gradient is torch's")
        note(same_bits(mx.grad[0][finite], mx2.grad[0][finite]) and same_bits(my.grad[0][finite], my2.grad[0][finite]), what + ": map gradient is torch's")

# 2. every kornia warp path with a non-finite parameter, border and reflection padding: the
#    backward completes; where every coordinate is non-finite, the output and image gradient are 0.
def paths(dtype, padding):
    image = image_of(dtype)
    eye = torch.eye(3)[None]
    nan_matrix = eye.clone(); nan_matrix[0, 0, 1] = nan
    yield "warp_affine", image, lambda: T.warp_affine(image, leaf(nan_matrix[:, :2], dtype), (24, 24), padding_mode=padding)
    yield "warp_perspective", image, lambda: T.warp_perspective(image, leaf(nan_matrix, dtype), (24, 24), padding_mode=padding)
    yield "rotate", image, lambda: T.rotate(image, leaf(torch.tensor([nan]), dtype), padding_mode=padding)
    yield "translate", image, lambda: T.translate(image, leaf(torch.tensor([[inf, 1.0]]), dtype), padding_mode=padding)
    yield "scale", image, lambda: T.scale(image, leaf(torch.tensor([[nan, 1.0]]), dtype), padding_mode=padding)
    yield "shear", image, lambda: T.shear(image, leaf(torch.tensor([[nan, 0.0]]), dtype), padding_mode=padding)
    yield "homography_warp", image, lambda: T.homography_warp(image, leaf(nan_matrix, dtype), (24, 24), padding_mode=padding)
    yield "HomographyWarper", image, lambda: T.HomographyWarper(24, 24, padding_mode=padding)(image, leaf(nan_matrix, dtype))
    noise = torch.zeros(1, 2, 24, 24); noise[0, :, 4:9, 4:9] = nan
    yield "elastic_transform2d", image, lambda: T.elastic_transform2d(image, leaf(noise, dtype), padding_mode=padding)
    points = torch.tensor([[[-0.5, -0.5], [0.5, -0.5], [0.0, 0.5], [0.3, 0.1]]])
    kernel, affine = T.get_tps_transform(points, points)
    kernel = kernel.clone(); kernel[0, 0, 0] = nan
    yield "warp_image_tps", image, lambda: T.warp_image_tps(image, points.to(dtype), leaf(kernel, dtype), affine.to(dtype))

for dtype in DTYPES:
    for padding in ("border", "reflection"):
        for name, image, run in paths(dtype, padding):
            what = f"{name} {dtype} {padding}"
            print(what, flush=True)
            try:
                out = run()
            except (RuntimeError, NotImplementedError) as exc:  # this release refuses the dtype
                continue
            out.sum().backward()
            if name not in ("elastic_transform2d", "warp_image_tps"):
                note(bool((out == 0).all()), what + ": zero output")
                note(bool((image.grad == 0).all()), what + ": zero image gradient")
            note(bool(torch.isfinite(image.grad).all()), what + ": finite image gradient")

# 3. other modes and 5-D: torch's kernels do not crash there; the calls go through unmasked.
for dtype in DTYPES:
    for mode in ("nearest", "bicubic"):
        print("remap", mode, dtype, flush=True)
        map_x = torch.full((1, 24, 24), 3.0); map_x[0, 2, 2] = nan
        image = image_of(dtype)
        out = T.remap(image, leaf(map_x, dtype), leaf(map_x.clone(), dtype), mode=mode, padding_mode="border", align_corners=False)
        out.sum().backward()
    print("warp_affine3d", dtype, flush=True)
    volume = leaf(torch.rand(1, 1, 6, 12, 12), dtype)
    matrix = torch.eye(4)[None, :3].clone(); matrix[0, 0, 1] = nan
    T.warp_affine3d(volume, leaf(matrix, dtype), (6, 12, 12), padding_mode="border").sum().backward()
print(json.dumps({"checked": checked, "failures": failures}))
'''


def test_nonfinite_grids_never_kill_the_process_and_give_zero_samples_and_gradients():
    result = outcome(run_python(NONFINITE_SCRIPT))
    assert result["failures"] == []
    assert result["checked"] >= 100


# --------------------------------------------------------------------------------------------
# Half backward: runs to completion, equals the float32 gradient narrowed

BACKWARD_SCRIPT = ORACLE_MODE + '''
import json, torch, kornia, kornia_halfpatch
kornia_halfpatch.apply(only=["warp_sampling"])
T = kornia.geometry.transform
failures, checked = [], 0

def maps(size, dtype):
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    c, a = (size - 1) / 2, torch.tensor(37.0).deg2rad()
    x, y = (xs - c) * 1.08, (ys - c) * 1.08
    return (c + x * a.cos() - y * a.sin())[None].to(dtype), (c + x * a.sin() + y * a.cos())[None].to(dtype)

def grads(image, map_x, map_y, mode, padding):
    image, map_x, map_y = (t.detach().requires_grad_(True) for t in (image, map_x, map_y))
    out = T.remap(image, map_x, map_y, mode=mode, padding_mode=padding, align_corners=False)
    weights = torch.rand(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype)
    (out * weights).sum().backward()
    return out.detach(), image.grad, map_x.grad, map_y.grad

def configurations():
    # every padding and mode at 182 (the first broken size); the other sizes, both channel
    # counts and layouts where they matter most, in the commonest mode
    for layout in ("contiguous", "channels_last"):
        for padding in ("zeros", "border", "reflection"):
            for mode in ("bilinear", "nearest", "bicubic"):
                yield 182, 3, layout, padding, mode
    yield 182, 1, "contiguous", "border", "bilinear"
    for size in (64, 181, 256):
        yield size, 3, "contiguous", "border", "bilinear"
    for layout in ("contiguous", "channels_last"):
        yield 512, 3, layout, "border", "bilinear"

for dtype in (torch.float16, torch.bfloat16):
    for size, channels, layout, padding, mode in configurations():
        what = f"{dtype} {size} C={channels} {layout} {padding} {mode}"
        print(what, flush=True)
        image = torch.rand(1, channels, size, size, generator=torch.Generator().manual_seed(size)).to(dtype)
        if layout == "channels_last":
            image = image.contiguous(memory_format=torch.channels_last)
        map_x, map_y = maps(size, dtype)
        got = grads(image, map_x, map_y, mode, padding)
        with kornia_halfpatch.unpatched(["warp_sampling"]), Widen():
            want = grads(image, map_x, map_y, mode, padding)
        checked += 1
        if not all(same_bits(a, b) for a, b in zip(got, want)):
            failures.append(what)
        if not all(bool(torch.isfinite(g).all()) for g in got[1:2]):
            failures.append(what + ": non-finite image gradient")
print(json.dumps({"checked": checked, "failures": failures}))
'''


def test_half_backward_completes_and_equals_the_float32_gradient_narrowed():
    result = outcome(run_python(BACKWARD_SCRIPT))
    assert result["failures"] == []
    assert result["checked"] == 2 * (2 * 3 * 3 + 1 + 3 + 2)


# --------------------------------------------------------------------------------------------
# Coverage in every import order, kornia modules imported later included; revert undoes all

COVERAGE_SCRIPT = '''
import ast, importlib, json, pkgutil, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
import kornia_halfpatch
{before}
import kornia
{after}
import torch.nn.functional as F
TORCH_GRID_SAMPLE = F.grid_sample
loaded_at_apply = set(n for n in sys.modules if n.startswith("kornia"))
for info in pkgutil.walk_packages(kornia.__path__, "kornia."):
    try:
        importlib.import_module(info.name)
    except Exception:
        pass

def call_sites(module):
    path = getattr(module, "__file__", None) or ""
    if not path.endswith(".py"):
        return []
    sites = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in ("grid_sample", "map_coordinates"):
                sites.append(ast.unparse(f))
    return sites

def resolve(module, expression):
    names = expression.split(".")
    value = module.__dict__[names[0]]
    for name in names[1:]:
        value = getattr(value, name)
    return value

def leftovers():
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("kornia."):
            for attribute, value in list(vars(module).items()):
                if kornia_halfpatch.is_patched(value) or (type(value) is type(sys) and "__kornia_halfpatch_view_of__" in value.__dict__):
                    found.append(name + "." + attribute)
    return found

sites, missed, later = 0, [], []
for name, module in sorted(sys.modules.items()):
    if name.startswith("kornia."):
        for expression in call_sites(module):
            sites += 1
            if name not in loaded_at_apply:
                later.append(name)
            if not kornia_halfpatch.is_patched(resolve(module, expression)):
                missed.append(name + ": " + expression)
rebound = kornia_halfpatch.status().fixes["warp_sampling"].rebound
kornia_halfpatch.revert()
print(json.dumps({{"sites": sites, "missed": missed, "later": sorted(set(later)), "torch_untouched": F.grid_sample is TORCH_GRID_SAMPLE,
                  "left_after_revert": leftovers(), "rebound_later": [r for r in rebound if r.split(" ")[0].rsplit(".", 1)[0] in set(later)]}}))
'''


@pytest.mark.parametrize("order", ["apply before import kornia", "apply after import kornia"])
def test_every_call_site_in_every_kornia_module_is_covered_and_revert_removes_it_all(order):
    apply = "kornia_halfpatch.apply(only=['warp_sampling'])"
    code = COVERAGE_SCRIPT.format(
        before=apply if order.startswith("apply before") else "", after="" if order.startswith("apply before") else apply
    )
    result = outcome(run_python(code))
    assert result["missed"] == []
    assert result["sites"] >= 17
    assert result["torch_untouched"]
    assert result["left_after_revert"] == []
    # modules imported after apply() (RT-DETR on 0.7.0/0.8.3, ...) were rebound as they loaded
    for module in result["later"]:
        assert any(entry.startswith(module + ".") for entry in result["rebound_later"]), module


# --------------------------------------------------------------------------------------------
# The probe is lazy (never at import), runs at most once, and only when needed

PROBE_SCRIPT = '''
import json, torch
import kornia_halfpatch.fixes.warp_sampling as fix
runs = []
real = fix.probe_half_cpu_kernel
fix.probe_half_cpu_kernel = lambda *a: runs.append(1) or real(*a)
after_import = len(runs)
import kornia, kornia_halfpatch
kornia_halfpatch.apply(only=["warp_sampling"])
after_auto = len(runs)
kornia_halfpatch.apply(only=["warp_sampling"], grid_sample_workaround="probe")
kornia_halfpatch.apply(only=["warp_sampling"], grid_sample_workaround="overflow")
kornia_halfpatch.apply(only=["warp_sampling"], grid_sample_workaround="probe")
kornia_halfpatch.status()
print(json.dumps({"after_import": after_import, "after_auto": after_auto, "after_probes": len(runs),
                  "verdict": fix._probe_result, "measured": fix.workaround_for_version(fix.TORCH_VERSION) is not None}))
'''


def test_the_probe_runs_lazily_and_once():
    result = outcome(run_python(PROBE_SCRIPT))
    assert result["after_import"] == 0
    if result["measured"]:
        assert result["after_auto"] == 0  # a measured torch version needs no probe
    assert result["after_probes"] == 1
    assert result["verdict"] in ("none", "no-kernel", "overflow")


# --------------------------------------------------------------------------------------------
# TorchScript: scripting after apply() compiles the replacement (a fresh process: TorchScript
# caches compiled functions per process, so a function scripted before apply() stays unpatched)

SCRIPT_SCRIPT = ORACLE_MODE + '''
import json, warnings, torch, kornia, kornia_halfpatch
warnings.simplefilter("ignore")
kornia_halfpatch.apply(only=["warp_sampling"])
T = kornia.geometry.transform
size = 182
buffer = torch.full((65536 + 3 * size * size,), 1000.0, dtype=torch.float16)
image = torch.as_strided(buffer, (1, 3, size, size), (3 * size * size, size * size, size, 1), 65536)
image.copy_(torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0)).half())
matrix = T.get_rotation_matrix2d(torch.tensor([[91.0, 91.0]]), torch.tensor([33.0]), torch.ones(1, 2)).half()
points = torch.tensor([[[-0.5, -0.5], [0.5, -0.5], [0.0, 0.5], [0.3, 0.1]]])
kernel, affine = T.get_tps_transform(points + 0.05, points)
cases = {
    "warp_affine": (T.warp_affine, (image, matrix, (size, size))),
    "remap": (T.remap, (image, *torch.meshgrid(torch.arange(size.__float__()) * 0.99 + 1, torch.arange(size.__float__()) * 1.01, indexing="xy"))),
    "warp_image_tps": (T.warp_image_tps, (image, (points + 0.05).half(), kernel.half(), affine.half())),
}
results = {}
for name, (function, args) in cases.items():
    if name == "remap":
        args = (args[0], args[1][None].half(), args[2][None].half())
    try:
        eager = function(*args)
    except (RuntimeError, NotImplementedError) as error:
        # No float16 CPU kernel for the warp's own matrix products (torch 2.1: bmm, baddbmm):
        # it raises before it samples, with the shim or without; TorchScript, which no
        # TorchFunctionMode reaches, could not widen them either.
        if "not implemented for 'Half'" not in str(error):
            raise
        results[name] = {"runs": False, "error": str(error)}
        continue
    try:
        compiled = torch.jit.script(function)
    except RuntimeError as error:
        # The release's own source may not script on this torch (kornia 0.7.0's ``bool | None``
        # annotations on torch 2.1): then it must not script unpatched either (a failed
        # compilation is not cached).
        with kornia_halfpatch.unpatched(["warp_sampling"]):
            try:
                torch.jit.script(function)
                unpatched_scripts = True
            except RuntimeError:
                unpatched_scripts = False
        results[name] = {"scripts": False, "unpatched_scripts": unpatched_scripts, "error": str(error).strip().splitlines()[0]}
        continue
    scripted = compiled(*args)
    finite = scripted[torch.isfinite(scripted)]  # half TPS has kornia's own 0*log(0) NaNs
    results[name] = {"scripts": True, "same_as_eager": same_bits(scripted, eager), "max": float(finite.float().max())}
print(json.dumps(results))
'''


def test_torch_jit_script_compiles_the_replacement():
    result = outcome(run_python(SCRIPT_SCRIPT))
    no_half_products = lacks_half_kernel("bmm", torch.float16) or lacks_half_kernel("baddbmm", torch.float16)
    for name, found in result.items():
        if "runs" in found:
            assert no_half_products and "bmm" in found["error"], (name, found["error"])
            continue
        if not found["scripts"]:
            assert not found["unpatched_scripts"], (name, found["error"])  # what scripts unpatched scripts patched
            continue
        assert found["same_as_eager"], name
        assert found["max"] <= 1.0, name  # the 1000s around the image were never read
    if TORCH >= (2, 4):  # torch 2.13 scripts every case
        assert all(found["scripts"] for found in result.values()), result
