"""float16 depthwise convolutions that never return on CPUs with avx512_fp16 (docs/fixes/torch_ops.md).

On a CPU that reports ``avx512_fp16`` (Sapphire Rapids and later), torch 2.13's oneDNN never
returns from a float16 depthwise ``F.conv2d`` (groups = channels >= 2) with a 1xk kernel,
15 <= k <= 31 (measured on a 41x61 and a 64x64 input; k = 14 or 33, kx1 kernels and one channel
return). kornia reaches it through ``filter2d`` (``filter2d_separable``, so ``gaussian_blur2d``
with a kernel of 15 or more, ``ScalePyramid`` before 0.8.3, ``box_blur``, ``motion_blur`` ...) and,
in 0.8.3, ``ScalePyramid._blur_fast`` (its own two depthwise convolutions).

The row promotes ``kornia.filters.filter:filter2d`` for float16 CPU input whose kernel has a side
of 15 or more: the filter runs in float32 (the input widened exactly; oneDNN's float32 path
returns) and its output is narrowed once, so the result is the release's float32 filter
narrowed, bitwise. The guard is wider than the measured range (every side >= 15, both
orientations, any channel count) because the range was measured on two input sizes only and a
hang cannot be caught from Python: a few more convolutions in float32 cost little, a missed one
hangs the program. bfloat16 (its own, returning kernels), float32 and float64 call the original.

Every other kornia ``F.conv2d`` call (``MS_SSIMLoss``'s 33x33 masks, ``blur_pool2d``/
``max_blur_pool2d`` with a kernel of 15 or more, measured hanging; modules imported later) goes
through a kornia-scoped ``torch.nn.functional.conv2d`` replacement (the engine's module views,
shared with warp_sampling's): a float16 CPU convolution with one input channel per group, two or
more outputs and a side >= 15 runs in float32, narrowed once; every other call is torch's own.

torch 2.1 has no float16 CPU convolution kernel at all ("slow_conv2d_cpu" not implemented for
'Half'). The conv2d target is the one owner of kornia's ``F.conv2d`` calls, so it also takes that
case: where the kernel probe (``kornia_halfpatch._kernels``, "conv2d") finds a half dtype without
the kernel, every CPU convolution of kornia's in that dtype runs in float32, narrowed once, and
the fix applies for that alone (whatever the hang's verdict; the filter2d and pyramid rows are the
hang's and stay gated on it). Where torch has the kernels (2.4 on) nothing of this is installed.

Chosen by CPU capability: ``torch.cpu.get_capabilities()["avx512_fp16"]``, or on a torch without
it (2.4 and 2.6 hang all the same, measured) the flag in Linux's ``/proc/cpuinfo``.
``KORNIA_HALFPATCH_FILTERS_CONV_HANG=on|off|auto`` forces the choice (default ``auto``), so the
workaround can be exercised on any CPU; ``KORNIA_HALFPATCH_CPU_AVX512_FP16=1|0`` overrides what
the CPU reports (for tests).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, Optional, Sequence, Tuple

import torch
from torch._jit_internal import BroadcastingList2

from .. import _options as options_manifest
from .._model import SCOPE_KORNIA, Finding, Fix, Promote, Target, bug_present, not_needed
from .._precision import (FLOAT32_EVALUATION, autocast_half, autocast_off, autocast_on,
                          in_float32_evaluation, keeps_channels_last, native_half_arithmetic)
from .._torch_compat import cpu_capabilities, is_compiling

HANG = options_manifest.FILTERS_CONV_HANG  # KORNIA_HALFPATCH_FILTERS_CONV_HANG: auto, on, off
# The smallest kernel side measured to hang (1x15); every side from here up takes float32.
HANG_KERNEL_SIDE = 15


def large_kernel(kernel: torch.Tensor) -> bool:
    """A kernel with a side of HANG_KERNEL_SIDE (15) or more: filter2d's (B, kh, kw) kernels and
    0.8.3 ScalePyramid's 1-D Gaussian, used both as 1xk and kx1."""
    if kernel.shape[-1] >= 15:
        return True
    return kernel.dim() >= 2 and kernel.shape[-2] >= 15


