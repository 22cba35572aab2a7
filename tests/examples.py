"""Example calls of the fix tables' targets, keyed by target label (``Target.label``):
``EXAMPLES[label](dtype)`` -> the positional arguments of one call, floating tensors in ``dtype``
with values exact in float16 and bfloat16 (so float32 sees the half values). The contract
battery (tests/test_rows.py) calls every row, and every hand-written target listed here, with
them in each dtype; a target without an example is in ``EXEMPT`` with the reason and where it
is tested. Deterministic: each input builds from its own seeded generator.

The inputs the package runs on itself (a probe's, the CLI demonstrations') stay in
kornia_halfpatch/sample_inputs.py and are imported from there.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import torch

from kornia_halfpatch.sample_inputs import (  # noqa: F401 - shared with the demonstrations
    _essential,
    _in,
    _rand,
    _textured_image,
    black_rgb_image,
    descriptor_pair,
    ellipses,
    essential_matrix,
    fundamental_points,
    gray_patch_image,
    guided_multichannel,
    histogram_call,
    lovasz_softmax_call,
    normalize_homography_call,
    rgb_image,
    scale_space_detect_call,
    soft_argmax_volume,
    zca_input,
)

# --------------------------------------------------------------------------------------------
# Response volumes for the sub-voxel refinement (geometry_subpix)

PROBE_SHAPE = (1, 1, 5, 40, 40)


def blob_volume(seed: int, shape: Tuple[int, int, int, int, int] = PROBE_SHAPE) -> torch.Tensor:
    """A smooth response volume: twelve Gaussian blobs (spatial sigma 1.5-4.5 px, scale sigma 1
    level), amplitudes 0.2-1, normalized to a maximum of 1. Smooth means small second
    derivatives, so small Hessian determinants: the case float16 handles worst."""
    generator = torch.Generator().manual_seed(seed)
    depth, height, width = shape[-3:]
    d = torch.arange(depth, dtype=torch.float64).view(depth, 1, 1)
    h = torch.arange(height, dtype=torch.float64).view(1, height, 1)
    w = torch.arange(width, dtype=torch.float64).view(1, 1, width)
    volume = torch.zeros(depth, height, width, dtype=torch.float64)
    extent = torch.tensor([depth - 1, height - 1, width - 1], dtype=torch.float64)
    for _ in range(12):
        cd, ch, cw = (torch.rand(3, generator=generator, dtype=torch.float64) * extent).tolist()
        sigma = 1.5 + 3.0 * torch.rand(1, generator=generator, dtype=torch.float64).item()
        amplitude = 0.2 + 0.8 * torch.rand(1, generator=generator, dtype=torch.float64).item()
        volume += amplitude * torch.exp(-((h - ch) ** 2 + (w - cw) ** 2) / (2 * sigma**2) - (d - cd) ** 2 / 2)
    return (volume / volume.max()).float().expand(shape).contiguous()


def probe_volume(kind: str, seed: int) -> torch.Tensor:
    """float32 ``(1, 1, 5, 40, 40)``: ``"rand"`` is ``torch.rand`` after ``torch.manual_seed(seed)``,
    ``"rand_0.01"`` the same scaled to ``[0, 0.01]``, ``"blob"`` :func:`blob_volume`."""
    if kind == "blob":
        return blob_volume(seed)
    volume = torch.rand(PROBE_SHAPE, generator=torch.Generator().manual_seed(seed))
    if kind == "rand":
        return volume
    if kind == "rand_0.01":
        return volume * 0.01
    raise ValueError(f"unknown probe volume {kind!r}")


# --------------------------------------------------------------------------------------------
# Example calls: ``factory(dtype)`` -> positional arguments, floating tensors in ``dtype``. The
# contract battery (tests/test_rows.py) calls each target with them in every dtype (EXAMPLES).


def cramer_system(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """Nine (1, 1, 3, 6, 6) solve inputs of [0, 0.01]-response size: Hessian entries ~1e-2 with
    a dominant diagonal (well posed), right-hand sides ~1e-3."""
    generator = torch.Generator().manual_seed(7)
    shape = (1, 1, 3, 6, 6)
    diagonal = [-(0.008 + 0.004 * torch.rand(shape, generator=generator)) for _ in range(3)]
    off = [0.001 * (torch.rand(shape, generator=generator) - 0.5) for _ in range(3)]
    rhs = [0.002 * (torch.rand(shape, generator=generator) - 0.5) for _ in range(3)]
    return tuple(t.to(dtype) for t in diagonal + off + rhs)


def fft_conv_call(dtype: torch.dtype) -> Tuple[object, ...]:
    g = torch.Generator().manual_seed(22)
    return _in(dtype, _rand(g, 1, 2, 16, 16), _rand(g, 1, 5, 5) / 8)


def zca_inverse_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(ZCAWhitening(compute_inv=True) fitted, whitened data). A half fit keeps float32
    statistics (zca_mean's row, as 0.9.0), so a half caller's module is the float32-fitted one."""
    from kornia.enhance import ZCAWhitening

    fit_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    (data,) = zca_input(fit_dtype)
    zca = ZCAWhitening(compute_inv=True).fit(data)
    return (zca,) + _in(dtype, zca(data).detach().bfloat16().float())


def warp_kpts_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """LoFTR's warp_kpts: keypoints, two constant depth maps, a pose and intrinsics."""
    g = torch.Generator().manual_seed(25)
    kpts = (_rand(g, 1, 6, 2) * 14).round()
    depth = torch.full((1, 16, 16), 2.0)
    pose = torch.eye(4).unsqueeze(0)
    pose[:, 0, 3] = 0.125
    K = torch.tensor([[[16.0, 0.0, 8.0], [0.0, 16.0, 8.0], [0.0, 0.0, 1.0]]])
    return _in(dtype, kpts, depth, depth, pose, K, K)


def warp3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """_transform_warp_impl3d(src, a translation-and-scale 4x4, sizes, modes)."""
    g = torch.Generator().manual_seed(28)
    M = torch.eye(4).unsqueeze(0)
    M[:, :3, :3] *= 1.25
    M[:, :3, 3] = torch.tensor([0.5, -0.25, 1.0])
    return _in(dtype, _rand(g, 1, 1, 4, 6, 6), M) + ((4, 6, 6), (4, 6, 6), "bilinear", "zeros", False)


