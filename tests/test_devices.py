"""What each fix does on CPU, CUDA and MPS, decided without a GPU (docs/devices.md).

A workaround for a CPU kernel's bug or a missing CPU kernel (``Fix.devices == ("cpu",)``) does
nothing for a tensor on another device; a numerical fix (an epsilon, a formula, a computation in
float32) acts on every device. The decisions are read off ``tensor.device.type`` and autocast's
state for that device type, so they are exercised here with CPU tensors that report another
device (``OnDevice``) and with autocast switched on for a device type this machine lacks: the
replacement's decision is recorded by a stand-in for the release's function, so nothing runs on
a device that is not there.
"""

import contextlib
import re
from pathlib import Path

import pytest
import torch

from kornia_halfpatch import _codegen, _engine, _model, _precision
from kornia_halfpatch.fixes import load_fixes
from examples import EXAMPLES
from support import UPSTREAM_FIXED

pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")
ROOT = Path(__file__).resolve().parent.parent
DEVICE_TYPES = ("cpu", "cuda", "mps")
FIXES = {fix.name: fix for fix in load_fixes()}


def on_device(device_type):
    """A tensor subclass whose ``device`` is ``device_type`` (the data stays on the CPU)."""

    class OnDevice(torch.Tensor):
        @property
        def device(self):
            return torch.device(device_type)

    return OnDevice


def moved(value, device_type):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.as_subclass(on_device(device_type))
    return value


class Recorder:
    """Stands in for the release's function: records the arguments it gets, and whether
    autocast was on for each device type then."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        state = {d: _precision.autocast_dtype(d) for d in DEVICE_TYPES}
        self.calls.append((args, state))
        return args[0] if args and isinstance(args[0], torch.Tensor) else None


def called(replacement, args):
    """Call ``replacement``; what the stand-in returns may not be the shape of a real result (the
    replacement's narrowing then fails after the decision this test reads): that is ignored."""
    try:
        return replacement(*args)
    except (AttributeError, TypeError, IndexError, ValueError, RuntimeError):
        return None


def row_targets():
    found = []
    for fix in FIXES.values():
        for target in fix.rows:
            if isinstance(target.row, _model.Promote) and target.label in EXAMPLES:
                found.append(pytest.param(fix, target, id=f"{fix.name}:{target.label}"))
    return found


def generated_with_recorder(target):
    """The row's replacement generated from the installed original, calling a Recorder instead."""
    found, why = _engine.resolve(target)
    if found is None:
        pytest.skip(f"absent in this release: {why}")
    replacement = target.row.build(found[2])
    recorder = Recorder()
    replacement.__globals__["_halfpatch_original"] = recorder
    return replacement, recorder, found[2]


def trigger_index(target, original, args):
    import inspect

    names = list(inspect.signature(_codegen.python_function_of(original)).parameters)
    if target.row.trigger is not None:
        return names.index(target.row.trigger)
    return next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))


def acts_on(target, original, args):
    """Whether the row's guard lets it act on these arguments (device aside)."""
    row = target.row
    if row.guard is None:
        return True
    import inspect

    bound = inspect.signature(_codegen.python_function_of(original)).bind(*args)
    bound.apply_defaults()
    return bool(_model.load(row.guard)(*[bound.arguments[name] for name in row.guard_arguments]))


def test_every_fix_declares_its_devices_and_its_rows_agree():
    for fix in FIXES.values():
        assert fix.devices in (None, ("cpu",)), fix.name
        for target in fix.rows:
            row = target.row
            if isinstance(row, _model.Promote):
                if fix.devices == ("cpu",):
                    assert row.device == "cpu", f"{fix.name}: a CPU workaround's row acts on every device: {target.label}"
                else:
                    assert row.device is None, f"{fix.name}: a numerical fix's row is limited to {row.device}: {target.label}"


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
@pytest.mark.parametrize("fix,target", row_targets())
def test_a_row_widens_half_inputs_on_the_devices_its_fix_acts_on(fix, target, device_type):
    replacement, recorder, original = generated_with_recorder(target)
    for name in target.row.promoted_dtypes() if target.row.half_inputs else ():
        dtype = _codegen.HALF_DTYPE_NAMES[name]
        args = tuple(moved(a, device_type) for a in EXAMPLES[target.label](dtype))
        if not acts_on(target, original, args):
            continue
        recorder.calls.clear()
        try:
            result = called(replacement, args)
        except AssertionError:  # "Torch not compiled with CUDA": an evaluation allocating on a stand-in
            if device_type == "cpu" or getattr(target.row, "evaluate", None) is None:
                raise
            result = None
        if not recorder.calls and getattr(target.row, "evaluate", None) is not None:
            # A cheaper float32 evaluation of the same formula (fixes/_at_scale.py: rgb_to_hsv)
            # does not call the original: it computed and narrowed (on CPU; the stand-in tensors of
            # other device types cannot allocate its output, so the call fails there, after the
            # decision, as any narrowing of a stand-in result does).
            if device_type == "cpu":
                assert isinstance(result, torch.Tensor) and result.dtype == dtype, f"{name} on {device_type}"
            continue
        # One call, or one per tile where the row evaluates tile by tile (fixes/_at_scale.py)
        if getattr(target.row, "evaluate", None) is None:
            assert len(recorder.calls) == 1
        assert recorder.calls
        for received, _ in recorder.calls:
            trigger = received[trigger_index(target, original, args)]
            expected = torch.float32 if (target.row.device in (None, device_type)) else dtype
            assert trigger.dtype == expected, f"{name} on {device_type}"


