"""Half-precision warps with float32 geometry (docs/fixes/warp_geometry.md).

Kornia 0.7.0-0.8.3 compute a warp's geometry in the image's dtype: the inverse of the transform,
the pixel-to-normalised matrices, the sampling grid and its normalisation. In float16 a pixel
coordinate near 180 has a resolution of 0.125 px, in bfloat16 of 1 px, so a half warp samples
from the wrong place: 10-32 times the error of the float32 result rounded once (the "ideal").

Every kornia function that derives sampling coordinates from a transform or from pixel
coordinates is promoted wholesale: for a float16/bfloat16 image, every half tensor argument is
widened to float32 (exact), the installed release's own function runs (geometry *and* sampling
in float32), and the output is narrowed once to the image's dtype (0.9.0's output dtype). So the
half result is the release's float32 result on the widened inputs, narrowed once, bitwise; its
backward is the float32 backward narrowed once (for the image and for the transform).
float32/float64 call the original unchanged.

One code path on every device: on CUDA too the geometry and the sampling run in float32. The
sampling in float32 costs twice the memory traffic of a half ``grid_sample``, but a half sample
at a float32 coordinate still rounds the bilinear weights to half (up to 2^-11 relative), and a
second code path would give CPU and CUDA different results; no GPU here to measure the cost.

The functions were found from the source of each release (tests/kornia_call_sites.py, an ``ast``
scan of every kornia function calling ``grid_sample``/``map_coordinates`` or, transitively, one
of these warps; tests/test_fix_warp_geometry.py keeps the table and the scan in step). The
``nn.Module`` forms ``Rotate``/``Translate``/``Scale``/``Shear`` call their function through the
module's global, which the engine rebinds: the function row covers them, and ``Affine``'s
warp too. ``CenterCrop2D`` solves its crop transform in the input's dtype first,
``HomographyWarper`` samples a precomputed grid, ``DepthWarper`` projects depth itself: their
``forward`` is a row (none of them scripts in any release, so a method row loses nothing).
``Affine.forward`` requires its parameters in the input's dtype (kornia raises otherwise), so a
half call holds half parameters: its hand-written replacement widens them on a shallow copy of
the module (the instance, maybe shared, keeps its own) and runs the release's forward in float32.
The matrix builders (``get_rotation_matrix2d``, ``get_affine_matrix2d``/``3d``,
``get_projective_transform``, ``invert_affine_transform``) are rows too: a warp handed a matrix
built in half gets a transform off by the half trigonometry (cos 90 degrees = 4.8e-4 in bfloat16).

Left where they are (one target, one fix): ``warp_image_tps`` (kornia_dtypes promotes it
wholesale already) and ``_transform_warp_impl3d`` (torch_ops, CPU; the ``warp_perspective3d``
row here wraps it, so it sees float32 and passes through).
"""

from __future__ import annotations

import copy
import weakref
from typing import Any, Sequence, Tuple

import torch

from .._model import Finding, Fix, Promote, Target, bug_present, not_needed, table
from .._precision import float32_call_under_autocast, float32_context



# Every row: optional (a warp some releases lack is skipped, not an error), on every device.
_row = table(Promote, optional=True)


GRID = ("the inverse transform, the normalisation matrices and the sampling grid in half: a coordinate "
        "near 180 px resolves to 0.125 px (float16) or 1 px (bfloat16)")
MATRIX = "the transform matrix built from the parameters in half (cos/sin, centre offsets) before the warp"

# A half batch warped a few images at a time, as many as torch has threads (fixes/_at_scale.py:
# CPU grid_sample shares its work among threads by image): their float32 copy and grid only,
# narrowed straight into the output (4x3x2048x2048 float16 rotate on 2 threads: 0.82 s
# one image at a time -> 0.60 s, bitwise).
PER_THREAD_IMAGES = f"{__package__}._at_scale:per_thread_images"
# A crop reads a part of its image: its float32 copy filled only where the grid samples.
CROP_FROM_SAMPLED_ROWS = f"{__package__}._at_scale:crop_from_sampled_rows"
BY_IMAGE = "as many images at a time as torch has threads"

