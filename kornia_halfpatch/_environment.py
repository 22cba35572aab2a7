"""Facts about the installed kornia and torch, read without importing either eagerly.

Importing this module must stay cheap (the pytest plugin imports it in every run), so torch
and kornia are only touched when a function here is called.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from typing import Optional, Tuple

VersionTuple = Tuple[int, ...]

# Releases whose code paths were read and measured when the fixes were written. A release
# outside this set is not patched blindly: each fix must confirm its target's shape and the
# bug's behaviour first (see Fix.probe).
KNOWN_KORNIA_RELEASES = ("0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.7.4", "0.8.0", "0.8.1", "0.8.2", "0.8.3")
# The first upstream release that contains every fix this package backports.
UPSTREAM_FIXED_RELEASE = "0.9.0"


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


def format_version(version: VersionTuple) -> str:
    return ".".join(str(part) for part in version)
