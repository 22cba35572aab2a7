"""augmentation: a half augmentation is the release's float32 augmentation of the widened input,
narrowed once.

Oracle: the installed release's float32 augmentation (the augmentation_pipeline fix reverted) of the half
input widened to float32, under the same seed, computed in the same run; its outputs narrowed to
kornia 0.9.0's dtypes (measured in the 0.9.0 env: each output in its own input's dtype, integer
masks integer, transform_matrix in the input's half dtype). float32/float64: outputs, ``_params``,
transform matrices and the random stream after the call bitwise the unpatched release's."""

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import testing
from support import (FULL_DTYPES, HALF_DTYPES, KORNIA, UPSTREAM_FIXED, assert_as_close_to_float64_as_the_release,
                     bitwise_equal)

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
DTYPE_IDS = [str(d).replace("torch.", "") for d in HALF_DTYPES]
FIX = ["augmentation_pipeline"]


def _K():
    import kornia.augmentation as K

    return K


def smooth_image(batch=2, channels=3, size=32, seed=0):
    # Blurred noise in [0, 1]: a warp's error then measures where it samples, not aliasing.
    generator = torch.Generator().manual_seed(seed)
    noise = torch.rand(batch, channels, size // 4, size // 4, generator=generator)
    return torch.nn.functional.interpolate(noise, size=(size, size), mode="bicubic", align_corners=False).clamp(0, 1)


def transforms():
    K = _K()
    jiggle = dict(brightness=0.2, contrast=0.2, saturation=0.2, hue=0.2, p=1.0)
    cases = {
        "RandomAffine": lambda: K.RandomAffine(30.0, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10.0, p=1.0),
        "RandomAffine same_on_batch": lambda: K.RandomAffine(30.0, p=1.0, same_on_batch=True),
        "RandomAffine p=0.5": lambda: K.RandomAffine(30.0, p=0.5),
        "RandomRotation": lambda: K.RandomRotation(40.0, p=1.0),
        "RandomPerspective": lambda: K.RandomPerspective(0.4, p=1.0),
        "RandomResizedCrop": lambda: K.RandomResizedCrop((24, 20), p=1.0),
        "RandomCrop": lambda: K.RandomCrop((20, 24), padding=2, p=1.0),
        "RandomElasticTransform": lambda: K.RandomElasticTransform(p=1.0),
        "RandomThinPlateSpline": lambda: K.RandomThinPlateSpline(p=1.0),
        "ColorJiggle": lambda: K.ColorJiggle(**jiggle),
        "RandomPlanckianJitter": lambda: K.RandomPlanckianJitter(p=1.0),
        "RandomGrayscale": lambda: K.RandomGrayscale(p=1.0),
    }
    return cases


CASES = sorted(transforms())
# Its 63x63 Gaussian blur of the noise is convolved as a column and a row in the float32
# evaluation (filters_conv_hang.rank_one_factors): the bound of test_half_at_scale's elastic test.
ROUNDED_OTHERWISE = {"RandomElasticTransform"}


def _seeded(call, seed=31):
    torch.manual_seed(seed)
    out = call()
    return out, torch.rand(4)  # the stream after the call: what a seeded program draws next


def _matrix(module):
    return module.__dict__.get("_transform_matrix")


def _floating_params(params):
    return {k: v for k, v in params.items() if isinstance(v, torch.Tensor)}


def _assert_params_equal(a, b):
    a, b = _floating_params(a), _floating_params(b)
    assert a.keys() == b.keys()
    for key in a:
        assert bitwise_equal(a[key], b[key]), key


def _release_float32(make, image, seed=31):
    """The oracle: the unpatched release's float32 run on the widened image."""
    module = make()
    with kornia_halfpatch.unpatched(FIX):
        (out, stream) = _seeded(lambda: module(image.float()), seed)
    return module, out, stream


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", CASES)
def test_half_is_the_float32_augmentation_narrowed(name, dtype):
    make = transforms()[name]
    image = smooth_image().to(dtype)
    with testing.isolated():
        reference_module, reference, reference_stream = _release_float32(make, image)
        module = make()
        out, stream = _seeded(lambda: module(image))
    assert out.dtype == dtype
    if name in ROUNDED_OTHERWISE:
        float64 = _seeded(lambda: make()(image.double()))[0]
        assert_as_close_to_float64_as_the_release(out, reference.to(dtype), float64, 0.01)
    else:
        assert bitwise_equal(out, reference.to(dtype)), name
    assert bool(torch.isfinite(out).all())
    # Same draws: the parameters and the stream after the call are the float32 run's.
    _assert_params_equal(module._params, reference_module._params)
    assert bitwise_equal(stream, reference_stream)
    matrix, reference_matrix = _matrix(module), _matrix(reference_module)
    if reference_matrix is not None:
        assert matrix.dtype == dtype  # the release's (and 0.9.0's) dtype for a half input
        assert bitwise_equal(matrix, reference_matrix.to(dtype))


@pytest.mark.parametrize("dtype", FULL_DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_full_precision_is_bitwise_unchanged(name, dtype):
    make = transforms()[name]
    image = smooth_image().to(dtype)
    with testing.isolated():
        patched_module = make()
        patched, patched_stream = _seeded(lambda: patched_module(image))
        unpatched_module = make()
        with kornia_halfpatch.unpatched(FIX):
            unpatched, unpatched_stream = _seeded(lambda: unpatched_module(image))
    assert bitwise_equal(patched, unpatched)
    assert bitwise_equal(patched_stream, unpatched_stream)
    _assert_params_equal(patched_module._params, unpatched_module._params)
    if _matrix(unpatched_module) is not None:
        assert bitwise_equal(_matrix(patched_module), _matrix(unpatched_module))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_keepdim_unbatched_and_3d(dtype):
    K = _K()
    image = smooth_image(batch=1)[0].to(dtype)  # CHW, keepdim: CHW back
    volume = smooth_image(batch=1, channels=4, size=16)[:, None].to(dtype)  # B, C, D, H, W
    cases = [
        (lambda: K.RandomAffine(20.0, p=1.0, keepdim=True), image),
        (lambda: K.RandomAffine3D(30.0, p=1.0), volume),
        (lambda: K.RandomRotation3D(30.0, p=1.0), volume),
        (lambda: K.RandomCrop3D((3, 12, 12), p=1.0), volume),
    ]
    with testing.isolated():
        for make, x in cases:
            reference_module, reference, _ = _release_float32(make, x)
            module = make()
            out, _ = _seeded(lambda: module(x))
            assert out.shape == reference.shape and out.dtype == dtype
            assert bitwise_equal(out, reference.to(dtype)), type(module).__name__


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["RandomRotation", "RandomAffine", "RandomPerspective"])
def test_inverse_is_the_float32_inverse_narrowed(name, dtype):
    make = transforms()[name]
    image = smooth_image().to(dtype)
    with testing.isolated():
        module = make()
        out, _ = _seeded(lambda: module(image))
        back = module.inverse(out)
        # The oracle holds what a half caller holds: the narrowed output, widened.
        reference_module, reference, _ = _release_float32(make, image)
        with kornia_halfpatch.unpatched(FIX):
            reference_back = reference_module.inverse(out.float())
            again = reference_module(image.float(), params=reference_module._params)
        replayed = module(image, params=module._params)
    assert back.dtype == dtype
    assert bitwise_equal(back, reference_back.to(dtype))
    # The stored float32 parameters replay the same augmentation.
    assert bitwise_equal(replayed, again.to(dtype))
    assert bitwise_equal(replayed, out)


def _gradients(make, image, upstream, degrees, seed=31):
    """Output, image gradient and the learnable degrees' gradient of one seeded call."""
    image = image.detach().requires_grad_(True)
    module = make(degrees)
    torch.manual_seed(seed)
    out = module(image)
    (out.float() * upstream).sum().backward()
    return out, image.grad, getattr(degrees, "grad", None)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("learnable", [False, True], ids=["fixed-range", "learnable-range"])
@pytest.mark.parametrize("name", ["RandomAffine", "RandomRotation"])
def test_half_gradients_are_the_float32_gradients_narrowed(name, learnable, dtype):
    """The image gradient is the float32 backward narrowed once. A learnable half range
    (``nn.Parameter``) made 0.8.2's RandomAffine draw its parameters in half (an angle of -8.4359
    degrees became -8.4375, and kornia's own test_backward saw the gradient change sign): the
    promoted call gives the module float32 copies of its half parameters, so the draws, the output
    and the image gradient are the float32 run's. RandomRotation's generator casts its draws to
    its range tensor's dtype itself (held outside the module's parameters): left as the release
    has it, so only its fixed range is compared."""
    if name == "RandomRotation" and learnable:
        pytest.skip("RandomRotation's PlainUniformGenerator casts draws to the range's own dtype")
    K = _K()
    make = {"RandomAffine": lambda d: K.RandomAffine(d, translate=(0.1, 0.2), p=1.0),
            "RandomRotation": lambda d: K.RandomRotation(d, p=1.0)}[name]
    image = smooth_image(size=16).to(dtype)
    # Rounded to the half dtype: the gradient a half output can hold, the same for both runs.
    upstream = torch.randn(image.shape, generator=torch.Generator().manual_seed(3)).to(dtype).float()

    def degrees(parameter_dtype):
        return torch.nn.Parameter(torch.tensor(20.0, dtype=parameter_dtype)) if learnable else 20.0

    with testing.isolated():
        with kornia_halfpatch.unpatched(FIX):
            reference, reference_image_grad, reference_degrees_grad = _gradients(
                make, image.float(), upstream, degrees(torch.float32))
        out, image_grad, degrees_grad = _gradients(make, image, upstream, degrees(dtype))
    assert out.dtype == image_grad.dtype == dtype
    assert bitwise_equal(out, reference.to(dtype))
    assert bitwise_equal(image_grad, reference_image_grad.to(dtype))
    if learnable:
        # The release built its sampler from the half parameter at construction, so part of the
        # parameter's gradient reaches it in half: within one half ulp of the float32 gradient.
        assert degrees_grad.dtype == dtype
        ulp = torch.finfo(dtype).eps * 2.0 ** torch.floor(torch.log2(reference_degrees_grad.abs()))
        assert float((degrees_grad.float() - reference_degrees_grad).abs()) <= float(ulp)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_module_moved_to_half_draws_as_float32(dtype):
    """``AugmentationSequential(...).to(dtype)`` with a learnable range: the container's promoted
    call gives every child float32 copies of its half parameters; the module keeps its own."""
    K = _K()

    def make():
        return K.AugmentationSequential(K.RandomAffine(torch.nn.Parameter(torch.tensor(15.0)), p=1.0),
                                        K.RandomPerspective(0.3, p=1.0))

    image = smooth_image().to(dtype)
    with testing.isolated():
        reference_module = make()
        with kornia_halfpatch.unpatched(FIX):
            reference, _ = _seeded(lambda: reference_module(image.float()))
        module = make().to(dtype)
        out, _ = _seeded(lambda: module(image))
    assert bitwise_equal(out, reference.to(dtype))
    assert all(p.dtype == dtype for p in module.parameters())


def _sequential_inputs(dtype):
    image = smooth_image().to(dtype)
    mask = (smooth_image(channels=1, seed=4) > 0.5).to(dtype)
    boxes = torch.tensor([[[2.0, 3.0, 20.0, 18.0]], [[5.0, 1.0, 30.0, 25.0]]]).to(dtype)
    keypoints = torch.tensor([[[3.0, 4.0], [17.5, 9.25]], [[10.0, 11.0], [28.0, 2.0]]]).to(dtype)
    return image, mask, boxes, keypoints


def _make_sequential():
    K = _K()
    return K.AugmentationSequential(
        K.RandomAffine(30.0, p=1.0),
        K.ColorJiggle(0.2, 0.2, 0.2, 0.2, p=1.0),
        K.RandomPerspective(0.3, p=1.0),
        K.RandomGrayscale(p=0.5),
        data_keys=["input", "mask", "bbox_xyxy", "keypoints"],
    )


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_augmentation_sequential_every_data_key(dtype):
    inputs = _sequential_inputs(dtype)
    with testing.isolated():
        module = _make_sequential()
        out, stream = _seeded(lambda: module(*inputs))
        back = module.inverse(*out)
        reference_module = _make_sequential()
        with kornia_halfpatch.unpatched(FIX):
            reference, reference_stream = _seeded(lambda: reference_module(*[x.float() for x in inputs]))
            reference_back = reference_module.inverse(*[o.float() for o in out])
    assert [o.dtype for o in out] == [dtype] * 4
    for got, expected in zip(out, reference):
        assert bitwise_equal(got, expected.to(dtype))
    for got, expected in zip(back, reference_back):
        assert got.dtype == dtype
        assert bitwise_equal(got, expected.to(dtype))
    assert bitwise_equal(stream, reference_stream)
    assert module.transform_matrix.dtype == dtype
    assert bitwise_equal(module.transform_matrix, reference_module.transform_matrix.to(dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_integer_mask_stays_integer(dtype):
    K = _K()
    image = smooth_image().to(dtype)
    labels = (smooth_image(channels=1, seed=5) * 3).long()

    def make():
        return K.AugmentationSequential(K.RandomAffine(30.0, p=1.0), data_keys=["input", "mask"])

    with testing.isolated():
        reference_module = make()
        try:
            with kornia_halfpatch.unpatched(FIX):
                reference, _ = _seeded(lambda: reference_module(image.float(), labels))
        except TypeError as refused:  # 0.7.0 refuses an integer mask at any image dtype: so must the shim
            with pytest.raises(TypeError) as patched_refusal:
                _seeded(lambda: make()(image, labels))
            assert str(patched_refusal.value) == str(refused)
            return
        module = make()
        out, _ = _seeded(lambda: module(image, labels))
    assert out[0].dtype == dtype and out[1].dtype == labels.dtype
    assert bitwise_equal(out[0], reference[0].to(dtype))
    assert torch.equal(out[1], reference[1])


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_nested_containers_widen_once(dtype):
    """A promoted container calls promoted children on float32: no second widening, the result
    is the float32 pipeline narrowed once, and every child's matrix takes the half dtype."""
    K = _K()

    def make():
        return K.AugmentationSequential(
            K.ImageSequential(K.RandomAffine(20.0, p=1.0), K.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0)),
            K.RandomPerspective(0.3, p=1.0),
        )

    image = smooth_image().to(dtype)
    with testing.isolated():
        module = make()
        out, _ = _seeded(lambda: module(image))
        reference_module, reference, _ = _release_float32(make, image)
    assert bitwise_equal(out, reference.to(dtype))
    affine = module[0][0]
    reference_affine = reference_module[0][0]
    assert affine.transform_matrix.dtype == dtype
    assert bitwise_equal(affine.transform_matrix, reference_affine.transform_matrix.to(dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_video_and_patch_sequential(dtype):
    K = _K()
    video = torch.stack([smooth_image(seed=s) for s in range(3)], dim=1).to(dtype)  # B, T, C, H, W
    gray_video = torch.full((1, 2, 3, 8, 8), 0.5, dtype=dtype)  # hue of a gray pixel: NaN in float16

    def make_video():
        return K.VideoSequential(K.RandomAffine(20.0, p=1.0), K.ColorJiggle(0.2, 0.2, 0.2, 0.2, p=1.0))

    def make_patch():
        return K.PatchSequential(
            K.ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0), K.RandomAffine(10.0, p=1.0),
            K.RandomPerspective(0.2, p=1.0), K.RandomGrayscale(p=1.0), grid_size=(2, 2),
        )

    image = smooth_image().to(dtype)
    with testing.isolated():
        for make, x in ((make_video, video), (make_patch, image), (make_video, gray_video)):
            module = make()
            out, _ = _seeded(lambda: module(x))
            _, reference, _ = _release_float32(make, x)
            assert out.dtype == dtype
            assert bitwise_equal(out, reference.to(dtype))
            assert bool(torch.isfinite(out).all())


def test_bfloat16_refused_unpatched_accepted_patched():
    K = _K()
    image = smooth_image().to(torch.bfloat16)
    if KORNIA < (0, 8, 3):  # 0.8.3's own dtype check accepts bfloat16 (kornia/augmentation/_2d/base.py)
        with testing.isolated(only=()):
            with pytest.raises(TypeError):
                K.RandomAffine(10.0, p=1.0)(image)
    with testing.isolated():
        assert K.RandomAffine(10.0, p=1.0)(image).dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8], ids=str)
def test_integer_input_gets_kornias_own_error(dtype):
    K = _K()
    image = (smooth_image() * 255).to(dtype)
    with testing.isolated():
        with pytest.raises(Exception) as patched:
            K.RandomAffine(10.0, p=1.0)(image)
        with kornia_halfpatch.unpatched(FIX):
            with pytest.raises(Exception) as unpatched:
                K.RandomAffine(10.0, p=1.0)(image)
    assert type(patched.value) is type(unpatched.value)
    assert str(patched.value) == str(unpatched.value)


def _accuracy_ratio(make, dtype, patched):
    """Mean error against float64 over the ideal one (the float32 result rounded once). The
    float64 reference runs on the half image widened, with the very parameters of the seeded half
    run (drawn in float32 in every run), so only the computation's precision differs."""
    image = smooth_image(size=182, seed=7).to(dtype)
    module = make()
    if patched:
        out, _ = _seeded(lambda: module(image))
    else:
        with kornia_halfpatch.unpatched(FIX):
            out, _ = _seeded(lambda: module(image))
    params = module._params
    with kornia_halfpatch.unpatched(FIX):
        exact = module(image.double(), params=params)
        single = module(image.float(), params=params)
    ideal = (single.to(dtype).double() - exact).abs().mean()
    return float((out.double() - exact).abs().mean() / ideal)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["RandomAffine", "RandomPerspective", "RandomRotation"])
