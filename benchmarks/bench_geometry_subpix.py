"""geometry_subpix: survey and cost of the float16 sub-voxel solve fix (docs/fixes/geometry_subpix.md).

Run with the python of one kornia environment; every number is measured in that one process.

    python benchmarks/bench_geometry_subpix.py             # survey + accuracy + timing
    python benchmarks/bench_geometry_subpix.py --survey    # only the non-finite survey
    python benchmarks/bench_geometry_subpix.py --compile   # also torch.compile(fullgraph=True)
                                                             # of the refinement (minutes on CPU)
    python benchmarks/bench_geometry_subpix.py --emit-json  # machine-readable, for the lead

Survey: for ``torch.rand(1, 1, 5, 40, 40)`` (seeds 0..19), the same scaled to ``[0, 0.01]``, and
a smooth blob volume (seeds 0..19), count the seeds whose float16 input gradient or output has a
non-finite element, for each refinement path the release has: ``ConvQuadInterp3d``,
``iterative_quad_interp3d`` and the scale-space refinement exactly as the release's SIFT-like
detectors wire it (the subpix/nms module of ``SIFTFeatureScaleSpace``'s and of the default
``ScaleSpaceDetector``, run on the response and its negation with the detector's NMS masks).
Unpatched, and patched when the fix applies to this release.
Accuracy: patched and unpatched float16 against a float64 run on the same (float16) volume.
Timing: medians of interleaved patched/unpatched runs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

import kornia
import kornia_halfpatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from examples import probe_volume  # noqa: E402 - the tests' volumes, so both measure the same inputs

FIX = "geometry_subpix"
KINDS = ("rand", "rand_0.01", "blob")
SEEDS = range(20)

Refine = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def refinement_paths() -> Dict[str, Refine]:
    """Every sub-voxel refinement path of the installed release, by name (built at call time)."""
    import kornia.geometry.subpix as subpix

    paths: Dict[str, Refine] = {
        "ConvQuadInterp3d": lambda x: subpix.ConvQuadInterp3d(strict_maxima_bonus=0.0)(x),
    }
    if hasattr(subpix, "iterative_quad_interp3d"):
        paths["iterative_quad_interp3d"] = lambda x: subpix.iterative_quad_interp3d(x, strict_maxima_bonus=0.0)
    paths["SIFTFeatureScaleSpace refinement"] = lambda x: detector_refinement(sift_detector(), x)
    from kornia.feature import ScaleSpaceDetector

    if "subpix_module" in inspect.signature(ScaleSpaceDetector).parameters:
        # 0.8.3 and later: the default detector refines too (AdaptiveQuadInterp3d).
        paths["ScaleSpaceDetector() refinement"] = lambda x: detector_refinement(ScaleSpaceDetector(), x)
    return paths


def sift_detector():
    from kornia.feature.integrated import SIFTFeatureScaleSpace

    return SIFTFeatureScaleSpace(num_features=100, upright=True).detector


def detector_refinement(detector, response: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The detector's refinement of maxima and minima of ``response``, as its octave loop runs it."""
    module = getattr(detector, "subpix", None) or detector.nms
    if getattr(detector, "_is_iterative_subpix", False):
        from kornia.geometry.subpix import nms3d_minmax

        max_mask, min_mask = nms3d_minmax(response)
        coords_max, values_max = module(response, precomputed_nms_mask=max_mask)
        coords_min, values_min = module(-response, precomputed_nms_mask=min_mask)
    else:
        coords_max, values_max = module(response)
        coords_min, values_min = module(-response)
    return torch.cat([coords_max, coords_min]), torch.cat([values_max, values_min])


def scope(label: str):
    """The fix off (``"unpatched"``) or on (``"patched"``) for a ``with`` block."""
    return kornia_halfpatch.unpatched([FIX]) if label == "unpatched" else kornia_halfpatch.patched(only=[FIX])