def _homography_points(g: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    points1 = (_rand(g, 1, 8, 2) * 8).round()
    H = torch.tensor([[1.0, 0.125, 1.0], [-0.0625, 1.0, 0.5], [0.0, 0.0, 1.0]])
    points2 = points1 @ H[:2, :2].T + H[:2, 2]
    return points1, points2.bfloat16().float()


def homography_points(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, *_homography_points(torch.Generator().manual_seed(29)))


def homography_lines(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(1, 6, 2, 2) line segments and the same segments under a similarity."""
    p1, p2 = _homography_points(torch.Generator().manual_seed(30))
    p1 = torch.cat([p1, p1[:, 1:].roll(1, 1)], 1)[:, :12]
    p2 = torch.cat([p2, p2[:, 1:].roll(1, 1)], 1)[:, :12]
    return _in(dtype, p1.view(1, 6, 2, 2), p2.view(1, 6, 2, 2))


def essential_points(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """Six normalized correspondences (the 5-point solver wants at least five)."""
    g = torch.Generator().manual_seed(32)
    X = torch.cat([_rand(g, 1, 6, 2) * 2 - 1, 2 + _rand(g, 1, 6, 1)], -1)
    x1 = X[..., :2] / X[..., 2:]
    x2 = (X[..., :2] + torch.tensor([0.25, 0.125])) / X[..., 2:]
    return _in(dtype, x1.bfloat16().float(), x2.bfloat16().float())


def essential_and_intrinsics(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    K = torch.tensor([[[16.0, 0.0, 8.0], [0.0, 16.0, 8.0], [0.0, 0.0, 1.0]]])
    return _in(dtype, _essential(), K, K)


def projection_pair(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two 3x4 camera matrices of unit scale (the determinants stay in float16's range)."""
    P1 = torch.cat([torch.eye(3), torch.zeros(3, 1)], 1).unsqueeze(0)
    P2 = torch.tensor([[[1.0, 0.0, 0.125, -1.0], [0.0, 1.0, 0.0, 0.0], [-0.125, 0.0, 1.0, 0.0]]])
    return _in(dtype, P1, P2)


def square_matrices(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(33)
    return _in(dtype, (torch.eye(3) + _rand(g, 2, 3, 3) * 0.5).bfloat16().float())


def projection_matrix(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """K [R | t] with K = diag(16, 16, 1) + principal point, R about z."""
    K = torch.tensor([[16.0, 0.0, 8.0], [0.0, 16.0, 8.0], [0.0, 0.0, 1.0]])
    R = torch.tensor([[0.96, -0.28, 0.0], [0.28, 0.96, 0.0], [0.0, 0.0, 1.0]])
    t = torch.tensor([[0.5], [0.25], [2.0]])
    return _in(dtype, (K @ torch.cat([R, t], 1)).unsqueeze(0).bfloat16().float())


def large_kernel_filter(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """filter2d(3-channel 20x24 image, a 15x1 box kernel): inside the workaround's guard (a side
    >= 15) but measured to return unpatched too (only kernel widths 15-31 hang), so an in-process
    test cannot hang even if the guard broke."""
    g = torch.Generator().manual_seed(34)
    return _in(dtype, _rand(g, 1, 3, 20, 24), torch.full((1, 15, 1), 1.0 / 16))


def quaternion_batch(dtype: torch.dtype) -> Tuple[object, None]:
    """(Quaternion of 4 unit quaternions near identity, no weights) for average_quaternions."""
    from kornia.geometry.quaternion import Quaternion

    g = torch.Generator().manual_seed(35)
    q = torch.tensor([1.0, 0.0, 0.0, 0.0]) + (_rand(g, 4, 4) - 0.5) * 0.25
    return Quaternion((q / q.norm(dim=-1, keepdim=True)).bfloat16().to(dtype)), None


def z1_points(dtype: torch.dtype) -> Tuple[object, object]:
    """(Z1Projection(), three Vector3 points with z in [1, 3])."""
    from kornia.geometry.vector import Vector3
    from kornia.sensors.camera.projection_model import Z1Projection

    g = torch.Generator().manual_seed(36)
    xyz = torch.cat([_rand(g, 3, 2) * 4 - 2, 1 + (_rand(g, 3, 1) * 8).round() / 4], -1)
    # exact in both half dtypes (x * 4 - 2 is not in float16), so float32 sees the half values
    return Z1Projection(), Vector3(xyz.bfloat16().float().to(dtype))


def pinhole_camera(dtype: torch.dtype) -> Tuple[object]:
    """(PinholeCamera with a 4x4 intrinsics and identity extrinsics, batch 1)."""
    from kornia.geometry.camera import PinholeCamera

    K = torch.tensor([[[16.0, 0.0, 8.0, 0.0], [0.0, 16.0, 6.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]])
    E = torch.eye(4).unsqueeze(0)
    return (PinholeCamera(K.to(dtype), E.to(dtype), torch.tensor([12.0]).to(dtype), torch.tensor([16.0]).to(dtype)),)


def homography_module(dtype: torch.dtype) -> Tuple[object]:
    """(image_registrator.Homography whose model is a well-conditioned 3x3 matrix)."""
    from kornia.geometry.transform.image_registrator import Homography

    module = Homography()
    with torch.no_grad():
        module.model.copy_(torch.tensor([[1.25, 0.125, 2.0], [-0.0625, 1.0, 0.5], [0.0, 0.0, 1.0]]))
    return (module.to(dtype),)


def similarity_module(dtype: torch.dtype) -> Tuple[object]:
    from kornia.geometry.transform.image_registrator import Similarity

    module = Similarity(True, True, True)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.125)
    return (module.to(dtype),)


def se3_element(dtype: torch.dtype) -> Tuple[object]:
    """(an Se3 of two rotations near identity and translations in [-2, 2], its quaternions and
    translations rounded to bfloat16: exact in both half dtypes) for Se3's log and adjoint."""
    from kornia.geometry.liegroup import Se3
    from kornia.geometry.quaternion import Quaternion

    g = torch.Generator().manual_seed(86)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]]) + (_rand(g, 2, 4) - 0.5) * 0.5
    q = (q / q.norm(dim=-1, keepdim=True)).bfloat16()
    t = ((_rand(g, 2, 3) - 0.5) * 4).bfloat16()
    return (Se3(Quaternion(q.to(dtype)), t.to(dtype)),)


def pyramid_blur_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor, torch.Tensor]:
    """(ScalePyramid(), a 1-channel 20x24 image, a 15-tap 1-D kernel) for 0.8.3's _blur_fast: inside
    the workaround's guard (a side >= 15), but one channel is not depthwise and was measured to
    return unpatched too, so an in-process test cannot hang even if the guard broke."""
    from kornia.geometry import ScalePyramid

    g = torch.Generator().manual_seed(38)
    return ScalePyramid(), _rand(g, 1, 1, 20, 24).to(dtype), torch.full((15,), 1.0 / 16).to(dtype)


def hsv_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(2, 3, 8, 8) HSV: hue in [0, 2 pi), saturation and value in [0, 1]."""
    g = torch.Generator().manual_seed(42)
    image = _rand(g, 2, 3, 8, 8)
    image[:, 0] = (image[:, 0] * 6.25).bfloat16().float()
    return _in(dtype, image)


def gray_image_and_factor(dtype: torch.dtype) -> Tuple[object, ...]:
    return gray_patch_image(dtype) + (0.375,)


def image_to_equalize(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(1, 3, 64, 64): histogram counts up to 4096, past float16's integer grid (2048)."""
    g = torch.Generator().manual_seed(43)
    return _in(dtype, (_rand(g, 1, 3, 64, 64) * 0.5).bfloat16().float())


def image_pair_window(dtype: torch.dtype) -> Tuple[object, ...]:
    """Two (1, 3, 16, 16) images and window 5: local variances of nearby pixels cancel in half."""
    g = torch.Generator().manual_seed(44)
    first = _rand(g, 1, 3, 16, 16)
    second = (first + 0.05 * _rand(g, 1, 3, 16, 16)).clamp(0, 1).bfloat16().float()
    return _in(dtype, first, second) + (5,)


def image_pair(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return image_pair_window(dtype)[:2]


def single_channel_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(45)
    return _in(dtype, _rand(g, 1, 1, 16, 16))


def luv_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(1, 3, 8, 8) Luv: L in [0, 100], u, v in [-50, 50]."""
    g = torch.Generator().manual_seed(46)
    image = _rand(g, 1, 3, 8, 8)
    image[:, 0] *= 100
    image[:, 1:] = image[:, 1:] * 100 - 50
    return _in(dtype, image.bfloat16().float())


def depth_and_camera(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(47)
    depth = 1 + _rand(g, 1, 1, 8, 8)
    camera = torch.tensor([[[8.0, 0.0, 4.0], [0.0, 8.0, 4.0], [0.0, 0.0, 1.0]]])
    return _in(dtype, depth.bfloat16().float(), camera)


def tps_points(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """Six source points in [0, 1] and targets moved by up to 0.05: r^2 log r of close points
    underflows in float16."""
    g = torch.Generator().manual_seed(48)
    source = _rand(g, 1, 6, 2)
    target = (source + 0.05 * _rand(g, 1, 6, 2)).bfloat16().float()
    return _in(dtype, source, target)


def tps_warp_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(image, centres, kernel weights, affine weights): the weights solved in float32."""
    import kornia

    source, target = tps_points(torch.float32)
    kernel, affine = kornia.geometry.transform.get_tps_transform(source, target)
    g = torch.Generator().manual_seed(49)
    return _in(dtype, _rand(g, 1, 3, 12, 12), source, kernel.bfloat16().float(), affine.bfloat16().float())


def affine_shape_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(PatchAffineShapeEstimator(16), two textured patches)."""
    from kornia.feature import PatchAffineShapeEstimator

    g = torch.Generator().manual_seed(50)
    return PatchAffineShapeEstimator(16).to(dtype), _in(dtype, _rand(g, 2, 1, 16, 16))[0]


def dominant_orientation_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(PatchDominantGradientOrientation(32), a flat patch and a textured one): the flat one has no
    gradient at all."""
    from kornia.feature import PatchDominantGradientOrientation

    g = torch.Generator().manual_seed(52)
    patches = torch.cat([torch.full((1, 1, 32, 32), 0.5), _rand(g, 1, 1, 32, 32)])
    return PatchDominantGradientOrientation(32), patches.to(dtype)


def weighted_homography_points(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    points1, points2 = _homography_points(torch.Generator().manual_seed(51))
    return _in(dtype, points1, points2, torch.ones(1, points1.shape[1]))


def colormap_call(dtype: torch.dtype) -> Tuple[object, object]:
    """(a (1, 1, 6, 6) image of 0..35, the 'autumn' colormap, float32 colours)."""
    from kornia.color import colormap

    if hasattr(colormap, "AUTUMN"):  # 0.7.0: one class per colormap
        autumn = colormap.AUTUMN(64, None, torch.float32)
    else:
        autumn = colormap.ColorMap("autumn", 64, None, torch.float32)
    return torch.arange(36.0).view(1, 1, 6, 6).to(dtype), autumn


def augmentation_dtype_check(dtype: torch.dtype) -> Tuple[torch.Tensor, list]:
    return torch.zeros(1, 3, 4, 4, dtype=dtype), [torch.float16, torch.float32, torch.float64]


def discrete_kernel_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(kernel 9, sigma 2.5 as a (2, 1) tensor in ``dtype``)."""
    return 9, torch.tensor([[2.5], [1.5]], dtype=dtype)


def normal_transform_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(height 1, width 5, eps, device, dtype): the single-row image HomographyWarper normalises."""
    return 1, 5, 1e-14, None, dtype


def normal_transform3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(depth 1, height 2, width 5, eps, device, dtype): a single-slice volume."""
    return 1, 2, 5, 1e-14, None, dtype


def normalize_homography3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a shift + shear in x and y that keeps the slice, source (1, 4, 5), destination (1, 4, 6))."""
    homography = torch.tensor([[[1.0, 0.25, 0.0, 1.5], [0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0],
                                [0.0, 0.0, 0.0, 1.0]]])
    return homography.to(dtype), (1, 4, 5), (1, 4, 6)


def unbatched_quaternion(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """A (4,) unit quaternion, exact in half."""
    return _in(dtype, torch.tensor([0.5, 0.5, -0.5, 0.5]))


def unbatched_rotation_matrix(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """A (3, 3) half turn about x: the trace branch kornia's own test takes."""
    return _in(dtype, torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]]))


def epipolar_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(a 3x3 matrix, two intrinsics with focal length 64): values exact in half."""
    matrix = torch.tensor([[[0.0, -0.25, 0.5], [0.25, 0.0, -0.75], [-0.5, 0.75, 0.125]]])
    k1 = torch.tensor([[[64.0, 0.0, 32.0], [0.0, 64.0, 24.0], [0.0, 0.0, 1.0]]])
    k2 = torch.tensor([[[72.0, 0.0, 30.0], [0.0, 72.0, 26.0], [0.0, 0.0, 1.0]]])
    return _in(dtype, matrix, k1, k2)


def quartic_coefficients(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """(x-1)(x-2)(x-3)(x-4): four real roots."""
    return _in(dtype, torch.tensor([[1.0, -10.0, 35.0, -50.0, 24.0]]))


def soft_argmax_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a 5x5 map with two peaks, 3x3 windows, stride 2, no padding, temperature 0.05, pixel
    coordinates, values too): kornia's own cold-diagonal case."""
    heat = torch.zeros(1, 1, 5, 5)
    heat[0, 0, 1, 1] = 1.0
    heat[0, 0, 3, 3] = 1.0
    return _in(dtype, heat) + ((3, 3), (2, 2), (0, 0), 0.05, False, 1e-8, True)


def lovasz_hinge_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(54)
    pred = (torch.randn(2, 1, 8, 8, generator=g)).bfloat16().float()
    return pred.to(dtype), torch.randint(0, 2, (2, 8, 8), generator=g)


def planckian_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(RandomPlanckianJitter, a (2, 3, 8, 8) image, its parameters drawn under seed 56, flags)."""
    from kornia.augmentation import RandomPlanckianJitter

    module = RandomPlanckianJitter(p=1.0)
    image = _in(dtype, _rand(torch.Generator().manual_seed(56), 2, 3, 8, 8))[0]
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(56)
        params = module.forward_parameters(image.shape)
    finally:
        torch.random.set_rng_state(state)
    return module, image, params, module.flags


# --------------------------------------------------------------------------------------------
# Warps with float32 geometry (warp_geometry): every value exact in bfloat16, so each half dtype
# holds the very parameters the float32 oracle gets.


def _warp_image(seed: int, *shape: int) -> torch.Tensor:
    return _rand(torch.Generator().manual_seed(seed), *shape)


def _affine_2x3() -> torch.Tensor:
    return torch.tensor([[[0.96875, -0.25, 2.5], [0.25, 0.96875, -1.75]]])


def _homography_3x3() -> torch.Tensor:
    return torch.tensor([[[0.96875, -0.25, 2.5], [0.25, 0.96875, -1.75], [0.001953125, -0.0009765625, 1.0]]])


def warp_affine_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(image, 2x3 rotation-and-shift, dsize, bilinear, border)."""
    return _in(dtype, _warp_image(61, 1, 2, 12, 10), _affine_2x3()) + ((11, 9), "bilinear", "border")


def warp_perspective_call(dtype: torch.dtype) -> Tuple[object, ...]:
    return _in(dtype, _warp_image(62, 1, 2, 12, 10), _homography_3x3()) + ((11, 9), "bilinear", "reflection")


def remap_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(image, map_x, map_y) in pixels: a shift by 0.75 px and a slight shear."""
    ys, xs = torch.meshgrid(torch.arange(12.0), torch.arange(10.0), indexing="ij")
    maps = _in(dtype, _warp_image(63, 1, 2, 12, 10), (xs + 0.75 + ys * 0.125)[None], (ys - 0.5)[None])
    return maps + ("bilinear", "zeros", True)


def homography_warp_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(patch, normalised homography, dsize)."""
    H = torch.tensor([[[0.96875, -0.125, 0.0625], [0.125, 0.96875, -0.03125], [0.0078125, 0.0, 1.0]]])
    return _in(dtype, _warp_image(64, 1, 2, 12, 10), H) + ((12, 10),)


def warp_grid_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(float32 normalised meshgrid, as HomographyWarper holds it; homography in ``dtype``)."""
    from kornia.utils import create_meshgrid

    grid = create_meshgrid(12, 10, normalized_coordinates=True)
    return grid, homography_warp_call(torch.float32)[1].to(dtype)


def _affine_3x4() -> torch.Tensor:
    return torch.tensor([[[0.96875, -0.25, 0.0, 1.5], [0.25, 0.96875, 0.0, -0.75], [0.0, 0.0, 1.0, 0.5]]])


def warp_affine3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    return _in(dtype, _warp_image(65, 1, 1, 4, 6, 5), _affine_3x4()) + ((4, 6, 5),)


def warp_perspective3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    M = torch.cat([_affine_3x4(), torch.tensor([[[0.0, 0.0, 0.0, 1.0]]])], dim=1)
    return _in(dtype, _warp_image(66, 1, 1, 4, 6, 5), M) + ((4, 6, 5),)


def homography_warp3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    M = torch.cat([_affine_3x4() * torch.tensor([1.0, 1.0, 1.0, 0.125]), torch.tensor([[[0.0, 0.0, 0.0, 1.0]]])], dim=1)
    return _in(dtype, _warp_image(67, 1, 1, 4, 6, 5), M) + ((4, 6, 5),)


def warp_grid3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    from kornia.utils import create_meshgrid3d

    grid = create_meshgrid3d(4, 6, 5, normalized_coordinates=True)
    return grid, homography_warp3d_call(torch.float32)[1].to(dtype)


def affine_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(68, 1, 2, 12, 10), _affine_2x3())


def rotate_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(69, 2, 2, 12, 10), torch.tensor([17.5, -40.0]))


def translate_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(70, 1, 2, 12, 10), torch.tensor([[1.75, -0.5]]))


def scale_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(71, 1, 2, 12, 10), torch.tensor([[1.25, 0.875]]))


def shear_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(72, 1, 2, 12, 10), torch.tensor([[0.125, -0.25]]))


def affine_module_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(Affine with angle/translation/scale in ``dtype``, as the release requires, image)."""
    from kornia.geometry.transform import Affine

    module = Affine(angle=torch.tensor([22.5]).to(dtype), translation=torch.tensor([[1.5, -0.75]]).to(dtype),
                    scale_factor=torch.tensor([[1.125, 0.875]]).to(dtype))
    return module, _warp_image(73, 1, 2, 12, 10).to(dtype)


def rotation_matrix2d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(centre, angle, scale): a quarter turn and 17.5 degrees."""
    return _in(dtype, torch.tensor([[4.5, 5.5], [4.5, 5.5]]), torch.tensor([90.0, 17.5]), torch.ones(2, 2))


def affine_matrix2d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(translations, centre, scale, angle, sx, sy)."""
    return _in(dtype, torch.tensor([[1.5, -0.75]]), torch.tensor([[4.5, 5.5]]), torch.tensor([[1.125, 0.875]]),
               torch.tensor([37.5]), torch.tensor([0.125]), torch.tensor([-0.0625]))


def affine_matrix3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(translations, centre, scale, angles)."""
    return _in(dtype, torch.tensor([[1.5, -0.75, 0.5]]), torch.tensor([[4.5, 5.5, 2.0]]),
               torch.tensor([[1.125, 0.875, 1.0]]), torch.tensor([[90.0, 17.5, -30.0]]))


def projective_transform_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(centre, angles, scales): a quarter turn about z, as kornia's own tests."""
    return _in(dtype, torch.tensor([[1.0, 1.0, 1.0]]), torch.tensor([[0.0, 0.0, 90.0]]), torch.ones(1, 3))


def perspective_transform_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(corners of a 256x192 image, the corners moved by up to 10 px): float16 overflows here.
    Integers below 256 and 264: exact in both half dtypes."""
    src = torch.tensor([[[0.0, 0.0], [255.0, 0.0], [255.0, 191.0], [0.0, 191.0]]])
    dst = torch.tensor([[[4.0, -2.0], [248.0, 4.0], [264.0, 198.0], [-2.0, 182.0]]])
    return _in(dtype, src, dst)


def perspective_transform3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(the 8 corners of a 100x80x50 box, moved by up to 3 px; integers, exact in half)."""
    src = torch.tensor([[[0.0, 0.0, 0.0], [99.0, 0.0, 0.0], [99.0, 79.0, 0.0], [0.0, 79.0, 0.0],
                         [0.0, 0.0, 49.0], [99.0, 0.0, 49.0], [99.0, 79.0, 49.0], [0.0, 79.0, 49.0]]])
    moved = torch.tensor([[[1.0, -2.0, 0.0], [-3.0, 1.0, 2.0], [2.0, 3.0, -1.0], [0.0, -1.0, 3.0],
                           [-2.0, 2.0, 1.0], [3.0, 0.0, -2.0], [-1.0, -3.0, 0.0], [2.0, 1.0, -3.0]]])
    return _in(dtype, src, src + moved)


def shear_matrix2d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(centre, sx, sy): values exact in both half dtypes."""
    return _in(dtype, torch.tensor([[120.5, 87.5]]), torch.tensor([0.375]), torch.tensor([-0.4375]))


def shear_matrix3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(centre, sxy, sxz, syx, syz, szx, szy): values exact in both half dtypes."""
    shears = (0.375, -0.25, 0.125, 0.4375, -0.3125, 0.0625)
    return _in(dtype, torch.tensor([[60.5, 41.25, 20.75]]), *(torch.tensor([v]) for v in shears))


def affine_inverse_call(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    return _in(dtype, _affine_2x3() * torch.tensor([1.0, 1.0, 8.0]))


def affine3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    return _in(dtype, _warp_image(74, 1, 1, 4, 6, 5), _affine_3x4())


def rotate3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    return _in(dtype, _warp_image(75, 1, 1, 4, 6, 5), torch.tensor([17.5]), torch.tensor([-5.0]), torch.tensor([8.0]))


def crop_by_transform_call(dtype: torch.dtype) -> Tuple[object, ...]:
    T = torch.tensor([[[1.0, 0.0, -1.5], [0.0, 1.0, -2.25], [0.0, 0.0, 1.0]]])
    return _in(dtype, _warp_image(76, 1, 2, 12, 10), T) + ((7, 6),)


def _boxes(x0: float, y0: float, x1: float, y1: float) -> torch.Tensor:
    return torch.tensor([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]]])


def crop_boxes_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """crop_and_resize(image, boxes, size)."""
    return _in(dtype, _warp_image(77, 1, 2, 12, 10), _boxes(1.5, 2.0, 7.5, 9.0)) + ((6, 5),)


def crop_by_boxes_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """crop_by_boxes(image, src_box, dst_box)."""
    return _in(dtype, _warp_image(77, 1, 2, 12, 10), _boxes(1.5, 2.0, 7.5, 9.0), _boxes(0.0, 0.0, 4.0, 5.0))


def center_crop_call(dtype: torch.dtype) -> Tuple[object, ...]:
    return (_warp_image(78, 1, 2, 13, 10).to(dtype), (7, 6))


def center_crop_module_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    from kornia.geometry.transform import CenterCrop2D

    return CenterCrop2D((7, 6), cropping_mode="resample"), _warp_image(79, 1, 2, 13, 10).to(dtype)


def crop_by_transform3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    T = torch.eye(4)[None].clone()
    T[0, :3, 3] = torch.tensor([-1.5, -0.75, -0.5])
    return _in(dtype, _warp_image(80, 1, 1, 5, 6, 5), T) + ((3, 4, 3),)


def _box3d(x0: float, y0: float, z0: float, x1: float, y1: float, z1: float) -> torch.Tensor:
    return torch.tensor([[[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0],
                          [x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]]])


def crop_boxes3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """crop_and_resize3d(volume, boxes, size)."""
    return _in(dtype, _warp_image(81, 1, 1, 5, 6, 5), _box3d(0.5, 1.0, 0.25, 3.5, 4.5, 3.0)) + ((3, 4, 3),)


def crop_by_boxes3d_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """crop_by_boxes3d(volume, src_box, dst_box)."""
    return _in(dtype, _warp_image(81, 1, 1, 5, 6, 5), _box3d(0.5, 1.0, 0.25, 3.5, 4.5, 3.0),
               _box3d(0.0, 0.0, 0.0, 2.0, 3.0, 2.0))


def center_crop3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    return (_warp_image(82, 1, 1, 5, 7, 6).to(dtype), (3, 4, 3))


def elastic_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(image, noise in [-1, 1], kernel size, sigma, alpha)."""
    g = torch.Generator().manual_seed(83)
    noise = (_rand(g, 1, 2, 12, 10) * 2 - 1).bfloat16().float()
    return _in(dtype, _rand(g, 1, 2, 12, 10), noise) + ((5, 5), (2.0, 2.0), (1.5, 1.5))


def homography_warper_call(dtype: torch.dtype) -> Tuple[object, ...]:
    from kornia.geometry.transform import HomographyWarper

    patch, H, _ = homography_warp_call(dtype)
    return HomographyWarper(12, 10), patch, H


def homography_warper_precompute_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(HomographyWarper(12, 10), the homography): precompute_warp_grid returns None, stores a grid."""
    from kornia.geometry.transform import HomographyWarper

    _, H, _ = homography_warp_call(dtype)
    return HomographyWarper(12, 10), H


def _depth_camera() -> torch.Tensor:
    return torch.tensor([[[12.0, 0.0, 5.0], [0.0, 12.0, 6.0], [0.0, 0.0, 1.0]]])


def warp_frame_depth_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(image, depth in [2, 3], a small pose, intrinsics)."""
    g = torch.Generator().manual_seed(84)
    pose = torch.eye(4)[None].clone()
    pose[0, :3, 3] = torch.tensor([0.125, -0.0625, 0.0])
    pose[0, :2, :2] = torch.tensor([[0.96875, -0.25], [0.25, 0.96875]])
    image, depth = _rand(g, 1, 2, 12, 10), (2 + _rand(g, 1, 1, 12, 10)).bfloat16().float()
    return _in(dtype, image, depth, pose, _depth_camera())


def depth_warper_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(DepthWarper with float32 cameras and its projection computed, depth, patch)."""
    from kornia.geometry.camera import PinholeCamera
    from kornia.geometry.depth import DepthWarper

    K = torch.eye(4)[None].clone()
    K[0, :3, :3] = _depth_camera()
    pose = torch.eye(4)[None].clone()
    pose[0, 0, 3] = 0.125
    size = (torch.tensor([12.0]), torch.tensor([10.0]))
    warper = DepthWarper(PinholeCamera(K, pose, *size), 12, 10)
    warper.compute_projection_matrix(PinholeCamera(K, torch.eye(4)[None], *size))
    g = torch.Generator().manual_seed(85)
    return (warper,) + _in(dtype, (2 + _rand(g, 1, 1, 12, 10)).bfloat16().float(), _rand(g, 1, 2, 12, 10))


def undistort_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(image, intrinsics, radial/tangential coefficients)."""
    dist = torch.tensor([[0.0625, -0.03125, 0.001953125, -0.0009765625]])
    return _in(dtype, _warp_image(86, 1, 2, 12, 10), _depth_camera(), dist)


def affine_grid_unit_side(dtype: torch.dtype) -> Tuple[torch.Tensor, List[int], bool]:
    """(5 3x4 affine matrices near identity, a 5x3x1x3x3 size, align_corners=False): a depth-1
    volume, RandomAffine3D's upstream test case, where torch's half affine_grid raises."""
    g = torch.Generator().manual_seed(51)
    theta = torch.eye(3, 4) + (_rand(g, 5, 3, 4) - 0.5) * 0.1
    return theta.to(dtype), [5, 3, 1, 3, 3], False


def scale_pyramid_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(ScalePyramid(3, 1.6, 15), a textured (1, 1, 64, 80) image): three octaves."""
    from kornia.geometry.transform import ScalePyramid

    return ScalePyramid(3, 1.6, 15), _textured_image(61, 64, 80).to(dtype)


def mkd_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(MKDDescriptor(32, whitening=None), three (1, 32, 32) patches): no whitening weights
    (they are a download)."""
    from kornia.feature import MKDDescriptor

    g = torch.Generator().manual_seed(62)
    return MKDDescriptor(32, whitening=None), _in(dtype, _rand(g, 3, 1, 32, 32))[0]


class _TinyResponse(torch.nn.Module):
    """A learned-looking response model with a weight (3x3 conv, fixed values), so the half module
    has half parameters as a converted KeyNet does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 1, 3, padding=1, bias=False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor([[[[0.0, -0.25, 0.0], [-0.25, 1.0, -0.25], [0.0, -0.25, 0.0]]]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).abs()


def single_level_detection_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a MultiResolutionDetector with a one-conv response in ``dtype``, a textured (1, 1, 300, 280)
    image, 40 points, level factor (1.2, 1.2)): pixel positions times 1.2 above 256 px, where
    bfloat16 steps by 2."""
    from kornia.feature import MultiResolutionDetector

    module = MultiResolutionDetector(_TinyResponse(), 40).to(dtype if dtype in (torch.float16, torch.bfloat16) else dtype)
    return module, _textured_image(63, 300, 280).to(dtype), 40, (1.2, 1.2)


def volume_pair_window(dtype: torch.dtype) -> Tuple[object, ...]:
    """(two close (1, 1, 4, 16, 16) volumes, window 5)."""
    g = torch.Generator().manual_seed(65)
    first = _rand(g, 1, 1, 4, 16, 16)
    second = (first + 0.05 * _rand(g, 1, 1, 4, 16, 16)).clamp(0, 1).bfloat16().float()
    return _in(dtype, first, second) + (5,)


def histogram_far_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(64 values in [0, 0.1], 8 bins over [0.5, 1], bandwidth 0.01): every value far from every bin."""
    values = _rand(torch.Generator().manual_seed(66), 1, 64) * 0.1
    return _in(dtype, values, torch.linspace(0.5, 1.0, 8), torch.tensor(0.01))


def histogram2d_far_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    values, bins, bandwidth = histogram_far_call(dtype)
    return values, values.flip(-1), bins, bandwidth


def laf_call(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """Two sheared, rotated LAFs (1, 2, 2, 3) with centres near 300 px."""
    laf = torch.tensor([[[[4.0, 1.0, 310.0], [0.5, 3.0, 12.0]], [[2.5, -1.5, 40.0], [1.25, 6.0, 290.0]]]])
    return _in(dtype, laf)


def lab_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """L in [0, 100], a and b in [-60, 60], on bfloat16's grid."""
    g = torch.Generator().manual_seed(67)
    lab = torch.cat([100 * _rand(g, 1, 1, 8, 8), 120 * _rand(g, 1, 2, 8, 8) - 60], dim=1).bfloat16().float()
    return _in(dtype, lab)


def otsu_module_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(OtsuThreshold(), a (1, 1, 10, 10) ramp, 256 bins, slow_and_differentiable=True)."""
    from kornia.filters.otsu_thresholding import OtsuThreshold

    return (OtsuThreshold(),) + ramp_image(dtype) + (256, True)


def blur_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a (1, 3, 20, 24) image, 5x5 kernel, sigma (1.5, 2.5))."""
    g = torch.Generator().manual_seed(76)
    return _in(dtype, _rand(g, 1, 3, 20, 24)) + ((5, 5), (1.5, 2.5))


def box_blur_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a (2, 3, 20, 24) image: two images, so the evaluation goes image by image; 5x5 box)."""
    g = torch.Generator().manual_seed(77)
    return _in(dtype, _rand(g, 2, 3, 20, 24)) + ((5, 5),)


def sobel_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(a (2, 3, 18, 22) image of 8-bit range, normalized=False: the squares of the unnormalised
    gradients pass float16's 65504)."""
    g = torch.Generator().manual_seed(78)
    return _in(dtype, _rand(g, 2, 3, 18, 22) * 255) + (False,)


def jpeg_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(a (2, 3, 16, 16) image, qualities 50 and 80)."""
    g = torch.Generator().manual_seed(77)
    return _in(dtype, _rand(g, 2, 3, 16, 16), torch.tensor([50.0, 80.0]))


def ramp_image(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """A (1, 1, 10, 10) ramp over [0, 1] (otsu_threshold's histogram)."""
    return _in(dtype, torch.linspace(0, 1, 100).view(1, 1, 10, 10).bfloat16().float())


def median_blur_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """A (2, 3, 8, 8) image and a 3x3 window."""
    return gray_patch_image(dtype) + ((3, 3),)


def psnr_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """Two (1, 3, 16, 16) images of multiples of 8 in [0, 1000] (exact in float16 and bfloat16;
    squared differences past 65504) and max_val 1000."""
    g = torch.Generator().manual_seed(78)
    first, second = (torch.randint(0, 126, (1, 3, 16, 16), generator=g).float() * 8 for _ in range(2))
    return _in(dtype, first, second) + (1000.0,)


def accuracy_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """Eight rows of five distinct half-exact scores, their labels, top-1 and top-2."""
    g = torch.Generator().manual_seed(83)
    scores = torch.stack([torch.randperm(5, generator=g) for _ in range(8)]).float() / 8
    labels = torch.randint(0, 5, (8,), generator=g)
    return _in(dtype, scores) + (labels, (1, 2))


def tps_points_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """Seven points warped by a thin-plate spline fitted (in float32) to five control points."""
    from kornia.geometry.transform import get_tps_transform

    g = torch.Generator().manual_seed(84)
    source = _rand(g, 1, 5, 2)
    kernel, affine = get_tps_transform(source, (source * 0.875 + 0.0625).bfloat16().float())
    return _in(dtype, _rand(g, 1, 7, 2), source, kernel.bfloat16().float(), affine.bfloat16().float())


def pnp_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """Ten world points 4-6 units in front of a camera (focal 64, centre 32), their projections
    rounded to half-exact values, and the intrinsics: a well-posed DLT."""
    g = torch.Generator().manual_seed(81)
    world = (_rand(g, 1, 10, 3) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])).bfloat16().float()
    K = torch.tensor([[[64.0, 0.0, 32.0], [0.0, 64.0, 32.0], [0.0, 0.0, 1.0]]])
    image = (K @ world.transpose(1, 2)).transpose(1, 2)
    image = (image[..., :2] / image[..., 2:]).bfloat16().float()
    return _in(dtype, world, image, K)


