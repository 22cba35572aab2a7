"""extract_patches_simple / extract_patches_from_pyramid: float32 sampling, one folded grid_sample
per chunk, zero patches for non-finite LAFs (docs/fixes/feature_patches.md).

Targets: ``kornia.feature.laf:extract_patches_simple`` and ``extract_patches_from_pyramid``
(0.7.0-0.8.3); the engine rebinds every kornia module that holds them (``kornia.feature``,
``integrated`` for ``LAFDescriptor``/``get_laf_descriptors``, ``orientation`` for
``LAFOrienter``, ``affine_shape`` for ``LAFAffineShapeEstimator``/``LAFAffNetShapeEstimator``).
Applied when the release rejects a float32 LAF with a half image and its float32 arithmetic is
the one replicated here (checked bitwise on a probe); not on 0.9.0, which changed float32 values.

Bugs: half images are sampled by half ``grid_sample`` (garbage/NaN on CPU once a plane exceeds
32768 elements, whole-pixel quantized coordinates on large images); a float32 LAF with a half
image raises "expected scalar type"; a NaN LAF makes the float32 border ``grid_sample`` backward
segfault; the per-image Python loop makes ``torch.compile`` build one graph per batch size.

What the replacement does, keeping the installed release's arithmetic:
- Sampling dtype = ``promote_types(img, laf)`` with half promoted to float32. LAF and image are
  cast to it (the image once, before any loop; the pyramid is built in it); the patches are
  returned in the image's dtype on the image's device. A half result is therefore the release's
  own computation on inputs widened to float32, narrowed once.
- The release's own ``normalize_laf`` / ``denormalize_laf`` / ``get_laf_scale`` / ``pyrdown`` are
  called (read off the original's globals); its patch-grid arithmetic is replicated op for op. The per-image
  ``grid_sample`` over ``img[i].expand(N, ...)`` becomes one call over ``(B, n*PS, PS, 2)``: CPU
  ``grid_sample`` and ``affine_grid`` compute every output independently of the batch layout,
  so finite float32/float64 results stay bit-for-bit (checked on every release by ``check``).
- Chunked along N so one chunk's grid and samples stay within 64 MiB, estimated per LAF as
  ``B * PS * PS * max(2, CH) * elem_size``. Each chunk repeats the same per-element arithmetic.
- A frame with any non-finite entry is zeroed before the grid arithmetic (``masked_fill``, no
  data-dependent branch) and its patch zeroed after: zero patch, zero LAF gradient, and no NaN
  ever reaches ``grid_sampler_2d_backward``.
- Pyramid: each LAF is sampled from its level only. Eager gathers the LAFs of a level into one
  padded folded call; under ``torch.compile``/``jit.trace`` every level samples all LAFs and keeps
  its own (static shapes). Which levels exist follows the installed release, detected by a probe
  (<= 0.8.2 builds level l when level l-1 is at least PS; 0.8.3 when level l itself is).
- MPS (no border padding): zeros padding with the grid clamped to the outermost pixel centres
  ``+-(1 - 1/size)``; clamping to ``+-1`` would blend half a pixel of zeros into the border.
Integer images go to the original unchanged (it raises, as before). So do inputs whose outcome
is the release's and not the half bug's (bad ranks, empty batches, PS < 1, fewer images than LAF
batches, ``meta`` tensors, a pyramid with PS <= 2), widened as above: where the release raises,
the same exception type; where it works, its result. Float32 inputs also go to the original while
the user's float32 matmul precision is not "highest" (eager and jit.trace; see
``_float32_matmul_rounds_by_shape``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .. import _probe_cache as probe_cache
from .._model import Finding, Fix, Target, bug_present, not_needed, unsupported
from .._precision import autocast_off, leave_autocast
from .._torch_compat import is_compiling
from ..sample_inputs import laf_inputs

PATCH_PARAMETERS = ("img", "laf", "PS", "normalize_lafs_before_extraction")

# Pyramid level rules of the installed releases (see _pyramid_level_rule).
LEVEL_WHILE_PREVIOUS_FITS = 0  # <= 0.8.2: level l exists when level l-1 has min side >= PS
LEVEL_WHILE_CURRENT_FITS = 1  # 0.8.3: level l exists when level l itself has min side >= PS


# --------------------------------------------------------------------------------------------
# Shared helpers (TorchScript-compatible: extract_patches_simple is scriptable on every release)


def _at_most_float32(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 or dtype == torch.float16 or dtype == torch.bfloat16


def _sampling_dtype(image_dtype: torch.dtype, laf_dtype: torch.dtype) -> torch.dtype:
    # A float32 LAF keeps its sub-pixel precision on a half image; a half LAF (autocast
    # detector) is accepted with a float32 image; half sampling is never used.
    # The floating pairs are answered by comparisons alone: dynamo before torch 2.4 cannot put
    # torch.promote_types (a dtype, not a tensor) in a graph, and fullgraph compilation of the
    # release's float32 path must keep working.
    if _at_most_float32(image_dtype) and _at_most_float32(laf_dtype):
        return torch.float32
    if image_dtype == torch.float64 and (laf_dtype == torch.float64 or _at_most_float32(laf_dtype)):
        return torch.float64
    if laf_dtype == torch.float64 and _at_most_float32(image_dtype):
        return torch.float64
    dtype = torch.promote_types(image_dtype, laf_dtype)
    if dtype == torch.float16 or dtype == torch.bfloat16:
        return torch.float32
    return dtype


def _element_size(dtype: torch.dtype) -> int:
    if dtype == torch.float64:
        return 8
    return 4


def _lafs_per_chunk(B: int, N: int, ch: int, PS: int, element_size: int, budget: int = 64 * 1024 * 1024) -> int:
    # The folded grid holds 2 values per sample, the sampled patches CH: the larger of the two,
    # per LAF, must fit the workspace budget. (A default argument: TorchScript cannot read
    # module-level ints. Tests replace this function to force small chunks.)
    per_laf = B * PS * PS * max(2, ch) * element_size
    return min(N, max(1, budget // per_laf))


def _release_decides(img: torch.Tensor, laf: torch.Tensor, PS: int, pyramid: bool) -> bool:
    """Inputs whose outcome is the release's own and has nothing to do with the half bug: bad
    ranks, empty batches, PS < 1, fewer images than LAF batches (the release raises, each its own
    exception type: unpacking ValueError, ZeroDivisionError, RuntimeError from cat/expand),
    ``meta`` tensors (0.8.3's pyramid works on them, 0.8.2's raises on ``.item()``) and a pyramid
    with PS <= 2 (the release runs pyrdown on levels of <= 2 px, whose reflect padding raises,
    unless the level sizes happen to skip it). Shape checks only: no data-dependent branch."""
    if img.dim() != 4 or laf.dim() != 4 or PS < 1 or img.device.type == "meta":
        return True
    if laf.shape[0] == 0 or laf.shape[1] == 0 or img.shape[0] < laf.shape[0]:
        return True
    return pyramid and PS <= 2


def _non_finite_frames(laf: torch.Tensor) -> torch.Tensor:
    """(B, N) mask of frames with a NaN or Inf in any of their six entries."""
    return ~torch.isfinite(laf).all(dim=-1).all(dim=-1)


def _clamp_to_pixel_centres(grid: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Clamp a normalized (x, y) grid to the outermost pixel centres (align_corners=False).

    With zeros padding this reproduces ``padding_mode="border"``: the centre of the last pixel
    of an axis of ``size`` pixels sits at ``1 - 1/size``, its outer edge at 1.
    """
    x = grid[..., 0].clamp(-1.0 + 1.0 / float(w), 1.0 - 1.0 / float(w))
    y = grid[..., 1].clamp(-1.0 + 1.0 / float(h), 1.0 - 1.0 / float(h))
    return torch.stack([x, y], dim=-1)


