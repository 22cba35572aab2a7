"""The engine never breaks the program it runs in: probes run in a clean
torch state and leave the caller's exactly as it was; a failing probe or install skips its fix
with the reason and rolls back; replacements pickle, copy and introspect like their originals.

The full battery (every state x every apply/import order in subprocesses, property tests,
thread stress) is in tests/test_robustness_*.py; these are the engine's own contracts."""

import functools
import logging
import pickle
import warnings

import pytest
import torch

import kornia
import kornia_halfpatch
from kornia_halfpatch import _bindings, testing
from kornia_halfpatch._isolation import probe_state
from support import (
    UPSTREAM_FIXED,
    autocast_state,
    factory_device,
    grid_module,
    inductor_compile,
    needs_old_kornia,
    run_python,
    skip_unreachable_state,
    unset_default_device,
)


@pytest.fixture(autouse=True)
def restore_shim_state():
    with testing.preserved():
        yield


def torch_state():
    """The caller-visible torch state a probe could disturb."""
    return {
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "autocast_cpu": autocast_state("cpu")[0],
        "autocast_cpu_dtype": autocast_state("cpu")[1],
        "default_dtype": torch.get_default_dtype(),
        "default_device": factory_device(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "rng": torch.get_rng_state(),
        "function_modes": torch._C._len_torch_function_stack(),
    }


def same_state(a, b):
    return all(torch.equal(a[k], b[k]) if k == "rng" else a[k] == b[k] for k in a)


class DefaultDtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.previous)


class Deterministic:
    def __enter__(self):
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(False)


# Torch states a caller may be in; each a context manager factory.
CALLER_STATES = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "autocast_cpu_bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast_cpu_float16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "default_dtype_float16": lambda: DefaultDtype(torch.float16),
    "default_dtype_bfloat16": lambda: DefaultDtype(torch.bfloat16),
    "default_dtype_float64": lambda: DefaultDtype(torch.float64),
    "default_device_meta": lambda: torch.device("meta"),
    "deterministic": Deterministic,
    "anomaly": lambda: torch.autograd.set_detect_anomaly(True),
}


@pytest.mark.parametrize("state", sorted(CALLER_STATES))
def test_probe_state_is_clean_inside_and_the_callers_state_is_restored_after(state):
    skip_unreachable_state(state)
    with CALLER_STATES[state]():
        torch.rand(1)  # move the random stream somewhere
        before = torch_state()
        with probe_state():
            inside = torch_state()
            torch.rand(7)  # a probe drawing random numbers
        after = torch_state()
        with pytest.raises(RuntimeError, match="probe blew up"):
            with probe_state():
                torch.rand(7)
                raise RuntimeError("probe blew up")
        after_raise = torch_state()
    assert inside["grad"] and not inside["inference"] and not inside["autocast_cpu"]
    assert inside["default_dtype"] == torch.float32 and inside["default_device"] == "cpu"
    assert not inside["deterministic"] and not inside["anomaly"]
    assert same_state(after, before) and same_state(after_raise, before)


def test_probes_draw_from_a_seeded_private_stream():
    torch.manual_seed(123)
    with probe_state():
        first = torch.rand(4)
    torch.manual_seed(456)
    with probe_state():
        second = torch.rand(4)
    assert torch.equal(first, second)  # the probe's outcome does not depend on the caller's seed


@needs_old_kornia
def test_a_seeded_program_draws_the_same_numbers_with_and_without_apply():
    kornia_halfpatch.revert()
    torch.manual_seed(0)
    expected = torch.rand(5)
    torch.manual_seed(0)
    kornia_halfpatch.apply()
    assert torch.equal(torch.rand(5), expected)


def statuses(report):
    return {name: (fix.applied, fix.reason) for name, fix in report.fixes.items()}


