"""The accuracy table of docs/fixes/augmentation_pipeline.md: mean error against float64 over the ideal
error (the float32 result rounded once to the half dtype; 1.00 is the best possible).

    python tools/augmentation_accuracy.py            # with this worktree's shim: unpatched and patched
    .tox/kornia090/bin/python tools/augmentation_accuracy.py   # 0.9.0 (nothing patched)

A smooth 256x256 image (blurred noise, 2x3 channels), border padding, seeded: every run draws
the same parameters (in float32), and the references run on exactly the parameters and the half
image the half caller holds, widened. "unpatched" is the shim without its augmentation fix (the
other fixes, e.g. bfloat16 accepted, stay).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import kornia  # noqa: E402
import kornia.augmentation as K  # noqa: E402


def smooth_image(dtype):
    generator = torch.Generator().manual_seed(11)
    noise = torch.rand(2, 3, 32, 32, generator=generator)
    image = torch.nn.functional.interpolate(noise, size=(256, 256), mode="bicubic", align_corners=False)
    return image.clamp(0, 1).to(dtype)


MAKERS = {
    "RandomAffine": lambda: K.RandomAffine(30.0, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10.0,
                                           padding_mode="border", p=1.0),
    "RandomPerspective": lambda: K.RandomPerspective(0.4, p=1.0),
    "RandomRotation": lambda: K.RandomRotation(40.0, p=1.0),
}


def ratio(make, dtype, run):
    image = smooth_image(dtype)
    module = make()
    torch.manual_seed(5)
    out = run(lambda: module(image))
    exact = module(image.double(), params=module._params)
    single = module(image.float(), params=module._params)
    ideal = (single.to(dtype).double() - exact).abs().mean()
    error = (out.double() - exact).abs()
    return float(error.mean() / ideal), float(error.max())


def main() -> int:
    try:
        import kornia_halfpatch
    except ImportError:
        kornia_halfpatch = None
    modes = {"0.9.0" if kornia.__version__.startswith("0.9") else kornia.__version__: None}
    if kornia_halfpatch is not None and not kornia.__version__.startswith("0.9"):
        kornia_halfpatch.apply()

        def unpatched(call):
            with kornia_halfpatch.unpatched(["augmentation_pipeline"]):
                return call()

        modes = {f"{kornia.__version__} + shim, no augmentation fix": unpatched,
                 f"{kornia.__version__} + shim": lambda call: call()}
    print(f"| augmentation | dtype | {' | '.join(modes)} |")
    print("|---|---|" + "---|" * len(modes))
    for name, make in MAKERS.items():
        for dtype in (torch.float16, torch.bfloat16):
            cells = []
            for run in modes.values():
                try:
                    value, worst = ratio(make, dtype, run or (lambda call: call()))
                    cells.append(f"{value:.2f} (worst pixel {worst:.3f})")
                except Exception as exc:  # noqa: BLE001 - a refusal is a table entry
                    cells.append(type(exc).__name__)
            print(f"| {name} | {str(dtype).replace('torch.', '')} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
