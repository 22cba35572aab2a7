"""Pickle references of kornia-scoped replacements (engine scope "kornia").

A kornia-scoped replacement stands in for another library's function (torch's ``grid_sample``)
in kornia's modules only; torch's module keeps its own function. With the original's
``__module__``/``__qualname__`` it could not pickle: pickle checks at dump time that the name
resolves to the object itself, and ``torch.nn.functional.grid_sample`` is torch's function
("not the same object as torch.nn.functional.grid_sample"), so ``pickle.dumps
(kornia.core.map_coordinates)`` failed after ``apply()``. The engine names such a replacement
after an attribute of this module instead; the attribute (a module ``__getattr__``, PEP 562)
resolves to the kornia-scoped replacement installed in the loading process, or to the original
function where none is (the shim not applied there). Names are identifiers (``_`` -> ``_u``,
``.`` -> ``_d``, module/qualname separator ``_c``), reversible without any registry, so a
process that never applied the shim decodes them too.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional, Tuple

from ._installed import every_entry
from ._model import SCOPE_KORNIA

_ESCAPES = {"u": "_", "d": ".", "c": ":"}


def _escape(text: str) -> str:
    return text.replace("_", "_u").replace(".", "_d")


def reference_name(module: str, qualname: str) -> str:
    """The attribute of this module that resolves to the kornia-scoped ``module.qualname``."""
    return f"{_escape(module)}_c{_escape(qualname)}"


def home_name(original: Any, path: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
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


def kornia_scoped_replacement(module: str, qualname: str) -> Any:
    """The installed kornia-scoped replacement of ``module.qualname``, or None (read without the
    lock: pickle calls this from any thread, possibly while another holds the lock)."""
    for _, entry in every_entry():
        if entry.scope == SCOPE_KORNIA and home_name(entry.original, entry.path) == (module, qualname):
            return entry.replacement
    return None


def _decode(name: str) -> Tuple[str, str]:
    decoded = []
    position = 0
    while position < len(name):
        char = name[position]
        if char == "_":
            code = name[position + 1 : position + 2]
            if code not in _ESCAPES:
                raise ValueError(name)
            decoded.append(_ESCAPES[code])
            position += 2
        else:
            decoded.append(char)
            position += 1
    module, separator, qualname = "".join(decoded).partition(":")
    if not separator or not module or not qualname:
        raise ValueError(name)
    return module, qualname


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        module_name, qualname = _decode(name)
    except ValueError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    replacement = kornia_scoped_replacement(module_name, qualname)
    if replacement is not None:
        return replacement
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
