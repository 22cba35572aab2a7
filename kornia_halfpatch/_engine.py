"""The one place that patches: the pass (gate, build, install, revert) and the public entry points.

Fix modules (``kornia_halfpatch.fixes.*``) only describe *what* to replace and *how to compute*;
installing a replacement happens here:

* Targets are resolved as ``wrapt.resolve_path`` does (``_functions.resolve_path``), and the
  first candidate path that exists in the installed release wins (kornia moves functions
  between releases).
* The replacement is a plain Python function built by the fix, never a wrapt proxy: dynamo
  inlines ``__wrapped__`` of a proxy and TorchScript compiles its source, so a proxy silently
  runs the unpatched code under ``torch.compile``/``torch.jit.script``. A plain function with its
  own source is what both compile.
* Kornia modules bind functions by name (``from kornia.utils import create_meshgrid``), so every
  ``kornia*`` module attribute that *is* the original gets the replacement. Modules imported
  later then bind the replacement too, because every module they could import it from has been
  rebound. Non-kornia modules holding the original are reported as stale (warned once).
* If kornia is not imported yet, applying is deferred (``_import_hook``).
* Every change goes into an undo log (``_installed``); ``revert`` restores exactly the
  originals, including in modules imported after ``apply`` that bound the replacement.
* A target with ``scope="kornia"`` replaces a function of another library (torch) for kornia's
  code only (``_kornia_scope``).
* Fixes may take keyword options of ``apply()`` (``Fix.options``, handed to ``Fix.configure``).

The other jobs live in their own modules: ``_selection`` (which fixes), ``_bindings`` (where
objects are bound), ``_kornia_scope`` (module views), ``_identity`` (a replacement's names),
``_installed`` (the state, behind query functions), ``_import_hook`` (the deferred apply).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple


from . import _environment as environment
from . import _installed as state
from . import _kornia_scope as kornia_scope
from . import _lookups
from . import _probe_cache as probe_cache
from ._bindings import BindingIndex, is_kornia_module
from ._functions import python_function_of, resolve_path
from ._identity import give_identity, parameter_names
from ._import_hook import run_when_kornia_is_imported
from ._installed import Entry, fix_names, get_original, is_patched, lock, registry
from ._model import SCOPE_KORNIA, Finding, Fix, FixStatus, Report, Target, TargetStatus, Verdict, unsupported
from ._safety import HalfPatchWarning, describe_exception, logger, outside_compiler, warn
from ._selection import check_options, select

__all__ = [
    "HalfPatchWarning",
    "applied_fixes",
    "apply",
    "fix_names",
    "get_original",
    "is_patched",
    "patched",
    "revert",
    "status",
    "unpatched",
]


def _status(name: str, finding: Finding) -> FixStatus:
    return FixStatus(name, finding.verdict, finding.reason)


# --------------------------------------------------------------------------------------------
# Resolving and installing


def resolve(target: Target) -> Tuple[Optional[Tuple[Any, str, Any, str]], str]:
    errors = []
    for candidate in target.candidates:
        module_name, _, path = candidate.partition(":")
        # An imported module is taken from sys.modules: importlib.import_module's lock and
        # lookups were half of resolving, and every apply() resolves every target again.
        module = sys.modules.get(module_name)
        try:
            parent, attribute, original = resolve_path(module if module is not None else module_name, path)
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
    function = python_function_of(original)
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
    function = python_function_of(original)
    try:
        names = parameter_names(function)
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


# Generated replacements of table rows, by (row target, original): a row's wrapper depends on
# nothing else, so re-applying (after every unpatched() block) reuses it instead of generating
# and compiling its source again. Hand-written builders may read configure()'d options: rebuilt.
_built: Dict[Tuple[int, int], Tuple[Target, Any, Any]] = {}
# id(row replacement) -> (the replacement, parent, attribute, path, scope) it was given identity for.
_identity_given: Dict[int, Tuple[Any, Any, str, str, str]] = {}


def _build(target: Target, found: "Resolved") -> Any:
    """The replacement of a resolved target, with the original's identity (``give_identity``)."""
    original = found[2]
    key = (id(target), id(original))
    cached = _built.get(key)
    scope = _scope(target)
    # The identity given to a reused row replacement: its names, signature and pickle reference
    # follow from (parent, attribute, original, path) and the scope alone, so a row reinstalled
    # at the same place keeps what it was given (re-reading the original's signature and
    # defaults was a third of a testing.isolated() cycle).
    where = (found[1], found[3], scope)
    if cached is not None and cached[0] is target and cached[1] is original:
        replacement = cached[2]
        given = _identity_given.get(id(replacement))
        if given is not None and given[0] is replacement and given[1] is found[0] and given[2:] == where:
            return replacement
    else:
        replacement = target.build(original)
        if target.row is not None:
            _built[key] = (target, original, replacement)
    give_identity(replacement, found, scope)
    if target.row is not None:
        _identity_given[id(replacement)] = (replacement, found[0], *where)
    elif isinstance(original, (staticmethod, classmethod)) and isinstance(replacement, types.FunctionType):
        # A hand-written replacement of a static or class method (Se3.exp, Hyperplane.through) is
        # a plain function taking what the method's function takes: installed as the same kind
        # of descriptor, so the class and its instances bind it as they bound the original.
        replacement = type(original)(replacement)
    return replacement


