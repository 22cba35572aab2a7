"""Accuracy of cpu_half's two modes against float64, for the README (one run, this machine).

    .tox/kornia082/bin/python benchmarks/accuracy_cpu_half.py

Untrained seeded SOSNet and HardNet in float16, 256 random 32x32 patches. The reference is the
float64 forward of the same float16 weights and patches (widened exactly), so the error is the
arithmetic's alone: "native" is the release's float16 trunk (feature_descriptors applied: its final
normalization in float32, as 0.9.0), "float32" is cpu_half's float32 mode. Errors are on unit
descriptors (L2-normalized): max and mean |d - d64| over all components.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import torch
    import kornia
    import kornia.feature as KF
    import kornia_halfpatch

    torch.set_num_threads(1)
    patches = torch.rand(256, 1, 32, 32, generator=torch.Generator().manual_seed(0)).half()
    print(f"kornia {kornia.__version__}, torch {torch.__version__}, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}; error against float64, 256 patches")
    print(f"  {'module':<8} {'mode':<8} {'max abs':>10} {'mean abs':>10}")
    for name, factory in (("SOSNet", lambda: KF.SOSNet(pretrained=False)), ("HardNet", lambda: KF.HardNet(pretrained=False))):
        torch.manual_seed(0)
        module = factory().eval().half()
        with torch.no_grad():
            reference = copy.deepcopy(module).double()(patches.double())
            for mode in ("native", "float32"):
                kornia_halfpatch.apply(cpu_half=mode)
                error = (module(patches).double() - reference).abs()
                print(f"  {name:<8} {mode:<8} {error.max().item():10.2e} {error.mean().item():10.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
