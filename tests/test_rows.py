"""The contract battery: every row of every fix table, and a table with one row of each kind.

A row joins by existing: the parametrisation reads the registry. Each row is held to what the
project promises (README, "What fixed means"):
- float32/float64 results bit for bit the original's;
- a half result = the original run on the inputs widened to float32, narrowed once (per the
  row's output rules); for a dtype allow-list row: half passes, other dtypes get kornia's error;
- revert() puts the original back in every kornia module that held it;
- the replacement pickles by reference and carries the original's name, module, signature;
- torch.jit.script holds wherever the original scripts; torch.compile(fullgraph=True) holds
  (three rows only: CI time).
- backward: a seeded projection of the outputs as the loss, the half gradients are
  the original's float32 gradients on the widened inputs narrowed once to each leaf's dtype
  (bitwise, as the forward), reaching every half leaf and half module parameter; float32
  gradients bitwise the original's; scripted (four rows: to one half ulp, TorchScript's autodiff
  rounds float32 its own way) and compiled (one row, to rounding) too.
Hand-written targets are held to the same: every one to revert, pickling and identity, those
with an example (tests/examples.py, by label) to the numerical contracts too.
The oracle is the original, called in the same run on the same machine.

Each fix is applied once per module for all its targets (``fix_installed``, module-scoped and
parametrised by the fix's name, so pytest groups the tests by fix); the shim's previous state
comes back when the next fix is applied and after the module.
"""

import contextlib
import copy
import inspect
import pickle

import pytest
import torch

import kornia_halfpatch
from kornia_halfpatch import _bindings, _codegen, _engine, _installed, _model, testing
from kornia_halfpatch._codegen import FLOAT32, HALF_DTYPE_NAMES
from kornia_halfpatch._kernels import lacking, widening_missing_kernels
from kornia_halfpatch.fixes import load_fixes
from examples import EXAMPLES, EXEMPT
from support import (
    UPSTREAM_FIXED, bitwise_equal, cpu_autocast_accepts, expected_defaults, inductor_compile, lacks_half_kernel,
    same_signature,
)

# --------------------------------------------------------------------------------------------
# A table with one row of each kind, on targets no real fix patches (so the battery exercises
# every kind of generated wrapper, whatever the real tables hold today).


def rgb_image(dtype):
    generator = torch.Generator().manual_seed(11)
    return (torch.rand(2, 3, 9, 7, generator=generator).to(dtype),)


def resized_image(dtype):
    generator = torch.Generator().manual_seed(12)
    return (torch.rand(1, 2, 6, 5, generator=generator).to(dtype), None, 1.5, "bilinear", False)


def softmax_input(dtype):
    # torch_ops' softmax row (torch 2.1: no float16 CPU softmax kernel) has no example of its own
    generator = torch.Generator().manual_seed(13)
    return (torch.randn(2, 3, 5, generator=generator).mul(4).to(dtype), -1)


def validated_input(dtype):
    return (torch.zeros(2, 3, dtype=dtype), [torch.float16, torch.float32, torch.float64])


KIND_EXAMPLES = {
    "kornia.color.hsv:rgb_to_hsv": rgb_image,
    "torch.nn.functional:interpolate": resized_image,
    "kornia.augmentation.utils.helpers:_validate_input_dtype": validated_input,
    "torch.nn.functional:softmax": softmax_input,
    "kornia.color.rgb:rgb_to_bgr": rgb_image,
}

KINDS_FIX = _model.Fix(
    name="row_kinds",
    targets=(
        _model.Promote("kornia.color.hsv:rgb_to_hsv", "example row: rgb_to_hsv in float32 for half"),
        _model.PromoteForKornia(
            "torch.nn.functional:interpolate", "example row: kornia's CPU interpolate in float32", device="cpu"
        ),
        _model.WidenDtypes(
            "kornia.augmentation.utils.helpers:_validate_input_dtype", "example row: augmentation accepts bfloat16"
        ),
        _model.EditSource(
            "kornia.color.rgb:rgb_to_bgr", "example row: rgb_to_bgr's own line, edited to swap half channels in float32",
            edits=(("return bgr_to_rgb(image)",
                    "return bgr_to_rgb(image) if not (image.dtype == torch.float16 or image.dtype == torch.bfloat16) "
                    "else bgr_to_rgb(image.float()).to(image.dtype)"),),
        ),
    ),
)


def all_rows():
    rows = [(KINDS_FIX, target) for target in KINDS_FIX.targets]
    for fix in load_fixes():
        rows += [(fix, target) for target in fix.rows]
    return rows


def hand_written_targets():
    return [(fix, target) for fix in load_fixes() for target in fix.targets if target.row is None]


ROWS = all_rows()
IDS = [f"{fix.name}:{target.label}" for fix, target in ROWS]
# The numerical contracts need an input: the rows and the hand-written targets with an example.
# Revert, pickling and identity need none: every target.
EXAMPLED = ROWS + [(fix, target) for fix, target in hand_written_targets() if target.label in EXAMPLES]
EVERY_TARGET = ROWS + hand_written_targets()
FIXES = {fix.name: fix for fix, _ in EVERY_TARGET}
pytestmark = pytest.mark.skipif(UPSTREAM_FIXED, reason="kornia >= 0.9.0: nothing is patched")

