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

:func:`scan` answers the first question for a source tree of any release without importing it
(static alias tracking, a broader list of ops, and how each site treats dtypes), for
tools/half_call_sites.py (its command line) and docs/surface/. Nothing here patches.
"""

from __future__ import annotations

import ast
import collections
import importlib
import importlib.util
import inspect
import pkgutil
import sys
import types
from dataclasses import dataclass
from pathlib import Path
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


# --------------------------------------------------------------------------------------------
# A source tree, read without importing it: calls of torch ops without a half CPU kernel, through
# the names each module's imports give them, with how each site treats dtypes.

# canonical op -> probe key in tools/half_kernel_probe.py (all raise for float16 and bfloat16 on CPU)
LINALG = ["solve", "solve_ex", "inv", "inv_ex", "svd", "svdvals", "eigh", "eigvalsh", "eig", "eigvals", "qr", "det",
          "slogdet", "lstsq", "cholesky", "cholesky_ex", "pinv", "lu_factor", "lu_factor_ex", "lu", "lu_solve",
          "solve_triangular", "matrix_rank", "cond", "householder_product", "tensorinv", "tensorsolve"]
TORCH = ["inverse", "det", "logdet", "slogdet", "svd", "pinverse", "cholesky", "cholesky_solve", "cholesky_inverse",
         "triangular_solve", "lu", "lu_solve", "lu_unpack_", "geqrf", "ormqr", "cdist", "quantile", "nanquantile",
         "histogram", "histogramdd", "stft", "istft", "_standard_gamma", "lstsq", "matrix_rank", "symeig", "qr", "eig"]
FUNCTIONAL = ["avg_pool3d", "local_response_norm", "pdist", "adaptive_avg_pool3d_"]  # trailing _: probed ok, kept out
MODULES = ["LocalResponseNorm", "AvgPool3d"]
SPECIAL = ["ndtri", "erfcx", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
           "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1"]
DISTRIBUTIONS = ["Beta", "Gamma", "Dirichlet", "Chi2", "StudentT"]  # sampling goes through _standard_gamma/dirichlet
METHODS = ["inverse", "det", "logdet", "slogdet", "svd", "pinverse", "cholesky", "cholesky_solve", "cholesky_inverse",
           "triangular_solve", "lu", "lu_solve", "geqrf", "quantile", "nanquantile", "histogram"]
# conditional: only some arguments lack a kernel; reported with the condition
CONDITIONAL = {
    "torch.linalg.norm": "ord in (2, -2, 'nuc') on a matrix",
    "torch.linalg.matrix_norm": "ord in (2, -2, 'nuc')",
    "torch.norm": "p in (2, -2, 'nuc') with a 2-element dim",
    "torch.linalg.matrix_power": "negative exponent",
    "torch.nn.functional.interpolate": "antialias=True",
    "torch.cdist": "p != 2, or both sets of 25 points or fewer (compute_mode default)",
}

TARGETS = set()
TARGETS.update(f"torch.linalg.{n}" for n in LINALG)
TARGETS.update(f"torch.{n}" for n in TORCH if not n.endswith("_"))
TARGETS.update(f"torch.nn.functional.{n}" for n in FUNCTIONAL if not n.endswith("_"))
TARGETS.update(f"torch.nn.{n}" for n in MODULES)
TARGETS.update(f"torch.special.{n}" for n in SPECIAL)
TARGETS.update(f"torch.distributions.{n}" for n in DISTRIBUTIONS)
TARGETS.update(f"torch.distributions.{n.lower()}.{n}" for n in DISTRIBUTIONS)
TARGETS.update({"torch.complex", "torch.polar"})  # no complex bfloat16 dtype; ComplexHalf lacks reciprocal/polar kernels
FFT_PREFIX = "torch.fft."
FFT_OK = {"torch.fft.fftshift", "torch.fft.ifftshift", "torch.fft.fftfreq", "torch.fft.rfftfreq"}
TORCH_MODULES = {"torch", "torch.linalg", "torch.fft", "torch.nn", "torch.nn.functional", "torch.special",
                 "torch.distributions"}


def is_target(name: str) -> bool:
    if name in TARGETS:
        return True
    if name.startswith(FFT_PREFIX) and name not in FFT_OK:
        return True
    return name in ("torch.linalg.norm", "torch.linalg.matrix_norm", "torch.norm", "torch.linalg.matrix_power",
                    "torch.nn.functional.interpolate")


def canonical(name: str) -> str:
    for a, b in (("torch.nn.functional.", "F."), ("torch.distributions.beta.", "torch.distributions."),
                 ("torch.distributions.gamma.", "torch.distributions."), ("torch.distributions.dirichlet.", "torch.distributions.")):
        if name.startswith(a):
            name = b + name[len(a):]
    return name


def kornia_reexports(root: Path) -> dict:
    """kornia.core re-exports torch functions (``complex = torch.complex`` in core/_backend.py)."""
    backend = root / "core" / "_backend.py"
    names = {}
    if backend.exists():
        for node in ast.parse(backend.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and ast.unparse(node.value).startswith("torch.")):
                names[node.targets[0].id] = ast.unparse(node.value)
    return names


class Aliases:
    """Local name -> dotted torch path, from a module's imports (module level and inside functions)."""

    def __init__(self, tree: ast.AST, reexports: dict | None = None):
        self.names = {}
        reexports = reexports or {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "torch" or alias.name.startswith("torch."):
                        if alias.asname:
                            self.names[alias.asname] = alias.name
                        else:
                            self.names[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and (node.module == "torch" or node.module.startswith("torch.")):
                for alias in node.names:
                    self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.ImportFrom) and node.module in ("kornia.core", "kornia.core._backend"):
                for alias in node.names:
                    if alias.name in reexports:
                        self.names[alias.asname or alias.name] = reexports[alias.name]

    def resolve(self, node: ast.AST):
        chain = chain_of(node)
        if chain is None or chain[0] not in self.names:
            return None
        return ".".join([self.names[chain[0]], *chain[1:]])


def _const(node):
    return node.value if isinstance(node, ast.Constant) else (
        -node.operand.value if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) else None)