def non_finite(refine: Refine, volume: torch.Tensor) -> Tuple[float, bool]:
    """(fraction of non-finite input-gradient elements, any non-finite output)."""
    leaf = volume.detach().clone().requires_grad_(True)
    coords, values = refine(leaf)
    (coords.sum() + values.sum()).backward()
    bad_output = not (bool(torch.isfinite(coords).all()) and bool(torch.isfinite(values).all()))
    return (~torch.isfinite(leaf.grad)).float().mean().item(), bad_output


def survey(applied: bool) -> List[dict]:
    rows = []
    for path, refine in refinement_paths().items():
        for kind in KINDS:
            row = {"path": path, "kind": kind}
            for label in ("unpatched", "patched") if applied else ("unpatched",):
                fractions, outputs = [], 0
                with scope(label):
                    for seed in SEEDS:
                        fraction, bad_output = non_finite(refine, probe_volume(kind, seed).half())
                        fractions.append(fraction)
                        outputs += bad_output
                row[label] = {
                    "seeds_nonfinite_grad": sum(f > 0 for f in fractions),
                    "mean_fraction": statistics.fmean(fractions),
                    "max_fraction": max(fractions),
                    "seeds_nonfinite_output": outputs,
                }
            rows.append(row)
    return rows


def float16_spacing(x: torch.Tensor) -> torch.Tensor:
    magnitude = x.abs().double().clamp(min=2.0**-14)
    return torch.exp2(torch.floor(torch.log2(magnitude)) - 10)


def accuracy() -> List[dict]:
    rows = []
    for path, refine in refinement_paths().items():
        for kind in KINDS:
            stats = {"path": path, "kind": kind, "elements_changed": 0, "max_ulps_changed": 0.0,
                     "sum_err_unpatched": 0.0, "sum_err_patched": 0.0, "max_err_unpatched": 0.0, "max_err_patched": 0.0,
                     "seeds_patched_max_err_worse": 0, "worst_excess_in_output_ulps": 0.0}
            for seed in SEEDS:
                volume = probe_volume(kind, seed).half()
                with kornia_halfpatch.unpatched([FIX]):
                    before = refine(volume)
                    reference = refine(volume.double())
                with kornia_halfpatch.patched(only=[FIX]):
                    after = refine(volume)
                for old, new, ref in zip(before, after, reference):
                    changed = old.double() != new.double()
                    stats["elements_changed"] += int(changed.sum())
                    if changed.any():
                        spacing = float16_spacing(torch.maximum(old.abs(), new.abs()))
                        ulps = (old.double() - new.double()).abs() / spacing
                        stats["max_ulps_changed"] = max(stats["max_ulps_changed"], ulps.max().item())
                    err_old = (old.double() - ref).abs()
                    err_new = (new.double() - ref).abs()
                    stats["sum_err_unpatched"] += err_old.sum().item()
                    stats["sum_err_patched"] += err_new.sum().item()
                    stats["max_err_unpatched"] = max(stats["max_err_unpatched"], err_old.max().item())
                    stats["max_err_patched"] = max(stats["max_err_patched"], err_new.max().item())
                    if err_new.max() > err_old.max():
                        stats["seeds_patched_max_err_worse"] += 1
                        where = err_new.argmax()
                        excess = (err_new.max() - err_old.max()) / float16_spacing(new.reshape(-1)[where])
                        stats["worst_excess_in_output_ulps"] = max(stats["worst_excess_in_output_ulps"], excess.item())
            rows.append(stats)
    return rows


