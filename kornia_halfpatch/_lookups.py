"""What fix modules (and ``_kernels``) may ask about the installed shim, without importing the
engine: the unpatched object behind a replacement, and whether a fix is installed. The engine
answers (``answer_with``) when it is imported, which importing any fix module does first (the
package's ``__init__`` imports it); until then nothing is installed, and the defaults say so.
This keeps the import graph one-way: the engine imports the fixes' declarations, never back."""

from __future__ import annotations

from typing import Any, Callable, List

_answers: List[Callable[..., Any]] = [lambda obj: obj, lambda name: False]


def answer_with(original_of: Callable[[Any], Any], fix_installed: Callable[[str], bool]) -> None:
    _answers[:] = [original_of, fix_installed]


def original_of(obj: Any) -> Any:
    """The unpatched object behind a replacement installed by the shim (``obj`` itself otherwise)."""
    return _answers[0](obj)


def fix_installed(name: str) -> bool:
    """Whether the fix ``name`` is installed now."""
    return _answers[1](name)
