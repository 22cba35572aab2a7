import sys
from pathlib import Path

# Golden-reference generators double as the shared input factories for the tests.
sys.path.insert(0, str(Path(__file__).parent / "tests" / "golden"))

pytest_plugins = ["pytester"]

# cpu_half's mode is pinned for this project's tests: "auto" picks float32 on CPUs without float16
# arithmetic (most CI runners) and native here (avx512_fp16), and the other fixes' half-precision
# oracles (feature_descriptors's network in float16, kornia 0.9.0's outputs) assume native float16.
# Subprocesses inherit the variable; the plugin applied before this file ran, so it is re-applied.
# tests/test_fix_networks_cpu_half.py asks for its modes explicitly (apply()'s option beats the variable).
import os  # noqa: E402

if "KORNIA_HALFPATCH_CPU_HALF" not in os.environ:
    os.environ["KORNIA_HALFPATCH_CPU_HALF"] = "native"
    try:
        import kornia_halfpatch as _shim

        if "networks_cpu_half" in _shim.applied_fixes():
            _shim.revert(["networks_cpu_half"])
            _shim.apply(only=["networks_cpu_half"])
    except Exception:  # noqa: BLE001 - a broken shim is reported by the tests themselves
        pass
