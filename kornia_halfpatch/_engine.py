"""The one place that knows how to patch: registry, gating, alias rebinding, undo log, lock.

Fix modules (``kornia_halfpatch.fixes.*``) only describe *what* to replace and *how to compute*;
everything about *installing* a replacement lives here:

* Targets are resolved with ``wrapt.resolve_path`` and the first candidate path that exists in
  the installed release wins (kornia moves functions between releases).
* The replacement is a plain Python function built by the fix, never a wrapt proxy: dynamo
  inlines ``__wrapped__`` of a proxy and TorchScript compiles its source, so a proxy silently
  runs the unpatched code under ``torch.compile``/``torch.jit.script``. A plain function with its
  own source is what both compile.
* Kornia modules bind functions by name (``from kornia.utils import create_meshgrid``), so every
  ``kornia*`` module attribute that *is* the original gets the replacement. Modules imported
  later then bind the replacement too, because every module they could import it from has been
  rebound. Non-kornia modules holding the original are reported as stale (warned once).
* If kornia is not imported yet, applying is deferred with a wrapt post-import hook.
* Every change goes into an undo log; ``revert`` restores exactly the originals, including in
  modules imported after ``apply`` that bound the replacement.
* A target with ``scope="kornia"`` replaces a function of another library (torch) for kornia's
  code only: the function's home module is left alone; every kornia module global that *is* the
  function gets the replacement, and every kornia module global through which kornia's code
  reaches it as an attribute (``F.grid_sample``, ``nn.functional.grid_sample``,
  ``torch.nn.functional.grid_sample``, found in the functions' bytecode) is rebound to a module
  *view*: a real ``types.ModuleType`` holding the same attributes, with the one on the path
  swapped. Kornia modules imported later get the same treatment from a ``sys.meta_path`` finder
  that runs the rebinding right after the module's code has executed.
* Fixes may take keyword options of ``apply()`` (``Fix.options``, handed to ``Fix.configure``).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import importlib.abc
import inspect
import logging
import os
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import wrapt

from . import _environment as environment

logger = logging.getLogger("kornia_halfpatch")


class HalfPatchWarning(UserWarning):
    """Something the shim could not do, or did not do, that a user should know about."""


def _warn(message: str, stacklevel: int = 3) -> None:
    """Warn without ever raising: under ``python -W error`` (or a filter that turns
    ``HalfPatchWarning`` into an error) ``warnings.warn`` raises, and the shim must not break the
    program for something it only reports; the message then goes to the log alone."""
    try:
        warnings.warn(message, HalfPatchWarning, stacklevel=stacklevel + 1)
    except Exception:  # noqa: BLE001 - a warning filter set to "error"
        logger.warning("%s (HalfPatchWarning raised by a warnings filter; logged instead)", message)


def _describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _outside_compiler(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``function`` eagerly, never traced by dynamo.

    ``apply()`` called inside a function being compiled by ``torch.compile`` (or the deferred
    hook fired by an import there) was traced by dynamo, which then compiled every probe frame
    on its own: a probe failed with ``InternalTorchDynamoError`` and its fix was skipped. A
    ``torch._dynamo.disable`` wrapper makes dynamo graph-break and run the call with frame
    evaluation off. torch._dynamo is only looked up if something already imported it (nothing
    can be compiling otherwise), so the shim never imports it itself.
    """
    disabled: List[Callable[..., Any]] = []

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not disabled:
            dynamo = sys.modules.get("torch._dynamo")
            disable = getattr(dynamo, "disable", None)
            if disable is None:
                return function(*args, **kwargs)
            try:
                disabled.append(disable(function))
            except Exception:  # noqa: BLE001 - a torch whose disable() differs: run as is
                return function(*args, **kwargs)
        return disabled[0](*args, **kwargs)

    return run


# Declarations and reports live in _model (re-exported here for existing callers).
from ._model import (  # noqa: E402
    SCOPE_EVERYWHERE,
    SCOPE_KORNIA,
    Demonstration,
    Finding,
    Fix,
    FixStatus,
    Report,
    RowStatus,
    Target,
    Verdict,
)


def _status(name: str, finding: Finding) -> FixStatus:
    return FixStatus(name, finding.verdict, finding.reason)


# --------------------------------------------------------------------------------------------
# Installed state


@dataclass
class _Installed:
    """Undo log entry: one replaced target and every alias rebound for it."""

    parent: Any
    attribute: str
    original: Any
    replacement: Any
    path: str
    aliases: List[Tuple[Any, str]] = field(default_factory=list)  # (module, attribute)
    scope: str = SCOPE_EVERYWHERE
    # A class attribute the class only inherited (cpu_half's per-class nn.Module._call_impl):
    # revert deletes it from the class instead of writing the base's function into it.
    inherited: bool = False

    @property
    def on_module(self) -> bool:
        """The target is a module attribute (a function), not a class attribute (a method)."""
        return inspect.ismodule(self.parent)


_lock = threading.RLock()
_installed: Dict[str, List[_Installed]] = {}
_statuses: Dict[str, FixStatus] = {}
_originals_by_replacement: Dict[int, Any] = {}
_pending_selection: Optional[Tuple[str, ...]] = None
_pending_options: Dict[str, Any] = {}
_installed_options: Dict[str, Dict[str, Any]] = {}
_import_hook_registered = False
_warned_stale: set = set()


# The registry seam: tests (kornia_halfpatch.testing.use_fixes) evaluate stand-in fixes
# without touching the real table.
_registry_override: Optional[List[Fix]] = None


def _registry() -> List[Fix]:
    if _registry_override is not None:
        return list(_registry_override)
    from .fixes import load_fixes

    return load_fixes()


def fix_names() -> Tuple[str, ...]:
    if _registry_override is not None:
        return tuple(fix.name for fix in _registry_override)
    from .fixes import FIX_NAMES

    return FIX_NAMES


def _canonical(names: Iterable[str]) -> Tuple[str, ...]:
    """Fix names as given, with former names (``fixes.FORMER_NAMES``) read as today's."""
    from .fixes import canonical_name

    known = fix_names()
    return tuple(name if name in known else canonical_name(name) for name in names)


def _select(only: Optional[Iterable[str]], exclude: Optional[Iterable[str]]) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """Which fixes to apply, and why each other one is off. kwargs beat env vars beat defaults."""
    known = fix_names()
    if only is None and exclude is None:
        only_t = environment.env_list(environment.ENV_ONLY)
        exclude_t = environment.env_list(environment.ENV_EXCLUDE)
    else:  # a selection in code replaces the one from the environment as a whole
        only_t = tuple(only) if only is not None else None
        exclude_t = tuple(exclude) if exclude is not None else None
    only_t = _canonical(only_t) if only_t is not None else None
    exclude_t = _canonical(exclude_t) if exclude_t is not None else None
    for given in (only_t or ()) + (exclude_t or ()):
        if given not in known:
            raise ValueError(f"unknown kornia_halfpatch fix {given!r}; known fixes: {', '.join(known)}")
    off: Dict[str, str] = {}
    if environment.env_flag(environment.ENV_DISABLE):
        return (), {name: f"turned off by the user ({environment.ENV_DISABLE} is set)" for name in known}
    selected = []
    for name in known:
        if only_t is not None and name not in only_t:
            off[name] = "turned off by the user (not selected)"
        elif exclude_t is not None and name in exclude_t:
            off[name] = "turned off by the user (excluded)"
        else:
            selected.append(name)
    return tuple(selected), off


# --------------------------------------------------------------------------------------------
# Module scanning


def _is_kornia_module(name: str) -> bool:
    return name == "kornia" or name.startswith("kornia.")


def _module_items() -> Iterator[Tuple[str, Any, Dict[str, Any]]]:
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) if module is not None else None
        if isinstance(namespace, dict):
            yield name, module, namespace


def _bindings_of(obj: Any) -> List[Tuple[str, Any, str]]:
    """Every (module name, module, attribute) whose value *is* ``obj``, read from ``__dict__``
    so that lazy module ``__getattr__`` hooks are never triggered."""
    found = []
    for name, module, namespace in _module_items():
        for attribute, value in list(namespace.items()):
            if value is obj:
                found.append((name, module, attribute))
    return found


