"""Which fixes a call selects: ``only``/``exclude`` given in code beat the environment
variables beat the defaults; the caller's options checked before anything is patched."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple

from . import _options as options_manifest
from ._installed import fix_names, registry
from ._safety import warn


def select(only: Optional[Iterable[str]], exclude: Optional[Iterable[str]]) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """Which fixes to apply, and why each other one is off. kwargs beat env vars beat defaults."""
    known = fix_names()
    if only is None and exclude is None:
        only_t = options_manifest.read_names(options_manifest.FIXES)
        exclude_t = options_manifest.read_names(options_manifest.EXCLUDE)
    else:  # a selection in code replaces the one from the environment as a whole
        only_t = tuple(only) if only is not None else None
        exclude_t = tuple(exclude) if exclude is not None else None
    for given in (only_t or ()) + (exclude_t or ()):
        if given not in known:
            raise ValueError(f"unknown kornia_halfpatch fix {given!r}; known fixes: {', '.join(known)}")
    off: Dict[str, str] = {}
    if options_manifest.read_flag(options_manifest.DISABLE):
        return (), {name: f"turned off by the user ({options_manifest.DISABLE.variable} is set)" for name in known}
    selected = []
    for name in known:
        if only_t is not None and name not in only_t:
            off[name] = "turned off by the user (not selected)"
        elif exclude_t is not None and name in exclude_t:
            off[name] = "turned off by the user (excluded)"
        else:
            selected.append(name)
    return tuple(selected), off


def check_options(options: Dict[str, Any], selection: Tuple[str, ...]) -> None:
    """The caller's own settings, checked against the options manifest (``_options``) in apply()
    itself, before anything is patched or deferred: an unknown keyword raises TypeError, a bad
    value (given to apply() or set in a variable) raises ValueError or warns, as its option says."""
    manifest = options_manifest.fix_keywords()
    unknown = [option for option in options if option not in manifest]
    if unknown:
        # Options of fixes outside the manifest (the tests' own fixes) are their fixes' to declare.
        accepted = set(manifest) | {option for fix in registry() for option in fix.options}
        for option in unknown:
            if option not in accepted:
                raise TypeError(
                    f"unknown kornia_halfpatch option {option!r}; fixes take: {', '.join(sorted(accepted)) or 'none'}"
                )
    options_manifest.check(options, selection, lambda message: warn(message, stacklevel=5))
