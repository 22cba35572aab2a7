"""A census of the big neural networks a kornia release ships, in float16 and bfloat16, on CPU.

    python tools/networks_census.py run --out RUN.jsonl [--no-shim] [--cpu-half native|float32|auto]
            [--timeout 120] [-k SUBSTRING]
    python tools/networks_census.py compare A.jsonl B.jsonl ... [--names a,b] [--markdown OUT.md]
    python tools/networks_census.py discover

Run ``run`` with the python of the environment under test. By default this repository's shim is
applied first (``kornia_halfpatch.apply(cpu_half=...)``, the option left at its default unless
``--cpu-half`` is given); ``--no-shim`` runs the release alone (also how kornia 0.9.0, which has
no shim installed, is run: kornia_halfpatch is then never imported). The units (a case's build and
hashes, then case x dtype x mode) run in a spawned worker process, one network in memory at a
time; a unit that does not answer within ``--timeout`` seconds is recorded as a timeout (a worker
that dies, as an error) and the worker is restarted. An existing ``--out`` is resumed. The run's
first record names the kornia, torch and (with the shim) this repository's commit.

The cases: one per network (``CASES`` below). A builder constructs the network with seeded
random weights (``torch.manual_seed(0)``), the smallest configuration the release offers, in eval
mode, and returns it with its float32 example inputs (smooth images with blobs, keypoints,
prompts...) and the call. Nothing is downloaded: the weight loaders (torch.hub's, kornia's) raise
and sockets refuse to connect; the few constructors that always load weights (FaceDetector,
LightGlueMatcher, KeyNetAffNetHardNet) run with loading turned off. A network the installed
release lacks is recorded as "absent". Every call is preceded by ``torch.manual_seed(0)``
(RANSAC); NeRF's inference-time noise is drawn in float32 and cast, the same in every dtype.

Per case and half dtype d (float16, bfloat16), two modes:

* ``convert``: ``net_d = deepcopy(net).to(d)`` on the inputs rounded to d (floating tensors only;
  a network deepcopy cannot copy is built again and given the same state);
* ``autocast``: the weights rounded to d and held in float32 (``net32 = deepcopy(net_d).float()``)
  called on the rounded inputs widened to float32 inside ``torch.autocast("cpu", dtype=d)``.

References, on the same rounded weights and inputs: out32 (``net32``, float32, no autocast) and
out64 (``deepcopy(net_d).double()`` on float64 inputs; if float64 fails in the release, that is
recorded and out32 is the reference, flagged). Per floating output tensor (nested outputs are
flattened: dicts, lists, tuples, dataclasses, result objects):

* ``err = mean|out - ref| / mean|ref|`` (in float64, over the entries where the references are
  finite), ``rounding = mean|out32.to(d) - ref| / mean|ref|``, ``bound = 20 * rounding`` (or
  ``20 * eps(d) / 2`` when rounding is 0), ``ratio = err / bound``;
* finite: out finite wherever out32 is finite.

A unit (case x dtype x mode) passes when it raises nothing, returns in time, is finite where
float32 is and every judged floating output has ``err <= bound``. Judged: the case's dense
outputs (declared by the case, some captured from inside the call with a forward hook, e.g.
LoFTR's coarse confidence matrix, LightGlue's log-assignment, a detector's score map) and every
other output whose shape agrees with the reference's, except the case's "info" outputs (top-k
selections whose order is not stable: reported, not judged). An output whose shape differs from
the reference's (a different number of matches) is recorded as a shape mismatch: a failure when
the case has no dense output to judge instead, a note otherwise. Statuses: pass, fail, error,
timeout, absent, reference-failed (the float32 reference on the rounded weights raised), and
uncovered (below).

Per case, once: sha256 of the outputs of the original float32 network on the float32 inputs and
of ``deepcopy(net).double()`` on float64 inputs, so that ``compare`` shows whether a shim run and a
``--no-shim`` run of the same release agree bit for bit in float32/float64 ("bitwise").

Discovery (``discover``, and at the end of ``run``): every module of the installed kornia is
imported (pkgutil.walk_packages, import errors ignored). The heuristic: an ``nn.Module`` subclass
defined in kornia "holds learned parameters" when the identifiers of its source (names and
attribute names, via ``ast``: docstrings and comments do not count) include a torch layer with
weights (Conv*d, Linear, Embedding, MultiheadAttention, norms, LSTM/GRU, PReLU, ...) or the name
of a kornia class or function that does (to a fixed point), or it subclasses such a class. Such a
class is listed as a network when no other such class names it (it is not a building block of
another network) or when a package ``kornia.X`` or ``kornia.X.Y`` exports it (``kornia.feature.LoFTR``,
``kornia.models.sam.Sam``).
Each is then "covered by case X" (X builds it), "reached through case X" (an instance sits inside
the network X builds) or has no case, with a reason. ``run`` records the latter as "uncovered".
The heuristic over-approximates (hand-crafted descriptors hold fixed Conv2d filters; pipelines
name the networks they wrap) and misses networks assembled only from other libraries' modules.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import hashlib
import importlib
import inspect
import io
import json
import math
import multiprocessing
import os
import pkgutil
import queue
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
DTYPES = ("float16", "bfloat16")
MODES = ("convert", "autocast")


class Absent(Exception):
    """The installed release does not have this network."""


@dataclasses.dataclass
class Built:
    """A network ready to run: ``call(module, inputs)`` returns its outputs.

    capture: (name, dotted attribute path of a submodule or method, extractor(args, kwargs, output))
        taken from inside the call (every invocation, in order; a path the release lacks is
        skipped) and compared as dense outputs ``@name``; dense: output path prefixes that are
        dense (judged even when the sparse outputs differ in shape); info: output path prefixes
        reported but not judged."""

    module: Any
    inputs: Any
    call: Callable[[Any, Any], Any]
    capture: Sequence[Tuple[str, str, Optional[Callable]]] = ()
    dense: Sequence[str] = ()
    info: Sequence[str] = ()


# ----------------------------------------------------------------------------------------------
# inputs


def _textured(torch, shape=(1, 3, 64, 64), seed=3):
    """A smooth image with structure (blobs and a ramp), in float32: tools/census.py's."""
    from census import _textured as census_textured  # this directory is on sys.path: a script beside it

    return census_textured(torch, torch.float32, shape, seed)