class _BindingIndex:
    """Where objects are bound, from ONE pass over ``sys.modules`` for all of them (freezegun's
    ``{id(real): fake}`` scan): ``apply()``, ``revert()`` and ``status()`` each build one for
    every target they handle, instead of scanning all modules (about 58k attributes after
    ``import kornia``, 4 ms) once per target. Objects are registered with :meth:`want` before
    the first lookup; a lookup of another object rebuilds the index (correct, just slower)."""

    def __init__(self, wanted: Iterable[Any] = ()) -> None:
        self._wanted: Dict[int, Any] = {}
        self._found: Optional[Dict[int, List[Tuple[str, Any, str]]]] = None
        # Following mode: id -> the objects whose bindings the engine swaps with it (an original
        # and its replacements), and the namespaces already scanned (kept alive).
        self._related: Optional[Dict[int, List[Any]]] = None
        self._scanned: Dict[int, Dict[str, Any]] = {}
        self._modules_seen: Any = None  # sys.modules' size and newest entry at the last scan
        for obj in wanted:
            self.want(obj)

    def follow(self) -> None:
        """Serve a sequence of revert() and apply() passes with one scan: the engine only ever
        writes a replacement where its original is bound, or the original where its replacement
        is (``relate``), so a lookup of either also re-checks where the other was found, and the
        modules imported since the scan are scanned alone. For kornia_halfpatch.testing, whose
        blocks run revert() and apply() back to back under the lock."""
        self._related = {}

    def relate(self, original: Any, replacement: Any) -> None:
        """``replacement`` is bound only where the engine puts it, at bindings of ``original``
        (following mode only)."""
        if self._related is None:
            return
        for one, other in ((original, replacement), (replacement, original)):
            related = self._related.setdefault(id(one), [])
            if not any(known is other for known in related):
                related.append(other)
        if self._found is not None and id(replacement) not in self._wanted:
            self._wanted[id(replacement)] = replacement  # known without a scan: just installed

    def want(self, obj: Any) -> None:
        if id(obj) not in self._wanted:
            self._wanted[id(obj)] = obj
            self._found = None

    def _scan(self, items: Iterable[Tuple[str, Any, Dict[str, Any]]], found: Dict[int, List[Tuple[str, Any, str]]]) -> None:
        wanted = self._wanted
        ids = set(wanted)
        for name, module, namespace in items:
            # Most modules hold none of the objects: decide that at C speed, loop only the rest.
            if ids.isdisjoint(map(id, list(namespace.values()))):
                continue
            for attribute, value in list(namespace.items()):
                if id(value) in wanted and wanted[id(value)] is value:
                    found.setdefault(id(value), []).append((name, module, attribute))

    def _build(self) -> Dict[int, List[Tuple[str, Any, str]]]:
        found: Dict[int, List[Tuple[str, Any, str]]] = {}
        items = list(_module_items())
        self._scan(items, found)
        if self._related is not None:
            self._scanned = {id(namespace): namespace for _, _, namespace in items}
            self._modules_seen = self._modules_now()
        return found

    @staticmethod
    def _modules_now() -> Any:
        # An import adds its module at the end of sys.modules (a dict keeps insertion order).
        try:
            newest = next(reversed(sys.modules))
        except (StopIteration, RuntimeError):
            return None
        return len(sys.modules), newest, id(sys.modules.get(newest))

    def bindings_of(self, obj: Any) -> List[Tuple[str, Any, str]]:
        self.want(obj)
        if self._found is None:
            self._found = self._build()
        elif self._related is not None and self._modules_now() != self._modules_seen:
            self._modules_seen = self._modules_now()
            new = [item for item in _module_items() if self._scanned.get(id(item[2])) is not item[2]]
            if new:
                self._scan(new, self._found)
                self._scanned.update((id(namespace), namespace) for _, _, namespace in new)
        candidates = self._found.get(id(obj), [])
        if self._related is not None:
            candidates = candidates + [b for other in self._related.get(id(obj), ()) for b in self._found.get(id(other), [])]
        # Re-checked at lookup: an install since the scan may have rebound some of them.
        result: List[Tuple[str, Any, str]] = []
        for n, m, a in candidates:
            if m.__dict__.get(a) is obj and not any(m is held and a == name for _, held, name in result):
                result.append((n, m, a))
        return result


# --------------------------------------------------------------------------------------------
# Kornia-scoped targets: module views, bytecode routes, and kornia modules imported later


def _functions_of(namespace: Dict[str, Any]) -> Iterator[Any]:
    """Python functions reachable from a module namespace: its functions, the methods (static,
    class, property accessors) of classes defined in it, and what decorators wrap
    (``__wrapped__``, closure cells), so ``@torch.inference_mode()`` methods are seen."""
    module_name = namespace.get("__name__")
    seen: Set[int] = set()
    pending: List[Any] = list(namespace.values())
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, (staticmethod, classmethod)):
            pending.append(value.__func__)
        elif isinstance(value, property):
            pending.extend(f for f in (value.fget, value.fset, value.fdel) if f is not None)
        elif isinstance(value, type):
            if getattr(value, "__module__", None) == module_name:
                pending.extend(vars(value).values())
        elif isinstance(value, types.FunctionType):
            yield value
            wrapped = value.__dict__.get("__wrapped__")
            if wrapped is not None:
                pending.append(wrapped)
            for cell in value.__closure__ or ():
                try:
                    content = cell.cell_contents
                except ValueError:  # empty cell
                    continue
                if isinstance(content, types.FunctionType):
                    pending.append(content)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


Routes = Set[Tuple[str, Tuple[str, ...]]]

# Per module namespace (kept alive with it): the routes already read, by attribute. Kornia's
# module code does not change after import, and reading it is the expensive part (about 21 ms
# over the 432 kornia modules of 0.8.2), so every scoped attribute is read in one pass per
# module and never again in this process.
_routes_cache: Dict[int, Tuple[Dict[str, Any], Dict[str, Routes]]] = {}


def _routes_by_attribute(namespace: Dict[str, Any], attributes: Iterable[str]) -> Dict[str, Routes]:
    """How the code of a module reaches each of ``attributes`` as an attribute of one of its
    globals: ``{"grid_sample": {("F", ()), ("torch", ("nn", "functional"))}}`` for
    ``F.grid_sample`` and ``torch.nn.functional.grid_sample``. Read from the bytecode of the
    functions whose globals are this namespace, one pass for all attributes (only code objects
    whose names mention one of them are disassembled)."""
    cached = _routes_cache.get(id(namespace))
    if cached is None or cached[0] is not namespace:
        cached = _routes_cache[id(namespace)] = (namespace, {})
    known = cached[1]
    missing = {attribute for attribute in attributes if attribute not in known}
    if missing:
        found: Dict[str, Routes] = {attribute: set() for attribute in missing}
        for function in _functions_of(namespace):
            if function.__globals__ is not namespace:
                continue
            for code in _code_objects(function.__code__):
                if missing.isdisjoint(code.co_names):
                    continue
                instructions = list(dis.get_instructions(code))
                for index, instruction in enumerate(instructions):
                    if instruction.opname not in ("LOAD_ATTR", "LOAD_METHOD") or instruction.argval not in missing:
                        continue
                    chain: List[str] = []
                    position = index - 1
                    while position >= 0 and instructions[position].opname == "LOAD_ATTR":
                        chain.append(instructions[position].argval)
                        position -= 1
                    if position >= 0 and instructions[position].opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                        found[instruction.argval].add((instructions[position].argval, tuple(reversed(chain))))
        known.update(found)
    return {attribute: known[attribute] for attribute in attributes}


# id(namespace) -> (namespace, the attribute names read, those its code reaches by a route):
# the test most kornia modules fail in every install and revert, kept across passes.
_reaching_cache: Dict[int, Tuple[Dict[str, Any], Set[str], FrozenSet[str]]] = {}


def _reached(namespace: Dict[str, Any], attributes: Iterable[str]) -> FrozenSet[str]:
    """Which of ``attributes`` (and of the names read before) the code of a module reaches by
    some route."""
    cached = _reaching_cache.get(id(namespace))
    if cached is None or cached[0] is not namespace or any(attribute not in cached[1] for attribute in attributes):
        every = _current_pass().scoped_names() | set(attributes)
        routes = _routes_by_attribute(namespace, every)
        cached = (namespace, every, frozenset(name for name, found in routes.items() if found))
        _reaching_cache[id(namespace)] = cached
    return cached[2]


def _reaches_any(namespace: Dict[str, Any], entries: List["_Installed"]) -> bool:
    """Whether the code of a module reaches any of the entries' attributes by some route."""
    reached = _reached(namespace, [entry.attribute for entry in entries])
    return bool(reached) and any(entry.attribute in reached for entry in entries)


