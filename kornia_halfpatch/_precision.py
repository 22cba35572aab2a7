"""Which half dtype reaches a computation: the input's own, or the one ``torch.autocast`` gives it.

Every fix asks one question before it acts: will float16/bfloat16 arithmetic reach this
computation? A half tensor passed in is one way. ``torch.autocast`` is the other, and the common
one: the caller's tensors are float32, and autocast runs the convolutions, matmuls and linear
layers *inside* kornia in its half dtype, so a kornia function whose half arithmetic is wrong
(an epsilon that is 0 in float16, a variance that cancels, a matrix product of pixel
coordinates) meets half values it never saw as an input. A fix keyed on the input dtype alone is
blind to that.

So a fix asks ``half_reaching(x)``: ``x``'s own half dtype, else the half dtype autocast is on
with for ``x``'s device type when ``x`` is float32 (the only dtype autocast narrows), else None.
Where the answer comes from autocast, the fix runs the release's function on float32 with
autocast off for that device type (``autocast_off``): the float32 call outside autocast, which is
autocast's own reference, bit for bit. A float32 computation that autocast leaves in float32
(nothing in it is on autocast's lower-precision list) runs the same with autocast off, so it is
never changed.

The functions here are plain torch calls without exception handlers: dynamo traces them
(``torch.compile(fullgraph=True)``: the autocast state is a guard, a constant in the graph).
TorchScript runs scripted code without autocast (its interpreter computes in the dtypes it is
given, measured: a scripted matmul under CPU autocast stays float32), so scripted callers skip
this branch (``torch.jit.is_scripting()``) and see the release's code.

Which API reads autocast's state is chosen once per torch: ``torch.is_autocast_enabled(device)``
and ``torch.get_autocast_dtype(device)`` from torch 2.4; before, one function per device type
(``is_autocast_cpu_enabled``/``get_autocast_cpu_dtype``, ``is_autocast_enabled``/
``get_autocast_gpu_dtype`` for CUDA).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Optional

import torch

from ._torch_compat import is_compiling

HALF_DTYPES = (torch.float16, torch.bfloat16)


def is_half(dtype: torch.dtype) -> bool:
    return dtype == torch.float16 or dtype == torch.bfloat16


def _takes_device_type() -> bool:
    get = getattr(torch, "get_autocast_dtype", None)
    if get is None:
        return False
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        return False
    return True


def _device_types_without_autocast() -> frozenset:
    """The device types torch's autocast does not know (``meta``, ``lazy``, ...): asking about
    them raises "unknown device type for autocast", and a tensor there is never narrowed by it."""
    import warnings

    unknown = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for device_type in (
            "meta", "lazy", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "ve", "vulkan",
            "metal", "ort", "xla", "mtia", "ipu", "hpu", "xpu", "mps", "privateuseone",
        ):
            try:
                torch.is_autocast_enabled(device_type)
            except (RuntimeError, TypeError, ValueError):
                unknown.add(device_type)
    return frozenset(unknown)


if _takes_device_type():
    _WITHOUT_AUTOCAST = _device_types_without_autocast()

    def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
        """The dtype autocast computes its lower-precision ops in on ``device_type`` in this
        thread, or None where autocast is off there (or autocast has no such device type)."""
        if device_type in _WITHOUT_AUTOCAST:
            return None
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)

else:  # torch < 2.4: one function per device type (CPU and CUDA; others have no autocast here)

    def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
        """The dtype autocast computes its lower-precision ops in on ``device_type`` in this
        thread, or None where autocast is off there."""
        if device_type == "cpu":
            if torch.is_autocast_cpu_enabled():
                if is_compiling():
                    return _dtype_of_an_autocast_matmul(device_type)
                return torch.get_autocast_cpu_dtype()
            return None
        if device_type == "cuda":
            if torch.is_autocast_enabled():
                if is_compiling():
                    return _dtype_of_an_autocast_matmul(device_type)
                return torch.get_autocast_gpu_dtype()
            return None
        return None

    def _dtype_of_an_autocast_matmul(device_type: str) -> torch.dtype:
        """Autocast's dtype, read while dynamo traces: torch 2.1's dynamo cannot trace
        ``get_autocast_cpu_dtype()`` (a torch function returning a dtype), but it propagates
        autocast to a traced matmul, whose dtype is then known at trace time (the unused product
        is dropped from the graph)."""
        probe = torch.ones(1, 1, device=device_type)
        return torch.mm(probe, probe).dtype


def autocast_half(x: Any) -> Optional[torch.dtype]:
    """The half dtype autocast gives ``x``'s computations: ``x`` a float32 tensor on a device
    type where autocast is on with float16 or bfloat16; else None (float64, integers and half
    tensors are not narrowed by autocast; a half tensor answers for itself)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        return None
    dtype = autocast_dtype(x.device.type)
    if dtype is None or not is_half(dtype):
        return None
    return dtype


def half_reaching(x: Any) -> Optional[torch.dtype]:
    """The half dtype that reaches a computation on ``x``: its own, or autocast's; else None."""
    if isinstance(x, torch.Tensor) and is_half(x.dtype):
        return x.dtype
    return autocast_half(x)


def autocast_on(x: Any) -> bool:
    """Whether autocast is on (any dtype) for ``x``'s device type: a float32 computation of a half
    input must then turn it off, or autocast narrows its matmuls and convolutions again."""
    return isinstance(x, torch.Tensor) and autocast_dtype(x.device.type) is not None


