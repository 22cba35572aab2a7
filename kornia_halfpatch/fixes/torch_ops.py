"""Half precision where torch has no CPU kernel: kornia's call sites, promoted (docs/fixes/torch_ops.md).

torch 2.13 has no float16/bfloat16 CPU kernel for ``linalg.solve``/``inv``/``svd``/``eigh``/
``eigvals``/``qr``/``det``/``matrix_rank``, ``torch.inverse``/``det``/``svd``, ``cdist`` (25 or
fewer points per side), ``avg_pool3d`` and ``torch.fft.*``. Kornia 0.7.0-0.8.3 call them on the
user's tensor from about twenty functions (found by an ``ast`` scan of each release; the test
``tests/test_fix_torch_ops.py`` keeps the table and the scan in step).

Every row promotes the *enclosing kornia function* (or the public function that calls a
TorchScript-compiled helper, which no module view can reach): on a float16/bfloat16 CPU tensor
the half tensor arguments are widened to float32 (exact), the installed release's function runs
and each floating output is narrowed once to the input's half dtype, or kept in float32 where
kornia 0.9.0 returns float32 for the same call (``zca_mean``). So the op's wider result is kept
until the function's own output, as 0.9.0 does: the matrices these ops consume are sums of
products (covariances, Gram matrices, 3x3 products of homographies) that lose most of their
digits in half before the op runs, and several factorisations (SVD/eigh null spaces, 7-point
cubic roots) are ill-conditioned. The half result is therefore the release's own float32 result
narrowed, bitwise on CPU. float32/float64, and half tensors on other devices (CUDA has kernels),
call the original unchanged.

Two torch ops are promoted for kornia's calls only (engine module views, shared with
warp_sampling's): ``affine_grid`` where torch raises for a side of 1 (RandomAffine3D on depth-1
volumes), and ``torch.inverse`` (HomographyTracker's stored half homography).

Three methods take no tensor argument (the matrix is a parameter or attribute of ``self``):
``PinholeCamera.intrinsics_inverse``, ``Homography.forward_inverse`` and
``Similarity.forward_inverse``. Their replacements invert the half matrix in float32 and narrow
once, written out by hand (each is one line in every release).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch._jit_internal import BroadcastingList2, BroadcastingList3

from .._model import (
    SCOPE_KORNIA, Finding, Fix, Promote, PromoteForKornia, Target, bug_present, kernel_gate, not_needed, table,
)
from .._precision import autocast_dtype, autocast_half, autocast_off

CPU = "cpu"


# Every row: CPU tensors only (the missing kernels are CPU kernels; CUDA has them), optional.
_row = table(Promote, device=CPU, optional=True)


SOLVE = "linalg.solve has no half CPU kernel (lu_cpu)"
INVERSE = "linalg.inv/inverse refuses half ('Low precision dtypes not supported')"
SVD = "linalg.svd has no half CPU kernel"
EIGH = "linalg.eigh has no half CPU kernel"
DET = "det has no half CPU kernel (lu_cpu)"
QR = "linalg.qr has no half CPU kernel (geqrf_cpu)"

def has_unit_side(size: List[int]) -> bool:
    """An ``affine_grid`` output size with a spatial side of 1: torch builds that side's
    coordinates with ``at::tensor(0)``, which has no half CPU kernel ("tensor_cpu")."""
    for side in size[2:]:
        if side == 1:
            return True
    return False


# kornia's affine_grid calls (warp_affine3d, so RandomAffine3D on a depth-1 volume; 2-D warps
# to a one-pixel row or column): torch raises "tensor_cpu" not implemented for half when a side
# of the output is 1. Only those calls take the float32 grid, narrowed once (every other half
# call keeps torch's half grid bit for bit): kornia-scoped, stacked on warp_sampling's views.
AFFINE_GRID_ROW = PromoteForKornia(
    "torch.nn.functional:affine_grid",
    "affine_grid has no half CPU kernel for a side of 1 ('tensor_cpu', at::tensor(0)): kornia's grid for such a "
    "size in float32, narrowed once",
    device=CPU,
    guard=f"{__name__}:has_unit_side",
    guard_arguments=("size",),
    expects_parameters=("theta", "size"),
)

ROWS = (
    _row("kornia.filters.guided:_guided_blur_multichannel_guidance",
         f"{SOLVE}; the box-filtered covariances cancel in half: the whole guided filter in float32, narrowed once"),
    _row("kornia.filters.filter:fft_conv",
         "torch.fft.rfftn/irfftn have no half CPU kernel (0.8.3): the FFT convolution in float32, narrowed once", kernels=("fft_rfftn",)),
    _row("kornia.enhance.zca:zca_mean",
         f"{SVD} (0.7.0-0.8.2): covariance and SVD in float32; T, mean (and T_inv) kept in float32 as 0.9.0 returns them", outputs=("float32", "float32", "float32")),
    _row("kornia.enhance.zca:zca_whiten",
         f"{SVD} (through zca_mean): whitening in float32, narrowed once to the input's dtype (0.9.0's output dtype)"),
    _row("kornia.enhance.zca:ZCAWhitening.inverse_transform",
         "fit() keeps float32 statistics (zca_mean's row, as 0.9.0): the inverse runs in float32 and came back "
         "float32 for half whitened data; narrowed once to its dtype (0.9.0's output dtype)"),
    _row("kornia.feature.laf:ellipse_to_laf",
         f"{INVERSE} (Tensor.inverse of the ellipse's 2x2 form): the LAF in float32, narrowed once", kernels=("linalg_inv",)),
    _row("kornia.feature.loftr.utils.geometry:warp_kpts",
         f"{INVERSE} (K0.inverse()): the keypoint warp in float32, narrowed once", kernels=("linalg_inv",)),
    _row("kornia.feature.matching:_cdist",
         "cdist has no half CPU kernel for 25 or fewer points per side: distances in float32, narrowed once "
         "(every matcher and DescriptorMatcher call it)", kernels=("cdist",)),
    _row("kornia.geometry.subpix.spatial_soft_argmax:conv_soft_argmax3d",
         "avg_pool3d has no half CPU kernel: the soft-argmax (pooled exponentials, their normaliser) in float32, "
         "coordinates and values narrowed once", kernels=("avg_pool3d",)),
    _row("kornia.geometry.epipolar.triangulation:_eigh_smallest_vec",
         f"{EIGH} (0.8.3's triangulation null vector): in float32, narrowed once", kernels=("linalg_eigh",)),
    _row("kornia.geometry.transform.imgwarp:_transform_warp_impl3d",
         f"{INVERSE} (0.7.0-0.8.2): the 3-D warp (matrix inverse and sampling grid) in float32, narrowed once", kernels=("linalg_inv",)),
    _row("kornia.geometry.homography:find_homography_dlt",
         f"{INVERSE} (0.7.0's transform2.inverse()): the DLT in float32, narrowed once "
         "(find_homography_dlt_iterated and RANSAC call it)", kernels=("linalg_inv",)),
    _row("kornia.geometry.homography:find_homography_lines_dlt",
         f"{INVERSE} and torch.svd (0.7.0): the line DLT in float32, narrowed once", kernels=("linalg_inv", "linalg_svd")),
    _row("kornia.geometry.epipolar.fundamental:find_fundamental",
         f"{DET} (7-point cubic) and, in 0.8.3, {EIGH} inside a TorchScript-compiled helper no view can reach: "
         "the estimate in float32, narrowed once", kernels=("linalg_det", "linalg_eigh")),
    _row("kornia.geometry.epipolar.fundamental:fundamental_from_essential",
         f"{INVERSE} (0.7.0's K.inverse()): F in float32, narrowed once", kernels=("linalg_inv",)),
    _row("kornia.geometry.epipolar.essential:find_essential",
         "the 5-point solver needs linalg.solve/qr/eigvals/matrix_rank, none with a half CPU kernel "
         "(0.8.3: inside TorchScript): the estimate in float32, narrowed once", kernels=("linalg_solve", "linalg_qr", "linalg_eigvals", "linalg_matrix_rank")),
    _row("kornia.geometry.epipolar.essential:decompose_essential_matrix",
         f"{DET} and {SVD}: R1, R2, t in float32, narrowed once (0.9.0 fails here too)", kernels=("linalg_det", "linalg_svd")),
    _row("kornia.geometry.epipolar.numeric:matrix_cofactor_tensor",
         f"{DET} and {INVERSE} (0.7.4+): the cofactors in float32, narrowed once", kernels=("linalg_det", "linalg_inv")),
    _row("kornia.geometry.epipolar.projection:KRt_from_projection",
         f"{QR} and {INVERSE}/{SOLVE}: K, R, t in float32, narrowed once (0.9.0 fails here too)", kernels=("linalg_qr", "linalg_inv", "linalg_solve")),
)


# --------------------------------------------------------------------------------------------
# Methods whose matrix is on ``self``: written out (each is one line of the release)


def _half_on_cpu(x: torch.Tensor) -> bool:
    return (x.dtype == torch.float16 or x.dtype == torch.bfloat16) and x.device.type == "cpu"


def build_intrinsics_inverse(original: Any) -> Any:
    def intrinsics_inverse(self) -> torch.Tensor:
        intrinsics = self.intrinsics
        if _half_on_cpu(intrinsics):
            # The release computes intrinsics.inverse(): the same, in float32, narrowed once.
            return intrinsics.float().inverse().to(intrinsics.dtype)
        return original(self)

    return intrinsics_inverse


def build_homography_inverse(original: Any) -> Any:
    def forward_inverse(self) -> torch.Tensor:
        model = self.model
        if _half_on_cpu(model):
            return torch.unsqueeze(torch.inverse(model.float()), dim=0).to(model.dtype)
        return original(self)

    return forward_inverse


def build_similarity_inverse(original: Any) -> Any:
    def forward_inverse(self) -> torch.Tensor:
        forward = self.forward()
        if _half_on_cpu(forward):
            return torch.inverse(forward.float()).to(forward.dtype)
        return original(self)

    return forward_inverse


FLOAT16_MAX = 65504.0


def build_fundamental_from_projections(original: Any) -> Any:
    def fundamental_from_projections(P1: torch.Tensor, P2: torch.Tensor) -> torch.Tensor:
        if isinstance(P1, torch.Tensor) and (P1.dtype == torch.float16 or P1.dtype == torch.bfloat16):
            F = original(P1.float(), P2.float())
            if P1.dtype == torch.float16:
                # Nine 4x4 determinants of pixel-scale cameras: |F| reaches 5e7 (focal length 500),
                # Inf once narrowed to float16. F is defined up to scale: a matrix past float16's
                # range is divided by its largest entry (0.9.0's scale); one within it is the
                # release's float32 F narrowed.
                scale = F.abs().amax(dim=(-2, -1), keepdim=True)
                F = F / torch.where(scale > FLOAT16_MAX, scale, torch.ones_like(scale))
            return F.to(P1.dtype)
        return original(P1, P2)

    return fundamental_from_projections


def build_average_quaternions(original: Any) -> Any:
    from kornia.geometry.quaternion import Quaternion

    def average_quaternions(Q: Any, w: Optional[torch.Tensor] = None) -> Any:
        data = Q.data
        if _half_on_cpu(data):
            # The release's eigh average on the widened quaternions (exact), narrowed once.
            widened = original(Quaternion(data.detach().float() if not data.requires_grad else data.float()),
                               None if w is None else w.float())
            return Quaternion(widened.data.to(data.dtype))
        return original(Q, w)

    return average_quaternions


def build_z1_project(original: Any) -> Any:
    from kornia.geometry.vector import Vector2, Vector3

    def project(self: Any, points: Any) -> Any:
        data = points.data
        if _half_on_cpu(data):
            # The release divides by z through diag(z).inverse(): in float32, narrowed once.
            return Vector2(original(self, Vector3(data.float())).data.to(data.dtype))
        return original(self, points)

    return project


ZCA_FORWARD_CALL = "linear_transform(x, self.transform_matrix, self.mean_vector, self.dim)"


# original -> whether its source is the one build_zca_forward writes out (read once: every
# re-apply, two per testing.isolated() block, builds the replacement again).
_zca_sources: Dict[int, Tuple[Any, bool]] = {}


def _zca_source_is_the_copied_one(original: Any) -> bool:
    known = _zca_sources.get(id(original))
    if known is not None and known[0] is original:
        return known[1]
    import inspect  # noqa: F811

    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        answer = False
    else:
        answer = ZCA_FORWARD_CALL in source and source.count("\n        if ") == 2
    _zca_sources[id(original)] = (original, answer)
    return answer


def build_zca_forward(original: Any) -> Any:
    """ZCAWhitening scripts (kornia tests it), so its forward cannot be a generated method row
    (that calls the original with ``self``): the release's forward written out, with the half
    output narrowed. Written out only where the release's source is the one copied here;
    elsewhere the original stays (nothing to narrow: the release keeps it)."""
    from kornia.enhance.zca import linear_transform

    if not _zca_source_is_the_copied_one(original):
        return original

    def forward(self, x: torch.Tensor, include_fit: bool = False) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if autocast_half(x) is not None:
                # Under autocast the fit's covariance and the whitening are half matmuls of the
                # float32 data: the float32 call, autocast off.
                with autocast_off(x.device.type):
                    return forward(self, x, include_fit)
        if include_fit:
            self.fit(x)
        if not self.fitted:
            raise RuntimeError("Needs to be fitted first before running. Please call fit or set include_fit to True.")
        x_whiten = linear_transform(x, self.transform_matrix, self.mean_vector, self.dim)
        if x.dtype == torch.float16 or x.dtype == torch.bfloat16:
            # fit() keeps float32 statistics (zca_mean, as 0.9.0), so the whitening ran in
            # float32: one rounding to the input's dtype (0.9.0's output dtype).
            x_whiten = x_whiten.to(x.dtype)
        return x_whiten

    return forward


def build_so2_inverse(original: Any) -> Any:
    def inverse(self: Any) -> Any:
        z = self.z
        if z.dtype == torch.complex32 and z.device.type == "cpu":
            # float16 rotations are ComplexHalf, whose reciprocal has no CPU kernel: the release's
            # 1 / z in complex64, narrowed once. (bfloat16 has no complex dtype at all: kornia
            # fails before this, as 0.9.0 refuses bfloat16.)
            return type(self)(original(type(self)(z.to(torch.complex64))).z.to(z.dtype))
        return original(self)

    return inverse


def build_quaternion_mul(original: Any) -> Any:
    def __mul__(self: Any, right: Any) -> Any:
        data = getattr(self, "data", None)
        other = getattr(right, "data", None)
        if (isinstance(data, torch.Tensor) and isinstance(other, torch.Tensor) and data.dtype == torch.float16
                and other.dtype == torch.float16 and data.device.type == "cpu" and type(right) is type(self)):
            # The product's vector part is Tensor.cross, which has no float16 CPU kernel in older
            # torch (So3/Se3 compose and rotate through it): the release's product of the widened
            # quaternions (exact), narrowed once. The release wraps its result in a new
            # Parameter (a leaf) either way.
            widened = original(type(self)(data.detach().float()), type(self)(other.detach().float()))
            return type(self)(widened.data.to(torch.float16))
        return original(self, right)

    return __mul__


def build_so2_log(original: Any) -> Any:
    def log(self: Any) -> Any:
        z = self.z
        if z.dtype == torch.complex32 and z.device.type == "cpu":
            # A float16 rotation's angle is Tensor.atan2 of its ComplexHalf parts, which has no
            # float16 CPU kernel in older torch: the release's angle of the rotation widened to
            # complex64 (exact), narrowed once.
            return original(type(self)(z.to(torch.complex64))).to(torch.float16)
        return original(self)

    return log


MATRIX_PRODUCT_KERNELS = ("bmm", "mm")
LINE_KERNELS = ("dot", "mm", "bmm")


def _lacking_dtypes(kernels: Tuple[str, ...]) -> Tuple[torch.dtype, ...]:
    """The half dtypes this torch has no CPU kernel for (one of ``kernels``), chosen when a
    hand-written replacement is built: those are widened, the others keep torch's own kernels
    (on torch 2.1, bfloat16 has bmm, mm and cross; float16 has eye)."""
    from .._kernels import lacking

    return tuple(getattr(torch, name) for name in lacking(kernels))


def _widened_group_state(group: Any, widened: Tuple[torch.dtype, ...]) -> Optional[Tuple[Dict[str, torch.Tensor], torch.dtype]]:
    """(name -> float32 copy of each parameter, the half dtype) of a Lie group element whose
    parameters (rotation quaternion, translation) are all of one dtype of ``widened`` on CPU,
    else None. A
    Vector3 translation is no parameter (it would stay half beside a float32 rotation): that
    element keeps the release's call. The copies are made in the graph, so gradients reach the
    half parameters, narrowed once by the cast's backward."""
    translation = getattr(group, "t", None)
    if translation is not None and not isinstance(translation, torch.Tensor):
        return None
    named = list(group.named_parameters(remove_duplicate=False))
    if not named:
        return None
    dtype = named[0][1].dtype
    if dtype not in widened or any(t.dtype != dtype or t.device.type != "cpu" for _, t in named):
        return None
    copies: Dict[int, torch.Tensor] = {}
    state = {}
    for name, tensor in named:
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.float()
        state[name] = copies[id(tensor)]
    return state, dtype


