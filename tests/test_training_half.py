"""Training through kornia in half precision, as a user does, float16 and bfloat16 on CPU.

Each scenario runs from one initial state on one batch of data, both exact in float16 and
bfloat16, in float32 and in the half dtype, with the shim (every fix it installs here) and
without it. The half run must follow the float32 run's trajectory within what rounding once
per step allows (docs/training.md derives it):

    ||theta_half_k - theta_32_k||_2  <=  SLACK * sum_{j<k} u * (||theta_half_{j+1}||_2 + c * lr * ||g_half_j||_2)

u is the half dtype's unit roundoff (2**-11 float16, 2**-8 bfloat16), g the gradient, lr the
step, c the number of half roundings on the gradient's path (per scenario). Each step rounds
the updated parameters once (u * ||theta||) and the gradient c times (u * c * lr * ||g|| after
the step); gradient descent on these losses at these steps does not amplify an earlier error
(a non-expansive step, lr * L <= 2 for a convex L-smooth loss), so the errors add up. SLACK = 2
covers the second-order terms. The float32 run is bitwise the same with and without the shim.
"""

import contextlib
import math
import re

import pytest
import torch

import kornia
from kornia_halfpatch import testing
from kornia_halfpatch._kernels import widening_missing_kernels
from support import UPSTREAM_FIXED, lacks_half_kernel

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")

HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Unpatched on an older torch, a half CPU kernel kornia reaches may be missing (grid_sample below
# 2.6, reflection padding below 2.5): the release fails there too, with torch's error.
MISSING_HALF_KERNEL = re.compile(r"not implemented for '?(?:Half|BFloat16)")
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
SLACK = 2.0


def half_exact(t):
    """The tensor's values rounded to bfloat16: exact in float16 too at these magnitudes, so the
    float32 and half runs start from the very same state and data."""
    return t.bfloat16().float()


class Trajectory:
    """Per step (before its update): the loss, the parameters flattened (float64), the gradient."""

    def __init__(self):
        self.losses, self.params, self.grads = [], [], []

    def record(self, loss, params):
        params = list(params)
        self.losses.append(None if loss is None else float(loss))
        self.params.append(torch.cat([p.detach().double().flatten() for p in params]))
        self.grads.append(torch.cat([p.grad.detach().double().flatten() for p in params]))

    def distances(self, reference):
        return [float((a - b).norm()) for a, b in zip(self.params, reference.params)]

    def bounds(self, dtype, lr, gradient_roundings):
        u, total, bounds = UNIT_ROUNDOFF[dtype], 0.0, [0.0]
        for k in range(1, len(self.params)):
            total += u * (float(self.params[k].norm()) + gradient_roundings * lr * float(self.grads[k - 1].norm()))
            bounds.append(SLACK * total)
        return bounds

    def same(self, other):
        return self.losses == other.losses and all(torch.equal(a, b) for a, b in zip(self.params, other.params))


def assert_follows(half, reference, dtype, lr, gradient_roundings):
    distances, bounds = half.distances(reference), half.bounds(dtype, lr, gradient_roundings)
    assert all(loss is None or math.isfinite(loss) for loss in half.losses), f"non-finite half loss: {half.losses}"
    assert all(bool(g.isfinite().all()) for g in half.grads), "non-finite half gradient"
    assert all(d <= b for d, b in zip(distances, bounds)), (
        f"{dtype}: parameter distance {['%.2e' % d for d in distances]} exceeds {['%.2e' % b for b in bounds]}")


def shim(patched):
    return testing.isolated() if patched else testing.isolated(only=())


# --------------------------------------------------------------------------------------------
# a. A small conv model behind kornia augmentations (RandomAffine + ColorJitter, the same
# parameters in every run), trained by SGD with kornia's SSIM loss. The augmentation follows
# the model, so the gradients flow back through kornia's warp and colour adjustments.

MODEL_LR, MODEL_STEPS = 0.5, 4
# conv output, augmentation output, loss: narrowed; their gradients again: 6 roundings
MODEL_GRADIENT_ROUNDINGS = 6


def train_model_behind_augmentations(dtype, loss="ssim"):
    import kornia.augmentation as K

    torch.manual_seed(0)
    net = torch.nn.Conv2d(3, 3, 3, padding=1)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(half_exact(p))
    generator = torch.Generator().manual_seed(2)
    images = half_exact(torch.rand(1, 3, 24, 24, generator=generator))
    targets = half_exact(kornia.filters.box_blur(images, (3, 3)))
    augment = K.AugmentationSequential(
        K.RandomAffine(15.0, translate=(0.1, 0.1), p=1.0), K.ColorJitter(0.1, 0.1, 0.1, 0.0, p=1.0))
    torch.manual_seed(3)
    params = augment.forward_parameters(images.shape)  # float32, shared by every run
    net = net.to(dtype)
    loss_fn = kornia.losses.SSIMLoss(5) if loss == "ssim" else kornia.losses.MS_SSIMLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=MODEL_LR)
    # The conv model is the user's, not kornia's: on a torch without a float16 CPU convolution
    # (2.1) it runs widened (its output narrowed once, the one rounding counted below) in every
    # half run alike, so kornia's part is what is measured; elsewhere this is a no-op.
    users_model = widening_missing_kernels if lacks_half_kernel("conv2d", dtype) else contextlib.nullcontext
    trajectory = Trajectory()
    for _ in range(MODEL_STEPS):
        optimizer.zero_grad()
        with users_model():
            out = net(images.to(dtype))
        loss = loss_fn(augment(out, params=params), augment(targets.to(dtype), params=params))
        loss.backward()
        trajectory.record(loss, net.parameters())
        optimizer.step()
    return trajectory