def _attribute_routes(namespace: Dict[str, Any], attribute: str) -> Routes:
    return _routes_by_attribute(namespace, (attribute,))[attribute]


@dataclass
class _ViewBinding:
    """A kornia module global rebound to a module view: ``module.name`` held ``was`` (the real
    module) and now holds ``view``."""

    module: Any
    name: str
    was: Any
    view: Any


# The views installed in kornia modules, by id(kornia module) then global name. ONE view per
# kornia module global, shared by every kornia-scoped entry reached through it (warp_sampling's
# F.grid_sample and filters_conv_hang's F.conv2d both go through kornia's ``F``): a view per entry,
# stacked, could not be undone for one fix alone (reverting the lower one would have to rebuild
# the upper one), so the view of a global is recomputed from the entries installed now whenever
# one comes or goes (``_refresh_views``).
_view_bindings: Dict[int, Dict[str, _ViewBinding]] = {}
# (id(real module), overrides) -> (real module, view): the same set of replacements seen through
# the same module gives the same view object, so every kornia module sharing ``F`` shares one view
# (one guard for dynamo, one object for TorchScript). Cleared when no kornia-scoped entry is left.
_view_cache: Dict[Tuple[int, FrozenSet[Tuple[Tuple[str, ...], str, int]]], Tuple[Any, Any]] = {}

Overrides = Dict[Tuple[Tuple[str, ...], str], Any]  # (chain below the module, attribute) -> replacement


def _module_view(module: Any, overrides: Overrides) -> Any:
    """A ``types.ModuleType`` with ``module``'s attributes (a snapshot; anything missing is read
    from ``module`` itself) in which each override's attribute, at the end of its chain of
    submodules (each a view too), is the replacement. TorchScript and dynamo see an ordinary
    module."""
    key = (id(module), frozenset((chain, attribute, id(value)) for (chain, attribute), value in overrides.items()))
    cached = _view_cache.get(key)
    if cached is not None and cached[0] is module:
        return cached[1]
    view = types.ModuleType(module.__name__, module.__doc__)
    view.__dict__.update(module.__dict__)

    def __getattr__(name: str) -> Any:
        return getattr(module, name)

    view.__dict__["__getattr__"] = __getattr__
    view.__dict__["__kornia_halfpatch_view_of__"] = module
    below: Dict[str, Overrides] = {}
    for (chain, attribute), replacement in overrides.items():
        if chain:
            below.setdefault(chain[0], {})[(chain[1:], attribute)] = replacement
        else:
            view.__dict__[attribute] = replacement
    for name, deeper in below.items():
        view.__dict__[name] = _module_view(getattr(module, name), deeper)
    _view_cache[key] = (module, view)
    return view


_scoped_names_cache: List[Tuple[Tuple[int, ...], Set[str], List[Fix]]] = []


def _registry_scoped_attribute_names(registry: List[Fix]) -> Set[str]:
    """The attribute names of every target that is or may be kornia-scoped, in every fix of the
    registry (installed or not): a module's bytecode is read once for all of them, so a fix
    installed later (or after a revert) never reads it again."""
    key = tuple(id(fix) for fix in registry)
    if _scoped_names_cache and _scoped_names_cache[0][0] == key:
        return _scoped_names_cache[0][1]
    found: Set[str] = set()
    for fix in registry:
        for target in fix.targets:
            if callable(target.scope) or target.scope == SCOPE_KORNIA:
                if target.gate is not None and not target.gate().needed:
                    continue  # never installed on this torch (its answer is kept for the process)
                for candidate in target.candidates:
                    found.add(candidate.partition(":")[2].split(".")[-1])
    _scoped_names_cache[:] = [(key, found, registry)]  # the fixes kept alive: their ids stay theirs
    return found


# The kornia modules' ``_module_items()`` as of ``sys.modules``' state then (its size, newest
# entry, and the kornia modules themselves, checked one by one): one list object per state, so
# that what is computed from it can be kept by identity.
_kornia_modules_cache: Optional[Tuple[Any, List[Tuple[str, Any, Dict[str, Any]]]]] = None
# (the _kornia_module_items() list, the scoped names set, id(module) -> scoped names its code reaches)
_reaching_modules: Optional[Tuple[List[Any], Set[str], Dict[int, FrozenSet[str]]]] = None


def _kornia_module_items() -> List[Tuple[str, Any, Dict[str, Any]]]:
    """``_module_items()`` of the kornia modules, in ``sys.modules`` order; read again when a
    module was imported, removed or replaced since the last call."""
    global _kornia_modules_cache
    now = _BindingIndex._modules_now()
    cached = _kornia_modules_cache
    if cached is not None and cached[0] == now:
        modules = sys.modules
        if all(modules.get(name) is module for name, module, _ in cached[1]):
            return cached[1]
    items = [item for item in _module_items() if _is_kornia_module(item[0])]
    if cached is not None and len(items) == len(cached[1]) and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(items, cached[1])):
        items = cached[1]  # another module was imported: the same kornia modules, the same list
    _kornia_modules_cache = (now, items)
    return items


class _Pass:
    """What one apply() or revert() pass reads for every kornia module and that nothing changes
    while the pass holds the lock: the attribute names of every target of the registry that may
    be kornia-scoped, and each module's bytecode routes to them. Installing a kornia-scoped entry
    refreshes the views of every kornia module (432 in kornia 0.8.2); reading these per module
    loaded the registry over a thousand times in one apply(), about a quarter of its time."""

    def __init__(self) -> None:
        self._scoped_names: Optional[Set[str]] = None
        # id(namespace) -> (namespace, the attributes asked for, their routes)
        self._routes: Dict[int, Tuple[Dict[str, Any], Set[str], Dict[str, Routes]]] = {}
        # The installed entries' attribute names -> every attribute name to read: one set object
        # per combination, so the cache above is checked by identity, not by comparing sets.
        self._attributes: Dict[FrozenSet[str], Set[str]] = {}
        self._variables: Optional[Tuple[Tuple[str, str], ...]] = None
        self._kornia_modules: Optional[Tuple[Any, List[Tuple[str, Any, Dict[str, Any]]]]] = None
        self._positions: Optional[Tuple[List[Any], Dict[int, int]]] = None

    def settings_variables(self) -> Tuple[Tuple[str, str], ...]:
        """The shim's environment variables (``KORNIA_HALFPATCH_*``), read once per pass:
        ``os.environ.items()`` decodes every variable of the process, for every fix."""
        if self._variables is None:
            self._variables = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_SETTINGS_PREFIX)))
        return self._variables

    def kornia_modules(self) -> List[Tuple[str, Any, Dict[str, Any]]]:
        """``_module_items()`` of the kornia modules, in ``sys.modules`` order (read again in
        the pass when a module was imported since: an install may import one)."""
        now = _BindingIndex._modules_now()
        if self._kornia_modules is None or self._kornia_modules[0] != now:
            self._kornia_modules = (now, _kornia_module_items())
        return self._kornia_modules[1]

    def kornia_modules_among(self, ids: Iterable[int]) -> List[Tuple[str, Any, Dict[str, Any]]]:
        """The kornia modules whose id is in ``ids``, in ``sys.modules`` order."""
        modules = self.kornia_modules()
        if self._positions is None or self._positions[0] is not modules:
            self._positions = (modules, {id(module): index for index, (_, module, _) in enumerate(modules)})
        positions = self._positions[1]
        return [modules[index] for index in sorted({positions[key] for key in ids if key in positions})]

    def modules_reaching(self, entries: List[_Installed]) -> Set[int]:
        """The ids of the kornia modules whose code reaches any of the entries' attributes by
        some route (``_reaches_any``), or of every kornia module if one attribute is not among
        the registry's scoped names (an entry of a stand-in fix)."""
        global _reaching_modules
        attributes = frozenset(entry.attribute for entry in entries)
        modules = self.kornia_modules()
        names = self.scoped_names()
        if not attributes.issubset(names):
            return {id(module) for _, module, _ in modules}
        # Kept across passes: a function of the modules' code and the registry's scoped names.
        if _reaching_modules is None or _reaching_modules[0] is not modules or _reaching_modules[1] is not names:
            reaching: Dict[int, FrozenSet[str]] = {}
            for _, module, namespace in modules:
                reached = _reached(namespace, names)
                if reached:
                    reaching[id(module)] = reached
            _reaching_modules = (modules, names, reaching)
        return {key for key, reached in _reaching_modules[2].items() if not attributes.isdisjoint(reached)}

    def scoped_names(self) -> Set[str]:
        if self._scoped_names is None:
            try:
                self._scoped_names = _registry_scoped_attribute_names(_registry())
            except Exception:  # noqa: BLE001 - the installed entries alone then
                self._scoped_names = set()
        return self._scoped_names

    def routes(self, namespace: Dict[str, Any], entries: List[_Installed]) -> Dict[str, Routes]:
        """``_routes_by_attribute`` of every scoped attribute name (the registry's and the
        installed entries')."""
        asked = frozenset(entry.attribute for entry in entries)
        attributes = self._attributes.get(asked)
        if attributes is None:
            attributes = self._attributes[asked] = self.scoped_names() | asked
        cached = self._routes.get(id(namespace))
        if cached is not None and cached[0] is namespace and cached[1] is attributes:
            return cached[2]
        routes = _routes_by_attribute(namespace, attributes)
        self._routes[id(namespace)] = (namespace, attributes, routes)
        return routes