# Hand-written targets whose half result is not the float32 example's result narrowed once: their
# own rule is tested with their fix (by first candidate: where, and why).
_SIDE_OF_ONE = "a side of 1 has scale 1 in half (2/eps is Inf in float16), not the float32 matrix narrowed: "
HALF_RULE_OF_THEIR_OWN = {
    "kornia.geometry.conversions:normal_transform_pixel": _SIDE_OF_ONE + "tests/test_fix_kornia_dtypes.py",
    "kornia.geometry.conversions:normal_transform_pixel3d": _SIDE_OF_ONE + "tests/test_fix_kornia_dtypes.py",
    "kornia.geometry.conversions:normalize_homography": _SIDE_OF_ONE + "tests/test_fix_kornia_dtypes.py",
    "kornia.geometry.conversions:denormalize_homography": _SIDE_OF_ONE + "tests/test_fix_kornia_dtypes.py",
    "kornia.feature.scale_space_detector:MultiResolutionDetector.detect_features_on_single_level": (
        "the response model runs in half as the release's, LAFs in float32: tests/test_fix_kornia_dtypes.py"),
    "kornia.geometry.transform.image_registrator:Similarity.forward_inverse": (
        "the matrix is built in half from the half parameters as the release builds it; only its inversion "
        "runs in float32: tests/test_fix_torch_ops.py"),
}


def example_factory(target):
    # By torch op for the real rows that share a kind's target (torch_ops' interpolate and softmax
    # rows, installed where torch lacks their half kernels: their labels are torch's names).
    if any(target is kind for kind in KINDS_FIX.targets) or target.candidates[0] in KIND_EXAMPLES:
        return KIND_EXAMPLES[target.candidates[0]]
    return EXAMPLES[target.label]


def half_rule(target):
    """(the half dtypes the target promotes, its output rules)."""
    if isinstance(target.row, _model.EditSource):
        return (), None  # its half rule is its network's (EDITED_NETWORK_RULE)
    if target.row is not None:
        if not getattr(target.row, "half_inputs", True):
            return (), target.row.outputs  # the release's answer to half inputs (its error) is kept
        # a kernel-gated row promotes only the half dtypes this torch has no kernel for
        return target.row.promoted_dtypes(), target.row.outputs
    kernels = getattr(target.gate, "kernels", ())
    if kernels:
        # so does a kernel-gated hand-written target (Se3's log and adjoint)
        return lacking(kernels), None
    return tuple(HALF_DTYPE_NAMES), None


def widened_example(target, factory, dtype):
    """The example's arguments with half widened to float32. A row: its tensors widened. A
    hand-written target: the float32 example (it may hold modules, or a dtype argument), whose
    tensors must be the half example's widened exactly (examples hold half-exact values)."""
    args = factory(dtype)
    if target.row is not None:
        return widened(args)
    wide = factory(torch.float32)
    for a, w in zip(args, wide):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a.float(), w), "the example's half values are not exact"
    return wide


# How half CPU networks compute (networks_cpu_half's cpu_half): "native", the release's half
# kernels (what GPUs and CPUs with avx512_fp16/amx run, whatever this CPU reports), or "float32",
# networks_cpu_half installed beside the fix in its float32 mode (what auto picks on a CPU without
# half arithmetic). The numerical contracts hold in both, on every CPU.
CPU_HALF_MODES = ("native", "float32")


@pytest.fixture(scope="module")
def fix_installed(request):
    """One fix applied (alone, or with networks_cpu_half in its float32 mode), for every test of
    its targets; yields the fix's status reason. Torn down (the previous shim state restored) when
    the next fix's tests come and after the module. The parameter: the fix's name, or (name,
    cpu_half mode)."""
    name, mode = request.param if isinstance(request.param, tuple) else (request.param, "native")
    fix = FIXES[name]
    if fix is KINDS_FIX:
        context = testing.use_fixes([fix])
    elif mode == "float32" and fix.name != "networks_cpu_half":
        context = testing.isolated(only=[fix.name, "networks_cpu_half"], cpu_half="float32")
    else:
        context = testing.isolated(only=[fix.name], cpu_half=mode)
    with context:
        if fix is KINDS_FIX:
            kornia_halfpatch.apply()
        yield kornia_halfpatch.status().fixes[fix.name].reason


@pytest.fixture
def installed(fix_installed, target):
    """(original, replacement, target) of the target, its fix applied alone. Looked up per test:
    unpatched() re-applies on leaving, which may build new replacement objects."""
    for _, installed_target, original, replacement in testing.installed_targets():
        if installed_target is target:
            return original, replacement, target
    pytest.skip(f"{target.label} is not installed here: {fix_installed}")


def rows(*selected, among=ROWS, modes=("native",)):
    """Parametrise a test by target (and by cpu_half mode: ``modes``), its fix installed."""
    chosen = list(selected) if selected else among
    params, ids = [], []
    for mode in modes:
        for fix, target in chosen:
            if mode != "native" and fix is KINDS_FIX:
                continue  # the stand-in table is alone in its registry: no networks_cpu_half beside it
            params.append(((fix.name, mode) if len(modes) > 1 else fix.name, target))
            ids.append(f"{fix.name}:{target.label}" + (f"-{mode}" if len(modes) > 1 else ""))
    # Module scope: pytest orders the tests by fix, so each fix is applied once for all of them.
    return pytest.mark.parametrize(
        ("fix_installed", "target"),
        params,
        ids=ids,
        indirect=["fix_installed"],
        scope="module",
    )


def widened(args):
    return tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16) else a for a in args)


