"""State helpers for tests, shared by this project's tests and the pytest plugin's fixtures.

The shim is process-global; a test that applies or reverts must leave it as it found it, and
tests that evaluate stand-in fixes must not touch the real table. This module is the one place
that knows how (it reads the engine's state through ``_installed``'s queries; tests never need to).

    with kornia_halfpatch.testing.isolated(only=["utils_grids"]) as report:   # exactly this fix
        ...
    with kornia_halfpatch.testing.preserved():     # whatever the block does is undone after
        ...
    with kornia_halfpatch.testing.use_fixes([fix]):  # the engine sees only these fixes
        ...
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from . import _engine
from . import _installed as state
from ._bindings import BindingIndex
from ._model import Fix, FixStatus, Report, Target


Snapshot = Tuple[Tuple[str, ...], Dict[str, Dict[str, Any]], Dict[str, FixStatus], Dict[str, Any], Dict[str, Dict[str, Any]]]


def _snapshot() -> Snapshot:
    """(the installed fixes, their options, every fix's status, the installed fixes' evaluations,
    the options every fix was last configured with, installed or not)."""
    with state.lock:
        applied = _engine.applied_fixes()
        options = {name: dict(state.options_of(name) or {}) for name in applied}
        return applied, options, state.statuses(), _engine.installed_evaluations(applied), _engine.configured_options()


def _option_groups(
    applied: Tuple[str, ...], options: Dict[str, Dict[str, Any]]
) -> List[Tuple[List[str], Dict[str, Any]]]:
    """The fixes to re-apply as few ``apply()`` calls as give each fix exactly its own options,
    in registry order: a fix joins the current call unless the options gathered so far would
    give it an option it was not installed with (or another value), or its options would give
    an earlier fix of the call one. One call restores everything in the usual case (no two
    fixes share an option name), instead of an apply() per fix."""
    declared = {fix.name: set(fix.options) for fix in state.registry()}
    groups: List[Tuple[List[str], Dict[str, Any]]] = []
    for name in applied:
        own = options[name]
        if groups:
            names, given = groups[-1]
            merged = {**given, **own}
            if all(
                {key: value for key, value in merged.items() if key in declared.get(member, ())} == options[member]
                for member in names + [name]
            ):
                names.append(name)
                given.update(own)
                continue
        groups.append(([name], dict(own)))
    return groups


def _installed_originals() -> List[Any]:
    """What the installed fixes replace: what re-applying them looks up."""
    with state.lock:
        return [entry.original for _, entry in state.every_entry()]


def _restore(snapshot: Snapshot, originals: Iterable[Any] = (), index: Optional[BindingIndex] = None) -> None:
    applied, options, statuses, evaluations, configured = snapshot
    # One scan of the modules for the revert and every apply (no user code runs between them),
    # or none: the scan of the block's start, brought up to date.
    with state.lock, _engine.one_index(originals, resume=index):
        _engine.revert()
        for names, given in _option_groups(applied, options):
            # The report would be thrown away; each fix goes back in as it was evaluated then.
            _engine.apply_without_report(names, None, given, reuse=evaluations)
        # What the earlier apply() found out about the fixes that are not installed (a narrow
        # apply(only=...) above would otherwise record them as "not selected").
        for name, status in statuses.items():
            if name not in applied:
                state.set_status(name, status)
        # A fix the block configured and that is not back (installed before, or not), keeps
        # the block's options in its module otherwise: the next apply() would read them.
        _engine.reconfigure(configured)


@contextlib.contextmanager
def preserved() -> Iterator[None]:
    """Whatever the block applies or reverts, the shim is as before afterwards: the same fixes,
    with the same options, the same statuses for the others, and every fix configured with the
    options it had."""
    snapshot = _snapshot()
    originals = _installed_originals()
    try:
        yield
    finally:
        _restore(snapshot, originals)


@contextlib.contextmanager
def isolated(only: Optional[Iterable[str]] = None, **options: Any) -> Iterator[Report]:
    """Exactly the ``only`` fixes applied (every needed one if ``None``; none for ``()``) for the
    block, configured by ``options``; the previous state restored afterwards, every fix's options
    included (a fix the block configured and that was not installed before is given its previous
    options again)."""
    snapshot = _snapshot()
    originals = _installed_originals()
    index: Optional[BindingIndex] = None
    try:
        # One scan of the modules serves the revert and apply here and the restore after the
        # block (two scans were two thirds of a cycle): the restore re-scans only the modules
        # the block imported or whose namespace changed size (BindingIndex.resume).
        with _engine.one_index(originals) as index:
            _engine.revert()
            chosen = tuple(only) if only is not None else None
            report = _engine.apply(only=chosen, **options) if chosen != () else _engine.status()
        yield report
    finally:
        _restore(snapshot, originals, index)


@contextlib.contextmanager
def use_fixes(fixes: List[Fix]) -> Iterator[None]:
    """The engine's registry is ``fixes`` for the block (the seam for engine tests with
    stand-in fixes); the real fixes are reverted first and restored after."""
    with preserved():
        _engine.revert()
        with state.registry_of(fixes):
            try:
                yield
            finally:
                _engine.revert()


def installed_targets() -> List[Tuple[str, Target, Any, Any]]:
    """``(fix name, target, original, replacement)`` of everything installed now."""
    found = []
    with state.lock:
        for fix in state.registry():
            entries = state.entries_of(fix.name)
            for target in fix.targets:
                for entry in entries:
                    if entry.path in target.candidates:
                        found.append((fix.name, target, entry.original, entry.replacement))
    return found
