"""Cheaper float32 evaluations of promoted functions, for half images at real sizes (issue 35,
docs/half_at_scale.md).

A promoted row (``Promote(..., evaluate="module:function")``) computes a half call as the
release's float32 function on the widened input, narrowed once. Done whole, that keeps a float32
copy of the image and every float32 temporary of the release's code alive at once: at
4x3x1024x1024 ``rgb_to_hsv`` takes 2.7x kornia 0.9.0's half memory and 6x its time. The
evaluations here compute the same float32 operations per element, tile by tile of a bounded
float32 workspace, and narrow each tile straight into the half output, so the result is the
release's float32 result narrowed, bit for bit, in a fraction of the memory.

Each evaluation is called as ``f(original, dtype, *arguments)`` for half inputs in eager mode
(never under autocast, TorchScript or ``torch.compile``) and returns None where it does not take
the arguments (a gradient is wanted: the release's own float32 graph gives it; an unusual shape),
which leaves the call to the widened original.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

from .._codegen import cheaper_evaluation
from .._precision import CHANNELS_LAST_PLANES
from .._torch_compat import is_compiling

# Pixels per tile: 3 channels x 2^17 pixels of float32 is 1.5 MiB and a temporary 512 KiB, so a
# tile's temporaries stay in cache (rgb_to_hsv on 4x3x1024x1024: 2^14 0.088 s, 2^16 0.045 s,
# 2^17 0.042 s, 2^20 0.063 s, measured on 2 threads).
TILE_PIXELS = 1 << 17


def _wants_gradient(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def rgb_to_hsv(original: Any, dtype: torch.dtype, image: Any, eps: float = 1e-8) -> Optional[torch.Tensor]:
    """kornia's ``rgb_to_hsv`` (the same in 0.7.0-0.8.3), tile by tile of pixels.

    Per pixel the release computes max/argmax and min over the three channels, the chroma, the
    saturation ``chroma / (max + eps)``, three hue numerators, all three divided by the chroma
    (zero chroma replaced by 1), the one of the argmax gathered, then ``(h / 6) % 1`` and
    ``2 pi h``. Here the same float32 operations run on the same values, the gathered numerator
    chosen before the division (the same quotient), so every element is the release's float32
    value; then narrowed into the half output. The channel max and min are elementwise
    (``torch.maximum``: exact, as the reduction) and the argmax the first maximal channel, as
    ``torch.max`` returns it; a tile holding NaN takes the release's reductions."""
    if not isinstance(image, torch.Tensor) or image.dim() < 3 or image.shape[-3] != 3 or _wants_gradient(image):
        return None
    if not isinstance(eps, float) or image.numel() == 0:
        return None
    shape = image.shape
    pixels = shape[-2] * shape[-1]
    source = image.reshape(-1, 3, pixels)
    out = torch.empty(source.shape, dtype=dtype, device=image.device)
    two_pi = 2.0 * math.pi
    for n in range(source.shape[0]):
        for start in range(0, pixels, TILE_PIXELS):
            stop = min(start + TILE_PIXELS, pixels)
            tile = source[n, :, start:stop].float()
            red, green, blue = tile[0], tile[1], tile[2]
            # The same values, elementwise (a reduction over 3 channels is half the time); the
            # argmax as torch.max gives it, the first maximal channel. torch.maximum propagates
            # NaN, so a pixel with NaN in any channel shows in the maximum.
            max_rgb = torch.maximum(torch.maximum(red, green), blue)
            if torch.isnan(max_rgb).any():
                # max/min over channels propagate NaN with its index: the release's reductions.
                max_rgb, argmax_rgb = tile.max(-2)
                min_rgb, _ = tile.min(-2)
                is_red, is_green = argmax_rgb == 0, argmax_rgb == 1
            else:
                min_rgb = torch.minimum(torch.minimum(red, green), blue)
                is_red = red == max_rgb
                # Red is chosen first below: green's test need not exclude it.
                is_green = green == max_rgb
            deltac = max_rgb - min_rgb
            v = max_rgb
            s = deltac / (max_rgb + eps)
            deltac.masked_fill_(deltac == 0, 1.0)  # the release's where(deltac == 0, 1, deltac)
            rc, gc, bc = max_rgb - red, max_rgb - green, max_rgb - blue
            numerator = torch.where(is_red, bc - gc, torch.where(is_green, (rc - bc) + 2.0 * deltac, (gc - rc) + 4.0 * deltac))
            # The release's h / deltac, (h / 6) % 1 and 2 pi h, in place (the same roundings).
            h = numerator.div_(deltac).div_(6.0).remainder_(1.0).mul_(two_pi)
            out[n, 0, start:stop] = h
            out[n, 1, start:stop] = s
            out[n, 2, start:stop] = v
    return out.view(shape)


def _image(value: Any, index: int, batch: int, count: int = 1) -> Any:
    """An argument for images ``index`` to ``index + count`` alone: a tensor of the batch's size
    sliced to them; anything else (a tensor of batch 1, a number) as given. Not widened yet: a band
    of it may be."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value[index : index + count]
    return value


def images_per_call() -> int:
    """Images per float32 call of a warp's evaluation: as many as torch has threads. torch's CPU
    ``grid_sample`` shares its work among threads by image: one image at a time on 2 threads took
    4x3x2048x2048 ``rotate`` 0.86 s against the whole batch's 0.52 s (AVX2, measured), two at a
    time keeps both threads busy with half the batch's float32 workspace. (A histogram
    equalisation gains nothing from it and holds more: one image per call.)"""
    return max(1, torch.get_num_threads())


def _widened(value: Any, channels_last: bool = False) -> Any:
    if not isinstance(value, torch.Tensor) or value.dtype not in (torch.float16, torch.bfloat16):
        return value
    if channels_last and value.dim() == 4:
        return value.to(torch.float32, memory_format=torch.channels_last)
    return value.float()


def _rows(value: Any, plane: Any, start: int, stop: int) -> Any:
    """A tensor of the image's own plane (the image, SSIM's second image) cut to rows
    ``start:stop``; anything else as given."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[-2:] == plane:
        return value[..., start:stop, :]
    return value


# Pixels per band of a large image: a float32 band of 3 channels is 12 MiB, so the release's
# dozen band-sized temporaries stay far below the half image itself (1x3x4096x4096: 96 MiB).
BAND_PIXELS = 1 << 20
# Rows per band at most: a 1024x1024 image in two bands of 512 rows halves the float32 workspace
# and keeps it in cache (4x3x1024x1024 float16 on AVX2: gaussian_blur2d 0.134 -> 0.088 s, box_blur
# 79 -> 67 MiB; 0.9.0 74 MiB); bands of 256 rows of a 2048-wide image cost more halo than they
# save (ssim 1.95 -> 2.97 s, measured), so wider images keep BAND_PIXELS per band.
BAND_ROWS = 512


