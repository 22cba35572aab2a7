"""Helpers shared by the tests: what the installed kornia is, and where its functions live."""

import inspect
import importlib
import subprocess
import sys
import textwrap

import kornia
import pytest
import torch

from kornia_halfpatch._environment import parse_version
from kornia_halfpatch import _precision

KORNIA = parse_version(kornia.__version__)
UPSTREAM_FIXED = KORNIA >= (0, 9, 0)
TORCH = parse_version(torch.__version__)
HALF_DTYPES = [torch.float16, torch.bfloat16]
FULL_DTYPES = [torch.float32, torch.float64]

needs_old_kornia = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0 already has the fix; nothing is patched")


def skip_unless_inductor_has_a_vector_isa() -> None:
    """Inductor picks no vector ISA under ATEN_CPU_CAPABILITY=default (or on an x86 CPU without
    AVX2), and torch 2.13's scalar C++ codegen then emits at::vec code for half kernels, which
    does not compile. Every AVX2/AVX-512/NEON CPU has one; the kornia083-sse41 tox env has none.
    Called inside the test: finding the ISA compiles probe programs (seconds)."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # another torch layout: let the test run
        return
    if not pick_vec_isa():
        pytest.skip(
            "inductor has no vector ISA here (e.g. ATEN_CPU_CAPABILITY=default) and torch 2.13's scalar C++ "
            "codegen emits at::vec code for half kernels, which fails to compile: a torch bug, not the fix"
        )


def inductor_compile(function, **options):
    """``torch.compile(function, **options)`` with inductor (the default backend), or skip the
    test where inductor cannot compile (see above). Every test that compiles with inductor goes
    through here; dynamo-only backends ("eager", "aot_eager") compile no C++ and need not."""
    skip_unless_inductor_has_a_vector_isa()
    return torch.compile(function, **options)


def grid_module():
    """The module that defines create_meshgrid in the installed release."""
    for name in ("kornia.geometry.grid", "kornia.utils.grid"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if "create_meshgrid" in vars(module) and "_create_meshgrid" not in vars(module):
            return module
    raise AssertionError("no create_meshgrid in this kornia")


def run_python(code: str, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (import order, crashes, env vars)."""
    import os

    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits (NaNs with equal payloads compare equal)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
    return torch.equal(a, b)


def same_signature(first, second) -> bool:
    """``inspect.signature(first) == inspect.signature(second)``, with tensor defaults compared as
    tensors: kornia 0.7's ``warp_affine`` defaults ``fill_value`` to a tensor, whose ``==`` is
    elementwise, so ``Signature.__eq__`` raises on it. ``second`` is the original."""
    import inspect

    try:
        b = inspect.signature(second)
    except (ValueError, TypeError):
        return True  # torch's builtins (conv2d) carry no Python signature to compare with
    a = inspect.signature(first)
    if a.return_annotation != b.return_annotation or list(a.parameters) != list(b.parameters):
        return False
    for pa, pb in zip(a.parameters.values(), b.parameters.values()):
        if (pa.kind, pa.annotation) != (pb.kind, pb.annotation):
            return False
        da, db = pa.default, pb.default
        if isinstance(da, torch.Tensor) or isinstance(db, torch.Tensor):
            same = da is db or (
                isinstance(da, torch.Tensor) and isinstance(db, torch.Tensor)
                and da.dtype == db.dtype and da.shape == db.shape and torch.equal(da, db)
            )
            if not same:
                return False
        elif da != db:
            return False
    return True


def expected_defaults(original):
    """The ``__defaults__`` a replacement carries: the original's own, or for a decorated original
    (functools.wraps over *args/**kwargs, no defaults of its own) those its signature shows."""
    if original.__defaults__ is None and hasattr(original, "__wrapped__"):
        return inspect.unwrap(original).__defaults__
    return original.__defaults__


def cpu_reports(flag: str) -> bool:
    """Whether the CPU has ``flag``: torch's own report, or Linux's /proc/cpuinfo where torch has
    no ``torch.cpu.get_capabilities`` (2.1-2.6)."""
    if hasattr(torch.cpu, "get_capabilities"):
        return bool(torch.cpu.get_capabilities().get(flag, False))
    return cpuinfo_reports(flag)


def cpuinfo_reports(flag: str) -> bool:
    import platform

    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        return any(line.startswith("flags") and flag in line.partition(":")[2].split() for line in cpuinfo)


def autocast_state(device_type: str = "cpu"):
    """(enabled, dtype) of autocast on ``device_type``, on every supported torch (2.1-2.3 have
    per-device functions and no device-type argument)."""
    if hasattr(torch, "get_autocast_dtype"):
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    assert device_type == "cpu", "torch < 2.4: only the CPU state is read here"
    return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()


