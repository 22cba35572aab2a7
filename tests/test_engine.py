"""The patch engine: idempotence, undo, alias coverage, import orders, threads, gating."""

import contextlib
import importlib
import json
import sys
import threading
import warnings

import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import _bindings, _engine, _environment, _installed, _kornia_scope, _model, _options, testing
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
        f"{name}.{attr}" for name, _, attr in _bindings.bindings_of(obj) if _bindings.is_kornia_module(name)
    )


def the_original():
    return kornia_halfpatch.get_original(grid_module().create_meshgrid)


@needs_old_kornia
def test_apply_rebinds_every_kornia_alias_and_revert_restores_identity():
    kornia_halfpatch.revert()
    original = the_original()
    holders = kornia_bindings(original)
    assert len(holders) >= 16, holders  # sixteen modules hold their own binding (0.7.0-0.8.2)
    kornia_halfpatch.apply(only=["utils_grids"])
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
    first = kornia_halfpatch.apply(only=["utils_grids"])
    replacement = grid_module().create_meshgrid
    second = kornia_halfpatch.apply(only=["utils_grids"])
    assert grid_module().create_meshgrid is replacement
    assert len(_installed.entries_of("utils_grids")) == 2  # create_meshgrid and create_meshgrid3d, once each
    assert first.applied == second.applied == ["utils_grids"]
    kornia_halfpatch.revert()
    assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)


@needs_old_kornia
def test_each_target_is_resolved_once_per_apply(monkeypatch):
    """The gate resolves a fix's targets; building and installing use what it found."""
    from kornia_halfpatch import _engine

    resolved = []
    real = _engine.resolve_path
    with testing.isolated(()):
        monkeypatch.setattr(_engine, "resolve_path", lambda module, path: resolved.append(f"{getattr(module, '__name__', module)}:{path}") or real(module, path))
        report = kornia_halfpatch.apply(only=["utils_grids", "warp_geometry"])
        monkeypatch.undo()
    assert resolved and len(resolved) == len(set(resolved)), sorted(resolved)
    candidates = {c for fix in _installed.registry() if fix.name in report.applied for t in fix.targets for c in t.candidates}
    assert set(resolved) <= candidates


@pytest.mark.slow
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
@pytest.mark.slow
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
from kornia_halfpatch import _bindings, get_original
original = get_original(hw.create_meshgrid)
grid = hw.create_meshgrid(2, 300, True, torch.device("cpu"), torch.bfloat16)
expected = original(2, 300, True, torch.device("cpu"), torch.float32).to(torch.bfloat16)
print(json.dumps({{
    "stale": [n for n, _, a in _bindings.bindings_of(original) if n.startswith("kornia")],
    "fixed": bool(torch.equal(grid, expected)),
    "status": kornia_halfpatch.status().fixes["utils_grids"].applied,
}}))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"stale": [], "fixed": True, "status": True}


@pytest.mark.slow
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


@pytest.mark.slow
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
                    kornia_halfpatch.apply(only=["utils_grids"])
                else:
                    kornia_halfpatch.revert(["utils_grids"])
                with kornia_halfpatch.patched(only=["utils_grids"]):
                    pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    kornia_halfpatch.apply(only=["utils_grids"])
    replacement = grid_module().create_meshgrid
    assert kornia_bindings(original) == [] and set(holders) <= set(kornia_bindings(replacement))
    kornia_halfpatch.revert()
    assert kornia_bindings(original) == holders
    assert not any(kornia_halfpatch.is_patched(getattr(sys.modules[h.rsplit(".", 1)[0]], h.rsplit(".", 1)[1])) for h in holders)


@needs_old_kornia
def test_patched_and_unpatched_scopes_restore_the_previous_state():
    kornia_halfpatch.revert()
    with kornia_halfpatch.patched(only=["utils_grids"]) as report:
        assert "utils_grids" in report.applied
        assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)
        with kornia_halfpatch.unpatched():
            assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)
        assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)
    assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)
    kornia_halfpatch.apply(only=["utils_grids"])
    with kornia_halfpatch.patched(only=["utils_grids"]):
        pass
    assert kornia_halfpatch.is_patched(grid_module().create_meshgrid)  # was on before the block