def _rand(torch, *shape, seed=1):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _randn(torch, *shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------
# finding things in the installed release


def _get(*candidates):
    """The first of "package.module:Attr.path" that the installed kornia has."""
    tried = []
    for candidate in candidates:
        module_name, _, path = candidate.partition(":")
        tried.append(candidate)
        try:
            obj = importlib.import_module(module_name)
            for part in path.split(".") if path else []:
                obj = getattr(obj, part)
            return obj
        except (ImportError, AttributeError):
            continue
    raise Absent("not in this release (looked for " + ", ".join(tried) + ")")


class _AnyKey(dict):
    """An empty state dict that answers every key with another one."""

    def __getitem__(self, key):
        return _AnyKey()

    def get(self, key, default=None):
        return _AnyKey()


LOADERS = ("load_state_dict_from_url", "download_url_to_file", "download_file_from_url", "download_hf_file")


def _swap_loaders(replacement):
    """Replace the weight loaders (torch.hub's, kornia.core.download's and every name a kornia
    module imported from them) by replacement; returns what restores them."""
    import torch

    swapped = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kornia" or name.startswith("kornia.") or module is torch.hub):
            continue
        for attr in LOADERS:
            if callable(getattr(module, attr, None)) and not isinstance(getattr(module, attr), type):
                swapped.append((module, attr, getattr(module, attr)))
                setattr(module, attr, replacement(attr))

    def restore():
        for module, attr, original in reversed(swapped):
            setattr(module, attr, original)

    return restore


@contextlib.contextmanager
def _no_weights():
    """For constructors that always load pretrained weights: the loaders return an empty state
    dict and ``load_state_dict`` loads nothing, so the seeded random initialisation stays."""
    import torch

    restore = _swap_loaders(lambda attr: lambda *a, **k: _AnyKey())
    module_load = torch.nn.Module.load_state_dict
    torch.nn.Module.load_state_dict = lambda self, *a, **k: torch.nn.modules.module._IncompatibleKeys([], [])
    try:
        yield
    finally:
        torch.nn.Module.load_state_dict = module_load
        restore()


def _block_downloads(torch):
    """No download, ever: the loaders raise, and so does any socket connection."""
    import socket

    import kornia  # noqa: F401 - its loaders are swapped too

    def refusing(attr):
        def refuse(*args, **kwargs):
            raise RuntimeError(f"networks_census: {attr} refused (no downloads; random weights only)")
        return refuse

    _swap_loaders(refusing)

    def refuse_network(*args, **kwargs):
        raise OSError("networks_census: network access refused")

    socket.socket.connect = refuse_network
    socket.socket.connect_ex = refuse_network
    socket.create_connection = refuse_network
    socket.getaddrinfo = refuse_network


def _dataclass_kwargs(cls, **kwargs):
    """kwargs restricted to the fields the release's config dataclass has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}


def _seeded(fn):
    def build(torch):
        torch.manual_seed(0)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            built = fn(torch)
        if hasattr(built.module, "eval"):
            built.module.eval()
        return built

    return build


# ----------------------------------------------------------------------------------------------
# cases: name -> builder(torch) -> Built


CASES: Dict[str, Callable] = {}


def case(name):
    def register(fn):
        CASES[name] = _seeded(fn)
        return fn

    return register


def _loftr_config(cls):
    """The release's LoFTR configuration (the only one it offers) with no coarse threshold and no
    border removal, so that seeded random weights on 64-pixel images match something (and the fine
    level runs)."""
    module = sys.modules[cls.__module__]
    config = copy.deepcopy(module.default_cfg)
    config["match_coarse"]["thr"] = 0.0
    config["match_coarse"]["border_rm"] = 0
    return config


def _conf_matrix(args, kwargs, output):
    data = args[2] if len(args) > 2 else kwargs["data"]
    return data["conf_matrix"]


@case("LoFTR")
def _(torch):
    cls = _get("kornia.feature:LoFTR")
    net = cls(pretrained=None, config=_loftr_config(cls))
    image0 = _textured(torch, (1, 1, 64, 64), 3)
    image1 = torch.roll(image0, (4, 6), (2, 3))
    return Built(net, {"image0": image0, "image1": image1}, lambda m, x: m(x),
                 capture=[("conf_matrix", "coarse_matching", _conf_matrix)])


def _lightglue_inputs(torch, n=32, dim=128):
    kpts0 = 4 + 56 * _rand(torch, 1, n, 2, seed=11)
    kpts1 = (kpts0 + 2 * _randn(torch, 1, n, 2, seed=12)).clamp(0, 63)
    desc0 = torch.nn.functional.normalize(_randn(torch, 1, n, dim, seed=13), dim=-1)
    desc1 = torch.nn.functional.normalize(desc0 + 0.3 * _randn(torch, 1, n, dim, seed=14), dim=-1)
    size = torch.tensor([[64.0, 64.0]])
    return kpts0, kpts1, desc0, desc1, size


@case("LightGlue (disk dims)")
def _(torch):
    cls = _get("kornia.feature:LightGlue")
    # features=None: no download; the dimensions of features="disk" (128-d descriptors)
    net = cls(None, input_dim=128, flash=False)
    kpts0, kpts1, desc0, desc1, size = _lightglue_inputs(torch)
    inputs = {"image0": {"keypoints": kpts0, "descriptors": desc0, "image_size": size},
              "image1": {"keypoints": kpts1, "descriptors": desc1, "image_size": size}}
    # log_assignment is the dense score matrix; matching_scores0/1 are 0 wherever the mutual check
    # or the threshold drops a match: a selection, reported only
    return Built(net, inputs, lambda m, x: m(x), dense=["out.log_assignment"],
                 info=["out.matching_scores0", "out.matching_scores1", "out.scores", "out.prune0", "out.prune1"])


@case("LightGlueMatcher (disk)")
def _(torch):
    cls = _get("kornia.feature:LightGlueMatcher")
    with _no_weights():
        net = cls("disk")
    kpts0, kpts1, desc0, desc1, _ = _lightglue_inputs(torch)

    def lafs(k):
        n = k.shape[1]
        laf = torch.zeros(1, n, 2, 3)
        laf[..., 0, 0] = laf[..., 1, 1] = 4.0
        laf[..., :, 2] = k
        return laf

    inputs = {"desc1": desc0[0], "desc2": desc1[0], "lafs1": lafs(kpts0), "lafs2": lafs(kpts1)}

    def pick(args, kwargs, output):
        return output["log_assignment"]

    return Built(net, inputs, lambda m, x: m(x["desc1"], x["desc2"], x["lafs1"], x["lafs2"], (64, 64), (64, 64)),
                 capture=[("lightglue", "matcher", pick)])


@case("DeDoDe L-B")
def _(torch):
    cls = _get("kornia.feature:DeDoDe")
    net = cls("L", "B")  # amp_dtype left at its default: the release's autocast is CUDA-only
    # DeDoDe calls self.detector.forward(...) (no module hooks): the methods are wrapped instead
    return Built(net, _textured(torch, (1, 3, 42, 42)), lambda m, x: m(x, n=64),
                 capture=[("detector", "detector.forward", None), ("descriptor", "descriptor.forward", None)],
                 info=["out"])


@case("DISK")
def _(torch):
    cls = _get("kornia.feature:DISK")
    net = cls()
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x, n=64),
                 capture=[("unet", "unet", None)], info=["out"])


def _sold2_config(cls):
    """The release's default detector configuration with at most 24 junctions (random weights put
    junctions everywhere, and the line search is quadratic in their number) and no junction
    refinement (a Python loop of seconds per candidate line)."""
    module = sys.modules[cls.__module__]
    if hasattr(module, "DetectorCfg"):
        config = module.DetectorCfg()
        config.max_num_junctions = 24
        config.line_detector_cfg.use_junction_refinement = False
    else:  # 0.7: dictionaries
        config = copy.deepcopy(getattr(module, "default_cfg", None) or module.default_detector_cfg)
        config["max_num_junctions"] = 24
        config.setdefault("line_detector_cfg", {})["use_junction_refinement"] = False
    return config


@case("SOLD2")
def _(torch):
    cls = _get("kornia.feature:SOLD2")
    net = cls(pretrained=False, config=_sold2_config(cls))
    return Built(net, _textured(torch, (1, 1, 64, 64)), lambda m, x: m(x),
                 dense=["out.junction_heatmap", "out.line_heatmap", "out.dense_desc"], info=["out.line_segments"])


@case("SOLD2_detector")
def _(torch):
    cls = _get("kornia.feature:SOLD2_detector")
    net = cls(pretrained=False, config=_sold2_config(cls))
    return Built(net, _textured(torch, (1, 1, 64, 64)), lambda m, x: m(x),
                 dense=["out.junction_heatmap", "out.line_heatmap"], info=["out.line_segments"])


@case("DexiNed")
def _(torch):
    cls = _get("kornia.models.dexined:DexiNed", "kornia.models.edge_detection.dexined:DexiNed",
               "kornia.filters.dexined:DexiNed", "kornia.filters:DexiNed")
    return Built(cls(pretrained=False), _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x))


@case("RT-DETR resnet18d")
def _(torch):
    model = _get("kornia.models.rt_detr.model", "kornia.contrib.models.rt_detr.model")
    anchors = 8 * 8 + 4 * 4 + 2 * 2  # a 64-pixel image at strides 8, 16, 32
    config = model.RTDETRConfig(**_dataclass_kwargs(
        model.RTDETRConfig, model_type="resnet18d", num_classes=4, input_size=64, neck_hidden_dim=64,
        neck_dim_feedforward=128, head_hidden_dim=64, head_num_queries=anchors, head_num_decoder_layers=1))
    net = model.RTDETR.from_config(config)

    def call(m, x):
        # The queries are the top-k anchors by score, in score order, which half rounding
        # permutes: with every anchor a query, the outputs are put in anchor order (the top-k
        # recomputed from the scores the network computed) and compare as dense outputs.
        scores = {}
        head = getattr(m, "decoder", None) or m.head  # 0.7: backbone, neck, head
        handle = head.enc_score_head.register_forward_hook(lambda mod, a, o: scores.update(s=o))
        try:
            out = m(x)
        finally:
            handle.remove()
        logits, boxes = (out["logits"], out["boxes"]) if isinstance(out, dict) else out
        order = torch.topk(scores["s"].max(-1).values, anchors, dim=1).indices.argsort(dim=1)
        return {"logits": logits.gather(1, order[..., None].expand_as(logits)),
                "boxes": boxes.gather(1, order[..., None].expand_as(boxes))}

    return Built(net, _textured(torch, (1, 3, 64, 64)), call,
                 capture=[("encoder", "encoder", None), ("anchor_scores", "decoder.enc_score_head", None),
                          ("anchor_boxes", "decoder.enc_bbox_head", None), ("encoder", "neck", None),
                          ("anchor_scores", "head.enc_score_head", None), ("anchor_boxes", "head.enc_bbox_head", None)])


@case("YuNet/FaceDetector")
def _(torch):
    cls = _get("kornia.contrib:FaceDetector")
    with _no_weights():  # FaceDetector always builds YuNet(pretrained=True)
        net = cls(confidence_threshold=0.0)
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x),
                 capture=[("model", "model", None)])


@case("SAM (small)")
def _(torch):
    sam = _get("kornia.models.sam.model", "kornia.contrib.models.sam.model")
    # Sam.from_config builds 1024-pixel images (_build_sam); the same components, small
    net = sam.Sam(
        image_encoder=sam.ImageEncoderViT(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=2, mlp_ratio=4,
                                          norm_layer=sam.LayerNorm, qkv_bias=True, use_rel_pos=True,
                                          global_attn_indexes=(1,), window_size=2, out_chans=32),
        prompt_encoder=sam.PromptEncoder(embed_dim=32, image_embedding_size=(4, 4), input_image_size=(64, 64),
                                         mask_in_chans=16),
        mask_decoder=sam.MaskDecoder(num_multimask_outputs=3,
                                     transformer=sam.TwoWayTransformer(depth=2, embedding_dim=32, mlp_dim=64,
                                                                       num_heads=2),
                                     transformer_dim=32, iou_head_depth=3, iou_head_hidden_dim=32),
    )
    inputs = {"images": _textured(torch, (1, 3, 64, 64)) - 0.5,
              "points": torch.tensor([[[20.0, 24.0], [40.0, 36.0]]]), "labels": torch.tensor([[1, 0]])}
    return Built(net, inputs, lambda m, x: m(x["images"], [{"points": (x["points"], x["labels"])}], True))


@case("VisionTransformer")
def _(torch):
    cls = _get("kornia.models.vit:VisionTransformer", "kornia.contrib:VisionTransformer")
    net = cls(image_size=32, patch_size=16, embed_dim=64, depth=2, num_heads=2)
    return Built(net, _textured(torch, (1, 3, 32, 32)), lambda m, x: m(x))


@case("MobileViT xxs")
def _(torch):
    cls = _get("kornia.models.vit_mobile:MobileViT", "kornia.contrib:MobileViT")
    return Built(cls(mode="xxs"), _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x))


@case("TinyViT 5m")
def _(torch):
    cls = _get("kornia.models.tiny_vit:TinyViT", "kornia.contrib.models.tiny_vit:TinyViT", "kornia.contrib:TinyViT")
    net = cls.from_config("5m", pretrained=False, img_size=64, num_classes=10)
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x))


@case("EfficientViT b0")
def _(torch):
    model = _get("kornia.models.efficient_vit.model", "kornia.contrib.models.efficient_vit.model")
    backbone = _get("kornia.models.efficient_vit.backbone", "kornia.contrib.models.efficient_vit.backbone")
    # from_config always downloads a checkpoint; the same wrapper around the smallest backbone
    net = model.EfficientViT(backbone=backbone.efficientvit_backbone_b0())
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x))


def _moonvit_config(kimi):
    return kimi.MoonViTConfig(image_size=56, patch_size=14, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=128)


@case("MoonViT")
def _(torch):
    config = _get("kornia.models.kimi_vl.config")
    cls = _get("kornia.models.kimi_vl.moonvit:MoonViT")
    return Built(cls(_moonvit_config(config)), _textured(torch, (1, 3, 56, 56)), lambda m, x: m(x))


@case("KimiVL")
def _(torch):
    config = _get("kornia.models.kimi_vl.config")
    cls = _get("kornia.models.kimi_vl.model:KimiVLModel", "kornia.models.kimi_vl:KimiVLModel")
    net = cls(config.KimiVLConfig(
        vision_config=_moonvit_config(config),
        projector_config=config.KimiVLProjectorConfig(input_dim=64, hidden_dim=128, output_dim=64)))
    return Built(net, _textured(torch, (1, 3, 56, 56)), lambda m, x: m(x))


@case("SigLip2")
def _(torch):
    config = _get("kornia.models.siglip2.config")
    cls = _get("kornia.models.siglip2.model:SigLip2Model", "kornia.models.siglip2:SigLip2Model")
    net = cls(config.SigLip2Config(
        vision_config=config.SigLip2VisionConfig(image_size=32, patch_size=16, hidden_size=64, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=128),
        text_config=config.SigLip2TextConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=128, max_position_embeddings=16),
        projection_dim=64))
    inputs = {"pixel_values": torch.cat([_textured(torch, (1, 3, 32, 32), 3), _textured(torch, (1, 3, 32, 32), 4)]),
              "input_ids": torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(5))}
    return Built(net, inputs, lambda m, x: m(pixel_values=x["pixel_values"], input_ids=x["input_ids"]))


@case("DeFMO")
def _(torch):
    cls = _get("kornia.feature:DeFMO")
    image = torch.cat([_textured(torch, (1, 3, 64, 64), 3), _textured(torch, (1, 3, 64, 64), 4)], 1)
    return Built(cls(pretrained=False), image, lambda m, x: m(x))


@case("SmallSRNet")
def _(torch):
    cls = _get("kornia.models.small_sr:SmallSRNetWrapper", "kornia.models.super_resolution.small_sr:SmallSRNetWrapper",
               "kornia.models.small_sr:SmallSRNet", "kornia.models.super_resolution.small_sr:SmallSRNet")
    module = sys.modules[cls.__module__]
    init = getattr(module, "weight_init", None)
    if init is not None:
        # 0.8.2's pretrained=False applies weight_init to every submodule (AttributeError on its
        # ReLU): here only SmallSRNet itself gets it
        module.weight_init = lambda m: init(m) if hasattr(m, "conv1") else None
    try:
        net = cls(upscale_factor=3, pretrained=False)
    finally:
        if init is not None:
            module.weight_init = init
    channels = 3 if cls.__name__.endswith("Wrapper") else 1
    return Built(net, _textured(torch, (1, channels, 32, 32)), lambda m, x: m(x))


@case("RRDBNet")
def _(torch):
    cls = _get("kornia.models.rrdbnet:RRDBNet", "kornia.models:RRDBNet",
               "kornia.models.super_resolution.rrdbnet:RRDBNet")
    net = cls(3, 3, scale=2, num_feat=16, num_block=2, num_grow_ch=8)
    return Built(net, _textured(torch, (1, 3, 32, 32)), lambda m, x: m(x))


@contextlib.contextmanager
def _float32_randn_like(torch):
    """torch.randn_like drawn in float32 (seeded) and cast: the same noise in every dtype (torch
    draws float64 normals differently from float32 ones)."""
    original = torch.randn_like
    generator = torch.Generator().manual_seed(0)

    def randn_like(t, *args, **kwargs):
        dtype = kwargs.get("dtype") or t.dtype
        return torch.randn(t.shape, generator=generator).to(device=t.device, dtype=dtype)

    torch.randn_like = randn_like
    try:
        yield
    finally:
        torch.randn_like = original


@case("NerfModel")
def _(torch):
    cls = _get("kornia.nerf.nerf_model:NerfModel")
    # few points per ray; regular sampling (irregular draws its lengths with torch.rand in the
    # input's dtype: other lengths in every precision); the default encodings and widths
    net = cls(num_ray_points=8, irregular_ray_sampling=False)
    origins = _randn(torch, 16, 3, seed=21)
    directions = torch.nn.functional.normalize(_randn(torch, 16, 3, seed=22) - origins, dim=-1)

    def call(m, x):
        # NerfModel adds torch.randn_like(densities) * 0.1 to its densities, at inference too
        with _float32_randn_like(torch):
            return m(x["origins"], x["directions"])

    return Built(net, {"origins": origins, "directions": directions}, call)


@case("ImageStitcher (LoFTR)")
def _(torch):
    stitcher = _get("kornia.contrib:ImageStitcher")
    loftr = _get("kornia.feature:LoFTR")
    net = stitcher(loftr(pretrained=None, config=_loftr_config(loftr)), estimator="ransac")
    wide = _textured(torch, (1, 3, 64, 96))
    inputs = {"left": wide[..., :64].contiguous(), "right": wide[..., 32:].contiguous()}
    return Built(net, inputs, lambda m, x: m(x["left"], x["right"]),
                 capture=[("conf_matrix", "matcher.coarse_matching", _conf_matrix)])


@case("XFeat")
def _(torch):
    cls = _get("kornia.feature:XFeat")
    net = cls(top_k=64)
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m.detectAndCompute(x, top_k=64),
                 capture=[("net", "net", None)], info=["out"])


@case("ALIKED t16")
def _(torch):
    cls = _get("kornia.feature:ALIKED")
    net = cls("aliked-t16", max_num_keypoints=64)
    return Built(net, _textured(torch, (1, 3, 64, 64)), lambda m, x: m(x),
                 capture=[("dense_map", "extract_dense_map", None)], info=["out"])


@case("KeyNetAffNetHardNet")
def _(torch):
    cls = _get("kornia.feature:KeyNetAffNetHardNet")
    with _no_weights():  # KeyNet, OriNet, AffNet and HardNet with pretrained=True, whatever is asked
        net = cls(num_features=32)
    return Built(net, _textured(torch, (1, 1, 64, 64)), lambda m, x: m(x),
                 capture=[("keynet", "detector.model", None)], info=["out"])


for _descriptor in ("HardNet", "HardNet8", "SOSNet", "HyNet", "TFeat"):
    @case(_descriptor)
    def _(torch, name=_descriptor):
        cls = _get(f"kornia.feature:{name}")
        patches = torch.cat([_textured(torch, (1, 1, 32, 32), s) for s in (3, 4, 5, 6)])
        return Built(cls(pretrained=False), patches, lambda m, x: m(x))


# ----------------------------------------------------------------------------------------------
# running one network


def _cast(torch, obj, dtype):
    """The floating tensors of a nested input structure, cast to dtype."""
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _cast(torch, v, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast(torch, v, dtype) for v in obj)
    return obj


def _flatten(torch, obj, path="", depth=0, out=None):
    """(path, tensor) of a nested result: dicts, lists, tuples, dataclasses, result objects."""
    out = [] if out is None else out
    if depth > 8:
        return out
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            _flatten(torch, obj[key], f"{path}.{key}" if path else str(key), depth + 1, out)
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _flatten(torch, item, f"{path}.{i}", depth + 1, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _flatten(torch, getattr(obj, f.name), f"{path}.{f.name}", depth + 1, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)) and not callable(obj):
        for key, value in sorted(vars(obj).items()):
            if isinstance(value, (torch.Tensor, list, tuple, dict)):
                _flatten(torch, value, f"{path}.{key.lstrip('_')}", depth + 1, out)
    return out


def _cloned(torch, obj):
    """A captured value as it is now (the network may later change its tensors in place)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _cloned(torch, v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_cloned(torch, v) for v in obj]
    return obj


