"""Which half CPU kernels the installed torch has, for the torch ops kornia calls.

torch gains float16/bfloat16 CPU kernels release by release: torch 2.1 has none for replication
and reflection padding, cumsum, topk, atan2, bmm, the slow conv2d path, bilinear/bicubic
interpolation or grid_sample, all of which torch 2.13 has; torch 2.13 still has none for the
linear algebra kornia calls (inv, solve, svd, eigh, det, qr, ...), small cdist, avg_pool3d or
the FFT. Rows of ``torch_ops`` name the kernels they stand in for (``Promote(..., kernels=...)``,
``Target(gate=...)``); the engine installs a row only where one of them is missing, and a row
built here widens only the half dtypes that lack it, so the same install serves every torch.

Each kernel is probed at most once per process, the first time a row asks, on tiny tensors,
inside the probes' clean state (:func:`kornia_halfpatch._isolation.probe_state`): the call runs
in float32 (it must work: otherwise the probe's input is wrong and the error propagates, so
the row's fix is reported failed rather than guessed) and in each half dtype; a half call that
raises ``RuntimeError``/``NotImplementedError`` where float32 did not means no kernel.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, ContextManager, Dict, Iterable, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from . import _probe_cache as probe_cache

HALF = ("float16", "bfloat16")
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_SHOWN = {"float16": "Half", "bfloat16": "BFloat16"}


def _matrix(dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]]).to(dtype)


def _image(dtype: torch.dtype, dims: int = 4) -> torch.Tensor:
    return torch.arange(3 ** (dims - 2), dtype=torch.float32).reshape((1, 1) + (3,) * (dims - 2)).div(8).to(dtype)


def _points(dtype: torch.dtype, count: int = 4) -> torch.Tensor:
    return torch.arange(count * 2, dtype=torch.float32).reshape(1, count, 2).div(7).to(dtype)


def _resize(mode: str, dims: int = 4, **options: Any) -> Callable[[torch.dtype], Any]:
    return lambda d: F.interpolate(_image(d, dims), scale_factor=2.0, mode=mode, **options)


def _grid_sample() -> Callable[..., torch.Tensor]:
    from ._lookups import original_of  # torch's own, also under apply(grid_sample_everywhere=True)

    return original_of(F.grid_sample)


# torch's name for the kernel (as its "not implemented for 'Half'" error says it) -> a call
# that reaches it, building its own tiny input in the given dtype.
KERNELS: Dict[str, Callable[[torch.dtype], Any]] = {
    # linear algebra (torch 2.13 has none of these for half on CPU)
    "linalg_inv": lambda d: torch.linalg.inv(_matrix(d)),
    "linalg_solve": lambda d: torch.linalg.solve(_matrix(d), _matrix(d)[:, :1]),
    "linalg_svd": lambda d: torch.linalg.svd(_matrix(d)),
    "linalg_eigh": lambda d: torch.linalg.eigh(_matrix(d)),
    "linalg_eigvals": lambda d: torch.linalg.eigvals(_matrix(d)),
    "linalg_qr": lambda d: torch.linalg.qr(_matrix(d)),
    "linalg_det": lambda d: torch.linalg.det(_matrix(d)),
    "linalg_matrix_rank": lambda d: torch.linalg.matrix_rank(_matrix(d)),
    "cdist": lambda d: torch.cdist(_points(d), _points(d)),  # 25 or fewer points: the direct kernel
    "avg_pool3d": lambda d: F.avg_pool3d(_image(d, 5), 2),
    "fft_rfftn": lambda d: torch.fft.rfftn(_image(d), dim=(-2, -1)),
    # padding modes (F.pad's replicate/reflect kernels per padded dimensionality)
    "replication_pad1d": lambda d: F.pad(_image(d, 3), [1, 1], mode="replicate"),
    "replication_pad2d": lambda d: F.pad(_image(d), [1, 1, 1, 1], mode="replicate"),
    "replication_pad3d": lambda d: F.pad(_image(d, 5), [1, 1, 1, 1, 1, 1], mode="replicate"),
    "reflection_pad1d": lambda d: F.pad(_image(d, 3), [1, 1], mode="reflect"),
    "reflection_pad2d": lambda d: F.pad(_image(d), [1, 1, 1, 1], mode="reflect"),
    "reflection_pad3d": lambda d: F.pad(_image(d, 5), [1, 1, 1, 1, 1, 1], mode="reflect"),
    # elementwise, scans, selection, batched products
    "atan2": lambda d: torch.atan2(_points(d), _points(d) + 1),
    "cross": lambda d: torch.cross(_matrix(d), _matrix(d).flip(-1), dim=-1),
    "dot": lambda d: torch.dot(_matrix(d)[0], _matrix(d)[1]),
    "prod": lambda d: torch.prod(_points(d), dim=1),
    "cumsum": lambda d: torch.cumsum(_points(d), 1),
    "addcdiv": lambda d: torch.addcdiv(_points(d), _points(d), _points(d) + 1),  # torch.optim.Adam's step
    "eye": lambda d: torch.eye(2, dtype=d),
    "softmax": lambda d: F.softmax(_points(d), dim=-1),
    # softmax over a dimension that is not the last (softmax_kernel_impl: dice_loss's classes) and
    # log_softmax (focal_loss): separate kernels from the last-dimension softmax
    "softmax_nonlast": lambda d: F.softmax(_image(d).view(1, 3, 3), dim=1),
    "log_softmax": lambda d: F.log_softmax(_points(d), dim=-1),
    "log_softmax_nonlast": lambda d: F.log_softmax(_image(d).view(1, 3, 3), dim=1),
    "median": lambda d: torch.median(_image(d), dim=-1),
    "topk": lambda d: torch.topk(_points(d, 6), 2, dim=1),
    "bmm": lambda d: torch.bmm(_matrix(d)[None], _matrix(d)[None]),
    "mm": lambda d: torch.mm(_matrix(d), _matrix(d)),
    "baddbmm": lambda d: torch.baddbmm(_matrix(d)[None], _matrix(d)[None], _matrix(d)[None]),
    # convolution: depthwise, filter2d's, blur_pool2d's and sharpness's shape (torch 2.1 has no
    # float16 CPU convolution at all; torch 2.4 on has them all)
    "conv2d": lambda d: F.conv2d(_image(d).expand(1, 2, 3, 3), torch.ones(2, 1, 2, 2, dtype=d), groups=2),
    "max_pool2d": lambda d: F.max_pool2d(_image(d), 2),
    "max_pool3d": lambda d: F.max_pool3d(_image(d, 5), 2),
    "adaptive_max_pool3d": lambda d: F.adaptive_max_pool3d(_image(d, 5), 1),  # torch 2.4: no float16
    "conv3d": lambda d: F.conv3d(_image(d, 5), torch.ones(1, 1, 2, 2, 2, dtype=d)),
    # interpolation modes
    "upsample_nearest2d": _resize("nearest"),
    "upsample_bilinear2d": _resize("bilinear", align_corners=False),
    "upsample_bicubic2d": _resize("bicubic", align_corners=False),
    "upsample_trilinear3d": _resize("trilinear", 5, align_corners=False),
    "adaptive_avg_pool2d": lambda d: F.interpolate(_image(d), size=(2, 2), mode="area"),
    # sampling
    "grid_sampler_2d": lambda d: _grid_sample()(_image(d), torch.zeros(1, 1, 1, 2, dtype=d), align_corners=False),
    "grid_sampler_3d": lambda d: _grid_sample()(_image(d, 5), torch.zeros(1, 1, 1, 1, 3, dtype=d), align_corners=False),
}

_lock = threading.RLock()
_found: Dict[str, Tuple[str, ...]] = {}


def _probe(name: str) -> Tuple[str, ...]:
    from ._isolation import probe_state

    call = KERNELS[name]
    with probe_state():
        lacking = []
        for half in HALF:
            try:
                call(_DTYPES[half])
            except (RuntimeError, NotImplementedError):
                lacking.append(half)
        if lacking:
            call(torch.float32)  # must work: else the probe's input is wrong (the error propagates)
    return tuple(lacking)


def missing(name: str) -> Tuple[str, ...]:
    """The half dtypes (``"float16"``, ``"bfloat16"``) with no CPU kernel for ``name`` in this
    torch; probed on first use, then remembered for the process (and kept on disk for the next
    process on this installation, ``_probe_cache``)."""
    with _lock:
        if name not in _found:
            _found[name] = probe_cache.remembered(f"kernel:{name}", lambda: _probe(name), list, _decode_dtypes)
        return _found[name]


def _decode_dtypes(stored: Any) -> Tuple[str, ...]:
    if not isinstance(stored, list) or any(dtype not in HALF for dtype in stored):
        raise ValueError(stored)
    return tuple(stored)


def lacking(kernels: Iterable[str], half: Sequence[str] = HALF) -> Tuple[str, ...]:
    """The dtypes of ``half`` for which at least one of ``kernels`` has no CPU kernel."""
    gone = {dtype for name in kernels for dtype in missing(name)}
    return tuple(dtype for dtype in half if dtype in gone)


def describe(kernels: Sequence[str], half: Sequence[str] = HALF) -> Tuple[bool, str]:
    """(needed, the sentence a row's status shows): which of ``kernels`` this torch lacks, in
    which of the ``half`` dtypes, or that it has them all."""
    gaps: Dict[str, list] = {}
    for name in kernels:
        dtypes = "/".join(_SHOWN[d] for d in missing(name) if d in half)
        if dtypes:
            gaps.setdefault(dtypes, []).append(name)
    if gaps:
        text = "; ".join(f"no {dtypes} CPU kernel for {', '.join(names)}" for dtypes, names in gaps.items())
        return True, f"needed: torch {torch.__version__} has {text}"
    return False, f"not needed: torch {torch.__version__} has {'/'.join(_SHOWN[d] for d in half)} CPU kernels for {', '.join(kernels)}"


_NO_KERNEL_TEXT = ("not implemented for 'Half'", "not implemented for 'BFloat16'", "not implemented for Half",
                   "not implemented for BFloat16", "Low precision dtypes not supported")


class _WidenWhereNoKernel(TorchFunctionMode):
    """An op on half CPU tensors that raises for a missing kernel runs again on the tensors
    widened to float32, its floating outputs narrowed to the half dtype (autograd flows through
    both casts); every other op, and every other error, is torch's own."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as error:
            if not any(text in str(error) for text in _NO_KERNEL_TEXT):
                raise
            halves = [x.dtype for x in tree_flatten((args, kwargs))[0]
                      if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)]
            if not halves:
                raise
            wide = tree_map(lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == halves[0] else x, (args, kwargs))
            out = func(*wide[0], **wide[1])
            return tree_map(lambda x: x.to(halves[0]) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)


def widening_missing_kernels() -> ContextManager[Any]:
    """For a behaviour probe that runs kornia in half to find a bug of its own (a sampling grid, a
    solver's gradient): the ops it meets on the way that have no half CPU kernel in this torch
    (bmm, padding on torch 2.1) run in float32, narrowed, so the probe measures what it tests for
    instead of failing on a kernel it does not test for. Probes whose bug *is* a missing kernel
    do not use it."""
    return _WidenWhereNoKernel()


def findings() -> Dict[str, Tuple[str, ...]]:
    """Every known kernel probed: name -> the half dtypes without a CPU kernel."""
    return {name: missing(name) for name in KERNELS}