def unset_default_device() -> None:
    """``torch.set_default_device(None)``, leaving torch as a fresh process has it. On torch
    2.4-2.9 the call empties the global device context instead of removing it, and every later
    ``torch.get_default_device()`` raises (AttributeError) for the rest of the process: kornia
    0.8.3 calls it in every augmentation's parameter generator, so a test that set and unset the
    default device broke every later test in the process. The emptied context is removed."""
    torch.set_default_device(None)
    context = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)
    if context is not None and getattr(context, "device_context", False) is None:
        del context.device_context


def factory_device() -> str:
    """Where a factory call without ``device=`` allocates (``torch.get_default_device()`` is
    absent before torch 2.3 and raises on 2.4-2.9 after ``set_default_device(None)``)."""
    return str(torch.empty(0).device)


# The error torch raises for a dtype its kernel does not implement: NotImplementedError on torch
# 2.8 and 2.13 (measured), RuntimeError on 2.1-2.6 (NotImplementedError is a RuntimeError, so
# the older expectation also accepts an unmeasured 2.7 either way).
MISSING_KERNEL_ERROR = NotImplementedError if TORCH >= (2, 8) else RuntimeError


def expect_missing_kernel_error(match=None):
    """``pytest.raises`` for torch's "not implemented for 'Half'" on the installed torch."""
    return pytest.raises(MISSING_KERNEL_ERROR, match=match)


def lacks_half_kernel(kernel: str, dtype: torch.dtype) -> bool:
    """Whether the installed torch has no CPU kernel named ``kernel`` (a key of
    ``kornia_halfpatch._kernels.KERNELS``) for the half ``dtype``: torch 2.1 lacks many that torch
    2.13 has. The probe's verdict is checked against torch's own call in tests/test_kernel_probe.py.
    An unpatched release that reaches such a kernel raises instead of computing wrong numbers."""
    from kornia_halfpatch._kernels import missing

    return str(dtype).replace("torch.", "") in missing(kernel)


# Whether ``torch.autocast("cpu", dtype=dtype)`` can be entered: torch 2.1's CPU autocast takes
# bfloat16 only (float16 raises on entering), so no caller can be in that state there. The
# package's own answer (its demonstrations ask the same question).
cpu_autocast_accepts = _precision.cpu_autocast_accepts


def skip_unreachable_state(state: str) -> None:
    """Skip a test of a caller's state that the installed torch cannot enter."""
    if state == "autocast_cpu_float16" and not cpu_autocast_accepts(torch.float16):
        pytest.skip(f"torch {torch.__version__}'s CPU autocast refuses float16: no caller can be in this state")


def widening_half_products(dtype: torch.dtype):
    """Where torch has no half CPU matrix product (torch 2.1, float16: bmm/mm), a context in which
    kornia's products (``@`` in rotate's matrix, ``transform_points``) that raise for it run on
    float32 operands and are narrowed once, so a test of another op (grid_sample) gets past them;
    every other op, and every other error, stays torch's own. Elsewhere: a no-op."""
    import contextlib

    if not (lacks_half_kernel("bmm", dtype) or lacks_half_kernel("mm", dtype)):
        return contextlib.nullcontext()
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    class WidenHalfProducts(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                return func(*args, **kwargs)
            except (RuntimeError, NotImplementedError) as error:
                if not any(f'"{name}" not implemented' in str(error) for name in ("bmm", "addmm_impl_cpu_", "baddbmm_with_gemm")):
                    raise
                wide = tree_map(lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == dtype else x, (args, kwargs))
                out = func(*wide[0], **wide[1])
                return tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)

    return WidenHalfProducts()


def half_ulp(values: torch.Tensor) -> torch.Tensor:
    """Per element, the spacing of values' half dtype at that value (float32 tensor): 2^(exponent)
    times the dtype's epsilon, the subnormal step below the smallest normal."""
    info = torch.finfo(values.dtype)
    magnitude = values.float().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * info.eps


def assert_as_close_to_float64_as_the_release(got: torch.Tensor, narrowed: torch.Tensor, float64: torch.Tensor,
                                              differing_fraction: float) -> None:
    """The bound of a float32 evaluation that rounds otherwise than the release's (a rank-one
    kernel in two passes, ``filters_conv_hang.rank_one_factors``): every element at most 1 half
    ulp farther from the float64 computation than the release's float32 result narrowed, and at
    most ``differing_fraction`` of the elements not that narrowed result."""
    assert got.dtype == narrowed.dtype and got.shape == narrowed.shape
    assert bool(torch.isfinite(got).all())
    step = torch.maximum(half_ulp(got), half_ulp(narrowed)).double()
    farther = (got.double() - float64).abs() - (narrowed.double() - float64).abs()
    assert bool((farther <= step).all()), float((farther / step).max())
    assert float((got != narrowed).float().mean()) <= differing_fraction