def build_group_method(original: Any) -> Any:
    """A method of a Lie group element returning a tensor (Se3's log and adjoint), whose ``@``
    (bmm/mm) has no float16 CPU kernel in older torch: the release's method run with the
    element's parameters widened to float32 (exact), its result narrowed once."""
    from torch.nn.utils.stateless import _reparametrize_module

    dtypes = _lacking_dtypes(MATRIX_PRODUCT_KERNELS)

    def method(self: Any) -> Any:
        widened = _widened_group_state(self, dtypes) if dtypes else None
        if widened is None:
            return original(self)
        state, dtype = widened
        with _reparametrize_module(self, state, tie_weights=True, strict=False):
            out = original(self)
        return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out

    return method


_WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}
_REAL = {torch.float16: torch.float16, torch.bfloat16: torch.bfloat16, torch.complex32: torch.float16}


def build_module_method_widened(kernels: Tuple[str, ...], argument: Optional[str] = None) -> Any:
    """A method of a kornia Module (a geometric object whose tensors are its parameters: Se2,
    ParametrizedLine) that reaches an op without a half CPU kernel in older torch through ``@``
    (bmm/mm/dot): the release's method run with every parameter widened in the graph (float16 to
    float32, ComplexHalf to complex64: exact; gradients reach the half parameters through the
    casts' backward, narrowed once) and each tensor argument of the same half dtype widened; each
    floating (complex) output narrowed once. Only for the half dtypes this torch lacks one of
    ``kernels`` for; an element holding a half tensor that is no parameter (a Vector2
    translation) keeps the release's call."""

    def build(original: Any) -> Any:
        from torch.nn.utils.stateless import _reparametrize_module

        dtypes = _lacking_dtypes(kernels)

        def call(self: Any, *args: Any) -> Any:
            named = list(self.named_parameters(remove_duplicate=False)) if dtypes else []
            reals = {_REAL.get(t.dtype) for _, t in named}
            if not named or len(reals) != 1 or next(iter(reals)) not in dtypes or any(t.device.type != "cpu" for _, t in named):
                return original(self, *args)
            dtype = next(iter(reals))
            translation = getattr(self, "t", None) if hasattr(type(self), "t") else None
            if translation is not None and not isinstance(translation, torch.Tensor):
                return original(self, *args)  # a Vector2/Vector3 translation: not a parameter
            copies: Dict[int, torch.Tensor] = {}
            state = {}
            for name, tensor in named:
                if id(tensor) not in copies:
                    copies[id(tensor)] = tensor.to(_WIDER[tensor.dtype])
                state[name] = copies[id(tensor)]
            wide_args = tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype == dtype else a for a in args)
            with _reparametrize_module(self, state, tie_weights=True, strict=False):
                out = original(self, *wide_args)
            if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                return out.to(dtype)
            if isinstance(out, torch.Tensor) and out.dtype == torch.complex64 and dtype == torch.float16:
                return out.to(torch.complex32)
            return out

        if argument is None:
            def method(self: Any) -> Any:
                return call(self)
        else:
            def method(self: Any, point: Any) -> Any:  # ParametrizedLine's methods: (self, point)
                return call(self, point)
        return method

    return build


