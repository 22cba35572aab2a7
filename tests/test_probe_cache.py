"""Probe answers kept on disk between processes (``kornia_halfpatch._probe_cache``): kept only
for a probe that returned, found again under the same key only, ignored when corrupt, off with
``KORNIA_HALFPATCH_CACHE=0``, and a warm first ``apply()`` (probe answers, kornia's bytecode
routes and the generated wrappers' code read from the cache) reports and installs what a cold
one does."""

import json
import os
import stat

import pytest

from kornia_halfpatch import _probe_cache
from support import needs_old_kornia, run_python


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The cache on (conftest.py turns it off for the tests), in a directory of this test's own."""
    monkeypatch.setenv(_probe_cache.ENV_CACHE, "1")
    monkeypatch.setenv(_probe_cache.ENV_CACHE_DIR, str(tmp_path / "cache"))
    _probe_cache.forget_loaded()
    yield tmp_path / "cache"
    _probe_cache.forget_loaded()


class Probe:
    """A probe that counts its runs and answers ``answer`` (or raises it, if an exception)."""

    def __init__(self, answer):
        self.answer, self.runs = answer, 0

    def __call__(self):
        self.runs += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def ask(probe, what="test:probe", originals=(), options=None):
    return _probe_cache.remembered(what, probe, list, tuple, originals=originals, options=options)


def next_process():
    """Save what this process learnt and forget it, as a new process would start."""
    _probe_cache.save()
    _probe_cache.forget_loaded()


def cache_files(directory):
    return sorted(p for p in directory.glob("probes-*.json"))


def original_one(x):
    return x


def original_two(x):
    return x + 1


def test_an_answer_is_probed_once_then_read_from_disk_by_the_next_process(cache_dir):
    probe = Probe(["float16"])
    assert ask(probe) == ["float16"] and probe.runs == 1
    next_process()
    assert len(cache_files(cache_dir)) == 1
    again = Probe(["something else"])
    assert ask(again) == ("float16",)  # decoded from the file: the probe did not run
    assert again.runs == 0


@pytest.mark.parametrize("change", ["variable", "option", "original", "installation"])
def test_a_changed_key_probes_again(cache_dir, monkeypatch, change):
    ask(Probe(["first"]), originals=(original_one,), options={"mode": "auto"})
    next_process()
    if change == "variable":
        monkeypatch.setenv("KORNIA_HALFPATCH_SOMETHING", "on")
    options, originals = {"mode": "auto"}, (original_one,)
    if change == "option":
        options = {"mode": "on"}
    if change == "original":
        originals = (original_two,)
    if change == "installation":
        installation = _probe_cache._installation()
        monkeypatch.setattr(_probe_cache, "_installation", lambda: {**installation, "torch": ["another torch"]})
    second = Probe(["second"])
    assert ask(second, originals=originals, options=options) == ["second"]
    assert second.runs == 1
    # ... and the unchanged key still finds its own answer.
    monkeypatch.undo()
    monkeypatch.setenv(_probe_cache.ENV_CACHE, "1")
    monkeypatch.setenv(_probe_cache.ENV_CACHE_DIR, str(cache_dir))
    _probe_cache.forget_loaded()
    first_again = Probe(["not asked"])
    assert ask(first_again, originals=(original_one,), options={"mode": "auto"}) == ("first",)
    assert first_again.runs == 0


def test_the_caches_own_variables_are_not_part_of_an_answers_key(cache_dir, monkeypatch):
    ask(Probe(["kept"]))
    next_process()
    monkeypatch.setenv(_probe_cache.ENV_CACHE, "on")  # another spelling of "on"
    probe = Probe(["probed"])
    assert ask(probe) == ("kept",) and probe.runs == 0


def test_a_probe_that_raises_is_not_kept(cache_dir):
    with pytest.raises(RuntimeError, match="probe broke"):
        ask(Probe(RuntimeError("probe broke")))
    next_process()
    probe = Probe(["fine"])
    assert ask(probe) == ["fine"] and probe.runs == 1


