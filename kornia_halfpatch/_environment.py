"""Facts about the installed kornia and torch, read without importing either eagerly.

Importing this module must stay cheap (the pytest plugin imports it in every run), so torch
and kornia are only touched when a function here is called.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from typing import Optional, Tuple

VersionTuple = Tuple[int, ...]

# Releases whose code paths were read and measured when the fixes were written. A release
# outside this set is not patched blindly: each fix must confirm its target's shape and the
# bug's behaviour first (see Fix.check).
KNOWN_KORNIA_RELEASES = ("0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.7.4", "0.8.0", "0.8.1", "0.8.2", "0.8.3")
# The first upstream release that contains every fix this package backports.
UPSTREAM_FIXED_RELEASE = "0.9.0"

ENV_DISABLE = "KORNIA_HALFPATCH_DISABLE"
ENV_ONLY = "KORNIA_HALFPATCH_FIXES"
ENV_EXCLUDE = "KORNIA_HALFPATCH_EXCLUDE"


def parse_version(text: str) -> VersionTuple:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; ``"0.9.0rc1"`` -> ``(0, 9, 0)``."""
    parts = []
    for piece in text.split("+")[0].split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):
            break
    return tuple(parts)


def installed_version(distribution: str) -> Optional[str]:
    module = sys.modules.get(distribution)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# The oldest torch CI tests (tox.ini's torch21 stack); pyproject.toml's bound says the same. On an
# older torch every fix is skipped as unsupported rather than patched untested.
OLDEST_TORCH = (2, 1, 0)


def kornia_version() -> Optional[str]:
    return installed_version("kornia")


def torch_version() -> Optional[str]:
    return installed_version("torch")


def kornia_is_imported() -> bool:
    return "kornia" in sys.modules


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def env_list(name: str) -> Optional[Tuple[str, ...]]:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    return tuple(item.strip() for item in raw.split(",") if item.strip())


# --- fix options read from the environment -------------------------------------------------

# Forces the grid_sample CPU workaround: auto, probe, none, no-kernel or overflow (see
# kornia_halfpatch.fixes.warp_sampling). apply(grid_sample_workaround=...) beats it. Named
# here, not in the fix, because apply() validates option variables without importing any fix
# module (which imports torch).
ENV_GRID_SAMPLE_WORKAROUND = "KORNIA_HALFPATCH_GRID_SAMPLE_WORKAROUND"

# How kornia's learned modules compute float16 on CPU: auto, native or float32 (see
# kornia_halfpatch.fixes.networks_cpu_half). apply(cpu_half=...) beats it; a bad value warns and means auto.
ENV_CPU_HALF = "KORNIA_HALFPATCH_CPU_HALF"

# Environment variables that set a fix's option: apply() validates them before it does anything.
FIX_OPTION_ENV_VARS = (ENV_GRID_SAMPLE_WORKAROUND, ENV_CPU_HALF)


def env_set(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


def format_version(version: VersionTuple) -> str:
    return ".".join(str(part) for part in version)
