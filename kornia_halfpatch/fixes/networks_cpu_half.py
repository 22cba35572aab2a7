"""Half networks on CPU: the convolutional trunk in float32 where the CPU has no arithmetic in the half dtype (docs/fixes/networks_cpu_half.md).

On a CPU without native float16 arithmetic (no ``avx512_fp16``/``amx_fp16`` on x86, no FP16
arithmetic on aarch64) torch runs float16 convolutions through a slow path: SOSNet and HardNet
take 26-36x their float32 time. Without bfloat16 arithmetic (no ``avx512_bf16``/``amx_bf16`` on
x86, no BF16 on aarch64) bfloat16 is as slow (7-39x float32 on an AVX2 CPU). Kornia's learned
modules inherit it in every release and in 0.9.0.

``apply(cpu_half=...)`` / ``KORNIA_HALFPATCH_CPU_HALF`` choose how they compute float16 and
bfloat16 on CPU:

* ``"native"``: as the release does (half convolutions). Nothing is installed.
* ``"float32"``: a float16 or bfloat16 CPU input to a module whose parameters have that dtype
  runs the module's own forward on the input widened to float32, with float32 copies of its
  parameters and buffers (``torch.func.functional_call``), and the output is narrowed once:
  bitwise the module's float32 forward, ``copy.deepcopy(m).float()(x.float()).to(dtype)``. The
  copies are cached per module while no gradient is needed and rebuilt when a parameter or
  buffer changes (its version counter, storage, dtype or device); with gradients the widening
  happens inside the graph, so gradients reach the half parameters in their own dtype, the
  float32 gradient narrowed once (by the cast's backward). For bfloat16 this is also what makes
  the gradients right: native bfloat16 weight gradients of HyNet and HardNet8 are 7-14% off
  (relative L2) in every release and 0.9.0; the float32 gradient narrowed once is 0.2% off.
* ``"auto"`` (default): per dtype, ``"native"`` when the CPU reports arithmetic in it, else
  ``"float32"``. ``KORNIA_HALFPATCH_CPU_NATIVE_HALF=1|0`` and
  ``KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16=1|0`` override what the CPU reports (for tests).

Where it hooks: each row class gets its own ``_call_impl`` (the method ``nn.Module.__call__``
runs), not a new ``forward``. feature_descriptors already replaces the ``forward`` of SOSNet, HyNet,
HardNet and HardNet8; a second replacement of the same attribute would make the result depend on
the order of apply/revert. The ``_call_impl`` hook runs the module once more in float32, through
whatever ``forward`` is installed (feature_descriptors's passes float32 to the release's), so the
two fixes compose in any order and each reverts alone. The class never held ``_call_impl``
itself; revert deletes it again. ``forward`` called directly and TorchScript (which compiles
``forward``, never ``_call_impl``) run natively. A half dtype whose mode is native (auto on a CPU
with its arithmetic), float32/float64, CUDA and MPS inputs take the release's path untouched.
"""

from __future__ import annotations

import dataclasses
import platform
import types
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import _options as options_manifest
from .. import _probe_cache as probe_cache
from .._model import Finding, Fix, Target, bug_present, not_needed
from .._torch_compat import FUNCTIONAL_CALL_TRACEABLE, cpu_autocast_enabled, cpu_capabilities, is_compiling
from .filters_conv_hang import cpu_has_avx512_fp16

NAME = "networks_cpu_half"  # the fix
CPU_HALF = options_manifest.CPU_HALF  # the apply() option cpu_half and KORNIA_HALFPATCH_CPU_HALF
MODES = CPU_HALF.choices  # auto, native, float32

# --------------------------------------------------------------------------------------------
# The table: kornia's convolutional nn.Modules taking images or patches, per release. A module
# reached through one of these (a submodule of a row: KeyNet's _FeatureExtractor, the DISK Unet's
# blocks) or holding one (LAFOrienter, the LocalFeature pipelines, KeyNetDetector, DeDoDe) runs
# in float32 through it. Every candidate is optional: each release has a subset.

