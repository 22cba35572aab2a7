"""The kornia scope: a replacement for another library's function (torch's ``grid_sample``)
seen by kornia's code only.

The function's home module is left alone; every kornia module global that *is* the function
gets the replacement, and every kornia module global through which kornia's code reaches it as
an attribute (``F.grid_sample``, ``nn.functional.grid_sample``,
``torch.nn.functional.grid_sample``, found in the functions' bytecode) is rebound to a module
*view*: a real ``types.ModuleType`` holding the same attributes, with the one on the path
swapped. Kornia modules imported later get the same treatment from a ``sys.meta_path`` finder
that runs the rebinding right after the module's code has executed.

Holds the views installed in kornia modules and the caches of the modules' bytecode routes.
"""

from __future__ import annotations

import contextlib
import dis
import hashlib
import importlib.abc
import inspect
import os
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from . import _probe_cache as probe_cache
from ._bindings import BindingIndex, is_kornia_module, module_items, modules_now
from ._installed import Entry, kornia_scoped_entries, lock, registry, status_of
from ._model import SCOPE_KORNIA, Fix, FixStatus
from ._probe_cache import OWN_VARIABLES
from ._safety import outside_compiler

SETTINGS_PREFIX = "KORNIA_HALFPATCH_"  # every environment variable of the shim and its fixes


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


def _routes_by_attribute(namespace: Dict[str, Any], attributes: Iterable[str], keep: bool = True) -> Dict[str, Routes]:
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
        known.update(_stored_routes(namespace, missing) if keep else _read_routes(namespace, missing))
    return {attribute: known[attribute] for attribute in attributes}


def _stored_routes(namespace: Dict[str, Any], attributes: Set[str], read: Optional[Dict[str, Routes]] = None) -> Dict[str, Routes]:
    """``_read_routes`` (or ``read``, the routes already read), kept on disk for the next process
    (``_probe_cache``) by the module's name and source file (path, modification time, size):
    the routes follow from its code."""
    source = namespace.get("__file__")
    compute = (lambda: _read_routes(namespace, attributes)) if read is None else (lambda: read)
    try:
        mtime, size = probe_cache.file_stamp(source)
        what = f"routes:{namespace['__name__']}:{source}:{mtime}:{size}:{','.join(sorted(attributes))}"
    except Exception:  # noqa: BLE001 - no source file to stamp (a namespace package, a test's module)
        return compute()
    return probe_cache.remembered(what, compute, _encode_routes, _decode_routes, by_settings=False)


def _keep_routes(namespace: Dict[str, Any], attributes: Iterable[str], routes: Dict[str, Routes]) -> None:
    """Keep routes read in this process (``_routes_by_attribute(keep=False)``) on disk."""
    attributes = set(attributes)
    _stored_routes(namespace, attributes, {attribute: routes[attribute] for attribute in attributes})


def _encode_routes(routes: Dict[str, Routes]) -> Dict[str, List[Any]]:
    return {attribute: sorted([root, list(chain)] for root, chain in found) for attribute, found in routes.items()}


def _decode_routes(stored: Any) -> Dict[str, Routes]:
    routes: Dict[str, Routes] = {}
    for attribute, found in stored.items():
        routes[attribute] = set()
        for root, chain in found:
            if not isinstance(root, str) or not all(isinstance(name, str) for name in chain):
                raise TypeError(root)
            routes[attribute].add((root, tuple(chain)))
    return routes


def _read_routes(namespace: Dict[str, Any], missing: Set[str]) -> Dict[str, Routes]:
    """The routes to each of ``missing``, read from the bytecode (see ``_routes_by_attribute``)."""
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
    return found


# id(namespace) -> (namespace, the attribute names read, those its code reaches by a route):
# the test most kornia modules fail in every install and revert, kept across passes.
_reaching_cache: Dict[int, Tuple[Dict[str, Any], Set[str], FrozenSet[str]]] = {}