@pytest.mark.parametrize(
    "content", [b"", b"{not json", b"\x00\xff" * 10, b'{"format": 1, "answers": []}', b'{"format": 999, "answers": {}}']
)
def test_a_corrupt_cache_file_is_ignored_and_rewritten(cache_dir, content):
    ask(Probe(["kept"]))
    next_process()
    (path,) = cache_files(cache_dir)
    path.write_bytes(content)
    probe = Probe(["probed"])
    assert ask(probe) == ["probed"] and probe.runs == 1
    next_process()
    assert json.loads(path.read_text())["answers"]  # a valid file again
    assert ask(Probe(["not asked"])) == ("probed",)


def test_a_stored_value_the_decoder_rejects_is_probed_again(cache_dir):
    def strict(stored):
        if stored != ["valid"]:
            raise ValueError(stored)
        return stored

    _probe_cache.remembered("test:strict", Probe(["invalid"]), list, strict)
    next_process()
    probe = Probe(["valid"])
    assert _probe_cache.remembered("test:strict", probe, list, strict) == ["valid"] and probe.runs == 1


def test_an_original_without_a_lasting_identity_is_not_kept(cache_dir):
    unkeyable = object()
    ask(Probe(["first"]), originals=(unkeyable,))
    next_process()
    probe = Probe(["second"])
    assert ask(probe, originals=(unkeyable,)) == ["second"] and probe.runs == 1


def test_turned_off_by_the_environment_variable(cache_dir, monkeypatch):
    monkeypatch.setenv(_probe_cache.ENV_CACHE, "0")
    probe = Probe(["probed"])
    ask(probe)
    next_process()
    ask(probe)
    assert probe.runs == 2
    assert not cache_dir.exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_cache_directory_is_not_an_error(cache_dir):
    cache_dir.mkdir()
    cache_dir.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        probe = Probe(["probed"])
        ask(probe)
        next_process()
        ask(probe)
        assert probe.runs == 2
    finally:
        cache_dir.chmod(stat.S_IRWXU)


def test_a_cache_directory_that_cannot_exist_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_probe_cache.ENV_CACHE, "1")
    monkeypatch.setenv(_probe_cache.ENV_CACHE_DIR, str(blocker / "cache"))
    _probe_cache.forget_loaded()
    try:
        probe = Probe(["probed"])
        ask(probe)
        next_process()
        ask(probe)
        assert probe.runs == 2
    finally:
        _probe_cache.forget_loaded()


