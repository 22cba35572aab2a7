"""Kornia 0.9.0's descriptors on the same weights: the oracle of the ``feature_descriptors`` tests.

Pretrained weights cannot be downloaded here, so every network gets seeded weights built by
:func:`seeded_state_dict` (pure torch, independent of kornia, identical in every environment;
a recorded checksum proves it). Two configurations per network:

* ``untrained``: PyTorch-default-scale convolutions, kornia's default BatchNorm statistics
  (mean 0, variance 1) and FRN/TLU parameters, like ``SOSNet()`` in kornia's own tests. A
  constant patch then reaches the final normalization as an exact zero vector (the NaN case),
  and the pre-normalization descriptor is small, which is where a half-precision norm loses
  accuracy (0.9.0's "2.15e-3 -> 2.28e-4" SOSNet figure is of this kind).
* ``trained``: the same convolutions with randomised FRN/TLU parameters and BatchNorm running
  statistics calibrated once, in float64, by a train-mode pass over seeded patches, so activations
  have realistic magnitudes and BatchNorm really subtracts a mean.

:func:`record` (committed as ``feature_descriptors.pt``) holds inputs only: the calibrated statistics
(a few KiB) and the weight checksums. They are recorded because they are shared inputs, not
compared outputs: whatever machine calibrated them, every environment then loads the same bits.

:func:`live` holds 0.9.0's outputs, computed on the machine that runs the tests (convolutions and
matmuls round differently per instruction set, in every dtype): per network, configuration and
dtype, 0.9.0's descriptors of the configuration's patches (:func:`case_input`) and of the
degenerate patches ``torch.full((2, 1, 32, 32), v)``, v in 0.0 and 0.5; float32 too for
``trained`` (to show the releases agree in float32, which is what makes 0.9.0 an oracle here).
For SOSNet and HyNet also 0.9.0's half max abs error against a float64 run of the same weights on
the ``untrained`` patches.

SIFTDescriptor and DenseSIFTDescriptor are not here: 0.9.0 changed their float32 results (and
DenseSIFT's shape), so the tests compare them with the installed release's float32 computation.
"""

from __future__ import annotations

import copy
import math
import zlib
from typing import Dict, Iterable, List, Tuple

import torch
import torch.nn.functional as F

SEED = 4224
NETWORKS = ("sosnet", "hynet_bias", "hynet_nobias", "hardnet", "hardnet8")
CONFIGS = ("untrained", "trained")
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = {**HALF, "float32": torch.float32}
DEGENERATE_VALUES = (0.0, 0.5)
PATCHES = 8  # descriptors stored per network, configuration and dtype


def make_network(name: str) -> torch.nn.Module:
    """The kornia module for ``name``, not pretrained; :func:`seeded_state_dict` supplies every
    tensor, so kornia's own initialisation does not matter (HardNet8's orthogonal init alone takes
    seconds on CPU, so it is built on the meta device and never initialised)."""
    import kornia.feature as KF

    if name == "hardnet8":
        with torch.device("meta"):
            module = KF.HardNet8(pretrained=False)
        return module.to_empty(device="cpu")
    constructors = {
        "sosnet": lambda: KF.SOSNet(pretrained=False),
        "hynet_bias": lambda: KF.HyNet(pretrained=False, is_bias=True),
        "hynet_nobias": lambda: KF.HyNet(pretrained=False, is_bias=False),
        "hardnet": lambda: KF.HardNet(pretrained=False),
    }
    return constructors[name]()


def _uniform(name: str, key: str, shape: Iterable[int], low: float, high: float) -> torch.Tensor:
    # One generator per tensor, seeded by its name: independent of module iteration order.
    generator = torch.Generator().manual_seed(SEED + zlib.crc32(f"{name}/{key}".encode()))
    return torch.rand(tuple(shape), generator=generator, dtype=torch.float64).mul(high - low).add(low).float()


