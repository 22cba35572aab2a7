"""The patch engine: idempotence, undo, alias coverage, import orders, threads, gating."""

import json
import sys
import threading
import warnings

import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import _engine, _environment, testing
from support import UPSTREAM_FIXED, grid_module, needs_old_kornia, run_python

# Kornia modules that bind create_meshgrid by name but are not imported by ``import kornia``.
LATER_MODULES = ["kornia.feature.loftr.utils.supervision", "kornia.nerf.nerf_model"]


@pytest.fixture(autouse=True)
def restore_shim_state():
    """Leave the shim as the test found it (the pytest plugin may have applied it)."""
    with testing.preserved():
        yield


def kornia_bindings(obj):
    return sorted(
        f"{name}.{attr}" for name, _, attr in _engine._bindings_of(obj) if _engine._is_kornia_module(name)
    )


def the_original():
    return kornia_halfpatch.get_original(grid_module().create_meshgrid)


@needs_old_kornia
def test_apply_rebinds_every_kornia_alias_and_revert_restores_identity():
    kornia_halfpatch.revert()
    original = the_original()
    holders = kornia_bindings(original)
    assert len(holders) >= 16, holders  # sixteen modules hold their own binding (0.7.0-0.8.2)
    kornia_halfpatch.apply(only=["meshgrid"])
    replacement = grid_module().create_meshgrid
    assert replacement is not original and kornia_halfpatch.is_patched(replacement)
    assert kornia_bindings(original) == []
    assert set(holders) <= set(kornia_bindings(replacement))
    kornia_halfpatch.revert()
    assert kornia_bindings(original) == holders
    assert kornia_bindings(replacement) == []


@needs_old_kornia
def test_apply_twice_is_apply_once():
    kornia_halfpatch.revert()
    first = kornia_halfpatch.apply(only=["meshgrid"])
    replacement = grid_module().create_meshgrid
    second = kornia_halfpatch.apply(only=["meshgrid"])
    assert grid_module().create_meshgrid is replacement
    assert len(_engine._installed["meshgrid"]) == 2  # create_meshgrid and create_meshgrid3d, once each
    assert first.applied == second.applied == ["meshgrid"]
    kornia_halfpatch.revert()
    assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)


@needs_old_kornia
def test_modules_imported_after_apply_bind_the_fix_and_revert_covers_them():
    code = f"""
        import importlib, kornia, kornia_halfpatch
        from kornia_halfpatch import get_original, is_patched
        kornia_halfpatch.apply()
        found = {{}}
        for name in {LATER_MODULES!r}:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            found[name] = is_patched(module.create_meshgrid)
        kornia_halfpatch.revert()
        import sys
        restored = all(not is_patched(sys.modules[n].create_meshgrid) for n in found)
        print(found, restored)
        assert found and all(found.values()) and restored
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]


@needs_old_kornia
@pytest.mark.parametrize(
    "order",
    [
        "apply; import kornia",
        "import kornia; apply",
        "import kornia.geometry.transform; apply; import kornia",
        "apply; import kornia.geometry.transform",
    ],
)
def test_every_import_and_apply_order_gives_the_same_patched_kornia(order):
    steps = {
        "apply": "report = kornia_halfpatch.apply()",
        "import kornia": "import kornia",
        "import kornia.geometry.transform": "import kornia.geometry.transform",
    }
    body = "\n".join(steps[step.strip()] for step in order.split(";"))
    code = f"""
import json, torch, kornia_halfpatch
{body}
import kornia, kornia.utils, kornia.geometry.transform.homography_warper as hw
from kornia_halfpatch import _engine, get_original
original = get_original(hw.create_meshgrid)
grid = hw.create_meshgrid(2, 300, True, torch.device("cpu"), torch.bfloat16)
expected = original(2, 300, True, torch.device("cpu"), torch.float32).to(torch.bfloat16)
print(json.dumps({{
    "stale": [n for n, _, a in _engine._bindings_of(original) if n.startswith("kornia")],
    "fixed": bool(torch.equal(grid, expected)),
    "status": kornia_halfpatch.status().fixes["meshgrid"].applied,
}}))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"stale": [], "fixed": True, "status": True}


@needs_old_kornia
def test_user_module_bound_before_apply_is_reported_stale_and_warned_once():
    code = """
        import sys, types, warnings
        import kornia
        user = types.ModuleType("user_code")
        exec("from kornia.geometry.transform.homography_warper import create_meshgrid", user.__dict__)
        sys.modules["user_code"] = user
        import kornia_halfpatch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kornia_halfpatch.apply()
            kornia_halfpatch.revert()
            kornia_halfpatch.apply()
        ours = [w for w in caught if issubclass(w.category, kornia_halfpatch.HalfPatchWarning)]
        stale = kornia_halfpatch.status().stale_references
        print(stale, len(ours))
        assert "user_code.create_meshgrid" in stale
        assert len([w for w in ours if "user_code.create_meshgrid" in str(w.message)]) == 1
    """
    result = run_python(code)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]


