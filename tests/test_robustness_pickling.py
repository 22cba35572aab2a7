"""Every replacement pickles as its original does, keeps its identity, survives copies.

The replacements are found through the public API only: every value (and every class member) of
every loaded kornia module, and of the module objects kornia modules hold (``F`` may be a view),
for which ``kornia_halfpatch.is_patched`` is true. Each replacement's names, signature, pickling
by reference and copies are the contract battery's (tests/test_rows.py, every target of every
fix); here: that the walk finds them, and pickles across processes.
"""

import copy
import functools
import inspect
import multiprocessing
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

import kornia
import kornia.feature
import kornia_halfpatch
from kornia_halfpatch import get_original, is_patched
from kornia_halfpatch import _scoped
from support import bitwise_equal, grid_module, needs_old_kornia

pytestmark = needs_old_kornia

# What every release in tox.ini gets replaced (0.8.3 adds the Cramer solver).
EXPECTED = {
    "create_meshgrid",
    "create_meshgrid3d",
    "SOSNet.forward",
    "HyNet.forward",
    "HardNet.forward",
    "HardNet8.forward",
    "SIFTDescriptor.forward",
    "DenseSIFTDescriptor.forward",
    "extract_patches_simple",
    "extract_patches_from_pyramid",
    "grid_sample",
}


@pytest.fixture(scope="module", autouse=True)
def shim_applied():
    with kornia_halfpatch.patched():
        yield


def installed_replacements():
    """{id: replacement} of everything the shim has installed, found by walking kornia."""
    found = {}

    def visit(namespace):
        for value in list(namespace.values()):
            if is_patched(value):
                found[id(value)] = value
            if inspect.isclass(value) and (value.__module__ or "").startswith("kornia"):
                for member in list(vars(value).values()):
                    if is_patched(member):
                        found[id(member)] = member

    for name, module in list(sys.modules.items()):
        if name == "kornia" or name.startswith("kornia."):
            namespace = getattr(module, "__dict__", {})
            visit(namespace)
            for value in list(namespace.values()):
                if inspect.ismodule(value) and value is not sys.modules.get(getattr(value, "__name__", "")):
                    visit(vars(value))  # a module view the shim put in place of torch's module
    return found


@pytest.fixture(scope="module")
def replacements():
    found = installed_replacements()
    assert found, "apply() installed nothing that is_patched() recognises"
    return sorted(found.values(), key=lambda f: (get_original(f).__module__, get_original(f).__qualname__))


def label(function):
    original = get_original(function)
    return f"{original.__module__}.{original.__qualname__}"


def test_every_fix_target_is_found(replacements):
    names = {get_original(f).__qualname__ for f in replacements}
    missing = {name for name in EXPECTED if name not in names}
    assert not missing, f"replacements not found by walking kornia: {missing}"


def kornia_scoped(replacement):
    """A replacement of another library's function for kornia's code only (grid_sample): the
    original's home keeps the original, so pickle finds the replacement through the shim."""
    return replacement.__module__ == "kornia_halfpatch._scoped"


# Each replacement's identity (names, docstring, signature), pickling by reference and copies:
# tests/test_rows.py, for every target of every fix. Here: what walking kornia finds, all fixes in.


@pytest.mark.slow
def test_kornia_scoped_replacements_unpickle_as_the_original_where_the_shim_is_not_applied(replacements):
    scoped = [r for r in replacements if kornia_scoped(r)]
    assert scoped, "no kornia-scoped replacement installed (warp_sampling's is one)"
    # One interpreter unpickles them all (one each was a minute on torch 2.1, whose import is
    # slow): each is looked up where torch keeps the original (the reference name encodes it:
    # torch's builtin conv2d calls itself torch._VariableFunctionsClass.conv2d, which no module
    # holds); unpickling never applies the shim, so no earlier one changes what a later resolves.
    homes = [_scoped._decode(replacement.__qualname__) for replacement in scoped]
    code = (
        "import functools, pickle, sys, importlib\n"
        "objects = pickle.loads(sys.stdin.buffer.read())\n"
        f"for obj, (home_module, home_name) in zip(objects, {homes!r}):\n"
        "    original = functools.reduce(getattr, home_name.split('.'), importlib.import_module(home_module))\n"
        "    print(obj is original, 'kornia_halfpatch._engine' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(scoped), capture_output=True, timeout=300)
    lines = done.stdout.decode().splitlines()
    assert len(lines) == len(scoped), (done.stdout, done.stderr[-2000:])
    for replacement, line in zip(scoped, lines):
        assert line.split() == ["True", "True"], (label(replacement), line, done.stderr[-2000:])


def test_patched_objects_survive_copies():
    patches = torch.full((2, 1, 32, 32), 0.5, dtype=torch.float16)
    model = kornia.feature.SOSNet(pretrained=False).eval()
    clone = copy.deepcopy(model).half()
    with torch.no_grad():
        out = clone(patches)
    assert out.shape == (2, 128) and bool(torch.isfinite(out).all())
    make = functools.partial(grid_module().create_meshgrid, 2, 300)
    restored = pickle.loads(pickle.dumps(copy.deepcopy(make)))
    cpu = torch.device("cpu")
    assert bitwise_equal(restored(True, cpu, torch.bfloat16), make(True, cpu, torch.bfloat16))


@pytest.mark.slow
def test_a_partial_of_a_patched_function_runs_in_a_spawned_process_pool():
    # The worker applies the shim first (initializer); unpickling the partial imports kornia,
    # the deferred hook patches it, and the reference resolves to the worker's replacement.
    make = grid_module().create_meshgrid
    assert is_patched(make)
    task = functools.partial(make, 2, 300)
    cpu = torch.device("cpu")
    expected = make(2, 300, True, cpu, torch.bfloat16)
    unpatched_answer = get_original(make)(2, 300, True, cpu, torch.bfloat16)
    assert not bitwise_equal(expected, unpatched_answer)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=kornia_halfpatch.apply) as pool:
        got = pool.submit(task, True, cpu, torch.bfloat16).result(timeout=240)
    assert bitwise_equal(got, expected)