# b. kornia's image registration recipe: ImageRegistrator('homography') over a two-level
# pyramid, a few iterations per level, on a smooth synthetic image and its warp. SGD for the
# bound (Adam divides by its running gradient norm, which amplifies the rounding of a vanishing
# gradient: no per-step bound); the default Adam recipe is held to finite results.

REGISTRATION_LR, REGISTRATION_ITERATIONS, REGISTRATION_LEVELS = 1e-3, 5, 2
# the model's matrix, the warped images, the loss, and the gradients back: 6 roundings
REGISTRATION_GRADIENT_ROUNDINGS = 6


def registration_pair():
    generator = torch.Generator().manual_seed(0)
    image = kornia.filters.gaussian_blur2d(torch.rand(1, 1, 32, 32, generator=generator), (5, 5), (1.5, 1.5))
    image = (image - image.min()) / (image.max() - image.min())
    H = torch.tensor([[[1.0, 0.05, 1.0], [-0.03, 1.0, -0.5], [0.0, 0.0, 1.0]]])
    warped = kornia.geometry.warp_perspective(image, H, (32, 32), align_corners=True)
    return half_exact(image), half_exact(warped)


class _RecordingSGD(torch.optim.SGD):
    """SGD that records each step's parameters and gradients before updating (the registrator
    builds its optimizer itself: this is how a user sees the trajectory)."""

    trajectory = None

    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        type(self).trajectory.record(None, params)  # the registrator keeps its loss
        return super().step(closure)


def register(dtype, optimizer=None):
    """(the trajectory, the final matrix, the source warped into the destination)."""
    from kornia.geometry import ImageRegistrator

    source, destination = registration_pair()
    trajectory = Trajectory()
    _RecordingSGD.trajectory = trajectory
    registrator = ImageRegistrator(
        "homography", optimizer=optimizer or _RecordingSGD, lr=REGISTRATION_LR, tolerance=0.0,
        pyramid_levels=REGISTRATION_LEVELS, num_iterations=REGISTRATION_ITERATIONS).to(dtype)
    matrix = registrator.register(source.to(dtype), destination.to(dtype))
    return trajectory, matrix.detach(), registrator.warp_src_into_dst(source.to(dtype)).detach()