_passes = threading.local()  # .active: the pass this thread runs, if any


@contextlib.contextmanager
def _pass() -> Iterator[_Pass]:
    """The pass of an apply() or revert() (the same one for a nested call: the deferred apply()
    fired by an import that a pass's own resolving triggered)."""
    active = getattr(_passes, "active", None)
    if active is not None:
        yield active
        return
    _passes.active = run = _Pass()
    try:
        yield run
    finally:
        _passes.active = None


def _current_pass() -> _Pass:
    """The pass running in this thread, or a pass for one call (a kornia module imported later)."""
    active = getattr(_passes, "active", None)
    return active if active is not None else _Pass()


def _rebind_kornia_aliases(
    entry: _Installed, module_name: str, module: Any, namespace: Dict[str, Any], aliases: Optional[Iterable[str]] = None
) -> List[str]:
    """Point one kornia module's own bindings of the original (``from torch.nn.functional import
    grid_sample``) at ``entry.replacement``: the attribute names, if the caller's binding index
    already knows them, else found here."""
    done = []
    if aliases is None:
        aliases = [attribute for attribute, value in list(namespace.items()) if value is entry.original]
    for attribute in aliases:
        if namespace.get(attribute) is entry.original:
            setattr(module, attribute, entry.replacement)
            entry.aliases.append((module, attribute))
            done.append(f"{module_name}.{attribute}")
    return done


def _refresh_views(
    module_name: str, module: Any, namespace: Dict[str, Any], scoped: Optional[List[Tuple[str, _Installed]]] = None
) -> List[Tuple[str, List[_Installed]]]:
    """Make each global of one kornia module through which its code reaches a kornia-scoped
    original (``F.grid_sample``, ``torch.nn.functional.conv2d``: routes read from the bytecode)
    hold the view of the real module with every such replacement installed now, and every global
    no installed entry needs any more hold its real module again. Returns what was (re)bound,
    each with the entries its view carries. ``scoped``: ``_kornia_scoped_entries()``, if the
    caller has it."""
    entries = [entry for _, entry in (_kornia_scoped_entries() if scoped is None else scoped)]
    bindings = _view_bindings.get(id(module), {})
    if not entries and not bindings:
        return []
    if not bindings and not _reaches_any(namespace, entries):
        return []  # most kornia modules: their code reaches no scoped original, and holds no view
    routes = _current_pass().routes(namespace, entries) if entries else {}
    # The real module behind each global (a global holding our view stands for what it replaced).
    real: Dict[str, Any] = {}
    for name, binding in list(bindings.items()):
        if namespace.get(name) is binding.view:
            real[name] = binding.was
        else:  # rebound by someone else since: theirs now, not ours to restore
            del bindings[name]
    wanted: Dict[str, Overrides] = {}
    carried: Dict[str, List[_Installed]] = {}
    for entry in entries:
        for root, chain in sorted(routes.get(entry.attribute, ())):
            value = real.get(root, namespace.get(root))
            holder = value
            for name in chain:
                holder = getattr(holder, name, None) if inspect.ismodule(holder) else None
            if not inspect.ismodule(value) or holder is not entry.parent:
                continue  # not a route to the original
            wanted.setdefault(root, {})[(chain, entry.attribute)] = entry.replacement
            carried.setdefault(root, []).append(entry)
    done: List[Tuple[str, List[_Installed]]] = []
    for root in sorted(set(wanted) | set(bindings)):
        binding = bindings.get(root)
        if root not in wanted:
            setattr(module, root, binding.was)
            del bindings[root]
            continue
        base = real.get(root, namespace.get(root))
        view = _module_view(base, wanted[root])
        if binding is not None and binding.view is view:
            continue
        setattr(module, root, view)
        bindings[root] = _ViewBinding(module, root, base, view)
        done.append((f"{module_name}.{root} (view of {base.__name__})", carried[root]))
    if bindings:
        _view_bindings[id(module)] = bindings
    else:
        _view_bindings.pop(id(module), None)
    if not entries:
        _view_cache.clear()
    return done


def _sync_views(parent: Any, attribute: str, was: Any, now: Any) -> None:
    """A view is a snapshot of its real module: when another fix replaces (or restores) an
    attribute on the real module itself (``grid_sample_everywhere=True``), every view of that
    module that still shows the old value shows the new one, as the real module does."""
    for module, view in list(_view_cache.values()):
        if module is parent and view.__dict__.get(attribute) is was:
            view.__dict__[attribute] = now


def _refresh_all_views() -> None:
    """``_refresh_views`` over every kornia module that holds a view, after an entry was removed:
    the views drop its replacement and keep the other fixes' (or give the real module back)."""
    scoped = _kornia_scoped_entries()
    for bindings in list(_view_bindings.values()):
        module = next(iter(bindings.values())).module
        _credit(_refresh_views(module.__name__, module, module.__dict__, scoped), scoped=scoped)
    if not scoped:
        _view_cache.clear()


def _credit(
    done: List[Tuple[str, List[_Installed]]],
    installing: Optional[str] = None,
    scoped: Optional[List[Tuple[str, _Installed]]] = None,
) -> List[str]:
    """Record what a refresh rebound in the status of each fix whose entry the view carries;
    return the lines for the fix being installed (whose status is not registered yet).
    ``scoped``: ``_kornia_scoped_entries()``, if the caller has it."""
    if not done:
        return []
    owner = {id(entry): name for name, entry in (_kornia_scoped_entries() if scoped is None else scoped)}
    lines = []
    for line, entries in done:
        for name in sorted({owner.get(id(entry)) for entry in entries} - {None}):
            if name == installing:
                lines.append(line)
                continue
            status = _statuses.get(name)
            if status is not None and line not in status.rebound:
                status.rebound.append(line)
    return lines


def _kornia_scoped_entries() -> List[Tuple[str, _Installed]]:
    return [(name, e) for name, entries in _installed.items() for e in entries if e.scope == SCOPE_KORNIA]


def kornia_scoped_replacement(module: str, qualname: str) -> Any:
    """The installed kornia-scoped replacement of ``module.qualname``, or None (read without the
    lock: pickle calls this from any thread, possibly while another holds the lock)."""
    for entries in list(_installed.values()):
        for entry in list(entries):
            if entry.scope != SCOPE_KORNIA:
                continue
            if _home_name(entry.original, entry.path) == (module, qualname):
                return entry.replacement
    return None