def _reached(namespace: Dict[str, Any], attributes: Iterable[str]) -> FrozenSet[str]:
    """Which of ``attributes`` (and of the names read before) the code of a module reaches by
    some route."""
    cached = _reaching_cache.get(id(namespace))
    if cached is None or cached[0] is not namespace or any(attribute not in cached[1] for attribute in attributes):
        every = current_pass().scoped_names() | set(attributes)
        routes = _routes_by_attribute(namespace, every)
        cached = (namespace, every, frozenset(name for name, found in routes.items() if found))
        _reaching_cache[id(namespace)] = cached
    return cached[2]


def _reaches_any(namespace: Dict[str, Any], entries: List[Entry]) -> bool:
    """Whether the code of a module reaches any of the entries' attributes by some route."""
    reached = _reached(namespace, [entry.attribute for entry in entries])
    return bool(reached) and any(entry.attribute in reached for entry in entries)


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


# The kornia modules' ``module_items()`` as of ``sys.modules``' state then (its size, newest
# entry, and the kornia modules themselves, checked one by one): one list object per state, so
# that what is computed from it can be kept by identity.
_kornia_modules_cache: Optional[Tuple[Any, List[Tuple[str, Any, Dict[str, Any]]]]] = None
# (the _kornia_module_items() list, the scoped names set, id(module) -> scoped names its code reaches)
_reaching_modules: Optional[Tuple[List[Any], Set[str], Dict[int, FrozenSet[str]]]] = None


def _kornia_module_items() -> List[Tuple[str, Any, Dict[str, Any]]]:
    """``module_items()`` of the kornia modules, in ``sys.modules`` order; read again when a
    module was imported, removed or replaced since the last call."""
    global _kornia_modules_cache
    now = modules_now()
    cached = _kornia_modules_cache
    if cached is not None and cached[0] == now:
        modules = sys.modules
        if all(modules.get(name) is module for name, module, _ in cached[1]):
            return cached[1]
    items = [item for item in module_items() if is_kornia_module(item[0])]
    if cached is not None and len(items) == len(cached[1]) and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(items, cached[1])):
        items = cached[1]  # another module was imported: the same kornia modules, the same list
    _kornia_modules_cache = (now, items)
    return items


class Pass:
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
        ``os.environ.items()`` decodes every variable of the process, for every fix. Not the probe
        cache's own: they say where answers are kept, not what a probe finds."""
        if self._variables is None:
            self._variables = tuple(
                sorted((k, v) for k, v in os.environ.items() if k.startswith(SETTINGS_PREFIX) and k not in OWN_VARIABLES)
            )
        return self._variables

    def kornia_modules(self) -> List[Tuple[str, Any, Dict[str, Any]]]:
        """``module_items()`` of the kornia modules, in ``sys.modules`` order (read again in
        the pass when a module was imported since: an install may import one)."""
        now = modules_now()
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

    def modules_reaching(self, entries: List[Entry]) -> Set[int]:
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
            _reaching_modules = (modules, names, _reaching_by_module(modules, names))
        return {key for key, reached in _reaching_modules[2].items() if not attributes.isdisjoint(reached)}

    def scoped_names(self) -> Set[str]:
        if self._scoped_names is None:
            try:
                self._scoped_names = _registry_scoped_attribute_names(registry())
            except Exception:  # noqa: BLE001 - the installed entries alone then
                self._scoped_names = set()
        return self._scoped_names

    def routes(self, namespace: Dict[str, Any], entries: List[Entry]) -> Dict[str, Routes]:
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


