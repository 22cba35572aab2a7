"""float16/bfloat16 accepted, finite and right in color, filters, enhance, metrics, losses,
feature and augmentation (docs/fixes/kornia_dtypes.md).

Each row promotes a kornia function whose half computation is wrong in kornia 0.7.0-0.8.3 for a
numerical reason the row names (an ``eps`` that is 0 in float16, a sum that passes 65504, a
variance that cancels, a kernel refusing a dtype): on a float16/bfloat16 tensor the half
tensor arguments are widened to float32 (exact), the installed release's function runs, and the
output is narrowed once to the input's half dtype (kornia 0.9.0's output dtype for every row
here). So the half result is the release's float32 result narrowed, bitwise on CPU.
float32/float64 call the original unchanged.

Two functions take a dtype, not a tensor (kernel and matrix factories); they are hand-written.
The augmentation dtype check gains float16/bfloat16 wherever it accepts float32; integer and
complex inputs still get kornia's own error.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .._codegen import python_function_of
from .._model import (
    Finding, Fix, Promote, Target, WidenDtypes, bug_present, load, not_needed, table, unsupported,
)
from .._precision import autocast_half, autocast_off, autocast_on, leave_autocast



# Every row: optional (a function some releases lack is skipped, not an error).
_row = table(Promote, optional=True)


# A half batch of local filters evaluated image by image (fixes/_at_scale.py), a large image
# (1x3x4096x4096) band by band of rows with a halo: one band's float32 temporaries at a time, each
# narrowed straight into the output.
FILTER_IN_BANDS = f"{__package__}._at_scale:filter_in_bands"
# A half image evaluated tile by tile of pixels (colour conversions: each pixel's channels alone).
PER_PIXEL = f"{__package__}._at_scale:per_pixel"
# A half batch evaluated one image at a time (strided pooling: each image's float32 copy and
# temporaries alone, narrowed straight into the output).
PER_IMAGE = f"{__package__}._at_scale:per_image"

ZERO_CHROMA = "on gray pixels the chroma is 0 and eps=1e-8 is 0 in float16: 0/0 = NaN hue"

# The Pascal kernel of side k is the outer product of binomial rows normalised by its sum,
# 4^(k-1): built in the input's dtype, that sum is 65536 for k = 9 (Inf in float16, so every
# weight is 0 and the pooled image all zeros) and the unnormalised product overflows from k = 15
# (Inf / Inf: NaN); bfloat16 rounds the binomials themselves past 256.
BLUR_POOL = (
    "the Pascal kernel is built in the input's dtype: its normalising sum 4^(k-1) is 65536 for k = 9, Inf in "
    "float16 (all-zero output), Inf/Inf = NaN from k = 15: kernel and pooling in float32, narrowed once"
)
# The modules build their kernel in float32 and cast it to the input's dtype per call: from k = 9
# its smallest weights (4^-(k-1), 1.5e-5 for k = 9) are float16 subnormals with a few significant
# bits, and from k = 15 (3.7e-9) they flush to 0, before the half convolution rounds again.
BLUR_POOL_MODULE = (
    "the module's float32 Pascal kernel is cast to the input's dtype: from k = 9 its smallest weights "
    "(4^-(k-1)) are float16 subnormals, from k = 15 they flush to 0: kernel and pooling in float32, narrowed once"
)

# Local features' shared reason (0.9.0 fails these gradients too).
LOCAL_FEATURE = ("a chain of half roundings (sampled patches, orientation histogram bins, LAF products) moves "
                 "image and LAF gradients by tens to hundreds of ulps, NaN in float16")


def holds_no_half(module: Any) -> bool:
    """A module none of whose parameters or buffers is float16/bfloat16: a float32 computation of
    it is what the release does on float32 input. A module converted to half would meet a widened
    input with half weights (a dtype error where the release's half call runs), so it is left alone."""
    if not isinstance(module, torch.nn.Module):
        return False
    for tensor in list(module.parameters()) + list(module.buffers()):
        if _is_half(tensor.dtype):
            return False
    return True


# The LocalFeature pipelines promoted whole: no learned weights. The ones with networks
# (GFTTAffNetHardNet, HesAffNetHardNet, KeyNetHardNet, KeyNetAffNetHardNet) meet a half image
# only converted to half, where their networks' half error is the user's choice (as HyNet's):
# measured in docs/training.md, left to the release.
SIFT_PIPELINES = ("SIFTFeature", "SIFTFeatureScaleSpace")


def is_sift_pipeline_holding_no_half(module: Any) -> bool:
    """``module`` is one of kornia's SIFT pipelines (or a subclass) and holds no half tensor
    (a module converted to half would meet the widened image with half buffers)."""
    import kornia.feature.integrated as integrated

    classes = tuple(getattr(integrated, name) for name in SIFT_PIPELINES if hasattr(integrated, name))
    return isinstance(module, classes) and holds_no_half(module)


def holds_no_half_parameters(module: Any) -> bool:
    """A module with no float16/bfloat16 parameter (learned weights). Half buffers (a converted
    LAFOrienter's Gaussian weighting) meet a float32 patch as the release's float32 call meets its
    own buffers; a network converted to half (KeyNetAffNetHardNet's OriNet) would meet the widened
    patch with half weights: a dtype error where the release's half call runs."""
    if not isinstance(module, torch.nn.Module):
        return False
    for tensor in module.parameters():
        if _is_half(tensor.dtype):
            return False
    return True


SAMPSON = "kornia.geometry.epipolar._metrics:sampson_epipolar_distance"


def python_function_gate(path: str) -> Callable[[], Finding]:
    """A row's gate: the row is generated from its original's Python function; a
    ``@torch.jit.script`` function (a ScriptFunction: kornia 0.8.3's sampson_epipolar_distance)
    gives it as ``_torchdynamo_inline`` (``_codegen.python_function_of``). A ScriptFunction
    without one is left to the release (and said so), not the fix."""

    def gate() -> Finding:
        original = load(path)
        if type(original).__name__ == "ScriptFunction" and python_function_of(original) is original:
            return unsupported("compiled with @torch.jit.script in this release: no Python signature to generate "
                               "the wrapper from; the release's half gradient is left (docs/training.md)")
        return bug_present()

    return gate


# The two-view errors' shared reason (kornia 0.9.0 fails these gradients too).
TWO_VIEW = "pixel coordinates times matrix entries, squared and divided"

ROWS = (
    # color
    _row("kornia.color.hsv:rgb_to_hsv", ZERO_CHROMA + " (evaluated in tiles, the same float32 values: 4x3x1024x1024 "
         "half in a fraction of the release's float32 memory)", evaluate=f"{__package__}._at_scale:rgb_to_hsv",
         evaluate_float32=True),
    _row("kornia.color.hsv:hsv_to_rgb",
         "a NaN hue (from rgb_to_hsv in half) floors to an INT_MIN gather index: crash; the sector arithmetic "
         "(hue * 3/pi) in float32", evaluate=PER_PIXEL),
    _row("kornia.color.luv:luv_to_rgb",
         "the XYZ cube and the sRGB gamma of L up to 100 lose 3 half steps and more: in float32", evaluate=PER_PIXEL),
    _row("kornia.color.luv:rgb_to_luv",
         "black pixels: eps=1e-12 is 0 in float16, so u, v = 0/0 = NaN (bfloat16: 2.75 off); in float32", evaluate=PER_PIXEL),
    _row("kornia.color.lab:rgb_to_lab",
         "the XYZ cube root and the L*a*b* differences of nearby values cancel in half (0.31 off in float16, "
         "2.8 in bfloat16): in float32", evaluate=PER_PIXEL),
    _row("kornia.color.lab:lab_to_rgb",
         "the inverse cube and the sRGB gamma of L up to 100 lose many half steps (0.027 off in float16, 0.12 "
         "in bfloat16): in float32", evaluate=PER_PIXEL),
    _row("kornia.color.gray:rgb_to_grayscale",
         "bfloat16 refused ('Unknown data type'): weights built in float32 and applied, narrowed once "
         "(canny, adjust_contrast/saturation, LAFDescriptor, RandomGrayscale call it)", evaluate=PER_PIXEL),
    _row("kornia.color.colormap:apply_colormap",
         "KORNIA_CHECK refuses bfloat16: the lookup index computed from the widened image; the colours kept in "
         "the colormap's dtype (float32 by default), as 0.9.0 returns them", outputs=("float32",)),
    # enhance
    _row("kornia.enhance.adjust:adjust_hue", ZERO_CHROMA + " (through rgb_to_hsv)", evaluate=PER_PIXEL),
    _row("kornia.enhance.adjust:adjust_saturation", ZERO_CHROMA + " (through rgb_to_hsv)", evaluate=PER_PIXEL),
    _row("kornia.enhance.adjust:adjust_hue_raw", ZERO_CHROMA + " on the hsv round trip"),
    _row("kornia.enhance.adjust:adjust_saturation_raw", ZERO_CHROMA + " on the hsv round trip"),
    _row("kornia.enhance.histogram:histogram",
         "values far from every bin: the kernel sum is 0 and epsilon=1e-10 is 0 in float16, 0/0 = NaN; in float32, "
         "narrowed to the input's dtype as 0.9.0"),
    _row("kornia.enhance.histogram:histogram2d",
         "as histogram: epsilon=1e-10 is 0 in float16, a joint pdf of 0/0; in float32"),
    _row("kornia.enhance.adjust:equalize",
         "histogram counts pass float16's range (65504) on 256x256 images and its integer grid (2048) on "
         "smaller ones: the histogram and CDF in float32 (once per distinct half value)",
         evaluate=f"{__package__}._at_scale:equalize_by_value"),
    # metrics and losses
    _row("kornia.metrics.ssim:ssim",
         "the local variance E[x^2] - E[x]^2 cancels in half (errors of 0.36, up to 39 in bfloat16): in float32 "
         "(image by image, a large one in bands of rows)", evaluate=f"{__package__}._at_scale:ssim_in_bands"),
    _row("kornia.losses.ssim:ssim_loss", "variance cancellation (see ssim): in float32 (the map in bands, then "
         "the release's float32 loss steps on it)", evaluate=f"{__package__}._at_scale:ssim_loss_by_map"),
    _row("kornia.metrics.ssim3d:ssim3d",
         "the local variance E[x^2] - E[x]^2 of the volume cancels in half (0.0054 off in float16, 0.039 in "
         "bfloat16): in float32"),
    _row("kornia.losses.ssim3d:ssim3d_loss", "variance cancellation (see ssim3d): in float32"),
    _row("kornia.metrics.psnr:psnr",
         "the squared error passes 65504 in float16 for differences above 256 (mse Inf: -Inf PSNR, NaN "
         "gradients) and its gradient, 2 (x - y) / (N mse ln 10) * 10, underflows for 8-bit-range images "
         "(1e-5: float16 gradients 0): in float32, narrowed once (psnr_loss calls it; the squared error "
         "filled in tiles)", evaluate=f"{__package__}._at_scale:psnr_by_squared_error"),
    _row("kornia.losses.charbonnier:charbonnier_loss",
         "sqrt(d^2 + 1) - 1 cancels for small differences (3 half steps off and more): in float32"),
    # filters and feature
    _row("kornia.filters.canny:canny",
         "float16: 'expected scalar type Float but found Half' (a float32 kernel meets the half image); "
         "bfloat16 refused by rgb_to_grayscale: edges and magnitudes in float32, narrowed once"),
    _row("kornia.filters.otsu_thresholding:otsu_threshold",
         "0.8.x: the class weights and means are cumulative sums of a 256-bin histogram in half; the "
         "between-class variance picks a threshold 0.5 off: in float32"),
    _row("kornia.filters.otsu_thresholding:OtsuThreshold.forward",
         "0.8.x: the module's slow_and_differentiable path builds a soft histogram in half, not through "
         "otsu_threshold: in bfloat16 its threshold lands two half steps off (0.5391 for 0.5373 on a 64x64 "
         "random image) and every pixel between flips; in float32"),
    _row("kornia.filters.blur_pool:blur_pool2d", BLUR_POOL + "; image by image", evaluate=PER_IMAGE),
    _row("kornia.filters.blur_pool:max_blur_pool2d",
         BLUR_POOL + "; max_pool2d, which has no float16 CPU kernel in older torch, runs in float32 with it; "
         "image by image", evaluate=PER_IMAGE),
    _row("kornia.filters.blur_pool:BlurPool2D.forward", BLUR_POOL_MODULE),
    _row("kornia.filters.blur_pool:MaxBlurPool2D.forward",
         BLUR_POOL_MODULE + "; max_pool2d, which has no float16 CPU kernel in older torch, runs in float32 with it"),
    _row("kornia.filters.gaussian:gaussian_blur2d",
         "the Gaussian kernel rounded to half, and the separable passes each rounded: 1.5x (float16) / 2.3x "
         "(bfloat16) the error of the float32 blur rounded once, separable and full kernels disagree by an ulp "
         "(0.9.0: 1.00); in float32, image by image, a large one in bands of rows (ssim, canny, unsharp_mask "
         "and the pyramids call it)",
         evaluate=FILTER_IN_BANDS),
    _row("kornia.filters.blur:box_blur",
         "the box kernel 1/(kh kw) is cast to the image's dtype (1/81 is inexact in half) before the half "
         "convolution: 1.1x (float16) / 1.2-2.1x (bfloat16) the error of the float32 blur rounded once; in float32, "
         "image by image, a large one in bands of rows", evaluate=FILTER_IN_BANDS),
    _row("kornia.filters.sobel:sobel",
         "the magnitude sqrt(gx^2 + gy^2 + eps) of half gradients: the squares overflow float16 past 256 (0-255 "
         "images with normalized=False: Inf) and the magnitude is 1.4x (2.4x bfloat16 on 0-255 images) the error "
         "of the float32 filter rounded once; in float32, image by image, a large one in bands of rows",
         evaluate=f"{__package__}._at_scale:sobel_in_bands"),
    _row("kornia.enhance.jpeg:jpeg_codec_differentiable",
         "YCbCr conversion, 8x8 DCT and the soft quantisation in half: 32x (float16) / 23x (bfloat16) the "
         "ideal error, worst pixel 0.12 (0.9.0: 1.00); in float32"),
    _row("kornia.feature.responses:gftt_response",
         "the smallest eigenvalue (a+c)/2 - sqrt(((a-c)/2)^2 + b^2) of the structure tensor cancels in half"),
    _row("kornia.feature.laf:make_upright",
         "the determinant and the rotation of the LAF's linear part round in half (0.002 off in float16, 0.016 in "
         "bfloat16; eps=1e-9 is 0 in float16): in float32"),
    # Local features: patches sampled from the half image, an orientation histogram whose peak
    # moves by a bin when a gradient rounds, LAFs rotated and scaled in half. Measured on a 64x64
    # random image, kornia 0.8.2 with the shim's other rows: image and LAF gradients 85 ulps off
    # (float16; 28-41 bfloat16) for LAFOrienter, 287 (54) for get_laf_descriptors with SIFT;
    # unpatched, float16 NaN in both.
    _row("kornia.feature.orientation:LAFOrienter.forward",
         f"{LOCAL_FEATURE}: patches, the dominant orientation and the rotated LAF in float32, narrowed once (an "
         "orienter whose angle network is converted to half keeps the release's half path: its weights would "
         "meet a float32 patch)",
         guard=f"{__name__}:holds_no_half_parameters", guard_arguments=("self",)),
    _row("kornia.feature.integrated:get_laf_descriptors",
         f"{LOCAL_FEATURE}: patches and descriptors in float32, narrowed once (a descriptor module converted to "
         "half keeps the release's half path: its weights would meet a float32 patch; LAFDescriptor and the "
         "LocalFeature pipelines call it)",
         guard=f"{__name__}:holds_no_half", guard_arguments=("patch_descriptor",)),
    # The SIFT pipelines whole (detector, orientation, descriptor; no learned weights). kornia
    # 0.9.0's own half run is far from its float32 run on the same (widened) image: on a 64x64
    # textured image, 8 features, its float16 image gradient is NaN in 3,847 of 4,096 entries
    # (SIFTFeatureScaleSpace: all 4,096), bfloat16 256 (346) ulps off at the gradient's scale,
    # and its half keypoints themselves move (a LAF centre 29-46 px away: another keypoint;
    # descriptors 0.10-0.16 off). So the target is the release's float32 forward on the widened
    # image, narrowed once; row by row the detector's half response alone still left the image
    # gradient 920 (float16) / 96 (bfloat16) ulps off on 0.8.2.
    _row("kornia.feature.integrated:LocalFeature.forward",
         f"{LOCAL_FEATURE}; the detector's half response moves keypoints and NaNs the image gradient (0.9.0 too): "
         "SIFTFeature and SIFTFeatureScaleSpace detect, orient and describe in float32, LAFs kept in float32 as "
         "0.9.0 returns them, responses and descriptors narrowed once (the pipelines with networks, and any "
         "module holding half tensors, keep the release's path)",
         outputs=("float32", "narrow", "narrow"),
         guard=f"{__name__}:is_sift_pipeline_holding_no_half", guard_arguments=("self",)),
    _row("kornia.feature.affine_shape:PatchAffineShapeEstimator.forward",
         "the second-moment matrix of weighted gradients overflows/cancels in half: all NaN; in float32"),
    _row("kornia.feature.orientation:PatchDominantGradientOrientation.forward",
         "on a flat patch the gradient magnitude is sqrt(0 + eps) with eps=1e-10, 0 in half: 0/0 in the "
         "orientation histogram's peak interpolation, NaN angle in float16 (0 instead of the float32 angle in "
         "bfloat16); the release also casts its float32 weighting to the patch's dtype in place, so one half "
         "call rounded the module's state for every later float32 call: in float32"),
    # geometry
    _row("kornia.geometry.conversions:quaternion_to_rotation_matrix",
         "an unbatched half quaternion comes back float32 (the release's (4,) path meets a float32 tensor; kornia's "
         "own TestQuaternionToRotationMatrix[half]; 0.9.0: the input's dtype): in float32, narrowed once"),
    _row("kornia.geometry.conversions:rotation_matrix_to_quaternion",
         "an unbatched half matrix comes back float32 (kornia's own TestRotationMatrixToQuaternion[half]; 0.9.0: "
         "the input's dtype); the trace branches' eps=1e-8 is 0 in float16: in float32, narrowed once"),
    _row("kornia.geometry.epipolar.essential:essential_from_fundamental",
         "K2^T F K1 in half: products of focal lengths overflow float16 partway (NaN on kornia's own "
         "TestEssentialFromFundamental[float16] and, through it, test_from_to_essential; 0.9.0 finite): in float32, "
         "narrowed once (fundamental_from_essential is a torch_ops row)"),
    _row("kornia.geometry.solvers.polynomial_solver:solve_quartic",
         "0.8.3: the resolvent cubic's discriminant (cubes and squares of the coefficients) overflows and cancels "
         "in float16: Inf/NaN roots (kornia's own test_solve_quartic[float16]; 0.9.0 finite): in float32"),
    _row("kornia.geometry.subpix.spatial_soft_argmax:conv_soft_argmax2d",
         "exp(x / 0.05) of the local maxima overflows float16 (e^20 > 65504): NaN coordinates on kornia's own "
         "TestConvSoftArgmax2d::test_cold_diag[float16] (0.9.0 finite): in float32, narrowed once"),
    _row("kornia.geometry.depth:depth_to_normals",
         "the cross product of neighbouring point differences cancels in half: in float32"),
    _row("kornia.geometry.transform.thin_plate_spline:get_tps_transform",
         "r^2 log r of close points underflows and the kernel system is solved in half: NaN; in float32"),
    _row("kornia.geometry.transform.thin_plate_spline:warp_image_tps",
         "the same r^2 log r kernel on the pixel grid: NaN in float16; the sampling grid in float32 (evaluated in "
         "bands of output rows, the same float32 values: RandomThinPlateSpline at 4x3x1024x1024 in a fraction of "
         "the release's float32 memory)", evaluate=f"{__package__}._at_scale:warp_image_tps_in_bands",
         evaluate_float32=True),
    _row("kornia.geometry.transform.thin_plate_spline:warp_points_tps",
         "the points' r^2 log r kernel distances and the two warp products in half: 2-3x the error of the float32 "
         "warp rounded once (and Tensor.matmul has no float16 CPU kernel in torch 2.1): in float32, narrowed once"),
    _row("kornia.geometry.homography:find_homography_dlt_iterated",
         "0.8.3: the residual reweighting of half points overflows (NaN); the iterations in float32"),
    # Two-view errors: products of pixel coordinates (hundreds) and matrix entries squared, then
    # divided. In half the squares underflow or overflow partway and the backward divides by them
    # again: measured on a 640x480 two-view scene (1 px noise, F of unit norm), kornia 0.8.2,
    # the point gradients (about 1) were 237 float16 / 67 bfloat16 ulps off (sampson), NaN in 19
    # of 32 (symmetrical, float16), NaN in 9 of 32 (compute_correspond_epilines, float16). The
    # gradient with respect to F itself (pixel coordinates squared over line norms: 1e7 there)
    # is beyond float16's range: narrowed once it is Inf, never NaN (docs/training.md).
    # 0.8.3 compiles it with @torch.jit.script: a generated wrapper needs its Python signature.
    replace(_row(SAMPSON,
                 f"{TWO_VIEW}: (x2^T F x1)^2 over the squared line norms in half (float16: the point gradients 237 "
                 "ulps off at 640 px; bfloat16 67): in float32, narrowed once (RANSAC and find_fundamental's errors)"
                 ).target(), gate=python_function_gate(SAMPSON)),
    _row("kornia.geometry.epipolar._metrics:symmetrical_epipolar_distance",
         f"{TWO_VIEW}: 1 / |l|^2 of lines with entries of 1e-3 overflows float16 (NaN point gradients at 640 px; "
         "bfloat16 66 ulps off): in float32, narrowed once"),
    _row("kornia.geometry.epipolar.fundamental:compute_correspond_epilines",
         f"{TWO_VIEW}: a^2 + b^2 of the line's normal underflows float16 for pixel-scale F, so 1/sqrt of it is Inf "
         "(NaN gradients) or the release's fallback 1: in float32, narrowed once"),
    _row("kornia.geometry.homography:oneway_transfer_error",
         f"{TWO_VIEW}: the projected points (H x / z) and their squared distances round in half (point gradients "
         "233 float16 / 71 bfloat16 ulps off at 640 px): in float32, narrowed once"),
    _row("kornia.geometry.homography:symmetric_transfer_error",
         f"{TWO_VIEW}: both one-way errors and the inverse homography in half (float16: Inf H gradients where "
         "float32's fit, point gradients 148 ulps off): in float32, narrowed once"),
    _row("kornia.geometry.calibration.pnp:solve_pnp_dlt",
         "under autocast the normalisations and the DLT system are half matmul products, then det has no half CPU "
         "kernel ('lu_cpu') and the system's null space is far in half: the float32 call; half inputs keep the "
         "release's dtype error (0.9.0 refuses them too)", half_inputs=False),
    _row("kornia.geometry.calibration.distort:distort_points",
         "the normalised coordinates (u - cx) / f and the radial polynomial's powers round in half before the "
         "distortion is scaled back to pixels (K gradients 24 float16 / 11 bfloat16 ulps off): in float32, "
         "narrowed once"),
)

# Output dtypes: kornia 0.9.0 keeps histograms in float32 (counts past 2048 lose whole units in
# float16, past 256 in bfloat16) and returns the input's half dtype where 0.7-0.8 drift to float32.
OUTPUT_DTYPES = (
    _row("kornia.enhance.histogram:image_histogram2d",
         "histogram counts and the kernel density sum lose whole units in half: in float32, kept in float32 "
         "as 0.9.0 returns them", outputs=("float32", "float32")),
    _row("kornia.losses.lovasz_hinge:lovasz_hinge_loss",
         "float32 returned for half input (float32 sorting buffers); the sorted cumulative Jaccard sums in "
         "float32, narrowed to the input's dtype as 0.9.0"),
    _row("kornia.losses.lovasz_softmax:lovasz_softmax_loss",
         "float32 returned for half input; the cumulative Jaccard sums in float32, narrowed to the input's dtype "
         "as 0.9.0"),
    _row("kornia.augmentation._2d.intensity.planckian_jitter:RandomPlanckianJitter.apply_transform",
         "the float32 Planckian coefficients promote a half image to float32: applied in float32, narrowed "
         "to the input's dtype as 0.9.0"),
    _row("kornia.feature.scale_space_detector:ScaleSpaceDetector.detect",
         "LAF centres of a half image step by whole pixels (bfloat16 above 128 px, float16 above 1024 px after "
         "scaling): detection in float32, LAFs kept in float32 and responses narrowed as 0.9.0 returns them "
         "(SIFTFeature, SIFTFeatureScaleSpace, GFTTAffNetHardNet, HesAffNetHardNet)", outputs=("narrow", "float32")),
    _row("kornia.geometry.transform.pyramid:ScalePyramid.forward",
         "the octaves after the first return float32 sigmas and pixel distances for a half image (0.9.0: the "
         "image's dtype); the Gaussian blurs of the half pyramid accumulate one rounding per level: in float32, "
         "every output narrowed once"),
    _row("kornia.feature.mkd:MKDDescriptor.forward",
         "the float32 embeddings (kept outside the module's buffers, so .half() cannot convert them) promote a "
         "half patch to float32: computed in float32, narrowed to the patch's dtype as 0.9.0 returns a "
         "converted module's descriptors. Under autocast a float32 patch takes the release's path: autocast "
         "casts both operands of the whitening's matmul, and a whitening built under autocast holds a half "
         "eigenvector matrix (its pcaws/pcawt shrinkage is a matmul) that the float32 call would meet as a "
         "dtype error (kornia 0.8.3's test_whitened_shape)", autocast=None),
)

ALLOW_LISTS = (
    WidenDtypes("kornia.augmentation.utils.helpers:_validate_input_dtype",
                "every augmentation refuses bfloat16 (accepts float16/32/64): half gained where float32 is accepted",
                optional=True),
)


# --------------------------------------------------------------------------------------------
# Factories that take a dtype, not a tensor: written out


def _is_half(dtype: torch.dtype) -> bool:
    return dtype == torch.float16 or dtype == torch.bfloat16


def build_discrete_kernel(original: Any) -> Any:
    def get_gaussian_discrete_kernel1d(kernel_size, sigma, force_even=False, *, device=None, dtype=None):
        half = dtype if dtype is not None and _is_half(dtype) else None
        if half is None and isinstance(sigma, torch.Tensor) and _is_half(sigma.dtype):
            half = sigma.dtype
        if half is not None:
            # The modified Bessel series sums terms up to e^(sigma^2)-sized (its scaled form still
            # overflows 65504): the float32 coefficients, each in [0, 1], narrowed once.
            widened = sigma.float() if isinstance(sigma, torch.Tensor) else sigma
            return original(kernel_size, widened, force_even, device=device,
                            dtype=torch.float32 if dtype is not None else None).to(half)
        return original(kernel_size, sigma, force_even, device=device, dtype=dtype)

    return get_gaussian_discrete_kernel1d


def build_normal_transform_pixel(original: Any) -> Any:
    def normal_transform_pixel(
        height: int,
        width: int,
        eps: float = 1e-14,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> torch.Tensor:
        # `is not None` first: TorchScript compares an Optional[dtype] only after refining it.
        if dtype is not None and _is_half(dtype):
            # A side of 1 divides by eps: 2/eps = 2e14 is Inf in float16 (and meaningless in
            # bfloat16). That side's one pixel is the whole normalised range, so it sits at its
            # centre: scale 1 and offset 0 (0.9.0's matrix), finite in every dtype.
            return _pixel_to_normalized_float32([height, width], device).to(dtype)
        return original(height, width, eps, device, dtype)

    return normal_transform_pixel


def build_normal_transform_pixel3d(original: Any) -> Any:
    def normal_transform_pixel3d(
        depth: int,
        height: int,
        width: int,
        eps: float = 1e-14,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> torch.Tensor:
        if dtype is not None and _is_half(dtype):
            # The release builds this one in the half dtype itself: 1 * 2.0 / 1e-14 overflows
            # float16 (Inf; 2e14 in bfloat16). As in 2-D: a side of 1 gets scale 1 and offset 0
            # (0.9.0's matrix).
            return _pixel_to_normalized_float32([depth, height, width], device).to(dtype)
        return original(depth, height, width, eps, device, dtype)

    return normal_transform_pixel3d


def _pixel_to_normalized_float32(size: List[int], device: Optional[torch.device]) -> torch.Tensor:
    """normal_transform_pixel's (``size`` = [height, width]) or normal_transform_pixel3d's
    ([depth, height, width]) float32 arithmetic, the same in 0.7.0-0.8.3: 2.0 / (side - 1) and
    offset -1 on the axis of each side (x is width), with 0.9.0's rule for a side of 1, all of
    it: scale 1 and offset 0 (the one pixel at the centre of the normalised range). A
    module-level function of torch alone: scripted callers compile it by name (a closure over the
    release's function failed to resolve in a TorchScript compile after other scripts in kornia's
    own geometry tests)."""
    axes = len(size)
    matrix = torch.eye(axes + 1, device=device, dtype=torch.float32)
    matrix[:axes, axes] = -1.0
    for axis in range(axes):
        side = size[axes - 1 - axis]
        if side != 1:
            matrix[axis, axis] = matrix[axis, axis] * 2.0 / (side - 1.0)
        else:
            matrix[axis, axes] = 0.0
    return matrix.unsqueeze(0)


def _normalization_chain_float32(
    widened: torch.Tensor, size_src: List[int], size_dst: List[int], denormalize: bool
) -> torch.Tensor:
    """(de)normalize_homography(3d) where a side is 1: the release builds its normalisation in
    float32 and casts it to half, so that side divides by eps=1e-14 and the 2e14 entry is Inf in
    float16 (and swamps every other term in bfloat16). 0.9.0's normalisation of that side (scale 1,
    offset 0), the chain in float32; the caller narrows once."""
    src = _pixel_to_normalized_float32(size_src, widened.device)
    dst = _pixel_to_normalized_float32(size_dst, widened.device)
    if denormalize:
        return torch.inverse(dst) @ (widened @ src)
    return dst @ (widened @ torch.inverse(src))


def build_normalize_homography(original: Any) -> Any:
    def normalize_homography(
        dst_pix_trans_src_pix: torch.Tensor, dsize_src: Tuple[int, int], dsize_dst: Tuple[int, int]
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if leave_autocast(dst_pix_trans_src_pix):
                # Autocast would make the normalisation's matmuls half again: the same call with
                # autocast off (a float32 matrix: the float32 call outside autocast).
                with autocast_off(dst_pix_trans_src_pix.device.type):
                    return normalize_homography(dst_pix_trans_src_pix, dsize_src, dsize_dst)
        if isinstance(dst_pix_trans_src_pix, torch.Tensor) and _is_half(dst_pix_trans_src_pix.dtype):
            widened = dst_pix_trans_src_pix.float()
            if min(dsize_src[0], dsize_src[1], dsize_dst[0], dsize_dst[1]) != 1:
                return original(widened, dsize_src, dsize_dst).to(dst_pix_trans_src_pix.dtype)
            src, dst = [dsize_src[0], dsize_src[1]], [dsize_dst[0], dsize_dst[1]]
            return _normalization_chain_float32(widened, src, dst, False).to(dst_pix_trans_src_pix.dtype)
        return original(dst_pix_trans_src_pix, dsize_src, dsize_dst)

    return normalize_homography


def build_denormalize_homography(original: Any) -> Any:
    def denormalize_homography(
        dst_pix_trans_src_pix: torch.Tensor, dsize_src: Tuple[int, int], dsize_dst: Tuple[int, int]
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if leave_autocast(dst_pix_trans_src_pix):
                # Autocast would make the normalisation's matmuls half again: the same call with
                # autocast off (a float32 matrix: the float32 call outside autocast).
                with autocast_off(dst_pix_trans_src_pix.device.type):
                    return denormalize_homography(dst_pix_trans_src_pix, dsize_src, dsize_dst)
        if isinstance(dst_pix_trans_src_pix, torch.Tensor) and _is_half(dst_pix_trans_src_pix.dtype):
            widened = dst_pix_trans_src_pix.float()
            if min(dsize_src[0], dsize_src[1], dsize_dst[0], dsize_dst[1]) != 1:
                return original(widened, dsize_src, dsize_dst).to(dst_pix_trans_src_pix.dtype)
            src, dst = [dsize_src[0], dsize_src[1]], [dsize_dst[0], dsize_dst[1]]
            return _normalization_chain_float32(widened, src, dst, True).to(dst_pix_trans_src_pix.dtype)
        return original(dst_pix_trans_src_pix, dsize_src, dsize_dst)

    return denormalize_homography


def build_normalize_homography3d(original: Any) -> Any:
    def normalize_homography3d(
        dst_pix_trans_src_pix: torch.Tensor, dsize_src: Tuple[int, int, int], dsize_dst: Tuple[int, int, int]
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if leave_autocast(dst_pix_trans_src_pix):
                # Autocast would make the normalisation's matmuls half again: the same call with
                # autocast off (a float32 matrix: the float32 call outside autocast).
                with autocast_off(dst_pix_trans_src_pix.device.type):
                    return normalize_homography3d(dst_pix_trans_src_pix, dsize_src, dsize_dst)
        if isinstance(dst_pix_trans_src_pix, torch.Tensor) and _is_half(dst_pix_trans_src_pix.dtype):
            widened = dst_pix_trans_src_pix.float()
            if min(dsize_src[0], dsize_src[1], dsize_src[2], dsize_dst[0], dsize_dst[1], dsize_dst[2]) != 1:
                return original(widened, dsize_src, dsize_dst).to(dst_pix_trans_src_pix.dtype)
            src = [dsize_src[0], dsize_src[1], dsize_src[2]]
            dst = [dsize_dst[0], dsize_dst[1], dsize_dst[2]]
            return _normalization_chain_float32(widened, src, dst, False).to(dst_pix_trans_src_pix.dtype)
        return original(dst_pix_trans_src_pix, dsize_src, dsize_dst)

    return normalize_homography3d


class _HalfResponseView:
    """A MultiResolutionDetector seen with a float32 image: its response model still runs on the
    half image (with the module's half weights), or under the caller's autocast (``autocast``, a
    float32 image: autocast's half convolutions), and everything after it in float32."""

    def __init__(self, module: Any, dtype: Optional[torch.dtype], autocast: Optional[torch.dtype] = None) -> None:
        self._module = module
        self._dtype = dtype
        self._autocast = autocast

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def model(self, image: torch.Tensor) -> torch.Tensor:
        # Narrowing the widened image back is exact; widening the response is exact, so the
        # non-maximum suppression picks exactly the release's half candidates.
        if self._autocast is not None:
            with torch.autocast(image.device.type, dtype=self._autocast):
                return self._module.model(image).float()
        return self._module.model(image.to(self._dtype)).float()


def build_single_level_detection(original: Any) -> Any:
    def detect_features_on_single_level(self, level_img, num_kp, factor):
        if _is_half(level_img.dtype):
            half = level_img.dtype
            scores, lafs = original(_HalfResponseView(self, half), level_img.float(), num_kp, factor)
            # Pixel positions times the level's scale factor: in half they round to whole pixels
            # (bfloat16 above 256 px, float16 above 2048 px), so the LAFs stay in float32 as in
            # 0.9.0. The scores are half values widened; 0.8.3's fill for the unfilled slots is
            # finfo(dtype).min / 2, which is finfo(half).min / 2 in the release's half run.
            scores = scores.clamp_min(torch.finfo(half).min / 2).to(half)
            return scores, lafs
        autocast = autocast_half(level_img)
        if autocast is not None:
            # Under autocast the response model (a network) runs in autocast's half, as the
            # release runs it; its response is widened (exact) and the candidates, LAFs and scores
            # come out of float32 with autocast off: 0.8.3 fills the unfilled slots with
            # finfo(dtype).min / 2, -1.7e38 in float32 and -32752 in half, which the float32
            # call and 0.9.0 agree on.
            with autocast_off(level_img.device.type):
                return original(_HalfResponseView(self, None, autocast), level_img, num_kp, factor)
        return original(self, level_img, num_kp, factor)

    return detect_features_on_single_level


def _rgb_to_hls_float32(image: torch.Tensor, eps: float) -> torch.Tensor:
    """The releases' HLS conversion (0.7.0-0.8.3 compute it alike) on a float32 image, with the
    hue's chroma division made safe where the chroma is 0 (0.9.0's rule). There the release
    divides the channel differences, exactly 0, by ``0 + eps``: the hue is 0 either way, but its
    derivative is (pi/3) / eps = 1e8 times the upstream gradient (4.3e8 on a random projection),
    past float16's range, so the float32 gradient narrowed is Inf. Dividing by 1 where the chroma
    is 0 keeps every value the release computes (differences of 0 stay 0) and gives the hue the
    derivative (pi/3) * d(difference) there, as 0.9.0 does (1.047 for a unit upstream)."""
    hue_sectors = torch.tensor([[[0.0]], [[1.0]], [[2.0]]], device=image.device, dtype=image.dtype)
    maximum, argmax = image.max(-3)
    minimum = image.min(-3)[0]
    lightness = maximum + minimum
    chroma = maximum - minimum
    safe_chroma = torch.where(chroma == 0, torch.ones_like(chroma), chroma + eps)
    scaled = image / safe_chroma.unsqueeze(-3)
    saturation = chroma / (torch.where(lightness < 1.0, lightness, 2.0 - lightness) + eps)
    lightness = lightness / 2
    r, g, b = scaled[..., 0, :, :], scaled[..., 1, :, :], scaled[..., 2, :, :]
    sector = argmax[..., None, :, :] == hue_sectors
    hue = ((g - b) % 6) * sector[..., 0, :, :]
    hue = hue + (b - r + 2) * sector[..., 1, :, :]
    hue = hue + (r - g + 4) * sector[..., 2, :, :]
    hue = hue * (math.pi / 3.0)
    return torch.stack([hue, lightness, saturation], -3)


def build_rgb_to_hls(original: Any) -> Any:
    def rgb_to_hls(image: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        if isinstance(image, torch.Tensor) and _is_half(image.dtype):
            if len(image.shape) < 3 or image.shape[-3] != 3:
                return original(image, eps)  # kornia's own shape error
            # On gray pixels the chroma is 0 and eps=1e-8 is 0 in float16 (0/0: NaN hue); in
            # float32 the hue is right but its gradient is 1e8-scaled (see _rgb_to_hls_float32).
            return _rgb_to_hls_float32(image.float(), eps).to(image.dtype)
        return original(image, eps)

    return rgb_to_hls


def _ms_ssim_masks_as_built(masks: torch.Tensor) -> torch.Tensor:
    """The float32 Gaussian masks of a MS_SSIMLoss converted to half. The module keeps no sigmas,
    so the default ones (0.5, 1, 2, 4, 8: 15 masks of 33x33) are rebuilt with the releases' own
    arithmetic (``_fspecial_gauss_2d``, the same in 0.7.0-0.8.3) and taken when they narrow to
    exactly the module's half masks: then the half loss and gradient are the float32 module's
    narrowed once, as kornia 0.9.0's. Other masks (custom sigmas, edited buffers) are widened and
    renormalised to sum 1, as built (the gradient within 1.1 half ulps of the float32 module's).
    A module-level function of torch alone: the scripted forward compiles it by name."""
    sigmas = [0.5, 1.0, 2.0, 4.0, 8.0]
    size = int(4 * sigmas[-1] + 1)
    widened = masks.float()
    renormalised = widened / widened.sum(dim=[1, 2, 3], keepdim=True)
    if masks.dim() == 4 and masks.shape[0] == 3 * len(sigmas) and masks.shape[1] == 1 \
            and masks.shape[2] == size and masks.shape[3] == size:
        built = torch.zeros((3 * len(sigmas), 1, size, size), device=masks.device)
        for idx, sigma in enumerate(sigmas):
            coords = torch.arange(size, device=masks.device)
            coords -= size // 2
            gaussian = torch.exp(-(coords**2) / (2 * sigma**2))
            gaussian /= gaussian.sum()
            kernel = torch.outer(gaussian.reshape(-1), gaussian.reshape(-1))
            for channel in range(3):
                built[3 * idx + channel, 0, :, :] = kernel
        # A tensor select, not a Python branch on the comparison: torch.compile(fullgraph=True)
        # traces it without a data-dependent break.
        return torch.where((built.to(masks.dtype) == masks).all(), built, renormalised)
    return renormalised


def build_ms_ssim_forward(original: Any) -> Any:
    def forward(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if not (isinstance(img1, torch.Tensor) and isinstance(img2, torch.Tensor) and _is_half(img1.dtype)):
                if autocast_half(img1) is not None:
                    # Under autocast the 33x33 depthwise convolutions of the float32 images run in
                    # half (in float16 they never return on avx512_fp16 CPUs: oneDNN's hang) and
                    # the variances cancel as for half images: the float32 loss, autocast off
                    # (kornia 0.9.0 computes this loss in float32).
                    with autocast_off(img1.device.type):
                        return original(self, img1, img2)
                return original(self, img1, img2)
            if autocast_on(img1):
                with autocast_off(img1.device.type):
                    return forward(self, img1, img2)
        # The release's forward (the same in 0.7.0-0.8.3), written out so that TorchScript compiles
        # the half path too; full precision computes exactly what the release computes.
        if not len(img1.shape) == len(img2.shape):
            raise ValueError(f"Input shapes should be same. Got {type(img1)} and {type(img2)}.")
        dtype = img1.dtype
        g_masks: torch.Tensor = torch.jit.annotate(torch.Tensor, self._g_masks)
        if _is_half(dtype):
            # The local (co)variances E[xy] - E[x]E[y] cancel: in bfloat16 the moments (about 0.25)
            # round by 2^-9, the size of the variances themselves, so cs and its derivative
            # 2 / (sigma_x^2 + sigma_y^2 + C2), C2 = 9e-4, are wrong by O(1) where the image is
            # smooth: the forward's mean hides it, the per-pixel gradient does not (2-3% of
            # input gradients 40-90x off). Images widened (exact), narrowed once.
            img1, img2 = img1.float(), img2.float()
            if _is_half(g_masks.dtype):
                # A module converted to half holds its Gaussian masks rounded: each sum moves off 1
                # by up to 2.4e-3 (bfloat16), and with a kernel of sum s the variance is
                # s sigma^2 + s (1 - s) mu^2, whose second term (mu^2 ~ 0.25) is as large as the
                # variances. kornia 0.9.0's converted module computes with the masks as built
                # (its gradient is the float32 module's narrowed, within 0.52 half ulps): the
                # masks as built in float32 (see _ms_ssim_masks_as_built).
                g_masks = _ms_ssim_masks_as_built(g_masks)
        CH: int = img1.shape[-3]
        mux = F.conv2d(img1, g_masks, groups=CH, padding=self.pad)
        muy = F.conv2d(img2, g_masks, groups=CH, padding=self.pad)
        mux2 = mux * mux
        muy2 = muy * muy
        muxy = mux * muy
        sigmax2 = F.conv2d(img1 * img1, g_masks, groups=CH, padding=self.pad) - mux2
        sigmay2 = F.conv2d(img2 * img2, g_masks, groups=CH, padding=self.pad) - muy2
        sigmaxy = F.conv2d(img1 * img2, g_masks, groups=CH, padding=self.pad) - muxy
        lc = (2 * muxy + self.C1) / (mux2 + muy2 + self.C1)
        cs = (2 * sigmaxy + self.C2) / (sigmax2 + sigmay2 + self.C2)
        lM = lc[:, -1, :, :] * lc[:, -2, :, :] * lc[:, -3, :, :]
        PIcs = cs.prod(dim=1)
        loss_ms_ssim = 1 - lM * PIcs
        loss_l1 = F.l1_loss(img1, img2, reduction="none")
        gaussian_l1 = F.conv2d(loss_l1, g_masks[-CH:], groups=CH, padding=self.pad).mean(1)
        loss = self.alpha * loss_ms_ssim + (1 - self.alpha) * gaussian_l1 / self.DR
        loss = self.compensation * loss
        if self.reduction == "mean":
            loss = torch.mean(loss)
        elif self.reduction == "sum":
            loss = torch.sum(loss)
        elif self.reduction == "none":
            pass
        else:
            raise NotImplementedError(f"Invalid reduction mode: {self.reduction}")
        return loss.to(dtype)

    return forward


# First in the table: the probe runs its original.
RGB_TO_HLS = Target(
    ("kornia.color.hls:rgb_to_hls",), build_rgb_to_hls, ("image", "eps"), optional=True,
    reason=ZERO_CHROMA + " (and saturation); in float32 with the hue's chroma division safe where the chroma is 0 "
           "(0.9.0's rule: the release's float32 hue gradient there is 1e8-scaled, Inf in float16)")

FACTORIES = (
    Target(("kornia.losses.ms_ssim:MS_SSIMLoss.forward",), build_ms_ssim_forward, ("self", "img1", "img2"),
           optional=True,
           reason="the local (co)variances E[xy] - E[x]E[y] cancel in half: bfloat16 input gradients 40-90x off on "
                  "2-3% of pixels; images and the module's masks widened, the release's loss in float32, narrowed "
                  "once (written out: the module scripts)"),
    Target(("kornia.filters.kernels:get_gaussian_discrete_kernel1d",), build_discrete_kernel,
           ("kernel_size", "sigma", "force_even"), optional=True,
           reason="the Bessel series overflows float16: all NaN; coefficients in float32, narrowed once "
                  "(the discrete Gaussian blurs use it)"),
    Target(("kornia.geometry.conversions:normal_transform_pixel",), build_normal_transform_pixel,
           ("height", "width", "eps"), optional=True,
           reason="eps=1e-14 is 0 in float16: a side of 1 gives Inf; in half that side takes 0.9.0's scale 1 and "
                  "offset 0"),
    Target(("kornia.geometry.conversions:normalize_homography",), build_normalize_homography,
           ("dst_pix_trans_src_pix", "dsize_src", "dsize_dst"), optional=True,
           reason="the float32 normalisation cast to half: a side of 1 gives 2e14, Inf in float16; in float32 "
                  "with 0.9.0's scale 1 and offset 0 on that side, narrowed once (warp_perspective, warp_affine call it)"),
    Target(("kornia.geometry.conversions:denormalize_homography",), build_denormalize_homography,
           ("dst_pix_trans_src_pix", "dsize_src", "dsize_dst"), optional=True,
           reason="as normalize_homography: a side of 1 gives Inf in float16; in float32, narrowed once"),
    Target(("kornia.geometry.conversions:normal_transform_pixel3d",), build_normal_transform_pixel3d,
           ("depth", "height", "width", "eps"), optional=True,
           reason="built in the half dtype: 1 * 2.0 / eps overflows float16, Inf for a side of 1 (2e14 in "
                  "bfloat16); in half that side takes 0.9.0's scale 1 and offset 0, the rest the float32 matrix "
                  "narrowed"),
    Target(("kornia.geometry.conversions:normalize_homography3d",), build_normalize_homography3d,
           ("dst_pix_trans_src_pix", "dsize_src", "dsize_dst"), optional=True,
           reason="the float32 normalisation cast to half: a side of 1 gives 2e14, Inf in float16; in float32 "
                  "with 0.9.0's scale 1 and offset 0 on that side, narrowed once"),
    Target(("kornia.feature.scale_space_detector:MultiResolutionDetector.detect_features_on_single_level",),
           build_single_level_detection, ("self", "level_img", "num_kp", "factor"), optional=True,
           reason="LAF centres (pixel index x level factor) of a half image round to whole pixels: the response "
                  "model in half as the release, LAFs built in float32 as 0.9.0 returns them (KeyNetDetector, "
                  "KeyNetHardNet, KeyNetAffNetHardNet)"),
)


def probe(originals: Sequence[Any]) -> Finding:
    """The zero-chroma NaN of rgb_to_hsv in float16, or bfloat16 refused by rgb_to_grayscale."""
    rgb_to_hls = originals[0]
    if rgb_to_hls is not None:
        gray = torch.full((1, 3, 1, 1), 0.5, dtype=torch.float16)
        if not bool(torch.isfinite(rgb_to_hls(gray)).all()):
            return bug_present("rgb_to_hls of a gray float16 pixel is NaN (eps=1e-8 is 0 in float16)")
    return not_needed("rgb_to_hls of a gray float16 pixel is finite")


FIX = Fix(
    name="kornia_dtypes",
    targets=(RGB_TO_HLS,) + ROWS + OUTPUT_DTYPES + ALLOW_LISTS + FACTORIES,
    probe=probe,
    demonstration="kornia_halfpatch.demos.kornia_dtypes:demonstrate",
)