def build_fit_line(original: Any) -> Any:
    dtypes = _lacking_dtypes(("bmm", "mm"))

    def fit_line(points: torch.Tensor, weights: Optional[torch.Tensor] = None) -> Any:
        if (isinstance(points, torch.Tensor) and points.dtype in dtypes and points.device.type == "cpu"
                and (weights is None or isinstance(weights, torch.Tensor))):
            # A^T @ A (bmm) has no float16 CPU kernel in older torch: the release's line through
            # the widened points (exact), origin and direction narrowed once. The release wraps
            # both in new Parameters (leaves) either way.
            wide = original(points.float(), None if weights is None or weights.dtype != points.dtype else weights.float())
            return type(wide)(wide.origin.data.to(points.dtype), wide.direction.data.to(points.dtype))
        return original(points, weights)

    return fit_line


def build_se3_exp(original: Any) -> Any:
    from kornia.geometry.quaternion import Quaternion

    function = getattr(original, "__func__", original)
    dtypes = _lacking_dtypes(MATRIX_PRODUCT_KERNELS)

    def exp(v: torch.Tensor) -> Any:
        if isinstance(v, torch.Tensor) and v.dtype in dtypes and v.device.type == "cpu":
            # V's omega_hat @ omega_hat (bmm) has no float16 CPU kernel in older torch: the
            # release's element of the widened vector (exact), its quaternion and translation
            # narrowed once. The release wraps both in new Parameters (leaves) either way.
            wide = function(v.float())
            quaternion = Quaternion(wide.so3.q.data.detach().to(v.dtype))
            return type(wide)(type(wide.so3)(quaternion), wide.t.data.detach().to(v.dtype))
        return function(v)

    return exp


