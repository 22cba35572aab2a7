"""``kornia-halfpatch run -- COMMAND [ARGS...]``: COMMAND and every Python process it starts apply the shim.

The launcher sets ``KORNIA_HALFPATCH_AUTO=1`` and replaces itself with COMMAND (``os.execvp``:
same process id, signals and exit status go to COMMAND directly; on Windows, which has no
``exec``, COMMAND runs as a child and its exit code is returned). Each Python process of an
environment where kornia-halfpatch is installed then applies the shim when it imports kornia, via
the start-up hook ``kornia_halfpatch_autostart.pth``. ``KORNIA_HALFPATCH_DISABLE=1`` still wins.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

from ._options import AUTO

ENV_AUTO = AUTO.variable  # KORNIA_HALFPATCH_AUTO
STARTUP_HOOK = "kornia_halfpatch_autostart.pth"

USAGE = "usage: kornia-halfpatch run [--] COMMAND [ARGS...]"


def site_directories() -> List[Path]:
    """The directories whose ``.pth`` files this interpreter runs at start-up."""
    directories = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        directories.append(site.getusersitepackages())
    return [Path(directory) for directory in directories]


def startup_hook_path() -> Optional[Path]:
    """Where this interpreter's start-up hook is installed, or None."""
    for directory in site_directories():
        candidate = directory / STARTUP_HOOK
        if candidate.is_file():
            return candidate
    return None


def run(argv: List[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n{__doc__}")
        return 0
    command = argv[1:] if argv[:1] == ["--"] else list(argv)
    if not command or not command[0]:
        print(f"kornia-halfpatch run: no command given\n{USAGE}", file=sys.stderr)
        return 2
    if startup_hook_path() is None:
        print(
            f"kornia-halfpatch: warning: no {STARTUP_HOOK} in {sys.prefix}'s site-packages; Python processes of "
            "this environment will not apply the shim by themselves (reinstall kornia-halfpatch with pip)",
            file=sys.stderr,
        )
    environment = dict(os.environ)
    environment[ENV_AUTO] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.name == "nt":
            return subprocess.call(command, env=environment)
        os.execvpe(command[0], command, environment)
    except FileNotFoundError:
        print(f"kornia-halfpatch run: command not found: {command[0]}", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"kornia-halfpatch run: permission denied: {command[0]}", file=sys.stderr)
        return 126
    except OSError as error:  # e.g. a file that is not an executable (ENOEXEC)
        print(f"kornia-halfpatch run: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        return 126
    return 0  # not reached: exec does not return