ROW_CLASSES: Tuple[Tuple[str, ...], ...] = (
    ("kornia.feature.sosnet:SOSNet",),
    ("kornia.feature.hardnet:HardNet",),
    ("kornia.feature.hardnet:HardNet8",),
    ("kornia.feature.hynet:HyNet",),
    ("kornia.feature.tfeat:TFeat",),
    ("kornia.feature.keynet:KeyNet",),
    ("kornia.feature.orientation:OriNet",),
    ("kornia.feature.affine_shape:LAFAffNetShapeEstimator",),
    ("kornia.feature.disk.disk:DISK",),
    # DISK.detect calls its Unet directly, not DISK.__call__.
    ("kornia.feature.disk._unets.unet:Unet",),
    ("kornia.feature.dedode.detector:DeDoDeDetector",),
    ("kornia.feature.dedode.descriptor:DeDoDeDescriptor",),
    ("kornia.feature.aliked.aliked:ALIKED",),
    ("kornia.feature.xfeat:XFeatModel",),
    ("kornia.feature.sold2.backbones:SOLD2Net",),
    ("kornia.feature.loftr.backbone.resnet_fpn:ResNetFPN_8_2",),
    ("kornia.feature.loftr.backbone.resnet_fpn:ResNetFPN_16_4",),
    ("kornia.feature.defmo:DeFMO",),
    ("kornia.filters.dexined:DexiNed", "kornia.models.dexined:DexiNed"),
    ("kornia.contrib.face_detection:YuFaceDetectNet", "kornia.models.yunet.model:YuNet"),
    ("kornia.models.super_resolution.small_sr:SmallSRNet", "kornia.models.small_sr:SmallSRNet"),
)

REASON = (
    "half (float16/bfloat16) CPU forward with float32 copies of the weights on the widened input, narrowed "
    "once: half convolutions have no fast CPU path without arithmetic in that dtype (25-36x float32)"
)

# Conv-holding kornia classes that are not rows, and why (tests/test_fix_networks_cpu_half.py keeps this
# and ROW_CLASSES true against the installed release's source).
REACHED_THROUGH: Dict[str, str] = {
    # class -> the row whose instances hold it
    "kornia.feature.keynet:_FeatureExtractor": "KeyNet",
    "kornia.feature.disk._unets.blocks:Conv": "Unet",
    "kornia.feature.disk._unets.blocks:ThinUnetUpBlock": "Unet",
    "kornia.feature.dedode.vgg:VGG": "DeDoDeDetector",
    "kornia.feature.dedode.decoder:ConvRefiner": "DeDoDeDetector",
    "kornia.feature.dedode.transformer.layers.patch_embed:PatchEmbed": "DeDoDeDescriptor",
    "kornia.feature.aliked.aliked:ConvBlock": "ALIKED",
    "kornia.feature.aliked.aliked:ResBlock": "ALIKED",
    "kornia.feature.aliked.aliked:DeformableConv2d": "ALIKED",
    "kornia.feature.aliked.aliked:SDDH": "ALIKED",
    "kornia.feature.xfeat:BasicLayer": "XFeatModel",
    "kornia.feature.sold2.backbones:Bottleneck2D": "SOLD2Net",
    "kornia.feature.sold2.backbones:HourglassNet": "SOLD2Net",
    "kornia.feature.sold2.backbones:MultitaskHead": "SOLD2Net",
    "kornia.feature.sold2.backbones:PixelShuffleDecoder": "SOLD2Net",
    "kornia.feature.sold2.backbones:SuperpointDecoder": "SOLD2Net",
    "kornia.feature.sold2.backbones:SuperpointDescriptor": "SOLD2Net",
    "kornia.feature.defmo:EncoderDeFMO": "DeFMO",
    "kornia.feature.defmo:RenderingDeFMO": "DeFMO",
    "kornia.feature.defmo:ResNet": "DeFMO",
    "kornia.filters.dexined:CoFusion": "DexiNed",
    "kornia.filters.dexined:DoubleConvBlock": "DexiNed",
    "kornia.filters.dexined:SingleConvBlock": "DexiNed",
    "kornia.filters.dexined:UpConvBlock": "DexiNed",
    "kornia.filters.dexined:_DenseLayer": "DexiNed",
    "kornia.models.dexined:CoFusion": "DexiNed",
    "kornia.models.dexined:DoubleConvBlock": "DexiNed",
    "kornia.models.dexined:SingleConvBlock": "DexiNed",
    "kornia.models.dexined:UpConvBlock": "DexiNed",
    "kornia.models.dexined:_DenseLayer": "DexiNed",
    "kornia.contrib.face_detection:ConvDPUnit": "YuFaceDetectNet",
    "kornia.contrib.face_detection:Conv_head": "YuFaceDetectNet",
    "kornia.models.yunet.model:ConvDPUnit": "YuNet",
    "kornia.models.yunet.model:Conv_head": "YuNet",
}

