"""Which fixes a call selects: ``only``/``exclude`` given in code beat the environment
variables beat the defaults; the caller's options checked before anything is patched."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple

from . import _environment as environment
from ._installed import fix_names, registry


def select(only: Optional[Iterable[str]], exclude: Optional[Iterable[str]]) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """Which fixes to apply, and why each other one is off. kwargs beat env vars beat defaults."""
    known = fix_names()
    if only is None and exclude is None:
        only_t = environment.env_list(environment.ENV_ONLY)
        exclude_t = environment.env_list(environment.ENV_EXCLUDE)
    else:  # a selection in code replaces the one from the environment as a whole
        only_t = tuple(only) if only is not None else None
        exclude_t = tuple(exclude) if exclude is not None else None
    for given in (only_t or ()) + (exclude_t or ()):
        if given not in known:
            raise ValueError(f"unknown kornia_halfpatch fix {given!r}; known fixes: {', '.join(known)}")
    off: Dict[str, str] = {}
    if environment.env_flag(environment.ENV_DISABLE):
        return (), {name: f"turned off by the user ({environment.ENV_DISABLE} is set)" for name in known}
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
    """The caller's own settings: unknown option names and bad values (given to apply() or set
    in a fix's environment variable) raise, clearly, in apply() itself, before anything is
    patched or deferred."""
    if not options and not any(environment.env_set(name) for name in environment.FIX_OPTION_ENV_VARS):
        return  # nothing to check: no fix module (and so no torch) is imported for nothing
    fixes = registry()
    accepted = {option for fix in fixes for option in fix.options}
    for option in options:
        if option not in accepted:
            raise TypeError(
                f"unknown kornia_halfpatch option {option!r}; fixes take: {', '.join(sorted(accepted)) or 'none'}"
            )
    for fix in fixes:
        if fix.name in selection and fix.validate_options is not None:
            fix.validate_options({key: value for key, value in options.items() if key in fix.options})
