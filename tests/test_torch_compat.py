"""The torch APIs the shim looks up with a fallback answer right on the installed torch (every
supported torch, 2.1-2.13): the shim calls no attribute its torch lacks."""

import ast
import importlib
import os
import pkgutil

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import _torch_compat
from support import TORCH, cpu_reports, unset_default_device


def test_is_compiling_is_false_in_eager_and_true_while_dynamo_traces():
    seen = []

    def probe(x):
        seen.append(_torch_compat.is_compiling())
        return x + 1

    assert _torch_compat.is_compiling() is False
    torch._dynamo.reset()
    torch.compile(probe, backend="eager", fullgraph=True)(torch.zeros(1))
    torch._dynamo.reset()
    assert seen == [True]


def test_is_compiling_branches_compile_with_fullgraph():
    def branch(x):
        if _torch_compat.is_compiling():
            return x + 1
        return x - 1

    torch._dynamo.reset()
    compiled = torch.compile(branch, backend="eager", fullgraph=True)(torch.zeros(1))
    torch._dynamo.reset()
    assert float(compiled) == 1.0 and float(branch(torch.zeros(1))) == -1.0


def test_autocast_state_per_device_type():
    assert not _torch_compat.autocast_enabled("cpu") and not _torch_compat.cpu_autocast_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _torch_compat.autocast_enabled("cpu") and _torch_compat.cpu_autocast_enabled()
        assert _torch_compat.autocast_enabled_device_types(["cpu", "no-such-device"]) == ["cpu"]
    assert _torch_compat.autocast_enabled("no-such-device") is False


def test_default_device_type_follows_the_device_context():
    assert _torch_compat.default_device_type() == "cpu"
    with torch.device("meta"):
        assert _torch_compat.default_device_type() == "meta"


def test_default_device_type_after_the_default_device_was_set_and_unset():
    torch.set_default_device("meta")
    try:
        assert _torch_compat.default_device_type() == "meta"
    finally:
        torch.set_default_device(None)
    try:
        assert _torch_compat.default_device_type() == "cpu"
    finally:
        unset_default_device()


def test_cpu_capabilities_read_torch_or_the_kernel():
    capabilities = _torch_compat.cpu_capabilities()
    for flag in ("avx512_fp16", "amx_fp16", "avx2"):
        assert bool(capabilities.get(flag, False)) is cpu_reports(flag)


def test_functional_call_traceability_is_what_this_torch_does():
    # The float32 path of networks_cpu_half runs through torch.func.functional_call; whether
    # dynamo traces it decides which path a compiled network takes.
    module = torch.nn.Linear(2, 2)
    state = {name: tensor.detach().clone() for name, tensor in module.named_parameters()}

    def call(x):
        return torch.func.functional_call(module, state, (x,))

    torch._dynamo.reset()
    try:
        torch.compile(call, backend="eager", fullgraph=True)(torch.zeros(1, 2))
        traced = True
    except Exception:  # noqa: BLE001 - dynamo's Unsupported, by torch version
        traced = False
    finally:
        torch._dynamo.reset()
    if _torch_compat.FUNCTIONAL_CALL_TRACEABLE:
        assert traced  # a torch the shim trusts with it must trace it
    elif TORCH >= (2, 6):
        pytest.fail("torch >= 2.6 traces functional_call: FUNCTIONAL_CALL_TRACEABLE must say so")


def _package_sources():
    root = os.path.dirname(kornia_halfpatch.__file__)
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def _attribute_chain(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "torch":
        return ["torch"] + parts[::-1]
    return None


# Attributes the package names that this torch may lack, each looked up with a fallback where
# it is used (getattr/hasattr, or _torch_compat).
LOOKED_UP_WITH_A_FALLBACK = {
    "torch.compiler.is_compiling",  # torch >= 2.3 (_torch_compat.is_compiling)
    "torch.amp.is_autocast_available",  # torch >= 2.4 (_torch_compat.autocast_enabled)
    "torch.is_autocast_cpu_enabled",  # torch < 2.4 spelling, only where the new one is absent
    "torch.get_autocast_dtype",  # torch >= 2.4 (_precision.autocast_dtype, chosen once per torch)
    "torch.get_autocast_cpu_dtype",  # torch < 2.4 spelling (_precision), only where the new one is absent
    "torch.get_autocast_gpu_dtype",  # torch < 2.4 spelling (_precision), only where the new one is absent
    "torch.cpu.get_capabilities",  # torch >= 2.7 (_torch_compat.cpu_capabilities)
    "torch.get_float32_matmul_precision",
    "torch._VariableFunctionsClass.conv2d",  # a name in a docstring
}


def test_every_torch_attribute_the_package_names_exists_or_has_a_fallback():
    missing = set()
    for path in _package_sources():
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        for node in ast.walk(tree):
            chain = _attribute_chain(node) if isinstance(node, ast.Attribute) else None
            if chain is None:
                continue
            owner = torch
            for depth, part in enumerate(chain[1:], start=1):
                if hasattr(owner, part):
                    owner = getattr(owner, part)
                    continue
                try:
                    owner = importlib.import_module(".".join(chain[: depth + 1]))
                except ImportError:
                    missing.add(".".join(chain))
                    break
    assert missing <= LOOKED_UP_WITH_A_FALLBACK, sorted(missing - LOOKED_UP_WITH_A_FALLBACK)


def test_the_package_imports_every_module_on_this_python():
    for info in pkgutil.walk_packages(kornia_halfpatch.__path__, "kornia_halfpatch."):
        importlib.import_module(info.name)


_PIPE_ANNOTATED = '''
from __future__ import annotations
from typing import List
from torch import Tensor

def f(x: Tensor, y: Tensor | None, z: list[Tensor] | None = None, w: int | float = 1) -> tuple[Tensor, Tensor | None]:
    return x, y
'''


def test_pipe_annotations_resolve_on_every_python():
    # Python 3.9 cannot evaluate "Tensor | None" (kornia 0.8's annotations): the rows' wrappers
    # must still see which parameters are tensors.
    import typing

    from kornia_halfpatch import _codegen

    namespace = {}
    exec(compile(_PIPE_ANNOTATED, "<pipe annotated>", "exec"), namespace)
    hints = _codegen._resolved_hints(namespace["f"])
    assert _codegen.classify(hints["x"]) == _codegen.TENSOR
    assert _codegen.classify(hints["y"]) == _codegen.OPTIONAL_TENSOR
    assert typing.get_args(hints["w"]) == (int, float)
    assert _codegen.tuple_items(hints["return"])[0] is torch.Tensor
    wrapper = _codegen.promote_wrapper(namespace["f"])
    out = wrapper(torch.ones(2, dtype=torch.float16), None)
    assert out[0].dtype == torch.float16 and out[1] is None
