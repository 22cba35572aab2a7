"""Live before/after demonstration of the augmentation_pipeline fix, for the CLI: seeded geometric
augmentations in float16/bfloat16, mean error against a float64 run over the ideal error (the
float32 result rounded once: 1.00 is the best possible), unpatched versus patched; and the
half-precision failures the float32 run removes (ColorJiggle's NaN hue in a video,
RandomPlanckianJitter's float32 output)."""

from __future__ import annotations

from typing import Any, Callable, Tuple

import torch

from .._model import Demonstration

FIX = "augmentation_pipeline"


def _smooth_image(dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    noise = torch.rand(2, 3, 24, 24, generator=generator)
    image = torch.nn.functional.interpolate(noise, size=(182, 182), mode="bicubic", align_corners=False)
    return image.clamp(0, 1).to(dtype)


def _error_ratio(make: Callable[[], Any], dtype: torch.dtype, patched: bool) -> Tuple[str, float]:
    """The half run (seeded), then float64 and float32 runs of the installed release on the same
    parameters and the half image widened: only the computation's precision differs."""
    import kornia_halfpatch

    image = _smooth_image(dtype)
    module = make()
    torch.manual_seed(3)
    try:
        if patched:
            out = module(image)
        else:
            with kornia_halfpatch.unpatched([FIX]):
                out = module(image)
    except Exception as exc:  # noqa: BLE001 - the unpatched error is what the row shows
        return type(exc).__name__, float("inf")
    with kornia_halfpatch.unpatched([FIX]):
        exact = module(image.double(), params=module._params)
        single = module(image.float(), params=module._params)
    ideal = (single.to(dtype).double() - exact).abs().mean()
    ratio = float((out.double() - exact).abs().mean() / ideal)
    return f"{ratio:.2f} x ideal", ratio


def _outcome(call: Callable[[], torch.Tensor], wanted: torch.dtype) -> Tuple[str, bool]:
    try:
        out = call()
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, False
    finite = bool(torch.isfinite(out.float()).all())
    return f"{str(out.dtype).replace('torch.', '')}, {'finite' if finite else 'NON-FINITE'}", finite and out.dtype == wanted


def demonstrate() -> Demonstration:
    import kornia.augmentation as K
    import kornia_halfpatch

    demo = Demonstration("half augmentations: error vs float64 over the ideal (1.00 = float32 rounded once)")
    holds = True
    geometric = [
        ("RandomAffine", lambda: K.RandomAffine(30.0, translate=(0.1, 0.1), p=1.0)),
        ("RandomPerspective", lambda: K.RandomPerspective(0.4, p=1.0)),
        ("RandomRotation", lambda: K.RandomRotation(40.0, p=1.0)),
    ]
    for label, make in geometric:
        for dtype in (torch.float16, torch.bfloat16):
            before, _ = _error_ratio(make, dtype, patched=False)
            with kornia_halfpatch.patched(only=[FIX]):
                after, ratio = _error_ratio(make, dtype, patched=True)
            holds = holds and abs(ratio - 1.0) < 1e-9
            demo.cases.append((f"{label} [{str(dtype).replace('torch.', '')}]", before, after))

    def padded_video() -> torch.Tensor:
        # The affine warp pads with black: zero chroma, whose float16 hue is NaN in ColorJiggle.
        torch.manual_seed(0)
        video = _smooth_image(torch.float16)[:, :, :16, :16].unsqueeze(1).expand(2, 3, 3, 16, 16)
        return K.VideoSequential(K.RandomAffine(30.0, p=1.0), K.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0))(video)

    def planckian(dtype: torch.dtype) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            torch.manual_seed(0)
            return K.RandomPlanckianJitter(p=1.0)(_smooth_image(dtype)[:, :, :16, :16])

        return call

    others = [("VideoSequential(RandomAffine, ColorJiggle) [float16]", padded_video, torch.float16)]
    others += [(f"RandomPlanckianJitter [{str(d).replace('torch.', '')}]", planckian(d), d)
               for d in (torch.float16, torch.bfloat16)]
    for label, call, wanted in others:
        # Unpatched here means without this fix and without kornia_dtypes' rows for the same calls.
        with kornia_halfpatch.unpatched([FIX, "kornia_dtypes"]):
            before, _ = _outcome(call, wanted)
        with kornia_halfpatch.patched(only=[FIX]):
            after, ok = _outcome(call, wanted)
        holds = holds and ok
        demo.cases.append((label, before, after))
    demo.holds = holds
    demo.note = ("unpatched: kornia's own half run (bfloat16 accepted through kornia_dtypes' widened dtype check "
                 "for the error cases; refused without it)")
    return demo