def test_the_default_place_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv(_probe_cache.ENV_CACHE_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _probe_cache.directory() == str(tmp_path / "kornia-halfpatch")


# A first apply() in a fresh interpreter: every fix's status (verdict, reason, rows, what was
# rebound) and the report's probe lines, and how many probes ran.
REPORT = """
import json, warnings
warnings.simplefilter("ignore")
import kornia
import kornia_halfpatch
from kornia_halfpatch import _kernels, _engine
runs = []
probe = _kernels._probe
_kernels._probe = lambda name: runs.append(name) or probe(name)
for fix in _engine.registry():
    object.__setattr__(fix, "probe", (lambda ask, name: lambda originals: runs.append(name) or ask(originals))(fix.probe, fix.name))
report = kornia_halfpatch.apply()
import inspect
from kornia_halfpatch import _installed
sources = {}
for name, entry in _installed.every_entry():
    code = getattr(entry.replacement, "__code__", None)
    if code is not None and code.co_filename.startswith("<kornia_halfpatch generated"):
        # a generated wrapper (compiled, or made from a kept plan): its own file name and source,
        # its signature and what its globals hold beyond the original module's
        bound = {
            key: getattr(value, "__qualname__", None) or repr(value)
            for key, value in entry.replacement.__globals__.items()
            if key.startswith("_halfpatch_") or key in ("Optional", "Union", "List", "Tuple", "Dict")
        }
        sources[entry.path] = [
            code.co_filename.split(" #")[0], inspect.getsource(entry.replacement),
            str(inspect.signature(entry.replacement)), sorted(bound.items()),
        ]
print(json.dumps({
    "sources": sources,
    "fixes": {name: [s.verdict.name, s.reason, s.targets, s.rebound, s.stale,
                     [[r.target, r.verdict.name, r.reason] for r in s.target_statuses]] for name, s in report.fixes.items()},
    "facts": report.facts,
    "runs": runs,
}))
"""


@pytest.mark.slow
@needs_old_kornia  # on kornia >= 0.9.0 no fix probes: there is nothing to keep
def test_a_warm_first_apply_reports_what_a_cold_one_does_without_probing(tmp_path):
    """For every fix, the verdicts read from the cache equal the ones the probes find."""
    on = {_probe_cache.ENV_CACHE: "1", _probe_cache.ENV_CACHE_DIR: str(tmp_path / "cache")}

    def first_apply(env):
        done = run_python(REPORT, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    off = first_apply({_probe_cache.ENV_CACHE: "0"})
    cold = first_apply(on)
    assert cache_files(tmp_path / "cache")
    kept = json.loads(cache_files(tmp_path / "cache")[0].read_text())["answers"]
    # the rows' wrappers are made from kept plans in the warm process
    assert sum(key.startswith('["plan:') for key in kept) >= 100
    warm = first_apply(on)
    assert cold["runs"] and off["runs"]
    # Only the fix that declares its probe not cacheable (networks_cpu_half) probes again.
    assert set(warm["runs"]) <= {"networks_cpu_half"}, warm["runs"]
    for name in off["fixes"]:
        assert warm["fixes"][name] == cold["fixes"][name] == off["fixes"][name], name
    assert warm["facts"] == cold["facts"] == off["facts"]
    # The generated wrappers (made from kept plans, their code read from the cache, when warm)
    # have the same source, signature and bindings.
    assert warm["sources"] and warm["sources"] == cold["sources"] == off["sources"]


def test_the_package_key_follows_each_source_files_stamp(tmp_path):
    """The shim's part of the cache key: the same files give the same key; an edited, added or
    removed source file another (the next process probes again rather than read answers the
    edited code may not give)."""
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    first = _probe_cache._package_digest(str(package))
    assert _probe_cache._package_digest(str(package)) == first
    (package / "a.py").write_text("x = 10\n")
    edited = _probe_cache._package_digest(str(package))
    assert edited != first
    (package / "sub" / "c.py").write_text("")
    added = _probe_cache._package_digest(str(package))
    assert added not in (first, edited)
    (package / "sub" / "c.py").unlink()
    assert _probe_cache._package_digest(str(package)) == edited


def _module_from(path, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kept_reaching_table_is_read_again_when_a_module_changes(cache_dir, tmp_path):
    """The modules' routes to the scoped names are kept as one answer keyed by every module's
    file stamp: a module whose file changed is read again, not answered from the stale table."""
    from kornia_halfpatch import _kornia_scope

    path = tmp_path / "reaching_module.py"
    path.write_text("import torch.nn.functional as F\n\ndef warp(x, g):\n    return F.grid_sample(x, g)\n")
    names = {"grid_sample", "conv2d"}

    def reaching(module):
        _kornia_scope.forget_routes(vars(module))
        found = _kornia_scope._reaching_by_module([(module.__name__, module, vars(module))], names)
        return found.get(id(module))

    module = _module_from(path, "reaching_module")
    assert reaching(module) == {"grid_sample"}
    assert reaching(module) == {"grid_sample"}  # read from the kept table
    _probe_cache.save()
    _probe_cache.forget_loaded()
    assert reaching(module) == {"grid_sample"}  # from disk
    path.write_text("import torch.nn.functional as F\n\ndef blur(x, k):\n    return F.conv2d(x, k) + 0\n")
    changed = _module_from(path, "reaching_module")
    assert reaching(changed) == {"conv2d"}