def cpu_has_avx512_fp16() -> bool:
    """Whether the CPU reports avx512_fp16: torch's report, or the kernel's flags on a torch
    without torch.cpu.get_capabilities; ``KORNIA_HALFPATCH_CPU_AVX512_FP16=1|0`` overrides what it
    reports (for tests: a CPU without the flag, or with it, on any machine)."""
    forced = options_manifest.read_switch(options_manifest.CPU_AVX512_FP16)
    if forced is not None:
        return forced
    return bool(cpu_capabilities().get("avx512_fp16", False))


FILTER_ROW = Promote(
    "kornia.filters.filter:filter2d",
    "float16 depthwise conv2d with a kernel side >= 15 never returns in oneDNN on avx512_fp16 CPUs: "
    "the filter in float32, narrowed once",
    half=("float16",),
    device="cpu",
    guard=f"{__name__}:large_kernel",
    guard_arguments=("kernel",),
    expects_parameters=("input", "kernel"),
    # Under float16 autocast the filter's convolution is the same hang: in float32 with autocast
    # off, narrowed to float16 as autocast returns it.
    autocast="narrow",
)
# 0.8.3's ScalePyramid blurs with its own two depthwise F.conv2d calls (1xk, then kx1) on a
# precomputed 1-D kernel, not through filter2d.
PYRAMID_ROW = Promote(
    "kornia.geometry.transform.pyramid:ScalePyramid._blur_fast",
    "0.8.3 ScalePyramid's own float16 depthwise 1xk conv2d (k >= 15) never returns in oneDNN on avx512_fp16 "
    "CPUs: the blur in float32, narrowed once",
    half=("float16",),
    device="cpu",
    guard=f"{__name__}:large_kernel",
    guard_arguments=("kernel",),
    expects_parameters=("self", "x", "kernel"),
    optional=True,
    autocast="narrow",
)


def hang_prone_conv(input: torch.Tensor, weight: torch.Tensor) -> bool:
    """A float16 CPU convolution whose weight has one input channel per group and two or more
    output channels (depthwise: filter2d, blur_pool2d, MS_SSIM's masks; measured hanging with
    2 and 3 channels, returning with 1) and a side of HANG_KERNEL_SIDE or more."""
    return (
        input.dtype == torch.float16
        and weight.dtype == torch.float16
        and input.device.type == "cpu"
        and weight.dim() == 4
        and weight.shape[1] == 1
        and weight.shape[0] >= 2
        # 15 is HANG_KERNEL_SIDE, written out: TorchScript rejects a closed-over int global
        and (weight.shape[-1] >= 15 or weight.shape[-2] >= 15)
    )


def hang_prone_under_autocast(input: torch.Tensor, weight: torch.Tensor) -> bool:
    """A float32 CPU convolution that autocast runs in float16, of a hang-prone shape
    (``hang_prone_conv``): MS_SSIMLoss, blur_pool2d or a large filter2d of a float32 image under
    ``torch.autocast("cpu", dtype=torch.float16)``."""
    return (
        input.dtype == torch.float32
        and weight.dtype == torch.float32
        and input.device.type == "cpu"
        and autocast_half(input) == torch.float16
        and weight.dim() == 4
        and weight.shape[1] == 1
        and weight.shape[0] >= 2
        and (weight.shape[-1] >= HANG_KERNEL_SIDE or weight.shape[-2] >= HANG_KERNEL_SIDE)
    )


