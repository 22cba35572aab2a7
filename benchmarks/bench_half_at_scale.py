"""Benchmark for half at real image sizes: the shim's half path against the release's float32 and
against kornia 0.9.0's half, time and peak memory, per operation and size.

    .venv/bin/python benchmarks/bench_half_at_scale.py --oracle-python .tox/kornia090/bin/python
            [--sizes 4x3x1024x1024,4x3x2048x2048,1x3x4096x4096] [--dtypes float16,bfloat16]
            [--only gaussian_blur2d] [--reps 3] [--threads 2] [--cpu-half auto|native|float32]
    .venv/bin/python benchmarks/bench_half_at_scale.py --float32-overhead [--sizes ...] [--reps 5]

Every (who, operation, size, dtype) runs in a fresh interpreter: the input is built first, then
the time is the minimum of ``--reps`` calls after the first, and the memory is the peak growth of
the process's resident set during the first call (Linux's VmHWM, reset through
/proc/self/clear_refs just before the call, minus the resident set before it; on CUDA
``torch.cuda.max_memory_allocated``). "release float32" is the installed release without the
shim (the shim leaves float32 bitwise the release's); "shim" is the release with
``kornia_halfpatch.apply(cpu_half=...)``; "0.9.0" is kornia 0.9.0 in its own environment
(``--oracle-python``). The ratios shim/0.9.0 and shim/release float32 are what this prints for a
reader to check (<= 1.00 is the goal); absolute times depend on the machine and its load.

``--float32-overhead`` prints instead what the shim costs a float32 call: per operation, one
fresh process times the float32 call with the shim applied and with every fix reverted
(``kornia_halfpatch.testing.isolated(only=())``) in alternating rounds, and prints the ratio of
the minima (<= 1.03 is the goal).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = "4x3x1024x1024,4x3x2048x2048,1x3x4096x4096"
# The filters and warps are also measured at 1x3x4096x4096 (the third size); the other
# operations at the two batch sizes.
FILTERS_AND_WARPS = {"gaussian_blur2d", "box_blur", "sobel", "canny", "resize_antialias", "rotate",
                     "RandomAffine", "warp_affine", "median_blur"}


def cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """Name -> builder: given the (B, 3, H, W) image in its dtype, the call to time."""
    import torch
    import kornia

    def gaussian_blur2d(x):
        return lambda: kornia.filters.gaussian_blur2d(x, (11, 11), (1.5, 1.5))

    def resize_antialias(x):
        size = (x.shape[-2] // 2, x.shape[-1] // 3)
        return lambda: kornia.geometry.transform.resize(x, size, antialias=True)

    def ssim(x):
        other = (x.float() * 0.9 + 0.05).to(x.dtype)
        return lambda: kornia.metrics.ssim(x, other, 11)

    def equalize(x):
        return lambda: kornia.enhance.equalize(x)

    def rotate(x):
        angle = torch.linspace(-30.0, 30.0, x.shape[0]).to(x.dtype)
        return lambda: kornia.geometry.transform.rotate(x, angle)

    def random_affine(x):
        augment = kornia.augmentation.RandomAffine(degrees=30.0, translate=(0.1, 0.1), scale=(0.8, 1.2), p=1.0)

        def call():
            torch.manual_seed(0)
            return augment(x)

        return call

    def warp_affine(x):
        matrix = torch.tensor([[0.9, -0.1, 12.0], [0.12, 0.95, -7.0]]).expand(x.shape[0], 2, 3).to(x.dtype)
        return lambda: kornia.geometry.transform.warp_affine(x, matrix, (x.shape[-2], x.shape[-1]))

    def rgb_to_hsv(x):
        return lambda: kornia.color.rgb_to_hsv(x)

    def rgb_to_lab(x):
        return lambda: kornia.color.rgb_to_lab(x)

    def box_blur(x):
        return lambda: kornia.filters.box_blur(x, (9, 9))

    def sobel(x):
        return lambda: kornia.filters.sobel(x)

    def canny(x):
        return lambda: kornia.filters.canny(x)

    return {"gaussian_blur2d": gaussian_blur2d, "resize_antialias": resize_antialias, "ssim": ssim,
            "equalize": equalize, "rotate": rotate, "RandomAffine": random_affine, "warp_affine": warp_affine,
            "rgb_to_hsv": rgb_to_hsv, "rgb_to_lab": rgb_to_lab, "box_blur": box_blur, "sobel": sobel,
            "canny": canny, **other_cases()}


def other_cases() -> Dict[str, Callable[[Any], Callable[[], Any]]]:
    """More of the image-sized functions the shim promotes wholesale (``--others``): name -> builder."""
    import torch
    import kornia

    def per_image(x, *values):
        return torch.tensor([list(values)]).expand(x.shape[0], len(values)).to(x.dtype)

    def seeded(build):
        # Built when its case runs: a class the installed release lacks fails only its own case.
        def call(x):
            augment = build()

            def run():
                torch.manual_seed(0)
                return augment(x)
            return run
        return call

    def video(build):
        # the batch's images as the frames of one video (B, T, C, H, W)
        def call(x):
            augment, frames = build(), x[None]

            def run():
                torch.manual_seed(0)
                return augment(frames)
            return run
        return call

    augmentation = kornia.augmentation
    transform = kornia.geometry.transform
    return {
        "VideoSequential": video(lambda: augmentation.VideoSequential(
            augmentation.RandomAffine(30.0, p=1.0), augmentation.ColorJiggle(0.2, 0.2, 0.2, 0.0, p=1.0))),
        "VideoSequential colour": video(lambda: augmentation.VideoSequential(
            augmentation.ColorJiggle(0.2, 0.2, 0.2, 0.0, p=1.0), augmentation.RandomGamma((0.8, 1.2), p=1.0))),
        "AugmentationSequential": seeded(lambda: augmentation.AugmentationSequential(
            augmentation.RandomAffine(degrees=30.0, translate=(0.1, 0.1), scale=(0.8, 1.2), p=1.0))),
        "AugmentationSequential x2": seeded(lambda: augmentation.AugmentationSequential(
            augmentation.RandomRotation(30.0, p=1.0), augmentation.RandomPerspective(0.3, p=1.0))),
        "AugmentationSequential pipeline": seeded(lambda: augmentation.AugmentationSequential(
            augmentation.RandomResizedCrop((512, 512), p=1.0), augmentation.RandomHorizontalFlip(p=0.5),
            augmentation.ColorJiggle(0.2, 0.2, 0.2, 0.05, p=0.8), augmentation.RandomGrayscale(p=0.2))),
        "ColorJiggle": seeded(lambda: augmentation.ColorJiggle(0.2, 0.2, 0.2, 0.1, p=1.0)),
        "RandomResizedCrop": seeded(lambda: augmentation.RandomResizedCrop((512, 512), p=1.0)),
        "RandomHorizontalFlip": seeded(lambda: augmentation.RandomHorizontalFlip(p=1.0)),
        "RandomGaussianBlur": seeded(lambda: augmentation.RandomGaussianBlur((9, 9), (0.5, 2.0), p=1.0)),
        "RandomMedianBlur": seeded(lambda: augmentation.RandomMedianBlur((3, 3), p=1.0)),
        "RandomRotation90": seeded(lambda: augmentation.RandomRotation90((-1, 2), p=1.0)),
        "RandomElasticTransform": seeded(lambda: augmentation.RandomElasticTransform(p=1.0)),
        "RandomThinPlateSpline": seeded(lambda: augmentation.RandomThinPlateSpline(p=1.0)),
        "RandomFisheye": seeded(lambda: augmentation.RandomFisheye(
            torch.tensor([-0.3, 0.3]), torch.tensor([-0.3, 0.3]), torch.tensor([0.9, 1.0]), p=1.0)),
        "RandomLinearIllumination": seeded(lambda: augmentation.RandomLinearIllumination(p=1.0)),
        "RandomSaltAndPepperNoise": seeded(lambda: augmentation.RandomSaltAndPepperNoise(p=1.0)),
        "RandomPlanckianJitter": seeded(lambda: augmentation.RandomPlanckianJitter(p=1.0)),
        "RandomSnow": seeded(lambda: augmentation.RandomSnow(p=1.0)),
        "RandomClahe": seeded(lambda: augmentation.RandomClahe(p=1.0)),
        "CenterCrop": seeded(lambda: augmentation.CenterCrop((512, 512), p=1.0)),
        "RandomCrop": seeded(lambda: augmentation.RandomCrop((512, 512), p=1.0)),
        "RandomGaussianNoise": seeded(lambda: augmentation.RandomGaussianNoise(std=0.1, p=1.0)),
        "RandomMotionBlur": seeded(lambda: augmentation.RandomMotionBlur(9, 35.0, 0.5, p=1.0)),
        "RandomPlasmaBrightness": seeded(lambda: augmentation.RandomPlasmaBrightness(p=1.0)),
        "RandomChannelDropout": seeded(lambda: augmentation.RandomChannelDropout(p=1.0)),
        "RandomMixUpV2": seeded(lambda: augmentation.RandomMixUpV2(p=1.0)),
        "RandomJPEG": seeded(lambda: augmentation.RandomJPEG(p=1.0)),
        "RandomCutMixV2": seeded(lambda: augmentation.RandomCutMixV2(p=1.0)),
        "RandomMosaic": seeded(lambda: augmentation.RandomMosaic((512, 512), p=1.0)),
        "RandomJigsaw": seeded(lambda: augmentation.RandomJigsaw((4, 4), p=1.0)),
        "RandomPlasmaShadow": seeded(lambda: augmentation.RandomPlasmaShadow(p=1.0)),
        "RandomElasticTransform(31)": seeded(lambda: augmentation.RandomElasticTransform((31, 31), (8.0, 8.0), p=1.0)),
        "rgb_to_grayscale": lambda x: lambda: kornia.color.rgb_to_grayscale(x),
        "adjust_hue": lambda x: lambda: kornia.enhance.adjust_hue(x, 0.5),
        "adjust_saturation": lambda x: lambda: kornia.enhance.adjust_saturation(x, 1.5),
        "median_blur": lambda x: lambda: kornia.filters.median_blur(x, (3, 3)),
        "blur_pool2d": lambda x: lambda: kornia.filters.blur_pool2d(x, 3),
        "max_blur_pool2d": lambda x: lambda: kornia.filters.max_blur_pool2d(x, 3),
        "affine": lambda x: (lambda m: lambda: transform.affine(x, m))(
            torch.tensor([[0.9, -0.1, 12.0], [0.12, 0.95, -7.0]]).expand(x.shape[0], 2, 3).to(x.dtype)),
        "translate": lambda x: (lambda t: lambda: transform.translate(x, t))(per_image(x, 10.0, -5.0)),
        "scale": lambda x: (lambda t: lambda: transform.scale(x, t))(per_image(x, 1.2, 0.9)),
        "shear": lambda x: (lambda t: lambda: transform.shear(x, t))(per_image(x, 0.1, -0.05)),
        "center_crop": lambda x: lambda: transform.center_crop(x, (x.shape[-2] // 2, x.shape[-1] // 2)),
        "crop_and_resize": lambda x: (lambda boxes: lambda: transform.crop_and_resize(x, boxes, (512, 512)))(
            (torch.tensor([[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]]) * torch.tensor([x.shape[-1] * 0.6, x.shape[-2] * 0.6])
             + torch.tensor([x.shape[-1] * 0.2, x.shape[-2] * 0.1])).expand(x.shape[0], 4, 2).to(x.dtype)),
        "remap": lambda x: (lambda maps: lambda: transform.remap(x, *maps, align_corners=True))(
            [(m * 0.9 + 7.0).expand(x.shape[0], *m.shape).to(x.dtype) for m in torch.meshgrid(
                torch.arange(x.shape[-1], dtype=torch.float32), torch.arange(x.shape[-2], dtype=torch.float32),
                indexing="xy")]),
        "psnr": lambda x: (lambda y: lambda: kornia.metrics.psnr(x, y, 1.0))((x.float() * 0.9 + 0.05).to(x.dtype)),
        "ssim_loss": lambda x: (lambda y: lambda: kornia.losses.ssim_loss(x, y, 11))(
            (x.float() * 0.9 + 0.05).to(x.dtype)),
    }


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"^{key}:\s+(\d+)", status.read(), re.M).group(1))


def _reset_peak() -> bool:
    """Linux resets VmHWM to the current resident set on '5' written to clear_refs (4.0 on)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def measure(name: str, size: str, dtype_name: str, reps: int, threads: int, shim: bool, cpu_half: str) -> Dict[str, Any]:
    """In this (fresh) interpreter: one operation on one input."""
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(threads)
    if shim:
        sys.path.insert(0, str(ROOT))
        import kornia_halfpatch

        kornia_halfpatch.apply(**({} if cpu_half == "auto" else {"cpu_half": cpu_half}))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = [int(n) for n in size.split("x")]
    generator = torch.Generator().manual_seed(0)
    # A smooth image with texture (as photographs are): ramps plus noise, in [0, 1].
    image = torch.rand(shape, generator=generator)
    image.mul_(0.5).add_(torch.linspace(0, 0.5, shape[-1]))
    x = image.to(device=device, dtype=getattr(torch, dtype_name))
    del image
    try:
        call = cases()[name](x)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        before = _status_kib("VmRSS")
        exact = _reset_peak()
        with torch.no_grad():
            start = time.perf_counter()
            out = call()
            first = time.perf_counter() - start
            if device == "cuda":
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
            elif exact:
                peak = (_status_kib("VmHWM") - before) * 1024
            else:
                import resource

                peak = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
            del out
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                call()
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:90]}
    return {"seconds": min(times) if times else first, "peak_bytes": max(peak, 0), "device": device}