def _point_data(p: Any) -> Optional[torch.Tensor]:
    # A tensor, or kornia's Vector3 wrapping one.
    if isinstance(p, torch.Tensor):
        return p
    data = getattr(p, "data", None)
    return data if isinstance(data, torch.Tensor) else None


def build_hyperplane_through(original: Any) -> Any:
    function = getattr(original, "__func__", original)
    dtypes = _lacking_dtypes(("cross",))

    def through(cls: Any, p0: torch.Tensor, p1: torch.Tensor, p2: Optional[torch.Tensor] = None) -> Any:
        points = (p0, p1, p2)
        data = [_point_data(p) for p in points] if p2 is not None else []
        if (data and all(d is not None for d in data) and data[0].dtype in dtypes and data[0].device.type == "cpu"
                and all(d.dtype == data[0].dtype for d in data)):
            # The normal is the cross product of two edges (Tensor.cross), which has no float16
            # CPU kernel in older torch: the release's plane through the widened points (exact),
            # normal and offset narrowed once (the 2-D case has no cross product: the release's).
            dtype = data[0].dtype
            wide = function(cls, *(d.float() if p is d else type(p)(d.float()) for p, d in zip(points, data)))
            normal, offset = wide.normal, wide.offset
            return cls(type(normal)(normal.data.to(dtype)), type(offset)(offset.data.to(dtype)))
        return function(cls, p0, p1, p2)

    return through


def build_homography_reset_model(original: Any) -> Any:
    dtypes = _lacking_dtypes(("eye",))

    def reset_model(self: Any) -> None:
        model = getattr(self, "model", None)
        if (isinstance(model, torch.Tensor) and model.dtype in dtypes and model.device.type == "cpu"
                and model.dim() == 2):
            # torch.nn.init.eye_ writes torch.eye into the parameter in its own dtype, which has no
            # bfloat16 CPU kernel in torch 2.1 (ImageRegistrator resets its model per level): the
            # identity is exact in every dtype, so the float32 one is copied in.
            with torch.no_grad():
                model.copy_(torch.eye(model.shape[0], model.shape[1]))
            return None
        return original(self)

    return reset_model


def build_registrator_register(original: Any) -> Any:
    dtypes = _lacking_dtypes(("addcdiv",))

    def register(self: Any, src_img: torch.Tensor, dst_img: torch.Tensor, verbose: bool = False,
                 output_intermediate_models: bool = False) -> Any:
        model = getattr(self, "model", None)
        parameters = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
        if (dtypes and parameters and isinstance(src_img, torch.Tensor) and isinstance(dst_img, torch.Tensor)
                and parameters[0].dtype in dtypes and src_img.dtype == dst_img.dtype == parameters[0].dtype
                and all(p.dtype == parameters[0].dtype and p.device.type == "cpu" for p in parameters)):
            # The optimizer's step (torch.optim.Adam: addcdiv) has no float16 CPU kernel in older
            # torch: the release's registration of the widened images with the model in float32
            # (its parameters widened in place, the same Parameter objects), the model narrowed
            # back once at the end and the returned model(s) narrowed once.
            dtype = parameters[0].dtype
            model.float()
            try:
                out = original(self, src_img.float(), dst_img.float(), verbose, output_intermediate_models)
            finally:
                model.to(dtype)
            if output_intermediate_models:
                final, intermediate = out
                return final.to(dtype), [m.to(dtype) for m in intermediate]
            return out.to(dtype)
        return original(self, src_img, dst_img, verbose, output_intermediate_models)

    return register


def build_torch_inverse(original: Any) -> Any:
    """``torch.inverse`` as kornia's code calls it: a half CPU matrix (which torch refuses) is
    inverted in float32 and narrowed once, right after the op; everything else is torch's call.
    The only kornia caller that still hands it a half tensor is ``HomographyTracker.
    track_next_frame`` (its stored homography is in the user's dtype, and the method is
    stateful); the other callers are promoted whole by rows or cast first."""

    def inverse(input: torch.Tensor) -> torch.Tensor:
        if (input.dtype == torch.float16 or input.dtype == torch.bfloat16) and input.device.type == "cpu":
            return original(input.float()).to(input.dtype)
        return original(input)

    inverse.__doc__ = original.__doc__
    return inverse


# torch.inverse for kornia's calls only (module views of ``torch``, stacked with any other view).
TORCH_INVERSE_TARGET = Target(
    ("torch:inverse",),
    build_torch_inverse,
    scope=SCOPE_KORNIA,
    reason=f"{INVERSE}: kornia's half CPU torch.inverse calls (HomographyTracker.track_next_frame's prewarp) "
    "in float32, narrowed once",
    gate=kernel_gate(("linalg_inv",)),
)