CONV2D_SOURCE = """
def conv2d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride: BroadcastingList2[int] = 1,
    padding: BroadcastingList2[int] = 0,
    dilation: BroadcastingList2[int] = 1,
    groups: int = 1,
) -> torch.Tensor:
    if ({hang}) or (input.device.type == 'cpu' and weight.dtype == input.dtype and ({no_kernel})):
        _d = input.dtype
        wide_bias: Optional[torch.Tensor] = None
        if bias is not None:
            wide_bias = bias.float()
        if not torch.jit.is_scripting():
            if autocast_on(input):
                with autocast_off(input.device.type):
                    return _halfpatch_original(input.float(), weight.float(), wide_bias, stride, padding, dilation, groups).to(_d)
        return _halfpatch_original(input.float(), weight.float(), wide_bias, stride, padding, dilation, groups).to(_d)
    if not torch.jit.is_scripting():
        if {autocast_hang}:
            # float32 tensors that autocast would convolve in float16: the same hang. In float32
            # with autocast off, narrowed to float16 as autocast returns it.
            with autocast_off(input.device.type):
                return _halfpatch_original(input, weight, bias, stride, padding, dilation, groups).to(torch.float16)
        # A user's float32 call pays one dtype test and one thread-local read here.
        if {at_scale} and not is_compiling() and (input.dtype == torch.float16 or input.dtype == torch.bfloat16
                                                   or FLOAT32_EVALUATION.depth > 0) \
                and depthwise_on_cpu(input, weight, groups):
            return depthwise_at_scale(_halfpatch_original, input, weight, bias, stride, padding, dilation, groups)
        # Not while torch.jit.trace records: the shifts branch on the values (median_blur's
        # widened original reaches here when traced).
        if {at_scale} and FLOAT32_EVALUATION.depth > 0 and not is_compiling() and not torch.jit.is_tracing() \
                and neighbour_kernels(input, weight, bias, stride, padding, dilation, groups):
            return neighbours_by_shifts(_halfpatch_original, input, weight)
    return _halfpatch_original(input, weight, bias, stride, padding, dilation, groups)
"""


def depthwise_on_cpu(input: torch.Tensor, weight: torch.Tensor, groups: int) -> bool:
    """A CPU convolution with one input channel and one kernel per group (filter2d, box_blur, the
    pyramids, SSIM's windows), or of one-channel planes with up to 3 kernels (spatial_gradient's
    derivative kernels): kornia's filters."""
    return (
        input.device.type == "cpu"
        and input.dim() == 4
        and weight.dim() == 4
        and weight.shape[1] == 1
        and input.shape[1] == groups
        and weight.shape[0] % groups == 0
        # Several kernels per plane only for one-channel planes (regrouped below): a grouped
        # convolution of several channels with 2-3 kernels each sums otherwise channels-last than
        # NCHW on AVX2 (float32, 3x3: 5e-7 apart, measured; bitwise on AVX-512 and SSE4.1), and
        # kornia makes none (filter2d's are one kernel per channel).
        and (groups == 1 or weight.shape[0] == groups)
        # Up to 3 kernels per plane: channels-last pays back its copies there (4x1x1024x1024,
        # 3x3: 2 kernels 0.115 -> 0.044 s, 3 0.122 -> 0.066 s), not for canny's 8 hysteresis
        # kernels (0.157 -> 0.23 s, measured).
        and weight.shape[0] <= 3 * groups
    )


