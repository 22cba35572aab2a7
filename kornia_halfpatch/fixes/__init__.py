"""The registry: one module per fix, named after what it fixes, each exposing ``FIX``.

Order matters where fixes compose: ``feature_patches`` samples in float32 itself, so it comes before
``warp_sampling`` and the half-precision promotion happens once.
Modules are imported lazily (they import torch); importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Dict, List

FIX_NAMES = (
    "utils_grids",
    "feature_descriptors",
    "geometry_subpix",
    "feature_patches",
    "warp_sampling",
    "torch_ops",
    "kornia_dtypes",
    "augmentation_pipeline",
    "filters_conv_hang",
    "warp_geometry",
    "networks_half",
    "networks_cpu_half",
)


def load_fixes() -> List["Fix"]:  # noqa: F821
    return [_load(name) for name in FIX_NAMES]


def _load(name: str) -> "Fix":  # noqa: F821
    try:
        return importlib.import_module(f"{__name__}.{name}").FIX
    except Exception as exc:  # noqa: BLE001 - one broken fix module must not take the others down
        from .._model import Fix

        error = exc  # Python unbinds `exc` when the except block ends; the closure keeps `error`

        def fail(options: Dict[str, object]) -> None:
            raise error

        # The engine evaluates it like any fix: configure() raises, so it is skipped as failed.
        return Fix(name=name, targets=(), configure=fail)


def collect_facts() -> Dict[str, str]:
    """What each fix that says so (``Fix.describe``) does on this machine, for status() and the CLI."""
    from .._isolation import probe_state

    facts: Dict[str, str] = {}
    for fix in load_fixes():
        if fix.describe is None:
            continue
        try:
            with probe_state():
                facts[fix.name] = fix.describe()
        except Exception as exc:  # noqa: BLE001 - status() must not raise
            facts[fix.name] = f"could not tell: {type(exc).__name__}: {exc}"
    return facts
