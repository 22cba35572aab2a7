"""Where things live (issue 15): fix modules hold a table, a probe and maths; demonstrations
and the subprocess crash runners live in kornia_halfpatch/demos and load only when asked."""

import importlib
import sys

from kornia_halfpatch import _model
from kornia_halfpatch.fixes import FIX_NAMES, load_fixes
from support import run_python


def test_fix_modules_hold_no_demonstration_and_no_subprocess():
    for name in FIX_NAMES:
        module = importlib.import_module(f"kornia_halfpatch.fixes.{name}")
        assert "subprocess" not in vars(module), name
        assert not hasattr(module, "demonstrate"), name


def test_every_demonstration_is_named_and_loads_only_when_asked():
    result = run_python(
        """
        import sys, kornia_halfpatch.fixes as fixes
        fixes.load_fixes()
        print(sorted(m for m in sys.modules if m.startswith("kornia_halfpatch.demos")))
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
    for fix in load_fixes():
        assert fix.demonstration is not None, fix.name
        assert callable(_model.load(fix.demonstration)), fix.name
    assert "kornia_halfpatch.demos.warp_sampling" in sys.modules
