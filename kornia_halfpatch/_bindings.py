"""Where objects are bound: every module attribute that *is* a given object, read from the
modules' ``__dict__`` (so lazy module ``__getattr__`` hooks never run), with one pass over
``sys.modules`` for every object a pass looks up (:class:`BindingIndex`)."""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple


def is_kornia_module(name: str) -> bool:
    return name == "kornia" or name.startswith("kornia.")


def module_items() -> Iterator[Tuple[str, Any, Dict[str, Any]]]:
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) if module is not None else None
        if isinstance(namespace, dict):
            yield name, module, namespace


def bindings_of(obj: Any) -> List[Tuple[str, Any, str]]:
    """Every (module name, module, attribute) whose value *is* ``obj``, read from ``__dict__``
    so that lazy module ``__getattr__`` hooks are never triggered."""
    found = []
    for name, module, namespace in module_items():
        for attribute, value in list(namespace.items()):
            if value is obj:
                found.append((name, module, attribute))
    return found


def modules_now() -> Any:
    """``sys.modules``' size and newest entry: an import adds its module at the end (a dict
    keeps insertion order)."""
    try:
        newest = next(reversed(sys.modules))
    except (StopIteration, RuntimeError):
        return None
    return len(sys.modules), newest, id(sys.modules.get(newest))


class BindingIndex:
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
        self._scanned: Dict[int, Tuple[Dict[str, Any], int]] = {}  # id -> (namespace, its size then)
        # The scanned modules in order, with their namespaces' sizes then: resume() compares the
        # sizes of all of them at C speed (map(len)), and looks one by one only if one changed.
        self._items: List[Tuple[str, Any, Dict[str, Any]]] = []
        self._sizes: List[int] = []
        self._namespaces: List[Dict[str, Any]] = []  # those of _items, in order: their sizes at C speed
        self._positions: Dict[int, int] = {}  # id(namespace) -> its place in _items
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

    def _swapped_with(self, obj: Any) -> List[Any]:
        """Every object the engine swapped with ``obj``, directly or through others: a
        replacement installed after the scan sits where an earlier replacement of the same
        original was found."""
        assert self._related is not None
        seen = {id(obj)}
        order: List[Any] = []
        pending = list(self._related.get(id(obj), ()))
        while pending:
            other = pending.pop()
            if id(other) in seen:
                continue
            seen.add(id(other))
            order.append(other)
            pending.extend(self._related.get(id(other), ()))
        return order

    def prune(self, keep: Iterable[Any]) -> None:
        """Forget the objects swapped with others that are not in ``keep`` (the replacements of
        fixes reverted since, rebuilt at every apply for hand-written targets), their bindings
        handed to the objects they were swapped with: a kept index (``one_index``) otherwise
        follows one more object per target and block for the rest of the process. An object
        the engine reverted is bound nowhere it could find, so only the places are kept, for
        the lookups of the objects that take its place."""
        if self._related is None:
            return
        kept = {id(obj) for obj in keep}
        for stale_id in [key for key in self._related if key not in kept]:
            others = self._related.pop(stale_id)
            places = self._found.pop(stale_id, []) if self._found is not None else []
            for other in others:
                related = self._related.get(id(other))
                if related is None:
                    continue
                # Its own relations pass to the objects it linked (a chain stays connected).
                related[:] = [o for o in related if id(o) != stale_id]
                for further in others:
                    if further is not other and not any(o is further for o in related):
                        related.append(further)
                if self._found is not None and places:
                    known = self._found.setdefault(id(other), [])
                    known.extend(p for p in places if not any(p[1] is k[1] and p[2] == k[2] for k in known))
            self._wanted.pop(stale_id, None)

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
        items = list(module_items())
        self._scan(items, found)
        if self._related is not None:
            self._scanned = {id(namespace): (namespace, len(namespace)) for _, _, namespace in items}
            self._items = items
            self._namespaces = [namespace for _, _, namespace in items]
            self._sizes = list(map(len, self._namespaces))
            self._positions = {id(namespace): position for position, (_, _, namespace) in enumerate(items)}
            self._modules_seen = modules_now()
        return found

    def _scan_changed(self, items: List[Tuple[str, Any, Dict[str, Any]]]) -> None:
        """Scan the modules of ``items`` that are new or whose namespace changed size since they
        were scanned (following mode)."""
        assert self._found is not None
        changed = []
        for item in items:
            seen = self._scanned.get(id(item[2]))
            if seen is None or seen[0] is not item[2] or seen[1] != len(item[2]):
                changed.append(item)
        if changed:
            # A module rescanned: its bindings found before are kept (re-checked at lookup).
            self._scan(changed, self._found)
            for item in changed:
                position = self._positions.get(id(item[2]))
                if position is None:
                    self._positions[id(item[2])] = len(self._items)
                    self._items.append(item)
                    self._namespaces.append(item[2])
                    self._sizes.append(len(item[2]))
                else:
                    self._sizes[position] = len(item[2])
            self._scanned.update((id(namespace), (namespace, len(namespace))) for _, _, namespace in changed)

    def resume(self) -> None:
        """Serve more engine passes after code other than the engine ran (the block of a
        kornia_halfpatch.testing context): the modules imported since, and those whose namespace
        grew or shrank (a name bound or deleted), are scanned again; the rest keep the scan's
        answer. Not seen: a name that existed before rebound meanwhile, in a module of that size."""
        if self._related is None or self._found is None:
            return
        if modules_now() != self._modules_seen:
            self._modules_seen = modules_now()
            self._scan_changed([item for item in module_items() if id(item[2]) not in self._scanned])
        sizes = list(map(len, self._namespaces))
        if sizes != self._sizes:
            grown = [item for item, now, then in zip(self._items, sizes, self._sizes) if now != then]
            self._scan(grown, self._found)
            self._sizes = sizes
            self._scanned.update((id(namespace), (namespace, len(namespace))) for _, _, namespace in grown)

    def scan_now(self) -> None:
        """Scan before anything is installed: a scan made after an install has set a target's
        own attribute to its replacement would miss that binding (only the originals are
        wanted then), and a kept index would never restore it."""
        if self._found is None:
            self._found = self._build()

    def bindings_of(self, obj: Any) -> List[Tuple[str, Any, str]]:
        self.want(obj)
        if self._found is None:
            self._found = self._build()
        elif self._related is not None and modules_now() != self._modules_seen:
            self._modules_seen = modules_now()
            new = [item for item in module_items() if self._scanned.get(id(item[2]), (None,))[0] is not item[2]]
            self._scan_changed(new)
        candidates = self._found.get(id(obj), [])
        if self._related is not None:
            candidates = candidates + [b for other in self._swapped_with(obj) for b in self._found.get(id(other), [])]
        # Re-checked at lookup: an install since the scan may have rebound some of them.
        result: List[Tuple[str, Any, str]] = []
        for n, m, a in candidates:
            if m.__dict__.get(a) is obj and not any(m is held and a == name for _, held, name in result):
                result.append((n, m, a))
        return result