def _scope(target: Target) -> str:
    return target.scope() if callable(target.scope) else target.scope


def _install(
    fix: Fix,
    resolved: List[Optional[Resolved]],
    status: FixStatus,
    index: BindingIndex,
    replacements: Optional[List[Any]] = None,
) -> List[str]:
    """Install every resolved target of ``fix`` (with the ``replacements`` built for them, if
    given, else built here); returns the stale references to warn about.

    All or nothing: if building or installing any target raises, what was installed so far is
    rolled back (every alias, view and class attribute) before the exception propagates.
    """
    entries = state.begin(fix.name)  # first, so that a rollback finds a half-done install
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
            replacement = replacements[position] if replacements is not None else _build(target, found)
            scope = _scope(target)
            entry = Entry(parent, attribute, original, replacement, path, scope=scope)
            if scope == SCOPE_KORNIA and not entry.on_module:
                raise TypeError(f"{path}: scope {SCOPE_KORNIA!r} is for module-level functions")
            entries.append(entry)
            state.remember_original(replacement, original)
            index.relate(original, replacement)
            if scope == SCOPE_KORNIA:
                kornia_scope.install_scoped(entry, fix.name, status, index)
            else:
                if inspect.isclass(parent):
                    # Deleted again by revert (give_identity named the copy after this class).
                    entry.inherited = attribute not in parent.__dict__
                setattr(parent, attribute, replacement)
                if inspect.isclass(parent):
                    _forget_torchscript_class(parent)
                else:
                    kornia_scope.sync_views(parent, attribute, original, replacement)
            if entry.on_module and scope != SCOPE_KORNIA:
                for module_name, module, name in index.bindings_of(original):
                    if is_kornia_module(module_name):
                        setattr(module, name, replacement)
                        entry.aliases.append((module, name))
                        status.rebound.append(f"{module_name}.{name}")
                    else:
                        status.stale.append(f"{module_name}.{name}")
            status.targets.append(path)
    except BaseException:
        _uninstall(fix.name)
        raise
    return state.newly_stale(status.stale)


def _uninstall(name: str, index: Optional[BindingIndex] = None) -> None:
    entries = state.remove(name)
    if index is None:
        index = BindingIndex(entry.replacement for entry in entries)
    for entry in reversed(entries):
        if entry.on_module:
            # Restore every module that holds the replacement, including those imported after
            # apply(), not only the aliases we rebound ourselves.
            for _, module, attribute in index.bindings_of(entry.replacement):
                setattr(module, attribute, entry.original)
            if entry.scope != SCOPE_KORNIA:  # a kornia-scoped one leaves the views in _refresh_all_views
                kornia_scope.sync_views(entry.parent, entry.attribute, entry.replacement, entry.original)
        elif entry.parent.__dict__.get(entry.attribute) is entry.replacement:
            if entry.inherited:
                delattr(entry.parent, entry.attribute)
            else:
                setattr(entry.parent, entry.attribute, entry.original)
            _forget_torchscript_class(entry.parent)
        state.forget_original(entry.replacement)
    if any(entry.scope == SCOPE_KORNIA for entry in entries):
        # The views lose this fix's replacements and keep every other fix's.
        kornia_scope.refresh_all_views()
    state.drop_options(name)
    kornia_scope.unwatch_kornia_imports()