def float32_under_cpu_autocast(build: Any) -> Any:
    """``build``'s replacement, run with CPU autocast off where CPU autocast computes in a half
    dtype: these targets stand in for CPU kernels half lacks, and under autocast the half that
    reaches them comes from autocast's matmuls on float32 tensors (an eigen-average of Q^T Q, a
    projection through diag(z)), so the float32 call outside autocast is their answer there. For
    eager-only targets (geometry objects' methods and functions returning them, which never
    script); CUDA autocast is left alone, as these CPU workarounds are."""

    def build_under_autocast(original: Any) -> Any:
        replacement = build(original)

        def under_autocast(*args: Any, **kwargs: Any) -> Any:
            dtype = autocast_dtype("cpu")
            if dtype == torch.float16 or dtype == torch.bfloat16:
                with autocast_off("cpu"):
                    return replacement(*args, **kwargs)
            return replacement(*args, **kwargs)

        # The replacement's parameters (the original's), which the engine then matches to the
        # original's signature.
        under_autocast.__signature__ = inspect.signature(replacement)
        return under_autocast

    return build_under_autocast


METHOD_TARGETS = (
    Target(("kornia.geometry.epipolar.fundamental:fundamental_from_projections",),
           float32_under_cpu_autocast(build_fundamental_from_projections),
           ("P1", "P2"), optional=True,
           reason=f"{DET} (0.7.0); 0.7.4-0.8.3's nine 4x4 determinants of products overflow float16: F in float32, "
                  "narrowed once; a float16 F past 65504 (pixel-scale cameras) divided by its largest entry first "
                  "(defined up to scale; 0.9.0's scale), so it stays finite (every device: the overflow is the dtype's)"),
    Target(("kornia.geometry.liegroup.so2:So2.inverse",), float32_under_cpu_autocast(build_so2_inverse), ("self",), optional=True,
           reason="ComplexHalf reciprocal has no CPU kernel: float16 So2 (and Se2) inverse in complex64, narrowed once"),
    Target(("kornia.geometry.quaternion:Quaternion.__mul__",), float32_under_cpu_autocast(build_quaternion_mul), ("self", "right"), optional=True,
           reason="Tensor.cross has no float16 CPU kernel in older torch: float16 quaternion products (So3/Se3 "
           "composition and rotation) from the widened quaternions, narrowed once", gate=kernel_gate(("cross",), ("float16",))),
    Target(("kornia.geometry.liegroup.so2:So2.log",), float32_under_cpu_autocast(build_so2_log), ("self",), optional=True,
           reason="Tensor.atan2 has no float16 CPU kernel in older torch (atan2_cpu): float16 So2 (and Se2) log from "
           "the rotation in complex64, narrowed once", gate=kernel_gate(("atan2",), ("float16",))),
    Target(("kornia.geometry.liegroup.se3:Se3.exp",), float32_under_cpu_autocast(build_se3_exp), ("v",), optional=True,
           reason="omega_hat @ omega_hat (bmm) has no float16 CPU kernel in older torch: the half Se3 of the widened "
           "vector, quaternion and translation narrowed once", gate=kernel_gate(MATRIX_PRODUCT_KERNELS)),
    *(Target((f"kornia.geometry.liegroup.se3:Se3.{name}",), float32_under_cpu_autocast(build_group_method), ("self",), optional=True,
             reason=f"{what} (bmm) has no float16 CPU kernel in older torch: Se3.{name} of the element's parameters "
             "widened to float32, narrowed once", gate=kernel_gate(MATRIX_PRODUCT_KERNELS))
      for name, what in (("log", "omega_hat @ omega_hat"), ("adjoint", "hat(t) @ R"))),
    Target(("kornia.geometry.liegroup.se2:Se2.log",), float32_under_cpu_autocast(build_module_method_widened(MATRIX_PRODUCT_KERNELS)), ("self",),
           optional=True, reason="V_inv @ t (bmm) has no float16 CPU kernel in older torch: Se2.log of the element's "
           "parameters widened (ComplexHalf rotation to complex64, translation to float32), narrowed once",
           gate=kernel_gate(MATRIX_PRODUCT_KERNELS, ("float16",))),
    *(Target((f"kornia.geometry.line:ParametrizedLine.{name}",), float32_under_cpu_autocast(build_module_method_widened(LINE_KERNELS, "point")),
             ("self", "point"), optional=True,
             reason=f"direction @ (point - origin) (dot/mm) has no float16 CPU kernel in older torch: ParametrizedLine."
             f"{name} of the line's parameters and the point widened to float32, narrowed once",
             gate=kernel_gate(LINE_KERNELS)) for name in ("projection", "squared_distance")),
    Target(("kornia.geometry.line:fit_line",), float32_under_cpu_autocast(build_fit_line), ("points", "weights"), optional=True,
           reason="A^T @ A (bmm) has no float16 CPU kernel in older torch: the line fitted to the widened points, "
           "origin and direction narrowed once", gate=kernel_gate(MATRIX_PRODUCT_KERNELS)),
    Target(("kornia.geometry.plane:Hyperplane.through",), float32_under_cpu_autocast(build_hyperplane_through), ("cls", "p0", "p1", "p2"),
           optional=True, reason="Tensor.cross has no float16 CPU kernel in older torch: the plane through three "
           "widened points, normal and offset narrowed once", gate=kernel_gate(("cross",))),
    Target(("kornia.geometry.transform.image_registrator:ImageRegistrator.register",), float32_under_cpu_autocast(build_registrator_register),
           ("self", "src_img", "dst_img", "verbose", "output_intermediate_models"), optional=True,
           reason="addcdiv (torch.optim.Adam's step on the model's parameters) has no float16 CPU kernel in older "
           "torch: the float16 registration run in float32 (model widened in place, narrowed back), the model "
           "narrowed once", gate=kernel_gate(("addcdiv",))),
    Target(("kornia.geometry.transform.image_registrator:Homography.reset_model",), float32_under_cpu_autocast(build_homography_reset_model),
           ("self",), optional=True, reason="eye has no bfloat16 CPU kernel in torch 2.1 (nn.init.eye_ of a half "
           "registration model): the identity copied in from float32, exactly", gate=kernel_gate(("eye",))),
    Target(("kornia.enhance.zca:ZCAWhitening.forward",), build_zca_forward, ("self", "x", "include_fit"),
           optional=True, reason="fit() keeps float32 statistics (zca_mean); a half input's whitening, computed in "
           "float32, narrowed once (0.9.0's dtype)"),
    Target(("kornia.geometry.quaternion:average_quaternions",), float32_under_cpu_autocast(build_average_quaternions), ("Q", "w"), optional=True,
           reason=f"{EIGH} (0.8.2): the eigen-average of the widened quaternions, narrowed once", gate=kernel_gate(("linalg_eigh",))),
    Target(("kornia.sensors.camera.projection_model:Z1Projection.project",), float32_under_cpu_autocast(build_z1_project), ("self", "points"),
           optional=True, reason=f"{INVERSE} (diag(z).inverse(), 0.7.0-0.8.2): the projection in float32, narrowed once", gate=kernel_gate(("linalg_inv",))),
    Target(("kornia.geometry.camera.pinhole:PinholeCamera.intrinsics_inverse",), float32_under_cpu_autocast(build_intrinsics_inverse), ("self",),
           optional=True, reason=f"{INVERSE}: the 4x4 intrinsics inverted in float32, narrowed once (unproject calls it)", gate=kernel_gate(("linalg_inv",))),
    Target(("kornia.geometry.transform.image_registrator:Homography.forward_inverse",), float32_under_cpu_autocast(build_homography_inverse),
           ("self",), optional=True, reason=f"{INVERSE}: the half homography parameter inverted in float32, narrowed once", gate=kernel_gate(("linalg_inv",))),
    Target(("kornia.geometry.transform.image_registrator:Similarity.forward_inverse",), float32_under_cpu_autocast(build_similarity_inverse),
           ("self",), optional=True, reason=f"{INVERSE}: the similarity inverted in float32, narrowed once", gate=kernel_gate(("linalg_inv",))),
)