# c. Total-variation denoising by gradient descent on the image itself: a convex loss,
# 0.5 * ||x - noisy||^2 + weight * TV(x) (both sums), whose step is non-expansive at this lr.

TV_LR, TV_STEPS, TV_WEIGHT = 0.1, 8, 0.05
# the squared error's gradient (torch, in half) and TV's gradient narrowed, added: 3 roundings
TV_GRADIENT_ROUNDINGS = 3


def denoise_total_variation(dtype):
    generator = torch.Generator().manual_seed(1)
    clean = kornia.filters.gaussian_blur2d(torch.rand(1, 3, 24, 24, generator=generator), (5, 5), (2.0, 2.0))
    noisy = half_exact(clean + 0.1 * torch.randn(clean.shape, generator=generator)).to(dtype)
    image = noisy.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([image], lr=TV_LR)
    trajectory = Trajectory()
    for _ in range(TV_STEPS):
        optimizer.zero_grad()
        loss = 0.5 * (image - noisy).float().pow(2).sum() + TV_WEIGHT * kornia.losses.total_variation(image).float().sum()
        loss.backward()
        trajectory.record(loss, [image])
        optimizer.step()
    return trajectory


# --------------------------------------------------------------------------------------------


def float32_and_half(run, dtype, patched):
    with shim(patched):
        return run(torch.float32), run(dtype)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
@pytest.mark.parametrize("loss", ["ssim", "ms_ssim"])
def test_model_behind_augmentations_follows_the_float32_trajectory(dtype, loss):
    reference, half = float32_and_half(lambda d: train_model_behind_augmentations(d, loss), dtype, patched=True)
    assert_follows(half, reference, dtype, MODEL_LR, MODEL_GRADIENT_ROUNDINGS)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_model_trained_with_ms_ssim_fails_unpatched(dtype):
    """Unpatched, MS_SSIMLoss meets a half image with its float32 Gaussian kernels (a dtype error)
    or refuses bfloat16 (the dtype allow-list of 0.7.x-0.8.2), on every release before 0.9.0."""
    with shim(patched=False):
        with pytest.raises((RuntimeError, TypeError)) as raised:
            train_model_behind_augmentations(dtype, "ms_ssim")
    message = str(raised.value)
    # float16 (and bfloat16 where the allow-list takes it, 0.8.3): the half image meets float32
    # kernels; oneDNN's and ATen's convolutions word it differently per instruction set.
    mismatch = ("input type" in message.lower() and "weight type" in message.lower()) or (
        "expected scalar type" in message.lower() and "found float" in message.lower())
    refused = dtype == torch.bfloat16 and "got torch.bfloat16" in message.lower()
    assert MISSING_HALF_KERNEL.search(message) or mismatch or refused, message


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_model_behind_augmentations_fails_unpatched(dtype):
    """Unpatched, the augmentations compute their matrices and grids in half: float16 gives a NaN
    loss from the second step (0.7.4-0.8.3; 0.7.0's ColorJitter raises on the NaN hue); bfloat16 is refused by the dtype allow-list
    (0.7.4, 0.8.2) or, accepted (0.8.3), leaves the bound (its first step's loss 2.5% off)."""
    with shim(patched=False):
        reference = train_model_behind_augmentations(torch.float32)
        try:
            half = train_model_behind_augmentations(dtype)
        except TypeError as exc:
            assert dtype == torch.bfloat16 and "bfloat16" in str(exc), exc
            return
        except RuntimeError as exc:
            # An older torch without the half CPU kernel (grid_sample < 2.6), or kornia 0.7.0's
            # hsv_to_rgb meeting the NaN hue of a half-precision step (NaN as a gather index).
            assert MISSING_HALF_KERNEL.search(str(exc)) or "out of bounds" in str(exc), exc
            return
    with pytest.raises(AssertionError):
        assert_follows(half, reference, dtype, MODEL_LR, MODEL_GRADIENT_ROUNDINGS)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_image_registration_follows_the_float32_trajectory(dtype):
    (reference, reference_matrix, _), (half, matrix, warped) = float32_and_half(register, dtype, patched=True)
    assert len(half.params) == REGISTRATION_LEVELS * REGISTRATION_ITERATIONS
    assert bool(warped.isfinite().all()) and bool(matrix.isfinite().all())
    assert_follows(half, reference, dtype, REGISTRATION_LR, REGISTRATION_GRADIENT_ROUNDINGS)