def _bands(height: int, width: int, reach: Optional[int]) -> list:
    """(start, stop) rows of the output bands of one image, or one band when the image is small
    or the filter's reach is unknown. Each band's input takes ``reach`` more rows on each side
    (a halo), so every kept output row sees exactly the input rows the whole image gives it."""
    if reach is None:
        return [(0, height)]
    kept = max(min(BAND_PIXELS // max(width, 1), BAND_ROWS), 4 * reach)
    if kept + 2 * reach >= height:
        return [(0, height)]
    return [(start, min(start + kept, height)) for start in range(0, height, kept)]


def _each_image(original: Any, dtype: torch.dtype, arguments: tuple, keywords: dict,
                reach: Optional[int] = None, count: int = 1, whole: bool = False,
                channels_last: bool = False, widen: Callable[[Any, bool], Any] = _widened) -> Optional[torch.Tensor]:
    image = arguments[0] if arguments else None
    if not isinstance(image, torch.Tensor) or image.dim() < 4 or image.numel() == 0:
        return None
    tensors = [v for v in list(arguments) + list(keywords.values()) if isinstance(v, torch.Tensor)]
    if _wants_gradient(*tensors):
        return None
    batch, plane = image.shape[0], tuple(image.shape[-2:])
    bands = _bands(plane[0], plane[1], reach)
    if batch <= count and len(bands) == 1 and not whole:
        return None  # nothing to split: the widened original
    out: Optional[torch.Tensor] = None
    previous: Optional[torch.Tensor] = None
    for index in range(0, batch, count):
        images = min(count, batch - index)
        own_arguments = [_image(a, index, batch, images) for a in arguments]
        own_keywords = {k: _image(v, index, batch, images) for k, v in keywords.items()}
        for start, stop in bands:
            first, last = max(start - (reach or 0), 0), min(stop + (reach or 0), plane[0])
            result = original(*(widen(_rows(a, plane, first, last), channels_last) for a in own_arguments),
                              **{k: widen(_rows(v, plane, first, last), channels_last) for k, v in own_keywords.items()})
            if not isinstance(result, torch.Tensor) or result.dim() < 2 or result.shape[0] != images:
                return None  # not a per-image result after all: the widened original decides
            if len(bands) > 1 and result.shape[-2] != last - first:
                return None  # not row for row (a valid-padded map): the widened original decides
            if out is None:
                size = plane[0] if len(bands) > 1 else result.shape[-2]
                out = torch.empty((batch,) + tuple(result.shape[1:-2]) + (size, result.shape[-1]), dtype=dtype,
                                  device=result.device)
            if len(bands) == 1:
                out[index : index + images] = result
            else:
                out[index : index + images, ..., start:stop, :] = result[..., start - first : stop - first, :]
            if channels_last and len(bands) > 1:
                # The next band's float32 planes reuse the heap this band's temporaries leave
                # when its result, allocated last, stays above them until then: glibc then has no
                # free top to trim and map again, page by page, per band (4x3x1024x1024 ssim:
                # 390K -> 95K page faults, 0.75 -> 0.47 s on AVX2). One result plane more, worth
                # it for the banded calls of two images (a dozen planes each), not for box_blur's
                # NCHW image by image (0.9.0's memory, no time gained: measured).
                previous = result
            del result
    del previous
    return out


# Uses of a float32 copy that read none of its values: its shape, dtype and device.
_METADATA_ONLY = frozenset({torch.Tensor.shape.__get__, torch.Tensor.dtype.__get__, torch.Tensor.device.__get__,
                            torch.Tensor.ndim.__get__, torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel,
                            torch.Tensor.__len__, torch.Tensor.is_floating_point, torch.Tensor.requires_grad.__get__,
                            torch.Tensor.layout.__get__, torch.Tensor.is_cuda.__get__})
# Rows and columns beyond a grid's extreme sample points that a sample may read: bicubic reads
# from one before the point's floor to two after it; one more for the float32 rounding of the
# point's pixel coordinate (torch's unnormalisation may round otherwise than this one).
_SAMPLED_MARGIN = 3


def _sliced_box(args: tuple, entry_shape: Any) -> Optional[tuple]:
    """The (rows, columns) an index of plain slices (``x[..., a:b, c:d]``, steps of 1; integers or
    slices of the leading dimensions) takes from an image of ``entry_shape``; None for any other
    index."""
    if len(args) != 2:
        return None
    index = args[1] if isinstance(args[1], tuple) else (args[1],)
    if index and index[0] is Ellipsis:
        index = (slice(None),) * (len(entry_shape) - len(index) + 1) + tuple(index[1:])
    if len(index) > len(entry_shape):
        return None
    index = tuple(index) + (slice(None),) * (len(entry_shape) - len(index))
    # Leading dimensions may take some images (``x[i : i + 1, :, a:b, c:d]``): the box is filled
    # in every image of the copy, a superset of what the index reads.
    if not all(isinstance(i, slice) and i.step in (None, 1) for i in index[-2:]) or not all(
            (isinstance(i, slice) and i.step in (None, 1)) or (isinstance(i, int) and not isinstance(i, bool))
            for i in index[:-2]):
        return None
    box = []
    for part, size in zip(index[-2:], entry_shape[-2:]):
        try:
            start, stop, _ = part.indices(size)
        except TypeError:  # tensor bounds: not plain
            return None
        box.append((start, max(stop, start)))
    return tuple(box)


class _SeenIndexing(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        self.seen += 1
        return func(*args, **(kwargs or {}))


_modes_see_indexing: list = []


def modes_see_indexing() -> bool:
    """Whether a torch function mode sees every way of indexing a tensor. On torch 2.1 ``x[0]`` and
    ``x[None]`` reach no mode (measured), so a view of a ``SampledSources`` copy could be made
    unseen and read unfilled: there the copies are not used (asked once per process)."""
    if not _modes_see_indexing:
        probe, tensor = _SeenIndexing(), torch.zeros(2, 2)
        ways = (lambda: tensor[0], lambda: tensor[None], lambda: tensor[..., 0], lambda: tensor[0, 1],
                lambda: tensor[:, 0], lambda: tensor[1:])
        try:
            with probe:
                for way in ways:
                    way()
            _modes_see_indexing.append(probe.seen >= len(ways))
        except Exception:  # noqa: BLE001 - a probe that fails says no
            _modes_see_indexing.append(False)
    return _modes_see_indexing[0]


class SampledSources(TorchFunctionMode):
    """The float32 copies of half images a crop's release call samples, filled on demand: each
    copy (``widened``) is allocated unfilled, and at the ``grid_sample`` that reads it only the
    rows and columns its grid can reach (``_SAMPLED_MARGIN`` around its extreme points) are
    widened from the half image, at a slice of its rows and columns (a crop by indices) only that
    box; untouched pages are never faulted in. Any other use of a copy that may read values
    (anything but ``_METADATA_ONLY`` and ``x.to(copy)``), a grid with a non-finite point, or
    reflection padding reaching past the image fills the whole copy first: every value the
    release reads is the widened half value, as in the whole widened call."""

    def __init__(self, image_shape: Any) -> None:
        super().__init__()
        self.image_shape = tuple(image_shape)  # (C, H, W): the image argument's shape per image
        # [the copy (weakly: it lives as long as the release's call holds it), its half image, the
        # (rows, columns) boxes filled]
        self.copies: list = []
        # [a view of a copy (weakly), the half image's same view, the copy's entry, its box]: a
        # crop by indices not read yet
        self.pending: list = []
        self.filled_elements = 0

    def widened(self, value: Any, channels_last: bool) -> Any:
        if (channels_last or not isinstance(value, torch.Tensor) or value.dim() != 4
                or tuple(value.shape[1:]) != self.image_shape or value.dtype not in (torch.float16, torch.bfloat16)
                or not value.is_contiguous() or not modes_see_indexing()):
            return _widened(value, channels_last)
        copy = torch.empty(value.shape, dtype=torch.float32, device=value.device)
        self.copies = [entry for entry in self.copies if entry[0]() is not None]
        self.copies.append([weakref.ref(copy), value, []])
        return copy

    def calling(self, original: Any) -> Callable[..., Any]:
        def within(*arguments: Any, **keywords: Any) -> Any:
            with self:
                return original(*arguments, **keywords)
        return within

    def _entry(self, value: Any) -> Optional[list]:
        for entry in self.copies:
            if entry[0]() is value:
                return entry
        return None

    def _fill(self, entry: list, rows: tuple, columns: tuple) -> None:
        copy, half, boxes = entry[0](), entry[1], entry[2]
        if any(r[0] <= rows[0] and rows[1] <= r[1] and c[0] <= columns[0] and columns[1] <= c[1] for r, c in boxes):
            return
        copy[..., rows[0]:rows[1], columns[0]:columns[1]].copy_(half[..., rows[0]:rows[1], columns[0]:columns[1]])
        boxes.append((rows, columns))
        self.filled_elements += copy.shape[0] * copy.shape[1] * (rows[1] - rows[0]) * (columns[1] - columns[0])

    def _fill_sampled(self, entry: list, bound: dict) -> None:
        height, width = entry[1].shape[-2:]
        grid = bound["grid"]
        whole = ((0, height), (0, width))
        if not isinstance(grid, torch.Tensor) or grid.dim() != 4 or grid.shape[-1] != 2 or grid.numel() == 0:
            return self._fill(entry, *whole)
        align_corners = bool(bound.get("align_corners") or False)
        reaches = []
        for axis, size in ((1, height), (0, width)):
            low, high = (float(v) for v in torch.aminmax(grid[..., axis].float()))
            if not (math.isfinite(low) and math.isfinite(high)):
                return self._fill(entry, *whole)
            if align_corners:
                low, high = (low + 1) / 2 * (size - 1), (high + 1) / 2 * (size - 1)
            else:
                low, high = ((low + 1) * size - 1) / 2, ((high + 1) * size - 1) / 2
            if bound.get("padding_mode", "zeros") == "reflection" and (low < 0 or high > size - 1):
                return self._fill(entry, *whole)
            # Border padding reads the nearest edge pixel of a point outside: the range clamped first.
            low, high = min(max(low, 0.0), size - 1.0), min(max(high, 0.0), size - 1.0)
            reaches.append((max(math.floor(low) - _SAMPLED_MARGIN, 0), min(math.ceil(high) + _SAMPLED_MARGIN + 1, size)))
        self._fill(entry, reaches[0], reaches[1])

    def __exit__(self, *exc_info: Any) -> Any:
        # A crop's view that leaves the release's call unread (a crop of the output's size
        # returned as it is) is read by the caller, after the mode: its box is filled now.
        left, self.pending = self.pending, []
        result = super().__exit__(*exc_info)
        for view in left:
            if view[0]() is not None:
                self._fill(view[2], *view[3])
        return result

    def _pending_view(self, value: Any) -> Optional[list]:
        for pending in self.pending:
            if pending[0]() is value:
                return pending
        return None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if self.copies and func not in _METADATA_ONLY:
            values = list(args) + list(kwargs.values())
            values += [v for value in values if isinstance(value, (list, tuple)) for v in value]
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            self.pending = [pending for pending in self.pending if pending[0]() is not None]
            views = [view for view in (self._pending_view(v) for v in tensors) if view is not None]
            if views and func is _TORCH_INTERPOLATE and args and views[0][0]() is args[0]:
                resized = resized_from_rows_read(func, views[0][1], args, kwargs)
                if resized is not None:
                    return resized
            touched = [entry for entry in (self._entry(v) for v in tensors) if entry is not None]
            box = (_sliced_box(args, entry_shape=touched[0][1].shape)
                   if touched and func is torch.Tensor.__getitem__ else None)
            if box is not None and not views and len(touched) == 1 and args[0] is touched[0][0]():
                # A crop by indices: its box is filled when the view is read, unless a resize reads
                # it (``resized_from_rows_read``), which reads the half image's rows.
                view = func(*args, **kwargs)
                self.pending.append([weakref.ref(view), touched[0][1][args[1]], touched[0], box])
                return view
            reads_dtype_only = func is torch.Tensor.to and bool(args) and self._entry(args[0]) is None
            if views or (touched and self.pending and not reads_dtype_only):
                # Read, or perhaps written, otherwise: every view of the copies involved has its box
                # filled and is no longer read from the half image (a write through one view or
                # through the copy would not show in the half image).
                parents = [view[2] for view in views] + touched
                for view in self.pending:
                    if any(view[2] is parent for parent in parents):
                        self._fill(view[2], *view[3])
                self.pending = [view for view in self.pending if all(view[2] is not parent for parent in parents)]
            if touched:
                bound = _bound(func, args, kwargs) if func is _TORCH_GRID_SAMPLE else None
                for entry in touched:
                    if bound is not None and bound.get("input") is entry[0]():
                        self._fill_sampled(entry, bound)
                    elif box is not None and args[0] is entry[0]():
                        self._fill(entry, *box)
                    elif not reads_dtype_only:
                        self._fill(entry, (0, entry[1].shape[-2]), (0, entry[1].shape[-1]))
        return func(*args, **kwargs)


# Input pixels a band of a resize from the rows read widens at most (3 MiB of float32 for three
# channels): fewer bands cost Python calls, larger ones memory.
RESIZE_BAND_PIXELS = 1 << 18


def _linear_taps(size: int, out_size: int) -> tuple:
    """Torch's two source indices and float32 weights per output index of a linear interpolation
    from ``size`` to ``out_size`` with aligned corners (``compute_source_index_and_lambda``: the
    source index ``(size - 1) / (out_size - 1) * i``, one float32 product)."""
    if out_size == size:
        index = torch.arange(size)
        return index, index, torch.ones(size), torch.zeros(size)
    target = torch.arange(out_size, dtype=torch.float32)
    scale = torch.tensor(float(size - 1), dtype=torch.float32) / max(out_size - 1, 1)
    source = scale * target if out_size > 1 else torch.zeros(out_size)
    first = source.floor().to(torch.int64).clamp_max(size - 1)
    second_weight = (source - first.float()).clamp(0, 1)
    return first, first + (first < size - 1).long(), 1 - second_weight, second_weight


def resized_from_rows_read(interpolate: Any, half: torch.Tensor, args: tuple, kwargs: dict) -> Optional[torch.Tensor]:
    """A bilinear ``interpolate`` with aligned corners (RandomResizedCrop's) of a crop's float32
    view, computed from the half crop, band by band of output rows: the input rows a band reads,
    widened; torch's linear interpolation of
    each (its columns' weights and kernel: per element ``a wx0 + b wx1``, as in the bilinear
    kernel); then each output row the two rows' results weighted by torch's float32 row weights
    (``_linear_taps``), as the kernel combines them. The crop's float32 copy is never filled and
    no crop-sized float32 tensor exists (0.9.0 resizes the half crop; without this, 4-5x its
    memory and 6-9x its time for 4x3x2048x2048 RandomResizedCrop). Torch's one pass rounds its
    float32 sums its own way (fused multiply-adds): the float32 values differ in up to a third
    of the elements by float32 roundings, and narrowed by 1 half ulp in 2.9e-5 of the elements
    (float16, 300 random crops; bfloat16 6.9e-6; tested: at most 1 in 10^3). A non-finite value in the output (an inf in the crop)
    gives None: the caller fills the crop and calls torch."""
    bound = _bound(interpolate, args, kwargs)
    if bound is None or bound.get("mode") != "bilinear" or bound.get("scale_factor") is not None:
        return None
    if bound.get("antialias") or bound.get("recompute_scale_factor") not in (None, False):
        return None
    image, size = bound["input"], bound.get("size")
    size = (size, size) if isinstance(size, int) else tuple(size) if isinstance(size, (tuple, list)) else ()
    if (len(size) != 2 or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in size)
            or image.dim() != 4 or (image is not half and image.dtype != torch.float32) or half.shape != image.shape
            or half.numel() == 0 or _wants_gradient(image)):
        return None
    align_corners = bound.get("align_corners")
    if align_corners is not True:
        # Without aligned corners torch's source index is ``scale (i + 0.5) - 0.5``, which its
        # CPU kernels fuse or not by instruction set: weights ~20 float32 ulps apart (measured).
        return None
    width = half.shape[-1]
    first, second, first_weight, second_weight = (
        t.to(half.device) for t in _linear_taps(half.shape[-2], size[0]))
    resized = torch.empty(half.shape[:-2] + size, dtype=torch.float32, device=half.device)
    rows_an_output_row = max(1.0, half.shape[-2] / size[0])
    band = max(1, int(RESIZE_BAND_PIXELS / (width * rows_an_output_row)))
    for start in range(0, size[0], band):
        stop = min(start + band, size[0])
        low, high = int(first[start]), int(second[stop - 1]) + 1  # rows read by this band, in order
        widened = half[..., low:high, :].float()
        along = interpolate(widened.reshape(1, -1, width), size=size[1], mode="linear", align_corners=align_corners)
        along = along.reshape(widened.shape[:-1] + (size[1],))
        upper = along.index_select(-2, first[start:stop] - low)
        upper.mul_(first_weight[start:stop, None])
        lower = along.index_select(-2, second[start:stop] - low)
        lower.mul_(second_weight[start:stop, None])
        torch.add(upper, lower, out=resized[..., start:stop, :])
        del widened, along, upper, lower
    # A sum of at most 2^30 values below 2^16 is finite unless one of them is not.
    if not math.isfinite(float(resized.sum())):
        return None
    return resized


# Pixels of one channel of a crop that ``HalfCropsResizedInFloat32`` widens whole (4 MiB of
# float32): the float32 output of one plane and this are its workspace.
RESIZED_PLANE_PIXELS = 1 << 20


class HalfCropsResizedInFloat32(TorchFunctionMode):
    """Around the release's forward on a half batch that crops by indices and resizes
    (``RandomResizedCrop``, where the half dtype takes the float32 path): each ``interpolate`` of a
    half crop is the float32 call's, narrowed once as the release's float32 output is. The crop by
    indices only copies values, so everything else the forward computes is the float32 call's on
    the same values. The interpolation goes one channel plane at a time: the plane widened
    (contiguous) and torch's float32 kernel, which computes each plane alone by the same
    arithmetic whatever the layout (measured bitwise against the float32 call's strided view of
    its widened image: bilinear, bicubic, nearest and area, aligned corners or not, 300 random
    crops, AVX-512, AVX2 and the default instruction set, torch 2.1 and 2.13). A plane above
    ``RESIZED_PLANE_PIXELS`` with aligned bilinear corners is resized from its rows read
    (``resized_from_rows_read``'s bound, as the float32 path): no float32 workspace beyond 4 MiB.
    No float32 copy of the batch exists (4x3x1024x1024 float16: 7-9 ms against 15-20 ms for the
    chunks' float32 forwards, measured). Every other torch call passes through unchanged."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if func is _TORCH_INTERPOLATE:
            bound = _bound(func, args, kwargs)
            crop = bound.get("input") if bound is not None else None
            if isinstance(crop, torch.Tensor) and crop.dtype in (torch.float16, torch.bfloat16) and crop.dim() >= 3:
                if crop.shape[-2] * crop.shape[-1] > RESIZED_PLANE_PIXELS and crop.dim() == 4:
                    resized = resized_from_rows_read(func, crop, args, kwargs)
                    if resized is not None:
                        return resized.to(crop.dtype)
                return _resized_plane_by_plane(func, bound, crop)
        return func(*args, **kwargs)


def _resized_plane_by_plane(interpolate: Any, bound: dict, crop: torch.Tensor) -> torch.Tensor:
    out: Optional[torch.Tensor] = None
    for index in range(crop.shape[0] * crop.shape[1]):
        image, channel = divmod(index, crop.shape[1])
        widened = crop[image : image + 1, channel : channel + 1].float()
        resized = interpolate(**dict(bound, input=widened))
        del widened
        if out is None:
            out = torch.empty(crop.shape[:2] + resized.shape[2:], dtype=crop.dtype, device=crop.device)
        out[image, channel].copy_(resized[0, 0])
        del resized
    if out is None:  # no planes: torch's own answer (and error) for the empty float32 crop
        return interpolate(**dict(bound, input=crop.float())).to(crop.dtype)
    return out


def per_image(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """A function that treats each image of a batch alone (a per-image histogram equalisation):
    the release's float32 function on one widened image at a time, each result narrowed straight
    into the half output. Per image the float32 operations are the release's (tested), and only
    one image's float32 temporaries are alive at once. Every tensor argument of the batch's size
    is sliced with the image."""
    return _each_image(original, dtype, arguments, keywords)


# Output pixels per band of a thin-plate-spline warp: each output point's distances to every
# control point, their r^2 log r kernel and its products with the weights are ~40 float32
# temporaries a point (five control points), so a band of 2^16 pixels holds 10 MiB where one
# 1024x1024 image held 127 MiB (0.8.2, measured); whole images one after another also left glibc's
# heap holding 290 MiB of them after four (its mmap threshold rises to a freed temporary's size).
TPS_BAND_PIXELS = 1 << 16


def warp_image_tps_in_bands(original: Any, dtype: torch.dtype, *arguments: Any,
                            **keywords: Any) -> Optional[torch.Tensor]:
    """kornia's ``warp_image_tps`` (the same in 0.7.0-0.8.3: the pixel grid's points warped by
    ``warp_points_tps``, then ``grid_sample``d) band by band of output rows, image by image. Every
    output pixel is sampled from its own grid point, and the grid point's warp computed from it
    alone by the same float32 operations (the release's ``warp_points_tps`` on the band's rows of
    the release's ``create_meshgrid``; tile-invariant, tested), so each band is the whole call's
    rows bit for bit; each narrowed straight into the output. None for anything else."""
    bound = _bound(original, arguments, keywords)
    namespace = getattr(original, "__globals__", {})
    meshgrid, warp_points = namespace.get("create_meshgrid"), namespace.get("warp_points_tps")
    if bound is None or not callable(meshgrid) or not callable(warp_points):
        return None
    image, centers, weights, affine = (bound.get(name) for name in
                                       ("image", "kernel_centers", "kernel_weights", "affine_weights"))
    options = {"align_corners": bound.get("align_corners", False)}
    if "padding_mode" in bound:
        options["padding_mode"] = bound["padding_mode"]
    tensors = (image, centers, weights, affine)
    if (not all(isinstance(t, torch.Tensor) for t in tensors) or image.dim() != 4 or image.numel() == 0
            or any(t.dim() != 3 or t.shape[0] != image.shape[0] for t in tensors[1:])
            or not isinstance(options["align_corners"], bool) or _wants_gradient(*tensors)):
        return None
    batch, _, height, width = image.shape
    rows = max(1, TPS_BAND_PIXELS // max(width, 1))
    if rows >= height and batch == 1:
        return None  # nothing to split: the widened original
    # (1, H, W, 2) as the release makes it for a float32 image (0.7.0 converts after, 0.8 asks for the dtype)
    grid = meshgrid(height, width, device=image.device, dtype=torch.float32)
    out: Optional[torch.Tensor] = None
    previous: Optional[torch.Tensor] = None
    for index in range(batch):
        source = _widened(image[index : index + 1])
        own = [_widened(t[index : index + 1]) for t in tensors[1:]]
        for start in range(0, height, rows):
            stop = min(start + rows, height)
            points = grid[:, start:stop].reshape(1, -1, 2)
            warped = warp_points(points, *own)
            if not isinstance(warped, torch.Tensor) or warped.shape != points.shape:
                return None
            result = torch.nn.functional.grid_sample(source, warped.view(1, stop - start, width, 2), **options)
            if out is None:
                out = torch.empty((batch, result.shape[1], height, width), dtype=dtype, device=result.device)
            out[index : index + 1, :, start:stop] = result
            # kept until the next band's exists: glibc reuses its heap for the next band's temporaries
            previous = result
            del warped, result
    del previous
    return out


# Pixels of one map of a diamond-square step (its doubled map) from which the step goes a few images
# at a time. A step holds about ten float32 maps of its output's size at once (the doubled map, the
# padding compensation, the uniform draw and its scaling, two 3x3 filters and their masks): for the
# last step of a 4x1x1024x1024 plasma, 10 x 16.8 MB, most of RandomPlasmaShadow's float32 memory
# (305-327 MiB, where kornia 0.9.0's half call takes 252-297). Two images a step (torch's two
# threads: one image alone leaves the depthwise filter on one thread, 0.29-0.41 s against the
# whole batch's 0.30-0.41) took 206-217 MiB in 0.27-0.30 s (measured).
DIAMOND_STEP_PIXELS = 1 << 18


def diamond_square_by_images(original: Any, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """kornia's ``diamond_square`` (the plasma augmentations' fractal; the same in 0.7.0-0.8.3)
    with each large recursion step done a few images at a time (``images_per_call``), in float32
    on CPU with the release's ``torch.rand``: the release's own seed and step functions, on each
    image's rows of the map and of its scale. Every map value comes from its own image's values by
    the same float32 operations, and torch's CPU ``rand`` draws element by element, so the images'
    draws one after another are the batch's draw (tested): the map and the random stream are the
    whole call's, bit for bit. None for anything else (the original then runs whole)."""
    bound = _bound(original, arguments, keywords)
    namespace = getattr(original, "__globals__", {})
    seed, step = namespace.get("_diamond_square_seed"), namespace.get("_one_diamond_one_square")
    if bound is None or not callable(seed) or not callable(step):
        return None
    size, roughness, random_scale = bound.get("output_size"), bound.get("roughness"), bound.get("random_scale")
    random_fn, normalize_range = bound.get("random_fn"), bound.get("normalize_range")
    device, dtype = bound.get("device"), bound.get("dtype")
    if (not isinstance(size, (tuple, list)) or len(size) != 4
            or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in size)
            or min(size[-2:]) < 3 or random_fn is not torch.rand or normalize_range is not None
            or dtype != torch.float32 or device is None or torch.device(device).type != "cpu"
            or _wants_gradient(roughness, random_scale)):
        return None
    samples = size[0] * size[1]
    factors = []
    for value in (random_scale, roughness):  # one per map, as the release shapes them
        if isinstance(value, torch.Tensor):
            if value.numel() not in (1, size[0]) or value.dtype != dtype or value.device.type != "cpu":
                return None
            value = value.reshape(-1, 1, 1, 1).expand(size[0], size[1], 1, 1).reshape(-1, 1, 1, 1)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = torch.Tensor([[[[value]]]]).to(device, dtype).expand(samples, 1, 1, 1)
        else:
            return None
        factors.append(value)
    random_scale, roughness = factors
    width, height = size[-2:]
    p2_width = 2 ** math.ceil(math.log2(width - 1)) + 1
    p2_height = 2 ** math.ceil(math.log2(height - 1)) + 1
    depth = int(min(math.log2(p2_width - 1) - 1, math.log2(p2_height - 1) - 1))
    seed_width = (p2_width - 1) // 2**depth + 1
    seed_height = (p2_height - 1) // 2**depth + 1
    fractal = random_scale * seed(samples, seed_width, seed_height, random_fn, device, dtype)
    scale = random_scale
    group = images_per_call()
    for _ in range(depth):
        scale = scale * roughness
        rows, columns = fractal.shape[-2:]
        if samples <= group or (2 * rows - 1) * (2 * columns - 1) < DIAMOND_STEP_PIXELS:
            fractal = step(fractal, scale, random_fn)
            continue
        doubled: Optional[torch.Tensor] = None
        for start in range(0, samples, group):
            part = step(fractal[start : start + group], scale[start : start + group], random_fn)
            if not isinstance(part, torch.Tensor) or part.dim() != 4:
                return None
            if doubled is None:
                doubled = torch.empty((samples,) + part.shape[1:], dtype=part.dtype, device=part.device)
            doubled[start : start + group] = part
            del part
        fractal = doubled
    return fractal[..., :width, :height].view(tuple(size))