def narrowed(out, dtype, rules):
    if isinstance(out, tuple):
        rules = rules or ("narrow",) * len(out)
        return tuple(narrowed(o, dtype, (rule,)) for o, rule in zip(out, rules))
    if isinstance(out, list):  # a list of tensors (ScalePyramid's levels): one rule for every item
        return [narrowed(o, dtype, rules) for o in out]
    if isinstance(out, torch.Tensor) and out.is_floating_point() and (not rules or rules[0] != FLOAT32):
        return out.to(dtype)
    if not isinstance(out, torch.Tensor) and isinstance(getattr(out, "data", None), torch.Tensor):
        # kornia's tensor wrappers (Quaternion, Vector3)
        return type(out)(narrowed(out.data, dtype, rules))
    return out


def same(a, b):
    if isinstance(a, dict):  # a network's outputs by name (LoFTR's matches)
        return type(a) is type(b) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(getattr(a, "data", None), torch.Tensor) and not isinstance(a, torch.Tensor):
        return type(a) is type(b) and same(a.data, b.data)  # kornia's tensor wrappers (Quaternion, Vector3)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and bitwise_equal(a, b)
    return a == b


def test_every_target_has_an_example_or_is_exempt_with_a_reason():
    labels = [target.label for fix, target in EVERY_TARGET if fix is not KINDS_FIX]
    assert len(set(labels)) == len(labels), "a label keys tests/examples.py: it must name one target"
    missing = [label for label in labels if label not in EXAMPLES and label not in EXEMPT]
    assert not missing, f"add an example (tests/examples.py EXAMPLES) or an exemption with a reason: {missing}"
    assert not set(EXAMPLES) & set(EXEMPT)
    assert all(reason.strip() for reason in EXEMPT.values())
    unknown = sorted((set(EXAMPLES) | set(EXEMPT)) - set(labels))
    assert not unknown, f"examples or exemptions for no target: {unknown}"