Resolved = Tuple[Any, str, Any, str]  # (parent, attribute, original, "module:path")

# Probe findings by (fix, kornia version, originals, the fix's apply() options, the shim's
# environment variables): apply() runs again after every unpatched() block and patched() scope,
# and a probe's answer for the same originals does not change within a process, unless it reads
# a setting the user can change at run time (filters_conv_hang's KORNIA_HALFPATCH_FILTERS_CONV_HANG):
# every KORNIA_HALFPATCH_* variable and option is part of the key, so a changed setting is
# probed again. Failures are never cached.
FindingKey = Tuple[int, Optional[str], Tuple[int, ...], Tuple[Tuple[str, str], ...], Tuple[Tuple[str, str], ...]]
_findings: Dict[FindingKey, Tuple[Fix, Tuple[Any, ...], Finding]] = {}


def _settings(given: Optional[Dict[str, Any]]) -> Tuple[Tuple[Tuple[str, str], ...], Tuple[Tuple[str, str], ...]]:
    """What a probe may read besides the originals: the shim's environment variables, and the
    apply() options given to the fix (by value; options are strings and booleans)."""
    variables = kornia_scope.current_pass().settings_variables()
    options = tuple(sorted((k, repr(v)) for k, v in (given or {}).items()))
    return variables, options


def _is_registered(fix: Fix) -> bool:
    """``fix`` is the shim's own fix of that name (not a stand-in of a test's registry)."""
    module = sys.modules.get(f"{__package__}.fixes.{fix.name}")
    return module is not None and getattr(module, "FIX", None) is fix


def _remembered_finding(fix: Fix, what: str, ask: Any, originals: Any, given: Optional[Dict[str, Any]]) -> Finding:
    """``ask()``'s Finding, kept between processes (``_probe_cache``) for the shim's own fixes."""
    if not _is_registered(fix):
        return ask()
    return probe_cache.remembered(
        f"{what}:{fix.name}", ask, _encode_finding, _decode_finding, originals=originals, options=given
    )


def _encode_finding(finding: Finding) -> List[str]:
    if not isinstance(finding, Finding):
        raise TypeError("not a Finding")  # kept in memory only, as returned
    return [finding.verdict.name, finding.reason]


def _decode_finding(stored: Any) -> Finding:
    verdict, reason = stored
    if not isinstance(reason, str):
        raise TypeError(reason)
    return Finding(Verdict[verdict], reason)


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
        found, why = resolve(target)
        if found is None and not target.optional:
            return None, Finding(Verdict.ABSENT, f"target absent in kornia {kornia_version}: {why}")
        if found is not None:
            problem = _shape_problem(target, found[2])
            if problem is not None:
                return None, Finding(Verdict.UNSUPPORTED, f"unsupported kornia {kornia_version}: {problem}")
        resolved.append(found)
    if all(found is None for found in resolved):
        if fix.when_absent is not None:
            return None, _remembered_finding(fix, "absent", fix.when_absent, (), given)
        return None, Finding(Verdict.ABSENT, f"target absent in kornia {kornia_version}")
    originals = [found[2] if found else None for found in resolved]
    key = (id(fix), kornia_version, tuple(id(original) for original in originals), *_settings(given))
    cached = _findings.get(key)
    # The fix and originals are kept with the finding, so their ids cannot be reused meanwhile.
    if fix.probe_cache and cached is not None and cached[0] is fix and all(a is b for a, b in zip(cached[1], originals)):
        finding = cached[2]
    else:
        if fix.probe_cache:
            finding = _remembered_finding(fix, "probe", lambda: fix.probe(originals), originals, given)
        else:
            finding = fix.probe(originals)
        if fix.probe_cache:
            _findings[key] = (fix, tuple(originals), finding)
    if not finding.needed:
        return None, finding
    known = kornia_version in environment.KNOWN_KORNIA_RELEASES
    return resolved, Finding(
        Verdict.NEEDED, "bug present" if known else f"bug confirmed by probe on unknown kornia {kornia_version}"
    )