_FIXED_FILTERS = "fixed (not learned) filters, no parameters: float16 depthwise filters are fast natively"
_TRANSFORMERS = (
    "transformer/ViT family: one patch-embedding convolution, compute dominated by attention and "
    "linear layers; not measured for this issue, left native"
)
EXEMPT: Dict[str, str] = {
    "kornia.feature.siftdesc:SIFTDescriptor": "feature_descriptors computes its float16 forward in float32 already",
    "kornia.feature.siftdesc:DenseSIFTDescriptor": "feature_descriptors computes its float16 forward in float32 already",
    "kornia.feature.orientation:PatchDominantGradientOrientation": _FIXED_FILTERS,
    "kornia.geometry.subpix.nms:NonMaximaSuppression2d": _FIXED_FILTERS,
    "kornia.geometry.transform.pyramid:ScalePyramid": _FIXED_FILTERS,
    "kornia.losses.hausdorff:_HausdorffERLossBase": "a loss with fixed kernels, not a network",
    "kornia.losses.ms_ssim:MS_SSIMLoss": "a loss with fixed Gaussian kernels, not a network",
}
_TRANSFORMER_PREFIXES = (
    "kornia.contrib.models.sam.", "kornia.models.sam.", "kornia.models.sam3.",
    "kornia.contrib.models.tiny_vit:", "kornia.models.tiny_vit:",
    "kornia.contrib.vit:", "kornia.models.vit:", "kornia.contrib.vit_mobile:", "kornia.models.vit_mobile:",
    "kornia.contrib.models.rt_detr.", "kornia.models.rt_detr.",
    "kornia.contrib.models.efficient_vit.", "kornia.models.efficient_vit.",
    "kornia.contrib.models.common:", "kornia.models.common:",
    "kornia.models.kimi_vl.", "kornia.models.qwen25.", "kornia.models.siglip2.", "kornia.models.processors.",
    "kornia.models.paligemma.", "kornia.models.smolvlm2.",
)


def exemption(qualified: str) -> Optional[str]:
    """Why a conv-holding kornia class (``"module:Class"``) is not a row, or None."""
    if qualified in EXEMPT:
        return EXEMPT[qualified]
    if qualified.startswith(_TRANSFORMER_PREFIXES):
        return _TRANSFORMERS
    return None


# --------------------------------------------------------------------------------------------
# Mode: apply() option beats the environment beats "auto"; auto asks the CPU's capabilities.

_given: Dict[str, Any] = {}  # the apply() options configure() was last given


def _capabilities() -> Dict[str, Any]:
    return cpu_capabilities()


