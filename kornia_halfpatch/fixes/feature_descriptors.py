"""Local descriptors in half precision: the final normalization runs in float32 (docs/fixes/feature_descriptors.md).

Targets (the ``forward`` of each class, replaced on the class so existing instances get it):

* ``SOSNet`` and ``HyNet``, float16 and bfloat16. Both end in ``LocalResponseNorm`` on a
  ``(B, C, 1, 1)`` tensor; ``F.local_response_norm`` routes 4-D input through ``avg_pool3d``, which
  has no CPU half kernel (``NotImplementedError: "avg_pool3d_out_frame" not implemented for
  'Half'``), and the ``1e-10`` guard added before it flushes to 0 in float16, so a patch the network
  maps to exactly zero gives 0/0 = NaN where the kernel exists (CUDA, MPS). The replacement runs
  the network in half precision, then adds the guard and normalizes in float32 and casts back once:
  the normalization is a sum of 128 squares, cheap in float32, and float32 keeps small descriptors
  (an untrained SOSNet's are around 1e-3, whose squares are float16 subnormals) exact.
* ``HardNet`` and ``HardNet8``, float16 only. ``F.normalize``'s ``eps=1e-12`` rounds to 0 in
  float16, so an all-zero feature vector (a flat patch through bias-free convolutions and
  untrained BatchNorm) normalizes to NaN. The L2 normalizations (two for HardNet8, around its PCA
  projection) run in float32; the network stays float16. bfloat16 keeps float32's exponent range
  and the guard survives, so bfloat16 is left alone.
* ``SIFTDescriptor`` and ``DenseSIFTDescriptor``, float16 only. Every guard (``sqrt(. + 1e-10)``,
  ``atan2(gy, gx + 1e-10)``, both ``F.normalize`` calls and the RootSIFT ``+ 1e-10``) is below
  float16's smallest subnormal, so a flat patch gives an all-NaN descriptor. In these releases the
  guards *define* a flat patch's float32 descriptor (magnitude sqrt(1e-10) at orientation 2pi:
  weight only in the first angular bin of each spatial cell), so promoting the guards alone would
  still not give the release's answer: the Gaussian-weighted magnitudes, about 1e-8, underflow in
  float16 (smallest subnormal 6e-8) and the histogram comes out zero. The whole descriptor is
  computed in float32 and narrowed once: the patched float16 result equals the release's own
  float32 result narrowed, bitwise. (0.9.0 changed SIFT's float32 values and DenseSIFT's shape;
  those changes are deliberately not imported.) One derivative is 0.9.0's: where a pixel's
  gradient is exactly 0 the orientation keeps the release's value but has derivative 0, so a flat
  patch's float16 input gradient is 0 (0.9.0's) instead of the release's float32 1e12-2e14
  narrowed to Inf. bfloat16 is left alone.

Every non-half input runs the original ``forward`` unchanged (eager, ``torch.jit.trace`` and
``torch.compile``), so float32/float64 are bit-for-bit the release's. Under ``torch.jit.script``
the original cannot be called with ``self``, so the four scriptable networks carry the release's
forward written out; ``torch.jit.is_scripting()`` is resolved statically by the script compiler
and by dynamo, and the dtype branch reads static metadata, so nothing graph-breaks. ``check``
confirms on a cheap stub network that the release's SOSNet has the bug and that the written-out
code computes what the release's forward does.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from .._model import Finding, Fix, Target, bug_present, not_needed, unsupported
from .._precision import autocast_half, autocast_off, float32_context, half_reaching

DESCRIPTOR_SIZE = 128
SELF_INPUT = ("self", "input")


def _kornia_check_shape() -> Callable[..., Any]:
    from kornia.core.check import KORNIA_CHECK_SHAPE

    return KORNIA_CHECK_SHAPE


# --------------------------------------------------------------------------------------------
# What reaches the final normalisation decides: a half trunk output (half weights, or autocast's
# half convolutions on a float32 input), never the input's dtype alone.


def _normalization_stays_float32(x: torch.Tensor) -> bool:
    """The release's float32 forward can run as it is: no half input, and no autocast that would
    make the trunk half (``kornia_halfpatch._precision``)."""
    return half_reaching(x) is None


def _flat_rows_without_gradient(normalized: torch.Tensor, trunk: torch.Tensor) -> torch.Tensor:
    """``normalized`` with no gradient through the rows whose float16 trunk output is exactly zero
    (a flat patch through bias-free convolutions and untrained normalisation). There every value
    is the guard's (0, or LocalResponseNorm's 1/sqrt(n)), and the float32 derivative is
    1/eps-sized (1e10-1e12 times the upstream gradient): narrowed to float16 it is Inf, and Inf
    times the zero activations below is NaN in every weight gradient (0.9.0: the same NaN for
    SOSNet; 0 for HardNet). Where the activations are 0 the float32 weight gradients are 0, which
    this gives; where they are not, the float32 gradient does not fit float16 either way. Every
    other row's gradient is the float32 one, narrowed once; bfloat16 holds 1e12 and is left so."""
    if trunk.dtype != torch.float16:
        return normalized
    flat = (trunk == 0).flatten(1).all(1)
    shape = [flat.shape[0]] + [1] * (normalized.dim() - 1)
    return torch.where(flat.view(shape), normalized.detach(), normalized)