def seeded_state_dict(name: str, module: torch.nn.Module, trained: bool) -> Dict[str, torch.Tensor]:
    """Every tensor of ``module``'s state: seeded convolutions (and FRN/TLU parameters when
    ``trained``), kornia's defaults elsewhere (BatchNorm statistics mean 0, variance 1)."""
    state: Dict[str, torch.Tensor] = {}
    for prefix, child in module.named_modules():
        kind = type(child).__name__
        dot = f"{prefix}." if prefix else ""
        if kind == "Conv2d":
            bound = 1.0 / math.sqrt(child.weight[0].numel())  # PyTorch's default scale
            state[f"{dot}weight"] = _uniform(name, f"{dot}weight", child.weight.shape, -bound, bound)
            if child.bias is not None:
                state[f"{dot}bias"] = _uniform(name, f"{dot}bias", child.bias.shape, -bound, bound)
        elif kind == "BatchNorm2d":
            state[f"{dot}running_mean"] = torch.zeros(child.num_features)
            state[f"{dot}running_var"] = torch.ones(child.num_features)
            state[f"{dot}num_batches_tracked"] = torch.tensor(0, dtype=torch.long)
        elif kind == "FilterResponseNorm2d":
            shape = child.weight.shape
            state[f"{dot}weight"] = _uniform(name, f"{dot}weight", shape, 0.75, 1.25) if trained else torch.ones(shape)
            state[f"{dot}bias"] = _uniform(name, f"{dot}bias", shape, -0.25, 0.25) if trained else torch.zeros(shape)
            state[f"{dot}eps"] = torch.full(child.eps.shape, child.init_eps)
        elif kind == "TLU":
            shape = child.tau.shape
            state[f"{dot}tau"] = _uniform(name, f"{dot}tau", shape, -0.75, -0.25) if trained else -torch.ones(shape)
    if hasattr(module, "components"):  # HardNet8's PCA projection
        bound = math.sqrt(3.0 / module.components.shape[0])
        state["components"] = _uniform(name, "components", module.components.shape, -bound, bound)
        state["mean"] = _uniform(name, "mean", module.mean.shape, -0.01, 0.01)
    missing = set(module.state_dict()) - set(state)
    if missing:
        raise KeyError(f"{name}: no seeded value for {sorted(missing)}")
    return state