def _reaching_by_module(modules: List[Tuple[str, Any, Dict[str, Any]]], names: Set[str]) -> Dict[int, FrozenSet[str]]:
    """id(module) -> the ``names`` its code reaches by some route, for the modules that reach
    any. The answer for all the modules with a source file is kept on disk as one entry, keyed by
    every such module's name and file stamp (the routes follow from their code): a warm apply()
    then reads one answer instead of one per kornia module (441 lookups, an eighth of its time)."""
    reaching: Dict[int, FrozenSet[str]] = {}
    stamped: List[Tuple[str, Any, Dict[str, Any]]] = []
    stamps: List[str] = []
    for item in modules:
        module_name, module, namespace = item
        source = namespace.get("__file__")
        try:
            mtime, size = probe_cache.file_stamp(source)
        except Exception:  # noqa: BLE001 - no source file (a namespace package, a test's module): read now
            reached = _reached(namespace, names)
            if reached:
                reaching[id(module)] = reached
            continue
        stamped.append(item)
        stamps.append(f"{module_name}:{source}:{mtime}:{size}")
    if not stamped:
        return reaching

    def read() -> Dict[str, List[str]]:
        # Each module's routes are kept on disk only where it reaches a name (its views are
        # refreshed from them); the other 400-odd modules' empty routes are in this answer.
        found = {}
        for module_name, _, namespace in stamped:
            routes = _routes_by_attribute(namespace, names, keep=False)
            reached = sorted(name for name, found_routes in routes.items() if found_routes)
            if reached:
                found[module_name] = reached
                _keep_routes(namespace, names, routes)
        return found

    def decode(stored: Any) -> Dict[str, List[str]]:
        if not isinstance(stored, dict) or not all(
            isinstance(found, list) and all(name in names for name in found) for found in stored.values()
        ):
            raise TypeError("not a reaching table of these names")
        return stored

    key = hashlib.sha256("\n".join(stamps + [",".join(sorted(names))]).encode()).hexdigest()
    found = probe_cache.remembered(f"reaching:{key}", read, dict, decode, by_settings=False)
    for module_name, module, _ in stamped:
        reached = found.get(module_name)
        if reached:
            reaching[id(module)] = frozenset(reached)
    return reaching


_passes = threading.local()  # .active: the pass this thread runs, if any


@contextlib.contextmanager
def running_pass() -> Iterator[Pass]:
    """The pass of an apply() or revert() (the same one for a nested call: the deferred apply()
    fired by an import that a pass's own resolving triggered)."""
    active = getattr(_passes, "active", None)
    if active is not None:
        yield active
        return
    _passes.active = run = Pass()
    try:
        yield run
    finally:
        _passes.active = None


def current_pass() -> Pass:
    """The pass running in this thread, or a pass for one call (a kornia module imported later)."""
    active = getattr(_passes, "active", None)
    return active if active is not None else Pass()