def filter_response_norm_call(dtype: torch.dtype) -> Tuple[object, torch.Tensor]:
    """(HyNet's FilterResponseNorm2d(4) with half-exact scale and bias, in ``dtype``, and a
    (2, 4, 6, 6) activation in [-2, 2])."""
    from kornia.feature.hynet import FilterResponseNorm2d

    g = torch.Generator().manual_seed(82)
    module = FilterResponseNorm2d(4)
    with torch.no_grad():
        module.weight.copy_((_rand(g, 1, 4, 1, 1) + 0.5).bfloat16())
        module.bias.copy_((_rand(g, 1, 4, 1, 1) - 0.5).bfloat16())
    return module.to(dtype), _in(dtype, (_rand(g, 2, 4, 6, 6) * 4 - 2).bfloat16().float())[0]


def ms_ssim_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """MS_SSIMLoss() (float32 masks, as built, for half images; float64 masks for float64) and two
    (1, 3, 24, 24) images: a random one and a slightly perturbed copy (small local variances)."""
    from kornia.losses import MS_SSIMLoss

    g = torch.Generator().manual_seed(77)
    first = _rand(g, 1, 3, 24, 24)
    second = (first + 0.1 * _rand(g, 1, 3, 24, 24)).clamp(0, 1).bfloat16().float()
    module = MS_SSIMLoss().to(torch.float64) if dtype == torch.float64 else MS_SSIMLoss()
    return (module,) + _in(dtype, first, second)


