"""Ship the start-up hook ``kornia_halfpatch_autostart.pth`` at the root of site-packages.

Everything else is declared in pyproject.toml. A ``.pth`` file only runs if it sits directly in
site-packages, and setuptools puts only packages and modules into a wheel, so ``build_py`` copies
it into the wheel's root, for both build paths pip uses:

* ``pip install .`` and wheels (PEP 517 ``build_wheel``): the root is ``build_lib``;
* ``pip install -e .`` (PEP 660 ``build_editable``): setuptools zips the unpacked editable wheel,
  which is the ``install`` command's ``install_lib`` (``build_lib`` is a scratch directory there);
  the hook then sits beside setuptools' own ``__editable__`` path hook.

Being inside the wheel, the file is listed in the installed RECORD, so ``pip uninstall`` removes it.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP_HOOK = "kornia_halfpatch_autostart.pth"


class build_py_with_startup_hook(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            wheel_root = self.get_finalized_command("install").install_lib
        else:
            wheel_root = self.build_lib
        self.copy_file(STARTUP_HOOK, str(Path(wheel_root, STARTUP_HOOK)), preserve_mode=False)


setup(cmdclass={"build_py": build_py_with_startup_hook})
