"""Kornia 0.9.0's outputs, the oracle of the tests: run in an environment with kornia 0.9.0.

Each ``gen_<name>.py`` beside this file builds its values from kornia 0.9.0 on deterministic,
seeded inputs that every environment generates the same way. Two kinds:

``record() -> dict``  (``tox -e golden``, or ``python tests/golden/generate.py [names]``)
    Saved as ``tests/golden/<name>.pt`` and committed. Only for values that are the same on every
    machine: elementwise arithmetic (meshgrid's grids: IEEE-exact divisions of exact integer
    ramps) and recorded *inputs* (calibrated BatchNorm statistics), never the output of a
    convolution, matmul or reduction.

``live(recorded) -> dict``  (``tox -e oracle``, or ``python tests/golden/generate.py --live DIR [names]``)
    Outputs of instruction-set-dependent kernels (the descriptor networks): computed on the machine
    that runs the tests, in the same run, and saved as ``DIR/<name>-<conditions>.pt`` (see
    ``kernel_conditions.py``). The tests find them there, or run this script with the oracle's
    python themselves (``tests/oracle.py``).
"""

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _generators(names):
    sys.path.insert(0, str(HERE))
    for path in sorted(HERE.glob("gen_*.py")):
        name = path.stem[len("gen_"):]
        if not names or name in names:
            yield name, importlib.import_module(path.stem)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="generators to run (default: all)")
    parser.add_argument("--live", metavar="DIR", help="write live outputs into DIR instead of recording goldens")
    args = parser.parse_args(argv)

    import kornia

    import kernel_conditions

    if not kornia.__version__.startswith("0.9."):
        print(f"the oracle is kornia 0.9.x, found {kornia.__version__}", file=sys.stderr)
        return 2
    versions = {"kornia": str(kornia.__version__), "torch": str(torch.__version__)}
    for name, module in _generators(args.names):
        if args.live is None:
            if not hasattr(module, "record"):
                continue
            data = module.record()
            data["__versions__"] = versions
            torch.save(data, HERE / f"{name}.pt")
            print(f"recorded {name}.pt ({(HERE / f'{name}.pt').stat().st_size} bytes) from kornia {kornia.__version__}")
            continue
        if not hasattr(module, "live"):
            continue
        recorded = torch.load(HERE / f"{name}.pt") if (HERE / f"{name}.pt").exists() else {}
        data = module.live(recorded)
        data["__versions__"] = versions
        data["__conditions__"] = kernel_conditions.conditions()
        directory = Path(args.live)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / kernel_conditions.output_name(name)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        torch.save(data, partial)
        os.replace(partial, target)  # atomic: a parallel tox env reads a whole file or none
        print(json.dumps({"name": name, "path": str(target), "conditions": data["__conditions__"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