def leave_autocast(x: Any) -> bool:
    """Whether a computation on ``x`` must turn autocast off to be the float32 one: autocast is on
    for ``x``'s device and half reaches it (``x`` half, computed in float32 by the fix; or ``x``
    float32 and autocast's dtype half)."""
    if not isinstance(x, torch.Tensor):
        return False
    if is_half(x.dtype):
        return autocast_on(x)
    return autocast_half(x) is not None


def autocast_off(device_type: str) -> Any:
    """A context in which autocast is off for ``device_type`` (the rest of its state as it was)."""
    return torch.autocast(device_type, enabled=False)


def float32_context(x: Any) -> Any:
    """Where a half input is computed in float32: autocast off for ``x``'s device type if it is on
    there (else autocast narrows the widened tensors again), else nothing."""
    if autocast_on(x):
        return autocast_off(x.device.type)
    return contextlib.nullcontext()


def float32_call_under_autocast(function: Any, x: Any, *args: Any) -> Any:
    """``function(*args)``, with autocast off where it would make ``x``'s computation half (a
    float32 ``x`` under autocast in a half dtype): the float32 call outside autocast. Eager code
    only (hand-written replacements that TorchScript never compiles)."""
    if autocast_half(x) is not None:
        with autocast_off(x.device.type):
            return function(*args)
    return function(*args)


def cpu_autocast_accepts(dtype: torch.dtype) -> bool:
    """Whether ``torch.autocast("cpu", dtype=dtype)`` can be entered on this torch (torch 2.1's CPU
    autocast takes bfloat16 only: float16 raises on entering). For the demonstrations."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast("cpu", dtype=dtype):
                return True
    except RuntimeError:
        return False


class _ThreadDepth(threading.local):
    """A context entered and left on one thread: the depth of its nesting there."""

    depth = 0

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.depth -= 1


class _Float32Evaluation(_ThreadDepth):
    """Whether this thread is inside the shim's float32 evaluation of a half call (a promoted
    row's widened call): the depth of nested evaluations. The half result is held to the
    release's float32 result narrowed once, to at most 1 half ulp, not to its float32 bits, so
    inside it kornia's convolutions may take a faster float32 layout (channels-last depthwise
    convolution, ``fixes/filters_conv_hang.py``) whose float32 roundings can differ from the
    release's. A float32 call of the user's is never inside one: its bits stay the release's."""

    def __repr__(self) -> str:
        # The same in every process (a generated wrapper's bindings are compared warm and cold).
        return f"{__name__}.FLOAT32_EVALUATION"


# One per process (its depth is per thread): the context the promoted wrappers enter.
FLOAT32_EVALUATION = _Float32Evaluation()


def in_float32_evaluation() -> bool:
    """Inside the shim's float32 evaluation of a half call, on this thread (eager only: compiled
    and scripted code never enters one)."""
    return FLOAT32_EVALUATION.depth > 0


class _ChannelsLastPlanes(_ThreadDepth):
    """Whether this thread is inside a banded float32 evaluation that holds its planes in
    channels-last (``fixes/_at_scale.py``: two images' bands of ``ssim`` and of the separable
    filters, ``gaussian_blur2d``). There kornia's depthwise float32 convolutions return their
    channels-last output as it is: converting each of ssim's five filtered planes back to NCHW and the next
    padded plane into channels-last was a third of its time (4x3x1024x1024 on AVX2, measured).
    Elementwise operations and padding give the same values in either layout."""

    def __repr__(self) -> str:
        return f"{__name__}.CHANNELS_LAST_PLANES"


CHANNELS_LAST_PLANES = _ChannelsLastPlanes()


def keeps_channels_last() -> bool:
    """Inside a float32 evaluation whose depthwise convolutions may answer in channels-last."""
    return CHANNELS_LAST_PLANES.depth > 0 and FLOAT32_EVALUATION.depth > 0


class _HalfArithmetic(threading.local):
    """The half dtype whose call this thread's float32 evaluation stands for, where kornia 0.9.0
    does that call's heavy arithmetic in the half dtype (``augmentation_pipeline.COMPUTED_IN_HALF``:
    ``RandomMotionBlur``'s depthwise convolution with a float32-built kernel, ``RandomResizedCrop``'s
    bilinear resize; measured against 0.9.0). Where the dtype has half arithmetic
    (``native_half_arithmetic``), that step takes it (``fixes/filters_conv_hang.py``'s convolutions;
    the crop's forward on the half batch, ``fixes/augmentation_pipeline.py``): 0.9.0's computation,
    so its error, at its speed. None elsewhere."""

    dtype: Optional[torch.dtype] = None

    def __repr__(self) -> str:
        return f"{__name__}.HALF_ARITHMETIC"


HALF_ARITHMETIC = _HalfArithmetic()


@contextlib.contextmanager
def half_arithmetic(dtype: Optional[torch.dtype]) -> Any:
    """Inside: ``HALF_ARITHMETIC.dtype`` is ``dtype`` (None: none), restored after."""
    before = HALF_ARITHMETIC.dtype
    HALF_ARITHMETIC.dtype = dtype
    try:
        yield
    finally:
        HALF_ARITHMETIC.dtype = before


def native_half_arithmetic() -> Optional[torch.dtype]:
    """``HALF_ARITHMETIC``'s dtype where ``networks_cpu_half``'s modes make it native on the CPU
    (not their float32 mode); else None, also where the modes are not loaded (the float32
    evaluation, as before there was a choice)."""
    standing_for = HALF_ARITHMETIC.dtype
    if standing_for is None:
        return None
    # networks_cpu_half owns the modes; read from the loaded module (it imports fixes that import this)
    modes = sys.modules.get(f"{__package__}.fixes.networks_cpu_half")
    return standing_for if modes is not None and standing_for not in modes.promoted_dtypes() else None