def _resolve(module, path):
    obj = module
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@contextlib.contextmanager
def _capturing(torch, module, capture):
    store = {name: [] for name, _, _ in capture}
    undo = []
    try:
        for name, path, extract in capture:
            try:
                target = _resolve(module, path)
            except AttributeError:
                continue
            extract = extract or (lambda a, k, o: o)
            if isinstance(target, torch.nn.Module):
                def hook(mod, args, kwargs, output, name=name, extract=extract):
                    store[name].append(_cloned(torch, extract(args, kwargs, output)))
                undo.append(target.register_forward_hook(hook, with_kwargs=True).remove)
            else:
                owner_path, _, attr = path.rpartition(".")
                owner = _resolve(module, owner_path) if owner_path else module

                def wrapper(*args, _original=target, _name=name, _extract=extract, **kwargs):
                    output = _original(*args, **kwargs)
                    store[_name].append(_cloned(torch, _extract(args, kwargs, output)))
                    return output
                owner.__dict__[attr] = wrapper
                undo.append(lambda owner=owner, attr=attr: owner.__dict__.pop(attr, None))
        yield store
    finally:
        for u in undo:
            u()


def _run(torch, built, module, inputs, autocast_dtype=None):
    """The case's call, seeded, without gradients (inside autocast if asked), as one dict:
    ``out`` and the captured ``@name`` outputs."""
    torch.manual_seed(0)
    with torch.no_grad(), _capturing(torch, module, built.capture) as store, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if autocast_dtype is not None:
            with torch.autocast("cpu", dtype=autocast_dtype):
                out = built.call(module, inputs)
        else:
            out = built.call(module, inputs)
    result = {"out": out}
    for name, values in store.items():
        if values:
            result[f"@{name}"] = values[0] if len(values) == 1 else values
    return result