def _home_name(original: Any, path: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """Where a fresh process finds ``original``: its own module and qualified name when they
    resolve to it, else the target's path (torch's builtin ``conv2d`` calls itself
    ``torch._VariableFunctionsClass.conv2d``, which no module holds under that name)."""
    module, qualname = getattr(original, "__module__", None), getattr(original, "__qualname__", None)
    if module is not None and qualname is not None:
        try:
            obj: Any = sys.modules.get(module) or importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            if obj is original:
                return module, qualname
        except Exception:  # noqa: BLE001 - an unresolvable name falls back to the target's path
            pass
    if path is not None and ":" in path:
        home, _, attribute = path.partition(":")
        return home, attribute
    return module, qualname


def _set_pickle_reference(replacement: Any, original: Any, scope: str, path: Optional[str] = None) -> None:
    """Where pickle finds a replacement: at the original's name when it replaces the original
    there, at a ``kornia_halfpatch._scoped`` attribute when it is kornia-scoped (the original's
    home keeps the original, so its name cannot resolve to the replacement; see _scoped)."""
    if not isinstance(replacement, types.FunctionType):
        return
    module, qualname = getattr(original, "__module__", None), getattr(original, "__qualname__", None)
    if module is None or qualname is None:
        return
    if scope == SCOPE_KORNIA:
        from ._scoped import reference_name

        home, name = _home_name(original, path)
        replacement.__module__, replacement.__qualname__ = "kornia_halfpatch._scoped", reference_name(home, name)
    else:
        replacement.__module__, replacement.__qualname__ = module, qualname


@_outside_compiler
def _on_kornia_module_executed(module: Any) -> None:
    with _lock:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            return
        for fix_name, entry in _kornia_scoped_entries():
            done = _rebind_kornia_aliases(entry, module.__name__, module, namespace)
            status = _statuses.get(fix_name)
            if status is not None:
                status.rebound.extend(done)
        _credit(_refresh_views(module.__name__, module, namespace))


class _NotifyingLoader:
    """Runs the real loader, then tells the engine that a kornia module has executed."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # The module's code sees its real loader (resources, get_source), not this one.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        self._loader.exec_module(module)
        _on_kornia_module_executed(module)


class _KorniaImportWatcher(importlib.abc.MetaPathFinder):
    """``sys.meta_path`` finder: while a kornia-scoped target is installed, kornia modules are
    loaded through ``_NotifyingLoader``. It finds nothing itself; it asks the finders after it."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not _is_kornia_module(fullname) or not _kornia_scoped_entries():
            return None
        busy = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module") or isinstance(loader, _NotifyingLoader):
            return spec
        spec.loader = _NotifyingLoader(loader)
        return spec


_import_watcher = _KorniaImportWatcher()


def _watch_kornia_imports() -> None:
    if _import_watcher not in sys.meta_path:
        sys.meta_path.insert(0, _import_watcher)


def _unwatch_kornia_imports() -> None:
    if not _kornia_scoped_entries() and _import_watcher in sys.meta_path:
        sys.meta_path.remove(_import_watcher)


# --------------------------------------------------------------------------------------------
# Resolving and installing


def _resolve(target: Target) -> Tuple[Optional[Tuple[Any, str, Any, str]], str]:
    errors = []
    for candidate in target.candidates:
        module_name, _, path = candidate.partition(":")
        try:
            parent, attribute, original = wrapt.resolve_path(module_name, path)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{candidate}: {exc.__class__.__name__}")
            continue
        return (parent, attribute, original, candidate), ""
    return None, "; ".join(errors)


# (target, original) -> the answer of _shape_problem: a function of the original's signature,
# read in every gate (two applies per testing.isolated() block). Both kept alive with it.
_shape_problems: Dict[Tuple[int, int], Tuple[Target, Any, Any, Optional[str]]] = {}


def _shape_problem(target: Target, original: Any) -> Optional[str]:
    if target.expects_parameters is None:
        return None
    key = (id(target), id(original))
    known = _shape_problems.get(key)
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    # A plain function's parameter names are its code object's: the answer is kept while the
    # original has the same one (and no __signature__ or __wrapped__ to read them from instead).
    code = getattr(function, "__code__", None)
    if code is None or hasattr(function, "__signature__") or hasattr(function, "__wrapped__"):
        return _read_shape_problem(target, original)
    if known is not None and known[0] is target and known[1] is original and known[2] is code:
        return known[3]
    problem = _read_shape_problem(target, original)
    _shape_problems[key] = (target, original, code, problem)
    return problem


def _read_shape_problem(target: Target, original: Any) -> Optional[str]:
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    try:
        names = tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return f"{target.label} has no inspectable signature"
    if names[: len(target.expects_parameters)] != target.expects_parameters:
        return f"{target.label} has parameters {names}, expected {target.expects_parameters}"
    return None


def _forget_torchscript_class(cls: Any) -> None:
    """``torch.jit.script`` caches one compiled type per ``nn.Module`` class and reuses its methods
    for later instances, so a class scripted before a method was swapped would keep compiling the
    old method. Forget the class whenever one of its methods is replaced or restored."""
    torch_jit = sys.modules.get("torch.jit._recursive")
    store = getattr(getattr(torch_jit, "concrete_type_store", None), "type_store", None)
    if isinstance(store, dict):  # private API: absent in some torch, nothing cached then
        store.pop(cls, None)


def _signature(function: Any) -> inspect.Signature:
    """The original's signature, read once while it stays the same (every apply() gives each
    hand-written replacement its original's signature again: two per isolated() block)."""
    from ._codegen import signature_of

    return signature_of(function)


def _adopt_identity(replacement: Any, original: Any) -> None:
    """Give a replacement the original's name, qualified name, module and docstring.

    Pickle stores a function by reference (``module`` + ``qualname``) and on loading resolves the
    name to whatever the loading process has there (patched or not); with a closure's own
    qualified name (``build_x.<locals>.x``) pickling failed ("Can't pickle local object"), and so
    did every ``functools.partial`` of a patched function sent to a process pool.
    """
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    if not isinstance(replacement, types.FunctionType):
        return
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(function, attribute, None)
        if value is not None:
            setattr(replacement, attribute, value)
    # inspect.signature(replacement) == inspect.signature(original): the same parameters, but the
    # original's annotation objects (the fix module's may be strings, or a release's narrower
    # type). Only where the parameters agree, so that nothing binds arguments differently.
    # TorchScript reads the annotations of the replacement's own source, not this.
    try:
        signature = _signature(function)
        own = _parameters_shape(replacement)
    except (TypeError, ValueError):
        return
    if own == [(p.name, p.kind, p.default) for p in signature.parameters.values()]:
        replacement.__signature__ = signature


# A replacement's code object -> (its defaults, its keyword defaults, (name, kind, default) of its
# parameters): hand-written builders make a new function per apply() from the same code.
_shapes: Dict[types.CodeType, Tuple[Any, Any, List[Tuple[str, Any, Any]]]] = {}


def _parameters_shape(function: Any) -> List[Tuple[str, Any, Any]]:
    """``(name, kind, default)`` of each parameter of ``inspect.signature(function)``."""
    if "__signature__" in function.__dict__ or "__wrapped__" in function.__dict__:
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]
    code, defaults, keyword_defaults = function.__code__, function.__defaults__ or (), function.__kwdefaults__ or {}
    known = _shapes.get(code)
    if (
        known is not None
        and len(known[0]) == len(defaults)
        and all(a is b for a, b in zip(known[0], defaults))
        and known[1].keys() == keyword_defaults.keys()
        and all(known[1][key] is value for key, value in keyword_defaults.items())
    ):
        return known[2]
    shape = [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]
    _shapes[code] = (tuple(defaults), dict(keyword_defaults), shape)
    return shape


# Generated replacements of table rows, by (row target, original): a row's wrapper depends on
# nothing else, so re-applying (after every unpatched() block) reuses it instead of generating
# and compiling its source again. Hand-written builders may read configure()'d options: rebuilt.
_built: Dict[Tuple[int, int], Tuple[Target, Any, Any]] = {}


def _build(target: Target, original: Any) -> Any:
    key = (id(target), id(original))
    cached = _built.get(key)
    if cached is not None and cached[0] is target and cached[1] is original:
        return cached[2]
    replacement = target.build(original)
    _adopt_identity(replacement, original)
    if target.row is not None:
        _built[key] = (target, original, replacement)
    return replacement