def register_half_images_with_float32_parameters(dtype):
    """The recipe as kornia ships it (Adam, lr 1e-3) with float32 parameters and half images: a
    half model under torch's Adam NaNs by itself (its eps 1e-8 is 0 in float16 and 0.001 * g**2
    underflows, so m / sqrt(v) is 0/0 at the first step; docs/training.md)."""
    from kornia.geometry import ImageRegistrator

    source, destination = registration_pair()
    registrator = ImageRegistrator(
        "homography", lr=REGISTRATION_LR, tolerance=0.0, pyramid_levels=REGISTRATION_LEVELS,
        num_iterations=REGISTRATION_ITERATIONS)
    return registrator.register(source.to(dtype), destination.to(dtype)).detach()


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_image_registration_of_half_images_with_float32_parameters(dtype):
    """Adam's step is about lr whatever the gradient's scale, so there is no per-step rounding
    bound to hold it to: the half images must give finite float32 parameters that recover the
    float32 run's motion to within a tenth of it (measured: 0.8% float16, 0.9% bfloat16, on 0.7.4-0.8.3)."""
    with shim(patched=True):
        reference = register_half_images_with_float32_parameters(torch.float32)
        matrix = register_half_images_with_float32_parameters(dtype)
    assert matrix.dtype == torch.float32 and bool(matrix.isfinite().all())
    motion = (reference - torch.eye(3)).abs().max()
    assert (matrix - reference).abs().max() <= 0.1 * motion


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_image_registration_of_half_images_with_float32_parameters_fails_unpatched(dtype):
    # the release's warp mixes the float32 matrix's grid with the half image
    with shim(patched=False), pytest.raises(RuntimeError, match="expected scalar type|" + MISSING_HALF_KERNEL.pattern):
        register_half_images_with_float32_parameters(dtype)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_image_registration_fails_unpatched(dtype):
    # The homography model's forward_inverse inverts the half matrix: torch has no half inverse.
    with shim(patched=False), pytest.raises(RuntimeError, match="Low precision dtypes not supported|" + MISSING_HALF_KERNEL.pattern):
        register(dtype)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_total_variation_denoising_follows_the_float32_trajectory(dtype):
    reference, half = float32_and_half(denoise_total_variation, dtype, patched=True)
    assert_follows(half, reference, dtype, TV_LR, TV_GRADIENT_ROUNDINGS)


@pytest.mark.parametrize("dtype", list(HALF.values()), ids=list(HALF))
def test_total_variation_denoising_is_untouched_by_the_shim(dtype):
    """Nothing on this path is patched (total_variation is sums of differences, right in half on
    the releases): the unpatched run is the patched run, bit for bit, in float32 and in half."""
    patched = float32_and_half(denoise_total_variation, dtype, patched=True)
    unpatched = float32_and_half(denoise_total_variation, dtype, patched=False)
    assert patched[0].same(unpatched[0]) and patched[1].same(unpatched[1])


def registration_trajectory(dtype):
    return register(dtype)[0]


@pytest.mark.parametrize(
    "run", [train_model_behind_augmentations, registration_trajectory, denoise_total_variation],
    ids=["model", "registration", "tv"])
def test_float32_trajectory_is_bitwise_the_releases(run):
    with shim(patched=True):
        patched = run(torch.float32)
    with shim(patched=False):
        unpatched = run(torch.float32)
    assert patched.same(unpatched)
