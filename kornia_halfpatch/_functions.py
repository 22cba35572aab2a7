"""What a replacement is generated from and named after: the Python function behind an original
(a static or class method's, a ``@torch.jit.script`` function's). Imports nothing of the package,
so the engine, the code generator and the identity module can all use it."""

from __future__ import annotations

import importlib
import types
from typing import Any, Tuple


def python_function_of(original: Any) -> Any:
    """The Python function a wrapper of ``original`` is generated from: a static or class
    method's function, and a ``@torch.jit.script`` function's own (a ScriptFunction has no Python
    signature, annotations or globals, but keeps its function for dynamo as
    ``_torchdynamo_inline``: kornia 0.8.3's sampson_epipolar_distance). The wrapper still calls
    ``original`` itself, so the release's compiled code runs."""
    function = getattr(original, "__func__", original)
    if type(function).__name__ == "ScriptFunction":
        inline = getattr(function, "_torchdynamo_inline", None)
        if isinstance(inline, types.FunctionType):
            return inline
    return function


def has_own_signature(function: Any) -> bool:
    """A plain Python function whose ``inspect.signature`` follows from its own code, defaults and
    annotations (no ``__signature__`` or ``__wrapped__`` to read it from instead)."""
    return (
        isinstance(function, types.FunctionType)
        and "__signature__" not in function.__dict__
        and "__wrapped__" not in function.__dict__
    )


def resolve_path(module: Any, path: str) -> Tuple[Any, str, Any]:
    """``(parent, attribute, original)`` of the dotted ``path`` inside ``module`` (a module, or a
    module name, imported if need be), as ``wrapt.resolve_path`` finds it: on a class the raw
    attribute of the class in its MRO that defines it (a staticmethod or classmethod object, not
    the bound function getattr gives). ImportError or AttributeError where nothing is there.
    Written out here so that apply() and ``import kornia_halfpatch`` do not import wrapt (a
    third of the package's import time), which only the deferred apply() needs."""
    if isinstance(module, str):
        module = importlib.import_module(module)
    parent: Any = None
    original: Any = module
    attribute = ""
    for attribute in path.split("."):
        parent = original
        original = _attribute_of(parent, attribute)
    return parent, attribute, original


def _attribute_of(parent: Any, attribute: str) -> Any:
    if isinstance(parent, type):
        for cls in parent.__mro__:
            namespace = vars(cls)
            if attribute in namespace:
                return namespace[attribute]
    return getattr(parent, attribute)
