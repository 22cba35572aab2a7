import sys
from pathlib import Path

# Golden-reference generators double as the shared input factories for the tests.
sys.path.insert(0, str(Path(__file__).parent / "tests" / "golden"))

pytest_plugins = ["pytester"]

# Probes run in the tests, as they did before the probe cache: tests replace probes and their
# inputs and count their runs, and a verdict kept on disk by another run (another checkout,
# another environment) must not stand in for them. Subprocesses inherit the variable;
# tests/test_probe_cache.py turns the cache on in directories of its own.
import os  # noqa: E402

os.environ["KORNIA_HALFPATCH_CACHE"] = "0"

# cpu_half's mode is pinned for this project's tests: "auto" picks float32 on CPUs without float16
# arithmetic (most CI runners) and native here (avx512_fp16), and the other fixes' half-precision
# oracles (feature_descriptors's network in float16, kornia 0.9.0's outputs) assume native float16
# and bfloat16.
# Subprocesses inherit the variable; the plugin applied before this file ran, so it is re-applied.
# tests/test_fix_networks_cpu_half.py asks for its modes explicitly (apply()'s option beats the variable).

def _torch_has_half_cpu_convolution():
    # torch 2.1 has no float16 CPU convolution: "native" cannot run a network there, so the
    # tests pin the float32 path, the only one that runs (oracles computed natively in float16
    # then differ by float16 roundings: those tests fail on such a torch, with that reason).
    import torch

    try:
        torch.nn.functional.conv2d(torch.ones(1, 1, 1, 1).half(), torch.ones(1, 1, 1, 1).half())
    except RuntimeError:
        return False
    return True


if "KORNIA_HALFPATCH_CPU_HALF" not in os.environ:
    if _torch_has_half_cpu_convolution():
        os.environ["KORNIA_HALFPATCH_CPU_HALF"] = "native"
    else:
        # float32 for float16 only: bfloat16 convolutions exist there and run natively, as the
        # bfloat16 oracles assume (auto, told float16 has no arithmetic and bfloat16 has).
        os.environ["KORNIA_HALFPATCH_CPU_HALF"] = "auto"
        os.environ["KORNIA_HALFPATCH_CPU_NATIVE_HALF"] = "0"
        os.environ["KORNIA_HALFPATCH_CPU_NATIVE_BFLOAT16"] = "1"
    try:
        import kornia_halfpatch as _shim

        if "networks_cpu_half" in _shim.applied_fixes():
            _shim.revert(["networks_cpu_half"])
            _shim.apply(only=["networks_cpu_half"])
    except Exception:  # noqa: BLE001 - a broken shim is reported by the tests themselves
        pass


import pytest  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """The quick run's xdist workers (pyproject.toml addopts) each keep torch's two OpenMP
    threads, as the oracles' kernel conditions say: with two workers that is four threads on two
    cores, and OpenMP's default spin-waiting at every parallel region's barrier burnt the cores
    the other worker needed (measured on 2 cores: 428 s of CPU and no wall time saved against one
    process's 274 s; passive waiting: 141 s wall). The workers inherit the variable, which
    changes how threads wait, not which kernels run or how they split the work."""
    if config.pluginmanager.getplugin("dsession") is not None:  # the xdist controller, before its workers start
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(params=["native", "float32"])
def cpu_half(request):
    """The test in both of networks_cpu_half's modes, whatever this CPU reports: "native" (the
    release's half kernels: what GPUs and CPUs with avx512_fp16/amx run) and "float32" (its float32
    path, auto's choice on a CPU without arithmetic in the dtype). Yields the mode; the shim's
    state is restored afterwards."""
    import kornia_halfpatch
    from kornia_halfpatch import testing

    with testing.preserved():
        kornia_halfpatch.revert(["networks_cpu_half"])
        kornia_halfpatch.apply(only=["networks_cpu_half"], cpu_half=request.param)
        yield request.param


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """tests/test_rows.py's tests, each fix's (and cpu_half mode's) together. Its module-scoped
    ``fix_installed`` is set up again whenever the next test wants another value, and pytest's
    own reordering keys a parametrised fixture by the parameter's position, not its value: it
    grouped each target's tests, alternating the modes, and applied a fix 547 times for 28
    distinct installs. A stable sort within the module keeps every other order as it was."""
    slots = [i for i, item in enumerate(items) if "fix_installed" in getattr(getattr(item, "callspec", None), "params", {})]
    first_seen = {}
    for i in slots:
        first_seen.setdefault((items[i].path, repr(items[i].callspec.params["fix_installed"])), len(first_seen))
    grouped = sorted((items[i] for i in slots),
                     key=lambda item: first_seen[item.path, repr(item.callspec.params["fix_installed"])])
    for i, item in zip(slots, grouped):
        items[i] = item