def _gate_rows(fix: Fix, resolved: Optional[List[Optional[Resolved]]]) -> Dict[int, Finding]:
    """Ask each resolved target's own gate (the kernel rows of torch_ops); a target found not
    needed is taken out of ``resolved`` (not built, not installed). Gates cache their answers."""
    findings: Dict[int, Finding] = {}
    if resolved is None:
        return findings
    for index, target in enumerate(fix.targets):
        if target.check is not None and resolved[index] is not None:
            problem = target.check(resolved[index][2])
            if problem is not None:
                findings[index] = unsupported(problem)
                resolved[index] = None
                continue
        if target.gate is not None and resolved[index] is not None:
            findings[index] = target.gate()
            if not findings[index].needed:
                resolved[index] = None
    return findings


def _target_statuses(
    fix: Fix, resolved: Optional[List[Optional[Resolved]]], finding: Finding, gated: Optional[Dict[int, Finding]] = None
) -> List[TargetStatus]:
    """One verdict per target: needed with its numerical reason (applied once installed),
    absent, not needed by its own gate, or the fix's verdict."""
    statuses = []
    gated = gated or {}
    for index, target in enumerate(fix.targets):
        found = resolved[index] if resolved is not None else None
        row_finding = gated.get(index)
        if resolved is None:
            statuses.append(TargetStatus(target.candidates[0], finding.verdict, finding.reason))
        elif row_finding is not None and not row_finding.needed:
            statuses.append(TargetStatus(target.candidates[0], row_finding.verdict, f"{target.reason}; {row_finding.reason}"))
        elif found is None:
            statuses.append(TargetStatus(target.candidates[0], Verdict.ABSENT, "absent in this release (optional)"))
        elif row_finding is not None:
            statuses.append(TargetStatus(found[3], Verdict.NEEDED, f"{target.reason}; {row_finding.reason}"))
        else:
            statuses.append(TargetStatus(found[3], Verdict.NEEDED, target.reason or finding.reason))
    return statuses




@dataclass
class _Evaluated:
    """A fix gated, probed and built, not yet installed."""

    fix: Fix
    given: Dict[str, Any]
    status: FixStatus
    resolved: Optional[List[Optional[Resolved]]] = None
    replacements: List[Any] = field(default_factory=list)


def _failed(fix: Fix, exc: BaseException, notes: List[str], what: str) -> FixStatus:
    why = describe_exception(exc)
    logger.warning("%s skipped: its %s failed: %s", fix.name, what, why, exc_info=True)
    notes.append(f"kornia_halfpatch: {fix.name} skipped: its {what} failed ({why})")
    failed = FixStatus(fix.name, Verdict.FAILED, f"failed: {why}")
    failed.target_statuses = [TargetStatus(t.candidates[0], Verdict.FAILED, failed.reason) for t in fix.targets]
    return failed


def _evaluate(fix: Fix, given: Dict[str, Any], kornia_version: Optional[str], notes: List[str]) -> _Evaluated:
    """Configure, gate, probe and build one fix in the probes' clean torch state, patching
    nothing. Never raises (but for KeyboardInterrupt and the like): a failure leaves the fix out
    with the exception in its status, a log record and a warning."""
    unknown = kornia_version is not None and kornia_version not in environment.KNOWN_KORNIA_RELEASES
    from ._isolation import probe_state

    try:
        with probe_state():
            _configure(fix, given)
            resolved, finding = _gate(fix, kornia_version, given)
            gated = _gate_rows(fix, resolved)
            status = _status(fix.name, finding)
            status.target_statuses = _target_statuses(fix, resolved, finding, gated)
            replacements = []
            if resolved is not None:
                # Builders may probe too (the grid_sample kernel, the pyramid's level rule).
                replacements = [
                    _build(target, found) if found is not None else None
                    for target, found in zip(fix.targets, resolved)
                ]
    except Exception as exc:  # noqa: BLE001 - the shim must not break the program it runs in
        return _Evaluated(fix, given, _failed(fix, exc, notes, "probe or install"))
    if resolved is None:
        if unknown and finding.verdict is not Verdict.UPSTREAM:
            notes.append(f"kornia_halfpatch: {fix.name} skipped: {finding.reason}")
        logger.info("%s skipped: %s", fix.name, finding.reason)
    return _Evaluated(fix, given, status, resolved, replacements)


