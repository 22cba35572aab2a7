"""Live before/after demonstration of the feature_descriptors fix, for the CLI (``kornia-halfpatch``).

Loaded only by the CLI and the tests that run it (``Fix.demonstration`` names it as a string),
so importing the fix module builds no demo.
"""

from __future__ import annotations

from typing import Any, Callable, List

import torch

from .._model import Demonstration


def _outcome(run: Callable[[], torch.Tensor]) -> str:
    try:
        with torch.no_grad():
            out = run()
    except Exception as exc:  # noqa: BLE001 - the unpatched error is what we show
        message = str(exc).splitlines()[0]
        return f"{type(exc).__name__}: {message[:60]}"
    finite = torch.isfinite(out)
    if bool(finite.all()):
        return f"finite {tuple(out.shape)} {str(out.dtype)[6:]}"
    return f"{(~finite).float().mean().item():.0%} NaN/Inf"


def _untrained_hardnet8() -> torch.nn.Module:
    # HardNet8's orthogonal init takes seconds on CPU: build on the meta device, then fill.
    from kornia.feature import HardNet8

    with torch.device("meta"):
        module = HardNet8(pretrained=False)
    module = module.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for child in module.modules():
            if isinstance(child, torch.nn.Conv2d):
                bound = child.weight[0].numel() ** -0.5
                child.weight.uniform_(-bound, bound, generator=generator)
            elif isinstance(child, torch.nn.BatchNorm2d):
                child.reset_running_stats()
        module.mean.zero_()
        module.components.copy_(torch.eye(*module.components.shape))
    return module.eval()


def _demo_cases() -> List[Any]:
    import kornia.feature as KF

    # Untrained networks (kornia's defaults): bias-free convolutions and BatchNorm statistics
    # (0, 1) take a flat patch to an exact zero vector before the final normalization.
    return [
        ("SOSNet", lambda: KF.SOSNet(pretrained=False), (torch.float16, torch.bfloat16)),
        ("HyNet(is_bias=False)", lambda: KF.HyNet(pretrained=False, is_bias=False), (torch.float16, torch.bfloat16)),
        ("HardNet", lambda: KF.HardNet(pretrained=False), (torch.float16,)),
        ("HardNet8", _untrained_hardnet8, (torch.float16,)),
        ("SIFTDescriptor(32)", lambda: KF.SIFTDescriptor(32), (torch.float16,)),
        ("DenseSIFTDescriptor", lambda: KF.DenseSIFTDescriptor(), (torch.float16,)),
    ]


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("local descriptors on a flat 32x32 patch, CPU (unpatched vs patched)")
    holds = True
    patch = torch.full((2, 1, 32, 32), 0.5)
    for label, make, dtypes in _demo_cases():
        for dtype in dtypes:
            model = make().to(dtype)
            x = patch.to(dtype)
            # the release's own network: networks_cpu_half (float32 trunks, where the CPU or torch
            # lacks native float16) off too
            with kornia_halfpatch.unpatched(["feature_descriptors", "networks_cpu_half"]):
                before = _outcome(lambda: model(x))
            with kornia_halfpatch.patched(only=["feature_descriptors"]):
                after = _outcome(lambda: model(x))
            holds = holds and after.startswith("finite")
            demo.cases.append((f"{label} {str(dtype)[6:]}", before, after))
    # The same networks left in float32, called under torch.autocast: the trunk's convolutions
    # run in float16 and the flat patch's descriptor reaches the normalisation as half zeros.
    from .._precision import cpu_autocast_accepts

    for label, make, dtypes in _demo_cases():
        if torch.float16 not in dtypes or label.startswith("HyNet") or not cpu_autocast_accepts(torch.float16):
            continue  # (torch 2.1's CPU autocast refuses float16: no program meets this there)
        model = make()

        def under_autocast() -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.float16):
                return model(patch)

        with kornia_halfpatch.unpatched(["feature_descriptors", "networks_cpu_half"]):
            before = _outcome(under_autocast)
        with kornia_halfpatch.patched(only=["feature_descriptors"]):
            after = _outcome(under_autocast)
        holds = holds and after.startswith("finite")
        demo.cases.append((f"{label} float32 under float16 autocast", before, after))
    demo.holds = holds
    return demo
