"""Where the installed kornia calls what, found by reading the source of every loaded kornia
module with ``ast``: each call's callee resolved through the module's own globals (any alias:
``torch.linalg.solve``, ``linalg.solve``, ``F.avg_pool3d``, a bound name), by identity. One
scanner for the tests' three questions:

- :func:`half_kernel_sites`: calls of torch ops that have no half CPU kernel (torch 2.13), and the
  ``Tensor`` methods ``.inverse()``/``.det()`` that no module view can reach
  (tests/test_fix_torch_ops.py);
- :func:`callers_of_warps`: functions that sample an image at coordinates they derive
  (``grid_sample``, ``map_coordinates``), directly or through ``kornia.geometry``'s module-level
  functions (tests/test_fix_warp_geometry.py);
- :func:`calls_of`: calls of one object, torch's ``conv2d`` (tests/test_fix_filters_conv_hang.py).

Nothing here patches. tools/half_call_sites.py answers the first question from source trees of
other releases without importing them (static alias tracking), for docs/surface/.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Site:
    module: str
    function: str  # qualified name of the enclosing function ("Class.method"), "" at module level
    callee: str  # what is called: an op's name ("torch.linalg.solve", "Tensor.inverse"), a sampler, ...
    line: int

    @property
    def where(self) -> str:
        return f"{self.module}:{self.function}"


def chain_of(node: ast.expr) -> Optional[List[str]]:
    """``a.b.c`` -> ``["a", "b", "c"]``; None where the callee is not a dotted name."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return None


def resolve_chain(namespace: Dict[str, Any], chain: List[str]) -> Any:
    """The object a dotted name means in a module's globals, through modules only."""
    value = namespace.get(chain[0])
    for name in chain[1:]:
        # Modules only: kornia's LazyLoader would import (or ask to install) a package.
        if not isinstance(value, types.ModuleType):
            return None
        value = getattr(value, name, None)
    return getattr(value, "__kornia_halfpatch_view_of__", value) if isinstance(value, types.ModuleType) else value


# A call's callee name, or None: (the call, its callee's dotted name or None, the module's globals).
Match = Callable[[ast.Call, Optional[List[str]], Dict[str, Any]], Optional[str]]


def sites_in_module(module: Any, match: Match) -> Iterator[Site]:
    """Every call in ``module``'s source that ``match`` names, with its enclosing function."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return
    namespace = vars(module)
    stack: List[str] = []

    def visit(node: ast.AST) -> Iterator[Site]:
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            stack.append(node.name)
        if isinstance(node, ast.Call):
            callee = match(node, chain_of(node.func), namespace)
            if callee is not None:
                yield Site(module.__name__, ".".join(stack), callee, node.lineno)
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


def resolve(where: str) -> Any:
    """``"module:Qual.name"`` -> the object, or None where this release has none."""
    module_name, _, qualname = where.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - an optional dependency
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def calls_of(target: Any) -> List[Site]:
    """Every kornia call whose callee is ``target`` (or a shim replacement of it)."""
    from kornia_halfpatch import get_original

    def match(node: ast.Call, chain: Optional[List[str]], namespace: Dict[str, Any]) -> Optional[str]:
        if chain and get_original(resolve_chain(namespace, chain)) is target:
            return ".".join(chain)
        return None

    return [site for module in kornia_modules() for site in sites_in_module(module, match)]


# --------------------------------------------------------------------------------------------
# torch ops without a half CPU kernel

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


def _half_kernel_op(node: ast.Call, chain: Optional[List[str]], namespace: Dict[str, Any]) -> Optional[str]:
    if chain is not None:
        target = resolve_chain(namespace, chain)
        if target is not None and id(target) in OP_NAMES and any(target is op for op in OPS_WITHOUT_HALF_KERNEL):
            return OP_NAMES[id(target)]
        if (
            len(chain) >= 2
            and chain[-1] in METHODS_WITHOUT_HALF_KERNEL
            and not node.args  # Tensor.inverse()/det() take no argument; kornia's own inverse(x) do
            and not isinstance(resolve_chain(namespace, chain[:-1]), types.ModuleType)
        ):
            return f"Tensor.{chain[-1]}"
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr in METHODS_WITHOUT_HALF_KERNEL and not node.args:
        return f"Tensor.{node.func.attr}"
    return None


def half_kernel_sites() -> List[Site]:
    return [site for module in kornia_modules() for site in sites_in_module(module, _half_kernel_op)]


# --------------------------------------------------------------------------------------------
# Functions that sample at coordinates they derive


def sampling_ops() -> Dict[int, str]:
    """The samplers: torch's grid_sample and kornia's map_coordinates (0.7.4+)."""
    import kornia
    from kornia_halfpatch import get_original

    ops = {id(get_original(F.grid_sample)): "grid_sample", id(F.grid_sample): "grid_sample"}
    try:
        from kornia.core import ops as kornia_ops  # noqa: F401
    except Exception:  # noqa: BLE001
        kornia_ops = None
    mapper = getattr(getattr(kornia, "core", None), "ops", None)
    map_coordinates = getattr(mapper, "map_coordinates", None) if mapper is not None else None
    if map_coordinates is not None:
        ops[id(map_coordinates)] = "map_coordinates"
        ops[id(get_original(map_coordinates))] = "map_coordinates"
    return ops


def callers_of_warps() -> Dict[str, List[Site]]:
    """``"module:qualname"`` of every function that calls a sampler, or (transitively, through
    module-level functions of ``kornia.geometry``) a function that does -> its call sites."""
    from kornia_halfpatch import get_original

    modules = kornia_modules()
    callees = dict(sampling_ops())

    def calls_a_callee(node: ast.Call, chain: Optional[List[str]], namespace: Dict[str, Any]) -> Optional[str]:
        target = resolve_chain(namespace, chain) if chain is not None else None
        return callees.get(id(get_original(target))) if target is not None else None

    expanded: Set[str] = set()
    while True:
        sites = [site for module in modules for site in sites_in_module(module, calls_a_callee)]
        grown = False
        for site in sites:
            if site.where in expanded or not site.function or "." in site.function:
                continue
            expanded.add(site.where)
            if site.module.startswith("kornia.geometry"):
                obj = resolve(site.where)
                if obj is not None and id(get_original(obj)) not in callees:
                    callees[id(get_original(obj))] = site.function
                    grown = True
        if not grown:
            break
    found: Dict[str, List[Site]] = {}
    for site in sites:
        if site.function:
            found.setdefault(site.where, []).append(site)
    return found