def test_unknown_fix_names_are_rejected_with_the_known_list():
    with pytest.raises(ValueError, match="known fixes: utils_grids"):
        kornia_halfpatch.apply(only=["meshgird"])
    with pytest.raises(ValueError, match="unknown kornia_halfpatch fix"):
        kornia_halfpatch.revert(["nope"])


@needs_old_kornia
def test_exclude_and_only_select_fixes(monkeypatch):
    kornia_halfpatch.revert()
    report = kornia_halfpatch.apply(exclude=["utils_grids"])
    assert "utils_grids" not in report.applied
    assert report.fixes["utils_grids"].reason == "turned off by the user (excluded)"
    monkeypatch.setenv(_options.EXCLUDE.variable, "utils_grids")
    assert "utils_grids" not in kornia_halfpatch.apply().applied
    assert "utils_grids" in kornia_halfpatch.apply(only=["utils_grids"]).applied  # kwargs beat env



def test_a_fix_has_one_name():
    # The package was never released under other fix names: a name that is not a fix is refused.
    with pytest.raises(ValueError, match="unknown kornia_halfpatch fix 'meshgrid'"):
        kornia_halfpatch.apply(only=["meshgrid"])
    report = kornia_halfpatch.apply()
    with pytest.raises(KeyError):
        report.fixes["meshgrid"]