def _install(
    fix: Fix,
    resolved: List[Optional[Resolved]],
    status: FixStatus,
    index: "_BindingIndex",
    replacements: Optional[List[Any]] = None,
) -> List[str]:
    """Install every resolved target of ``fix`` (with the ``replacements`` built for them, if
    given, else built here); returns the stale references to warn about.

    All or nothing: if building or installing any target raises, what was installed so far is
    rolled back (every alias, view and class attribute) before the exception propagates.
    """
    entries: List[_Installed] = []
    _installed[fix.name] = entries  # first, so that a rollback finds a half-done install
    # A class that only inherits a method another target of this fix patches where it is defined
    # (kornia 0.7's PolicyAugmentBase.forward is ImageSequentialBase.forward) gets the base's
    # replacement by inheritance: a copy set on the subclass would carry the base's qualified
    # name, and pickle would find the base's function under it, not the copy.
    defined_in_a_target = {
        id(found[2]) for found in resolved
        if found is not None and inspect.isclass(found[0]) and found[1] in found[0].__dict__
    }
    try:
        for position, (target, found) in enumerate(zip(fix.targets, resolved)):
            if found is None:
                continue
            parent, attribute, original, path = found
            if inspect.isclass(parent) and attribute not in parent.__dict__ and id(original) in defined_in_a_target:
                continue
            replacement = replacements[position] if replacements is not None else _build(target, original)
            scope = target.scope() if callable(target.scope) else target.scope
            _set_pickle_reference(replacement, original, scope, path)
            entry = _Installed(parent, attribute, original, replacement, path, scope=scope)
            if scope == SCOPE_KORNIA and not entry.on_module:
                raise TypeError(f"{path}: scope {SCOPE_KORNIA!r} is for module-level functions")
            entries.append(entry)
            _originals_by_replacement[id(replacement)] = original
            index.relate(original, replacement)
            if scope == SCOPE_KORNIA:
                # The home module (torch) keeps its function; kornia's code gets the replacement.
                aliases: Dict[int, List[str]] = {}
                for _, module, name in index.bindings_of(original):
                    aliases.setdefault(id(module), []).append(name)
                scoped = _kornia_scoped_entries()  # the same for every module of this loop
                # Only the kornia modules that bind the original, hold a view, or whose code
                # reaches a scoped attribute can change (a few dozen of 432 in kornia 0.8.2).
                concerned = _current_pass().modules_reaching([e for _, e in scoped])
                concerned.update(aliases)
                concerned.update(_view_bindings)
                for module_name, module, namespace in _current_pass().kornia_modules_among(concerned):
                    status.rebound.extend(
                        _rebind_kornia_aliases(entry, module_name, module, namespace, aliases.get(id(module), ()))
                    )
                    # One view per module global for every scoped entry installed so far.
                    done = _refresh_views(module_name, module, namespace, scoped)
                    status.rebound.extend(_credit(done, installing=fix.name, scoped=scoped))
                _watch_kornia_imports()
            else:
                if inspect.isclass(parent):
                    entry.inherited = attribute not in parent.__dict__
                    if entry.inherited:
                        # The base class keeps its own function under the original's qualified
                        # name: this class's copy is named after this class, so that pickle (by
                        # reference) finds it where it is installed.
                        replacement.__module__ = parent.__module__
                        replacement.__qualname__ = f"{parent.__qualname__}.{attribute}"
                setattr(parent, attribute, replacement)
                if inspect.isclass(parent):
                    _forget_torchscript_class(parent)
                else:
                    _sync_views(parent, attribute, original, replacement)
            if entry.on_module and scope != SCOPE_KORNIA:
                for module_name, module, name in index.bindings_of(original):
                    if _is_kornia_module(module_name):
                        setattr(module, name, replacement)
                        entry.aliases.append((module, name))
                        status.rebound.append(f"{module_name}.{name}")
                    else:
                        status.stale.append(f"{module_name}.{name}")
            status.targets.append(path)
    except BaseException:
        _uninstall(fix.name)
        raise
    fresh = [ref for ref in status.stale if ref not in _warned_stale]
    _warned_stale.update(fresh)
    return fresh


def _uninstall(name: str, index: Optional[_BindingIndex] = None) -> None:
    entries = _installed.pop(name, [])
    if index is None:
        index = _BindingIndex(entry.replacement for entry in entries)
    for entry in reversed(entries):
        if entry.on_module:
            # Restore every module that holds the replacement, including those imported after
            # apply(), not only the aliases we rebound ourselves.
            for _, module, attribute in index.bindings_of(entry.replacement):
                setattr(module, attribute, entry.original)
            if entry.scope != SCOPE_KORNIA:  # a kornia-scoped one leaves the views in _refresh_all_views
                _sync_views(entry.parent, entry.attribute, entry.replacement, entry.original)
        elif entry.parent.__dict__.get(entry.attribute) is entry.replacement:
            if entry.inherited:
                delattr(entry.parent, entry.attribute)
            else:
                setattr(entry.parent, entry.attribute, entry.original)
            _forget_torchscript_class(entry.parent)
        _originals_by_replacement.pop(id(entry.replacement), None)
    if any(entry.scope == SCOPE_KORNIA for entry in entries):
        # The views lose this fix's replacements and keep every other fix's.
        _refresh_all_views()
    _installed_options.pop(name, None)
    _unwatch_kornia_imports()


Resolved = Tuple[Any, str, Any, str]  # (parent, attribute, original, "module:path")

# Probe findings by (fix, kornia version, originals, the fix's apply() options, the shim's
# environment variables): apply() runs again after every unpatched() block and patched() scope,
# and a probe's answer for the same originals does not change within a process, unless it reads
# a setting the user can change at run time (filters_conv_hang's KORNIA_HALFPATCH_FP16_CONV_HANG):
# every KORNIA_HALFPATCH_* variable and option is part of the key, so a changed setting is
# probed again. Failures are never cached.
FindingKey = Tuple[int, Optional[str], Tuple[int, ...], Tuple[Tuple[str, str], ...], Tuple[Tuple[str, str], ...]]
_findings: Dict[FindingKey, Tuple[Fix, Tuple[Any, ...], Finding]] = {}

_SETTINGS_PREFIX = "KORNIA_HALFPATCH_"  # every environment variable of the shim and its fixes


def _settings(given: Optional[Dict[str, Any]]) -> Tuple[Tuple[Tuple[str, str], ...], Tuple[Tuple[str, str], ...]]:
    """What a probe may read besides the originals: the shim's environment variables, and the
    apply() options given to the fix (by value; options are strings and booleans)."""
    variables = _current_pass().settings_variables()
    options = tuple(sorted((k, repr(v)) for k, v in (given or {}).items()))
    return variables, options


def _gate(
    fix: Fix, kornia_version: Optional[str], given: Optional[Dict[str, Any]] = None
) -> Tuple[Optional[List[Optional[Resolved]]], Finding]:
    """Return (resolved targets, finding); resolved is ``None`` unless the fix goes in.
    ``given``: the apply() options configured into the fix."""
    if kornia_version is None:
        return None, Finding(Verdict.PENDING, "kornia is not installed")
    torch_version = environment.torch_version()
    if torch_version is not None and environment.parse_version(torch_version) < environment.OLDEST_TORCH:
        oldest = ".".join(map(str, environment.OLDEST_TORCH))
        return None, Finding(
            Verdict.UNSUPPORTED, f"unsupported torch {torch_version}: kornia-halfpatch is tested on torch >= {oldest}"
        )
    version = environment.parse_version(kornia_version)
    if version >= environment.parse_version(fix.upstream):
        return None, Finding(Verdict.UPSTREAM, f"already fixed upstream (kornia {kornia_version} >= {fix.upstream})")
    resolved: List[Optional[Resolved]] = []
    for target in fix.targets:
        found, why = _resolve(target)
        if found is None and not target.optional:
            return None, Finding(Verdict.ABSENT, f"target absent in kornia {kornia_version}: {why}")
        if found is not None:
            problem = _shape_problem(target, found[2])
            if problem is not None:
                return None, Finding(Verdict.UNSUPPORTED, f"unsupported kornia {kornia_version}: {problem}")
        resolved.append(found)
    if all(found is None for found in resolved):
        if fix.when_absent is not None:
            return None, fix.when_absent()
        return None, Finding(Verdict.ABSENT, f"target absent in kornia {kornia_version}")
    originals = [found[2] if found else None for found in resolved]
    key = (id(fix), kornia_version, tuple(id(original) for original in originals), *_settings(given))
    cached = _findings.get(key)
    # The fix and originals are kept with the finding, so their ids cannot be reused meanwhile.
    if fix.probe_cache and cached is not None and cached[0] is fix and all(a is b for a, b in zip(cached[1], originals)):
        finding = cached[2]
    else:
        finding = fix.probe(originals)
        if fix.probe_cache:
            _findings[key] = (fix, tuple(originals), finding)
    if not finding.needed:
        return None, finding
    known = kornia_version in environment.KNOWN_KORNIA_RELEASES
    return resolved, Finding(
        Verdict.APPLIED, "bug present" if known else f"bug confirmed by probe on unknown kornia {kornia_version}"
    )


