"""A clean, local torch state for the shim's behaviour probes, whatever the caller's.

Probes run kornia's code on tiny inputs to decide whether a fix is needed. They ran in the
caller's torch state, and the state decided the outcome (measured on kornia 0.8.2, torch 2.13):
``torch.no_grad()``/``inference_mode()`` made a probe's backward raise; a float16 default dtype
made SOSNet's probe build float16 tensors that have no CPU ``avg_pool3d`` kernel; autocast
bfloat16 fooled feature_patches' probe into "not needed" (the float32 LAF and the half image met in
bfloat16) and autocast float16 raised; and the probes' weight initialisation consumed the global
random stream, so a seeded program drew other numbers after ``apply()``.

:func:`probe_state` is the one place that fixes all of that: every probe, every replacement
builder that probes, and every fact line (``Fix.describe``) that may probe runs inside it. On exit the caller's
state is restored exactly, also when the body raises. Process-global settings (default dtype,
default device, float32 matmul precision, deterministic algorithms, the CPU random state, warning filters) are only
touched when they differ from what the probe needs; other threads can observe them changed for
the duration of a probe (milliseconds, once per ``apply()``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Any, Callable, ContextManager, Iterator, List

import torch

from ._torch_compat import autocast_enabled_device_types, default_device_type

# Device types whose autocast state a probe turns off. An unknown or unbuilt backend is skipped
# (torch.amp.is_autocast_available answers for the ones this torch knows).
_AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia", "privateuseone")

# The seed of the probes' own random draws (untrained networks' weights): a probe's outcome must
# not depend on where the caller's random stream happens to be.
PROBE_SEED = 0


def _autocast_enabled_device_types() -> List[str]:
    # Through _torch_compat: torch 2.1-2.3 has neither torch.amp.is_autocast_available nor a
    # device-type argument to torch.is_autocast_enabled.
    return autocast_enabled_device_types(list(_AUTOCAST_DEVICE_TYPES))


@contextlib.contextmanager
def _without_torch_function_modes() -> Iterator[None]:
    """Pop the caller's ``TorchFunctionMode`` stack (``with torch.device("meta")``, user modes,
    tracing modes) for the probe and push it back unchanged."""
    length = getattr(torch._C, "_len_torch_function_stack", None)
    if length is None or length() == 0:
        yield
        return
    popped = []
    try:
        while length() > 0:
            popped.append(torch._C._pop_torch_function_stack())
        yield
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def _without_dispatch_modes() -> Iterator[None]:
    """Leave the caller's ``TorchDispatchMode`` stack (fake tensors, tracers) for the probe."""
    length = getattr(torch._C, "_len_torch_dispatch_stack", None)
    if length is None or length() == 0:
        yield
        return
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield


@contextlib.contextmanager
def _without_jit_tracing() -> Iterator[None]:
    """A ``torch.jit.trace`` in progress would record the probe's ops into the user's graph."""
    get_state = getattr(torch._C, "_get_tracing_state", None)
    state = get_state() if get_state is not None else None
    if state is None:
        yield
        return
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


@contextlib.contextmanager
def _global_setting(read: Callable[[], Any], write: Callable[[Any], Any], wanted: Any) -> Iterator[None]:
    """One of torch's global settings at `wanted` for the probe, the caller's value after."""
    previous = read()
    if previous == wanted:
        yield
        return
    write(wanted)
    try:
        yield
    finally:
        write(previous)


def _default_dtype_float32() -> ContextManager[None]:
    return _global_setting(torch.get_default_dtype, torch.set_default_dtype, torch.float32)


@contextlib.contextmanager
def _default_device_cpu() -> Iterator[None]:
    try:
        on_cpu = default_device_type() == "cpu"
    except Exception:  # noqa: BLE001 - a default device whose factory call fails: not the CPU
        on_cpu = False
    if on_cpu:
        yield
        return
    # torch.set_default_device installs a global device context (below the mode stack on recent
    # torch, on it before); an inner ``torch.device`` context wins over it for factory calls
    # without a device.
    with torch.device("cpu"):
        yield


@contextlib.contextmanager
def _nondeterministic_allowed() -> Iterator[None]:
    # Probes compare results; none needs a deterministic kernel, and use_deterministic_algorithms
    # would make a probe whose op has no deterministic implementation raise.
    enabled = torch.are_deterministic_algorithms_enabled()
    if not enabled:
        yield
        return
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


