"""Wrappers generated from the original's signature: plain functions every torch mode compiles.

A row of a fix table ("promote this function for half inputs") needs a replacement that
TorchScript can compile. TorchScript rejects ``*args``/``**kwargs`` and compiles a function from
its source text, so a generic closure will not do: the wrapper's source is written out here
with the original's own parameter list and annotations, executed, and registered in
``linecache`` under a unique file name (the technique torch.fx uses for its generated
``forward``), so ``inspect.getsource`` and with it ``torch.jit.script`` read it back. dynamo
inlines it like any function; ``torch.jit.trace`` records what it runs.

The generated function's globals are a copy of the original's module globals (so the
original's string annotations, ``"Tensor"``, resolve as they do for the original) plus the
original itself and the scriptable helpers below, under ``_halfpatch_`` names. Defaults are
not written into the source: TorchScript takes them from the function object, and the engine
gives the wrapper the original's ``__defaults__`` and signature (``_identity.give_identity``).

Limits: ``*args``/``**kwargs`` and positional-only parameters are refused (UnsupportedSignature,
so the row's fix fails at build and is left out). A method row's wrapper calls the original
with ``self`` explicitly, which TorchScript cannot compile: use method rows only where the
original method is not scriptable either (SIFTDescriptor/DenseSIFTDescriptor assign submodules
in ``forward``); a scriptable ``forward`` needs a hand-written target (feature_descriptors's
SOSNet/HyNet/HardNet).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import inspect
import itertools
import json
import linecache
import marshal
import sys
import textwrap
import threading
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import _precision as precision
from . import _probe_cache as probe_cache
from ._functions import has_own_signature
from ._torch_compat import is_compiling
from ._functions import python_function_of  # noqa: F401 - also used by the fixes and tests through here

HALF_DTYPE_NAMES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# A per-output rule: "narrow" (floating outputs to the triggering half dtype) or "float32"
# (kept as the original computed it in float32: 0.9.0 keeps some geometry/responses in float32).
NARROW = "narrow"
FLOAT32 = "float32"
# A row's rule under torch.autocast (a float32 trigger, autocast on in a half dtype of the row):
# "float32", the float32 call outside autocast with its outputs as computed (kornia functions);
# "narrow", the same call narrowed to autocast's dtype (a torch op autocast would return in half);
# None, the row does not act under autocast.
AUTOCAST_FLOAT32 = "float32"
AUTOCAST_NARROW = "narrow"
AUTOCAST_RULES = (AUTOCAST_FLOAT32, AUTOCAST_NARROW, None)


class UnsupportedSignature(TypeError):
    """The original's signature cannot be written out as a TorchScript-compatible wrapper."""


# --------------------------------------------------------------------------------------------
# Scriptable helpers the generated code calls (TorchScript compiles called module functions)


def _widen(x: torch.Tensor) -> torch.Tensor:
    # Widening half to float32 is exact: the original then computes on the very same values.
    # A non-tensor (kornia's own tests pass floats) goes to the original, which raises its own
    # TypeError; TorchScript folds the isinstance of a Tensor to True.
    if isinstance(x, torch.Tensor) and (x.dtype == torch.float16 or x.dtype == torch.bfloat16):
        return x.float()
    return x


