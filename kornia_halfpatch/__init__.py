"""kornia-halfpatch: backport kornia 0.9.0's half-precision fixes onto kornia 0.7/0.8, in place.

    import kornia_halfpatch
    kornia_halfpatch.apply()      # at program start; returns a Report

float32/float64 results stay bit-for-bit those of the installed kornia; float16/bfloat16 paths
compute the way kornia 0.9.0 does. ``revert()`` undoes everything, ``patched()`` /
``unpatched()`` scope it, ``status()`` tells what is in force and why.
Set ``KORNIA_HALFPATCH_DISABLE=1`` to turn the shim off without touching code.
"""

from ._engine import (
    HalfPatchWarning,
    applied_fixes,
    apply,
    fix_names,
    get_original,
    is_patched,
    patched,
    revert,
    status,
    unpatched,
)
from ._model import FixStatus, Report, TargetStatus, Verdict

__version__ = "0.1.0"

# Fix, Target and the row kinds (kornia_halfpatch._model) are not public: there is no public
# way to register a fix, so they stay importable for this package and its tests only.
__all__ = [
    "FixStatus",
    "HalfPatchWarning",
    "Report",
    "TargetStatus",
    "Verdict",
    "applied_fixes",
    "apply",
    "fix_names",
    "get_original",
    "is_patched",
    "patched",
    "revert",
    "status",
    "unpatched",
]