def timing(repeats: int = 15) -> Dict[str, float]:
    from kornia.geometry.subpix import ConvQuadInterp3d

    result = {}
    for shape in ((1, 1, 5, 40, 40), (1, 1, 5, 256, 256)):
        volume = (torch.rand(*shape, generator=torch.Generator().manual_seed(0)) * 0.01)
        for dtype in (torch.float16, torch.float32):
            times = {"unpatched": [], "patched": []}
            for _ in range(repeats):
                for label in ("unpatched", "patched"):
                    with scope(label):
                        leaf = volume.to(dtype).requires_grad_(True)
                        start = time.perf_counter()
                        coords, values = ConvQuadInterp3d(strict_maxima_bonus=0.0)(leaf)
                        (coords.sum() + values.sum()).backward()
                        times[label].append(time.perf_counter() - start)
            key = f"{str(dtype)[6:]} {'x'.join(map(str, shape))} fwd+bwd patched/unpatched"
            result[key] = statistics.median(times["patched"]) / statistics.median(times["unpatched"])
    return result


def compiled(applied: bool) -> Dict[str, str]:
    """torch.compile(fullgraph=True) of each function-level path, patched and unpatched."""
    import kornia.geometry.subpix as subpix

    out = {}
    names = ["conv_quad_interp3d"] + (["iterative_quad_interp3d"] if hasattr(subpix, "iterative_quad_interp3d") else [])
    volume = probe_volume("rand_0.01", 0).half()
    for name in names:
        for label in ("unpatched", "patched") if applied else ("unpatched",):
            with scope(label):
                function = getattr(subpix, name)
                torch._dynamo.reset()
                try:
                    compiled_fn = torch.compile(lambda x: function(x, strict_maxima_bonus=0.0), fullgraph=True)
                    fraction, bad = non_finite(compiled_fn, volume)
                    eager = function(volume, strict_maxima_bonus=0.0)
                    got = compiled_fn(volume)
                    same = all(torch.equal(a, b) for a, b in zip(eager, got))
                    out[f"{name} {label}"] = f"non-finite grad fraction {fraction:.4f}, output equals eager: {same}"
                except Exception as exc:  # report, do not hide
                    out[f"{name} {label}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                torch._dynamo.reset()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--survey", action="store_true", help="only the non-finite survey")
    parser.add_argument("--compile", action="store_true", help="also compile the refinement (slow)")
    parser.add_argument("--emit-json", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    report = kornia_halfpatch.apply(only=[FIX])
    applied = FIX in report.applied
    results = {"kornia": kornia.__version__, "torch": torch.__version__, "applied": applied,
               "reason": report.fixes[FIX].reason, "survey": survey(applied)}
    if applied and not args.survey:
        results["accuracy"] = accuracy()
        results["timing"] = timing()
    if args.compile:
        results["compile"] = compiled(applied)
    if args.emit_json:
        print(json.dumps(results, indent=1))
        return
    state = "applied" if applied else "not applied"
    print(f"kornia {results['kornia']}, torch {results['torch']}: {FIX} {state} ({results['reason']})")
    print("float16, 20 seeds each: seeds with non-finite input gradient (mean fraction) / seeds with non-finite output")
    for row in results["survey"]:
        cells = [
            f"{row[m]['seeds_nonfinite_grad']}/20 ({row[m]['mean_fraction']:.3g}) / {row[m]['seeds_nonfinite_output']}"
            for m in ("unpatched", "patched")
            if m in row
        ]
        print(f"  {row['path']:<34} {row['kind']:<10} " + "  ->  ".join(cells))
    for row in results.get("accuracy", []):
        print(
            f"  accuracy {row['path']:<34} {row['kind']:<10} changed {row['elements_changed']} elements "
            f"(max {row['max_ulps_changed']:.0f} ulp); "
            f"sum|err| vs float64 {row['sum_err_unpatched']:.4g} -> {row['sum_err_patched']:.4g}; "
            f"max {row['max_err_unpatched']:.4g} -> {row['max_err_patched']:.4g}; "
            f"seeds with larger max err {row['seeds_patched_max_err_worse']} "
            f"(by <= {row['worst_excess_in_output_ulps']:.2f} ulp)"
        )
    for key, ratio in results.get("timing", {}).items():
        print(f"  time {key}: {ratio:.3f}")
    for key, text in results.get("compile", {}).items():
        print(f"  compile {key}: {text}")


if __name__ == "__main__":
    main()