def _widen_optional(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if x is None:
        return x
    return _widen(x)


def _widen_list(xs: List[torch.Tensor]) -> List[torch.Tensor]:
    return [_widen(x) for x in xs]


def _narrow(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # One rounding, at the end; integer and boolean outputs (masks, indices) are left alone.
    if x.is_floating_point():
        return x.to(dtype)
    return x


def _narrow_optional(x: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    if x is None:
        return x
    return _narrow(x, dtype)


def _narrow_list(xs: List[torch.Tensor], dtype: torch.dtype) -> List[torch.Tensor]:
    return [_narrow(x, dtype) for x in xs]


def _narrow_tensor_or_pair(
    x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    # A result annotated "Tensor | tuple[Tensor, Tensor]" (conv_soft_argmax3d: output_value=True
    # returns the pair): each tensor narrowed once.
    if isinstance(x, torch.Tensor):
        return _narrow(x, dtype)
    return (_narrow(x[0], dtype), _narrow(x[1], dtype))


HELPERS = {
    # Which half dtype autocast gives the trigger (None: off, or not float32), whether autocast is
    # on for its device, and the context turning it off there (kornia_halfpatch._precision). Only
    # in branches TorchScript does not compile (torch.jit.is_scripting()).
    "_halfpatch_autocast_half": precision.autocast_half,
    "_halfpatch_autocast_on": precision.autocast_on,
    "_halfpatch_autocast_off": precision.autocast_off,
    # The float32 evaluation of a half call (eager only): inside it kornia's depthwise
    # convolutions may take a faster float32 layout (the half result is held to 1 half ulp of
    # the release's float32 result narrowed, not to its float32 bits).
    "_halfpatch_float32_evaluation": precision.FLOAT32_EVALUATION,
    "_halfpatch_is_compiling": is_compiling,
    "_halfpatch_widen": _widen,
    "_halfpatch_widen_optional": _widen_optional,
    "_halfpatch_widen_list": _widen_list,
    "_halfpatch_narrow": _narrow,
    "_halfpatch_narrow_optional": _narrow_optional,
    "_halfpatch_narrow_list": _narrow_list,
    "_halfpatch_narrow_tensor_or_pair": _narrow_tensor_or_pair,
}


# --------------------------------------------------------------------------------------------
# Annotations: what kind of value a parameter or result is, and its source text


TENSOR, OPTIONAL_TENSOR, TENSOR_LIST, OTHER = "tensor", "optional_tensor", "tensor_list", "other"
TENSOR_OR_PAIR = "tensor_or_pair"


def _resolved_hints(function: Callable[..., Any]) -> Dict[str, Any]:
    """``typing.get_type_hints(function)``, evaluating each distinct annotation of a module once
    per process (``_evaluated_annotation``): kornia 0.8 writes its annotations as strings
    (``from __future__ import annotations``), the same few (``Tensor``, ``Optional[Tensor]``,
    ``tuple[int, int]``) in hundreds of functions, and evaluating them again for each row was a
    tenth of a first apply(). Any annotation that does not evaluate: every hint of the function
    through ``get_type_hints`` itself (and its Python 3.9 fallback), as before."""
    try:
        return _hints_one_by_one(function)
    except Exception:  # noqa: BLE001 - read the whole function as get_type_hints does, below
        pass
    try:
        return typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - Python 3.9 and "X | Y", below; else classified as OTHER
        pass
    try:
        return _hints_with_pipes_as_unions(function)
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate: classify as OTHER
        return {}


# (id of the globals, the annotation) -> (the globals, the annotation, its evaluated hint). The
# globals and the annotation are kept alive with the entry, so their ids are not reused.
_evaluated: Dict[Tuple[int, Any], Tuple[Dict[str, Any], Any, Any]] = {}
_NO_DEFAULT_NONE_OPTIONAL = sys.version_info >= (3, 11)  # before 3.11 get_type_hints adds Optional for "= None"


def _hints_one_by_one(function: Callable[..., Any]) -> Dict[str, Any]:
    annotations = getattr(function, "__annotations__", None)
    if not isinstance(annotations, dict) or not isinstance(function, types.FunctionType):
        raise TypeError("not a plain function")
    inner = function
    while hasattr(inner, "__wrapped__"):  # get_type_hints reads the innermost function's globals
        inner = inner.__wrapped__
    globalns = getattr(inner, "__globals__", None)
    if not isinstance(globalns, dict):
        raise TypeError("no globals")
    hints = {name: _evaluated_annotation(annotation, globalns) for name, annotation in annotations.items()}
    if not _NO_DEFAULT_NONE_OPTIONAL:
        defaults = _defaults_by_name(function)
        for name, hint in hints.items():
            if name in defaults and defaults[name] is None:
                hints[name] = typing.Optional[hint]
    return hints


def _evaluated_annotation(annotation: Any, globalns: Dict[str, Any]) -> Any:
    key = (id(globalns), annotation if isinstance(annotation, str) else id(annotation))
    known = _evaluated.get(key)
    if known is not None and known[0] is globalns and known[1] is annotation:
        return known[2]
    # get_type_hints of a function whose only annotation is this one, in the same globals: its
    # evaluation rules exactly (None -> NoneType, forward references inside, Python 3.9's pipes).
    probe = types.FunctionType(_ANNOTATED.__code__, globalns, "_halfpatch_annotated")
    probe.__annotations__ = {"value": annotation}
    try:
        hint = typing.get_type_hints(probe)["value"]
    except Exception:  # noqa: BLE001 - Python 3.9 and "X | Y"
        hint = _hints_with_pipes_as_unions(probe)["value"]
    _evaluated[key] = (globalns, annotation, hint)
    return hint


def _ANNOTATED(value):  # type: ignore[no-untyped-def]  # noqa: N802 - the code object of _evaluated_annotation's probes
    return value


def _defaults_by_name(function: types.FunctionType) -> Dict[str, Any]:
    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = function.__defaults__ or ()
    named = dict(zip(positional[len(positional) - len(defaults):], defaults))
    named.update(function.__kwdefaults__ or {})
    return named


class _PipesToUnions(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        items = ast.Tuple(elts=[node.left, node.right], ctx=ast.Load())
        return ast.Subscript(value=ast.Name(id="_halfpatch_Union", ctx=ast.Load()), slice=items, ctx=ast.Load())


def _hints_with_pipes_as_unions(function: Callable[..., Any]) -> Dict[str, Any]:
    """``typing.get_type_hints`` for string annotations written ``X | Y`` (kornia 0.8's, under
    ``from __future__ import annotations``), which Python 3.9 cannot evaluate: each is rewritten
    as ``Union[X, Y]`` and evaluated by ``get_type_hints`` itself, on a copy of the function, so
    its rules (``None`` for ``type(None)``, Optional for a ``None`` default before 3.11) hold."""
    annotations = dict(getattr(function, "__annotations__", {}) or {})
    for name, annotation in annotations.items():
        if isinstance(annotation, str) and "|" in annotation:
            tree = _PipesToUnions().visit(ast.parse(annotation, mode="eval"))
            annotations[name] = ast.unparse(ast.fix_missing_locations(tree))
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__annotations__ = annotations
    namespace = dict(function.__globals__)
    namespace["_halfpatch_Union"] = typing.Union
    return typing.get_type_hints(copy, globalns=namespace)


# ``X | Y`` annotations evaluate to types.UnionType from Python 3.10 on; Python 3.9 has neither.
_UNION_TYPE = getattr(types, "UnionType", None)


def _is_union(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Union:
        return True
    return _UNION_TYPE is not None and isinstance(annotation, _UNION_TYPE)


def classify(annotation: Any) -> str:
    if annotation is torch.Tensor:
        return TENSOR
    if _is_union(annotation):
        args = typing.get_args(annotation)
        if len(args) == 2 and type(None) in args and torch.Tensor in args:
            return OPTIONAL_TENSOR
        if len(args) == 2 and torch.Tensor in args:
            other = args[1] if args[0] is torch.Tensor else args[0]
            if tuple_items(other) == (torch.Tensor, torch.Tensor):
                return TENSOR_OR_PAIR
    if typing.get_origin(annotation) in (list, List) and typing.get_args(annotation) == (torch.Tensor,):
        return TENSOR_LIST
    return OTHER


def tuple_items(annotation: Any) -> Optional[Tuple[Any, ...]]:
    """The item annotations of a fixed-length ``Tuple[...]`` result, else None."""
    if typing.get_origin(annotation) in (tuple, Tuple):
        args = typing.get_args(annotation)
        if args and args[-1] is not Ellipsis:
            return args
    return None


# What a generated wrapper's globals hold beyond the original's module globals and the helpers
# (base_namespace), as a plan records it: (key, kind, argument). "module": torch or typing where
# the module binds the name to None; "typing": a typing name the annotations use; "default": the
# plain original's default of that parameter; "guard": the row's guard; "evaluate": the row's
# cheaper float32 evaluation, by its "module:function" reference; "object": any other object (an
# annotation's class), which is not kept on disk.
Binding = Tuple[str, str, Any]
_KEPT_BINDING_KINDS = ("module", "typing", "default", "guard", "evaluate")


def _load_reference(reference: str) -> Any:
    import importlib

    module, _, name = reference.partition(":")
    value: Any = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


class _Names:
    """Objects an annotation refers to, bound to names in the generated globals; each binding is
    recorded (``bindings``) so that a plan makes the same globals again."""

    def __init__(self, namespace: Dict[str, Any]) -> None:
        self.namespace = namespace
        self.bindings: List[Binding] = []

    def bind_module(self, name: str) -> None:
        if self.namespace.get(name) is None:
            self.namespace[name] = torch if name == "torch" else typing
            self.bindings.append((name, "module", name))

    def bind(self, obj: Any) -> str:
        for name in ("torch", "typing"):
            self.bind_module(name)
        if obj is torch.Tensor and self.namespace.get("torch") is torch:
            return "torch.Tensor"
        if isinstance(obj, type) and obj.__module__ == "builtins":
            return obj.__qualname__
        if isinstance(obj, type) and obj.__module__ == "torch" and getattr(torch, obj.__name__, None) is obj:
            if self.namespace.get("torch") is torch:
                return f"torch.{obj.__name__}"  # torch.dtype, torch.device
        key = f"_halfpatch_type_{len(self.namespace)}"
        self.set(key, "object", obj, obj)
        return key

    def bind_typing(self, name: str) -> str:
        value = getattr(typing, name)
        if self.namespace.setdefault(name, value) is not value:
            raise UnsupportedSignature(f"the original's module binds {name!r} to something other than typing.{name}")
        self.bindings.append((name, "typing", name))
        return name

    def set(self, key: str, kind: str, argument: Any, value: Any) -> None:
        self.namespace[key] = value
        self.bindings.append((key, kind, argument))


def annotation_source(annotation: Any, names: _Names) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation  # resolved in the copied globals, as for the original
    if annotation is None or annotation is type(None):
        return "None"
    if _is_union(annotation):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return f"{names.bind_typing('Optional')}[{annotation_source(rest[0], names)}]"
        return f"{names.bind_typing('Union')}[{', '.join(annotation_source(a, names) for a in args)}]"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal and args and all(isinstance(a, str) for a in args):
        return "str"  # TorchScript has no Literal; the original checks the value itself
    generic = {list: "List", tuple: "Tuple", dict: "Dict"}.get(origin)
    if generic is not None and args:
        return f"{names.bind_typing(generic)}[{', '.join(annotation_source(a, names) for a in args)}]"
    if origin is not None:
        raise UnsupportedSignature(f"annotation {annotation!r}")
    return names.bind(annotation)


# --------------------------------------------------------------------------------------------
# Source generation and registration


_counter = itertools.count()
_counter_lock = threading.Lock()


def _register_source(source: str, label: str) -> str:
    with _counter_lock:
        number = next(_counter)
    filename = f"<kornia_halfpatch generated {label} #{number}>"
    # mtime None: linecache.checkcache keeps the entry (it has no file to compare with).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return filename


def define(
    source: str, name: str, namespace: Dict[str, Any], label: str, code: Optional[types.CodeType] = None
) -> Callable[..., Any]:
    """Define the function ``name`` of ``source`` in ``namespace``: ``code`` if given (the
    source's compiled code, from a plan), else compiled (kept on disk, ``_compiled``)."""
    filename = _register_source(source, label)
    exec(_with_filename(code or _compiled(source), filename), namespace)  # noqa: S102 - our own generated code
    return namespace[name]


_PLACEHOLDER_FILENAME = "<kornia_halfpatch generated>"


def _compiled(source: str) -> types.CodeType:
    """``compile(source)``, kept on disk by the source's hash for the next process
    (``_probe_cache``; compiling the rows' wrappers was a fifth of a first apply())."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    return probe_cache.remembered(
        f"compiled:{digest}", lambda: _compile(source), _encode_code, _decode_code, by_settings=False
    )


def _compile(source: str) -> types.CodeType:
    return compile(source, _PLACEHOLDER_FILENAME, "exec")


def _encode_code(code: types.CodeType) -> str:
    return base64.b64encode(marshal.dumps(code)).decode("ascii")


def _decode_code(stored: Any) -> types.CodeType:
    code = marshal.loads(base64.b64decode(stored))
    if not isinstance(code, types.CodeType) or code.co_filename != _PLACEHOLDER_FILENAME:
        raise TypeError("not generated code")
    return code


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and the code objects it holds (the function's), named after ``filename``."""
    constants = tuple(_with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=constants)


# id(function) -> (function, what its signature is read from, the signature): a wrapper's
# generation reads the original's signature five times, and apply() adopts it once more.
_signatures: Dict[int, Tuple[Any, Tuple[Any, ...], inspect.Signature]] = {}


def signature_of(function: Any) -> inspect.Signature:
    """``inspect.signature(function)``, kept while a plain function's code, defaults and
    annotations are the same objects (and it has no ``__signature__``/``__wrapped__``)."""
    if not has_own_signature(function):
        return inspect.signature(function)
    source = (function.__code__, function.__defaults__, function.__kwdefaults__, function.__annotations__)
    known = _signatures.get(id(function))
    if known is not None and known[0] is function and all(a is b for a, b in zip(known[1], source)):
        return known[2]
    signature = inspect.signature(function)
    _signatures[id(function)] = (function, source, signature)
    return signature


# id(signature) -> (signature, its parameters): a wrapper's generation asks four times.
_parameters: Dict[int, Tuple[inspect.Signature, Tuple[inspect.Parameter, ...]]] = {}


def parameters_of(function: Callable[..., Any]) -> List[inspect.Parameter]:
    signature = signature_of(function)
    known = _parameters.get(id(signature))
    if known is not None and known[0] is signature:
        return list(known[1])
    parameters = tuple(signature.parameters.values())
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise UnsupportedSignature(f"{function.__qualname__} takes *{parameter.name}")
    _parameters[id(signature)] = (signature, parameters)  # the signature is kept: its id stays its own
    return list(parameters)


def signature_source(function: Callable[..., Any], names: _Names) -> Tuple[str, str]:
    """``(parameter list, return annotation)`` source text of ``function``'s signature."""
    pieces: List[str] = []
    marked_keyword_only = False
    for parameter in parameters_of(function):
        if parameter.kind == parameter.KEYWORD_ONLY and not marked_keyword_only:
            pieces.append("*")
            marked_keyword_only = True
        text = parameter.name
        annotation = annotation_source(parameter.annotation, names)
        if annotation:
            text += f": {annotation}"
        if parameter.default is not parameter.empty:
            # Placeholder only: TorchScript and Python take the defaults from the function object.
            text += f" = _halfpatch_default_{parameter.name}"
            key = f"_halfpatch_default_{parameter.name}"
            if has_own_signature(function):
                names.set(key, "default", parameter.name, parameter.default)  # the function's own default
            else:
                names.set(key, "object", parameter.default, parameter.default)
        if parameter.kind == parameter.POSITIONAL_ONLY:
            raise UnsupportedSignature(f"{function.__qualname__}: positional-only parameter {parameter.name}")
        pieces.append(text)
    signature = signature_of(function)
    returns = annotation_source(signature.return_annotation, names)
    return ", ".join(pieces), (f" -> {returns}" if returns else "")


def call_source(function: Callable[..., Any], argument: Callable[[inspect.Parameter], str]) -> str:
    parts = []
    for parameter in parameters_of(function):
        value = argument(parameter)
        parts.append(value if parameter.kind != parameter.KEYWORD_ONLY else f"{parameter.name}={value}")
    return ", ".join(parts)


def base_namespace(original: Callable[..., Any]) -> Dict[str, Any]:
    function = python_function_of(original)
    namespace = dict(getattr(function, "__globals__", {}))
    # A copy of the module's globals is not the module: dynamo imports f_globals["__name__"] to
    # read a global it inlines, so with the original module's name it looked for
    # "_halfpatch_original" on the real module and failed (a kornia function compiled with a
    # row's wrapper inside). Without a name it keeps these globals by identity instead.
    namespace.pop("__name__", None)
    namespace.update(HELPERS)
    namespace["_halfpatch_original"] = original
    namespace.setdefault("torch", torch)
    return namespace


# --------------------------------------------------------------------------------------------
# Plans: what a generated wrapper is made of, kept on disk for the next process


class Plan(typing.NamedTuple):
    """A generated wrapper before it exists: its name, its source, and what its globals hold
    beyond ``base_namespace`` (``Binding``). Generating one reads the original's signature, its
    type hints and writes the source (half of a warm first apply(): 114 rows); a plain original's
    plan is kept on disk (``_probe_cache``) and every process makes its wrapper from the plan
    (``_realized``), the first one included, so a kept plan gives what a new one gives."""

    name: str
    source: str
    bindings: Tuple[Binding, ...]
    code: Optional[types.CodeType] = None  # the source compiled, where the plan is kept with it


def _planned(kind: str, function: Any, arguments: List[Any], generate: Callable[[], Plan]) -> Plan:
    """``generate()``'s plan, read from the cache if one is kept for this kind of wrapper, these
    row arguments and this original: its code (``_probe_cache.fingerprint``) and its annotations
    (not part of its code; their text, evaluated in the module's globals as the original's are)."""
    if not has_own_signature(function):
        return generate()
    try:
        annotations = sorted((name, repr(value)) for name, value in function.__annotations__.items())
        what = "plan:" + json.dumps([kind, arguments, annotations])
    except Exception:  # noqa: BLE001 - arguments or annotations without a lasting text: not kept
        return generate()

    def generate_with_code() -> Plan:
        # The plan keeps its compiled code (one answer to read in the next process, not two).
        plan = generate()
        return plan._replace(code=_compile(plan.source))

    return probe_cache.remembered(what, generate_with_code, _encode_plan, _decode_plan, originals=[function], by_settings=False)


def _encode_plan(plan: Plan) -> List[Any]:
    if any(kind not in _KEPT_BINDING_KINDS for _, kind, _ in plan.bindings):
        raise TypeError("the plan binds an object")  # kept in memory only, as generated
    if plan.code is None:
        raise TypeError("a plan is kept with its code")
    return [plan.name, plan.source, [list(binding) for binding in plan.bindings], _encode_code(plan.code)]


def _decode_plan(stored: Any) -> Plan:
    name, source, bindings, code = stored
    if not isinstance(name, str) or not isinstance(source, str):
        raise TypeError("not a plan")
    kept = []
    for key, kind, argument in bindings:
        if not isinstance(key, str) or kind not in _KEPT_BINDING_KINDS or not isinstance(argument, (str, type(None))):
            raise TypeError("not a plan's binding")
        kept.append((key, kind, argument))
    return Plan(name, source, tuple(kept), _decode_code(code))


def _realized(plan: Plan, original: Any, function: Any, guard: Any, label: str) -> Callable[..., Any]:
    """The wrapper of ``plan``: its source defined in ``base_namespace(original)`` with the
    plan's bindings made again from this original and row."""
    namespace = base_namespace(original)
    names = _Names(namespace)
    defaults: Optional[Dict[str, Any]] = None
    for key, kind, argument in plan.bindings:
        if kind == "module":
            names.bind_module(argument)
        elif kind == "typing":
            names.bind_typing(argument)
        elif kind == "default":
            if defaults is None:
                defaults = _defaults_by_name(function)
            namespace[key] = defaults[argument]
        elif kind == "guard":
            namespace[key] = guard
        elif kind == "evaluate":
            namespace[key] = _load_reference(argument)
        elif kind == "object":
            namespace[key] = argument
        else:
            raise ValueError(f"unknown binding {kind!r}")
    return define(plan.source, plan.name, namespace, label or f"{function.__module__}.{function.__qualname__}", plan.code)


def dtype_condition(variable: str, dtypes: Sequence[str], *, is_dtype: bool = False) -> str:
    """Source of "``variable``'s dtype is one of ``dtypes``" (``is_dtype``: the variable is a dtype)."""
    value = variable if is_dtype else f"{variable}.dtype"
    return " or ".join(f"{value} == torch.{name}" for name in dtypes)


def _finish(function: Callable[..., Any], source: str, namespace: Dict[str, Any], label: str) -> Callable[..., Any]:
    # The defaults its signature shows are written into the source; the engine gives the wrapper
    # the original's own default objects with the rest of its identity (_identity.give_identity).
    return define(source, function.__name__, namespace, label or f"{function.__module__}.{function.__qualname__}")


# --------------------------------------------------------------------------------------------
# The generated wrappers of the row kinds


def cheaper_evaluation(function: Any) -> Optional[Callable[..., Any]]:
    """The ``evaluate`` a promoted replacement built by ``promote_wrapper`` runs for half inputs
    (its own namespace binds it), or None for any other function: how a fix learns that a kornia
    function its evaluation calls is evaluated so too."""
    namespace = getattr(function, "__globals__", None)
    if not isinstance(namespace, dict) or "_halfpatch_original" not in namespace:
        return None
    return namespace.get("_halfpatch_evaluate")


def promote_wrapper(
    original: Callable[..., Any],
    *,
    trigger: Optional[str] = None,
    half: Sequence[str] = ("float16", "bfloat16"),
    outputs: Optional[Sequence[str]] = None,
    device: Optional[str] = None,
    guard: Optional[Callable[..., bool]] = None,
    guard_arguments: Sequence[str] = (),
    autocast: Optional[str] = AUTOCAST_FLOAT32,
    half_inputs: bool = True,
    evaluate: Optional[str] = None,
    evaluate_float32: bool = False,
    label: str = "",
) -> Callable[..., Any]:
    """``original`` run in float32 where half arithmetic would reach it: when the ``trigger``
    tensor argument (default: the first tensor parameter) has a dtype in ``half`` (and is on
    ``device``, if given), every half tensor argument is widened to float32, the original runs,
    and each floating output is narrowed to the trigger's dtype (or kept in float32 where
    ``outputs`` says ``"float32"``); under autocast the original runs with autocast off for the
    trigger's device type, and with the ``"float32"`` autocast rule its outputs stay float32.

    Under ``torch.autocast`` in one of the ``half`` dtypes (``autocast`` not None), a float32
    trigger takes the same float32 path: the original runs on the widened arguments with autocast
    off for that device type, so it is the float32 call outside autocast, and its outputs are
    kept as that call returns them (``"float32"``) or narrowed once to autocast's dtype
    (``"narrow"``: a torch op whose autocast output is half). Otherwise the original runs on the
    arguments as given: float32/float64 stay bit for bit.

    ``evaluate_float32``: the ``evaluate`` gives the release's float32 values bit for bit, so a
    float32 trigger inside the shim's float32 evaluation of a half call (``FLOAT32_EVALUATION``:
    an augmentation's widened band) takes it too; a user's float32 call never does."""
    function = python_function_of(original)
    for name in half:
        if name not in HALF_DTYPE_NAMES:
            raise ValueError(f"half dtype {name!r}: choose from {', '.join(HALF_DTYPE_NAMES)}")
    if autocast not in AUTOCAST_RULES:
        raise ValueError(f"autocast rule {autocast!r}: choose from {AUTOCAST_RULES}")
    if not half_inputs and autocast is None:
        raise ValueError("a row that takes neither half inputs nor autocast's half does nothing")
    arguments = [trigger, list(half), None if outputs is None else list(outputs), device, guard is not None,
                 list(guard_arguments), autocast, half_inputs, evaluate, evaluate_float32]
    if evaluate_float32 and evaluate is None:
        raise ValueError("evaluate_float32 needs an evaluate")
    plan = _planned(
        "promote", function, arguments,
        lambda: _promote_plan(original, function, trigger, half, outputs, device, guard, guard_arguments, autocast,
                              half_inputs, evaluate, evaluate_float32),
    )
    return _realized(plan, original, function, guard, label)


def _promote_plan(
    original: Callable[..., Any],
    function: Any,
    trigger: Optional[str],
    half: Sequence[str],
    outputs: Optional[Sequence[str]],
    device: Optional[str],
    guard: Optional[Callable[..., bool]],
    guard_arguments: Sequence[str],
    autocast: Optional[str],
    half_inputs: bool,
    evaluate: Optional[str] = None,
    evaluate_float32: bool = False,
) -> Plan:
    hints = _resolved_hints(function)
    parameters = parameters_of(function)
    kinds = {p.name: classify(hints.get(p.name, p.annotation)) for p in parameters}
    if trigger is None:
        trigger = next((name for name, kind in kinds.items() if kind == TENSOR), None)
    if trigger is None or kinds.get(trigger) != TENSOR:
        raise UnsupportedSignature(f"{function.__qualname__}: no tensor parameter {trigger!r} to decide on")

    namespace = base_namespace(original)
    names = _Names(namespace)
    params, returns = signature_source(function, names)
    widen = {TENSOR: "_halfpatch_widen({})", OPTIONAL_TENSOR: "_halfpatch_widen_optional({})", TENSOR_LIST: "_halfpatch_widen_list({})"}
    plain_call = call_source(function, lambda p: p.name)
    widened_call = call_source(function, lambda p: widen[kinds[p.name]].format(p.name) if kinds[p.name] in widen else p.name)

    result = hints.get("return", signature_of(function).return_annotation)
    items = tuple_items(result)
    rules = list(outputs) if outputs is not None else None

    def narrowed(expression: str, annotation: Any, rule: str) -> str:
        if rule == FLOAT32:
            return expression
        kind = classify(annotation)
        if kind == TENSOR:
            return f"_halfpatch_narrow({expression}, _halfpatch_dtype)"
        if kind == OPTIONAL_TENSOR:
            return f"_halfpatch_narrow_optional({expression}, _halfpatch_dtype)"
        if kind == TENSOR_LIST:
            return f"_halfpatch_narrow_list({expression}, _halfpatch_dtype)"
        if kind == TENSOR_OR_PAIR:
            return f"_halfpatch_narrow_tensor_or_pair({expression}, _halfpatch_dtype)"
        return expression

    if items is not None:
        rules = rules or [NARROW] * len(items)
        if len(rules) != len(items):
            raise ValueError(f"{function.__qualname__} returns {len(items)} values; outputs lists {len(rules)} rules")
        parts = [narrowed(f"_halfpatch_out[{i}]", item, rule) for i, (item, rule) in enumerate(zip(items, rules))]
        result_source = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    elif result is None or result is type(None):
        result_source = "_halfpatch_out"
    else:
        rules = rules or [NARROW]
        if len(rules) != 1:
            raise ValueError(f"{function.__qualname__} returns one value; outputs lists {len(rules)} rules")
        if classify(result) == OTHER and rules[0] == NARROW:
            raise UnsupportedSignature(f"{function.__qualname__}: result annotation {result!r} is not a tensor")
        result_source = narrowed("_halfpatch_out", result, rules[0])
    # A non-tensor argument goes to the original untouched, so kornia raises its own error
    # ("Not a Tensor type"), not an AttributeError from reading .dtype here (kornia's own
    # test_exception tests, float32). TorchScript folds the check for a Tensor parameter.
    condition = f"isinstance({trigger}, torch.Tensor) and ({dtype_condition(trigger, half)})"
    where = ""
    if device is not None:
        where += f" and {trigger}.device.type == {device!r}"
    if guard is not None:
        # A further scriptable predicate on some arguments (e.g. the kernel's size).
        names.set("_halfpatch_guard", "guard", None, guard)
        where += f" and _halfpatch_guard({', '.join(guard_arguments)})"
    if where:
        condition = f"({condition}){where}"
    # The float32 path turns autocast off for the trigger's device (else autocast narrows the
    # widened arguments again at the first matmul or convolution). TorchScript runs without
    # autocast and compiles none of it (torch.jit.is_scripting() is resolved when it compiles).
    source = f"def {function.__name__}({params}){returns}:\n"
    evaluated = ""
    if evaluate is not None:
        # The row's cheaper float32 evaluation of the same function (eager, half inputs, outside
        # autocast): it takes the original, the trigger's dtype and the arguments as given, and
        # returns the result narrowed, or None where it does not take these arguments.
        if items is not None or rules not in (None, [NARROW]) or classify(result) != TENSOR:
            raise UnsupportedSignature(f"{function.__qualname__}: a cheaper evaluation takes one narrowed tensor result")
        names.set("_halfpatch_evaluate", "evaluate", evaluate, _load_reference(evaluate))
        # Not while torch.jit.trace records: a trace keeps the tiles of the traced shape.
        evaluated = (
            f"                    if not torch.jit.is_tracing():\n"
            f"                        _halfpatch_out = _halfpatch_evaluate(_halfpatch_original, _halfpatch_dtype, {plain_call})\n"
            f"                        if _halfpatch_out is not None:\n"
            f"                            return _halfpatch_out\n"
        )
    if half_inputs:
        # Under autocast a kornia function's float32 computation returns float32, as autocast's
        # own float32 ops do (a half activation reaching a precision-sensitive op comes back
        # float32 there: cdist, softmax); a torch op stood in for keeps its input's dtype.
        autocast_result = "_halfpatch_out" if autocast == AUTOCAST_FLOAT32 else result_source
        source += (
            f"    if {condition}:\n"
            f"        _halfpatch_dtype = {trigger}.dtype\n"
            f"        if not torch.jit.is_scripting():\n"
            f"            if _halfpatch_autocast_on({trigger}):\n"
            f"                with _halfpatch_autocast_off({trigger}.device.type):\n"
            f"                    _halfpatch_out = _halfpatch_original({widened_call})\n"
            f"                return {autocast_result}\n"
            f"            if not _halfpatch_is_compiling():\n"
            f"                with _halfpatch_float32_evaluation:\n"
            f"{evaluated}"
            f"                    _halfpatch_out = _halfpatch_original({widened_call})\n"
            f"                return {result_source}\n"
            f"        _halfpatch_out = _halfpatch_original({widened_call})\n"
            f"        return {result_source}\n"
        )
    if evaluate_float32:
        # A float32 band of the shim's own float32 evaluation of a half call: the same float32
        # values, computed the cheaper way (never a user's float32 call: depth 0 there).
        source += (
            f"    if not torch.jit.is_scripting():\n"
            f"        if _halfpatch_float32_evaluation.depth > 0 and isinstance({trigger}, torch.Tensor) "
            f"and {trigger}.dtype == torch.float32{where} and not _halfpatch_is_compiling() "
            f"and not torch.jit.is_tracing():\n"
            f"            _halfpatch_out = _halfpatch_evaluate(_halfpatch_original, torch.float32, {plain_call})\n"
            f"            if _halfpatch_out is not None:\n"
            f"                return _halfpatch_out\n"
        )
    if autocast is not None:
        # Half reaching the computation through autocast: a float32 trigger, autocast on for its
        # device in one of the row's half dtypes. The float32 call outside autocast, its outputs
        # as computed (a kornia function: the reference autocast is held to) or narrowed to
        # autocast's dtype (a torch op autocast would have returned in it).
        autocast_condition = (
            f"_halfpatch_autocast is not None and ({dtype_condition('_halfpatch_autocast', half, is_dtype=True)}){where}")
        narrow = f"            _halfpatch_dtype = _halfpatch_autocast\n" if autocast == AUTOCAST_NARROW else ""
        source += (
            f"    if not torch.jit.is_scripting():\n"
            f"        _halfpatch_autocast = _halfpatch_autocast_half({trigger})\n"
            f"        if {autocast_condition}:\n"
            f"{narrow}"
            f"            with _halfpatch_autocast_off({trigger}.device.type):\n"
            f"                _halfpatch_out = _halfpatch_original({widened_call})\n"
            f"            return {result_source if narrow else '_halfpatch_out'}\n"
        )
    source += f"    return _halfpatch_original({plain_call})\n"
    return Plan(function.__name__, source, tuple(names.bindings))


def widen_dtypes_wrapper(
    original: Callable[..., Any], *, tensor: str, accepted: str, gains: Sequence[str] = ("float16", "bfloat16"), label: str = ""
) -> Callable[..., Any]:
    """A dtype validator ``original(tensor, accepted, ...)`` whose accepted list gains the half
    dtypes in ``gains`` wherever it accepts float32: a half input passes, any other dtype gets
    the validator's own error, unchanged."""
    function = python_function_of(original)
    parameters = {p.name for p in parameters_of(function)}
    for required in (tensor, accepted):
        if required not in parameters:
            raise UnsupportedSignature(f"{function.__qualname__} has no parameter {required!r}")
    namespace = base_namespace(original)
    names = _Names(namespace)
    params, returns = signature_source(function, names)
    call = call_source(function, lambda p: "_halfpatch_accepted" if p.name == accepted else p.name)
    condition = f"isinstance({tensor}, torch.Tensor) and ({dtype_condition(tensor, gains)})"
    source = (
        f"def {function.__name__}({params}){returns}:\n"
        f"    _halfpatch_accepted = {accepted}\n"
        f"    if ({condition}) and torch.float32 in {accepted} and {tensor}.dtype not in {accepted}:\n"
        f"        _halfpatch_accepted = list({accepted}) + [{tensor}.dtype]\n"
        f"    return _halfpatch_original({call})\n"
    )
    return _finish(function, source, namespace, label)


# --------------------------------------------------------------------------------------------
# EditSource rows: the release's own function, a few lines edited


class SourceEditMismatch(LookupError):
    """The release's source of a function does not hold an edit's text exactly once."""


def _edited_source_of(original: Any, edits: Sequence[Tuple[str, str]]) -> Tuple[types.FunctionType, str]:
    """(the function whose source is edited, its source with ``edits`` made). The function is
    the innermost one of a decorated original: its source starts at its decorators, so executing
    the edited source decorates the edited function as the release decorated its own."""
    function = inspect.unwrap(python_function_of(original))
    if not isinstance(function, types.FunctionType):
        raise SourceEditMismatch(f"{original!r} is not a Python function")
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as exc:
        raise SourceEditMismatch(f"the source of {function.__qualname__} is not available: {exc}") from None
    for old, new in edits:
        for candidate, replacement in ((old, new), (_swap_quotes(old), _swap_quotes(new))):
            count = source.count(candidate)
            if count:
                break
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times"
            raise SourceEditMismatch(f"{function.__qualname__}: {old.strip().splitlines()[0]!r} {where}")
        start = source.index(candidate)
        line_start = source.rfind("\n", 0, start) + 1
        indentation = source[line_start:start]
        indentation = indentation[: len(indentation) - len(indentation.lstrip())]
        source = source.replace(candidate, replacement.replace("\n", "\n" + indentation))
    return function, source


def _swap_quotes(text: str) -> str:
    return text.translate(str.maketrans({'"': "'", "'": '"'}))


# (id(original), edits, helpers) -> (original, its code, the answer): reading, editing and
# compiling the source is 4-5 ms a row, asked at every apply() (two per testing.isolated() block).
_edit_problems: Dict[Tuple[Any, ...], Tuple[Any, Any, Optional[str]]] = {}


def source_edit_problem(
    original: Any, edits: Sequence[Tuple[str, str]], helpers: Sequence[str] = ()
) -> Optional[str]:
    """None where every edit applies to the installed release's source and every global name the
    edited code reads exists in the release's module (or is a helper), else what differs. Kept
    while the original has the same code object."""
    key = (id(original), tuple(edits), tuple(helpers))
    code = getattr(inspect.unwrap(python_function_of(original)), "__code__", None)
    known = _edit_problems.get(key)
    if known is not None and known[0] is original and known[1] is code:
        return known[2]
    problem = _source_edit_problem(original, edits, helpers)
    _edit_problems[key] = (original, code, problem)
    return problem


def _source_edit_problem(original: Any, edits: Sequence[Tuple[str, str]], helpers: Sequence[str]) -> Optional[str]:
    try:
        function, source = _edited_source_of(original, edits)
    except SourceEditMismatch as exc:
        return f"the release's source differs: {exc}"
    try:
        code = compile(source, _PLACEHOLDER_FILENAME, "exec")
    except SyntaxError as exc:
        return f"the edited source does not compile: {exc}"
    import builtins

    missing = sorted(
        name for name in _global_names(code) - set(_global_names(function.__code__)) - set(helpers)
        if name not in function.__globals__ and not hasattr(builtins, name)
    )
    if missing:
        return f"the edited lines read {', '.join(missing)}, which {function.__module__} does not define"
    return None


def _global_names(code: types.CodeType) -> set:
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names


def edited_function(
    original: Any, edits: Sequence[Tuple[str, str]], label: str = "", helpers: Optional[Dict[str, Any]] = None
) -> Callable[..., Any]:
    """``original`` recompiled from its release's source with ``edits``, in the release's own module
    globals (names the engine rebinds there, module views included, reach it as they reach the
    original), with the original's closure cells (a method's ``__class__`` for ``super()``) and
    decorators. The edited source is registered in ``linecache`` so that ``inspect.getsource``
    and TorchScript read it."""
    function, source = _edited_source_of(original, edits)
    helpers = dict(helpers or {})
    for name in helpers:
        if not name.startswith("_halfpatch_") or name in function.__code__.co_names + function.__code__.co_varnames:
            raise ValueError(f"helper {name!r}: a helper's name starts with _halfpatch_ and is not the release's")
    free = function.__code__.co_freevars + tuple(helpers)
    if free:
        # The original's cells and the helpers, passed to a factory whose parameters the edited
        # function closes over.
        body = textwrap.indent(source, "    ")
        source = f"def _halfpatch_edited({', '.join(free)}):\n{body}    return {function.__name__}\n"
    filename = _register_source(source, label or f"edited {function.__module__}.{function.__qualname__}")
    scope: Dict[str, Any] = {}
    # The module's own globals (not a copy), and the definitions kept in ``scope``: nothing is
    # added to the module.
    exec(_with_filename(compile(source, _PLACEHOLDER_FILENAME, "exec"), filename), function.__globals__, scope)  # noqa: S102
    if free:
        cells = [cell.cell_contents for cell in function.__closure__ or ()] + list(helpers.values())
        edited = scope["_halfpatch_edited"](*cells)
    else:
        edited = scope[function.__name__]
    inner = inspect.unwrap(edited)
    inner.__qualname__ = function.__qualname__
    if inner is not edited:
        edited.__qualname__ = function.__qualname__
    return edited