@needs_old_kornia
@pytest.mark.parametrize(
    "state", ["no_grad", "inference_mode", "autocast_cpu_bfloat16", "autocast_cpu_float16", "default_dtype_float16"]
)
def test_apply_in_an_unusual_torch_state_finds_what_a_clean_apply_finds(state):
    skip_unreachable_state(state)
    kornia_halfpatch.revert()
    clean = statuses(kornia_halfpatch.apply())
    kornia_halfpatch.revert()
    with CALLER_STATES[state]():
        report = kornia_halfpatch.apply()
        assert statuses(report) == clean
        assert statuses(kornia_halfpatch.status()) == clean


@needs_old_kornia
def test_apply_after_the_default_device_was_set_and_unset_finds_what_a_clean_apply_finds():
    # torch 2.4-2.9: after set_default_device(x) then set_default_device(None),
    # torch.get_default_device() raises; the probes' isolation must not ask it.
    kornia_halfpatch.revert()
    clean = statuses(kornia_halfpatch.apply())
    kornia_halfpatch.revert()
    torch.set_default_device("meta")
    torch.set_default_device(None)
    try:
        assert factory_device() == "cpu"
        report = kornia_halfpatch.apply()
        assert statuses(report) == clean
        assert statuses(kornia_halfpatch.status()) == clean
    finally:
        unset_default_device()  # the emptied context torch leaves would break later tests


@needs_old_kornia
def test_a_part_of_the_probe_state_that_cannot_be_set_up_does_not_make_apply_raise(monkeypatch, caplog):
    from kornia_halfpatch import _isolation

    def broken():
        raise RuntimeError("this torch cannot")

    kornia_halfpatch.revert()
    clean = statuses(kornia_halfpatch.apply())
    kornia_halfpatch.revert()
    monkeypatch.setattr(_isolation, "_default_device_cpu", broken)
    with caplog.at_level(logging.WARNING, logger="kornia_halfpatch"):
        report = kornia_halfpatch.apply()
    assert statuses(report) == clean  # the caller's device is the CPU: nothing else differs
    assert "this torch cannot" in caplog.text


# --------------------------------------------------------------------------------------------
# A failing probe or install: skipped with its reason, warned, logged, rolled back


def registry_with(fix):
    """The real fixes, with ``fix`` standing in for the one of the same name."""
    from kornia_halfpatch.fixes import load_fixes

    return testing.use_fixes([fix if f.name == fix.name else f for f in load_fixes()])


def meshgrid_fix():
    from kornia_halfpatch.fixes import utils_grids as meshgrid

    return meshgrid.FIX


@needs_old_kornia
def test_a_probe_that_raises_skips_its_fix_only_with_the_reason_a_warning_and_a_log(caplog):
    def broken_probe(originals):
        raise RuntimeError("element 0 of tensors does not require grad")

    real = meshgrid_fix()
    with registry_with(real.__class__(name=real.name, targets=real.targets, probe=broken_probe)):
        with caplog.at_level(logging.WARNING, logger="kornia_halfpatch"):
            with pytest.warns(kornia_halfpatch.HalfPatchWarning, match="utils_grids skipped: its probe or install failed"):
                report = kornia_halfpatch.apply()
        status = report.fixes["utils_grids"]
        assert not status.applied and status.verdict is kornia_halfpatch.Verdict.FAILED
        assert status.reason == "failed: RuntimeError: element 0 of tensors does not require grad"
        assert any("utils_grids skipped" in record.getMessage() for record in caplog.records)
        assert not kornia_halfpatch.is_patched(grid_module().create_meshgrid)
        assert "feature_patches" in report.applied  # the fixes after it still went in


