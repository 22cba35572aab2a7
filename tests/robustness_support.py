"""The robustness battery: torch states, apply/import orders, checks that fixes work.

Imported by ``tests/test_robustness_*.py`` and run as a script, it is the battery's runner:

    python tests/robustness_support.py < cases.json > results.json

The runner imports torch (and nothing of kornia or of the shim), then forks one child per case.
Every child is therefore a fresh process as far as kornia and kornia_halfpatch go (neither has
been imported, no torch state has been touched), and costs ~1 s instead of the ~3 s of a new
interpreter: torch's import (~2 s) is paid once. The parent never runs a torch operation before
forking, so no OpenMP pool is inherited by the children.

A case is a *state* (a global torch state or an execution context: see ``STATES``), an *order*
(see ``ORDERS``) and whether the shim is used at all (``shim=False`` is the control: the same
program without the shim, which tells what the state does to kornia on its own). Each child:

1. seeds torch's global RNG (after the clean ``import kornia`` of the order that has one);
2. enters the state, runs the order's steps (``apply()`` and/or ``import kornia``), snapshots the
   torch state before and after those steps (the shim must hand the caller its state back),
   leaves the state;
3. imports kornia again (a no-op, unless the import inside the state failed), draws
   ``torch.rand(4)`` from the global RNG (a probe must not shift the user's random stream);
4. records ``status()`` as a comparable signature and runs one cheap check per fix.

Only the standard library and torch are imported at module level: this module is loaded by the
runner before it forks.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import select
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional

SEED = 20240614

# --------------------------------------------------------------------------------------------
# States: each runs ``steps`` inside the state and returns what ``steps`` returned. The state is
# left when it returns (or raises), exactly as a user's ``with`` block or global setter would be.


def _torch():
    import torch

    return torch


def _global_setting(setter: str, value: Any, restore: Any) -> Callable[[], Any]:
    """A state entered by one of torch's global setters (the top of a script), restored after.

    `setter` is a dotted name under torch, resolved in the child (torch is imported lazily)."""

    @contextlib.contextmanager
    def state():
        torch = _torch()
        target: Any = torch
        for part in setter.split("."):
            target = getattr(target, part)
        target(value(torch) if callable(value) else value)
        try:
            yield
        finally:
            target(restore(torch) if callable(restore) else restore)

    return state


# The top of an inference script: a global setter, not a context manager.
_grad_disabled = _global_setting("set_grad_enabled", False, True)
_deterministic = _global_setting("use_deterministic_algorithms", True, False)
_anomaly = _global_setting("autograd.set_detect_anomaly", True, False)
# Subnormal float32 values read as zero: a probe built on tiny values could be fooled.
_flush_denormal = _global_setting("set_flush_denormal", True, False)
# On a CPU with bfloat16 units, float32 matmuls may run in bfloat16: a bitwise probe that
# compares two float32 computations could be fooled.
_matmul_medium = _global_setting("set_float32_matmul_precision", "medium", "highest")


def _default_device(name: str) -> Callable[[], Any]:
    # Settable without a GPU: torch only fails when a tensor is created on "cuda".
    return _global_setting("set_default_device", name, None)


def _default_dtype(name: str) -> Callable[[], Any]:
    return _global_setting("set_default_dtype", lambda torch: getattr(torch, name), lambda torch: torch.float32)


@contextlib.contextmanager
def _one_thread():
    torch = _torch()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _function_mode():
    # A user's TorchFunctionMode (a tracer, a profiler, a logging mode) that sees every call.
    from torch.overrides import TorchFunctionMode

    class CountingMode(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            CountingMode.calls += 1
            return func(*args, **(kwargs or {}))

    with CountingMode():
        yield


@contextlib.contextmanager
def _saved_tensors_hooks_disabled():
    # Set by activation-checkpointing and FSDP code: any autograd save in a forward raises.
    torch = _torch()
    with torch.autograd.graph.disable_saved_tensors_hooks("saved tensors are disabled here"):
        yield


# Warnings that unpatched ``import kornia`` itself raises with torch 2.13 and that stay warnings
# in the "warnings are errors" state: those attributed to kornia's modules (0.7.0:
# ``torch.cuda.amp.custom_fwd`` is deprecated) and torch's ``torch.jit.script`` deprecation
# (0.8.3 scripts functions at import). Everything else, the shim's included, is an error.
KORNIA_OWN_WARNING_MODULES = r"kornia(\.|$)"
KORNIA_OWN_WARNING_MESSAGES = r"`torch\.jit\.script` is deprecated"


@contextlib.contextmanager
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("default", module=KORNIA_OWN_WARNING_MODULES)
        warnings.filterwarnings("default", message=KORNIA_OWN_WARNING_MESSAGES)
        yield


def _ambient(make: Callable[[], Any]) -> Callable[[Callable[[], Any]], Any]:
    def run(steps: Callable[[], Any]) -> Any:
        with make():
            return steps()

    return run


def _clean(steps: Callable[[], Any]) -> Any:
    return steps()


def _torch_compile_in_progress(steps: Callable[[], Any]) -> Any:
    # The steps run while dynamo traces the function that calls them; graph breaks are fine.
    # backend="eager": dynamo's tracing is the state under test; inductor would only add minutes
    # of code generation for every probe frame dynamo compiles after a graph break.
    torch = _torch()
    box: Dict[str, Any] = {}

    def body(x):
        box["value"] = steps()
        return x + 1

    torch.compile(body, backend="eager")(torch.ones(2))
    return box["value"]


def _jit_trace_in_progress(steps: Callable[[], Any]) -> Any:
    torch = _torch()
    box: Dict[str, Any] = {}

    def body(x):
        box["value"] = steps()
        return x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings and torch.jit deprecations are not ours
        torch.jit.trace(body, (torch.ones(2),), check_trace=False)
    return box["value"]


def _other_thread(steps: Callable[[], Any]) -> Any:
    box: Dict[str, Any] = {}

    def body():
        try:
            box["value"] = steps()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=body, name="not-main")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


STATES: Dict[str, Callable[[Callable[[], Any]], Any]] = {
    "clean": _clean,
    "set_grad_enabled_false": _ambient(_grad_disabled),
    "no_grad": _ambient(lambda: _torch().no_grad()),
    "inference_mode": _ambient(lambda: _torch().inference_mode()),
    "autocast_cpu_float16": _ambient(lambda: _torch().autocast("cpu", dtype=_torch().float16)),
    "autocast_cpu_bfloat16": _ambient(lambda: _torch().autocast("cpu", dtype=_torch().bfloat16)),
    "default_dtype_float16": _ambient(_default_dtype("float16")),
    "default_dtype_bfloat16": _ambient(_default_dtype("bfloat16")),
    "default_dtype_float64": _ambient(_default_dtype("float64")),
    "default_device_meta": _ambient(_default_device("meta")),
    "default_device_cuda_without_gpu": _ambient(_default_device("cuda")),
    "deterministic_algorithms": _ambient(_deterministic),
    "anomaly_detection": _ambient(_anomaly),
    "set_num_threads_1": _ambient(_one_thread),
    "flush_denormal": _ambient(_flush_denormal),
    "float32_matmul_precision_medium": _ambient(_matmul_medium),
    "torch_function_mode": _ambient(_function_mode),
    "saved_tensors_hooks_disabled": _ambient(_saved_tensors_hooks_disabled),
    "warnings_are_errors": _ambient(_warnings_are_errors),
    "torch_compile_in_progress": _torch_compile_in_progress,
    "jit_trace_in_progress": _jit_trace_in_progress,
    "other_thread": _other_thread,
}

# Not in the battery, and why (reported by the test module as skips):
LEFT_OUT_STATES = {
    "jit_script_in_progress": (
        "not meaningful: torch.jit.script compiles source without running Python, so no user code "
        "(apply(), import kornia) can run while it is in progress; @torch.jit.ignore'd calls run in "
        "plain eager Python, the clean state"
    ),
    "cuda_rng": "no CUDA device here: torch.cuda.is_available() is False, there is no CUDA RNG to shift",
}

# Where the shim's steps run relative to the state (see module docstring).
APPLY_BEFORE_IMPORT = "apply_before_import"  # state: apply(); import kornia   (the deferred hook fires in the state)
APPLY_AFTER_IMPORT = "apply_after_import"  # import kornia (clean); state: apply()
IMPORT_INSIDE_STATE = "import_inside_state"  # apply() (clean); state: import kornia
ORDERS = (APPLY_BEFORE_IMPORT, APPLY_AFTER_IMPORT, IMPORT_INSIDE_STATE)


# --------------------------------------------------------------------------------------------
# What a child records


def _default_device_now(torch: Any) -> str:
    try:
        return str(torch.get_default_device())
    except AttributeError:
        # torch 2.4-2.9 after set_default_device(None): get_default_device reads the device of
        # the emptied global context; a factory call still tells where tensors go.
        return str(torch.empty(0).device)


def torch_state() -> Dict[str, Any]:
    """Every global torch setting a probe could change, as plain values."""
    torch = _torch()
    readers = {
        "grad_enabled": torch.is_grad_enabled,
        "inference_mode": torch.is_inference_mode_enabled,
        "autocast_cpu": lambda: [torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu"))],
        "default_dtype": lambda: str(torch.get_default_dtype()),
        "default_device": lambda: _default_device_now(torch),
        "deterministic": torch.are_deterministic_algorithms_enabled,
        "anomaly": torch.is_anomaly_enabled,
        "num_threads": torch.get_num_threads,
        "matmul_precision": torch.get_float32_matmul_precision,
        "function_modes": lambda: len(torch.overrides._get_current_function_mode_stack()),
        "rng": lambda: hashlib.sha1(bytes(torch.get_rng_state().tolist())).hexdigest(),
    }
    state: Dict[str, Any] = {}
    for key, read in readers.items():
        try:
            state[key] = read()
        except Exception as exc:  # noqa: BLE001 - recorded; the same reader fails before and after
            state[key] = f"unreadable: {type(exc).__name__}"
    return state


def status_signature(report: Any) -> Dict[str, Any]:
    """status() reduced to what two runs must agree on: per fix, applied, its verdict and reason
    and its per-target rows (where the Report has them), plus the capability probe lines."""
    fixes = {}
    for name, fix in report.fixes.items():
        rows = [[str(getattr(row, attribute, "")) for attribute in ("target", "verdict", "reason")] for row in getattr(fix, "rows", [])]
        fixes[name] = [bool(fix.applied), str(getattr(fix, "verdict", "")), str(getattr(fix, "reason", "")), rows]
    return {"applied": sorted(report.applied), "fixes": fixes, "probes": dict(getattr(report, "probes", {}) or {})}


def describe_error(exc: BaseException) -> Dict[str, str]:
    lines = str(exc).strip().splitlines() or [""]
    return {"type": type(exc).__name__, "message": lines[0][:300]}


# --------------------------------------------------------------------------------------------
# One cheap check per fix: each raises AssertionError (or the error kornia raises) when the fix
# does not work. Oracles are computed here, from the release's own float32 functions.


def check_meshgrid() -> None:
    import torch
    from kornia.geometry.transform import homography_warper  # binds create_meshgrid in every release

    import kornia_halfpatch

    make = homography_warper.create_meshgrid
    original = kornia_halfpatch.get_original(make)
    cpu = torch.device("cpu")
    got = make(2, 300, True, cpu, torch.bfloat16)
    want = original(2, 300, True, cpu, torch.float32).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want), "half grid is not the float32 grid narrowed once"


def check_sosnet() -> None:
    import torch
    from kornia.feature import SOSNet

    patches = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(3)).half()
    with torch.no_grad():
        sosnet = SOSNet(pretrained=False)
        # The fix is SOSNet's final normalization; its trunk of half convolutions costs 0.7 s on
        # CPU, so a cheap trunk with the same (B, 128, 1, 1) output stands in for it.
        sosnet.layers = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(1, 128, 1))
        out = sosnet.eval().half()(patches)
    assert out.shape == (2, 128) and out.dtype == torch.float16, f"SOSNet gave {out.shape} {out.dtype}"
    assert bool(torch.isfinite(out).all()), "SOSNet float16 descriptor is not finite"


def check_sift() -> None:
    import torch
    from kornia.feature import SIFTDescriptor

    with torch.no_grad():
        flat = SIFTDescriptor(32)(torch.full((2, 1, 32, 32), 0.5, dtype=torch.float16))
    assert flat.shape == (2, 128) and bool(torch.isfinite(flat).all()), "SIFT float16 flat patch is not finite"


def check_quad_interp_solve() -> None:
    import torch
    from kornia.geometry.subpix import ConvQuadInterp3d

    volume = (torch.rand(1, 1, 5, 24, 24, generator=torch.Generator().manual_seed(0)) * 0.01).half()
    volume.requires_grad_(True)
    coords, values = ConvQuadInterp3d(strict_maxima_bonus=0.0)(volume)
    (coords.float().sum() + values.float().sum()).backward()
    assert bool(torch.isfinite(volume.grad).all()), "float16 ConvQuadInterp3d gradient is not finite"


def check_laf_patches() -> None:
    import torch
    import kornia.feature

    import kornia_halfpatch

    extract = kornia.feature.extract_patches_simple
    generator = torch.Generator().manual_seed(5)
    img = torch.rand(1, 2, 24, 20, generator=generator)
    laf = torch.tensor([[[[4.0, 1.0, 10.0], [-1.0, 4.0, 12.0]], [[6.0, 0.0, 1.0], [0.0, 6.0, 2.0]]]])
    got = extract(img.half(), laf, 8)
    want = kornia_halfpatch.get_original(extract)(img.half().float(), laf, 8).half()
    assert got.dtype == torch.float16 and torch.equal(got, want), "half patches are not the float32 ones narrowed"


def check_laf_pyramid() -> None:
    # Its replacement is built around a probe of the release's pyramid levels (run in apply()).
    import torch
    import kornia.feature

    import kornia_halfpatch

    extract = kornia.feature.extract_patches_from_pyramid
    img = torch.rand(1, 1, 64, 64, generator=torch.Generator().manual_seed(6))
    laf = torch.tensor([[[[3.0, 0.0, 30.0], [0.0, 3.0, 30.0]], [[20.0, 0.0, 32.0], [0.0, 20.0, 28.0]]]])
    got = extract(img.half(), laf, 8)
    want = kornia_halfpatch.get_original(extract)(img.half().float(), laf, 8).half()
    assert got.dtype == torch.float16 and torch.equal(got, want), "half pyramid patches are not the float32 ones narrowed"


def check_grid_sample_cpu() -> None:
    import torch
    from kornia.geometry.transform import rotate

    # The image sits 65536 elements into a buffer of 1000s: torch's broken half kernel reads
    # wrapped 16-bit offsets, which land on those 1000s (deterministic, never foreign memory).
    # One channel of 182x182 is past the 32768 elements that 16 bits can address.
    size = 182
    for dtype in (torch.float16, torch.bfloat16):
        buffer = torch.full((65536 + size * size,), 1000.0, dtype=dtype)
        image = torch.as_strided(buffer, (1, 1, size, size), (size * size, size * size, size, 1), 65536)
        image.copy_(torch.rand(1, 1, size, size, generator=torch.Generator().manual_seed(0)).to(dtype))
        out = rotate(image, torch.tensor([33.0], dtype=dtype)).float()
        outside = int(((out < 0) | (out > 1) | ~torch.isfinite(out)).sum())
        assert outside == 0, f"{dtype} rotate of a {size}x{size} image: {outside} values outside [0, 1]"


# "fix:what" -> check; each runs on its own, so one failure does not hide another.
FIX_CHECKS: Dict[str, Callable[[], None]] = {
    "utils_grids:create_meshgrid": check_meshgrid,
    "feature_descriptors:sosnet": check_sosnet,
    "feature_descriptors:sift": check_sift,
    "geometry_subpix:conv_quad_interp3d": check_quad_interp_solve,
    "feature_patches:extract_patches_simple": check_laf_patches,
    "feature_patches:extract_patches_from_pyramid": check_laf_pyramid,
    "warp_sampling:rotate": check_grid_sample_cpu,
}


def checked_fix(check: str) -> str:
    return check.split(":")[0]


def run_fix_checks() -> Dict[str, Any]:
    """{check: "ok" or its error} for every check of ``FIX_CHECKS``."""
    results: Dict[str, Any] = {}
    for name, check in FIX_CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - the report says which check failed and how
            results[name] = describe_error(exc)
    return results


# --------------------------------------------------------------------------------------------
# One case, in a forked child


def _import_kornia() -> None:
    importlib.import_module("kornia")


def _apply() -> None:
    import kornia_halfpatch

    kornia_halfpatch.apply()


def run_case(case: Dict[str, Any]) -> Dict[str, Any]:
    torch = _torch()
    state, order, shim = STATES[case["state"]], case["order"], case["shim"]
    result: Dict[str, Any] = {"case": case}
    if order == APPLY_AFTER_IMPORT:
        _import_kornia()
    elif order == IMPORT_INSIDE_STATE and shim:
        _apply()
    torch.manual_seed(SEED)
    if order == APPLY_BEFORE_IMPORT:
        actions = [_apply, _import_kornia] if shim else [_import_kornia]
    elif order == APPLY_AFTER_IMPORT:
        actions = [_apply] if shim else []
    else:
        actions = [_import_kornia]

    def steps() -> Any:
        before = torch_state()
        for action in actions:
            action()
        return before, torch_state()

    try:
        before, after = state(steps)
        result["state_before"], result["state_after"] = before, after
        result["error_in_state"] = None
    except BaseException as exc:  # noqa: BLE001 - the point of the battery
        result["error_in_state"] = describe_error(exc)
        result["traceback"] = traceback.format_exc()[-3000:]
    result["state_outside"] = torch_state()
    try:
        _import_kornia()  # a no-op unless the import inside the state failed
        result["error_outside"] = None
    except BaseException as exc:  # noqa: BLE001
        result["error_outside"] = describe_error(exc)
        return result
    result["draw"] = torch.rand(4, dtype=torch.float32, device="cpu").tolist()
    torch.manual_seed(SEED)
    result["draw_after_reseed"] = torch.rand(4, dtype=torch.float32, device="cpu").tolist()
    if shim:
        import kornia_halfpatch

        try:
            result["status"] = status_signature(kornia_halfpatch.status())
        except BaseException as exc:  # noqa: BLE001
            result["status"] = {"error": describe_error(exc)}
    if case.get("checks", True):
        result["checks"] = run_fix_checks()
        if not shim:
            # A torch without some half CPU kernel (padding, grid_sample before 2.6) stops the
            # release's check at that kernel, before what the state does to kornia shows: the
            # control also runs the checks with those ops widened, to tell the state's effect.
            from kornia_halfpatch._kernels import widening_missing_kernels

            with widening_missing_kernels():
                result["checks_past_missing_kernels"] = run_fix_checks()
    return result


# --------------------------------------------------------------------------------------------
# The runner: fork a child per case, at most ``jobs`` at a time


def case_id(case: Dict[str, Any]) -> str:
    return f"{case['state']}-{case['order']}" + ("" if case["shim"] else "-control")


def _child(case: Dict[str, Any], result_path: str, log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 0
    try:
        result = run_case(case)
        with open(result_path, "w") as handle:
            json.dump(result, handle)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_cases(cases: List[Dict[str, Any]], jobs: int = 2, timeout: float = 240.0) -> Dict[str, Any]:
    """Run every case in its own forked child; {case id: result}. Crashes and hangs are results."""
    results: Dict[str, Any] = {}
    pending = list(cases)
    running: Dict[int, Any] = {}
    workdir = tempfile.mkdtemp(prefix="halfpatch-robust-")
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop(0)
            key = case_id(case)
            result_path = os.path.join(workdir, key + ".json")
            log_path = os.path.join(workdir, key + ".log")
            pid = os.fork()
            if pid == 0:
                _child(case, result_path, log_path)
            running[pid] = (key, result_path, log_path, time.monotonic())
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            for other, (key, _, _, started) in list(running.items()):
                if time.monotonic() - started > timeout:
                    os.kill(other, signal.SIGKILL)
            select.select([], [], [], 0.02)
            continue
        key, result_path, log_path, started = running.pop(pid)
        with open(log_path, errors="replace") as handle:
            log = handle.read()[-4000:]
        if os.path.exists(result_path) and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            with open(result_path) as handle:
                results[key] = json.load(handle)
        else:
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            results[key] = {"crashed": how, "log": log}
        results[key]["seconds"] = round(time.monotonic() - started, 2)
        # CPU time does not depend on what else the machine runs: the battery's cost on 2 idle
        # cores is about the sum over cases divided by 2.
        results[key]["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 2)
        results[key]["log_tail"] = log[-1500:]
    return results


def battery_cases(states: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """Every state under every order, plus a control (no shim) per state that imports kornia
    inside it. The clean state comes first (it is the reference)."""
    cases = []
    for name in states or list(STATES):
        for order in ORDERS:
            cases.append({"state": name, "order": order, "shim": True})
        # The control's checks tell how unpatched kornia fails them after this state (the bug,
        # or kornia broken by being imported inside the state: meta constants, for example).
        cases.append({"state": name, "order": IMPORT_INSIDE_STATE, "shim": False})
    return cases


def run_runner(cases: List[Dict[str, Any]], jobs: int = 2, timeout: float = 600.0) -> Dict[str, Any]:
    """Start the runner in a fresh interpreter (the caller has imported kornia and applied the
    shim; the children must not inherit that) and return its results."""
    import subprocess

    process = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--jobs", str(jobs)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    if process.returncode != 0:
        raise RuntimeError(f"the battery runner failed (exit {process.returncode}):\n{process.stderr[-4000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main(argv: List[str]) -> int:
    jobs = int(argv[argv.index("--jobs") + 1]) if "--jobs" in argv else 2
    cases = json.loads(sys.stdin.read())
    import torch  # noqa: F401 - paid once, before the forks

    started = time.monotonic()
    results = run_cases(cases, jobs=jobs)
    cpu = sum(result.get("cpu_seconds", 0.0) for result in results.values())
    results["_runner"] = {
        "seconds": round(time.monotonic() - started, 2),
        "cpu_seconds": round(cpu, 2),
        "jobs": jobs,
        "cases": len(cases),
    }
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