def _aarch64_cpuinfo_features() -> List[str]:
    """The words of the first "Features" line of Linux's /proc/cpuinfo (aarch64), or none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("features"):
                    return line.split()
    except OSError:
        pass
    return []


def _aarch64_has_fp16_arithmetic() -> bool:
    if platform.system() == "Darwin":
        return True  # every Apple silicon core implements FEAT_FP16
    return "asimdhp" in _aarch64_cpuinfo_features()


_half_cpu_convolution: List[bool] = []  # the answer, once known (the torch build is the process's)


def _torch_has_half_cpu_convolution() -> bool:
    # torch 2.1 raises '"slow_conv2d_cpu" not implemented for 'Half'' whatever the CPU: native
    # float16 is then no choice, the float32 path is the one that runs. Asked once per process:
    # status() reads it in every report, and the call costs milliseconds (oneDNN sets up a
    # primitive for it), which every testing.isolated() block would pay twice.
    if not _half_cpu_convolution:
        _half_cpu_convolution.append(
            probe_cache.remembered("networks_cpu_half:half_cpu_convolution", _probe_half_cpu_convolution, bool, probe_cache.a_bool)
        )
    return _half_cpu_convolution[0]


def _probe_half_cpu_convolution() -> bool:
    one = torch.ones(1, 1, 1, 1, dtype=torch.float16)
    try:
        torch.nn.functional.conv2d(one, one)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def cpu_native_half() -> Tuple[bool, str]:
    """(does this CPU compute float16 natively, why we think so): from reported capabilities,
    never from a timing. ``KORNIA_HALFPATCH_CPU_NATIVE_HALF`` overrides."""
    forced = options_manifest.read_switch(options_manifest.CPU_NATIVE_HALF)
    if forced is not None:
        return forced, f"{options_manifest.CPU_NATIVE_HALF.variable}={options_manifest.CPU_NATIVE_HALF.raw()}"
    if not _torch_has_half_cpu_convolution():
        return False, f"torch {torch.__version__} has no float16 CPU convolution"
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        found = _aarch64_has_fp16_arithmetic()
        return found, "this CPU reports FP16 arithmetic (asimdhp)" if found else "this CPU reports no FP16 arithmetic (asimdhp)"
    avx512_fp16 = cpu_has_avx512_fp16()  # shared with filters_conv_hang
    amx_fp16 = bool(_capabilities().get("amx_fp16", False))
    if avx512_fp16 or amx_fp16:
        flags = " and ".join(name for name, on in (("avx512_fp16", avx512_fp16), ("amx_fp16", amx_fp16)) if on)
        return True, f"this CPU reports {flags}"
    return False, "this CPU reports neither avx512_fp16 nor amx_fp16"


def _aarch64_has_bf16_arithmetic() -> bool:
    if platform.system() == "Darwin":
        return _darwin_sysctl_flag("hw.optional.arm.FEAT_BF16")  # M2 and later; not M1
    return "bf16" in _aarch64_cpuinfo_features()


def _darwin_sysctl_flag(name: str) -> bool:
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        value = ctypes.c_int(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        if libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
            return False
        return bool(value.value)
    except Exception:  # noqa: BLE001 - no answer: taken as no bfloat16 arithmetic (float32 path)
        return False


def cpu_native_bfloat16() -> Tuple[bool, str]:
    """(does this CPU compute bfloat16 natively, why we think so): from reported capabilities,
    never from a timing. ``KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16`` overrides.

    Arithmetic, not emulation: oneDNN also runs bfloat16 convolutions on AVX-512 CPUs without
    ``avx512_bf16`` by converting to float32, which costs what the float32 path costs at best;
    only ``avx512_bf16``/``amx_bf16`` (x86) or BF16 (aarch64) make native bfloat16 the faster one."""
    forced = options_manifest.read_switch(options_manifest.CPU_NATIVE_BFLOAT16)
    if forced is not None:
        return forced, f"{options_manifest.CPU_NATIVE_BFLOAT16.variable}={options_manifest.CPU_NATIVE_BFLOAT16.raw()}"
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        found = _aarch64_has_bf16_arithmetic()
        return found, "this CPU reports BF16 arithmetic" if found else "this CPU reports no BF16 arithmetic"
    capabilities = _capabilities()
    flags = [name for name in ("avx512_bf16", "amx_bf16") if capabilities.get(name, False)]
    if flags:
        return True, f"this CPU reports {' and '.join(flags)}"
    return False, "this CPU reports neither avx512_bf16 nor amx_bf16"


_NATIVE_DETECTORS = {"float16": cpu_native_half, "bfloat16": cpu_native_bfloat16}
HALF_DTYPES = ("float16", "bfloat16")


def resolve_modes() -> Dict[str, Tuple[str, str]]:
    """Per half dtype name: (mode in force, why), mode ``"native"`` or ``"float32"``."""
    setting = options_manifest.resolve(CPU_HALF, _given)  # the environment read now
    chosen, note = setting.value, f"; {setting.problem}: ignored" if setting.problem else ""
    if CPU_HALF.name in _given:
        source = f"apply(cpu_half={chosen!r})"
    elif setting.source == CPU_HALF.variable:
        source = f"{CPU_HALF.variable}={chosen}"
    else:
        source = "default"
    modes = {}
    for dtype in HALF_DTYPES:
        if chosen != "auto":
            modes[dtype] = (chosen, f"{source}{note}")
        else:
            native, why = _NATIVE_DETECTORS[dtype]()
            modes[dtype] = ("native" if native else "float32", f"auto ({source}): {why}{note}")
    return modes


def promoted_dtypes() -> Tuple[torch.dtype, ...]:
    """The half dtypes whose CPU calls take the float32 path now."""
    return tuple(getattr(torch, name) for name, (mode, _) in resolve_modes().items() if mode == "float32")


def _why(modes: Dict[str, Tuple[str, str]]) -> str:
    """The reason, once when both dtypes have the same one (a forced mode), else each dtype's
    mode and reason (auto asks the CPU about each)."""
    (mode16, why16), (mode_bf, why_bf) = modes["float16"], modes["bfloat16"]
    if why16 == why_bf:
        return why16
    return f"float16: {mode16}, {why16}; bfloat16: {mode_bf}, {why_bf}"


def configure(given: Dict[str, Any]) -> None:
    """Run by apply(): keep the apply() options given (the manifest checked them); the
    environment is read when the mode is asked for."""
    global _given
    options_manifest.resolve(CPU_HALF, given)  # raises for a bad value
    _given = dict(given)


def probe(originals: Sequence[Any]) -> Finding:
    modes = resolve_modes()
    if all(mode == "native" for mode, _ in modes.values()):
        return not_needed(f"native float16 and bfloat16 in force: {_why(modes)}")
    return bug_present(f"float32 mode in force: {_why(modes)}")


def describe() -> str:
    modes = resolve_modes()
    from .._lookups import fix_installed

    promoted = [dtype for dtype, (mode, _) in modes.items() if mode == "float32"]
    if fix_installed(NAME) and promoted:
        scope = "" if len(promoted) == len(modes) else f" for {' and '.join(promoted)}"
        text = f"float32 in force{scope} ({_why(modes)})"
    elif not promoted:
        text = f"native in force ({_why(modes)})"
    else:
        text = f"native in force (cpu_half not applied; its modes would be {_why(modes)})"
    cached = cached_float32_bytes()
    if cached:
        text += f"; cached float32 weights: {cached / 2**20:.1f} MiB"
    return text


# --------------------------------------------------------------------------------------------
# The float32 path


# module -> (key of the float16 state it was built from, float32 state)
_cache: "weakref.WeakKeyDictionary[torch.nn.Module, Tuple[Tuple[Any, ...], Dict[str, torch.Tensor]]]" = weakref.WeakKeyDictionary()


def cached_float32_bytes(module: Optional[torch.nn.Module] = None) -> int:
    """Extra memory held by the cached float32 copies: of ``module``, or of all modules."""
    total = 0
    entries = list(_cache.values()) if module is None else [e for e in [_cache.get(module)] if e is not None]
    for _, state in entries:
        seen = set()
        for tensor in state.values():
            if tensor.dtype == torch.float32 and id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
    return total


def _first_half_cpu_tensor(value: Any, dtypes: Tuple[torch.dtype, ...]) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value if value.dtype in dtypes and value.device.type == "cpu" else None
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_half_cpu_tensor(item, dtypes)
            if found is not None:
                return found
    elif isinstance(value, dict):
        return _first_half_cpu_tensor(list(value.values()), dtypes)
    return None


def float32_wanted(
    module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], dtypes: Tuple[torch.dtype, ...] = (torch.float16,)
) -> Optional[torch.dtype]:
    """The half dtype to compute in float32, or None: a CPU input in one of ``dtypes`` (the
    promoted half dtypes) and CPU parameters of that same dtype (a module left in float32 and fed
    half, or one on CUDA/MPS, takes the release's path)."""
    if not args and not kwargs:
        return None
    first = args[0] if args else None
    # The common miss (float32 input) decided on the first argument alone.
    if isinstance(first, torch.Tensor) and first.dtype not in dtypes and len(args) == 1 and not kwargs:
        return None
    found = _first_half_cpu_tensor(args, dtypes)
    if found is None:
        found = _first_half_cpu_tensor(kwargs, dtypes)
    if found is None:
        return None
    half = found.dtype
    if torch.jit.is_tracing():
        # torch.func.functional_call refuses to run under torch.jit.trace ("The stateless API
        # can't be used with Jitted modules"): the trace records the release's float16 forward,
        # as torch.jit.script compiles it, so that what traced unpatched still traces.
        return None
    if not FUNCTIONAL_CALL_TRACEABLE and is_compiling():
        # The float32 path runs through torch.func.functional_call, which dynamo before torch
        # 2.6 cannot trace: the compiled graph takes the release's float16 path (native float16
        # arithmetic), so that what compiled unpatched still compiles.
        return None
    parameter = _first_parameter(module)
    if parameter is None or parameter.dtype != half or parameter.device.type != "cpu":
        return None
    # Under CPU autocast the user chose the compute dtype: the release's path.
    return None if _cpu_autocast_enabled() else half


def _first_parameter(module: torch.nn.Module) -> Optional[torch.Tensor]:
    """``next(module.parameters(), None)`` (the module's own parameters first, then its
    children's, depth first) without a generator: dynamo before torch 2.9 cannot trace
    ``next()`` on the generator ``parameters()`` returns, and a fullgraph compilation of the
    network failed on this line only."""
    for parameter in module._parameters.values():
        if parameter is not None:
            return parameter
    for child in module._modules.values():
        if child is not None:
            found = _first_parameter(child)
            if found is not None:
                return found
    return None


def _cpu_autocast_enabled() -> bool:
    # Chosen once per torch (the argument appeared in torch 2.4): no exception handler in the
    # path dynamo traces.
    return cpu_autocast_enabled()


def _widen(value: Any, half: torch.dtype) -> Any:
    # Widening float16 or bfloat16 to float32 is exact: the float32 forward sees the very same values.
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype == half else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_widen(item, half) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_widen(item, half) for item in value)
    if isinstance(value, dict):
        return {key: _widen(item, half) for key, item in value.items()}
    return value