@needs_old_kornia
def test_eight_threads_applying_and_reverting_leave_a_consistent_state():
    kornia_halfpatch.revert()
    original = the_original()
    holders = kornia_bindings(original)
    errors = []
    barrier = threading.Barrier(8)

    def churn(index):
        try:
            barrier.wait()
            for step in range(20):
                if (index + step) % 2:
                    kornia_halfpatch.apply(only=["meshgrid"])
                else:
                    kornia_halfpatch.revert(["meshgrid"])
                with kornia_halfpatch.patched(only=["meshgrid"]):
                    pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    kornia_halfpatch.apply(only=["meshgrid"])
    replacement = grid_module().create_meshgrid
    assert kornia_bindings(original) == [] and set(holders) <= set(kornia_bindings(replacement))
    kornia_halfpatch.revert()
    assert kornia_bindings(original) == holders
    assert not any(kornia_halfpatch.is_patched(getattr(sys.modules[h.rsplit(".", 1)[0]], h.rsplit(".", 1)[1])) for h in holders)


@needs_old_kornia
def test_patched_and_unpatched_scopes_restore_the_previous_state():
    kornia_halfpatch.revert()
    with kornia_halfpatch.patched(only=["meshgrid"]) as report:
        assert "meshgrid" in report.applied
        assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)
        with kornia_halfpatch.unpatched():
            assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)
        assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)
    assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)
    kornia_halfpatch.apply(only=["meshgrid"])
    with kornia_halfpatch.patched(only=["meshgrid"]):
        pass
    assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)  # was on before the block


def test_unknown_fix_names_are_rejected_with_the_known_list():
    with pytest.raises(ValueError, match="known fixes: meshgrid"):
        kornia_halfpatch.apply(only=["meshgird"])
    with pytest.raises(ValueError, match="unknown kornia_halfpatch fix"):
        kornia_halfpatch.revert(["nope"])


@needs_old_kornia
def test_exclude_and_only_select_fixes(monkeypatch):
    kornia_halfpatch.revert()
    report = kornia_halfpatch.apply(exclude=["meshgrid"])
    assert "meshgrid" not in report.applied
    assert report.fixes["meshgrid"].reason == "turned off by the user (excluded)"
    monkeypatch.setenv(_environment.ENV_EXCLUDE, "meshgrid")
    assert "meshgrid" not in kornia_halfpatch.apply().applied
    assert "meshgrid" in kornia_halfpatch.apply(only=["meshgrid"]).applied  # kwargs beat env


def test_environment_variable_turns_the_whole_shim_off():
    code = """
        import kornia, kornia_halfpatch
        report = kornia_halfpatch.apply(only=["meshgrid"])
        assert report.applied == [], report
        assert "KORNIA_HALFPATCH_DISABLE" in report.fixes["meshgrid"].reason, report
        assert not kornia_halfpatch.is_patched(kornia.geometry.transform.homography_warper.create_meshgrid)
    """
    result = run_python(code, env={"KORNIA_HALFPATCH_DISABLE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.skipif(not UPSTREAM_FIXED, reason="checks the behaviour on kornia >= 0.9.0")
def test_kornia_090_is_left_alone():
    before = {name: id(module.__dict__.get("create_meshgrid")) for name, module, _ in _engine._module_items()}
    report = kornia_halfpatch.apply()
    assert report.applied == []
    for name, fix in report.fixes.items():
        assert fix.reason.startswith("already fixed upstream") or "turned off" in fix.reason, (name, fix.reason)
    after = {name: id(module.__dict__.get("create_meshgrid")) for name, module, _ in _engine._module_items()}
    assert before == after


@needs_old_kornia
def test_unknown_release_is_patched_only_when_the_probe_confirms_the_bug(monkeypatch):
    kornia_halfpatch.revert()
    monkeypatch.setattr(_environment, "kornia_version", lambda: "0.8.9")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = kornia_halfpatch.apply(only=["meshgrid"])
    assert report.fixes["meshgrid"].applied
    assert report.fixes["meshgrid"].reason == "bug confirmed by probe on unknown kornia 0.8.9"


@needs_old_kornia
def test_a_target_with_another_shape_is_skipped_with_a_warning(monkeypatch):
    from kornia_halfpatch.fixes import meshgrid

    changed = meshgrid.FIX.targets[0].__class__(
        meshgrid.FIX.targets[0].candidates, meshgrid.FIX.targets[0].build, ("height", "width", "align_corners")
    )
    fake = meshgrid.FIX.__class__(name="meshgrid", targets=(changed,), probe=meshgrid.FIX.probe)
    monkeypatch.setattr(_environment, "kornia_version", lambda: "0.8.9")
    with testing.use_fixes([fake]):
        with pytest.warns(kornia_halfpatch.HalfPatchWarning, match="expected"):
            report = kornia_halfpatch.apply(only=["meshgrid"])
        assert not report.fixes["meshgrid"].applied
        assert report.fixes["meshgrid"].reason.startswith("unsupported kornia 0.8.9")
        assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)


def test_version_parsing():
    assert _environment.parse_version("2.13.0+cpu") == (2, 13, 0)
    assert _environment.parse_version("0.9.0rc1") == (0, 9, 0)
    assert _environment.parse_version("2.6.0a0+git1234") == (2, 6, 0)
    assert _environment.parse_version("2.14.1") > (2, 14, 0)


def test_status_names_versions_and_every_fix():
    report = kornia_halfpatch.status()
    assert report.kornia_version == kornia.__version__
    assert report.torch_version == torch.__version__
    assert set(report.fixes) == set(kornia_halfpatch.fix_names())
    assert str(report).startswith(f"kornia {kornia.__version__}, torch {torch.__version__}")


def test_importing_the_package_imports_neither_torch_nor_kornia():
    result = run_python(
        """
        import sys, kornia_halfpatch, kornia_halfpatch.pytest_plugin
        print(sorted(m for m in ("torch", "kornia") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