def probe(originals: Sequence[Any]) -> Finding:
    """Any release: the bug is torch's missing kernel, confirmed on the op kornia uses most; on a
    torch that has it, on any other kernel a row stands in for (each row then asks its own)."""
    try:
        torch.linalg.inv(torch.eye(2, dtype=torch.float16))
    except (RuntimeError, NotImplementedError):
        return bug_present("torch has no half CPU kernel for linalg.inv/solve/svd/eigh/det/qr, cdist, avg_pool3d, fft")
    from .._kernels import missing

    kernels = sorted({name for target in FIX.targets if target.gate is not None for name in _kernels_of(target)})
    gone = [name for name in kernels if missing(name)]
    if gone:
        return bug_present(f"torch {torch.__version__} has no half CPU kernel for {', '.join(gone)}")
    return not_needed("this torch inverts float16 matrices on CPU")


def _kernels_of(target: Target) -> Tuple[str, ...]:
    return getattr(target.gate, "kernels", ())


# --------------------------------------------------------------------------------------------
# torch ops with half CPU kernels in torch 2.13 that older torches lack (torch 2.1: float16
# padding, convolution, interpolation, atan2, cumsum, topk, bmm/matmul; torch < 2.6: grid_sample,
# which warp_sampling widens). Each is replaced for kornia's calls only (module views), and only
# where the kernel probe (kornia_halfpatch._kernels) finds a half dtype without its kernel: that
# dtype is widened to float32, torch's float32 op runs, and its floating result is narrowed once
# (the error of the float32 op rounded once). Padding and selection (topk values) copy elements:
# there the widened op is bitwise what a half kernel returns.


PAD_KERNELS = ("replication_pad1d", "replication_pad2d", "replication_pad3d",
               "reflection_pad1d", "reflection_pad2d", "reflection_pad3d")
INTERPOLATE_KERNELS = ("upsample_nearest2d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
                       "adaptive_avg_pool2d")


@dataclass(frozen=True)
class ScopedOp:
    """One torch op replaced for kornia's calls: its TorchScript signature (torch's own defaults
    written out: a builtin has no ``__defaults__``), the tensor that decides (``trigger``), an
    extra condition, and the expression computed on widened inputs (``_w`` widens a tensor)."""

    path: str
    kernels: Tuple[str, ...]
    parameters: str
    returns: str
    call: str
    widened: str
    reason: str
    trigger: str = "input"
    condition: str = "True"
    narrow: str = "_o.to(_d)"  # the widened result _o back to the trigger's dtype _d

    def build(self, original: Any) -> Any:
        from .._codegen import define, dtype_condition
        from .._kernels import lacking

        dtypes = lacking(self.kernels)
        name = self.path.split(":")[-1]
        namespace = {"torch": torch, "Optional": Optional, "List": List, "Tuple": Tuple,
                     "BroadcastingList2": BroadcastingList2,
                     "BroadcastingList3": BroadcastingList3, "_halfpatch_original": original, "_w": _widen_tensor,
                     "_topk_result": _topk_result}
        taken = dtype_condition(self.trigger, dtypes) if dtypes else "False"
        source = (
            f"def {name}({self.parameters}) -> {self.returns}:\n"
            f"    if {self.trigger}.device.type == 'cpu' and ({taken}) and ({self.condition}):\n"
            f"        _d = {self.trigger}.dtype\n"
            f"        _o = _halfpatch_original({self.widened})\n"
            f"        return {self.narrow}\n"
            f"    return _halfpatch_original({self.call})\n"
        )
        replacement = define(source, name, namespace, f"torch_ops {self.path}")
        replacement.__doc__ = getattr(original, "__doc__", None)
        replacement.__module__ = __name__  # the engine gives it the original's identity when installing
        return replacement

    def target(self) -> Target:
        return Target((self.path,), self.build, scope=SCOPE_KORNIA, optional=True, reason=self.reason,
                      gate=kernel_gate(self.kernels))


def _widen_tensor(x: torch.Tensor) -> torch.Tensor:
    # Exact: the float32 op computes on the very values the half op was given.
    if x.dtype == torch.float16 or x.dtype == torch.bfloat16:
        return x.float()
    return x