def _grid_from_pixel_lafs(laf_px: torch.Tensor, h: int, w: int, PS: int) -> torch.Tensor:
    """(B, n, PS, PS, 2) sampling grids of LAFs in pixels, the release's arithmetic exactly.

    ``generate_patch_grid_from_normalized_LAF`` renormalizes with ``2 * g / (size - 1) - 1`` per
    axis on strided clones; the same three separately rounded ops run here in place on the whole
    contiguous grid (same values bit for bit, half the time).
    """
    B, n = laf_px.shape[0], laf_px.shape[1]
    grid = F.affine_grid(laf_px.reshape(B * n, 2, 3), [B * n, 1, PS, PS], align_corners=False)
    sizes = torch.tensor([float(w - 1), float(h - 1)], dtype=grid.dtype, device=grid.device)
    return grid.mul_(2.0).div_(sizes).sub_(1.0).view(B, n, PS, PS, 2)


def _sample_folded(img: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Sample (B, n, PS, PS, 2) grids from (B, CH, H, W) images with ONE grid_sample.

    The n patch grids of an image are stacked along the output height, so the call covers the
    whole batch without a loop or an expanded (B*n, CH, H, W) input. Returns a (B, n, CH, PS, PS)
    permuted view; assigning it makes the one copy.
    """
    B, n, PS = grid.shape[0], grid.shape[1], grid.shape[2]
    ch, h, w = img.shape[1], img.shape[2], img.shape[3]
    folded = grid.reshape(B, n * PS, PS, 2)
    if img.device.type == "mps":
        sampled = F.grid_sample(
            img, _clamp_to_pixel_centres(folded, h, w), mode="bilinear", padding_mode="zeros", align_corners=False
        )
    else:
        sampled = F.grid_sample(img, folded, mode="bilinear", padding_mode="border", align_corners=False)
    return sampled.view(B, ch, n, PS, PS).permute(0, 2, 1, 3, 4)


@torch.jit.ignore
def _float32_matmul_rounds_by_shape() -> bool:
    """True when float32 matmuls may run on TF32/bfloat16 internals (the user's
    ``torch.set_float32_matmul_precision("high"/"medium")``). ``affine_grid`` is a batched matmul
    whose reduced-precision kernel is chosen by shape, so the folded call would round the
    sampling grid differently from the release's per-image calls (up to 0.073 in a patch,
    measured on 0.8.2): float32 inputs then go to the release itself, which is bitwise itself.
    Not under torch.compile: dynamo cannot read the setting without a graph break (and
    inductor rounds float32 its own way anyway)."""
    if is_compiling():
        return False
    return torch.get_float32_matmul_precision() != "highest"


def _is_static_graph_mode() -> bool:
    """True under torch.compile/export and jit.trace: no data-dependent shapes allowed there."""
    if torch.jit.is_tracing():
        return True
    return bool(is_compiling())


def _release_path(original: Any) -> Any:
    """The calls the installed release answers itself; returns None when the fix samples.

    A closure over `original` rather than a parameter: TorchScript cannot take a function value
    as an argument, but it compiles closures that call closures (closed-over bools it refuses,
    hence `pyramid` as an argument)."""

    def release_path(
        img: torch.Tensor, laf: torch.Tensor, PS: int, normalize_lafs_before_extraction: bool, pyramid: bool
    ) -> Optional[torch.Tensor]:
        if not img.is_floating_point():
            return original(img, laf, PS, normalize_lafs_before_extraction)
        if _release_decides(img, laf, PS, pyramid):
            # The release's outcome on inputs widened as below (a half result narrowed once).
            dtype = _sampling_dtype(img.dtype, laf.dtype)
            return original(img.to(dtype), laf.to(dtype), PS, normalize_lafs_before_extraction).to(img.dtype)
        if not torch.jit.is_scripting():
            if _sampling_dtype(img.dtype, laf.dtype) == torch.float32 and img.dtype == torch.float32:
                if _float32_matmul_rounds_by_shape():
                    return original(img, laf, PS, normalize_lafs_before_extraction)
        return None

    return release_path


# --------------------------------------------------------------------------------------------
# extract_patches_simple


def build_extract_patches_simple(original: Any) -> Any:
    helpers = original.__globals__
    check_laf = helpers["KORNIA_CHECK_LAF"]
    normalize_laf = helpers["normalize_laf"]
    denormalize_laf = helpers["denormalize_laf"]
    release_path = _release_path(original)

    def extract_patches_simple(
        img: torch.Tensor, laf: torch.Tensor, PS: int = 32, normalize_lafs_before_extraction: bool = True
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if leave_autocast(img):
                # Under autocast the grids' products would be half
                # (sampling positions off by half rounding): the same extraction with autocast off.
                with autocast_off(img.device.type):
                    return extract_patches_simple(img, laf, PS, normalize_lafs_before_extraction)
        answered = release_path(img, laf, PS, normalize_lafs_before_extraction, False)
        if answered is not None:
            return answered
        check_laf(laf)
        B, N = laf.shape[0], laf.shape[1]
        if img.shape[0] != B:
            img = img[:B]  # the release samples image i for LAF batch i and ignores the rest
        ch, h, w = img.shape[1], img.shape[2], img.shape[3]
        dtype = _sampling_dtype(img.dtype, laf.dtype)
        laf = laf.to(device=img.device, dtype=dtype)
        nlaf = normalize_laf(laf, img) if normalize_lafs_before_extraction else laf
        invalid = _non_finite_frames(nlaf)
        nlaf = nlaf.masked_fill(invalid.view(B, N, 1, 1), 0.0)
        laf_px = denormalize_laf(nlaf, img)  # the release's own denormalization
        sample_img = img.to(dtype)  # once, before the chunk loop
        out = torch.empty(B, N, ch, PS, PS, dtype=img.dtype, device=img.device)
        chunk = _lafs_per_chunk(B, N, ch, PS, _element_size(dtype))
        for start in range(0, N, chunk):
            stop = min(start + chunk, N)
            grid = _grid_from_pixel_lafs(laf_px[:, start:stop], h, w, PS)
            out[:, start:stop] = _sample_folded(sample_img, grid)
        return out.masked_fill_(invalid.view(B, N, 1, 1, 1), 0.0)

    return extract_patches_simple


# --------------------------------------------------------------------------------------------
# extract_patches_from_pyramid


def _pyramid_levels(img: torch.Tensor, top: int, PS: int, rule: int, pyrdown: Any) -> List[torch.Tensor]:
    """Levels 0..top of the pyramid that the installed release actually samples."""
    levels = [img]
    current = img
    for _ in range(top):
        if rule == LEVEL_WHILE_PREVIOUS_FITS and min(current.shape[2], current.shape[3]) < PS:
            break
        current = pyrdown(current)
        if rule == LEVEL_WHILE_CURRENT_FITS and min(current.shape[2], current.shape[3]) < PS:
            break
        levels.append(current)
    return levels


def _sample_levels_gathered(
    levels: List[torch.Tensor], lafs_px: List[torch.Tensor], level: torch.Tensor, PS: int, out_dtype: torch.dtype
) -> torch.Tensor:
    """Eager: per level, gather that level's LAFs (padded to the busiest image) into one folded call.

    ``lafs_px[l]`` are all LAFs in level l's pixels; ``level`` (B, N) is each LAF's level, -1 for none.
    """
    B, N = level.shape[0], level.shape[1]
    ch = levels[0].shape[1]
    device = level.device
    # One spare row absorbs the padding slots of images with fewer LAFs at a level.
    out = torch.zeros(B * N + 1, ch, PS, PS, dtype=out_dtype, device=device)
    image_offset = (torch.arange(B, device=device) * N).view(B, 1)
    for index, level_img in enumerate(levels):
        selected = level == index
        counts = selected.sum(dim=1)
        busiest = int(counts.max())
        if busiest == 0:
            continue
        sample_img = level_img[:B]
        h, w = level_img.shape[2], level_img.shape[3]
        if busiest == N and bool(counts.min() == N):
            order = torch.arange(N, device=device).expand(B, N)
            target = order + image_offset
            level_lafs = lafs_px[index]
        else:
            # A stable sort puts the selected LAFs first, in their original order.
            order = torch.argsort((~selected).to(torch.uint8), dim=1, stable=True)[:, :busiest]
            in_use = torch.arange(busiest, device=device).view(1, busiest) < counts.view(B, 1)
            target = torch.where(in_use, order + image_offset, torch.full_like(order, B * N))
            level_lafs = lafs_px[index].gather(1, order.view(B, busiest, 1, 1).expand(B, busiest, 2, 3))
        chunk = _lafs_per_chunk(B, busiest, ch, PS, _element_size(level_lafs.dtype))
        for start in range(0, busiest, chunk):
            stop = min(start + chunk, busiest)
            grid = _grid_from_pixel_lafs(level_lafs[:, start:stop], h, w, PS)
            out.index_put_((target[:, start:stop],), _sample_folded(sample_img, grid).to(out_dtype))
    return out[: B * N].view(B, N, ch, PS, PS)


def _sample_levels_static(
    levels: List[torch.Tensor], lafs_px: List[torch.Tensor], level: torch.Tensor, PS: int, out_dtype: torch.dtype
) -> torch.Tensor:
    """torch.compile / jit.trace: every level samples all LAFs and keeps those at that level."""
    B, N = level.shape[0], level.shape[1]
    ch = levels[0].shape[1]
    out = torch.zeros(B, N, ch, PS, PS, dtype=out_dtype, device=level.device)
    chunk = _lafs_per_chunk(B, N, ch, PS, _element_size(lafs_px[0].dtype))
    for index, level_img in enumerate(levels):
        sample_img = level_img[:B]
        h, w = level_img.shape[2], level_img.shape[3]
        for start in range(0, N, chunk):
            stop = min(start + chunk, N)
            grid = _grid_from_pixel_lafs(lafs_px[index][:, start:stop], h, w, PS)
            here = (level[:, start:stop] == index).view(B, stop - start, 1, 1, 1)
            out[:, start:stop] = torch.where(here, _sample_folded(sample_img, grid), out[:, start:stop])
    return out


def build_extract_patches_from_pyramid(original: Any) -> Any:
    helpers = original.__globals__
    check_laf = helpers["KORNIA_CHECK_LAF"]
    normalize_laf = helpers["normalize_laf"]
    denormalize_laf = helpers["denormalize_laf"]
    get_laf_scale = helpers["get_laf_scale"]
    pyrdown = helpers["pyrdown"]
    rule = _pyramid_level_rule(original)
    if rule is None:
        raise RuntimeError("extract_patches_from_pyramid chooses pyramid levels in an unknown way")
    release_path = _release_path(original)

    def extract_patches_from_pyramid(
        img: torch.Tensor, laf: torch.Tensor, PS: int = 32, normalize_lafs_before_extraction: bool = True
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if leave_autocast(img):
                # Under autocast the grids' products and the pyramid's blurs would be half
                # (sampling positions off by half rounding): the same extraction with autocast off.
                with autocast_off(img.device.type):
                    return extract_patches_from_pyramid(img, laf, PS, normalize_lafs_before_extraction)
        answered = release_path(img, laf, PS, normalize_lafs_before_extraction, True)
        if answered is not None:
            return answered
        check_laf(laf)
        B, N = laf.shape[0], laf.shape[1]
        h, w = img.shape[2], img.shape[3]
        dtype = _sampling_dtype(img.dtype, laf.dtype)
        laf = laf.to(device=img.device, dtype=dtype)
        nlaf = normalize_laf(laf, img) if normalize_lafs_before_extraction else laf
        invalid = _non_finite_frames(nlaf)
        nlaf = nlaf.masked_fill(invalid.view(B, N, 1, 1), 0.0)
        # The release's level choice, on the same values; non-finite frames get no level.
        laf_px = denormalize_laf(nlaf, img)
        scale = 2.0 * get_laf_scale(laf_px) / float(PS)
        max_level = min(h, w) // PS
        top = max(0, max_level - 1)
        level = scale.log2().clamp(min=0.0, max=top).long().view(B, N).masked_fill(invalid, -1)
        static = _is_static_graph_mode()
        if not static:  # eager: build no level coarser than the coarsest one a LAF asks for
            top = min(top, max(0, int(level.max())))
        levels = _pyramid_levels(img.to(dtype), top, PS, rule, pyrdown)
        # Each level's grid comes from the LAFs in that level's pixels, as in the release.
        lafs_px = [laf_px] + [denormalize_laf(nlaf, level_img) for level_img in levels[1:]]
        if static:
            return _sample_levels_static(levels, lafs_px, level, PS, img.dtype)
        return _sample_levels_gathered(levels, lafs_px, level, PS, img.dtype)

    return extract_patches_from_pyramid


# --------------------------------------------------------------------------------------------
# Probes


_LEVEL_RULES: Dict[Any, Optional[int]] = {}


def _pyramid_level_rule(pyramid: Any) -> Optional[int]:
    # Probed once per original per process: apply() runs after every unpatched() block.
    if pyramid not in _LEVEL_RULES:
        _LEVEL_RULES[pyramid] = probe_cache.remembered(
            "feature_patches:pyramid_level_rule", lambda: _probe_pyramid_level_rule(pyramid), _same, _known_level_rule,
            originals=(pyramid,),
        )
    return _LEVEL_RULES[pyramid]


def _same(value: Any) -> Any:
    return value


def _known_level_rule(stored: Any) -> Optional[int]:
    if stored not in (None, LEVEL_WHILE_PREVIOUS_FITS, LEVEL_WHILE_CURRENT_FITS):
        raise ValueError(stored)
    return stored


def _probe_pyramid_level_rule(pyramid: Any) -> Optional[int]:
    """Which pyramid levels the release samples, read off its behaviour.

    100x100 ones image, PS=16: levels are 100, 50, 25, 12, 6. A LAF of scale 80 wants level 3
    (12 px): <= 0.8.2 samples it (level 2 is 25 >= 16), 0.8.3 does not (12 < 16) and returns
    zeros. A LAF of scale 150 wants level 4, which neither samples.
    """
    img = torch.ones(1, 1, 100, 100)
    laf = torch.tensor([[[[80.0, 0.0, 50.0], [0.0, 80.0, 50.0]], [[150.0, 0.0, 50.0], [0.0, 150.0, 50.0]]]])
    try:
        patches = pyramid(img, laf, 16, True)
    except Exception:  # noqa: BLE001 - an unknown release: do not patch
        return None
    level3, level4 = patches[0, 0], patches[0, 1]
    if not bool((level4 == 0).all()):
        return None
    if bool(((level3 - 1.0).abs() < 1e-3).all()):
        return LEVEL_WHILE_PREVIOUS_FITS
    if bool((level3 == 0).all()):
        return LEVEL_WHILE_CURRENT_FITS
    return None


def probe(originals: Sequence[Any]) -> Finding:
    simple, pyramid = originals[0], originals[1]
    if _pyramid_level_rule(pyramid) is None:
        return unsupported("extract_patches_from_pyramid chooses pyramid levels in an unknown way")
    img, laf = laf_inputs(H=40, W=36)
    for original, build in ((simple, build_extract_patches_simple), (pyramid, build_extract_patches_from_pyramid)):
        for PS in (5, 8):
            if not torch.equal(build(original)(img, laf, PS, True), original(img, laf, PS, True)):
                return unsupported(
                    f"{original.__name__} computes float32 patches differently from the code replicated here"
                )
    try:
        simple(img.half(), laf, 8, True)
    except RuntimeError:
        return bug_present()
    return not_needed("extract_patches_simple already samples half images with a float32 LAF")


FIX = Fix(
    name="feature_patches",
    targets=(
        Target(("kornia.feature.laf:extract_patches_simple",), build_extract_patches_simple, PATCH_PARAMETERS,
               reason="sampling in promote_types(img, laf) with half promoted to float32, one folded grid_sample "
               "per 64 MiB chunk, zero patches for non-finite LAFs"),
        Target(("kornia.feature.laf:extract_patches_from_pyramid",), build_extract_patches_from_pyramid,
               PATCH_PARAMETERS, reason="as extract_patches_simple, per pyramid level"),
    ),
    probe=probe,
    demonstration="kornia_halfpatch.demos.feature_patches:demonstrate",
)
