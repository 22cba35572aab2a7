"""Where things live: fix modules hold a table, a probe and maths; demonstrations
and the subprocess crash runners live in kornia_halfpatch/demos and load only when asked."""

import collections
import importlib
import sys

import pytest

from kornia_halfpatch import _model
from kornia_halfpatch.fixes import FIX_NAMES, load_fixes
from support import run_python

# Where the package's files live: the same on every kornia release.
pytestmark = pytest.mark.release_independent


def test_fix_modules_hold_no_demonstration_and_no_subprocess():
    for name in FIX_NAMES:
        module = importlib.import_module(f"kornia_halfpatch.fixes.{name}")
        assert "subprocess" not in vars(module), name
        assert not hasattr(module, "demonstrate"), name


@pytest.mark.slow
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


def test_no_callable_is_the_target_of_two_fixes():
    """One target, one fix: two wrappers on one function would chain, make the result depend on the
    order of apply/revert, and a scripted caller recursed through both (a kornia_dtypes row on
    torch_ops' fundamental_from_essential exhausted memory in torch.jit.script)."""
    from kornia_halfpatch import fixes

    owners = collections.defaultdict(list)
    for fix in fixes.load_fixes():
        for target in fix.targets:
            target = target.target() if hasattr(target, "target") else target
            for candidate in target.candidates:
                owners[candidate].append(fix.name)
    shared = {candidate: names for candidate, names in owners.items() if len(names) > 1}
    assert shared == {}
