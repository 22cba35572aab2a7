"""What keeps the shim from breaking the program it runs in: warnings that never raise, errors
described in one line, and passes run eagerly outside dynamo's tracing."""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from typing import Any, Callable, List

logger = logging.getLogger("kornia_halfpatch")


class HalfPatchWarning(UserWarning):
    """Something the shim could not do, or did not do, that a user should know about."""


def warn(message: str, stacklevel: int = 3) -> None:
    """Warn without ever raising: under ``python -W error`` (or a filter that turns
    ``HalfPatchWarning`` into an error) ``warnings.warn`` raises, and the shim must not break the
    program for something it only reports; the message then goes to the log alone."""
    try:
        warnings.warn(message, HalfPatchWarning, stacklevel=stacklevel + 1)
    except Exception:  # noqa: BLE001 - a warning filter set to "error"
        logger.warning("%s (HalfPatchWarning raised by a warnings filter; logged instead)", message)


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def outside_compiler(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``function`` eagerly, never traced by dynamo.

    ``apply()`` called inside a function being compiled by ``torch.compile`` (or the deferred
    hook fired by an import there) was traced by dynamo, which then compiled every probe frame
    on its own: a probe failed with ``InternalTorchDynamoError`` and its fix was skipped. A
    ``torch._dynamo.disable`` wrapper makes dynamo graph-break and run the call with frame
    evaluation off. torch._dynamo is only looked up if something already imported it (nothing
    can be compiling otherwise), so the shim never imports it itself.
    """
    disabled: List[Callable[..., Any]] = []

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not disabled:
            dynamo = sys.modules.get("torch._dynamo")
            disable = getattr(dynamo, "disable", None)
            if disable is None:
                return function(*args, **kwargs)
            try:
                disabled.append(disable(function))
            except Exception:  # noqa: BLE001 - a torch whose disable() differs: run as is
                return function(*args, **kwargs)
        return disabled[0](*args, **kwargs)

    return run