@rows(among=EXAMPLED, modes=CPU_HALF_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_full_precision_is_bitwise_the_original(installed, dtype):
    original, replacement, _ = installed
    args = example_factory(installed[2])(dtype)
    assert same(replacement(*args), original(*args))


@rows(among=EXAMPLED, modes=CPU_HALF_MODES)
def test_half_is_the_original_on_widened_inputs_narrowed_once(installed):
    original, replacement, target = installed
    row = target.row
    factory = example_factory(target)
    if isinstance(row, _model.WidenDtypes):
        for name in row.gains:
            replacement(*factory(HALF_DTYPE_NAMES[name]))  # accepted now
        message = None
        try:
            original(*factory(torch.int32))
        except TypeError as exc:
            message = str(exc)
        with pytest.raises(TypeError) as raised:
            replacement(*factory(torch.int32))
        assert str(raised.value) == message  # kornia's own error, unchanged
        return
    if target.candidates[0] in HALF_RULE_OF_THEIR_OWN:
        pytest.skip(HALF_RULE_OF_THEIR_OWN[target.candidates[0]])
    if isinstance(row, _model.EditSource):
        pytest.skip(EDITED_NETWORK_RULE)
    half, outputs = half_rule(target)
    for name in half:
        dtype = HALF_DTYPE_NAMES[name]
        args = factory(dtype)
        expected = narrowed(original(*widened_example(target, factory, dtype)), dtype, outputs)
        assert same(replacement(*args), expected), name
    for name in set(HALF_DTYPE_NAMES) - set(half):  # a half dtype the row leaves alone
        args = factory(HALF_DTYPE_NAMES[name])
        try:
            expected = original(*args)
        except (RuntimeError, NotImplementedError):
            continue
        except Exception as refused:  # noqa: BLE001 - the release's own dtype check (AutoAugment
            # refuses bfloat16, solve_pnp_dlt half): the same error, type and message
            with pytest.raises(type(refused)) as raised:
                replacement(*args)
            assert str(raised.value) == str(refused), name
            continue
        assert same(replacement(*args), expected), name


# --------------------------------------------------------------------------------------------
# Under torch.autocast: the example's float32 call inside autocast in each half dtype. Where half
# reaches a target through autocast (its matmuls and convolutions), the target computes the float32
# call outside autocast, bitwise; a target that does not act under autocast (a torch op for
# kornia's calls, a dtype validator, a row of other half dtypes) is the original under autocast.

# torch 2.1's CPU autocast takes bfloat16 only (float16 raises on entering): no caller can be in
# that state there.
AUTOCAST_DTYPES = [
    pytest.param(dtype, id=str(dtype), marks=pytest.mark.skipif(not cpu_autocast_accepts(dtype),
                                                               reason=f"this torch's CPU autocast refuses {dtype}"))
    for dtype in (torch.float16, torch.bfloat16)
]


# Hand-written targets that leave a float32 call under autocast to the release, and why.
AUTOCAST_LEFT_TO_THE_RELEASE = {
    "kornia.feature.scale_space_detector:MultiResolutionDetector.detect_features_on_single_level": (
        "a learned response model (KeyNet) runs in autocast's half as the release runs it (a network keeps half "
        "compute), the rest in float32: tests/test_autocast.py (single-level detection)"),
}


# A source edit (networks_half) keeps its network in half and takes only one step to float32: its half
# and autocast results are its network's, held to float64 by tests/test_fix_networks_half.py.
EDITED_NETWORK_RULE = "a source edit: its half rule is its network's (tests/test_fix_networks_half.py)"


def autocast_rule(target, dtype):
    """What the target does for a float32 call under autocast in ``dtype``: "float32" (the float32
    call outside autocast), "narrow" (the same narrowed to ``dtype``) or None (the original's
    autocast call)."""
    if target.candidates[0] in AUTOCAST_LEFT_TO_THE_RELEASE:
        return None
    row = target.row
    if isinstance(row, _model.WidenDtypes):
        return None
    if isinstance(row, _model.Promote):
        promoted = row.promoted_dtypes()
        return row.autocast if str(dtype).replace("torch.", "") in promoted else None
    return "float32"  # a hand-written target: the float32 call where half would reach it


def row_acts_on(target, original, args):
    """Whether a row's device and guard let it act on the example ``args``."""
    row = target.row
    bound = inspect.signature(_codegen.python_function_of(original)).bind(*args)
    bound.apply_defaults()
    trigger = bound.arguments[row.trigger] if row.trigger else next(a for a in args if isinstance(a, torch.Tensor))
    if row.device is not None and trigger.device.type != row.device:
        return False
    if row.guard is not None:
        return bool(_model.load(row.guard)(*[bound.arguments[name] for name in row.guard_arguments]))
    return True


@rows(among=EXAMPLED, modes=CPU_HALF_MODES)
@pytest.mark.parametrize("autocast_dtype", AUTOCAST_DTYPES)
def test_under_autocast_a_float32_call_is_the_float32_call_outside_autocast(installed, autocast_dtype):
    original, replacement, target = installed
    if target.candidates[0] in AUTOCAST_LEFT_TO_THE_RELEASE:
        pytest.skip(AUTOCAST_LEFT_TO_THE_RELEASE[target.candidates[0]])
    if isinstance(target.row, _model.EditSource):
        pytest.skip(EDITED_NETWORK_RULE)
    factory = example_factory(target)
    rule = autocast_rule(target, autocast_dtype)
    if rule is not None and target.row is not None and not row_acts_on(target, original, factory(torch.float32)):
        rule = None
    if rule is None:
        # The original's autocast call, untouched: the same result, or the same error (the
        # release's own under autocast, e.g. Tensor.cross of float32 and half: another fix's row,
        # not installed in this block, is what repairs that in a program).
        args = factory(torch.float32)  # built outside autocast (examples may multiply matrices)
        with torch.autocast("cpu", dtype=autocast_dtype):
            try:
                expected = original(*args)
            except Exception as refused:  # noqa: BLE001 - compared below
                args = factory(torch.float32)
                with pytest.raises(type(refused)):
                    replacement(*args)
                return
    args = factory(torch.float32)  # built outside autocast (examples may multiply matrices)
    with torch.autocast("cpu", dtype=autocast_dtype):
        got = replacement(*args)
    if rule is not None:
        expected = original(*factory(torch.float32))  # afresh: a call may update a module's state
        if rule == "narrow":
            expected = narrowed(expected, autocast_dtype, None)
    assert same(got, expected), f"autocast {autocast_dtype}: rule {rule}"


@rows(among=ROWS)
@pytest.mark.parametrize("autocast_dtype", AUTOCAST_DTYPES)
def test_under_autocast_a_half_call_is_the_float32_call_on_the_widened_inputs(installed, autocast_dtype):
    """A half tensor reaching a row under autocast (an activation of the caller's autocast
    network): the float32 computation runs with autocast off; a kornia function returns its
    float32 outputs (autocast's convention for its float32 ops), a torch op stood in for
    narrows them to the input's dtype, as outside autocast."""
    original, replacement, target = installed
    row = target.row
    if not isinstance(row, _model.Promote) or not row.half_inputs:
        pytest.skip("not a row taking half inputs")
    factory = example_factory(target)
    for name in row.promoted_dtypes():
        dtype = HALF_DTYPE_NAMES[name]
        args = factory(dtype)
        if not row_acts_on(target, original, args):
            continue
        with torch.autocast("cpu", dtype=autocast_dtype):
            got = replacement(*args)
        computed = original(*widened_example(target, factory, dtype))
        expected = computed if row.autocast == "float32" else narrowed(computed, dtype, row.outputs)
        assert same(got, expected), name


@rows()
def test_a_non_tensor_input_gets_the_originals_own_error(installed):
    """kornia's own "Not a Tensor type" checks: a list where the trigger tensor goes must reach the
    original (its error, type and message), not fail in the wrapper's dtype test."""
    original, replacement, target = installed
    row = target.row
    if not isinstance(row, _model.Promote):
        pytest.skip("not a promotion row")
    example = list(example_factory(target)(HALF_DTYPE_NAMES[row.half[0]]))

    def outcome(function, args):
        try:
            function(*args)
        except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
            return type(exc), str(exc)
        return None

    # every tensor argument in turn (the trigger, or another one the wrapper would widen), with
    # the others in a half dtype so the wrapper takes its float32 path where it can. Rows with a
    # guard: the trigger only (a guard reads its own arguments' shapes; see the report of dtypes2).
    tensors = [i for i, a in enumerate(example) if isinstance(a, torch.Tensor)]
    if row.guard is not None:
        names = list(inspect.signature(original).parameters)
        tensors = [names.index(row.trigger)] if row.trigger is not None else tensors[:1]
    for index in tensors:
        args = list(example)
        args[index] = args[index].tolist()
        expected, got = outcome(original, args), outcome(replacement, args)
        if expected is not None and expected[0] not in (TypeError, ValueError):
            # the original fails for its half input itself (no half kernel): the replacement,
            # which runs in float32, must still refuse the list, with whatever error
            assert got is not None, index
            continue
        assert got == expected, index


@pytest.mark.parametrize("fix_installed", sorted({fix.name for fix, _ in EVERY_TARGET}), indirect=True, scope="module")
def test_revert_puts_the_original_back_in_every_alias(fix_installed):
    """Every installed target of the fix (each used to be a test of its own, with an unpatched()
    block and two module scans apiece): the replacement where the original was, and the
    original back in every alias inside one unpatched() block."""
    installed = [
        (target, original, replacement)
        for _, target, original, replacement in testing.installed_targets()
        if any(target is listed for _, listed in EVERY_TARGET)
    ]
    if not installed:
        pytest.skip(f"none of its targets is installed here: {fix_installed}")
    methods, functions = [], []
    for target, original, replacement in installed:
        (parent, attribute, current, _), _ = _engine.resolve(target)
        if inspect.isclass(parent):  # a method: the class holds it, for every instance
            assert current is replacement, target.label
            methods.append((target, parent, attribute, original))
        else:
            functions.append((target, original, replacement))

    def in_kornia():  # where kornia's modules bind each (replacement, original): one scan for all
        index = _bindings.BindingIndex([obj for _, original, replacement in functions for obj in (replacement, original)])
        return [
            [sorted(n + "." + a for n, _, a in index.bindings_of(obj) if _bindings.is_kornia_module(n)) for obj in (replacement, original)]
            for _, original, replacement in functions
        ]

    before = in_kornia()
    for (target, _, _), (held, original_held) in zip(functions, before):
        assert held or target.scope != _model.SCOPE_EVERYWHERE, target.label
        assert original_held == [] or target.scope == _model.SCOPE_KORNIA, target.label
    with kornia_halfpatch.unpatched():
        # An inherited method (networks_cpu_half's per-class _call_impl) is deleted from the
        # class again, so the class reaches the base's through its MRO.
        for target, parent, attribute, original in methods:
            assert _class_attribute(parent, attribute) is original, target.label
        for (target, _, _), (held, _), (replacement_held, original_held) in zip(functions, before, in_kornia()):
            assert replacement_held == [], target.label
            assert set(held) <= set(original_held), target.label
    for target, parent, attribute, _ in methods:
        assert kornia_halfpatch.is_patched(parent.__dict__[attribute]), target.label  # re-applied after the block


def _class_attribute(cls, name):
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    raise AttributeError(name)


def _installed_entry(replacement):
    return next(e for _, e in _installed.every_entry() if e.replacement is replacement)


@rows(among=EVERY_TARGET)
def test_replacement_pickles_by_reference_and_carries_the_originals_identity(installed):
    original, replacement, target = installed
    if isinstance(original, (staticmethod, classmethod)):
        # A static or class method (Se3.exp, Hyperplane.through): installed as the same kind of
        # descriptor, whose function carries the identity; callers reach the function (a class
        # method bound to its class), and that pickles by reference.
        assert type(replacement) is type(original)
        entry = _installed_entry(replacement)
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            assert getattr(replacement.__func__, attribute) == getattr(original.__func__, attribute), attribute
        assert same_signature(replacement.__func__, original.__func__)
        reached = getattr(entry.parent, entry.attribute)
        assert getattr(reached, "__func__", reached) is replacement.__func__
        assert pickle.loads(pickle.dumps(reached)) == reached
        return
    # A @torch.jit.script original (0.8.3's sampson_epipolar_distance) carries the names of the
    # Python function it was compiled from, which the replacement takes.
    original = _codegen.python_function_of(original)
    # Kornia-scoped: torch's name holds torch's function, so pickle reaches the replacement
    # through a kornia_halfpatch._scoped attribute (resolving to the original where no shim is).
    scope = target.scope() if callable(target.scope) else target.scope  # asked at install, after configure
    scoped = scope == _model.SCOPE_KORNIA
    same = ("__name__", "__doc__", "__defaults__") if scoped else ("__module__", "__name__", "__qualname__", "__doc__", "__defaults__")
    entry = _installed_entry(replacement)
    if entry.inherited:
        # A per-class copy of an inherited method (networks_cpu_half's _call_impl): the base keeps
        # its own function under the original's name, so the copy is named after its class.
        assert (replacement.__module__, replacement.__qualname__) == (
            entry.parent.__module__, f"{entry.parent.__qualname__}.{entry.attribute}")
        same = tuple(name for name in same if name not in ("__module__", "__qualname__"))
    if not hasattr(original, "__defaults__"):
        same = same[:-1]  # a builtin (torch's conv2d): no defaults to carry, no signature to compare
    for attribute in same:
        expected = expected_defaults(original) if attribute == "__defaults__" else getattr(original, attribute)
        assert getattr(replacement, attribute) == expected, attribute
    if scoped:
        assert replacement.__module__ == "kornia_halfpatch._scoped"
    assert same_signature(replacement, original)
    assert copy.deepcopy(replacement) is replacement and copy.copy(replacement) is replacement
    assert pickle.loads(pickle.dumps(replacement)) is replacement


@rows(among=EXAMPLED)
def test_torch_jit_script_holds_wherever_the_original_scripts(installed):
    original, replacement, target = installed
    if "." in _codegen.python_function_of(original).__qualname__:
        pytest.skip("a method: scripted with its module, not alone")
    try:
        scripted_original = torch.jit.script(original)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the original does not script either: {type(exc).__name__}")
    scripted = torch.jit.script(replacement)
    row = target.row
    if not isinstance(row, _model.WidenDtypes):
        try:
            scripted_original(*example_factory(target)(torch.float32))
        except Exception as exc:  # noqa: BLE001
            # e.g. kornia 0.7.0's camtoworld_*_4x4: its heterogeneous list literal compiles but the
            # interpreter refuses it when run ("Add new condition, expected Float...")
            pytest.skip(f"the scripted original fails when run: {type(exc).__name__}")
    if isinstance(row, _model.WidenDtypes):
        return  # compiles; a scripted call cannot take a Python list of dtypes (int[]), as the original
    factory = example_factory(target)
    dtypes = [torch.float32] + [HALF_DTYPE_NAMES[n] for n in half_rule(target)[0]]
    for dtype in dtypes:
        args = factory(dtype)
        assert same(scripted(*args), replacement(*args)), dtype


COMPILED = [row for row, name in zip(ROWS, IDS) if name in ("row_kinds:rgb_to_hsv", "geometry_subpix:_solve_cramer_sym3x3", "torch_ops:ellipse_to_laf")]


@pytest.mark.slow
@rows(*COMPILED)
def test_torch_compile_fullgraph_holds(installed):
    original, replacement, target = installed
    torch._dynamo.reset()
    try:
        compiled = inductor_compile(replacement, fullgraph=True)
        for name in target.row.half:
            args = example_factory(target)(HALF_DTYPE_NAMES[name])
            # Inductor may fuse the float32 arithmetic differently: equal to rounding, not bitwise.
            torch.testing.assert_close(compiled(*args), replacement(*args))
    finally:
        torch._dynamo.reset()


def test_the_battery_covers_every_row_kind():
    kinds = {type(target.row) for _, target in ROWS}
    assert kinds == set(_model.ROW_KINDS)


# --------------------------------------------------------------------------------------------
# Backward: training in half through a promoted target. The loss is a fixed seeded
# projection of the floating outputs, sum(P * out), with P's entries multiples of 1/16 in
# [-1, 1]: exact in float16 and bfloat16, so the gradient reaching the original's float32
# outputs through the wrapper's narrowing is P itself, as in a float32 run. The half backward
# is then the release's float32 backward on the widened inputs, narrowed once (the widening's
# backward) to each leaf's dtype: bitwise, as the forward.

# Targets whose half gradient is, by design, not the release's float32 gradient narrowed once:
# each takes 0.9.0's float32 formula where the release's gradient overflows the half range.
# Checked here for what still holds (every leaf reached, in its own dtype, finite where said);
# their values are tested with their fix.
_TAKES_090S_FORMULA = (
    "the half path takes 0.9.0's float32 formula, whose gradient differs from the release's "
    "(tested with its fix): ")
BACKWARD_RULE_OF_ITS_OWN = {
    # A side of 1 (the example's depth): the release normalises it with 2/eps = 2e14, so its
    # float32 gradient through that entry is ~1e14 or exactly 0 (Inf or 0 narrowed to float16);
    # the half path's scale 1 gives the same forward here but a finite, different gradient.
    "normalize_homography3d": _TAKES_090S_FORMULA + "a side of 1 normalised with scale 1, not 2/eps",
}
# The release's float32 gradient overflows float16 at these inputs (the examples include them); the
# half path takes 0.9.0's float32 formula there, which is finite (their values are tested with their fix).
BACKWARD_RULE_OF_ITS_OWN.update({
    "rgb_to_hls": _TAKES_090S_FORMULA + "gray pixels (the release's float32 gradient 4.3e8 overflows float16)",
    "SIFTDescriptor.forward": _TAKES_090S_FORMULA + "a flat patch (the release's float32 gradient 1.4e12 "
                              "overflows float16)",
})
FINITE_HALF_GRADIENT = set(BACKWARD_RULE_OF_ITS_OWN)


def floating_outputs(out):
    """The floating tensors of a result, in order (tuples, lists, kornia's tensor wrappers)."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in floating_outputs(item)]
    if isinstance(getattr(out, "data", None), torch.Tensor):  # Quaternion, Vector3
        return floating_outputs(out.data)
    return []


def leaves_of(args):
    """The example's arguments with each floating tensor a fresh leaf requiring grad, and the
    leaves in order: those tensors (tensor lists too) and every module's trainable parameters."""
    leaves = []

    def leaf(a):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a = a.detach().clone().requires_grad_(True)
            leaves.append(a)
        elif isinstance(a, list) and a and all(isinstance(x, torch.Tensor) for x in a):
            a = [leaf(x) for x in a]
        elif isinstance(a, torch.nn.Module):
            leaves.extend(p for p in a.parameters() if p.requires_grad)
        elif not isinstance(a, torch.Tensor) and isinstance(getattr(a, "data", None), torch.Tensor):
            a = type(a)(leaf(a.data))  # kornia's tensor wrappers (Quaternion, Vector3)
        return a

    return tuple(leaf(a) for a in args), leaves


def projection_loss(outputs, seed=2021):
    generator = torch.Generator().manual_seed(seed)
    loss = 0.0
    for out in outputs:
        if out.requires_grad:
            projection = torch.randint(-16, 17, out.shape, generator=generator).float() / 16
            loss = loss + (out.float() * projection).sum()
    return loss


def gradients(function, args):
    """(which outputs carry a gradient, the leaves, their gradients) of the projection loss;
    gradients None where a leaf is not reached."""
    args, leaves = leaves_of(args)
    if not leaves:
        pytest.skip("no floating tensor input or module parameter to differentiate (tensors held inside a camera or a Quaternion object)")
    outputs = floating_outputs(function(*args))
    loss = projection_loss(outputs)
    reached = [out.requires_grad for out in outputs]
    if not any(reached):
        return reached, leaves, None
    return reached, leaves, torch.autograd.grad(loss, leaves, allow_unused=True)


def backward_rule_of_its_own(target):
    """Why the target's half gradient is not the release's float32 gradient narrowed, or None."""
    if target.candidates[0] in HALF_RULE_OF_THEIR_OWN:
        return HALF_RULE_OF_THEIR_OWN[target.candidates[0]]
    return BACKWARD_RULE_OF_ITS_OWN.get(target.label) 


# The original's float32 gradients by original, with the arguments they were taken at: the
# examples' values are exact in both half dtypes, so the widened float16 and bfloat16 examples and
# the float32 example are the same call, backpropagated once for the three tests (CI time).
_FLOAT32_GRADIENTS = {}


def _same_call(first, second):
    """The same arguments: tensors bitwise, modules of one type with bitwise equal state."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second):
        if isinstance(a, torch.nn.Module):
            state_a, state_b = a.state_dict(), getattr(b, "state_dict", dict)()
            if type(a) is not type(b) or state_a.keys() != state_b.keys():
                return False
            if not all(bitwise_equal(state_a[k], state_b[k]) for k in state_a):
                return False
        else:
            try:
                if not same(a, b):
                    return False
            except RuntimeError:  # a container of tensors compared with == (a params dict): recompute
                return False
    return True


def float32_gradients_or_skip(original, args):
    cached = _FLOAT32_GRADIENTS.get(original)
    if cached is not None and _same_call(cached[0], args):
        return cached[1]
    try:
        reached, leaves, grads = gradients(original, args)
    except RuntimeError as exc:
        pytest.skip(f"the release's float32 backward raises: {str(exc).splitlines()[0][:120]}")
    if grads is None:
        # by rule: integer or boolean outputs, argmax, masks, or a result computed under no_grad
        pytest.skip("non-differentiable: no floating output of the release's float32 call carries a gradient")
    _FLOAT32_GRADIENTS[original] = (args, (reached, leaves, grads))
    return reached, leaves, grads


def assert_same_gradients(got, expected, leaves, what, values=True):
    """Each leaf reached where the reference reaches it, in the leaf's dtype; the values bitwise
    the reference's unless ``values`` is False."""
    for index, (g, e, leaf) in enumerate(zip(got, expected, leaves)):
        if e is None:
            assert g is None, f"{what}: leaf {index} gets a gradient the float32 run does not give"
            continue
        assert g is not None, f"{what}: leaf {index} ({leaf.dtype}) gets no gradient"
        assert g.dtype == leaf.dtype, f"{what}: leaf {index}'s gradient is {g.dtype}, the leaf {leaf.dtype}"
        assert not values or bitwise_equal(g, e), (
            f"{what}: leaf {index} {tuple(leaf.shape)}: {int((g != e).sum())} of {g.numel()} differ, "
            f"max |diff| {(g.double() - e.double()).abs().nan_to_num(float('inf')).max().item():.3g}")


@rows(among=EXAMPLED, modes=CPU_HALF_MODES)
def test_full_precision_backward_is_bitwise_the_original(installed):
    original, replacement, target = installed
    args = example_factory(target)(torch.float32)
    reached, leaves, expected = float32_gradients_or_skip(original, args)
    got_reached, got_leaves, got = gradients(replacement, example_factory(target)(torch.float32))
    assert got_reached == reached
    assert_same_gradients(got, expected, got_leaves, "float32")


# Examples whose half module is the user's, not kornia's call, and needs a half CPU kernel of its
# own: on a torch without it (2.1: float16 conv2d) that module runs widened in the half leg, as in
# tests/test_fix_kornia_dtypes.py; elsewhere nothing changes.
USERS_HALF_MODULE_KERNEL = {"MultiResolutionDetector.detect_features_on_single_level": "conv2d"}


def users_half_module(target, dtype):
    kernel = USERS_HALF_MODULE_KERNEL.get(target.label)
    if kernel is not None and lacks_half_kernel(kernel, dtype):
        return widening_missing_kernels()
    return contextlib.nullcontext()


@rows(among=EXAMPLED, modes=CPU_HALF_MODES)
def test_half_backward_is_the_originals_float32_backward_narrowed_once(installed):
    original, replacement, target = installed
    if isinstance(target.row, _model.WidenDtypes):
        pytest.skip("a dtype allow-list row: kornia's own computation runs on the half input, nothing is widened")
    if isinstance(target.row, _model.EditSource):
        pytest.skip(EDITED_NETWORK_RULE)
    own_rule = backward_rule_of_its_own(target)
    factory = example_factory(target)
    half, _ = half_rule(target)
    for name in half:
        dtype = HALF_DTYPE_NAMES[name]
        # A rule of its own: the float32 example's gradients say which leaves must be reached.
        wide_args = factory(torch.float32) if own_rule else widened_example(target, factory, dtype)
        reached, wide_leaves, wide = float32_gradients_or_skip(original, wide_args)
        with users_half_module(target, dtype):
            got_reached, leaves, got = gradients(replacement, factory(dtype))
        assert got_reached == reached, f"{name}: outputs carrying a gradient {got_reached}, float32 {reached}"
        assert len(leaves) == len(wide_leaves)
        for leaf, wide_leaf in zip(leaves, wide_leaves if not own_rule else ()):
            # the same values: the float32 run is on the half leaves widened (module parameters too)
            assert bitwise_equal(leaf.detach().float(), wide_leaf.detach().float()), name
        expected = [None if e is None else e.to(leaf.dtype) for e, leaf in zip(wide, leaves)]
        assert_same_gradients(got, expected, leaves, name, values=own_rule is None)
        if target.label in FINITE_HALF_GRADIENT:
            assert all(g is None or bool(g.isfinite().all()) for g in got), name
    for name in set(HALF_DTYPE_NAMES) - set(half):  # a half dtype the row leaves alone: the original's
        try:
            _, _, expected = gradients(original, factory(HALF_DTYPE_NAMES[name]))
        except (RuntimeError, NotImplementedError):
            continue
        except Exception as refused:  # noqa: BLE001 - the release's own dtype check: the same error
            with pytest.raises(type(refused)):
                gradients(replacement, factory(HALF_DTYPE_NAMES[name]))
            continue
        if expected is not None:
            _, leaves, got = gradients(replacement, factory(HALF_DTYPE_NAMES[name]))
            assert_same_gradients(got, expected, leaves, name)


# Scripted and compiled backward: a few representative rows only (compiling is costly): a color
# conversion, the 3x3 solve whose float16 gradients 0.8.3 broke, a warp and a loss.
SCRIPTED_BACKWARD = [row for row, name in zip(ROWS, IDS) if name in (
    "row_kinds:rgb_to_hsv", "geometry_subpix:_solve_cramer_sym3x3", "warp_geometry:warp_affine", "kornia_dtypes:ssim_loss")]


def ulp(x):
    """The spacing of x's dtype at each element of x (its distance to the next value away from 0)."""
    magnitude = x.abs()
    if x.dtype in (torch.float16, torch.bfloat16):
        # torch 2.1 has no float16 CPU nextafter: eps * 2**exponent (the smallest normal's
        # exponent for subnormals and 0), exact in float64.
        info = torch.finfo(x.dtype)
        exponent = torch.floor(torch.log2(magnitude.double().clamp_min(info.tiny)))
        return (info.eps * torch.exp2(exponent)).to(x.dtype)
    return torch.nextafter(magnitude, torch.full_like(magnitude, float("inf"))) - magnitude


def assert_within_one_ulp(got, expected, leaves, what, float32_ulps=1):
    """Each gradient in its leaf's dtype, within ``float32_ulps`` float32 ulps of the max (float32
    leaves) or one ulp of the leaf's half dtype (half leaves) of the reference."""
    for index, (g, e, leaf) in enumerate(zip(got, expected, leaves)):
        assert (g is None) == (e is None), f"{what}: leaf {index}"
        if e is None:
            continue
        assert g.dtype == leaf.dtype == e.dtype, f"{what}: leaf {index}"
        if leaf.dtype == torch.float32:
            allowed = float32_ulps * ulp(e.abs().max())
        else:
            allowed = ulp(e).float()
        excess = ((g.float() - e.float()).abs() - allowed).max()
        assert excess <= 0, f"{what}: leaf {index} beyond the allowed difference by {excess.item():.3g}"


# TorchScript's executor differentiates its optimised graphs with formulas of its own (autodiff),
# and which graph it optimises depends on the inputs each scripted function has seen (torch.jit.script
# caches the original's, scripted by the forward test first): its float32 gradients are a few
# float32 ulps from eager's and from another history's. Measured: 1.9e-6 at gradients of 2.4
# (8 ulps; row_kinds:rgb_to_hsv on 0.7.4). So: float32 within 16 float32 ulps of the largest
# gradient, half within one half ulp of the scripted original's float32 gradient narrowed.
SCRIPT_FLOAT32_ULPS = 16


@rows(*SCRIPTED_BACKWARD)
def test_torch_jit_script_backward_is_the_scripted_originals(installed):
    """Scripted, the wrapper's half backward is the scripted original's float32 backward narrowed
    once, its float32 backward the scripted original's, to the executor's own float32 rounding."""
    original, replacement, target = installed
    try:
        scripted_original = torch.jit.script(original)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the original does not script either: {type(exc).__name__}")
    scripted = torch.jit.script(replacement)
    factory = example_factory(target)

    def scripted_gradients(function, args):
        for _ in range(3):  # the profiling executor runs its optimised graph from the third call
            result = gradients(function, args)
        return result

    _, leaves, expected = scripted_gradients(scripted_original, factory(torch.float32))
    _, _, got = scripted_gradients(scripted, factory(torch.float32))
    assert_within_one_ulp(got, expected, leaves, "float32", SCRIPT_FLOAT32_ULPS)
    for name in half_rule(target)[0]:
        dtype = HALF_DTYPE_NAMES[name]
        _, _, wide = scripted_gradients(scripted_original, widened_example(target, factory, dtype))
        _, leaves, got = scripted_gradients(scripted, factory(dtype))
        expected = [None if e is None else e.to(leaf.dtype) for e, leaf in zip(wide, leaves)]
        assert_within_one_ulp(got, expected, leaves, name)


@pytest.mark.slow
@rows(*COMPILED[:1])
def test_torch_compile_backward_follows_the_eager_backward(installed):
    original, replacement, target = installed
    torch._dynamo.reset()
    try:
        compiled = inductor_compile(replacement, fullgraph=True)
        for name in target.row.half:
            args = example_factory(target)(HALF_DTYPE_NAMES[name])
            _, leaves, expected = gradients(replacement, args)
            _, _, got = gradients(compiled, args)
            # Inductor may fuse the float32 arithmetic differently: the float32 gradients agree to
            # float32 rounding, so the narrowed ones to one half ulp at most.
            for g, e, leaf in zip(got, expected, leaves):
                assert g.dtype == leaf.dtype
                torch.testing.assert_close(g, e)
    finally:
        torch._dynamo.reset()
