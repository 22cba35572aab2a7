"""kornia's networks in half: the tensors a network makes for itself follow its dtype (docs/fixes/networks_half.md).

A network converted with ``.to(torch.float16)`` / ``.half()`` / ``.to(torch.bfloat16)`` holds its
parameters and buffers in half, but some of kornia's networks make tensors of their own inside
``forward`` (a ``linspace`` kept as a plain attribute, an attention bias cached at ``train(False)``,
a score buffer from ``zeros``, a ``.float()`` that is never narrowed). Those stay float32 and meet
the half activations: the concatenation or matmul either promotes the rest of the network to
float32, where it meets half weights and fails ("Input type (float) and bias type (c10::Half)
should be the same", "expected m1 and m2 to have the same dtype"), or fails on the spot
("Index put requires the source and destination dtypes match"). Others compute a step whose
precision half cannot hold: LoFTR's dual-softmax logits (about 91 in magnitude) rounded to half
before ``exp`` (a relative error of 2-6% in the coarse confidence), NeRF's positional encoding
``sin(2^k x)`` of half sample points (``2^9 x`` has a half ulp of 0.25-0.5 rad).

Each row below edits the release's own lines, so the network stays a half network (its
convolutions, linear layers and attention run in half: on hardware with half arithmetic that is
what makes half cheaper), and only the step that needs float32 runs in float32, narrowed once:
- a tensor the network makes follows the dtype of the half activations it meets;
- a positional encoding, a softmax's logits, a rotary embedding: computed in float32 from the
  half values, narrowed once.
float32 and float64 keep the release's own lines (each edit is conditional on a half dtype; a
float64 network that failed only for a float32 tensor of its own (LightGlue's scores, SAM's point
encoding) now runs in float64). The same dtypes as kornia 0.9.0 come out.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from .. import _precision as precision
from .._model import EditSource, Fix, Promote

NAME = "networks_half"

# "This tensor is float16 or bfloat16" without naming torch (DeDoDe's detector module does not import it).
_HALF = "({0}.is_floating_point() and {0}.element_size() == 2)"

# Written by LoFTR's coarse matching into its data dict: narrowed with the coarse level.
_COARSE_OUTPUTS = ("conf_matrix", "mkpts0_c", "mkpts1_c", "mconf")


def _halfpatch_loftr_coarse(
    transformer: torch.nn.Module, feat_c0: torch.Tensor, feat_c1: torch.Tensor, mask_c0: Any, mask_c1: Any
) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.dtype], Optional[torch.dtype]]:
    """(coarse features, the half dtype that reached the coarse level or None, the half dtype of a
    half network or None). The release's transformer where no half reaches it; else its float32
    forward (autocast off), on float32 copies of half weights."""
    half = precision.half_reaching(feat_c0)
    if half is None:
        feat_c0, feat_c1 = transformer(feat_c0, feat_c1, mask_c0, mask_c1)
        return feat_c0, feat_c1, None, None
    network = half if precision.is_half(feat_c0.dtype) else None
    from .networks_cpu_half import run_in_float32

    with precision.autocast_off(feat_c0.device.type):
        feat_c0, feat_c1 = run_in_float32(transformer, (feat_c0, feat_c1, mask_c0, mask_c1), {}, half, narrow=False)
    return feat_c0.float(), feat_c1.float(), half, network


def _halfpatch_coarse_matching(
    matching: torch.nn.Module,
    feat_c0: torch.Tensor,
    feat_c1: torch.Tensor,
    data: Dict[str, Any],
    mask_c0: Any,
    mask_c1: Any,
    half: Optional[torch.dtype],
    network: Optional[torch.dtype],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The coarse matching: the release's on the release's coarse level; on the float32 one with
    autocast off, then the matches and the confidence narrowed once to the half dtype that reached
    it (a half network's, or autocast's: the dtypes 0.9.0 returns), and a half network's coarse
    features (which its fine level takes) to its dtype."""
    if half is None:
        matching(feat_c0, feat_c1, data, mask_c0=mask_c0, mask_c1=mask_c1)
        return feat_c0, feat_c1
    with precision.autocast_off(feat_c0.device.type):
        matching(feat_c0, feat_c1, data, mask_c0=mask_c0, mask_c1=mask_c1)
    for key in _COARSE_OUTPUTS:
        value = data.get(key)
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            data[key] = value.to(half)
    if network is None:
        return feat_c0, feat_c1
    return feat_c0.to(network), feat_c1.to(network)