IMGWARP = "kornia.geometry.transform.imgwarp"
AFFWARP = "kornia.geometry.transform.affwarp"
CROP2D = "kornia.geometry.transform.crop2d"
CROP3D = "kornia.geometry.transform.crop3d"

ROWS = (
    # the warps proper
    _row(f"{IMGWARP}:warp_affine", f"{GRID}: 10.8x/32x the ideal error (float16/bfloat16, 256 px); {BY_IMAGE}",
         evaluate=PER_THREAD_IMAGES),
    _row(f"{IMGWARP}:warp_perspective", f"{GRID}: 15.8x/28.7x the ideal error; {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{IMGWARP}:remap",
         "pixel maps normalised in half (2x/(W-1) - 1): 9.3x/23.5x the ideal error, and 0.001 of the zero "
         f"padding bled into in-range samples (TestRemap::test_shift[float16]); {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{IMGWARP}:homography_warp", f"{GRID} (homography on a half meshgrid)"),
    _row(f"{IMGWARP}:warp_grid",
         "the grid transformed by a half homography: the projective division in half (relative error 2^-11/2^-8); "
         "decided by the homography's dtype, grid narrowed to it", trigger="src_homo_dst"),
    _row(f"{IMGWARP}:warp_affine3d", f"{GRID}, in three dimensions"),
    _row(f"{IMGWARP}:warp_perspective3d",
         f"{GRID}, in three dimensions (on CPU the matrix inverse also has no half kernel: torch_ops' "
         "_transform_warp_impl3d row, reached here in float32)"),
    _row(f"{IMGWARP}:homography_warp3d", f"{GRID}, in three dimensions"),
    _row(f"{IMGWARP}:warp_grid3d", "the 3-D grid transformed by a half homography: the division in half", trigger="src_homo_dst"),
    # the transforms the warps are given, built from half parameters
    _row(f"{IMGWARP}:get_rotation_matrix2d",
         "deg2rad and cos/sin of a half angle: 90 degrees is 1.5703 rad in bfloat16, cos 4.8e-4 instead of 0 "
         "(a visible blend of the neighbour in an exact quarter turn); the matrix in float32, narrowed once"),
    _row(f"{IMGWARP}:get_affine_matrix2d", "the rotation, scale, shear and centre offsets composed in half: "
         "in float32, narrowed once"),
    _row(f"{IMGWARP}:get_affine_matrix3d", "the 3-D composition in half: in float32, narrowed once"),
    _row(f"{IMGWARP}:get_projective_transform",
         "the 3-D rotation from half angles (cos 90 degrees is 4.8e-4 in bfloat16): in float32, narrowed once"),
    _row(f"{IMGWARP}:get_perspective_transform",
         "the 8x8 system from half corners: products of pixel coordinates (255 * 255 = 65025) reach float16's "
         "65504, NaN matrix for a 256 px image in float16; solved in float32, narrowed once (0.9.0: 1.00)"),
    _row(f"{IMGWARP}:get_perspective_transform3d",
         "the 15x15 system from half corners in half: 1.15x the ideal error (0.9.0 the same); in float32"),
    _row(f"{IMGWARP}:get_shear_matrix2d",
         "tan of half shears composed with the centre offsets in half: 1.6-1.8x the ideal error (0.9.0 the "
         "same); in float32, narrowed once"),
    _row(f"{IMGWARP}:get_shear_matrix3d",
         "six half shears composed with the centre offsets in half: 3.0-3.2x the ideal error (0.9.0 the "
         "same); in float32, narrowed once"),
    _row(f"{IMGWARP}:invert_affine_transform", "the 2x2 inverse and -A^-1 t in half: in float32, narrowed once"),
    # built on warp_affine / warp_affine3d
    _row(f"{AFFWARP}:affine", f"{GRID} (through warp_affine); {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{AFFWARP}:rotate", f"{MATRIX}; {GRID}: 20.8x/21.2x the ideal error; {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{AFFWARP}:translate", f"{MATRIX}; {GRID}; {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{AFFWARP}:scale", f"{MATRIX}; {GRID}; {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{AFFWARP}:shear", f"{MATRIX}; {GRID}; {BY_IMAGE}", evaluate=PER_THREAD_IMAGES),
    _row(f"{AFFWARP}:affine3d", f"{GRID}, in three dimensions (through warp_affine3d)"),
    _row(f"{AFFWARP}:rotate3d", f"{MATRIX} (3-D rotation); {GRID}"),
    # crops by a transform
    _row(f"{CROP2D}:crop_by_transform_mat", f"{GRID} (through warp_affine); {BY_IMAGE}",
         evaluate=CROP_FROM_SAMPLED_ROWS),
    _row(f"{CROP2D}:crop_by_boxes",
         "the box-to-box perspective transform solved from half corners (up to 1 px apart in bfloat16); "
         f"{GRID}; {BY_IMAGE}", evaluate=CROP_FROM_SAMPLED_ROWS),
    _row(f"{CROP2D}:crop_and_resize", f"the crop transform from half boxes; {GRID}; {BY_IMAGE}",
         evaluate=CROP_FROM_SAMPLED_ROWS),
    _row(f"{CROP2D}:center_crop", f"the crop transform in the image's dtype; {GRID}; {BY_IMAGE}",
         evaluate=CROP_FROM_SAMPLED_ROWS),
    _row(f"{CROP2D}:CenterCrop2D.forward",
         "the corner points cast to the half image's dtype and the perspective transform solved in half; " + GRID),
    _row(f"{CROP3D}:crop_by_transform_mat3d", f"{GRID}, in three dimensions"),
    _row(f"{CROP3D}:crop_by_boxes3d", "the box transform from half corners; " + GRID),
    _row(f"{CROP3D}:crop_and_resize3d", "the box transform from half corners; " + GRID),
    _row(f"{CROP3D}:center_crop3d", "the crop transform in the volume's dtype; " + GRID),
    # dense displacement and depth
    _row("kornia.geometry.transform.elastic_transform:elastic_transform2d",
         "the displacement field blurred in half and added to a half meshgrid (0.125/1 px resolution)"),
    _row("kornia.geometry.depth:warp_frame_depth",
         "depth unprojected, transformed and projected in half (a perspective division per pixel), then "
         "normalised: the sampling coordinates in float32"),
    _row("kornia.geometry.depth:DepthWarper.forward",
         "the pixel grid, the projection and the normalisation in the depth's half dtype: in float32", trigger="patch_dst"),
    _row("kornia.geometry.calibration.undistort:undistort_image",
         "the undistortion maps (iterated distortion model on pixel coordinates) in half, then remap: in float32"),
)


