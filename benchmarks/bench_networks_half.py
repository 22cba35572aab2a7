"""Benchmark for ``networks_half``: kornia's networks in half against the same network in float32.

    .venv/bin/python benchmarks/bench_networks_half.py [--oracle-python .tox/kornia090/bin/python]
            [--only LoFTR] [--reps 3] [--threads 2]

Per network and half dtype: the half forward's time and peak memory over the float32 forward's
(ratios measured in the same run), with the shim in ``cpu_half="native"`` (the release's half
kernels: what a GPU or a CPU with half arithmetic runs; on this CPU float16 has no arithmetic and
takes torch's slow path, bfloat16 has ``avx512_bf16`` if the header says so), and the same for
kornia 0.9.0 where ``--oracle-python`` names its environment and it runs the network.

Every (who, network, dtype) is measured in a fresh interpreter: the time is the median of
``--reps`` calls after one warm-up call, the memory the peak growth of the resident set during the
first call (sampled every millisecond from /proc/self/statm; the weights and inputs are built
before, so it is what the forward allocates). The
networks are built with seeded random weights (no download) at the sizes below.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "float16", "bfloat16")


def cases() -> Dict[str, Callable[[], Tuple[Any, Callable[[Any, Any], Any]]]]:
    """name -> build() -> (module, call(module, dtype))."""
    import torch
    import kornia

    sys.path.insert(0, str(ROOT))  # the inputs, also in kornia 0.9.0's environment (which has no shim installed)
    from kornia_halfpatch.sample_inputs import blob_image

    def loftr():
        net = kornia.feature.LoFTR(pretrained=None)
        image = blob_image((1, 1, 240, 320))

        def call(net, dtype):
            return net({"image0": image.to(dtype), "image1": torch.roll(image, 5, -1).to(dtype)})

        return net, call

    def lightglue():
        from kornia.feature.lightglue import LightGlue

        net = LightGlue(features=None, n_layers=9)
        g = torch.Generator().manual_seed(5)
        k0 = torch.rand(1, 1024, 2, generator=g) * 300
        d0 = torch.nn.functional.normalize(torch.randn(1, 1024, 256, generator=g), dim=-1)
        d1 = d0 + 0.01 * torch.randn(1, 1024, 256, generator=g)
        size = torch.tensor([[320, 320]])

        def call(net, dtype):
            return net({"image0": {"keypoints": k0.to(dtype), "descriptors": d0.to(dtype), "image_size": size},
                        "image1": {"keypoints": (k0 + 1).to(dtype), "descriptors": d1.to(dtype), "image_size": size}})

        return net, call

    def tiny_vit():
        try:
            from kornia.contrib.models.tiny_vit import TinyViT
        except ImportError:
            from kornia.models.tiny_vit import TinyViT
        net = TinyViT.from_config("5m", img_size=224)
        image = blob_image((4, 3, 224, 224))
        return net, lambda net, dtype: net(image.to(dtype))

    def defmo():
        net = kornia.feature.DeFMO(pretrained=False)
        image = torch.cat([blob_image((1, 3, 64, 64)), blob_image((1, 3, 64, 64), 1)], 1)
        return net, lambda net, dtype: net(image.to(dtype))

    def dedode():
        from kornia.feature.dedode.dedode_models import get_detector

        net = get_detector("L", torch.float16)
        image = blob_image((1, 3, 128, 128))
        return net, lambda net, dtype: net(image.to(dtype))

    def sam_prompt():
        try:
            from kornia.contrib.models.sam.architecture.prompt_encoder import PromptEncoder
        except ImportError:
            from kornia.models.sam.architecture.prompt_encoder import PromptEncoder
        net = PromptEncoder(embed_dim=256, image_embedding_size=(64, 64), input_image_size=(1024, 1024),
                            mask_in_chans=16)
        points = torch.rand(8, 64, 2) * 1024
        labels = torch.ones(8, 64, dtype=torch.long)
        return net, lambda net, dtype: (net((points.to(dtype), labels), None, None), net.get_dense_pe())

    return {"LoFTR 320x240": loftr, "LightGlue 1024 points": lightglue, "TinyViT-5m 4x224": tiny_vit,
            "DeFMO 64x64": defmo, "DeDoDe-L detector 128x128": dedode, "SAM prompt encoder": sam_prompt}


class _RssSampler:
    """The growth of the resident set during a block, its peak over samples every millisecond
    (the process's lifetime peak RSS would include building and converting the network)."""

    def __init__(self) -> None:
        import threading

        self.page = os.sysconf("SC_PAGE_SIZE")
        self.before = self._rss()
        self.peak = self.before
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self._rss())
            self.stop.wait(0.001)

    def __enter__(self) -> "_RssSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def peak_growth(self) -> int:
        return self.peak - self.before


