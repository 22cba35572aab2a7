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
    # float32 inputs under torch.autocast: half appears inside kornia (autocast's convolutions and
    # matmuls); patched, the answer is the float32 call outside autocast.
    from .._precision import cpu_autocast_accepts

    for label, function in _autocast_cases():
        reference = function()
        for dtype in (torch.float16, torch.bfloat16):
            if not cpu_autocast_accepts(dtype):
                continue  # torch 2.1's CPU autocast refuses float16: no program meets this there
            with kornia_halfpatch.unpatched([FIX]):
                before, _ = _autocast_outcome(function, dtype, reference)
            with kornia_halfpatch.patched(only=[FIX]):
                after, ok = _autocast_outcome(function, dtype, reference)
            holds = holds and ok
            demo.cases.append((f"{label} [float32 under {str(dtype).replace('torch.', '')} autocast]", before, after))
    demo.holds = holds
    return demo


def _autocast_cases() -> List[Tuple[str, Callable[[], Any]]]:
    import kornia

    images = sample_inputs.rgb_image(torch.float32)[0], sample_inputs.rgb_image(torch.float32)[0].flip(-1)
    return [
        ("metrics.ssim", lambda: kornia.metrics.ssim(images[0], images[1], 5)),
        ("geometry.solve_pnp_dlt", lambda: kornia.geometry.solve_pnp_dlt(*_PNP)),
    ]


def _pnp_scene() -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    world = torch.rand(1, 10, 3, generator=generator) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])
    intrinsics = torch.tensor([[[100.0, 0.0, 50.0], [0.0, 100.0, 50.0], [0.0, 0.0, 1.0]]])
    projected = (intrinsics @ world.transpose(1, 2)).transpose(1, 2)
    return world, projected[..., :2] / projected[..., 2:], intrinsics


_PNP = _pnp_scene()


def _autocast_outcome(function: Callable[[], Any], dtype: torch.dtype, reference: torch.Tensor) -> Tuple[str, bool]:
    try:
        with torch.autocast("cpu", dtype=dtype):
            out = function()
    except Exception as exc:  # noqa: BLE001 - the unpatched error is what the row shows
        return type(exc).__name__, False
    error = (out.double() - reference.double()).abs().max().item()
    return f"{str(out.dtype).replace('torch.', '')}, off by {error:.2g}", error == 0
