"""Where the installed kornia calls a torch op that has no half CPU kernel (torch 2.13), found by
reading the source of every loaded kornia module with ``ast``: module-level calls resolved
through the module's own globals (``torch.linalg.solve``, ``linalg.solve``, ``F.avg_pool3d``,
``torch.fft.rfftn``, any alias), and the ``Tensor`` methods ``.inverse()``/``.det()`` that no
module view can reach. Used by tests/test_fix_torch_ops.py; nothing here patches."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
import types
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F

# Measured on torch 2.13 CPU (float16 and bfloat16 both raise); conditional ones noted.
_OPS = (
    (torch.linalg, "torch.linalg", "solve solve_ex inv inv_ex svd svdvals eigh eigvalsh eig eigvals qr det slogdet "
                   "lstsq cholesky cholesky_ex pinv lu_factor lu_factor_ex lu lu_solve solve_triangular matrix_rank "
                   "cond householder_product tensorinv"),
    (torch, "torch", "inverse det logdet svd pinverse cholesky cholesky_solve cholesky_inverse triangular_solve lu "
                     "lu_solve geqrf cdist quantile nanquantile histogram stft"),
    (F, "F", "avg_pool3d pdist local_response_norm"),
    (torch.fft, "torch.fft", "fft ifft rfft irfft fft2 ifft2 rfft2 irfft2 fftn ifftn rfftn irfftn"),
)
# id(op) -> its name: the ops, measured on torch 2.13 CPU (float16 and bfloat16 both raise).
OP_NAMES: Dict[int, str] = {}
OPS_WITHOUT_HALF_KERNEL: List[Any] = []
for _module, _prefix, _names in _OPS:
    for _name in _names.split():
        _op = getattr(_module, _name, None)
        if _op is not None and id(_op) not in OP_NAMES:
            OP_NAMES[id(_op)] = f"{_prefix}.{_name}"
            OPS_WITHOUT_HALF_KERNEL.append(_op)
METHODS_WITHOUT_HALF_KERNEL = ("inverse", "det", "quantile", "nanquantile")


@dataclass(frozen=True)
class Site:
    module: str
    function: str  # qualified name of the enclosing function ("Class.method"), "" at module level
    op: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.module}:{self.function}"


def _chain(node: ast.expr) -> Optional[List[str]]:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return None


def _resolve(namespace: Dict[str, Any], chain: List[str]) -> Any:
    value = namespace.get(chain[0])
    for name in chain[1:]:
        # Modules only: kornia's LazyLoader would import (or ask to install) a package.
        if not isinstance(value, types.ModuleType):
            return None
        value = getattr(value, name, None)
    return getattr(value, "__kornia_halfpatch_view_of__", value) if isinstance(value, types.ModuleType) else value


def sites_in_module(module: Any) -> Iterator[Site]:
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return
    names = OP_NAMES
    namespace = vars(module)
    tree = ast.parse(source)
    stack: List[str] = []

    def visit(node: ast.AST) -> Iterator[Site]:
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            stack.append(node.name)
        if isinstance(node, ast.Call):
            chain = _chain(node.func)
            if chain is not None:
                target = _resolve(namespace, chain) if len(chain) >= 1 else None
                if target is not None and id(target) in names and any(target is op for op in OPS_WITHOUT_HALF_KERNEL):
                    yield Site(module.__name__, ".".join(stack), names[id(target)], node.lineno)
                elif (
                    len(chain) >= 2
                    and chain[-1] in METHODS_WITHOUT_HALF_KERNEL
                    and not node.args  # Tensor.inverse()/det() take no argument; kornia's own inverse(x) do
                    and not isinstance(_resolve(namespace, chain[:-1]), types.ModuleType)
                ):
                    yield Site(module.__name__, ".".join(stack), f"Tensor.{chain[-1]}", node.lineno)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in METHODS_WITHOUT_HALF_KERNEL and not node.args:
                yield Site(module.__name__, ".".join(stack), f"Tensor.{node.func.attr}", node.lineno)
        for child in ast.iter_child_nodes(node):
            yield from visit(child)
        if scoped:
            stack.pop()

    yield from visit(tree)


def kornia_modules() -> List[Any]:
    """Every importable kornia module (imported now; optional dependencies may be missing)."""
    import kornia

    modules = []
    for info in pkgutil.walk_packages(kornia.__path__, "kornia."):
        if ".onnx" in info.name or info.name.endswith("__main__"):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except Exception:  # noqa: BLE001 - optional dependencies (onnx, ...)
            continue
    return sorted({id(m): m for m in modules + [sys.modules["kornia"]]}.values(), key=lambda m: m.__name__)


def all_sites() -> List[Site]:
    return [site for module in kornia_modules() for site in sites_in_module(module)]