def _sha256(torch, result):
    digest = hashlib.sha256()
    for path, t in _flatten(torch, result):
        t = t.detach().cpu().contiguous()
        digest.update(f"{path}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def _error(exc):
    text = str(exc).strip()
    line = text.splitlines()[0][:300] if text else ""
    frame = ""
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        name = f.filename.replace(os.sep, "/")
        if "/kornia/" in name and "kornia_halfpatch" not in name:
            frame = f"kornia/{name.rsplit('/kornia/', 1)[1]}:{f.lineno}"
            break
    return f"{type(exc).__name__}: {line}", frame


def _judged(built, path, has_dense):
    if any(path == p or path.startswith(p + ".") for p in built.info):
        return "info"
    if path.startswith("@") or any(path == p or path.startswith(p + ".") for p in built.dense):
        return "dense"
    return "other"


def compare_outputs(torch, built, dtype, out, out32, out64):
    """(status, failures, notes, per-output rows, worst) of a half result against the references."""
    flat = dict(_flatten(torch, out))
    flat32 = dict(_flatten(torch, out32))
    flat64 = dict(_flatten(torch, out64)) if out64 is not None else flat32
    eps = torch.finfo(dtype).eps
    kinds = {p: _judged(built, p, False) for p in flat64}
    has_dense = any(k == "dense" for p, k in kinds.items() if flat64[p].is_floating_point())
    failures, notes, rows = [], [], []
    worst = None
    for path, ref in flat64.items():
        if not ref.is_floating_point():
            continue
        kind = kinds[path]
        o, r32 = flat.get(path), flat32.get(path)
        if o is None or r32 is None:
            (notes if kind == "info" or (kind == "other" and has_dense) else failures).append(f"{path}: missing")
            continue
        if not o.is_floating_point():
            failures.append(f"{path}: {o.dtype}, the reference {ref.dtype}")
            continue
        if o.shape != ref.shape or r32.shape != ref.shape:
            message = f"{path}: shape mismatch {tuple(o.shape)} vs {tuple(ref.shape)}"
            (notes if kind == "info" or (kind == "other" and has_dense) else failures).append(message)
            rows.append({"output": path, "dtype": str(o.dtype).replace("torch.", ""), "kind": kind,
                         "shape mismatch": True})
            continue
        o64, r64, r32_64 = o.detach().double(), ref.detach().double(), r32.detach().double()
        mask = torch.isfinite(r64) & torch.isfinite(r32_64)
        nonfinite = int((torch.isfinite(r32_64) & ~torch.isfinite(o64)).sum())
        used = mask & torch.isfinite(o64)
        scale = r64[mask].abs().mean().item() if bool(mask.any()) else 0.0
        difference = (o64 - r64)[used].abs().mean().item() if bool(used.any()) else 0.0
        rounded = r32.detach().to(dtype).double()
        rounding_difference = (rounded - r64)[mask].abs().mean().item() if bool(mask.any()) else 0.0
        if scale > 0:
            err, rounding = difference / scale, rounding_difference / scale
        else:
            err = 0.0 if difference == 0 else math.inf
            rounding = 0.0 if rounding_difference == 0 else math.inf
        bound = 20 * rounding if rounding > 0 else 20 * eps / 2
        ratio = err / bound if bound > 0 else (0.0 if err == 0 else math.inf)
        row = {"output": path, "dtype": str(o.dtype).replace("torch.", ""), "kind": kind, "err": err,
               "bound": bound, "ratio": ratio}
        if nonfinite:
            row["nonfinite"] = nonfinite
        rows.append(row)
        if kind == "info":
            if nonfinite or ratio > 1:
                notes.append(f"{path} (not judged): ratio {ratio:.3g}"
                             + (f", {nonfinite} non-finite" if nonfinite else ""))
            continue
        if nonfinite:
            failures.append(f"{path}: {nonfinite} of {o.numel()} non-finite where float32 is finite")
        if ratio > 1:
            failures.append(f"{path}: err {err:.3g} > bound {bound:.3g} (x{ratio:.3g})")
        if worst is None or ratio > worst["ratio"]:
            worst = row
    if worst is None and not failures:
        failures.append("no floating output to judge")
    return ("fail" if failures else "pass"), failures, notes, rows, worst


# ----------------------------------------------------------------------------------------------
# the worker


def _module_classes(torch, module):
    found = set()
    roots = [module]
    for m in roots:
        for sub in (m.modules() if isinstance(m, torch.nn.Module) else []):
            found.add(f"{type(sub).__module__}.{type(sub).__qualname__}")
    return sorted(c for c in found if c.startswith("kornia."))


class _Worker:
    """Builds one network at a time (kept for its units) and runs its units."""

    def __init__(self, torch):
        self.torch = torch
        self.built = {}  # case -> Built | exception
        self.references = {}  # (case, dtype) -> (net_d, x_d, out32, out64, reference note)

    def build(self, name):
        if name not in self.built:
            self.built, self.references = {}, {}  # one network in memory at a time
            try:
                self.built[name] = CASES[name](self.torch)
            except Exception as exc:  # noqa: BLE001
                self.built[name] = exc
        return self.built[name]

    def clone(self, name, module, dtype):
        """deepcopy(module), or (a network deepcopy cannot copy, e.g. 0.8.2's DeDoDe keeps a
        dict_keys) the case built again, cast to dtype, with module's state assigned."""
        try:
            return copy.deepcopy(module)
        except Exception:  # noqa: BLE001
            fresh = CASES[name](self.torch).module.to(dtype)
            fresh.load_state_dict({k: v.clone() for k, v in module.state_dict().items()}, assign=True)
            return fresh

    def once(self, name):
        torch = self.torch
        started = time.monotonic()
        record = {"case": name, "kind": "case"}
        built = self.build(name)
        if isinstance(built, Absent):
            record.update(status="absent", error=str(built))
            return record
        if isinstance(built, Exception):
            record["status"] = "error"
            record["error"], record["frame"] = _error(built)
            record["error"] = "building: " + record["error"]
            return record
        record["class"] = f"{type(built.module).__module__}.{type(built.module).__qualname__}"
        record["reached"] = _module_classes(torch, built.module)
        record["parameters"] = sum(p.numel() for p in built.module.parameters())
        record["status"] = "built"
        for key, dtype in (("float32", torch.float32), ("float64", torch.float64)):
            try:
                net = self.clone(name, built.module, torch.float32).to(dtype)
                result = _run(torch, built, net, _cast(torch, built.inputs, dtype))
                record[f"{key}_sha256"] = _sha256(torch, result)
                record[f"{key}_dtypes"] = sorted({str(t.dtype).replace("torch.", "") for _, t in _flatten(torch, result)
                                                   if t.is_floating_point()})
            except Exception as exc:  # noqa: BLE001
                record[f"{key}_error"], record[f"{key}_frame"] = _error(exc)
        record["seconds"] = round(time.monotonic() - started, 2)
        return record

    def unit(self, name, dtype_name, mode):
        try:
            return self._unit(name, dtype_name, mode)
        except Exception as exc:  # noqa: BLE001 - the harness itself (copying, comparing)
            record = {"case": name, "kind": "unit", "dtype": dtype_name, "mode": mode, "status": "error"}
            record["error"], record["frame"] = _error(exc)
            record["error"] = "harness: " + record["error"]
            return record

    def _unit(self, name, dtype_name, mode):
        torch = self.torch
        started = time.monotonic()
        dtype = getattr(torch, dtype_name)
        record = {"case": name, "kind": "unit", "dtype": dtype_name, "mode": mode}
        built = self.build(name)
        if isinstance(built, Exception):
            record.update(status="absent" if isinstance(built, Absent) else "error", error=str(built))
            return record
        record["class"] = f"{type(built.module).__module__}.{type(built.module).__qualname__}"
        key = (name, dtype_name)
        if key not in self.references:
            net_d = self.clone(name, built.module, torch.float32).to(dtype)
            x_d = _cast(torch, built.inputs, dtype)
            try:
                out32 = _run(torch, built, self.clone(name, net_d, dtype).float(), _cast(torch, x_d, torch.float32))
            except Exception as exc:  # noqa: BLE001
                out32 = exc
            out64, note = None, "float64"
            try:
                out64 = _run(torch, built, self.clone(name, net_d, dtype).double(), _cast(torch, x_d, torch.float64))
            except Exception as exc:  # noqa: BLE001
                message, frame = _error(exc)
                note = f"float32 (float64 failed: {message} [{frame}])"
            self.references[key] = (net_d, x_d, out32, out64, note)
        net_d, x_d, out32, out64, note = self.references[key]
        record["reference"] = note
        if isinstance(out32, Exception):
            record["status"] = "reference-failed"
            record["error"], record["frame"] = _error(out32)
            record["seconds"] = round(time.monotonic() - started, 2)
            return record
        try:
            if mode == "convert":
                out = _run(torch, built, self.clone(name, net_d, dtype), x_d)
            else:
                out = _run(torch, built, self.clone(name, net_d, dtype).float(), _cast(torch, x_d, torch.float32),
                           autocast_dtype=dtype)
        except Exception as exc:  # noqa: BLE001
            record["status"] = "error"
            record["error"], record["frame"] = _error(exc)
            record["seconds"] = round(time.monotonic() - started, 2)
            return record
        status, failures, notes, rows, worst = compare_outputs(torch, built, dtype, out, out32, out64)
        record["status"] = status
        if failures:
            record["error"] = "; ".join(failures[:4]) + (f" (+{len(failures) - 4} more)" if len(failures) > 4 else "")
        if notes:
            record["notes"] = notes[:6]
        if worst is not None:
            record.update(err=worst["err"], bound=worst["bound"], ratio=worst["ratio"], worst_output=worst["output"])
        record["dtypes"] = sorted({r["dtype"] for r in rows})
        record["outputs"] = rows[:40]
        record["seconds"] = round(time.monotonic() - started, 2)
        return record


def _worker(requests, results, shim, cpu_half):
    warnings.simplefilter("ignore")
    os.environ.setdefault("KORNIA_HALFPATCH_CACHE", "0")
    import torch

    import kornia

    if shim:
        sys.path.insert(0, str(REPO))
        import kornia_halfpatch

        if cpu_half:
            kornia_halfpatch.apply(cpu_half=cpu_half)
        else:
            kornia_halfpatch.apply()
    _block_downloads(torch)
    worker = _Worker(torch)
    results.put(("ready", {"cases": list(CASES), "kornia": kornia.__version__, "torch": torch.__version__,
                           "python": sys.executable, "threads": torch.get_num_threads()}))
    while True:
        request = requests.get()
        if request is None:
            return
        kind = request[0]
        if kind == "once":
            record = worker.once(request[1])
        elif kind == "unit":
            record = worker.unit(*request[1:])
        else:  # discovery, after the cases (its imports of every kornia module come last)
            record = {"kind": "discovery", "networks": discover_networks(torch)}
        results.put(("done", record))


# ----------------------------------------------------------------------------------------------
# discovery

LAYERS = {
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LazyConv2d", "Linear",
    "LazyLinear", "Bilinear", "Embedding", "EmbeddingBag", "MultiheadAttention", "LSTM", "GRU", "RNN", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "PReLU", "TransformerEncoderLayer",
    "TransformerDecoderLayer",
}

# Why a discovered class has no case of its own (by class name): what the heuristic cannot know.
KNOWN_REASONS = {
    "DenseSIFTDescriptor": "hand-crafted descriptor: its Conv2d holds fixed filters, nothing learned",
    "MKDDescriptor": "hand-crafted descriptor: its Conv2d holds fixed filters, nothing learned",
    "SIFTFeature": "hand-crafted pipeline (SIFT): no learned parameters",
    "SIFTFeatureScaleSpace": "hand-crafted pipeline (SIFT): no learned parameters",
    "SIFTDescriptorFromPyramid": "hand-crafted descriptor: no learned parameters",
    "SIFTDescriptor": "hand-crafted descriptor: no learned parameters",
    "PatchDominantGradientOrientation": "hand-crafted orientation estimator: no learned parameters",
    "ClassificationHead": "a Linear classification head for VisionTransformer's tokens (a building block)",
    "EdgeDetector": "wraps DexiNed with its pretrained weights (DexiNed has its case)",
    "LocalFeature": "base class of the detector + descriptor pipelines: runs the modules it is given",
    "HomographyTracker": "tracks a video with the detector/matcher it is given (covered by their cases)",
    "LocalFeatureMatcher": "runs the detector and matcher it is given",
    "DinoVisionTransformer": "only in DeDoDe's G descriptor (DINOv2 ViT-L/14, ~300M parameters): too large to build "
                             "here",
    "VGG_DINOv2": "DeDoDe's G descriptor encoder (DINOv2 ViT-L/14, ~300M parameters): too large to build here",
    "PaliGemma": "vision-language model with a Gemma decoder: no case written",
    "SmolVLM2": "vision-language model: no case written",
}


def _identifiers(obj):
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def discover_networks(torch):
    """qualified name -> {"exported": bool, "parents": [...]} for the kornia classes the heuristic
    takes for networks (see the module docstring)."""
    import kornia

    modules = {"kornia": kornia}
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        for info in pkgutil.walk_packages(kornia.__path__, "kornia."):
            try:
                modules[info.name] = importlib.import_module(info.name)
            except BaseException:  # noqa: BLE001 - optional dependencies, broken modules
                continue
    classes, functions = {}, {}
    for module_name, module in modules.items():
        for obj in list(vars(module).values()):
            if getattr(obj, "__module__", None) != module_name:
                continue
            if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
                classes[f"{module_name}.{obj.__qualname__}"] = obj
            elif inspect.isfunction(obj):
                functions[f"{module_name}.{obj.__qualname__}"] = obj
    everything = {**classes, **functions}
    identifiers = {q: _identifiers(o) for q, o in everything.items()}
    learned, learned_names = set(), set(LAYERS)
    changed = True
    while changed:
        changed = False
        for q, obj in everything.items():
            if q in learned:
                continue
            hit = bool(identifiers[q] & learned_names)
            if not hit and inspect.isclass(obj):
                hit = any(f"{b.__module__}.{b.__qualname__}" in learned for b in obj.__mro__[1:])
            if hit:
                learned.add(q)
                learned_names.add(obj.__name__)
                changed = True
    learned_classes = sorted(q for q in learned if q in classes)
    exported = set()
    for module_name, module in modules.items():
        if not hasattr(module, "__path__") or module_name.count(".") > 2:
            continue  # exported by kornia.X or kornia.X.Y (not by an architecture subpackage)
        public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in public:
            obj = getattr(module, name, None)
            if inspect.isclass(obj) and f"{obj.__module__}.{obj.__qualname__}" in learned:
                exported.add(f"{obj.__module__}.{obj.__qualname__}")
    networks = {}
    for q in learned_classes:
        name = classes[q].__name__
        parents = sorted(p for p in learned_classes if p != q and name in identifiers[p])
        if not parents or q in exported:
            uses = sorted(identifiers[q] & {classes[p].__name__ for p in learned_classes} - {name})
            networks[q] = {"exported": q in exported, "parents": parents[:5], "uses": uses[:8],
                           "layers": bool(identifiers[q] & LAYERS)}
    return networks


def coverage(networks, case_records):
    """qualified name -> (status, case, text) with status covered / reached / uncovered."""
    roots, reached = {}, {}
    for record in case_records:
        if record.get("class"):
            roots.setdefault(record["class"], record["case"])
        for cls in record.get("reached", []):
            reached.setdefault(cls, record["case"])
    def package(qualified):
        # the subpackage a class lives in (kornia.feature.loftr, kornia.models.sam); None for the
        # flat modules (kornia.feature.integrated holds unrelated pipelines)
        parts = qualified.split(".")[:-1]
        return ".".join(parts[:3]) if len(parts) > 3 else None

    short_names = {c.rsplit(".", 1)[1] for c in list(roots) + list(reached)}
    packages, by_name = {}, {}
    for cls, name in list(roots.items()) + list(reached.items()):
        packages.setdefault(package(cls), name)
        by_name.setdefault(cls.rsplit(".", 1)[1], (cls, name))
    result = {}
    for q, info in sorted(networks.items()):
        short = q.rsplit(".", 1)[1]
        if q in roots:
            result[q] = ("covered", roots[q], f"covered by case {roots[q]!r}")
        elif q in reached:
            result[q] = ("reached", reached[q], f"reached through case {reached[q]!r}")
        else:
            used = [u for u in info.get("uses", []) if u in short_names]
            if short in KNOWN_REASONS:
                why = KNOWN_REASONS[short]
            elif short in by_name:
                why = f"a copy of {by_name[short][0]} (case {by_name[short][1]!r}) kept at its old place"
            elif package(q) is not None and package(q) in packages:
                why = f"beside case {packages[package(q)]!r}'s network, not in the configuration the case builds"
            elif used and not info["layers"]:
                why = "a pipeline of networks the cases reach (" + ", ".join(used[:4]) + "); no case of its own"
            elif info["parents"]:
                why = "a building block of " + ", ".join(p.rsplit(".", 1)[1] for p in info["parents"][:3]) + \
                      ", which no case builds"
            else:
                why = "no case written for it"
            result[q] = ("uncovered", None, "no case: " + why)
    return result


def discover_command(args):
    warnings.simplefilter("ignore")
    import torch

    import kornia

    _block_downloads(torch)
    records = []
    for name in CASES:
        if args.k and args.k not in name:
            continue
        try:
            built = CASES[name](torch)
        except Absent as exc:
            records.append({"case": name, "status": "absent", "why": str(exc)})
            continue
        except Exception as exc:  # noqa: BLE001
            records.append({"case": name, "status": "error", "why": _error(exc)[0]})
            continue
        records.append({"case": name, "class": f"{type(built.module).__module__}.{type(built.module).__qualname__}",
                        "reached": _module_classes(torch, built.module)})
    networks = discover_networks(torch)
    print(f"kornia {kornia.__version__}: {len(networks)} network classes found by the heuristic")
    for q, (status, _, text) in coverage(networks, records).items():
        print(f"  {q}: {text}")
    print("cases:")
    for r in records:
        print(f"  {r['case']}: " + (f"{r['status']} ({r['why']})" if "status" in r else r["class"]))


# ----------------------------------------------------------------------------------------------
# the parent


def _answer(results, worker, timeout):
    """The worker's next answer, or None when it hangs past timeout or dies."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return results.get(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            if not worker.is_alive():
                try:
                    return results.get(timeout=1.0)
                except queue.Empty:
                    return None
            if time.monotonic() >= deadline:
                return None


def run(args):
    ctx = multiprocessing.get_context("spawn")
    out = Path(args.out)
    done, case_records, header = set(), {}, False
    if out.exists():
        for line in out.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            kind = r.get("kind")
            header |= kind == "run"
            if kind == "case":
                done.add((r["case"], "once"))
                case_records[r["case"]] = r
            elif kind == "unit":
                done.add((r["case"], r["dtype"], r["mode"]))
            elif kind in ("discovery", "uncovered"):
                done.add(("discovery",))
    # The shim is applied, or not, by the worker alone: not by the start-up hook.
    os.environ.pop("KORNIA_HALFPATCH_AUTO", None)
    pending = None
    with out.open("a") as sink:
        def write(record):
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        while True:
            requests, results = ctx.Queue(), ctx.Queue()
            worker = ctx.Process(target=_worker, args=(requests, results, not args.no_shim, args.cpu_half), daemon=True)
            worker.start()
            answer = _answer(results, worker, 600)
            if answer is None:
                raise SystemExit(f"the worker did not start (exit code {worker.exitcode}; its stderr is above)")
            info = answer[1]
            if not header:
                write({"kind": "run", "kornia": info["kornia"], "torch": info["torch"], "python": info["python"],
                       "shim": not args.no_shim, "shim_commit": None if args.no_shim else _commit(),
                       "cpu_half": args.cpu_half, "threads": info["threads"],
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")})
                header = True
            if pending is None:
                names = [n for n in info["cases"] if not args.k or args.k in n]
                pending = [(n, "once") for n in names]
                for n in names:
                    pending += [(n, d, m) for d in DTYPES for m in MODES]
                if not args.k:
                    pending.append(("discovery",))
                pending = [p for p in pending if p not in done and not _skipped(case_records.get(p[0]), p)]
                print(f"kornia {info['kornia']} ({'shim' if not args.no_shim else 'no shim'}): {len(names)} cases, "
                      f"{len(pending)} units to run", flush=True)
            restart = False
            while pending:
                item = pending.pop(0)
                name = item[0]
                if _skipped(case_records.get(name), item):
                    continue  # recorded once for the whole case
                started = time.monotonic()
                if item == ("discovery",):
                    requests.put(("discovery",))
                elif item[1] == "once":
                    requests.put(("once", name))
                else:
                    requests.put(("unit", name, item[1], item[2]))
                answer = _answer(results, worker, args.timeout)
                if answer is None:
                    alive = worker.is_alive()
                    record = {"case": name, "kind": "case" if item[1:] == ("once",) else "unit",
                              "status": "timeout" if alive else "error",
                              "error": f"no answer within {args.timeout:g} s" if alive else
                              f"the worker process died (exit code {worker.exitcode})"}
                    if len(item) == 3:
                        record.update(dtype=item[1], mode=item[2])
                    if item == ("discovery",):
                        record = {"kind": "discovery", "error": record["error"], "networks": {}}
                    worker.kill()
                    worker.join(10)
                    restart = True
                else:
                    record = answer[1]
                record["seconds"] = round(time.monotonic() - started, 2)
                if record.get("kind") == "discovery":
                    for q, (status, _, text) in coverage(record["networks"], case_records.values()).items():
                        record["networks"][q]["coverage"] = text
                        if status == "uncovered":
                            write({"kind": "uncovered", "case": None, "class": q, "status": "uncovered", "error": text})
                    write(record)
                    without = sum(1 for v in record["networks"].values() if v.get("coverage", "").startswith("no case"))
                    print(f"  discovery: {len(record['networks'])} network classes, {without} without a case",
                          flush=True)
                else:
                    write(record)
                    if record.get("kind") == "case":
                        case_records[name] = record
                    _progress(record)
                if restart:
                    break
            if not restart:
                requests.put(None)
                worker.join(30)
                if worker.is_alive():
                    worker.kill()
                return


def _skipped(case_record, item):
    """Whether a unit is not run: its case is absent, or could not be built (recorded once)."""
    if len(item) != 3 or case_record is None:
        return False
    return case_record.get("status") == "absent" or str(case_record.get("error", "")).startswith("building:")


def _commit():
    """The repository's commit (and whether its working tree differs): the shim a run measured."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no",
                                "kornia_halfpatch"], capture_output=True, text=True, timeout=30).stdout.strip()
        return head + ("+modified" if dirty else "") if head else None
    except Exception:  # noqa: BLE001
        return None