def blur_pool_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """A (1, 3, 16, 16) image and a 9x9 Pascal kernel (normalising sum 65536: Inf in float16)."""
    return rgb_image(dtype) + (9,)


def blur_pool_module_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """BlurPool2D(9) and a (1, 3, 16, 16) image (its float32 kernel's smallest weight, 2^-16, is a
    float16 subnormal)."""
    from kornia.filters import BlurPool2D

    return (BlurPool2D(9),) + rgb_image(dtype)


def max_blur_pool_module_call(dtype: torch.dtype) -> Tuple[object, ...]:
    from kornia.filters import MaxBlurPool2D

    return (MaxBlurPool2D(9),) + rgb_image(dtype)


def edge_aware_blur_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """A (2, 3, 8, 8) image and a 3x3 pooling kernel."""
    return gray_patch_image(dtype) + (3,)


def quaternion_components(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """w, x, y, z of four unit quaternions."""
    g = torch.Generator().manual_seed(43)
    q = _rand(g, 4, 4) - 0.5
    q = q / q.norm(dim=-1, keepdim=True)
    return _in(dtype, q[:, 0], q[:, 1], q[:, 2], q[:, 3])


def epiline_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """Five pixel points (1, 5, 2) and a fundamental matrix (1, 3, 3)."""
    g = torch.Generator().manual_seed(44)
    return _in(dtype, (_rand(g, 1, 5, 2) * 16).round(), _rand(g, 1, 3, 3) - 0.5)


def two_camera_poses(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """R1, t1, R2, t2: two rotations about z (1, 3, 3) and translations (1, 3, 1)."""
    def rotation(angle: float) -> torch.Tensor:
        c, s = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
        return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])[None]

    return _in(dtype, rotation(0.25), torch.tensor([[[0.5], [0.25], [1.0]]]), rotation(-0.5),
               torch.tensor([[[-0.25], [0.5], [2.0]]]))