def _set_autocast(device_type, dtype):
    """Autocast on for ``device_type`` in this thread, whether or not the device exists (torch >=
    2.4 takes a device type; the state is thread-local bookkeeping, read by the replacements)."""
    if not hasattr(torch, "set_autocast_dtype"):
        pytest.skip(f"torch {torch.__version__} cannot switch another device type's autocast on without the device")
    try:
        torch.is_autocast_enabled(device_type)
    except RuntimeError as error:  # torch 2.4's autocast has no MPS device type
        pytest.skip(f"torch {torch.__version__}'s autocast has no device type {device_type}: {error}")
    enabled, previous = torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    torch.set_autocast_enabled(device_type, True)
    torch.set_autocast_dtype(device_type, dtype)
    return enabled, previous


@contextlib.contextmanager
def autocast_on(device_type, dtype):
    enabled, previous = _set_autocast(device_type, dtype)
    try:
        try:
            with torch.autocast(device_type, enabled=False):
                pass
        except RuntimeError as refused:
            # torch 2.7-2.12 check the macOS version for MPS autocast in bfloat16, which needs the
            # MPS backend: no program reaches this state on a machine without it.
            pytest.skip(f"this torch cannot enter {device_type} autocast in {dtype} here: {refused}")
        yield
    finally:
        torch.set_autocast_enabled(device_type, enabled)
        torch.set_autocast_dtype(device_type, previous)


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
@pytest.mark.parametrize("fix,target", row_targets())
def test_under_autocast_a_row_takes_the_float32_call_on_the_devices_its_fix_acts_on(fix, target, device_type):
    replacement, recorder, original = generated_with_recorder(target)
    args = tuple(moved(a, device_type) for a in EXAMPLES[target.label](torch.float32))
    if not acts_on(target, original, args):
        pytest.skip("the row's guard does not take the example")
    for dtype in (torch.float16, torch.bfloat16):
        recorder.calls.clear()
        with autocast_on(device_type, dtype):
            called(replacement, args)
        (received, state), = recorder.calls
        acts = (target.row.autocast is not None and target.row.device in (None, device_type)
                and str(dtype).replace("torch.", "") in target.row.promoted_dtypes())
        # Acting: the release's function runs with autocast off for that device (the float32
        # call); otherwise autocast's own call, untouched.
        assert (state[device_type] is None) == acts, f"{dtype} on {device_type}"


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_cpu_workarounds_pass_other_devices_through(device_type):
    """The hand-written CPU workarounds' own decisions: networks_cpu_half's float32 path, the
    hang guard's convolutions, warp_sampling's grid_sample, torch_ops' method targets."""
    from kornia_halfpatch.fixes import filters_conv_hang, networks_cpu_half, torch_ops, warp_sampling

    cpu = device_type == "cpu"
    half = torch.zeros(1, 3, 20, 20, dtype=torch.float16).as_subclass(on_device(device_type))
    weight = torch.zeros(3, 1, 17, 17, dtype=torch.float16).as_subclass(on_device(device_type))
    assert filters_conv_hang.hang_prone_conv(half, weight) is cpu
    if hasattr(torch, "set_autocast_dtype"):  # torch >= 2.4: another device type's autocast state
        with autocast_on(device_type, torch.float16):
            assert filters_conv_hang.hang_prone_under_autocast(half.float(), weight.float()) is cpu
    assert torch_ops._half_on_cpu(half) is cpu

    module = torch.nn.Conv2d(3, 3, 1).half()
    for parameter in module.parameters():
        parameter.data = parameter.data.as_subclass(on_device(device_type))
    wanted = networks_cpu_half.float32_wanted(module, (half,), {}, (torch.float16,))
    assert (wanted is not None) is cpu

    recorder = Recorder()
    grid = torch.zeros(1, 4, 4, 2, dtype=torch.float16).as_subclass(on_device(device_type))
    warp_sampling.build_grid_sample(recorder)(half, grid, "bilinear", "zeros", False)
    if not cpu:
        (received, _), = recorder.calls
        assert received[0] is half and received[1] is grid  # the release's own call, untouched


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_numerical_fixes_act_on_every_device(device_type):
    """A numerical hand-written fix acts whatever the device: SOSNet's float32 normalisation of a
    flat float16 descriptor (finite, where the release's is 0/0 on CUDA and MPS, which have the
    kernel), the homography normalisation in float32."""
    import kornia
    from kornia_halfpatch.fixes import feature_descriptors, kornia_dtypes

    # SOSNet with its trunk replaced by a fixed all-zero descriptor (the release's final step only).
    stub = feature_descriptors._stub(kornia.feature.SOSNet, ("layers",), torch.zeros(1, 128, 1, 1))
    forward = feature_descriptors.build_sosnet_forward(kornia.feature.SOSNet.forward)
    flat = torch.zeros(2, 1, 32, 32, dtype=torch.float16).as_subclass(on_device(device_type))
    out = forward(stub, flat)
    assert out.dtype == torch.float16 and bool(torch.isfinite(out.as_subclass(torch.Tensor)).all())

    recorder = Recorder()
    normalize = kornia_dtypes.build_normalize_homography(recorder)
    matrix = torch.eye(3, dtype=torch.float16)[None].as_subclass(on_device(device_type))
    called(normalize, (matrix, (8, 8), (8, 8)))
    (received, _), = recorder.calls
    assert received[0].dtype == torch.float32  # widened on every device


def test_the_device_table_is_the_fixes_declarations():
    """docs/devices.md: one line per fix, "every device" or "CPU only" as the fix declares."""
    text = (ROOT / "docs" / "devices.md").read_text()
    for fix in FIXES.values():
        line = re.search(rf"^\| \[?`{fix.name}`\]?[^|]*\| ([^|]+) \|", text, re.M)
        assert line, f"docs/devices.md has no line for {fix.name}"
        said = line.group(1).strip()
        assert said == ("CPU only" if fix.devices == ("cpu",) else "every device"), (fix.name, said)