def depthwise_at_scale(original: Any, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                       stride: Any, padding: Any, dilation: Any, groups: int) -> torch.Tensor:
    """A depthwise CPU convolution of kornia's, computed in a faster layout where the result is
    held to the release's float32 result narrowed once (not to the release's float32 bits):

    - a half image whose dtype takes the float32 path on this CPU (``networks_cpu_half``'s
      ``cpu_half`` modes: no half arithmetic here, or forced): widened to float32 straight into
      channels-last, convolved, narrowed once straight back into the usual layout. The release's
      float16 depthwise convolution takes torch's slow path on such a CPU (5.8 s for box_blur 9x9
      on 4x3x1024x1024, measured; 0.12 s this way), and the result is float32's narrowed once;
    - a half image whose dtype is native here: the same half convolution in channels-last
      (bfloat16 1x11 on 4x3x1024x1024: 0.23 s -> 0.025 s, measured);
    - a float32 image inside the shim's float32 evaluation of a half call (a promoted row:
      gaussian_blur2d, ssim, resize's antialiasing, canny): channels-last. NCHW depthwise float32
      convolutions take a path 3-7x slower that allocates about ten times the image (the 1x11
      Gaussian pass on 4x3x1024x1024: 0.42 s -> 0.06 s; bitwise the same here, and where a CPU's
      kernels round otherwise the narrowed result moves by at most 1 half ulp).

    Where the computation is float32, a rank-one kernel with both sides >= 15 (a Gaussian or box
    kernel that kornia builds as a 2-D product: ``RandomElasticTransform``'s 63x63 blur of its
    noise, ``box_blur`` 15x15 and up) is convolved as its column then its row
    (``rank_one_factors``): the same function up to float32 roundings, 21x faster at 63x63.

    Inside a float32 evaluation that stands for a half call kornia 0.9.0 convolves in half
    (``HALF_ARITHMETIC``: ``RandomMotionBlur``), where that dtype is native, the float32 planes
    (widened half values) and kernel are narrowed and convolved in half, as 0.9.0 computes them,
    and the half sums widened back exactly (bfloat16 RandomMotionBlur on avx512_bf16: the
    release's float32 time was 1.1-1.6x 0.9.0's).

    A single-channel image (groups = 1) is convolved as one image of N channels (the same
    per-pixel sums), since channels-last of one channel is NCHW. On this machine, on the SSE4.1
    baseline and on torch 2.1, channels-last depthwise float32 convolutions of two or more
    channels are bitwise the NCHW ones (kernels 1x11 to 63x63, measured), so the float32 evaluation
    is the release's there; one channel in channels-last strides is not (15x15), and is left to
    torch's own call. Where a gradient is wanted, and under autocast, and for a user's
    float32 or float64 call, this is torch's own convolution, untouched."""
    if autocast_on(input) or torch.jit.is_tracing() or (
            torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)):
        # A gradient keeps torch's own layout: the channels-last backward rounds otherwise on
        # torch 2.1 (SIFT's image gradient, measured), and gradients are held to the release's.
        # So does a trace, which may replay with inputs that want one.
        return original(input, weight, bias, stride, padding, dilation, groups)
    dtype = input.dtype
    if dtype == torch.float32 and weight.dtype == torch.float32:
        if not in_float32_evaluation():
            return original(input, weight, bias, stride, padding, dilation, groups)
        # A float32 evaluation standing for a half call that 0.9.0 convolves in half
        # (``HALF_ARITHMETIC``): in that dtype where it is native, as 0.9.0 does (the band and
        # the float32-built kernel narrowed, the half sums widened back exactly).
        compute = native_half_arithmetic() or torch.float32
        if compute != torch.float32:
            from .._kernels import missing

            if str(compute).rpartition(".")[2] in missing("conv2d"):
                # No half CPU convolution in this torch (2.1's float16): the half call's kernel,
                # summed in float32, as the conv2d target widens the release's half call.
                weight = weight.to(compute).float()
                compute = torch.float32
    elif dtype in (torch.float16, torch.bfloat16) and weight.dtype == dtype:
        compute = torch.float32 if dtype in _float32_mode_dtypes() else dtype
    else:
        return original(input, weight, bias, stride, padding, dilation, groups)
    if compute != torch.float32 and large_kernel(weight):
        # oneDNN never returns from a bfloat16 channels-last depthwise convolution with a kernel
        # width of 15 or more on an avx512_bf16 CPU (torch 2.13, measured: 1x15, 15x15, 1x33, 1x64,
        # 3x100; 14x14 and kx1 return, and so does every NCHW one): a half convolution with a
        # side >= 15 keeps torch's own layout (the release's call).
        if dtype == compute:
            return original(input, weight, bias, stride, padding, dilation, groups)
        return original(input.to(compute), weight.to(compute), None if bias is None else bias.to(compute), stride,
                        padding, dilation, groups).to(dtype)
    batch, outputs = input.shape[0], weight.shape[0]
    if groups == 1 and batch > 1:
        # (N, 1, H, W) with k kernels as (1, N, H, W) in N groups of the same k kernels: the same
        # per-pixel sums (spatial_gradient convolves its (B*C, 1, H, W) planes with 2 kernels).
        input = input.transpose(0, 1)
        weight = weight.repeat(batch, 1, 1, 1)
        bias = None if bias is None else bias.repeat(batch)
        groups = batch
        regrouped = True
    else:
        regrouped = False
    factors = rank_one_factors(weight, stride, padding, dilation) if compute == torch.float32 else None
    if groups < 2 and compute == dtype and factors is None:
        # One image of one channel: channels-last is its NCHW, with other strides that take
        # another float32 kernel (15x15: other roundings, measured); nothing to gain.
        return original(input, weight, bias, stride, padding, dilation, groups)
    wide = input.to(dtype=compute, memory_format=torch.channels_last)
    if factors is not None:
        column, row = factors
        out = original(original(wide, column, None, 1, 0, 1, groups), row,
                       None if bias is None else bias.to(compute), 1, 0, 1, groups)
    else:
        out = original(wide, weight.to(compute), None if bias is None else bias.to(compute), stride, padding,
                       dilation, groups)
    del wide
    if compute == dtype == torch.float32 and not regrouped and batch > 1 and keeps_channels_last():
        # A band's planes stay channels-last from its widening to its result (the next padding
        # and elementwise steps keep the layout): no conversion back and forth per convolution.
        # Not for one image: oneDNN gives it a batch stride of C, and after kornia's view torch's
        # layout heuristic reads that as NCHW (padding answers in NCHW; 1x3x2048x2048 ssim
        # 0.49 -> 0.64 s, measured).
        return out
    if regrouped:
        out = out.view(outputs, batch, out.shape[2], out.shape[3]).transpose(0, 1) if outputs == 1 else \
            out.reshape(batch, outputs, out.shape[2], out.shape[3])
    result = out.to(dtype=dtype, memory_format=torch.contiguous_format)
    # A size-1 dimension leaves .to() a non-contiguous view (the regrouped batch, transposed back).
    return result if result.is_contiguous() else result.contiguous()


