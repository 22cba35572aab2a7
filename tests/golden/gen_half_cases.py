"""Kornia 0.9.0's results for single numerical cases of the releases' half path: the oracle of
tests/test_fix_kornia_dtypes.py and tests/test_fix_feature_descriptors.py (gradients).

Only :func:`live` (outputs of convolutions and reductions, computed on the machine that runs the
tests, see generate.py). Inputs are built here from seeded generators with torch alone, so every
environment builds the same bits; the tests import :func:`inputs` from this module.

* ``blur_pool/<name>/<k>/<dtype>``: ``blur_pool2d``, ``max_blur_pool2d``, ``BlurPool2D``,
  ``MaxBlurPool2D`` with kernel k on :func:`blur_pool_image` (k = 15 is left out: a float16
  depthwise convolution of side 15 never returns on CPUs with avx512_fp16, in 0.9.0 too).
* ``normalisation/<name>/<dtype>``: ``normal_transform_pixel(1, 5)``,
  ``normal_transform_pixel3d(1, 2, 5)``, ``(de)normalize_homography`` from (1, 5) to (1, 6) and
  ``normalize_homography3d`` from (1, 4, 5) to (1, 4, 6) (:func:`normalisation_calls`): a side of 1.
* ``grad/<name>``: 0.9.0's float32 input gradient of ``sum(output * weights)`` (:func:`projection`)
  for the gradient cases whose release float32 backward is out of the half range.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch

HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
BLUR_POOL_KERNELS = (3, 9)


def _rand(seed: int, *shape: int) -> torch.Tensor:
    # bfloat16-representable, so the half and float32 runs see the same values.
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16().float()


def blur_pool_image() -> torch.Tensor:
    return _rand(71, 1, 3, 16, 16)


def blur_pool_calls() -> Dict[str, Callable[[torch.Tensor, int], torch.Tensor]]:
    import kornia

    return {
        "blur_pool2d": lambda x, k: kornia.filters.blur_pool2d(x, k),
        "max_blur_pool2d": lambda x, k: kornia.filters.max_blur_pool2d(x, k),
        "BlurPool2D": lambda x, k: kornia.filters.BlurPool2D(k)(x),
        "MaxBlurPool2D": lambda x, k: kornia.filters.MaxBlurPool2D(k)(x),
    }


def normalisation_calls() -> Dict[str, Callable[[torch.dtype], torch.Tensor]]:
    """Each call with a side of 1 (the homographies: a shift and shear that keep the row/slice)."""
    from kornia.geometry import conversions

    homography = torch.tensor([[[1.0, 0.25, 1.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    homography3d = torch.tensor([[[1.0, 0.25, 0.0, 1.5], [0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0],
                                  [0.0, 0.0, 0.0, 1.0]]])
    return {
        "normal_transform_pixel": lambda d: conversions.normal_transform_pixel(1, 5, dtype=d),
        "normal_transform_pixel3d": lambda d: conversions.normal_transform_pixel3d(1, 2, 5, dtype=d),
        "normalize_homography": lambda d: conversions.normalize_homography(homography.to(d), (1, 5), (1, 6)),
        "denormalize_homography": lambda d: conversions.denormalize_homography(homography.to(d), (1, 5), (1, 6)),
        "normalize_homography3d": lambda d: conversions.normalize_homography3d(
            homography3d.to(d), (1, 4, 5), (1, 4, 6)),
    }


def gray_pixels() -> torch.Tensor:
    """(1, 3, 8, 8): a 4x4 block of gray pixels (r = g = b) in a random image."""
    image = _rand(72, 1, 3, 8, 8)
    image[..., 2:6, 2:6] = 0.5
    return image


def flat_patches() -> torch.Tensor:
    """(2, 1, 32, 32): a textured patch and a flat one."""
    return torch.cat([_rand(73, 1, 1, 32, 32), torch.full((1, 1, 32, 32), 0.5)])


def flat_image() -> torch.Tensor:
    """(1, 1, 24, 24): DenseSIFTDescriptor's input, flat."""
    return torch.full((1, 1, 24, 24), 0.5)


def projection(shape: Tuple[int, ...]) -> torch.Tensor:
    """A fixed random projection of an output, backpropagated (bfloat16-representable)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(74)).bfloat16().float()


def gradient_cases() -> Dict[str, Tuple[Callable[[], Callable[[torch.Tensor], torch.Tensor]], Callable[[], torch.Tensor]]]:
    """name -> (a factory of the call, its input)."""
    import kornia

    return {
        "rgb_to_hls": (lambda: kornia.color.rgb_to_hls, gray_pixels),
        "SIFTDescriptor": (lambda: kornia.feature.SIFTDescriptor(32), flat_patches),
        "DenseSIFTDescriptor": (lambda: kornia.feature.DenseSIFTDescriptor(), flat_image),
    }


def input_gradient(call: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    leaf = x.clone().requires_grad_(True)
    out = call(leaf)
    (grad,) = torch.autograd.grad((out.float() * projection(tuple(out.shape))).sum(), leaf)
    return grad


def live(recorded: Dict[str, object]) -> Dict[str, object]:
    outputs: Dict[str, object] = {}
    image = blur_pool_image()
    for name, call in blur_pool_calls().items():
        for k in BLUR_POOL_KERNELS:
            for dtype_name, dtype in HALF.items():
                outputs[f"blur_pool/{name}/{k}/{dtype_name}"] = call(image.to(dtype), k)
    for name, call in normalisation_calls().items():
        for dtype_name, dtype in HALF.items():
            outputs[f"normalisation/{name}/{dtype_name}"] = call(dtype)
    for name, (factory, make_input) in gradient_cases().items():
        outputs[f"grad/{name}"] = input_gradient(factory(), make_input())
    return outputs