def _topk_result(values: torch.Tensor, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    # torch.topk returns a named pair (kornia reads .indices); TorchScript has the plain pair.
    if not torch.jit.is_scripting():
        return torch.return_types.topk((values, indices))  # type: ignore[return-value]
    return values, indices


def _kernel_op(path: str, kernels: Tuple[str, ...], parameters: str, returns: str, call: str, widened: str,
               reason: str, **options: Any) -> Target:
    return ScopedOp(path, kernels, parameters, returns, call, widened, reason, **options).target()


TENSOR = "torch.Tensor"
CONV3D_PARAMETERS = ("input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, "
                     "stride: BroadcastingList3[int] = 1, padding: BroadcastingList3[int] = 0, "
                     "dilation: BroadcastingList3[int] = 1, groups: int = 1")

KERNEL_TARGETS = (
    _kernel_op("torch.nn.functional:pad", PAD_KERNELS,
               "input: torch.Tensor, pad: List[int], mode: str = 'constant', value: Optional[float] = None", TENSOR,
               "input, pad, mode, value", "input.float(), pad, mode, value",
               "replicate/reflect padding (filter2d, box_blur, sobel, pyramids, Harris/Hessian, SIFT) has no half CPU "
               "kernel in older torch: padded in float32 and narrowed, bitwise the half padding (a copy)",
               condition="mode != 'constant'"),
    _kernel_op("torch.nn.functional:conv3d", ("conv3d",), CONV3D_PARAMETERS, TENSOR,
               "input, weight, bias, stride, padding, dilation, groups",
               "input.float(), _w(weight), None if bias is None else _w(bias), stride, padding, dilation, groups",
               "conv3d (compute_columns3d: filter3d, motion_blur3d, spatial_gradient3d) has no float16 CPU kernel in "
               "older torch: the float32 convolution, narrowed once"),
    _kernel_op("torch:atan2", ("atan2",), "input: torch.Tensor, other: torch.Tensor", TENSOR,
               "input, other", "input.float(), other.float()",
               "atan2 (LAF orientation, SIFT/orientation histograms) has no float16 CPU kernel in older torch: "
               "the float32 angle, narrowed once", condition="other.dtype == input.dtype"),
    _kernel_op("torch:cumsum", ("cumsum",), "input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None",
               TENSOR, "input, dim, dtype=dtype", "input.float(), dim",
               "cumsum (equalize_clahe's LUTs, histogram equalisation) has no float16 CPU kernel in older torch: the "
               "float32 running sum, narrowed once", condition="dtype is None"),
    _kernel_op("torch:topk", ("topk",),
               "input: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True",
               "Tuple[torch.Tensor, torch.Tensor]", "input, k, dim, largest, sorted", "input.float(), k, dim, largest, sorted",
               "topk (the matchers' two nearest neighbours, detectors' best responses) has no float16 CPU kernel in "
               "older torch: selected in float32, values narrowed (a copy: bitwise the half values)",
               narrow="_topk_result(_o[0].to(_d), _o[1])"),
    _kernel_op("torch:bmm", ("bmm",), "input: torch.Tensor, mat2: torch.Tensor", TENSOR,
               "input, mat2", "input.float(), mat2.float()",
               "bmm (LAF products, image_registrator, PnP) has no float16 CPU kernel in older torch: the float32 "
               "product, narrowed once", condition="mat2.dtype == input.dtype"),
    _kernel_op("torch:matmul", ("bmm", "mm"), "input: torch.Tensor, other: torch.Tensor", TENSOR,
               "input, other", "input.float(), other.float()",
               "matmul (bmm/addmm) has no float16 CPU kernel in older torch: the float32 product, narrowed once",
               condition="other.dtype == input.dtype"),
)

# Kornia functions that reach an op without a half kernel as a Tensor method (no module view
# reaches ``x.cumsum()``): promoted whole, for the dtypes that lack the kernel.
METHOD_KERNEL_ROWS = (
    _row("kornia.metrics.accuracy:accuracy",
         "Tensor.topk has no float16 CPU kernel in older torch (topk_cpu, torch 2.1): the ranking of the widened "
         "scores (exact: the same order), the accuracies float32 as the release computes them",
         kernels=("topk",), outputs=("float32",)),
    _row("kornia.enhance.integral:integral_tensor",
         "Tensor.cumsum has no float16 CPU kernel in older torch (cumsum_out_cpu): the running sums in float32, "
         "narrowed once", kernels=("cumsum",)),
    # Not gated: where torch has the kernels, the release's half path is float16 convolutions
    # (oneDNN's slow path without avx512_fp16: 1.8 s at 4x3x1024x1024, 27x kornia 0.9.0's half).
    _row("kornia.filters.median:median_blur",
         "median has no float16 CPU kernel in older torch (median_out), and the k*k one-hot convolutions "
         "before it take oneDNN's slow float16 path: the median selected by a network of minima and maxima over "
         "shifted views of the half image (no arithmetic: bitwise the float32 median narrowed)",
         evaluate=f"{__package__}._at_scale:median_by_selection"),
    _row("kornia.geometry.conversions:euler_from_quaternion",
         "Tensor.atan2 has no float16 CPU kernel in older torch (atan2_cpu: So3/Se3 to Euler angles): the angles in "
         "float32, narrowed once", kernels=("atan2",)),
    # compute_correspond_epilines, sampson_epipolar_distance and symmetrical_epipolar_distance are
    # kornia_dtypes rows: their half gradients overflow at pixel scale, so they run in float32
    # whatever the kernels.
    _row("kornia.geometry.epipolar.essential:relative_camera_motion",
         "R2 @ R1^T (bmm) has no float16 CPU kernel in older torch: the relative motion in float32, narrowed once", kernels=("bmm", "mm")),
    _row("kornia.geometry.epipolar.projection:projection_from_KRt",
         "K @ [R|t] (bmm) has no float16 CPU kernel in older torch (motion_from_essential_choose_solution calls it): "
         "the projection in float32, narrowed once", kernels=("bmm", "mm")),
    _row("kornia.geometry.homography:line_segment_transfer_error_one_way",
         "Tensor.cross (the line through each segment) and @ (bmm) have no float16 CPU kernel in older torch "
         "(find_homography_lines_dlt_iterated calls it): the transfer error in float32, narrowed once",
         kernels=("cross", "bmm", "mm")),
    _row("kornia.geometry.homography:sample_is_valid_for_homography",
         "torch.cross and @ (bmm) have no float16 CPU kernel in older torch (RANSAC's homography sample check): "
         "the orientation signs from the widened points (a bool mask, as the release returns)",
         kernels=("cross", "bmm", "mm")),
    _row("kornia.geometry.epipolar.fundamental:get_perpendicular",
         "Tensor.cross has no float16 CPU kernel in older torch: the perpendicular lines in float32, narrowed once",
         kernels=("cross",)),
    _row("kornia.geometry.epipolar.fundamental:get_closest_point_on_epipolar_line",
         "Tensor.cross and F @ points (bmm) have no float16 CPU kernel in older torch: the closest points in "
         "float32, narrowed once", kernels=("cross", "bmm", "mm")),
    *(_row(f"kornia.geometry.epipolar._metrics:{name}",
           "points @ F (bmm) has no float16 CPU kernel in older torch (RANSAC's and find_fundamental's "
           "epipolar errors): the distances in float32, narrowed once", kernels=("bmm", "mm"))
      for name in ("left_to_right_epipolar_distance", "right_to_left_epipolar_distance")),
    _row("kornia.geometry.epipolar.projection:projections_from_fundamental",
         "[e2]x @ F (bmm) has no float16 CPU kernel in older torch: the canonical projection pair in float32, "
         "narrowed once", kernels=("bmm", "mm")),
    _row("kornia.geometry.epipolar.essential:essential_from_Rt",
         "[t]x @ R (bmm) has no float16 CPU kernel in older torch: E in float32, narrowed once", kernels=("bmm", "mm")),
    _row("kornia.geometry.epipolar.projection:depth_from_point",
         "R @ X^T (bmm) has no float16 CPU kernel in older torch (motion_from_essential_choose_solution's cheirality "
         "check): the depths in float32, narrowed once", kernels=("bmm", "mm")),
    *(_row(f"kornia.geometry.conversions:{name}",
           "the pose product (@, bmm) has no float16 CPU kernel in older torch: the converted pose in float32, narrowed "
           "once (the _Rt variants and ARKitQTVecs_to_ColmapQTVecs call the 4x4 ones)", kernels=("bmm", "mm"))
      for name in ("camtoworld_graphics_to_vision_4x4", "camtoworld_vision_to_graphics_4x4",
                   "camtoworld_to_worldtocam_Rt", "worldtocam_to_camtoworld_Rt")),
    _row("kornia.geometry.calibration.distort:tilt_projection",
         "Ry @ Rx (bmm) has no float16 CPU kernel in older torch (distort_points/undistort_points with tilt "
         "coefficients): the tilt matrix in float32, narrowed once", kernels=("bmm", "mm")),
    *(_row(f"kornia.augmentation.auto.{path}.get_transformation_matrix",
           "mat @ res_mat (bmm) has no float16 CPU kernel in older torch (AutoAugment/RandAugment/TrivialAugment's "
           "transformation matrix): the product of the policy's matrices for the widened input, narrowed once",
           kernels=("bmm", "mm"))
      for path in ("base:PolicyAugmentBase", "operations.policy:PolicySequential")),
    _row("kornia.losses.dice:dice_loss",
         "Tensor.softmax over the classes (softmax_kernel_impl) has no float16 CPU kernel in older torch: the loss in "
         "float32, narrowed once", kernels=("softmax_nonlast",)),
    _row("kornia.losses.focal:focal_loss",
         "Tensor.log_softmax over the classes (log_softmax_lastdim_kernel_impl, softmax_kernel_impl) has no float16 "
         "CPU kernel in older torch: the loss in float32, narrowed once", kernels=("log_softmax", "log_softmax_nonlast")),
    _row("kornia.losses.hausdorff:_HausdorffERLossBase.perform_erosion",
         "the erosion's convolution (self.conv: torch's conv2d/conv3d held on the module, out of every module view's "
         "reach) has no float16 CPU kernel in older torch: the erosion in float32, narrowed once",
         kernels=("conv2d", "conv3d")),
    _row("kornia.losses.hausdorff:HausdorffERLoss3D.forward",
         "the 3-D erosion's AdaptiveMaxPool3d has no float16 CPU kernel in torch 2.4 (adaptive_max_pool3d_cpu; "
         "conv3d neither in torch 2.1): the 3-D Hausdorff loss in float32, narrowed once",
         kernels=("conv3d", "adaptive_max_pool3d")),
    # max_blur_pool2d/MaxBlurPool2D (max_pool2d) are kornia_dtypes rows: their float16 Pascal kernel
    # overflows, so they run in float32 whatever the kernels.
    _row("kornia.filters.blur_pool:edge_aware_blur_pool2d",
         "max_pool3d (the edge mask's dilation) has no float16 CPU kernel in older torch: the edge-aware blur in "
         "float32, narrowed once", kernels=("max_pool3d",)),
)


def build_hanning_kernel2d(original: Any) -> Any:
    def get_hanning_kernel2d(kernel_size: Any, device: Any = None, dtype: Any = None) -> torch.Tensor:
        if dtype in (torch.float16, torch.bfloat16) and torch.device(device or "cpu").type == "cpu":
            # The outer product ky @ kx (mm) in float32, narrowed once.
            return original(kernel_size, device, torch.float32).to(dtype)
        return original(kernel_size, device, dtype)

    return get_hanning_kernel2d


def softmax_in_input_dtype(dtype: Optional[torch.dtype]) -> bool:
    """softmax computes in its input's dtype (no ``dtype=`` given): only then can a half call
    lack the kernel; with ``dtype=`` torch casts first."""
    return dtype is None


SOFTMAX_ROW = PromoteForKornia(
    "torch.nn.functional:softmax",
    "softmax (softmax_lastdim_kernel_impl: spatial_softmax2d, DSNT, soft-argmax) has no float16 CPU kernel in older "
    "torch: the float32 softmax, narrowed once", device=CPU, kernels=("softmax",), optional=True,
    guard=f"{__name__}:softmax_in_input_dtype", guard_arguments=("dtype",), expects_parameters=("input", "dim"),
)


def build_eye(original: Any) -> Any:
    def eye(n: int, m: Optional[int] = None, dtype: Optional[torch.dtype] = None, device: Optional[torch.device] = None,
            requires_grad: bool = False) -> torch.Tensor:
        if (dtype == torch.float16 or dtype == torch.bfloat16) and (device is None or torch.device(device).type == "cpu"):
            # The identity is exact in every dtype: built in float32, narrowed.
            wide = original(n, dtype=torch.float32, device=device) if m is None else original(n, m, dtype=torch.float32, device=device)
            return wide.to(dtype).requires_grad_(requires_grad)
        if m is None:
            return original(n, dtype=dtype, device=device, requires_grad=requires_grad)
        return original(n, m, dtype=dtype, device=device, requires_grad=requires_grad)

    eye.__doc__ = original.__doc__
    return eye


EYE_TARGET = Target(
    ("torch:eye",), build_eye, scope=SCOPE_KORNIA, optional=True, gate=kernel_gate(("eye",)),
    reason="eye has no bfloat16 CPU kernel in torch 2.1 (Se3, PinholeCamera, PnP build identities in the input's "
    "dtype): the identity built in float32 and narrowed, exactly",
)


HANNING_TARGET = Target(
    ("kornia.filters.kernels:get_hanning_kernel2d",), build_hanning_kernel2d, ("kernel_size", "device", "dtype"),
    optional=True, gate=kernel_gate(("mm",)),
    reason="mm (addmm_impl_cpu_) has no float16 CPU kernel in older torch: the 2-D Hanning kernel's outer product in "
    "float32, narrowed once",
)

INTERPOLATE_ROW = PromoteForKornia(
    "torch.nn.functional:interpolate",
    "interpolate (compute_indices_weights_linear/cubic, adaptive_avg_pool2d: KeyNet, SIFTFeature, resize, "
    "pyramids) has no float16 CPU kernel in older torch: the float32 resampling, narrowed once",
    device=CPU, kernels=INTERPOLATE_KERNELS, optional=True, expects_parameters=("input",),
)


FIX = Fix(
    name="torch_ops",
    targets=ROWS + (AFFINE_GRID_ROW,) + METHOD_TARGETS + (TORCH_INVERSE_TARGET,) + KERNEL_TARGETS + (INTERPOLATE_ROW,) + METHOD_KERNEL_ROWS + (HANNING_TARGET, SOFTMAX_ROW, EYE_TARGET),
    probe=probe,
    demonstration="kornia_halfpatch.demos.torch_ops:demonstrate",
    devices=("cpu",),
)