def _condition_holds(op: str, call: ast.Call) -> str | None:
    """For conditional ops: None if the call cannot hit the missing kernel, else a note."""
    keywords = {k.arg: k.value for k in call.keywords}
    if op == "torch.nn.functional.interpolate":
        value = keywords.get("antialias")
        if value is None or _const(value) is False:
            return None
        return "antialias=" + ast.unparse(value)
    if op in ("torch.linalg.norm", "torch.linalg.matrix_norm"):
        value = keywords.get("ord", call.args[1] if len(call.args) > 1 else None)
        if value is None:
            return None
        if _const(value) in (2, -2, "nuc") or not isinstance(value, ast.Constant):
            return "ord=" + ast.unparse(value)
        return None
    if op == "torch.norm":
        value = keywords.get("p", call.args[1] if len(call.args) > 1 else None)
        dim = keywords.get("dim", call.args[2] if len(call.args) > 2 else None)
        if value is not None and _const(value) in (2, -2, "nuc") and isinstance(dim, (ast.Tuple, ast.List)) and len(dim.elts) == 2:
            return f"p={ast.unparse(value)}, dim={ast.unparse(dim)}"
        if value is not None and _const(value) == "nuc":
            return "p='nuc'"
        return None
    if op == "torch.linalg.matrix_power":
        value = keywords.get("n", call.args[1] if len(call.args) > 1 else None)
        if value is not None and isinstance(_const(value), int) and _const(value) >= 0:
            return None
        return "n=" + (ast.unparse(value) if value is not None else "?")
    if op in ("torch.complex", "torch.polar"):
        return "bfloat16: no complex bfloat16 dtype; float16 gives ComplexHalf (no reciprocal/division kernel on CPU)"
    if op == "torch.cdist":
        value = keywords.get("p", call.args[2] if len(call.args) > 2 else None)
        mode = keywords.get("compute_mode")
        note = []
        if value is not None and _const(value) != 2.0:
            note.append("p=" + ast.unparse(value))
        if mode is not None:
            note.append("compute_mode=" + ast.unparse(mode))
        return ", ".join(note) or "p=2: half kernel only when both sets hold more than 25 points (matmul path)"
    return ""


_CAST_METHODS = {"float", "double"}


def _casts_in(node: ast.AST) -> list:
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr in _CAST_METHODS and not sub.args:
                found.append(ast.unparse(sub.func)[-40:] + "()")
            elif sub.func.attr in ("to", "type") and (sub.args or sub.keywords):
                text = ast.unparse(sub)
                arg_text = " ".join(ast.unparse(a) for a in sub.args) + " " + " ".join(ast.unparse(k) for k in sub.keywords)
                if "dtype" in arg_text or "float" in arg_text or "double" in arg_text:
                    found.append(text[-60:])
    return found


def _guarded(function: ast.AST) -> bool:
    text = ast.unparse(function)
    return ("float32" in text or "float64" in text or ".float()" in text or ".double()" in text
            or "_cast(" in text)