def rebind_kornia_aliases(
    entry: Entry, module_name: str, module: Any, namespace: Dict[str, Any], aliases: Optional[Iterable[str]] = None
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


def refresh_views(
    module_name: str, module: Any, namespace: Dict[str, Any], scoped: Optional[List[Tuple[str, Entry]]] = None
) -> List[Tuple[str, List[Entry]]]:
    """Make each global of one kornia module through which its code reaches a kornia-scoped
    original (``F.grid_sample``, ``torch.nn.functional.conv2d``: routes read from the bytecode)
    hold the view of the real module with every such replacement installed now, and every global
    no installed entry needs any more hold its real module again. Returns what was (re)bound,
    each with the entries its view carries. ``scoped``: ``kornia_scoped_entries()``, if the
    caller has it."""
    entries = [entry for _, entry in (kornia_scoped_entries() if scoped is None else scoped)]
    bindings = _view_bindings.get(id(module), {})
    if not entries and not bindings:
        return []
    if not bindings and not _reaches_any(namespace, entries):
        return []  # most kornia modules: their code reaches no scoped original, and holds no view
    routes = current_pass().routes(namespace, entries) if entries else {}
    # The real module behind each global (a global holding our view stands for what it replaced).
    real: Dict[str, Any] = {}
    for name, binding in list(bindings.items()):
        if namespace.get(name) is binding.view:
            real[name] = binding.was
        else:  # rebound by someone else since: theirs now, not ours to restore
            del bindings[name]
    wanted: Dict[str, Overrides] = {}
    carried: Dict[str, List[Entry]] = {}
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
    done: List[Tuple[str, List[Entry]]] = []
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


def sync_views(parent: Any, attribute: str, was: Any, now: Any) -> None:
    """A view is a snapshot of its real module: when another fix replaces (or restores) an
    attribute on the real module itself (``grid_sample_everywhere=True``), every view of that
    module that still shows the old value shows the new one, as the real module does."""
    for module, view in list(_view_cache.values()):
        if module is parent and view.__dict__.get(attribute) is was:
            view.__dict__[attribute] = now


def refresh_all_views() -> None:
    """``_refresh_views`` over every kornia module that holds a view, after an entry was removed:
    the views drop its replacement and keep the other fixes' (or give the real module back)."""
    scoped = kornia_scoped_entries()
    for bindings in list(_view_bindings.values()):
        module = next(iter(bindings.values())).module
        credit(refresh_views(module.__name__, module, module.__dict__, scoped), scoped=scoped)
    if not scoped:
        _view_cache.clear()


def credit(
    done: List[Tuple[str, List[Entry]]],
    installing: Optional[str] = None,
    scoped: Optional[List[Tuple[str, Entry]]] = None,
) -> List[str]:
    """Record what a refresh rebound in the status of each fix whose entry the view carries;
    return the lines for the fix being installed (whose status is not registered yet).
    ``scoped``: ``kornia_scoped_entries()``, if the caller has it."""
    if not done:
        return []
    owner = {id(entry): name for name, entry in (kornia_scoped_entries() if scoped is None else scoped)}
    lines = []
    for line, entries in done:
        for name in sorted({owner.get(id(entry)) for entry in entries} - {None}):
            if name == installing:
                lines.append(line)
                continue
            status = status_of(name)
            if status is not None and line not in status.rebound:
                status.rebound.append(line)
    return lines



def install_scoped(entry: Entry, fix_name: str, status: FixStatus, index: BindingIndex) -> None:
    """Put a kornia-scoped entry in: the home module (torch) keeps its function; kornia's code
    gets the replacement, through its own bindings of the original and module views."""
    aliases: Dict[int, List[str]] = {}
    for _, module, name in index.bindings_of(entry.original):
        aliases.setdefault(id(module), []).append(name)
    scoped = kornia_scoped_entries()  # the same for every module of this loop
    # Only the kornia modules that bind the original, hold a view, or whose code
    # reaches a scoped attribute can change (a few dozen of 432 in kornia 0.8.2).
    concerned = current_pass().modules_reaching([e for _, e in scoped])
    concerned.update(aliases)
    concerned.update(_view_bindings)
    for module_name, module, namespace in current_pass().kornia_modules_among(concerned):
        status.rebound.extend(rebind_kornia_aliases(entry, module_name, module, namespace, aliases.get(id(module), ())))
        # One view per module global for every scoped entry installed so far.
        done = refresh_views(module_name, module, namespace, scoped)
        status.rebound.extend(credit(done, installing=fix_name, scoped=scoped))
    _watch_kornia_imports()


@outside_compiler
def _on_kornia_module_executed(module: Any) -> None:
    with lock:
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            return
        for fix_name, entry in kornia_scoped_entries():
            done = rebind_kornia_aliases(entry, module.__name__, module, namespace)
            status = status_of(fix_name)
            if status is not None:
                status.rebound.extend(done)
        credit(refresh_views(module.__name__, module, namespace))


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
        if not is_kornia_module(fullname) or not kornia_scoped_entries():
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


def unwatch_kornia_imports() -> None:
    if not kornia_scoped_entries() and _import_watcher in sys.meta_path:
        sys.meta_path.remove(_import_watcher)



def watching_kornia_imports() -> bool:
    """Whether the import watcher is in ``sys.meta_path`` (while a kornia-scoped entry is installed)."""
    return _import_watcher in sys.meta_path


def views_held() -> Tuple[Dict[int, Dict[str, "_ViewBinding"]], Dict[Any, Tuple[Any, Any]]]:
    """Copies of the views installed in kornia modules and of the views kept for reuse."""
    return dict(_view_bindings), dict(_view_cache)


def forget_routes(namespace: Dict[str, Any]) -> None:
    """Read ``namespace``'s bytecode routes again next time (for tests counting the reads)."""
    _routes_cache.pop(id(namespace), None)