def camera_krt(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """K (1, 3, 3), R (1, 3, 3), t (1, 3, 1)."""
    K = torch.tensor([[[100.0, 0.0, 32.0], [0.0, 100.0, 24.0], [0.0, 0.0, 1.0]]])
    R, t = two_camera_poses(torch.float32)[:2]
    return _in(dtype, K, R, t)


def segment_transfer_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(1, 6, 2, 2) segments, the same under a homography, that homography (1, 3, 3), squared=False."""
    H = torch.tensor([[[1.0, 0.125, 1.0], [-0.0625, 1.0, 0.5], [0.0, 0.0, 1.0]]])
    return homography_lines(dtype) + _in(dtype, H) + (False,)


def homography_sample(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(2, 4, 2) point quadruples and their images: the first keeps its orientation, the second
    has two points swapped (an invalid sample)."""
    points1, points2 = _homography_points(torch.Generator().manual_seed(31))
    points1, points2 = points1[:, :4].repeat(2, 1, 1), points2[:, :4].repeat(2, 1, 1)
    points2[1] = points2[1, [1, 0, 2, 3]]
    return _in(dtype, points1, points2)


def perpendicular_call(dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(1, 5, 3) lines and (1, 5, 2) pixel points."""
    g = torch.Generator().manual_seed(45)
    return _in(dtype, _rand(g, 1, 5, 3) - 0.5, (_rand(g, 1, 5, 2) * 16).round())


def closest_point_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(1, 5, 2) pixel points in each image and a fundamental matrix (1, 3, 3)."""
    g = torch.Generator().manual_seed(46)
    return _in(dtype, (_rand(g, 1, 5, 2) * 16).round(), (_rand(g, 1, 5, 2) * 16).round(), _rand(g, 1, 3, 3) - 0.5)


def transfer_error_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(1, 8, 2) pixel points, their images under a homography with perspective terms plus up to
    a pixel of noise (on bfloat16's grid), that homography (1, 3, 3)."""
    g = torch.Generator().manual_seed(47)
    H = torch.tensor([[[0.96875, -0.25, 2.5], [0.25, 0.96875, -1.75], [0.001953125, -0.0009765625, 1.0]]])
    points1 = (_rand(g, 1, 8, 2) * 48).round()
    homogeneous = torch.cat([points1, torch.ones(1, 8, 1)], -1) @ H[0].T
    points2 = (homogeneous[..., :2] / homogeneous[..., 2:] + _rand(g, 1, 8, 2) - 0.5).bfloat16().float()
    return _in(dtype, points1, points2, H)


def distortion_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """(1, 8, 2) pixel points of a 64x48 image, intrinsics with focal length 64, five distortion
    coefficients (k1, k2, p1, p2, k3) on bfloat16's grid."""
    g = torch.Generator().manual_seed(48)
    points = torch.cat([(_rand(g, 1, 8, 1) * 64).round(), (_rand(g, 1, 8, 1) * 48).round()], -1)
    K = torch.tensor([[[64.0, 0.0, 32.0], [0.0, 64.0, 24.0], [0.0, 0.0, 1.0]]])
    dist = torch.tensor([[-0.25, 0.078125, 0.0009765625, -0.00048828125, -0.0078125]])
    return _in(dtype, points, K, dist)


def two_view_scene(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """A 640x480 two-view scene (focal length 500): (1, 16, 2) pixel points in each view (the
    second with up to a pixel of noise), the fundamental matrix of unit norm (1, 3, 3), and a
    homography with perspective terms (1, 3, 3); every value on bfloat16's grid."""
    import math

    g = torch.Generator().manual_seed(50)
    X = torch.rand(16, 3, generator=g) * 2 - 1 + torch.tensor([0.0, 0.0, 5.0])
    K = torch.tensor([[500.0, 0.0, 320.0], [0.0, 500.0, 240.0], [0.0, 0.0, 1.0]])
    axis = torch.tensor([0.2, 1.0, 0.1]) / torch.tensor([0.2, 1.0, 0.1]).norm()
    cross = torch.tensor([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    R = torch.eye(3) + math.sin(0.3) * cross + (1 - math.cos(0.3)) * (cross @ cross)
    t = torch.tensor([0.5, 0.1, 0.05])
    x1 = (K @ X.T).T
    x2 = (K @ ((R @ X.T).T + t).T).T
    x1 = x1[:, :2] / x1[:, 2:]
    x2 = x2[:, :2] / x2[:, 2:] + torch.rand(16, 2, generator=g) - 0.5
    t_cross = torch.tensor([[0.0, -t[2], t[1]], [t[2], 0.0, -t[0]], [-t[1], t[0], 0.0]])
    F = torch.linalg.inv(K).T @ t_cross @ R @ torch.linalg.inv(K)
    H = torch.tensor([[0.96875, -0.25, 24.5], [0.25, 0.96875, -17.75], [0.0001953125, -0.00009765625, 1.0]])
    exact = [v.bfloat16().float()[None] for v in (x1, x2, F / F.norm(), H)]
    return _in(dtype, *exact)


def _local_feature_image_and_lafs() -> Tuple[torch.Tensor, torch.Tensor]:
    """A (1, 1, 48, 48) textured image and two LAFs (1, 2, 2, 3) inside it, one sheared."""
    g = torch.Generator().manual_seed(49)
    image = _rand(g, 1, 1, 48, 48)
    lafs = torch.tensor([[[[8.0, 1.0, 22.0], [-1.0, 7.0, 20.0]], [[6.0, 0.0, 16.0], [0.0, 6.0, 30.0]]]])
    return image, lafs


def laf_orienter_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(LAFOrienter(32), the LAFs, the image)."""
    from kornia.feature import LAFOrienter

    image, lafs = _local_feature_image_and_lafs()
    return (LAFOrienter(32),) + _in(dtype, lafs, image)


def laf_descriptors_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(the image, the LAFs, a float32 SIFTDescriptor(32) as built, patch size 32)."""
    from kornia.feature import SIFTDescriptor

    image, lafs = _local_feature_image_and_lafs()
    return _in(dtype, image, lafs) + (SIFTDescriptor(32), 32)


def local_feature_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(SIFTFeature(num_features=4) as built, in float32, a (1, 1, 48, 48) textured image):
    detection, orientation and SIFT description, the whole pipeline promoted."""
    from kornia.feature import SIFTFeature

    image, _ = _local_feature_image_and_lafs()
    return (SIFTFeature(num_features=4),) + _in(dtype, image)


# --------------------------------------------------------------------------------------------
# Every target's example, by label

def rigid_pose(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """R (1, 3, 3) about z and t (1, 3, 1): the Rt conversions' input."""
    return two_camera_poses(dtype)[:2]


def pose_4x4(dtype: torch.dtype) -> Tuple[torch.Tensor]:
    """A (1, 4, 4) pose [R | t; 0 1] on bfloat16's grid."""
    R, t = two_camera_poses(torch.float32)[:2]
    pose = torch.eye(4)[None]
    pose[:, :3, :3], pose[:, :3, 3:] = R, t
    return _in(dtype, pose.bfloat16().float())


def depth_call(dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """R (1, 3, 3), t (1, 3, 1) and five 3-D points (1, 5, 3) in front of the camera."""
    g = torch.Generator().manual_seed(91)
    R, t = two_camera_poses(torch.float32)[:2]
    X = torch.cat([_rand(g, 1, 5, 2) - 0.5, 1 + _rand(g, 1, 5, 1)], -1).bfloat16().float()
    return _in(dtype, R.bfloat16().float(), t, X)


def tilt_angles(dtype: torch.dtype) -> Tuple[object, ...]:
    """Tilt angles tau_x, tau_y (3,) on bfloat16's grid, and return_inverse=True."""
    return _in(dtype, torch.tensor([0.125, -0.0625, 0.25]), torch.tensor([0.0625, 0.1875, -0.125])) + (True,)


def class_logits(dtype: torch.dtype) -> Tuple[object, ...]:
    """(2, 3, 4, 5) logits on bfloat16's grid and (2, 4, 5) class labels."""
    g = torch.Generator().manual_seed(92)
    logits = ((_rand(g, 2, 3, 4, 5) - 0.5) * 4).bfloat16().float()
    labels = (_rand(g, 2, 4, 5) * 3).long().clamp(max=2)
    return _in(dtype, logits) + (labels,)


def focal_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """class_logits, alpha 0.5, gamma 2, reduction 'mean'."""
    return class_logits(dtype) + (0.5, 2.0, "mean")


def erosion_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """HausdorffERLoss() (its float erosion kernel, built in the prediction's dtype), a (1, 1, 8, 8)
    prediction in [0, 1] on bfloat16's grid and a binary (1, 1, 8, 8) target."""
    from kornia.losses import HausdorffERLoss

    g = torch.Generator().manual_seed(93)
    pred = _rand(g, 1, 1, 8, 8).bfloat16().float()
    target = (_rand(g, 1, 1, 8, 8) > 0.5).float()
    return (HausdorffERLoss(),) + _in(dtype, pred, target)


def _auto_augment(dtype: torch.dtype) -> Tuple[object, ...]:
    """AutoAugment with one sub-policy (shear, rotate) after a seeded float32 forward on a
    (2, 3, 16, 16) image on bfloat16's grid, that image in ``dtype`` and the forward's params."""
    from kornia.augmentation.auto import AutoAugment

    with torch.random.fork_rng():
        torch.manual_seed(96)
        aug = AutoAugment([[("shear_x", 0.9, 4), ("rotate", 0.9, 3)]], transformation_matrix_mode="silence")
        image = torch.rand(2, 3, 16, 16).bfloat16().float()
        aug(image)
    return aug, image.to(dtype), aug._params


def auto_augment_matrix_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(AutoAugment, image, params): its transformation matrix, as kornia's test_transform_mat asks."""
    return _auto_augment(dtype)


def policy_matrix_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """(the PolicySequential that ran, image, its params): the sub-policy's matrix product."""
    aug, image, params = _auto_augment(dtype)
    (_, policy), = list(aug.get_forward_sequence(params))
    return policy, image, params[0].data


def erosion3d_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """HausdorffERLoss3D(), a two-class (1, 2, 3, 8, 8) prediction on bfloat16's grid, its (1, 1, 3, 8, 8) labels."""
    from kornia.losses import HausdorffERLoss3D

    g = torch.Generator().manual_seed(98)
    pred = _rand(g, 1, 2, 3, 8, 8).bfloat16().float()
    return (HausdorffERLoss3D(),) + _in(dtype, pred) + ((_rand(g, 1, 1, 3, 8, 8) > 0.5).long(),)


# --------------------------------------------------------------------------------------------
# networks_half: each network's edited method on its module in the example's dtype (seeded random
# weights, built afresh per call). Their half rule is their network's (tests/test_fix_networks_half.py);
# the battery holds them to float32/float64 bit for bit, revert, pickling and identity.


def _module_of(reference: str, dtype: torch.dtype, *args: object, **kwargs: object) -> torch.nn.Module:
    import importlib

    module_name, _, name = reference.partition(":")
    torch.manual_seed(0)
    return getattr(importlib.import_module(module_name), name)(*args, **kwargs).eval().to(dtype)


def _first_module(references: Tuple[str, ...], dtype: torch.dtype, *args: object, **kwargs: object) -> torch.nn.Module:
    for reference in references:
        try:
            return _module_of(reference, dtype, *args, **kwargs)
        except (ImportError, AttributeError):
            continue
    raise LookupError(references[0])


def lightglue_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """LightGlue(features=None, 2 layers, no point pruning: the release runs float64 there too), 100
    keypoints per image."""
    net = _module_of("kornia.feature.lightglue:LightGlue", dtype, features=None, n_layers=2, width_confidence=-1)
    g = torch.Generator().manual_seed(41)
    k0, d0, d1 = _in(dtype, _rand(g, 1, 100, 2) * 60, _rand(g, 1, 100, 256) - 0.5, _rand(g, 1, 100, 256) - 0.5)
    size = torch.tensor([[64, 64]])
    return (net, {"image0": {"keypoints": k0, "descriptors": d0, "image_size": size},
                  "image1": {"keypoints": k0 + 1, "descriptors": d1, "image_size": size}})


_SEEDED_BUILDS: Dict[object, Tuple[Dict[str, torch.Tensor], torch.Tensor]] = {}


def seeded_network(key: object, build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """``build()`` after ``torch.manual_seed(0)``: the first time for real, then the same module
    built on the meta device and given the first build's weights, the global generator left where
    the real build leaves it (the random initialisation is most of a large network's build: DeDoDe
    L's VGG19, classifier included, takes 1.4 s of it, each test builds it several times). A module
    holding a tensor outside its state dict (a non-persistent buffer, a plain attribute) is always
    built for real."""
    known = _SEEDED_BUILDS.get(key)
    if known is not None:
        state, generator_state = known
        with torch.device("meta"):
            net = build()
        net = net.to_empty(device="cpu")
        net.load_state_dict(state)
        torch.set_rng_state(generator_state)
        return net
    torch.manual_seed(0)
    net = build()
    state = net.state_dict()
    plain_tensors = [
        name for module in net.modules() for name, value in vars(module).items() if isinstance(value, torch.Tensor)
    ]
    if not plain_tensors and len(state) == len(list(net.parameters())) + len(list(net.buffers())):
        _SEEDED_BUILDS[key] = ({name: tensor.clone() for name, tensor in state.items()}, torch.get_rng_state())
    return net


def dedode_detector(amp_dtype: torch.dtype = torch.float16) -> torch.nn.Module:
    """DeDoDe's L detector with seeded random weights (its encoder is a VGG19)."""
    import kornia.feature.dedode.dedode_models as models

    return seeded_network(("DeDoDe L", amp_dtype), lambda: models.get_detector("L", amp_dtype))


def dedode_detector_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """DeDoDe's L detector, a (1, 3, 32, 32) image."""
    net = dedode_detector().eval().to(dtype)
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(42), 1, 3, 32, 32))


def defmo_rendering_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """DeFMO's rendering network on a (1, 2048, 2, 2) latent, 4 time steps rendered instead of 24
    (its times, a plain float32 attribute as the release makes it, are what the row is about; each
    step is a 2049-channel convolution)."""
    net = _module_of("kornia.feature.defmo:RenderingDeFMO", dtype)
    net.tsr_steps = 4
    net.times = torch.linspace(0, 1, 4)
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(43), 1, 2048, 2, 2))


def tiny_vit_attention_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """TinyViT's Attention(dim 16, key_dim 4, 2 heads, resolution 3x3) after eval(): its bias cached."""
    net = _first_module(("kornia.contrib.models.tiny_vit:Attention", "kornia.models.tiny_vit:Attention"), dtype,
                        16, 4, num_heads=2, attn_ratio=1.0, resolution=(3, 3))
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(44), 2, 9, 16))


def sam_position_encoding_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """SAM's PositionEmbeddingRandom(8) on (1, 3, 2) points in [0, 1]."""
    net = _first_module(("kornia.contrib.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom",
                         "kornia.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom"), dtype, 8)
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(45), 1, 3, 2))


