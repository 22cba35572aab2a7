"""Free a finished tox environment's torch stack (torch, triton, the nvidia wheels) in CI.

Run by tox after the tests of each stack that takes a CUDA build of torch from PyPI (4-5 GB
installed each; the matrix has fourteen). With ``KORNIA_HALFPATCH_DROP_STACKS=1`` (``.ci/run``
sets it, and ``UV_NO_CACHE=1``, so uv keeps no second copy in its cache) the environment's
``torch``, ``triton`` and ``nvidia`` packages are deleted once its tests have run: at most the two
environments tox runs at a time hold a CUDA stack, instead of every one of them (about 60 GB,
more than some of these machines have free). Without the variable it does nothing, so a
developer's environments stay usable. The environment is marked for recreation (tox sees its
recorded state gone and builds it again on the next run).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

PACKAGES = ("torch", "triton", "nvidia", "functorch", "torchgen")


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def main() -> int:
    if os.environ.get("KORNIA_HALFPATCH_DROP_STACKS", "") in ("", "0"):
        print("drop_stack_packages: KORNIA_HALFPATCH_DROP_STACKS is not set: the environment is kept")
        return 0
    site = Path(sysconfig.get_paths()["purelib"])
    freed = 0
    for entry in sorted(site.iterdir()):
        name = entry.name.lower()
        stem = name.split("-")[0]
        if stem in PACKAGES or stem.startswith("nvidia_") or name in PACKAGES:
            freed += _size(entry)
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()
    # tox records what it installed in the environment: without the record it builds it again.
    environment = Path(sys.prefix)
    info = environment / ".tox-info.json"
    if info.exists():
        info.unlink()
    print(f"drop_stack_packages: freed {freed / 2**30:.1f} GiB of {environment.name}'s torch stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
