"""What the hand-written fixes share."""

from __future__ import annotations

from typing import Any


def like(replacement: Any, original: Any) -> Any:
    """The original's defaults and docstring on a hand-written replacement (the engine adds its
    name, qualified name, module and signature when it installs it). No ``__wrapped__``:
    ``inspect.getsource`` would follow it and TorchScript would compile the original instead."""
    replacement.__defaults__ = original.__defaults__
    replacement.__doc__ = original.__doc__
    return replacement
