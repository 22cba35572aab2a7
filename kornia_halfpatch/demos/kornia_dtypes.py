"""Live before/after demonstration of the kornia_dtypes fix, for the CLI: public kornia calls in
float16 and bfloat16, unpatched (error, non-finite or another dtype) and patched (finite, in
kornia 0.9.0's output dtype)."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch

from .. import sample_inputs
from .._model import Demonstration

FIX = "kornia_dtypes"


def _cases() -> List[Tuple[str, Callable[[torch.dtype], Any], bool]]:
    """(label, call, whether 0.9.0 keeps float32 instead of the input's dtype)."""
    import kornia

    def grayscale_augmentation(dtype: torch.dtype) -> Any:
        torch.manual_seed(0)
        return kornia.augmentation.RandomGrayscale(p=1.0)(sample_inputs.rgb_image(dtype)[0])

    return [
        ("color.rgb_to_hls, gray pixels", lambda d: kornia.color.rgb_to_hls(*sample_inputs.gray_patch_image(d)), False),
        ("filters.get_gaussian_discrete_kernel1d(9, 2.5)",
         lambda d: kornia.filters.get_gaussian_discrete_kernel1d(9, 2.5, dtype=d), False),
        ("geometry.conversions.normal_transform_pixel(1, 5)",
         lambda d: kornia.geometry.conversions.normal_transform_pixel(1, 5, dtype=d), False),
        ("filters.canny", lambda d: kornia.filters.canny(*sample_inputs.rgb_image(d))[0], False),
        ("augmentation.RandomGrayscale", grayscale_augmentation, False),
        ("enhance.image_histogram2d", lambda d: kornia.enhance.image_histogram2d(*sample_inputs.histogram_call(d))[0], True),
        ("losses.lovasz_softmax_loss",
         lambda d: kornia.losses.lovasz_softmax_loss(*sample_inputs.lovasz_softmax_call(d)), False),
        ("geometry.conversions.normalize_homography, single-row images",
         lambda d: kornia.geometry.conversions.normalize_homography(*sample_inputs.normalize_homography_call(d)), False),
        ("color.rgb_to_luv, black pixels", lambda d: kornia.color.rgb_to_luv(*sample_inputs.black_rgb_image(d)), False),
        ("feature.ScaleSpaceDetector LAFs",
         lambda d: (lambda m, x, n: m(x)[0])(*sample_inputs.scale_space_detect_call(d)), True),
    ]


def _outcome(function: Callable[[torch.dtype], Any], dtype: torch.dtype, wanted: torch.dtype) -> Tuple[str, bool]:
    try:
        out = function(dtype)
    except Exception as exc:  # noqa: BLE001 - the unpatched error is what the row shows
        return type(exc).__name__, False
    finite = bool(torch.isfinite(out.float()).all())
    text = f"{str(out.dtype).replace('torch.', '')}, {'finite' if finite else 'NON-FINITE'}"
    return text, finite and out.dtype == wanted


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("half calls: error, non-finite or another dtype vs finite in 0.9.0's dtype")
    holds = True
    for label, function, keeps_float32 in _cases():
        for dtype in (torch.float16, torch.bfloat16):
            wanted = torch.float32 if keeps_float32 else dtype
            with kornia_halfpatch.unpatched([FIX]):
                before, _ = _outcome(function, dtype, wanted)
            with kornia_halfpatch.patched(only=[FIX]):
                after, ok = _outcome(function, dtype, wanted)
            holds = holds and ok
            demo.cases.append((f"{label} [{str(dtype).replace('torch.', '')}]", before, after))
    demo.holds = holds
    return demo