def _narrow(value: Any, half: torch.dtype) -> Any:
    # One rounding, at the end; integer and boolean outputs (indices, masks) are left alone.
    if isinstance(value, torch.Tensor):
        return value.to(half) if value.is_floating_point() else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_narrow(item, half) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_narrow(item, half) for item in value)
    if isinstance(value, dict):
        return type(value)((key, _narrow(item, half)) for key, item in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # DISKFeatures
        fields = {f.name: _narrow(getattr(value, f.name), half) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value


def _tensors(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def _state_key(tensors: Dict[str, torch.Tensor]) -> Optional[Tuple[Any, ...]]:
    try:
        return tuple((name, id(t), t._version, t.data_ptr(), t.dtype, t.device) for name, t in tensors.items())
    except RuntimeError:  # inference tensors have no version counter: never cached
        return None


def _widened_state(tensors: Dict[str, torch.Tensor], half: torch.dtype) -> Dict[str, torch.Tensor]:
    # Tied tensors (one Parameter under two names) stay one tensor; integer buffers
    # (num_batches_tracked) are the module's own, so BatchNorm's counter still advances.
    if is_compiling():
        return _widened_state_traced(tensors, half)
    widened: Dict[int, torch.Tensor] = {}
    state = {}
    for name, tensor in tensors.items():
        if tensor.dtype == half:
            if id(tensor) not in widened:
                widened[id(tensor)] = tensor.float()
            state[name] = widened[id(tensor)]
        else:
            state[name] = tensor
    return state


def _widened_state_traced(tensors: Dict[str, torch.Tensor], half: torch.dtype) -> Dict[str, torch.Tensor]:
    # As _widened_state, with tied tensors found by identity in a list: dynamo before torch 2.9
    # cannot trace id() of a tensor (compiled once per graph, so the quadratic search is free).
    widened: List[Tuple[torch.Tensor, torch.Tensor]] = []
    state = {}
    for name, tensor in tensors.items():
        if tensor.dtype == half:
            wide = None
            for original, copy in widened:
                if original is tensor:
                    wide = copy
            if wide is None:
                wide = tensor.float()
                widened.append((tensor, wide))
            state[name] = wide
        else:
            state[name] = tensor
    return state


def _float32_state(module: torch.nn.Module, tensors: Dict[str, torch.Tensor], half: torch.dtype) -> Dict[str, torch.Tensor]:
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors.values())
    if grad or torch.jit.is_tracing() or is_compiling():
        # In the graph (gradients reach the half parameters; a trace or a compiled graph
        # records the casts instead of baking the copies in as constants).
        return _widened_state(tensors, half)
    key = _state_key(tensors)  # holds every tensor's dtype: a float16 and a bfloat16 state never mix
    if key is None:
        return _widened_state(tensors, half)
    cached = _cache.get(module)
    if cached is not None and cached[0] == key:
        return cached[1]
    with torch.no_grad():
        state = _widened_state(tensors, half)
    _cache[module] = (key, state)
    return state


def run_in_float32(
    module: torch.nn.Module,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    half: torch.dtype = torch.float16,
    narrow: bool = True,
) -> Any:
    tensors = _tensors(module)
    state = _float32_state(module, tensors, half)
    output = torch.func.functional_call(module, state, _widen(args, half), _widen(kwargs, half), tie_weights=True, strict=False)
    if module.training:
        # BatchNorm updated its running statistics in the float32 copies: the module's own
        # half buffers get them (narrowed), as a half forward would have updated them.
        with torch.no_grad():
            for name, tensor in module.named_buffers():
                wide = state.get(name)
                if wide is not None and wide is not tensor and tensor.is_floating_point():
                    tensor.copy_(wide)
    return _narrow(output, half) if narrow else output


# Each hook computes in float32 the dtypes fixed when it was built (after configure), as the mode
# is: a bfloat16 call on a CPU with bfloat16 arithmetic keeps the release's path under auto (a
# restore re-installs the hooks built then, with their dtypes). A hook reads them from a module
# constant, not a closure cell: torch 2.1's dynamo guards a hook's closure cells through
# ``module.__call__.__func__.__closure__`` (Module's own ``__call__``, which has none) and fails
# to compile the caller's function ("'NoneType' object is not subscriptable"). So there is one
# template per set of dtypes, each a plain function over module globals.
_FLOAT16_ONLY = (torch.float16,)
_BFLOAT16_ONLY = (torch.bfloat16,)
_BOTH_HALF = (torch.float16, torch.bfloat16)
_NO_HALF: Tuple[torch.dtype, ...] = ()


def _hooked_call(self: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], dtypes: Tuple[torch.dtype, ...]) -> Any:
    half = float32_wanted(self, args, kwargs, dtypes)
    if half is not None:
        return run_in_float32(self, args, kwargs, half)
    return torch.nn.Module._call_impl(self, *args, **kwargs)


def _call_impl_float16(self, *args, **kwargs):
    return _hooked_call(self, args, kwargs, _FLOAT16_ONLY)


def _call_impl_bfloat16(self, *args, **kwargs):
    return _hooked_call(self, args, kwargs, _BFLOAT16_ONLY)


def _call_impl_both(self, *args, **kwargs):
    return _hooked_call(self, args, kwargs, _BOTH_HALF)


def _call_impl_neither(self, *args, **kwargs):
    return _hooked_call(self, args, kwargs, _NO_HALF)


_TEMPLATES = {
    _FLOAT16_ONLY: _call_impl_float16,
    _BFLOAT16_ONLY: _call_impl_bfloat16,
    _BOTH_HALF: _call_impl_both,
    _NO_HALF: _call_impl_neither,
}


def build_call_impl(original: Any) -> Any:
    chosen = promoted_dtypes()
    dtypes = tuple(dtype for dtype in _BOTH_HALF if dtype in chosen)
    if original is torch.nn.Module._call_impl:
        # Every row class in every release: a function of its own per class (the engine installs
        # and reverts each), the template's code over the module's globals, no closure.
        template = _TEMPLATES[dtypes]
        hook = types.FunctionType(template.__code__, template.__globals__, "_call_impl", None, None)
        hook.__qualname__ = "_call_impl"
        hook.__module__ = template.__module__
        return hook

    def _call_impl(self, *args, **kwargs):
        half = float32_wanted(self, args, kwargs, dtypes)
        if half is not None:
            return run_in_float32(self, args, kwargs, half)
        return original(self, *args, **kwargs)

    return _call_impl


def _targets() -> Tuple[Target, ...]:
    return tuple(
        Target(tuple(f"{path}._call_impl" for path in paths), build_call_impl, optional=True, reason=REASON)
        for paths in ROW_CLASSES
    )


FIX = Fix(
    name=NAME,
    targets=_targets(),
    probe=probe,
    probe_cache=False,
    configure=configure,
    describe=describe,
    demonstration="kornia_halfpatch.demos.networks_cpu_half:demonstrate",
    devices=("cpu",),
)