def measure(name: str, dtype_name: str, reps: int, threads: int, shim: bool) -> Dict[str, Any]:
    """In this (fresh) interpreter: one network in one dtype."""
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(threads)
    if shim:
        sys.path.insert(0, str(ROOT))
        import kornia_halfpatch

        kornia_halfpatch.apply(cpu_half="native")
    dtype = getattr(torch, dtype_name)
    try:
        build = cases()[name]
    except Exception as exc:  # noqa: BLE001 - a network this release does not have
        return {"error": f"{type(exc).__name__}: {exc}"[:100]}
    try:
        torch.manual_seed(0)
        net, call = build()
        net = net.eval().to(dtype)
        with torch.no_grad():
            torch.manual_seed(1)
            with _RssSampler() as sampler:
                call(net, dtype)
            peak = sampler.peak_growth
            times = []
            for _ in range(reps):
                torch.manual_seed(1)
                start = time.perf_counter()
                call(net, dtype)
                times.append(time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:100]}
    return {"seconds": statistics.median(times), "peak_bytes": peak}


def run_case(python: str, name: str, dtype: str, reps: int, threads: int, shim: bool) -> Dict[str, Any]:
    command = [python, str(Path(__file__).resolve()), "--case", name, "--dtype", dtype, "--reps", str(reps),
               "--threads", str(threads)] + ([] if shim else ["--no-shim"])
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:100]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", action="append", help="a network's name starts with this (repeatable)")
    parser.add_argument("--dtypes", default="float16,bfloat16",
                        help="the half dtypes (float16 takes torch's slow path on a CPU without its arithmetic: "
                             "minutes per network)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--no-shim", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.dtype, args.reps, args.threads, not args.no_shim)))
        return 0
    import torch
    import kornia

    names = [n for n in cases() if not args.only or any(n.startswith(o) for o in args.only)]
    caps = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    print(f"kornia {kornia.__version__} with the shim (cpu_half=native), torch {torch.__version__}, "
          f"{args.threads} threads, CPU capability {caps}; median of {args.reps} calls, memory = peak RSS growth "
          "during the first call")
    whos = [("shim", sys.executable, True)] + ([("0.9.0", args.oracle_python, False)] if args.oracle_python else [])
    print("| network | dtype | " + " | ".join(f"{w} time / float32 | {w} memory / float32" for w, _, _ in whos)
          + " | float32 time, memory (shim) |")
    print("| --- | --- | " + " | ".join("---: | ---:" for _ in whos) + " | --- |")
    for name in names:
        halves = [d for d in args.dtypes.split(",") if d]
        results = {(who, dtype): run_case(python, name, dtype, args.reps, args.threads, shim)
                   for who, python, shim in whos for dtype in ["float32"] + halves}
        base = results[("shim", "float32")]
        for dtype in halves:
            cells = []
            for who, _, _ in whos:
                half, full = results[(who, dtype)], results[(who, "float32")]
                if "error" in half or "error" in full:
                    cells += [(half.get("error") or full.get("error"))[:60], ""]
                else:
                    cells += [f"{half['seconds'] / full['seconds']:.2f}",
                              f"{half['peak_bytes'] / max(full['peak_bytes'], 1):.2f}"]
            ref = "" if "error" in base else f"{base['seconds']:.3f} s, {base['peak_bytes'] / 2**20:.0f} MiB"
            print(f"| {name} | {dtype} | " + " | ".join(cells) + f" | {ref} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
