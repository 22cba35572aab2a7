"""Augmentations in float16/bfloat16: the float32 augmentation of the widened input, narrowed once
(docs/fixes/augmentation_pipeline.md).

Kornia 0.7.0-0.8.3 run an augmentation in the input's half dtype: the random parameters are drawn
in float32 (the generators' dtype), but the transform matrix, its inverse and the sampling grid
are then built from the half image's dtype, so a pixel coordinate near 180 is resolved to
0.125 px in float16 and 1 px in bfloat16 (RandomAffine/RandomPerspective/RandomRotation are
10-20x further from a float64 run than the float32 result rounded once); ColorJiggle's hue of a
gray pixel is NaN in float16 and becomes an INT_MIN gather index (a crash, NaN in
VideoSequential); RandomPlanckianJitter returns float32 for a half image.

The entry points are promoted wholesale, not every transform: the ``forward`` of the
augmentation base class (2D and 3D, and the subclasses that override it), the ``inverse`` of the
2D geometric base, and ``forward``/``inverse`` of the containers (ImageSequential and through it
AugmentationSequential, VideoSequential, PatchSequential). For a half input:

- every half tensor argument (image, masks, boxes, keypoints, given parameters; kornia's
  Boxes/Keypoints objects as copies) is widened to float32, exactly;
- the installed release's entry point runs on it, so the random parameters are drawn by the same
  generator calls as for a float32 input under the same seed (the random stream and ``_params``
  equal the float32 run's) and the warps sample in float32;
- each output is narrowed once to the dtype of the input it corresponds to (kornia 0.9.0's
  dtypes: images, float masks, boxes and keypoints in the input's half dtype; an integer mask
  stays integer; a float32 argument next to a half image stays float32);
- ``transform_matrix`` (of the module and of every submodule that ran) takes the half dtype the
  release gives it, rounded once from the float32 matrix; the float32 matrix is kept aside and
  put back while a later half ``inverse``/``forward`` runs, so an inverse equals the float32
  inverse narrowed.

Where kornia 0.9.0 does an augmentation's heavy step in the half dtype and the dtype is native
on the CPU (``COMPUTED_IN_HALF``: ``RandomMotionBlur``'s convolution, ``RandomResizedCrop``'s resize),
a large half batch takes the release's forward on the half image instead: 0.9.0's computation.

A container runs its children on the widened float32 tensors, so a promoted child inside a
promoted container sees float32 and passes through: nothing is widened twice. float32/float64
inputs call the original unchanged (outputs, ``_params`` and random streams bitwise the
release's); integer inputs are not promoted and get kornia's own error.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import sys
import weakref
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

try:  # what torch.func.functional_call runs; a method other than forward (inverse) needs it bare
    from torch.nn.utils.stateless import _reparametrize_module
except ImportError:  # pragma: no cover - torch 2.0-2.13 have it
    _reparametrize_module = None

from .._model import Finding, Fix, Target, bug_present, unsupported
from .._precision import (FLOAT32_EVALUATION, autocast_half, autocast_off, float32_context, half_arithmetic,
                          in_float32_evaluation, native_half_arithmetic)
from .._torch_compat import is_compiling
from ._at_scale import (HalfCropsResizedInFloat32, SampledSources, diamond_square_by_images, large_warps, takes_grid_bands,
                        warp_in_grid_bands)

HALF_DTYPES = (torch.float16, torch.bfloat16)
GEOMETRY_CLASSES = ("Boxes", "VideoBoxes", "Boxes3D", "Keypoints", "VideoKeypoints", "Keypoints3D")

# module -> (the narrowed transform matrix handed to the user, the float32 one it came from)
_FLOAT32_MATRICES: "weakref.WeakKeyDictionary[torch.nn.Module, Tuple[torch.Tensor, torch.Tensor]]" = (
    weakref.WeakKeyDictionary()
)


def _is_geometry(value: Any) -> bool:
    kind = type(value)
    return kind.__name__ in GEOMETRY_CLASSES and kind.__module__.startswith("kornia.geometry")


def _first_floating_tensor(value: Any) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() else None
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_floating_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        for item in value.values():
            found = _first_floating_tensor(item)
            if found is not None:
                return found
    return None


def _rebuild(container: Any, items: list) -> Any:
    if isinstance(container, list):
        return items
    if hasattr(container, "_fields"):  # ParamItem, PatchParamItem: named tuples
        return type(container)(*items)
    return type(container)(items)


def _widen(value: Any) -> Any:
    """Half tensors (at any depth of lists, tuples, dicts) widened to float32, exactly; the same
    object back where nothing is half (kornia updates a caller's params dict in place)."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in HALF_DTYPES else value
    if _is_geometry(value):
        # Boxes.type/Keypoints.type convert in place: widen a copy, never the caller's object.
        return value.clone().type(torch.float32) if value.dtype in HALF_DTYPES else value
    if isinstance(value, (list, tuple)):
        items = [_widen(item) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else _rebuild(value, items)
    if isinstance(value, dict):
        widened = {key: _widen(item) for key, item in value.items()}
        return value if all(widened[key] is item for key, item in value.items()) else widened
    return value


def _narrow(value: Any, reference: Any, dtype: torch.dtype) -> Any:
    """Each float32 output narrowed once to the half dtype of the input it came from (the trigger's
    dtype where no input corresponds); outputs of float32 or integer inputs left as computed."""
    if (isinstance(reference, torch.Tensor) and reference.is_floating_point()) or _is_geometry(reference):
        target = reference.dtype if reference.dtype in HALF_DTYPES else None
    elif isinstance(reference, torch.Tensor):
        # An integer input: class labels that a mix turns into float mixing weights stay float32,
        # as kornia 0.9.0 keeps them beside a half image (a weight of 0.6593 is 0.6592 in float16);
        # masks stay integers.
        target = None
    else:
        # No input (the matrix beside the image): the trigger's dtype.
        target = dtype
    if isinstance(value, torch.Tensor):
        if target is not None and value.dtype == torch.float32:
            return value.to(target)
        return value
    if _is_geometry(value):
        if target is not None and value.dtype == torch.float32:
            return value.type(target)  # in place on the run's own (widened) object
        return value
    if isinstance(value, (list, tuple)):
        if isinstance(reference, (list, tuple)) and len(reference) == len(value):
            references: Sequence[Any] = reference
        else:
            references = [None] * len(value)
        return _rebuild(value, [_narrow(item, ref, dtype) for item, ref in zip(value, references)])
    if isinstance(value, dict):
        references_by_key = reference if isinstance(reference, dict) else {}
        return {key: _narrow(item, references_by_key.get(key), dtype) for key, item in value.items()}
    return value


def _output_reference(args: tuple, output: Any) -> Any:
    """Which input each output corresponds to: the arguments in order (AugmentationSequential's
    data keys), or the one input for a tensor (and for the image of a (image, matrix) pair)."""
    if len(args) == 1 and not isinstance(output, (list, tuple)):
        return args[0]
    if isinstance(output, (list, tuple)) and len(args) == len(output):
        return list(args)
    if isinstance(output, (list, tuple)) and len(args) == 1 and isinstance(args[0], torch.Tensor):
        return [args[0]] + [None] * (len(output) - 1)
    return None


def _put_back_float32_matrices(module: torch.nn.Module) -> Dict[int, Any]:
    """Before a promoted call: every matrix this shim narrowed is swapped back to its float32
    value (an inverse from a half-rounded matrix would lose what the float32 run keeps)."""
    before: Dict[int, Any] = {}
    for sub in module.modules():
        state = sub.__dict__
        kept = _FLOAT32_MATRICES.get(sub)
        if kept is not None and state.get("_transform_matrix") is kept[0]:
            state["_transform_matrix"] = kept[1]
        before[id(sub)] = (state.get("_transform_matrix"), state.get("_transform_matrices"))
    return before


def _narrow_matrices(module: torch.nn.Module, dtype: torch.dtype, before: Dict[int, Any]) -> None:
    for sub in module.modules():
        state = sub.__dict__
        if "_transform_matrix" not in state and "_transform_matrices" not in state:
            continue
        matrices = state.get("_transform_matrices")
        if state.get("_transform_matrix") is None and matrices:
            # A container composes its children's matrices lazily: compose them now, in float32,
            # so the product is rounded once.
            try:
                sub.transform_matrix  # noqa: B018 - the property caches the product
            except Exception:  # noqa: BLE001 - left to the release's own lazy path
                pass
        matrix = state.get("_transform_matrix")
        previous_matrix, previous_list = before.get(id(sub), (None, None))
        kept = _FLOAT32_MATRICES.get(sub)
        if isinstance(matrix, torch.Tensor) and matrix.dtype == torch.float32:
            if kept is not None and matrix is kept[1]:
                state["_transform_matrix"] = kept[0]  # unchanged by this call: the same narrowed one
            elif matrix is not previous_matrix:
                narrowed = matrix.to(dtype)
                state["_transform_matrix"] = narrowed
                _FLOAT32_MATRICES[sub] = (narrowed, matrix)
        matrices = state.get("_transform_matrices")
        if isinstance(matrices, list) and matrices is not previous_list:
            state["_transform_matrices"] = [
                m.to(dtype) if isinstance(m, torch.Tensor) and m.dtype == torch.float32 else m for m in matrices
            ]


def _float32_state(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """name -> float32 copy of every half parameter and buffer of the module and its children (a
    learnable range, ``RandomAffine(nn.Parameter(torch.tensor(10.0).half()))``, or a module moved
    with ``.half()``). Copied inside the graph, so gradients reach the half parameters, narrowed
    once by the cast's backward; one copy per tensor, so tied names stay tied."""
    copies: Dict[int, torch.Tensor] = {}
    state: Dict[str, torch.Tensor] = {}
    named = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    for name, tensor in named:
        if tensor.dtype in HALF_DTYPES:
            if id(tensor) not in copies:
                copies[id(tensor)] = tensor.float()
            state[name] = copies[id(tensor)]
    return state


def _release_call(original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any]) -> Any:
    state = _float32_state(module) if _reparametrize_module is not None else None
    if not state:
        return original(module, *args, **kwargs)
    # Half parameters make the generators draw in half: an angle of -8.4359 degrees becomes -8.4375
    # in float16 and the whole warp moves (one ulp of the output, gradients of the other sign on
    # kornia 0.8.2's test_backward). The float32 run of the widened image has float32 parameters.
    with _reparametrize_module(module, state, tie_weights=True, strict=False):
        return original(module, *args, **kwargs)


class ByImage(NamedTuple):
    """How an augmentation's drawn parameters split by image, and how far one image may be split.

    ``applied``: parameters with one row per applied image; ``every``: one row per image of the
    batch; ``shared``: the whole batch's, passed to every chunk as drawn. ``split``: "grid" (a
    warp: bands of its grid's rows, ``warp_in_grid_bands``), "rows" (each output pixel from its
    own input pixel: bands of rows), "image" (whole images), "batch" (never split: its parameters
    index the batch; only ``exact``'s call on the half batch, else the whole float32 call).
    ``sampled``: its forward reads a part of its image (a crop), so each image's float32 copy is
    filled only where the release reads it (``SampledSources``). ``exact``: its forward only
    moves values (a flip), so the release's own forward on the half image gives the float32
    call's output narrowed, bit for bit, and its matrix is the float32 one rounded once (integers
    and -1): called on the half batch whole, where the release takes its dtype (0.7.0-0.8.2
    refuse bfloat16 here: then by image); "slice": so where it crops by indices
    (``cropping_mode="slice"``: a crop of the requested size is a slice). ``halo``: the flag
    holding its kernel size, or the rows themselves: a filter that reads each output
    pixel's neighbourhood alone, so a large image goes in bands of rows, each called with half a
    kernel of rows more on either side (a halo, inside the image) and cut back to its own rows,
    where the border is local (a ``border_type`` flag of reflect, replicate or constant; circular
    wraps to the far side: whole images). ``drawn``: (parameter, function, flags): an image-sized
    parameter the release draws while it applies (0.7.0-0.8.3: the noise), by that function of the
    augmentation's module on a tensor like the applied images, given those flags as keywords, and
    reads back when given: drawn first (after the other parameters, as the release's call draws),
    then each chunk given its images' rows of it and each band its rows of those. ``planes``:
    image-sized parameters (an illumination gradient, noise masks): a band of rows is given its
    rows of them (a container holding such a child takes whole images)."""

    applied: Tuple[str, ...]
    every: Tuple[str, ...] = ()
    shared: Tuple[str, ...] = ()
    split: str = "image"
    sampled: bool = False
    exact: Union[bool, str] = False
    halo: Union[str, int] = ""
    drawn: Tuple[Any, ...] = ()
    planes: Tuple[str, ...] = ()


# Augmentations whose forward treats each image alone, with its own rows of the drawn parameters
# (class name -> how). A large half batch's forward runs image by image (``_forward_by_images``):
# the parameters drawn once for the whole batch, as the release draws them, and each chunk's
# float32 forward given its own rows of them. Each row is tested bitwise against the release's
# whole float32 call (0.7.0, 0.8.2, 0.8.3). ColorJitter's contrast subtracts each image's mean:
# whole images; ColorJiggle's contrast is a product: per pixel.
AUGMENTATIONS_BY_IMAGE = {
    "RandomAffine": ByImage(("translations", "center", "scale", "angle", "shear_x", "shear_y"), split="grid"),
    "RandomRotation": ByImage(("degrees",), split="grid"),
    "RandomShear": ByImage(("center", "shear_x", "shear_y"), split="grid"),
    "RandomTranslate": ByImage(("translate_x", "translate_y"), split="grid"),
    "RandomPerspective": ByImage(("start_points", "end_points"), split="grid"),
    "RandomResizedCrop": ByImage((), every=("src", "dst", "input_size", "output_size"), sampled=True),
    "RandomCrop": ByImage((), every=("src", "dst", "input_size", "output_size", "padding_size"), sampled=True,
                          exact="slice"),
    "RandomHorizontalFlip": ByImage((), split="rows", exact=True),
    "RandomVerticalFlip": ByImage((), exact=True),
    # drops whole channels of drawn (image, channel) pairs: indices into the batch, never split
    "RandomChannelDropout": ByImage((), shared=("batch_idx", "channel_idx"), split="batch", exact=True),
    # median_blur of a half image only selects values (the shim's torch_ops row; the release's own
    # one-hot convolutions and median are exact too): the release's forward on the half batch
    "RandomMedianBlur": ByImage((), exact=True),
    # filters: in bands of rows with a halo of half the kernel (``_halo_rows``)
    "RandomGaussianBlur": ByImage(("sigma",), halo="kernel_size"),
    "RandomBoxBlur": ByImage((), halo="kernel_size"),
    # a 3x3 kernel's valid rows (the image's outer rows and columns keep their values): halo 1
    "RandomSharpness": ByImage(("sharpness",), halo=1),
    # one kernel side for the batch, ``ksize_factor[idx[0]]`` of the drawn ones (both shared, so a
    # chunk takes the whole call's), each image's kernel rotated by its own angle: the halo from
    # the largest side drawn
    "RandomMotionBlur": ByImage(("angle_factor", "direction_factor"), shared=("ksize_factor", "idx"),
                                halo="ksize_factor"),
    "ColorJitter": ByImage(("brightness_factor", "contrast_factor", "hue_factor", "saturation_factor"),
                           shared=("order",)),
    "ColorJiggle": ByImage(("brightness_factor", "contrast_factor", "hue_factor", "saturation_factor"),
                           shared=("order",), split="rows"),
    "RandomBrightness": ByImage(("brightness_factor",), split="rows"),
    "RandomContrast": ByImage(("contrast_factor",), split="rows"),
    "RandomSaturation": ByImage(("saturation_factor",), split="rows"),
    "RandomHue": ByImage(("hue_factor",), split="rows"),
    "RandomGamma": ByImage(("gamma_factor", "gain_factor"), split="rows"),
    "RandomGrayscale": ByImage((), split="rows"),
    "RandomPosterize": ByImage(("bits_factor",), split="rows"),
    "RandomSolarize": ByImage(("thresholds", "additions"), split="rows"),
    "RandomInvert": ByImage((), split="rows"),
    "RandomChannelShuffle": ByImage(("channels",), split="rows"),
    "RandomRGBShift": ByImage(("r_shift", "g_shift", "b_shift"), split="rows"),
    "Normalize": ByImage((), split="rows"),
    # a histogram or a box in the image's own coordinates: whole images
    "RandomEqualize": ByImage(()),
    "RandomAutoContrast": ByImage(()),
    "RandomErasing": ByImage(("widths", "heights", "xs", "ys", "values")),
    "RandomRotation90": ByImage(("times",), split="grid"),
    # image-sized parameters drawn with the rest (illumination gradients added, noise masks written
    # per pixel): bands of rows, each given its rows of them
    "RandomGaussianIllumination": ByImage(("gradient",), split="rows", planes=("gradient",)),
    "RandomLinearIllumination": ByImage(("gradient",), split="rows", planes=("gradient",)),
    "RandomLinearCornerIllumination": ByImage(("gradient",), split="rows", planes=("gradient",)),
    "RandomSaltAndPepperNoise": ByImage(("amount_factor", "salt_and_pepper_factor", "mask_salt", "mask_pepper"),
                                        split="rows", planes=("mask_salt", "mask_pepper")),
    # each image warped by its own drawn noise, blurred (the blur's two passes: filters_conv_hang)
    "RandomElasticTransform": ByImage(("noise",)),
    "RandomThinPlateSpline": ByImage(("src", "dst")),
    "RandomFisheye": ByImage(("center_x", "center_y", "gamma")),
    "RandomClahe": ByImage(("clip_limit_factor",)),
    "RandomRain": ByImage(("number_of_drops_factor", "coordinates_factor", "drop_height_factor", "drop_width_factor")),
    "RandomPlanckianJitter": ByImage(("idx",), split="rows"),
    "RandomJPEG": ByImage(("jpeg_quality",)),
    "RandomSnow": ByImage(("snow_coefficient", "brightness"), split="rows"),
    "CenterCrop": ByImage((), every=("src", "dst", "input_size", "output_size"), sampled=True, exact="slice"),
    "Resize": ByImage((), every=("src", "dst", "input_size", "output_size")),
    "PadTo": ByImage(()),
    "Denormalize": ByImage((), split="rows"),
    # noise drawn while applying, like the applied images (``torch.randn_like``), kept in ``_params``
    "RandomGaussianNoise": ByImage(("gaussian_noise",), split="rows",
                                   drawn=("gaussian_noise", "_randn_like", ("mean", "std"))),
}
# Parameters of the whole batch: one applied/not flag per image, and the input's shape.
BATCH_PARAMETERS = ("batch_prob", "forward_input_shape")

# Pixels a float32 forward of a chunk warps at most (one 1024x1024 image, sixteen of 256x256): the
# widened batch, the release's float32 grid and output (2C + 2 floats a pixel) and the half output
# were 1.6-1.8x the release's float32 memory for 4x3x1024x1024 RandomAffine (measured); a chunk of
# the batch holds that much only for its images. An image of CHUNK_PIXELS or more goes band by band
# (of grid rows for a warp, of rows for a per-pixel augmentation): whole 1024x1024 images one at a
# time still held 1.08-1.10x the release's float32 memory, in bands 0.58-0.90x (measured). Below
# 2^16 pixels an image the whole batch is one call: a chunk's forward costs ~1 ms of Python.
CHUNK_PIXELS = 1 << 20
CHUNKED_IMAGE_PIXELS = 1 << 16
# Pixels of a band of rows of a per-pixel augmentation: its float32 temporaries stay in cache
# (4x3x1024x1024 ColorJiggle on AVX-512: bands of 32 rows 0.27 s, 64 0.22 s, 128 0.24 s, whole
# images 0.40 s, the whole batch 0.57 s; measured).
ROW_BAND_PIXELS = 1 << 16


# Augmentations whose half call kornia 0.9.0 computes with its heavy step in the half dtype, and
# that step. Where the dtype is native on the CPU (``networks_cpu_half``'s modes), the shim's float32
# evaluation does that step the same way (``HALF_ARITHMETIC``): 0.9.0's computation and error, at
# its speed; in the float32 mode, and on CUDA, the release's float32 call narrowed as before.
COMPUTED_IN_HALF = {
    # 0.9.0's half output is, bit for bit, filter2d of the half image with get_motion_kernel2d's
    # float32 kernel narrowed (both dtypes, measured): the depthwise convolution in half
    # (fixes/filters_conv_hang.py). The release's float32 9x9 convolution was 1.1-1.6x 0.9.0's
    # bfloat16 time on avx512_bf16. Not RandomGaussianBlur (0.9.0's half blur is float32's
    # narrowed: the shim's already) nor RandomBoxBlur (0.9.0's half box blur has 1.5-2x float32's
    # error, and the float32 one is not slower).
    "RandomMotionBlur": "convolution",
    # A crop by indices (the default ``cropping_mode="slice"``): 0.9.0 resizes each half crop by
    # torch's half bilinear kernel (not the float32 resize narrowed: 2-3x its error at
    # 4x3x1024x1024; its output is exactly that kernel's, measured). The release's forward on the
    # half batch with the drawn parameters computes the same (bit for bit 0.9.0's output, 0.8.2);
    # the shim's float32 evaluation was 1.4-3.7x 0.9.0's time and 2-3x its memory.
    "RandomResizedCrop": "resize",
}


def _half_arithmetic_of(module: Any, image: torch.Tensor) -> Any:
    """The context for a half call of ``module``'s: its heavy step in the half dtype where 0.9.0
    computes it so (``COMPUTED_IN_HALF``; whether the dtype is native is decided at the step), on
    CPU, in eager mode; else nothing."""
    kind = type(module)
    if (kind.__name__ in COMPUTED_IN_HALF and kind.__module__.startswith("kornia.augmentation.")
            and image.device.type == "cpu" and not is_compiling() and not torch.jit.is_tracing()):
        return half_arithmetic(image.dtype)
    return contextlib.nullcontext()


def _by_image(module: Any) -> Optional[ByImage]:
    kind = type(module)
    if not kind.__module__.startswith("kornia.augmentation."):
        return None  # a user's subclass may draw or transform otherwise
    return AUGMENTATIONS_BY_IMAGE.get(kind.__name__)


def _rows_by_image(params: Dict[str, Any], row: ByImage, batch: int) -> Optional[torch.Tensor]:
    """The applied/not flag of each image, where the drawn parameters are exactly the row's: one row
    per applied image of each ``applied`` parameter, one per image of each ``every`` one, one flag
    per image; else None."""
    flags = params.get("batch_prob")
    if set(params) != set(row.applied) | set(row.every) | set(row.shared) | set(BATCH_PARAMETERS):
        return None
    if not isinstance(flags, torch.Tensor) or flags.shape != (batch,):
        return None
    to_apply = flags > 0.5  # as the release reads it (relaxed distributions)
    applied = int(to_apply.sum())
    for keys, rows in ((row.applied, applied), (row.every, batch)):
        if not all(isinstance(params[k], torch.Tensor) and params[k].dim() > 0 and params[k].shape[0] == rows
                   for k in keys):
            return None
    return to_apply


# Containers whose forward of an image alone runs their children in turn, each with its own
# drawn parameters (``params=``): a container of ``AUGMENTATIONS_BY_IMAGE`` children goes image by
# image as one of them does, each chunk given every child's rows. (PatchSequential reshapes the
# batch first: its rows are not the images'; VideoSequential's are its frames': VIDEOS_BY_FRAMES.)
CONTAINERS_BY_IMAGE = {"AugmentationSequential": "AugmentationSequential.forward",
                       "ImageSequential": "ImageSequentialBase.forward"}

Slicer = Callable[[Any, int], Optional[Callable[[int, int], Any]]]


def _per_image_slicer(original: Any, module: torch.nn.Module, args: tuple,
                      kwargs: Dict[str, Any]) -> Optional[Tuple[Slicer, ByImage]]:
    """For a call that may go image by image: a function of the drawn parameters and the batch
    giving ``own(start, stop)``, the parameters of those images alone (None where the drawn
    parameters are not one row per image), and how far one image may be split (``ByImage.split``;
    a container: "rows" where every child's is, "grid" for one warp, else "image"; its image read
    whole and computed in float32); None for any other call."""
    qualname = getattr(original, "__qualname__", "")
    if qualname == "_BasicAugmentationBase.forward":
        row = _by_image(module)
        if row is None or kwargs or not 1 <= len(args) <= 2 or (len(args) == 2 and args[1] is not None):
            return None  # given parameters (a container's replay): the whole call
        return (lambda params, batch: _own_rows(params, row, batch)), row
    kind = type(module)
    if CONTAINERS_BY_IMAGE.get(kind.__name__) != qualname or not kind.__module__.startswith("kornia.augmentation."):
        return None
    if not args or any(not (value is None or (isinstance(value, dict) and not value))
                       for value in list(args[1:]) + list(kwargs.values())):
        # masks, boxes, given parameters, data keys or extra arguments (0.7.0's default: {}): the whole call
        return None
    keys = getattr(module, "data_keys", None)
    if keys is not None and [getattr(key, "name", key) for key in keys] not in (["INPUT"], ["IMAGE"]):
        return None
    children = dict(module.named_children())
    rows = [_by_image(child) for child in children.values()]
    if not children or any(row is None for row in rows):
        return None
    # a child's image-sized parameters are not cut into a container's bands: whole images then
    splits = {"image" if row.planes or row.drawn else row.split for row in rows}
    split = "rows" if splits == {"rows"} else "grid" if len(rows) == 1 and splits == {"grid"} else "image"

    return (lambda params, batch: _children_rows(children, params, batch)), ByImage((), split=split)


def _children_rows(children: Dict[str, Any], params: Any, batch: int) -> Optional[Callable[[int, int], Any]]:
    """A container's drawn parameters (a list of ``ParamItem``s, one per child that ran) as
    ``own(start, stop)``: every child's rows of images ``start`` to ``stop``; None where some
    child's parameters are not one row per image."""
    if not isinstance(params, list) or not params:
        return None
    owns = []
    for item in params:
        child = children.get(getattr(item, "name", None))
        row = _by_image(child) if child is not None else None
        own = _own_rows(item.data, row, batch) if row is not None else None
        if own is None:
            return None
        owns.append(own)
    return lambda start, stop: [type(item)(item.name, own(start, stop)) for item, own in zip(params, owns)]


def _own_rows(params: Any, row: ByImage, batch: int) -> Optional[Callable[[int, int], Dict[str, Any]]]:
    if not isinstance(params, dict) or row.split == "batch":
        return None  # parameters that index the batch have no rows of their own (a container too)
    to_apply = _rows_by_image(params, row, batch)
    if to_apply is None:
        return None

    def own(start: int, stop: int) -> Dict[str, Any]:
        first, last = int(to_apply[:start].sum()), int(to_apply[:stop].sum())
        rows = {key: value[first:last] if key in row.applied else value[start:stop] if key in row.every else value
                for key, value in params.items()}
        rows["batch_prob"] = params["batch_prob"][start:stop]
        return rows

    return own


def _call_state(module: torch.nn.Module) -> List[Tuple[Any, Any, Any]]:
    """Each submodule's transform matrix, (a container's) list of its children's matrices and its
    parameters, as a chunk's forward left them."""
    return [(sub.__dict__.get("_transform_matrix"), sub.__dict__.get("_transform_matrices"), sub.__dict__.get("_params"))
            for sub in module.modules()]


def _joined(chunks: List[Any], batch: int) -> Tuple[bool, Any]:
    """The chunks' matrices of one submodule as the whole batch's: (joined, the matrix)."""
    if all(matrix is None for matrix in chunks):
        return True, None
    if all(isinstance(m, torch.Tensor) and m.dim() == 3 for m in chunks) and sum(m.shape[0] for m in chunks) == batch:
        return True, torch.cat(chunks)
    return False, None


def _joined_list(chunks: List[Any], batch: int) -> Tuple[bool, Any]:
    if all(items is None for items in chunks):
        return True, None
    if not all(isinstance(items, list) and len(items) == len(chunks[0]) for items in chunks):
        return False, None
    joined = [_joined([items[position] for items in chunks], batch) for position in range(len(chunks[0]))]
    return all(ok for ok, _ in joined), [matrix for _, matrix in joined]


def _same_values(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - not comparable: not the same
        return False


def _child_parameters(drawn: Dict[str, Any], given: List[Dict[str, Any]], saved: List[Any]) -> Optional[Dict[str, Any]]:
    """A container's child's ``_params`` after the whole call, from its chunks': each chunk's
    forward saved the rows it was given (equal values) and keys of its own (0.8: its data
    keys), the same in every chunk; the whole call's saves the drawn parameters and those keys.
    None where the chunks saved otherwise."""
    extra: Optional[Dict[str, Any]] = None
    for rows, kept in zip(given, saved):
        if not isinstance(kept, dict) or any(key not in kept or not _same_values(kept[key], value)
                                             for key, value in rows.items()):
            return None
        own = {key: value for key, value in kept.items() if key not in rows}
        if extra is not None and (set(own) != set(extra) or not all(_same_values(own[k], extra[k]) for k in own)):
            return None
        extra = own
    return dict(drawn, **(extra or {}))


def _put_whole_batch_state(module: torch.nn.Module, params: Any, given: List[Any],
                           states: List[List[Tuple[Any, Any, Any]]], batch: int) -> bool:
    """The state the whole batch's forward leaves, from its chunks' (``given`` each chunk's
    parameters, ``states`` what each left): ``_params`` the drawn parameters (a container's
    children each their own, ``_child_parameters``), each matrix the chunks' concatenated, a
    container's list of its children's matrices concatenated item by item. False (nothing set)
    where the chunks' state does not join so."""
    subs = list(module.modules())
    joined = [(_joined([state[index][0] for state in states], batch),
               _joined_list([state[index][1] for state in states], batch)) for index in range(len(subs))]
    if not all(matrix[0] and matrices[0] for matrix, matrices in joined):
        return False
    children_parameters = []
    if isinstance(params, list):
        positions = {id(sub): index for index, sub in enumerate(subs)}
        for position, item in enumerate(params):
            child = module.get_submodule(item.name)
            kept = _child_parameters(item.data, [rows[position].data for rows in given],
                                     [state[positions[id(child)]][2] for state in states])
            if kept is None:
                return False
            children_parameters.append((child, kept))
    for sub, ((_, matrix), (_, matrices)) in zip(subs, joined):
        if "_transform_matrix" in sub.__dict__:
            sub.__dict__["_transform_matrix"] = matrix
        if matrices is not None:
            sub.__dict__["_transform_matrices"] = matrices
    module._params = params
    for child, kept in children_parameters:
        child._params = kept
    return True


def _halo_rows(module: Any, row: ByImage, params: Any = None) -> Optional[int]:
    """Rows of a band's halo for a filter (``ByImage.halo``): half its largest kernel side, from its
    flag or else (``params``: drawn) from its drawn kernel sizes; None where the kernel size or a
    local border is not what the row expects."""
    flags = getattr(module, "flags", None)
    if isinstance(row.halo, int) and not isinstance(row.halo, bool) and row.halo > 0:
        return row.halo
    if not row.halo or not isinstance(flags, dict):
        return None
    border = flags.get("border_type")
    border = getattr(border, "name", border)
    if not isinstance(border, str) or border.lower() not in ("reflect", "replicate", "constant"):
        return None
    size = flags.get(row.halo)
    drawn = params.get(row.halo) if isinstance(params, dict) and size is None else None
    if isinstance(drawn, torch.Tensor) and drawn.numel() and not drawn.is_floating_point() and drawn.dim() == 1:
        size = int(drawn.max())  # each image's kernel side (the one the batch takes among them)
    sides = (size, size) if isinstance(size, int) else tuple(size) if isinstance(size, (tuple, list)) else ()
    if len(sides) != 2 or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in sides):
        return None
    return max(sides) // 2


# Images whose rows of a band one call takes (bands of rows): each output pixel is computed from its
# own image's rows alike, and a call of several images shares its Python and its threads (a
# filter's per-image kernels are a grouped convolution: 4x3x72x2048 RandomMotionBlur 37 us an
# image row, 1x3x72x2048 64 us). bfloat16, 4x3x2048x2048, fresh processes, one image a call ->
# four (measured): RandomMotionBlur 341-390 -> 195-234 ms, RandomPlanckianJitter 67-69 -> 54-78
# ms, RandomGaussianBlur((9, 9)) 187-252 -> 196-337 ms (noise either way), ColorJiggle faster.
BAND_IMAGES = 4

# Pixels of a filter's band beside its halo: larger bands spend less on the halo's rows, smaller
# ones keep the band's float32 temporaries in cache (4x3x2048x2048 RandomGaussianBlur((9, 9))
# float16 on AVX-512: whole images 0.67 s, bands of 2^16 pixels 0.24 s, 2^17 0.19 s, 2^18
# 0.27-0.43 s, 2^19 0.20-0.38 s; 0.9.0 0.41 s).
HALO_BAND_PIXELS = 1 << 17


def _crops_by_indices(module: Any) -> bool:
    """Whether the augmentation crops by indices (``cropping_mode="slice"``): it warps nothing."""
    flags = getattr(module, "flags", None)
    return isinstance(flags, dict) and flags.get("cropping_mode") == "slice"


def _moves_values(module: torch.nn.Module, row: ByImage) -> bool:
    """Whether the release's forward only moves values (``ByImage.exact``)."""
    return row.exact is True or (row.exact == "slice" and _crops_by_indices(module))


_REFUSED_HALF: set = set()  # (class, dtype) whose release refused the half image


def _release_half_forward(original: Any, module: torch.nn.Module, image: torch.Tensor, params: Any) -> Optional[Any]:
    """The release's forward on the half image itself, with the drawn parameters (``ByImage.exact``);
    None where the release refuses the dtype (remembered) or gives another dtype or batch."""
    key = (type(module), image.dtype)
    if key in _REFUSED_HALF:
        return None
    try:
        result = original(module, image, params=params)
    except TypeError:  # "Expected input of [float16, float32, float64]": bfloat16 on 0.7.0-0.8.2
        _REFUSED_HALF.add(key)
        return None
    except (RuntimeError, NotImplementedError) as error:
        # A half kernel this torch lacks (torch 2.1's median_out without the torch_ops row): for
        # good. Anything else: the widened call, which raises the release's own error if it has one.
        if "not implemented for" in str(error):
            _REFUSED_HALF.add(key)
        return None
    if not isinstance(result, torch.Tensor) or result.dtype != image.dtype or result.shape[:2] != image.shape[:2]:
        return None  # a crop's output has its own height and width
    return result


def _matrix_from_float32(module: torch.nn.Module, image: torch.Tensor, params: Any) -> bool:
    """After the release's forward on a half batch whose values are the float32 call's (the
    float32 mode): its transform matrix computed as the float32 call computes it, by the release's
    ``generate_transformation_matrix`` of a float32 batch of one pixel an image (a crop's matrix
    reads the batch's size, dtype and device and its drawn corners, never its pixels), narrowed
    afterwards with the others (``_narrow_matrices``). The half forward's own matrix solved the
    corners rounded to half (up to 3 ulps off). False where the release has no such method."""
    generate = getattr(module, "generate_transformation_matrix", None)
    flags = getattr(module, "flags", None)
    if not callable(generate) or not isinstance(flags, dict) or not isinstance(params, dict):
        return False
    try:
        stand_in = torch.zeros(tuple(image.shape[:-2]) + (1, 1), dtype=torch.float32, device=image.device)
        matrix = generate(stand_in, params, flags)
    except Exception:  # noqa: BLE001 - the float32 chunks compute it
        return False
    if not isinstance(matrix, torch.Tensor) or matrix.dtype != torch.float32 or matrix.shape[0] != image.shape[0]:
        return False
    module._transform_matrix = matrix
    return True


def _draw_while_applying(module: torch.nn.Module, row: ByImage, params: Dict[str, Any],
                         image: torch.Tensor) -> Optional[Dict[str, Any]]:
    """The drawn parameters with ``row.drawn``'s parameter added as the release's float32 call
    draws it while applying: by its own function on a float32 tensor shaped like the images it
    applies to (all of them, or those selected: contiguous either way, as the widened image is),
    after the other parameters (the same stream). Nothing drawn where no image applies (the
    release applies nothing). None where the function or its flags are not found."""
    name, function_name, flag_names = row.drawn
    if name in params:
        return params  # drawn with the others
    draw = getattr(sys.modules.get(type(module).__module__), function_name, None)
    flags = getattr(module, "flags", None)
    to_apply = params.get("batch_prob")
    if (not callable(draw) or not isinstance(flags, dict) or not all(key in flags for key in flag_names)
            or not isinstance(to_apply, torch.Tensor) or to_apply.shape != image.shape[:1]):
        return None
    applied = int((to_apply > 0.5).sum())  # as the release reads it
    if applied == 0:
        return params
    # only its shape, dtype and device are read (``randn_like``): the memory is never touched
    like = torch.empty((applied,) + tuple(image.shape[1:]), dtype=torch.float32, device=image.device)
    return dict(params, **{name: draw(like, **{key: flags[key] for key in flag_names})})


# Augmentations whose output is each channel of each image times a float32 weight drawn for it,
# clamped at 1 (RandomPlanckianJitter, 0.7.0-0.8.3: ``input[..., c, :, :] * coeffs[:, c]`` for red and
# blue, green as it is, then ``.clamp(max=1.0)``). A half tensor times a Python float is computed by
# torch's reduced-float kernels as float32(x) * w, rounded to float32 and then to the half dtype:
# the release's float32 product narrowed, bit for bit (asked once per dtype and device:
# ``_scalar_products_narrow_float32s``), and narrowing commutes with a clamp at 1. So the half call
# is one product per plane, straight into the half output (``_channels_scaled``): 4x3x1024x1024
# 1.8-2.2 ms against 9-13 ms for the float32 bands and 4-5 ms for 0.9.0's half call (measured).
CHANNELS_SCALED = frozenset({"RandomPlanckianJitter"})
# Weights no half dtype holds: a kernel that narrowed the scalar first would round them
_AWKWARD_WEIGHTS = (1.0 + 2.0 ** -20, 0.7312345, 1.3987654, 0.9999999, 3.3333333)
_SCALAR_PRODUCTS: Dict[Tuple[torch.dtype, str], bool] = {}


def _scalar_products_narrow_float32s(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``half * w`` (``w`` a Python float that float32 holds) is ``(half.float() * w)``
    narrowed, for every finite value of ``dtype`` on ``device``'s kind (asked once)."""
    key = (dtype, device.type)
    if key not in _SCALAR_PRODUCTS:
        try:
            every = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype).to(device)
            values = every[torch.isfinite(every)]
            agrees = True
            for awkward in _AWKWARD_WEIGHTS:
                weight = float(torch.tensor(awkward, dtype=torch.float32))
                product = torch.empty_like(values)
                torch.mul(values, weight, out=product)
                agrees = agrees and torch.equal(product.view(torch.int16),
                                                (values.float() * weight).to(dtype).view(torch.int16))
            _SCALAR_PRODUCTS[key] = agrees
        except Exception:  # noqa: BLE001 - a probe that fails says no
            _SCALAR_PRODUCTS[key] = False
    return _SCALAR_PRODUCTS[key]


# The probe's values: two small ones (a power of two, so its product gives the weight exactly, and
# three times it: the output is the product) and a large one (clamped at 1 or passed through)
_SMALL, _LARGE = 2.0 ** -8, 2.0 ** 8


def _channels_scaled(original: Any, module: torch.nn.Module, image: torch.Tensor,
                     params: Dict[str, Any]) -> Optional[torch.Tensor]:
    """``image`` through an augmentation of ``CHANNELS_SCALED``: each half plane times its weight,
    clamped at 1 where the release clamps it. The weights are the release's forward, given the same
    parameters, of a float32 image of one pixel a channel per value of the probe; None where that
    answer is not a weight per plane, each clamped at 1 or not at all (the whole call then runs)."""
    if not _scalar_products_narrow_float32s(image.dtype, image.device):
        return None
    batch, channels = image.shape[:2]
    probe = torch.tensor([_SMALL, 3 * _SMALL, _LARGE], dtype=torch.float32, device=image.device)
    probe = probe.expand(batch, channels, 1, 3).contiguous()
    try:
        answer = original(module, probe, params=params)
    except Exception:  # noqa: BLE001 - the whole call then raises the release's own error, if any
        return None
    if not isinstance(answer, torch.Tensor) or answer.dtype != torch.float32 or answer.shape != probe.shape:
        return None
    answer = answer[:, :, 0]  # (batch, channels, value)
    weights = answer[..., 0] / _SMALL  # exact: a power of two
    clamped, passed = answer[..., 2] == 1.0, answer[..., 2] == weights * _LARGE
    if not (bool(torch.isfinite(weights).all()) and bool((answer[..., :2] < 1.0).all())
            and torch.equal(answer[..., 1], 3 * _SMALL * weights) and bool((clamped ^ passed).all())):
        return None
    out = torch.empty(image.shape, dtype=image.dtype, device=image.device)
    for index, (plane_weights, plane_clamped) in enumerate(zip(weights.tolist(), clamped.tolist())):
        for channel, (weight, clamps) in enumerate(zip(plane_weights, plane_clamped)):
            plane = out[index, channel]
            torch.mul(image[index, channel], weight, out=plane)
            if clamps:
                plane.clamp_(max=1.0)
    return out


# Augmentations whose release computes an image alike alone or in a batch only where its kernels do:
# a check, per shape, that a chunk of the batch computes what the whole batch does (else the whole
# widened call). RandomJPEG's codec (0.8.x) subsamples its chroma by an antialiased resize, whose
# blur is a convolution: on 96x100 images one image at a time differed from the batch in 5-40 thousand
# float32 values by up to 3e-7 (measured; its DCT's tensordot was row by row the batch's), from
# 256x256 on bit for bit the batch's.
def _jpeg_chunks_are_the_batch(module: torch.nn.Module, image: torch.Tensor, count: int) -> bool:
    """Whether RandomJPEG's float32 codec of ``count`` images at a time computes, shape for shape,
    what the batch's does: its chroma's antialiased half-size resize and double-size resize (the
    jpeg module's ``rescale``, as the codec calls it, on a strided channel of a 3-channel image)
    and its DCT's ``tensordot`` of 8x8 blocks, on random values (the kernels chosen depend on
    shapes, not values), asked once per shape, thread count and ``cpu_half`` mode."""
    codec = getattr(sys.modules.get(type(module).__module__), "jpeg_codec_differentiable", None)
    rescale = getattr(sys.modules.get(getattr(codec, "__module__", "")), "rescale", None)
    if not callable(rescale):
        return False
    batch, _, height, width = image.shape
    padded = (-(-height // 16) * 16, -(-width // 16) * 16)  # the codec pads to blocks of 16
    key = (batch, padded, count, image.device.type, torch.get_num_threads(), native_half_arithmetic())
    if key not in _CHUNKS_ARE_THE_BATCH:
        starts = range(0, batch, count)

        def alike(compute: Callable[[torch.Tensor], torch.Tensor], values: torch.Tensor) -> bool:
            whole = compute(values)
            return torch.equal(whole, torch.cat([compute(values[s:s + count]) for s in starts]))

        try:
            generator = torch.Generator(device=image.device).manual_seed(0)
            # only the chroma channel's pages are touched: a third of the image's float32 size
            ycbcr = torch.empty((batch, 3) + padded, dtype=torch.float32, device=image.device)
            ycbcr[:, 1].uniform_(0, 255, generator=generator)
            halved = lambda values: rescale(values[:, 1][:, None], factor=0.5, interpolation="bilinear",
                                            align_corners=False, antialias=True)
            agrees = alike(halved, ycbcr)
            del ycbcr
            chroma = torch.rand((batch, 1, padded[0] // 2, padded[1] // 2), generator=generator, device=image.device)
            agrees = agrees and alike(lambda values: rescale(values, factor=2.0, interpolation="bilinear",
                                                             align_corners=False, antialias=False), chroma)
            del chroma
            basis = torch.rand((8, 8, 8, 8), generator=generator, device=image.device)
            for blocks in (padded[0] * padded[1] // 64, padded[0] * padded[1] // 128):  # luma; both chromas
                patches = torch.rand((batch, blocks, 8, 8), generator=generator, device=image.device)
                agrees = agrees and alike(lambda values: torch.tensordot(values, basis), patches)
                del patches
            _CHUNKS_ARE_THE_BATCH[key] = bool(agrees)
        except Exception:  # noqa: BLE001 - a probe that fails says no
            _CHUNKS_ARE_THE_BATCH[key] = False
    return _CHUNKS_ARE_THE_BATCH[key]


_CHUNKS_ARE_THE_BATCH: Dict[tuple, bool] = {}
CHUNKS_CHECKED = {"RandomJPEG": _jpeg_chunks_are_the_batch}


def _forward_by_images(original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any],
                       dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A large half batch through an augmentation that treats each image alone
    (``AUGMENTATIONS_BY_IMAGE``), or a container of them (``CONTAINERS_BY_IMAGE``), image by image,
    each output narrowed straight into the half output; None where the call is not one (the whole
    widened call then runs).

    The parameters are drawn once, by the release's ``forward_parameters`` for the batch's shape:
    the same generator calls as the release's forward makes (same seed, same stream). Each chunk's
    forward gets its images' rows of them (``params=``; a container's list, each child's rows) and
    computes each image by the same float32 operations as the whole batch's call (matrices and
    grids are built image by image; a container composes its children's matrices lazily, from the
    whole batch's): the output, ``_params`` and the transform matrices are the whole call's, bit
    for bit (tested). An image of at least ``CHUNK_PIXELS`` goes band by band: of output rows of
    its grid for a warp (``warp_in_grid_bands``, where the broadcast grid is torch's; a single
    augmentation or a container of one: its forward is called once per band, each answered with
    its band's rows of the grid), of rows for a per-pixel augmentation, a filter (with its halo) or
    a container of per-pixel ones (``ROW_BAND_PIXELS`` an image a band, ``BAND_IMAGES`` images'
    rows a call). Otherwise a whole image at a time (a container of
    several warps: the second warps the first's whole output)."""
    found = _per_image_slicer(original, module, args, kwargs)
    if found is None:
        return None
    slicer, row = found
    split, sampled = row.split, row.sampled
    halo = _halo_rows(module, row)
    # a filter whose kernel sizes are drawn (``RandomMotionBlur``): its halo from them, once drawn
    halo_drawn = halo is None and isinstance(row.halo, str) and row.halo in row.applied + row.every + row.shared
    if halo is not None or halo_drawn:
        split = "rows"  # a filter: bands of rows with their halo
    image = args[0]
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.dtype not in HALF_DTYPES:
        return None
    batch, pixels = image.shape[0], image.shape[-2] * image.shape[-1]
    count = max(1, CHUNK_PIXELS // max(pixels, 1))
    banded_size = pixels >= CHUNK_PIXELS and (split == "rows" or (split == "grid" and takes_grid_bands(pixels)))
    if pixels < CHUNKED_IMAGE_PIXELS or (batch <= count and not banded_size) or image.numel() == 0:
        return None
    if is_compiling() or torch.jit.is_tracing() or (torch.is_grad_enabled() and image.requires_grad):
        return None  # traced, or a gradient: the whole release call's graph
    if _float32_state(module):
        return None  # half parameters: the whole call, reparametrised
    checked = CHUNKS_CHECKED.get(type(module).__name__)
    if checked is not None and not checked(module, image, 1 if banded_size else count):
        return None
    if row.drawn and not image.is_contiguous():
        return None  # the widened image keeps its layout, and the noise drawn like it follows it
    params = module.forward_parameters(image.shape)
    if halo_drawn:
        halo = _halo_rows(module, row, params)
        if halo is None:  # a border that is not local (circular): whole images
            split, banded_size = row.split, False
    if row.drawn and isinstance(params, dict):
        drawn = _draw_while_applying(module, row, params, image)
        if drawn is None:  # the release's forward draws it (the same stream)
            return original(module, image.float(), params=params)
        params = drawn
    if type(module).__name__ in CHANNELS_SCALED and isinstance(params, dict):
        scaled = _channels_scaled(original, module, image, params)
        if scaled is not None:
            return scaled  # ``_params`` and the matrix: the probe's call's, the release's with them
    planes = row.planes + row.drawn[:1]  # image-sized parameters: a band takes its rows of them
    if isinstance(params, list) and params and split == "image":
        # A container's first child reads the container's image: a crop there reads a part of it.
        first = _by_image(dict(module.named_children()).get(getattr(params[0], "name", None)))
        sampled = first is not None and first.sampled
    sliced_crop = sampled and not isinstance(params, list) and _crops_by_indices(module)
    if _moves_values(module, row) and _rows_by_image(params, row, batch) is not None:
        moved = _release_half_forward(original, module, image, params)
        if moved is not None:
            return moved
    if sliced_crop and COMPUTED_IN_HALF.get(type(module).__name__) == "resize":
        if native_half_arithmetic() == dtype:
            # resized in half, as 0.9.0 does (COMPUTED_IN_HALF): the release's forward on the half batch
            moved = _release_half_forward(original, module, image, params)
        else:
            # the release's forward on the half batch, its resizes the float32 ones narrowed
            with HalfCropsResizedInFloat32():
                moved = _release_half_forward(original, module, image, params)
            if moved is not None and not _matrix_from_float32(module, image, params):
                moved = None  # (drawn already: the float32 chunks below, with these parameters)
        if moved is not None:
            return moved
    own = slicer(params, batch)

    def whole() -> Any:
        # Drawn already: the whole float32 forward with these parameters is the release's call.
        with large_warps(pixels):
            return original(module, image.float(), params=params)

    if own is None:
        return whole()
    in_bands = banded_size and not (split == "grid" and isinstance(params, list) and len(params) > 1)
    states: List[List[Tuple[Any, Any, Any]]] = []
    given: List[Any] = []
    out: Optional[torch.Tensor] = None
    if in_bands and split == "rows":
        # A filter that 0.9.0 convolves in half (COMPUTED_IN_HALF), the dtype native here: the
        # release's forward on the half band is that computation, without a float32 copy of it.
        in_half = native_half_arithmetic() == dtype
        height, width = image.shape[-2:]
        margin = halo or 0
        group = min(batch, BAND_IMAGES)
        # a half band's planes take half a float32 band's bytes: twice its pixels, the same workspace
        # (bfloat16 RandomMotionBlur 4x3x2048x2048: 2^17 pixels 163 ms, 2^18 140 ms, 2^19 138 ms)
        band = max(1, (HALO_BAND_PIXELS if halo is not None else ROW_BAND_PIXELS) * (2 if in_half else 1)
                   // max(width, 1))
        for first in range(0, batch, group):
            last = min(first + group, batch)
            rows = own(first, last)
            for start in range(0, height, band):
                stop = min(start + band, height)
                low, high = max(start - margin, 0), min(stop + margin, height)
                band_rows = rows if not planes else {key: value[..., low:high, :] if key in planes else value
                                                     for key, value in rows.items()}
                # (assigned once computed: the previous band's result lives until then, see below)
                half_result = _release_half_forward(original, module, image[first:last, :, low:high],
                                                    band_rows) if in_half else None
                # Refused: the float32 band, its convolutions still in half (HALF_ARITHMETIC)
                in_half = half_result is not None
                result = half_result if in_half else \
                    original(module, image[first:last, :, low:high].float(), params=band_rows)
                if (not isinstance(result, torch.Tensor) or result.dtype != (dtype if in_half else torch.float32)
                        or result.dim() != 4
                        or result.shape[0] != last - first or tuple(result.shape[-2:]) != (high - low, width)):
                    return whole()  # not pixel by pixel after all
                if out is None:
                    out = torch.empty((batch, result.shape[1], height, width), dtype=dtype, device=result.device)
                elif result.shape[1] != out.shape[1]:
                    return whole()
                out[first:last, :, start:stop] = result[..., start - low : stop - low, :]
                # ``result`` is kept until the next band's exists: glibc then reuses its heap for the
                # next band's temporaries instead of trimming it and faulting it in (as the warps' bands)
            given.append(rows)
            states.append(_call_state(module))
    elif in_bands:
        def images() -> Iterator[Callable[[], Any]]:
            for index in range(batch):
                widened, rows = image[index : index + 1].float(), own(index, index + 1)
                yield lambda: original(module, widened, params=rows)
                given.append(rows)
                states.append(_call_state(module))

        out = warp_in_grid_bands(images(), batch, dtype)
    else:
        for start in range(0, batch, count):
            stop = min(start + count, batch)
            rows = own(start, stop)
            # a crop by indices warps nothing: not the warps' context (its grid probe, its mode)
            with contextlib.nullcontext() if sliced_crop else large_warps(pixels):
                if sampled:
                    sources = SampledSources(image.shape[1:])
                    widened = sources.widened(image[start:stop], False)
                    with sources:
                        result = original(module, widened, params=rows)
                    del widened
                else:
                    # Where the release refuses a chunk (0.7.2's RandomJPEG refuses sides that are
                    # not multiples of 16 in the images it applies to), the whole call raises the
                    # release's own error, with the whole batch's shape in its message.
                    try:
                        result = original(module, image[start:stop].float(), params=rows)
                    except Exception:  # noqa: BLE001 - the whole call raises it again, or answers
                        return whole()
            if not isinstance(result, torch.Tensor) or result.dtype != torch.float32 or result.shape[0] != stop - start:
                return whole()  # not image by image after all
            if out is None:
                out = torch.empty((batch,) + tuple(result.shape[1:]), dtype=dtype, device=result.device)
            out[start:stop] = result
            given.append(rows)
            states.append(_call_state(module))
            del result
    if out is None or len(states) != -(-batch // (group if in_bands and split == "rows" else 1 if in_bands else count)):
        return whole()
    if not _put_whole_batch_state(module, params, given, states, batch):
        return whole()
    return out


# Mix augmentations whose output pixel mixes the same pixel of images of the batch, with a pair and
# a weight drawn per image (``input * (1 - lam) + input[pairs] * lam``): a large half batch goes in
# bands of rows of the whole batch (``_mix_in_row_bands``), each band the release's float32 forward
# of those rows with the parameters drawn once, every pixel mixed by the same float32 operations.
MIXES_BY_ROWS = frozenset({"RandomMixUpV2"})
# Mix augmentations whose forward only moves values, so the release's forward on the half batch,
# given the parameters drawn for the float32 call, is that call's output narrowed, bit for bit,
# without a float32 copy:
# - CutMix clones the batch and copies each drawn box's pixels from the paired image
#   (``out[mask] = input[pairs][mask]``, the mask from the float32 boxes alone);
# - Jigsaw cuts each applied image into its grid's pieces (``unfold``) and puts them back in the
#   drawn order (an index and reshapes): 0.9.0's half call was 5.4-5.9x faster than the widened one;
# - Mosaic concatenates the drawn images into one and slices the drawn box out of it, padding with
#   zeros or cutting to the output size (``crop_by_indices(..., shape_compensation="pad")``), with
#   ``cropping_mode="slice"`` (its default) and boxes that ``_mosaic_crop_resizes`` clears: the
#   parts of the images each box covers are copied (``_mosaic_by_tiles``); the release's half call
#   composes the whole mosaic (four copies of the batch and two concatenations: 0.86-1.27x 0.9.0's
#   time, the same algorithm).
MIXES_MOVING_VALUES = frozenset({"RandomCutMixV2", "RandomJigsaw", "RandomMosaic"})
# Of those, mixes that move whole pieces of a grid (``flags["grid"]``) of each image: where each
# piece goes is the release's forward of an image of one pixel a piece, its number, given the same
# parameters; the half pieces are then copied there (``_pieces_moved``). The release's half call
# copies the batch five times (a clone, the pieces, their permutation, the reassembly and the
# applied images put back): 1.2-1.5x 0.9.0's time and 1.3-1.6x its memory.
MIXES_BY_PIECES = frozenset({"RandomJigsaw"})
# At most this many piece copies a call (each a few microseconds of Python: pieces of at least
# 2^16 / pieces pixels keep that below the release's own copies); more: the release's half call.
PIECE_COPIES = 4096


def _pieces_moved(original: Any, module: torch.nn.Module, image: torch.Tensor,
                  params: Dict[str, Any]) -> Optional[torch.Tensor]:
    """``image`` through a mix of ``MIXES_BY_PIECES``, each piece of its grid copied once to where
    the release's forward puts it; None where the grid does not divide the image or the release's
    forward of the piece numbers is not a permutation of each image's pieces."""
    flags = getattr(module, "flags", None)
    grid = flags.get("grid") if isinstance(flags, dict) else None
    if not isinstance(grid, (tuple, list)) or len(grid) != 2 or not all(isinstance(n, int) and n > 0 for n in grid):
        return None
    batch, channels, height, width = image.shape
    rows, columns = grid
    if height % rows or width % columns:
        return None  # the release drops or refuses the rest: its own call
    pieces = rows * columns
    if batch * pieces > PIECE_COPIES:
        return None
    numbers = torch.arange(pieces, dtype=torch.float32, device=image.device).view(1, 1, rows, columns)
    try:
        placed = original(module, numbers.expand(batch, 1, rows, columns).contiguous(), params=params)
    except (TypeError, RuntimeError, NotImplementedError, ValueError):
        return None
    if not isinstance(placed, torch.Tensor) or tuple(placed.shape) != (batch, 1, rows, columns):
        return None
    sources = placed.reshape(batch, pieces)
    if not torch.equal(sources.sort(dim=1).values, numbers.reshape(1, pieces).expand(batch, pieces)):
        return None  # not each image's own pieces, each once
    piece_height, piece_width = height // rows, width // columns
    out = torch.empty_like(image, memory_format=torch.contiguous_format)
    for index, image_sources in enumerate(sources.long().tolist()):
        for place, source in enumerate(image_sources):
            to_row, to_column = divmod(place, columns)
            from_row, from_column = divmod(source, columns)
            out[index, :, to_row * piece_height:(to_row + 1) * piece_height,
                to_column * piece_width:(to_column + 1) * piece_width] = \
                image[index, :, from_row * piece_height:(from_row + 1) * piece_height,
                      from_column * piece_width:(from_column + 1) * piece_width]
    return out


# Of those, mixes whose every output pixel is the same pixel of one image of the batch, its own or
# one it is paired with (CutMix: ``out[mask] = input[pairs][mask]`` per round, always from the
# input): which image is the release's forward of a one-channel float16 image of the images'
# numbers, given the same parameters (float16 holds them exactly; 0.7.0-0.8.2 refuse bfloat16);
# each half image is then written by ``torch.where`` of those masks (``_pixels_from_sources``). The
# release's half call makes int64 indices of every masked element (331 MiB for a 24 MiB batch at
# 4x3x1024x1024); the probe's one channel a third of them.
MIXES_BY_SOURCES = frozenset({"RandomCutMixV2"})


def _pixels_from_sources(original: Any, module: torch.nn.Module, image: torch.Tensor,
                         params: Dict[str, Any]) -> Optional[torch.Tensor]:
    """``image`` through a mix of ``MIXES_BY_SOURCES``, each output pixel copied from the image the
    release's forward takes it from; None where the forward of the images' numbers is not, at
    every pixel, the image's own number or that of an image it is paired with (``mix_pairs``)."""
    batch, channels, height, width = image.shape
    pairs = params.get("mix_pairs")
    if batch > 2048 or not isinstance(pairs, torch.Tensor) or pairs.dim() != 2 or pairs.shape[1] != batch:
        return None
    numbers = torch.arange(batch, dtype=torch.float16, device=image.device).view(batch, 1, 1, 1)
    try:
        placed = original(module, numbers.expand(batch, 1, height, width), params=params)
    except (TypeError, RuntimeError, NotImplementedError, ValueError):
        return None
    if (not isinstance(placed, torch.Tensor) or placed.dtype != torch.float16
            or tuple(placed.shape) != (batch, 1, height, width)):
        return None
    out = torch.empty_like(image, memory_format=torch.contiguous_format)
    for index, paired in enumerate(pairs.t().tolist()):
        sources = placed[index, 0]
        others = sorted(set(int(source) for source in paired) - {index})
        masks = [(source, sources == source) for source in others]
        covered = int((sources == index).sum()) + sum(int(mask.sum()) for _, mask in masks)
        if covered != height * width:
            return None  # a pixel from elsewhere, or computed
        out[index] = image[index]
        for source, mask in masks:
            torch.where(mask, image[source], out[index], out=out[index])
    return out


def _consecutive_run(values: List[int]) -> Optional[Tuple[int, int]]:
    """(first, length) of ``values`` that are first, first + 1, ... and then only zeros (padding);
    None otherwise."""
    length = next((index for index, value in enumerate(values) if value == 0), len(values))
    if any(values[length:]) or any(values[index] != values[0] + index for index in range(length)):
        return None
    return (values[0] if length else 0), length


def _mosaic_by_tiles(module: torch.nn.Module, image: torch.Tensor, params: Dict[str, Any]) -> Optional[torch.Tensor]:
    """``RandomMosaic``'s output, each part of each image that an output box covers copied once;
    None where the release's layout is not found so (the release's forward then runs).

    Where each image sits in each mosaic is the release's ``_compose_images`` of one pixel an
    image (its number); which mosaic row and column each output pixel takes is the release's
    ``_crop_images`` of the mosaic's row and column numbers (from 1; 0 is padding), as expanded
    tensors of the mosaic's size (no memory but the output's). Each output must be a run of
    consecutive rows by a run of consecutive columns, then zeros; the images not applied are the
    release's ``apply_non_transform`` of theirs."""
    flags = getattr(module, "flags", None)
    compose, crop = getattr(module, "_compose_images", None), getattr(module, "_crop_images", None)
    keep = getattr(module, "apply_non_transform", None)
    to_apply = params.get("batch_prob")
    size = flags.get("output_size") if isinstance(flags, dict) else None
    if (not callable(compose) or not callable(crop) or not callable(keep)
            or not isinstance(size, (tuple, list)) or len(size) != 2 or not isinstance(to_apply, torch.Tensor) or to_apply.shape != image.shape[:1] or getattr(module, "keepdim", False)):
        return None
    applied = (to_apply > 0.5).tolist()  # as the release reads it
    batch, channels, height, width = image.shape
    out_height, out_width = (int(side) for side in size)
    try:
        numbers = torch.arange(batch, dtype=torch.float32, device=image.device).view(batch, 1, 1, 1)
        tiles = compose(numbers, params, flags)
        count = sum(applied)
        if not isinstance(tiles, torch.Tensor) or tiles.dim() != 4 or tiles.shape[:2] != (count, 1):
            return None
        mosaic_height, mosaic_width = tiles.shape[-2] * height, tiles.shape[-1] * width
        expanded = (count, 1, mosaic_height, mosaic_width)
        mosaic_rows = torch.arange(1, mosaic_height + 1, dtype=torch.float32, device=image.device)
        mosaic_columns = torch.arange(1, mosaic_width + 1, dtype=torch.float32, device=image.device)
        rows = crop(mosaic_rows.view(1, 1, -1, 1).expand(expanded), params, flags, None)
        columns = crop(mosaic_columns.view(1, 1, 1, -1).expand(expanded), params, flags, None)
        kept = keep(image[[not flag for flag in applied]], params, flags) if count < batch else None
    except (TypeError, RuntimeError, NotImplementedError, ValueError, IndexError, KeyError):
        return None
    shape = (count, 1, out_height, out_width)
    if (not isinstance(rows, torch.Tensor) or not isinstance(columns, torch.Tensor)
            or tuple(rows.shape) != shape or tuple(columns.shape) != shape
            or (kept is not None and (not isinstance(kept, torch.Tensor) or kept.dtype != image.dtype
                                      or tuple(kept.shape) != (batch - count, channels, out_height, out_width)))):
        return None
    row_of, column_of = rows.amax(dim=-1, keepdim=True), columns.amax(dim=-2, keepdim=True)
    inside = (row_of > 0) & (column_of > 0)
    if not (torch.equal(rows, torch.where(inside, row_of, 0.0).expand(shape))
            and torch.equal(columns, torch.where(inside, column_of, 0.0).expand(shape))):
        return None  # not one box of the mosaic an output, or resampled
    out = torch.zeros((batch, channels, out_height, out_width), dtype=image.dtype, device=image.device)
    sources = tiles.long().tolist()
    mosaic, other = 0, 0
    for position, flag in enumerate(applied):
        if not flag:
            out[position] = kept[other]
            other += 1
            continue
        row_run = _consecutive_run([int(value) for value in row_of[mosaic, 0, :, 0].tolist()])
        column_run = _consecutive_run([int(value) for value in column_of[mosaic, 0, 0, :].tolist()])
        if row_run is None or column_run is None:
            return None
        (first_row, row_count), (first_column, column_count) = row_run, column_run
        first_row, first_column = first_row - 1, first_column - 1  # numbered from 1
        for tile_row in range(first_row // height, (first_row + row_count - 1) // height + 1 if row_count else 0):
            low, high = max(first_row, tile_row * height), min(first_row + row_count, (tile_row + 1) * height)
            for tile_column in range(first_column // width,
                                     (first_column + column_count - 1) // width + 1 if column_count else 0):
                left = max(first_column, tile_column * width)
                right = min(first_column + column_count, (tile_column + 1) * width)
                source = sources[mosaic][0][tile_row][tile_column]
                out[position, :, low - first_row:high - first_row, left - first_column:right - first_column] = \
                    image[source, :, low - tile_row * height:high - tile_row * height,
                          left - tile_column * width:right - tile_column * width]
        mosaic += 1
    return out


def _mosaic_crop_resizes(module: torch.nn.Module, params: Dict[str, Any], height: int, width: int) -> bool:
    """Whether the release's crop of ``RandomMosaic``'s mosaic computes values: a resampled crop
    (``cropping_mode="resample"``), or boxes that ``crop_by_indices`` resizes (0.7.0-0.8.3: when
    every image's box is the same and its slice is not of the output size, whatever
    ``shape_compensation`` says). Unknown flags or boxes count as computing."""
    flags = getattr(module, "flags", None)
    if not isinstance(flags, dict) or flags.get("cropping_mode") != "slice":
        return True
    grid, size, src = flags.get("mosaic_grid"), flags.get("output_size"), params.get("src")
    if (not isinstance(src, torch.Tensor) or src.dim() != 3 or tuple(src.shape[1:]) != (4, 2)
            or not isinstance(grid, (tuple, list)) or len(grid) != 2):
        return True
    box = src.long()  # as the release's crop reads it
    left, right, top, bottom = box[:, 0, 0], box[:, 1, 0] + 1, box[:, 0, 1], box[:, 3, 1] + 1
    if size is None or any(len(edge.unique()) != 1 for edge in (left, right, top, bottom)):
        return False  # each image's box sliced alone, then padded with zeros or cut to the size
    # the images are stacked by grid[1] down and grid[0] across; Python's slice of that extent
    rows = len(range(int(grid[1]) * height)[int(top[0]):int(bottom[0])])
    columns = len(range(int(grid[0]) * width)[int(left[0]):int(right[0])])
    return (rows, columns) != tuple(size)


def _mix_in_row_bands(original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any],
                      dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A mix augmentation of ``MIXES_BY_ROWS`` on a large half batch, band by band of rows of the
    whole batch (``ROW_BAND_PIXELS`` an image a band), each band's float32 output narrowed
    straight into the half output; None where the call is not one (the whole widened call then
    runs). The parameters are the release's for the float32 call: ``forward_parameters`` of the
    whole shape (the same generator calls, the same stream) and the float32 ``"dtype"`` entry,
    so ``_params`` is the whole call's too."""
    kind = type(module)
    if (getattr(original, "__qualname__", "") != "MixAugmentationBaseV2.forward"
            or kind.__name__ not in MIXES_BY_ROWS | MIXES_MOVING_VALUES
            or not kind.__module__.startswith("kornia.augmentation.")):
        return None
    if len(args) != 1 or any(value is not None for value in kwargs.values()):
        return None  # masks, classes or boxes beside the image, given parameters or data keys: the whole call
    keys = getattr(module, "data_keys", None)
    if not isinstance(keys, (list, tuple)) or [getattr(key, "name", key) for key in keys] not in (["INPUT"], ["IMAGE"]):
        return None
    image = args[0]
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.dtype not in HALF_DTYPES or image.numel() == 0:
        return None
    batch, channels, height, width = image.shape
    if height * width < CHUNKED_IMAGE_PIXELS:
        return None
    if is_compiling() or torch.jit.is_tracing() or (torch.is_grad_enabled() and image.requires_grad):
        return None
    if _float32_state(module):
        return None
    dtype_names = getattr(sys.modules.get(original.__module__), "DType", None)
    if dtype_names is None or not hasattr(dtype_names, "get"):
        return None
    params = module.forward_parameters(image.shape)
    # as the release's float32 call records it (the class labels' dtype)
    params["dtype"] = torch.tensor(dtype_names.get(torch.float32).value)
    moving = kind.__name__ in MIXES_MOVING_VALUES
    if moving and kind.__name__ == "RandomMosaic" and _mosaic_crop_resizes(module, params, height, width):
        moving = False
    if moving and kind.__name__ == "RandomMosaic":
        moved = _mosaic_by_tiles(module, image, params)
        if moved is not None:
            module._params = params  # as the release's call with them leaves it
            return moved
    if moving and kind.__name__ in MIXES_BY_SOURCES:
        moved = _pixels_from_sources(original, module, image, params)
        if moved is not None:
            module._params = params  # as the release's call with them leaves it
            return moved
    if moving and kind.__name__ in MIXES_BY_PIECES:
        moved = _pieces_moved(original, module, image, params)
        if moved is not None:
            # ``_params`` as the release's call with them leaves it (the probe's call set them)
            module._params = params
            return moved
    if moving:
        # 0.7.0-0.8.2 refuse a bfloat16 image even with the parameters given: its bits are moved
        # as float16 (the forward copies elements, it computes nothing from them).
        carrier = image.view(torch.float16) if image.dtype == torch.bfloat16 else image
        try:
            moved = original(module, carrier, params=params)
        except (TypeError, RuntimeError, NotImplementedError):
            moved = None  # a half kernel this torch lacks: the widened call, with the same draws
        # (a mosaic's output has its own height and width)
        if isinstance(moved, torch.Tensor) and moved.dtype == carrier.dtype and moved.shape[:2] == image.shape[:2]:
            return moved.view(image.dtype)
        with large_warps(height * width):
            return original(module, image.float(), params=params)
    if kind.__name__ in MIXES_MOVING_VALUES:
        with large_warps(height * width):
            return original(module, image.float(), params=params)
    out = torch.empty_like(image)
    band = max(1, ROW_BAND_PIXELS // width)
    for start in range(0, height, band):
        stop = min(start + band, height)
        result = original(module, image[:, :, start:stop].float(), params=params)
        if (not isinstance(result, torch.Tensor) or result.dtype != torch.float32
                or tuple(result.shape) != (batch, channels, stop - start, width)):
            with large_warps(height * width):
                return original(module, image.float(), params=params)  # not pixel by pixel after all
        out[:, :, start:stop] = result
        del result
    return out


# Video containers whose parameters, once drawn, are one row per frame: VideoSequential draws each
# child's for the videos (or the frames) and repeats them across frames (``__broadcast_param__``),
# then runs its children on the frames as a batch of images. So a large half video goes frame by
# frame (``_video_by_frames``): a few frames of one video a call, each given every child's rows of
# those frames; with ``AUGMENTATIONS_BY_IMAGE`` children each frame is computed by the same float32
# operations as in the whole call. (forward's qualname -> the temporal axis of each data format)
VIDEOS_BY_FRAMES = {"VideoSequential": ("VideoSequential.forward", {"BTCHW": 1, "BCTHW": 2})}


def _video_by_frames(original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any],
                     dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A large half video through a ``VIDEOS_BY_FRAMES`` container of children that treat each
    image alone (no image-sized parameters drawn while applying): the parameters drawn once by the
    release's ``forward_parameters`` for the video's shape (the same generator calls), then a few
    frames of one video a call (``CHUNK_PIXELS``), each the release's float32 forward of those
    frames widened, given every child's rows of them, narrowed straight into the half output.
    The output, ``_params`` and the matrices are the whole call's (tested); None where the call is
    not one (the whole widened call then runs)."""
    kind = type(module)
    found = VIDEOS_BY_FRAMES.get(kind.__name__)
    if (found is None or getattr(original, "__qualname__", "") != found[0]
            or not kind.__module__.startswith("kornia.augmentation.")):
        return None
    axis = found[1].get(getattr(module, "data_format", None))
    video = args[0] if args else None
    if (axis is None or not isinstance(video, torch.Tensor) or video.dim() != 5 or video.dtype not in HALF_DTYPES
            or video.numel() == 0 or any(not (value is None or (isinstance(value, dict) and not value))
                                         for value in list(args[1:]) + list(kwargs.values()))):
        return None  # given parameters or extra arguments (0.7.0's default: {}): the whole call
    videos, frames, pixels = video.shape[0], video.shape[axis], video.shape[-2] * video.shape[-1]
    count = max(1, CHUNK_PIXELS // max(pixels, 1))
    if pixels < CHUNKED_IMAGE_PIXELS or videos * frames <= count:
        return None
    if is_compiling() or torch.jit.is_tracing() or (torch.is_grad_enabled() and video.requires_grad):
        return None
    if _float32_state(module):
        return None
    children = dict(module.named_children())
    rows = [_by_image(child) for child in children.values()]
    if not children or any(row is None or row.split == "batch" or row.drawn or row.planes
                           or type(child).__name__ in CHUNKS_CHECKED for row, child in zip(rows, children.values())):
        return None
    params = module.forward_parameters(video.shape)
    images = videos * frames
    own = _children_rows(children, params, images)

    def whole() -> Any:
        # drawn already: the whole float32 forward with these parameters, which keeps them as the
        # release's call does (its forward keeps only those it draws)
        output = original(module, video.float(), params=params)
        module._params = params
        return output

    if own is None:
        return whole()
    # Children that compute each pixel from its own (colour): bands of rows of a few frames a call,
    # whose float32 temporaries stay in cache (ROW_BAND_PIXELS: ColorJiggle whole images 0.40 s,
    # bands 0.22-0.27 s, measured on 4x3x1024x1024)
    height, width = video.shape[-2:]
    in_bands = all(row.split == "rows" and not row.halo for row in rows) and pixels >= CHUNK_PIXELS
    group = min(frames, BAND_IMAGES) if in_bands else count
    band = max(1, ROW_BAND_PIXELS // max(width, 1)) if in_bands else height
    out: Optional[torch.Tensor] = None
    given: List[Any] = []
    states: List[List[Tuple[Any, Any, Any]]] = []
    for index in range(videos):
        for start in range(0, frames, group):
            stop = min(start + group, frames)
            first = index * frames
            chunk_rows = own(first + start, first + stop)
            for top in range(0, height, band):
                bottom = min(top + band, height)
                part = video[index : index + 1].narrow(axis, start, stop - start).narrow(-2, top, bottom - top)
                result = original(module, part.float(), params=chunk_rows)
                if (not isinstance(result, torch.Tensor) or result.dtype != torch.float32 or result.dim() != 5
                        or result.shape[0] != 1 or result.shape[axis] != stop - start
                        or (in_bands and tuple(result.shape[-2:]) != (bottom - top, width))):
                    return whole()  # not frame by frame (or pixel by pixel) after all
                if out is None:
                    shape = list(result.shape)
                    shape[0], shape[axis] = videos, frames
                    if in_bands:
                        shape[-2] = height
                    out = torch.empty(shape, dtype=dtype, device=result.device)
                elif [n for i, n in enumerate(result.shape) if i not in (0, axis, 3)] != \
                        [n for i, n in enumerate(out.shape) if i not in (0, axis, 3)]:
                    return whole()
                into = out[index : index + 1].narrow(axis, start, stop - start)
                (into.narrow(-2, top, bottom - top) if in_bands else into).copy_(result)
                del result
            given.append(chunk_rows)
            states.append(_call_state(module))
    if out is None or not _put_whole_batch_state(module, params, given, states, images):
        return whole()
    return out


def _child_in_row_bands(original: Any, module: torch.nn.Module, args: tuple,
                        kwargs: Dict[str, Any]) -> Optional[torch.Tensor]:
    """Inside the shim's float32 evaluation of a half call, a container's child that computes each
    output pixel from its own input pixel (``ByImage.split`` "rows", no halo, no image-sized
    parameters), called by the container with its parameters on a large float32 image (a warped
    frame): the child's float32 forward in bands of rows (``ROW_BAND_PIXELS`` an image), each
    given the same parameters, into a float32 output. Each pixel is computed by the same float32
    operations as in the whole call, and only a band's float32 temporaries are alive at once
    (VideoSequential(RandomAffine, ColorJiggle) of 4 frames of 1024x1024: 0.287 -> 0.254 s,
    309 -> 111 MiB, measured). None for any other call (the child's whole call runs)."""
    if getattr(original, "__qualname__", "") != "_BasicAugmentationBase.forward":
        return None
    row = _by_image(module)
    if row is None or row.split != "rows" or row.halo or row.planes or row.drawn:
        return None
    if len(args) != 2 or not isinstance(args[1], dict) or any(key != "data_keys" for key in kwargs):
        return None  # drawn here (not a container's child), or keywords that override parameters
    image, params = args
    if (not isinstance(image, torch.Tensor) or image.dim() != 4 or image.dtype != torch.float32
            or image.numel() == 0 or image.requires_grad):
        return None
    batch, _, height, width = image.shape
    band = max(1, ROW_BAND_PIXELS // max(width, 1))
    if batch * height * width < CHUNK_PIXELS or height <= band:
        return None
    if is_compiling() or torch.jit.is_tracing() or _float32_state(module):
        return None
    if torch.is_grad_enabled() and (any(isinstance(v, torch.Tensor) and v.requires_grad for v in params.values())
                                    or any(p.requires_grad for p in module.parameters())):
        return None  # a gradient through the parameters: the child's whole graph
    if _rows_by_image(params, row, batch) is None:
        return None  # not the parameters of these images
    out: Optional[torch.Tensor] = None
    for start in range(0, height, band):
        stop = min(start + band, height)
        try:
            result = original(module, image[:, :, start:stop].contiguous(), params, **kwargs)
        except Exception:  # noqa: BLE001 - the whole call raises it again (the release's own error), or answers
            return None if out is None else original(module, image, params, **kwargs)
        if (not isinstance(result, torch.Tensor) or result.dtype != torch.float32 or result.dim() != 4
                or result.shape[0] != batch or tuple(result.shape[-2:]) != (stop - start, width)
                or (out is not None and result.shape[1] != out.shape[1])):
            return None if out is None else original(module, image, params, **kwargs)  # not per pixel after all
        if out is None:
            out = torch.empty((batch, result.shape[1], height, width), dtype=torch.float32, device=result.device)
        out[:, :, start:stop] = result
    return out


def _promoted_call(
    original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any], data: tuple, dtype: torch.dtype,
    pixels: int,
) -> Any:
    before = _put_back_float32_matrices(module)
    output = _forward_by_images(original, module, args, kwargs, dtype)
    if output is None:
        output = _video_by_frames(original, module, args, kwargs, dtype)
    if output is None:
        output = _mix_in_row_bands(original, module, args, kwargs, dtype)
    if output is None:
        # Inside it a large image's affine grid is broadcast where that is torch's grid bit for
        # bit (fixes/_at_scale.py).
        with large_warps(pixels):
            output = _release_call(original, module, _widen(args), _widen(kwargs))
    _narrow_matrices(module, dtype, before)
    return _narrow(output, _output_reference(data, output), dtype)


def _dispatch(original: Any, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any], data: tuple) -> Any:
    """``data``: the data arguments (the image first; AugmentationSequential's ``*args``), whose
    first floating tensor decides; ``args``/``kwargs``: the call as the original receives it."""
    first = _first_floating_tensor(data)
    if first is None or first.dtype not in HALF_DTYPES:
        if autocast_half(first) is not None:
            # Under autocast a float32 image's matrices are composed by half matmuls (bfloat16:
            # a 256 px affine warp samples 0.4 px off) and its sampling grid built from them: the
            # float32 call, autocast off (the same parameters: they are drawn in float32).
            with autocast_off(first.device.type):
                return original(module, *args, **kwargs)
        if in_float32_evaluation():  # a container's child inside the shim's evaluation of a half call
            banded = _child_in_row_bands(original, module, args, kwargs)
            if banded is not None:
                return banded
        return original(module, *args, **kwargs)
    # The shim's float32 evaluation of a half call: inside it the depthwise filters take their
    # channels-last float32 form (fixes/_at_scale.py).
    pixels = first.shape[-2] * first.shape[-1] if first.dim() >= 2 else 0
    with float32_context(first), FLOAT32_EVALUATION, _half_arithmetic_of(module, first):
        return _promoted_call(original, module, args, kwargs, data, first.dtype, pixels)


def build_entry_point(original: Any) -> Any:
    """``forward``/``inverse`` of an augmentation or container, promoted for half inputs.

    Written out with the original's own parameter list (defaults taken from the function object,
    as ``_codegen`` does), so the replacement has the original's ``__defaults__`` and signature.
    The generated code is kept per original (every re-apply, two per testing.isolated() block,
    builds the replacement again); each build makes a new function from it."""
    # What the signature is read from (a plain function without __signature__ or __wrapped__).
    marks = (
        getattr(original, "__code__", None), getattr(original, "__defaults__", None),
        getattr(original, "__kwdefaults__", None), getattr(original, "__annotations__", None),
        getattr(original, "__signature__", None), getattr(original, "__wrapped__", None),
    )
    known = _generated.get(id(original))
    if marks[0] is None or known is None or known[0] is not original or any(a is not b for a, b in zip(known[1], marks)):
        signature = inspect.signature(original)
        known = _generated[id(original)] = (original, marks, signature) + _generate_entry_point(original, signature)
    signature, code, defaults, filename, lines = known[2:]
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)  # TorchScript reads it
    namespace: Dict[str, Any] = {"_halfpatch_original": original, "_halfpatch_dispatch": _dispatch, **defaults}
    exec(code, namespace)  # noqa: S102 - our own generated code: defines the function
    entry_point = namespace[original.__name__]
    entry_point.__defaults__ = original.__defaults__
    entry_point.__kwdefaults__ = original.__kwdefaults__
    entry_point.__doc__ = original.__doc__
    entry_point.__signature__ = signature  # with the original's annotations
    return entry_point


# id(original) -> (original, what its signature was read from, the signature, the compiled
# definition, the defaults it reads, its file name and source lines)
_generated: Dict[int, Tuple[Any, ...]] = {}


def _generate_entry_point(original: Any, signature: inspect.Signature) -> Tuple[Any, Dict[str, Any], str, List[str]]:
    """The compiled ``def`` of ``build_entry_point``'s function, the defaults it reads, and its
    file name and source lines (for ``linecache``)."""
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].name != "self":
        raise TypeError(f"{original.__qualname__}: expected a method taking self first")
    namespace: Dict[str, Any] = {"_halfpatch_original": original, "_halfpatch_dispatch": _dispatch}
    pieces, positional, keywords = ["self"], [], []
    variadic = variadic_keywords = None
    marked_keyword_only = False
    for parameter in parameters[1:]:
        name = parameter.name
        default = f" = _halfpatch_default_{name}" if parameter.default is not parameter.empty else ""
        if parameter.default is not parameter.empty:
            namespace[f"_halfpatch_default_{name}"] = parameter.default
        if parameter.kind == parameter.POSITIONAL_OR_KEYWORD:
            pieces.append(name + default)
            positional.append(name)
        elif parameter.kind == parameter.VAR_POSITIONAL:
            pieces.append(f"*{name}")
            variadic, marked_keyword_only = name, True
        elif parameter.kind == parameter.KEYWORD_ONLY:
            if not marked_keyword_only:
                pieces.append("*")
                marked_keyword_only = True
            pieces.append(name + default)
            keywords.append(name)
        elif parameter.kind == parameter.VAR_KEYWORD:
            pieces.append(f"**{name}")
            variadic_keywords = name
        else:
            raise TypeError(f"{original.__qualname__}: positional-only parameter {name}")
    args = "(" + "".join(f"{name}, " for name in positional) + ")"
    if variadic is not None:
        args += f" + tuple({variadic})"
    kwargs = "{" + ", ".join(f"{name!r}: {name}" for name in keywords) + "}"
    if variadic_keywords is not None:
        kwargs = f"dict({kwargs}, **{variadic_keywords})"
    # The data: AugmentationSequential's *args, else the first parameter (the image).
    data = variadic if variadic is not None else f"({positional[0]},)" if positional else "()"
    name = original.__name__
    source = (
        f"def {name}({', '.join(pieces)}):\n"
        f"    return _halfpatch_dispatch(_halfpatch_original, self, {args}, {kwargs}, {data})\n"
    )
    filename = f"<kornia_halfpatch generated augmentation entry point {original.__qualname__}>"
    defaults = {key: value for key, value in namespace.items() if key.startswith("_halfpatch_default_")}
    return compile(source, filename, "exec"), defaults, filename, source.splitlines(True)


WHOLESALE = (
    "the random parameters drawn as for float32 (same seed, same stream), the matrix, its inverse and "
    "the sampling grid in float32 (half pixel coordinates are 0.125-1 px coarse near 180 px), narrowed once"
)


def _entry(path: str, reason: str) -> Target:
    return Target((path,), build_entry_point, ("self",), optional=True, reason=reason)


DIAMOND_SQUARE_PARAMETERS = ("output_size", "roughness", "random_scale", "random_fn", "normalize_range", "device", "dtype")


def diamond_square_differs(original: Any) -> Optional[str]:
    """What keeps ``diamond_square`` from being computed a few images a step: the release's
    defaults and its seed and step functions, as 0.7.0-0.8.3 have them."""
    helpers = getattr(original, "__globals__", {})
    if not all(callable(helpers.get(name)) for name in ("_diamond_square_seed", "_one_diamond_one_square")):
        return "no _diamond_square_seed/_one_diamond_one_square beside diamond_square"
    if original.__defaults__ != (0.5, 1.0, torch.rand, None, None, None):
        return f"diamond_square's defaults are {original.__defaults__}"
    return None


def build_diamond_square(original: Any) -> Any:
    def diamond_square(output_size, roughness=0.5, random_scale=1.0, random_fn=torch.rand, normalize_range=None,
                       device=None, dtype=None):
        # Only inside the shim's float32 evaluation of a half plasma augmentation (a user's call
        # is the release's): its last steps' float32 maps a few images at a time, bit for bit.
        if not is_compiling() and not torch.jit.is_tracing() and in_float32_evaluation():
            fractal = diamond_square_by_images(original, output_size, roughness, random_scale, random_fn,
                                               normalize_range, device, dtype)
            if fractal is not None:
                return fractal
        return original(output_size, roughness, random_scale, random_fn, normalize_range, device, dtype)

    return diamond_square


TARGETS = (
    _entry("kornia.augmentation.base:_BasicAugmentationBase.forward",
           "every 2D/3D augmentation's forward: " + WHOLESALE + "; ColorJiggle's gray-pixel hue is NaN in "
           "float16 (a crash in hsv_to_rgb), RandomPlanckianJitter returns float32: both in float32, narrowed"),
    _entry("kornia.augmentation._2d.geometric.base:GeometricAugmentationBase2D.inverse",
           "the inverse warp from the float32 matrix kept by the forward, sampled in float32, narrowed once"),
    _entry("kornia.augmentation._3d.geometric.crop:RandomCrop3D.forward",
           "RandomCrop3D overrides forward: as every augmentation's forward"),
    _entry("kornia.augmentation._2d.mix.base:MixAugmentationBaseV2.forward",
           "the mix augmentations override forward (several data keys): as every augmentation's forward"),
    _entry("kornia.augmentation._2d.mix.transplantation:RandomTransplantation.forward",
           "RandomTransplantation overrides forward: as every augmentation's forward"),
    _entry("kornia.augmentation.auto.base:PolicyAugmentBase.forward",
           "AutoAugment/RandAugment/TrivialAugment (0.7.4+): the policies run on the widened float32 image, "
           "their matrices composed in float32 (a half child matrix met a float32 product: 'expected scalar "
           "type Float but found Half'), narrowed once"),
    _entry("kornia.augmentation.container.base:ImageSequentialBase.forward",
           "ImageSequential: the children run on the widened float32 image (each draws as for float32), "
           "the composed output narrowed once"),
    _entry("kornia.augmentation.container.base:ImageSequentialBase.inverse",
           "ImageSequential's inverse: from the children's float32 matrices, narrowed once"),
    _entry("kornia.augmentation.container.augment:AugmentationSequential.forward",
           "AugmentationSequential: image, masks, boxes and keypoints widened, transformed by the float32 run, "
           "each narrowed to its own input's dtype (integer masks stay integer)"),
    _entry("kornia.augmentation.container.augment:AugmentationSequential.inverse",
           "AugmentationSequential's inverse: from the float32 matrices, each output narrowed to its input's dtype"),
    _entry("kornia.augmentation.container.video:VideoSequential.forward",
           "VideoSequential: the frames in float32 (a NaN hue in float16 was NaN output), narrowed once"),
    _entry("kornia.augmentation.container.video:VideoSequential.inverse",
           "VideoSequential's inverse in float32, narrowed once"),
    _entry("kornia.augmentation.container.patch:PatchSequential.forward",
           "PatchSequential: the patches augmented in float32, narrowed once"),
    _entry("kornia.augmentation.container.patch:PatchSequential.inverse",
           "PatchSequential's inverse in float32, narrowed once"),
    Target(("kornia.contrib.diamond_square:diamond_square",), build_diamond_square, DIAMOND_SQUARE_PARAMETERS,
           optional=True, check=diamond_square_differs,
           reason="the plasma augmentations' fractal in the float32 evaluation of a half call: its large steps a few "
                  "images at a time (their float32 maps are most of RandomPlasmaShadow's memory), the same values "
                  "and random stream as the whole call"),
)


def probe(originals: Sequence[Any]) -> Finding:
    """The shape the wrapper relies on: the augmentation base draws its parameters from a
    generator of its own dtype (float32 unless the user changed it), independent of the input's
    dtype, so a float32 run of a half input draws the same parameters."""
    base_forward = originals[0]
    if base_forward is None:
        return unsupported("kornia.augmentation's _BasicAugmentationBase.forward not found")
    from kornia.augmentation import base as augmentation_base

    base = augmentation_base._BasicAugmentationBase
    for needed in ("forward_parameters", "set_rng_device_and_dtype", "generate_parameters"):
        if not hasattr(base, needed):
            return unsupported(f"_BasicAugmentationBase has no {needed}")
    return bug_present("augmentations build matrices and sampling grids in the half input's dtype")


FIX = Fix(
    name="augmentation_pipeline",
    targets=TARGETS,
    probe=probe,
    demonstration="kornia_halfpatch.demos.augmentation_pipeline:demonstrate",
)