def _progress(record):
    where = f"{record['case']}" + (f" {record['dtype']} {record['mode']}" if record.get("kind") == "unit" else "")
    ratio = f" x{record['ratio']:.3g}" if record.get("ratio") is not None else ""
    error = f"  {record['error'][:120]}" if record.get("error") and record.get("status") != "pass" else ""
    print(f"  {where}: {record['status']}{ratio} ({record.get('seconds', 0):.1f} s){error}", flush=True)


# ----------------------------------------------------------------------------------------------
# comparing runs


def load(path):
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    header = next((r for r in records if r.get("kind") == "run"), {})
    cases = {r["case"]: r for r in records if r.get("kind") == "case"}
    units = {(r["case"], r["dtype"], r["mode"]): r for r in records if r.get("kind") == "unit"}
    uncovered = [r["class"] for r in records if r.get("kind") == "uncovered"]
    return header, cases, units, uncovered


def cell(run, key):
    """(status, record) of a row in a run."""
    _, cases, units, _ = run
    record = units.get(key)
    if record is not None:
        return record["status"], record
    once = cases.get(key[0])
    if once is not None and once.get("status") in ("absent", "error", "timeout"):
        return once["status"], once
    return "-", None


def _cell_text(status, record):
    star = "*" if record is not None and str(record.get("reference", "")).startswith("float32") else ""
    if status == "pass":
        return (f"pass {record['ratio']:.2g}" if record.get("ratio") is not None else "pass") + star
    if status == "fail" and record.get("ratio") is not None:
        return f"FAIL {record['ratio']:.3g}" + star
    names = {"fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT", "reference-failed": "ref-failed"}
    text = names.get(status, status)
    return text + star


