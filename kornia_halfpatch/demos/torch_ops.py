"""Live before/after demonstration of the torch_ops fix, for the CLI (``kornia-halfpatch``):
public kornia calls that reach a torch op without a half CPU kernel, float16 and bfloat16,
unpatched (the error) and patched (a finite result in kornia 0.9.0's dtype)."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch

from .. import sample_inputs
from .._model import Demonstration


def _cases() -> List[Tuple[str, Callable[[torch.dtype], Any]]]:
    import kornia

    def guided(dtype: torch.dtype) -> Any:
        guidance, image, k, eps = sample_inputs.guided_multichannel(dtype)
        return kornia.filters.guided_blur(guidance, image, k, eps)

    def matcher(dtype: torch.dtype) -> Any:
        return kornia.feature.match_snn(*sample_inputs.descriptor_pair(dtype))[0]

    return [
        ("filters.guided_blur, 3-channel guidance", guided),
        ("enhance.zca_whiten", lambda d: kornia.enhance.zca_whiten(*sample_inputs.zca_input(d))),
        ("feature.laf.ellipse_to_laf", lambda d: kornia.feature.laf.ellipse_to_laf(*sample_inputs.ellipses(d))),
        ("feature.match_snn, 5 vs 6 descriptors", matcher),
        ("geometry.subpix.conv_soft_argmax3d",
         lambda d: kornia.geometry.subpix.conv_soft_argmax3d(*sample_inputs.soft_argmax_volume(d))[0]),
        ("geometry.epipolar.find_fundamental 7POINT",
         lambda d: kornia.geometry.epipolar.find_fundamental(*sample_inputs.fundamental_points(d))),
        ("geometry.epipolar.decompose_essential_matrix",
         lambda d: kornia.geometry.epipolar.decompose_essential_matrix(*sample_inputs.essential_matrix(d))[0]),
    ]


def _outcome(function: Callable[[torch.dtype], Any], dtype: torch.dtype) -> Tuple[str, bool]:
    try:
        out = function(dtype)
    except Exception as exc:  # noqa: BLE001 - the unpatched error is what the row shows
        return type(exc).__name__, False
    finite = bool(torch.isfinite(out.float()).all())
    return f"{str(out.dtype).replace('torch.', '')}, {'finite' if finite else 'NON-FINITE'}", finite


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("calls reaching a torch op without a half CPU kernel: error vs result")
    holds = True
    for label, function in _cases():
        for dtype in (torch.float16, torch.bfloat16):
            with kornia_halfpatch.unpatched(["torch_ops"]):
                before, _ = _outcome(function, dtype)
            with kornia_halfpatch.patched(only=["torch_ops"]):
                after, ok = _outcome(function, dtype)
            holds = holds and ok
            demo.cases.append((f"{label} [{str(dtype).replace('torch.', '')}]", before, after))
    demo.holds = holds
    return demo