# The apply() options each fix's configure() was last given: a fix keeps them in its module (the
# mode networks_cpu_half resolves, warp_sampling's workaround), installed or not, so a block that
# configures a fix with options must give it its previous ones back (configured_options() before,
# reconfigure() after), or the next apply() and status() read the block's.
_configured: Dict[str, Dict[str, Any]] = {}


def _configure(fix: Fix, given: Dict[str, Any]) -> None:
    if fix.configure is not None:
        fix.configure(given)
        _configured[fix.name] = dict(given)


def configured_options() -> Dict[str, Dict[str, Any]]:
    """What each fix's configure() was last given (a fix never configured is absent)."""
    with lock:
        return {name: dict(given) for name, given in _configured.items()}


def reconfigure(configured: Dict[str, Dict[str, Any]]) -> None:
    """Give every fix with a configure() the options of ``configured`` (a ``configured_options()``
    of before; a fix absent there gets none: its defaults) where it was given others since. A fix
    whose configure() raises keeps what it has (its next apply() reports it)."""
    with lock:
        for fix in registry():
            if fix.configure is None:
                continue
            wanted = configured.get(fix.name, {})
            if _configured.get(fix.name, {}) == wanted and (fix.name in _configured) == (fix.name in configured):
                continue
            try:
                fix.configure(dict(wanted))
            except Exception:  # noqa: BLE001 - the shim never raises into the caller's code
                continue
            if fix.name in configured:
                _configured[fix.name] = dict(wanted)
            else:
                _configured.pop(fix.name, None)


def _mark_applied(status: FixStatus) -> None:
    """The fix and its needed targets are installed: what the probe found needed is now applied."""
    status.verdict = Verdict.APPLIED
    for target in status.target_statuses:
        if target.verdict is Verdict.NEEDED:
            target.verdict = Verdict.APPLIED


def _install_evaluated(evaluated: _Evaluated, notes: List[str], index: BindingIndex) -> FixStatus:
    """Install one evaluated fix; a failing install is rolled back and reported, never raised."""
    fix, status = evaluated.fix, evaluated.status
    evaluated_status = _status_before_install(status)
    try:
        stale = _install(fix, evaluated.resolved, status, index, evaluated.replacements)
        state.set_options(fix.name, evaluated.given)
    except Exception as exc:  # noqa: BLE001 - rolled back by _install; the other fixes stay
        return _failed(fix, exc, notes, "probe or install")
    _mark_applied(status)
    _evaluations[fix.name] = (evaluated, evaluated_status)
    logger.info("%s applied to %s", fix.name, ", ".join(status.targets))
    for ref in stale:
        notes.append(
            f"{ref} was bound before kornia_halfpatch.apply() and still holds the unpatched "
            f"function; import it after apply(), or through its kornia module"
        )
    return status


# The evaluation each installed fix went in with, and its status as evaluated (installing fills
# the status in): kornia_halfpatch.testing puts a snapshot's fixes back with these instead of
# evaluating them again (configure, gate and build were a third of a testing.isolated() cycle).
_evaluations: Dict[str, Tuple[_Evaluated, Tuple[Verdict, str, List[Tuple[str, Verdict, str]]]]] = {}


def _status_before_install(status: FixStatus) -> Tuple[Verdict, str, List[Tuple[str, Verdict, str]]]:
    return status.verdict, status.reason, [(t.target, t.verdict, t.reason) for t in status.target_statuses]


def installed_evaluations(names: Iterable[str]) -> Dict[str, Any]:
    """What ``apply_without_report(..., reuse=)`` takes to put the installed ``names`` back as they
    went in (``kornia_halfpatch.testing``'s snapshots)."""
    with lock:
        return {name: _evaluations[name] for name in names if state.is_installed(name) and name in _evaluations}