# From this side up (both sides) a rank-one depthwise kernel is convolved as its column then its
# row (float32, channels-last, 4x4x1024x1024, measured: 9x9 1.6x, 15x15 4.7x, 31x31 11x, 63x63
# 21x faster than the 2-D kernel; 5x5 and 7x7 no faster).
SEPARABLE_KERNEL_SIDE = 15
# A kernel is rank one where its column times its row (scaled by the peak) rebuilds every tap to
# within this many float32 epsilons of the tap: a product of two 1-D kernels stored in float32
# (kornia's get_gaussian_kernel2d, box kernels) rebuilds to within 2-3 roundings.
RANK_ONE_TOLERANCE = 8 * torch.finfo(torch.float32).eps


def rank_one_factors(weight: torch.Tensor, stride: Any, padding: Any,
                     dilation: Any) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """The (G, 1, kh, 1) columns and (G, 1, 1, kw) rows of a float32 depthwise kernel that is rank
    one with both sides >= SEPARABLE_KERNEL_SIDE, for a plain convolution (stride 1, no padding,
    no dilation: filter2d pads itself); None otherwise. Its two passes are the same function as
    the 2-D kernel up to float32 roundings (a few float32 ulps of the sum). A filtered image
    narrowed moves by 1 half ulp where its float32 value lay that close to a rounding boundary
    (0.2% of the elements at most); ``RandomElasticTransform``'s blurred noise (1.1 of its 1.4 s)
    moves where the image is sampled, which keeps the result as close to float64 as the release's
    narrowed, to 1 half ulp (docs/half_at_scale.md, "Error bound")."""
    if weight.dtype != torch.float32 or weight.dim() != 4 or weight.shape[1] != 1:
        return None
    kernels, height, width = weight.shape[0], weight.shape[2], weight.shape[3]
    if height < SEPARABLE_KERNEL_SIDE or width < SEPARABLE_KERNEL_SIDE:
        return None
    if stride not in (1, (1, 1), [1, 1]) or padding not in (0, (0, 0), [0, 0]) \
            or dilation not in (1, (1, 1), [1, 1]):
        return None
    taps = weight.reshape(kernels, height, width)
    peak = taps.reshape(kernels, -1).abs().argmax(1)
    which = torch.arange(kernels, device=weight.device)
    peak_row, peak_column = peak // width, peak % width
    column = taps[which, :, peak_column]
    row = taps[which, peak_row, :] / taps[which, peak_row, peak_column][:, None]
    rebuilt = column[:, :, None] * row[:, None, :]
    # An all-zero or non-finite kernel divides into NaN and fails the comparison.
    if not bool(((rebuilt - taps).abs() <= RANK_ONE_TOLERANCE * taps.abs()).all()):
        return None
    return column.reshape(kernels, 1, height, 1), row.reshape(kernels, 1, 1, width)


