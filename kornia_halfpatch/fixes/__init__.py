"""The registry: one module per fix, named after what it fixes, each exposing ``FIX``.

Order matters where fixes compose: ``laf_patches`` samples in float32 itself, so it comes before
``grid_sample_cpu`` and the half-precision promotion happens once.
Modules are imported lazily (they import torch); importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Dict, List

FIX_NAMES = (
    "meshgrid",
    "descriptor_norm",
    "quad_interp_solve",
    "laf_patches",
    "grid_sample_cpu",
)


def load_fixes() -> List["Fix"]:  # noqa: F821
    return [importlib.import_module(f"{__name__}.{name}").FIX for name in FIX_NAMES]


def collect_probes() -> Dict[str, str]:
    """Capability probes that fix modules publish (``PROBES`` callables) for status() and the CLI."""
    probes: Dict[str, str] = {}
    for name in FIX_NAMES:
        module = importlib.import_module(f"{__name__}.{name}")
        for key, probe in getattr(module, "PROBES", {}).items():
            probes[key] = probe()
    return probes
