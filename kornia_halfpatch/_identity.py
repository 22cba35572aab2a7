"""A replacement's identity, set in one place (:func:`give_identity`) for every replacement,
generated or hand-written: the original's defaults, name, qualified name, module, docstring and
signature, and the name pickle finds it under."""

from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List, Optional, Tuple

from ._functions import has_own_signature, python_function_of
from ._model import SCOPE_KORNIA
from ._scoped import home_name, reference_name


def _signature(function: Any) -> inspect.Signature:
    """The original's signature, read once while it stays the same (every apply() gives each
    hand-written replacement its original's signature again: two per isolated() block)."""
    from ._codegen import signature_of

    return signature_of(function)


def give_identity(replacement: Any, found: Tuple[Any, str, Any, str], scope: str) -> None:
    """Give a replacement of ``found`` (``(parent, attribute, original, "module:path")``) the
    original's identity, for generated and hand-written replacements alike: its default objects,
    name, qualified name, module, docstring and signature, and the name pickle finds it under.

    Pickle stores a function by reference (``module`` + ``qualname``) and on loading resolves the
    name to whatever the loading process has there (patched or not); with a closure's own
    qualified name (``build_x.<locals>.x``) pickling failed ("Can't pickle local object"), and so
    did every ``functools.partial`` of a patched function sent to a process pool. No
    ``__wrapped__``: ``inspect.getsource`` would follow it and TorchScript would compile the
    original instead.
    """
    parent, attribute, original, path = found
    function = python_function_of(original)
    if isinstance(replacement, types.FunctionType):
        _adopt_names(replacement, original, function, scope, path)
    if inspect.isclass(parent) and attribute not in parent.__dict__:
        # A method the class only inherits (networks_cpu_half's per-class _call_impl): the base
        # class keeps its own function under the original's qualified name, so this class's
        # copy is named after this class, and pickle (by reference) finds it where it is installed.
        replacement.__module__ = parent.__module__
        replacement.__qualname__ = f"{parent.__qualname__}.{attribute}"


def _adopt_names(replacement: Any, original: Any, function: Any, scope: str, path: str) -> None:
    # The original's own default objects. A decorated original (functools.wraps over *args,
    # **kwargs: 0.8.3's jpeg_codec_differentiable) and a builtin have none: a generated wrapper
    # keeps the defaults its signature shows, written into its source, a hand-written one its own.
    for name in ("__defaults__", "__kwdefaults__"):
        value = getattr(function, name, None)
        if value is not None:
            setattr(replacement, name, value)
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(function, name, None)
        if value is not None:
            setattr(replacement, name, value)
    _adopt_signature(replacement, function)
    _set_pickle_reference(replacement, original, scope, path)


def _adopt_signature(replacement: Any, function: Any) -> None:
    """inspect.signature(replacement) == inspect.signature(original): the same parameters, but the
    original's annotation objects (the fix module's may be strings, or a release's narrower
    type). Only where the parameters agree, so that nothing binds arguments differently.
    TorchScript reads the annotations of the replacement's own source, not this.

    Where both are plain functions (their signatures follow from their code, defaults and
    annotations), the replacement takes the original's annotations: inspect.signature then reads
    the original's signature off it, and no Signature is built here (building one per original
    was a tenth of a warm apply())."""
    if has_own_signature(function) and has_own_signature(replacement):
        try:
            same = _parameters_shape(replacement) == _parameters_shape(function)
        except (TypeError, ValueError):
            return
        if same:
            replacement.__annotations__ = dict(function.__annotations__)
        return
    try:
        signature = _signature(function)
        own = _parameters_shape(replacement)
    except (TypeError, ValueError):
        return
    if own == _signature_shape(signature):
        replacement.__signature__ = signature


def parameter_names(function: Any) -> Tuple[str, ...]:
    """The names of ``inspect.signature(function)``'s parameters; read off a plain function's
    code object, without building its Signature."""
    if has_own_signature(function):
        return tuple(name for name, _, _ in _parameters_shape(function))
    return tuple(_signature(function).parameters)


# id(signature) -> (the signature, its parameters' (name, kind, default)): every apply() compares
# each hand-written replacement with its original's signature again (70 in an isolated() cycle).
_signature_shapes: Dict[int, Tuple[inspect.Signature, List[Tuple[str, Any, Any]]]] = {}


def _signature_shape(signature: inspect.Signature) -> List[Tuple[str, Any, Any]]:
    known = _signature_shapes.get(id(signature))
    if known is not None and known[0] is signature:
        return known[1]
    shape = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
    _signature_shapes[id(signature)] = (signature, shape)
    return shape


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
    shape = _shape_of_code(code, defaults, keyword_defaults)
    _shapes[code] = (tuple(defaults), dict(keyword_defaults), shape)
    return shape


_EMPTY = inspect.Parameter.empty


def _shape_of_code(code: types.CodeType, defaults: Tuple[Any, ...], keyword_defaults: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """What ``inspect.signature`` reads of a plain function's parameters, read off its code object
    (inspect builds a Signature of Parameters for each of the 180 replacements of an apply():
    half of adopting their originals' signatures)."""
    names = code.co_varnames
    positional = code.co_argcount
    keyword_only = code.co_kwonlyargcount
    first_default = positional - len(defaults)
    shape: List[Tuple[str, Any, Any]] = []
    for index in range(positional):
        kind = inspect.Parameter.POSITIONAL_ONLY if index < code.co_posonlyargcount else inspect.Parameter.POSITIONAL_OR_KEYWORD
        shape.append((names[index], kind, defaults[index - first_default] if index >= first_default else _EMPTY))
    position = positional + keyword_only
    if code.co_flags & inspect.CO_VARARGS:
        shape.append((names[position], inspect.Parameter.VAR_POSITIONAL, _EMPTY))
        position += 1
    for index in range(positional, positional + keyword_only):
        shape.append((names[index], inspect.Parameter.KEYWORD_ONLY, keyword_defaults.get(names[index], _EMPTY)))
    if code.co_flags & inspect.CO_VARKEYWORDS:
        shape.append((names[position], inspect.Parameter.VAR_KEYWORD, _EMPTY))
    return shape



def _set_pickle_reference(replacement: Any, original: Any, scope: str, path: Optional[str] = None) -> None:
    """Where pickle finds a replacement: at the original's name when it replaces the original
    there, at a ``kornia_halfpatch._scoped`` attribute when it is kornia-scoped (the original's
    home keeps the original, so its name cannot resolve to the replacement; see _scoped)."""
    if not isinstance(replacement, types.FunctionType):
        return
    named = python_function_of(original) if type(original).__name__ == "ScriptFunction" else original
    module, qualname = getattr(named, "__module__", None), getattr(named, "__qualname__", None)
    if module is None or qualname is None:
        return
    if scope == SCOPE_KORNIA:
        home, name = home_name(original, path)
        replacement.__module__, replacement.__qualname__ = "kornia_halfpatch._scoped", reference_name(home, name)
    else:
        replacement.__module__, replacement.__qualname__ = module, qualname
