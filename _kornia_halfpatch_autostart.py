"""Start-up hook of kornia-halfpatch: ``KORNIA_HALFPATCH_AUTO=1`` applies the shim in every process.

``kornia_halfpatch_autostart.pth`` (installed at the root of site-packages) runs at interpreter
start-up. It only tests whether ``KORNIA_HALFPATCH_AUTO`` is in the environment; if so it imports
this module (standard library only) and calls :func:`install`, which puts a one-shot finder on
``sys.meta_path``. Nothing else happens until the process imports kornia: then, right after
kornia's ``__init__`` has run, ``kornia_halfpatch.apply()`` patches it, before any line of the
user's code can bind a kornia function. Processes that never import kornia never import
kornia_halfpatch, wrapt or torch.

A top-level module rather than ``kornia_halfpatch._autostart``: importing anything inside the
package would import the package's ``__init__`` (the engine and wrapt) in every Python process.

This hook never raises into the program: a failure to apply is reported as a warning.
"""

import os
import sys

ENV_AUTO = "KORNIA_HALFPATCH_AUTO"
ENV_DISABLE = "KORNIA_HALFPATCH_DISABLE"
_OFF = ("", "0", "false", "no", "off")


def _flag(name: str) -> bool:
    # The same reading as kornia_halfpatch._environment.env_flag, without importing the package.
    return os.environ.get(name, "").strip().lower() not in _OFF


def _apply() -> None:
    try:
        import kornia_halfpatch

        kornia_halfpatch.apply()
    except Exception as error:  # noqa: BLE001  (the user's program must run on, unpatched)
        import warnings

        warnings.warn(f"kornia-halfpatch: {ENV_AUTO} is set but apply() failed: {error!r}", RuntimeWarning, stacklevel=2)


class _LoaderThenApply:
    """kornia's own loader, then ``apply()`` once kornia's ``__init__`` has finished."""

    def __init__(self, loader, finder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        # kornia sees its real loader (importlib.resources and friends read it).
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._finder.remove()
        _apply()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ApplyWhenKorniaIsImported:
    """``sys.meta_path`` finder: wraps the loader of the top-level ``kornia`` module.

    It stays on ``sys.meta_path`` until kornia's ``__init__`` has run: a mere look-up
    (``importlib.util.find_spec("kornia")``, the usual "is it installed?" test of libraries and
    engines) returns a spec without executing it, and the later import must still be caught.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "kornia":
            return None
        # The finders after this one, as the import system would ask them (no recursion into
        # importlib.util.find_spec, which would ask this finder again).
        spec = None
        for finder in list(sys.meta_path):
            if isinstance(finder, _ApplyWhenKorniaIsImported):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _LoaderThenApply(spec.loader, self)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def install() -> None:
    """Arrange for ``kornia_halfpatch.apply()`` when kornia is imported (or now, if it already is)."""
    if not _flag(ENV_AUTO) or _flag(ENV_DISABLE):
        return
    if "kornia" in sys.modules:
        _apply()
        return
    if not any(isinstance(finder, _ApplyWhenKorniaIsImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ApplyWhenKorniaIsImported())