def _is_half(x: torch.Tensor) -> bool:
    return x.dtype == torch.float16 or x.dtype == torch.bfloat16


AFFINE_PARAMETERS = ("translation", "center", "scale_factor", "angle", "shear")


def build_affine_forward(original: Any) -> Any:
    def forward(self, input):
        if not (isinstance(input, torch.Tensor) and _is_half(input)):
            return float32_call_under_autocast(original, input, self, input)
        # The release requires the parameters in the input's dtype, so a half call holds half
        # parameters: they are widened (exactly) on a shallow copy, the matrix and the warp run
        # in float32 (as the rotate/translate/... rows do), and the instance is left untouched.
        widened = copy.copy(self)
        for name in AFFINE_PARAMETERS:
            value = getattr(self, name, None)
            if isinstance(value, torch.Tensor) and _is_half(value):
                object.__setattr__(widened, name, value.float())
        with float32_context(input):
            return original(widened, input.float()).to(input.dtype)

    return forward


# HomographyWarper -> (the half grid precompute_warp_grid stored on it, the float32 grid it came from)
_FLOAT32_GRIDS: "weakref.WeakKeyDictionary[Any, Tuple[torch.Tensor, torch.Tensor]]" = weakref.WeakKeyDictionary()


def build_precompute_warp_grid(original: Any) -> Any:
    def precompute_warp_grid(self, src_homo_dst):
        if not (isinstance(src_homo_dst, torch.Tensor) and _is_half(src_homo_dst)):
            _FLOAT32_GRIDS.pop(self, None)
            return float32_call_under_autocast(original, src_homo_dst, self, src_homo_dst)
        # The module's meshgrid is float32; the release transforms it by the half homography and
        # keeps the grid in half (0.125 px steps near 180 px in float16, 1 px in bfloat16), so the
        # precomputed path sampled elsewhere than the direct one (0.03 apart in float16, 0.24 in
        # bfloat16 on kornia's own test). The grid in float32 from the widened homography: stored
        # narrowed as the release stores it, and kept aside in float32 for forward.
        with float32_context(src_homo_dst):
            original(self, src_homo_dst.float())
        wide = self._warped_grid
        self._warped_grid = wide.to(src_homo_dst.dtype)
        _FLOAT32_GRIDS[self] = (self._warped_grid, wide)
        return None

    return precompute_warp_grid