def _reused(fix: Fix, given: Dict[str, Any], kept: Any) -> Optional[_Evaluated]:
    """The kept evaluation of ``fix``, if it was made with these options and every target it
    installed still resolves to the same original (else None: evaluate again). Restoring a
    snapshot puts back what was there: the gates' and probes' answers of then, not of now."""
    evaluated, (verdict, reason, targets) = kept
    if evaluated.fix is not fix or evaluated.given != given or evaluated.resolved is None:
        return None
    for target, found in zip(fix.targets, evaluated.resolved):
        if found is None:
            continue
        now, _ = resolve(target)
        if now is None or now[0] is not found[0] or now[1] != found[1] or now[2] is not found[2]:
            return None
    try:
        _configure(fix, given)
    except Exception:  # noqa: BLE001 - evaluated again, which reports it
        return None
    status = FixStatus(fix.name, verdict, reason)
    status.target_statuses = [TargetStatus(*target) for target in targets]
    return _Evaluated(fix, given, status, list(evaluated.resolved), list(evaluated.replacements))


@contextlib.contextmanager
def _one_pass() -> Iterator[None]:
    """Install or revert every fix as one pass that other threads do not interleave with.

    Between two fixes' installs a thread calling kornia runs a mixture (measured: 126-472 mixed
    answers of 8 threads x homography_warp in bfloat16 while another thread applied/reverted,
    with installs spread between probes). So probes run before any patching, and the
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


def _apply_locked(
    selection: Tuple[str, ...], off: Dict[str, str], options: Optional[Dict[str, Any]] = None, reuse: Optional[Dict[str, Any]] = None
) -> None:
    with kornia_scope.running_pass():
        _apply_pass(selection, off, options, reuse)


def _probe_state() -> Any:
    from ._isolation import probe_state

    return probe_state()


def _apply_pass(
    selection: Tuple[str, ...], off: Dict[str, str], options: Optional[Dict[str, Any]] = None, reuse: Optional[Dict[str, Any]] = None
) -> None:
    kornia_version = environment.kornia_version()
    notes: List[str] = []
    fixes = registry()
    index = state.shared_index() if state.shared_index() is not None else BindingIndex()
    # First every selected fix is gated, probed and built, patching nothing...
    evaluated: List[_Evaluated] = []
    # One probe state for every fix's evaluation (each _evaluate's own is then a seeded stream).
    with _probe_state():
        for fix in fixes:
            given = {key: value for key, value in (options or {}).items() if key in fix.options}
            if state.is_installed(fix.name):
                if not given or fix.name not in selection or given == state.options_of(fix.name):
                    continue
                _uninstall(fix.name)  # asked for with other options: reinstall with those
            if fix.name not in selection:
                state.set_status_if_unknown(fix.name, FixStatus(fix.name, Verdict.OFF, off.get(fix.name, "not selected")))
                continue
            kept = _reused(fix, given, reuse[fix.name]) if reuse and fix.name in reuse else None
            evaluated.append(kept if kept is not None else _evaluate(fix, given, kornia_version, notes))
    # Every original this apply() rebinds, known before the index's one scan (the first lookup,
    # in the first install): only the targets that go in, not those their gates left out.
    for item in evaluated:
        for found in item.resolved or ():
            if found is not None:
                index.want(found[2])
    if any(item.resolved is not None for item in evaluated):
        index.scan_now()
    # ... then all of them go in, in one tight pass.
    with _one_pass():
        for item in evaluated:
            if item.resolved is None:
                state.set_status(item.fix.name, item.status)
            else:
                state.set_status(item.fix.name, _install_evaluated(item, notes, index))
    probe_cache.save()  # what this pass's probes found, for the next process
    # Outside the probes' state, where the caller's warning filters apply again.
    for note in notes:
        warn(note, stacklevel=4)



# --------------------------------------------------------------------------------------------
# Public API (re-exported by kornia_halfpatch/__init__.py)


@outside_compiler
def apply(only: Optional[Iterable[str]] = None, exclude: Optional[Iterable[str]] = None, **options: Any) -> Report:
    """Apply every fix needed by the installed kornia/torch (or the chosen ones).

    Idempotent and thread-safe. If kornia is not imported yet, the fixes go in when it is.
    ``KORNIA_HALFPATCH_DISABLE=1`` turns the shim off whatever the code asks;
    ``KORNIA_HALFPATCH_FIXES`` / ``KORNIA_HALFPATCH_EXCLUDE`` (comma-separated names) choose
    fixes when ``only`` / ``exclude`` are not given. Keyword ``options`` go to the fixes that
    declare them (e.g. ``grid_sample_workaround=...``); an installed fix given different options
    is reinstalled with them.
    """
    with lock:
        apply_without_report(only, exclude, options)
        return _report()


@outside_compiler
def apply_without_report(
    only: Optional[Iterable[str]], exclude: Optional[Iterable[str]], options: Dict[str, Any], reuse: Optional[Dict[str, Any]] = None
) -> None:
    """``apply()`` but for its report (whose facts, ``Fix.describe``, may run probes of their own): for
    callers that discard it, as kornia_halfpatch.testing's restore after every block. ``reuse``:
    ``installed_evaluations()`` of a snapshot, put back as they were evaluated then."""
    selection, off = select(only, exclude)
    check_options(options, selection)
    with lock:
        for name, reason in off.items():
            # A narrower selection (apply(only=...), unpatched() restoring) must not overwrite
            # what an earlier apply() found out about the other fixes.
            if not state.is_installed(name):
                state.set_status_if_unknown(name, FixStatus(name, Verdict.OFF, reason))
        if not selection:
            return
        if not environment.kornia_is_imported():
            if environment.kornia_version() is None:
                for name in selection:
                    state.set_status(name, FixStatus(name, Verdict.PENDING, "kornia is not installed"))
                return
            state.defer(selection, options)
            run_when_kornia_is_imported(_apply_locked)
            return
        _apply_locked(selection, off, options, reuse)


@outside_compiler
def revert(names: Optional[Iterable[str]] = None) -> None:
    """Undo the given fixes (all by default): every touched attribute is the original again."""
    with lock:
        chosen = tuple(names) if names is not None else tuple(fix_names())
        for name in chosen:
            if name not in fix_names():
                raise ValueError(f"unknown kornia_halfpatch fix {name!r}; known fixes: {', '.join(fix_names())}")
        state.undefer(chosen)
        replacements = [e.replacement for n in chosen for e in state.entries_of(n)]
        if state.shared_index() is not None:
            index = state.shared_index()
            for replacement in replacements:
                index.want(replacement)
        else:
            index = BindingIndex(replacements)
        with kornia_scope.running_pass(), _one_pass():
            _revert_all(chosen, index)


@contextlib.contextmanager
def one_index(also: Iterable[Any] = (), resume: Optional[BindingIndex] = None) -> Iterator[Optional[BindingIndex]]:
    """Under the lock, the revert() and apply() calls of the block share one following binding
    index (one scan of every module for all of them, instead of one per call: 4 scans of about
    6 ms per testing.isolated() block). Nothing but the engine may rebind the originals or
    replacements of installed fixes while the block runs (kornia_halfpatch.testing's blocks
    call only revert() and apply()). ``also``: objects a later apply() of the block will look
    up (the originals of fixes it re-installs), found by the same scan. ``resume``: the index
    of an earlier block, brought up to date (``BindingIndex.resume``) instead of a new scan.
    Yields the index (None inside another block, whose index serves)."""
    global _kept_index
    with lock:
        if state.shared_index() is not None:
            yield None
            return
        index = resume if resume is not None else _kept_index
        if index is not None:
            index.resume()
        else:
            index = BindingIndex()
            index.follow()
        also = list(also)
        entries = [entry for _, entry in state.every_entry()]
        # Related before wanted: a replacement installed since (by an apply() outside these
        # blocks) sits where its original was found, so it needs no new scan.
        for entry in entries:  # revert() and apply() want them all, class attributes too
            index.relate(entry.original, entry.replacement)
            index.want(entry.original)
            index.want(entry.replacement)
        for obj in also:
            index.want(obj)
        index.prune([*also, *(e.original for e in entries), *(e.replacement for e in entries)])
        with state.sharing_index(index):
            yield index
        _kept_index = index


# The index of the last one_index() block, resumed by the next (BindingIndex.resume: only the
# modules imported since and the namespaces that changed size are scanned again) instead of a
# new scan of every module (about 58k attributes after import kornia, 6 ms: half of a
# testing.isolated() cycle). Not seen, as within a block: a name rebound meanwhile by code
# other than the engine in a module whose size did not change.
_kept_index: Optional[BindingIndex] = None


def _revert_all(chosen: Tuple[str, ...], index: BindingIndex) -> None:
    """Uninstall the chosen fixes, last installed first; one failing revert does not stop the rest."""
    for name in reversed(fix_names()):
        if name in chosen:
            try:
                _uninstall(name, index)
            except Exception as exc:  # noqa: BLE001 - revert the other fixes all the same
                logger.warning("revert of %s failed: %s", name, describe_exception(exc), exc_info=True)
                warn(f"kornia_halfpatch: revert of {name} failed ({describe_exception(exc)})")
            state.drop_status(name)


def applied_fixes() -> Tuple[str, ...]:
    with lock:
        return tuple(name for name in fix_names() if state.is_installed(name))


# What fix modules ask about the installed shim, answered here so that they never import this.
_lookups.answer_with(get_original, lambda name: name in applied_fixes())


@contextlib.contextmanager
def patched(
    only: Optional[Iterable[str]] = None, exclude: Optional[Iterable[str]] = None, **options: Any
) -> Iterator[Report]:
    """Apply for the duration of a ``with`` block; afterwards only what this block added is undone
    (and fixes the block reinstalled with other ``options`` get their previous options back).

    Patching is process-global: other threads see the patched kornia while the block runs.
    """
    with lock:
        before = set(applied_fixes())
        previous = {name: dict(state.options_of(name) or {}) for name in before}
        configured = configured_options()
        # One scan of the modules for the apply and the undo (BindingIndex.resume).
        with one_index() as index:
            report = apply(only, exclude, **options)
        added = [name for name in applied_fixes() if name not in before]
        changed = [name for name in before if state.is_installed(name) and state.options_of(name) != previous[name]]
    try:
        yield report
    finally:
        with lock, one_index(resume=index):
            revert(added)
            for name in changed:
                revert([name])
                apply_without_report([name], None, previous[name])
            reconfigure(configured)


@contextlib.contextmanager
def unpatched(names: Optional[Iterable[str]] = None) -> Iterator[None]:
    """Run a block on unpatched kornia (for patched-versus-unpatched comparisons), then restore."""
    with lock:
        chosen = set(names) if names is not None else set(fix_names())
        removed = [name for name in applied_fixes() if name in chosen]
        options: Dict[str, Any] = {}
        for name in removed:
            options.update(state.options_of(name) or {})
        # Restored as they went in (their gates' and probes' answers of then), not evaluated again.
        kept = installed_evaluations(removed)
        configured = configured_options()
        # One scan of the modules for the revert and the re-apply (BindingIndex.resume).
        with one_index() as index:
            revert(removed)
    try:
        yield
    finally:
        with lock:
            if removed:
                with one_index(resume=index):
                    apply_without_report(removed, None, options, reuse=kept)  # nobody reads this report
            reconfigure(configured)


def _report() -> Report:
    facts: Dict[str, str] = {}
    if environment.kornia_is_imported():
        from .fixes import collect_facts

        facts = collect_facts()  # each line computed in the probes' state, failures reported
    statuses = {name: state.status_of(name) or FixStatus(name, Verdict.OFF, "not applied") for name in fix_names()}
    pending = state.pending_selection()
    if pending is not None:
        for name in pending:
            statuses[name] = FixStatus(name, Verdict.PENDING, "deferred until kornia is imported")
    return Report(
        kornia_version=environment.kornia_version(),
        torch_version=environment.torch_version(),
        fixes=statuses,
        facts=facts,
        deferred=pending is not None,
    )


@outside_compiler
def status() -> Report:
    """Per fix: applied or not and why; versions; what each fix does on this machine; stale
    references (rescanned now)."""
    with lock:
        index = BindingIndex(entry.original for _, entry in state.every_entry())
        for name in state.installed_names():
            entries = state.entries_of(name)
            stale = []
            for entry in entries:
                if entry.on_module and entry.scope != SCOPE_KORNIA:
                    stale += [f"{m}.{a}" for m, _, a in index.bindings_of(entry.original) if not is_kornia_module(m)]
            known = state.status_of(name)
            if known is not None:
                known.stale = stale
        return _report()
