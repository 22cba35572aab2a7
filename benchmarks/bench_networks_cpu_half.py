"""Benchmark for ``networks_cpu_half``: kornia's convolutional networks in float16 on CPU.

    .tox/kornia082/bin/python benchmarks/bench_networks_cpu_half.py --oracle-python .tox/kornia090/bin/python

One run, variants interleaved round by round, medians taken; untrained networks (the weights do
not change the time), one thread by default:

* float16 with ``cpu_half="auto"`` (on this CPU: what auto picks, named in the header) and with
  ``cpu_half="float32"`` forced, each as a ratio to the same module in float32 (the
  target for auto: <= 1.15);
* float16 of kornia 0.9.0 (the ``--oracle-python`` interpreter, same seeded inputs): the
  speed-up of each mode over it;
* the native path against unpatched (cpu_half reverted): native installs nothing, so this ratio
  is the measurement noise (target <= 1.03);
* the extra memory of the cached float32 weights, per module.

Patch networks take 1 and 256 patches of 32x32; image networks (KeyNet, DISK) 1 and 4 images.
Workers are started once (``--worker``) and time calls on request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from _harness import ROOT, Worker
FIX = "networks_cpu_half"
PATCH_BATCHES = (1, 256)
IMAGE_BATCHES = (1, 4)


def cases() -> Dict[str, Tuple[Callable[[], Any], Callable[[int], Tuple[Any, ...]], Tuple[int, ...]]]:
    """name -> (module factory, batch -> inputs in float32, batches)."""
    import torch
    import kornia.feature as KF

    def patches(n: int) -> Tuple[Any, ...]:
        return (torch.rand(n, 1, 32, 32, generator=torch.Generator().manual_seed(n)),)

    def gray(n: int) -> Tuple[Any, ...]:
        return (torch.rand(n, 1, 256, 256, generator=torch.Generator().manual_seed(n)),)

    def rgb(n: int) -> Tuple[Any, ...]:
        return (torch.rand(n, 3, 128, 128, generator=torch.Generator().manual_seed(n)),)

    def lafs(n: int) -> Tuple[Any, ...]:
        g = torch.Generator().manual_seed(n)
        centers = 40 + torch.rand(1, n, 2, generator=g) * 176
        scale = 6 + torch.rand(1, n, 1, 1, generator=g) * 10
        laf = torch.cat([scale * torch.eye(2).expand(1, n, 2, 2), centers.unsqueeze(-1)], -1)
        return (laf, torch.rand(1, 1, 256, 256, generator=g))

    def hardnet8() -> Any:
        with torch.device("meta"):
            module = KF.HardNet8(pretrained=False)
        module = module.to_empty(device="cpu")
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.uniform_(-0.05, 0.05)
            for buffer in module.buffers():
                if buffer.is_floating_point():
                    buffer.uniform_(0.5, 1.0)
        return module

    return {
        "SOSNet": (lambda: KF.SOSNet(pretrained=False), patches, PATCH_BATCHES),
        "HardNet": (lambda: KF.HardNet(pretrained=False), patches, PATCH_BATCHES),
        "HardNet8": (hardnet8, patches, PATCH_BATCHES),
        "HyNet": (lambda: KF.HyNet(pretrained=False), patches, PATCH_BATCHES),
        "TFeat": (lambda: KF.TFeat(pretrained=False), patches, PATCH_BATCHES),
        "OriNet": (lambda: KF.OriNet(pretrained=False), patches, PATCH_BATCHES),
        "AffNet (LAFs)": (lambda: KF.LAFAffNetShapeEstimator(pretrained=False), lafs, PATCH_BATCHES),
        "KeyNet 256x256": (lambda: KF.KeyNet(pretrained=False), gray, IMAGE_BATCHES),
        "DISK 128x128": (lambda: KF.DISK(), rgb, IMAGE_BATCHES),
    }


def worker(threads: int) -> None:
    sys.path.insert(0, str(ROOT))
    import warnings

    import torch
    import kornia
    import kornia_halfpatch

    warnings.simplefilter("ignore")
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    built = cases()
    modules: Dict[Tuple[str, str], Any] = {}
    # Every fix (feature_descriptors makes SOSNet/HyNet run in float16 at all); cpu_half's mode varies.
    report = kornia_halfpatch.apply()
    auto = report.facts.get(FIX, report.fixes[FIX].reason)
    print(json.dumps({"ready": True, "kornia": kornia.__version__, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "auto": auto}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        name, dtype_name, mode, batch = request["case"], request["dtype"], request["mode"], request["batch"]
        factory, inputs, _ = built[name]
        dtype = getattr(torch, dtype_name)
        try:
            if mode == "unpatched":
                kornia_halfpatch.revert([FIX])
            else:
                kornia_halfpatch.apply(cpu_half=mode)
            key = (name, dtype_name)
            if key not in modules:
                torch.manual_seed(0)
                modules[key] = factory().eval().to(dtype)
            module = modules[key]
            args = tuple(a.to(dtype) if a.is_floating_point() else a for a in inputs(batch))
            times = []
            with torch.no_grad():
                module(*args)  # warm-up (and, in float32 mode, the cached float32 weights)
                cached = _cached_bytes(module)
                for _ in range(request["reps"]):
                    start = time.perf_counter()
                    module(*args)
                    times.append(time.perf_counter() - start)
            print(json.dumps({"times": times, "cached_bytes": cached}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:80]}"}), flush=True)


def _cached_bytes(module: Any) -> int:
    try:
        from kornia_halfpatch.fixes.networks_cpu_half import cached_float32_bytes
    except Exception:  # noqa: BLE001 - kornia 0.9.0's worker: nothing cached
        return 0
    return cached_float32_bytes(module)


# (who, dtype, mode): who is "local" or "0.9.0"
VARIANTS = (
    ("local", "float32", "auto"),
    ("local", "float16", "auto"),
    ("local", "float16", "float32"),
    ("local", "float16", "unpatched"),
    ("0.9.0", "float16", "unpatched"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", action="append", help="benchmark only this module (repeatable)")
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return 0
    sys.path.insert(0, str(ROOT))
    table = cases()
    names = [n for n in table if not args.only or n in args.only]
    local = Worker(__file__, sys.executable, args.threads)
    oracle = Worker(__file__, args.oracle_python, args.threads) if args.oracle_python else None
    variants = [(name, batch) + v for name in names for batch in table[name][2] for v in VARIANTS
                if v[0] == "local" or oracle is not None]
    samples: Dict[tuple, List[float]] = {v: [] for v in variants}
    cached: Dict[tuple, int] = {}
    errors: Dict[tuple, str] = {}
    started = time.perf_counter()
    try:
        for index in range(args.rounds):
            for variant in (variants if index % 2 == 0 else variants[::-1]):
                name, batch, who, dtype, mode = variant
                if variant in errors:
                    continue
                source = oracle if who == "0.9.0" else local
                answer = source.request(case=name, batch=batch, dtype=dtype, mode=mode, reps=args.reps)
                if "error" in answer:
                    errors[variant] = answer["error"]
                else:
                    samples[variant] += answer["times"]
                    if answer.get("cached_bytes"):  # built once per module, at its first float32-mode call
                        cached[name] = answer["cached_bytes"]
    finally:
        local.close()
        if oracle is not None:
            oracle.close()
    median = {v: statistics.median(s) for v, s in samples.items() if s}
    rows = []
    for name in names:
        for batch in table[name][2]:
            t = lambda who, dtype, mode: median.get((name, batch, who, dtype, mode))  # noqa: E731
            f32, auto, forced = t("local", "float32", "auto"), t("local", "float16", "auto"), t("local", "float16", "float32")
            unpatched, upstream = t("local", "float16", "unpatched"), t("0.9.0", "float16", "unpatched")
            ratio = lambda a, b: a / b if a and b else None  # noqa: E731
            rows.append({
                "module": name, "batch": batch, "float32 ms": f32 and f32 * 1e3,
                "f16 auto/f32": ratio(auto, f32), "f16 float32-mode/f32": ratio(forced, f32),
                "0.9.0 f16/auto": ratio(upstream, auto), "0.9.0 f16/float32-mode": ratio(upstream, forced),
                "auto/unpatched": ratio(auto, unpatched),
                "cached MiB": cached.get(name, 0) / 2**20,
                "errors": {"/".join(map(str, k[2:])): e for k, e in errors.items() if k[:2] == (name, batch)},
            })
    result = {"benchmark": "cpu_half: float16 networks on CPU", "installed": local.info,
              "oracle": oracle.info if oracle else None, "rows": rows, "rounds": args.rounds, "reps": args.reps,
              "seconds": time.perf_counter() - started}
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    info = local.info
    print(f"{result['benchmark']}; kornia {info['kornia']}, torch {info['torch']}, {info['threads']} thread(s); "
          f"{args.rounds * args.reps} calls per variant; {result['seconds']:.0f} s")
    print(f"auto here: {info['auto']}")
    fmt = lambda v, spec=".2f": format(v, spec) if isinstance(v, float) else "-"  # noqa: E731
    print(f"  {'module':<16} {'batch':>5} {'f32 ms':>8} {'auto/f32':>9} {'f32mode/f32':>11} "
          f"{'0.9.0/auto':>10} {'0.9.0/f32mode':>13} {'auto/unp':>8} {'cache MiB':>9}")
    for r in rows:
        print(f"  {r['module']:<16} {r['batch']:>5} {fmt(r['float32 ms'], '.1f'):>8} {fmt(r['f16 auto/f32']):>9} "
              f"{fmt(r['f16 float32-mode/f32']):>11} {fmt(r['0.9.0 f16/auto']):>10} {fmt(r['0.9.0 f16/float32-mode']):>13} "
              f"{fmt(r['auto/unpatched'], '.3f'):>8} {fmt(r['cached MiB'], '.2f'):>9}")
        for what, error in r["errors"].items():
            print(f"      {what}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