def build_homography_warper_forward(original: Any) -> Any:
    def forward(self, patch_src, src_homo_dst=None):
        if not (isinstance(patch_src, torch.Tensor) and _is_half(patch_src)):
            return float32_call_under_autocast(original, patch_src, self, patch_src, src_homo_dst)
        warper = self
        grid = self._warped_grid
        if src_homo_dst is None and grid is not None and _is_half(grid):
            # A grid precomputed from a half homography: its float32 original where this shim
            # computed it, else the stored half coordinates widened; sampled in float32 on a
            # shallow copy, so that the instance (maybe shared by threads) keeps its grid.
            kept = _FLOAT32_GRIDS.get(self)
            warper = copy.copy(self)
            object.__setattr__(warper, "_warped_grid", kept[1] if kept is not None and kept[0] is grid else grid.float())
        homography = src_homo_dst.float() if src_homo_dst is not None and _is_half(src_homo_dst) else src_homo_dst
        with float32_context(patch_src):
            return original(warper, patch_src.float(), homography).to(patch_src.dtype)

    return forward


HAND_WRITTEN = (
    Target(("kornia.geometry.transform.affwarp:Affine.forward",), build_affine_forward, ("self", "input"),
           optional=True,
           reason=f"{MATRIX} (get_affine_matrix2d on the half parameters, centre from the half image); {GRID}: "
                  "parameters widened on a copy, matrix and warp in float32, narrowed once"),
    Target(("kornia.geometry.transform.homography_warper:HomographyWarper.forward",), build_homography_warper_forward,
           ("self", "patch_src", "src_homo_dst"), optional=True,
           reason=f"{GRID} (the direct path through homography_warp); a grid precomputed from a half homography "
                  "sampled in float32 at its stored coordinates"),
    Target(("kornia.geometry.transform.homography_warper:HomographyWarper.precompute_warp_grid",),
           build_precompute_warp_grid, ("self", "src_homo_dst"), optional=True,
           reason="the grid transformed by a half homography and stored in half: the precomputed path sampled "
                  "0.03 (float16) / 0.24 (bfloat16) away from the direct one; in float32, kept for forward"),
)


def probe(originals: Sequence[Any]) -> Finding:
    """A float16 warp_affine of a ramp against the float32 warp of the same values, narrowed."""
    warp_affine = originals[0]
    if warp_affine is None:
        return not_needed("no warp_affine in this release")
    image = torch.linspace(0, 1, 64 * 64).reshape(1, 1, 64, 64)
    angle = torch.tensor(0.3)
    matrix = torch.stack([torch.stack([angle.cos(), -angle.sin(), torch.tensor(20.0)]),
                          torch.stack([angle.sin(), angle.cos(), torch.tensor(-9.0)])]).unsqueeze(0)
    image, matrix = image.half().float(), matrix.half().float()
    from .._kernels import widening_missing_kernels

    # The bug is the half sampling grid: ops on the way without a half CPU kernel in this torch
    # (bmm, grid_sample below torch 2.6) run widened, each narrowed, as the patched ops would.
    with widening_missing_kernels():
        half = warp_affine(image.half(), matrix.half(), (64, 64))
    ideal = warp_affine(image, matrix, (64, 64)).half()
    if not torch.equal(half, ideal):
        return bug_present("a float16 warp_affine differs from the float32 warp narrowed (half sampling grid)")
    return not_needed("a float16 warp_affine equals the float32 warp narrowed")


FIX = Fix(
    name="warp_geometry",
    targets=ROWS + HAND_WRITTEN,
    probe=probe,
    demonstration="kornia_halfpatch.demos.warp_geometry:demonstrate",
)