@contextlib.contextmanager
def _float32_matmul_precision_highest() -> Iterator[None]:
    # "high"/"medium" let float32 matmuls (affine_grid's) run on TF32/bfloat16 internals whose
    # rounding depends on the matmul's shape: a probe comparing a replacement's float32 result
    # bitwise with the release's would then find a difference that is not the release's.
    get_precision = getattr(torch, "get_float32_matmul_precision", None)
    if get_precision is None:
        yield
        return
    with _global_setting(get_precision, torch.set_float32_matmul_precision, "highest"):
        yield


@contextlib.contextmanager
def _private_random_stream() -> Iterator[None]:
    devices: List[int] = []
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        devices = list(range(cuda.device_count()))
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(PROBE_SEED)
        yield


@contextlib.contextmanager
def _probe_warnings_ignored() -> Iterator[None]:
    """One "ignore" entry in front of the process's warning filters, removed by identity after.

    Not ``warnings.catch_warnings()``: it snapshots the filter list and puts the snapshot back,
    so with another thread's ``catch_warnings`` (pytest.warns, a library's own) interleaving,
    each restored the other's copy and the caller's filters ended up replaced, with the probe's
    "ignore" left in. The entry is taken out of the list it went into and out of whatever list
    is current, and nothing else is touched.
    """
    entry = ("ignore", None, Warning, None, 0)
    filters = warnings.filters
    filters.insert(0, entry)
    _filters_mutated()
    try:
        yield
    finally:
        for holder in (filters, warnings.filters):
            for position, value in enumerate(holder):
                if value is entry:
                    del holder[position]
                    break
        _filters_mutated()


def _filters_mutated() -> None:
    # Invalidates the per-module "already warned" registries, as warnings.simplefilter does.
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(warnings, "_filters_mutated_lock_held", None)
    if mutated is not None:
        try:
            mutated()
        except Exception:  # noqa: BLE001 - a Python whose private hook differs: registries stay
            pass


@contextlib.contextmanager
def probe_state() -> Iterator[None]:
    """Run the body in the torch state the probes were written for; restore the caller's after.

    Grad mode on, inference mode off, autocast off on every device type, no torch-function or
    dispatch modes, no ``jit.trace`` in progress, default dtype float32, default device CPU,
    float32 matmul precision "highest", deterministic algorithms and anomaly detection off (a probe's non-finite backward is the
    bug it looks for, which anomaly mode would raise), the CPU random state (and every
    initialised CUDA device's) forked and seeded, warnings the probe's own code emits ignored
    (under ``python -W error`` a kornia deprecation warning would otherwise abort the probe).
    """
    if getattr(_inside, "depth", 0):
        # Inside another probe_state (an apply() pass evaluates every fix in one): the state is
        # set already, and entering its thirteen parts again was 150 us a time, 24 times in a
        # testing.isolated() cycle. Each probe still gets its own seeded random stream, and the
        # enclosing code's stream back after.
        with _private_random_stream():
            yield
        return
    _inside.depth = 1
    try:
        with _probe_state_entered():
            yield
    finally:
        _inside.depth = 0


_inside = threading.local()  # depth: whether this thread is inside probe_state()


@contextlib.contextmanager
def _probe_state_entered() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        _enter(stack, _without_jit_tracing)
        _enter(stack, _without_dispatch_modes)
        _enter(stack, _without_torch_function_modes)
        _enter(stack, lambda: torch.inference_mode(False))
        _enter(stack, torch.enable_grad)
        for device_type in _autocast_enabled_device_types():
            _enter(stack, lambda: torch.autocast(device_type, enabled=False))
        _enter(stack, _default_dtype_float32)
        _enter(stack, _default_device_cpu)
        _enter(stack, _nondeterministic_allowed)
        _enter(stack, _float32_matmul_precision_highest)
        if torch.is_anomaly_enabled():
            _enter(stack, lambda: torch.autograd.set_detect_anomaly(False))
        _enter(stack, _private_random_stream)
        _enter(stack, _probe_warnings_ignored)
        yield


def _enter(stack: contextlib.ExitStack, make: Callable[[], ContextManager[Any]]) -> None:
    """Enter one part of the probe state; a part this torch cannot set up is left out (logged),
    so that ``apply()`` never raises from its isolation: a probe that then misreads the state
    fails on its own and skips its fix, with a reason."""
    try:
        stack.enter_context(make())
    except Exception as exc:  # noqa: BLE001 - the shim must not break the program it runs in
        logging.getLogger("kornia_halfpatch").warning(
            "probe isolation: %s could not be set up (%s: %s)", getattr(make, "__name__", make), type(exc).__name__, exc
        )