def sam_prompt_encoder_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """SAM's PromptEncoder(embed 8, 4x4 embeddings of a 16x16 image) on two labelled points."""
    net = _first_module(("kornia.contrib.models.sam.architecture.prompt_encoder:PromptEncoder",
                         "kornia.models.sam.architecture.prompt_encoder:PromptEncoder"), dtype,
                        embed_dim=8, image_embedding_size=(4, 4), input_image_size=(16, 16), mask_in_chans=4)
    points = _in(dtype, _rand(torch.Generator().manual_seed(46), 1, 2, 2) * 15)[0]
    return (net, (points, torch.tensor([[1, 0]])), None, None)


def lite_mla_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """EfficientViT's LiteMLA(16, 16, dim 8) linear attention on its (1, 96, 4, 4) multi-scale qkv."""
    net = _first_module(("kornia.contrib.models.efficient_vit.nn.ops:LiteMLA",
                         "kornia.models.efficient_vit.nn.ops:LiteMLA"), dtype, 16, 16, dim=8)
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(47), 1, 96, 4, 4))


def loftr_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """LoFTR (random weights) on two (1, 1, 32, 32) images."""
    net = _module_of("kornia.feature.loftr:LoFTR", dtype, pretrained=None)
    g = torch.Generator().manual_seed(48)
    image0, image1 = _in(dtype, _rand(g, 1, 1, 32, 32), _rand(g, 1, 1, 32, 32))
    return (net, {"image0": image0, "image1": image1})


def small_rt_detr() -> torch.nn.Module:
    """A small RT-DETR (resnet18d, 64 px, 16 queries, one decoder layer), seeded random weights, eval
    mode; LookupError where the release has none."""
    import dataclasses
    import importlib

    for name in ("kornia.contrib.models.rt_detr.model", "kornia.models.rt_detr.model"):
        try:
            model = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        raise LookupError("no RT-DETR in this kornia")
    wanted = dict(model_type="resnet18d", num_classes=4, input_size=64, neck_hidden_dim=64,
                  neck_dim_feedforward=128, head_hidden_dim=64, head_num_queries=16, head_num_decoder_layers=1)
    fields = {field.name for field in dataclasses.fields(model.RTDETRConfig)}
    torch.manual_seed(0)
    return model.RTDETR.from_config(model.RTDETRConfig(**{k: v for k, v in wanted.items() if k in fields})).eval()