def neighbour_kernels(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                      padding: Any, dilation: Any, groups: int) -> bool:
    """A float32 CPU convolution of one-channel planes with 3x3 kernels that each pick one
    neighbour (a single 1, eight 0s), zero-padded by 1: canny's hysteresis (8 kernels, one per
    neighbour, every iteration of its loop), wanting no gradient."""
    return (
        type(input) is torch.Tensor
        and type(weight) is torch.Tensor
        and input.dtype == torch.float32
        and weight.dtype == torch.float32
        and input.device.type == "cpu"
        and weight.device.type == "cpu"
        and input.dim() == 4
        and input.shape[1] == 1
        and tuple(weight.shape[1:]) == (1, 3, 3)
        and bias is None
        and groups == 1
        and stride in (1, (1, 1), [1, 1])
        and padding in (1, (1, 1), [1, 1])
        and dilation in (1, (1, 1), [1, 1])
        and not (torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad))
        and bool(((weight == 0) | (weight == 1)).all())
        and bool(((weight == 1).sum((1, 2, 3)) == 1).all())
    )


def neighbours_by_shifts(original: Any, input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``neighbour_kernels``' convolution as the picked neighbours themselves: each output plane is
    the zero-padded input shifted, plus +0.0. The convolution sums 1 * x and eight 0 * y, which is
    x exactly (a -0.0 comes out +0.0, as x + 0.0 gives it) where every value is finite and none
    subnormal (a flushing kernel would zero it); anything else is the convolution's own. canny's
    hysteresis on 4x1x1024x1024: the 8-kernel convolution is half its loop's time (measured)."""
    # Read from the bits, not compared as floats: with denormals flushed (torch.set_flush_denormal,
    # DAZ) a subnormal compares equal to 0, yet the shift would keep it where the convolution may not.
    bits = input.contiguous().view(torch.int32)
    exponent = bits & 0x7F800000
    finite_and_normal = (exponent != 0x7F800000) & ((exponent != 0) | ((bits & 0x7FFFFFFF) == 0))
    if not bool(finite_and_normal.all()):
        return original(input, weight, None, 1, 1, 1, 1)
    del bits, exponent, finite_and_normal
    height, width = input.shape[2], input.shape[3]
    padded = torch.nn.functional.pad(input, (1, 1, 1, 1))
    picked = weight.reshape(weight.shape[0], 9).argmax(1).tolist()
    out = torch.empty((input.shape[0], weight.shape[0], height, width), dtype=input.dtype, device=input.device)
    for k, position in enumerate(picked):
        row, column = divmod(position, 3)
        torch.add(padded[:, 0, row : row + height, column : column + width], 0.0, out=out[:, k])
    return out


def _float32_mode_dtypes() -> Tuple[torch.dtype, ...]:
    """The half dtypes whose CPU computations take float32 now (``networks_cpu_half``'s modes)."""
    # networks_cpu_half owns the modes and imports this module (cpu_has_avx512_fp16): read from
    # the loaded module, not imported (no import circle). Not loaded: no dtype is widened here.
    modes = sys.modules.get(f"{__package__}.networks_cpu_half")
    return modes.promoted_dtypes() if modes is not None else ()


def build_conv2d(original: Any) -> Any:
    """``F.conv2d`` as kornia's code calls it: a hang-prone float16 convolution (where the hang
    workaround is on), and any half CPU convolution of a dtype this torch has no conv2d kernel for
    (torch 2.1: float16), runs in float32 (inputs widened exactly) and its output is narrowed once;
    every other call is torch's own. Generated with the two conditions written out (TorchScript
    compiles the kornia functions that call it, and dynamo inlines it; ``BroadcastingList2`` as
    torch's own functional signatures use)."""
    from .._codegen import define, dtype_condition
    from .._kernels import lacking

    no_kernel = lacking(("conv2d",))
    hang = _hang_finding().needed
    source = CONV2D_SOURCE.format(
        hang="hang_prone_conv(input, weight)" if hang else "False",
        no_kernel=dtype_condition("input", no_kernel) if no_kernel else "False",
        autocast_hang="hang_prone_under_autocast(input, weight)" if hang else "False",
        at_scale="True",
    )
    namespace = {"torch": torch, "Optional": Optional, "BroadcastingList2": BroadcastingList2,
                 "hang_prone_conv": hang_prone_conv, "hang_prone_under_autocast": hang_prone_under_autocast,
                 "autocast_on": autocast_on, "autocast_off": autocast_off, "_halfpatch_original": original,
                 "is_compiling": is_compiling, "depthwise_on_cpu": depthwise_on_cpu,
                 "FLOAT32_EVALUATION": FLOAT32_EVALUATION,
                 "depthwise_at_scale": depthwise_at_scale, "neighbour_kernels": neighbour_kernels,
                 "neighbours_by_shifts": neighbours_by_shifts}
    conv2d = define(source, "conv2d", namespace, "filters_conv_hang torch.nn.functional:conv2d")
    conv2d.__doc__ = original.__doc__
    conv2d.__module__ = __name__  # the engine gives it the original's identity when installing
    return conv2d


# kornia's other float16 depthwise convolutions with a side >= 15, measured hanging here:
# MS_SSIMLoss (33x33 Gaussian masks by default, one group per channel), blur_pool2d/
# max_blur_pool2d with a kernel of 15 or more; and whatever calls F.conv2d in a release or a
# module imported later. Kornia's calls only: the module views of the engine.
CONV2D_TARGET = Target(
    ("torch.nn.functional:conv2d",),
    build_conv2d,
    scope=SCOPE_KORNIA,
    reason="float16 depthwise conv2d with a kernel side >= 15 never returns in oneDNN on avx512_fp16 CPUs: "
    "kornia's calls (MS_SSIMLoss, blur_pool2d, ...) convolve in float32, narrowed once",
)


def _hang_finding() -> Finding:
    """Whether the hang workaround is on: forced by the variable, else the CPU's avx512_fp16."""
    setting = options_manifest.resolve(HANG, {})  # the variable as it is now
    if setting.value == "off":
        return not_needed(f"{HANG.variable}=off")
    if setting.value == "on":
        return bug_present(f"forced by {HANG.variable}=on")
    note = f" ({setting.problem}: auto)" if setting.problem else ""
    if cpu_has_avx512_fp16():
        return bug_present(f"this CPU reports avx512_fp16: float16 depthwise 1xk convolutions (k >= 15) hang in oneDNN{note}")
    return not_needed(f"this CPU does not report avx512_fp16{note}")


def hang_gate() -> Finding:
    """The gate of the filter2d and pyramid rows: they exist for the hang only (where the fix is
    applied for a missing conv2d kernel alone, the conv2d target widens every such call)."""
    return _hang_finding()


def probe(originals: Sequence[Any]) -> Finding:
    """No convolution is run: a probe that hits the bug never returns. The hang decides; where
    there is none, a torch without a half CPU conv2d kernel (torch 2.1: float16, found by the
    kernel probe's tiny depthwise convolution) still needs kornia's convolutions widened."""
    hang = _hang_finding()
    if hang.needed:
        return hang
    from .._kernels import describe

    needed, reason = describe(("conv2d",))
    if needed:
        return bug_present(f"{reason}: kornia's convolutions in that dtype run in float32, narrowed once ({hang.reason})")
    return bug_present(f"{AT_SCALE} ({hang.reason})")


# Why the conv2d target goes in on every CPU (depthwise_at_scale).
AT_SCALE = ("kornia's depthwise CPU convolutions of half images (and of the shim's float32 evaluations of them) take "
            "NCHW paths 3-7x slower than channels-last, float16 without half arithmetic torch's slow path (5.8 s for "
            "box_blur 9x9 on 4x3x1024x1024): channels-last, in float32 where the dtype has no arithmetic here")


FIX = Fix(
    name="filters_conv_hang",
    targets=(replace(FILTER_ROW.target(), gate=hang_gate), replace(PYRAMID_ROW.target(), gate=hang_gate), CONV2D_TARGET),
    probe=probe,
    demonstration="kornia_halfpatch.demos.filters_conv_hang:demonstrate",
    devices=("cpu",),
)
