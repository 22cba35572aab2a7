"""Live before/after demonstration of the warp_geometry fix, for the CLI (and the accuracy
measure its tests and benchmark share): a half warp's mean error against the float64 warp of
the same values, divided by the "ideal" error (the float32 warp of the same values rounded once
to the half dtype; 1.00 is the best a half result can be)."""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch

from .._model import Demonstration

FIX = "warp_geometry"
HALF_DTYPES = (torch.float16, torch.bfloat16)


def warp_test_image(kind: str, size: int, seed: int = 0, channels: int = 3) -> torch.Tensor:
    """(1, C, size, size) in [0, 1]: "smooth" (an 8x8 noise upsampled bicubically, clamped) or
    "noise" (uniform per pixel). Values are exact in bfloat16, so every dtype holds the same."""
    g = torch.Generator().manual_seed(seed)
    if kind == "noise":
        image = torch.rand(1, channels, size, size, generator=g)
    else:
        coarse = torch.rand(1, channels, 8, 8, generator=g, dtype=torch.float64)
        image = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)
        image = image.clamp(0, 1).float()
    return image.bfloat16().float()


def warp_calls(size: int, held: torch.dtype) -> Dict[str, Callable[..., torch.Tensor]]:
    """name -> call(image, mode, padding_mode) with parameters rounded to ``held`` (the half
    dtype a half caller holds them in), then given in the image's dtype."""
    import kornia
    from kornia.geometry import transform as T

    c = size / 2

    def affine_matrix(image: torch.Tensor) -> torch.Tensor:
        # a 17.5-degree rotation about the centre plus a 3.25 px shift (entries rounded to bfloat16)
        cos, sin = 0.9537169507482269, 0.3007057995042731
        m = torch.tensor([[[cos, -sin, c * (1 - cos) + c * sin + 3.3], [sin, cos, c * (1 - cos) - c * sin - 1.7]]],
                         dtype=torch.float64)
        return m.to(held).to(image.dtype)

    def homography(image: torch.Tensor) -> torch.Tensor:
        m = torch.cat([affine_matrix(image).double(), torch.tensor([[[0.27 / size, -0.13 / size, 1.0]]], dtype=torch.float64)], dim=1)
        return m.to(held).to(image.dtype)

    def remap_maps(image: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float64), torch.arange(size, dtype=torch.float64), indexing="ij")
        map_x = xs + 2.25 * torch.sin(ys / 13.0)
        map_y = ys * 0.96875 + 1.75
        return map_x[None].to(held).to(image.dtype), map_y[None].to(held).to(image.dtype)

    return {
        "warp_affine": lambda x, mode, pad: T.warp_affine(x, affine_matrix(x), (size, size), mode, pad, True),
        "warp_perspective": lambda x, mode, pad: T.warp_perspective(x, homography(x), (size, size), mode, pad, True),
        "remap": lambda x, mode, pad: T.remap(x, *remap_maps(x), mode, pad, True),
        "rotate": lambda x, mode, pad: T.rotate(x, torch.tensor([17.3]).to(held).to(x.dtype), None, mode, pad),
        "elastic_transform2d": lambda x, mode, pad: kornia.geometry.transform.elastic_transform2d(
            x, (torch.rand(1, 2, size, size, generator=torch.Generator().manual_seed(5)) * 2 - 1).to(held).to(x.dtype),
            (15, 15), (4.0, 4.0), (2.0, 2.0), False, mode, pad),
    }


def error_ratio(name: str, image: torch.Tensor, dtype: torch.dtype, mode: str, pad: str) -> float:
    """mean |half warp - float64 warp| / mean |float32 warp narrowed - float64 warp|, with the
    warps of the current kornia (patched or not) on the same values (image and parameters)."""
    call = warp_calls(image.shape[-1], dtype)[name]
    reference = call(image.double(), mode, pad)
    ideal = call(image.float(), mode, pad).to(dtype).double()
    half = call(image.to(dtype), mode, pad).double()
    ideal_error = (ideal - reference).abs().mean()
    return float((half - reference).abs().mean() / ideal_error)


def _ratio_or_error(name: str, image: torch.Tensor, dtype: torch.dtype) -> object:
    # A torch without a half CPU kernel the unpatched warp needs (affine_grid's baddbmm on 2.1,
    # grid_sample before 2.6) raises: that error is the "before".
    try:
        return error_ratio(name, image, dtype, "bilinear", "border")
    except (RuntimeError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: " + str(exc).splitlines()[0][:50]


def _shown(value: object) -> str:
    return f"{value:.2f}x" if isinstance(value, float) else str(value)


def demonstrate() -> Demonstration:
    import kornia_halfpatch

    demo = Demonstration("half warps: error vs float64 / ideal error (1.00 = the float32 warp rounded once)")
    holds = True
    size = 256
    image = warp_test_image("smooth", size)
    for name in ("warp_affine", "rotate", "remap"):
        for dtype in HALF_DTYPES:
            with kornia_halfpatch.unpatched([FIX]):
                before = _ratio_or_error(name, image, dtype)
            with kornia_halfpatch.patched(only=[FIX]):
                after = _ratio_or_error(name, image, dtype)
            ok = isinstance(after, float) and abs(after - 1.0) < 0.005
            holds = holds and ok
            demo.cases.append((f"{name} {str(dtype).replace('torch.', '')} {size}px", _shown(before), _shown(after)))
    demo.holds = holds
    return demo