def compare_runs(args):
    runs = [load(p) for p in args.runs]
    names = args.names.split(",") if args.names else [Path(p).stem for p in args.runs]
    cases = []
    for run_ in runs:
        for name in list(run_[1]) + [k[0] for k in run_[2]]:
            if name not in cases:
                cases.append(name)
    keys = [(c, d, m) for c in cases for d in DTYPES for m in MODES]
    pairs = [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs))
             if runs[i][0].get("kornia") and runs[i][0].get("kornia") == runs[j][0].get("kornia")]
    lines = []
    lines.append("| run | kornia | shim | passing | failing | absent | of which error / timeout / ref-failed "
                 "| uncovered |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, run_ in zip(names, runs):
        counts = {}
        for key in keys:
            status, _ = cell(run_, key)
            counts[status] = counts.get(status, 0) + 1
        failing = sum(v for k, v in counts.items() if k not in ("pass", "absent", "-"))
        lines.append(f"| {name} | {run_[0].get('kornia', '?')} | {'yes' if run_[0].get('shim') else 'no'} | "
                     f"{counts.get('pass', 0)} | {failing} | {counts.get('absent', 0)} | "
                     f"{counts.get('error', 0)} / {counts.get('timeout', 0)} / {counts.get('reference-failed', 0)} | "
                     f"{len(run_[3])} |")
    lines.append("")
    lines.append("Rows: case x dtype x mode; cells: status and err/bound of the worst judged output "
                 "(* float64 failed in the release: the reference is float32).")
    if pairs:
        lines.append("bitwise: float32 / float64 outputs of the original network, sha256-equal between runs of the "
                     "same release (= equal, ≠ differ, ? not computed in one of them: the release raised, or a "
                     "timeout).")
    lines.append("")
    header = "| case | dtype | mode | " + " | ".join(names)
    header += "".join(f" | bitwise {names[i]}={names[j]}" for i, j in pairs) + " |"
    lines.append(header)
    lines.append("|---" * (3 + len(names) + len(pairs)) + "|")
    for key in keys:
        cells = [_cell_text(*cell(run_, key)) for run_ in runs]
        bits = []
        for i, j in pairs:
            a, b = runs[i][1].get(key[0], {}), runs[j][1].get(key[0], {})
            if "absent" in (a.get("status"), b.get("status")):
                bits.append("-")
                continue
            marks = []
            for precision in ("float32", "float64"):
                x, y = a.get(f"{precision}_sha256"), b.get(f"{precision}_sha256")
                marks.append("?" if not x or not y else "=" if x == y else "≠")
            bits.append(f"f32{marks[0]} f64{marks[1]}")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells + bits) + " |")
    lines.append("")
    lines.append("Failures:")
    for name, run_ in zip(names, runs):
        for key in keys:
            status, record = cell(run_, key)
            if status in ("pass", "absent", "-") or record is None:
                continue
            where = f"{key[0]} {key[1]} {key[2]}"
            frame = f" [{record['frame']}]" if record.get("frame") else ""
            lines.append(f"- {name}: {where}: {status}: {record.get('error', '')}{frame}")
    for name, run_ in zip(names, runs):
        if run_[3]:
            lines.append(f"- {name}: uncovered network classes: " + ", ".join(run_[3]))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--no-shim", action="store_true")
    r.add_argument("--timeout", type=float, default=120.0, help="seconds per unit")
    r.add_argument("--cpu-half", choices=("native", "float32", "auto"))
    r.add_argument("-k", default="")
    c = sub.add_parser("compare")
    c.add_argument("runs", nargs="+")
    c.add_argument("--names")
    c.add_argument("--markdown")
    d = sub.add_parser("discover")
    d.add_argument("-k", default="")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    elif args.command == "compare":
        compare_runs(args)
    else:
        discover_command(args)


if __name__ == "__main__":
    main()