def measure_float32_overhead(name: str, size: str, reps: int, threads: int) -> Dict[str, Any]:
    """In this (fresh) interpreter: one operation's float32 call with the shim applied against the
    same call with every fix reverted, in alternating rounds (a shared machine's load and a
    process's own speed move both alike), each the minimum of its rounds' times."""
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(threads)
    sys.path.insert(0, str(ROOT))
    import kornia_halfpatch
    from kornia_halfpatch import testing

    kornia_halfpatch.apply()
    shape = [int(n) for n in size.split("x")]
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=generator).mul_(0.5).add_(torch.linspace(0, 0.5, shape[-1]))
    call = cases()[name](x)
    times: Dict[str, List[float]] = {"patched": [], "unpatched": []}
    try:
        with torch.no_grad():
            for _ in range(reps):
                for who in ("unpatched", "patched"):
                    with (testing.isolated(only=()) if who == "unpatched" else _nothing()):
                        call()  # the first call of a round warms what the revert or apply moved
                        start = time.perf_counter()
                        call()
                        times[who].append(time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:90]}
    return {who: min(t) for who, t in times.items()}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def run_case(python: str, name: str, size: str, dtype: str, reps: int, threads: int, shim: bool,
             cpu_half: str) -> Dict[str, Any]:
    command = [python, str(Path(__file__).resolve()), "--case", name, "--size", size, "--dtype", dtype,
               "--reps", str(reps), "--threads", str(threads), "--cpu-half", cpu_half] + ([] if shim else ["--no-shim"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 1800 s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:90]}