_RT_DETR_DECODER_CALL: List[object] = []


def rt_detr_decoder_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """RT-DETR's TransformerDecoder (``small_rt_detr``) with the arguments its head gives it for a
    (1, 3, 64, 64) image, in ``dtype``."""
    import copy

    if not _RT_DETR_DECODER_CALL:
        net = small_rt_detr()
        seen = []
        # net.decoder.decoder in 0.8; net.head.decoder in 0.7.1-0.7.3, a plain object (not a Module)
        # whose forward the head calls directly: the call is caught on the instance.
        decoder = net.decoder.decoder if hasattr(net, "decoder") else net.head.decoder
        release_forward = decoder.forward
        decoder.forward = lambda *args, **kwargs: (seen.append((args, kwargs)), release_forward(*args, **kwargs))[1]
        try:
            with torch.no_grad():
                net(_rand(torch.Generator().manual_seed(51), 1, 3, 64, 64))
        finally:
            del decoder.forward
        args, kwargs = seen[0]
        _RT_DETR_DECODER_CALL.extend([decoder, args + tuple(kwargs.values())])
    decoder, args = _RT_DETR_DECODER_CALL

    def cast(value: object) -> object:
        if isinstance(value, torch.nn.Module):
            return copy.deepcopy(value).to(dtype)
        if type(value).__name__ == "TransformerDecoder":  # 0.7.1-0.7.3: a plain object holding its layers
            value = copy.deepcopy(value)
            value.layers = value.layers.to(dtype)
            return value
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.bfloat16().to(dtype)
        return value

    return (cast(decoder),) + tuple(cast(a) for a in args)


def xfeat_preprocess_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """XFeat(top_k=8)'s resize of a (1, 3, 40, 36) image to a multiple of 32 (the network float32 for a
    float64 image: the release resizes in float32, which a float64 network refuses)."""
    net = _module_of("kornia.feature.xfeat:XFeat", torch.float32 if dtype == torch.float64 else dtype, top_k=8)
    return (net,) + _in(dtype, _rand(torch.Generator().manual_seed(52), 1, 3, 40, 36))


def nerf_positional_encoder_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """NeRF's PositionalEncoder(3 dims, 10 frequencies) on (4, 3) points in [0, 1]."""
    from kornia.nerf.positional_encoder import PositionalEncoder

    return (PositionalEncoder(3, 10),) + _in(dtype, _rand(torch.Generator().manual_seed(49), 4, 3))


def rotary_call(dtype: torch.dtype) -> Tuple[object, ...]:
    """MoonViT's apply_rotary_pos_emb: (1, 2, 5, 8) queries, float32 (5, 8) cos and sin tables."""
    g = torch.Generator().manual_seed(50)
    angles = _rand(g, 5, 8) * 6
    return _in(dtype, _rand(g, 1, 2, 5, 8) - 0.5) + (angles.cos(), angles.sin())



EXAMPLES: Dict[str, Callable[[torch.dtype], Tuple[object, ...]]] = {
    "HausdorffERLoss3D.forward": erosion3d_call,
    "PolicyAugmentBase.get_transformation_matrix": auto_augment_matrix_call,
    "PolicySequential.get_transformation_matrix": policy_matrix_call,
    "essential_from_Rt": two_camera_poses,
    "depth_from_point": depth_call,
    "camtoworld_graphics_to_vision_4x4": pose_4x4,
    "camtoworld_vision_to_graphics_4x4": pose_4x4,
    "camtoworld_to_worldtocam_Rt": rigid_pose,
    "worldtocam_to_camtoworld_Rt": rigid_pose,
    "tilt_projection": tilt_angles,
    "dice_loss": class_logits,
    "focal_loss": focal_call,
    "_HausdorffERLossBase.perform_erosion": erosion_call,
    "_solve_cramer_sym3x3": cramer_system,
    "_guided_blur_multichannel_guidance": guided_multichannel,
    "fft_conv": fft_conv_call,
    "zca_mean": zca_input,
    "zca_whiten": zca_input,
    "ZCAWhitening.inverse_transform": zca_inverse_call,
    "ellipse_to_laf": ellipses,
    "warp_kpts": warp_kpts_call,
    "_cdist": descriptor_pair,
    "conv_soft_argmax3d": soft_argmax_volume,
    "_eigh_smallest_vec": square_matrices,
    "_transform_warp_impl3d": warp3d_call,
    "find_homography_dlt": homography_points,
    "find_homography_lines_dlt": homography_lines,
    "find_fundamental": fundamental_points,
    "fundamental_from_essential": essential_and_intrinsics,
    "find_essential": essential_points,
    "decompose_essential_matrix": essential_matrix,
    "matrix_cofactor_tensor": square_matrices,
    "KRt_from_projection": projection_matrix,
    "affine_grid": affine_grid_unit_side,
    "fundamental_from_projections": projection_pair,
    "average_quaternions": quaternion_batch,
    "Z1Projection.project": z1_points,
    "PinholeCamera.intrinsics_inverse": pinhole_camera,
    "Homography.forward_inverse": homography_module,
    "Similarity.forward_inverse": similarity_module,
    "Se3.log": se3_element,
    "Se3.adjoint": se3_element,
    "integral_tensor": gray_patch_image,
    "median_blur": median_blur_call,
    "euler_from_quaternion": quaternion_components,
    "compute_correspond_epilines": epiline_call,
    "line_segment_transfer_error_one_way": segment_transfer_call,
    "sampson_epipolar_distance": closest_point_call,
    "symmetrical_epipolar_distance": closest_point_call,
    "oneway_transfer_error": transfer_error_call,
    "symmetric_transfer_error": transfer_error_call,
    "distort_points": distortion_call,
    "solve_pnp_dlt": pnp_call,
    "accuracy": accuracy_call,
    "warp_points_tps": tps_points_call,
    "FilterResponseNorm2d.forward": filter_response_norm_call,
    "LAFOrienter.forward": laf_orienter_call,
    "get_laf_descriptors": laf_descriptors_call,
    "LocalFeature.forward": local_feature_call,
    "left_to_right_epipolar_distance": closest_point_call,
    "right_to_left_epipolar_distance": closest_point_call,
    "projections_from_fundamental": square_matrices,
    "sample_is_valid_for_homography": homography_sample,
    "get_perpendicular": perpendicular_call,
    "get_closest_point_on_epipolar_line": closest_point_call,
    "relative_camera_motion": two_camera_poses,
    "projection_from_KRt": camera_krt,
    "MS_SSIMLoss.forward": ms_ssim_call,
    "psnr": psnr_call,
    "blur_pool2d": blur_pool_call,
    "max_blur_pool2d": blur_pool_call,
    "BlurPool2D.forward": blur_pool_module_call,
    "MaxBlurPool2D.forward": max_blur_pool_module_call,
    "edge_aware_blur_pool2d": edge_aware_blur_call,
    "rgb_to_hls": gray_patch_image,
    "rgb_to_hsv": gray_patch_image,
    "hsv_to_rgb": hsv_image,
    "luv_to_rgb": luv_image,
    "rgb_to_luv": black_rgb_image,
    "rgb_to_lab": rgb_image,
    "lab_to_rgb": lab_image,
    "rgb_to_grayscale": rgb_image,
    "apply_colormap": colormap_call,
    "adjust_hue": gray_image_and_factor,
    "adjust_saturation": gray_image_and_factor,
    "adjust_hue_raw": gray_image_and_factor,
    "adjust_saturation_raw": gray_image_and_factor,
    "histogram": histogram_far_call,
    "histogram2d": histogram2d_far_call,
    "equalize": image_to_equalize,
    "ssim": image_pair_window,
    "ssim_loss": image_pair_window,
    "ssim3d": volume_pair_window,
    "ssim3d_loss": volume_pair_window,
    "charbonnier_loss": image_pair,
    "canny": rgb_image,
    "otsu_threshold": ramp_image,
    "OtsuThreshold.forward": otsu_module_call,
    "gaussian_blur2d": blur_call,
    "box_blur": box_blur_call,
    "sobel": sobel_call,
    "jpeg_codec_differentiable": jpeg_call,
    "gftt_response": single_channel_image,
    "make_upright": laf_call,
    "PatchAffineShapeEstimator.forward": affine_shape_call,
    "PatchDominantGradientOrientation.forward": dominant_orientation_call,
    "quaternion_to_rotation_matrix": unbatched_quaternion,
    "rotation_matrix_to_quaternion": unbatched_rotation_matrix,
    "essential_from_fundamental": epipolar_call,
    "solve_quartic": quartic_coefficients,
    "conv_soft_argmax2d": soft_argmax_call,
    "depth_to_normals": depth_and_camera,
    "get_tps_transform": tps_points,
    "warp_image_tps": tps_warp_call,
    "find_homography_dlt_iterated": weighted_homography_points,
    "image_histogram2d": histogram_call,
    "lovasz_hinge_loss": lovasz_hinge_call,
    "lovasz_softmax_loss": lovasz_softmax_call,
    "RandomPlanckianJitter.apply_transform": planckian_call,
    "ScaleSpaceDetector.detect": scale_space_detect_call,
    "ScalePyramid.forward": scale_pyramid_call,
    "MKDDescriptor.forward": mkd_call,
    "_validate_input_dtype": augmentation_dtype_check,
    "get_gaussian_discrete_kernel1d": discrete_kernel_call,
    "normal_transform_pixel": normal_transform_call,
    "normalize_homography": normalize_homography_call,
    "denormalize_homography": normalize_homography_call,
    "normal_transform_pixel3d": normal_transform3d_call,
    "normalize_homography3d": normalize_homography3d_call,
    "MultiResolutionDetector.detect_features_on_single_level": single_level_detection_call,
    "filter2d": large_kernel_filter,
    "ScalePyramid._blur_fast": pyramid_blur_call,
    "warp_affine": warp_affine_call,
    "warp_perspective": warp_perspective_call,
    "remap": remap_call,
    "homography_warp": homography_warp_call,
    "warp_grid": warp_grid_call,
    "warp_affine3d": warp_affine3d_call,
    "warp_perspective3d": warp_perspective3d_call,
    "homography_warp3d": homography_warp3d_call,
    "warp_grid3d": warp_grid3d_call,
    "get_rotation_matrix2d": rotation_matrix2d_call,
    "get_affine_matrix2d": affine_matrix2d_call,
    "get_affine_matrix3d": affine_matrix3d_call,
    "get_projective_transform": projective_transform_call,
    "get_perspective_transform": perspective_transform_call,
    "get_perspective_transform3d": perspective_transform3d_call,
    "get_shear_matrix2d": shear_matrix2d_call,
    "get_shear_matrix3d": shear_matrix3d_call,
    "invert_affine_transform": affine_inverse_call,
    "affine": affine_call,
    "rotate": rotate_call,
    "translate": translate_call,
    "scale": scale_call,
    "shear": shear_call,
    "affine3d": affine3d_call,
    "rotate3d": rotate3d_call,
    "crop_by_transform_mat": crop_by_transform_call,
    "crop_by_boxes": crop_by_boxes_call,
    "crop_and_resize": crop_boxes_call,
    "center_crop": center_crop_call,
    "CenterCrop2D.forward": center_crop_module_call,
    "crop_by_transform_mat3d": crop_by_transform3d_call,
    "crop_by_boxes3d": crop_by_boxes3d_call,
    "crop_and_resize3d": crop_boxes3d_call,
    "center_crop3d": center_crop3d_call,
    "elastic_transform2d": elastic_call,
    "warp_frame_depth": warp_frame_depth_call,
    "DepthWarper.forward": depth_warper_call,
    "undistort_image": undistort_call,
    "Affine.forward": affine_module_call,
    "HomographyWarper.forward": homography_warper_call,
    "HomographyWarper.precompute_warp_grid": homography_warper_precompute_call,
    "LightGlue._forward": lightglue_call,
    "DeDoDeDetector.forward": dedode_detector_call,
    "RenderingDeFMO.forward": defmo_rendering_call,
    "Attention.forward": tiny_vit_attention_call,
    "PositionEmbeddingRandom._pe_encoding": sam_position_encoding_call,
    "PromptEncoder.forward": sam_prompt_encoder_call,
    "LiteMLA.relu_linear_att": lite_mla_call,
    "LoFTR.forward": loftr_call,
    "PositionalEncoder.forward": nerf_positional_encoder_call,
    "TransformerDecoder.forward": rt_detr_decoder_call,
    "XFeat._preprocess_tensor": xfeat_preprocess_call,
    "apply_rotary_pos_emb": rotary_call,
}