@pytest.mark.slow
def test_environment_variable_turns_the_whole_shim_off():
    code = """
        import kornia, kornia_halfpatch
        report = kornia_halfpatch.apply(only=["utils_grids"])
        assert report.applied == [], report
        assert "KORNIA_HALFPATCH_DISABLE" in report.fixes["utils_grids"].reason, report
        assert not kornia_halfpatch.is_patched(kornia.geometry.transform.homography_warper.create_meshgrid)
    """
    result = run_python(code, env={"KORNIA_HALFPATCH_DISABLE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.skipif(not UPSTREAM_FIXED, reason="checks the behaviour on kornia >= 0.9.0")
def test_kornia_090_is_left_alone():
    before = {name: id(module.__dict__.get("create_meshgrid")) for name, module, _ in _bindings.module_items()}
    report = kornia_halfpatch.apply()
    assert report.applied == []
    for name, fix in report.fixes.items():
        assert fix.reason.startswith("already fixed upstream") or "turned off" in fix.reason, (name, fix.reason)
    after = {name: id(module.__dict__.get("create_meshgrid")) for name, module, _ in _bindings.module_items()}
    assert before == after


@needs_old_kornia
def test_unknown_release_is_patched_only_when_the_probe_confirms_the_bug(monkeypatch):
    kornia_halfpatch.revert()
    monkeypatch.setattr(_environment, "kornia_version", lambda: "0.8.9")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = kornia_halfpatch.apply(only=["utils_grids"])
    assert report.fixes["utils_grids"].applied
    assert report.fixes["utils_grids"].reason == "bug confirmed by probe on unknown kornia 0.8.9"


@needs_old_kornia
def test_a_torch_older_than_the_oldest_tested_is_refused_with_a_reason(monkeypatch):
    monkeypatch.setattr(_environment, "torch_version", lambda: "2.0.1")
    with testing.isolated(only=()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = kornia_halfpatch.apply(only=["utils_grids"])
        status = report.fixes["utils_grids"]
        assert not status.applied
        assert status.reason == "unsupported torch 2.0.1: kornia-halfpatch is tested on torch >= 2.1.0", status
        assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)


@needs_old_kornia
def test_a_target_with_another_shape_is_skipped_with_a_warning(monkeypatch):
    from kornia_halfpatch.fixes import utils_grids as meshgrid

    changed = meshgrid.FIX.targets[0].__class__(
        meshgrid.FIX.targets[0].candidates, meshgrid.FIX.targets[0].build, ("height", "width", "align_corners")
    )
    fake = meshgrid.FIX.__class__(name="utils_grids", targets=(changed,), probe=meshgrid.FIX.probe)
    monkeypatch.setattr(_environment, "kornia_version", lambda: "0.8.9")
    with testing.use_fixes([fake]):
        with pytest.warns(kornia_halfpatch.HalfPatchWarning, match="expected"):
            report = kornia_halfpatch.apply(only=["utils_grids"])
        assert not report.fixes["utils_grids"].applied
        assert report.fixes["utils_grids"].reason.startswith("unsupported kornia 0.8.9")
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


@pytest.mark.slow
@pytest.mark.release_independent
def test_importing_the_package_imports_neither_torch_nor_kornia():
    result = run_python(
        """
        import sys, kornia_halfpatch, kornia_halfpatch.pytest_plugin
        print(sorted(m for m in ("torch", "kornia") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------
# Kornia-scoped targets of two fixes on one torch module share one view per kornia global


STACKED_MODULE = '''
import torch
import torch.nn.functional as F
from torch import nn


def through_f(x):
    return F.softsign(F.tanhshrink(x))


def through_nn(x):
    return nn.functional.softsign(nn.functional.tanhshrink(x))


def through_torch(x):
    return torch.nn.functional.softsign(torch.nn.functional.tanhshrink(x))


def only_softsign(x):
    return F.softsign(x)
'''
STACKED_NAMES = ("stack_lower", "stack_upper")
REAL_SOFTSIGN, REAL_TANHSHRINK = torch.nn.functional.softsign, torch.nn.functional.tanhshrink


def counting_fix(name, attribute, calls):
    """A fix whose one target is torch.nn.functional.<attribute> for kornia's calls only: the
    replacement counts its calls, then calls torch's function."""

    def build(original):
        def replacement(input: torch.Tensor) -> torch.Tensor:
            calls.append(name)
            return original(input)

        return replacement

    target = _model.Target((f"torch.nn.functional:{attribute}",), build, scope=_model.SCOPE_KORNIA)
    return _model.Fix(name=name, targets=(target,))


@pytest.fixture
def stacked(tmp_path, monkeypatch):
    """Two stand-in fixes (tanhshrink, softsign) and a kornia module reaching both through F, nn
    and torch; yields (module, calls)."""
    (tmp_path / "_halfpatch_stacked_module.py").write_text(STACKED_MODULE)
    monkeypatch.setattr(kornia, "__path__", [*kornia.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "kornia._halfpatch_stacked_module", raising=False)
    import importlib

    module = importlib.import_module("kornia._halfpatch_stacked_module")
    calls = []
    fixes = [counting_fix("stack_lower", "tanhshrink", calls), counting_fix("stack_upper", "softsign", calls)]
    try:
        with testing.use_fixes(fixes):
            yield module, calls
    finally:
        sys.modules.pop("kornia._halfpatch_stacked_module", None)


def reached(module, calls):
    """Which fixes' replacements each route of the module reaches now."""
    x = torch.rand(3)
    found = {}
    for function in (module.through_f, module.through_nn, module.through_torch):
        del calls[:]
        function(x)
        found[function.__name__] = sorted(calls)
    return found


def routes_reach(module, calls, names):
    return reached(module, calls) == {route: sorted(names) for route in ("through_f", "through_nn", "through_torch")}


def real_globals(module):
    return module.F is torch.nn.functional and module.nn is torch.nn and module.torch is torch


@needs_old_kornia
@pytest.mark.parametrize("first", STACKED_NAMES)
def test_two_fixes_share_one_view_and_either_reverts_alone(stacked, first):
    module, calls = stacked
    second = [name for name in STACKED_NAMES if name != first][0]
    kornia_halfpatch.apply(only=[first])
    assert routes_reach(module, calls, [first])
    kornia_halfpatch.apply(only=[second])
    assert routes_reach(module, calls, STACKED_NAMES)
    view = module.F
    assert view.__kornia_halfpatch_view_of__ is torch.nn.functional
    assert module.torch.nn.functional is module.nn.functional  # one view of F, however it is reached
    assert torch.nn.functional.softsign is REAL_SOFTSIGN and torch.nn.functional.tanhshrink is REAL_TANHSHRINK
    for name in (first, second):  # revert either one: the other stays in every route
        kornia_halfpatch.revert([name])
        other = [n for n in STACKED_NAMES if n != name]
        assert routes_reach(module, calls, other), name
        kornia_halfpatch.apply(only=[name])
        assert routes_reach(module, calls, STACKED_NAMES), name
    kornia_halfpatch.revert([first])
    kornia_halfpatch.revert([second])
    assert real_globals(module) and reached(module, calls)["through_f"] == []
    assert _kornia_scope.views_held() == ({}, {})


@needs_old_kornia
def test_only_and_exclude_keep_the_other_fixs_view(stacked):
    module, calls = stacked
    kornia_halfpatch.apply()
    assert routes_reach(module, calls, STACKED_NAMES)
    with kornia_halfpatch.unpatched(["stack_lower"]):
        assert routes_reach(module, calls, ["stack_upper"])
    assert routes_reach(module, calls, STACKED_NAMES)
    kornia_halfpatch.revert()
    kornia_halfpatch.apply(exclude=["stack_upper"])
    assert routes_reach(module, calls, ["stack_lower"])
    with kornia_halfpatch.patched(only=["stack_upper"]):
        assert routes_reach(module, calls, STACKED_NAMES)
    assert routes_reach(module, calls, ["stack_lower"])
    kornia_halfpatch.revert()
    assert real_globals(module)


@needs_old_kornia
def test_a_view_carries_only_what_its_module_reaches_through_it(stacked):
    module, calls = stacked
    kornia_halfpatch.apply()
    # The module reaches both through F; a global reaching one only would carry that one.
    assert module.F.softsign is not REAL_SOFTSIGN and module.F.tanhshrink is not REAL_TANHSHRINK
    assert module.F.relu is torch.nn.functional.relu
    del calls[:]
    module.only_softsign(torch.rand(2))
    assert calls == ["stack_upper"]


@needs_old_kornia
def test_kornia_module_imported_between_two_fixes_gets_both(stacked, tmp_path):
    module, calls = stacked
    kornia_halfpatch.apply(only=["stack_lower"])
    (tmp_path / "_halfpatch_stacked_later.py").write_text(STACKED_MODULE)
    import importlib

    try:
        later = importlib.import_module("kornia._halfpatch_stacked_later")
        assert routes_reach(later, calls, ["stack_lower"])
        kornia_halfpatch.apply(only=["stack_upper"])
        assert routes_reach(later, calls, STACKED_NAMES)
        kornia_halfpatch.revert(["stack_lower"])
        assert routes_reach(later, calls, ["stack_upper"])
        kornia_halfpatch.revert()
        assert real_globals(later)
    finally:
        sys.modules.pop("kornia._halfpatch_stacked_later", None)


@needs_old_kornia
def test_each_module_is_disassembled_once_for_every_scoped_fix(stacked, monkeypatch):
    """One bytecode pass per module: the routes of every kornia-scoped attribute of the registry
    are read together the first time, so a second fix, a revert and a re-apply read nothing."""
    module, calls = stacked
    import dis

    disassembled = []
    real = dis.get_instructions
    own = {f.__code__ for f in (module.through_f, module.through_nn, module.through_torch, module.only_softsign)}

    def counting(code, *args, **kwargs):
        if code in own:
            disassembled.append(code.co_name)
        return real(code, *args, **kwargs)

    _kornia_scope.forget_routes(module.__dict__)
    monkeypatch.setattr(_kornia_scope.dis, "get_instructions", counting)
    kornia_halfpatch.apply(only=["stack_lower"])
    kornia_halfpatch.apply(only=["stack_upper"])
    kornia_halfpatch.revert(["stack_lower"])
    kornia_halfpatch.apply(only=["stack_lower"])
    assert routes_reach(module, calls, STACKED_NAMES)
    assert sorted(disassembled) == sorted(code.co_name for code in own)


@needs_old_kornia
def test_a_view_follows_its_module_when_another_fix_patches_the_module_itself(stacked):
    """grid_sample_everywhere=True replaces torch's function on torch's module: a view made
    before (a snapshot of the module) must show it too, and the original again after revert."""
    module, calls = stacked
    kornia_halfpatch.apply(only=["stack_upper"])
    view = module.F
    everywhere_calls = []

    def build(original):
        def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
            everywhere_calls.append(1)
            return original(input, inplace)

        return relu

    real_relu = torch.nn.functional.relu
    everywhere = _model.Fix(name="everywhere", targets=(_model.Target(("torch.nn.functional:relu",), build),))
    with _installed.registry_of(_installed.registry() + [everywhere]):
        try:
            kornia_halfpatch.apply(only=["everywhere"])
            assert torch.nn.functional.relu is not real_relu
            assert view.relu is torch.nn.functional.relu
            view.relu(torch.rand(2))
            assert everywhere_calls == [1]
            kornia_halfpatch.revert(["everywhere"])
            assert torch.nn.functional.relu is real_relu and view.relu is real_relu
        finally:
            kornia_halfpatch.revert(["everywhere"])


def passthrough_target(attribute):
    """torch.nn.functional.<attribute>, for kornia's calls only, replaced by a function that calls it."""

    def build(original):
        def replacement(input: torch.Tensor) -> torch.Tensor:
            return original(input)

        return replacement

    return _model.Target((f"torch.nn.functional:{attribute}",), build, scope=_model.SCOPE_KORNIA)


def option_fix(name, attribute, options, configured):
    """A fix on torch.nn.functional.<attribute> (kornia's calls only) taking ``options``; records
    what configure() was given, by fix."""

    def configure(given):
        configured.setdefault(name, []).append(dict(given))

    return _model.Fix(name=name, targets=(passthrough_target(attribute),), options=options, configure=configure)


@needs_old_kornia
def test_preserved_restores_every_fix_with_its_own_options_in_as_few_applies_as_they_allow(monkeypatch):
    configured = {}
    fixes = [
        option_fix("first", "tanhshrink", ("shared",), configured),
        option_fix("second", "softsign", ("own",), configured),
        option_fix("third", "hardtanh", ("shared",), configured),
    ]
    with testing.use_fixes(fixes):
        kornia_halfpatch.apply(only=["first"], shared=1)
        kornia_halfpatch.apply(only=["second"], own=2)
        kornia_halfpatch.apply(only=["third"], shared=3)  # "shared" differs from first's: another apply()
        applies = []
        real_apply = _engine.apply_without_report  # apply() without its report, which restoring discards
        monkeypatch.setattr(
            _engine, "apply_without_report",
            lambda only, exclude, options, **reuse: applies.append((only, options)) or real_apply(only, exclude, options, **reuse),
        )
        configured.clear()
        with testing.preserved():
            kornia_halfpatch.revert()
        assert applies == [(["first", "second"], {"shared": 1, "own": 2}), (["third"], {"shared": 3})]
        assert configured == {"first": [{"shared": 1}], "second": [{"own": 2}], "third": [{"shared": 3}]}
        assert {name: _installed.options_of(name) for name in _engine.applied_fixes()} == {
            "first": {"shared": 1}, "second": {"own": 2}, "third": {"shared": 3}
        }


def configured_only_fix(name, attribute, state):
    """A fix taking the option "mode" whose probe never finds its bug (it is configured, never
    installed, like networks_cpu_half on a CPU with native half): ``state["mode"]`` is what its
    configure() was last given, as a fix keeps its options in its module."""

    def configure(given):
        state["mode"] = given.get("mode", "default")

    return _model.Fix(name=name, targets=(passthrough_target(attribute),), options=("mode",), configure=configure,
                      probe=lambda originals: _model.not_needed("stand-in"), probe_cache=False)


@needs_old_kornia
@pytest.mark.parametrize("block", ["isolated", "patched", "preserved"])
def test_a_block_gives_every_fix_its_options_back_installed_or_not(block):
    """A fix the block configured that ends up not installed (its probe finds no bug) keeps its
    module's options; leaving the block gives it the ones it had, so two blocks in a row with
    different options each see only their own, and the next apply() the caller's."""
    state = {}
    fix = configured_only_fix("moded", "tanhshrink", state)

    def enter(mode):
        if block == "isolated":
            return testing.isolated(only=["moded"], mode=mode)
        if block == "patched":
            return kornia_halfpatch.patched(only=["moded"], mode=mode)

        @contextlib.contextmanager
        def preserving():
            with testing.preserved():
                kornia_halfpatch.apply(only=["moded"], mode=mode)
                yield

        return preserving()

    with testing.use_fixes([fix]):
        kornia_halfpatch.apply(only=["moded"])
        assert state["mode"] == "default" and "moded" not in _engine.applied_fixes()
        with enter("first"):
            assert state["mode"] == "first"
        assert state["mode"] == "default"
        with enter("second"):
            assert state["mode"] == "second"
        assert state["mode"] == "default"
        with kornia_halfpatch.unpatched():
            kornia_halfpatch.apply(only=["moded"], mode="inside")
            assert state["mode"] == "inside"
        assert state["mode"] == "default"


@needs_old_kornia
def test_isolated_gives_networks_cpu_half_its_mode_back():
    """The real fix that keeps its option in its module: a block forcing cpu_half leaves the
    caller's mode (auto, or the variable) in force after it, whatever the CPU reports."""
    from kornia_halfpatch.fixes import networks_cpu_half

    before = networks_cpu_half.resolve_modes()
    for mode in ("float32", "native"):
        with testing.isolated(only=["networks_cpu_half"], cpu_half=mode):
            assert {m for m, _ in networks_cpu_half.resolve_modes().values()} == {mode}
        assert networks_cpu_half.resolve_modes() == before


def probed_fix(name, attribute, probed, needed):
    """A fix on torch.nn.functional.<attribute> (kornia's calls only) whose probe is counted in
    ``probed`` and answers ``needed()``."""

    def probe(originals):
        probed.append(name)
        return _model.bug_present("stand-in") if needed() else _model.not_needed("stand-in")

    return _model.Fix(name=name, targets=(passthrough_target(attribute),), probe=probe, probe_cache=False)


@needs_old_kornia
def test_a_restore_puts_fixes_back_as_evaluated_and_apply_evaluates_again(monkeypatch):
    probed, needed = [], [True]
    fixes = [probed_fix("kept", "tanhshrink", probed, lambda: needed[0]), probed_fix("other", "softsign", probed, lambda: True)]
    with testing.use_fixes(fixes):
        kornia_halfpatch.apply()
        assert probed == ["kept", "other"]
        replacement = _installed.entries_of("kept")[0].replacement
        status = kornia_halfpatch.status().fixes["kept"]
        probed.clear()
        with testing.isolated(only=["other"]):
            assert _engine.applied_fixes() == ("other",)
            needed[0] = False  # what a probe would answer now: a restore puts back what was there
        assert probed == ["other"]  # the block's own apply() probed; the restore probed nothing
        assert _engine.applied_fixes() == ("kept", "other")
        assert _installed.entries_of("kept")[0].replacement is replacement
        restored = kornia_halfpatch.status().fixes["kept"]
        assert restored is not status and restored == status
        # apply() after a revert asks the probe again, and now finds the bug gone.
        kornia_halfpatch.revert(["kept"])
        kornia_halfpatch.apply(only=["kept"])
        assert probed == ["other", "kept"] and _engine.applied_fixes() == ("other",)
        # A target rebound meanwhile (another original) is evaluated again, never reinstalled stale.
        needed[0] = True
        kornia_halfpatch.apply(only=["kept"])
        probed.clear()
        with testing.preserved():
            kornia_halfpatch.revert(["kept"])
            monkeypatch.setattr(torch.nn.functional, "tanhshrink", lambda input: input)
        assert probed == ["kept"] and "kept" in _engine.applied_fixes()
        assert _installed.entries_of("kept")[0].original is torch.nn.functional.tanhshrink


# A kornia module that binds create_meshgrid by name in every release (no deprecation wrapper).
WARPER = "kornia.geometry.transform.homography_warper"


def warper():
    return importlib.import_module(WARPER)


def bound_and_grown_modules(tmp_path, monkeypatch, where):
    """``bound_<where>``, a user module not imported yet that binds create_meshgrid from WARPER
    when imported, and ``grown_<where>``, a module already in sys.modules for the test to grow."""
    (tmp_path / f"bound_{where}.py").write_text(f"from {WARPER} import create_meshgrid\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, f"bound_{where}", raising=False)
    grown = type(sys)(f"grown_{where}")
    monkeypatch.setitem(sys.modules, f"grown_{where}", grown)
    return grown


@needs_old_kornia
@pytest.mark.parametrize("inside, outside", [((), None), (("utils_grids",), ()), (("utils_grids",), None)])
def test_isolated_restores_what_its_block_bound_in_new_and_grown_modules(tmp_path, monkeypatch, inside, outside):
    # testing.isolated() scans the modules once, on entry; its restore re-scans only the modules
    # imported in the block and those whose namespace changed size. What the block bound there
    # must end as after a plain revert() or apply().
    grown = bound_and_grown_modules(tmp_path, monkeypatch, "in_the_block")
    original = kornia_halfpatch.get_original(warper().create_meshgrid)
    with testing.isolated(only=outside):
        outside_value = warper().create_meshgrid
        with testing.isolated(only=inside):
            inside_value = warper().create_meshgrid
            assert inside_value is not outside_value
            import bound_in_the_block

            grown.create_meshgrid = inside_value
            assert bound_in_the_block.create_meshgrid is inside_value
        restored = warper().create_meshgrid  # a hand-written replacement is built anew
        assert kornia_halfpatch.is_patched(restored) == (outside is None)
        assert kornia_halfpatch.get_original(restored) is original
        # A user module keeps what it bound when apply() runs after (reported stale instead);
        # a replacement it bound is undone when its fix is reverted: the original either way.
        assert bound_in_the_block.create_meshgrid is original
        assert grown.create_meshgrid is original
    sys.modules.pop("bound_in_the_block", None)


@needs_old_kornia
def test_the_next_block_restores_what_was_bound_between_blocks(tmp_path, monkeypatch):
    # One block's binding index serves the next (only new modules and namespaces that changed
    # size are scanned again): what code outside the blocks bound meanwhile, in a module
    # imported meanwhile or in one that grew, must be found by the next block's revert.
    grown = bound_and_grown_modules(tmp_path, monkeypatch, "between_blocks")
    with testing.isolated(only=["utils_grids"]):
        original = kornia_halfpatch.get_original(warper().create_meshgrid)
        with testing.isolated(only=["utils_grids"]):
            pass  # the index kept from here on
        replacement = warper().create_meshgrid
        assert kornia_halfpatch.is_patched(replacement)
        import bound_between_blocks

        grown.create_meshgrid = replacement
        assert bound_between_blocks.create_meshgrid is replacement
        with testing.isolated(only=()):
            assert warper().create_meshgrid is original
            assert bound_between_blocks.create_meshgrid is original
            assert grown.create_meshgrid is original
    sys.modules.pop("bound_between_blocks", None)


@needs_old_kornia
def test_a_fix_applied_and_reverted_between_blocks_is_reverted_by_the_next_block(monkeypatch):
    # An index that was first scanned after an install had set a target's own module
    # attribute to its replacement missed that binding: the next block's revert left the
    # replacement there (kornia.utils.grid.create_meshgrid), and the fix's probe then found
    # "not needed" on it.
    grid = grid_module()
    with testing.isolated(only=["utils_grids"]):
        original = kornia_halfpatch.get_original(grid.create_meshgrid)
        monkeypatch.setattr(_engine, "_kept_index", None)  # preserved()'s restore starts one
        with testing.preserved():
            kornia_halfpatch.revert()
            kornia_halfpatch.apply(only=["utils_grids"])
            kornia_halfpatch.revert()
        assert kornia_halfpatch.is_patched(grid.create_meshgrid)
        with testing.isolated(only=()):
            assert grid.create_meshgrid is original
            assert kornia_halfpatch.apply(only=["utils_grids"]).applied == ["utils_grids"]


def test_the_kept_binding_index_does_not_grow_with_the_blocks():
    # Hand-written replacements are built anew at every apply(): the kept index forgets the
    # ones reverted since, or every block would follow more objects than the last.
    names = [name for name in kornia_halfpatch.applied_fixes()] or ["utils_grids"]

    def sizes():
        index = _engine._kept_index
        return len(index._wanted), sum(len(v) for v in index._related.values())

    with testing.isolated(only=names):
        for name in names:
            with testing.isolated(only=[name]):
                pass
        before = sizes()
        for _ in range(3):
            for name in names:
                with testing.isolated(only=[name]):
                    pass
        assert sizes() == before


@needs_old_kornia
def test_patched_undoes_what_its_block_bound_in_new_and_grown_modules(tmp_path, monkeypatch):
    # patched() scans once for its apply and brings that scan up to date for the undo.
    grown = bound_and_grown_modules(tmp_path, monkeypatch, "in_patched")
    with testing.isolated(only=()):
        original = warper().create_meshgrid
        with kornia_halfpatch.patched(only=["utils_grids"]):
            replacement = warper().create_meshgrid
            assert replacement is not original
            import bound_in_patched

            grown.create_meshgrid = replacement
            assert bound_in_patched.create_meshgrid is replacement
        assert warper().create_meshgrid is original
        assert bound_in_patched.create_meshgrid is original
        assert grown.create_meshgrid is original
    sys.modules.pop("bound_in_patched", None)
