"""Benchmark for the ``feature_descriptors`` fix: SOSNet on CPU, batch 256.

    tox -e bench-oracle && .tox/bench/bin/python benchmarks/bench_feature_descriptors.py --oracle-python .tox/bench-oracle/bin/python

Measures, in one run, with the variants interleaved round by round and medians taken:

* float16 and bfloat16: patched installed kornia versus kornia 0.9.0 (the ``--oracle-python``
  interpreter), same seeded weights (tests/golden/gen_feature_descriptors.py, ``trained``
  configuration) and same inputs. Target: ratio <= 1.05.
* float32: patched versus unpatched installed kornia. Target: ratio <= 1.03.

Each interpreter is a worker process started once (``--worker``) that times forward passes on
request, so the two kornia versions alternate in time and share whatever load the machine has.
``--emit-json`` prints the result as JSON (for a combining runner) instead of the table.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from typing import Dict, List

from _harness import ROOT, Worker, serve, timed
GOLDEN_DIR = ROOT / "tests" / "golden"
BATCH = 256
DTYPES = ("float16", "bfloat16", "float32")


# --------------------------------------------------------------------------------------------
# Worker: one interpreter, one kornia


def worker(threads: int) -> None:
    sys.path.insert(0, str(GOLDEN_DIR))
    import torch

    import gen_feature_descriptors as gen
    import kornia
    import kornia_halfpatch

    if threads:
        torch.set_num_threads(threads)
    kornia_halfpatch.apply(only=["feature_descriptors"])
    golden = torch.load(GOLDEN_DIR / "feature_descriptors.pt")
    base = gen.build_network("sosnet", "trained", golden)
    patches = gen.textured_patches(BATCH, 21)
    models = {name: copy.deepcopy(base).to(getattr(torch, name)) for name in DTYPES}
    inputs = {name: patches.to(getattr(torch, name)) for name in DTYPES}

    def time_forward(request: Dict) -> Dict:
        model, x = models[request["dtype"]], inputs[request["dtype"]]
        with torch.no_grad():
            if request["patched"]:
                return {"times": timed(lambda: model(x), request["reps"])}
            with kornia_halfpatch.unpatched(["feature_descriptors"]):
                return {"times": timed(lambda: model(x), request["reps"])}

    serve({"kornia": kornia.__version__, "torch": torch.__version__, "threads": torch.get_num_threads()}, time_forward)


# --------------------------------------------------------------------------------------------
# Driver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-python", help="python of an environment with kornia 0.9.0")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=3, help="timed forwards per variant per round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: torch's default)")
    parser.add_argument("--emit-json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return 0

    local = Worker(__file__, sys.executable, args.threads)
    oracle = Worker(__file__, args.oracle_python, args.threads) if args.oracle_python else None
    variants = [("patched", "float32", True), ("unpatched", "float32", False)]
    for dtype in ("float16", "bfloat16"):
        variants.append(("patched", dtype, True))
        if oracle is not None:
            variants.append(("kornia 0.9.0", dtype, True))
    samples: Dict[str, List[float]] = {f"{who} {dtype}": [] for who, dtype, _ in variants}
    try:
        for round_index in range(args.rounds):
            # Alternate the order each round so neither side always runs first.
            order = variants if round_index % 2 == 0 else variants[::-1]
            for who, dtype, patched in order:
                source = oracle if who == "kornia 0.9.0" else local
                samples[f"{who} {dtype}"] += source.request(dtype=dtype, patched=patched, reps=args.reps)["times"]
    finally:
        local.close()
        if oracle is not None:
            oracle.close()

    medians = {key: statistics.median(values) for key, values in samples.items()}
    ratios = {"float32 patched/unpatched": medians["patched float32"] / medians["unpatched float32"]}
    targets = {"float32 patched/unpatched": 1.03}
    if oracle is not None:
        for dtype in ("float16", "bfloat16"):
            key = f"{dtype} patched/kornia 0.9.0"
            ratios[key] = medians[f"patched {dtype}"] / medians[f"kornia 0.9.0 {dtype}"]
            targets[key] = 1.05
    result = {
        "benchmark": "feature_descriptors: SOSNet forward, CPU, batch 256",
        "installed": local.info,
        "oracle": oracle.info if oracle else None,
        "median_seconds": medians,
        "ratios": ratios,
        "targets": targets,
        "met": {key: ratios[key] <= targets[key] for key in ratios},
        "samples_per_variant": args.rounds * args.reps,
    }
    if args.emit_json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['benchmark']}; installed kornia {local.info['kornia']}, torch {local.info['torch']}, "
          f"{local.info['threads']} threads; {result['samples_per_variant']} forwards per variant")
    for key, value in medians.items():
        print(f"  {key:<24} median {value * 1e3:8.1f} ms")
    for key, value in ratios.items():
        print(f"  {key:<30} {value:6.3f}  (target <= {targets[key]}: {'met' if result['met'][key] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