def test_accuracy_against_float64_is_the_ideal(name, dtype):
    make = transforms()[name]
    with testing.isolated():
        ratio = _accuracy_ratio(make, dtype, patched=True)
        unpatched = _accuracy_ratio(make, torch.float16, patched=False) if dtype == torch.float16 else None
    assert ratio == pytest.approx(1.0, abs=1e-12)
    if unpatched is not None:
        assert unpatched > 2.0  # what the fix buys: the release's float16 warp is several times off


def test_revert_restores_the_release_entry_points():
    from kornia.augmentation import base

    with testing.isolated(only=()):
        original = base._BasicAugmentationBase.__dict__["forward"]
    with testing.isolated(only=FIX) as report:
        assert report.fixes["augmentation_pipeline"].applied
        assert base._BasicAugmentationBase.__dict__["forward"] is not original
    with testing.isolated(only=()):
        assert base._BasicAugmentationBase.__dict__["forward"] is original


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=DTYPE_IDS)
def test_mix_and_policy_augmentations(dtype):
    """Mix augmentations override forward (class labels become float mixing weights: float32
    beside a half image, as kornia 0.9.0 gives them, bitwise the release's float32 call's);
    AutoAugment (0.7.4+) composes its policies' matrices in float32."""
    K = _K()
    image = smooth_image(batch=4).to(dtype)
    labels = torch.tensor([0, 1, 2, 1])

    def mix():
        return K.RandomMixUpV2(p=1.0, data_keys=["input", "class"])

    def cut_mix():
        return K.RandomCutMixV2(p=1.0, data_keys=["input", "class"])

    makers = [(mix, (image, labels)), (cut_mix, (image, labels))]
    try:
        from kornia.augmentation.auto import AutoAugment

        makers.append((lambda: AutoAugment(), (image,)))
    except ImportError:  # 0.7.0 has no kornia.augmentation.auto policies
        pass
    with testing.isolated():
        for make, args in makers:
            module = make()
            out, _ = _seeded(lambda: module(*args))
            reference_module = make()
            with kornia_halfpatch.unpatched(FIX):
                widened = [a.float() if a.is_floating_point() else a for a in args]
                reference, _ = _seeded(lambda: reference_module(*widened))
            outs = out if isinstance(out, (list, tuple)) else [out]
            references = reference if isinstance(reference, (list, tuple)) else [reference]
            for got, expected, given in zip(outs, references, args):
                assert got.dtype == (dtype if given.is_floating_point() else expected.dtype)
                assert bitwise_equal(got, expected.to(got.dtype)), type(module).__name__


@pytest.mark.slow
def test_torch_compile_runs_the_promoted_entry_point():
    """The release's augmentations do not compile with fullgraph=True (dynamo: 'hasattr call',
    float32 unpatched too); with graph breaks the compiled half call equals the eager one."""
    K = _K()
    image = smooth_image(batch=1, size=8).to(torch.float16)
    with testing.isolated():
        module = K.RandomGrayscale(p=1.0)
        compiled = torch.compile(module, backend="eager")
        out, _ = _seeded(lambda: compiled(image))
        eager, _ = _seeded(lambda: module(image))
    assert out.dtype == torch.float16
    assert bitwise_equal(out, eager)
