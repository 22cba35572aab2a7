"""The deferred apply(): ``apply()`` before ``import kornia`` records its selection
(``_installed.defer``) and registers, once, a wrapt post-import hook that runs it inside the
user's ``import kornia``. The pass itself is the engine's, handed in as ``run``, so this module
never imports the engine."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from ._installed import lock, take_pending
from ._safety import describe_exception, logger, outside_compiler, warn

Run = Callable[[Tuple[str, ...], Dict[str, str], Dict[str, Any]], None]  # (selection, off, options)

_run: List[Run] = []  # the engine's pass, given at the first registration


@outside_compiler
def _on_kornia_imported(module: Any) -> None:
    """The deferred apply(), run by wrapt's post-import hook inside the user's ``import kornia``:
    whatever happens here must not make that import fail."""
    try:
        with lock:
            pending: Optional[Tuple[Tuple[str, ...], Dict[str, Any]]] = take_pending()
            if pending is None:
                return  # revert() ran before kornia was imported
            selection, options = pending
            _run[0](selection, {}, options)
    except Exception as exc:  # noqa: BLE001
        logger.warning("deferred apply() failed: %s", describe_exception(exc), exc_info=True)
        warn(f"kornia_halfpatch: the deferred apply() failed ({describe_exception(exc)}); kornia is unpatched")


def run_when_kornia_is_imported(run: Run) -> None:
    """Register the hook that runs ``run`` on the deferred selection (once per process)."""
    if not _run:
        # wrapt only here: it is a third of the package's import time, and only an apply() that
        # comes before ``import kornia`` needs its post-import hooks.
        import wrapt

        _run.append(run)
        wrapt.register_post_import_hook(_on_kornia_imported, "kornia")