TABLE = (
    EditSource(
        "kornia.feature.lightglue:LightGlue._forward",
        "the pruned points' scores are written into a zeros() buffer of the default dtype: a half score "
        "cannot be index-put into float32 (nor a float64 one): the buffer takes the scores' dtype",
        edits=(
            ("((b, m), device=mscores0.device)",
             "((b, m), device=mscores0.device, dtype=None if mscores0.dtype == torch.float32 else mscores0.dtype)"),
            ("((b, n), device=mscores1.device)",
             "((b, n), device=mscores1.device, dtype=None if mscores1.dtype == torch.float32 else mscores1.dtype)"),
        ),
    ),
    EditSource(
        "kornia.feature.dedode.detector:DeDoDeDetector.forward",
        "the decoder's context is upsampled in float32 (bfloat16 had no CPU interpolate) and fed back "
        "unnarrowed to the half decoder: narrowed once to the images' half dtype after the upsampling",
        edits=(
            ('context = F.interpolate(context.float(), size=size, mode="bilinear", align_corners=False)',
             'context = F.interpolate(context.float(), size=size, mode="bilinear", align_corners=False)\n'
             f"if {_HALF.format('images')}:\n"
             "    context = context.to(dtype)"),
        ),
    ),
    EditSource(
        "kornia.feature.defmo:RenderingDeFMO.forward",
        "the rendering times are a float32 linspace kept as a plain attribute (not a buffer), so .to(half) "
        "leaves them float32 and their concatenation promotes the half latent: they follow the latent's dtype",
        edits=(
            ("times = self.times.to(latent.device)",
             f"times = (self.times.to(latent.device, latent.dtype) if {_HALF.format('latent')} "
             "else self.times.to(latent.device))"),
        ),
    ),
    EditSource(
        ("kornia.contrib.models.tiny_vit:Attention.forward", "kornia.models.tiny_vit:Attention.forward"),
        "the attention bias is cached at train(False): a network converted to half after eval() keeps a float32 "
        "cache that promotes the half attention: a cache of another dtype than the half biases is taken afresh",
        edits=(
            ("bias = self.attention_biases[:, self.attention_bias_idxs] if self.training else self.ab",
             "bias = self.attention_biases[:, self.attention_bias_idxs] if self.training else self.ab\n"
             f"if ({_HALF.format('self.attention_biases')}) and bias.dtype != self.attention_biases.dtype:\n"
             "    bias = self.attention_biases[:, self.attention_bias_idxs]"),
        ),
    ),
    EditSource(
        ("kornia.contrib.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom._pe_encoding",
         "kornia.models.sam.architecture.prompt_encoder:PositionEmbeddingRandom._pe_encoding"),
        "points are encoded in float32 against the half Gaussian matrix (a dtype error), and the phases "
        "2*pi*(c @ G) reach tens of radians, where a half ulp is 0.03: computed in float32, narrowed once to "
        "the matrix's half dtype; a float64 matrix takes the points in float64",
        edits=(
            ("coords = coords @ self.positional_encoding_gaussian_matrix",
             "_halfpatch_matrix = self.positional_encoding_gaussian_matrix\n"
             f"if {_HALF.format('_halfpatch_matrix')}:\n"
             "    coords = coords.float() @ _halfpatch_matrix.float()\n"
             "    _halfpatch_dtype = _halfpatch_matrix.dtype\n"
             "else:\n"
             "    coords = coords.to(_halfpatch_matrix.dtype) @ _halfpatch_matrix\n"
             "    _halfpatch_dtype = coords.dtype"),
            ("cos(coords)], dim=-1)", "cos(coords)], dim=-1).to(_halfpatch_dtype)"),
        ),
    ),
    EditSource(
        ("kornia.contrib.models.sam.architecture.prompt_encoder:PromptEncoder.forward",
         "kornia.models.sam.architecture.prompt_encoder:PromptEncoder.forward"),
        "the sparse prompt embeddings start from an empty tensor of the default dtype (float32): concatenated "
        "with the half point embeddings it promotes them, and the half mask decoder meets float32: it takes "
        "the embeddings' dtype",
        edits=(
            ("torch.empty((bs, 0, self.embed_dim), device=self._get_device())",
             "torch.empty((bs, 0, self.embed_dim), device=self._get_device(), "
             "dtype=None if self.point_embeddings[0].weight.dtype == torch.float32 "
             "else self.point_embeddings[0].weight.dtype)"),
        ),
    ),
    EditSource(
        ("kornia.contrib.models.efficient_vit.nn.ops:LiteMLA.relu_linear_att",
         "kornia.models.efficient_vit.nn.ops:LiteMLA.relu_linear_att"),
        "the linear attention widens float16 qkv to float32 (its sums over H*W overflow float16) and returns "
        "float32 to the half projection: narrowed once to float16 on the way out",
        edits=(
            ("if qkv.dtype == torch.float16:", "_halfpatch_dtype = qkv.dtype\nif qkv.dtype == torch.float16:"),
            ("return out", "return out.to(_halfpatch_dtype) if _halfpatch_dtype == torch.float16 else out"),
        ),
    ),
    EditSource(
        "kornia.feature.loftr.loftr:LoFTR.forward",
        "the coarse dual-softmax confidence exp(s) has a condition number |s| (about 90 with random weights, "
        "10-20 trained): a half rounding of the coarse features (2^-11) moves it by 2-6%, 12-14x the bound. "
        "The coarse transformer runs in float32 (cached float32 copies of its weights) on the half backbone's "
        "features and the matching takes its float32 output; the matches, the confidence and the features "
        "the fine level takes are narrowed once to the network's half dtype (under autocast: the float32 "
        "coarse level outside autocast, its matches narrowed to autocast's dtype as 0.9.0 returns them)",
        edits=(
            ("feat_c0, feat_c1 = self.loftr_coarse(feat_c0, feat_c1, mask_c0, mask_c1)",
             "feat_c0, feat_c1, _halfpatch_half, _halfpatch_network = _halfpatch_loftr_coarse("
             "self.loftr_coarse, feat_c0, feat_c1, mask_c0, mask_c1)"),
            ("self.coarse_matching(feat_c0, feat_c1, _data, mask_c0=mask_c0, mask_c1=mask_c1)",
             "feat_c0, feat_c1 = _halfpatch_coarse_matching(self.coarse_matching, feat_c0, feat_c1, _data, mask_c0, "
             "mask_c1, _halfpatch_half, _halfpatch_network)"),
        ),
        helpers=(f"{__name__}:_halfpatch_loftr_coarse", f"{__name__}:_halfpatch_coarse_matching"),
    ),
    EditSource(
        ("kornia.contrib.models.rt_detr.architecture.rtdetr_head:TransformerDecoder.forward",
         "kornia.models.rt_detr.architecture.rtdetr_head:TransformerDecoder.forward"),
        "each decoder layer refines the boxes as sigmoid(delta + inverse_sigmoid(sigmoid(reference))): in half "
        "the sigmoid of a logit past 8 is 1 exactly and the inverse sigmoid gives its clip (11.5) instead of the "
        "logit, so the boxes lose the reference (0.29 mean relative error in float16, 148x the bound; 0.9.0 "
        "the same): the references are carried in float32 beside the half ones, the boxes narrowed once",
        edits=(
            ("ref_points_detach = torch.sigmoid(ref_points_unact)",
             "ref_points_detach = torch.sigmoid(ref_points_unact)\n"
             f"_halfpatch_reference = torch.sigmoid(ref_points_unact.float()) if {_HALF.format('ref_points_unact')} "
             "else None"),
            ("inter_ref_bbox = torch.sigmoid(bbox_head[i](output) + _inverse_sigmoid(ref_points_detach))",
             "if _halfpatch_reference is None:\n"
             "    inter_ref_bbox = torch.sigmoid(bbox_head[i](output) + _inverse_sigmoid(ref_points_detach))\n"
             "else:\n"
             "    _halfpatch_reference = torch.sigmoid(bbox_head[i](output).float() + "
             "_inverse_sigmoid(_halfpatch_reference))\n"
             "    inter_ref_bbox = _halfpatch_reference.to(output.dtype)"),
        ),
    ),
    EditSource(
        "kornia.feature.xfeat:XFeat._preprocess_tensor",
        "the image is resized with F.interpolate(x.float()) (bfloat16 had no CPU interpolate) and handed to the "
        "network in float32: a half network's first convolution refuses it (0.9.0 too); the resized image "
        "is narrowed once to the network's half dtype",
        edits=(
            ("x = F.interpolate(x.float(), (_H, _W), mode=\"bilinear\", align_corners=False)",
             "x = F.interpolate(x.float(), (_H, _W), mode=\"bilinear\", align_corners=False)\n"
             "_halfpatch_weight = next(self.parameters(), None)\n"
             f"if _halfpatch_weight is not None and {_HALF.format('_halfpatch_weight')}:\n"
             "    x = x.to(_halfpatch_weight.dtype)"),
        ),
    ),
    Promote(
        "kornia.nerf.positional_encoder:PositionalEncoder.forward",
        "sin(2^k x) and cos(2^k x) of half sample points: at k = 9 a half ulp of 2^9 x is 0.25-0.5 rad, so "
        "the encoding is noise; computed in float32 from the half points, narrowed once",
        optional=True,
    ),
    Promote(
        "kornia.models.kimi_vl.moonvit:apply_rotary_pos_emb",
        "the rotary cos/sin tables are float32: half q and k come out float32 beside a half v (an attention "
        "dtype error); rotated in float32 from the half values, narrowed once to their dtype",
        optional=True,
    ),
)

FIX = Fix(name=NAME, targets=TABLE, demonstration="kornia_halfpatch.demos.networks_half:demonstrate")