def per_thread_images(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """A warp (``warp_affine``, ``warp_perspective``, ``rotate``): as ``per_image``, the matrices
    and angles sliced with their image. A large image is called alone inside ``_LargeWarps``
    (its rows sampled on every thread, an affine grid broadcast where that is torch's grid bit
    for bit, and then built and sampled band by band of output rows: ``_each_image_in_grid_bands``):
    one image's float32 workspace at a time. A small one takes as many images per float32 call
    as torch has threads (``images_per_call``)."""
    return _warp_images(original, dtype, arguments, keywords, sampled_rows=False)


def crop_from_sampled_rows(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """A crop (``center_crop``, ``crop_by_transform_mat``): as ``per_thread_images``, but a large
    image's float32 copy is filled only where its grid samples (``SampledSources``). A crop of
    a quarter of the image otherwise widens it all for that quarter (4x3x2048x2048 center_crop:
    1.6x the release's float32 memory and time)."""
    return _warp_images(original, dtype, arguments, keywords, sampled_rows=True)


CROP_IMAGES = 2


def _warp_images(original: Any, dtype: torch.dtype, arguments: tuple, keywords: dict,
                 sampled_rows: bool) -> Optional[torch.Tensor]:
    image = arguments[0] if arguments else None
    pixels = image.shape[-2] * image.shape[-1] if isinstance(image, torch.Tensor) and image.dim() >= 2 else 0
    warps = large_warps(pixels)
    if isinstance(warps, _LargeWarps):
        widen: Callable[[Any, bool], Any] = _widened
        if sampled_rows and image.dim() == 4:
            sources = SampledSources(image.shape[1:])
            original, widen = sources.calling(original), sources.widened
        if warps.broadcast and image.dim() == 4 and (pixels >= BANDED_WARP_PIXELS or
                                                     whole_images_exceed_float32(image.shape[0], image.shape[1])):
            return _each_image_in_grid_bands(original, dtype, arguments, keywords, widen)
        with warps:
            # A batch with nothing to split (one large image) is called here too, whole, inside the mode.
            return _each_image(original, dtype, arguments, keywords, count=CROP_IMAGES if sampled_rows else 1,
                               whole=True, widen=widen)
    return _each_image(original, dtype, arguments, keywords, count=images_per_call())


# Pixels of an image whose warp is banded whatever the batch: a band's release call costs ~0.5 ms
# of Python, and from 2048x2048 the bands' reused heap saves more (4x3x2048x2048 rotate on
# AVX-512: 0.91-1.06x the release's float32 time in bands, 1.03-1.14x whole; 155K -> 74K page
# faults a call), where at 1024x1024 they cost (rotate 0.067-0.071 s in bands, 0.060-0.068 s whole).
BANDED_WARP_PIXELS = 1 << 22


def whole_images_exceed_float32(batch: int, channels: int) -> bool:
    """Whether warping a batch's images one whole image at a time would hold more than the
    release's float32 call: one image's widened copy, float32 grid and float32 output (2C + 2
    floats a pixel) beside the half output (C halves a pixel an image), against the release's
    float32 grid and output of every image (C + 2 floats a pixel an image). Three channels:
    true for one or two images (1x3x4096x4096 whole: 1.6x the release's memory, measured), false
    from three."""
    return 4 * (2 * channels + 2) + 2 * batch * channels > 4 * batch * (channels + 2)


def _each_image_in_grid_bands(original: Any, dtype: torch.dtype, arguments: tuple, keywords: dict,
                              widen: Callable[[Any, bool], Any] = _widened) -> Optional[torch.Tensor]:
    """A large warp image by image (``warp_in_grid_bands``), each image's matrices and angles
    sliced with it and widened once for all its bands."""
    image = arguments[0] if arguments else None
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.numel() == 0:
        return None
    if _wants_gradient(*(v for v in list(arguments) + list(keywords.values()) if isinstance(v, torch.Tensor))):
        return None
    batch = image.shape[0]

    def images() -> Iterator[Callable[[], Any]]:
        for index in range(batch):
            own_arguments = [widen(_image(a, index, batch), False) for a in arguments]
            own_keywords = {k: widen(_image(v, index, batch), False) for k, v in keywords.items()}
            yield lambda: original(*own_arguments, **own_keywords)

    return warp_in_grid_bands(images(), batch, dtype)


def warp_in_grid_bands(images: Iterator[Callable[[], Any]], batch: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A large warp image by image, ``images`` giving for each image of the batch in turn the
    release's float32 call of it alone, called once per band of output rows inside
    ``_LargeWarps(band_start=...)``: the release's affine grid is answered with the broadcast
    grid's rows of that band alone, so the release samples (and fills) those output rows only,
    from the whole widened image. The matrix normalisation sees the call's own sizes, and each
    grid element is computed alone (``affine_grid_by_broadcast``), so every band is the whole
    call's rows bit for bit; alive at once are the widened image, the half output and one band's
    float32 grid and output (1x3x4096x4096: 0.19 GiB + 0.09 GiB + 8 MiB, where the whole call
    keeps a 128 MiB grid and a 192 MiB output besides). A release that builds no affine grid
    (``warp_perspective``, an augmentation not applied to the image) gives the whole image at the
    first call, taken as it is; one that builds two, or a result not of the band's rows, leaves
    the call to the widened original (None)."""
    out: Optional[torch.Tensor] = None
    previous: Optional[torch.Tensor] = None
    index = -1
    for index, call in enumerate(images):
        if index >= batch:
            return None
        start, height = 0, None
        while height is None or start < height:
            band = _LargeWarps(broadcast=True, band_start=start)
            with band:
                result = call()
            if not isinstance(result, torch.Tensor) or result.dim() < 3 or result.shape[0] != 1:
                return None  # not one image's warp: the widened original decides
            if band.grids == 0:
                stop, rows = result.shape[-2], result.shape[-2]  # no grid to band: the whole image
            elif band.grids == 1 and band.height is not None and band.stop is not None:
                stop, rows = band.stop, band.height
            else:
                return None
            if result.shape[-2] != stop - start or (height is not None and rows != height):
                return None
            height = rows
            if out is None:
                out = torch.empty((batch,) + tuple(result.shape[1:-2]) + (height, result.shape[-1]), dtype=dtype,
                                  device=result.device)
            elif tuple(out.shape[1:-2]) != tuple(result.shape[1:-2]) or out.shape[-2:] != (height, result.shape[-1]):
                return None
            out[index : index + 1, ..., start:stop, :] = result
            # As in _each_image: the band's result, allocated after its grid, kept until the next
            # band's exists, leaves glibc no free heap top to trim and fault in again per band
            # (1x3x4096x4096 rotate float16 on 0.8.2: 190K -> 75K page faults a call, 0.49 ->
            # 0.31 s; one band's output more, 3 MiB).
            previous = result
            del result
            start = stop
    del previous
    return out if index == batch - 1 else None


# The release's histogram equalisation, statement by statement (0.7.0-0.8.3: the same up to quotes
# and annotations). ``equalize_by_value`` computes exactly these float32 operations, on each
# distinct half value instead of each pixel; a release whose text differs keeps ``per_image``.
_EQUALIZE_STATEMENTS = {
    "equalize": ("_scale_channel(image[i, :, :]) for i in range(len(image))",),
    "_scale_channel": (
        "im = im * 255.0",
        "histo = _torch_histc_cast(im, bins=256, min=0, max=255)",
        "nonzero_histo = torch.reshape(histo[histo != 0], [-1])",
        'step = torch.div(torch.sum(nonzero_histo) - nonzero_histo[-1], 255, rounding_mode="trunc")',
        "if step == 0: result = im",
        "result = torch.gather(_build_lut(histo, step), 0, im.flatten().long())",
        "return result / 255.0",
    ),
    "_torch_histc_cast": ("return torch.histc(input.to(dtype), bins, min, max).to(input.dtype)",),
}
_equalize_checked: dict = {}


def _normalised_source(function: Any) -> str:
    return " ".join(inspect.getsource(function).replace("'", '"').split())


def _release_equalize(original: Any) -> Optional[Any]:
    """The release's ``_build_lut`` where its ``equalize`` is the one ``_EQUALIZE_STATEMENTS``
    spells out, else None (checked once per function)."""
    key = getattr(original, "__wrapped__", original)
    if key not in _equalize_checked:
        build_lut = None
        try:
            module = inspect.getmodule(key)
            scale_channel = getattr(module, "_scale_channel")
            functions = {"equalize": key, "_scale_channel": scale_channel,
                         "_torch_histc_cast": scale_channel.__globals__["_torch_histc_cast"]}
            if all(statement in _normalised_source(functions[name])
                   for name, statements in _EQUALIZE_STATEMENTS.items() for statement in statements):
                build_lut = scale_channel.__globals__["_build_lut"]
        except (AttributeError, KeyError, OSError, TypeError):
            build_lut = None
        _equalize_checked[key] = build_lut
    return _equalize_checked[key]


# A plane whose histogram counts pass float32's integer grid (2^24) may be counted otherwise by
# torch.histc than exactly here: such planes keep the release's evaluation.
_EXACT_COUNTS = 1 << 24


def equalize_by_value(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``equalize``: per plane, the release maps each pixel through a function of its value and
    of the plane's 256-bin histogram: ``w = x * 255`` (float32, exact for a half ``x``), then
    ``lut[trunc(w)] / 255`` with the LUT built from the histogram (or ``w / 255`` where the step
    is 0). A half plane has at most 2^16 distinct values, so here the histogram is summed from
    the count of each bit pattern (the same integers: ``torch.histc`` puts every ``w`` of a
    value in one bin, and bins grow with the value, so the bins of the sorted distinct values
    are consecutive runs), the release's own ``_build_lut`` builds the LUT from it, and the
    release's float32 operations run once per distinct value into a table of half results that
    the pixels index. Every pixel is the release's float32 result narrowed, bit for bit (tested,
    with planes holding every half value in [0, 1]). Negative values (but -0.0), values past 1,
    NaN and planes of more than 2^24 pixels are left to ``per_image``: the release raises its
    own errors on them."""
    image = arguments[0] if len(arguments) == 1 and not keywords else None
    if not isinstance(image, torch.Tensor) or image.dim() < 2 or image.numel() == 0 or _wants_gradient(image):
        return per_image(original, dtype, *arguments, **keywords)
    build_lut = _release_equalize(original)
    height, width = image.shape[-2:]
    if build_lut is None or height * width > _EXACT_COUNTS or image.dtype != dtype:
        return per_image(original, dtype, *arguments, **keywords)
    one = int(torch.tensor(1.0, dtype=dtype).view(torch.int16))
    negative_zero = 1 << 15
    # w of every bit pattern from 0 to 1.0, ascending, and of -0.0 last (torch.histc puts it with 0).
    patterns = torch.cat([torch.arange(one + 1, dtype=torch.int16, device=image.device),
                          torch.tensor([-negative_zero], dtype=torch.int16, device=image.device)]).view(dtype)
    scaled = patterns.float() * 255.0
    values_per_bin = torch.histc(scaled[:-1], bins=256, min=0, max=255).long()
    ends = torch.cumsum(values_per_bin, 0)
    starts = ends - values_per_bin
    planes = image.reshape(-1, height * width)
    out = torch.empty(planes.shape, dtype=dtype, device=image.device)
    for plane, result in zip(planes, out):
        index = plane.contiguous().view(torch.int16).to(torch.int32).bitwise_and_(0xFFFF)
        counts = torch.bincount(index, minlength=1 << 16)
        if bool(counts[one + 1 : negative_zero].any()) or bool(counts[negative_zero + 1 :].any()):
            return per_image(original, dtype, *arguments, **keywords)
        cumulative = torch.cat([counts.new_zeros(1), torch.cumsum(counts[: one + 1], 0)])
        histo = (cumulative[ends] - cumulative[starts])
        histo[0] += counts[negative_zero]
        histo = histo.float()
        nonzero_histo = torch.reshape(histo[histo != 0], [-1])
        step = torch.div(torch.sum(nonzero_histo) - nonzero_histo[-1], 255, rounding_mode="trunc")
        if step == 0:
            values = scaled / 255.0
        else:
            values = torch.gather(build_lut(histo, step), 0, scaled.long()) / 255.0
        table = torch.zeros(1 << 16, dtype=dtype, device=image.device)
        table[: one + 1] = values[:-1]
        table[negative_zero] = values[-1]
        torch.index_select(table, 0, index, out=result)
    return out.view(image.shape)


# --------------------------------------------------------------------------------------------
# The affine sampling grid of kornia's warp_affine (and rotate, RandomAffine through it).
#
# torch's CPU ``affine_grid`` writes a (N, H, W, 3) base grid of (x, y, 1) and multiplies it by
# theta^T in a batched matmul of contraction 3: at 2x2048x2048 0.093 s of warp_affine's 0.20 s
# (AVX2, 2 threads), while ``x * t0 + y * t1`` broadcast from a row and a column, then ``+ t2``,
# takes 0.028 s. Per element that is the same three float32 operations, and where torch's matmul
# rounds them in that order (no fused multiply-add) the grids are equal bit for bit; a probe
# checks that once per process against torch's own grid, and only then, inside the shim's float32
# evaluation of a large half warp, does the broadcast grid stand in for torch's. It is reached
# through a torch function mode entered around that evaluation alone (kornia's affine_grid
# global is torch_ops' row already; the mode sees the call torch's affine_grid makes).

_TORCH_AFFINE_GRID = torch.nn.functional.affine_grid


def _neg_one_to_one(steps: int, align_corners: bool, like: torch.Tensor) -> torch.Tensor:
    """torch's ``linspace_from_neg_one``: -1..1 in ``steps``, scaled by (steps - 1) / steps for
    pixel-centre sampling (align_corners=False)."""
    line = torch.linspace(-1, 1, steps, dtype=like.dtype, device=like.device)
    return line if align_corners else line * (steps - 1) / steps


def affine_grid_by_broadcast(theta: torch.Tensor, size: Any, align_corners: bool,
                             rows: Optional[tuple] = None) -> torch.Tensor:
    """``F.affine_grid(theta, size, align_corners)`` for a (N, 2, 3) theta and 4-D ``size``,
    computed as ``(t0 * x + t1 * y) + t2`` per output coordinate; with ``rows=(start, stop)``
    only those rows of it (each element is computed alone: the same values as the whole grid's)."""
    batch, height, width = int(size[0]), int(size[2]), int(size[3])
    start, stop = rows if rows is not None else (0, height)
    xs = _neg_one_to_one(width, align_corners, theta)
    ys = _neg_one_to_one(height, align_corners, theta)[start:stop, None]
    grid = torch.empty((batch, stop - start, width, 2), dtype=theta.dtype, device=theta.device)
    for k in range(2):
        row = theta[:, k, :, None, None]
        coordinate = grid[..., k]
        torch.add(row[:, 0] * xs, row[:, 1] * ys, out=coordinate)
        coordinate += row[:, 2]
    return grid


_broadcast_grid_checked: dict = {}


def broadcast_grid_is_torchs(affine_grid: Any) -> bool:
    """Whether ``affine_grid_by_broadcast`` equals torch's ``affine_grid`` bit for bit on this
    machine (its matmul's rounding): random and warp-like thetas, sizes from a few pixels (torch's
    own small-matmul loop) to a megapixel (the BLAS path), both ``align_corners``. Asked once per
    process; anything unexpected answers no."""
    if affine_grid not in _broadcast_grid_checked:
        answer = False
        try:
            generator = torch.Generator().manual_seed(35)
            with torch.no_grad(), torch.autocast("cpu", enabled=False):
                answer = True
                for batch, height, width in ((2, 5, 7), (3, 37, 53), (2, 130, 257), (1, 512, 1000)):
                    # float32 whatever the default dtype (a half default would compare half grids)
                    angle, shift_x, shift_y = torch.rand(3, batch, generator=generator, dtype=torch.float32)
                    angle = angle * 6.3
                    warp_like = torch.stack([torch.stack([angle.cos(), -angle.sin(), shift_x], -1),
                                             torch.stack([angle.sin(), angle.cos(), -shift_y], -1)], 1)
                    random = torch.randn(batch, 2, 3, generator=generator, dtype=torch.float32)
                    for theta in (random, warp_like):
                        for align_corners in (True, False):
                            size = [batch, 1, height, width]
                            if not torch.equal(affine_grid_by_broadcast(theta, size, align_corners),
                                               affine_grid(theta, size, align_corners=align_corners)):
                                answer = False
        except Exception:  # noqa: BLE001 - a probe never raises into the caller: torch's grid stays
            answer = False
        _broadcast_grid_checked[affine_grid] = answer
    return _broadcast_grid_checked[affine_grid]


def takes_broadcast_grid(theta: Any, size: Any, align_corners: Any) -> bool:
    """A call the broadcast grid may answer: a float32 CPU (N, 2, 3) theta wanting no gradient, a
    4-D size of the theta's batch with at least 2 rows and columns, align_corners given."""
    return (
        type(theta) is torch.Tensor
        and theta.dtype == torch.float32
        and theta.device.type == "cpu"
        and theta.dim() == 3
        and theta.shape[1] == 2
        and theta.shape[2] == 3
        and isinstance(align_corners, bool)
        and isinstance(size, (list, tuple, torch.Size))
        and len(size) == 4
        and all(isinstance(v, int) for v in size)
        and size[0] == theta.shape[0]
        and size[1] > 0
        and size[2] > 1
        and size[3] > 1
        and not (theta.requires_grad and torch.is_grad_enabled())
    )


_TORCH_GRID_SAMPLE = torch.nn.functional.grid_sample
_TORCH_INTERPOLATE = torch.nn.functional.interpolate


def samples_by_rows(input: Any, grid: Any, threads: int, mode: Any = "bilinear") -> bool:
    """A call ``grid_sample_by_rows`` may answer: one float32 CPU image and its 2-D grid, wanting
    no gradient, of at least two rows per thread, with threads to share them, sampled bilinear or
    nearest (kornia's warps). Bicubic is left to torch: on torch 2.10-2.12 its reflection padding
    with align_corners samples a batch otherwise than one image (CI, measured)."""
    return (
        threads > 1
        and mode in ("bilinear", "nearest")
        and type(input) is torch.Tensor
        and type(grid) is torch.Tensor
        and input.dtype == torch.float32
        and grid.dtype == torch.float32
        and input.device.type == "cpu"
        and grid.device.type == "cpu"
        and input.dim() == 4
        and grid.dim() == 4
        and input.shape[0] == 1
        and grid.shape[0] == 1
        and grid.shape[3] == 2
        and grid.shape[1] >= 2 * threads
        and not (torch.is_grad_enabled() and (input.requires_grad or grid.requires_grad))
    )


# Output pixels per chunk of rows: a round of chunks (one per thread) stays a few MiB of float32
# beside the output (4096-wide: 64 rows a chunk).
SAMPLED_PIXELS = 1 << 18


def grid_sample_by_rows(input: torch.Tensor, grid: torch.Tensor, threads: int, **options: Any) -> torch.Tensor:
    """``F.grid_sample`` of one image on every thread. torch's CPU ``grid_sample`` shares its
    work among threads by image, so one image runs on one thread (1x3x2048x2048 on 2 threads:
    0.123 s; 0.065 s as two images). Its output rows are sampled in rounds: ``threads`` chunks of
    equal height (at most ``SAMPLED_PIXELS`` each), as a batch of that many images (the input
    expanded, not copied), each round put in place in the output; the rows left over are one more
    call. Each output pixel is computed from its own grid point and the same input alike, so the
    result is torch's bit for bit."""
    height, width = grid.shape[1], grid.shape[2]
    rows = max(1, min(height // threads, SAMPLED_PIXELS // max(width, 1)))
    block = rows * threads
    done = height - height % block
    many = input.expand(threads, -1, -1, -1)
    out: Optional[torch.Tensor] = None
    for start in range(0, done, block):
        chunks = _TORCH_GRID_SAMPLE(many, grid[:, start : start + block].reshape(threads, rows, width, 2), **options)
        if out is None:
            out = torch.empty((1, chunks.shape[1], height, width), dtype=chunks.dtype, device=chunks.device)
        out[0, :, start : start + block].view(chunks.shape[1], threads, rows, width).copy_(chunks.transpose(0, 1))
        del chunks
    assert out is not None  # at least one round: height >= 2 * threads (samples_by_rows)
    if done < height:
        out[:, :, done:] = _TORCH_GRID_SAMPLE(input, grid[:, done:], **options)
    return out


# Output pixels per band of a large warp's grid: a band's float32 grid and 3-channel output are
# 5 MiB beside the widened image (1x3x4096x4096: 64 rows a band). Measured on AVX-512, shim /
# the release's float32 memory: bands of 2^20 pixels 1.00-1.05x, of 2^19 0.92-1.00x (0.99-1.01x
# with the previous band kept, below), of 2^18 with it 0.92-0.97x.
GRID_BAND_PIXELS = 1 << 18


def grid_band_rows(width: int) -> int:
    return max(GRID_BAND_PIXELS // max(width, 1), 16)


class _LargeWarps(TorchFunctionMode):
    """Around the float32 evaluation of a large half warp: torch's ``affine_grid`` answered by
    ``affine_grid_by_broadcast`` where it takes the call (and the probe allowed it: ``broadcast``),
    torch's ``grid_sample`` of one image by ``grid_sample_by_rows``; every other function, and
    every other call, torch's own. With ``band_start``, the grid answered is only the rows from
    there (``grid_band_rows`` of them, to ``stop``), and the mode counts the ``grids`` it banded and
    the full ``height`` they were asked for."""

    def __init__(self, broadcast: bool, band_start: Optional[int] = None) -> None:
        super().__init__()
        self.broadcast = broadcast
        self.band_start = band_start
        self.grids = 0
        self.height: Optional[int] = None
        self.stop: Optional[int] = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if func is _TORCH_AFFINE_GRID and self.broadcast and len(args) + len(kwargs) == 3:
            bound = _bound(func, args, kwargs)
            if bound is not None and takes_broadcast_grid(bound["theta"], bound["size"], bound["align_corners"]):
                rows = None
                if self.band_start is not None:
                    height, width = bound["size"][2], bound["size"][3]
                    self.grids += 1
                    self.height = height
                    self.stop = min(self.band_start + grid_band_rows(width), height)
                    rows = (min(self.band_start, self.stop), self.stop)
                return affine_grid_by_broadcast(bound["theta"], bound["size"], bound["align_corners"], rows)
        if func is _TORCH_GRID_SAMPLE:
            bound = _bound(func, args, kwargs)
            threads = torch.get_num_threads()
            if bound is not None and samples_by_rows(bound["input"], bound["grid"], threads, bound.get("mode")):
                options = {k: v for k, v in bound.items() if k not in ("input", "grid")}
                return grid_sample_by_rows(bound["input"], bound["grid"], threads, **options)
        return func(*args, **kwargs)


# A torch function mode costs every torch call inside it a Python dispatch (~100 calls per warp):
# entered for images of at least 2^16 pixels, where the grid's matmul and the sampling cost.
BROADCAST_GRID_PIXELS = 1 << 16


def large_warps(pixels: int) -> Any:
    """The context of a float32 evaluation of a half warp of ``pixels`` per image: for a large
    image in eager mode ``_LargeWarps``, with the broadcast grid where it is torch's on this
    machine; else nothing."""
    if pixels < BROADCAST_GRID_PIXELS or is_compiling() or torch.jit.is_tracing():
        return contextlib.nullcontext()
    return _LargeWarps(broadcast=broadcast_grid_is_torchs(_TORCH_AFFINE_GRID))


def takes_grid_bands(pixels: int) -> bool:
    """Whether a float32 evaluation of a half warp of ``pixels`` per image may be banded by
    ``warp_in_grid_bands``: eager, a large image, and the broadcast grid torch's on this machine."""
    warps = large_warps(pixels)
    return isinstance(warps, _LargeWarps) and warps.broadcast


def _bound(original: Any, arguments: tuple, keywords: dict) -> Optional[dict]:
    try:
        bound = inspect.signature(original).bind(*arguments, **keywords)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def _largest(size: Any) -> Optional[int]:
    sizes = (size,) if isinstance(size, int) else tuple(size) if isinstance(size, (tuple, list)) else ()
    if not sizes or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in sizes):
        return None
    return max(sizes)


# A local filter's output row at r reads input rows r - k/2 .. r + k/2 (k its kernel's height);
# the bands' halo is the whole kernel height, more than enough for odd and even kernels. A
# circular border wraps a band onto its own far rows instead of the image's: never banded.
def filter_in_bands(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``gaussian_blur2d``, ``box_blur``: image by image, and a large image (1x3x4096x4096) band
    by band of rows with a halo of the kernel's height. Each kept output pixel is computed from
    the same input pixels in the same order as on the whole image (full-width rows: the
    convolutions vectorise along a row), so the result is the release's float32 result narrowed,
    bit for bit (tested)."""
    bound = _bound(original, arguments, keywords) if arguments and isinstance(arguments[0], torch.Tensor) else None
    reach = None
    if bound is not None and bound.get("border_type", "reflect") != "circular":
        reach = _largest(bound.get("kernel_size"))
    if bound is not None and bound.get("separable") is True:
        # Two convolutions a plane (a row pass, a column pass): channels-last planes between them.
        return _in_channels_last_bands(original, dtype, arguments, keywords, reach)
    # One convolution a plane (box_blur's default 2-D kernel): nothing to keep between convolutions,
    # and two images' bands a call measured slower (4x3x2048x2048 box_blur 0.46 -> 0.64 s).
    return _each_image(original, dtype, arguments, keywords, reach)


# Images per banded float32 call whose planes stay channels-last: oneDNN returns one image with
# a batch stride torch's layout heuristic misreads (``depthwise_at_scale``), two it does not.
CHANNELS_LAST_IMAGES = 2


def _in_channels_last_bands(original: Any, dtype: torch.dtype, arguments: tuple, keywords: dict,
                            reach: Optional[int], whole: bool = False) -> Optional[torch.Tensor]:
    """``_each_image``, two images a call, each band widened into channels-last and kept so
    through kornia's depthwise convolutions (``CHANNELS_LAST_PLANES``): the same float32 values
    per element, without converting every filtered plane back to NCHW and every padded one into
    channels-last (4x3x1024x1024 ssim on AVX2: 0.47 -> 0.42 s, 4x3x2048x2048 1.77 -> 1.57 s,
    measured). A single image keeps NCHW planes. A release whose steps refuse a channels-last
    plane (a ``view`` to another shape raises: per-image kernels) is evaluated again in NCHW,
    where its own errors are its own."""
    image = arguments[0] if arguments else None
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.shape[0] < CHANNELS_LAST_IMAGES:
        return _each_image(original, dtype, arguments, keywords, reach, whole=whole)
    try:
        with CHANNELS_LAST_PLANES:
            return _each_image(original, dtype, arguments, keywords, reach, count=CHANNELS_LAST_IMAGES,
                               whole=whole, channels_last=True)
    except RuntimeError:
        return _each_image(original, dtype, arguments, keywords, reach, whole=whole)


class _FloatMapRequest(threading.local):
    """Set by ``ssim_loss_by_map`` around the release's ``ssim_loss``: the list its one ``ssim``
    call's float32 map is appended to (None: no request)."""

    served: Optional[list] = None


_FLOAT32_MAP = _FloatMapRequest()


def ssim_in_bands(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``ssim`` with 'same' padding: its map is five Gaussian-filtered planes combined per pixel,
    so bands of rows with a halo of the window's height give each pixel the release's value.
    Asked by ``ssim_loss_by_map``, the map stays float32 (the release's float32 map, bit for bit)."""
    bound = _bound(original, arguments, keywords) if len(arguments) > 1 else None
    reach = None
    if bound is not None and bound.get("padding", "same") == "same":
        reach = _largest(bound.get("window_size"))
    served, _FLOAT32_MAP.served = _FLOAT32_MAP.served, None  # the loss's own ssim call only
    if served is None:
        return _in_channels_last_bands(original, dtype, arguments, keywords, reach)
    result = _in_channels_last_bands(original, torch.float32, arguments, keywords, reach, whole=True)
    if result is not None:
        served.append(result)
    return result


# The release's ssim_loss (0.7.0-0.8.3 read the same, up to quotes and the error of an unknown
# reduction): its ssim map, then elementwise float32 steps and a reduction of that map alone.
_SSIM_LOSS_STATEMENTS = (
    "ssim_map: torch.Tensor = metrics.ssim(img1, img2, window_size, max_val, eps, padding)",
    "loss = torch.clamp((1.0 - ssim_map) / 2, min=0, max=1)",
    'if reduction == "mean": loss = torch.mean(loss)',
    'elif reduction == "sum": loss = torch.sum(loss)',
    "return loss",
)
_ssim_loss_checked: dict = {}


def ssim_loss_by_map(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``ssim_loss``: the release's function on the half images, its ``ssim`` call answered by
    ``ssim_in_bands`` with the float32 map (the release's float32 map bit for bit), so its loss
    steps and reduction run in float32 on that map, as in the release's float32 call; the result
    narrowed once. Where the map was not served so (a 'valid' padding, a gradient), or the
    release's text is not ``_SSIM_LOSS_STATEMENTS``, None: the whole widened call."""
    key = getattr(original, "__wrapped__", original)
    if key not in _ssim_loss_checked:
        try:
            text = _normalised_source(key)
            _ssim_loss_checked[key] = all(statement in text for statement in _SSIM_LOSS_STATEMENTS)
        except (OSError, TypeError):
            _ssim_loss_checked[key] = False
    bound = _bound(original, arguments, keywords)
    if not _ssim_loss_checked[key] or bound is None or bound.get("padding", "same") != "same":
        return None
    # The half images reach the ssim the release calls: only where that is the shim's ssim row,
    # which serves the float32 map (an unpatched ssim would run its half path: on torch 2.1 no
    # half CPU convolution at all).
    metrics = getattr(key, "__globals__", {}).get("metrics")
    if cheaper_evaluation(getattr(metrics, "ssim", None)) is not ssim_in_bands:
        return None
    if _wants_gradient(*(v for v in bound.values() if isinstance(v, torch.Tensor))):
        return None
    served: list = []
    _FLOAT32_MAP.served = served
    try:
        loss = original(*arguments, **keywords)
    finally:
        _FLOAT32_MAP.served = None
    if len(served) != 1 or not isinstance(loss, torch.Tensor) or loss.dtype != torch.float32:
        return None  # the map came otherwise: the widened original decides
    return loss.to(dtype)


# The release's psnr (0.7.0-0.8.3 read the same, up to quotes and its first argument's name):
# the whole squared error through ``torch.nn.functional.mse_loss``'s mean, then scalar steps.
_PSNR_RETURNS = tuple(f'return 10.0 * torch.log10(max_val**2 / mse({name}, target, reduction="mean"))'
                      for name in ("image", "input"))
_psnr_checked: dict = {}


def psnr_by_squared_error(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``psnr``: ``psnr_in_float32`` narrowed once (None where it does not take the call)."""
    result = psnr_in_float32(original, dtype, *arguments, **keywords)
    return None if result is None else result.to(dtype)


def psnr_in_float32(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """The release's float32 ``psnr`` of half images: its float32 call makes one float32 tensor of
    squared differences (each ``d = x - y; d * d`` of the widened values, ``mse_loss``'s kernel)
    and takes its ``mean``. The same tensor is filled here tile by tile from the half images, so
    its mean, and the scalar steps after it (the release's own expression), are the release's
    float32 result bit for bit, without the two widened images (4x3x1024x1024: 144 -> 48 MiB). A
    mean summed in tiles would sum in another order: only the squared error is tiled. Inputs not
    both contiguous, a tensor ``max_val``, a gradient or a release of other text: None."""
    key = getattr(original, "__wrapped__", original)
    if key not in _psnr_checked:
        try:
            text = _normalised_source(key)
            _psnr_checked[key] = (any(statement in text for statement in _PSNR_RETURNS)
                                  and key.__globals__.get("mse") is torch.nn.functional.mse_loss)
        except (AttributeError, OSError, TypeError):
            _psnr_checked[key] = False
    bound = _bound(original, arguments, keywords)
    if not _psnr_checked[key] or bound is None or len(bound) != 3:
        return None
    image, target, max_val = bound.values()
    if not (isinstance(image, torch.Tensor) and isinstance(target, torch.Tensor)
            and isinstance(max_val, (int, float)) and not isinstance(max_val, bool)):
        return None
    if (image.dtype != dtype or target.dtype != dtype or image.shape != target.shape or image.numel() == 0
            or not image.is_contiguous() or not target.is_contiguous() or image.device != target.device):
        return None
    if _wants_gradient(image, target):
        return None
    return 10.0 * torch.log10(max_val**2 / mean_squared_error(image, target))


def mean_squared_error(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``mse_loss(image.float(), target.float())`` of two contiguous tensors of one shape, bit for
    bit: the float32 squared differences filled tile by tile, then ``mean`` over that one tensor
    as ``mse_loss`` takes it (a sum of tile sums would round otherwise in about 4 calls in 10)."""
    squared = torch.empty(image.shape, dtype=torch.float32, device=image.device)
    flat_squared, flat_image, flat_target = squared.view(-1), image.reshape(-1), target.reshape(-1)
    for start in range(0, flat_squared.numel(), TILE_PIXELS):
        stop = start + TILE_PIXELS
        tile = flat_squared[start:stop]
        tile.copy_(flat_image[start:stop])  # exact widening, in place: no float32 temporaries
        tile.sub_(flat_target[start:stop])
        tile.mul_(tile)
    return squared.mean()


def sobel_in_bands(original: Any, dtype: torch.dtype, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """``sobel``: 3x3 gradients (replicated border) and their magnitude per pixel; a halo of 3
    rows covers them."""
    return _each_image(original, dtype, arguments, keywords, 3)


def per_pixel(original: Any, dtype: torch.dtype, image: Any, *arguments: Any, **keywords: Any) -> Optional[torch.Tensor]:
    """A function of each pixel's channels alone (a colour conversion): the release's float32
    function on tiles of pixels shaped ``(1, C, 1, TILE_PIXELS)``, each result narrowed straight
    into the half output. Per pixel the float32 operations are the release's, whatever the tile,
    and only one tile's float32 temporaries are alive at once (the whole-image evaluation keeps
    a dozen image-sized float32 temporaries: rgb_to_lab at 4x3x1024x1024, 481 MiB)."""
    if not isinstance(image, torch.Tensor) or image.dim() < 3 or image.numel() == 0:
        return None
    if _wants_gradient(image, *arguments, *keywords.values()):
        return None
    if any(isinstance(v, torch.Tensor) for v in list(arguments) + list(keywords.values())):
        return None  # a per-call tensor (a white point) might be per image: the widened original
    shape = image.shape
    channels, pixels = shape[-3], shape[-2] * shape[-1]
    source = image.reshape(-1, channels, pixels)
    out: Optional[torch.Tensor] = None
    for n in range(source.shape[0]):
        for start in range(0, pixels, TILE_PIXELS):
            stop = min(start + TILE_PIXELS, pixels)
            tile = source[n, :, start:stop].float().view(1, channels, 1, stop - start)
            result = original(tile, *arguments, **keywords)
            if not isinstance(result, torch.Tensor) or result.dim() != 4 or result.shape[0] != 1 or result.shape[2:] != tile.shape[2:]:
                return None
            if out is None:
                out = torch.empty((source.shape[0], result.shape[1], pixels), dtype=dtype, device=image.device)
            out[n, :, start:stop] = result.view(result.shape[1], stop - start)
    return out.view(shape[:-3] + (out.shape[1],) + shape[-2:])


def _sorting_pairs(size: int) -> Iterator[tuple]:
    """Batcher's odd-even merge sort on ``size`` (a power of two) wires: each pair (i, j), i < j,
    a compare-exchange leaving the smaller value on i."""
    merged = 1
    while merged < size:
        step = merged
        while step >= 1:
            for start in range(step % merged, size - step, 2 * step):
                for offset in range(min(step, size - start - step)):
                    low = start + offset
                    if low // (2 * merged) == (low + step) // (2 * merged):
                        yield low, low + step
            step //= 2
        merged *= 2


@functools.lru_cache(maxsize=None)
def median_program(count: int) -> tuple:
    """The minima and maxima that select the median of ``count`` (odd) values: Batcher's sorting
    network on the next power of two, the wires past ``count`` holding +inf (a compare-exchange
    with +inf moves nothing), pruned to the steps the middle wire depends on. Values are numbered
    ``0 .. count - 1`` (the inputs) and onwards; each step is (its number, ``torch.minimum`` or
    ``torch.maximum``, its two operands, whether an operand is used for the last time). The last
    step's number, or an input's for ``count`` = 1, is the median."""
    size = 1 << max(count - 1, 0).bit_length()
    wires: list = list(range(count)) + [None] * (size - count)
    steps = []
    for low, high in _sorting_pairs(size):
        a, b = wires[low], wires[high]
        if b is None:
            continue
        if a is None:
            wires[low], wires[high] = b, None
            continue
        number = count + len(steps)
        steps.append((number, torch.minimum, a, b))
        steps.append((number + 1, torch.maximum, a, b))
        wires[low], wires[high] = number, number + 1
    needed, kept = {wires[count // 2]}, []
    for step in reversed(steps):
        if step[0] in needed:
            kept.append(step)
            needed.update(step[2:])
    kept.reverse()
    last_use: dict = {}
    for index, (_, _, a, b) in enumerate(kept):
        last_use[a] = last_use[b] = index
    program = tuple((number, op, a, b, last_use[a] == index, last_use[b] == index)
                    for index, (number, op, a, b) in enumerate(kept))
    return program, wires[count // 2]


# Output elements a band: each step's operands and result stay in cache (4x3x1024x1024 3x3: bands
# of 16-64 rows of the 12 planes, 2^17-2^19 elements, 0.016 s; whole planes 0.079 s, measured);
# at most MEDIAN_LIVE_ELEMENTS alive across a band's values (a 7x7 window: 49 values).
MEDIAN_BAND_ELEMENTS = 1 << 18
MEDIAN_LIVE_ELEMENTS = 1 << 23


def _median3(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return torch.maximum(torch.minimum(a, b), torch.minimum(torch.maximum(a, b), c))


def median_of_3x3(band: torch.Tensor, count: int, width: int) -> torch.Tensor:
    """The 3x3 medians of a zero-padded band (``count + 2`` rows, ``width + 2`` columns) by its
    sorted columns: each column of three sorted once (six minima and maxima, shared by the three
    windows that hold it), then the median is the median of (the largest column minimum, the
    median of the column medians, the smallest column maximum), a classic identity: 18 minima and
    maxima a pixel where the general network takes 40 (4x3x1024x1024: 0.016 s against 0.043 s)."""
    top, centre, bottom = band[:, 0:count], band[:, 1:count + 1], band[:, 2:count + 2]
    low, high = torch.minimum(top, centre), torch.maximum(top, centre)
    middle, high = torch.minimum(high, bottom), torch.maximum(high, bottom)
    low, middle = torch.minimum(low, middle), torch.maximum(low, middle)
    left, right = slice(0, width), slice(2, width + 2)
    inner = slice(1, width + 1)
    largest_low = torch.maximum(torch.maximum(low[..., left], low[..., inner]), low[..., right])
    smallest_high = torch.minimum(torch.minimum(high[..., left], high[..., inner]), high[..., right])
    return _median3(largest_low, _median3(middle[..., left], middle[..., inner], middle[..., right]), smallest_high)


def _odd_sides(kernel_size: Any) -> Optional[tuple]:
    sides = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size) \
        if isinstance(kernel_size, (tuple, list)) else ()
    if len(sides) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 and s % 2 for s in sides):
        return None
    return sides


def median_by_selection(original: Any, dtype: torch.dtype, input: Any, kernel_size: Any) -> Optional[torch.Tensor]:
    """``median_blur``: the release convolves the image with kh*kw one-hot kernels (zero padding;
    each output channel is one neighbour, x * 1 plus zeros: exact) and takes ``torch.median`` of
    each pixel's window. A median is one of the window's values, so it is computed here by
    selection: Batcher's network of minima and maxima over shifted views of the zero-padded
    half image (``median_program``), band by band of rows. No arithmetic, so the half result is
    the release's float32 result narrowed, bit for bit, with zeros as the convolution leaves them
    (+0). Windows holding an inf or a NaN (the convolution's inf * 0 makes the whole window NaN)
    and even sides (the release's own shape) go to the widened original."""
    sides = _odd_sides(kernel_size)
    if sides is None or not isinstance(input, torch.Tensor) or input.dim() != 4 or input.numel() == 0:
        return None
    if _wants_gradient(input):
        return None
    batch, channels, height, width = input.shape
    kh, kw = sides
    reach_h, reach_w = kh // 2, kw // 2
    program, median = median_program(kh * kw) if sides != (3, 3) else ((), 0)
    planes = input.reshape(batch * channels, height, width)
    out = torch.empty((batch * channels, height, width), dtype=dtype, device=input.device)
    budget = max(1, min(MEDIAN_BAND_ELEMENTS, MEDIAN_LIVE_ELEMENTS // (kh * kw)))
    plane_chunk = max(1, min(planes.shape[0], budget // width))
    rows = max(1, budget // (plane_chunk * width))
    for first in range(0, planes.shape[0], plane_chunk):
        last = min(first + plane_chunk, planes.shape[0])
        for start in range(0, height, rows):
            stop = min(start + rows, height)
            above, below = max(0, start - reach_h), min(height, stop + reach_h)
            band = planes[first:last, above:below]
            if not bool(torch.isfinite(band).all()):
                return None
            band = torch.nn.functional.pad(band, (reach_w, reach_w, reach_h - (start - above), reach_h - (below - stop)))
            count = stop - start
            if sides == (3, 3):
                selected = median_of_3x3(band, count, width)
            else:
                values = {dy * kw + dx: band[:, dy:dy + count, dx:dx + width] for dy in range(kh) for dx in range(kw)}
                for number, op, a, b, a_done, b_done in program:
                    values[number] = op(values[a], values[b])
                    if a_done:
                        del values[a]
                    if b_done and b != a:
                        del values[b]
                selected = values[median]
            # -0 + 0 = +0: the convolution's sums leave every zero positive.
            torch.add(selected, 0.0, out=out[first:last, start:stop])
    return out.view(batch, channels, height, width)
