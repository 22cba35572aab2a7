"""Deterministic inputs the package itself runs on: the feature_patches probe's image and LAFs,
and the CLI demonstrations' calls (kornia_halfpatch/demos). Each builds from its own seeded
generator, never the global random stream. The tables' example calls, which only the tests use,
live in tests/examples.py."""

from __future__ import annotations

from typing import Tuple

import torch


# --------------------------------------------------------------------------------------------
# Images and LAFs for patch extraction (feature_patches)


def laf_inputs(
    dtype: torch.dtype = torch.float32, B: int = 2, N: int = 6, CH: int = 3, H: int = 48, W: int = 40
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Deterministic image and rotated LAFs, some crossing the border, several scales."""
    generator = torch.Generator().manual_seed(1234)
    img = torch.rand(B, CH, H, W, generator=generator, dtype=torch.float64)
    centre = torch.rand(B, N, 2, generator=generator, dtype=torch.float64) * torch.tensor([W, H], dtype=torch.float64)
    centre[:, 0] = torch.tensor([1.0, 2.0], dtype=torch.float64)  # on the border
    scale = 2.0 + 30.0 * torch.rand(B, N, 1, 1, generator=generator, dtype=torch.float64)
    angle = torch.rand(B, N, generator=generator, dtype=torch.float64) * 2.0 * 3.141592653589793
    cos, sin = angle.cos(), angle.sin()
    linear = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2) * scale
    laf = torch.cat([linear, centre.unsqueeze(-1)], dim=-1)
    return img.to(dtype), laf.to(dtype)


# --------------------------------------------------------------------------------------------
# Inputs of the torch_ops demonstrations (also row examples in tests/examples.py): small,
# well-posed, and exactly representable in float16 and bfloat16 where the float32 oracle must see
# the same values (inputs are rounded to the coarser bfloat16 grid first, then cast to ``dtype``).


def _rand(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=generator).bfloat16().float()


def _in(dtype: torch.dtype, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    return tuple(t.to(dtype) for t in tensors)


def guided_multichannel(dtype: torch.dtype) -> Tuple[object, ...]:
    """(3-channel guidance, 2-channel input, kernel 5, eps 0.01): the multichannel solve path."""
    g = torch.Generator().manual_seed(21)
    return _in(dtype, _rand(g, 1, 3, 12, 10), _rand(g, 1, 2, 12, 10)) + (5, 0.01)


def zca_input(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(20, 3) samples with correlated columns (a well-conditioned covariance)."""
    g = torch.Generator().manual_seed(23)
    base = _rand(g, 20, 3)
    return _in(dtype, torch.stack([base[:, 0], base[:, 0] * 0.5 + base[:, 1], base[:, 2]], 1).bfloat16().float())


def ellipses(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(1, 4, 5) ellipses x, y, a, b, c with a positive-definite form (a, c > b)."""
    g = torch.Generator().manual_seed(24)
    xy = _rand(g, 1, 4, 2) * 32
    a = 0.02 + _rand(g, 1, 4, 1) * 0.05
    c = 0.02 + _rand(g, 1, 4, 1) * 0.05
    b = (_rand(g, 1, 4, 1) - 0.5) * 0.01
    return _in(dtype, torch.cat([xy, a, b, c], -1).bfloat16().float())


def descriptor_pair(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """5 and 6 descriptors of 8 dimensions: below cdist's 25-point matmul threshold."""
    g = torch.Generator().manual_seed(26)
    return _in(dtype, _rand(g, 5, 8), _rand(g, 6, 8))


def soft_argmax_volume(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(27)
    return _in(dtype, _rand(g, 1, 2, 3, 8, 8))


def fundamental_points(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """Seven correspondences of a stereo pair and method '7POINT' (the det path in every release)."""
    g = torch.Generator().manual_seed(31)
    X = torch.cat([_rand(g, 1, 7, 2) * 2 - 1, 2 + 2 * _rand(g, 1, 7, 1)], -1)
    R = torch.tensor([[0.995, 0.0, 0.0998], [0.0, 1.0, 0.0], [-0.0998, 0.0, 0.995]])
    Y = X @ R.T + torch.tensor([0.5, 0.25, 0.125])
    x1 = X[..., :2] / X[..., 2:]
    x2 = Y[..., :2] / Y[..., 2:]
    return _in(dtype, x1.bfloat16().float(), x2.bfloat16().float()) + (None, "7POINT")


def _essential() -> torch.Tensor:
    # E = [t]x R for a rotation of about 0.1 rad around y and t = (1, 0.5, 0.25).
    R = torch.tensor([[0.995, 0.0, 0.0998], [0.0, 1.0, 0.0], [-0.0998, 0.0, 0.995]])
    t = torch.tensor([1.0, 0.5, 0.25])
    tx = torch.tensor([[0.0, -t[2], t[1]], [t[2], 0.0, -t[0]], [-t[1], t[0], 0.0]])
    return (tx @ R).unsqueeze(0).bfloat16().float()


def essential_matrix(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    return _in(dtype, _essential())


# --------------------------------------------------------------------------------------------
# Inputs of the kornia_dtypes demonstrations (also row examples). Images hold gray pixels (r = g = b: the zero-chroma
# case whose eps vanishes in float16) and values on the bfloat16 grid, so float32 sees exactly
# the half values.


def gray_patch_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(2, 3, 8, 8) RGB in [0, 1], the top rows gray (r = g = b)."""
    g = torch.Generator().manual_seed(41)
    image = _rand(g, 2, 3, 8, 8)
    image[:, :, :3] = image[:, :1, :3]
    return _in(dtype, image)


def rgb_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(52)
    return _in(dtype, _rand(g, 1, 3, 16, 16))


def histogram_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a (1, 1, 16, 16) image, min 0, max 1, 16 bins)."""
    g = torch.Generator().manual_seed(53)
    return _in(dtype, _rand(g, 1, 1, 16, 16)) + (0.0, 1.0, 16)


def lovasz_softmax_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(55)
    pred = (torch.randn(2, 3, 8, 8, generator=g)).bfloat16().float()
    return pred.to(dtype), torch.randint(0, 3, (2, 8, 8), generator=g)


def _textured_image(seed: int, height: int, width: int) -> torch.Tensor:
    """A (1, 1, H, W) image of smooth blobs on a ramp (detectors find features on it), on
    bfloat16's grid so every half dtype holds it exactly."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(height, dtype=torch.float32).view(height, 1)
    x = torch.arange(width, dtype=torch.float32).view(1, width)
    image = 0.2 * x / width
    for _ in range(12):
        cy, cx = (torch.rand(2, generator=g) * torch.tensor([height, width])).tolist()
        sigma = 2.0 + 4.0 * torch.rand(1, generator=g).item()
        image = image + 0.6 * torch.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * sigma**2))
    return (image / image.max()).view(1, 1, height, width).bfloat16().float()


def scale_space_detect_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(ScaleSpaceDetector(24), a textured (1, 1, 64, 80) image, 24 features)."""
    from kornia.feature import ScaleSpaceDetector

    return ScaleSpaceDetector(24), _textured_image(60, 64, 80).to(dtype), 24


def normalize_homography_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a shift + shear along x that keeps the row, source (1, 5), destination (1, 6)): single-row
    images, as warp_perspective normalises them."""
    homography = torch.tensor([[[1.0, 0.25, 1.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    return homography.to(dtype), (1, 5), (1, 6)


def black_rgb_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """A (1, 3, 4, 4) image whose lower half is black (rgb_to_luv divides by X + 15Y + 3Z)."""
    image = _rand(torch.Generator().manual_seed(64), 1, 3, 4, 4)
    image[..., 2:, :] = 0.0
    return _in(dtype, image)


def blob_image(shape: Tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """A smooth image in [0, 1] with structure (a ramp and five Gaussian blobs), expanded to
    ``shape``: what networks_half's tests, benchmark and demonstration feed kornia's networks
    (random weights find features in it; noise would make every output noise)."""
    generator = torch.Generator().manual_seed(seed)
    h, w = shape[-2:]
    y = torch.linspace(0, 1, h).view(h, 1)
    x = torch.linspace(0, 1, w).view(1, w)
    image = 0.3 * x + 0.2 * y
    for _ in range(5):
        cy, cx = torch.rand(2, generator=generator).tolist()
        image = image + 0.5 * torch.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 0.01)
    return (image / image.max()).expand(*shape).contiguous()
