"""Regenerate every golden reference: run in an environment with kornia 0.9.0 installed.

    tox -e golden            (or: python tests/golden/generate.py, with kornia 0.9.0)

Each ``gen_<name>.py`` beside this file exposes ``generate() -> dict`` built from kornia 0.9.0's
observable outputs on deterministic inputs; the dict is saved as ``<name>.pt`` with the versions
that produced it. Only outputs whose float32 semantics 0.9.0 shares with the supported releases
are stored (SPEC "What fixed means").
"""

import importlib
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main(names=None) -> int:
    import kornia

    if not kornia.__version__.startswith("0.9."):
        print(f"golden references come from kornia 0.9.x, found {kornia.__version__}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    for path in sorted(HERE.glob("gen_*.py")):
        name = path.stem[len("gen_"):]
        if names and name not in names:
            continue
        module = importlib.import_module(path.stem)
        data = module.generate()
        data["__versions__"] = {"kornia": str(kornia.__version__), "torch": str(torch.__version__)}
        torch.save(data, HERE / f"{name}.pt")
        print(f"wrote {name}.pt ({(HERE / f'{name}.pt').stat().st_size} bytes) from kornia {kornia.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
