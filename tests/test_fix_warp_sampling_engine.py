"""The engine pieces warp_sampling added, tested on a stand-in target (torch's interpolate):
scope="kornia" targets (aliases, module views found in bytecode, kornia modules imported later,
undo) and apply() options (validation, reinstall, kept across unpatched() and patched())."""

import sys
import textwrap
import types

import pytest
import torch
import torch.nn.functional as F

import kornia
import kornia_halfpatch
from kornia_halfpatch import _bindings, _installed, _kornia_scope, _model, testing
from support import needs_old_kornia, run_python

NAME = "warp_sampling"
REAL_INTERPOLATE = F.interpolate


@pytest.fixture(autouse=True)
def restore_shim_state():
    with testing.isolated(only=()):
        yield


@pytest.fixture
def stand_in():
    """A fix under this fix's name whose only target is torch's interpolate, kornia scope."""
    calls = []

    def build(original):
        def interpolate(input: torch.Tensor, *args, **kwargs):
            calls.append(input.shape)
            return original(input, *args, **kwargs)

        return interpolate

    target = _model.Target(("torch.nn.functional:interpolate",), build, scope=_model.SCOPE_KORNIA)
    fix = _model.Fix(name=NAME, targets=(target,))
    with testing.use_fixes([fix]):
        yield calls


def views_in_kornia():
    return sorted(
        f"{name}.{attribute}"
        for name, module, namespace in _bindings.module_items()
        if _bindings.is_kornia_module(name)
        for attribute, value in list(namespace.items())
        if type(value) is types.ModuleType and "__kornia_halfpatch_view_of__" in value.__dict__
    )


@needs_old_kornia
def test_kornia_scope_rebinds_kornia_routes_and_leaves_torch_alone(stand_in):
    from kornia.geometry.transform import pyramid

    report = kornia_halfpatch.apply(only=[NAME])
    assert NAME in report.applied
    assert F.interpolate is REAL_INTERPOLATE  # torch's module keeps its function
    assert "kornia.geometry.transform.pyramid.F" in views_in_kornia()
    assert any(r.startswith("kornia.geometry.transform.pyramid.F (view of torch.nn.functional)") for r in report.fixes[NAME].rebound)
    view = pyramid.F
    assert isinstance(view, types.ModuleType) and view is not F
    assert view.pad is F.pad and view.grid_sample is F.grid_sample  # everything else is torch's
    kornia.geometry.transform.pyrdown(torch.rand(1, 1, 8, 8))
    assert stand_in, "kornia's F.interpolate did not reach the replacement"
    REAL_INTERPOLATE(torch.rand(1, 1, 4, 4), size=(2, 2))  # user code: not counted
    count = len(stand_in)
    F.interpolate(torch.rand(1, 1, 4, 4), size=(2, 2))
    assert len(stand_in) == count
    kornia_halfpatch.revert()
    assert views_in_kornia() == []
    assert pyramid.F is F


@needs_old_kornia
def test_views_read_what_the_real_module_gains_later(stand_in):
    from kornia.geometry.transform import pyramid

    kornia_halfpatch.apply(only=[NAME])
    F.__dict__["_halfpatch_added_later"] = 42
    try:
        assert pyramid.F._halfpatch_added_later == 42
    finally:
        del F.__dict__["_halfpatch_added_later"]


LATER_MODULE = '''
import functools
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import interpolate as bound_interpolate

def through_f(x):
    return F.interpolate(x, size=(2, 2))

def through_nn(x):
    return nn.functional.interpolate(x, size=(2, 2))

def through_torch(x):
    return torch.nn.functional.interpolate(x, size=(2, 2))

def through_name(x):
    return bound_interpolate(x, size=(2, 2))

def decorator(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper

class Holder:
    @staticmethod
    @decorator
    def through_method(x):
        return F.interpolate(x, size=(2, 2))

def unrelated(x):
    return torch.zeros(1)
'''


@needs_old_kornia
def test_kornia_modules_imported_after_apply_are_rebound_and_reverted(stand_in, tmp_path, monkeypatch):
    (tmp_path / "_halfpatch_later_module.py").write_text(textwrap.dedent(LATER_MODULE))
    monkeypatch.setattr(kornia, "__path__", [*kornia.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "kornia._halfpatch_later_module", raising=False)
    kornia_halfpatch.apply(only=[NAME])
    import kornia._halfpatch_later_module as later

    try:
        x = torch.rand(1, 1, 4, 4)
        for function in (later.through_f, later.through_nn, later.through_torch, later.through_name, later.Holder.through_method):
            before = len(stand_in)
            function(x)
            assert len(stand_in) == before + 1, function.__name__
        assert later.torch is not torch and later.torch.zeros is torch.zeros  # a view: only its route differs
        assert later.__loader__.__class__.__name__ != "_NotifyingLoader"  # the module sees its real loader
        kornia_halfpatch.revert()
        assert later.F is F and later.nn is torch.nn and later.torch is torch
        assert later.bound_interpolate is REAL_INTERPOLATE
    finally:
        sys.modules.pop("kornia._halfpatch_later_module", None)


@needs_old_kornia
def test_the_import_watcher_leaves_when_nothing_needs_it(stand_in):
    kornia_halfpatch.apply(only=[NAME])
    assert _kornia_scope.watching_kornia_imports()
    kornia_halfpatch.revert()
    assert not _kornia_scope.watching_kornia_imports()


@needs_old_kornia
def test_options_are_kept_by_unpatched_and_restored_by_patched():
    kornia_halfpatch.apply(only=[NAME], grid_sample_workaround="none")
    assert _installed.options_of(NAME) == {"grid_sample_workaround": "none"}
    with kornia_halfpatch.unpatched([NAME]):
        assert NAME not in kornia_halfpatch.applied_fixes()
    assert _installed.options_of(NAME) == {"grid_sample_workaround": "none"}
    first = kornia.geometry.transform.imgwarp.F.grid_sample
    kornia_halfpatch.apply(only=[NAME])  # no options given: the installed fix stays as it is
    assert kornia.geometry.transform.imgwarp.F.grid_sample is first
    with kornia_halfpatch.patched(only=[NAME], grid_sample_workaround="overflow"):
        assert _installed.options_of(NAME) == {"grid_sample_workaround": "overflow"}
        assert kornia.geometry.transform.imgwarp.F.grid_sample is not first  # reinstalled
    assert _installed.options_of(NAME) == {"grid_sample_workaround": "none"}
    assert "forced by apply(grid_sample_workaround=...)" in kornia_halfpatch.status().facts[NAME]
    assert kornia_halfpatch.status().facts[NAME].startswith("none:")


@pytest.mark.slow
@needs_old_kornia
def test_deferred_apply_keeps_its_options():
    code = """
        import sys, kornia_halfpatch
        assert "kornia" not in sys.modules
        kornia_halfpatch.apply(only=["warp_sampling"], grid_sample_workaround="no-kernel")
        import kornia
        line = kornia_halfpatch.status().facts["warp_sampling"]
        assert line.startswith("widen half CPU calls to float32 (no half CPU kernel)"), line
        print("ok")
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