class Scanner(ast.NodeVisitor):
    def __init__(self, module: str, aliases: Aliases):
        self.module, self.aliases = module, aliases
        self.stack = []  # (kind, name, node)
        self.sites = []
        self.calls = collections.defaultdict(set)  # qualname -> called simple names (for the caller graph)
        self.functions = {}  # qualname -> lineno

    def _qualname(self):
        return ".".join(name for _, name, _ in self.stack) or "<module>"

    def visit_ClassDef(self, node):
        self.stack.append(("class", node.name, node))
        self.generic_visit(node)
        self.stack.pop()

    def visit_FunctionDef(self, node):
        self.stack.append(("def", node.name, node))
        self.functions[self._qualname()] = node.lineno
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _tensor_receiver(self, node: ast.Call, qualname: str) -> bool:
        """Whether ``receiver.method(...)`` can be the Tensor method (kornia has its own ``inverse`` methods)."""
        receiver = node.func.value
        if isinstance(receiver, ast.Name) and (receiver.id in ("self", "cls") or (receiver.id[:1].isupper() and any(c.islower() for c in receiver.id))):
            return False  # kornia's own methods / classmethods (augmentation inverse, liegroups)
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            return False
        if node.func.attr in NO_ARGUMENT_METHODS and (node.args or node.keywords):
            return False  # Tensor.inverse()/det()/... take no arguments: this is another class's method
        return (self.module, qualname, ast.unparse(receiver)) not in NOT_TENSOR_RECEIVERS

    def visit_Call(self, node):
        qualname = self._qualname()
        function = next((n for kind, _, n in reversed(self.stack) if kind == "def"), None)
        if isinstance(node.func, ast.Name):
            self.calls[qualname].add(node.func.id)
        elif isinstance(node.func, ast.Attribute):
            self.calls[qualname].add(node.func.attr)
        resolved = self.aliases.resolve(node.func)
        op, condition = None, ""
        if resolved is not None and is_target(resolved):
            condition = _condition_holds(resolved, node)
            if condition is not None:
                op = resolved
        elif resolved is None and isinstance(node.func, ast.Attribute) and node.func.attr in METHODS and self._tensor_receiver(node, qualname):
            op, condition = f"Tensor.{node.func.attr}", "method form"
        if op is not None:
            casts = _casts_in(ast.Module(body=[ast.Expr(a) for a in node.args] + [ast.Expr(k.value) for k in node.keywords],
                                         type_ignores=[]))
            enclosing = self.stack[-1][1] if self.stack else ""
            if enclosing.startswith("_torch_") and enclosing.endswith("_cast") or enclosing in HELPERS:
                treatment = "helper"
            elif casts:
                treatment = "cast-arg"
            elif function is not None and _guarded(function):
                treatment = "guarded"
            else:
                treatment = "direct"
            self.sites.append({"module": self.module, "function": qualname, "op": canonical(op), "line": node.lineno,
                               "treatment": treatment, "casts": casts, "condition": condition or "",
                               "text": ast.unparse(node)[:120]})
        self.generic_visit(node)


NO_ARGUMENT_METHODS = {"inverse", "det", "logdet", "slogdet", "pinverse", "geqrf"}
# receivers that are kornia objects, not tensors (read from the source): So2/So3 in Se2/Se3, Se2/Se3 in NamedPose
NOT_TENSOR_RECEIVERS = {
    ("kornia.geometry.liegroup.se2", "Se2.inverse", "self.r"),
    ("kornia.geometry.liegroup.se3", "Se3.inverse", "self.r"),
    ("kornia.geometry.pose", "NamedPose.inverse", "self._dst_from_src"),
}

# kornia's own widening helpers (cast to float32/float64, call, cast back), by name
HELPERS = {"_torch_inverse_cast", "_torch_histc_cast", "_torch_svd_cast", "_torch_linalg_svdvals", "_torch_solve_cast",
           "safe_solve_with_mask", "safe_inverse_with_mask"}


def package_dir(source: str) -> Path:
    if source == "installed":
        spec = importlib.util.find_spec("kornia")
        return Path(spec.origin).parent
    path = Path(source)
    return path / "kornia" if (path / "kornia" / "__init__.py").exists() else path


def scan(root: Path) -> dict:
    sites, calls, functions, helper_defs = [], {}, {}, []
    reexports = kornia_reexports(root)
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("kornia",) + path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(), filename=str(path))
        scanner = Scanner(module, Aliases(tree, reexports))
        scanner.visit(tree)
        sites += scanner.sites
        for qualname, names in scanner.calls.items():
            calls[f"{module}:{qualname}"] = names
        for qualname, line in scanner.functions.items():
            functions[f"{module}:{qualname}"] = line
            if qualname.split(".")[-1] in HELPERS:
                helper_defs.append(f"{module}:{qualname}")
    helper_users = collections.defaultdict(list)
    for caller, names in calls.items():
        for helper in HELPERS & names:
            helper_users[helper].append(caller)
    return {"sites": sites, "helpers": {h: sorted(u) for h, u in sorted(helper_users.items())},
            "helper_defs": sorted(helper_defs), "calls": {k: sorted(v) for k, v in calls.items()}}
