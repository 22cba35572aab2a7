"""Where the installed kornia samples an image at coordinates it derives (``grid_sample``,
``map_coordinates``) or calls one of kornia's warps, found by reading the source of every loaded
kornia module with ``ast`` (calls resolved through each module's own globals, as
tests/half_call_sites.py does). Used by tests/test_fix_warp_geometry.py; nothing here patches."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Set

import torch.nn.functional as F

from half_call_sites import _chain, _resolve, kornia_modules


@dataclass(frozen=True)
class Site:
    module: str
    function: str  # qualified name of the enclosing function ("Class.method"), "" at module level
    callee: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.module}:{self.function}"


def _name_of(obj: Any) -> str:
    from kornia_halfpatch import get_original

    obj = get_original(obj)
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"


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


def sites_in_module(module: Any, callees: Dict[int, str], callee_names: Set[str]) -> Iterator[Site]:
    """Calls of any object in ``callees`` (by identity, through the module's globals), and
    ``self.<name>(...)``/``x.<name>(...)`` calls whose attribute is in ``callee_names``
    (methods: DepthWarper.warp_grid)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return
    namespace = vars(module)
    tree = ast.parse(source)
    stack: List[str] = []
    from kornia_halfpatch import get_original

    def visit(node: ast.AST) -> Iterator[Site]:
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            stack.append(node.name)
        if isinstance(node, ast.Call):
            chain = _chain(node.func)
            if chain is not None:
                target = _resolve(namespace, chain)
                if target is not None:
                    key = id(get_original(target))
                    if key in callees:
                        yield Site(module.__name__, ".".join(stack), callees[key], node.lineno)
        for child in ast.iter_child_nodes(node):
            yield from visit(child)
        if scoped:
            stack.pop()

    yield from visit(tree)


def resolve(where: str) -> Any:
    """``"module:Qual.name"`` -> the object, or None where this release has none."""
    import importlib

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


def callers_of_warps() -> Dict[str, List[Site]]:
    """``"module:qualname"`` of every function that calls a sampler, or (transitively, through
    module-level functions of ``kornia.geometry``) a function that does -> its call sites."""
    from kornia_halfpatch import get_original

    modules = kornia_modules()
    callees = dict(sampling_ops())
    expanded: Set[str] = set()
    while True:
        sites = [site for module in modules for site in sites_in_module(module, callees, set())]
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