def build_sosnet_forward(original: Any) -> Any:
    check_shape = _kornia_check_shape()

    def forward(self, input: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if _normalization_stays_float32(input):
                return original(self, input, eps)
        check_shape(input, ["B", "1", "32", "32"])
        descr = self.layers(input)
        if descr.dtype == torch.float16 or descr.dtype == torch.bfloat16:
            # The guard is added in float32 (1e-10 flushes to 0 in float16) and the norm runs in
            # float32 (no CPU half avg_pool3d kernel); one rounding back to the trunk's dtype.
            wide = self.desc_norm(descr.float() + eps)
            descr = _flat_rows_without_gradient(wide, descr).to(descr.dtype)
        else:
            descr = self.desc_norm(descr + eps)
        descr = descr.view(descr.size(0), -1)
        return descr

    return forward


def build_hynet_forward(original: Any) -> Any:
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if _normalization_stays_float32(x):
                return original(self, x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.layer5(x)
        x = self.layer6(x)
        x = self.layer7(x)
        if x.dtype == torch.float16 or x.dtype == torch.bfloat16:
            wide = self.desc_norm(x.float() + self.eps_l2_norm)
            x = _flat_rows_without_gradient(wide, x).to(x.dtype)
        else:
            x = self.desc_norm(x + self.eps_l2_norm)
        x = x.view(x.size(0), -1)
        return x

    return forward


def build_filter_response_norm_forward(original: Any) -> Any:
    """HyNet's FilterResponseNorm2d in float32 for a half input (0.9.0's: its float16 run of it
    gave HyNet's weight gradients twice the float32 ones' error, 0.15 against 0.077 of their
    scale): x * rsqrt(E[x^2] + |eps|) squares the activations (past float16's range for |x| > 256)
    and its backward divides by the root again. The half module's parameters meet the widened
    input in float32 (type promotion, exact); one rounding back. Written out (the release's
    forward, the same in 0.7.0-0.8.3): HyNet scripts with it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if not (isinstance(x, torch.Tensor) and (x.dtype == torch.float16 or x.dtype == torch.bfloat16)):
                return original(self, x)
        dtype = x.dtype
        if dtype == torch.float16 or dtype == torch.bfloat16:
            x = x.float()
        nu2 = x.pow(2).mean(dim=[2, 3], keepdim=True)
        x = x * torch.rsqrt(nu2 + self.eps.abs())
        if self.is_scale:
            x = self.weight * x
        if self.is_bias:
            x = x + self.bias
        return x.to(dtype)

    return forward


# --------------------------------------------------------------------------------------------
# HardNet / HardNet8: F.normalize in float32 for float16


def build_hardnet_forward(original: Any) -> Any:
    check_shape = _kornia_check_shape()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if half_reaching(input) != torch.float16:
                return original(self, input)
        check_shape(input, ["B", "1", "32", "32"])
        x_norm: torch.Tensor = self._normalize_input(input)
        x_features: torch.Tensor = self.features(x_norm)
        x_out = x_features.view(x_features.size(0), -1)
        if x_out.dtype == torch.float16:
            # eps=1e-12 is 0 in float16: a zero vector would give 0/0.
            return _flat_rows_without_gradient(F.normalize(x_out.float(), dim=1), x_out).to(x_out.dtype)
        return F.normalize(x_out, dim=1)

    return forward


def build_hardnet8_forward(original: Any) -> Any:
    check_shape = _kornia_check_shape()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if half_reaching(input) != torch.float16:
                return original(self, input)
        check_shape(input, ["B", "1", "32", "32"])
        x_norm: torch.Tensor = self._normalize_input(input)
        x_features: torch.Tensor = self.features(x_norm)
        mean: torch.Tensor = torch.jit.annotate(torch.Tensor, self.mean)
        components: torch.Tensor = torch.jit.annotate(torch.Tensor, self.components)
        x_flat = x_features.view(x_features.size(0), -1)
        if x_flat.dtype == torch.float16:
            x_prePCA = _flat_rows_without_gradient(F.normalize(x_flat.float()), x_flat).to(x_flat.dtype)
            pca = torch.mm(x_prePCA - mean, components)
            return _flat_rows_without_gradient(F.normalize(pca.float(), dim=1), pca).to(pca.dtype)
        x_prePCA = F.normalize(x_flat)
        pca = torch.mm(x_prePCA - mean, components)
        return F.normalize(pca, dim=1)

    return forward


# --------------------------------------------------------------------------------------------
# SIFTDescriptor / DenseSIFTDescriptor: the release's float32 descriptor, narrowed, for float16,
# with a gradient-safe orientation (their forwards assign submodules, so they were never
# scriptable: eager only). The forwards are the releases' (0.7.0-0.8.3 compute them alike),
# written out to make one step's derivative safe; each name the release's module uses
# (spatial_gradient, its ``pi`` tensor, KORNIA_CHECK_SHAPE) is looked up there at call time.


def _release_names(original: Any) -> Any:
    return vars(sys.modules[original.__module__])


def _gradient_safe_orientation(gx: torch.Tensor, gy: torch.Tensor, eps: float, pi: Any) -> torch.Tensor:
    """The release's orientation ``atan2(gy, gx + eps) + 2 pi``, value for value, with derivative 0
    where the pixel's gradient is exactly 0 (0.9.0's flat-patch gradient). There the angle is
    undefined and the release's guard picks 0, but d/dgy atan2(gy, gx + eps) = 1 / eps = 1e10;
    after the magnitude weight (sqrt(eps) = 1e-5) and the normalisation of a descriptor of norm
    about 1e-5, the input gradient of a flat patch is 1e12 (SIFTDescriptor, 32 px) to 2e14
    (DenseSIFTDescriptor) in float32: Inf once narrowed to float16."""
    angle = torch.atan2(gy, gx + eps)
    flat = (gx == 0) & (gy == 0)
    return torch.where(flat, angle.detach(), angle) + 2.0 * pi


def _orientation_bins(module: Any, mag: torch.Tensor, ori: torch.Tensor, pi: Any, pool: Any,
                      dtype: torch.dtype) -> torch.Tensor:
    o_big = float(module.num_ang_bins) * ori / (2.0 * pi)
    bo0_big_ = torch.floor(o_big)
    wo1_big_ = o_big - bo0_big_
    bo0_big = bo0_big_ % module.num_ang_bins
    bo1_big = (bo0_big + 1) % module.num_ang_bins
    wo0_big = (1.0 - wo1_big_) * mag
    wo1_big = wo1_big_ * mag
    return torch.cat(
        [pool((bo0_big == i).to(dtype) * wo0_big + (bo1_big == i).to(dtype) * wo1_big)
         for i in range(0, module.num_ang_bins)],
        1,
    )


def _release_forward(original: Any, module: Any, input: torch.Tensor) -> torch.Tensor:
    """The release's forward; under autocast (a float32 patch, half convolutions inside) with
    autocast off: the float32 call itself. Autocast's float16 gradients and magnitudes meet the
    same 1e-10 guards as a float16 patch (all-NaN descriptors of a flat patch), and in bfloat16
    the orientation bins of a textured patch move (0.025 off); the float32 call is the reference
    autocast is held to, and costs one descriptor's float32 time."""
    if autocast_half(input) is not None:
        with autocast_off(input.device.type):
            return original(module, input)
    return original(module, input)


def build_sift_forward(original: Any) -> Any:
    names = _release_names(original)

    def float32_forward(self: Any, input: torch.Tensor) -> torch.Tensor:
        names["KORNIA_CHECK_SHAPE"](input, ["B", "1", f"{self.patch_size}", f"{self.patch_size}"])
        B: int = input.shape[0]
        self.pk = self.pk.to(input.dtype).to(input.device)
        grads = names["spatial_gradient"](input, "diff")
        gx = grads[:, :, 0]
        gy = grads[:, :, 1]
        mag = torch.sqrt(gx * gx + gy * gy + self.eps)
        ori = _gradient_safe_orientation(gx, gy, self.eps, names["pi"])
        mag = mag * self.gk.expand_as(mag).type_as(mag).to(mag.device)
        ang_bins = _orientation_bins(self, mag, ori, names["pi"], self.pk, input.dtype)
        ang_bins = ang_bins.view(B, -1)
        ang_bins = F.normalize(ang_bins, p=2)
        ang_bins = torch.clamp(ang_bins, 0.0, float(self.clipval))
        ang_bins = F.normalize(ang_bins, p=2)
        if self.rootsift:
            ang_bins = torch.sqrt(F.normalize(ang_bins, p=1) + self.eps)
        return ang_bins

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if isinstance(input, torch.Tensor) and input.dtype == torch.float16:
            # Every guard (1e-10) is 0 in float16: all-NaN descriptors of a flat patch. In
            # float32 (autocast off: its convolutions would be half again), narrowed once.
            with float32_context(input):
                return float32_forward(self, input.float()).to(torch.float16)
        return _release_forward(original, self, input)

    return forward


def build_dense_sift_forward(original: Any) -> Any:
    names = _release_names(original)

    def float32_forward(self: Any, input: torch.Tensor) -> torch.Tensor:
        names["KORNIA_CHECK_SHAPE"](input, ["B", "1", "H", "W"])
        self.bin_pooling_kernel = self.bin_pooling_kernel.to(input.dtype).to(input.device)
        self.PoolingConv = self.PoolingConv.to(input.dtype).to(input.device)
        grads = names["spatial_gradient"](input, "diff")
        gx = grads[:, :, 0]
        gy = grads[:, :, 1]
        mag = torch.sqrt(gx * gx + gy * gy + self.eps)
        ori = _gradient_safe_orientation(gx, gy, self.eps, names["pi"])
        ang_bins = _orientation_bins(self, mag, ori, names["pi"], self.bin_pooling_kernel, input.dtype)
        out_no_norm = self.PoolingConv(ang_bins)
        out = F.normalize(out_no_norm, dim=1, p=2).clamp_(0, float(self.clipval))
        out = F.normalize(out, dim=1, p=2)
        if self.rootsift:
            out = torch.sqrt(F.normalize(out, p=1) + self.eps)
        return out

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if isinstance(input, torch.Tensor) and input.dtype == torch.float16:
            with float32_context(input):
                return float32_forward(self, input.float()).to(torch.float16)
        return _release_forward(original, self, input)

    return forward


SIFT_REASON = (
    "float16 forward in float32, narrowed once: every guard (1e-10) is below float16's smallest "
    "subnormal, so a flat patch gave an all-NaN descriptor; the orientation's derivative is 0 where the "
    "pixel gradient is 0 (0.9.0's flat-patch gradient; the release's float32 one is 1e12-2e14, Inf in float16)"
)
SIFT_TARGETS = (
    Target(("kornia.feature.siftdesc:SIFTDescriptor.forward",), build_sift_forward, SELF_INPUT, optional=True,
           reason=SIFT_REASON),
    Target(("kornia.feature.siftdesc:DenseSIFTDescriptor.forward",), build_dense_sift_forward, SELF_INPUT,
           optional=True, reason=SIFT_REASON),
)


# --------------------------------------------------------------------------------------------
# Behaviour probe: a SOSNet/HyNet whose trunk returns a fixed (B, 128, 1, 1) tensor, so only the
# release's own final step runs (no convolution: a few milliseconds).


class _FixedTrunk(torch.nn.Module):
    def __init__(self, values: torch.Tensor) -> None:
        super().__init__()
        self.values = values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.values.to(x.dtype).expand(x.shape[0], -1, 1, 1)


def _stub(cls: Any, trunk_attributes: Sequence[str], values: torch.Tensor, **kwargs: Any) -> Any:
    # A real instance (so the release's own final layers and attributes are used) whose trunk is
    # swapped for a fixed tensor. Not built on the meta device: that imports torch._dynamo (~5 s).
    stub = cls(pretrained=False, **kwargs)
    for name in trunk_attributes[:-1]:
        setattr(stub, name, torch.nn.Identity())
    setattr(stub, trunk_attributes[-1], _FixedTrunk(values))
    return stub.eval()


def _probe_values() -> torch.Tensor:
    # Representable in float16 and bfloat16, so the float32 run sees the same descriptor.
    return (torch.arange(DESCRIPTOR_SIZE, dtype=torch.float32) - 63.5).mul(2.0**-6).view(1, -1, 1, 1)


def probe(originals: Sequence[Any]) -> Finding:
    from kornia.feature import HyNet, SOSNet

    sosnet_forward, hynet_forward = originals[0], originals[1]
    sosnet = _stub(SOSNet, ("layers",), torch.zeros(1, DESCRIPTOR_SIZE, 1, 1))
    try:
        flat = sosnet_forward(sosnet, torch.zeros(1, 1, 32, 32, dtype=torch.float16))
        if bool(torch.isfinite(flat).all()):
            return not_needed("this SOSNet already gives finite float16 descriptors on CPU")
    except (NotImplementedError, RuntimeError):
        pass  # the bug: no CPU half kernel behind LocalResponseNorm
    # The written-out forwards (used in half precision and under TorchScript) must compute what
    # the release's forward computes: its float32 result, narrowed, on half-representable values.
    values = _probe_values()
    sosnet.layers = _FixedTrunk(values)
    hynet = _stub(HyNet, tuple(f"layer{i}" for i in range(1, 8)), values, is_bias=False)
    patch = torch.zeros(1, 1, 32, 32)
    probes = ((build_sosnet_forward, sosnet_forward, sosnet), (build_hynet_forward, hynet_forward, hynet))
    for build, original, stub in probes:
        got = build(original)(stub, patch.half())
        if got.dtype != torch.float16 or not torch.equal(got, original(stub, patch).half()):
            return unsupported(f"{original.__qualname__} computes differently from the releases this fix knows")
    frn_forward = originals[len(originals) - 1]
    if frn_forward is not None and not _filter_response_norm_as_written(frn_forward):
        return unsupported(f"{frn_forward.__qualname__} computes differently from the releases this fix knows")
    return bug_present()


def _filter_response_norm_as_written(original: Any) -> bool:
    """The written-out FilterResponseNorm2d forward computes what the release's does: on a module
    with half-representable parameters, its float16 result is the release's float32 one narrowed."""
    from kornia.feature.hynet import FilterResponseNorm2d

    generator = torch.Generator().manual_seed(5)
    module = FilterResponseNorm2d(3)
    with torch.no_grad():
        module.weight.copy_(torch.rand(module.weight.shape, generator=generator).half().float() + 0.5)
        module.bias.copy_(torch.rand(module.bias.shape, generator=generator).half().float() - 0.5)
    x = (torch.rand(2, 3, 4, 4, generator=generator) * 4 - 2).half()
    got = build_filter_response_norm_forward(original)(module.half(), x)
    return got.dtype == torch.float16 and torch.equal(got, original(module.float(), x.float()).half())


FIX = Fix(
    name="feature_descriptors",
    targets=(
        Target(("kornia.feature.sosnet:SOSNet.forward",), build_sosnet_forward, ("self", "input", "eps"),
               reason="LocalResponseNorm in float32 with eps in float32 (no CPU half avg_pool3d; 1e-10 is 0 in float16)"),
        Target(("kornia.feature.hynet:HyNet.forward",), build_hynet_forward, ("self", "x"),
               reason="LocalResponseNorm in float32 with eps in float32, as SOSNet"),
        Target(("kornia.feature.hardnet:HardNet.forward",), build_hardnet_forward, SELF_INPUT, optional=True,
               reason="float16 F.normalize in float32 (its eps 1e-12 is 0 in float16: 0/0 for a zero vector)"),
        Target(("kornia.feature.hardnet:HardNet8.forward",), build_hardnet8_forward, SELF_INPUT, optional=True,
               reason="both float16 L2 normalizations in float32, as HardNet"),
    )
    + SIFT_TARGETS
    + (Target(("kornia.feature.hynet:FilterResponseNorm2d.forward",), build_filter_response_norm_forward, ("self", "x"),
              optional=True,
              reason="HyNet's FilterResponseNorm in float32 for half activations (0.9.0's): x * rsqrt(E[x^2] + |eps|) "
                     "squares the activations and its backward divides by the root: float16 weight gradients twice the "
                     "float32 ones' error"),),
    probe=probe,
    demonstration="kornia_halfpatch.demos.feature_descriptors:demonstrate",
)
