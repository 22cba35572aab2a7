"""Where things live: fix modules hold a table, a probe and maths; demonstrations
and the subprocess crash runners live in kornia_halfpatch/demos and load only when asked."""

import ast
import collections
import graphlib
import importlib
import pathlib
import sys

import pytest

import kornia_halfpatch
from kornia_halfpatch import _model
from kornia_halfpatch.fixes import FIX_NAMES, load_fixes
from support import run_python

# Where the package's files live: the same on every kornia release.
pytestmark = pytest.mark.release_independent


def test_fix_modules_hold_no_demonstration_and_no_subprocess():
    for name in FIX_NAMES:
        module = importlib.import_module(f"kornia_halfpatch.fixes.{name}")
        assert "subprocess" not in vars(module), name
        assert not hasattr(module, "demonstrate"), name


@pytest.mark.slow
def test_every_demonstration_is_named_and_loads_only_when_asked():
    result = run_python(
        """
        import sys, kornia_halfpatch.fixes as fixes
        fixes.load_fixes()
        print(sorted(m for m in sys.modules if m.startswith("kornia_halfpatch.demos")))
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
    for fix in load_fixes():
        assert fix.demonstration is not None, fix.name
        assert callable(_model.load(fix.demonstration)), fix.name
    assert "kornia_halfpatch.demos.warp_sampling" in sys.modules


def test_no_callable_is_the_target_of_two_fixes():
    """One target, one fix: two wrappers on one function would chain, make the result depend on the
    order of apply/revert, and a scripted caller recursed through both (a kornia_dtypes row on
    torch_ops' fundamental_from_essential exhausted memory in torch.jit.script)."""
    from kornia_halfpatch import fixes

    owners = collections.defaultdict(list)
    for fix in fixes.load_fixes():
        for target in fix.targets:
            target = target.target() if hasattr(target, "target") else target
            for candidate in target.candidates:
                owners[candidate].append(fix.name)
    shared = {candidate: names for candidate, names in owners.items() if len(names) > 1}
    assert shared == {}


# --------------------------------------------------------------------------------------------
# The import graph of the package, read from the source (nothing is imported)

PACKAGE = pathlib.Path(kornia_halfpatch.__file__).parent
# The modules that patch (the engine and its state); fix modules import none of them.
ENGINE_MODULES = {
    "kornia_halfpatch._engine",
    "kornia_halfpatch._installed",
    "kornia_halfpatch._bindings",
    "kornia_halfpatch._kornia_scope",
    "kornia_halfpatch._import_hook",
    "kornia_halfpatch._selection",
    "kornia_halfpatch._identity",
    "kornia_halfpatch._scoped",
    "kornia_halfpatch.testing",
}


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imported_modules(path, module_level_only):
    """The package's modules that ``path`` imports: at module level (statements run on import,
    including those under ``if``/``try``/class bodies), or anywhere (functions too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    statements = []

    def visit(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                statements.append(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not module_level_only:
                    statements.extend(n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(inner)

    visit(ast.parse(path.read_text()).body)
    found = set()
    for statement in statements:
        if isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names)
            continue
        if statement.level:
            base = package.split(".")[: len(package.split(".")) - statement.level + 1]
            base = ".".join(base + ([statement.module] if statement.module else []))
        else:
            base = statement.module or ""
        for alias in statement.names:
            submodule = f"{base}.{alias.name}"
            found.add(submodule if submodule in MODULES else base)
    return {module for module in found if module in MODULES and module != name}


def _cycle(graph):
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return error.args[1]
    return None


def test_the_package_has_no_import_circle():
    """Module-level imports, and lazy ones in functions too: the engine imports the fixes'
    declarations, fixes never import the engine back, and no module needs another that needs it."""
    assert len(MODULES) > 30 and "kornia_halfpatch._engine" in MODULES
    module_level = {name: _imported_modules(path, True) for name, path in MODULES.items()}
    assert "kornia_halfpatch._installed" in module_level["kornia_halfpatch._engine"]  # the reader sees imports
    assert _cycle(module_level) is None
    anywhere = {name: _imported_modules(path, False) for name, path in MODULES.items()}
    assert _cycle(anywhere) is None


def test_fix_modules_import_declarations_never_the_engine():
    fix_modules = [name for name in MODULES if name.startswith("kornia_halfpatch.fixes.")]
    assert len(fix_modules) >= len(FIX_NAMES)
    reaching = {name: sorted(_imported_modules(MODULES[name], False) & ENGINE_MODULES) for name in fix_modules}
    assert {name: found for name, found in reaching.items() if found} == {}


def test_the_options_manifest_is_a_declaration():
    """Every module may read the manifest: it imports no module of the package, nor torch."""
    path = MODULES["kornia_halfpatch._options"]
    assert _imported_modules(path, False) == set()
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert imported <= {"__future__", "os", "dataclasses", "typing"}, imported