def _cell(result: Dict[str, Any]) -> str:
    if "error" in result:
        return result["error"][:40]
    return f"{result['seconds']:.3f} s, {result['peak_bytes'] / 2**20:.0f} MiB"


def _ratio(numerator: Dict[str, Any], denominator: Dict[str, Any], key: str) -> str:
    if "error" in numerator or "error" in denominator:
        return "-"
    value = numerator[key] / max(denominator[key], 1e-9 if key == "seconds" else 2**20)
    return f"**{value:.2f}**" if value > 1.0 else f"{value:.2f}"


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0 (tox -e kornia090)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--only", action="append", help="an operation's name (repeatable)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-half", default="auto", choices=("auto", "native", "float32"),
                        help="the shim's cpu_half option (auto: decided by this CPU's half arithmetic)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--no-shim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--others", action="store_true",
                        help="instead of the issue's operations, more of the functions the shim promotes wholesale")
    parser.add_argument("--float32-overhead", action="store_true",
                        help="instead: each operation's float32 time with the shim over without it, in one process")
    args = parser.parse_args(argv)
    if args.case and args.float32_overhead:
        print(json.dumps(measure_float32_overhead(args.case, args.size, args.reps, args.threads)))
        return 0
    if args.case:
        print(json.dumps(measure(args.case, args.size, args.dtype, args.reps, args.threads, not args.no_shim,
                                 args.cpu_half)))
        return 0
    import torch
    import kornia

    others = other_cases()
    names = [n for n in cases() if (n in args.only if args.only else (n in others) == args.others)]
    caps = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    if args.float32_overhead:
        return _float32_overheads(names, args, f"kornia {kornia.__version__}, torch {torch.__version__}, "
                                  f"{args.threads} threads, CPU capability {caps}")
    print(f"kornia {kornia.__version__}, torch {torch.__version__}, {args.threads} threads, CPU capability {caps}, "
          f"shim cpu_half={args.cpu_half}; time: min of {args.reps} calls after the first; memory: peak RSS growth "
          "during the first call, a fresh process per cell")
    print("| op | size | dtype | release float32 | shim half | 0.9.0 half | shim/0.9.0 time | shim/0.9.0 memory "
          "| shim/float32 time | shim/float32 memory |")
    print("| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for size in [s for s in args.sizes.split(",") if s]:
        for name in names:
            if size.startswith("1x") and name not in FILTERS_AND_WARPS:
                continue
            full = run_case(sys.executable, name, size, "float32", args.reps, args.threads, False, args.cpu_half)
            for dtype in [d for d in args.dtypes.split(",") if d]:
                shim = run_case(sys.executable, name, size, dtype, args.reps, args.threads, True, args.cpu_half)
                oracle = (run_case(args.oracle_python, name, size, dtype, args.reps, args.threads, False, args.cpu_half)
                          if args.oracle_python else {"error": "no --oracle-python"})
                print(f"| {name} | {size} | {dtype} | {_cell(full)} | {_cell(shim)} | {_cell(oracle)} | "
                      f"{_ratio(shim, oracle, 'seconds')} | {_ratio(shim, oracle, 'peak_bytes')} | "
                      f"{_ratio(shim, full, 'seconds')} | {_ratio(shim, full, 'peak_bytes')} |", flush=True)
    return 0


def _float32_overheads(names: List[str], args: Any, header: str) -> int:
    """The float32 table: the patched call's time over the unpatched one's (<= 1.03 is the goal)."""
    print(f"{header}; float32, the shim applied against reverted in alternating rounds of one fresh process "
          f"per cell, min of {args.reps} rounds each")
    print("| op | size | release float32 | with the shim | with / without |")
    print("| --- | --- | --- | --- | ---: |")
    for size in [s for s in args.sizes.split(",") if s]:
        for name in names:
            if size.startswith("1x") and name not in FILTERS_AND_WARPS:
                continue
            command = [sys.executable, str(Path(__file__).resolve()), "--float32-overhead", "--case", name,
                       "--size", size, "--reps", str(args.reps), "--threads", str(args.threads)]
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            result = json.loads(lines[-1]) if lines else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:90]}
            if "error" in result:
                print(f"| {name} | {size} | {result['error']} | | - |", flush=True)
                continue
            ratio = result["patched"] / result["unpatched"]
            mark = f"**{ratio:.3f}**" if ratio > 1.03 else f"{ratio:.3f}"
            print(f"| {name} | {size} | {result['unpatched']:.3f} s | {result['patched']:.3f} s | {mark} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
