"""Live before/after demonstration of networks_half for the CLI: small kornia networks with seeded
random weights converted to float16 and bfloat16, their error against the float64 network on the
same rounded weights and inputs over the bound (20x the float32 output rounded once; <= 1 passes),
or the release's error. Small inputs: a second or two in all.

Loaded only by the CLI and the tests that run it.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from .._model import Demonstration
from ..sample_inputs import blob_image

FIX = "networks_half"
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _first_class(*references: str) -> Optional[Any]:
    for reference in references:
        module_name, _, name = reference.partition(":")
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):
            continue
    return None


def _networks() -> Dict[str, Callable[[], Tuple[torch.nn.Module, torch.Tensor]]]:
    networks: Dict[str, Callable[[], Tuple[torch.nn.Module, torch.Tensor]]] = {}
    tiny_vit = _first_class("kornia.contrib.models.tiny_vit:TinyViT", "kornia.models.tiny_vit:TinyViT")
    if tiny_vit is not None:
        networks["TinyViT-5m 64px"] = lambda: (tiny_vit.from_config("5m", img_size=64), blob_image((1, 3, 64, 64)))
    position = _first_class("kornia.contrib.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom",
                            "kornia.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom")
    if position is not None:

        class _Points(torch.nn.Module):  # SAM's point encoding of 8 points in a 64x64 image
            def __init__(self) -> None:
                super().__init__()
                self.encoding = position(32)

            def forward(self, points: torch.Tensor) -> torch.Tensor:
                return self.encoding.forward_with_coords(points, (64, 64))

        networks["SAM point encoding"] = lambda: (_Points(), torch.rand(1, 8, 2, generator=torch.Generator().manual_seed(1)) * 63)
    return networks


def _relative(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float((out.double() - reference).abs().mean() / reference.abs().mean())


def _half_run(build: Callable[[], Tuple[torch.nn.Module, torch.Tensor]], dtype: torch.dtype) -> Tuple[Any, Any]:
    """(the half network and its input, on seeded random weights rounded to ``dtype``)."""
    torch.manual_seed(0)
    net, x = build()
    return net.eval().to(dtype), x.to(dtype)


def _references(net: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype) -> Tuple[torch.Tensor, float]:
    """(the float64 output on the same rounded weights and input, the bound: 20x the float32 output
    rounded once). Computed with the fix in force: the release refuses SAM's float64 points."""
    with torch.no_grad():
        reference = copy.deepcopy(net).double()(x.double())
        rounded = copy.deepcopy(net).float()(x.float()).to(dtype)
    return reference, 20 * max(_relative(rounded, reference), torch.finfo(dtype).eps / 2)


def _over_the_bound(net: torch.nn.Module, x: torch.Tensor, reference: torch.Tensor, bound: float) -> object:
    from .._kernels import widening_missing_kernels

    # The network's own half ops that this torch has no half CPU kernel for (torch 2.1: float16
    # convolutions) run widened, as a newer torch runs them: what is shown is the fix.
    with torch.no_grad(), widening_missing_kernels():
        try:
            out = net(x)
        except (RuntimeError, IndexError) as exc:
            return f"{type(exc).__name__}: " + str(exc).splitlines()[0][:48]
    return _relative(out, reference) / bound


def _shown(value: object) -> str:
    return f"{value:.2f}x the bound" if isinstance(value, float) else str(value)


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("kornia networks converted to half: error vs float64 over the bound (<= 1.00 passes)")
    holds = True
    for name, build in _networks().items():
        for dtype in HALF_DTYPES:
            net, x = _half_run(build, dtype)
            with kornia_halfpatch.patched(only=[FIX]):
                reference, bound = _references(net, x, dtype)
                after = _over_the_bound(net, x, reference, bound)
            with kornia_halfpatch.unpatched([FIX]):
                before = _over_the_bound(net, x, reference, bound)
            holds = holds and isinstance(after, float) and after <= 1.0
            demo.cases.append((f"{name} {str(dtype).replace('torch.', '')}", _shown(before), _shown(after)))
    demo.holds = holds
    return demo