@needs_old_kornia
def test_warnings_turned_into_errors_do_not_make_apply_raise(caplog):
    def broken_probe(originals):
        raise ValueError("boom")

    real = meshgrid_fix()
    with registry_with(real.__class__(name=real.name, targets=real.targets, probe=broken_probe)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with caplog.at_level(logging.WARNING, logger="kornia_halfpatch"):
                report = kornia_halfpatch.apply()
        assert report.fixes["utils_grids"].reason == "failed: ValueError: boom"
        assert any("logged instead" in record.getMessage() for record in caplog.records)


@needs_old_kornia
def test_a_half_done_install_is_rolled_back_everywhere():
    real = meshgrid_fix()
    first, second = real.targets

    def broken_build(original):
        raise RuntimeError("cannot build")

    broken = second.__class__(second.candidates, broken_build, second.expects_parameters)
    with registry_with(real.__class__(name=real.name, targets=(first, broken), probe=real.probe)):
        original = grid_module().create_meshgrid
        holders = sorted(n for n, _, _ in _bindings.bindings_of(original))
        report = kornia_halfpatch.apply()
        assert report.fixes["utils_grids"].reason == "failed: RuntimeError: cannot build"
        assert "utils_grids" not in kornia_halfpatch.applied_fixes()
        # create_meshgrid was installed first, then rolled back in every module that held it.
        assert sorted(n for n, _, _ in _bindings.bindings_of(original)) == holders
        assert not any(kornia_halfpatch.is_patched(m.__dict__.get(a)) for _, m, a in _bindings.bindings_of(original))


def test_bad_arguments_of_the_callers_own_still_raise_clearly():
    with pytest.raises(ValueError, match="unknown kornia_halfpatch fix 'meshgird'"):
        kornia_halfpatch.apply(only=["meshgird"])
    with pytest.raises(TypeError, match="unknown kornia_halfpatch option"):
        kornia_halfpatch.apply(grid_sample_wrokaround="none")


@pytest.mark.slow
@needs_old_kornia
def test_kornia_imported_inside_inference_mode_after_apply_gets_every_fix():
    code = """
        import json, sys, torch, kornia_halfpatch
        kornia_halfpatch.apply()
        assert "kornia" not in sys.modules
        with torch.inference_mode():
            import kornia
        deferred = {n: (f.applied, f.reason) for n, f in kornia_halfpatch.status().fixes.items()}
        kornia_halfpatch.revert()
        clean = {n: (f.applied, f.reason) for n, f in kornia_halfpatch.apply().fixes.items()}
        print(json.dumps([deferred == clean, deferred]))
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].startswith("[true,")


# --------------------------------------------------------------------------------------------
# Replacements look like their originals. Each one's names, docstring, defaults, signature,
# pickling by reference and copies: tests/test_rows.py (every target of every fix).


@needs_old_kornia
def test_a_partial_of_a_replacement_pickles_by_reference():
    kornia_halfpatch.apply()
    assert kornia_halfpatch.is_patched(kornia.feature.extract_patches_simple)
    patch_grid = functools.partial(kornia.feature.extract_patches_simple, PS=8)
    assert pickle.loads(pickle.dumps(patch_grid)).func is kornia.feature.extract_patches_simple


@pytest.mark.slow
@needs_old_kornia
def test_a_pickled_replacement_resolves_to_what_the_unpickling_process_has():
    kornia_halfpatch.apply()
    replacement = grid_module().create_meshgrid
    assert kornia_halfpatch.is_patched(replacement)
    payload = pickle.dumps(replacement)
    code = f"""
        import pickle, kornia, kornia_halfpatch
        loaded = pickle.loads({payload!r})
        print(kornia_halfpatch.is_patched(loaded), loaded.__module__ + "." + loaded.__qualname__)
    """
    result = run_python(code)  # an unpatched process gets its own, unpatched function
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"False {replacement.__module__}.create_meshgrid"


@pytest.mark.slow
@pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
def test_replacements_with_the_originals_qualified_name_still_script_and_compile():
    # The replacement calls the original, and both now carry the same qualified name:
    # TorchScript must still compile the pair (it mangles the second name) and dynamo inline it.
    kornia_halfpatch.apply(only=["utils_grids"])
    make = grid_module().create_meshgrid
    original = kornia_halfpatch.get_original(make)
    scripted = torch.jit.script(make)
    expected = original(3, 5, True, torch.device("cpu"), torch.float32).to(torch.bfloat16)
    assert torch.equal(scripted(3, 5, True, torch.device("cpu"), torch.bfloat16), expected)
    torch._dynamo.reset()
    compiled = inductor_compile(make, fullgraph=True)
    assert torch.equal(compiled(3, 5, True, torch.device("cpu"), torch.bfloat16), expected)
    torch._dynamo.reset()
