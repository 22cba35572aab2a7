"""kornia-halfpatch: backport kornia 0.9.0's half-precision fixes onto kornia 0.7/0.8, in place.

    import kornia_halfpatch
    kornia_halfpatch.apply()      # at program start; returns a Report

float32/float64 results stay bit-for-bit those of the installed kornia; float16/bfloat16 paths
compute the way kornia 0.9.0 does. ``revert()`` undoes everything, ``patched()`` /
``unpatched()`` scope it, ``status()`` tells what is in force and why.
Set ``KORNIA_HALFPATCH_DISABLE=1`` to turn the shim off without touching code.
"""

import importlib as _importlib

from ._safety import outside_compiler as _outside_compiler

# Imported inside a function torch.compile is running (a graph break has handed the rest of the
# frame to eager Python), every module body below would go through dynamo's frame callback. torch
# 2.1's callback reads ``__module__`` of every global a frame names and calls ``.split`` on it;
# wrapt's pure-Python proxy mixin class keeps ``__module__`` as a property, so wrapt's first
# import there raised AttributeError into the user's program. The package's modules (wrapt with
# them) are loaded with frame evaluation off instead; ``from ._engine import`` below then finds
# them loaded.
_outside_compiler(_importlib.import_module)(__name__ + "._engine")

from ._engine import (  # noqa: E402 - loaded above, outside dynamo's frame callback
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