def _gate_rows(fix: Fix, resolved: Optional[List[Optional[Resolved]]]) -> Dict[int, Finding]:
    """Ask each resolved target's own gate (the kernel rows of torch_ops); a target found not
    needed is taken out of ``resolved`` (not built, not installed). Gates cache their answers."""
    findings: Dict[int, Finding] = {}
    if resolved is None:
        return findings
    for index, target in enumerate(fix.targets):
        if target.gate is not None and resolved[index] is not None:
            findings[index] = target.gate()
            if not findings[index].needed:
                resolved[index] = None
    return findings


def _row_statuses(
    fix: Fix, resolved: Optional[List[Optional[Resolved]]], finding: Finding, gated: Optional[Dict[int, Finding]] = None
) -> List[RowStatus]:
    """One verdict per target: applied with its numerical reason, absent, not needed by its own
    gate, or the fix's verdict."""
    rows = []
    gated = gated or {}
    for index, target in enumerate(fix.targets):
        found = resolved[index] if resolved is not None else None
        row_finding = gated.get(index)
        if resolved is None:
            rows.append(RowStatus(target.candidates[0], finding.verdict, finding.reason))
        elif row_finding is not None and not row_finding.needed:
            rows.append(RowStatus(target.candidates[0], row_finding.verdict, f"{target.reason}; {row_finding.reason}"))
        elif found is None:
            rows.append(RowStatus(target.candidates[0], Verdict.ABSENT, "absent in this release (optional)"))
        elif row_finding is not None:
            rows.append(RowStatus(found[3], Verdict.APPLIED, f"{target.reason}; {row_finding.reason}"))
        else:
            rows.append(RowStatus(found[3], Verdict.APPLIED, target.reason or finding.reason))
    return rows


def _check_options(options: Dict[str, Any], selection: Tuple[str, ...]) -> None:
    """The caller's own settings: unknown option names and bad values (given to apply() or set
    in a fix's environment variable) raise, clearly, in apply() itself, before anything is
    patched or deferred."""
    if not options and not any(environment.env_set(name) for name in environment.FIX_OPTION_ENV_VARS):
        return  # nothing to check: no fix module (and so no torch) is imported for nothing
    registry = _registry()
    accepted = {option for fix in registry for option in fix.options}
    for option in options:
        if option not in accepted:
            raise TypeError(
                f"unknown kornia_halfpatch option {option!r}; fixes take: {', '.join(sorted(accepted)) or 'none'}"
            )
    for fix in registry:
        if fix.name in selection and fix.validate_options is not None:
            fix.validate_options({key: value for key, value in options.items() if key in fix.options})


@dataclass
class _Evaluated:
    """A fix gated, probed and built, not yet installed."""

    fix: Fix
    given: Dict[str, Any]
    status: FixStatus
    resolved: Optional[List[Optional[Resolved]]] = None
    replacements: List[Any] = field(default_factory=list)


def _failed(fix: Fix, exc: BaseException, notes: List[str], what: str) -> FixStatus:
    why = _describe_exception(exc)
    logger.warning("%s skipped: its %s failed: %s", fix.name, what, why, exc_info=True)
    notes.append(f"kornia_halfpatch: {fix.name} skipped: its {what} failed ({why})")
    failed = FixStatus(fix.name, Verdict.FAILED, f"failed: {why}")
    failed.rows = [RowStatus(t.candidates[0], Verdict.FAILED, failed.reason) for t in fix.targets]
    return failed


def _evaluate(fix: Fix, given: Dict[str, Any], kornia_version: Optional[str], notes: List[str]) -> _Evaluated:
    """Configure, gate, probe and build one fix in the probes' clean torch state, patching
    nothing. Never raises (but for KeyboardInterrupt and the like): a failure leaves the fix out
    with the exception in its status, a log record and a warning."""
    unknown = kornia_version is not None and kornia_version not in environment.KNOWN_KORNIA_RELEASES
    from ._isolation import probe_state

    try:
        with probe_state():
            if fix.configure is not None:
                fix.configure(given)
            resolved, finding = _gate(fix, kornia_version, given)
            gated = _gate_rows(fix, resolved)
            status = _status(fix.name, finding)
            status.rows = _row_statuses(fix, resolved, finding, gated)
            replacements = []
            if resolved is not None:
                # Builders may probe too (the grid_sample kernel, the pyramid's level rule).
                replacements = [
                    _build(target, found[2]) if found is not None else None
                    for target, found in zip(fix.targets, resolved)
                ]
    except Exception as exc:  # noqa: BLE001 - the shim must not break the program it runs in
        return _Evaluated(fix, given, _failed(fix, exc, notes, "probe or install"))
    if resolved is None:
        if unknown and finding.verdict is not Verdict.UPSTREAM:
            notes.append(f"kornia_halfpatch: {fix.name} skipped: {finding.reason}")
        logger.info("%s skipped: %s", fix.name, finding.reason)
    return _Evaluated(fix, given, status, resolved, replacements)


def _install_evaluated(evaluated: _Evaluated, notes: List[str], index: _BindingIndex) -> FixStatus:
    """Install one evaluated fix; a failing install is rolled back and reported, never raised."""
    fix, status = evaluated.fix, evaluated.status
    try:
        stale = _install(fix, evaluated.resolved, status, index, evaluated.replacements)
        _installed_options[fix.name] = evaluated.given
    except Exception as exc:  # noqa: BLE001 - rolled back by _install; the other fixes stay
        return _failed(fix, exc, notes, "probe or install")
    logger.info("%s applied to %s", fix.name, ", ".join(status.targets))
    for ref in stale:
        notes.append(
            f"{ref} was bound before kornia_halfpatch.apply() and still holds the unpatched "
            f"function; import it after apply(), or through its kornia module"
        )
    return status


@contextlib.contextmanager
def _one_pass() -> Iterator[None]:
    """Install or revert every fix as one pass that other threads do not interleave with.

    Between two fixes' installs a thread calling kornia ran a mixture (measured: 126-472 mixed
    answers of 8 threads x homography_warp in bfloat16 while another thread applied/reverted,
    when installs were spread between probes). Probes now run before any patching, and the
    patching itself (attribute assignments and module scans, no I/O, no torch op) runs with the
    interpreter's thread switch interval raised, so the GIL is not handed to another thread
    mid-pass. Restored afterwards; a build without a GIL gets the tight pass alone.
    """
    previous = sys.getswitchinterval()
    try:
        sys.setswitchinterval(max(previous, 1.0))
    except Exception:  # noqa: BLE001
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            sys.setswitchinterval(previous)


def _apply_locked(selection: Tuple[str, ...], off: Dict[str, str], options: Optional[Dict[str, Any]] = None) -> None:
    with _pass():
        _apply_pass(selection, off, options)


def _apply_pass(selection: Tuple[str, ...], off: Dict[str, str], options: Optional[Dict[str, Any]] = None) -> None:
    kornia_version = environment.kornia_version()
    notes: List[str] = []
    registry = _registry()
    index = _shared_index if _shared_index is not None else _BindingIndex()
    # First every selected fix is gated, probed and built, patching nothing...
    evaluated: List[_Evaluated] = []
    for fix in registry:
        given = {key: value for key, value in (options or {}).items() if key in fix.options}
        if fix.name in _installed:
            if not given or fix.name not in selection or given == _installed_options.get(fix.name):
                continue
            _uninstall(fix.name)  # asked for with other options: reinstall with those
        if fix.name not in selection:
            _statuses.setdefault(fix.name, FixStatus(fix.name, Verdict.OFF, off.get(fix.name, "not selected")))
            continue
        evaluated.append(_evaluate(fix, given, kornia_version, notes))
    # Every original this apply() rebinds, known before the index's one scan (the first lookup,
    # in the first install): only the targets that go in, not those their gates left out.
    for item in evaluated:
        for found in item.resolved or ():
            if found is not None:
                index.want(found[2])
    # ... then all of them go in, in one tight pass.
    with _one_pass():
        for item in evaluated:
            if item.resolved is None:
                _statuses[item.fix.name] = item.status
            else:
                _statuses[item.fix.name] = _install_evaluated(item, notes, index)
    # Outside the probes' state, where the caller's warning filters apply again.
    for note in notes:
        _warn(note, stacklevel=4)


