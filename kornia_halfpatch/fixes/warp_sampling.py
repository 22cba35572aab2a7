"""torch.nn.functional.grid_sample as kornia calls it on CPU: half images sampled in float32,
non-finite coordinates made safe for the backward (docs/fixes/warp_sampling.md).

Target: ``torch.nn.functional.grid_sample``, for kornia's code only (engine scope "kornia"):
torch keeps its function; every kornia module global that is it (``map_coordinates`` in
``kornia.core``, 0.7.0's ``from torch.nn.functional import grid_sample``) gets the replacement,
and every kornia module global through which kornia's code reaches it (``F``, ``nn``, ``torch``,
found in the bytecode) becomes a module view whose ``grid_sample`` is the replacement. Kornia
modules imported later are rebound as they load. ``apply(grid_sample_everywhere=True)`` replaces
it on ``torch.nn.functional`` itself instead, for every caller. Why views: patching torch would
change every other library's calls, and wrapping kornia's warps one by one would miss call sites;
a view is a real module, so TorchScript resolves ``F.grid_sample`` through it to this plain
function and dynamo inlines it. The call sites are listed in docs/fixes/warp_sampling.md.

Why: torch's CPU float16/bfloat16 kernel does not exist below torch 2.6; from 2.6 through
2.14.1 it builds gather offsets in 16-bit integers, so a sample at in-plane offset >= 32768
(contiguous planes from 182x182) reads 65536 elements earlier (at 512x512 the forward itself
segfaults), and its backward writes out of bounds. Which workaround runs is decided once, from the torch version parsed at import:
"no-kernel" (< 2.6) and "overflow" (2.6 - 2.14.1) both run half CPU calls in float32 and narrow
the result once; widening is exact, so the result is the float32 kernel's, rounded once. For a
newer torch a probe decides, once per process, when apply() first needs it: it samples the
last pixel of a 182x182 (and a channels-last 105x105x3) half image that sits 65536 elements into
a larger buffer, so a wrapped offset reads a known sentinel inside that buffer, never foreign
memory. ``KORNIA_HALFPATCH_GRID_SAMPLE_WORKAROUND`` or ``apply(grid_sample_workaround=...)``
forces "auto", "probe", "none", "no-kernel" or "overflow".

Non-finite grids: on every torch the CPU bilinear backward with border or reflection padding
dereferences a NaN (reflection: also an infinite) coordinate and kills the process. When that
backward can run (4-D input, bilinear, border/reflection, grad enabled and an operand requiring
grad) each (x, y) pair with a non-finite component is sampled at 0 and its output zeroed with
``torch.where``: zero sample, zero gradient to the grid, nothing scattered into the input
gradient. For finite grids ``where`` selects the same bits, so outputs and gradients are
bitwise those of torch. Without autograd the call is torch's own (no crash; torch returns an
unspecified pixel there), so float32 inference pays nothing; masking every call would cost it
10-25%, and costs border/reflection training about 17% (measured, benchmarks/).

Everything else (CUDA, MPS, float32/float64, mismatched dtypes that torch rejects) calls the
original unchanged. The replacement is a plain, annotated function that branches on dtype,
device and autograd metadata only: TorchScript compiles it, dynamo inlines it without a break.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from .. import _environment as environment
from .. import _options as options_manifest
from .. import _probe_cache as probe_cache
from .._model import SCOPE_EVERYWHERE, SCOPE_KORNIA, Finding, Fix, Target, bug_present, not_needed
from .._torch_compat import is_compiling

# --------------------------------------------------------------------------------------------
# Which workaround: torch version facts (docs/fixes/warp_sampling.md), read once at import

TORCH_VERSION = environment.parse_version(torch.__version__)
FIRST_HALF_CPU_KERNEL = (2, 6)  # torch 2.5.1: "grid_sampler_2d_cpu" not implemented for 'Half'
LAST_KNOWN_OVERFLOW = (2, 14, 1)  # measured: 2.6.0, 2.9.1, 2.10.0, 2.12.1, 2.13.0, 2.14.1

NONE = "none"  # torch's half CPU kernel is right: half calls go to it
NO_KERNEL = "no-kernel"  # no half CPU kernel: widen so that the call runs
OVERFLOW = "overflow"  # 16-bit offset overflow: widen so that the result is right
AUTO = "auto"  # by torch version, probe for a torch newer than any measured
PROBE = "probe"  # run the probe whatever the version
CHOICES = options_manifest.GRID_SAMPLE_WORKAROUND.choices  # AUTO, PROBE, NONE, NO_KERNEL, OVERFLOW


_KIND_TEXT = {
    NONE: "none: half CPU calls go to torch's own kernel",
    NO_KERNEL: "widen half CPU calls to float32 (no half CPU kernel)",
    OVERFLOW: "widen half CPU calls to float32 (16-bit offset overflow)",
}


@dataclass(frozen=True)
class Workaround:
    kind: str  # NONE, NO_KERNEL or OVERFLOW
    reason: str

    @property
    def widens_half(self) -> bool:
        return self.kind != NONE

    def describe(self) -> str:
        return f"{_KIND_TEXT[self.kind]}; {self.reason}"


def workaround_for_version(version: Sequence[int]) -> Optional[Workaround]:
    """The workaround a measured torch version needs, or None when only the probe can tell."""
    shown = environment.format_version(tuple(version))
    if tuple(version) < FIRST_HALF_CPU_KERNEL:
        return Workaround(NO_KERNEL, f"torch {shown} < 2.6 has no float16/bfloat16 CPU grid_sample kernel")
    if tuple(version) <= LAST_KNOWN_OVERFLOW:
        return Workaround(
            OVERFLOW, f"torch {shown} is within 2.6-2.14.1, whose half CPU kernel indexes with 16-bit offsets"
        )
    return None


# --------------------------------------------------------------------------------------------
# The probe: deterministic, memory-safe, run at most once per process on torch's own function

_PROBE_PADDING = 1 << 16  # a wrapped 16-bit offset lands at most this far before the plane
_PROBE_SENTINEL = -7.0


def _probe_case(grid_sample: Callable[..., torch.Tensor], dtype: torch.dtype, channels_last: bool, mode: str) -> bool:
    channels, size = (3, 105) if channels_last else (1, 182)
    plane = channels * size * size
    buffer = torch.full((_PROBE_PADDING + plane,), _PROBE_SENTINEL, dtype=dtype)
    strides = (plane, 1, size * channels, channels) if channels_last else (plane, size * size, size, 1)
    image = torch.as_strided(buffer, (1, channels, size, size), strides, _PROBE_PADDING)
    image.fill_(1.0)
    # (+1, +1) is the far corner: the last pixel, at in-plane offset >= 32768.
    grid = torch.ones(1, 1, 1, 2, dtype=dtype)
    out = grid_sample(image, grid, mode=mode, padding_mode="border", align_corners=False)
    return bool((out == 1.0).all())


def probe_half_cpu_kernel(grid_sample: Optional[Callable[..., torch.Tensor]] = None) -> str:
    """NONE, NO_KERNEL or OVERFLOW for the given grid_sample (torch's own by default)."""
    if grid_sample is None:
        grid_sample = _torch_grid_sample()
    for dtype in (torch.float16, torch.bfloat16):
        for channels_last, mode in ((False, "nearest"), (False, "bilinear"), (True, "nearest")):
            try:
                right = _probe_case(grid_sample, dtype, channels_last, mode)
            except (RuntimeError, NotImplementedError) as exc:
                if "not implemented" in str(exc):
                    return NO_KERNEL
                raise
            if not right:
                return OVERFLOW
    return NONE


_probe_lock = threading.Lock()
_probe_result: Optional[str] = None


def probed_kernel() -> str:
    """The probe's verdict on this process's torch, computed on first use."""
    global _probe_result
    with _probe_lock:
        if _probe_result is None:
            _probe_result = probe_cache.remembered(
                "warp_sampling:half_cpu_kernel", probe_half_cpu_kernel, str, _known_kernel_verdict
            )
        return _probe_result


def _known_kernel_verdict(stored: Any) -> str:
    if stored not in (NONE, NO_KERNEL, OVERFLOW):
        raise ValueError(stored)
    return stored


def _probe_workaround(why: str) -> Workaround:
    kind = probed_kernel()
    found = {
        NONE: "the probe found torch's half CPU kernel right",
        NO_KERNEL: "the probe found no half CPU kernel",
        OVERFLOW: "the probe found the 16-bit offset overflow",
    }[kind]
    return Workaround(kind, f"{found} ({why}, torch {torch.__version__})")


def _torch_grid_sample() -> Callable[..., torch.Tensor]:
    from .._lookups import original_of

    return original_of(torch.nn.functional.grid_sample)


# --------------------------------------------------------------------------------------------
# Configuration (kornia_halfpatch._options: apply() options beat the environment variable beat "auto")

_config_lock = threading.Lock()
_given: Dict[str, Any] = {}  # the apply() options configure() was last given
_active: Optional[Workaround] = None  # what the installed replacement does
WORKAROUND = options_manifest.GRID_SAMPLE_WORKAROUND
EVERYWHERE = options_manifest.GRID_SAMPLE_EVERYWHERE


def configure(given: Dict[str, Any]) -> None:
    """Run by apply() before the probe: keep the apply() options given (the manifest raises for a
    bad value, which apply() has already checked); the environment is read when asked."""
    global _given
    for option in (WORKAROUND, EVERYWHERE):
        options_manifest.resolve(option, given)
    with _config_lock:
        _given = dict(given)


def _requested() -> Tuple[str, str]:
    """(workaround choice, where it came from): apply()'s option, else the variable now, else auto."""
    setting = options_manifest.resolve(WORKAROUND, _given)
    return setting.value, setting.source


def _everywhere() -> bool:
    return bool(options_manifest.resolve(EVERYWHERE, _given).value)


def choose_workaround() -> Workaround:
    """The workaround the current configuration selects (may run the probe)."""
    choice, source = _requested()
    if choice in (NONE, NO_KERNEL, OVERFLOW):
        return Workaround(choice, f"forced by {source} on torch {torch.__version__}")
    if choice == PROBE:
        return _probe_workaround(f"probe forced by {source}")
    measured = workaround_for_version(TORCH_VERSION)
    if measured is not None:
        return measured
    return _probe_workaround(f"torch newer than 2.14.1, the last measured")


def _installed() -> bool:
    from .._lookups import fix_installed

    return fix_installed("warp_sampling")


def current_workaround() -> Workaround:
    """What the installed replacement does, or what apply() would choose now."""
    if _active is not None and _installed():
        return _active
    return choose_workaround()


def _scope() -> str:
    return SCOPE_EVERYWHERE if _everywhere() else SCOPE_KORNIA


def _status_line() -> str:
    if _installed():
        where = "every caller (grid_sample_everywhere=True)" if _everywhere() else "kornia's calls only"
        return f"{current_workaround().describe()} [in force for {where}]"
    return f"{current_workaround().describe()} [not applied; apply() would choose this]"


# --------------------------------------------------------------------------------------------
# The replacement

GRID_SAMPLE_PARAMETERS = ("input", "grid", "mode", "padding_mode", "align_corners")


def build_safe_sample(original: Any) -> Any:
    def sample(
        input: torch.Tensor, grid: torch.Tensor, mode: str, padding_mode: str, align_corners: Optional[bool]
    ) -> torch.Tensor:
        # The configuration whose CPU backward dereferences non-finite coordinates.
        if (
            input.dim() == 4
            and mode == "bilinear"
            and (padding_mode == "border" or padding_mode == "reflection")
            and torch.is_grad_enabled()
            and (input.requires_grad or grid.requires_grad)
        ):
            # x * 0 is 0 for every finite x and NaN for NaN and +-inf (it cannot overflow), so
            # one multiply and one compare find the pairs with a non-finite component.
            zeros = grid * 0
            finite = zeros[..., 0] == zeros[..., 1]  # (N, H_out, W_out)
            safe_grid = torch.where(finite.unsqueeze(-1), grid, 0.0)
            out = original(input, safe_grid, mode, padding_mode, align_corners)
            return torch.where(finite.unsqueeze(1), out, 0.0)
        return original(input, grid, mode, padding_mode, align_corners)

    return sample


ALIGN_CORNERS_WARNING = (
    "Default grid_sample and affine_grid behavior has changed "
    "to align_corners=False since 1.3.0. Please specify "
    "align_corners=True if the old behavior is desired. "
    "See the documentation of grid_sample for details."
)


# The stacklevel torch's grid_sample gives its align_corners warning, read from its source by
# build_grid_sample: 2 on torch 2.13 (the caller's line), none (1: torch's own line) on 2.1-2.8.
_align_corners_stacklevel = 2


# function -> its stacklevel: parsing torch's grid_sample source took about 2 ms, paid by every
# re-apply (two per testing.isolated() block); the function's source does not change.
_stacklevels: Dict[int, Tuple[Any, int]] = {}


def _warning_stacklevel(function: Any) -> int:
    """The ``stacklevel`` of the ``warnings.warn`` call that carries ALIGN_CORNERS_WARNING in
    ``function``'s source (1 when it gives none); 2 when the source cannot be read (read once
    per function)."""
    known = _stacklevels.get(id(function))
    if known is not None and known[0] is function:
        return known[1]
    level = probe_cache.remembered(
        "warp_sampling:warning_stacklevel", lambda: _read_warning_stacklevel(function), int, probe_cache.an_int, originals=(function,)
    )
    _stacklevels[id(function)] = (function, level)
    return level


def _read_warning_stacklevel(function: Any) -> int:
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return 2
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"):
            continue
        texts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if not any("align_corners" in text for text in texts):
            continue
        for keyword in node.keywords:
            if keyword.arg == "stacklevel":
                return keyword.value.value if isinstance(keyword.value, ast.Constant) else 2
        return 1
    return 2


@torch.jit.ignore
def _warned_align_corners_default(input: torch.Tensor, grid: torch.Tensor, mode: str, padding_mode: str) -> bool:
    """Where torch's grid_sample warns about ``align_corners=None`` with ``stacklevel=2`` (at its
    caller's line: torch 2.13), called through this replacement its caller is this module, so the
    warning moved out of kornia's line (and out of filters by module and the once-per-location
    registry). The replacement warns first, at its own caller's line, as torch does, and passes
    ``align_corners=False`` on (torch's value after its warning). Only where torch would warn:
    valid mode and padding (torch raises first otherwise), no ``__torch_function__`` override
    (torch dispatches first), eager (TorchScript and dynamo keep torch's own behaviour).
    Where torch warns at its own line (no stacklevel: torch 2.1-2.8), ``None`` goes on to torch,
    which warns from the very line it warns from unpatched."""
    if _align_corners_stacklevel < 2:
        return False
    if is_compiling():
        return False
    if mode not in ("bilinear", "nearest", "bicubic") or padding_mode not in ("zeros", "border", "reflection"):
        return False
    if torch.overrides.has_torch_function_variadic(input, grid):
        return False
    # One more level than torch's: this helper sits between the replacement and its caller.
    warnings.warn(ALIGN_CORNERS_WARNING, stacklevel=_align_corners_stacklevel + 1)
    return True


def build_grid_sample(original: Any) -> Any:
    global _active, _align_corners_stacklevel
    _align_corners_stacklevel = _warning_stacklevel(original)
    workaround = choose_workaround()  # the probe, if one is needed, runs here: in apply()
    _active = workaround
    sample = build_safe_sample(original)
    # Two functions rather than a closed-over flag: TorchScript compiles closed-over functions
    # but rejects closed-over Python values.
    if workaround.widens_half:

        def grid_sample(
            input: torch.Tensor,
            grid: torch.Tensor,
            mode: str = "bilinear",
            padding_mode: str = "zeros",
            align_corners: Optional[bool] = None,
        ) -> torch.Tensor:
            if align_corners is None and not torch.jit.is_scripting():
                if _warned_align_corners_default(input, grid, mode, padding_mode):
                    align_corners = False
            if input.device.type != "cpu":
                return original(input, grid, mode, padding_mode, align_corners)
            if grid.dtype == input.dtype and (input.dtype == torch.float16 or input.dtype == torch.bfloat16):
                # Widening is exact: the float32 kernel's result, rounded once.
                return sample(input.float(), grid.float(), mode, padding_mode, align_corners).to(input.dtype)
            return sample(input, grid, mode, padding_mode, align_corners)

    else:

        def grid_sample(
            input: torch.Tensor,
            grid: torch.Tensor,
            mode: str = "bilinear",
            padding_mode: str = "zeros",
            align_corners: Optional[bool] = None,
        ) -> torch.Tensor:
            if align_corners is None and not torch.jit.is_scripting():
                if _warned_align_corners_default(input, grid, mode, padding_mode):
                    align_corners = False
            if input.device.type != "cpu":
                return original(input, grid, mode, padding_mode, align_corners)
            return sample(input, grid, mode, padding_mode, align_corners)

    grid_sample.__doc__ = original.__doc__
    return grid_sample


# --------------------------------------------------------------------------------------------
# Gate, status, demonstration


def _dtypes_kornia_hands_to_grid_sample(grid_sample: Any) -> list:
    """Run kornia's warp_affine on a tiny float16 image and record the dtype that reaches torch's
    grid_sample (intercepted, so torch's half kernel never runs here)."""
    from torch.overrides import TorchFunctionMode

    from kornia.geometry.transform import warp_affine

    from .._lookups import original_of

    # The release's own warp_affine: warp_geometry's replacement samples in float32 whatever the
    # release does, which would pass for a kornia that needs no widening.
    warp_affine = original_of(warp_affine)
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is grid_sample:
                image, grid = args[0], args[1]
                seen.append(image.dtype)
                rest = {k: v for k, v in kwargs.items()}
                return func(image.float(), grid.float(), *args[2:], **rest).to(image.dtype)
            return func(*args, **kwargs)

    from .._kernels import widening_missing_kernels

    image = torch.rand(1, 1, 4, 4).half()
    matrix = torch.eye(2, 3, dtype=torch.float16)[None]
    # Ops on the way that lack a half CPU kernel in this torch (bmm on torch 2.1) run widened:
    # the probe asks only which dtype reaches grid_sample.
    with widening_missing_kernels(), Record():
        warp_affine(image, matrix, (4, 4))
    return seen


def probe(originals: Sequence[Any]) -> Finding:
    grid_sample = originals[0]
    seen = _dtypes_kornia_hands_to_grid_sample(grid_sample)
    if seen and all(dtype == torch.float32 for dtype in seen):
        return not_needed("this kornia samples half images in float32 itself")
    return bug_present()


FIX = Fix(
    name="warp_sampling",
    targets=(
        Target(
            ("torch.nn.functional:grid_sample",),
            build_grid_sample,
            GRID_SAMPLE_PARAMETERS,
            scope=_scope,
            reason="half CPU calls sampled in float32, narrowed once (16-bit offset overflow / no half kernel); "
            "non-finite coordinates zeroed where the CPU backward would crash",
        ),
    ),
    probe=probe,
    demonstration="kornia_halfpatch.demos.warp_sampling:demonstrate",
    configure=configure,
    describe=_status_line,
    devices=("cpu",),
)
