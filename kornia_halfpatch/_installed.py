"""The state of what is installed, and the only module-level state of the engine that is not a
cache: the undo log (one :class:`Entry` per replaced target), each fix's status and apply()
options, what every replacement stands in for, the selection deferred until kornia is imported,
the registry seam for tests, and the lock that guards all of it. Read and changed only through
the functions below (as gevent keeps its ``saved``): the engine, the kornia scope, the import
hook and ``kornia_halfpatch.testing`` share them, nobody reaches into the dicts.

Module views installed in kornia modules are the kornia scope's own (``_kornia_scope``); caches
of pure computations (routes, shapes, findings, built rows) stay next to what they compute.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from ._model import SCOPE_EVERYWHERE, SCOPE_KORNIA, Fix, FixStatus


@dataclass
class Entry:
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


# Held by every apply(), revert(), status() and testing block; reentrant (patched() and
# unpatched() call apply() and revert() under it, the deferred apply() may run inside a pass).
lock = threading.RLock()

_entries: Dict[str, List[Entry]] = {}  # by fix name, in install order
_statuses: Dict[str, FixStatus] = {}
_options: Dict[str, Dict[str, Any]] = {}  # the apply() options each installed fix was given
_originals_by_replacement: Dict[int, Any] = {}
_pending_selection: Optional[Tuple[str, ...]] = None
_pending_options: Dict[str, Any] = {}
_warned_stale: set = set()
# The registry seam: tests (kornia_halfpatch.testing.use_fixes) evaluate stand-in fixes
# without touching the real table.
_registry_override: Optional[List[Fix]] = None
# The binding index every revert() and apply() of an ``_engine.one_index()`` block shares.
_shared_index: Any = None


# --------------------------------------------------------------------------------------------
# The registry


def registry() -> List[Fix]:
    if _registry_override is not None:
        return list(_registry_override)
    from .fixes import load_fixes

    return load_fixes()


def fix_names() -> Tuple[str, ...]:
    if _registry_override is not None:
        return tuple(fix.name for fix in _registry_override)
    from .fixes import FIX_NAMES

    return FIX_NAMES


@contextlib.contextmanager
def registry_of(fixes: Iterable[Fix]) -> Iterator[None]:
    """The engine's registry is ``fixes`` for the block (then the previous one again)."""
    global _registry_override
    previous = _registry_override
    _registry_override = list(fixes)
    try:
        yield
    finally:
        _registry_override = previous


# --------------------------------------------------------------------------------------------
# Installed fixes and their entries


def is_installed(name: str) -> bool:
    return name in _entries


def installed_names() -> List[str]:
    """The installed fixes, in install order."""
    return list(_entries)


def begin(name: str) -> List[Entry]:
    """Start ``name``'s undo log (registered first, so that a rollback finds a half-done
    install); the caller appends each entry as it goes in."""
    entries: List[Entry] = []
    _entries[name] = entries
    return entries


def remove(name: str) -> List[Entry]:
    """Take ``name``'s undo log out (empty if it is not installed)."""
    return _entries.pop(name, [])


def entries_of(name: str) -> Tuple[Entry, ...]:
    return tuple(_entries.get(name, ()))


def every_entry() -> List[Tuple[str, Entry]]:
    """``(fix name, entry)`` of everything installed (safe to read without the lock: pickle
    asks from any thread, possibly while another holds it)."""
    return [(name, entry) for name, entries in list(_entries.items()) for entry in list(entries)]


def kornia_scoped_entries() -> List[Tuple[str, Entry]]:
    return [(name, entry) for name, entry in every_entry() if entry.scope == SCOPE_KORNIA]


def options_of(name: str) -> Optional[Dict[str, Any]]:
    """The apply() options ``name`` was installed with (None if it is not installed)."""
    return _options.get(name)


def set_options(name: str, given: Dict[str, Any]) -> None:
    _options[name] = given


def drop_options(name: str) -> None:
    _options.pop(name, None)


# --------------------------------------------------------------------------------------------
# Replacements and their originals


def remember_original(replacement: Any, original: Any) -> None:
    _originals_by_replacement[id(replacement)] = original


def forget_original(replacement: Any) -> None:
    _originals_by_replacement.pop(id(replacement), None)


def get_original(obj: Any) -> Any:
    """The unpatched object behind a replacement installed by the shim (``obj`` itself otherwise)."""
    return _originals_by_replacement.get(id(obj), obj)


def is_patched(obj: Any) -> bool:
    return id(obj) in _originals_by_replacement


def newly_stale(references: Iterable[str]) -> List[str]:
    """The stale references not warned about before in this process (recorded as warned now)."""
    fresh = [ref for ref in references if ref not in _warned_stale]
    _warned_stale.update(fresh)
    return fresh


# --------------------------------------------------------------------------------------------
# Statuses


def status_of(name: str) -> Optional[FixStatus]:
    return _statuses.get(name)


def statuses() -> Dict[str, FixStatus]:
    """A copy of every recorded status, by fix name."""
    return dict(_statuses)


def set_status(name: str, status: FixStatus) -> None:
    _statuses[name] = status


def set_status_if_unknown(name: str, status: FixStatus) -> None:
    _statuses.setdefault(name, status)


def drop_status(name: str) -> None:
    _statuses.pop(name, None)


# --------------------------------------------------------------------------------------------
# The selection deferred until kornia is imported


def pending_selection() -> Optional[Tuple[str, ...]]:
    return _pending_selection


def defer(selection: Tuple[str, ...], options: Dict[str, Any]) -> None:
    """Add ``selection`` (and its options) to what goes in when kornia is imported."""
    global _pending_selection
    pending = set(_pending_selection or ()) | set(selection)
    _pending_selection = tuple(name for name in fix_names() if name in pending)
    _pending_options.update(options)


def take_pending() -> Optional[Tuple[Tuple[str, ...], Dict[str, Any]]]:
    """The deferred selection and options, cleared (None if nothing is deferred)."""
    global _pending_selection
    if _pending_selection is None:
        return None
    selection, _pending_selection = _pending_selection, None
    options = dict(_pending_options)
    _pending_options.clear()
    return selection, options


def undefer(names: Iterable[str]) -> None:
    """Take ``names`` out of the deferred selection (revert() before kornia is imported)."""
    global _pending_selection
    if _pending_selection is None:
        return
    chosen = set(names)
    remaining = tuple(n for n in _pending_selection if n not in chosen)
    _pending_selection = remaining or None
    if _pending_selection is None:
        _pending_options.clear()


# --------------------------------------------------------------------------------------------
# The binding index shared by a block of passes


def shared_index() -> Any:
    return _shared_index


@contextlib.contextmanager
def sharing_index(index: Any) -> Iterator[None]:
    global _shared_index
    _shared_index = index
    try:
        yield
    finally:
        _shared_index = None