@_outside_compiler
def _on_kornia_imported(module: Any) -> None:
    """The deferred apply(), run by wrapt's post-import hook inside the user's ``import kornia``:
    whatever happens here must not make that import fail."""
    global _pending_selection
    try:
        with _lock:
            if _pending_selection is None:
                return  # revert() ran before kornia was imported
            selection, _pending_selection = _pending_selection, None
            options = dict(_pending_options)
            _pending_options.clear()
            _apply_locked(selection, {}, options)
    except Exception as exc:  # noqa: BLE001
        logger.warning("deferred apply() failed: %s", _describe_exception(exc), exc_info=True)
        _warn(f"kornia_halfpatch: the deferred apply() failed ({_describe_exception(exc)}); kornia is unpatched")


# --------------------------------------------------------------------------------------------
# Public API (re-exported by kornia_halfpatch/__init__.py)


@_outside_compiler
def apply(only: Optional[Iterable[str]] = None, exclude: Optional[Iterable[str]] = None, **options: Any) -> Report:
    """Apply every fix needed by the installed kornia/torch (or the chosen ones).

    Idempotent and thread-safe. If kornia is not imported yet, the fixes go in when it is.
    ``KORNIA_HALFPATCH_DISABLE=1`` turns the shim off whatever the code asks;
    ``KORNIA_HALFPATCH_FIXES`` / ``KORNIA_HALFPATCH_EXCLUDE`` (comma-separated names) choose
    fixes when ``only`` / ``exclude`` are not given. Keyword ``options`` go to the fixes that
    declare them (e.g. ``grid_sample_workaround=...``); an installed fix given different options
    is reinstalled with them.
    """
    with _lock:
        _apply_without_report(only, exclude, options)
        return _report()


@_outside_compiler
def _apply_without_report(only: Optional[Iterable[str]], exclude: Optional[Iterable[str]], options: Dict[str, Any]) -> None:
    """``apply()`` but for its report (whose fixes' status lines run probes of their own): for
    callers that discard it, as kornia_halfpatch.testing's restore after every block."""
    global _pending_selection, _import_hook_registered
    selection, off = _select(only, exclude)
    _check_options(options, selection)
    with _lock:
        for name, reason in off.items():
            # A narrower selection (apply(only=...), unpatched() restoring) must not overwrite
            # what an earlier apply() found out about the other fixes.
            if name not in _installed:
                _statuses.setdefault(name, FixStatus(name, Verdict.OFF, reason))
        if not selection:
            return
        if not environment.kornia_is_imported():
            if environment.kornia_version() is None:
                for name in selection:
                    _statuses[name] = FixStatus(name, Verdict.PENDING, "kornia is not installed")
                return
            pending = set(_pending_selection or ()) | set(selection)
            _pending_selection = tuple(name for name in fix_names() if name in pending)
            _pending_options.update(options)
            if not _import_hook_registered:
                _import_hook_registered = True
                wrapt.register_post_import_hook(_on_kornia_imported, "kornia")
            return
        _apply_locked(selection, off, options)


@_outside_compiler
def revert(names: Optional[Iterable[str]] = None) -> None:
    """Undo the given fixes (all by default): every touched attribute is the original again."""
    global _pending_selection
    with _lock:
        chosen = _canonical(names) if names is not None else tuple(fix_names())
        for name in chosen:
            if name not in fix_names():
                raise ValueError(f"unknown kornia_halfpatch fix {name!r}; known fixes: {', '.join(fix_names())}")
        if _pending_selection is not None:
            remaining = tuple(n for n in _pending_selection if n not in chosen)
            _pending_selection = remaining or None
            if _pending_selection is None:
                _pending_options.clear()
        replacements = [e.replacement for n in chosen for e in _installed.get(n, ())]
        if _shared_index is not None:
            index = _shared_index
            for replacement in replacements:
                index.want(replacement)
        else:
            index = _BindingIndex(replacements)
        with _pass(), _one_pass():
            _revert_all(chosen, index)


# The binding index every revert() and apply() of a ``_one_index()`` block shares, if any.
_shared_index: Optional[_BindingIndex] = None


@contextlib.contextmanager
def _one_index(also: Iterable[Any] = ()) -> Iterator[None]:
    """Under the lock, the revert() and apply() calls of the block share one following binding
    index (one scan of every module for all of them, instead of one per call: 4 scans of about
    6 ms per testing.isolated() block). Nothing but the engine may rebind the originals or
    replacements of installed fixes while the block runs (kornia_halfpatch.testing's blocks
    call only revert() and apply()). ``also``: objects a later apply() of the block will look
    up (the originals of fixes it re-installs), found by the same scan."""
    global _shared_index
    with _lock:
        if _shared_index is not None:
            yield
            return
        index = _BindingIndex()
        index.follow()
        for obj in also:
            index.want(obj)
        for entries in _installed.values():
            for entry in entries:  # revert() and apply() want them all, class attributes too
                index.want(entry.original)
                index.want(entry.replacement)
                index.relate(entry.original, entry.replacement)
        _shared_index = index
        try:
            yield
        finally:
            _shared_index = None


def _revert_all(chosen: Tuple[str, ...], index: _BindingIndex) -> None:
    """Uninstall the chosen fixes, last installed first; one failing revert does not stop the rest."""
    for name in reversed(fix_names()):
        if name in chosen:
            try:
                _uninstall(name, index)
            except Exception as exc:  # noqa: BLE001 - revert the other fixes all the same
                logger.warning("revert of %s failed: %s", name, _describe_exception(exc), exc_info=True)
                _warn(f"kornia_halfpatch: revert of {name} failed ({_describe_exception(exc)})")
            _statuses.pop(name, None)


def applied_fixes() -> Tuple[str, ...]:
    with _lock:
        return tuple(name for name in fix_names() if name in _installed)


@contextlib.contextmanager
def patched(
    only: Optional[Iterable[str]] = None, exclude: Optional[Iterable[str]] = None, **options: Any
) -> Iterator[Report]:
    """Apply for the duration of a ``with`` block; afterwards only what this block added is undone
    (and fixes the block reinstalled with other ``options`` get their previous options back).

    Patching is process-global: other threads see the patched kornia while the block runs.
    """
    with _lock:
        before = set(applied_fixes())
        previous = {name: dict(_installed_options.get(name, {})) for name in before}
        report = apply(only, exclude, **options)
        added = [name for name in applied_fixes() if name not in before]
        changed = [name for name in before if name in _installed and _installed_options.get(name) != previous[name]]
    try:
        yield report
    finally:
        with _lock:
            revert(added)
            for name in changed:
                revert([name])
                _apply_without_report([name], None, previous[name])


@contextlib.contextmanager
def unpatched(names: Optional[Iterable[str]] = None) -> Iterator[None]:
    """Run a block on unpatched kornia (for patched-versus-unpatched comparisons), then restore."""
    with _lock:
        chosen = set(_canonical(names)) if names is not None else set(fix_names())
        removed = [name for name in applied_fixes() if name in chosen]
        options: Dict[str, Any] = {}
        for name in removed:
            options.update(_installed_options.get(name, {}))
        revert(removed)
    try:
        yield
    finally:
        if removed:
            _apply_without_report(removed, None, options)  # nobody reads this report


def get_original(obj: Any) -> Any:
    """The unpatched object behind a replacement installed by the shim (``obj`` itself otherwise)."""
    return _originals_by_replacement.get(id(obj), obj)


def is_patched(obj: Any) -> bool:
    return id(obj) in _originals_by_replacement


def _report() -> Report:
    probes: Dict[str, str] = {}
    if environment.kornia_is_imported():
        from .fixes import collect_probes

        probes = collect_probes()  # each line computed in the probes' state, failures reported
    statuses = {name: _statuses.get(name, FixStatus(name, Verdict.OFF, "not applied")) for name in fix_names()}
    if _pending_selection is not None:
        for name in _pending_selection:
            statuses[name] = FixStatus(name, Verdict.PENDING, "deferred until kornia is imported")
    return Report(
        kornia_version=environment.kornia_version(),
        torch_version=environment.torch_version(),
        fixes=statuses,
        probes=probes,
        deferred=_pending_selection is not None,
    )


@_outside_compiler
def status() -> Report:
    """Per fix: applied or not and why; versions; probe results; stale references (rescanned now)."""
    with _lock:
        index = _BindingIndex(e.original for entries in _installed.values() for e in entries)
        for name, entries in _installed.items():
            stale = []
            for entry in entries:
                if entry.on_module and entry.scope != SCOPE_KORNIA:
                    stale += [f"{m}.{a}" for m, _, a in index.bindings_of(entry.original) if not _is_kornia_module(m)]
            if name in _statuses:
                _statuses[name].stale = stale
        return _report()