def textured_patches(count: int, seed: int) -> torch.Tensor:
    """Smooth random textures in [0, 1] with per-patch contrast, float32 ``(count, 1, 32, 32)``."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(count, 1, 6, 6, generator=generator)
    smooth = F.interpolate(coarse, size=(32, 32), mode="bicubic", align_corners=False)
    noise = 0.05 * torch.randn(count, 1, 32, 32, generator=generator)
    contrast = 0.2 + 0.8 * torch.rand(count, 1, 1, 1, generator=generator)
    return (0.5 + contrast * (smooth + noise - 0.5)).clamp(0.0, 1.0)


def uniform_patches(count: int, seed: int) -> torch.Tensor:
    """``torch.rand`` patches in float64, as kornia's own tests draw them."""
    return torch.rand(count, 1, 32, 32, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def degenerate_patches(value: float) -> torch.Tensor:
    return torch.full((2, 1, 32, 32), value)


def calibrated_statistics(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """BatchNorm running statistics from a float64 train-mode pass (cumulative average)."""
    work = copy.deepcopy(module).double().train()
    for child in work.modules():
        if isinstance(child, torch.nn.Dropout):
            child.eval()
        if isinstance(child, torch.nn.BatchNorm2d):
            child.reset_running_stats()
            child.momentum = None
    with torch.no_grad():
        for seed in range(4):
            work(textured_patches(64, 1000 + seed).double())
    return {key: value.float() for key, value in work.state_dict().items() if ".running_" in key}


def checksum(state: Dict[str, torch.Tensor]) -> float:
    """Sum of absolute values of every floating-point tensor, exactly rounded.

    ``math.fsum`` rounds the exact sum once, so the result does not depend on summation order;
    ``Tensor.sum`` adds in an order chosen by the CPU's vector width and differs in the last bit
    from one instruction set to another.
    """
    values = [value.double().abs().flatten().tolist() for _, value in sorted(state.items()) if value.is_floating_point()]
    return math.fsum(x for chunk in values for x in chunk)


def statistics_from(recorded: Dict[str, object], name: str) -> Dict[str, torch.Tensor]:
    prefix = f"{name}/trained/stat/"
    return {key[len(prefix):]: value for key, value in recorded.items() if key.startswith(prefix)}


def build_network(name: str, config: str, recorded: Dict[str, object]) -> torch.nn.Module:
    """The network with the configuration's weights, float32, eval mode.

    ``recorded`` (the recorded inputs) supplies the calibrated statistics of the ``trained``
    configuration.
    """
    module = make_network(name)
    state = seeded_state_dict(name, module, trained=config == "trained")
    if config == "trained":
        state.update(statistics_from(recorded, name))
    module.load_state_dict(state, strict=True)
    return module.float().eval()


def cases(config: str) -> List[str]:
    return [("uniform" if config == "untrained" else "textured")] + [f"flat{v}" for v in DEGENERATE_VALUES]


def case_input(case: str) -> torch.Tensor:
    """float64 for ``uniform`` (the error figure compares against float64), float32 otherwise."""
    if case == "uniform":
        return uniform_patches(PATCHES, 3)
    if case == "textured":
        return textured_patches(PATCHES, 7)
    return degenerate_patches(float(case[len("flat"):]))


def describe(module: torch.nn.Module, patches: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    model = copy.deepcopy(module).to(dtype).eval()
    with torch.no_grad():
        return model(patches.to(dtype))


# (configuration, case) of the weight-gradient errors: realistic weights on texture and on a flat
# patch, and the untrained network's flat patch (an exact zero descriptor: the NaN case).
GRADIENT_CASES = (("trained", "textured"), ("trained", "flat0.0"), ("untrained", "flat0.0"))


def weight_gradient_error(module: torch.nn.Module, patches: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """How far the half network's weight gradients are from the float32 gradients of the same
    (half-rounded) weights and patches, for the loss sum(P * descriptors), P a seeded projection
    with entries exact in half: ``[max over parameters of max|g_half - g_32| / max|g_32| (0 where
    both are 0), non-finite half gradient entries, max |g_half| where g_32 is exactly 0]``. Run
    in whatever mode the caller's shim is in (native half kernels, or networks_cpu_half's float32)."""
    half = copy.deepcopy(module).to(dtype).eval()
    wide = copy.deepcopy(half).float().eval()
    x = patches.to(dtype)
    projection = None
    gradients = []
    for model, inputs in ((half, x), (wide, x.float())):
        model.zero_grad()
        out = model(inputs)
        if projection is None:
            generator = torch.Generator().manual_seed(SEED)
            projection = torch.randint(-16, 17, out.shape, generator=generator).float() / 16
        (out.float() * projection).sum().backward()
        gradients.append([p.grad for p in model.parameters()])
    worst, nonfinite, stray = 0.0, 0, 0.0
    for g_half, g_32 in zip(*gradients):
        if g_32 is None:
            continue
        a, b = g_half.double(), g_32.double()
        nonfinite += int((~torch.isfinite(a)).sum())
        a = a.nan_to_num(posinf=float("inf"), neginf=float("inf"))
        scale = b.abs().max().item()
        err = (a - b).abs().max().item()
        worst = max(worst, err / scale if scale > 0 else (0.0 if err == 0 else math.inf))
        zero = b == 0
        if bool(zero.any()):
            stray = max(stray, a[zero].abs().max().item())
    return torch.tensor([worst, float(nonfinite), stray], dtype=torch.float64)


def entries() -> List[Tuple[str, str, str, str]]:
    """(network, configuration, dtype name, case) of every stored descriptor."""
    out = []
    for name in NETWORKS:
        for config in CONFIGS:
            for dtype_name in DTYPES if config == "trained" else HALF:
                for case in cases(config):
                    out.append((name, config, dtype_name, case))
    return out


def record() -> Dict[str, object]:
    """The recorded inputs: calibrated statistics of the ``trained`` networks, weight checksums."""
    recorded: Dict[str, object] = {}
    for name in NETWORKS:
        template = make_network(name)
        template.load_state_dict(seeded_state_dict(name, template, trained=True), strict=True)
        for key, value in calibrated_statistics(template).items():
            recorded[f"{name}/trained/stat/{key}"] = value
        for config in CONFIGS:
            recorded[f"{name}/{config}/checksum"] = checksum(build_network(name, config, recorded).state_dict())
    return recorded


def live(recorded: Dict[str, object]) -> Dict[str, object]:
    """Kornia 0.9.0's descriptors on this machine, from the recorded inputs."""
    outputs: Dict[str, object] = {}
    modules = {}
    for name in NETWORKS:
        for config in CONFIGS:
            module = modules[name, config] = build_network(name, config, recorded)
            outputs[f"{name}/{config}/checksum"] = checksum(module.state_dict())
    for name, config, dtype_name, case in entries():
        module = modules[name, config]
        outputs[f"{name}/{config}/{dtype_name}/{case}"] = describe(module, case_input(case), DTYPES[dtype_name])
    for name in NETWORKS:
        for dtype_name, dtype in HALF.items():
            for config, case in GRADIENT_CASES:
                outputs[f"{name}/{config}/{dtype_name}/{case}/gradient"] = weight_gradient_error(
                    modules[name, config], case_input(case), dtype)
    for name in ("sosnet", "hynet_bias", "hynet_nobias"):
        module = modules[name, "untrained"]
        reference = describe(module, case_input("uniform"), torch.float64)
        for dtype_name in HALF:
            half = outputs[f"{name}/untrained/{dtype_name}/uniform"].double()
            outputs[f"{name}/untrained/{dtype_name}/error_vs_float64"] = (half - reference).abs().max()
    return outputs
