"""What a replacement is generated from and named after: the Python function behind an original
(a static or class method's, a ``@torch.jit.script`` function's). Imports nothing of the package,
so the engine, the code generator and the identity module can all use it."""

from __future__ import annotations

import types
from typing import Any


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
