"""The torch APIs the shim needs whose name or signature changed between torch 2.1 and 2.13.

Each is looked up once, with the older spelling as the fallback, so that no call of the shim
reaches an attribute the installed torch does not have (torch 2.1 has no
``torch.compiler.is_compiling``, no ``torch.amp.is_autocast_available``, a
``torch.is_autocast_enabled()`` that takes no device type, and no ``torch.get_default_device``;
torch 2.4 and 2.6 have no ``torch.cpu.get_capabilities``).
"""

from __future__ import annotations

import functools
import platform
from typing import Any, Callable, Dict, FrozenSet, List, Tuple

import torch


def _always_false() -> bool:
    return False


def _find_is_compiling() -> Callable[[], bool]:
    # torch >= 2.3: torch.compiler.is_compiling. torch 2.1-2.2: torch._utils.is_compiling, which
    # dynamo folds to True while it traces (its config lists it among the constant functions).
    # Both are torch's own functions, bound here as they are, so dynamo sees the very function
    # it knows rather than a Python wrapper around a lookup it may not trace.
    compiler = getattr(torch, "compiler", None)
    found = getattr(compiler, "is_compiling", None)
    if found is None:
        found = getattr(getattr(torch, "_utils", None), "is_compiling", None)
    return found if found is not None else _always_false


is_compiling = _find_is_compiling()


# Autocast per device type. torch >= 2.4: torch.is_autocast_enabled(device_type); before, one
# function per device type, and torch.is_autocast_enabled() (no argument) answers for CUDA.
_LEGACY_AUTOCAST_ENABLED: Dict[str, str] = {
    "cpu": "is_autocast_cpu_enabled",
    "xla": "is_autocast_xla_enabled",
    "ipu": "is_autocast_ipu_enabled",
}


def _legacy_autocast_enabled(device_type: str) -> bool:
    if device_type == "cuda":
        return bool(torch.is_autocast_enabled())
    name = _LEGACY_AUTOCAST_ENABLED.get(device_type)
    if name is not None and hasattr(torch, name):
        return bool(getattr(torch, name)())
    backend = getattr(torch, device_type, None)  # torch.xpu.is_autocast_xpu_enabled, torch.hpu...
    found = getattr(backend, f"is_autocast_{device_type}_enabled", None)
    return bool(found()) if found is not None else False


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` in this thread, on every supported torch; False
    for a device type this torch does not know."""
    available = getattr(getattr(torch, "amp", None), "is_autocast_available", None)
    try:
        if available is not None:
            return available(device_type) and bool(torch.is_autocast_enabled(device_type))
        return _legacy_autocast_enabled(device_type)
    except (RuntimeError, TypeError, ValueError, AttributeError):
        return False


def autocast_enabled_device_types(device_types: List[str]) -> List[str]:
    return [device_type for device_type in device_types if autocast_enabled(device_type)]


def default_device_type() -> str:
    """The device type a factory call without ``device=`` allocates on.

    ``torch.get_default_device()`` raises on torch 2.4-2.9 after ``set_default_device(x)`` then
    ``set_default_device(None)`` (it reads the device of an emptied global context) and is absent
    before 2.3: an empty tensor says where factories go on every torch, whatever the history.
    """
    return torch.empty(0).device.type


def _autocast_takes_device_type() -> bool:
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        return False
    return True


if _autocast_takes_device_type():

    def cpu_autocast_enabled() -> bool:
        return torch.is_autocast_enabled("cpu")

else:  # torch < 2.4

    def cpu_autocast_enabled() -> bool:
        return torch.is_autocast_cpu_enabled()


def _torch_release() -> Tuple[int, ...]:
    parts = []
    for piece in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


TORCH_RELEASE = _torch_release()

# dynamo traces torch.func.functional_call of a module from torch 2.6 on (measured: 2.6.0,
# 2.13.0); 2.4.1 refuses it ("call_function args: NNModuleVariable() ..."): dynamo keeps a
# module it specialises on as a constant, which functional_call cannot reparametrise. 2.5 is
# not measured and is treated as 2.4.
FUNCTIONAL_CALL_TRACEABLE = TORCH_RELEASE >= (2, 6)


def cpu_capabilities() -> Dict[str, Any]:
    """The CPU features torch reports (``torch.cpu.get_capabilities()``, torch 2.7+), else the
    flags the Linux kernel reports for an x86 CPU (``/proc/cpuinfo``, same names for the flags
    the shim reads: ``avx512_fp16``, ``amx_fp16``). torch 2.4 and 2.6 have no
    ``get_capabilities`` but their oneDNN uses avx512_fp16 all the same (a float16 depthwise
    15x15 conv2d never returns there, measured), so a missing API must not read as a missing
    feature. Empty where neither is known."""
    get = getattr(getattr(torch, "cpu", None), "get_capabilities", None)
    if get is not None:
        try:
            return dict(get())
        except Exception:  # noqa: BLE001 - a torch whose probe fails: the kernel's flags then
            pass
    return {flag: True for flag in _cpuinfo_flags()}


@functools.lru_cache(maxsize=1)
def _cpuinfo_flags() -> FrozenSet[str]:
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64", "i686", "i386"):
        return frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()
