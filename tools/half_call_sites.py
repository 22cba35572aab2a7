"""Every call, in a kornia source tree, of a torch op that has no float16/bfloat16 CPU kernel.

    python tools/half_call_sites.py SRC[=LABEL] [SRC[=LABEL] ...] [--markdown OUT.md] [--json OUT.json]

SRC is a kornia package directory (``.../kornia``), a checkout holding one (``.../v0.8.2``), or
``installed`` (the kornia of the running python, found without importing it). The scan is
``ast`` only: nothing is imported or executed.

The ops are those that raise for float16 and bfloat16 on CPU in torch 2.13 (measured by
tools/half_kernel_probe.py, docs/surface/torch_ops.md). A call is found through whatever
name the module gives it: ``torch.linalg.inv(...)``, ``linalg.inv`` after ``from torch import
linalg``, ``inv_ex`` after ``from torch.linalg import inv_ex``, ``F.avg_pool3d`` after ``import
torch.nn.functional as F``, ``nn.functional.local_response_norm``, the ``nn.LocalResponseNorm`` /
``nn.AvgPool3d`` modules, and the ``Tensor`` method forms (``x.inverse()``, ``x.det()``, ...).

Per site: module, enclosing function (qualified), op, line, and how the site treats dtypes:
``helper`` (the enclosing function is one of kornia's widening helpers, listed separately),
``cast-arg`` (an argument is widened in the call itself: ``.to(dtype)``, ``.float()``,
``.double()``), ``guarded`` (the enclosing function tests the dtype against float32/float64 or
casts elsewhere in its body: read the site), or ``direct`` (the half tensor reaches the op).
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
import json
import sys
from pathlib import Path

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
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.names:
            return None
        return ".".join([self.names[node.id], *reversed(parts)])


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


def public_callers(result: dict, target: str, depth: int = 4) -> list:
    """Public functions whose body calls (by simple name, transitively) the function `target` (module:qualname)."""
    callers_of = collections.defaultdict(set)
    for caller, names in result["calls"].items():
        for name in names:
            callers_of[name].add(caller)
    seen, frontier, public = {target}, [target], set()
    for _ in range(depth):
        next_frontier = []
        for function in frontier:
            name = function.split(":")[1].split(".")[-1]
            if name == "<module>":
                continue
            for caller in callers_of.get(name, ()):
                if caller in seen:
                    continue
                seen.add(caller)
                next_frontier.append(caller)
                module, qualname = caller.split(":")
                if not any(p.startswith("_") for p in module.split(".") + qualname.split(".")) or qualname.split(".")[-1] in ("forward", "__call__", "__init__"):
                    public.add(caller)
        frontier = next_frontier
    return sorted(public)


NO_KERNEL_TEXT = ("not implemented for '", "Low precision dtypes not supported", "doesn't handle types other than float",
                  "Unsupported dtype", "Expected both inputs to be Half, Float or Double", "MKL FFT doesn't support",
                  "input tensor must be either float or double", "expected a tensor with 2 or more dimensions of float")


def observed_failures(paths: list) -> collections.Counter:
    """(kornia-relative path, line) -> how many half failures without a kernel end there.

    Reads the JSON lines of tools/upstream_tests.py (kornia's own tests) and of
    tools/half_public_apis.py (public API cases).
    """
    seen = collections.Counter()
    for path in paths:
        for line in open(path):
            entry = json.loads(line)
            message = entry.get("message") or entry.get("error") or ""
            if not any(text in message for text in NO_KERNEL_TEXT):
                continue
            if entry.get("event") == "report" and entry.get("outcome") == "failed":
                frames = [f for f in entry.get("kornia_frames", []) if not f.startswith("core/check.py")]
                if frames:
                    file, _, number = frames[-1].rpartition(":")
                    seen[(file, int(number))] += 1
            elif entry.get("event") == "case" and entry.get("frame"):
                file, _, rest = entry["frame"].partition(":")
                seen[(file, int(rest.split(" ")[0]))] += 1
    return seen


def _module_path(module: str) -> str:
    return module.removeprefix("kornia.").replace(".", "/") + ".py"


def render(results: dict, out: Path | None, observed: dict | None = None) -> str:
    observed = observed or {}
    labels = list(results)
    lines = ["# Call sites of torch ops without a half CPU kernel", "",
             "Generated by `tools/half_call_sites.py` (an `ast` scan of each release's source; nothing imported). "
             "Ops: those that raise for float16 and bfloat16 on CPU in torch 2.13 "
             "([torch_ops.md](torch_ops.md)); conditional ops only where the call's arguments can hit the missing kernel. "
             "`treatment`: `helper` = inside one of kornia's widening helpers; `cast-arg` = an argument is widened in the call; "
             "`guarded` = the enclosing function mentions float32/float64 or casts somewhere (a heuristic: the site may still "
             "receive half, see `seen failing`); "
             "`direct` = a half input reaches the op.", ""]
    lines += ["## Counts per release", "", "| release | sites | direct | guarded | cast-arg | helper | modules with a site |",
              "|---|---|---|---|---|---|---|"]
    for label in labels:
        sites = results[label]["sites"]
        counts = collections.Counter(s["treatment"] for s in sites)
        lines.append(f"| {label} | {len(sites)} | {counts['direct']} | {counts['guarded']} | {counts['cast-arg']} | {counts['helper']} | "
                     f"{len({s['module'] for s in sites})} |")
    lines += ["", "## Counts per op and release (all treatments; in brackets: direct + guarded)", "",
              "| op | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    ops = sorted({s["op"] for label in labels for s in results[label]["sites"]})
    for op in ops:
        cells = []
        for label in labels:
            sites = [s for s in results[label]["sites"] if s["op"] == op]
            risky = sum(s["treatment"] in ("direct", "guarded") for s in sites)
            cells.append(f"{len(sites)} ({risky})" if sites else "")
        lines.append(f"| `{op}` | " + " | ".join(cells) + " |")
    if observed:
        lines += ["", "## Sites seen failing in half", "",
                  "How many float16/bfloat16 failures without a kernel (kornia's own tests at the tag, with the shim's plugin, "
                  "plus the public API cases of [no_half_kernel.md](no_half_kernel.md)) end at each site, per release; "
                  "failures whose innermost kornia frame is not a scanned site are listed below the table.", "",
                  "| release | sites | sites seen failing | failures at a site | failures elsewhere |", "|---|---|---|---|---|"]
        for label in labels:
            if label not in observed:
                continue
            sites = results[label]["sites"]
            at_site = {(_module_path(s["module"]), s["line"]) for s in sites}
            hits = sum(n for key, n in observed[label].items() if key in at_site)
            elsewhere = {key: n for key, n in observed[label].items() if key not in at_site}
            lines.append(f"| {label} | {len(sites)} | {sum(1 for key in at_site if observed[label][key])} | {hits} | "
                         f"{sum(elsewhere.values())} ({', '.join(f'`{k[0]}:{k[1]}` {n}' for k, n in sorted(elsewhere.items()))}) |")
    lines += ["", "## Every site", "",
              "One row per (module, function, op, source text); `releases` lists the releases holding it, with the line in each"
              + ("; `seen failing`: failures observed at that line per release (see above)" if observed else "") + ".", "",
              "| module | function | op | treatment | releases: line | seen failing | condition / casts | call |", "|---|---|---|---|---|---|---|---|"]
    merged = collections.OrderedDict()
    for label in labels:
        for s in results[label]["sites"]:
            key = (s["module"], s["function"], s["op"], s["text"])
            entry = merged.setdefault(key, {"site": s, "where": [], "treatments": set()})
            entry["where"].append(f"{label}: {s['line']}")
            count = observed.get(label, {}).get((_module_path(s["module"]), s["line"]), 0)
            if count:
                entry.setdefault("seen", []).append(f"{label}: {count}")
            entry["treatments"].add(s["treatment"])
    for (module, function, op, text), entry in sorted(merged.items(), key=lambda kv: kv[0][:3]):
        s = entry["site"]
        note = "; ".join(filter(None, [s["condition"], ", ".join(f"`{c}`" for c in s["casts"])]))
        lines.append(f"| `{module}` | `{function}` | `{op}` | {'/'.join(sorted(entry['treatments']))} | {', '.join(entry['where'])} | "
                     f"{', '.join(entry.get('seen', []))} | "
                     f"{note.replace('|', '/')} | `{text.replace('|', '/')}` |")
    lines += ["", "## kornia's widening helpers and their callers", ""]
    for label in labels:
        lines += [f"### {label}", "", "Defined: " + ", ".join(f"`{d}`" for d in results[label]["helper_defs"]), "",
                  "| helper | callers (module:function) |", "|---|---|"]
        for helper, users in results[label]["helpers"].items():
            lines.append(f"| `{helper}` | " + ", ".join(f"`{u}`" for u in users) + " |")
        lines.append("")
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sources", nargs="+", help="SRC or SRC=LABEL")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--observed", action="append", default=[],
                        help="LABEL=FILE.jsonl (repeatable): failures recorded by upstream_tests.py / half_public_apis.py")
    args = parser.parse_args()
    results = {}
    for item in args.sources:
        source, _, label = item.partition("=")
        results[label or source] = scan(package_dir(source))
    files = collections.defaultdict(list)
    for item in args.observed:
        label, _, path = item.partition("=")
        files[label].append(path)
    observed = {label: observed_failures(paths) for label, paths in files.items()}
    text = render(results, args.markdown, observed)
    if not args.markdown:
        print(text)
    if args.json:
        args.json.write_text(json.dumps({k: {"sites": v["sites"], "helpers": v["helpers"]} for k, v in results.items()}, indent=1))
    for label, result in results.items():
        counts = collections.Counter(s["treatment"] for s in result["sites"])
        print(f"{label}: {len(result['sites'])} sites {dict(counts)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