# Targets without an example: the battery still holds each to revert, pickling and identity;
# its numbers are tested where the reason says.
SIZES_NOT_TENSORS = "takes sizes, not tensors: bitwise against kornia 0.9.0's golden grids, tests/test_fix_utils_grids.py"
DESCRIPTOR_NETWORK = "a descriptor network's forward (needs a seeded network): against kornia 0.9.0, tests/test_fix_feature_descriptors.py"
SAMPLES_IN_FLOAT32 = "samples in float32 itself, not the widened call narrowed: tests/test_fix_feature_patches.py"
GRID_SAMPLE = "torch's grid_sample for kornia's calls, non-finite grids zeroed (a rule of its own): tests/test_fix_warp_sampling*.py"
TORCH_OP_FOR_KORNIA = "a torch op for kornia's calls only (module views): through kornia's call sites, tests/test_kernel_probe.py (OP_CALLS) and tests/test_fix_torch_ops.py"
AUGMENTATION_METHOD = "an augmentation or container method (needs a seeded instance): tests/test_fix_augmentation_pipeline.py"
CONV_HANG = "kornia's conv2d calls, gated by CPU capability (unpatched, a half call may never return): tests/test_fix_filters_conv_hang.py"
SIFT_FLOAT16 = ("float16 only (bfloat16 keeps the release's own descriptor), the orientation's derivative 0 where "
                "the pixel gradient is 0: forward against the release's float32 narrowed, gradients against 0.9.0, "
                "tests/test_fix_feature_descriptors.py")
NETWORK_CALL = "a network's module call, an option rather than a numerical fix: tests/test_fix_networks_cpu_half.py"

EXEMPT: Dict[str, str] = {
    "create_meshgrid": SIZES_NOT_TENSORS,
    "create_meshgrid3d": SIZES_NOT_TENSORS,
    "SOSNet.forward": DESCRIPTOR_NETWORK,
    "HyNet.forward": DESCRIPTOR_NETWORK,
    "HardNet.forward": DESCRIPTOR_NETWORK,
    "HardNet8.forward": DESCRIPTOR_NETWORK,
    "SIFTDescriptor.forward": SIFT_FLOAT16,
    "DenseSIFTDescriptor.forward": SIFT_FLOAT16,
    "extract_patches_simple": SAMPLES_IN_FLOAT32,
    "extract_patches_from_pyramid": SAMPLES_IN_FLOAT32,
    "grid_sample": GRID_SAMPLE,
    "So2.inverse": "complex32 rotations, not a half float tensor: tests/test_fix_torch_ops.py (so2/se2 inverse)",
    "So2.log": "complex32 rotations, not a half float tensor: tests/test_fix_torch_ops.py (so2 log)",
    "Quaternion.__mul__": "Quaternion objects, not tensors: tests/test_fix_torch_ops.py (quaternion products)",
    "Se3.exp": "returns an Se3 object (new Parameters), not tensors: tests/test_fix_torch_ops.py (se3 in float16)",
    "Hyperplane.through": "returns a Hyperplane (Vector3 normal, Scalar offset), not tensors: tests/test_fix_torch_ops.py (hyperplane)",
    "Se2.log": "an Se2 (complex32 rotation parameter), not a half float tensor: tests/test_fix_torch_ops.py (se2 log)",
    "ParametrizedLine.projection": "a ParametrizedLine's parameters: tests/test_fix_torch_ops.py (lines in float16)",
    "ParametrizedLine.squared_distance": "a ParametrizedLine's parameters: tests/test_fix_torch_ops.py (lines in float16)",
    "fit_line": "returns a ParametrizedLine (new Parameters), not tensors: tests/test_fix_torch_ops.py (lines in float16)",
    "ImageRegistrator.register": "an optimisation over the module's own model (state, 2 x 500 steps): tests/test_fix_torch_ops.py (old-torch kernel gaps)",
    "Homography.reset_model": "returns nothing, fills the module's parameter in place: tests/test_fix_torch_ops.py (registration model reset)",
    "ZCAWhitening.forward": "a fitted module's forward (fit state from the call): tests/test_fix_torch_ops.py (public API, scripting)",
    "inverse": "torch.inverse for kornia's calls only (module views): tests/test_fix_torch_ops.py (kornia-scoped torch.inverse)",
    "pad": TORCH_OP_FOR_KORNIA,
    "conv3d": TORCH_OP_FOR_KORNIA,
    "atan2": TORCH_OP_FOR_KORNIA,
    "cumsum": TORCH_OP_FOR_KORNIA,
    "topk": TORCH_OP_FOR_KORNIA,
    "bmm": TORCH_OP_FOR_KORNIA,
    "matmul": TORCH_OP_FOR_KORNIA,
    "interpolate": TORCH_OP_FOR_KORNIA,
    "get_hanning_kernel2d": "takes a size and a dtype, no tensor to widen: installed where present, tests/test_fix_torch_ops.py",
    "softmax": TORCH_OP_FOR_KORNIA,
    "eye": TORCH_OP_FOR_KORNIA,
    "_BasicAugmentationBase.forward": AUGMENTATION_METHOD,
    "GeometricAugmentationBase2D.inverse": AUGMENTATION_METHOD,
    "RandomCrop3D.forward": AUGMENTATION_METHOD,
    "MixAugmentationBaseV2.forward": AUGMENTATION_METHOD,
    "RandomTransplantation.forward": AUGMENTATION_METHOD,
    "PolicyAugmentBase.forward": AUGMENTATION_METHOD,
    "ImageSequentialBase.forward": AUGMENTATION_METHOD,
    "ImageSequentialBase.inverse": AUGMENTATION_METHOD,
    "AugmentationSequential.forward": AUGMENTATION_METHOD,
    "AugmentationSequential.inverse": AUGMENTATION_METHOD,
    "VideoSequential.forward": AUGMENTATION_METHOD,
    "VideoSequential.inverse": AUGMENTATION_METHOD,
    "PatchSequential.forward": AUGMENTATION_METHOD,
    "PatchSequential.inverse": AUGMENTATION_METHOD,
    "diamond_square": ("takes sizes, not tensors, and acts only inside the shim's float32 evaluation of a half plasma "
                       "augmentation: tests/test_half_at_scale.py (plasma fractal a few images a step)"),
    "conv2d": CONV_HANG,
    "SOSNet._call_impl": NETWORK_CALL,
    "HardNet._call_impl": NETWORK_CALL,
    "HardNet8._call_impl": NETWORK_CALL,
    "HyNet._call_impl": NETWORK_CALL,
    "TFeat._call_impl": NETWORK_CALL,
    "KeyNet._call_impl": NETWORK_CALL,
    "OriNet._call_impl": NETWORK_CALL,
    "LAFAffNetShapeEstimator._call_impl": NETWORK_CALL,
    "DISK._call_impl": NETWORK_CALL,
    "Unet._call_impl": NETWORK_CALL,
    "DeDoDeDetector._call_impl": NETWORK_CALL,
    "DeDoDeDescriptor._call_impl": NETWORK_CALL,
    "ALIKED._call_impl": NETWORK_CALL,
    "XFeatModel._call_impl": NETWORK_CALL,
    "SOLD2Net._call_impl": NETWORK_CALL,
    "ResNetFPN_8_2._call_impl": NETWORK_CALL,
    "ResNetFPN_16_4._call_impl": NETWORK_CALL,
    "DeFMO._call_impl": NETWORK_CALL,
    "DexiNed._call_impl": NETWORK_CALL,
    "YuFaceDetectNet._call_impl": NETWORK_CALL,
    "SmallSRNet._call_impl": NETWORK_CALL,
}
